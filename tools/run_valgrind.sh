#!/usr/bin/env bash
# Valgrind memcheck over a representative subset of the suite (called by .ci/run).
#   tools/run_valgrind.sh BUILD_DIR [test ...]
# BUILD_DIR is a plain (unsanitized) build of tests/; the tests run on its softcuda with
# SOFTCUDA_LEAKS=fatal. A test fails on any memcheck error, a definite or indirect leak,
# a non-zero exit (77 = skipped is fine) or a timeout (VALGRIND_TIMEOUT seconds each, 600).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:?usage: tools/run_valgrind.sh BUILD_DIR [test ...]}
shift
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
# The subset: every module's main test, device loss, bad input and a short stress run.
TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then
  TESTS=(test_status test_device test_buffer test_semaphore test_queue test_queue_harvest test_executable
         test_command_buffer_graph test_command_buffer_condition test_module_library test_device_loss
         test_bad_input_all test_stress)
fi
SUPP="$ROOT/tests/valgrind.supp"
export GPUHAL_CUDA_LIBRARY="$BUILD/softcuda/libcuda.so.1"
export GPUHAL_NCCL_LIBRARY="$BUILD/softcuda/libnccl.so.2"
export SOFTCUDA_LEAKS=fatal
export GPUHAL_STRESS_OPS=${GPUHAL_STRESS_OPS:-400} # test_stress: a shorter run under valgrind
TIMEOUT=${VALGRIND_TIMEOUT:-600}
LOGDIR="$BUILD/valgrind"
mkdir -p "$LOGDIR"
failed=0
for t in "${TESTS[@]}"; do
  exe="$BUILD/$t"
  if [ ! -x "$exe" ]; then
    echo "valgrind: $t: not built, skipped"
    continue
  fi
  start=$(date +%s)
  set +e
  timeout -k 10 "$TIMEOUT" valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
    --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
    --suppressions="$SUPP" --fair-sched=yes --log-file="$LOGDIR/$t.log" "$exe" >"$LOGDIR/$t.out" 2>&1
  rc=$?
  set -e
  took=$(($(date +%s) - start))
  case $rc in
    0) verdict=ok ;;
    77) verdict=skipped ;;
    99) verdict="MEMCHECK ERRORS"; failed=1 ;;
    124|137) verdict="TIMEOUT after ${TIMEOUT}s"; failed=1 ;;
    *) verdict="FAILED (exit $rc)"; failed=1 ;;
  esac
  printf 'valgrind: %-28s %-18s %4ss\n' "$t" "$verdict" "$took"
  if [ "$verdict" != ok ] && [ "$verdict" != skipped ]; then
    tail -n 40 "$LOGDIR/$t.out" | sed 's/^/    | /'
    grep -A 25 -E "Invalid|uninitialised|definitely lost|indirectly lost|Mismatched|overlap" "$LOGDIR/$t.log" | head -n 80 | sed 's/^/    ! /' || true
  fi
done
exit $failed
