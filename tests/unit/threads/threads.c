/*
 * threads.c - the thread-safety contract of include/nixl.h, tested: one
 * agent in NIXL_THREAD_SERIALIZED used by many threads at once.
 *
 *   test_threads [--seconds S] [--backend NAME]
 *
 * Agent "thr-init" and its peer "thr-target" live in this process.  Four
 * worker threads post, poll, re-post and release requests from the
 * initiator to the target (one-shot and two-step, READ and WRITE, with and
 * without notifications, some released in flight); a registrar thread
 * registers and deregisters scratch memory on both agents; a reloader
 * thread loads the target's metadata into the initiator again and again
 * (now and then invalidating it first); a drain thread takes the target's
 * notifications; a peeker thread polls the workers' requests in flight.
 * Every completed request's bytes are compared; a request whose peer was
 * reloaded must fail its post with NIXL_ERR_STALE (invalidated:
 * NIXL_ERR_PEER_INVALIDATED) and must not have written a byte.  One op in
 * sixteen is made stale on purpose (made, then two reloads awaited, then
 * posted), so the stale path is always exercised.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nixl.h>

#define WORKERS 4
#define SLOT (512u * 1024)
#define MAX_SIZE (256u * 1024)
#define MAX_DESCS 64
#define NOTIF_MAGIC 0x54485244u

static nixl_agent_t *A, *B;
static uint8_t *a_buf, *b_map, *b_cma;
static atomic_int stop, failed, drain_stop; /* the drain outlives the workers */
static atomic_uint_fast64_t generation; /* bumped after every reload */
static atomic_int invalidated;            /* the target is invalidated right now */
static atomic_uint_fast64_t n_ok, n_stale, n_inval, n_cancel, n_reload, n_reg, n_notif, n_forced_stale, n_peeks;

typedef struct worker {
    int t;
    uint64_t rng;
    /* A request in flight the peeker may poll too; cleared (under the
     * mutex) before the worker releases it. */
    pthread_mutex_t share_mu;
    nixl_xfer_t *shared;
    atomic_uint_fast64_t notif_seen; /* last notification id the drain thread checked */
    atomic_uint_fast64_t notif_bad;
} worker_t;

static worker_t workers[WORKERS];

#define FAIL(...)                                                                                \
    do {                                                                                         \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                     \
        fprintf(stderr, __VA_ARGS__);                                                            \
        fprintf(stderr, "\n");                                                                   \
        atomic_store(&failed, 1);                                                                \
        atomic_store(&stop, 1);                                                                  \
    } while (0)

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t rnd(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    return mix64(*s);
}

/* Bytes [o, o+len) of stream seed (o: offset in the slot, so both sides
 * and any piece order check against one stream); one word per 8 bytes. */
static uint64_t pat_word(uint64_t seed, uint64_t o)
{
    return mix64(seed ^ ((o >> 3) * 0x100000001b3ull));
}

static void fill(uint8_t *p, uint64_t o, uint64_t len, uint64_t seed)
{
    uint64_t w = pat_word(seed, o);
    for (uint64_t i = 0; i < len; i++) {
        if (((o + i) & 7) == 0)
            w = pat_word(seed, o + i);
        p[i] = (uint8_t)(w >> (((o + i) & 7) * 8));
    }
}

