/* graph.c - CUDA graphs, executable graphs and stream capture. Part of softcuda.c (one
 * translation unit; included last, so the ops of the other parts are visible here).
 *
 * Model
 *   - A node's parameters live in an sc_gnp ("graph node parameters"): immutable once
 *     built, reference-counted under sc.mu and shared by the graph, its clones (child
 *     graphs), every exec graph instantiated from it and every launch in flight. Changing
 *     parameters (cuGraphExec*SetParams, cuGraphExecUpdate) swaps in a new sc_gnp; a launch
 *     already enqueued keeps the ones it took at cuGraphLaunch.
 *   - Work nodes (kernel, memcpy, memset, host, and anything captured from a stream) hold
 *     an sc_op template: the same op the stream path would enqueue. Running the node runs
 *     a stack copy of it, so one template serves every launch. Ops captured from streams
 *     (softnccl's included) therefore need no graph-specific code: their run() must only
 *     read their payload, and their fini() frees it when the last graph lets go.
 *   - Structure nodes (empty, event record, event wait, child graph) are handled here. A
 *     child graph is cloned at add time; instantiation flattens children into the exec
 *     graph between an entry and an exit node.
 *   - Conditional nodes (cuGraphAddNode, CUDA 12.3): the node owns its body graphs, which
 *     are ordinary graph handles the caller fills. Instantiation flattens each body into a
 *     flat of its own, hanging off the conditional's exec node; a launch runs a body as a
 *     nested topological run, 0, 1 or n times, as the condition says. Condition values live
 *     in the exec graph (launches of one exec never overlap); twins set them with
 *     softcuda_graph_set_conditional, which finds the exec being run through a thread-local
 *     pointer (twins run on the stream worker that runs the launch). A launch snapshots the
 *     parameters of every body node, as it does the top level's.
 *   - cuGraphLaunch enqueues ONE op. Its run() executes the nodes on the stream's worker in
 *     a topological order that deliberately prefers the most recently added ready node, so
 *     a missing edge between a producer and a later consumer shows up as wrong results
 *     instead of passing by luck of insertion order.
 *   - Stream capture: sc_submit hands every op of a capturing stream to
 *     sc_graph_capture_op, which turns it into a node depending on the stream's current
 *     tail. cuEventRecord in a capture marks a join point; cuStreamWaitEvent on such an
 *     event forks another stream into the capture or joins the tails (sc_graph_capture_wait).
 *
 * Known limits (documented in README.md, "Graphs"):
 *   - An event record node records the event at the end of the whole launch (completion is
 *     later, never earlier, than on a GPU).
 *   - cuGraphLaunch into a capturing stream, and stream-ordered allocation inside a
 *     capture, are refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; the capture is
 *     invalidated).
 *   - The capture modes are recorded and checked by cuStreamEndCapture (thread rule). Each
 *     thread has an interaction mode (cuThreadExchangeStreamCaptureMode; GLOBAL by default),
 *     and the "potentially unsafe" entry points (SC_UNSAFE_CALL) follow CUDA's rule with it:
 *     GLOBAL refuses them while the thread has a non-relaxed capture of its own or any
 *     thread a global one, THREAD_LOCAL only for its own, RELAXED never. A refused call
 *     returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture it offends.
 */

/* ---- parameters ------------------------------------------------------------------------ */

typedef struct sc_gnp {
  int refs;
  CUgraphNodeType type;
  sc_op* op;    /* work nodes: the op template (owned) */
  sc_event* ev; /* EVENT_RECORD / WAIT_EVENT (referenced) */
  /* CONDITIONAL */
  CUgraphConditionalHandle cond;
  CUgraphConditionalNodeType cond_type;
  int nbodies;
} sc_gnp;

/* Conditional handles (cuGraphConditionalHandleCreate): the handle is 1 + an index here.
 * They live as long as the process (few are made). Under sc.mu. */
typedef struct sc_cond {
  uint64_t graph; /* the graph it was made for */
  sc_ctx* ctx;
  unsigned dflt, flags;
  int used; /* a conditional node uses it */
} sc_cond;
static sc_cond* sc_conds;
static int sc_nconds, sc_cap_conds;

static sc_gnp* sc_gnp_new(CUgraphNodeType type) {
  sc_gnp* p = (sc_gnp*)sc_xcalloc(1, sizeof(sc_gnp));
  p->refs = 1;
  p->type = type;
  return p;
}

static void sc_gnp_ref(sc_gnp* p) { p->refs++; }

/* Under sc.mu. */
static void sc_gnp_unref(sc_gnp* p) {
  if (!p || --p->refs > 0) return;
  if (p->op) {
    if (p->op->fini) p->op->fini(p->op);
    free(p->op);
  }
  if (p->ev) sc_unref(&p->ev->h);
  free(p);
}

/* ---- graphs and nodes -------------------------------------------------------------------- */

typedef struct sc_graph sc_graph;

typedef struct sc_gnode {
  sc_obj h;
  sc_graph* g;
  int idx; /* position in g->nodes (creation order) */
  sc_gnp* p;
  sc_graph* child;       /* CU_GRAPH_NODE_TYPE_GRAPH: a private clone */
  sc_graph** bodies;     /* CU_GRAPH_NODE_TYPE_CONDITIONAL: its body graphs (owned) */
  CUgraph* body_handles; /* what cuGraphAddNode handed out in phGraph_out */
  int* deps;             /* indices of the nodes it depends on, in edge order */
  int ndeps, cap_deps;
} sc_gnode;

struct sc_graph {
  sc_obj h;
  int is_private; /* a child graph's clone: no handles */
  sc_gnode** nodes;
  int n, cap;
  int* efrom; /* edges in the order they were added */
  int* eto;
  int ne, cap_e;
};

static void sc_graph_free_nodes(sc_graph* g) {
  int i;
  for (i = 0; i < g->n; ++i) {
    sc_gnode* nd = g->nodes[i];
    sc_obj_unregister(&nd->h); /* no-op for private graphs */
    int k;
    for (k = 0; nd->bodies && k < nd->p->nbodies; ++k) {
      sc_graph* b = nd->bodies[k];
      if (b->h.id)
        sc_obj_unregister(&b->h); /* its handle's reference is the only one */
      else
        sc_unref(&b->h); /* a private clone's */
    }
    free(nd->bodies);
    free(nd->body_handles);
    sc_gnp_unref(nd->p);
    if (nd->child) sc_unref(&nd->child->h);
    free(nd->deps);
    free(nd);
  }
  free(g->nodes);
  free(g->efrom);
  free(g->eto);
}

static void sc_graph_free(sc_obj* o) {
  sc_graph* g = (sc_graph*)o;
  sc_graph_free_nodes(g);
  free(g);
}

static sc_graph* sc_graph_new(sc_ctx* owner, int is_private) {
  sc_graph* g = (sc_graph*)sc_xcalloc(1, sizeof(sc_graph));
  sc_obj_init(&g->h, SC_K_GRAPH, owner, sc_graph_free);
  g->is_private = is_private;
  return g;
}

static void* sc_grow(void* p, int* cap, int need, size_t elem) {
  if (need <= *cap) return p;
  {
    int ncap = *cap ? *cap * 2 : 8;
    void* q;
    while (ncap < need) ncap *= 2;
    q = realloc(p, (size_t)ncap * elem);
    if (!q) abort();
    *cap = ncap;
    return q;
  }
}

static void sc_graph_add_edge(sc_graph* g, int from, int to) {
  sc_gnode* v = g->nodes[to];
  if (g->ne == g->cap_e) { /* efrom and eto share one capacity */
    int cap = g->cap_e ? g->cap_e * 2 : 8;
    g->efrom = (int*)realloc(g->efrom, (size_t)cap * sizeof(int));
    g->eto = (int*)realloc(g->eto, (size_t)cap * sizeof(int));
    if (!g->efrom || !g->eto) abort();
    g->cap_e = cap;
  }
  g->efrom[g->ne] = from;
  g->eto[g->ne] = to;
  g->ne++;
  v->deps = (int*)sc_grow(v->deps, &v->cap_deps, v->ndeps + 1, sizeof(int));
  v->deps[v->ndeps++] = from;
}

static int sc_graph_has_edge(const sc_graph* g, int from, int to) {
  const sc_gnode* v = g->nodes[to];
  int i;
  for (i = 0; i < v->ndeps; ++i)
    if (v->deps[i] == from) return 1;
  return 0;
}

/* Adds a node owning p (and child) after the nodes deps[0..n). Under sc.mu. */
static sc_gnode* sc_graph_add(sc_graph* g, sc_gnp* p, sc_graph* child, const int* deps, int n) {
  sc_gnode* nd = (sc_gnode*)sc_xcalloc(1, sizeof(sc_gnode));
  int i;
  sc_obj_init(&nd->h, SC_K_GRAPH_NODE, NULL, NULL); /* freed by its graph */
  nd->g = g;
  nd->idx = g->n;
  nd->p = p;
  nd->child = child;
  g->nodes = (sc_gnode**)sc_grow(g->nodes, &g->cap, g->n + 1, sizeof(sc_gnode*));
  g->nodes[g->n++] = nd;
  if (!g->is_private) sc_obj_register(&nd->h);
  for (i = 0; i < n; ++i) sc_graph_add_edge(g, deps[i], nd->idx);
  return nd;
}

/* A deep copy sharing the parameters (child graphs are copied too). Under sc.mu. */
static sc_graph* sc_graph_clone(const sc_graph* src) {
  sc_graph* g = sc_graph_new(NULL, 1);
  int i;
  for (i = 0; i < src->n; ++i) {
    const sc_gnode* s = src->nodes[i];
    sc_gnode* nd;
    int k;
    sc_gnp_ref(s->p);
    nd = sc_graph_add(g, s->p, s->child ? sc_graph_clone(s->child) : NULL, NULL, 0);
    if (!s->bodies) continue;
    nd->bodies = (sc_graph**)sc_xcalloc((size_t)s->p->nbodies, sizeof(sc_graph*));
    for (k = 0; k < s->p->nbodies; ++k) nd->bodies[k] = sc_graph_clone(s->bodies[k]);
  }
  for (i = 0; i < src->ne; ++i) sc_graph_add_edge(g, src->efrom[i], src->eto[i]);
  return g;
}

static CUresult sc_get_graph(CUgraph h, sc_graph** out) {
  sc_obj* o;
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_GRAPH);
  if (!o) return sc_bad_handle("graph", (const void*)h);
  *out = (sc_graph*)o;
  return CUDA_SUCCESS;
}

static CUresult sc_get_gnode(CUgraphNode h, sc_gnode** out) {
  sc_obj* o;
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_GRAPH_NODE);
  if (!o) return sc_bad_handle("graph node", (const void*)h);
  *out = (sc_gnode*)o;
  return CUDA_SUCCESS;
}

#define SC_GNODE_HANDLE(nd) ((CUgraphNode)(uintptr_t)SC_HANDLE(nd))

/* The context current on this thread, or NULL (no violation: graphs need none). */
static sc_ctx* sc_graph_owner_ctx(void) {
  sc_tls* t = sc_thread();
  sc_obj* o = t->depth ? sc_obj_lookup(t->stack[t->depth - 1], SC_K_CTX) : NULL;
  return (sc_ctx*)o;
}

/* Checks a dependency list against g; *out gets their indices (caller frees). */
static CUresult sc_graph_check_deps(sc_graph* g, const CUgraphNode* deps, size_t n, int** out) {
  int* idx;
  size_t i, j;
  *out = NULL;
  if (n && !deps) return CUDA_ERROR_INVALID_VALUE;
  if (n > (size_t)g->n) return CUDA_ERROR_INVALID_VALUE; /* more than there are: duplicates or foreign */
  idx = (int*)sc_xcalloc(n ? n : 1, sizeof(int));
  for (i = 0; i < n; ++i) {
    sc_gnode* d = NULL;
    CUresult r = sc_get_gnode(deps[i], &d);
    if (r == CUDA_SUCCESS && d->g != g) r = CUDA_ERROR_INVALID_VALUE; /* node of another graph */
    for (j = 0; r == CUDA_SUCCESS && j < i; ++j)
      if (idx[j] == d->idx) r = CUDA_ERROR_INVALID_VALUE; /* "may not have any duplicate entries" */
    if (r != CUDA_SUCCESS) {
      free(idx);
      return r;
    }
    idx[i] = d->idx;
  }
  *out = idx;
  return CUDA_SUCCESS;
}

