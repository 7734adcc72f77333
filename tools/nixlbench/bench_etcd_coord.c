/*
 * bench_etcd_coord.c - nixlbench's own etcd client, for coordination only (see
 * bench_etcd.h): put, get, prefix range, delete, and one lease kept alive
 * by a thread.  etcd's v3 JSON gateway over libcurl; replies are checked
 * (types, base64, sizes) before use.  nixlbench talks to the library
 * through its public API only, so it does not borrow the library's client.
 */
#include "bench_etcd.h"

#include <cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define KV_MAX_URLS 8
#define KV_REPLY_MAX (16u << 20)

typedef struct kv_buf {
    char *p;
    size_t len, cap;
} kv_buf_t;

struct bench_coord {
    char *urls[KV_MAX_URLS];
    size_t num_urls, cur;
    uint32_t timeout_ms;
    CURL *h;
    struct curl_slist *headers;
    kv_buf_t reply;
    int64_t lease;
    int ttl_s;
    pthread_t ka_thread;
    pthread_mutex_t ka_mu;
    pthread_cond_t ka_cv;
    int ka_stop;
};

static size_t kv_write(char *data, size_t size, size_t nmemb, void *arg)
{
    kv_buf_t *b = arg;
    size_t n = size * nmemb;
    if (n > KV_REPLY_MAX - b->len)
        return 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return 0;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const char *src, char *dst)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t n = strlen(src), o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        dst[o++] = b64[(v >> 18) & 63];
        dst[o++] = b64[(v >> 12) & 63];
        dst[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        dst[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    dst[o] = '\0';
}

/* Strict; text only (a NUL inside is refused).  0 on success. */
static int b64_decode(const char *src, char *dst, size_t cap)
{
    size_t len = strlen(src), o = 0;
    if (len % 4)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = src[i + k];
            const char *p = c ? strchr(b64, c) : NULL;
            if (c == '=' && i + 4 == len && k >= 2) {
                pad++;
                v <<= 6;
                continue;
            }
            if (!p || pad)
                return -1;
            v = v << 6 | (uint32_t)(p - b64);
        }
        for (int k = 0; k < 3 - pad; k++) {
            char c = (char)(v >> (16 - 8 * k));
            if (o + 1 >= cap || c == 0)
                return -1;
            dst[o++] = c;
        }
    }
    dst[o] = '\0';
    return 0;
}

static int parse_i64(const cJSON *o, const char *name, int64_t *out)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    char *end;
    *out = 0;
    if (!f)
        return 0;
    if (!cJSON_IsString(f) || !f->valuestring[0])
        return -1;
    errno = 0;
    long long v = strtoll(f->valuestring, &end, 10);
    if (*end || errno)
        return -1;
    *out = v;
    return 0;
}

/* POST body to path; returns the parsed reply (cJSON_Delete it).  quiet:
 * NULL on failure instead of dying. */
static cJSON *kv_call_opt(bench_coord_t *kv, const char *path, const char *body, int quiet)
{
    char url[512];
    for (size_t attempt = 0; attempt < kv->num_urls; attempt++) {
        snprintf(url, sizeof(url), "%s%s", kv->urls[kv->cur], path);
        kv->reply.len = 0;
        curl_easy_setopt(kv->h, CURLOPT_URL, url);
        curl_easy_setopt(kv->h, CURLOPT_POSTFIELDS, body);
        CURLcode rc = curl_easy_perform(kv->h);
        long http = 0;
        curl_easy_getinfo(kv->h, CURLINFO_RESPONSE_CODE, &http);
        if (rc == CURLE_OK && http == 200) {
            cJSON *j = cJSON_ParseWithLength(kv->reply.p, kv->reply.len);
            if (j && cJSON_IsObject(j))
                return j;
            cJSON_Delete(j);
            if (quiet)
                return NULL;
            bench_die("etcd %s: the reply is not a JSON object", url);
        }
        if (rc == CURLE_OK && http < 500) {
            if (quiet)
                return NULL;
            bench_die("etcd %s: HTTP %ld: %.200s", url, http, kv->reply.p ? kv->reply.p : "");
        }
        if (!quiet)
            fprintf(stderr, "nixlbench: etcd %s: %s; trying the next endpoint\n", url,
                    rc != CURLE_OK ? curl_easy_strerror(rc) : "server error");
        kv->cur = (kv->cur + 1) % kv->num_urls;
    }
    if (quiet)
        return NULL;
    bench_die("etcd: no endpoint of %zu answered %s", kv->num_urls, path);
}

