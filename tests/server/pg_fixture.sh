#!/usr/bin/env bash
# The CTest fixture `postgres` (tests/server/CMakeLists.txt): gives the postgres-labelled tests a database.
#
#   pg_fixture.sh start DIR   writes DIR/dsn (a libpq connection string) or DIR/skip (why there is none)
#   pg_fixture.sh stop DIR    stops the cluster it started, if any
#
# With SAFERETRY_PG_DSN set, that database is used and nothing is started. Else, when Debian's PostgreSQL
# server is installed, a throwaway cluster is started with pg_cluster.sh (a non-root user, a private port, its
# data and socket in a directory under /tmp) and stopped by `stop`. Else DIR/skip says why, and the tests skip printing it.
set -euo pipefail
cmd=${1:?usage: pg_fixture.sh start|stop DIR}
dir=${2:?usage: pg_fixture.sh start|stop DIR}
here=$(cd "$(dirname "$0")" && pwd)

case "$cmd" in
  start)
    rm -rf "$dir"
    mkdir -p "$dir"
    if [ -n "${SAFERETRY_PG_DSN:-}" ]; then
      printf '%s\n' "$SAFERETRY_PG_DSN" > "$dir/dsn"
      echo "pg_fixture: using SAFERETRY_PG_DSN"
      exit 0
    fi
    if ! ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1 && [ -z "${SAFERETRY_PG_BINDIR:-}" ]; then
      echo "PostgreSQL server not installed (no initdb under /usr/lib/postgresql/*/bin; scripts/install-deps.sh installs it) and SAFERETRY_PG_DSN not set" > "$dir/skip"
      cat "$dir/skip"
      exit 0
    fi
    # A port nobody listens on, from a range of its own below Linux's ephemeral ports (32768-60999): the
    # tests that start with this fixture open many client sockets, and one of them could otherwise take the
    # port between the probe and the server's bind. A start that fails anyway is tried on the next free port.
    # The cluster lives under /tmp, not in the build tree: its owner (a non-root user when run as root) must
    # be able to reach it, which a build tree under /root does not allow.
    tries=0
    for p in $(seq 25432 25491); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2> /dev/null; then continue; fi
      tries=$((tries + 1))
      cluster=$(mktemp -d /tmp/saferetry-pg-fixture.XXXXXX)
      printf '%s\n' "$cluster" > "$dir/cluster"
      if dsn=$("$here/pg_cluster.sh" start "$cluster" "$p" 2> "$dir/start.err"); then
        printf '%s\n' "$dsn" > "$dir/dsn"
        echo "pg_fixture: started a throwaway cluster in $cluster: $dsn"
        exit 0
      fi
      "$here/pg_cluster.sh" stop "$cluster" > /dev/null 2>&1 || true
      rm -f "$dir/cluster"
      if [ "$tries" -ge 3 ]; then break; fi
    done
    if [ "$tries" -eq 0 ]; then
      echo "no free port in 25432-25491 for a throwaway PostgreSQL cluster" > "$dir/skip"
      cat "$dir/skip"
      exit 0
    fi
    { echo "the throwaway PostgreSQL cluster did not start ($tries tries):"; cat "$dir/start.err"; } > "$dir/skip"
    cat "$dir/skip"
    # A cluster that should have started and did not is a failure, not a skip.
    exit 1
    ;;
  stop)
    if [ -f "$dir/cluster" ]; then "$here/pg_cluster.sh" stop "$(cat "$dir/cluster")"; fi
    rm -rf "$dir"
    ;;
  *) echo "usage: pg_fixture.sh start|stop DIR" >&2; exit 64 ;;
esac
