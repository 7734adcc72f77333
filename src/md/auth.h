/*
 * auth.h - authenticated metadata: a secret shared by the agents of one
 * deployment (NIXL_MD_SECRET_FILE) and HMAC-SHA256 over what they send
 * each other (OpenSSL's libcrypto).  Used by the listener's frames
 * (socket.c).  Built without libcrypto, loading a key fails with
 * NIXL_ERR_NOT_SUPPORTED and says so.
 */
#ifndef NIXL_MD_AUTH_H
#define NIXL_MD_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "nixl.h"

#define NIXL_MD_MAC_LEN 32
#define NIXL_MD_NONCE_LEN 16
/* A secret shorter than this is refused (a guessable key is no key). */
#define NIXL_MD_SECRET_MIN 16
#define NIXL_MD_SECRET_MAX 4096

typedef struct nixl_md_key nixl_md_key_t;

/* 1 when built with libcrypto. */
int nixl_md_auth_available(void);
/* The secret in the file at path: a regular file that neither group nor
 * others may read or write (else NIXL_ERR_PERMISSION, with the chmod to
 * run), NIXL_MD_SECRET_MIN..MAX bytes once one trailing newline is
 * dropped (else NIXL_ERR_INVALID_PARAM).  Every failure is logged with the
 * path and why. */
nixl_status_t nixl_md_key_load(const char *path, nixl_md_key_t **key_out);
/* The same from bytes (tests). */
nixl_status_t nixl_md_key_from_bytes(const void *secret, size_t len, nixl_md_key_t **key_out);
void nixl_md_key_free(nixl_md_key_t *key);
/* HMAC-SHA256 of the concatenation of parts. */
nixl_status_t nixl_md_mac(const nixl_md_key_t *key, const struct iovec *parts, int nparts,
                          uint8_t out[NIXL_MD_MAC_LEN]);
/* Equal in constant time. */
int nixl_md_mac_equal(const uint8_t *a, const uint8_t *b);

#endif