/* Common tail of every cuGraphAdd*Node: takes p (and child) whatever the outcome. */
static CUresult sc_graph_add_entry(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* deps, size_t ndeps,
                                   sc_gnp* p, sc_graph* child) {
  sc_graph* g = NULL;
  int* idx = NULL;
  CUresult r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS) r = sc_graph_check_deps(g, deps, ndeps, &idx);
  if (r == CUDA_SUCCESS) {
    sc_gnode* nd = sc_graph_add(g, p, child, idx, (int)ndeps);
    *phGraphNode = SC_GNODE_HANDLE(nd);
  } else {
    sc_gnp_unref(p);
    if (child) sc_unref(&child->h);
  }
  free(idx);
  return r;
}

/* ---- node parameters: kernels -------------------------------------------------------------- */

/* Builds the same op cuLaunchKernel enqueues (arguments copied now). Under sc.mu. */
static CUresult sc_graph_kernel_op(const CUDA_KERNEL_NODE_PARAMS* kp, sc_op** out) {
  sc_func* fn = NULL;
  CUresult r;
  void* args = NULL;
  sc_op* op;
  sc_launch* L;
  sc_launch_attrs attrs;
  void** params;
  int i;
  if (!kp) return CUDA_ERROR_INVALID_VALUE;
  if (!kp->func) return kp->kern ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE; /* CUkernel: not modelled */
  r = sc_get_func(kp->func, &fn);
  if (r != CUDA_SUCCESS) return r;
  r = sc_launch_dims_check(fn, sc_dim3(kp->gridDimX, kp->gridDimY, kp->gridDimZ),
                           sc_dim3(kp->blockDimX, kp->blockDimY, kp->blockDimZ), kp->sharedMemBytes);
  if (r != CUDA_SUCCESS) return r;
  r = sc_copy_args(fn, kp->kernelParams, kp->extra, &args);
  if (r != CUDA_SUCCESS) return r;
  op = sc_op_new(fn->name, sc_run_kernel, sc_fini_kernel);
  L = (sc_launch*)sc_xcalloc(1, sizeof(sc_launch) + (size_t)(fn->nparams + 1) * sizeof(void*));
  params = (void**)(L + 1);
  L->grid.x = kp->gridDimX, L->grid.y = kp->gridDimY, L->grid.z = kp->gridDimZ;
  L->block.x = kp->blockDimX, L->block.y = kp->blockDimY, L->block.z = kp->blockDimZ;
  L->shared = kp->sharedMemBytes;
  sc_launch_attrs_default(&attrs);
  sc_launch_set_attrs(L, &attrs);
  for (i = 0; i < fn->nparams; ++i) params[i] = (char*)args + fn->params[i].offset;
  sc_ref(&fn->h);
  op->a = fn;
  op->b = args;
  op->c = L;
  *out = op;
  return CUDA_SUCCESS;
}

/* A kernel op with the same function, geometry and argument values as `op`, and `attrs`.
 * Under sc.mu. */
static CUresult sc_graph_kernel_op_with(const sc_op* op, const sc_launch_attrs* attrs, sc_op** out) {
  const sc_func* fn = (const sc_func*)op->a;
  const sc_launch* L = (const sc_launch*)op->c;
  CUDA_KERNEL_NODE_PARAMS kp;
  CUresult r;
  memset(&kp, 0, sizeof(kp));
  kp.func = (CUfunction)(uintptr_t)SC_HANDLE(fn);
  kp.gridDimX = L->grid.x, kp.gridDimY = L->grid.y, kp.gridDimZ = L->grid.z;
  kp.blockDimX = L->block.x, kp.blockDimY = L->block.y, kp.blockDimZ = L->block.z;
  kp.sharedMemBytes = L->shared;
  kp.kernelParams = (void**)(L + 1);
  r = sc_graph_kernel_op(&kp, out);
  if (r == CUDA_SUCCESS) sc_launch_set_attrs((sc_launch*)(*out)->c, attrs);
  return r;
}

/* Cluster dimensions, cooperative and priority of a kernel node (checked against its
 * geometry as a launch would be). Parameters are shared with clones and instances, so the
 * node gets new ones: an instantiated graph keeps the attributes it was made with. */
CUresult CUDAAPI sc_cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                                  const CUkernelNodeAttrValue* value) {
  sc_gnode* nd = NULL;
  sc_launch_attrs attrs;
  sc_op* op = NULL;
  CUresult r;
  SC_ENTER(cuGraphKernelNodeSetAttribute);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_gnode(hNode, &nd);
  if (r == CUDA_SUCCESS && nd->p->type != CU_GRAPH_NODE_TYPE_KERNEL) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && attr == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    r = CUDA_ERROR_INVALID_VALUE; /* valid for launches only: graphs use programmatic edges */
  if (r == CUDA_SUCCESS) {
    const sc_launch* L = (const sc_launch*)nd->p->op->c;
    sc_launch_get_attrs(L, &attrs);
    r = sc_launch_attr_read(attr, value, &attrs);
    if (r == CUDA_SUCCESS)
      r = sc_launch_attrs_check((const sc_func*)nd->p->op->a, &attrs, L->grid, L->block, L->shared);
  }
  if (r == CUDA_SUCCESS) r = sc_graph_kernel_op_with(nd->p->op, &attrs, &op);
  if (r == CUDA_SUCCESS) {
    sc_gnp* p = sc_gnp_new(CU_GRAPH_NODE_TYPE_KERNEL);
    p->op = op;
    sc_gnp_unref(nd->p);
    nd->p = p;
  }
  SC_UNLOCK();
  return r;
}

/* ---- node parameters held by value ---------------------------------------------------------- */

static void sc_fini_params(sc_op* op) { free(op->a); }

/* An op running `run` over its own copy of a node's parameters (the `size` bytes at `params`)
 * in op->a, a struct of `holder` bytes that starts with them, freed with the op: memcpy and
 * memset nodes keep theirs so, as CUDA copies them at the call. */
static sc_op* sc_graph_value_op(const char* what, CUresult (*run)(sc_op*), const void* params, size_t size,
                                size_t holder) {
  sc_op* op = sc_op_new(what, run, sc_fini_params);
  op->a = sc_xcalloc(1, holder);
  memcpy(op->a, params, size);
  return op;
}

/* ---- node parameters: 3D copies ----------------------------------------------------------- */

typedef struct sc_copy3d {
  CUDA_MEMCPY3D p;
} sc_copy3d;

static int sc_mul_add(size_t a, size_t b, size_t c, size_t* out) { /* a*b+c without overflow */
  size_t m;
  if (b && a > (size_t)-1 / b) return 0;
  m = a * b;
  if (m > (size_t)-1 - c) return 0;
  *out = m + c;
  return 1;
}

/* One side of a copy: its first byte and the bytes it spans. */
static CUresult sc_copy3d_side(CUmemorytype type, const void* host, CUdeviceptr dev, size_t x, size_t y, size_t z,
                               size_t pitch, size_t height, const CUDA_MEMCPY3D* p, uintptr_t* start, size_t* span) {
  uintptr_t base;
  size_t rows, off, last;
  switch (type) {
    case CU_MEMORYTYPE_HOST: base = (uintptr_t)host; break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: base = (uintptr_t)dev; break;
    case CU_MEMORYTYPE_ARRAY: return CUDA_ERROR_NOT_SUPPORTED; /* CUDA arrays are not modelled */
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (!base) return CUDA_ERROR_INVALID_VALUE;
  if (p->Height > 1 || p->Depth > 1) {
    if (pitch < p->WidthInBytes || x > pitch - p->WidthInBytes) return CUDA_ERROR_INVALID_VALUE;
  }
  if (p->Depth > 1 && (height < p->Height || y > height - p->Height)) return CUDA_ERROR_INVALID_VALUE;
  /* first byte: ((z * height) + y) * pitch + x; rows spanned: (Depth-1)*height + Height */
  if (!sc_mul_add(z, height, y, &rows) || !sc_mul_add(rows, pitch, x, &off)) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_mul_add(p->Depth - 1, height, p->Height - 1, &rows) || !sc_mul_add(rows, pitch, p->WidthInBytes, &last))
    return CUDA_ERROR_INVALID_VALUE;
  *start = base + off;
  *span = last;
  return CUDA_SUCCESS;
}

/* Validates a copy (under sc.mu). */
static CUresult sc_copy3d_check(const CUDA_MEMCPY3D* p) {
  uintptr_t s, d;
  size_t ss, ds;
  CUresult r;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (!p->WidthInBytes || !p->Height || !p->Depth) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1) return CUDA_ERROR_INVALID_VALUE;
  r = sc_copy3d_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
                     p->srcHeight, p, &s, &ss);
  if (r == CUDA_SUCCESS)
    r = sc_copy3d_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
                       p->dstHeight, p, &d, &ds);
  /* device memory must be an allocation; host or unified memory may be pageable, but a
   * range inside a known (pinned / managed) allocation must fit it */
  if (r == CUDA_SUCCESS) r = sc_check_range(s, ss, p->srcMemoryType == CU_MEMORYTYPE_DEVICE, NULL);
  if (r == CUDA_SUCCESS) r = sc_check_range(d, ds, p->dstMemoryType == CU_MEMORYTYPE_DEVICE, NULL);
  return r;
}

static CUresult sc_run_copy3d(sc_op* op) {
  const CUDA_MEMCPY3D* p = &((sc_copy3d*)op->a)->p;
  uintptr_t s, d;
  size_t ss, ds, y, z;
  CUresult r;
  SC_LOCK(); /* the memory may have been freed since the node was made */
  r = sc_copy3d_check(p);
  sc_copy3d_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
                 p->srcHeight, p, &s, &ss);
  sc_copy3d_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
                 p->dstHeight, p, &d, &ds);
  /* A copy node runs on its launch's device: another device's pool memory needs that pool's
   * access (cuMemPoolSetAccess), which context peer access does not give (on a GPU: an
   * illegal address). */
  if (r == CUDA_SUCCESS && op->stream &&
      (!sc_pool_reaches(sc_alloc_find(s), op->stream->ctx->dev) ||
       !sc_pool_reaches(sc_alloc_find(d), op->stream->ctx->dev))) {
    sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_ILLEGAL_ADDRESS,
                 "graph memcpy on device %d: pool memory of another device that its pool was not opened to "
                 "(cuMemPoolSetAccess)",
                 op->stream->ctx->dev);
    r = CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  SC_UNLOCK();
  if (r != CUDA_SUCCESS) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (z = 0; z < p->Depth; ++z)
    for (y = 0; y < p->Height; ++y)
      memmove((char*)d + (z * p->dstHeight + y) * p->dstPitch, (const char*)s + (z * p->srcHeight + y) * p->srcPitch,
              p->WidthInBytes);
  return CUDA_SUCCESS;
}

static CUresult sc_graph_copy_op(const CUDA_MEMCPY3D* p, sc_op** out) {
  CUresult r = sc_copy3d_check(p);
  if (r == CUDA_SUCCESS) *out = sc_graph_value_op("graph memcpy", sc_run_copy3d, p, sizeof(*p), sizeof(sc_copy3d));
  return r;
}

/* ---- node parameters: 2D memsets ------------------------------------------------------------ */

typedef struct sc_set2d {
  CUDA_MEMSET_NODE_PARAMS p;
} sc_set2d;

