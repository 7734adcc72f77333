/*
 * fault.c - fault injection between the core and a backend (NIXL_FAULT).
 *
 * A rule is BACKEND:OP:NTH:ACTION, rules separated by commas:
 *   BACKEND  a backend name, or * for every backend
 *   OP       reg, peer_load, rkey_load, xfer_prepare, xfer_post,
 *            xfer_status, notif_send or progress
 *   NTH      N (the Nth call only, from 1), N+ (the Nth and every later
 *            call) or * (every call); calls are counted per op and per
 *            backend instance
 *   ACTION   fail (NIXL_ERR_BACKEND), fail=NIXL_ERR_... (that code), or
 *            delay=DURATION (10us, 5ms, 1s...) before the real call
 *
 * The core's doorway (be_call.h) takes an unlikely branch into this file
 * when b->fault is set, for the ops a rule can name (and the request ops,
 * whose requests are shadowed here); this file calls the real op through
 * BE_OP.  Backends no rule names have no b->fault, so an unset NIXL_FAULT
 * costs one predicted branch per call.
 *
 * What a failed call does, and why:
 * - reg, peer_load, rkey_load, xfer_prepare, xfer_post, notif_send,
 *   progress: the real op is not called, so no side effect happens (a
 *   failed post moves nothing and notifies nobody).
 * - xfer_status: a request reported failed must never have delivered its
 *   notification.  Releasing (canceling) the real request is not enough: a
 *   backend may put the notification on the wire while its status still
 *   says in progress (shm's last copy worker sends it just before it
 *   publishes the status; libfabric's counting mode waits for the target's
 *   answer to it), and the ABI cannot take one back.  So when a status rule
 *   applies, the wrapper holds every request's notification: the real
 *   request is posted without it, and the wrapper sends it with the
 *   backend's notif_send once the real request reports success (data
 *   landed), from the status call that sees it, from progress, or from a
 *   helper thread that polls under the agent lock (NIXL_THREAD_SERIALIZED
 *   agents; others must poll); those two send a moment after they saw the
 *   success, never in the same round (held_flush).  A failing status call drops the held
 *   notification and releases the real request at once (the backend stops
 *   touching the memory).  If the notification already went out, that call
 *   cannot fail honestly: its fault moves to the next status call that can.
 *   Requests are shadowed for this: the core's request header is ours, and
 *   a re-post after an injected status failure prepares the real request
 *   again.
 *
 * Without a status rule notifications take the backend's own path.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/be_call.h"
#include "core/fault.h"
#include "util/config.h"
#include "util/log.h"
#include "util/time.h"

#define FAULT_MAX_RULES 32
#define FAULT_MAX_DELAY_NS (60ull * 1000000000ull)

typedef enum {
    FAULT_REG,
    FAULT_PEER_LOAD,
    FAULT_RKEY_LOAD,
    FAULT_XFER_PREPARE,
    FAULT_XFER_POST,
    FAULT_XFER_STATUS,
    FAULT_NOTIF_SEND,
    FAULT_PROGRESS,
    FAULT_OP_COUNT
} fault_op_t;

static const char *const fault_op_names[FAULT_OP_COUNT] = {
    "reg", "peer_load", "rkey_load", "xfer_prepare", "xfer_post", "xfer_status", "notif_send", "progress",
};

typedef struct fault_spec {
    fault_op_t op;
    uint64_t nth;       /* 1-based call number; 0 = every call */
    int from;           /* "N+": call nth and every later one */
    nixl_status_t code; /* NIXL_OK: a delay rule */
    uint64_t delay_ns;
} fault_spec_t;

typedef struct fault_rule {
    fault_spec_t s;
    atomic_int pending; /* xfer_status call nth could not fail: the next one that can does */
    atomic_int warned;  /* delay rules warn once, then log at debug */
} fault_rule_t;

typedef struct fault_req fault_req_t;

