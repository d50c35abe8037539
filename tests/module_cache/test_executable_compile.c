/* gpuhal_executable_compile: CUDA C++ compiled at run time by the real NVRTC (the same
 * binaries on softcuda, through the rtc_scale twin, and on a GPU): a kernel with a header
 * and -D options runs and its result is checked; compile errors carry NVRTC's log; bad
 * arguments name themselves; a missing or wrong NVRTC is UNAVAILABLE saying what was
 * tried; the disk cache serves a second process without running NVRTC, keeps different
 * options apart and survives a corrupt file; threads compile at once; on a GPU, an sm_
 * target (a cubin). Child processes are this binary run as `--child compile DIR ...`.
 *
 * NVRTC must be there: CMake finds it (GPUHAL_TEST_NVRTC names it); where it found none
 * the test skips, saying so. */
#include "gpuhal.h"

#include "test_util.h"
#include "test_module_cache_util.h"

#define CP_N 1000u /* elements: not a multiple of the block, so the bounds check matters */
#define CP_BLOCK 128u
#define CP_WAIT_S 120

static const char* cp_header_names[] = {"rtc_scale.h"};
static const char* cp_header_sources[] = {"#pragma once\n#define RTC_SCALE(x) ((x) * 3u)\n"};
static const char* cp_source =
    "#include \"rtc_scale.h\"\n"
    "#ifndef RTC_OFFSET\n"
    "#error RTC_OFFSET must be defined\n"
    "#endif\n"
    "extern \"C\" __global__ void rtc_scale(unsigned* data, unsigned n) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) data[i] = RTC_SCALE(data[i]) + RTC_OFFSET;\n"
    "}\n";

/* The options of the test kernel: its header and RTC_OFFSET=7 (extra: one more option). */
static gpuhal_compile_options_t cp_options(const char** argv, const char* extra) {
  gpuhal_compile_options_t o;
  memset(&o, 0, sizeof(o));
  argv[0] = "-DRTC_OFFSET=7u";
  argv[1] = extra;
  o.program_name = "rtc_scale.cu";
  o.options = argv;
  o.option_count = extra ? 2 : 1;
  o.header_names = cp_header_names;
  o.header_sources = cp_header_sources;
  o.header_count = 1;
  return o;
}

/* 1 when NVRTC is expected here; 0 after TU_SKIP. */
static int cp_have_nvrtc(void) {
  const char* lib = getenv("GPUHAL_TEST_NVRTC");
  return lib && lib[0];
}

/* Runs rtc_scale of `exe` over CP_N elements holding i and checks each became 3i + 7. */
static gpuhal_status_t cp_run_check(gpuhal_device_t* device, gpuhal_executable_t* exe) {
  gpuhal_driver_t* driver = gpuhal_device_driver(device);
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  unsigned host[CP_N];
  unsigned i;
  gpuhal_arg_t args[2];
  gpuhal_status_t st;
  for (i = 0; i < CP_N; ++i) host[i] = i;
  st = gpuhal_executable_kernel(exe, "rtc_scale", &kernel);
  if (!st) st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(host), &buffer);
  if (!st) st = gpuhal_buffer_write(buffer, 0, host, sizeof(host));
  if (!st) st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(CP_N);
  if (!st)
    st = gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3((CP_N + CP_BLOCK - 1) / CP_BLOCK, 1, 1),
                             gpuhal_dim3(CP_BLOCK, 1, 1), 0, 2, args);
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st) st = tu_execute_and_wait(driver, device, cb, NULL);
  if (!st) st = gpuhal_buffer_read(buffer, 0, host, sizeof(host));
  for (i = 0; !st && i < CP_N; ++i)
    if (host[i] != i * 3u + 7u)
      st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "rtc_scale: element %u is %u, expected %u", i, host[i],
                              i * 3u + 7u);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  if (!st) st = gpuhal_device_wait_idle(device, gpuhal_timeout_relative_ns((int64_t)CP_WAIT_S * 1000000000ll));
  return st;
}

/* Compiles the test kernel (with `extra`) on `device` and runs it. */
static gpuhal_status_t cp_compile_run(gpuhal_device_t* device, const char* extra) {
  const char* argv[2];
  gpuhal_compile_options_t o = cp_options(argv, extra);
  gpuhal_executable_t* exe = NULL;
  gpuhal_status_t st = gpuhal_executable_compile(device, cp_source, &o, &exe);
  if (!st) st = cp_run_check(device, exe);
  gpuhal_executable_release(exe);
  return st;
}

