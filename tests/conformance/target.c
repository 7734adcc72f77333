/*
 * target.c - the peer at the other end of the conformance cases.
 *
 * One command handler owns the target agent and its registered buffer.
 * With --procs 1 the case process calls the handler directly; with --procs 2
 * the case process re-executes this program with a hidden role flag and the
 * child runs the same handler on commands read from a pipe, making progress
 * on its agent while idle.  Metadata then travels through the target's
 * listener.  A command is a fixed header plus an optional payload; so is the
 * reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"

enum {
    T_INIT = 1,
    T_FILL,
    T_EXPECT,
    T_GET,
    T_WAIT_NOTIF,
    T_COUNT_NOTIFS,
    T_SEND_NOTIF,
    T_CHECK_PEER,
    T_MD_GET,
    T_MD_LOAD,
    T_EXIT,
};

typedef struct tmsg {
    uint32_t cmd;
    int32_t status;
    uint64_t a[4];
    uint64_t plen;
} tmsg_t;

typedef struct tstate {
    nixl_agent_t *agent;
    nixl_backend_t *backend;
    uint8_t *buf;
    size_t len;
    int shared;
    conf_notif_t *q; /* received, not yet handed to the driver */
    size_t qn, qcap;
    char backend_name[64];
    nixl_agent_t *drive; /* --procs 1: the initiator, driven while we wait */
} tstate_t;

struct conf_target {
    tstate_t *local; /* --procs 1 */
    pid_t pid;       /* --procs 2 */
    int wfd, rfd;
    uint16_t port;
};

/* ------------------------------------------------------------------------
 * The handler (runs where the target agent lives)
 * ------------------------------------------------------------------------ */

static void tstate_on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    tstate_t *st = arg;
    if (st->qn == st->qcap) {
        size_t cap = st->qcap ? st->qcap * 2 : 16;
        conf_notif_t *q = realloc(st->q, cap * sizeof(*q));
        if (!q)
            abort();
        st->q = q;
        st->qcap = cap;
    }
    conf_notif_t *n = &st->q[st->qn++];
    memset(n, 0, sizeof(*n));
    snprintf(n->sender, sizeof(n->sender), "%s", sender);
    n->msg = malloc(len ? len : 1);
    if (!n->msg)
        abort();
    memcpy(n->msg, msg, len);
    n->len = len;
}

static void tstate_pop(tstate_t *st, conf_notif_t *out)
{
    *out = st->q[0];
    memmove(st->q, st->q + 1, (st->qn - 1) * sizeof(*st->q));
    st->qn--;
}

static void tstate_destroy(tstate_t *st)
{
    if (st->agent) {
        if (st->buf) {
            nixl_status_t s = conf_deregister(st->agent, st->buf, st->len);
            if (s != NIXL_OK)
                fprintf(stderr, "target: deregister failed: %s\n", nixl_status_name(s));
        }
        nixl_agent_destroy(st->agent);
    }
    if (st->buf)
        conf_buf_free(st->buf, st->len, st->shared);
    for (size_t i = 0; i < st->qn; i++)
        free(st->q[i].msg);
    free(st->q);
    memset(st, 0, sizeof(*st));
}

/* Compare buf[off..off+len) with want; a[0] = first mismatch + 1 (0 = equal). */
static void tstate_compare(const tstate_t *st, uint64_t off, const uint8_t *want, uint64_t len, tmsg_t *rep)
{
    conf_buf_pull(st->buf, off, len);
    const uint8_t *got = conf_buf_host(st->buf) + off;
    if (memcmp(got, want, len) == 0)
        return;
    for (uint64_t i = 0; i < len; i++) {
        if (got[i] != want[i]) {
            rep->a[0] = i + 1;
            rep->a[1] = got[i];
            rep->a[2] = want[i];
            return;
        }
    }
}

