/*
 * kv_transfer.c - move one request's KV cache from a prefill process to a
 * decode process on this host, the way a disaggregated serving engine does.
 *
 *   kv_transfer [--tokens N] [--layers L] [--repeat R] [--one-shot]
 *
 * The KV is shaped like DeepSeek-V2-Lite's (MLA): 27 layers, one buffer per
 * layer of [slots, 576] bf16, 1,152 B per token and layer, page size 1.  A
 * request owns token slots in runs of 1..64 at shuffled places of a pool
 * twice its size, on each side differently, so every token of every layer
 * is its own descriptor: 27 x N descriptors before merging.
 *
 * This program is prefill; it starts decode as a child (itself, re-run with
 * --role decode).  Decode publishes its metadata through its listener and
 * tells prefill where its layer buffers are with a notification.  Prefill
 * prepares both pools once (the two-step form), WRITEs the request with a
 * notification, decode verifies every byte when the notification arrives and
 * reports back, then prefill READs the slots back into a scratch area and
 * verifies them.  Every buffer comes from nixl_mem_alloc.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

#define KV_DIM 576u
#define SLOT_BYTES (KV_DIM * 2u) /* bf16 */
#define PREFILL_NAME "kv_prefill"
#define DECODE_NAME "kv_decode"
#define WAIT_MS 120000u

typedef struct opts {
    uint32_t layers, tokens, repeat;
    int one_shot;
    int ctl_fd; /* decode: where to write the listener port */
} opts_t;

static const char *role = "prefill";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kv_transfer (%s): ", role);
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

static void nap(void)
{
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
}

/* 1234567 -> "1,234,567" (one of eight rotating buffers: at most eight
 * uses per printf). */
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

/* The KV of token t of layer l, as prefill computed it. */
static void token_fill(uint8_t *dst, uint32_t l, uint32_t t)
{
    uint64_t key = ((uint64_t)l << 32 | t) * 0x100000001b3ull;
    for (uint32_t i = 0; i < SLOT_BYTES; i += 8) {
        uint64_t w = mix64(key + i);
        memcpy(dst + i, &w, 8);
    }
}

/* What decode's unused slots hold, so a stray write shows. */
static void idle_fill(uint8_t *dst, uint32_t l, uint32_t slot)
{
    uint64_t key = ~(((uint64_t)l << 32 | slot) * 0x9e3779b97f4a7c15ull);
    for (uint32_t i = 0; i < SLOT_BYTES; i += 8) {
        uint64_t w = mix64(key ^ i);
        memcpy(dst + i, &w, 8);
    }
}

/* The request's slots in a pool of 2 x tokens: runs of 1..64 slots, the runs
 * in shuffled order.  *runs_out gets how many runs the request spans. */
static uint32_t *slots_make(uint32_t tokens, uint64_t seed, uint32_t *runs_out)
{
    uint32_t pool = tokens * 2, nruns = 0;
    uint32_t *start = xcalloc(pool, sizeof(*start)), *len = xcalloc(pool, sizeof(*len));
    uint32_t *slots = xcalloc(tokens, sizeof(*slots));
    for (uint32_t at = 0; at < pool; nruns++) {
        uint32_t l = 1 + (uint32_t)(mix64(seed * 7919 + at) % 64);
        start[nruns] = at;
        len[nruns] = l < pool - at ? l : pool - at;
        at += len[nruns];
    }
    for (uint32_t i = nruns; i > 1; i--) {
        uint32_t j = (uint32_t)(mix64(seed ^ (0xabcdefull * i)) % i);
        uint32_t s = start[i - 1], l = len[i - 1];
        start[i - 1] = start[j];
        len[i - 1] = len[j];
        start[j] = s;
        len[j] = l;
    }
    uint32_t k = 0, used = 0;
    for (uint32_t r = 0; r < nruns && k < tokens; r++, used++)
        for (uint32_t j = 0; j < len[r] && k < tokens; j++)
            slots[k++] = start[r] + j;
    free(start);
    free(len);
    *runs_out = used;
    return slots;
}

