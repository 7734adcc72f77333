/*
 * shm_notif.c - notifications between agents of one host.
 *
 * Each instance binds an AF_UNIX datagram socket in the abstract namespace
 * (no file to clean up; the name dies with the socket) and publishes the
 * name in its conn info.  A notification is one datagram:
 *   u32 magic, u16 version, u16 sender-name length, sender name, payload.
 * Senders use one socket per peer so a peer that stops reading blocks only
 * notifications to itself; a full queue is retried for about 2 s, then the
 * send fails with NIXL_ERR_TIMEOUT.  progress() drains the socket and
 * validates every datagram (anyone on the host can send to an abstract
 * name): the kernel-attached credentials must show our uid or root.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "shm_int.h"

#define SHM_NOTIF_MAGIC 0x4e4d4853u /* "SHMN" */
#define SHM_NOTIF_VERSION 1
#define SHM_NOTIF_HDR 8
#define SHM_SEND_TIMEOUT_NS (2ull * 1000 * 1000 * 1000)
#define SHM_SOCK_BUF (4 << 20)
#define SHM_RECV_BATCH 1024
#define SHM_DROP_WARN_NS (1000ull * 1000 * 1000)

static _Atomic unsigned shm_sock_counter;

static uint64_t shm_random64(const void *salt)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
        v = shm_now_ns() ^ ((uint64_t)(uintptr_t)salt << 16) ^ ((uint64_t)getpid() << 40);
    return v;
}

static socklen_t shm_abstract_addr(struct sockaddr_un *addr, const char *name, size_t len)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path + 1, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

nixl_status_t shm_notif_open(shm_be_t *be)
{
    int one = 1, bufsz = SHM_SOCK_BUF;
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        SHM_ERROR(be, "shm: cannot create the notification socket: %s", strerror(errno));
        return NIXL_ERR_IO;
    }
    /* Best effort: without it, the kernel default still holds one 64 KiB
     * notification. */
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
    if (setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
        SHM_ERROR(be, "shm: SO_PASSCRED on the notification socket: %s", strerror(errno));
        goto err_close;
    }
    unsigned counter = atomic_fetch_add(&shm_sock_counter, 1);
    int rc = -1;
    for (int attempt = 0; attempt < 8 && rc != 0; attempt++) {
        struct sockaddr_un addr;
        snprintf(be->sock_name, sizeof(be->sock_name), "nixl-shm.%u.%u.%016llx", be->self.pid, counter,
                 (unsigned long long)shm_random64(be));
        socklen_t len = shm_abstract_addr(&addr, be->sock_name, strlen(be->sock_name));
        rc = bind(s, (struct sockaddr *)&addr, len);
        if (rc != 0 && errno != EADDRINUSE)
            break;
    }
    if (rc != 0) {
        SHM_ERROR(be, "shm: cannot bind the notification socket @%s: %s", be->sock_name, strerror(errno));
        goto err_close;
    }
    be->rx_cap = SHM_NOTIF_HDR + SHM_NAME_MAX + NIXL_NOTIF_MAX;
    be->rx_buf = malloc(be->rx_cap);
    if (!be->rx_buf) {
        close(s);
        return NIXL_ERR_NO_MEMORY;
    }
    be->sock = s;
    return NIXL_OK;

err_close:
    close(s);
    return NIXL_ERR_IO;
}

void shm_notif_close(shm_be_t *be)
{
    if (be->sock >= 0)
        close(be->sock);
    be->sock = -1;
    free(be->rx_buf);
    be->rx_buf = NULL;
}

nixl_status_t shm_notif_peer_open(shm_be_t *be, shm_peer_t *peer, const char *sock_name, size_t name_len)
{
    int bufsz = SHM_SOCK_BUF;
    peer->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (peer->sock < 0) {
        SHM_ERROR(be, "shm: cannot create a socket towards peer %s: %s", peer->name, strerror(errno));
        return NIXL_ERR_IO;
    }
    /* In-flight datagrams are charged to the sender: room for several. */
    setsockopt(peer->sock, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof(bufsz));
    peer->addr_len = shm_abstract_addr(&peer->addr, sock_name, name_len);
    return NIXL_OK;
}

void shm_notif_peer_close(shm_peer_t *peer)
{
    if (peer->sock >= 0)
        close(peer->sock);
    peer->sock = -1;
}

size_t shm_notif_size(const shm_be_t *be, size_t len)
{
    return SHM_NOTIF_HDR + be->agent_name_len + len;
}

void shm_notif_build(const shm_be_t *be, uint8_t *buf, const void *msg, size_t len)
{
    shm_put_u32(buf, SHM_NOTIF_MAGIC);
    shm_put_u16(buf + 4, SHM_NOTIF_VERSION);
    shm_put_u16(buf + 6, (uint16_t)be->agent_name_len);
    memcpy(buf + SHM_NOTIF_HDR, be->agent_name, be->agent_name_len);
    if (len)
        memcpy(buf + SHM_NOTIF_HDR + be->agent_name_len, msg, len);
}

