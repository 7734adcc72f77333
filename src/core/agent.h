/*
 * agent.h - the core's internal picture of an agent: its backends, local
 * registrations, peers (each loaded generation refcounted), requests,
 * notification queue and path counters.  Only src/core includes this.
 */
#ifndef NIXL_CORE_AGENT_H
#define NIXL_CORE_AGENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/md_codec.h"
#include "nixl.h"
#include "nixl/backend.h"
#include "util/host.h"

#define NIXL_AGENT_MAX_BACKENDS 8

/* ---- backends (backends.c) ---- */

/* An entry of the process-wide list of backend implementations. */
typedef struct nixl_backend_impl {
    const nixl_backend_ops_t *ops;
    nixl_backend_info_t info;
    char origin[256];
} nixl_backend_impl_t;

/* Enumerate built-in and module backends once per process. */
void nixl_backend_impls(const nixl_backend_impl_t **impls_out, size_t *count_out);
/* Destroy an instance (its fault wrapper first) and free it. */
void nixl_backend_free(nixl_backend_t *b);

struct nixl_backend {
    nixl_agent_t *agent;
    const nixl_backend_ops_t *ops;
    void *be;
    int index; /* in agent->backends */
    nixl_host_services_t host;
    /* What the registry hands it: the ops' mem_types plus the local-only
     * local_mem_types (never published to peers, see peer.c). */
    uint32_t reg_mem_types;
    struct nixl_fault *fault; /* NIXL_FAULT rules naming this backend (fault.c), else NULL */
    int cancel_warned; /* no xfer_cancel op: said once that deadlines are not enforced */
    nixl_status_t progress_err; /* last progress() status, for the rate-limited log */
    uint64_t progress_err_ns;
};

/* ---- local registrations (registry.c) ---- */

typedef struct nixl_region {
    nixl_mem_t mem_type;
    uint32_t dev_id;
    uint64_t addr;
    uint64_t len;
    uint32_t backend_mask;
    void *md[NIXL_AGENT_MAX_BACKENDS];
    uint8_t *meta;
    uint32_t meta_len;
    nixl_be_cuda_region_t cuda; /* VRAM: device, owning context, allocation */
    /* FILE: the fd backends use (dev_id, or the one the core opened for a
     * path-mode registration, fd_owned, closed with the region); else -1. */
    int fd;
    int fd_owned;
} nixl_region_t;

typedef struct nixl_region_index {
    nixl_region_t **v; /* sorted by addr, non-overlapping */
    size_t n, cap;
} nixl_region_index_t;

/* Index in idx->v of the region holding [addr, addr+len), or -1.  Inline:
 * nixl_region_find runs it once per descriptor on the request path. */
