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
} fake_counters_t;

#define FAKE_COUNTERS_SYM "fake_test_counters"
/* Copies the counters; with reset non-zero, zeroes them afterwards. */
typedef void (*fake_counters_fn)(fake_counters_t *out, int reset);

#endif