/* Waits (bounded) for a child; its exit code, or -1 when it hung (then killed). */
static int cp_wait(pid_t pid) {
  int64_t deadline = gpuhal_now_ns() + (int64_t)CP_WAIT_S * 1000000000ll;
  int status = 0;
  if (pid <= 0) return -1;
  while (gpuhal_now_ns() < deadline) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    tu_sleep_ns(5000000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

/* ---- child mode: --child compile DIR EXPECT_DISK_HITS EXPECT_NVRTC_RUNS ---- */
static int child_main(int argc, char** argv) {
  gpuhal_driver_t* driver;
  gpuhal_device_params_t params;
  gpuhal_device_t* device;
  gpuhal_module_cache_stats_t s;
  gpuhal_status_t st;
  int failures = 0;
  if (argc != 6 || strcmp(argv[2], "compile") != 0) return 2;
  driver = mc_driver();
  if (!driver) return 3;
  params = mc_params(argv[3]);
  device = mc_device(driver, 0, &params);
  if (!device) return 4;
  st = cp_compile_run(device, NULL);
  if (st) {
    fprintf(stderr, "  child: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    failures++;
  }
  s = mc_stats(device);
  if (s.source_disk_hits != strtoull(argv[4], NULL, 10) || s.source_compiles != strtoull(argv[5], NULL, 10)) {
    fprintf(stderr, "  child: %llu disk hits and %llu NVRTC runs, expected %s and %s\n",
            (unsigned long long)s.source_disk_hits, (unsigned long long)s.source_compiles, argv[4], argv[5]);
    failures++;
  }
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return failures ? 1 : 0;
}

TU_TEST(source_with_a_header_and_options_compiles_and_runs) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params = mc_params("");
  gpuhal_module_cache_stats_t s;
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_OK(cp_compile_run(device, NULL));
  /* Without options: the #error shows RTC_OFFSET did not come; without headers the
   * include is not found; no options struct at all, the default name. */
  {
    gpuhal_executable_t* exe = NULL;
    const char* argv[2];
    gpuhal_compile_options_t o = cp_options(argv, NULL);
    o.option_count = 0;
    TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "RTC_OFFSET must be defined");
    o.header_count = 0;
    TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "rtc_scale.h");
    TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, NULL, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "gpuhal_program.cu");
    TU_CHECK(exe == NULL);
  }
  /* Fast math and line info change nothing in this kernel's result. */
  TU_CHECK_OK(cp_compile_run(device, "--use_fast_math"));
  TU_CHECK_OK(cp_compile_run(device, "-lineinfo"));
  /* An older target than the device's: PTX the driver compiles for this GPU. */
  TU_CHECK_OK(cp_compile_run(device, "--gpu-architecture=compute_75"));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_compiles, 7);
  TU_CHECK_EQ_INT(s.source_disk_hits, 0);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(compile_errors_carry_the_log_and_the_program_name) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params = mc_params("");
  gpuhal_compile_options_t o;
  gpuhal_executable_t* exe = NULL;
  const char* bad = "extern \"C\" __global__ void broken(int* p) { p[0] = no_such_variable; }\n";
  const char* bad_option[] = {"--no-such-nvrtc-option"};
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  memset(&o, 0, sizeof(o));
  o.program_name = "broken.cu";
  TU_CHECK_STATUS(gpuhal_executable_compile(device, bad, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "broken.cu");
  TU_CHECK_STATUS(gpuhal_executable_compile(device, bad, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "no_such_variable");
  TU_CHECK(exe == NULL);
  o.options = bad_option;
  o.option_count = 1;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "options->options");
  /* Valid C++ that has no kernel: it compiles; looking a kernel up is NOT_FOUND. */
  TU_CHECK_OK(gpuhal_executable_compile(device, "__device__ int helper(int x) { return x + 1; }\n", NULL, &exe));
  if (exe) {
    gpuhal_kernel_t* k = NULL;
    TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "rtc_scale", &k), GPUHAL_STATUS_NOT_FOUND, "rtc_scale");
  }
  gpuhal_executable_release(exe);
  /* The device still compiles good source after all of that. */
  TU_CHECK_OK(cp_compile_run(device, NULL));
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(bad_arguments_name_themselves) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params = mc_params("");
  gpuhal_compile_options_t o;
  gpuhal_executable_t* exe = NULL;
  const char* with_null[] = {"-DA=1", NULL};
  const char* names[] = {"a.h"};
  const char* null_source[] = {NULL};
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, NULL, NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "out_executable");
  TU_CHECK_STATUS(gpuhal_executable_compile(NULL, cp_source, NULL, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(gpuhal_executable_compile(device, NULL, NULL, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "'source'");
  memset(&o, 0, sizeof(o));
  o.option_count = 2;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "options->options");
  o.options = with_null;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "options->options[1]");
  memset(&o, 0, sizeof(o));
  o.header_count = 1;
  o.header_names = names;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "options->header_names");
  o.header_sources = null_source;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "options->header_sources[0]");
  o.header_count = 5000;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, &o, &exe), GPUHAL_STATUS_OUT_OF_RANGE,
                  "options->header_count");
  TU_CHECK(exe == NULL);
  gpuhal_device_release(device);
  /* A released device is refused by name. */
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, NULL, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  gpuhal_driver_release(driver);
}

