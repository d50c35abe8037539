#!/usr/bin/env bash
# Multi-GPU checks on a real machine (2+ GPUs, the NVIDIA driver, libnccl.so.2):
# builds the tests against the system driver, runs the multi-device and channel tests,
# the two-process all-reduce, and the benchmarks that mean something only with several GPUs
# (bench_multi_gpu, bench_share with one GPU per process, bench_module_library on every
# device), and prints a summary. Each step's whole output goes to LOG_DIR.
#   tests/run_multi_gpu.sh [build-dir] [max-all-reduce-MiB] [LOG_DIR]
# NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0); gpuhal never calls cuMulticastCreate.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build-multi-gpu}"
MAX_MIB="${2:-1024}"
LOGS="${3:-$BUILD/multi-gpu-logs}"
export NCCL_NVLS_ENABLE=0
unset GPUHAL_CUDA_LIBRARY GPUHAL_NCCL_LIBRARY SOFTCUDA_DEVICES
mkdir -p "$LOGS"
declare -a RESULTS=()
note() { RESULTS+=("$1"); }

nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found)"
cmake -S "$ROOT/tests" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUHAL_TEST_DRIVER=system >/dev/null &&
  cmake --build "$BUILD" -j"$(nproc)" --target test_multi_device test_channel test_channel_two_process \
    test_module_library bench_multi_gpu bench_share bench_module_library > "$LOGS/build.log" 2>&1
if [ $? -ne 0 ]; then echo "BUILD FAILED"; tail -n 30 "$LOGS/build.log"; exit 1; fi

for t in test_multi_device test_channel test_channel_two_process test_module_library; do
  echo "=== $t"
  (cd "$BUILD" && timeout 600 "./$t") > "$LOGS/$t.log" 2>&1; rc=$?
  grep -E "passed|failed|skipped|FAIL" "$LOGS/$t.log" | tail -n 5
  case $rc in 0) note "$t: passed";; 77) note "$t: SKIPPED";; *) note "$t: FAILED (rc $rc)";; esac
done

# bench NAME TIMEOUT ARGS...: runs bench/NAME, prints its output, notes its exit status.
bench() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name $*"
  (cd "$BUILD" && timeout "$limit" "./bench/$name" "$@") > "$LOGS/$name.log" 2>&1
  local rc=$?
  cat "$LOGS/$name.log"
  note "$name: rc $rc; $(grep '^summary' "$LOGS/$name.log" || echo 'see its table')"
}
bench bench_multi_gpu 900 "$MAX_MIB" 20
bench bench_share 300 600 5
bench bench_module_library 300 5

echo
echo "==== summary"
for r in "${RESULTS[@]}"; do echo "  $r"; done
