/*
 * nixl.h - the public C API of libnixl.
 *
 * libnixl moves bytes between the registered memory of processes (host DRAM,
 * GPU VRAM, later files) on one node and across nodes.  One agent per
 * process; backends (transports) inside it; memory registered as descriptor
 * lists; an opaque metadata blob that peers exchange; one-sided READ/WRITE
 * transfers; notifications the target sees only after the data has landed.
 *
 * Conventions
 *  - Every function returns a nixl_status_t (0 success, 1 in progress,
 *    negative errors) unless it says otherwise.  Outputs are the last
 *    arguments and are written only on success.
 *  - Handles are opaque.  Param structs start with a field_mask so they can
 *    grow: a field is read only when its bit is set.
 *  - Descriptor lists (nixl_dlist_t) are caller-owned views; the library
 *    copies what it keeps.
 *  - Thread safety: see docs/api.md.  With NIXL_THREAD_SERIALIZED (forced
 *    when a progress thread or listener is on) every call on one agent may
 *    come from any thread.  With NIXL_THREAD_NONE the caller serializes calls
 *    on one agent; distinct agents are always independent.
 *  - Thread contract (tests/unit/threads checks it).  Each section below
 *    says "Threads:" and one of
 *      any    - any thread, any time, whatever the mode; no agent involved.
 *      agent  - SERIALIZED: any thread, any time (the agent lock orders the
 *               call with every other call on the agent, its backends,
 *               requests and prepared lists).  NONE: only while no other
 *               call on the same agent (or its handles) runs.
 *    In both modes a handle must not be used by one thread while another
 *    releases or destroys it, nor after: releasing is the caller's last
 *    word on a handle (nixl_agent_destroy: on the agent and all it made).
 */
#ifndef NIXL_H
#define NIXL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define NIXL_API __attribute__((visibility("default")))
#else
#define NIXL_API
#endif

#define NIXL_VERSION_MAJOR 0
#define NIXL_VERSION_MINOR 1
#define NIXL_VERSION_PATCH 0

/* ------------------------------------------------------------------------
 * Status codes.  One list generates the enum, the names and the messages.
 * Groups: 0/1 success/progress; -1..-19 arguments; -20..-39 memory and
 * registration; -40..-59 peers and metadata; -60..-79 transfers;
 * -80..-99 backends and the system.
 * ------------------------------------------------------------------------ */
#define NIXL_STATUS_LIST(X)                                                                      \
    X(NIXL_OK, 0, "success")                                                                      \
    X(NIXL_IN_PROG, 1, "in progress")                                                             \
    X(NIXL_ERR_INVALID_PARAM, -1, "invalid parameter")                                            \
    X(NIXL_ERR_NULL, -2, "required pointer is NULL")                                              \
    X(NIXL_ERR_LENGTH_MISMATCH, -3, "descriptor lists differ in length")                         \
    X(NIXL_ERR_ZERO_LENGTH, -4, "zero-length descriptor or empty list")                          \
    X(NIXL_ERR_NOT_SUPPORTED, -5, "operation not supported")                                      \
    X(NIXL_ERR_NO_MEMORY, -6, "out of memory")                                                    \
    X(NIXL_ERR_TOO_BIG, -7, "value exceeds a limit")                                              \
    X(NIXL_ERR_NOT_REGISTERED, -20, "memory not registered")                                      \
    X(NIXL_ERR_OVERLAP, -21, "memory ranges overlap")                                             \
    X(NIXL_ERR_REG_MISMATCH, -22, "deregistration does not match a registration")                \
    X(NIXL_ERR_MEM_TYPE, -23, "memory type not supported here")                                   \
    X(NIXL_ERR_UNKNOWN_PEER, -40, "unknown peer agent")                                           \
    X(NIXL_ERR_PEER_INVALIDATED, -41, "peer metadata was invalidated")                            \
    X(NIXL_ERR_STALE, -42, "request made against an older generation of the peer's metadata")    \
    X(NIXL_ERR_BAD_METADATA, -43, "metadata truncated or corrupted")                              \
    X(NIXL_ERR_MD_VERSION, -44, "metadata version not supported")                                 \
    X(NIXL_ERR_PEER_GONE, -45, "peer gone or unreachable")                                        \
    X(NIXL_ERR_SELF, -46, "an agent cannot load its own metadata")                                \
    X(NIXL_ERR_NAME_TAKEN, -47, "agent name already in use")                                      \
    X(NIXL_ERR_NOT_AUTHENTICATED, -48, "metadata not authenticated: no MAC, a wrong one, or a replay")   \
    X(NIXL_ERR_IN_FLIGHT, -60, "request still in flight")                                         \
    X(NIXL_ERR_CANCELED, -61, "request canceled")                                                 \
    X(NIXL_ERR_NO_PATH, -62, "no backend can reach that peer with that memory")                  \
    X(NIXL_ERR_TIMEOUT, -63, "timed out")                                                         \
    X(NIXL_ERR_XFER_FAILED, -64, "transfer failed")                                               \
    X(NIXL_ERR_UNKNOWN_BACKEND, -80, "unknown backend")                                           \
    X(NIXL_ERR_BACKEND, -81, "backend error")                                                     \
    X(NIXL_ERR_PERMISSION, -82, "permission denied by the operating system")                      \
    X(NIXL_ERR_NO_CUDA, -83, "no CUDA driver")                                                    \
    X(NIXL_ERR_IO, -84, "I/O or socket error")                                                    \
    X(NIXL_ERR_ABI, -85, "backend module ABI mismatch")                                           \
    X(NIXL_ERR_EXISTS, -86, "already exists")