static CUresult sc_set2d_check(const CUDA_MEMSET_NODE_PARAMS* p) {
  size_t rows, span;
  if (!p || !p->dst) return CUDA_ERROR_INVALID_VALUE;
  if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  if (!p->width || !p->height) return CUDA_ERROR_INVALID_VALUE;
  if (p->dst % p->elementSize) return CUDA_ERROR_INVALID_VALUE;
  if (p->width > (size_t)-1 / p->elementSize) return CUDA_ERROR_INVALID_VALUE;
  if (p->height > 1 && p->pitch < p->width * p->elementSize) return CUDA_ERROR_INVALID_VALUE;
  rows = p->height - 1;
  if (!sc_mul_add(rows, p->height > 1 ? p->pitch : 0, p->width * p->elementSize, &span))
    return CUDA_ERROR_INVALID_VALUE;
  return sc_check_range((uintptr_t)p->dst, span, 1, NULL);
}

static CUresult sc_run_set2d(sc_op* op) {
  const CUDA_MEMSET_NODE_PARAMS* p = &((sc_set2d*)op->a)->p;
  size_t y, i;
  CUresult r;
  SC_LOCK();
  r = sc_set2d_check(p);
  SC_UNLOCK();
  if (r != CUDA_SUCCESS) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (y = 0; y < p->height; ++y) {
    char* row = (char*)(uintptr_t)p->dst + y * p->pitch;
    switch (p->elementSize) {
      case 1: memset(row, (int)(p->value & 0xff), p->width); break;
      case 2:
        for (i = 0; i < p->width; ++i) ((uint16_t*)row)[i] = (uint16_t)p->value;
        break;
      default:
        for (i = 0; i < p->width; ++i) ((uint32_t*)row)[i] = (uint32_t)p->value;
        break;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult sc_graph_set_op(const CUDA_MEMSET_NODE_PARAMS* p, sc_op** out) {
  CUresult r = sc_set2d_check(p);
  if (r == CUDA_SUCCESS) *out = sc_graph_value_op("graph memset", sc_run_set2d, p, sizeof(*p), sizeof(sc_set2d));
  return r;
}

/* The context argument of memcpy / memset nodes: a live context (or, NULL, a current one). */
static CUresult sc_graph_check_ctx(CUcontext ctx) {
  sc_ctx* c = NULL;
  return ctx ? sc_lookup_ctx(ctx, &c) : sc_current_ctx(&c);
}

/* ---- node parameters: batch memops (the op of memop.c) -------------------------------------- */

/* The op cuStreamBatchMemOp enqueues, for the node's context (NULL: the current one). */
static CUresult sc_graph_memop_op(const CUDA_BATCH_MEM_OP_NODE_PARAMS* np, sc_op** out) {
  sc_ctx* c = NULL;
  sc_memops* b = NULL;
  CUresult r;
  if (np->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  r = np->ctx ? sc_lookup_ctx(np->ctx, &c) : sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) r = sc_memops_build("batch memop node", np->count, np->paramArray, c, &b);
  if (r != CUDA_SUCCESS) return r;
  *out = sc_op_new("batch memop node", sc_run_memops, sc_fini_memops);
  (*out)->a = b;
  return CUDA_SUCCESS;
}

/* The op of a node of `type` (kernel, memcpy, memset or batch memop) from the parameters
 * of its cuGraphAdd*Node / cuGraphExec*NodeSetParams call (the struct of that type). */
static CUresult sc_graph_param_op(CUgraphNodeType type, const void* params, sc_op** out) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return sc_graph_kernel_op((const CUDA_KERNEL_NODE_PARAMS*)params, out);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return sc_graph_copy_op((const CUDA_MEMCPY3D*)params, out);
    case CU_GRAPH_NODE_TYPE_MEMSET: return sc_graph_set_op((const CUDA_MEMSET_NODE_PARAMS*)params, out);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return sc_graph_memop_op((const CUDA_BATCH_MEM_OP_NODE_PARAMS*)params, out);
    default: return CUDA_ERROR_NOT_SUPPORTED; /* no other kind is made from parameters here */
  }
}

/* cuGraphAdd{Kernel,Memcpy,Memset,BatchMemOp}Node: a node of `type` whose op is built from
 * `params` now. `ctx`: the call's context argument, checked first (NULL: the call has none). */
static CUresult sc_graph_add_param_node(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies, CUgraphNodeType type, const void* params,
                                        const CUcontext* ctx) {
  sc_gnp* p;
  CUresult r;
  if (!phGraphNode || !params) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  p = sc_gnp_new(type);
  r = ctx ? sc_graph_check_ctx(*ctx) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) r = sc_graph_param_op(type, params, &p->op);
  if (r == CUDA_SUCCESS)
    r = sc_graph_add_entry(phGraphNode, hGraph, dependencies, numDependencies, p, NULL);
  else
    sc_gnp_unref(p);
  SC_UNLOCK();
  return r;
}

/* The node type of a captured op (kernels and anything unknown, e.g. collectives, are
 * kernel nodes, as on a GPU). */
static CUgraphNodeType sc_graph_op_type(const sc_op* op) {
  if (op->run == sc_run_copy || op->run == sc_run_copy3d) return CU_GRAPH_NODE_TYPE_MEMCPY;
  if (op->run == sc_run_fill || op->run == sc_run_set2d) return CU_GRAPH_NODE_TYPE_MEMSET;
  if (op->run == sc_run_host_fn) return CU_GRAPH_NODE_TYPE_HOST;
  if (op->run == sc_run_wait) return CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  if (op->run == sc_run_nothing) return CU_GRAPH_NODE_TYPE_EMPTY;
  if (op->run == sc_run_memops) return CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  return CU_GRAPH_NODE_TYPE_KERNEL;
}

/* ---- graph entry points ----------------------------------------------------------------------- */

CUresult CUDAAPI sc_cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  sc_graph* g = NULL;
  SC_ENTER(cuGraphCreate);
  if (!phGraph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  g = sc_graph_new(sc_graph_owner_ctx(), 0);
  sc_obj_register(&g->h);
  *phGraph = (CUgraph)(uintptr_t)SC_HANDLE(g);
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuGraphDestroy(CUgraph hGraph) {
  sc_graph* g = NULL;
  CUresult r;
  SC_ENTER(cuGraphDestroy);
  SC_LOCK();
  r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS) sc_obj_unregister(&g->h); /* exec graphs keep their own copies */
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuGraphAddKernelNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  SC_ENTER(cuGraphAddKernelNode);
  return sc_graph_add_param_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_KERNEL,
                                 nodeParams, NULL);
}

CUresult CUDAAPI sc_cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_MEMCPY3D* copyParams, CUcontext ctx) {
  SC_ENTER(cuGraphAddMemcpyNode);
  return sc_graph_add_param_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMCPY,
                                 copyParams, &ctx);
}

CUresult CUDAAPI sc_cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS* memsetParams,
                                         CUcontext ctx) {
  SC_ENTER(cuGraphAddMemsetNode);
  return sc_graph_add_param_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMSET,
                                 memsetParams, &ctx);
}

CUresult CUDAAPI sc_cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies) {
  CUresult r;
  SC_ENTER(cuGraphAddEmptyNode);
  if (!phGraphNode) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_graph_add_entry(phGraphNode, hGraph, dependencies, numDependencies, sc_gnp_new(CU_GRAPH_NODE_TYPE_EMPTY),
                         NULL);
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                       size_t numDependencies, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  sc_gnp* p;
  CUresult r;
  SC_ENTER(cuGraphAddHostNode);
  if (!phGraphNode || !nodeParams || !nodeParams->fn) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  p = sc_gnp_new(CU_GRAPH_NODE_TYPE_HOST);
  /* the op cuLaunchHostFunc enqueues: it runs on the callback thread, where CUDA calls
   * are refused with CUDA_ERROR_NOT_PERMITTED */
  p->op = sc_op_new("graph host node", sc_run_host_fn, NULL);
  memcpy(&p->op->u0, &nodeParams->fn, sizeof nodeParams->fn);
  p->op->a = nodeParams->userData;
  r = sc_graph_add_entry(phGraphNode, hGraph, dependencies, numDependencies, p, NULL);
  SC_UNLOCK();
  return r;
}

static CUresult sc_graph_add_event_node(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies, CUevent event, CUgraphNodeType type) {
  sc_event* e = NULL;
  CUresult r;
  if (!phGraphNode || !event) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_event(event, &e);
  if (r == CUDA_SUCCESS) {
    sc_gnp* p = sc_gnp_new(type);
    sc_ref(&e->h);
    p->ev = e;
    r = sc_graph_add_entry(phGraphNode, hGraph, dependencies, numDependencies, p, NULL);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuGraphAddEventRecordNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                              size_t numDependencies, CUevent event) {
  SC_ENTER(cuGraphAddEventRecordNode);
  return sc_graph_add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event,
                                 CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CUresult CUDAAPI sc_cuGraphAddEventWaitNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                            size_t numDependencies, CUevent event) {
  SC_ENTER(cuGraphAddEventWaitNode);
  return sc_graph_add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event,
                                 CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

CUresult CUDAAPI sc_cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, CUgraph childGraph) {
  sc_graph* child = NULL;
  CUresult r;
  SC_ENTER(cuGraphAddChildGraphNode);
  if (!phGraphNode) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_graph(childGraph, &child);
  if (r == CUDA_SUCCESS && childGraph == hGraph) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) /* CUDA clones the child now: later changes to it do not show */
    r = sc_graph_add_entry(phGraphNode, hGraph, dependencies, numDependencies, sc_gnp_new(CU_GRAPH_NODE_TYPE_GRAPH),
                           sc_graph_clone(child));
  SC_UNLOCK();
  return r;
}

/* ---- conditional nodes (CUDA 12.3) ---------------------------------------------------------- */

CUresult CUDAAPI sc_cuGraphConditionalHandleCreate(CUgraphConditionalHandle* pHandle_out, CUgraph hGraph, CUcontext ctx,
                                                   unsigned int defaultLaunchValue, unsigned int flags) {
  sc_graph* g = NULL;
  sc_ctx* c = NULL;
  CUresult r;
  SC_ENTER(cuGraphConditionalHandleCreate);
  if (!pHandle_out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT)) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS) r = sc_lookup_ctx(ctx, &c);
  if (r == CUDA_SUCCESS) {
    sc_cond* k;
    sc_conds = (sc_cond*)sc_grow(sc_conds, &sc_cap_conds, sc_nconds + 1, sizeof(sc_cond));
    k = &sc_conds[sc_nconds++];
    memset(k, 0, sizeof *k);
    k->graph = SC_HANDLE(g);
    k->ctx = c;
    k->dflt = defaultLaunchValue;
    k->flags = flags;
    *pHandle_out = (CUgraphConditionalHandle)sc_nconds;
  }
  SC_UNLOCK();
  return r;
}

/* Only conditional nodes are modelled here (gpuhal adds every other kind with its own
 * call). The node's body graphs are ordinary graphs, owned by the node. */
