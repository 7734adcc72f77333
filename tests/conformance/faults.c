/*
 * faults.c - the battery under injected faults (--fault SPEC [--expect-fault]).
 *
 * The runner exports SPEC as NIXL_FAULT, so every agent of the run (the
 * initiator and the target, in one process or two) gets the core's
 * fault-injection wrapper (src/core/fault.c).  Without --expect-fault (delay
 * rules) every case must pass as usual.  With it a case may also end with an
 * error the spec injects (FAULT: accepted), but never with a wrong byte, a
 * hang, a crash, another error code, or a notification for a transfer that
 * did not succeed.
 *
 * Notifications are checked by counting, in every mode: cases make, post
 * and poll requests through conf_xfer_*, which count each success of a
 * request carrying a notification (post returning NIXL_OK, or a status
 * leaving NIXL_IN_PROG with NIXL_OK) and each standalone notification sent.
 * The target counts what it hands the case and, when the case ends (a FAULT
 * end included), what it still holds after a short wait.  The target having
 * more than were sent successfully means one came from a failed transfer.
 *
 * The counters of all case processes meet in one shared mapping so the
 * runner can print what was injected and seen (requests, errors by code,
 * time to error, notifications) for docs/faults.md.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "conf.h"

#define FAULT_CODES 128    /* errors counted by -code */
#define DRAIN_WINDOW_MS 200 /* how long the target waits for late notifications */

typedef struct fault_stats {
    atomic_ullong posted, ok, failed;
    atomic_ullong by_code[FAULT_CODES];
    atomic_ullong tte_max_us, tte_sum_us, tte_n; /* time to error, from the post */
    atomic_ullong notif_sent, notif_seen, notif_wrong;
} fault_stats_t;

static fault_stats_t *g_stats; /* shared by the case processes; NULL elsewhere */
static nixl_status_t g_codes[16];
static size_t g_ncodes;

/* ---- per case process ---- */

typedef struct tracked {
    nixl_xfer_t *x;
    int notif;
    int in_flight;
    uint64_t t_post_us;
} tracked_t;

static tracked_t *g_trk;
static size_t g_ntrk, g_captrk;
static uint64_t g_sent, g_seen; /* this case: notifications sent successfully / handed over */
static conf_ctx_t *g_ctx;
static int g_ended;

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static tracked_t *track(nixl_xfer_t *x)
{
    for (size_t i = 0; i < g_ntrk; i++)
        if (g_trk[i].x == x)
            return &g_trk[i];
    if (g_ntrk == g_captrk) {
        size_t cap = g_captrk ? 2 * g_captrk : 16;
        tracked_t *v = realloc(g_trk, cap * sizeof(*v));
        if (!v)
            abort();
        g_trk = v;
        g_captrk = cap;
    }
    tracked_t *t = &g_trk[g_ntrk++];
    memset(t, 0, sizeof(*t));
    t->x = x;
    return t;
}

static void untrack(nixl_xfer_t *x)
{
    for (size_t i = 0; i < g_ntrk; i++) {
        if (g_trk[i].x == x) {
            g_trk[i] = g_trk[--g_ntrk];
            return;
        }
    }
}

