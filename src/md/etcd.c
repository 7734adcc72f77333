/*
 * etcd.c - the HTTP side of the etcd channel: request bodies, endpoint
 * failover, and the watch stream (see etcd.h).
 *
 * One curl multi handle carries two transfers: the current call (blocking
 * for the caller, at most the timeout) and the watch, a response body that
 * never ends and brings one JSON message per line.  Driving both from the
 * same loop keeps the client on one thread with no locks, and lets another
 * thread interrupt any wait through curl_multi_wakeup.  Nothing read from
 * the network is trusted: replies go through etcd_parse.c, and the bytes
 * buffered for a reply or a watch line are capped.
 *
 * TLS is libcurl's (CURLOPT_CAINFO, SSLCERT, SSLKEY) with peer and host
 * verification left on.  With a user, the token from /v3/auth/authenticate
 * rides in an "Authorization" header: the call transfer uses auth_headers,
 * rebuilt whenever the token changes, and the watch a copy of its own, as
 * curl reads a transfer's header list for as long as the transfer runs.
 */
#include "md/etcd.h"

#include <cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"
#include "util/time.h"

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_URL_MAX 512
/* A watch message carries small keys only (we watch version keys), but a
 * replay after a reconnect may batch many events. */
#define ETCD_WATCH_LINE_MAX (16u << 20)
#define ETCD_WARN_INTERVAL_NS (5ull * 1000 * 1000 * 1000)
#define ETCD_AUTH_RETRY_NS (1000ull * 1000 * 1000)

/* An error that repeats at every retry: once per interval. */
#define ETCD_ERROR_RATELIMITED(rl, ...)                                                                        \
    do {                                                                                                       \
        uint64_t dropped_;                                                                                     \
        if (nixl_log_enabled(NIXL_LOG_ERROR) && nixl_ratelimit_pass((rl), ETCD_WARN_INTERVAL_NS, &dropped_))   \
            NIXL_ERROR(__VA_ARGS__);                                                                           \
    } while (0)

typedef struct etcd_buf {
    char *p;
    size_t len, cap, max;
    int overflow;
} etcd_buf_t;

struct nixl_etcd {
    char *urls[ETCD_MAX_ENDPOINTS];
    size_t num_urls;
    size_t cur;
    uint32_t timeout_ms;
    int last_code;
    char last_msg[NIXL_ETCD_WHY_MAX]; /* etcd's message with last_code */
    atomic_int interrupted;
    nixl_ratelimit_t warn_rl;
    nixl_ratelimit_t err_rl; /* TLS and authentication failures */

    /* TLS files (NULL: not set). */
    char *ca_file, *cert_file, *key_file;
    /* etcd user (password NULL: none) and its current token ("" until
     * authenticated). */
    char user[NIXL_ETCD_USER_MAX + 1];
    char *password;
    char token[NIXL_ETCD_TOKEN_MAX + 1];
    unsigned auth_count;
    /* After etcd refused our credentials: calls fail without asking again
     * until then (each try costs etcd a bcrypt). */
    uint64_t auth_retry_ns;
    int auth_refused_code;
    char auth_refused_msg[NIXL_ETCD_WHY_MAX];

    CURLM *multi;
    struct curl_slist *headers;
    struct curl_slist *auth_headers; /* headers + Authorization, while a token is held */
    CURL *call;
    etcd_buf_t call_buf;
    char call_err[CURL_ERROR_SIZE];

    CURL *watch; /* NULL when no watch runs */
    struct curl_slist *watch_headers;
    char watch_err[CURL_ERROR_SIZE];
    char *watch_body;
    etcd_buf_t watch_buf;
    size_t watch_scan; /* bytes of watch_buf already searched for '\n' */
    int watch_done;
    CURLcode watch_rc;
    char watch_url[ETCD_URL_MAX];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------ */

static size_t buf_write(char *data, size_t size, size_t nmemb, void *arg)
{
    etcd_buf_t *b = arg;
    size_t n = size * nmemb;
    if (n > b->max - b->len) {
        b->overflow = 1;
        return 0; /* curl aborts the transfer */
    }
    if (NIXL_ARRAY_RESERVE(b->p, b->cap, b->len + n + 1, 4096)) {
        b->overflow = 1;
        return 0;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

static void buf_reset(etcd_buf_t *b)
{
    b->len = 0;
    b->overflow = 0;
}

static void buf_free(etcd_buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* ------------------------------------------------------------------------
 * Create / destroy
 * ------------------------------------------------------------------------ */

static nixl_status_t parse_endpoints(nixl_etcd_t *c, const char *endpoints, int tls)
{
    const char *s = endpoints;
    while (*s) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        while (n && (*s == ' ' || *s == '\t')) {
            s++;
            n--;
        }
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '/'))
            n--;
        if (n) {
            if (c->num_urls == ETCD_MAX_ENDPOINTS) {
                NIXL_ERROR("etcd: more than %d endpoints in \"%s\"", ETCD_MAX_ENDPOINTS, endpoints);
                return NIXL_ERR_TOO_BIG;
            }
            int has_scheme = memmem(s, n, "://", 3) != NULL;
            if (has_scheme && !(n > 7 && !strncmp(s, "http://", 7)) && !(n > 8 && !strncmp(s, "https://", 8))) {
                NIXL_ERROR("etcd: endpoint \"%.*s\" is not an http:// or https:// URL", (int)n, s);
                return NIXL_ERR_INVALID_PARAM;
            }
            if (tls && has_scheme && !strncmp(s, "http://", 7)) {
                NIXL_ERROR("etcd: endpoint \"%.*s\" is plain HTTP but TLS files are set (NIXL_ETCD_CA_FILE, "
                           "NIXL_ETCD_CERT_FILE, NIXL_ETCD_KEY_FILE): use https://",
                           (int)n, s);
                return NIXL_ERR_INVALID_PARAM;
            }
            if (n + 8 >= ETCD_URL_MAX - 32) {
                NIXL_ERROR("etcd: endpoint \"%.40s...\" is too long", s);
                return NIXL_ERR_INVALID_PARAM;
            }
            char *u = malloc(n + 9);
            if (!u)
                return NIXL_ERR_NO_MEMORY;
            snprintf(u, n + 9, "%s%.*s", has_scheme ? "" : tls ? "https://" : "http://", (int)n, s);
            c->urls[c->num_urls++] = u;
        }
        if (!comma)
            break;
        s = comma + 1;
    }
    if (!c->num_urls) {
        NIXL_ERROR("etcd: no endpoint in \"%s\" (expected comma-separated URLs, e.g. http://127.0.0.1:2379)",
                   endpoints);
        return NIXL_ERR_INVALID_PARAM;
    }
    return NIXL_OK;
}

/* Settings shared by the call and the watch transfers. */
static void easy_common(CURL *h, nixl_etcd_t *c, char *errbuf)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    /* Peer and host verification: on, whatever curl's build defaults are. */
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->cert_file) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    /* etcd is reached directly: a proxy from the environment would only add
     * a hop that may not reach it at all. */
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 2L);
}

