/*
 * ucx_int.h - what the files of the ucx backend share: the instance, peers,
 * registrations, remote keys, requests, the wire formats' parsers, and the
 * functions each file offers the others.  Nothing here is seen by the core.
 *
 * Files: ucx.c (ops table, parameters, instance, progress thread),
 * ucx_conn.c (conn info, peers and their endpoints, liveness, the
 * transport a peer's endpoint uses, notifications), ucx_mem.c
 * (registration and remote keys), ucx_tcpold.c (the TCP connections a
 * renewal waits for), ucx_xfer.c (requests), ucx_ucp.c
 * (UCX itself, loaded at the first create).
 *
 * Locking: every UCX call of an instance is made under be->lock (the
 * worker is UCS_THREAD_MODE_SINGLE): the core's ops, the registration pool
 * threads and the backend's progress thread all take it.  UCX callbacks
 * therefore run with be->lock held.  The caller's post, status and cancel
 * wait for it at most UCX_CALL_WAIT_MS (ucx_xfer.c): a UCX call can block
 * far longer than that inside ucp_worker_progress.
 */
#ifndef NIXL_BACKENDS_UCX_INT_H
#define NIXL_BACKENDS_UCX_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ucx_ucp.h" /* <ucp/api/ucp.h>, its functions loaded at the first create */

#include "../common/samehost.h"
#include "nixl/backend.h"

#define UCX_ERROR(be, ...) NIXL_BE_ERROR((be)->host, __VA_ARGS__)
#define UCX_WARN(be, ...) NIXL_BE_WARN((be)->host, __VA_ARGS__)
#define UCX_INFO(be, ...) NIXL_BE_INFO((be)->host, __VA_ARGS__)
#define UCX_DEBUG(be, ...) NIXL_BE_DEBUG((be)->host, __VA_ARGS__)

#define UCX_NAME_MAX 63       /* agent names, as NIXL_NAME_MAX */
#define UCX_TL_NAME_MAX 16    /* UCT transport names: tcp, sysv, rc_mlx5... */
#define UCX_TRANSPORTS_MAX 16 /* entries of the transports parameter */
#define UCX_PATHS_MAX 32      /* distinct "ucx.<tl>" strings an instance hands out */
#define UCX_AM_NOTIF 0x4e     /* active message id of notifications */
#define UCX_CHUNK (1ull << 20) /* the largest put/get of a post over a network transport (ucx_xfer.c) */
#define UCX_OLD_CONNS_MAX 8    /* TCP connections of a closed endpoint a renewal waits for */
#define UCX_TCP_TUPLE_MAX 80   /* "LOCAL REMOTE" of /proc/net/tcp6: 2 x 37 hex digits and colons */

/* ---- wire formats (little-endian), validated field by field ----
 *
 * conn info: u32 magic "UCXC", u16 version (1), u16 0, u32 address length,
 *            then the ucp worker address (ucp_worker_get_address).
 * key blob:  u32 magic "UCXK", u16 version (2), u16 flags (bit 1: the
 *            region is VRAM; bit 0: VRAM its owner's UCX cannot carry, no
 *            key follows), u64 region address, u64 region length, u32 key
 *            length, then ucp_rkey_pack's bytes.  Version 1 had bit 0
 *            only: VRAM never had a key.
 */
#define UCX_CONN_MAGIC 0x43584355u /* "UCXC" */
#define UCX_CONN_VERSION 1
#define UCX_CONN_HDR 12
#define UCX_CONN_ADDR_MAX (1u << 16)
#define UCX_RKEY_MAGIC 0x4b584355u /* "UCXK" */
#define UCX_RKEY_VERSION 2
#define UCX_RKEY_HDR 28
#define UCX_RKEY_F_NOCUDA 1u
#define UCX_RKEY_F_VRAM 2u
#define UCX_RKEY_PACKED_MAX (1u << 16)

/* NIXL_OK with *addr / *addr_len inside conn; NIXL_ERR_BAD_METADATA (the
 * field that was wrong in *why) otherwise. */
nixl_status_t ucx_conn_parse(const void *conn, size_t len, const uint8_t **addr, size_t *addr_len, const char **why);
/* The same for a key blob of region (its address, length and memory type
 * must be what the blob says); *packed NULL with the NOCUDA flag. */
nixl_status_t ucx_rkey_parse(const nixl_be_region_t *region, const void *blob, size_t len, uint32_t *flags,
                             const uint8_t **packed, size_t *packed_len, const char **why);

typedef struct ucx_be ucx_be_t;
typedef struct ucx_req ucx_req_t;

