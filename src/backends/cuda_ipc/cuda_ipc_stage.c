/*
 * cuda_ipc_stage.c - cuda_ipc.staged: moving VRAM through host memory when a
 * peer's VRAM cannot be mapped here (its GPU is not visible in this process,
 * no P2P between the GPUs, no IPC handle for its allocation, pidfd_getfd
 * refused, or NIXL_CUDA_IPC_MAP=0).
 *
 * It is a fallback and looks like one: the request's path is
 * "cuda_ipc.staged" with the fallback flag set, every post is counted with
 * its cause through host->fallback (which warns, rate-limited), and
 * NIXL_ALLOW_FALLBACK=0 refuses it at prepare.
 *
 * The target has to take part (only its process can touch its VRAM), so
 * every instance serves a SOCK_SEQPACKET socket named after its notification
 * socket plus ".stg".  An initiator connects once per peer, passes a memfd of
 * two staging slots with SCM_RIGHTS, and then sends one message per slot:
 * "copy these pieces between slot bytes and your VRAM" (a write: host to
 * device on the target; a read: device to host).  The server checks every
 * piece lies inside VRAM it registered with this backend and inside the
 * staging buffer, copies with the owning context bound, synchronizes and
 * answers with a status.  Replies come in order.  Two slots pipeline: the
 * initiator fills one while the target drains the other.
 *
 * The initiator side runs on the instance's staging thread (one request at
 * a time); the notification leaves after the last reply, so the target sees
 * it only once every byte is in its VRAM.  Who may connect: processes of our
 * uid (SO_PEERCRED), the rule of CMA and pidfd_getfd.
 *
 * Wire (little-endian), header of every message, 24 bytes:
 *   u32 magic "CSTG", u16 version, u16 type, u64 seq, u32 count, i32 status
 * HELLO (initiator -> target): count = 0, followed by u64 staging size, the
 *   memfd in SCM_RIGHTS.  REPLY: status of the message with that seq.
 * WRITE / READ: count pieces of {u64 vram addr, u64 len, u64 staging offset}.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "cuda_ipc_int.h"

#define STG_MAGIC 0x47545343u /* "CSTG" */
#define STG_VERSION 1
#define STG_HDR 24
#define STG_PIECE 24
enum { STG_HELLO = 1, STG_WRITE = 2, STG_READ = 3, STG_REPLY = 4 };

#define STG_SLOT_SIZE (8u << 20) /* two slots of 8 MiB per peer connection */
#define STG_MAX_PIECES 4096u     /* per message: 96 KiB, under the socket's send buffer */
#define STG_MSG_MAX (STG_HDR + STG_MAX_PIECES * STG_PIECE)
#define STG_MAX_CLIENTS 128
#define STG_REPLY_TIMEOUT_NS (10ull * 1000000000ull) /* no reply for that long: the target is stuck */

struct cip_stage_conn {
    int fd;
    uint8_t *map;
    size_t size;
    CUcontext pin_ctx; /* NULL: not pinned (pageable copies, slower) */
    uint64_t seq;
};

/* One client of the server. */
typedef struct stg_client {
    int fd;
    uint8_t *map;
    size_t size;
    CUcontext pin_ctx;
    int pin_tried;
} stg_client_t;

static void stg_hdr(uint8_t *p, uint16_t type, uint64_t seq, uint32_t count, int32_t status)
{
    nixl_put_u32(p, STG_MAGIC);
    nixl_put_u16(p + 4, STG_VERSION);
    nixl_put_u16(p + 6, type);
    nixl_put_u64(p + 8, seq);
    nixl_put_u32(p + 16, count);
    nixl_put_u32(p + 20, (uint32_t)status);
}

/* The stage socket's address: the notification socket's name + ".stg". */
static socklen_t stg_addr(struct sockaddr_un *a, const char *name, size_t len)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    memcpy(a->sun_path + 1, name, len);
    memcpy(a->sun_path + 1 + len, ".stg", 4);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len + 4);
}

/* ------------------------------------------------------------------------
 * Server (the target's side)
 * ------------------------------------------------------------------------ */

