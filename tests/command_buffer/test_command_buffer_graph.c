/* Command buffers: the GRAPH recorder. The same bodies as test_command_buffer.c (every
 * command byte for byte, every fill pattern size at odd offsets, barrier ordering with a
 * slow writer, 1,000 executes with rotating binding tables patched into the instantiated
 * graph, late-bound queue_alloca buffers, transient buffers after their dealloca,
 * validation), plus the graph's structure read back from the driver (nodes between
 * barriers independent, barrier edges present), rebinding through several instances of
 * the graph (only nodes that differ from the instance's are patched; instances in flight
 * are not patched while there is room for another), and a command buffer's graph destroyed
 * without leaks when the releasing thread cannot push the device's context (softcuda). */
#include "test_internals.h"
#include "test_command_buffer_common.h"

#define GRAPH GPUHAL_COMMAND_BUFFER_GRAPH

TU_TEST(graph_commands_bytes) { body_commands_bytes(GRAPH); }
TU_TEST(graph_fill_every_pattern) { body_fill_patterns(GRAPH); }
TU_TEST(graph_barrier_orders) { body_barrier_orders(GRAPH); }
TU_TEST(graph_reusable_1000_rotating_tables) { body_reusable_rotating(GRAPH); }
TU_TEST(graph_late_bound_alloca) { body_late_alloca(GRAPH); }
TU_TEST(graph_unordered_alloca_fails) { body_unordered_alloca_fails(GRAPH); }
TU_TEST(graph_empty) { body_empty(GRAPH); }
TU_TEST(graph_transient_after_dealloca) { body_transient_after_dealloca(GRAPH); }
TU_TEST(graph_transient_dealloca_queued_first) { body_transient_dealloca_queued_first(GRAPH); }
TU_TEST(graph_transient_through_slot) { body_transient_through_slot(GRAPH); }
TU_TEST(graph_transient_reusable_named) { body_transient_reusable_named(GRAPH); }
TU_TEST(graph_validation) { body_validation(GRAPH); }

/* cbt_open with tuning.graph_instances_max = `max`. */
static int cbg_open_instances(cbt* t, int32_t max) {
  gpuhal_device_params_t params;
  int ok;
  memset(&params, 0, sizeof(params));
  params.tuning.graph_instances_max = max;
  cbt_device_params = &params;
  ok = cbt_open(t);
  cbt_device_params = NULL;
  return ok;
}

/* A REUSABLE GRAPH of `late` late-bound dispatches (atomic_inc on slot 0, a barrier after
 * each), then, with `fixed`, one static atomic_inc of fixed's second counter. */
static int cbg_late_graph(cbt* t, int late, gpuhal_buffer_t* fixed, gpuhal_command_buffer_t** out) {
  gpuhal_arg_t arg = gpuhal_arg_slot(0, 0);
  int k;
  TU_CHECK_OK(gpuhal_command_buffer_create(t->device, GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, 1, out));
  if (!*out) return 0;
  TU_CHECK_OK(gpuhal_command_buffer_begin(*out));
  for (k = 0; k < late; ++k) {
    TU_CHECK_OK(gpuhal_cmd_dispatch(*out, t->atomic_inc, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg));
    TU_CHECK_OK(gpuhal_cmd_barrier(*out));
  }
  if (fixed) {
    arg = gpuhal_arg_buffer(fixed, 4);
    TU_CHECK_OK(gpuhal_cmd_dispatch(*out, t->atomic_inc, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg));
  }
  TU_CHECK_OK(gpuhal_command_buffer_end(*out));
  return !tu_state.failed;
}

/* A REUSABLE STREAM command buffer whose kernel (spin_flag) runs until the first word of
 * `words` is set (at most 60 s): executed ahead of others, it keeps them queued. */
