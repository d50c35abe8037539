/* Status objects (base) and CUDA/NCCL error translation (status). */
#include "test_internals.h"
#include "test_util.h"

TU_TEST(make_and_message) {
  (void)tu_softcuda; /* test_util.h defines it static; this test does not need it */
  gpuhal_status_t s = gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "thing %d missing", 7);
  TU_CHECK_EQ_INT(gpuhal_status_code(s), GPUHAL_STATUS_NOT_FOUND);
  TU_CHECK(strcmp(gpuhal_status_message(s), "NOT_FOUND: thing 7 missing") == 0);
  gpuhal_status_free(s);
  TU_CHECK(gpuhal_status_make(GPUHAL_STATUS_OK, "ignored") == NULL);
  TU_CHECK_EQ_INT(gpuhal_status_code(NULL), GPUHAL_STATUS_OK);
  TU_CHECK(strcmp(gpuhal_status_message(NULL), "OK") == 0);
  gpuhal_status_free(NULL); /* fine */
}

TU_TEST(annotate_keeps_cause_first) {
  gpuhal_status_t s = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "root cause");
  s = gpuhal_status_annotate(s, "while doing %s", "step one");
  s = gpuhal_status_annotate(s, "in the outer call");
  TU_CHECK_EQ_INT(gpuhal_status_code(s), GPUHAL_STATUS_INTERNAL);
  TU_CHECK(strcmp(gpuhal_status_message(s), "INTERNAL: root cause; while doing step one; in the outer call") == 0);
  gpuhal_status_free(s);
  TU_CHECK(gpuhal_status_annotate(NULL, "nothing") == NULL);
}

TU_TEST(clone_is_independent) {
  gpuhal_status_t s = gpuhal_status_make(GPUHAL_STATUS_ABORTED, "original");
  gpuhal_status_t c = gpuhal_status_clone(s);
  TU_REQUIRE(c != NULL && c != s);
  gpuhal_status_free(s);
  TU_CHECK_EQ_INT(gpuhal_status_code(c), GPUHAL_STATUS_ABORTED);
  TU_CHECK(strcmp(gpuhal_status_message(c), "ABORTED: original") == 0);
  gpuhal_status_free(c);
  TU_CHECK(gpuhal_status_clone(NULL) == NULL);
}

TU_TEST(static_fallback_when_allocation_fails) {
  gpuhal_status_t s, a, c;
  gpuhal__status_alloc_fails = 1;
  s = gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED, "no memory for %s", "this");
  gpuhal__status_alloc_fails = 0;
  TU_REQUIRE(s != NULL);
  TU_CHECK_EQ_INT(gpuhal_status_code(s), GPUHAL_STATUS_RESOURCE_EXHAUSTED);
  TU_CHECK(strcmp(gpuhal_status_message(s), "RESOURCE_EXHAUSTED") == 0);
  a = gpuhal_status_annotate(s, "context"); /* a static status stays itself */
  TU_CHECK(a == s);
  c = gpuhal_status_clone(s);
  TU_CHECK_EQ_INT(gpuhal_status_code(c), GPUHAL_STATUS_RESOURCE_EXHAUSTED);
  gpuhal_status_free(c);
  gpuhal_status_free(a); /* freeing a static status is a no-op */
  gpuhal_status_free(s);
  /* Annotating when the grown copy cannot be had keeps the cause. */
  s = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "cause");
  gpuhal__status_alloc_fails = 1;
  s = gpuhal_status_annotate(s, "lost context");
  gpuhal__status_alloc_fails = 0;
  TU_CHECK(strcmp(gpuhal_status_message(s), "INTERNAL: cause") == 0);
  gpuhal_status_free(s);
}

