/*
 * netns_peer.c - one side of the two-host tests (twohost.sh, netfaults.sh),
 * public API only, for any cross-host backend.  Every role takes the
 * backend and how to make it:
 *
 *   --backend NAME     the backend (libfabric, ucx, ...)
 *   --param KEY=VALUE  a parameter of its create (repeatable)
 *   --env KEY=VALUE    set in the environment before the first agent
 *                      (repeatable: UCX_TLS=tcp, UCX_NET_DEVICES=...)
 *   --path PATH        the path a transfer must report (transfer mode)
 *
 * "@IF" in a parameter's or variable's value stands for --iface, the
 * interface of this side's namespace (each side has its own).  Values
 * may not hold spaces (the scripts pass them on as words).
 *
 *   netns_peer target    --iface IF [--size BYTES]
 *       Listens for metadata (prints "ready PORT PID BUF"), registers a
 *       buffer (zeros) and checks it each time a notification arrives:
 *       "chk SEED" (the KV layout below, over the whole buffer) or
 *       "rng SEED OFF LEN" (LEN bytes at OFF hold SEED's pattern from its
 *       start); prints "verified SEED" or "corrupt SEED OFFSET holds=WHOSE"
 *       (the seed whose bytes are there, zero or unknown); "quit" ends it;
 *       any other notification is printed as "notif TEXT (from SENDER)".
 *
 *   netns_peer initiator --iface IF --peer IP:PORT --path PATH [--size BYTES]
 *       Writes KV-shaped pieces (many descriptors, spread over the target's
 *       buffer) with a notification, waits for the target's verdict in the
 *       file NETNS_PEER_LOG (when set), reads them back and compares, checks
 *       the path; twice, with seeds 11 and 12.
 *
 *   netns_peer initiator ... --fault CMD [--requests N] [--error-ms MS]
 *                     [--undo CMD --undo-after MS] [--wait-ms MS]
 *       After a first small WRITE (the connection is up), posts N large
 *       WRITEs (each notified "rng") and READs over a slowed link, runs CMD
 *       (kill the target, take the link down) and requires every request
 *       to end in an error within --error-ms (2000) of the fault; with
 *       --undo, CMD is undone that long after it (the link comes back) and
 *       a request may instead succeed after that, its bytes right (a WRITE
 *       verified by the target at its notification, a READ compared), and
 *       one that fails must end NIXL_ERR_PEER_GONE (a link that came back
 *       has no other honest error).
 *       Nothing may still run --wait-ms (4000) after the fault, no failed
 *       WRITE may have been notified (NETNS_PEER_LOG), and a new request
 *       afterwards fails within --error-ms when one failed, else succeeds.
 *       Exit 0 when all held, 1 otherwise.
 *
 *   netns_peer initiator ... --stream SECONDS [--bound MS] [--deadline MS]
 *       (netfaults.sh) KV-shaped WRITEs with "chk SEED" and READs back, one
 *       after the other for SECONDS, while the script injects network faults.
 *       --deadline gives every request that NIXL_OPT_TIMEOUT_MS.
 *       Each request must end within --bound ms (success or an error); after
 *       a WRITE succeeds the target's "verified SEED" line must appear in the
 *       file NETNS_PEER_LOG (the target's output) before the buffer is reused.
 *       A request still running at the bound is released (given up).
 *       Prints "failed SEED STATUS MS" (MS from the post) per failed or given-up WRITE and a
 *       "stream:" line of counts; exit 0 when no READ mismatched, no
 *       successful WRITE went unverified and no release took over the bound.
 *
 * The test scripts run the two in separate network namespaces.
 */
#include <errno.h>
#include <sys/types.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        fprintf(stderr, "netns_peer: FAILED: " __VA_ARGS__);                                      \
        fputc('\n', stderr);                                                                      \
        exit(1);                                                                                  \
    } while (0)

#define CALL(expr)                                                                                \
    do {                                                                                          \
        nixl_status_t st_ = (expr);                                                               \
        if (st_ != NIXL_OK)                                                                       \
            FAIL("%s: %s", #expr, nixl_status_name(st_));                                         \
    } while (0)

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static uint8_t pattern(uint64_t seed, uint64_t i)
{
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (i >> 3) * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (uint8_t)(x >> ((i & 7) * 8));
}

/* KV-shaped layout: piece i of the initiator lands at slot perm(i) of the
 * target; pieces are PIECE bytes. */
#define PIECE 4096u
static size_t slot_of(size_t i, size_t n)
{
    return (i * 7919u + 13u) % n; /* a permutation when n is not a multiple of 7919 */
}

#define MAX_KV 16

typedef struct opts {
    const char *role, *iface, *peer, *fault, *undo;
    const char *backend, *path;
    const char *params[MAX_KV], *envs[MAX_KV]; /* KEY=VALUE, "@IF" not yet replaced */
    unsigned nparams, nenvs;
    size_t size;
    unsigned requests;
    unsigned error_ms, undo_after_ms, wait_ms; /* --fault */
    unsigned stream_s, bound_ms;               /* --stream, --bound (netfaults.sh) */
    unsigned deadline_ms;                      /* --deadline: NIXL_OPT_TIMEOUT_MS of each request (0: none) */
} opts_t;

/* KEY=VALUE with every "@IF" of VALUE replaced by iface: the key and the
 * value in out (NUL between them); the value is returned. */
static const char *kv_split(const char *kv, const char *iface, char *out, size_t cap)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        FAIL("KEY=VALUE expected, got \"%s\"", kv);
    size_t n = 0;
    for (const char *c = kv; *c; c++) {
        const char *piece = c == eq ? "" : c;
        size_t len = 1;
        if (c > eq && strncmp(c, "@IF", 3) == 0) {
            piece = iface;
            len = strlen(iface);
            c += 2;
        }
        if (n + len + 1 > cap)
            FAIL("\"%s\" is too long", kv);
        memcpy(out + n, piece, len);
        n += len;
    }
    out[n] = 0;
    return out + (eq - kv) + 1;
}

