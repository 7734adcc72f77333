/*
 * gen_sock_corpus.c - writes the seed inputs of tests/fuzz/sock_corpus for
 * fuzz_sock.c: byte 0 picks how the client writes (0: at once, 1..15:
 * pieces of that many bytes), the rest is what it sends.
 *   gen_sock_corpus DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC 0x4b53584eu

static uint8_t buf[1 << 16];

static size_t frame(uint8_t *p, uint32_t magic, uint16_t ver, uint16_t type, int32_t status, uint32_t len,
                    const void *payload, size_t payload_bytes)
{
    uint32_t st = (uint32_t)status;
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(magic >> (8 * i));
        p[8 + i] = (uint8_t)(st >> (8 * i));
        p[12 + i] = (uint8_t)(len >> (8 * i));
    }
    p[4] = (uint8_t)ver;
    p[5] = (uint8_t)(ver >> 8);
    p[6] = (uint8_t)type;
    p[7] = (uint8_t)(type >> 8);
    if (payload_bytes)
        memcpy(p + 16, payload, payload_bytes);
    return 16 + payload_bytes;
}

static void put(const char *dir, const char *name, uint8_t mode, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputc(mode, f) == EOF || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "gen_sock_corpus: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *d = argv[1];
    uint8_t blob[300];
    for (size_t i = 0; i < sizeof(blob); i++)
        blob[i] = (uint8_t)(i * 7 + 3);
    size_t n;
    n = frame(buf, MAGIC, 1, 1, 0, sizeof(blob), blob, sizeof(blob));
    put(d, "good-send", 0, buf, n);
    put(d, "good-send-split1", 1, buf, n);
    put(d, "good-send-split7", 7, buf, n);
    n = frame(buf, MAGIC, 1, 1, 0, 3, "odd", 3);
    put(d, "good-send-odd", 0, buf, n); /* the harness's handler refuses odd lengths */
    n = frame(buf, MAGIC, 1, 2, 0, 0, NULL, 0);
    put(d, "good-fetch", 0, buf, n);
    put(d, "good-fetch-split3", 3, buf, n);
    n = frame(buf, MAGIC, 1, 3, 0, 6, "peer-1", 6);
    put(d, "good-invalidate", 0, buf, n);
    n = frame(buf, MAGIC, 1, 1, 0, 8, "trailing", 8);
    memcpy(buf + n, "extra bytes after the frame", 27);
    put(d, "good-send-trailing", 0, buf, n + 27);
    put(d, "empty", 0, buf, 0);
    n = frame(buf, MAGIC, 1, 1, 0, 3, NULL, 0);
    put(d, "header-only-send", 0, buf, 9);
    put(d, "truncated-header", 5, buf, 9);
    n = frame(buf, MAGIC, 1, 1, 0, sizeof(blob), blob, 100);
    put(d, "truncated-payload", 0, buf, n);
    n = frame(buf, MAGIC, 1, 1, 0, 64u << 20, blob, 10);
    put(d, "claims-64mib", 0, buf, n);
    n = frame(buf, MAGIC, 1, 1, 0, (64u << 20) + 1, NULL, 0);
    put(d, "over-max", 0, buf, n);
    n = frame(buf, MAGIC, 1, 1, 0, 0xffffffffu, NULL, 0);
    put(d, "len-ffffffff", 0, buf, n);
    n = frame(buf, MAGIC ^ 1, 1, 2, 0, 0, NULL, 0);
    put(d, "bad-magic", 0, buf, n);
    n = frame(buf, MAGIC, 2, 2, 0, 0, NULL, 0);
    put(d, "bad-version", 0, buf, n);
    n = frame(buf, MAGIC, 2, 1, 0, 4, "blob", 4);
    memset(buf + n, 0, 56); /* time, nonce, MAC: refused by a keyless listener */
    put(d, "v2-send-to-keyless", 0, buf, n + 56);
    n = frame(buf, MAGIC, 1, 4, 0, 0, NULL, 0);
    put(d, "reply-as-request", 0, buf, n);
    n = frame(buf, MAGIC, 1, 9, 0, 0, NULL, 0);
    put(d, "unknown-type", 0, buf, n);
    n = frame(buf, MAGIC, 1, 2, -5, 0, NULL, 0);
    put(d, "status-in-request", 0, buf, n);
    n = frame(buf, MAGIC, 1, 2, 0, 3, "abc", 3);
    put(d, "fetch-with-payload", 0, buf, n);
    n = frame(buf, MAGIC, 1, 1, 0, 0, NULL, 0);
    put(d, "empty-send", 0, buf, n);
    n = frame(buf, MAGIC, 1, 3, 0, 5, "ab\0cd", 5);
    put(d, "invalidate-nul", 2, buf, n);
    n = frame(buf, MAGIC, 1, 3, 0, 3, "a\nb", 3);
    put(d, "invalidate-ctl", 0, buf, n);
    memset(blob, 'x', 64);
    n = frame(buf, MAGIC, 1, 3, 0, 64, blob, 64);
    put(d, "invalidate-long", 0, buf, n);
    n = frame(buf, MAGIC, 1, 3, 0, 0, NULL, 0);
    put(d, "invalidate-empty", 0, buf, n);
    memcpy(buf, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    put(d, "http-probe", 0, buf, 27);
    return 0;
}
