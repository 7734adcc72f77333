/*
 * fault.h - fault injection between the core and a backend (NIXL_FAULT).
 *
 * NIXL_FAULT is a comma-separated list of rules BACKEND:OP:NTH:ACTION
 * (docs/faults.md).  When it names a backend, the instance gets b->fault
 * and the core's doorway (be_call.h) hands the calls rules can name, and
 * the request ops, to the functions below, which count every call of each
 * op, fail or delay the calls the rules pick and call the real op.  Other
 * backends, and every backend when the variable is unset, are called
 * directly.
 */
#ifndef NIXL_CORE_FAULT_H
#define NIXL_CORE_FAULT_H

#include "core/agent.h"

/* Parse NIXL_FAULT completely (NIXL_ERR_INVALID_PARAM, logged with the bad
 * token, when it is malformed) and, when a rule names b's backend (or '*'),
 * set b->fault.  Call once b->be was created and before the core makes any
 * other call on it. */
nixl_status_t nixl_fault_install(nixl_backend_t *b);
/* Stop the helper thread and free b->fault (NULL: nothing); before the
 * real instance is destroyed. */
void nixl_fault_uninstall(nixl_backend_t *b);

/* The wrapped ops: be_call.h calls them only when b->fault is set. */
nixl_status_t nixl_fault_reg(nixl_backend_t *b, const nixl_be_region_t *region, void **md_out);
nixl_status_t nixl_fault_peer_open(nixl_backend_t *b, const nixl_be_peer_t *peer, const void *conn, size_t conn_len,
                                   void **peer_out);
nixl_status_t nixl_fault_rkey_load(nixl_backend_t *b, void *peer, const nixl_be_region_t *region, const void *rkey,
                                   size_t rkey_len, void **rmd_out);
nixl_status_t nixl_fault_xfer_prepare(nixl_backend_t *b, const nixl_be_xfer_t *x, nixl_be_req_t **req_out);
nixl_status_t nixl_fault_xfer_post(nixl_backend_t *b, nixl_be_req_t *req, const void *notif, size_t notif_len);
nixl_status_t nixl_fault_xfer_status(nixl_backend_t *b, nixl_be_req_t *req);
int nixl_fault_can_cancel(const nixl_backend_t *b);
void nixl_fault_xfer_cancel(nixl_backend_t *b, nixl_be_req_t *req);
void nixl_fault_xfer_release(nixl_backend_t *b, nixl_be_req_t *req);
nixl_status_t nixl_fault_notif_send(nixl_backend_t *b, void *peer, const void *msg, size_t len);
nixl_status_t nixl_fault_progress(nixl_backend_t *b);

#endif
