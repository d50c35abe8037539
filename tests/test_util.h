/* test_util.h - the tiny harness every gpuhal test uses.
 *
 *   TU_TEST(name) { TU_CHECK(x == 1); TU_CHECK_OK(gpuhal_call(...)); }
 *   TU_MAIN(TU_CASE(name), TU_CASE(other))
 *
 * TU_MAIN runs the cases (or those named on the command line), prints one line per case
 * and then "N passed, N failed, N skipped", and exits 0 (no failures), 1 (failures) or
 * 77 (every case skipped; CTest shows the test as skipped, not passed).
 */
#ifndef GPUHAL_TEST_UTIL_H
#define GPUHAL_TEST_UTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct tu_state_s {
  int failed;  /* checks failed in the current case */
  int skipped; /* the current case called TU_SKIP */
  const char* skip_reason;
} tu_state_t;
static tu_state_t tu_state;

#define TU_TEST(name) static void tu_case_##name(void)
#define TU_CASE(name) \
  { #name, tu_case_##name }

#define TU_FAIL_AT(file, line, ...)                                             \
  do {                                                                          \
    fprintf(stderr, "  FAIL %s:%d: ", file, line);                              \
    fprintf(stderr, __VA_ARGS__);                                               \
    fprintf(stderr, "\n");                                                      \
    __atomic_add_fetch(&tu_state.failed, 1, __ATOMIC_SEQ_CST); /* any thread */ \
  } while (0)

#define TU_CHECK(cond)                                        \
  do {                                                        \
    if (!(cond)) TU_FAIL_AT(__FILE__, __LINE__, "%s", #cond); \
  } while (0)
#define TU_REQUIRE(cond)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      TU_FAIL_AT(__FILE__, __LINE__, "required: %s", #cond); \
      return;                                                \
    }                                                        \
  } while (0)
#define TU_CHECK_EQ_INT(a, b)                                                                            \
  do {                                                                                                   \
    long long tu_a_ = (long long)(a), tu_b_ = (long long)(b);                                            \
    if (tu_a_ != tu_b_) TU_FAIL_AT(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b, tu_a_, tu_b_); \
  } while (0)
#define TU_CHECK_STR_CONTAINS(haystack, needle)                                                         \
  do {                                                                                                  \
    const char* tu_h_ = (haystack);                                                                     \
    if (!tu_h_ || !strstr(tu_h_, (needle)))                                                             \
      TU_FAIL_AT(__FILE__, __LINE__, "'%s' does not contain '%s'", tu_h_ ? tu_h_ : "(null)", (needle)); \
  } while (0)

#define TU_CHECK_STR_EQ(got, want)                                                               \
  do {                                                                                           \
    const char* tu_g_ = (got);                                                                   \
    if (!tu_g_ || strcmp(tu_g_, (want)) != 0)                                                    \
      TU_FAIL_AT(__FILE__, __LINE__, "got:\n%s\nwanted:\n%s", tu_g_ ? tu_g_ : "(null)", (want)); \
  } while (0)

