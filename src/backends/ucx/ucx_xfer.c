/*
 * ucx_xfer.c - requests of the ucx backend.
 *
 * A post is one ucp_put_nbx (WRITE) or ucp_get_nbx (READ) per piece, each
 * with a completion callback counted against the request, then one
 * ucp_ep_flush_nbx on the peer's endpoint.  The notification, if any, is
 * an active message sent only once that flush completed: UCX completes a
 * flush after every operation posted on the endpoint before it completed
 * remotely, so the peer sees the notification only after every byte of the
 * request landed in its memory (a put's own completion means only that our
 * buffer may be reused).  Active messages on one endpoint are delivered in
 * order, so a standalone notification sent later arrives later.
 *
 * The post path costs one UCX call per piece and no allocation of ours
 * (the core merged contiguous pieces already).  An indexed request
 * (xfer_prepare_indexed) keeps the core's layers and slots instead of
 * pieces: its post computes each piece's addresses and merges runs of
 * neighbouring slots itself.  Requests in flight are on
 * be->run; progress (status calls, the progress thread) moves each one to
 * its notification and its end.
 *
 * A request is done once its operations and the flush completed and its
 * notification, if any, was handed to UCX (from then on it will arrive,
 * after the bytes): the send itself may still run, and release or a repost
 * wait for it, since its buffer is the request's.  So a post that saw the
 * whole request through does not report NIXL_IN_PROG for a request whose
 * notification is already on its way.
 *
 * Ends: NIXL_OK; NIXL_ERR_PEER_GONE when the peer was found gone (UCX's
 * error callback, or its process exited) whatever UCX said of the
 * operations; NIXL_ERR_CANCELED after xfer_cancel, once no operation of
 * the request is in flight and if its notification was not yet handed to
 * UCX (after that it ends as it would have: the notification is on its
 * way, every byte landed); NIXL_ERR_XFER_FAILED for other UCX errors.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ucx_int.h"

static void ucx_run_add(ucx_be_t *be, ucx_req_t *r)
{
    r->prev_run = NULL;
    r->next_run = be->run;
    if (be->run)
        be->run->prev_run = r;
    be->run = r;
    if (r->peer->nreqs++ == 0) /* silence is counted from here (ucx_peers_reap_locked) */
        r->peer->busy_since_ns = r->caller_ns;
}

static void ucx_run_del(ucx_be_t *be, ucx_req_t *r)
{
    if (r->prev_run)
        r->prev_run->next_run = r->next_run;
    else
        be->run = r->next_run;
    if (r->next_run)
        r->next_run->prev_run = r->prev_run;
    r->next_run = r->prev_run = NULL;
    r->peer->nreqs--;
}

static void ucx_op_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_req_t *r = user_data;
    r->inflight--;
    if (status != UCS_OK && r->op_status == UCS_OK)
        r->op_status = status;
    else if (status == UCS_OK)
        r->peer->activity++;
    ucp_request_free(request);
}

static void ucx_flush_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_req_t *r = user_data;
    r->flush_req = NULL;
    if (status == UCS_OK) {
        r->flushed = 1;
        r->peer->activity++;
    }
    else if (r->op_status == UCS_OK)
        r->op_status = status;
    ucp_request_free(request);
}

static void ucx_req_end(ucx_be_t *be, ucx_req_t *r, nixl_status_t st)
{
    ucx_run_del(be, r);
    r->err = st;
    r->state = st == NIXL_OK ? UCX_REQ_DONE : UCX_REQ_FAILED;
}

/* Who advances a request, which decides when its notification may go once
 * its flush completed:
 *
 *   UCX_BY_POST    the post itself: at once (its caller has not seen the
 *                  request in flight, so has nothing to cancel yet);
 *   UCX_BY_CALL    a status or progress call: only if an earlier call had
 *                  already seen the flush complete.  The core polls a
 *                  request before releasing it (xfer_free_locked): that
 *                  poll may be the one that sees the flush end, and the
 *                  caller releasing what it saw in flight must not get the
 *                  notification delivered; a caller polling to completion
 *                  pays one more poll;
 *   UCX_BY_THREAD  the progress thread: only for a request whose caller
 *                  last had it back (its post or status call returning) at
 *                  least UCX_NOTIF_GRACE_NS ago.  The thread is there for callers
 *                  who do not call in; one who posted a moment ago still
 *                  does and may be about to release it (a 64 MiB WRITE over
 *                  tcp is past its puts, waiting for its flush's answer,
 *                  when post returns). */
#define UCX_NOTIF_GRACE_NS 2000000ull

static void ucx_cancel_mark_locked(ucx_be_t *be, ucx_req_t *r, uint64_t asked_ns);

/* Move one request on: notification after the flush, then its end.  A
 * cancel recorded while the lock was held elsewhere is applied first, so
 * the notification of a request canceled by then never goes. */
