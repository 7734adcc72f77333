/*
 * posix.c - the posix backend: KV blocks between memory and files.
 *
 * A storage request is a loopback request (the agent names itself as the
 * peer): local DRAM on one side, the agent's own FILE regions on the other
 * (nixl/backend.h: FILE addresses are keys, nixl_file_offset gives the
 * offset, the region's dev_id the fd).  WRITE moves memory to the file,
 * READ the file to memory.
 *
 * Pieces of one request that follow each other in one file (the file
 * offset of one is the end of the previous: KV pages laid out in order,
 * their memory anywhere) are one vectored operation of up to 1,024 pieces
 * and 1 GiB (readv/writev), so a request of many small pages costs a call
 * per run of pages, not per page.
 *
 * Two paths, never swapped silently:
 *   posix.uring  every operation is one io_uring read or write; a post submits
 *                as many as the ring holds, status reaps completions and
 *                submits the rest (short transfers are resubmitted for
 *                what is left), so many pieces and requests are in flight;
 *                a status call that reaps nothing yields the CPU once (the
 *                kernel's io-wq workers may need the core it spins on);
 *   posix.sync   io_uring is unavailable (the kernel or a seccomp filter
 *                refuses it, said once at create) or use_uring=0: the
 *                instance's threads (threads, 4) move the operations with
 *                pread/pwrite (preadv/pwritev), several at once; the post
 *                returns at once and status says when they are done.
 *
 * Both cancel: what of a canceled request has not started never does, and
 * once nothing of it is in the kernel's or a thread's hands its status is
 * NIXL_ERR_CANCELED (NIXL_OK when everything had already moved).
 *
 * Local GPU memory is a counted, warned fallback, posix.staged: each piece
 * goes through one pinned host buffer of the request (cuMemcpyDtoH then
 * pwrite, or pread then cuMemcpyHtoD) in the post; NIXL_ALLOW_FALLBACK=0
 * refuses it when the request is made (GPUDirect Storage is gds's).
 *
 * Files opened with O_DIRECT are honoured: a piece whose memory address,
 * file offset or length is not a multiple of the file's direct-I/O
 * alignment (statx, else 4096) is refused at prepare, naming the alignment.
 * A READ past the end of a file fails the request (NIXL_ERR_XFER_FAILED,
 * the log says which piece); nothing is notified (storage requests have
 * no notifications).  Release of a request in flight waits until the
 * kernel is done with its memory.
 *
 * What the registration learnt about a file (O_DIRECT, its alignments)
 * travels in the region's key to the agent's loopback view of itself, so
 * that view never asks the fd again: a registered fd closed by the
 * application fails the requests that touch it (EBADF at post), not every
 * storage request of the agent.  Files are never published to peers (the
 * core keeps FILE regions out of every blob).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef NIXL_POSIX_HAVE_URING
#include <liburing.h>
#endif

#include "../common/op_pool.h"
#include "nixl/backend.h"
#include "nixl/backend_util.h"
#include "posix.h"
#ifdef NIXL_HAVE_CUDA_H
#include "nixl/cuda_api.h"
#endif

#define PX_ERROR(be, ...) NIXL_BE_ERROR((be)->host, __VA_ARGS__)
#define PX_INFO(be, ...) NIXL_BE_INFO((be)->host, __VA_ARGS__)

#define PX_PATH_URING "posix.uring"
#define PX_PATH_SYNC "posix.sync"
#define PX_PATH_STAGED "posix.staged" /* a fallback: local VRAM through host memory */
#define PX_STAGE_BYTES (8u << 20)
#define PX_DIO_ALIGN_DEFAULT 4096u
#define PX_OP_IOV_MAX 1024u      /* pieces in one vectored operation (Linux's IOV_MAX) */
#define PX_OP_BYTES (1ull << 30) /* bytes in one operation (below the kernel's MAX_RW_COUNT) */

typedef struct px_be {
    const nixl_host_services_t *host;
    int uring;         /* the ring is up: posix.uring */
    unsigned depth;
    nixl_op_pool_t *pool; /* posix.sync's threads */
    pthread_mutex_t lock; /* the ring */
#ifdef NIXL_POSIX_HAVE_URING
    struct io_uring ring;
#endif
} px_be_t;

