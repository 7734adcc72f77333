/*
 * ucx.c - the ucx backend: one-sided READ/WRITE of host memory over UCX
 * (ucp), to other hosts and, when the core gives it one, to this host.
 *
 * One ucp_context and one ucp_worker per instance (features RMA and AM);
 * the conn info is the worker's address, a region's public key what
 * ucp_rkey_pack gives.  Endpoints are made when a peer is loaded, with
 * UCP_ERR_HANDLING_MODE_PEER so a peer that dies fails its requests
 * instead of hanging them.  Each piece is one ucp_put_nbx / ucp_get_nbx; a
 * notification is an active message sent once ucp_ep_flush_nbx says the
 * request's operations completed at the peer (ucx_xfer.c).
 *
 * This file holds the ops table, the parameters, the instance
 * (create/destroy) and progress: inside status and progress calls, and on
 * a thread of the backend (progress_thread=1) so that a target that makes
 * no calls still serves the peers whose RMA UCX emulates over active
 * messages (tcp) and still receives notifications.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ucx.h"
#include "ucx_int.h"

static const nixl_param_info_t ucx_params[] = {
    {"transports", "",
     "UCT transports a request may take, comma-separated (rc_mlx5,dc_mlx5; tcp; sysv,posix,cma...); empty: any. "
     "A request whose endpoint uses another is a counted fallback (NIXL_ALLOW_FALLBACK=0 refuses it)"},
    {"progress_thread", "1",
     "1: a backend thread progresses the UCX worker when the application does not call in, sleeping on its event fd when idle (needed where UCX "
     "emulates RMA over active messages, tcp); 0: progress only inside calls"},
    {"progress_us", "50",
     "the progress thread's nap between rounds while requests are in flight, in microseconds (idle, it sleeps on the "
     "worker's event fd); it stands by (naps of 200 us, or this if longer) while a caller polls status more often "
     "than this"},
    {"keepalive_ms", "500",
     "UCX keepalive interval (UCX_KEEPALIVE_INTERVAL unless set): a peer that stops answering fails within a few "
     "intervals"},
    {"release_wait_ms", "2000",
     "a canceled or released request waits this long for UCX to finish its operations, then the peer's endpoint "
     "is closed (its other requests end NIXL_ERR_PEER_GONE) and the peer tried again later"},
    {"peer_timeout_ms", "5000",
     "a peer from which nothing completed this long while requests to it are in flight (a link down, a stalled "
     "process) is gone: its requests end NIXL_ERR_PEER_GONE; 0: only UCX's own error handling"},
    {"spin_us", "200",
     "after the last event or post the progress thread keeps polling this long before it naps or sleeps, so a "
     "stream of transfers is not paced by wake-ups; 0: nap at once"},
    {"error_handling", "peer",
     "UCX endpoints' error handling (NIXL's ucx_error_handling_mode): peer, UCX's peer failure handling, the only "
     "mode this backend runs; none is taken as peer, with a warning (src/backends/ucx/README.md says why and what "
     "none would gain)"},
    {"devices", "",
     "UCX network devices to use, comma-separated (mlx5_0:1,eth0; a name without a port takes every port): those "
     "this UCX has become its NET_DEVICES, over UCX_NET_DEVICES; one it lacks is a warning, and with none found "
     "UCX's choice stands; empty: UCX's choice. NIXL's ucx_devices and device_list"},
};
#define UCX_NUM_PARAMS (sizeof(ucx_params) / sizeof(ucx_params[0]))

nixl_status_t ucx_status_of(ucs_status_t st)
{
    switch (st) {
    case UCS_OK:
        return NIXL_OK;
    case UCS_INPROGRESS:
        return NIXL_IN_PROG;
    case UCS_ERR_CANCELED:
        return NIXL_ERR_CANCELED;
    case UCS_ERR_NO_MEMORY:
        return NIXL_ERR_NO_MEMORY;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
        return NIXL_ERR_PEER_GONE;
    default:
        return NIXL_ERR_XFER_FAILED;
    }
}

/* ---- parameters ---- */

static const char *ucx_param(const nixl_param_t *params, size_t n, size_t idx)
{
    const char *v = params ? nixl_param_find(params, n, ucx_params[idx].key) : NULL;
    return v ? v : ucx_params[idx].default_value;
}

