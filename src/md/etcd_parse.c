/*
 * etcd_parse.c - validating parsers for etcd's v3 JSON gateway replies (see
 * etcd_parse.h for the rules).  cJSON builds the tree; everything we read
 * from it is checked here for type, range and size before it is copied into
 * the caller's structs, so the rest of the channel never touches raw JSON.
 * tests/fuzz/fuzz_etcd.c drives every entry point with arbitrary bytes.
 */
#include "md/etcd_parse.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON numbers are doubles: integers beyond 2^53 lose digits, which is why
 * etcd sends int64 as strings.  A bare number is accepted only when exact. */
#define JS_EXACT_INT_MAX 9007199254740992.0

static const char *reply_kind_name[NIXL_ETCD_REPLY_KIND_COUNT] = {
    "range", "put", "delete", "txn", "lease grant", "lease keepalive", "lease revoke",
};

static nixl_status_t bad(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static nixl_status_t bad(char *why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, NIXL_ETCD_WHY_MAX, fmt, ap);
    va_end(ap);
    return NIXL_ERR_BAD_METADATA;
}

/* Server text copied into a log line: printable ASCII only, cut to fit. */
static void copy_printable(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src && src[n] && n + 1 < cap; n++) {
        unsigned char c = (unsigned char)src[n];
        dst[n] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    dst[n] = '\0';
}

/* ------------------------------------------------------------------------
 * Base64
 * ------------------------------------------------------------------------ */

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t nixl_etcd_b64_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void nixl_etcd_b64_encode(const void *src, size_t n, char *dst)
{
    const uint8_t *s = src;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        dst[o++] = b64_alphabet[(v >> 18) & 63];
        dst[o++] = b64_alphabet[(v >> 12) & 63];
        dst[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
        dst[o++] = i + 2 < n ? b64_alphabet[v & 63] : '=';
    }
    dst[o] = '\0';
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int nixl_etcd_b64_decode(const char *src, size_t len, uint8_t *dst, size_t *n_out)
{
    size_t o = 0;
    if (len % 4)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)src[i + k];
            if (c == '=') {
                /* Padding only in the last group, only at its end. */
                if (i + 4 != len || k < 2)
                    return -1;
                pad++;
                v[k] = 0;
                continue;
            }
            if (pad)
                return -1;
            v[k] = b64_value(c);
            if (v[k] < 0)
                return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        dst[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            dst[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            dst[o++] = (uint8_t)w;
    }
    *n_out = o;
    return 0;
}

/* ------------------------------------------------------------------------
 * Typed field access.  A field that is absent (or JSON null) keeps the
 * default; one that is present with the wrong type is an error.
 * ------------------------------------------------------------------------ */

static const cJSON *js_field(const cJSON *obj, const char *name)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

/* Decimal digits with an optional '-'; 0 on success. */
static int parse_dec_int64(const char *s, int64_t *out)
{
    int neg = 0;
    uint64_t v = 0;
    size_t n = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= 19)
            return -1;
        v = v * 10 + (uint64_t)(s[n] - '0');
    }
    if (n == 0 || v > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static int parse_dec_uint64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    size_t n = 0;
    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n >= 20)
            return -1;
        uint64_t d = (uint64_t)(s[n] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (n == 0)
        return -1;
    *out = v;
    return 0;
}

/* An int64 that must be >= min. */
static nixl_status_t js_int64(const cJSON *obj, const char *name, int64_t min, int64_t *out, char *why)
{
    const cJSON *f = js_field(obj, name);
    int64_t v;
    if (!f) {
        *out = 0;
        return 0 >= min ? NIXL_OK : bad(why, "field \"%s\" is missing", name);
    }
    if (cJSON_IsString(f)) {
        if (parse_dec_int64(f->valuestring, &v))
            return bad(why, "field \"%s\" is not an int64 string", name);
    } else if (cJSON_IsNumber(f)) {
        double d = f->valuedouble;
        if (!isfinite(d) || floor(d) != d || fabs(d) > JS_EXACT_INT_MAX)
            return bad(why, "field \"%s\" is not an exact integer", name);
        v = (int64_t)d;
    } else {
        return bad(why, "field \"%s\" is neither a string nor a number", name);
    }
    if (v < min)
        return bad(why, "field \"%s\" is %lld (below %lld)", name, (long long)v, (long long)min);
    *out = v;
    return NIXL_OK;
}

