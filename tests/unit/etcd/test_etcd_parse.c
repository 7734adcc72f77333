/*
 * test_etcd_parse.c - the etcd reply parser (src/md/etcd_parse.c) on replies
 * as etcd 3.4's gateway writes them, and on every way we know to break
 * them: wrong types, out-of-range integers, bad base64, oversized fields,
 * truncation.  No etcd needed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md/etcd_parse.h"

#include "../../common/test_check.h"

#define HDR "\"header\":{\"cluster_id\":\"324952591200643719\",\"member_id\":\"3319814642761637952\",\"revision\":\"7\",\"raft_term\":\"2\"}"

static nixl_status_t reply(nixl_etcd_reply_kind_t kind, const char *json, nixl_etcd_reply_t *r)
{
    char why[NIXL_ETCD_WHY_MAX];
    why[0] = '\0';
    nixl_status_t st = nixl_etcd_parse_reply(kind, json, strlen(json), r, why);
    if (st != NIXL_OK && !why[0]) {
        fprintf(stderr, "a failure without a reason for %s\n", json);
        failures++;
    }
    return st;
}

/* Must be refused, as malformed (or as an etcd error where noted). */
static void refuse(nixl_etcd_reply_kind_t kind, const char *json, nixl_status_t want)
{
    nixl_etcd_reply_t r;
    nixl_status_t st = reply(kind, json, &r);
    if (st != want) {
        fprintf(stderr, "kind %d accepted or misjudged (%s): %s\n", (int)kind, nixl_status_name(st), json);
        failures++;
        if (st == NIXL_OK)
            nixl_etcd_reply_free(&r);
    }
}

static void test_b64(void)
{
    for (size_t n = 0; n < 40; n++) {
        uint8_t src[40], dst[40];
        char enc[64];
        size_t got;
        for (size_t i = 0; i < n; i++)
            src[i] = (uint8_t)(i * 37 + n);
        nixl_etcd_b64_encode(src, n, enc);
        CHECK(strlen(enc) == nixl_etcd_b64_len(n));
        CHECK(nixl_etcd_b64_decode(enc, strlen(enc), dst, &got) == 0 && got == n && !memcmp(src, dst, n));
    }
    uint8_t out[16];
    size_t n;
    CHECK(nixl_etcd_b64_decode("aGVsbG8=", 8, out, &n) == 0 && n == 5 && !memcmp(out, "hello", 5));
    CHECK(nixl_etcd_b64_decode("aGVsbG8", 7, out, &n) == -1);   /* length */
    CHECK(nixl_etcd_b64_decode("aGV=bG8=", 8, out, &n) == -1);  /* padding inside */
    CHECK(nixl_etcd_b64_decode("a===", 4, out, &n) == -1);      /* too much padding */
    CHECK(nixl_etcd_b64_decode("aGVs\nG8=", 8, out, &n) == -1); /* not in the alphabet */
    CHECK(nixl_etcd_b64_decode("aG-sbG8=", 8, out, &n) == -1);  /* URL alphabet */
    CHECK(nixl_etcd_b64_decode("", 0, out, &n) == 0 && n == 0);
}