/* Sleeps about `ns` nanoseconds (a test's pause; gpuhal's own sleep is internal). */
static inline void tu_sleep_ns(long long ns) {
  struct timespec ts;
  ts.tv_sec = (time_t)(ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* For gpuhal statuses (the test must include gpuhal.h first). Frees the status. */
#define TU_CHECK_OK(expr)                                                              \
  do {                                                                                 \
    gpuhal_status_t tu_s_ = (expr);                                                    \
    if (tu_s_) {                                                                       \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> %s", #expr, gpuhal_status_message(tu_s_)); \
      gpuhal_status_free(tu_s_);                                                       \
    }                                                                                  \
  } while (0)
#define TU_REQUIRE_OK(expr)                                                            \
  do {                                                                                 \
    gpuhal_status_t tu_s_ = (expr);                                                    \
    if (tu_s_) {                                                                       \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> %s", #expr, gpuhal_status_message(tu_s_)); \
      gpuhal_status_free(tu_s_);                                                       \
      return;                                                                          \
    }                                                                                  \
  } while (0)
/* Checks the code and that the message contains `needle`; frees the status. */
#define TU_CHECK_STATUS(expr, code, needle)                                                                   \
  do {                                                                                                        \
    gpuhal_status_t tu_s_ = (expr);                                                                           \
    if (gpuhal_status_code(tu_s_) != (code)) {                                                                \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> %s, expected %s", #expr, gpuhal_status_message(tu_s_),            \
                 gpuhal_status_code_string(code));                                                            \
    } else if ((needle) && !strstr(gpuhal_status_message(tu_s_), (needle) ? (needle) : "")) {                 \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> '%s' does not mention '%s'", #expr, gpuhal_status_message(tu_s_), \
                 (needle) ? (needle) : "");                                                                   \
    }                                                                                                         \
    gpuhal_status_free(tu_s_);                                                                                \
  } while (0)

#define TU_SKIP(reason)            \
  do {                             \
    tu_state.skipped = 1;          \
    tu_state.skip_reason = reason; \
    return;                        \
  } while (0)

/* 1 when the loaded CUDA driver is softcuda (it exports the softcuda_* query API). */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static int
tu_softcuda(void) {
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  void* h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  int yes = 0;
  if (!h) h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW);
  if (h) {
    yes = dlsym(h, "softcuda_query_calls") != NULL;
    dlclose(h);
  }
  return yes;
}

/* A function of softcuda's test API (tests/softcuda/softcuda.h) in the driver gpuhal loaded,
 * or NULL (not softcuda, or not loaded yet). The library stays loaded: gpuhal holds it. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static void*
tu_softcuda_symbol(const char* name) {
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  void* h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* p = h ? dlsym(h, name) : NULL;
  if (h) dlclose(h);
  return p;
}

/* Calls of a CUDA entry point so far ("cuLaunchKernel") on softcuda; 0 on a real driver. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static unsigned long long
tu_softcuda_calls(const char* entry) {
  unsigned long long (*calls)(const char*) = NULL;
  void* p = tu_softcuda_symbol("softcuda_query_calls");
  memcpy(&calls, &p, sizeof(p));
  return calls ? calls(entry) : 0;
}

/* softcuda's fault injection (tests/softcuda/README.md): arms the rules of `spec`
 * ("cuMemAlloc@1=CUDA_ERROR_OUT_OF_MEMORY,..."), or clears every rule for NULL. 0 on
 * success; -1 when the driver is not softcuda or the spec is refused. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static int
tu_softcuda_faults(const char* spec) {
  int (*set_faults)(const char*) = NULL;
  void (*clear_faults)(void) = NULL;
  void* p = tu_softcuda_symbol("softcuda_set_faults");
  memcpy(&set_faults, &p, sizeof(p));
  p = tu_softcuda_symbol("softcuda_clear_faults");
  memcpy(&clear_faults, &p, sizeof(p));
  if (!set_faults || !clear_faults) return -1;
  if (spec) return set_faults(spec) == 0 ? 0 : -1;
  clear_faults();
  return 0;
}

/* Reads a whole file into a NUL-terminated malloc'ed buffer (the caller frees it); NULL if
 * it cannot be read. With GPUHAL_KERNELS_DIR (set by CMake), tu_read_kernel_file reads
 * tests/kernels/<file>. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static char*
tu_read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  long n;
  char* data;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  data = n >= 0 ? (char*)malloc((size_t)n + 1) : NULL;
  if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
    free(data);
    data = NULL;
  }
  fclose(f);
  if (!data) return NULL;
  data[n] = 0;
  if (size) *size = (size_t)n;
  return data;
}
#ifdef GPUHAL_KERNELS_DIR
#if defined(__GNUC__)
__attribute__((unused))
#endif
static char*
tu_read_kernel_file(const char* file, size_t* size) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", GPUHAL_KERNELS_DIR, file);
  return tu_read_file(path, size);
}

/* A relocatable cubin of fill_u32 (nvcc -rdc=true), malloc'ed: on a GPU the checked-in
 * sm_90 one (NULL elsewhere: *size is 0), on softcuda its stand-in (tests/softcuda/README.md,
 * Modules) around fill_u32.ptx. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static char*
tu_rdc_fill_image(int softcuda, int cc_major, int cc_minor, size_t* size) {
  static const char marker[] = "SOFTCUDA-RELOCATABLE 1\n";
  size_t ptx_size = 0;
  char *ptx, *image;
  *size = 0;
  if (!softcuda) return cc_major == 9 && cc_minor == 0 ? tu_read_kernel_file("fill_u32_rdc_sm90.cubin", size) : NULL;
  ptx = tu_read_kernel_file("fill_u32.ptx", &ptx_size);
  if (!ptx) return NULL;
  image = (char*)calloc(1, 64 + sizeof(marker) + ptx_size);
  if (image) {
    memcpy(image, "\177ELF\002\001\001", 7);
    image[16] = 1;         /* ET_REL */
    image[18] = (char)190; /* EM_CUDA */
    image[0x34] = 64;      /* e_ehsize */
    memcpy(image + 64, marker, sizeof(marker) - 1);
    memcpy(image + 64 + sizeof(marker) - 1, ptx, ptx_size + 1);
    *size = 64 + sizeof(marker) - 1 + ptx_size + 1;
  }
  free(ptx);
  return image;
}

#ifdef GPUHAL_H /* gpuhal.h came first: helpers over its API */
/* Loads tests/kernels/NAME.ptx on `device` and looks up kernel NAME (*out_kernel may be
 * NULL when only the executable is wanted). */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static gpuhal_status_t
tu_load_kernel(gpuhal_device_t* device, const char* name, gpuhal_executable_t** out_executable,
               gpuhal_kernel_t** out_kernel) {
  char file[256];
  size_t size = 0;
  char* ptx;
  gpuhal_status_t st;
  snprintf(file, sizeof(file), "%s.ptx", name);
  ptx = tu_read_kernel_file(file, &size);
  if (!ptx) return gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "cannot read %s/%s", GPUHAL_KERNELS_DIR, file);
  st = gpuhal_executable_load(device, ptx, size, out_executable);
  free(ptx);
  if (!st && out_kernel) st = gpuhal_executable_kernel(*out_executable, name, out_kernel);
  return st;
}
#endif /* GPUHAL_H */
#endif

#ifdef GPUHAL_H
/* A driver and its device 0 in *driver / *device: 1 when ready. Otherwise 0, both NULL and
 * the case skipped (no device, or one below compute capability `min_major`, which `why`
 * needs) or failed (the reason printed). */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static int
tu_open_device(gpuhal_driver_t** driver, gpuhal_device_t** device, int min_major, const char* why) {
  gpuhal_device_info_t info;
  int count = 0;
  gpuhal_status_t st = gpuhal_driver_create(NULL, driver);
  memset(&info, 0, sizeof(info));
  *device = NULL;
  if (!st) st = gpuhal_driver_device_count(*driver, &count);
  if (!st && count > 0) st = gpuhal_device_create(*driver, 0, NULL, device);
  if (!st && count > 0) st = gpuhal_device_info(*device, &info);
  if (!st && (count == 0 || info.compute_capability_major < min_major)) {
    tu_state.skipped = 1;
    tu_state.skip_reason = count == 0 ? "no CUDA device" : why;
  }
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "driver and device: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
  if (st || tu_state.skipped) {
    gpuhal_device_release(*device);
    gpuhal_driver_release(*driver);
    *device = NULL;
    *driver = NULL;
    return 0;
  }
  return 1;
}

/* Executes `cb` on queue 0 of `device` and waits for it (30 s at most); returns the
 * execute's status. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static gpuhal_status_t
tu_execute_and_wait(gpuhal_driver_t* driver, gpuhal_device_t* device, gpuhal_command_buffer_t* cb,
                    const gpuhal_binding_table_t* table) {
  gpuhal_semaphore_t* sem = NULL;
  uint64_t one = 1;
  gpuhal_status_t st = gpuhal_semaphore_create(driver, 0, &sem);
  if (!st)
    st = gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one), cb,
                              table);
  if (!st) st = gpuhal_semaphore_wait(sem, 1, gpuhal_timeout_relative_ns(30000000000ll));
  gpuhal_semaphore_release(sem);
  return st;
}

/* Runs `exe`'s fill_u32 (tests/kernels/fill_u32.cu) over four words with `value` and checks
 * them; returns the first failure. */
#if defined(__GNUC__)
__attribute__((unused))
#endif
static gpuhal_status_t
tu_check_fill_u32(gpuhal_driver_t* driver, gpuhal_device_t* device, gpuhal_executable_t* exe, uint32_t value) {
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[3];
  uint32_t got[4] = {0, 0, 0, 0};
  int i;
  gpuhal_status_t st = gpuhal_executable_kernel(exe, "fill_u32", &kernel);
  if (!st) st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(got), &buffer);
  if (!st) st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(value);
  args[2] = gpuhal_arg_u32(4);
  if (!st) st = gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(4, 1, 1), 0, 3, args);
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st) st = tu_execute_and_wait(driver, device, cb, NULL);
  if (!st) st = gpuhal_buffer_read(buffer, 0, got, sizeof(got));
  for (i = 0; !st && i < 4; ++i)
    if (got[i] != value)
      st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "fill_u32: word %d is 0x%x, not 0x%x", i, (unsigned)got[i],
                              (unsigned)value);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  return st;
}
#endif /* GPUHAL_H */