CUresult CUDAAPI sc_cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                   CUgraphNodeParams* nodeParams) {
  CUDA_CONDITIONAL_NODE_PARAMS* cp;
  sc_graph* g = NULL;
  sc_ctx* c = NULL;
  sc_cond* k = NULL;
  sc_gnp* p;
  sc_gnode* nd = NULL;
  CUresult r;
  size_t i;
  int n;
  SC_ENTER(cuGraphAddNode);
  if (!phGraphNode || !nodeParams || nodeParams->reserved0[0] || nodeParams->reserved0[1] || nodeParams->reserved0[2] ||
      nodeParams->reserved2)
    return CUDA_ERROR_INVALID_VALUE;
  if (nodeParams->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) return CUDA_ERROR_NOT_SUPPORTED; /* not modelled */
  for (i = 0; dependencyData && i < numDependencies; ++i) {
    static const CUgraphEdgeData zero;
    if (memcmp(&dependencyData[i], &zero, sizeof zero) != 0) return CUDA_ERROR_NOT_SUPPORTED; /* not modelled */
  }
  cp = &nodeParams->conditional;
  n = (int)cp->size;
  if (cp->type == CU_GRAPH_COND_TYPE_WHILE ? n != 1 : cp->type == CU_GRAPH_COND_TYPE_IF ? (n != 1 && n != 2) : n < 1)
    return CUDA_ERROR_INVALID_VALUE;
  if (cp->type > CU_GRAPH_COND_TYPE_SWITCH) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS) r = sc_lookup_ctx(cp->ctx, &c);
  if (r == CUDA_SUCCESS) {
    if (cp->handle == 0 || cp->handle > (CUgraphConditionalHandle)sc_nconds) {
      r = sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE,
                       "cuGraphAddNode: conditional handle %llu was not made by cuGraphConditionalHandleCreate",
                       (unsigned long long)cp->handle);
    } else {
      k = &sc_conds[cp->handle - 1];
      if (k->graph != SC_HANDLE(g) || k->ctx != c || k->used)
        r = sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE,
                         "cuGraphAddNode: conditional handle %llu %s", (unsigned long long)cp->handle,
                         k->used       ? "already has its node (a handle serves one conditional node)"
                         : k->ctx != c ? "was made for another context"
                                       : "was made for another graph (the one its node must go in)");
    }
  }
  if (r == CUDA_SUCCESS) {
    p = sc_gnp_new(CU_GRAPH_NODE_TYPE_CONDITIONAL);
    p->cond = cp->handle;
    p->cond_type = cp->type;
    p->nbodies = n;
    r = sc_graph_add_entry(phGraphNode, hGraph, dependencies, numDependencies, p, NULL);
  }
  if (r == CUDA_SUCCESS) r = sc_get_gnode(*phGraphNode, &nd);
  if (r == CUDA_SUCCESS) {
    int b;
    nd->bodies = (sc_graph**)sc_xcalloc((size_t)n, sizeof(sc_graph*));
    nd->body_handles = (CUgraph*)sc_xcalloc((size_t)n, sizeof(CUgraph));
    for (b = 0; b < n; ++b) {
      nd->bodies[b] = sc_graph_new(sc_graph_owner_ctx(), 0);
      sc_obj_register(&nd->bodies[b]->h);
      nd->body_handles[b] = (CUgraph)(uintptr_t)SC_HANDLE(nd->bodies[b]);
    }
    cp->phGraph_out = nd->body_handles;
    k->used = 1;
  }
  SC_UNLOCK();
  return r;
}

/* An edge's data (CUDA 12.3): NULL or all zero is an ordinary edge. A PROGRAMMATIC edge
 * (programmatic dependent launch) must leave a kernel node's PROGRAMMATIC or LAUNCH_ORDER
 * port for a kernel node. softcuda runs it as a full edge: the downstream kernel starts
 * after the upstream one, which is one of the orders a GPU allows (ordering kept). */
static CUresult sc_edge_data_check(const CUgraphEdgeData* e, const sc_gnode* a, const sc_gnode* b) {
  int i;
  if (!e) return CUDA_SUCCESS;
  for (i = 0; i < 5; ++i)
    if (e->reserved[i]) return CUDA_ERROR_INVALID_VALUE;
  if (e->to_port != 0 || e->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ||
      e->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER)
    return CUDA_ERROR_INVALID_VALUE;
  if (e->from_port != CU_GRAPH_KERNEL_NODE_PORT_DEFAULT && a->p->type != CU_GRAPH_NODE_TYPE_KERNEL)
    return CUDA_ERROR_INVALID_VALUE; /* only kernel nodes have other ports */
  if (e->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
      (e->from_port == CU_GRAPH_KERNEL_NODE_PORT_DEFAULT || b->p->type != CU_GRAPH_NODE_TYPE_KERNEL))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                           const CUgraphEdgeData* edgeData, size_t numDependencies) {
  sc_graph* g = NULL;
  CUresult r;
  int *fi = NULL, *ti = NULL;
  size_t i, j;
  SC_ENTER(cuGraphAddDependencies);
  SC_LOCK();
  r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS && numDependencies && (!from || !to)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && numDependencies) {
    fi = (int*)sc_xcalloc(numDependencies, sizeof(int));
    ti = (int*)sc_xcalloc(numDependencies, sizeof(int));
  }
  /* all or nothing: check every pair first */
  for (i = 0; r == CUDA_SUCCESS && i < numDependencies; ++i) {
    sc_gnode *a = NULL, *b = NULL;
    r = sc_get_gnode(from[i], &a);
    if (r == CUDA_SUCCESS) r = sc_get_gnode(to[i], &b);
    if (r == CUDA_SUCCESS && (a->g != g || b->g != g || a == b)) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && sc_graph_has_edge(g, a->idx, b->idx)) r = CUDA_ERROR_INVALID_VALUE; /* existing */
    if (r == CUDA_SUCCESS) r = sc_edge_data_check(edgeData ? &edgeData[i] : NULL, a, b);
    for (j = 0; r == CUDA_SUCCESS && j < i; ++j)
      if (fi[j] == a->idx && ti[j] == b->idx) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
      fi[i] = a->idx;
      ti[i] = b->idx;
    }
  }
  for (i = 0; r == CUDA_SUCCESS && i < numDependencies; ++i) sc_graph_add_edge(g, fi[i], ti[i]);
  SC_UNLOCK();
  free(fi);
  free(ti);
  return r;
}

