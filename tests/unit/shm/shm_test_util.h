/*
 * shm_test_util.h - what the shm backend tests share: a fake host-services
 * table that records notifications and fallbacks, memory of both kinds
 * (malloc -> shm.cma, memfd MAP_SHARED -> shm.map), and helpers that run a
 * transfer to completion.
 */
#ifndef SHM_TEST_UTIL_H
#define SHM_TEST_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/shm/shm.h"
#include "nixl.h"
#include "nixl/backend.h"

#include "../../common/test_check_exit.h"

typedef struct test_notif {
    char sender[64];
    uint8_t *msg;
    size_t len;
    int hook_ok; /* what the data check said when it arrived */
} test_notif_t;

/* The fake agent.  Like the real one, it takes notifications from any
 * thread (the backend's receiver thread delivers them) into an inbox, and
 * the test takes them into notifs[] (test_take_notifs, test_wait_notifs)
 * as an application calls nixl_notifs_get. */
typedef struct test_host {
    nixl_host_services_t hs;
    char name[64];
    test_notif_t *notifs; /* taken: read without a lock on the test's thread */
    size_t num_notifs, notifs_cap;
    pthread_mutex_t lock; /* the inbox below */
    test_notif_t *inbox;
    size_t inbox_n, inbox_cap, inbox_bytes;
    unsigned fallbacks;
    char last_cause[128];
    /* Called when a notification arrives, before it is recorded: checks the
     * data it announces.  Returns 1 when the data is as expected. */
    int (*on_notif)(void *arg, const void *msg, size_t len);
    void *on_notif_arg;
} test_host_t;

/* One backend instance with its fake host. */
typedef struct test_side {
    test_host_t host;
    void *be;
} test_side_t;

const nixl_backend_ops_t *test_ops(void);
void test_host_init(test_host_t *h, const char *agent_name);
void test_host_clear(test_host_t *h);
/* Set the data check run at each delivery (the receiver thread may be
 * delivering already: set it through here). */
void test_host_set_hook(test_host_t *h, int (*fn)(void *, const void *, size_t), void *arg);
/* Move what the inbox holds into notifs[]; returns num_notifs. */
size_t test_take_notifs(test_host_t *h);
/* Create a backend; params as key/value pairs ending with NULL. */
nixl_status_t test_side_create(test_side_t *s, const char *name, ...);
void test_side_destroy(test_side_t *s);

/* Memory.  Both kinds are page aligned, len rounded to pages. */
typedef struct test_mem {
    uint8_t *p;
    size_t len;
    int fd; /* memfd, or -1 for malloc'd memory */
} test_mem_t;

void test_mem_malloc(test_mem_t *m, size_t len);
void test_mem_memfd(test_mem_t *m, size_t len);
void test_mem_free(test_mem_t *m);

/* Deterministic bytes: value of byte i of pattern seed. */
static inline uint8_t test_pat(uint32_t seed, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u ^ seed * 40503u;
    return (uint8_t)(x ^ (x >> 13) ^ (x >> 21));
}
void test_fill(uint8_t *p, size_t len, uint32_t seed);

/* Everything one side needs to reach a peer's region. */
typedef struct test_remote {
    nixl_be_peer_t who; /* what peer_open was given */
    void *peer;
    void *rmd;
} test_remote_t;

/* Load the target's conn and the rkey of one of its regs into ini. */
void test_load_remote(test_side_t *ini, test_side_t *tgt, void *tgt_md, uint64_t addr, uint64_t len,
                      test_remote_t *out);
void *test_reg(test_side_t *s, const void *addr, size_t len);

/* Prepare, post, wait for completion (polling), release.  Returns the final
 * status; *path_out (may be NULL) gets the path, *first_post_out the status
 * post returned. */
nixl_status_t test_xfer(test_side_t *ini, void *peer, nixl_op_t op, const nixl_be_iov_t *iov, size_t n,
                        const void *notif, size_t notif_len, const char **path_out, nixl_status_t *first_post_out);
/* Poll a posted request until it is no longer in progress (30 s at most). */
nixl_status_t test_wait(test_side_t *ini, nixl_be_req_t *req);
/* Progress s until it holds at least n notifications or timeout_ms passes. */
int test_wait_notifs(test_side_t *s, size_t n, int timeout_ms);
/* A random permutation of 0..n-1. */
uint32_t *test_perm(size_t n, uint32_t seed);
double test_now_s(void);

#endif
