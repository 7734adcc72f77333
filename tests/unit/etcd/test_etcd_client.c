/*
 * test_etcd_client.c - the etcd client (src/md/etcd.c) against a real etcd
 * started for this test: every call, binary keys, transactions, leases and
 * their expiry seen through the watch, failover past a dead endpoint,
 * interruption, and what a call and the watch report once etcd is gone.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../integration/etcd/etcd_server.h"
#include "md/etcd.h"
#include "util/log.h"
#include "util/time.h"

#include "../../common/test_check.h"

typedef struct seen {
    int puts, deletes, created;
    char last_key[64];
} seen_t;

static void on_msg(void *arg, const nixl_etcd_watch_msg_t *m)
{
    seen_t *s = arg;
    s->created += m->created;
    for (size_t i = 0; i < m->num_events; i++) {
        if (m->events[i].type == NIXL_ETCD_EVENT_PUT)
            s->puts++;
        else
            s->deletes++;
        snprintf(s->last_key, sizeof(s->last_key), "%.*s", (int)m->events[i].kv.key_len,
                 (const char *)m->events[i].kv.key);
    }
}

/* Waits until cond holds or ms pass, delivering watch messages. */
#define WAIT_FOR(c, s, cond, ms)                                                                                   \
    do {                                                                                                           \
        uint64_t end_ = nixl_now_ns() + (uint64_t)(ms) * 1000000ull;                                               \
        while (!(cond) && nixl_now_ns() < end_)                                                                    \
            nixl_etcd_wait((c), 50, on_msg, (s));                                                                  \
    } while (0)

static nixl_etcd_op_t op_key(nixl_etcd_op_type_t t, const char *k)
{
    return (nixl_etcd_op_t){.type = t, .key = k, .key_len = strlen(k)};
}

static void test_prefix_end(void)
{
    uint8_t end[8];
    size_t n;
    nixl_etcd_prefix_end("a/b/", 4, end, &n);
    CHECK(n == 4 && !memcmp(end, "a/b0", 4));
    const uint8_t ff[] = {'a', 0xff, 0xff};
    nixl_etcd_prefix_end(ff, 3, end, &n);
    CHECK(n == 1 && end[0] == 'b');
    const uint8_t all[] = {0xff, 0xff};
    nixl_etcd_prefix_end(all, 2, end, &n);
    CHECK(n == 1 && end[0] == 0);
}

static void test_kv(nixl_etcd_t *c)
{
    /* A key with every kind of byte: base64 carries it. */
    const uint8_t bkey[] = {'t', '/', 0x00, 0xff, '"', '\\', '\n'};
    const char value[] = "value \"with\" quotes\n";
    nixl_etcd_op_t put = {.type = NIXL_ETCD_OP_PUT, .key = bkey, .key_len = sizeof(bkey), .value = value,
                          .value_len = sizeof(value) - 1};
    CHECK_ST(nixl_etcd_put(c, &put), NIXL_OK);
    nixl_etcd_reply_t r;
    nixl_etcd_op_t get = {.type = NIXL_ETCD_OP_RANGE, .key = bkey, .key_len = sizeof(bkey)};
    CHECK_ST(nixl_etcd_range(c, &get, &r), NIXL_OK);
    CHECK(r.num_kvs == 1 && r.kvs[0].key_len == sizeof(bkey) && !memcmp(r.kvs[0].key, bkey, sizeof(bkey)));
    CHECK(r.num_kvs == 1 && r.kvs[0].value_len == sizeof(value) - 1 && !memcmp(r.kvs[0].value, value, sizeof(value) - 1));
    CHECK(r.header.revision > 0 && r.header.cluster_id != 0);
    nixl_etcd_reply_free(&r);

    /* Prefix range, keys only. */
    nixl_etcd_op_t p1 = op_key(NIXL_ETCD_OP_PUT, "p/1"), p2 = op_key(NIXL_ETCD_OP_PUT, "p/2");
    p1.value = "x";
    p1.value_len = 1;
    CHECK_ST(nixl_etcd_put(c, &p1), NIXL_OK);
    CHECK_ST(nixl_etcd_put(c, &p2), NIXL_OK);
    uint8_t end[8];
    size_t elen;
    nixl_etcd_prefix_end("p/", 2, end, &elen);
    nixl_etcd_op_t range = {.type = NIXL_ETCD_OP_RANGE, .key = "p/", .key_len = 2, .end = end, .end_len = elen,
                            .keys_only = 1};
    CHECK_ST(nixl_etcd_range(c, &range, &r), NIXL_OK);
    CHECK(r.num_kvs == 2 && r.count == 2);
    CHECK(r.num_kvs == 2 && r.kvs[0].value == NULL);
    nixl_etcd_reply_free(&r);

    /* An absent key: no kvs, not an error. */
    nixl_etcd_op_t absent = op_key(NIXL_ETCD_OP_RANGE, "no/such/key");
    CHECK_ST(nixl_etcd_range(c, &absent, &r), NIXL_OK);
    CHECK(r.num_kvs == 0);
    nixl_etcd_reply_free(&r);

    int64_t deleted = -1;
    nixl_etcd_op_t del = {.type = NIXL_ETCD_OP_DELETE, .key = "p/", .key_len = 2, .end = end, .end_len = elen};
    CHECK_ST(nixl_etcd_delete(c, &del, &deleted), NIXL_OK);
    CHECK(deleted == 2);
}