CUresult CUDAAPI sc_cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  sc_graph* g = NULL;
  CUresult r;
  size_t i;
  SC_ENTER(cuGraphGetNodes);
  if (!numNodes) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS) {
    if (!nodes) {
      *numNodes = (size_t)g->n;
    } else {
      /* fills *numNodes entries; a larger array gets NULLs and the real count */
      for (i = 0; i < *numNodes; ++i) nodes[i] = i < (size_t)g->n ? SC_GNODE_HANDLE(g->nodes[i]) : NULL;
      if (*numNodes > (size_t)g->n) *numNodes = (size_t)g->n;
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuGraphGetEdges(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, size_t* numEdges) {
  sc_graph* g = NULL;
  CUresult r;
  size_t i;
  SC_ENTER(cuGraphGetEdges);
  if (!numEdges || (!from) != (!to)) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS) {
    if (!from) {
      *numEdges = (size_t)g->ne;
    } else {
      for (i = 0; i < *numEdges; ++i) {
        int in = i < (size_t)g->ne;
        from[i] = in ? SC_GNODE_HANDLE(g->nodes[g->efrom[i]]) : NULL;
        to[i] = in ? SC_GNODE_HANDLE(g->nodes[g->eto[i]]) : NULL;
      }
      if (*numEdges > (size_t)g->ne) *numEdges = (size_t)g->ne;
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  sc_gnode* nd = NULL;
  CUresult r;
  SC_ENTER(cuGraphNodeGetType);
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_gnode(hNode, &nd);
  if (r == CUDA_SUCCESS) *type = nd->p->type;
  SC_UNLOCK();
  return r;
}

/* ---- flattening: the topology an exec graph runs -------------------------------------------- */

typedef struct sc_flat sc_flat;
typedef struct sc_xnode {
  sc_gnp* p;       /* current parameters (referenced) */
  sc_flat* bodies; /* CONDITIONAL: p->nbodies flattened bodies */
  int top;         /* index of the top-level node it comes from */
  int is_top;      /* it is that node itself (not a child's entry, exit or inside) */
  int* deps;       /* sorted, for cuGraphExecUpdate */
  int ndeps, cap_deps;
  int* succ;
  int nsucc, cap_succ;
} sc_xnode;

struct sc_flat {
  sc_xnode* x;
  int n, cap;
  int* top_x; /* top-level node index -> its exec node (a child's: the entry) */
  int ntop;
  uint64_t graph; /* the graph it was built from (a body's: for SetParams on its nodes) */
  int base;       /* a body's: where its nodes' parameters start in a launch's snapshot */
  int cyclic;     /* a body's: it has a cycle (instantiation refuses) */
};

static int sc_flat_add(sc_flat* f, sc_gnp* p, int top, int is_top) {
  sc_xnode* x;
  f->x = (sc_xnode*)sc_grow(f->x, &f->cap, f->n + 1, sizeof(sc_xnode));
  x = &f->x[f->n];
  memset(x, 0, sizeof *x);
  sc_gnp_ref(p);
  x->p = p;
  x->top = top;
  x->is_top = is_top;
  return f->n++;
}

static void sc_flat_edge(sc_flat* f, int from, int to) {
  sc_xnode* a = &f->x[from];
  sc_xnode* b = &f->x[to];
  a->succ = (int*)sc_grow(a->succ, &a->cap_succ, a->nsucc + 1, sizeof(int));
  a->succ[a->nsucc++] = to;
  b->deps = (int*)sc_grow(b->deps, &b->cap_deps, b->ndeps + 1, sizeof(int));
  b->deps[b->ndeps++] = from;
}

static void sc_flat_free(sc_flat* f) {
  int i;
  for (i = 0; i < f->n; ++i) {
    int k;
    for (k = 0; f->x[i].bodies && k < f->x[i].p->nbodies; ++k) sc_flat_free(&f->x[i].bodies[k]);
    free(f->x[i].bodies);
    sc_gnp_unref(f->x[i].p);
    free(f->x[i].deps);
    free(f->x[i].succ);
  }
  free(f->x);
  free(f->top_x);
  memset(f, 0, sizeof *f);
}

/* Appends g's nodes; entry[i] / exit[i] get node i's first and last exec node. top: the
 * top-level node they belong to (-1: g is the top level). */
static int sc_flat_build(sc_flat* f, const sc_graph* g);

static void sc_flat_graph(sc_flat* f, const sc_graph* g, int top, int* entry, int* exit_) {
  int i;
  for (i = 0; i < g->n; ++i) {
    const sc_gnode* nd = g->nodes[i];
    int t = top < 0 ? i : top;
    if (nd->bodies) {
      sc_flat* bodies = (sc_flat*)sc_xcalloc((size_t)nd->p->nbodies, sizeof(sc_flat));
      int k;
      for (k = 0; k < nd->p->nbodies; ++k) {
        bodies[k].cyclic = !sc_flat_build(&bodies[k], nd->bodies[k]);
        bodies[k].graph = SC_HANDLE(nd->bodies[k]);
      }
      entry[i] = exit_[i] = sc_flat_add(f, nd->p, t, top < 0);
      f->x[entry[i]].bodies = bodies;
    } else if (!nd->child) {
      entry[i] = exit_[i] = sc_flat_add(f, nd->p, t, top < 0);
    } else {
      const sc_graph* c = nd->child;
      int* ce = (int*)sc_xcalloc((size_t)c->n + 1, sizeof(int));
      int* cx = (int*)sc_xcalloc((size_t)c->n + 1, sizeof(int));
      int* has_succ = (int*)sc_xcalloc((size_t)c->n + 1, sizeof(int));
      int k;
      entry[i] = sc_flat_add(f, nd->p, t, top < 0); /* the node itself: type GRAPH */
      sc_flat_graph(f, c, t, ce, cx);
      exit_[i] = sc_flat_add(f, nd->p, t, 0);
      for (k = 0; k < c->ne; ++k) has_succ[c->efrom[k]] = 1;
      for (k = 0; k < c->n; ++k) {
        if (c->nodes[k]->ndeps == 0) sc_flat_edge(f, entry[i], ce[k]);
        if (!has_succ[k]) sc_flat_edge(f, cx[k], exit_[i]);
      }
      if (c->n == 0) sc_flat_edge(f, entry[i], exit_[i]);
      free(ce);
      free(cx);
      free(has_succ);
    }
  }
  for (i = 0; i < g->ne; ++i) sc_flat_edge(f, exit_[g->efrom[i]], entry[g->eto[i]]);
}

static int sc_int_cmp(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return x < y ? -1 : x > y;
}

/* Flattens g and checks it is acyclic (Kahn). Returns 0 on a cycle. */
static int sc_flat_build(sc_flat* f, const sc_graph* g) {
  int* exit_ = (int*)sc_xcalloc((size_t)g->n + 1, sizeof(int));
  int *indeg, *queue;
  int i, head = 0, tail = 0;
  memset(f, 0, sizeof *f);
  f->ntop = g->n;
  f->top_x = (int*)sc_xcalloc((size_t)g->n + 1, sizeof(int));
  sc_flat_graph(f, g, -1, f->top_x, exit_);
  free(exit_);
  indeg = (int*)sc_xcalloc((size_t)f->n + 1, sizeof(int));
  queue = (int*)sc_xcalloc((size_t)f->n + 1, sizeof(int));
  for (i = 0; i < f->n; ++i) {
    indeg[i] = f->x[i].ndeps;
    if (!indeg[i]) queue[tail++] = i;
    if (f->x[i].ndeps > 1)
      qsort(f->x[i].deps, (size_t)f->x[i].ndeps, sizeof(int), sc_int_cmp); /* deps is NULL when 0 */
  }
  while (head < tail) {
    int v = queue[head++], k;
    for (k = 0; k < f->x[v].nsucc; ++k)
      if (--indeg[f->x[v].succ[k]] == 0) queue[tail++] = f->x[v].succ[k];
  }
  free(indeg);
  free(queue);
  return tail == f->n;
}

/* ---- exec graphs ------------------------------------------------------------------------------- */

typedef struct sc_exec {
  sc_obj h;
  uint64_t graph; /* handle of the graph it was instantiated from (for SetParams) */
  sc_flat f;
  sc_stream* last_s; /* its latest launch (referenced): the next one waits for it */
  uint64_t last_seq;
  sc_ctx* room_ctx; /* holds a place in this context's store (sc_room_take_locked) */
  int nbody;        /* nodes in all its conditional bodies (a launch snapshots their parameters) */
  struct sc_cond_value {
    CUgraphConditionalHandle handle;
    unsigned value, dflt, flags;
  } * conds; /* the conditions of its conditional nodes: values set by device code */
  int nconds;
} sc_exec;

/* The exec being run on this thread (a stream worker running a launch), for
 * softcuda_graph_set_conditional. */
static __thread sc_exec* sc_tls_graph_exec;

static void sc_exec_free(sc_obj* o) {
  sc_exec* x = (sc_exec*)o;
  free(x->conds);
  sc_flat_free(&x->f);
  if (x->last_s) sc_unref(&x->last_s->h);
  free(x);
}

static CUresult sc_get_exec(CUgraphExec h, sc_exec** out) {
  sc_obj* o;
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_GRAPH_EXEC);
  if (!o) return sc_bad_handle("graph exec", (const void*)h);
  *out = (sc_exec*)o;
  return CUDA_SUCCESS;
}

/* What a conditional body may hold (CUDA_CONDITIONAL_NODE_PARAMS): kernels, empty nodes,
 * child graphs (their entry and exit), memsets, memcpys and conditionals. */
static int sc_body_type_ok(CUgraphNodeType t) {
  return t == CU_GRAPH_NODE_TYPE_KERNEL || t == CU_GRAPH_NODE_TYPE_EMPTY || t == CU_GRAPH_NODE_TYPE_GRAPH ||
         t == CU_GRAPH_NODE_TYPE_MEMSET || t == CU_GRAPH_NODE_TYPE_MEMCPY || t == CU_GRAPH_NODE_TYPE_CONDITIONAL;
}

/* 1 when a conditional handle made for `graph` has no node: the driver refuses to
 * instantiate such a graph (CUDA_ERROR_INVALID_VALUE). Under sc.mu. */
static int sc_graph_has_unused_cond(uint64_t graph) {
  int i;
  for (i = 0; graph && i < sc_nconds; ++i)
    if (sc_conds[i].graph == graph && !sc_conds[i].used) {
      sc_violation(SOFTCUDA_VIOLATION_ANY, CUDA_ERROR_INVALID_VALUE,
                   "cuGraphInstantiate: conditional handle %d of the graph has no conditional node", i + 1);
      return 1;
    }
  return 0;
}

/* Numbers the body nodes under f (depth first) for a launch's snapshot and gives x a value
 * for every condition. 0 when the graph cannot be instantiated (a handle no node uses; in a
 * body, a cycle or a node type a body may not hold). Under sc.mu. */
static int sc_exec_walk(sc_exec* x, sc_flat* f, int in_body) {
  int i, k;
  if (sc_graph_has_unused_cond(f->graph)) return 0;
  for (i = 0; i < f->n; ++i) {
    const sc_xnode* xn = &f->x[i];
    const sc_gnp* p = xn->p;
    const sc_cond* c;
    if (in_body && !sc_body_type_ok(p->type)) {
      sc_violation(SOFTCUDA_VIOLATION_ANY, CUDA_ERROR_INVALID_VALUE,
                   "cuGraphInstantiate: a conditional body holds a node of type %d (kernels, empty nodes, child "
                   "graphs, memsets, memcpys and conditionals only)",
                   (int)p->type);
      return 0;
    }
    if (!xn->bodies) continue;
    c = &sc_conds[p->cond - 1];
    x->conds = (struct sc_cond_value*)realloc(x->conds, (size_t)(x->nconds + 1) * sizeof(*x->conds));
    if (!x->conds) abort();
    x->conds[x->nconds].handle = p->cond;
    x->conds[x->nconds].value = c->dflt; /* the first launch starts from it either way */
    x->conds[x->nconds].dflt = c->dflt;
    x->conds[x->nconds].flags = c->flags;
    x->nconds++;
    for (k = 0; k < p->nbodies; ++k) {
      sc_flat* b = &xn->bodies[k];
      if (b->cyclic) return 0;
      b->base = x->nbody;
      x->nbody += b->n;
      if (!sc_exec_walk(x, b, 1)) return 0;
    }
  }
  return 1;
}

/* The value of condition `handle` in x, or NULL. */
static unsigned* sc_exec_cond_value(sc_exec* x, CUgraphConditionalHandle handle) {
  int i;
  for (i = 0; i < x->nconds; ++i)
    if (x->conds[i].handle == handle) return &x->conds[i].value;
  return NULL;
}

SOFTCUDA_API void softcuda_graph_set_conditional(unsigned long long handle, unsigned value) {
  sc_exec* x = sc_tls_graph_exec;
  unsigned* v = x ? sc_exec_cond_value(x, handle) : NULL;
  if (!v) {
    sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE,
                 "cudaGraphSetConditional: handle %llu is not a condition of the graph this kernel runs in%s", handle,
                 x ? "" : " (it runs outside any graph launch)");
    return;
  }
  *v = value;
}

CUresult CUDAAPI sc_cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  sc_graph* g = NULL;
  sc_exec* x = NULL;
  CUresult r;
  SC_ENTER(cuGraphInstantiateWithFlags);
  if (!phGraphExec) return CUDA_ERROR_INVALID_VALUE;
  /* auto-free and node priority change nothing here; upload and device launch are not modelled */
  if (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                    CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
    return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_graph(hGraph, &g);
  if (r == CUDA_SUCCESS) {
    x = (sc_exec*)sc_xcalloc(1, sizeof(sc_exec));
    sc_obj_init(&x->h, SC_K_GRAPH_EXEC, sc_graph_owner_ctx(), sc_exec_free);
    x->graph = SC_HANDLE(g);
    if (!sc_flat_build(&x->f, g) || (x->f.graph = x->graph, !sc_exec_walk(x, &x->f, 0))) {
      /* CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE ("such as cycles") */
      sc_exec_free(&x->h);
      r = CUDA_ERROR_INVALID_VALUE;
    } else {
      int i;
      /* As on an H200: the first instantiation of a kernel never launched (nor cuFuncLoad'ed)
       * waits for its context to be idle, so it blocks while a stream is parked on a value
       * wait (with sc.mu released, unlike the driver's own lock). */
      for (i = 0; i < x->f.n; ++i) {
        sc_gnp* p = x->f.x[i].p;
        if (p->op && p->op->run == sc_run_kernel && !((sc_func*)p->op->a)->loaded) {
          sc_func* fn = (sc_func*)p->op->a;
          sc_ctx_sync_locked(fn->mod->ctx);
          fn->loaded = 1;
        }
        if (((p->op && p->op->run != sc_run_nothing) || p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) && !x->room_ctx &&
            x->h.owner)
          x->room_ctx = x->h.owner;
      }
      if (x->room_ctx) sc_room_take_locked(x->room_ctx); /* executables of empty nodes alone take none */
      sc_obj_register(&x->h);
      *phGraphExec = (CUgraphExec)(uintptr_t)SC_HANDLE(x);
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  sc_exec* x = NULL;
  CUresult r;
  SC_ENTER(cuGraphExecDestroy);
  SC_LOCK();
  r = sc_get_exec(hGraphExec, &x);
  if (r == CUDA_SUCCESS) {
    if (x->room_ctx) sc_room_give_locked(x->room_ctx);
    x->room_ctx = NULL;
    sc_obj_unregister(&x->h); /* launches in flight keep their reference */
  }
  SC_UNLOCK();
  return r;
}

/* ---- launch ------------------------------------------------------------------------------------ */

/* One launch: the parameters as they were at cuGraphLaunch. */
typedef struct sc_glaunch {
  sc_exec* x; /* referenced: its topology never changes */
  int n;
  sc_gnp** p;         /* referenced */
  sc_stream** wait_s; /* WAIT_EVENT: the record in force at launch (referenced), or NULL */
  uint64_t* wait_seq;
  uint64_t* rec_gen; /* EVENT_RECORD: the generation this launch recorded */
  sc_stream* prev_s; /* the exec's previous launch (referenced): an exec never overlaps itself */
  uint64_t prev_seq;
  sc_gnp** bp; /* the parameters of every body node at launch (referenced; x->nbody, by sc_flat.base) */
} sc_glaunch;

static void sc_wait_seq_unlocked(sc_stream* self, sc_stream* s, uint64_t seq) {
  SC_LOCK();
  sc_wait_other_stream_locked(self, s, seq);
  SC_UNLOCK();
}

static CUresult sc_run_flat(sc_glaunch* L, const sc_flat* f, const sc_op* launch);

/* Runs a conditional node's bodies as its condition says. A WHILE whose condition never
 * clears would spin forever (a GPU hangs too): past a bound it fails the launch. */
static CUresult sc_run_conditional(sc_glaunch* L, const sc_xnode* xn, const sc_gnp* p, const sc_op* launch) {
  unsigned* v = sc_exec_cond_value(L->x, p->cond); /* every condition got a value at instantiation */
  CUresult r = CUDA_SUCCESS;
  unsigned long long trips = 0;
  switch (p->cond_type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (*v)
        r = sc_run_flat(L, &xn->bodies[0], launch);
      else if (p->nbodies == 2)
        r = sc_run_flat(L, &xn->bodies[1], launch);
      break;
    case CU_GRAPH_COND_TYPE_WHILE:
      while (r == CUDA_SUCCESS && *v) {
        if (++trips > (1ull << 24))
          return sc_violation(SOFTCUDA_VIOLATION_ANY, CUDA_ERROR_LAUNCH_TIMEOUT,
                              "a WHILE conditional node ran %llu times without its condition clearing", trips - 1);
        r = sc_run_flat(L, &xn->bodies[0], launch);
      }
      break;
    default:
      if (*v < (unsigned)p->nbodies) r = sc_run_flat(L, &xn->bodies[*v], launch);
  }
  return r;
}

static CUresult sc_graph_run_node(sc_glaunch* L, const sc_flat* f, int i, const sc_op* launch) {
  int top = f == &L->x->f;
  sc_gnp* p = top ? L->p[i] : L->bp[f->base + i];
  if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) return sc_run_conditional(L, &f->x[i], p, launch);
  if (!top) {
    sc_op tmp;
    if (!p->op) return CUDA_SUCCESS; /* empty, child graph entry or exit */
    tmp = *p->op;
    tmp.next = NULL;
    tmp.stream = launch->stream;
    tmp.seq = launch->seq;
    return tmp.run(&tmp);
  }
  if (p->op) {
    sc_op tmp = *p->op; /* the template stays untouched: other launches share it */
    tmp.next = NULL;
    tmp.stream = launch->stream;
    tmp.seq = launch->seq;
    return tmp.run(&tmp);
  }
  if (p->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT && L->wait_s[i])
    sc_wait_seq_unlocked(launch->stream, L->wait_s[i], L->wait_seq[i]);
  if (p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
    SC_LOCK();
    if (p->ev->gen == L->rec_gen[i]) {
      p->ev->ts_ns = sc_now_ns();
      p->ev->ts_gen = L->rec_gen[i];
    }
    SC_UNLOCK();
  }
  return CUDA_SUCCESS;
}

/* A max-heap of ready node indices: the most recently added ready node runs first. */
static void sc_heap_push(int* h, int* n, int v) {
  int i = (*n)++;
  while (i > 0 && h[(i - 1) / 2] < v) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = v;
}

static int sc_heap_pop(int* h, int* n) {
  int top = h[0], v = h[--(*n)], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1] > h[c]) c++;
    if (h[c] <= v) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = v;
  return top;
}