static int tstate_range_ok(const tstate_t *st, uint64_t off, uint64_t len)
{
    return st->buf && off <= st->len && len <= st->len - off;
}

static void tstate_wait_notif(tstate_t *st, const tmsg_t *req, const void *payload, tmsg_t *rep, void **rep_p)
{
    uint64_t deadline = conf_now_ms() + req->a[0];
    for (;;) {
        if (st->qn == 0) {
            nixl_status_t s = nixl_notifs_get(st->agent, tstate_on_notif, st, NULL);
            if (s != NIXL_OK) {
                rep->status = s;
                return;
            }
        }
        if (st->qn > 0)
            break;
        if (conf_now_ms() >= deadline) {
            rep->status = NIXL_ERR_TIMEOUT;
            return;
        }
        if (st->drive)
            nixl_agent_progress(st->drive);
        conf_sleep_us(100);
    }
    /* Compare first: this is the moment the notification was seen. */
    if (req->plen)
        tstate_compare(st, req->a[1], payload, req->a[2], rep);
    conf_notif_t n;
    tstate_pop(st, &n);
    uint8_t *p = malloc(sizeof(n.sender) + n.len);
    if (!p)
        abort();
    memcpy(p, n.sender, sizeof(n.sender));
    memcpy(p + sizeof(n.sender), n.msg, n.len);
    free(n.msg);
    rep->plen = sizeof(n.sender) + n.len;
    *rep_p = p;
}

static void tstate_handle(tstate_t *st, const tmsg_t *req, const void *payload, tmsg_t *rep, void **rep_p)
{
    memset(rep, 0, sizeof(*rep));
    rep->cmd = req->cmd;
    *rep_p = NULL;
    if (req->cmd != T_INIT && req->cmd != T_EXIT && !st->agent) {
        rep->status = NIXL_ERR_INVALID_PARAM;
        return;
    }
    switch (req->cmd) {
    case T_INIT: {
        size_t n = req->plen < sizeof(st->backend_name) - 1 ? req->plen : sizeof(st->backend_name) - 1;
        memcpy(st->backend_name, payload, n);
        st->backend_name[n] = 0;
        conf_opts.backend = st->backend_name;
        st->agent = conf_agent_create(CONF_TARGET_NAME, (int)req->a[3], &st->backend);
        st->len = req->a[0];
        st->shared = (int)req->a[2];
        st->buf = conf_buf_alloc_dev(st->len, st->shared, conf_opts.dev[1]);
        conf_pattern_fill(conf_buf_host(st->buf), st->len, req->a[1], 0);
        conf_buf_push(st->buf, 0, st->len);
        rep->status = conf_register(st->agent, st->buf, st->len);
        rep->a[0] = (uint64_t)(uintptr_t)st->buf;
        rep->a[1] = nixl_agent_listen_port(st->agent);
        break;
    }
    case T_FILL:
        if (!tstate_range_ok(st, req->a[0], req->a[1])) {
            rep->status = NIXL_ERR_INVALID_PARAM;
            break;
        }
        conf_pattern_fill(conf_buf_host(st->buf) + req->a[0], req->a[1], req->a[2], req->a[0]);
        conf_buf_push(st->buf, req->a[0], req->a[1]);
        break;
    case T_EXPECT:
        if (!tstate_range_ok(st, req->a[0], req->plen)) {
            rep->status = NIXL_ERR_INVALID_PARAM;
            break;
        }
        tstate_compare(st, req->a[0], payload, req->plen, rep);
        break;
    case T_GET: {
        if (!tstate_range_ok(st, req->a[0], req->a[1])) {
            rep->status = NIXL_ERR_INVALID_PARAM;
            break;
        }
        void *p = malloc(req->a[1] ? req->a[1] : 1);
        if (!p)
            abort();
        conf_buf_pull(st->buf, req->a[0], req->a[1]);
        memcpy(p, conf_buf_host(st->buf) + req->a[0], req->a[1]);
        *rep_p = p;
        rep->plen = req->a[1];
        break;
    }
    case T_WAIT_NOTIF:
        if (req->plen && (!tstate_range_ok(st, req->a[1], req->a[2]) || req->plen != req->a[2])) {
            rep->status = NIXL_ERR_INVALID_PARAM;
            break;
        }
        tstate_wait_notif(st, req, payload, rep, rep_p);
        break;
    case T_COUNT_NOTIFS: {
        uint64_t deadline = conf_now_ms() + req->a[0];
        do {
            nixl_status_t s = nixl_notifs_get(st->agent, tstate_on_notif, st, NULL);
            if (s != NIXL_OK) {
                rep->status = s;
                break;
            }
            if (st->drive)
                nixl_agent_progress(st->drive);
            conf_sleep_us(500);
        } while (conf_now_ms() < deadline);
        rep->a[0] = st->qn;
        for (size_t i = 0; i < st->qn; i++)
            free(st->q[i].msg);
        st->qn = 0;
        break;
    }
    case T_SEND_NOTIF:
        rep->status = nixl_notif_send(st->agent, CONF_INIT_NAME, payload, req->plen, NULL);
        break;
    case T_CHECK_PEER:
        rep->status = nixl_md_check_remote(st->agent, CONF_INIT_NAME);
        break;
    case T_MD_GET: {
        void *blob = NULL;
        size_t len = 0;
        rep->status = nixl_md_get_local(st->agent, &blob, &len);
        if (rep->status == NIXL_OK) {
            /* Copy so the driver can free with free() in both modes. */
            void *p = malloc(len ? len : 1);
            if (!p)
                abort();
            memcpy(p, blob, len);
            nixl_free(blob);
            *rep_p = p;
            rep->plen = len;
        }
        break;
    }
    case T_MD_LOAD: {
        char *name = calloc(1, NIXL_NAME_MAX + 1);
        if (!name)
            abort();
        rep->status = nixl_md_load_remote(st->agent, payload, req->plen, name);
        *rep_p = name;
        rep->plen = NIXL_NAME_MAX + 1;
        break;
    }
    case T_EXIT:
        tstate_destroy(st);
        break;
    default:
        rep->status = NIXL_ERR_INVALID_PARAM;
        break;
    }
}

