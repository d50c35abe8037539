/* Fill, copy and update, byte for byte, over a matrix of alignments and lengths: every
 * pattern size (1, 2, 4, 8, 16, and patterns that shrink to a smaller one) at every target
 * offset 0..15 its rule allows, copies at every source/destination offset pair 0..7 x 0..7
 * (between two buffers and within one), updates at every offset 0..15, each at lengths
 * 1..70 and around 4 KiB, 64 KiB and 1 MiB; in STREAM and GRAPH command buffers, one-shot
 * and reusable (executed more than once), through buffers named directly and through
 * binding slots whose binding offsets move the target to every address residue mod 16
 * (GRAPH command buffers do those with gpuhal's built-in fill/copy kernels); lengths past
 * 4 MiB that make the built-in kernels loop over their grid; pinned host and managed
 * memory as operands; commands overwriting each other behind barriers; the direct
 * gpuhal_buffer_read / _write at every offset; and the argument rules, which are refused
 * with a status naming the argument and the rule, leaving the command buffer recording.
 *
 * Every target sits in its own cell between guard bytes: the background bytes of every
 * buffer are >= 0x80 and every byte a command writes (pattern, copy source, update data)
 * is < 0x80, so a byte written outside its range, or a range cut short, shows. Each
 * batch is recorded into one command buffer, executed, read back whole and compared with
 * a host model. Public API only: the same binary runs on a real GPU
 * (-DGPUHAL_TEST_DRIVER=system), where the built-in kernels run as PTX. */
#include "gpuhal.h"
#include "test_util.h"

#include <stdint.h>

#define FC_GUARD 48u       /* at least this many untouched bytes before and after every cell */
#define FC_MAX_SHIFT 16u   /* binding offsets are < this */
#define FC_REPORT_MAX 8    /* mismatching commands reported per execute */
#define FC_LENGTHS_MAX 128 /* entries of a length list */

enum { FC_FILL = 1, FC_COPY = 2, FC_UPDATE = 3 };

/* ---- patterns: bytes < 0x80, no two halves alike unless the pattern is meant to shrink ---- */
typedef struct fc_pattern {
  const char* name;
  const unsigned char* bytes;
  uint32_t size;
} fc_pattern;

static const unsigned char fc_p1[1] = {0x5A};
static const unsigned char fc_p2[2] = {0x34, 0x12};             /* 0x1234 little-endian */
static const unsigned char fc_p4[4] = {0x78, 0x56, 0x34, 0x12}; /* 0x12345678 little-endian */
static const unsigned char fc_p8[8] = {0x01, 0x23, 0x45, 0x67, 0x76, 0x54, 0x32, 0x1F};
static const unsigned char fc_p16[16] = {0x0F, 0x1E, 0x2D, 0x3C, 0x4B, 0x5A, 0x69, 0x78,
                                         0x07, 0x16, 0x25, 0x34, 0x43, 0x52, 0x61, 0x70};
/* Patterns that repeat within themselves: gpuhal may do them as a smaller memset. */
static const unsigned char fc_p2r[2] = {0x66, 0x66};
static const unsigned char fc_p4r[4] = {0x3C, 0x3C, 0x3C, 0x3C};
static const unsigned char fc_p8r[8] = {0x78, 0x56, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12};
static const unsigned char fc_p16r[16] = {0x34, 0x12, 0x34, 0x12, 0x34, 0x12, 0x34, 0x12,
                                          0x34, 0x12, 0x34, 0x12, 0x34, 0x12, 0x34, 0x12};

static const fc_pattern fc_patterns[] = {
    {"1-byte 5A", fc_p1, 1},
    {"2-byte 0x1234", fc_p2, 2},
    {"4-byte 0x12345678", fc_p4, 4},
    {"8-byte 0x1F32547667452301", fc_p8, 8},
    {"16-byte 0F1E..61 70", fc_p16, 16},
    {"2-byte 6666 (shrinks to 1)", fc_p2r, 2},
    {"4-byte 3C3C3C3C (shrinks to 1)", fc_p4r, 4},
    {"8-byte 0x1234567812345678 (shrinks to 4)", fc_p8r, 8},
    {"16-byte 0x1234 x8 (shrinks to 2)", fc_p16r, 16},
};
#define FC_PATTERN_COUNT (sizeof(fc_patterns) / sizeof(fc_patterns[0]))

/* ---- command buffer kinds ---- */
typedef struct fc_mode {
  const char* name;
  gpuhal_command_buffer_flags_t flags;
} fc_mode;

static const fc_mode fc_modes[] = {
    {"STREAM one-shot", GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_ONE_SHOT},
    {"STREAM reusable", GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE},
    {"GRAPH one-shot", GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_ONE_SHOT},
    {"GRAPH reusable", GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE},
};
#define FC_MODE_COUNT (sizeof(fc_modes) / sizeof(fc_modes[0]))

static int fc_reusable(const fc_mode* mode) { return (mode->flags & GPUHAL_COMMAND_BUFFER_REUSABLE) != 0; }

/* ---- the fixture ---- */
typedef struct fc_fixture {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  uint64_t rng;
} fc_fixture;

static int fc_open(fc_fixture* f) {
  memset(f, 0, sizeof(*f));
  f->rng = 0x9E3779B97F4A7C15ull;
  return tu_open_device(&f->driver, &f->device, 0, "");
}

static void fc_close(fc_fixture* f) {
  if (f->device) gpuhal_status_free(gpuhal_device_wait_idle(f->device, gpuhal_timeout_relative_ns(60000000000ll)));
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
  memset(f, 0, sizeof(*f));
}

static unsigned char fc_random(fc_fixture* f) {
  f->rng ^= f->rng << 13;
  f->rng ^= f->rng >> 7;
  f->rng ^= f->rng << 17;
  return (unsigned char)(f->rng >> 32);
}
static unsigned char fc_background(fc_fixture* f) { return (unsigned char)(0x80u | fc_random(f)); }
static unsigned char fc_payload(fc_fixture* f) { return (unsigned char)(0x7Fu & fc_random(f)); }
/* `size` background bytes, eight per step of the generator. */
static void fc_fill_background(fc_fixture* f, unsigned char* dst, uint64_t size) {
  uint64_t k;
  for (k = 0; k + 8 <= size; k += 8) {
    uint64_t v;
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    v = f->rng | 0x8080808080808080ull;
    memcpy(dst + k, &v, 8);
  }
  for (; k < size; ++k) dst[k] = fc_background(f);
}