/* reg() output. */
typedef struct ucx_reg {
    uint64_t addr, len;
    nixl_mem_t mem;
    ucp_mem_h memh; /* NULL for VRAM this UCX cannot carry */
    void *cu_ctx;   /* VRAM: the CUcontext the core recorded for it */
    void *packed;   /* ucp_rkey_pack's buffer */
    size_t packed_len;
} ucx_reg_t;

typedef struct ucx_rmd ucx_rmd_t;

/* What UCX chose for one kind of request (ucx_peer_learn_locked). */
typedef struct ucx_chose {
    int known;         /* looked at: path NULL when UCX's table said nothing */
    int fallback;
    const char *path;
    char cause[160];
} ucx_chose_t;

typedef struct ucx_peer {
    ucx_be_t *be;
    struct ucx_peer *next; /* be->peers */
    char name[UCX_NAME_MAX + 1];
    ucp_ep_h ep;           /* NULL once closed */
    int gone;              /* the error callback fired, or the process exited */
    ucs_status_t gone_status;
    int gone_logged;
    int close_owed;        /* the ep failed: close it (FORCE) outside the callback */
    /* [0] host memory, [1] GPU memory on either side (ucx_ep_info_transport) */
    const char *path[2];   /* "ucx.<tl>": the transport its endpoint uses */
    int fallback[2];       /* that transport is not among the transports parameter's */
    char cause[2][80];
    uint64_t chunk[2];     /* the largest put/get of a post on that path (ucx_peer_path_of) */
    char lanes[96];        /* " tl tl ... ": the transports of its endpoint's lanes */
    /* What UCX chose for requests with GPU memory, [READ][local VRAM]
     * [remote VRAM], from its protocol table after the first post of each
     * kind (ucx_peer_learn_locked); cleared with each new endpoint. */
    ucx_chose_t chose[2][2][2];
    int have_proc;         /* a pidfd on a peer of our pid namespace */
    samehost_proc_t proc;
    unsigned nreqs;        /* requests of this peer still in flight */
    /* Silence (ucx_peers_reap_locked): with requests in flight, a peer from
     * which nothing completed for peer_timeout_ms is gone. */
    uint64_t activity;      /* operations of ours that completed, messages from it */
    uint64_t activity_seen; /* activity at the last look */
    uint64_t heard_ns;      /* when activity was last seen to change */
    uint64_t busy_since_ns; /* when nreqs last went from 0 to 1 */
    /* Renewal: a peer gone for silence alone (silent) is tried again with
     * a new endpoint from its address, at a call at least twice
     * peer_timeout_ms after; remote keys follow the endpoint's gen. */
    void *addr;             /* its worker address (the conn info's) */
    size_t addr_len;
    unsigned gen;           /* endpoints made so far, minus one */
    int silent;
    uint64_t gone_ns;
    /* Its regions' keys: UCX wants each destroyed before the endpoint it
     * was unpacked on, so closing the endpoint destroys them first
     * (ucx_ep_close_locked) and a renewal unpacks them again. */
    ucx_rmd_t *rmds;
    /* TCP connections with bytes unacknowledged when it was found stalled
     * (addresses as /proc/net/tcp has them): a renewal waits until each
     * was seen with none (ucx_tcpold.c). */
    char old_conns[UCX_OLD_CONNS_MAX][UCX_TCP_TUPLE_MAX];
    unsigned nold;
    uint64_t old_checked_ns;
} ucx_peer_t;

/* rkey_load() output. */
struct ucx_rmd {
    uint64_t addr, len;
    uint32_t flags;
    ucp_rkey_h rkey; /* NULL with UCX_RKEY_F_NOCUDA, and once its endpoint closed */
    ucx_peer_t *peer; /* NULL once the peer was unloaded first */
    ucx_rmd_t *prev, *next; /* peer->rmds */
    unsigned gen;    /* the peer's endpoint rkey was unpacked on */
    void *packed;    /* the key's bytes, to unpack again on a renewed endpoint */
    size_t packed_len;
};

typedef enum { UCX_REQ_IDLE, UCX_REQ_RUN, UCX_REQ_DONE, UCX_REQ_FAILED } ucx_req_state_t;
/* A deferred post: none (or posted), queued, being posted, canceled while queued. */
enum { UCX_DEFER_NONE, UCX_DEFER_QUEUED, UCX_DEFER_TAKEN, UCX_DEFER_CANCELED };