nixl_status_t shm_notif_send_raw(shm_be_t *be, shm_peer_t *peer, const uint8_t *dgram, size_t len,
                                 _Atomic int *cancel)
{
    uint64_t deadline = 0;
    long sleep_ns = 10000;
    for (;;) {
        ssize_t n = sendto(peer->sock, dgram, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)&peer->addr,
                           peer->addr_len);
        if (shm_likely(n == (ssize_t)len))
            return NIXL_OK;
        if (n >= 0) {
            SHM_ERROR(be, "shm: notification to peer %s cut short (%zd of %zu bytes)", peer->name, n, len);
            return NIXL_ERR_IO;
        }
        int e = errno;
        if (e == EINTR)
            continue;
        if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS) {
            /* The peer's queue is full: it is not calling progress. */
            uint64_t now = shm_now_ns();
            if (!deadline)
                deadline = now + SHM_SEND_TIMEOUT_NS;
            /* A request being released must not hold its releaser for 2 s. */
            if (cancel && atomic_load(cancel))
                return NIXL_ERR_CANCELED;
            if (now >= deadline) {
                SHM_ERROR(be, "shm: notification to peer %s timed out: its queue stayed full for 2 s (is it "
                              "making progress?)",
                          peer->name);
                return NIXL_ERR_TIMEOUT;
            }
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 1000000)
                sleep_ns *= 2;
            continue;
        }
        if (e == ECONNREFUSED || e == ENOENT) {
            SHM_ERROR(be, "shm: notification to peer %s refused: its socket is closed (agent gone)", peer->name);
            return NIXL_ERR_PEER_GONE;
        }
        SHM_ERROR(be, "shm: notification to peer %s failed: %s", peer->name, strerror(e));
        return e == EMSGSIZE ? NIXL_ERR_TOO_BIG : NIXL_ERR_IO;
    }
}

nixl_status_t shm_notif_send(void *bev, void *peerv, const void *msg, size_t len)
{
    shm_be_t *be = bev;
    shm_peer_t *peer = peerv;
    uint8_t small[512];
    if (!peer || (!msg && len))
        return NIXL_ERR_NULL;
    if (len > NIXL_NOTIF_MAX) {
        SHM_ERROR(be, "shm: notification of %zu bytes, at most %d allowed", len, NIXL_NOTIF_MAX);
        return NIXL_ERR_TOO_BIG;
    }
    nixl_status_t st = shm_peer_check(be, peer);
    if (st != NIXL_OK)
        return st;
    size_t need = shm_notif_size(be, len);
    uint8_t *buf = need <= sizeof(small) ? small : malloc(need);
    if (!buf)
        return NIXL_ERR_NO_MEMORY;
    shm_notif_build(be, buf, msg, len);
    st = shm_notif_send_raw(be, peer, buf, need, NULL);
    if (buf != small)
        free(buf);
    return st;
}

static void shm_notif_drop(shm_be_t *be, const char *why, const struct ucred *cred)
{
    be->dropped++;
    uint64_t now = shm_now_ns();
    if (now < be->drop_warn_ns)
        return;
    be->drop_warn_ns = now + SHM_DROP_WARN_NS;
    SHM_WARN(be, "shm: dropped a datagram on @%s from pid %d uid %d: %s (%llu dropped so far)", be->sock_name,
             cred ? (int)cred->pid : -1, cred ? (int)cred->uid : -1, why, (unsigned long long)be->dropped);
}

/* Why a received datagram must be dropped, or NULL when it is a valid
 * notification; *off_out gets where its payload starts. */
static const char *shm_notif_check(const shm_be_t *be, size_t n, int flags, const struct ucred *cred,
                                   size_t *off_out)
{
    const uint8_t *p = be->rx_buf;
    if (flags & (MSG_TRUNC | MSG_CTRUNC))
        return "larger than any notification";
    if (!cred)
        return "no sender credentials";
    if (cred->uid != be->self.uid && cred->uid != 0)
        return "sender runs as another user";
    if (n < SHM_NOTIF_HDR || shm_get_u32(p) != SHM_NOTIF_MAGIC || shm_get_u16(p + 4) != SHM_NOTIF_VERSION)
        return "not a notification (bad header)";
    size_t name_len = shm_get_u16(p + 6);
    if (name_len == 0 || name_len > SHM_NAME_MAX || name_len > n - SHM_NOTIF_HDR ||
        memchr(p + SHM_NOTIF_HDR, '\0', name_len))
        return "bad sender name";
    *off_out = SHM_NOTIF_HDR + name_len;
    return NULL;
}

static void shm_notif_deliver(shm_be_t *be, size_t n, int flags, const struct ucred *cred)
{
    size_t off = 0;
    const char *why = shm_notif_check(be, n, flags, cred, &off);
    if (why) {
        shm_notif_drop(be, why, cred);
        return;
    }
    char sender[SHM_NAME_MAX + 1];
    size_t name_len = off - SHM_NOTIF_HDR;
    memcpy(sender, be->rx_buf + SHM_NOTIF_HDR, name_len);
    sender[name_len] = '\0';
    be->host->notif_deliver(be->host->ctx, sender, be->rx_buf + off, n - off);
}

nixl_status_t shm_progress(void *bev)
{
    shm_be_t *be = bev;
    for (int k = 0; k < SHM_RECV_BATCH; k++) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(struct ucred))];
        } ctl;
        struct iovec iov = {.iov_base = be->rx_buf, .iov_len = be->rx_cap};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
        ssize_t n = recvmsg(be->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return NIXL_OK;
            SHM_WARN(be, "shm: receiving notifications on @%s: %s", be->sock_name, strerror(errno));
            return NIXL_ERR_IO;
        }
        const struct ucred *cred = NULL;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
                c->cmsg_len == CMSG_LEN(sizeof(struct ucred)))
                cred = (const struct ucred *)CMSG_DATA(c);
        shm_notif_deliver(be, (size_t)n, mh.msg_flags, cred);
    }
    return NIXL_OK;
}
