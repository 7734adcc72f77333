/*
 * kv_offload.c - offload a KV cache from host memory to a file and bring it
 * back into other slots, the way an engine moves KV pages to storage and
 * loads them again for a later request.
 *
 *   kv_offload [--tokens N] [--layers L] [--page-bytes B] [--file PATH]
 *              [--direct] [--sync] [--queue-depth D] [--cold]
 *
 * The KV is shaped like DeepSeek-V2-Lite's (MLA): 27 layers, one buffer per
 * layer of 8,192 token slots of 1,152 B (576 bf16), page size 1: 221,184
 * pages, 254.8 MB.  Prefill holds the request's tokens at shuffled slots of
 * its cache; one WRITE puts every page into the file in (layer, token)
 * order; one READ brings every page back into a second cache at other
 * shuffled slots, and every byte is compared.  Both are storage requests
 * of the posix backend: loopback requests (the agent names itself as the
 * peer) with the agent's DRAM on the local side and its FILE region on the
 * other (src/backends/posix/README.md).  Each is one request of 221,184
 * pieces; posix keeps queue_depth of them in flight at once (io_uring).
 *
 * --file PATH writes PATH (created or truncated, kept); without it a file
 * under /var/tmp is used and removed at the end.  --direct opens it with
 * O_DIRECT (pages must then be a multiple of 4096 bytes).  --sync takes
 * posix.sync (pread/pwrite in the post) instead of posix.uring.  --cold
 * flushes the file and drops it from the page cache (fdatasync, then
 * POSIX_FADV_DONTNEED) between the WRITE and the READ, so that the READ
 * comes from the device; otherwise both run against the page cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

#define AGENT_NAME "kv_offload"
#define WAIT_MS 600000u

typedef struct opts {
    uint32_t layers, tokens, page;
    const char *file;
    int direct, sync, cold;
    uint32_t queue_depth; /* 0: the backend's default */
} opts_t;

static char tmp_path[64]; /* the default file, removed at exit */

