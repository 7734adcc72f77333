/*
 * bench_initiator.c - the active side of nixlbench: one row per (block,
 * batch), each measured the way a serving engine would use the library.
 *
 * Per row: descriptors are laid out (contiguous or shuffled on the target),
 * both lists are prepared once and a request is made from index arrays (the
 * two-step API, the fast path for paged KV); the first transfer is checked
 * byte for byte, then the same request is re-posted iters times on one
 * thread.  The same pieces copied by memcpy give the row's raw limit; with
 * GPU memory on either side the limit is the driver's copy of the same
 * number of bytes between the same GPUs (bench_vram.c), and patterns are
 * filled and checked through a host staging buffer.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#ifdef BENCH_HAVE_OFI
#include "bench_ofi.h"
#endif
#include "bench_ucx.h"

typedef struct row {
    uint64_t block, batch, bytes, iters;
    double seconds, gbps, limit_gbps, ratio, per_desc_us;
    double ratio_min, ratio_max; /* of the interleaved pairs; ratio is their median */
    uint64_t pairs;
    double prep_local_us, prep_remote_us, make_us, make_desc_per_s, make_first_desc_per_s, post_us;
    nixl_xfer_info_t info;
} row_t;

typedef struct initiator {
    const bench_opts_t *o;
    nixl_agent_t *agent;
    char peer[NIXL_NAME_MAX + 1];
    uint8_t *buf; /* registered, max_bytes */
    uint8_t *host; /* buf itself (DRAM) or its host staging copy (VRAM) */
    uint64_t len;
    uint64_t remote_addr, remote_len;
    uint8_t *lim_src, *lim_dst; /* unregistered, for the memcpy limit */
    nixl_desc_t *ldesc, *rdesc;
    uint32_t *idx, *slot;
    FILE *json;
} initiator_t;

static nixl_dlist_t dlist_of(const nixl_desc_t *d, size_t n, bench_mem_t mem)
{
    return (nixl_dlist_t){.mem_type = mem == BENCH_MEM_VRAM ? NIXL_MEM_VRAM : NIXL_MEM_DRAM, .count = n, .descs = d};
}

const char *bench_mem_name(bench_mem_t mem)
{
    return mem == BENCH_MEM_VRAM ? "vram" : "dram";
}

static void local_sync_to_device(const initiator_t *in, uint64_t bytes)
{
    if (in->o->init_mem == BENCH_MEM_VRAM)
        bench_vram_put(in->o->init_dev, in->buf, in->host, bytes);
}

static uint64_t default_iters(const bench_opts_t *o, uint64_t bytes)
{
    const uint64_t min_moved = 256ull << 20, cap = 100000;
    if (o->iters)
        return o->iters;
    /* Enough for 256 MiB, at least 20: a 1 MiB row of 20 posts cut into 5
     * parts timed 4 posts per part, and its part ratios spread 2x (ucx over
     * tcp on the CI box: 0.39-0.77 with 20, 0.61-0.74 with 400). */
    uint64_t n = (min_moved + bytes - 1) / bytes;
    return n < 20 ? 20 : (n > cap ? cap : n);
}

/* Polls a posted request to completion; a request that never completes is
 * an error, not a hang. */
static void xfer_wait(const initiator_t *in, nixl_xfer_t *x, nixl_status_t st, const char *what)
{
    uint64_t deadline = 0;
    unsigned spins = 0;
    while (st == NIXL_IN_PROG) {
        st = nixl_xfer_status(x);
        if (st != NIXL_IN_PROG)
            break;
        /* Give the CPU to the backend's copy threads between polls: on a
         * small machine a tight spin slows the copy it waits for. */
        sched_yield();
        if ((++spins & 0xfff) == 0) {
            uint64_t now = bench_now_ns();
            if (!deadline)
                deadline = now + (uint64_t)in->o->timeout_ms * 1000000ull;
            else if (now > deadline)
                bench_die("%s did not complete within %u ms", what, in->o->timeout_ms);
        }
    }
    if (st != NIXL_OK) {
        char call[96];
        snprintf(call, sizeof(call), "nixl_xfer_status(%s)", what);
        bench_check(st, call);
    }
}

