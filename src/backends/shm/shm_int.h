/*
 * shm_int.h - what the files of the shm backend share: the instance, peers,
 * registrations, remote keys, requests, and the functions each file offers
 * the others.  Nothing here is seen by the core.
 *
 * Files: shm.c (ops table, parameters, instance, identity, peers),
 * shm_mem.c (registration and remote keys), shm_maps.c (which mapping backs
 * an address), shm_xfer.c (requests and copies), shm_pool.c (worker
 * threads), shm_notif.c (the notification ops).  Process identity and the
 * notification socket are shared with cuda_ipc: ../common/samehost.h.
 */
#ifndef NIXL_BACKENDS_SHM_INT_H
#define NIXL_BACKENDS_SHM_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>

#include "../common/samehost.h"
#include "nixl/backend.h"

/* process_vm_* take at most this many iovecs on each side. */
#ifdef IOV_MAX
#define SHM_IOV_MAX IOV_MAX
#else
#define SHM_IOV_MAX 1024
#endif

#define SHM_NAME_MAX SAMEHOST_NAME_MAX /* agent names, as NIXL_NAME_MAX */

/* Logging goes through the host; the level is checked before formatting. */
#define SHM_ERROR(be, ...) NIXL_BE_ERROR((be)->host, __VA_ARGS__)
#define SHM_WARN(be, ...) NIXL_BE_WARN((be)->host, __VA_ARGS__)
#define SHM_INFO(be, ...) NIXL_BE_INFO((be)->host, __VA_ARGS__)
#define SHM_DEBUG(be, ...) NIXL_BE_DEBUG((be)->host, __VA_ARGS__)


/* One vma as /proc/self/maps (or PROCMAP_QUERY) describes it. */
typedef struct shm_vma {
    uint64_t start, end;
    uint64_t offset; /* file offset of start */
    uint64_t dev;    /* makedev(major, minor) of the backing inode */
    uint64_t ino;
    unsigned readable : 1, writable : 1, shared : 1;
    const char *path; /* NUL-terminated; "" when anonymous; valid until the next lookup */
} shm_vma_t;

/* Finds vmas.  Uses the PROCMAP_QUERY ioctl when the kernel has it (6.11+),
 * else parses /proc/self/maps with a short-lived cache. */
typedef struct shm_maps {
    int fd;        /* /proc/self/maps, for the ioctl; -1 when unavailable */
    int use_query; /* 1 until the ioctl is found missing */
    char *text;    /* last full read of /proc/self/maps */
    size_t text_cap;
    shm_vma_t *vmas; /* parsed, sorted by start; paths point into text */
    size_t nvmas, vmas_cap;
    uint64_t taken_ns; /* 0: no valid snapshot */
    char name[PATH_MAX];
} shm_maps_t;

/* A file we keep open so peers can open it through /proc/<pid>/fd/<n>. */
typedef struct shm_file {
    struct shm_file *next;
    uint64_t dev, ino;
    int fd;
    unsigned refs;
} shm_file_t;

/* reg() output. */
typedef struct shm_reg {
    uint64_t addr, len;
    shm_file_t *file; /* NULL: peers reach it with CMA only */
    uint64_t offset;  /* file offset of addr */
} shm_reg_t;

typedef struct shm_pool shm_pool_t;

typedef struct shm_be {
    const nixl_host_services_t *host;
    /* parameters */
    unsigned threads;
    uint64_t inline_max;
    uint64_t chunk;
    int map_enabled;

    uint32_t self_pid, self_uid; /* this process (rkeys of mapped memory name the pid) */
    int ptrace_scope; /* -1 when Yama is absent */
    int can_ptrace_any; /* CAP_SYS_PTRACE in the effective set */
    long page_size;

    samehost_notif_t notif; /* notifications in */

    /* registration state; reg may be called from several threads */
    pthread_mutex_t reg_lock;
    shm_file_t *files;
    shm_maps_t maps;

    shm_pool_t *pool; /* NULL: every copy runs inline in post */

    /* The block of a released request, kept for the next prepare that
     * fits in it (the larger one is kept, up to SHM_SPARE_MAX): a shm.cma
     * request of 221,184 pieces is 7 MB of iovecs, which glibc may hand
     * back to the kernel at each release and fault in again (2-3 ms) at
     * the next prepare.  Exchanged atomically; freed with the backend. */
    _Atomic(struct shm_req *) spare;
} shm_be_t;

#define SHM_SPARE_MAX ((size_t)64 << 20)

typedef struct shm_peer {
    char name[SHM_NAME_MAX + 1];
    pid_t pid;
    samehost_proc_t proc;        /* pidfd and liveness */
    samehost_notif_peer_t notif; /* our socket towards its notification socket */
    size_t cma_regions;          /* its regions loaded here that are not mapped (CMA, fallback or not) */
} shm_peer_t;

/* rkey_load() output. */
typedef struct shm_rmd {
    shm_peer_t *peer;
    uint64_t addr, len;
    uint8_t *base; /* where addr is mapped here; NULL: reach it with CMA */
    void *map;
    size_t map_len;
    int fallback; /* the key offered a mapping that failed: CMA is a fallback */
} shm_rmd_t;