static void ucx_req_advance(ucx_be_t *be, ucx_req_t *r, int by, uint64_t now)
{
    if (r->state != UCX_REQ_RUN)
        return;
    if (nixl_unlikely(!r->canceling)) {
        uint64_t asked = atomic_load_explicit(&r->cancel_asked_ns, memory_order_acquire);
        if (asked)
            ucx_cancel_mark_locked(be, r, asked);
    }
    int may_notify = by == UCX_BY_POST || (by == UCX_BY_CALL && r->flush_seen) ||
                     (by == UCX_BY_THREAD && now - r->caller_ns >= UCX_NOTIF_GRACE_NS);
    if (r->flushed && r->notif_len && !r->notif_sent && !r->canceling && r->op_status == UCS_OK &&
        r->inflight == 0 && may_notify) {
        /* The flush completed: every operation of the request completed at
         * the peer.  Only now may the notification go. */
        nixl_status_t st = r->peer->ep ? ucx_notif_post_locked(be, r->peer, r->notif, r->notif_len, r)
                                       : NIXL_ERR_PEER_GONE;
        UCX_DEBUG(be, "ucx: request %p to %s: notification handed to UCX (status %d)", (void *)r, r->peer->name,
                  (int)st);
        if (st == NIXL_OK)
            r->notif_sent = 1;
        else if (r->op_status == UCS_OK)
            r->op_status = st == NIXL_ERR_PEER_GONE ? UCS_ERR_CONNECTION_RESET : UCS_ERR_IO_ERROR;
    }
    if (r->flushed && by == UCX_BY_CALL)
        r->flush_seen = 1;
    /* The notification's own send does not hold the request: once UCX has
     * it, every byte landed and it will be delivered; the request is done.
     * Its buffer (r->notif) is ours and outlives the send (release and a
     * repost wait for it, ucx_req_quiesce_locked). */
    if (r->inflight || r->flush_req)
        return;
    if (r->op_status != UCS_OK) {
        /* Canceled first: a deadline's request whose peer was found
         * stalled for it (ucx_cancel_bound_locked) is the caller's cancel. */
        nixl_status_t st = r->canceling && !r->notif_sent ? NIXL_ERR_CANCELED
                           : r->peer->gone                 ? NIXL_ERR_PEER_GONE
                                                           : ucx_status_of(r->op_status);
        ucx_req_end(be, r, st);
        return;
    }
    if (r->canceling && !r->notif_sent) {
        ucx_req_end(be, r, NIXL_ERR_CANCELED);
        return;
    }
    if (!r->flushed)
        return;
    if (r->notif_len && !r->notif_sent)
        return;
    ucx_req_end(be, r, NIXL_OK);
}

/* The cancel bound: UCX 1.13 cannot cancel a put, a get or a flush, so a
 * canceled request ends only once UCX completed its operations, which on a
 * live but slow link (30% loss) took up to 18.6 s.  After release_wait_ms
 * the peer is treated as stalled, as the silence rule does: its endpoint
 * is closed (UCX then ends every operation on it: this request ends
 * CANCELED, the peer's others PEER_GONE) and a new one is made from its
 * address at least twice peer_timeout_ms later.  That wait also gives
 * bytes of the old endpoint still in the kernel's queues time to land or
 * be dropped before a later request's go on the new one (UCX says nothing
 * of when they are gone: a wait, not a proof). */
static void ucx_cancel_bound_locked(ucx_be_t *be, ucx_req_t *r, uint64_t now)
{
    if (!r->canceling || r->state != UCX_REQ_RUN || (!r->inflight && !r->flush_req) || !r->peer->ep ||
        now < r->cancel_ns + be->release_wait_ms * 1000000ull) /* a cancel asked after now was read: not yet */
        return;
    char why[160];
    snprintf(why, sizeof(why), "a canceled request's operations were still in flight %llu ms after the cancel "
             "(release_wait_ms; a slow or lossy link)", (unsigned long long)((now - r->cancel_ns) / 1000000ull));
    ucx_peer_stalled_locked(be, r->peer, why);
}

void ucx_reqs_advance_locked(ucx_be_t *be, int by, uint64_t now)
{
    for (ucx_req_t *r = be->run, *next; r; r = next) {
        next = r->next_run;
        if (r->peer->gone && r->peer->ep) /* close it: UCX then ends its operations */
            ucx_peer_fail_locked(be, r->peer, "UCX reported it unreachable");
        ucx_cancel_bound_locked(be, r, now);
        ucx_req_advance(be, r, by, now);
    }
}

/* Wait until nothing of UCX's refers to r: its operations and its
 * notification's send.  Bounded by release_wait_ms, then the peer's
 * endpoint is closed so UCX ends what is left.  0 when quiet. */
