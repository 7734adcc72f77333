/*
 * cuda_ipc_int.h - what the files of the cuda_ipc backend share: the
 * instance, the per-context copy state, peers, registrations (exports),
 * remote keys and their imports, requests.  Nothing here is seen by the core.
 *
 * Files: cuda_ipc.c (ops table, instance, identity, peers, notifications,
 * per-context streams and the kernel module), cuda_ipc_mem.c (exporting our
 * VRAM, remote keys, importing a peer's VRAM once per context),
 * cuda_ipc_xfer.c (requests: copy engines, the gather/scatter kernel,
 * events, notification after completion).  Process identity and the
 * notification socket are shared with shm: ../common/samehost.h.
 */
#ifndef NIXL_BACKENDS_CUDA_IPC_INT_H
#define NIXL_BACKENDS_CUDA_IPC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../common/samehost.h"
#include "nixl/backend.h"
#include "nixl/cuda_api.h"

#define CIP_ERROR(be, ...) NIXL_BE_ERROR((be)->host, __VA_ARGS__)
#define CIP_WARN(be, ...) NIXL_BE_WARN((be)->host, __VA_ARGS__)
#define CIP_INFO(be, ...) NIXL_BE_INFO((be)->host, __VA_ARGS__)
#define CIP_DEBUG(be, ...) NIXL_BE_DEBUG((be)->host, __VA_ARGS__)

#define CIP_PATH_CE "cuda_ipc.ce"
#define CIP_PATH_KERNEL "cuda_ipc.kernel"
#define CIP_PATH_INDEXED "cuda_ipc.kernel.indexed" /* the kernel computing an indexed request's addresses */
#define CIP_PATH_STAGED "cuda_ipc.staged" /* a fallback: cuda_ipc_stage.c */

#define CIP_MAX_CTX 32  /* CUDA contexts one instance copies with */
#define CIP_MAX_DEV 64  /* GPUs whose primary context we retain (host memory copies) */
#define CIP_MAX_SEGS 64 /* VMM mappings one registration may span */

/* Kernel pieces are cut at this size: one warp moves one piece, so a
 * middle-sized descriptor still spreads over many warps. */
#define CIP_KERNEL_PIECE_MAX 8192u

/* One entry of the kernel's descriptor table (must match cuda_ipc_kernel.cu). */
typedef struct cip_piece {
    uint64_t src;
    uint64_t dst;
    uint64_t len;
} cip_piece_t;

/* The fatbin built from cuda_ipc_kernel.cu (empty without nvcc). */
extern const unsigned char nixl_cuda_ipc_fatbin[];
extern const size_t nixl_cuda_ipc_fatbin_len;

/* How a registration is reached by other processes. */
enum {
    CIP_KIND_NONE = 0,   /* no IPC handle could be made: same-process peers only */
    CIP_KIND_LEGACY = 1, /* cuIpcGetMemHandle of the allocation */
    CIP_KIND_VMM = 2,    /* cuMemExportToShareableHandle per mapping, fds fetched with pidfd_getfd */
};

/* A kernel table: the pieces written by prepare into pinned host memory,
 * uploaded to its device twin on the context's stream without waiting
 * (the kernel launched later on that stream reads it after the upload).
 * Released requests give their tables back to their context's pool. */
typedef struct cip_table {
    struct cip_table *next;
    cip_piece_t *host; /* pinned (cuMemAllocHost) */
    CUdeviceptr dev;
    size_t cap;        /* pieces */
} cip_table_t;

/* Free tables kept per context, at most this many bytes (host and device each). */
#define CIP_TABLE_POOL_BYTES (32u << 20)
#define CIP_TABLE_MIN 1024u /* pieces: the smallest table made */

/* Copy state of one CUDA context: where a request's copies are issued. */
typedef struct cip_ctx {
    CUcontext ctx;
    int device;          /* ordinal in this process */
    char bus_id[16];
    CUstream stream;     /* non-blocking: never serialized with the app's default stream */
    CUmodule module;     /* NULL: no kernel (none built, loading failed, or disabled) */
    CUfunction copy_fn;
    CUfunction indexed_fn; /* indexed requests' kernel; NULL: they are made in pieces */
    cip_table_t *free_tables; /* under be->lock */
    size_t free_bytes;
} cip_ctx_t;

struct cip_req;
struct cip_be;

/* A thread with a queue of requests, started on first use: the completion
 * thread (waits for events, then sends the notification) and the staging
 * thread (runs staged requests) are two of these. */
typedef struct cip_worker {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct cip_req *head, *tail;
    pthread_t thread;
    int started, stop;
    const char *name;
    nixl_status_t (*run)(struct cip_be *be, struct cip_req *r);
    struct cip_be *be;
} cip_worker_t;

typedef struct cip_reg cip_reg_t;