static void verify_write(initiator_t *in, const nixl_prep_t *lp, const nixl_prep_t *rp, const row_t *r,
                         uint64_t seed)
{
    char text[BENCH_MSG_MAX];
    snprintf(text, sizeof(text), "chk %" PRIu64 " %" PRIu64 " %" PRIu64 " %s", seed, r->block, r->batch,
             bench_layout_name(in->o->layout));
    bench_pattern_fill(in->host, seed, 0, r->bytes);
    local_sync_to_device(in, r->bytes);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = text, .notif_len = strlen(text)};
    nixl_xfer_t *x;
    bench_check(nixl_xfer_make(in->agent, NIXL_OP_WRITE, lp, in->idx, rp, in->idx, r->batch, &opt, &x),
                "nixl_xfer_make(verification write)");
    xfer_wait(in, x, nixl_xfer_post(x), "verification write");
    nixl_xfer_release(x);

    static const char *const answers[] = {"ok", "bad"};
    bench_msg_t m;
    unsigned long long got_seed, off;
    bench_inbox_wait(in->agent, answers, 2, in->o->timeout_ms, &m);
    if (sscanf(m.text, "bad %llu %llu", &got_seed, &off) == 2)
        bench_die("verification failed: block %" PRIu64 " batch %" PRIu64 " write: target byte at offset %llu"
                  " differs from the pattern (seed %" PRIu64 ")",
                  r->block, r->batch, off, seed);
    if (sscanf(m.text, "ok %llu", &got_seed) != 1 || got_seed != seed)
        bench_die("verification answer \"%s\" does not match seed %" PRIu64, m.text, seed);
}

static void verify_read(initiator_t *in, nixl_xfer_t *x, const row_t *r, uint64_t seed)
{
    char text[BENCH_MSG_MAX];
    snprintf(text, sizeof(text), "fill %" PRIu64 " %" PRIu64 " %" PRIu64 " %s", seed, r->block, r->batch,
             bench_layout_name(in->o->layout));
    /* stale bytes must not pass */
    if (in->o->init_mem == BENCH_MEM_VRAM)
        bench_vram_set(in->o->init_dev, in->buf, 0xa5, r->bytes);
    else
        memset(in->buf, 0xa5, r->bytes);
    bench_notif_send(in->agent, in->peer, text);
    static const char *const answers[] = {"filled"};
    bench_msg_t m;
    unsigned long long got_seed;
    bench_inbox_wait(in->agent, answers, 1, in->o->timeout_ms, &m);
    if (sscanf(m.text, "filled %llu", &got_seed) != 1 || got_seed != seed)
        bench_die("fill answer \"%s\" does not match seed %" PRIu64, m.text, seed);
    xfer_wait(in, x, nixl_xfer_post(x), "verification read");
    if (in->o->init_mem == BENCH_MEM_VRAM)
        bench_vram_get(in->o->init_dev, in->host, in->buf, r->bytes);
    int64_t bad = bench_pattern_check(in->host, seed, 0, r->bytes);
    if (bad >= 0)
        bench_die("verification failed: block %" PRIu64 " batch %" PRIu64 " read: local byte at offset %" PRId64
                  " differs from the pattern (seed %" PRIu64 ")",
                  r->block, r->batch, bad, seed);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return v[n / 2];
}

/* Prepares both lists and makes the request MAKE_REPS times; the first
 * (cold: the library's allocations are fresh) is kept for the row and
 * reported apart, the medians are the steady cost. */
