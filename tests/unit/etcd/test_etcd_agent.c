/*
 * test_etcd_agent.c - the agent's etcd channel (src/core/md_etcd.c) with
 * several agents in one process and a real etcd behind a dead first
 * endpoint (so every call fails over): a peer that publishes changed
 * metadata is reloaded and older requests turn stale, unchanged metadata
 * reloads nothing, a peer the application invalidated is no longer
 * watched, a second live agent cannot take a name, pending fetches are
 * canceled by destroy, and missing configuration is a clear error.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../integration/etcd/etcd_server.h"
#include "nixl.h"

#define LEN (64u * 1024u)

#include "../../common/test_check.h"

/* Callback outcomes, polled by the test. */
typedef struct result {
    pthread_mutex_t mu;
    int done;
    nixl_status_t st;
} result_t;

static void on_done(nixl_agent_t *agent, const char *peer, nixl_status_t st, void *arg)
{
    result_t *r = arg;
    (void)agent;
    (void)peer;
    pthread_mutex_lock(&r->mu);
    r->done = 1;
    r->st = st;
    pthread_mutex_unlock(&r->mu);
}

static nixl_status_t result_wait(result_t *r, unsigned ms)
{
    for (uint64_t end = test_now_ms() + ms;; test_sleep_ms(5)) {
        pthread_mutex_lock(&r->mu);
        int done = r->done;
        nixl_status_t st = r->st;
        pthread_mutex_unlock(&r->mu);
        if (done)
            return st;
        if (test_now_ms() > end)
            return NIXL_IN_PROG;
    }
}

static nixl_etcd_args_t cb_args(result_t *r)
{
    pthread_mutex_init(&r->mu, NULL);
    r->done = 0;
    r->st = NIXL_IN_PROG;
    return (nixl_etcd_args_t){.field_mask = NIXL_ETCD_ARG_CALLBACK, .cb = on_done, .cb_arg = r};
}

static nixl_status_t publish_wait(nixl_agent_t *a)
{
    result_t r;
    nixl_etcd_args_t args = cb_args(&r);
    nixl_status_t st = nixl_md_etcd_publish(a, NULL, &args);
    return st == NIXL_IN_PROG ? result_wait(&r, 10000) : st;
}

static nixl_status_t fetch_wait(nixl_agent_t *a, const char *peer)
{
    result_t r;
    nixl_etcd_args_t args = cb_args(&r);
    nixl_status_t st = nixl_md_etcd_fetch(a, peer, &args);
    return st == NIXL_IN_PROG ? result_wait(&r, 10000) : st;
}

static nixl_agent_t *agent(const char *name)
{
    nixl_agent_t *a = NULL;
    nixl_backend_t *b;
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    if (nixl_agent_create(&cfg, &a) != NIXL_OK || nixl_backend_create(a, "shm", NULL, 0, &b) != NIXL_OK) {
        fprintf(stderr, "cannot create agent %s with shm\n", name);
        exit(1);
    }
    return a;
}

static void reg(nixl_agent_t *a, void *p)
{
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)p, .len = LEN};
    nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &d};
    CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_OK);
}

static nixl_status_t read_from(nixl_agent_t *a, void *local, const char *peer, void *remote, nixl_xfer_t **x)
{
    nixl_desc_t l = {.addr = (uint64_t)(uintptr_t)local, .len = LEN};
    nixl_desc_t r = {.addr = (uint64_t)(uintptr_t)remote, .len = LEN};
    nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &l}, rl = {NIXL_MEM_DRAM, 1, &r};
    return nixl_xfer_create(a, NIXL_OP_READ, &ll, &rl, peer, NULL, x);
}

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (uint64_t end = test_now_ms() + 10000; st == NIXL_IN_PROG && test_now_ms() < end;)
        st = nixl_xfer_status(x);
    return st;
}

/* Post x until it fails with want or ms pass (the reload runs on the
 * agent's etcd thread). */
static int becomes(nixl_xfer_t *x, nixl_status_t want, unsigned ms)
{
    for (uint64_t end = test_now_ms() + ms; test_now_ms() < end; test_sleep_ms(10))
        if (run(x) == want)
            return 1;
    return 0;
}

