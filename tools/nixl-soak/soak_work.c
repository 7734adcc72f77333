/*
 * soak_work.c - one posting thread of the soak driver.  All threads share
 * the driver's one agent (NIXL_THREAD_SERIALIZED); each owns one slot of
 * every buffer, on this side and on every peer, so their bytes never mix.
 *
 * Each op draws a size (1 B .. 4 MiB, log-uniform), a descriptor count
 * (1 .. 4096, log-uniform, at most one per byte), a peer and which buffers
 * (shared mapping or plain malloc) on each side, then cuts the range into
 * pieces that land in a shuffled order on the remote side.  Ops: WRITE and
 * READ (with or without a notification, sometimes re-posted, sometimes made
 * through the two-step prep/make form), a WRITE to every peer at once, and
 * a request released while in flight.  Every byte is checked: a WRITE by
 * the peer (when its notification arrives, or on request), a READ here.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "soak_driver.h"

#define XFER_TIMEOUT_NS (30ull * 1000000000ull)
#define CMD_TIMEOUT_MS 30000

/* ------------------------------------------------------------------------
 * Mailboxes
 * ------------------------------------------------------------------------ */

void soak_mbox_init(soak_mbox_t *mb)
{
    memset(mb, 0, sizeof(*mb));
    pthread_mutex_init(&mb->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&mb->cv, &ca);
    pthread_condattr_destroy(&ca);
}

void soak_mbox_destroy(soak_mbox_t *mb)
{
    pthread_cond_destroy(&mb->cv);
    pthread_mutex_destroy(&mb->mu);
    free(mb->q);
}

void soak_mbox_push(soak_mbox_t *mb, const soak_rep_t *r)
{
    pthread_mutex_lock(&mb->mu);
    if (mb->n == mb->cap) {
        size_t cap = mb->cap ? mb->cap * 2 : 16;
        soak_rep_t *q = realloc(mb->q, cap * sizeof(*q));
        if (!q)
            abort();
        mb->q = q;
        mb->cap = cap;
    }
    mb->q[mb->n++] = *r;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

int soak_mbox_take(soak_mbox_t *mb, uint32_t want, uint32_t alt, int peer, uint64_t id, unsigned timeout_ms,
                   soak_rep_t *out, uint64_t *stale)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&mb->mu);
    int rc = -1;
    for (;;) {
        size_t keep = 0;
        for (size_t i = 0; i < mb->n; i++) {
            soak_rep_t *r = &mb->q[i];
            if (rc < 0 && r->id == id && r->peer == peer && (r->type == want || (alt && r->type == alt))) {
                *out = *r;
                rc = 0;
                continue;
            }
            if (r->id != id) {
                (*stale)++;
                continue;
            }
            mb->q[keep++] = *r;
        }
        mb->n = keep;
        if (rc == 0 || atomic_load(&soak.failed))
            break;
        /* Wake now and then: a failed run stops waiting at once. */
        struct timespec now, until;
        clock_gettime(CLOCK_MONOTONIC, &now);
        until = now;
        until.tv_nsec += 100000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        if (until.tv_sec > dl.tv_sec || (until.tv_sec == dl.tv_sec && until.tv_nsec > dl.tv_nsec))
            until = dl;
        if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec))
            break;
        pthread_cond_timedwait(&mb->cv, &mb->mu, &until);
    }
    /* One last look: the report may have come with the timeout. */
    for (size_t i = 0; rc < 0 && i < mb->n; i++) {
        soak_rep_t *r = &mb->q[i];
        if (r->id == id && r->peer == peer && (r->type == want || (alt && r->type == alt))) {
            *out = *r;
            mb->q[i] = mb->q[--mb->n];
            rc = 0;
        }
    }
    pthread_mutex_unlock(&mb->mu);
    return rc;
}

/* ------------------------------------------------------------------------
 * Drawing an op
 * ------------------------------------------------------------------------ */