/* A driver whose NVRTC is `path`; its device 0 in *out_device. */
static gpuhal_driver_t* cp_driver_with_nvrtc(const char* path, gpuhal_device_t** out_device) {
  gpuhal_driver_options_t options;
  gpuhal_driver_t* driver = NULL;
  memset(&options, 0, sizeof(options));
  options.nvrtc_library = path;
  gpuhal_status_t st;
  *out_device = NULL;
  st = gpuhal_driver_create(&options, &driver);
  if (!st) st = gpuhal_device_create(driver, 0, NULL, out_device);
  if (st) {
    fprintf(stderr, "  setup: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_driver_release(driver);
    driver = NULL;
  }
  return driver;
}

TU_TEST(a_missing_or_wrong_nvrtc_is_unavailable_saying_what_was_tried) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* exe = NULL;
  const char* cuda = getenv("GPUHAL_CUDA_LIBRARY");
  driver = cp_driver_with_nvrtc("/nonexistent/libnvrtc.so.99", &device);
  if (!driver) TU_SKIP("no device");
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, NULL, &exe), GPUHAL_STATUS_UNAVAILABLE,
                  "/nonexistent/libnvrtc.so.99");
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, NULL, &exe), GPUHAL_STATUS_UNAVAILABLE,
                  "GPUHAL_NVRTC_LIBRARY");
  TU_CHECK(exe == NULL);
  /* The device is fine otherwise: a PTX load works. */
  TU_CHECK_OK(tu_load_kernel(device, "vector_add", &exe, NULL));
  gpuhal_executable_release(exe);
  exe = NULL;
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  /* A library that loads but is not NVRTC (the CUDA driver): named, with what it lacks. */
  driver = cp_driver_with_nvrtc(cuda && cuda[0] ? cuda : "libcuda.so.1", &device);
  TU_REQUIRE(driver != NULL);
  TU_CHECK_STATUS(gpuhal_executable_compile(device, cp_source, NULL, &exe), GPUHAL_STATUS_UNAVAILABLE,
                  "lacks 'nvrtcVersion'");
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  /* Too long a path is refused at driver creation. */
  {
    gpuhal_driver_options_t options;
    char path[600];
    memset(path, 'x', sizeof(path) - 1);
    path[sizeof(path) - 1] = 0;
    memset(&options, 0, sizeof(options));
    options.nvrtc_library = path;
    driver = NULL;
    TU_CHECK_STATUS(gpuhal_driver_create(&options, &driver), GPUHAL_STATUS_INVALID_ARGUMENT, "options->nvrtc_library");
    TU_CHECK(driver == NULL);
  }
}