typedef struct cip_be {
    const nixl_host_services_t *host;
    const nixl_cuda_api_t *cu; /* loaded on first VRAM use */
    uint32_t self_uid; /* staging connections from other users are refused */
    int ptrace_scope;
    int can_ptrace_any;
    samehost_notif_t notif;
    /* tunables (NIXL_CUDA_IPC_*) */
    int use_kernel;
    uint64_t ce_min;       /* pieces of at least this many bytes go to the copy engines */
    uint64_t kernel_min;   /* fewer small pieces than this: copy engines */
    int map_peers;         /* NIXL_CUDA_IPC_MAP: 0 stages every cross-process request */
    /* reg/dereg may come from several threads; ctx table too */
    pthread_mutex_t lock;
    cip_ctx_t ctxs[CIP_MAX_CTX];
    int nctx;
    uint64_t export_seq;
    int kernel_warned;
    /* Primary contexts retained to copy host memory to and from a peer's
     * GPU (local DRAM), released at destroy; under lock. */
    CUcontext prim[CIP_MAX_DEV];
    /* Our VRAM registrations, for the staging server's checks (reg_rw). */
    pthread_rwlock_t reg_rw;
    cip_reg_t *regs;
    /* The completion thread: requests with a notification are watched
     * there, so the notification leaves as soon as the GPU is done, even
     * when the application does not poll (cuda_ipc_xfer.c). */
    cip_worker_t waiter;
    /* The staging thread: staged requests, one at a time. */
    cip_worker_t stager;
    /* The staging server (cuda_ipc_stage.c). */
    int stage_lfd;
    int stage_stop[2];
    pthread_t stage_thread;
    int stage_running;
} cip_be_t;

typedef struct cip_stage_conn cip_stage_conn_t;

typedef struct cip_peer {
    char name[SAMEHOST_NAME_MAX + 1];
    uint32_t pid;         /* the core's record: who the peer is */
    uint64_t start_time;  /* with pid: which process owns memory imported from it */
    int same_process; /* an agent of this process: its pointers are ours */
    samehost_proc_t proc;
    samehost_notif_peer_t notif;
    cip_stage_conn_t *stage; /* staging connection, made by the staging thread on first use */
} cip_peer_t;

/* One VMM mapping of a registration. */
typedef struct cip_seg {
    uint64_t base, size;
    int fd;                        /* exported; peers fetch it with pidfd_getfd */
    CUmemGenericAllocationHandle h; /* retained until dereg */
} cip_seg_t;

/* reg() output: an export of our VRAM. */
struct cip_reg {
    cip_reg_t *next, *prev; /* be->regs */
    uint64_t addr, len;
    int host;        /* local DRAM (local_mem_types): nothing exported, never published */
    void *ctx;       /* the owning context the core recorded */
    int device;
    char bus_id[16];
    int kind;
    uint64_t export_id;
    CUipcMemHandle handle; /* legacy */
    uint64_t alloc_base, alloc_size;
    size_t nseg;
    cip_seg_t *seg; /* VMM */
};

/* A peer's allocation mapped into one of our contexts (process-wide cache,
 * refcounted by remote keys). */
typedef struct cip_import cip_import_t;

/* rkey_load() output. */
typedef struct cip_rmd {
    cip_peer_t *peer;
    uint64_t addr, len;
    int kind;
    uint32_t owner_device;
    char bus_id[16];
    uint64_t export_id;
    CUipcMemHandle handle;
    uint64_t alloc_base, alloc_size; /* legacy: allocation; VMM: span of the mappings */
    size_t nseg;
    cip_seg_t *seg; /* VMM: base, size, fd number in the owner */
    /* imports made for this key, one per context it was used from */
    cip_import_t *imp[CIP_MAX_CTX];
    int nimp;
    /* Local DRAM requests copy in the primary context of the owner's GPU
     * (or of GPU 0 when it is not visible here): found once. */
    void *host_ctx;
    int host_dev;
} cip_rmd_t;

/* Where a remote key is reached from one of our contexts. */
typedef struct cip_view {
    uint64_t base;    /* our address of the key's alloc_base */
    int kernel_ok;    /* a kernel in this context may touch it */
} cip_view_t;

/* A copy-engine piece.  Staged requests keep dst = the remote address and
 * src = the local one whatever the direction. */
typedef struct cip_copy {
    uint64_t dst, src, len;
} cip_copy_t;

/* The pieces of a request whose local memory belongs to one context: they
 * are copied on that context's stream. */
typedef struct cip_group {
    cip_ctx_t *cx;
    void *ctx;             /* the local regions' context (cx is made from it) */
    int device;
    cip_copy_t *ce;        /* copy-engine pieces */
    size_t nce, ce_cap;
    int ce_uva;            /* pieces reach another context of this process: cuMemcpyAsync */
    cip_table_t *tab;      /* kernel pieces: tab->host[0..nk), uploaded to tab->dev once */
    size_t nk;             /* kernel pieces (an indexed request's: layers x slots) */
    size_t tab_bytes;      /* bytes of tab to upload: nk pieces, or an indexed request's arrays */
    /* An indexed request: the kernel reads the layers' bases and the slots
     * from tab (cuda_ipc_kernel.cu, nixl_cuda_ipc_copy_indexed). */
    struct {
        int on;
        CUdeviceptr bases, sslots, dslots;
        unsigned long long nslots, item, sstride, dstride;
    } ix;
    unsigned blocks;
    CUevent done;
    int pending;           /* recorded and not yet seen complete */
} cip_group_t;

