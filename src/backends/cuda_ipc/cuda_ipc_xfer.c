/*
 * cuda_ipc_xfer.c - requests: prepare, post, status, release.
 *
 * prepare does all the per-descriptor work once.  The pieces are grouped
 * by the context owning their local memory (the context rule: a context's
 * stream copies its own memory; with several GPUs in one process a request
 * follows its descriptors).  Each remote key is imported into that context
 * on first use.  A piece of at least NIXL_CUDA_IPC_CE_MIN bytes goes to the
 * copy engines; the small ones, when there are at least
 * NIXL_CUDA_IPC_KERNEL_MIN of them, go into one descriptor table (cut at
 * CIP_KERNEL_PIECE_MAX bytes) uploaded to device memory once and re-used by
 * every post: a post of 221,184 KV pieces is one kernel launch, not 221,184
 * copy calls of ~3 us each.  The table is written straight into pinned
 * host memory and uploaded on the group's stream without waiting (the
 * launch, later on that stream, is ordered after it); tables come from a
 * per-context pool that released requests refill, so a prepare allocates
 * nothing on the GPU and never synchronizes.
 *
 * post issues the copies and the kernel on each group's stream and records
 * an event.  A request without a notification completes when status sees
 * its events done.  One with a notification is handed to the instance's
 * completion thread, which waits for the events and only then sends the
 * notification: the target never sees it before the bytes, and it leaves
 * even when the application does not poll (a prefill worker that posts and
 * moves on).  release of a request in flight waits for its events (the GPU
 * cannot be told to stop) and never sends its notification.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ipc_int.h"

#define CIP_KERNEL_THREADS 256 /* 8 warps: one piece per warp */

static nixl_status_t cip_add_ce(cip_group_t *g, uint64_t dst, uint64_t src, uint64_t len)
{
    if (NIXL_ARRAY_RESERVE(g->ce, g->ce_cap, g->nce + 1, 64))
        return NIXL_ERR_NO_MEMORY;
    g->ce[g->nce++] = (cip_copy_t){.dst = dst, .src = src, .len = len};
    return NIXL_OK;
}

/* Room for n kernel pieces in the group's table (its pieces kept). */
static nixl_status_t cip_kt_reserve(cip_be_t *be, cip_group_t *g, size_t n)
{
    if (g->tab && g->tab->cap >= n)
        return NIXL_OK;
    size_t want = g->tab && g->tab->cap * 2 > n ? g->tab->cap * 2 : n;
    cip_table_t *t = cip_table_get(be, g->cx, want);
    if (!t)
        return NIXL_ERR_NO_MEMORY;
    if (g->tab) {
        memcpy(t->host, g->tab->host, g->nk * sizeof(cip_piece_t));
        cip_table_put(be, g->cx, g->tab); /* never uploaded: nothing reads it */
    }
    g->tab = t;
    return NIXL_OK;
}

/* Too few small pieces for a launch: copy engines.  Enough: cut them at
 * CIP_KERNEL_PIECE_MAX so one warp never carries a long piece alone. */
static nixl_status_t cip_group_finish_kernel(cip_be_t *be, cip_group_t *g)
{
    if (g->nk == 0) {
        if (g->tab) /* reserved for pieces that all went to the copy engines */
            cip_table_put(be, g->cx, g->tab);
        g->tab = NULL;
        return NIXL_OK;
    }
    const cip_piece_t *kt = g->tab->host;
    if (g->nk < be->kernel_min || !g->cx->copy_fn) {
        for (size_t i = 0; i < g->nk; i++)
            if (cip_add_ce(g, kt[i].dst, kt[i].src, kt[i].len) != NIXL_OK)
                return NIXL_ERR_NO_MEMORY;
        cip_table_put(be, g->cx, g->tab);
        g->tab = NULL;
        g->nk = 0;
        return NIXL_OK;
    }
    size_t n = 0;
    for (size_t i = 0; i < g->nk; i++)
        n += (size_t)((kt[i].len + CIP_KERNEL_PIECE_MAX - 1) / CIP_KERNEL_PIECE_MAX);
    if (n != g->nk) {
        cip_table_t *t = cip_table_get(be, g->cx, n);
        if (!t)
            return NIXL_ERR_NO_MEMORY;
        size_t k = 0;
        for (size_t i = 0; i < g->nk; i++)
            for (uint64_t off = 0; off < kt[i].len; off += CIP_KERNEL_PIECE_MAX) {
                uint64_t left = kt[i].len - off;
                t->host[k++] = (cip_piece_t){.src = kt[i].src + off, .dst = kt[i].dst + off,
                                             .len = left < CIP_KERNEL_PIECE_MAX ? left : CIP_KERNEL_PIECE_MAX};
            }
        cip_table_put(be, g->cx, g->tab);
        g->tab = t;
        g->nk = n;
    }
    return NIXL_OK;
}