typedef enum {
#define NIXL_STATUS_ENUM_(name, value, msg) name = value,
    NIXL_STATUS_LIST(NIXL_STATUS_ENUM_)
#undef NIXL_STATUS_ENUM_
} nixl_status_t;

/* Threads: any (the strings are static). */
/* Human message for a status ("invalid parameter"); never NULL. */
NIXL_API const char *nixl_strerror(nixl_status_t status);
/* Symbolic name for a status ("NIXL_ERR_INVALID_PARAM"); never NULL. */
NIXL_API const char *nixl_status_name(nixl_status_t status);
/* "major.minor.patch" */
NIXL_API const char *nixl_version(void);

/* ------------------------------------------------------------------------
 * Memory and descriptors
 * ------------------------------------------------------------------------ */
typedef enum {
    NIXL_MEM_DRAM = 0,
    NIXL_MEM_VRAM = 1,
    NIXL_MEM_BLOCK = 2, /* defined for later */
    NIXL_MEM_OBJ = 3,   /* defined for later */
    NIXL_MEM_FILE = 4,  /* defined for later */
    NIXL_MEM_TYPE_COUNT
} nixl_mem_t;

#define NIXL_MEM_BIT(t) (1u << (t))

/* One contiguous range.  For DRAM dev_id is ignored (use 0); for VRAM it is
 * the CUDA device ordinal.  meta/meta_len: optional opaque bytes carried
 * with a registration (e.g. a file path later); ignored in transfers. */
typedef struct nixl_desc {
    uint64_t addr;
    uint64_t len;
    uint32_t dev_id;
    uint32_t meta_len;
    const void *meta;
} nixl_desc_t;

/* A caller-owned list of descriptors of one memory type. */
typedef struct nixl_dlist {
    nixl_mem_t mem_type;
    size_t count;
    const nixl_desc_t *descs;
} nixl_dlist_t;

/* Descriptors from rows of 64-bit integers, the form engines hold them in
 * (an N x 3 numpy array of (addr, len, dev) rows): descs[i] = row i, in one
 * pass at memory speed, meta empty.  Row i starts at rows + i * stride
 * (stride >= 3 words; 3 for a C-contiguous N x 3 array).  With is_signed
 * the words are int64 and a negative field is refused; a device id of 2^32
 * or more always is.  NIXL_OK, or NIXL_ERR_INVALID_PARAM with *bad_row (if
 * not NULL) the first refused row; descs is then partly written. */
NIXL_API nixl_status_t nixl_descs_from_rows(nixl_desc_t *descs, const uint64_t *rows, size_t n, size_t stride,
                                            int is_signed, size_t *bad_row);

/* ------------------------------------------------------------------------
 * Agent
 * ------------------------------------------------------------------------ */
typedef struct nixl_agent nixl_agent_t;
typedef struct nixl_backend nixl_backend_t;
typedef struct nixl_xfer nixl_xfer_t;
typedef struct nixl_prep nixl_prep_t;