/* Unpin (in the context that pinned), unmap, close: either side's end. */
static void stg_buf_release(cip_be_t *be, int fd, uint8_t *map, size_t size, CUcontext pin_ctx)
{
    if (pin_ctx) {
        nixl_be_ctx_scope_t scope = {NULL, 0};
        if (nixl_be_ctx_enter(be->host->cuda, pin_ctx, &scope) == NIXL_OK) {
            be->cu->cuMemHostUnregister(map);
            nixl_be_ctx_leave(be->host->cuda, &scope);
        }
    }
    if (map)
        munmap(map, size);
    if (fd >= 0)
        close(fd);
}

static void stg_client_close(cip_be_t *be, stg_client_t *c)
{
    stg_buf_release(be, c->fd, c->map, c->size, c->pin_ctx);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static int stg_send_reply(int fd, uint64_t seq, nixl_status_t st)
{
    uint8_t b[STG_HDR];
    stg_hdr(b, STG_REPLY, seq, 0, st);
    return send(fd, b, sizeof(b), MSG_NOSIGNAL) == (ssize_t)sizeof(b) ? 0 : -1;
}

/* The registration holding [addr, +len), or NULL.  reg_rw held. */
static const cip_reg_t *stg_find_reg(cip_be_t *be, uint64_t addr, uint64_t len, const cip_reg_t *hint)
{
    if (hint && addr >= hint->addr && len <= hint->len && addr - hint->addr <= hint->len - len)
        return hint;
    for (const cip_reg_t *m = be->regs; m; m = m->next)
        if (addr >= m->addr && len <= m->len && addr - m->addr <= m->len - len)
            return m;
    return NULL;
}

/* Every piece inside the staging buffer and inside VRAM registered here,
 * checked before anything is copied (reg_rw held). */
static nixl_status_t stg_check(cip_be_t *be, const stg_client_t *c, const uint8_t *p, uint32_t count)
{
    const cip_reg_t *m = NULL;
    for (uint32_t i = 0; i < count; i++, p += STG_PIECE) {
        uint64_t addr = nixl_get_u64(p), len = nixl_get_u64(p + 8), off = nixl_get_u64(p + 16);
        if (len == 0 || off > c->size || len > c->size - off) {
            CIP_WARN(be, "cuda_ipc: staging request piece %u [+%llu, %llu bytes] lies outside the %zu-byte buffer", i,
                     (unsigned long long)off, (unsigned long long)len, c->size);
            return NIXL_ERR_INVALID_PARAM;
        }
        if (!(m = stg_find_reg(be, addr, len, m))) {
            CIP_WARN(be, "cuda_ipc: staging request piece %u [0x%llx, +%llu) is not VRAM registered here", i,
                     (unsigned long long)addr, (unsigned long long)len);
            return NIXL_ERR_NOT_REGISTERED;
        }
    }
    return NIXL_OK;
}

/* Copy every piece of one message; the staging buffer is c->map. */
static nixl_status_t stg_serve(cip_be_t *be, stg_client_t *c, int write, const uint8_t *p, uint32_t count)
{
    cip_ctx_t *used[CIP_MAX_CTX];
    int nused = 0;
    const cip_reg_t *m = NULL;
    cip_ctx_t *cx = NULL;
    pthread_rwlock_rdlock(&be->reg_rw);
    nixl_status_t st = stg_check(be, c, p, count);
    if (st == NIXL_OK && !cip_api(be))
        st = NIXL_ERR_NO_CUDA;
    const nixl_cuda_api_t *cu = be->cu;
    for (uint32_t i = 0; i < count && st == NIXL_OK; i++, p += STG_PIECE) {
        uint64_t addr = nixl_get_u64(p), len = nixl_get_u64(p + 8), off = nixl_get_u64(p + 16);
        const cip_reg_t *r = stg_find_reg(be, addr, len, m);
        if (!cx || r->ctx != (void *)cx->ctx) {
            /* Our own thread: any context may stay current. */
            if (cu->cuCtxSetCurrent((CUcontext)r->ctx) != CUDA_SUCCESS ||
                !(cx = cip_ctx_get(be, r->ctx, r->device))) {
                st = NIXL_ERR_BACKEND;
                break;
            }
            int seen = 0;
            for (int k = 0; k < nused; k++)
                seen |= used[k] == cx;
            if (!seen && nused < CIP_MAX_CTX)
                used[nused++] = cx;
            if (!c->pin_tried) {
                /* Pinned, the copies run at DMA speed; pageable still works. */
                c->pin_tried = 1;
                if (cu->cuMemHostRegister(c->map, c->size, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS)
                    c->pin_ctx = (CUcontext)r->ctx;
            }
        }
        m = r;
        CUresult rc = write ? cu->cuMemcpyHtoDAsync((CUdeviceptr)addr, c->map + off, len, cx->stream)
                            : cu->cuMemcpyDtoHAsync(c->map + off, (CUdeviceptr)addr, len, cx->stream);
        if (rc != CUDA_SUCCESS) {
            CIP_ERROR(be, "cuda_ipc: staged %s of %llu bytes on GPU %d: %s", write ? "host-to-device" : "device-to-host",
                      (unsigned long long)len, cx->device, cip_cu_err(be, rc));
            st = NIXL_ERR_XFER_FAILED;
        }
    }
    /* Whatever was issued ends before the reply (and before a dereg). */
    for (int k = 0; k < nused; k++) {
        CUresult rc = cu->cuCtxSetCurrent(used[k]->ctx);
        if (rc == CUDA_SUCCESS)
            rc = cu->cuStreamSynchronize(used[k]->stream);
        if (rc != CUDA_SUCCESS && st == NIXL_OK) {
            CIP_ERROR(be, "cuda_ipc: staged copies on GPU %d failed: %s", used[k]->device, cip_cu_err(be, rc));
            st = NIXL_ERR_XFER_FAILED;
        }
    }
    pthread_rwlock_unlock(&be->reg_rw);
    return st;
}

/* HELLO: take the staging memfd. */
static int stg_hello(cip_be_t *be, stg_client_t *c, const uint8_t *b, ssize_t n, struct msghdr *mh)
{
    int fd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len >= CMSG_LEN(sizeof(int)))
            memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    uint64_t size = n >= STG_HDR + 8 ? nixl_get_u64(b + STG_HDR) : 0;
    if (fd < 0 || n != STG_HDR + 8 || size == 0 || size > 2ull * STG_SLOT_SIZE || c->map) {
        if (fd >= 0)
            close(fd);
        CIP_WARN(be, "cuda_ipc: malformed staging hello, connection closed");
        return -1;
    }
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        CIP_WARN(be, "cuda_ipc: cannot map a peer's staging buffer: %s", strerror(errno));
        return -1;
    }
    c->map = map;
    c->size = size;
    return stg_send_reply(c->fd, nixl_get_u64(b + 8), NIXL_OK);
}

