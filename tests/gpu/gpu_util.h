/*
 * gpu_util.h - the CUDA driver for GPU tests (tests/gpu, the conformance
 * battery's VRAM mode): loaded with dlopen into the same table libnixl uses
 * (nixl/cuda_api.h), so tests need no CUDA library at link time and skip
 * with a reason where there is no driver or too few GPUs.
 *
 * Every helper makes the device's primary context current for its own call
 * and restores whatever the calling thread had: a test decides what its
 * threads have current, the helpers never change it behind its back.
 * Failures print the call and the CUDA error, then exit(1).
 */
#ifndef NIXL_TESTS_GPU_UTIL_H
#define NIXL_TESTS_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "nixl/cuda_api.h"

#define GPU_MAX_DEVICES 16

extern nixl_cuda_api_t gpu_cu;

/* Load the driver: the number of GPUs, or 0 with *why saying what is
 * missing (no driver, cuInit failed, no device). */
int gpu_init(char *why, size_t cap);
CUcontext gpu_ctx(int dev);
/* Make dev's primary context current on this thread (for tests that
 * set up the "wrong" context on purpose). */
void gpu_bind(int dev);
/* The PCI bus id of dev, "0000:1b:00.0". */
const char *gpu_bus_id(int dev);

/* cuMemAlloc on dev. */
void *gpu_alloc(int dev, size_t len);
void gpu_free(int dev, void *p);

/* VMM memory: chunks separate cuMemCreate allocations (exportable as POSIX
 * file descriptors) mapped back to back in one reservation, so a region
 * can span several mappings as with PyTorch's expandable segments. */
typedef struct gpu_vmm {
    int dev;
    CUdeviceptr va;
    size_t size, chunk;
    int nchunks;
    CUmemGenericAllocationHandle h[8];
} gpu_vmm_t;
void *gpu_alloc_vmm(int dev, size_t len, int chunks, gpu_vmm_t *out);
void gpu_free_vmm(gpu_vmm_t *v);

/* Host <-> device copies (synchronous). */
void gpu_put(void *dst, const void *src, size_t len);
void gpu_get(void *dst, const void *src, size_t len);
void gpu_set(void *dst, uint8_t v, size_t len);

#endif