static nixl_agent_t *agent_make(const char *name, const opts_t *o, int listen)
{
    char buf[MAX_KV][256];
    nixl_param_t p[MAX_KV];
    static int env_set;
    if (!env_set) {
        env_set = 1;
        for (unsigned i = 0; i < o->nenvs; i++) {
            const char *v = kv_split(o->envs[i], o->iface, buf[0], sizeof(buf[0]));
            if (setenv(buf[0], v, 1) != 0)
                FAIL("setenv %s: %s", buf[0], strerror(errno));
        }
    }
    for (unsigned i = 0; i < o->nparams; i++) {
        p[i].value = kv_split(o->params[i], o->iface, buf[i], sizeof(buf[i]));
        p[i].key = buf[i];
    }
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN, .name = name,
                               .listen = listen};
    nixl_agent_t *a;
    CALL(nixl_agent_create(&cfg, &a));
    nixl_backend_t *b;
    nixl_status_t st = nixl_backend_create(a, o->backend, o->nparams ? p : NULL, o->nparams, &b);
    if (st == NIXL_ERR_UNKNOWN_BACKEND || st == NIXL_ERR_NOT_SUPPORTED) {
        /* Not built, or nothing it can use here (its log line above says why). */
        printf("SKIP: the %s backend cannot be created here: %s\n", o->backend, nixl_status_name(st));
        exit(77);
    }
    if (st != NIXL_OK)
        FAIL("nixl_backend_create(%s): %s", o->backend, nixl_status_name(st));
    return a;
}

static void reg(nixl_agent_t *a, void *p, size_t len)
{
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)p, .len = len};
    nixl_dlist_t dl = {.mem_type = NIXL_MEM_DRAM, .count = 1, .descs = &d};
    CALL(nixl_mem_register(a, &dl, NULL));
}

static void dereg(nixl_agent_t *a, void *p, size_t len)
{
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)p, .len = len};
    nixl_dlist_t dl = {.mem_type = NIXL_MEM_DRAM, .count = 1, .descs = &d};
    CALL(nixl_mem_deregister(a, &dl, NULL));
}

/* ---- target ---- */

typedef struct tstate {
    uint8_t *buf;
    size_t len;
    int quit;
} tstate_t;

/* Whose bytes the 8-byte word at piece offset j (slot bytes w) holds: a
 * seed's pattern (searched from 1 up to 100000: transfer mode's 11 and 12,
 * the fault round's from 21,
 * the stream's from 100),
 * 0 for the zeros the buffer started with, -1 for neither.  Tells a
 * notification that overtook its data (older bytes) from a late one
 * whose region a later WRITE already rewrote. */
static long long holder_of(const uint8_t *w, uint64_t j)
{
    uint64_t base = j & ~7ull;
    int zero = 1;
    for (unsigned b = 0; b < 8; b++)
        zero &= w[b] == 0;
    for (uint64_t s = 1; s < 100000; s++) {
        unsigned b = 0;
        while (b < 8 && w[b] == pattern(s, base + b))
            b++;
        if (b == 8)
            return (long long)s;
    }
    return zero ? 0 : -1;
}

/* Whether len bytes at dst hold seed's pattern from index idx on; prints
 * the corrupt line (and returns 0) at the first byte that does not. */
static int verify_bytes(const tstate_t *t, const uint8_t *dst, uint64_t idx, size_t len, unsigned long long seed,
                        const char *sender)
{
    for (size_t k = 0; k < len; k++) {
        if (dst[k] == pattern(seed, idx + k))
            continue;
        long long h = holder_of(dst + (k & ~(size_t)7), idx + k);
        char holds[32];
        if (h > 0)
            snprintf(holds, sizeof(holds), "%lld", h);
        else
            snprintf(holds, sizeof(holds), "%s", h == 0 ? "zero" : "unknown");
        printf("corrupt %llu %zu holds=%s (from %s)\n", seed, (size_t)(dst + k - t->buf), holds, sender);
        fflush(stdout);
        return 0;
    }
    return 1;
}

