/*
 * bench_etcd.c - nixlbench across N processes coordinated through etcd
 * (--etcd URL --ranks N --scheme S).  Every process runs the same command;
 * they may sit on one host or many, and know nothing of each other but the
 * etcd URL and the run id.
 *
 *   ranks     each process joins under NS/bench/<run>/members/; once N have
 *             joined, rank = order of joining (etcd's create revision)
 *   schemes   pairwise: rank 2k initiates to 2k+1; many-to-one: every rank
 *             initiates to rank 0; one-to-many: rank 0 initiates to all
 *   metadata  through the library: nixl_md_etcd_publish, nixl_md_etcd_fetch
 *   buffers   each rank registers one slot per pair it is part of and puts
 *             the address under NS/bench/<run>/buf/<rank>
 *   barriers  NS/bench/<run>/bar/<seq>.<what>/<rank> = a value per rank
 *
 * A row: initiators prepare one request per pair; the first transfer is
 * verified byte for byte on the side that receives it (the target for a
 * write, the initiator for a read), the verdicts go through a barrier;
 * then, all together, every initiator re-posts its requests iters times.
 * Rank 0 prints the aggregate (bytes of all pairs / slowest initiator's
 * time) and the spread across initiators.  Any rank that fails sets
 * NS/bench/<run>/abort so the others stop at their next barrier.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#ifdef BENCH_HAVE_ETCD

#include "bench_etcd.h"

#define KV_TTL_S 10
#define MAX_RANKS 1024

typedef struct pair {
    uint32_t init, target; /* ranks */
    uint32_t islot, tslot; /* slot in each side's buffer */
} pair_t;

typedef struct ebench {
    const bench_opts_t *o;
    bench_coord_t *kv;
    char prefix[200]; /* NS/bench/<run>/ */
    uint32_t rank, n;
    char name[NIXL_NAME_MAX + 1];
    char (*names)[NIXL_NAME_MAX + 1];
    uint64_t *raddr; /* buffer of each rank */
    pair_t *pairs;
    size_t npairs;
    uint32_t nslots; /* pairs this rank is part of */
    int initiates, serves;
    nixl_agent_t *agent;
    uint8_t *buf;
    uint64_t slot_bytes, buf_len;
    uint8_t *lim_src, *lim_dst;
    nixl_desc_t *ldesc, *rdesc;
    uint32_t *idx, *slot;
    uint64_t barrier_seq;
    int finished;
    FILE *json;
} ebench_t;

static ebench_t *eb_for_exit;

