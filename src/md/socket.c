/*
 * socket.c - metadata over TCP (see socket.h for the wire format).
 *
 * The listener is one thread serving every connection at once (an epoll
 * loop, below): a silent or slow peer holds a slot, not the listener.  Its
 * handlers still run one at a time, so they never run concurrently.  Every
 * peer is untrusted: each connection gets a fixed deadline, connections are
 * capped in all and per source address, payload memory grows only with the
 * bytes that arrived, and every frame is validated before a handler sees
 * it.  All sockets are non-blocking and the stop pipe is in the loop, so
 * stopping is bounded.
 * The client calls open one connection per request with one deadline
 * covering connect, send and reply.
 */
#include "md/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "md/auth.h"
#include "util/log.h"
#include "util/time.h"

#define SOCK_MAGIC 0x4b53584eu /* "NXSK" little-endian */
#define SOCK_VERSION 1
/* Version 2: the frame is authenticated (socket.h, "Authentication"). */
#define SOCK_VERSION_MAC 2
#define SOCK_HDR_LEN 16
/* A request of version 2 ends with u64 time (ns since the epoch), a nonce
 * and the MAC; a reply of version 2 with the MAC. */
#define SOCK_REQ_TRAILER (8 + NIXL_MD_NONCE_LEN + NIXL_MD_MAC_LEN)
#define SOCK_REP_TRAILER NIXL_MD_MAC_LEN
/* A request's time may differ from ours by this much (clock skew). */
#define SOCK_MAC_WINDOW_NS (30ull * 1000000000ull)
/* Nonces remembered within the window; more authenticated requests than
 * this in one window are refused until older ones age out. */
#define SOCK_REPLAY_SLOTS 65536

enum {
    SOCK_TYPE_SEND = 1,
    SOCK_TYPE_FETCH = 2,
    SOCK_TYPE_INVALIDATE = 3,
    SOCK_TYPE_REPLY = 4,
};

/* How long one connection may hold the listener, whatever the peer does. */
#define SOCK_SERVE_DEADLINE_MS 1000
/* Pause after accept() fails for lack of resources, so the loop does not spin. */
#define SOCK_ACCEPT_BACKOFF_MS 100
/* As many as the listener holds: a burst of connects must not overflow the
 * accept queue while the thread is busy (SYNs dropped wait 1 s to retry). */
#define SOCK_BACKLOG 1024
/* "[v6 address]:port" */
#define SOCK_PEER_STR_LEN (INET6_ADDRSTRLEN + 8)

typedef struct frame_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    int32_t status;
    uint32_t len;
} frame_hdr_t;

struct sconn;

struct nixl_md_listener {
    int fd;
    int stop_rd; /* stays readable once stop wrote to it: wakes the loop */
    int stop_wr;
    int epfd;
    uint16_t port;
    nixl_md_handlers_t handlers;
    pthread_t thread;
    /* The listener thread's own (connections, oldest first). */
    struct sconn *head, *tail;
    uint64_t last_warn_ns, unsaid, backoff_until_ns;
    /* Nonces of authenticated requests seen within the window (open
     * addressing; rebuilt without the old ones when half full). */
    struct replay_slot {
        uint64_t t_ns; /* 0: empty */
        uint8_t nonce[NIXL_MD_NONCE_LEN];
    } * replay;
    size_t replay_used;
    /* Read by nixl_md_listener_stats from any thread. */
    _Atomic size_t nconns, peak_conns, payload_bytes, peak_payload_bytes;
    _Atomic uint64_t accepted, evicted, expired, auth_refused;
};

/* ------------------------------------------------------------------------
 * Framing
 * ------------------------------------------------------------------------ */

/* Two's complement without relying on implementation-defined conversions. */
static int32_t u32_to_i32(uint32_t u)
{
    return u <= INT32_MAX ? (int32_t)u : -(int32_t)(~u) - 1;
}

static void hdr_encode(const frame_hdr_t *h, uint8_t out[SOCK_HDR_LEN])
{
    nixl_put_u32(out, h->magic);
    nixl_put_u16(out + 4, h->version);
    nixl_put_u16(out + 6, h->type);
    nixl_put_u32(out + 8, (uint32_t)h->status);
    nixl_put_u32(out + 12, h->len);
}

static void hdr_decode(const uint8_t in[SOCK_HDR_LEN], frame_hdr_t *h)
{
    h->magic = nixl_get_u32(in);
    h->version = nixl_get_u16(in + 4);
    h->type = nixl_get_u16(in + 6);
    h->status = u32_to_i32(nixl_get_u32(in + 8));
    h->len = nixl_get_u32(in + 12);
}

/* The common checks of every frame; NULL when fine, else what is wrong. */
static const char *hdr_check_common(const frame_hdr_t *h, char *why, size_t why_cap)
{
    if (h->magic != SOCK_MAGIC) {
        snprintf(why, why_cap, "bad magic 0x%08x", (unsigned)h->magic);
        return why;
    }
    if (h->version != SOCK_VERSION && h->version != SOCK_VERSION_MAC) {
        snprintf(why, why_cap, "unsupported version %u", (unsigned)h->version);
        return why;
    }
    if (h->type < SOCK_TYPE_SEND || h->type > SOCK_TYPE_REPLY) {
        snprintf(why, why_cap, "unknown frame type %u", (unsigned)h->type);
        return why;
    }
    if (h->len > NIXL_MD_SOCK_MAX_FRAME) {
        snprintf(why, why_cap, "payload length %u over the limit of %u", (unsigned)h->len,
                 (unsigned)NIXL_MD_SOCK_MAX_FRAME);
        return why;
    }
    return NULL;
}

static const char *request_check(const frame_hdr_t *h, char *why, size_t why_cap)
{
    if (hdr_check_common(h, why, why_cap))
        return why;
    if (h->type == SOCK_TYPE_REPLY) {
        snprintf(why, why_cap, "a REPLY frame sent as a request");
        return why;
    }
    if (h->status != 0) {
        snprintf(why, why_cap, "request with non-zero status %d", (int)h->status);
        return why;
    }
    if (h->type == SOCK_TYPE_SEND && h->len == 0) {
        snprintf(why, why_cap, "SEND with an empty blob");
        return why;
    }
    if (h->type == SOCK_TYPE_FETCH && h->len != 0) {
        snprintf(why, why_cap, "FETCH with a %u-byte payload (expected none)", (unsigned)h->len);
        return why;
    }
    if (h->type == SOCK_TYPE_INVALIDATE && (h->len == 0 || h->len > NIXL_NAME_MAX)) {
        snprintf(why, why_cap, "INVALIDATE name of %u bytes (expected 1..%d)", (unsigned)h->len,
                 NIXL_NAME_MAX);
        return why;
    }
    return NULL;
}

