/* module.c - twins, PTX parsing, modules, functions, cuLaunchKernel, cuLink*.
 * Part of softcuda.c. */

/* ---- twin registry (its own lock: registration runs in constructors) ---------------- */

typedef struct sc_twin {
  char* name;
  softcuda_twin_fn fn;        /* called once per block */
  softcuda_grid_twin_fn grid; /* or once per launch */
} sc_twin;

static pthread_mutex_t sc_twin_mu = PTHREAD_MUTEX_INITIALIZER;
static sc_twin* sc_twins;
static size_t sc_ntwins, sc_cap_twins;

static void sc_register(const char* entry_name, softcuda_twin_fn fn, softcuda_grid_twin_fn grid) {
  size_t i;
  if (!entry_name) return;
  pthread_mutex_lock(&sc_twin_mu);
  for (i = 0; i < sc_ntwins; ++i)
    if (strcmp(sc_twins[i].name, entry_name) == 0) break;
  if (i == sc_ntwins) {
    if (sc_ntwins == sc_cap_twins) {
      size_t cap = sc_cap_twins ? sc_cap_twins * 2 : 64;
      sc_twin* n = (sc_twin*)realloc(sc_twins, cap * sizeof(sc_twin));
      if (!n) abort();
      sc_twins = n;
      sc_cap_twins = cap;
    }
    sc_twins[sc_ntwins++].name = sc_strdup(entry_name);
  }
  sc_twins[i].fn = fn;
  sc_twins[i].grid = grid;
  pthread_mutex_unlock(&sc_twin_mu);
}

SOFTCUDA_API void softcuda_register_twin(const char* entry_name, softcuda_twin_fn fn) {
  sc_register(entry_name, fn, NULL);
}

SOFTCUDA_API void softcuda_register_grid_twin(const char* entry_name, softcuda_grid_twin_fn fn) {
  sc_register(entry_name, NULL, fn);
}

/* The twin of `name` (0 when none is registered). */
static int sc_find_twin(const char* name, sc_twin* out) {
  size_t i;
  int found = 0;
  memset(out, 0, sizeof(*out));
  pthread_mutex_lock(&sc_twin_mu);
  for (i = 0; i < sc_ntwins; ++i)
    if (strcmp(sc_twins[i].name, name) == 0) {
      *out = sc_twins[i];
      found = 1;
    }
  pthread_mutex_unlock(&sc_twin_mu);
  return found;
}

/* ---- PTX parsing -------------------------------------------------------------------- */

/* Identifiers and tokens may be long: C++, Julia and Numba mangle kernel names to hundreds
 * of characters, which PTX does not limit. */
#define SC_TOKEN_MAX 4096

typedef struct sc_ptx_entry {
  char* name;
  int nparams, cap_params;
  sc_param* params;
  size_t param_bytes;
  unsigned maxntid[3]; /* .maxntid (0: none) */
  unsigned reqntid[3]; /* .reqntid (0: none) */
  size_t static_shared;
  size_t const_bytes; /* the module's .const variables its body names */
  int line;           /* of the .entry, for messages */
} sc_ptx_entry;

/* A module-scope .shared variable: counted in the static shared memory of each entry whose
 * body names it (ptxas counts those an entry uses). */
typedef struct sc_ptx_shared {
  char* name;
  size_t size;
} sc_ptx_shared;

/* An address an initialiser names (`.u64 p = generic(x)+4;`, LLVM's byte masks
 * `0xFF00(generic(x))`): each module writes its own variable's address there. */
typedef struct sc_ptx_reloc {
  size_t offset; /* into the variable */
  unsigned size; /* bytes written: the element's, or 1 for a byte of a mask */
  int byte;      /* a mask's byte (0: the lowest), written alone; -1: the whole address */
  char* symbol;
  long long addend;
} sc_ptx_reloc;

/* A module-scope .global or .const variable (a __device__ or __constant__ global): its
 * bytes as the PTX initialises them (`init`, NULL: zeros; elements the initialiser leaves
 * out are zeros too, as ptxas makes them). */
typedef struct sc_ptx_global {
  char* name;
  size_t size, align;
  int is_const;
  unsigned char* init;
  int nrelocs, cap_relocs;
  sc_ptx_reloc* relocs;
} sc_ptx_global;

typedef struct sc_ptx {
  int version; /* major*10+minor: the highest .version (a linked image holds several) */
  int version_line;
  int target; /* sm_XY -> XY: the highest .target */
  int nentries;
  sc_ptx_entry* entries;
  int nshared, cap_shared;
  sc_ptx_shared* shared;
  int nglobals, cap_globals;
  sc_ptx_global* globals;
} sc_ptx;

static const char* sc_skip_ws(const char* p, const char* end) {
  for (;;) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p + 1 < end && p[0] == '/' && p[1] == '/') {
      while (p < end && *p != '\n') p++;
    } else if (p + 1 < end && p[0] == '/' && p[1] == '*') {
      p += 2;
      while (p + 1 < end && !(p[0] == '*' && p[1] == '/')) p++;
      p = p + 2 <= end ? p + 2 : end;
    } else {
      return p;
    }
  }
}

static int sc_is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         c == '.' || c == '%';
}

/* Reads one token: an identifier / directive, a number, or one punctuation character. */
static const char* sc_token(const char* p, const char* end, char* tok, size_t cap) {
  size_t n = 0;
  p = sc_skip_ws(p, end);
  if (p >= end) {
    tok[0] = 0;
    return p;
  }
  if (sc_is_ident(*p)) {
    while (p < end && sc_is_ident(*p)) {
      if (n + 1 < cap) tok[n++] = *p;
      p++;
    }
  } else {
    tok[n++] = *p++;
  }
  tok[n] = 0;
  return p;
}

/* The 1-based line of `p` in `text`. */
static int sc_line_of(const char* text, const char* p) {
  int line = 1;
  for (; text < p; ++text) line += *text == '\n';
  return line;
}

static size_t sc_type_size(const char* t) {
  if (!strcmp(t, ".pred")) return 1;
  if (t[0] != '.' || !t[1]) return 0;
  if (strchr("usbf", t[1]) == NULL) return 0;
  if (!strcmp(t + 2, "8")) return 1;
  if (!strcmp(t + 2, "16")) return 2;
  if (!strcmp(t + 2, "32")) return 4;
  if (!strcmp(t + 2, "64")) return 8;
  return 0;
}

/* Parses one parameter list after '(' up to ')'. Returns NULL on a syntax error. */
static const char* sc_parse_params(const char* p, const char* end, sc_ptx_entry* e, char* tok) {
  size_t off = 0;
  for (;;) {
    size_t align = 0, tsize = 0, count = 1, size;
    const char* q = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (!strcmp(tok, ")")) return q;
    if (strcmp(tok, ".param")) return NULL;
    p = q;
    for (;;) { /* qualifiers, type, name */
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (!tok[0]) return NULL;
      if (!strcmp(tok, ".align")) {
        p = sc_token(p, end, tok, SC_TOKEN_MAX);
        align = (size_t)strtoul(tok, NULL, 10);
        if (!align || (align & (align - 1))) return NULL;
      } else if (!strcmp(tok, ".ptr") || !strcmp(tok, ".global") || !strcmp(tok, ".const") || !strcmp(tok, ".shared") ||
                 !strcmp(tok, ".local")) {
        /* pointer annotation: .ptr .global .align N */
      } else if (tok[0] == '.' && sc_type_size(tok)) {
        tsize = sc_type_size(tok);
      } else if (tok[0] != '.' && sc_is_ident(tok[0])) {
        break; /* the name */
      } else {
        return NULL;
      }
    }
    if (!tsize) return NULL;
    {
      const char* q2 = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (!strcmp(tok, "[")) {
        p = sc_token(q2, end, tok, SC_TOKEN_MAX);
        count = (size_t)strtoul(tok, NULL, 10);
        p = sc_token(p, end, tok, SC_TOKEN_MAX);
        if (strcmp(tok, "]") || count == 0) return NULL;
        q2 = sc_token(p, end, tok, SC_TOKEN_MAX);
      }
      if (!align) align = tsize;
      size = tsize * count;
      off = (off + align - 1) / align * align;
      if (e->nparams == e->cap_params) {
        int ncap = e->cap_params ? e->cap_params * 2 : 16;
        sc_param* n = (sc_param*)realloc(e->params, (size_t)ncap * sizeof(sc_param));
        if (!n) abort();
        e->params = n;
        e->cap_params = ncap;
      }
      e->params[e->nparams].offset = off;
      e->params[e->nparams].size = size;
      e->nparams++;
      off += size;
      e->param_bytes = off;
      if (!strcmp(tok, ")")) return q2;
      if (strcmp(tok, ",")) return NULL;
      p = q2;
    }
  }
}

/* Reads "N[, N[, N]]" after .maxntid / .reqntid (missing ones are 1). NULL on a syntax error. */
static const char* sc_parse_dims(const char* p, const char* end, unsigned dims[3], char* tok) {
  int i;
  dims[0] = dims[1] = dims[2] = 1;
  for (i = 0; i < 3; ++i) {
    const char* q;
    p = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (tok[0] < '0' || tok[0] > '9') return NULL;
    dims[i] = (unsigned)strtoul(tok, NULL, 10);
    if (!dims[i]) return NULL;
    q = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (strcmp(tok, ",")) break;
    p = q;
  }
  return p;
}

/* Skips a string's rest after its opening '"'. */
static const char* sc_skip_string(const char* p, const char* end) {
  while (p < end && *p != '"' && *p != '\n') p++;
  return p < end ? p + 1 : p;
}

/* A state-space variable declaration after its space (".shared"): the bytes it takes, from
 * "[.align N] .type name[N][M]...". 0 for an extern or unsized one. */