/* ---- notifications as the control channel between the two roles ---- */

typedef struct inbox {
    const char *prefix;
    char *msg;
    size_t len;
} inbox_t;

static void inbox_cb(const char *sender, const void *msg, size_t len, void *arg)
{
    inbox_t *in = arg;
    size_t pl = strlen(in->prefix);
    if (in->msg || len < pl || memcmp(msg, in->prefix, pl) != 0) {
        fprintf(stderr, "kv_transfer (%s): unexpected notification from %s\n", role, sender);
        return;
    }
    in->msg = xcalloc(len + 1, 1);
    memcpy(in->msg, msg, len);
    in->len = len;
}

static char *notif_wait(nixl_agent_t *a, const char *prefix, size_t *len_out)
{
    inbox_t in = {.prefix = prefix};
    uint64_t deadline = now_ns() + WAIT_MS * 1000000ull;
    for (;;) {
        check(nixl_notifs_get(a, inbox_cb, &in, NULL), "nixl_notifs_get");
        if (in.msg)
            break;
        if (now_ns() > deadline)
            die("no '%s' notification within %u s", prefix, WAIT_MS / 1000);
        nap();
    }
    *len_out = in.len;
    return in.msg;
}

static nixl_agent_t *agent_make(const char *name, int listen)
{
    nixl_agent_config_t cfg = {
        .field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN,
        .name = name,
        .listen = listen,
    };
    nixl_agent_t *a;
    nixl_backend_t *b;
    check(nixl_agent_create(&cfg, &a), "creating the agent");
    check(nixl_backend_create(a, "shm", NULL, 0, &b), "creating the shm backend");
    return a;
}

/* A pool: one shared buffer per layer, registered as one list. */
typedef struct pool {
    nixl_agent_t *agent;
    uint32_t layers;
    size_t layer_len;
    uint8_t **layer;
} pool_t;

static void pool_make(nixl_agent_t *a, pool_t *p, uint32_t layers, size_t layer_len)
{
    p->agent = a;
    p->layers = layers;
    p->layer_len = layer_len;
    p->layer = xcalloc(layers, sizeof(*p->layer));
    nixl_desc_t *d = xcalloc(layers, sizeof(*d));
    for (uint32_t l = 0; l < layers; l++) {
        void *m;
        check(nixl_mem_alloc(layer_len, &m), "nixl_mem_alloc");
        p->layer[l] = m;
        d[l].addr = (uint64_t)(uintptr_t)m;
        d[l].len = layer_len;
    }
    nixl_dlist_t dl = {.mem_type = NIXL_MEM_DRAM, .count = layers, .descs = d};
    check(nixl_mem_register(a, &dl, NULL), "registering a pool");
    free(d);
}

static void pool_drop(nixl_agent_t *a, pool_t *p)
{
    nixl_desc_t *d = xcalloc(p->layers, sizeof(*d));
    for (uint32_t l = 0; l < p->layers; l++) {
        d[l].addr = (uint64_t)(uintptr_t)p->layer[l];
        d[l].len = p->layer_len;
    }
    nixl_dlist_t dl = {.mem_type = NIXL_MEM_DRAM, .count = p->layers, .descs = d};
    check(nixl_mem_deregister(a, &dl, NULL), "deregistering a pool");
    free(d);
    for (uint32_t l = 0; l < p->layers; l++)
        nixl_mem_free(p->layer[l], p->layer_len);
    free(p->layer);
}

/* ------------------------------------------------------------------------
 * decode
 * ------------------------------------------------------------------------ */

static int decode_verify(const opts_t *o, const pool_t *kv, const uint32_t *dslot, const uint8_t *owned);

