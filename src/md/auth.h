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
/* A secret kept in a file (NIXL_MD_SECRET_FILE, NIXL_ETCD_PASSWORD_FILE):
 * a regular file that neither group nor others may read or write (else
 * NIXL_ERR_PERMISSION, with the chmod to run), at most cap bytes (else
 * NIXL_ERR_INVALID_PARAM); one trailing newline (\n or \r\n) is dropped.
 * var names the setting in the log line of every failure.  The caller
 * wipes buf when done. */
nixl_status_t nixl_secret_file_read(const char *var, const char *path, uint8_t *buf, size_t cap, size_t *len_out);
/* The same from bytes (tests). */
nixl_status_t nixl_md_key_from_bytes(const void *secret, size_t len, nixl_md_key_t **key_out);
void nixl_md_key_free(nixl_md_key_t *key);
/* HMAC-SHA256 of the concatenation of parts. */
nixl_status_t nixl_md_mac(const nixl_md_key_t *key, const struct iovec *parts, int nparts,
                          uint8_t out[NIXL_MD_MAC_LEN]);
/* Equal in constant time. */
int nixl_md_mac_equal(const uint8_t *a, const uint8_t *b);

/* A blob signed for storage (etcd), where no frame carries a MAC:
 * u32 "NXMA", u8 version 1, three zero bytes, the MAC, then the blob;
 * the MAC is HMAC-SHA256 over "nixl-md-sealed-blob-1" (with its NUL), the
 * purpose (with its NUL; etcd: the blob's label) and the blob. */
#define NIXL_MD_SEAL_LEN (8 + NIXL_MD_MAC_LEN)
nixl_status_t nixl_md_seal(const nixl_md_key_t *key, const char *purpose, const void *blob, size_t len, void **out,
                           size_t *out_len);
/* nixl_md_unseal: 1, with blob and blob_len set (inside value), when value is
 * sealed and its MAC verifies with key for purpose; -1 when it is sealed
 * but does not verify (another secret, another purpose, changed bytes, or
 * key NULL); 0 when it is not sealed (a plain blob). */
int nixl_md_is_sealed(const void *value, size_t len);
int nixl_md_unseal(const nixl_md_key_t *key, const char *purpose, const void *value, size_t len, const void **blob,
                   size_t *blob_len);

#endif