static nixl_status_t js_uint64(const cJSON *obj, const char *name, uint64_t *out, char *why)
{
    const cJSON *f = js_field(obj, name);
    if (!f) {
        *out = 0;
        return NIXL_OK;
    }
    if (cJSON_IsString(f)) {
        if (parse_dec_uint64(f->valuestring, out))
            return bad(why, "field \"%s\" is not a uint64 string", name);
        return NIXL_OK;
    }
    if (cJSON_IsNumber(f)) {
        double d = f->valuedouble;
        if (!isfinite(d) || floor(d) != d || d < 0 || d > JS_EXACT_INT_MAX)
            return bad(why, "field \"%s\" is not an exact unsigned integer", name);
        *out = (uint64_t)d;
        return NIXL_OK;
    }
    return bad(why, "field \"%s\" is neither a string nor a number", name);
}

static nixl_status_t js_bool(const cJSON *obj, const char *name, int *out, char *why)
{
    const cJSON *f = js_field(obj, name);
    if (!f) {
        *out = 0;
        return NIXL_OK;
    }
    if (!cJSON_IsBool(f))
        return bad(why, "field \"%s\" is not a boolean", name);
    *out = cJSON_IsTrue(f) ? 1 : 0;
    return NIXL_OK;
}

/* NULL with NIXL_OK when absent. */
static nixl_status_t js_object(const cJSON *obj, const char *name, const cJSON **out, char *why)
{
    const cJSON *f = js_field(obj, name);
    if (f && !cJSON_IsObject(f))
        return bad(why, "field \"%s\" is not an object", name);
    *out = f;
    return NIXL_OK;
}

static nixl_status_t js_array(const cJSON *obj, const char *name, const cJSON **out, size_t max, char *why)
{
    const cJSON *f = js_field(obj, name);
    if (f && !cJSON_IsArray(f))
        return bad(why, "field \"%s\" is not an array", name);
    if (f && (size_t)cJSON_GetArraySize(f) > max)
        return bad(why, "array \"%s\" has over %zu elements", name, max);
    *out = f;
    return NIXL_OK;
}

/* Base64 bytes, NUL-terminated copy; *out NULL when absent. */
static nixl_status_t js_bytes(const cJSON *obj, const char *name, size_t max, uint8_t **out, size_t *len_out,
                              char *why)
{
    const cJSON *f = js_field(obj, name);
    *out = NULL;
    *len_out = 0;
    if (!f)
        return NIXL_OK;
    if (!cJSON_IsString(f))
        return bad(why, "field \"%s\" is not a base64 string", name);
    size_t len = strlen(f->valuestring);
    if (len / 4 * 3 > max + 2)
        return bad(why, "field \"%s\" holds over %zu bytes", name, max);
    uint8_t *b = malloc(len / 4 * 3 + 1);
    if (!b)
        return NIXL_ERR_NO_MEMORY;
    size_t n;
    if (nixl_etcd_b64_decode(f->valuestring, len, b, &n)) {
        free(b);
        return bad(why, "field \"%s\" is not valid base64", name);
    }
    if (n > max) {
        free(b);
        return bad(why, "field \"%s\" holds %zu bytes (limit %zu)", name, n, max);
    }
    b[n] = 0;
    *out = b;
    *len_out = n;
    return NIXL_OK;
}

/* ------------------------------------------------------------------------
 * Common pieces
 * ------------------------------------------------------------------------ */

static nixl_status_t parse_header(const cJSON *obj, int required, nixl_etcd_header_t *h, char *why)
{
    const cJSON *hd;
    nixl_status_t st = js_object(obj, "header", &hd, why);
    memset(h, 0, sizeof(*h));
    if (st != NIXL_OK)
        return st;
    if (!hd)
        return required ? bad(why, "no \"header\" object") : NIXL_OK;
    if ((st = js_uint64(hd, "cluster_id", &h->cluster_id, why)) != NIXL_OK ||
        (st = js_uint64(hd, "member_id", &h->member_id, why)) != NIXL_OK ||
        (st = js_int64(hd, "revision", 0, &h->revision, why)) != NIXL_OK ||
        (st = js_uint64(hd, "raft_term", &h->raft_term, why)) != NIXL_OK)
        return st;
    return NIXL_OK;
}