static void make_request(initiator_t *in, row_t *r, const nixl_dlist_t *ll, const nixl_dlist_t *rl,
                         nixl_prep_t **lp_out, nixl_prep_t **rp_out, nixl_xfer_t **x_out)
{
    enum { MAKE_REPS = 7 };
    uint64_t pl[MAKE_REPS], pr[MAKE_REPS], mk[MAKE_REPS], tot[MAKE_REPS];
    for (int rep = 0; rep < MAKE_REPS; rep++) {
        nixl_prep_t *lp, *rp;
        nixl_xfer_t *x;
        uint64_t t0 = bench_now_ns();
        bench_check(nixl_prep_create(in->agent, NULL, ll, NULL, &lp), "nixl_prep_create(local)");
        uint64_t t1 = bench_now_ns();
        bench_check(nixl_prep_create(in->agent, in->peer, rl, NULL, &rp), "nixl_prep_create(remote)");
        uint64_t t2 = bench_now_ns();
        bench_check(nixl_xfer_make(in->agent, in->o->op, lp, in->idx, rp, in->idx, r->batch, NULL, &x),
                    "nixl_xfer_make");
        uint64_t t3 = bench_now_ns();
        pl[rep] = t1 - t0;
        pr[rep] = t2 - t1;
        mk[rep] = t3 - t2;
        tot[rep] = t3 - t0 ? t3 - t0 : 1;
        if (rep == 0) {
            r->make_first_desc_per_s = (double)r->batch * 1e9 / (double)tot[0];
            *lp_out = lp;
            *rp_out = rp;
            *x_out = x;
        } else {
            nixl_xfer_release(x);
            nixl_prep_release(rp);
            nixl_prep_release(lp);
        }
    }
    r->prep_local_us = (double)median(pl, MAKE_REPS) / 1e3;
    r->prep_remote_us = (double)median(pr, MAKE_REPS) / 1e3;
    r->make_us = (double)median(mk, MAKE_REPS) / 1e3;
    r->make_desc_per_s = (double)r->batch * 1e9 / (double)median(tot, MAKE_REPS);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One measurement of the row's raw limit, in bytes per second: the same
 * pieces moved with nothing of libnixl in between (see the top of this
 * file for which copy stands for which memory). */
static double row_limit(initiator_t *in, const row_t *r, uint64_t seed)
{
    const bench_opts_t *o = in->o;
    if (o->init_mem != o->tgt_mem) {
        /* DRAM <-> VRAM: the driver's host copy of the same bytes. */
        int dev = o->init_mem == BENCH_MEM_VRAM ? o->init_dev : o->tgt_dev;
        int to_device = (o->op == NIXL_OP_WRITE) == (o->tgt_mem == BENCH_MEM_VRAM);
        return bench_host_limit(dev, to_device, r->bytes, o->alloc);
    }
    if (o->init_mem == BENCH_MEM_VRAM) {
        int from = o->op == NIXL_OP_WRITE ? o->init_dev : o->tgt_dev, to = o->op == NIXL_OP_WRITE ? o->tgt_dev : o->init_dev;
        return bench_vram_limit(from, to, r->bytes);
    }
    if (bench_ucx_wanted(o)) /* ucx: UCX's own ucx_perftest, same size, outstanding count and UCX_TLS */
        return bench_ucx_limit(o, r->block, r->batch, o->op);
#ifdef BENCH_HAVE_OFI
    if (bench_ofi_wanted(o)) /* libfabric: the raw provider loop of the same pieces (bench_ofi.c) */
        return bench_ofi_limit(o, r->block, r->batch, in->slot, o->op);
#endif
    bench_pattern_fill(in->lim_src, seed, 0, r->bytes);
    return bench_memcpy_limit(in->lim_dst, in->lim_src, r->block, r->batch, in->slot, o->op);
}

static void run_row(initiator_t *in, row_t *r, uint64_t seed)
{
    const bench_opts_t *o = in->o;
    uint64_t t0, t1;

    bench_layout_slots(o->layout, seed, in->slot, r->batch);
    for (uint64_t i = 0; i < r->batch; i++) {
        in->ldesc[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)in->buf + i * r->block, .len = r->block,
                                     .dev_id = o->init_mem == BENCH_MEM_VRAM ? (uint32_t)o->init_dev : 0};
        in->rdesc[i] = (nixl_desc_t){.addr = in->remote_addr + (uint64_t)in->slot[i] * r->block, .len = r->block,
                                     .dev_id = o->tgt_mem == BENCH_MEM_VRAM ? (uint32_t)o->tgt_dev : 0};
    }
    nixl_dlist_t ll = dlist_of(in->ldesc, r->batch, o->init_mem), rl = dlist_of(in->rdesc, r->batch, o->tgt_mem);
    nixl_prep_t *lp = NULL, *rp = NULL;
    nixl_xfer_t *x = NULL;

    make_request(in, r, &ll, &rl, &lp, &rp, &x);

    if (o->op == NIXL_OP_WRITE)
        verify_write(in, lp, rp, r, seed);
    else
        verify_read(in, x, r, seed);

    for (uint64_t w = 0; w < o->warmup; w++)
        xfer_wait(in, x, nixl_xfer_post(x), "warmup transfer");

    /* The rate and its limit are measured in turns, A B A B ...: the
     * machine's noise (another process, a busy core) then lands on both
     * sides of a pair instead of on one of them.  The row's ratio is the
     * median of the pair ratios, reported with their min and max. */
    /* Default: 5 pairs for host memory, where the box is shared and noisy.
     * With VRAM on a side, 1: on the GPU machine (2026-12-01, H200) the
     * turns themselves cost the 256 MiB row 3 to 4 % (ratio 0.896-0.903
     * with 5 pairs against 0.929 with 1 and 0.924-0.938 before them) while
     * its runs differ by under 2 % without them. */
    uint64_t want = o->pairs ? o->pairs : (o->init_mem == BENCH_MEM_VRAM || o->tgt_mem == BENCH_MEM_VRAM) ? 1 : 5;
    uint64_t pairs = want < r->iters ? want : r->iters;
    double pr[1000];
    uint64_t post_ns = 0, lib_ns = 0, done = 0;
    double lim_sum = 0;
    for (uint64_t k = 0; k < pairs; k++) {
        uint64_t n = r->iters / pairs + (k < r->iters % pairs);
        /* The limit just ran: the part starts with --warmup untimed posts
         * again (on the GPU machine the first posts after the raw copy
         * pay for the switch back: the interleaving's cost, not the
         * library's). */
        for (uint64_t w = 0; k > 0 && w < o->warmup; w++)
            xfer_wait(in, x, nixl_xfer_post(x), "warmup transfer");
        t0 = bench_now_ns();
        for (uint64_t it = 0; it < n; it++) {
            uint64_t a = bench_now_ns();
            nixl_status_t st = nixl_xfer_post(x);
            post_ns += bench_now_ns() - a;
            if (st < 0)
                bench_check(st, "nixl_xfer_post");
            xfer_wait(in, x, st, "timed transfer");
        }
        t1 = bench_now_ns();
        uint64_t dt = t1 - t0 ? t1 - t0 : 1;
        lib_ns += dt;
        done += n;
        double lim = row_limit(in, r, seed);
        lim_sum += lim;
        pr[k] = ((double)r->bytes * (double)n * 1e9 / (double)dt) / lim;
    }
    bench_check(nixl_xfer_info(x, &r->info), "nixl_xfer_info");
    nixl_xfer_release(x);
    nixl_prep_release(rp);
    nixl_prep_release(lp);

    r->seconds = (double)lib_ns / 1e9;
    r->gbps = (double)r->bytes * (double)done / r->seconds / 1e9;
    r->per_desc_us = r->seconds * 1e6 / ((double)done * (double)r->batch);
    r->post_us = (double)post_ns / 1e3 / (double)done;
    r->limit_gbps = lim_sum / (double)pairs / 1e9;
    r->pairs = pairs;
    qsort(pr, pairs, sizeof(pr[0]), cmp_double);
    r->ratio = pairs % 2 ? pr[pairs / 2] : (pr[pairs / 2 - 1] + pr[pairs / 2]) / 2;
    r->ratio_min = pr[0];
    r->ratio_max = pr[pairs - 1];
}