/* ---- a plan: commands placed in cells of one or two arenas (buffers or binding slots) ---- */
typedef struct fc_op {
  int kind;
  uint32_t dst_arena, src_arena;
  uint64_t dst, src, size; /* positions in their arena, before any binding offset */
  const fc_pattern* pattern;
  unsigned char* data; /* UPDATE: the host bytes (inside `owned`, at a varying alignment) */
  unsigned char* owned;
} fc_op;

typedef struct fc_plan {
  fc_op* ops;
  size_t count, capacity;
  uint32_t arenas; /* 1 or 2 */
  uint64_t cursor[2];
  gpuhal_memory_kind_t kind[2]; /* of each arena's buffer: DEVICE unless a case says otherwise */
} fc_plan;

static void fc_plan_init(fc_plan* p, uint32_t arenas) {
  memset(p, 0, sizeof(*p));
  p->arenas = arenas;
}

static void fc_plan_free(fc_plan* p) {
  size_t i;
  for (i = 0; i < p->count; ++i) free(p->ops[i].owned);
  free(p->ops);
  memset(p, 0, sizeof(*p));
}

/* A new cell of `size` bytes in `arena` at `residue` past a 16-byte boundary (of the
 * arena's start; arenas start 256-byte aligned), with FC_GUARD bytes or more around it. */
static uint64_t fc_place(fc_plan* p, uint32_t arena, uint32_t residue, uint64_t size) {
  uint64_t pos = ((p->cursor[arena] + FC_GUARD + 15u) & ~(uint64_t)15u) + residue;
  p->cursor[arena] = pos + size;
  return pos;
}

static fc_op* fc_add(fc_plan* p, int kind) {
  fc_op* op;
  if (p->count == p->capacity) {
    size_t capacity = p->capacity ? 2 * p->capacity : 256;
    fc_op* ops = (fc_op*)realloc(p->ops, capacity * sizeof(fc_op));
    if (!ops) abort();
    p->ops = ops;
    p->capacity = capacity;
  }
  op = &p->ops[p->count++];
  memset(op, 0, sizeof(*op));
  op->kind = kind;
  return op;
}

static void fc_add_fill(fc_plan* p, const fc_pattern* pattern, uint32_t offset, uint64_t size) {
  fc_op* op = fc_add(p, FC_FILL);
  op->pattern = pattern;
  op->size = size;
  op->dst = fc_place(p, 0, offset, size);
}

/* A copy of `size` bytes from offset `src_offset` to `dst_offset`: from arena 1 to arena 0
 * when the plan has two, else between two cells of arena 0. */
static void fc_add_copy(fc_plan* p, uint32_t src_offset, uint32_t dst_offset, uint64_t size) {
  fc_op* op = fc_add(p, FC_COPY);
  op->size = size;
  op->src_arena = p->arenas - 1;
  op->src = fc_place(p, op->src_arena, src_offset, size);
  op->dst = fc_place(p, 0, dst_offset, size);
}

/* An update of `size` bytes at `offset`; the host bytes start `host_offset` bytes into a
 * fresh allocation (their own alignment varies too). */
static void fc_add_update(fc_fixture* f, fc_plan* p, uint32_t offset, uint64_t size, uint32_t host_offset) {
  fc_op* op = fc_add(p, FC_UPDATE);
  uint64_t i;
  op->size = size;
  op->dst = fc_place(p, 0, offset, size);
  op->owned = (unsigned char*)malloc((size_t)size + 16);
  if (!op->owned) abort();
  op->data = op->owned + host_offset % 16;
  for (i = 0; i < size; ++i) op->data[i] = fc_payload(f);
}

/* The lengths of a case: every multiple of `unit` in 1..70, then (large >= 1) one unit
 * around 4 KiB and past 64 KiB, then (large >= 2) past 1 MiB. For unit 1: ..., 70, 4095,
 * 4096, 4097, 65539[, 1048577]. */
static size_t fc_lengths(uint32_t unit, int large, uint64_t* out) {
  size_t n = 0;
  uint64_t len;
  for (len = unit; len <= 70; len += unit) out[n++] = len;
  if (large >= 1) {
    out[n++] = 4096 - unit;
    out[n++] = 4096;
    out[n++] = 4096 + unit;
    out[n++] = 65536 + 3 * (uint64_t)unit;
  }
  if (large >= 2) out[n++] = ((uint64_t)1 << 20) + unit;
  return n;
}

/* ---- running a plan ---- */
typedef struct fc_batch {
  const char* what;
  const fc_mode* mode;
  int slots; /* 1: every operand is a binding slot (slot = arena) */
  uint64_t size[2];
  gpuhal_buffer_t* buffers[2];
  uint64_t address[2];
  unsigned char* init[2];
  unsigned char* expected[2];
  unsigned char* got[2];
} fc_batch;

static void fc_batch_free(fc_batch* b) {
  uint32_t a;
  for (a = 0; a < 2; ++a) {
    gpuhal_buffer_release(b->buffers[a]);
    free(b->init[a]);
    free(b->expected[a]);
    free(b->got[a]);
  }
}

/* One line about `op` for a failure message. */
static void fc_describe(const fc_batch* b, const fc_op* op, const uint64_t* shift, char* out, size_t capacity) {
  uint64_t dst = shift[op->dst_arena] + op->dst;
  if (op->kind == FC_FILL) {
    snprintf(out, capacity, "fill %s, %llu bytes at offset %llu (address %% 16 = %u)", op->pattern->name,
             (unsigned long long)op->size, (unsigned long long)dst, (unsigned)((b->address[0] + dst) % 16));
  } else if (op->kind == FC_COPY) {
    uint64_t src = shift[op->src_arena] + op->src;
    snprintf(out, capacity,
             "copy of %llu bytes from %s offset %llu (address %% 16 = %u) to offset %llu (address %% 16 = %u)",
             (unsigned long long)op->size, op->src_arena == op->dst_arena ? "the same buffer's" : "the source's",
             (unsigned long long)src, (unsigned)((b->address[op->src_arena] + src) % 16), (unsigned long long)dst,
             (unsigned)((b->address[0] + dst) % 16));
  } else {
    snprintf(out, capacity, "update of %llu bytes at offset %llu (address %% 16 = %u, host pointer %% 16 = %u)",
             (unsigned long long)op->size, (unsigned long long)dst, (unsigned)((b->address[0] + dst) % 16),
             (unsigned)((uintptr_t)op->data % 16));
  }
}

