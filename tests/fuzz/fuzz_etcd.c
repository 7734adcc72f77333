/*
 * fuzz_etcd.c - libFuzzer harness for the etcd reply parser
 * (src/md/etcd_parse.c), the other parser of untrusted bytes in nixl.
 * The first byte picks the entry point, the rest is the reply:
 *   0..6  nixl_etcd_parse_reply of that kind (range, put, delete, txn,
 *         lease grant, lease keepalive, lease revoke)
 *   7     nixl_etcd_parse_watch (one watch stream line)
 *   8     nixl_etcd_parse_error (the body of a non-200 reply)
 *   9     base64: decode, then encode and decode again
 *   10    nixl_etcd_parse_auth (the reply to /v3/auth/authenticate)
 * Beyond "does not crash", a successful parse must keep etcd_parse.h's
 * promises: keys present and within the limits, NUL-terminated copies,
 * revisions and leases not negative, a reason for every failure, a token
 * only of the characters an HTTP header can carry as they are.
 * replay.c runs the same function over tests/fuzz/etcd_corpus in every build.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md/etcd_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_etcd: %s\n", what);
    abort();
}

static void check_kv(const nixl_etcd_kv_t *kv)
{
    if (!kv->key || kv->key_len == 0 || kv->key_len > NIXL_ETCD_KEY_MAX || kv->key[kv->key_len] != 0)
        fail("a key-value with a missing, empty, oversized or unterminated key");
    if (kv->value && (kv->value_len > NIXL_ETCD_VALUE_MAX || kv->value[kv->value_len] != 0))
        fail("an oversized or unterminated value");
    if (!kv->value && kv->value_len)
        fail("a length without a value");
    if (kv->create_revision < 0 || kv->mod_revision < 0 || kv->version < 0 || kv->lease < 0)
        fail("a negative revision, version or lease");
}

static void check_why(const char *why)
{
    if (!why[0] || strlen(why) >= NIXL_ETCD_WHY_MAX)
        fail("a failure without a reason");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[NIXL_ETCD_WHY_MAX];
    if (size < 1)
        return 0;
    unsigned sel = data[0] % 11;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    why[0] = '\0';

    if (sel < NIXL_ETCD_REPLY_KIND_COUNT) {
        nixl_etcd_reply_t r;
        nixl_status_t st = nixl_etcd_parse_reply((nixl_etcd_reply_kind_t)sel, buf, len, &r, why);
        if (st != NIXL_OK) {
            if (st != NIXL_ERR_BAD_METADATA && st != NIXL_ERR_IO && st != NIXL_ERR_NO_MEMORY)
                fail("parse_reply returned an unexpected status");
            check_why(why);
            return 0;
        }
        if (r.header.revision < 0 || r.count < 0 || r.deleted < 0 || r.ttl < 0 || r.lease_id < 0)
            fail("a negative count, revision, TTL or lease");
        if (r.num_kvs > NIXL_ETCD_KVS_MAX || (r.num_kvs && !r.kvs))
            fail("a kvs array that does not match its count");
        if (sel == NIXL_ETCD_REPLY_LEASE_GRANT && (r.lease_id <= 0 || r.ttl <= 0))
            fail("a lease grant without an ID or TTL");
        for (size_t i = 0; i < r.num_kvs; i++)
            check_kv(&r.kvs[i]);
        nixl_etcd_reply_free(&r);
    } else if (sel == 7) {
        nixl_etcd_watch_msg_t m;
        nixl_status_t st = nixl_etcd_parse_watch(buf, len, &m, why);
        if (st != NIXL_OK) {
            if (st != NIXL_ERR_BAD_METADATA && st != NIXL_ERR_IO && st != NIXL_ERR_NO_MEMORY)
                fail("parse_watch returned an unexpected status");
            check_why(why);
            return 0;
        }
        if (m.num_events > NIXL_ETCD_EVENTS_MAX || (m.num_events && !m.events))
            fail("an events array that does not match its count");
        if (strlen(m.cancel_reason) >= sizeof(m.cancel_reason))
            fail("an unterminated cancel reason");
        for (size_t i = 0; i < m.num_events; i++) {
            if (m.events[i].type != NIXL_ETCD_EVENT_PUT && m.events[i].type != NIXL_ETCD_EVENT_DELETE)
                fail("an event of no known type");
            check_kv(&m.events[i].kv);
        }
        for (const char *p = m.cancel_reason; *p; p++)
            if (*p < 0x20 || *p > 0x7e)
                fail("a non-printable byte in the cancel reason");
        nixl_etcd_watch_msg_free(&m);
    } else if (sel == 8) {
        int code = 0;
        char msg[NIXL_ETCD_WHY_MAX];
        if (nixl_etcd_parse_error(buf, len, &code, msg) == 0) {
            if (strlen(msg) >= sizeof(msg))
                fail("an unterminated error message");
            for (const char *p = msg; *p; p++)
                if (*p < 0x20 || *p > 0x7e)
                    fail("a non-printable byte in the error message");
        }
    } else if (sel == 10) {
        char token[NIXL_ETCD_TOKEN_MAX + 1];
        nixl_status_t st = nixl_etcd_parse_auth(buf, len, token, why);
        if (st != NIXL_OK) {
            if (st != NIXL_ERR_BAD_METADATA && st != NIXL_ERR_NO_MEMORY)
                fail("parse_auth returned an unexpected status");
            if (token[0])
                fail("parse_auth failed but left a token");
            check_why(why);
            return 0;
        }
        size_t n = strlen(token);
        if (n == 0 || n > NIXL_ETCD_TOKEN_MAX)
            fail("an empty or oversized token");
        for (size_t i = 0; i < n; i++)
            if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-+/=", token[i]))
                fail("a token byte an HTTP header must not carry");
    } else {
        uint8_t *dec = malloc(len / 4 * 3 + 1), *dec2;
        char *enc;
        size_t n, n2;
        if (!dec)
            return 0;
        if (nixl_etcd_b64_decode(buf, len, dec, &n) == 0) {
            if (n > len / 4 * 3)
                fail("base64 decoded more bytes than it could");
            enc = malloc(nixl_etcd_b64_len(n) + 1);
            dec2 = malloc(n + 1);
            if (enc && dec2) {
                nixl_etcd_b64_encode(dec, n, enc);
                if (strlen(enc) != nixl_etcd_b64_len(n))
                    fail("base64 encoded length is off");
                if (nixl_etcd_b64_decode(enc, strlen(enc), dec2, &n2) || n2 != n || memcmp(dec, dec2, n))
                    fail("base64 does not round-trip");
            }
            free(enc);
            free(dec2);
        }
        free(dec);
    }
    return 0;
}
