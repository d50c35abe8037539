/* test_leak_check.h - what a test counts after the application's last release to show
 * nothing of gpuhal is left: its threads still running and, on softcuda, CUDA objects
 * still alive. */
#ifndef GPUHAL_TEST_LEAK_CHECK_H
#define GPUHAL_TEST_LEAK_CHECK_H

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  void* h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  size_t (*report)(int) = NULL;
  size_t n = 0;
  void* p;
  if (!h) return 0;
  p = dlsym(h, "softcuda_leak_report");
  memcpy(&report, &p, sizeof(p));
  if (report) n = report(0);
  dlclose(h);
  return n;
}

#endif /* GPUHAL_TEST_LEAK_CHECK_H */
