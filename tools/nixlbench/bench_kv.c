/*
 * bench_kv.c - the KV replay: one request shaped like the field report's
 * (workloads.md): DeepSeek-V2-Lite's MLA cache of an 8,192-token prompt,
 * 27 layers x 8,192 tokens x 1,152 B, page size 1, one buffer per layer on
 * each side.  The request's token slots are shuffled on each side (prefill
 * and decode allocate slots independently), so only chance neighbours merge
 * and the library sees ~221,184 descriptors.
 *
 * The initiator prepares both lists once and makes the request from index
 * arrays (the two-step API), checks the first WRITE byte for byte on the
 * target, then re-posts it --iters times, each waited for: the time of one
 * request is post to completion.  The floor is the driver's copy of the
 * same number of bytes between the same GPUs in one call.
 *
 * With --kv-e2e, --iters whole requests of each engine's shape follow,
 * each with fresh slots (kv_e2e below), the last of each verified.
 *
 * Target requests: kvalloc <layers> <layer bytes> <dram|vram> <gpu>
 *   -> kvbuf <layer> <addr> per layer, then kvready <layers>;
 *   kvchk <seed> <local slot seed> <remote slot seed> <tokens> <token bytes>
 *   -> kvok <seed> | kvbad <seed> <layer> <offset>.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* ---- target side ---- */

static struct {
    int layers;
    uint64_t layer_bytes;
    bench_mem_t mem;
    int dev;
    uint8_t *buf[BENCH_KV_LAYERS];
    uint8_t *host;
} kvt;

static nixl_dlist_t kv_dlist(nixl_desc_t *d, uint8_t *const *bufs, int layers, uint64_t len, bench_mem_t mem, int dev)
{
    for (int l = 0; l < layers; l++)
        d[l] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)bufs[l], .len = len,
                             .dev_id = mem == BENCH_MEM_VRAM ? (uint32_t)dev : 0};
    return (nixl_dlist_t){.mem_type = mem == BENCH_MEM_VRAM ? NIXL_MEM_VRAM : NIXL_MEM_DRAM, .count = (size_t)layers,
                          .descs = d};
}

static uint8_t *kv_alloc(bench_mem_t mem, int dev, uint64_t len)
{
    return mem == BENCH_MEM_VRAM ? bench_vram_alloc(dev, len) : bench_alloc(BENCH_ALLOC_MALLOC, len);
}

static void kv_free(bench_mem_t mem, int dev, uint8_t *p, uint64_t len)
{
    if (mem == BENCH_MEM_VRAM)
        bench_vram_free(dev, p);
    else
        bench_free(BENCH_ALLOC_MALLOC, p, len);
}

void bench_kv_target_drop(nixl_agent_t *agent)
{
    if (!kvt.layers)
        return;
    nixl_desc_t d[BENCH_KV_LAYERS];
    nixl_dlist_t l = kv_dlist(d, kvt.buf, kvt.layers, kvt.layer_bytes, kvt.mem, kvt.dev);
    bench_check(nixl_mem_deregister(agent, &l, NULL), "nixl_mem_deregister(KV layers)");
    for (int i = 0; i < kvt.layers; i++)
        kv_free(kvt.mem, kvt.dev, kvt.buf[i], kvt.layer_bytes);
    free(kvt.host);
    memset(&kvt, 0, sizeof(kvt));
}

