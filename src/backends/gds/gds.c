/*
 * gds.c - the gds backend: GPU (and host) memory to and from files through
 * cuFile, NIXL's GDS / GDS_MT.
 *
 * Like posix, a storage request is a loopback request: local VRAM or DRAM
 * on one side, the agent's own FILE regions on the other (nixl/backend.h:
 * FILE addresses are keys, nixl_file_offset gives the offset, the region's
 * dev_id the fd).  WRITE moves memory to the file, READ the file to memory.
 *
 * libcufile.so.0 is loaded with dlopen at the first create (cufile_api.h:
 * the calls and types, declared here), and the driver session is opened
 * once per process and kept.  Each FILE region's fd gets one cuFile handle
 * (shared by every region of that fd); each VRAM region is registered with
 * cuFileBufRegister when GPUDirect Storage can be used (registration pins
 * it for DMA; without it cuFile goes through its own bounce buffers).
 *
 * A request is split into chunks (chunk_bytes) that the instance's threads
 * move with cuFileRead / cuFileWrite, each thread with the memory's
 * context bound (the context rule: cuFile's calls on VRAM need it); the
 * post returns at once and status polls.  Cancel stops what has not
 * started; release waits for what has.
 *
 * Which path, named in every request and never swapped silently:
 *   gds.direct  VRAM, every file of the request on a file system the
 *               nvidia-fs driver reports DMA support for, opened with
 *               O_DIRECT;
 *   gds.compat  VRAM otherwise: cuFile's compatibility mode (pread/pwrite
 *               to host memory, then a copy to the GPU).  A counted, warned
 *               fallback; NIXL_ALLOW_FALLBACK=0 refuses it at creation;
 *   gds.host    DRAM: cuFile reads and writes host memory itself (what
 *               posix does too; not a fallback).
 * "direct" says cuFile could use DMA for the request: cuFile may still
 * bounce single I/Os by its own rules (cufile.json: unaligned writes and
 * the like), which it does not report.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "cufile_api.h"
#include "gds.h"
#include "nixl/backend.h"

#define GDS_ERROR(be, ...) NIXL_BE_ERROR((be)->host, __VA_ARGS__)
#define GDS_INFO(be, ...) NIXL_BE_INFO((be)->host, __VA_ARGS__)

#define GDS_PATH_DIRECT "gds.direct"
#define GDS_PATH_COMPAT "gds.compat" /* a fallback: cuFile through host memory */
#define GDS_PATH_HOST "gds.host"
#define GDS_MAX_THREADS 64

/* ---- libcufile, once per process ---- */

static struct {
    pthread_once_t once;
    nixl_status_t st;
    char why[512];
    nixl_cufile_api_t api;
    nixl_cufile_props_t props;
    int have_props;
} g_cufile = {.once = PTHREAD_ONCE_INIT};
static char g_cufile_lib[256] = "libcufile.so.0";

static void cufile_load_once(void)
{
    void *h = dlopen(g_cufile_lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_cufile.why, sizeof(g_cufile.why), "%.250s cannot be loaded (%.200s)", g_cufile_lib, dlerror());
        g_cufile.st = NIXL_ERR_NOT_SUPPORTED;
        return;
    }
#define NIXL_CUFILE_RESOLVE_(f, sym, req, ret, args)                                                    \
    *(void **)&g_cufile.api.f = dlsym(h, sym);                                                           \
    if (!g_cufile.api.f && req) {                                                                        \
        snprintf(g_cufile.why, sizeof(g_cufile.why), "%.250s has no %s", g_cufile_lib, sym);                  \
        g_cufile.st = NIXL_ERR_NOT_SUPPORTED;                                                            \
        return;                                                                                          \
    }
    NIXL_CUFILE_FUNCTIONS(NIXL_CUFILE_RESOLVE_)