static cJSON *kv_call(bench_coord_t *kv, const char *path, const char *body)
{
    return kv_call_opt(kv, path, body, 0);
}

static void *keepalive_main(void *arg)
{
    bench_coord_t *kv = arg;
    CURL *h = curl_easy_duphandle(kv->h);
    kv_buf_t buf = {0};
    char body[64], url[512];
    snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", kv->lease);
    if (!h)
        return NULL;
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    pthread_mutex_lock(&kv->ka_mu);
    while (!kv->ka_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += kv->ttl_s / 3 > 0 ? kv->ttl_s / 3 : 1;
        pthread_cond_timedwait(&kv->ka_cv, &kv->ka_mu, &ts);
        if (kv->ka_stop)
            break;
        pthread_mutex_unlock(&kv->ka_mu);
        /* Any endpoint will do; a failure is retried at the next tick. */
        for (size_t i = 0; i < kv->num_urls; i++) {
            snprintf(url, sizeof(url), "%s/v3/lease/keepalive", kv->urls[i]);
            buf.len = 0;
            curl_easy_setopt(h, CURLOPT_URL, url);
            long http = 0;
            if (curl_easy_perform(h) == CURLE_OK && curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http) == CURLE_OK &&
                http == 200)
                break;
        }
        pthread_mutex_lock(&kv->ka_mu);
    }
    pthread_mutex_unlock(&kv->ka_mu);
    curl_easy_cleanup(h);
    free(buf.p);
    return NULL;
}

