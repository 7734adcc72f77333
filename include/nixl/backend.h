/*
 * nixl/backend.h - the backend ABI.
 *
 * A backend (transport) is one nixl_backend_ops_t.  The core selects
 * backends by capability, never by name, and drives them only through these
 * ops; a backend sees only this header and the host-services table the core
 * hands it (logging, configuration, path accounting, notification delivery).
 *
 * Versioning: abi_version, struct_size and name come first and never move.
 * New members are appended; a core reads a member only if struct_size covers
 * it.  Members marked OPTIONAL may be NULL and are checked before each call.
 *
 * A module exports one symbol, NIXL_BACKEND_ENTRY ("nixl_backend_get_ops"),
 * a function returning its ops.  Built-in backends are listed in the core.
 *
 * Locking: with the agent in NIXL_THREAD_SERIALIZED mode every op is called
 * with the agent lock held, so ops of one backend instance never run
 * concurrently.  Threads a backend starts itself must not call back into the
 * host except through log(), fallback(), notif_deliver() and
 * notif_backlog().
 *
 * Registration exception: reg() and dereg() of a batch run on the core's
 * registration pool threads (the agent lock held by the thread waiting for
 * them, so no other op of the agent runs meanwhile).  A backend declaring
 * NIXL_CAP_REG_MT gets several reg()/dereg() calls at once on one instance;
 * without it they come one at a time, from whichever worker, while other
 * instances register in parallel.  The recorded CUDA context is current
 * around each call.
 */
#ifndef NIXL_BACKEND_H
#define NIXL_BACKEND_H

#include <stdarg.h>
#include <strings.h>
#include <stddef.h>
#include <stdint.h>

#include "../nixl.h"
#include "backend_util.h" /* nixl_log_level_t; the backend kit */

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2: peers come with the core's locality record (peer_open);
 * version-1 tables (peer_load, their own identity in the conn info) are
 * still loaded. */
#define NIXL_BACKEND_ABI_VERSION 2
#define NIXL_BACKEND_ABI_VERSION_MIN 1
#define NIXL_BACKEND_ENTRY "nixl_backend_get_ops"

/* Facts about GPU memory the core recorded when it was registered (all
 * zero for other memory).  Queried with pointer attributes, which answer
 * from any thread whatever context is current. */
enum {
    NIXL_CUDA_MEM_VMM = 1u << 0,        /* allocated with cuMemCreate (VMM, expandable segments) */
    NIXL_CUDA_MEM_LEGACY_IPC = 1u << 1, /* cuIpcGetMemHandle works on it */
};

typedef struct nixl_be_cuda_region {
    void *ctx;           /* CUcontext owning it (VMM memory: the device's primary context) */
    int32_t device;      /* CUDA ordinal in this process */
    uint32_t flags;      /* NIXL_CUDA_MEM_* */
    uint64_t alloc_base; /* the allocation (legacy) or mapping (VMM) holding the region's start */
    uint64_t alloc_size;
    char pci_bus_id[16]; /* "0000:1b:00.0": stable across CUDA_VISIBLE_DEVICES */
} nixl_be_cuda_region_t;

/* GPU helpers of the host (host->cuda); NULL members when built without
 * CUDA headers. */
typedef struct nixl_host_cuda {
    /* The driver table, const nixl_cuda_api_t * (nixl/cuda_api.h), loaded
     * on first call; NULL when there is no driver. */
    const void *(*api)(void);
    /* Make ctx current on the calling thread; *saved gets the context that
     * was current, for ctx_restore.  The context rule: bind the memory's
     * recorded context before touching it, on whatever thread. */
    nixl_status_t (*ctx_bind)(void *ctx, void **saved);
    void (*ctx_restore)(void *saved);
    /* Classify addr from any thread: *is_device 1 for device memory. */
    nixl_status_t (*ptr_query)(uint64_t addr, uint64_t len, nixl_be_cuda_region_t *out, int *is_device);
    /* "CUDA_ERROR_...: message" for a CUresult. */
    const char *(*strerror)(int cu_result);
} nixl_host_cuda_t;

