/*
 * lf_int.h - what the files of the libfabric backend share: the instance
 * and its rails, connections to peers, control messages, requests, and the
 * functions each file offers the others.  Nothing here is seen by the core.
 *
 * Files: libfabric.c (ops table, parameters, create/destroy),
 * lf_rail.c (provider choice, one endpoint per domain, control buffers),
 * lf_mem.c (registration and remote keys), lf_conn.c (connection info,
 * handshake, liveness), lf_ctrl.c (control messages: notifications and
 * their release after the counted writes), lf_xfer.c (requests),
 * lf_progress.c (completion queues, the progress thread), lf_topo.c (which
 * rails are near a GPU or a NUMA node; hwloc, see lf_topo.h), lf_fi.c
 * (libfabric itself, loaded at the first create).
 *
 * Locking: be->lock guards everything in the instance.  Every op takes it;
 * so does the progress thread.  No libfabric call is made without it, which
 * is why the domains are opened FI_THREAD_DOMAIN.
 */
#ifndef NIXL_BACKENDS_LF_INT_H
#define NIXL_BACKENDS_LF_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "lf_topo.h"
#include "nixl/backend.h"

#define LF_MAX_RAILS 32 /* rail sets are uint32_t masks */
_Static_assert(LF_MAX_RAILS == LF_TOPO_MAX_RAILS, "rail masks are 32 bits");
#define LF_ADDR_MAX 128 /* bytes of one endpoint name */
#define LF_NAME_MAX 63  /* agent names, as NIXL_NAME_MAX */
#define LF_PROV_MAX 32  /* provider names in the conn info */

/* Control messages: header, then a body by type. */
#define LF_MSG_MAGIC 0x314d464cu /* "LFM1" */
#define LF_MSG_VERSION 1
#define LF_HDR_SIZE 40
#define LF_NOTIF_BODY 32
#define LF_CANCEL_BODY 16
#define LF_HELLO_BODY 16
#define LF_ACK_BODY 8
#define LF_FENCE_BODY 24
#define LF_FENCE_COUNTED 1u /* FENCE: answer once this many writes of the tag were counted */
#define LF_NOTIF_ACK 1u     /* NOTIF: answer (FENCE_ACK) once it is released */
/* The fixed part of the conn info (lf_conn.c). */
#define LF_CONN_FIXED 24
/* The conn info of the most rails we accept. */
#define LF_CONN_MAX (LF_CONN_FIXED + LF_PROV_MAX + LF_MAX_RAILS * (2 + LF_ADDR_MAX))
#define LF_MSG_MAX (LF_HDR_SIZE + LF_NOTIF_BODY + NIXL_NOTIF_MAX)

#define LF_RX_BUFS 32     /* receive buffers of LF_MSG_MAX on rail 0 */
#define LF_RX_SMALL 64    /* small receive buffers on the other rails (fences, FI_RX_CQ_DATA) */
#define LF_RX_SMALL_SIZE 256
#define LF_TX_BUFS 16     /* control messages in flight */
#define LF_CQ_BATCH 64

enum {
    LF_MSG_HELLO = 1, /* who we are, where we listen, our index for you */
    LF_MSG_ACK = 2,   /* answer to HELLO: our index for you */
    LF_MSG_HEARTBEAT = 3,
    LF_MSG_NOTIF = 4,  /* a notification; released after its writes were counted */
    LF_MSG_CANCEL = 5, /* a canceled request's writes: forget their tag */
    LF_MSG_BYE = 6,    /* the instance is closing */
    LF_MSG_FENCE = 7,  /* answer once the writes before me on this rail landed */
    LF_MSG_FENCE_ACK = 8,
};

/* How same-host peers are carried (intranode parameter); whether they are
 * given to libfabric at all is the core's NIXL_INTRANODE_NETWORK. */
enum {
    LF_INTRANODE_PROVIDER = 1, /* through the provider's own same-host path (efa: its shm) */
    LF_INTRANODE_NIC,      /* through the NIC (efa: FI_EFA_ENABLE_SHM_TRANSFER=0) */
};