static int ucx_req_quiesce_locked(ucx_be_t *be, ucx_req_t *r)
{
    uint64_t deadline = nixl_now_ns() + be->release_wait_ms * 1000000ull;
    while ((r->state == UCX_REQ_RUN || r->am_req) && nixl_now_ns() < deadline) {
        (void)ucx_peer_check_locked(be, r->peer);
        ucx_progress_locked(be);
    }
    if (r->state == UCX_REQ_RUN || r->am_req) {
        /* Closing the endpoint makes UCX end every operation on it; the
         * peer may only be slow: tried again later, as after silence. */
        ucx_peer_stalled_locked(be, r->peer, "a released request did not finish within release_wait_ms");
        deadline = nixl_now_ns() + 1000000000ull;
        while ((r->state == UCX_REQ_RUN || r->am_req) && nixl_now_ns() < deadline)
            ucx_progress_locked(be);
    }
    return r->state == UCX_REQ_RUN || r->am_req ? -1 : 0;
}

static nixl_status_t ucx_req_status(const ucx_req_t *r)
{
    switch (r->state) {
    case UCX_REQ_RUN:
        return NIXL_IN_PROG;
    case UCX_REQ_DONE:
        return NIXL_OK;
    case UCX_REQ_FAILED:
        return r->err;
    default:
        return NIXL_ERR_INVALID_PARAM;
    }
}

/* A request UCX cannot carry for a reason of memory: NIXL_ERR_NO_PATH,
 * with one ERROR line per instance (DEBUG after it; README, VRAM). */
static nixl_status_t ucx_no_path(ucx_be_t *be, const char *why, const char *whose)
{
    nixl_log_level_t lvl = atomic_exchange_explicit(&be->vram_logged, 1, memory_order_relaxed) ? NIXL_LOG_DEBUG
                                                                                              : NIXL_LOG_ERROR;
    NIXL_BE_LOG(be->host, lvl, "ucx: VRAM cannot be moved through this backend: %s (UCX %s); no path for %s VRAM", why,
                ucp_get_version_string(), whose);
    return NIXL_ERR_NO_PATH;
}

/* What a request may be: a WRITE or a READ between DRAM and VRAM; local
 * VRAM only when this UCX handles CUDA memory (remote VRAM is the peer's
 * UCX's to handle: its key says, ucx_pair_check). */
static nixl_status_t ucx_op_check(ucx_be_t *be, nixl_op_t op, nixl_mem_t lmem, nixl_mem_t rmem)
{
    if (op != NIXL_OP_WRITE && op != NIXL_OP_READ)
        return NIXL_ERR_INVALID_PARAM;
    if ((lmem != NIXL_MEM_DRAM && lmem != NIXL_MEM_VRAM) || (rmem != NIXL_MEM_DRAM && rmem != NIXL_MEM_VRAM)) {
        UCX_ERROR(be, "ucx: memory types DRAM and VRAM only (local %d, remote %d)", (int)lmem, (int)rmem);
        return NIXL_ERR_MEM_TYPE;
    }
    if (lmem == NIXL_MEM_VRAM && !be->has_cuda)
        return ucx_no_path(be, "this UCX lacks CUDA support (ucp_context memory types: host only)", "local");
    return NIXL_OK;
}

/* A local region and a remote one of ours that a piece may move between
 * (a key without its bytes is unpacked again at post). */
static int ucx_pair_usable(const ucx_reg_t *g, const ucx_rmd_t *rm)
{
    return g && g->memh && rm && (rm->rkey || rm->packed) && rm->peer;
}

/* Why a pair is not usable: GPU memory UCX could not map here, or that
 * the peer's UCX could not (its key has none), is NO_PATH; anything else
 * (a region of another backend) INVALID_PARAM. */
static nixl_status_t ucx_pair_check(ucx_be_t *be, const ucx_reg_t *g, const ucx_rmd_t *rm)
{
    if (nixl_likely(ucx_pair_usable(g, rm)))
        return NIXL_OK;
    if (g && g->mem == NIXL_MEM_VRAM && !g->memh)
        return ucx_no_path(be, be->has_cuda ? "UCX refused to map this GPU region (the WARN at its registration)"
                                            : "this UCX lacks CUDA support (ucp_context memory types: host only)",
                           "local");
    if (rm && (rm->flags & UCX_RKEY_F_NOCUDA))
        return ucx_no_path(be, "the peer's UCX has no key for it (no CUDA support there, or it refused the mapping)",
                           "the peer's");
    return NIXL_ERR_INVALID_PARAM;
}

