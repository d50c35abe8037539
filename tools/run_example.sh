#!/bin/sh
# Runs an example on the real CUDA driver when one is installed, else on softcuda (saying so).
# usage: tools/run_example.sh BUILD_DIR NAME [args...]
build=$1; name=$2; shift 2
exe="$build/examples/example_$name"
soft="$build/softcuda/libcuda.so.1"
if [ -n "$GPUHAL_CUDA_LIBRARY" ]; then
  exec "$exe" "$@"
fi
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' || [ -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] \
   || [ -e /usr/local/nvidia/lib64/libcuda.so.1 ]; then
  echo "gpuhal: running '$name' on the CUDA driver"
  exec "$exe" "$@"
fi
echo "gpuhal: no CUDA driver found on this machine: running '$name' on softcuda, the CPU stand-in ($soft)"
GPUHAL_CUDA_LIBRARY="$soft" exec "$exe" "$@"