/* Upload the table and make the event, in the group's context (current).
 * The upload is asynchronous from pinned memory on the group's stream: the
 * kernel launched there at post reads the table after it.  The event is
 * recorded behind the upload, so a release that never posted still knows
 * when the table is free again. */
static nixl_status_t cip_group_upload(cip_be_t *be, cip_group_t *g)
{
    const nixl_cuda_api_t *cu = be->cu;
    CUresult rc = cu->cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING);
    if (rc != CUDA_SUCCESS) {
        g->done = NULL;
        CIP_ERROR(be, "cuda_ipc: cuEventCreate on GPU %d: %s", g->cx->device, cip_cu_err(be, rc));
        return NIXL_ERR_BACKEND;
    }
    if (g->nk == 0)
        return NIXL_OK;
    size_t bytes = g->tab_bytes ? g->tab_bytes : g->nk * sizeof(cip_piece_t);
    rc = cu->cuMemcpyHtoDAsync(g->tab->dev, g->tab->host, bytes, g->cx->stream);
    if (rc == CUDA_SUCCESS)
        rc = cu->cuEventRecord(g->done, g->cx->stream);
    if (rc != CUDA_SUCCESS) {
        CIP_ERROR(be, "cuda_ipc: uploading a table of %zu pieces to GPU %d: %s", g->nk, g->cx->device,
                  cip_cu_err(be, rc));
        /* Whatever was queued must be over before the table is reused. */
        cu->cuStreamSynchronize(g->cx->stream);
        return NIXL_ERR_BACKEND;
    }
    size_t warps_per_block = CIP_KERNEL_THREADS / 32;
    size_t blocks = (g->nk + warps_per_block - 1) / warps_per_block;
    g->blocks = blocks > 0x7fffffffu ? 0x7fffffffu : (unsigned)blocks;
    return NIXL_OK;
}

/* Free what a group holds (its table and event in its own context); the
 * group keeps its context and copy state. */
static void cip_group_clear(cip_be_t *be, cip_group_t *g)
{
    nixl_be_ctx_scope_t scope = {NULL, 0};
    if ((g->tab || g->done) && nixl_be_ctx_enter(be->host->cuda, (CUcontext)g->ctx, &scope) == NIXL_OK) {
        if (g->tab) {
            /* The upload (recorded on done) or the last post's kernel may
             * still read the table: done, once passed, covers both. */
            if (g->done)
                be->cu->cuEventSynchronize(g->done);
            cip_table_put(be, g->cx, g->tab);
            g->tab = NULL;
        }
        if (g->done)
            be->cu->cuEventDestroy(g->done);
        nixl_be_ctx_leave(be->host->cuda, &scope);
    }
    free(g->ce);
    cip_ctx_t *cx = g->cx;
    void *ctx = g->ctx;
    int device = g->device;
    memset(g, 0, sizeof(*g));
    g->cx = cx;
    g->ctx = ctx;
    g->device = device;
}

static void cip_req_free(cip_be_t *be, cip_req_t *r)
{
    for (size_t i = 0; i < r->ngroups; i++)
        cip_group_clear(be, &r->groups[i]);
    samehost_notif_msg_free(&r->notif);
    free(r);
}

/* A request of this backend to peer, nothing built yet; NULL: no memory. */
static cip_req_t *cip_req_new(cip_be_t *be, void *peer, nixl_op_t op)
{
    cip_req_t *r = calloc(1, sizeof(*r));
    if (r) {
        r->be = be;
        r->peer = peer;
        r->write = op == NIXL_OP_WRITE;
    }
    return r;
}

/* The context a piece is copied in: its local memory's (the context rule),
 * or, for local DRAM, the one chosen for the peer's GPU.  NULL on failure. */
static void *cip_piece_ctx(cip_be_t *be, const cip_req_t *r, const nixl_be_iov_t *v, int *device)
{
    const cip_reg_t *l = v->lmd;
    if (!r->host_local) {
        *device = l->device;
        return l->ctx;
    }
    return cip_host_ctx(be, v->rmd, device);
}

static cip_group_t *cip_group_of(cip_req_t *r, void *ctx, int device)
{
    for (size_t i = 0; i < r->ngroups; i++)
        if (r->groups[i].ctx == ctx)
            return &r->groups[i];
    if (r->ngroups == CIP_MAX_CTX)
        return NULL;
    cip_group_t *g = &r->groups[r->ngroups++];
    g->ctx = ctx;
    g->device = device;
    return g;
}

/* Every piece of one group: import its remote key here, choose its way.
 * What a piece's group and remote view depend on (its registrations) is
 * looked at when they change from the previous piece's; with one group
 * (all local memory in one context, the usual request) every piece is
 * the group's. */
