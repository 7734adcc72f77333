/*
 * auth.c - the shared secret and HMAC-SHA256 (see auth.h).
 *
 * The secret is used as the HMAC key as it is; what each MAC covers starts
 * with a label naming its use (socket.c), so a MAC made for one kind of
 * message never verifies as another.  Keys are immutable once loaded and
 * every MAC is computed in a context of its own (a copy of one set up with
 * the key), so one key serves every thread.
 */
#include "md/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

#ifdef NIXL_HAVE_LIBCRYPTO
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#endif

struct nixl_md_key {
    size_t len;
    uint8_t bytes[NIXL_MD_SECRET_MAX];
#ifdef NIXL_HAVE_LIBCRYPTO
    EVP_MAC *mac;
    /* Initialized with the key once; each MAC starts from a copy (new and
     * init cost about 15 us in OpenSSL 3, a copy about 1).  The lock
     * covers the copying only. */
    EVP_MAC_CTX *ready;
    pthread_mutex_t lock;
#endif
};

int nixl_md_auth_available(void)
{
#ifdef NIXL_HAVE_LIBCRYPTO
    return 1;
#else
    return 0;
#endif
}

nixl_status_t nixl_md_key_from_bytes(const void *secret, size_t len, nixl_md_key_t **key_out)
{
    if (!secret || !key_out)
        return NIXL_ERR_NULL;
    *key_out = NULL;
#ifndef NIXL_HAVE_LIBCRYPTO
    (void)len;
    NIXL_ERROR("md auth: a metadata secret is set but this libnixl was built without OpenSSL's libcrypto "
               "(libssl-dev): it cannot authenticate metadata");
    return NIXL_ERR_NOT_SUPPORTED;
#else
    if (len < NIXL_MD_SECRET_MIN || len > NIXL_MD_SECRET_MAX) {
        NIXL_ERROR("md auth: the metadata secret is %zu bytes; it must be %d to %d", len, NIXL_MD_SECRET_MIN,
                   NIXL_MD_SECRET_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    nixl_md_key_t *k = calloc(1, sizeof(*k));
    if (!k)
        return NIXL_ERR_NO_MEMORY;
    k->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!k->mac) {
        NIXL_ERROR("md auth: OpenSSL has no HMAC");
        free(k);
        return NIXL_ERR_NOT_SUPPORTED;
    }
    memcpy(k->bytes, secret, len);
    k->len = len;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    k->ready = EVP_MAC_CTX_new(k->mac);
    if (!k->ready || !EVP_MAC_init(k->ready, k->bytes, k->len, params)) {
        NIXL_ERROR("md auth: OpenSSL cannot set up HMAC-SHA256");
        EVP_MAC_CTX_free(k->ready);
        EVP_MAC_free(k->mac);
        free(k);
        return NIXL_ERR_NOT_SUPPORTED;
    }
    pthread_mutex_init(&k->lock, NULL);
    *key_out = k;
    return NIXL_OK;
#endif
}

nixl_status_t nixl_secret_file_read(const char *var, const char *path, uint8_t *buf, size_t cap, size_t *len_out)
{
    *len_out = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        NIXL_ERROR("cannot open the secret %s=%s: %s", var, path, strerror(e));
        return e == EACCES ? NIXL_ERR_PERMISSION : NIXL_ERR_INVALID_PARAM;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        NIXL_ERROR("%s=%s is not a regular file", var, path);
        close(fd);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (st.st_mode & 077) {
        NIXL_ERROR("%s=%s can be read or written by others (mode %04o): a secret others can read is none; run "
                   "chmod 600 %s",
                   var, path, (unsigned)(st.st_mode & 07777), path);
        close(fd);
        return NIXL_ERR_PERMISSION;
    }
    size_t len = 0;
    uint8_t extra;
    for (;;) {
        /* Once buf is full, one more byte tells a file that fits from one that does not. */
        ssize_t n = len < cap ? read(fd, buf + len, cap - len) : read(fd, &extra, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            NIXL_ERROR("reading %s=%s failed: %s", var, path, strerror(errno));
            close(fd);
            memset(buf, 0, len);
            return NIXL_ERR_IO;
        }
        if (n == 0)
            break;
        if (len == cap) {
            NIXL_ERROR("%s=%s holds more than %zu bytes", var, path, cap);
            close(fd);
            memset(buf, 0, len);
            return NIXL_ERR_INVALID_PARAM;
        }
        len += (size_t)n;
    }
    close(fd);
    if (len && buf[len - 1] == '\n')
        len--;
    if (len && buf[len - 1] == '\r')
        len--;
    *len_out = len;
    return NIXL_OK;
}

nixl_status_t nixl_md_key_load(const char *path, nixl_md_key_t **key_out)
{
    if (!path || !key_out)
        return NIXL_ERR_NULL;
    *key_out = NULL;
    /* Room for the longest secret and its line end: a longer one is refused below. */
    uint8_t buf[NIXL_MD_SECRET_MAX + 2];
    size_t len;
    nixl_status_t s = nixl_secret_file_read("NIXL_MD_SECRET_FILE", path, buf, sizeof(buf), &len);
    if (s == NIXL_OK)
        s = nixl_md_key_from_bytes(buf, len, key_out);
    memset(buf, 0, sizeof(buf));
    if (s == NIXL_ERR_INVALID_PARAM)
        NIXL_ERROR("md auth: (the secret was read from NIXL_MD_SECRET_FILE=%s)", path);
    return s;
}

void nixl_md_key_free(nixl_md_key_t *key)
{
    if (!key)
        return;
#ifdef NIXL_HAVE_LIBCRYPTO
    EVP_MAC_CTX_free(key->ready);
    EVP_MAC_free(key->mac);
    pthread_mutex_destroy(&key->lock);
    OPENSSL_cleanse(key->bytes, sizeof(key->bytes));
#endif
    free(key);
}

nixl_status_t nixl_md_mac(const nixl_md_key_t *key, const struct iovec *parts, int nparts,
                          uint8_t out[NIXL_MD_MAC_LEN])
{
#ifndef NIXL_HAVE_LIBCRYPTO
    (void)key;
    (void)parts;
    (void)nparts;
    memset(out, 0, NIXL_MD_MAC_LEN);
    return NIXL_ERR_NOT_SUPPORTED;
#else
    if (!key)
        return NIXL_ERR_NULL;
    nixl_md_key_t *k = (nixl_md_key_t *)key; /* the lock only */
    pthread_mutex_lock(&k->lock);
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup(key->ready);
    pthread_mutex_unlock(&k->lock);
    if (!ctx)
        return NIXL_ERR_NO_MEMORY;
    size_t outl = 0;
    int ok = 1;
    for (int i = 0; ok && i < nparts; i++)
        if (parts[i].iov_len)
            ok = EVP_MAC_update(ctx, parts[i].iov_base, parts[i].iov_len);
    ok = ok && EVP_MAC_final(ctx, out, &outl, NIXL_MD_MAC_LEN) && outl == NIXL_MD_MAC_LEN;
    EVP_MAC_CTX_free(ctx);
    if (!ok) {
        NIXL_ERROR("md auth: HMAC-SHA256 failed in OpenSSL");
        return NIXL_ERR_BACKEND;
    }
    return NIXL_OK;
#endif
}

int nixl_md_mac_equal(const uint8_t *a, const uint8_t *b)
{
    unsigned d = 0;
    for (int i = 0; i < NIXL_MD_MAC_LEN; i++)
        d |= (unsigned)(a[i] ^ b[i]);
    return d == 0;
}

static const char seal_label[] = "nixl-md-sealed-blob-1";
#define SEAL_MAGIC 0x414d584eu /* "NXMA" */

static nixl_status_t seal_mac(const nixl_md_key_t *key, const char *purpose, const void *blob, size_t len,
                              uint8_t out[NIXL_MD_MAC_LEN])
{
    const struct iovec parts[] = {{(void *)seal_label, sizeof(seal_label)},
                                  {(void *)purpose, strlen(purpose) + 1},
                                  {(void *)blob, len}};
    return nixl_md_mac(key, parts, 3, out);
}

nixl_status_t nixl_md_seal(const nixl_md_key_t *key, const char *purpose, const void *blob, size_t len, void **out,
                           size_t *out_len)
{
    if (!key || !purpose || !blob || !out || !out_len)
        return NIXL_ERR_NULL;
    uint8_t *v = malloc(NIXL_MD_SEAL_LEN + len);
    if (!v)
        return NIXL_ERR_NO_MEMORY;
    memset(v, 0, 8);
    v[0] = (uint8_t)SEAL_MAGIC;
    v[1] = (uint8_t)(SEAL_MAGIC >> 8);
    v[2] = (uint8_t)(SEAL_MAGIC >> 16);
    v[3] = (uint8_t)(SEAL_MAGIC >> 24);
    v[4] = 1;
    memcpy(v + NIXL_MD_SEAL_LEN, blob, len);
    nixl_status_t st = seal_mac(key, purpose, blob, len, v + 8);
    if (st != NIXL_OK) {
        free(v);
        return st;
    }
    *out = v;
    *out_len = NIXL_MD_SEAL_LEN + len;
    return NIXL_OK;
}

int nixl_md_is_sealed(const void *value, size_t len)
{
    const uint8_t *v = value;
    return v && len >= NIXL_MD_SEAL_LEN &&
           ((uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 | (uint32_t)v[3] << 24) == SEAL_MAGIC;
}

int nixl_md_unseal(const nixl_md_key_t *key, const char *purpose, const void *value, size_t len, const void **blob,
                   size_t *blob_len)
{
    if (!nixl_md_is_sealed(value, len))
        return 0;
    const uint8_t *v = value;
    uint8_t want[NIXL_MD_MAC_LEN];
    if (!key || !purpose || v[4] != 1 || v[5] || v[6] || v[7] ||
        seal_mac(key, purpose, v + NIXL_MD_SEAL_LEN, len - NIXL_MD_SEAL_LEN, want) != NIXL_OK ||
        !nixl_md_mac_equal(want, v + 8))
        return -1;
    *blob = v + NIXL_MD_SEAL_LEN;
    *blob_len = len - NIXL_MD_SEAL_LEN;
    return 1;
}
