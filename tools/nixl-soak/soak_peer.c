/*
 * soak_peer.c - a peer process of the soak: its own agent with one slot per
 * driver thread in each of its two buffers.  It serves the driver's
 * commands from a pipe (fill a range for a READ, check a range after a
 * WRITE without notification) and checks its bytes whenever a notification
 * arrives: a WRITE's notification must find every byte of that WRITE in
 * place, which is the promise notifications make.  Results go back on the
 * report pipe; the driver decides what they mean.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nixl.h>

#include "soak.h"

typedef struct peer {
    const soak_peer_args_t *args;
    nixl_agent_t *agent;
    uint8_t *buf[SOAK_KINDS];
    size_t len;
    uint64_t stats[8];
    int failed;
} peer_t;

static void peer_report(peer_t *p, const soak_rep_t *r)
{
    soak_rep_t m = *r;
    m.peer = p->args->index;
    if (soak_write_all(p->args->rep_fd, &m, sizeof(m)))
        p->failed = 1; /* the driver is gone: stop */
}

static void peer_error(peer_t *p, nixl_status_t st, const char *what)
{
    fprintf(stderr, "soak peer %d: %s: %s\n", p->args->index, what, nixl_status_name(st));
    p->stats[SS_ERRORS]++;
    soak_rep_t r = {.type = SR_ERROR, .thread = -1, .status = st};
    peer_report(p, &r);
}

/* The slot range a command or notification names, or NULL when it does not
 * lie inside our buffers (a corrupted message: counted, never touched). */
static uint8_t *peer_range(peer_t *p, int32_t thread, uint32_t kind, uint64_t start, uint64_t size)
{
    if (thread < 0 || thread >= p->args->threads || kind >= SOAK_KINDS || start > SOAK_SLOT ||
        size > SOAK_SLOT - start)
        return NULL;
    return p->buf[kind] + (size_t)thread * SOAK_SLOT;
}

/* Check [start, start+size) of a slot; poison it afterwards so that a
 * re-post which moved nothing cannot pass the next check. */
static void peer_check(peer_t *p, uint8_t *slot, uint64_t start, uint64_t size, uint64_t seed, int poison,
                       soak_rep_t *r)
{
    uint64_t first = 0;
    r->mismatches = soak_check(slot + start, size, seed, start, &first);
    r->first_bad = r->mismatches ? start + first : 0;
    if (poison)
        soak_fill(slot + start, size, ~seed, start);
}

typedef struct notif_q {
    peer_t *p;
    int n;
} notif_q_t;

static void peer_on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    notif_q_t *q = arg;
    peer_t *p = q->p;
    q->n++;
    p->stats[SS_NOTIFS]++;
    soak_notif_t m;
    if (strcmp(sender, SOAK_DRIVER_NAME) != 0 || len != sizeof(m)) {
        p->stats[SS_BAD_NOTIFS]++;
        return;
    }
    memcpy(&m, msg, sizeof(m));
    uint8_t *slot = peer_range(p, m.thread, m.kind, m.start, m.size);
    if (m.magic != SOAK_NOTIF_MAGIC || (!slot && m.type != SN_FENCE)) {
        p->stats[SS_BAD_NOTIFS]++;
        return;
    }
    soak_rep_t r = {.thread = m.thread, .id = m.id};
    switch (m.type) {
    case SN_WRITE:
        r.type = SR_VERIFIED;
        peer_check(p, slot, m.start, m.size, m.seed, 1, &r);
        break;
    case SN_READ:
        /* A READ must leave its source as the driver's fill left it. */
        r.type = SR_READ_NOTIF;
        peer_check(p, slot, m.start, m.size, m.seed, 0, &r);
        break;
    case SN_CANCEL:
        /* Released in flight, yet notified: it must have completed first,
         * so a WRITE's bytes are all there. */
        r.type = SR_CANCEL_NOTIF;
        if (m.op == NIXL_OP_WRITE)
            peer_check(p, slot, m.start, m.size, m.seed, 1, &r);
        break;
    case SN_FENCE:
        r.type = SR_FENCE;
        break;
    default:
        p->stats[SS_BAD_NOTIFS]++;
        return;
    }
    peer_report(p, &r);
}

static void peer_command(peer_t *p, const soak_cmd_t *c)
{
    soak_rep_t r = {.thread = c->thread, .id = c->id};
    uint8_t *slot = peer_range(p, c->thread, c->kind, c->start, c->size);
    switch (c->type) {
    case SC_FILL:
        r.type = SR_FILLED;
        if (!slot) {
            r.status = NIXL_ERR_INVALID_PARAM;
            break;
        }
        soak_fill(slot + c->start, c->size, c->seed, c->start);
        break;
    case SC_VERIFY:
        r.type = SR_VERIFIED;
        if (!slot) {
            r.status = NIXL_ERR_INVALID_PARAM;
            break;
        }
        peer_check(p, slot, c->start, c->size, c->seed, 1, &r);
        break;
    case SC_WARM:
        p->stats[SS_RSS_WARM] = soak_rss_anon();
        p->stats[SS_FDS_WARM] = (uint64_t)soak_fd_count();
        return;
    default:
        fprintf(stderr, "soak peer %d: unknown command %u\n", p->args->index, c->type);
        p->failed = 1;
        return;
    }
    peer_report(p, &r);
}

