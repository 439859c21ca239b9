#!/usr/bin/env bash
# Copyright 2026 The saferetry Authors. Licensed under the Apache License, Version 2.0.
#
# .ci/layer-check.sh against a scratch copy of the tree: it passes on the tree as it is, and fails, naming the
# file and the layers, once an include that runs upward is planted, or a public header no layer names.
#
#   layer_check_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "${1:?usage: layer_check_test.sh SOURCE_DIR}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fresh() {
  rm -rf "$work/tree"
  mkdir -p "$work/tree/docs" "$work/tree/.ci"
  cp -r "$src/include" "$src/src" "$work/tree/"
  cp "$src/docs/design.md" "$work/tree/docs/"
  cp "$src/.ci/layer-check.sh" "$work/tree/.ci/"
}
# expect_failure WHAT TEXT: the check fails and its output contains TEXT.
expect_failure() {
  if "$work/tree/.ci/layer-check.sh" "$work/tree" > "$work/out" 2>&1; then
    echo "FAIL: $1: the layer check passed"; cat "$work/out"; exit 1
  fi
  if ! grep -qF -- "$2" "$work/out"; then
    echo "FAIL: $1: the output does not say \"$2\""; cat "$work/out"; exit 1
  fi
  echo "ok: $1"
}

fresh
"$work/tree/.ci/layer-check.sh" "$work/tree" || { echo "FAIL: the tree as it is does not pass"; exit 1; }
echo "ok: the tree as it is passes"

# common/ reaching up to the drivers.
fresh
printf '#include "saferetry/client.h"\n' >> "$work/tree/src/common/clock.cc"
expect_failure "src/common/clock.cc includes saferetry/client.h" \
  "src/common/clock.cc (common) includes saferetry/client.h (call), a layer above it"

# A public header of the decision core reaching up to observability.
fresh
sed -i '0,/#include "saferetry\/clock.h"/s//#include "saferetry\/clock.h"\n#include "saferetry\/metrics.h"/' \
  "$work/tree/include/saferetry/backoff.h"
expect_failure "backoff.h includes metrics.h" \
  "include/saferetry/backoff.h (core) includes saferetry/metrics.h (observability), a layer above it"

# A private header of src/ one layer up.
fresh
printf '#include "call/call_session.h"\n' >> "$work/tree/src/core/deadline.cc"
expect_failure "src/core/deadline.cc includes call/call_session.h" \
  "src/core/deadline.cc (core) includes call/call_session.h (call), a layer above it"

# A new public header that no layer names.
fresh
printf '#pragma once\n' > "$work/tree/include/saferetry/unplaced.h"
expect_failure "a header no layer names" "include/saferetry/unplaced.h: no layer in docs/design.md names this header"
