/* test_leak_check.h - what a test counts after the application's last release to show
 * nothing of gpuhal is left: its threads still running, on softcuda CUDA objects still
 * alive, and, with the counting allocator as the driver's, what it allocated and did not
 * free and the calls made after the release. Include gpuhal.h first. */
#ifndef GPUHAL_TEST_LEAK_CHECK_H
#define GPUHAL_TEST_LEAK_CHECK_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h" /* tu_softcuda_symbol */

/* gpuhal threads of this process still running, a reaper (detached; it ends right after
 * its teardown) aside. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static int
tu_gpuhal_threads(void) {
  DIR* dir = opendir("/proc/self/task");
  struct dirent* e;
  int n = 0;
  if (!dir) return 0;
  while ((e = readdir(dir)) != NULL) {
    char path[300], name[64];
    FILE* f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    f = fopen(path, "r");
    if (!f) continue;
    if (fgets(name, sizeof(name), f) && !strncmp(name, "gpuhal", 6) && strncmp(name, "gpuhal-reaper", 13)) n++;
    fclose(f);
  }
  closedir(dir);
  return n;
}

/* softcuda: CUDA objects alive now (contexts, streams, pools, memory, modules); 0 on a real
 * driver. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static size_t
tu_softcuda_objects(void) {
  size_t (*report)(int) = NULL;
  void* p = tu_softcuda_symbol("softcuda_leak_report");
  memcpy(&report, &p, sizeof(p));
  return report ? report(0) : 0;
}

/* A driver allocator (options.allocator = counter->allocator, after tu_counter_init) that
 * counts what is allocated now (`live`) and the calls made once the test set `closed`
 * (`late`: after the application's last release returned, nothing may call it). Keep it
 * static: a late call must not find it gone. */
typedef struct tu_counter_s {
  gpuhal_allocator_t allocator;
  int64_t live;
  int32_t closed;
  int64_t late;
} tu_counter_t;
static void* tu_counter_alloc(size_t size, void* user) {
  tu_counter_t* c = (tu_counter_t*)user;
  void* p = malloc(size);
  if (__atomic_load_n(&c->closed, __ATOMIC_SEQ_CST)) __atomic_add_fetch(&c->late, 1, __ATOMIC_SEQ_CST);
  if (p) __atomic_add_fetch(&c->live, 1, __ATOMIC_SEQ_CST);
  return p;
}
static void tu_counter_free(void* ptr, void* user) {
  tu_counter_t* c = (tu_counter_t*)user;
  if (__atomic_load_n(&c->closed, __ATOMIC_SEQ_CST)) __atomic_add_fetch(&c->late, 1, __ATOMIC_SEQ_CST);
  if (ptr) __atomic_sub_fetch(&c->live, 1, __ATOMIC_SEQ_CST);
  free(ptr);
}
#if defined(__GNUC__)
__attribute__((unused))
#endif
static void
tu_counter_init(tu_counter_t* c) {
  memset(c, 0, sizeof(*c));
  c->allocator.alloc = tu_counter_alloc;
  c->allocator.free = tu_counter_free;
  c->allocator.user = c;
}
/* What it allocated and did not free. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static int64_t
tu_counter_live(tu_counter_t* c) {
  return __atomic_load_n(&c->live, __ATOMIC_SEQ_CST);
}

#endif /* GPUHAL_TEST_LEAK_CHECK_H */