static void on_target_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    tstate_t *t = arg;
    char text[64];
    size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;
    memcpy(text, msg, n);
    text[n] = 0;
    unsigned long long seed;
    size_t off, rlen;
    if (strcmp(text, "quit") == 0) {
        t->quit = 1;
        return;
    }
    if (sscanf(text, "rng %llu %zu %zu", &seed, &off, &rlen) == 3 && off % 8 == 0 &&
        rlen % 8 == 0 && off <= t->len && rlen <= t->len - off) {
        if (!verify_bytes(t, t->buf + off, 0, rlen, seed, sender))
            return;
    } else if (sscanf(text, "chk %llu", &seed) == 1) {
        size_t np = t->len / PIECE;
        for (size_t i = 0; i < np; i++)
            if (!verify_bytes(t, t->buf + slot_of(i, np) * PIECE, i * PIECE, PIECE, seed, sender))
                return;
    } else {
        /* Anything else is shown for the scripts to count. */
        printf("notif %s (from %s)\n", text, sender);
        fflush(stdout);
        return;
    }
    printf("verified %llu (from %s)\n", seed, sender);
    fflush(stdout);
}

static int run_target(const opts_t *o)
{
    nixl_agent_t *a = agent_make("netns-target", o, 1);
    tstate_t t = {.len = o->size};
    if (posix_memalign((void **)&t.buf, 4096, t.len))
        FAIL("out of memory");
    memset(t.buf, 0, t.len);
    reg(a, t.buf, t.len);
    printf("ready %u %d %" PRIu64 "\n", (unsigned)nixl_agent_listen_port(a), (int)getpid(),
           (uint64_t)(uintptr_t)t.buf);
    fflush(stdout);
    while (!t.quit) {
        CALL(nixl_notifs_get(a, on_target_notif, &t, NULL));
        sleep_ms(1);
    }
    dereg(a, t.buf, t.len);
    nixl_agent_destroy(a);
    free(t.buf);
    return 0;
}

/* ---- initiator ---- */

typedef struct conn {
    nixl_agent_t *a;
    char peer[NIXL_NAME_MAX + 1];
    uint64_t raddr;
} conn_t;

static void connect_peer(conn_t *c, const opts_t *o)
{
    char ip[64];
    unsigned port;
    const char *colon = strrchr(o->peer, ':');
    if (!colon || (size_t)(colon - o->peer) >= sizeof(ip) || sscanf(colon + 1, "%u", &port) != 1)
        FAIL("--peer IP:PORT expected, got %s", o->peer);
    memcpy(ip, o->peer, (size_t)(colon - o->peer));
    ip[colon - o->peer] = 0;
    /* The fault scripts spare the listener's port (netfaults.sh: its
     * rule accepts that port first), so the exchange must succeed.  It
     * failed under loss only while the rule did not spare it (nft merged
     * "dport != P sport != P" into one comparison): no retry here, a
     * failure is a failure. */
    nixl_status_t st = nixl_md_fetch_remote(c->a, ip, (uint16_t)port, c->peer);
    if (st != NIXL_OK)
        FAIL("nixl_md_fetch_remote(%s): %s", o->peer, nixl_status_name(st));
}

static nixl_status_t wait_xfer(nixl_xfer_t *x, unsigned timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    nixl_status_t st;
    while ((st = nixl_xfer_status(x)) == NIXL_IN_PROG && now_ms() < deadline)
        sleep_ms(0);
    return st;
}

static int stream_verdict(FILE *log, uint64_t seed, unsigned timeout_ms);

/* The target's output (NETNS_PEER_LOG), opened once; NULL when not given. */
static FILE *verdict_log(void)
{
    static FILE *log;
    static int tried;
    if (!tried) {
        tried = 1;
        const char *path = getenv("NETNS_PEER_LOG");
        if (path && !(log = fopen(path, "r")))
            FAIL("cannot open NETNS_PEER_LOG %s", path);
    }
    return log;
}