TU_TEST(the_disk_cache_serves_a_second_process_without_nvrtc) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params;
  gpuhal_module_cache_stats_t s;
  char dir[256], first[4096], path[4096];
  unsigned long long bytes = 0;
  const char* hits[] = {"compile", dir, "1", "0"};
  const char* misses[] = {"compile", dir, "0", "1"};
  int files;
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  /* A first process compiles and writes; a second finds the file and runs no NVRTC. */
  TU_CHECK_EQ_INT(cp_wait(mc_spawn(misses, 4)), 0);
  TU_CHECK_EQ_INT(cp_wait(mc_spawn(hits, 4)), 0);
  driver = mc_driver();
  TU_REQUIRE(driver != NULL);
  params = mc_params(dir);
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_OK(cp_compile_run(device, NULL));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_disk_hits, 1);
  TU_CHECK_EQ_INT(s.source_compiles, 0);
  /* Other options are another program: NVRTC runs, a second file. */
  TU_CHECK_OK(cp_compile_run(device, "-DUNUSED_MACRO=1"));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_compiles, 1);
  files = mc_dir_files(dir, &bytes, first, sizeof(first));
  TU_CHECK(files >= 2);
  TU_CHECK(strstr(first, "-nvrtc.gpuhal") != NULL || files > 2);
  gpuhal_device_release(device);
  /* Every NVRTC file corrupted (a byte of each payload flipped): ignored, NVRTC runs again,
   * the result is right and the files are rewritten. */
  {
    DIR* d = opendir(dir);
    struct dirent* e;
    int corrupted = 0;
    while (d && (e = readdir(d)) != NULL) {
      FILE* f;
      if (!strstr(e->d_name, "-nvrtc.gpuhal")) continue;
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      f = fopen(path, "r+b");
      if (!f) continue;
      if (fseek(f, -2, SEEK_END) == 0) {
        int c = fgetc(f);
        fseek(f, -2, SEEK_END);
        fputc(c ^ 0x5a, f);
        corrupted++;
      }
      fclose(f);
    }
    if (d) closedir(d);
    TU_CHECK_EQ_INT(corrupted, 2);
  }
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_OK(cp_compile_run(device, NULL));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_compiles, 1);
  TU_CHECK_EQ_INT(s.source_disk_hits, 0);
  TU_CHECK(s.disk_rejects >= 1);
  gpuhal_device_release(device);
  /* Rewritten: a new process hits again. */
  TU_CHECK_EQ_INT(cp_wait(mc_spawn(hits, 4)), 0);
  gpuhal_driver_release(driver);
  tu_remove_dir(dir);
}

/* Runs rtc_scale_t<unsigned> of `exe` (x[i] *= 5 over i = 0..CP_N-1) and checks it. */
static gpuhal_status_t cp_run_template(gpuhal_device_t* device, gpuhal_executable_t* exe) {
  gpuhal_kernel_t *kernel = NULL, *again = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  unsigned host[CP_N], i;
  gpuhal_arg_t args[3];
  gpuhal_status_t st;
  for (i = 0; i < CP_N; ++i) host[i] = i;
  st = gpuhal_executable_kernel(exe, "rtc_scale_t<unsigned>", &kernel);
  /* The expression and the entry name are the same kernel. */
  if (!st) st = gpuhal_executable_kernel(exe, "_Z11rtc_scale_tIjEvPT_S0_j", &again);
  if (!st && again != kernel) st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "two kernel objects for one entry");
  if (!st) st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(host), &buffer);
  if (!st) st = gpuhal_buffer_write(buffer, 0, host, sizeof(host));
  if (!st) st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(5);
  args[2] = gpuhal_arg_u32(CP_N);
  if (!st)
    st = gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3((CP_N + CP_BLOCK - 1) / CP_BLOCK, 1, 1),
                             gpuhal_dim3(CP_BLOCK, 1, 1), 0, 3, args);
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st) st = tu_execute_and_wait(gpuhal_device_driver(device), device, cb, NULL);
  if (!st) st = gpuhal_buffer_read(buffer, 0, host, sizeof(host));
  for (i = 0; !st && i < CP_N; ++i)
    if (host[i] != i * 5u)
      st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "element %u is %u, expected %u", i, host[i], i * 5u);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  if (!st) st = gpuhal_device_wait_idle(device, gpuhal_timeout_relative_ns((int64_t)CP_WAIT_S * 1000000000ll));
  return st;
}

/* A C++ template kernel found by its name expression, fresh from NVRTC and from the disk
 * cache (which runs no NVRTC: the entry names travel in the cached PTX); bad expressions
 * named. */