/* How a WRITE request knows its data landed at the target. */
enum {
    LF_SYNC_FENCE = 0, /* the provider orders sends after writes: one FENCE per rail, answered */
    LF_SYNC_COUNT,     /* writes carry CQ data; one counted FENCE (or the NOTIF), answered once all landed */
    LF_SYNC_DELIVERY,  /* FI_DELIVERY_COMPLETE on every write */
};

/* Logging through the kit (nixl/backend_util.h), prefixed by the instance's host. */
#define LF_LOG(be, lvl, ...) NIXL_BE_LOG((be)->host, lvl, __VA_ARGS__)
#define LF_ERROR(be, ...) NIXL_BE_ERROR((be)->host, __VA_ARGS__)
#define LF_WARN(be, ...) NIXL_BE_WARN((be)->host, __VA_ARGS__)
#define LF_INFO(be, ...) NIXL_BE_INFO((be)->host, __VA_ARGS__)
#define LF_DEBUG(be, ...) NIXL_BE_DEBUG((be)->host, __VA_ARGS__)

/* Every context we hand the provider starts with this, so a completion
 * says what it completes. */
enum { LF_CTX_DATA = 1, LF_CTX_TX, LF_CTX_RX };
typedef struct lf_ctx {
    struct fi_context2 fctx; /* first: FI_CONTEXT / FI_CONTEXT2 room */
    uint32_t kind;
    uint32_t rail;
} lf_ctx_t;

struct lf_req;
struct lf_conn;

/* One data operation in flight.  Slots belong to the rail, not to the
 * request, so a completion arriving after its request was released (or
 * failed with a dead peer) finds a valid context and is dropped. */
typedef struct lf_slot {
    lf_ctx_t c;
    struct lf_req *req; /* NULL once the request let go of it */
    uint32_t gen;       /* the request's post generation when posted */
    uint8_t busy;       /* handed to the provider, not completed */
    uint8_t read;
    struct lf_slot *next_free;
} lf_slot_t;

/* A registered buffer control messages are copied into when the provider
 * wants local descriptors (FI_MR_LOCAL); others send from the message. */
typedef struct lf_txbuf {
    uint8_t *buf;
    void *desc[LF_MAX_RAILS];
    struct fid_mr *mr[LF_MAX_RAILS];
    struct lf_txbuf *next_free;
} lf_txbuf_t;

/* A control message: queued, then in flight with itself as the context.
 * The header's indices are filled when it is handed to the provider (the
 * peer's index for us may not be known when it is queued). */
typedef struct lf_cmsg {
    lf_ctx_t c; /* first */
    struct lf_cmsg *next;
    struct lf_conn *conn;
    struct lf_req *req; /* a request's notification: its send completes the request */
    uint32_t req_gen;
    uint8_t type;
    uint8_t rail;  /* ours */
    uint8_t rrail; /* the peer's: any of its rails (fences go pair by pair) */
    int orphan;        /* its connection went down while it was in flight */
    lf_txbuf_t *txbuf; /* FI_MR_LOCAL: the copy the provider reads */
    size_t len;        /* of data, header included */
    uint8_t data[];
} lf_cmsg_t;

typedef struct lf_rxbuf {
    lf_ctx_t c;
    uint8_t *buf;
    size_t cap;
    void *desc;
    int posted;
} lf_rxbuf_t;

typedef struct lf_rail {
    unsigned index;
    struct fi_info *info; /* our copy */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    int wait_fd; /* -1: the CQ has no file descriptor to block on */
    uint8_t addr[LF_ADDR_MAX];
    size_t addr_len;
    uint64_t next_key; /* requested keys: unique per domain */
    lf_slot_t *slots;
    lf_slot_t *free_slots;
    unsigned nslots, nfree;
    lf_rxbuf_t *rx;
    unsigned nrx;
    uint8_t *rx_mem;
    struct fid_mr *rx_mr;
    int eagain; /* the last post hit -FI_EAGAIN: progress before posting again */
    unsigned rx_missing; /* receive buffers that could not be posted again yet */
    /* The NIC's PCI address when fi_info gave one (nic->bus_attr): its
     * place in the topology. */
    int has_pci;
    uint32_t pci_domain;
    uint8_t pci_bus, pci_dev, pci_func;
} lf_rail_t;