static ucx_req_t *ucx_req_new(ucx_be_t *be, ucx_peer_t *peer, nixl_op_t op, nixl_mem_t lmem, nixl_mem_t rmem)
{
    const int lv = lmem == NIXL_MEM_VRAM, rv = rmem == NIXL_MEM_VRAM, gpu = lv || rv;
    ucx_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->be = be;
    r->peer = peer;
    r->op = op;
    r->state = UCX_REQ_IDLE;
    atomic_init(&r->quiet, 1);
    r->hdr.path = peer->path[gpu] ? peer->path[gpu] : "ucx.unknown";
    r->hdr.fallback = (uint32_t)peer->fallback[gpu];
    r->cause = peer->cause[gpu];
    r->chunk = peer->chunk[gpu] ? peer->chunk[gpu] : UCX_CHUNK;
    r->lvram = lv;
    r->rvram = rv;
    /* GPU memory: what UCX chose for this kind, once known (the lanes
     * alone do not say: a lane of cuda_ipc, and UCX may still emulate a
     * READ or a WRITE from host memory over shared memory). */
    const ucx_chose_t *c = &peer->chose[op == NIXL_OP_READ][lv][rv];
    if (gpu && c->known && c->path)
        ucx_req_chosen(r, c);
    r->learn = gpu && be->proto_v2 && !c->known;
    return r;
}

nixl_status_t ucx_xfer_prepare(void *bev, const nixl_be_xfer_t *x, nixl_be_req_t **req_out)
{
    ucx_be_t *be = bev;
    if (!x || !req_out || !x->peer || (x->count && !x->iov))
        return NIXL_ERR_NULL;
    nixl_status_t st = ucx_op_check(be, x->op, x->local_mem, x->remote_mem);
    if (st != NIXL_OK)
        return st;
    for (size_t i = 0; i < x->count; i++)
        if (nixl_unlikely(!ucx_pair_usable(x->iov[i].lmd, x->iov[i].rmd)))
            return ucx_pair_check(be, x->iov[i].lmd, x->iov[i].rmd);
    ucx_req_t *r = ucx_req_new(be, x->peer, x->op, x->local_mem, x->remote_mem);
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->iov = x->iov;
    r->count = x->count;
    *req_out = &r->hdr;
    return NIXL_OK;
}

/* The indexed form (paged KV as the engine holds it: layers x nslots
 * pieces at base + slot x stride on each side): nothing per piece is
 * built, so preparing costs the layers, not the pieces; the post computes
 * each piece's addresses from its layer and slot (ucx_post_indexed).  The
 * core checked that every layer's span lies inside one registration on
 * each side (backend.h). */
nixl_status_t ucx_xfer_prepare_indexed(void *bev, const nixl_be_xfer_indexed_t *x, nixl_be_req_t **req_out)
{
    ucx_be_t *be = bev;
    if (!x || !req_out || !x->peer || !x->layer || !x->lslots || !x->rslots)
        return NIXL_ERR_NULL;
    nixl_status_t st = ucx_op_check(be, x->op, x->local_mem, x->remote_mem);
    if (st != NIXL_OK)
        return st;
    if (x->layers == 0 || x->nslots == 0 || x->item_len == 0)
        return NIXL_ERR_ZERO_LENGTH;
    if (x->layers > SIZE_MAX / x->nslots || x->item_len > UINT64_MAX / (x->layers * x->nslots) ||
        x->bytes != x->item_len * x->layers * x->nslots) {
        UCX_ERROR(be, "ucx: indexed request of %zu x %zu pieces of %llu bytes does not add up to %llu bytes",
                  x->layers, x->nslots, (unsigned long long)x->item_len, (unsigned long long)x->bytes);
        return NIXL_ERR_INVALID_PARAM;
    }
    for (size_t l = 0; l < x->layers; l++) {
        const ucx_rmd_t *rm = x->layer[l].rmd;
        st = ucx_pair_check(be, x->layer[l].lmd, rm);
        if (nixl_unlikely(st == NIXL_ERR_NO_PATH))
            return st;
        if (nixl_unlikely(st != NIXL_OK || rm->peer != x->peer)) {
            UCX_ERROR(be, "ucx: layer %zu of an indexed request has no registration of this backend on both sides",
                      l);
            return NIXL_ERR_INVALID_PARAM;
        }
    }
    ucx_req_t *r = ucx_req_new(be, x->peer, x->op, x->local_mem, x->remote_mem);
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->ix = *x;
    *req_out = &r->hdr;
    return NIXL_OK;
}

/* Quiet requests.  Once a call of the caller's finds its request ended
 * with nothing of it left to UCX or to the queue of posts, it marks it
 * quiet, last thing before it lets go of the lock: the progress thread
 * and UCX's callbacks touch only requests on be->run, in the queue or
 * with a notification's send in flight, so no one but the caller touches
 * it until the caller posts it again (which clears it first).  The
 * caller's status, cancel and release of a quiet request then take no
 * lock: the usual request (posted, polled to its end, released) pays for
 * the lock once less, and one that ended before the progress thread went
 * into a long UCX call is still seen ended and released at once. */
