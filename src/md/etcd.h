/*
 * etcd.h - a small client of etcd's v3 JSON gateway (HTTP, libcurl): the
 * key-value calls, transactions, leases and one watch stream.
 *
 * Threads: one thread owns a client and makes every call on it; only
 * nixl_etcd_wakeup and nixl_etcd_interrupt may come from other threads.
 * Calls block for at most the client's timeout.  The watch runs inside the
 * same curl multi handle, so it advances during every call and during
 * nixl_etcd_wait, which is where its messages are handed out.
 *
 * Endpoints are tried in order: a call that cannot reach one (connection
 * refused, timeout, HTTP 5xx, etcd "unavailable") moves to the next and
 * stays there while it answers.  Every reply goes through etcd_parse.c.
 * Statuses: NIXL_ERR_IO (no endpoint answered, or etcd refused the
 * request: nixl_etcd_last_code gives etcd's gRPC code), NIXL_ERR_TIMEOUT,
 * NIXL_ERR_BAD_METADATA (malformed reply), NIXL_ERR_CANCELED (interrupted).
 *
 * Security (nixl_etcd_security_t): https:// endpoints are verified against
 * a CA file (or the system's CAs), peer and host name both, always; a
 * client certificate and key may be presented.  With a user, the client
 * authenticates (POST /v3/auth/authenticate) before its first call and
 * sends the token in the Authorization header of every request; a call
 * refused for its token (expired: gRPC code 16) authenticates again and is
 * tried once more, within the same timeout.
 */
#ifndef NIXL_MD_ETCD_H
#define NIXL_MD_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "md/etcd_parse.h"
#include "nixl.h"

/* gRPC codes etcd answers with that callers act on. */
#define NIXL_ETCD_CODE_INVALID_ARGUMENT 3 /* e.g. "authentication failed, invalid user ID or password" */
#define NIXL_ETCD_CODE_NOT_FOUND 5        /* e.g. "requested lease not found" */
#define NIXL_ETCD_CODE_UNAUTHENTICATED 16 /* "invalid auth token": expired, or etcd restarted */

#define NIXL_ETCD_USER_MAX 128
#define NIXL_ETCD_PASSWORD_MAX 1024

typedef struct nixl_etcd nixl_etcd_t;

typedef enum {
    NIXL_ETCD_OP_RANGE = 0,
    NIXL_ETCD_OP_PUT,
    NIXL_ETCD_OP_DELETE,
} nixl_etcd_op_type_t;

/* One operation, alone or inside a transaction.  end == NULL: the key
 * alone; otherwise [key, end) (use nixl_etcd_prefix_end for a prefix). */
typedef struct nixl_etcd_op {
    nixl_etcd_op_type_t type;
    const void *key;
    size_t key_len;
    const void *end;
    size_t end_len;
    const void *value; /* PUT */
    size_t value_len;
    int64_t lease;     /* PUT: 0 = none */
    int keys_only;     /* RANGE */
} nixl_etcd_op_t;

typedef enum {
    NIXL_ETCD_CMP_CREATE = 0, /* create revision of key == value (0: absent) */
    NIXL_ETCD_CMP_MOD,        /* mod revision == value */
    NIXL_ETCD_CMP_LEASE,      /* lease of key == value */
} nixl_etcd_cmp_target_t;

/* Equality comparisons only: that is all we need. */
typedef struct nixl_etcd_cmp {
    nixl_etcd_cmp_target_t target;
    const void *key;
    size_t key_len;
    int64_t value;
} nixl_etcd_cmp_t;

/* TLS and etcd users; NULL or "" leaves a setting out. */
typedef struct nixl_etcd_security {
    const char *ca_file;   /* PEM CAs that sign the servers' certificates (default: the system's) */
    const char *cert_file; /* PEM client certificate, with key_file */
    const char *key_file;  /* its private key (PEM, not encrypted) */
    const char *user;      /* etcd user: authenticate with password */
    const char *password;  /* copied; the caller may wipe its own copy */
} nixl_etcd_security_t;