#undef NIXL_CUFILE_RESOLVE_
    nixl_cufile_error_t e = g_cufile.api.driver_open();
    if (e.err != NIXL_CUFILE_SUCCESS) {
        snprintf(g_cufile.why, sizeof(g_cufile.why), "cuFileDriverOpen failed: cuFile error %d, CUresult %d",
                 e.err, e.cu_err);
        g_cufile.st = NIXL_ERR_BACKEND;
        return;
    }
    /* Kept open for the life of the process: cuFile closes it at exit. */
    if (g_cufile.api.driver_get_properties) {
        e = g_cufile.api.driver_get_properties(&g_cufile.props);
        g_cufile.have_props = e.err == NIXL_CUFILE_SUCCESS;
    }
    g_cufile.st = NIXL_OK;
}

/* ---- the instance ---- */

typedef struct gds_file {
    int fd;
    unsigned refs;
    int direct; /* gds.direct possible for this file */
    nixl_cufile_handle_t fh;
} gds_file_t;

struct gds_req;

typedef struct gds_be {
    const nixl_host_services_t *host;
    const nixl_cufile_api_t *cf;
    int dma;          /* the nvidia-fs driver is there and not in POSIX mode */
    int buf_register; /* register VRAM regions when dma */
    uint64_t chunk;
    unsigned nthreads;
    pthread_t threads[GDS_MAX_THREADS];
    pthread_mutex_t lock; /* the queue, every request's counters, the files */
    pthread_cond_t work;  /* a request was queued, or stop */
    pthread_cond_t idle;  /* a chunk finished */
    int stop;
    struct gds_req *head, *tail; /* requests with chunks not yet started */
    gds_file_t *files;
    size_t nfiles, cap_files;
} gds_be_t;

/* reg() / rkey_load() output. */
typedef struct gds_region {
    nixl_mem_t mem;
    void *ctx;       /* VRAM: the memory's context */
    uint64_t base;   /* VRAM registered with cuFile: its start, else 0 */
    uint64_t len;
    int fd;           /* FILE */
    gds_file_t *file; /* FILE registered here (reg); NULL for the loopback's view of it (rkey_load) */
} gds_region_t;

typedef struct gds_op {
    gds_file_t *file;
    const gds_region_t *mem;
    uint64_t addr, off, len;
} gds_op_t;

typedef struct gds_req {
    nixl_be_req_t hdr;
    int write;
    gds_op_t *ops;
    size_t nops;
    size_t next;    /* first chunk not started */
    size_t running; /* started, not finished */
    size_t left;    /* not finished */
    int queued;
    nixl_status_t status;
    struct gds_req *qnext;
} gds_req_t;

static const nixl_param_info_t gds_params[] = {
    {"cufile_lib", "libcufile.so.0", "the cuFile library loaded at the first create (the first value in a process wins)"},
    {"threads", "4", "threads moving a request's chunks (1..64)"},
    {"chunk_bytes", "16777216", "a piece larger than this is split into chunks the threads move in parallel"},
    {"buf_register", "1", "1: register VRAM regions with cuFileBufRegister when GPUDirect Storage is usable"},
};
#define GDS_NUM_PARAMS (sizeof(gds_params) / sizeof(gds_params[0]))

static int gds_dummy_peer;

static void gds_cufile_error(gds_be_t *be, const char *what, nixl_cufile_error_t e)
{
    if (e.cu_err && be->host->cuda && be->host->cuda->strerror)
        GDS_ERROR(be, "gds: %s: cuFile error %d (%s)", what, e.err, be->host->cuda->strerror(e.cu_err));
    else
        GDS_ERROR(be, "gds: %s: cuFile error %d (CUfileOpError in cufile.h)", what, e.err);
}

/* One chunk, on a pool thread with the memory's context bound; NIXL_OK or
 * the failure (logged). */
