/*
 * reg_pool.h - a batch of registration jobs run by a bounded number of
 * threads made for that batch (none idle between batches), and the
 * NIXL_REG_CONCURRENCY setting that bounds them.
 *
 * The pool knows nothing of regions or backends: a job is an index handed
 * to a function, a lane is the backend it goes to.  Jobs of a serial lane
 * (a backend without NIXL_CAP_REG_MT) never run at the same time as each
 * other; other lanes go on in parallel meanwhile.  Every job is run exactly
 * once whatever the others return: collecting errors and undoing what
 * succeeded is the caller's business.
 */
#ifndef NIXL_CORE_REG_POOL_H
#define NIXL_CORE_REG_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "nixl.h"

/* Lanes are bits of a uint32_t (one per backend of an agent). */
#define NIXL_REG_POOL_LANES 32
/* Derived default: at most this many workers (reg_pool.c says why). */
#define NIXL_REG_AUTO_MAX 64

typedef nixl_status_t (*nixl_reg_job_fn)(void *ctx, size_t job);

typedef struct nixl_reg_batch {
    size_t njobs;
    /* Jobs running at once at most, the calling thread being one of them:
     * workers - 1 threads are made.  1 runs everything on the caller. */
    unsigned workers;
    nixl_reg_job_fn run;
    void *ctx;
    const uint8_t *lane;   /* lane of each job; NULL: all in lane 0 */
    uint32_t serial_lanes; /* bit l: jobs of lane l run one at a time */
    nixl_status_t *status; /* njobs entries: what run() returned for each */
    /* OPTIONAL.  Asked between jobs (at most every few ms): the cap now.
     * Workers numbered at or above it finish their job and leave, so a
     * batch gives cores back when other agents start registering.  The
     * cap only shrinks, and never below 1 (the caller's thread). */
    unsigned (*cap_now)(void *cap_ctx);
    void *cap_ctx;
} nixl_reg_batch_t;

/* Run every job of the batch once and return when all are done.  Threads
 * that cannot be made only mean fewer workers. */
void nixl_reg_pool_run(const nixl_reg_batch_t *batch);

typedef enum {
    NIXL_REG_CAP_AUTO = 0,       /* derived from cores and agents registering now */
    NIXL_REG_CAP_FIXED = 1,      /* NIXL_REG_CONCURRENCY=N */
    NIXL_REG_CAP_PER_BUFFER = 2, /* NIXL_REG_CONCURRENCY=0: one worker per buffer */
} nixl_reg_cap_mode_t;

/* NIXL_REG_CONCURRENCY as a mode; *n_out gets N for NIXL_REG_CAP_FIXED.
 * A value that does not parse is warned about once and means auto. */
nixl_reg_cap_mode_t nixl_reg_cap_mode(unsigned *n_out);
/* The derived cap when 'agents' agents of this host register at once. */
unsigned nixl_reg_cap_auto(unsigned agents);

#endif
