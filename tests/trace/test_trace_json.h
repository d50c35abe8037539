/* A small JSON reader and Chrome-trace checks for the trace tests (test_trace*.c).
 * tj_parse_file() reads a whole file into a tree; tj_get() looks up an object member. */
#ifndef TEST_TRACE_JSON_H
#define TEST_TRACE_JSON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define TT_UNUSED __attribute__((unused))
#else
#define TT_UNUSED
#endif

typedef enum { TJ_NULL, TJ_BOOL, TJ_NUMBER, TJ_STRING, TJ_ARRAY, TJ_OBJECT } tj_type;

typedef struct tj_value {
  tj_type type;
  double number;
  char* string;            /* TJ_STRING; a member's key for object children */
  char* key;               /* set on members of an object */
  struct tj_value** items; /* TJ_ARRAY / TJ_OBJECT */
  size_t count;
} tj_value;

typedef struct tj_parser {
  const char* p;
  const char* error;
} tj_parser;

TT_UNUSED static void tj_skip(tj_parser* ps) {
  while (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t') ps->p++;
}

TT_UNUSED static tj_value* tj_new(tj_type type) {
  tj_value* v = (tj_value*)calloc(1, sizeof(tj_value));
  v->type = type;
  return v;
}

TT_UNUSED static void tj_free(tj_value* v) {
  size_t i;
  if (!v) return;
  for (i = 0; i < v->count; ++i) tj_free(v->items[i]);
  free(v->items);
  free(v->string);
  free(v->key);
  free(v);
}

TT_UNUSED static char* tj_parse_string_raw(tj_parser* ps) {
  size_t cap = 16, n = 0;
  char* out;
  if (*ps->p != '"') {
    ps->error = "expected a string";
    return NULL;
  }
  ps->p++;
  out = (char*)malloc(cap);
  while (*ps->p && *ps->p != '"') {
    char c = *ps->p++;
    if (c == '\\') {
      char e = *ps->p++;
      switch (e) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'u': {
          unsigned code = 0;
          int k;
          for (k = 0; k < 4; ++k) {
            char h = *ps->p++;
            code = code * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10 : h - '0');
          }
          c = (char)(code < 128 ? code : '?');
          break;
        }
        case 0:
          ps->error = "unterminated escape";
          free(out);
          return NULL;
        default: c = e; break;
      }
    } else if ((unsigned char)c < 0x20) {
      ps->error = "control character in a string";
      free(out);
      return NULL;
    }
    if (n + 1 >= cap) out = (char*)realloc(out, cap *= 2);
    out[n++] = c;
  }
  if (*ps->p != '"') {
    ps->error = "unterminated string";
    free(out);
    return NULL;
  }
  ps->p++;
  out[n] = 0;
  return out;
}

TT_UNUSED static tj_value* tj_parse_value(tj_parser* ps);

static void tj_push(tj_value* parent, tj_value* child) {
  parent->items = (tj_value**)realloc(parent->items, (parent->count + 1) * sizeof(tj_value*));
  parent->items[parent->count++] = child;
}

TT_UNUSED static tj_value* tj_parse_container(tj_parser* ps, int object) {
  tj_value* v = tj_new(object ? TJ_OBJECT : TJ_ARRAY);
  char close = object ? '}' : ']';
  ps->p++;
  tj_skip(ps);
  if (*ps->p == close) {
    ps->p++;
    return v;
  }
  for (;;) {
    char* key = NULL;
    tj_value* item;
    tj_skip(ps);
    if (object) {
      key = tj_parse_string_raw(ps);
      if (!key) break;
      tj_skip(ps);
      if (*ps->p != ':') {
        ps->error = "expected ':'";
        free(key);
        break;
      }
      ps->p++;
    }
    item = tj_parse_value(ps);
    if (!item) {
      free(key);
      break;
    }
    item->key = key;
    tj_push(v, item);
    tj_skip(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p == close) {
      ps->p++;
      return v;
    }
    ps->error = object ? "expected ',' or '}'" : "expected ',' or ']'";
    break;
  }
  tj_free(v);
  return NULL;
}

