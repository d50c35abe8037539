/* test_temp_dir.h - a flat scratch directory for tests that write files (module disk
 * caches, traces): made under $TMPDIR (or /tmp) and removed with the files in it. */
#ifndef GPUHAL_TEST_TEMP_DIR_H
#define GPUHAL_TEST_TEMP_DIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Makes a new directory named <$TMPDIR or /tmp>/gpuhal_<tag>_XXXXXX into out; 1 on success. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static int
tu_temp_dir(char* out, size_t size, const char* tag) {
  const char* base = getenv("TMPDIR");
  snprintf(out, size, "%s/gpuhal_%s_XXXXXX", base && base[0] ? base : "/tmp", tag);
  return mkdtemp(out) != NULL;
}

/* Removes a flat directory and the files in it (what tu_temp_dir made). */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static void
tu_remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  struct dirent* de;
  char path[4096];
  if (!d) return;
  while ((de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

#endif /* GPUHAL_TEST_TEMP_DIR_H */