static int run_decode(const opts_t *o)
{
    role = "decode";
    nixl_agent_t *a = agent_make(DECODE_NAME, 1);
    uint32_t pool_slots = o->tokens * 2, druns;
    pool_t kv;
    pool_make(a, &kv, o->layers, (size_t)pool_slots * SLOT_BYTES);
    for (uint32_t l = 0; l < o->layers; l++)
        for (uint32_t s = 0; s < pool_slots; s++)
            idle_fill(kv.layer[l] + (size_t)s * SLOT_BYTES, l, s);

    /* Registered before the port is published: the metadata prefill fetches
     * already lists the pool. */
    char port[16];
    int n = snprintf(port, sizeof(port), "%u\n", nixl_agent_listen_port(a));
    if (write(o->ctl_fd, port, (size_t)n) != n)
        die("writing the port to prefill: %s", strerror(errno));
    close(o->ctl_fd);

    uint64_t deadline = now_ns() + WAIT_MS * 1000000ull;
    while (nixl_md_check_remote(a, PREFILL_NAME) != NIXL_OK) {
        if (now_ns() > deadline)
            die("prefill never sent its metadata");
        nap();
    }
    size_t ml = 7 + (size_t)o->layers * 8;
    uint8_t *m = xcalloc(ml, 1);
    memcpy(m, "layout:", 7);
    for (uint32_t l = 0; l < o->layers; l++) {
        uint64_t addr = (uint64_t)(uintptr_t)kv.layer[l];
        memcpy(m + 7 + (size_t)l * 8, &addr, 8);
    }
    check(nixl_notif_send(a, PREFILL_NAME, m, ml, NULL), "sending the layout");
    free(m);

    uint32_t *dslot = slots_make(o->tokens, 2, &druns);
    uint8_t *owned = xcalloc(pool_slots, 1);
    for (uint32_t t = 0; t < o->tokens; t++)
        owned[dslot[t]] = 1;
    int all_ok = 1;
    size_t len;
    for (uint32_t round = 0; round < o->repeat; round++) {
        free(notif_wait(a, "kv:", &len));
        all_ok &= decode_verify(o, &kv, dslot, owned);
    }
    free(notif_wait(a, "done", &len));

    free(owned);
    free(dslot);
    pool_drop(a, &kv);
    nixl_agent_destroy(a);
    return all_ok ? 0 : 1;
}

/* Check the whole pool the moment the notification arrived (request slots
 * hold the KV, the others are untouched) and tell prefill. */
static int decode_verify(const opts_t *o, const pool_t *kv, const uint32_t *dslot, const uint8_t *owned)
{
    uint32_t pool_slots = o->tokens * 2;
    uint64_t t0 = now_ns();
    uint8_t want[SLOT_BYTES];
    char verdict[160] = "";
    uint64_t checked = 0;
    for (uint32_t l = 0; l < o->layers && !verdict[0]; l++) {
        for (uint32_t t = 0; t < o->tokens && !verdict[0]; t++) {
            token_fill(want, l, t);
            if (memcmp(kv->layer[l] + (size_t)dslot[t] * SLOT_BYTES, want, SLOT_BYTES) != 0)
                snprintf(verdict, sizeof(verdict), "verified:BAD layer %u token %u (slot %u) differs", l, t,
                         dslot[t]);
            checked += SLOT_BYTES;
        }
        for (uint32_t s = 0; s < pool_slots && !verdict[0]; s++) {
            if (owned[s])
                continue;
            idle_fill(want, l, s);
            if (memcmp(kv->layer[l] + (size_t)s * SLOT_BYTES, want, SLOT_BYTES) != 0)
                snprintf(verdict, sizeof(verdict), "verified:BAD layer %u slot %u is not the request's but changed",
                         l, s);
        }
    }
    if (!verdict[0])
        snprintf(verdict, sizeof(verdict), "verified:ok %llu %llu", (unsigned long long)checked,
                 (unsigned long long)(now_ns() - t0));
    check(nixl_notif_send(kv->agent, PREFILL_NAME, verdict, strlen(verdict), NULL), "sending the verdict");
    return strncmp(verdict, "verified:ok", 11) == 0;
}

/* ------------------------------------------------------------------------
 * prefill
 * ------------------------------------------------------------------------ */

