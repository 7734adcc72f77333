/*
 * be_call.h - the one doorway from the core to a backend.
 *
 * Every call the core makes on a backend instance goes through a function
 * here, and nowhere else does the core touch b->ops (backends.c creates
 * and destroys instances; that is all).  Each doorway does, in one place:
 *
 *   - the context rule: a call on a region's or a request's VRAM runs with
 *     that memory's recorded CUDA context current (nixl_be_ctx_enter of
 *     nixl/backend.h), on whatever thread, restored afterwards;
 *   - optional ops: a missing one answers what the ABI says it means
 *     (no key, no conn info, nothing to progress, cannot cancel);
 *   - fault injection (NIXL_FAULT, fault.c) on an unlikely branch: when a
 *     rule names the backend, b->fault is set and fault.c decides, calling
 *     the real op through BE_OP.
 *
 * Adding an op to the ABI means adding one function here (and, if faults
 * may be injected into it, one in fault.c).
 */
#ifndef NIXL_CORE_BE_CALL_H
#define NIXL_CORE_BE_CALL_H

#include "core/agent.h"
#include "core/fault.h"
#include "cuda/cuda.h"

/* The backend's own op with nothing around it: for the doorways and fault.c. */
#define BE_OP(b, op, ...) ((b)->ops->op((b)->be, __VA_ARGS__))
#define BE_OP0(b, op) ((b)->ops->op((b)->be))
/* Whether the instance's table has op (members appended after version 1
 * exist only in tables built with a header that has them). */
#define BE_HAS(b, op) NIXL_BACKEND_OPS_HAS((b)->ops, op)

static inline const char *be_name(const nixl_backend_t *b)
{
    return b->ops->name;
}

static inline uint32_t be_caps(const nixl_backend_t *b)
{
    return b->ops->caps;
}

/* Memory types it reaches on peers (reg_mem_types adds the local-only ones). */
static inline uint32_t be_mem_types(const nixl_backend_t *b)
{
    return b->ops->mem_types;
}

/* ---- the context rule ---- */

/* Bind ctx (NULL: nothing) for a call.  A failed bind was logged by the
 * CUDA layer; the call still runs and the backend reports what it meets. */
static inline nixl_be_ctx_scope_t be_ctx_enter(void *ctx)
{
    nixl_be_ctx_scope_t s;
    (void)nixl_be_ctx_enter(nixl_cuda_host(), ctx, &s);
    return s;
}

static inline void be_ctx_leave(const nixl_be_ctx_scope_t *s)
{
    nixl_be_ctx_leave(nixl_cuda_host(), s);
}

static inline void *be_region_ctx(const nixl_region_t *r)
{
    return r->mem_type == NIXL_MEM_VRAM ? r->cuda.ctx : NULL;
}

/* ---- registration (pool workers call these too) ---- */

static inline nixl_status_t be_reg(nixl_backend_t *b, const nixl_region_t *r, void **md_out)
{
    /* FILE: the fd (a path-mode region's own); dev_id names the file in keys. */
    nixl_be_region_t br = {.mem_type = r->mem_type,
                           .dev_id = r->mem_type == NIXL_MEM_FILE ? (uint32_t)r->fd : r->dev_id,
                           .addr = r->addr,
                           .len = r->len,
                           .cuda = r->cuda};
    nixl_be_ctx_scope_t s = be_ctx_enter(be_region_ctx(r));
    nixl_status_t st = nixl_unlikely(b->fault) ? nixl_fault_reg(b, &br, md_out) : BE_OP(b, reg, &br, md_out);
    be_ctx_leave(&s);
    return st;
}

static inline void be_dereg(nixl_backend_t *b, const nixl_region_t *r, void *md)
{
    nixl_be_ctx_scope_t s = be_ctx_enter(be_region_ctx(r));
    BE_OP(b, dereg, md);
    be_ctx_leave(&s);
}

/* No rkey_pack op: an empty key. */
static inline nixl_status_t be_rkey_pack(nixl_backend_t *b, void *md, void *buf, size_t *len)
{
    if (!b->ops->rkey_pack) {
        *len = 0;
        return NIXL_OK;
    }
    return BE_OP(b, rkey_pack, md, buf, len);
}

/* No conn_pack op: empty connection info. */
static inline nixl_status_t be_conn_pack(nixl_backend_t *b, void *buf, size_t *len)
{
    if (!b->ops->conn_pack) {
        *len = 0;
        return NIXL_OK;
    }
    return BE_OP(b, conn_pack, buf, len);
}

/* ---- peers ---- */

/* Version 2 gets the core's locality record (peer_open); version 1 only
 * the name (peer_load), and reads locality from its own conn info. */
static inline nixl_status_t be_peer_open_raw(nixl_backend_t *b, const nixl_be_peer_t *peer, const void *conn,
                                             size_t conn_len, void **peer_out)
{
    if (b->ops->abi_version >= 2)
        return BE_OP(b, peer_open, peer, conn, conn_len, peer_out);
    return BE_OP(b, peer_load, peer->name, conn, conn_len, peer_out);
}

static inline nixl_status_t be_peer_open(nixl_backend_t *b, const nixl_be_peer_t *peer, const void *conn,
                                         size_t conn_len, void **peer_out)
{
    if (nixl_unlikely(b->fault))
        return nixl_fault_peer_open(b, peer, conn, conn_len, peer_out);
    return be_peer_open_raw(b, peer, conn, conn_len, peer_out);
}

/* No peer_connect op: nothing to do ahead of a request. */
static inline nixl_status_t be_peer_connect(nixl_backend_t *b, void *peer)
{
    if (!BE_HAS(b, peer_connect))
        return NIXL_OK;
    return BE_OP(b, peer_connect, peer);
}

