/*
 * socket.h - metadata over TCP: the agent's optional listener and the client
 * calls that talk to a peer's listener.
 *
 * Wire: every frame is a 16-byte header {u32 magic "NXSK", u16 version,
 * u16 type, i32 status, u32 payload length} (little-endian) and a payload.
 * A frame with a bad magic, version, type or a length over
 * NIXL_MD_SOCK_MAX_FRAME is rejected and the connection closed.  One
 * request and one reply per connection.  Magic 0x4b53584e, version 1;
 * types SEND=1 (payload: blob), FETCH=2 (no payload), INVALIDATE=3 (payload:
 * 1..63 printable bytes, no NUL), REPLY=4 (status; payload only for a
 * successful FETCH).
 *
 * Authentication (version 2): with a shared secret (auth.h) a request is
 * the header (version 2), the payload, then u64 time (ns since the epoch),
 * a 16-byte random nonce and HMAC-SHA256 over "nixl-md-socket-request-2"
 * (with its NUL), the header, time, nonce and payload.  Its reply is the
 * header (version 2), the payload, then HMAC-SHA256 over
 * "nixl-md-socket-reply-2" (with its NUL), the request's nonce, the reply
 * header and payload.  A listener with a secret answers any other request
 * (version 1, a wrong MAC, a time more than 30 s from its own, a nonce it
 * saw) with a version-1 reply of status NIXL_ERR_NOT_AUTHENTICATED and runs
 * no handler; so does a listener without one a version-2 request.  A
 * client with a secret accepts only a version-2 reply whose MAC verifies,
 * or a version-1 reply with an error status and no payload (a refusal,
 * which grants nothing).  Without a secret the listener has no
 * authentication: bind it (NIXL_LISTEN_ADDR) where only trusted peers
 * reach it.
 * nixl_md_listener_stop must not be called from inside a handler.
 */
#ifndef NIXL_MD_SOCKET_H
#define NIXL_MD_SOCKET_H

#include <stddef.h>
#include <stdint.h>

#include "md/auth.h"
#include "nixl.h"

#define NIXL_MD_SOCK_MAX_FRAME (64u << 20)

typedef struct nixl_md_listener nixl_md_listener_t;

/* Called on the listener thread, one at a time. */
typedef struct nixl_md_handlers {
    void *arg;
    /* A peer sent its blob; from: the connection's source address (numeric, no port). */
    nixl_status_t (*on_load)(void *arg, const char *from, const void *blob, size_t len);
    /* A peer asks for our blob: return a malloc'd copy (the listener frees it). */
    nixl_status_t (*on_fetch)(void *arg, void **blob_out, size_t *len_out);
    /* A peer asks us to forget it (from: as for on_load). */
    nixl_status_t (*on_invalidate)(void *arg, const char *from, const char *name);
    /* Non-NULL: only authenticated requests are served (kept by the
     * caller until nixl_md_listener_stop). */
    const nixl_md_key_t *key;
} nixl_md_handlers_t;

/* Bind addr:port (port 0 = any) and serve on a thread. */
nixl_status_t nixl_md_listener_start(const char *addr, uint16_t port, const nixl_md_handlers_t *handlers,
                                     nixl_md_listener_t **listener_out);
uint16_t nixl_md_listener_port(const nixl_md_listener_t *listener);
/* What the listener holds and did (counters since start), for tests and
 * diagnostics; safe from any thread. */
typedef struct nixl_md_listener_stats {
    size_t conns, peak_conns;                /* connections open now, and at most */
    size_t payload_bytes, peak_payload_bytes; /* request buffers held now, and at most */
    uint64_t accepted, evicted, expired;     /* evicted: closed for a newer one (caps) */
    uint64_t auth_refused;                   /* requests refused as not authenticated */
} nixl_md_listener_stats_t;
void nixl_md_listener_stats(const nixl_md_listener_t *listener, nixl_md_listener_stats_t *out);
/* Stop the thread (bounded time: in-flight connections are cut), free. */
void nixl_md_listener_stop(nixl_md_listener_t *listener);

/* Client side.  Each returns the peer's status, or NIXL_ERR_IO /
 * NIXL_ERR_TIMEOUT / NIXL_ERR_BAD_METADATA (malformed reply frame). */
nixl_status_t nixl_md_sock_send(const char *ip, uint16_t port, const void *blob, size_t len, int timeout_ms);
nixl_status_t nixl_md_sock_fetch(const char *ip, uint16_t port, int timeout_ms, void **blob_out, size_t *len_out);
nixl_status_t nixl_md_sock_invalidate(const char *ip, uint16_t port, const char *name, int timeout_ms);
/* The same, authenticated with key (NULL: as above). */
nixl_status_t nixl_md_sock_send_k(const nixl_md_key_t *key, const char *ip, uint16_t port, const void *blob,
                                  size_t len, int timeout_ms);
nixl_status_t nixl_md_sock_fetch_k(const nixl_md_key_t *key, const char *ip, uint16_t port, int timeout_ms,
                                   void **blob_out, size_t *len_out);
nixl_status_t nixl_md_sock_invalidate_k(const nixl_md_key_t *key, const char *ip, uint16_t port, const char *name,
                                        int timeout_ms);

#endif