static pid_t decode_spawn(const opts_t *o, int *port_fd_out)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        die("readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = 0;
    int p[2];
    if (pipe(p))
        die("pipe: %s", strerror(errno));
    char layers[16], tokens[16], fd[16], repeat[16];
    snprintf(repeat, sizeof(repeat), "%u", o->repeat);
    snprintf(layers, sizeof(layers), "%u", o->layers);
    snprintf(tokens, sizeof(tokens), "%u", o->tokens);
    snprintf(fd, sizeof(fd), "%d", p[1]);
    char *argv[] = {exe, (char *)"--role", (char *)"decode", (char *)"--ctl-fd", fd, (char *)"--layers", layers,
                    (char *)"--tokens", tokens, (char *)"--repeat", repeat, NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(exe, argv);
        _exit(127);
    }
    close(p[1]);
    *port_fd_out = p[0];
    return pid;
}

static uint16_t port_read(int fd)
{
    char buf[16];
    size_t got = 0;
    while (got < sizeof(buf) - 1) {
        ssize_t k = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
        if (memchr(buf, '\n', got))
            break;
    }
    close(fd);
    buf[got] = 0;
    int port = atoi(buf);
    if (port <= 0 || port > 65535)
        die("decode did not report its listener port (did it start?)");
    return (uint16_t)port;
}

/* Post and wait; returns ns from post to completion. */
static uint64_t xfer_run(nixl_xfer_t *x, const char *what)
{
    uint64_t t0 = now_ns(), deadline = t0 + WAIT_MS * 1000000ull;
    nixl_status_t s = nixl_xfer_post(x);
    while (s == NIXL_IN_PROG && now_ns() < deadline)
        s = nixl_xfer_status(x);
    check(s, what);
    return now_ns() - t0;
}

/* Timings of one request posted 'posts' times. */
typedef struct timing {
    uint64_t make_ns, first_ns, best_ns;
    uint32_t posts;
} timing_t;

static void timing_add(timing_t *t, uint64_t ns)
{
    if (t->posts++ == 0)
        t->first_ns = t->best_ns = ns;
    else if (ns < t->best_ns)
        t->best_ns = ns;
}

static void print_xfer(const char *title, const nixl_xfer_info_t *info, const timing_t *t)
{
    double b = (double)info->bytes;
    printf("%s\n", title);
    printf("  bytes moved:   %s B (%.1f MiB) per post\n", commas(info->bytes), b / 1048576.0);
    printf("  descriptors:   %s given, %s after merging\n", commas(info->descs_in), commas(info->descs));
    printf("  time:          %.3f ms building the request, %.3f ms inside the last post\n", t->make_ns / 1e6,
           info->post_ns / 1e6);
    printf("  post to done:  %.3f ms the first time (%.2f GB/s)\n", t->first_ns / 1e6,
           t->first_ns ? b / (double)t->first_ns : 0.0);
    if (t->posts > 1)
        printf("                 %.3f ms at best over %u posts of the same request (%.2f GB/s)\n",
               t->best_ns / 1e6, t->posts, t->best_ns ? b / (double)t->best_ns : 0.0);
    printf("  backend, path: %s, %s\n", info->backend, info->path);
}

static void print_stats(nixl_agent_t *a)
{
    enum { CAP = 32 };
    nixl_fallback_stat_t fb[CAP];
    size_t nf = 0;
    check(nixl_fallback_stats(a, fb, CAP, &nf), "nixl_fallback_stats");
    if (nf == 0)
        printf("fallbacks:       none (every request took its intended path)\n");
    for (size_t i = 0; i < nf && i < CAP; i++)
        printf("fallback:        %s taken %s time(s) because %s\n", fb[i].path, commas(fb[i].count), fb[i].cause);
    nixl_path_stat_t ps[CAP];
    size_t np = 0;
    check(nixl_path_stats(a, ps, CAP, &np), "nixl_path_stats");
    for (size_t i = 0; i < np && i < CAP; i++)
        printf("path %-10s  %s requests, %s B, %s descriptors, %s errors, %s fallbacks\n", ps[i].path,
               commas(ps[i].requests), commas(ps[i].bytes), commas(ps[i].descs), commas(ps[i].errors),
               commas(ps[i].fallbacks));
}

