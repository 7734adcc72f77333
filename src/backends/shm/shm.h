/*
 * shm.h - entry point of the shm backend (same host, DRAM, between processes).
 *
 * The core includes this when the backend is built in (NIXL_BUILTIN_SHM);
 * a module build exports NIXL_BACKEND_ENTRY instead, returning the same ops.
 */
#ifndef NIXL_BACKENDS_SHM_H
#define NIXL_BACKENDS_SHM_H

#include "nixl/backend.h"

const nixl_backend_ops_t *nixl_backend_shm_ops(void);

#endif