static void print_header(void)
{
    printf("%8s %7s %9s %10s %6s %13s %11s %10s %12s %9s  %s\n", "block", "batch", "GB/s", "limit GB/s", "ratio",
           "(min-max)", "per-desc us", "prep us", "make Mdesc/s", "post us", "path");
}

static void print_row(const row_t *r)
{
    char b[16];
    bench_fmt_size(r->block, b, sizeof(b));
    char spread[32];
    snprintf(spread, sizeof(spread), "%.3f-%.3f", r->ratio_min, r->ratio_max);
    printf("%8s %7" PRIu64 " %9.2f %10.2f %6.3f %13s %11.4f %10.1f %12.2f %9.2f  %s\n", b, r->batch, r->gbps,
           r->limit_gbps, r->ratio, spread, r->per_desc_us, r->prep_local_us + r->prep_remote_us,
           r->make_desc_per_s / 1e6, r->post_us, r->info.path);
    fflush(stdout);
}

/* Names from the library are plain identifiers, but a quote or a control
 * byte must never break the JSON line. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_row(initiator_t *in, const row_t *r)
{
    const bench_opts_t *o = in->o;
    FILE *f = in->json;
    fputs("{\"backend\":", f);
    json_str(f, r->info.backend[0] ? r->info.backend : o->backend);
    fprintf(f, ",\"op\":\"%s\",\"block_size\":%" PRIu64 ",\"batch_size\":%" PRIu64 ",\"bytes\":%" PRIu64,
            o->op == NIXL_OP_WRITE ? "write" : "read", r->block, r->batch, r->bytes);
    fprintf(f, ",\"iters\":%" PRIu64 ",\"warmup\":%" PRIu64 ",\"seconds\":%.9g,\"gbps\":%.6g,\"limit_gbps\":%.6g"
               ",\"ratio\":%.6g,\"ratio_min\":%.6g,\"ratio_max\":%.6g,\"pairs\":%" PRIu64,
            r->iters, o->warmup, r->seconds, r->gbps, r->limit_gbps, r->ratio, r->ratio_min, r->ratio_max, r->pairs);
    fputs(",\"path\":", f);
    json_str(f, r->info.path);
    fprintf(f, ",\"descs_after_merge\":%" PRIu64 ",\"make_desc_per_s\":%.6g,\"make_first_desc_per_s\":%.6g,\"prep_us\":%.6g"
               ",\"prep_local_us\":%.6g,\"prep_remote_us\":%.6g,\"make_us\":%.6g,\"post_us\":%.6g"
               ",\"per_desc_us\":%.6g,\"layout\":\"%s\",\"alloc\":\"%s\",\"initiator_mem\":\"%s\""
               ",\"target_mem\":\"%s\"}\n",
            r->info.descs, r->make_desc_per_s, r->make_first_desc_per_s, r->prep_local_us + r->prep_remote_us, r->prep_local_us,
            r->prep_remote_us, r->make_us, r->post_us, r->per_desc_us, bench_layout_name(o->layout),
            bench_alloc_name(o->alloc), bench_mem_name(o->init_mem), bench_mem_name(o->tgt_mem));
    if (fflush(f))
        bench_die("cannot write %s", o->json_path);
}

/* Largest block*batch of the rows that will run; 0 when none fits. */
static uint64_t rows_max_bytes(const bench_opts_t *o)
{
    uint64_t max = 0;
    for (uint64_t ba = o->batch_min; ba <= o->batch_max; ba *= 2)
        for (uint64_t bl = o->block_min; bl <= o->block_max; bl *= 2)
            if (bl <= o->max_bytes / ba && bl * ba > max)
                max = bl * ba;
    return max;
}