static void kv_reply(nixl_agent_t *agent, const char *peer, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kv_reply(nixl_agent_t *agent, const char *peer, const char *fmt, ...)
{
    char text[BENCH_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    bench_notif_send(agent, peer, text);
}

static void kv_on_alloc(nixl_agent_t *agent, const bench_msg_t *m)
{
    int layers, dev;
    unsigned long long lb;
    char mem[16];
    if (sscanf(m->text, "kvalloc %d %llu %15s %d", &layers, &lb, mem, &dev) != 4 || layers < 1 ||
        layers > BENCH_KV_LAYERS || lb == 0 || dev < 0) {
        kv_reply(agent, m->sender, "err malformed kvalloc request");
        return;
    }
    bench_kv_target_drop(agent);
    kvt.layers = layers;
    kvt.layer_bytes = lb;
    kvt.mem = strcmp(mem, "vram") ? BENCH_MEM_DRAM : BENCH_MEM_VRAM;
    kvt.dev = dev;
    kvt.host = malloc(lb);
    if (!kvt.host)
        bench_die("out of memory for a %llu-byte staging buffer", lb);
    for (int l = 0; l < layers; l++)
        kvt.buf[l] = kv_alloc(kvt.mem, dev, lb);
    nixl_desc_t d[BENCH_KV_LAYERS];
    nixl_dlist_t dl = kv_dlist(d, kvt.buf, layers, lb, kvt.mem, dev);
    bench_check(nixl_mem_register(agent, &dl, NULL), "nixl_mem_register(KV layers)");
    for (int l = 0; l < layers; l++)
        kv_reply(agent, m->sender, "kvbuf %d %" PRIu64, l, (uint64_t)(uintptr_t)kvt.buf[l]);
    kv_reply(agent, m->sender, "kvready %d", layers);
}

static void kv_on_check(nixl_agent_t *agent, const bench_msg_t *m)
{
    unsigned long long seed, lseed, rseed, tokens, tb;
    if (sscanf(m->text, "kvchk %llu %llu %llu %llu %llu", &seed, &lseed, &rseed, &tokens, &tb) != 5 || !kvt.layers ||
        tb == 0 || tokens == 0 || tokens > UINT32_MAX || tb > kvt.layer_bytes / tokens) {
        kv_reply(agent, m->sender, "err malformed kvchk request");
        return;
    }
    uint32_t *ls = malloc(tokens * sizeof(*ls)), *rs = malloc(tokens * sizeof(*rs));
    if (!ls || !rs)
        bench_die("out of memory for %llu slots", tokens);
    bench_layout_slots(BENCH_LAYOUT_SHUFFLED, lseed, ls, tokens);
    bench_layout_slots(BENCH_LAYOUT_SHUFFLED, rseed, rs, tokens);
    for (int l = 0; l < kvt.layers; l++) {
        const uint8_t *p = kvt.buf[l];
        if (kvt.mem == BENCH_MEM_VRAM) {
            bench_vram_get(kvt.dev, kvt.host, kvt.buf[l], kvt.layer_bytes);
            p = kvt.host;
        }
        for (uint64_t t = 0; t < tokens; t++) {
            uint64_t at = (uint64_t)rs[t] * tb;
            int64_t off = bench_pattern_check(p + at, seed, (uint64_t)l * kvt.layer_bytes + (uint64_t)ls[t] * tb, tb);
            if (off >= 0) {
                kv_reply(agent, m->sender, "kvbad %llu %d %" PRIu64, seed, l, at + (uint64_t)off);
                free(ls);
                free(rs);
                return;
            }
        }
    }
    free(ls);
    free(rs);
    kv_reply(agent, m->sender, "kvok %llu", seed);
}

int bench_kv_target_handle(nixl_agent_t *agent, const bench_msg_t *m)
{
    if (!strncmp(m->text, "kvalloc ", 8))
        kv_on_alloc(agent, m);
    else if (!strncmp(m->text, "kvchk ", 6))
        kv_on_check(agent, m);
    else
        return 0;
    return 1;
}

/* ---- initiator side ---- */

/* The copy floor of host memory: the request's bytes copied by this
 * process, one memcpy per layer into memory written once before (so page
 * faults are not timed); the best of three passes, in ms.  A shuffled
 * request cannot beat one straight copy of its bytes. */
static double kv_memcpy_floor_ms(uint8_t *const *layer, int layers, uint64_t layer_bytes)
{
    static void *(*volatile copy)(void *, const void *, size_t) = memcpy;
    uint8_t *dst = malloc((size_t)layer_bytes * (size_t)layers);
    if (!dst)
        return 0;
    memset(dst, 0, (size_t)layer_bytes * (size_t)layers);
    double best = 0;
    for (int pass = 0; pass < 3; pass++) {
        uint64_t t0 = bench_now_ns();
        for (int l = 0; l < layers; l++)
            copy(dst + (uint64_t)l * layer_bytes, layer[l], layer_bytes);
        __asm__ volatile("" ::: "memory");
        double ms = (double)(bench_now_ns() - t0) / 1e6;
        best = pass == 0 || ms < best ? ms : best;
    }
    free(dst);
    return best;
}

static void kv_wait(nixl_agent_t *agent, nixl_xfer_t *x, nixl_status_t st, uint32_t timeout_ms)
{
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (st == NIXL_IN_PROG) {
        st = nixl_xfer_status(x);
        if (st == NIXL_IN_PROG && bench_now_ns() > deadline)
            bench_die("the KV request did not complete within %u ms", timeout_ms);
    }
    (void)agent;
    bench_check(st, "nixl_xfer_status(KV request)");
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- the whole request (--kv-e2e) ----
 *
 * What an engine pays per request, not only the copy: SGLang makes each
 * request from two fresh lists (nixl_xfer_create), vLLM from lists of
 * every slot prepared once and the request's slots as index arrays
 * (nixl_xfer_make).  Per request: new shuffled slots on both sides, the
 * engine's own work (not timed as the library's), then make, post, wait,
 * release, each timed.  The last request of each shape carries a kvchk
 * notification and the target checks every slot byte for byte. */
typedef struct {
    double make_ms, post_ms, wait_ms, release_ms, lib_ms;
} kv_phases_t;

static double kv_median_ms(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return (double)v[n / 2] / 1e6;
}

typedef struct {
    nixl_agent_t *agent;
    const char *peer;
    const bench_opts_t *o;
    int layers;
    uint64_t tokens, tb, seed;
    uint8_t *const *lbuf;
    const uint64_t *lbases; /* lbuf as addresses, for the indexed request */
    const uint64_t *rbuf;
    nixl_mem_t lmem, rmem;
    uint32_t ldev, rdev;
} kv_e2e_ctx_t;

/* One shape's requests: 0 = SGLang's create from two lists, 1 = vLLM's make
 * from lists prepared once, 2 = ours, the indexed request (layer bases and
 * the two slot arrays, no lists). */
enum { KV_SGLANG, KV_VLLM, KV_INDEXED, KV_SHAPES };
static const char *const kv_shape_name[KV_SHAPES] = {"sglang", "vllm", "indexed"};

static void kv_e2e_shape(const kv_e2e_ctx_t *c, int shape, uint64_t reqs, kv_phases_t *out)
{
    const int vllm = shape == KV_VLLM;
    const size_t T = c->tokens, n = (size_t)c->layers * T;
    nixl_desc_t *ld = malloc(n * sizeof(*ld)), *rd = malloc(n * sizeof(*rd));
    uint32_t *ls = malloc(T * sizeof(*ls)), *rs = malloc(T * sizeof(*rs));
    uint32_t *li = malloc(n * sizeof(*li)), *ri = malloc(n * sizeof(*ri));
    uint64_t *ph[4];
    for (int k = 0; k < 4; k++)
        ph[k] = malloc(reqs * sizeof(uint64_t));
    if (!ld || !rd || !ls || !rs || !li || !ri || !ph[0] || !ph[1] || !ph[2] || !ph[3])
        bench_die("out of memory for the whole-request rows");
    nixl_prep_t *lp = NULL, *rp = NULL;
    if (vllm) { /* every slot in order, prepared once */
        for (int l = 0; l < c->layers; l++)
            for (uint64_t t = 0; t < T; t++) {
                ld[l * T + t] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)c->lbuf[l] + t * c->tb, .len = c->tb,
                                              .dev_id = c->ldev};
                rd[l * T + t] = (nixl_desc_t){.addr = c->rbuf[l] + t * c->tb, .len = c->tb, .dev_id = c->rdev};
            }
        nixl_dlist_t ll = {c->lmem, n, ld}, rl = {c->rmem, n, rd};
        bench_check(nixl_prep_create(c->agent, NULL, &ll, NULL, &lp), "nixl_prep_create(all slots, local)");
        bench_check(nixl_prep_create(c->agent, c->peer, &rl, NULL, &rp), "nixl_prep_create(all slots, remote)");
    }
    for (uint64_t r = 0; r < reqs; r++) {
        uint64_t lseed = c->seed ^ (0x1000 + 8 * r + 2 * (uint64_t)shape), rseed = lseed ^ 1;
        bench_layout_slots(BENCH_LAYOUT_SHUFFLED, lseed, ls, T);
        bench_layout_slots(BENCH_LAYOUT_SHUFFLED, rseed, rs, T);
        for (int l = 0; l < c->layers && shape != KV_INDEXED; l++)
            for (uint64_t t = 0; t < T; t++) {
                size_t i = (size_t)l * T + t;
                if (vllm) {
                    li[i] = (uint32_t)(l * T + ls[t]);
                    ri[i] = (uint32_t)(l * T + rs[t]);
                } else {
                    ld[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)c->lbuf[l] + (uint64_t)ls[t] * c->tb,
                                          .len = c->tb, .dev_id = c->ldev};
                    rd[i] = (nixl_desc_t){.addr = c->rbuf[l] + (uint64_t)rs[t] * c->tb, .len = c->tb,
                                          .dev_id = c->rdev};
                }
            }
        char text[BENCH_MSG_MAX];
        int check = r + 1 == reqs;
        snprintf(text, sizeof(text), "kvchk %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, c->seed,
                 lseed, rseed, (uint64_t)T, c->tb);
        nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = text, .notif_len = strlen(text)};
        nixl_xfer_t *x;
        uint64_t t0 = bench_now_ns();
        if (vllm) {
            bench_check(nixl_xfer_make(c->agent, NIXL_OP_WRITE, lp, li, rp, ri, n, check ? &opt : NULL, &x),
                        "nixl_xfer_make(e2e)");
        } else if (shape == KV_INDEXED) {
            nixl_indexed_t il = {c->lmem, (size_t)c->layers, c->lbases, c->tb, ls};
            nixl_indexed_t ir = {c->rmem, (size_t)c->layers, c->rbuf, c->tb, rs};
            bench_check(nixl_xfer_create_indexed(c->agent, NIXL_OP_WRITE, &il, &ir, T, c->tb, c->peer,
                                                 check ? &opt : NULL, &x),
                        "nixl_xfer_create_indexed(e2e)");
        } else {
            nixl_dlist_t ll = {c->lmem, n, ld}, rl = {c->rmem, n, rd};
            bench_check(nixl_xfer_create(c->agent, NIXL_OP_WRITE, &ll, &rl, c->peer, check ? &opt : NULL, &x),
                        "nixl_xfer_create(e2e)");
        }
        uint64_t t1 = bench_now_ns();
        nixl_status_t st = nixl_xfer_post(x);
        uint64_t t2 = bench_now_ns();
        kv_wait(c->agent, x, st, c->o->timeout_ms);
        uint64_t t3 = bench_now_ns();
        nixl_xfer_release(x);
        uint64_t t4 = bench_now_ns();
        ph[0][r] = t1 - t0;
        ph[1][r] = t2 - t1;
        ph[2][r] = t3 - t2;
        ph[3][r] = t4 - t3;
        if (check) {
            static const char *const answers[] = {"kvok", "kvbad", "err"};
            bench_msg_t m;
            unsigned long long s2;
            bench_inbox_wait(c->agent, answers, 3, c->o->timeout_ms, &m);
            if (sscanf(m.text, "kvok %llu", &s2) != 1 || s2 != c->seed)
                bench_die("KV whole-request verification (%s) failed: target says \"%s\"", kv_shape_name[shape],
                          m.text);
        }
    }
    out->make_ms = kv_median_ms(ph[0], reqs);
    out->post_ms = kv_median_ms(ph[1], reqs);
    out->wait_ms = kv_median_ms(ph[2], reqs);
    out->release_ms = kv_median_ms(ph[3], reqs);
    out->lib_ms = out->make_ms + out->post_ms + out->wait_ms + out->release_ms;
    nixl_prep_release(lp);
    nixl_prep_release(rp);
    for (int k = 0; k < 4; k++)
        free(ph[k]);
    free(ld);
    free(rd);
    free(ls);
    free(rs);
    free(li);
    free(ri);
}

