/*
 * posix.h - entry point of the posix backend (files: io_uring, pread/pwrite).
 * The core includes this when the backend is built in (NIXL_BUILTIN_POSIX).
 */
#ifndef NIXL_BACKENDS_POSIX_H
#define NIXL_BACKENDS_POSIX_H

#include "nixl/backend.h"

const nixl_backend_ops_t *nixl_backend_posix_ops(void);

#endif