typedef enum {
    LF_CONN_IDLE = 0, /* known from metadata, not contacted */
    LF_CONN_HELLO,    /* HELLO sent, no answer yet */
    LF_CONN_UP,
    LF_CONN_DOWN, /* dead, closed or unreachable: down_status says which;
                   * TIMEOUT (handshake unanswered): the next use retries */
} lf_conn_state_t;

/* Writes counted under one tag at the target. */
typedef struct lf_tag {
    uint32_t tag;
    uint64_t seen;
    uint64_t expect; /* UINT64_MAX until the NOTIF or CANCEL says */
    int cancel;      /* forget the entry once seen reaches expect */
    int fence;       /* a counted FENCE waits: answer it, then forget the entry */
    uint64_t fence_id;
} lf_tag_t;

/* A received notification waiting for its writes and its turn. */
typedef struct lf_rnotif {
    struct lf_rnotif *next;
    uint64_t seq;
    uint64_t expect;
    uint64_t fence_id; /* answered on release when ack is set */
    int ack;
    uint32_t tag;
    size_t len;
    uint8_t msg[];
} lf_rnotif_t;


/* One remote instance, shared by every peer_load of it and by the HELLOs
 * it sent us.  Indices are never reused: a late message or write carrying
 * an old index cannot land on another connection. */
typedef struct lf_conn {
    uint32_t idx;  /* ours for them: they stamp it on what they send us */
    uint32_t ridx; /* theirs for us */
    int have_ridx;
    uint64_t inst;
    char name[LF_NAME_MAX + 1]; /* from their HELLO; "" until then */
    lf_conn_state_t state;
    nixl_status_t down_status;
    unsigned refs; /* peer_load outputs */
    int used;      /* ever contacted or contacted us: kept until destroy */
    unsigned rnrails;
    uint8_t raddr[LF_MAX_RAILS][LF_ADDR_MAX];
    uint16_t ralen[LF_MAX_RAILS];
    int av_done;
    /* Every peer rail in every local rail's address vector: the address of
     * their rail j on our rail r is fa[r * rnrails + j] (lf_conn_addr). */
    fi_addr_t *fa;
    uint64_t since_ns;          /* entered the current state */
    uint64_t last_rx_ns, last_tx_ns;
    int hb_queued; /* a heartbeat waits in the send queue */
    /* handshakes tried again after one went unanswered (TIMEOUT) */
    uint64_t retries, retry_quiet, retry_log_ns;
    int down_retry;  /* reset (lf_conn_reset): the next use shakes hands again */
    int down_silent; /* gone for silence alone: tried again 2 x peer timeout later */
    int closed;    /* it said BYE */
    /* sending */
    uint32_t next_tag;
    uint64_t next_seq;
    uint64_t next_fence;
    /* receiving */
    uint64_t rx_next_seq;
    lf_tag_t *tags;
    size_t ntags, ctags;
    lf_rnotif_t *pend; /* by seq */
} lf_conn_t;

/* One piece of a request on one rail, resolved at prepare. */
typedef struct lf_op {
    uint64_t laddr;
    uint64_t raddr; /* virtual address or offset, as the peer's MR mode wants */
    uint64_t len;
    uint64_t key;
    void *desc;
    uint32_t rail;  /* ours */
    uint32_t rrail; /* the peer's: the rail its key belongs to */
} lf_op_t;

typedef enum {
    LF_REQ_IDLE = 0,
    LF_REQ_RUN,  /* operations being posted or in flight */
    LF_REQ_SYNC, /* data done: fences answered and the notification sent, soon */
    LF_REQ_DONE,
    LF_REQ_FAILED,
} lf_req_state_t;

