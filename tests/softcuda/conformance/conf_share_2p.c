/* Conformance: memory shared between two processes. Each case forks two children, A and B,
 * that load the driver themselves and talk over a socketpair (file descriptors travel
 * with SCM_RIGHTS); this process never loads the driver, so every child starts clean (a
 * CUDA driver does not survive fork). Every wait has a timeout: socket reads, stream
 * waits (polled with cuStreamQuery) and the children themselves. A child exits with
 * exit(), so that softcuda's leak report (SOFTCUDA_LEAKS=fatal) judges it too.
 *   vmm_export_import       cuMemCreate'd memory exported as a descriptor, imported, mapped
 *                           and written on both sides, memops across; alive after A releases
 *   host_register_shared    a memfd MAP_SHARED in both, registered in both: B's
 *                           cuStreamWaitValue64 met by A's host store, then by A's stream
 *   legacy_ipc              cuIpcGetMemHandle in A (of an address inside the allocation),
 *                           cuIpcOpenMemHandle (twice: counted) in B, writes both ways
 *   leaks_are_reported      softcuda: B leaks one of each kind; its leak report names them
 *                           and SOFTCUDA_LEAKS=fatal fails it */
#include "conf.h" /* first: it defines _GNU_SOURCE */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define SP_TIMEOUT_MS 20000 /* one step: a socket read, a stream wait */
#define TS_WAIT_S (SP_TIMEOUT_MS / 1000)
#include "test_socket.h"

#define SP_CASE_TIMEOUT_MS 90000 /* a whole case */

typedef struct sp_msg {
  int step;
  int status; /* 0: go on; 77: skip (the sender's driver lacks the feature); else failed */
  unsigned long long a, b;
  CUipcMemHandle ipc;
} sp_msg;

static int sp_send(int sock, int step, unsigned long long a, unsigned long long b, const CUipcMemHandle* ipc, int fd) {
  sp_msg m;
  memset(&m, 0, sizeof m);
  m.step = step;
  m.a = a;
  m.b = b;
  if (ipc) m.ipc = *ipc;
  return ts_send(sock, &m, sizeof m, fd) ? 0 : -1;
}

/* Sends a status-only message (a skip or a failure: the peer stops waiting). */
static void sp_send_status(int sock, int status) {
  sp_msg m;
  memset(&m, 0, sizeof m);
  m.status = status;
  if (!ts_send(sock, &m, sizeof m, -1)) perror("sp_send_status");
}

/* Receives the message of `step` (and a descriptor, if fd); -1 on timeout, error or a
 * peer's failure, 77 when the peer skips. */
static int sp_recv(int sock, int step, sp_msg* m, int* fd) {
  if (!ts_recv(sock, m, sizeof *m, fd)) {
    fprintf(stderr, "  sp_recv: no message for step %d within %d ms (or the peer is gone)\n", step, SP_TIMEOUT_MS);
    return -1;
  }
  if (m->status == 77) return 77;
  if (m->status != 0 || m->step != step) {
    fprintf(stderr, "  sp_recv: wanted step %d, got step %d status %d\n", step, m->step, m->status);
    return -1;
  }
  return 0;
}

/* In a side: receive step `step` or end the side (skipping with the peer). */
#define SP_RECV(sock, step, m, fd)                                    \
  do {                                                                \
    int sp_r_ = sp_recv((sock), (step), (m), (fd));                   \
    if (sp_r_ == 77) TU_SKIP("the other process skipped");            \
    if (sp_r_ != 0) {                                                 \
      TU_FAIL_AT(__FILE__, __LINE__, "no message for step %d", step); \
      return;                                                         \
    }                                                                 \
  } while (0)
#define SP_SEND(sock, step, a, b, ipc, fd) TU_CHECK(sp_send((sock), (step), (a), (b), (ipc), (fd)) == 0)

/* Waits for s, polling with a timeout. */
static CUresult sp_stream_wait(CUstream s) {
  double until = conf_now_ms() + SP_TIMEOUT_MS;
  CUresult r;
  while ((r = cu.cuStreamQuery(s)) == CUDA_ERROR_NOT_READY && conf_now_ms() < until) tu_sleep_ns(200000);
  return r;
}