static int run_prefill(const opts_t *o)
{
    uint32_t pool_slots = o->tokens * 2, pruns, druns;
    uint64_t n = (uint64_t)o->layers * o->tokens;
    printf("kv_transfer: KV like DeepSeek-V2-Lite: %u layers x %s tokens x %s B per token and layer (page size 1)\n",
           o->layers, commas(o->tokens), commas(SLOT_BYTES));

    int port_fd;
    pid_t child = decode_spawn(o, &port_fd);
    nixl_agent_t *a = agent_make(PREFILL_NAME, 0);
    pool_t kv, scratch;
    pool_make(a, &kv, o->layers, (size_t)pool_slots * SLOT_BYTES);
    pool_make(a, &scratch, 1, (size_t)n * SLOT_BYTES);
    uint32_t *pslot = slots_make(o->tokens, 1, &pruns), *dslot = slots_make(o->tokens, 2, &druns);
    for (uint32_t l = 0; l < o->layers; l++)
        for (uint32_t t = 0; t < o->tokens; t++)
            token_fill(kv.layer[l] + (size_t)pslot[t] * SLOT_BYTES, l, t);
    printf("request slots:   prefill %s runs, decode %s runs (1..64 tokens each) in pools of %s slots\n",
           commas(pruns), commas(druns), commas(pool_slots));

    uint16_t port = port_read(port_fd);
    char name[NIXL_NAME_MAX + 1];
    check(nixl_md_fetch_remote(a, "127.0.0.1", port, name), "fetching decode's metadata");
    check(nixl_md_send_local(a, "127.0.0.1", port), "sending our metadata to decode");
    size_t ml;
    char *m = notif_wait(a, "layout:", &ml);
    if (ml != 7 + (size_t)o->layers * 8)
        die("decode's layout notification has %zu bytes", ml);
    uint64_t *raddr = xcalloc(o->layers, sizeof(*raddr));
    memcpy(raddr, m + 7, (size_t)o->layers * 8);
    free(m);
    printf("metadata:        fetched from %s's listener on port %u, ours sent back\n", name, port);

    /* Every slot of both pools, layer-major: what an engine prepares once. */
    size_t pool_descs = (size_t)o->layers * pool_slots;
    nixl_desc_t *ld = xcalloc(pool_descs, sizeof(*ld)), *rd = xcalloc(pool_descs, sizeof(*rd));
    nixl_desc_t *sd = xcalloc(n, sizeof(*sd));
    for (uint32_t l = 0; l < o->layers; l++) {
        for (uint32_t s = 0; s < pool_slots; s++) {
            size_t i = (size_t)l * pool_slots + s;
            ld[i].addr = (uint64_t)(uintptr_t)kv.layer[l] + (uint64_t)s * SLOT_BYTES;
            rd[i].addr = raddr[l] + (uint64_t)s * SLOT_BYTES;
            ld[i].len = rd[i].len = SLOT_BYTES;
        }
    }
    for (size_t i = 0; i < n; i++) {
        sd[i].addr = (uint64_t)(uintptr_t)scratch.layer[0] + i * SLOT_BYTES;
        sd[i].len = SLOT_BYTES;
    }
    /* This request: token t of layer l, from prefill slot to decode slot. */
    uint32_t *lidx = xcalloc(n, sizeof(*lidx)), *ridx = xcalloc(n, sizeof(*ridx)), *sidx = xcalloc(n, sizeof(*sidx));
    for (uint32_t l = 0; l < o->layers; l++) {
        for (uint32_t t = 0; t < o->tokens; t++) {
            size_t i = (size_t)l * o->tokens + t;
            lidx[i] = l * pool_slots + pslot[t];
            ridx[i] = l * pool_slots + dslot[t];
            sidx[i] = (uint32_t)i;
        }
    }
    nixl_dlist_t ll = {.mem_type = NIXL_MEM_DRAM, .count = pool_descs, .descs = ld};
    nixl_dlist_t rl = {.mem_type = NIXL_MEM_DRAM, .count = pool_descs, .descs = rd};
    nixl_dlist_t sl = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = sd};
    nixl_prep_t *lp = NULL, *rp = NULL, *sp = NULL;
    uint64_t t0 = now_ns();
    if (!o->one_shot) {
        check(nixl_prep_create(a, NULL, &ll, NULL, &lp), "preparing the local pool");
        check(nixl_prep_create(a, DECODE_NAME, &rl, NULL, &rp), "preparing decode's pool");
        check(nixl_prep_create(a, NULL, &sl, NULL, &sp), "preparing the scratch area");
        printf("prepared once:   %s + %s + %s descriptors in %.1f ms (two-step form)\n", commas(pool_descs),
               commas(pool_descs), commas(n), (now_ns() - t0) / 1e6);
    }

    /* WRITE prefill -> decode with a notification. */
    char note[32];
    snprintf(note, sizeof(note), "kv:%u", o->tokens);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = note, .notif_len = strlen(note)};
    nixl_xfer_t *w = NULL;
    t0 = now_ns();
    if (o->one_shot) {
        nixl_desc_t *l1 = xcalloc(n, sizeof(*l1)), *r1 = xcalloc(n, sizeof(*r1));
        for (size_t i = 0; i < n; i++) {
            l1[i] = ld[lidx[i]];
            r1[i] = rd[ridx[i]];
        }
        nixl_dlist_t l1l = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = l1};
        nixl_dlist_t r1l = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = r1};
        check(nixl_xfer_create(a, NIXL_OP_WRITE, &l1l, &r1l, DECODE_NAME, &opt, &w), "creating the WRITE");
        free(l1);
        free(r1);
    } else {
        check(nixl_xfer_make(a, NIXL_OP_WRITE, lp, lidx, rp, ridx, n, &opt, &w), "making the WRITE");
    }
    timing_t tw = {.make_ns = now_ns() - t0};
    /* Request by request, like an engine: the next post waits for decode's
     * answer to the previous one. */
    int decode_ok = 1;
    unsigned long long vbytes = 0, vns = 0;
    char bad_verdict[200] = "";
    for (uint32_t round = 0; round < o->repeat; round++) {
        timing_add(&tw, xfer_run(w, "the WRITE"));
        size_t vl;
        char *verdict = notif_wait(a, "verified:", &vl);
        if (sscanf(verdict, "verified:ok %llu %llu", &vbytes, &vns) != 2) {
            if (decode_ok)
                snprintf(bad_verdict, sizeof(bad_verdict), "%s", verdict + 9);
            decode_ok = 0;
        }
        free(verdict);
    }
    nixl_xfer_info_t info;
    check(nixl_xfer_info(w, &info), "nixl_xfer_info");
    printf("\n");
    print_xfer("WRITE prefill -> decode, with a notification", &info, &tw);
    nixl_xfer_release(w);
    if (decode_ok)
        printf("  decode:        verified all %s B each time the notification arrived (%.1f ms to check)\n",
               commas(vbytes), vns / 1e6);
    else
        printf("  decode:        %s\n", bad_verdict);

    /* READ decode -> a scratch area here, and check it. */
    nixl_xfer_t *r = NULL;
    t0 = now_ns();
    if (o->one_shot) {
        nixl_desc_t *r1 = xcalloc(n, sizeof(*r1));
        for (size_t i = 0; i < n; i++)
            r1[i] = rd[ridx[i]];
        nixl_dlist_t r1l = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = r1};
        check(nixl_xfer_create(a, NIXL_OP_READ, &sl, &r1l, DECODE_NAME, NULL, &r), "creating the READ");
        free(r1);
    } else {
        check(nixl_xfer_make(a, NIXL_OP_READ, sp, sidx, rp, ridx, n, NULL, &r), "making the READ");
    }
    timing_t tr = {.make_ns = now_ns() - t0};
    for (uint32_t round = 0; round < o->repeat; round++)
        timing_add(&tr, xfer_run(r, "the READ"));
    check(nixl_xfer_info(r, &info), "nixl_xfer_info");
    printf("\n");
    print_xfer("READ decode -> prefill scratch area", &info, &tr);
    nixl_xfer_release(r);
    uint8_t want[SLOT_BYTES];
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        token_fill(want, (uint32_t)(i / o->tokens), (uint32_t)(i % o->tokens));
        if (memcmp(scratch.layer[0] + i * SLOT_BYTES, want, SLOT_BYTES) != 0 && bad++ == 0)
            printf("  prefill:       layer %zu token %zu differs after the READ\n", i / o->tokens, i % o->tokens);
    }
    if (bad == 0)
        printf("  prefill:       verified all %s B read back\n", commas(n * SLOT_BYTES));
    else
        printf("  prefill:       %s of %s tokens differ\n", commas(bad), commas(n));

    check(nixl_notif_send(a, DECODE_NAME, "done", 4, NULL), "telling decode we are done");
    printf("\n");
    print_stats(a);

    int ws = 0;
    while (waitpid(child, &ws, 0) < 0 && errno == EINTR)
        ;
    int child_ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    if (!child_ok)
        printf("decode process:  ended badly (%s %d)\n", WIFSIGNALED(ws) ? "signal" : "exit status",
               WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));

    if (sp)
        nixl_prep_release(sp);
    if (rp)
        nixl_prep_release(rp);
    if (lp)
        nixl_prep_release(lp);
    free(lidx);
    free(ridx);
    free(sidx);
    free(ld);
    free(rd);
    free(sd);
    free(raddr);
    free(pslot);
    free(dslot);
    pool_drop(a, &scratch);
    pool_drop(a, &kv);
    nixl_agent_destroy(a);
    int ok = decode_ok && bad == 0 && child_ok;
    printf("result:          %s\n", ok ? "OK, every byte arrived and came back intact" : "FAILED");
    return ok ? 0 : 1;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--tokens N] [--layers L] [--repeat R] [--one-shot]\n"
            "  Moves one request's KV cache (L layers, default 27, x N tokens, default 8192,\n"
            "  1,152 B per token and layer) from this process to a decode process it starts.\n"
            "  --repeat posts the WRITE and the READ R times (default 3): the first post pays\n"
            "  for mapping and faulting in memory, later ones show the steady state.\n"
            "  --one-shot builds each request with nixl_xfer_create instead of prepared lists.\n",
            argv0);
}