static void kv_round(conn_t *c, const opts_t *o, uint8_t *lbuf, uint8_t *back, uint64_t seed)
{
    size_t np = o->size / PIECE;
    nixl_desc_t *ld = calloc(np, sizeof(*ld)), *rd = calloc(np, sizeof(*rd)), *bd = calloc(np, sizeof(*bd));
    if (!ld || !rd || !bd)
        FAIL("out of memory");
    for (size_t i = 0; i < np; i++) {
        for (size_t k = 0; k < PIECE; k++)
            lbuf[i * PIECE + k] = pattern(seed, i * PIECE + k);
        ld[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)lbuf + i * PIECE, .len = PIECE};
        bd[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)back + i * PIECE, .len = PIECE};
        rd[i] = (nixl_desc_t){.addr = c->raddr + slot_of(i, np) * PIECE, .len = PIECE};
    }
    nixl_dlist_t ll = {NIXL_MEM_DRAM, np, ld}, rl = {NIXL_MEM_DRAM, np, rd}, bl = {NIXL_MEM_DRAM, np, bd};
    char text[64];
    snprintf(text, sizeof(text), "chk %" PRIu64, seed);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = text, .notif_len = strlen(text)};
    nixl_xfer_t *x;
    uint64_t t0 = now_ms();
    CALL(nixl_xfer_create(c->a, NIXL_OP_WRITE, &ll, &rl, c->peer, &opt, &x));
    nixl_status_t st = nixl_xfer_post(x);
    if (st != NIXL_OK && st != NIXL_IN_PROG)
        FAIL("post: %s", nixl_status_name(st));
    CALL(wait_xfer(x, 30000));
    nixl_xfer_info_t info;
    CALL(nixl_xfer_info(x, &info));
    printf("write: %zu pieces of %u bytes, %" PRIu64 " ms, path %s\n", np, PIECE, now_ms() - t0, info.path);
    if (!o->path)
        FAIL("--path (the path the transfer must take) is required");
    if (strcmp(info.path, o->path) != 0)
        FAIL("path %s, want %s", info.path, o->path);
    nixl_xfer_release(x);
    /* The target checks its buffer when the notification arrives; the next
     * WRITE must not rewrite it before then (it once did, under load: the
     * check of seed 11 saw seed 12's bytes, which the library never
     * promised against). */
    FILE *log = verdict_log();
    if (log) {
        int v = stream_verdict(log, seed, 10000);
        if (v == 0)
            FAIL("the target found WRITE %" PRIu64 " incomplete when its notification arrived (its corrupt line "
                 "above): a notification ahead of its data",
                 seed);
        if (v < 0)
            FAIL("the target reported nothing on WRITE %" PRIu64 " within 10 s of its completion", seed);
        printf("target: WRITE %" PRIu64 " verified at its notification\n", seed);
    }

    memset(back, 0, o->size);
    CALL(nixl_xfer_create(c->a, NIXL_OP_READ, &bl, &rl, c->peer, NULL, &x));
    st = nixl_xfer_post(x);
    if (st != NIXL_OK && st != NIXL_IN_PROG)
        FAIL("post: %s", nixl_status_name(st));
    CALL(wait_xfer(x, 30000));
    if (memcmp(back, lbuf, o->size) != 0)
        FAIL("read back differs from what was written");
    printf("read back: every byte as written\n");
    nixl_xfer_release(x);
    free(ld);
    free(rd);
    free(bd);
}

