/*
 * test_core.c - the core's rules, checked through the public API with the
 * `fake` module backend (tests/unit/core/fake_backend.c): argument checks,
 * all-or-nothing registration, exact deregistration, metadata generations,
 * merging, in-flight rules, cancel, notifications after data, path and
 * fallback accounting, module loading.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

#include "../../common/test_check.h"
#include "fake_backend.h"

static nixl_agent_t *mk_agent(const char *name)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    return a;
}

static nixl_backend_t *mk_fake(nixl_agent_t *a, const char *key, const char *val)
{
    nixl_param_t p = {key, val};
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, "fake", key ? &p : NULL, key ? 1 : 0, &b), NIXL_OK);
    return b;
}

static void count_self_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    if (strcmp(sender, "loop") == 0 && len == 4 && memcmp(msg, "self", 4) == 0)
        ++*(size_t *)arg;
}

static nixl_dlist_t dl(const nixl_desc_t *d, size_t n)
{
    nixl_dlist_t l = {NIXL_MEM_DRAM, n, d};
    return l;
}

/* Load each agent's metadata into the other. */
static void exchange(nixl_agent_t *a, nixl_agent_t *b)
{
    void *blob;
    size_t len;
    char name[NIXL_NAME_MAX + 1];
    CHECK_ST(nixl_md_get_local(b, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, blob, len, name), NIXL_OK);
    CHECK(strcmp(name, nixl_agent_name(b)) == 0);
    nixl_free(blob);
    CHECK_ST(nixl_md_get_local(a, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(b, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
}

static void test_module_listed(void)
{
    const nixl_backend_info_t *infos;
    size_t n;
    CHECK_ST(nixl_backends_available(&infos, &n), NIXL_OK);
    int found = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, "fake") == 0) {
            found = 1;
            CHECK(strstr(infos[i].origin, "libnixl_backend_fake.so") != NULL);
            CHECK(infos[i].num_params == 6);
        }
    CHECK(found);
    /* Its parameters became config rows. */
    int row = 0;
    for (size_t i = 0; i < nixl_config_count(); i++) {
        nixl_config_info_t ci;
        CHECK_ST(nixl_config_get(i, &ci), NIXL_OK);
        row |= strcmp(ci.name, "NIXL_FAKE_ASYNC_POLLS") == 0;
    }
    CHECK(row);
}

static void test_agent_and_backend_args(void)
{
    nixl_agent_t *a = NULL;
    nixl_agent_config_t c = {.field_mask = 0};
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_ERR_INVALID_PARAM);
    c.field_mask = NIXL_AGENT_CONFIG_NAME;
    c.name = "bad name";
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_agent_create(NULL, &a), NIXL_ERR_NULL);

    a = mk_agent("args");
    nixl_backend_t *b;
    CHECK_ST(nixl_backend_create(a, "no_such_backend", NULL, 0, &b), NIXL_ERR_UNKNOWN_BACKEND);
    nixl_param_t p = {"no_such_key", "1"};
    CHECK_ST(nixl_backend_create(a, "fake", &p, 1, &b), NIXL_ERR_INVALID_PARAM);
    mk_fake(a, NULL, NULL);
    CHECK_ST(nixl_backend_create(a, "fake", NULL, 0, &b), NIXL_ERR_EXISTS);
    nixl_agent_destroy(a);
}

static void test_registration(void)
{
    nixl_agent_t *a = mk_agent("reg");
    char *buf = malloc(4096);
    nixl_desc_t d[3] = {{(uintptr_t)buf, 1024, 0, 0, NULL}, {(uintptr_t)buf + 1024, 1024, 0, 0, NULL},
                        {(uintptr_t)buf + 512, 1024, 0, 0, NULL}};
    nixl_dlist_t l = dl(d, 2);
    /* No backend takes DRAM yet. */
    CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_ERR_MEM_TYPE);
    mk_fake(a, "fail_reg_at", "2");
    CHECK_ST(nixl_mem_register(a, NULL, NULL), NIXL_ERR_NULL);
    nixl_dlist_t empty = dl(d, 0);
    CHECK_ST(nixl_mem_register(a, &empty, NULL), NIXL_ERR_ZERO_LENGTH);
    nixl_desc_t z = {(uintptr_t)buf, 0, 0, 0, NULL};
    nixl_dlist_t lz = dl(&z, 1);
    CHECK_ST(nixl_mem_register(a, &lz, NULL), NIXL_ERR_ZERO_LENGTH);
    nixl_desc_t ov[2] = {d[0], d[2]};
    nixl_dlist_t lov = dl(ov, 2);
    CHECK_ST(nixl_mem_register(a, &lov, NULL), NIXL_ERR_OVERLAP);
    /* The second registration fails in the backend: nothing stays. */
    CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_ERR_BACKEND);
    CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_OK);
    nixl_dlist_t l2 = dl(&d[2], 1);
    CHECK_ST(nixl_mem_register(a, &l2, NULL), NIXL_ERR_OVERLAP);
    /* Deregistration must match exactly. */
    nixl_desc_t part = {(uintptr_t)buf, 512, 0, 0, NULL};
    nixl_dlist_t lp = dl(&part, 1);
    CHECK_ST(nixl_mem_deregister(a, &lp, NULL), NIXL_ERR_REG_MISMATCH);
    nixl_desc_t twice[2] = {d[0], d[0]};
    nixl_dlist_t lt = dl(twice, 2);
    CHECK_ST(nixl_mem_deregister(a, &lt, NULL), NIXL_ERR_REG_MISMATCH);
    CHECK_ST(nixl_mem_deregister(a, &l, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &l, NULL), NIXL_ERR_REG_MISMATCH);
    nixl_agent_destroy(a);
    free(buf);
}

typedef struct seen {
    int n;
    char sender[64];
    char msg[128];
    const unsigned char *check;
    unsigned char want;
    int data_ok;
} seen_t;

static void on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    seen_t *s = arg;
    s->n++;
    snprintf(s->sender, sizeof(s->sender), "%s", sender);
    snprintf(s->msg, sizeof(s->msg), "%.*s", (int)len, (const char *)msg);
    s->data_ok = !s->check || (s->check[0] == s->want && s->check[4095] == s->want);
}

