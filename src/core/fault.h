/*
 * fault.h - fault injection between the core and a backend (NIXL_FAULT).
 *
 * NIXL_FAULT is a comma-separated list of rules BACKEND:OP:NTH:ACTION
 * (docs/faults.md).  When it names a backend, the instance gets a shadow
 * ops table that counts every call of each op and fails or delays the
 * calls the rules pick; other backends, and every backend when the variable
 * is unset, are called directly as before.
 */
#ifndef NIXL_CORE_FAULT_H
#define NIXL_CORE_FAULT_H

#include "core/agent.h"

/* Parse NIXL_FAULT completely (NIXL_ERR_INVALID_PARAM, logged with the bad
 * token, when it is malformed) and, when a rule names b's backend (or '*'),
 * replace b->ops and b->be by the wrapper.  Call once b->be was created and
 * before the core makes any other call on it; the wrapper's destroy op
 * destroys the real instance. */
nixl_status_t nixl_fault_install(nixl_backend_t *b);

#endif