static const char* sc_parse_var(const char* p, const char* end, char* tok, char* name, size_t name_cap,
                                size_t* out_size) {
  size_t elem = 0, count = 1;
  *out_size = 0;
  name[0] = 0;
  for (;;) {
    p = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (!tok[0] || !strcmp(tok, ";")) break;
    if (!strcmp(tok, ".align")) {
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
    } else if (tok[0] == '.' && sc_type_size(tok)) {
      elem = sc_type_size(tok);
    } else if (tok[0] != '.' && sc_is_ident(tok[0]) && !name[0]) {
      snprintf(name, name_cap, "%s", tok);
    } else if (!strcmp(tok, "[")) {
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (tok[0] >= '0' && tok[0] <= '9') {
        count *= (size_t)strtoul(tok, NULL, 10);
        p = sc_token(p, end, tok, SC_TOKEN_MAX); /* ] */
      } else {
        count = 0; /* [] : extern, sized at launch */
      }
    } else if (!strcmp(tok, "=")) {
      break; /* an initialiser (not for .shared; skipped to ';' by the caller) */
    }
  }
  *out_size = elem * count;
  return p;
}

/* An entry's performance directives (.maxntid, .reqntid, .minnctapersm, .maxnreg,
 * .pragma ...) up to its body's '{' (or ';' of a declaration). Returns the position after
 * that token and sets *out_body, or NULL on a syntax error. */
static const char* sc_parse_entry_directives(const char* p, const char* end, sc_ptx_entry* e, char* tok,
                                             int* out_body) {
  for (;;) {
    p = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (!tok[0]) return NULL;
    if (!strcmp(tok, "{") || !strcmp(tok, ";")) {
      *out_body = tok[0] == '{';
      return p;
    }
    if (!strcmp(tok, ".maxntid")) {
      if (!(p = sc_parse_dims(p, end, e->maxntid, tok))) return NULL;
    } else if (!strcmp(tok, ".reqntid")) {
      if (!(p = sc_parse_dims(p, end, e->reqntid, tok))) return NULL;
    } else if (!strcmp(tok, "\"")) {
      p = sc_skip_string(p, end);
    }
    /* .minnctapersm N, .maxnctapersm N, .maxnreg N, .pragma "...", .noreturn, ',' : nothing to model */
  }
}

/* An entry's body after its '{': the .shared it declares and the module-scope .shared
 * variables it names make its static shared memory (a .func it calls is not followed). */
static const char* sc_parse_entry_body(const char* p, const char* end, const sc_ptx* x, sc_ptx_entry* e, char* tok) {
  int depth = 1;
  unsigned char* named = x->nshared ? (unsigned char*)sc_xcalloc((size_t)x->nshared, 1) : NULL;
  unsigned char* named_const = x->nglobals ? (unsigned char*)sc_xcalloc((size_t)x->nglobals, 1) : NULL;
  int i;
  while (depth > 0) {
    p = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (!tok[0]) break;
    if (!strcmp(tok, "{")) {
      depth++;
    } else if (!strcmp(tok, "}")) {
      depth--;
    } else if (!strcmp(tok, "\"")) {
      p = sc_skip_string(p, end);
    } else if (!strcmp(tok, ".shared") && p < end && (*p == ' ' || *p == '\t')) {
      /* a declaration (".shared .align 4 .b8 tile[16384];"), not an instruction's ".shared" */
      char name[256];
      size_t size;
      p = sc_parse_var(p, end, tok, name, sizeof name, &size);
      e->static_shared += size;
    } else if (tok[0] != '.' && tok[0] != '%' && sc_is_ident(tok[0])) {
      for (i = 0; i < x->nshared; ++i)
        if (!named[i] && !strcmp(x->shared[i].name, tok)) {
          named[i] = 1;
          e->static_shared += x->shared[i].size;
        }
      for (i = 0; i < x->nglobals; ++i)
        if (x->globals[i].is_const && !named_const[i] && !strcmp(x->globals[i].name, tok)) {
          named_const[i] = 1;
          e->const_bytes += x->globals[i].size;
        }
    }
  }
  free(named);
  free(named_const);
  return p;
}

static void sc_ptx_global_free(sc_ptx_global* g) {
  int k;
  for (k = 0; k < g->nrelocs; ++k) free(g->relocs[k].symbol);
  free(g->relocs);
  free(g->init);
  free(g->name);
  memset(g, 0, sizeof *g);
}

static void sc_ptx_free(sc_ptx* x) {
  int i;
  for (i = 0; i < x->nentries; ++i) {
    free(x->entries[i].name);
    free(x->entries[i].params);
  }
  for (i = 0; i < x->nshared; ++i) free(x->shared[i].name);
  for (i = 0; i < x->nglobals; ++i) sc_ptx_global_free(&x->globals[i]);
  free(x->entries);
  free(x->shared);
  free(x->globals);
  memset(x, 0, sizeof *x);
}

/* ---- module-scope variables: .global and .const with their initialisers ---- */

static int sc_is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%';
}

/* An unsigned PTX integer literal at p (hex 0x, binary 0b, octal 0N, decimal; a U suffix):
 * its end, or NULL when there is none. */
static const char* sc_parse_uint(const char* p, const char* end, unsigned long long* out) {
  unsigned long long v = 0;
  int base = 10, digits = 0;
  if (p < end && *p == '0' && p + 1 < end && (p[1] == 'x' || p[1] == 'X')) {
    base = 16, p += 2;
  } else if (p < end && *p == '0' && p + 1 < end && (p[1] == 'b' || p[1] == 'B')) {
    base = 2, p += 2;
  } else if (p < end && *p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '7') {
    base = 8, p += 1;
  }
  for (; p < end; ++p, ++digits) {
    int d = *p >= '0' && *p <= '9'   ? *p - '0'
            : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
            : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                     : 99;
    if (d >= base) break;
    v = v * (unsigned)base + (unsigned)d;
  }
  if (!digits) return NULL;
  if (p < end && *p == 'U') p++;
  *out = v;
  return p;
}

/* One initialiser value, as it is stored in an element. */
typedef struct sc_init_value {
  int is_float; /* `f` holds it (a floating literal), else `u` */
  double f;
  unsigned long long u;
  char* symbol; /* an address: `symbol` (+ `u` as a signed addend), NULL: a literal */
  int byte;     /* a byte mask's byte of the address (0xFF00(...): 1), or -1 */
} sc_init_value;

/* `name`, `generic(name)`, either with "+ N" / "- N" after: an address. NULL on a syntax error. */
static const char* sc_parse_address(const char* p, const char* end, sc_init_value* v) {
  const char* q;
  int generic = 0;
  unsigned long long n;
  p = sc_skip_ws(p, end);
  if (end - p > 7 && !strncmp(p, "generic", 7) && !sc_is_ident(p[7])) {
    p = sc_skip_ws(p + 7, end);
    if (p >= end || *p != '(') return NULL;
    p = sc_skip_ws(p + 1, end);
    generic = 1;
  }
  if (p >= end || !sc_is_ident_start(*p)) return NULL;
  for (q = p; q < end && sc_is_ident(*q);) q++;
  v->symbol = (char*)sc_xcalloc((size_t)(q - p) + 1, 1);
  memcpy(v->symbol, p, (size_t)(q - p));
  p = sc_skip_ws(q, end);
  if (generic) {
    if (p >= end || *p != ')') return NULL;
    p = sc_skip_ws(p + 1, end);
  }
  if (p < end && (*p == '+' || *p == '-')) {
    int negative = *p == '-';
    p = sc_parse_uint(sc_skip_ws(p + 1, end), end, &n);
    if (!p) return NULL;
    v->u = negative ? (unsigned long long)-(long long)n : n;
  }
  return p;
}

/* One initialiser value at p: an integer or floating literal (0fXXXXXXXX, 0dXXXXXXXXXXXXXXXX,
 * decimal with a point or an exponent), maybe negated; an address; or a byte mask of one
 * (`0xFF0000(generic(x))`). NULL on a syntax error. */
