/*
 * fake_backend.c - a test backend loaded as a module (libnixl_backend_fake.so).
 *
 * It moves bytes with memcpy between agents of one process and can be told,
 * through its parameters, to behave in the ways the core must handle:
 * complete only after N status polls (so a request stays in flight), fail
 * the Nth registration or those of a given length, take time to register,
 * report its path as a fallback, cancel too late.  Loading it proves the
 * module path of the backend ABI on every build, and that a version-1
 * module (peer_load, a table without peer_open) still works.
 *
 * Built three times: "fake" declares NIXL_CAP_REG_MT and has xfer_cancel;
 * "fake_serial" (FAKE_SERIAL) has neither, so the core must never call its
 * reg/dereg concurrently and cannot enforce deadlines on it;
 * "fake_indexed" (FAKE_INDEXED) is a version-2 module that also takes
 * indexed requests in their own form (xfer_prepare_indexed), or declines
 * them when its parameter "indexed" is 0.  Each
 * counts its registrations (fake_backend.h) so the registration pool's
 * tests can see caps, concurrency and rollbacks from outside.
 */
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_backend.h"
#include "nixl/backend.h"

#ifdef FAKE_SERIAL
#define FAKE_NAME "fake_serial"
#define FAKE_CAP_REG_MT 0u
#elif defined(FAKE_INDEXED)
#define FAKE_NAME "fake_indexed"
#define FAKE_CAP_REG_MT NIXL_CAP_REG_MT
#else
#define FAKE_NAME "fake"
#define FAKE_CAP_REG_MT NIXL_CAP_REG_MT
#endif
#define FAKE_MAX_FAIL_LENS 8
#define FAKE_MAX_TIDS 256

#define FAKE_CONN_MAGIC 0x46414b45u

typedef struct fake_notif {
    struct fake_notif *next;
    char sender[NIXL_NAME_MAX + 1];
    size_t len;
    unsigned char msg[];
} fake_notif_t;

typedef struct fake {
    const nixl_host_services_t *host;
    unsigned async_polls;
    unsigned fail_reg_at;
    unsigned regs; /* atomic: reg() may run on several threads */
    unsigned reg_delay_us;
    size_t num_fail_lens;
    uint64_t fail_len[FAKE_MAX_FAIL_LENS];
    int fail_status[FAKE_MAX_FAIL_LENS];
    int fallback;
    int cancel_late; /* xfer_cancel comes too late: requests complete anyway */
    int indexed;     /* fake_indexed: take indexed requests in their form (else NOT_SUPPORTED) */
    pthread_mutex_t lock;
    fake_notif_t *head, **tail; /* delivered on progress() */
    struct fake_md *dead;       /* deregistered mds, freed at destroy (under lock) */
} fake_t;

/* reg() output.  Deregistered ones are kept until destroy, so a new
 * registration never gets a freed one's address: tests of the core's "the
 * registration changed" checks do not depend on the allocator. */
typedef struct fake_md {
    nixl_be_region_t r; /* first: the md is read as the region */
    struct fake_md *next;
} fake_md_t;

typedef struct fake_conn {
    uint32_t magic;
    uint32_t pid;
    uint64_t self;
} fake_conn_t;

typedef struct fake_req {
    nixl_be_req_t hdr;
    fake_t *be;
    fake_t *peer;
    nixl_be_xfer_t x;
    int is_ix; /* made by xfer_prepare_indexed: ix, not x */
    nixl_be_xfer_indexed_t ix;
    unsigned polls_left;
    int in_flight;
    void *notif;
    size_t notif_len;
    int has_notif;
    int canceled;
} fake_req_t;

static const nixl_param_info_t fake_params[] = {
    {"async_polls", "0", "complete a request only after this many status polls"},
    {"fail_reg_at", "0", "fail the Nth registration (0 = never)"},
    {"fallback", "0", "1: report every request as a fallback path"},
    {"reg_delay_us", "0", "each registration takes this many microseconds (sleeping)"},
    {"cancel_late", "0", "1: xfer_cancel is always too late (the request completes, notification included)"},
    {"fail_len", "", "LEN:STATUS[,LEN:STATUS...]: registrations of exactly LEN bytes fail with that nixl_status_t"},
#ifdef FAKE_INDEXED
    {"indexed", "1", "0 declines indexed requests (NIXL_ERR_NOT_SUPPORTED)"},
#endif
};