static const char *scheme_name(bench_scheme_t s)
{
    return s == BENCH_SCHEME_MANY_TO_ONE ? "many-to-one" : s == BENCH_SCHEME_ONE_TO_MANY ? "one-to-many" : "pairwise";
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

/* Tell the other ranks before dying (bench_die exits through here). */
static void abort_at_exit(void)
{
    ebench_t *b = eb_for_exit;
    if (!b || b->finished)
        return;
    eb_for_exit = NULL; /* a failure below must not come back here */
    char key[256], val[128];
    snprintf(key, sizeof(key), "%sabort", b->prefix);
    snprintf(val, sizeof(val), "rank %u (%s) failed", b->rank, b->name);
    bench_coord_try_put(b->kv, key, val);
}

/* ---- ranks and barriers ---- */

static void check_abort(ebench_t *b)
{
    char key[256], val[256];
    snprintf(key, sizeof(key), "%sabort", b->prefix);
    if (bench_coord_get(b->kv, key, val, sizeof(val))) {
        b->finished = 1; /* another rank failed: do not report ourselves */
        bench_die("stopping: %s", val);
    }
}

static int cmp_key(const void *a, const void *c)
{
    return strcmp(((const bench_coord_pair_t *)a)->key, ((const bench_coord_pair_t *)c)->key);
}

/* Every rank puts value under this barrier and waits for all N; *vals_out
 * (may be NULL) gets the values in rank order. */
static void barrier(ebench_t *b, const char *what, const char *value, bench_coord_pair_t **vals_out)
{
    char dir[300], key[320], members[256];
    snprintf(dir, sizeof(dir), "%sbar/%06" PRIu64 ".%s/", b->prefix, ++b->barrier_seq, what);
    snprintf(key, sizeof(key), "%s%05u", dir, b->rank);
    snprintf(members, sizeof(members), "%smembers/", b->prefix);
    bench_coord_put(b->kv, key, value ? value : "-");
    uint64_t start = bench_now_ns(), deadline = start + (uint64_t)b->o->timeout_ms * 1000000ull;
    uint64_t next_health = start + 500000000ull;
    unsigned nap = 200;
    for (;;) {
        bench_coord_pair_t *v;
        size_t n = bench_coord_prefix(b->kv, dir, &v);
        if (n > b->n)
            bench_die("barrier %s: %zu ranks answered, expected %u (another run with --run-id %s?)", what, n, b->n,
                      b->o->run_id);
        if (n == b->n) {
            qsort(v, n, sizeof(*v), cmp_key);
            if (vals_out)
                *vals_out = v;
            else
                free(v);
            return;
        }
        free(v);
        uint64_t now = bench_now_ns();
        if (now > next_health) {
            check_abort(b);
            /* "end" is passed once rank 0 said finished (it saw every rank
             * arrive): a rank that left since then took its barrier key
             * with its lease, which must not read as a death here. */
            char fin[320], val[16];
            snprintf(fin, sizeof(fin), "%sfinished", b->prefix);
            if (strcmp(what, "end") == 0 && bench_coord_get(b->kv, fin, val, sizeof(val)))
                return;
            size_t m = bench_coord_prefix(b->kv, members, &v);
            free(v);
            if (m < b->n) {
                b->finished = 1;
                bench_die("barrier %s: only %zu of %u ranks are alive (a process died?)", what, m, b->n);
            }
            next_health = now + 500000000ull;
        }
        if (now > deadline)
            bench_die("barrier %s: %zu of %u ranks arrived within %u ms", what, n, b->n, b->o->timeout_ms);
        sleep_us(nap);
        if (nap < 20000)
            nap *= 2;
    }
}

static void agent_name(char *out, size_t cap)
{
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    for (char *p = host; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-'))
            *p = '-';
    snprintf(out, cap, "nixlbench-%.32s-%ld", host, (long)getpid());
}

/* Join the run and learn my rank and everyone's agent name. */
static void join(ebench_t *b)
{
    char key[320], val[256], members[256];
    snprintf(key, sizeof(key), "%sfinished", b->prefix);
    if (bench_coord_get(b->kv, key, val, sizeof(val)))
        bench_die("run %s in etcd has finished already and not been cleaned up; use another --run-id",
                  b->o->run_id);
    snprintf(members, sizeof(members), "%smembers/", b->prefix);
    snprintf(key, sizeof(key), "%s%s", members, b->name);
    bench_coord_put(b->kv, key, b->name);
    uint64_t deadline = bench_now_ns() + (uint64_t)b->o->timeout_ms * 1000000ull;
    bench_coord_pair_t *v;
    size_t n;
    for (;;) {
        n = bench_coord_prefix(b->kv, members, &v);
        if (n == b->n)
            break;
        free(v);
        if (n > b->n)
            bench_die("%zu processes joined run %s, expected %u (another run with the same --run-id?)", n,
                      b->o->run_id, b->n);
        if (bench_now_ns() > deadline)
            bench_die("only %zu of %u processes joined run %s within %u ms", n, b->n, b->o->run_id, b->o->timeout_ms);
        sleep_us(10000);
    }
    b->names = calloc(b->n, sizeof(*b->names));
    if (!b->names)
        bench_die("out of memory");
    b->rank = UINT32_MAX;
    for (uint32_t r = 0; r < b->n; r++) {
        snprintf(b->names[r], sizeof(b->names[r]), "%.*s", NIXL_NAME_MAX, v[r].value);
        if (!strcmp(v[r].value, b->name))
            b->rank = r;
    }
    free(v);
    if (b->rank == UINT32_MAX)
        bench_die("joined run %s but my key is not among its members", b->o->run_id);
}

/* ---- who talks to whom ---- */

static void make_pairs(ebench_t *b)
{
    uint32_t n = b->n;
    b->pairs = calloc(n, sizeof(*b->pairs));
    if (!b->pairs)
        bench_die("out of memory");
    switch (b->o->scheme) {
    case BENCH_SCHEME_PAIRWISE:
        for (uint32_t r = 0; r + 1 < n; r += 2)
            b->pairs[b->npairs++] = (pair_t){r, r + 1, 0, 0};
        break;
    case BENCH_SCHEME_MANY_TO_ONE:
        for (uint32_t r = 1; r < n; r++)
            b->pairs[b->npairs++] = (pair_t){r, 0, 0, r - 1};
        break;
    case BENCH_SCHEME_ONE_TO_MANY:
        for (uint32_t r = 1; r < n; r++)
            b->pairs[b->npairs++] = (pair_t){0, r, r - 1, 0};
        break;
    }
    for (size_t i = 0; i < b->npairs; i++) {
        if (b->pairs[i].init == b->rank) {
            b->initiates = 1;
            b->nslots++;
        }
        if (b->pairs[i].target == b->rank) {
            b->serves = 1;
            b->nslots++;
        }
    }
}

static uint64_t row_bytes_max(const bench_opts_t *o)
{
    uint64_t max = 0;
    for (uint64_t ba = o->batch_min; ba <= o->batch_max; ba *= 2)
        for (uint64_t bl = o->block_min; bl <= o->block_max; bl *= 2)
            if (bl <= o->max_bytes / ba && bl * ba > max)
                max = bl * ba;
    return max;
}

static uint64_t row_iters(const bench_opts_t *o, uint64_t bytes)
{
    const uint64_t min_moved = 256ull << 20, cap = 100000;
    if (o->iters)
        return o->iters;
    if (bytes >= (1ull << 20))
        return 20;
    uint64_t n = (min_moved + bytes - 1) / bytes;
    return n < 20 ? 20 : (n > cap ? cap : n);
}

/* ---- setup ---- */

static void on_fetched(nixl_agent_t *agent, const char *peer, nixl_status_t st, void *arg)
{
    (void)agent;
    (void)arg;
    if (st != NIXL_OK)
        fprintf(stderr, "nixlbench: fetching %s from etcd: %s\n", peer, nixl_strerror(st));
}

static void setup(ebench_t *b)
{
    const bench_opts_t *o = b->o;
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = b->name};
    bench_check(nixl_agent_create(&cfg, &b->agent), "nixl_agent_create");
    nixl_backend_t *be;
    bench_check(nixl_backend_create(b->agent, o->backend, o->params, o->num_params, &be), "nixl_backend_create");
    b->slot_bytes = row_bytes_max(o);
    if (!b->slot_bytes)
        bench_die("every row exceeds --max-bytes %" PRIu64, o->max_bytes);
    b->buf_len = b->slot_bytes * (b->nslots ? b->nslots : 1);
    b->buf = bench_alloc(o->alloc, b->buf_len);
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)b->buf, .len = b->buf_len};
    nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &d};
    bench_check(nixl_mem_register(b->agent, &l, NULL), "nixl_mem_register");
    if (b->initiates) {
        b->lim_src = bench_alloc(o->alloc, b->slot_bytes);
        b->lim_dst = bench_alloc(o->alloc, b->slot_bytes);
        b->ldesc = calloc(o->batch_max, sizeof(*b->ldesc));
        b->rdesc = calloc(o->batch_max, sizeof(*b->rdesc));
        b->idx = malloc(o->batch_max * sizeof(*b->idx));
        b->slot = malloc(o->batch_max * sizeof(*b->slot));
        if (!b->ldesc || !b->rdesc || !b->idx || !b->slot)
            bench_die("out of memory for %" PRIu64 " descriptors", o->batch_max);
        for (uint64_t i = 0; i < o->batch_max; i++)
            b->idx[i] = (uint32_t)i;
    }
    /* Targets publish; initiators too, so a target could reach them. */
    nixl_status_t st = nixl_md_etcd_publish(b->agent, NULL, NULL);
    if (st != NIXL_IN_PROG)
        bench_check(st, "nixl_md_etcd_publish");
    char key[320], val[160];
    snprintf(key, sizeof(key), "%sbuf/%05u", b->prefix, b->rank);
    snprintf(val, sizeof(val), "%" PRIu64 " %" PRIu64, (uint64_t)(uintptr_t)b->buf, b->buf_len);
    bench_coord_put(b->kv, key, val);
    barrier(b, "setup", NULL, NULL);

    /* Every buffer address, and the metadata of every target I write to. */
    b->raddr = calloc(b->n, sizeof(*b->raddr));
    if (!b->raddr)
        bench_die("out of memory");
    bench_coord_pair_t *v;
    char dir[256];
    snprintf(dir, sizeof(dir), "%sbuf/", b->prefix);
    size_t n = bench_coord_prefix(b->kv, dir, &v);
    for (size_t i = 0; i < n; i++) {
        unsigned r;
        unsigned long long addr, len;
        if (sscanf(v[i].key + strlen(dir), "%u", &r) != 1 || r >= b->n ||
            sscanf(v[i].value, "%llu %llu", &addr, &len) != 2)
            bench_die("malformed buffer key %s = \"%s\"", v[i].key, v[i].value);
        b->raddr[r] = addr;
    }
    free(v);
    nixl_etcd_args_t args = {.field_mask = NIXL_ETCD_ARG_CALLBACK | NIXL_ETCD_ARG_TIMEOUT_MS,
                             .timeout_ms = o->timeout_ms, .cb = on_fetched};
    for (size_t i = 0; i < b->npairs; i++) {
        if (b->pairs[i].init != b->rank)
            continue;
        const char *peer = b->names[b->pairs[i].target];
        if (!b->raddr[b->pairs[i].target])
            bench_die("rank %u (%s) published no buffer", b->pairs[i].target, peer);
        st = nixl_md_etcd_fetch(b->agent, peer, &args);
        if (st != NIXL_IN_PROG)
            bench_check(st, "nixl_md_etcd_fetch");
    }
    uint64_t deadline = bench_now_ns() + (uint64_t)o->timeout_ms * 1000000ull;
    for (size_t i = 0; i < b->npairs; i++) {
        if (b->pairs[i].init != b->rank)
            continue;
        const char *peer = b->names[b->pairs[i].target];
        while (nixl_md_check_remote(b->agent, peer) != NIXL_OK) {
            if (bench_now_ns() > deadline)
                bench_die("the metadata of %s did not arrive through etcd within %u ms", peer, o->timeout_ms);
            sleep_us(1000);
        }
    }
    barrier(b, "connected", NULL, NULL);
}