TU_TEST(code_strings) {
  static const struct {
    gpuhal_status_code_t code;
    const char* name;
  } names[] = {{GPUHAL_STATUS_OK, "OK"},
               {GPUHAL_STATUS_CANCELLED, "CANCELLED"},
               {GPUHAL_STATUS_UNKNOWN, "UNKNOWN"},
               {GPUHAL_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
               {GPUHAL_STATUS_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
               {GPUHAL_STATUS_NOT_FOUND, "NOT_FOUND"},
               {GPUHAL_STATUS_ALREADY_EXISTS, "ALREADY_EXISTS"},
               {GPUHAL_STATUS_PERMISSION_DENIED, "PERMISSION_DENIED"},
               {GPUHAL_STATUS_RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
               {GPUHAL_STATUS_FAILED_PRECONDITION, "FAILED_PRECONDITION"},
               {GPUHAL_STATUS_ABORTED, "ABORTED"},
               {GPUHAL_STATUS_OUT_OF_RANGE, "OUT_OF_RANGE"},
               {GPUHAL_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED"},
               {GPUHAL_STATUS_INTERNAL, "INTERNAL"},
               {GPUHAL_STATUS_UNAVAILABLE, "UNAVAILABLE"},
               {GPUHAL_STATUS_DATA_LOSS, "DATA_LOSS"}};
  size_t i;
  for (i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
    TU_CHECK(strcmp(gpuhal_status_code_string(names[i].code), names[i].name) == 0);
  TU_CHECK(strcmp(gpuhal_status_code_string((gpuhal_status_code_t)99), "UNKNOWN_CODE") == 0);
}

/* Every CUresult in the table maps to a non-OK code, and the message names the error,
 * the call and where it was made. */
TU_TEST(every_cuda_error_maps) {
  size_t i;
  char where[64];
  for (i = 0; i < GPUHAL__ARRAY_SIZE(gpuhal__cuda_errors); ++i) {
    const gpuhal__cuda_error_info_t* e = &gpuhal__cuda_errors[i];
    gpuhal_status_t s;
    int line = __LINE__ + 1;
    s = gpuhal__cuda_status(NULL, (CUresult)e->value, "cuSomething", __FILE__, line);
    if (e->value == 0) {
      TU_CHECK(s == NULL);
      continue;
    }
    TU_REQUIRE(s != NULL);
    TU_CHECK(gpuhal_status_code(s) != GPUHAL_STATUS_OK);
    TU_CHECK_EQ_INT(gpuhal_status_code(s), e->code);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), e->name);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), e->text);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "in cuSomething at test_status.c:");
    snprintf(where, sizeof(where), "test_status.c:%d", line);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), where);
    if (e->sticky) TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "sticky");
    if (e->sticky) TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "device lost");
    TU_CHECK_EQ_INT(gpuhal__cuda_error_is_sticky((CUresult)e->value), e->sticky);
    gpuhal_status_free(s);
  }
}

