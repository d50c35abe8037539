#!/usr/bin/env bash
# Compiles what a user compiles, the way users compile it, and fails on any warning:
# every example (examples/*.c) and a one-file implementation TU, with gcc and clang, as C99
# and as C++, at -O0 -O2 -O3 -Os, all with -Wall -Wextra -Wpedantic -Werror. Objects only
# (-c): linking adds no warnings, and the optimiser's warnings (-Warray-bounds,
# -Wstringop-overflow, ...) come from inlining within the TU, which -c exercises.
#
# usage: tools/check_warnings.sh [OUT_DIR]   (JOBS=2; CCS="gcc clang"; OPTS="-O0 -O2 -O3 -Os")
# Prints one line per failing compile with its command and warnings; exits 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-build-warnings}
JOBS=${JOBS:-2}
CCS=${CCS:-"gcc clang"}
OPTS=${OPTS:-"-O0 -O2 -O3 -Os"}
WARN="-Wall -Wextra -Wpedantic -Werror"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# The implementation alone, as a user's gpuhal.c would be.
cat >"$OUT/impl.c" <<'EOF'
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
EOF

sources=("$OUT/impl.c")
for f in "$ROOT"/examples/*.c; do sources+=("$f"); done

# One line per compile: "cc lang opt source"; xargs runs them JOBS at a time.
jobs_file="$OUT/jobs.txt"
: >"$jobs_file"
for cc in $CCS; do
  if ! command -v "$cc" >/dev/null; then echo "check_warnings: $cc not found, skipped"; continue; fi
  for lang in c c++; do
    for opt in $OPTS; do
      for src in "${sources[@]}"; do echo "$cc $lang $opt $src" >>"$jobs_file"; done
    done
  done
done

compile_one() {
  local cc=$1 lang=$2 opt=$3 src=$4 std cxx obj log
  if [ "$lang" = c ]; then
    std="-std=c99"
    cxx=$cc
  else
    std="-std=c++11"
    case "$cc" in gcc) cxx=g++ ;; clang) cxx=clang++ ;; *) cxx=$cc ;; esac
  fi
  obj="$OUT/$(basename "$src" .c)-$cc-$lang$opt.o"
  log="$obj.log"
  if ! "$cxx" -x "$lang" $std $opt $WARN -I"$ROOT" -c "$src" -o "$obj" >"$log" 2>&1; then
    echo "FAIL: $cxx -x $lang $std $opt $WARN -c $src"
    head -n 40 "$log"
    return 1
  fi
  rm -f "$obj" "$log"
}
export -f compile_one
export OUT ROOT WARN

total=$(wc -l <"$jobs_file")
start=$(date +%s)
set +e
xargs -P "$JOBS" -L 1 bash -c 'compile_one "$@"' _ <"$jobs_file"
rc=$?
set -e
echo "check_warnings: $total compiles in $(($(date +%s) - start))s ($CCS; C99 and C++11; $OPTS)"
if [ "$rc" -ne 0 ]; then
  echo "check_warnings: FAILED (warnings above)"
  exit 1
fi
echo "check_warnings: no warnings"