/* ---- one row ---- */

typedef struct mine {
    const pair_t *p;
    uint64_t seed;
    nixl_prep_t *lp, *rp;
    nixl_xfer_t *x;
} mine_t;

static void wait_all(ebench_t *b, mine_t *m, size_t n, const char *what)
{
    uint64_t deadline = bench_now_ns() + (uint64_t)b->o->timeout_ms * 1000000ull;
    for (size_t i = 0; i < n; i++) {
        nixl_status_t st;
        unsigned spins = 0;
        while ((st = nixl_xfer_status(m[i].x)) == NIXL_IN_PROG) {
            sched_yield();
            if ((++spins & 0xfff) == 0 && bench_now_ns() > deadline)
                bench_die("%s to %s did not complete within %u ms", what, b->names[m[i].p->target], b->o->timeout_ms);
        }
        if (st != NIXL_OK) {
            char call[128];
            snprintf(call, sizeof(call), "nixl_xfer_status(%s to %s)", what, b->names[m[i].p->target]);
            bench_check(st, call);
        }
    }
}

static void post_all(ebench_t *b, mine_t *m, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        nixl_status_t st = nixl_xfer_post(m[i].x);
        if (st < 0) {
            char call[128];
            snprintf(call, sizeof(call), "nixl_xfer_post(%s to %s)", what, b->names[m[i].p->target]);
            bench_check(st, call);
        }
    }
    wait_all(b, m, n, what);
}