/* One unit of work of 'bytes' bytes.  shm.map: the window starting at byte
 * rfirst of piece first of the core's iov array; of an indexed request,
 * pieces [first, first + count) in layer-major order.  shm.cma: local iovecs
 * [first, first + count) and remote iovecs [rfirst, rfirst + rcount) for
 * one process_vm_* call; the two lists cover the same bytes but are
 * coalesced separately: the kernel's cost is per remote iovec, so remote
 * runs merge even where the local side is scattered. */
typedef struct shm_item {
    size_t first, count;
    size_t rfirst, rcount;
    size_t bytes;
} shm_item_t;

typedef struct shm_req {
    nixl_be_req_t hdr; /* first: the core sees only this */
    size_t alloc;      /* bytes of the block (shm_req_alloc) */
    shm_be_t *be;
    shm_peer_t *peer;
    nixl_op_t op;
    int mapped;
    uint64_t bytes;
    size_t nseg, nitems;
    struct iovec *liov, *riov; /* shm.cma */
    const nixl_be_iov_t *iov;  /* shm.map: the core's, valid until release */
    size_t niov;
    /* shm.map of an indexed request (shm_xfer_prepare_indexed): the core's
     * layers and slots, valid until release; items are runs of pieces. */
    const nixl_be_layer_t *layer;
    const uint32_t *lslots, *rslots;
    size_t nslots;
    uint64_t lstride, rstride, item_len;
    shm_item_t *items;

    samehost_notif_msg_t notif; /* the notification datagram of the current post */

    _Atomic int status; /* nixl_status_t of the current post */
    _Atomic int err;    /* first error of the current post */
    _Atomic int cancel;

    /* owned by the pool lock */
    struct shm_req *qnext;
    int queued;
    int pooled; /* ever handed to the pool: release must synchronize */
    size_t next_item, done;
    unsigned running;
} shm_req_t;

/* shm.c */
/* NIXL_OK while the peer runs; NIXL_ERR_PEER_GONE (logged) once it exited. */
nixl_status_t shm_peer_check(shm_be_t *be, shm_peer_t *peer);

/* shm_maps.c */
void shm_maps_init(shm_maps_t *m);
void shm_maps_fini(shm_maps_t *m);
void shm_maps_invalidate(shm_maps_t *m);
/* 1: [addr, addr+len) lies inside one vma, *out filled; 0: it does not;
 * -1: the maps could not be read. */
int shm_maps_find(shm_be_t *be, uint64_t addr, uint64_t len, shm_vma_t *out);
/* Parse /proc/<pid>/maps text into vmas (exposed for tests). */
int shm_maps_parse(char *text, shm_vma_t **vmas, size_t *n, size_t *cap);

/* shm_mem.c */
nixl_status_t shm_reg(void *be, const nixl_be_region_t *region, void **md_out);
void shm_dereg(void *be, void *md);
nixl_status_t shm_rkey_pack(void *be, void *md, void *buf, size_t *len);
nixl_status_t shm_rkey_load(void *be, void *peer, const nixl_be_region_t *region, const void *rkey,
                            size_t rkey_len, void **rmd_out);
void shm_rkey_unload(void *be, void *rmd);

/* shm_xfer.c */
nixl_status_t shm_xfer_prepare(void *be, const nixl_be_xfer_t *xfer, nixl_be_req_t **req_out);
nixl_status_t shm_xfer_prepare_indexed(void *be, const nixl_be_xfer_indexed_t *xfer, nixl_be_req_t **req_out);
nixl_status_t shm_xfer_post(void *be, nixl_be_req_t *req, const void *notif, size_t notif_len);
nixl_status_t shm_xfer_status(void *be, nixl_be_req_t *req);
void shm_xfer_release(void *be, nixl_be_req_t *req);
/* The spare request block (shm_be_t.spare), freed; at destroy. */
void shm_spare_free(shm_be_t *be);
void shm_xfer_cancel(void *be, nixl_be_req_t *req);
/* Run item i of r; called by the poster or a worker. */
nixl_status_t shm_req_run_item(shm_req_t *r, size_t i);
/* After the last item: send the notification unless canceled or failed,
 * then publish the final status. */
void shm_req_finish(shm_req_t *r, int canceled);

/* shm_pool.c */
nixl_status_t shm_pool_create(shm_be_t *be, unsigned nthreads, shm_pool_t **pool_out);
void shm_pool_destroy(shm_pool_t *pool);
/* Queue every item of r (its status already IN_PROG). */
void shm_pool_submit(shm_pool_t *pool, shm_req_t *r);
/* Cancel r: drop its queued items, wait until no worker touches it. */
void shm_pool_cancel(shm_pool_t *pool, shm_req_t *r);

/* shm_notif.c: the ops over ../common/samehost_notif.c */
nixl_status_t shm_notif_send(void *be, void *peer, const void *msg, size_t len);

#endif