static int sp_attr(CUdevice_attribute a) {
  int v = 0;
  return cu.cuDeviceGetAttribute(&v, a, 0) == CUDA_SUCCESS ? v : 0;
}

/* ---- running two sides ---------------------------------------------------------------- */

typedef void (*sp_side_fn)(int sock);

static pid_t sp_fork_side(sp_side_fn fn, int sock, int other, const char* stderr_path) {
  pid_t pid;
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid != 0) return pid;
  close(other);
  if (stderr_path) {
    int fd = open(stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
  }
  memset(&tu_state, 0, sizeof tu_state);
  fn(sock);
  if (tu_state.failed || tu_state.skipped) sp_send_status(sock, tu_state.failed ? 1 : 77); /* unblock the peer */
  close(sock);
  fflush(NULL);
  exit(tu_state.failed ? 1 : tu_state.skipped ? 77 : 0); /* exit(): the driver's leak report runs */
}

/* Exit status of pid (128 + signal), waiting until `deadline` (ms), then killing it. */
static int sp_reap(pid_t pid, double deadline) {
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return -1;
    if (conf_now_ms() > deadline) {
      fprintf(stderr, "  process %d timed out: killed\n", (int)pid);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    tu_sleep_ns(5000000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs a and b in two children; their exit statuses go to *ra and *rb. */
static void sp_run(sp_side_fn a, sp_side_fn b, const char* b_stderr, int* ra, int* rb) {
  int sv[2];
  pid_t pa, pb;
  double deadline = conf_now_ms() + SP_CASE_TIMEOUT_MS;
  *ra = *rb = -1;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    perror("socketpair");
    return;
  }
  pa = sp_fork_side(a, sv[0], sv[1], NULL);
  pb = sp_fork_side(b, sv[1], sv[0], b_stderr);
  close(sv[0]);
  close(sv[1]);
  *ra = pa > 0 ? sp_reap(pa, deadline) : -1;
  *rb = pb > 0 ? sp_reap(pb, deadline) : -1;
}

/* Both sides passed (or both skipped). */
#define SP_EXPECT_BOTH_OK(ra, rb)                                                                             \
  do {                                                                                                        \
    if ((ra) == 77 && (rb) == 77) TU_SKIP("the driver lacks the feature");                                    \
    if ((ra) != 0 || (rb) != 0) TU_FAIL_AT(__FILE__, __LINE__, "side A exited %d, side B exited %d", ra, rb); \
  } while (0)

/* ---- VMM: export, import, both ways ------------------------------------------------------ */

enum { V_FD = 1, V_B_PARKED, V_A_WROTE, V_A_RELEASED, V_B_DONE };

#define V_PATTERN_WORDS 1024

static void sp_pattern(unsigned* w, unsigned tag) {
  unsigned i;
  for (i = 0; i < V_PATTERN_WORDS; ++i) w[i] = tag | i;
}

static int sp_vmm_usable(void) {
  return cu.cuMemCreate && sp_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) &&
         sp_attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) &&
         sp_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
}