/* Metadata both ways: our blob (or listener port) out, the driver's in. */
static int peer_exchange(peer_t *p)
{
    soak_rep_t r = {.type = SR_READY, .thread = -1};
    r.a[0] = (uint64_t)(uintptr_t)p->buf[SOAK_KIND_MAP];
    r.a[1] = (uint64_t)(uintptr_t)p->buf[SOAK_KIND_CMA];
    void *blob = NULL;
    size_t len = 0;
    if (p->args->listen) {
        r.a[2] = nixl_agent_listen_port(p->agent);
        peer_report(p, &r);
        return p->failed ? -1 : 0; /* the driver fetches and sends through the listener */
    }
    nixl_status_t st = nixl_md_get_local(p->agent, &blob, &len);
    if (st != NIXL_OK) {
        peer_error(p, st, "nixl_md_get_local");
        return -1;
    }
    r.plen = len;
    peer_report(p, &r);
    int rc = soak_write_all(p->args->rep_fd, blob, len);
    nixl_free(blob);
    soak_cmd_t c;
    if (rc || soak_read_all(p->args->cmd_fd, &c, sizeof(c)) || c.type != SC_MD || c.plen > (64u << 20))
        return -1;
    void *in = malloc(c.plen ? c.plen : 1);
    if (!in || soak_read_all(p->args->cmd_fd, in, c.plen)) {
        free(in);
        return -1;
    }
    st = nixl_md_load_remote(p->agent, in, c.plen, NULL);
    free(in);
    if (st != NIXL_OK) {
        peer_error(p, st, "nixl_md_load_remote");
        return -1;
    }
    soak_rep_t ack = {.type = SR_READY, .thread = -1};
    peer_report(p, &ack);
    return 0;
}

static void peer_loop(peer_t *p)
{
    struct pollfd pfd = {.fd = p->args->cmd_fd, .events = POLLIN};
    int idle = 0;
    while (!p->failed) {
        /* Sleep only when nothing happened lately: a peer answering late
         * slows every driver thread waiting on it. */
        struct timespec ts = {0, idle ? 200000 : 0};
        int n = ppoll(&pfd, 1, &ts, NULL);
        if (n < 0 && errno != EINTR)
            break;
        idle = 1;
        if (n > 0) {
            soak_cmd_t c;
            if (soak_read_all(p->args->cmd_fd, &c, sizeof(c)))
                break; /* the driver died or closed us: leave */
            if (c.type == SC_EXIT)
                return;
            peer_command(p, &c);
            idle = 0;
        }
        notif_q_t q = {p, 0};
        nixl_status_t st = nixl_notifs_get(p->agent, peer_on_notif, &q, NULL);
        if (st != NIXL_OK) {
            peer_error(p, st, "nixl_notifs_get");
            break;
        }
        if (q.n)
            idle = 0;
    }
    p->failed = 1;
}

int soak_peer_main(const soak_peer_args_t *args)
{
    peer_t p;
    memset(&p, 0, sizeof(p));
    void *m = NULL, *c = NULL;
    p.args = args;
    char name[NIXL_NAME_MAX + 1];
    snprintf(name, sizeof(name), "soak-peer-%d", args->index);
    nixl_agent_config_t cfg = {
        .field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN,
        .name = name,
        .listen = args->listen,
    };
    nixl_status_t st = nixl_agent_create(&cfg, &p.agent);
    if (st != NIXL_OK) {
        peer_error(&p, st, "nixl_agent_create");
        return 1;
    }
    nixl_backend_t *be;
    st = nixl_backend_create(p.agent, args->backend, args->params, args->num_params, &be);
    if (st != NIXL_OK) {
        peer_error(&p, st, "nixl_backend_create");
        goto err_agent;
    }
    p.len = (size_t)args->threads * SOAK_SLOT;
    st = nixl_mem_alloc(p.len, &m);
    if (st != NIXL_OK) {
        peer_error(&p, st, "nixl_mem_alloc");
        goto err_agent;
    }
    if (posix_memalign(&c, 4096, p.len)) {
        peer_error(&p, NIXL_ERR_NO_MEMORY, "posix_memalign");
        goto err_map;
    }
    p.buf[SOAK_KIND_MAP] = m;
    p.buf[SOAK_KIND_CMA] = c;
    /* Touch everything now, so RSS at start already holds the buffers. */
    memset(m, 0, p.len);
    memset(c, 0, p.len);
    nixl_desc_t d[2] = {{.addr = (uintptr_t)m, .len = p.len}, {.addr = (uintptr_t)c, .len = p.len}};
    nixl_dlist_t dl = {NIXL_MEM_DRAM, 2, d};
    st = nixl_mem_register(p.agent, &dl, NULL);
    if (st != NIXL_OK) {
        peer_error(&p, st, "nixl_mem_register");
        goto err_cma;
    }
    if (peer_exchange(&p) == 0) {
        p.stats[SS_RSS_START] = soak_rss_anon();
        p.stats[SS_RSS_WARM] = p.stats[SS_RSS_START];
        p.stats[SS_FDS_WARM] = (uint64_t)soak_fd_count();
        peer_loop(&p);
    }
    p.stats[SS_RSS_END] = soak_rss_anon();
    p.stats[SS_FDS_END] = (uint64_t)soak_fd_count();
    st = nixl_mem_deregister(p.agent, &dl, NULL);
    if (st != NIXL_OK)
        peer_error(&p, st, "nixl_mem_deregister");
    soak_rep_t r = {.type = SR_STATS, .thread = -1};
    memcpy(r.a, p.stats, sizeof(r.a));
    int lost = p.failed;
    p.failed = 0;
    peer_report(&p, &r);
    free(c);
    nixl_mem_free(m, p.len);
    nixl_agent_destroy(p.agent);
    return lost || p.failed ? 1 : 0;

err_cma:
    free(c);
err_map:
    nixl_mem_free(m, p.len);
err_agent:
    nixl_agent_destroy(p.agent);
    return 1;
}