/* Agent names travel without their NUL; printable ASCII only. */
static const char *name_check(const uint8_t *name, size_t len, char *why, size_t why_cap)
{
    for (size_t i = 0; i < len; i++) {
        if (name[i] == 0) {
            snprintf(why, why_cap, "INVALIDATE name has a NUL at byte %zu", i);
            return why;
        }
        if (name[i] < 0x20 || name[i] > 0x7e) {
            snprintf(why, why_cap, "INVALIDATE name has non-printable byte 0x%02x at %zu", name[i], i);
            return why;
        }
    }
    return NULL;
}

static int status_is_known(int32_t s)
{
    switch (s) {
#define SOCK_STATUS_CASE_(name, value, msg) case value:
        NIXL_STATUS_LIST(SOCK_STATUS_CASE_)
#undef SOCK_STATUS_CASE_
        return 1;
    default:
        return 0;
    }
}

/* ------------------------------------------------------------------------
 * Non-blocking I/O against a deadline
 * ------------------------------------------------------------------------ */

typedef enum {
    IO_OK,
    IO_EOF,
    IO_TIMEOUT,
    IO_STOPPED,
    IO_SYSERR,
} io_result_t;

typedef struct sock_io {
    int fd;
    int stop_fd; /* -1 on the client side */
    uint64_t deadline_ns;
    int sys_err; /* errno behind the last IO_SYSERR */
} sock_io_t;

static io_result_t io_wait(sock_io_t *io, short events)
{
    for (;;) {
        uint64_t now = nixl_now_ns();
        if (now >= io->deadline_ns)
            return IO_TIMEOUT;
        uint64_t left_ms = (io->deadline_ns - now + 999999) / 1000000;
        struct pollfd p[2] = {{.fd = io->fd, .events = events}, {.fd = io->stop_fd, .events = POLLIN}};
        int n = poll(p, io->stop_fd >= 0 ? 2 : 1, left_ms > INT32_MAX ? INT32_MAX : (int)left_ms);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            io->sys_err = errno;
            return IO_SYSERR;
        }
        if (io->stop_fd >= 0 && p[1].revents)
            return IO_STOPPED;
        /* POLLERR/POLLHUP included: the next read or write reports it. */
        if (p[0].revents)
            return IO_OK;
    }
}

/* Reads exactly len bytes; *got says how many arrived (to tell a clean
 * close from a truncated frame). */
static io_result_t io_read_full(sock_io_t *io, void *buf, size_t len, size_t *got)
{
    size_t off = 0;
    io_result_t r = IO_OK;

    while (off < len) {
        if (nixl_now_ns() >= io->deadline_ns) {
            r = IO_TIMEOUT;
            break;
        }
        ssize_t n = recv(io->fd, (uint8_t *)buf + off, len - off, 0);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0) {
            r = IO_EOF;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            r = io_wait(io, POLLIN);
            if (r != IO_OK)
                break;
            continue;
        }
        io->sys_err = errno;
        r = IO_SYSERR;
        break;
    }
    *got = off;
    return r;
}

/* Writes all of iov[0..cnt); iov is consumed. */
static io_result_t io_write_all(sock_io_t *io, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        if (iov->iov_len == 0) {
            iov++;
            cnt--;
            continue;
        }
        if (nixl_now_ns() >= io->deadline_ns)
            return IO_TIMEOUT;
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = sendmsg(io->fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                io_result_t r = io_wait(io, POLLOUT);
                if (r != IO_OK)
                    return r;
                continue;
            }
            io->sys_err = errno;
            return IO_SYSERR;
        }
        size_t done = (size_t)n;
        while (cnt > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return IO_OK;
}

static void sock_set_nodelay(int fd)
{
    int one = 1;
    /* Latency only: a failure here changes nothing else. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Accepts dotted IPv4 or textual IPv6. */
static int sock_parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        *len = sizeof(*v4);
        return 0;
    }
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        *len = sizeof(*v6);
        return 0;
    }
    return -1;
}

/* The numeric host of ss, no port ("" for another family). */
static void sock_host_str(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    out[0] = 0;
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, out, (socklen_t)cap);
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, out, (socklen_t)cap);
}

static void sock_addr_str(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof(ip));
        snprintf(out, cap, "%s:%u", ip, (unsigned)ntohs(v4->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof(ip));
        snprintf(out, cap, "[%s]:%u", ip, (unsigned)ntohs(v6->sin6_port));
    } else {
        snprintf(out, cap, "(unknown address family %d)", (int)ss->ss_family);
    }
}

/* ------------------------------------------------------------------------
 * Listener: one thread, every connection at once
 *
 * An epoll loop over the listening socket, the stop pipe and every
 * accepted connection, each a small state machine (header, payload,
 * reply).  A connection that sends nothing, or a header claiming 64 MiB
 * and then nothing, costs one slot until its deadline and no one else's
 * time.  Handlers still run one at a time, on this thread.  Bounds:
 * SOCK_MAX_CONNS connections in all and SOCK_MAX_PER_SOURCE from one
 * address (a new connection over either evicts the oldest one of that
 * address, else the oldest of all: a legitimate request is served in
 * milliseconds, so the oldest is the one stalling); payload buffers grow
 * only as bytes arrive, and all of them together stay under
 * SOCK_PAYLOAD_BUDGET.
 * ------------------------------------------------------------------------ */

#define SOCK_MAX_CONNS 1024
#define SOCK_MAX_PER_SOURCE 128
#define SOCK_PAYLOAD_BUDGET (256u << 20)
#define SOCK_PAYLOAD_STEP (64u << 10)
/* Warnings about many connections at once: at most one a second. */
#define SOCK_WARN_INTERVAL_NS 1000000000ull

typedef enum { CONN_HDR, CONN_PAYLOAD, CONN_REPLY } conn_state_t;

typedef struct sconn {
    int fd;
    conn_state_t state;
    uint64_t deadline_ns;
    struct sockaddr_storage src; /* the port is ignored when comparing sources */
    char peer[SOCK_PEER_STR_LEN];
    uint8_t hdr[SOCK_HDR_LEN];
    size_t hdr_got;
    frame_hdr_t req;
    uint8_t *payload;
    size_t cap, got;
    uint8_t rep[SOCK_HDR_LEN];
    void *blob;
    size_t blob_len;
    uint8_t rep_mac[SOCK_REP_TRAILER];
    size_t rep_mac_len;
    size_t out_len, out_off; /* reply: header, blob, MAC */
    uint8_t nonce[NIXL_MD_NONCE_LEN]; /* the request's, which the reply's MAC covers */
    struct sconn *prev, *next;  /* accept order, oldest first */
} sconn_t;