static int is_set(const char *s)
{
    return s && s[0];
}

/* A TLS file named by var: a regular file we can read now (curl reads it
 * at the first connection; a mistake is clearer here). */
static nixl_status_t tls_file(const char *var, const char *path, char **out)
{
    *out = NULL;
    if (!is_set(path))
        return NIXL_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        NIXL_ERROR("etcd: %s=%s cannot be read: %s", var, path, strerror(errno));
        return NIXL_ERR_INVALID_PARAM;
    }
    struct stat st;
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!regular) {
        NIXL_ERROR("etcd: %s=%s is not a regular file", var, path);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (!(*out = strdup(path)))
        return NIXL_ERR_NO_MEMORY;
    return NIXL_OK;
}

/* Control bytes have no place in a user name or password (and would not
 * survive the JSON round trip intact). */
static int has_control_byte(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

static nixl_status_t security_setup(nixl_etcd_t *c, const nixl_etcd_security_t *sec)
{
    nixl_status_t st;
    if (is_set(sec->cert_file) != is_set(sec->key_file)) {
        NIXL_ERROR("etcd: %s is set but %s is not: a client certificate needs its private key and the reverse",
                   is_set(sec->cert_file) ? "NIXL_ETCD_CERT_FILE" : "NIXL_ETCD_KEY_FILE",
                   is_set(sec->cert_file) ? "NIXL_ETCD_KEY_FILE" : "NIXL_ETCD_CERT_FILE");
        return NIXL_ERR_INVALID_PARAM;
    }
    if ((st = tls_file("NIXL_ETCD_CA_FILE", sec->ca_file, &c->ca_file)) != NIXL_OK ||
        (st = tls_file("NIXL_ETCD_CERT_FILE", sec->cert_file, &c->cert_file)) != NIXL_OK ||
        (st = tls_file("NIXL_ETCD_KEY_FILE", sec->key_file, &c->key_file)) != NIXL_OK)
        return st;
    if (is_set(sec->user) != is_set(sec->password)) {
        NIXL_ERROR("etcd: %s", is_set(sec->user) ? "NIXL_ETCD_USER is set but no password (NIXL_ETCD_PASSWORD_FILE)"
                                                 : "a password (NIXL_ETCD_PASSWORD_FILE) is set but no NIXL_ETCD_USER");
        return NIXL_ERR_INVALID_PARAM;
    }
    if (!is_set(sec->user))
        return NIXL_OK;
    if (strlen(sec->user) > NIXL_ETCD_USER_MAX || has_control_byte(sec->user)) {
        NIXL_ERROR("etcd: NIXL_ETCD_USER must be 1 to %d bytes without control characters", NIXL_ETCD_USER_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (strlen(sec->password) > NIXL_ETCD_PASSWORD_MAX || has_control_byte(sec->password)) {
        NIXL_ERROR("etcd: the password (NIXL_ETCD_PASSWORD_FILE) must be 1 to %d bytes without control characters "
                   "(one trailing newline is dropped)",
                   NIXL_ETCD_PASSWORD_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    snprintf(c->user, sizeof(c->user), "%s", sec->user);
    if (!(c->password = strdup(sec->password)))
        return NIXL_ERR_NO_MEMORY;
    return NIXL_OK;
}

/* Header lists that hold the token: wiped before they are freed. */
static void slist_wipe_free(struct curl_slist *l)
{
    for (struct curl_slist *h = l; h; h = h->next)
        memset(h->data, 0, strlen(h->data));
    curl_slist_free_all(l);
}

static void wipe_free(char *s)
{
    if (s) {
        volatile char *v = s;
        while (*v)
            *v++ = 0;
        free(s);
    }
}

static void security_free(nixl_etcd_t *c)
{
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    wipe_free(c->password);
    memset(c->token, 0, sizeof(c->token));
    slist_wipe_free(c->auth_headers);
}

nixl_status_t nixl_etcd_create(const char *endpoints, uint32_t timeout_ms, const nixl_etcd_security_t *sec,
                               nixl_etcd_t **client_out)
{
    static const nixl_etcd_security_t none;
    nixl_status_t st = NIXL_ERR_NO_MEMORY;
    if (!endpoints || !client_out)
        return NIXL_ERR_NULL;
    if (!sec)
        sec = &none;
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        NIXL_ERROR("etcd: curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
        return NIXL_ERR_IO;
    }
    nixl_etcd_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NIXL_ERR_NO_MEMORY;
    c->timeout_ms = timeout_ms ? timeout_ms : 1;
    c->call_buf.max = NIXL_ETCD_REPLY_MAX;
    c->watch_buf.max = ETCD_WATCH_LINE_MAX;
    st = security_setup(c, sec);
    if (st != NIXL_OK)
        goto err_urls;
    st = parse_endpoints(c, endpoints, c->ca_file || c->cert_file);
    if (st != NIXL_OK)
        goto err_urls;
    if (c->password) {
        for (size_t i = 0; i < c->num_urls; i++)
            if (!strncmp(c->urls[i], "http://", 7))
                NIXL_WARN("etcd: user %s authenticates over plain HTTP at %s: the password and token cross the "
                          "network in clear; use https://",
                          c->user, c->urls[i]);
    }
    st = NIXL_ERR_NO_MEMORY;
    /* "Expect: 100-continue" would stall every large body for a second. */
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (!h)
        goto err_urls;
    c->headers = h;
    if (!(h = curl_slist_append(c->headers, "Expect:")))
        goto err_headers;
    c->headers = h;
    if (!(c->multi = curl_multi_init()))
        goto err_headers;
    if (!(c->call = curl_easy_init()))
        goto err_multi;
    easy_common(c->call, c, c->call_err);
    curl_easy_setopt(c->call, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(c->call, CURLOPT_WRITEDATA, &c->call_buf);
    *client_out = c;
    return NIXL_OK;

err_multi:
    curl_multi_cleanup(c->multi);
err_headers:
    curl_slist_free_all(c->headers);
err_urls:
    for (size_t i = 0; i < c->num_urls; i++)
        free(c->urls[i]);
    security_free(c);
    free(c);
    if (st == NIXL_ERR_NO_MEMORY)
        NIXL_ERROR("etcd: out of memory creating the client");
    return st;
}

void nixl_etcd_destroy(nixl_etcd_t *c)
{
    if (!c)
        return;
    nixl_etcd_watch_stop(c);
    curl_easy_cleanup(c->call);
    curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->headers);
    buf_free(&c->call_buf);
    buf_free(&c->watch_buf);
    for (size_t i = 0; i < c->num_urls; i++)
        free(c->urls[i]);
    security_free(c);
    free(c);
}

void nixl_etcd_set_timeout(nixl_etcd_t *c, uint32_t timeout_ms)
{
    c->timeout_ms = timeout_ms ? timeout_ms : 1;
}

const char *nixl_etcd_endpoint(const nixl_etcd_t *c)
{
    return c->urls[c->cur];
}

int nixl_etcd_last_code(const nixl_etcd_t *c)
{
    return c->last_code;
}

unsigned nixl_etcd_auth_count(const nixl_etcd_t *c)
{
    return c->auth_count;
}

void nixl_etcd_wakeup(nixl_etcd_t *c)
{
    curl_multi_wakeup(c->multi);
}

void nixl_etcd_interrupt(nixl_etcd_t *c)
{
    atomic_store(&c->interrupted, 1);
    curl_multi_wakeup(c->multi);
}

void nixl_etcd_resume(nixl_etcd_t *c)
{
    atomic_store(&c->interrupted, 0);
}

void nixl_etcd_prefix_end(const void *prefix, size_t len, uint8_t *end, size_t *end_len_out)
{
    memcpy(end, prefix, len);
    /* The first key after every key with this prefix: bump the last byte
     * that is not 0xff and drop what follows it. */
    while (len > 0) {
        if (end[len - 1] != 0xff) {
            end[len - 1]++;
            break;
        }
        len--;
    }
    if (len == 0) {
        /* An all-0xff prefix: "\0" means "to the end of the key space". */
        end[0] = 0;
        len = 1;
    }
    *end_len_out = len;
}

/* ------------------------------------------------------------------------
 * Request bodies
 * ------------------------------------------------------------------------ */

static int json_add_bytes(cJSON *o, const char *name, const void *p, size_t n)
{
    char *b = malloc(nixl_etcd_b64_len(n) + 1);
    if (!b)
        return -1;
    nixl_etcd_b64_encode(p, n, b);
    cJSON *s = cJSON_AddStringToObject(o, name, b);
    free(b);
    return s ? 0 : -1;
}

/* int64 as a decimal string, the way the gateway reads them exactly. */
static int json_add_int64(cJSON *o, const char *name, int64_t v)
{
    char b[24];
    snprintf(b, sizeof(b), "%lld", (long long)v);
    return cJSON_AddStringToObject(o, name, b) ? 0 : -1;
}

static cJSON *op_body(const nixl_etcd_op_t *op)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    if (json_add_bytes(o, "key", op->key, op->key_len))
        goto err;
    if (op->type != NIXL_ETCD_OP_PUT && op->end && json_add_bytes(o, "range_end", op->end, op->end_len))
        goto err;
    if (op->type == NIXL_ETCD_OP_PUT) {
        if (json_add_bytes(o, "value", op->value ? op->value : "", op->value_len))
            goto err;
        if (op->lease && json_add_int64(o, "lease", op->lease))
            goto err;
    }
    if (op->type == NIXL_ETCD_OP_RANGE && op->keys_only && !cJSON_AddTrueToObject(o, "keys_only"))
        goto err;
    return o;
err:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *txn_op_body(const nixl_etcd_op_t *op)
{
    static const char *const wrap[] = {"request_range", "request_put", "request_delete_range"};
    cJSON *o = cJSON_CreateObject();
    cJSON *inner = op_body(op);
    if (!o || !inner || !cJSON_AddItemToObject(o, wrap[op->type], inner)) {
        cJSON_Delete(o);
        cJSON_Delete(inner);
        return NULL;
    }
    return o;
}

static cJSON *cmp_body(const nixl_etcd_cmp_t *cmp)
{
    static const char *const target[] = {"CREATE", "MOD", "LEASE"};
    static const char *const field[] = {"create_revision", "mod_revision", "lease"};
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "result", "EQUAL") ||
        !cJSON_AddStringToObject(o, "target", target[cmp->target]) || json_add_bytes(o, "key", cmp->key, cmp->key_len) ||
        json_add_int64(o, field[cmp->target], cmp->value)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static char *json_print_free(cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s)
        NIXL_ERROR("etcd: out of memory building a request");
    return s;
}

/* ------------------------------------------------------------------------
 * Driving the multi handle
 * ------------------------------------------------------------------------ */

/* Collect finished transfers; sets *call_done with its result. */
static void multi_reap(nixl_etcd_t *c, int *call_done, CURLcode *call_rc)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        if (m->easy_handle == c->call) {
            *call_done = 1;
            *call_rc = m->data.result;
        } else if (c->watch && m->easy_handle == c->watch) {
            c->watch_done = 1;
            c->watch_rc = m->data.result;
        }
    }
}

static int multi_step(nixl_etcd_t *c, int timeout_ms)
{
    int running;
    CURLMcode mc = curl_multi_poll(c->multi, NULL, 0, timeout_ms, NULL);
    if (mc == CURLM_OK)
        mc = curl_multi_perform(c->multi, &running);
    if (mc != CURLM_OK) {
        NIXL_ERROR("etcd: curl multi failed: %s", curl_multi_strerror(mc));
        return -1;
    }
    return 0;
}

/* Failures worth another endpoint: it did not answer, or said it cannot. */
static int transport_failed(CURLcode rc)
{
    return rc != CURLE_OK && rc != CURLE_WRITE_ERROR;
}

/* The handshake or the certificates failed: a configuration problem more
 * often than a network one.  A server that refuses our certificate (or its
 * absence) under TLS 1.3 says so after the handshake, as a receive error. */
static int tls_failed(CURLcode rc, const char *errbuf)
{
    switch (rc) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
        return 1;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
        return strstr(errbuf, "SSL") != NULL;
    default:
        return 0;
    }
}

/* The start of a reply body that is not etcd's JSON, printable, for a log line. */
static void body_text(const etcd_buf_t *b, char msg[NIXL_ETCD_WHY_MAX])
{
    size_t n = 0;
    for (; n < b->len && n < 120 && b->p[n] != '\n'; n++)
        msg[n] = (b->p[n] >= 0x20 && b->p[n] < 0x7f) ? b->p[n] : '?';
    msg[n] = '\0';
}

/* The header list for the call: with the token once there is one. */
static struct curl_slist *headers_with_token(nixl_etcd_t *c)
{
    char line[sizeof("Authorization: ") + NIXL_ETCD_TOKEN_MAX];
    struct curl_slist *l = NULL;
    for (const struct curl_slist *h = c->headers; h; h = h->next) {
        struct curl_slist *n = curl_slist_append(l, h->data);
        if (!n) {
            slist_wipe_free(l);
            return NULL;
        }
        l = n;
    }
    snprintf(line, sizeof(line), "Authorization: %s", c->token);
    struct curl_slist *n = curl_slist_append(l, line);
    memset(line, 0, sizeof(line));
    if (!n)
        slist_wipe_free(l);
    return n;
}

static void token_drop(nixl_etcd_t *c)
{
    memset(c->token, 0, sizeof(c->token));
    slist_wipe_free(c->auth_headers);
    c->auth_headers = NULL;
}

/* One call, with failover, until deadline.  On NIXL_OK the HTTP status
 * was 200 and call_buf holds the body. */
static nixl_status_t call_once(nixl_etcd_t *c, const char *path, const char *body, uint64_t deadline)
{
    char url[ETCD_URL_MAX], why[NIXL_ETCD_WHY_MAX + CURL_ERROR_SIZE];
    nixl_status_t st = NIXL_ERR_IO;
    c->last_code = 0;
    c->last_msg[0] = '\0';
    why[0] = '\0';
    if (atomic_load(&c->interrupted))
        return NIXL_ERR_CANCELED;

    for (size_t attempt = 0; attempt < c->num_urls; attempt++) {
        uint64_t now = nixl_now_ns();
        if (now >= deadline) {
            st = NIXL_ERR_TIMEOUT;
            break;
        }
        long left_ms = (long)((deadline - now) / 1000000) + 1;
        snprintf(url, sizeof(url), "%s%s", c->urls[c->cur], path);
        buf_reset(&c->call_buf);
        c->call_err[0] = '\0';
        curl_easy_setopt(c->call, CURLOPT_URL, url);
        curl_easy_setopt(c->call, CURLOPT_HTTPHEADER, c->auth_headers ? c->auth_headers : c->headers);
        curl_easy_setopt(c->call, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c->call, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
        curl_easy_setopt(c->call, CURLOPT_TIMEOUT_MS, left_ms);
        /* Leave time to try the next endpoint when this one never answers. */
        long connect_ms = c->num_urls > 1 && left_ms > 200 ? left_ms / 2 : left_ms;
        curl_easy_setopt(c->call, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
        CURLMcode mc = curl_multi_add_handle(c->multi, c->call);
        if (mc != CURLM_OK) {
            NIXL_ERROR("etcd: cannot start a request: %s", curl_multi_strerror(mc));
            return NIXL_ERR_IO;
        }
        int done = 0;
        CURLcode rc = CURLE_OK;
        int running;
        curl_multi_perform(c->multi, &running);
        multi_reap(c, &done, &rc);
        while (!done) {
            if (atomic_load(&c->interrupted)) {
                curl_multi_remove_handle(c->multi, c->call);
                return NIXL_ERR_CANCELED;
            }
            if (multi_step(c, 100)) {
                curl_multi_remove_handle(c->multi, c->call);
                return NIXL_ERR_IO;
            }
            multi_reap(c, &done, &rc);
        }
        curl_multi_remove_handle(c->multi, c->call);

        long http = 0;
        curl_easy_getinfo(c->call, CURLINFO_RESPONSE_CODE, &http);
        if (rc == CURLE_WRITE_ERROR && c->call_buf.overflow) {
            NIXL_WARN("etcd %s%s: reply larger than %u bytes; dropped", c->urls[c->cur], path, NIXL_ETCD_REPLY_MAX);
            return NIXL_ERR_BAD_METADATA;
        }
        if (!transport_failed(rc) && http == 200)
            return NIXL_OK;
        int code = -1;
        char msg[NIXL_ETCD_WHY_MAX] = "";
        if (!transport_failed(rc) && nixl_etcd_parse_error(c->call_buf.p, c->call_buf.len, &code, msg))
            body_text(&c->call_buf, msg); /* not etcd's JSON: say what it was */
        /* 14 unavailable, 4 deadline exceeded: this member cannot serve now. */
        if (transport_failed(rc) || http >= 500 || code == 14 || code == 4) {
            if (transport_failed(rc))
                snprintf(why, sizeof(why), "%s%s%s", curl_easy_strerror(rc), c->call_err[0] ? ": " : "",
                         c->call_err);
            else
                snprintf(why, sizeof(why), "HTTP %ld%s%s", http, msg[0] ? ": " : "", msg);
            if (transport_failed(rc) && tls_failed(rc, c->call_err))
                ETCD_ERROR_RATELIMITED(&c->err_rl,
                                       "etcd %s: TLS failed: %s (check NIXL_ETCD_CA_FILE, NIXL_ETCD_CERT_FILE, "
                                       "NIXL_ETCD_KEY_FILE and the server's certificate)",
                                       c->urls[c->cur], why);
            st = rc == CURLE_OPERATION_TIMEDOUT ? NIXL_ERR_TIMEOUT : NIXL_ERR_IO;
            size_t next = (c->cur + 1) % c->num_urls;
            if (next != c->cur)
                NIXL_WARN_RATELIMITED(&c->warn_rl, ETCD_WARN_INTERVAL_NS, "etcd: %s failed (%s); trying %s",
                                      c->urls[c->cur], why, c->urls[next]);
            c->cur = next;
            continue;
        }
        /* etcd answered and refused: another endpoint would say the same. */
        c->last_code = code;
        if (msg[0])
            snprintf(c->last_msg, sizeof(c->last_msg), "%s", msg);
        else
            snprintf(c->last_msg, sizeof(c->last_msg), "HTTP %ld", http);
        NIXL_DEBUG("etcd %s%s: HTTP %ld, code %d: %s", c->urls[c->cur], path, http, code, msg);
        return NIXL_ERR_IO;
    }
    NIXL_WARN_RATELIMITED(&c->warn_rl, ETCD_WARN_INTERVAL_NS, "etcd: no endpoint answered %s within %u ms (last: %s)",
                          path, c->timeout_ms, why[0] ? why : "out of time");
    return st;
}

/* A token for the user, from the endpoint that answers. */
static nixl_status_t authenticate(nixl_etcd_t *c, uint64_t deadline)
{
    char why[NIXL_ETCD_WHY_MAX], token[NIXL_ETCD_TOKEN_MAX + 1];
    token_drop(c);
    if (nixl_now_ns() < c->auth_retry_ns) {
        c->last_code = c->auth_refused_code;
        snprintf(c->last_msg, sizeof(c->last_msg), "%s", c->auth_refused_msg);
        return NIXL_ERR_IO;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "name", c->user) || !cJSON_AddStringToObject(o, "password", c->password)) {
        cJSON_Delete(o);
        NIXL_ERROR("etcd: out of memory building the authenticate request");
        return NIXL_ERR_NO_MEMORY;
    }
    /* The tree holds the password too: wipe both copies. */
    cJSON *pw = cJSON_GetObjectItemCaseSensitive(o, "password");
    char *body = cJSON_PrintUnformatted(o);
    memset(pw->valuestring, 0, strlen(pw->valuestring));
    cJSON_Delete(o);
    if (!body) {
        NIXL_ERROR("etcd: out of memory building the authenticate request");
        return NIXL_ERR_NO_MEMORY;
    }
    nixl_status_t st = call_once(c, "/v3/auth/authenticate", body, deadline);
    memset(body, 0, strlen(body));
    cJSON_free(body);
    if (st == NIXL_OK) {
        st = nixl_etcd_parse_auth(c->call_buf.p, c->call_buf.len, token, why);
        if (c->call_buf.p)
            memset(c->call_buf.p, 0, c->call_buf.len);
        if (st != NIXL_OK) {
            NIXL_WARN("etcd %s/v3/auth/authenticate: %s", c->urls[c->cur], why);
            return st;
        }
        memcpy(c->token, token, sizeof(c->token));
        memset(token, 0, sizeof(token));
        if (!(c->auth_headers = headers_with_token(c))) {
            token_drop(c);
            NIXL_ERROR("etcd: out of memory keeping the auth token");
            return NIXL_ERR_NO_MEMORY;
        }
        c->auth_count++;
        NIXL_DEBUG("etcd %s: authenticated as user %s", c->urls[c->cur], c->user);
        return NIXL_OK;
    }
    if (st == NIXL_ERR_IO && c->last_code) {
        c->auth_retry_ns = nixl_now_ns() + ETCD_AUTH_RETRY_NS;
        c->auth_refused_code = c->last_code;
        snprintf(c->auth_refused_msg, sizeof(c->auth_refused_msg), "%s", c->last_msg);
        ETCD_ERROR_RATELIMITED(&c->err_rl,
                               "etcd %s: authenticating as user %s failed: %s (check NIXL_ETCD_USER, "
                               "NIXL_ETCD_PASSWORD_FILE and that etcd has auth enabled)",
                               c->urls[c->cur], c->user, c->last_msg);
    }
    return st;
}

/* One call: authenticated first when a user is set and no token is held;
 * a refused token (expired, or etcd restarted) is renewed once. */
static nixl_status_t call_perform(nixl_etcd_t *c, const char *path, const char *body)
{
    uint64_t deadline = nixl_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    nixl_status_t st;
    if (c->password && !c->token[0] && (st = authenticate(c, deadline)) != NIXL_OK)
        return st;
    st = call_once(c, path, body, deadline);
    if (st == NIXL_ERR_IO && c->password && c->last_code == NIXL_ETCD_CODE_UNAUTHENTICATED) {
        NIXL_INFO("etcd %s%s: the auth token was refused (%s); authenticating again", c->urls[c->cur], path,
                  c->last_msg);
        if ((st = authenticate(c, deadline)) != NIXL_OK)
            return st;
        st = call_once(c, path, body, deadline);
    }
    return st;
}

/* A call whose reply is parsed as kind; the body is consumed. */
static nixl_status_t call_json(nixl_etcd_t *c, const char *path, char *body, nixl_etcd_reply_kind_t kind,
                               nixl_etcd_reply_t *reply_out)
{
    char why[NIXL_ETCD_WHY_MAX];
    nixl_etcd_reply_t r;
    if (!body)
        return NIXL_ERR_NO_MEMORY;
    nixl_status_t st = call_perform(c, path, body);
    cJSON_free(body);
    if (st != NIXL_OK)
        return st;
    st = nixl_etcd_parse_reply(kind, c->call_buf.p, c->call_buf.len, &r, why);
    if (st != NIXL_OK) {
        NIXL_WARN("etcd %s%s: %s", c->urls[c->cur], path, why);
        return st;
    }
    if (reply_out)
        *reply_out = r;
    else
        nixl_etcd_reply_free(&r);
    return NIXL_OK;
}

/* ------------------------------------------------------------------------
 * The calls
 * ------------------------------------------------------------------------ */

nixl_status_t nixl_etcd_range(nixl_etcd_t *c, const nixl_etcd_op_t *op, nixl_etcd_reply_t *reply_out)
{
    return call_json(c, "/v3/kv/range", json_print_free(op_body(op)), NIXL_ETCD_REPLY_RANGE, reply_out);
}

nixl_status_t nixl_etcd_put(nixl_etcd_t *c, const nixl_etcd_op_t *op)
{
    return call_json(c, "/v3/kv/put", json_print_free(op_body(op)), NIXL_ETCD_REPLY_PUT, NULL);
}

nixl_status_t nixl_etcd_delete(nixl_etcd_t *c, const nixl_etcd_op_t *op, int64_t *deleted_out)
{
    nixl_etcd_reply_t r;
    nixl_status_t st =
        call_json(c, "/v3/kv/deleterange", json_print_free(op_body(op)), NIXL_ETCD_REPLY_DELETE, &r);
    if (st == NIXL_OK) {
        if (deleted_out)
            *deleted_out = r.deleted;
        nixl_etcd_reply_free(&r);
    }
    return st;
}

static int txn_add_ops(cJSON *txn, const char *name, const nixl_etcd_op_t *ops, size_t n)
{
    cJSON *arr = cJSON_AddArrayToObject(txn, name);
    if (!arr)
        return -1;
    for (size_t i = 0; i < n; i++) {
        cJSON *o = txn_op_body(&ops[i]);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return -1;
        }
    }
    return 0;
}

nixl_status_t nixl_etcd_txn(nixl_etcd_t *c, const nixl_etcd_cmp_t *cmps, size_t num_cmps, const nixl_etcd_op_t *success,
                            size_t num_success, const nixl_etcd_op_t *failure, size_t num_failure,
                            nixl_etcd_reply_t *reply_out)
{
    cJSON *txn = cJSON_CreateObject();
    cJSON *arr = txn ? cJSON_AddArrayToObject(txn, "compare") : NULL;
    if (!arr)
        goto err;
    for (size_t i = 0; i < num_cmps; i++) {
        cJSON *o = cmp_body(&cmps[i]);
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            goto err;
        }
    }
    if (txn_add_ops(txn, "success", success, num_success) || txn_add_ops(txn, "failure", failure, num_failure))
        goto err;
    return call_json(c, "/v3/kv/txn", json_print_free(txn), NIXL_ETCD_REPLY_TXN, reply_out);
err:
    cJSON_Delete(txn);
    NIXL_ERROR("etcd: out of memory building a transaction");
    return NIXL_ERR_NO_MEMORY;
}