static uint8_t *slot_of(const ebench_t *b, uint32_t slot)
{
    return b->buf + (uint64_t)slot * b->slot_bytes;
}

typedef struct row_result {
    double gbps, seconds, limit_gbps, post_us;
    nixl_xfer_info_t info;
} row_result_t;

/* The verification verdict of this rank for the row: "ok" or why not. */
static void verify_row(ebench_t *b, mine_t *m, size_t nm, uint64_t row, uint64_t row_seed, uint64_t block,
                       uint64_t batch, char *verdict, size_t cap)
{
    const bench_opts_t *o = b->o;
    uint64_t bytes = block * batch;
    char what[32];
    snprintf(verdict, cap, "ok");
    if (o->op == NIXL_OP_WRITE) {
        for (size_t i = 0; i < nm; i++)
            bench_pattern_fill(slot_of(b, m[i].p->islot), m[i].seed, 0, bytes);
        post_all(b, m, nm, "verification write");
        snprintf(what, sizeof(what), "written.%" PRIu64, row);
        barrier(b, what, NULL, NULL);
        for (size_t i = 0; i < b->npairs; i++) {
            const pair_t *p = &b->pairs[i];
            if (p->target != b->rank)
                continue;
            int64_t bad = bench_target_check(slot_of(b, p->tslot), bench_row_seed(row_seed, i), block, batch, o->layout);
            if (bad >= 0) {
                snprintf(verdict, cap, "bad: byte %" PRId64 " written by %s", bad, b->names[p->init]);
                break;
            }
        }
    } else {
        for (size_t i = 0; i < b->npairs; i++) {
            const pair_t *p = &b->pairs[i];
            if (p->target == b->rank)
                bench_target_fill(slot_of(b, p->tslot), bench_row_seed(row_seed, i), block, batch, o->layout);
        }
        snprintf(what, sizeof(what), "filled.%" PRIu64, row);
        barrier(b, what, NULL, NULL);
        for (size_t i = 0; i < nm; i++)
            memset(slot_of(b, m[i].p->islot), 0xa5, bytes); /* stale bytes must not pass */
        post_all(b, m, nm, "verification read");
        for (size_t i = 0; i < nm; i++) {
            int64_t bad = bench_pattern_check(slot_of(b, m[i].p->islot), m[i].seed, 0, bytes);
            if (bad >= 0) {
                snprintf(verdict, cap, "bad: byte %" PRId64 " read from %s", bad, b->names[m[i].p->target]);
                break;
            }
        }
    }
}