static uint64_t rnd(soak_worker_t *w)
{
    w->rng += 0x9e3779b97f4a7c15ull;
    return soak_mix64(w->rng);
}

/* Log-uniform in [lo, hi]. */
static uint64_t rnd_log(soak_worker_t *w, uint64_t lo, uint64_t hi)
{
    int bits = 0;
    while ((2ull << bits) <= hi)
        bits++;
    uint64_t b = rnd(w) % (uint64_t)(bits + 1);
    uint64_t v = (1ull << b) + rnd(w) % (1ull << b);
    return v < lo ? lo : v > hi ? hi : v;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct spec {
    nixl_op_t op;
    int peer;
    uint32_t lkind, rkind;
    uint64_t lstart, rstart, size, seed, id;
} spec_t;

/* Cut [0, size) into w->n pieces; the remote side holds them in a shuffled
 * order (in order one time in three, so runs merge too). */
static void spec_draw(soak_worker_t *w, spec_t *s, uint64_t min_size)
{
    s->size = rnd_log(w, min_size, SOAK_MAX_SIZE);
    uint64_t want = rnd_log(w, 1, s->size < SOAK_MAX_DESCS ? s->size : SOAK_MAX_DESCS);
    s->peer = (int)(rnd(w) % (uint64_t)soak.o.peers);
    s->lkind = (uint32_t)(rnd(w) % SOAK_KINDS);
    s->rkind = (uint32_t)(rnd(w) % SOAK_KINDS);
    s->lstart = rnd(w) % (SOAK_SLOT - s->size + 1);
    s->rstart = rnd(w) % (SOAK_SLOT - s->size + 1);
    s->seed = rnd(w);
    s->id = ++w->op_id;

    /* Cut points: want-1 distinct values in [1, size). */
    uint64_t *cut = w->roff; /* scratch until the offsets are computed */
    size_t nc = 0;
    for (uint64_t i = 0; i + 1 < want; i++)
        cut[nc++] = 1 + rnd(w) % (s->size - 1);
    qsort(cut, nc, sizeof(*cut), cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < nc; i++)
        if (u == 0 || cut[i] != cut[u - 1])
            cut[u++] = cut[i];
    w->n = u + 1;
    uint64_t prev = 0;
    for (size_t i = 0; i < w->n; i++) {
        uint64_t end = i < u ? cut[i] : s->size;
        w->len[i] = end - prev;
        w->loff[i] = s->lstart + prev;
        prev = end;
    }
    for (size_t i = 0; i < w->n; i++)
        w->perm[i] = (uint32_t)i;
    if (rnd(w) % 3) {
        for (size_t i = w->n; i > 1; i--) {
            size_t j = rnd(w) % i;
            uint32_t t = w->perm[i - 1];
            w->perm[i - 1] = w->perm[j];
            w->perm[j] = t;
        }
    }
    uint64_t at = s->rstart;
    for (size_t k = 0; k < w->n; k++) {
        uint32_t i = w->perm[k];
        w->roff[i] = at;
        at += w->len[i];
    }
    uint8_t *lslot = soak.buf[s->lkind] + (size_t)w->t * SOAK_SLOT;
    for (size_t i = 0; i < w->n; i++) {
        w->ld[i] = (nixl_desc_t){.addr = (uintptr_t)(lslot + w->loff[i]), .len = w->len[i]};
        w->idx[i] = (uint32_t)i;
    }
}

/* Remote descriptors of the current layout on one peer. */
static void spec_remote(soak_worker_t *w, const spec_t *s, int peer)
{
    uint64_t rslot = soak.peer[peer].base[s->rkind] + (uint64_t)w->t * SOAK_SLOT;
    for (size_t i = 0; i < w->n; i++)
        w->rd[i] = (nixl_desc_t){.addr = rslot + w->roff[i], .len = w->len[i]};
}

static uint8_t *local_slot(const soak_worker_t *w, const spec_t *s)
{
    return soak.buf[s->lkind] + (size_t)w->t * SOAK_SLOT;
}

/* A WRITE's source: each piece holds what its remote place must hold. */
static void fill_local(soak_worker_t *w, const spec_t *s)
{
    uint8_t *slot = local_slot(w, s);
    for (size_t i = 0; i < w->n; i++)
        soak_fill(slot + w->loff[i], w->len[i], s->seed, w->roff[i]);
}

static void poison_local(soak_worker_t *w, const spec_t *s)
{
    soak_fill(local_slot(w, s) + s->lstart, s->size, ~s->seed, s->lstart);
}

static uint64_t check_local(soak_worker_t *w, const spec_t *s, uint64_t *first_bad)
{
    uint8_t *slot = local_slot(w, s);
    uint64_t bad = 0;
    for (size_t i = 0; i < w->n; i++) {
        uint64_t f = 0, b = soak_check(slot + w->loff[i], w->len[i], s->seed, w->roff[i], &f);
        if (b && !bad)
            *first_bad = w->roff[i] + f;
        bad += b;
    }
    return bad;
}

/* ------------------------------------------------------------------------
 * Talking to the library and the peers
 * ------------------------------------------------------------------------ */

static const char *op_name(nixl_op_t op)
{
    return op == NIXL_OP_READ ? "READ" : "WRITE";
}

static void count_error(soak_worker_t *w, nixl_status_t st, const spec_t *s, const char *what)
{
    uint64_t i = st < 0 && -st < SOAK_ERR_CODES ? (uint64_t)-st : 0;
    w->c.errors[i]++;
    soak_fail("thread %d op %llu: %s (%s of %llu B in %zu pieces to peer %d): %s", w->t,
              (unsigned long long)s->id, what, op_name(s->op), (unsigned long long)s->size, w->n, s->peer,
              nixl_status_name(st));
}

static nixl_status_t xfer_wait(nixl_xfer_t *x, nixl_status_t st)
{
    uint64_t deadline = soak_now_ns() + XFER_TIMEOUT_NS;
    unsigned spins = 0;
    while (st == NIXL_IN_PROG) {
        if (soak_now_ns() > deadline)
            return NIXL_ERR_TIMEOUT;
        /* Yield first, then nap: the backend's workers need the cores. */
        if (spins++ < 16)
            sched_yield();
        else
            soak_sleep_us(50);
        st = nixl_xfer_status(x);
    }
    return st;
}

static void count_done(soak_worker_t *w, nixl_xfer_t *x, const spec_t *s)
{
    w->c.transfers++;
    w->c.bytes += s->size;
    w->c.descs += w->n;
    atomic_fetch_add(&soak.transfers, 1);
    nixl_xfer_info_t info;
    if (nixl_xfer_info(x, &info) != NIXL_OK)
        return;
    for (int i = 0; i < SOAK_PATHS; i++) {
        if (!w->c.path[i][0])
            snprintf(w->c.path[i], sizeof(w->c.path[i]), "%s", info.path);
        if (strcmp(w->c.path[i], info.path) == 0) {
            w->c.path_count[i]++;
            return;
        }
    }
}

static void send_cmd(soak_worker_t *w, const spec_t *s, int peer, uint32_t type)
{
    soak_cmd_t c = {.type = type, .thread = w->t, .kind = s->rkind, .id = s->id,
                    .start = s->rstart, .size = s->size, .seed = s->seed};
    /* One message of 64 bytes: a pipe write of at most PIPE_BUF is atomic,
     * so threads share the pipe without a lock. */
    if (soak_write_all(soak.peer[peer].cmd_fd, &c, sizeof(c)))
        soak_fail("thread %d: peer %d's command pipe is closed", w->t, peer);
}

/* Wait for a peer's report about op s; a missing one is a lost
 * notification (notified) or a silent peer. */
static int wait_report(soak_worker_t *w, const spec_t *s, int peer, uint32_t type, uint32_t alt, int notified,
                       soak_rep_t *r)
{
    unsigned tmo = notified ? soak.o.notif_timeout_ms : CMD_TIMEOUT_MS;
    if (soak_mbox_take(&w->mb, type, alt, peer, s->id, tmo, r, &w->c.unexpected_reports) == 0) {
        if (r->status != NIXL_OK) {
            count_error(w, r->status, s, "the peer refused a command");
            return -1;
        }
        return 0;
    }
    if (atomic_load(&soak.failed))
        return -1; /* the run ends anyway: not a loss of its own */
    if (notified) {
        w->c.lost_notifs++;
        soak_fail("thread %d op %llu: no notification reached peer %d within %u ms (%s of %llu B)", w->t,
                  (unsigned long long)s->id, peer, tmo, op_name(s->op), (unsigned long long)s->size);
    } else {
        soak_fail("thread %d op %llu: peer %d did not answer within %u ms", w->t, (unsigned long long)s->id, peer,
                  tmo);
    }
    return -1;
}

static void check_result(soak_worker_t *w, const spec_t *s, int peer, uint64_t bad, uint64_t first, const char *where)
{
    if (!bad)
        return;
    w->c.mismatches += bad;
    soak_fail("thread %d op %llu: %llu bytes wrong %s (%s of %llu B in %zu pieces, peer %d, %s -> %s buffers), "
              "first at slot offset %llu",
              w->t, (unsigned long long)s->id, (unsigned long long)bad, where, op_name(s->op),
              (unsigned long long)s->size, w->n, peer, s->lkind == SOAK_KIND_MAP ? "map" : "cma",
              s->rkind == SOAK_KIND_MAP ? "map" : "cma", (unsigned long long)first);
}

static nixl_status_t make_xfer(soak_worker_t *w, const spec_t *s, int peer, const soak_notif_t *notif,
                               nixl_xfer_t **x)
{
    nixl_opt_args_t opt = {0};
    if (notif) {
        opt.field_mask = NIXL_OPT_NOTIF;
        opt.notif = notif;
        opt.notif_len = sizeof(*notif);
    }
    spec_remote(w, s, peer);
    nixl_dlist_t l = {NIXL_MEM_DRAM, w->n, w->ld}, r = {NIXL_MEM_DRAM, w->n, w->rd};
    if (rnd(w) % 4)
        return nixl_xfer_create(soak.agent, s->op, &l, &r, soak.peer[peer].name, &opt, x);
    /* The two-step form, with the index arrays reversed: same pairs. */
    w->c.two_step++;
    nixl_prep_t *lp = NULL, *rp = NULL;
    nixl_status_t st = nixl_prep_create(soak.agent, NULL, &l, NULL, &lp);
    if (st == NIXL_OK)
        st = nixl_prep_create(soak.agent, soak.peer[peer].name, &r, NULL, &rp);
    if (st == NIXL_OK) {
        for (size_t i = 0; i < w->n; i++)
            w->idx[i] = (uint32_t)(w->n - 1 - i);
        st = nixl_xfer_make(soak.agent, s->op, lp, w->idx, rp, w->idx, w->n, &opt, x);
    }
    nixl_prep_release(rp);
    nixl_prep_release(lp);
    return st;
}

static soak_notif_t notif_of(const soak_worker_t *w, const spec_t *s, uint32_t type)
{
    return (soak_notif_t){.magic = SOAK_NOTIF_MAGIC, .type = type, .thread = w->t, .kind = s->rkind,
                          .id = s->id, .start = s->rstart, .size = s->size, .seed = s->seed,
                          .op = (uint32_t)s->op};
}

/* ------------------------------------------------------------------------
 * Ops
 * ------------------------------------------------------------------------ */

/* WRITE (optionally re-posted): the peer checks, then poisons its range, so
 * every post must move every byte again. */
static void op_write(soak_worker_t *w, spec_t *s)
{
    s->op = NIXL_OP_WRITE;
    int notified = (int)(rnd(w) % 2);
    soak_notif_t m = notif_of(w, s, SN_WRITE);
    fill_local(w, s);
    nixl_xfer_t *x = NULL;
    nixl_status_t st = make_xfer(w, s, s->peer, notified ? &m : NULL, &x);
    if (st != NIXL_OK) {
        count_error(w, st, s, "making the request");
        return;
    }
    w->c.writes++;
    for (int post = 0;; post++) {
        st = xfer_wait(x, nixl_xfer_post(x));
        if (st != NIXL_OK) {
            count_error(w, st, s, post ? "re-posting" : "posting");
            break;
        }
        count_done(w, x, s);
        soak_rep_t r;
        if (notified)
            w->c.notif_expected++;
        else
            send_cmd(w, s, s->peer, SC_VERIFY);
        if (wait_report(w, s, s->peer, SR_VERIFIED, 0, notified, &r))
            break;
        if (notified)
            w->c.notif_received++;
        check_result(w, s, s->peer, r.mismatches, r.first_bad, "at the peer");
        if (post == 2 || rnd(w) % 4)
            break;
        w->c.reposts++;
    }
    nixl_xfer_release(x);
}

/* READ: the peer fills its range first; the notification (if any) must
 * find that range untouched. */
static void op_read(soak_worker_t *w, spec_t *s)
{
    s->op = NIXL_OP_READ;
    int notified = (int)(rnd(w) % 2);
    soak_notif_t m = notif_of(w, s, SN_READ);
    soak_rep_t r;
    send_cmd(w, s, s->peer, SC_FILL);
    if (wait_report(w, s, s->peer, SR_FILLED, 0, 0, &r))
        return;
    nixl_xfer_t *x = NULL;
    nixl_status_t st = make_xfer(w, s, s->peer, notified ? &m : NULL, &x);
    if (st != NIXL_OK) {
        count_error(w, st, s, "making the request");
        return;
    }
    w->c.reads++;
    for (int post = 0;; post++) {
        poison_local(w, s);
        st = xfer_wait(x, nixl_xfer_post(x));
        if (st != NIXL_OK) {
            count_error(w, st, s, post ? "re-posting" : "posting");
            break;
        }
        count_done(w, x, s);
        uint64_t first = 0, bad = check_local(w, s, &first);
        check_result(w, s, s->peer, bad, first, "here after the READ");
        if (notified) {
            w->c.notif_expected++;
            if (wait_report(w, s, s->peer, SR_READ_NOTIF, 0, 1, &r))
                break;
            w->c.notif_received++;
            check_result(w, s, s->peer, r.mismatches, r.first_bad, "in the READ's source");
        }
        if (post == 2 || rnd(w) % 4)
            break;
        w->c.reposts++;
    }
    nixl_xfer_release(x);
}

/* One WRITE to every peer, all in flight at once. */
static void op_fanout(soak_worker_t *w, spec_t *s)
{
    s->op = NIXL_OP_WRITE;
    soak_notif_t m = notif_of(w, s, SN_WRITE);
    nixl_xfer_t *x[SOAK_MAX_PEERS] = {0};
    nixl_status_t st[SOAK_MAX_PEERS];
    fill_local(w, s);
    w->c.fanouts++;
    for (int p = 0; p < soak.o.peers; p++) {
        st[p] = make_xfer(w, s, p, &m, &x[p]);
        if (st[p] != NIXL_OK) {
            count_error(w, st[p], s, "making a fan-out request");
            goto out;
        }
    }
    for (int p = 0; p < soak.o.peers; p++)
        st[p] = nixl_xfer_post(x[p]);
    for (int p = 0; p < soak.o.peers; p++) {
        st[p] = xfer_wait(x[p], st[p]);
        if (st[p] != NIXL_OK) {
            count_error(w, st[p], s, "fan-out WRITE");
            continue;
        }
        count_done(w, x[p], s);
        w->c.writes++;
        w->c.notif_expected++;
    }
    for (int p = 0; p < soak.o.peers; p++) {
        soak_rep_t r;
        if (st[p] != NIXL_OK || wait_report(w, s, p, SR_VERIFIED, 0, 1, &r))
            continue;
        w->c.notif_received++;
        check_result(w, s, p, r.mismatches, r.first_bad, "at a fan-out peer");
    }
out:
    for (int p = 0; p < soak.o.peers; p++)
        nixl_xfer_release(x[p]);
}

/* Release in flight.  The release may win (nothing more lands, no
 * notification) or lose to completion (the notification comes, with every
 * byte): a standalone fence notification behind it tells which, as a
 * peer's notifications arrive in order. */
static void op_cancel(soak_worker_t *w, spec_t *s)
{
    s->op = rnd(w) % 2 ? NIXL_OP_WRITE : NIXL_OP_READ;
    int notified = (int)(rnd(w) % 2);
    soak_notif_t m = notif_of(w, s, SN_CANCEL);
    if (s->op == NIXL_OP_WRITE)
        fill_local(w, s);
    nixl_xfer_t *x = NULL;
    nixl_status_t st = make_xfer(w, s, s->peer, notified ? &m : NULL, &x);
    if (st != NIXL_OK) {
        count_error(w, st, s, "making the request");
        return;
    }
    w->c.cancels++;
    nixl_status_t posted = nixl_xfer_post(x);
    if (posted == NIXL_IN_PROG) {
        if (rnd(w) % 2)
            soak_sleep_us((unsigned)(rnd(w) % 200));
        w->c.cancels_in_flight++;
    } else if (posted != NIXL_OK) {
        count_error(w, posted, s, "posting a request to release");
    }
    nixl_xfer_release(x);
    if (!notified || posted < 0)
        return;
    soak_notif_t fence = notif_of(w, s, SN_FENCE);
    w->c.notif_expected++;
    st = nixl_notif_send(soak.agent, soak.peer[s->peer].name, &fence, sizeof(fence), NULL);
    if (st != NIXL_OK) {
        count_error(w, st, s, "sending the fence notification");
        return;
    }
    int seen = 0;
    for (;;) {
        soak_rep_t r;
        if (wait_report(w, s, s->peer, SR_FENCE, SR_CANCEL_NOTIF, 1, &r))
            return;
        if (r.type == SR_FENCE)
            break;
        seen++;
        w->c.cancel_notifs++;
        check_result(w, s, s->peer, r.mismatches, r.first_bad, "at the peer, notified after a release");
    }
    w->c.notif_received++;
    if (seen > 1) {
        w->c.unexpected_reports += (uint64_t)seen - 1;
        soak_fail("thread %d op %llu: one request, %d notifications", w->t, (unsigned long long)s->id, seen);
    }
    if (posted == NIXL_OK && !seen) {
        /* It completed inside post, before the release: its notification
         * was owed. */
        w->c.lost_notifs++;
        soak_fail("thread %d op %llu: a request completed inside post, its notification never came", w->t,
                  (unsigned long long)s->id);
    }
}

void *soak_worker_main(void *arg)
{
    soak_worker_t *w = arg;
    while (!atomic_load(&soak.stop)) {
        if (soak.o.count && atomic_fetch_add(&soak.started, 1) >= soak.o.count)
            break;
        spec_t s;
        uint64_t pick = rnd(w) % 100;
        if (pick < 15) {
            spec_draw(w, &s, 128 * 1024);
            op_cancel(w, &s);
        } else if (pick < 25 && soak.o.peers > 1) {
            spec_draw(w, &s, 1);
            op_fanout(w, &s);
        } else if (pick < 60) {
            spec_draw(w, &s, 1);
            op_read(w, &s);
        } else {
            spec_draw(w, &s, 1);
            op_write(w, &s);
        }
        w->c.ops++;
    }
    return NULL;
}

void soak_fail(const char *fmt, ...)
{
    atomic_store(&soak.failed, 1);
    atomic_store(&soak.stop, 1);
    if (atomic_fetch_add(&soak.error_lines, 1) >= 10)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "nixl-soak: FAIL: %s\n", msg);
}