/* 0 when equal, else 1 + the first wrong index. */
static uint64_t check(const uint8_t *p, uint64_t o, uint64_t len, uint64_t seed)
{
    uint64_t w = pat_word(seed, o);
    for (uint64_t i = 0; i < len; i++) {
        if (((o + i) & 7) == 0)
            w = pat_word(seed, o + i);
        if (p[i] != (uint8_t)(w >> (((o + i) & 7) * 8)))
            return i + 1;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

static nixl_status_t wait_xfer(nixl_xfer_t *x, nixl_status_t st)
{
    uint64_t deadline = now_ns() + 20000000000ull;
    while (st == NIXL_IN_PROG) {
        if (now_ns() > deadline)
            return NIXL_ERR_TIMEOUT;
        nap_us(20);
        st = nixl_xfer_status(x);
    }
    return st;
}

/* ------------------------------------------------------------------------
 * The reloader, the registrar and the drain
 * ------------------------------------------------------------------------ */

static nixl_status_t reload_target(void)
{
    void *blob = NULL;
    size_t len = 0;
    nixl_status_t st = nixl_md_get_local(B, &blob, &len);
    if (st != NIXL_OK)
        return st;
    char name[NIXL_NAME_MAX + 1];
    st = nixl_md_load_remote(A, blob, len, name);
    nixl_free(blob);
    if (st == NIXL_OK && strcmp(name, "thr-target") != 0)
        st = NIXL_ERR_BAD_METADATA;
    return st;
}

static void *reloader_main(void *arg)
{
    (void)arg;
    uint64_t rng = 99;
    while (!atomic_load(&stop)) {
        if (rnd(&rng) % 8 == 0) {
            atomic_store(&invalidated, 1);
            nixl_status_t st = nixl_md_invalidate_remote(A, "thr-target");
            if (st != NIXL_OK)
                FAIL("invalidate: %s", nixl_status_name(st));
            atomic_fetch_add(&generation, 1);
            nap_us(500);
        }
        nixl_status_t st = reload_target();
        if (st != NIXL_OK)
            FAIL("reload: %s", nixl_status_name(st));
        atomic_store(&invalidated, 0);
        atomic_fetch_add(&generation, 1);
        atomic_fetch_add(&n_reload, 1);
        /* Leave room for requests to complete between reloads. */
        nap_us(2000 + (unsigned)(rnd(&rng) % 3000));
    }
    return NULL;
}

static void *registrar_main(void *arg)
{
    (void)arg;
    size_t len = 1 << 16;
    uint8_t *sa = malloc(len), *sb = malloc(len);
    if (!sa || !sb) {
        FAIL("malloc");
        free(sa);
        free(sb);
        return NULL;
    }
    uint64_t rng = 7;
    while (!atomic_load(&stop)) {
        /* Different pieces each time, so the registry really changes. */
        size_t off = (size_t)(rnd(&rng) % 16) * 4096, n = 4096 * (1 + rnd(&rng) % 4);
        nixl_desc_t d[2] = {{.addr = (uintptr_t)(sa + off), .len = n}, {.addr = (uintptr_t)(sb + off), .len = n}};
        nixl_dlist_t la = {NIXL_MEM_DRAM, 1, &d[0]}, lb = {NIXL_MEM_DRAM, 1, &d[1]};
        nixl_status_t st = nixl_mem_register(A, &la, NULL);
        if (st == NIXL_OK)
            st = nixl_mem_register(B, &lb, NULL);
        else
            FAIL("register on the initiator: %s", nixl_status_name(st));
        if (st != NIXL_OK) {
            FAIL("register on the target: %s", nixl_status_name(st));
            break;
        }
        nap_us(200);
        st = nixl_mem_deregister(A, &la, NULL);
        if (st != NIXL_OK)
            FAIL("deregister on the initiator: %s", nixl_status_name(st));
        st = nixl_mem_deregister(B, &lb, NULL);
        if (st != NIXL_OK)
            FAIL("deregister on the target: %s", nixl_status_name(st));
        atomic_fetch_add(&n_reg, 1);
        nap_us(300);
    }
    free(sa);
    free(sb);
    return NULL;
}

typedef struct tnotif {
    uint32_t magic;
    int32_t worker;
    uint32_t cma;
    uint32_t pad;
    uint64_t id, start, size, seed;
} tnotif_t;

/* A notification promises its bytes landed: check them the moment it is
 * seen (the worker waits for this before it touches the slot again). */
static void on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    (void)arg;
    tnotif_t m;
    if (strcmp(sender, "thr-init") != 0 || len != sizeof(m)) {
        FAIL("notification from %s of %zu bytes", sender, len);
        return;
    }
    memcpy(&m, msg, sizeof(m));
    if (m.magic != NOTIF_MAGIC || m.worker < 0 || m.worker >= WORKERS || m.start + m.size > SLOT) {
        FAIL("garbled notification");
        return;
    }
    worker_t *w = &workers[m.worker];
    uint8_t *slot = (m.cma ? b_cma : b_map) + (size_t)m.worker * SLOT;
    if (check(slot + m.start, m.start, m.size, m.seed))
        atomic_fetch_add(&w->notif_bad, 1);
    if (atomic_load(&w->notif_seen) >= m.id)
        FAIL("worker %d: notification %llu came twice or out of order", m.worker, (unsigned long long)m.id);
    atomic_store(&w->notif_seen, m.id);
    atomic_fetch_add(&n_notif, 1);
}

static void *drain_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&drain_stop)) {
        nixl_status_t st = nixl_notifs_get(B, on_notif, NULL, NULL);
        if (st != NIXL_OK) {
            FAIL("nixl_notifs_get: %s", nixl_status_name(st));
            break;
        }
        nap_us(100);
    }
    return NULL;
}

