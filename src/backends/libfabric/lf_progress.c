/*
 * lf_progress.c - completion queues, and the thread that keeps the fabric
 * moving when the application does not call in.
 *
 * Providers such as tcp and shm progress only when someone reads the CQ,
 * on the target as much as on the initiator: an idle target would stall
 * the writes aimed at it and never answer heartbeats.  So a backend thread
 * (progress_thread=1, the default) reads the CQs whenever no application
 * thread is doing it: it spins while requests of ours are in flight, blocks
 * on the CQs' file descriptors when the provider has them (tcp), and polls
 * with short sleeps when it has none (shm).  While an application thread
 * is polling a request itself the thread stays out of its way.  Either way
 * every libfabric call is made under be->lock.  The thread never posts
 * operations of local VRAM: only ops can have a CUDA context bound (the
 * context rule), so those requests are posted from the application's calls.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lf_int.h"

#define LF_TICK_NS 20000000ull      /* liveness checks at least this often */
#define LF_APP_DRIVES_NS 100000ull  /* an op progressed this recently: leave the CQs to it */
#define LF_SPIN_AFTER_NS 200000ull  /* keep polling this long after the last event */

static void lf_completion(lf_be_t *be, lf_rail_t *rail, void *op_context, uint64_t flags, size_t len, uint64_t data,
                          int err)
{
    lf_ctx_t *ctx = op_context;
    if (((flags & FI_REMOTE_CQ_DATA) && !(flags & FI_RECV)) || (flags & FI_REMOTE_WRITE)) {
        /* A peer's write, not an operation of ours: its context means
         * nothing (shm puts garbage there), except a receive buffer the
         * write consumed when the provider works that way. */
        if (!err && (flags & FI_REMOTE_CQ_DATA))
            lf_ctrl_on_write_data(be, data);
        lf_rxbuf_t *rb = (lf_rxbuf_t *)ctx;
        if (!be->rx_cq_data || rb < rail->rx || rb >= rail->rx + rail->nrx)
            return;
    }
    if (!ctx)
        return;
    switch (ctx->kind) {
    case LF_CTX_DATA:
        lf_req_data_done(be, (lf_slot_t *)ctx, err);
        break;
    case LF_CTX_TX:
        lf_tx_done(be, (lf_cmsg_t *)ctx, err);
        break;
    case LF_CTX_RX: {
        lf_rxbuf_t *rb = (lf_rxbuf_t *)ctx;
        rb->posted = 0;
        if (!err && (flags & FI_RECV))
            lf_ctrl_on_message(be, rb->buf, len);
        else if (err && err != FI_ECANCELED)
            LF_WARN(be, "libfabric: a receive on rail %u failed: %s", rail->index, fi_strerror(err));
        if (be->closing || err == FI_ECANCELED)
            break;
        if (lf_rx_post(be, rail, rb) != NIXL_OK)
            rail->rx_missing++;
        break;
    }
    default:
        LF_ERROR(be, "libfabric: completion with an unknown context on rail %u", rail->index);
        break;
    }
}

static size_t lf_cq_poll(lf_be_t *be, lf_rail_t *rail)
{
    struct fi_cq_data_entry e[LF_CQ_BATCH];
    size_t total = 0;
    for (int round = 0; round < 16; round++) {
        ssize_t n = fi_cq_read(rail->cq, e, LF_CQ_BATCH);
        if (n == -FI_EAGAIN)
            break;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            if (fi_cq_readerr(rail->cq, &ee, 0) == 1) {
                lf_completion(be, rail, ee.op_context, ee.flags, ee.len, ee.data, ee.err ? ee.err : FI_EIO);
                total++;
            }
            continue;
        }
        if (n < 0) {
            LF_ERROR(be, "libfabric: reading the completion queue of rail %u failed: %s", rail->index,
                     fi_strerror((int)-n));
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            lf_completion(be, rail, e[i].op_context, e[i].flags, e[i].len, e[i].data, 0);
        total += (size_t)n;
        if (n < LF_CQ_BATCH)
            break;
    }
    return total;
}

static void lf_rx_repost_missing(lf_be_t *be, lf_rail_t *rail)
{
    unsigned left = 0;
    for (unsigned i = 0; i < rail->nrx; i++) {
        lf_rxbuf_t *rb = &rail->rx[i];
        if (!rb->posted && lf_rx_post(be, rail, rb) != NIXL_OK)
            left++;
    }
    rail->rx_missing = left;
}

size_t lf_progress_locked(lf_be_t *be, int in_op)
{
    size_t n = 0;
    for (unsigned i = 0; i < be->nrails; i++) {
        lf_rail_t *rail = &be->rails[i];
        n += lf_cq_poll(be, rail);
        rail->eagain = 0;
        if (nixl_unlikely(rail->rx_missing))
            lf_rx_repost_missing(be, rail);
    }
    if (be->active)
        lf_reqs_pump(be, in_op);
    uint64_t now = nixl_now_ns();
    if (now >= be->next_tick_ns) {
        lf_conn_tick(be, now);
        if (be->active)
            lf_reqs_tick(be, now);
        uint64_t tick = be->hb_ns / 4 < LF_TICK_NS ? be->hb_ns / 4 : LF_TICK_NS;
        be->next_tick_ns = now + (tick ? tick : 1);
    }
    if (be->txq_head)
        lf_txq_flush(be);
    return n;
}