static nixl_status_t ucx_parse_transports(ucx_be_t *be, const char *value)
{
    const char *v = value;
    be->ntransports = 0;
    while (*v) {
        const char *end = strchr(v, ',');
        size_t n = end ? (size_t)(end - v) : strlen(v);
        if (n == 0 || n > UCX_TL_NAME_MAX || be->ntransports == UCX_TRANSPORTS_MAX) {
            UCX_ERROR(be, "ucx: transports=\"%s\" is not valid: expected up to %d names of 1 to %d characters, "
                          "comma-separated", value, UCX_TRANSPORTS_MAX, UCX_TL_NAME_MAX);
            return NIXL_ERR_INVALID_PARAM;
        }
        for (size_t i = 0; i < n; i++) {
            char c = v[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
                UCX_ERROR(be, "ucx: transports: \"%.*s\" is not a transport name", (int)n, v);
                return NIXL_ERR_INVALID_PARAM;
            }
        }
        memcpy(be->transports[be->ntransports], v, n);
        be->transports[be->ntransports][n] = 0;
        be->ntransports++;
        v = end ? end + 1 : v + n;
    }
    return NIXL_OK;
}

/* devices: UCX device names, comma-separated, spaces around the commas
 * allowed (NIXL's device_list is "mlx5_0, mlx5_1"); kept as "a,b". */
static nixl_status_t ucx_parse_devices(ucx_be_t *be, const char *v)
{
    size_t n = 0;
    be->devices[0] = '\0';
    for (const char *p = v; *p;) {
        while (*p == ' ')
            p++;
        size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:.-");
        const char *q = p + len;
        while (*q == ' ')
            q++;
        if (len == 0 || (*q && *q != ',') || n + len + 2 > sizeof(be->devices)) {
            UCX_ERROR(be, "ucx: devices=\"%.64s\" is not valid: expected UCX device names (mlx5_0:1,eth0), "
                          "comma-separated, under %zu characters", v, sizeof(be->devices));
            return NIXL_ERR_INVALID_PARAM;
        }
        n += (size_t)snprintf(be->devices + n, sizeof(be->devices) - n, "%s%.*s", n ? "," : "", (int)len, p);
        p = *q ? q + 1 : q;
        if (*q == ',' && !*p) {
            UCX_ERROR(be, "ucx: devices=\"%.64s\" is not valid: ends with a comma", v);
            return NIXL_ERR_INVALID_PARAM;
        }
    }
    return NIXL_OK;
}