TU_TEST(specific_cuda_mappings) {
  static const struct {
    int value;
    gpuhal_status_code_t code;
  } m[] = {{2, GPUHAL_STATUS_RESOURCE_EXHAUSTED},  {1, GPUHAL_STATUS_INVALID_ARGUMENT},
           {400, GPUHAL_STATUS_INVALID_ARGUMENT},  {500, GPUHAL_STATUS_NOT_FOUND},
           {600, GPUHAL_STATUS_UNAVAILABLE},       {801, GPUHAL_STATUS_UNIMPLEMENTED},
           {100, GPUHAL_STATUS_UNAVAILABLE},       {3, GPUHAL_STATUS_UNAVAILABLE},
           {4, GPUHAL_STATUS_UNAVAILABLE},         {909, GPUHAL_STATUS_DEADLINE_EXCEEDED},
           {800, GPUHAL_STATUS_PERMISSION_DENIED}, {999, GPUHAL_STATUS_UNKNOWN}};
  size_t i;
  for (i = 0; i < sizeof(m) / sizeof(m[0]); ++i)
    TU_CHECK_EQ_INT(gpuhal__cuda_error_code((CUresult)m[i].value), m[i].code);
  TU_CHECK(gpuhal__cuda_error_is_sticky((CUresult)700));
  TU_CHECK(gpuhal__cuda_error_is_sticky((CUresult)719));
  TU_CHECK(!gpuhal__cuda_error_is_sticky((CUresult)2));
  TU_CHECK(!gpuhal__cuda_error_is_sticky((CUresult)0));
  /* The documented example. */
  {
    gpuhal_status_t s = gpuhal__cuda_status(NULL, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc", "/x/y/gpuhal.h", 1234);
    TU_CHECK(strcmp(gpuhal_status_message(s),
                    "RESOURCE_EXHAUSTED: CUDA_ERROR_OUT_OF_MEMORY (out of memory) in cuMemAlloc at gpuhal.h:1234") ==
             0);
    gpuhal_status_free(s);
  }
  /* A value nobody knows still gives a useful message. */
  TU_CHECK_STATUS(gpuhal__cuda_status(NULL, (CUresult)12345, "cuFoo", "f.c", 9), GPUHAL_STATUS_UNKNOWN,
                  "CUresult 12345");
}

/* A driver whose cuGetErrorName/String fail (or are absent) falls back to our table. */
static CUresult failing_get_error(CUresult e, const char** s) {
  (void)e;
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult driver_get_name(CUresult e, const char** s) {
  (void)e;
  *s = "DRIVER_NAME";
  return CUDA_SUCCESS;
}
TU_TEST(error_names_from_driver_or_table) {
  gpuhal__cuda_symbols_t cu;
  memset(&cu, 0, sizeof(cu));
  cu.cuGetErrorName = failing_get_error;
  cu.cuGetErrorString = failing_get_error;
  TU_CHECK_STATUS(gpuhal__cuda_status(&cu, CUDA_ERROR_ILLEGAL_ADDRESS, "cuLaunchKernel", __FILE__, __LINE__),
                  GPUHAL_STATUS_INTERNAL, "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)");
  cu.cuGetErrorName = driver_get_name;
  TU_CHECK_STATUS(gpuhal__cuda_status(&cu, CUDA_ERROR_INVALID_HANDLE, "cuStreamQuery", __FILE__, __LINE__),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "DRIVER_NAME (invalid resource handle) in cuStreamQuery");
}

/* GPUHAL__CU evaluates the call through the table and names it. */
static CUresult fake_mem_alloc(CUdeviceptr* p, size_t n) {
  (void)n;
  *p = 0;
  return CUDA_ERROR_OUT_OF_MEMORY;
}
static gpuhal_status_t call_through_macro_return(const gpuhal__cuda_symbols_t* cu) {
  CUdeviceptr p;
  GPUHAL__CU_RETURN(cu, cuMemAlloc, (&p, 16));
  return gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "not reached");
}
TU_TEST(cu_macros) {
  gpuhal__cuda_symbols_t cu;
  CUdeviceptr p;
  memset(&cu, 0, sizeof(cu));
  cu.cuMemAlloc = fake_mem_alloc;
  TU_CHECK_STATUS(GPUHAL__CU(&cu, cuMemAlloc, (&p, 16)), GPUHAL_STATUS_RESOURCE_EXHAUSTED,
                  "CUDA_ERROR_OUT_OF_MEMORY (out of memory) in cuMemAlloc at test_status.c:");
  TU_CHECK_STATUS(call_through_macro_return(&cu), GPUHAL_STATUS_RESOURCE_EXHAUSTED, "in cuMemAlloc");
}

static const char* fake_nccl_string(ncclResult_t r) {
  (void)r;
  return "from nccl";
}
TU_TEST(nccl_errors) {
  gpuhal__nccl_symbols_t nccl;
  size_t i;
  for (i = 1; i < GPUHAL__ARRAY_SIZE(gpuhal__nccl_errors); ++i) {
    gpuhal_status_t s =
        gpuhal__nccl_status(NULL, (ncclResult_t)gpuhal__nccl_errors[i].value, "ncclAllReduce", __FILE__, 7);
    TU_CHECK_EQ_INT(gpuhal_status_code(s), gpuhal__nccl_errors[i].code);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), gpuhal__nccl_errors[i].name);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "in ncclAllReduce at test_status.c:7");
    gpuhal_status_free(s);
  }
  TU_CHECK(gpuhal__nccl_status(NULL, (ncclResult_t)0, "x", "y", 1) == NULL);
  memset(&nccl, 0, sizeof(nccl));
  nccl.ncclGetErrorString = fake_nccl_string;
  TU_CHECK_STATUS(gpuhal__nccl_status(&nccl, (ncclResult_t)4, "ncclSend", "f.c", 3), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "ncclInvalidArgument (from nccl) in ncclSend at f.c:3");
  TU_CHECK_STATUS(gpuhal__nccl_status(NULL, (ncclResult_t)77, "ncclSend", "f.c", 3), GPUHAL_STATUS_UNKNOWN,
                  "ncclResult_t 77");
}

TU_MAIN(TU_CASE(make_and_message), TU_CASE(annotate_keeps_cause_first), TU_CASE(clone_is_independent),
        TU_CASE(static_fallback_when_allocation_fails), TU_CASE(code_strings), TU_CASE(every_cuda_error_maps),
        TU_CASE(specific_cuda_mappings), TU_CASE(error_names_from_driver_or_table), TU_CASE(cu_macros),
        TU_CASE(nccl_errors))