/* The arenas' bytes after the plan ran with binding offsets `shift`. */
static void fc_model(const fc_plan* p, fc_batch* b, const uint64_t* shift) {
  size_t i;
  uint32_t a;
  for (a = 0; a < p->arenas; ++a) memcpy(b->expected[a], b->init[a], (size_t)b->size[a]);
  for (i = 0; i < p->count; ++i) {
    const fc_op* op = &p->ops[i];
    unsigned char* dst = b->expected[op->dst_arena] + shift[op->dst_arena] + op->dst;
    uint64_t k;
    if (op->kind == FC_FILL) {
      for (k = 0; k < op->size; ++k) dst[k] = op->pattern->bytes[k % op->pattern->size];
    } else if (op->kind == FC_COPY) {
      memcpy(dst, b->init[op->src_arena] + shift[op->src_arena] + op->src, (size_t)op->size);
    } else {
      memcpy(dst, op->data, (size_t)op->size);
    }
  }
}

/* The command whose cell (guards included) in `arena` holds byte `pos`, or NULL; its
 * target's start in *out_start. */
static const fc_op* fc_op_at(const fc_plan* p, uint32_t arena, uint64_t pos, const uint64_t* shift,
                             uint64_t* out_start) {
  size_t i;
  for (i = 0; i < p->count; ++i) {
    const fc_op* op = &p->ops[i];
    int side;
    for (side = 0; side < 2; ++side) { /* the destination's cell, then a copy's source's */
      uint64_t start;
      if (side == 0 ? op->dst_arena != arena : (op->kind != FC_COPY || op->src_arena != arena)) continue;
      start = shift[arena] + (side == 0 ? op->dst : op->src);
      if (pos + FC_GUARD >= start && pos < start + op->size + FC_GUARD) {
        *out_start = start;
        return op;
      }
    }
  }
  return NULL;
}

/* Reads the arenas back and compares them with the model; reports the first few commands
 * whose cells differ. 1 when all match. */
static int fc_check(const fc_plan* p, fc_batch* b, const uint64_t* shift, int execute) {
  uint32_t a;
  int reports = 0, ok = 1;
  for (a = 0; a < p->arenas; ++a) {
    gpuhal_status_t st = gpuhal_buffer_read(b->buffers[a], 0, b->got[a], b->size[a]);
    uint64_t i;
    if (st) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s, %s: reading back: %s", b->what, b->mode->name, gpuhal_status_message(st));
      gpuhal_status_free(st);
      return 0;
    }
    if (memcmp(b->got[a], b->expected[a], (size_t)b->size[a]) == 0) continue;
    ok = 0;
    for (i = 0; i < b->size[a] && reports < FC_REPORT_MAX; ++i) {
      const fc_op* op;
      char line[256];
      uint64_t start;
      if (b->got[a][i] == b->expected[a][i]) continue;
      op = fc_op_at(p, a, i, shift, &start);
      if (!op) {
        TU_FAIL_AT(__FILE__, __LINE__,
                   "%s, %s, execute %d: buffer %u byte %llu is 0x%02x, expected 0x%02x (in no cell)", b->what,
                   b->mode->name, execute + 1, a, (unsigned long long)i, b->got[a][i], b->expected[a][i]);
        reports++;
        continue;
      }
      fc_describe(b, op, shift, line, sizeof(line));
      TU_FAIL_AT(__FILE__, __LINE__,
                 "%s, %s%s, execute %d: %s: byte %lld from the target's start is 0x%02x, expected 0x%02x (%s)", b->what,
                 b->mode->name, b->slots ? " through binding slots" : "", execute + 1, line,
                 (long long)i - (long long)start, b->got[a][i], b->expected[a][i],
                 i < start                                           ? "before the target: written"
                 : i >= start + op->size                             ? "after the target: written"
                 : start != shift[a] + op->dst || op->dst_arena != a ? "a copy source: written"
                                                                     : "inside the target");
      reports++;
      i = start + op->size + FC_GUARD - 1; /* next command */
    }
  }
  return ok;
}

/* Records the plan into a command buffer of `mode` (through binding slots when `slots`)
 * and executes it once per row of `shifts` (binding offsets of arenas 0 and 1; one row,
 * {0, 0}, without slots; a one-shot command buffer takes the first row only). Before each
 * execute every arena is rewritten with its initial bytes; after it every byte is checked. */
static void fc_run(fc_fixture* f, const fc_plan* p, const fc_mode* mode, int slots, const uint64_t (*shifts)[2],
                   int shift_count, const char* what) {
  static const uint64_t no_shift[2] = {0, 0};
  fc_batch b;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_status_t st = NULL;
  uint32_t a;
  size_t i;
  int e, executes = slots ? shift_count : (fc_reusable(mode) ? 2 : 1);
  if (!fc_reusable(mode)) executes = 1;
  memset(&b, 0, sizeof(b));
  b.what = what;
  b.mode = mode;
  b.slots = slots;
  for (a = 0; a < p->arenas && !st; ++a) {
    b.size[a] = p->cursor[a] + FC_GUARD + FC_MAX_SHIFT;
    b.init[a] = (unsigned char*)malloc((size_t)b.size[a]);
    b.expected[a] = (unsigned char*)malloc((size_t)b.size[a]);
    b.got[a] = (unsigned char*)malloc((size_t)b.size[a]);
    if (!b.init[a] || !b.expected[a] || !b.got[a]) abort();
    fc_fill_background(f, b.init[a], b.size[a]);
    st = gpuhal_buffer_allocate(f->device, p->kind[a], b.size[a], &b.buffers[a]);
    if (!st) st = gpuhal_buffer_device_address(b.buffers[a], &b.address[a]);
  }
  /* Copy sources hold payload bytes, also past their end by up to a binding offset. */
  for (i = 0; i < p->count; ++i) {
    const fc_op* op = &p->ops[i];
    uint64_t k;
    if (op->kind != FC_COPY) continue;
    for (k = 0; k < op->size + FC_MAX_SHIFT; ++k) b.init[op->src_arena][op->src + k] = fc_payload(f);
  }
  if (!st) st = gpuhal_command_buffer_create(f->device, mode->flags, slots ? p->arenas : 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  for (i = 0; i < p->count && !st; ++i) {
    const fc_op* op = &p->ops[i];
    gpuhal_buffer_ref_t dst =
        slots ? gpuhal_ref_slot(op->dst_arena, op->dst) : gpuhal_ref_buffer(b.buffers[op->dst_arena], op->dst);
    gpuhal_buffer_ref_t src =
        slots ? gpuhal_ref_slot(op->src_arena, op->src) : gpuhal_ref_buffer(b.buffers[op->src_arena], op->src);
    if (op->kind == FC_FILL) {
      st = gpuhal_cmd_fill(cb, dst, op->size, op->pattern->bytes, op->pattern->size);
    } else if (op->kind == FC_COPY) {
      st = gpuhal_cmd_copy(cb, src, dst, op->size);
    } else {
      st = gpuhal_cmd_update(cb, op->data, dst, op->size);
    }
    if (st) {
      char line[256];
      fc_describe(&b, op, no_shift, line, sizeof(line));
      st = gpuhal_status_annotate(st, "recording command %u: %s", (unsigned)i, line);
    }
  }
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s, %s: %s", what, mode->name, gpuhal_status_message(st));
    gpuhal_status_free(st);
    st = NULL;
    executes = 0;
  }
  for (e = 0; e < executes; ++e) {
    const uint64_t* shift = slots ? shifts[e] : no_shift;
    gpuhal_binding_table_t table;
    for (a = 0; a < p->arenas && !st; ++a) st = gpuhal_buffer_write(b.buffers[a], 0, b.init[a], b.size[a]);
    table.count = p->arenas;
    table.buffers = b.buffers;
    table.offsets = shift;
    if (!st) st = tu_execute_and_wait(f->driver, f->device, cb, slots ? &table : NULL);
    if (st) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s, %s, execute %d: %s", what, mode->name, e + 1, gpuhal_status_message(st));
      gpuhal_status_free(st);
      break;
    }
    fc_model(p, &b, shift);
    if (!fc_check(p, &b, shift, e)) break;
  }
  gpuhal_command_buffer_release(cb);
  fc_batch_free(&b);
}