/* reg() / rkey_load() output: DRAM (nothing to keep) or a file region. */
typedef struct px_region {
    int file;
    int vram;
    int fd;
    int direct;         /* opened with O_DIRECT */
    uint32_t mem_align; /* O_DIRECT: memory and file alignment */
    uint32_t off_align;
} px_region_t;

struct px_req;

/* One operation: pieces [iov0, iov0 + niov0) of the request, consecutive in
 * one file from off; iov / niov: what is left of them once done bytes moved
 * (a window into the request's working copy of its iovecs). */
typedef struct px_op {
    struct px_req *r;
    int fd;
    uint64_t mem, off, len, done; /* mem: the first piece's address */
    size_t iov0, niov0;
    struct iovec *iov;
    size_t niov;
} px_op_t;

typedef struct px_req {
    nixl_be_req_t hdr;
    px_be_t *be;
    int write;
    px_op_t *ops;
    size_t nops;
    struct iovec *iov_all, *iov_work; /* every piece, as prepared; the copy a post works on */
    size_t npieces;
    size_t next;      /* next op never submitted */
    px_op_t **redo;   /* short transfers waiting to be submitted again */
    size_t nredo;
    size_t inflight;  /* submitted, not completed */
    size_t left;      /* ops not finished */
    nixl_status_t status;
    int canceled;         /* posix.uring: submit nothing more */
    nixl_op_job_t job;    /* posix.sync: the operations on the pool */
    unsigned char *stage; /* posix.staged: pinned, PX_STAGE_BYTES (cuMemAllocHost in the memory's context) */
} px_req_t;

static void px_req_free(px_req_t *r)
{
    if (!r)
        return;
    free(r->ops);
    free(r->redo);
    free(r->iov_all);
    free(r->iov_work);
    free(r);
}

static const nixl_param_info_t px_params[] = {
    {"use_uring", "1", "1: io_uring (posix.uring) when the kernel allows it; 0: pread/pwrite on threads (posix.sync)"},
    {"queue_depth", "256", "io_uring entries: pieces in flight at once for this instance"},
    {"threads", "4", "posix.sync: threads moving operations with pread/pwrite, several at once (1..64)"},
};
#define PX_NUM_PARAMS (sizeof(px_params) / sizeof(px_params[0]))

static int px_dummy_peer;

#ifdef NIXL_POSIX_HAVE_URING
/* The ring.  Completions that the kernel finishes in task context (O_DIRECT
 * I/O completed by the device's interrupt; buffered writes the io-wq workers
 * did, on Linux 6.18) are task work of the submitting thread: by default the
 * kernel interrupts that thread to run it (an IPI while it spins on status:
 * 8,654 of them in one 4 KiB page-cache WRITE run of nixlbench --storage,
 * 306 with these flags).  COOP_TASKRUN lets it wait for the thread's
 * next entry into the kernel, and TASKRUN_FLAG says in the ring that work
 * waits, so a status call that finds no completion enters the kernel to run
 * it (liburing's peek does, on IORING_SQ_TASKRUN): completions in batches,
 * no interrupt each.  Any thread may post and poll (docs/api.md), which
 * rules out SINGLE_ISSUER and DEFER_TASKRUN (submissions from a second
 * thread fail with EEXIST; deferred work runs only when the issuer waits).
 * A kernel older than 6.0 refuses the flags (EINVAL): the ring is made
 * without them, the same path. */
static int px_ring_init(px_be_t *be)
{
    unsigned flags = 0;
#if defined(IORING_SETUP_COOP_TASKRUN) && defined(IORING_SETUP_TASKRUN_FLAG)
    flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
#endif
    int rc = io_uring_queue_init(be->depth, &be->ring, flags);
    if (rc == -EINVAL && flags)
        rc = io_uring_queue_init(be->depth, &be->ring, 0);
    return rc;
}
#endif

/* ---- instance ---- */