/* Polls the workers' requests from another thread while they poll them
 * too: a request in flight may be polled anywhere, and says only OK or
 * IN_PROG here. */
static void *peeker_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        for (int i = 0; i < WORKERS; i++) {
            worker_t *w = &workers[i];
            pthread_mutex_lock(&w->share_mu);
            if (w->shared) {
                nixl_status_t st = nixl_xfer_status(w->shared);
                nixl_xfer_info_t info;
                if (st != NIXL_OK && st != NIXL_IN_PROG)
                    FAIL("peeker: status of worker %d's request: %s", i, nixl_status_name(st));
                if (nixl_xfer_info(w->shared, &info) != NIXL_OK || info.posts == 0)
                    FAIL("peeker: info of worker %d's request", i);
                atomic_fetch_add(&n_peeks, 1);
            }
            pthread_mutex_unlock(&w->share_mu);
        }
        nap_us(50);
    }
    return NULL;
}

static void share(worker_t *w, nixl_xfer_t *x)
{
    pthread_mutex_lock(&w->share_mu);
    w->shared = x;
    pthread_mutex_unlock(&w->share_mu);
}

/* ------------------------------------------------------------------------
 * Workers
 * ------------------------------------------------------------------------ */

typedef struct op {
    nixl_op_t op;
    int cma; /* target side: the malloc'd buffer (shm.cma) or the shared one */
    size_t n;
    uint64_t start, size, seed, id;
    nixl_desc_t ld[MAX_DESCS], rd[MAX_DESCS];
} op_t;

static uint8_t *a_slot(const worker_t *w)
{
    return a_buf + (size_t)w->t * SLOT;
}

static uint8_t *b_slot(const worker_t *w, const op_t *o)
{
    return (o->cma ? b_cma : b_map) + (size_t)w->t * SLOT;
}

/* Piece i at the same slot offset on both sides; the list runs from the
 * end of the range backwards, so no two pieces merge. */
static void op_draw(worker_t *w, op_t *o)
{
    o->op = rnd(&w->rng) % 2 ? NIXL_OP_WRITE : NIXL_OP_READ;
    o->cma = (int)(rnd(&w->rng) % 2);
    o->size = 1 + rnd(&w->rng) % MAX_SIZE;
    o->n = 1 + rnd(&w->rng) % (o->size < MAX_DESCS ? o->size : MAX_DESCS);
    o->start = rnd(&w->rng) % (SLOT - o->size + 1);
    o->seed = rnd(&w->rng);
    uint64_t piece = o->size / o->n, at = o->start;
    for (size_t i = 0; i < o->n; i++) {
        uint64_t len = i + 1 < o->n ? piece : o->start + o->size - at;
        o->ld[o->n - 1 - i] = (nixl_desc_t){.addr = (uintptr_t)(a_slot(w) + at), .len = len};
        o->rd[o->n - 1 - i] = (nixl_desc_t){.addr = (uintptr_t)(b_slot(w, o) + at), .len = len};
        at += len;
    }
}

/* The destination of the op holds the pattern of seed (source) or of
 * ~seed (the poison a failed post must leave as it was). */
static void op_prime(worker_t *w, const op_t *o)
{
    uint8_t *src = o->op == NIXL_OP_WRITE ? a_slot(w) : b_slot(w, o);
    uint8_t *dst = o->op == NIXL_OP_WRITE ? b_slot(w, o) : a_slot(w);
    fill(src + o->start, o->start, o->size, o->seed);
    fill(dst + o->start, o->start, o->size, ~o->seed);
}