static void connect_target(initiator_t *in, const char *ip, uint16_t port, uint64_t bytes)
{
    char name2[NIXL_NAME_MAX + 1];
    bench_check(nixl_md_fetch_remote(in->agent, ip, port, in->peer), "nixl_md_fetch_remote");
    /* The target needs our metadata to send its answers back. */
    bench_check(nixl_md_send_local(in->agent, ip, port), "nixl_md_send_local");

    char text[BENCH_MSG_MAX];
    snprintf(text, sizeof(text), "alloc %" PRIu64 " %s %s %d", bytes, bench_alloc_name(in->o->alloc),
             bench_mem_name(in->o->tgt_mem), in->o->tgt_dev);
    bench_notif_send(in->agent, in->peer, text);
    static const char *const answers[] = {"buf"};
    bench_msg_t m;
    unsigned long long addr, len;
    bench_inbox_wait(in->agent, answers, 1, in->o->timeout_ms, &m);
    if (sscanf(m.text, "buf %llu %llu", &addr, &len) != 2 || len < bytes)
        bench_die("bad buffer answer from the target: \"%s\"", m.text);
    in->remote_addr = addr;
    in->remote_len = len;
    /* Fetch again: the metadata now lists the buffer just registered. */
    bench_check(nixl_md_fetch_remote(in->agent, ip, port, name2), "nixl_md_fetch_remote(after alloc)");
    if (strcmp(name2, in->peer))
        bench_die("the agent at %s:%u changed name from %s to %s", ip, (unsigned)port, in->peer, name2);
}