/* One topological run of f: the top level or a body. */
static CUresult sc_run_flat(sc_glaunch* L, const sc_flat* f, const sc_op* launch) {
  int* indeg = (int*)sc_xcalloc((size_t)f->n + 1, sizeof(int));
  int* heap = (int*)sc_xcalloc((size_t)f->n + 1, sizeof(int));
  int nheap = 0, i;
  CUresult r = CUDA_SUCCESS;
  for (i = 0; i < f->n; ++i) {
    indeg[i] = f->x[i].ndeps;
    if (!indeg[i]) sc_heap_push(heap, &nheap, i);
  }
  while (nheap && r == CUDA_SUCCESS) {
    int v = sc_heap_pop(heap, &nheap), k;
    r = sc_graph_run_node(L, f, v, launch);
    for (k = 0; k < f->x[v].nsucc; ++k)
      if (--indeg[f->x[v].succ[k]] == 0) sc_heap_push(heap, &nheap, f->x[v].succ[k]);
  }
  free(indeg);
  free(heap);
  return r;
}

static CUresult sc_run_graph(sc_op* op) {
  sc_glaunch* L = (sc_glaunch*)op->a;
  CUresult r;
  int i;
  if (L->prev_s) sc_wait_seq_unlocked(op->stream, L->prev_s, L->prev_seq);
  for (i = 0; i < L->x->nconds; ++i) /* CU_GRAPH_COND_ASSIGN_DEFAULT: at the start of every launch */
    if (L->x->conds[i].flags & CU_GRAPH_COND_ASSIGN_DEFAULT) L->x->conds[i].value = L->x->conds[i].dflt;
  sc_tls_graph_exec = L->x;
  r = sc_run_flat(L, &L->x->f, op);
  sc_tls_graph_exec = NULL;
  return r;
}

static void sc_fini_graph(sc_op* op) {
  sc_glaunch* L = (sc_glaunch*)op->a;
  int i;
  for (i = 0; i < L->n; ++i) {
    sc_gnp_unref(L->p[i]);
    if (L->wait_s[i]) sc_unref(&L->wait_s[i]->h);
  }
  if (L->prev_s) sc_unref(&L->prev_s->h);
  for (i = 0; i < L->x->nbody; ++i) sc_gnp_unref(L->bp[i]);
  free(L->bp);
  sc_unref(&L->x->h);
  free(L->p);
  free(L->wait_s);
  free(L->wait_seq);
  free(L->rec_gen);
  free(L);
}

/* What cuGraphLaunch refuses because the graph refers to something gone: a destroyed
 * event, an unloaded function, freed memory (undefined behaviour on a GPU). */
static CUresult sc_graph_check_alive(const sc_flat* f) {
  int i, k;
  for (i = 0; i < f->n; ++i) {
    const sc_gnp* p = f->x[i].p;
    for (k = 0; f->x[i].bodies && k < p->nbodies; ++k) {
      CUresult r = sc_graph_check_alive(&f->x[i].bodies[k]);
      if (r != CUDA_SUCCESS) return r;
    }
    if (p->ev && !p->ev->h.id)
      return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_HANDLE,
                          "cuGraphLaunch: an event node's event was destroyed");
    if (p->op && p->op->run == sc_run_kernel && !((sc_func*)p->op->a)->h.id)
      return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_HANDLE,
                          "cuGraphLaunch: kernel node '%s': its module was unloaded", ((sc_func*)p->op->a)->name);
    if (p->op && p->op->run == sc_run_copy3d && sc_copy3d_check(&((sc_copy3d*)p->op->a)->p) != CUDA_SUCCESS)
      return CUDA_ERROR_INVALID_VALUE; /* sc_check_range counted the violation */
    if (p->op && p->op->run == sc_run_set2d && sc_set2d_check(&((sc_set2d*)p->op->a)->p) != CUDA_SUCCESS)
      return CUDA_ERROR_INVALID_VALUE;
    if (p->op && p->op->run == sc_run_memops && sc_memops_recheck((const sc_memops*)p->op->a) != CUDA_SUCCESS)
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

static void sc_capture_invalidate(sc_stream* s, CUresult why);

/* Takes the parameters every body node under f has now. Under sc.mu. */
static void sc_launch_snapshot(sc_gnp** bp, const sc_flat* f) {
  int i, j, k;
  for (i = 0; i < f->n; ++i)
    for (k = 0; f->x[i].bodies && k < f->x[i].p->nbodies; ++k) {
      const sc_flat* b = &f->x[i].bodies[k];
      for (j = 0; j < b->n; ++j) {
        sc_gnp_ref(b->x[j].p);
        bp[b->base + j] = b->x[j].p;
      }
      sc_launch_snapshot(bp, b);
    }
}

CUresult CUDAAPI sc_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  sc_exec* x = NULL;
  sc_stream* s = NULL;
  sc_ctx* cur = NULL;
  sc_glaunch* L;
  sc_op* op;
  CUresult r;
  int i;
  SC_ENTER(cuGraphLaunch);
  SC_LOCK();
  r = sc_get_exec(hGraphExec, &x);
  if (r == CUDA_SUCCESS) r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS && cur != s->ctx)
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                     "cuGraphLaunch on a stream of another context than the current one");
  if (r == CUDA_SUCCESS && s->capture) { /* a child-graph node on a GPU: not modelled */
    sc_capture_invalidate(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (r == CUDA_SUCCESS) r = sc_graph_check_alive(&x->f);
  if (r != CUDA_SUCCESS) {
    SC_UNLOCK();
    return r;
  }
  L = (sc_glaunch*)sc_xcalloc(1, sizeof(sc_glaunch));
  L->x = x;
  sc_ref(&x->h);
  L->n = x->f.n;
  L->p = (sc_gnp**)sc_xcalloc((size_t)L->n + 1, sizeof(sc_gnp*));
  L->wait_s = (sc_stream**)sc_xcalloc((size_t)L->n + 1, sizeof(sc_stream*));
  L->wait_seq = (uint64_t*)sc_xcalloc((size_t)L->n + 1, sizeof(uint64_t));
  L->rec_gen = (uint64_t*)sc_xcalloc((size_t)L->n + 1, sizeof(uint64_t));
  for (i = 0; i < L->n; ++i) {
    sc_gnp* p = x->f.x[i].p;
    sc_gnp_ref(p);
    L->p[i] = p;
    /* a wait node waits for the record in force now, like cuStreamWaitEvent */
    if (p->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT && p->ev->recorded && p->ev->rs->done_seq < p->ev->rseq) {
      L->wait_s[i] = p->ev->rs;
      sc_ref(&p->ev->rs->h);
      L->wait_seq[i] = p->ev->rseq;
    }
  }
  if (x->last_s) {
    L->prev_s = x->last_s; /* the exec's reference moves to the launch */
    L->prev_seq = x->last_seq;
    x->last_s = NULL;
  }
  L->bp = (sc_gnp**)sc_xcalloc((size_t)x->nbody + 1, sizeof(sc_gnp*));
  sc_launch_snapshot(L->bp, &x->f);
  op = sc_op_new("graph launch", sc_run_graph, sc_fini_graph);
  op->a = L;
  for (i = 0; i < L->n; ++i)
    if (L->p[i]->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) L->rec_gen[i] = ++L->p[i]->ev->gen;
  sc_submit(s, op);
  /* records take effect at enqueue, as cuEventRecord's do; they complete with the launch */
  for (i = 0; i < L->n; ++i) {
    sc_event* e = L->p[i]->ev;
    if (L->p[i]->type != CU_GRAPH_NODE_TYPE_EVENT_RECORD) continue;
    sc_ref(&s->h);
    if (e->rs) sc_unref(&e->rs->h);
    e->rs = s;
    e->rseq = op->seq;
    e->recorded = 1;
  }
  sc_ref(&s->h);
  x->last_s = s;
  x->last_seq = op->seq;
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

/* ---- exec updates -------------------------------------------------------------------------------- */

/* The exec node of a node of x's original graph, or -1 (with r set). */
static int sc_exec_node_of(sc_exec* x, CUgraphNode hNode, CUgraphNodeType want, CUresult* r) {
  sc_gnode* nd = NULL;
  int xi;
  *r = sc_get_gnode(hNode, &nd);
  if (*r != CUDA_SUCCESS) return -1;
  if (SC_HANDLE(nd->g) != x->graph || nd->idx >= x->f.ntop) {
    *r = CUDA_ERROR_INVALID_VALUE; /* not a node of the graph x was instantiated from */
    return -1;
  }
  xi = x->f.top_x[nd->idx];
  if (x->f.x[xi].p->type != want) {
    *r = CUDA_ERROR_INVALID_VALUE;
    return -1;
  }
  return xi;
}

static void sc_exec_swap(sc_exec* x, int xi, sc_gnp* p) {
  sc_gnp_unref(x->f.x[xi].p);
  x->f.x[xi].p = p;
}

/* cuGraphExec{Memset,BatchMemOp}NodeSetParams, once the node's update is allowed: exec node
 * xi gets an op of `type` built from `params` (later launches only: a launch in flight
 * keeps its own). */
static CUresult sc_exec_set_param_node(sc_exec* x, int xi, CUgraphNodeType type, const void* params) {
  sc_gnp* p = sc_gnp_new(type);
  CUresult r = sc_graph_param_op(type, params, &p->op);
  if (r == CUDA_SUCCESS)
    sc_exec_swap(x, xi, p);
  else
    sc_gnp_unref(p);
  return r;
}

/* The flat under f (f itself, or a conditional body at any depth) built from graph handle
 * `graph`, or NULL. */
static sc_flat* sc_flat_find(sc_flat* f, uint64_t graph) {
  int i, k;
  if (f->graph == graph) return f;
  for (i = 0; i < f->n; ++i)
    for (k = 0; f->x[i].bodies && k < f->x[i].p->nbodies; ++k) {
      sc_flat* b = sc_flat_find(&f->x[i].bodies[k], graph);
      if (b) return b;
    }
  return NULL;
}

/* sc_exec_node_of for a node of x's graph or of one of its conditional bodies: *out gets
 * the flat holding it. */
static int sc_exec_any_node_of(sc_exec* x, CUgraphNode hNode, CUgraphNodeType want, sc_flat** out, CUresult* r) {
  sc_gnode* nd = NULL;
  sc_flat* f;
  int xi;
  *out = NULL;
  *r = sc_get_gnode(hNode, &nd);
  if (*r != CUDA_SUCCESS) return -1;
  f = nd->g->h.id ? sc_flat_find(&x->f, SC_HANDLE(nd->g)) : NULL;
  if (!f || nd->idx >= f->ntop) {
    *r = CUDA_ERROR_INVALID_VALUE; /* not a node of the graph x was instantiated from */
    return -1;
  }
  xi = f->top_x[nd->idx];
  if (f->x[xi].p->type != want) {
    *r = CUDA_ERROR_INVALID_VALUE;
    return -1;
  }
  *out = f;
  return xi;
}

/* Swaps *slot (a kernel node's parameters) for new ones made from `np`: the node keeps its
 * attributes (cluster, cooperative, priority), checked anew against the new launch; with
 * `same_context` (an exec's node) the function must belong to the old one's context. Under
 * the lock. */
static CUresult sc_kernel_gnp_replace(sc_gnp** slot, const CUDA_KERNEL_NODE_PARAMS* np, int same_context) {
  sc_gnp* p = sc_gnp_new(CU_GRAPH_NODE_TYPE_KERNEL);
  CUresult r = sc_graph_kernel_op(np, &p->op);
  if (r == CUDA_SUCCESS && same_context && (*slot)->op->run == sc_run_kernel &&
      ((sc_func*)p->op->a)->mod->ctx != ((sc_func*)(*slot)->op->a)->mod->ctx)
    r = CUDA_ERROR_INVALID_VALUE; /* "the owning context of the function cannot change" */
  if (r == CUDA_SUCCESS && (*slot)->op->run == sc_run_kernel) {
    sc_launch_attrs attrs;
    sc_launch* L = (sc_launch*)p->op->c;
    sc_launch_get_attrs((const sc_launch*)(*slot)->op->c, &attrs);
    sc_launch_set_attrs(L, &attrs);
    r = sc_launch_attrs_check((const sc_func*)p->op->a, &attrs, L->grid, L->block, L->shared);
  }
  if (r != CUDA_SUCCESS) {
    sc_gnp_unref(p);
    return r;
  }
  sc_gnp_unref(*slot);
  *slot = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  sc_exec* x = NULL;
  sc_flat* f = NULL;
  CUresult r;
  int xi = -1;
  SC_ENTER(cuGraphExecKernelNodeSetParams);
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_exec(hGraphExec, &x);
  if (r == CUDA_SUCCESS) xi = sc_exec_any_node_of(x, hNode, CU_GRAPH_NODE_TYPE_KERNEL, &f, &r);
  if (r == CUDA_SUCCESS) r = sc_kernel_gnp_replace(&f->x[xi].p, nodeParams, 1);
  SC_UNLOCK();
  return r;
}

/* A kernel node of a graph (not of an exec): executes instantiated before keep what they
 * hold (their flats hold their own references); the node keeps its attributes. */
CUresult CUDAAPI sc_cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  sc_gnode* nd = NULL;
  CUresult r;
  SC_ENTER(cuGraphKernelNodeSetParams);
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_gnode(hNode, &nd);
  if (r == CUDA_SUCCESS && nd->p->type != CU_GRAPH_NODE_TYPE_KERNEL) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) r = sc_kernel_gnp_replace(&nd->p, nodeParams, 0);
  SC_UNLOCK();
  return r;
}

