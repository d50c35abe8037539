/* softnccl.c - a CPU stand-in for libnccl.so.2, for the subset gpuhal uses
 * (GPUHAL_NCCL_SYMBOLS in src/cuda_api.h), working on softcuda devices and streams.
 *
 * Model
 *   - A communicator is one rank of a group; the ranks of a group share a "board": a
 *     header with a barrier, one staging slot per rank (collectives) and one mailbox per
 *     ordered pair of ranks (send/recv). ncclCommInitAll puts the board in process memory;
 *     ncclCommInitRank puts it in a shared-memory file named from the unique id
 *     (/dev/shm/softnccl-<hex>), so ranks in different processes (each with its own
 *     softcuda, hence its own device memory) rendezvous and move data through it. The
 *     board only uses atomics on plain memory, so both cases run the same code.
 *   - Every collective call enqueues ONE stream operation on its rank's stream with
 *     softcuda_stream_enqueue (so stream capture records it and graph launches run it
 *     again). The operation runs on the stream's worker and meets the other ranks inside:
 *     each chunk of up to SOFTNCCL_CHUNK bytes is staged in the rank's slot, a barrier,
 *     each rank computes its own output from all slots (reducing in rank order, so every
 *     rank gets bit-identical results), another barrier.
 *   - Send/recv go through the pair's mailbox (one chunk at a time). Calls between
 *     ncclGroupStart and ncclGroupEnd are enqueued as one operation per (communicator,
 *     stream) at ncclGroupEnd; its point-to-point parts progress together, so a rank may
 *     send to and receive from the same peer in one group, as with NCCL.
 *   - As NCCL's connection setup, a communicator's first call blocks on the host until
 *     every rank of its board has made its first call (so issuing rank after rank from one
 *     thread deadlocks here as it does on a GPU), except that the ranks whose first calls
 *     sit in one ncclGroupStart/End arrive together (one thread driving several GPUs).
 *   - Every wait has a deadline ($SOFTNCCL_TIMEOUT_MS, default 60000): a rank that never
 *     arrives makes the operation fail with CUDA_ERROR_LAUNCH_TIMEOUT (the context is
 *     poisoned, as after a hung kernel) and the communicator's async error ncclSystemError.
 */
#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../src/cuda_api.h"
#include "softcuda.h"

#define SN_API __attribute__((visibility("default")))
#define SOFTNCCL_CHUNK ((size_t)256 * 1024)
#define SN_MAX_RANKS 64
#define SN_MAGIC 0x534e4343u /* "SNCC" */

/* ---------------------------------------------------------------- fault injection ---- */
/* Every nccl* entry point (ncclGetErrorString excepted) first asks softcuda whether this
 * call is to fail (SOFTCUDA_FAULTS / softcuda_set_faults rules name nccl* entry points like
 * CUDA ones; softcuda counts the calls for softcuda_query_calls). The rule's number is the
 * ncclResult_t when it is one (1..6: ncclUnhandledCudaError .. ncclRemoteError, so
 * "ncclAllReduce@1=2" gives ncclSystemError, as does the name CUDA_ERROR_OUT_OF_MEMORY,
 * whose number is 2); any other number gives ncclUnhandledCudaError. A failed call has no
 * side effect, except ncclGroupEnd, which closes the group and drops its calls (as NCCL's
 * failed ncclGroupEnd leaves no group open). */
