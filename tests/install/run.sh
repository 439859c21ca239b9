#!/usr/bin/env bash
# Installs the build in $1 into a scratch prefix, then builds and runs two consumer projects against it:
# one with find_package(saferetry CONFIG REQUIRED), one with pkg-config, one with add_subdirectory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -x "$work/prefix/bin/saferetry" || { echo "install: the saferetry CLI is missing"; exit 1; }

cmake -S "$here/cmake_consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/cmake" -j2 > /dev/null
"$work/cmake/consumer"
"$work/cmake/server_consumer"
"$work/cmake/journal_postgres_consumer"
if [ -x "$work/cmake/asio_consumer" ]; then "$work/cmake/asio_consumer"; fi
# Built when the package has the prometheus component; required when this build made it.
if compgen -G "$build/src/observability/prometheus/libsaferetry_prometheus.*" > /dev/null && [ ! -x "$work/cmake/prometheus_consumer" ]; then
  echo "install: saferetry::prometheus was built but the installed package does not provide it"; exit 1
fi
if [ -x "$work/cmake/prometheus_consumer" ]; then "$work/cmake/prometheus_consumer"; fi

PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:${PKG_CONFIG_PATH:-}" \
  g++ -std=c++17 -o "$work/pc_consumer" "$here/consumer_main.cc" \
  $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs saferetry)
"$work/pc_consumer"
g++ -std=c++17 -o "$work/pc_server_consumer" "$here/server_consumer_main.cc" \
  $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs saferetry-server-postgres)
"$work/pc_server_consumer"
g++ -std=c++17 -o "$work/pc_journal_postgres_consumer" "$here/journal_postgres_consumer_main.cc" \
  $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs saferetry-journal-postgres)
"$work/pc_journal_postgres_consumer"
cmake -S "$here/subdir_consumer" -B "$work/subdir" -DSAFERETRY_SOURCE_DIR="$here/../.." > /dev/null
cmake --build "$work/subdir" -j2 --target consumer > /dev/null
"$work/subdir/consumer"
echo "install test: find_package (with the server, PostgreSQL journal and, when built, asio and prometheus components), pkg-config and add_subdirectory consumers built and ran"
