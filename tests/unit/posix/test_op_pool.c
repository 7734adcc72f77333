/*
 * test_op_pool.c - the blocking-call backends' thread pool
 * (src/backends/common/op_pool.h), which posix.sync runs on: every
 * operation of a job runs exactly once; the first failure is the job's
 * status and stops what had not started; a cancel starts nothing more,
 * the job then reads CANCELED (OK when everything had run), and once
 * waited for no thread runs any of it; two jobs at once both finish.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backends/common/op_pool.h"

#include "../../common/test_check.h"

enum { N = 2000 };

typedef struct {
    _Atomic int runs[N];
    _Atomic int total;
    size_t fail_at; /* N: none */
    long sleep_us;
} job_ctx_t;

static nixl_status_t run_op(void *ctx, size_t i)
{
    job_ctx_t *c = ctx;
    atomic_fetch_add(&c->runs[i], 1);
    atomic_fetch_add(&c->total, 1);
    if (c->sleep_us) {
        struct timespec ts = {0, c->sleep_us * 1000};
        nanosleep(&ts, NULL);
    }
    return i == c->fail_at ? NIXL_ERR_XFER_FAILED : NIXL_OK;
}

static nixl_status_t wait_done(nixl_op_pool_t *p, nixl_op_job_t *j)
{
    nixl_status_t st;
    uint64_t t0 = test_now_ms();
    while ((st = nixl_op_pool_status(p, j)) == NIXL_IN_PROG && test_now_ms() - t0 < 20000) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return st;
}

static job_ctx_t ca, cb;

int main(void)
{
    nixl_op_pool_t *p = NULL;
    CHECK_ST(nixl_op_pool_create(0, &p), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_op_pool_create(65, &p), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_op_pool_create(4, &p), NIXL_OK);
    if (!p)
        return 1;

    /* Two jobs at once, every operation once each; then a resubmit. */
    ca.fail_at = cb.fail_at = N;
    nixl_op_job_t ja = {.nops = N, .run = run_op, .ctx = &ca}, jb = {.nops = N, .run = run_op, .ctx = &cb};
    nixl_op_pool_submit(p, &ja);
    nixl_op_pool_submit(p, &jb);
    CHECK_ST(wait_done(p, &ja), NIXL_OK);
    CHECK_ST(wait_done(p, &jb), NIXL_OK);
    int once = 1;
    for (int i = 0; i < N; i++)
        once &= atomic_load(&ca.runs[i]) == 1 && atomic_load(&cb.runs[i]) == 1;
    CHECK(once);
    nixl_op_pool_submit(p, &ja);
    CHECK_ST(wait_done(p, &ja), NIXL_OK);
    CHECK(atomic_load(&ca.total) == 2 * N);

    /* A failure: the job's status; operations not started by then never are. */
    memset(&ca, 0, sizeof(ca));
    ca.fail_at = 10;
    ca.sleep_us = 200;
    nixl_op_pool_submit(p, &ja);
    CHECK_ST(wait_done(p, &ja), NIXL_ERR_XFER_FAILED);
    nixl_op_pool_wait(p, &ja);
    int ran = atomic_load(&ca.total);
    printf("failure at operation 10: %d of %d operations ran\n", ran, N);
    CHECK(ran > 10 && ran < N / 2); /* those already taken by the threads (a few), not the rest */

    /* A cancel: CANCELED, part run, nothing after the wait. */
    memset(&ca, 0, sizeof(ca));
    ca.fail_at = N;
    ca.sleep_us = 500;
    nixl_op_pool_submit(p, &ja);
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    nixl_op_pool_cancel(p, &ja);
    CHECK_ST(wait_done(p, &ja), NIXL_ERR_CANCELED);
    nixl_op_pool_wait(p, &ja);
    ran = atomic_load(&ca.total);
    nanosleep(&ts, NULL);
    CHECK(atomic_load(&ca.total) == ran && ran > 0 && ran < N);
    printf("canceled after 5 ms: %d of %d operations ran\n", ran, N);

    /* A cancel after everything ran: OK. */
    memset(&ca, 0, sizeof(ca));
    ca.fail_at = N;
    nixl_op_pool_submit(p, &ja);
    CHECK_ST(wait_done(p, &ja), NIXL_OK);
    nixl_op_pool_cancel(p, &ja);
    CHECK_ST(nixl_op_pool_status(p, &ja), NIXL_OK);

    nixl_op_pool_destroy(p);
    if (failures) {
        fprintf(stderr, "test_op_pool: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_op_pool: all checks passed\n");
    return 0;
}