typedef struct lf_req {
    nixl_be_req_t hdr; /* first: the core sees only this */
    struct lf_be *be;
    lf_conn_t *conn;
    nixl_op_t op;
    lf_op_t *ops;
    size_t nops;
    uint32_t gen;
    lf_req_state_t state;
    nixl_status_t err;
    size_t next;     /* next op to post */
    size_t inflight; /* posted, not completed, this generation */
    uint32_t tag;
    int use_data;
    uint64_t posted_data; /* writes posted with remote CQ data */
    int canceling;        /* released or canceled in flight: waiting for posted operations */
    uint64_t cancel_ns;   /* when canceling (or a cancel that came too late) began */
    int cancel_late;      /* xfer_cancel found the notification out: it runs on, bounded */
    int forget_owed;      /* canceled: tell the peer to forget the tag once it ended */
    int has_stale;        /* operations of an older generation may still complete */
    uint8_t *notif;
    size_t notif_len, notif_cap;
    int has_notif;
    lf_cmsg_t *notif_msg; /* queued, not yet handed to the provider */
    int notif_wait;       /* the notification's send has not completed */
    int notif_ack;        /* the NOTIF doubles as the fence (count mode) */
    unsigned fence_wait;  /* fences not answered yet */
    uint64_t fence_id;
    uint32_t rails_used;  /* our rails that carried writes of this post */
    uint32_t pairs_used[LF_MAX_RAILS]; /* by our rail: the peer's rails its writes went to */
    void *cuda_ctx;       /* local VRAM: posted with this context bound (any thread) */
    const char *cause;    /* hdr.fallback: why the provider stages the bytes (counted at post) */
    struct lf_req *anext, *aprev;
    int on_list;
} lf_req_t;

/* rkey_load output. */
typedef struct lf_rmd {
    lf_conn_t *conn;
    uint64_t addr, len;
    int virt_addr;
    int no_hmem;                 /* VRAM the owner's provider could not register: no rail */
    unsigned nrails;             /* the owner's rails */
    uint32_t rails;              /* the owner's rails that have a key */
    uint64_t keys[LF_MAX_RAILS]; /* by the owner's rail index */
} lf_rmd_t;

/* reg output.  Arrays by rail index; only the rails in 'rails' hold a
 * registration (a GPU's local rails, a NUMA node's, or all). */
typedef struct lf_reg {
    uint64_t addr, len;
    uint32_t rails; /* 0: VRAM without CUDA HMEM, registered nowhere (no_hmem) */
    int no_hmem;
    int cuda_ipc;   /* VRAM with a legacy CUDA IPC handle (not cuMemCreate memory) */
    void *cuda_ctx; /* VRAM: the context the core recorded */
    struct fid_mr *mr[LF_MAX_RAILS];
    void *desc[LF_MAX_RAILS];
    uint64_t key[LF_MAX_RAILS];
} lf_reg_t;