static void kv_clear(nixl_etcd_kv_t *kv)
{
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

static nixl_status_t parse_kv(const cJSON *o, nixl_etcd_kv_t *kv, char *why)
{
    nixl_status_t st;
    memset(kv, 0, sizeof(*kv));
    if (!cJSON_IsObject(o))
        return bad(why, "a key-value is not an object");
    if ((st = js_bytes(o, "key", NIXL_ETCD_KEY_MAX, &kv->key, &kv->key_len, why)) != NIXL_OK)
        goto err;
    if (!kv->key || kv->key_len == 0) {
        st = bad(why, "a key-value has no key");
        goto err;
    }
    if ((st = js_bytes(o, "value", NIXL_ETCD_VALUE_MAX, &kv->value, &kv->value_len, why)) != NIXL_OK ||
        (st = js_int64(o, "create_revision", 0, &kv->create_revision, why)) != NIXL_OK ||
        (st = js_int64(o, "mod_revision", 0, &kv->mod_revision, why)) != NIXL_OK ||
        (st = js_int64(o, "version", 0, &kv->version, why)) != NIXL_OK ||
        (st = js_int64(o, "lease", 0, &kv->lease, why)) != NIXL_OK)
        goto err;
    return NIXL_OK;
err:
    kv_clear(kv);
    return st;
}

/* Appends the kvs of arr to r->kvs. */
static nixl_status_t append_kvs(nixl_etcd_reply_t *r, const cJSON *arr, char *why)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n == 0)
        return NIXL_OK;
    if (n > NIXL_ETCD_KVS_MAX - r->num_kvs)
        return bad(why, "over %u key-values", NIXL_ETCD_KVS_MAX);
    nixl_etcd_kv_t *v = realloc(r->kvs, (r->num_kvs + n) * sizeof(*v));
    if (!v)
        return NIXL_ERR_NO_MEMORY;
    r->kvs = v;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        nixl_status_t st = parse_kv(it, &r->kvs[r->num_kvs], why);
        if (st != NIXL_OK)
            return st;
        r->num_kvs++;
    }
    return NIXL_OK;
}

static nixl_status_t parse_range_body(const cJSON *o, nixl_etcd_reply_t *r, char *why)
{
    const cJSON *kvs = NULL;
    nixl_status_t st;
    if ((st = js_array(o, "kvs", &kvs, NIXL_ETCD_KVS_MAX, why)) != NIXL_OK ||
        (st = js_int64(o, "count", 0, &r->count, why)) != NIXL_OK || (st = js_bool(o, "more", &r->more, why)) != NIXL_OK)
        return st;
    if (kvs && (st = append_kvs(r, kvs, why)) != NIXL_OK)
        return st;
    if ((int64_t)r->num_kvs > r->count && r->count != 0)
        return bad(why, "%zu key-values but a count of %lld", r->num_kvs, (long long)r->count);
    return NIXL_OK;
}

static nixl_status_t parse_txn_body(const cJSON *o, nixl_etcd_reply_t *r, char *why)
{
    const cJSON *resps = NULL, *it;
    nixl_status_t st;
    if ((st = js_bool(o, "succeeded", &r->succeeded, why)) != NIXL_OK ||
        (st = js_array(o, "responses", &resps, 4096, why)) != NIXL_OK)
        return st;
    if (!resps)
        return NIXL_OK;
    cJSON_ArrayForEach(it, resps)
    {
        const cJSON *rr = NULL, *put = NULL, *del = NULL;
        if (!cJSON_IsObject(it))
            return bad(why, "a txn response is not an object");
        if ((st = js_object(it, "response_range", &rr, why)) != NIXL_OK ||
            (st = js_object(it, "response_put", &put, why)) != NIXL_OK ||
            (st = js_object(it, "response_delete_range", &del, why)) != NIXL_OK)
            return st;
        if (rr) {
            const cJSON *kvs = NULL;
            if ((st = js_array(rr, "kvs", &kvs, NIXL_ETCD_KVS_MAX, why)) != NIXL_OK)
                return st;
            if (kvs && (st = append_kvs(r, kvs, why)) != NIXL_OK)
                return st;
        }
    }
    return NIXL_OK;
}