bench_coord_t *bench_coord_open(const char *urls, uint32_t timeout_ms, int ttl_s)
{
    bench_coord_t *kv = calloc(1, sizeof(*kv));
    if (!kv || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        bench_die("etcd: cannot initialize libcurl");
    const char *s = urls;
    while (*s && kv->num_urls < KV_MAX_URLS) {
        size_t n = strcspn(s, ",");
        if (n) {
            char *u = malloc(n + 8);
            if (!u)
                bench_die("out of memory");
            snprintf(u, n + 8, "%s%.*s", memmem(s, n, "://", 3) ? "" : "http://", (int)n, s);
            while (strlen(u) && u[strlen(u) - 1] == '/')
                u[strlen(u) - 1] = '\0';
            kv->urls[kv->num_urls++] = u;
        }
        s += n + (s[n] == ',');
    }
    if (!kv->num_urls)
        bench_die("--etcd: no URL in \"%s\"", urls);
    kv->timeout_ms = timeout_ms;
    kv->ttl_s = ttl_s;
    kv->h = curl_easy_init();
    kv->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!kv->h || !kv->headers)
        bench_die("etcd: cannot create a curl handle");
    curl_easy_setopt(kv->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(kv->h, CURLOPT_HTTPHEADER, kv->headers);
    curl_easy_setopt(kv->h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(kv->h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(kv->h, CURLOPT_PROXY, "");
    curl_easy_setopt(kv->h, CURLOPT_WRITEFUNCTION, kv_write);
    curl_easy_setopt(kv->h, CURLOPT_WRITEDATA, &kv->reply);

    char body[64];
    snprintf(body, sizeof(body), "{\"TTL\":\"%d\"}", ttl_s);
    cJSON *j = kv_call(kv, "/v3/lease/grant", body);
    if (parse_i64(j, "ID", &kv->lease) || kv->lease <= 0)
        bench_die("etcd: the lease grant reply has no ID");
    cJSON_Delete(j);
    pthread_mutex_init(&kv->ka_mu, NULL);
    pthread_cond_init(&kv->ka_cv, NULL);
    if (pthread_create(&kv->ka_thread, NULL, keepalive_main, kv))
        bench_die("etcd: cannot start the keep-alive thread");
    return kv;
}

void bench_coord_close(bench_coord_t *kv)
{
    pthread_mutex_lock(&kv->ka_mu);
    kv->ka_stop = 1;
    pthread_cond_signal(&kv->ka_cv);
    pthread_mutex_unlock(&kv->ka_mu);
    pthread_join(kv->ka_thread, NULL);
    char body[64];
    snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", kv->lease);
    cJSON_Delete(kv_call(kv, "/v3/lease/revoke", body));
    curl_easy_cleanup(kv->h);
    curl_slist_free_all(kv->headers);
    for (size_t i = 0; i < kv->num_urls; i++)
        free(kv->urls[i]);
    free(kv->reply.p);
    pthread_mutex_destroy(&kv->ka_mu);
    pthread_cond_destroy(&kv->ka_cv);
    free(kv);
}

static int put_body(const bench_coord_t *kv, const char *key, const char *value, char *body, size_t cap)
{
    char k[400], v[400];
    if (strlen(key) > 250 || strlen(value) > 250)
        return -1;
    b64_encode(key, k);
    b64_encode(value, v);
    snprintf(body, cap, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}", k, v, kv->lease);
    return 0;
}

void bench_coord_put(bench_coord_t *kv, const char *key, const char *value)
{
    char body[900];
    if (put_body(kv, key, value, body, sizeof(body)))
        bench_die("etcd: key or value too long: %s", key);
    cJSON_Delete(kv_call(kv, "/v3/kv/put", body));
}

int bench_coord_try_put(bench_coord_t *kv, const char *key, const char *value)
{
    char body[900];
    if (put_body(kv, key, value, body, sizeof(body)))
        return -1;
    cJSON *j = kv_call_opt(kv, "/v3/kv/put", body, 1);
    cJSON_Delete(j);
    return j ? 0 : -1;
}

/* The kvs of a range reply, checked. */
static size_t kvs_of(cJSON *j, bench_coord_pair_t **out)
{
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(j, "kvs"), *it;
    size_t n = 0;
    *out = NULL;
    if (!kvs)
        return 0;
    if (!cJSON_IsArray(kvs) || cJSON_GetArraySize(kvs) > 100000)
        bench_die("etcd: a range reply with a bad \"kvs\"");
    bench_coord_pair_t *v = calloc((size_t)cJSON_GetArraySize(kvs) + 1, sizeof(*v));
    if (!v)
        bench_die("out of memory");
    cJSON_ArrayForEach(it, kvs)
    {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "key");
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(it, "value");
        if (!cJSON_IsString(k) || b64_decode(k->valuestring, v[n].key, sizeof(v[n].key)) ||
            (val && (!cJSON_IsString(val) || b64_decode(val->valuestring, v[n].value, sizeof(v[n].value)))) ||
            parse_i64(it, "create_revision", &v[n].create_revision))
            bench_die("etcd: a malformed key-value in a range reply");
        n++;
    }
    *out = v;
    return n;
}

int bench_coord_get(bench_coord_t *kv, const char *key, char *out, size_t cap)
{
    char k[400], body[500];
    bench_coord_pair_t *v;
    b64_encode(key, k);
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
    cJSON *j = kv_call(kv, "/v3/kv/range", body);
    size_t n = kvs_of(j, &v);
    cJSON_Delete(j);
    if (n)
        snprintf(out, cap, "%s", v[0].value);
    free(v);
    return n ? 1 : 0;
}

static void prefix_end(const char *prefix, char *end)
{
    size_t n = strlen(prefix);
    memcpy(end, prefix, n + 1);
    /* Our prefixes end in '/': the next byte up bounds the range. */
    end[n - 1]++;
}

static int cmp_rev(const void *a, const void *b)
{
    const bench_coord_pair_t *x = a, *y = b;
    return x->create_revision < y->create_revision ? -1 : x->create_revision > y->create_revision;
}

size_t bench_coord_prefix(bench_coord_t *kv, const char *prefix, bench_coord_pair_t **out)
{
    char k[400], e[400], end[256], body[900];
    if (strlen(prefix) > 250 || !strlen(prefix))
        bench_die("etcd: bad prefix %s", prefix);
    prefix_end(prefix, end);
    b64_encode(prefix, k);
    b64_encode(end, e);
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\"}", k, e);
    cJSON *j = kv_call(kv, "/v3/kv/range", body);
    size_t n = kvs_of(j, out);
    cJSON_Delete(j);
    qsort(*out, n, sizeof(**out), cmp_rev);
    return n;
}

void bench_coord_delete_prefix(bench_coord_t *kv, const char *prefix)
{
    char k[400], e[400], end[256], body[900];
    prefix_end(prefix, end);
    b64_encode(prefix, k);
    b64_encode(end, e);
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\"}", k, e);
    cJSON_Delete(kv_call(kv, "/v3/kv/deleterange", body));
}
