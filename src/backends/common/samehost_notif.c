/*
 * samehost_notif.c - notifications between agents of one host, shared by
 * the same-host backends (shm, cuda_ipc).
 *
 * Each backend instance binds an AF_UNIX datagram socket in the abstract
 * namespace (no file to clean up; the name dies with the socket) and
 * publishes the name in its conn info.  A notification is one datagram:
 *   u32 magic, u16 version, u16 sender-name length, sender name, payload.
 * Senders use one socket per peer so a peer that stops reading blocks only
 * notifications to itself; a full queue is retried for about 2 s, then the
 * send fails with NIXL_ERR_TIMEOUT.
 *
 * The kernel queues at most net.unix.max_dgram_qlen (often 10) datagrams
 * per socket, so a receiver that waits for progress() to read would make
 * busy senders time out.  A receiver thread per socket drains it as
 * datagrams arrive, validates each (anyone on the host can send to an
 * abstract name: the kernel-attached credentials must show our uid or
 * root) and hands it to the agent's inbox at once (host notif_deliver,
 * which may be called from any thread): the payload is copied once, from
 * the receive buffer into the inbox.  Past NOTIF_QUEUE_MAX bytes waiting in
 * the inbox (host notif_backlog) the thread stops reading, and the
 * socket's own limit pushes back on senders again.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "samehost.h"

#define NOTIF_MAGIC 0x4e4d4853u /* "SHMN": the format shm introduced */
#define NOTIF_VERSION 1
#define NOTIF_HDR 8
#define NOTIF_SEND_TIMEOUT_NS (2ull * 1000 * 1000 * 1000)
#define NOTIF_SOCK_BUF (4 << 20)
#define NOTIF_RECV_BATCH 1024
#define NOTIF_DROP_WARN_NS (1000ull * 1000 * 1000)
#define NOTIF_QUEUE_MAX ((size_t)64 << 20)
#define NOTIF_FULL_WAIT_MS 1

static _Atomic unsigned notif_sock_counter;

static void *notif_rx_main(void *arg);

static uint64_t random64(const void *salt)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
        v = nixl_now_ns() ^ ((uint64_t)(uintptr_t)salt << 16) ^ ((uint64_t)getpid() << 40);
    return v;
}

static socklen_t abstract_addr(struct sockaddr_un *addr, const char *name, size_t len)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path + 1, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

nixl_status_t samehost_notif_open(samehost_notif_t *n, const nixl_host_services_t *host, const char *who,
                                  const char *agent_name, uint32_t uid)
{
    int one = 1, bufsz = NOTIF_SOCK_BUF;
    memset(n, 0, sizeof(*n));
    n->host = host;
    n->who = who;
    n->uid = uid;
    n->sock = -1;
    n->agent_name_len = agent_name ? strlen(agent_name) : 0;
    if (n->agent_name_len == 0 || n->agent_name_len > SAMEHOST_NAME_MAX) {
        /* Receivers drop notifications without a valid sender. */
        NIXL_BE_ERROR(host, "%s: the agent name must be 1 to %d bytes (is %zu)", who,
                     SAMEHOST_NAME_MAX, n->agent_name_len);
        return NIXL_ERR_INVALID_PARAM;
    }
    memcpy(n->agent_name, agent_name, n->agent_name_len + 1);

    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        NIXL_BE_ERROR(host, "%s: cannot create the notification socket: %s", who, strerror(errno));
        return NIXL_ERR_IO;
    }
    /* Best effort: without it, the kernel default still holds one 64 KiB
     * notification. */
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
    if (setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
        NIXL_BE_ERROR(host, "%s: SO_PASSCRED on the notification socket: %s", who, strerror(errno));
        goto err_close;
    }
    unsigned counter = atomic_fetch_add(&notif_sock_counter, 1);
    int rc = -1;
    for (int attempt = 0; attempt < 8 && rc != 0; attempt++) {
        struct sockaddr_un addr;
        snprintf(n->sock_name, sizeof(n->sock_name), "nixl-%s.%d.%u.%016llx", who, (int)getpid(), counter,
                 (unsigned long long)random64(n));
        socklen_t len = abstract_addr(&addr, n->sock_name, strlen(n->sock_name));
        rc = bind(s, (struct sockaddr *)&addr, len);
        if (rc != 0 && errno != EADDRINUSE)
            break;
    }
    if (rc != 0) {
        NIXL_BE_ERROR(host, "%s: cannot bind the notification socket @%s: %s", who, n->sock_name,
                     strerror(errno));
        goto err_close;
    }
    n->rx_cap = NOTIF_HDR + SAMEHOST_NAME_MAX + NIXL_NOTIF_MAX;
    n->rx_buf = malloc(n->rx_cap);
    if (!n->rx_buf) {
        close(s);
        return NIXL_ERR_NO_MEMORY;
    }
    n->sock = s;
    if (pipe2(n->stop_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
        NIXL_BE_ERROR(host, "%s: notification thread pipe: %s", who, strerror(errno));
        goto err_buf;
    }
    if (pthread_create(&n->rx_thread, NULL, notif_rx_main, n) != 0) {
        NIXL_BE_ERROR(host, "%s: cannot start the notification thread", who);
        close(n->stop_fd[0]);
        close(n->stop_fd[1]);
        goto err_buf;
    }
    n->rx_running = 1;
    return NIXL_OK;

err_buf:
    free(n->rx_buf);
    n->rx_buf = NULL;
    n->sock = -1;
    close(s);
    return NIXL_ERR_IO;
err_close:
    close(s);
    return NIXL_ERR_IO;
}