static void test_transfer_rules(void)
{
    nixl_agent_t *a = mk_agent("ini"), *b = mk_agent("tgt");
    mk_fake(a, "async_polls", "3");
    mk_fake(b, NULL, NULL);
    unsigned char *src = malloc(8192), *dst = malloc(8192);
    memset(src, 0xab, 8192);
    memset(dst, 0, 8192);
    nixl_desc_t ds = {(uintptr_t)src, 8192, 0, 0, NULL}, dd = {(uintptr_t)dst, 8192, 0, 0, NULL};
    nixl_dlist_t ls = dl(&ds, 1), ld = dl(&dd, 1);
    CHECK_ST(nixl_mem_register(a, &ls, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(b, &ld, NULL), NIXL_OK);

    void *own;
    size_t own_len;
    CHECK_ST(nixl_md_get_local(a, &own, &own_len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, own, own_len, NULL), NIXL_ERR_SELF);
    CHECK_ST(nixl_md_load_remote(b, own, own_len / 2, NULL), NIXL_ERR_BAD_METADATA);
    nixl_free(own);
    exchange(a, b);

    /* 4 pieces of 1 KiB, contiguous on both sides -> 1 after merging;
     * pieces 4..7 swapped pairwise -> not mergeable. */
    nixl_desc_t l8[8], r8[8];
    for (int i = 0; i < 8; i++) {
        l8[i] = (nixl_desc_t){(uintptr_t)src + 1024 * i, 1024, 0, 0, NULL};
        int j = i < 4 ? i : (i ^ 1);
        r8[i] = (nixl_desc_t){(uintptr_t)dst + 1024 * j, 1024, 0, 0, NULL};
    }
    nixl_dlist_t L = dl(l8, 8), R = dl(r8, 8), R7 = dl(r8, 7);
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R7, "tgt", NULL, &x), NIXL_ERR_LENGTH_MISMATCH);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R, "nobody", NULL, &x), NIXL_ERR_UNKNOWN_PEER);
    nixl_desc_t outside = {(uintptr_t)dst + 8000, 1024, 0, 0, NULL};
    nixl_dlist_t RO = dl(&outside, 1), L1 = dl(l8, 1);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L1, &RO, "tgt", NULL, &x), NIXL_ERR_NOT_REGISTERED);
    nixl_desc_t unreg = {(uintptr_t)dst, 16, 0, 0, NULL};
    nixl_dlist_t LU = dl(&unreg, 1), RU = dl(&unreg, 1);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &LU, &RU, "tgt", NULL, &x), NIXL_ERR_NOT_REGISTERED);
    /* The range test at its edges, after a good pair has set the regions:
     * a zero length, a piece one byte over either region's end, one byte
     * below either region; the last bytes of both regions are fine. */
    {
        const uint64_t S = (uintptr_t)src, D = (uintptr_t)dst;
        const struct {
            uint64_t la, ra, len;
            nixl_status_t want;
        } edge[] = {{S + 64, D + 64, 0, NIXL_ERR_ZERO_LENGTH},
                    {S + 8192 - 64, D + 64, 65, NIXL_ERR_NOT_REGISTERED},
                    {S + 64, D + 8192 - 64, 65, NIXL_ERR_NOT_REGISTERED},
                    {S - 1, D + 64, 64, NIXL_ERR_NOT_REGISTERED},
                    {S + 64, D - 1, 64, NIXL_ERR_NOT_REGISTERED},
                    {S + 8192 - 64, D + 8192 - 64, 64, NIXL_OK}};
        for (size_t k = 0; k < sizeof(edge) / sizeof(edge[0]); k++) {
            nixl_desc_t le[2] = {{S, 64, 0, 0, NULL}, {edge[k].la, edge[k].len, 0, 0, NULL}};
            nixl_desc_t re[2] = {{D, 64, 0, 0, NULL}, {edge[k].ra, edge[k].len, 0, 0, NULL}};
            nixl_dlist_t LE = dl(le, 2), RE = dl(re, 2);
            nixl_xfer_t *e = NULL;
            nixl_status_t st = nixl_xfer_create(a, NIXL_OP_WRITE, &LE, &RE, "tgt", NULL, &e);
            if (st != edge[k].want)
                fprintf(stderr, "range edge %zu: %s, expected %s\n", k, nixl_strerror(st),
                        nixl_strerror(edge[k].want));
            CHECK(st == edge[k].want && (st == NIXL_OK) == (e != NULL));
            nixl_xfer_release(e);
        }
    }

    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = "landed", .notif_len = 6};
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R, "tgt", &opt, &x), NIXL_OK);
    CHECK_ST(nixl_xfer_status(x), NIXL_ERR_INVALID_PARAM); /* never posted */
    CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
    CHECK_ST(nixl_xfer_post(x), NIXL_ERR_IN_FLIGHT);
    /* Deregistering memory an in-flight request uses is refused. */
    CHECK_ST(nixl_mem_deregister(a, &ls, NULL), NIXL_ERR_IN_FLIGHT);
    seen_t s = {0};
    s.check = dst;
    s.want = 0xab;
    size_t cnt = 0;
    CHECK_ST(nixl_notifs_get(b, on_notif, &s, &cnt), NIXL_OK);
    CHECK(cnt == 0 && s.n == 0); /* nothing before the data */
    nixl_status_t st;
    while ((st = nixl_xfer_status(x)) == NIXL_IN_PROG)
        ;
    CHECK_ST(st, NIXL_OK);
    CHECK_ST(nixl_notifs_get(b, on_notif, &s, &cnt), NIXL_OK);
    CHECK(cnt == 1 && s.n == 1 && strcmp(s.sender, "ini") == 0 && strcmp(s.msg, "landed") == 0 && s.data_ok);
    CHECK(memcmp(src, dst, 8192) == 0);

    nixl_xfer_info_t info;
    CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
    CHECK(strcmp(info.backend, "fake") == 0 && strcmp(info.path, "fake.copy") == 0);
    CHECK(info.bytes == 8192 && info.descs_in == 8 && info.descs == 5 && info.posts == 1);

    /* Re-post after completion moves new data. */
    memset(src, 0x5c, 8192);
    CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
    while ((st = nixl_xfer_status(x)) == NIXL_IN_PROG)
        ;
    CHECK_ST(st, NIXL_OK);
    CHECK(memcmp(src, dst, 8192) == 0);

    /* Release in flight: canceled, its notification never arrives. */
    CHECK_ST(nixl_notifs_get(b, on_notif, &s, &cnt), NIXL_OK);
    s.n = 0;
    CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
    nixl_xfer_release(x);
    CHECK_ST(nixl_notifs_get(b, on_notif, &s, &cnt), NIXL_OK);
    CHECK(cnt == 0 && s.n == 0);

    /* Generations: a reload makes old requests stale, an invalidation
     * makes them fail with PEER_INVALIDATED. */
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &L, &R, "tgt", NULL, &x), NIXL_OK);
    void *blob;
    size_t len;
    CHECK_ST(nixl_md_get_local(b, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    CHECK_ST(nixl_xfer_post(x), NIXL_ERR_STALE);
    nixl_xfer_release(x);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &L, &R, "tgt", NULL, &x), NIXL_OK);
    CHECK_ST(nixl_md_invalidate_remote(a, "tgt"), NIXL_OK);
    CHECK_ST(nixl_md_check_remote(a, "tgt"), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_xfer_post(x), NIXL_ERR_PEER_INVALIDATED);
    CHECK_ST(nixl_md_invalidate_remote(a, "tgt"), NIXL_ERR_UNKNOWN_PEER);
    nixl_xfer_release(x);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);

    /* Two-step: prepared once, requests by index; runs merge. */
    nixl_prep_t *lp, *rp;
    CHECK_ST(nixl_prep_create(a, NULL, &L, NULL, &lp), NIXL_OK);
    CHECK_ST(nixl_prep_create(a, "tgt", &R, NULL, &rp), NIXL_OK);
    uint32_t li[3] = {0, 1, 2}, ri[3] = {0, 1, 9};
    CHECK_ST(nixl_xfer_make(a, NIXL_OP_READ, lp, li, rp, ri, 3, NULL, &x), NIXL_ERR_INVALID_PARAM);
    ri[2] = 2;
    memset(dst, 0x11, 8192);
    memset(src, 0, 8192);
    CHECK_ST(nixl_xfer_make(a, NIXL_OP_READ, lp, li, rp, ri, 3, NULL, &x), NIXL_OK);
    CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
    while ((st = nixl_xfer_status(x)) == NIXL_IN_PROG)
        ;
    CHECK_ST(st, NIXL_OK);
    CHECK(src[0] == 0x11 && src[3071] == 0x11 && src[3072] == 0);
    CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
    CHECK(info.descs == 1 && info.descs_in == 3);

    /* Deregistration since the request was made: post re-resolves and refuses. */
    CHECK_ST(nixl_mem_deregister(a, &ls, NULL), NIXL_OK);
    CHECK_ST(nixl_xfer_post(x), NIXL_ERR_NOT_REGISTERED);
    nixl_xfer_release(x);
    CHECK_ST(nixl_xfer_make(a, NIXL_OP_READ, lp, li, rp, ri, 3, NULL, &x), NIXL_ERR_NOT_REGISTERED);
    nixl_prep_release(lp);
    nixl_prep_release(rp);

    /* Standalone notification. */
    CHECK_ST(nixl_notif_send(a, "tgt", "hello", 5, NULL), NIXL_OK);
    s.n = 0;
    s.check = NULL;
    CHECK_ST(nixl_notifs_get(b, on_notif, &s, &cnt), NIXL_OK);
    CHECK(s.n == 1 && strcmp(s.msg, "hello") == 0);
    CHECK_ST(nixl_notif_send(a, "nobody", "x", 1, NULL), NIXL_ERR_UNKNOWN_PEER);

    nixl_path_stat_t ps[8];
    size_t np = 0;
    CHECK_ST(nixl_path_stats(a, ps, 8, &np), NIXL_OK);
    CHECK(np == 1 && strcmp(ps[0].path, "fake.copy") == 0 && ps[0].bytes == 2 * 8192 + 3072 &&
          ps[0].requests >= 3 && ps[0].fallbacks == 0);

    nixl_agent_destroy(a);
    nixl_agent_destroy(b);
    free(src);
    free(dst);
}

static void test_fallback_accounting(void)
{
    nixl_agent_t *a = mk_agent("fb_ini"), *b = mk_agent("fb_tgt");
    mk_fake(a, "fallback", "1");
    mk_fake(b, NULL, NULL);
    char *src = calloc(1, 4096), *dst = calloc(1, 4096);
    nixl_desc_t ds = {(uintptr_t)src, 4096, 0, 0, NULL}, dd = {(uintptr_t)dst, 4096, 0, 0, NULL};
    nixl_dlist_t ls = dl(&ds, 1), ld = dl(&dd, 1);
    CHECK_ST(nixl_mem_register(a, &ls, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(b, &ld, NULL), NIXL_OK);
    exchange(a, b);
    nixl_xfer_t *x;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &ls, &ld, "fb_tgt", NULL, &x), NIXL_OK);
    for (int i = 0; i < 3; i++)
        CHECK_ST(nixl_xfer_post(x), NIXL_OK);
    nixl_xfer_release(x);
    nixl_fallback_stat_t fs[4];
    size_t n = 0;
    CHECK_ST(nixl_fallback_stats(a, fs, 4, &n), NIXL_OK);
    CHECK(n == 1 && fs[0].count == 3 && strcmp(fs[0].path, "fake.slow") == 0);
    nixl_path_stat_t ps[4];
    CHECK_ST(nixl_path_stats(a, ps, 4, &n), NIXL_OK);
    CHECK(n == 1 && ps[0].fallbacks == 3);
    /* Policy: refuse fallbacks. */
    setenv("NIXL_ALLOW_FALLBACK", "0", 1);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &ls, &ld, "fb_tgt", NULL, &x), NIXL_ERR_NO_PATH);
    unsetenv("NIXL_ALLOW_FALLBACK");
    nixl_agent_destroy(a);
    nixl_agent_destroy(b);
    free(src);
    free(dst);
}

/* Memory from nixl_mem_alloc is a sealed memfd: a peer that opens it
 * cannot shrink it under us. */