static const char* sc_parse_init_value(const char* p, const char* end, sc_init_value* v) {
  int negative = 0;
  memset(v, 0, sizeof *v);
  v->byte = -1;
  p = sc_skip_ws(p, end);
  if (p < end && (*p == '-' || *p == '+')) {
    negative = *p == '-';
    p = sc_skip_ws(p + 1, end);
  }
  if (p >= end) return NULL;
  if (sc_is_ident_start(*p)) return negative ? NULL : sc_parse_address(p, end, v);
  if (end - p > 2 && *p == '0' && (p[1] == 'f' || p[1] == 'F' || p[1] == 'd' || p[1] == 'D')) {
    int single = p[1] == 'f' || p[1] == 'F';
    unsigned long long bits = 0;
    const char* q;
    for (q = p + 2; q < end && ((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f') || (*q >= 'A' && *q <= 'F')); ++q)
      bits = bits << 4 | (unsigned long long)(*q <= '9' ? *q - '0' : (*q | 0x20) - 'a' + 10);
    if (q - (p + 2) != (single ? 8 : 16)) return NULL;
    v->is_float = 1;
    if (single) {
      uint32_t b32 = (uint32_t)bits;
      float f;
      memcpy(&f, &b32, 4);
      v->f = f;
    } else {
      memcpy(&v->f, &bits, 8);
    }
    if (negative) v->f = -v->f;
    return q;
  }
  if (*p >= '0' && *p <= '9') {
    const char* q = p;
    while (q < end && *q >= '0' && *q <= '9') q++;
    if (q < end && (*q == '.' || *q == 'e' || *q == 'E') && !(p[0] == '0' && p + 1 < end && (p[1] | 0x20) == 'x')) {
      char buf[128];
      size_t n = 0;
      for (q = p;
           q < end && n + 1 < sizeof buf && (sc_is_ident(*q) || ((*q == '-' || *q == '+') && (q[-1] | 0x20) == 'e'));)
        buf[n++] = *q++;
      buf[n] = 0;
      v->is_float = 1;
      v->f = strtod(buf, NULL);
      if (negative) v->f = -v->f;
      return q;
    }
    q = sc_parse_uint(p, end, &v->u);
    if (!q) return NULL;
    if (negative) v->u = (unsigned long long)-(long long)v->u;
    p = sc_skip_ws(q, end);
    if (p < end && *p == '(') { /* a byte mask of an address: 0xFF << 8k */
      unsigned long long mask = v->u;
      int byte = 0;
      while (mask && !(mask & 0xff)) mask >>= 8, byte++;
      if (negative || mask != 0xff) return NULL;
      v->u = 0; /* the addend, from here on */
      p = sc_parse_address(p + 1, end, v);
      if (!p) return NULL;
      p = sc_skip_ws(p, end);
      if (p >= end || *p != ')') return NULL;
      v->byte = byte;
      return p + 1;
    }
    return q;
  }
  return NULL;
}

/* Writes element `index` (of elem bytes, `is_float`: .f32 / .f64) of g from v. */
static void sc_global_store(sc_ptx_global* g, size_t index, size_t elem, int is_float, const sc_init_value* v) {
  size_t at = index * elem;
  if (!g->init) g->init = (unsigned char*)sc_xcalloc(g->size ? g->size : 1, 1);
  if (v->symbol) {
    sc_ptx_reloc* r;
    if (g->nrelocs == g->cap_relocs) {
      g->cap_relocs = g->cap_relocs ? g->cap_relocs * 2 : 4;
      g->relocs = (sc_ptx_reloc*)realloc(g->relocs, (size_t)g->cap_relocs * sizeof(sc_ptx_reloc));
      if (!g->relocs) abort();
    }
    r = &g->relocs[g->nrelocs++];
    r->offset = at;
    r->size = v->byte >= 0 ? 1 : (unsigned)elem;
    r->byte = v->byte;
    r->symbol = sc_strdup(v->symbol);
    r->addend = (long long)v->u;
    return;
  }
  if (is_float && elem == 4) {
    float f = v->is_float ? (float)v->f : (float)(long long)v->u;
    memcpy(g->init + at, &f, 4);
  } else if (is_float && elem == 8) {
    double d = v->is_float ? v->f : (double)(long long)v->u;
    memcpy(g->init + at, &d, 8);
  } else {
    unsigned long long u = v->is_float ? (unsigned long long)(long long)v->f : v->u;
    size_t k;
    for (k = 0; k < elem; ++k) g->init[at + k] = (unsigned char)(u >> (8 * k)); /* little-endian */
  }
}

/* The initialiser after '=': a value, or a braced list (nested braces flatten, in order)
 * of at most `count` elements; count 0 (an unsized array, `x[] = {...}`) takes as many as
 * it has. *out_count: how many it gave. Returns the position after it, or NULL on a syntax
 * error or too many values. */
static const char* sc_parse_initialiser(const char* p, const char* end, sc_ptx_global* g, size_t elem, int is_float,
                                        size_t count, size_t* out_count) {
  size_t n = 0;
  int depth = 0;
  sc_init_value v;
  /* Values are stored as they come; an unsized array grows its bytes. */
  do {
    p = sc_skip_ws(p, end);
    if (p >= end) return NULL;
    if (*p == '{') {
      depth++, p++;
      continue;
    }
    if (*p == '}') {
      if (depth == 0) return NULL;
      depth--, p++;
      continue;
    }
    if (*p == ',' && depth > 0) {
      p++;
      continue;
    }
    if (count && n >= count) return NULL; /* ptxas: more initialisers than elements */
    p = sc_parse_init_value(p, end, &v);
    if (!p) {
      free(v.symbol);
      return NULL;
    }
    if (!count) { /* unsized: one more element */
      g->init = (unsigned char*)realloc(g->init, (n + 1) * elem);
      if (!g->init) abort();
      memset(g->init + n * elem, 0, elem);
      g->size = (n + 1) * elem;
    }
    sc_global_store(g, n++, elem, is_float, &v);
    free(v.symbol);
  } while (depth > 0);
  *out_count = n;
  return p;
}

/* A module-scope variable after its state space (.global or .const): "[.attribute(...)]
 * [.align N] [.vN] .type name[N]...[= initialiser];". Sets *out (name NULL for what is no
 * variable softcuda models: .texref and the like, a size it cannot tell). Returns the
 * position after its ';', or NULL on a syntax error. */
static const char* sc_parse_global(const char* p, const char* end, char* tok, int is_const, sc_ptx_global* out) {
  size_t align = 0, elem = 0, vec = 1, count = 1, given = 0;
  int is_float = 0, unsized = 0, initialised = 0;
  memset(out, 0, sizeof *out);
  out->is_const = is_const;
  for (;;) {
    const char* q = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (!tok[0]) return NULL;
    p = q;
    if (!strcmp(tok, ";")) break;
    if (!strcmp(tok, ".align")) {
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      align = (size_t)strtoul(tok, NULL, 10);
      if (!align || (align & (align - 1))) return NULL;
    } else if (!strcmp(tok, ".attribute") || (!strcmp(tok, "[") && !out->name)) {
      /* .attribute(.managed), or a .const bank ([N]) */
      const char* close = (const char*)memchr(p, tok[0] == '[' ? ']' : ')', (size_t)(end - p));
      if (!close) return NULL;
      p = close + 1;
    } else if (!strcmp(tok, ".v2") || !strcmp(tok, ".v4") || !strcmp(tok, ".v8")) {
      vec = (size_t)atoi(tok + 2);
    } else if (tok[0] == '.' && !out->name) {
      elem = sc_type_size(tok); /* 0: .texref, .samplerref, .surfref: not modelled */
      is_float = tok[1] == 'f';
    } else if (sc_is_ident_start(tok[0]) && !out->name) {
      out->name = sc_strdup(tok);
    } else if (!strcmp(tok, "[") && out->name) {
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (!strcmp(tok, "]")) {
        unsized = 1;
        continue;
      }
      if (tok[0] < '0' || tok[0] > '9' || !strtoull(tok, NULL, 0)) return NULL;
      count *= (size_t)strtoull(tok, NULL, 0);
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (strcmp(tok, "]")) return NULL;
    } else if (!strcmp(tok, "=") && out->name && elem) {
      /* a vector's lanes are elements of their own: {{1, 2}, {3, 4}} */
      out->size = unsized ? 0 : elem * vec * count;
      p = sc_parse_initialiser(p, end, out, elem, is_float, unsized ? 0 : vec * count, &given);
      if (!p) return NULL;
      initialised = 1;
      if (unsized) count = (given + vec - 1) / vec;
    } else if (!strcmp(tok, "=")) { /* a variable softcuda does not model: skip its value */
      const char* semi = (const char*)memchr(p, ';', (size_t)(end - p));
      if (!semi) return NULL;
      p = semi;
    } else {
      return NULL;
    }
  }
  if (!out->name || !elem || (unsized && !initialised)) {
    sc_ptx_global_free(out); /* nothing to model (a texture reference, an array sized elsewhere) */
    return p;
  }
  out->size = elem * vec * count;
  out->align = align ? align : elem * vec;
  if (out->init && given * elem < out->size) { /* an unsized vector array's last lanes */
    out->init = (unsigned char*)realloc(out->init, out->size);
    if (!out->init) abort();
    memset(out->init + given * elem, 0, out->size - given * elem);
  }
  return p;
}

/* Parses .version, .target, module-scope .shared variables and every .entry with its
 * parameters, launch bounds and static shared memory. text need not be NUL-terminated. 0 or
 * a CUresult. Several concatenated PTX files parse as one. */
static CUresult sc_ptx_parse(const char* text, size_t len, sc_ptx* out) {
  const char* p = text;
  const char* end = text + len;
  char* tok = (char*)sc_xcalloc(SC_TOKEN_MAX, 1);
  int cap = 0, saw_version = 0, depth = 0, parens = 0, is_extern = 0;
  memset(out, 0, sizeof *out);
  while (p < end) {
    const char* at;
    int was_extern = is_extern;
    p = sc_skip_ws(p, end);
    at = p;
    p = sc_token(p, end, tok, SC_TOKEN_MAX);
    if (!tok[0]) break;
    is_extern = !strcmp(tok, ".extern");
    if (!strcmp(tok, "{")) {
      depth++;
    } else if (!strcmp(tok, "}")) {
      depth--;
    } else if (!strcmp(tok, "(")) {
      parens++;
    } else if (!strcmp(tok, ")")) {
      parens--;
    } else if (!strcmp(tok, ".version")) {
      int maj = 0, min = 0;
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (sscanf(tok, "%d.%d", &maj, &min) != 2) goto bad;
      if (maj * 10 + min > out->version) {
        out->version = maj * 10 + min;
        out->version_line = sc_line_of(text, at);
      }
      saw_version = 1;
    } else if (!strcmp(tok, ".target")) {
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (strncmp(tok, "sm_", 3) != 0) goto bad;
      if (atoi(tok + 3) > out->target) out->target = atoi(tok + 3);
    } else if (!strcmp(tok, ".shared") && depth == 0 && parens == 0) {
      char name[SC_TOKEN_MAX];
      size_t size;
      p = sc_parse_var(p, end, tok, name, sizeof name, &size);
      if (size && name[0]) {
        if (out->nshared == out->cap_shared) {
          int ncap = out->cap_shared ? out->cap_shared * 2 : 8;
          sc_ptx_shared* n = (sc_ptx_shared*)realloc(out->shared, (size_t)ncap * sizeof(sc_ptx_shared));
          if (!n) abort();
          out->shared = n;
          out->cap_shared = ncap;
        }
        out->shared[out->nshared].name = sc_strdup(name);
        out->shared[out->nshared].size = size;
        out->nshared++;
      }
    } else if ((!strcmp(tok, ".global") || !strcmp(tok, ".const")) && depth == 0 && parens == 0) {
      sc_ptx_global g;
      int i, known = 0;
      p = sc_parse_global(p, end, tok, tok[1] == 'c', &g);
      if (!p) {
        sc_ptx_global_free(&g);
        goto bad;
      }
      for (i = 0; g.name && i < out->nglobals; ++i) known |= !strcmp(out->globals[i].name, g.name);
      if (!g.name || was_extern || known) { /* a declaration (defined elsewhere), or linked in twice */
        sc_ptx_global_free(&g);
        continue;
      }
      if (out->nglobals == out->cap_globals) {
        int ncap = out->cap_globals ? out->cap_globals * 2 : 8;
        sc_ptx_global* n = (sc_ptx_global*)realloc(out->globals, (size_t)ncap * sizeof(sc_ptx_global));
        if (!n) abort();
        out->globals = n;
        out->cap_globals = ncap;
      }
      out->globals[out->nglobals++] = g;
    } else if (!strcmp(tok, ".entry")) {
      sc_ptx_entry* e;
      int body = 0;
      if (out->nentries == cap) {
        int ncap = cap ? cap * 2 : 8;
        sc_ptx_entry* n = (sc_ptx_entry*)realloc(out->entries, (size_t)ncap * sizeof(sc_ptx_entry));
        if (!n) abort();
        out->entries = n;
        cap = ncap;
      }
      e = &out->entries[out->nentries];
      memset(e, 0, sizeof *e);
      e->line = sc_line_of(text, at);
      p = sc_token(p, end, tok, SC_TOKEN_MAX);
      if (!tok[0] || tok[0] == '.' || strlen(tok) >= SC_TOKEN_MAX - 1) goto bad;
      e->name = sc_strdup(tok);
      out->nentries++;
      {
        const char* q = sc_token(p, end, tok, SC_TOKEN_MAX);
        if (!strcmp(tok, "(")) {
          p = sc_parse_params(q, end, e, tok);
          if (!p) goto bad;
        }
      }
      if (!(p = sc_parse_entry_directives(p, end, e, tok, &body))) goto bad;
      if (body) p = sc_parse_entry_body(p, end, out, e, tok);
    } else if (tok[0] == '"') {
      /* a string (e.g. in .file): skip to its end */
      p = sc_skip_string(p, end);
    }
  }
  free(tok);
  if (!saw_version) goto bad_freed;
  return CUDA_SUCCESS;
bad:
  free(tok);
bad_freed:
  sc_ptx_free(out);
  return CUDA_ERROR_INVALID_PTX;
}

/* The newest PTX ISA a driver of this version JIT-compiles (CUDA 12.0: 8.0 ... 13.0: 9.0). */
static int sc_ptx_isa_max(int driver_version) {
  static const int table[][2] = {{13000, 90}, {12090, 88}, {12080, 87}, {12050, 85}, {12040, 84},
                                 {12030, 83}, {12020, 82}, {12010, 81}, {12000, 80}};
  size_t i;
  for (i = 0; i < sizeof table / sizeof table[0]; ++i)
    if (driver_version >= table[i][0]) return table[i][1];
  return 78;
}

/* What the JIT refuses in a parsed PTX image, as the driver's ptxas does (its words go to
 * the error log): a .version newer than this driver knows (CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
 * a .target newer than the device (CUDA_ERROR_INVALID_PTX; for a cubin, whose code is for
 * that target, CUDA_ERROR_NO_BINARY_FOR_GPU); an entry's parameters over 32,764 bytes, or
 * over 4,352 below PTX ISA 8.1; its static shared memory over 48 KiB (CUDA_ERROR_INVALID_PTX). */
static CUresult sc_ptx_check(const sc_ptx* x, int jit, char* log, size_t cap) {
  int isa = sc_ptx_isa_max(sc.driver_version), i;
  log[0] = 0;
  if (x->version > isa) {
    snprintf(log, cap,
             "ptxas application ptx input, line %d; fatal   : Unsupported .version %d.%d; current version is '%d.%d'",
             x->version_line, x->version / 10, x->version % 10, isa / 10, isa % 10);
    return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  if (x->target > SC_CC_MAJOR * 10 + SC_CC_MINOR) {
    if (!jit) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    snprintf(log, cap, "ptxas fatal   : SM version specified by .target is higher than default SM version assumed");
    return CUDA_ERROR_INVALID_PTX;
  }
  for (i = 0; i < x->nentries; ++i) {
    const sc_ptx_entry* e = &x->entries[i];
    size_t param_max = x->version >= 81 ? 32764 : 4352;
    if (e->param_bytes > param_max) {
      snprintf(log, cap,
               "ptxas application ptx input, line %d; error   : Entry function '%s' uses too much parameter space "
               "(0x%zx bytes, 0x%zx max).%s",
               e->line, e->name, e->param_bytes, param_max,
               e->param_bytes <= 32764 ? "\nptxas error   : Feature 'Kernel parameter size larger than 4352 bytes' "
                                         "requires PTX ISA .version 8.1 or later"
                                       : "");
      return CUDA_ERROR_INVALID_PTX;
    }
    if (e->static_shared > 49152) {
      snprintf(log, cap,
               "ptxas application ptx input, line %d; error   : Entry function '%s' uses too much shared data "
               "(0x%zx bytes, 0xc000 max)",
               e->line, e->name, e->static_shared);
      return CUDA_ERROR_INVALID_PTX;
    }
  }
  return CUDA_SUCCESS;
}

/* sc_ptx_parse, then sc_ptx_check: what a load's JIT does. The error log gets the reason. */
static CUresult sc_ptx_parse_checked(const char* text, size_t len, int jit, sc_ptx* out, char* log, size_t cap) {
  CUresult r = sc_ptx_parse(text, len, out);
  if (r != CUDA_SUCCESS) {
    snprintf(log, cap, "softcuda: PTX parse error");
    return r;
  }
  r = sc_ptx_check(out, jit, log, cap);
  if (r != CUDA_SUCCESS) sc_ptx_free(out);
  return r;
}

/* ---- images ------------------------------------------------------------------------- */

/* softcuda's "cubin": ELF magic, the marker line, then the linked PTX, NUL-terminated. */
static const char sc_cubin_magic[] = "\177ELF\nSOFTCUDA-CUBIN 1\n";
#define SC_CUBIN_MAGIC_LEN (sizeof sc_cubin_magic - 1)

/* softcuda's relocatable cubin (a stand-in for `nvcc -rdc=true -cubin`): a 64-byte ELF64
 * header with e_type ET_REL and e_machine EM_CUDA (no sections), the marker line, then PTX,
 * NUL-terminated. Only cuLinkAddData(CU_JIT_INPUT_CUBIN) takes it, as only the linker takes
 * a real one; loaded as a module it is CUDA_ERROR_INVALID_IMAGE. */
static const char sc_reloc_marker[] = "SOFTCUDA-RELOCATABLE 1\n";
#define SC_RELOC_HEADER 64u
#define SC_RELOC_MARKER_LEN (sizeof sc_reloc_marker - 1)

static const char* sc_reloc_ptx(const void* data, size_t size) {
  const unsigned char* b = (const unsigned char*)data;
  if (size < SC_RELOC_HEADER + SC_RELOC_MARKER_LEN || memcmp(b, "\177ELF\002\001", 6) != 0 || b[16] != 1 ||
      b[17] != 0 || b[18] != 190 || b[19] != 0 ||
      memcmp(b + SC_RELOC_HEADER, sc_reloc_marker, SC_RELOC_MARKER_LEN) != 0)
    return NULL;
  return (const char*)b + SC_RELOC_HEADER + SC_RELOC_MARKER_LEN;
}

static void sc_jit_delay(void) {
  if (sc.jit_delay_ms > 0) {
    struct timespec ts;
    ts.tv_sec = sc.jit_delay_ms / 1000;
    ts.tv_nsec = (long)(sc.jit_delay_ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}

static int sc_looks_like_ptx(const char* text) {
  const char* p = sc_skip_ws(text, text + strlen(text));
  return *p == '.' && strstr(text, ".version") != NULL;
}

/* Finds the PTX in an image: PTX text itself (jit = 1) or a softcuda cubin. */
static CUresult sc_image_ptx(const void* image, const char** ptx, int* jit) {
  const unsigned char* b = (const unsigned char*)image;
  if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') {
    if (memcmp(image, sc_cubin_magic, SC_CUBIN_MAGIC_LEN) != 0) return CUDA_ERROR_INVALID_IMAGE; /* a real cubin */
    *ptx = (const char*)image + SC_CUBIN_MAGIC_LEN;
    *jit = 0;
    return CUDA_SUCCESS;
  }
  /* fatbins (0xBA55ED50) and anything else are not something softcuda can run; PTX is
   * NUL-terminated text that starts with a directive or a comment */
  if (!strchr(" \t\r\n./", (char)b[0]) || b[0] == 0 || !sc_looks_like_ptx((const char*)image))
    return CUDA_ERROR_INVALID_IMAGE;
  *ptx = (const char*)image;
  *jit = 1;
  return CUDA_SUCCESS;
}

/* JIT options: fill the log buffers, report sizes and wall time. */
static CUresult sc_jit_options_check(unsigned n, const CUjit_option* opts, void** vals) {
  unsigned i;
  if (n && (!opts || !vals)) return CUDA_ERROR_INVALID_VALUE;
  for (i = 0; i < n; ++i)
    if ((int)opts[i] < 0 || (int)opts[i] >= (int)CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static void sc_jit_options_out(unsigned n, const CUjit_option* opts, void** vals, const char* info, const char* error,
                               float ms) {
  unsigned i, j;
  for (i = 0; i < n; ++i) {
    const char* msg = NULL;
    CUjit_option size_opt;
    if (opts[i] == CU_JIT_WALL_TIME) {
      memcpy(&vals[i], &ms, sizeof ms);
      continue;
    }
    if (opts[i] == CU_JIT_INFO_LOG_BUFFER)
      msg = info, size_opt = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
    else if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
      msg = error, size_opt = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    else
      continue;
    for (j = 0; j < n; ++j)
      if (opts[j] == size_opt) {
        size_t cap = (size_t)(uintptr_t)vals[j];
        char* buf = (char*)vals[i];
        size_t len = strlen(msg);
        if (buf && cap) {
          if (len >= cap) len = cap - 1;
          memcpy(buf, msg, len);
          buf[len] = 0;
          vals[j] = (void*)(uintptr_t)(len + 1);
        }
      }
  }
}

/* ---- modules and functions ---------------------------------------------------------- */

static void sc_func_free(sc_obj* o) {
  sc_func* f = (sc_func*)o;
  sc_unref(&f->mod->h);
  free(f->name);
  free(f->params);
  free(f);
}

static void sc_module_unload_globals_locked(sc_module* m) {
  int i;
  for (i = 0; i < m->nglobals; ++i)
    if (m->globals[i].rec) {
      sc_alloc_release_locked(m->globals[i].rec); /* the record only: the memory is the module's */
      m->globals[i].rec = NULL;
    }
  if (m->data_dev >= 0) sc_dev_unreserve(m->data_dev, m->data_size);
  m->data_dev = -1;
}

static void sc_module_free(sc_obj* o) {
  sc_module* m = (sc_module*)o;
  int i;
  sc_module_unload_globals_locked(m);
  for (i = 0; i < m->nglobals; ++i) free(m->globals[i].name);
  free(m->globals);
  free(m->data);
  free(m->funcs);
  free(m);
}

/* The address of variable `name` of m, or 0. */
static uintptr_t sc_module_global_address(const sc_module* m, const char* name) {
  int i;
  for (i = 0; i < m->nglobals; ++i)
    if (!strcmp(m->globals[i].name, name)) return (uintptr_t)(m->data + m->globals[i].offset);
  return 0;
}

/* Lays out m's variables in one block (each at its alignment, as a cubin's data sections
 * hold them), initialised as the PTX says (addresses an initialiser names are this
 * module's: 0 for a name that is no variable, a function's), each a record of the
 * context's device memory. Counted in the device's memory: CUDA_ERROR_OUT_OF_MEMORY when
 * it does not fit. */
static CUresult sc_module_globals_build_locked(sc_module* m, sc_ctx* c, const sc_ptx* x) {
  size_t size = 0;
  int i, k;
  CUresult r;
  m->data_dev = -1;
  if (!x->nglobals) return CUDA_SUCCESS;
  m->globals = (sc_mglobal*)sc_xcalloc((size_t)x->nglobals, sizeof(sc_mglobal));
  m->nglobals = x->nglobals;
  for (i = 0; i < x->nglobals; ++i) {
    const sc_ptx_global* g = &x->globals[i];
    size = (size + g->align - 1) / g->align * g->align;
    m->globals[i].name = sc_strdup(g->name);
    m->globals[i].offset = size;
    m->globals[i].size = g->size;
    size += g->size;
  }
  if ((r = sc_dev_reserve(c->dev, size)) != CUDA_SUCCESS) return r;
  m->data_dev = c->dev;
  m->data_size = size;
  if (posix_memalign((void**)&m->data, 256, size ? size : 1) != 0) abort();
  memset(m->data, 0, size);
  for (i = 0; i < x->nglobals; ++i) {
    const sc_ptx_global* g = &x->globals[i];
    unsigned char* at = m->data + m->globals[i].offset;
    if (g->init) memcpy(at, g->init, g->size);
  }
  for (i = 0; i < x->nglobals; ++i) { /* addresses, once every variable has one */
    const sc_ptx_global* g = &x->globals[i];
    for (k = 0; k < g->nrelocs; ++k) {
      const sc_ptx_reloc* rl = &g->relocs[k];
      uintptr_t base = sc_module_global_address(m, rl->symbol);
      unsigned long long v = base ? (unsigned long long)base + (unsigned long long)rl->addend : 0;
      unsigned char* at = m->data + m->globals[i].offset + rl->offset;
      unsigned b;
      if (rl->byte >= 0)
        *at = (unsigned char)(v >> (8 * rl->byte));
      else
        for (b = 0; b < rl->size; ++b) at[b] = (unsigned char)(v >> (8 * b));
    }
  }
  for (i = 0; i < x->nglobals; ++i) {
    sc_alloc* a = (sc_alloc*)sc_xcalloc(1, sizeof(sc_alloc));
    a->base = (uintptr_t)(m->data + m->globals[i].offset);
    a->size = m->globals[i].size;
    a->type = SC_MEM_DEVICE;
    a->origin = SC_ORIGIN_MODULE;
    a->ctx = c;
    a->dev = c->dev;
    sc_alloc_insert(a);
    m->globals[i].rec = a;
  }
  return CUDA_SUCCESS;
}

static CUresult sc_module_build_locked(sc_ctx* c, const sc_ptx* x, sc_module** out) {
  sc_module* m = (sc_module*)sc_xcalloc(1, sizeof(sc_module));
  CUresult r;
  int i;
  sc_obj_init(&m->h, SC_K_MODULE, c, sc_module_free);
  *out = NULL;
  if ((r = sc_module_globals_build_locked(m, c, x)) != CUDA_SUCCESS) {
    sc_module_free(&m->h);
    return r;
  }
  m->ctx = c;
  m->ptx_version = x->version;
  m->nfuncs = x->nentries;
  m->funcs = (sc_func**)sc_xcalloc((size_t)x->nentries, sizeof(sc_func*));
  sc_obj_register(&m->h);
  for (i = 0; i < x->nentries; ++i) {
    const sc_ptx_entry* e = &x->entries[i];
    sc_func* f = (sc_func*)sc_xcalloc(1, sizeof(sc_func));
    sc_obj_init(&f->h, SC_K_FUNC, c, sc_func_free);
    f->mod = m;
    sc_ref(&m->h);
    f->name = sc_strdup(e->name);
    f->nparams = e->nparams;
    f->params = (sc_param*)sc_xcalloc((size_t)e->nparams, sizeof(sc_param));
    if (e->nparams) memcpy(f->params, e->params, (size_t)e->nparams * sizeof(sc_param)); /* none: params NULL */
    f->param_bytes = e->param_bytes;
    {
      sc_twin t;
      sc_find_twin(e->name, &t);
      f->twin = t.fn;
      f->grid_twin = t.grid;
    }
    /* launch bounds: at most (.maxntid) or exactly (.reqntid) this many threads. Driver 580
     * on an H200 reports .maxntid's product as MAX_THREADS_PER_BLOCK but the device's 1024
     * for a .reqntid kernel (conf_module llvm_launch_bounds_and_shared_memory). */
    f->max_threads = 1024;
    if (e->maxntid[0]) f->max_threads = (int)(e->maxntid[0] * e->maxntid[1] * e->maxntid[2]);
    if (f->max_threads > 1024) f->max_threads = 1024;
    memcpy(f->reqntid, e->reqntid, sizeof f->reqntid);
    /* 48 KiB of shared memory per block without opting in, static and dynamic together */
    f->static_shared = (int)e->static_shared;
    f->max_dyn_shared = 49152 - f->static_shared;
    f->const_bytes = (int)e->const_bytes;
    f->carveout = -1;
    sc_obj_register(&f->h);
    m->funcs[i] = f;
  }
  *out = m;
  return CUDA_SUCCESS;
}

static CUresult sc_module_load(CUmodule* module, const void* image, unsigned n, CUjit_option* opts, void** vals) {
  const char* ptx;
  char log[1024];
  int jit;
  sc_ptx x;
  sc_ctx* c;
  CUresult r;
  int64_t t0 = sc_now_ns();
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  if ((r = sc_jit_options_check(n, opts, vals)) != CUDA_SUCCESS) return r;
  SC_LOCK();
  r = sc_current_ctx(&c);
  SC_UNLOCK();
  if (r != CUDA_SUCCESS) return r;
  if ((r = sc_image_ptx(image, &ptx, &jit)) != CUDA_SUCCESS) return r;
  if (jit) sc_jit_delay(); /* outside the lock: loads in other threads go on */
  r = sc_ptx_parse_checked(ptx, strlen(ptx), jit, &x, log, sizeof log);
  sc_jit_options_out(n, opts, vals, r == CUDA_SUCCESS ? "softcuda: PTX loaded" : "", log,
                     (float)((double)(sc_now_ns() - t0) / 1e6));
  if (r != CUDA_SUCCESS) return r;
  SC_LOCK();
  r = sc_lookup_ctx((CUcontext)(uintptr_t)SC_HANDLE(c), &c); /* still alive after the delay? */
  /* Loading code waits until the context's streams are idle, as on an H200 (driver 580): a
   * stream parked on an unreached cuStreamWaitValue holds it up (tools/probe/park_probe.c). */
  if (r == CUDA_SUCCESS) sc_ctx_sync_locked(c);
  if (r == CUDA_SUCCESS) {
    sc_module* m;
    r = sc_module_build_locked(c, &x, &m);
    if (r == CUDA_SUCCESS) *module = (CUmodule)(uintptr_t)SC_HANDLE(m);
  }
  SC_UNLOCK();
  sc_ptx_free(&x);
  return r;
}

CUresult CUDAAPI sc_cuModuleLoadData(CUmodule* module, const void* image) {
  SC_ENTER(cuModuleLoadData);
  SC_UNSAFE_CALL();
  return sc_module_load(module, image, 0, NULL, NULL);
}

CUresult CUDAAPI sc_cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                       CUjit_option* options, void** optionValues) {
  SC_ENTER(cuModuleLoadDataEx);
  SC_UNSAFE_CALL();
  return sc_module_load(module, image, numOptions, options, optionValues);
}

CUresult CUDAAPI sc_cuModuleUnload(CUmodule hmod) {
  sc_obj* o;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuModuleUnload);
  SC_LOCK();
  o = sc_obj_lookup((uint64_t)(uintptr_t)hmod, SC_K_MODULE);
  if (!o) {
    r = sc_bad_handle("module", (const void*)hmod);
  } else if (((sc_module*)o)->of_library) {
    r = sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_HANDLE,
                     "cuModuleUnload of module %p, which belongs to a library (cuLibraryUnload unloads it)",
                     (const void*)hmod);
  } else {
    sc_module* m = (sc_module*)o;
    int i;
    for (i = 0; i < m->nfuncs; ++i) sc_obj_unregister(&m->funcs[i]->h); /* queued launches keep theirs */
    sc_module_unload_globals_locked(m);
    sc_obj_unregister(o);
  }
  SC_UNLOCK();
  return r;
}

/* ---- libraries (context-independent loading, CUDA 12.0) -------------------------------- */
/* A library keeps its image, parsed once at cuLibraryLoadData (which pays the JIT delay:
 * once per process, however many contexts use it). cuLibraryGetModule makes the module of
 * the current context the first time (loading code waits for the context to be idle, as
 * cuModuleLoadData does) and returns the same one after. cuLibraryUnload unloads them all. */
typedef struct sc_library {
  sc_obj h;
  sc_ptx x;
  sc_module** mods; /* one per context that asked (referenced); a dead context's stays unregistered */
  int nmods, cap_mods;
} sc_library;

static void sc_library_free(sc_obj* o) {
  sc_library* l = (sc_library*)o;
  int i;
  for (i = 0; i < l->nmods; ++i) sc_unref(&l->mods[i]->h);
  free(l->mods);
  sc_ptx_free(&l->x);
  free(l);
}

CUresult CUDAAPI sc_cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                      void** jitOptionsValues, unsigned int numJitOptions,
                                      CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                      unsigned int numLibraryOptions) {
  const char* ptx;
  char log[1024];
  int jit;
  sc_library* l;
  CUresult r;
  int64_t t0 = sc_now_ns();
  SC_ENTER(cuLibraryLoadData);
  SC_UNSAFE_CALL();
  unsigned i;
  if (!library || !code || (numLibraryOptions && (!libraryOptions || !libraryOptionValues)))
    return CUDA_ERROR_INVALID_VALUE;
  for (i = 0; i < numLibraryOptions; ++i) /* the image is parsed now: whether it is kept changes nothing */
    if (libraryOptions[i] != CU_LIBRARY_BINARY_IS_PRESERVED) return CUDA_ERROR_INVALID_VALUE;
  if ((r = sc_jit_options_check(numJitOptions, jitOptions, jitOptionsValues)) != CUDA_SUCCESS) return r;
  if ((r = sc_image_ptx(code, &ptx, &jit)) != CUDA_SUCCESS) return r;
  if (jit) sc_jit_delay();
  l = (sc_library*)sc_xcalloc(1, sizeof(sc_library));
  r = sc_ptx_parse_checked(ptx, strlen(ptx), jit, &l->x, log, sizeof log);
  sc_jit_options_out(numJitOptions, jitOptions, jitOptionsValues, r == CUDA_SUCCESS ? "softcuda: PTX loaded" : "", log,
                     (float)((double)(sc_now_ns() - t0) / 1e6));
  if (r != CUDA_SUCCESS) {
    free(l);
    return r;
  }
  SC_LOCK();
  sc_obj_init(&l->h, SC_K_LIBRARY, NULL, sc_library_free);
  sc_obj_register(&l->h);
  *library = (CUlibrary)(uintptr_t)SC_HANDLE(l);
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

static CUresult sc_get_library(CUlibrary h, sc_library** out) {
  sc_obj* o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_LIBRARY);
  if (!o) return sc_bad_handle("library", (const void*)h);
  *out = (sc_library*)o;
  return CUDA_SUCCESS;
}

/* The library's module of the current context, made (loaded) the first time. Under sc.mu. */
static CUresult sc_library_module_locked(CUlibrary library, sc_module** out) {
  sc_library* l = NULL;
  sc_ctx* c = NULL;
  sc_module* m;
  CUresult r;
  int i;
  r = sc_get_library(library, &l);
  if (r == CUDA_SUCCESS) r = sc_current_ctx(&c);
  if (r != CUDA_SUCCESS) return r;
  for (i = 0; i < l->nmods; ++i)
    if (l->mods[i]->ctx == c && l->mods[i]->h.id) {
      *out = l->mods[i];
      return CUDA_SUCCESS;
    }
  sc_ctx_sync_locked(c); /* loading code into a context waits for it to be idle */
  if ((r = sc_module_build_locked(c, &l->x, &m)) != CUDA_SUCCESS) return r;
  m->of_library = 1;
  sc_ref(&m->h); /* the library's reference: the module outlives its context's teardown until the unload */
  if (l->nmods == l->cap_mods) {
    l->cap_mods = l->cap_mods ? l->cap_mods * 2 : 4;
    l->mods = (sc_module**)realloc(l->mods, (size_t)l->cap_mods * sizeof(sc_module*));
    if (!l->mods) abort();
  }
  l->mods[l->nmods++] = m;
  *out = m;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  sc_module* m = NULL;
  CUresult r;
  SC_ENTER(cuLibraryGetModule);
  if (!pMod) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_library_module_locked(library, &m);
  if (r == CUDA_SUCCESS) *pMod = (CUmodule)(uintptr_t)SC_HANDLE(m);
  SC_UNLOCK();
  return r;
}

/* cuModuleGetGlobal's and cuLibraryGetGlobal's answer from a module. Under sc.mu. */
static CUresult sc_module_get_global_locked(const sc_module* m, const char* name, CUdeviceptr* dptr, size_t* bytes) {
  int i;
  for (i = 0; i < m->nglobals; ++i)
    if (!strcmp(m->globals[i].name, name)) {
      if (dptr) *dptr = (CUdeviceptr)(uintptr_t)(m->data + m->globals[i].offset);
      if (bytes) *bytes = m->globals[i].size;
      return CUDA_SUCCESS;
    }
  /* A kernel's name: driver 580 on an H200 answers CUDA_ERROR_INVALID_VALUE, not NOT_FOUND
   * (conf_module module_globals, run there). */
  for (i = 0; i < m->nfuncs; ++i)
    if (!strcmp(m->funcs[i]->name, name)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_FOUND;
}

/* A global of the library for the current context (its module there is made, loaded,
 * the first time, as cuLibraryGetModule does): every context has its own copy. */
CUresult CUDAAPI sc_cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  sc_module* m = NULL;
  CUresult r;
  SC_ENTER(cuLibraryGetGlobal);
  if ((!dptr && !bytes) || !name) return CUDA_ERROR_INVALID_VALUE; /* "one of them (not both) can be NULL" */
  SC_LOCK();
  r = sc_library_module_locked(library, &m);
  if (r == CUDA_SUCCESS) r = sc_module_get_global_locked(m, name, dptr, bytes);
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuLibraryUnload(CUlibrary library) {
  sc_library* l = NULL;
  CUresult r;
  int i, k;
  SC_ENTER(cuLibraryUnload);
  SC_LOCK();
  r = sc_get_library(library, &l);
  if (r == CUDA_SUCCESS) {
    for (i = 0; i < l->nmods; ++i) {
      sc_module* m = l->mods[i];
      if (!m->h.id) continue;                                             /* its context is gone, and took it */
      for (k = 0; k < m->nfuncs; ++k) sc_obj_unregister(&m->funcs[k]->h); /* queued launches keep theirs */
      sc_module_unload_globals_locked(m);
      sc_obj_unregister(&m->h);
    }
    sc_obj_unregister(&l->h);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  sc_obj* o;
  CUresult r = CUDA_ERROR_NOT_FOUND;
  SC_ENTER(cuModuleGetFunction);
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  o = sc_obj_lookup((uint64_t)(uintptr_t)hmod, SC_K_MODULE);
  if (!o) {
    r = sc_bad_handle("module", (const void*)hmod);
  } else {
    sc_module* m = (sc_module*)o;
    int i;
    for (i = 0; i < m->nfuncs; ++i)
      if (strcmp(m->funcs[i]->name, name) == 0) {
        *hfunc = (CUfunction)(uintptr_t)SC_HANDLE(m->funcs[i]);
        r = CUDA_SUCCESS;
        break;
      }
  }
  SC_UNLOCK();
  return r;
}

/* Strict: the module's context must be the current one (CUDA lists CUDA_ERROR_INVALID_CONTEXT
 * among its results; the address is of that context's copy), a context violation else. */
CUresult CUDAAPI sc_cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  sc_obj* o;
  sc_ctx* c = NULL;
  CUresult r;
  SC_ENTER(cuModuleGetGlobal);
  if ((!dptr && !bytes) || !name) return CUDA_ERROR_INVALID_VALUE; /* "one of them (not both) can be NULL" */
  SC_LOCK();
  o = sc_obj_lookup((uint64_t)(uintptr_t)hmod, SC_K_MODULE);
  r = o ? sc_current_ctx(&c) : sc_bad_handle("module", (const void*)hmod);
  if (r == CUDA_SUCCESS && ((sc_module*)o)->ctx != c)
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                     "cuModuleGetGlobal(%s) on module %p of another context than the current one", name,
                     (const void*)hmod);
  if (r == CUDA_SUCCESS) r = sc_module_get_global_locked((sc_module*)o, name, dptr, bytes);
  SC_UNLOCK();
  return r;
}

static CUresult sc_get_func(CUfunction h, sc_func** out) {
  sc_obj* o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_FUNC);
  *out = (sc_func*)o; /* NULL on failure: written on every path */
  if (!o) return sc_bad_handle("function", (const void*)h);
  *out = (sc_func*)o;
  return CUDA_SUCCESS;
}

/* Lazy loading (CUDA's default) uploads a kernel at its first use; cuFuncLoad does it now. */
CUresult CUDAAPI sc_cuFuncLoad(CUfunction function) {
  sc_func* f;
  CUresult r;
  SC_ENTER(cuFuncLoad);
  SC_LOCK();
  r = sc_get_func(function, &f);
  if (r == CUDA_SUCCESS) f->loaded = 1;
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  sc_func* f;
  CUresult r;
  SC_ENTER(cuFuncGetAttribute);
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_func(hfunc, &f);
  if (r == CUDA_SUCCESS) {
    switch (attrib) {
      case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = f->max_threads; break;
      case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = f->static_shared; break;
      case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = f->const_bytes; break;
      case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 16; break;
      case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = f->mod->ptx_version; break;
      case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = SC_CC_MAJOR * 10 + SC_CC_MINOR; break;
      case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dyn_shared; break;
      case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
      case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
      case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
      case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = f->nonportable_cluster; break;
      default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  sc_func* f;
  CUresult r;
  SC_ENTER(cuFuncSetAttribute);
  SC_LOCK();
  r = sc_get_func(hfunc, &f);
  if (r == CUDA_SUCCESS) {
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value >= 0 &&
        value <= SC_MAX_SHARED_OPTIN - f->static_shared) /* static and dynamic together within the opt-in limit */
      f->max_dyn_shared = value;
    else if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT && value >= -1 && value <= 100)
      f->carveout = value;
    else if (attrib == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED && (value == 0 || value == 1))
      f->nonportable_cluster = value;
    else
      r = CUDA_ERROR_INVALID_VALUE;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  sc_func* f;
  CUresult r;
  SC_ENTER(cuFuncGetParamInfo);
  SC_LOCK();
  r = sc_get_func(func, &f);
  if (r == CUDA_SUCCESS && paramIndex >= (size_t)f->nparams) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    if (paramOffset) *paramOffset = f->params[paramIndex].offset;
    if (paramSize) *paramSize = f->params[paramIndex].size;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuFuncGetName(const char** name, CUfunction hfunc) {
  sc_func* f;
  CUresult r;
  SC_ENTER(cuFuncGetName);
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_func(hfunc, &f);
  if (r == CUDA_SUCCESS) *name = f->name; /* lives as long as the function */
  SC_UNLOCK();
  return r;
}

/* ---- launch ------------------------------------------------------------------------- */

/* A launch as an op: a = sc_func (referenced), b = argument copy, c = pointer array. */
typedef struct sc_launch {
  softcuda_dim3 grid, block;
  unsigned shared;
  softcuda_dim3 cluster; /* 1,1,1: no cluster */
  int cooperative;
  int programmatic; /* programmatic stream serialization: ordering kept (a GPU may overlap) */
  int priority;
  void* align_params; /* unused: makes sizeof a multiple of void*, so the params array after it is aligned */
} sc_launch;

/* The attributes of a launch (cuLaunchKernelEx) or of a kernel node. */
typedef struct sc_launch_attrs {
  softcuda_dim3 cluster;
  int cooperative, programmatic, priority;
} sc_launch_attrs;

/* A kernel's 8-byte parameters that point into another device's pool memory need that pool
 * opened to the launching device (on a GPU the access is an illegal address). */
static CUresult sc_kernel_pool_check(const sc_func* f, void** params, int dev) {
  CUresult r = CUDA_SUCCESS;
  int i;
  SC_LOCK();
  for (i = 0; i < f->nparams && r == CUDA_SUCCESS; ++i) {
    uint64_t v;
    if (f->params[i].size != 8) continue;
    memcpy(&v, params[i], 8);
    if (!sc_pool_reaches(sc_alloc_find((uintptr_t)v), dev))
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_ILLEGAL_ADDRESS,
                       "kernel '%s' on device %d: parameter %d (0x%llx) is pool memory of another device that its "
                       "pool was not opened to (cuMemPoolSetAccess)",
                       f->name, dev, i, (unsigned long long)v);
  }
  SC_UNLOCK();
  return r;
}

/* The function whose twin runs on this thread (softcuda_global finds its module's variables). */
static __thread const sc_func* sc_tls_twin_func;

SOFTCUDA_API void* softcuda_global(const char* name, size_t* out_bytes) {
  const sc_func* f = sc_tls_twin_func;
  int i;
  if (out_bytes) *out_bytes = 0;
  if (!f || !name) return NULL;
  /* The module's variables never change after it is made, and the launch holds it. */
  for (i = 0; i < f->mod->nglobals; ++i)
    if (!strcmp(f->mod->globals[i].name, name)) {
      if (out_bytes) *out_bytes = f->mod->globals[i].size;
      return f->mod->data + f->mod->globals[i].offset;
    }
  return NULL;
}

static CUresult sc_run_kernel_twin(sc_op* op);

static CUresult sc_run_kernel(sc_op* op) {
  const sc_func* outer = sc_tls_twin_func; /* none: a twin does not launch */
  CUresult r;
  sc_tls_twin_func = (const sc_func*)op->a;
  r = sc_run_kernel_twin(op);
  sc_tls_twin_func = outer;
  return r;
}

static CUresult sc_run_kernel_twin(sc_op* op) {
  sc_func* f = (sc_func*)op->a;
  sc_launch* L = (sc_launch*)op->c;
  void** params = (void**)(L + 1);
  softcuda_block b;
  unsigned x, y, z;
  int rc = 0;
  softcuda_twin_fn twin = f->twin;
  softcuda_grid_twin_fn grid_twin = f->grid_twin;
  if (!twin && !grid_twin) {
    sc_twin t;
    sc_find_twin(f->name, &t);
    twin = t.fn;
    grid_twin = t.grid;
  }
  if (sc_kernel_pool_check(f, params, op->stream->ctx->dev) != CUDA_SUCCESS) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (grid_twin) {
    softcuda_grid g;
    g.grid_dim = L->grid;
    g.block_dim = L->block;
    g.cluster_dim = L->cluster;
    g.shared_bytes = L->shared;
    g.cooperative = L->cooperative;
    g.device = op->stream->ctx->dev;
    return (CUresult)grid_twin(&g, params);
  }
  if (!twin) {
    fprintf(stderr, "softcuda: no C twin registered for kernel '%s' (see tests/softcuda/README.md)\n", f->name);
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  b.grid_dim = L->grid;
  b.block_dim = L->block;
  b.shared_bytes = L->shared;
  b.shared = L->shared ? malloc(L->shared) : NULL;
  b.device = op->stream->ctx->dev;
  for (z = 0; z < L->grid.z && !rc; ++z)
    for (y = 0; y < L->grid.y && !rc; ++y)
      for (x = 0; x < L->grid.x && !rc; ++x) {
        b.block_idx.x = x;
        b.block_idx.y = y;
        b.block_idx.z = z;
        if (b.shared) memset(b.shared, 0, L->shared);
        rc = twin(&b, params);
      }
  free(b.shared);
  return (CUresult)rc;
}

static void sc_fini_kernel(sc_op* op) {
  sc_unref(&((sc_func*)op->a)->h);
  free(op->b);
  free(op->c);
}

/* Copies the arguments now (CUDA does: the caller may reuse them at once). */
static CUresult sc_copy_args(const sc_func* f, void** kernelParams, void** extra, void** argbuf) {
  char* buf = (char*)sc_xcalloc(1, f->param_bytes ? f->param_bytes : 1);
  int i;
  if (kernelParams && extra) goto bad;
  if (extra) {
    const void* src = NULL;
    size_t size = 0;
    for (i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
        src = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
        size = *(const size_t*)extra[i + 1];
      else
        goto bad;
    }
    if (!src || size < f->param_bytes) goto bad;
    memcpy(buf, src, f->param_bytes);
  } else if (f->nparams) {
    if (!kernelParams) goto bad;
    for (i = 0; i < f->nparams; ++i) {
      if (!kernelParams[i]) goto bad;
      memcpy(buf + f->params[i].offset, kernelParams[i], f->params[i].size);
    }
  }
  *argbuf = buf;
  return CUDA_SUCCESS;
bad:
  free(buf);
  return CUDA_ERROR_INVALID_VALUE;
}

/* ---- occupancy (a model of an H200 SM: 2,048 threads, 32 blocks, 64K registers at 16
 * per thread, 228 KiB of shared memory with 1 KiB reserved per block) ----------------- */

static int sc_blocks_per_sm(const sc_func* f, unsigned threads, size_t dynamic_shared) {
  unsigned warps = (threads + 31) / 32;
  int n = 32;
  size_t per_block = (size_t)f->static_shared + dynamic_shared + 1024;
  if (threads == 0 || threads > (unsigned)f->max_threads || dynamic_shared > (size_t)f->max_dyn_shared) return 0;
  if ((int)(64 / warps) < n) n = (int)(64 / warps);                 /* threads */
  if ((int)(128 / warps) < n) n = (int)(128 / warps);               /* registers */
  if ((int)(233472 / per_block) < n) n = (int)(233472 / per_block); /* shared memory */
  return n;
}

/* 8 blocks per cluster (portable), 16 with CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED. */
static int sc_cluster_max(const sc_func* f) { return f->nonportable_cluster ? 16 : 8; }

CUresult CUDAAPI sc_cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                                size_t dynamicSMemSize) {
  sc_func* f;
  CUresult r;
  SC_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  if (!numBlocks || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_func(func, &f);
  if (r == CUDA_SUCCESS) *numBlocks = sc_blocks_per_sm(f, (unsigned)blockSize, dynamicSMemSize);
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction func,
                                                       const CUlaunchConfig* config) {
  sc_func* f;
  CUresult r;
  SC_ENTER(cuOccupancyMaxPotentialClusterSize);
  if (!clusterSize || !config) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_func(func, &f);
  if (r == CUDA_SUCCESS) {
    int per_sm = sc_blocks_per_sm(f, config->blockDimX * config->blockDimY * config->blockDimZ, config->sharedMemBytes);
    int max = sc_cluster_max(f);
    *clusterSize = per_sm == 0 ? 0 : (per_sm * SC_SM_COUNT < max ? per_sm * SC_SM_COUNT : max);
  }
  SC_UNLOCK();
  return r;
}

/* Reads launch attributes, as cuLaunchKernelEx and cuGraphKernelNodeSetAttribute do. */
static CUresult sc_launch_attr_read(CUlaunchAttributeID id, const CUlaunchAttributeValue* v, sc_launch_attrs* a) {
  switch (id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE: return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: a->cooperative = v->cooperative != 0; return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
      if (!v->clusterDim.x || !v->clusterDim.y || !v->clusterDim.z) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
      a->cluster.x = v->clusterDim.x, a->cluster.y = v->clusterDim.y, a->cluster.z = v->clusterDim.z;
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      a->programmatic = v->programmaticStreamSerializationAllowed != 0;
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY: a->priority = v->priority; return CUDA_SUCCESS;
    default:
      fprintf(stderr, "softcuda: launch attribute %d is not modelled\n", (int)id);
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

/* The rules a launch with these attributes must meet (the device supports clusters and
 * cooperative launches). Cluster: each axis divides the grid, at most 8 blocks (16 when the
 * function allows non-portable sizes) and no more than fit. Cooperative: every block
 * co-resident (blocks per SM x SMs). */
static CUresult sc_launch_attrs_check(const sc_func* f, const sc_launch_attrs* a, softcuda_dim3 grid,
                                      softcuda_dim3 block, unsigned shared) {
  unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
  int per_sm = sc_blocks_per_sm(f, block.x * block.y * block.z, shared);
  unsigned cluster = a->cluster.x * a->cluster.y * a->cluster.z;
  if (grid.x % a->cluster.x || grid.y % a->cluster.y || grid.z % a->cluster.z) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  if (cluster > 1 && ((int)cluster > sc_cluster_max(f) || (int)cluster > per_sm * SC_SM_COUNT))
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  if (a->cooperative && blocks > (unsigned long long)per_sm * SC_SM_COUNT)
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  return CUDA_SUCCESS;
}

static void sc_launch_attrs_default(sc_launch_attrs* a) {
  memset(a, 0, sizeof(*a));
  a->cluster.x = a->cluster.y = a->cluster.z = 1;
}

static void sc_launch_set_attrs(sc_launch* L, const sc_launch_attrs* a) {
  L->cluster = a->cluster;
  L->cooperative = a->cooperative;
  L->programmatic = a->programmatic;
  L->priority = a->priority;
}

static void sc_launch_get_attrs(const sc_launch* L, sc_launch_attrs* a) {
  a->cluster = L->cluster;
  a->cooperative = L->cooperative;
  a->programmatic = L->programmatic;
  a->priority = L->priority;
}

/* The geometry rules of a launch or kernel node: the device's grid and block limits, the
 * function's thread limit (its .maxntid; registers on a GPU give
 * CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES instead, which softcuda does not model), a .reqntid's
 * exact shape and the dynamic shared memory limit: each CUDA_ERROR_INVALID_VALUE, as driver
 * 580 on an H200 answers (conf_module llvm_launch_bounds_and_shared_memory). */
static CUresult sc_launch_dims_check(const sc_func* fn, softcuda_dim3 grid, softcuda_dim3 block, unsigned shared) {
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      (unsigned long long)block.x * block.y * block.z > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned long long)block.x * block.y * block.z > (unsigned long long)fn->max_threads)
    return CUDA_ERROR_INVALID_VALUE;
  if (fn->reqntid[0] && (block.x != fn->reqntid[0] || block.y != fn->reqntid[1] || block.z != fn->reqntid[2]))
    return CUDA_ERROR_INVALID_VALUE;
  if (shared > (unsigned)fn->max_dyn_shared) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* cuLaunchKernel and cuLaunchKernelEx, after their entry (`entry` names the call). */
static CUresult sc_launch_enqueue(const char* entry, CUfunction f, softcuda_dim3 grid, softcuda_dim3 block,
                                  unsigned shared, CUstream hStream, void** kernelParams, void** extra,
                                  const sc_launch_attrs* attrs) {
  sc_func* fn;
  sc_stream* s;
  sc_ctx* cur;
  CUresult r;
  void* args = NULL;
  SC_LOCK();
  r = sc_get_func(f, &fn);
  if (r == CUDA_SUCCESS) r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS && fn->mod->ctx != s->ctx)
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_HANDLE,
                     "%s(%s): the function's module and the stream belong to different contexts", entry, fn->name);
  if (r == CUDA_SUCCESS && cur != s->ctx)
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                     "%s(%s) on a stream of another context than the current one", entry, fn->name);
  if (r == CUDA_SUCCESS) r = sc_launch_dims_check(fn, grid, block, shared);
  if (r == CUDA_SUCCESS) r = sc_launch_attrs_check(fn, attrs, grid, block, shared);
  if (r == CUDA_SUCCESS) r = sc_copy_args(fn, kernelParams, extra, &args);
  if (r == CUDA_SUCCESS) {
    sc_op* op = sc_op_new(fn->name, sc_run_kernel, sc_fini_kernel);
    fn->loaded = 1;
    sc_launch* L = (sc_launch*)sc_xcalloc(1, sizeof(sc_launch) + (size_t)(fn->nparams + 1) * sizeof(void*));
    void** params = (void**)(L + 1);
    int i;
    L->grid = grid;
    L->block = block;
    L->shared = shared;
    sc_launch_set_attrs(L, attrs);
    for (i = 0; i < fn->nparams; ++i) params[i] = (char*)args + fn->params[i].offset;
    sc_ref(&fn->h);
    op->a = fn;
    op->b = args;
    op->c = L;
    sc_submit(s, op);
  }
  SC_UNLOCK();
  return r;
}

static softcuda_dim3 sc_dim3(unsigned x, unsigned y, unsigned z) {
  softcuda_dim3 d;
  d.x = x, d.y = y, d.z = z;
  return d;
}

CUresult CUDAAPI sc_cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  sc_launch_attrs attrs;
  SC_ENTER(cuLaunchKernel);
  sc_launch_attrs_default(&attrs);
  return sc_launch_enqueue("cuLaunchKernel", f, sc_dim3(gridDimX, gridDimY, gridDimZ),
                           sc_dim3(blockDimX, blockDimY, blockDimZ), sharedMemBytes, hStream, kernelParams, extra,
                           &attrs);
}

CUresult CUDAAPI sc_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  sc_launch_attrs attrs;
  unsigned i;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuLaunchKernelEx);
  if (!config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
  sc_launch_attrs_default(&attrs);
  SC_LOCK();
  for (i = 0; i < config->numAttrs && r == CUDA_SUCCESS; ++i)
    r = sc_launch_attr_read(config->attrs[i].id, &config->attrs[i].value, &attrs);
  SC_UNLOCK();
  if (r != CUDA_SUCCESS) return r;
  return sc_launch_enqueue("cuLaunchKernelEx", f, sc_dim3(config->gridDimX, config->gridDimY, config->gridDimZ),
                           sc_dim3(config->blockDimX, config->blockDimY, config->blockDimZ), config->sharedMemBytes,
                           config->hStream, kernelParams, extra, &attrs);
}