typedef enum {
    NIXL_THREAD_NONE = 0,       /* caller serializes all calls on one agent */
    NIXL_THREAD_SERIALIZED = 1, /* the agent serializes calls with a lock */
} nixl_thread_mode_t;

enum {
    NIXL_AGENT_CONFIG_NAME = 1u << 0,
    NIXL_AGENT_CONFIG_PROGRESS_THREAD = 1u << 1,
    NIXL_AGENT_CONFIG_LISTEN = 1u << 2,
    NIXL_AGENT_CONFIG_LISTEN_PORT = 1u << 3,
    NIXL_AGENT_CONFIG_THREAD_MODE = 1u << 4,
    NIXL_AGENT_CONFIG_PROGRESS_INTERVAL_US = 1u << 5,
};

typedef struct nixl_agent_config {
    uint64_t field_mask;
    const char *name;             /* required; 1..63 bytes, unique among peers */
    int progress_thread;          /* default 0: progress happens inside calls */
    int listen;                   /* default 0: start the metadata listener */
    uint16_t listen_port;         /* default 0 = any free port (see nixl_agent_listen_port) */
    nixl_thread_mode_t thread_mode; /* default NIXL_THREAD_SERIALIZED */
    uint32_t progress_interval_us;  /* progress thread period, default 100 */
} nixl_agent_config_t;

#define NIXL_NAME_MAX 63

/* Threads: nixl_agent_create any; nixl_agent_name and nixl_agent_listen_port
 * any while the agent lives (fixed at creation); nixl_agent_destroy once, when
 * no other call on the agent runs or will run (it stops the agent's own
 * progress, listener and etcd threads first). */
NIXL_API nixl_status_t nixl_agent_create(const nixl_agent_config_t *config, nixl_agent_t **agent_out);
/* Cancels and frees every request, deregisters memory, closes backends. */
NIXL_API void nixl_agent_destroy(nixl_agent_t *agent);
NIXL_API const char *nixl_agent_name(const nixl_agent_t *agent);
/* Port the listener is bound to (0 when no listener). */
NIXL_API uint16_t nixl_agent_listen_port(const nixl_agent_t *agent);

/* ------------------------------------------------------------------------
 * Backends
 * ------------------------------------------------------------------------ */
typedef struct nixl_param {
    const char *key;
    const char *value;
} nixl_param_t;

typedef struct nixl_param_info {
    const char *key;
    const char *default_value;
    const char *doc;
} nixl_param_info_t;

/* Capability bits of a backend. */
enum {
    NIXL_CAP_LOCAL = 1u << 0,      /* transfers within one process */
    NIXL_CAP_SAME_HOST = 1u << 1,  /* between processes of one host */
    NIXL_CAP_CROSS_HOST = 1u << 2, /* between hosts */
    NIXL_CAP_NOTIF = 1u << 3,      /* notifications */
    NIXL_CAP_PROGRESS = 1u << 4,   /* needs progress calls to advance */
    /* reg/dereg may run concurrently from several threads on one instance
     * (the core's registration pool); without it they run one at a time. */
    NIXL_CAP_REG_MT = 1u << 5,
};

typedef struct nixl_backend_info {
    const char *name;
    const char *description;
    uint32_t mem_types; /* NIXL_MEM_BIT() mask */
    uint32_t caps;      /* NIXL_CAP_* */
    size_t num_params;
    const nixl_param_info_t *params;
    const char *origin; /* "built-in" or the module path */
} nixl_backend_info_t;

/* Threads: nixl_backends_available and nixl_backend_name any; create and
 * describe agent. */
/* Backends available to this process (built in, or modules found in the
 * install dir or NIXL_PLUGIN_DIR).  The array stays valid until exit. */
NIXL_API nixl_status_t nixl_backends_available(const nixl_backend_info_t **infos_out, size_t *count_out);

/* Create a backend instance in the agent.  Unknown keys are an error. */
NIXL_API nixl_status_t nixl_backend_create(nixl_agent_t *agent, const char *name, const nixl_param_t *params,
                                           size_t num_params, nixl_backend_t **backend_out);
NIXL_API const char *nixl_backend_name(const nixl_backend_t *backend);

