/*
 * lf_xfer.c - requests: prepare, post, status, release.
 *
 * Prepare does the per-descriptor work once: each piece becomes one or more
 * operations (a piece of at least stripe_min bytes is split over every
 * rail pair it may use; anything above the provider's message size is cut),
 * with its pair of rails, local descriptor, remote key and the remote
 * address the owner's MR mode wants.  Any rail of ours reaches any rail of
 * the peer (lf_conn.c), so a piece gets one pair per rail of ours holding
 * its local region: to the peer's rail of the same index when that one
 * holds the remote region, else round-robin over the peer's rails that
 * hold it (those no rail of ours matched first).  VRAM without CUDA HMEM,
 * ours or the peer's, is registered on no rail: NIXL_ERR_NO_PATH, said.
 *
 * Post assigns a tag, then posts operations while the rails have room; the
 * rest is posted by progress as completions free slots, so post never
 * waits and -FI_EAGAIN only defers to the next progress.  Runs of
 * operations on one rail go out with FI_MORE but the last.  Requests of
 * local VRAM are posted with their context bound, by ops and the progress
 * thread alike.
 *
 * Once every operation completed the request syncs: a WRITE is done only
 * when its data landed, by a FENCE per rail pair the target answers (providers
 * that order sends after writes), by counting (its writes carry remote CQ
 * data [our index at the peer | tag] and one counted FENCE, or the NOTIF,
 * says how many), or by delivery-complete writes.  A notification goes out
 * then, with the count of writes the target must see before releasing it.
 * Release of a request in flight stops posting, waits (bounded by the
 * peer's liveness) until the posted operations completed and landed, never
 * sends a notification still queued, and makes the peer forget the tag.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lf_int.h"

static void lf_req_list_add(lf_be_t *be, lf_req_t *r)
{
    if (r->on_list)
        return;
    r->aprev = NULL;
    r->anext = be->active;
    if (be->active)
        be->active->aprev = r;
    be->active = r;
    r->on_list = 1;
}

static void lf_req_list_del(lf_be_t *be, lf_req_t *r)
{
    if (!r->on_list)
        return;
    if (r->aprev)
        r->aprev->anext = r->anext;
    else
        be->active = r->anext;
    if (r->anext)
        r->anext->aprev = r->aprev;
    r->anext = r->aprev = NULL;
    r->on_list = 0;
}

/* The status of a request whose operation failed with fi_err: a peer
 * known dead explains any failure (flushed operations come back
 * -FI_ECANCELED, which the caller did not ask for); NIXL_ERR_CANCELED is
 * only ever a released or canceled request's.  A provider's timeout is
 * NIXL_ERR_XFER_FAILED here: for requests NIXL_ERR_TIMEOUT promises that
 * no notification went out (a deadline, or a handshake never answered),
 * and after a lost acknowledgment one may have. */
static nixl_status_t lf_req_err_of(const lf_req_t *r, int fi_err)
{
    const lf_conn_t *c = r->conn;
    if (c->state == LF_CONN_DOWN && c->down_status == NIXL_ERR_PEER_GONE)
        return NIXL_ERR_PEER_GONE;
    nixl_status_t st = lf_status_of(fi_err);
    return st == NIXL_ERR_TIMEOUT ? NIXL_ERR_XFER_FAILED : st;
}

static void lf_req_finish(lf_be_t *be, lf_req_t *r, nixl_status_t st)
{
    if (st != NIXL_OK && r->inflight)
        r->has_stale = 1;
    r->err = st;
    r->state = st == NIXL_OK ? LF_REQ_DONE : LF_REQ_FAILED;
    lf_req_list_del(be, r);
}

/* Done once the fences are answered and the notification is sent; a
 * canceled request only waits for its fences. */
static void lf_req_sync_check(lf_be_t *be, lf_req_t *r)
{
    if (r->state == LF_REQ_SYNC && !r->fence_wait && !r->notif_wait)
        lf_req_finish(be, r, r->canceling ? NIXL_ERR_CANCELED : NIXL_OK);
}

/* Fences for the writes of this post: one per rail used (fence mode) or
 * one counted on the tag (count mode); how many answers to wait for. */
