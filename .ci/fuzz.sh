#!/usr/bin/env bash
# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# Builds the libFuzzer targets with clang++ (AddressSanitizer + UndefinedBehaviorSanitizer, the
# library instrumented for coverage) in build-fuzz/ and runs each for N seconds (default 30).
# The seed corpus in tests/fuzz/corpus/<target>/ is read but never written: new inputs go to
# build-fuzz/corpus/<target>/, crashes to build-fuzz/artifacts/. Exits non-zero on the first crash.
#
#   .ci/fuzz.sh            # 30 s per target
#   .ci/fuzz.sh 3600       # the long run (docs/fuzzing.md)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
build="${SAFERETRY_FUZZ_BUILD_DIR:-build-fuzz}"

if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi

CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSAFERETRY_FUZZ=ON \
  -DSAFERETRY_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  -DSAFERETRY_BUILD_TESTS=OFF -DSAFERETRY_BUILD_BENCHMARKS=OFF -DSAFERETRY_INSTALL=OFF > /dev/null

targets=()
for src in tests/fuzz/*_fuzzer.cc; do
  t="$(basename "$src" .cc)"
  # Targets whose component is not in the tree are not configured (see tests/fuzz/CMakeLists.txt).
  if grep -q "^${t}:" <(cmake --build "$build" --target help | sed 's/^\.\.\. //; s/$/:/'); then
    targets+=("$t")
  fi
done
cmake --build "$build" -j2 --target "${targets[@]}"

mkdir -p "$build/artifacts" "$build/logs"
# Targets run two at a time (SAFERETRY_FUZZ_JOBS), one per core; each is then checked in turn.
jobs="${SAFERETRY_FUZZ_JOBS:-2}"
fuzz_one() {  # run in the background: the subshell becomes the fuzzer
  local t="$1" bin log
  mkdir -p "$build/corpus/$t"
  bin="$(find "$build" -maxdepth 3 -type f -name "$t" -perm -u+x | head -1)"
  log="$build/logs/$t.log"
  exec "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
    "$build/corpus/$t" "tests/fuzz/corpus/$t" > "$log" 2>&1
}
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    echo "--- $t (${seconds}s)"
    fuzz_one "$t" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    t="${batch[$k]}"
    log="$build/logs/$t.log"
    status=0
    wait "${pids[$k]}" || status=$?
    echo "$t:"
    grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
    if [ "$status" -ne 0 ] || ls "$build/artifacts/$t-"* > /dev/null 2>&1; then
      tail -40 "$log" >&2
      echo "fuzz.sh: $t failed (exit $status); inputs:" "$build/artifacts/$t-"* >&2
      kill "${pids[@]}" 2> /dev/null || true  # the rest of the batch
      exit 1
    fi
  done
done
echo "fuzz.sh: ${#targets[@]} targets, ${seconds}s each, ${jobs} at a time, no failures"