typedef struct nixl_fault {
    nixl_backend_t *b; /* the real instance: b->ops, b->be */
    atomic_uint_fast64_t calls[FAULT_OP_COUNT];
    /* Status rules: notifications held until their request succeeded.
     * The list changes only under the agent lock (or, without one, on the
     * caller's serialized calls). */
    int hold;
    fault_req_t *held;
    atomic_int nheld;
    int helper_started;
    pthread_t helper;
    pthread_mutex_t helper_lock;
    pthread_cond_t helper_wake; /* a notification is held, or stop */
    int helper_stop;
    size_t nrules;
    fault_rule_t rules[];
} fault_be_t;

/* The core's view of a request; the real one behind it. */
struct fault_req {
    nixl_be_req_t hdr;
    nixl_be_req_t *real; /* NULL once an injected status failure released it */
    nixl_be_xfer_t xfer; /* to prepare it again (iov and peer live as long as the core's request) */
    fault_req_t *prev, *next; /* fb->held */
    int held;                 /* on fb->held: posted, its notification not sent yet */
    int notif_sent;           /* this post's notification is out: it cannot fail any more */
    nixl_status_t settled;    /* NIXL_IN_PROG, or how it ended when a held notification was dealt with */
    uint8_t *notif;           /* the held notification (has_notif: even of length 0) */
    size_t notif_len, notif_cap;
    int has_notif;
    int cancel_held;          /* canceled before its held notification went: ends NIXL_ERR_CANCELED */
    uint64_t ended_ns;        /* when a background round first saw the real request succeed (0: not yet) */
};

/* ---- parsing ---- */

typedef struct tok {
    const char *p;
    size_t n;
} tok_t;

static int tok_is(tok_t t, const char *s)
{
    return strlen(s) == t.n && memcmp(t.p, s, t.n) == 0;
}

static int tok_has_prefix(tok_t t, const char *s, tok_t *rest)
{
    size_t k = strlen(s);
    if (t.n < k || memcmp(t.p, s, k) != 0)
        return 0;
    rest->p = t.p + k;
    rest->n = t.n - k;
    return 1;
}