static void cbg_blocker(cbt* t, gpuhal_kernel_t* spin_flag, gpuhal_buffer_t* words, gpuhal_command_buffer_t** out) {
  gpuhal_arg_t spin_args[3];
  spin_args[0] = gpuhal_arg_buffer(words, 0);
  spin_args[1] = gpuhal_arg_buffer(words, 4);
  spin_args[2] = gpuhal_arg_u64(60000000);
  TU_CHECK_OK(
      gpuhal_command_buffer_create(t->device, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, out));
  if (!*out) return;
  TU_CHECK_OK(gpuhal_command_buffer_begin(*out));
  TU_CHECK_OK(gpuhal_cmd_dispatch(*out, spin_flag, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, spin_args));
  TU_CHECK_OK(gpuhal_command_buffer_end(*out));
}

/* Rebinding a REUSABLE GRAPH with tuning.graph_instances_max = 4 (gpuhal__graph_instance_t):
 * an execute launches an instance that holds its bindings as it is; else a new instance,
 * made with its bindings (set in the graph's nodes first: no patch), up to the bound; else
 * an instance not in flight, else the next in turn, patching only the nodes whose arguments
 * differ. The first instance is made at the first execute. Instances are kept in flight
 * behind a kernel that spins until the test lets it go; every execute's result is checked. */