TU_TEST(cpp_kernels_are_found_by_their_name_expressions) {
  static const char* source =
      "template <typename T> __global__ void rtc_scale_t(T* x, T a, unsigned n) {\n"
      "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) x[i] = x[i] * a;\n"
      "}\n";
  const char* names[] = {"rtc_scale_t<unsigned>"};
  const char* bad[] = {"rtc_scale_t<unsigned>\nx"};
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params;
  gpuhal_compile_options_t o;
  gpuhal_executable_t* exe = NULL;
  char dir[256];
  int round;
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  memset(&o, 0, sizeof(o));
  o.program_name = "rtc_scale_t.cu";
  o.name_expressions = names;
  o.name_expression_count = 1;
  for (round = 0; round < 2 && !tu_state.failed; ++round) {
    gpuhal_module_cache_stats_t s;
    device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    TU_CHECK_OK(gpuhal_executable_compile(device, source, &o, &exe));
    if (exe) TU_CHECK_OK(cp_run_template(device, exe));
    s = mc_stats(device);
    TU_CHECK_EQ_INT(s.source_disk_hits, round == 1);
    gpuhal_executable_release(exe);
    exe = NULL;
    gpuhal_device_release(device);
  }
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  /* Without the expression the mangled name is all there is. */
  TU_CHECK_OK(gpuhal_executable_compile(device, source, NULL, &exe));
  if (exe) {
    gpuhal_kernel_t* k = NULL;
    TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "rtc_scale_t<unsigned>", &k), GPUHAL_STATUS_NOT_FOUND, "rtc_scale_t");
  }
  gpuhal_executable_release(exe);
  exe = NULL;
  o.name_expressions = bad;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "options->name_expressions[0]");
  o.name_expressions = NULL;
  TU_CHECK_STATUS(gpuhal_executable_compile(device, source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "options->name_expressions");
  {
    const char* missing[] = {"no_such_kernel<int>"};
    o.name_expressions = missing;
    TU_CHECK_STATUS(gpuhal_executable_compile(device, source, &o, &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "no_such_kernel");
  }
  TU_CHECK(exe == NULL);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  tu_remove_dir(dir);
}

/* Namespaced __device__ and __constant__ variables found by their name expressions
 * (gpuhal_executable_global and _global_buffer take them as names), fresh from NVRTC and from
 * the disk cache; the mangled name works without one. */
TU_TEST(cpp_globals_are_found_by_their_name_expressions) {
  static const char* source =
      "namespace cfg {\n"
      "__device__ unsigned value = 5;\n"
      "__constant__ float gains[2] = {1.5f, 2.5f};\n"
      "}\n"
      "extern \"C\" __global__ void rtc_scale_globals(unsigned* out) { out[0] = cfg::value * (unsigned)cfg::gains[1]; "
      "}\n";
  const char* names[] = {"&cfg::value", "&cfg::gains"};
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params;
  gpuhal_compile_options_t o;
  gpuhal_executable_t* exe = NULL;
  char dir[256];
  int round;
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  memset(&o, 0, sizeof(o));
  o.program_name = "rtc_globals.cu";
  o.name_expressions = names;
  o.name_expression_count = 2;
  for (round = 0; round < 2 && !tu_state.failed; ++round) {
    gpuhal_buffer_t* b = NULL;
    uint64_t address = 0, size = 0;
    uint32_t value = 0;
    float gains[2] = {0, 0};
    device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    TU_CHECK_OK(gpuhal_executable_compile(device, source, &o, &exe));
    TU_CHECK_EQ_INT(mc_stats(device).source_disk_hits, round == 1);
    if (exe) {
      TU_CHECK_OK(gpuhal_executable_global(exe, "&cfg::value", &address, &size));
      TU_CHECK(address != 0 && size == 4);
      TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "&cfg::value", &b));
      if (b) TU_CHECK_OK(gpuhal_buffer_read(b, 0, &value, 4));
      TU_CHECK_EQ_INT(value, 5);
      gpuhal_buffer_release(b);
      b = NULL;
      TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "&cfg::gains", &b));
      if (b) TU_CHECK_OK(gpuhal_buffer_read(b, 0, gains, sizeof(gains)));
      TU_CHECK(gains[0] == 1.5f && gains[1] == 2.5f);
      gpuhal_buffer_release(b);
      TU_CHECK_OK(gpuhal_executable_global(exe, "_ZN3cfg5valueE", &address, &size)); /* its PTX name */
      TU_CHECK_STATUS(gpuhal_executable_global(exe, "cfg::value", &address, &size), GPUHAL_STATUS_NOT_FOUND,
                      "_ZN3cfg5valueE"); /* not an expression it was given: the hint names the mangled one */
    }
    gpuhal_executable_release(exe);
    exe = NULL;
    gpuhal_device_release(device);
  }
  gpuhal_driver_release(driver);
  tu_remove_dir(dir);
}