/* ------------------------------------------------------------------------
 * Pipe transport
 * ------------------------------------------------------------------------ */

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* 0 on success, -1 on EOF or error. */
static int read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int msg_write(int fd, const tmsg_t *m, const void *payload)
{
    if (write_all(fd, m, sizeof(*m)))
        return -1;
    return m->plen ? write_all(fd, payload, m->plen) : 0;
}

static int msg_read(int fd, tmsg_t *m, void **payload_out)
{
    *payload_out = NULL;
    if (read_all(fd, m, sizeof(*m)))
        return -1;
    if (m->plen == 0)
        return 0;
    if (m->plen > (1ull << 32))
        return -1;
    void *p = malloc(m->plen);
    if (!p)
        abort();
    if (read_all(fd, p, m->plen)) {
        free(p);
        return -1;
    }
    *payload_out = p;
    return 0;
}

int conf_target_main(int rfd, int wfd)
{
    tstate_t st;
    memset(&st, 0, sizeof(st));
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        struct pollfd pfd = {.fd = rfd, .events = POLLIN};
        int r = poll(&pfd, 1, 2);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0) {
            /* Idle: keep the agent moving so transfers and notifications
             * that need the target's progress are not starved. */
            if (st.agent)
                nixl_agent_progress(st.agent);
            continue;
        }
        tmsg_t req, rep;
        void *payload, *rep_p;
        if (msg_read(rfd, &req, &payload))
            break; /* the driver went away */
        tstate_handle(&st, &req, payload, &rep, &rep_p);
        free(payload);
        int werr = msg_write(wfd, &rep, rep_p);
        free(rep_p);
        if (werr || req.cmd == T_EXIT)
            break;
    }
    tstate_destroy(&st);
    return 0;
}