static int op_dst_is(worker_t *w, const op_t *o, uint64_t seed, const char *what)
{
    uint8_t *dst = o->op == NIXL_OP_WRITE ? b_slot(w, o) : a_slot(w);
    uint64_t bad = check(dst + o->start, o->start, o->size, seed);
    if (bad) {
        FAIL("worker %d op %llu: %s %s of %llu B in %zu pieces: byte %llu wrong", w->t, (unsigned long long)o->id,
             what, o->op == NIXL_OP_WRITE ? "WRITE" : "READ", (unsigned long long)o->size, o->n,
             (unsigned long long)(bad - 1));
        return -1;
    }
    return 0;
}

/* A post that fails because the peer changed: the documented codes, and
 * not one byte moved. */
static int refused_ok(worker_t *w, const op_t *o, nixl_status_t st)
{
    if (st == NIXL_ERR_STALE)
        atomic_fetch_add(&n_stale, 1);
    else if (st == NIXL_ERR_PEER_INVALIDATED)
        atomic_fetch_add(&n_inval, 1);
    else
        return 0;
    return op_dst_is(w, o, ~o->seed, "refused") == 0;
}

static nixl_status_t make(worker_t *w, const op_t *o, nixl_prep_t **rp, nixl_xfer_t **x, int notify)
{
    nixl_dlist_t l = {NIXL_MEM_DRAM, o->n, o->ld}, r = {NIXL_MEM_DRAM, o->n, o->rd};
    tnotif_t m = {NOTIF_MAGIC, w->t, (uint32_t)o->cma, 0, o->id, o->start, o->size, o->seed};
    nixl_opt_args_t opt = {.field_mask = notify ? NIXL_OPT_NOTIF : 0, .notif = &m, .notif_len = sizeof(m)};
    if (rnd(&w->rng) % 2)
        return nixl_xfer_create(A, o->op, &l, &r, "thr-target", &opt, x);
    /* Two-step: the remote list is prepared once per op (again when a
     * reload made it stale: make_retry), the local one per call. */
    nixl_prep_t *lp = NULL;
    nixl_status_t st = nixl_prep_create(A, NULL, &l, NULL, &lp);
    if (st == NIXL_OK && !*rp)
        st = nixl_prep_create(A, "thr-target", &r, NULL, rp);
    if (st == NIXL_OK) {
        uint32_t idx[MAX_DESCS];
        for (size_t i = 0; i < o->n; i++)
            idx[i] = (uint32_t)i;
        st = nixl_xfer_make(A, o->op, lp, idx, *rp, idx, o->n, &opt, x);
    }
    nixl_prep_release(lp);
    return st;
}

static int wait_notif(worker_t *w, uint64_t id)
{
    uint64_t deadline = now_ns() + 10000000000ull;
    while (atomic_load(&w->notif_seen) < id) {
        if (now_ns() > deadline) {
            FAIL("worker %d: notification %llu never came (last seen: %llu)", w->t, (unsigned long long)id,
                 (unsigned long long)atomic_load(&w->notif_seen));
            return -1;
        }
        nap_us(50);
    }
    if (atomic_load(&w->notif_bad)) {
        FAIL("worker %d: a notification came before its bytes", w->t);
        return -1;
    }
    return 0;
}

/* Make the op's request, again while the peer is mid-reload or
 * invalidated (the remote prep is then prepared anew). */
static nixl_status_t make_retry(worker_t *w, const op_t *o, nixl_xfer_t **x, int notify)
{
    nixl_prep_t *rp = NULL;
    nixl_status_t st;
    while ((st = make(w, o, &rp, x, notify)) == NIXL_ERR_STALE || st == NIXL_ERR_PEER_INVALIDATED) {
        nixl_prep_release(rp);
        rp = NULL;
        if (atomic_load(&stop))
            break;
        nap_us(200);
    }
    nixl_prep_release(rp);
    if (st != NIXL_OK && !atomic_load(&stop))
        FAIL("worker %d: making a request: %s", w->t, nixl_status_name(st));
    return st;
}

/* Made, then two reloads awaited, then posted: it must be refused.  The
 * first reload counted after making may have finished before the making
 * (the counter is bumped after each load returns); the second started
 * after it. */