static char *lease_body(const char *name, int64_t v)
{
    cJSON *o = cJSON_CreateObject();
    if (o && json_add_int64(o, name, v)) {
        cJSON_Delete(o);
        o = NULL;
    }
    return json_print_free(o);
}

nixl_status_t nixl_etcd_lease_grant(nixl_etcd_t *c, int64_t ttl_s, int64_t *id_out, int64_t *ttl_out)
{
    nixl_etcd_reply_t r;
    nixl_status_t st = call_json(c, "/v3/lease/grant", lease_body("TTL", ttl_s), NIXL_ETCD_REPLY_LEASE_GRANT, &r);
    if (st != NIXL_OK)
        return st;
    *id_out = r.lease_id;
    *ttl_out = r.ttl;
    nixl_etcd_reply_free(&r);
    return NIXL_OK;
}

nixl_status_t nixl_etcd_lease_keepalive(nixl_etcd_t *c, int64_t id, int64_t *ttl_out)
{
    nixl_etcd_reply_t r;
    nixl_status_t st =
        call_json(c, "/v3/lease/keepalive", lease_body("ID", id), NIXL_ETCD_REPLY_LEASE_KEEPALIVE, &r);
    if (st != NIXL_OK)
        return st;
    if (r.lease_id != id) {
        NIXL_WARN("etcd %s: keepalive of lease %lld answered for lease %lld", c->urls[c->cur], (long long)id,
                  (long long)r.lease_id);
        nixl_etcd_reply_free(&r);
        return NIXL_ERR_BAD_METADATA;
    }
    *ttl_out = r.ttl;
    nixl_etcd_reply_free(&r);
    return NIXL_OK;
}