static unsigned lf_req_fence(lf_be_t *be, lf_req_t *r)
{
    if (r->op != NIXL_OP_WRITE || !r->rails_used || r->conn->state != LF_CONN_UP)
        return 0;
    if (be->sync != LF_SYNC_FENCE && be->sync != LF_SYNC_COUNT)
        return 0;
    r->fence_id = r->conn->next_fence++;
    int counted = be->sync == LF_SYNC_COUNT;
    return lf_fence_queue(be, r->conn, r->pairs_used, r->fence_id, counted, r->tag,
                          r->use_data ? r->posted_data : 0);
}

/* Where a running request goes once nothing of it is left to post. */
static void lf_req_check(lf_be_t *be, lf_req_t *r)
{
    if (r->state != LF_REQ_RUN)
        return;
    if (r->err) {
        /* A failure seen before the peer was known dead is explained by
         * its death once that is known. */
        if (r->err == NIXL_ERR_XFER_FAILED && r->conn->state == LF_CONN_DOWN &&
            r->conn->down_status == NIXL_ERR_PEER_GONE)
            r->err = NIXL_ERR_PEER_GONE;
        if (r->inflight == 0 || r->conn->state == LF_CONN_DOWN)
            lf_req_finish(be, r, r->err);
        return;
    }
    if (r->canceling) {
        if (r->conn->state == LF_CONN_DOWN) {
            lf_req_finish(be, r, NIXL_ERR_CANCELED);
        } else if (r->inflight == 0) {
            r->state = LF_REQ_SYNC;
            r->notif_wait = 0;
            r->fence_wait = lf_req_fence(be, r);
            lf_req_sync_check(be, r);
        }
        return;
    }
    if (r->next < r->nops || r->inflight > 0)
        return;
    r->state = LF_REQ_SYNC;
    r->notif_wait = 0;
    r->notif_ack = 0;
    if (r->has_notif) {
        /* Counting: the NOTIF itself is the fence, answered on release. */
        r->notif_ack = be->sync == LF_SYNC_COUNT && r->op == NIXL_OP_WRITE && r->rails_used;
        if (r->notif_ack)
            r->fence_id = r->conn->next_fence++;
        lf_cmsg_t *m = lf_notif_msg(be, r->conn, r->notif, r->notif_len, r->tag, r->use_data ? r->posted_data : 0,
                                    r->notif_ack, r->fence_id);
        if (!m) {
            LF_ERROR(be, "libfabric: out of memory for the notification of a request to %s", r->conn->name);
            lf_req_finish(be, r, NIXL_ERR_NO_MEMORY);
            return;
        }
        m->req = r;
        m->req_gen = r->gen;
        r->notif_msg = m;
        r->notif_wait = 1;
    }
    r->fence_wait = r->notif_ack ? 1 : lf_req_fence(be, r);
    lf_req_sync_check(be, r);
}

void lf_req_notif_done(lf_be_t *be, lf_req_t *r, uint32_t gen, int err)
{
    if (r->gen != gen || r->state != LF_REQ_SYNC || !r->notif_wait)
        return;
    if (err) {
        LF_ERROR(be, "libfabric: the notification of a request to %s failed: %s", r->conn->name,
                 fi_strerror(err < 0 ? -err : err));
        lf_req_finish(be, r, lf_req_err_of(r, err));
        return;
    }
    r->notif_wait = 0;
    lf_req_sync_check(be, r);
}

void lf_req_fence_done(lf_be_t *be, lf_conn_t *c, uint64_t id)
{
    for (lf_req_t *r = be->active; r; r = r->anext) {
        if (r->conn == c && r->state == LF_REQ_SYNC && r->fence_wait && r->fence_id == id) {
            r->fence_wait--;
            lf_req_sync_check(be, r);
            return;
        }
    }
}