static void make_requests(ebench_t *b, mine_t *m, size_t nm, uint64_t block, uint64_t batch)
{
    const bench_opts_t *o = b->o;
    for (size_t i = 0; i < nm; i++) {
        const pair_t *p = m[i].p;
        uint64_t lbase = (uint64_t)(uintptr_t)slot_of(b, p->islot);
        uint64_t rbase = b->raddr[p->target] + (uint64_t)p->tslot * b->slot_bytes;
        bench_layout_slots(o->layout, m[i].seed, b->slot, batch);
        for (uint64_t k = 0; k < batch; k++) {
            b->ldesc[k] = (nixl_desc_t){.addr = lbase + k * block, .len = block};
            b->rdesc[k] = (nixl_desc_t){.addr = rbase + (uint64_t)b->slot[k] * block, .len = block};
        }
        nixl_dlist_t ll = {NIXL_MEM_DRAM, batch, b->ldesc}, rl = {NIXL_MEM_DRAM, batch, b->rdesc};
        bench_check(nixl_prep_create(b->agent, NULL, &ll, NULL, &m[i].lp), "nixl_prep_create(local)");
        bench_check(nixl_prep_create(b->agent, b->names[p->target], &rl, NULL, &m[i].rp), "nixl_prep_create(remote)");
        bench_check(nixl_xfer_make(b->agent, o->op, m[i].lp, b->idx, m[i].rp, b->idx, batch, NULL, &m[i].x),
                    "nixl_xfer_make");
    }
}