/* Human-readable facts about a backend instance (libfabric: provider, rails
 * with PCI address and NUMA node, each GPU's local rails; what nixl-info -t
 * prints).  Writes at most *len bytes, NUL-terminated; *len gets the size
 * needed including the NUL (call with buf NULL to ask; a buffer too small
 * gives NIXL_ERR_TOO_BIG).  NIXL_ERR_NOT_SUPPORTED when the backend has no
 * such text.  Takes the agent lock; may load the machine topology. */
NIXL_API nixl_status_t nixl_backend_describe(nixl_backend_t *backend, char *buf, size_t *len);

/* ------------------------------------------------------------------------
 * Optional arguments shared by several calls.
 * ------------------------------------------------------------------------ */
enum {
    NIXL_OPT_BACKENDS = 1u << 0, /* restrict to these backends */
    NIXL_OPT_NOTIF = 1u << 1,    /* attach this notification */
    NIXL_OPT_TIMEOUT_MS = 1u << 2, /* requests: deadline of each post */
};

typedef struct nixl_opt_args {
    uint64_t field_mask;
    nixl_backend_t *const *backends;
    size_t num_backends;
    const void *notif;
    size_t notif_len; /* at most NIXL_NOTIF_MAX */
    /* Requests only: each post must end within this many ms, 0 = no
     * deadline (default NIXL_XFER_TIMEOUT_MS); see nixl_xfer_status. */
    uint32_t timeout_ms;
} nixl_opt_args_t;

#define NIXL_NOTIF_MAX 65536

/* ------------------------------------------------------------------------
 * Memory registration.  Registers every descriptor with every backend of
 * the agent that supports the memory type (or those in opt->backends).
 * All or nothing: on error nothing stays registered.  Descriptors must not
 * be empty nor overlap each other or an existing registration.
 * Deregistration must name exactly the ranges that were registered.
 * ------------------------------------------------------------------------ */
/* Threads: register/deregister agent (requests posting meanwhile see the
 * change at their next post); nixl_mem_alloc/nixl_mem_free any. */
NIXL_API nixl_status_t nixl_mem_register(nixl_agent_t *agent, const nixl_dlist_t *dlist, const nixl_opt_args_t *opt);
NIXL_API nixl_status_t nixl_mem_deregister(nixl_agent_t *agent, const nixl_dlist_t *dlist,
                                           const nixl_opt_args_t *opt);

/* Host memory that same-host peers can map directly (path shm.map): a
 * shared mapping.  Register it as usual.  Free with nixl_mem_free. */
NIXL_API nixl_status_t nixl_mem_alloc(size_t len, void **ptr_out);
NIXL_API void nixl_mem_free(void *ptr, size_t len);

/* What nixl_mem_query says of one descriptor (NIXL's queryMem). */
typedef struct nixl_mem_info {
    int accessible; /* 0: it does not exist or cannot be reached; the rest is 0 */
    uint64_t size;  /* FILE: bytes (st_size) */
    uint32_t mode;  /* FILE: st_mode */
    int64_t mtime;  /* FILE: seconds since the epoch */
} nixl_mem_info_t;

/* Per descriptor of dlist, through the agent's backend named `backend`
 * (nixl_backend_name), which must take the list's memory type: FILE
 * descriptors name their file by a path in meta (NIXL's form: (0, 0, 0,
 * "/path")) or, with meta empty, by the fd in dev_id.  out has dlist->count
 * entries.  NIXL_ERR_UNKNOWN_BACKEND: no such backend on this agent;
 * NIXL_ERR_NOT_SUPPORTED: it takes no such memory, or a type other than
 * FILE (nothing else can be queried yet). */
NIXL_API nixl_status_t nixl_mem_query(nixl_agent_t *agent, const nixl_dlist_t *dlist, const char *backend,
                                      nixl_mem_info_t *out);

/* ------------------------------------------------------------------------
 * Metadata
 * ------------------------------------------------------------------------ */
/* Threads: agent; nixl_free any.  A reload (invalidation) while other
 * threads post makes their older requests fail at post with NIXL_ERR_STALE
 * (NIXL_ERR_PEER_INVALIDATED) without moving a byte. */
/* Serialize this agent (name, host, backends, registered regions).  *blob_out
 * is malloc'd; free it with nixl_free. */