static ncclResult_t sn_fault(const char* entry) {
  int r = softcuda_fault_point(entry);
  if (r == 0) return ncclSuccess;
  return r >= (int)ncclUnhandledCudaError && r <= (int)ncclRemoteError ? (ncclResult_t)r : ncclUnhandledCudaError;
}
#define SN_FAULT(name)                                  \
  do {                                                  \
    ncclResult_t sn_fault_r_ = sn_fault(#name);         \
    if (sn_fault_r_ != ncclSuccess) return sn_fault_r_; \
  } while (0)

/* ---------------------------------------------------------------- time, waiting ---- */
static int64_t sn_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static int64_t sn_timeout_ns(void) {
  const char* v = getenv("SOFTNCCL_TIMEOUT_MS");
  long ms = v && v[0] ? atol(v) : 60000;
  if (ms <= 0) ms = 60000;
  return (int64_t)ms * 1000000;
}
/* Backs off: spins a little, then yields, then sleeps. */
static void sn_backoff(unsigned* spins) {
  struct timespec ts = {0, 50000};
  if (++*spins < 64) return;
  if (*spins < 256) {
    sched_yield();
    return;
  }
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- the board ---- */
typedef struct sn_mailbox {
  uint32_t full; /* 0: empty; 1: holds `bytes` for the receiver */
  uint32_t pad;
  uint64_t bytes;
} sn_mailbox;

typedef struct sn_board {
  uint32_t magic;
  int32_t nranks;
  int32_t joined;   /* ranks that attached (InitRank) */
  int32_t refs;     /* attached communicators (InitAll: freed by the last) */
  uint32_t arrived; /* barrier */
  uint32_t generation;
  int32_t failed; /* a rank timed out: everyone fails fast */
  int32_t pad;
  /* then: nranks slots of SOFTNCCL_CHUNK, then nranks*nranks mailboxes (header + chunk) */
} sn_board;

static size_t sn_align(size_t n) { return (n + 255) & ~(size_t)255; }
static size_t sn_mailbox_stride(void) { return sn_align(sizeof(sn_mailbox)) + SOFTNCCL_CHUNK; }
static size_t sn_board_bytes(int n) {
  return sn_align(sizeof(sn_board)) + (size_t)n * SOFTNCCL_CHUNK + (size_t)n * (size_t)n * sn_mailbox_stride();
}
static unsigned char* sn_slot(sn_board* b, int rank) {
  return (unsigned char*)b + sn_align(sizeof(sn_board)) + (size_t)rank * SOFTNCCL_CHUNK;
}
static sn_mailbox* sn_box(sn_board* b, int from, int to) {
  unsigned char* base = (unsigned char*)b + sn_align(sizeof(sn_board)) + (size_t)b->nranks * SOFTNCCL_CHUNK;
  return (sn_mailbox*)(base + ((size_t)from * (size_t)b->nranks + (size_t)to) * sn_mailbox_stride());
}
static unsigned char* sn_box_data(sn_mailbox* m) { return (unsigned char*)m + sn_align(sizeof(sn_mailbox)); }

struct ncclComm {
  uint32_t magic;
  int rank, nranks, dev;
  sn_board* board;
  size_t board_bytes;
  int shared_file; /* board is an mmap of a /dev/shm file */
  int destroyed;
  int connected; /* made its first collective call (see sn_connect) */
  ncclResult_t async_error;
  struct ncclComm* next_live; /* sn_live_comms */
  int refs;                   /* the user's (until destroy or abort) and one per enqueued operation */
};

/* Every live communicator. A communicator whose destroy failed (fault injection) stays here,
 * as a driver keeps what it failed to release: reachable, so LeakSanitizer does not count
 * it as the caller's leak. */
static pthread_mutex_t sn_live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm* sn_live_comms;

static void sn_live_add(struct ncclComm* c) {
  pthread_mutex_lock(&sn_live_mu);
  c->next_live = sn_live_comms;
  sn_live_comms = c;
  pthread_mutex_unlock(&sn_live_mu);
}

static void sn_live_remove(struct ncclComm* c) {
  struct ncclComm** p;
  pthread_mutex_lock(&sn_live_mu);
  for (p = &sn_live_comms; *p; p = &(*p)->next_live) {
    if (*p == c) {
      *p = c->next_live;
      break;
    }
  }
  pthread_mutex_unlock(&sn_live_mu);
}

/* Generation barrier over all ranks. 0, or -1 on timeout / a failed board. */
/* `ranks` ranks of the board arrive at once (one thread calling for several ranks). */
static int sn_barrier_n(ncclComm_t comm, uint32_t ranks) {
  sn_board* b = comm->board;
  uint32_t gen = __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE);
  int64_t deadline = sn_now_ns() + sn_timeout_ns();
  unsigned spins = 0;
  if (__atomic_add_fetch(&b->arrived, ranks, __ATOMIC_ACQ_REL) == (uint32_t)b->nranks) {
    __atomic_store_n(&b->arrived, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&b->generation, gen + 1, __ATOMIC_RELEASE);
    return 0;
  }
  while (__atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) == gen) {
    if (__atomic_load_n(&b->failed, __ATOMIC_ACQUIRE) || sn_now_ns() > deadline) return -1;
    sn_backoff(&spins);
  }
  return 0;
}
static int sn_barrier(ncclComm_t comm) { return sn_barrier_n(comm, 1); }

/* ------------------------------------------------------------ element types ---- */
static size_t sn_type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

