#!/usr/bin/env bash
# Checks (or, with --fix, applies) .clang-format on the repository's C sources.
# Left alone: generated files (gpuhal.h, src/builtin_ptx.h), src/cuda_api.h (aligned as
# CUDA's cuda.h is, for side-by-side reading), tests/abi (tables), tests/kernels (CUDA
# sources and their softcuda twins). Needs clang-format 14 (other versions format a little
# differently): CLANG_FORMAT=... to point at it; without it the check is skipped (exit 77).
set -euo pipefail
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-}
if [ -z "$CF" ]; then
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null && "$c" --version | grep -q "version 14\."; then CF=$c; break; fi
  done
fi
if [ -z "$CF" ]; then
  echo "check_format: clang-format 14 not found (set CLANG_FORMAT): skipped"
  exit 77
fi
files=$(git ls-files '*.c' '*.h' | grep -v -E '^(gpuhal\.h|src/builtin_ptx\.h|src/cuda_api\.h|tests/abi/|tests/kernels/)')
if [ "${1:-}" = "--fix" ]; then
  "$CF" -i $files
  exit 0
fi
bad=0
for f in $files; do
  if ! "$CF" "$f" | cmp -s - "$f"; then
    echo "check_format: $f is not formatted: run tools/check_format.sh --fix"
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "check_format: $(echo $files | wc -w) files formatted"
exit $bad