static int op_forced_stale(worker_t *w, op_t *o)
{
    nixl_xfer_t *x = NULL;
    op_prime(w, o);
    if (make_retry(w, o, &x, 0) != NIXL_OK)
        return atomic_load(&stop) ? 0 : -1;
    uint64_t g = atomic_load(&generation);
    while (atomic_load(&generation) < g + 2 && !atomic_load(&stop))
        nap_us(100);
    int rc = 0;
    if (atomic_load(&generation) >= g + 2) {
        nixl_status_t st = nixl_xfer_post(x);
        if (!refused_ok(w, o, st)) {
            FAIL("worker %d: post after a reload returned %s, want NIXL_ERR_STALE or PEER_INVALIDATED", w->t,
                 nixl_status_name(st));
            rc = -1;
        }
        atomic_fetch_add(&n_forced_stale, 1);
    }
    nixl_xfer_release(x);
    return rc;
}

/* Posted and released at once: in flight, done, or refused, nothing may
 * break (no notification: a late one would check a reused slot). */
static int op_cancel(worker_t *w, op_t *o)
{
    nixl_xfer_t *x = NULL;
    op_prime(w, o);
    if (make_retry(w, o, &x, 0) != NIXL_OK)
        return atomic_load(&stop) ? 0 : -1;
    nixl_status_t st = nixl_xfer_post(x);
    nixl_xfer_release(x);
    if (st != NIXL_OK && st != NIXL_IN_PROG && st != NIXL_ERR_STALE && st != NIXL_ERR_PEER_INVALIDATED) {
        FAIL("worker %d: post before release: %s", w->t, nixl_status_name(st));
        return -1;
    }
    atomic_fetch_add(&n_cancel, 1);
    return 0;
}

/* Make, post (maybe again), check every byte. */
static int op_run(worker_t *w, op_t *o)
{
    nixl_xfer_t *x = NULL;
    int notify = o->op == NIXL_OP_WRITE && rnd(&w->rng) % 2;
    op_prime(w, o);
    if (make_retry(w, o, &x, notify) != NIXL_OK)
        return atomic_load(&stop) ? 0 : -1;
    int rc = 0;
    for (int post = 0; rc == 0; post++) {
        if (post) /* a re-post must move every byte again */
            fill((o->op == NIXL_OP_WRITE ? b_slot(w, o) : a_slot(w)) + o->start, o->start, o->size, ~o->seed);
        nixl_status_t st = nixl_xfer_post(x);
        if (st == NIXL_IN_PROG)
            share(w, x);
        st = wait_xfer(x, st);
        if (st == NIXL_OK) {
            atomic_fetch_add(&n_ok, 1);
            rc = op_dst_is(w, o, o->seed, "completed");
            if (rc == 0 && notify)
                rc = wait_notif(w, o->id);
        } else if (!refused_ok(w, o, st)) {
            FAIL("worker %d: post: %s", w->t, nixl_status_name(st));
            rc = -1;
        } else {
            break; /* a stale request stays stale */
        }
        /* Notification ids are per op: re-posts go without one. */
        if (notify || post == 2 || rnd(&w->rng) % 2)
            break;
    }
    share(w, NULL);
    nixl_xfer_release(x);
    return rc;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    uint64_t id = 0;
    while (!atomic_load(&stop)) {
        op_t o;
        op_draw(w, &o);
        o.id = ++id;
        uint64_t pick = rnd(&w->rng) % 16;
        int rc = pick == 0 ? op_forced_stale(w, &o) : pick < 3 ? op_cancel(w, &o) : op_run(w, &o);
        if (rc)
            break;
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------ */

static nixl_agent_t *agent_make(const char *name, const char *backend)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_THREAD_MODE,
                               .name = name, .thread_mode = NIXL_THREAD_SERIALIZED};
    nixl_agent_t *a = NULL;
    nixl_backend_t *b;
    nixl_status_t st = nixl_agent_create(&cfg, &a);
    if (st == NIXL_OK && (st = nixl_backend_create(a, backend, NULL, 0, &b)) != NIXL_OK) {
        nixl_agent_destroy(a);
        a = NULL;
    }
    if (st != NIXL_OK)
        fprintf(stderr, "agent %s with backend %s: %s\n", name, backend, nixl_status_name(st));
    return a;
}