static int src_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return 0;
}

static void conn_close(nixl_md_listener_t *l, sconn_t *c)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    l->payload_bytes -= c->cap;
    free(c->payload);
    free(c->blob);
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    l->nconns--;
    free(c);
}

/* A warning that many connections may trigger at once: the first, then
 * one a second with how many were left unsaid. */
static void listener_warn_limited(nixl_md_listener_t *l, const char *fmt, const char *peer, const char *what)
{
    uint64_t now = nixl_now_ns();
    if (now - l->last_warn_ns < SOCK_WARN_INTERVAL_NS && l->last_warn_ns) {
        l->unsaid++;
        return;
    }
    char line[256];
    snprintf(line, sizeof(line), fmt, peer, what);
    if (l->unsaid)
        NIXL_WARN("md listener: %s (and %llu similar since the last such line)", line, (unsigned long long)l->unsaid);
    else
        NIXL_WARN("md listener: %s", line);
    l->unsaid = 0;
    l->last_warn_ns = now;
}

/* Runs the handler for a validated request; *blob_out is set for FETCH. */
static nixl_status_t serve_dispatch(nixl_md_listener_t *l, const char *peer, const struct sockaddr_storage *src,
                                    const frame_hdr_t *req, const uint8_t *payload, void **blob_out,
                                    size_t *len_out)
{
    const nixl_md_handlers_t *h = &l->handlers;
    char from[INET6_ADDRSTRLEN];
    sock_host_str(src, from, sizeof(from));

    switch (req->type) {
    case SOCK_TYPE_SEND:
        if (!h->on_load)
            return NIXL_ERR_NOT_SUPPORTED;
        return h->on_load(h->arg, from, payload, req->len);
    case SOCK_TYPE_INVALIDATE:
        if (!h->on_invalidate)
            return NIXL_ERR_NOT_SUPPORTED;
        return h->on_invalidate(h->arg, from, (const char *)payload);
    case SOCK_TYPE_FETCH: {
        if (!h->on_fetch)
            return NIXL_ERR_NOT_SUPPORTED;
        void *blob = NULL;
        size_t len = 0;
        nixl_status_t st = h->on_fetch(h->arg, &blob, &len);
        if (st != NIXL_OK) {
            free(blob);
            return st;
        }
        if (!blob || len == 0) {
            NIXL_WARN("md listener: fetch handler returned an empty blob; replying to %s with an error", peer);
            free(blob);
            return NIXL_ERR_BAD_METADATA;
        }
        if (len > NIXL_MD_SOCK_MAX_FRAME) {
            NIXL_WARN("md listener: local blob of %zu bytes exceeds the frame limit of %u; replying to %s "
                      "with an error",
                      len, (unsigned)NIXL_MD_SOCK_MAX_FRAME, peer);
            free(blob);
            return NIXL_ERR_TOO_BIG;
        }
        *blob_out = blob;
        *len_out = len;
        return NIXL_OK;
    }
    default:
        return NIXL_ERR_NOT_SUPPORTED; /* request_check let no other type through */
    }
}

/* Writes what the socket takes of the reply; 1 when it is all out. */
static int conn_write(sconn_t *c)
{
    while (c->out_off < c->out_len) {
        const struct iovec seg[3] = {{c->rep, SOCK_HDR_LEN}, {c->blob, c->blob_len}, {c->rep_mac, c->rep_mac_len}};
        struct iovec iov[3];
        int n = 0;
        size_t skip = c->out_off;
        for (int i = 0; i < 3; i++) {
            if (skip >= seg[i].iov_len) {
                skip -= seg[i].iov_len;
                continue;
            }
            iov[n++] = (struct iovec){(uint8_t *)seg[i].iov_base + skip, seg[i].iov_len - skip};
            skip = 0;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            NIXL_WARN("md listener: %s: error while writing the reply: %s", c->peer, strerror(errno));
            return -1;
        }
        c->out_off += (size_t)k;
    }
    shutdown(c->fd, SHUT_WR); /* tell the peer the reply is complete before close */
    return 1;
}

/* What a version-2 frame's MAC covers, after its label. */
static const char sock_label_req[] = "nixl-md-socket-request-2";
static const char sock_label_rep[] = "nixl-md-socket-reply-2";

/* Starts the reply (status st, blob when a FETCH succeeded); authenticated
 * when mac (the request was).  0: keep the connection for the rest of the
 * reply; else close it. */