typedef struct lf_be {
    const nixl_host_services_t *host;
    pthread_mutex_t lock;

    /* parameters */
    char prov_param[64];
    char iface_param[256];
    int use_thread;
    uint64_t hb_ns, timeout_ns;
    uint64_t stripe_min;
    unsigned max_inflight;
    int rails_local;      /* rails=local: regions only on the rails near their memory */
    char topo_xml[256];   /* topo_xml: hwloc XML instead of this host's topology */
    int intranode;        /* LF_INTRANODE_*: same-host peers through the provider or the NIC */

    /* provider and its modes, the same on every rail */
    char prov_name[64];
    char path_write[48], path_read[48];
    uint32_t addr_format;
    int virt_addr, prov_key, mr_local, mr_endpoint, rx_cq_data;
    uint64_t dc_flag; /* FI_DELIVERY_COMPLETE when sync is LF_SYNC_DELIVERY */
    int dc_ok;        /* the provider takes FI_DELIVERY_COMPLETE */
    int sync;
    char sync_param[16];
    unsigned tag_bits; /* remote CQ data: [conn index | tag] */
    unsigned idx_bits;
    uint64_t max_msg;
    unsigned nrails;
    lf_rail_t rails[LF_MAX_RAILS];
    uint32_t all_rails;
    /* FI_HMEM with CUDA: VRAM registered with fi_mr_regattr (iface CUDA).
     * Without it VRAM registrations succeed but reach nothing. */
    int hmem;
    int cuda_driver; /* this process has a CUDA driver: FI_HMEM is worth asking for */
    /* Provider shm with FI_HMEM: which protocol it picks is known from
     * what we pass (lf_xfer.c, lf_shm_path), and named in the path. */
    int shm_hmem;
    int shm_cuda_ipc;   /* libfabric's CUDA IPC is on: one GPU, or peer access between all */
    int shm_ipc_landed; /* shm completes a CUDA IPC copy once it landed (lf_shm_ipc_lands) */
    uint32_t prov_version; /* fabric_attr->prov_version (shm: major*100+minor, revision*10) */
    char path_ipc_write[64], path_ipc_read[64], path_sar_write[64], path_sar_read[64];
    /* Locality of the rails; NULL when every region goes on every rail
     * (rails=all, or no rail has a PCI address). */
    lf_topo_t *topo;

    uint64_t inst; /* this instance, random */
    char agent_name[LF_NAME_MAX + 1];
    size_t agent_name_len;

    /* control messages out (rail 0) */
    lf_cmsg_t *txq_head, **txq_tail; /* waiting */
    lf_cmsg_t *tx_flight;            /* handed to the provider */
    unsigned tx_inflight;            /* of them, not orphaned */
    lf_txbuf_t *tx_free;
    lf_txbuf_t **txbufs; /* every one ever made, freed at destroy */
    size_t ntxbufs;

    lf_conn_t **conns;
    size_t nconns, cconns;

    lf_req_t *active; /* requests running or sending their notification */


    uint64_t next_tick_ns;
    uint64_t last_event_ns;
    _Atomic uint64_t app_poll_ns; /* an op progressed at this time */
    _Atomic uint64_t app_gap_ns;  /* ... this long after the op before */

    pthread_t thread;
    int thread_started;
    _Atomic int stop;
    int epfd, evfd;
    int closing;
} lf_be_t;

/* lf_rail.c */
/* 1 when the libfabric whose variables are params (fi_getparams)
 * completes shm's CUDA IPC copies only once they landed. */
int lf_shm_ipc_lands(const struct fi_param *params, int n);
/* Choose the provider and its domains, open one endpoint per domain. */
nixl_status_t lf_rails_open(lf_be_t *be);
void lf_rails_close(lf_be_t *be);
/* The rails as lf_topo sees them (domain names point into the rails). */
void lf_rails_topo(const lf_be_t *be, lf_topo_rail_t *out);
/* Load the rails' locality when the policy wants it (after lf_rails_open). */
nixl_status_t lf_rails_locality(lf_be_t *be);
nixl_status_t lf_rx_post(lf_be_t *be, lf_rail_t *rail, lf_rxbuf_t *rb);
/* Register a buffer of ours (FI_MR_LOCAL), bound to the endpoint if the
 * provider wants that; 0 or a negative fi_errno. */
int lf_mr_local(lf_be_t *be, lf_rail_t *r, void *buf, size_t len, uint64_t access, struct fid_mr **out);
/* Provider error -> status, for data operations.  -FI_ECANCELED is the
 * provider flushing operations (endpoint teardown, a failed peer): not a
 * cancel by the caller, so XFER_FAILED; lf_xfer.c makes it PEER_GONE when
 * the peer is known dead. */
nixl_status_t lf_status_of(int fi_err);
int lf_err_is_peer_gone(int fi_err);

/* lf_mem.c */
/* The rails a region is registered on, by the rails policy and its memory's
 * place (GPU by PCI bus id, host memory by NUMA node). */