static nixl_status_t parse_lease_body(const cJSON *o, nixl_etcd_reply_kind_t kind, nixl_etcd_reply_t *r, char *why)
{
    nixl_status_t st;
    const cJSON *err = js_field(o, "error");
    if (err && cJSON_IsString(err) && err->valuestring[0]) {
        char msg[NIXL_ETCD_WHY_MAX - 16];
        copy_printable(msg, sizeof(msg), err->valuestring);
        snprintf(why, NIXL_ETCD_WHY_MAX, "etcd: %s", msg);
        return NIXL_ERR_IO;
    }
    if ((st = js_int64(o, "ID", kind == NIXL_ETCD_REPLY_LEASE_GRANT ? 1 : 0, &r->lease_id, why)) != NIXL_OK ||
        (st = js_int64(o, "TTL", kind == NIXL_ETCD_REPLY_LEASE_GRANT ? 1 : 0, &r->ttl, why)) != NIXL_OK)
        return st;
    return NIXL_OK;
}

/* A streamed error: {"error": {"grpc_code": N, "message": "..."}}. */
static int stream_error(const cJSON *root, char *why)
{
    const cJSON *err = js_field(root, "error");
    if (!err)
        return 0;
    const cJSON *msg = cJSON_IsObject(err) ? js_field(err, "message") : err;
    char text[NIXL_ETCD_WHY_MAX - 16];
    copy_printable(text, sizeof(text), msg && cJSON_IsString(msg) ? msg->valuestring : "(no message)");
    snprintf(why, NIXL_ETCD_WHY_MAX, "etcd: %s", text);
    return 1;
}

/* ------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------ */

static cJSON *parse_json(const char *buf, size_t len, char *why)
{
    if (!buf || len == 0) {
        bad(why, "empty reply");
        return NULL;
    }
    if (len > NIXL_ETCD_REPLY_MAX) {
        bad(why, "reply of %zu bytes exceeds the limit of %u", len, NIXL_ETCD_REPLY_MAX);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root) {
        bad(why, "not JSON");
        return NULL;
    }
    /* One value and nothing after it but white space. */
    for (; end && end < buf + len; end++) {
        if (*end != ' ' && *end != '\t' && *end != '\r' && *end != '\n') {
            cJSON_Delete(root);
            bad(why, "bytes after the JSON value");
            return NULL;
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        bad(why, "not a JSON object");
        return NULL;
    }
    return root;
}

void nixl_etcd_reply_free(nixl_etcd_reply_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->num_kvs; i++)
        kv_clear(&r->kvs[i]);
    free(r->kvs);
    memset(r, 0, sizeof(*r));
}

