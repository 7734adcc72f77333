/*
 * fake_backend.c - a test backend loaded as a module (libnixl_backend_fake.so).
 *
 * It moves bytes with memcpy between agents of one process and can be told,
 * through its parameters, to behave in the ways the core must handle:
 * complete only after N status polls (so a request stays in flight), fail
 * the Nth registration, report its path as a fallback.  Loading it proves
 * the module path of the backend ABI on every build.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nixl/backend.h"

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
    unsigned regs;
    int fallback;
    pthread_mutex_t lock;
    fake_notif_t *head, **tail; /* delivered on progress() */
} fake_t;

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
    unsigned polls_left;
    int in_flight;
    void *notif;
    size_t notif_len;
    int has_notif;
} fake_req_t;

static const nixl_param_info_t fake_params[] = {
    {"async_polls", "0", "complete a request only after this many status polls"},
    {"fail_reg_at", "0", "fail the Nth registration (0 = never)"},
    {"fallback", "0", "1: report every request as a fallback path"},
};

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
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static nixl_status_t fake_reg(void *be, const nixl_be_region_t *r, void **md)
{
    fake_t *f = be;
    if (f->fail_reg_at && ++f->regs == f->fail_reg_at)
        return NIXL_ERR_BACKEND;
    nixl_be_region_t *c = malloc(sizeof(*c));
    if (!c)
        return NIXL_ERR_NO_MEMORY;
    *c = *r;
    *md = c;
    return NIXL_OK;
}

static void fake_dereg(void *be, void *md)
{
    free(md);
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

static nixl_status_t fake_complete(fake_req_t *r)
{
    for (size_t i = 0; i < r->x.count; i++) {
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
    return NIXL_IN_PROG;
}

static nixl_status_t fake_status(void *be, nixl_be_req_t *h)
{
    fake_req_t *r = (fake_req_t *)h;
    if (!r->in_flight)
        return NIXL_OK;
    if (--r->polls_left > 0)
        return NIXL_IN_PROG;
    return fake_complete(r);
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

static const nixl_backend_ops_t fake_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "fake",
    .description = "test backend: memcpy within one process, scriptable behaviour",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM),
    .caps = NIXL_CAP_LOCAL | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS,
    .params = fake_params,
    .num_params = sizeof(fake_params) / sizeof(fake_params[0]),
    .create = fake_create,
    .destroy = fake_destroy,
    .reg = fake_reg,
    .dereg = fake_dereg,
    .conn_pack = fake_conn_pack,
    .peer_load = fake_peer_load,
    .peer_unload = fake_peer_unload,
    .rkey_load = fake_rkey_load,
    .rkey_unload = fake_rkey_unload,
    .xfer_prepare = fake_prepare,
    .xfer_post = fake_post,
    .xfer_status = fake_status,
    .xfer_release = fake_release,
    .notif_send = fake_notif_send,
    .progress = fake_progress,
};

__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void);
__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void)
{
    return &fake_ops;
}