static int32_t cbg_set_params;
static gpuhal_PFN_cuGraphExecKernelNodeSetParams cbg_set_params_orig;
static CUresult CUDAAPI cbg_set_params_counted(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS* p) {
  __atomic_add_fetch(&cbg_set_params, 1, __ATOMIC_SEQ_CST);
  return cbg_set_params_orig(e, n, p);
}
TU_TEST(graph_instances_patch_only_what_differs) {
  enum { TABLES = 6, LATE = 5 };
  /* table (index into counters), expected patched nodes, expected instances after */
  /* Per execute: the table, the nodes it must patch, the instances there are after it.
   * 0-1 are waited for; from 2 on they queue up behind the blocker, so their instances stay
   * in flight. 0: the first instance, made with table 0. 2: a new one for table 1. 3-5:
   * each table has its instance. 6-7: new ones up to the bound. 8-9: the next in turn (0,
   * then 1) is patched in flight. 10-12: the instances the tables last had still hold them. */
  static const int plan[][3] = {{0, 0, 1}, {0, 0, 1},    {1, 0, 2},    {0, 0, 2}, {1, 0, 2}, {0, 0, 2}, {2, 0, 3},
                                {3, 0, 4}, {4, LATE, 4}, {5, LATE, 4}, {2, 0, 4}, {4, 0, 4}, {5, 0, 4}};
  const int steps = (int)(sizeof(plan) / sizeof(plan[0]));
  cbt t;
  gpuhal__cuda_symbols_t* cu;
  gpuhal_buffer_t* counters[TABLES];
  gpuhal_buffer_t* words = NULL;
  gpuhal_kernel_t* spin_flag = NULL;
  gpuhal_command_buffer_t *cb = NULL, *blocker = NULL;
  gpuhal_semaphore_t* sem = NULL;
  uint32_t zero[2] = {0, 0}, expected[TABLES];
  uint64_t value = 0;
  int i;
  if (!cbg_open_instances(&t, 4)) return;
  cu = (gpuhal__cuda_symbols_t*)t.device->cu;
  memset(counters, 0, sizeof(counters));
  memset(expected, 0, sizeof(expected));
  TU_CHECK_OK(cbt_load(&t, 5, "spin_flag", &spin_flag));
  for (i = 0; i < TABLES; ++i) {
    TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 256, &counters[i]));
    if (counters[i]) TU_CHECK_OK(gpuhal_buffer_write(counters[i], 0, zero, 8)); /* both counters */
  }
  TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_HOST_PINNED, 8, &words));
  TU_REQUIRE(spin_flag && words && !tu_state.failed);
  /* LATE late-bound dispatches and one static one */
  TU_REQUIRE(cbg_late_graph(&t, LATE, counters[TABLES - 1], &cb));
  TU_CHECK_EQ_INT(cb->instance_count, 0); /* made at the first execute, with its bindings */
  if (!cu->cuGraphKernelNodeSetParams) {
    /* A driver without it: instances start from the graph's values and are patched. */
    gpuhal_command_buffer_release(cb);
    for (i = 0; i < TABLES; ++i) gpuhal_buffer_release(counters[i]);
    gpuhal_buffer_release(words);
    cbt_close(&t);
    TU_SKIP("the driver has no cuGraphKernelNodeSetParams");
  }
  cbg_blocker(&t, spin_flag, words, &blocker);
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &sem));
  TU_REQUIRE(!tu_state.failed);
  cbg_set_params_orig = cu->cuGraphExecKernelNodeSetParams;
  cu->cuGraphExecKernelNodeSetParams = cbg_set_params_counted;
  for (i = 0; i < steps && !tu_state.failed; ++i) {
    gpuhal_binding_table_t table;
    int32_t before = __atomic_load_n(&cbg_set_params, __ATOMIC_SEQ_CST);
    if (i == 2) {
      /* From here the executes queue up behind the blocker: their instances stay in flight. */
      memcpy(gpuhal_buffer_host_pointer(words), zero, 8);
      TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(),
                                       blocker, NULL));
    }
    table.count = 1;
    table.buffers = &counters[plan[i][0]];
    table.offsets = NULL;
    value++;
    TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&sem, &value), cb, &table));
    expected[plan[i][0]] += LATE;
    /* Before the blocker, each execute is waited for, so its instance is free again. */
    if (i < 2) TU_CHECK_OK(gpuhal_semaphore_wait(sem, value, gpuhal_timeout_relative_ns(10000000000ll)));
    if (__atomic_load_n(&cbg_set_params, __ATOMIC_SEQ_CST) - before != plan[i][1] ||
        (int)cb->instance_count != plan[i][2])
      TU_FAIL_AT(__FILE__, __LINE__, "step %d: %d nodes patched (expected %d), %u instances (expected %d)", i,
                 (int)(__atomic_load_n(&cbg_set_params, __ATOMIC_SEQ_CST) - before), plan[i][1], cb->instance_count,
                 plan[i][2]);
  }
  cu->cuGraphExecKernelNodeSetParams = cbg_set_params_orig;
  __atomic_store_n((uint32_t*)gpuhal_buffer_host_pointer(words), 1u, __ATOMIC_SEQ_CST); /* let it go */
  TU_CHECK_OK(gpuhal_semaphore_wait(sem, value, gpuhal_timeout_relative_ns(30000000000ll)));
  for (i = 0; i < TABLES; ++i) {
    uint32_t got[2] = {0, 0};
    if (counters[i]) TU_CHECK_OK(gpuhal_buffer_read(counters[i], 0, got, 8));
    TU_CHECK_EQ_INT(got[0], expected[i]);
    if (i == TABLES - 1) TU_CHECK_EQ_INT(got[1], (uint32_t)steps); /* the static dispatch, once per execute */
  }
  gpuhal_semaphore_release(sem);
  gpuhal_command_buffer_release(cb);
  gpuhal_command_buffer_release(blocker);
  gpuhal_buffer_release(words);
  for (i = 0; i < TABLES; ++i) gpuhal_buffer_release(counters[i]);
  cbt_close(&t);
}

/* Out of memory for a graph instance. The first instance is made at the first execute: its
 * failure is that execute's (its semaphore fails, the command buffer stays usable, and a
 * later execute makes the instance). Once one exists, a failed extra instance is no
 * failure: the execute patches an existing one, in flight or not, and every result is
 * still exact. */
