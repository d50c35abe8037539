/* devices: lists the CUDA devices gpuhal sees and their properties, like deviceQuery.
 *
 *   cc -I.. devices.c -o devices -ldl -lpthread && ./devices
 *
 * GPUHAL_CUDA_LIBRARY picks the driver library (e.g. the softcuda CPU stand-in). */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>

static void print_uuid(const uint8_t uuid[16]) {
  int i;
  printf("GPU-");
  for (i = 0; i < 16; ++i) {
    printf("%02x", uuid[i]);
    if (i == 3 || i == 5 || i == 7 || i == 9) printf("-");
  }
}

static const char* yes_no(int value) { return value ? "yes" : "no"; }

static void print_device(const gpuhal_device_info_t* d) {
  printf("\nDevice %d: \"%s\"\n", d->ordinal, d->name);
  printf("  UUID:                                %s", "");
  print_uuid(d->uuid);
  printf("\n");
  printf("  PCI bus id:                          %s\n", d->pci_bus_id);
  printf("  Compute capability:                  %d.%d\n", d->compute_capability_major, d->compute_capability_minor);
  printf("  Multiprocessors:                     %d\n", d->sm_count);
  printf("  Total global memory:                 %.0f MiB (%llu bytes)\n", (double)d->total_memory / (1024.0 * 1024.0),
         (unsigned long long)d->total_memory);
  printf("  L2 cache:                            %d bytes\n", d->l2_cache_size);
  printf("  Warp size:                           %d\n", d->warp_size);
  printf("  Max threads per block:               %d\n", d->max_threads_per_block);
  printf("  Max block dimensions:                (%d, %d, %d)\n", d->max_block_dim[0], d->max_block_dim[1],
         d->max_block_dim[2]);
  printf("  Max grid dimensions:                 (%d, %d, %d)\n", d->max_grid_dim[0], d->max_grid_dim[1],
         d->max_grid_dim[2]);
  printf("  Shared memory per block:             %d bytes (opt-in up to %d)\n", d->max_shared_memory_per_block,
         d->max_shared_memory_per_block_optin);
  printf("  Async copy engines:                  %d\n", d->async_engine_count);
  printf("  Unified addressing:                  %s\n", yes_no(d->unified_addressing));
  printf("  Managed memory:                      %s (concurrent access: %s)\n", yes_no(d->managed_memory),
         yes_no(d->concurrent_managed_access));
  printf("  Stream-ordered memory pools:         %s\n", yes_no(d->memory_pools_supported));
  printf("  CUDA graphs:                         %s\n", yes_no(d->graphs_supported));
}

int main(void) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_status_t status;
  gpuhal_device_info_t info;
  int count = 0, i, version;

  status = gpuhal_driver_create(NULL, &driver);
  if (!status) status = gpuhal_driver_device_count(driver, &count);
  if (status) {
    fprintf(stderr, "devices: %s\n", gpuhal_status_message(status));
    gpuhal_status_free(status);
    gpuhal_driver_release(driver);
    return 1;
  }
  printf("gpuhal %s\n", GPUHAL_VERSION_STRING);
  printf("CUDA driver library:                   %s\n", gpuhal_driver_cuda_library(driver));
  printf("Features: memory pools %s, kernel parameter info %s, peer access %s, contexts %s, NCCL %s\n",
         yes_no(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_MEMORY_POOLS)),
         yes_no(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_KERNEL_PARAM_INFO)),
         yes_no(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_PEER_ACCESS)),
         yes_no(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_CONTEXT_CREATE)),
         yes_no(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_NCCL)));
  printf("Detected %d CUDA device%s\n", count, count == 1 ? "" : "s");
  for (i = 0; i < count; ++i) {
    status = gpuhal_driver_device_info(driver, i, &info);
    if (status) {
      fprintf(stderr, "devices: %s\n", gpuhal_status_message(status));
      gpuhal_status_free(status);
      gpuhal_driver_release(driver);
      return 1;
    }
    if (i == 0) {
      version = info.driver_version;
      printf("CUDA driver version:                   %d.%d\n", version / 1000, (version % 1000) / 10);
    }
    print_device(&info);
  }
  gpuhal_driver_release(driver);
  return 0;
}