/* ---- plans ---- */

/* Fills of every pattern at every offset 0..15 that is a multiple of its size. */
static void fc_plan_fills(fc_plan* p, int large, uint32_t offset_step_min) {
  uint64_t lengths[FC_LENGTHS_MAX];
  size_t k, n, l;
  uint32_t off;
  for (k = 0; k < FC_PATTERN_COUNT; ++k) {
    const fc_pattern* pattern = &fc_patterns[k];
    uint32_t step = pattern->size > offset_step_min ? pattern->size : offset_step_min;
    n = fc_lengths(pattern->size, large, lengths);
    for (off = 0; off < 16; off += step)
      for (l = 0; l < n; ++l) fc_add_fill(p, pattern, off, lengths[l]);
  }
}

/* Copies at every offset pair 0..7 x 0..7. Past 1 MiB (large 2) only for the pairs of
 * equal offsets and those whose offsets add up to 7 (every difference -7..7 once or more):
 * the other pairs take the same path at 64 KiB, and a batch stays small for softcuda. */
static void fc_plan_copies(fc_plan* p, int large) {
  uint64_t lengths[FC_LENGTHS_MAX];
  size_t n, l;
  uint32_t so, dof;
  for (so = 0; so < 8; ++so)
    for (dof = 0; dof < 8; ++dof) {
      n = fc_lengths(1, so == dof || so + dof == 7 ? large : (large < 1 ? large : 1), lengths);
      for (l = 0; l < n; ++l) fc_add_copy(p, so, dof, lengths[l]);
    }
}

/* Updates at every offset 0..15. */
static void fc_plan_updates(fc_fixture* f, fc_plan* p, int large) {
  uint64_t lengths[FC_LENGTHS_MAX];
  size_t n = fc_lengths(1, large, lengths), l;
  uint32_t off;
  for (off = 0; off < 16; ++off)
    for (l = 0; l < n; ++l) fc_add_update(f, p, off, lengths[l], (uint32_t)(off * 7 + l));
}

/* ---- cases ---- */

/* Every pattern at every allowed offset, lengths up to 1 MiB + pattern, buffers named
 * directly: memsets where CUDA's can do it, the built-in kernel for 8/16-byte patterns. */
TU_TEST(fill_matrix) {
  fc_fixture f;
  fc_plan p;
  size_t m;
  if (!fc_open(&f)) return;
  fc_plan_init(&p, 1);
  fc_plan_fills(&p, 2, 1);
  for (m = 0; m < FC_MODE_COUNT; ++m) fc_run(&f, &p, &fc_modes[m], 0, NULL, 0, "fill matrix");
  fc_plan_free(&p);
  fc_close(&f);
}

/* Fills through a binding slot whose binding offset is 0..15 in turn (the destination at
 * every residue mod 16, also ones not aligned to the pattern: the built-in kernel then;
 * in GRAPH command buffers always, as a kernel node rewritten at each execute). */
TU_TEST(fill_through_slots) {
  static const uint64_t shifts[16][2] = {{0, 0}, {1, 0}, {2, 0},  {3, 0},  {4, 0},  {5, 0},  {6, 0},  {7, 0},
                                         {8, 0}, {9, 0}, {10, 0}, {11, 0}, {12, 0}, {13, 0}, {14, 0}, {15, 0}};
  static const uint64_t one_shot[1][2] = {{7, 0}};
  fc_fixture f;
  fc_plan p;
  size_t m;
  if (!fc_open(&f)) return;
  fc_plan_init(&p, 1);
  fc_plan_fills(&p, 1, 4);
  for (m = 0; m < FC_MODE_COUNT; ++m) {
    const fc_mode* mode = &fc_modes[m];
    if (fc_reusable(mode)) {
      fc_run(&f, &p, mode, 1, shifts, 16, "fills through a slot");
    } else {
      fc_run(&f, &p, mode, 1, one_shot, 1, "fills through a slot");
    }
  }
  fc_plan_free(&p);
  fc_close(&f);
}

/* Copies at every offset pair 0..7 x 0..7, lengths up to 1 MiB + 1, between two buffers
 * and between cells of one buffer. */
TU_TEST(copy_matrix) {
  fc_fixture f;
  uint32_t arenas;
  size_t m;
  if (!fc_open(&f)) return;
  for (arenas = 2; arenas >= 1; --arenas) {
    fc_plan p;
    fc_plan_init(&p, arenas);
    fc_plan_copies(&p, 2);
    for (m = 0; m < FC_MODE_COUNT; ++m)
      fc_run(&f, &p, &fc_modes[m], 0, NULL, 0, arenas == 2 ? "copy matrix, two buffers" : "copy matrix, one buffer");
    fc_plan_free(&p);
  }
  fc_close(&f);
}

/* Copies through binding slots, with binding offsets that put source and destination at
 * every pair of residues mod 16 (same and different alignment: the built-in copy kernel's
 * 16-byte and byte paths in GRAPH command buffers). */