static void timed_run(ebench_t *b, mine_t *m, size_t nm, uint64_t block, uint64_t batch, row_result_t *res)
{
    const bench_opts_t *o = b->o;
    uint64_t bytes = block * batch, iters = row_iters(o, bytes);
    for (uint64_t w = 0; w < o->warmup; w++)
        post_all(b, m, nm, "warmup transfer");
    uint64_t post_ns = 0, t0 = bench_now_ns();
    for (uint64_t it = 0; it < iters; it++) {
        uint64_t a = bench_now_ns();
        for (size_t i = 0; i < nm; i++) {
            nixl_status_t st = nixl_xfer_post(m[i].x);
            if (st < 0)
                bench_check(st, "nixl_xfer_post");
        }
        post_ns += bench_now_ns() - a;
        wait_all(b, m, nm, "timed transfer");
    }
    uint64_t t1 = bench_now_ns();
    res->seconds = (double)(t1 - t0) / 1e9;
    res->gbps = (double)bytes * (double)nm * (double)iters / res->seconds / 1e9;
    res->post_us = (double)post_ns / 1e3 / (double)iters;
    bench_check(nixl_xfer_info(m[0].x, &res->info), "nixl_xfer_info");
    bench_pattern_fill(b->lim_src, m[0].seed, 0, bytes);
    bench_layout_slots(o->layout, m[0].seed, b->slot, batch);
    res->limit_gbps = bench_memcpy_limit(b->lim_dst, b->lim_src, block, batch, b->slot, o->op) / 1e9;
}

static void print_header(const ebench_t *b)
{
    const bench_opts_t *o = b->o;
    printf("# nixlbench %s etcd: %u ranks, scheme %s, %zu pair(s), backend %s, op %s, layout %s, alloc %s, run %s\n",
           nixl_version(), b->n, scheme_name(o->scheme), b->npairs, o->backend,
           o->op == NIXL_OP_WRITE ? "write" : "read", bench_layout_name(o->layout), bench_alloc_name(o->alloc),
           o->run_id);
    for (uint32_t r = 0; r < b->n; r++) {
        int in = 0, tg = 0;
        for (size_t i = 0; i < b->npairs; i++) {
            in |= b->pairs[i].init == r;
            tg |= b->pairs[i].target == r;
        }
        printf("#   rank %u: %s (%s)\n", r, b->names[r], in && tg ? "initiator, target" : in ? "initiator" : tg ? "target" : "idle");
    }
    printf("%8s %7s %10s %9s %9s %10s %6s %9s  %s\n", "block", "batch", "agg GB/s", "min GB/s", "max GB/s",
           "limit GB/s", "ratio", "post us", "path");
}