typedef struct cp_thread_s {
  gpuhal_device_t* device;
  gpuhal_status_t status;
} cp_thread_t;

static void* cp_thread_main(void* arg) {
  cp_thread_t* t = (cp_thread_t*)arg;
  t->status = cp_compile_run(t->device, NULL);
  return NULL;
}

TU_TEST(threads_compile_at_once) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params = mc_params("");
  cp_thread_t t[4];
  pthread_t th[4];
  int i;
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  for (i = 0; i < 4; ++i) {
    t[i].device = device;
    t[i].status = NULL;
    TU_REQUIRE(pthread_create(&th[i], NULL, cp_thread_main, &t[i]) == 0);
  }
  for (i = 0; i < 4; ++i) {
    pthread_join(th[i], NULL);
    TU_CHECK_OK(t[i].status);
  }
  TU_CHECK_EQ_INT(mc_stats(device).source_compiles, 4);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

/* A program that may read headers from disk (-I) is not kept in the disk cache: those
 * files are not in its key, so an edited header would load the old code. Both compiles
 * run NVRTC. */
TU_TEST(programs_reading_headers_from_disk_are_not_kept) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params;
  gpuhal_module_cache_stats_t s;
  char dir[512], include[600];
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  snprintf(include, sizeof(include), "-I%s", dir);
  params = mc_params(dir);
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_OK(cp_compile_run(device, include));
  TU_CHECK_OK(cp_compile_run(device, include));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_compiles, 2);
  TU_CHECK_EQ_INT(s.source_disk_hits, 0);
  /* Without it, the second compile is served from disk. */
  TU_CHECK_OK(cp_compile_run(device, NULL));
  TU_CHECK_OK(cp_compile_run(device, NULL));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_compiles, 3);
  TU_CHECK_EQ_INT(s.source_disk_hits, 1);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  tu_remove_dir(dir);
}

/* Compiles `source` (named `program_name`, no headers, no options) on `device` and gives
 * the parameter count of its kernel rtc_params. */
static gpuhal_status_t cp_param_count(gpuhal_device_t* device, const char* program_name, const char* source,
                                      uint32_t* out_count) {
  gpuhal_compile_options_t o;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_kernel_info_t info;
  gpuhal_status_t st;
  memset(&o, 0, sizeof(o));
  o.program_name = program_name;
  st = gpuhal_executable_compile(device, source, &o, &exe);
  if (!st) st = gpuhal_executable_kernel(exe, "rtc_params", &kernel);
  if (!st) st = gpuhal_kernel_info(kernel, &info);
  if (!st) *out_count = info.param_count;
  gpuhal_executable_release(exe);
  return st;
}

/* Writes `text` to `path`; 1 when it did. */
static int cp_write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  int ok = f && fputs(text, f) >= 0;
  if (f && fclose(f) != 0) ok = 0;
  return ok;
}

/* With no option naming a directory, NVRTC still reads a header the program does not pass
 * in: a quoted #include opens next to the program name (and any absolute path). Such a
 * program is not kept on disk either: after the header changes, the next compile (in this
 * process or another) gets the new code, never the cached old one. The header changes the
 * kernel's parameter list, which the driver reports on softcuda and on a GPU alike. */