static void test_mem_alloc_sealed(void)
{
    void *p = NULL;
    CHECK_ST(nixl_mem_alloc(0, &p), NIXL_ERR_ZERO_LENGTH);
    CHECK_ST(nixl_mem_alloc(10000, &p), NIXL_OK);
    memset(p, 7, 10000);
    int tried = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char link[300], target[256];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (strncmp(target, "/memfd:nixl", 11) != 0)
            continue;
        int fd = open(link, O_RDWR);
        CHECK(fd >= 0);
        if (fd >= 0) {
            CHECK(ftruncate(fd, 0) != 0 && errno == EPERM);
            close(fd);
            tried = 1;
        }
    }
    if (d)
        closedir(d);
    CHECK(tried);
    CHECK(((unsigned char *)p)[9999] == 7);
    nixl_mem_free(p, 10000);
}

/* VRAM without a CUDA driver: a clear status, nothing registered. */
static void test_vram_without_driver(void)
{
    setenv("NIXL_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    nixl_agent_t *a = mk_agent("novram");
    mk_fake(a, NULL, NULL);
    char buf[64];
    nixl_desc_t d = {(uintptr_t)buf, sizeof(buf), 0, 0, NULL};
    nixl_dlist_t l = {NIXL_MEM_VRAM, 1, &d};
    CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_ERR_NO_CUDA);
    nixl_agent_destroy(a);
    unsetenv("NIXL_CUDA_LIB");
}

static size_t notifs_of(nixl_agent_t *a)
{
    size_t cnt = 0;
    seen_t s = {0};
    CHECK_ST(nixl_notifs_get(a, on_notif, &s, &cnt), NIXL_OK);
    return cnt;
}

/* Poll until the request leaves IN_PROG or max_ms passed (then IN_PROG);
 * *ms gets the time it took. */
static nixl_status_t poll_for(nixl_xfer_t *x, unsigned max_ms, double *ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    nixl_status_t st;
    do {
        st = nixl_xfer_status(x);
        clock_gettime(CLOCK_MONOTONIC, &t);
        *ms = (double)(t.tv_sec - t0.tv_sec) * 1e3 + (double)(t.tv_nsec - t0.tv_nsec) / 1e6;
    } while (st == NIXL_IN_PROG && *ms < max_ms);
    return st;
}

/* Two agents with one backend each and a registered 4 KiB buffer on each
 * side, metadata exchanged: the initiator's backend gets async_polls and
 * (unless NULL) cancel_late. */
typedef struct dl_pair {
    nixl_agent_t *a, *b;
    unsigned char *src, *dst;
    nixl_desc_t ds, dd;
    nixl_dlist_t ls, ld;
} dl_pair_t;

static void dl_open(dl_pair_t *p, const char *backend, const char *async_polls, const char *cancel_late)
{
    p->a = mk_agent("dl-ini");
    p->b = mk_agent("dl-tgt");
    nixl_param_t prm[2] = {{"async_polls", async_polls}, {"cancel_late", cancel_late}};
    nixl_backend_t *ba = NULL, *bb = NULL;
    CHECK_ST(nixl_backend_create(p->a, backend, prm, cancel_late ? 2 : 1, &ba), NIXL_OK);
    CHECK_ST(nixl_backend_create(p->b, backend, NULL, 0, &bb), NIXL_OK);
    p->src = malloc(4096);
    p->dst = calloc(1, 4096);
    memset(p->src, 0x11, 4096);
    p->ds = (nixl_desc_t){(uintptr_t)p->src, 4096, 0, 0, NULL};
    p->dd = (nixl_desc_t){(uintptr_t)p->dst, 4096, 0, 0, NULL};
    p->ls = dl(&p->ds, 1);
    p->ld = dl(&p->dd, 1);
    CHECK_ST(nixl_mem_register(p->a, &p->ls, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(p->b, &p->ld, NULL), NIXL_OK);
    exchange(p->a, p->b);
}

static void dl_close(dl_pair_t *p)
{
    nixl_agent_destroy(p->a);
    nixl_agent_destroy(p->b);
    free(p->src);
    free(p->dst);
}

/* Deadlines: NIXL_OPT_TIMEOUT_MS, the NIXL_XFER_TIMEOUT_MS default, 0 =
 * none, a cancel that comes too late, a backend that cannot cancel. */
static void test_deadline(void)
{
    /* mode 0: cancel works; 1: cancel_late; 2: fake_serial, no xfer_cancel op */
    for (int mode = 0; mode < 3; mode++) {
        dl_pair_t p;
        dl_open(&p, mode == 2 ? "fake_serial" : "fake", "1000000000", mode == 2 ? NULL : mode == 1 ? "1" : "0");
        nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF | NIXL_OPT_TIMEOUT_MS, .notif = "dl", .notif_len = 2,
                               .timeout_ms = 30};
        nixl_xfer_t *x = NULL;
        CHECK_ST(nixl_xfer_create(p.a, NIXL_OP_WRITE, &p.ls, &p.ld, "dl-tgt", &opt, &x), NIXL_OK);
        for (int round = 0; round < 2 && x; round++) {
            CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
            double ms;
            nixl_status_t st = poll_for(x, 300, &ms);
            if (mode == 0) {
                /* Canceled at the deadline: TIMEOUT, nothing moved, no notification. */
                CHECK_ST(st, NIXL_ERR_TIMEOUT);
                CHECK(ms >= 29.0 && ms < 250.0);
                CHECK(p.dst[0] == 0 && p.dst[4095] == 0);
                CHECK(notifs_of(p.b) == 0);
                CHECK_ST(nixl_xfer_status(x), NIXL_ERR_TIMEOUT); /* it stays so until posted again */
            } else {
                /* Too late to cancel (1) or no way to (2): it runs on. */
                CHECK_ST(st, NIXL_IN_PROG);
                nixl_xfer_release(x); /* canceled by release */
                x = NULL;
            }
        }
        if (x)
            nixl_xfer_release(x);

        /* timeout_ms 0 with the bit set: no deadline, whatever the default. */
        opt.timeout_ms = 0;
        CHECK_ST(nixl_xfer_create(p.a, NIXL_OP_WRITE, &p.ls, &p.ld, "dl-tgt", &opt, &x), NIXL_OK);
        CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
        double ms;
        CHECK_ST(poll_for(x, 80, &ms), NIXL_IN_PROG);
        nixl_xfer_release(x);
        CHECK(notifs_of(p.b) == 0);
        dl_close(&p);
    }

    /* The default for requests that set none: NIXL_XFER_TIMEOUT_MS, read at
     * agent creation. */
    setenv("NIXL_XFER_TIMEOUT_MS", "20", 1);
    dl_pair_t p;
    dl_open(&p, "fake", "1000000000", "0");
    unsetenv("NIXL_XFER_TIMEOUT_MS");
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = "x", .notif_len = 1};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(p.a, NIXL_OP_WRITE, &p.ls, &p.ld, "dl-tgt", &opt, &x), NIXL_OK);
    CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
    double ms;
    CHECK_ST(poll_for(x, 300, &ms), NIXL_ERR_TIMEOUT);
    CHECK(ms >= 19.0 && ms < 250.0);
    CHECK(p.dst[0] == 0 && notifs_of(p.b) == 0);
    nixl_xfer_release(x);
    dl_close(&p);

    /* cancel_late with a short async_polls: the request completes after its
     * deadline passed: NIXL_OK, bytes and notification there. */
    dl_open(&p, "fake", "3", "1");
    opt.field_mask |= NIXL_OPT_TIMEOUT_MS;
    opt.timeout_ms = 1;
    CHECK_ST(nixl_xfer_create(p.a, NIXL_OP_WRITE, &p.ls, &p.ld, "dl-tgt", &opt, &x), NIXL_OK);
    CHECK_ST(nixl_xfer_post(x), NIXL_IN_PROG);
    struct timespec nap = {0, 5000000};
    nanosleep(&nap, NULL); /* past the deadline before the first poll */
    CHECK_ST(poll_for(x, 300, &ms), NIXL_OK);
    CHECK(memcmp(p.src, p.dst, 4096) == 0 && notifs_of(p.b) == 1);
    nixl_xfer_release(x);
    dl_close(&p);
}

/* Loopback: the agent names itself as the remote side (NIXL's local copy;
 * every storage transfer).  Over shm, both buffers registered with it:
 * bytes arrive, the notification comes from the agent itself, a later
 * registration keeps requests valid, a removed one makes them stale, and
 * loading its own blob is still refused. */