nixl_status_t nixl_etcd_lease_revoke(nixl_etcd_t *c, int64_t id)
{
    nixl_status_t st = call_json(c, "/v3/lease/revoke", lease_body("ID", id), NIXL_ETCD_REPLY_LEASE_REVOKE, NULL);
    if (st == NIXL_ERR_IO && c->last_code == NIXL_ETCD_CODE_NOT_FOUND)
        return NIXL_OK;
    return st;
}

/* ------------------------------------------------------------------------
 * The watch
 * ------------------------------------------------------------------------ */

void nixl_etcd_watch_stop(nixl_etcd_t *c)
{
    if (!c->watch)
        return;
    curl_multi_remove_handle(c->multi, c->watch);
    curl_easy_cleanup(c->watch);
    c->watch = NULL;
    slist_wipe_free(c->watch_headers);
    c->watch_headers = NULL;
    cJSON_free(c->watch_body);
    c->watch_body = NULL;
    buf_reset(&c->watch_buf);
    c->watch_scan = 0;
    c->watch_done = 0;
}

int nixl_etcd_watching(const nixl_etcd_t *c)
{
    return c->watch != NULL;
}

nixl_status_t nixl_etcd_watch_start(nixl_etcd_t *c, const void *key, size_t key_len, const void *end, size_t end_len,
                                    int64_t start_revision)
{
    nixl_etcd_watch_stop(c);
    if (c->password && !c->token[0]) {
        nixl_status_t st = authenticate(c, nixl_now_ns() + (uint64_t)c->timeout_ms * 1000000ull);
        if (st != NIXL_OK)
            return st;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *req = o ? cJSON_AddObjectToObject(o, "create_request") : NULL;
    if (!req || json_add_bytes(req, "key", key, key_len) || (end && json_add_bytes(req, "range_end", end, end_len)) ||
        (start_revision > 0 && json_add_int64(req, "start_revision", start_revision))) {
        cJSON_Delete(o);
        NIXL_ERROR("etcd: out of memory building a watch request");
        return NIXL_ERR_NO_MEMORY;
    }
    c->watch_body = json_print_free(o);
    if (!c->watch_body)
        return NIXL_ERR_NO_MEMORY;
    c->watch = curl_easy_init();
    c->watch_headers = c->token[0] ? headers_with_token(c) : NULL;
    if (!c->watch || (c->token[0] && !c->watch_headers)) {
        curl_easy_cleanup(c->watch);
        c->watch = NULL;
        slist_wipe_free(c->watch_headers);
        c->watch_headers = NULL;
        cJSON_free(c->watch_body);
        c->watch_body = NULL;
        NIXL_ERROR("etcd: cannot create the watch transfer");
        return NIXL_ERR_NO_MEMORY;
    }
    snprintf(c->watch_url, sizeof(c->watch_url), "%s/v3/watch", c->urls[c->cur]);
    c->watch_err[0] = '\0';
    easy_common(c->watch, c, c->watch_err);
    curl_easy_setopt(c->watch, CURLOPT_HTTPHEADER, c->watch_headers ? c->watch_headers : c->headers);
    curl_easy_setopt(c->watch, CURLOPT_URL, c->watch_url);
    curl_easy_setopt(c->watch, CURLOPT_POSTFIELDS, c->watch_body);
    curl_easy_setopt(c->watch, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(c->watch_body));
    curl_easy_setopt(c->watch, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(c->watch, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(c->watch, CURLOPT_WRITEDATA, &c->watch_buf);
    buf_reset(&c->watch_buf);
    c->watch_scan = 0;
    c->watch_done = 0;
    CURLMcode mc = curl_multi_add_handle(c->multi, c->watch);
    if (mc != CURLM_OK) {
        NIXL_ERROR("etcd: cannot start the watch: %s", curl_multi_strerror(mc));
        curl_easy_cleanup(c->watch);
        c->watch = NULL;
        slist_wipe_free(c->watch_headers);
        c->watch_headers = NULL;
        cJSON_free(c->watch_body);
        c->watch_body = NULL;
        return NIXL_ERR_IO;
    }
    return NIXL_OK;
}

/* Hands out every complete line; NIXL_OK or why the watch must end. */
static nixl_status_t watch_deliver(nixl_etcd_t *c, nixl_etcd_watch_cb_t cb, void *arg)
{
    etcd_buf_t *b = &c->watch_buf;
    size_t start = 0;
    nixl_status_t st = NIXL_OK;
    char why[NIXL_ETCD_WHY_MAX];
    while (st == NIXL_OK) {
        char *nl = c->watch_scan < b->len ? memchr(b->p + c->watch_scan, '\n', b->len - c->watch_scan) : NULL;
        if (!nl) {
            c->watch_scan = b->len;
            break;
        }
        size_t end = (size_t)(nl - b->p);
        size_t n = end - start;
        while (n && (b->p[start + n - 1] == '\r' || b->p[start + n - 1] == ' '))
            n--;
        if (n) {
            nixl_etcd_watch_msg_t m;
            st = nixl_etcd_parse_watch(b->p + start, n, &m, why);
            if (st != NIXL_OK) {
                NIXL_WARN_RATELIMITED(&c->warn_rl, ETCD_WARN_INTERVAL_NS, "etcd watch at %s: %s; restarting the watch",
                                      c->watch_url, why);
            } else if (m.canceled || m.compact_revision > 0) {
                /* etcd 3.4 refuses a watch for its token in the cancel reason only:
                 * "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token". */
                if (c->password && (strstr(m.cancel_reason, "Unauthenticated") || strstr(m.cancel_reason, "auth token"))) {
                    token_drop(c);
                    NIXL_INFO("etcd watch at %s: the auth token was refused (%s); the next start authenticates again",
                              c->watch_url, m.cancel_reason);
                } else {
                    NIXL_WARN_RATELIMITED(&c->warn_rl, ETCD_WARN_INTERVAL_NS,
                                          "etcd watch at %s was canceled%s%s (compacted to revision %lld); restarting it",
                                          c->watch_url, m.cancel_reason[0] ? ": " : "", m.cancel_reason,
                                          (long long)m.compact_revision);
                }
                st = NIXL_ERR_IO;
                nixl_etcd_watch_msg_free(&m);
            } else {
                cb(arg, &m);
                nixl_etcd_watch_msg_free(&m);
            }
        }
        start = end + 1;
        c->watch_scan = start;
    }
    if (start > 0 && st == NIXL_OK) {
        memmove(b->p, b->p + start, b->len - start);
        b->len -= start;
        b->p[b->len] = '\0';
        c->watch_scan -= start;
    }
    return st;
}

nixl_status_t nixl_etcd_wait(nixl_etcd_t *c, int timeout_ms, nixl_etcd_watch_cb_t cb, void *arg)
{
    int done = 0;
    CURLcode rc;
    if (timeout_ms < 0)
        timeout_ms = 0;
    if (multi_step(c, timeout_ms))
        return NIXL_ERR_IO;
    multi_reap(c, &done, &rc);
    if (!c->watch)
        return NIXL_OK;
    nixl_status_t st = watch_deliver(c, cb, arg);
    if (st == NIXL_OK && c->watch_done) {
        long http = 0;
        curl_easy_getinfo(c->watch, CURLINFO_RESPONSE_CODE, &http);
        if (c->watch_buf.overflow)
            NIXL_WARN("etcd watch at %s: a message exceeded %u bytes; restarting the watch", c->watch_url,
                      ETCD_WATCH_LINE_MAX);
        else if (c->watch_rc != CURLE_OK)
            NIXL_WARN_RATELIMITED(&c->warn_rl, ETCD_WARN_INTERVAL_NS, "etcd watch at %s ended: %s%s%s", c->watch_url,
                                  curl_easy_strerror(c->watch_rc), c->watch_err[0] ? ": " : "", c->watch_err);
        else
            NIXL_WARN_RATELIMITED(&c->warn_rl, ETCD_WARN_INTERVAL_NS, "etcd watch at %s ended (HTTP %ld)",
                                  c->watch_url, http);
        /* Next time, start from the next endpoint if this one is gone. */
        if (c->watch_rc != CURLE_OK && !c->watch_buf.overflow)
            c->cur = (c->cur + 1) % c->num_urls;
        st = NIXL_ERR_IO;
    }
    if (st != NIXL_OK)
        nixl_etcd_watch_stop(c);
    return st;
}