/* One message from client c; -1 closes it. */
static int stg_handle(cip_be_t *be, stg_client_t *c, uint8_t *buf)
{
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec io = {buf, STG_MSG_MAX};
    struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0)
        return -1; /* the initiator went away */
    if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || n < STG_HDR || nixl_get_u32(buf) != STG_MAGIC ||
        nixl_get_u16(buf + 4) != STG_VERSION) {
        CIP_WARN(be, "cuda_ipc: malformed staging message (%zd bytes), connection closed", n);
        return -1;
    }
    uint16_t type = nixl_get_u16(buf + 6);
    uint64_t seq = nixl_get_u64(buf + 8);
    uint32_t count = nixl_get_u32(buf + 16);
    if (type == STG_HELLO)
        return stg_hello(be, c, buf, n, &mh);
    if ((type != STG_WRITE && type != STG_READ) || !c->map || count == 0 || count > STG_MAX_PIECES ||
        (size_t)n != STG_HDR + (size_t)count * STG_PIECE) {
        CIP_WARN(be, "cuda_ipc: malformed staging request (type %u, %u pieces, %zd bytes), connection closed",
                 (unsigned)type, count, n);
        return -1;
    }
    return stg_send_reply(c->fd, seq, stg_serve(be, c, type == STG_WRITE, buf + STG_HDR, count));
}