static int cbg_instantiate_fail; /* atomic */
static gpuhal_PFN_cuGraphInstantiateWithFlags cbg_instantiate_orig;
static CUresult CUDAAPI cbg_instantiate_maybe(CUgraphExec* e, CUgraph g, unsigned long long flags) {
  if (__atomic_load_n(&cbg_instantiate_fail, __ATOMIC_SEQ_CST)) return CUDA_ERROR_OUT_OF_MEMORY;
  return cbg_instantiate_orig(e, g, flags);
}
static gpuhal_status_t cbg_execute(cbt* t, gpuhal_command_buffer_t* cb, gpuhal_buffer_t* buffer,
                                   gpuhal_semaphore_t* sem, uint64_t value) {
  gpuhal_binding_table_t table;
  table.count = 1;
  table.buffers = &buffer;
  table.offsets = NULL;
  return gpuhal_queue_execute(t->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &value), cb,
                              &table);
}
TU_TEST(graph_instance_out_of_memory) {
  enum { LATE = 3 };
  /* per step: the table (0: A, 1: B), instantiation failing, blocked behind the blocker,
   * the instances there are after it */
  static const int plan[][4] = {{1, 0, 0, 1}, {0, 1, 0, 1}, {1, 1, 1, 1}, {0, 1, 1, 1}, {1, 0, 1, 2}, {0, 0, 1, 2}};
  const int steps = (int)(sizeof(plan) / sizeof(plan[0]));
  cbt t;
  gpuhal__cuda_symbols_t* cu;
  gpuhal_buffer_t* counters[2] = {NULL, NULL};
  gpuhal_buffer_t* words = NULL;
  gpuhal_kernel_t* spin_flag = NULL;
  gpuhal_command_buffer_t *cb = NULL, *blocker = NULL;
  gpuhal_semaphore_t *failed = NULL, *sem = NULL;
  gpuhal_status_t st;
  uint32_t zero[2] = {0, 0}, expected[2] = {0, 0};
  uint64_t value = 0;
  int i, blocked = 0;
  if (!cbg_open_instances(&t, 4)) return;
  cu = (gpuhal__cuda_symbols_t*)t.device->cu;
  TU_CHECK_OK(cbt_load(&t, 5, "spin_flag", &spin_flag));
  for (i = 0; i < 2; ++i) {
    TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 256, &counters[i]));
    if (counters[i]) TU_CHECK_OK(gpuhal_buffer_write(counters[i], 0, zero, 8));
  }
  TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_HOST_PINNED, 8, &words));
  TU_REQUIRE(spin_flag && words && !tu_state.failed);
  TU_REQUIRE(cbg_late_graph(&t, LATE, NULL, &cb));
  cbg_blocker(&t, spin_flag, words, &blocker);
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &failed));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &sem));
  TU_REQUIRE(!tu_state.failed);
  cbg_instantiate_orig = cu->cuGraphInstantiateWithFlags;
  cu->cuGraphInstantiateWithFlags = cbg_instantiate_maybe;
  /* No instance yet, and none can be made: the execute fails, and says why. */
  __atomic_store_n(&cbg_instantiate_fail, 1, __ATOMIC_SEQ_CST);
  TU_CHECK_OK(cbg_execute(&t, cb, counters[0], failed, 1));
  st = gpuhal_semaphore_wait(failed, 1, gpuhal_timeout_relative_ns(10000000000ll));
  TU_CHECK(st != NULL);
  if (st) {
    TU_CHECK(strstr(gpuhal_status_message(st), "CUDA_ERROR_OUT_OF_MEMORY") != NULL);
    TU_CHECK(strstr(gpuhal_status_message(st), "cuGraphInstantiateWithFlags") != NULL);
    gpuhal_status_free(st);
  }
  TU_CHECK_EQ_INT(cb->instance_count, 0);
  for (i = 0; i < steps && !tu_state.failed; ++i) {
    __atomic_store_n(&cbg_instantiate_fail, plan[i][1], __ATOMIC_SEQ_CST);
    if (plan[i][2] && !blocked) {
      memcpy(gpuhal_buffer_host_pointer(words), zero, 8);
      TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(),
                                       blocker, NULL));
      blocked = 1;
    }
    TU_CHECK_OK(cbg_execute(&t, cb, counters[plan[i][0]], sem, ++value));
    expected[plan[i][0]] += LATE;
    if (!plan[i][2]) TU_CHECK_OK(gpuhal_semaphore_wait(sem, value, gpuhal_timeout_relative_ns(10000000000ll)));
    if ((int)cb->instance_count != plan[i][3])
      TU_FAIL_AT(__FILE__, __LINE__, "step %d: %u instances (expected %d)", i, cb->instance_count, plan[i][3]);
  }
  __atomic_store_n(&cbg_instantiate_fail, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n((uint32_t*)gpuhal_buffer_host_pointer(words), 1u, __ATOMIC_SEQ_CST); /* let it go */
  TU_CHECK_OK(gpuhal_semaphore_wait(sem, value, gpuhal_timeout_relative_ns(30000000000ll)));
  TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(30000000000ll)));
  cu->cuGraphInstantiateWithFlags = cbg_instantiate_orig;
  for (i = 0; i < 2; ++i) {
    uint32_t got[2] = {0, 0};
    if (counters[i]) TU_CHECK_OK(gpuhal_buffer_read(counters[i], 0, got, 8));
    TU_CHECK_EQ_INT(got[0], expected[i]);
  }
  gpuhal_semaphore_release(failed);
  gpuhal_semaphore_release(sem);
  gpuhal_command_buffer_release(cb);
  gpuhal_command_buffer_release(blocker);
  gpuhal_buffer_release(words);
  for (i = 0; i < 2; ++i) gpuhal_buffer_release(counters[i]);
  cbt_close(&t);
}