static nixl_status_t cip_group_build(cip_be_t *be, cip_req_t *r, cip_group_t *g, const nixl_be_xfer_t *x)
{
    if (!be->map_peers && !r->peer->same_process) {
        snprintf(r->cause, sizeof(r->cause), "NIXL_CUDA_IPC_MAP=0: peers' memory is never mapped here");
        return NIXL_ERR_NO_PATH;
    }
    cip_rmd_t *last_rmd = NULL;
    const void *last_l = NULL, *last_r = NULL;
    const int single = r->ngroups == 1, write = x->op == NIXL_OP_WRITE;
    int mine = 0;
    cip_view_t view = {0};
    /* What every piece's choice depends on, in locals: the loop's stores
     * into the table (uint64_t fields) could otherwise alias them. */
    const uint64_t ce_min = be->ce_min;
    const int kernel_ctx = g->cx->copy_fn && !r->host_local;
    if (r->peer->same_process || r->host_local)
        g->ce_uva = 1;
    /* Kernel pieces usually are all of them: one table up front. */
    if (single && kernel_ctx && cip_kt_reserve(be, g, x->count) != NIXL_OK)
        return NIXL_ERR_NO_MEMORY;
    cip_piece_t *kt = g->tab ? g->tab->host : NULL;
    size_t nk = g->nk, cap = g->tab ? g->tab->cap : 0;
    nixl_status_t st = NIXL_OK;
    for (size_t i = 0, n = x->count; i < n; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        if (nixl_unlikely(v->lmd != last_l || v->rmd != last_r)) {
            int dev;
            mine = single || cip_piece_ctx(be, r, v, &dev) == g->ctx;
            last_l = v->lmd;
            last_r = v->rmd;
        }
        if (!mine)
            continue;
        cip_rmd_t *rmd = v->rmd;
        if (nixl_unlikely(rmd != last_rmd)) {
            st = cip_rmd_view(be, rmd, g->cx, &view, r->cause, sizeof(r->cause));
            if (st != NIXL_OK)
                goto out;
            last_rmd = rmd;
        }
        uint64_t remote = view.base + (v->raddr - rmd->alloc_base), len = v->len;
        uint64_t dst = write ? remote : v->laddr, src = write ? v->laddr : remote;
        /* Host memory: copy engines only, with the unified-address copy
         * (pageable memory works; pinned memory runs at full speed).
         * Kernel candidates are kept whole until finish knows there are
         * enough of them. */
        if (nixl_likely(len < ce_min && view.kernel_ok && kernel_ctx)) {
            if (nixl_unlikely(nk == cap)) {
                g->nk = nk;
                if ((st = cip_kt_reserve(be, g, nk + 1)) != NIXL_OK)
                    goto out;
                kt = g->tab->host;
                cap = g->tab->cap;
            }
            kt[nk++] = (cip_piece_t){.src = src, .dst = dst, .len = len};
        } else if ((st = cip_add_ce(g, dst, src, len)) != NIXL_OK) {
            goto out;
        }
    }
out:
    g->nk = nk;
    if (st != NIXL_OK)
        return st;
    st = cip_group_finish_kernel(be, g);
    if (st == NIXL_OK)
        st = cip_group_upload(be, g);
    return st;
}

/* The pieces of one group for the staging thread: dst = remote, src = local. */
static nixl_status_t cip_group_build_staged(cip_be_t *be, cip_req_t *r, cip_group_t *g, const nixl_be_xfer_t *x)
{
    for (size_t i = 0; i < x->count; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        int dev;
        if (cip_piece_ctx(be, r, v, &dev) == g->ctx && cip_add_ce(g, v->raddr, v->laddr, v->len) != NIXL_OK)
            return NIXL_ERR_NO_MEMORY;
    }
    return NIXL_OK;
}

/* The peer's memory cannot be mapped here: stage through host memory, a
 * fallback the user sees (path, count, warning) and may refuse. */
static nixl_status_t cip_prepare_staged(cip_be_t *be, cip_req_t *r, const nixl_be_xfer_t *x)
{
    const char *allow = be->host->config_get("NIXL_ALLOW_FALLBACK");
    int ok = 1;
    if (allow && *allow && nixl_param_parse_bool(allow, &ok) == 0 && !ok) {
        CIP_ERROR(be, "cuda_ipc: VRAM of peer %s cannot be reached directly (%s) and NIXL_ALLOW_FALLBACK=0 refuses "
                      "the staged path",
                  r->peer->name, r->cause);
        return NIXL_ERR_NO_PATH;
    }
    for (size_t i = 0; i < r->ngroups; i++)
        cip_group_clear(be, &r->groups[i]); /* what the direct build made */
    for (size_t i = 0; i < r->ngroups; i++) {
        nixl_status_t st = cip_group_build_staged(be, r, &r->groups[i], x);
        if (st != NIXL_OK)
            return st;
    }
    r->staged = 1;
    CIP_INFO(be, "cuda_ipc: requests to peer %s go through host memory (%s): %s", r->peer->name, CIP_PATH_STAGED,
             r->cause);
    return NIXL_OK;
}

