/*
 * gds.h - entry point of the gds backend (files through cuFile: GPUDirect
 * Storage).  The core includes this when the backend is built in
 * (NIXL_BUILTIN_GDS: CUDA's headers were found).
 */
#ifndef NIXL_BACKENDS_GDS_H
#define NIXL_BACKENDS_GDS_H

#include "nixl/backend.h"

const nixl_backend_ops_t *nixl_backend_gds_ops(void);

#endif