/* The driver's own view of the graph, through the library gpuhal loaded. */
typedef CUresult (*get_nodes_fn)(CUgraph, CUgraphNode*, size_t*);
typedef CUresult (*get_edges_fn)(CUgraph, CUgraphNode*, CUgraphNode*, size_t*);
typedef CUresult (*node_type_fn)(CUgraphNode, CUgraphNodeType*);

static int index_of(const CUgraphNode* nodes, size_t n, CUgraphNode node) {
  size_t i;
  for (i = 0; i < n; ++i)
    if (nodes[i] == node) return (int)i;
  return -1;
}

/* leading barrier; A B; barrier; C; barrier barrier; D E F; trailing barrier.
 * Expected: A, B -> join (empty) -> C -> D, E, F; nothing else. */
TU_TEST(graph_structure) {
  cbt t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_arg_t args[3];
  CUgraph graph = NULL;
  CUgraphNode nodes[16], from[16], to[16];
  CUgraphNode k[6];
  size_t node_count = 16, edge_count = 16, i;
  int in_deg[16], out_deg[16], kernels = 0, empties = 0, j, join = -1;
  const char* lib_name = getenv("GPUHAL_CUDA_LIBRARY");
  void* lib;
  get_nodes_fn get_nodes;
  get_edges_fn get_edges;
  node_type_fn node_type;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 1024, &buf));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, GRAPH, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  args[1] = gpuhal_arg_u32(1);
  args[2] = gpuhal_arg_u32(1);