nixl_status_t cip_xfer_prepare(void *bev, const nixl_be_xfer_t *x, nixl_be_req_t **req_out)
{
    cip_be_t *be = bev;
    if (!x || !req_out)
        return NIXL_ERR_NULL;
    if (x->op != NIXL_OP_READ && x->op != NIXL_OP_WRITE) {
        CIP_ERROR(be, "cuda_ipc: unknown transfer op %d", (int)x->op);
        return NIXL_ERR_INVALID_PARAM;
    }
    if ((x->local_mem != NIXL_MEM_VRAM && x->local_mem != NIXL_MEM_DRAM) || x->remote_mem != NIXL_MEM_VRAM) {
        CIP_ERROR(be, "cuda_ipc: transfers from local VRAM or DRAM to a peer's VRAM only (got %d -> %d)",
                  (int)x->local_mem, (int)x->remote_mem);
        return NIXL_ERR_MEM_TYPE;
    }
    if (!x->peer || !x->iov || x->count == 0)
        return x->count == 0 ? NIXL_ERR_ZERO_LENGTH : NIXL_ERR_NULL;
    if (!cip_api(be))
        return NIXL_ERR_NO_CUDA;
    cip_req_t *r = cip_req_new(be, x->peer, x->op);
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->host_local = x->local_mem == NIXL_MEM_DRAM;
    nixl_status_t st = NIXL_OK;
    /* The core resolved every piece inside registrations of this backend on
     * both sides (backend.h: a backend may trust its iovs), so ranges are
     * not checked again; what is looked at is per registration, when the
     * pair changes from the previous piece's (it rarely does). */
    const void *last_l = NULL, *last_r = NULL;
    for (size_t i = 0; i < x->count; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        if (nixl_likely(v->lmd == last_l && v->rmd == last_r))
            continue;
        const cip_reg_t *l = v->lmd;
        const cip_rmd_t *rm = v->rmd;
        if (!l || !rm || rm->peer != x->peer || l->host != r->host_local) {
            CIP_ERROR(be, "cuda_ipc: piece %zu of a transfer has no registration of this backend on both sides", i);
            st = NIXL_ERR_INVALID_PARAM;
            goto err;
        }
        last_l = l;
        last_r = rm;
        int dev = 0;
        void *ctx = cip_piece_ctx(be, r, v, &dev);
        if (!ctx) {
            st = NIXL_ERR_NO_CUDA;
            goto err;
        }
        if (!cip_group_of(r, ctx, dev)) {
            CIP_ERROR(be, "cuda_ipc: a request may span at most %d CUDA contexts", CIP_MAX_CTX);
            st = NIXL_ERR_TOO_BIG;
            goto err;
        }
    }
    int kernel = 0;
    /* Every group's copy state first: a staged request needs them all. */
    for (size_t i = 0; i < r->ngroups && st == NIXL_OK; i++) {
        cip_group_t *g = &r->groups[i];
        nixl_be_ctx_scope_t scope = {NULL, 0};
        st = nixl_be_ctx_enter(be->host->cuda, (CUcontext)g->ctx, &scope);
        if (st != NIXL_OK)
            break;
        g->cx = cip_ctx_get(be, g->ctx, g->device);
        nixl_be_ctx_leave(be->host->cuda, &scope);
        if (!g->cx)
            st = NIXL_ERR_BACKEND;
    }
    for (size_t i = 0; i < r->ngroups && st == NIXL_OK; i++) {
        cip_group_t *g = &r->groups[i];
        nixl_be_ctx_scope_t scope = {NULL, 0};
        st = nixl_be_ctx_enter(be->host->cuda, (CUcontext)g->ctx, &scope);
        if (st != NIXL_OK)
            break;
        st = cip_group_build(be, r, g, x);
        nixl_be_ctx_leave(be->host->cuda, &scope);
        kernel |= g->nk > 0;
    }
    if (st == NIXL_ERR_NO_PATH)
        st = cip_prepare_staged(be, r, x);
    if (st != NIXL_OK)
        goto err;
    r->hdr.path = r->staged ? CIP_PATH_STAGED : kernel ? CIP_PATH_KERNEL : CIP_PATH_CE;
    r->hdr.fallback = (uint32_t)r->staged;
    r->status = NIXL_OK;
    *req_out = &r->hdr;
    return NIXL_OK;
err:
    cip_req_free(be, r);
    return st;
}