static void stg_accept(cip_be_t *be, stg_client_t *cl, int *ncl)
{
    int fd = accept4(be->stage_lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    struct ucred cred;
    socklen_t cl_len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl_len) != 0 || (cred.uid != be->self_uid && cred.uid != 0)) {
        CIP_WARN(be, "cuda_ipc: staging connection from another user refused");
        close(fd);
        return;
    }
    if (*ncl == STG_MAX_CLIENTS) {
        CIP_WARN(be, "cuda_ipc: more than %d staging peers, connection refused", STG_MAX_CLIENTS);
        close(fd);
        return;
    }
    memset(&cl[*ncl], 0, sizeof(cl[*ncl]));
    cl[*ncl].fd = fd;
    (*ncl)++;
}

static void *stg_server_main(void *arg)
{
    cip_be_t *be = arg;
    stg_client_t *cl = calloc(STG_MAX_CLIENTS, sizeof(*cl));
    struct pollfd *pf = calloc(STG_MAX_CLIENTS + 2, sizeof(*pf));
    uint8_t *buf = malloc(STG_MSG_MAX);
    int ncl = 0;
    if (!cl || !pf || !buf) {
        CIP_ERROR(be, "cuda_ipc: the staging server is out of memory: staged transfers to this agent will fail");
        goto out;
    }
    for (;;) {
        pf[0] = (struct pollfd){.fd = be->stage_stop[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = be->stage_lfd, .events = POLLIN};
        for (int i = 0; i < ncl; i++)
            pf[2 + i] = (struct pollfd){.fd = cl[i].fd, .events = POLLIN};
        if (poll(pf, (nfds_t)(2 + ncl), -1) < 0) {
            if (errno == EINTR)
                continue;
            CIP_ERROR(be, "cuda_ipc: staging server: poll: %s", strerror(errno));
            break;
        }
        if (pf[0].revents)
            break;
        for (int i = ncl - 1; i >= 0; i--) {
            if (!pf[2 + i].revents)
                continue;
            if (stg_handle(be, &cl[i], buf) != 0) {
                stg_client_close(be, &cl[i]);
                cl[i] = cl[--ncl];
            }
        }
        if (pf[1].revents & POLLIN)
            stg_accept(be, cl, &ncl);
    }
out:
    for (int i = 0; i < ncl; i++)
        stg_client_close(be, &cl[i]);
    free(buf);
    free(pf);
    free(cl);
    return NULL;
}

nixl_status_t cip_stage_server_start(cip_be_t *be)
{
    struct sockaddr_un a;
    be->stage_lfd = -1;
    be->stage_stop[0] = be->stage_stop[1] = -1;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        CIP_ERROR(be, "cuda_ipc: cannot create the staging socket: %s", strerror(errno));
        return NIXL_ERR_IO;
    }
    socklen_t len = stg_addr(&a, be->notif.sock_name, strlen(be->notif.sock_name));
    if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 64) != 0) {
        CIP_ERROR(be, "cuda_ipc: cannot listen on @%s.stg: %s", be->notif.sock_name, strerror(errno));
        close(fd);
        return NIXL_ERR_IO;
    }
    if (pipe2(be->stage_stop, O_CLOEXEC) != 0) {
        CIP_ERROR(be, "cuda_ipc: pipe for the staging server: %s", strerror(errno));
        close(fd);
        return NIXL_ERR_IO;
    }
    be->stage_lfd = fd;
    if (pthread_create(&be->stage_thread, NULL, stg_server_main, be) != 0) {
        CIP_ERROR(be, "cuda_ipc: cannot start the staging server thread");
        cip_stage_server_stop(be);
        return NIXL_ERR_BACKEND;
    }
    be->stage_running = 1;
    return NIXL_OK;
}

void cip_stage_server_stop(cip_be_t *be)
{
    if (be->stage_running) {
        ssize_t k = write(be->stage_stop[1], "x", 1);
        (void)k;
        pthread_join(be->stage_thread, NULL);
        be->stage_running = 0;
    }
    if (be->stage_lfd >= 0)
        close(be->stage_lfd);
    for (int i = 0; i < 2; i++)
        if (be->stage_stop[i] >= 0)
            close(be->stage_stop[i]);
    be->stage_lfd = be->stage_stop[0] = be->stage_stop[1] = -1;
}