static float sn_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24);
    return sign ? -f : f;
  }
  if (exp == 31)
    bits = sign | 0x7f800000u | (man << 13);
  else
    bits = sign | ((exp + 112) << 23) | (man << 13);
  memcpy(&f, &bits, 4);
  return f;
}
static uint16_t sn_float_to_half(float f) {
  uint32_t bits, sign, man;
  int exp;
  memcpy(&bits, &f, 4);
  sign = (bits >> 16) & 0x8000;
  exp = (int)((bits >> 23) & 0xff) - 127 + 15;
  man = bits & 0x7fffff;
  if (((bits >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {
    float a = fabsf(f);
    return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f)); /* subnormal: units of 2^-24 */
  }
  {
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* round to nearest even */
    return (uint16_t)h;
  }
}
static float sn_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static uint16_t sn_float_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return (uint16_t)((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}

/* acc[i] = acc[i] (op) in[i] for n elements. */
#define SN_REDUCE_LOOP(T)                                      \
  do {                                                         \
    T* a = (T*)acc;                                            \
    const T* x = (const T*)in;                                 \
    for (i = 0; i < n; ++i) {                                  \
      switch (op) {                                            \
        case ncclProd: a[i] = (T)(a[i] * x[i]); break;         \
        case ncclMax: a[i] = a[i] > x[i] ? a[i] : x[i]; break; \
        case ncclMin: a[i] = a[i] < x[i] ? a[i] : x[i]; break; \
        default: a[i] = (T)(a[i] + x[i]); break;               \
      }                                                        \
    }                                                          \
  } while (0)

static void sn_reduce16(void* acc, const void* in, size_t n, ncclRedOp_t op, int bf16) {
  uint16_t* a = (uint16_t*)acc;
  const uint16_t* x = (const uint16_t*)in;
  size_t i;
  for (i = 0; i < n; ++i) {
    float p = bf16 ? sn_bf16_to_float(a[i]) : sn_half_to_float(a[i]);
    float q = bf16 ? sn_bf16_to_float(x[i]) : sn_half_to_float(x[i]);
    float r = op == ncclProd ? p * q : op == ncclMax ? (p > q ? p : q) : op == ncclMin ? (p < q ? p : q) : p + q;
    a[i] = bf16 ? sn_float_to_bf16(r) : sn_float_to_half(r);
  }
}

static void sn_reduce(void* acc, const void* in, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  size_t i;
  switch (t) {
    case ncclInt8: SN_REDUCE_LOOP(int8_t); break;
    case ncclUint8: SN_REDUCE_LOOP(uint8_t); break;
    case ncclInt32: SN_REDUCE_LOOP(int32_t); break;
    case ncclUint32: SN_REDUCE_LOOP(uint32_t); break;
    case ncclInt64: SN_REDUCE_LOOP(int64_t); break;
    case ncclUint64: SN_REDUCE_LOOP(uint64_t); break;
    case ncclFloat32: SN_REDUCE_LOOP(float); break;
    case ncclFloat64: SN_REDUCE_LOOP(double); break;
    case ncclFloat16: sn_reduce16(acc, in, n, op, 0); break;
    case ncclBfloat16: sn_reduce16(acc, in, n, op, 1); break;
    default: break;
  }
}

/* ncclAvg: the sum divided by the number of ranks. */
#define SN_DIV_LOOP(T)                                    \
  do {                                                    \
    T* a = (T*)acc;                                       \
    for (i = 0; i < n; ++i) a[i] = (T)(a[i] / (T)nranks); \
  } while (0)
static void sn_divide(void* acc, size_t n, ncclDataType_t t, int nranks) {
  size_t i;
  switch (t) {
    case ncclInt8: SN_DIV_LOOP(int8_t); break;
    case ncclUint8: SN_DIV_LOOP(uint8_t); break;
    case ncclInt32: SN_DIV_LOOP(int32_t); break;
    case ncclUint32: SN_DIV_LOOP(uint32_t); break;
    case ncclInt64: SN_DIV_LOOP(int64_t); break;
    case ncclUint64: SN_DIV_LOOP(uint64_t); break;
    case ncclFloat32: SN_DIV_LOOP(float); break;
    case ncclFloat64: SN_DIV_LOOP(double); break;
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t* a = (uint16_t*)acc;
      int bf = t == ncclBfloat16;
      for (i = 0; i < n; ++i) {
        float v = (bf ? sn_bf16_to_float(a[i]) : sn_half_to_float(a[i])) / (float)nranks;
        a[i] = bf ? sn_float_to_bf16(v) : sn_float_to_half(v);
      }
      break;
    }
    default: break;
  }
}

/* ------------------------------------------------------------ operations ---- */
typedef enum sn_kind {
  SN_ALL_REDUCE,
  SN_ALL_GATHER,
  SN_REDUCE_SCATTER,
  SN_BROADCAST,
  SN_REDUCE,
  SN_SEND,
  SN_RECV
} sn_kind;

typedef struct sn_item {
  sn_kind kind;
  const unsigned char* send;
  unsigned char* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root; /* root, or peer for send/recv */
} sn_item;

/* One stream operation: the items of one call or one group, for one communicator. */
typedef struct sn_task {
  ncclComm_t comm;
  int nitems;
  sn_item items[1];
} sn_task;

/* Reduces slot[0..n) (m elements at element offset `at` of each slot) into out. */
static void sn_reduce_slots(ncclComm_t comm, unsigned char* out, size_t at, size_t m, ncclDataType_t t,
                            ncclRedOp_t op) {
  size_t es = sn_type_size(t);
  int q;
  memmove(out, sn_slot(comm->board, 0) + at * es, m * es);
  for (q = 1; q < comm->nranks; ++q) sn_reduce(out, sn_slot(comm->board, q) + at * es, m, t, op);
  if (op == ncclAvg) sn_divide(out, m, t, comm->nranks);
}

static int sn_run_collective(ncclComm_t comm, const sn_item* it) {
  size_t es = sn_type_size(it->type);
  size_t per_chunk = SOFTNCCL_CHUNK / es;
  int n = comm->nranks, r = comm->rank, q;
  size_t off, m;
  if (it->kind == SN_REDUCE_SCATTER) per_chunk /= (size_t)n;
  for (off = 0; off < it->count; off += m) {
    m = it->count - off < per_chunk ? it->count - off : per_chunk;
    /* stage my part */
    switch (it->kind) {
      case SN_ALL_REDUCE:
      case SN_REDUCE:
      case SN_ALL_GATHER: memcpy(sn_slot(comm->board, r), it->send + off * es, m * es); break;
      case SN_BROADCAST:
        if (r == it->root) memcpy(sn_slot(comm->board, r), it->send + off * es, m * es);
        break;
      case SN_REDUCE_SCATTER:
        for (q = 0; q < n; ++q)
          memcpy(sn_slot(comm->board, r) + (size_t)q * m * es, it->send + ((size_t)q * it->count + off) * es, m * es);
        break;
      default: break;
    }
    if (sn_barrier(comm)) return -1;
    switch (it->kind) {
      case SN_ALL_REDUCE: sn_reduce_slots(comm, it->recv + off * es, 0, m, it->type, it->op); break;
      case SN_REDUCE:
        if (r == it->root) sn_reduce_slots(comm, it->recv + off * es, 0, m, it->type, it->op);
        break;
      case SN_ALL_GATHER:
        for (q = 0; q < n; ++q) memcpy(it->recv + ((size_t)q * it->count + off) * es, sn_slot(comm->board, q), m * es);
        break;
      case SN_BROADCAST: memmove(it->recv + off * es, sn_slot(comm->board, it->root), m * es); break;
      case SN_REDUCE_SCATTER: sn_reduce_slots(comm, it->recv + off * es, (size_t)r * m, m, it->type, it->op); break;
      default: break;
    }
    if (sn_barrier(comm)) return -1;
  }
  return 0;
}

/* Point-to-point progress of one item: moves at most one chunk. *done_bytes grows. */
static int sn_p2p_step(ncclComm_t comm, const sn_item* it, size_t* done_bytes) {
  size_t total = it->count * sn_type_size(it->type);
  sn_mailbox* box;
  size_t m;
  if (*done_bytes >= total) return 0;
  if (it->kind == SN_SEND) {
    box = sn_box(comm->board, comm->rank, it->root);
    if (__atomic_load_n(&box->full, __ATOMIC_ACQUIRE)) return 0;
    m = total - *done_bytes < SOFTNCCL_CHUNK ? total - *done_bytes : SOFTNCCL_CHUNK;
    memcpy(sn_box_data(box), it->send + *done_bytes, m);
    box->bytes = m;
    __atomic_store_n(&box->full, 1, __ATOMIC_RELEASE);
  } else {
    box = sn_box(comm->board, it->root, comm->rank);
    if (!__atomic_load_n(&box->full, __ATOMIC_ACQUIRE)) return 0;
    m = (size_t)box->bytes;
    if (m > total - *done_bytes) m = total - *done_bytes; /* a longer send: NCCL says undefined */
    memcpy(it->recv + *done_bytes, sn_box_data(box), m);
    __atomic_store_n(&box->full, 0, __ATOMIC_RELEASE);
  }
  *done_bytes += m;
  return 1;
}

/* Runs items [first, last) of point-to-point kind together until all are done. */
static int sn_run_p2p(ncclComm_t comm, const sn_item* items, int count) {
  size_t done[64];
  int64_t deadline = sn_now_ns() + sn_timeout_ns();
  unsigned spins = 0;
  int i, pending;
  if (count > 64) return -1;
  memset(done, 0, sizeof(done));
  for (;;) {
    int progress = 0;
    pending = 0;
    for (i = 0; i < count; ++i) {
      progress += sn_p2p_step(comm, &items[i], &done[i]);
      if (done[i] < items[i].count * sn_type_size(items[i].type)) pending++;
    }
    if (!pending) return 0;
    if (progress) {
      spins = 0;
      deadline = sn_now_ns() + sn_timeout_ns();
      continue;
    }
    if (__atomic_load_n(&comm->board->failed, __ATOMIC_ACQUIRE) || sn_now_ns() > deadline) return -1;
    sn_backoff(&spins);
  }
}

static int sn_task_run(void* payload) {
  sn_task* t = (sn_task*)payload;
  ncclComm_t comm = t->comm;
  int i = 0;
  while (i < t->nitems) {
    int rc;
    if (t->items[i].kind == SN_SEND || t->items[i].kind == SN_RECV) {
      int j = i;
      while (j < t->nitems && (t->items[j].kind == SN_SEND || t->items[j].kind == SN_RECV)) ++j;
      rc = sn_run_p2p(comm, &t->items[i], j - i);
      i = j;
    } else {
      rc = sn_run_collective(comm, &t->items[i]);
      ++i;
    }
    if (rc) {
      __atomic_store_n(&comm->board->failed, 1, __ATOMIC_RELEASE);
      comm->async_error = ncclSystemError;
      fprintf(stderr, "softnccl: rank %d of %d: a peer did not arrive in time (SOFTNCCL_TIMEOUT_MS)\n", comm->rank,
              comm->nranks);
      return 702; /* CUDA_ERROR_LAUNCH_TIMEOUT */
    }
  }
  return 0;
}

static void sn_comm_unref(ncclComm_t comm);

/* The operation is dropped (it ran, or the graph holding it is gone): its communicator
 * reference goes with it. */
static void sn_task_fini(void* payload) {
  sn_task* t = (sn_task*)payload;
  sn_comm_unref(t->comm);
  free(t);
}

/* --------------------------------------------------------------- grouping ---- */
typedef struct sn_pending {
  ncclComm_t comm;
  CUstream stream;
  sn_item item;
} sn_pending;

static __thread int sn_group_depth;
static __thread sn_pending* sn_group_items;
static __thread int sn_group_count, sn_group_cap;

/* NCCL sets up its connections lazily, in a communicator's first collective call, and
 * that call BLOCKS on the host until every rank of the group has made its own first call.
 * softnccl does the same, so code that issues rank after rank from one thread (which
 * deadlocks on real NCCL) fails here too instead of passing. */
static ncclResult_t sn_connect_n(ncclComm_t comm, uint32_t ranks) {
  if (comm->connected) return ncclSuccess;
  if (sn_barrier_n(comm, ranks)) {
    __atomic_store_n(&comm->board->failed, 1, __ATOMIC_RELEASE);
    fprintf(stderr,
            "softnccl: rank %d of %d timed out in its first collective waiting for the other ranks: NCCL's "
            "connection setup blocks until every rank makes its first call, so ranks must be issued from "
            "different threads\n",
            comm->rank, comm->nranks);
    comm->async_error = ncclSystemError;
    return ncclSystemError;
  }
  comm->connected = 1;
  return ncclSuccess;
}
static ncclResult_t sn_connect(ncclComm_t comm) { return sn_connect_n(comm, 1); }

/* A group that holds the first calls of several ranks of one board (one thread driving
 * several GPUs, as ncclGroupStart/End allows) connects them together: they arrive at the
 * board's barrier as one. */
static ncclResult_t sn_group_connect(void) {
  int i, j;
  for (i = 0; i < sn_group_count; ++i) {
    ncclComm_t comm = sn_group_items[i].comm;
    uint32_t ranks = 1;
    ncclResult_t r;
    if (!comm || comm->connected) continue;
    for (j = 0; j < i; ++j)
      if (sn_group_items[j].comm == comm) break;
    if (j < i) continue; /* counted at its first appearance */
    for (j = i + 1; j < sn_group_count; ++j) {
      ncclComm_t other = sn_group_items[j].comm;
      int k, seen = 0;
      if (!other || other == comm || other->board != comm->board || other->connected) continue;
      for (k = i; k < j; ++k) seen |= sn_group_items[k].comm == other;
      if (!seen) ranks++;
    }
    r = sn_connect_n(comm, ranks);
    if (r != ncclSuccess) return r;
    for (j = i + 1; j < sn_group_count; ++j)
      if (sn_group_items[j].comm && sn_group_items[j].comm->board == comm->board) sn_group_items[j].comm->connected = 1;
  }
  return ncclSuccess;
}

static ncclResult_t sn_enqueue_items(ncclComm_t comm, CUstream stream, const sn_item* items, int count) {
  sn_task* t;
  int i, r;
  ncclResult_t connected = sn_connect(comm);
  if (connected != ncclSuccess) return connected;
  t = (sn_task*)calloc(1, sizeof(sn_task) + sizeof(sn_item) * (size_t)(count > 0 ? count - 1 : 0));
  if (!t) return ncclSystemError;
  t->comm = comm;
  t->nitems = count;
  for (i = 0; i < count; ++i) t->items[i] = items[i];
  /* The operation keeps the communicator (and its board) alive: as NCCL's destroy lets
   * enqueued work finish, a destroy while it is queued or running must not free them. */
  __atomic_add_fetch(&comm->refs, 1, __ATOMIC_ACQ_REL);
  r = softcuda_stream_enqueue((void*)stream, "nccl", sn_task_run, sn_task_fini, t);
  if (r != 0) {
    __atomic_sub_fetch(&comm->refs, 1, __ATOMIC_ACQ_REL);
    free(t);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

static int sn_check_comm(ncclComm_t comm) { return comm && comm->magic == SN_MAGIC && !comm->destroyed; }

static ncclResult_t sn_submit(ncclComm_t comm, CUstream stream, const sn_item* item) {
  if (!sn_check_comm(comm)) return ncclInvalidArgument;
  if (sn_type_size(item->type) == 0 || item->type == ncclFloat8e4m3 || item->type == ncclFloat8e5m2)
    return ncclInvalidArgument;
  if ((item->kind == SN_ALL_REDUCE || item->kind == SN_REDUCE || item->kind == SN_REDUCE_SCATTER) &&
      (int)item->op >= (int)ncclNumOps)
    return ncclInvalidArgument;
  if (item->root < 0 || item->root >= comm->nranks) return ncclInvalidArgument;
  if (item->count && !item->recv && item->kind != SN_SEND && !((item->kind == SN_REDUCE) && comm->rank != item->root))
    return ncclInvalidArgument;
  if (sn_group_depth > 0) {
    if (sn_group_count == sn_group_cap) {
      int cap = sn_group_cap ? sn_group_cap * 2 : 16;
      sn_pending* n = (sn_pending*)realloc(sn_group_items, sizeof(sn_pending) * (size_t)cap);
      if (!n) return ncclSystemError;
      sn_group_items = n;
      sn_group_cap = cap;
    }
    sn_group_items[sn_group_count].comm = comm;
    sn_group_items[sn_group_count].stream = stream;
    sn_group_items[sn_group_count].item = *item;
    sn_group_count++;
    return ncclSuccess;
  }
  return sn_enqueue_items(comm, stream, item, 1);
}

SN_API ncclResult_t ncclGroupStart(void) {
  SN_FAULT(ncclGroupStart);
  sn_group_depth++;
  return ncclSuccess;
}

/* One operation per (communicator, stream), in the order of first appearance. */
SN_API ncclResult_t ncclGroupEnd(void) {
  ncclResult_t result = sn_fault("ncclGroupEnd");
  int i, j;
  if (result != ncclSuccess) {
    if (sn_group_depth > 0 && --sn_group_depth == 0) { /* the group's calls are dropped, and its list */
      sn_group_count = 0;
      free(sn_group_items);
      sn_group_items = NULL;
      sn_group_cap = 0;
    }
    return result;
  }
  if (sn_group_depth <= 0) return ncclInvalidUsage;
  if (--sn_group_depth > 0) return ncclSuccess;
  result = sn_group_connect();
  for (i = 0; result == ncclSuccess && i < sn_group_count; ++i) {
    sn_item items[64];
    int count = 0;
    if (!sn_group_items[i].comm) continue;
    for (j = i; j < sn_group_count; ++j) {
      if (sn_group_items[j].comm != sn_group_items[i].comm || sn_group_items[j].stream != sn_group_items[i].stream)
        continue;
      if (count == 64) {
        result = ncclInvalidUsage;
        break;
      }
      items[count++] = sn_group_items[j].item;
      if (j != i) sn_group_items[j].comm = NULL;
    }
    if (result == ncclSuccess)
      result = sn_enqueue_items(sn_group_items[i].comm, sn_group_items[i].stream, items, count);
    sn_group_items[i].comm = NULL;
  }
  sn_group_count = 0;
  /* The list is per thread and threads come and go (gpuhal issues on device workers):
   * don't keep it past the group. */
  free(sn_group_items);
  sn_group_items = NULL;
  sn_group_cap = 0;
  return result;
}

/* ------------------------------------------------------------ collectives ---- */
static sn_item sn_make(sn_kind kind, const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                       int root) {
  sn_item it;
  memset(&it, 0, sizeof(it));
  it.kind = kind;
  it.send = (const unsigned char*)send;
  it.recv = (unsigned char*)recv;
  it.count = count;
  it.type = t;
  it.op = op;
  it.root = root;
  return it;
}

SN_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, CUstream stream) {
  sn_item it = sn_make(SN_ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, 0);
  SN_FAULT(ncclAllReduce);
  return sn_submit(comm, stream, &it);
}
SN_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, CUstream stream) {
  sn_item it = sn_make(SN_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0);
  SN_FAULT(ncclAllGather);
  return sn_submit(comm, stream, &it);
}
SN_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, CUstream stream) {
  sn_item it = sn_make(SN_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0);
  SN_FAULT(ncclReduceScatter);
  return sn_submit(comm, stream, &it);
}
SN_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, CUstream stream) {
  sn_item it = sn_make(SN_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root);
  SN_FAULT(ncclBroadcast);
  return sn_submit(comm, stream, &it);
}
SN_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, int root, ncclComm_t comm, CUstream stream) {
  sn_item it = sn_make(SN_REDUCE, sendbuff, recvbuff, count, datatype, op, root);
  SN_FAULT(ncclReduce);
  return sn_submit(comm, stream, &it);
}
SN_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             CUstream stream) {
  sn_item it = sn_make(SN_SEND, sendbuff, NULL, count, datatype, ncclSum, peer);
  SN_FAULT(ncclSend);
  return sn_submit(comm, stream, &it);
}
SN_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             CUstream stream) {
  sn_item it = sn_make(SN_RECV, NULL, recvbuff, count, datatype, ncclSum, peer);
  SN_FAULT(ncclRecv);
  return sn_submit(comm, stream, &it);
}

