#!/usr/bin/env bash
# Time-boxed libFuzzer run of every tests/fuzz target (called by .ci/run).
#   tools/run_fuzz.sh BUILD_DIR [SECONDS_PER_TARGET]   (default 30)
# Configures BUILD_DIR with clang and -DGPUHAL_FUZZ=ON, builds the fuzzers and softcuda,
# runs each from its checked-in seed corpus (tests/fuzz/corpus/NAME, read only: new inputs
# go to BUILD_DIR/fuzz-corpus/NAME), and fails on any crash, leak, timeout or broken
# promise; the reproducer lands in BUILD_DIR/fuzz-artifacts/. Exits 77 (skipped) with a
# clear line when clang or libFuzzer is missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:?usage: tools/run_fuzz.sh BUILD_DIR [SECONDS_PER_TARGET]}
SECONDS_PER_TARGET=${2:-30}
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
CLANG=${FUZZ_CC:-clang}
if ! command -v "$CLANG" >/dev/null; then
  echo "fuzz: SKIPPED: $CLANG not found (libFuzzer needs clang)"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
if ! "$CLANG" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz: SKIPPED: $CLANG cannot link -fsanitize=fuzzer (libFuzzer runtime missing): $(head -1 "$probe/err")"
  exit 77
fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$ROOT/tests" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CLANG" \
    -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" -DGPUHAL_FUZZ=ON >/dev/null
fi
targets=()
for src in "$ROOT"/tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  [ "$name" = fuzz_main ] && continue
  targets+=("$name")
done
cmake --build "$BUILD" -j "${JOBS:-2}" --target softcuda "${targets[@]}"
export GPUHAL_CUDA_LIBRARY="$BUILD/softcuda/libcuda.so.1"
export GPUHAL_NCCL_LIBRARY="$BUILD/softcuda/libnccl.so.2"
export SOFTCUDA_LEAKS=fatal
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
mkdir -p "$BUILD/fuzz-artifacts"
failed=0
for t in "${targets[@]}"; do
  corpus_name=${t#fuzz_}
  work="$BUILD/fuzz-corpus/$corpus_name"
  mkdir -p "$work"
  set +e
  "$BUILD/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$BUILD/fuzz-artifacts/$t-" "$work" "$ROOT/tests/fuzz/corpus/$corpus_name" >"$BUILD/$t.log" 2>&1
  rc=$?
  set -e
  runs=$(grep -E '^stat::number_of_executed_units' "$BUILD/$t.log" | awk '{print $2}' || true)
  cov=$(grep -oE 'cov: [0-9]+' "$BUILD/$t.log" | tail -1 || true)
  if [ $rc -eq 0 ]; then
    printf 'fuzz: %-22s ok      %ss, %s runs, %s\n' "$t" "$SECONDS_PER_TARGET" "${runs:-?}" "${cov:-cov: ?}"
  else
    failed=1
    printf 'fuzz: %-22s FAILED  (exit %d) reproducer in %s\n' "$t" "$rc" "$BUILD/fuzz-artifacts/"
    grep -E "ERROR|SUMMARY|broken promise|runtime error|#[0-9]+ 0x" "$BUILD/$t.log" | head -n 30 | sed 's/^/    | /'
  fi
done
exit $failed