static void test_txn(nixl_etcd_t *c)
{
    nixl_etcd_op_t put = op_key(NIXL_ETCD_OP_PUT, "txn/k");
    put.value = "1";
    put.value_len = 1;
    nixl_etcd_op_t get = op_key(NIXL_ETCD_OP_RANGE, "txn/k");
    nixl_etcd_cmp_t absent = {.target = NIXL_ETCD_CMP_CREATE, .key = "txn/k", .key_len = 5, .value = 0};
    nixl_etcd_reply_t r;
    CHECK_ST(nixl_etcd_txn(c, &absent, 1, &put, 1, &get, 1, &r), NIXL_OK);
    CHECK(r.succeeded == 1 && r.num_kvs == 0);
    nixl_etcd_reply_free(&r);
    CHECK_ST(nixl_etcd_txn(c, &absent, 1, &put, 1, &get, 1, &r), NIXL_OK);
    CHECK(r.succeeded == 0 && r.num_kvs == 1 && r.kvs[0].value_len == 1 && r.kvs[0].value[0] == '1');
    int64_t mod = r.num_kvs ? r.kvs[0].mod_revision : 0;
    nixl_etcd_reply_free(&r);
    nixl_etcd_cmp_t same_mod = {.target = NIXL_ETCD_CMP_MOD, .key = "txn/k", .key_len = 5, .value = mod};
    CHECK_ST(nixl_etcd_txn(c, &same_mod, 1, &put, 1, NULL, 0, &r), NIXL_OK);
    CHECK(r.succeeded == 1);
    nixl_etcd_reply_free(&r);
    /* Several ranges in one transaction, in order. */
    nixl_etcd_op_t gets[2] = {op_key(NIXL_ETCD_OP_RANGE, "txn/k"), op_key(NIXL_ETCD_OP_RANGE, "txn/none")};
    CHECK_ST(nixl_etcd_txn(c, NULL, 0, gets, 2, NULL, 0, &r), NIXL_OK);
    CHECK(r.succeeded == 1 && r.num_kvs == 1);
    nixl_etcd_reply_free(&r);
}

static void test_lease_and_watch(nixl_etcd_t *c)
{
    seen_t s = {0};
    nixl_etcd_reply_t r;
    nixl_etcd_op_t probe = op_key(NIXL_ETCD_OP_RANGE, "w/");
    CHECK_ST(nixl_etcd_range(c, &probe, &r), NIXL_OK);
    int64_t rev = r.header.revision;
    nixl_etcd_reply_free(&r);
    uint8_t end[8];
    size_t elen;
    nixl_etcd_prefix_end("w/", 2, end, &elen);
    CHECK_ST(nixl_etcd_watch_start(c, "w/", 2, end, elen, rev + 1), NIXL_OK);
    WAIT_FOR(c, &s, s.created, 5000);
    CHECK(s.created == 1);

    int64_t id = 0, ttl = 0;
    CHECK_ST(nixl_etcd_lease_grant(c, 2, &id, &ttl), NIXL_OK);
    CHECK(id > 0 && ttl == 2);
    nixl_etcd_op_t put = op_key(NIXL_ETCD_OP_PUT, "w/leased");
    put.lease = id;
    CHECK_ST(nixl_etcd_put(c, &put), NIXL_OK);
    nixl_etcd_op_t plain = op_key(NIXL_ETCD_OP_PUT, "w/plain");
    CHECK_ST(nixl_etcd_put(c, &plain), NIXL_OK);
    WAIT_FOR(c, &s, s.puts == 2, 5000);
    CHECK(s.puts == 2);
    CHECK_ST(nixl_etcd_lease_keepalive(c, id, &ttl), NIXL_OK);
    CHECK(ttl == 2);

    /* No more keep-alives: etcd deletes the key, the watch says so. */
    uint64_t t0 = nixl_now_ns();
    WAIT_FOR(c, &s, s.deletes == 1, 8000);
    CHECK(s.deletes == 1 && !strcmp(s.last_key, "w/leased"));
    fprintf(stderr, "lease of 2 s expired after %.2f s\n", (double)(nixl_now_ns() - t0) / 1e9);
    CHECK_ST(nixl_etcd_lease_keepalive(c, id, &ttl), NIXL_OK);
    CHECK(ttl == 0);
    CHECK_ST(nixl_etcd_lease_revoke(c, id), NIXL_OK); /* already gone: still fine */

    /* Revoking deletes at once. */
    CHECK_ST(nixl_etcd_lease_grant(c, 30, &id, &ttl), NIXL_OK);
    put.lease = id;
    CHECK_ST(nixl_etcd_put(c, &put), NIXL_OK);
    WAIT_FOR(c, &s, s.puts == 3, 5000);
    CHECK_ST(nixl_etcd_lease_revoke(c, id), NIXL_OK);
    WAIT_FOR(c, &s, s.deletes == 2, 5000);
    CHECK(s.deletes == 2);

    /* A put on a lease that does not exist is refused with NOT_FOUND. */
    put.lease = id;
    CHECK_ST(nixl_etcd_put(c, &put), NIXL_ERR_IO);
    CHECK(nixl_etcd_last_code(c) == NIXL_ETCD_CODE_NOT_FOUND);
}

