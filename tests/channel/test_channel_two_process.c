/* test_channel_two_process: one rank per process, one GPU each (ncclCommInitRank). Rank 0
 * makes the id and hands it to rank 1 through a file; both all-reduce (STREAM and GRAPH
 * command buffers) and check the sums. The process forks before anything is loaded, so
 * each rank has its own driver (and, on softcuda, its own device memory: softnccl moves
 * the data through shared memory). Needs 2 devices (softcuda: SOFTCUDA_DEVICES >= 2). */
#include "gpuhal.h"
#include "test_multi_device_util.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define TP_COUNT 300000u /* floats: larger than one softnccl chunk */

static int tp_write_id(const char* path, const gpuhal_channel_id_t* id) {
  char tmp[512];
  FILE* f;
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  f = fopen(tmp, "wb");
  if (!f) return 0;
  if (fwrite(id->bytes, 1, sizeof(id->bytes), f) != sizeof(id->bytes)) {
    fclose(f);
    return 0;
  }
  fclose(f);
  return rename(tmp, path) == 0; /* the reader sees the whole id or nothing */
}

static int tp_read_id(const char* path, gpuhal_channel_id_t* id) {
  int64_t deadline = gpuhal_now_ns() + 120ll * 1000000000ll;
  while (gpuhal_now_ns() < deadline) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t n = fread(id->bytes, 1, sizeof(id->bytes), f);
      fclose(f);
      if (n == sizeof(id->bytes)) return 1;
    }
    tu_sleep_ns(10000000);
  }
  return 0;
}

/* One all-reduce of TP_COUNT floats in a command buffer of `flags`; checks the sum. */
static int tp_all_reduce(gpuhal_device_t* device, gpuhal_channel_t* channel, uint32_t flags, int rank, int round) {
  gpuhal_buffer_t *send = NULL, *recv = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* sem = NULL;
  gpuhal_collective_t c;
  float* host = (float*)malloc(TP_COUNT * sizeof(float));
  uint64_t one = 1;
  size_t i;
  int ok = 1;
  gpuhal_status_t s;
  for (i = 0; i < TP_COUNT; ++i) host[i] = (float)(rank * 1000 + round + (int)(i % 1000));
  s = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, TP_COUNT * 4, &send);
  if (!s) s = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, TP_COUNT * 4, &recv);
  if (!s) s = gpuhal_buffer_write(send, 0, host, TP_COUNT * 4);
  if (!s) s = gpuhal_semaphore_create(gpuhal_device_driver(device), 0, &sem);
  if (!s) s = gpuhal_command_buffer_create(device, flags, 0, &cb);
  if (!s) s = gpuhal_command_buffer_begin(cb);
  memset(&c, 0, sizeof(c));
  c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  c.type = GPUHAL_ELEMENT_FLOAT32;
  c.op = GPUHAL_REDUCTION_SUM;
  c.count = TP_COUNT;
  c.send = gpuhal_ref_buffer(send, 0);
  c.recv = gpuhal_ref_buffer(recv, 0);
  if (!s) s = gpuhal_cmd_collective(cb, channel, &c);
  if (!s) s = gpuhal_command_buffer_end(cb);
  if (!s)
    s = gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one), cb, NULL);
  if (!s) s = gpuhal_semaphore_wait(sem, 1, md_seconds(120));
  if (!s) s = gpuhal_buffer_read(recv, 0, host, TP_COUNT * 4);
  if (s) {
    fprintf(stderr, "  rank %d: %s\n", rank, gpuhal_status_message(s));
    gpuhal_status_free(s);
    ok = 0;
  }
  for (i = 0; ok && i < TP_COUNT; ++i) {
    float want = (float)(0 * 1000 + 1 * 1000 + 2 * (round + (int)(i % 1000)));
    if (host[i] != want) {
      fprintf(stderr, "  rank %d: element %zu is %g, want %g\n", rank, i, (double)host[i], (double)want);
      ok = 0;
    }
  }
  gpuhal_command_buffer_release(cb);
  gpuhal_semaphore_release(sem);
  gpuhal_buffer_release(send);
  gpuhal_buffer_release(recv);
  free(host);
  return ok;
}

/* 0: passed; 1: failed; 77: skipped. */
static int tp_rank(int rank, const char* id_path) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_channel_t* channel = NULL;
  gpuhal_channel_id_t id;
  gpuhal_status_t s;
  int count = 0, rc = 0;
  s = gpuhal_driver_create(NULL, &driver);
  if (!s) s = gpuhal_driver_device_count(driver, &count);
  if (s || count < 2 || !gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_NCCL)) {
    if (s) md_print_status("driver", s);
    gpuhal_driver_release(driver);
    if (rank == 0) {
      memset(&id, 0, sizeof(id));
      tp_write_id(id_path, &id); /* let rank 1 go */
    }
    return 77;
  }
  s = gpuhal_device_create(driver, rank, NULL, &device);
  if (!s && rank == 0) {
    s = gpuhal_channel_id_create(driver, &id);
    if (!s && !tp_write_id(id_path, &id)) s = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "cannot write %s", id_path);
  } else if (!s && !tp_read_id(id_path, &id)) {
    s = gpuhal_status_make(GPUHAL_STATUS_DEADLINE_EXCEEDED, "rank 1: no id in %s", id_path);
  }
  if (!s) s = gpuhal_channel_create_rank(device, &id, rank, 2, &channel);
  if (s) {
    fprintf(stderr, "  rank %d: %s\n", rank, gpuhal_status_message(s));
    gpuhal_status_free(s);
    rc = 1;
  } else {
    if (gpuhal_channel_rank(channel) != rank || gpuhal_channel_size(channel) != 2) rc = 1;
    if (!tp_all_reduce(device, channel, GPUHAL_COMMAND_BUFFER_STREAM, rank, 1)) rc = 1;
    if (!tp_all_reduce(device, channel, GPUHAL_COMMAND_BUFFER_GRAPH, rank, 2)) rc = 1;
  }
  gpuhal_channel_release(channel);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return rc;
}

int main(int argc, char** argv) {
  char path[256];
  pid_t child;
  int status = 0, rc0, rc1;
  (void)argc;
  (void)argv;
  snprintf(path, sizeof(path), "/tmp/gpuhal-channel-id-%d", (int)getpid());
  unlink(path);
  fflush(NULL);
  child = fork(); /* before anything is loaded: each rank is a clean process */
  if (child < 0) {
    perror("fork");
    return 1;
  }
  if (child == 0) exit(tp_rank(1, path));
  rc0 = tp_rank(0, path);
  if (waitpid(child, &status, 0) != child) status = 1 << 8;
  rc1 = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  unlink(path);
  printf("rank 0: %s, rank 1: %s\n",
         rc0 == 0    ? "passed"
         : rc0 == 77 ? "skipped"
                     : "FAILED",
         rc1 == 0    ? "passed"
         : rc1 == 77 ? "skipped"
                     : "FAILED");
  if (rc0 == 77 && rc1 == 77) return 77;
  return rc0 == 0 && rc1 == 0 ? 0 : 1;
}
