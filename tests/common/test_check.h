/*
 * test_check.h - the checks of the unit tests that count failures and go on
 * (a test's main returns non-zero when `failures` is), and their clocks.
 * Included by one .c file per test program: everything here is static.
 */
#ifndef NIXL_TEST_CHECK_H
#define NIXL_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

static int failures;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

/* expr must return the nixl_status_t want (nixl_status_name from nixl.h). */
#define CHECK_ST(expr, want)                                                                     \
    do {                                                                                         \
        nixl_status_t st_ = (expr);                                                              \
        if (st_ != (want)) {                                                                     \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #expr,   \
                    nixl_status_name(st_), nixl_status_name(want));                              \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

static inline uint64_t test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline void test_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

#endif