/* Rank 0: one line (and JSON row) from every initiator's result. */
static void report_row(ebench_t *b, const bench_coord_pair_t *vals, uint64_t block, uint64_t batch)
{
    const bench_opts_t *o = b->o;
    double sum_gbps = 0, min = 1e300, max = 0, max_s = 0, sum_lim = 0, sum_post = 0, bytes_all = 0;
    char path[64] = "", bsz[16];
    unsigned inits = 0;
    for (uint32_t r = 0; r < b->n; r++) {
        double g, s, lim, post;
        unsigned long long moved;
        char pth[64];
        if (!strcmp(vals[r].value, "-"))
            continue;
        if (sscanf(vals[r].value, "%lf %lf %lf %lf %llu %63s", &g, &s, &lim, &post, &moved, pth) != 6)
            bench_die("rank %u reported \"%s\"", r, vals[r].value);
        inits++;
        sum_gbps += g;
        sum_lim += lim;
        sum_post += post;
        bytes_all += (double)moved;
        min = g < min ? g : min;
        max = g > max ? g : max;
        max_s = s > max_s ? s : max_s;
        snprintf(path, sizeof(path), "%s", pth);
    }
    if (!inits)
        return;
    double agg = bytes_all / max_s / 1e9, mean = sum_gbps / inits, lim = sum_lim / inits;
    bench_fmt_size(block, bsz, sizeof(bsz));
    if (!o->quiet) {
        printf("%8s %7" PRIu64 " %10.2f %9.2f %9.2f %10.2f %6.3f %9.2f  %s\n", bsz, batch, agg, min, max, lim,
               mean / lim, sum_post / inits, path);
        fflush(stdout);
    }
    if (b->json) {
        fprintf(b->json,
                "{\"mode\":\"etcd\",\"scheme\":\"%s\",\"ranks\":%u,\"pairs\":%zu,\"initiators\":%u,\"backend\":\"%s\","
                "\"op\":\"%s\",\"block_size\":%" PRIu64 ",\"batch_size\":%" PRIu64 ",\"bytes\":%" PRIu64
                ",\"iters\":%" PRIu64 ",\"agg_gbps\":%.6g,\"min_gbps\":%.6g,\"max_gbps\":%.6g,\"mean_gbps\":%.6g,"
                "\"limit_gbps\":%.6g,\"ratio\":%.6g,\"seconds\":%.9g,\"post_us\":%.6g,\"path\":\"%s\","
                "\"layout\":\"%s\",\"alloc\":\"%s\"}\n",
                scheme_name(o->scheme), b->n, b->npairs, inits, o->backend, o->op == NIXL_OP_WRITE ? "write" : "read",
                block, batch, block * batch, row_iters(o, block * batch), agg, min, max, mean, lim, mean / lim, max_s,
                sum_post / inits, path, bench_layout_name(o->layout), bench_alloc_name(o->alloc));
        if (fflush(b->json))
            bench_die("cannot write %s", o->json_path);
    }
}

static void run_row(ebench_t *b, uint64_t row, uint64_t block, uint64_t batch)
{
    const bench_opts_t *o = b->o;
    uint64_t row_seed = bench_row_seed(o->seed, row);
    mine_t *m = calloc(b->npairs ? b->npairs : 1, sizeof(*m));
    size_t nm = 0;
    char verdict[160], what[32], result[200] = "-";
    if (!m)
        bench_die("out of memory");
    for (size_t i = 0; i < b->npairs; i++) {
        if (b->pairs[i].init != b->rank)
            continue;
        m[nm].p = &b->pairs[i];
        m[nm++].seed = bench_row_seed(row_seed, i);
    }
    make_requests(b, m, nm, block, batch);
    verify_row(b, m, nm, row, row_seed, block, batch, verdict, sizeof(verdict));
    bench_coord_pair_t *vals;
    snprintf(what, sizeof(what), "checked.%" PRIu64, row);
    barrier(b, what, verdict, &vals);
    for (uint32_t r = 0; r < b->n; r++)
        if (strcmp(vals[r].value, "ok"))
            bench_die("verification failed at block %" PRIu64 " batch %" PRIu64 ": rank %u: %s", block, batch, r,
                      vals[r].value);
    free(vals);

    snprintf(what, sizeof(what), "go.%" PRIu64, row);
    barrier(b, what, NULL, NULL);
    if (nm) {
        row_result_t res;
        timed_run(b, m, nm, block, batch, &res);
        snprintf(result, sizeof(result), "%.6g %.9g %.6g %.6g %" PRIu64 " %s", res.gbps, res.seconds, res.limit_gbps,
                 res.post_us, block * batch * nm * row_iters(o, block * batch), res.info.path[0] ? res.info.path : "?");
    }
    snprintf(what, sizeof(what), "done.%" PRIu64, row);
    barrier(b, what, result, &vals);
    if (b->rank == 0)
        report_row(b, vals, block, batch);
    free(vals);
    for (size_t i = 0; i < nm; i++) {
        nixl_xfer_release(m[i].x);
        nixl_prep_release(m[i].rp);
        nixl_prep_release(m[i].lp);
    }
    free(m);
}

/* Everyone passes "end"; rank 0 says "finished", waits for the others to
 * leave (their leases revoked), then removes the run's keys. */