/* --------------------------------------------------------- communicators ---- */
SN_API ncclResult_t ncclGetVersion(int* version) {
  SN_FAULT(ncclGetVersion);
  if (!version) return ncclInvalidArgument;
  *version = 22304; /* reports itself as NCCL 2.23.4 */
  return ncclSuccess;
}

static const char sn_id_prefix[] = "softnccl-id:";

SN_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  unsigned char rnd[16];
  SN_FAULT(ncclGetUniqueId);
  FILE* f;
  size_t i;
  if (!uniqueId) return ncclInvalidArgument;
  memset(uniqueId, 0, sizeof(*uniqueId));
  f = fopen("/dev/urandom", "rb");
  if (!f || fread(rnd, 1, sizeof(rnd), f) != sizeof(rnd)) {
    int64_t t = sn_now_ns() ^ (int64_t)getpid();
    memcpy(rnd, &t, sizeof(t));
    memcpy(rnd + 8, &t, sizeof(t));
  }
  if (f) fclose(f);
  memcpy(uniqueId->internal, sn_id_prefix, sizeof(sn_id_prefix) - 1);
  for (i = 0; i < sizeof(rnd); ++i) snprintf(uniqueId->internal + sizeof(sn_id_prefix) - 1 + 2 * i, 3, "%02x", rnd[i]);
  return ncclSuccess;
}