static inline long nixl_region_index(const nixl_region_index_t *idx, uint64_t addr, uint64_t len)
{
    size_t lo = 0, hi = idx->n;
    /* Last region with start <= addr. */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (idx->v[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const nixl_region_t *r = idx->v[lo - 1];
    uint64_t off = addr - r->addr;
    if (off >= r->len || len > r->len - off)
        return -1;
    return (long)(lo - 1);
}

/* Region of this mem type holding [addr, addr+len), or NULL. */
nixl_region_t *nixl_region_find(const nixl_region_index_t *idx, uint64_t addr, uint64_t len);
void nixl_registry_destroy(nixl_agent_t *agent);
/* Register existing regions with a backend created later (agent lock held). */
nixl_status_t nixl_registry_add_backend(nixl_agent_t *agent, nixl_backend_t *b);

/* ---- peers (peer.c) ---- */

typedef struct nixl_peer_backend {
    nixl_backend_t *backend; /* local instance; NULL when this peer is unreachable by it */
    void *peer;              /* peer_load() output */
    const nixl_md_backend_t *mdb;
    void **rmd; /* per region of mdb */
} nixl_peer_backend_t;

/* One loaded generation of a peer's metadata.  Requests hold references. */
typedef struct nixl_peer_inc {
    int refs; /* under the agent lock */
    nixl_agent_t *agent;
    uint64_t generation;
    nixl_be_peer_t loc; /* who it is relative to us: what version-2 backends get at peer_open */
    int loopback;       /* the agent itself (nixl_peer_self) */
    nixl_md_t *md;
    void *blob;
    nixl_peer_backend_t bk[NIXL_AGENT_MAX_BACKENDS];
} nixl_peer_inc_t;

typedef struct nixl_peer {
    char name[NIXL_NAME_MAX + 1];
    /* Where its metadata came from over the network (a listener SEND's
     * source, or the address it was fetched from); "" when loaded otherwise.
     * Without a secret, only that address may INVALIDATE it (peer.c). */
    char from[48];
    uint64_t generation;
    nixl_peer_inc_t *cur; /* NULL when invalidated */
} nixl_peer_t;

nixl_peer_t *nixl_peer_find(nixl_agent_t *agent, const char *name);
/* The agent itself as a peer (loopback), its generation current with the
 * agent's registrations; NULL (*st_out says why, logged) when it cannot
 * be built. */
nixl_peer_t *nixl_peer_self(nixl_agent_t *agent, nixl_status_t *st_out);
void nixl_peer_inc_unref(nixl_peer_inc_t *inc);
/* The locality record of a peer whose metadata is md, relative to the
 * process self (loopback: the agent itself). */
void nixl_peer_locality(const nixl_md_t *md, const nixl_proc_id_t *self, int loopback, nixl_be_peer_t *out);
/* Whether opt (NIXL_OPT_BACKENDS) lets a request use b: yes when it names
 * no backends. */
static inline int nixl_opt_allows(const nixl_opt_args_t *opt, const nixl_backend_t *b)
{
    if (!opt || !(opt->field_mask & NIXL_OPT_BACKENDS))
        return 1;
    for (size_t i = 0; i < opt->num_backends; i++)
        if (opt->backends && opt->backends[i] == b)
            return 1;
    return 0;
}
/* Order in which a peer's backends are tried, closest reach first (0
 * same process, 1 same host, 2 the network, 3 none of these). */
int nixl_peer_backend_rank(const nixl_backend_t *b, const nixl_peer_inc_t *inc);
/* Remote region index in bk->mdb holding [addr, addr+len) of mem type, or -1. */
long nixl_peer_region_find(const nixl_peer_backend_t *bk, nixl_mem_t mem, uint64_t addr, uint64_t len);
void nixl_peers_destroy(nixl_agent_t *agent);

/* ---- requests (xfer.c) ---- */

typedef enum {
    NIXL_XFER_IDLE = 0,
    NIXL_XFER_IN_FLIGHT,
    NIXL_XFER_DONE,
    NIXL_XFER_FAILED,
} nixl_xfer_state_t;

/* Pieces arrays of released requests kept for the next ones: at most this
 * many, NIXL_IOV_CACHE_BYTES together. */
#define NIXL_IOV_CACHE 4
#define NIXL_IOV_CACHE_BYTES (64u << 20)

/* An indexed request the backend took in its own form
 * (xfer_prepare_indexed): the core's copy of what it was given, kept for a
 * re-prepare after a deregistration.  The request's iov then holds one
 * entry per layer: the layer's local span (laddr, len: from its smallest
 * to its largest slot) and the regions of both spans, which is all that
 * revalidation and the in-flight check read. */
typedef struct nixl_xfer_ix {
    nixl_be_layer_t *layer;
    uint32_t *lslots, *rslots;
    size_t layers, nslots;
    uint64_t lstride, rstride, item;
} nixl_xfer_ix_t;

struct nixl_xfer {
    nixl_agent_t *agent;
    nixl_xfer_t *prev, *next; /* agent->xfers */
    nixl_op_t op;
    nixl_backend_t *backend;
    nixl_peer_t *peer;
    nixl_peer_inc_t *inc; /* referenced */
    nixl_mem_t local_mem, remote_mem;
    nixl_be_iov_t *iov;
    size_t iov_cap; /* pieces iov has room for (it may come from the agent's cache) */
    size_t count, descs_in; /* pieces after merging, descriptors (pairs) asked for */
    size_t niov;            /* entries of iov: count, or the layers of ix */
    nixl_xfer_ix_t *ix;     /* NULL unless the backend took the indexed form */
    uint64_t bytes;
    uint64_t reg_epoch;
    nixl_be_req_t *req;
    void *notif;
    size_t notif_len;
    nixl_xfer_state_t state;
    nixl_status_t error;
    uint64_t t_post, post_ns, xfer_ns, posts;
    void *cuda_ctx; /* local VRAM: the context bound around backend calls */
    uint64_t timeout_ns; /* deadline of each post after t_post; 0 = none */
    int canceling;       /* the deadline passed: the backend is canceling it */
};

/* Cancel and free every request, and the buffers kept for new ones (agent destroy). */
void nixl_xfers_destroy(nixl_agent_t *agent);
/* 1 when an in-flight request touches a local md in the sorted array. */
int nixl_xfers_in_flight_use(nixl_agent_t *agent, void *const *mds_sorted, size_t n);

/* ---- path accounting (stats.c) ---- */

typedef struct nixl_stats nixl_stats_t;
nixl_stats_t *nixl_stats_create(void);
void nixl_stats_destroy(nixl_stats_t *s);
void nixl_stats_complete(nixl_stats_t *s, const char *path, int fallback, uint64_t bytes, uint64_t descs,
                         int error);
void nixl_stats_fallback(nixl_stats_t *s, const char *agent, const char *path, const char *cause);

/* ---- notifications ---- */

typedef struct nixl_notif_item {
    struct nixl_notif_item *next;
    char sender[NIXL_NAME_MAX + 1];
    size_t len;
    unsigned char msg[];
} nixl_notif_item_t;

/* The agent's inbox: what backends delivered (host notif_deliver, from any
 * thread), in arrival order, until nixl_notifs_get takes it.  Its own small
 * lock, apart from the agent lock, so a backend's receive thread hands a
 * notification over while the agent is busy: one allocation and one copy
 * from the backend's receive buffer to the application's callback. */
typedef struct nixl_inbox {
    pthread_mutex_t lock;
    nixl_notif_item_t *head, **tail;
    size_t bytes; /* payload bytes queued (the backends' backpressure) */
} nixl_inbox_t;

/* Queue one notification (any thread); NIXL_ERR_NO_MEMORY when it cannot. */
nixl_status_t nixl_inbox_push(nixl_inbox_t *in, const char *sender, const void *msg, size_t len);

/* ---- the agent ---- */

struct nixl_md_listener;

struct nixl_agent {
    char name[NIXL_NAME_MAX + 1];
    int serialized;
    pthread_mutex_t lock;
    uint64_t instance_id;

    nixl_backend_t *backends[NIXL_AGENT_MAX_BACKENDS];
    int num_backends;

    nixl_region_index_t regs[NIXL_MEM_TYPE_COUNT];
    uint64_t reg_epoch; /* bumped by every deregistration */

    nixl_peer_t **peers;
    size_t num_peers, cap_peers;
    /* loopback (nixl_peer_self): built from what was registered then */
    nixl_peer_t *self_peer;
    uint64_t self_epoch;
    size_t self_regs;
    int self_backends;

    nixl_xfer_t *xfers; /* every live request */
    /* Request buffers kept for reuse (xfer.c, under the lock), so a KV
     * request of 221,184 descriptors does not fault in 20 MB of fresh
     * memory each time: the two resolved lists nixl_xfer_create makes and
     * drops, and the pieces arrays of released requests. */
    struct nixl_buf {
        void *p;
        size_t cap; /* bytes */
    } create_buf[2], iov_cache[NIXL_IOV_CACHE];

    nixl_inbox_t inbox;

    nixl_stats_t *stats;

    struct nixl_md_listener *listener;
    /* NIXL_MD_SECRET_FILE's key: listener frames are authenticated (NULL: not). */
    struct nixl_md_key *md_key;
    struct nixl_md_etcd *etcd; /* etcd channel (md_etcd.c); NULL until first used */
    pthread_t progress_thread;
    atomic_int progress_running;
    uint32_t progress_interval_us;
    uint64_t xfer_timeout_ns; /* NIXL_XFER_TIMEOUT_MS at creation; 0 = none */
};

static inline void nixl_agent_lock(nixl_agent_t *a)
{
    if (a->serialized)
        pthread_mutex_lock(&a->lock);
}

static inline void nixl_agent_unlock(nixl_agent_t *a)
{
    if (a->serialized)
        pthread_mutex_unlock(&a->lock);
}

/* Progress every backend (agent lock held): every one is driven; the first
 * error is returned, and logged (rate-limited per backend). */
nixl_status_t nixl_agent_progress_locked(nixl_agent_t *agent);
/* Metadata calls with the agent lock held (used by the listener too). */
nixl_status_t nixl_md_get_local_locked(nixl_agent_t *agent, void **blob_out, size_t *len_out);
/* The same with the agent's FILE regions, which peers never get: its view of
 * itself (loopback, nixl_peer_self). */
nixl_status_t nixl_md_get_self_locked(nixl_agent_t *agent, void **blob_out, size_t *len_out);
/* A partial blob (md_local.c): the regions holding dlist's descriptors for
 * the backends of opt (all when none), with connection info when flags has
 * NIXL_MD_PARTIAL_CONN_INFO or dlist is empty.  what names the caller in
 * the error lines. */
nixl_status_t nixl_md_get_local_partial_locked(nixl_agent_t *agent, const nixl_dlist_t *dlist, uint32_t flags,
                                               const nixl_opt_args_t *opt, const char *what, void **blob_out,
                                               size_t *len_out);
nixl_status_t nixl_md_load_remote_locked(nixl_agent_t *agent, const void *blob, size_t len,
                                         char name_out[NIXL_NAME_MAX + 1]);
nixl_status_t nixl_md_invalidate_remote_locked(nixl_agent_t *agent, const char *peer);
/* The listener's SEND and INVALIDATE, and a fetch: the same with the
 * network address the metadata or the request came from.  Without a
 * secret (docs/trust.md, claim 16): a blob of another instance under the
 * name of a peer whose process still runs is refused (NIXL_ERR_NAME_TAKEN),
 * and an INVALIDATE from an address other than the one the peer's
 * metadata came from (NIXL_ERR_PERMISSION); both logged. */
nixl_status_t nixl_md_load_remote_from_locked(nixl_agent_t *agent, const void *blob, size_t len, const char *from,
                                              char name_out[NIXL_NAME_MAX + 1]);
nixl_status_t nixl_md_invalidate_from_locked(nixl_agent_t *agent, const char *peer, const char *from);
/* etcd channel (md_etcd.c): stops its thread, revokes the lease; agent lock not held. */
void nixl_md_etcd_shutdown(nixl_agent_t *agent);

/* NIXL's path mode (file_path.c): a FILE descriptor whose meta is
 * "ro|rw[,direct|sync|noatime|create]*:path" names the file the core opens
 * at registration.  0: not path mode; 1: *out filled; -1: meant as path
 * mode but malformed (logged with what and descriptor i). */
typedef struct nixl_file_path {
    char path[4096];
    int flags; /* open(2) flags */
} nixl_file_path_t;
int nixl_file_path_parse(const uint8_t *meta, size_t len, nixl_file_path_t *out, const char *what, size_t i);

/* Validation of a descriptor list handed to the API. */
nixl_status_t nixl_dlist_check(const nixl_dlist_t *dl, const char *what);
/* A FILE list as the core keys it (nixl/backend.h, nixl_file_key): a copy
 * in *tmp (free it), out pointing at it; other lists pass through (*tmp
 * NULL).  reg: NIXL_FILE_KEYS_XFER (a transfer or prepared list),
 * NIXL_FILE_KEYS_REG (a registration: len 0 = to the end, the fd must be
 * open unless meta is in path mode, whose form is checked here),
 * NIXL_FILE_KEYS_DEREG (len 0 = to the end; the fd may be closed already,
 * so that such a registration can still be removed).  Checks fd and
 * offset bounds, logged with what. */
enum { NIXL_FILE_KEYS_XFER = 0, NIXL_FILE_KEYS_REG = 1, NIXL_FILE_KEYS_DEREG = 2 };
nixl_status_t nixl_dlist_file_keys(const nixl_dlist_t *in, int reg, const char *what, nixl_dlist_t *out,
                                   nixl_desc_t **tmp);

#endif