TT_UNUSED static tj_value* tj_parse_value(tj_parser* ps) {
  tj_skip(ps);
  if (*ps->p == '{') return tj_parse_container(ps, 1);
  if (*ps->p == '[') return tj_parse_container(ps, 0);
  if (*ps->p == '"') {
    char* s = tj_parse_string_raw(ps);
    tj_value* v;
    if (!s) return NULL;
    v = tj_new(TJ_STRING);
    v->string = s;
    return v;
  }
  if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
    tj_value* v = tj_new(TJ_BOOL);
    v->number = ps->p[0] == 't';
    ps->p += ps->p[0] == 't' ? 4 : 5;
    return v;
  }
  if (!strncmp(ps->p, "null", 4)) {
    ps->p += 4;
    return tj_new(TJ_NULL);
  }
  if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) {
    char* end = NULL;
    double d = strtod(ps->p, &end);
    tj_value* v;
    if (end == ps->p) {
      ps->error = "bad number";
      return NULL;
    }
    ps->p = end;
    v = tj_new(TJ_NUMBER);
    v->number = d;
    return v;
  }
  ps->error = "unexpected character";
  return NULL;
}

/* Whether `text` is well-formed UTF-8, as JSON must be (RFC 8259; Python's json.load
 * refuses a file that is not): no stray or missing continuation bytes, overlong forms,
 * surrogates or values past U+10FFFF. */
TT_UNUSED static int tj_is_utf8(const unsigned char* u) {
  while (*u) {
    unsigned char lo = 0x80, hi = 0xBF;
    int n, i;
    if (u[0] < 0x80) {
      ++u;
      continue;
    }
    if (u[0] < 0xC2 || u[0] > 0xF4) return 0;
    n = u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    if (u[0] == 0xE0) lo = 0xA0;
    if (u[0] == 0xED) hi = 0x9F;
    if (u[0] == 0xF0) lo = 0x90;
    if (u[0] == 0xF4) hi = 0x8F;
    for (i = 1; i < n; ++i, lo = 0x80, hi = 0xBF)
      if (u[i] < lo || u[i] > hi) return 0;
    u += n;
  }
  return 1;
}