static void ucx_req_settle_locked(ucx_req_t *r)
{
    if (r->state != UCX_REQ_RUN && !r->am_req && !r->in_pend &&
        atomic_load_explicit(&r->defer, memory_order_relaxed) == UCX_DEFER_NONE)
        atomic_store_explicit(&r->quiet, 1, memory_order_release);
}

static int ucx_req_quiet(ucx_req_t *r)
{
    return atomic_load_explicit(&r->quiet, memory_order_acquire);
}

/* The caller's post, status and cancel wait for the instance's lock at
 * most UCX_CALL_WAIT_MS.  UCX 1.13's tcp transport sends its connection packets
 * with a blocking send inside ucp_worker_progress: under 30% loss one
 * progress call of the thread held the lock 1 to 11 s (README, Not done
 * yet), and the core calls status and cancel with the agent's lock held,
 * so every thread of the application waited with it; the ABI also says
 * cancel must not block.  Past the wait, status says NIXL_IN_PROG (true
 * or stale: the next call tells), a cancel is recorded for whoever holds
 * the lock next (ucx_req_advance) and a post is queued (deferred posts,
 * below): a request UCX holds still ends only when UCX lets go of its
 * operations.  The core's progress does not wait (ucx.c); a release waits
 * unless its request is quiet (above), since its memory must be UCX's no
 * longer when it returns.  pthread_mutex_timedlock
 * counts on CLOCK_REALTIME (its monotonic sibling is not intercepted by
 * the thread sanitizer): a step of the wall clock changes one wait. */
#define UCX_CALL_WAIT_MS 10

static int ucx_lock_bounded(ucx_be_t *be)
{
    if (pthread_mutex_trylock(&be->lock) != 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += UCX_CALL_WAIT_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_mutex_timedlock(&be->lock, &ts) != 0)
            return 0;
    }
    ucx_cu_enter(be);
    return 1;
}

/* A copy of a notification in a request's buffer (*buf, grown as needed):
 * the post's own (r->notif, which a send in flight may still read until
 * the request is quiet) or a queued post's (r->pend_notif). */
static nixl_status_t ucx_msg_keep(void **buf, size_t *cap, size_t *len, const void *msg, size_t n)
{
    if (n > *cap) {
        void *p = realloc(*buf, n);
        if (!p)
            return NIXL_ERR_NO_MEMORY;
        *buf = p;
        *cap = n;
    }
    if (n)
        memcpy(*buf, msg, n);
    *len = n;
    return NIXL_OK;
}

/* One piece of a post: len bytes between laddr and raddr, as operations of
 * at most r->chunk bytes.  Over a network transport pieces above UCX_CHUNK
 * go as several: each completion is news that the link moves (the silence
 * rule), where one 64 MiB put on a slow link would say nothing for
 * seconds.  An operation UCX refuses sets r->op_status and stops the post. */
static void ucx_post_piece(ucx_be_t *be, ucx_req_t *r, const ucp_request_param_t *rp, uint64_t laddr, uint64_t raddr,
                           uint64_t len, ucp_rkey_h rkey)
{
    ucp_ep_h ep = r->peer->ep;
    int wr = r->op == NIXL_OP_WRITE;
    for (uint64_t off = 0, n; off < len; off += n) {
        n = len - off < r->chunk ? len - off : r->chunk;
        void *lp = (void *)(uintptr_t)(laddr + off);
        void *q = wr ? ucp_put_nbx(ep, lp, n, raddr + off, rkey, rp) : ucp_get_nbx(ep, lp, n, raddr + off, rkey, rp);
        if (nixl_likely(q == NULL))
            continue;
        if (nixl_unlikely(UCS_PTR_IS_ERR(q))) {
            r->op_status = UCS_PTR_STATUS(q);
            UCX_ERROR(be, "ucx: %s of %llu bytes to %s: %s", wr ? "ucp_put_nbx" : "ucp_get_nbx",
                      (unsigned long long)n, r->peer->name, ucs_status_string(r->op_status));
            return;
        }
        r->inflight++;
    }
}

/* The pieces of an indexed request, layer by layer; a run of slots next
 * to each other on both sides (strides of one item) is one piece. */