static void setup(initiator_t *in, const char *ip, uint16_t port, uint64_t bytes, uint64_t max_batch)
{
    const bench_opts_t *o = in->o;
    char name[NIXL_NAME_MAX + 1];
    snprintf(name, sizeof(name), "nixlbench-init-%ld", (long)getpid());
    /* One thread drives everything: the agent's lock would only add cost. */
    nixl_agent_config_t cfg = {
        .field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_THREAD_MODE,
        .name = name,
        .thread_mode = NIXL_THREAD_NONE,
    };
    bench_check(nixl_agent_create(&cfg, &in->agent), "nixl_agent_create(initiator)");
    nixl_backend_t *be;
    bench_check(nixl_backend_create(in->agent, o->backend, o->params, o->num_params, &be), "nixl_backend_create(initiator)");

    in->len = bytes;
    nixl_desc_t d = {.len = bytes};
    if (o->init_mem == BENCH_MEM_VRAM) {
        in->buf = bench_vram_alloc(o->init_dev, bytes);
        in->host = malloc(bytes);
        if (!in->host)
            bench_die("out of memory for a %" PRIu64 "-byte staging buffer", bytes);
        d.dev_id = (uint32_t)o->init_dev;
    } else {
        in->buf = in->host = bench_alloc(o->alloc, bytes);
    }
    d.addr = (uint64_t)(uintptr_t)in->buf;
    nixl_dlist_t l = dlist_of(&d, 1, o->init_mem);
    bench_check(nixl_mem_register(in->agent, &l, NULL), "nixl_mem_register(initiator buffer)");
    if (o->init_mem == BENCH_MEM_DRAM && o->tgt_mem == BENCH_MEM_DRAM) {
        in->lim_src = bench_alloc(o->alloc, bytes);
        in->lim_dst = bench_alloc(o->alloc, bytes);
    }

    in->ldesc = calloc(max_batch, sizeof(*in->ldesc));
    in->rdesc = calloc(max_batch, sizeof(*in->rdesc));
    in->idx = malloc(max_batch * sizeof(*in->idx));
    in->slot = malloc(max_batch * sizeof(*in->slot));
    if (!in->ldesc || !in->rdesc || !in->idx || !in->slot)
        bench_die("out of memory for %" PRIu64 " descriptors", max_batch);
    for (uint64_t i = 0; i < max_batch; i++)
        in->idx[i] = (uint32_t)i;

    connect_target(in, ip, port, bytes);
}

