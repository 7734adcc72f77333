/*
 * etcd_parse.h - the replies of etcd's v3 JSON gateway, parsed as untrusted
 * input, and the base64 both directions need.
 *
 * Every reply is validated completely before a caller sees it: the JSON must
 * parse, each field we read must have the expected type, int64 fields (etcd
 * sends them as strings) must be integers in range, keys and values must be
 * valid base64 within the size limits below.  Fields we do not know are
 * ignored (newer etcd versions add some); fields proto3 leaves out when they
 * hold their zero value read as zero.  On success the caller owns the result
 * and frees it with the matching *_free; on failure nothing is allocated and
 * `why` says what was wrong.  No function here logs: the caller knows which
 * request the reply belongs to and logs once.
 */
#ifndef NIXL_MD_ETCD_PARSE_H
#define NIXL_MD_ETCD_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "nixl.h"

/* Bounds on what a reply may hold.  Keys we write are short; values are
 * metadata blobs (at most the socket channel's frame limit). */
#define NIXL_ETCD_KEY_MAX 4096u
#define NIXL_ETCD_VALUE_MAX (64u << 20)
#define NIXL_ETCD_KVS_MAX (1u << 20)
#define NIXL_ETCD_EVENTS_MAX (1u << 20)
/* A whole reply (base64 inflates by 4/3, plus JSON around it). */
#define NIXL_ETCD_REPLY_MAX (96u << 20)
#define NIXL_ETCD_WHY_MAX 160
/* An auth token: etcd's simple tokens are ~20 bytes, its JWTs a few hundred. */
#define NIXL_ETCD_TOKEN_MAX 2048u

typedef struct nixl_etcd_header {
    uint64_t cluster_id;
    uint64_t member_id;
    int64_t revision;
    uint64_t raft_term;
} nixl_etcd_header_t;

/* One key-value.  key is never empty; value is NULL when absent (keys_only
 * ranges, DELETE events).  Both are NUL-terminated for convenience (the NUL
 * is not counted) and may hold any bytes. */
typedef struct nixl_etcd_kv {
    uint8_t *key;
    size_t key_len;
    uint8_t *value;
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease;
} nixl_etcd_kv_t;

/* What kind of request a reply answers: selects the fields required. */
typedef enum {
    NIXL_ETCD_REPLY_RANGE = 0,
    NIXL_ETCD_REPLY_PUT,
    NIXL_ETCD_REPLY_DELETE,
    NIXL_ETCD_REPLY_TXN,
    NIXL_ETCD_REPLY_LEASE_GRANT,
    NIXL_ETCD_REPLY_LEASE_KEEPALIVE,
    NIXL_ETCD_REPLY_LEASE_REVOKE,
    NIXL_ETCD_REPLY_KIND_COUNT
} nixl_etcd_reply_kind_t;

typedef struct nixl_etcd_reply {
    nixl_etcd_header_t header;
    /* RANGE: the kvs; TXN: the kvs of every range response, in order. */
    nixl_etcd_kv_t *kvs;
    size_t num_kvs;
    int64_t count;     /* RANGE */
    int more;          /* RANGE */
    int64_t deleted;   /* DELETE */
    int succeeded;     /* TXN */
    int64_t lease_id;  /* LEASE_GRANT, LEASE_KEEPALIVE */
    int64_t ttl;       /* LEASE_GRANT, LEASE_KEEPALIVE: 0 = the lease is gone */
} nixl_etcd_reply_t;

typedef enum {
    NIXL_ETCD_EVENT_PUT = 0,
    NIXL_ETCD_EVENT_DELETE = 1,
} nixl_etcd_event_type_t;

typedef struct nixl_etcd_event {
    nixl_etcd_event_type_t type;
    nixl_etcd_kv_t kv;
} nixl_etcd_event_t;

/* One message of a watch stream (one line of the HTTP body). */
typedef struct nixl_etcd_watch_msg {
    nixl_etcd_header_t header;
    int64_t watch_id;
    int created;
    int canceled;
    int64_t compact_revision; /* > 0: the start revision was compacted away */
    char cancel_reason[NIXL_ETCD_WHY_MAX];
    nixl_etcd_event_t *events;
    size_t num_events;
} nixl_etcd_watch_msg_t;

/* Parse the reply to a request of this kind (HTTP status 200).
 * NIXL_ERR_BAD_METADATA when the reply is malformed, NIXL_ERR_NO_MEMORY. */
nixl_status_t nixl_etcd_parse_reply(nixl_etcd_reply_kind_t kind, const char *buf, size_t len,
                                    nixl_etcd_reply_t *out, char why[NIXL_ETCD_WHY_MAX]);
void nixl_etcd_reply_free(nixl_etcd_reply_t *r);

/* Parse one watch stream line.  A line carrying an error object instead of
 * a result gives NIXL_ERR_IO with the error's message in why. */
nixl_status_t nixl_etcd_parse_watch(const char *buf, size_t len, nixl_etcd_watch_msg_t *out,
                                    char why[NIXL_ETCD_WHY_MAX]);
void nixl_etcd_watch_msg_free(nixl_etcd_watch_msg_t *m);

/* The reply to /v3/auth/authenticate: {"header": {...}, "token": "..."}.
 * The token (1 to NIXL_ETCD_TOKEN_MAX bytes of the characters simple and
 * JWT tokens use: letters, digits and "._-+/=") is copied to token,
 * NUL-terminated; it goes into an HTTP header, so nothing else passes. */
nixl_status_t nixl_etcd_parse_auth(const char *buf, size_t len, char token[NIXL_ETCD_TOKEN_MAX + 1],
                                   char why[NIXL_ETCD_WHY_MAX]);

/* The body of a non-200 reply: {"error": ..., "code": N, "message": ...}.
 * Writes the gRPC code and a printable message (cut to fit); 0 on success,
 * -1 when the body is not such an object. */
int nixl_etcd_parse_error(const char *buf, size_t len, int *code_out, char msg[NIXL_ETCD_WHY_MAX]);

/* Base64 (standard alphabet, padded), as the gateway encodes bytes. */
size_t nixl_etcd_b64_len(size_t n); /* encoded length, without NUL */
void nixl_etcd_b64_encode(const void *src, size_t n, char *dst); /* writes b64_len(n) + 1 bytes */
/* Strict decode into dst (room for len / 4 * 3 bytes); -1 on bad input. */
int nixl_etcd_b64_decode(const char *src, size_t len, uint8_t *dst, size_t *n_out);

#endif