static void ucx_post_indexed(ucx_be_t *be, ucx_req_t *r, ucp_request_param_t *rp)
{
    const nixl_be_xfer_indexed_t *x = &r->ix;
    const size_t ns = x->nslots;
    const uint64_t item = x->item_len;
    const int adjacent = x->lstride == item && x->rstride == item;
    for (size_t l = 0; l < x->layers && r->op_status == UCS_OK; l++) {
        const nixl_be_layer_t *ly = &x->layer[l];
        ucx_rmd_t *rm = ly->rmd;
        if (nixl_unlikely(rm->gen != r->peer->gen || !rm->rkey) &&
            (r->op_status = ucx_rmd_fresh_locked(be, rm)) != UCS_OK)
            return; /* the peer's endpoint was closed or renewed since the key was unpacked */
        const ucx_reg_t *g = ly->lmd;
        rp->memh = g->memh;
        if (g->cu_ctx)
            ucx_cu_use(be, g->cu_ctx); /* GPU memory of another context than the instance's */
        for (size_t t = 0; t < ns && r->op_status == UCS_OK;) {
            const uint64_t ls = x->lslots[t], rs = x->rslots[t];
            size_t run = 1;
            if (adjacent)
                while (t + run < ns && x->lslots[t + run] == ls + run && x->rslots[t + run] == rs + run)
                    run++;
            ucx_post_piece(be, r, rp, ly->lbase + ls * x->lstride, ly->rbase + rs * x->rstride, run * item, rm->rkey);
            t += run;
        }
    }
}

static nixl_status_t ucx_post_locked(ucx_be_t *be, ucx_req_t *r, const void *notif, size_t notif_len)
{
    nixl_status_t st;
    if (r->state == UCX_REQ_RUN) {
        st = NIXL_ERR_IN_FLIGHT;
        goto out;
    }
    ucx_peer_t *peer = r->peer;
    if (nixl_unlikely(r->am_req) && ucx_req_quiesce_locked(be, r) != 0) {
        st = NIXL_ERR_IN_FLIGHT; /* the last notification's send never ended */
        goto out;
    }
    st = ucx_peer_check_locked(be, peer);
    if (st != NIXL_OK || !peer->ep) {
        st = NIXL_ERR_PEER_GONE;
        r->state = UCX_REQ_FAILED;
        r->err = st;
        goto out;
    }
    st = ucx_msg_keep(&r->notif, &r->notif_cap, &r->notif_len, notif, notif_len);
    if (st != NIXL_OK)
        goto out;
    r->state = UCX_REQ_RUN;
    r->err = NIXL_OK;
    r->inflight = 0;
    r->op_status = UCS_OK;
    r->flush_req = NULL;
    r->flushed = 0;
    r->am_req = NULL;
    r->notif_sent = 0;
    r->canceling = 0;
    r->caller_ns = nixl_now_ns();
    r->flush_seen = 0;
    ucx_run_add(be, r);
    be->posts++;
    if (r->hdr.fallback)
        be->host->fallback(be->host->ctx, r->hdr.path, r->cause);

    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH,
        .cb.send = ucx_op_done,
        .user_data = r,
    };
    if (r->ix.layer)
        ucx_post_indexed(be, r, &rp);
    for (size_t i = 0; i < r->count && r->op_status == UCS_OK; i++) {
        const nixl_be_iov_t *v = &r->iov[i];
        ucx_rmd_t *rm = v->rmd;
        if (nixl_unlikely(rm->gen != peer->gen || !rm->rkey) && (r->op_status = ucx_rmd_fresh_locked(be, rm)) != UCS_OK)
            break; /* the peer's endpoint was closed or renewed since the key was unpacked */
        const ucx_reg_t *g = v->lmd;
        rp.memh = g->memh;
        if (g->cu_ctx)
            ucx_cu_use(be, g->cu_ctx); /* GPU memory of another context than the instance's */
        ucx_post_piece(be, r, &rp, v->laddr, v->raddr, v->len, rm->rkey);
    }
    if (r->op_status == UCS_OK) {
        ucp_request_param_t fp = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = ucx_flush_done,
            .user_data = r,
        };
        void *q = ucp_ep_flush_nbx(peer->ep, &fp);
        if (q == NULL)
            r->flushed = 1;
        else if (UCS_PTR_IS_ERR(q))
            r->op_status = UCS_PTR_STATUS(q);
        else
            r->flush_req = q;
    }
    if (nixl_unlikely(r->learn) && r->op_status == UCS_OK)
        ucx_peer_learn_locked(be, peer, r); /* its operations are posted: UCX has chosen */
    ucx_req_advance(be, r, UCX_BY_POST, 0);
    /* One round, not a drain: a small request ends here, a large one
     * returns IN_PROG with its bytes still to move, so a release right
     * after finds it in flight (status calls and the thread move it on). */
    if (r->state == UCX_REQ_RUN) {
        ucp_worker_progress(be->worker);
        ucx_req_advance(be, r, UCX_BY_POST, 0);
    }
    /* The thread's grace counts from when the caller gets control back:
     * under load the round above can outlast the grace, and a thread
     * spinning for the lock would then send the notification of a request
     * its caller is about to release (conformance release_in_flight). */
    r->caller_ns = nixl_now_ns();
    st = ucx_req_status(r);
out:
    return st;
}