void lf_req_data_done(lf_be_t *be, lf_slot_t *s, int err)
{
    lf_rail_t *rail = &be->rails[s->c.rail];
    lf_req_t *r = s->req;
    uint32_t gen = s->gen;
    s->req = NULL;
    s->busy = 0;
    s->next_free = rail->free_slots;
    rail->free_slots = s;
    rail->nfree++;
    if (!r || gen != r->gen)
        return;
    r->inflight--;
    if (err) {
        nixl_status_t st = lf_req_err_of(r, err);
        if (!r->err) {
            r->err = st;
            LF_ERROR(be, "libfabric: %s to %s failed on rail %u: %s", r->op == NIXL_OP_WRITE ? "write" : "read",
                     r->conn->name, s->c.rail, fi_strerror(err < 0 ? -err : err));
        }
        if (st == NIXL_ERR_PEER_GONE) {
            lf_conn_down(be, r->conn, NIXL_ERR_PEER_GONE, "a transfer to it failed");
            return;
        }
    } else {
        /* A completed operation is the peer's provider answering. */
        r->conn->last_rx_ns = nixl_now_ns();
    }
    lf_req_check(be, r);
}

static void lf_req_pump(lf_be_t *be, lf_req_t *r)
{
    lf_conn_t *c = r->conn;
    if (r->state != LF_REQ_RUN || c->state != LF_CONN_UP || !c->have_ridx) {
        lf_req_check(be, r);
        return;
    }
    uint64_t data = 0;
    if (r->next == 0 && r->inflight == 0) {
        /* The peer's index for us fits the CQ data beside the tag, or the
         * notification goes without counting (delivery-complete writes
         * still land before it). */
        r->use_data = (r->has_notif || be->sync == LF_SYNC_COUNT) && r->op == NIXL_OP_WRITE &&
                      ((uint64_t)c->ridx >> be->idx_bits) == 0;
        r->posted_data = 0;
    }
    if (r->use_data)
        data = lf_data_make(be, c->ridx, r->tag);
    uint64_t flags_base = FI_COMPLETION | (r->op == NIXL_OP_WRITE ? be->dc_flag : 0) |
                          (r->use_data ? FI_REMOTE_CQ_DATA : 0);
    while (r->next < r->nops && !r->err && !r->canceling) {
        const lf_op_t *op = &r->ops[r->next];
        lf_rail_t *rail = &be->rails[op->rail];
        if (rail->eagain || !rail->free_slots)
            break;
        lf_slot_t *s = rail->free_slots;
        rail->free_slots = s->next_free;
        s->req = r;
        s->gen = r->gen;
        uint64_t flags = flags_base;
        if (r->next + 1 < r->nops && r->ops[r->next + 1].rail == op->rail && s->next_free)
            flags |= FI_MORE;
        struct iovec iov = {.iov_base = (void *)(uintptr_t)op->laddr, .iov_len = op->len};
        void *desc = op->desc;
        struct fi_rma_iov riov = {.addr = op->raddr, .len = op->len, .key = op->key};
        struct fi_msg_rma msg = {
            .msg_iov = &iov,
            .desc = &desc,
            .iov_count = 1,
            .addr = lf_conn_addr(c, op->rail, op->rrail),
            .rma_iov = &riov,
            .rma_iov_count = 1,
            .context = &s->c.fctx,
            .data = data,
        };
        ssize_t ret = r->op == NIXL_OP_WRITE ? fi_writemsg(rail->ep, &msg, flags) : fi_readmsg(rail->ep, &msg, flags);
        if (ret) {
            s->req = NULL;
            s->next_free = rail->free_slots;
            rail->free_slots = s;
            if (ret == -FI_EAGAIN) {
                rail->eagain = 1;
                break;
            }
            r->err = lf_req_err_of(r, (int)ret);
            LF_ERROR(be, "libfabric: posting a %s of %llu bytes to %s on rail %u failed: %s",
                     r->op == NIXL_OP_WRITE ? "write" : "read", (unsigned long long)op->len, c->name, op->rail,
                     fi_strerror((int)-ret));
            break;
        }
        rail->nfree--;
        s->busy = 1;
        s->read = r->op == NIXL_OP_READ;
        r->next++;
        r->inflight++;
        r->rails_used |= 1u << op->rail;
        r->pairs_used[op->rail] |= 1u << op->rrail;
        if (r->use_data)
            r->posted_data++;
    }
    lf_req_check(be, r);
}