static void teardown(initiator_t *in)
{
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)in->buf, .len = in->len,
                     .dev_id = in->o->init_mem == BENCH_MEM_VRAM ? (uint32_t)in->o->init_dev : 0};
    nixl_dlist_t l = dlist_of(&d, 1, in->o->init_mem);
    bench_check(nixl_mem_deregister(in->agent, &l, NULL), "nixl_mem_deregister(initiator buffer)");
    nixl_agent_destroy(in->agent);
    if (in->o->init_mem == BENCH_MEM_VRAM) {
        bench_vram_free(in->o->init_dev, in->buf);
        free(in->host);
    } else {
        bench_free(in->o->alloc, in->buf, in->len);
    }
    bench_free(in->o->alloc, in->lim_src, in->len);
    bench_free(in->o->alloc, in->lim_dst, in->len);
    free(in->ldesc);
    free(in->rdesc);
    free(in->idx);
    free(in->slot);
}

int bench_run_initiator(const bench_opts_t *o, const char *ip, uint16_t port)
{
    initiator_t in = {.o = o};
    uint64_t bytes = rows_max_bytes(o);
    if (!bytes)
        bench_die("every row exceeds --max-bytes %" PRIu64 " (block x batch per side)", o->max_bytes);
    if (o->json_path) {
        in.json = fopen(o->json_path, "w");
        if (!in.json)
            bench_die("cannot open %s: %s", o->json_path, strerror(errno));
    }
    setup(&in, ip, port, bytes, o->batch_max);
    if (!o->quiet) {
        printf("# nixlbench %s: backend %s, op %s, layout %s, alloc %s, target %s (%s:%u)\n", nixl_version(),
               o->backend, o->op == NIXL_OP_WRITE ? "write" : "read", bench_layout_name(o->layout),
               bench_alloc_name(o->alloc), in.peer, ip, (unsigned)port);
        if (o->init_mem == BENCH_MEM_VRAM || o->tgt_mem == BENCH_MEM_VRAM) {
            int from = o->op == NIXL_OP_WRITE ? o->init_dev : o->tgt_dev;
            int to = o->op == NIXL_OP_WRITE ? o->tgt_dev : o->init_dev;
            int to_device = (o->op == NIXL_OP_WRITE) == (o->tgt_mem == BENCH_MEM_VRAM);
            if (o->init_mem != o->tgt_mem)
                printf("# initiator %s, target %s; limit: %s of block x batch bytes (host memory: alloc %s)\n",
                       bench_mem_name(o->init_mem), bench_mem_name(o->tgt_mem), bench_host_limit_name(to_device),
                       bench_alloc_name(o->alloc));
            else
                printf("# initiator %s (GPU %d), target %s (GPU %d); limit: %s of block x batch bytes, GPU %d -> %d\n",
                       bench_mem_name(o->init_mem), o->init_dev, bench_mem_name(o->tgt_mem), o->tgt_dev,
                       bench_vram_limit_name(from, to), from, to);
        }
        bench_ucx_describe(o, stdout);
        print_header();
    }

    uint64_t row_no = 0;
    for (uint64_t ba = o->batch_min; ba <= o->batch_max; ba *= 2) {
        for (uint64_t bl = o->block_min; bl <= o->block_max; bl *= 2) {
            row_t r = {.block = bl, .batch = ba};
            if (bl > o->max_bytes / ba) {
                if (!o->quiet)
                    fprintf(stderr, "nixlbench: skipping block %" PRIu64 " x batch %" PRIu64
                                    ": over --max-bytes\n", bl, ba);
                continue;
            }
            r.bytes = bl * ba;
            r.iters = default_iters(o, r.bytes);
            run_row(&in, &r, bench_row_seed(o->seed, row_no++));
            if (!o->quiet)
                print_row(&r);
            if (in.json)
                json_row(&in, &r);
        }
    }

    bench_notif_send(in.agent, in.peer, "quit");
    /* Keep our agent alive until the target has gone, so nothing it still
     * needs from us (the notification) disappears under it. */
    int target_rc = bench_child_reap(in.agent, 10000);
    teardown(&in);
    if (in.json && fclose(in.json))
        bench_die("cannot write %s", o->json_path);
    return target_rc ? 1 : 0;
}