TU_TEST(an_include_of_a_file_on_disk_is_not_served_stale) {
  /* The same include however it is spelled: a comment before or after the '#', line
   * splices, the %: digraph, a form feed; and by absolute path (appended below). */
  static const char* const spellings[] = {"#include \"rtc_params.h\"",     "/**/#include \"rtc_params.h\"",
                                          "#/**/include \"rtc_params.h\"", "#\\\ninclude \"rtc_params.h\"",
                                          "#inc\\\nlude \"rtc_params.h\"", "%:include \"rtc_params.h\"",
                                          "\f#include \"rtc_params.h\"",   NULL};
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params;
  gpuhal_module_cache_stats_t s;
  char dir[512], header[600], program[600], sources[8][1400];
  uint32_t count = 0, n = 0, i, round;
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  snprintf(header, sizeof(header), "%s/rtc_params.h", dir);
  snprintf(program, sizeof(program), "%s/rtc_params.cu", dir);
  for (n = 0; spellings[n]; ++n)
    snprintf(sources[n], sizeof(sources[n]), "%s\nextern \"C\" __global__ void rtc_params(RTC_PARAMS) {}\n",
             spellings[n]);
  snprintf(sources[n++], sizeof(sources[0]),
           "#include \"%s\"\nextern \"C\" __global__ void rtc_params(RTC_PARAMS) {}\n", header);
  params = mc_params(dir);
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  for (round = 1; round <= 2; ++round) {
    TU_REQUIRE(cp_write_file(header, round == 1 ? "#define RTC_PARAMS int a\n" : "#define RTC_PARAMS int a, int b\n"));
    for (i = 0; i < n; ++i) {
      count = 0;
      TU_CHECK_OK(cp_param_count(device, program, sources[i], &count));
      if (count != round) TU_FAIL_AT(__FILE__, __LINE__, "round %u, source %u: %u parameters", round, i, count);
    }
  }
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_compiles, 2 * n);
  TU_CHECK_EQ_INT(s.source_disk_hits, 0);
  /* A header passed in by the same name is in the key: that program is kept. */
  TU_CHECK_OK(cp_compile_run(device, NULL));
  TU_CHECK_OK(cp_compile_run(device, NULL));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_disk_hits, 1);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  remove(header);
  tu_remove_dir(dir);
}

/* On a GPU: an arch-specific target gives a cubin, which loads and runs. NVRTC makes PTX
 * for it too; the cubin is what gets loaded (PTX would go through the disk cache's PTX path:
 * a disk miss). A target of an older major version gives PTX (its cubin would not load).
 * softcuda runs PTX only, so this needs the real driver. */
TU_TEST(an_sm_target_gives_a_cubin_on_a_gpu) {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_params_t params;
  gpuhal_device_info_t info;
  gpuhal_module_cache_stats_t s;
  char arch[64], dir[512];
  if (!cp_have_nvrtc()) TU_SKIP("no NVRTC found at configure time (GPUHAL_TEST_NVRTC unset)");
  if (tu_softcuda()) TU_SKIP("softcuda runs PTX only (a cubin needs a GPU)");
  driver = mc_driver();
  if (!driver) TU_SKIP("no device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_OK(gpuhal_device_info(device, &info));
  snprintf(arch, sizeof(arch), "-arch=sm_%d%d%s", info.compute_capability_major, info.compute_capability_minor,
           info.compute_capability_major >= 9 ? "a" : "");
  TU_CHECK_OK(cp_compile_run(device, arch));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.source_compiles, 1);
  TU_CHECK_EQ_INT(s.compiles, 1);
  TU_CHECK_EQ_INT(s.disk_misses, 0); /* no PTX was loaded */
  /* A virtual target still gives PTX (one PTX load through the disk cache). */
  snprintf(arch, sizeof(arch), "-arch=compute_%d%d", info.compute_capability_major, info.compute_capability_minor);
  TU_CHECK_OK(cp_compile_run(device, arch));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.disk_misses, 1);
  /* An sm_ target of an older major version: its SASS does not run here, its PTX does. */
  if (info.compute_capability_major >= 9) {
    TU_CHECK_OK(cp_compile_run(device, "-arch=sm_80"));
    s = mc_stats(device);
    TU_CHECK_EQ_INT(s.disk_misses, 2);
  }
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  tu_remove_dir(dir);
}

int main(int argc, char** argv) {
  static const tu_case_t cases[] = {TU_CASE(source_with_a_header_and_options_compiles_and_runs),
                                    TU_CASE(compile_errors_carry_the_log_and_the_program_name),
                                    TU_CASE(bad_arguments_name_themselves),
                                    TU_CASE(a_missing_or_wrong_nvrtc_is_unavailable_saying_what_was_tried),
                                    TU_CASE(the_disk_cache_serves_a_second_process_without_nvrtc),
                                    TU_CASE(threads_compile_at_once),
                                    TU_CASE(cpp_kernels_are_found_by_their_name_expressions),
                                    TU_CASE(cpp_globals_are_found_by_their_name_expressions),
                                    TU_CASE(an_sm_target_gives_a_cubin_on_a_gpu),
                                    TU_CASE(programs_reading_headers_from_disk_are_not_kept),
                                    TU_CASE(an_include_of_a_file_on_disk_is_not_served_stale)};
  mc_remember_self(argv[0]);
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main(argc, argv);
  return tu_run(cases, (int)(sizeof(cases) / sizeof(cases[0])), argc, argv);
}