static nixl_status_t px_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                               void **be_out)
{
    size_t need = offsetof(nixl_host_services_t, agent_name) + sizeof(host->agent_name);
    if (!host || host->abi_version < 1 || host->struct_size < need || !host->log || !be_out)
        return NIXL_ERR_INVALID_PARAM;
    px_be_t *be = calloc(1, sizeof(*be));
    if (!be)
        return NIXL_ERR_NO_MEMORY;
    be->host = host;
    int use_uring = 1;
    uint64_t depth = 256;
    const char *v = nixl_param_find(params, num_params, "use_uring");
    if (v && *v && nixl_param_parse_bool(v, &use_uring) != 0) {
        PX_ERROR(be, "posix: use_uring=%s is not a boolean", v);
        free(be);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = nixl_param_find(params, num_params, "queue_depth");
    if (v && *v && (nixl_param_parse_size(v, &depth) != 0 || depth == 0 || depth > 32768)) {
        PX_ERROR(be, "posix: queue_depth=%s: want 1..32768", v);
        free(be);
        return NIXL_ERR_INVALID_PARAM;
    }
    be->depth = (unsigned)depth;
    uint64_t threads = 4;
    v = nixl_param_find(params, num_params, "threads");
    if (v && *v && (nixl_param_parse_size(v, &threads) != 0 || threads == 0 || threads > 64)) {
        PX_ERROR(be, "posix: threads=%s: want 1..64", v);
        free(be);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        free(be);
        return NIXL_ERR_NO_MEMORY;
    }
#ifdef NIXL_POSIX_HAVE_URING
    if (use_uring) {
        int rc = px_ring_init(be);
        if (rc == 0)
            be->uring = 1;
        else
            PX_INFO(be, "posix: io_uring is unavailable here (%s): requests take posix.sync, pread/pwrite on %u "
                        "threads",
                    strerror(-rc), (unsigned)threads);
    }
#else
    if (use_uring)
        PX_INFO(be, "posix: built without liburing: requests take posix.sync, pread/pwrite on %u threads",
                (unsigned)threads);
#endif
    if (!be->uring) {
        nixl_status_t st = nixl_op_pool_create((unsigned)threads, &be->pool);
        if (st != NIXL_OK) {
            PX_ERROR(be, "posix: cannot start posix.sync's threads: %s", nixl_strerror(st));
            pthread_mutex_destroy(&be->lock);
            free(be);
            return st;
        }
    }
    *be_out = be;
    return NIXL_OK;
}

static void px_destroy(void *bev)
{
    px_be_t *be = bev;
#ifdef NIXL_POSIX_HAVE_URING
    if (be->uring)
        io_uring_queue_exit(&be->ring);
#endif
    nixl_op_pool_destroy(be->pool);
    pthread_mutex_destroy(&be->lock);
    free(be);
}

/* ---- regions ---- */

static nixl_status_t px_region_make(px_be_t *be, const nixl_be_region_t *r, void **out)
{
    px_region_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NIXL_ERR_NO_MEMORY;
    if (r->mem_type == NIXL_MEM_FILE) {
        g->file = 1;
        g->fd = (int)r->dev_id;
        int fl = fcntl(g->fd, F_GETFL);
        if (fl < 0) {
            PX_ERROR(be, "posix: fd %d: %s", g->fd, strerror(errno));
            free(g);
            return NIXL_ERR_INVALID_PARAM;
        }
        g->direct = (fl & O_DIRECT) != 0;
        g->mem_align = g->off_align = PX_DIO_ALIGN_DEFAULT;
#ifdef STATX_DIOALIGN
        struct statx sx;
        if (g->direct && statx(g->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
            sx.stx_dio_mem_align && sx.stx_dio_offset_align) {
            g->mem_align = sx.stx_dio_mem_align;
            g->off_align = sx.stx_dio_offset_align;
        }
#endif
    } else if (r->mem_type == NIXL_MEM_VRAM) {
        g->vram = 1;
    } else if (r->mem_type != NIXL_MEM_DRAM) {
        free(g);
        return NIXL_ERR_MEM_TYPE;
    }
    *out = g;
    return NIXL_OK;
}

static nixl_status_t px_reg(void *bev, const nixl_be_region_t *r, void **md_out)
{
    return px_region_make(bev, r, md_out);
}

/* A FILE region's key, read only by the agent itself (files are never
 * published to peers): what the registration found out about the fd, so
 * the loopback copy of the region (rkey_load, made again whenever the
 * registrations change) never asks the fd again.  A registered fd closed
 * since then fails only the requests that touch it (EBADF at post), not
 * every storage request of the agent.  "PXF1", flags (bit 0: O_DIRECT),
 * memory alignment, offset alignment: 16 bytes little-endian. */
#define PX_RKEY_MAGIC 0x31465850u
#define PX_RKEY_LEN 16u

static nixl_status_t px_rkey_pack(void *be, void *md, void *buf, size_t *len)
{
    (void)be;
    const px_region_t *g = md;
    if (!g || !g->file) {
        *len = 0;
        return NIXL_OK;
    }
    if (!buf || *len < PX_RKEY_LEN) {
        *len = PX_RKEY_LEN;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    nixl_put_u32(p, PX_RKEY_MAGIC);
    nixl_put_u32(p + 4, g->direct ? 1u : 0u);
    nixl_put_u32(p + 8, g->mem_align);
    nixl_put_u32(p + 12, g->off_align);
    *len = PX_RKEY_LEN;
    return NIXL_OK;
}

static void px_dereg(void *be, void *md)
{
    (void)be;
    free(md);
}

/* Only the agent itself: its files are its own. */
static nixl_status_t px_peer_open(void *be, const nixl_be_peer_t *peer, const void *conn, size_t conn_len,
                                  void **peer_out)
{
    (void)be;
    (void)conn;
    (void)conn_len;
    if (!peer->same_process)
        return NIXL_ERR_NO_PATH;
    *peer_out = &px_dummy_peer;
    return NIXL_OK;
}

static void px_peer_unload(void *be, void *peer)
{
    (void)be;
    (void)peer;
}

static nixl_status_t px_rkey_load(void *bev, void *peer, const nixl_be_region_t *region, const void *rkey,
                                  size_t rkey_len, void **rmd_out)
{
    px_be_t *be = bev;
    (void)peer;
    if (region->mem_type != NIXL_MEM_FILE || rkey_len == 0)
        return px_region_make(be, region, rmd_out);
    const uint8_t *p = rkey;
    uint32_t flags = rkey_len == PX_RKEY_LEN ? nixl_get_u32(p + 4) : 0, ma = 0, oa = 0;
    if (rkey_len == PX_RKEY_LEN) {
        ma = nixl_get_u32(p + 8);
        oa = nixl_get_u32(p + 12);
    }
    if (rkey_len != PX_RKEY_LEN || nixl_get_u32(p) != PX_RKEY_MAGIC || (flags & ~1u) || !ma || (ma & (ma - 1)) ||
        !oa || (oa & (oa - 1))) {
        PX_ERROR(be, "posix: the key of FILE region fd %u is malformed (%zu bytes)", region->dev_id, rkey_len);
        return NIXL_ERR_BAD_METADATA;
    }
    px_region_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NIXL_ERR_NO_MEMORY;
    *g = (px_region_t){.file = 1, .fd = (int)region->dev_id, .direct = (int)(flags & 1u), .mem_align = ma,
                       .off_align = oa};
    *rmd_out = g;
    return NIXL_OK;
}

/* ---- requests ---- */

static nixl_status_t px_prepare(void *bev, const nixl_be_xfer_t *x, nixl_be_req_t **req_out)
{
    px_be_t *be = bev;
    if (!x || !req_out || !x->iov || x->count == 0)
        return NIXL_ERR_NULL;
    if (x->op != NIXL_OP_READ && x->op != NIXL_OP_WRITE)
        return NIXL_ERR_INVALID_PARAM;
    if ((x->local_mem != NIXL_MEM_DRAM && x->local_mem != NIXL_MEM_VRAM) || x->remote_mem != NIXL_MEM_FILE) {
        PX_ERROR(be, "posix: moves local DRAM (or VRAM, staged) to and from the agent's own FILE regions (got %d -> "
                     "%d)",
                 (int)x->local_mem, (int)x->remote_mem);
        return NIXL_ERR_MEM_TYPE;
    }
    const void *cu = NULL;
    if (x->local_mem == NIXL_MEM_VRAM) {
#ifdef NIXL_HAVE_CUDA_H
        cu = be->host->cuda && be->host->cuda->api ? be->host->cuda->api() : NULL;
#endif
        if (!cu) {
            PX_ERROR(be, "posix: VRAM pieces need the CUDA driver (NIXL_CUDA_LIB)%s",
#ifdef NIXL_HAVE_CUDA_H
                     ""
#else
                     ": this libnixl was built without CUDA's headers"
#endif
            );
            return NIXL_ERR_NO_CUDA;
        }
    }
    px_req_t *r = calloc(1, sizeof(*r));
    if (r) {
        r->ops = calloc(x->count, sizeof(*r->ops));
        r->redo = calloc(x->count, sizeof(*r->redo));
        r->iov_all = calloc(x->count, sizeof(*r->iov_all));
        r->iov_work = calloc(x->count, sizeof(*r->iov_work));
    }
    if (!r || !r->ops || !r->redo || !r->iov_all || !r->iov_work) {
        px_req_free(r);
        return NIXL_ERR_NO_MEMORY;
    }
    r->be = be;
    r->write = x->op == NIXL_OP_WRITE;
    r->npieces = x->count;
    for (size_t i = 0; i < x->count; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        const px_region_t *f = v->rmd;
        if (!f || !f->file) {
            PX_ERROR(be, "posix: piece %zu of a request has no FILE region of this backend", i);
            goto bad;
        }
        uint64_t off = nixl_file_offset(v->raddr);
        if (f->direct && (v->laddr % f->mem_align || off % f->off_align || v->len % f->off_align)) {
            PX_ERROR(be, "posix: piece %zu: fd %d was opened with O_DIRECT, which needs memory addresses aligned to "
                         "%u bytes and file offsets and lengths to %u (got address 0x%llx, offset %llu, length %llu)",
                     i, f->fd, f->mem_align, f->off_align, (unsigned long long)v->laddr, (unsigned long long)off,
                     (unsigned long long)v->len);
            goto bad;
        }
        r->iov_all[i] = (struct iovec){(void *)(uintptr_t)v->laddr, (size_t)v->len};
        px_op_t *last = r->nops ? &r->ops[r->nops - 1] : NULL;
        /* Staged pieces go one by one through the staging buffer. */
        if (!cu && last && last->fd == f->fd && last->off + last->len == off && last->niov0 < PX_OP_IOV_MAX &&
            last->len + v->len <= PX_OP_BYTES) {
            last->len += v->len;
            last->niov0++;
        } else {
            r->ops[r->nops++] =
                (px_op_t){.r = r, .fd = f->fd, .mem = v->laddr, .off = off, .len = v->len, .iov0 = i, .niov0 = 1};
        }
    }
#ifdef NIXL_HAVE_CUDA_H
    if (cu) {
        /* The core made the local memory's context current (the context rule). */
        CUresult rc = ((const nixl_cuda_api_t *)cu)->cuMemAllocHost((void **)&r->stage, PX_STAGE_BYTES);
        if (rc != CUDA_SUCCESS) {
            PX_ERROR(be, "posix: a pinned staging buffer of %u bytes: %s", PX_STAGE_BYTES,
                     be->host->cuda->strerror((int)rc));
            px_req_free(r);
            return NIXL_ERR_NO_MEMORY;
        }
        r->hdr.path = PX_PATH_STAGED;
        r->hdr.fallback = 1;
        *req_out = &r->hdr;
        return NIXL_OK;
    }
#endif
    r->hdr.path = be->uring ? PX_PATH_URING : PX_PATH_SYNC;
    *req_out = &r->hdr;
    return NIXL_OK;
bad:
    px_req_free(r);
    return NIXL_ERR_INVALID_PARAM;
}

/* A post starts every operation from its first byte. */
static void px_req_rewind(px_req_t *r)
{
    memcpy(r->iov_work, r->iov_all, r->npieces * sizeof(*r->iov_work));
    for (size_t i = 0; i < r->nops; i++) {
        px_op_t *op = &r->ops[i];
        op->done = 0;
        op->iov = r->iov_work + op->iov0;
        op->niov = op->niov0;
    }
}

/* n more bytes of op moved: its window starts after them. */
static void px_op_moved(px_op_t *op, uint64_t n)
{
    op->done += n;
    while (n && op->niov) {
        if (n >= op->iov->iov_len) {
            n -= op->iov->iov_len;
            op->iov++;
            op->niov--;
        } else {
            op->iov->iov_base = (uint8_t *)op->iov->iov_base + n;
            op->iov->iov_len -= (size_t)n;
            n = 0;
        }
    }
}

/* One piece finished short of its end: 0 bytes on a READ is the file's end. */
static nixl_status_t px_eof(px_be_t *be, const px_op_t *op)
{
    PX_ERROR(be, "posix: READ of fd %d [%llu, +%llu) reaches past the end of the file (%llu bytes read)", op->fd,
             (unsigned long long)op->off, (unsigned long long)op->len, (unsigned long long)op->done);
    return NIXL_ERR_XFER_FAILED;
}

static nixl_status_t px_io_error(px_be_t *be, const px_req_t *r, const px_op_t *op, int err)
{
    PX_ERROR(be, "posix: %s fd %d [%llu, +%llu): %s%s", r->write ? "WRITE to" : "READ of", op->fd,
             (unsigned long long)op->off, (unsigned long long)op->len, strerror(err),
             err == EBADF ? " (closed while registered? deregister a file before closing it)" : "");
    return NIXL_ERR_XFER_FAILED;
}

/* posix.sync: operation i of request ctx, on a pool thread. */
static nixl_status_t px_run_op(void *ctx, size_t i)
{
    px_req_t *r = ctx;
    px_be_t *be = r->be;
    px_op_t *op = &r->ops[i];
    {
        while (op->done < op->len) {
            off_t at = (off_t)(op->off + op->done);
            ssize_t got;
            if (op->niov == 1)
                got = r->write ? pwrite(op->fd, op->iov->iov_base, op->iov->iov_len, at)
                               : pread(op->fd, op->iov->iov_base, op->iov->iov_len, at);
            else
                got = r->write ? pwritev(op->fd, op->iov, (int)op->niov, at) : preadv(op->fd, op->iov, (int)op->niov, at);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                return px_io_error(be, r, op, errno);
            if (got == 0)
                return r->write ? px_io_error(be, r, op, EIO) : px_eof(be, op);
            px_op_moved(op, (uint64_t)got);
        }
    }
    return NIXL_OK;
}

#ifdef NIXL_HAVE_CUDA_H
/* posix.staged: every piece through the pinned buffer, in the post (the
 * core made the memory's context current). */
static nixl_status_t px_run_staged(px_be_t *be, px_req_t *r)
{
    const nixl_cuda_api_t *cu = be->host->cuda->api();
    for (size_t i = 0; i < r->nops; i++) {
        px_op_t *op = &r->ops[i];
        for (uint64_t at = 0; at < op->len;) {
            size_t n = (size_t)(op->len - at < PX_STAGE_BYTES ? op->len - at : PX_STAGE_BYTES);
            CUresult rc = CUDA_SUCCESS;
            if (r->write)
                rc = cu->cuMemcpyDtoH(r->stage, (CUdeviceptr)(op->mem + at), n);
            for (size_t done = 0; rc == CUDA_SUCCESS && done < n;) {
                off_t where = (off_t)(op->off + at + done);
                ssize_t got = r->write ? pwrite(op->fd, r->stage + done, n - done, where)
                                       : pread(op->fd, r->stage + done, n - done, where);
                if (got < 0 && errno == EINTR)
                    continue;
                op->done = at + done;
                if (got < 0)
                    return px_io_error(be, r, op, errno);
                if (got == 0)
                    return r->write ? px_io_error(be, r, op, EIO) : px_eof(be, op);
                done += (size_t)got;
            }
            if (rc == CUDA_SUCCESS && !r->write)
                rc = cu->cuMemcpyHtoD((CUdeviceptr)(op->mem + at), r->stage, n);
            if (rc != CUDA_SUCCESS) {
                PX_ERROR(be, "posix: staging fd %d [%llu, +%zu) through host memory: %s", op->fd,
                         (unsigned long long)(op->off + at), n, be->host->cuda->strerror((int)rc));
                return NIXL_ERR_XFER_FAILED;
            }
            at += n;
        }
    }
    return NIXL_OK;
}
#endif

#ifdef NIXL_POSIX_HAVE_URING
/* Submit what r has waiting, as far as the ring has room (lock held). */
static void px_submit(px_be_t *be, px_req_t *r)
{
    int queued = 0;
    while (r->status == NIXL_OK && !r->canceled && (r->nredo || r->next < r->nops)) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&be->ring);
        if (!sqe)
            break;
        px_op_t *op = r->nredo ? r->redo[--r->nredo] : &r->ops[r->next++];
        if (op->niov == 1) {
            /* One piece may be larger than an operation moves: it goes on
             * where the last one stopped. */
            void *p = op->iov->iov_base;
            unsigned n = (unsigned)(op->iov->iov_len > PX_OP_BYTES ? PX_OP_BYTES : op->iov->iov_len);
            if (r->write)
                io_uring_prep_write(sqe, op->fd, p, n, op->off + op->done);
            else
                io_uring_prep_read(sqe, op->fd, p, n, op->off + op->done);
        } else if (r->write) {
            io_uring_prep_writev(sqe, op->fd, op->iov, (unsigned)op->niov, op->off + op->done);
        } else {
            io_uring_prep_readv(sqe, op->fd, op->iov, (unsigned)op->niov, op->off + op->done);
        }
        io_uring_sqe_set_data(sqe, op);
        r->inflight++;
        queued++;
    }
    if (queued) {
        int rc;
        do
            rc = io_uring_submit(&be->ring);
        while (rc == -EINTR);
        if (rc < 0 && r->status == NIXL_OK) {
            PX_ERROR(be, "posix: io_uring_submit: %s", strerror(-rc));
            r->status = NIXL_ERR_XFER_FAILED;
        }
    }
}

/* One completion, of whichever request it belongs to (lock held). */
static void px_complete(px_be_t *be, struct io_uring_cqe *cqe)
{
    px_op_t *op = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&be->ring, cqe);
    px_req_t *r = op->r;
    r->inflight--;
    if (res < 0 || (res == 0 && op->done < op->len)) {
        if (r->status == NIXL_OK)
            r->status = res < 0 ? px_io_error(be, r, op, -res) : r->write ? px_io_error(be, r, op, EIO) : px_eof(be, op);
        r->left--;
        return;
    }
    px_op_moved(op, (uint64_t)res);
    if (op->done < op->len)
        r->redo[r->nredo++] = op;
    else
        r->left--;
}

