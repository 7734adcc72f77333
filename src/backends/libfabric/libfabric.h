/*
 * libfabric.h - entry point of the libfabric backend (other hosts over EFA,
 * verbs or TCP; the same host through a provider's shm).
 *
 * The core includes this when the backend is built in (NIXL_BUILTIN_LIBFABRIC);
 * a module build exports NIXL_BACKEND_ENTRY instead, returning the same ops.
 */
#ifndef NIXL_BACKENDS_LIBFABRIC_H
#define NIXL_BACKENDS_LIBFABRIC_H

#include "nixl/backend.h"

const nixl_backend_ops_t *nixl_backend_libfabric_ops(void);

#endif