TU_TEST(copy_through_slots) {
  static const uint64_t two[5][2] = {{0, 0}, {8, 0}, {0, 8}, {8, 8}, {3, 13}};
  static const uint64_t one[3][2] = {{0, 0}, {8, 0}, {5, 0}};
  static const uint64_t one_shot[1][2] = {{9, 4}};
  fc_fixture f;
  uint32_t arenas;
  size_t m;
  if (!fc_open(&f)) return;
  for (arenas = 2; arenas >= 1; --arenas) {
    fc_plan p;
    fc_plan_init(&p, arenas);
    fc_plan_copies(&p, 1);
    for (m = 0; m < FC_MODE_COUNT; ++m) {
      const fc_mode* mode = &fc_modes[m];
      const char* what = arenas == 2 ? "copies through two slots" : "copies within one slot";
      if (!fc_reusable(mode)) {
        fc_run(&f, &p, mode, 1, one_shot, 1, what);
      } else if (arenas == 2) {
        fc_run(&f, &p, mode, 1, two, 5, what);
      } else {
        fc_run(&f, &p, mode, 1, one, 3, what);
      }
    }
    fc_plan_free(&p);
  }
  fc_close(&f);
}

/* Updates at every offset 0..15, lengths up to 1 MiB + 1, from host bytes at varying
 * alignments: directly named buffers, then through a slot at binding offsets 0, 8 and 3. */
TU_TEST(update_matrix) {
  static const uint64_t shifts[3][2] = {{0, 0}, {8, 0}, {3, 0}};
  fc_fixture f;
  fc_plan p;
  size_t m;
  if (!fc_open(&f)) return;
  fc_plan_init(&p, 1);
  fc_plan_updates(&f, &p, 2);
  for (m = 0; m < FC_MODE_COUNT; ++m) fc_run(&f, &p, &fc_modes[m], 0, NULL, 0, "update matrix");
  fc_plan_free(&p);
  fc_plan_init(&p, 1);
  fc_plan_updates(&f, &p, 1);
  for (m = 0; m < FC_MODE_COUNT; ++m)
    fc_run(&f, &p, &fc_modes[m], 1, fc_reusable(&fc_modes[m]) ? shifts : shifts + 2, fc_reusable(&fc_modes[m]) ? 3 : 1,
           "updates through a slot");
  fc_plan_free(&p);
  fc_close(&f);
}

/* Commands on pinned host and managed memory (as the operands of fills, copies and
 * updates, each way round), lengths up to 64 KiB, through buffers and slots. */
TU_TEST(other_memory_kinds) {
  static const uint64_t shifts[2][2] = {{0, 0}, {7, 9}};
  static const gpuhal_memory_kind_t pairs[3][2] = {{GPUHAL_MEMORY_HOST_PINNED, GPUHAL_MEMORY_MANAGED},
                                                   {GPUHAL_MEMORY_MANAGED, GPUHAL_MEMORY_HOST_PINNED},
                                                   {GPUHAL_MEMORY_DEVICE, GPUHAL_MEMORY_HOST_PINNED}};
  static const char* const names[3] = {"pinned host <- managed", "managed <- pinned host", "device <- pinned host"};
  uint64_t lengths[FC_LENGTHS_MAX];
  fc_fixture f;
  size_t m, k, n, l;
  int pair, slots;
  if (!fc_open(&f)) return;
  for (pair = 0; pair < 3; ++pair) {
    fc_plan p;
    uint32_t off;
    fc_plan_init(&p, 2);
    p.kind[0] = pairs[pair][0];
    p.kind[1] = pairs[pair][1];
    for (k = 0; k < 5; ++k) {
      const fc_pattern* pattern = &fc_patterns[k];
      n = fc_lengths(pattern->size, 1, lengths);
      for (off = 0; off<16; off += pattern->size> 4 ? pattern->size : 4)
        for (l = 0; l < n; l += 3) fc_add_fill(&p, pattern, off, lengths[l]);
    }
    n = fc_lengths(1, 1, lengths);
    for (off = 0; off < 8; ++off)
      for (l = 0; l < n; l += 2) fc_add_copy(&p, off, 7 - off, lengths[l]);
    for (off = 0; off < 16; off += 3)
      for (l = 0; l < n; l += 4) fc_add_update(&f, &p, off, lengths[l], off);
    for (slots = 0; slots <= 1; ++slots)
      for (m = 0; m < FC_MODE_COUNT; ++m) fc_run(&f, &p, &fc_modes[m], slots, shifts, 2, names[pair]);
    fc_plan_free(&p);
  }
  fc_close(&f);
}

/* Lengths past 4 MiB: more than the built-in kernels' largest grid covers in one pass
 * (1024 blocks x 256 threads x 16 bytes), so their grid-stride loops go round, with heads
 * and tails of every kind; memsets and memcpys of the same lengths beside them. */
TU_TEST(large_grid_stride) {
  static const uint64_t shifts[2][2] = {{0, 0}, {5, 11}};
  static const uint64_t big = ((uint64_t)4 << 20) + 3 * 4096 + 48; /* 768 threads go round twice */
  fc_fixture f;
  size_t m;
  int slots;
  if (!fc_open(&f)) return;
  for (slots = 0; slots <= 1; ++slots) {
    fc_plan p;
    fc_plan_init(&p, 2);
    fc_add_fill(&p, &fc_patterns[0], 0, big + 1);
    fc_add_fill(&p, &fc_patterns[0], 13, big + 3);
    fc_add_fill(&p, &fc_patterns[3], 8, big);
    fc_add_fill(&p, &fc_patterns[4], 0, big);
    fc_add_fill(&p, &fc_patterns[2], 4, big + 4);
    fc_add_copy(&p, 0, 0, big + 5);
    fc_add_copy(&p, 3, 3, big + 7);
    fc_add_copy(&p, 1, 6, big + 1);
    fc_add_update(&f, &p, 9, big + 9, 3);
    for (m = 0; m < FC_MODE_COUNT; ++m) { /* directly: the one-shots; through slots: the reusables */
      const fc_mode* mode = &fc_modes[m];
      if (slots != fc_reusable(mode)) continue;
      fc_run(&f, &p, mode, slots, slots && (mode->flags & GPUHAL_COMMAND_BUFFER_STREAM) ? shifts + 1 : shifts,
             slots && (mode->flags & GPUHAL_COMMAND_BUFFER_STREAM) ? 1 : 2,
             slots ? "large commands through slots" : "large commands");
    }
    fc_plan_free(&p);
  }
  fc_close(&f);
}