static unsigned px_reap(px_be_t *be)
{
    struct io_uring_cqe *cqe;
    unsigned n = 0;
    for (; io_uring_peek_cqe(&be->ring, &cqe) == 0; n++)
        px_complete(be, cqe);
    return n;
}

/* Reap what completed, submit what r has left, and say where r stands
 * (lock held): a failed request reports once nothing of it is in flight. */
static nixl_status_t px_advance(px_be_t *be, px_req_t *r, unsigned *reaped)
{
    *reaped = px_reap(be);
    px_submit(be, r);
    if (r->status != NIXL_OK)
        return r->inflight ? NIXL_IN_PROG : r->status;
    if (r->canceled && r->inflight == 0)
        return r->left ? NIXL_ERR_CANCELED : NIXL_OK;
    return r->left == 0 && r->inflight == 0 ? NIXL_OK : NIXL_IN_PROG;
}
#endif

static nixl_status_t px_post(void *bev, nixl_be_req_t *hdr, const void *notif, size_t notif_len)
{
    px_be_t *be = bev;
    px_req_t *r = (px_req_t *)hdr;
    if (notif || notif_len) {
        PX_ERROR(be, "posix: storage requests carry no notification");
        return NIXL_ERR_NOT_SUPPORTED;
    }
#ifdef NIXL_HAVE_CUDA_H
    if (r->stage) {
        be->host->fallback(be->host->ctx, PX_PATH_STAGED,
                           "VRAM to and from files through host memory: posix has no GPUDirect path (gds has)");
        return px_run_staged(be, r);
    }
#endif
    if (!be->uring) {
        px_req_rewind(r);
        r->job = (nixl_op_job_t){.nops = r->nops, .run = px_run_op, .ctx = r};
        nixl_op_pool_submit(be->pool, &r->job);
        return nixl_op_pool_status(be->pool, &r->job);
    }
#ifdef NIXL_POSIX_HAVE_URING
    pthread_mutex_lock(&be->lock);
    r->status = NIXL_OK;
    r->canceled = 0;
    r->next = r->nredo = 0;
    r->left = r->nops;
    px_req_rewind(r);
    px_submit(be, r);
    unsigned reaped;
    nixl_status_t st = px_advance(be, r, &reaped);
    pthread_mutex_unlock(&be->lock);
    return st;
#else
    return NIXL_ERR_BACKEND;
#endif
}

