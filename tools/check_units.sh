#!/usr/bin/env bash
# Every src/ file compiles on its own, and atomics and threads go through their wrappers: each .c (and each module header) with only what it
# includes, as C99 under -Wall -Wextra -Wpedantic -Werror, with gcc and, when present,
# clang. GPUHAL__PRIVATE is defined empty here, so internal functions get external linkage:
# a file that uses a name it does not include the declaration of fails, and so does a
# static function no one in its file calls (dead code, which the amalgamation would hide).
# Usage: tools/check_units.sh [compiler...]   (default: gcc, and clang if installed)
set -euo pipefail
cd "$(dirname "$0")/.."
compilers=("$@")
if [ ${#compilers[@]} -eq 0 ]; then
  compilers=(gcc)
  command -v clang > /dev/null && compilers+=(clang)
fi
flags=(-std=c99 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -DGPUHAL_IMPLEMENTATION -DGPUHAL__PRIVATE= -Isrc)
failed=0
count=0
for cc in "${compilers[@]}"; do
  for f in src/*.c src/*.h; do
    case "$f" in
      src/prologue.h | src/epilogue.h | src/builtin_ptx.h) continue ;; # pieces of gpuhal.h, not units
    esac
    count=$((count + 1))
    if ! out=$("$cc" "${flags[@]}" -x c "$f" 2>&1); then
      echo "$f does not compile on its own ($cc):"
      echo "$out" | head -20
      failed=1
    fi
  done
done
# One implementation of atomics and threads: the wrappers in src/internal.h (and base.c).
raw=$(grep -nE '(^|[^_a-z])__atomic_[a-z]|pthread_(create|join|equal|self|mutex_trylock|attr)' src/*.c src/*.h |
  grep -vE '^src/(internal\.h|base\.c):' || true)
if [ -n "$raw" ]; then
  echo "$raw"
  echo "check_units: raw __atomic_* or pthread calls outside src/internal.h and src/base.c: use the gpuhal__atomic_* and gpuhal__thread_* wrappers"
  failed=1
fi
if [ "$failed" -ne 0 ]; then
  echo "check_units: failed: a src/ file must compile alone and include what it uses (CONTRIBUTING.md, 'Layout')"
  exit 1
fi
echo "check_units: $count compilations (${compilers[*]}), each src/ file on its own: clean"