static void test_loopback(void)
{
    nixl_agent_t *a = mk_agent("loop");
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, "shm", NULL, 0, &b), NIXL_OK);
    enum { N = 64, PIECE = 1024 };
    unsigned char *src = NULL, *dst = NULL, *more = NULL;
    CHECK_ST(nixl_mem_alloc(N * PIECE, (void **)&src), NIXL_OK);
    CHECK_ST(nixl_mem_alloc(N * PIECE, (void **)&dst), NIXL_OK);
    CHECK_ST(nixl_mem_alloc(PIECE, (void **)&more), NIXL_OK);
    for (size_t i = 0; i < N * PIECE; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    memset(dst, 0, N * PIECE);
    nixl_desc_t rs = {(uintptr_t)src, N * PIECE, 0, 0, NULL}, rd = {(uintptr_t)dst, N * PIECE, 0, 0, NULL};
    nixl_dlist_t regs = dl(&rs, 1), regd = dl(&rd, 1);
    CHECK_ST(nixl_mem_register(a, &regs, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &regd, NULL), NIXL_OK);

    /* piece i of src -> slot (i * 5) % N of dst: nothing merges */
    nixl_desc_t l[N], r[N];
    for (int i = 0; i < N; i++) {
        l[i] = (nixl_desc_t){(uintptr_t)src + (uint64_t)i * PIECE, PIECE, 0, 0, NULL};
        r[i] = (nixl_desc_t){(uintptr_t)dst + (uint64_t)((i * 5) % N) * PIECE, PIECE, 0, 0, NULL};
    }
    nixl_dlist_t L = dl(l, N), R = dl(r, N);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = "self", .notif_len = 4};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R, "loop", &opt, &x), NIXL_OK);
    nixl_status_t st = nixl_xfer_post(x);
    for (int k = 0; st == NIXL_IN_PROG && k < 100000; k++)
        st = nixl_xfer_status(x);
    CHECK_ST(st, NIXL_OK);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += memcmp(dst + (uint64_t)((i * 5) % N) * PIECE, src + (uint64_t)i * PIECE, PIECE) != 0;
    CHECK(bad == 0);
    nixl_xfer_info_t info;
    CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
    CHECK(strncmp(info.path, "shm.", 4) == 0 && info.descs == N);

    /* The notification reaches the agent itself. */
    size_t got = 0;
    for (int k = 0; got == 0 && k < 2000; k++) {
        size_t n = 0;
        CHECK_ST(nixl_notifs_get(a, count_self_notif, &got, &n), NIXL_OK);
        if (!got)
            usleep(1000);
    }
    CHECK(got == 1);

    /* READ back through a prepared loopback list (the two-step form). */
    unsigned char *back = calloc(1, N * PIECE);
    CHECK(back != NULL);
    nixl_prep_t *lp = NULL, *rp = NULL;
    CHECK_ST(nixl_prep_create(a, NULL, &R, NULL, &lp), NIXL_OK);
    CHECK_ST(nixl_prep_create(a, "loop", &L, NULL, &rp), NIXL_OK);
    memset(dst, 0, N * PIECE);
    uint32_t idx[N];
    for (int i = 0; i < N; i++)
        idx[i] = (uint32_t)i;
    nixl_xfer_t *y = NULL;
    CHECK_ST(nixl_xfer_make(a, NIXL_OP_READ, lp, idx, rp, idx, N, NULL, &y), NIXL_OK);
    st = nixl_xfer_post(y);
    for (int k = 0; st == NIXL_IN_PROG && k < 100000; k++)
        st = nixl_xfer_status(y);
    CHECK_ST(st, NIXL_OK);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += memcmp(dst + (uint64_t)((i * 5) % N) * PIECE, src + (uint64_t)i * PIECE, PIECE) != 0;
    CHECK(bad == 0);
    free(back);

    /* A registration added later: the requests stay valid. */
    nixl_desc_t rm = {(uintptr_t)more, PIECE, 0, 0, NULL};
    nixl_dlist_t regm = dl(&rm, 1);
    CHECK_ST(nixl_mem_register(a, &regm, NULL), NIXL_OK);
    st = nixl_xfer_post(x);
    for (int k = 0; st == NIXL_IN_PROG && k < 100000; k++)
        st = nixl_xfer_status(x);
    CHECK_ST(st, NIXL_OK);
    /* One removed: they are stale, and say so. */
    CHECK_ST(nixl_mem_deregister(a, &regm, NULL), NIXL_OK);
    CHECK_ST(nixl_xfer_post(x), NIXL_ERR_STALE);
    nixl_xfer_t *z = NULL;
    CHECK_ST(nixl_xfer_make(a, NIXL_OP_READ, lp, idx, rp, idx, N, NULL, &z), NIXL_ERR_STALE);
    nixl_xfer_release(x);
    nixl_xfer_release(y);
    nixl_prep_release(lp);
    nixl_prep_release(rp);
    /* A fresh request sees the registrations as they are now. */
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R, "loop", NULL, &x), NIXL_OK);
    nixl_xfer_release(x);
    nixl_desc_t gone = {(uintptr_t)more, PIECE, 0, 0, NULL};
    nixl_dlist_t G = dl(&gone, 1), L1 = dl(l, 1);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L1, &G, "loop", NULL, &x), NIXL_ERR_NOT_REGISTERED);

    /* Loading its own blob as a peer is still refused. */
    void *own;
    size_t own_len;
    CHECK_ST(nixl_md_get_local(a, &own, &own_len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, own, own_len, NULL), NIXL_ERR_SELF);
    nixl_free(own);
    CHECK_ST(nixl_mem_deregister(a, &regs, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &regd, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    nixl_mem_free(src, N * PIECE);
    nixl_mem_free(dst, N * PIECE);
    nixl_mem_free(more, PIECE);
}

/* Lists made of runs (vLLM's lists of every block: one run per layer) are
 * read by index arithmetic in make; lists that only look like runs are
 * read as they are.  Every shape below moves its pieces in a shuffled
 * order, checked byte for byte: runs of 100 (the last 50) with gaps
 * between runs and between pieces, one descending run, a short middle run
 * that makes the list not run-shaped, runs of different strides, runs in
 * several regions. */
static void test_run_shaped_lists(void)
{
    nixl_agent_t *a = mk_agent("runs");
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, "shm", NULL, 0, &b), NIXL_OK);
    enum { N = 350, PIECE = 48, GAP = 80, SPAN = N * GAP + 4096 };
    unsigned char *src = NULL, *dst = NULL;
    CHECK_ST(nixl_mem_alloc(2 * SPAN, (void **)&src), NIXL_OK);
    CHECK_ST(nixl_mem_alloc(2 * SPAN, (void **)&dst), NIXL_OK);
    nixl_desc_t regs[4] = {{(uintptr_t)src, SPAN, 0, 0, NULL},
                           {(uintptr_t)src + SPAN, SPAN, 0, 0, NULL},
                           {(uintptr_t)dst, SPAN, 0, 0, NULL},
                           {(uintptr_t)dst + SPAN, SPAN, 0, 0, NULL}};
    nixl_dlist_t rl = dl(regs, 4);
    CHECK_ST(nixl_mem_register(a, &rl, NULL), NIXL_OK);
    static nixl_desc_t l[N], r[N];
    static uint32_t li[N], ri[N];
    for (int shape = 0; shape < 5; shape++) {
        for (int i = 0; i < N; i++) {
            uint64_t k = (uint64_t)i, lo, ro;
            switch (shape) {
            case 0: /* runs of 100 at stride GAP, 256 bytes between runs, 50 left */
                lo = (k / 100) * (100 * GAP + 256) + (k % 100) * GAP;
                ro = k * GAP;
                break;
            case 1: /* descending on the local side */
                lo = (uint64_t)(N - 1 - i) * GAP;
                ro = k * GAP;
                break;
            case 2: /* runs of 100, 99, 151: not run-shaped */
                lo = k * GAP + (k < 100 ? 0 : k < 199 ? 256 : 512);
                ro = k * GAP;
                break;
            case 3: /* runs of 250 and 100 of different strides */
                lo = k < 250 ? k * GAP : 250 * GAP + (k - 250) * (GAP + 16);
                ro = k * GAP;
                break;
            default: /* the second run in another region */
                lo = (k >= 100 && k < 200 ? SPAN : 0) + k * GAP;
                ro = (k >= 200 ? SPAN : 0) + k * GAP;
                break;
            }
            l[i] = (nixl_desc_t){(uintptr_t)src + lo, PIECE, 0, 0, NULL};
            r[i] = (nixl_desc_t){(uintptr_t)dst + ro, PIECE, 0, 0, NULL};
        }
        for (size_t i = 0; i < 2 * SPAN; i++)
            src[i] = (unsigned char)(i * 13 + shape);
        memset(dst, 0, 2 * SPAN);
        nixl_dlist_t L = dl(l, N), R = dl(r, N);
        nixl_prep_t *lp = NULL, *rp = NULL;
        CHECK_ST(nixl_prep_create(a, NULL, &L, NULL, &lp), NIXL_OK);
        CHECK_ST(nixl_prep_create(a, "runs", &R, NULL, &rp), NIXL_OK);
        /* pair j: local piece (j * 37) % N -> remote piece (j * 53 + 1) % N; 37 and 53 are
         * coprime to N, so each remote piece is written once */
        for (int j = 0; j < N; j++) {
            li[j] = (uint32_t)((j * 37) % N);
            ri[j] = (uint32_t)((j * 53 + 1) % N);
        }
        nixl_xfer_t *x = NULL;
        CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, li, rp, ri, N, NULL, &x), NIXL_OK);
        nixl_status_t st = x ? nixl_xfer_post(x) : NIXL_ERR_NULL;
        for (int k = 0; st == NIXL_IN_PROG && k < 100000; k++)
            st = nixl_xfer_status(x);
        CHECK_ST(st, NIXL_OK);
        int bad = 0;
        for (int j = 0; j < N; j++)
            bad += memcmp((void *)(uintptr_t)r[ri[j]].addr, (void *)(uintptr_t)l[li[j]].addr, PIECE) != 0;
        if (bad)
            fprintf(stderr, "run-shaped lists, shape %d: %d of %d pieces wrong\n", shape, bad, N);
        CHECK(bad == 0);
        /* An index past the end is refused, nothing made. */
        li[N - 1] = N;
        nixl_xfer_t *y = NULL;
        CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, li, rp, ri, N, NULL, &y), NIXL_ERR_INVALID_PARAM);
        CHECK(y == NULL);
        nixl_xfer_release(x);
        nixl_prep_release(lp);
        nixl_prep_release(rp);
    }

    /* Contiguous runs (blocks back to back) read in order merge into one
     * piece per run pair; a local run whose pieces are longer than the
     * remote run's is refused, nothing made. */
    for (int i = 0; i < N; i++) {
        uint64_t k = (uint64_t)i;
        l[i] = (nixl_desc_t){(uintptr_t)src + (k / 100) * SPAN / 2 + (k % 100) * PIECE, PIECE, 0, 0, NULL};
        r[i] = (nixl_desc_t){(uintptr_t)dst + k * PIECE, PIECE, 0, 0, NULL};
        li[i] = ri[i] = (uint32_t)i;
    }
    for (size_t i = 0; i < 2 * SPAN; i++)
        src[i] = (unsigned char)(i * 7 + 1);
    memset(dst, 0, 2 * SPAN);
    nixl_dlist_t L = dl(l, N), R = dl(r, N);
    nixl_prep_t *lp = NULL, *rp = NULL;
    CHECK_ST(nixl_prep_create(a, NULL, &L, NULL, &lp), NIXL_OK);
    CHECK_ST(nixl_prep_create(a, "runs", &R, NULL, &rp), NIXL_OK);
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, li, rp, ri, N, NULL, &x), NIXL_OK);
    nixl_xfer_info_t info;
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    /* Remote pieces are one contiguous span; the local runs are not: 4 pieces. */
    CHECK(x && info.descs == 4 && info.descs_in == N && info.bytes == (uint64_t)N * PIECE);
    nixl_status_t st = x ? nixl_xfer_post(x) : NIXL_ERR_NULL;
    for (int k = 0; st == NIXL_IN_PROG && k < 100000; k++)
        st = nixl_xfer_status(x);
    CHECK_ST(st, NIXL_OK);
    int bad = 0;
    for (int j = 0; j < N; j++)
        bad += memcmp((void *)(uintptr_t)r[j].addr, (void *)(uintptr_t)l[j].addr, PIECE) != 0;
    CHECK(bad == 0);
    nixl_xfer_release(x);
    nixl_prep_release(lp);
    for (int i = 200; i < N; i++)
        l[i].len = PIECE + 8; /* the third and fourth local runs */
    CHECK_ST(nixl_prep_create(a, NULL, &L, NULL, &lp), NIXL_OK);
    nixl_xfer_t *y = NULL;
    CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, li, rp, ri, N, NULL, &y), NIXL_ERR_LENGTH_MISMATCH);
    CHECK(y == NULL);
    nixl_prep_release(lp);
    nixl_prep_release(rp);

    CHECK_ST(nixl_mem_deregister(a, &rl, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    nixl_mem_free(src, 2 * SPAN);
    nixl_mem_free(dst, 2 * SPAN);
}

/* Indexed requests: 3 layers x 100 of 300 slots, shuffled on both sides,
 * every piece checked byte for byte; a repost after the source changed
 * moves the new bytes; each bad input is refused with its status and
 * moves nothing. */
static void test_indexed(void)
{
    nixl_agent_t *a = mk_agent("idx");
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, "shm", NULL, 0, &b), NIXL_OK);
    enum { LAYERS = 3, SLOTS = 300, NS = 100, ITEM = 48, STRIDE = 64, LB = SLOTS * STRIDE };
    unsigned char *src = NULL, *dst = NULL;
    CHECK_ST(nixl_mem_alloc(LAYERS * LB, (void **)&src), NIXL_OK);
    CHECK_ST(nixl_mem_alloc(LAYERS * LB, (void **)&dst), NIXL_OK);
    nixl_desc_t regs[2 * LAYERS];
    uint64_t lb[LAYERS], rb[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        lb[l] = (uintptr_t)src + (uint64_t)l * LB;
        rb[l] = (uintptr_t)dst + (uint64_t)l * LB;
        regs[l] = (nixl_desc_t){lb[l], LB, 0, 0, NULL};
        regs[LAYERS + l] = (nixl_desc_t){rb[l], LB, 0, 0, NULL};
    }
    nixl_dlist_t rl = dl(regs, 2 * LAYERS);
    CHECK_ST(nixl_mem_register(a, &rl, NULL), NIXL_OK);
    uint32_t ls[NS], rs[NS];
    for (int t = 0; t < NS; t++) {
        ls[t] = (uint32_t)((t * 7 + 3) % SLOTS);
        rs[t] = (uint32_t)((t * 11 + 5) % SLOTS);
    }
    nixl_indexed_t L = {NIXL_MEM_DRAM, LAYERS, lb, STRIDE, ls}, R = {NIXL_MEM_DRAM, LAYERS, rb, STRIDE, rs};
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < (size_t)LAYERS * LB; i++)
            src[i] = (unsigned char)(i * 31 + round * 17 + 1);
        memset(dst, 0, LAYERS * LB);
        nixl_xfer_t *x = NULL;
        CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, NS, ITEM, "idx", NULL, &x), NIXL_OK);
        nixl_status_t st = x ? nixl_xfer_post(x) : NIXL_ERR_NULL;
        for (int k = 0; st == NIXL_IN_PROG && k < 100000; k++)
            st = nixl_xfer_status(x);
        CHECK_ST(st, NIXL_OK);
        int bad = 0;
        for (int l = 0; l < LAYERS; l++)
            for (int t = 0; t < NS; t++)
                bad += memcmp((void *)(uintptr_t)(rb[l] + (uint64_t)rs[t] * STRIDE),
                              (void *)(uintptr_t)(lb[l] + (uint64_t)ls[t] * STRIDE), ITEM) != 0;
        if (bad)
            fprintf(stderr, "indexed request, round %d: %d of %d pieces wrong\n", round, bad, LAYERS * NS);
        CHECK(bad == 0);
        nixl_xfer_info_t info;
        CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
        CHECK(info.descs_in == LAYERS * NS && info.bytes == (uint64_t)LAYERS * NS * ITEM);
        nixl_xfer_release(x);
    }
    /* Refused, nothing moved. */
    memset(dst, 0, LAYERS * LB);
    nixl_xfer_t *x = NULL;
    rs[NS - 1] = SLOTS; /* past the last layer's end (the others reach the next layer: registered) */
    CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, NS, ITEM, "idx", NULL, &x), NIXL_ERR_NOT_REGISTERED);
    CHECK(x == NULL);
    rs[NS - 1] = 0;
    nixl_indexed_t big = R;
    big.stride = UINT64_MAX / 2;
    CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &big, NS, ITEM, "idx", NULL, &x), NIXL_ERR_INVALID_PARAM);
    nixl_indexed_t two = R;
    two.layers = 2;
    CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &two, NS, ITEM, "idx", NULL, &x),
             NIXL_ERR_LENGTH_MISMATCH);
    CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, NS, 0, "idx", NULL, &x), NIXL_ERR_ZERO_LENGTH);
    CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, 0, ITEM, "idx", NULL, &x), NIXL_ERR_ZERO_LENGTH);
    nixl_indexed_t noslots = R;
    noslots.slots = NULL;
    CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &noslots, NS, ITEM, "idx", NULL, &x), NIXL_ERR_NULL);
    CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, NS, ITEM, "nobody", NULL, &x),
             NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_xfer_create_indexed(a, (nixl_op_t)7, &L, &R, NS, ITEM, "idx", NULL, &x), NIXL_ERR_INVALID_PARAM);
    int moved = 0;
    for (size_t i = 0; i < (size_t)LAYERS * LB; i++)
        moved |= dst[i];
    CHECK(moved == 0);
    CHECK_ST(nixl_mem_deregister(a, &rl, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    nixl_mem_free(src, LAYERS * LB);
    nixl_mem_free(dst, LAYERS * LB);
}

/* The fake_indexed module's counters (fake_backend.h), or NULL. */
static fake_counters_fn indexed_counters(void)
{
    const nixl_backend_info_t *infos;
    size_t n;
    if (nixl_backends_available(&infos, &n) != NIXL_OK)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(infos[i].name, "fake_indexed") != 0)
            continue;
        void *h = dlopen(infos[i].origin, RTLD_NOW | RTLD_NOLOAD);
        return h ? (fake_counters_fn)(uintptr_t)dlsym(h, FAKE_COUNTERS_SYM) : NULL;
    }
    return NULL;
}