/* Several commands of the batch on the same bytes, ordered by barriers: a fill, then a copy
 * over part of it, then an update over part of that; what comes after a barrier lands
 * last, in both recorders, also when the built-in kernels do the work (slots). */
TU_TEST(ordered_overwrites) {
  fc_fixture f;
  size_t m;
  int slots;
  if (!fc_open(&f)) return;
  for (slots = 0; slots <= 1; ++slots) {
    for (m = 0; m < FC_MODE_COUNT; ++m) {
      const fc_mode* mode = &fc_modes[m];
      gpuhal_buffer_t *buf = NULL, *src = NULL;
      gpuhal_command_buffer_t* cb = NULL;
      unsigned char init[4096], expected[4096], got[4096], source[4096], data[100];
      gpuhal_buffer_t* bound[2];
      uint64_t offsets[2] = {3, 0};
      gpuhal_binding_table_t table;
      uint64_t base = slots ? 3 : 0;
      int e, executes = fc_reusable(mode) ? 2 : 1, k;
      for (k = 0; k < 4096; ++k) {
        expected[k] = fc_background(&f);
        source[k] = fc_payload(&f);
      }
      for (k = 0; k < 100; ++k) data[k] = fc_payload(&f);
      TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 4096, &buf));
      TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 4096, &src));
      TU_CHECK_OK(gpuhal_buffer_write(src, 0, source, 4096));
      bound[0] = buf;
      bound[1] = src;
      table.count = 2;
      table.buffers = bound;
      table.offsets = offsets;
      TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, mode->flags, slots ? 2 : 0, &cb));
      TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
      /* 16-byte pattern over [16, 16 + 2048), then copy source[100..1100) to [500, 1500),
       * then the update's 100 bytes at [1000, 1100). */
      TU_CHECK_OK(gpuhal_cmd_fill(cb, slots ? gpuhal_ref_slot(0, 16) : gpuhal_ref_buffer(buf, 16), 2048, fc_p16, 16));
      TU_CHECK_OK(gpuhal_cmd_barrier(cb));
      TU_CHECK_OK(gpuhal_cmd_copy(cb, slots ? gpuhal_ref_slot(1, 100) : gpuhal_ref_buffer(src, 100),
                                  slots ? gpuhal_ref_slot(0, 500) : gpuhal_ref_buffer(buf, 500), 1000));
      TU_CHECK_OK(gpuhal_cmd_barrier(cb));
      TU_CHECK_OK(gpuhal_cmd_update(cb, data, slots ? gpuhal_ref_slot(0, 1000) : gpuhal_ref_buffer(buf, 1000), 100));
      TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
      memcpy(init, expected, sizeof(init));
      for (k = 0; k < 2048; ++k) expected[base + 16 + k] = fc_p16[k % 16];
      memcpy(expected + base + 500, source + 100, 1000);
      memcpy(expected + base + 1000, data, 100);
      for (e = 0; e < executes; ++e) {
        TU_CHECK_OK(gpuhal_buffer_write(buf, 0, init, 4096));
        TU_CHECK_OK(tu_execute_and_wait(f.driver, f.device, cb, slots ? &table : NULL));
        TU_CHECK_OK(gpuhal_buffer_read(buf, 0, got, 4096));
        for (k = 0; k < 4096; ++k) {
          if (got[k] != expected[k]) {
            TU_FAIL_AT(__FILE__, __LINE__, "%s%s, execute %d: byte %d is 0x%02x, expected 0x%02x", mode->name,
                       slots ? " through slots" : "", e + 1, k, got[k], expected[k]);
            break;
          }
        }
      }
      gpuhal_command_buffer_release(cb);
      gpuhal_buffer_release(buf);
      gpuhal_buffer_release(src);
    }
  }
  fc_close(&f);
}

/* The direct entry points: gpuhal_buffer_write at every offset 0..15 and the usual lengths
 * into one buffer of each memory kind (checked by one read of the whole buffer), and
 * gpuhal_buffer_read at every offset into host memory between guard bytes. */
TU_TEST(buffer_read_write_direct) {
  static const gpuhal_memory_kind_t kinds[3] = {GPUHAL_MEMORY_DEVICE, GPUHAL_MEMORY_HOST_PINNED, GPUHAL_MEMORY_MANAGED};
  static const char* const kind_names[3] = {"device", "pinned host", "managed"};
  fc_fixture f;
  int kind;
  if (!fc_open(&f)) return;
  for (kind = 0; kind < 3; ++kind) {
    fc_plan p;
    gpuhal_buffer_t* buffer = NULL;
    unsigned char *init, *expected, *got, *host;
    uint64_t size, k;
    size_t i;
    gpuhal_status_t st;
    fc_plan_init(&p, 1);
    fc_plan_updates(&f, &p, 2);
    size = p.cursor[0] + FC_GUARD;
    init = (unsigned char*)malloc((size_t)size);
    expected = (unsigned char*)malloc((size_t)size);
    got = (unsigned char*)malloc((size_t)size);
    host = (unsigned char*)malloc((size_t)size + 2 * FC_GUARD);
    TU_REQUIRE(init && expected && got && host);
    fc_fill_background(&f, init, size);
    memcpy(expected, init, (size_t)size);
    st = gpuhal_buffer_allocate(f.device, kinds[kind], size, &buffer);
    if (!st) st = gpuhal_buffer_write(buffer, 0, init, size);
    for (i = 0; i < p.count && !st; ++i) {
      const fc_op* op = &p.ops[i];
      st = gpuhal_buffer_write(buffer, op->dst, op->data, op->size);
      memcpy(expected + op->dst, op->data, (size_t)op->size);
    }
    if (!st) st = gpuhal_buffer_read(buffer, 0, got, size);
    if (st) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s memory: %s", kind_names[kind], gpuhal_status_message(st));
      gpuhal_status_free(st);
    } else {
      for (k = 0; k < size; ++k) {
        if (got[k] != expected[k]) {
          static const uint64_t no_shift[2] = {0, 0};
          uint64_t start = 0;
          const fc_op* op = fc_op_at(&p, 0, k, no_shift, &start);
          TU_FAIL_AT(__FILE__, __LINE__,
                     "%s memory, gpuhal_buffer_write: byte %llu is 0x%02x, expected 0x%02x "
                     "(write of %llu bytes at offset %llu)",
                     kind_names[kind], (unsigned long long)k, got[k], expected[k],
                     (unsigned long long)(op ? op->size : 0), (unsigned long long)(op ? op->dst : 0));
          break;
        }
      }
      /* Reads: every cell back into host memory between guards. */
      for (i = 0; i < p.count; ++i) {
        const fc_op* op = &p.ops[i];
        uint32_t host_offset = (uint32_t)(i % 16);
        unsigned char* dst = host + FC_GUARD + host_offset;
        memset(host, 0xEE, (size_t)op->size + 2 * FC_GUARD);
        st = gpuhal_buffer_read(buffer, op->dst, dst, op->size);
        if (st) {
          TU_FAIL_AT(__FILE__, __LINE__, "%s memory, read of %llu bytes at %llu: %s", kind_names[kind],
                     (unsigned long long)op->size, (unsigned long long)op->dst, gpuhal_status_message(st));
          gpuhal_status_free(st);
          break;
        }
        for (k = 0; k < op->size + 2 * FC_GUARD; ++k) {
          unsigned char want = host + k >= dst && host + k < dst + op->size ? op->data[host + k - dst] : 0xEE;
          if (host[k] != want) {
            TU_FAIL_AT(__FILE__, __LINE__,
                       "%s memory, gpuhal_buffer_read of %llu bytes at offset %llu: host byte %lld from the "
                       "destination is 0x%02x, expected 0x%02x",
                       kind_names[kind], (unsigned long long)op->size, (unsigned long long)op->dst,
                       (long long)(host + k - dst), host[k], want);
            break;
          }
        }
      }
    }
    st = NULL;
    gpuhal_buffer_release(buffer);
    free(init);
    free(expected);
    free(got);
    free(host);
    fc_plan_free(&p);
  }
  fc_close(&f);
}