typedef struct tu_case_s {
  const char* name;
  void (*fn)(void);
} tu_case_t;

#if defined(__GNUC__)
__attribute__((unused))
#endif
static int
tu_run(const tu_case_t* cases, int count, int argc, char** argv) {
  int passed = 0, failed = 0, skipped = 0, i, j;
  for (i = 0; i < count; ++i) {
    int selected = argc <= 1;
    for (j = 1; j < argc; ++j) selected |= strcmp(argv[j], cases[i].name) == 0;
    if (!selected) continue;
    memset(&tu_state, 0, sizeof(tu_state));
    fprintf(stderr, "[ RUN  ] %s\n", cases[i].name);
    cases[i].fn();
    if (tu_state.failed) {
      failed++;
      fprintf(stderr, "[ FAIL ] %s\n", cases[i].name);
    } else if (tu_state.skipped) {
      skipped++;
      fprintf(stderr, "[ SKIP ] %s: %s\n", cases[i].name, tu_state.skip_reason);
    } else {
      passed++;
      fprintf(stderr, "[  OK  ] %s\n", cases[i].name);
    }
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  fflush(stdout);
  if (failed) return 1;
  if (passed == 0 && skipped > 0) return 77;
  return 0;
}

#define TU_MAIN(...)                                                                    \
  int main(int argc, char** argv) {                                                     \
    static const tu_case_t tu_cases[] = {__VA_ARGS__};                                  \
    return tu_run(tu_cases, (int)(sizeof(tu_cases) / sizeof(tu_cases[0])), argc, argv); \
  }

#endif /* GPUHAL_TEST_UTIL_H */
