/* A main() for the fuzz targets when they are not linked with libFuzzer: runs
 * LLVMFuzzerTestOneInput on every file named on the command line (directories: every file
 * in them). CTest runs each target over its checked-in seed corpus this way in every build
 * (plain, ASan+UBSan, TSan, gcc or clang), so the corpus is a regression suite too. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int run_file(const char* path) {
  FILE* f = fopen(path, "rb");
  long n;
  uint8_t* data;
  if (!f) {
    fprintf(stderr, "fuzz_main: cannot open %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  data = (uint8_t*)malloc(n > 0 ? (size_t)n : 1);
  if (!data || (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n)) {
    fclose(f);
    free(data);
    fprintf(stderr, "fuzz_main: cannot read %s\n", path);
    return 1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(data, (size_t)n);
  free(data);
  return 0;
}

int main(int argc, char** argv) {
  int i, failed = 0, files = 0;
  for (i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "fuzz_main: no such file or directory: %s\n", argv[i]);
      return 1;
    }
    if (S_ISDIR(st.st_mode)) {
      DIR* d = opendir(argv[i]);
      struct dirent* e;
      while (d && (e = readdir(d)) != NULL) {
        char path[4096];
        struct stat fst;
        snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
        if (stat(path, &fst) == 0 && S_ISREG(fst.st_mode)) {
          failed |= run_file(path);
          files++;
        }
      }
      if (d) closedir(d);
    } else {
      failed |= run_file(argv[i]);
      files++;
    }
  }
  printf("%d inputs run, %s\n", files, failed ? "some could not be read" : "no crash");
  return failed;
}