/* The context rule: a post of local VRAM runs with the memory's context
 * current, bound (and restored) with the ABI's helper, on whichever
 * thread posts: an op's or the progress thread.  (The progress thread once
 * left VRAM posts to the next op, so a request larger than the transmit
 * window stalled until the application polled it: a target waiting for
 * the notification before the initiator polled never got it.) */
static const nixl_host_cuda_t *lf_cuda(const lf_be_t *be)
{
    const nixl_host_services_t *h = be->host;
    return h->struct_size >= offsetof(nixl_host_services_t, cuda) + sizeof(h->cuda) ? h->cuda : NULL;
}

void lf_reqs_pump(lf_be_t *be, int in_op)
{
    lf_req_t *r = be->active;
    while (r) {
        lf_req_t *next = r->anext;
        if (r->state == LF_REQ_RUN) {
            if (!r->cuda_ctx) {
                lf_req_pump(be, r);
            } else {
                nixl_be_ctx_scope_t scope;
                const nixl_host_cuda_t *cuda = lf_cuda(be);
                nixl_status_t st = nixl_be_ctx_enter(cuda, r->cuda_ctx, &scope);
                /* An op posts even if the bind failed (the provider says
                 * what it thinks); the progress thread leaves it to one. */
                if (st == NIXL_OK || in_op)
                    lf_req_pump(be, r);
                if (st == NIXL_OK)
                    nixl_be_ctx_leave(cuda, &scope);
            }
        }
        r = next;
    }
}

void lf_reqs_tick(lf_be_t *be, uint64_t now)
{
    for (lf_req_t *r = be->active; r; r = r->anext) {
        if ((r->canceling || r->cancel_late) && (r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC) &&
            r->conn->state != LF_CONN_DOWN && now - r->cancel_ns > be->timeout_ns) {
            lf_conn_reset(be, r->conn, "a canceled request was not over within the peer timeout");
            return; /* the list changed: the next tick goes on */
        }
    }
}

void lf_reqs_fail_conn(lf_be_t *be, lf_conn_t *c, nixl_status_t st)
{
    lf_req_t *r = be->active;
    while (r) {
        lf_req_t *next = r->anext;
        if (r->conn == c && (r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC)) {
            r->notif_msg = NULL; /* lf_txq_drop_conn freed it */
            lf_req_finish(be, r, r->canceling ? NIXL_ERR_CANCELED : st);
        }
        r = next;
    }
}

/* ---- the ops ---- */

/* Pieces of [0, len) for rail striping: equal parts rounded to pages. */
static uint64_t lf_stripe_part(uint64_t len, unsigned n)
{
    uint64_t part = (len + n - 1) / n;
    return (part + 4095) & ~4095ull;
}

/* The n-th rail (from 0) of a set holding more than n. */
static unsigned lf_nth_rail(uint32_t set, unsigned n)
{
    while (n--)
        set &= set - 1;
    return (unsigned)__builtin_ctz(set);
}

/* The rail pairs of a piece whose local region is on our rails lset and
 * remote region on the peer's rails rset (both non-empty): one per rail of
 * ours, so striping uses every one.  The peer's rail of the same index
 * when it is in rset (on hosts alike, GPU i's rails have the same indices);
 * else round-robin over the peer's rails no index matched, or over all of
 * rset when every one was matched.  Returns how many. */
static unsigned lf_piece_pairs(uint32_t lset, uint32_t rset, uint8_t *lr, uint8_t *rr)
{
    uint32_t common = lset & rset, spare = rset & ~common;
    if (!spare)
        spare = rset;
    unsigned n = 0, k = 0, nspare = (unsigned)__builtin_popcount(spare);
    for (uint32_t set = lset; set; set &= set - 1) {
        unsigned l = (unsigned)__builtin_ctz(set);
        lr[n] = (uint8_t)l;
        rr[n] = (uint8_t)((common & (1u << l)) ? l : lf_nth_rail(spare, k++ % nspare));
        n++;
    }
    return n;
}

/* The rail pairs of piece i, cached while consecutive pieces share their
 * regions (the usual case); an error, logged, when there are none. */
typedef struct lf_rail_cache {
    const lf_reg_t *lg;
    const lf_rmd_t *rm;
    unsigned n;
    uint8_t lr[LF_MAX_RAILS], rr[LF_MAX_RAILS];
} lf_rail_cache_t;