/* Post, wait, check every piece (l, t) landed; the request's path. */
static void indexed_round(nixl_xfer_t *x, const uint64_t *lb, const uint32_t *ls, const uint64_t *rb,
                          const uint32_t *rs, int layers, int ns, uint64_t stride, uint64_t item, const char *path,
                          const char *what)
{
    nixl_status_t st = x ? nixl_xfer_post(x) : NIXL_ERR_NULL;
    for (int k = 0; st == NIXL_IN_PROG && k < 100000; k++)
        st = nixl_xfer_status(x);
    CHECK_ST(st, NIXL_OK);
    int bad = 0;
    for (int l = 0; l < layers; l++)
        for (int t = 0; t < ns; t++)
            bad += memcmp((void *)(uintptr_t)(rb[l] + rs[t] * stride), (void *)(uintptr_t)(lb[l] + ls[t] * stride),
                          item) != 0;
    if (bad)
        fprintf(stderr, "%s: %d of %d pieces wrong\n", what, bad, layers * ns);
    CHECK(bad == 0);
    nixl_xfer_info_t info;
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    if (x && strcmp(info.path, path) != 0)
        fprintf(stderr, "%s: path %s, expected %s\n", what, info.path, path);
    CHECK(x && strcmp(info.path, path) == 0);
    CHECK(x && info.bytes == (uint64_t)layers * ns * item);
}