/* Requests in flight when the fault hits (the header: --fault). */
static int fault_round(conn_t *c, const opts_t *o, uint8_t *lbuf)
{
    unsigned n = o->requests;
    size_t part = (o->size / n) & ~(size_t)(PIECE - 1);
    nixl_xfer_t **x = calloc(n, sizeof(*x));
    nixl_status_t *end = calloc(n, sizeof(*end));
    FILE *log = verdict_log();
    if (!x || !end)
        FAIL("out of memory");
    if (!log)
        FAIL("NETNS_PEER_LOG (the target's output file) is not set");
    /* The fault is for a connection in use, set up by a first WRITE: a
     * fault that cut its handshake short would test that instead
     * (libfabric under the sanitizer build, 1 of 5 linkdown runs: the
     * handshake still unanswered 300 ms after the posts, every request
     * TIMEOUT). */
    {
        nixl_desc_t l = {.addr = (uint64_t)(uintptr_t)lbuf, .len = PIECE}, r = {.addr = c->raddr, .len = PIECE};
        nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &l}, rl = {NIXL_MEM_DRAM, 1, &r};
        nixl_xfer_t *w;
        CALL(nixl_xfer_create(c->a, NIXL_OP_WRITE, &ll, &rl, c->peer, NULL, &w));
        nixl_status_t st = nixl_xfer_post(w);
        if (st == NIXL_IN_PROG)
            st = wait_xfer(w, 10000);
        if (st != NIXL_OK)
            FAIL("warm-up WRITE before the fault: %s", nixl_status_name(st));
        nixl_xfer_release(w);
    }
    /* WRITE i (even) carries seed 21 + i, checked by the target at its
     * notification; READ i (odd) reads a region nobody writes: the
     * target's zeros, over a local part filled with something else. */
    for (unsigned i = 0; i < n; i++) {
        uint8_t *lp = lbuf + i * part;
        int w = i % 2 == 0;
        for (size_t k = 0; k < part; k++)
            lp[k] = w ? pattern(21 + i, k) : 0xa5;
        nixl_desc_t l = {.addr = (uint64_t)(uintptr_t)lp, .len = part};
        nixl_desc_t r = {.addr = c->raddr + i * part, .len = part};
        nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &l}, rl = {NIXL_MEM_DRAM, 1, &r};
        char text[64];
        snprintf(text, sizeof(text), "rng %u %zu %zu", 21 + i, i * part, part);
        nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = text, .notif_len = strlen(text)};
        CALL(nixl_xfer_create(c->a, w ? NIXL_OP_WRITE : NIXL_OP_READ, &ll, &rl, c->peer, w ? &opt : NULL, &x[i]));
        nixl_status_t st = nixl_xfer_post(x[i]);
        if (st != NIXL_IN_PROG)
            FAIL("request %u: post returned %s, want it in flight (is the link slowed down?)", i,
                 nixl_status_name(st));
        end[i] = NIXL_IN_PROG;
    }
    sleep_ms(300);
    for (unsigned i = 0; i < n; i++)
        if (nixl_xfer_status(x[i]) != NIXL_IN_PROG)
            FAIL("request %u ended before the fault: slow the link down more", i);
    uint64_t t0 = now_ms(), undone_at = 0;
    if (system(o->fault) != 0)
        FAIL("fault command failed: %s", o->fault);
    printf("fault: %s\n", o->fault);
    int bad = 0;
    unsigned left = n, succeeded = 0, failed = 0, late = 0, early = 0, gone = 0, other = 0;
    uint64_t worst = 0;
    while (left && now_ms() - t0 < o->wait_ms) {
        if (o->undo && !undone_at && now_ms() - t0 >= o->undo_after_ms) {
            if (system(o->undo) != 0)
                FAIL("undo command failed: %s", o->undo);
            undone_at = now_ms() - t0;
            printf("undo after %" PRIu64 " ms: %s\n", undone_at, o->undo);
        }
        for (unsigned i = 0; i < n; i++) {
            if (!x[i])
                continue;
            nixl_status_t st = nixl_xfer_status(x[i]);
            if (st == NIXL_IN_PROG)
                continue;
            uint64_t ms = now_ms() - t0;
            const char *why = "";
            if (st == NIXL_OK) {
                succeeded++;
                /* Only a repaired fault lets a request through. */
                if (!undone_at) {
                    early++;
                    bad = 1;
                    why = " (a success while the fault stood)";
                }
            } else {
                failed++;
                gone += st == NIXL_ERR_PEER_GONE;
                if (ms > o->error_ms) {
                    late++;
                    bad = 1;
                    why = " (later than --error-ms)";
                } else if (o->undo && st != NIXL_ERR_PEER_GONE) {
                    other++;
                    bad = 1;
                    why = " (with --undo a failure must be NIXL_ERR_PEER_GONE)";
                }
            }
            printf("request %u (%s): %s after %" PRIu64 " ms%s\n", i, i % 2 ? "read" : "write", nixl_status_name(st),
                   ms, why);
            if (ms > worst)
                worst = ms;
            end[i] = st;
            nixl_xfer_release(x[i]);
            x[i] = NULL;
            left--;
        }
        sleep_ms(1);
    }
    if (left) {
        printf("%u request(s) still in flight %u ms after the fault\n", left, o->wait_ms);
        bad = 1;
        for (unsigned i = 0; i < n; i++)
            if (x[i])
                nixl_xfer_release(x[i]);
    }
    if (o->undo && !undone_at) {
        if (system(o->undo) != 0)
            FAIL("undo command failed: %s", o->undo);
        printf("undo (every request had ended): %s\n", o->undo);
    }
    /* Bytes of every success; no notification of a failed WRITE (the
     * target prints a verdict for every "rng" it gets; 1 s for a late one). */
    unsigned wrong_bytes = 0, wrong_notifs = 0;
    sleep_ms(1000);
    for (unsigned i = 0; i < n; i++) {
        const uint8_t *lp = lbuf + i * part;
        if (i % 2 == 1) {
            size_t k = 0;
            while (end[i] == NIXL_OK && k < part && lp[k] == 0)
                k++;
            if (end[i] == NIXL_OK && k < part) {
                printf("request %u (read): succeeded, but byte %zu is 0x%02x, want the target's 0\n", i, k, lp[k]);
                wrong_bytes++;
            }
            continue;
        }
        rewind(log);
        int v = stream_verdict(log, 21 + i, end[i] == NIXL_OK ? 10000 : 0);
        if (end[i] == NIXL_OK && v != 1) {
            printf("request %u (write): succeeded, but the target %s\n", i,
                   v == 0 ? "found its bytes wrong at its notification (corrupt line above)"
                          : "reported nothing on it within 10 s");
            wrong_bytes++;
        } else if (end[i] != NIXL_OK && v >= 0) {
            printf("request %u (write): failed (%s), but the target was notified of it\n", i,
                   nixl_status_name(end[i]));
            wrong_notifs++;
        }
    }
    bad |= wrong_bytes || wrong_notifs;
    /* A new request: when every request got through, it does too; else
     * it fails within --error-ms, refused at once or (a backend that
     * tries the peer again: libfabric after it reset the connection
     * itself) at the end of that try. */
    nixl_desc_t l = {.addr = (uint64_t)(uintptr_t)lbuf, .len = PIECE}, r = {.addr = c->raddr, .len = PIECE};
    nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &l}, rl = {NIXL_MEM_DRAM, 1, &r};
    nixl_xfer_t *y;
    const char *new_req = "could not be made";
    nixl_status_t st = nixl_xfer_create(c->a, NIXL_OP_WRITE, &ll, &rl, c->peer, NULL, &y);
    if (st == NIXL_OK)
        st = nixl_xfer_post(y);
    else
        y = NULL;
    char tried[64] = "";
    if (failed) {
        uint64_t t1 = now_ms();
        int retry = st == NIXL_IN_PROG;
        if (retry) {
            st = wait_xfer(y, o->error_ms);
            snprintf(tried, sizeof(tried), ", %" PRIu64 " ms after its post", now_ms() - t1);
        }
        new_req = st >= 0  ? "did not fail within --error-ms"
                  : retry ? "failed, trying the peer again"
                          : "refused at once";
        bad |= st >= 0;
    } else {
        st = st == NIXL_IN_PROG ? wait_xfer(y, 10000) : st;
        new_req = st == NIXL_OK ? "succeeded, as it must" : "did not succeed";
        bad |= st != NIXL_OK;
    }
    printf("new request after the fault: %s%s (%s)\n", nixl_status_name(st), tried, new_req);
    if (y)
        nixl_xfer_release(y);
    if (bad)
        printf("FAILED: of %u requests in flight at the fault %u succeeded (%u while the fault stood), %u failed "
               "(%u later than %u ms, %u not PEER_GONE after an undo), %u were still in flight at %u ms, %u "
               "succeeded with wrong bytes, %u failed WRITEs were notified; a new request after it %s\n",
               n, succeeded, early, failed, late, o->error_ms, other, left, o->wait_ms, wrong_bytes, wrong_notifs,
               new_req);
    else
        printf("ok: %u failed (%u NIXL_ERR_PEER_GONE), %u succeeded%s, every one ended within %" PRIu64
               " ms of the fault\n",
               failed, gone, succeeded, o->undo ? " after the undo" : "", worst);
    free(x);
    free(end);
    return bad;
}