static nixl_status_t px_status(void *bev, nixl_be_req_t *hdr)
{
    px_be_t *be = bev;
    px_req_t *r = (px_req_t *)hdr;
    if (r->stage)
        return NIXL_OK; /* staged requests are over when their post returns */
    if (!be->uring)
        return nixl_op_pool_status(be->pool, &r->job);
#ifdef NIXL_POSIX_HAVE_URING
    pthread_mutex_lock(&be->lock);
    unsigned reaped;
    nixl_status_t st = px_advance(be, r, &reaped);
    pthread_mutex_unlock(&be->lock);
    /* Nothing came back: give the CPU away once.  Buffered writes run on
     * the kernel's io-wq worker threads; an application spinning on status
     * on a small machine otherwise holds the core such a worker would run on
     * (4 KiB page-cache WRITEs on 2 cores: 1.35x with the yield, measured,
     * README).  With nothing else runnable it returns at once. */
    if (st == NIXL_IN_PROG && reaped == 0)
        sched_yield();
    return st;
#else
    return NIXL_ERR_BACKEND;
#endif
}

static void px_release(void *bev, nixl_be_req_t *hdr)
{
    px_be_t *be = bev;
    px_req_t *r = (px_req_t *)hdr;
#ifdef NIXL_HAVE_CUDA_H
    if (r->stage)
        ((const nixl_cuda_api_t *)be->host->cuda->api())->cuMemFreeHost(r->stage); /* context bound by the core */
#endif
    if (!be->uring && !r->stage && r->job.run)
        nixl_op_pool_wait(be->pool, &r->job);
#ifdef NIXL_POSIX_HAVE_URING
    if (be->uring && !r->stage) {
        pthread_mutex_lock(&be->lock);
        r->next = r->nops; /* nothing more of it is submitted */
        r->nredo = 0;
        while (r->inflight) {
            struct io_uring_cqe *cqe;
            int rc = io_uring_wait_cqe(&be->ring, &cqe);
            if (rc == -EINTR)
                continue;
            if (rc < 0)
                break; /* the ring is broken: nothing will complete */
            px_complete(be, cqe);
            r->nredo = 0;
        }
        pthread_mutex_unlock(&be->lock);
    }
#else
    (void)be;
#endif
    px_req_free(r);
}