struct ucx_req {
    nixl_be_req_t hdr;
    ucx_be_t *be;
    ucx_peer_t *peer;
    nixl_op_t op;
    const nixl_be_iov_t *iov; /* the core's, valid until release */
    size_t count;
    /* An indexed request (xfer_prepare_indexed; iov NULL, ix.layer set):
     * the core's description, its arrays valid until release. */
    nixl_be_xfer_indexed_t ix;
    ucx_req_state_t state;
    nixl_status_t err;        /* FAILED: how it ended */
    size_t inflight;          /* put/get requests of UCX not completed */
    ucs_status_t op_status;   /* the first error a put/get completed with */
    void *flush_req;          /* ucp_ep_flush_nbx in flight */
    int flushed;              /* every put/get of this post is remotely complete */
    int flush_seen;           /* a status or progress call saw it flushed */
    void *am_req;             /* the notification's send in flight */
    int notif_sent;           /* handed to UCX: it will be delivered */
    int canceling;            /* xfer_cancel or release: never send the notification */
    _Atomic uint64_t cancel_asked_ns; /* a cancel that found the lock held: when it was asked, for
                                       * the lock's holder to apply (ucx_xfer.c); 0: none */
    /* A post that found the lock held is queued (ucx_xfer.c, deferred posts). */
    _Atomic int defer;        /* UCX_DEFER_*: the caller's side of a queued post */
    /* Quiet: ended, with nothing of it left to UCX (no operation, no
     * notification's send) or to another thread (not on be->run or the
     * queue of posts), until its caller posts it again.  Set and read by
     * the caller's calls only (ucx_xfer.c): status, cancel and release of a
     * quiet request take no lock. */
    _Atomic int quiet;
    int in_pend;              /* on be->pend (be->pend_lock) */
    ucx_req_t *next_pend;
    void *pend_notif;         /* the queued post's notification, copied */
    size_t pend_notif_len, pend_notif_cap;
    uint64_t cancel_ns;       /* when canceling was set (the cancel bound, ucx_reqs_advance_locked) */
    uint64_t caller_ns;       /* the caller's last post or status return (the thread's grace) */
    void *notif;
    size_t notif_len, notif_cap;
    const char *cause;        /* fallback cause, when hdr.fallback */
    uint64_t chunk;           /* its largest put/get: the peer's for its path */
    int lvram, rvram;         /* GPU memory on the local, the remote side */
    int learn;                /* its post asks what UCX chose (ucx_peer_learn_locked) */
    ucx_req_t *next_run, *prev_run; /* be->run: requests in flight */
};

struct ucx_be {
    const nixl_host_services_t *host;
    pthread_mutex_t lock;
    ucp_context_h ctx;
    ucp_worker_h worker;
    void *addr; /* our worker address */
    size_t addr_len;
    int has_cuda; /* ucp_context memory types include CUDA */
    uint64_t mem_types; /* ucp_context_query's memory types (UCS_BIT of ucs_memory_type_t) */
    atomic_int vram_logged; /* the NO_PATH line was said (prepare runs on any thread, unlocked) */
    /* The CUDA context rule (ucx_cu_enter): the context of the first VRAM
     * registered, current on every thread while it holds be->lock; NULL
     * until then.  cu_cur / cu_scope: what the holder bound, what to give
     * back; all three under be->lock. */
    void *cu_ctx;
    void *cu_cur;
    nixl_be_ctx_scope_t cu_scope;
    int cu_warned;

    /* parameters */
    char transports[UCX_TRANSPORTS_MAX][UCX_TL_NAME_MAX + 1];
    unsigned ntransports;
    int progress_thread;
    unsigned progress_us;
    uint64_t release_wait_ms;
    uint64_t spin_ns;
    uint64_t peer_timeout_ns; /* 0: no silence rule */
    int proto_v2;             /* UCX's newer protocols (ucx_proto_v2) */
    char devices[256];        /* UCX NET_DEVICES, empty: UCX's choice */
    uint64_t silence_checked_ns;

    ucx_peer_t *peers;
    ucx_req_t *run; /* requests in flight */
    uint64_t posts; /* requests posted so far (the thread spins after one) */

    char paths[UCX_PATHS_MAX][48];
    unsigned npaths;

    int efd; /* the worker's event fd (progress thread), -1 without one */
    pthread_t thread;
    atomic_int stop;
    atomic_int cancel_waiting; /* cancels and releases waiting for the lock */
    /* The caller's last status call of a request in flight: while the
     * caller polls more often than progress_us, the thread stands by
     * (ucx.c, ucx_thread_main). */
    _Atomic uint64_t caller_poll_ns;
    /* Posts that found the lock held, in order; whoever takes the lock
     * next posts them (ucx_posts_drain_locked).  pend_lock guards only the
     * list, never held across a UCX call. */
    pthread_mutex_t pend_lock;
    ucx_req_t *pend_head, *pend_tail;
    atomic_int npend;
    int thread_started;
};