uint32_t lf_reg_rails(lf_be_t *be, const nixl_be_region_t *region);
nixl_status_t lf_reg(void *be, const nixl_be_region_t *region, void **md_out);
void lf_dereg(void *be, void *md);
nixl_status_t lf_rkey_pack(void *be, void *md, void *buf, size_t *len);
nixl_status_t lf_rkey_load(void *be, void *peer, const nixl_be_region_t *region, const void *rkey, size_t rkey_len,
                           void **rmd_out);
void lf_rkey_unload(void *be, void *rmd);

/* lf_conn.c */
/* The address of the peer's rail j in the address vector of our rail r. */
static inline fi_addr_t lf_conn_addr(const lf_conn_t *c, unsigned r, unsigned j)
{
    return c->fa[(size_t)r * c->rnrails + j];
}
nixl_status_t lf_conn_pack(void *be, void *buf, size_t *len);
nixl_status_t lf_peer_open(void *be, const nixl_be_peer_t *peer, const void *conn, size_t conn_len, void **peer_out);
void lf_peer_unload(void *be, void *peer);
nixl_status_t lf_peer_connect(void *be, void *peer);
int lf_peer_alive(void *be, void *peer);
/* Parsed connection info (exposed for tests). */
typedef struct lf_conn_info {
    uint64_t inst;
    uint32_t addr_format;
    char prov[LF_PROV_MAX + 1];
    unsigned nrails;
    const uint8_t *addr[LF_MAX_RAILS];
    uint16_t alen[LF_MAX_RAILS];
} lf_conn_info_t;
nixl_status_t lf_conn_parse(const void *buf, size_t len, lf_conn_info_t *out);
size_t lf_conn_info_size(const lf_be_t *be);
void lf_conn_info_write(const lf_be_t *be, uint8_t *p);
/* The connection of a remote instance, created from info when unknown. */
nixl_status_t lf_conn_get(lf_be_t *be, const lf_conn_info_t *info, lf_conn_t **out);
/* Make the connection usable: addresses in the AVs, HELLO queued. */
nixl_status_t lf_conn_use(lf_be_t *be, lf_conn_t *c);
/* The connection is gone: every request on it fails with st. */
void lf_conn_down(lf_be_t *be, lf_conn_t *c, nixl_status_t st, const char *why);
/* Tear the connection down so the provider lets go of every operation on
 * it (requests on it fail NIXL_ERR_XFER_FAILED, a canceled one
 * NIXL_ERR_CANCELED); the next use shakes hands again. */
void lf_conn_reset(lf_be_t *be, lf_conn_t *c, const char *why);
/* Heartbeats and deadlines. */
void lf_conn_tick(lf_be_t *be, uint64_t now);
void lf_conn_on_hello(lf_be_t *be, const uint8_t *msg, size_t len);
void lf_conn_on_ack(lf_be_t *be, lf_conn_t *c, const uint8_t *msg);
void lf_conns_free(lf_be_t *be);

/* lf_ctrl.c */
lf_cmsg_t *lf_cmsg_new(lf_conn_t *c, uint8_t type, size_t body_len);
void lf_txq_push(lf_be_t *be, lf_cmsg_t *m);
/* Hand queued messages to the provider while buffers last. */
void lf_txq_flush(lf_be_t *be);
/* Drop every queued message of c (it went down); requests waiting on
 * their notification are failed by the caller. */
void lf_txq_drop_conn(lf_be_t *be, lf_conn_t *c);
/* Free what is queued and in flight (endpoints closed, or closing). */
void lf_txq_free(lf_be_t *be);
nixl_status_t lf_txbufs_init(lf_be_t *be);
void lf_txbufs_free(lf_be_t *be);
void lf_tx_done(lf_be_t *be, lf_cmsg_t *m, int err);
/* A received message (rx buffer contents). */
void lf_ctrl_on_message(lf_be_t *be, const uint8_t *msg, size_t len);
/* A write with remote CQ data landed. */
void lf_ctrl_on_write_data(lf_be_t *be, uint64_t data);
/* Queue a NOTIF for c (its sequence number is given when it leaves);
 * ack: the peer answers fence_id once it released it. */