static int backend_present(const char *name)
{
    const nixl_backend_info_t *infos;
    size_t n;
    if (nixl_backends_available(&infos, &n) != NIXL_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, name) == 0 && (infos[i].caps & NIXL_CAP_LOCAL))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    double seconds = 3;
    const char *backend = "shm";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--backend") == 0)
            backend = argv[i + 1];
    }
    if (!backend_present(backend)) {
        printf("SKIP: backend %s is absent or cannot join two agents of one process\n", backend);
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t len = (size_t)WORKERS * SLOT;
    void *am = NULL, *bm = NULL;
    if (nixl_mem_alloc(len, &am) != NIXL_OK || nixl_mem_alloc(len, &bm) != NIXL_OK ||
        !(b_cma = aligned_alloc(4096, len))) {
        fprintf(stderr, "cannot allocate buffers\n");
        return 1;
    }
    a_buf = am;
    b_map = bm;
    A = agent_make("thr-init", backend);
    B = agent_make("thr-target", backend);
    if (!A || !B)
        return 1;
    nixl_desc_t da = {.addr = (uintptr_t)a_buf, .len = len};
    nixl_desc_t db[2] = {{.addr = (uintptr_t)b_map, .len = len}, {.addr = (uintptr_t)b_cma, .len = len}};
    nixl_dlist_t la = {NIXL_MEM_DRAM, 1, &da}, lb = {NIXL_MEM_DRAM, 2, db};
    nixl_status_t st = nixl_mem_register(A, &la, NULL);
    if (st == NIXL_OK)
        st = nixl_mem_register(B, &lb, NULL);
    if (st == NIXL_OK)
        st = reload_target();
    if (st == NIXL_OK) {
        /* The target must know the initiator to take its notifications. */
        void *blob;
        size_t blen;
        st = nixl_md_get_local(A, &blob, &blen);
        if (st == NIXL_OK) {
            st = nixl_md_load_remote(B, blob, blen, NULL);
            nixl_free(blob);
        }
    }
    if (st != NIXL_OK) {
        fprintf(stderr, "setup: %s\n", nixl_status_name(st));
        return 1;
    }

    pthread_t th[WORKERS + 3], drain;
    int nth = 0;
    for (int i = 0; i < WORKERS; i++) {
        workers[i].t = i;
        workers[i].rng = mix64(1000 + (uint64_t)i);
        pthread_mutex_init(&workers[i].share_mu, NULL);
        pthread_create(&th[nth++], NULL, worker_main, &workers[i]);
    }
    pthread_create(&th[nth++], NULL, reloader_main, NULL);
    pthread_create(&th[nth++], NULL, registrar_main, NULL);
    pthread_create(&th[nth++], NULL, peeker_main, NULL);
    pthread_create(&drain, NULL, drain_main, NULL);
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
    while (now_ns() < end && !atomic_load(&stop))
        nap_us(10000);
    atomic_store(&stop, 1);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    atomic_store(&drain_stop, 1);
    pthread_join(drain, NULL);

    printf("threads: %llu completed and checked, %llu stale, %llu invalidated (%llu made stale on purpose), "
           "%llu released in flight, %llu notifications, %llu reloads, %llu register/deregister cycles, "
           "%llu polls from another thread\n",
           (unsigned long long)n_ok, (unsigned long long)n_stale, (unsigned long long)n_inval,
           (unsigned long long)n_forced_stale, (unsigned long long)n_cancel, (unsigned long long)n_notif,
           (unsigned long long)n_reload, (unsigned long long)n_reg, (unsigned long long)n_peeks);
    if (!atomic_load(&failed) && (n_ok < 20 || n_forced_stale == 0 || n_reload < 5 || n_reg < 5)) {
        fprintf(stderr, "FAIL: too little happened to mean anything (loaded machine? try --seconds 10)\n");
        atomic_store(&failed, 1);
    }
    st = nixl_mem_deregister(A, &la, NULL);
    if (st == NIXL_OK)
        st = nixl_mem_deregister(B, &lb, NULL);
    if (st != NIXL_OK) {
        fprintf(stderr, "FAIL: final deregistration: %s\n", nixl_status_name(st));
        atomic_store(&failed, 1);
    }
    nixl_agent_destroy(A);
    nixl_agent_destroy(B);
    nixl_mem_free(am, len);
    nixl_mem_free(bm, len);
    free(b_cma);
    printf("%s\n", atomic_load(&failed) ? "FAIL" : "PASS");
    return atomic_load(&failed) ? 1 : 0;
}
