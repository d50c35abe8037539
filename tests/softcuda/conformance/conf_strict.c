/* Conformance of what only softcuda does: fault injection, call counters, the leak report
 * (in a child process), SOFTCUDA_JIT_DELAY_MS. Every case skips on a real driver. */
#define _GNU_SOURCE
#include <spawn.h>
#include <sys/wait.h>

#include "conf.h"

extern char** environ;

TU_TEST(fault_injection) {
  CUstream s;
  CUdeviceptr d;
  CUevent e;
  int i;
  CONF_STRICT();
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuStreamCreate(&s, 0));
  TU_CHECK(sq_set_faults("cuMemAllocAsync@2=CUDA_ERROR_OUT_OF_MEMORY,cuEventCreate@*=999") == 0);
  TU_CHECK(sq_set_faults("cuNoSuchThing@1=1") == -1);
  TU_CHECK(sq_set_faults("cuMemAlloc@0=1") == -1);
  CONF_OK(cu.cuMemAllocAsync(&d, 64, s));
  CONF_OK(cu.cuMemFreeAsync(d, s));
  CONF_EQ(cu.cuMemAllocAsync(&d, 64, s), CUDA_ERROR_OUT_OF_MEMORY); /* the 2nd call */
  CONF_OK(cu.cuMemAllocAsync(&d, 64, s));
  CONF_OK(cu.cuMemFreeAsync(d, s));
  for (i = 0; i < 3; ++i) CONF_EQ(cu.cuEventCreate(&e, 0), CUDA_ERROR_UNKNOWN);
  sq_clear_faults();
  CONF_OK(cu.cuEventCreate(&e, 0));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_OK(cu.cuStreamSynchronize(s));
  CONF_OK(cu.cuStreamDestroy(s));
  conf_ctx_done(0);
}

TU_TEST(call_counters) {
  unsigned long long n0, all0;
  int n;
  CONF_STRICT();
  n0 = sq_calls("cuDeviceGetCount");
  all0 = sq_calls(NULL);
  CONF_OK(cu.cuDeviceGetCount(&n));
  CONF_OK(cu.cuDeviceGetCount(&n));
  TU_CHECK_EQ_INT(sq_calls("cuDeviceGetCount") - n0, 2);
  TU_CHECK(sq_calls(NULL) - all0 >= 2);
  TU_CHECK_EQ_INT(sq_calls("cuNoSuchThing"), 0);
}

TU_TEST(jit_delay) {
  char* ptx = conf_read_ptx("fill_u32");
  CUmodule m;
  double t0;
  CONF_STRICT();
  TU_REQUIRE(ptx);
  if (!getenv("SOFTCUDA_JIT_DELAY_MS")) {
    free(ptx);
    TU_SKIP("run by the child case with SOFTCUDA_JIT_DELAY_MS set");
  }
  TU_REQUIRE(conf_ctx(0));
  t0 = conf_now_ms();
  CONF_OK(cu.cuModuleLoadData(&m, ptx));
  TU_CHECK(conf_now_ms() - t0 >= 40);
  CONF_OK(cu.cuModuleUnload(m));
  free(ptx);
  conf_ctx_done(0);
}

/* Runs this binary again as `self case` with extra environment; returns its exit code. */
static int run_child(const char* self, const char* which, const char* env1, const char* env2) {
  char* argv[3];
  char* envp[256];
  int i = 0, n = 0, status = 0;
  pid_t pid;
  for (; environ[i] && n < 250; ++i)
    if (strncmp(environ[i], "SOFTCUDA_", 9) != 0) envp[n++] = environ[i];
  envp[n++] = (char*)env1;
  if (env2) envp[n++] = (char*)env2;
  envp[n] = NULL;
  argv[0] = (char*)self;
  argv[1] = (char*)which;
  argv[2] = NULL;
  if (posix_spawn(&pid, self, NULL, NULL, argv, envp) != 0) return -1;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Child only: leaks one allocation and one event. */
TU_TEST(child_leaks) {
  CUdeviceptr d;
  CUevent e;
  CONF_STRICT();
  if (!getenv("CONF_CHILD")) TU_SKIP("child process only");
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuMemAlloc(&d, 64));
  CONF_OK(cu.cuEventCreate(&e, 0));
  TU_CHECK(sq_leak_report(0) >= 3); /* the context, the allocation, the event */
  CONF_OK(cu.cuCtxSetCurrent(NULL));
  CONF_OK(cu.cuDevicePrimaryCtxRelease(0)); /* reports both */
  TU_CHECK_EQ_INT(sq_leaks(), 2);
}

static char self_path[4096];

TU_TEST(leaks_fail_the_process) {
  CONF_STRICT();
  TU_REQUIRE(self_path[0]);
  TU_CHECK_EQ_INT(run_child(self_path, "child_leaks", "CONF_CHILD=1", "SOFTCUDA_LEAKS=fatal"), 1);
  TU_CHECK_EQ_INT(run_child(self_path, "child_leaks", "CONF_CHILD=1", "SOFTCUDA_LEAKS=report"), 0);
  TU_CHECK_EQ_INT(run_child(self_path, "jit_delay", "SOFTCUDA_JIT_DELAY_MS=50", "SOFTCUDA_LEAKS=fatal"), 0);
  TU_CHECK_EQ_INT(run_child(self_path, "env_faults", "CONF_CHILD=1", "SOFTCUDA_FAULTS=cuStreamCreate@1=2"), 0);
}

/* Child only: SOFTCUDA_FAULTS=cuStreamCreate@1=2 */
TU_TEST(env_faults) {
  CUstream s;
  CONF_STRICT();
  if (!getenv("CONF_CHILD")) TU_SKIP("child process only");
  TU_REQUIRE(conf_ctx(0));
  CONF_EQ(cu.cuStreamCreate(&s, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuStreamDestroy(s));
  conf_ctx_done(0);
}

static const tu_case_t cases[] = {TU_CASE(fault_injection), TU_CASE(call_counters),          TU_CASE(jit_delay),
                                  TU_CASE(child_leaks),     TU_CASE(leaks_fail_the_process), TU_CASE(env_faults)};

int main(int argc, char** argv) {
  ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  if (n > 0) self_path[n] = 0;
  return tu_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