/* ---- the rules ---- */

/* Checks a refused call: code, and a message naming the argument and the rule. */
#define FC_REFUSED(expr, code, arg, rule)                                                                           \
  do {                                                                                                              \
    gpuhal_status_t fc_s_ = (expr);                                                                                 \
    if (gpuhal_status_code(fc_s_) != (code)) {                                                                      \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> %s, expected %s", #expr, fc_s_ ? gpuhal_status_message(fc_s_) : "OK",   \
                 gpuhal_status_code_string(code));                                                                  \
    } else if (!strstr(gpuhal_status_message(fc_s_), (arg)) || !strstr(gpuhal_status_message(fc_s_), (rule))) {     \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> '%s' does not name '%s' and '%s'", #expr, gpuhal_status_message(fc_s_), \
                 (arg), (rule));                                                                                    \
    }                                                                                                               \
    gpuhal_status_free(fc_s_);                                                                                      \
  } while (0)

/* Every argument rule of fill, copy and update, in both recorders and for buffers and
 * slots: refused with INVALID_ARGUMENT or OUT_OF_RANGE naming the argument and the rule,
 * never rounded. Each refusal leaves the command buffer recording as it was: the valid
 * commands recorded between the refusals run, and only they. */
TU_TEST(rules) {
  fc_fixture f;
  size_t m;
  if (!fc_open(&f)) return;
  for (m = 0; m < FC_MODE_COUNT; ++m) {
    const fc_mode* mode = &fc_modes[m];
    int slots;
    for (slots = 0; slots <= 1; ++slots) {
      enum { SIZE = 1024 };
      gpuhal_buffer_t* buf = NULL;
      gpuhal_command_buffer_t* cb = NULL;
      unsigned char init[SIZE], expected[SIZE], got[SIZE], data[64];
      gpuhal_binding_table_t table;
      uint32_t p, off;
      int k;
#define FC_REF(offset) (slots ? gpuhal_ref_slot(0, (offset)) : gpuhal_ref_buffer(buf, (offset)))
      for (k = 0; k < SIZE; ++k) init[k] = fc_background(&f);
      for (k = 0; k < 64; ++k) data[k] = fc_payload(&f);
      memcpy(expected, init, SIZE);
      TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, SIZE, &buf));
      TU_REQUIRE_OK(gpuhal_buffer_write(buf, 0, init, SIZE));
      table.count = 1;
      table.buffers = &buf;
      table.offsets = NULL;
      TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, mode->flags, slots ? 1 : 0, &cb));
      TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));

      /* fill: pattern sizes */
      for (p = 0; p <= 33; ++p) {
        if (p == 1 || p == 2 || p == 4 || p == 8 || p == 16) continue;
        FC_REFUSED(gpuhal_cmd_fill(cb, FC_REF(0), 32, fc_p16, p), GPUHAL_STATUS_INVALID_ARGUMENT, "pattern_size",
                   "must be 1, 2, 4, 8 or 16");
      }
      FC_REFUSED(gpuhal_cmd_fill(cb, FC_REF(0), 16, NULL, 4), GPUHAL_STATUS_INVALID_ARGUMENT, "pattern",
                 "must not be NULL");
      /* fill: size 0, sizes and offsets that are not multiples of the pattern */
      for (p = 1; p <= 16; p *= 2) {
        const unsigned char* pattern = p == 1 ? fc_p1 : p == 2 ? fc_p2 : p == 4 ? fc_p4 : p == 8 ? fc_p8 : fc_p16;
        FC_REFUSED(gpuhal_cmd_fill(cb, FC_REF(0), 0, pattern, p), GPUHAL_STATUS_INVALID_ARGUMENT, "'size'",
                   "must be > 0");
        for (off = 1; off < 3 * p; ++off) {
          if (off % p == 0) continue;
          FC_REFUSED(gpuhal_cmd_fill(cb, FC_REF(0), off, pattern, p), GPUHAL_STATUS_INVALID_ARGUMENT, "'size'",
                     "must be a multiple of pattern_size");
          FC_REFUSED(gpuhal_cmd_fill(cb, FC_REF(off), p, pattern, p), GPUHAL_STATUS_INVALID_ARGUMENT, "'dst.offset'",
                     "must be a multiple of pattern_size");
        }
        /* a fill that ends past the buffer (slots: checked at execute, against the binding) */
        if (!slots)
          FC_REFUSED(gpuhal_cmd_fill(cb, FC_REF(SIZE - p), 2 * p, pattern, p), GPUHAL_STATUS_OUT_OF_RANGE, "'dst'",
                     "outside the buffer");
        /* valid: the pattern at offset 64 * (p's index) */
        {
          uint32_t at = 64u * (p == 1 ? 1 : p == 2 ? 2 : p == 4 ? 3 : p == 8 ? 4 : 5);
          TU_CHECK_OK(gpuhal_cmd_fill(cb, FC_REF(at), 3 * p, pattern, p));
          for (k = 0; k < (int)(3 * p); ++k) expected[at + k] = pattern[k % p];
        }
      }
      FC_REFUSED(gpuhal_cmd_fill(cb, FC_REF(UINT64_MAX - 7), 16, fc_p8, 8), GPUHAL_STATUS_OUT_OF_RANGE, "'dst'",
                 "overflows");
      FC_REFUSED(gpuhal_cmd_fill(cb, gpuhal_ref_slot(5, 0), 16, fc_p8, 8), GPUHAL_STATUS_OUT_OF_RANGE, "'dst'",
                 "binding slot 5");

      /* copy */
      FC_REFUSED(gpuhal_cmd_copy(cb, FC_REF(400), FC_REF(500), 0), GPUHAL_STATUS_INVALID_ARGUMENT, "'size'",
                 "must be > 0");
      for (off = 0; off < 20; ++off) { /* any overlap within the buffer, either way round */
        FC_REFUSED(gpuhal_cmd_copy(cb, FC_REF(400), FC_REF(400 + off), 20), GPUHAL_STATUS_INVALID_ARGUMENT, "'src'",
                   "overlap");
        FC_REFUSED(gpuhal_cmd_copy(cb, FC_REF(400 + off), FC_REF(400), 20), GPUHAL_STATUS_INVALID_ARGUMENT, "'src'",
                   "overlap");
      }
      if (!slots) {
        FC_REFUSED(gpuhal_cmd_copy(cb, FC_REF(SIZE - 3), FC_REF(0), 4), GPUHAL_STATUS_OUT_OF_RANGE, "'src'",
                   "outside the buffer");
        FC_REFUSED(gpuhal_cmd_copy(cb, FC_REF(0), FC_REF(SIZE - 3), 4), GPUHAL_STATUS_OUT_OF_RANGE, "'dst'",
                   "outside the buffer");
      }
      /* valid: adjacent ranges of one buffer (no overlap), odd offsets */
      TU_CHECK_OK(gpuhal_cmd_copy(cb, FC_REF(401), FC_REF(421), 20));
      memcpy(expected + 421, init + 401, 20);

      /* update */
      FC_REFUSED(gpuhal_cmd_update(cb, data, FC_REF(600), 0), GPUHAL_STATUS_INVALID_ARGUMENT, "'size'", "must be > 0");
      FC_REFUSED(gpuhal_cmd_update(cb, NULL, FC_REF(600), 8), GPUHAL_STATUS_INVALID_ARGUMENT, "'host_src'",
                 "must not be NULL");
      if (!slots)
        FC_REFUSED(gpuhal_cmd_update(cb, data, FC_REF(SIZE - 7), 8), GPUHAL_STATUS_OUT_OF_RANGE, "'dst'",
                   "outside the buffer");
      TU_CHECK_OK(gpuhal_cmd_update(cb, data + 1, FC_REF(603), 61));
      memcpy(expected + 603, data + 1, 61);

      TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
      TU_CHECK_OK(tu_execute_and_wait(f.driver, f.device, cb, slots ? &table : NULL));
      TU_CHECK_OK(gpuhal_buffer_read(buf, 0, got, SIZE));
      for (k = 0; k < SIZE; ++k) {
        if (got[k] != expected[k]) {
          TU_FAIL_AT(__FILE__, __LINE__, "%s%s: after the refusals, byte %d is 0x%02x, expected 0x%02x", mode->name,
                     slots ? " (slots)" : "", k, got[k], expected[k]);
          break;
        }
      }
      if (slots) { /* a binding too small for what the slot's commands use is refused at execute */
        uint64_t offset = SIZE - 600;
        gpuhal_semaphore_t* sem = NULL;
        uint64_t one = 1;
        table.offsets = &offset;
        if (fc_reusable(mode)) {
          TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &sem));
          FC_REFUSED(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(),
                                          gpuhal_semaphore_list_one(&sem, &one), cb, &table),
                     GPUHAL_STATUS_OUT_OF_RANGE, "bindings.buffers[0]", "slot 0 is used up to");
          gpuhal_semaphore_release(sem);
        }
      }
      gpuhal_command_buffer_release(cb);
      gpuhal_buffer_release(buf);