/* Parses a whole file; NULL (and *error) when it is not one JSON value in UTF-8. */
TT_UNUSED static tj_value* tj_parse_file(const char* path, const char** error) {
  FILE* f = fopen(path, "rb");
  long size;
  char* text;
  tj_parser ps;
  tj_value* v;
  *error = NULL;
  if (!f) {
    *error = "cannot open the file";
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  text = (char*)malloc((size_t)size + 1);
  if (fread(text, 1, (size_t)size, f) != (size_t)size) size = 0;
  text[size] = 0;
  fclose(f);
  if (!tj_is_utf8((const unsigned char*)text)) {
    *error = "not UTF-8";
    free(text);
    return NULL;
  }
  ps.p = text;
  ps.error = NULL;
  v = tj_parse_value(&ps);
  if (v) {
    tj_skip(&ps);
    if (*ps.p) {
      ps.error = "trailing characters after the value";
      tj_free(v);
      v = NULL;
    }
  }
  *error = ps.error;
  free(text);
  return v;
}

TT_UNUSED static tj_value* tj_get(const tj_value* object, const char* key) {
  size_t i;
  if (!object || object->type != TJ_OBJECT) return NULL;
  for (i = 0; i < object->count; ++i)
    if (!strcmp(object->items[i]->key, key)) return object->items[i];
  return NULL;
}
TT_UNUSED static const char* tj_str(const tj_value* object, const char* key) {
  tj_value* v = tj_get(object, key);
  return v && v->type == TJ_STRING ? v->string : NULL;
}
TT_UNUSED static double tj_num(const tj_value* object, const char* key, double fallback) {
  tj_value* v = tj_get(object, key);
  return v && v->type == TJ_NUMBER ? v->number : fallback;
}

/* ---- the trace, as the checks see it ---- */

typedef struct tt_span {
  const tj_value* e;
  const char* name;
  const char* cat;
  int pid, tid;
  double ts, dur;
  int command; /* -1: an operation (or a host span); >= 0: a command of a STREAM execute */
} tt_span;

typedef struct tt_flow {
  const tj_value* e;
  char ph;
  const char* cat;
  double id;
  int pid, tid;
  double ts;
} tt_flow;

typedef struct tt_trace {
  tj_value* root;
  const tj_value* events;
  tt_span* spans;
  size_t span_count;
  tt_flow* flows;
  size_t flow_count;
  size_t meta_count;
  double dropped;
} tt_trace;

TT_UNUSED static void tt_free(tt_trace* t) {
  tj_free(t->root);
  free(t->spans);
  free(t->flows);
  memset(t, 0, sizeof(*t));
}

/* Loads a trace and checks the shape of every event. Returns NULL or what is wrong. */
TT_UNUSED static const char* tt_load(const char* path, tt_trace* t) {
  const char* error = NULL;
  size_t i;
  static char why[256];
  memset(t, 0, sizeof(*t));
  t->root = tj_parse_file(path, &error);
  if (!t->root) {
    snprintf(why, sizeof(why), "%.200s is not JSON: %.40s", path, error ? error : "?");
    return why;
  }
  t->events = tj_get(t->root, "traceEvents");
  if (!t->events || t->events->type != TJ_ARRAY) return "no traceEvents array";
  t->dropped = tj_num(tj_get(t->root, "otherData"), "dropped_records", -1);
  t->spans = (tt_span*)calloc(t->events->count + 1, sizeof(tt_span));
  t->flows = (tt_flow*)calloc(t->events->count + 1, sizeof(tt_flow));
  for (i = 0; i < t->events->count; ++i) {
    const tj_value* e = t->events->items[i];
    const char* ph = tj_str(e, "ph");
    const char* name = tj_str(e, "name");
    if (!ph || !name || !tj_get(e, "pid") || !tj_get(e, "tid")) {
      snprintf(why, sizeof(why), "event %zu lacks ph, name, pid or tid", i);
      return why;
    }
    if (!strcmp(ph, "M")) {
      if (!tj_get(e, "args")) return "a metadata event without args";
      t->meta_count++;
    } else if (!strcmp(ph, "X")) {
      tt_span* s = &t->spans[t->span_count++];
      const tj_value* args = tj_get(e, "args");
      s->e = e;
      s->name = name;
      s->cat = tj_str(e, "cat");
      s->pid = (int)tj_num(e, "pid", -1);
      s->tid = (int)tj_num(e, "tid", -1);
      s->ts = tj_num(e, "ts", -1);
      s->dur = tj_num(e, "dur", -1);
      s->command = (int)tj_num(args, "command", -1);
      if (s->ts < 0 || s->dur < 0 || !s->cat) {
        snprintf(why, sizeof(why), "span %zu ('%s') has a bad ts, dur or cat", i, name);
        return why;
      }
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      tt_flow* f = &t->flows[t->flow_count++];
      f->e = e;
      f->ph = ph[0];
      f->cat = tj_str(e, "cat");
      f->id = tj_num(e, "id", -1);
      f->pid = (int)tj_num(e, "pid", -1);
      f->tid = (int)tj_num(e, "tid", -1);
      f->ts = tj_num(e, "ts", -1);
      if (!f->cat || f->id < 0 || f->ts < 0) return "a flow event without cat, id or ts";
      if (f->ph == 'f' && (!tj_str(e, "bp") || strcmp(tj_str(e, "bp"), "e"))) return "a flow end without \"bp\":\"e\"";
    } else {
      snprintf(why, sizeof(why), "event %zu has an unexpected ph '%s'", i, ph);
      return why;
    }
  }
  return NULL;
}

/* The name a metadata event gives to (pid, tid); NULL if none. */
TT_UNUSED static const char* tt_meta_name(const tt_trace* t, const char* what, int pid, int tid) {
  size_t i;
  for (i = 0; i < t->events->count; ++i) {
    const tj_value* e = t->events->items[i];
    if (strcmp(tj_str(e, "ph"), "M") || strcmp(tj_str(e, "name"), what)) continue;
    if ((int)tj_num(e, "pid", -1) != pid) continue;
    if (!strcmp(what, "thread_name") && (int)tj_num(e, "tid", -1) != tid) continue;
    return tj_str(tj_get(e, "args"), "name");
  }
  return NULL;
}

/* Spans are written in time order, and the spans of each track nest: a span that starts
 * inside another ends inside it too. Returns NULL or what is wrong. */
TT_UNUSED static const char* tt_check_order_and_nesting(const tt_trace* t) {
  size_t i, j;
  static char why[256];
  const double eps = 0.0015; /* the file has 3 decimals of a microsecond */
  for (i = 1; i < t->span_count; ++i)
    if (t->spans[i].ts < t->spans[i - 1].ts) {
      snprintf(why, sizeof(why), "span %zu ('%s') starts before the span written before it", i, t->spans[i].name);
      return why;
    }
  for (i = 0; i < t->span_count; ++i) {
    const tt_span* a = &t->spans[i];
    for (j = i + 1; j < t->span_count; ++j) {
      const tt_span* b = &t->spans[j];
      if (b->ts >= a->ts + a->dur - eps) break; /* sorted: the rest start after a ends */
      if (b->pid != a->pid || b->tid != a->tid) continue;
      if (b->ts + b->dur > a->ts + a->dur + eps) {
        snprintf(why, sizeof(why),
                 "spans '%s' [%.3f, %.3f] and '%s' [%.3f, %.3f] overlap without nesting (pid %d tid %d)", a->name,
                 a->ts, a->ts + a->dur, b->name, b->ts, b->ts + b->dur, a->pid, a->tid);
        return why;
      }
    }
  }
  return NULL;
}

/* Every flow start has one end with the same id, later or at the same time, and both ends
 * lie inside a span of their track (so viewers bind them). Counts flows of `cat`. */
TT_UNUSED static const char* tt_check_flows(const tt_trace* t, const char* cat, size_t* out_count) {
  size_t i, j, k;
  static char why[256];
  *out_count = 0;
  for (i = 0; i < t->flow_count; ++i) {
    const tt_flow* s = &t->flows[i];
    const tt_flow* f = NULL;
    if (s->ph != 's') continue;
    for (j = 0; j < t->flow_count; ++j)
      if (t->flows[j].ph == 'f' && t->flows[j].id == s->id && !strcmp(t->flows[j].cat, s->cat)) {
        if (f) return "two flow ends share an id";
        f = &t->flows[j];
      }
    if (!f) return "a flow start without an end";
    if (f->ts + 0.0015 < s->ts) {
      snprintf(why, sizeof(why), "flow %.0f (%s) ends at %.3f before it starts at %.3f", s->id, s->cat, f->ts, s->ts);
      return why;
    }
    for (k = 0; k < 2; ++k) {
      const tt_flow* end = k ? f : s;
      size_t m;
      int inside = 0;
      for (m = 0; m < t->span_count && !inside; ++m) {
        const tt_span* sp = &t->spans[m];
        inside = sp->pid == end->pid && sp->tid == end->tid && end->ts >= sp->ts - 0.0015 &&
                 end->ts <= sp->ts + sp->dur + 0.0015;
      }
      if (!inside) {
        snprintf(why, sizeof(why), "flow %.0f (%s): its %s at %.3f is inside no span of its track", s->id, s->cat,
                 k ? "end" : "start", end->ts);
        return why;
      }
    }
    if (!strcmp(s->cat, cat)) (*out_count)++;
  }
  return NULL;
}

#endif /* TEST_TRACE_JSON_H */
