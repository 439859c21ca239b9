#!/usr/bin/env bash
# Every C++ file git tracks must be formatted as .clang-format says (Debian's clang-format).
# --fix formats them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.hpp' | while read -r f; do
  [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"; done)
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2> /tmp/saferetry-format.log; then
  grep -E '^[^ ].*: (error|warning):' /tmp/saferetry-format.log | cut -d: -f1 | sort -u |
    sed 's/^/not formatted: /'
  echo "run .ci/format-check.sh --fix" >&2
  exit 1
fi
echo "format: ${#files[@]} files formatted as .clang-format says"