static nixl_status_t lf_piece_rails_cached(lf_be_t *be, lf_rail_cache_t *rc, const nixl_be_iov_t *v, size_t i)
{
    const lf_reg_t *lg = v->lmd;
    const lf_rmd_t *rm = v->rmd;
    if (!lg || !rm || rm->nrails == 0) {
        LF_ERROR(be, "libfabric: piece %zu of a request has no registration of ours or no remote key", i);
        return NIXL_ERR_NOT_REGISTERED;
    }
    if (lg == rc->lg && rm == rc->rm)
        return NIXL_OK;
    if (!lg->rails || !rm->rails) {
        /* VRAM registered without HMEM (ours, or the peer's: its provider is ours). */
        char whose[LF_NAME_MAX + 48];
        if (lg->rails)
            snprintf(whose, sizeof(whose), " (piece %zu: GPU memory of peer %s)", i,
                     rm->conn->name[0] ? rm->conn->name : "?");
        else
            snprintf(whose, sizeof(whose), " (piece %zu: GPU memory of ours)", i);
        LF_ERROR(be, "libfabric provider %s has no CUDA HMEM support: VRAM cannot be moved over it (cross-host GPU "
                     "needs EFA/verbs with HMEM)%s",
                 be->prov_name, whose);
        return NIXL_ERR_NO_PATH;
    }
    rc->lg = lg;
    rc->rm = rm;
    rc->n = lf_piece_pairs(lg->rails, rm->rails, rc->lr, rc->rr);
    return NIXL_OK;
}

/* The path of a request over shm with FI_HMEM, from what shm decides by
 * (smr_select_proto, libfabric 1.20 to 2.6): a piece from our VRAM goes by
 * CUDA IPC (the peer opens our memory and copies once, whatever its side
 * is) when its registration says FI_HMEM_DEVICE_ONLY (VRAM, when shm's
 * IPC completes after the data landed: lf_mem.c), it is one iov (every
 * post), libfabric's CUDA IPC is on and the memory has a legacy IPC
 * handle; otherwise through shm's bounce buffers in host memory (SAR, two
 * copies).  FI_HMEM also turns shm's cross-memory attach off, so host
 * memory of ours goes through the bounce buffers too: the provider's host
 * path, named so, not a fallback.  GPU memory staged is the field
 * report's fallback: counted, refusable. */
void lf_shm_path(const lf_be_t *be, lf_req_t *r, const nixl_be_xfer_t *x, int all_ipc)
{
    int wr = x->op == NIXL_OP_WRITE;
    if (x->local_mem == NIXL_MEM_VRAM && be->shm_ipc_landed && be->shm_cuda_ipc && all_ipc) {
        r->hdr.path = wr ? be->path_ipc_write : be->path_ipc_read;
        return;
    }
    r->hdr.path = wr ? be->path_sar_write : be->path_sar_read;
    if (x->local_mem != NIXL_MEM_VRAM)
        return;
    r->hdr.fallback = 1;
    r->cause = !be->shm_ipc_landed ? "this libfabric's shm completes CUDA IPC copies before they land"
               : !be->shm_cuda_ipc ? "libfabric's CUDA IPC is off (GPUs without peer access between all of them)"
                                   : "GPU memory without a legacy CUDA IPC handle (cuMemCreate, expandable segments)";
}

