/*
 * shm_test_util.c - the fake host and helpers of the shm backend tests (see
 * shm_test_util.h).  SHM_TEST_LOG=0..4 picks what backend log lines are
 * printed (default 1: errors and warnings).
 */
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../common/test_peer.h"
#include "shm_test_util.h"

const nixl_backend_ops_t *test_ops(void)
{
    return nixl_backend_shm_ops();
}

static int test_log_level(void)
{
    static int level = -2;
    if (level == -2) {
        const char *e = getenv("SHM_TEST_LOG");
        level = e ? atoi(e) : NIXL_LOG_WARN;
    }
    return level;
}

static int host_log_enabled(nixl_log_level_t level)
{
    return (int)level <= test_log_level();
}

static void host_log(nixl_log_level_t level, const char *where, const char *fmt, ...)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%d %s %s] ", (int)getpid(), names[level <= NIXL_LOG_TRACE ? level : 4], where);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *host_config_get(const char *name)
{
    (void)name;
    return NULL;
}

static void host_fallback(void *ctx, const char *path, const char *cause)
{
    test_host_t *h = ctx;
    h->fallbacks++;
    snprintf(h->last_cause, sizeof(h->last_cause), "%s: %s", path, cause);
}

/* Any thread (the backend's receiver thread). */
static void host_notif_deliver(void *ctx, const char *sender, const void *msg, size_t len)
{
    test_host_t *h = ctx;
    pthread_mutex_lock(&h->lock);
    int (*hook)(void *, const void *, size_t) = h->on_notif;
    void *hook_arg = h->on_notif_arg;
    pthread_mutex_unlock(&h->lock);
    int ok = hook ? hook(hook_arg, msg, len) : 1;
    test_notif_t n = {.len = len, .hook_ok = ok};
    snprintf(n.sender, sizeof(n.sender), "%s", sender);
    n.msg = malloc(len ? len : 1);
    CHECK(n.msg);
    memcpy(n.msg, msg, len);
    pthread_mutex_lock(&h->lock);
    CHECK(NIXL_ARRAY_RESERVE(h->inbox, h->inbox_cap, h->inbox_n + 1, 64) == 0);
    h->inbox[h->inbox_n++] = n;
    h->inbox_bytes += len;
    pthread_mutex_unlock(&h->lock);
}

static size_t host_notif_backlog(void *ctx)
{
    test_host_t *h = ctx;
    pthread_mutex_lock(&h->lock);
    size_t n = h->inbox_bytes;
    pthread_mutex_unlock(&h->lock);
    return n;
}

void test_host_set_hook(test_host_t *h, int (*fn)(void *, const void *, size_t), void *arg)
{
    pthread_mutex_lock(&h->lock);
    h->on_notif = fn;
    h->on_notif_arg = arg;
    pthread_mutex_unlock(&h->lock);
}

size_t test_take_notifs(test_host_t *h)
{
    pthread_mutex_lock(&h->lock);
    CHECK(NIXL_ARRAY_RESERVE(h->notifs, h->notifs_cap, h->num_notifs + h->inbox_n, 64) == 0);
    if (h->inbox_n)
        memcpy(h->notifs + h->num_notifs, h->inbox, h->inbox_n * sizeof(*h->inbox));
    h->num_notifs += h->inbox_n;
    h->inbox_n = 0;
    h->inbox_bytes = 0;
    pthread_mutex_unlock(&h->lock);
    return h->num_notifs;
}

void test_host_init(test_host_t *h, const char *agent_name)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->name, sizeof(h->name), "%s", agent_name);
    h->hs.abi_version = NIXL_BACKEND_ABI_VERSION;
    h->hs.struct_size = sizeof(h->hs);
    h->hs.ctx = h;
    h->hs.log_enabled = host_log_enabled;
    h->hs.log = host_log;
    h->hs.config_get = host_config_get;
    h->hs.fallback = host_fallback;
    h->hs.notif_deliver = host_notif_deliver;
    h->hs.notif_backlog = host_notif_backlog;
    h->hs.agent_name = h->name;
    pthread_mutex_init(&h->lock, NULL);
}

void test_host_clear(test_host_t *h)
{
    test_take_notifs(h);
    pthread_mutex_lock(&h->lock);
    free(h->inbox); /* empty after the take; a later delivery makes a new one */
    h->inbox = NULL;
    h->inbox_cap = 0;
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; i < h->num_notifs; i++)
        free(h->notifs[i].msg);
    h->num_notifs = 0;
    free(h->notifs);
    h->notifs = NULL;
    h->notifs_cap = 0;
}

nixl_status_t test_side_create(test_side_t *s, const char *name, ...)
{
    nixl_param_t params[16];
    size_t n = 0;
    va_list ap;
    va_start(ap, name);
    for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
        CHECK(n < 16);
        params[n].key = k;
        params[n].value = va_arg(ap, const char *);
        n++;
    }
    va_end(ap);
    test_host_init(&s->host, name);
    s->be = NULL;
    return test_ops()->create(&s->host.hs, params, n, &s->be);
}