int bench_kv_run(const bench_opts_t *o, const char *ip, uint16_t port)
{
    const int L = BENCH_KV_LAYERS;
    const uint64_t T = BENCH_KV_TOKENS, TB = BENCH_KV_TOKEN_BYTES, LB = T * TB;
    const size_t n = (size_t)L * T;
    if (o->op != NIXL_OP_WRITE)
        bench_die("--kv-replay moves the KV from prefill to decode: --op write only");
    char name[NIXL_NAME_MAX + 1], peer[NIXL_NAME_MAX + 1], name2[NIXL_NAME_MAX + 1];
    snprintf(name, sizeof(name), "nixlbench-kv-%ld", (long)getpid());
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_THREAD_MODE,
                               .name = name,
                               .thread_mode = NIXL_THREAD_NONE};
    nixl_agent_t *agent;
    bench_check(nixl_agent_create(&cfg, &agent), "nixl_agent_create(initiator)");
    nixl_backend_t *be;
    bench_check(nixl_backend_create(agent, o->backend, o->params, o->num_params, &be), "nixl_backend_create");
    bench_check(nixl_md_fetch_remote(agent, ip, port, peer), "nixl_md_fetch_remote");
    bench_check(nixl_md_send_local(agent, ip, port), "nixl_md_send_local");

    char text[BENCH_MSG_MAX];
    snprintf(text, sizeof(text), "kvalloc %d %" PRIu64 " %s %d", L, LB, bench_mem_name(o->tgt_mem), o->tgt_dev);
    bench_notif_send(agent, peer, text);
    uint64_t rbuf[BENCH_KV_LAYERS] = {0};
    for (int got = 0;;) {
        static const char *const answers[] = {"kvbuf", "kvready", "err"};
        bench_msg_t m;
        bench_inbox_wait(agent, answers, 3, o->timeout_ms, &m);
        int l;
        unsigned long long a;
        if (sscanf(m.text, "kvbuf %d %llu", &l, &a) == 2 && l >= 0 && l < L) {
            rbuf[l] = a;
            got++;
        } else if (sscanf(m.text, "kvready %d", &l) == 1 && l == L && got == L) {
            break;
        } else {
            bench_die("target: \"%s\"", m.text);
        }
    }
    bench_check(nixl_md_fetch_remote(agent, ip, port, name2), "nixl_md_fetch_remote(after kvalloc)");

    uint8_t *lbuf[BENCH_KV_LAYERS];
    for (int l = 0; l < L; l++)
        lbuf[l] = kv_alloc(o->init_mem, o->init_dev, LB);
    uint8_t *host = malloc(LB);
    nixl_desc_t *ld = malloc(n * sizeof(*ld)), *rd = malloc(n * sizeof(*rd));
    uint32_t *ls = malloc(T * sizeof(*ls)), *rs = malloc(T * sizeof(*rs)), *idx = malloc(n * sizeof(*idx));
    if (!host || !ld || !rd || !ls || !rs || !idx)
        bench_die("out of memory for %zu KV descriptors", n);
    nixl_desc_t regd[BENCH_KV_LAYERS];
    nixl_dlist_t regl = kv_dlist(regd, lbuf, L, LB, o->init_mem, o->init_dev);
    bench_check(nixl_mem_register(agent, &regl, NULL), "nixl_mem_register(KV layers)");

    uint64_t seed = bench_row_seed(o->seed, 0), lseed = seed ^ 0x11, rseed = seed ^ 0x22;
    bench_layout_slots(BENCH_LAYOUT_SHUFFLED, lseed, ls, T);
    bench_layout_slots(BENCH_LAYOUT_SHUFFLED, rseed, rs, T);
    for (int l = 0; l < L; l++) {
        for (uint64_t t = 0; t < T; t++) {
            size_t i = (size_t)l * T + t;
            ld[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)lbuf[l] + (uint64_t)ls[t] * TB, .len = TB,
                                  .dev_id = o->init_mem == BENCH_MEM_VRAM ? (uint32_t)o->init_dev : 0};
            rd[i] = (nixl_desc_t){.addr = rbuf[l] + (uint64_t)rs[t] * TB, .len = TB,
                                  .dev_id = o->tgt_mem == BENCH_MEM_VRAM ? (uint32_t)o->tgt_dev : 0};
            idx[i] = (uint32_t)i;
        }
    }
    nixl_dlist_t ll = {.mem_type = o->init_mem == BENCH_MEM_VRAM ? NIXL_MEM_VRAM : NIXL_MEM_DRAM, .count = n,
                       .descs = ld};
    nixl_dlist_t rl = {.mem_type = o->tgt_mem == BENCH_MEM_VRAM ? NIXL_MEM_VRAM : NIXL_MEM_DRAM, .count = n,
                       .descs = rd};
    nixl_prep_t *lp, *rp;
    nixl_xfer_t *x, *chk;
    uint64_t t0 = bench_now_ns();
    bench_check(nixl_prep_create(agent, NULL, &ll, NULL, &lp), "nixl_prep_create(local KV)");
    bench_check(nixl_prep_create(agent, peer, &rl, NULL, &rp), "nixl_prep_create(remote KV)");
    uint64_t t1 = bench_now_ns();
    bench_check(nixl_xfer_make(agent, NIXL_OP_WRITE, lp, idx, rp, idx, n, NULL, &x), "nixl_xfer_make(KV)");
    uint64_t t2 = bench_now_ns();

    /* The first WRITE is checked on the target, byte for byte. */
    for (int l = 0; l < L; l++) {
        uint8_t *p = o->init_mem == BENCH_MEM_VRAM ? host : lbuf[l];
        bench_pattern_fill(p, seed, (uint64_t)l * LB, LB);
        if (o->init_mem == BENCH_MEM_VRAM)
            bench_vram_put(o->init_dev, lbuf[l], host, LB);
    }
    snprintf(text, sizeof(text), "kvchk %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, seed, lseed, rseed,
             T, TB);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = text, .notif_len = strlen(text)};
    bench_check(nixl_xfer_make(agent, NIXL_OP_WRITE, lp, idx, rp, idx, n, &opt, &chk), "nixl_xfer_make(KV check)");
    kv_wait(agent, chk, nixl_xfer_post(chk), o->timeout_ms);
    nixl_xfer_release(chk);
    {
        static const char *const answers[] = {"kvok", "kvbad", "err"};
        bench_msg_t m;
        unsigned long long s2;
        bench_inbox_wait(agent, answers, 3, o->timeout_ms, &m);
        if (sscanf(m.text, "kvok %llu", &s2) != 1 || s2 != seed)
            bench_die("KV verification failed: target says \"%s\"", m.text);
    }

    uint64_t iters = o->iters ? o->iters : 20;
    for (uint64_t w = 0; w < o->warmup; w++)
        kv_wait(agent, x, nixl_xfer_post(x), o->timeout_ms);
    uint64_t *ns = malloc(iters * sizeof(*ns)), post_ns = 0, total = 0;
    if (!ns)
        bench_die("out of memory");
    for (uint64_t it = 0; it < iters; it++) {
        uint64_t a = bench_now_ns();
        nixl_status_t st = nixl_xfer_post(x);
        post_ns += bench_now_ns() - a;
        if (st < 0)
            bench_check(st, "nixl_xfer_post(KV)");
        kv_wait(agent, x, st, o->timeout_ms);
        ns[it] = bench_now_ns() - a;
        total += ns[it];
    }
    nixl_xfer_info_t info;
    bench_check(nixl_xfer_info(x, &info), "nixl_xfer_info");
    qsort(ns, iters, sizeof(*ns), cmp_u64);
    double mean_ms = (double)total / (double)iters / 1e6, best_ms = (double)ns[0] / 1e6,
           median_ms = (double)ns[iters / 2] / 1e6;
    kv_phases_t e2e[KV_SHAPES] = {{0}};
    if (o->kv_e2e) {
        uint64_t lbases[BENCH_KV_LAYERS];
        for (int l = 0; l < L; l++)
            lbases[l] = (uint64_t)(uintptr_t)lbuf[l];
        kv_e2e_ctx_t c = {agent, peer, o, L, T, TB, seed, lbuf, lbases, rbuf, ll.mem_type, rl.mem_type,
                          o->init_mem == BENCH_MEM_VRAM ? (uint32_t)o->init_dev : 0,
                          o->tgt_mem == BENCH_MEM_VRAM ? (uint32_t)o->tgt_dev : 0};
        for (int k = 0; k < KV_SHAPES; k++)
            kv_e2e_shape(&c, k, iters, &e2e[k]);
    }
    uint64_t bytes = (uint64_t)n * TB;
    double floor_ms = 0;
    const char *floor_name = "memcpy";
    char floor_buf[160];
    if (o->init_mem == BENCH_MEM_VRAM && o->tgt_mem == BENCH_MEM_VRAM) {
        floor_ms = (double)bytes / bench_vram_limit(o->init_dev, o->tgt_dev, bytes) * 1e3;
        snprintf(floor_buf, sizeof(floor_buf), "%s in one call", bench_vram_limit_name(o->init_dev, o->tgt_dev));
        floor_name = floor_buf;
    } else if (o->init_mem == BENCH_MEM_DRAM && o->tgt_mem == BENCH_MEM_DRAM) {
        floor_ms = kv_memcpy_floor_ms(lbuf, L, LB);
        floor_name = "memcpy (one call per layer, into fresh memory of this process)";
    } else {
        floor_name = "not measured between DRAM and VRAM (0)";
    }
    if (!o->quiet) {
        printf("# nixlbench %s kv-replay: backend %s, DeepSeek-V2-Lite %d layers x %" PRIu64 " tokens x %" PRIu64
               " B, page size 1, slots shuffled on both sides\n",
               nixl_version(), o->backend, L, T, TB);
        printf("# initiator %s GPU %d -> target %s GPU %d (another process), %zu descriptors, %" PRIu64 " bytes\n",
               bench_mem_name(o->init_mem), o->init_dev, bench_mem_name(o->tgt_mem), o->tgt_dev, n, bytes);
        printf("%10s %9s %9s %8s %9s %9s %9s %9s  %s\n", "ms/req", "best ms", "median", "GB/s", "descs", "post us",
               "make ms", "floor ms", "path");
        printf("%10.3f %9.3f %9.3f %8.1f %9" PRIu64 " %9.1f %9.1f %9.3f  %s\n", mean_ms, best_ms, median_ms,
               (double)bytes / (mean_ms * 1e6), info.descs, (double)post_ns / 1e3 / (double)iters,
               (double)(t2 - t0) / 1e6, floor_ms, info.path);
        printf("# floor: %s of the same %" PRIu64 " bytes; make ms: prep local+remote %.1f ms + make "
               "%.1f ms; %" PRIu64 " timed requests\n",
               floor_name, bytes, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6, iters);
        if (o->kv_e2e) {
            printf("# whole requests, fresh slots each, median of %" PRIu64 ", the last of each verified:\n", iters);
            printf("%-8s %9s %9s %9s %9s %9s %9s\n", "engine", "make ms", "post ms", "wait ms", "rel ms", "lib ms",
                   "floor ms");
            for (int k = 0; k < KV_SHAPES; k++)
                printf("%-8s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", kv_shape_name[k], e2e[k].make_ms,
                       e2e[k].post_ms, e2e[k].wait_ms, e2e[k].release_ms, e2e[k].lib_ms, floor_ms);
            printf("# make: sglang nixl_xfer_create of two %zu-descriptor lists, vllm nixl_xfer_make from lists of "
                   "every slot prepared once, indexed nixl_xfer_create_indexed of %d bases and two %" PRIu64
                   "-slot arrays\n",
                   n, L, T);
        }
        fflush(stdout);
    }
    if (o->json_path) {
        FILE *f = fopen(o->json_path, "w");
        if (!f)
            bench_die("cannot open %s", o->json_path);
        fprintf(f,
                "{\"mode\":\"kv_replay\",\"backend\":\"%s\",\"layers\":%d,\"tokens\":%" PRIu64
                ",\"token_bytes\":%" PRIu64 ",\"descs_in\":%zu,\"descs_after_merge\":%" PRIu64 ",\"bytes\":%" PRIu64
                ",\"iters\":%" PRIu64 ",\"ms_per_request\":%.6g,\"best_ms\":%.6g,\"median_ms\":%.6g,\"post_us\":%.6g"
                ",\"prep_ms\":%.6g,\"make_ms\":%.6g,\"floor_ms\":%.6g,\"path\":\"%s\",\"initiator_mem\":\"%s\""
                ",\"initiator_dev\":%d,\"target_mem\":\"%s\",\"target_dev\":%d",
                o->backend, L, T, TB, n, info.descs, bytes, iters, mean_ms, best_ms, median_ms,
                (double)post_ns / 1e3 / (double)iters, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6, floor_ms,
                info.path, bench_mem_name(o->init_mem), o->init_dev, bench_mem_name(o->tgt_mem), o->tgt_dev);
        for (int k = 0; o->kv_e2e && k < KV_SHAPES; k++)
            fprintf(f,
                    ",\"%s_make_ms\":%.6g,\"%s_post_ms\":%.6g,\"%s_wait_ms\":%.6g,\"%s_release_ms\":%.6g"
                    ",\"%s_lib_ms\":%.6g",
                    kv_shape_name[k], e2e[k].make_ms, kv_shape_name[k], e2e[k].post_ms, kv_shape_name[k],
                    e2e[k].wait_ms, kv_shape_name[k], e2e[k].release_ms, kv_shape_name[k], e2e[k].lib_ms);
        fprintf(f, "}\n");
        fclose(f);
    }

    nixl_xfer_release(x);
    nixl_prep_release(rp);
    nixl_prep_release(lp);
    bench_notif_send(agent, peer, "quit");
    int target_rc = bench_child_reap(agent, 10000);
    bench_check(nixl_mem_deregister(agent, &regl, NULL), "nixl_mem_deregister(KV layers)");
    nixl_agent_destroy(agent);
    for (int l = 0; l < L; l++)
        kv_free(o->init_mem, o->init_dev, lbuf[l], LB);
    free(host);
    free(ld);
    free(rd);
    free(ls);
    free(rs);
    free(idx);
    free(ns);
    return target_rc ? 1 : 0;
}