nixl_status_t nixl_etcd_parse_reply(nixl_etcd_reply_kind_t kind, const char *buf, size_t len,
                                    nixl_etcd_reply_t *out, char why[NIXL_ETCD_WHY_MAX])
{
    nixl_etcd_reply_t r;
    nixl_status_t st;
    char detail[NIXL_ETCD_WHY_MAX];
    memset(&r, 0, sizeof(r));
    detail[0] = '\0';
    if ((unsigned)kind >= NIXL_ETCD_REPLY_KIND_COUNT) {
        snprintf(why, NIXL_ETCD_WHY_MAX, "unknown reply kind %d", (int)kind);
        return NIXL_ERR_INVALID_PARAM;
    }
    cJSON *root = parse_json(buf, len, detail);
    if (!root) {
        snprintf(why, NIXL_ETCD_WHY_MAX, "%s reply: %.120s", reply_kind_name[kind], detail);
        return NIXL_ERR_BAD_METADATA;
    }
    const cJSON *body = root;
    if (kind == NIXL_ETCD_REPLY_LEASE_KEEPALIVE) {
        /* A streaming call: the message comes wrapped in "result". */
        if (stream_error(root, detail)) {
            st = NIXL_ERR_IO;
            goto out;
        }
        if ((st = js_object(root, "result", &body, detail)) != NIXL_OK)
            goto out;
        if (!body) {
            st = bad(detail, "no \"result\" object");
            goto out;
        }
    }
    if ((st = parse_header(body, 1, &r.header, detail)) != NIXL_OK)
        goto out;
    switch (kind) {
    case NIXL_ETCD_REPLY_RANGE:
        st = parse_range_body(body, &r, detail);
        break;
    case NIXL_ETCD_REPLY_DELETE:
        st = js_int64(body, "deleted", 0, &r.deleted, detail);
        break;
    case NIXL_ETCD_REPLY_TXN:
        st = parse_txn_body(body, &r, detail);
        break;
    case NIXL_ETCD_REPLY_LEASE_GRANT:
    case NIXL_ETCD_REPLY_LEASE_KEEPALIVE:
        st = parse_lease_body(body, kind, &r, detail);
        break;
    case NIXL_ETCD_REPLY_PUT:
    case NIXL_ETCD_REPLY_LEASE_REVOKE:
    default:
        break;
    }
out:
    cJSON_Delete(root);
    if (st != NIXL_OK) {
        nixl_etcd_reply_free(&r);
        snprintf(why, NIXL_ETCD_WHY_MAX, "%s reply: %.120s", reply_kind_name[kind], detail);
        return st;
    }
    *out = r;
    return NIXL_OK;
}

void nixl_etcd_watch_msg_free(nixl_etcd_watch_msg_t *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->num_events; i++)
        kv_clear(&m->events[i].kv);
    free(m->events);
    memset(m, 0, sizeof(*m));
}

static nixl_status_t parse_event(const cJSON *o, nixl_etcd_event_t *ev, char *why)
{
    if (!cJSON_IsObject(o))
        return bad(why, "an event is not an object");
    const cJSON *type = js_field(o, "type");
    if (!type || (cJSON_IsString(type) && !strcmp(type->valuestring, "PUT")))
        ev->type = NIXL_ETCD_EVENT_PUT;
    else if (cJSON_IsString(type) && !strcmp(type->valuestring, "DELETE"))
        ev->type = NIXL_ETCD_EVENT_DELETE;
    else if (cJSON_IsNumber(type) && (type->valuedouble == 0 || type->valuedouble == 1))
        ev->type = type->valuedouble == 0 ? NIXL_ETCD_EVENT_PUT : NIXL_ETCD_EVENT_DELETE;
    else
        return bad(why, "an event has an unknown type");
    const cJSON *kv;
    nixl_status_t st = js_object(o, "kv", &kv, why);
    if (st != NIXL_OK)
        return st;
    if (!kv)
        return bad(why, "an event has no \"kv\"");
    return parse_kv(kv, &ev->kv, why);
}

