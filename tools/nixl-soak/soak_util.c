/*
 * soak_util.c - helpers the soak driver and peers share: the byte pattern,
 * clocks, memory and fd counts from /proc, and whole reads/writes on pipes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "soak.h"

uint64_t soak_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* One 64-bit word of the stream per 8 bytes: cheap enough to fill and check
 * gigabytes in a soak run. */
static inline uint64_t soak_word(uint64_t seed, uint64_t w)
{
    return soak_mix64(seed * 0x100000001b3ull ^ w);
}

void soak_fill(uint8_t *dst, uint64_t len, uint64_t seed, uint64_t o)
{
    uint64_t i = 0;
    for (; i < len && ((o + i) & 7); i++)
        dst[i] = (uint8_t)(soak_word(seed, (o + i) >> 3) >> (((o + i) & 7) * 8));
    for (; i + 8 <= len; i += 8) {
        uint64_t w = soak_word(seed, (o + i) >> 3);
        memcpy(dst + i, &w, 8); /* little-endian hosts: byte b is bits 8b.. */
    }
    for (; i < len; i++)
        dst[i] = (uint8_t)(soak_word(seed, (o + i) >> 3) >> (((o + i) & 7) * 8));
}

uint64_t soak_check(const uint8_t *p, uint64_t len, uint64_t seed, uint64_t o, uint64_t *first_bad)
{
    uint8_t want[4096];
    uint64_t bad = 0;
    for (uint64_t done = 0; done < len;) {
        uint64_t n = len - done < sizeof(want) ? len - done : sizeof(want);
        soak_fill(want, n, seed, o + done);
        if (memcmp(p + done, want, n) != 0) {
            for (uint64_t i = 0; i < n; i++) {
                if (p[done + i] != want[i]) {
                    if (bad == 0)
                        *first_bad = done + i;
                    bad++;
                }
            }
        }
        done += n;
    }
    return bad;
}

uint64_t soak_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void soak_sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static uint64_t status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t kb = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            unsigned long long v = 0;
            if (sscanf(line + klen + 1, "%llu", &v) == 1)
                kb = v;
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

/* Anonymous memory is what leaks: file and shared pages of peers' mappings
 * grow RssShmem as transfers first touch them, which is not a leak. */
uint64_t soak_rss_anon(void)
{
    return status_kb("RssAnon");
}

uint64_t soak_rss(void)
{
    return status_kb("VmRSS");
}

int soak_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory stream itself */
}

int soak_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int soak_read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