int main(int argc, char **argv)
{
    opts_t o = {.layers = 27, .tokens = 8192, .repeat = 3, .ctl_fd = -1};
    int decode = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--one-shot") == 0) {
            o.one_shot = 1;
        } else if (strcmp(a, "--role") == 0 && v && strcmp(v, "decode") == 0) {
            decode = 1;
            i++;
        } else if (strcmp(a, "--ctl-fd") == 0 && v) {
            o.ctl_fd = atoi(v);
            i++;
        } else if (strcmp(a, "--tokens") == 0 && v) {
            o.tokens = (uint32_t)strtoul(v, NULL, 10);
            i++;
        } else if (strcmp(a, "--repeat") == 0 && v) {
            o.repeat = (uint32_t)strtoul(v, NULL, 10);
            i++;
        } else if (strcmp(a, "--layers") == 0 && v) {
            o.layers = (uint32_t)strtoul(v, NULL, 10);
            i++;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    /* Index arrays are 32-bit: keep layers x 2 x tokens below 2^32. */
    if (o.tokens == 0 || o.layers == 0 || o.repeat == 0 || o.tokens > (1u << 22) || o.layers > 256) {
        usage(argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (decode) {
        if (o.ctl_fd < 0)
            die("--ctl-fd is required with --role decode");
        return run_decode(&o);
    }
    return run_prefill(&o);
}