/* ---- stream under network faults (netfaults.sh) ---- */

typedef struct stream_stats {
    unsigned ok[2], err[2], hung, mismatch, verified, corrupt, missing;
    unsigned codes[128]; /* failed requests by -status */
    uint64_t max_ok_ms, max_release_ms, err_ms[4096];
    unsigned nerr_ms;
} stream_stats_t;

/* Waits for the target's verdict on seed in its output file: 1 verified,
 * 0 corrupt, -1 none within timeout_ms.  The stream's position carries over
 * from one call to the next. */
static int stream_verdict(FILE *log, uint64_t seed, unsigned timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    /* Lines of any length: the target's log also holds the library's
     * warnings (a fixed buffer once read the first part of a long one as a
     * line still being written, and waited on it for ever). */
    static char *line;
    static size_t cap;
    unsigned long long s;
    for (;;) {
        ssize_t n;
        while ((n = getline(&line, &cap, log)) > 0) {
            if (line[n - 1] != '\n') { /* the target is still writing it */
                fseek(log, -(long)n, SEEK_CUR);
                break;
            }
            if (sscanf(line, "verified %llu", &s) == 1 && s == seed)
                return 1;
            if (sscanf(line, "corrupt %llu", &s) == 1 && s == seed)
                return 0;
        }
        clearerr(log);
        if (now_ms() >= deadline)
            return -1;
        sleep_ms(1);
    }
}

/* Create, post and wait up to the bound; the request is released. */
static nixl_status_t stream_xfer(conn_t *c, const opts_t *o, nixl_op_t op, const nixl_dlist_t *l,
                                 const nixl_dlist_t *r, const char *notif, stream_stats_t *ss, uint64_t seed)
{
    nixl_opt_args_t opt = {.field_mask = notif ? NIXL_OPT_NOTIF : 0, .notif = notif,
                           .notif_len = notif ? strlen(notif) : 0};
    if (o->deadline_ms) {
        opt.field_mask |= NIXL_OPT_TIMEOUT_MS;
        opt.timeout_ms = o->deadline_ms;
    }
    nixl_xfer_t *x = NULL;
    /* Times count from the post, as the deadline does (api.md): the first
     * create also resolves the peer, which the sanitizer build makes slow. */
    uint64_t t0 = now_ms();
    nixl_status_t st = nixl_xfer_create(c->a, op, l, r, c->peer, opt.field_mask ? &opt : NULL, &x);
    if (st == NIXL_OK) {
        t0 = now_ms();
        st = nixl_xfer_post(x);
    }
    while (st == NIXL_IN_PROG && now_ms() - t0 < o->bound_ms)
        st = wait_xfer(x, 10);
    uint64_t ms = now_ms() - t0;
    int w = op == NIXL_OP_WRITE;
    if (st == NIXL_IN_PROG) {
        /* The caller gives up: release cancels it (its notification must never arrive). */
        uint64_t t1 = now_ms();
        nixl_xfer_release(x);
        x = NULL;
        uint64_t rel = now_ms() - t1;
        printf("hung %" PRIu64 " %s still in flight after %u ms; released in %" PRIu64 " ms\n", seed,
               w ? "write" : "read", o->bound_ms, rel);
        ss->hung++;
        if (rel > ss->max_release_ms)
            ss->max_release_ms = rel;
        if (w)
            printf("failed %" PRIu64 " RELEASED %" PRIu64 "\n", seed, ms);
    } else if (st == NIXL_OK) {
        ss->ok[w]++;
        if (ms > ss->max_ok_ms)
            ss->max_ok_ms = ms;
    } else {
        ss->err[w]++;
        ss->codes[st > -128 ? -st : 127]++;
        if (ss->nerr_ms < sizeof(ss->err_ms) / sizeof(ss->err_ms[0]))
            ss->err_ms[ss->nerr_ms++] = ms;
        if (w)
            printf("failed %" PRIu64 " %s %" PRIu64 "\n", seed, nixl_status_name(st), ms);
    }
    if (x)
        nixl_xfer_release(x);
    return st;
}

