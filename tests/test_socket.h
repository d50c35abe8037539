/* test_socket.h - two processes joined by a Unix socket: bytes, with a file descriptor when
 * one is given (SCM_RIGHTS), and one-byte notes. Used by the two-process tests, benchmark
 * and conformance cases. Every receive has a deadline (TS_WAIT_S), so a dead or hung peer
 * makes it fail instead of hang. Include after defining _GNU_SOURCE. */
#ifndef GPUHAL_TEST_SOCKET_H
#define GPUHAL_TEST_SOCKET_H

#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifndef TS_WAIT_S
#define TS_WAIT_S 60
#endif

/* 1 when all `n` bytes (and `fd`, when >= 0) went out. */
static inline int ts_send(int sock, const void* bytes, size_t n, int fd) {
  struct msghdr msg;
  struct iovec iov;
  char control[CMSG_SPACE(sizeof(int))];
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
  return sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)n; /* a dead peer: 0, not SIGPIPE */
}

/* Receives exactly `n` bytes (and a descriptor into *fd when one came) within TS_WAIT_S. */
static inline int ts_recv(int sock, void* bytes, size_t n, int* fd) {
  struct pollfd p;
  struct msghdr msg;
  struct iovec iov;
  char control[CMSG_SPACE(sizeof(int))];
  struct cmsghdr* c;
  ssize_t got;
  if (fd) *fd = -1;
  p.fd = sock;
  p.events = POLLIN;
  if (poll(&p, 1, TS_WAIT_S * 1000) != 1) return 0;
  memset(&msg, 0, sizeof(msg));
  iov.iov_base = bytes;
  iov.iov_len = n;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  got = recvmsg(sock, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  if (got != (ssize_t)n) return 0;
  for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && fd) memcpy(fd, CMSG_DATA(c), sizeof(int));
  return 1;
}

static inline int ts_note(int sock, char what) { return ts_send(sock, &what, 1, -1); }
static inline int ts_expect(int sock, char what) {
  char got = 0;
  return ts_recv(sock, &got, 1, NULL) && got == what;
}

#endif /* GPUHAL_TEST_SOCKET_H */