/* Indexed requests a backend takes in their own form (xfer_prepare_indexed,
 * the fake_indexed module): taken when every layer's span lies in one
 * registration, built in pieces when one does not or the backend declines;
 * a re-registration under a made request re-prepares it; refusals are the
 * core's, before the backend sees anything. */
static void test_indexed_native(void)
{
    enum { LAYERS = 4, SLOTS = 256, NS = 120, ITEM = 40, STRIDE = 48, LB = SLOTS * STRIDE };
    static unsigned char src[LAYERS * LB], dst[LAYERS * LB];
    uint64_t lb[LAYERS], rb[LAYERS];
    nixl_desc_t lregs[LAYERS], rregs[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        lb[l] = (uintptr_t)src + (uint64_t)l * LB;
        rb[l] = (uintptr_t)dst + (uint64_t)l * LB;
        lregs[l] = (nixl_desc_t){lb[l], LB, 0, 0, NULL};
        rregs[l] = (nixl_desc_t){rb[l], LB, 0, 0, NULL};
    }
    nixl_dlist_t ll = dl(lregs, LAYERS), rl = dl(rregs, LAYERS);
    uint32_t ls[NS], rs[NS];
    for (int t = 0; t < NS; t++) {
        ls[t] = (uint32_t)((t * 37 + 5) % SLOTS);
        rs[t] = (uint32_t)((t * 53 + 9) % SLOTS);
    }
    nixl_indexed_t L = {NIXL_MEM_DRAM, LAYERS, lb, STRIDE, ls}, R = {NIXL_MEM_DRAM, LAYERS, rb, STRIDE, rs};
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: the backend takes the indexed form; pass 1: it declines. */
        nixl_agent_t *a = mk_agent("ix-init"), *t = mk_agent("ix-target");
        nixl_param_t p = {"indexed", pass == 0 ? "1" : "0"};
        nixl_backend_t *b = NULL;
        CHECK_ST(nixl_backend_create(a, "fake_indexed", &p, 1, &b), NIXL_OK);
        CHECK_ST(nixl_backend_create(t, "fake_indexed", &p, 1, &b), NIXL_OK);
        fake_counters_fn ctr = indexed_counters();
        CHECK(ctr != NULL);
        if (!ctr) {
            nixl_agent_destroy(a);
            nixl_agent_destroy(t);
            return;
        }
        CHECK_ST(nixl_mem_register(a, &ll, NULL), NIXL_OK);
        CHECK_ST(nixl_mem_register(t, &rl, NULL), NIXL_OK);
        exchange(a, t);
        for (size_t i = 0; i < sizeof(src); i++)
            src[i] = (unsigned char)(i * 13 + 7 + pass);
        memset(dst, 0, sizeof(dst));
        fake_counters_t c;
        ctr(&c, 1);
        nixl_xfer_t *x = NULL;
        CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, NS, ITEM, "ix-target", NULL, &x), NIXL_OK);
        ctr(&c, 0);
        if (pass == 1) {
            /* Declined: the same request in pieces, same backend, no fallback. */
            CHECK(c.indexed_prepares == 0 && c.indexed_declined == 1);
            indexed_round(x, lb, ls, rb, rs, LAYERS, NS, STRIDE, ITEM, "fake.copy", "indexed, declined");
            nixl_xfer_release(x);
            nixl_agent_destroy(a);
            nixl_agent_destroy(t);
            break;
        }
        /* Taken as it is: one prepare of the indexed form, every piece lands. */
        CHECK(c.indexed_prepares == 1 && c.indexed_declined == 0);
        indexed_round(x, lb, ls, rb, rs, LAYERS, NS, STRIDE, ITEM, "fake.indexed", "indexed, native");
        nixl_xfer_info_t info;
        CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
        CHECK(x && info.descs == LAYERS * NS && info.descs_in == LAYERS * NS);
        /* The caller's slot arrays are not read after the call. */
        uint32_t saved = rs[0];
        rs[0] = SLOTS * 100;
        /* Layer 2's local memory registered again under the made request:
         * the post re-prepares the indexed form with the new registration. */
        nixl_dlist_t one = dl(&lregs[2], 1);
        CHECK_ST(nixl_mem_deregister(a, &one, NULL), NIXL_OK);
        CHECK_ST(nixl_mem_register(a, &one, NULL), NIXL_OK);
        for (size_t i = 0; i < sizeof(src); i++)
            src[i] = (unsigned char)(i * 29 + 3);
        memset(dst, 0, sizeof(dst));
        rs[0] = saved;
        indexed_round(x, lb, ls, rb, rs, LAYERS, NS, STRIDE, ITEM, "fake.indexed", "indexed, re-registered");
        ctr(&c, 0);
        CHECK(c.indexed_prepares == 2);
        /* Deregistered and not again: the post refuses, nothing moves. */
        CHECK_ST(nixl_mem_deregister(a, &one, NULL), NIXL_OK);
        memset(dst, 0, sizeof(dst));
        CHECK_ST(x ? nixl_xfer_post(x) : NIXL_ERR_NULL, NIXL_ERR_NOT_REGISTERED);
        int moved = 0;
        for (size_t i = 0; i < sizeof(dst); i++)
            moved |= dst[i];
        CHECK(moved == 0);
        nixl_xfer_release(x);

        /* Layer 2's local memory in two registrations: its span is in
         * neither, so the request is built in pieces (and still lands). */
        nixl_desc_t halves[2] = {{lb[2], LB / 2, 0, 0, NULL}, {lb[2] + LB / 2, LB / 2, 0, 0, NULL}};
        nixl_dlist_t hl = dl(halves, 2);
        CHECK_ST(nixl_mem_register(a, &hl, NULL), NIXL_OK);
        ctr(&c, 1);
        x = NULL;
        CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, NS, ITEM, "ix-target", NULL, &x), NIXL_OK);
        ctr(&c, 0);
        CHECK(c.indexed_prepares == 0);
        indexed_round(x, lb, ls, rb, rs, LAYERS, NS, STRIDE, ITEM, "fake.copy", "indexed, a layer across regions");
        nixl_xfer_release(x);
        CHECK_ST(nixl_mem_deregister(a, &hl, NULL), NIXL_OK);
        CHECK_ST(nixl_mem_register(a, &one, NULL), NIXL_OK);

        /* Two lists that are an indexed request (SGLang's rows: base +
         * slot x item, layer after layer, the same slots in each): made
         * as one.  The same pairs with two rows of one layer swapped on
         * both sides are not that shape: made in pieces, same bytes. */
        {
            static nixl_desc_t lrows[LAYERS * NS], rrows[LAYERS * NS];
            for (int l = 0; l < LAYERS; l++)
                for (int k = 0; k < NS; k++) {
                    lrows[l * NS + k] = (nixl_desc_t){lb[l] + (uint64_t)ls[k] * STRIDE, STRIDE, 0, 0, NULL};
                    rrows[l * NS + k] = (nixl_desc_t){rb[l] + (uint64_t)rs[k] * STRIDE, STRIDE, 0, 0, NULL};
                }
            nixl_dlist_t lrl = dl(lrows, LAYERS * NS), rrl = dl(rrows, LAYERS * NS);
            for (int shape = 0; shape < 2; shape++) {
                if (shape == 1) {
                    nixl_desc_t tl = lrows[2 * NS + 3], tr = rrows[2 * NS + 3];
                    lrows[2 * NS + 3] = lrows[2 * NS + 7];
                    rrows[2 * NS + 3] = rrows[2 * NS + 7];
                    lrows[2 * NS + 7] = tl;
                    rrows[2 * NS + 7] = tr;
                }
                ctr(&c, 1);
                memset(dst, 0, sizeof(dst));
                x = NULL;
                CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &lrl, &rrl, "ix-target", NULL, &x), NIXL_OK);
                ctr(&c, 0);
                CHECK(c.indexed_prepares == (shape == 0 ? 1u : 0u));
                indexed_round(x, lb, ls, rb, rs, LAYERS, NS, STRIDE, STRIDE, shape == 0 ? "fake.indexed" : "fake.copy",
                              shape == 0 ? "rows of an indexed request" : "rows almost of an indexed request");
                nixl_xfer_release(x);
            }
        }

        /* The same request as rows read in place (nixl_xfer_create_rows):
         * int64 rows of three words and uint64 rows of four (a column
         * slice), indexed (made as one) or not (two rows of a layer
         * swapped on both sides: pieces), the same bytes either way; a
         * refused row in any layer, on either side, makes nothing. */
        {
            enum { N = LAYERS * NS };
            static uint64_t lr3[N * 3], rr3[N * 3], lr4[N * 4], rr4[N * 4];
            for (int l = 0; l < LAYERS; l++)
                for (int k = 0; k < NS; k++) {
                    size_t i = (size_t)l * NS + (size_t)k;
                    uint64_t la = lb[l] + (uint64_t)ls[k] * STRIDE, ra = rb[l] + (uint64_t)rs[k] * STRIDE;
                    uint64_t lv[4] = {la, STRIDE, 0, 0xdead}, rv[4] = {ra, STRIDE, 0, 0xbeef};
                    memcpy(&lr3[3 * i], lv, 3 * sizeof(uint64_t));
                    memcpy(&rr3[3 * i], rv, 3 * sizeof(uint64_t));
                    memcpy(&lr4[4 * i], lv, sizeof(lv));
                    memcpy(&rr4[4 * i], rv, sizeof(rv));
                }
            for (int form = 0; form < 4; form++) {
                int wide = form & 1, swapped = form >> 1;
                uint64_t *lw = wide ? lr4 : lr3, *rw = wide ? rr4 : rr3;
                size_t st = wide ? 4 : 3;
                if (swapped)
                    for (int side = 0; side < 2; side++) {
                        uint64_t *w = side ? rw : lw, tmp[4];
                        size_t u = (2 * NS + 3) * st, v = (2 * NS + 7) * st;
                        memcpy(tmp, &w[u], st * sizeof(uint64_t));
                        memcpy(&w[u], &w[v], st * sizeof(uint64_t));
                        memcpy(&w[v], tmp, st * sizeof(uint64_t));
                    }
                nixl_rows_t LR = {NIXL_MEM_DRAM, N, lw, st, !wide}, RR = {NIXL_MEM_DRAM, N, rw, st, !wide};
                ctr(&c, 1);
                memset(dst, 0, sizeof(dst));
                x = NULL;
                CHECK_ST(nixl_xfer_create_rows(a, NIXL_OP_WRITE, &LR, &RR, "ix-target", NULL, &x), NIXL_OK);
                ctr(&c, 0);
                CHECK(c.indexed_prepares == (swapped ? 0u : 1u));
                indexed_round(x, lb, ls, rb, rs, LAYERS, NS, STRIDE, STRIDE, swapped ? "fake.copy" : "fake.indexed",
                              swapped ? "rows, not indexed" : "rows, indexed");
                nixl_xfer_release(x);
                /* Refused rows: a negative field (int64 rows) or a device id of 2^32 (either). */
                const size_t where[] = {5, 2 * NS + 9, (size_t)N - 1};
                for (int k = 0; k < 3; k++)
                    for (int side = 0; side < 2; side++)
                        for (int field = 0; field < 2; field++) {
                            uint64_t *w = (side ? rw : lw) + where[k] * st;
                            int col = field ? 2 : (k == 1 ? 1 : 0);
                            if (!field && wide)
                                continue; /* uint64: no sign to refuse */
                            uint64_t keep = w[col];
                            w[col] = field ? 1ull << 32 : (uint64_t)-4096;
                            memset(dst, 0, sizeof(dst));
                            x = NULL;
                            nixl_status_t got =
                                nixl_xfer_create_rows(a, NIXL_OP_WRITE, &LR, &RR, "ix-target", NULL, &x);
                            if (got != NIXL_ERR_INVALID_PARAM)
                                fprintf(stderr, "rows: form %d row %zu side %d field %d: %s\n", form, where[k], side,
                                        field, nixl_strerror(got));
                            CHECK(got == NIXL_ERR_INVALID_PARAM && x == NULL);
                            w[col] = keep;
                        }
            }
            /* Rows and the lists made of them are one request: for rows
             * changed at random (a length, an address moved by less than
             * an item, out of the registration or into another layer, two
             * rows swapped), create_rows and create of the converted lists
             * give the same status and, when made, the same path, pieces
             * and bytes. */
            {
                static nixl_desc_t ldl[N], rdl[N];
                uint64_t seed = 0x9e3779b97f4a7c15ull;
                int same = 1;
                for (int trial = 0; trial < 200; trial++) {
                    for (int l = 0; l < LAYERS; l++)
                        for (int k = 0; k < NS; k++) {
                            size_t i = (size_t)l * NS + (size_t)k;
                            lr3[3 * i] = lb[l] + (uint64_t)ls[k] * STRIDE;
                            rr3[3 * i] = rb[l] + (uint64_t)rs[k] * STRIDE;
                            lr3[3 * i + 1] = rr3[3 * i + 1] = STRIDE;
                            lr3[3 * i + 2] = rr3[3 * i + 2] = 0;
                        }
                    for (int m = 0; m < 1 + trial % 3; m++) {
                        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                        uint64_t *w = (seed & 1) ? rr3 : lr3;
                        size_t i = (size_t)((seed >> 8) % N), j = (size_t)((seed >> 24) % N);
                        switch ((seed >> 40) % 5) {
                        case 0: w[3 * i + 1] = STRIDE / 2; break;
                        case 1: w[3 * i] += 8; break;
                        case 2: w[3 * i] += (uint64_t)LB * LAYERS * 4; break;
                        case 3: w[3 * i] = w[3 * j]; break;
                        default: {
                            uint64_t t0 = lr3[3 * i], t1 = rr3[3 * i];
                            lr3[3 * i] = lr3[3 * j], rr3[3 * i] = rr3[3 * j];
                            lr3[3 * j] = t0, rr3[3 * j] = t1;
                        }
                        }
                    }
                    nixl_rows_t LR = {NIXL_MEM_DRAM, N, lr3, 3, 1}, RR = {NIXL_MEM_DRAM, N, rr3, 3, 1};
                    CHECK_ST(nixl_descs_from_rows(ldl, lr3, N, 3, 1, NULL), NIXL_OK);
                    CHECK_ST(nixl_descs_from_rows(rdl, rr3, N, 3, 1, NULL), NIXL_OK);
                    nixl_dlist_t LD = dl(ldl, N), RD = dl(rdl, N);
                    nixl_xfer_t *xr = NULL, *xd = NULL;
                    nixl_status_t sr = nixl_xfer_create_rows(a, NIXL_OP_WRITE, &LR, &RR, "ix-target", NULL, &xr);
                    nixl_status_t sd = nixl_xfer_create(a, NIXL_OP_WRITE, &LD, &RD, "ix-target", NULL, &xd);
                    int ok = sr == sd && (xr == NULL) == (xd == NULL);
                    if (ok && xr) {
                        nixl_xfer_info_t ir, id;
                        ok = nixl_xfer_info(xr, &ir) == NIXL_OK && nixl_xfer_info(xd, &id) == NIXL_OK &&
                             strcmp(ir.path, id.path) == 0 && ir.descs == id.descs && ir.bytes == id.bytes &&
                             ir.descs_in == id.descs_in;
                    }
                    if (!ok)
                        fprintf(stderr, "rows trial %d: create_rows %s, create %s\n", trial, nixl_strerror(sr),
                                nixl_strerror(sd));
                    same &= ok;
                    nixl_xfer_release(xr);
                    nixl_xfer_release(xd);
                }
                CHECK(same);
            }
            nixl_rows_t LR = {NIXL_MEM_DRAM, N, lr3, 3, 1}, RR = {NIXL_MEM_DRAM, N - 1, rr3, 3, 1};
            x = NULL;
            CHECK_ST(nixl_xfer_create_rows(a, NIXL_OP_WRITE, &LR, &RR, "ix-target", NULL, &x),
                     NIXL_ERR_LENGTH_MISMATCH);
            RR.count = N;
            RR.stride = 2;
            CHECK_ST(nixl_xfer_create_rows(a, NIXL_OP_WRITE, &LR, &RR, "ix-target", NULL, &x), NIXL_ERR_INVALID_PARAM);
            RR.stride = 3;
            RR.rows = NULL;
            CHECK_ST(nixl_xfer_create_rows(a, NIXL_OP_WRITE, &LR, &RR, "ix-target", NULL, &x), NIXL_ERR_NULL);
            RR.rows = rr3;
            CHECK_ST(nixl_xfer_create_rows(a, NIXL_OP_WRITE, &LR, &RR, "nobody", NULL, &x), NIXL_ERR_UNKNOWN_PEER);
            CHECK(x == NULL);
        }

        /* vLLM's make: lists of every slot of every layer (one run per
         * layer) and slot indices per layer: made as one indexed request;
         * with two pairs of one layer swapped, in pieces. */
        {
            static nixl_desc_t lall[LAYERS * SLOTS], rall[LAYERS * SLOTS];
            static uint32_t li[LAYERS * NS], ri[LAYERS * NS];
            for (int l = 0; l < LAYERS; l++)
                for (int k = 0; k < SLOTS; k++) {
                    lall[l * SLOTS + k] = (nixl_desc_t){lb[l] + (uint64_t)k * STRIDE, ITEM, 0, 0, NULL};
                    rall[l * SLOTS + k] = (nixl_desc_t){rb[l] + (uint64_t)k * STRIDE, ITEM, 0, 0, NULL};
                }
            for (int l = 0; l < LAYERS; l++)
                for (int k = 0; k < NS; k++) {
                    li[l * NS + k] = (uint32_t)(l * SLOTS) + ls[k];
                    ri[l * NS + k] = (uint32_t)(l * SLOTS) + rs[k];
                }
            nixl_dlist_t lal = dl(lall, LAYERS * SLOTS), ral = dl(rall, LAYERS * SLOTS);
            nixl_prep_t *lp = NULL, *rp = NULL;
            CHECK_ST(nixl_prep_create(a, NULL, &lal, NULL, &lp), NIXL_OK);
            CHECK_ST(nixl_prep_create(a, "ix-target", &ral, NULL, &rp), NIXL_OK);
            for (int shape = 0; shape < 2 && lp && rp; shape++) {
                if (shape == 1) {
                    uint32_t tl = li[3 * NS + 1], tr = ri[3 * NS + 1];
                    li[3 * NS + 1] = li[3 * NS + 2];
                    ri[3 * NS + 1] = ri[3 * NS + 2];
                    li[3 * NS + 2] = tl;
                    ri[3 * NS + 2] = tr;
                }
                ctr(&c, 1);
                memset(dst, 0, sizeof(dst));
                x = NULL;
                CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, li, rp, ri, LAYERS * NS, NULL, &x), NIXL_OK);
                ctr(&c, 0);
                CHECK(c.indexed_prepares == (shape == 0 ? 1u : 0u));
                indexed_round(x, lb, ls, rb, rs, LAYERS, NS, STRIDE, ITEM, shape == 0 ? "fake.indexed" : "fake.copy",
                              shape == 0 ? "make of an indexed request" : "make almost of an indexed request");
                nixl_xfer_release(x);
            }
            /* One layer of it (layer 1's slots): an indexed request too. */
            if (lp && rp) {
                static uint32_t l1[NS], r1[NS];
                for (int k = 0; k < NS; k++) {
                    l1[k] = (uint32_t)SLOTS + ls[k];
                    r1[k] = (uint32_t)SLOTS + rs[k];
                }
                ctr(&c, 1);
                memset(dst, 0, sizeof(dst));
                x = NULL;
                CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, l1, rp, r1, NS, NULL, &x), NIXL_OK);
                ctr(&c, 0);
                CHECK(c.indexed_prepares == 1);
                indexed_round(x, lb + 1, ls, rb + 1, rs, 1, NS, STRIDE, ITEM, "fake.indexed",
                              "make of a one-layer indexed request");
                nixl_xfer_release(x);
                /* A slot past the last layer's end, in the one layer: refused. */
                r1[NS - 1] = LAYERS * SLOTS;
                x = NULL;
                CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, l1, rp, r1, NS, NULL, &x), NIXL_ERR_INVALID_PARAM);
                CHECK(x == NULL);
            }
            /* An index past the lists: refused as any make's. */
            ri[LAYERS * NS - 1] = LAYERS * SLOTS;
            x = NULL;
            CHECK_ST(nixl_xfer_make(a, NIXL_OP_WRITE, lp, li, rp, ri, LAYERS * NS, NULL, &x), NIXL_ERR_INVALID_PARAM);
            CHECK(x == NULL);
            nixl_prep_release(lp);
            nixl_prep_release(rp);
        }

        /* Slots that mostly run on, items next to each other (stride ==
         * length): made in pieces, which merge into fewer, larger ones. */
        {
            static nixl_desc_t lall[SLOTS], rall[SLOTS];
            static uint32_t li[NS], ri[NS];
            for (int k = 0; k < SLOTS; k++) {
                lall[k] = (nixl_desc_t){lb[0] + (uint64_t)k * STRIDE, STRIDE, 0, 0, NULL};
                rall[k] = (nixl_desc_t){rb[0] + (uint64_t)k * STRIDE, STRIDE, 0, 0, NULL};
            }
            uint32_t lrun[NS], rrun[NS];
            for (int k = 0; k < NS; k++) { /* runs of 8: 105 of 120 continue the previous pair */
                li[k] = lrun[k] = (uint32_t)((k / 8) * 16 + k % 8);
                ri[k] = rrun[k] = (uint32_t)(SLOTS - 16 - (k / 8) * 16 + k % 8);
            }
            nixl_dlist_t lal = dl(lall, SLOTS), ral = dl(rall, SLOTS);
            nixl_prep_t *lp = NULL, *rp = NULL;
            CHECK_ST(nixl_prep_create(a, NULL, &lal, NULL, &lp), NIXL_OK);
            CHECK_ST(nixl_prep_create(a, "ix-target", &ral, NULL, &rp), NIXL_OK);
            ctr(&c, 1);
            memset(dst, 0, sizeof(dst));
            x = NULL;
            CHECK_ST(lp && rp ? nixl_xfer_make(a, NIXL_OP_WRITE, lp, li, rp, ri, NS, NULL, &x) : NIXL_ERR_NULL,
                     NIXL_OK);
            ctr(&c, 0);
            CHECK(c.indexed_prepares == 0);
            indexed_round(x, lb, lrun, rb, rrun, 1, NS, STRIDE, STRIDE, "fake.copy", "make of runs");
            nixl_xfer_info_t ri8;
            CHECK_ST(x ? nixl_xfer_info(x, &ri8) : NIXL_ERR_NULL, NIXL_OK);
            CHECK(x && ri8.descs == NS / 8 && ri8.descs_in == NS);
            nixl_xfer_release(x);
            nixl_prep_release(lp);
            nixl_prep_release(rp);
        }

        /* A remote slot past the target's memory: refused by the core,
         * nothing prepared or moved. */
        ctr(&c, 1);
        rs[NS - 1] = SLOTS * LAYERS;
        memset(dst, 0, sizeof(dst));
        x = NULL;
        CHECK_ST(nixl_xfer_create_indexed(a, NIXL_OP_WRITE, &L, &R, NS, ITEM, "ix-target", NULL, &x),
                 NIXL_ERR_NOT_REGISTERED);
        CHECK(x == NULL);
        rs[NS - 1] = 0;
        ctr(&c, 0);
        CHECK(c.indexed_prepares == 0);
        moved = 0;
        for (size_t i = 0; i < sizeof(dst); i++)
            moved |= dst[i];
        CHECK(moved == 0);
        nixl_agent_destroy(a);
        nixl_agent_destroy(t);
    }
}