static void test_range(void)
{
    nixl_etcd_reply_t r;
    const char *ok = "{" HDR ",\"kvs\":[{\"key\":\"L25peGwvdi9h\",\"create_revision\":\"2\",\"mod_revision\":\"3\","
                     "\"version\":\"2\",\"value\":\"aGVsbG8=\",\"lease\":\"2324035717897886471\"}],\"count\":\"1\"}";
    CHECK(reply(NIXL_ETCD_REPLY_RANGE, ok, &r) == NIXL_OK);
    CHECK(r.header.revision == 7 && r.header.cluster_id == 324952591200643719ull && r.header.raft_term == 2);
    CHECK(r.num_kvs == 1 && r.count == 1);
    CHECK(r.num_kvs == 1 && r.kvs[0].key_len == 9 && !memcmp(r.kvs[0].key, "/nixl/v/a", 9));
    CHECK(r.num_kvs == 1 && r.kvs[0].value_len == 5 && !strcmp((char *)r.kvs[0].value, "hello"));
    CHECK(r.num_kvs == 1 && r.kvs[0].lease == 2324035717897886471ll && r.kvs[0].mod_revision == 3);
    nixl_etcd_reply_free(&r);

    /* proto3 drops zero values: an empty range is a bare header. */
    CHECK(reply(NIXL_ETCD_REPLY_RANGE, "{" HDR "}", &r) == NIXL_OK);
    CHECK(r.num_kvs == 0 && r.count == 0 && r.more == 0);
    nixl_etcd_reply_free(&r);
    /* Unknown fields are ignored; numbers are accepted when exact. */
    CHECK(reply(NIXL_ETCD_REPLY_RANGE, "{\"header\":{\"revision\":12},\"future\":[1,{}],\"count\":0}", &r) == NIXL_OK);
    CHECK(r.header.revision == 12);
    nixl_etcd_reply_free(&r);

    refuse(NIXL_ETCD_REPLY_RANGE, "", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "[]", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{\"kvs\":[]}", NIXL_ERR_BAD_METADATA); /* no header */
    refuse(NIXL_ETCD_REPLY_RANGE, "{\"header\":[]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":{}}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[1]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{}]}", NIXL_ERR_BAD_METADATA);            /* no key */
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"\"}]}", NIXL_ERR_BAD_METADATA); /* empty key */
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"!!!!\"}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":7}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"value\":\"YQ\"}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"lease\":\"-1\"}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"lease\":\"12x\"}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"lease\":true}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"version\":1.5}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"version\":1e300}]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{\"header\":{\"revision\":\"9223372036854775808\"}}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{\"header\":{\"revision\":\"\"}}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{\"header\":{\"cluster_id\":\"18446744073709551616\"}}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"more\":\"yes\"}", NIXL_ERR_BAD_METADATA);
    /* More kvs than the count says. */
    refuse(NIXL_ETCD_REPLY_RANGE, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\"},{\"key\":\"Yg==\"}],\"count\":\"1\"}",
           NIXL_ERR_BAD_METADATA);
    /* Truncated anywhere: refused. */
    for (size_t cut = 0; cut < strlen(ok); cut++) {
        char buf[512];
        memcpy(buf, ok, cut);
        nixl_etcd_reply_t t;
        char why[NIXL_ETCD_WHY_MAX];
        if (nixl_etcd_parse_reply(NIXL_ETCD_REPLY_RANGE, buf, cut, &t, why) == NIXL_OK) {
            fprintf(stderr, "range reply cut at %zu accepted\n", cut);
            failures++;
            nixl_etcd_reply_free(&t);
        }
    }
}