/* Deferred posts.  A post that finds the lock held past UCX_CALL_WAIT_MS
 * (a UCX call blocking inside progress) is queued, its notification
 * copied, and returns NIXL_IN_PROG; whoever takes the lock next (the
 * thread's round, a status or progress call, a post, a release) posts the
 * queue in order before anything else, so a later post of the caller's
 * never overtakes it.  Canceled while still queued (a deadline), it is
 * never posted: status says NIXL_ERR_CANCELED at once, without the lock.
 * Its errors at the real post are its status's. */
static nixl_status_t ucx_post_defer(ucx_be_t *be, ucx_req_t *r, const void *notif, size_t notif_len)
{
    nixl_status_t st = ucx_msg_keep(&r->pend_notif, &r->pend_notif_cap, &r->pend_notif_len, notif, notif_len);
    if (st != NIXL_OK)
        return st;
    pthread_mutex_lock(&be->pend_lock);
    atomic_store_explicit(&r->defer, UCX_DEFER_QUEUED, memory_order_release);
    if (!r->in_pend) { /* still on it from a post canceled while queued: once is enough */
        r->in_pend = 1;
        r->next_pend = NULL;
        if (be->pend_tail)
            be->pend_tail->next_pend = r;
        else
            be->pend_head = r;
        be->pend_tail = r;
    }
    atomic_fetch_add_explicit(&be->npend, 1, memory_order_release);
    pthread_mutex_unlock(&be->pend_lock);
    UCX_DEBUG(be, "ucx: request %p to %s: post queued (the instance's lock is held inside UCX)", (void *)r,
              r->peer->name);
    return NIXL_IN_PROG;
}

unsigned ucx_posts_drain_locked(ucx_be_t *be)
{
    if (nixl_likely(atomic_load_explicit(&be->npend, memory_order_acquire) == 0))
        return 0;
    unsigned posted = 0;
    pthread_mutex_lock(&be->pend_lock);
    ucx_req_t *q = be->pend_head, *take = NULL, **tail = &take;
    be->pend_head = be->pend_tail = NULL;
    atomic_store_explicit(&be->npend, 0, memory_order_relaxed);
    for (ucx_req_t *r = q, *next; r; r = next) {
        next = r->next_pend;
        r->in_pend = 0;
        r->next_pend = NULL;
        int queued = UCX_DEFER_QUEUED; /* else canceled while queued: dropped */
        if (atomic_compare_exchange_strong(&r->defer, &queued, UCX_DEFER_TAKEN)) {
            *tail = r;
            tail = &r->next_pend;
        }
    }
    pthread_mutex_unlock(&be->pend_lock);
    for (ucx_req_t *r = take, *next; r; r = next) {
        next = r->next_pend;
        r->next_pend = NULL;
        nixl_status_t st = ucx_post_locked(be, r, r->pend_notif, r->pend_notif_len);
        if (st != NIXL_OK && st != NIXL_IN_PROG && r->state != UCX_REQ_RUN && r->state != UCX_REQ_FAILED) {
            r->state = UCX_REQ_FAILED; /* the post's own error (no memory): its status says it */
            r->err = st;
        }
        atomic_store_explicit(&r->defer, UCX_DEFER_NONE, memory_order_release);
        posted++;
    }
    return posted;
}

nixl_status_t ucx_xfer_post(void *bev, nixl_be_req_t *req, const void *notif, size_t notif_len)
{
    ucx_be_t *be = bev;
    ucx_req_t *r = (ucx_req_t *)req;
    if (!r)
        return NIXL_ERR_NULL;
    if (notif_len && !notif)
        return NIXL_ERR_NULL;
    if (atomic_load_explicit(&r->defer, memory_order_acquire) == UCX_DEFER_QUEUED)
        return NIXL_ERR_IN_FLIGHT; /* its last post is still queued */
    /* The caller's side: a cancel of an earlier post is over. */
    atomic_store_explicit(&r->quiet, 0, memory_order_relaxed);
    atomic_store_explicit(&r->cancel_asked_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&r->defer, UCX_DEFER_NONE, memory_order_relaxed);
    if (nixl_unlikely(!ucx_lock_bounded(be)))
        return ucx_post_defer(be, r, notif, notif_len);
    ucx_posts_drain_locked(be); /* those queued before this one go first */
    nixl_status_t st = ucx_post_locked(be, r, notif, notif_len);
    ucx_req_settle_locked(r);
    ucx_unlock(be);
    return st;
}