static void tmp_remove(void)
{
    if (tmp_path[0])
        unlink(tmp_path);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kv_offload: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void check(nixl_status_t s, const char *what)
{
    if (s != NIXL_OK)
        die("%s: %s (%s)", what, nixl_strerror(s), nixl_status_name(s));
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        die("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 1234567 -> "1,234,567" (one of eight rotating buffers). */
static const char *commas(uint64_t v)
{
    static char bufs[8][32];
    static int next;
    char *out = bufs[next++ & 7], tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = tmp[i];
    }
    out[o] = 0;
    return out;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The KV page of token t of layer l, as prefill computed it; salt != 0
 * gives what an unused slot holds instead, so a stray write shows. */
static void page_fill(uint8_t *dst, uint32_t page, uint32_t l, uint32_t t, uint64_t salt)
{
    uint64_t key = (((uint64_t)l << 32 | t) * 0x100000001b3ull) ^ salt;
    for (uint32_t i = 0; i < page; i += 8) {
        uint64_t w = mix64(key + i);
        memcpy(dst + i, &w, page - i < 8 ? page - i : 8);
    }
}

static int page_is(const uint8_t *p, uint32_t page, uint32_t l, uint32_t t)
{
    uint64_t key = ((uint64_t)l << 32 | t) * 0x100000001b3ull;
    for (uint32_t i = 0; i < page; i += 8) {
        uint64_t w = mix64(key + i);
        if (memcmp(p + i, &w, page - i < 8 ? page - i : 8) != 0)
            return 0;
    }
    return 1;
}

/* A permutation of 0..n-1 (Fisher-Yates on mix64). */
static uint32_t *slots_shuffled(uint32_t n, uint64_t seed)
{
    uint32_t *s = xcalloc(n, sizeof(*s));
    for (uint32_t i = 0; i < n; i++)
        s[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(mix64(seed * 0x2545f4914f6cdd1dull + i) % i);
        uint32_t x = s[i - 1];
        s[i - 1] = s[j];
        s[j] = x;
    }
    return s;
}

/* A cache: one nixl_mem_alloc buffer per layer. */
typedef struct cache {
    uint32_t layers;
    size_t layer_len;
    uint8_t **layer;
} cache_t;

static void cache_make(cache_t *c, uint32_t layers, size_t layer_len)
{
    c->layers = layers;
    c->layer_len = layer_len;
    c->layer = xcalloc(layers, sizeof(*c->layer));
    for (uint32_t l = 0; l < layers; l++) {
        void *m;
        check(nixl_mem_alloc(layer_len, &m), "nixl_mem_alloc");
        c->layer[l] = m;
    }
}

static void cache_free(cache_t *c)
{
    for (uint32_t l = 0; l < c->layers; l++)
        nixl_mem_free(c->layer[l], c->layer_len);
    free(c->layer);
}

/* One list of both caches' layer buffers, for (de)registration. */
static nixl_dlist_t caches_dlist(const cache_t *a, const cache_t *b)
{
    nixl_desc_t *d = xcalloc((size_t)a->layers + b->layers, sizeof(*d));
    for (uint32_t l = 0; l < a->layers; l++)
        d[l] = (nixl_desc_t){(uint64_t)(uintptr_t)a->layer[l], a->layer_len, 0, 0, NULL};
    for (uint32_t l = 0; l < b->layers; l++)
        d[a->layers + l] = (nixl_desc_t){(uint64_t)(uintptr_t)b->layer[l], b->layer_len, 0, 0, NULL};
    return (nixl_dlist_t){NIXL_MEM_DRAM, (size_t)a->layers + b->layers, d};
}

/* Piece (l, t): the cache's page at slot[t] of layer l and the file's page
 * of (l, t), layer after layer. */
static void lists_make(const opts_t *o, const cache_t *c, const uint32_t *slot, int fd, nixl_dlist_t *mem,
                       nixl_dlist_t *file)
{
    size_t n = (size_t)o->layers * o->tokens;
    nixl_desc_t *m = xcalloc(n, sizeof(*m)), *f = xcalloc(n, sizeof(*f));
    for (uint32_t l = 0; l < o->layers; l++)
        for (uint32_t t = 0; t < o->tokens; t++) {
            size_t i = (size_t)l * o->tokens + t;
            m[i] = (nixl_desc_t){(uint64_t)(uintptr_t)(c->layer[l] + (size_t)slot[t] * o->page), o->page, 0, 0, NULL};
            f[i] = (nixl_desc_t){(uint64_t)i * o->page, o->page, (uint32_t)fd, 0, NULL};
        }
    *mem = (nixl_dlist_t){NIXL_MEM_DRAM, n, m};
    *file = (nixl_dlist_t){NIXL_MEM_FILE, n, f};
}

/* Make one request, post it, wait; prints what it did. */
static void move(nixl_agent_t *a, nixl_op_t op, const nixl_dlist_t *mem, const nixl_dlist_t *file, const char *title)
{
    nixl_xfer_t *x;
    uint64_t t0 = now_ns();
    check(nixl_xfer_create(a, op, mem, file, AGENT_NAME, NULL, &x), "making the request");
    uint64_t t1 = now_ns();
    nixl_status_t st = nixl_xfer_post(x);
    while (st == NIXL_IN_PROG) {
        if (now_ns() - t1 > WAIT_MS * 1000000ull)
            die("%s did not finish within %u s", title, WAIT_MS / 1000);
        st = nixl_xfer_status(x);
    }
    uint64_t t2 = now_ns();
    check(st, title);
    nixl_xfer_info_t info;
    check(nixl_xfer_info(x, &info), "nixl_xfer_info");
    nixl_xfer_release(x);
    double s = (double)(t2 - t1) / 1e9;
    printf("%s\n", title);
    printf("  request:       %s pieces given, %s after merging, one request, made in %.1f ms\n",
           commas(info.descs_in), commas(info.descs), (double)(t1 - t0) / 1e6);
    printf("  post to done:  %.1f ms, %s B, %.2f GB/s\n", s * 1e3, commas(info.bytes), (double)info.bytes / s / 1e9);
    printf("  path:          %s (backend %s)\n", info.path, info.backend);
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--tokens N] [--layers L] [--page-bytes B] [--file PATH] [--direct] [--sync]\n"
            "          [--queue-depth D] [--cold]\n"
            "  --tokens N       token slots per layer (default 8192)\n"
            "  --layers L       layers (default 27)\n"
            "  --page-bytes B   bytes of one token's page in one layer (default 1152)\n"
            "  --file PATH      the file to write (created or truncated, kept; default a file under\n"
            "                   /var/tmp, removed at the end)\n"
            "  --direct         open the file with O_DIRECT (B a multiple of 4096)\n"
            "  --sync           posix.sync (pread/pwrite in the post) instead of posix.uring\n"
            "  --queue-depth D  io_uring entries of the posix backend (default the backend's, 256)\n"
            "  --cold           flush the file and drop it from the page cache before the READ\n",
            argv0);
    exit(2);
}

static uint32_t arg_u32(const char *v, const char *name, uint32_t max)
{
    char *end;
    errno = 0;
    unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || errno || *end || x == 0 || x > max)
        die("%s wants a number in 1..%u", name, max);
    return (uint32_t)x;
}

