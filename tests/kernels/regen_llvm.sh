#!/bin/sh
# Regenerates tests/kernels/llvm_*.ptx from llvm_*.ll with LLVM's NVPTX back end, the PTX
# that compilers built on LLVM (IREE, Triton, Julia, Numba) hand to the driver; the .ptx
# files are checked in, so that nothing else needs LLVM. Made with LLVM 14's llc: sm_80,
# PTX ISA 7.0. A file that needs a newer .version (LLVM 14 names none past 7.5) says so on
# a line "; regen: .version 8.1". Where ptxas is found (PTXAS, else on PATH or in
# /usr/local/cuda/bin) each file is also assembled for sm_90, as the driver's JIT will.
set -eu
cd "$(dirname "$0")"
LLC=${LLC:-llc}
PTXAS=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
for ll in llvm_*.ll; do
  ptx=${ll%.ll}.ptx
  "$LLC" -march=nvptx64 -mcpu=sm_80 -mattr=+ptx70 -O2 "$ll" -o "$ptx"
  version=$(sed -n 's|^; regen: \.version \([0-9.]*\)$|\1|p' "$ll")
  if [ -n "$version" ]; then
    sed -i "s/^\.version .*/.version $version/" "$ptx"
  fi
  if [ -x "$PTXAS" ]; then
    "$PTXAS" -arch=sm_90 "$ptx" -o /dev/null
  fi
done