NIXL_API nixl_status_t nixl_md_get_local(nixl_agent_t *agent, void **blob_out, size_t *len_out);
/* Load a peer's blob.  Writes the peer's name (NUL-terminated, at most
 * NIXL_NAME_MAX bytes) to name_out when it is not NULL.  Loading a full blob
 * of a peer that is already known replaces it and bumps its generation.
 * A partial blob (nixl_md_get_local_partial) adds its regions to the peer
 * as loaded: requests made before stay valid, unless the blob changes a
 * region or connection info already loaded (then it is a reload: a new
 * generation, older requests NIXL_ERR_STALE).  A partial blob without
 * connection info loads only into a peer already known, as the same
 * instance: NIXL_ERR_UNKNOWN_PEER otherwise.  With connection info it
 * makes an unknown peer known, with only its regions. */
NIXL_API nixl_status_t nixl_md_load_remote(nixl_agent_t *agent, const void *blob, size_t len,
                                           char name_out[NIXL_NAME_MAX + 1]);
NIXL_API nixl_status_t nixl_md_invalidate_remote(nixl_agent_t *agent, const char *peer);
/* NIXL_OK when the peer's metadata is loaded, NIXL_ERR_UNKNOWN_PEER if not. */
NIXL_API nixl_status_t nixl_md_check_remote(nixl_agent_t *agent, const char *peer);
/* Connect to a loaded peer now, so its first request pays no handshake:
 * every backend that reaches it (opt NIXL_OPT_BACKENDS: those only) makes
 * its connection and waits for the answer, each within its own peer
 * timeout.  Backends with nothing to set up ahead of a request (shm,
 * cuda_ipc) are done at once.  NIXL_ERR_UNKNOWN_PEER when it is not
 * loaded; else the first backend's error (NIXL_ERR_TIMEOUT: it did not
 * answer, NIXL_ERR_PEER_GONE), logged.  Optional: requests connect
 * themselves.  (NIXL's makeConnection / make_connection.) */
NIXL_API nixl_status_t nixl_md_connect(nixl_agent_t *agent, const char *peer, const nixl_opt_args_t *opt);

/* Partial metadata: this agent's name and identity, the registered regions
 * holding the descriptors of dlist (every descriptor must lie inside one),
 * for the backends of opt->backends (NIXL_OPT_BACKENDS; all of the agent's
 * when absent or empty) that publish dlist's memory type; with their
 * connection info when flags has NIXL_MD_PARTIAL_CONN_INFO.  An empty
 * dlist (count 0) gives the connection info of those backends and no
 * region, whatever flags say.  Other fields of opt are ignored.  *blob_out
 * is malloc'd (nixl_free).  Errors: NIXL_ERR_NULL, NIXL_ERR_INVALID_PARAM
 * (memory type, unknown flag bits), NIXL_ERR_UNKNOWN_BACKEND (a backend of
 * another agent), NIXL_ERR_MEM_TYPE (no chosen backend publishes that
 * memory type; FILE regions are never published), NIXL_ERR_ZERO_LENGTH,
 * NIXL_ERR_NOT_REGISTERED (a descriptor outside every registration of the
 * chosen backends). */
enum {
    NIXL_MD_PARTIAL_CONN_INFO = 1u << 0, /* include the backends' connection info */
};
NIXL_API nixl_status_t nixl_md_get_local_partial(nixl_agent_t *agent, const nixl_dlist_t *dlist, uint32_t flags,
                                                 const nixl_opt_args_t *opt, void **blob_out, size_t *len_out);

/* Threads: agent; the socket I/O runs without the agent lock, so other
 * threads' calls go on while one waits. */
/* Metadata over a socket (peer's listener).  These block for at most
 * NIXL_MD_TIMEOUT_MS. */
NIXL_API nixl_status_t nixl_md_send_local(nixl_agent_t *agent, const char *ip, uint16_t port);
/* The partial blob of nixl_md_get_local_partial, sent to the listener at
 * ip:port, which loads it as nixl_md_load_remote does; returns its status. */
NIXL_API nixl_status_t nixl_md_send_local_partial(nixl_agent_t *agent, const nixl_dlist_t *dlist, uint32_t flags,
                                                  const nixl_opt_args_t *opt, const char *ip, uint16_t port);