static void test_limits(void)
{
    /* A key one byte over the limit. */
    size_t n = NIXL_ETCD_KEY_MAX + 1;
    uint8_t *raw = malloc(n);
    char *b64 = malloc(nixl_etcd_b64_len(n) + 1);
    char *json = malloc(nixl_etcd_b64_len(n) + 256);
    if (!raw || !b64 || !json) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(raw, 'k', n);
    nixl_etcd_b64_encode(raw, n, b64);
    sprintf(json, "{" HDR ",\"kvs\":[{\"key\":\"%s\"}]}", b64);
    refuse(NIXL_ETCD_REPLY_RANGE, json, NIXL_ERR_BAD_METADATA);
    /* At the limit: fine. */
    nixl_etcd_b64_encode(raw, n - 1, b64);
    sprintf(json, "{" HDR ",\"kvs\":[{\"key\":\"%s\"}]}", b64);
    nixl_etcd_reply_t r;
    CHECK(reply(NIXL_ETCD_REPLY_RANGE, json, &r) == NIXL_OK);
    nixl_etcd_reply_free(&r);
    free(raw);
    free(b64);
    free(json);
    /* Deep nesting is refused by the JSON parser, not by the stack. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    if (!deep) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = 0;
    refuse(NIXL_ETCD_REPLY_RANGE, deep, NIXL_ERR_BAD_METADATA);
    free(deep);
}

static void test_txn_and_lease(void)
{
    nixl_etcd_reply_t r;
    CHECK(reply(NIXL_ETCD_REPLY_TXN,
                "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_put\":{\"header\":{\"revision\":\"2\"}}}]}",
                &r) == NIXL_OK);
    CHECK(r.succeeded == 1 && r.num_kvs == 0);
    nixl_etcd_reply_free(&r);
    CHECK(reply(NIXL_ETCD_REPLY_TXN,
                "{" HDR ",\"responses\":[{\"response_range\":{\"header\":{\"revision\":\"2\"},\"kvs\":[{\"key\":"
                "\"L25peGwvdi9h\",\"create_revision\":\"2\",\"mod_revision\":\"2\",\"version\":\"1\",\"value\":"
                "\"aGVsbG8=\",\"lease\":\"5\"}],\"count\":\"1\"}},{\"response_range\":{}}]}",
                &r) == NIXL_OK);
    CHECK(r.succeeded == 0 && r.num_kvs == 1 && r.kvs[0].lease == 5);
    nixl_etcd_reply_free(&r);
    refuse(NIXL_ETCD_REPLY_TXN, "{" HDR ",\"succeeded\":1}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_TXN, "{" HDR ",\"responses\":[[]]}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_TXN, "{" HDR ",\"responses\":[{\"response_range\":{\"kvs\":[{}]}}]}", NIXL_ERR_BAD_METADATA);

    CHECK(reply(NIXL_ETCD_REPLY_LEASE_GRANT, "{" HDR ",\"ID\":\"2324035717897886469\",\"TTL\":\"5\"}", &r) == NIXL_OK);
    CHECK(r.lease_id == 2324035717897886469ll && r.ttl == 5);
    nixl_etcd_reply_free(&r);
    refuse(NIXL_ETCD_REPLY_LEASE_GRANT, "{" HDR ",\"TTL\":\"5\"}", NIXL_ERR_BAD_METADATA); /* no ID */
    refuse(NIXL_ETCD_REPLY_LEASE_GRANT, "{" HDR ",\"ID\":\"1\"}", NIXL_ERR_BAD_METADATA);  /* no TTL */
    refuse(NIXL_ETCD_REPLY_LEASE_GRANT, "{" HDR ",\"ID\":\"1\",\"TTL\":\"5\",\"error\":\"too many\"}", NIXL_ERR_IO);

    CHECK(reply(NIXL_ETCD_REPLY_LEASE_KEEPALIVE, "{\"result\":{" HDR ",\"ID\":\"9\",\"TTL\":\"30\"}}", &r) == NIXL_OK);
    CHECK(r.lease_id == 9 && r.ttl == 30);
    nixl_etcd_reply_free(&r);
    /* A lease etcd no longer has: TTL left out (zero). */
    CHECK(reply(NIXL_ETCD_REPLY_LEASE_KEEPALIVE, "{\"result\":{" HDR ",\"ID\":\"12345\"}}", &r) == NIXL_OK);
    CHECK(r.ttl == 0);
    nixl_etcd_reply_free(&r);
    refuse(NIXL_ETCD_REPLY_LEASE_KEEPALIVE, "{" HDR ",\"ID\":\"9\",\"TTL\":\"30\"}", NIXL_ERR_BAD_METADATA);
    refuse(NIXL_ETCD_REPLY_LEASE_KEEPALIVE, "{\"error\":{\"grpc_code\":14,\"message\":\"unavailable\"}}", NIXL_ERR_IO);
    CHECK(reply(NIXL_ETCD_REPLY_DELETE, "{" HDR ",\"deleted\":\"2\"}", &r) == NIXL_OK && r.deleted == 2);
    nixl_etcd_reply_free(&r);
    CHECK(reply(NIXL_ETCD_REPLY_LEASE_REVOKE, "{" HDR "}", &r) == NIXL_OK);
    nixl_etcd_reply_free(&r);
    CHECK(reply(NIXL_ETCD_REPLY_PUT, "{" HDR "}", &r) == NIXL_OK);
    nixl_etcd_reply_free(&r);
    char why[NIXL_ETCD_WHY_MAX];
    CHECK(nixl_etcd_parse_reply(NIXL_ETCD_REPLY_KIND_COUNT, "{}", 2, &r, why) == NIXL_ERR_INVALID_PARAM);
}