/* Process-wide counters of this module (fake_backend.h), all atomic. */
static fake_counters_t g_counters;
static int64_t g_inside;
static int64_t g_tids[FAKE_MAX_TIDS];

__attribute__((visibility("default"))) void fake_test_counters(fake_counters_t *out, int reset);
__attribute__((visibility("default"))) void fake_test_counters(fake_counters_t *out, int reset)
{
    out->reg_calls = __atomic_load_n(&g_counters.reg_calls, __ATOMIC_SEQ_CST);
    out->live = __atomic_load_n(&g_counters.live, __ATOMIC_SEQ_CST);
    out->max_inside = __atomic_load_n(&g_counters.max_inside, __ATOMIC_SEQ_CST);
    out->threads = __atomic_load_n(&g_counters.threads, __ATOMIC_SEQ_CST);
    out->last_tid = __atomic_load_n(&g_counters.last_tid, __ATOMIC_SEQ_CST);
    out->indexed_prepares = __atomic_load_n(&g_counters.indexed_prepares, __ATOMIC_SEQ_CST);
    out->indexed_declined = __atomic_load_n(&g_counters.indexed_declined, __ATOMIC_SEQ_CST);
    if (reset) {
        __atomic_store_n(&g_counters.indexed_prepares, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&g_counters.indexed_declined, 0, __ATOMIC_SEQ_CST);
        /* live is a fact about the backends, not a statistic: kept. */
        __atomic_store_n(&g_counters.reg_calls, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&g_counters.max_inside, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&g_counters.threads, 0, __ATOMIC_SEQ_CST);
        for (size_t i = 0; i < FAKE_MAX_TIDS; i++)
            __atomic_store_n(&g_tids[i], 0, __ATOMIC_SEQ_CST);
    }
}

static int64_t g_meet_inside;
static uint64_t g_meet_total;

__attribute__((visibility("default"))) void fake_test_meet(int64_t inside, uint64_t total);
__attribute__((visibility("default"))) void fake_test_meet(int64_t inside, uint64_t total)
{
    __atomic_store_n(&g_meet_total, total, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_meet_inside, inside, __ATOMIC_SEQ_CST);
}

/* See fake_backend.h: wait for the others of a batch, 5 s at most. */
static void meet_others(void)
{
    int64_t want = __atomic_load_n(&g_meet_inside, __ATOMIC_SEQ_CST);
    if (want <= 0)
        return;
    uint64_t total = __atomic_load_n(&g_meet_total, __ATOMIC_SEQ_CST);
    const struct timespec step = {0, 200000};
    for (int i = 0; i < 25000; i++) {
        if (__atomic_load_n(&g_inside, __ATOMIC_SEQ_CST) >= want ||
            __atomic_load_n(&g_counters.reg_calls, __ATOMIC_SEQ_CST) >= total)
            return;
        nanosleep(&step, NULL);
    }
}