void lf_progress_op_locked(lf_be_t *be)
{
    uint64_t now = nixl_now_ns();
    uint64_t prev = atomic_exchange_explicit(&be->app_poll_ns, now, memory_order_relaxed);
    atomic_store_explicit(&be->app_gap_ns, now - prev, memory_order_relaxed);
    lf_progress_locked(be, 1);
}

nixl_status_t lf_progress(void *bev)
{
    lf_be_t *be = bev;
    pthread_mutex_lock(&be->lock);
    lf_progress_op_locked(be);
    pthread_mutex_unlock(&be->lock);
    return NIXL_OK;
}

/* ---- the thread ---- */

/* 1 when every CQ may be waited on with epoll (be->lock held). */
static int lf_trywait(lf_be_t *be)
{
    if (be->epfd < 0)
        return 0;
    for (unsigned i = 0; i < be->nrails; i++) {
        struct fid *f = &be->rails[i].cq->fid;
        if (fi_trywait(be->rails[i].fabric, &f, 1) != FI_SUCCESS)
            return 0;
    }
    return 1;
}

static void lf_sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

static void *lf_thread_main(void *arg)
{
    lf_be_t *be = arg;
    uint64_t last_event = 0;
    while (!atomic_load_explicit(&be->stop, memory_order_acquire)) {
        uint64_t now = nixl_now_ns();
        /* An application thread polling a request in a loop drives the
         * CQs itself; one calling in now and then (a target reading its
         * notifications every millisecond) does not. */
        uint64_t app = atomic_load_explicit(&be->app_poll_ns, memory_order_relaxed);
        uint64_t gap = atomic_load_explicit(&be->app_gap_ns, memory_order_relaxed);
        int app_drives = now - app < LF_APP_DRIVES_NS && gap < LF_APP_DRIVES_NS;
        size_t n = 0;
        int busy = 0, can_block = 0;
        uint64_t next_tick;
        pthread_mutex_lock(&be->lock);
        if (!app_drives) {
            n = lf_progress_locked(be, 0);
            busy = be->active != NULL || be->txq_head != NULL;
            if (n)
                last_event = now;
            else if (!busy && now - last_event > LF_SPIN_AFTER_NS)
                can_block = lf_trywait(be);
        } else if (now >= be->next_tick_ns) {
            lf_progress_locked(be, 0);
        }
        next_tick = be->next_tick_ns;
        pthread_mutex_unlock(&be->lock);

        if (app_drives) {
            lf_sleep_ns(200000);
            continue;
        }
        if (busy || n || now - last_event <= LF_SPIN_AFTER_NS) {
            if (!n)
                sched_yield();
            continue;
        }
        uint64_t wait_ns = next_tick > now ? next_tick - now : 0;
        if (can_block) {
            struct epoll_event ev[4];
            int ms = (int)(wait_ns / 1000000ull) + 1;
            int k = epoll_wait(be->epfd, ev, 4, ms);
            if (k > 0)
                last_event = nixl_now_ns(); /* spin a little: more is likely coming */
            continue;
        }
        /* No descriptor to block on: short sleeps keep a target's writes
         * moving without burning a core when nothing happens. */
        lf_sleep_ns(wait_ns < 100000 ? (wait_ns ? wait_ns : 1000) : 100000);
    }
    return NULL;
}

nixl_status_t lf_thread_start(lf_be_t *be)
{
    int all_fds = 1;
    for (unsigned i = 0; i < be->nrails; i++)
        all_fds &= be->rails[i].wait_fd >= 0;
    be->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (be->evfd < 0) {
        LF_ERROR(be, "libfabric: eventfd failed: %s", strerror(errno));
        return NIXL_ERR_BACKEND;
    }
    if (all_fds) {
        be->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (be->epfd < 0) {
            LF_ERROR(be, "libfabric: epoll_create1 failed: %s", strerror(errno));
            goto err_ev;
        }
        struct epoll_event ev = {.events = EPOLLIN};
        if (epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->evfd, &ev) != 0)
            goto err_ep;
        for (unsigned i = 0; i < be->nrails; i++) {
            ev.data.u32 = i + 1;
            if (epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->rails[i].wait_fd, &ev) != 0) {
                LF_ERROR(be, "libfabric: epoll_ctl on the CQ of rail %u failed: %s", i, strerror(errno));
                goto err_ep;
            }
        }
    }
    atomic_store(&be->stop, 0);
    if (pthread_create(&be->thread, NULL, lf_thread_main, be) != 0) {
        LF_ERROR(be, "libfabric: cannot start the progress thread");
        goto err_ep;
    }
    be->thread_started = 1;
    return NIXL_OK;
err_ep:
    if (be->epfd >= 0)
        close(be->epfd);
    be->epfd = -1;
err_ev:
    close(be->evfd);
    be->evfd = -1;
    return NIXL_ERR_BACKEND;
}

void lf_thread_stop(lf_be_t *be)
{
    if (be->thread_started) {
        atomic_store_explicit(&be->stop, 1, memory_order_release);
        uint64_t one = 1;
        ssize_t w = write(be->evfd, &one, sizeof(one));
        (void)w;
        pthread_join(be->thread, NULL);
        be->thread_started = 0;
    }
    if (be->epfd >= 0)
        close(be->epfd);
    if (be->evfd >= 0)
        close(be->evfd);
    be->epfd = be->evfd = -1;
}