/* No peer_alive op: the backend cannot tell (-1). */
static inline int be_peer_alive(nixl_backend_t *b, void *peer)
{
    if (!peer || !BE_HAS(b, peer_alive))
        return -1;
    int v = BE_OP(b, peer_alive, peer);
    return v == 0 || v == 1 ? v : -1;
}

static inline void be_peer_unload(nixl_backend_t *b, void *peer)
{
    BE_OP(b, peer_unload, peer);
}

static inline nixl_status_t be_rkey_load(nixl_backend_t *b, void *peer, const nixl_be_region_t *region,
                                         const void *rkey, size_t rkey_len, void **rmd_out)
{
    if (nixl_unlikely(b->fault))
        return nixl_fault_rkey_load(b, peer, region, rkey, rkey_len, rmd_out);
    return BE_OP(b, rkey_load, peer, region, rkey, rkey_len, rmd_out);
}

static inline void be_rkey_unload(nixl_backend_t *b, void *rmd)
{
    BE_OP(b, rkey_unload, rmd);
}

/* ---- requests: ctx is the request's local VRAM context (NULL: none) ---- */

static inline nixl_status_t be_xfer_prepare(nixl_backend_t *b, void *ctx, const nixl_be_xfer_t *bx,
                                            nixl_be_req_t **req_out)
{
    nixl_be_ctx_scope_t s = be_ctx_enter(ctx);
    nixl_status_t st = nixl_unlikely(b->fault) ? nixl_fault_xfer_prepare(b, bx, req_out)
                                               : BE_OP(b, xfer_prepare, bx, req_out);
    be_ctx_leave(&s);
    return st;
}

/* Whether indexed requests reach the backend in their own form: not
 * without the op, nor with a fault rule on it (fault.c wraps the expanded
 * form only: a fault test sees the pieces it injects into). */
static inline int be_can_indexed(const nixl_backend_t *b)
{
    return !b->fault && BE_HAS(b, xfer_prepare_indexed);
}

static inline nixl_status_t be_xfer_prepare_indexed(nixl_backend_t *b, void *ctx, const nixl_be_xfer_indexed_t *bx,
                                                    nixl_be_req_t **req_out)
{
    nixl_be_ctx_scope_t s = be_ctx_enter(ctx);
    nixl_status_t st = BE_OP(b, xfer_prepare_indexed, bx, req_out);
    be_ctx_leave(&s);
    return st;
}

static inline nixl_status_t be_xfer_post(nixl_backend_t *b, void *ctx, nixl_be_req_t *req, const void *notif,
                                         size_t notif_len)
{
    nixl_be_ctx_scope_t s = be_ctx_enter(ctx);
    nixl_status_t st = nixl_unlikely(b->fault) ? nixl_fault_xfer_post(b, req, notif, notif_len)
                                               : BE_OP(b, xfer_post, req, notif, notif_len);
    be_ctx_leave(&s);
    return st;
}

static inline nixl_status_t be_xfer_status(nixl_backend_t *b, void *ctx, nixl_be_req_t *req)
{
    nixl_be_ctx_scope_t s = be_ctx_enter(ctx);
    nixl_status_t st = nixl_unlikely(b->fault) ? nixl_fault_xfer_status(b, req) : BE_OP(b, xfer_status, req);
    be_ctx_leave(&s);
    return st;
}

/* Whether deadlines can be enforced on this instance (be_xfer_cancel works). */
static inline int be_can_cancel(const nixl_backend_t *b)
{
    return nixl_unlikely(b->fault) ? nixl_fault_can_cancel(b) : BE_HAS(b, xfer_cancel);
}

static inline void be_xfer_cancel(nixl_backend_t *b, void *ctx, nixl_be_req_t *req)
{
    nixl_be_ctx_scope_t s = be_ctx_enter(ctx);
    if (nixl_unlikely(b->fault))
        nixl_fault_xfer_cancel(b, req);
    else if (BE_HAS(b, xfer_cancel))
        BE_OP(b, xfer_cancel, req);
    be_ctx_leave(&s);
}

static inline void be_xfer_release(nixl_backend_t *b, void *ctx, nixl_be_req_t *req)
{
    nixl_be_ctx_scope_t s = be_ctx_enter(ctx);
    if (nixl_unlikely(b->fault))
        nixl_fault_xfer_release(b, req);
    else
        BE_OP(b, xfer_release, req);
    be_ctx_leave(&s);
}

/* ---- notifications and progress ---- */

/* Whether the instance sends standalone notifications. */
static inline int be_can_notify(const nixl_backend_t *b)
{
    return (b->ops->caps & NIXL_CAP_NOTIF) && b->ops->notif_send;
}

static inline nixl_status_t be_notif_send(nixl_backend_t *b, void *peer, const void *msg, size_t len)
{
    if (!b->ops->notif_send)
        return NIXL_ERR_NOT_SUPPORTED;
    if (nixl_unlikely(b->fault))
        return nixl_fault_notif_send(b, peer, msg, len);
    return BE_OP(b, notif_send, peer, msg, len);
}

/* No progress op (and no fault wrapper holding notifications): nothing to do. */
static inline nixl_status_t be_progress(nixl_backend_t *b)
{
    if (nixl_unlikely(b->fault))
        return nixl_fault_progress(b);
    return BE_HAS(b, progress) ? BE_OP0(b, progress) : NIXL_OK;
}

/* ---- description (nixl-info -t) ---- */

static inline nixl_status_t be_describe(nixl_backend_t *b, char *buf, size_t *len)
{
    if (!BE_HAS(b, describe))
        return NIXL_ERR_NOT_SUPPORTED;
    return BE_OP(b, describe, buf, len);
}

#endif
