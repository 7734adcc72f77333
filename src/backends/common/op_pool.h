/* op_pool.h - a small pool of threads that runs the operations of jobs
 * (a backend's requests), for backends whose transfers are blocking calls
 * (posix.sync's pread/pwrite).
 *
 * A job is nops operations and a run callback; the pool's threads take the
 * operations of the queued jobs in order, several of one job at once.  The
 * first failure of a job stops what of it has not started; a canceled job
 * starts nothing more.  Everything a job counts is under the pool's lock:
 * a backend reads it only through these calls.
 */
#ifndef NIXL_BACKENDS_COMMON_OP_POOL_H
#define NIXL_BACKENDS_COMMON_OP_POOL_H

#include <stddef.h>

#include "nixl/backend.h"

typedef struct nixl_op_pool nixl_op_pool_t;

typedef struct nixl_op_job {
    /* The owner's: set before the first submit. */
    size_t nops;
    nixl_status_t (*run)(void *ctx, size_t i); /* operation i, on a pool thread; NIXL_OK or the failure */
    void *ctx;
    /* The pool's (under its lock). */
    size_t next, running, left;
    nixl_status_t status;
    int canceled, queued;
    struct nixl_op_job *qnext;
} nixl_op_job_t;

/* nthreads 1..64.  NIXL_OK, NIXL_ERR_NO_MEMORY or NIXL_ERR_BACKEND (no thread could be made). */
nixl_status_t nixl_op_pool_create(unsigned nthreads, nixl_op_pool_t **out);
/* Every job was waited for (nixl_op_pool_wait) before. */
void nixl_op_pool_destroy(nixl_op_pool_t *pool);
/* Start the job from its first operation (a job not in the pool's hands:
 * never submitted, or waited for). */
void nixl_op_pool_submit(nixl_op_pool_t *pool, nixl_op_job_t *job);
/* NIXL_IN_PROG while operations of it run or wait; then NIXL_OK, its first
 * failure, or NIXL_ERR_CANCELED when a cancel left some not run. */
nixl_status_t nixl_op_pool_status(nixl_op_pool_t *pool, nixl_op_job_t *job);
/* Start nothing more of the job; does not block. */
void nixl_op_pool_cancel(nixl_op_pool_t *pool, nixl_op_job_t *job);
/* Cancel, then wait until no thread runs an operation of the job. */
void nixl_op_pool_wait(nixl_op_pool_t *pool, nixl_op_job_t *job);

#endif