/* ------------------------------------------------------------------------
 * Driver side
 * ------------------------------------------------------------------------ */

static void target_reap_report(conf_target_t *t)
{
    int ws = 0;
    pid_t r;
    do {
        r = waitpid(t->pid, &ws, 0);
    } while (r < 0 && errno == EINTR);
    t->pid = 0;
    if (r < 0)
        return;
    if (WIFSIGNALED(ws))
        conf_fail(__FILE__, __LINE__, "target process killed by signal %d", WTERMSIG(ws));
    if (WIFEXITED(ws) && WEXITSTATUS(ws) != 0)
        conf_fail(__FILE__, __LINE__, "target process exited with status %d", WEXITSTATUS(ws));
}

/* One command, one reply.  *rep_p (may be NULL) is malloc'd. */
static void target_call(conf_ctx_t *ctx, const tmsg_t *req, const void *payload, tmsg_t *rep, void **rep_p)
{
    conf_target_t *t = ctx->tgt;
    void *p = NULL;
    if (!t)
        conf_fail(__FILE__, __LINE__, "target not started");
    if (t->local) {
        tstate_handle(t->local, req, payload, rep, &p);
    } else {
        if (msg_write(t->wfd, req, payload) || msg_read(t->rfd, rep, &p)) {
            target_reap_report(t);
            conf_fail(__FILE__, __LINE__, "target process stopped answering (command %u)", req->cmd);
        }
    }
    if (rep_p)
        *rep_p = p;
    else
        free(p);
}

static void target_spawn(conf_target_t *t)
{
    int p2c[2], c2p[2];
    if (pipe2(p2c, O_CLOEXEC) || pipe2(c2p, O_CLOEXEC))
        conf_fail(__FILE__, __LINE__, "pipe2: %s", strerror(errno));
    /* dup() gives fds without CLOEXEC: those are the ones the child keeps. */
    int crfd = dup(p2c[0]), cwfd = dup(c2p[1]);
    if (crfd < 0 || cwfd < 0)
        conf_fail(__FILE__, __LINE__, "dup: %s", strerror(errno));
    char rbuf[16], wbuf[16];
    snprintf(rbuf, sizeof(rbuf), "%d", crfd);
    snprintf(wbuf, sizeof(wbuf), "%d", cwfd);
    char *argv[] = {(char *)conf_opts.exe, (char *)"--target-role", rbuf, wbuf, NULL, NULL, NULL};
    if (conf_opts.mem != NIXL_MEM_DRAM) {
        argv[4] = (char *)conf_mem_arg();
        argv[5] = (char *)conf_devs_arg();
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        conf_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (conf_opts.target_netns >= 0 && setns(conf_opts.target_netns, CLONE_NEWNET) != 0) {
            fprintf(stderr, "target: setns(--target-netns): %s\n", strerror(errno));
            _exit(127);
        }
        execv(conf_opts.exe, argv);
        _exit(127);
    }
    close(crfd);
    close(cwfd);
    close(p2c[0]);
    close(c2p[1]);
    t->pid = pid;
    t->wfd = p2c[1];
    t->rfd = c2p[0];
}