#undef FC_REF
    }
  }
  /* the direct entry points */
  {
    gpuhal_buffer_t* buf = NULL;
    unsigned char bytes[64];
    memset(bytes, 0x11, sizeof(bytes));
    TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &buf));
    FC_REFUSED(gpuhal_buffer_write(buf, 0, bytes, 0), GPUHAL_STATUS_INVALID_ARGUMENT, "'size'", "must be > 0");
    FC_REFUSED(gpuhal_buffer_read(buf, 0, bytes, 0), GPUHAL_STATUS_INVALID_ARGUMENT, "'size'", "must be > 0");
    FC_REFUSED(gpuhal_buffer_write(buf, 0, NULL, 4), GPUHAL_STATUS_INVALID_ARGUMENT, "'src'", "must not be NULL");
    FC_REFUSED(gpuhal_buffer_read(buf, 0, NULL, 4), GPUHAL_STATUS_INVALID_ARGUMENT, "'dst'", "must not be NULL");
    FC_REFUSED(gpuhal_buffer_write(buf, 64, bytes, 1), GPUHAL_STATUS_OUT_OF_RANGE, "'offset'", "past the end");
    FC_REFUSED(gpuhal_buffer_read(buf, 64, bytes, 1), GPUHAL_STATUS_OUT_OF_RANGE, "'offset'", "past the end");
    FC_REFUSED(gpuhal_buffer_write(buf, 61, bytes, 4), GPUHAL_STATUS_OUT_OF_RANGE, "'size'", "only 3 bytes follow");
    FC_REFUSED(gpuhal_buffer_read(buf, 61, bytes, 4), GPUHAL_STATUS_OUT_OF_RANGE, "'size'", "only 3 bytes follow");
    FC_REFUSED(gpuhal_buffer_read(buf, 1, bytes, UINT64_MAX), GPUHAL_STATUS_OUT_OF_RANGE, "'size'",
               "only 63 bytes follow");
    gpuhal_buffer_release(buf);
  }
  fc_close(&f);
}

TU_MAIN(TU_CASE(fill_matrix), TU_CASE(fill_through_slots), TU_CASE(copy_matrix), TU_CASE(copy_through_slots),
        TU_CASE(update_matrix), TU_CASE(other_memory_kinds), TU_CASE(large_grid_stride), TU_CASE(ordered_overwrites),
        TU_CASE(buffer_read_write_direct), TU_CASE(rules))