/* What nixl_be_ctx_enter changed on the calling thread, for nixl_be_ctx_leave. */
typedef struct nixl_be_ctx_scope {
    void *saved; /* the context that was current before */
    int changed; /* 1: ctx was made current, saved must be restored */
} nixl_be_ctx_scope_t;

/* The context rule in one place, for the core and every backend: make ctx
 * (a CUcontext; NULL when the memory needs none) current on this thread.
 * NIXL_OK with scope->changed 0 when ctx is NULL or already current;
 * NIXL_ERR_NOT_SUPPORTED without GPU helpers; the bind's error otherwise
 * (nothing changed).  Every call is paired with nixl_be_ctx_leave. */
static inline nixl_status_t nixl_be_ctx_enter(const nixl_host_cuda_t *cuda, void *ctx, nixl_be_ctx_scope_t *scope)
{
    scope->saved = NULL;
    scope->changed = 0;
    if (!ctx)
        return NIXL_OK;
    if (!cuda || !cuda->ctx_bind || !cuda->ctx_restore)
        return NIXL_ERR_NOT_SUPPORTED;
    void *prev = NULL;
    nixl_status_t st = cuda->ctx_bind(ctx, &prev);
    if (st != NIXL_OK)
        return st;
    scope->saved = prev;
    scope->changed = prev != ctx;
    return NIXL_OK;
}

static inline void nixl_be_ctx_leave(const nixl_host_cuda_t *cuda, const nixl_be_ctx_scope_t *scope)
{
    if (scope->changed)
        cuda->ctx_restore(scope->saved);
}

/* Services the core offers a backend.  Handed to create(); valid until
 * destroy() returns. */