/* nixl_descs_from_rows: every row copied, strides honoured, each refused
 * field named by its row, in any block of the pass. */
static void test_descs_from_rows(void)
{
    enum { N = 1000 };
    static uint64_t rows[N * 4];
    static nixl_desc_t d[2 * N]; /* room for the stride-3 reading of the same words */
    for (size_t i = 0; i < N; i++) {
        rows[4 * i] = 0x10000 + 64 * i;
        rows[4 * i + 1] = 64 + i;
        rows[4 * i + 2] = i % 8;
        rows[4 * i + 3] = 0xdead; /* a fourth column: skipped with stride 4 */
    }
    memset(d, 0xff, sizeof(d));
    CHECK_ST(nixl_descs_from_rows(d, rows, N, 4, 1, NULL), NIXL_OK);
    int same = 1;
    for (size_t i = 0; i < N; i++)
        same &= d[i].addr == 0x10000 + 64 * i && d[i].len == 64 + i && d[i].dev_id == i % 8 && d[i].meta_len == 0 &&
                d[i].meta == NULL;
    CHECK(same);
    /* Stride 3 reads the same words as rows of three. */
    CHECK_ST(nixl_descs_from_rows(d, rows, N * 4 / 3, 3, 0, NULL), NIXL_OK);
    CHECK(d[1].addr == 0xdead && d[1].len == 0x10040);
    CHECK_ST(nixl_descs_from_rows(d, rows, 0, 3, 1, NULL), NIXL_OK);
    CHECK_ST(nixl_descs_from_rows(d, rows, N, 2, 1, NULL), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_descs_from_rows(NULL, rows, N, 4, 1, NULL), NIXL_ERR_NULL);
    /* A negative length in the third block: refused as int64, legal as uint64. */
    size_t bad = 0;
    rows[4 * 700 + 1] = (uint64_t)-5;
    CHECK_ST(nixl_descs_from_rows(d, rows, N, 4, 1, &bad), NIXL_ERR_INVALID_PARAM);
    CHECK(bad == 700);
    CHECK_ST(nixl_descs_from_rows(d, rows, N, 4, 0, &bad), NIXL_OK);
    rows[4 * 700 + 1] = 64;
    /* A device id of 2^32 is refused either way. */
    rows[4 * 3 + 2] = 1ull << 32;
    CHECK_ST(nixl_descs_from_rows(d, rows, N, 4, 0, &bad), NIXL_ERR_INVALID_PARAM);
    CHECK(bad == 3);
}

static void test_status_names(void)
{
    CHECK(strcmp(nixl_status_name(NIXL_ERR_STALE), "NIXL_ERR_STALE") == 0);
    CHECK(strcmp(nixl_strerror(NIXL_OK), "success") == 0);
}

int main(void)
{
    test_module_listed();
    test_agent_and_backend_args();
    test_registration();
    test_transfer_rules();
    test_fallback_accounting();
    test_mem_alloc_sealed();
    test_vram_without_driver();
    test_deadline();
    test_loopback();
    test_descs_from_rows();
    test_run_shaped_lists();
    test_indexed();
    test_indexed_native();
    test_status_names();
    if (failures) {
        fprintf(stderr, "test_core: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_core: all checks passed\n");
    return 0;
}
