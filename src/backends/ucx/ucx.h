/*
 * ucx.h - entry point of the ucx backend (other hosts, and this one, over
 * UCX's ucp: put/get and active messages).
 *
 * Always a loadable module (libnixl_backend_ucx.so, entry
 * nixl_backend_get_ops; src/backends/meson.build says why); its unit tests
 * build the sources themselves and call this.
 */
#ifndef NIXL_BACKENDS_UCX_H
#define NIXL_BACKENDS_UCX_H

#include "nixl/backend.h"

const nixl_backend_ops_t *nixl_backend_ucx_ops(void);

#endif