static void inside_enter(void)
{
    int64_t now = __atomic_add_fetch(&g_inside, 1, __ATOMIC_SEQ_CST);
    int64_t max = __atomic_load_n(&g_counters.max_inside, __ATOMIC_SEQ_CST);
    while (now > max &&
           !__atomic_compare_exchange_n(&g_counters.max_inside, &max, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
}

static void inside_leave(void)
{
    __atomic_sub_fetch(&g_inside, 1, __ATOMIC_SEQ_CST);
}

/* Count the calling thread once. */
static void note_thread(void)
{
    int64_t tid = (int64_t)syscall(SYS_gettid);
    __atomic_store_n(&g_counters.last_tid, tid, __ATOMIC_SEQ_CST);
    for (size_t i = 0; i < FAKE_MAX_TIDS; i++) {
        int64_t cur = __atomic_load_n(&g_tids[i], __ATOMIC_SEQ_CST);
        if (cur == tid)
            return;
        if (cur == 0 && __atomic_compare_exchange_n(&g_tids[i], &cur, tid, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            __atomic_add_fetch(&g_counters.threads, 1, __ATOMIC_SEQ_CST);
            return;
        }
        if (cur == tid)
            return;
    }
}

/* "LEN:STATUS,LEN:STATUS"; 0 on success. */
static int parse_fail_lens(fake_t *f, const char *v)
{
    while (v && *v) {
        char *end;
        if (f->num_fail_lens == FAKE_MAX_FAIL_LENS)
            return -1;
        f->fail_len[f->num_fail_lens] = strtoull(v, &end, 10);
        if (*end != ':')
            return -1;
        f->fail_status[f->num_fail_lens] = (int)strtol(end + 1, &end, 10);
        if (*end != ',' && *end != '\0')
            return -1;
        f->num_fail_lens++;
        v = *end ? end + 1 : end;
    }
    return 0;
}

static unsigned param_u(const nixl_param_t *p, size_t n, const char *key)
{
    const char *v = nixl_param_find(p, n, key);
    return v ? (unsigned)strtoul(v, NULL, 10) : 0;
}

static nixl_status_t fake_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t n, void **out)
{
    fake_t *f = calloc(1, sizeof(*f));
    if (!f)
        return NIXL_ERR_NO_MEMORY;
    f->host = host;
    f->async_polls = param_u(params, n, "async_polls");
    f->fail_reg_at = param_u(params, n, "fail_reg_at");
    f->fallback = (int)param_u(params, n, "fallback");
    f->reg_delay_us = param_u(params, n, "reg_delay_us");
    f->cancel_late = (int)param_u(params, n, "cancel_late");
    f->indexed = (int)param_u(params, n, "indexed");
    if (parse_fail_lens(f, nixl_param_find(params, n, "fail_len")) != 0) {
        free(f);
        return NIXL_ERR_INVALID_PARAM;
    }
    pthread_mutex_init(&f->lock, NULL);
    f->tail = &f->head;
    *out = f;
    return NIXL_OK;
}

static void fake_destroy(void *be)
{
    fake_t *f = be;
    while (f->head) {
        fake_notif_t *x = f->head;
        f->head = x->next;
        free(x);
    }
    while (f->dead) {
        fake_md_t *m = f->dead;
        f->dead = m->next;
        free(m);
    }
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static nixl_status_t fake_reg(void *be, const nixl_be_region_t *r, void **md)
{
    fake_t *f = be;
    nixl_status_t st = NIXL_OK;
    inside_enter();
    note_thread();
    __atomic_add_fetch(&g_counters.reg_calls, 1, __ATOMIC_SEQ_CST);
    meet_others();
    if (f->reg_delay_us) {
        struct timespec ts = {f->reg_delay_us / 1000000, (long)(f->reg_delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    unsigned nth = __atomic_add_fetch(&f->regs, 1, __ATOMIC_SEQ_CST);
    if (f->fail_reg_at && nth == f->fail_reg_at)
        st = NIXL_ERR_BACKEND;
    for (size_t i = 0; i < f->num_fail_lens && st == NIXL_OK; i++)
        if (r->len == f->fail_len[i])
            st = (nixl_status_t)f->fail_status[i];
    fake_md_t *c = NULL;
    if (st == NIXL_OK) {
        c = malloc(sizeof(*c));
        if (!c)
            st = NIXL_ERR_NO_MEMORY;
    }
    if (st == NIXL_OK) {
        c->r = *r;
        c->next = NULL;
        *md = c;
        __atomic_add_fetch(&g_counters.live, 1, __ATOMIC_SEQ_CST);
    }
    inside_leave();
    return st;
}

static void fake_dereg(void *be, void *md)
{
    fake_t *f = be;
    inside_enter();
    fake_md_t *m = md;
    pthread_mutex_lock(&f->lock);
    m->next = f->dead;
    f->dead = m;
    pthread_mutex_unlock(&f->lock);
    __atomic_sub_fetch(&g_counters.live, 1, __ATOMIC_SEQ_CST);
    inside_leave();
}

static nixl_status_t fake_conn_pack(void *be, void *buf, size_t *len)
{
    if (buf && *len >= sizeof(fake_conn_t)) {
        fake_conn_t c = {FAKE_CONN_MAGIC, (uint32_t)getpid(), (uint64_t)(uintptr_t)be};
        memcpy(buf, &c, sizeof(c));
    }
    *len = sizeof(fake_conn_t);
    return NIXL_OK;
}

static nixl_status_t fake_peer_load(void *be, const char *name, const void *conn, size_t len, void **out)
{
    fake_conn_t c;
    if (len != sizeof(c))
        return NIXL_ERR_BAD_METADATA;
    memcpy(&c, conn, sizeof(c));
    if (c.magic != FAKE_CONN_MAGIC)
        return NIXL_ERR_BAD_METADATA;
    if (c.pid != (uint32_t)getpid())
        return NIXL_ERR_NO_PATH;
    *out = (void *)(uintptr_t)c.self;
    return NIXL_OK;
}

static void fake_peer_unload(void *be, void *peer) {}

static nixl_status_t fake_rkey_load(void *be, void *peer, const nixl_be_region_t *r, const void *k, size_t n,
                                    void **out)
{
    *out = (void *)(uintptr_t)r->addr;
    return NIXL_OK;
}

static void fake_rkey_unload(void *be, void *rmd) {}

static nixl_status_t fake_prepare(void *be, const nixl_be_xfer_t *x, nixl_be_req_t **out)
{
    fake_t *f = be;
    fake_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->be = f;
    r->peer = x->peer;
    r->x = *x;
    r->hdr.path = f->fallback ? "fake.slow" : "fake.copy";
    r->hdr.fallback = (uint32_t)f->fallback;
    *out = &r->hdr;
    return NIXL_OK;
}

#ifdef FAKE_INDEXED
static nixl_status_t fake_prepare_indexed(void *be, const nixl_be_xfer_indexed_t *x, nixl_be_req_t **out)
{
    fake_t *f = be;
    if (!f->indexed) {
        __atomic_add_fetch(&g_counters.indexed_declined, 1, __ATOMIC_SEQ_CST);
        return NIXL_ERR_NOT_SUPPORTED;
    }
    fake_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->be = f;
    r->peer = x->peer;
    r->is_ix = 1;
    r->ix = *x;
    r->hdr.path = "fake.indexed";
    __atomic_add_fetch(&g_counters.indexed_prepares, 1, __ATOMIC_SEQ_CST);
    *out = &r->hdr;
    return NIXL_OK;
}

static nixl_status_t fake_peer_load(void *be, const char *name, const void *conn, size_t len, void **out);

static nixl_status_t fake_peer_open(void *be, const nixl_be_peer_t *peer, const void *conn, size_t len, void **out)
{
    return fake_peer_load(be, peer->name, conn, len, out);
}
#endif

static nixl_status_t deliver_to(fake_t *peer, const char *sender, const void *msg, size_t len)
{
    fake_notif_t *n = malloc(sizeof(*n) + len);
    if (!n)
        return NIXL_ERR_NO_MEMORY;
    n->next = NULL;
    strncpy(n->sender, sender, NIXL_NAME_MAX);
    n->sender[NIXL_NAME_MAX] = 0;
    n->len = len;
    if (len)
        memcpy(n->msg, msg, len);
    pthread_mutex_lock(&peer->lock);
    *peer->tail = n;
    peer->tail = &n->next;
    pthread_mutex_unlock(&peer->lock);
    return NIXL_OK;
}

/* Piece by piece, checking the core's promise: every piece inside its
 * layer's local registration. */
static nixl_status_t fake_complete_indexed(fake_req_t *r)
{
    const nixl_be_xfer_indexed_t *x = &r->ix;
    for (size_t l = 0; l < x->layers; l++) {
        const nixl_be_layer_t *y = &x->layer[l];
        const nixl_be_region_t *reg = y->lmd;
        for (size_t t = 0; t < x->nslots; t++) {
            uint64_t la = y->lbase + (uint64_t)x->lslots[t] * x->lstride;
            uint64_t ra = y->rbase + (uint64_t)x->rslots[t] * x->rstride;
            if (la < reg->addr || la - reg->addr > reg->len || x->item_len > reg->len - (la - reg->addr))
                return NIXL_ERR_INVALID_PARAM;
            if (x->op == NIXL_OP_WRITE)
                memmove((void *)(uintptr_t)ra, (void *)(uintptr_t)la, x->item_len);
            else
                memmove((void *)(uintptr_t)la, (void *)(uintptr_t)ra, x->item_len);
        }
    }
    return NIXL_OK;
}

static nixl_status_t fake_complete(fake_req_t *r)
{
    if (r->is_ix) {
        nixl_status_t st = fake_complete_indexed(r);
        if (st != NIXL_OK) {
            r->in_flight = 0;
            return st;
        }
    }
    for (size_t i = 0; !r->is_ix && i < r->x.count; i++) {
        const nixl_be_iov_t *v = &r->x.iov[i];
        if (r->x.op == NIXL_OP_WRITE)
            memmove((void *)(uintptr_t)v->raddr, (void *)(uintptr_t)v->laddr, v->len);
        else
            memmove((void *)(uintptr_t)v->laddr, (void *)(uintptr_t)v->raddr, v->len);
    }
    r->in_flight = 0;
    if (r->has_notif)
        return deliver_to(r->peer, r->be->host->agent_name, r->notif, r->notif_len);
    return NIXL_OK;
}

static nixl_status_t fake_post(void *be, nixl_be_req_t *h, const void *notif, size_t len)
{
    fake_req_t *r = (fake_req_t *)h;
    if (r->be->fallback)
        r->be->host->fallback(r->be->host->ctx, "fake.slow", "asked to by the test");
    r->has_notif = notif != NULL;
    r->notif = (void *)notif;
    r->notif_len = len;
    if (r->be->async_polls == 0)
        return fake_complete(r);
    r->polls_left = r->be->async_polls;
    r->in_flight = 1;
    r->canceled = 0;
    return NIXL_IN_PROG;
}

static nixl_status_t fake_status(void *be, nixl_be_req_t *h)
{
    fake_req_t *r = (fake_req_t *)h;
    if (!r->in_flight)
        return r->canceled ? NIXL_ERR_CANCELED : NIXL_OK;
    if (--r->polls_left > 0)
        return NIXL_IN_PROG;
    return fake_complete(r);
}

/* Canceled: nothing copied, no notification (unless cancel_late). */
__attribute__((unused)) static void fake_cancel(void *be, nixl_be_req_t *h)
{
    fake_req_t *r = (fake_req_t *)h;
    if (!r->in_flight || r->be->cancel_late)
        return;
    r->in_flight = 0;
    r->canceled = 1;
}

static void fake_release(void *be, nixl_be_req_t *h)
{
    free(h);
}

static nixl_status_t fake_notif_send(void *be, void *peer, const void *msg, size_t len)
{
    fake_t *f = be;
    return deliver_to(peer, f->host->agent_name, msg, len);
}

static nixl_status_t fake_progress(void *be)
{
    fake_t *f = be;
    pthread_mutex_lock(&f->lock);
    fake_notif_t *list = f->head;
    f->head = NULL;
    f->tail = &f->head;
    pthread_mutex_unlock(&f->lock);
    while (list) {
        fake_notif_t *n = list;
        list = n->next;
        f->host->notif_deliver(f->host->ctx, n->sender, n->msg, n->len);
        free(n);
    }
    return NIXL_OK;
}

/* A version-1 module, as one built before version 2 would be: its table
 * ends before peer_open and it loads peers with peer_load.  It stays at
 * version 1 on purpose: the core must keep loading such modules.
 * fake_indexed is a version-2 module with the whole table. */
static const nixl_backend_ops_t fake_ops = {
#ifdef FAKE_INDEXED
    .abi_version = 2,
    .struct_size = sizeof(nixl_backend_ops_t),
    .peer_open = fake_peer_open,
    .xfer_prepare_indexed = fake_prepare_indexed,
#else
    .abi_version = 1,
    .struct_size = offsetof(nixl_backend_ops_t, peer_open),
    .peer_load = fake_peer_load,
#endif
    .name = FAKE_NAME,
    .description = "test backend: memcpy within one process, scriptable behaviour",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM),
    .caps = NIXL_CAP_LOCAL | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS | FAKE_CAP_REG_MT,
    .params = fake_params,
    .num_params = sizeof(fake_params) / sizeof(fake_params[0]),
    .create = fake_create,
    .destroy = fake_destroy,
    .reg = fake_reg,
    .dereg = fake_dereg,
    .conn_pack = fake_conn_pack,
    .peer_unload = fake_peer_unload,
    .rkey_load = fake_rkey_load,
    .rkey_unload = fake_rkey_unload,
    .xfer_prepare = fake_prepare,
    .xfer_post = fake_post,
    .xfer_status = fake_status,
    .xfer_release = fake_release,
    .notif_send = fake_notif_send,
    .progress = fake_progress,
#ifndef FAKE_SERIAL
    .xfer_cancel = fake_cancel, /* fake_serial has none: deadlines are not enforced there */
#endif
};

__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void);
__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void)
{
    return &fake_ops;
}
