/* Command buffers: a GRAPH copy larger than GPUHAL__GRAPH_COPY_PIECE becomes a chain of
 * memcpy nodes of at most that many bytes (command_buffer_graph.c; on an H200 one large
 * memcpy node runs at about 0.64x a stream copy). The piece is shrunk to 4 KiB here so that
 * small copies span many pieces: the bytes arrive whole, the graph holds one node per piece,
 * and what comes after a barrier waits for the last piece. */
#define GPUHAL__GRAPH_COPY_PIECE ((uint64_t)4096)
#include "test_internals.h"
#include "test_command_buffer_common.h"

/* How many nodes the command buffer's graph holds at its top level. */
static size_t cp_node_count(gpuhal_command_buffer_t* cb) {
  void* graph = NULL;
  size_t count = 0;
  TU_CHECK_OK(gpuhal_command_buffer_native_graph(cb, &graph));
  if (graph) TU_CHECK(cb->device->cu->cuGraphGetNodes((CUgraph)graph, NULL, &count) == CUDA_SUCCESS);
  return count;
}

/* Copies of every size around the piece (one short of it, exactly, one over, several and a
 * tail) from random bytes, then a second copy behind a barrier from each result: both
 * destinations must hold the source, byte for byte. */
TU_TEST(copies_in_pieces) {
  static const uint64_t sizes[] = {1, 4095, 4096, 4097, 3 * 4096 + 5, 40000};
  cbt t;
  size_t k;
  if (!cbt_open(&t)) return;
  for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    uint64_t size = sizes[k], pieces = (size + 4095) / 4096;
    gpuhal_buffer_t *src = NULL, *mid = NULL, *dst = NULL;
    gpuhal_command_buffer_t* cb = NULL;
    unsigned char* host = NULL;
    char what[64];
    TU_REQUIRE_OK(cbt_random_buffer(&t, size, &src, &host));
    TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, size, &mid));
    TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, size, &dst));
    TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_GRAPH, 0, &cb));
    TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
    TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(src, 0), gpuhal_ref_buffer(mid, 0), size));
    TU_CHECK_OK(gpuhal_cmd_barrier(cb));
    TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(mid, 0), gpuhal_ref_buffer(dst, 0), size));
    TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
    TU_CHECK_EQ_INT(cp_node_count(cb), 2 * pieces);
    TU_CHECK_OK(cbt_run(&t, cb, NULL));
    snprintf(what, sizeof(what), "a copy of %llu bytes", (unsigned long long)size);
    cbt_buffer_equals(mid, host, size, what);
    snprintf(what, sizeof(what), "the copy behind the barrier, %llu bytes", (unsigned long long)size);
    cbt_buffer_equals(dst, host, size, what);
    gpuhal_command_buffer_release(cb);
    gpuhal_buffer_release(src);
    gpuhal_buffer_release(mid);
    gpuhal_buffer_release(dst);
    free(host);
  }
  cbt_close(&t);
}

/* A reusable graph: a long copy, a barrier, then a dispatch that reads what the copy
 * wrote (c = b + b), executed many times with new data in the source each time: every
 * result is checked, so the dispatch ran after the copy's last piece every time. */
TU_TEST(reusable_copy_then_dispatch) {
  enum { N = 5000, EXECUTES = 50 }; /* 20,000 bytes: 5 pieces */
  cbt t;
  gpuhal_buffer_t *a = NULL, *b = NULL, *c = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[4];
  float *in = NULL, *out = NULL;
  int e;
  if (!cbt_open(&t)) return;
  in = (float*)malloc(N * 4);
  out = (float*)malloc(N * 4);
  TU_REQUIRE(in && out);
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, N * 4, &a));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, N * 4, &b));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, N * 4, &c));
  TU_REQUIRE_OK(
      gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(a, 0), gpuhal_ref_buffer(b, 0), N * 4));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  args[0] = gpuhal_arg_buffer(b, 0);
  args[1] = gpuhal_arg_buffer(b, 0);
  args[2] = gpuhal_arg_buffer(c, 0);
  args[3] = gpuhal_arg_u32(N);
  TU_CHECK_OK(
      gpuhal_cmd_dispatch(cb, t.vector_add, gpuhal_dim3((N + 255) / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 4, args));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_EQ_INT(cp_node_count(cb), 5 + 1);
  for (e = 0; e < EXECUTES; ++e) {
    int i;
    for (i = 0; i < N; ++i) in[i] = (float)(e * N + i);
    TU_CHECK_OK(gpuhal_buffer_write(a, 0, in, N * 4));
    TU_CHECK_OK(cbt_run(&t, cb, NULL));
    TU_CHECK_OK(gpuhal_buffer_read(c, 0, out, N * 4));
    for (i = 0; i < N; ++i)
      if (out[i] != 2 * in[i]) {
        TU_FAIL_AT(__FILE__, __LINE__, "execute %d: c[%d] = %g, want %g", e, i, (double)out[i], (double)(2 * in[i]));
        break;
      }
  }
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(a);
  gpuhal_buffer_release(b);
  gpuhal_buffer_release(c);
  free(in);
  free(out);
  cbt_close(&t);
}

TU_MAIN(TU_CASE(copies_in_pieces), TU_CASE(reusable_copy_then_dispatch))