/* endpoints: comma-separated URLs ("http://10.0.0.1:2379,https://..."); a
 * bare host:port gets https:// when a TLS file is set, http:// otherwise.
 * timeout_ms bounds each call.  sec may be NULL.  Refused, with a log line
 * saying why (NIXL_ERR_INVALID_PARAM): a certificate without its key or a
 * key without its certificate, a TLS file that cannot be read, a TLS file
 * with an http:// endpoint, a user without a password or the reverse, a
 * user or password with control bytes or over the limits above. */
nixl_status_t nixl_etcd_create(const char *endpoints, uint32_t timeout_ms, const nixl_etcd_security_t *sec,
                               nixl_etcd_t **client_out);
void nixl_etcd_destroy(nixl_etcd_t *client);
void nixl_etcd_set_timeout(nixl_etcd_t *client, uint32_t timeout_ms);
/* The endpoint calls go to now (for log lines). */
const char *nixl_etcd_endpoint(const nixl_etcd_t *client);
/* etcd's gRPC code for the last refused call (0: none). */
int nixl_etcd_last_code(const nixl_etcd_t *client);
/* How many times the client authenticated so far (tests). */
unsigned nixl_etcd_auth_count(const nixl_etcd_t *client);

/* Any thread: make the owner's current or next nixl_etcd_wait return. */
void nixl_etcd_wakeup(nixl_etcd_t *client);
/* Any thread: calls fail with NIXL_ERR_CANCELED until nixl_etcd_resume. */
void nixl_etcd_interrupt(nixl_etcd_t *client);
void nixl_etcd_resume(nixl_etcd_t *client);

/* [prefix, end) covers every key starting with prefix; end has room for
 * len bytes, *end_len_out gets its length. */
void nixl_etcd_prefix_end(const void *prefix, size_t len, uint8_t *end, size_t *end_len_out);

/* The calls.  reply_out (may be NULL where noted) is freed with
 * nixl_etcd_reply_free. */
nixl_status_t nixl_etcd_range(nixl_etcd_t *c, const nixl_etcd_op_t *op, nixl_etcd_reply_t *reply_out);
nixl_status_t nixl_etcd_put(nixl_etcd_t *c, const nixl_etcd_op_t *op);
nixl_status_t nixl_etcd_delete(nixl_etcd_t *c, const nixl_etcd_op_t *op, int64_t *deleted_out);
nixl_status_t nixl_etcd_txn(nixl_etcd_t *c, const nixl_etcd_cmp_t *cmps, size_t num_cmps, const nixl_etcd_op_t *success,
                            size_t num_success, const nixl_etcd_op_t *failure, size_t num_failure,
                            nixl_etcd_reply_t *reply_out);
nixl_status_t nixl_etcd_lease_grant(nixl_etcd_t *c, int64_t ttl_s, int64_t *id_out, int64_t *ttl_out);
/* *ttl_out 0: the lease no longer exists. */
nixl_status_t nixl_etcd_lease_keepalive(nixl_etcd_t *c, int64_t id, int64_t *ttl_out);
/* NIXL_OK also when the lease was already gone. */
nixl_status_t nixl_etcd_lease_revoke(nixl_etcd_t *c, int64_t id);

/* The watch: one stream over [key, end) from start_revision.  Starting one
 * replaces the previous. */
nixl_status_t nixl_etcd_watch_start(nixl_etcd_t *c, const void *key, size_t key_len, const void *end, size_t end_len,
                                    int64_t start_revision);
void nixl_etcd_watch_stop(nixl_etcd_t *c);
int nixl_etcd_watching(const nixl_etcd_t *c);

typedef void (*nixl_etcd_watch_cb_t)(void *arg, const nixl_etcd_watch_msg_t *msg);
/* Wait up to timeout_ms for watch messages or a wakeup, and hand every
 * complete message to cb.  NIXL_OK; or, when the watch ended (etcd went
 * away, the watch was canceled, a message was malformed), the reason
 * (NIXL_ERR_IO, NIXL_ERR_BAD_METADATA), logged, with the watch stopped. */
nixl_status_t nixl_etcd_wait(nixl_etcd_t *c, int timeout_ms, nixl_etcd_watch_cb_t cb, void *arg);

#endif