/* ------------------------------------------------------------------------
 * Client (the initiator's side, on the staging thread)
 * ------------------------------------------------------------------------ */

void cip_stage_conn_close(cip_be_t *be, cip_peer_t *peer)
{
    cip_stage_conn_t *c = peer->stage;
    if (!c)
        return;
    stg_buf_release(be, c->fd, c->map, c->size, c->pin_ctx);
    free(c);
    peer->stage = NULL;
}

/* Wait for the reply to seq: bounded, and the peer's death noticed. */
static nixl_status_t stg_wait_reply(cip_be_t *be, cip_req_t *r, uint64_t seq)
{
    cip_stage_conn_t *c = r->peer->stage;
    uint64_t deadline = nixl_now_ns() + STG_REPLY_TIMEOUT_NS;
    for (;;) {
        uint8_t b[STG_HDR];
        ssize_t n = recv(c->fd, b, sizeof(b), MSG_DONTWAIT);
        if (n == (ssize_t)sizeof(b)) {
            if (nixl_get_u32(b) != STG_MAGIC || nixl_get_u16(b + 6) != STG_REPLY ||
                nixl_get_u64(b + 8) != seq) {
                CIP_ERROR(be, "cuda_ipc: peer %s sent an unexpected staging reply", r->peer->name);
                return NIXL_ERR_XFER_FAILED;
            }
            int32_t st = (int32_t)nixl_get_u32(b + 20);
            if (st != NIXL_OK)
                CIP_ERROR(be, "cuda_ipc: peer %s could not do its part of a staged transfer: %s", r->peer->name,
                          nixl_strerror((nixl_status_t)st));
            return st == NIXL_OK ? NIXL_OK : NIXL_ERR_XFER_FAILED;
        }
        if (n >= 0 || (errno != EAGAIN && errno != EINTR)) {
            nixl_status_t st = cip_peer_alive(be, r->peer);
            CIP_ERROR(be, "cuda_ipc: staging connection to peer %s closed%s", r->peer->name,
                      st == NIXL_OK ? "" : ": the peer exited");
            return st == NIXL_OK ? NIXL_ERR_XFER_FAILED : st;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        poll(&p, 1, 100);
        if (p.revents)
            continue;
        nixl_status_t st = cip_peer_alive(be, r->peer);
        if (st != NIXL_OK)
            return st;
        if (nixl_now_ns() > deadline) {
            CIP_ERROR(be, "cuda_ipc: peer %s did not answer a staged copy for %llu s", r->peer->name,
                      STG_REPLY_TIMEOUT_NS / 1000000000ull);
            return NIXL_ERR_TIMEOUT;
        }
    }
}

static nixl_status_t stg_connect(cip_be_t *be, cip_peer_t *peer, CUcontext ctx)
{
    cip_stage_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NIXL_ERR_NO_MEMORY;
    c->fd = -1;
    c->size = 2ull * STG_SLOT_SIZE;
    nixl_status_t st = NIXL_ERR_IO;
    int mfd = memfd_create("nixl-cuda_ipc-stage", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, (off_t)c->size) != 0) {
        CIP_ERROR(be, "cuda_ipc: staging buffer for peer %s: %s", peer->name, strerror(errno));
        goto err;
    }
    c->map = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (c->map == MAP_FAILED) {
        c->map = NULL;
        CIP_ERROR(be, "cuda_ipc: mapping the staging buffer for peer %s: %s", peer->name, strerror(errno));
        goto err;
    }
    if (be->cu->cuMemHostRegister(c->map, c->size, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS)
        c->pin_ctx = ctx;
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    size_t nl = peer->notif.addr_len - offsetof(struct sockaddr_un, sun_path) - 1;
    socklen_t al = stg_addr(&a, peer->notif.addr.sun_path + 1, nl);
    /* A target that stops reading must not hold this thread forever. */
    struct timeval tv = {STG_REPLY_TIMEOUT_NS / 1000000000ull, 0};
    if (c->fd >= 0)
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, al) != 0) {
        CIP_ERROR(be, "cuda_ipc: cannot reach the staging socket of peer %s: %s", peer->name, strerror(errno));
        st = errno == ECONNREFUSED || errno == ENOENT ? NIXL_ERR_PEER_GONE : NIXL_ERR_IO;
        goto err;
    }
    uint8_t b[STG_HDR + 8];
    stg_hdr(b, STG_HELLO, 0, 0, 0);
    nixl_put_u64(b + STG_HDR, c->size);
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof(ctl));
    struct iovec io = {b, sizeof(b)};
    struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
    if (sendmsg(c->fd, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(b)) {
        CIP_ERROR(be, "cuda_ipc: staging hello to peer %s: %s", peer->name, strerror(errno));
        goto err;
    }
    close(mfd);
    mfd = -1;
    peer->stage = c;
    return NIXL_OK;
err:
    if (mfd >= 0)
        close(mfd);
    peer->stage = c;
    cip_stage_conn_close(be, peer);
    return st;
}