/* ---- indexed requests in their own form ----
 *
 * The kernel computes every piece's addresses from the layers' bases and
 * the slots (nixl_cuda_ipc_copy_indexed), so preparing costs one table of
 * 16 bytes per layer and 8 per slot, written into pinned memory and
 * uploaded without waiting: no per-piece work on the host.  Requests this
 * form does not suit are declined (NIXL_ERR_NOT_SUPPORTED) and the core
 * makes them in pieces, which cip_xfer_prepare then routes as usual:
 * local DRAM, pieces for the copy engines (item >= ce_min), too few for a
 * launch, no kernel, local layers in several contexts, peer memory that
 * cannot be mapped here (staged, with its cause) or not by a kernel. */

/* Whether the layers' local memory is all in one context: that context,
 * else NULL. */
static void *cip_ix_ctx(const nixl_be_xfer_indexed_t *x, int *device)
{
    const cip_reg_t *first = x->layer[0].lmd;
    for (size_t l = 1; l < x->layers; l++) {
        const cip_reg_t *g = x->layer[l].lmd;
        if (g != first && g->ctx != first->ctx)
            return NULL;
    }
    *device = first->device;
    return first->ctx;
}

/* The layers' bases as the kernel sees them (src, dst per layer), then the
 * source slots, then the destination slots, into g's table; the launch's
 * arguments.  Context current. */
static nixl_status_t cip_ix_build(cip_be_t *be, cip_req_t *r, cip_group_t *g, const nixl_be_xfer_indexed_t *x)
{
    const size_t bases_bytes = x->layers * 2 * sizeof(uint64_t), slots_bytes = x->nslots * sizeof(uint32_t);
    const size_t bytes = bases_bytes + 2 * slots_bytes;
    g->tab = cip_table_get(be, g->cx, (bytes + sizeof(cip_piece_t) - 1) / sizeof(cip_piece_t));
    if (!g->tab)
        return NIXL_ERR_NO_MEMORY;
    uint64_t *bases = (uint64_t *)(void *)g->tab->host;
    const cip_rmd_t *last = NULL;
    cip_view_t view = {0};
    for (size_t l = 0; l < x->layers; l++) {
        cip_rmd_t *rmd = x->layer[l].rmd;
        if (rmd != last) {
            nixl_status_t st = cip_rmd_view(be, rmd, g->cx, &view, r->cause, sizeof(r->cause));
            if (st == NIXL_ERR_NO_PATH || (st == NIXL_OK && !view.kernel_ok))
                return NIXL_ERR_NOT_SUPPORTED; /* in pieces: staged with its cause, or the copy engines */
            if (st != NIXL_OK)
                return st;
            last = rmd;
        }
        uint64_t remote = view.base + (x->layer[l].rbase - rmd->alloc_base), local = x->layer[l].lbase;
        bases[2 * l] = r->write ? local : remote;
        bases[2 * l + 1] = r->write ? remote : local;
    }
    unsigned char *slots = (unsigned char *)bases + bases_bytes;
    memcpy(slots, r->write ? x->lslots : x->rslots, slots_bytes);
    memcpy(slots + slots_bytes, r->write ? x->rslots : x->lslots, slots_bytes);
    g->nk = x->layers * x->nslots;
    g->tab_bytes = bytes;
    g->ix.on = 1;
    g->ix.bases = g->tab->dev;
    g->ix.sslots = g->tab->dev + bases_bytes;
    g->ix.dslots = g->tab->dev + bases_bytes + slots_bytes;
    g->ix.nslots = x->nslots;
    g->ix.item = x->item_len;
    g->ix.sstride = r->write ? x->lstride : x->rstride;
    g->ix.dstride = r->write ? x->rstride : x->lstride;
    return cip_group_upload(be, g);
}

nixl_status_t cip_xfer_prepare_indexed(void *bev, const nixl_be_xfer_indexed_t *x, nixl_be_req_t **req_out)
{
    cip_be_t *be = bev;
    if (!x || !req_out || !x->peer || !x->layer || !x->lslots || !x->rslots)
        return NIXL_ERR_NULL;
    if (x->op != NIXL_OP_READ && x->op != NIXL_OP_WRITE)
        return NIXL_ERR_INVALID_PARAM;
    const cip_peer_t *peer = x->peer;
    if (x->local_mem != NIXL_MEM_VRAM || x->remote_mem != NIXL_MEM_VRAM || x->item_len >= be->ce_min ||
        x->layers * x->nslots < be->kernel_min || (!be->map_peers && !peer->same_process))
        return NIXL_ERR_NOT_SUPPORTED;
    if (!cip_api(be))
        return NIXL_ERR_NO_CUDA;
    for (size_t l = 0; l < x->layers; l++) {
        const cip_reg_t *lm = x->layer[l].lmd;
        const cip_rmd_t *rm = x->layer[l].rmd;
        if (!lm || !rm || rm->peer != x->peer || lm->host) {
            CIP_ERROR(be, "cuda_ipc: layer %zu of an indexed request has no registration of this backend on both sides",
                      l);
            return NIXL_ERR_INVALID_PARAM;
        }
    }
    int device = 0;
    void *ctx = cip_ix_ctx(x, &device);
    if (!ctx)
        return NIXL_ERR_NOT_SUPPORTED; /* layers in several contexts: one group each, in pieces */
    cip_req_t *r = cip_req_new(be, x->peer, x->op);
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    cip_group_t *g = cip_group_of(r, ctx, device);
    nixl_be_ctx_scope_t scope = {NULL, 0};
    nixl_status_t st = nixl_be_ctx_enter(be->host->cuda, (CUcontext)ctx, &scope);
    if (st == NIXL_OK) {
        g->cx = cip_ctx_get(be, ctx, device);
        if (!g->cx)
            st = NIXL_ERR_BACKEND;
        else if (!g->cx->indexed_fn)
            st = NIXL_ERR_NOT_SUPPORTED;
        else
            st = cip_ix_build(be, r, g, x);
        nixl_be_ctx_leave(be->host->cuda, &scope);
    }
    if (st != NIXL_OK) {
        cip_req_free(be, r);
        return st;
    }
    r->hdr.path = CIP_PATH_INDEXED;
    r->status = NIXL_OK;
    *req_out = &r->hdr;
    return NIXL_OK;
}