static void stat_max(atomic_ullong *a, unsigned long long v)
{
    unsigned long long cur = atomic_load(a);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

/* A request ended with st (post's or status's answer). */
static void track_end(tracked_t *t, nixl_status_t st, uint64_t t0_us)
{
    t->in_flight = 0;
    if (st == NIXL_OK) {
        if (t->notif)
            g_sent++;
        if (g_stats)
            atomic_fetch_add(&g_stats->ok, 1);
        return;
    }
    if (!g_stats)
        return;
    atomic_fetch_add(&g_stats->failed, 1);
    if (st < 0 && -st < FAULT_CODES)
        atomic_fetch_add(&g_stats->by_code[-st], 1);
    unsigned long long us = now_us() - t0_us;
    stat_max(&g_stats->tte_max_us, us);
    atomic_fetch_add(&g_stats->tte_sum_us, us);
    atomic_fetch_add(&g_stats->tte_n, 1);
}

static int opt_has_notif(const nixl_opt_args_t *opt)
{
    return opt && (opt->field_mask & NIXL_OPT_NOTIF);
}

nixl_status_t conf_xfer_create(nixl_agent_t *agent, nixl_op_t op, const nixl_dlist_t *local,
                               const nixl_dlist_t *remote, const char *peer, const nixl_opt_args_t *opt,
                               nixl_xfer_t **xfer_out)
{
    nixl_status_t st = nixl_xfer_create(agent, op, local, remote, peer, opt, xfer_out);
    if (st == NIXL_OK)
        track(*xfer_out)->notif = opt_has_notif(opt);
    return st;
}

nixl_status_t conf_xfer_create_indexed(nixl_agent_t *agent, nixl_op_t op, const nixl_indexed_t *local,
                                       const nixl_indexed_t *remote, size_t nslots, uint64_t item_len,
                                       const char *peer, const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out)
{
    nixl_status_t st = nixl_xfer_create_indexed(agent, op, local, remote, nslots, item_len, peer, opt, xfer_out);
    if (st == NIXL_OK)
        track(*xfer_out)->notif = opt_has_notif(opt);
    return st;
}

nixl_status_t conf_xfer_make(nixl_agent_t *agent, nixl_op_t op, const nixl_prep_t *local, const uint32_t *local_idx,
                             const nixl_prep_t *remote, const uint32_t *remote_idx, size_t count,
                             const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out)
{
    nixl_status_t st = nixl_xfer_make(agent, op, local, local_idx, remote, remote_idx, count, opt, xfer_out);
    if (st == NIXL_OK)
        track(*xfer_out)->notif = opt_has_notif(opt);
    return st;
}

nixl_status_t conf_xfer_post(nixl_xfer_t *x)
{
    uint64_t t0 = now_us();
    nixl_status_t st = nixl_xfer_post(x);
    tracked_t *t = track(x);
    if (g_stats)
        atomic_fetch_add(&g_stats->posted, 1);
    if (st == NIXL_IN_PROG) {
        t->in_flight = 1;
        t->t_post_us = t0;
    } else if (st == NIXL_ERR_IN_FLIGHT) {
        /* Refused; the one in flight goes on. */
        if (g_stats)
            atomic_fetch_add(&g_stats->by_code[-st], 1);
    } else {
        track_end(t, st, t0);
    }
    return st;
}

nixl_status_t conf_xfer_status(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_status(x);
    tracked_t *t = track(x);
    if (t->in_flight && st != NIXL_IN_PROG)
        track_end(t, st, t->t_post_us);
    return st;
}

void conf_xfer_release(nixl_xfer_t *x)
{
    untrack(x);
    nixl_xfer_release(x);
}

nixl_status_t conf_notif_send(nixl_agent_t *agent, const char *peer, const void *msg, size_t len,
                              const nixl_opt_args_t *opt)
{
    nixl_status_t st = nixl_notif_send(agent, peer, msg, len, opt);
    if (st == NIXL_OK)
        g_sent++;
    return st;
}

void conf_fault_notifs_seen(size_t n)
{
    g_seen += n;
}

void conf_fault_case_begin(conf_ctx_t *ctx)
{
    g_ctx = ctx;
}

void conf_fault_case_end(conf_ctx_t *ctx)
{
    if (g_ended)
        return;
    g_ended = 1;
    if (!ctx)
        ctx = g_ctx;
    /* Late ones: a notification of a failed transfer may still be on its way. */
    if (ctx && ctx->tgt && conf_opts.fault)
        conf_target_count_notifs(ctx, DRAIN_WINDOW_MS);
    if (g_stats) {
        atomic_fetch_add(&g_stats->notif_sent, g_sent);
        atomic_fetch_add(&g_stats->notif_seen, g_seen);
        if (g_seen > g_sent)
            atomic_fetch_add(&g_stats->notif_wrong, g_seen - g_sent);
    }
    if (g_seen > g_sent)
        conf_fail(__FILE__, __LINE__,
                  "the target received %llu notification(s) but only %llu transfer(s) or sends carrying one "
                  "succeeded: a notification was delivered for a failed transfer",
                  (unsigned long long)g_seen, (unsigned long long)g_sent);
}

/* ---- the runner's side ---- */

int conf_fault_is_injected(nixl_status_t st)
{
    if (!conf_opts.expect_fault)
        return 0;
    for (size_t i = 0; i < g_ncodes; i++)
        if (g_codes[i] == st)
            return 1;
    return 0;
}

static int code_by_name(const char *name, size_t n, nixl_status_t *out)
{
    for (int c = -1; c > -FAULT_CODES; c--) {
        const char *s = nixl_status_name((nixl_status_t)c);
        if (strlen(s) == n && memcmp(s, name, n) == 0) {
            *out = (nixl_status_t)c;
            return 0;
        }
    }
    return -1;
}

/* The error codes the spec's fail rules inject (the library checks the
 * rest of the spec when the backend is created). */
static int codes_from_spec(const char *spec)
{
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *act = p;
        for (int colons = 0; colons < 3 && act; colons++) {
            act = memchr(act, ':', n - (size_t)(act - p));
            if (act)
                act++;
        }
        if (!act) {
            fprintf(stderr, "--fault: rule '%.*s' is not BACKEND:OP:NTH:ACTION\n", (int)n, p);
            return -1;
        }
        size_t an = n - (size_t)(act - p);
        nixl_status_t code = NIXL_OK;
        if (an == 4 && memcmp(act, "fail", 4) == 0)
            code = NIXL_ERR_BACKEND;
        else if (an > 5 && memcmp(act, "fail=", 5) == 0 && code_by_name(act + 5, an - 5, &code)) {
            fprintf(stderr, "--fault: unknown status '%.*s'\n", (int)(an - 5), act + 5);
            return -1;
        }
        if (code != NIXL_OK && g_ncodes < sizeof(g_codes) / sizeof(g_codes[0]))
            g_codes[g_ncodes++] = code;
        p = end ? end + 1 : p + n;
    }
    return 0;
}