int main(int argc, char **argv)
{
    opts_t o = {.layers = 27, .tokens = 8192, .page = 1152};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--tokens") == 0)
            o.tokens = arg_u32(v, a, 1u << 24), i++;
        else if (strcmp(a, "--layers") == 0)
            o.layers = arg_u32(v, a, 4096), i++;
        else if (strcmp(a, "--page-bytes") == 0)
            o.page = arg_u32(v, a, 1u << 26), i++;
        else if (strcmp(a, "--queue-depth") == 0)
            o.queue_depth = arg_u32(v, a, 32768), i++;
        else if (strcmp(a, "--file") == 0 && v)
            o.file = v, i++;
        else if (strcmp(a, "--direct") == 0)
            o.direct = 1;
        else if (strcmp(a, "--sync") == 0)
            o.sync = 1;
        else if (strcmp(a, "--cold") == 0)
            o.cold = 1;
        else
            usage(argv[0]);
    }
    if (o.direct && o.page % 4096)
        die("--direct needs --page-bytes a multiple of 4096 (O_DIRECT moves whole blocks), not %u", o.page);
    size_t pages = (size_t)o.layers * o.tokens, layer_len = (size_t)o.tokens * o.page;
    uint64_t bytes = (uint64_t)pages * o.page;

    int flags = O_RDWR | O_CREAT | (o.direct ? O_DIRECT : 0);
    int fd;
    const char *path = o.file;
    if (path) {
        fd = open(path, flags | O_TRUNC, 0644);
    } else {
        snprintf(tmp_path, sizeof(tmp_path), "/var/tmp/nixl-kv-offload-XXXXXX");
        fd = mkostemp(tmp_path, o.direct ? O_DIRECT : 0);
        if (fd >= 0)
            atexit(tmp_remove);
        else
            tmp_path[0] = 0;
        path = tmp_path;
    }
    if (fd < 0)
        die("cannot open %s%s: %s", o.file ? o.file : "a file under /var/tmp", o.direct ? " with O_DIRECT" : "",
            strerror(errno));

    printf("kv_offload: KV like DeepSeek-V2-Lite: %u layers x %s tokens x %s B pages (page size 1): %s pages, "
           "%.1f MB\n",
           o.layers, commas(o.tokens), commas(o.page), commas(pages), (double)bytes / 1e6);
    printf("file:            %s (%s%s)\n", path, o.direct ? "O_DIRECT" : "page cache",
           o.file ? "" : ", removed at the end");

    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = AGENT_NAME};
    nixl_agent_t *agent;
    check(nixl_agent_create(&cfg, &agent), "creating the agent");
    char depth[16];
    nixl_param_t params[2] = {{"use_uring", o.sync ? "0" : "1"}, {"queue_depth", depth}};
    snprintf(depth, sizeof(depth), "%u", o.queue_depth);
    nixl_backend_t *be;
    check(nixl_backend_create(agent, "posix", params, o.queue_depth ? 2 : 1, &be), "creating the posix backend");

    /* Prefill's cache holds token t at slot pslot[t]; decode's gets it at dslot[t]. */
    cache_t prefill, decode;
    cache_make(&prefill, o.layers, layer_len);
    cache_make(&decode, o.layers, layer_len);
    uint32_t *pslot = slots_shuffled(o.tokens, 1), *dslot = slots_shuffled(o.tokens, 2);
    for (uint32_t l = 0; l < o.layers; l++)
        for (uint32_t t = 0; t < o.tokens; t++) {
            page_fill(prefill.layer[l] + (size_t)pslot[t] * o.page, o.page, l, t, 0);
            page_fill(decode.layer[l] + (size_t)t * o.page, o.page, l, t, 0x5a5a5a5a5a5a5a5aull);
        }
    uint32_t moved = 0;
    for (uint32_t t = 0; t < o.tokens; t++)
        moved += pslot[t] != dslot[t];
    printf("slots:           shuffled in both caches; %s of %s tokens land in another slot than they left\n",
           commas(moved), commas(o.tokens));

    nixl_dlist_t mem = caches_dlist(&prefill, &decode);
    check(nixl_mem_register(agent, &mem, NULL), "registering the caches");
    nixl_desc_t whole = {0, 0, (uint32_t)fd, 0, NULL}; /* offset 0, length 0: the whole file */
    nixl_dlist_t files = {NIXL_MEM_FILE, 1, &whole};
    check(nixl_mem_register(agent, &files, NULL), "registering the file");
    printf("\n");

    nixl_dlist_t pm, pf, dm, df;
    lists_make(&o, &prefill, pslot, fd, &pm, &pf);
    lists_make(&o, &decode, dslot, fd, &dm, &df);
    move(agent, NIXL_OP_WRITE, &pm, &pf, "WRITE: prefill's cache -> the file");
    off_t size = lseek(fd, 0, SEEK_END);
    if (size != (off_t)bytes)
        die("the file holds %lld bytes after the WRITE, expected %llu", (long long)size, (unsigned long long)bytes);
    if (o.cold) {
        uint64_t t0 = now_ns();
        if (fdatasync(fd) != 0)
            die("fdatasync: %s", strerror(errno));
        uint64_t t1 = now_ns();
        int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (rc != 0)
            die("posix_fadvise: %s", strerror(rc));
        printf("  flushed:       fdatasync %.1f ms (%.2f GB/s to the device), then dropped from the page cache\n",
               (double)(t1 - t0) / 1e6, (double)bytes / ((double)(t1 - t0) / 1e9) / 1e9);
    }
    printf("\n");
    move(agent, NIXL_OP_READ, &dm, &df, "READ: the file -> decode's cache, other slots");

    size_t bad = 0;
    for (uint32_t l = 0; l < o.layers; l++)
        for (uint32_t t = 0; t < o.tokens; t++)
            if (!page_is(decode.layer[l] + (size_t)dslot[t] * o.page, o.page, l, t)) {
                if (bad++ < 5)
                    printf("  layer %u token %u (slot %u) differs\n", l, t, dslot[t]);
            }
    printf("\nverified:        %s\n",
           bad ? "FAILED" : "every page, in its new slot");
    if (bad)
        printf("                 %s of %s pages differ\n", commas(bad), commas(pages));
    else
        printf("                 %s pages, %s B\n", commas(pages), commas(bytes));

    check(nixl_mem_deregister(agent, &files, NULL), "deregistering the file");
    check(nixl_mem_deregister(agent, &mem, NULL), "deregistering the caches");
    nixl_agent_destroy(agent);
    close(fd);
    free((void *)pm.descs);
    free((void *)pf.descs);
    free((void *)dm.descs);
    free((void *)df.descs);
    free((void *)mem.descs);
    free(pslot);
    free(dslot);
    cache_free(&prefill);
    cache_free(&decode);
    printf("result:          %s\n", bad ? "FAILED" : "OK, every byte came back");
    return bad ? 1 : 0;
}
