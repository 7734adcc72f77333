/*
 * fake_backend.h - what a test reads back from the fake module backends
 * (fake_backend.c): counters of its registrations, process-wide per module.
 * The test finds them with dlopen(origin, RTLD_NOLOAD) and dlsym of
 * FAKE_COUNTERS_SYM, origin being the path nixl_backends_available reports.
 */
#ifndef NIXL_TEST_FAKE_BACKEND_H
#define NIXL_TEST_FAKE_BACKEND_H

#include <stdint.h>

typedef struct fake_counters {
    uint64_t reg_calls;   /* reg() calls, failed ones included */
    int64_t live;         /* registrations made and not yet deregistered */
    int64_t max_inside;   /* most reg()/dereg() calls running at the same moment */
    uint64_t threads;     /* distinct threads that called reg() (up to 256) */
    int64_t last_tid;     /* thread of the last reg() */
    uint64_t indexed_prepares; /* fake_indexed: indexed requests taken in their own form */
    uint64_t indexed_declined; /* fake_indexed: indexed requests declined (parameter indexed=0) */
} fake_counters_t;

#define FAKE_COUNTERS_SYM "fake_test_counters"
/* Copies the counters; with reset non-zero, zeroes them afterwards. */
typedef void (*fake_counters_fn)(fake_counters_t *out, int reset);

/* A rendezvous instead of a race with the clock: from now on each reg()
 * waits, before its delay, until `inside` calls are inside at once, or
 * `total` calls have entered since the counters were last reset (the last
 * ones of a batch meet no one), or 5 s passed.  So a pool allowing N
 * concurrent calls shows max_inside N however late the machine schedules
 * its threads, and one allowing fewer shows fewer.  inside 0: off. */
#define FAKE_MEET_SYM "fake_test_meet"
typedef void (*fake_meet_fn)(int64_t inside, uint64_t total);

#endif