nixl_status_t nixl_etcd_parse_watch(const char *buf, size_t len, nixl_etcd_watch_msg_t *out,
                                    char why[NIXL_ETCD_WHY_MAX])
{
    nixl_etcd_watch_msg_t m;
    nixl_status_t st;
    char detail[NIXL_ETCD_WHY_MAX];
    const cJSON *res = NULL, *events = NULL, *reason;
    memset(&m, 0, sizeof(m));
    detail[0] = '\0';

    cJSON *root = parse_json(buf, len, detail);
    if (!root) {
        snprintf(why, NIXL_ETCD_WHY_MAX, "watch message: %.120s", detail);
        return NIXL_ERR_BAD_METADATA;
    }
    if (stream_error(root, detail)) {
        st = NIXL_ERR_IO;
        goto out;
    }
    if ((st = js_object(root, "result", &res, detail)) != NIXL_OK)
        goto out;
    if (!res) {
        st = bad(detail, "no \"result\" object");
        goto out;
    }
    if ((st = parse_header(res, 0, &m.header, detail)) != NIXL_OK ||
        /* -1: a watch refused at creation (etcd 3.4, e.g. for its auth token). */
        (st = js_int64(res, "watch_id", -1, &m.watch_id, detail)) != NIXL_OK ||
        (st = js_bool(res, "created", &m.created, detail)) != NIXL_OK ||
        (st = js_bool(res, "canceled", &m.canceled, detail)) != NIXL_OK ||
        (st = js_int64(res, "compact_revision", 0, &m.compact_revision, detail)) != NIXL_OK ||
        (st = js_array(res, "events", &events, NIXL_ETCD_EVENTS_MAX, detail)) != NIXL_OK)
        goto out;
    reason = js_field(res, "cancel_reason");
    if (reason && !cJSON_IsString(reason)) {
        st = bad(detail, "field \"cancel_reason\" is not a string");
        goto out;
    }
    copy_printable(m.cancel_reason, sizeof(m.cancel_reason), reason ? reason->valuestring : "");
    if (events && cJSON_GetArraySize(events) > 0) {
        m.events = calloc((size_t)cJSON_GetArraySize(events), sizeof(*m.events));
        if (!m.events) {
            st = NIXL_ERR_NO_MEMORY;
            goto out;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, events)
        {
            if ((st = parse_event(it, &m.events[m.num_events], detail)) != NIXL_OK)
                goto out;
            m.num_events++;
        }
    }
out:
    cJSON_Delete(root);
    if (st != NIXL_OK) {
        nixl_etcd_watch_msg_free(&m);
        snprintf(why, NIXL_ETCD_WHY_MAX, "watch message: %.120s", detail);
        return st;
    }
    *out = m;
    return NIXL_OK;
}

static int token_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("._-+/=", c);
}

nixl_status_t nixl_etcd_parse_auth(const char *buf, size_t len, char token[NIXL_ETCD_TOKEN_MAX + 1],
                                   char why[NIXL_ETCD_WHY_MAX])
{
    char detail[NIXL_ETCD_WHY_MAX];
    nixl_etcd_header_t h;
    nixl_status_t st;
    detail[0] = '\0';
    token[0] = '\0';
    cJSON *root = parse_json(buf, len, detail);
    if (!root) {
        snprintf(why, NIXL_ETCD_WHY_MAX, "authenticate reply: %.120s", detail);
        return NIXL_ERR_BAD_METADATA;
    }
    const cJSON *t = js_field(root, "token");
    if ((st = parse_header(root, 1, &h, detail)) != NIXL_OK)
        goto out;
    if (!t || !cJSON_IsString(t)) {
        st = bad(detail, "no \"token\" string");
        goto out;
    }
    size_t n = strlen(t->valuestring);
    if (n == 0 || n > NIXL_ETCD_TOKEN_MAX) {
        st = bad(detail, "a token of %zu bytes (1 to %u expected)", n, NIXL_ETCD_TOKEN_MAX);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!token_char((unsigned char)t->valuestring[i])) {
            st = bad(detail, "a token with a byte 0x%02x at %zu", (unsigned char)t->valuestring[i], i);
            goto out;
        }
    }
    memcpy(token, t->valuestring, n + 1);
out:
    /* The tree held the token: leave no copy behind. */
    if (t && cJSON_IsString(t))
        memset(t->valuestring, 0, strlen(t->valuestring));
    cJSON_Delete(root);
    if (st != NIXL_OK)
        snprintf(why, NIXL_ETCD_WHY_MAX, "authenticate reply: %.120s", detail);
    return st;
}

int nixl_etcd_parse_error(const char *buf, size_t len, int *code_out, char msg[NIXL_ETCD_WHY_MAX])
{
    char detail[NIXL_ETCD_WHY_MAX];
    cJSON *root = parse_json(buf, len, detail);
    if (!root)
        return -1;
    const cJSON *code = js_field(root, "code");
    const cJSON *text = js_field(root, "message");
    if (!text || !cJSON_IsString(text))
        text = js_field(root, "error");
    if (!text || !cJSON_IsString(text) || (code && !cJSON_IsNumber(code))) {
        cJSON_Delete(root);
        return -1;
    }
    double c = code ? code->valuedouble : 0;
    *code_out = (isfinite(c) && c >= 0 && c <= 1000) ? (int)c : -1;
    copy_printable(msg, NIXL_ETCD_WHY_MAX, text->valuestring);
    cJSON_Delete(root);
    return 0;
}