int conf_fault_init(void)
{
    if (!conf_opts.fault) {
        if (conf_opts.expect_fault) {
            fprintf(stderr, "--expect-fault needs --fault SPEC\n");
            return 2;
        }
        return 0;
    }
    if (!*conf_opts.fault || codes_from_spec(conf_opts.fault))
        return 2;
    if (conf_opts.expect_fault && g_ncodes == 0) {
        fprintf(stderr, "--expect-fault: the spec '%s' injects no error (only delays): run it without\n",
                conf_opts.fault);
        return 2;
    }
    if (!conf_opts.expect_fault && g_ncodes > 0) {
        fprintf(stderr, "--fault '%s' injects errors: add --expect-fault\n", conf_opts.fault);
        return 2;
    }
    setenv("NIXL_FAULT", conf_opts.fault, 1);
    void *m = mmap(NULL, sizeof(fault_stats_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    g_stats = m; /* zero-filled */
    return 0;
}

int conf_fault_summary(size_t faulted)
{
    if (!g_stats)
        return 0;
    fault_stats_t *s = g_stats;
    char codes[512] = "";
    size_t used = 0;
    for (int c = 1; c < FAULT_CODES; c++) {
        unsigned long long k = atomic_load(&s->by_code[c]);
        if (!k)
            continue;
        int w = snprintf(codes + used, sizeof(codes) - used, "%s%s x%llu", used ? ", " : "",
                         nixl_status_name((nixl_status_t)-c), k);
        if (w > 0 && (size_t)w < sizeof(codes) - used)
            used += (size_t)w;
    }
    unsigned long long n = atomic_load(&s->tte_n);
    printf("fault: spec '%s': %zu case(s) ended by an injected error\n", conf_opts.fault, faulted);
    printf("fault: requests posted %llu: succeeded %llu, failed %llu (the rest: re-post refused or released in "
           "flight); errors: %s\n",
           (unsigned long long)atomic_load(&s->posted), (unsigned long long)atomic_load(&s->ok),
           (unsigned long long)atomic_load(&s->failed), used ? codes : "none");
    if (n)
        printf("fault: time to error: mean %.3f ms, max %.3f ms\n", (double)atomic_load(&s->tte_sum_us) / (double)n / 1e3,
               (double)atomic_load(&s->tte_max_us) / 1e3);
    printf("fault: notifications: %llu sent by successful transfers or sends, %llu received, %llu for failed "
           "transfers\n",
           (unsigned long long)atomic_load(&s->notif_sent), (unsigned long long)atomic_load(&s->notif_seen),
           (unsigned long long)atomic_load(&s->notif_wrong));
    int rc = 0;
    if (atomic_load(&s->notif_wrong)) {
        printf("fault: FAIL: notifications were delivered for failed transfers\n");
        rc = 1;
    }
    unsigned long long injected = 0;
    for (size_t i = 0; i < g_ncodes; i++)
        injected += atomic_load(&s->by_code[-g_codes[i]]);
    if (conf_opts.expect_fault && faulted == 0 && injected == 0) {
        printf("fault: FAIL: no case met an injected error: this spec tests nothing here\n");
        rc = 1;
    }
    return rc;
}