static int conn_reply(nixl_md_listener_t *l, sconn_t *c, nixl_status_t st, void *blob, size_t blob_len, int mac)
{
    l->payload_bytes -= c->cap;
    free(c->payload);
    c->payload = NULL;
    c->cap = c->got = 0;
    frame_hdr_t rep = {.magic = SOCK_MAGIC, .version = mac ? SOCK_VERSION_MAC : SOCK_VERSION,
                       .type = SOCK_TYPE_REPLY, .status = (int32_t)st, .len = blob ? (uint32_t)blob_len : 0};
    hdr_encode(&rep, c->rep);
    c->blob = blob;
    c->blob_len = blob ? blob_len : 0;
    c->rep_mac_len = 0;
    if (mac) {
        const struct iovec parts[] = {{(void *)sock_label_rep, sizeof(sock_label_rep)},
                                      {c->nonce, NIXL_MD_NONCE_LEN},
                                      {c->rep, SOCK_HDR_LEN},
                                      {blob, c->blob_len}};
        if (nixl_md_mac(l->handlers.key, parts, 4, c->rep_mac) != NIXL_OK)
            return 1;
        c->rep_mac_len = SOCK_REP_TRAILER;
    }
    c->out_len = SOCK_HDR_LEN + c->blob_len + c->rep_mac_len;
    c->out_off = 0;
    c->state = CONN_REPLY;
    /* The deadline bounds what the peer controls, not our handler's time. */
    c->deadline_ns = nixl_now_ns() + (uint64_t)SOCK_SERVE_DEADLINE_MS * 1000000u;
    int w = conn_write(c);
    if (w != 0)
        return 1;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    return epoll_ctl(l->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0;
}

/* Refused as unauthenticated: an unauthenticated reply saying so (a
 * client can act on the status; it proves nothing, and grants nothing). */
static int conn_refuse_auth(nixl_md_listener_t *l, sconn_t *c, const char *why)
{
    l->auth_refused++;
    listener_warn_limited(l, "%s: request refused, not authenticated: %s", c->peer, why);
    return conn_reply(l, c, NIXL_ERR_NOT_AUTHENTICATED, NULL, 0, 0);
}

/* Remembers a nonce; 0 when it was new, 1 when seen (a replay), -1 when
 * too many are remembered.  Nonces older than the window are forgotten. */
static int replay_check(nixl_md_listener_t *l, const uint8_t *nonce, uint64_t now)
{
    if (!l->replay) {
        l->replay = calloc(SOCK_REPLAY_SLOTS, sizeof(*l->replay));
        if (!l->replay)
            return -1;
    }
    if (l->replay_used >= SOCK_REPLAY_SLOTS / 2) {
        /* Keep the young ones only: rebuild in place through a copy. */
        struct replay_slot *old = l->replay;
        l->replay = calloc(SOCK_REPLAY_SLOTS, sizeof(*l->replay));
        if (!l->replay) {
            l->replay = old;
            return -1;
        }
        l->replay_used = 0;
        for (size_t i = 0; i < SOCK_REPLAY_SLOTS; i++)
            if (old[i].t_ns && now - old[i].t_ns <= 2 * SOCK_MAC_WINDOW_NS)
                (void)replay_check(l, old[i].nonce, old[i].t_ns);
        free(old);
        if (l->replay_used >= SOCK_REPLAY_SLOTS / 2)
            return -1;
    }
    uint64_t h;
    memcpy(&h, nonce, sizeof(h));
    for (size_t i = (size_t)(h % SOCK_REPLAY_SLOTS);; i = (i + 1) % SOCK_REPLAY_SLOTS) {
        struct replay_slot *e = &l->replay[i];
        if (!e->t_ns) {
            e->t_ns = now ? now : 1;
            memcpy(e->nonce, nonce, NIXL_MD_NONCE_LEN);
            l->replay_used++;
            return 0;
        }
        if (memcmp(e->nonce, nonce, NIXL_MD_NONCE_LEN) == 0)
            return 1;
    }
}

/* A version-2 request is in: its MAC, its time, its nonce.  NULL when it
 * is authentic; else why not. */
static const char *conn_verify(nixl_md_listener_t *l, sconn_t *c)
{
    const uint8_t *t = c->payload + c->req.len;
    uint64_t ts = nixl_get_u64(t);
    memcpy(c->nonce, t + 8, NIXL_MD_NONCE_LEN);
    uint8_t want[NIXL_MD_MAC_LEN];
    const struct iovec parts[] = {{(void *)sock_label_req, sizeof(sock_label_req)},
                                  {c->hdr, SOCK_HDR_LEN},
                                  {(void *)t, 8 + NIXL_MD_NONCE_LEN},
                                  {c->payload, c->req.len}};
    if (nixl_md_mac(l->handlers.key, parts, 4, want) != NIXL_OK)
        return "the MAC could not be computed here";
    if (!nixl_md_mac_equal(want, t + 8 + NIXL_MD_NONCE_LEN))
        return "wrong MAC (another secret, or the frame was changed)";
    uint64_t now = nixl_realtime_ns();
    if ((ts > now ? ts - now : now - ts) > SOCK_MAC_WINDOW_NS)
        return "its time is more than 30 s from ours (a replay, or clocks apart)";
    int r = replay_check(l, c->nonce, now);
    if (r > 0)
        return "a replay (its nonce was seen)";
    if (r < 0)
        return "too many authenticated requests within the window to remember";
    return NULL;
}

/* The request is complete: authenticate it, run its handler, start the
 * reply.  0: keep the connection for the rest of the reply; else close. */
static int conn_answer(nixl_md_listener_t *l, sconn_t *c)
{
    int mac = c->req.version == SOCK_VERSION_MAC;
    if (l->handlers.key && !mac)
        return conn_refuse_auth(l, c, "no MAC (this listener has a secret: NIXL_MD_SECRET_FILE)");
    if (!l->handlers.key && mac)
        return conn_refuse_auth(l, c, "a MAC, but this listener has no secret to check it with");
    if (mac) {
        const char *why = conn_verify(l, c);
        if (why)
            return conn_refuse_auth(l, c, why);
    }
    if (c->payload)
        c->payload[c->req.len] = 0; /* an INVALIDATE name becomes a C string (the trailer was read) */
    char nwhy[128];
    if (c->req.type == SOCK_TYPE_INVALIDATE && name_check(c->payload, c->req.len, nwhy, sizeof(nwhy))) {
        NIXL_WARN("md listener: bad request from %s: %s; connection closed", c->peer, nwhy);
        return 1;
    }
    void *blob = NULL;
    size_t blob_len = 0;
    nixl_status_t st = serve_dispatch(l, c->peer, &c->src, &c->req, c->payload, &blob, &blob_len);
    return conn_reply(l, c, st, blob, blob_len, mac);
}

/* What follows a request's header: its payload, and a version-2 trailer. */
static size_t conn_body_len(const sconn_t *c)
{
    return (size_t)c->req.len + (c->req.version == SOCK_VERSION_MAC ? SOCK_REQ_TRAILER : 0);
}

/* The header is in: check it, then wait for the payload or answer. */
static int conn_header_done(nixl_md_listener_t *l, sconn_t *c)
{
    char why[128];
    hdr_decode(c->hdr, &c->req);
    if (request_check(&c->req, why, sizeof(why))) {
        NIXL_WARN("md listener: bad request from %s: %s; connection closed", c->peer, why);
        return 1;
    }
    if (conn_body_len(c) == 0)
        return conn_answer(l, c);
    c->state = CONN_PAYLOAD;
    return 0;
}

/* The payload buffer grows with the bytes that came, never to the length
 * a header claims before they come. */
static int conn_grow(nixl_md_listener_t *l, sconn_t *c)
{
    size_t want = conn_body_len(c) + 1; /* one spare byte: an INVALIDATE name becomes a C string */
    size_t next = c->cap ? c->cap * 2 : SOCK_PAYLOAD_STEP;
    if (next + 1 >= want)
        next = want; /* the last step takes the spare byte too (the body may end exactly at next) */
    if (l->payload_bytes - c->cap + next > SOCK_PAYLOAD_BUDGET) {
        listener_warn_limited(l, "%s: %s; connection closed", c->peer,
                              "the listener's payload budget is taken by other connections");
        return -1;
    }
    uint8_t *p = realloc(c->payload, next);
    if (!p) {
        NIXL_ERROR("md listener: no memory for a %zu-byte request buffer from %s", next, c->peer);
        return -1;
    }
    l->payload_bytes += next - c->cap;
    if (l->payload_bytes > l->peak_payload_bytes)
        l->peak_payload_bytes = l->payload_bytes;
    c->payload = p;
    c->cap = next;
    return 0;
}

/* Readable: take what arrived.  0: keep the connection; else close it. */
static int conn_read(nixl_md_listener_t *l, sconn_t *c)
{
    for (;;) {
        uint8_t *dst;
        size_t room;
        if (c->state == CONN_HDR) {
            dst = c->hdr + c->hdr_got;
            room = SOCK_HDR_LEN - c->hdr_got;
        } else if (c->state == CONN_PAYLOAD) {
            if (c->got == c->cap && conn_grow(l, c) != 0)
                return 1;
            dst = c->payload + c->got;
            size_t body = conn_body_len(c);
            room = (c->cap < body ? c->cap : body) - c->got;
        } else {
            return 0; /* replying: nothing more is read */
        }
        ssize_t n = recv(c->fd, dst, room, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            NIXL_WARN("md listener: %s: error while reading the request: %s", c->peer, strerror(errno));
            return 1;
        }
        if (n == 0) {
            if (c->state == CONN_HDR && c->hdr_got == 0)
                /* Port probes and health checks do this; not worth a warning. */
                NIXL_INFO("md listener: %s closed the connection without sending a request", c->peer);
            else if (c->state == CONN_HDR)
                NIXL_WARN("md listener: %s closed the connection while reading the request header (truncated "
                          "frame)",
                          c->peer);
            else
                NIXL_WARN("md listener: bad request from %s: truncated payload (%zu of %zu bytes); connection closed",
                          c->peer, c->got, conn_body_len(c));
            return 1;
        }
        if (c->state == CONN_HDR) {
            c->hdr_got += (size_t)n;
            if (c->hdr_got == SOCK_HDR_LEN && conn_header_done(l, c) != 0)
                return 1;
            if (c->state == CONN_REPLY)
                return 0;
            continue;
        }
        c->got += (size_t)n;
        if (c->got < conn_body_len(c))
            continue;
        return conn_answer(l, c);
    }
}

/* Errors that concern one connection that already went away (Linux also
 * reports pending network errors of the new socket through accept). */
static int accept_error_is_transient(int err)
{
    switch (err) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ENOPROTOOPT:
    case EOPNOTSUPP:
        return 1;
    default:
        return 0;
    }
}

