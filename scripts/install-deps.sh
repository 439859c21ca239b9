#!/usr/bin/env bash
# Installs what saferetry needs on Debian 12 (run as root). See docs/dependencies.md for why each is here.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
  ca-certificates openssl build-essential g++ cmake pkg-config git \
  libabsl-dev libcurl4-openssl-dev nlohmann-json3-dev \
  libgtest-dev libgmock-dev googletest libbenchmark-dev \
  libcli11-dev libcpp-httplib-dev libasio-dev libsqlite3-dev sqlite3 libpq-dev postgresql nghttp2-server \
  prometheus-cpp-dev \
  gnuplot-nox clang libclang-rt-14-dev clang-format valgrind python3