/* Issue one group's work on its stream, in its context (current). */
static CUresult cip_group_issue(cip_be_t *be, cip_group_t *g, const char **what)
{
    const nixl_cuda_api_t *cu = be->cu;
    CUstream s = g->cx->stream;
    CUresult rc = CUDA_SUCCESS;
    *what = "copy";
    for (size_t i = 0; i < g->nce && rc == CUDA_SUCCESS; i++) {
        const cip_copy_t *c = &g->ce[i];
        if (g->ce_uva)
            rc = cu->cuMemcpyAsync((CUdeviceptr)c->dst, (CUdeviceptr)c->src, c->len, s);
        else
            rc = cu->cuMemcpyDtoDAsync((CUdeviceptr)c->dst, (CUdeviceptr)c->src, c->len, s);
    }
    if (rc == CUDA_SUCCESS && g->nk) {
        unsigned long long n = g->nk;
        *what = "kernel launch";
        if (g->ix.on) {
            void *args[] = {&g->ix.bases, &g->ix.sslots, &g->ix.dslots, &g->ix.nslots,
                            &n,           &g->ix.item,   &g->ix.sstride, &g->ix.dstride};
            rc = cu->cuLaunchKernel(g->cx->indexed_fn, g->blocks, 1, 1, CIP_KERNEL_THREADS, 1, 1, 0, s, args, NULL);
        } else {
            void *args[] = {&g->tab->dev, &n};
            rc = cu->cuLaunchKernel(g->cx->copy_fn, g->blocks, 1, 1, CIP_KERNEL_THREADS, 1, 1, 0, s, args, NULL);
        }
    }
    if (rc == CUDA_SUCCESS) {
        *what = "event record";
        rc = cu->cuEventRecord(g->done, s);
    }
    return rc;
}

/* Wait until the GPU no longer touches the request's memory. */
static void cip_req_drain(cip_be_t *be, cip_req_t *r)
{
    for (size_t i = 0; i < r->ngroups; i++) {
        cip_group_t *g = &r->groups[i];
        if (!g->pending)
            continue;
        nixl_be_ctx_scope_t scope = {NULL, 0};
        if (nixl_be_ctx_enter(be->host->cuda, (CUcontext)g->ctx, &scope) == NIXL_OK) {
            be->cu->cuEventSynchronize(g->done);
            nixl_be_ctx_leave(be->host->cuda, &scope);
        }
        g->pending = 0;
    }
    r->in_flight = 0;
}

/* ---- the worker threads (completion, staging) ---- */

/* The completion thread's job: wait for the events, then notify.  Its own
 * thread: it may leave any context current. */
static nixl_status_t cip_waiter_finish(cip_be_t *be, cip_req_t *r)
{
    nixl_status_t st = NIXL_OK;
    for (size_t i = 0; i < r->ngroups; i++) {
        cip_group_t *g = &r->groups[i];
        if (!g->pending)
            continue;
        CUresult rc = be->cu->cuCtxSetCurrent((CUcontext)g->ctx);
        if (rc == CUDA_SUCCESS)
            rc = be->cu->cuEventSynchronize(g->done);
        g->pending = 0;
        if (rc != CUDA_SUCCESS && st == NIXL_OK) {
            CIP_ERROR(be, "cuda_ipc: a transfer to peer %s on GPU %d failed: %s", r->peer->name, g->cx->device,
                      cip_cu_err(be, rc));
            st = NIXL_ERR_XFER_FAILED;
        }
    }
    if (st == NIXL_OK && atomic_load(&r->cancel))
        st = NIXL_ERR_CANCELED;
    if (st == NIXL_OK && r->notif.has)
        st = samehost_notif_send_raw(&be->notif, &r->peer->notif, r->notif.buf, r->notif.len, &r->cancel);
    return st;
}

