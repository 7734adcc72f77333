/*
 * test_check_exit.h - checks that end the test program at the first
 * failure (exit 1), for tests whose later steps build on the earlier ones
 * (the backend unit tests).  test_check.h is the counting kind; a file
 * includes one or the other.
 */
#ifndef NIXL_TEST_CHECK_EXIT_H
#define NIXL_TEST_CHECK_EXIT_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);              \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* expr must return the nixl_status_t want (nixl_status_name from nixl.h). */
#define CHECK_ST(expr, want)                                                                      \
    do {                                                                                          \
        nixl_status_t st_ = (expr), want_ = (want);                                               \
        if (st_ != want_) {                                                                       \
            fprintf(stderr, "%s:%d: %s = %s, expected %s\n", __FILE__, __LINE__, #expr,           \
                    nixl_status_name(st_), nixl_status_name(want_));                              \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

#endif