static nixl_status_t watch(const char *line, nixl_etcd_watch_msg_t *m)
{
    char why[NIXL_ETCD_WHY_MAX];
    return nixl_etcd_parse_watch(line, strlen(line), m, why);
}

static void test_watch(void)
{
    nixl_etcd_watch_msg_t m;
    CHECK(watch("{\"result\":{" HDR ",\"created\":true}}", &m) == NIXL_OK);
    CHECK(m.created == 1 && m.num_events == 0 && m.header.revision == 7);
    nixl_etcd_watch_msg_free(&m);
    CHECK(watch("{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"L25peGwvdi9i\",\"create_revision\":\"4\","
                "\"mod_revision\":\"4\",\"version\":\"1\",\"value\":\"eA==\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":"
                "\"L25peGwvdi9i\",\"mod_revision\":\"5\"}}]}}",
                &m) == NIXL_OK);
    CHECK(m.num_events == 2);
    CHECK(m.num_events == 2 && m.events[0].type == NIXL_ETCD_EVENT_PUT && m.events[1].type == NIXL_ETCD_EVENT_DELETE);
    CHECK(m.num_events == 2 && m.events[1].kv.value == NULL && m.events[1].kv.mod_revision == 5);
    nixl_etcd_watch_msg_free(&m);
    CHECK(watch("{\"result\":{" HDR ",\"canceled\":true,\"compact_revision\":\"3\",\"cancel_reason\":\"comp\\u0001\"}}",
                &m) == NIXL_OK);
    CHECK(m.canceled && m.compact_revision == 3 && !strcmp(m.cancel_reason, "comp?"));
    nixl_etcd_watch_msg_free(&m);
    /* A watch refused at creation for its token (etcd 3.4): watch_id -1. */
    CHECK(watch("{\"result\":{" HDR ",\"watch_id\":\"-1\",\"created\":true,\"canceled\":true,\"cancel_reason\":"
                "\"rpc error: code = Unauthenticated desc = etcdserver: invalid auth token\"}}",
                &m) == NIXL_OK);
    CHECK(m.canceled && m.watch_id == -1 && strstr(m.cancel_reason, "invalid auth token"));
    nixl_etcd_watch_msg_free(&m);
    CHECK(watch("{\"result\":{\"watch_id\":\"-2\"}}", &m) == NIXL_ERR_BAD_METADATA);
    CHECK(watch("{\"error\":{\"grpc_code\":14,\"message\":\"etcdserver: no leader\"}}", &m) == NIXL_ERR_IO);
    CHECK(watch("{\"result\":{\"events\":[{\"type\":\"EXPIRE\",\"kv\":{\"key\":\"YQ==\"}}]}}", &m) ==
          NIXL_ERR_BAD_METADATA);
    CHECK(watch("{\"result\":{\"events\":[{\"type\":\"PUT\"}]}}", &m) == NIXL_ERR_BAD_METADATA);
    CHECK(watch("{\"result\":{\"events\":{}}}", &m) == NIXL_ERR_BAD_METADATA);
    CHECK(watch("{\"result\":{\"cancel_reason\":5}}", &m) == NIXL_ERR_BAD_METADATA);
    CHECK(watch("{\"result\":7}", &m) == NIXL_ERR_BAD_METADATA);
    CHECK(watch("{}", &m) == NIXL_ERR_BAD_METADATA);
    CHECK(watch("{\"result\":{}} trailing", &m) == NIXL_ERR_BAD_METADATA);
}