/* Start canceling (must not block): nothing more of r is started; its
 * status says CANCELED once nothing of it is in flight. */
static void px_cancel(void *bev, nixl_be_req_t *hdr)
{
    px_be_t *be = bev;
    px_req_t *r = (px_req_t *)hdr;
    if (r->stage)
        return; /* over when its post returned */
    if (!be->uring) {
        if (r->job.run)
            nixl_op_pool_cancel(be->pool, &r->job);
        return;
    }
    pthread_mutex_lock(&be->lock);
    r->canceled = 1;
    r->nredo = 0;
    pthread_mutex_unlock(&be->lock);
}

static const nixl_backend_ops_t px_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "posix",
    .description = "files: local DRAM to and from the agent's own FILE regions with io_uring (posix.uring) or, "
                   "where io_uring is unavailable, pread/pwrite on threads (posix.sync); local VRAM through "
                   "host memory as a counted fallback (posix.staged)",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_FILE),
    .caps = NIXL_CAP_LOCAL,
    .params = px_params,
    .num_params = PX_NUM_PARAMS,
    .create = px_create,
    .destroy = px_destroy,
    .reg = px_reg,
    .dereg = px_dereg,
    .peer_open = px_peer_open,
    .peer_unload = px_peer_unload,
    .rkey_pack = px_rkey_pack,
    .rkey_load = px_rkey_load,
    .rkey_unload = px_dereg,
    .xfer_prepare = px_prepare,
    .xfer_post = px_post,
    .xfer_status = px_status,
    .xfer_release = px_release,
    .xfer_cancel = px_cancel,
#ifdef NIXL_HAVE_CUDA_H
    .local_mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM) | NIXL_MEM_BIT(NIXL_MEM_VRAM),
#else
    .local_mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM),
#endif
};

const nixl_backend_ops_t *nixl_backend_posix_ops(void)
{
    return &px_ops;
}
