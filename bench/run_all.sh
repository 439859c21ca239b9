#!/usr/bin/env bash
# Runs every cost benchmark of the call and prints one table: figure, goal, measured, met.
#
#   bench/run_all.sh [BUILD_DIR]      (default: build; a Release build with benchmarks)
#
# How each figure is measured is in docs/performance.md. In-process figures are CPU time on one
# pinned CPU (Google Benchmark, median of 9 repetitions in random order); the libcurl figures are
# the client thread's CPU time with client and server pinned to one CPU, medians of rounds that
# alternate the sides;
# the async figures are the client process's CPU time against a raw curl multi loop. Run it on an
# idle machine: a loaded one inflates every figure.
set -euo pipefail
build=${1:-build}
bench=$build/bench
for b in call_benchmark curl_benchmark async_benchmark decision_benchmark; do
  [ -x "$bench/$b" ] || { echo "missing $bench/$b: build with -DSAFERETRY_BUILD_BENCHMARKS=ON" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')

echo "running call_benchmark (in process)..." >&2
taskset -c "$cpu" "$bench/call_benchmark" --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true \
  --benchmark_color=false > "$out/call.txt"
echo "running decision_benchmark..." >&2
taskset -c "$cpu" "$bench/decision_benchmark" --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true \
  --benchmark_color=false > "$out/decision.txt"
echo "running curl_benchmark (libcurl, loopback)..." >&2
"$bench/curl_benchmark" > "$out/curl.txt"
echo "running async_benchmark (libcurl multi, loopback)..." >&2
"$bench/async_benchmark" --calls 2000 --delay-ms 3000 --rounds 7 > "$out/async.txt"

# value FILE KEY: the number of the line "KEY=<number>".
value() { grep -o "^$2=[-0-9.]*" "$1" | tail -1 | cut -d= -f2; }
# call SCENARIO CLOCK FIELD: a field of the line "call scenario=... clock=... FIELD=<number> ...".
call() { grep "call scenario=$1 clock=$2 " "$out/call.txt" | grep -o " $3=[-0-9.]*" | cut -d= -f2; }
# pinned FIELD: a field of curl_benchmark's pinned phase ("pinned: ... FIELD=<number> ...").
pinned() { grep "^pinned: " "$out/curl.txt" | grep -o " $1=[-0-9.]*" | head -1 | cut -d= -f2; }
# The median CPU time (ns) of a Google Benchmark aggregate row.
median_ns() { awk -v n="$2_median" '$1 == n { print $4; exit }' "$1"; }

printf '%-58s %-10s %-10s %s\n' figure goal measured met
row() {  # row FIGURE OP GOAL MEASURED (OP "-": no goal, printed for reference)
  local met=no
  if [ "$2" = "-" ]; then met=-; elif [ -n "$4" ] && awk -v m="$4" -v g="$3" -v op="$2" \
      'BEGIN { exit !((op == "<=" && m <= g) || (op == ">=" && m >= g)) }'; then met=yes; fi
  printf '%-58s %-10s %-10s %s\n' "$1" "$2 $3" "${4:-?}" "$met"
}
# The goals of issue "one architecture, not two" (docs/performance.md). A row with the goal "-" is printed
# for reference.
row "GET, SystemClock: ns CPU per call" "<=" 250 "$(call get system cpu_ns_per_call)"
row "GET, SystemClock: allocations per call" "<=" 0 "$(call get system allocations_per_call)"
row "GET, SystemClock: clock reads per call" "<=" 2 "$(call get system clock_reads_per_call)"
row "keyed POST, minted key: allocations per call" "<=" 1 "$(call keyed_post_minted system allocations_per_call)"
row "keyed POST, minted key: ns CPU per call" "-" "" "$(call keyed_post_minted system cpu_ns_per_call)"
row "keyed POST, caller's key: allocations per call" "<=" 2 "$(call keyed_post_caller_key system allocations_per_call)"
row "keyed POST, caller's key: ns CPU per call" "-" "" "$(call keyed_post_caller_key system cpu_ns_per_call)"
row "GET, FakeClock: ns CPU per call" "-" "" "$(call get fake cpu_ns_per_call)"
row "libcurl: raw per-request loop, us CPU per call" "-" "" "$(pinned raw_per_request_cpu_us_per_call)"
row "libcurl: saferetry's call, us CPU per call" "-" "" "$(pinned saferetry_cpu_us_per_call)"
row "libcurl: us CPU over raw per-request loop (paired)" "<=" 1 \
  "$(value "$out/curl.txt" cpu_overhead_us_per_call_vs_raw_per_request_paired)"
row "libcurl: transport alone, us CPU over raw per-request" "<=" 0.3 \
  "$(value "$out/curl.txt" transport_only_cpu_overhead_us_per_call_vs_raw_per_request)"
row "async: CPU ratio vs raw multi per-request loop" ">=" 0.95 \
  "$(value "$out/async.txt" async_ratio_vs_raw_multi_per_request_paired)"
row "async: saferetry bytes per call in flight" "<=" 1024 "$(value "$out/async.txt" async_bytes_per_inflight_call)"
row "decision (classify + budget + backoff): ns" "<=" 30 "$(median_ns "$out/decision.txt" BM_Decision/ratio_budget)"
echo
echo "# measured: in-process figures are Google Benchmark CPU time, median of 9 repetitions in random order, pinned to CPU $cpu;"
echo "# libcurl figures are the client thread's CPU time with client and server pinned to one CPU, medians of"
echo "# alternating rounds; async figures are the client process's CPU time against a raw curl multi loop."