NIXL_API nixl_status_t nixl_md_fetch_remote(nixl_agent_t *agent, const char *ip, uint16_t port,
                                            char name_out[NIXL_NAME_MAX + 1]);
NIXL_API nixl_status_t nixl_md_invalidate_local(nixl_agent_t *agent, const char *ip, uint16_t port);

NIXL_API void nixl_free(void *ptr);

/* ------------------------------------------------------------------------
 * Metadata through etcd (docs/etcd.md).  Configured by NIXL_ETCD_ENDPOINTS
 * (comma-separated URLs, tried in order), NIXL_ETCD_NAMESPACE,
 * NIXL_ETCD_LEASE_TTL_S, NIXL_ETCD_TIMEOUT_MS, NIXL_ETCD_FETCH_TIMEOUT_MS.
 * These calls return at once: NIXL_IN_PROG when the work was queued, an
 * error when the arguments are wrong.  The agent's etcd thread does the
 * work, reports each outcome through args->cb, keeps the agent's lease
 * alive (when the process dies its keys expire within the TTL), and
 * watches the peers fetched through etcd: a peer whose keys vanish is
 * invalidated (its requests fail with NIXL_ERR_PEER_INVALIDATED), one whose
 * metadata changes is reloaded (older requests: NIXL_ERR_STALE).  An agent
 * that uses etcd serializes its calls, as with a progress thread.  Built
 * without etcd support, each returns NIXL_ERR_NOT_SUPPORTED.
 * ------------------------------------------------------------------------ */
enum {
    NIXL_ETCD_ARG_LABEL = 1u << 0,      /* labelled partial metadata */
    NIXL_ETCD_ARG_TIMEOUT_MS = 1u << 1, /* fetch: how long to wait for the peer */
    NIXL_ETCD_ARG_CALLBACK = 1u << 2,   /* report the outcome to cb */
};

/* The outcome of one call, on the agent's etcd thread with no lock held (it
 * may call the agent, but not destroy it).  peer: the fetched peer, or this
 * agent's own name for publish and invalidate.  NIXL_ERR_CANCELED when the
 * agent is destroyed first. */
typedef void (*nixl_etcd_cb_t)(nixl_agent_t *agent, const char *peer, nixl_status_t status, void *arg);

typedef struct nixl_etcd_args {
    uint64_t field_mask;
    const char *label;   /* 1..63 of [A-Za-z0-9_.:@+-] */
    uint32_t timeout_ms; /* default NIXL_ETCD_FETCH_TIMEOUT_MS */
    nixl_etcd_cb_t cb;
    void *cb_arg;
} nixl_etcd_args_t;

/* Threads: agent; cb runs on the etcd thread (see above). */
/* Publish my metadata as it is now: all of it (dlist NULL), or under
 * args->label (required then) a partial blob with connection info: the
 * registered regions holding the descriptors of dlist, as
 * nixl_md_get_local_partial(dlist, NIXL_MD_PARTIAL_CONN_INFO) makes it
 * (a fetcher adds them to what it holds of me).  Replaces what was
 * published under the same label.
 * Fails (through cb) with NIXL_ERR_NAME_TAKEN while another live agent
 * holds my name in etcd. */
NIXL_API nixl_status_t nixl_md_etcd_publish(nixl_agent_t *agent, const nixl_dlist_t *dlist,
                                            const nixl_etcd_args_t *args);
/* Fetch a peer's metadata (its labelled one with NIXL_ETCD_ARG_LABEL), waiting
 * for it to appear, and load it.  nixl_md_check_remote says NIXL_OK once it
 * is loaded; cb gets NIXL_OK, NIXL_ERR_TIMEOUT or the load's error. */
NIXL_API nixl_status_t nixl_md_etcd_fetch(nixl_agent_t *agent, const char *peer, const nixl_etcd_args_t *args);
/* Remove everything I published (peers watching me invalidate me). */
NIXL_API nixl_status_t nixl_md_etcd_invalidate_local(nixl_agent_t *agent, const nixl_etcd_args_t *args);

/* ------------------------------------------------------------------------
 * Transfers
 * ------------------------------------------------------------------------ */
typedef enum {
    NIXL_OP_READ = 0,  /* remote -> local */
    NIXL_OP_WRITE = 1, /* local -> remote */
} nixl_op_t;

