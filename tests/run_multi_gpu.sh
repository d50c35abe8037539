#!/usr/bin/env bash
# Multi-GPU checks on a real machine (2+ GPUs, the NVIDIA driver, libnccl.so.2):
# builds the tests against the system driver, runs the multi-device and channel tests,
# the two-process all-reduce and bench_multi_gpu, and prints a summary.
#   tests/run_multi_gpu.sh [build-dir] [max-all-reduce-MiB]
# NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0); gpuhal never calls cuMulticastCreate.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build-multi-gpu}"
MAX_MIB="${2:-1024}"
export NCCL_NVLS_ENABLE=0
unset GPUHAL_CUDA_LIBRARY GPUHAL_NCCL_LIBRARY SOFTCUDA_DEVICES
declare -a RESULTS=()
note() { RESULTS+=("$1"); }

nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found)"
cmake -S "$ROOT/tests" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUHAL_TEST_DRIVER=system >/dev/null &&
  cmake --build "$BUILD" -j"$(nproc)" --target test_multi_device test_channel test_channel_two_process bench_multi_gpu
if [ $? -ne 0 ]; then echo "BUILD FAILED"; exit 1; fi

for t in test_multi_device test_channel test_channel_two_process; do
  echo "=== $t"
  (cd "$BUILD" && timeout 600 "./$t"); rc=$?
  case $rc in 0) note "$t: passed";; 77) note "$t: SKIPPED";; *) note "$t: FAILED (rc $rc)";; esac
done

echo "=== bench_multi_gpu (all-reduce up to $MAX_MIB MiB)"
BENCH_OUT="$(cd "$BUILD" && timeout 900 ./bench/bench_multi_gpu "$MAX_MIB" 20 2>&1)"; rc=$?
echo "$BENCH_OUT"
note "bench_multi_gpu: rc $rc; $(echo "$BENCH_OUT" | grep '^summary' || echo 'no summary')"

echo
echo "==== summary"
for r in "${RESULTS[@]}"; do echo "  $r"; done