/* Room for one more connection from src: evict the oldest of that source
 * when it holds its share, else the oldest of all when the listener is
 * full. */
static void listener_make_room(nixl_md_listener_t *l, const struct sockaddr_storage *src)
{
    sconn_t *oldest_src = NULL;
    unsigned from_src = 0;
    for (sconn_t *c = l->head; c; c = c->next) {
        if (src_same(&c->src, src)) {
            if (!oldest_src)
                oldest_src = c;
            from_src++;
        }
    }
    sconn_t *victim = NULL;
    const char *why = NULL;
    if (from_src >= SOCK_MAX_PER_SOURCE) {
        victim = oldest_src;
        why = "its address holds the most connections one address may have open";
    } else if (l->nconns >= SOCK_MAX_CONNS) {
        victim = l->head;
        why = "the listener holds the most connections it serves at once";
    }
    if (!victim)
        return;
    l->evicted++;
    listener_warn_limited(l, "%s: closed unanswered for a newer connection: %s", victim->peer, why);
    conn_close(l, victim);
}

static void listener_accept(nixl_md_listener_t *l)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t slen = sizeof(ss);
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &slen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            if (accept_error_is_transient(err))
                continue;
            /* Out of descriptors or memory (or worse): back off instead of spinning. */
            NIXL_WARN("md listener: accept failed: %s; retrying in %d ms", strerror(err), SOCK_ACCEPT_BACKOFF_MS);
            l->backoff_until_ns = nixl_now_ns() + (uint64_t)SOCK_ACCEPT_BACKOFF_MS * 1000000u;
            struct epoll_event ev = {.events = 0, .data.ptr = NULL};
            epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->fd, &ev);
            return;
        }
        listener_make_room(l, &ss);
        sconn_t *c = calloc(1, sizeof(*c));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (!c || epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            NIXL_ERROR("md listener: cannot take a connection: %s", c ? strerror(errno) : "out of memory");
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->src = ss;
        sock_addr_str(&ss, c->peer, sizeof(c->peer));
        sock_set_nodelay(fd);
        c->deadline_ns = nixl_now_ns() + (uint64_t)SOCK_SERVE_DEADLINE_MS * 1000000u;
        c->prev = l->tail;
        if (l->tail)
            l->tail->next = c;
        else
            l->head = c;
        l->tail = c;
        l->nconns++;
        if (l->nconns > l->peak_conns)
            l->peak_conns = l->nconns;
        l->accepted++;
    }
}

/* Closes the connections past their deadline; returns the time to the
 * next deadline in ms (-1: none). */