/* ---- batch memop nodes --------------------------------------------------------------------------- */

CUresult CUDAAPI sc_cuGraphAddBatchMemOpNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  SC_ENTER(cuGraphAddBatchMemOpNode);
  return sc_graph_add_param_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP,
                                 nodeParams, NULL);
}

CUresult CUDAAPI sc_cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  sc_exec* x = NULL;
  CUresult r;
  int xi = -1;
  SC_ENTER(cuGraphExecBatchMemOpNodeSetParams);
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_exec(hGraphExec, &x);
  if (r == CUDA_SUCCESS) xi = sc_exec_node_of(x, hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &r);
  if (r == CUDA_SUCCESS) r = sc_exec_set_param_node(x, xi, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, nodeParams);
  SC_UNLOCK();
  return r;
}

/* The device of the allocation p points into, or -1. */
static int sc_ptr_dev(uintptr_t p) {
  sc_alloc* a = sc_alloc_find(p);
  return a ? a->dev : -1;
}

/* What a memcpy node copies now, explicit or captured (cuMemcpy*Async: 1D, pointers only). */
typedef struct sc_copy_shape {
  uintptr_t src, dst;
  int one_d;
  int typed; /* memory types known (explicit nodes) */
  CUmemorytype src_type, dst_type;
} sc_copy_shape;

static int sc_copy_shape_of(const sc_op* op, sc_copy_shape* out) {
  memset(out, 0, sizeof *out);
  if (op->run == sc_run_copy3d) {
    const CUDA_MEMCPY3D* o = &((sc_copy3d*)op->a)->p;
    out->src = o->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)o->srcHost : (uintptr_t)o->srcDevice;
    out->dst = o->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)o->dstHost : (uintptr_t)o->dstDevice;
    out->one_d = o->Height == 1 && o->Depth == 1;
    out->typed = 1;
    out->src_type = o->srcMemoryType;
    out->dst_type = o->dstMemoryType;
    return 1;
  }
  if (op->run == sc_run_copy) {
    out->src = (uintptr_t)op->b;
    out->dst = (uintptr_t)op->a;
    out->one_d = 1;
    return 1;
  }
  return 0;
}

CUresult CUDAAPI sc_cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMCPY3D* copyParams, CUcontext ctx) {
  sc_exec* x = NULL;
  CUresult r;
  int xi = -1;
  sc_copy_shape o, n;
  SC_ENTER(cuGraphExecMemcpyNodeSetParams);
  if (!copyParams) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_exec(hGraphExec, &x);
  if (r == CUDA_SUCCESS) xi = sc_exec_node_of(x, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &r);
  if (r == CUDA_SUCCESS) r = sc_graph_check_ctx(ctx);
  if (r == CUDA_SUCCESS && !sc_copy_shape_of(x->f.x[xi].p->op, &o)) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    sc_gnp* p = sc_gnp_new(CU_GRAPH_NODE_TYPE_MEMCPY);
    r = sc_graph_copy_op(copyParams, &p->op);
    if (r == CUDA_SUCCESS) sc_copy_shape_of(p->op, &n);
    /* CUDA: both 1-dimensional; memory types and the devices of the operands stay */
    if (r == CUDA_SUCCESS &&
        (!o.one_d || !n.one_d || (o.typed && (o.src_type != n.src_type || o.dst_type != n.dst_type)) ||
         sc_ptr_dev(o.src) != sc_ptr_dev(n.src) || sc_ptr_dev(o.dst) != sc_ptr_dev(n.dst)))
      r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
      sc_exec_swap(x, xi, p);
    else
      sc_gnp_unref(p);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext ctx) {
  sc_exec* x = NULL;
  CUresult r;
  int xi = -1;
  SC_ENTER(cuGraphExecMemsetNodeSetParams);
  if (!memsetParams) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_exec(hGraphExec, &x);
  if (r == CUDA_SUCCESS) xi = sc_exec_node_of(x, hNode, CU_GRAPH_NODE_TYPE_MEMSET, &r);
  if (r == CUDA_SUCCESS) r = sc_graph_check_ctx(ctx);
  if (r == CUDA_SUCCESS) {
    const sc_op* old = x->f.x[xi].p->op;
    uintptr_t odst = 0;
    int o1d = 0;
    if (old->run == sc_run_set2d) {
      odst = (uintptr_t)((sc_set2d*)old->a)->p.dst;
      o1d = ((sc_set2d*)old->a)->p.height == 1;
    } else if (old->run == sc_run_fill) { /* captured cuMemsetD*Async: 1D */
      odst = (uintptr_t)old->a;
      o1d = 1;
    }
    /* CUDA: both 1-dimensional, same device */
    if (!o1d || memsetParams->height != 1 || sc_ptr_dev(odst) != sc_ptr_dev((uintptr_t)memsetParams->dst))
      r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) r = sc_exec_set_param_node(x, xi, CU_GRAPH_NODE_TYPE_MEMSET, memsetParams);
  }
  SC_UNLOCK();
  return r;
}

/* Why node i of f (the new graph) cannot replace node i of x's: an update result. */
static CUgraphExecUpdateResult sc_update_node_check(const sc_xnode* old, const sc_xnode* nw) {
  const sc_gnp *a = old->p, *b = nw->p;
  int k;
  if (a->type != b->type) return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
  if (a->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) return CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED; /* not modelled */
  if (old->ndeps != nw->ndeps) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  for (k = 0; k < old->ndeps; ++k)
    if (old->deps[k] != nw->deps[k]) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  if ((a->op != NULL) != (b->op != NULL) || (a->op && a->op->run != b->op->run))
    return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
  if (a->op && a->op->run == sc_run_kernel && ((sc_func*)a->op->a)->mod->ctx != ((sc_func*)b->op->a)->mod->ctx)
    return CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE;
  if (a->op && a->op->run == sc_run_copy3d) {
    const CUDA_MEMCPY3D *o = &((sc_copy3d*)a->op->a)->p, *n = &((sc_copy3d*)b->op->a)->p;
    if (o->srcMemoryType != n->srcMemoryType || o->dstMemoryType != n->dstMemoryType)
      return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
  }
  if (a->op && a->op->run == sc_run_set2d) {
    const CUDA_MEMSET_NODE_PARAMS *o = &((sc_set2d*)a->op->a)->p, *n = &((sc_set2d*)b->op->a)->p;
    if (o->height > 1 &&
        (n->height != o->height || n->width != o->width || n->elementSize != o->elementSize || n->pitch != o->pitch))
      return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED; /* 2D: only address and value */
  }
  return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

CUresult CUDAAPI sc_cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo* resultInfo) {
  sc_exec* x = NULL;
  sc_graph* g = NULL;
  sc_flat f;
  CUresult r;
  CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  CUgraphNode err = NULL;
  int i;
  SC_ENTER(cuGraphExecUpdate);
  if (!resultInfo) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_exec(hGraphExec, &x);
  if (r == CUDA_SUCCESS) r = sc_get_graph(hGraph, &g);
  if (r != CUDA_SUCCESS) {
    SC_UNLOCK();
    return r;
  }
  memset(resultInfo, 0, sizeof *resultInfo);
  if (!sc_flat_build(&f, g)) {
    why = CU_GRAPH_EXEC_UPDATE_ERROR;
  } else if (f.n != x->f.n || f.ntop != x->f.ntop) {
    why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED; /* errorNode stays NULL */
  } else {
    for (i = 0; i < f.n && why == CU_GRAPH_EXEC_UPDATE_SUCCESS; ++i) {
      why = sc_update_node_check(&x->f.x[i], &f.x[i]);
      if (why != CU_GRAPH_EXEC_UPDATE_SUCCESS) err = SC_GNODE_HANDLE(g->nodes[f.x[i].top]);
    }
  }
  if (why == CU_GRAPH_EXEC_UPDATE_SUCCESS)
    for (i = 0; i < f.n; ++i) {
      sc_gnp_ref(f.x[i].p);
      sc_exec_swap(x, i, f.x[i].p);
    }
  sc_flat_free(&f);
  resultInfo->result = why;
  resultInfo->errorNode = err;
  resultInfo->errorFromNode = NULL;
  SC_UNLOCK();
  return why == CU_GRAPH_EXEC_UPDATE_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
}

/* ---- stream capture --------------------------------------------------------------------------- */

typedef struct sc_cap_event {
  sc_event* e;  /* referenced */
  uint64_t gen; /* the record (generation) made inside the capture */
  int* deps;    /* the recording stream's tail at that point */
  int ndeps;
} sc_cap_event;

typedef struct sc_capture {
  struct sc_capture* next; /* sc_captures */
  sc_graph* g;             /* being built; registered by cuStreamEndCapture */
  sc_stream* origin;
  CUstreamCaptureMode mode;
  sc_tls* thread;      /* the thread that began it */
  CUresult invalid;    /* why it was invalidated, or CUDA_SUCCESS */
  sc_stream** streams; /* every stream in it (referenced), origin first */
  int nstreams, cap_streams;
  sc_cap_event* evs;
  int nevs, cap_evs;
  sc_op** junk; /* ops taken but not turned into nodes (event records): freed at the end */
  int njunk, cap_junk;
} sc_capture;