void conf_target_exchange(conf_ctx_t *ctx)
{
    conf_target_t *t = ctx->tgt;
    char name[NIXL_NAME_MAX + 1];
    if (t->local) {
        void *blob;
        size_t len;
        conf_target_md_get(ctx, &blob, &len);
        CHECK_OK(nixl_md_load_remote(ctx->agent, blob, len, name));
        free(blob);
        CHECK(strcmp(name, CONF_TARGET_NAME) == 0);
        void *mine;
        CHECK_OK(nixl_md_get_local(ctx->agent, &mine, &len));
        char tname[NIXL_NAME_MAX + 1];
        nixl_status_t s = conf_target_md_load(ctx, mine, len, tname);
        nixl_free(mine);
        CHECK_OK(s);
        CHECK(strcmp(tname, CONF_INIT_NAME) == 0);
    } else {
        CHECK_OK(nixl_md_fetch_remote(ctx->agent, conf_opts.target_addr, t->port, name));
        CHECK(strcmp(name, CONF_TARGET_NAME) == 0);
        CHECK_OK(nixl_md_send_local(ctx->agent, conf_opts.target_addr, t->port));
    }
    CHECK_OK(nixl_md_check_remote(ctx->agent, CONF_TARGET_NAME));
    CHECK_OK(conf_target_check_peer(ctx));
}

void conf_target_start(conf_ctx_t *ctx, size_t len, uint64_t seed)
{
    conf_target_t *t = calloc(1, sizeof(*t));
    if (!t)
        abort();
    if (conf_opts.procs == 1) {
        t->local = calloc(1, sizeof(*t->local));
        if (!t->local)
            abort();
        t->local->drive = ctx->agent;
    } else {
        target_spawn(t);
    }
    ctx->tgt = t;
    tmsg_t req = {.cmd = T_INIT, .a = {len, seed, (uint64_t)ctx->shared, conf_opts.procs == 2},
                  .plen = strlen(conf_opts.backend)},
           rep;
    target_call(ctx, &req, conf_opts.backend, &rep, NULL);
    if (rep.status != NIXL_OK)
        conf_fail_st(rep.status, __FILE__, __LINE__, "target: registering %zu bytes failed: %s", len,
                     nixl_status_name(rep.status));
    ctx->tgt_addr = rep.a[0];
    ctx->tgt_len = len;
    t->port = (uint16_t)rep.a[1];
    if (conf_opts.procs == 2 && t->port == 0)
        conf_fail(__FILE__, __LINE__, "target agent has no listener port");
    conf_target_exchange(ctx);
}

void conf_target_stop(conf_ctx_t *ctx)
{
    conf_target_t *t = ctx->tgt;
    if (!t)
        return;
    if (t->local) {
        tstate_destroy(t->local);
        free(t->local);
    } else if (t->pid > 0) {
        tmsg_t req = {.cmd = T_EXIT}, rep;
        target_call(ctx, &req, NULL, &rep, NULL);
        close(t->wfd);
        close(t->rfd);
        target_reap_report(t);
    }
    free(t);
    ctx->tgt = NULL;
}

void conf_target_kill(conf_ctx_t *ctx)
{
    conf_target_t *t = ctx->tgt;
    CHECK(t && !t->local && t->pid > 0);
    kill(t->pid, SIGKILL);
    int ws;
    while (waitpid(t->pid, &ws, 0) < 0 && errno == EINTR)
        ;
    close(t->wfd);
    close(t->rfd);
    free(t);
    ctx->tgt = NULL;
}

void conf_target_expect(conf_ctx_t *ctx, size_t off, const void *want, size_t len)
{
    tmsg_t req = {.cmd = T_EXPECT, .a = {off}, .plen = len}, rep;
    target_call(ctx, &req, want, &rep, NULL);
    if (rep.status != NIXL_OK)
        conf_fail(__FILE__, __LINE__, "target: compare [%zu, +%zu) refused: %s", off, len,
                  nixl_status_name(rep.status));
    if (rep.a[0])
        conf_fail(__FILE__, __LINE__, "target buffer differs at offset %llu: got 0x%02x, want 0x%02x",
                  (unsigned long long)(off + rep.a[0] - 1), (unsigned)rep.a[1], (unsigned)rep.a[2]);
}

void conf_target_fill(conf_ctx_t *ctx, size_t off, size_t len, uint64_t seed)
{
    tmsg_t req = {.cmd = T_FILL, .a = {off, len, seed}}, rep;
    target_call(ctx, &req, NULL, &rep, NULL);
    CHECK_OK((nixl_status_t)rep.status);
}

