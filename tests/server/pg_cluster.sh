#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the `postgres`-labelled tests.
#
#   pg_cluster.sh start DIR [PORT]   initdb + pg_ctl start; prints the connection string
#   pg_cluster.sh stop DIR           pg_ctl stop (immediate) and removes DIR
#
# Uses Debian's server binaries (not on PATH) and runs them as a non-root user: as root it creates the user
# `saferetry-ci` when missing. The cluster listens only on 127.0.0.1 at PORT (default 54329) and on a socket in
# DIR, so it never meets a packaged cluster on 5432.
set -euo pipefail
cmd=${1:?usage: pg_cluster.sh start|stop DIR [PORT]}
dir=${2:?usage: pg_cluster.sh start|stop DIR [PORT]}
port=${3:-54329}
bindir=${SAFERETRY_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$bindir/initdb" ] || { echo "pg_cluster: no initdb under /usr/lib/postgresql/*/bin" >&2; exit 1; }

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u saferetry-ci -- "$@"; else "$@"; fi
}

case "$cmd" in
  start)
    if [ "$(id -u)" = 0 ] && ! id saferetry-ci > /dev/null 2>&1; then
      useradd --system --no-create-home --shell /usr/sbin/nologin saferetry-ci
    fi
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown saferetry-ci "$dir"
    chmod 700 "$dir"
    as_owner "$bindir/initdb" -D "$dir/data" -U saferetry --auth=trust -E UTF8 --no-sync > "$dir/initdb.log"
    as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start \
      > /dev/null
    as_owner "$bindir/createdb" -h 127.0.0.1 -p "$port" -U saferetry saferetry_test
    echo "host=127.0.0.1 port=$port user=saferetry dbname=saferetry_test"
    ;;
  stop)
    if [ -d "$dir/data" ]; then
      as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop > /dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *) echo "usage: pg_cluster.sh start|stop DIR [PORT]" >&2; exit 64 ;;
esac