static int listener_expire(nixl_md_listener_t *l)
{
    uint64_t now = nixl_now_ns(), next = UINT64_MAX;
    sconn_t *c = l->head;
    while (c) {
        sconn_t *n = c->next;
        if (c->deadline_ns <= now) {
            const char *what = c->state == CONN_HDR       ? "reading the request header"
                               : c->state == CONN_PAYLOAD ? "reading the request payload"
                                                          : "writing the reply";
            l->expired++;
            char fmt[96];
            snprintf(fmt, sizeof(fmt), "%%s did not complete within %d ms while %%s; connection closed",
                     SOCK_SERVE_DEADLINE_MS);
            listener_warn_limited(l, fmt, c->peer, what);
            conn_close(l, c);
        } else if (c->deadline_ns < next) {
            next = c->deadline_ns;
        }
        c = n;
    }
    if (l->backoff_until_ns) {
        if (l->backoff_until_ns <= now) {
            l->backoff_until_ns = 0;
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
            epoll_ctl(l->epfd, EPOLL_CTL_MOD, l->fd, &ev);
        } else if (l->backoff_until_ns < next) {
            next = l->backoff_until_ns;
        }
    }
    if (next == UINT64_MAX)
        return -1;
    uint64_t ms = (next - now + 999999) / 1000000;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static void *listener_main(void *arg)
{
    nixl_md_listener_t *l = arg;
    struct epoll_event evs[64];
    for (;;) {
        int timeout = listener_expire(l);
        int n = epoll_wait(l->epfd, evs, 64, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            NIXL_ERROR("md listener: epoll_wait failed: %s; listener thread exits", strerror(errno));
            break;
        }
        int stop = 0, accept_ready = 0;
        for (int i = 0; i < n; i++) {
            sconn_t *c = evs[i].data.ptr;
            if (c == NULL) {
                accept_ready = 1;
            } else if (c == (sconn_t *)&l->stop_rd) {
                stop = 1;
            } else {
                /* POLLERR/POLLHUP included: the next read or write reports it. */
                int done = c->state == CONN_REPLY ? conn_write(c) != 0 : conn_read(l, c) != 0;
                if (done)
                    conn_close(l, c);
            }
        }
        if (stop)
            break;
        if (accept_ready)
            listener_accept(l);
    }
    while (l->head)
        conn_close(l, l->head);
    return NULL;
}

/* The listener thread must not take the process's signals. */
static int listener_spawn(nixl_md_listener_t *l)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&l->thread, NULL, listener_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

nixl_status_t nixl_md_listener_start(const char *addr, uint16_t port, const nixl_md_handlers_t *handlers,
                                     nixl_md_listener_t **listener_out)
{
    struct sockaddr_storage ss;
    socklen_t slen;
    nixl_status_t st = NIXL_ERR_IO;
    int one = 1;

    if (!handlers || !listener_out) {
        NIXL_ERROR("md listener: NULL %s", handlers ? "listener_out" : "handlers");
        return NIXL_ERR_NULL;
    }
    if (!addr)
        addr = "0.0.0.0";
    if (sock_parse_addr(addr, port, &ss, &slen) != 0) {
        NIXL_ERROR("md listener: '%s' is not an IPv4 or IPv6 address", addr);
        return NIXL_ERR_INVALID_PARAM;
    }

    nixl_md_listener_t *l = calloc(1, sizeof(*l));
    if (!l) {
        NIXL_ERROR("md listener: out of memory");
        return NIXL_ERR_NO_MEMORY;
    }
    l->handlers = *handlers;

    l->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        NIXL_ERROR("md listener: socket() failed: %s", strerror(errno));
        goto err_free;
    }
    if (setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        NIXL_ERROR("md listener: SO_REUSEADDR failed: %s", strerror(errno));
        goto err_close_fd;
    }
    if (bind(l->fd, (struct sockaddr *)&ss, slen) != 0) {
        NIXL_ERROR("md listener: cannot bind %s port %u: %s", addr, (unsigned)port, strerror(errno));
        st = errno == EACCES ? NIXL_ERR_PERMISSION : NIXL_ERR_IO;
        goto err_close_fd;
    }
    if (listen(l->fd, SOCK_BACKLOG) != 0) {
        NIXL_ERROR("md listener: listen on %s port %u failed: %s", addr, (unsigned)port, strerror(errno));
        goto err_close_fd;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(l->fd, (struct sockaddr *)&bound, &blen) != 0) {
        NIXL_ERROR("md listener: getsockname failed: %s", strerror(errno));
        goto err_close_fd;
    }
    l->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);

    int pfd[2];
    if (pipe2(pfd, O_NONBLOCK | O_CLOEXEC) != 0) {
        NIXL_ERROR("md listener: pipe2 failed: %s", strerror(errno));
        goto err_close_fd;
    }
    l->stop_rd = pfd[0];
    l->stop_wr = pfd[1];
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &l->stop_rd};
    if (l->epfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->fd, &lev) != 0 ||
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->stop_rd, &sev) != 0) {
        NIXL_ERROR("md listener: epoll setup failed: %s", strerror(errno));
        goto err_close_pipe;
    }

    int rc = listener_spawn(l);
    if (rc != 0) {
        NIXL_ERROR("md listener: cannot start its thread: %s", strerror(rc));
        goto err_close_pipe;
    }
    NIXL_INFO("md listener: serving on %s port %u", addr, (unsigned)l->port);
    *listener_out = l;
    return NIXL_OK;

err_close_pipe:
    if (l->epfd >= 0)
        close(l->epfd);
    close(l->stop_rd);
    close(l->stop_wr);
err_close_fd:
    close(l->fd);
err_free:
    free(l);
    return st;
}

uint16_t nixl_md_listener_port(const nixl_md_listener_t *listener)
{
    return listener ? listener->port : 0;
}

void nixl_md_listener_stats(const nixl_md_listener_t *l, nixl_md_listener_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!l)
        return;
    out->conns = l->nconns;
    out->peak_conns = l->peak_conns;
    out->payload_bytes = l->payload_bytes;
    out->peak_payload_bytes = l->peak_payload_bytes;
    out->accepted = l->accepted;
    out->evicted = l->evicted;
    out->expired = l->expired;
    out->auth_refused = l->auth_refused;
}