/* ---- linker ------------------------------------------------------------------------- */

typedef struct sc_link {
  sc_obj h;
  char* text; /* concatenated PTX of every input */
  size_t len;
  int inputs;
  char* image;
  size_t image_size;
  unsigned nopts;
  CUjit_option* opts;
  void** vals;
  int64_t t0;
} sc_link;

static void sc_link_free(sc_obj* o) {
  sc_link* l = (sc_link*)o;
  free(l->text);
  free(l->image);
  free(l);
}

static CUresult sc_get_link(CUlinkState h, sc_link** out) {
  sc_obj* o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_LINK);
  *out = (sc_link*)o; /* NULL on failure: written on every path */
  if (!o) return sc_bad_handle("link state", (const void*)h);
  *out = (sc_link*)o;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuLinkCreate(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                 CUlinkState* stateOut) {
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuLinkCreate);
  if (!stateOut) return CUDA_ERROR_INVALID_VALUE;
  if ((r = sc_jit_options_check(numOptions, options, optionValues)) != CUDA_SUCCESS) return r;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    sc_link* l = (sc_link*)sc_xcalloc(1, sizeof(sc_link));
    sc_obj_init(&l->h, SC_K_LINK, c, sc_link_free);
    l->nopts = numOptions; /* output options are written at cuLinkComplete, as CUDA does */
    l->opts = options;
    l->vals = optionValues;
    l->t0 = sc_now_ns();
    sc_obj_register(&l->h);
    *stateOut = (CUlinkState)(uintptr_t)SC_HANDLE(l);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                  unsigned int numOptions, CUjit_option* options, void** optionValues) {
  sc_link* l;
  CUresult r;
  const char* ptx = NULL;
  char log[1024];
  size_t len;
  sc_ptx x;
  (void)name;
  SC_ENTER(cuLinkAddData);
  if (!data || !size) return CUDA_ERROR_INVALID_VALUE;
  if ((r = sc_jit_options_check(numOptions, options, optionValues)) != CUDA_SUCCESS) return r;
  SC_LOCK();
  r = sc_get_link(state, &l);
  SC_UNLOCK();
  if (r != CUDA_SUCCESS) return r;
  if (type == CU_JIT_INPUT_PTX) {
    ptx = (const char*)data;
    len = strnlen(ptx, size);
    sc_jit_delay();
  } else if (type == CU_JIT_INPUT_CUBIN && (ptx = sc_reloc_ptx(data, size)) != NULL) {
    len = strnlen(ptx, size - SC_RELOC_HEADER - SC_RELOC_MARKER_LEN);
  } else if (type == CU_JIT_INPUT_CUBIN) {
    if (size < SC_CUBIN_MAGIC_LEN || memcmp(data, sc_cubin_magic, SC_CUBIN_MAGIC_LEN) != 0)
      return CUDA_ERROR_INVALID_IMAGE;
    ptx = (const char*)data + SC_CUBIN_MAGIC_LEN;
    len = strnlen(ptx, size - SC_CUBIN_MAGIC_LEN);
  } else {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  r = sc_ptx_parse_checked(ptx, len, type == CU_JIT_INPUT_PTX, &x, log, sizeof log);
  if (r != CUDA_SUCCESS) { /* the JIT's words go to the error log given to cuLinkCreate */
    SC_LOCK();
    if (sc_get_link(state, &l) == CUDA_SUCCESS)
      sc_jit_options_out(l->nopts, l->opts, l->vals, "", log, (float)((double)(sc_now_ns() - l->t0) / 1e6));
    SC_UNLOCK();
    return r;
  }
  sc_ptx_free(&x);
  SC_LOCK();
  r = sc_get_link(state, &l);
  if (r == CUDA_SUCCESS) {
    char* n = (char*)realloc(l->text, l->len + len + 2);
    if (!n) abort();
    memcpy(n + l->len, ptx, len);
    l->len += len;
    n[l->len++] = '\n';
    n[l->len] = 0;
    l->text = n;
    l->inputs++;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  sc_link* l;
  CUresult r;
  SC_ENTER(cuLinkComplete);
  if (!cubinOut || !sizeOut) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_link(state, &l);
  if (r == CUDA_SUCCESS && l->inputs == 0) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    free(l->image);
    l->image_size = SC_CUBIN_MAGIC_LEN + l->len + 1;
    l->image = (char*)sc_xcalloc(1, l->image_size);
    memcpy(l->image, sc_cubin_magic, SC_CUBIN_MAGIC_LEN);
    memcpy(l->image + SC_CUBIN_MAGIC_LEN, l->text, l->len);
    *cubinOut = l->image; /* owned by the link state, as in CUDA */
    *sizeOut = l->image_size;
    sc_jit_options_out(l->nopts, l->opts, l->vals, "softcuda: linked", "",
                       (float)((double)(sc_now_ns() - l->t0) / 1e6));
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuLinkDestroy(CUlinkState state) {
  sc_link* l;
  CUresult r;
  SC_ENTER(cuLinkDestroy);
  SC_LOCK();
  r = sc_get_link(state, &l);
  if (r == CUDA_SUCCESS) sc_obj_unregister(&l->h);
  SC_UNLOCK();
  return r;
}