static void test_error_body(void)
{
    char msg[NIXL_ETCD_WHY_MAX];
    int code = 0;
    const char *b = "{\"error\":\"etcdserver: requested lease not found\",\"message\":\"etcdserver: requested lease "
                    "not found\",\"code\":5}";
    CHECK(nixl_etcd_parse_error(b, strlen(b), &code, msg) == 0 && code == 5 && strstr(msg, "lease not found"));
    CHECK(nixl_etcd_parse_error("{\"code\":\"5\",\"message\":\"x\"}", 26, &code, msg) == -1);
    CHECK(nixl_etcd_parse_error("<html>", 6, &code, msg) == -1);
    CHECK(nixl_etcd_parse_error("{\"code\":1e9,\"message\":\"x\"}", 26, &code, msg) == 0 && code == -1);
}

static nixl_status_t auth(const char *json, char *token)
{
    char why[NIXL_ETCD_WHY_MAX];
    why[0] = '\0';
    nixl_status_t st = nixl_etcd_parse_auth(json, strlen(json), token, why);
    if (st != NIXL_OK && (!why[0] || token[0])) {
        fprintf(stderr, "a failure without a reason, or with a token, for %s\n", json);
        failures++;
    }
    return st;
}

/* /v3/auth/authenticate: the token goes into an HTTP header as it is, so
 * nothing but the characters of simple and JWT tokens passes. */
static void test_auth(void)
{
    char token[NIXL_ETCD_TOKEN_MAX + 1];
    CHECK_ST(auth("{" HDR ",\"token\":\"NstKuDBvPigSwszm.14\"}", token), NIXL_OK);
    CHECK(!strcmp(token, "NstKuDBvPigSwszm.14"));
    CHECK_ST(auth("{" HDR ",\"token\":\"eyJhbGciOiJSUzI1NiJ9.eyJ1c2VybmFtZSI6ImEifQ.c2ln-_+/=\",\"new\":1}", token),
             NIXL_OK);
    CHECK(!strcmp(token, "eyJhbGciOiJSUzI1NiJ9.eyJ1c2VybmFtZSI6ImEifQ.c2ln-_+/="));
    /* cJSON ends a string at an escaped NUL: "abc\u0000def" reads as the
     * token "abc", harmless (etcd refuses it, the client authenticates once
     * more and the call fails). */
    const char *bad[] = {
        "{" HDR "}",                                   /* no token */
        "{" HDR ",\"token\":\"\"}",                      /* empty */
        "{" HDR ",\"token\":12}",                        /* not a string */
        "{" HDR ",\"token\":\"abc\\r\\nX-Injected: 1\"}", /* header injection */
        "{" HDR ",\"token\":\"abc def\"}",               /* space */
        "{" HDR ",\"token\":\"t\\u00e9\"}",               /* not ASCII */
        "{\"token\":\"abc.1\"}",                         /* no header */
        "{" HDR ",\"token\":\"abc.1\"",                  /* truncated */
        "{" HDR ",\"token\":\"abc.1\"} x",               /* trailing bytes */
        "[\"abc.1\"]",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        nixl_status_t st = auth(bad[i], token);
        if (st != NIXL_ERR_BAD_METADATA) {
            fprintf(stderr, "authenticate reply accepted or misjudged (%s): %s\n", nixl_status_name(st), bad[i]);
            failures++;
        }
    }
    /* The longest token passes, one byte more does not. */
    size_t cap = NIXL_ETCD_TOKEN_MAX + 256;
    char *j = malloc(cap);
    CHECK(j != NULL);
    if (!j)
        return;
    for (int extra = 0; extra <= 1; extra++) {
        int n = snprintf(j, cap, "{" HDR ",\"token\":\"");
        memset(j + n, 'A', NIXL_ETCD_TOKEN_MAX + extra);
        snprintf(j + n + NIXL_ETCD_TOKEN_MAX + extra, cap - (size_t)n - NIXL_ETCD_TOKEN_MAX - extra, "\"}");
        CHECK_ST(auth(j, token), extra ? NIXL_ERR_BAD_METADATA : NIXL_OK);
        CHECK(extra || strlen(token) == NIXL_ETCD_TOKEN_MAX);
    }
    free(j);
}

int main(void)
{
    test_b64();
    test_range();
    test_limits();
    test_txn_and_lease();
    test_watch();
    test_error_body();
    test_auth();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("etcd parser: all checks passed\n");
    return 0;
}