nixl_status_t lf_xfer_prepare(void *bev, const nixl_be_xfer_t *x, nixl_be_req_t **req_out)
{
    lf_be_t *be = bev;
    if (!x || !req_out || !x->peer || (x->count && !x->iov))
        return NIXL_ERR_NULL;
    if (x->op != NIXL_OP_WRITE && x->op != NIXL_OP_READ)
        return NIXL_ERR_INVALID_PARAM;
    if ((x->local_mem != NIXL_MEM_DRAM && x->local_mem != NIXL_MEM_VRAM) ||
        (x->remote_mem != NIXL_MEM_DRAM && x->remote_mem != NIXL_MEM_VRAM)) {
        LF_ERROR(be, "libfabric: memory types DRAM and VRAM only (local %d, remote %d)", (int)x->local_mem,
                 (int)x->remote_mem);
        return NIXL_ERR_MEM_TYPE;
    }
    uint64_t maxm = be->max_msg;
    size_t nops = 0;
    lf_rail_cache_t rc = {0};
    int all_ipc = 1;
    for (size_t i = 0; i < x->count; i++) {
        uint64_t len = x->iov[i].len;
        const lf_reg_t *prev = rc.lg;
        nixl_status_t st = lf_piece_rails_cached(be, &rc, &x->iov[i], i);
        if (st != NIXL_OK)
            return st;
        if (rc.lg != prev)
            all_ipc &= rc.lg->cuda_ipc;
        unsigned nr = rc.n;
        if (nr > 1 && len >= be->stripe_min) {
            uint64_t part = lf_stripe_part(len, nr);
            for (uint64_t off = 0; off < len; off += part) {
                uint64_t l = len - off < part ? len - off : part;
                nops += (size_t)((l + maxm - 1) / maxm);
            }
        } else {
            nops += (size_t)((len + maxm - 1) / maxm);
        }
    }
    lf_req_t *r = calloc(1, sizeof(*r));
    lf_op_t *ops = nops ? malloc(nops * sizeof(*ops)) : NULL;
    if (!r || (nops && !ops)) {
        free(r);
        free(ops);
        return NIXL_ERR_NO_MEMORY;
    }
    size_t k = 0;
    void *cuda_ctx = NULL;
    memset(&rc, 0, sizeof(rc));
    for (size_t i = 0; i < x->count; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        const lf_reg_t *lg = v->lmd;
        const lf_rmd_t *rm = v->rmd;
        (void)lf_piece_rails_cached(be, &rc, v, i); /* checked in the first pass */
        unsigned nr = rc.n;
        uint64_t rbase = rm->virt_addr ? v->raddr : v->raddr - rm->addr;
        int striped = nr > 1 && v->len >= be->stripe_min;
        uint64_t part = striped ? lf_stripe_part(v->len, nr) : v->len;
        /* Unstriped pieces go to rails in contiguous runs, so FI_MORE
         * batches stay on one rail. */
        unsigned run = (unsigned)((i * nr) / (x->count ? x->count : 1));
        for (uint64_t off = 0, p = 0; off < v->len; off += part, p++) {
            uint64_t plen = v->len - off < part ? v->len - off : part;
            unsigned pi = striped ? (unsigned)p : run;
            unsigned rl = rc.lr[pi], rr = rc.rr[pi];
            for (uint64_t o = 0; o < plen; o += maxm) {
                lf_op_t *op = &ops[k++];
                op->len = plen - o < maxm ? plen - o : maxm;
                op->laddr = v->laddr + off + o;
                op->raddr = rbase + off + o;
                op->rail = rl;
                op->rrail = rr;
                op->desc = lg->desc[rl];
                op->key = rm->keys[rr];
            }
        }
        if (!cuda_ctx && lg->cuda_ctx)
            cuda_ctx = lg->cuda_ctx;
    }
    r->be = be;
    r->conn = x->peer;
    r->cuda_ctx = x->local_mem == NIXL_MEM_VRAM ? cuda_ctx : NULL;
    r->op = x->op;
    r->ops = ops;
    r->nops = k;
    r->state = LF_REQ_IDLE;
    r->hdr.path = x->op == NIXL_OP_WRITE ? be->path_write : be->path_read;
    r->hdr.fallback = 0;
    if (be->shm_hmem)
        lf_shm_path(be, r, x, all_ipc);
    *req_out = &r->hdr;
    return NIXL_OK;
}

static nixl_status_t lf_req_status(const lf_req_t *r)
{
    switch (r->state) {
    case LF_REQ_RUN:
    case LF_REQ_SYNC:
        return NIXL_IN_PROG;
    case LF_REQ_DONE:
        return NIXL_OK;
    case LF_REQ_FAILED:
        return r->err;
    default:
        return NIXL_ERR_INVALID_PARAM;
    }
}

