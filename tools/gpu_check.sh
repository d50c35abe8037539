#!/usr/bin/env bash
# The reliability checks on a machine with a real NVIDIA GPU and driver (issue #9).
#   tools/gpu_check.sh LOG_DIR [BUILD_DIR]     (BUILD_DIR default: build-gpu)
# Builds tests/ against the system driver (-DGPUHAL_TEST_DRIVER=system), runs CTest
# (softcuda-only checks skip themselves), the stress test at full size, and every benchmark
# in tests/bench; writes everything under LOG_DIR and prints a summary. Exit status: 0 when
# CTest and the stress test passed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOGS=${1:?usage: tools/gpu_check.sh LOG_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build-gpu}
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
exec > >(tee "$LOGS/gpu_check.log") 2>&1
echo "== gpu_check $(date -u +%FT%TZ) on $(hostname)"
{ nvidia-smi || echo "nvidia-smi not available"; } > "$LOGS/nvidia-smi.txt" 2>&1
head -n 15 "$LOGS/nvidia-smi.txt"
unset GPUHAL_CUDA_LIBRARY SOFTCUDA_FAULTS SOFTCUDA_LEAKS
status=0

echo "== configure and build ($BUILD)"
cmake -S "$ROOT/tests" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUHAL_TEST_DRIVER=system > "$LOGS/configure.log" 2>&1 &&
  cmake --build "$BUILD" -j "${JOBS:-8}" > "$LOGS/build.log" 2>&1
if [ $? -ne 0 ]; then
  echo "build FAILED (see $LOGS/build.log)"; tail -n 30 "$LOGS/build.log"; exit 1
fi

echo "== ctest (real driver)"
# test_device_loss faults the GPU on purpose: it runs last and alone, after everything else.
ctest --test-dir "$BUILD" --output-on-failure -E '^test_device_loss$' -j "${CTEST_JOBS:-4}" > "$LOGS/ctest.log" 2>&1 || status=1
ctest --test-dir "$BUILD" --output-on-failure -R '^test_device_loss$' > "$LOGS/ctest_device_loss.log" 2>&1 || status=1
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|\*\*\*" "$LOGS/ctest.log" | tail -n 20
grep -E "tests passed|tests failed" "$LOGS/ctest_device_loss.log"

echo "== stress (16 threads, 2 devices if present, no injected faults on a real driver)"
for ops in 4000 40000; do
  GPUHAL_STRESS_OPS=$ops timeout 900 "$BUILD/test_stress" > "$LOGS/stress_$ops.log" 2>&1 || status=1
  grep -E "^stress:|passed" "$LOGS/stress_$ops.log"
done

echo "== benchmarks (tests/bench)"
for b in "$BUILD"/bench/bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  timeout 900 "$b" > "$LOGS/$name.log" 2>&1
  echo "$name: exit $? (log $LOGS/$name.log)"
  tail -n 25 "$LOGS/$name.log" | sed 's/^/    /'
done

echo "== summary: $([ $status -eq 0 ] && echo PASSED || echo FAILED); logs in $LOGS"
exit $status