lf_cmsg_t *lf_notif_msg(lf_be_t *be, lf_conn_t *c, const void *msg, size_t len, uint32_t tag, uint64_t expect,
                        int ack, uint64_t fence_id);
nixl_status_t lf_notif_send(void *be, void *peer, const void *msg, size_t len);
void lf_conn_rx_reset(lf_conn_t *c);
/* A HELLO from a peer whose connection we still had up: it reset its side,
 * so its notifications numbered below peer_seq belong to requests it has
 * already ended.  Those held here are dropped (with their write counts),
 * later copies fall below rx_next_seq (duplicates), and the ones after
 * them are no longer held behind a notification lost with the old
 * connection. */
void lf_conn_rx_resync(lf_be_t *be, lf_conn_t *c, uint64_t peer_seq);
/* Remote CQ data of conn index idx and tag. */
uint64_t lf_data_make(const lf_be_t *be, uint32_t idx, uint32_t tag);

/* lf_xfer.c */
nixl_status_t lf_xfer_prepare(void *be, const nixl_be_xfer_t *xfer, nixl_be_req_t **req_out);
nixl_status_t lf_xfer_post(void *be, nixl_be_req_t *req, const void *notif, size_t notif_len);
nixl_status_t lf_xfer_status(void *be, nixl_be_req_t *req);
void lf_xfer_release(void *be, nixl_be_req_t *req);
void lf_xfer_cancel(void *be, nixl_be_req_t *req);
/* Over shm with FI_HMEM: the request's path (and fallback, cause) from the
 * protocol shm picks; all_ipc: every local region has a legacy IPC handle. */
void lf_shm_path(const lf_be_t *be, lf_req_t *r, const nixl_be_xfer_t *x, int all_ipc);
/* Post what the windows allow for every active request, those of local
 * VRAM with their context bound.  in_op: called from an op (which posts
 * even when the bind failed; the progress thread, in_op 0, does not). */
void lf_reqs_pump(lf_be_t *be, int in_op);
void lf_req_data_done(lf_be_t *be, lf_slot_t *s, int err);
/* A request's notification was sent (err 0) or failed. */
void lf_req_notif_done(lf_be_t *be, lf_req_t *r, uint32_t gen, int err);
/* The peer answered fence id (conn c). */
void lf_req_fence_done(lf_be_t *be, lf_conn_t *c, uint64_t id);
/* Queue one FENCE per rail pair that carried writes (pairs: by our rail,
 * the peer's rails) for fence id; with counted, one FENCE on rail 0
 * answered once expect writes of tag landed. */
unsigned lf_fence_queue(lf_be_t *be, lf_conn_t *c, const uint32_t *pairs, uint64_t id, int counted, uint32_t tag,
                        uint64_t expect);
/* Fail every active request on c. */
void lf_reqs_fail_conn(lf_be_t *be, lf_conn_t *c, nixl_status_t st);
/* Canceled requests whose operations outlived the peer timeout: reset
 * their connections (the bound on a deadline's cancel). */
void lf_reqs_tick(lf_be_t *be, uint64_t now);

/* lf_fi.c */
/* Load libfabric (once per process; later calls return the first answer).
 * NIXL_ERR_NOT_SUPPORTED when the library or one of its functions is
 * missing, logged once through host.  Until it succeeded the fi_*
 * functions the backend calls fail (-FI_ENOSYS, NULL). */
nixl_status_t lf_fi_load(const nixl_host_services_t *host);

/* lf_progress.c */
/* Read every CQ, post what waits; returns completions seen.  in_op as
 * for lf_reqs_pump. */
size_t lf_progress_locked(lf_be_t *be, int in_op);
/* Progress from an op: also counts as the application driving us. */
void lf_progress_op_locked(lf_be_t *be);
nixl_status_t lf_progress(void *be);
nixl_status_t lf_thread_start(lf_be_t *be);
void lf_thread_stop(lf_be_t *be);

#endif