typedef struct nixl_host_services {
    uint32_t abi_version;
    uint32_t struct_size;
    /* Opaque: pass back as the first argument of the calls below. */
    void *ctx;
    /* Non-zero when a message at this level would be printed: check before
     * formatting on hot paths. */
    int (*log_enabled)(nixl_log_level_t level);
    void (*log)(nixl_log_level_t level, const char *where, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    /* Current value of a NIXL_* variable of the core table; NULL if unknown. */
    const char *(*config_get)(const char *name);
    /* Count one fallback onto 'path' for 'cause' and warn (rate-limited).
     * May be called from any thread. */
    void (*fallback)(void *ctx, const char *path, const char *cause);
    /* Hand a received notification to the agent, from any thread (a
     * backend's receive thread included), at any time between create()
     * returning and destroy() returning.  The bytes are copied once, into
     * the agent's inbox; notifications of one backend are seen in the order
     * they were delivered.  (Before the inbox this could only be called from
     * within an op: a backend written that way is still right.) */
    void (*notif_deliver)(void *ctx, const char *sender, const void *msg, size_t len);
    /* The agent's name. */
    const char *agent_name;
    /* GPU helpers; never NULL (its api is NULL without a CUDA driver). */
    const nixl_host_cuda_t *cuda;
    /* --- appended: read only when struct_size covers it --- */
    /* Payload bytes delivered and not yet taken by the application (any
     * thread): a receive thread stops reading past its own cap, so that
     * senders feel the backpressure instead of the inbox growing. */
    size_t (*notif_backlog)(void *ctx);
} nixl_host_services_t;

/* A local or remote registered range as the core sees it. */
typedef struct nixl_be_region {
    nixl_mem_t mem_type;
    uint32_t dev_id;
    uint64_t addr;
    uint64_t len;
    /* VRAM registered here: what the core found (remote regions: zero). */
    nixl_be_cuda_region_t cuda;
} nixl_be_region_t;

/* FILE memory.  A FILE descriptor is NIXL's (offset, len, fd): dev_id is
 * the file descriptor, addr the offset in the file (0 is a valid offset;
 * a registration of len 0 covers the file from offset to any end).
 * Inside the library a file range is keyed by one 64-bit address, so that
 * ranges of different files never overlap: key = (fd + 1) << 43 | offset.
 * Backends see keys in FILE regions (addr) and iovs (laddr / raddr);
 * nixl_file_offset gives the offset back, the region's dev_id the fd. */
#define NIXL_FILE_OFFSET_BITS 43
#define NIXL_FILE_OFFSET_END (1ull << NIXL_FILE_OFFSET_BITS) /* offsets and ends up to 8 TiB */
#define NIXL_FILE_FD_MAX ((1u << (64 - NIXL_FILE_OFFSET_BITS)) - 2)

static inline uint64_t nixl_file_key(uint32_t fd, uint64_t offset)
{
    return ((uint64_t)fd + 1) << NIXL_FILE_OFFSET_BITS | offset;
}

static inline uint64_t nixl_file_offset(uint64_t key)
{
    return key & (NIXL_FILE_OFFSET_END - 1);
}

/* One piece of a transfer after the core resolved and merged descriptors. */
typedef struct nixl_be_iov {
    uint64_t laddr;
    uint64_t raddr;
    uint64_t len;
    void *lmd; /* reg() output of the local region holding laddr..+len */
    void *rmd; /* rkey_load() output of the remote region holding raddr..+len */
} nixl_be_iov_t;

typedef struct nixl_be_xfer {
    nixl_op_t op;
    void *peer;               /* peer_load() output */
    nixl_mem_t local_mem;
    nixl_mem_t remote_mem;
    const nixl_be_iov_t *iov; /* owned by the core, valid until xfer_release() */
    size_t count;
    uint64_t bytes;
} nixl_be_xfer_t;

/* One layer of an indexed request (xfer_prepare_indexed): piece t of the
 * layer moves item_len bytes between lbase + lslots[t] x lstride and
 * rbase + rslots[t] x rstride, inside the regions of lmd and rmd. */
typedef struct nixl_be_layer {
    uint64_t lbase;
    uint64_t rbase;
    void *lmd; /* reg() output of the local region holding every piece of the layer */
    void *rmd; /* rkey_load() output of the remote region holding them */
} nixl_be_layer_t;

/* An indexed request as the engine holds a paged KV transfer: layers x
 * nslots pieces of item_len bytes, layer-major, the same slots for every
 * layer.  The core checked every piece (each layer's span from its
 * smallest to its largest slot lies inside one registration on each side,
 * no address arithmetic overflows).  Arrays are the core's, valid until
 * xfer_release (a re-prepare after a deregistration passes new ones). */
typedef struct nixl_be_xfer_indexed {
    nixl_op_t op;
    void *peer; /* peer_open() / peer_load() output */
    nixl_mem_t local_mem;
    nixl_mem_t remote_mem;
    const nixl_be_layer_t *layer;
    size_t layers;
    const uint32_t *lslots, *rslots;
    size_t nslots;
    uint64_t lstride, rstride, item_len;
    uint64_t bytes; /* layers x nslots x item_len */
} nixl_be_xfer_indexed_t;

/* Every backend request starts with this header; the backend keeps it
 * current and the core reads it once the request completed. */
typedef struct nixl_be_req {
    const char *path;  /* static string, e.g. "shm.cma"; never NULL after prepare */
    uint32_t fallback; /* non-zero when 'path' is a fallback path */
} nixl_be_req_t;

/* Who a peer is, relative to this process: computed by the core once per
 * loaded generation from the identity in the agent section of the peer's
 * metadata (docs/metadata-format.md) and this process's own (version 2).
 * The identity is what the peer claims: a backend that acts on the pid
 * checks it is that process (samehost_proc_open: a pidfd and the start
 * time).  Valid until peer_unload. */
typedef struct nixl_be_peer {
    const char *name;    /* the peer agent's name */
    uint64_t generation; /* 1, 2, ... per load of this name (loopback: the agent's own) */
    uint8_t same_process; /* this very process (loopback, or another agent in it) */
    uint8_t same_host;    /* the same running kernel (boot id; hostname when a boot id is unknown) */
    uint8_t same_pidns;   /* same_host, and pid is a pid in our pid namespace */
    uint8_t same_netns;   /* same_host, and the same network namespace */
    uint8_t same_uid;     /* same_host, and it runs as our uid */
    uint8_t reserved[3];
    uint32_t pid;        /* in the peer's pid namespace */
    uint32_t uid;
    uint64_t start_time; /* field 22 of /proc/<pid>/stat; 0 when unknown */
} nixl_be_peer_t;

typedef struct nixl_backend_ops {
    uint32_t abi_version; /* NIXL_BACKEND_ABI_VERSION */
    uint32_t struct_size; /* sizeof(nixl_backend_ops_t) the backend was built with */
    const char *name;     /* [a-z0-9_]+, at most 31 bytes */
    const char *description;
    uint32_t mem_types; /* NIXL_MEM_BIT() mask */
    uint32_t caps;      /* NIXL_CAP_* */
    /* Every parameter the backend takes; the core rejects other keys and
     * fills defaults, so create() always sees every key.  NIXL_<NAME>_<KEY>
     * in the environment overrides a default. */
    const nixl_param_info_t *params;
    size_t num_params;

    /* Create an instance.  params: every declared key, resolved. May block. */
    nixl_status_t (*create)(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                            void **be_out);
    /* Stop threads, then free.  Every request, peer and registration was
     * released before. */
    void (*destroy)(void *be);

    /* Register a local range.  *md_out is passed back in iovs and dereg. */
    nixl_status_t (*reg)(void *be, const nixl_be_region_t *region, void **md_out);
    void (*dereg)(void *be, void *md);
    /* OPTIONAL.  Public key of a registration, put in the metadata blob.
     * Writes at most *len bytes; sets *len to the size needed (call with
     * buf NULL to ask).  NULL op = empty key. */
    nixl_status_t (*rkey_pack)(void *be, void *md, void *buf, size_t *len);

    /* OPTIONAL.  Connection info put in the metadata blob (same convention
     * as rkey_pack). */
    nixl_status_t (*conn_pack)(void *be, void *buf, size_t *len);
    /* Version 1 only (version 2: NULL, see peer_open).  Load a peer from
     * its conn info (untrusted: validate it).  Returns NIXL_ERR_NO_PATH
     * when this backend cannot reach that peer. */
    nixl_status_t (*peer_load)(void *be, const char *peer_name, const void *conn, size_t conn_len, void **peer_out);
    void (*peer_unload)(void *be, void *peer);
    /* Load one remote region's key (untrusted: validate it). */
    nixl_status_t (*rkey_load)(void *be, void *peer, const nixl_be_region_t *region, const void *rkey,
                               size_t rkey_len, void **rmd_out);
    void (*rkey_unload)(void *be, void *rmd);

    /* Build a request.  Must set the header's path. */
    nixl_status_t (*xfer_prepare)(void *be, const nixl_be_xfer_t *xfer, nixl_be_req_t **req_out);
    /* Start it; deliver notif to the peer only after every byte landed.
     * NIXL_OK: done (and notified).  NIXL_IN_PROG: poll xfer_status. */
    nixl_status_t (*xfer_post)(void *be, nixl_be_req_t *req, const void *notif, size_t notif_len);
    nixl_status_t (*xfer_status)(void *be, nixl_be_req_t *req);
    /* Cancel if in flight (the notification is not sent), wait until the
     * backend no longer touches the memory, free. */
    void (*xfer_release)(void *be, nixl_be_req_t *req);

    /* OPTIONAL (required with NIXL_CAP_NOTIF).  Standalone notification. */
    nixl_status_t (*notif_send)(void *be, void *peer, const void *msg, size_t len);
    /* OPTIONAL.  Advance: receive notifications (notif_deliver), complete
     * requests.  Must not block. */
    nixl_status_t (*progress)(void *be);

    /* --- appended after version 1: read only when struct_size covers it --- */
    /* OPTIONAL (topology, for nixl-info -t).  Human-readable text about the
     * instance: e.g. its rails and which are local to each GPU.  Same
     * convention as conn_pack: writes at most *len bytes (NUL-terminated
     * when it fits), sets *len to the size needed including the NUL.  May
     * block briefly (it may load the machine topology). */
    nixl_status_t (*describe)(void *be, char *buf, size_t *len);
    /* OPTIONAL (0: none).  Memory types taken as the LOCAL side of a
     * request only, on top of mem_types: the core registers such regions
     * with this backend but never publishes them to peers, so it is never
     * chosen to reach a peer's memory of these types (cuda_ipc: local DRAM
     * <-> a peer's VRAM, while shm keeps DRAM <-> DRAM). */
    uint32_t local_mem_types;
    /* OPTIONAL (the core enforces request deadlines with it; without it a
     * deadline is not enforced, said once).  Start canceling a request in
     * flight; must not block.  From then on xfer_status says how it ended:
     * NIXL_ERR_CANCELED once the backend no longer touches the memory and
     * the notification will never be delivered; NIXL_OK when it was too
     * late (the notification was already on its way: every byte landed);
     * or the error it failed with.  A request no longer in flight is left
     * as it is. */
    void (*xfer_cancel)(void *be, nixl_be_req_t *req);

    /* --- version 2 --- */
    /* REQUIRED in version 2 (instead of peer_load).  Load a peer: who it
     * is comes from the core (peer, valid until peer_unload), how to reach
     * it from its conn info (untrusted: validate it).  The backend answers
     * only whether it can: NIXL_ERR_NO_PATH when it cannot (a same-host
     * backend and !peer->same_pidns, say); locality policy (which backend
     * serves a same-host peer) is the core's. */
    nixl_status_t (*peer_open)(void *be, const nixl_be_peer_t *peer, const void *conn, size_t conn_len,
                               void **peer_out);
    /* OPTIONAL (NULL: nothing to set up before a request).  Make the
     * connection to a loaded peer now (addresses, handshake) and wait for
     * it, at most the backend's own peer timeout, so the first request
     * pays nothing (nixl_md_connect).  NIXL_OK once connected; the error
     * the first request would have met otherwise. */
    nixl_status_t (*peer_connect)(void *be, void *peer);
    /* OPTIONAL (NULL: the core expands every indexed request into pieces
     * for xfer_prepare).  Build a request from the indexed form itself, so
     * its host work is its layers and slots, not its pieces (cuda_ipc: the
     * kernel computes base + slot x stride).  NIXL_ERR_NOT_SUPPORTED when
     * this request does not suit the form (too few pieces, pieces for the
     * copy engines, memory it cannot reach directly...): the core then
     * expands it and calls xfer_prepare, which chooses as for any request;
     * that is the same backend and no fallback.  Any other error fails the
     * request.  Must set the header's path, as xfer_prepare does. */
    nixl_status_t (*xfer_prepare_indexed)(void *be, const nixl_be_xfer_indexed_t *xfer, nixl_be_req_t **req_out);
    /* OPTIONAL (NULL: the backend cannot tell).  Whether the loaded peer's
     * process is alive as this backend sees it: 1 it answered recently (a
     * connection up and heard from within a few heartbeats), 0 it is gone
     * (it said goodbye, or fell silent past the peer timeout), -1 no
     * connection to judge by.  Must not block.  The core asks it of a peer
     * whose process it cannot look at itself (another host or pid
     * namespace) before it lets another instance take that peer's name. */
    int (*peer_alive)(void *be, void *peer);
} nixl_backend_ops_t;

/* Whether ops (of struct_size bytes) has member m: members appended after
 * version 1 exist only in tables built with a header that has them. */
#define NIXL_BACKEND_OPS_HAS(ops, m) \
    ((ops)->struct_size >= offsetof(nixl_backend_ops_t, m) + sizeof((ops)->m) && (ops)->m)

typedef const nixl_backend_ops_t *(*nixl_backend_entry_fn)(void);

/* Helper for backends: value of key in a resolved param list, or NULL. */
static inline const char *nixl_param_find(const nixl_param_t *params, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        const char *a = params[i].key, *b = key;
        while (*a && *a == *b) {
            a++;
            b++;
        }
        if (*a == *b)
            return params[i].value;
    }
    return NULL;
}

/* Helpers for backends (and the core, which shares them): a parameter value
 * as a size, decimal with an optional K/M/G suffix (powers of 1024), the
 * whole string, no sign or blank, overflow refused; as a boolean,
 * 0/1/no/yes/false/true/off/on in any case.  0 on success, -1 otherwise. */
static inline int nixl_param_parse_size(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (!s || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k':
    case 'K':
        shift = 10;
        p++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        p++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        p++;
        break;
    default:
        break;
    }
    if (*p != '\0' || v > (UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

static inline int nixl_param_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    if (!s)
        return -1;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

#ifdef __cplusplus
}
#endif
#endif /* NIXL_BACKEND_H */
