/* gen_modules.h - PTX test modules generated at run time (no nvcc needed), for the module
 * cache tests and benchmark. Real PTX: it JIT-compiles on a GPU, and softcuda runs the
 * small family through the twins in gen_family.c.
 *
 *   gen_module_ptx(k, variant, buf, size)  module with one entry gen_add_<k>(u32* data, u32 n)
 *                                          that adds k to data[i]; `variant` only changes a
 *                                          comment, so (k, variant) pairs are distinct images
 *   gen_bad_ptx(k, buf, size)              PTX that fails to compile (a bad parameter type)
 *   gen_big_ptx(entries, chain, &size)     malloc'ed module of `entries` kernels, each a
 *                                          dependent chain of `chain` fma: real JIT work
 */
#ifndef GEN_MODULES_H
#define GEN_MODULES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>

#if defined(__GNUC__)
#define GEN_UNUSED __attribute__((unused))
#else
#define GEN_UNUSED
#endif

#define GEN_MODULES_FAMILY_SIZE 128 /* gen_add_0 .. gen_add_127 have twins */

GEN_UNUSED static int gen_module_ptx(unsigned k, unsigned variant, char* buf, size_t size) {
  return snprintf(buf, size,
                  "//\n// gpuhal module cache test module: gen_add_%u, variant %u\n//\n\n"
                  ".version 8.0\n.target sm_75\n.address_size 64\n\n"
                  "\t// .globl\tgen_add_%u\n\n"
                  ".visible .entry gen_add_%u(\n"
                  "\t.param .u64 gen_add_%u_param_0,\n"
                  "\t.param .u32 gen_add_%u_param_1\n"
                  ")\n{\n"
                  "\t.reg .pred \t%%p<2>;\n\t.reg .b32 \t%%r<8>;\n\t.reg .b64 \t%%rd<5>;\n\n"
                  "\tld.param.u64 \t%%rd1, [gen_add_%u_param_0];\n"
                  "\tld.param.u32 \t%%r2, [gen_add_%u_param_1];\n"
                  "\tmov.u32 \t%%r3, %%ctaid.x;\n\tmov.u32 \t%%r4, %%ntid.x;\n\tmov.u32 \t%%r5, %%tid.x;\n"
                  "\tmad.lo.s32 \t%%r1, %%r3, %%r4, %%r5;\n"
                  "\tsetp.ge.u32 \t%%p1, %%r1, %%r2;\n"
                  "\t@%%p1 bra \t$L__BB0_2;\n\n"
                  "\tcvta.to.global.u64 \t%%rd2, %%rd1;\n"
                  "\tmul.wide.u32 \t%%rd3, %%r1, 4;\n"
                  "\tadd.s64 \t%%rd4, %%rd2, %%rd3;\n"
                  "\tld.global.u32 \t%%r6, [%%rd4];\n"
                  "\tadd.s32 \t%%r7, %%r6, %u;\n"
                  "\tst.global.u32 \t[%%rd4], %%r7;\n\n"
                  "$L__BB0_2:\n\tret;\n\n}\n",
                  k, variant, k, k, k, k, k, k, k);
}

GEN_UNUSED static int gen_bad_ptx(unsigned k, char* buf, size_t size) {
  return snprintf(buf, size,
                  ".version 8.0\n.target sm_75\n.address_size 64\n\n"
                  ".visible .entry broken_%u(\n\t.param .q77 broken_%u_param_0\n)\n{\n\tret;\n}\n",
                  k, k);
}

/* Appends with printf formatting to a growing malloc'ed string. */
typedef struct gen_text_s {
  char* data;
  size_t size, capacity;
} gen_text_t;

static void gen_text_printf(gen_text_t* t, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void gen_text_printf(gen_text_t* t, const char* fmt, ...) {
  va_list ap;
  int n;
  for (;;) {
    size_t room = t->capacity - t->size;
    va_start(ap, fmt);
    n = vsnprintf(t->data ? t->data + t->size : NULL, t->data ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    if (t->data && (size_t)n < room) {
      t->size += (size_t)n;
      return;
    }
    t->capacity = t->capacity ? t->capacity * 2 : 65536;
    while (t->capacity < t->size + (size_t)n + 1) t->capacity *= 2;
    t->data = (char*)realloc(t->data, t->capacity);
    if (!t->data) abort();
  }
}

/* A module of `entries` kernels big_chain_<e>(float* data): each thread loads data[tid]
 * and runs a chain of `chain` dependent fma with distinct constants (nothing folds), then
 * stores the result. About 44 bytes of PTX per fma. */
GEN_UNUSED static char* gen_big_ptx(unsigned entries, unsigned chain, size_t* out_size) {
  gen_text_t t;
  unsigned e, j;
  memset(&t, 0, sizeof(t));
  gen_text_printf(&t, "//\n// gpuhal module cache benchmark module: %u kernels x %u fma\n//\n\n"
                      ".version 8.0\n.target sm_75\n.address_size 64\n\n", entries, chain);
  for (e = 0; e < entries; ++e) {
    gen_text_printf(&t,
                    ".visible .entry big_chain_%u(\n\t.param .u64 big_chain_%u_param_0\n)\n{\n"
                    "\t.reg .b32 \t%%r<3>;\n\t.reg .f32 \t%%f<%u>;\n\t.reg .b64 \t%%rd<5>;\n\n"
                    "\tld.param.u64 \t%%rd1, [big_chain_%u_param_0];\n"
                    "\tcvta.to.global.u64 \t%%rd2, %%rd1;\n"
                    "\tmov.u32 \t%%r1, %%tid.x;\n"
                    "\tmul.wide.u32 \t%%rd3, %%r1, 4;\n"
                    "\tadd.s64 \t%%rd4, %%rd2, %%rd3;\n"
                    "\tld.global.f32 \t%%f1, [%%rd4];\n"
                    "\tadd.f32 \t%%f2, %%f1, 0f3F800000;\n",
                    e, e, chain + 3, e);
    for (j = 3; j < chain + 3; ++j) {
      unsigned constant = 0x3F000000u + ((e * 7919u + j * 104729u) & 0x7FFFFFu); /* in [0.5, 1) */
      gen_text_printf(&t, "\tfma.rn.f32 \t%%f%u, %%f%u, %%f%u, 0f%08X;\n", j, j - 1, j - 2, constant);
    }
    gen_text_printf(&t, "\tst.global.f32 \t[%%rd4], %%f%u;\n\tret;\n\n}\n\n", chain + 2);
  }
  *out_size = t.size;
  return t.data;
}

#endif /* GEN_MODULES_H */