static void *cip_worker_main(void *arg)
{
    cip_worker_t *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cond, &w->lock);
        if (!w->head)
            break;
        cip_req_t *r = w->head;
        w->head = r->wnext;
        if (!w->head)
            w->tail = NULL;
        r->queued = 0;
        r->busy = 1;
        pthread_mutex_unlock(&w->lock);
        nixl_status_t st = w->run(w->be, r);
        pthread_mutex_lock(&w->lock);
        r->busy = 0;
        atomic_store_explicit(&r->wstatus, st, memory_order_release);
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static nixl_status_t cip_worker_init(cip_worker_t *w, cip_be_t *be, const char *name,
                                     nixl_status_t (*run)(cip_be_t *be, cip_req_t *r))
{
    memset(w, 0, sizeof(*w));
    if (pthread_mutex_init(&w->lock, NULL) != 0)
        return NIXL_ERR_NO_MEMORY;
    if (pthread_cond_init(&w->cond, NULL) != 0) {
        pthread_mutex_destroy(&w->lock);
        return NIXL_ERR_NO_MEMORY;
    }
    w->be = be;
    w->name = name;
    w->run = run;
    return NIXL_OK;
}

static nixl_status_t cip_worker_push(cip_worker_t *w, cip_req_t *r)
{
    cip_be_t *be = w->be;
    pthread_mutex_lock(&w->lock);
    if (!w->started) {
        if (pthread_create(&w->thread, NULL, cip_worker_main, w) != 0) {
            pthread_mutex_unlock(&w->lock);
            CIP_ERROR(be, "cuda_ipc: cannot start the %s thread", w->name);
            return NIXL_ERR_BACKEND;
        }
        w->started = 1;
    }
    atomic_store(&r->wstatus, NIXL_IN_PROG);
    r->worker = w;
    r->watched = 1;
    r->queued = 1;
    r->wnext = NULL;
    if (w->tail)
        w->tail->wnext = r;
    else
        w->head = r;
    w->tail = r;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return NIXL_OK;
}

/* Take r back from its worker: out of the queue, or wait until the worker
 * is done with it. */
static void cip_worker_reclaim(cip_req_t *r)
{
    cip_worker_t *w = r->worker;
    pthread_mutex_lock(&w->lock);
    if (r->queued) {
        cip_req_t **pp = &w->head, *prev = NULL;
        while (*pp && *pp != r) {
            prev = *pp;
            pp = &(*pp)->wnext;
        }
        if (*pp) {
            *pp = r->wnext;
            if (w->tail == r)
                w->tail = prev;
        }
        r->queued = 0;
    }
    while (r->busy)
        pthread_cond_wait(&w->cond, &w->lock);
    r->watched = 0;
    pthread_mutex_unlock(&w->lock);
}

static void cip_worker_fini(cip_worker_t *w)
{
    if (!w->run)
        return;
    pthread_mutex_lock(&w->lock);
    int started = w->started;
    w->stop = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    if (started)
        pthread_join(w->thread, NULL);
    w->started = 0;
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    w->run = NULL;
}

nixl_status_t cip_workers_init(cip_be_t *be)
{
    nixl_status_t st = cip_worker_init(&be->waiter, be, "completion", cip_waiter_finish);
    if (st == NIXL_OK && (st = cip_worker_init(&be->stager, be, "staging", cip_stage_run)) != NIXL_OK)
        cip_worker_fini(&be->waiter);
    return st;
}

void cip_workers_fini(cip_be_t *be)
{
    cip_worker_fini(&be->waiter);
    cip_worker_fini(&be->stager);
}

/* ---- post, status, release ---- */

/* A staged request: the staging thread does it all. */
static nixl_status_t cip_post_staged(cip_be_t *be, cip_req_t *r)
{
    be->host->fallback(be->host->ctx, CIP_PATH_STAGED, r->cause);
    atomic_store(&r->cancel, 0);
    nixl_status_t st = cip_worker_push(&be->stager, r);
    if (st != NIXL_OK) {
        r->status = st;
        return st;
    }
    r->in_flight = 1;
    r->status = NIXL_IN_PROG;
    return NIXL_IN_PROG;
}