static void finish(ebench_t *b)
{
    char key[320], val[64], members[256];
    barrier(b, "end", NULL, NULL);
    snprintf(key, sizeof(key), "%sfinished", b->prefix);
    snprintf(members, sizeof(members), "%smembers/", b->prefix);
    b->finished = 1;
    if (b->rank == 0) {
        bench_coord_put(b->kv, key, "yes");
        uint64_t deadline = bench_now_ns() + (uint64_t)b->o->timeout_ms * 1000000ull;
        for (;;) {
            bench_coord_pair_t *v;
            size_t n = bench_coord_prefix(b->kv, members, &v);
            free(v);
            if (n <= 1 || bench_now_ns() > deadline)
                break;
            sleep_us(5000);
        }
        bench_coord_delete_prefix(b->kv, b->prefix);
    } else {
        uint64_t deadline = bench_now_ns() + (uint64_t)b->o->timeout_ms * 1000000ull;
        while (!bench_coord_get(b->kv, key, val, sizeof(val))) {
            if (bench_now_ns() > deadline)
                bench_die("rank 0 did not finish within %u ms", b->o->timeout_ms);
            sleep_us(2000);
        }
    }
}

int bench_run_etcd(const bench_opts_t *o)
{
    ebench_t b = {.o = o, .n = o->ranks};
    if (o->ranks < 2 || o->ranks > MAX_RANKS) {
        fprintf(stderr, "nixlbench: --ranks must be 2..%d\n", MAX_RANKS);
        return 2;
    }
    if (o->scheme == BENCH_SCHEME_PAIRWISE && o->ranks % 2) {
        fprintf(stderr, "nixlbench: --scheme pairwise needs an even --ranks\n");
        return 2;
    }
    /* All the library learns of etcd is this URL. */
    setenv("NIXL_ETCD_ENDPOINTS", o->etcd_url, 1);
    const char *ns = getenv("NIXL_ETCD_NAMESPACE");
    if (!ns || !*ns)
        ns = "/nixl";
    size_t nl = strlen(ns);
    while (nl && ns[nl - 1] == '/')
        nl--;
    snprintf(b.prefix, sizeof(b.prefix), "%.*s/bench/%s/", (int)nl, ns, o->run_id);
    agent_name(b.name, sizeof(b.name));
    b.kv = bench_coord_open(o->etcd_url, o->timeout_ms < 5000 ? 5000 : o->timeout_ms, KV_TTL_S);
    eb_for_exit = &b;
    bench_at_exit(abort_at_exit);
    join(&b);
    make_pairs(&b);
    if (b.rank == 0 && o->json_path) {
        b.json = fopen(o->json_path, "w");
        if (!b.json)
            bench_die("cannot open %s", o->json_path);
    }
    setup(&b);
    if (b.rank == 0 && !o->quiet)
        print_header(&b);
    uint64_t row = 0;
    for (uint64_t ba = o->batch_min; ba <= o->batch_max; ba *= 2)
        for (uint64_t bl = o->block_min; bl <= o->block_max; bl *= 2)
            if (bl <= o->max_bytes / ba)
                run_row(&b, row++, bl, ba);
    finish(&b);

    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)b.buf, .len = b.buf_len};
    nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &d};
    bench_check(nixl_mem_deregister(b.agent, &l, NULL), "nixl_mem_deregister");
    nixl_agent_destroy(b.agent);
    eb_for_exit = NULL;
    bench_coord_close(b.kv);
    bench_free(o->alloc, b.buf, b.buf_len);
    if (b.initiates) {
        bench_free(o->alloc, b.lim_src, b.slot_bytes);
        bench_free(o->alloc, b.lim_dst, b.slot_bytes);
    }
    free(b.ldesc);
    free(b.rdesc);
    free(b.idx);
    free(b.slot);
    free(b.names);
    free(b.raddr);
    free(b.pairs);
    if (b.json && fclose(b.json))
        bench_die("cannot write %s", o->json_path);
    return 0;
}

#else /* !BENCH_HAVE_ETCD */

int bench_run_etcd(const bench_opts_t *o)
{
    (void)o;
    fprintf(stderr, "nixlbench: --etcd: this nixlbench was built without etcd support (libcurl, libcjson)\n");
    return 2;
}

#endif
