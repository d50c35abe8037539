/* bench_util.h - what the benchmarks share: checking a status or a CUresult (printing it
 * under the benchmark's name and counting the failure) and the median of a run's samples.
 * Include after gpuhal.h. */
#ifndef GPUHAL_BENCH_UTIL_H
#define GPUHAL_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define BENCH_UNUSED __attribute__((unused))
#else
#define BENCH_UNUSED
#endif

/* 1 when `s` is success; else prints "<bench>: <what>: <message>", frees it, counts it. */
BENCH_UNUSED static int bench_ok(const char* bench, int* failures, gpuhal_status_t s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "%s: %s: %s\n", bench, what, gpuhal_status_message(s));
  gpuhal_status_free(s);
  ++*failures;
  return 0;
}

#ifdef GPUHAL_IMPLEMENTATION /* CUresult is known to the implementation only */
BENCH_UNUSED static int bench_ok_cu(const char* bench, int* failures, CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return 1;
  fprintf(stderr, "%s: %s: CUresult %d\n", bench, what, (int)r);
  ++*failures;
  return 0;
}
#endif

static int bench_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n); sorts v, so v[0] is the best afterwards. */
BENCH_UNUSED static double bench_median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif /* GPUHAL_BENCH_UTIL_H */