static ncclComm_t sn_comm_new(int rank, int nranks, int dev, sn_board* board, size_t bytes, int shared_file) {
  ncclComm_t c = (ncclComm_t)calloc(1, sizeof(struct ncclComm));
  if (!c) return NULL;
  c->magic = SN_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  c->dev = dev;
  c->board = board;
  c->board_bytes = bytes;
  c->shared_file = shared_file;
  c->refs = 1;
  sn_live_add(c);
  return c;
}

SN_API ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  size_t bytes;
  SN_FAULT(ncclCommInitAll);
  sn_board* board;
  int i, j;
  if (!comm || ndev <= 0 || ndev > SN_MAX_RANKS) return ncclInvalidArgument;
  if (devlist)
    for (i = 0; i < ndev; ++i)
      for (j = 0; j < i; ++j)
        if (devlist[i] == devlist[j]) return ncclInvalidUsage; /* NCCL: duplicate GPU */
  bytes = sn_board_bytes(ndev);
  board = (sn_board*)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (board == MAP_FAILED) return ncclSystemError;
  board->magic = SN_MAGIC;
  board->nranks = ndev;
  board->joined = ndev;
  board->refs = ndev;
  for (i = 0; i < ndev; ++i) {
    comm[i] = sn_comm_new(i, ndev, devlist ? devlist[i] : i, board, bytes, 0);
    if (!comm[i]) {
      while (i-- > 0) {
        sn_live_remove(comm[i]);
        free(comm[i]);
      }
      munmap(board, bytes);
      return ncclSystemError;
    }
  }
  return ncclSuccess;
}