static nixl_status_t gds_move(gds_be_t *be, int write, const gds_op_t *op)
{
    const gds_region_t *m = op->mem;
    for (uint64_t done = 0; done < op->len;) {
        size_t n = (size_t)(op->len - done);
        off_t at = (off_t)(op->off + done);
        ssize_t got;
        if (m->base) /* registered: cuFile wants the registered start and the offset in it */
            got = write ? be->cf->write(op->file->fh, (const void *)(uintptr_t)m->base, n, at,
                                        (off_t)(op->addr + done - m->base))
                        : be->cf->read(op->file->fh, (void *)(uintptr_t)m->base, n, at,
                                       (off_t)(op->addr + done - m->base));
        else
            got = write ? be->cf->write(op->file->fh, (const void *)(uintptr_t)(op->addr + done), n, at, 0)
                        : be->cf->read(op->file->fh, (void *)(uintptr_t)(op->addr + done), n, at, 0);
        if (got == -1 && errno == EINTR)
            continue;
        if (got < 0) {
            if (got == -1)
                GDS_ERROR(be, "gds: %s fd %d [%llu, +%zu): %s", write ? "WRITE to" : "READ of", op->file->fd,
                          (unsigned long long)at, n, strerror(errno));
            else
                GDS_ERROR(be, "gds: %s fd %d [%llu, +%zu): cuFile error %zd (CUfileOpError in cufile.h)",
                          write ? "WRITE to" : "READ of", op->file->fd, (unsigned long long)at, n, -got);
            return NIXL_ERR_XFER_FAILED;
        }
        if (got == 0) {
            if (write)
                GDS_ERROR(be, "gds: WRITE to fd %d [%llu, +%zu) wrote nothing", op->file->fd, (unsigned long long)at,
                          n);
            else
                GDS_ERROR(be, "gds: READ of fd %d [%llu, +%llu) reaches past the end of the file (%llu bytes read)",
                          op->file->fd, (unsigned long long)op->off, (unsigned long long)op->len,
                          (unsigned long long)done);
            return NIXL_ERR_XFER_FAILED;
        }
        done += (uint64_t)got;
    }
    return NIXL_OK;
}

static void queue_remove(gds_be_t *be, gds_req_t *r)
{
    gds_req_t **pp = &be->head;
    while (*pp && *pp != r)
        pp = &(*pp)->qnext;
    if (!*pp)
        return;
    *pp = r->qnext;
    if (be->tail == r) {
        be->tail = NULL;
        for (gds_req_t *q = be->head; q; q = q->qnext)
            be->tail = q;
    }
    r->qnext = NULL;
    r->queued = 0;
}

static void *gds_thread(void *arg)
{
    gds_be_t *be = arg;
    void *bound = NULL; /* the context this thread last bound (pool threads keep one current) */
    pthread_mutex_lock(&be->lock);
    for (;;) {
        while (!be->stop && !be->head)
            pthread_cond_wait(&be->work, &be->lock);
        if (be->stop)
            break;
        gds_req_t *r = be->head;
        gds_op_t *op = &r->ops[r->next++];
        r->running++;
        if (r->next == r->nops)
            queue_remove(be, r);
        int write = r->write;
        pthread_mutex_unlock(&be->lock);
        nixl_status_t st = NIXL_OK;
        if (op->mem->ctx && op->mem->ctx != bound) { /* VRAM regions exist only with the driver's helpers */
            void *prev = NULL;
            st = be->host->cuda->ctx_bind(op->mem->ctx, &prev);
            if (st == NIXL_OK)
                bound = op->mem->ctx;
            else
                GDS_ERROR(be, "gds: cannot bind the GPU memory's context on a gds thread: %s", nixl_strerror(st));
        }
        if (st == NIXL_OK)
            st = gds_move(be, write, op);
        pthread_mutex_lock(&be->lock);
        r->running--;
        r->left--;
        if (st != NIXL_OK && r->status == NIXL_OK) {
            r->status = st;
            r->next = r->nops; /* the rest of a failed request is not started */
            queue_remove(be, r);
            r->left = r->running;
        }
        pthread_cond_broadcast(&be->idle);
    }
    pthread_mutex_unlock(&be->lock);
    return NULL;
}