void samehost_notif_close(samehost_notif_t *n)
{
    if (n->rx_running) {
        char c = 1;
        while (write(n->stop_fd[1], &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(n->rx_thread, NULL);
        close(n->stop_fd[0]);
        close(n->stop_fd[1]);
        n->rx_running = 0;
    }
    if (n->sock >= 0)
        close(n->sock);
    n->sock = -1;
    free(n->rx_buf);
    n->rx_buf = NULL;
}

int samehost_notif_name_valid(const uint8_t *s, size_t n)
{
    if (n == 0 || n > SAMEHOST_SOCK_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        int alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (!(alnum || c == '-' || c == '.' || c == '_'))
            return 0;
    }
    return 1;
}

nixl_status_t samehost_notif_peer_open(const samehost_notif_t *n, samehost_notif_peer_t *peer, const char *peer_name,
                                       const char *sock_name, size_t name_len)
{
    int bufsz = NOTIF_SOCK_BUF;
    peer->name = peer_name;
    peer->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (peer->sock < 0) {
        NIXL_BE_ERROR(n->host, "%s: cannot create a socket towards peer %s: %s", n->who, peer_name,
                     strerror(errno));
        return NIXL_ERR_IO;
    }
    /* In-flight datagrams are charged to the sender: room for several. */
    setsockopt(peer->sock, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof(bufsz));
    peer->addr_len = abstract_addr(&peer->addr, sock_name, name_len);
    return NIXL_OK;
}

void samehost_notif_peer_close(samehost_notif_peer_t *peer)
{
    if (peer->sock >= 0)
        close(peer->sock);
    peer->sock = -1;
}

size_t samehost_notif_size(const samehost_notif_t *n, size_t len)
{
    return NOTIF_HDR + n->agent_name_len + len;
}

void samehost_notif_build(const samehost_notif_t *n, uint8_t *buf, const void *msg, size_t len)
{
    nixl_put_u32(buf, NOTIF_MAGIC);
    nixl_put_u16(buf + 4, NOTIF_VERSION);
    nixl_put_u16(buf + 6, (uint16_t)n->agent_name_len);
    memcpy(buf + NOTIF_HDR, n->agent_name, n->agent_name_len);
    if (len)
        memcpy(buf + NOTIF_HDR + n->agent_name_len, msg, len);
}

nixl_status_t samehost_notif_send_raw(const samehost_notif_t *n, const samehost_notif_peer_t *peer,
                                      const uint8_t *dgram, size_t len, _Atomic int *cancel)
{
    const nixl_host_services_t *host = n->host;
    uint64_t deadline = 0;
    long sleep_ns = 10000;
    for (;;) {
        ssize_t k = sendto(peer->sock, dgram, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)&peer->addr,
                           peer->addr_len);
        if (nixl_likely(k == (ssize_t)len))
            return NIXL_OK;
        if (k >= 0) {
            NIXL_BE_ERROR(host, "%s: notification to peer %s cut short (%zd of %zu bytes)", n->who,
                         peer->name, k, len);
            return NIXL_ERR_IO;
        }
        int e = errno;
        if (e == EINTR)
            continue;
        if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS) {
            /* The peer's queue is full: it is not calling progress. */
            uint64_t now = nixl_now_ns();
            if (!deadline)
                deadline = now + NOTIF_SEND_TIMEOUT_NS;
            /* A request being released must not hold its releaser for 2 s. */
            if (cancel && atomic_load(cancel))
                return NIXL_ERR_CANCELED;
            if (now >= deadline) {
                NIXL_BE_ERROR(host,
                             "%s: notification to peer %s timed out: its queue stayed full for 2 s (is it making "
                             "progress?)",
                             n->who, peer->name);
                return NIXL_ERR_TIMEOUT;
            }
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 1000000)
                sleep_ns *= 2;
            continue;
        }
        if (e == ECONNREFUSED || e == ENOENT) {
            NIXL_BE_ERROR(host, "%s: notification to peer %s refused: its socket is closed (agent gone)",
                         n->who, peer->name);
            return NIXL_ERR_PEER_GONE;
        }
        NIXL_BE_ERROR(host, "%s: notification to peer %s failed: %s", n->who, peer->name, strerror(e));
        return e == EMSGSIZE ? NIXL_ERR_TOO_BIG : NIXL_ERR_IO;
    }
}