/* Where the walk over a request's pieces stands. */
typedef struct stg_cursor {
    size_t g, i;  /* group, piece */
    uint64_t off; /* bytes of that piece already placed */
} stg_cursor_t;

/* What one slot carries: its pieces, for the local copies. */
typedef struct stg_slot {
    cip_group_t *g;
    uint32_t n;
    uint64_t seq;
    uint64_t laddr[STG_MAX_PIECES], len[STG_MAX_PIECES], off[STG_MAX_PIECES];
} stg_slot_t;

/* Fill slot s (base offset in the buffer) with the next pieces, all of one
 * group (one context); the message goes into msg.  0 when nothing is left. */
static uint32_t stg_fill(cip_req_t *r, stg_cursor_t *cur, stg_slot_t *s, uint64_t base, uint8_t *msg)
{
    s->n = 0;
    while (cur->g < r->ngroups && cur->i >= r->groups[cur->g].nce) {
        cur->g++;
        cur->i = 0;
        cur->off = 0;
    }
    if (cur->g == r->ngroups)
        return 0;
    cip_group_t *g = &r->groups[cur->g];
    s->g = g;
    uint64_t used = 0;
    uint8_t *p = msg + STG_HDR;
    while (cur->i < g->nce && s->n < STG_MAX_PIECES && used < STG_SLOT_SIZE) {
        const cip_copy_t *c = &g->ce[cur->i]; /* staged: dst = remote, src = local */
        uint64_t left = c->len - cur->off, take = left < STG_SLOT_SIZE - used ? left : STG_SLOT_SIZE - used;
        s->laddr[s->n] = c->src + cur->off;
        s->len[s->n] = take;
        s->off[s->n] = base + used;
        nixl_put_u64(p, c->dst + cur->off);
        nixl_put_u64(p + 8, take);
        nixl_put_u64(p + 16, base + used);
        p += STG_PIECE;
        s->n++;
        used += take;
        cur->off += take;
        if (cur->off == c->len) {
            cur->i++;
            cur->off = 0;
        }
    }
    return s->n;
}

/* Local side of one slot: device to host (write) or host to device (read). */
static nixl_status_t stg_local_copy(cip_be_t *be, cip_req_t *r, stg_slot_t *s, int write)
{
    const nixl_cuda_api_t *cu = be->cu;
    cip_stage_conn_t *c = r->peer->stage;
    if (r->host_local) {
        /* Local DRAM: the slot is plain memory here. */
        for (uint32_t i = 0; i < s->n; i++) {
            if (write)
                memcpy(c->map + s->off[i], (const void *)(uintptr_t)s->laddr[i], s->len[i]);
            else
                memcpy((void *)(uintptr_t)s->laddr[i], c->map + s->off[i], s->len[i]);
        }
        return NIXL_OK;
    }
    CUstream stream = s->g->cx->stream;
    CUresult rc = cu->cuCtxSetCurrent((CUcontext)s->g->ctx);
    for (uint32_t i = 0; i < s->n && rc == CUDA_SUCCESS; i++)
        rc = write ? cu->cuMemcpyDtoHAsync(c->map + s->off[i], (CUdeviceptr)s->laddr[i], s->len[i], stream)
                   : cu->cuMemcpyHtoDAsync((CUdeviceptr)s->laddr[i], c->map + s->off[i], s->len[i], stream);
    CUresult rs = cu->cuStreamSynchronize(stream);
    if (rc == CUDA_SUCCESS)
        rc = rs;
    if (rc != CUDA_SUCCESS) {
        CIP_ERROR(be, "cuda_ipc: staged copy on GPU %d towards peer %s failed: %s", s->g->cx->device, r->peer->name,
                  cip_cu_err(be, rc));
        return NIXL_ERR_XFER_FAILED;
    }
    return NIXL_OK;
}