nixl_status_t cip_xfer_post(void *bev, nixl_be_req_t *hdr, const void *notif, size_t notif_len)
{
    cip_be_t *be = bev;
    cip_req_t *r = (cip_req_t *)hdr;
    if (!r)
        return NIXL_ERR_NULL;
    if (r->in_flight)
        return NIXL_ERR_IN_FLIGHT;
    nixl_status_t st = cip_peer_alive(be, r->peer);
    if (st == NIXL_OK)
        st = samehost_notif_msg_set(&be->notif, &r->notif, notif, notif_len);
    if (nixl_unlikely(st != NIXL_OK)) {
        r->status = st;
        return st;
    }
    if (r->staged)
        return cip_post_staged(be, r);
    atomic_store(&r->cancel, 0);
    for (size_t i = 0; i < r->ngroups; i++) {
        cip_group_t *g = &r->groups[i];
        nixl_be_ctx_scope_t scope = {NULL, 0};
        st = nixl_be_ctx_enter(be->host->cuda, (CUcontext)g->ctx, &scope);
        if (st != NIXL_OK)
            break;
        const char *what;
        CUresult rc = cip_group_issue(be, g, &what);
        nixl_be_ctx_leave(be->host->cuda, &scope);
        if (rc != CUDA_SUCCESS) {
            CIP_ERROR(be, "cuda_ipc: %s on GPU %d towards peer %s failed: %s", what, g->cx->device, r->peer->name,
                      cip_cu_err(be, rc));
            st = NIXL_ERR_XFER_FAILED;
            break;
        }
        g->pending = 1;
    }
    if (st != NIXL_OK) {
        /* What was issued must be over before the caller may reuse the memory. */
        for (size_t i = 0; i < r->ngroups; i++) {
            cip_group_t *g = &r->groups[i];
            if (g->pending)
                continue;
            nixl_be_ctx_scope_t scope = {NULL, 0};
            if (g->cx && nixl_be_ctx_enter(be->host->cuda, (CUcontext)g->ctx, &scope) == NIXL_OK) {
                be->cu->cuStreamSynchronize(g->cx->stream);
                nixl_be_ctx_leave(be->host->cuda, &scope);
            }
        }
        cip_req_drain(be, r);
        r->status = st;
        return st;
    }
    r->in_flight = 1;
    r->status = NIXL_IN_PROG;
    if (r->notif.has) {
        st = cip_worker_push(&be->waiter, r);
        if (st != NIXL_OK) {
            cip_req_drain(be, r);
            r->status = st;
        }
        return st == NIXL_OK ? NIXL_IN_PROG : st;
    }
    /* Small requests are often done already: save the caller a poll. */
    return cip_xfer_status(be, hdr);
}

nixl_status_t cip_xfer_status(void *bev, nixl_be_req_t *hdr)
{
    cip_be_t *be = bev;
    cip_req_t *r = (cip_req_t *)hdr;
    if (!r->in_flight)
        return r->status;
    if (r->watched) {
        nixl_status_t st = (nixl_status_t)atomic_load_explicit(&r->wstatus, memory_order_acquire);
        if (st == NIXL_IN_PROG)
            return st;
        cip_worker_reclaim(r);
        r->in_flight = 0;
        r->status = st;
        return st;
    }
    for (size_t i = 0; i < r->ngroups; i++) {
        cip_group_t *g = &r->groups[i];
        if (!g->pending)
            continue;
        nixl_be_ctx_scope_t scope = {NULL, 0};
        if (nixl_be_ctx_enter(be->host->cuda, (CUcontext)g->ctx, &scope) != NIXL_OK)
            return NIXL_IN_PROG;
        CUresult rc = be->cu->cuEventQuery(g->done);
        nixl_be_ctx_leave(be->host->cuda, &scope);
        if (rc == CUDA_ERROR_NOT_READY)
            return NIXL_IN_PROG;
        g->pending = 0;
        if (rc != CUDA_SUCCESS) {
            CIP_ERROR(be, "cuda_ipc: a transfer to peer %s on GPU %d failed: %s", r->peer->name, g->cx->device,
                      cip_cu_err(be, rc));
            cip_req_drain(be, r);
            r->status = NIXL_ERR_XFER_FAILED;
            return r->status;
        }
    }
    r->in_flight = 0;
    r->status = NIXL_OK;
    return NIXL_OK;
}

/* A worker (completion or staging) checks the flag before each slot and
 * before the notification.  Copies already issued to the GPU cannot be
 * recalled: without a worker the request simply completes. */
void cip_xfer_cancel(void *bev, nixl_be_req_t *hdr)
{
    (void)bev;
    cip_req_t *r = (cip_req_t *)hdr;
    if (r && r->in_flight && r->watched)
        atomic_store(&r->cancel, 1);
}

void cip_xfer_release(void *bev, nixl_be_req_t *hdr)
{
    cip_be_t *be = bev;
    cip_req_t *r = (cip_req_t *)hdr;
    if (!r)
        return;
    if (r->watched) {
        /* Canceled: the worker must not send the notification. */
        atomic_store(&r->cancel, 1);
        cip_worker_reclaim(r);
    }
    if (r->in_flight)
        cip_req_drain(be, r);
    cip_req_free(be, r);
}