/* The context rule for UCX's calls.  With CUDA memory UCX's transports
 * call the driver from inside any call (cuda_copy's event queries in
 * ucp_worker_progress, cuda_ipc's handles in pack, unpack and put), and
 * a driver call with no context current fails (NIXL #2102: a progress
 * thread without one, crashing in cuEventQuery).  So every holder of
 * be->lock makes be->cu_ctx current (ucx_lock / ucx_unlock; the progress
 * thread keeps it) and a piece of VRAM of another context binds its own
 * (ucx_cu_use); the caller's context is given back at unlock.  Nothing is
 * done before the first VRAM registration. */
void ucx_cu_use(ucx_be_t *be, void *ctx);
static inline void ucx_cu_enter(ucx_be_t *be)
{
    be->cu_cur = NULL;
    be->cu_scope.changed = 0;
    if (be->cu_ctx)
        ucx_cu_use(be, be->cu_ctx);
}
/* The progress thread's leave: the context stays current on it. */
static inline void ucx_cu_keep(ucx_be_t *be)
{
    be->cu_scope.changed = 0;
    be->cu_cur = NULL;
}
static inline void ucx_cu_leave(ucx_be_t *be)
{
    if (be->cu_scope.changed)
        be->host->cuda->ctx_restore(be->cu_scope.saved);
    ucx_cu_keep(be);
}
static inline void ucx_lock(ucx_be_t *be)
{
    pthread_mutex_lock(&be->lock);
    ucx_cu_enter(be);
}
static inline void ucx_unlock(ucx_be_t *be)
{
    ucx_cu_leave(be);
    pthread_mutex_unlock(&be->lock);
}

/* ucx_conn.c */
nixl_status_t ucx_conn_pack(void *be, void *buf, size_t *len);
nixl_status_t ucx_peer_open(void *be, const nixl_be_peer_t *peer, const void *conn, size_t conn_len, void **peer_out);
void ucx_peer_unload(void *be, void *peer);
int ucx_peer_alive(void *be, void *peer);
nixl_status_t ucx_peer_connect(void *be, void *peer);
nixl_status_t ucx_notif_send(void *be, void *peer, const void *msg, size_t len);
nixl_status_t ucx_notif_post_locked(ucx_be_t *be, ucx_peer_t *peer, const void *msg, size_t len, ucx_req_t *owner);
ucs_status_t ucx_am_recv(void *arg, const void *header, size_t header_length, void *data, size_t length,
                         const ucp_am_recv_param_t *param);
/* NIXL_OK while the peer can be used; NIXL_ERR_PEER_GONE (logged once). */
nixl_status_t ucx_peer_check_locked(ucx_be_t *be, ucx_peer_t *peer);
/* Close endpoints whose peers failed, so UCX ends what they had in flight,
 * then the silence rule.  now: nixl_now_ns() read while holding the lock
 * held now, so that no time the rule kept from an earlier call is later
 * (the rule's differences are unsigned). */
void ucx_peers_reap_locked(ucx_be_t *be, uint64_t now);
/* Mark the peer gone and close its endpoint at once (FORCE). */
void ucx_peer_fail_locked(ucx_be_t *be, ucx_peer_t *peer, const char *why);
/* The same for a peer that may only be stalled (silence, or a cancel UCX
 * did not honour in time): tried again on a new endpoint later. */
void ucx_peer_stalled_locked(ucx_be_t *be, ucx_peer_t *peer, const char *why);
/* rm's key unpacked on its peer's current endpoint (after a renewal);
 * UCS_OK, or UCX's error. */
ucs_status_t ucx_rmd_fresh_locked(ucx_be_t *be, ucx_rmd_t *rm);
/* The transport name a printout of ucp_ep_print_info says carries the
 * pieces of an application's regions; proto_v2: UCX's newer protocols;
 * gpu: of requests with GPU memory on a side. */
int ucx_ep_info_transport(const char *info, int proto_v2, int gpu, char *tl, size_t cap);
/* The transports of its lanes, " tl tl ... ", into out. */
void ucx_ep_info_lanes(const char *info, char *out, size_t cap);
/* From a printout of ucp_worker_print_info (UCX's newer protocols): the
 * transport and the protocol's description ("zero-copy", "software
 * emulation") UCX chose for a put (get: a get) of size bytes, local and
 * remote memory CUDA or host, on an endpoint whose lanes' transports are
 * lanes (" tl tl ", ucx_ep_info_lanes; NULL: any).  0, or -1 when no
 * table says. */