static void test_reload(void)
{
    nixl_agent_t *a = agent("ua"), *b = agent("ub");
    void *a1, *a2, *bl;
    nixl_mem_alloc(LEN, &a1);
    nixl_mem_alloc(LEN, &a2);
    nixl_mem_alloc(LEN, &bl);
    memset(a1, 0x11, LEN);
    memset(a2, 0x22, LEN);
    reg(a, a1);
    reg(b, bl);
    CHECK_ST(publish_wait(a), NIXL_OK);
    CHECK_ST(fetch_wait(b, "ua"), NIXL_OK);
    nixl_xfer_t *x, *y;
    CHECK_ST(read_from(b, bl, "ua", a1, &x), NIXL_OK);
    CHECK_ST(run(x), NIXL_OK);
    CHECK(((unsigned char *)bl)[LEN - 1] == 0x11);

    /* The same metadata again: nothing to reload, x stays good. */
    CHECK_ST(publish_wait(a), NIXL_OK);
    test_sleep_ms(500);
    CHECK_ST(run(x), NIXL_OK);

    /* Changed metadata: the watch reloads it, x turns stale, new requests
     * see the new region. */
    reg(a, a2);
    uint64_t t0 = test_now_ms();
    CHECK_ST(publish_wait(a), NIXL_OK);
    CHECK(becomes(x, NIXL_ERR_STALE, 5000));
    fprintf(stderr, "reloaded within %llu ms of the publish\n", (unsigned long long)(test_now_ms() - t0));
    nixl_xfer_release(x);
    CHECK_ST(read_from(b, bl, "ua", a2, &y), NIXL_OK);
    CHECK_ST(run(y), NIXL_OK);
    CHECK(((unsigned char *)bl)[0] == 0x22);
    nixl_xfer_release(y);

    /* Invalidated by the application: no longer watched, not reloaded. */
    CHECK_ST(nixl_md_invalidate_remote(b, "ua"), NIXL_OK);
    nixl_desc_t d1 = {.addr = (uint64_t)(uintptr_t)a1, .len = LEN};
    nixl_dlist_t l1 = {NIXL_MEM_DRAM, 1, &d1};
    CHECK_ST(nixl_mem_deregister(a, &l1, NULL), NIXL_OK);
    CHECK_ST(publish_wait(a), NIXL_OK);
    test_sleep_ms(700);
    CHECK_ST(nixl_md_check_remote(b, "ua"), NIXL_ERR_UNKNOWN_PEER);
    /* A fetch takes it back. */
    CHECK_ST(fetch_wait(b, "ua"), NIXL_OK);
    CHECK_ST(nixl_md_check_remote(b, "ua"), NIXL_OK);

    nixl_agent_destroy(b);
    nixl_agent_destroy(a);
    nixl_mem_free(a1, LEN);
    nixl_mem_free(a2, LEN);
    nixl_mem_free(bl, LEN);
}

static void test_name_taken_and_cancel(void)
{
    nixl_agent_t *a = agent("dup"), *a2 = agent("dup"), *c = agent("uc");
    CHECK_ST(publish_wait(a), NIXL_OK);
    /* While the first one lives, the second waits out a lease TTL (2 s)
     * plus the timeout for the name, then gives up. */
    result_t r;
    nixl_etcd_args_t args = cb_args(&r);
    uint64_t t0 = test_now_ms();
    CHECK_ST(nixl_md_etcd_publish(a2, NULL, &args), NIXL_IN_PROG);
    CHECK_ST(result_wait(&r, 15000), NIXL_ERR_NAME_TAKEN);
    CHECK(test_now_ms() - t0 >= 2000);

    /* A fetch still waiting when its agent goes is canceled. */
    result_t f;
    nixl_etcd_args_t fa = cb_args(&f);
    CHECK_ST(nixl_md_etcd_fetch(c, "never-there", &fa), NIXL_IN_PROG);
    test_sleep_ms(100);
    nixl_agent_destroy(c);
    CHECK_ST(result_wait(&f, 0), NIXL_ERR_CANCELED);

    /* Once the first is gone, the name is free at once (lease revoked). */
    nixl_agent_destroy(a);
    CHECK_ST(publish_wait(a2), NIXL_OK);
    nixl_agent_destroy(a2);
}

int main(void)
{
    etcd_server_t srv;
    int rc = etcd_server_start(&srv, NULL);
    if (rc)
        return rc;
    char ep[300], ns[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:1,%s", srv.url);
    snprintf(ns, sizeof(ns), "/nixl-unit-%ld", (long)getpid());
    setenv("NIXL_ETCD_NAMESPACE", ns, 1);
    setenv("NIXL_ETCD_LEASE_TTL_S", "2", 1);
    setenv("NIXL_ETCD_TIMEOUT_MS", "1000", 1);

    /* No endpoints: a clear error, no thread. */
    unsetenv("NIXL_ETCD_ENDPOINTS");
    nixl_agent_t *a = agent("noetcd");
    nixl_status_t st = nixl_md_etcd_publish(a, NULL, NULL);
    nixl_agent_destroy(a);
    if (st == NIXL_ERR_NOT_SUPPORTED) {
        printf("SKIP: libnixl was built without etcd support\n");
        etcd_server_cleanup(&srv);
        return 77;
    }
    CHECK_ST(st, NIXL_ERR_INVALID_PARAM);

    setenv("NIXL_ETCD_ENDPOINTS", ep, 1);
    test_reload();
    test_name_taken_and_cancel();
    etcd_server_cleanup(&srv);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("etcd agent: all checks passed\n");
    return 0;
}