void test_side_destroy(test_side_t *s)
{
    if (s->be)
        test_ops()->destroy(s->be);
    s->be = NULL;
    test_host_clear(&s->host);
}

static size_t page_round(size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (len + page - 1) & ~(page - 1);
}

void test_mem_malloc(test_mem_t *m, size_t len)
{
    m->len = page_round(len);
    m->p = aligned_alloc((size_t)sysconf(_SC_PAGESIZE), m->len);
    CHECK(m->p);
    memset(m->p, 0, m->len);
    m->fd = -1;
}

void test_mem_memfd(test_mem_t *m, size_t len)
{
    m->len = page_round(len);
    m->fd = memfd_create("shm-test", MFD_CLOEXEC);
    CHECK(m->fd >= 0);
    CHECK(ftruncate(m->fd, (off_t)m->len) == 0);
    m->p = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    CHECK(m->p != MAP_FAILED);
}

void test_mem_free(test_mem_t *m)
{
    if (m->fd >= 0) {
        munmap(m->p, m->len);
        close(m->fd);
    } else {
        free(m->p);
    }
    m->p = NULL;
}

void test_fill(uint8_t *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = test_pat(seed, i);
}

void *test_reg(test_side_t *s, const void *addr, size_t len)
{
    nixl_be_region_t r = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)addr, .len = len};
    void *md = NULL;
    CHECK_ST(test_ops()->reg(s->be, &r, &md), NIXL_OK);
    return md;
}

void test_load_remote(test_side_t *ini, test_side_t *tgt, void *tgt_md, uint64_t addr, uint64_t len,
                      test_remote_t *out)
{
    const nixl_backend_ops_t *ops = test_ops();
    uint8_t conn[256], rkey[256];
    size_t conn_len = sizeof(conn), rkey_len = sizeof(rkey);
    CHECK_ST(ops->conn_pack(tgt->be, conn, &conn_len), NIXL_OK);
    CHECK_ST(ops->rkey_pack(tgt->be, tgt_md, rkey, &rkey_len), NIXL_OK);
    /* The record is kept with the peer: the backend may hold its name. */
    out->who = test_peer_here(tgt->host.name, getpid());
    CHECK_ST(ops->peer_open(ini->be, &out->who, conn, conn_len, &out->peer), NIXL_OK);
    nixl_be_region_t r = {.mem_type = NIXL_MEM_DRAM, .addr = addr, .len = len};
    CHECK_ST(ops->rkey_load(ini->be, out->peer, &r, rkey, rkey_len, &out->rmd), NIXL_OK);
}

double test_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

nixl_status_t test_wait(test_side_t *ini, nixl_be_req_t *req)
{
    double deadline = test_now_s() + 30;
    nixl_status_t st;
    while ((st = test_ops()->xfer_status(ini->be, req)) == NIXL_IN_PROG) {
        CHECK(test_now_s() < deadline);
        usleep(50);
    }
    return st;
}

nixl_status_t test_xfer(test_side_t *ini, void *peer, nixl_op_t op, const nixl_be_iov_t *iov, size_t n,
                        const void *notif, size_t notif_len, const char **path_out, nixl_status_t *first_post_out)
{
    const nixl_backend_ops_t *ops = test_ops();
    nixl_be_xfer_t x = {.op = op, .peer = peer, .local_mem = NIXL_MEM_DRAM, .remote_mem = NIXL_MEM_DRAM,
                        .iov = iov, .count = n};
    for (size_t i = 0; i < n; i++)
        x.bytes += iov[i].len;
    nixl_be_req_t *req = NULL;
    nixl_status_t st = ops->xfer_prepare(ini->be, &x, &req);
    if (st != NIXL_OK)
        return st;
    CHECK(req->path);
    if (path_out)
        *path_out = req->path;
    st = ops->xfer_post(ini->be, req, notif, notif_len);
    if (first_post_out)
        *first_post_out = st;
    if (st == NIXL_IN_PROG)
        st = test_wait(ini, req);
    ops->xfer_release(ini->be, req);
    return st;
}

int test_wait_notifs(test_side_t *s, size_t n, int timeout_ms)
{
    double deadline = test_now_s() + timeout_ms / 1000.0;
    for (;;) {
        if (test_ops()->progress)
            CHECK_ST(test_ops()->progress(s->be), NIXL_OK);
        if (test_take_notifs(&s->host) >= n)
            return 1;
        if (test_now_s() > deadline)
            return 0;
        usleep(100);
    }
}

uint32_t *test_perm(size_t n, uint32_t seed)
{
    uint32_t *p = malloc(n * sizeof(*p));
    CHECK(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint32_t)i;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = n; i > 1; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = (size_t)(x % i);
        uint32_t t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    return p;
}