#define DISPATCH(index)                                                                                       \
  do {                                                                                                        \
    args[0] = gpuhal_arg_buffer(buf, 4u * (index));                                                           \
    TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.fill_u32, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args)); \
  } while (0)
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  DISPATCH(0);
  DISPATCH(1);
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  DISPATCH(2);
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  DISPATCH(3);
  DISPATCH(4);
  DISPATCH(5);
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
#undef DISPATCH
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_native_graph(cb, (void**)&graph));
  TU_REQUIRE(graph != NULL);
  /* The kernel nodes, in recording order. */
  for (i = 0, j = 0; i < cb->cmd_count; ++i)
    if (cb->cmds[i].type == GPUHAL__CMD_DISPATCH) k[j++] = cb->cmds[i].node;
  TU_REQUIRE(j == 6);

  lib = dlopen(lib_name && lib_name[0] ? lib_name : "libcuda.so.1", RTLD_NOW);
  TU_REQUIRE(lib != NULL);
  *(void**)&get_nodes = dlsym(lib, "cuGraphGetNodes");
  *(void**)&get_edges = dlsym(lib, "cuGraphGetEdges");
  *(void**)&node_type = dlsym(lib, "cuGraphNodeGetType");
  TU_REQUIRE(get_nodes && get_edges && node_type);
  TU_REQUIRE(get_nodes(graph, nodes, &node_count) == CUDA_SUCCESS);
  TU_REQUIRE(get_edges(graph, from, to, &edge_count) == CUDA_SUCCESS);
  TU_CHECK_EQ_INT(node_count, 7);
  TU_CHECK_EQ_INT(edge_count, 6);
  memset(in_deg, 0, sizeof(in_deg));
  memset(out_deg, 0, sizeof(out_deg));
  for (i = 0; i < node_count && i < 16; ++i) {
    CUgraphNodeType type;
    TU_REQUIRE(node_type(nodes[i], &type) == CUDA_SUCCESS);
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) kernels++;
    if (type == CU_GRAPH_NODE_TYPE_EMPTY) {
      empties++;
      join = (int)i;
    }
  }
  TU_CHECK_EQ_INT(kernels, 6);
  TU_CHECK_EQ_INT(empties, 1);
  TU_REQUIRE(join >= 0);
  for (i = 0; i < edge_count && i < 16; ++i) {
    int f = index_of(nodes, node_count, from[i]), g = index_of(nodes, node_count, to[i]);
    TU_REQUIRE(f >= 0 && g >= 0);
    out_deg[f]++;
    in_deg[g]++;
    /* Every edge is one of: A->join, B->join, join->C, C->D, C->E, C->F. */
    TU_CHECK((from[i] == k[0] && to[i] == nodes[join]) || (from[i] == k[1] && to[i] == nodes[join]) ||
             (from[i] == nodes[join] && to[i] == k[2]) ||
             (from[i] == k[2] && (to[i] == k[3] || to[i] == k[4] || to[i] == k[5])));
  }
  TU_CHECK_EQ_INT(in_deg[join], 2);
  TU_CHECK_EQ_INT(out_deg[join], 1);
  TU_CHECK_EQ_INT(out_deg[index_of(nodes, node_count, k[2])], 3);
  for (j = 3; j < 6; ++j) TU_CHECK_EQ_INT(out_deg[index_of(nodes, node_count, k[j])], 0);
  for (j = 0; j < 2; ++j) TU_CHECK_EQ_INT(in_deg[index_of(nodes, node_count, k[j])], 0);
  dlclose(lib);
  /* It also runs. */
  TU_CHECK_OK(cbt_run(&t, cb, NULL));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buf);
  cbt_close(&t);
}

/* One node between barriers needs no join node; the next segment depends on it directly. */
TU_TEST(graph_single_node_segments_chain) {
  cbt t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* buf = NULL;
  uint32_t v = 9;
  int i;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 64, &buf));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, GRAPH, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  for (i = 0; i < 5; ++i) {
    TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 0), 64, &v, 4));
    TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  }
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_EQ_INT(cb->node_count, 5); /* no empty nodes */
  TU_CHECK_OK(cbt_run(&t, cb, NULL));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buf);
  cbt_close(&t);
}