static void test_interrupt(nixl_etcd_t *c)
{
    nixl_etcd_op_t get = op_key(NIXL_ETCD_OP_RANGE, "x");
    nixl_etcd_reply_t r;
    nixl_etcd_interrupt(c);
    CHECK_ST(nixl_etcd_range(c, &get, &r), NIXL_ERR_CANCELED);
    nixl_etcd_resume(c);
    CHECK_ST(nixl_etcd_range(c, &get, &r), NIXL_OK);
    nixl_etcd_reply_free(&r);
    /* A wakeup makes a long wait return early. */
    uint64_t t0 = nixl_now_ns();
    nixl_etcd_wakeup(c);
    seen_t s = {0};
    nixl_etcd_wait(c, 5000, on_msg, &s);
    CHECK(nixl_now_ns() - t0 < 2000000000ull);
}

static void test_etcd_gone(nixl_etcd_t *c, etcd_server_t *srv)
{
    seen_t s = {0};
    CHECK(nixl_etcd_watching(c));
    etcd_server_stop(srv, SIGKILL);
    /* The watch ends with an error and stops. */
    nixl_status_t st = NIXL_OK;
    uint64_t end = nixl_now_ns() + 5000000000ull;
    while (st == NIXL_OK && nixl_now_ns() < end)
        st = nixl_etcd_wait(c, 100, on_msg, &s);
    CHECK(st == NIXL_ERR_IO);
    CHECK(!nixl_etcd_watching(c));
    nixl_etcd_op_t get = op_key(NIXL_ETCD_OP_RANGE, "x");
    nixl_etcd_reply_t r;
    uint64_t t0 = nixl_now_ns();
    st = nixl_etcd_range(c, &get, &r);
    CHECK(st == NIXL_ERR_IO || st == NIXL_ERR_TIMEOUT);
    CHECK(nixl_now_ns() - t0 < 3000000000ull); /* bounded by the timeout */
}

int main(void)
{
    etcd_server_t srv;
    nixl_log_init();
    test_prefix_end();
    int rc = etcd_server_start(&srv, NULL);
    if (rc)
        return rc;
    /* The first endpoint refuses connections: every call fails over. */
    char endpoints[300];
    snprintf(endpoints, sizeof(endpoints), "127.0.0.1:1, %s", srv.url);
    nixl_etcd_t *c;
    CHECK_ST(nixl_etcd_create("", 1000, NULL, &c), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_etcd_create("ftp://x:1", 1000, NULL, &c), NIXL_ERR_INVALID_PARAM);
    nixl_status_t st = nixl_etcd_create(endpoints, 2000, NULL, &c);
    CHECK(st == NIXL_OK);
    if (st != NIXL_OK) {
        etcd_server_cleanup(&srv);
        return 1;
    }
    test_kv(c);
    CHECK(!strcmp(nixl_etcd_endpoint(c), srv.url));
    test_txn(c);
    test_lease_and_watch(c);
    test_interrupt(c);
    test_etcd_gone(c, &srv);
    nixl_etcd_destroy(c);
    etcd_server_cleanup(&srv);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("etcd client: all checks passed\n");
    return 0;
}
