/* two_process: a producer process and a consumer process share a semaphore and a buffer; the
 * consumer's GPU copy waits, on the GPU, for the producer's GPU fill. No host round trip
 * between them and no copy through host memory.
 *
 * The parent makes a Unix socket pair and forks both before either loads CUDA (a process
 * forked after CUDA started cannot use it). The producer exports, sends the descriptors
 * over the socket (SCM_RIGHTS), fills the shared buffer on its GPU and signals 1 there;
 * the consumer imports, queues a copy that waits for 1 and checks what it copied.
 * Build: cc -std=c99 -I. examples/two_process.c -ldl -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SCM_RIGHTS and the CMSG_ macros */
#endif
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORDS 1024u

/* Sends `n` bytes and, when fd >= 0, a file descriptor. */
static int send_with_fd(int sock, const void* bytes, size_t n, int fd) {
  char control[CMSG_SPACE(sizeof(int))];
  struct iovec iov;
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  iov.iov_base = (void*)bytes;
  iov.iov_len = n;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    struct cmsghdr* c;
    memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &msg, 0) == (ssize_t)n;
}

static int recv_with_fd(int sock, void* bytes, size_t n, int* fd) {
  char control[CMSG_SPACE(sizeof(int))];
  struct iovec iov;
  struct msghdr msg;
  struct cmsghdr* c;
  memset(&msg, 0, sizeof(msg));
  iov.iov_base = bytes;
  iov.iov_len = n;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  *fd = -1;
  if (recvmsg(sock, &msg, MSG_WAITALL) != (ssize_t)n) return 0;
  for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
  return 1;
}

/* Exit codes: 0 done, 1 failed, 77 no stream memory operations (nothing to show). */
static int report(gpuhal_status_t st, const char* who) {
  if (!st) return 0;
  fprintf(stderr, "%s: %s\n", who, gpuhal_status_message(st));
  gpuhal_status_free(st);
  return 1;
}

static int producer(int sock, gpuhal_device_t* device) {
  gpuhal_driver_t* driver = gpuhal_device_driver(device);
  gpuhal_semaphore_t* ready = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_handle_t handle;
  uint32_t pattern = 42;
  uint64_t one = 1;
  int fd = -1;
  char done = 0;
  gpuhal_status_t st = gpuhal_semaphore_create(driver, 0, &ready);
  if (!st) st = gpuhal_semaphore_export(ready, &fd);
  if (!st && !send_with_fd(sock, "s", 1, fd)) st = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "send failed");
  if (fd >= 0) close(fd);
  if (!st) st = gpuhal_buffer_allocate_exportable(device, WORDS * 4, &buffer);
  if (!st) st = gpuhal_buffer_export(buffer, &handle);
  if (!st && !send_with_fd(sock, &handle, sizeof(handle), handle.fd))
    st = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "send failed");
  if (!st && handle.fd >= 0) close(handle.fd);
  /* Fill on the GPU, then signal 1 on the GPU: the consumer's copy starts right after. */
  if (!st) st = gpuhal_command_buffer_create(device, 0, 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  if (!st) st = gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buffer, 0), WORDS * 4, &pattern, 4);
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st)
    st = gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&ready, &one), cb,
                              NULL);
  /* The buffer may go once the consumer said it is done with it. */
  if (!st && recv(sock, &done, 1, MSG_WAITALL) != 1) st = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "no reply");
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(ready);
  return report(st, "producer");
}

static int consumer(int sock, gpuhal_device_t* device) {
  gpuhal_driver_t* driver = gpuhal_device_driver(device);
  gpuhal_semaphore_t *ready = NULL, *copied = NULL;
  gpuhal_buffer_t *shared = NULL, *mine = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_handle_t handle;
  uint32_t got[WORDS];
  uint64_t one = 1;
  char tag;
  int fd = -1, ok = 1;
  uint32_t i;
  gpuhal_status_t st = NULL;
  if (!recv_with_fd(sock, &tag, 1, &fd)) st = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "no semaphore");
  if (!st) st = gpuhal_semaphore_import(driver, fd, &ready);
  if (fd >= 0) close(fd);
  if (!st && !recv_with_fd(sock, &handle, sizeof(handle), &fd))
    st = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "no buffer");
  handle.fd = fd;
  if (!st) st = gpuhal_buffer_import(device, &handle, &shared);
  if (fd >= 0) close(fd);
  /* A copy queued before the producer signalled: it waits on the GPU. */
  if (!st) st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, WORDS * 4, &mine);
  if (!st) st = gpuhal_semaphore_create(driver, 0, &copied);
  if (!st) st = gpuhal_command_buffer_create(device, 0, 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  if (!st) st = gpuhal_cmd_copy(cb, gpuhal_ref_buffer(shared, 0), gpuhal_ref_buffer(mine, 0), WORDS * 4);
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st)
    st = gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_one(&ready, &one),
                              gpuhal_semaphore_list_one(&copied, &one), cb, NULL);
  if (!st) st = gpuhal_semaphore_wait(copied, 1, gpuhal_timeout_relative_ns(60ll * 1000000000ll));
  if (!st) st = gpuhal_buffer_read(mine, 0, got, sizeof(got));
  for (i = 0; !st && i < WORDS; ++i) ok &= got[i] == 42;
  if (!st) printf("consumer: copied %u words the producer wrote: %s\n", WORDS, ok ? "all 42" : "WRONG");
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(mine);
  gpuhal_buffer_release(shared);
  gpuhal_semaphore_release(copied);
  gpuhal_semaphore_release(ready);
  if (send(sock, "d", 1, 0) != 1) ok = 0;
  return report(st, "consumer") || !ok;
}

static int run(int sock, int is_producer) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  int count = 0, rc = 1;
  gpuhal_status_t st = gpuhal_driver_create(NULL, &driver);
  if (!st) st = gpuhal_driver_device_count(driver, &count);
  /* The consumer takes a second GPU when there is one. */
  if (!st) st = gpuhal_device_create(driver, !is_producer && count > 1 ? 1 : 0, NULL, &device);
  if (!st && !gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS)) {
    printf("no stream memory operations here: semaphores cannot be shared\n");
    rc = 77;
  } else if (!st) {
    rc = is_producer ? producer(sock, device) : consumer(sock, device);
  } else {
    rc = report(st, is_producer ? "producer" : "consumer");
  }
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return rc;
}

int main(void) {
  int sv[2], status[2], i, rc = 0;
  pid_t pid[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  for (i = 0; i < 2; ++i) {
    pid[i] = fork();
    if (pid[i] < 0) return 1;
    if (pid[i] == 0) {
      close(sv[1 - i]);
      int code = run(sv[i], i == 0);
      fflush(stdout); /* _exit flushes nothing */
      _exit(code);
    }
  }
  close(sv[0]);
  close(sv[1]);
  for (i = 0; i < 2; ++i) {
    if (waitpid(pid[i], &status[i], 0) != pid[i] || !WIFEXITED(status[i])) return 1;
    if (WEXITSTATUS(status[i]) == 77)
      rc = 77;
    else if (WEXITSTATUS(status[i]) != 0)
      return 1;
  }
  return rc;
}
