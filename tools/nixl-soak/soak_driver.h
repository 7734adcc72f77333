/*
 * soak_driver.h - the driver side of the soak: its one agent, the peer
 * processes it talks to, the posting threads (soak_work.c) and what they
 * count.  soak.c sets everything up, runs the clock and writes the report.
 */
#ifndef NIXL_SOAK_DRIVER_H
#define NIXL_SOAK_DRIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "soak.h"

#define SOAK_ERR_CODES 128 /* errors counted by -status */
#define SOAK_PATHS 8

typedef struct soak_opts {
    double seconds;
    uint64_t count;
    int peers, threads;
    const char *backend;
    int listen;
    uint64_t seed;
    uint64_t rss_growth; /* bytes of RssAnon growth allowed after warm-up */
    int fd_growth;
    unsigned notif_timeout_ms;
    double warmup;
    int quiet;
    nixl_param_t params[8];
    size_t num_params;
} soak_opts_t;

#define SOAK_COUNTER_FIELDS(X)                                                                   \
    X(ops) X(transfers) X(bytes) X(descs) X(reads) X(writes) X(fanouts) X(reposts) X(two_step)     \
    X(mismatches) X(notif_expected) X(notif_received) X(lost_notifs) X(unexpected_reports)       \
    X(cancels) X(cancels_in_flight) X(cancel_notifs)

typedef struct soak_counters {
#define SOAK_COUNTER_DECL(f) uint64_t f;
    SOAK_COUNTER_FIELDS(SOAK_COUNTER_DECL)
#undef SOAK_COUNTER_DECL
    uint64_t errors[SOAK_ERR_CODES];
    char path[SOAK_PATHS][48];
    uint64_t path_count[SOAK_PATHS];
} soak_counters_t;

/* Reports routed to one thread; a thread waits for the one it expects. */
typedef struct soak_mbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    soak_rep_t *q;
    size_t n, cap;
} soak_mbox_t;

void soak_mbox_init(soak_mbox_t *mb);
void soak_mbox_destroy(soak_mbox_t *mb);
void soak_mbox_push(soak_mbox_t *mb, const soak_rep_t *r);
/* Take the first report of type want (or alt, when nonzero) from peer for
 * op id.  Reports of another op are dropped and counted in *stale.
 * Returns 0, or -1 after timeout_ms. */
int soak_mbox_take(soak_mbox_t *mb, uint32_t want, uint32_t alt, int peer, uint64_t id, unsigned timeout_ms,
                   soak_rep_t *out, uint64_t *stale);

typedef struct soak_peer_h {
    pid_t pid;
    int cmd_fd, rep_fd;
    char name[NIXL_NAME_MAX + 1];
    uint64_t base[SOAK_KINDS]; /* its buffers, in its address space */
    uint64_t stats[8];
    int got_stats;
} soak_peer_h_t;

typedef struct soak_worker {
    int t;
    pthread_t th;
    uint64_t rng;
    uint64_t op_id;
    soak_mbox_t mb;
    soak_counters_t c;
    /* The current op's layout (see soak_work.c). */
    size_t n;
    uint64_t len[SOAK_MAX_DESCS], loff[SOAK_MAX_DESCS], roff[SOAK_MAX_DESCS];
    uint32_t perm[SOAK_MAX_DESCS], idx[SOAK_MAX_DESCS];
    nixl_desc_t ld[SOAK_MAX_DESCS], rd[SOAK_MAX_DESCS];
} soak_worker_t;

typedef struct soak_driver {
    soak_opts_t o;
    nixl_agent_t *agent;
    uint8_t *buf[SOAK_KINDS];
    size_t len;
    soak_peer_h_t peer[SOAK_MAX_PEERS];
    soak_worker_t *w;
    soak_mbox_t main_mb; /* reports for no thread: errors, stats */
    atomic_int stop, failed;
    atomic_uint_fast64_t started, transfers;
    atomic_int error_lines;
} soak_driver_t;

extern soak_driver_t soak;

void *soak_worker_main(void *arg);
/* Say what went wrong (the first few times) and end the run as failed. */
void soak_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