nixl_status_t samehost_notif_send(const samehost_notif_t *n, const samehost_notif_peer_t *peer, const void *msg,
                                  size_t len)
{
    uint8_t small[512];
    if (!msg && len)
        return NIXL_ERR_NULL;
    if (len > NIXL_NOTIF_MAX) {
        NIXL_BE_ERROR(n->host, "%s: notification of %zu bytes, at most %d allowed", n->who, len,
                     NIXL_NOTIF_MAX);
        return NIXL_ERR_TOO_BIG;
    }
    size_t need = samehost_notif_size(n, len);
    uint8_t *buf = need <= sizeof(small) ? small : malloc(need);
    if (!buf)
        return NIXL_ERR_NO_MEMORY;
    samehost_notif_build(n, buf, msg, len);
    nixl_status_t st = samehost_notif_send_raw(n, peer, buf, need, NULL);
    if (buf != small)
        free(buf);
    return st;
}

static void notif_drop(samehost_notif_t *n, const char *why, const struct ucred *cred)
{
    n->dropped++;
    uint64_t now = nixl_now_ns();
    if (now < n->drop_warn_ns)
        return;
    n->drop_warn_ns = now + NOTIF_DROP_WARN_NS;
    NIXL_BE_WARN(n->host, "%s: dropped a datagram on @%s from pid %d uid %d: %s (%llu dropped so far)",
                 n->who, n->sock_name, cred ? (int)cred->pid : -1, cred ? (int)cred->uid : -1, why,
                 (unsigned long long)n->dropped);
}

/* Why a received datagram must be dropped, or NULL when it is a valid
 * notification; *off_out gets where its payload starts. */
static const char *notif_check(const samehost_notif_t *n, size_t len, int flags, const struct ucred *cred,
                               size_t *off_out)
{
    const uint8_t *p = n->rx_buf;
    if (flags & (MSG_TRUNC | MSG_CTRUNC))
        return "larger than any notification";
    if (!cred)
        return "no sender credentials";
    if (cred->uid != n->uid && cred->uid != 0)
        return "sender runs as another user";
    if (len < NOTIF_HDR || nixl_get_u32(p) != NOTIF_MAGIC || nixl_get_u16(p + 4) != NOTIF_VERSION)
        return "not a notification (bad header)";
    size_t name_len = nixl_get_u16(p + 6);
    if (name_len == 0 || name_len > SAMEHOST_NAME_MAX || name_len > len - NOTIF_HDR ||
        memchr(p + NOTIF_HDR, '\0', name_len))
        return "bad sender name";
    *off_out = NOTIF_HDR + name_len;
    return NULL;
}