typedef struct cip_req {
    nixl_be_req_t hdr; /* first: the core sees only this */
    cip_be_t *be;
    cip_peer_t *peer;
    size_t ngroups;
    cip_group_t groups[CIP_MAX_CTX];
    int in_flight;
    int staged; /* runs on the staging thread (cuda_ipc_stage.c) */
    int host_local; /* the local side is DRAM */
    int write;
    char cause[192]; /* staged: why the peer's memory could not be mapped */
    nixl_status_t status;
    /* handed to the completion thread (under be->wlock) */
    struct cip_req *wnext;
    cip_worker_t *worker; /* the one holding it while watched */
    int watched, queued, busy;
    _Atomic int wstatus; /* what the thread concluded; NIXL_IN_PROG until then */
    _Atomic int cancel;
    samehost_notif_msg_t notif; /* the notification datagram of the current post */
} cip_req_t;

/* cuda_ipc.c */
/* The driver table, loaded on first use; NULL (logged) without a driver. */
const nixl_cuda_api_t *cip_api(cip_be_t *be);
/* The copy state of ctx (the context that owns a local region), made on
 * first use; ctx must be current.  NULL (logged) on failure. */
cip_ctx_t *cip_ctx_get(cip_be_t *be, void *ctx, int device);
nixl_status_t cip_peer_alive(cip_be_t *be, cip_peer_t *peer);
/* The context that copies between local DRAM and rmd's GPU: the primary
 * context of that GPU here, or of GPU 0 when it is not visible (the import
 * then needs P2P).  NULL (logged) when there is none. */
void *cip_host_ctx(cip_be_t *be, cip_rmd_t *rmd, int *device);
/* Ordinal in this process of the GPU with this PCI bus id, or -1. */
int cip_device_of_bus(cip_be_t *be, const char *bus_id);
/* "CUDA_ERROR_X (n): text" */
const char *cip_cu_err(cip_be_t *be, CUresult rc);
/* A table of at least n pieces from cx's pool, or a new one (cx's context
 * current); NULL (logged) when memory is short.  Put gives it back, or
 * frees it beyond the pool's bound; the GPU must be done with it. */
cip_table_t *cip_table_get(cip_be_t *be, cip_ctx_t *cx, size_t n);
void cip_table_put(cip_be_t *be, cip_ctx_t *cx, cip_table_t *t);
/* Free every pooled table of cx (its context current; backend destroy). */
void cip_tables_free(cip_be_t *be, cip_ctx_t *cx);

/* cuda_ipc_mem.c */
nixl_status_t cip_reg(void *be, const nixl_be_region_t *region, void **md_out);
void cip_dereg(void *be, void *md);
nixl_status_t cip_rkey_pack(void *be, void *md, void *buf, size_t *len);
nixl_status_t cip_rkey_load(void *be, void *peer, const nixl_be_region_t *region, const void *rkey, size_t rkey_len,
                            void **rmd_out);
void cip_rkey_unload(void *be, void *rmd);
/* Where the key is reached from context cx (imports it on first use):
 * NIXL_ERR_NO_PATH when it cannot be, with the reason in cause (not
 * logged: the caller stages or fails). */
nixl_status_t cip_rmd_view(cip_be_t *be, cip_rmd_t *rmd, cip_ctx_t *cx, cip_view_t *out, char *cause,
                           size_t cause_cap);

/* cuda_ipc_xfer.c */
nixl_status_t cip_xfer_prepare(void *be, const nixl_be_xfer_t *xfer, nixl_be_req_t **req_out);
nixl_status_t cip_xfer_prepare_indexed(void *be, const nixl_be_xfer_indexed_t *xfer, nixl_be_req_t **req_out);
nixl_status_t cip_xfer_post(void *be, nixl_be_req_t *req, const void *notif, size_t notif_len);
nixl_status_t cip_xfer_status(void *be, nixl_be_req_t *req);
void cip_xfer_release(void *be, nixl_be_req_t *req);
void cip_xfer_cancel(void *be, nixl_be_req_t *req);
/* The completion and staging workers: init at create, stopped (joined)
 * at destroy.  Their threads start on first use. */
nixl_status_t cip_workers_init(cip_be_t *be);
void cip_workers_fini(cip_be_t *be);

/* cuda_ipc_stage.c */
nixl_status_t cip_stage_server_start(cip_be_t *be);
void cip_stage_server_stop(cip_be_t *be);
/* Run a staged request to its end (the staging thread), notification included. */
nixl_status_t cip_stage_run(cip_be_t *be, struct cip_req *r);
/* Close the peer's staging connection (peer unload, or after an error). */
void cip_stage_conn_close(cip_be_t *be, cip_peer_t *peer);

#endif