TU_TEST(native_graph_rules) {
  cbt t;
  gpuhal_command_buffer_t* cb = NULL;
  void* graph = NULL;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_native_graph(cb, &graph), GPUHAL_STATUS_FAILED_PRECONDITION, "STREAM");
  gpuhal_command_buffer_release(cb);
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, GRAPH, 0, &cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_native_graph(cb, &graph), GPUHAL_STATUS_FAILED_PRECONDITION, "ended");
  TU_CHECK_STATUS(gpuhal_command_buffer_native_graph(cb, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_cu_graph");
  gpuhal_command_buffer_release(cb);
  cbt_close(&t);
}

/* ---- destruction when this thread cannot take the device's context (issue #15) ----
 * A command buffer's graph, graph exec and staging memory are destroyed even when pushing
 * the device's context fails on the releasing thread (the worker does it then). softcuda
 * counts its live objects: the count must come back to what it was before the command
 * buffer existed (and SOFTCUDA_LEAKS=fatal fails the process on a leak at exit). */
static size_t rel_live_objects(void) {
  size_t (*report)(int) = NULL;
  void* p = tu_softcuda_symbol("softcuda_leak_report");
  memcpy(&report, &p, sizeof(p));
  return report ? report(0) : 0;
}
static unsigned long long rel_calls(const char* entry) { return tu_softcuda_calls(entry); }

#define REL_PUSH_FAILS_ONCE "cuCtxPushCurrent@1=CUDA_ERROR_OUT_OF_MEMORY"
#define REL_PUSH_FAILS "cuCtxPushCurrent@*=CUDA_ERROR_OUT_OF_MEMORY"

/* A GRAPH command buffer with a memset node, a memcpy node from staging memory and a
 * kernel node: everything its destruction must give back. */
static gpuhal_command_buffer_t* rel_record(cbt* t, gpuhal_buffer_t* buf, gpuhal_command_buffer_flags_t flags) {
  gpuhal_command_buffer_t* cb = NULL;
  uint32_t value = 7, update[4] = {1, 2, 3, 4};
  gpuhal_arg_t args[3];
  args[0] = gpuhal_arg_buffer(buf, 512);
  args[1] = gpuhal_arg_u32(9);
  args[2] = gpuhal_arg_u32(64);
  TU_CHECK_OK(gpuhal_command_buffer_create(t->device, GRAPH | flags, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 0), 256, &value, 4));
  TU_CHECK_OK(gpuhal_cmd_update(cb, update, gpuhal_ref_buffer(buf, 256), sizeof(update)));
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t->fill_u32, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  return cb;
}

/* Released on the application's thread, whose context push fails. */
TU_TEST(graph_release_with_context_push_failing) {
  cbt t;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_command_buffer_t* cb;
  size_t before;
  unsigned long long pushes;
  if (!tu_softcuda()) TU_SKIP("needs softcuda (fault injection, object counts)");
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 1024, &buf));
  TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(30000000000ll)));
  before = rel_live_objects();
  cb = rel_record(&t, buf, 0);
  TU_CHECK(rel_live_objects() >= before + 3); /* graph, graph exec, staging memory */
  pushes = rel_calls("cuCtxPushCurrent");
  TU_REQUIRE(tu_softcuda_faults(REL_PUSH_FAILS_ONCE) == 0);
  gpuhal_command_buffer_release(cb);
  TU_CHECK(tu_softcuda_faults(NULL) == 0);
  TU_CHECK(rel_calls("cuCtxPushCurrent") > pushes); /* the push was tried, and failed */
  TU_CHECK_EQ_INT(rel_live_objects(), before);
  gpuhal_buffer_release(buf);
  cbt_close(&t);
}

typedef struct rel_host_release_s {
  gpuhal_command_buffer_t* cb;
  int armed;
} rel_host_release_t;

/* On the queue's host-call thread: the last release, with this thread's push failing. */
static gpuhal_status_t rel_host_release(void* user) {
  rel_host_release_t* r = (rel_host_release_t*)user;
  r->armed = tu_softcuda_faults(REL_PUSH_FAILS_ONCE) == 0;
  gpuhal_command_buffer_release(r->cb);
  tu_softcuda_faults(NULL);
  return NULL;
}