nixl_status_t ucx_xfer_status(void *bev, nixl_be_req_t *req)
{
    ucx_be_t *be = bev;
    ucx_req_t *r = (ucx_req_t *)req;
    if (!r)
        return NIXL_ERR_NULL;
    if (ucx_req_quiet(r))
        return ucx_req_status(r);
    if (nixl_unlikely(atomic_load_explicit(&r->defer, memory_order_acquire) == UCX_DEFER_CANCELED))
        return NIXL_ERR_CANCELED; /* canceled while queued: never posted */
    /* The caller is polling: the thread stands by (ucx_thread_main). */
    atomic_store_explicit(&be->caller_poll_ns, nixl_now_ns(), memory_order_relaxed);
    if (nixl_unlikely(!ucx_lock_bounded(be)))
        return NIXL_IN_PROG; /* the lock's holder is inside UCX: ask again */
    ucx_posts_drain_locked(be); /* this one, if queued */
    if (r->state == UCX_REQ_RUN) {
        (void)ucx_peer_check_locked(be, r->peer); /* a dead process: its endpoint is closed */
        ucx_progress_locked(be);
        /* The caller is here: the thread's grace starts again.  Read now,
         * not the progress call's time: closing a failed peer's endpoint
         * inside it can take 100 ms, and a grace counted from before that
         * would let the thread notify a request its caller may be about
         * to release. */
        r->caller_ns = nixl_now_ns();
        atomic_store_explicit(&be->caller_poll_ns, r->caller_ns, memory_order_relaxed);
    }
    nixl_status_t st = ucx_req_status(r);
    ucx_req_settle_locked(r);
    ucx_unlock(be);
    return st;
}

/* Canceling starts: the notification is never sent from now on, and the
 * cancel bound counts from asked_ns (when the caller asked). */
static void ucx_cancel_mark_locked(ucx_be_t *be, ucx_req_t *r, uint64_t asked_ns)
{
    r->cancel_ns = asked_ns;
    r->canceling = 1;
    UCX_DEBUG(be, "ucx: request %p to %s: canceling (inflight %zu, flush %s)", (void *)r, r->peer->name,
              r->inflight, r->flush_req ? "pending" : r->flushed ? "done" : "none");
    /* UCX 1.13 cancels receives only: for our flush this asks nothing it
     * can refuse, and the request still ends only once UCX let go of its
     * operations (completed, or ended when the endpoint was closed). */
    if (r->flush_req)
        ucp_request_cancel(be->worker, r->flush_req);
}

static void ucx_cancel_locked(ucx_be_t *be, ucx_req_t *r)
{
    if (r->state != UCX_REQ_RUN)
        return;
    if (!r->canceling)
        ucx_cancel_mark_locked(be, r, nixl_now_ns());
    ucx_req_advance(be, r, UCX_BY_CALL, 0);
}

void ucx_xfer_cancel(void *bev, nixl_be_req_t *req)
{
    ucx_be_t *be = bev;
    ucx_req_t *r = (ucx_req_t *)req;
    if (!r || ucx_req_quiet(r))
        return; /* a quiet request has nothing in flight */
    int queued = UCX_DEFER_QUEUED;
    if (atomic_compare_exchange_strong(&r->defer, &queued, UCX_DEFER_CANCELED))
        return; /* still queued: it will never be posted */
    atomic_fetch_add(&be->cancel_waiting, 1);
    int locked = ucx_lock_bounded(be);
    atomic_fetch_sub(&be->cancel_waiting, 1);
    if (nixl_unlikely(!locked)) {
        /* Recorded: the holder applies it before it advances the request. */
        uint64_t none = 0;
        atomic_compare_exchange_strong(&r->cancel_asked_ns, &none, nixl_now_ns());
        UCX_DEBUG(be, "ucx: request %p: cancel recorded (the instance's lock is held inside UCX)", (void *)r);
        return;
    }
    ucx_cancel_locked(be, r);
    ucx_unlock(be);
}

void ucx_xfer_release(void *bev, nixl_be_req_t *req)
{
    ucx_be_t *be = bev;
    ucx_req_t *r = (ucx_req_t *)req;
    if (!r)
        return;
    if (ucx_req_quiet(r))
        goto free_it;
    int queued = UCX_DEFER_QUEUED;
    (void)atomic_compare_exchange_strong(&r->defer, &queued, UCX_DEFER_CANCELED); /* never posted now */
    atomic_fetch_add(&be->cancel_waiting, 1);
    ucx_lock(be);
    atomic_fetch_sub(&be->cancel_waiting, 1);
    ucx_posts_drain_locked(be); /* takes this one off the queue */
    if (r->state == UCX_REQ_RUN || r->am_req) {
        ucx_cancel_locked(be, r);
        if (ucx_req_quiesce_locked(be, r) != 0) {
            /* UCX may still complete into it: keep the request rather
             * than free memory a callback would write. */
            UCX_ERROR(be, "ucx: a released request to %s never finished: leaked", r->peer->name);
            if (r->state == UCX_REQ_RUN)
                ucx_run_del(be, r);
            ucx_unlock(be);
            return;
        }
    }
    ucx_unlock(be);
free_it:
    free(r->notif);
    free(r->pend_notif);
    free(r);
}