/* Receiver thread: validate one datagram in rx_buf and hand it to the
 * agent (the inbox copies the payload straight from rx_buf). */
static void notif_deliver(samehost_notif_t *n, size_t len, int flags, const struct ucred *cred)
{
    size_t off = 0;
    const char *why = notif_check(n, len, flags, cred, &off);
    if (why) {
        notif_drop(n, why, cred);
        return;
    }
    char sender[SAMEHOST_NAME_MAX + 1];
    size_t name_len = off - NOTIF_HDR;
    memcpy(sender, n->rx_buf + NOTIF_HDR, name_len);
    sender[name_len] = '\0';
    n->host->notif_deliver(n->host->ctx, sender, n->rx_buf + off, len - off);
}

/* Bytes the agent holds undelivered to the application (0 from a host
 * without notif_backlog: no cap but the socket's). */
static size_t notif_backlog(const samehost_notif_t *n)
{
    const nixl_host_services_t *h = n->host;
    size_t need = offsetof(nixl_host_services_t, notif_backlog) + sizeof(h->notif_backlog);
    return h->struct_size >= need && h->notif_backlog ? h->notif_backlog(h->ctx) : 0;
}

/* Receive every pending datagram without blocking. */
static void notif_drain(samehost_notif_t *n);

static void *notif_rx_main(void *arg)
{
    samehost_notif_t *n = arg;
    for (;;) {
        /* Past the cap, leave datagrams in the socket: senders feel it. */
        int full = notif_backlog(n) > NOTIF_QUEUE_MAX;
        struct pollfd p[2] = {{.fd = n->stop_fd[0], .events = POLLIN}, {.fd = n->sock, .events = POLLIN}};
        int rc = poll(p, full ? 1 : 2, full ? NOTIF_FULL_WAIT_MS : -1);
        if (rc < 0 && errno != EINTR) {
            NIXL_BE_ERROR(n->host, "%s: notification thread: poll: %s", n->who, strerror(errno));
            return NULL;
        }
        if (rc > 0 && (p[0].revents & POLLIN))
            return NULL;
        if (!full && rc > 0 && (p[1].revents & (POLLIN | POLLERR)))
            notif_drain(n);
    }
}

static void notif_drain(samehost_notif_t *n)
{
    for (int k = 0; k < NOTIF_RECV_BATCH; k++) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(struct ucred))];
        } ctl;
        struct iovec iov = {.iov_base = n->rx_buf, .iov_len = n->rx_cap};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
        ssize_t got = recvmsg(n->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                NIXL_BE_WARN(n->host, "%s: receiving notifications on @%s: %s", n->who,
                             n->sock_name, strerror(errno));
            return;
        }
        const struct ucred *cred = NULL;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
                c->cmsg_len == CMSG_LEN(sizeof(struct ucred)))
                cred = (const struct ucred *)CMSG_DATA(c);
        notif_deliver(n, (size_t)got, mh.msg_flags, cred);
    }
}

nixl_status_t samehost_notif_msg_set(const samehost_notif_t *n, samehost_notif_msg_t *m, const void *msg, size_t len)
{
    m->has = msg != NULL;
    if (!msg)
        return NIXL_OK;
    if (len > NIXL_NOTIF_MAX) {
        NIXL_BE_ERROR(n->host, "%s: notification of %zu bytes, at most %d allowed", n->who, len,
                     NIXL_NOTIF_MAX);
        m->has = 0;
        return NIXL_ERR_TOO_BIG;
    }
    size_t need = samehost_notif_size(n, len);
    if (need > m->cap) {
        uint8_t *nb = realloc(m->buf, need);
        if (!nb) {
            m->has = 0;
            return NIXL_ERR_NO_MEMORY;
        }
        m->buf = nb;
        m->cap = need;
    }
    samehost_notif_build(n, m->buf, msg, len);
    m->len = need;
    return NIXL_OK;
}

