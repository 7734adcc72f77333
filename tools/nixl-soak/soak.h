/*
 * soak.h - what the soak driver (soak.c) and its peer processes
 * (soak_peer.c) share: the pipe protocol, the notification payload, the
 * buffer layout and the byte pattern both sides compute.
 *
 * Layout: every agent holds two registered buffers, one from nixl_mem_alloc
 * (kind MAP: same-host peers copy into its shared mapping) and one from
 * malloc (kind CMA: the kernel copies).  A buffer is one slot of SOAK_SLOT
 * bytes per driver thread, so threads never touch each other's bytes.
 *
 * Pattern: byte o of a peer slot, for a transfer with seed s, is
 * soak_pattern(s, o).  A WRITE fills each local piece with the bytes its
 * remote piece must hold, so the peer checks [start, start+size) of its
 * slot knowing only (seed, start, size): pieces that land in the wrong
 * place, late, twice or not at all show up as mismatches.
 */
#ifndef NIXL_SOAK_H
#define NIXL_SOAK_H

#include <stddef.h>
#include <stdint.h>

#include <nixl.h>

#define SOAK_MAX_SIZE (4u << 20)                  /* largest transfer */
#define SOAK_SLOT (SOAK_MAX_SIZE + (1u << 20))    /* room for a random start */
#define SOAK_MAX_DESCS 4096
#define SOAK_MAX_PEERS 16
#define SOAK_MAX_THREADS 32
#define SOAK_DRIVER_NAME "soak-driver"
#define SOAK_NOTIF_MAGIC 0x4b414f53u /* "SOAK" */

enum { SOAK_KIND_MAP = 0, SOAK_KIND_CMA = 1, SOAK_KINDS = 2 };

/* Driver -> peer commands (one fixed-size message, atomic on a pipe). */
enum {
    SC_FILL = 1, /* write the pattern to a range; reply SR_FILLED */
    SC_VERIFY,   /* check a range against the pattern, then poison it; SR_VERIFIED */
    SC_WARM,     /* record RSS and fds as "after warm-up" */
    SC_EXIT,     /* reply SR_STATS, then exit */
    SC_MD,       /* the driver's metadata blob follows (plen bytes) */
    SC_FETCH,    /* listener mode: the driver fetched our metadata; no reply */
};

/* Peer -> driver reports. */
enum {
    SR_READY = 1, /* plen bytes of metadata blob follow, or a listener port in a */
    SR_FILLED,
    SR_VERIFIED,   /* after SC_VERIFY or a WRITE notification */
    SR_READ_NOTIF, /* notification of a READ; the source range was checked unchanged */
    SR_CANCEL_NOTIF, /* notification of a request released in flight (it completed first) */
    SR_FENCE,
    SR_STATS,
    SR_ERROR, /* a nixl call failed in the peer: status in 'status' */
};

typedef struct soak_cmd {
    uint32_t type;
    int32_t thread;
    uint32_t kind;
    uint32_t pad;
    uint64_t id;
    uint64_t start, size, seed;
    uint64_t plen;
} soak_cmd_t;

typedef struct soak_rep {
    uint32_t type;
    int32_t thread; /* -1: not for a driver thread */
    int32_t peer;
    int32_t status;
    uint64_t id;
    uint64_t mismatches;
    uint64_t first_bad; /* offset in the slot of the first mismatch */
    uint64_t a[8];      /* SR_STATS: see soak_peer.c; SR_READY: listener port */
    uint64_t plen;
} soak_rep_t;

/* What a notification carries.  TYPE: which report it asks of the peer. */
enum { SN_WRITE = 1, SN_READ, SN_CANCEL, SN_FENCE };

typedef struct soak_notif {
    uint32_t magic;
    uint32_t type;
    int32_t thread;
    uint32_t kind;
    uint64_t id;
    uint64_t start, size, seed;
    uint32_t op; /* SN_CANCEL: nixl_op_t of the released request */
    uint32_t pad;
} soak_notif_t;

/* Peer stats (SR_STATS a[]). */
enum {
    SS_RSS_START, SS_RSS_WARM, SS_RSS_END, /* RssAnon, bytes */
    SS_FDS_WARM, SS_FDS_END,
    SS_NOTIFS, SS_BAD_NOTIFS, SS_ERRORS,
};

uint64_t soak_mix64(uint64_t x);
/* Byte o of stream seed; soak_fill writes bytes [o, o+len) of the stream. */
void soak_fill(uint8_t *dst, uint64_t len, uint64_t seed, uint64_t o);
/* Number of bytes of p[0..len) that differ from stream bytes [o, o+len);
 * *first_bad gets the index of the first (unchanged when none). */
uint64_t soak_check(const uint8_t *p, uint64_t len, uint64_t seed, uint64_t o, uint64_t *first_bad);

uint64_t soak_now_ns(void);
void soak_sleep_us(unsigned us);
/* RssAnon of this process in bytes (0 when unreadable) and open fds. */
uint64_t soak_rss_anon(void);
uint64_t soak_rss(void);
int soak_fd_count(void);

int soak_write_all(int fd, const void *buf, size_t len);
int soak_read_all(int fd, void *buf, size_t len);

/* The peer process: serve commands on cmd_fd, report on rep_fd. */
typedef struct soak_peer_args {
    int index;
    const char *backend;
    const nixl_param_t *params;
    size_t num_params;
    int listen; /* metadata through our listener instead of blobs on pipes */
    int cmd_fd, rep_fd;
    int threads;
} soak_peer_args_t;

int soak_peer_main(const soak_peer_args_t *args);

#endif