static CUresult sp_vmm_map(CUmemGenericAllocationHandle h, size_t size, CUdeviceptr* va) {
  CUmemAccessDesc rw;
  CUresult r;
  memset(&rw, 0, sizeof rw);
  rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  rw.location.id = 0;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = cu.cuMemAddressReserve(va, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = cu.cuMemMap(*va, size, 0, h, 0);
  if (r == CUDA_SUCCESS) r = cu.cuMemSetAccess(*va, size, &rw, 1);
  return r;
}

/* Layout of the shared allocation (2 granules): A's pattern at 0, B's at 4096, flags at
 * the second granule: +0 set by A (B waits), +8 set by B (A waits). */
static void vmm_side_a(int sock) {
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  CUstream s_write, s_wait;
  unsigned w[V_PATTERN_WORDS], want[V_PATTERN_WORDS];
  size_t g = 0, size;
  int fd = -1;
  sp_msg m;
  CONF_BEGIN();
  if (!sp_vmm_usable()) TU_SKIP("no VMM with POSIX descriptors and 64-bit memops");
  TU_REQUIRE(conf_ctx(0));
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CONF_REQUIRE_OK(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size = 2 * g;
  CONF_REQUIRE_OK(cu.cuMemCreate(&h, size, &prop, 0));
  CONF_REQUIRE_OK(sp_vmm_map(h, size, &va));
  CONF_OK(cu.cuMemsetD8(va, 0, size));
  sp_pattern(w, 0xA0000000u);
  CONF_OK(cu.cuMemcpyHtoD(va, w, sizeof w));
  CONF_REQUIRE_OK(cu.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  SP_SEND(sock, V_FD, size, 0, NULL, fd);
  close(fd); /* the message carried its own copy */
  SP_RECV(sock, V_B_PARKED, &m, NULL);
  /* B wrote its pattern through its own mapping: A reads it through A's */
  CONF_OK(cu.cuMemcpyDtoH(w, va + 4096, sizeof w));
  sp_pattern(want, 0xB0000000u);
  TU_CHECK(memcmp(w, want, sizeof w) == 0);
  CONF_OK(cu.cuStreamCreate(&s_write, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&s_wait, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamWaitValue64(s_wait, va + g + 8, 2, CU_STREAM_WAIT_VALUE_EQ)); /* B's stream meets it */
  CONF_OK(cu.cuStreamWriteValue64(s_write, va + g, 1, 0));                         /* meets B's wait */
  CONF_OK(sp_stream_wait(s_write));
  SP_SEND(sock, V_A_WROTE, 0, 0, NULL, -1);
  CONF_OK(sp_stream_wait(s_wait));
  /* A lets go of everything; B's mapping keeps the memory */
  CONF_OK(cu.cuMemUnmap(va, size));
  CONF_OK(cu.cuMemAddressFree(va, size));
  CONF_OK(cu.cuMemRelease(h));
  SP_SEND(sock, V_A_RELEASED, 0, 0, NULL, -1);
  SP_RECV(sock, V_B_DONE, &m, NULL);
  CONF_OK(cu.cuStreamDestroy(s_write));
  CONF_OK(cu.cuStreamDestroy(s_wait));
  conf_ctx_done(0);
}

static void vmm_side_b(int sock) {
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  CUstream s;
  unsigned w[V_PATTERN_WORDS], want[V_PATTERN_WORDS];
  size_t size;
  int fd = -1;
  sp_msg m;
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  SP_RECV(sock, V_FD, &m, &fd);
  TU_REQUIRE(fd >= 0);
  size = (size_t)m.a;
  CONF_REQUIRE_OK(
      cu.cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd); /* the import has its own reference */
  CONF_REQUIRE_OK(cu.cuMemAddressReserve(&va, size, 0, 0, 0));
  CONF_REQUIRE_OK(cu.cuMemMap(va, size, 0, h, 0));
  if (conf_is_softcuda()) /* no cuMemSetAccess yet: not device memory */
    CONF_EQ(cu.cuMemcpyDtoH(w, va, sizeof w), CUDA_ERROR_INVALID_VALUE);
  {
    CUmemAccessDesc rw;
    memset(&rw, 0, sizeof rw);
    rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    rw.location.id = 0;
    rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CONF_REQUIRE_OK(cu.cuMemSetAccess(va, size, &rw, 1));
  }
  CONF_OK(cu.cuMemcpyDtoH(w, va, sizeof w));
  sp_pattern(want, 0xA0000000u);
  TU_CHECK(memcmp(w, want, sizeof w) == 0);
  sp_pattern(w, 0xB0000000u);
  CONF_OK(cu.cuMemcpyHtoD(va + 4096, w, sizeof w));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamWaitValue64(s, va + size / 2, 1, CU_STREAM_WAIT_VALUE_GEQ));
  tu_sleep_ns(2000000);
  CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* nothing has met it yet */
  SP_SEND(sock, V_B_PARKED, 0, 0, NULL, -1);
  SP_RECV(sock, V_A_WROTE, &m, NULL);
  CONF_OK(sp_stream_wait(s)); /* met by A's cuStreamWriteValue64 */
  CONF_OK(cu.cuStreamWriteValue64(s, va + size / 2 + 8, 2, 0));
  CONF_OK(sp_stream_wait(s));
  SP_RECV(sock, V_A_RELEASED, &m, NULL);
  /* A released its handle and mapping: the memory lives on while B maps it */
  memset(w, 0, sizeof w);
  CONF_OK(cu.cuMemcpyDtoH(w, va, sizeof w));
  sp_pattern(want, 0xA0000000u);
  TU_CHECK(memcmp(w, want, sizeof w) == 0);
  CONF_OK(cu.cuMemsetD32(va, 0x12345678u, 16));
  CONF_OK(cu.cuMemcpyDtoH(w, va, 64));
  TU_CHECK(w[0] == 0x12345678u && w[15] == 0x12345678u);
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemUnmap(va, size));
  CONF_OK(cu.cuMemAddressFree(va, size));
  CONF_OK(cu.cuMemRelease(h));
  SP_SEND(sock, V_B_DONE, 0, 0, NULL, -1);
  conf_ctx_done(0);
}

TU_TEST(vmm_export_import) {
  int ra, rb;
  sp_run(vmm_side_a, vmm_side_b, NULL, &ra, &rb);
  SP_EXPECT_BOTH_OK(ra, rb);
}

/* ---- cuMemHostRegister on memory both processes map --------------------------------------- */

enum { H_FD = 1, H_B_PARKED1, H_A_STORED, H_B_PARKED2, H_B_WROTE, H_A_DONE };

#define H_SIZE 4096

static int sp_register_usable(void) {
  return cu.cuMemHostRegister && sp_attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED) &&
         sp_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
}

/* Maps fd and registers it for the device; *d gets its device address. */
static CUresult sp_register(int fd, unsigned char** host, CUdeviceptr* d) {
  CUresult r;
  void* p = mmap(NULL, H_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *host = (unsigned char*)p;
  r = cu.cuMemHostRegister(p, H_SIZE, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  if (r == CUDA_SUCCESS) r = cu.cuMemHostGetDevicePointer(d, p, 0);
  return r;
}

static void host_side_a(int sock) {
  unsigned char* host = NULL;
  CUdeviceptr d = 0;
  CUstream s;
  sp_msg m;
  int fd;
  CONF_BEGIN();
  if (!sp_register_usable()) TU_SKIP("no cuMemHostRegister or 64-bit memops");
  TU_REQUIRE(conf_ctx(0));
  fd = memfd_create("conf_share_2p", MFD_CLOEXEC);
  TU_REQUIRE(fd >= 0 && ftruncate(fd, H_SIZE) == 0);
  CONF_REQUIRE_OK(sp_register(fd, &host, &d));
  SP_SEND(sock, H_FD, 0, 0, NULL, fd);
  close(fd); /* the mapping keeps the memory */
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  SP_RECV(sock, H_B_PARKED1, &m, NULL);
  tu_sleep_ns(5000000);
  __atomic_store_n((unsigned long long*)host, 1ull, __ATOMIC_SEQ_CST); /* a plain host store meets B's wait */
  SP_SEND(sock, H_A_STORED, 0, 0, NULL, -1);
  SP_RECV(sock, H_B_PARKED2, &m, NULL);
  CONF_OK(cu.cuStreamWriteValue64(s, d + 8, 7, 0)); /* A's stream meets B's second wait */
  CONF_OK(sp_stream_wait(s));
  SP_RECV(sock, H_B_WROTE, &m, NULL);
  /* B's stream wrote through B's mapping: A's host and A's stream see it */
  TU_CHECK(__atomic_load_n((unsigned long long*)(host + 16), __ATOMIC_ACQUIRE) == 9ull);
  CONF_OK(cu.cuStreamWaitValue64(s, d + 16, 9, CU_STREAM_WAIT_VALUE_EQ));
  CONF_OK(sp_stream_wait(s));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemHostUnregister(host));
  munmap(host, H_SIZE);
  SP_SEND(sock, H_A_DONE, 0, 0, NULL, -1);
  conf_ctx_done(0);
}

static void host_side_b(int sock) {
  unsigned char* host = NULL;
  CUdeviceptr d = 0;
  CUstream s;
  sp_msg m;
  int fd = -1;
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  SP_RECV(sock, H_FD, &m, &fd);
  TU_REQUIRE(fd >= 0);
  CONF_REQUIRE_OK(sp_register(fd, &host, &d));
  close(fd);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamWaitValue64(s, d, 1, CU_STREAM_WAIT_VALUE_GEQ));
  tu_sleep_ns(2000000);
  CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  SP_SEND(sock, H_B_PARKED1, 0, 0, NULL, -1);
  SP_RECV(sock, H_A_STORED, &m, NULL);
  CONF_OK(sp_stream_wait(s));
  CONF_OK(cu.cuStreamWaitValue64(s, d + 8, 7, CU_STREAM_WAIT_VALUE_EQ));
  tu_sleep_ns(2000000);
  CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  SP_SEND(sock, H_B_PARKED2, 0, 0, NULL, -1);
  CONF_OK(sp_stream_wait(s));
  CONF_OK(cu.cuStreamWriteValue64(s, d + 16, 9, 0));
  CONF_OK(sp_stream_wait(s));
  SP_SEND(sock, H_B_WROTE, 0, 0, NULL, -1);
  SP_RECV(sock, H_A_DONE, &m, NULL);
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemHostUnregister(host));
  munmap(host, H_SIZE);
  conf_ctx_done(0);
}