static nixl_status_t gds_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                                void **be_out)
{
    size_t need = offsetof(nixl_host_services_t, cuda) + sizeof(host->cuda);
    if (!host || host->abi_version < 1 || host->struct_size < need || !host->log || !be_out)
        return NIXL_ERR_INVALID_PARAM;
    gds_be_t tmp = {.host = host};
    gds_be_t *be = &tmp;
    uint64_t threads = 4, chunk = 16u << 20;
    int buf_register = 1;
    const char *v = nixl_param_find(params, num_params, "threads");
    if (v && *v && (nixl_param_parse_size(v, &threads) != 0 || threads == 0 || threads > GDS_MAX_THREADS)) {
        GDS_ERROR(be, "gds: threads=%s: want 1..%d", v, GDS_MAX_THREADS);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = nixl_param_find(params, num_params, "chunk_bytes");
    if (v && *v && (nixl_param_parse_size(v, &chunk) != 0 || chunk < 4096 || chunk > (1ull << 40))) {
        GDS_ERROR(be, "gds: chunk_bytes=%s: want 4096..2^40", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = nixl_param_find(params, num_params, "buf_register");
    if (v && *v && nixl_param_parse_bool(v, &buf_register) != 0) {
        GDS_ERROR(be, "gds: buf_register=%s is not a boolean", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = nixl_param_find(params, num_params, "cufile_lib");
    static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lib_lock);
    if (v && *v && strlen(v) < sizeof(g_cufile_lib))
        snprintf(g_cufile_lib, sizeof(g_cufile_lib), "%s", v);
    pthread_once(&g_cufile.once, cufile_load_once);
    pthread_mutex_unlock(&lib_lock);
    if (g_cufile.st != NIXL_OK) {
        GDS_ERROR(be, "gds: %s: GDS needs cuFile (libcufile from the CUDA toolkit; NIXL_GDS_CUFILE_LIB names another "
                      "file)",
                  g_cufile.why);
        return g_cufile.st;
    }
    be = calloc(1, sizeof(*be));
    if (!be)
        return NIXL_ERR_NO_MEMORY;
    *be = tmp;
    be->cf = &g_cufile.api;
    be->chunk = chunk;
    be->buf_register = buf_register;
    const nixl_cufile_props_t *p = &g_cufile.props;
    be->dma = g_cufile.have_props && p->nvfs.major_version != 0;
    if (be->dma)
        GDS_INFO(be, "gds: nvidia-fs %u.%u: GPUDirect Storage for files on file systems it supports (0x%x), "
                     "opened with O_DIRECT",
                 p->nvfs.major_version, p->nvfs.minor_version, p->nvfs.dstatusflags);
    else
        GDS_INFO(be, "gds: no nvidia-fs driver: VRAM requests take gds.compat, cuFile's "
                     "compatibility mode through host memory");
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        free(be);
        return NIXL_ERR_NO_MEMORY;
    }
    pthread_cond_init(&be->work, NULL);
    pthread_cond_init(&be->idle, NULL);
    for (; be->nthreads < threads; be->nthreads++)
        if (pthread_create(&be->threads[be->nthreads], NULL, gds_thread, be) != 0)
            break;
    if (be->nthreads == 0) {
        GDS_ERROR(be, "gds: no thread could be started");
        pthread_cond_destroy(&be->work);
        pthread_cond_destroy(&be->idle);
        pthread_mutex_destroy(&be->lock);
        free(be);
        return NIXL_ERR_NO_MEMORY;
    }
    *be_out = be;
    return NIXL_OK;
}

static void gds_destroy(void *bev)
{
    gds_be_t *be = bev;
    pthread_mutex_lock(&be->lock);
    be->stop = 1;
    pthread_cond_broadcast(&be->work);
    pthread_mutex_unlock(&be->lock);
    for (unsigned i = 0; i < be->nthreads; i++)
        pthread_join(be->threads[i], NULL);
    for (size_t i = 0; i < be->nfiles; i++) /* every region was deregistered: none left, normally */
        be->cf->handle_deregister(be->files[i].fh);
    free(be->files);
    pthread_cond_destroy(&be->work);
    pthread_cond_destroy(&be->idle);
    pthread_mutex_destroy(&be->lock);
    free(be);
}

/* ---- regions ---- */

/* Whether the nvidia-fs driver can DMA for a file on fd's file system. */
static int gds_fs_dma(const gds_be_t *be, int fd)
{
    struct statfs s;
    if (!be->dma || fstatfs(fd, &s) != 0)
        return 0;
    unsigned f = g_cufile.props.nvfs.dstatusflags;
    switch ((unsigned long)s.f_type) {
    case 0xEF53:     /* ext4 */
    case 0x58465342: /* xfs */
        return (f >> NIXL_CUFILE_FS_NVME & 1) || (f >> NIXL_CUFILE_FS_NVMEOF & 1) || (f >> NIXL_CUFILE_FS_SCSI & 1);
    case 0x6969:
        return f >> NIXL_CUFILE_FS_NFS & 1;
    case 0x0BD00BD0:
        return f >> NIXL_CUFILE_FS_LUSTRE & 1;
    case 0x47504653:
        return f >> NIXL_CUFILE_FS_GPFS & 1;
    case 0x19830326:
        return f >> NIXL_CUFILE_FS_BEEGFS & 1;
    default:
        return 0;
    }
}

/* The instance's entry of fd, NULL when no registration holds it (lock held). */
static gds_file_t *gds_file_find(gds_be_t *be, int fd)
{
    for (size_t i = 0; i < be->nfiles; i++)
        if (be->files[i].fd == fd)
            return &be->files[i];
    return NULL;
}

/* The instance's cuFile handle of fd, one more reference (lock held). */
static nixl_status_t gds_file_get(gds_be_t *be, int fd, gds_file_t **out)
{
    gds_file_t *have = gds_file_find(be, fd);
    if (have) {
        have->refs++;
        *out = have;
        return NIXL_OK;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) {
        GDS_ERROR(be, "gds: fd %d: %s", fd, strerror(errno));
        return NIXL_ERR_INVALID_PARAM;
    }
    gds_file_t *f = NULL;
    for (size_t i = 0; i < be->nfiles && !f; i++)
        if (be->files[i].fd == -1)
            f = &be->files[i]; /* a slot given back */
    if (!f && be->nfiles == be->cap_files) {
        /* Regions keep pointers into the table: it never moves, so it is
         * allocated once large enough (and refused beyond). */
        if (be->files) {
            GDS_ERROR(be, "gds: more than %zu files registered with one instance", be->cap_files);
            return NIXL_ERR_TOO_BIG;
        }
        be->cap_files = 4096;
        be->files = calloc(be->cap_files, sizeof(*be->files));
        if (!be->files) {
            be->cap_files = 0;
            return NIXL_ERR_NO_MEMORY;
        }
    }
    nixl_cufile_descr_t d;
    memset(&d, 0, sizeof(d));
    d.type = NIXL_CUFILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    nixl_cufile_handle_t fh = NULL;
    nixl_cufile_error_t e = be->cf->handle_register(&fh, &d);
    if (e.err != NIXL_CUFILE_SUCCESS) {
        char what[64];
        snprintf(what, sizeof(what), "cuFileHandleRegister(fd %d)", fd);
        gds_cufile_error(be, what, e);
        return NIXL_ERR_BACKEND;
    }
    if (!f)
        f = &be->files[be->nfiles++];
    *f = (gds_file_t){.fd = fd, .refs = 1, .direct = (fl & O_DIRECT) && gds_fs_dma(be, fd), .fh = fh};
    *out = f;
    return NIXL_OK;
}

static void gds_file_put(gds_be_t *be, gds_file_t *f)
{
    if (--f->refs)
        return;
    be->cf->handle_deregister(f->fh);
    size_t i = (size_t)(f - be->files);
    /* Regions point into the table: a slot given back is marked free
     * (and reused), never moved. */
    f->fd = -1;
    f->fh = NULL;
    if (i == be->nfiles - 1)
        while (be->nfiles && be->files[be->nfiles - 1].fd == -1)
            be->nfiles--;
}

static nixl_status_t gds_region_make(gds_be_t *be, const nixl_be_region_t *r, int local, void **out)
{
    gds_region_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NIXL_ERR_NO_MEMORY;
    g->mem = r->mem_type;
    g->len = r->len;
    nixl_status_t st = NIXL_OK;
    if (r->mem_type == NIXL_MEM_FILE) {
        g->fd = (int)r->dev_id;
        /* Only a registration holds a cuFile handle: the loopback's copy of
         * the region (rkey_load) may outlive the deregistration, and the fd
         * may then be closed and its number reused by another file. */
        if (local) {
            pthread_mutex_lock(&be->lock);
            st = gds_file_get(be, g->fd, &g->file);
            pthread_mutex_unlock(&be->lock);
        }
    } else if (r->mem_type == NIXL_MEM_VRAM) {
        g->ctx = r->cuda.ctx;
        if (be->dma && be->buf_register) {
            nixl_be_ctx_scope_t sc;
            st = nixl_be_ctx_enter(be->host->cuda, g->ctx, &sc);
            if (st == NIXL_OK) {
                nixl_cufile_error_t e = be->cf->buf_register((const void *)(uintptr_t)r->addr, (size_t)r->len, 0);
                nixl_be_ctx_leave(be->host->cuda, &sc);
                if (e.err == NIXL_CUFILE_SUCCESS)
                    g->base = r->addr;
                else
                    GDS_INFO(be, "gds: cuFileBufRegister of [0x%llx, +%llu) failed (cuFile error %d): cuFile "
                                 "moves it through its own GPU bounce buffers",
                             (unsigned long long)r->addr, (unsigned long long)r->len, e.err);
            }
        }
    } else if (r->mem_type != NIXL_MEM_DRAM) {
        st = NIXL_ERR_MEM_TYPE;
    }
    if (st != NIXL_OK) {
        free(g);
        return st;
    }
    *out = g;
    return NIXL_OK;
}

static nixl_status_t gds_reg(void *bev, const nixl_be_region_t *r, void **md_out)
{
    return gds_region_make(bev, r, 1, md_out);
}

static void gds_dereg(void *bev, void *md)
{
    gds_be_t *be = bev;
    gds_region_t *g = md;
    if (g->file) {
        pthread_mutex_lock(&be->lock);
        gds_file_put(be, g->file);
        pthread_mutex_unlock(&be->lock);
    } else if (g->base) {
        nixl_be_ctx_scope_t sc;
        if (nixl_be_ctx_enter(be->host->cuda, g->ctx, &sc) == NIXL_OK) {
            be->cf->buf_deregister((const void *)(uintptr_t)g->base);
            nixl_be_ctx_leave(be->host->cuda, &sc);
        }
    }
    free(g);
}

/* Only the agent itself: its files are its own. */
static nixl_status_t gds_peer_open(void *be, const nixl_be_peer_t *peer, const void *conn, size_t conn_len,
                                   void **peer_out)
{
    (void)be;
    (void)conn;
    (void)conn_len;
    if (!peer->same_process)
        return NIXL_ERR_NO_PATH;
    *peer_out = &gds_dummy_peer;
    return NIXL_OK;
}

static void gds_peer_unload(void *be, void *peer)
{
    (void)be;
    (void)peer;
}

static nixl_status_t gds_rkey_load(void *bev, void *peer, const nixl_be_region_t *region, const void *rkey,
                                   size_t rkey_len, void **rmd_out)
{
    (void)peer;
    (void)rkey;
    (void)rkey_len;
    return gds_region_make(bev, region, 0, rmd_out);
}

/* ---- requests ---- */

static nixl_status_t gds_prepare(void *bev, const nixl_be_xfer_t *x, nixl_be_req_t **req_out)
{
    gds_be_t *be = bev;
    if (!x || !req_out || !x->iov || x->count == 0)
        return NIXL_ERR_NULL;
    if (x->op != NIXL_OP_READ && x->op != NIXL_OP_WRITE)
        return NIXL_ERR_INVALID_PARAM;
    if ((x->local_mem != NIXL_MEM_DRAM && x->local_mem != NIXL_MEM_VRAM) || x->remote_mem != NIXL_MEM_FILE) {
        GDS_ERROR(be, "gds: moves local VRAM or DRAM to and from the agent's own FILE regions (got %d -> %d)",
                  (int)x->local_mem, (int)x->remote_mem);
        return NIXL_ERR_MEM_TYPE;
    }
    size_t nops = 0;
    for (size_t i = 0; i < x->count; i++) {
        uint64_t c = (x->iov[i].len + be->chunk - 1) / be->chunk;
        if (c > SIZE_MAX / sizeof(gds_op_t) - nops)
            return NIXL_ERR_TOO_BIG;
        nops += (size_t)c;
    }
    gds_req_t *r = calloc(1, sizeof(*r));
    if (r)
        r->ops = calloc(nops, sizeof(*r->ops));
    if (!r || !r->ops) {
        free(r);
        return NIXL_ERR_NO_MEMORY;
    }
    r->write = x->op == NIXL_OP_WRITE;
    int direct = x->local_mem == NIXL_MEM_VRAM;
    gds_file_t *file = NULL; /* the last piece's */
    pthread_mutex_lock(&be->lock);
    for (size_t i = 0; i < x->count; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        const gds_region_t *f = v->rmd, *m = v->lmd;
        if (f && f->mem == NIXL_MEM_FILE && (!file || file->fd != f->fd))
            file = gds_file_find(be, f->fd);
        if (!f || f->mem != NIXL_MEM_FILE || !file || !m || m->mem != x->local_mem) {
            pthread_mutex_unlock(&be->lock);
            if (f && f->mem == NIXL_MEM_FILE && !file)
                GDS_ERROR(be, "gds: piece %zu: fd %d is not registered with this instance", i, f->fd);
            else
                GDS_ERROR(be, "gds: piece %zu of a request has no %s region of this backend", i,
                          !f || f->mem != NIXL_MEM_FILE ? "FILE" : "local");
            free(r->ops);
            free(r);
            return NIXL_ERR_INVALID_PARAM;
        }
        direct = direct && file->direct;
        uint64_t off = nixl_file_offset(v->raddr);
        for (uint64_t at = 0; at < v->len; at += be->chunk)
            r->ops[r->nops++] = (gds_op_t){.file = file,
                                           .mem = m,
                                           .addr = v->laddr + at,
                                           .off = off + at,
                                           .len = v->len - at < be->chunk ? v->len - at : be->chunk};
    }
    pthread_mutex_unlock(&be->lock);
    if (x->local_mem == NIXL_MEM_DRAM) {
        r->hdr.path = GDS_PATH_HOST;
    } else if (direct) {
        r->hdr.path = GDS_PATH_DIRECT;
    } else {
        r->hdr.path = GDS_PATH_COMPAT;
        r->hdr.fallback = 1;
    }
    *req_out = &r->hdr;
    return NIXL_OK;
}

static nixl_status_t gds_post(void *bev, nixl_be_req_t *hdr, const void *notif, size_t notif_len)
{
    gds_be_t *be = bev;
    gds_req_t *r = (gds_req_t *)hdr;
    if (notif || notif_len) {
        GDS_ERROR(be, "gds: storage requests carry no notification");
        return NIXL_ERR_NOT_SUPPORTED;
    }
    if (r->hdr.fallback)
        be->host->fallback(be->host->ctx, GDS_PATH_COMPAT,
                           be->dma ? "a file not opened with O_DIRECT or on a file system nvidia-fs cannot DMA with: "
                                     "cuFile's compatibility mode, through host memory"
                                   : "no nvidia-fs driver: cuFile's compatibility mode, through host memory");
    pthread_mutex_lock(&be->lock);
    if (r->left) {
        pthread_mutex_unlock(&be->lock);
        return NIXL_ERR_IN_FLIGHT;
    }
    r->status = NIXL_OK;
    r->next = 0;
    r->left = r->nops;
    r->queued = 1;
    r->qnext = NULL;
    if (be->tail)
        be->tail->qnext = r;
    else
        be->head = r;
    be->tail = r;
    pthread_cond_broadcast(&be->work);
    pthread_mutex_unlock(&be->lock);
    return NIXL_IN_PROG;
}

static nixl_status_t gds_status(void *bev, nixl_be_req_t *hdr)
{
    gds_be_t *be = bev;
    gds_req_t *r = (gds_req_t *)hdr;
    pthread_mutex_lock(&be->lock);
    nixl_status_t st = r->left ? NIXL_IN_PROG : r->status;
    pthread_mutex_unlock(&be->lock);
    return st;
}

/* Nothing more of r starts; what runs finishes (lock held). */
static void gds_stop_locked(gds_be_t *be, gds_req_t *r, nixl_status_t why)
{
    if (!r->left)
        return;
    queue_remove(be, r);
    if (r->next < r->nops) {
        r->next = r->nops;
        r->left = r->running;
        if (r->status == NIXL_OK)
            r->status = why;
    }
}

static void gds_cancel(void *bev, nixl_be_req_t *hdr)
{
    gds_be_t *be = bev;
    pthread_mutex_lock(&be->lock);
    gds_stop_locked(be, (gds_req_t *)hdr, NIXL_ERR_CANCELED);
    pthread_mutex_unlock(&be->lock);
}

static void gds_release(void *bev, nixl_be_req_t *hdr)
{
    gds_be_t *be = bev;
    gds_req_t *r = (gds_req_t *)hdr;
    pthread_mutex_lock(&be->lock);
    gds_stop_locked(be, r, NIXL_ERR_CANCELED);
    while (r->left)
        pthread_cond_wait(&be->idle, &be->lock);
    pthread_mutex_unlock(&be->lock);
    free(r->ops);
    free(r);
}

static const nixl_backend_ops_t gds_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "gds",
    .description = "files through cuFile (GPUDirect Storage): local VRAM to and from the agent's own FILE regions "
                   "(gds.direct, or cuFile's compatibility mode gds.compat as a counted fallback), local DRAM "
                   "(gds.host); chunks moved by a thread pool",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_FILE),
    .caps = NIXL_CAP_LOCAL,
    .params = gds_params,
    .num_params = GDS_NUM_PARAMS,
    .create = gds_create,
    .destroy = gds_destroy,
    .reg = gds_reg,
    .dereg = gds_dereg,
    .peer_open = gds_peer_open,
    .peer_unload = gds_peer_unload,
    .rkey_load = gds_rkey_load,
    .rkey_unload = gds_dereg,
    .xfer_prepare = gds_prepare,
    .xfer_post = gds_post,
    .xfer_status = gds_status,
    .xfer_release = gds_release,
    .local_mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM) | NIXL_MEM_BIT(NIXL_MEM_VRAM),
    .xfer_cancel = gds_cancel,
};

const nixl_backend_ops_t *nixl_backend_gds_ops(void)
{
    return &gds_ops;
}
