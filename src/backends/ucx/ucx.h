/*
 * ucx.h - entry point of the ucx backend (other hosts, and this one, over
 * UCX's ucp: put/get and active messages).
 *
 * The core includes this when the backend is built in (NIXL_BUILTIN_UCX).
 */
#ifndef NIXL_BACKENDS_UCX_H
#define NIXL_BACKENDS_UCX_H

#include "nixl/backend.h"

const nixl_backend_ops_t *nixl_backend_ucx_ops(void);

#endif