/* sc_stream.capture: one per stream taking part. */
typedef struct sc_cap_stream {
  sc_capture* cap;
  int* tail; /* what the stream's next op depends on */
  int ntail, cap_tail;
} sc_cap_stream;

static sc_capture* sc_captures; /* active captures, under sc.mu */

static void sc_tail_set(sc_cap_stream* cs, const int* v, int n) {
  cs->tail = (int*)sc_grow(cs->tail, &cs->cap_tail, n + 1, sizeof(int));
  if (n) memcpy(cs->tail, v, (size_t)n * sizeof(int));
  cs->ntail = n;
}

static void sc_tail_merge(sc_cap_stream* cs, const int* v, int n) {
  int i, j;
  for (i = 0; i < n; ++i) {
    for (j = 0; j < cs->ntail && cs->tail[j] != v[i]; ++j) {
    }
    if (j < cs->ntail) continue;
    cs->tail = (int*)sc_grow(cs->tail, &cs->cap_tail, cs->ntail + 1, sizeof(int));
    cs->tail[cs->ntail++] = v[i];
  }
}

static void sc_capture_join(sc_capture* c, sc_stream* s, const int* tail, int n) {
  sc_cap_stream* cs = (sc_cap_stream*)sc_xcalloc(1, sizeof(sc_cap_stream));
  cs->cap = c;
  sc_tail_set(cs, tail, n);
  s->capture = cs;
  sc_ref(&s->h);
  c->streams = (sc_stream**)sc_grow(c->streams, &c->cap_streams, c->nstreams + 1, sizeof(sc_stream*));
  c->streams[c->nstreams++] = s;
}

static void sc_capture_invalidate(sc_stream* s, CUresult why) {
  sc_cap_stream* cs = (sc_cap_stream*)s->capture;
  if (cs && cs->cap->invalid == CUDA_SUCCESS) cs->cap->invalid = why;
}

/* Ends c: every stream leaves it; frees everything but the graph, which is returned. */
static sc_graph* sc_capture_end(sc_capture* c) {
  sc_capture** link;
  sc_graph* g = c->g;
  int i;
  for (link = &sc_captures; *link != c; link = &(*link)->next) {
  }
  *link = c->next;
  for (i = 0; i < c->nstreams; ++i) {
    sc_cap_stream* cs = (sc_cap_stream*)c->streams[i]->capture;
    c->streams[i]->capture = NULL;
    free(cs->tail);
    free(cs);
    sc_unref(&c->streams[i]->h);
  }
  for (i = 0; i < c->nevs; ++i) {
    sc_unref(&c->evs[i].e->h);
    free(c->evs[i].deps);
  }
  for (i = 0; i < c->njunk; ++i) {
    if (c->junk[i]->fini) c->junk[i]->fini(c->junk[i]);
    free(c->junk[i]);
  }
  free(c->streams);
  free(c->evs);
  free(c->junk);
  free(c);
  return g;
}

static void sc_capture_junk(sc_capture* c, sc_op* op) {
  c->junk = (sc_op**)sc_grow(c->junk, &c->cap_junk, c->njunk + 1, sizeof(sc_op*));
  c->junk[c->njunk++] = op;
}

/* Called by sc_submit (under sc.mu) for every op of a capturing stream. */
static int sc_graph_capture_op(sc_stream* s, sc_op* op) {
  sc_cap_stream* cs = (sc_cap_stream*)s->capture;
  sc_capture* c = cs->cap;
  sc_gnp* p;
  sc_gnode* nd = NULL;
  if (op->run == sc_run_pool_free) {
    /* a mem-free node on a GPU: not modelled. It runs now, and the capture is void. */
    sc_capture_invalidate(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    return 0;
  }
  if (c->invalid != CUDA_SUCCESS) {
    sc_capture_junk(c, op);
    return 1;
  }
  if (op->run == sc_run_record) {
    /* no node: the event now stands for this stream's position, for later waits */
    sc_cap_event* ce;
    c->evs = (sc_cap_event*)sc_grow(c->evs, &c->cap_evs, c->nevs + 1, sizeof(sc_cap_event));
    ce = &c->evs[c->nevs++];
    ce->e = (sc_event*)op->a;
    sc_ref(&ce->e->h);
    ce->gen = op->u0;
    ce->ndeps = cs->ntail;
    ce->deps = (int*)sc_xcalloc((size_t)cs->ntail + 1, sizeof(int));
    if (cs->ntail) memcpy(ce->deps, cs->tail, (size_t)cs->ntail * sizeof(int));
    sc_capture_junk(c, op);
    return 1;
  }
  p = sc_gnp_new(sc_graph_op_type(op));
  p->op = op;
  nd = sc_graph_add(c->g, p, NULL, cs->tail, cs->ntail);
  sc_tail_set(cs, &nd->idx, 1);
  return 1;
}

/* The capture record of e's latest record, if it was made inside an active capture. */
static sc_cap_event* sc_capture_find_event(const sc_event* e, sc_capture** in) {
  sc_capture* c = NULL;
  int i;
  for (c = sc_captures; c; c = c->next)
    for (i = c->nevs - 1; i >= 0; --i)
      if (c->evs[i].e == e && c->evs[i].gen == e->gen) {
        *in = c;
        return &c->evs[i];
      }
  return NULL;
}

/* cuStreamWaitEvent's hook (under sc.mu): returns 1 when the wait is a capture matter
 * (*r says how it went), 0 when it is an ordinary stream wait. */
static int sc_graph_capture_wait(sc_stream* s, sc_event* e, CUresult* r) {
  sc_capture* c = NULL;
  sc_cap_event* ce = sc_capture_find_event(e, &c);
  sc_cap_stream* cs = (sc_cap_stream*)s->capture;
  *r = CUDA_SUCCESS;
  if (!cs && !ce) return 0;
  if (!cs) { /* fork: s joins the capture the event was recorded in */
    if (s->is_null) {
      sc_capture_invalidate(c->origin, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
      *r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      return 1;
    }
    sc_capture_join(c, s, ce->deps, ce->ndeps);
    return 1;
  }
  if (!ce) { /* an event from outside the capture: crosses its boundary */
    sc_capture_invalidate(s, CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    *r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    return 1;
  }
  if (c != cs->cap) {
    sc_capture_invalidate(s, CUDA_ERROR_STREAM_CAPTURE_MERGE);
    *r = CUDA_ERROR_STREAM_CAPTURE_MERGE;
    return 1;
  }
  sc_tail_merge(cs, ce->deps, ce->ndeps); /* join */
  return 1;
}

/* cuStreamSynchronize / cuStreamQuery on a capturing stream (under sc.mu). */
static CUresult sc_graph_capture_sync_refused(sc_stream* s) {
  sc_capture_invalidate(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* For entry points CUDA calls "potentially unsafe" during capture (cuMemAlloc, synchronous
 * copies, queries, ...), by the calling thread's mode (cuThreadExchangeStreamCaptureMode's
 * rule): GLOBAL is refused while this thread has a non-relaxed capture going or any thread
 * a global one, THREAD_LOCAL only for this thread's own non-relaxed capture, RELAXED never.
 * Every capture that refuses the call is invalidated. Under sc.mu. */
static CUresult sc_graph_unsafe_call(void) {
  sc_tls* t = sc_thread();
  sc_capture* c = NULL;
  CUresult r = CUDA_SUCCESS;
  if (t->capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  for (c = sc_captures; c; c = c->next) {
    int own = c->thread == t && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    int other =
        t->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->thread != t && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (!own && !other) continue;
    if (c->invalid == CUDA_SUCCESS) c->invalid = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return r;
}

CUresult CUDAAPI sc_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  sc_tls* t;
  CUstreamCaptureMode old;
  SC_ENTER(cuThreadExchangeStreamCaptureMode);
  if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
    return CUDA_ERROR_INVALID_VALUE;
  t = sc_thread(); /* the thread's own: no lock */
  old = t->capture_mode;
  t->capture_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
  sc_stream* s = NULL;
  sc_ctx* cur = NULL;
  CUresult r;
  SC_ENTER(cuStreamBeginCapture);
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS && s->is_null) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* not the legacy stream */
  if (r == CUDA_SUCCESS && s->capture) r = CUDA_ERROR_ILLEGAL_STATE;
  if (r == CUDA_SUCCESS) {
    sc_capture* c = (sc_capture*)sc_xcalloc(1, sizeof(sc_capture));
    c->g = sc_graph_new(s->ctx, 0);
    c->origin = s;
    c->mode = mode;
    c->thread = sc_thread();
    c->next = sc_captures;
    sc_captures = c;
    sc_capture_join(c, s, NULL, 0);
  }
  SC_UNLOCK();
  return r;
}

/* 1 when every node of want[] is in have[] or an ancestor of one of them. */
static int sc_capture_reaches(const sc_graph* g, const int* have, int nhave, const int* want, int nwant) {
  char* seen = (char*)sc_xcalloc((size_t)g->n + 1, 1);
  int* stack = (int*)sc_xcalloc((size_t)g->n + 1, sizeof(int));
  int n = 0, i, ok = 1;
  for (i = 0; i < nhave; ++i)
    if (!seen[have[i]]) seen[have[i]] = 1, stack[n++] = have[i];
  while (n) {
    const sc_gnode* v = g->nodes[stack[--n]];
    for (i = 0; i < v->ndeps; ++i)
      if (!seen[v->deps[i]]) seen[v->deps[i]] = 1, stack[n++] = v->deps[i];
  }
  for (i = 0; i < nwant && ok; ++i) ok = seen[want[i]];
  free(seen);
  free(stack);
  return ok;
}

CUresult CUDAAPI sc_cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  sc_stream* s = NULL;
  sc_cap_stream* cs = NULL;
  sc_capture* c = NULL;
  sc_graph* g = NULL;
  CUresult r;
  int i;
  SC_ENTER(cuStreamEndCapture);
  if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_stream(hStream, &s);
  cs = r == CUDA_SUCCESS ? (sc_cap_stream*)s->capture : NULL;
  if (r == CUDA_SUCCESS && !cs) r = CUDA_ERROR_ILLEGAL_STATE; /* not capturing */
  if (r == CUDA_SUCCESS && cs->cap->origin != s) r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (r != CUDA_SUCCESS) {
    SC_UNLOCK();
    return r;
  }
  c = cs->cap;
  /* an invalidated capture ends with INVALIDATED (the offending call returned the cause) */
  r = c->invalid != CUDA_SUCCESS ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  /* Ending a global or thread-local capture on another thread fails AND ends the capture
   * (the graph is discarded), as the real driver does: a later end finds no capture. */
  if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != sc_thread()) r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  /* every forked stream must have been joined back into the origin */
  for (i = 1; i < c->nstreams && r == CUDA_SUCCESS; ++i) {
    sc_cap_stream* o = (sc_cap_stream*)c->streams[i]->capture;
    if (!sc_capture_reaches(c->g, cs->tail, cs->ntail, o->tail, o->ntail)) r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  g = sc_capture_end(c);
  if (r == CUDA_SUCCESS) {
    sc_obj_register(&g->h);
    *phGraph = (CUgraph)(uintptr_t)SC_HANDLE(g);
  } else {
    sc_graph_free(&g->h); /* never registered: its nodes die with it */
    *phGraph = NULL;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  sc_stream* s = NULL;
  CUresult r;
  SC_ENTER(cuStreamIsCapturing);
  if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS) {
    sc_cap_stream* cs = (sc_cap_stream*)s->capture;
    *captureStatus = !cs                                ? CU_STREAM_CAPTURE_STATUS_NONE
                     : cs->cap->invalid != CUDA_SUCCESS ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                        : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  SC_UNLOCK();
  return r;
}
