/* The intrusive pairing heap (gpuhal__heap_t, internal.h): whatever the order of pushes,
 * removals from anywhere and pops, pops come out smallest first and every node left is
 * still found, checked against a plain array; and its key comparisons stay O(n log n). */
#define TU_COUNT_WORK 1
#include "test_internals.h"
#include "test_util.h"

enum { TH_NODES = 3000 };

typedef struct th_item_s {
  gpuhal__heap_node_t node;
  int in; /* in the heap */
} th_item_t;

static th_item_t th_items[TH_NODES];
static uint32_t th_seed = 12345;

static uint32_t th_rand(void) {
  th_seed = th_seed * 1664525u + 1013904223u;
  return th_seed >> 8;
}

/* The smallest key of the items in the heap, by a scan (UINT64_MAX: none). */
static uint64_t th_min_in(void) {
  uint64_t min = UINT64_MAX;
  int i;
  for (i = 0; i < TH_NODES; ++i)
    if (th_items[i].in && th_items[i].node.key < min) min = th_items[i].node.key;
  return min;
}

TU_TEST(random_pushes_removals_and_pops) {
  gpuhal__heap_t heap;
  int round, in = 0;
  (void)tu_softcuda;
  heap.root = NULL;
  memset(th_items, 0, sizeof(th_items));
  for (round = 0; round < 20000; ++round) {
    uint32_t r = th_rand() % 10;
    th_item_t* it = &th_items[th_rand() % TH_NODES];
    if (r < 5 && !it->in) {
      it->node.key = th_rand() % 500; /* repeated keys too */
      gpuhal__heap_push(&heap, &it->node);
      it->in = 1;
      in++;
    } else if (r < 7 && it->in) {
      gpuhal__heap_remove(&heap, &it->node);
      it->in = 0;
      in--;
    } else if (r >= 7 && heap.root) {
      uint64_t min = th_min_in();
      gpuhal__heap_node_t* top = gpuhal__heap_pop(&heap);
      TU_REQUIRE(top != NULL);
      TU_CHECK_EQ_INT(top->key, min);
      GPUHAL__CONTAINER_OF(top, th_item_t, node)->in = 0;
      in--;
    }
    TU_CHECK_EQ_INT(heap.root ? heap.root->key : UINT64_MAX, th_min_in());
  }
  /* What is left comes out in order, all of it. */
  {
    uint64_t last = 0;
    gpuhal__heap_node_t* top;
    while ((top = gpuhal__heap_pop(&heap)) != NULL) {
      TU_CHECK(top->key >= last);
      last = top->key;
      GPUHAL__CONTAINER_OF(top, th_item_t, node)->in = 0;
      in--;
    }
    TU_CHECK_EQ_INT(in, 0);
    TU_CHECK_EQ_INT(th_min_in(), UINT64_MAX);
  }
}

TU_TEST(comparisons_stay_n_log_n) {
  gpuhal__heap_t heap;
  unsigned long long compares;
  int i;
  heap.root = NULL;
  memset(th_items, 0, sizeof(th_items));
  tu_count_watch("order_compare");
  /* Shuffled keys in, every other one removed from where it is, the rest popped. */
  for (i = 0; i < TH_NODES; ++i) {
    th_items[i].node.key = th_rand();
    gpuhal__heap_push(&heap, &th_items[i].node);
  }
  for (i = 0; i < TH_NODES; i += 2) gpuhal__heap_remove(&heap, &th_items[i].node);
  for (i = 1; i < TH_NODES; i += 2) TU_REQUIRE(gpuhal__heap_pop(&heap) != NULL);
  TU_CHECK(heap.root == NULL);
  compares = tu_counted();
  tu_count_watch(NULL);
  fprintf(stderr, "  %d nodes: %llu key comparisons\n", TH_NODES, compares);
  TU_CHECK(compares <= 8ull * TH_NODES * 12); /* 8 n log2 n */
}

TU_MAIN(TU_CASE(random_pushes_removals_and_pops), TU_CASE(comparisons_stay_n_log_n))
