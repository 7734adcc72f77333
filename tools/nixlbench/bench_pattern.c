/*
 * bench_pattern.c - the bytes nixlbench moves and where they go.
 *
 * Both processes must agree on every byte without shipping it: the pattern
 * is a hash of (row seed, offset in the initiator's buffer) and the shuffled
 * layout is a permutation drawn from the same seed, so the target can
 * recompute what it must hold (after a write) or produce (before a read)
 * from a short notification.  Also: size parsing and buffer allocation.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t pattern_word(uint64_t seed, uint64_t word_index)
{
    return mix64(seed + word_index * 0x9e3779b97f4a7c15ull);
}

static inline uint8_t pattern_byte(uint64_t seed, uint64_t x)
{
    return (uint8_t)(pattern_word(seed, x >> 3) >> ((x & 7) * 8));
}

uint64_t bench_row_seed(uint64_t base, uint64_t row)
{
    return mix64((base ^ 0x6a09e667f3bcc909ull) + row * 0xd1b54a32d192ed03ull);
}

void bench_pattern_fill(uint8_t *p, uint64_t seed, uint64_t x0, size_t len)
{
    size_t i = 0;
    /* Bytes before the first whole word, then whole little-endian words. */
    for (; i < len && ((x0 + i) & 7); i++)
        p[i] = pattern_byte(seed, x0 + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = pattern_word(seed, (x0 + i) >> 3);
        memcpy(p + i, &w, 8);
    }
    for (; i < len; i++)
        p[i] = pattern_byte(seed, x0 + i);
}

int64_t bench_pattern_check(const uint8_t *p, uint64_t seed, uint64_t x0, size_t len)
{
    size_t i = 0;
    for (; i < len && ((x0 + i) & 7); i++)
        if (p[i] != pattern_byte(seed, x0 + i))
            return (int64_t)i;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = pattern_word(seed, (x0 + i) >> 3), got;
        memcpy(&got, p + i, 8);
        if (got != w)
            break; /* the byte loop below finds which byte */
    }
    for (; i < len; i++)
        if (p[i] != pattern_byte(seed, x0 + i))
            return (int64_t)i;
    return -1;
}

void bench_layout_slots(bench_layout_t layout, uint64_t seed, uint32_t *slot, size_t count)
{
    for (size_t i = 0; i < count; i++)
        slot[i] = (uint32_t)i;
    if (layout == BENCH_LAYOUT_CONTIG)
        return;
    /* Fisher-Yates driven by a splitmix sequence; the tiny modulo bias does
     * not matter, only that both sides draw the same permutation. */
    uint64_t state = seed ^ 0x5851f42d4c957f2dull;
    for (size_t i = count; i > 1; i--) {
        state += 0x9e3779b97f4a7c15ull;
        size_t j = (size_t)(mix64(state) % i);
        uint32_t t = slot[i - 1];
        slot[i - 1] = slot[j];
        slot[j] = t;
    }
}

static uint32_t *slots_for(uint64_t seed, uint64_t batch, bench_layout_t layout)
{
    uint32_t *slot = malloc(batch * sizeof(*slot));
    if (!slot)
        bench_die("out of memory for %llu layout slots", (unsigned long long)batch);
    bench_layout_slots(layout, seed, slot, batch);
    return slot;
}

void bench_target_fill(uint8_t *buf, uint64_t seed, uint64_t block, uint64_t batch, bench_layout_t layout)
{
    uint32_t *slot = slots_for(seed, batch, layout);
    for (uint64_t i = 0; i < batch; i++)
        bench_pattern_fill(buf + (uint64_t)slot[i] * block, seed, i * block, block);
    free(slot);
}

int64_t bench_target_check(const uint8_t *buf, uint64_t seed, uint64_t block, uint64_t batch, bench_layout_t layout)
{
    uint32_t *slot = slots_for(seed, batch, layout);
    int64_t bad = -1;
    for (uint64_t i = 0; i < batch && bad < 0; i++) {
        uint64_t at = (uint64_t)slot[i] * block;
        int64_t off = bench_pattern_check(buf + at, seed, i * block, block);
        if (off >= 0)
            bad = (int64_t)at + off;
    }
    free(slot);
    return bad;
}

int bench_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'I') /* accept KiB-style "Ki" */
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

int bench_parse_range(const char *s, uint64_t *min_out, uint64_t *max_out)
{
    char buf[64];
    const char *colon = strchr(s, ':');
    uint64_t lo, hi;
    if (!colon) {
        if (bench_parse_size(s, &lo) || lo == 0)
            return -1;
        hi = lo;
    } else {
        size_t n = (size_t)(colon - s);
        if (n >= sizeof(buf))
            return -1;
        memcpy(buf, s, n);
        buf[n] = '\0';
        if (bench_parse_size(buf, &lo) || bench_parse_size(colon + 1, &hi))
            return -1;
        if (!is_pow2(lo) || !is_pow2(hi) || lo > hi)
            return -1;
    }
    *min_out = lo;
    *max_out = hi;
    return 0;
}

void bench_fmt_size(uint64_t v, char *buf, size_t cap)
{
    static const char *const unit[] = {"", "K", "M", "G", "T"};
    unsigned u = 0;
    while (u < 4 && v >= 1024 && (v % 1024) == 0) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, "%llu%s", (unsigned long long)v, unit[u]);
}

void *bench_alloc(bench_alloc_t kind, size_t len)
{
    void *p = NULL;
    if (kind == BENCH_ALLOC_NIXL) {
        nixl_status_t st = nixl_mem_alloc(len, &p);
        if (st != NIXL_OK)
            bench_die("nixl_mem_alloc(%zu) failed: %s (%s)", len, nixl_strerror(st), nixl_status_name(st));
    } else {
        int rc = posix_memalign(&p, 4096, len);
        if (rc)
            bench_die("posix_memalign(%zu) failed: %s", len, strerror(rc));
    }
    /* Touch every page now so page faults stay out of the timed loops. */
    memset(p, 0, len);
    return p;
}

void bench_free(bench_alloc_t kind, void *p, size_t len)
{
    if (!p)
        return;
    if (kind == BENCH_ALLOC_NIXL)
        nixl_mem_free(p, len);
    else
        free(p);
}

const char *bench_alloc_name(bench_alloc_t kind)
{
    return kind == BENCH_ALLOC_NIXL ? "nixl" : "malloc";
}

const char *bench_layout_name(bench_layout_t layout)
{
    return layout == BENCH_LAYOUT_CONTIG ? "contig" : "shuffled";
}