int ucx_proto_info_transport(const char *info, const char *lanes, int get, int lcuda, int rcuda, uint64_t size,
                             char *tl, size_t tlcap, char *desc, size_t dcap);
/* After the first post of a GPU request of its kind: what UCX chose for
 * it, kept in peer->chose and given to r (path, fallback). */
void ucx_peer_learn_locked(ucx_be_t *be, ucx_peer_t *peer, ucx_req_t *r);
/* A request takes what UCX chose for its kind (c->path set). */
static inline void ucx_req_chosen(ucx_req_t *r, const ucx_chose_t *c)
{
    r->hdr.path = c->path;
    r->hdr.fallback = (uint32_t)c->fallback;
    r->cause = c->cause;
}
/* 1 when this UCX runs its newer protocols (UCX_PROTO_ENABLE, else 1.16+). */
int ucx_proto_v2(void);
const char *ucx_path_intern(ucx_be_t *be, const char *tl);
/* The transport/device names ("tcp/lo sysv/memory ...") of a printout of
 * ucp_context_print_info, space-separated into out (what fits of cap);
 * how many were written. */
size_t ucx_ctx_info_resources(const char *info, char *out, size_t cap);
/* The names of want ("mlx5_0,eth0:1"; a name without a port takes every
 * port) that are network devices among resources (ucx_ctx_info_resources'
 * "tl/dev" list): found gets the UCX device names ("mlx5_0:1,eth0"), each
 * once; missing the names of want found nowhere.  Both comma-separated. */
void ucx_devices_match(const char *want, const char *resources, char *found, size_t fcap, char *missing,
                       size_t mcap);

/* ucx_tcpold.c: keep in peer->old_conns the TCP connections of this
 * process with bytes not yet acknowledged (when the peer is found
 * stalled; how many).  ucx_tcpold_busy: how many of them still have some
 * (those seen without are dropped). */
unsigned ucx_tcpold_mark(ucx_peer_t *peer);
unsigned ucx_tcpold_busy(ucx_peer_t *peer);

/* ucx_mem.c */
nixl_status_t ucx_reg(void *be, const nixl_be_region_t *region, void **md_out);
void ucx_dereg(void *be, void *md);
nixl_status_t ucx_rkey_pack(void *be, void *md, void *buf, size_t *len);
nixl_status_t ucx_rkey_load(void *be, void *peer, const nixl_be_region_t *region, const void *rkey, size_t rkey_len,
                            void **rmd_out);
void ucx_rkey_unload(void *be, void *rmd);

/* ucx_xfer.c */
nixl_status_t ucx_xfer_prepare(void *be, const nixl_be_xfer_t *xfer, nixl_be_req_t **req_out);
nixl_status_t ucx_xfer_prepare_indexed(void *be, const nixl_be_xfer_indexed_t *xfer, nixl_be_req_t **req_out);
nixl_status_t ucx_xfer_post(void *be, nixl_be_req_t *req, const void *notif, size_t notif_len);
nixl_status_t ucx_xfer_status(void *be, nixl_be_req_t *req);
void ucx_xfer_cancel(void *be, nixl_be_req_t *req);
void ucx_xfer_release(void *be, nixl_be_req_t *req);
/* Called after ucp_worker_progress: advance requests whose last
 * operation completed (notifications after the flush).  now: read while
 * holding the lock held now, so no request's caller_ns is later. */
enum { UCX_BY_POST, UCX_BY_CALL, UCX_BY_THREAD }; /* who advances (ucx_xfer.c) */
void ucx_reqs_advance_locked(ucx_be_t *be, int by, uint64_t now);
/* Post the requests queued while the lock was held (be->lock held); how
 * many it posted. */
unsigned ucx_posts_drain_locked(ucx_be_t *be);
/* Progress the worker until nothing moves (be->lock held). */
void ucx_progress_locked(ucx_be_t *be);
/* A stretch of ucp_worker_progress calls that ran from since_ns to now:
 * one WARN line when it held the instance UCX_STALL_WARN_MS or longer
 * (ucx.c says why). */
#define UCX_STALL_WARN_MS 500
void ucx_stall_check(ucx_be_t *be, uint64_t since_ns, uint64_t now);
nixl_status_t ucx_status_of(ucs_status_t st);

#endif