/* Threads: agent for every call here.  Several threads may post, poll and
 * release requests of one agent at once, and one request may be polled from
 * several threads; releasing it ends every thread's use of it. */
/* One-shot: both lists of equal length; descriptor i of local pairs with
 * descriptor i of remote.  Runs contiguous on both sides are merged.
 * FILE memory on either side needs peer = the agent's own name (files are
 * local: NIXL_ERR_MEM_TYPE with any other peer, as in nixl_prep_create and
 * nixl_xfer_make). */
NIXL_API nixl_status_t nixl_xfer_create(nixl_agent_t *agent, nixl_op_t op, const nixl_dlist_t *local,
                                        const nixl_dlist_t *remote, const char *peer, const nixl_opt_args_t *opt,
                                        nixl_xfer_t **xfer_out);

/* A caller-owned list of descriptors as rows of 64-bit integers, the form
 * engines hold them in (an N x 3 numpy array): row i is the words
 * rows[i * stride + 0, 1, 2] = (addr, len, dev), stride >= 3.  With
 * is_signed the words are int64 and a negative field is refused; a device
 * id of 2^32 or more always is. */
typedef struct nixl_rows {
    nixl_mem_t mem_type;
    size_t count;
    const uint64_t *rows;
    size_t stride; /* words from one row to the next (3: a C-ordered N x 3 array) */
    int is_signed;
} nixl_rows_t;

/* nixl_xfer_create of two row lists, read where they lie: the same request
 * and errors as nixl_xfer_create of the lists nixl_descs_from_rows would
 * make, without making them (the rows are read once, every row checked in
 * the same pass).  A refused row is INVALID_PARAM, the log names it. */
NIXL_API nixl_status_t nixl_xfer_create_rows(nixl_agent_t *agent, nixl_op_t op, const nixl_rows_t *local,
                                             const nixl_rows_t *remote, const char *peer,
                                             const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out);

/* Two-step: prepare a list once per side (peer NULL = local side), then make
 * requests from index arrays. */
/* Indexed requests: the shape paged KV caches have.  A side is `layers`
 * buffers (one base address each) and one array of token slots shared by
 * every buffer; piece (l, t) moves item_len bytes between local
 * bases[l] + slots[t] * stride and remote bases[l] + slots[t] * stride,
 * for l < layers, t < nslots, layer-major, so an engine hands the library
 * 27 bases and 8,192 slots instead of 221,184 descriptors.  Every piece
 * must lie inside registered memory of its side (NOT_REGISTERED, nothing
 * made); a slot x stride or base + offset that overflows is
 * INVALID_PARAM; both sides have the same layer count (LENGTH_MISMATCH).
 * peer may be the agent itself (loopback).  The request is an ordinary
 * nixl_xfer_t: post, status, release, repost as any other. */
typedef struct nixl_indexed {
    nixl_mem_t mem_type;
    size_t layers;
    const uint64_t *bases;  /* layers addresses */
    uint64_t stride;        /* bytes from one slot to the next in a buffer */
    const uint32_t *slots;  /* nslots slots, the same for every layer */
} nixl_indexed_t;

NIXL_API nixl_status_t nixl_xfer_create_indexed(nixl_agent_t *agent, nixl_op_t op, const nixl_indexed_t *local,
                                                const nixl_indexed_t *remote, size_t nslots, uint64_t item_len,
                                                const char *peer, const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out);

NIXL_API nixl_status_t nixl_prep_create(nixl_agent_t *agent, const char *peer, const nixl_dlist_t *dlist,
                                        const nixl_opt_args_t *opt, nixl_prep_t **prep_out);
NIXL_API void nixl_prep_release(nixl_prep_t *prep);
NIXL_API nixl_status_t nixl_xfer_make(nixl_agent_t *agent, nixl_op_t op, const nixl_prep_t *local,
                                      const uint32_t *local_idx, const nixl_prep_t *remote,
                                      const uint32_t *remote_idx, size_t count, const nixl_opt_args_t *opt,
                                      nixl_xfer_t **xfer_out);

/* Start (or restart, once complete) a request.  Returns NIXL_OK when it
 * completed already, NIXL_IN_PROG when it runs, an error otherwise.
 * Posting a request still in flight is NIXL_ERR_IN_FLIGHT. */