TU_TEST(host_register_shared) {
  int ra, rb;
  sp_run(host_side_a, host_side_b, NULL, &ra, &rb);
  SP_EXPECT_BOTH_OK(ra, rb);
}

/* ---- legacy IPC ------------------------------------------------------------------------- */

enum { I_HANDLE = 1, I_B_WROTE, I_A_DONE };

#define I_SIZE (1u << 20)

static void ipc_side_a(int sock) {
  CUdeviceptr d = 0, self = 0;
  CUipcMemHandle h;
  unsigned w[V_PATTERN_WORDS], want[V_PATTERN_WORDS];
  sp_msg m;
  CONF_BEGIN();
  if (!cu.cuIpcGetMemHandle) TU_SKIP("no legacy IPC");
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(cu.cuMemAlloc(&d, I_SIZE));
  sp_pattern(w, 0xC0000000u);
  CONF_OK(cu.cuMemcpyHtoD(d, w, sizeof w));
  /* From pageable memory the copy may return before its DMA lands (CUDA's synchronization
   * rules): the other process reads the memory next. */
  CONF_OK(cu.cuCtxSynchronize());
  CONF_REQUIRE_OK(cu.cuIpcGetMemHandle(&h, d + 4096)); /* an address inside: the allocation's handle */
  CONF_EQ(cu.cuIpcOpenMemHandle(&self, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  SP_SEND(sock, I_HANDLE, 0, 0, &h, -1);
  SP_RECV(sock, I_B_WROTE, &m, NULL);
  CONF_OK(cu.cuMemcpyDtoH(w, d + I_SIZE - sizeof w, sizeof w));
  sp_pattern(want, 0xD0000000u);
  TU_CHECK(memcmp(w, want, sizeof w) == 0);
  CONF_OK(cu.cuMemFree(d));
  SP_SEND(sock, I_A_DONE, 0, 0, NULL, -1);
  conf_ctx_done(0);
}

static void ipc_side_b(int sock) {
  CUdeviceptr d = 0, again = 0;
  unsigned w[V_PATTERN_WORDS], want[V_PATTERN_WORDS];
  sp_msg m;
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  SP_RECV(sock, I_HANDLE, &m, NULL);
  CONF_REQUIRE_OK(cu.cuIpcOpenMemHandle(&d, m.ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CONF_OK(cu.cuIpcOpenMemHandle(&again, m.ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)); /* counted: same address */
  TU_CHECK(again == d);
  CONF_OK(cu.cuMemcpyDtoH(w, d, sizeof w)); /* the allocation's start, not the address exported */
  sp_pattern(want, 0xC0000000u);
  TU_CHECK(memcmp(w, want, sizeof w) == 0);
  CONF_EQ(cu.cuIpcOpenMemHandle(&again, m.ipc, 0), CUDA_ERROR_INVALID_VALUE); /* the flag is required */
  CONF_EQ(cu.cuIpcCloseMemHandle(d + 4096), CUDA_ERROR_INVALID_VALUE);        /* only what the open returned */
  CONF_OK(cu.cuIpcCloseMemHandle(d));                                         /* one of two */
  sp_pattern(w, 0xD0000000u);
  CONF_OK(cu.cuMemcpyHtoD(d + I_SIZE - sizeof w, w, sizeof w));
  CONF_OK(cu.cuCtxSynchronize()); /* landed before the other process reads it */
  CONF_OK(cu.cuIpcCloseMemHandle(d));
  CONF_EQ(cu.cuIpcCloseMemHandle(d), CUDA_ERROR_INVALID_VALUE); /* closed */
  SP_SEND(sock, I_B_WROTE, 0, 0, NULL, -1);
  SP_RECV(sock, I_A_DONE, &m, NULL);
  conf_ctx_done(0);
}

TU_TEST(legacy_ipc) {
  int ra, rb;
  sp_run(ipc_side_a, ipc_side_b, NULL, &ra, &rb);
  SP_EXPECT_BOTH_OK(ra, rb);
}

/* ---- leaks: B leaves one of each behind ------------------------------------------------ */

enum { L_HANDLE = 1, L_B_DONE };

static void leak_side_a(int sock) {
  CUdeviceptr d = 0;
  CUipcMemHandle h;
  sp_msg m;
  CONF_BEGIN();
  if (!conf_is_softcuda()) TU_SKIP("leak report: softcuda only");
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(cu.cuMemAlloc(&d, 4096));
  CONF_REQUIRE_OK(cu.cuIpcGetMemHandle(&h, d));
  SP_SEND(sock, L_HANDLE, 0, 0, &h, -1);
  SP_RECV(sock, L_B_DONE, &m, NULL);
  CONF_OK(cu.cuMemFree(d));
  conf_ctx_done(0);
}

static void leak_side_b(int sock) {
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr d = 0, va = 0;
  static unsigned char reg[64];
  sp_msg m;
  setenv("SOFTCUDA_LEAKS", "fatal", 1); /* softcuda reads it at the first call (cuInit) */
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  SP_RECV(sock, L_HANDLE, &m, NULL);
  CONF_OK(cu.cuIpcOpenMemHandle(&d, m.ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CONF_OK(cu.cuMemHostRegister(reg, sizeof reg, 0));
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CONF_OK(cu.cuMemCreate(&h, 2 << 20, &prop, 0));
  CONF_OK(cu.cuMemAddressReserve(&va, 2 << 20, 0, 0, 0));
  CONF_OK(cu.cuMemMap(va, 2 << 20, 0, h, 0));
  SP_SEND(sock, L_B_DONE, 0, 0, NULL, -1);
  /* the primary context stays retained: its registration and IPC mapping leak at exit */
}

TU_TEST(leaks_are_reported) {
  char path[64];
  char* log;
  int ra, rb;
  snprintf(path, sizeof path, "/tmp/conf_share_2p_%d.log", (int)getpid());
  sp_run(leak_side_a, leak_side_b, path, &ra, &rb);
  log = tu_read_file(path, NULL);
  unlink(path);
  if (ra == 77) {
    free(log);
    TU_SKIP("leak report: softcuda only");
  }
  TU_CHECK_EQ_INT(ra, 0);
  TU_CHECK_EQ_INT(rb, 1); /* SOFTCUDA_LEAKS=fatal */
  TU_CHECK_STR_CONTAINS(log, "host registration (cuMemHostRegister)");
  TU_CHECK_STR_CONTAINS(log, "IPC mapping (cuIpcOpenMemHandle)");
  TU_CHECK_STR_CONTAINS(log, "leak: memory handle");
  TU_CHECK_STR_CONTAINS(log, "address reservation (cuMemAddressReserve)");
  TU_CHECK_STR_CONTAINS(log, "mapping (cuMemMap)");
  TU_CHECK_STR_CONTAINS(log, "SOFTCUDA_LEAKS=fatal");
  free(log);
}

TU_MAIN(TU_CASE(vmm_export_import), TU_CASE(host_register_shared), TU_CASE(legacy_ipc), TU_CASE(leaks_are_reported))