nixl_status_t lf_xfer_post(void *bev, nixl_be_req_t *req, const void *notif, size_t notif_len)
{
    lf_be_t *be = bev;
    lf_req_t *r = (lf_req_t *)req;
    if (!r)
        return NIXL_ERR_NULL;
    if (notif_len > NIXL_NOTIF_MAX)
        return NIXL_ERR_TOO_BIG;
    pthread_mutex_lock(&be->lock);
    nixl_status_t st;
    if (r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC) {
        st = NIXL_ERR_IN_FLIGHT;
        goto out;
    }
    st = lf_conn_use(be, r->conn);
    if (st != NIXL_OK)
        goto out;
    r->has_notif = notif != NULL;
    r->notif_len = 0;
    if (r->has_notif && notif_len) {
        if (notif_len > r->notif_cap) {
            uint8_t *p = realloc(r->notif, notif_len);
            if (!p) {
                st = NIXL_ERR_NO_MEMORY;
                goto out;
            }
            r->notif = p;
            r->notif_cap = notif_len;
        }
        memcpy(r->notif, notif, notif_len);
        r->notif_len = notif_len;
    }
    r->gen++;
    r->state = LF_REQ_RUN;
    r->err = NIXL_OK;
    r->next = 0;
    r->inflight = 0;
    r->canceling = 0;
    r->cancel_late = 0;
    r->forget_owed = 0;
    r->posted_data = 0;
    r->rails_used = 0;
    memset(r->pairs_used, 0, sizeof(r->pairs_used));
    r->notif_wait = 0;
    r->fence_wait = 0;
    r->tag = r->conn->next_tag++;
    if (r->hdr.fallback)
        be->host->fallback(be->host->ctx, r->hdr.path, r->cause);
    lf_req_list_add(be, r);
    lf_req_pump(be, r);
    lf_progress_op_locked(be);
    st = lf_req_status(r);
out:
    pthread_mutex_unlock(&be->lock);
    return st;
}

/* A canceled request wrote with remote CQ data the peer counts under its
 * tag: make the peer forget the tag (counted fences did already; a
 * notification that left does it too). */
static void lf_req_forget(lf_be_t *be, lf_req_t *r)
{
    if (!r->use_data || !r->posted_data || be->sync == LF_SYNC_COUNT || r->conn->state != LF_CONN_UP)
        return;
    lf_cmsg_t *m = lf_cmsg_new(r->conn, LF_MSG_CANCEL, LF_CANCEL_BODY);
    if (!m)
        return;
    nixl_put_u32(m->data + LF_HDR_SIZE, r->tag);
    nixl_put_u32(m->data + LF_HDR_SIZE + 4, 0);
    nixl_put_u64(m->data + LF_HDR_SIZE + 8, r->posted_data);
    lf_txq_push(be, m);
    lf_txq_flush(be);
}

nixl_status_t lf_xfer_status(void *bev, nixl_be_req_t *req)
{
    lf_be_t *be = bev;
    lf_req_t *r = (lf_req_t *)req;
    if (!r)
        return NIXL_ERR_NULL;
    pthread_mutex_lock(&be->lock);
    if (r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC)
        lf_progress_op_locked(be);
    nixl_status_t st = lf_req_status(r);
    if (st != NIXL_IN_PROG && r->forget_owed) {
        lf_req_forget(be, r);
        r->forget_owed = 0;
    }
    pthread_mutex_unlock(&be->lock);
    return st;
}

/* Drop the request from a queued notification, a message in flight and
 * the slots of its operations: whatever completes later finds nothing. */
static void lf_req_detach(lf_be_t *be, lf_req_t *r)
{
    if (r->notif_msg) {
        lf_cmsg_t **pp = &be->txq_head;
        while (*pp && *pp != r->notif_msg)
            pp = &(*pp)->next;
        if (*pp) {
            *pp = r->notif_msg->next;
            free(r->notif_msg);
            be->txq_tail = &be->txq_head;
            while (*be->txq_tail)
                be->txq_tail = &(*be->txq_tail)->next;
        }
        r->notif_msg = NULL;
    }
    for (lf_cmsg_t *m = be->tx_flight; m; m = m->next)
        if (m->req == r)
            m->req = NULL;
    if (r->inflight || r->has_stale) {
        for (unsigned i = 0; i < be->nrails; i++) {
            lf_rail_t *rail = &be->rails[i];
            for (unsigned k = 0; k < rail->nslots; k++)
                if (rail->slots[k].req == r)
                    rail->slots[k].req = NULL;
        }
    }
}

