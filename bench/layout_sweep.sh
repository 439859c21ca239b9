#!/usr/bin/env bash
# The in-process calls' CPU time against their floors, read across several code layouts.
#
#   bench/layout_sweep.sh [WORK_DIR] [ROUNDS]     (default: build-layouts, 3 rounds)
#
# Why: a call and its floor are about 2 000 instructions each. At that size, where the linker puts
# the code (its alignment against cache lines and the branch predictor's tables) moves a figure by
# several per cent, and a change anywhere in the library moves it again. One binary is one draw of
# that layout. This script builds `call_benchmark` once per layout (the same sources, with the
# compiler's code-alignment flags varied), runs each binary ROUNDS times (9 repetitions in random
# order, pinned to one CPU) and prints every reading of `floor_ratio`, then for each scenario the
# median and the range over all layouts and rounds. The median is the figure that no one layout
# decides.
#
# It configures and builds one Release tree per layout under WORK_DIR (a few minutes each on two
# cores; an existing tree is reused). Run it on an idle machine.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-build-layouts}
rounds=${2:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS: a whole number >= 1, got '$rounds'" >&2; exit 2; }
# The layouts: the compiler's defaults, then function, loop and jump alignments that move every
# function and hot loop of both sides.
layouts=(
  ""
  "-falign-functions=32"
  "-falign-functions=64"
  "-falign-loops=32 -falign-jumps=32"
  "-falign-functions=64 -falign-loops=64"
)
mkdir -p "$work"
cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in "${!layouts[@]}"; do
  dir="$work/layout$i"
  echo "building layout $i (${layouts[$i]:-compiler defaults})..." >&2
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSAFERETRY_BUILD_BENCHMARKS=ON \
    -DCMAKE_CXX_FLAGS="${layouts[$i]}" > "$dir.configure.log"
  cmake --build "$dir" -j2 --target call_benchmark > "$dir.build.log"
done
for r in $(seq 1 "$rounds"); do
  for i in "${!layouts[@]}"; do
    echo "round $r, layout $i..." >&2
    taskset -c "$cpu" "$work/layout$i/bench/call_benchmark" --benchmark_filter=SystemClock \
      --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true \
      --benchmark_report_aggregates_only=true --benchmark_color=false 2>/dev/null |
      grep 'call scenario=' | sed "s/^/layout=$i round=$r /" | tee -a "$out"
  done
done
echo
printf '%-24s %8s %12s %s\n' scenario median range readings
for s in get keyed_post_minted keyed_post_caller_key; do
  grep " scenario=$s clock=system " "$out" | grep -o ' floor_ratio=[0-9.]*' | cut -d= -f2 | sort -n |
    awk -v s="$s" '{ v[NR] = $1 } END {
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%-24s %8.3f %5.2f-%-6.2f %d\n", s, m, v[1], v[NR], NR }'
done
echo "# floor_ratio: call CPU time / floor CPU time, SystemClock, pinned to CPU $cpu;" \
  "${#layouts[@]} layouts x $rounds rounds"