static nixl_status_t ucx_parse_params(ucx_be_t *be, const nixl_param_t *params, size_t n, uint64_t *keepalive_ms)
{
    for (size_t i = 0; i < n; i++) {
        size_t k;
        for (k = 0; k < UCX_NUM_PARAMS; k++)
            if (params[i].key && strcmp(params[i].key, ucx_params[k].key) == 0)
                break;
        if (k == UCX_NUM_PARAMS) {
            UCX_ERROR(be, "ucx: unknown parameter \"%s\"", params[i].key ? params[i].key : "(null)");
            return NIXL_ERR_INVALID_PARAM;
        }
    }
    nixl_status_t st = ucx_parse_transports(be, ucx_param(params, n, 0));
    if (st != NIXL_OK)
        return st;
    const char *v = ucx_param(params, n, 1);
    if (nixl_param_parse_bool(v, &be->progress_thread) != 0) {
        UCX_ERROR(be, "ucx: progress_thread=\"%s\" is not valid: expected 0 or 1", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    uint64_t u;
    v = ucx_param(params, n, 2);
    if (nixl_param_parse_size(v, &u) != 0 || u < 1 || u > 100000) {
        UCX_ERROR(be, "ucx: progress_us=\"%s\" is not valid: expected 1 to 100000", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    be->progress_us = (unsigned)u;
    v = ucx_param(params, n, 3);
    if (nixl_param_parse_size(v, keepalive_ms) != 0 || *keepalive_ms < 10 || *keepalive_ms > 3600000) {
        UCX_ERROR(be, "ucx: keepalive_ms=\"%s\" is not valid: expected 10 to 3600000", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = ucx_param(params, n, 4);
    if (nixl_param_parse_size(v, &be->release_wait_ms) != 0 || be->release_wait_ms > 3600000) {
        UCX_ERROR(be, "ucx: release_wait_ms=\"%s\" is not valid: expected 0 to 3600000", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = ucx_param(params, n, 5);
    if (nixl_param_parse_size(v, &u) != 0 || (u != 0 && (u < 100 || u > 3600000))) {
        UCX_ERROR(be, "ucx: peer_timeout_ms=\"%s\" is not valid: expected 0 (off) or 100 to 3600000", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    be->peer_timeout_ns = u * 1000000ull;
    v = ucx_param(params, n, 6);
    if (nixl_param_parse_size(v, &u) != 0 || u > 100000) {
        UCX_ERROR(be, "ucx: spin_us=\"%s\" is not valid: expected 0 to 100000", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    be->spin_ns = u * 1000;
    v = ucx_param(params, n, 7);
    if (strcmp(v, "none") == 0) {
        /* Engines and deployment scripts written for NIXL pass none (for
         * shared memory, which NIXL's UCX finds no peer failure handler
         * for; this backend has it under peer, above): run, and say what
         * runs instead. */
        UCX_WARN(be, "ucx: error_handling=none is taken as peer: without UCX's peer failure handling UCX 1.13 "
                     "neither ends the operations of a dead peer's endpoint nor tears the worker down cleanly "
                     "after it (a request would hang), so endpoints keep it; shared memory works with it, tcp's "
                     "zero-copy put and cma are not used (src/backends/ucx/README.md)");
    } else if (strcmp(v, "peer") != 0) {
        UCX_ERROR(be, "ucx: error_handling=\"%s\" is not valid: expected peer or none (taken as peer)", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    return ucx_parse_devices(be, ucx_param(params, n, 8));
}

/* ---- progress ---- */

/* UCX can block inside ucp_worker_progress: UCX 1.13's tcp connection
 * setup sends its connection packets with a loop that waits until every
 * byte is out, and under packet loss one call held the instance for 1 to
 * 11 s (TCP's retransmission backoff; README, Not done yet).  Meanwhile no
 * request of the instance can end, whatever its deadline or its peer's
 * silence: the line says so, with the time, so that a request that ended
 * late is explained in the log (netfaults.sh reads it).  A normal call
 * takes microseconds; a post that pushes a large piece over tcp happens
 * outside these stretches. */
void ucx_stall_check(ucx_be_t *be, uint64_t since_ns, uint64_t now)
{
    if (nixl_likely(now - since_ns < UCX_STALL_WARN_MS * 1000000ull))
        return;
    UCX_WARN(be,
             "ucx: UCX held this instance for %llu ms inside ucp_worker_progress: no request of it could end "
             "meanwhile (deadlines and the peer timeout wait for UCX to return)",
             (unsigned long long)((now - since_ns) / 1000000u));
}

void ucx_cu_use(ucx_be_t *be, void *ctx)
{
    if (!ctx || ctx == be->cu_cur)
        return;
    void *prev = NULL;
    nixl_status_t st = be->host->cuda->ctx_bind ? be->host->cuda->ctx_bind(ctx, &prev) : NIXL_ERR_NOT_SUPPORTED;
    if (st != NIXL_OK) {
        /* UCX's own call then fails with the driver's error; say why once. */
        if (!be->cu_warned) {
            be->cu_warned = 1;
            UCX_WARN(be, "ucx: cannot make the CUDA context %p of this instance's GPU memory current (status %d): "
                         "UCX's CUDA calls on this thread will fail",
                     ctx, (int)st);
        }
        return;
    }
    if (!be->cu_scope.changed && prev != ctx) {
        be->cu_scope.saved = prev; /* the holder's own, given back at unlock */
        be->cu_scope.changed = 1;
    }
    be->cu_cur = ctx;
}

void ucx_progress_locked(ucx_be_t *be)
{
    ucx_posts_drain_locked(be);
    uint64_t t0 = nixl_now_ns();
    /* Bounded: a peer streaming at us must not keep a status call here. */
    for (int i = 0; i < 256 && ucp_worker_progress(be->worker); i++)
        ;
    uint64_t now = nixl_now_ns(); /* one clock read for the rest of the call */
    ucx_stall_check(be, t0, now);
    ucx_peers_reap_locked(be, now);
    ucx_reqs_advance_locked(be, UCX_BY_CALL, now);
}

/* The core's progress (with the agent's lock held) must not block: when
 * the instance's lock is taken, its holder is progressing the worker (the
 * thread, or a caller's status call), and the notifications it receives
 * reach the core from there.  Under a UCX call that blocks inside
 * progress (README, Not done yet) waiting here held every agent call up
 * for seconds. */
static nixl_status_t ucx_progress(void *bev)
{
    ucx_be_t *be = bev;
    if (pthread_mutex_trylock(&be->lock) != 0)
        return NIXL_OK;
    ucx_cu_enter(be);
    ucx_progress_locked(be);
    ucx_unlock(be);
    return NIXL_OK;
}

/* The thread's rounds: progress the worker, reap failed peers, advance
 * requests.  Within spin_us of the last event (a round that progressed
 * something) or post it goes straight on to the next round, yielding the
 * CPU between rounds so a caller waiting for the lock gets it: a stream of
 * transfers is then served at polling speed, not paced by wake-ups (over sm
 * a 64 KiB WRITE takes about 10 us; one nap or event-fd wake-up per
 * transfer cost it 10x).  Past that, while requests of ours are in flight
 * it naps progress_us between rounds; idle, it arms the worker and sleeps
 * on its event fd (UCX's wakeup feature), so an idle agent costs no CPU
 * and still wakes for a peer's emulated RMA or a notification.  The sleep
 * is bounded (10 ms) so that stop is seen and peers' liveness keeps being
 * looked at.
 *
 * While a caller polls a request's status more often than progress_us,
 * the thread stands by (naps, without the lock): the caller's status
 * calls progress the worker, and a second thread progressing it as well
 * only takes turns at the lock and a core from the peer.  On the CI box
 * (2 cores, nixlbench WRITE over sm, batch 1, 3 runs of each) the ratio to
 * ucx_perftest went from 0.11-0.49 to 0.47-0.49 at 4 KiB, 0.11-0.77 to
 * 0.60-0.84 at 32 KiB and 0.44-0.50 to 0.76-0.92 at 1 MiB; over tcp 0.17
 * to 0.35 at 4 KiB, the same from 64 KiB up.  A caller that polls less
 * often, or not at all, leaves the worker to the thread as before.
 *
 * Standing by it naps UCX_STANDBY_NAP_US (at least progress_us): a caller
 * that stops polling gets the thread back within that.  Its naps were
 * progress_us (50 us) before, 20,000 wake-ups a second that took the core
 * from the peer's progress thread: on the CI box (2 cores, UCX 1.13,
 * nixlbench WRITE, batch 1, 2000 posts, --perftest none, 2 runs each) 200
 * us moved sm from 1.25-1.40 to 1.50-1.59 GB/s at 4 KiB, 5.43-5.46 to
 * 6.59-6.78 at 64 KiB and 6.75-7.34 to 8.67-8.75 at 1 MiB (context
 * switches of a row 16,700 to 8,000-9,000); tcp 0.19-0.22 to 0.23-0.24 at
 * 4 KiB, the same within noise from 64 KiB up.  1 ms gained a few percent
 * more at the cost of five times the delay. */
#define UCX_STANDBY_NAP_US 200u
static void *ucx_thread_main(void *arg)
{
    ucx_be_t *be = arg;
    struct timespec nap = {0, (long)be->progress_us * 1000};
    unsigned sb_us = be->progress_us > UCX_STANDBY_NAP_US ? be->progress_us : UCX_STANDBY_NAP_US;
    struct timespec standby_nap = {(time_t)(sb_us / 1000000u), (long)(sb_us % 1000000u) * 1000};
    uint64_t last_event = 0, seen_posts = 0;
    const uint64_t standby_ns = (uint64_t)be->progress_us * 1000u;
    while (!atomic_load_explicit(&be->stop, memory_order_acquire)) {
        /* Two clock reads a round (here and after the progress calls): an
         * idle round is a few hundred ns, and the five it made before were
         * a quarter of a target thread's time at 4 KiB (perf, CI box). */
        uint64_t t_in = nixl_now_ns();
        if (t_in - atomic_load_explicit(&be->caller_poll_ns, memory_order_relaxed) < standby_ns) {
            nanosleep(&standby_nap, NULL); /* standing by: the caller polls */
            continue;
        }
        if (pthread_mutex_trylock(&be->lock) != 0) {
            pthread_mutex_lock(&be->lock);
            t_in = nixl_now_ns(); /* the round's budget counts from here */
        }
        ucx_cu_enter(be); /* kept after the round (ucx_cu_keep): later rounds bind nothing */
        if (nixl_unlikely(ucx_posts_drain_locked(be)))
            t_in = nixl_now_ns(); /* the posts are not the progress calls' time */
        /* While UCX has work, more calls before the rest of the round, up
         * to 32 of them or 50 us (a caller waiting for the lock to post,
         * cancel or release gets it soon; one that waits to cancel cuts it
         * short): one call takes a few of sm's FIFO elements, and the
         * round's own cost paid per call halved a target's rate at 64 KiB
         * (nixlbench WRITE over sm: 0.64-0.68 of perftest, 1.37-1.44 with
         * the calls). */
        unsigned n = ucp_worker_progress(be->worker);
        for (unsigned i = 0, k = n; k && i < 32 && nixl_now_ns() - t_in < 50000u &&
                                    !atomic_load_explicit(&be->cancel_waiting, memory_order_relaxed);
             i++)
            n += k = ucp_worker_progress(be->worker);
        /* Read after the lock was taken: no caller_ns of a request (set
         * under the lock) is later than it (the notification grace). */
        uint64_t now = nixl_now_ns();
        ucx_stall_check(be, t_in, now);
        ucx_peers_reap_locked(be, now);
        /* A cancel or release waiting for the lock goes first: advancing
         * now could hand its notification to UCX while the caller that
         * wants it withheld waits behind this round (a progress call can
         * move megabytes over tcp). */
        if (!atomic_load_explicit(&be->cancel_waiting, memory_order_acquire))
            ucx_reqs_advance_locked(be, UCX_BY_THREAD, now);
        if (n || be->posts != seen_posts) {
            last_event = now;
            seen_posts = be->posts;
        }
        int hot = now - last_event < be->spin_ns;
        int idle = n == 0 && !be->run && !hot;
        ucs_status_t armed = idle && be->efd >= 0 ? ucp_worker_arm(be->worker) : UCS_ERR_BUSY;
        ucx_cu_keep(be);
        pthread_mutex_unlock(&be->lock);
        if (armed == UCS_OK) {
            struct pollfd pfd = {.fd = be->efd, .events = POLLIN};
            (void)poll(&pfd, 1, 10);
        } else if (hot || n) {
            sched_yield();
        } else {
            nanosleep(&nap, NULL);
        }
    }
    return NULL;
}

/* ---- instance ---- */

static int ucx_host_usable(const nixl_host_services_t *host)
{
    size_t need = offsetof(nixl_host_services_t, agent_name) + sizeof(host->agent_name);
    return host && host->abi_version >= 1 && host->struct_size >= need && host->log_enabled && host->log &&
           host->config_get && host->fallback && host->notif_deliver && host->agent_name;
}

/* Whether UCX_TLS lets the shared-memory transports in: setting their
 * options otherwise makes UCX warn about an unused setting. */
static int ucx_tls_may_use_mm(void)
{
    const char *tls = getenv("UCX_TLS");
    if (!tls || !*tls || tls[0] == '^')
        return 1;
    static const char *const mm[] = {"all", "sm", "shm", "mm", "posix", "sysv"};
    for (const char *t = tls; *t;) {
        size_t n = strcspn(t, ",");
        for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++)
            if (strlen(mm[i]) == n && strncmp(t, mm[i], n) == 0)
                return 1;
        t += n;
        if (*t == ',')
            t++;
    }
    return 0;
}

/* UCX reads its UCX_* variables itself; ours change its defaults only where
 * the user left them alone. */
static void ucx_config_default(ucx_be_t *be, ucp_config_t *cfg, const char *key, const char *value)
{
    char env[64];
    snprintf(env, sizeof(env), "UCX_%s", key);
    if (getenv(env))
        return;
    ucs_status_t st = ucp_config_modify(cfg, key, value);
    if (st != UCS_OK)
        UCX_WARN(be, "ucx: cannot set UCX %s=%s: %s", key, value, ucs_status_string(st));
}

/* devices given: the context just made shows which network devices this
 * UCX has; the names found there become UCX's NET_DEVICES and the context
 * is made again with it.  A name UCX lacks is said on our log (UCX itself
 * would warn on stdout, into whatever the application writes there), and
 * when none is found UCX's own choice stands: the path (ucx.<transport>)
 * and the transports parameter still say and police what carries the
 * bytes. */
/* The context's transport/device resources ("tcp/lo sysv/memory ..."),
 * from ucp_context_print_info, into out; "(none listed)" without any.
 * Caller holds be->lock once other threads can reach the context. */
static void ucx_ctx_resources(ucx_be_t *be, char *out, size_t cap)
{
    char *info = NULL;
    size_t ilen = 0;
    FILE *f = open_memstream(&info, &ilen);
    if (f) {
        ucp_context_print_info(be->ctx, f);
        fclose(f);
    }
    if (!info || ucx_ctx_info_resources(info, out, cap) == 0)
        snprintf(out, cap, "(none listed)");
    free(info);
}

static ucs_status_t ucx_restrict_devices(ucx_be_t *be, ucp_config_t *cfg, const ucp_params_t *pp)
{
    char res[1024], found[sizeof(be->devices)], missing[sizeof(be->devices)];
    ucx_ctx_resources(be, res, sizeof(res));
    ucx_devices_match(be->devices, res, found, sizeof(found), missing, sizeof(missing));
    if (!found[0]) {
        UCX_WARN(be, "ucx: devices=%s: no such network device in this UCX (its resources: %s); UCX's own choice stands",
                 be->devices, res);
        return UCS_OK;
    }
    if (missing[0])
        UCX_WARN(be, "ucx: devices: %s not found in this UCX (its resources: %s); using %s", missing, res, found);
    ucs_status_t us = ucp_config_modify(cfg, "NET_DEVICES", found);
    if (us != UCS_OK) {
        UCX_ERROR(be, "ucx: devices=%s: UCX refuses NET_DEVICES=%s: %s", be->devices, found, ucs_status_string(us));
        return us;
    }
    ucp_cleanup(be->ctx);
    be->ctx = NULL;
    UCX_INFO(be, "ucx: devices=%s: UCX NET_DEVICES=%s", be->devices, found);
    return ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, pp, cfg, &be->ctx);
}

static nixl_status_t ucx_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                                void **be_out)
{
    if (!ucx_host_usable(host) || !be_out)
        return NIXL_ERR_INVALID_PARAM;
    ucx_be_t *be = calloc(1, sizeof(*be));
    if (!be)
        return NIXL_ERR_NO_MEMORY;
    be->host = host;
    uint64_t keepalive_ms = 500;
    nixl_status_t st = ucx_parse_params(be, params, num_params, &keepalive_ms);
    if (st != NIXL_OK)
        goto err_free;
    st = ucx_ucp_load(host); /* UCX itself, the first time (ucx_ucp.c) */
    if (st != NIXL_OK)
        goto err_free;
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_free;
    }
    if (pthread_mutex_init(&be->pend_lock, NULL) != 0) {
        pthread_mutex_destroy(&be->lock);
        st = NIXL_ERR_NO_MEMORY;
        goto err_free;
    }

    ucp_config_t *cfg;
    ucs_status_t us = ucp_config_read(NULL, NULL, &cfg);
    if (us != UCS_OK) {
        UCX_ERROR(be, "ucx backend unavailable: ucp_config_read: %s", ucs_status_string(us));
        st = NIXL_ERR_NOT_SUPPORTED;
        goto err_lock;
    }
    /* UCX 1.13's shared-memory transports (sysv, posix) support peer
     * failure handling only with MM_ERROR_HANDLING=y; without it an
     * endpoint in UCP_ERR_HANDLING_MODE_PEER finds no same-host transport
     * ("no peer failure handler") and a peer of UCX_TLS=sm is unreachable. */
    if (!getenv("UCX_POSIX_ERROR_HANDLING") && !getenv("UCX_SYSV_ERROR_HANDLING") && ucx_tls_may_use_mm())
        ucx_config_default(be, cfg, "MM_ERROR_HANDLING", "y");
    char ka[32];
    snprintf(ka, sizeof(ka), "%llums", (unsigned long long)keepalive_ms);
    ucx_config_default(be, cfg, "KEEPALIVE_INTERVAL", ka);

    ucp_params_t pp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | (be->progress_thread ? UCP_FEATURE_WAKEUP : 0),
    };
    us = ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &pp, cfg, &be->ctx); /* ucp_init, not inlined */
    if (us == UCS_OK && be->devices[0])
        us = ucx_restrict_devices(be, cfg, &pp);
    ucp_config_release(cfg);
    if (us != UCS_OK) {
        if (be->ctx) /* made, then not made again with the devices */
            ucp_cleanup(be->ctx);
        UCX_ERROR(be, "ucx backend unavailable: ucp_init: %s", ucs_status_string(us));
        st = NIXL_ERR_NOT_SUPPORTED;
        goto err_lock;
    }
    be->proto_v2 = ucx_proto_v2();
    ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(be->ctx, &ca) == UCS_OK) {
        be->mem_types = ca.memory_types;
        be->has_cuda = (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    }

    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE, /* every call under be->lock */
    };
    us = ucp_worker_create(be->ctx, &wp, &be->worker);
    if (us != UCS_OK) {
        UCX_ERROR(be, "ucx backend unavailable: ucp_worker_create: %s", ucs_status_string(us));
        st = NIXL_ERR_NOT_SUPPORTED;
        goto err_ctx;
    }
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = UCX_AM_NOTIF,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = ucx_am_recv,
        .arg = be,
    };
    us = ucp_worker_set_am_recv_handler(be->worker, &ap);
    if (us != UCS_OK) {
        UCX_ERROR(be, "ucx: ucp_worker_set_am_recv_handler: %s", ucs_status_string(us));
        st = NIXL_ERR_BACKEND;
        goto err_worker;
    }
    ucp_address_t *addr;
    size_t alen;
    us = ucp_worker_get_address(be->worker, &addr, &alen);
    if (us != UCS_OK || alen == 0 || alen > UCX_CONN_ADDR_MAX) {
        UCX_ERROR(be, "ucx: ucp_worker_get_address: %s (%zu bytes)", ucs_status_string(us), alen);
        if (us == UCS_OK)
            ucp_worker_release_address(be->worker, addr);
        st = NIXL_ERR_BACKEND;
        goto err_worker;
    }
    be->addr = malloc(alen);
    if (!be->addr) {
        ucp_worker_release_address(be->worker, addr);
        st = NIXL_ERR_NO_MEMORY;
        goto err_worker;
    }
    memcpy(be->addr, addr, alen);
    be->addr_len = alen;
    ucp_worker_release_address(be->worker, addr);

    be->efd = -1;
    if (be->progress_thread) {
        int fd = -1;
        us = ucp_worker_get_efd(be->worker, &fd);
        if (us == UCS_OK)
            be->efd = fd;
        else
            UCX_INFO(be, "ucx: no worker event fd (%s): the idle progress thread naps instead of sleeping",
                     ucs_status_string(us));
        if (pthread_create(&be->thread, NULL, ucx_thread_main, be) != 0) {
            UCX_ERROR(be, "ucx: cannot start the progress thread");
            st = NIXL_ERR_NO_MEMORY;
            goto err_addr;
        }
        be->thread_started = 1;
    }
    UCX_DEBUG(be, "ucx: created: UCX %s, worker address %zu bytes, CUDA memory %s, progress thread %d",
              ucp_get_version_string(), be->addr_len, be->has_cuda ? "yes" : "no", be->progress_thread);
    *be_out = be;
    return NIXL_OK;

err_addr:
    free(be->addr);
err_worker:
    ucp_worker_destroy(be->worker);
err_ctx:
    ucp_cleanup(be->ctx);
err_lock:
    pthread_mutex_destroy(&be->pend_lock);
    pthread_mutex_destroy(&be->lock);
err_free:
    free(be);
    return st;
}

static void ucx_destroy(void *bev)
{
    ucx_be_t *be = bev;
    if (!be)
        return;
    if (be->thread_started) {
        atomic_store_explicit(&be->stop, 1, memory_order_release);
        pthread_join(be->thread, NULL);
    }
    /* Peers should be gone; close what a careless core left. */
    while (be->peers)
        ucx_peer_unload(be, be->peers);
    /* UCX 1.13 aborts in ucp_worker_destroy (an assertion in
     * ucp_ep_purge_lanes, "got REP message") when an endpoint UCX made for
     * a peer's wireup still has its reply queued.  Seen with two agents of
     * one process loading each other and destroyed in turn (conformance
     * length_mismatch over tcp, 15% of runs alone): the peer's wireup
     * request arrives after our endpoint to it was closed, UCX answers on
     * a new internal endpoint whose tcp connection is still being made
     * when the worker goes.  So: progress until 2 ms pass with nothing
     * done (at most 50 ms), letting late requests arrive, then flush the
     * worker (every endpoint, UCX's internal ones too), bounded by
     * release_wait_ms, so that their replies are out. */
    ucx_cu_enter(be); /* cuda_copy and cuda_ipc free their driver resources */
    uint64_t t0 = nixl_now_ns(), last = t0, now = t0;
    while (now - last < 2000000ull && now - t0 < 50000000ull) {
        if (ucp_worker_progress(be->worker))
            last = now;
        now = nixl_now_ns();
    }
    ucp_request_param_t fp = {.op_attr_mask = 0};
    void *freq = ucp_worker_flush_nbx(be->worker, &fp);
    if (UCS_PTR_IS_PTR(freq)) {
        uint64_t deadline = nixl_now_ns() + be->release_wait_ms * 1000000ull;
        while (ucp_request_check_status(freq) == UCS_INPROGRESS && nixl_now_ns() < deadline)
            ucp_worker_progress(be->worker);
        ucp_request_free(freq);
    }
    free(be->addr);
    ucp_worker_destroy(be->worker);
    ucp_cleanup(be->ctx);
    ucx_cu_leave(be);
    pthread_mutex_destroy(&be->pend_lock);
    pthread_mutex_destroy(&be->lock);
    free(be);
}

/* Three lines: the UCX and what this backend makes of it; the memory types
 * this UCX handles (ucp_context_query; a newer UCX than our headers may
 * name types we only number); its transport/device resources
 * (ucp_context_print_info), the candidates for the path. */
static nixl_status_t ucx_describe(void *bev, char *buf, size_t *len)
{
    ucx_be_t *be = bev;
    char text[2048];
    size_t n = (size_t)snprintf(text, sizeof(text), "UCX %s, worker address %zu bytes, CUDA memory: %s, transports: %s%s",
                                ucp_get_version_string(), be->addr_len, be->has_cuda ? "yes" : "no (VRAM: NO_PATH)",
                                be->ntransports ? "" : "any", be->ntransports ? be->transports[0] : "");
    for (unsigned i = 1; i < be->ntransports && n < sizeof(text); i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, ",%s", be->transports[i]);
    if (n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\nUCX memory types:");
    for (unsigned t = 0; t < 64 && n < sizeof(text); t++) {
        if (!(be->mem_types & UCS_BIT(t)))
            continue;
        if (t < UCS_MEMORY_TYPE_LAST)
            n += (size_t)snprintf(text + n, sizeof(text) - n, " %s", ucs_memory_type_names[t]);
        else
            n += (size_t)snprintf(text + n, sizeof(text) - n, " type%u", t);
    }
    if (n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\nUCX resources: ");
    if (n < sizeof(text)) {
        ucx_lock(be);
        ucx_ctx_resources(be, text + n, sizeof(text) - n);
        ucx_unlock(be);
    }
    size_t need = strlen(text) + 2;
    if (buf && *len)
        snprintf(buf, *len, "%s\n", text);
    *len = need;
    return NIXL_OK;
}

static const nixl_backend_ops_t ucx_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "ucx",
    .description = "other hosts (and this one) over UCX: ucp put/get of host memory, notifications as active "
                   "messages after a flush; the path names the transport UCX chose (ucx.tcp, ucx.sysv, ucx.rc_mlx5...)",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM) | NIXL_MEM_BIT(NIXL_MEM_VRAM),
    .caps = NIXL_CAP_CROSS_HOST | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS,
    .params = ucx_params,
    .num_params = UCX_NUM_PARAMS,
    .create = ucx_create,
    .destroy = ucx_destroy,
    .reg = ucx_reg,
    .dereg = ucx_dereg,
    .rkey_pack = ucx_rkey_pack,
    .conn_pack = ucx_conn_pack,
    .peer_unload = ucx_peer_unload,
    .rkey_load = ucx_rkey_load,
    .rkey_unload = ucx_rkey_unload,
    .xfer_prepare = ucx_xfer_prepare,
    .xfer_post = ucx_xfer_post,
    .xfer_status = ucx_xfer_status,
    .xfer_release = ucx_xfer_release,
    .notif_send = ucx_notif_send,
    .progress = ucx_progress,
    .describe = ucx_describe,
    .xfer_cancel = ucx_xfer_cancel,
    .peer_open = ucx_peer_open,
    .peer_connect = ucx_peer_connect,
    .xfer_prepare_indexed = ucx_xfer_prepare_indexed,
    .peer_alive = ucx_peer_alive,
};

const nixl_backend_ops_t *nixl_backend_ucx_ops(void)
{
    return &ucx_ops;
}

/* A loadable module (src/backends/meson.build says why): the core finds
 * this entry in its plugin directory. */
__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void);

__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void)
{
    return &ucx_ops;
}