static gpuhal_status_t rel_nothing(void* user) {
  (void)user;
  return NULL;
}

/* Released on a gpuhal thread (a host call's) that holds no gpuhal lock. */
TU_TEST(graph_release_on_host_call_thread_with_context_push_failing) {
  cbt t;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_semaphore_t* done = NULL;
  rel_host_release_t r;
  size_t before;
  uint64_t one = 1, two = 2;
  if (!tu_softcuda()) TU_SKIP("needs softcuda (fault injection, object counts)");
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 1024, &buf));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &done));
  /* A first host call warms what host calls use (the event pool), so that the count below
   * holds only what the command buffer adds. */
  TU_CHECK_OK(gpuhal_queue_host_call(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &one),
                                     rel_nothing, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(30000000000ll)));
  TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(30000000000ll)));
  before = rel_live_objects();
  r.cb = rel_record(&t, buf, 0);
  r.armed = 0;
  TU_CHECK_OK(gpuhal_queue_host_call(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &two),
                                     rel_host_release, &r));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 2, gpuhal_timeout_relative_ns(30000000000ll)));
  TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(30000000000ll)));
  TU_CHECK(r.armed);
  TU_CHECK_EQ_INT(rel_live_objects(), before);
  gpuhal_semaphore_release(done);
  gpuhal_buffer_release(buf);
  cbt_close(&t);
}

/* The last reference is the execute's, dropped when the execute retires (on whichever
 * gpuhal or application thread retires it), with every context push failing meanwhile. */
TU_TEST(graph_release_by_execute_with_context_push_failing) {
  cbt t;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_command_buffer_t* cb;
  size_t before;
  uint64_t one = 1;
  if (!tu_softcuda()) TU_SKIP("needs softcuda (fault injection, object counts)");
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 1024, &buf));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &done));
  /* A first execute, queued before its signal like the second, warms what executes use
   * (the event pool; with GPU-resident values a side stream), so that the count below
   * holds only what the second command buffer adds. */
  cb = rel_record(&t, buf, 0);
  TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(30000000000ll)));
  gpuhal_command_buffer_release(cb);
  one = 2;
  TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(30000000000ll)));
  before = rel_live_objects();
  cb = rel_record(&t, buf, 0);
  TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), cb, NULL));
  gpuhal_command_buffer_release(cb);
  TU_REQUIRE(tu_softcuda_faults(REL_PUSH_FAILS) == 0);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 2));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 2, gpuhal_timeout_relative_ns(30000000000ll)));
  TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(30000000000ll)));
  TU_CHECK(tu_softcuda_faults(NULL) == 0);
  TU_CHECK_EQ_INT(rel_live_objects(), before);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  gpuhal_buffer_release(buf);
  cbt_close(&t);
}

TU_MAIN(TU_CASE(graph_structure), TU_CASE(graph_instances_patch_only_what_differs),
        TU_CASE(graph_instance_out_of_memory), TU_CASE(graph_single_node_segments_chain), TU_CASE(native_graph_rules),
        TU_CASE(graph_commands_bytes), TU_CASE(graph_fill_every_pattern), TU_CASE(graph_barrier_orders),
        TU_CASE(graph_reusable_1000_rotating_tables), TU_CASE(graph_late_bound_alloca),
        TU_CASE(graph_unordered_alloca_fails), TU_CASE(graph_empty), TU_CASE(graph_validation),
        TU_CASE(graph_transient_after_dealloca), TU_CASE(graph_transient_dealloca_queued_first),
        TU_CASE(graph_transient_through_slot), TU_CASE(graph_transient_reusable_named),
        TU_CASE(graph_release_with_context_push_failing),
        TU_CASE(graph_release_on_host_call_thread_with_context_push_failing),
        TU_CASE(graph_release_by_execute_with_context_push_failing))