void nixl_md_listener_stop(nixl_md_listener_t *listener)
{
    if (!listener)
        return;
    const char b = 1;
    ssize_t n;
    do {
        n = write(listener->stop_wr, &b, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1)
        /* Cannot happen on an empty pipe; joining would hang, so say why. */
        NIXL_ERROR("md listener: cannot signal stop: %s", strerror(errno));
    pthread_join(listener->thread, NULL);
    close(listener->epfd);
    close(listener->stop_rd);
    close(listener->stop_wr);
    close(listener->fd);
    free(listener->replay);
    free(listener);
}

/* ------------------------------------------------------------------------
 * Client
 * ------------------------------------------------------------------------ */

static const char *sock_type_name(uint16_t type)
{
    switch (type) {
    case SOCK_TYPE_SEND:
        return "send";
    case SOCK_TYPE_FETCH:
        return "fetch";
    case SOCK_TYPE_INVALIDATE:
        return "invalidate";
    default:
        return "request";
    }
}

/* "send to", "fetch from"...: log lines read "md fetch from 10.0.0.2:5555: ..." */
static const char *sock_op_peer(uint16_t type)
{
    switch (type) {
    case SOCK_TYPE_SEND:
        return "send to";
    case SOCK_TYPE_FETCH:
        return "fetch from";
    case SOCK_TYPE_INVALIDATE:
        return "invalidate at";
    default:
        return "request to";
    }
}

/* Maps a failed client-side I/O step to a status, logging it once. */
static nixl_status_t client_io_fail(const char *peer, uint16_t type, const char *what, io_result_t r,
                                    const sock_io_t *io, int timeout_ms)
{
    switch (r) {
    case IO_TIMEOUT:
        NIXL_WARN("md %s %s: timed out after %d ms while %s", sock_op_peer(type), peer, timeout_ms, what);
        return NIXL_ERR_TIMEOUT;
    case IO_EOF:
        NIXL_WARN("md %s %s: peer closed the connection while %s", sock_op_peer(type), peer, what);
        return NIXL_ERR_IO;
    case IO_SYSERR:
        NIXL_WARN("md %s %s: %s while %s", sock_op_peer(type), peer, strerror(io->sys_err), what);
        return io->sys_err == ETIMEDOUT ? NIXL_ERR_TIMEOUT : NIXL_ERR_IO;
    default:
        NIXL_WARN("md %s %s: failed while %s", sock_op_peer(type), peer, what);
        return NIXL_ERR_IO;
    }
}

static nixl_status_t client_connect(const struct sockaddr_storage *ss, socklen_t slen, const char *peer,
                                    uint16_t type, int timeout_ms, sock_io_t *io)
{
    io_result_t r;
    int err = 0;
    socklen_t elen = sizeof(err);

    io->fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (io->fd < 0) {
        NIXL_WARN("md %s %s: socket() failed: %s", sock_op_peer(type), peer, strerror(errno));
        return NIXL_ERR_IO;
    }
    /* EINTR leaves a non-blocking connect running, like EINPROGRESS. */
    if (connect(io->fd, (const struct sockaddr *)ss, slen) != 0 && errno != EINPROGRESS && errno != EINTR) {
        err = errno;
        goto err_refused;
    }
    r = io_wait(io, POLLOUT);
    if (r != IO_OK) {
        nixl_status_t st = client_io_fail(peer, type, "connecting", r, io, timeout_ms);
        close(io->fd);
        return st;
    }
    if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        err = errno;
    if (err != 0)
        goto err_refused;
    sock_set_nodelay(io->fd);
    return NIXL_OK;

err_refused:
    close(io->fd);
    NIXL_WARN("md %s %s: cannot connect: %s", sock_op_peer(type), peer, strerror(err));
    return err == ETIMEDOUT ? NIXL_ERR_TIMEOUT : NIXL_ERR_IO;
}

/* Reads and validates the reply; *blob_out is set only for a FETCH that succeeded. */
/* A reply's MAC: over its label, the request's nonce, its header and blob. */
static int reply_mac_ok(const nixl_md_key_t *key, const uint8_t *nonce, const uint8_t *hdr, const void *blob,
                        size_t len, const uint8_t *mac)
{
    uint8_t want[NIXL_MD_MAC_LEN];
    const struct iovec parts[] = {{(void *)sock_label_rep, sizeof(sock_label_rep)},
                                  {(void *)nonce, NIXL_MD_NONCE_LEN},
                                  {(void *)hdr, SOCK_HDR_LEN},
                                  {(void *)blob, len}};
    return nixl_md_mac(key, parts, 4, want) == NIXL_OK && nixl_md_mac_equal(want, mac);
}

static nixl_status_t client_read_reply(sock_io_t *io, const char *peer, uint16_t type, int timeout_ms,
                                       const nixl_md_key_t *key, const uint8_t *nonce, void **blob_out,
                                       size_t *len_out)
{
    uint8_t raw[SOCK_HDR_LEN];
    frame_hdr_t rep;
    char why[128];
    size_t got = 0;

    io_result_t r = io_read_full(io, raw, sizeof(raw), &got);
    if (r == IO_EOF && got == 0) {
        NIXL_WARN("md %s %s: peer closed the connection without replying (request rejected?)",
                  sock_op_peer(type), peer);
        return NIXL_ERR_IO;
    }
    if (r == IO_EOF) {
        NIXL_WARN("md %s %s: truncated reply header (%zu of %d bytes)", sock_op_peer(type), peer, got,
                  SOCK_HDR_LEN);
        return NIXL_ERR_BAD_METADATA;
    }
    if (r != IO_OK)
        return client_io_fail(peer, type, "waiting for the reply", r, io, timeout_ms);

    hdr_decode(raw, &rep);
    const char *bad = hdr_check_common(&rep, why, sizeof(why));
    if (!bad && rep.type != SOCK_TYPE_REPLY) {
        snprintf(why, sizeof(why), "frame type %u instead of REPLY", (unsigned)rep.type);
        bad = why;
    }
    if (!bad && (rep.status > 0 || !status_is_known(rep.status))) {
        snprintf(why, sizeof(why), "unknown status %d", (int)rep.status);
        bad = why;
    }
    int want_blob = type == SOCK_TYPE_FETCH && rep.status == NIXL_OK;
    if (!bad && want_blob && rep.len == 0) {
        snprintf(why, sizeof(why), "successful FETCH reply without a blob");
        bad = why;
    }
    if (!bad && !want_blob && rep.len != 0) {
        snprintf(why, sizeof(why), "unexpected %u-byte payload", (unsigned)rep.len);
        bad = why;
    }
    if (bad) {
        NIXL_WARN("md %s %s: malformed reply: %s", sock_op_peer(type), peer, bad);
        return NIXL_ERR_BAD_METADATA;
    }
    int mac = rep.version == SOCK_VERSION_MAC;
    if (mac && !key) {
        NIXL_WARN("md %s %s: an authenticated reply to an unauthenticated request", sock_op_peer(type), peer);
        return NIXL_ERR_BAD_METADATA;
    }
    if (key && !mac) {
        /* Only a refusal may come unauthenticated: it grants nothing. */
        if (rep.status == NIXL_OK) {
            NIXL_WARN("md %s %s: reply without a MAC (the peer has no secret, or someone else answered); refused",
                      sock_op_peer(type), peer);
            return NIXL_ERR_NOT_AUTHENTICATED;
        }
        if (rep.status == NIXL_ERR_NOT_AUTHENTICATED)
            NIXL_WARN("md %s %s: the peer refused our request as not authenticated (another secret, a clock more "
                      "than 30 s apart, or it has none)",
                      sock_op_peer(type), peer);
        return (nixl_status_t)rep.status;
    }
    uint8_t rep_mac[SOCK_REP_TRAILER];
    if (mac && !want_blob) {
        r = io_read_full(io, rep_mac, sizeof(rep_mac), &got);
        if (r != IO_OK)
            return r == IO_EOF ? NIXL_ERR_BAD_METADATA : client_io_fail(peer, type, "reading the MAC", r, io, timeout_ms);
        if (!reply_mac_ok(key, nonce, raw, NULL, 0, rep_mac)) {
            NIXL_WARN("md %s %s: the reply's MAC is wrong; refused", sock_op_peer(type), peer);
            return NIXL_ERR_NOT_AUTHENTICATED;
        }
    }
    if (!want_blob)
        return (nixl_status_t)rep.status;

    void *blob = malloc(rep.len);
    if (!blob) {
        NIXL_ERROR("md fetch from %s: no memory for a %u-byte blob", peer, (unsigned)rep.len);
        return NIXL_ERR_NO_MEMORY;
    }
    r = io_read_full(io, blob, rep.len, &got);
    if (r == IO_OK && mac)
        r = io_read_full(io, rep_mac, sizeof(rep_mac), &got);
    if (r != IO_OK) {
        nixl_status_t st;
        if (r == IO_EOF) {
            NIXL_WARN("md fetch from %s: truncated reply (%zu of %u bytes)", peer, got, (unsigned)rep.len);
            st = NIXL_ERR_BAD_METADATA;
        } else {
            st = client_io_fail(peer, type, "reading the blob", r, io, timeout_ms);
        }
        free(blob);
        return st;
    }
    if (mac) {
        if (!reply_mac_ok(key, nonce, raw, blob, rep.len, rep_mac)) {
            NIXL_WARN("md fetch from %s: the reply's MAC is wrong; the blob is refused", peer);
            free(blob);
            return NIXL_ERR_NOT_AUTHENTICATED;
        }
    }
    *blob_out = blob;
    *len_out = rep.len;
    return NIXL_OK;
}

/* One request, one reply; returns the peer's status or a local error. */
static nixl_status_t sock_transact(const nixl_md_key_t *key, const char *ip, uint16_t port, uint16_t type,
                                   const void *payload, size_t len, int timeout_ms, void **blob_out,
                                   size_t *len_out)
{
    struct sockaddr_storage ss;
    socklen_t slen;
    char peer[SOCK_PEER_STR_LEN];

    if (!ip) {
        NIXL_WARN("md %s: NULL ip", sock_type_name(type));
        return NIXL_ERR_NULL;
    }
    if (sock_parse_addr(ip, port, &ss, &slen) != 0) {
        NIXL_WARN("md %s: '%s' is not an IPv4 or IPv6 address", sock_type_name(type), ip);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (port == 0) {
        NIXL_WARN("md %s %s: port 0", sock_op_peer(type), ip);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (timeout_ms <= 0) {
        NIXL_WARN("md %s %s: timeout of %d ms (must be > 0)", sock_op_peer(type), ip, timeout_ms);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (len > NIXL_MD_SOCK_MAX_FRAME) {
        NIXL_WARN("md %s %s: %zu bytes exceed the frame limit of %u", sock_op_peer(type), ip, len,
                  (unsigned)NIXL_MD_SOCK_MAX_FRAME);
        return NIXL_ERR_TOO_BIG;
    }
    sock_addr_str(&ss, peer, sizeof(peer));

    sock_io_t io = {.fd = -1, .stop_fd = -1,
                    .deadline_ns = nixl_now_ns() + (uint64_t)timeout_ms * 1000000u};
    nixl_status_t st = client_connect(&ss, slen, peer, type, timeout_ms, &io);
    if (st != NIXL_OK)
        return st;

    frame_hdr_t req = {.magic = SOCK_MAGIC, .version = key ? SOCK_VERSION_MAC : SOCK_VERSION, .type = type,
                       .status = 0, .len = (uint32_t)len};
    uint8_t raw[SOCK_HDR_LEN], trailer[SOCK_REQ_TRAILER];
    hdr_encode(&req, raw);
    struct iovec iov[3] = {{raw, sizeof(raw)}, {(void *)payload, payload ? len : 0}, {trailer, 0}};
    if (key) {
        nixl_put_u64(trailer, nixl_realtime_ns());
        if (getrandom(trailer + 8, NIXL_MD_NONCE_LEN, 0) != NIXL_MD_NONCE_LEN) {
            NIXL_ERROR("md %s %s: no random bytes for a nonce: %s", sock_op_peer(type), peer, strerror(errno));
            close(io.fd);
            return NIXL_ERR_IO;
        }
        const struct iovec parts[] = {{(void *)sock_label_req, sizeof(sock_label_req)},
                                      {raw, SOCK_HDR_LEN},
                                      {trailer, 8 + NIXL_MD_NONCE_LEN},
                                      {(void *)payload, payload ? len : 0}};
        st = nixl_md_mac(key, parts, 4, trailer + 8 + NIXL_MD_NONCE_LEN);
        if (st != NIXL_OK) {
            close(io.fd);
            return st;
        }
        iov[2].iov_len = SOCK_REQ_TRAILER;
    }
    io_result_t r = io_write_all(&io, iov, 3);
    if (r != IO_OK)
        st = client_io_fail(peer, type, "sending the request", r, &io, timeout_ms);
    else
        st = client_read_reply(&io, peer, type, timeout_ms, key, trailer + 8, blob_out, len_out);
    close(io.fd);
    return st;
}

nixl_status_t nixl_md_sock_send_k(const nixl_md_key_t *key, const char *ip, uint16_t port, const void *blob,
                                  size_t len, int timeout_ms)
{
    if (!blob || len == 0) {
        NIXL_WARN("md send: %s blob", blob ? "empty" : "NULL");
        return blob ? NIXL_ERR_ZERO_LENGTH : NIXL_ERR_NULL;
    }
    return sock_transact(key, ip, port, SOCK_TYPE_SEND, blob, len, timeout_ms, NULL, NULL);
}

nixl_status_t nixl_md_sock_send(const char *ip, uint16_t port, const void *blob, size_t len, int timeout_ms)
{
    return nixl_md_sock_send_k(NULL, ip, port, blob, len, timeout_ms);
}

nixl_status_t nixl_md_sock_fetch(const char *ip, uint16_t port, int timeout_ms, void **blob_out, size_t *len_out)
{
    return nixl_md_sock_fetch_k(NULL, ip, port, timeout_ms, blob_out, len_out);
}

nixl_status_t nixl_md_sock_invalidate(const char *ip, uint16_t port, const char *name, int timeout_ms)
{
    return nixl_md_sock_invalidate_k(NULL, ip, port, name, timeout_ms);
}

nixl_status_t nixl_md_sock_fetch_k(const nixl_md_key_t *key, const char *ip, uint16_t port, int timeout_ms,
                                   void **blob_out, size_t *len_out)
{
    if (!blob_out || !len_out) {
        NIXL_WARN("md fetch: NULL output pointer");
        return NIXL_ERR_NULL;
    }
    void *blob = NULL;
    size_t len = 0;
    nixl_status_t st = sock_transact(key, ip, port, SOCK_TYPE_FETCH, NULL, 0, timeout_ms, &blob, &len);
    if (st == NIXL_OK) {
        *blob_out = blob;
        *len_out = len;
    }
    return st;
}

nixl_status_t nixl_md_sock_invalidate_k(const nixl_md_key_t *key, const char *ip, uint16_t port, const char *name,
                                        int timeout_ms)
{
    char why[128];

    if (!name) {
        NIXL_WARN("md invalidate: NULL name");
        return NIXL_ERR_NULL;
    }
    size_t len = strnlen(name, NIXL_NAME_MAX + 1);
    if (len == 0 || len > NIXL_NAME_MAX) {
        NIXL_WARN("md invalidate: name must be 1..%d bytes", NIXL_NAME_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (name_check((const uint8_t *)name, len, why, sizeof(why))) {
        NIXL_WARN("md invalidate: %s", why);
        return NIXL_ERR_INVALID_PARAM;
    }
    return sock_transact(key, ip, port, SOCK_TYPE_INVALIDATE, name, len, timeout_ms, NULL, NULL);
}
