/*
 * agent.c - the agent: creation and teardown, the lock that serializes API
 * calls, the optional progress thread and metadata listener, and the
 * notification queue.
 *
 * Notifications arrive through a backend's progress() (host service
 * notif_deliver, always with the agent lock held) and wait in a FIFO until
 * nixl_notifs_get hands them out.  The callbacks run without the lock, so a
 * callback may call back into the agent.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/agent.h"
#include "core/be_call.h"
#include "md/socket.h"
#include "util/config.h"
#include "util/log.h"
#include "util/str.h"
#include "util/time.h"

static int agent_name_valid(const char *name)
{
    size_t n = 0;
    for (; name[n]; n++) {
        unsigned char c = (unsigned char)name[n];
        if (!(isalnum(c) || strchr("_.:@/+-", c)))
            return 0;
    }
    return n > 0 && n <= NIXL_NAME_MAX;
}

/* A backend's progress error is logged when it changes, and at most every
 * 10 s while it repeats (a progress thread calls 10,000 times a second). */
#define PROGRESS_ERR_LOG_NS (10ull * 1000000000ull)

nixl_status_t nixl_agent_progress_locked(nixl_agent_t *a)
{
    nixl_status_t first = NIXL_OK;
    for (int i = 0; i < a->num_backends; i++) {
        nixl_backend_t *b = a->backends[i];
        nixl_status_t st = be_progress(b);
        if (nixl_likely(st >= 0)) {
            b->progress_err = NIXL_OK;
            continue;
        }
        if (first == NIXL_OK)
            first = st;
        uint64_t now = nixl_now_ns();
        if (st != b->progress_err || now - b->progress_err_ns > PROGRESS_ERR_LOG_NS) {
            NIXL_ERROR("agent %s: backend %s: progress failed: %s (logged again if it changes, or in 10 s)",
                       a->name, be_name(b), nixl_strerror(st));
            b->progress_err_ns = now;
        }
        b->progress_err = st;
    }
    return first;
}