static int cmp_ms(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int stream_run(conn_t *c, const opts_t *o, uint8_t *lbuf, uint8_t *back)
{
    FILE *log = verdict_log();
    if (!log)
        FAIL("NETNS_PEER_LOG (the target's output file) is not set");
    size_t np = o->size / PIECE;
    nixl_desc_t *ld = calloc(np, sizeof(*ld)), *rd = calloc(np, sizeof(*rd)), *bd = calloc(np, sizeof(*bd));
    stream_stats_t *ss = calloc(1, sizeof(*ss));
    if (!ld || !rd || !bd || !ss)
        FAIL("out of memory");
    for (size_t i = 0; i < np; i++) {
        ld[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)lbuf + i * PIECE, .len = PIECE};
        bd[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)back + i * PIECE, .len = PIECE};
        rd[i] = (nixl_desc_t){.addr = c->raddr + slot_of(i, np) * PIECE, .len = PIECE};
    }
    nixl_dlist_t ll = {NIXL_MEM_DRAM, np, ld}, rl = {NIXL_MEM_DRAM, np, rd}, bl = {NIXL_MEM_DRAM, np, bd};
    uint64_t end = now_ms() + (uint64_t)o->stream_s * 1000u;
    for (uint64_t seed = 100; now_ms() < end; seed++) {
        for (size_t i = 0; i < np; i++)
            for (size_t k = 0; k < PIECE; k++)
                lbuf[i * PIECE + k] = pattern(seed, i * PIECE + k);
        char text[64];
        snprintf(text, sizeof(text), "chk %" PRIu64, seed);
        nixl_status_t st = stream_xfer(c, o, NIXL_OP_WRITE, &ll, &rl, text, ss, seed);
        if (st != NIXL_OK) {
            sleep_ms(100); /* a refused peer fails at once: do not spin */
            continue;
        }
        /* The target checks the whole buffer at the notification: wait for
         * its verdict before the next WRITE rewrites it. */
        int v = stream_verdict(log, seed, 10000);
        ss->verified += v == 1;
        ss->corrupt += v == 0;
        ss->missing += v < 0;
        if (v < 0)
            printf("missing %" PRIu64 ": WRITE succeeded, the target reported nothing in 10 s\n", seed);
        memset(back, 0, o->size);
        if (stream_xfer(c, o, NIXL_OP_READ, &bl, &rl, NULL, ss, seed) == NIXL_OK &&
            memcmp(back, lbuf, o->size) != 0) {
            printf("mismatch %" PRIu64 ": read back differs from what was written\n", seed);
            ss->mismatch++;
        }
    }
    char codes[512] = "";
    size_t off = 0;
    for (int i = 0; i < 128; i++)
        if (ss->codes[i])
            off += (size_t)snprintf(codes + off, sizeof(codes) - off, " %s=%u",
                                    i == 127 ? "other" : nixl_status_name((nixl_status_t)-i), ss->codes[i]);
    qsort(ss->err_ms, ss->nerr_ms, sizeof(ss->err_ms[0]), cmp_ms);
    printf("stream: writes ok=%u err=%u, reads ok=%u err=%u, errors:%s; hung=%u (released in max %" PRIu64
           " ms) mismatch=%u verified=%u corrupt=%u missing=%u; time to error max=%" PRIu64 " median=%" PRIu64
           " ms, slowest success %" PRIu64 " ms\n",
           ss->ok[1], ss->err[1], ss->ok[0], ss->err[0], off ? codes : " none", ss->hung, ss->max_release_ms,
           ss->mismatch, ss->verified, ss->corrupt, ss->missing, ss->nerr_ms ? ss->err_ms[ss->nerr_ms - 1] : 0,
           ss->nerr_ms ? ss->err_ms[ss->nerr_ms / 2] : 0, ss->max_ok_ms);
    /* A request past the bound is the caller's to give up (without
     * --deadline): the script decides whether that is allowed, but the
     * release itself must not hang. */
    int bad = ss->mismatch || ss->corrupt || ss->missing || ss->max_release_ms > o->bound_ms;
    if (bad)
        fprintf(stderr,
                "netns_peer: FAILED: stream: %u READ(s) mismatched, %u WRITE(s) found corrupt by the target, %u "
                "successful WRITE(s) never verified, slowest release %" PRIu64 " ms (bound %u ms)\n",
                ss->mismatch, ss->corrupt, ss->missing, ss->max_release_ms, o->bound_ms);
    free(ld);
    free(rd);
    free(bd);
    free(ss);
    return bad;
}