void conf_target_get(conf_ctx_t *ctx, size_t off, size_t len, void *out)
{
    tmsg_t req = {.cmd = T_GET, .a = {off, len}}, rep;
    void *p;
    target_call(ctx, &req, NULL, &rep, &p);
    CHECK_OK((nixl_status_t)rep.status);
    CHECK_EQ_U64(rep.plen, len);
    memcpy(out, p, len);
    free(p);
}

int conf_target_wait_notif(conf_ctx_t *ctx, unsigned timeout_ms, size_t off, const void *want, size_t len,
                           conf_notif_t *out)
{
    tmsg_t req = {.cmd = T_WAIT_NOTIF, .a = {timeout_ms, off, len}, .plen = want ? len : 0}, rep;
    void *p;
    target_call(ctx, &req, want, &rep, &p);
    if (rep.status == NIXL_ERR_TIMEOUT) {
        free(p);
        return -1;
    }
    CHECK_OK((nixl_status_t)rep.status);
    if (rep.a[0])
        conf_fail(__FILE__, __LINE__,
                  "when the notification was seen the target buffer differed at offset %llu: "
                  "got 0x%02x, want 0x%02x",
                  (unsigned long long)(off + rep.a[0] - 1), (unsigned)rep.a[1], (unsigned)rep.a[2]);
    CHECK(rep.plen >= NIXL_NAME_MAX + 1);
    memset(out, 0, sizeof(*out));
    memcpy(out->sender, p, NIXL_NAME_MAX + 1);
    out->sender[NIXL_NAME_MAX] = 0;
    out->len = rep.plen - (NIXL_NAME_MAX + 1);
    out->msg = malloc(out->len ? out->len : 1);
    if (!out->msg)
        abort();
    memcpy(out->msg, (uint8_t *)p + NIXL_NAME_MAX + 1, out->len);
    free(p);
    conf_fault_notifs_seen(1);
    return 0;
}

size_t conf_target_count_notifs(conf_ctx_t *ctx, unsigned window_ms)
{
    tmsg_t req = {.cmd = T_COUNT_NOTIFS, .a = {window_ms}}, rep;
    target_call(ctx, &req, NULL, &rep, NULL);
    CHECK_OK((nixl_status_t)rep.status);
    conf_fault_notifs_seen(rep.a[0]);
    return rep.a[0];
}

nixl_status_t conf_target_send_notif(conf_ctx_t *ctx, const void *msg, size_t len)
{
    tmsg_t req = {.cmd = T_SEND_NOTIF, .plen = len}, rep;
    target_call(ctx, &req, msg, &rep, NULL);
    return rep.status;
}

nixl_status_t conf_target_check_peer(conf_ctx_t *ctx)
{
    tmsg_t req = {.cmd = T_CHECK_PEER}, rep;
    target_call(ctx, &req, NULL, &rep, NULL);
    return rep.status;
}

void conf_target_md_get(conf_ctx_t *ctx, void **blob_out, size_t *len_out)
{
    tmsg_t req = {.cmd = T_MD_GET}, rep;
    void *p;
    target_call(ctx, &req, NULL, &rep, &p);
    CHECK_OK((nixl_status_t)rep.status);
    *blob_out = p;
    *len_out = rep.plen;
}

nixl_status_t conf_target_md_load(conf_ctx_t *ctx, const void *blob, size_t len, char name_out[NIXL_NAME_MAX + 1])
{
    tmsg_t req = {.cmd = T_MD_LOAD, .plen = len}, rep;
    void *p;
    target_call(ctx, &req, blob, &rep, &p);
    if (rep.status == NIXL_OK && p)
        snprintf(name_out, NIXL_NAME_MAX + 1, "%s", (char *)p);
    free(p);
    return rep.status;
}