static void *progress_main(void *arg)
{
    nixl_agent_t *a = arg;
    while (atomic_load_explicit(&a->progress_running, memory_order_acquire)) {
        nixl_agent_lock(a);
        nixl_agent_progress_locked(a);
        nixl_agent_unlock(a);
        struct timespec ts = {0, (long)a->progress_interval_us * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---- listener glue ---- */

static nixl_status_t on_load(void *arg, const char *from, const void *blob, size_t len)
{
    nixl_agent_t *a = arg;
    nixl_agent_lock(a);
    nixl_status_t st = nixl_md_load_remote_from_locked(a, blob, len, from, NULL);
    nixl_agent_unlock(a);
    return st;
}

static nixl_status_t on_fetch(void *arg, void **blob_out, size_t *len_out)
{
    nixl_agent_t *a = arg;
    nixl_agent_lock(a);
    nixl_status_t st = nixl_md_get_local_locked(a, blob_out, len_out);
    nixl_agent_unlock(a);
    return st;
}

static nixl_status_t on_invalidate(void *arg, const char *from, const char *name)
{
    nixl_agent_t *a = arg;
    nixl_agent_lock(a);
    nixl_status_t st = nixl_md_invalidate_from_locked(a, name, from);
    nixl_agent_unlock(a);
    return st;
}

/* ---- create / destroy ---- */

/* The listener is unauthenticated (docs/trust.md): on an address other
 * hosts can reach, say so once per process, with the fix. */
static int addr_is_loopback(const char *addr)
{
    struct in_addr v4;
    struct in6_addr v6;
    if (!addr || strcmp(addr, "localhost") == 0)
        return addr != NULL;
    if (inet_pton(AF_INET, addr, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, addr, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    return 0;
}

static void listener_warn_exposed(const nixl_agent_t *a, const char *addr)
{
    static atomic_int warned;
    if (a->md_key || addr_is_loopback(addr) || atomic_exchange(&warned, 1))
        return;
    NIXL_WARN("agent %s: the metadata listener on %s:%u is not authenticated: whoever reaches the port can load "
              "metadata under any agent name or invalidate a peer. Set NIXL_MD_SECRET_FILE to a secret the "
              "deployment's agents share, or NIXL_LISTEN_ADDR=127.0.0.1 when the peers are on this host, or keep "
              "the port reachable only from the cluster (docs/trust.md)",
              a->name, addr ? addr : "?", (unsigned)nixl_md_listener_port(a->listener));
}

NIXL_API nixl_status_t nixl_agent_create(const nixl_agent_config_t *cfg, nixl_agent_t **agent_out)
{
    if (!cfg || !agent_out)
        return NIXL_ERR_NULL;
    nixl_log_init();
    {
        /* Enumerate backends first so their NIXL_<BACKEND>_* rows exist
         * before the environment is checked for misspellings. */
        const nixl_backend_impl_t *im;
        size_t n;
        nixl_backend_impls(&im, &n);
        static pthread_once_t env_once = PTHREAD_ONCE_INIT;
        pthread_once(&env_once, nixl_cfg_check_env);
    }
    if (!(cfg->field_mask & NIXL_AGENT_CONFIG_NAME) || !cfg->name) {
        NIXL_ERROR("agent create: a name is required");
        return NIXL_ERR_INVALID_PARAM;
    }
    if (!agent_name_valid(cfg->name)) {
        NIXL_ERROR("agent create: name '%s' must be 1..%d characters of [A-Za-z0-9_.:@/+-]", cfg->name,
                   NIXL_NAME_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    nixl_agent_t *a = calloc(1, sizeof(*a));
    if (!a)
        return NIXL_ERR_NO_MEMORY;
    nixl_strlcpy(a->name, cfg->name, sizeof(a->name));
    nixl_thread_mode_t mode =
        (cfg->field_mask & NIXL_AGENT_CONFIG_THREAD_MODE) ? cfg->thread_mode : NIXL_THREAD_SERIALIZED;
    if (mode != NIXL_THREAD_NONE && mode != NIXL_THREAD_SERIALIZED) {
        NIXL_ERROR("agent create: thread mode %d is not a nixl_thread_mode_t", (int)mode);
        free(a);
        return NIXL_ERR_INVALID_PARAM;
    }
    int progress = (cfg->field_mask & NIXL_AGENT_CONFIG_PROGRESS_THREAD) && cfg->progress_thread;
    int listen = (cfg->field_mask & NIXL_AGENT_CONFIG_LISTEN) && cfg->listen;
    if (mode == NIXL_THREAD_NONE && (progress || listen))
        NIXL_INFO("agent %s: thread mode NONE with a %s thread: calls are serialized anyway", a->name,
                  progress ? "progress" : "listener");
    a->serialized = mode == NIXL_THREAD_SERIALIZED || progress || listen;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&a->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    if (getrandom(&a->instance_id, sizeof(a->instance_id), 0) != sizeof(a->instance_id))
        a->instance_id = nixl_now_ns() ^ ((uint64_t)getpid() << 32);
    pthread_mutex_init(&a->inbox.lock, NULL);
    a->inbox.tail = &a->inbox.head;
    a->stats = nixl_stats_create();
    nixl_status_t st = NIXL_ERR_NO_MEMORY;
    if (!a->stats)
        goto err_free;
    a->progress_interval_us = (cfg->field_mask & NIXL_AGENT_CONFIG_PROGRESS_INTERVAL_US)
                                  ? cfg->progress_interval_us
                                  : (uint32_t)nixl_cfg_size("NIXL_PROGRESS_INTERVAL_US");
    uint64_t timeout_ms = nixl_cfg_size("NIXL_XFER_TIMEOUT_MS");
    a->xfer_timeout_ns = (timeout_ms > UINT32_MAX ? UINT32_MAX : timeout_ms) * 1000000ull;
    if (a->progress_interval_us == 0)
        a->progress_interval_us = 1;

    const char *secret = nixl_cfg_get("NIXL_MD_SECRET_FILE");
    if (secret && *secret) {
        st = nixl_md_key_load(secret, &a->md_key);
        if (st != NIXL_OK) {
            NIXL_ERROR("agent %s: NIXL_MD_SECRET_FILE=%s cannot be used (%s): the agent is not created rather than "
                       "run unauthenticated",
                       a->name, secret, nixl_strerror(st));
            goto err_stats;
        }
    }
    if (listen) {
        nixl_md_handlers_t h = {a, on_load, on_fetch, on_invalidate, a->md_key};
        uint16_t port = (cfg->field_mask & NIXL_AGENT_CONFIG_LISTEN_PORT) ? cfg->listen_port : 0;
        const char *laddr = nixl_cfg_get("NIXL_LISTEN_ADDR");
        st = nixl_md_listener_start(laddr, port, &h, &a->listener);
        if (st != NIXL_OK) {
            NIXL_ERROR("agent %s: metadata listener on port %u: %s", a->name, port, nixl_strerror(st));
            goto err_stats;
        }
        listener_warn_exposed(a, laddr);
    }
    if (progress) {
        a->progress_running = 1;
        if (pthread_create(&a->progress_thread, NULL, progress_main, a) != 0) {
            NIXL_ERROR("agent %s: cannot start the progress thread", a->name);
            a->progress_running = 0;
            st = NIXL_ERR_NO_MEMORY;
            goto err_listener;
        }
    }
    *agent_out = a;
    return NIXL_OK;

err_listener:
    if (a->listener)
        nixl_md_listener_stop(a->listener);
err_stats:
    nixl_md_key_free(a->md_key);
    nixl_stats_destroy(a->stats);
err_free:
    pthread_mutex_destroy(&a->inbox.lock);
    pthread_mutex_destroy(&a->lock);
    free(a);
    return st;
}

NIXL_API void nixl_agent_destroy(nixl_agent_t *a)
{
    if (!a)
        return;
    /* Threads that call into the agent stop first. */
    if (a->listener)
        nixl_md_listener_stop(a->listener);
    nixl_md_etcd_shutdown(a);
    if (a->progress_running) {
        atomic_store_explicit(&a->progress_running, 0, memory_order_release);
        pthread_join(a->progress_thread, NULL);
    }
    nixl_agent_lock(a);
    nixl_xfers_destroy(a);
    nixl_peers_destroy(a);
    nixl_registry_destroy(a);
    for (int b = 0; b < a->num_backends; b++)
        nixl_backend_free(a->backends[b]);
    a->num_backends = 0;
    /* No backend is left to deliver: the inbox is ours alone. */
    while (a->inbox.head) {
        nixl_notif_item_t *it = a->inbox.head;
        a->inbox.head = it->next;
        free(it);
    }
    nixl_agent_unlock(a);
    nixl_md_key_free(a->md_key);
    nixl_stats_destroy(a->stats);
    pthread_mutex_destroy(&a->inbox.lock);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

NIXL_API const char *nixl_agent_name(const nixl_agent_t *agent)
{
    return agent ? agent->name : "";
}

NIXL_API uint16_t nixl_agent_listen_port(const nixl_agent_t *agent)
{
    return agent && agent->listener ? nixl_md_listener_port(agent->listener) : 0;
}

NIXL_API nixl_status_t nixl_agent_progress(nixl_agent_t *agent)
{
    if (!agent)
        return NIXL_ERR_NULL;
    nixl_agent_lock(agent);
    nixl_status_t st = nixl_agent_progress_locked(agent);
    nixl_agent_unlock(agent);
    return st;
}

/* ---- notifications ---- */

NIXL_API nixl_status_t nixl_notif_send(nixl_agent_t *a, const char *peer, const void *msg, size_t len,
                                       const nixl_opt_args_t *opt)
{
    if (!a || !peer || (len && !msg))
        return NIXL_ERR_NULL;
    if (len > NIXL_NOTIF_MAX) {
        NIXL_ERROR("agent %s: notification of %zu bytes exceeds NIXL_NOTIF_MAX (%d)", a->name, len, NIXL_NOTIF_MAX);
        return NIXL_ERR_TOO_BIG;
    }
    nixl_agent_lock(a);
    nixl_status_t st;
    nixl_peer_t *p = nixl_peer_find(a, peer);
    if (!p || !p->cur) {
        NIXL_ERROR("agent %s: notification to %s peer '%s'", a->name, p ? "invalidated" : "unknown", peer);
        st = p ? NIXL_ERR_PEER_INVALIDATED : NIXL_ERR_UNKNOWN_PEER;
        goto out;
    }
    nixl_peer_inc_t *inc = p->cur;
    nixl_peer_backend_t *best = NULL;
    int best_rank = 99;
    for (int b = 0; b < a->num_backends; b++) {
        nixl_peer_backend_t *bk = &inc->bk[b];
        if (!bk->backend || !be_can_notify(bk->backend))
            continue;
        if (!nixl_opt_allows(opt, bk->backend))
            continue;
        int rank = nixl_peer_backend_rank(bk->backend, inc);
        if (rank < best_rank) {
            best = bk;
            best_rank = rank;
        }
    }
    if (!best) {
        NIXL_ERROR("agent %s: no backend can send a notification to %s", a->name, peer);
        st = NIXL_ERR_NO_PATH;
        goto out;
    }
    st = be_notif_send(best->backend, best->peer, msg, len);
    if (st != NIXL_OK)
        NIXL_ERROR("agent %s: notification to %s over %s failed: %s", a->name, peer, be_name(best->backend),
                   nixl_strerror(st));
out:
    nixl_agent_unlock(a);
    return st;
}

nixl_status_t nixl_inbox_push(nixl_inbox_t *in, const char *sender, const void *msg, size_t len)
{
    nixl_notif_item_t *it = malloc(sizeof(*it) + len);
    if (!it)
        return NIXL_ERR_NO_MEMORY;
    it->next = NULL;
    nixl_strlcpy(it->sender, sender, sizeof(it->sender));
    it->len = len;
    if (len)
        memcpy(it->msg, msg, len);
    pthread_mutex_lock(&in->lock);
    *in->tail = it;
    in->tail = &it->next;
    in->bytes += len;
    pthread_mutex_unlock(&in->lock);
    return NIXL_OK;
}

NIXL_API nixl_status_t nixl_notifs_get(nixl_agent_t *a, nixl_notif_cb_t cb, void *arg, size_t *count_out)
{
    if (!a || !cb)
        return NIXL_ERR_NULL;
    nixl_agent_lock(a);
    nixl_agent_progress_locked(a);
    nixl_agent_unlock(a);
    pthread_mutex_lock(&a->inbox.lock);
    nixl_notif_item_t *list = a->inbox.head;
    a->inbox.head = NULL;
    a->inbox.tail = &a->inbox.head;
    a->inbox.bytes = 0;
    pthread_mutex_unlock(&a->inbox.lock);
    size_t n = 0;
    while (list) {
        nixl_notif_item_t *it = list;
        list = it->next;
        cb(it->sender, it->msg, it->len, arg);
        free(it);
        n++;
    }
    if (count_out)
        *count_out = n;
    return NIXL_OK;
}