static int run_initiator(const opts_t *o)
{
    conn_t c = {.a = agent_make("netns-initiator", o, 0)};
    uint8_t *lbuf, *back;
    if (posix_memalign((void **)&lbuf, 4096, o->size) || posix_memalign((void **)&back, 4096, o->size))
        FAIL("out of memory");
    memset(lbuf, 0, o->size);
    reg(c.a, lbuf, o->size);
    reg(c.a, back, o->size);
    connect_peer(&c, o);
    const char *addr = getenv("NETNS_PEER_BUF");
    if (!addr)
        FAIL("NETNS_PEER_BUF (the target's buffer address) is not set");
    c.raddr = strtoull(addr, NULL, 0);
    int rc = 0;
    if (o->stream_s) {
        rc = stream_run(&c, o, lbuf, back);
        /* Best effort: under a fault the target may not hear it (the script kills it then). */
        nixl_notif_send(c.a, c.peer, "quit", 4, NULL);
        sleep_ms(200);
    } else if (o->fault) {
        rc = fault_round(&c, o, lbuf);
    } else {
        kv_round(&c, o, lbuf, back, 11);
        kv_round(&c, o, lbuf, back, 12);
        CALL(nixl_notif_send(c.a, c.peer, "quit", 4, NULL));
        sleep_ms(200);
    }
    dereg(c.a, lbuf, o->size);
    dereg(c.a, back, o->size);
    nixl_agent_destroy(c.a);
    free(lbuf);
    free(back);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o = {.size = 8u << 20, .requests = 4, .bound_ms = 10000, .error_ms = 2000, .wait_ms = 4000};
    if (argc < 2)
        FAIL("usage: netns_peer target|initiator [options] (see the file's header)");
    o.role = argv[1];
    for (int i = 2; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            FAIL("option %s needs a value", argv[i]);
        if (strcmp(argv[i], "--iface") == 0)
            o.iface = v;
        else if (strcmp(argv[i], "--peer") == 0)
            o.peer = v;
        else if (strcmp(argv[i], "--backend") == 0)
            o.backend = v;
        else if (strcmp(argv[i], "--param") == 0 || strcmp(argv[i], "--env") == 0) {
            int env = argv[i][2] == 'e';
            unsigned *cnt = env ? &o.nenvs : &o.nparams;
            if (*cnt == MAX_KV)
                FAIL("at most %u of %s", MAX_KV, argv[i]);
            (env ? o.envs : o.params)[(*cnt)++] = v;
        } else if (strcmp(argv[i], "--path") == 0)
            o.path = v;
        else if (strcmp(argv[i], "--fault") == 0)
            o.fault = v;
        else if (strcmp(argv[i], "--undo") == 0)
            o.undo = v;
        else if (strcmp(argv[i], "--undo-after") == 0)
            o.undo_after_ms = (unsigned)atoi(v);
        else if (strcmp(argv[i], "--error-ms") == 0)
            o.error_ms = (unsigned)atoi(v);
        else if (strcmp(argv[i], "--wait-ms") == 0)
            o.wait_ms = (unsigned)atoi(v);
        else if (strcmp(argv[i], "--size") == 0)
            o.size = (size_t)strtoull(v, NULL, 0);
        else if (strcmp(argv[i], "--requests") == 0)
            o.requests = (unsigned)atoi(v);
        else if (strcmp(argv[i], "--stream") == 0)
            o.stream_s = (unsigned)atoi(v);
        else if (strcmp(argv[i], "--bound") == 0)
            o.bound_ms = (unsigned)atoi(v);
        else if (strcmp(argv[i], "--deadline") == 0)
            o.deadline_ms = (unsigned)atoi(v);
        else
            FAIL("unknown option %s", argv[i]);
    }
    if (!o.iface || !o.backend || o.size < PIECE || o.requests == 0)
        FAIL("--iface and --backend are required; --size at least %u; --requests at least 1", PIECE);
    if (o.size / o.requests < PIECE)
        FAIL("--size / --requests must be at least %u", PIECE);
    o.size -= o.size % PIECE;
    if (strcmp(o.role, "target") == 0)
        return run_target(&o);
    if (strcmp(o.role, "initiator") == 0 && o.peer)
        return run_initiator(&o);
    FAIL("role must be target or initiator (with --peer)");
}