NIXL_API nixl_status_t nixl_xfer_post(nixl_xfer_t *xfer);
/* NIXL_OK done, NIXL_IN_PROG running, an error if it failed.  When an
 * error comes back the library no longer touches the request's memory.
 * Deadline (NIXL_OPT_TIMEOUT_MS or NIXL_XFER_TIMEOUT_MS): the first status
 * call after it passed starts canceling the request; a later call returns
 * NIXL_ERR_TIMEOUT once the backend let go of the memory (at once for shm
 * and cuda_ipc; libfabric waits for its posted operations, bounded by the
 * peer timeout).  A timed-out request's notification is never delivered;
 * its data may have landed in part.  Re-post it to try again.  NIXL_OK can
 * still come after the deadline when the request had already reached its
 * notification (every byte had landed). */
NIXL_API nixl_status_t nixl_xfer_status(nixl_xfer_t *xfer);
/* Release a request; one in flight is canceled first (its notification is
 * not delivered). */
NIXL_API void nixl_xfer_release(nixl_xfer_t *xfer);

/* Where and how a request went.  Valid once it completed. */
typedef struct nixl_xfer_info {
    char backend[32];
    char path[48];       /* e.g. "shm.map", "shm.cma" */
    uint64_t bytes;
    uint64_t descs;      /* after merging */
    uint64_t descs_in;   /* as given */
    uint64_t post_ns;    /* time spent inside nixl_xfer_post */
    uint64_t xfer_ns;    /* post to completion observed */
    uint64_t posts;      /* how many times it was posted */
} nixl_xfer_info_t;

NIXL_API nixl_status_t nixl_xfer_info(const nixl_xfer_t *xfer, nixl_xfer_info_t *info_out);

/* ------------------------------------------------------------------------
 * Notifications
 * ------------------------------------------------------------------------ */
/* Threads: agent.  Callbacks run on the thread in nixl_notifs_get without
 * the lock; threads calling it at once share the notifications out (each
 * one handed out once), so per-sender order holds within one call. */
NIXL_API nixl_status_t nixl_notif_send(nixl_agent_t *agent, const char *peer, const void *msg, size_t len,
                                       const nixl_opt_args_t *opt);

typedef void (*nixl_notif_cb_t)(const char *sender, const void *msg, size_t len, void *arg);
/* Make progress, then hand every received notification to cb (in arrival
 * order per sender) and forget it.  *count_out (may be NULL) gets how many. */
NIXL_API nixl_status_t nixl_notifs_get(nixl_agent_t *agent, nixl_notif_cb_t cb, void *arg, size_t *count_out);

/* Drive backends once (when no progress thread runs).  Every backend is
 * driven; the first one's error is returned (and logged, rate-limited). */
NIXL_API nixl_status_t nixl_agent_progress(nixl_agent_t *agent);

/* ------------------------------------------------------------------------
 * Path accounting
 * ------------------------------------------------------------------------ */
typedef struct nixl_path_stat {
    char path[48];
    uint64_t requests;
    uint64_t bytes;
    uint64_t descs;
    uint64_t errors;
    uint64_t fallbacks; /* how many times this path was taken as a fallback */
} nixl_path_stat_t;

typedef struct nixl_fallback_stat {
    char path[48];
    char cause[80];
    uint64_t count;
} nixl_fallback_stat_t;

/* Threads: agent. */
/* Copy up to cap rows into out; *count_out gets the number of rows there are. */
NIXL_API nixl_status_t nixl_path_stats(nixl_agent_t *agent, nixl_path_stat_t *out, size_t cap, size_t *count_out);
NIXL_API nixl_status_t nixl_fallback_stats(nixl_agent_t *agent, nixl_fallback_stat_t *out, size_t cap,
                                           size_t *count_out);

/* ------------------------------------------------------------------------
 * Configuration table (every NIXL_* variable)
 * ------------------------------------------------------------------------ */
typedef struct nixl_config_info {
    const char *name;          /* NIXL_... */
    const char *default_value;
    const char *doc;
    const char *value;         /* current value (env or default) */
} nixl_config_info_t;

/* Threads: any. */
NIXL_API size_t nixl_config_count(void);
NIXL_API nixl_status_t nixl_config_get(size_t index, nixl_config_info_t *info_out);

#ifdef __cplusplus
}
#endif
#endif /* NIXL_H */