/* The notification of this post was handed to the provider (its send may
 * even have completed while the NOTIF's answer, in count mode, is still
 * awaited): nothing can take it back.  In SYNC a request with one has
 * queued it; only the hand-off clears notif_msg (a failed send or a dead
 * peer ends the request). */
static int lf_req_notif_out(const lf_req_t *r)
{
    return r->state == LF_REQ_SYNC && r->has_notif && !r->canceling && !r->notif_msg;
}

/* Stop a running request: post nothing more, and drop its notification if
 * it is still queued (a counted FENCE replaces it where it was to be the
 * fence).  It ends NIXL_ERR_CANCELED once its posted operations completed
 * and landed.  Returns 1 when the notification was already handed to the
 * provider: nothing can stop that one. */
static int lf_req_cancel_begin(lf_be_t *be, lf_req_t *r)
{
    int notif_out = lf_req_notif_out(r);
    r->canceling = 1;
    r->cancel_ns = nixl_now_ns();
    if (r->notif_msg) {
        lf_req_detach(be, r);
        r->notif_wait = 0;
        if (r->notif_ack) {
            r->notif_ack = 0;
            r->fence_wait = lf_req_fence(be, r);
        }
        lf_req_sync_check(be, r);
    }
    return notif_out;
}

/* The deadline's cancel: never waits.  With the notification already out
 * the request runs to its end (NIXL_OK once it is sent); otherwise it ends
 * NIXL_ERR_CANCELED when its posted operations are over (bounded by the
 * peer's liveness), and lf_xfer_status then makes the peer forget it. */
void lf_xfer_cancel(void *bev, nixl_be_req_t *req)
{
    lf_be_t *be = bev;
    lf_req_t *r = (lf_req_t *)req;
    if (!r)
        return;
    pthread_mutex_lock(&be->lock);
    if ((r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC) && !r->canceling && !r->cancel_late) {
        if (lf_req_notif_out(r)) {
            /* Too late to cancel; still, it must end: lf_reqs_tick resets
             * the connection if it is not over within the peer timeout. */
            r->cancel_late = 1;
            r->cancel_ns = nixl_now_ns();
        } else {
            lf_req_cancel_begin(be, r);
            r->forget_owed = 1;
            lf_req_check(be, r);
        }
        lf_progress_op_locked(be);
    }
    pthread_mutex_unlock(&be->lock);
}

void lf_xfer_release(void *bev, nixl_be_req_t *req)
{
    lf_be_t *be = bev;
    lf_req_t *r = (lf_req_t *)req;
    if (!r)
        return;
    pthread_mutex_lock(&be->lock);
    if (r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC) {
        /* Posted writes cannot be recalled: wait until they landed (or the
         * peer is declared gone) so nothing touches memory after we return.
         * A notification not handed to the provider yet is never sent. */
        int notif_out = r->canceling ? 0 : lf_req_cancel_begin(be, r);
        if (!notif_out)
            r->forget_owed = 1;
        uint64_t limit = be->timeout_ns + 500000000ull, deadline = nixl_now_ns() + limit;
        while ((r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC) && r->conn->state != LF_CONN_DOWN &&
               nixl_now_ns() < deadline) {
            lf_req_check(be, r);
            lf_progress_locked(be, 1);
            if (r->state != LF_REQ_RUN && r->state != LF_REQ_SYNC)
                break;
            pthread_mutex_unlock(&be->lock);
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&be->lock);
        }
        /* Past the wait: take the connection down so the provider lets go
         * of the memory before we return. */
        if ((r->state == LF_REQ_RUN || r->state == LF_REQ_SYNC) && r->conn->state != LF_CONN_DOWN)
            lf_conn_reset(be, r->conn, "a released request was still in flight after the peer timeout");
    }
    if (r->forget_owed)
        lf_req_forget(be, r);
    lf_req_list_del(be, r);
    lf_req_detach(be, r);
    pthread_mutex_unlock(&be->lock);
    free(r->ops);
    free(r->notif);
    free(r);
}