static int sn_id_valid(const ncclUniqueId* id) {
  size_t i, n = sizeof(sn_id_prefix) - 1;
  if (memcmp(id->internal, sn_id_prefix, n) != 0) return 0;
  for (i = n; i < n + 32; ++i) {
    char ch = id->internal[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return 0;
  }
  return 1;
}

SN_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  char path[128];
  size_t bytes;
  SN_FAULT(ncclCommInitRank);
  sn_board* board;
  int fd, expected = 0;
  int64_t deadline;
  unsigned spins = 0;
  if (!comm || nranks <= 0 || nranks > SN_MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  *comm = NULL;
  if (!sn_id_valid(&commId)) return ncclInvalidArgument;
  snprintf(path, sizeof(path), "/dev/shm/softnccl-%.32s", commId.internal + sizeof(sn_id_prefix) - 1);
  bytes = sn_board_bytes(nranks);
  fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0) return ncclSystemError;
  if (ftruncate(fd, (off_t)bytes) != 0) { /* every rank sizes it the same: zero-filled */
    close(fd);
    return ncclSystemError;
  }
  board = (sn_board*)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (board == MAP_FAILED) return ncclSystemError;
  if (!__atomic_compare_exchange_n(&board->nranks, &expected, nranks, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      expected != nranks) {
    munmap(board, bytes);
    return ncclInvalidUsage; /* ranks disagree on the size */
  }
  __atomic_add_fetch(&board->joined, 1, __ATOMIC_ACQ_REL);
  deadline = sn_now_ns() + sn_timeout_ns();
  while (__atomic_load_n(&board->joined, __ATOMIC_ACQUIRE) < nranks) {
    if (sn_now_ns() > deadline) {
      munmap(board, bytes);
      unlink(path);
      return ncclSystemError;
    }
    sn_backoff(&spins);
  }
  *comm = sn_comm_new(rank, nranks, -1, board, bytes, 1);
  if (!*comm) {
    munmap(board, bytes);
    return ncclSystemError;
  }
  if (rank == 0) unlink(path); /* everyone has it mapped: the name is no longer needed */
  return ncclSuccess;
}

static void sn_comm_free(ncclComm_t comm) {
  sn_live_remove(comm);
  if (comm->shared_file) {
    munmap(comm->board, comm->board_bytes);
  } else if (__atomic_sub_fetch(&comm->board->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    munmap(comm->board, comm->board_bytes);
  }
  comm->magic = 0;
  free(comm);
}

static void sn_comm_unref(ncclComm_t comm) {
  if (__atomic_sub_fetch(&comm->refs, 1, __ATOMIC_ACQ_REL) == 0) sn_comm_free(comm);
}

SN_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  SN_FAULT(ncclCommDestroy);
  if (!comm) return ncclSuccess;
  if (!sn_check_comm(comm)) return ncclInvalidArgument;
  comm->destroyed = 1;
  sn_comm_unref(comm);
  return ncclSuccess;
}
SN_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  SN_FAULT(ncclCommAbort);
  if (!comm) return ncclSuccess;
  if (!sn_check_comm(comm)) return ncclInvalidArgument;
  __atomic_store_n(&comm->board->failed, 1, __ATOMIC_RELEASE);
  comm->destroyed = 1;
  sn_comm_unref(comm);
  return ncclSuccess;
}
SN_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  SN_FAULT(ncclCommGetAsyncError);
  if (!sn_check_comm(comm) || !asyncError) return ncclInvalidArgument;
  *asyncError = comm->async_error;
  return ncclSuccess;
}
SN_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  SN_FAULT(ncclCommCount);
  if (!sn_check_comm(comm) || !count) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}
SN_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  SN_FAULT(ncclCommUserRank);
  if (!sn_check_comm(comm) || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}
SN_API const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
