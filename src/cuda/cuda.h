/*
 * cuda.h - the CUDA driver, loaded at run time.
 *
 * libnixl has no link-time CUDA dependency: nixl_cuda_load() dlopens
 * libcuda.so.1 (NIXL_CUDA_LIB) once and resolves the calls listed in
 * include/nixl/cuda_api.h.  Without a driver every VRAM call gets
 * NIXL_ERR_NO_CUDA and the rest of the library works.  Built without
 * CUDA's headers, the same calls compile to "no CUDA".
 *
 * The helpers here implement the context rule of DESIGN.md: memory is
 * classified from pointer attributes (which answer on any thread), and a
 * caller binds the memory's recorded context before touching it, restoring
 * the thread's previous context after.
 */
#ifndef NIXL_CUDA_CUDA_H
#define NIXL_CUDA_CUDA_H

#include <stdint.h>

#include "nixl.h"
#include "nixl/backend.h"

/* The loaded table (const nixl_cuda_api_t *), or NULL with NIXL_ERR_NO_CUDA. */
nixl_status_t nixl_cuda_load(const void **api_out);
/* Classify [addr, addr+len): *is_device 1 when it is device memory of one
 * allocation/mapping, with *out filled.  Any thread, any current context. */
nixl_status_t nixl_cuda_ptr_query(uint64_t addr, uint64_t len, nixl_be_cuda_region_t *out, int *is_device);
/* Bind ctx on this thread; *saved receives the previous current context. */
nixl_status_t nixl_cuda_ctx_bind(void *ctx, void **saved);
void nixl_cuda_ctx_restore(void *saved);
/* "CUDA_ERROR_X: text" for a CUresult (static buffer per thread). */
const char *nixl_cuda_strerror(int cu_result);
/* The host-services table handed to backends. */
const nixl_host_cuda_t *nixl_cuda_host(void);

#endif