void samehost_notif_msg_free(samehost_notif_msg_t *m)
{
    free(m->buf);
    m->buf = NULL;
    m->cap = m->len = 0;
    m->has = 0;
}

nixl_status_t samehost_conn_pack(const samehost_notif_t *n, uint32_t magic, void *buf, size_t *len)
{
    size_t name_len = strlen(n->sock_name);
    size_t need = SAMEHOST_CONN_FIXED + name_len;
    if (!len)
        return NIXL_ERR_NULL;
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    nixl_put_u32(p, magic);
    nixl_put_u16(p + 4, SAMEHOST_CONN_VERSION);
    nixl_put_u16(p + 6, (uint16_t)name_len);
    memcpy(p + SAMEHOST_CONN_FIXED, n->sock_name, name_len);
    *len = need;
    return NIXL_OK;
}

nixl_status_t samehost_conn_unpack(const samehost_notif_t *n, uint32_t magic, const char *peer_name, const void *conn,
                                   size_t len, const char **sock_name_out, size_t *sock_name_len_out)
{
    const uint8_t *p = conn;
    const char *who = n->who;
    if (!p || len < SAMEHOST_CONN_FIXED) {
        NIXL_BE_ERROR(n->host, "%s: conn info of peer %s is %zu bytes, at least %d expected", who,
                     peer_name, len, SAMEHOST_CONN_FIXED);
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u32(p) != magic) {
        NIXL_BE_ERROR(n->host, "%s: conn info of peer %s has a bad magic number", who, peer_name);
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u16(p + 4) != SAMEHOST_CONN_VERSION) {
        NIXL_BE_ERROR(n->host, "%s: conn info of peer %s is version %u, we speak %u", who, peer_name,
                     nixl_get_u16(p + 4), SAMEHOST_CONN_VERSION);
        return NIXL_ERR_MD_VERSION;
    }
    size_t name_len = nixl_get_u16(p + 6);
    if (len != SAMEHOST_CONN_FIXED + name_len || !samehost_notif_name_valid(p + SAMEHOST_CONN_FIXED, name_len)) {
        NIXL_BE_ERROR(n->host, "%s: conn info of peer %s is malformed (%zu bytes, socket name of %zu)",
                     who, peer_name, len, name_len);
        return NIXL_ERR_BAD_METADATA;
    }
    *sock_name_out = (const char *)p + SAMEHOST_CONN_FIXED;
    *sock_name_len_out = name_len;
    return NIXL_OK;
}

nixl_status_t samehost_peer_connect(const samehost_notif_t *n, int can_ptrace_any, uint32_t magic,
                                    const nixl_be_peer_t *peer, const void *conn, size_t len, char *name_out,
                                    samehost_proc_t *proc_out, samehost_notif_peer_t *notif_out)
{
    const char *sock_name;
    size_t name_len;
    nixl_status_t st = samehost_conn_unpack(n, magic, peer->name, conn, len, &sock_name, &name_len);
    if (st != NIXL_OK)
        return st;
    st = samehost_peer_reachable(n->host, n->who, peer, can_ptrace_any);
    if (st != NIXL_OK)
        return st;
    snprintf(name_out, SAMEHOST_NAME_MAX + 1, "%s", peer->name);
    notif_out->sock = -1;
    st = samehost_proc_open(n->host, n->who, peer->name, (pid_t)peer->pid, peer->start_time, proc_out);
    if (st != NIXL_OK)
        return st;
    st = samehost_notif_peer_open(n, notif_out, name_out, sock_name, name_len);
    if (st != NIXL_OK) {
        samehost_proc_close(proc_out);
        return st;
    }
    return NIXL_OK;
}

void samehost_peer_disconnect(samehost_proc_t *proc, samehost_notif_peer_t *notif)
{
    samehost_notif_peer_close(notif);
    samehost_proc_close(proc);
}
