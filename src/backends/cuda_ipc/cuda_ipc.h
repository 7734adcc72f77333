/*
 * cuda_ipc.h - entry point of the cuda_ipc backend (same host, VRAM, between
 * processes and between agents of one process).
 *
 * Built into libnixl when CUDA's headers were found (NIXL_BUILTIN_CUDA_IPC);
 * the core includes this header and lists the ops.
 */
#ifndef NIXL_BACKENDS_CUDA_IPC_H
#define NIXL_BACKENDS_CUDA_IPC_H

#include "nixl/backend.h"

const nixl_backend_ops_t *nixl_backend_cuda_ipc_ops(void);

#endif
