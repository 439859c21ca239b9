#!/usr/bin/env bash
# The instructions of one successful call against its floor (bench/call_benchmark's `Floor::Call`, the
# stripped-down call that does only the work no safe call can skip), counted by callgrind: a change that
# makes the call's own code grow fails CI. Instruction counts do not depend on the machine's load, so this
# is a test, not a timing; the times are in bench/call_benchmark.
#
#   call_instructions_test.sh VALGRIND CALL_BENCHMARK
#
# For each scenario it runs CALLS calls of each side under callgrind, collecting only inside
# `Client::Execute` or `Floor::Call` (everything they call included), and prints one line:
#   call_instructions scenario=<name> call=<per call> floor=<per call> ratio=<call/floor> max=<bound>
# The bounds are the ratios of 0.3.0's seventeenth pass (docs/performance.md) plus about 5 %: room for another
# libc or compiler, not for a new per-call step. Issue "a safe call that costs nothing" aims at 1.10.
set -euo pipefail
valgrind=$1
bench=$2
calls=4000
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

count() {  # count SCENARIO SIDE PATTERN -> instructions per call
  "$valgrind" --tool=callgrind --collect-atstart=no --toggle-collect="$3" \
    --callgrind-out-file="$out/$1.$2" "$bench" --calls_for_instructions="$1:$2:$calls" \
    >"$out/$1.$2.log" 2>&1 || { cat "$out/$1.$2.log"; exit 1; }
  local total
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out/$1.$2")
  [[ -n "$total" && "$total" -gt 0 ]] || { echo "no instructions collected for $1 $2"; exit 1; }
  echo $((total / calls))
}

failed=0
while read -r scenario max; do
  call=$(count "$scenario" call '*Client::Execute*')
  floor=$(count "$scenario" floor '*Floor::Call*')
  ratio=$(awk -v c="$call" -v f="$floor" 'BEGIN {printf "%.3f", c / f}')
  echo "call_instructions scenario=$scenario call=$call floor=$floor ratio=$ratio max=$max"
  if awk -v r="$ratio" -v m="$max" 'BEGIN {exit !(r > m)}'; then
    echo "  the call grew against its floor: $ratio > $max"
    failed=1
  fi
done <<'SCENARIOS'
get 1.24
keyed_post_minted 1.20
keyed_post_caller_key 1.15
SCENARIOS
exit $failed