static nixl_status_t stg_send(cip_be_t *be, cip_req_t *r, stg_slot_t *s, int write, uint8_t *msg)
{
    cip_stage_conn_t *c = r->peer->stage;
    s->seq = ++c->seq;
    stg_hdr(msg, write ? STG_WRITE : STG_READ, s->seq, s->n, 0);
    size_t len = STG_HDR + (size_t)s->n * STG_PIECE;
    if (send(c->fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len) {
        nixl_status_t st = cip_peer_alive(be, r->peer);
        CIP_ERROR(be, "cuda_ipc: staging request to peer %s: %s", r->peer->name, strerror(errno));
        return st == NIXL_OK ? NIXL_ERR_XFER_FAILED : st;
    }
    return NIXL_OK;
}

/* Two slots in flight at most; replies come in order. */
static nixl_status_t stg_run_pipeline(cip_be_t *be, cip_req_t *r, stg_slot_t *slots, uint8_t *msg)
{
    int write = r->write;
    stg_cursor_t cur = {0, 0, 0};
    stg_slot_t *q[2];
    int nq = 0, next = 0, more = 1;
    nixl_status_t st = NIXL_OK;
    while (st == NIXL_OK && (more || nq)) {
        /* Start slots while one is free. */
        while (st == NIXL_OK && more && nq < 2) {
            if (atomic_load(&r->cancel))
                return NIXL_ERR_CANCELED;
            stg_slot_t *s = &slots[next];
            if (!stg_fill(r, &cur, s, (uint64_t)next * STG_SLOT_SIZE, msg)) {
                more = 0;
                break;
            }
            if (write)
                st = stg_local_copy(be, r, s, 1);
            if (st == NIXL_OK)
                st = stg_send(be, r, s, write, msg);
            if (st == NIXL_OK) {
                q[nq++] = s;
                next ^= 1;
            }
        }
        if (st != NIXL_OK || !nq)
            break;
        stg_slot_t *done = q[0];
        st = stg_wait_reply(be, r, done->seq);
        if (st == NIXL_OK && !write)
            st = stg_local_copy(be, r, done, 0);
        q[0] = q[1];
        nq--;
    }
    return st;
}

nixl_status_t cip_stage_run(cip_be_t *be, cip_req_t *r)
{
    nixl_status_t st = NIXL_OK;
    if (!r->peer->stage) {
        /* Our thread: the pinning below needs a context current. */
        be->cu->cuCtxSetCurrent((CUcontext)r->groups[0].ctx);
        st = stg_connect(be, r->peer, (CUcontext)r->groups[0].ctx);
        if (st == NIXL_OK)
            st = stg_wait_reply(be, r, 0);
        if (st != NIXL_OK) {
            cip_stage_conn_close(be, r->peer);
            return st;
        }
    }
    stg_slot_t *slots = malloc(2 * sizeof(*slots));
    uint8_t *msg = malloc(STG_MSG_MAX);
    if (!slots || !msg) {
        free(slots);
        free(msg);
        return NIXL_ERR_NO_MEMORY;
    }
    st = stg_run_pipeline(be, r, slots, msg);
    free(slots);
    free(msg);
    if (st != NIXL_OK) {
        /* Replies may still be owed: start afresh next time. */
        cip_stage_conn_close(be, r->peer);
        return st;
    }
    if (r->notif.has)
        st = samehost_notif_send_raw(&be->notif, &r->peer->notif, r->notif.buf, r->notif.len, &r->cancel);
    return st;
}