/* Decimal digits of t, the whole of it; -1 on anything else or overflow. */
static int tok_u64(tok_t t, uint64_t *out)
{
    uint64_t v = 0;
    if (t.n == 0)
        return -1;
    for (size_t i = 0; i < t.n; i++) {
        if (t.p[i] < '0' || t.p[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(t.p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int parse_status(tok_t t, nixl_status_t *out)
{
#define FAULT_STATUS_(name, value, msg)                                                          \
    if ((value) < 0 && tok_is(t, #name)) {                                                       \
        *out = (nixl_status_t)(value);                                                           \
        return 0;                                                                                \
    }
    NIXL_STATUS_LIST(FAULT_STATUS_)
#undef FAULT_STATUS_
    return -1;
}

static int parse_duration(tok_t t, uint64_t *ns_out)
{
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {{"ns", 1}, {"us", 1000}, {"ms", 1000000}, {"s", 1000000000}};
    size_t digits = 0;
    while (digits < t.n && t.p[digits] >= '0' && t.p[digits] <= '9')
        digits++;
    tok_t num = {t.p, digits}, unit = {t.p + digits, t.n - digits};
    uint64_t v;
    if (tok_u64(num, &v))
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (tok_is(unit, units[i].unit)) {
            if (v > FAULT_MAX_DELAY_NS / units[i].ns)
                return -1;
            *ns_out = v * units[i].ns;
            return 0;
        }
    }
    return -1;
}

static int backend_known(tok_t t)
{
    const nixl_backend_impl_t *impls;
    size_t n;
    nixl_backend_impls(&impls, &n);
    for (size_t i = 0; i < n; i++)
        if (tok_is(t, impls[i].info.name))
            return 1;
    return 0;
}

/* One rule; NIXL_ERR_INVALID_PARAM (logged, naming the bad token) when it
 * is malformed.  *applies says whether it names backend. */
static nixl_status_t parse_rule(tok_t rule, const char *backend, fault_spec_t *out, int *applies)
{
    tok_t f[4];
    size_t nf = 0;
    const char *p = rule.p, *end = rule.p + rule.n;
    for (;;) {
        const char *c = memchr(p, ':', (size_t)(end - p));
        if (nf == 4)
            goto err_shape;
        f[nf].p = p;
        f[nf].n = c ? (size_t)(c - p) : (size_t)(end - p);
        nf++;
        if (!c)
            break;
        p = c + 1;
    }
    if (nf != 4)
        goto err_shape;

    memset(out, 0, sizeof(*out));
    if (!tok_is(f[0], "*") && !backend_known(f[0])) {
        NIXL_ERROR("NIXL_FAULT: unknown backend '%.*s' in rule '%.*s' (a backend name as nixl-info lists it, "
                   "or *)",
                   (int)f[0].n, f[0].p, (int)rule.n, rule.p);
        return NIXL_ERR_INVALID_PARAM;
    }
    *applies = tok_is(f[0], "*") || tok_is(f[0], backend);

    int op = -1;
    for (int i = 0; i < FAULT_OP_COUNT; i++)
        if (tok_is(f[1], fault_op_names[i]))
            op = i;
    if (op < 0) {
        NIXL_ERROR("NIXL_FAULT: unknown op '%.*s' in rule '%.*s' (reg, peer_load, rkey_load, xfer_prepare, "
                   "xfer_post, xfer_status, notif_send, progress)",
                   (int)f[1].n, f[1].p, (int)rule.n, rule.p);
        return NIXL_ERR_INVALID_PARAM;
    }
    out->op = (fault_op_t)op;

    if (!tok_is(f[2], "*")) {
        tok_t num = f[2];
        if (num.n > 1 && num.p[num.n - 1] == '+') {
            out->from = 1;
            num.n--;
        }
        if (tok_u64(num, &out->nth) || out->nth == 0) {
            NIXL_ERROR("NIXL_FAULT: bad call number '%.*s' in rule '%.*s' (N counting from 1, N+ for that call "
                       "and every later one, or *)",
                       (int)f[2].n, f[2].p, (int)rule.n, rule.p);
            return NIXL_ERR_INVALID_PARAM;
        }
    }

    tok_t arg;
    if (tok_is(f[3], "fail")) {
        out->code = NIXL_ERR_BACKEND;
    } else if (tok_has_prefix(f[3], "fail=", &arg)) {
        if (parse_status(arg, &out->code)) {
            NIXL_ERROR("NIXL_FAULT: bad status '%.*s' in rule '%.*s' (an error name such as NIXL_ERR_BACKEND)",
                       (int)arg.n, arg.p, (int)rule.n, rule.p);
            return NIXL_ERR_INVALID_PARAM;
        }
    } else if (tok_has_prefix(f[3], "delay=", &arg)) {
        if (parse_duration(arg, &out->delay_ns)) {
            NIXL_ERROR("NIXL_FAULT: bad delay '%.*s' in rule '%.*s' (a number with ns, us, ms or s, at most 60 s)",
                       (int)arg.n, arg.p, (int)rule.n, rule.p);
            return NIXL_ERR_INVALID_PARAM;
        }
        out->code = NIXL_OK;
    } else {
        NIXL_ERROR("NIXL_FAULT: bad action '%.*s' in rule '%.*s' (fail, fail=NIXL_ERR_..., or delay=5ms)",
                   (int)f[3].n, f[3].p, (int)rule.n, rule.p);
        return NIXL_ERR_INVALID_PARAM;
    }
    return NIXL_OK;

err_shape:
    NIXL_ERROR("NIXL_FAULT: rule '%.*s' is not BACKEND:OP:NTH:ACTION", (int)rule.n, rule.p);
    return NIXL_ERR_INVALID_PARAM;
}

/* Every rule of spec checked; those naming backend copied to rules. */
static nixl_status_t parse_spec(const char *spec, const char *backend, fault_spec_t *rules, size_t *n_out)
{
    size_t n = 0, total = 0;
    const char *p = spec;
    for (;;) {
        const char *c = strchr(p, ',');
        tok_t rule = {p, c ? (size_t)(c - p) : strlen(p)};
        if (rule.n == 0) {
            NIXL_ERROR("NIXL_FAULT: empty rule at offset %zu of '%s'", (size_t)(p - spec), spec);
            return NIXL_ERR_INVALID_PARAM;
        }
        if (++total > FAULT_MAX_RULES) {
            NIXL_ERROR("NIXL_FAULT: more than %d rules", FAULT_MAX_RULES);
            return NIXL_ERR_INVALID_PARAM;
        }
        fault_spec_t r;
        int applies = 0;
        nixl_status_t st = parse_rule(rule, backend, &r, &applies);
        if (st != NIXL_OK)
            return st;
        if (applies)
            rules[n++] = r;
        if (!c)
            break;
        p = c + 1;
    }
    *n_out = n;
    return NIXL_OK;
}

/* ---- applying rules ---- */

static int rule_hits(const fault_spec_t *r, uint64_t n)
{
    return r->nth == 0 || n == r->nth || (r->from && n > r->nth);
}

static void fault_sleep(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Count one call of op; returns its number. */
static uint64_t fault_count(fault_be_t *fb, fault_op_t op)
{
    return atomic_fetch_add_explicit(&fb->calls[op], 1, memory_order_relaxed) + 1;
}

static void fault_delay(fault_be_t *fb, fault_op_t op, uint64_t n)
{
    for (size_t i = 0; i < fb->nrules; i++) {
        fault_rule_t *r = &fb->rules[i];
        if (r->s.op != op || r->s.code != NIXL_OK || !rule_hits(&r->s, n))
            continue;
        if (!atomic_exchange(&r->warned, 1))
            NIXL_WARN("injected delay: %s %s #%llu +%llu us (agent %s; later delays of this rule logged at debug)",
                      be_name(fb->b), fault_op_names[op], (unsigned long long)n,
                      (unsigned long long)(r->s.delay_ns / 1000), fb->b->agent->name);
        else
            NIXL_DEBUG("injected delay: %s %s #%llu +%llu us", be_name(fb->b), fault_op_names[op],
                       (unsigned long long)n, (unsigned long long)(r->s.delay_ns / 1000));
        fault_sleep(r->s.delay_ns);
    }
}

/* What call n of op must fail with, or NIXL_OK.  can_fail 0 (a status
 * call on a request whose notification is out): a rule for exactly this
 * call is kept pending for the next call that can fail. */
static nixl_status_t fault_fail(fault_be_t *fb, fault_op_t op, uint64_t n, int can_fail)
{
    nixl_status_t code = NIXL_OK;
    for (size_t i = 0; i < fb->nrules && code == NIXL_OK; i++) {
        fault_rule_t *r = &fb->rules[i];
        if (r->s.op != op || r->s.code == NIXL_OK)
            continue;
        int hit = rule_hits(&r->s, n);
        if (!can_fail) {
            if (hit && r->s.nth && !r->s.from) {
                atomic_store(&r->pending, 1);
                NIXL_INFO("fault for %s %s #%llu deferred: the notification of that request is out (agent %s)",
                          be_name(fb->b), fault_op_names[op], (unsigned long long)n, fb->b->agent->name);
            }
            continue;
        }
        if (hit || atomic_exchange(&r->pending, 0)) {
            atomic_store(&r->pending, 0);
            code = r->s.code;
        }
    }
    if (code != NIXL_OK)
        NIXL_WARN("injected fault: %s %s #%llu -> %s (agent %s)", be_name(fb->b), fault_op_names[op],
                  (unsigned long long)n, nixl_status_name(code), fb->b->agent->name);
    return code;
}

/* Count, delay, and say whether this call fails. */
static nixl_status_t fault_enter(fault_be_t *fb, fault_op_t op)
{
    uint64_t n = fault_count(fb, op);
    fault_delay(fb, op, n);
    return fault_fail(fb, op, n, 1);
}

/* ---- the wrapped ops (be_call.h calls these when b->fault is set) ---- */

static void helper_stop(fault_be_t *fb)
{
    if (!fb->helper_started)
        return;
    pthread_mutex_lock(&fb->helper_lock);
    fb->helper_stop = 1;
    pthread_cond_signal(&fb->helper_wake);
    pthread_mutex_unlock(&fb->helper_lock);
    pthread_join(fb->helper, NULL);
    fb->helper_started = 0;
}

void nixl_fault_uninstall(nixl_backend_t *b)
{
    fault_be_t *fb = b->fault;
    if (!fb)
        return;
    helper_stop(fb);
    if (fb->hold) {
        pthread_cond_destroy(&fb->helper_wake);
        pthread_mutex_destroy(&fb->helper_lock);
    }
    b->fault = NULL;
    free(fb);
}

nixl_status_t nixl_fault_reg(nixl_backend_t *b, const nixl_be_region_t *region, void **md_out)
{
    nixl_status_t st = fault_enter(b->fault, FAULT_REG);
    return st != NIXL_OK ? st : BE_OP(b, reg, region, md_out);
}

nixl_status_t nixl_fault_peer_open(nixl_backend_t *b, const nixl_be_peer_t *peer, const void *conn, size_t conn_len,
                                   void **peer_out)
{
    nixl_status_t st = fault_enter(b->fault, FAULT_PEER_LOAD);
    return st != NIXL_OK ? st : be_peer_open_raw(b, peer, conn, conn_len, peer_out);
}

nixl_status_t nixl_fault_rkey_load(nixl_backend_t *b, void *peer, const nixl_be_region_t *region, const void *rkey,
                                   size_t rkey_len, void **rmd_out)
{
    nixl_status_t st = fault_enter(b->fault, FAULT_RKEY_LOAD);
    return st != NIXL_OK ? st : BE_OP(b, rkey_load, peer, region, rkey, rkey_len, rmd_out);
}

/* ---- requests ---- */

/* The header the core reads follows the real request's. */
static void req_sync(fault_req_t *r)
{
    if (r->real) {
        r->hdr.path = r->real->path;
        r->hdr.fallback = r->real->fallback;
    }
}

static void held_add(fault_be_t *fb, fault_req_t *r)
{
    r->prev = NULL;
    r->next = fb->held;
    if (fb->held)
        fb->held->prev = r;
    fb->held = r;
    r->held = 1;
    if (atomic_fetch_add(&fb->nheld, 1) == 0 && fb->helper_started) {
        pthread_mutex_lock(&fb->helper_lock);
        pthread_cond_signal(&fb->helper_wake);
        pthread_mutex_unlock(&fb->helper_lock);
    }
}

static void held_del(fault_be_t *fb, fault_req_t *r)
{
    if (!r->held)
        return;
    if (r->prev)
        r->prev->next = r->next;
    else
        fb->held = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
    r->held = 0;
    atomic_fetch_sub(&fb->nheld, 1);
}

/* The real request of a held notification ended (st): send it on success.
 * Returns how the request ended for the core. */
static nixl_status_t held_settle(fault_be_t *fb, fault_req_t *r, nixl_status_t st)
{
    held_del(fb, r);
    if (st == NIXL_OK) {
        st = BE_OP(fb->b, notif_send, r->xfer.peer, r->notif, r->notif_len);
        if (st == NIXL_OK)
            r->notif_sent = 1;
        else
            NIXL_ERROR("agent %s: %s: the held notification of a finished request could not be sent: %s",
                       fb->b->agent->name, be_name(fb->b), nixl_strerror(st));
    }
    r->settled = st;
    return st;
}

/* How long a background round waits, after it saw a request succeed,
 * before it sends the held notification. */
#define FAULT_HELD_GRACE_NS 2000000ull

/* Send the notifications whose requests finished, from the background
 * (helper thread, progress; agent lock held).  A success is only noted in
 * the round that sees it and sent in a later one, at least
 * FAULT_HELD_GRACE_NS on, with the agent lock let go in between: the
 * round's own status call can hold the agent lock for a long time (ucx's
 * waits for its lock behind its progress thread, which meanwhile completes
 * the request), and a caller blocked behind it on the way to release a
 * request it saw in flight must get to cancel it first (conformance
 * release_in_flight under a status rule).  The request's own status call
 * sends at once: its caller sees the end. */
static void held_flush(fault_be_t *fb)
{
    uint64_t now = nixl_now_ns();
    fault_req_t *r = fb->held;
    while (r) {
        fault_req_t *next = r->next;
        if (r->ended_ns) {
            if (now - r->ended_ns >= FAULT_HELD_GRACE_NS)
                held_settle(fb, r, NIXL_OK);
        } else {
            nixl_status_t st = BE_OP(fb->b, xfer_status, r->real);
            if (st == NIXL_OK)
                r->ended_ns = nixl_now_ns();
            else if (st != NIXL_IN_PROG)
                held_settle(fb, r, st); /* a failure: nothing to send */
        }
        r = next;
    }
}

/* Sends held notifications while the application does not poll (a target
 * waiting for one must get it).  Trylock: agent destroy holds the lock
 * while it stops us. */
static void *helper_main(void *arg)
{
    fault_be_t *fb = arg;
    pthread_mutex_lock(&fb->helper_lock);
    while (!fb->helper_stop) {
        if (atomic_load(&fb->nheld) == 0) {
            pthread_cond_wait(&fb->helper_wake, &fb->helper_lock);
            continue;
        }
        pthread_mutex_unlock(&fb->helper_lock);
        if (pthread_mutex_trylock(&fb->b->agent->lock) == 0) {
            held_flush(fb);
            pthread_mutex_unlock(&fb->b->agent->lock);
        }
        fault_sleep(100000);
        pthread_mutex_lock(&fb->helper_lock);
    }
    pthread_mutex_unlock(&fb->helper_lock);
    return NULL;
}

nixl_status_t nixl_fault_xfer_prepare(nixl_backend_t *b, const nixl_be_xfer_t *x, nixl_be_req_t **req_out)
{
    nixl_status_t st = fault_enter(b->fault, FAULT_XFER_PREPARE);
    if (st != NIXL_OK)
        return st;
    fault_req_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    st = BE_OP(b, xfer_prepare, x, &r->real);
    if (st != NIXL_OK) {
        free(r);
        return st;
    }
    r->xfer = *x;
    r->settled = NIXL_IN_PROG;
    req_sync(r);
    *req_out = &r->hdr;
    return NIXL_OK;
}

static nixl_status_t req_hold_notif(fault_req_t *r, const void *notif, size_t len)
{
    r->has_notif = notif != NULL;
    r->notif_len = 0;
    if (!notif)
        return NIXL_OK;
    if (NIXL_ARRAY_RESERVE(r->notif, r->notif_cap, len, 64))
        return NIXL_ERR_NO_MEMORY;
    if (len)
        memcpy(r->notif, notif, len);
    r->notif_len = len;
    return NIXL_OK;
}

nixl_status_t nixl_fault_xfer_post(nixl_backend_t *b, nixl_be_req_t *req, const void *notif, size_t notif_len)
{
    fault_be_t *fb = b->fault;
    fault_req_t *r = (fault_req_t *)req;
    nixl_status_t st = fault_enter(fb, FAULT_XFER_POST);
    if (st != NIXL_OK)
        return st;
    if (!r->real) {
        st = BE_OP(b, xfer_prepare, &r->xfer, &r->real);
        if (st != NIXL_OK) {
            r->real = NULL;
            return st;
        }
    }
    r->notif_sent = 0;
    r->cancel_held = 0;
    r->ended_ns = 0;
    r->settled = NIXL_IN_PROG;
    if (!fb->hold) {
        st = BE_OP(b, xfer_post, r->real, notif, notif_len);
        req_sync(r);
        return st;
    }
    st = req_hold_notif(r, notif, notif_len);
    if (st != NIXL_OK)
        return st;
    st = BE_OP(b, xfer_post, r->real, NULL, 0);
    req_sync(r);
    if (!r->has_notif || st == NIXL_IN_PROG) {
        if (r->has_notif)
            held_add(fb, r);
        return st;
    }
    return held_settle(fb, r, st);
}

/* An injected status failure: the real request goes now (canceled if in
 * flight), its held notification with it. */
static nixl_status_t req_fail(fault_be_t *fb, fault_req_t *r, nixl_status_t code)
{
    held_del(fb, r);
    BE_OP(fb->b, xfer_release, r->real);
    r->real = NULL;
    return code;
}

nixl_status_t nixl_fault_xfer_status(nixl_backend_t *b, nixl_be_req_t *req)
{
    fault_be_t *fb = b->fault;
    fault_req_t *r = (fault_req_t *)req;
    uint64_t n = fault_count(fb, FAULT_XFER_STATUS);
    fault_delay(fb, FAULT_XFER_STATUS, n);
    if (!r->real)
        return NIXL_ERR_INVALID_PARAM;
    nixl_status_t code, st;
    if (!fb->hold) {
        /* No status rule fails (or no notif_send to hold with): the
         * notification may be out as soon as the request ended. */
        st = BE_OP(b, xfer_status, r->real);
        req_sync(r);
        code = fault_fail(fb, FAULT_XFER_STATUS, n, st == NIXL_IN_PROG);
        return code != NIXL_OK ? req_fail(fb, r, code) : st;
    }
    if (r->notif_sent) {
        fault_fail(fb, FAULT_XFER_STATUS, n, 0);
        return r->settled;
    }
    /* Decide before anything can send the notification. */
    code = fault_fail(fb, FAULT_XFER_STATUS, n, 1);
    if (code != NIXL_OK)
        return req_fail(fb, r, code);
    if (r->settled != NIXL_IN_PROG)
        return r->settled;
    st = BE_OP(b, xfer_status, r->real);
    req_sync(r);
    if (r->cancel_held && st != NIXL_IN_PROG)
        return r->settled = st == NIXL_OK ? NIXL_ERR_CANCELED : st;
    return r->held && st != NIXL_IN_PROG ? held_settle(fb, r, st) : st;
}

int nixl_fault_can_cancel(const nixl_backend_t *b)
{
    return BE_HAS(b, xfer_cancel) || b->fault->hold;
}

/* A deadline's cancel.  A notification we hold and have not sent loses
 * to it: dropped, so the request ends NIXL_ERR_CANCELED even when the real
 * one completes.  The real backend's cancel stops the rest. */
void nixl_fault_xfer_cancel(nixl_backend_t *b, nixl_be_req_t *req)
{
    fault_be_t *fb = b->fault;
    fault_req_t *r = (fault_req_t *)req;
    if (!r || !r->real)
        return;
    if (r->held) {
        held_del(fb, r);
        r->cancel_held = 1;
    }
    if (BE_HAS(b, xfer_cancel))
        BE_OP(b, xfer_cancel, r->real);
}

void nixl_fault_xfer_release(nixl_backend_t *b, nixl_be_req_t *req)
{
    fault_req_t *r = (fault_req_t *)req;
    if (!r)
        return;
    held_del(b->fault, r);
    if (r->real)
        BE_OP(b, xfer_release, r->real);
    free(r->notif);
    free(r);
}

nixl_status_t nixl_fault_notif_send(nixl_backend_t *b, void *peer, const void *msg, size_t len)
{
    nixl_status_t st = fault_enter(b->fault, FAULT_NOTIF_SEND);
    return st != NIXL_OK ? st : BE_OP(b, notif_send, peer, msg, len);
}

/* Every progress round of the core counts, whether or not the backend has
 * a progress op of its own (shm and cuda_ipc have none: their receive
 * thread delivers); held notifications are also sent from here. */
nixl_status_t nixl_fault_progress(nixl_backend_t *b)
{
    fault_be_t *fb = b->fault;
    nixl_status_t st = fault_enter(fb, FAULT_PROGRESS);
    if (st != NIXL_OK)
        return st;
    st = BE_HAS(b, progress) ? BE_OP0(b, progress) : NIXL_OK;
    if (fb->held)
        held_flush(fb);
    return st;
}

/* Whether a status rule can fail calls of this backend: then notifications
 * are held (see the top of this file). */
static int rules_fail_status(const fault_be_t *fb)
{
    for (size_t i = 0; i < fb->nrules; i++)
        if (fb->rules[i].s.op == FAULT_XFER_STATUS && fb->rules[i].s.code != NIXL_OK)
            return 1;
    return 0;
}

static nixl_status_t helper_start(fault_be_t *fb)
{
    if (pthread_mutex_init(&fb->helper_lock, NULL) != 0)
        return NIXL_ERR_NO_MEMORY;
    if (pthread_cond_init(&fb->helper_wake, NULL) != 0) {
        pthread_mutex_destroy(&fb->helper_lock);
        return NIXL_ERR_NO_MEMORY;
    }
    fb->hold = 1;
    /* Without the agent lock another thread of ours would race the
     * application's own (serialized by it) calls: they must poll. */
    if (!fb->b->agent->serialized)
        return NIXL_OK;
    int rc = pthread_create(&fb->helper, NULL, helper_main, fb);
    if (rc != 0) {
        NIXL_ERROR("agent %s: NIXL_FAULT: cannot start the notification helper thread: %s", fb->b->agent->name,
                   strerror(rc));
        pthread_cond_destroy(&fb->helper_wake);
        pthread_mutex_destroy(&fb->helper_lock);
        fb->hold = 0;
        return NIXL_ERR_NO_MEMORY;
    }
    fb->helper_started = 1;
    return NIXL_OK;
}

nixl_status_t nixl_fault_install(nixl_backend_t *b)
{
    const char *spec = nixl_cfg_get("NIXL_FAULT");
    if (!spec || !*spec)
        return NIXL_OK;
    fault_spec_t rules[FAULT_MAX_RULES];
    size_t n = 0;
    nixl_status_t st = parse_spec(spec, be_name(b), rules, &n);
    if (st != NIXL_OK)
        return st;
    if (n == 0)
        return NIXL_OK;

    fault_be_t *fb = calloc(1, sizeof(*fb) + n * sizeof(fault_rule_t));
    if (!fb)
        return NIXL_ERR_NO_MEMORY;
    fb->b = b;
    for (int i = 0; i < FAULT_OP_COUNT; i++)
        atomic_init(&fb->calls[i], 0);
    for (size_t i = 0; i < n; i++) {
        fault_rule_t *r = &fb->rules[i];
        r->s = rules[i];
        atomic_init(&r->pending, 0);
        atomic_init(&r->warned, 0);
    }
    fb->nrules = n;
    if (BE_HAS(b, notif_send) && rules_fail_status(fb)) {
        st = helper_start(fb);
        if (st != NIXL_OK) {
            free(fb);
            return st;
        }
    }
    b->fault = fb;
    NIXL_WARN("agent %s: backend %s runs under NIXL_FAULT: %zu rule(s) of '%s' apply", b->agent->name, be_name(b),
              n, spec);
    return NIXL_OK;
}
