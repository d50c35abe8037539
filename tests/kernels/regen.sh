#!/bin/sh
# Regenerates tests/kernels/*.ptx from *.cu (needs nvcc; the .ptx files are checked in so
# that nothing else does). compute_75 is the oldest target gpuhal supports; a kernel that
# needs a newer one says so on a line "// regen: -arch=compute_90" (clusters, grid
# dependency control). .version is lowered to 8.0 so that any CUDA 12.0+ driver can JIT it
# (the kernels use nothing newer).
# gpuhal_builtin_fill.cu, gpuhal's own kernels, goes through tools/embed_ptx.py --nvcc
# (the same flags), which also embeds it in src/builtin_ptx.h.
set -eu
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
NVCC="$NVCC" python3 ../../tools/embed_ptx.py --nvcc
for cu in *.cu; do
  [ "$cu" = gpuhal_builtin_fill.cu ] && continue
  arch=$(sed -n 's|^// regen: \(-arch=compute_[0-9]*\)$|\1|p' "$cu")
  "$NVCC" -ptx "${arch:--arch=compute_75}" "$cu" -o "${cu%.cu}.ptx"
  sed -i 's/^\.version .*/.version 8.0/' "${cu%.cu}.ptx"
done
# A relocatable cubin (nvcc -rdc=true: ELF type REL), which gpuhal links before loading
# (test_executable relocatable_cubin_is_linked; it runs only on sm_90).
"$NVCC" -rdc=true -cubin -arch=sm_90 fill_u32.cu -o fill_u32_rdc_sm90.cubin
# PTX from LLVM's NVPTX back end (llvm_*.ll; needs llc): see regen_llvm.sh.
if command -v "${LLC:-llc}" >/dev/null 2>&1; then
  ./regen_llvm.sh
else
  echo "regen.sh: no llc: llvm_*.ptx left as they are (regen_llvm.sh makes them)" >&2
fi
