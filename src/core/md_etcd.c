/*
 * md_etcd.c - the agent's side of the etcd channel: publish, fetch and
 * invalidate metadata through etcd (the public calls), and the agent's etcd
 * thread that does the network work, keeps the lease alive and watches the
 * peers fetched through etcd.
 *
 * Keys, under the namespace NS (NIXL_ETCD_NAMESPACE):
 *   NS/v/<agent>                 version key: rewritten at every publish
 *   NS/md/<agent>                the full metadata blob
 *   NS/pmd/<label>/<agent>       a labelled partial blob (md_local.c makes
 *                                it; a fetcher adds its regions, peer.c)
 * Each publish writes the blob and the version key in one transaction,
 * attached to the agent's lease, and only if the version key is absent or
 * already ours: two live agents cannot hold one name.  Watchers watch the
 * NS/v/ prefix only, so a watch carries small events, not blobs: when a
 * watched peer's version key changes they read its blob again and reload it
 * (generation bump) if the bytes differ; when it is deleted (lease expired,
 * peer invalidated itself) they invalidate the peer, so requests against it
 * fail with NIXL_ERR_PEER_INVALIDATED.  A peer that comes back is reloaded.
 *
 * Threads and locks.  The API calls run on the caller's thread: they build
 * the blob under the agent lock and queue a request.  Everything that talks
 * to etcd runs on the agent's etcd thread, which owns the client and every
 * structure below the queue; it takes the agent lock only to load or
 * invalidate a peer, and never holds it while waiting on the network.
 * Lock order: agent lock, then the queue mutex.  Callbacks run on the etcd
 * thread with no lock held.  Since the etcd thread calls into the agent, an
 * agent that uses etcd is serialized like one with a progress thread.
 */
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/agent.h"
#include "md/auth.h"
#include "util/config.h"
#include "util/log.h"
#include "util/str.h"
#include "util/time.h"

#ifdef NIXL_HAVE_ETCD

#include "md/etcd.h"

#define ETCD_LABEL_MAX 63
#define ETCD_NS_MAX 128
#define ETCD_KEY_CAP (ETCD_NS_MAX + 8 + ETCD_LABEL_MAX + 1 + NIXL_NAME_MAX + 1)
#define ETCD_RETRY_MIN_MS 250u
#define ETCD_RETRY_MAX_MS 2000u
/* A pending fetch reads again this often even without a watch event. */
#define ETCD_FETCH_POLL_MS 500u
#define ETCD_SHUTDOWN_REVOKE_MS 1000u
#define ETCD_IDLE_WAIT_MS 1000
#define MS_NS 1000000ull

typedef struct etcd_cb {
    nixl_etcd_cb_t fn;
    void *arg;
} etcd_cb_t;

typedef struct etcd_cbs {
    etcd_cb_t *v;
    size_t n, cap;
} etcd_cbs_t;

typedef enum { REQ_PUBLISH, REQ_FETCH, REQ_INVALIDATE } etcd_req_type_t;

/* API thread -> etcd thread. */
typedef struct etcd_req {
    struct etcd_req *next;
    etcd_req_type_t type;
    char name[NIXL_NAME_MAX + 1];
    char label[ETCD_LABEL_MAX + 1];
    void *blob;
    size_t len;
    uint32_t timeout_ms;
    etcd_cb_t cb;
} etcd_req_t;

/* Something this agent published (kept for re-publishing under a new lease). */
typedef struct etcd_item {
    char label[ETCD_LABEL_MAX + 1]; /* "" = the full metadata */
    void *blob;
    size_t len;
    int in_etcd;
    int taken_warned;
    uint64_t deadline_ns; /* callbacks learn of a failure after this */
    uint64_t next_try_ns;
    uint32_t backoff_ms;
    etcd_cbs_t cbs;
} etcd_item_t;

typedef enum {
    TRACK_NEW,    /* never loaded */
    TRACK_LOADED, /* we loaded generation gen */
    TRACK_GONE,   /* its keys vanished and we invalidated it */
} etcd_track_state_t;

/* A peer fetched through etcd, and watched. */
typedef struct etcd_track {
    char name[NIXL_NAME_MAX + 1];
    char label[ETCD_LABEL_MAX + 1];
    etcd_track_state_t state;
    void *blob; /* what we loaded last */
    size_t len;
    uint64_t gen;
    int64_t v_mod_rev;
    int dirty;   /* version key changed: read the blob again */
    int deleted; /* version key deleted */
    int left;    /* it said goodbye (a clean exit or invalidation), not a lost lease */
    uint64_t missing_since_ns;
    int fetching; /* a fetch call waits for it */
    uint64_t deadline_ns;
    uint64_t next_try_ns;
    uint32_t backoff_ms;
    etcd_cbs_t cbs;
} etcd_track_t;

struct nixl_md_etcd {
    nixl_agent_t *agent;
    nixl_etcd_t *cli;
    pthread_t thread;
    pthread_mutex_t mu; /* the queue and stop */
    etcd_req_t *q_head, **q_tail;
    int stop;

    char ns[ETCD_NS_MAX + 1];
    uint32_t timeout_ms;
    int64_t ttl_s;

    /* Owned by the etcd thread. */
    int64_t lease;
    int unreachable; /* the last keep-alive got no answer */
    uint64_t next_keepalive_ns;
    uint64_t lease_retry_ns;
    uint32_t lease_backoff_ms;
    uint64_t seq;
    etcd_item_t **items;
    size_t num_items, cap_items;
    etcd_track_t **tracks;
    size_t num_tracks, cap_tracks;
    uint64_t watch_retry_ns;
    uint32_t watch_backoff_ms;
};

typedef struct nixl_md_etcd nixl_md_etcd_t;

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------ */

static uint32_t backoff_next(uint32_t *b)
{
    uint32_t cur = *b ? *b : ETCD_RETRY_MIN_MS;
    *b = cur * 2 > ETCD_RETRY_MAX_MS ? ETCD_RETRY_MAX_MS : cur * 2;
    return cur;
}

static int cbs_add(etcd_cbs_t *c, etcd_cb_t cb)
{
    if (!cb.fn)
        return 0;
    if (NIXL_ARRAY_RESERVE(c->v, c->cap, c->n + 1, 2))
        return -1;
    c->v[c->n++] = cb;
    return 0;
}

/* Runs and forgets the callbacks; no lock may be held. */
static void cbs_fire(nixl_md_etcd_t *e, etcd_cbs_t *c, const char *peer, nixl_status_t st)
{
    etcd_cbs_t run = *c;
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < run.n; i++)
        run.v[i].fn(e->agent, peer, st, run.v[i].arg);
    free(run.v);
}

/* Agent names and labels: the codec's alphabet; labels without '/' so a
 * partial key splits unambiguously. */
static int name_valid(const char *s, size_t max, int allow_slash)
{
    size_t n = 0;
    for (; s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        if (n >= max || !(isalnum(c) || strchr(allow_slash ? "_.:@/+-" : "_.:@+-", c)))
            return 0;
    }
    return n > 0;
}

static size_t key_version(const nixl_md_etcd_t *e, const char *name, char *out)
{
    return (size_t)snprintf(out, ETCD_KEY_CAP, "%s/v/%s", e->ns, name);
}

static size_t key_blob(const nixl_md_etcd_t *e, const char *name, const char *label, char *out)
{
    if (label[0])
        return (size_t)snprintf(out, ETCD_KEY_CAP, "%s/pmd/%s/%s", e->ns, label, name);
    return (size_t)snprintf(out, ETCD_KEY_CAP, "%s/md/%s", e->ns, name);
}

static size_t key_version_prefix(const nixl_md_etcd_t *e, char *out)
{
    return (size_t)snprintf(out, ETCD_KEY_CAP, "%s/v/", e->ns);
}

static const nixl_etcd_kv_t *kv_find(const nixl_etcd_reply_t *r, const char *key, size_t len)
{
    for (size_t i = 0; i < r->num_kvs; i++)
        if (r->kvs[i].key_len == len && !memcmp(r->kvs[i].key, key, len))
            return &r->kvs[i];
    return NULL;
}

static const char *label_desc(const char *label)
{
    return label[0] ? label : "full";
}

/* ------------------------------------------------------------------------
 * Publishing (etcd thread)
 * ------------------------------------------------------------------------ */

static etcd_item_t *item_find(nixl_md_etcd_t *e, const char *label)
{
    for (size_t i = 0; i < e->num_items; i++)
        if (!strcmp(e->items[i]->label, label))
            return e->items[i];
    return NULL;
}

static void item_remove(nixl_md_etcd_t *e, etcd_item_t *it, nixl_status_t cb_status)
{
    for (size_t i = 0; i < e->num_items; i++) {
        if (e->items[i] == it) {
            e->items[i] = e->items[--e->num_items];
            break;
        }
    }
    cbs_fire(e, &it->cbs, e->agent->name, cb_status);
    free(it->blob);
    free(it);
}

static void items_mark_unpublished(nixl_md_etcd_t *e)
{
    for (size_t i = 0; i < e->num_items; i++) {
        e->items[i]->in_etcd = 0;
        e->items[i]->next_try_ns = 0;
    }
}

/* Writes the blob and the version key under our lease, if the name is free
 * or ours.  NIXL_ERR_NAME_TAKEN when another lease holds it. */
static nixl_status_t item_put(nixl_md_etcd_t *e, etcd_item_t *it)
{
    char vkey[ETCD_KEY_CAP], bkey[ETCD_KEY_CAP], vval[48];
    size_t vlen = key_version(e, e->agent->name, vkey);
    size_t blen = key_blob(e, e->agent->name, it->label, bkey);
    int n = snprintf(vval, sizeof(vval), "%016llx:%llu", (unsigned long long)e->agent->instance_id,
                     (unsigned long long)++e->seq);
    nixl_etcd_op_t puts[2] = {
        {.type = NIXL_ETCD_OP_PUT, .key = vkey, .key_len = vlen, .value = vval, .value_len = (size_t)n,
         .lease = e->lease},
        {.type = NIXL_ETCD_OP_PUT, .key = bkey, .key_len = blen, .value = it->blob, .value_len = it->len,
         .lease = e->lease},
    };
    nixl_etcd_op_t get = {.type = NIXL_ETCD_OP_RANGE, .key = vkey, .key_len = vlen};
    nixl_etcd_cmp_t absent = {.target = NIXL_ETCD_CMP_CREATE, .key = vkey, .key_len = vlen, .value = 0};
    nixl_etcd_cmp_t ours = {.target = NIXL_ETCD_CMP_LEASE, .key = vkey, .key_len = vlen, .value = e->lease};
    nixl_etcd_reply_t r;

    nixl_status_t st = nixl_etcd_txn(e->cli, &absent, 1, puts, 2, &get, 1, &r);
    if (st != NIXL_OK)
        return st;
    int ok = r.succeeded;
    const nixl_etcd_kv_t *holder = ok ? NULL : kv_find(&r, vkey, vlen);
    int64_t holder_lease = holder ? holder->lease : 0;
    nixl_etcd_reply_free(&r);
    if (ok)
        return NIXL_OK;
    if (holder && holder_lease == e->lease) {
        st = nixl_etcd_txn(e->cli, &ours, 1, puts, 2, NULL, 0, &r);
        if (st != NIXL_OK)
            return st;
        ok = r.succeeded;
        nixl_etcd_reply_free(&r);
        if (ok)
            return NIXL_OK;
    }
    if (!it->taken_warned) {
        NIXL_WARN("agent %s: the name is held in etcd (%s) by another agent's lease %llx; retrying until it is "
                  "free or the publish times out",
                  e->agent->name, vkey, (unsigned long long)holder_lease);
        it->taken_warned = 1;
    }
    return NIXL_ERR_NAME_TAKEN;
}

/* Before our keys go on purpose, the version key says so: watchers tell a
 * clean exit from a crash (a lease that expired) in their logs. */
#define ETCD_GOODBYE "bye"

static void say_goodbye(nixl_md_etcd_t *e)
{
    int published = 0;
    for (size_t i = 0; i < e->num_items; i++)
        published |= e->items[i]->in_etcd;
    if (!e->lease || !published)
        return;
    char vkey[ETCD_KEY_CAP];
    size_t vlen = key_version(e, e->agent->name, vkey);
    nixl_etcd_op_t put = {.type = NIXL_ETCD_OP_PUT, .key = vkey, .key_len = vlen, .value = ETCD_GOODBYE,
                          .value_len = sizeof(ETCD_GOODBYE) - 1, .lease = e->lease};
    nixl_etcd_cmp_t ours = {.target = NIXL_ETCD_CMP_LEASE, .key = vkey, .key_len = vlen, .value = e->lease};
    nixl_etcd_reply_t r;
    if (nixl_etcd_txn(e->cli, &ours, 1, &put, 1, NULL, 0, &r) == NIXL_OK)
        nixl_etcd_reply_free(&r);
}

/* A lease for our keys; 0 when there is one. */
static int lease_ensure(nixl_md_etcd_t *e, uint64_t now)
{
    if (e->lease)
        return 0;
    if (now < e->lease_retry_ns)
        return -1;
    int64_t id, ttl;
    nixl_status_t st = nixl_etcd_lease_grant(e->cli, e->ttl_s, &id, &ttl);
    if (st != NIXL_OK) {
        if (st != NIXL_ERR_CANCELED)
            e->lease_retry_ns = now + backoff_next(&e->lease_backoff_ms) * MS_NS;
        return -1;
    }
    e->unreachable = 0;
    e->lease = id;
    e->lease_backoff_ms = 0;
    e->next_keepalive_ns = now + (uint64_t)(ttl > 0 ? ttl : e->ttl_s) * 1000 / 3 * MS_NS;
    NIXL_DEBUG("agent %s: etcd lease %llx granted (TTL %lld s) at %s", e->agent->name, (unsigned long long)id,
               (long long)ttl, nixl_etcd_endpoint(e->cli));
    return 0;
}

static void items_tick(nixl_md_etcd_t *e, uint64_t now)
{
    int need = 0;
    for (size_t i = 0; i < e->num_items; i++)
        need |= !e->items[i]->in_etcd && now >= e->items[i]->next_try_ns;
    if (!need)
        return;
    if (lease_ensure(e, now)) {
        for (size_t i = 0; i < e->num_items; i++) {
            etcd_item_t *it = e->items[i];
            if (!it->in_etcd && it->cbs.n && now >= it->deadline_ns) {
                NIXL_WARN("agent %s: publishing %s metadata: no etcd lease (etcd at %s unreachable?)",
                          e->agent->name, label_desc(it->label), nixl_etcd_endpoint(e->cli));
                cbs_fire(e, &it->cbs, e->agent->name, NIXL_ERR_TIMEOUT);
            }
        }
        return;
    }
    for (size_t i = 0; i < e->num_items; i++) {
        etcd_item_t *it = e->items[i];
        if (it->in_etcd || now < it->next_try_ns)
            continue;
        nixl_status_t st = item_put(e, it);
        if (st == NIXL_OK) {
            it->in_etcd = 1;
            it->backoff_ms = 0;
            it->taken_warned = 0;
            NIXL_INFO("agent %s: %s metadata (%zu bytes) published in etcd", e->agent->name, label_desc(it->label),
                      it->len);
            cbs_fire(e, &it->cbs, e->agent->name, NIXL_OK);
            continue;
        }
        if (st == NIXL_ERR_CANCELED)
            return;
        if (st == NIXL_ERR_IO && nixl_etcd_last_code(e->cli) == NIXL_ETCD_CODE_NOT_FOUND) {
            /* Our lease vanished between keep-alives: start over. */
            NIXL_WARN("agent %s: etcd no longer knows lease %llx; granting a new one", e->agent->name,
                      (unsigned long long)e->lease);
            e->lease = 0;
            items_mark_unpublished(e);
            return;
        }
        if (st == NIXL_ERR_NAME_TAKEN && now >= it->deadline_ns) {
            NIXL_ERROR("agent %s: cannot publish %s metadata: another live agent holds the name in etcd",
                       e->agent->name, label_desc(it->label));
            item_remove(e, it, NIXL_ERR_NAME_TAKEN);
            i--;
            continue;
        }
        it->next_try_ns = now + backoff_next(&it->backoff_ms) * MS_NS;
        if (it->cbs.n && now >= it->deadline_ns) {
            NIXL_WARN("agent %s: publishing %s metadata failed: %s; still retrying", e->agent->name,
                      label_desc(it->label), nixl_strerror(st));
            cbs_fire(e, &it->cbs, e->agent->name, st);
        }
    }
}

static void lease_tick(nixl_md_etcd_t *e, uint64_t now)
{
    if (!e->lease)
        return;
    if (e->num_items == 0) {
        /* Nothing left to keep alive (invalidated): let the keys go now. */
        if (nixl_etcd_lease_revoke(e->cli, e->lease) != NIXL_ERR_CANCELED)
            e->lease = 0;
        return;
    }
    if (now < e->next_keepalive_ns)
        return;
    int64_t ttl = 0;
    nixl_status_t st = nixl_etcd_lease_keepalive(e->cli, e->lease, &ttl);
    e->unreachable = st == NIXL_ERR_IO || st == NIXL_ERR_TIMEOUT;
    if (st == NIXL_OK && ttl > 0) {
        e->next_keepalive_ns = now + (uint64_t)ttl * 1000 / 3 * MS_NS;
        return;
    }
    if (st == NIXL_OK) {
        NIXL_WARN("agent %s: etcd lease %llx is gone (expired while etcd was unreachable, or etcd lost its data); "
                  "granting a new one and publishing %zu item(s) again",
                  e->agent->name, (unsigned long long)e->lease, e->num_items);
        e->lease = 0;
        items_mark_unpublished(e);
        return;
    }
    if (st != NIXL_ERR_CANCELED)
        e->next_keepalive_ns = now + ETCD_RETRY_MIN_MS * MS_NS;
}

/* ------------------------------------------------------------------------
 * Peers fetched through etcd (etcd thread)
 * ------------------------------------------------------------------------ */

static etcd_track_t *track_find(nixl_md_etcd_t *e, const char *name, size_t len)
{
    for (size_t i = 0; i < e->num_tracks; i++)
        if (strlen(e->tracks[i]->name) == len && !memcmp(e->tracks[i]->name, name, len))
            return e->tracks[i];
    return NULL;
}

static void track_remove(nixl_md_etcd_t *e, etcd_track_t *t, nixl_status_t cb_status)
{
    for (size_t i = 0; i < e->num_tracks; i++) {
        if (e->tracks[i] == t) {
            e->tracks[i] = e->tracks[--e->num_tracks];
            break;
        }
    }
    cbs_fire(e, &t->cbs, t->name, cb_status);
    free(t->blob);
    free(t);
}

/* Is the agent's entry for this peer still the one we put there?  If the
 * application invalidated or reloaded it some other way, we stop watching.
 * Agent lock held. */
static int track_owns_peer(const etcd_track_t *t, const nixl_peer_t *p)
{
    switch (t->state) {
    case TRACK_NEW:
        return 1;
    case TRACK_LOADED:
        return p && p->cur && p->cur->generation == t->gen;
    case TRACK_GONE:
        return p && !p->cur && p->generation == t->gen;
    }
    return 0;
}

typedef enum { LOAD_DONE, LOAD_ABSENT, LOAD_DROPPED, LOAD_FAILED } load_result_t;

/* Reads the peer's blob and version key and loads the blob when it differs
 * from what we loaded.  *st_out gets the failure's status. */
static load_result_t track_load(nixl_md_etcd_t *e, etcd_track_t *t, nixl_status_t *st_out)
{
    char vkey[ETCD_KEY_CAP], bkey[ETCD_KEY_CAP];
    size_t vlen = key_version(e, t->name, vkey);
    size_t blen = key_blob(e, t->name, t->label, bkey);
    nixl_etcd_op_t gets[2] = {
        {.type = NIXL_ETCD_OP_RANGE, .key = bkey, .key_len = blen},
        {.type = NIXL_ETCD_OP_RANGE, .key = vkey, .key_len = vlen, .keys_only = 1},
    };
    nixl_etcd_reply_t r;
    nixl_agent_t *a = e->agent;

    /* One transaction: the blob and the version key of the same revision. */
    nixl_status_t st = nixl_etcd_txn(e->cli, NULL, 0, gets, 2, NULL, 0, &r);
    if (st != NIXL_OK) {
        *st_out = st;
        return LOAD_FAILED;
    }
    const nixl_etcd_kv_t *bkv = kv_find(&r, bkey, blen), *vkv = kv_find(&r, vkey, vlen);
    if (!bkv || !vkv || !bkv->value || bkv->value_len == 0) {
        nixl_etcd_reply_free(&r);
        return LOAD_ABSENT;
    }
    t->v_mod_rev = vkv->mod_revision;
    t->missing_since_ns = 0;

    /* With a secret only a blob sealed with it loads; without one a sealed
     * blob is refused too (it cannot be checked here). */
    const void *bval = bkv->value;
    size_t bval_len = bkv->value_len;
    int sealed = a->md_key ? nixl_md_unseal(a->md_key, t->label, bkv->value, bkv->value_len, &bval, &bval_len)
                           : nixl_md_is_sealed(bkv->value, bkv->value_len);
    if (a->md_key ? sealed != 1 : sealed) {
        NIXL_ERROR("agent %s: etcd key %s holds metadata %s: not loaded", a->name, bkey,
                   !a->md_key     ? "signed with a secret this agent has not (NIXL_MD_SECRET_FILE)"
                   : sealed == 0 ? "without a signature, and this agent has a secret (NIXL_MD_SECRET_FILE)"
                                 : "whose signature does not verify with our secret");
        nixl_etcd_reply_free(&r);
        *st_out = NIXL_ERR_NOT_AUTHENTICATED;
        return LOAD_FAILED;
    }

    nixl_md_t *md;
    st = nixl_md_decode(bval, bval_len, &md);
    if (st != NIXL_OK) {
        NIXL_ERROR("agent %s: etcd key %s holds metadata that does not decode: %s", a->name, bkey,
                   nixl_strerror(st));
        nixl_etcd_reply_free(&r);
        *st_out = st;
        return LOAD_FAILED;
    }
    int name_ok = !strcmp(md->name, t->name);
    if (!name_ok)
        NIXL_ERROR("agent %s: etcd key %s holds the metadata of agent '%s'", a->name, bkey, md->name);
    nixl_md_free(md);
    if (!name_ok) {
        nixl_etcd_reply_free(&r);
        *st_out = NIXL_ERR_BAD_METADATA;
        return LOAD_FAILED;
    }

    void *copy = NULL;
    uint64_t gen = 0;
    load_result_t res = LOAD_DONE;
    etcd_track_state_t before = t->state;
    nixl_agent_lock(a);
    nixl_peer_t *p = nixl_peer_find(a, t->name);
    if (!track_owns_peer(t, p) && !t->fetching) {
        res = LOAD_DROPPED;
    } else if (t->state == TRACK_LOADED && track_owns_peer(t, p) && t->len == bval_len &&
               !memcmp(t->blob, bval, t->len)) {
        res = LOAD_DONE; /* same bytes: nothing to reload */
    } else if (!(copy = malloc(bval_len))) {
        st = NIXL_ERR_NO_MEMORY;
        res = LOAD_FAILED;
    } else {
        memcpy(copy, bval, bval_len);
        st = nixl_md_load_remote_locked(a, bval, bval_len, NULL);
        if (st == NIXL_OK) {
            p = nixl_peer_find(a, t->name);
            gen = p && p->cur ? p->cur->generation : 0;
        } else {
            res = LOAD_FAILED;
        }
    }
    nixl_agent_unlock(a);

    if (res == LOAD_DONE && copy) {
        free(t->blob);
        t->blob = copy;
        t->len = bval_len;
        t->gen = gen;
        t->state = TRACK_LOADED;
        if (before == TRACK_NEW || t->fetching)
            NIXL_INFO("agent %s: loaded peer %s from etcd (%s metadata, generation %llu)", a->name, t->name,
                      label_desc(t->label), (unsigned long long)gen);
        else
            NIXL_WARN("agent %s: peer %s %s in etcd; reloaded (generation %llu): older requests to it are stale",
                      a->name, t->name, before == TRACK_GONE ? "is back" : "changed its metadata",
                      (unsigned long long)gen);
    } else {
        free(copy);
    }
    if (res == LOAD_FAILED)
        *st_out = st;
    nixl_etcd_reply_free(&r);
    return res;
}

/* The peer's keys are gone: requests against it must fail from now on. */
static void track_vanished(nixl_md_etcd_t *e, etcd_track_t *t, const char *why)
{
    nixl_agent_t *a = e->agent;
    int drop = 0;
    if (t->state != TRACK_LOADED)
        return;
    nixl_agent_lock(a);
    nixl_peer_t *p = nixl_peer_find(a, t->name);
    if (track_owns_peer(t, p)) {
        nixl_md_invalidate_remote_locked(a, t->name);
        t->state = TRACK_GONE;
    } else {
        drop = 1;
    }
    nixl_agent_unlock(a);
    if (drop) {
        if (!t->fetching)
            track_remove(e, t, NIXL_OK);
        return;
    }
    if (t->left)
        NIXL_INFO("agent %s: peer %s removed its metadata from etcd (it exited or invalidated itself); invalidated",
                  a->name, t->name);
    else
        NIXL_WARN("agent %s: peer %s %s; invalidated (requests to it fail with NIXL_ERR_PEER_INVALIDATED until it "
                  "publishes again)",
                  a->name, t->name, why);
}

static uint64_t missing_grace_ns(const nixl_md_etcd_t *e)
{
    return ((uint64_t)e->ttl_s * 1000 + e->timeout_ms) * MS_NS;
}

static void tracks_tick(nixl_md_etcd_t *e, uint64_t now)
{
    for (size_t i = 0; i < e->num_tracks; i++) {
        etcd_track_t *t = e->tracks[i];
        size_t before = e->num_tracks;
        if (t->deleted) {
            t->deleted = 0;
            track_vanished(e, t, "vanished from etcd: its lease expired (the process died or lost etcd)");
        } else if (t->state == TRACK_LOADED && t->missing_since_ns && now - t->missing_since_ns > missing_grace_ns(e)) {
            t->missing_since_ns = 0;
            track_vanished(e, t, "did not publish again after etcd came back");
        }
        if (e->num_tracks != before) {
            i--;
            continue;
        }
        if (!(t->dirty && now >= t->next_try_ns) && !(t->fetching && now >= t->next_try_ns))
            continue;
        nixl_status_t st = NIXL_OK;
        load_result_t res = track_load(e, t, &st);
        if (res == LOAD_FAILED && st == NIXL_ERR_CANCELED)
            return;
        if (res == LOAD_DROPPED) {
            NIXL_INFO("agent %s: peer %s was invalidated or loaded outside etcd; no longer watched", e->agent->name,
                      t->name);
            track_remove(e, t, NIXL_OK);
            i--;
            continue;
        }
        int transient = res == LOAD_FAILED && (st == NIXL_ERR_IO || st == NIXL_ERR_TIMEOUT);
        if (res == LOAD_DONE || (res == LOAD_FAILED && !transient)) {
            t->dirty = 0;
            t->backoff_ms = 0;
        } else if (transient) {
            t->next_try_ns = now + backoff_next(&t->backoff_ms) * MS_NS;
        } else { /* absent */
            t->dirty = 0;
            t->next_try_ns = now + ETCD_FETCH_POLL_MS * MS_NS;
        }
        if (!t->fetching)
            continue;
        if (res == LOAD_DONE || (res == LOAD_FAILED && !transient)) {
            t->fetching = 0;
            cbs_fire(e, &t->cbs, t->name, res == LOAD_DONE ? NIXL_OK : st);
        } else if (now >= t->deadline_ns) {
            NIXL_WARN("agent %s: fetch of peer %s from etcd: %s within the timeout", e->agent->name, t->name,
                      res == LOAD_ABSENT ? "it did not appear" : "etcd did not answer");
            t->fetching = 0;
            cbs_fire(e, &t->cbs, t->name, NIXL_ERR_TIMEOUT);
        }
        if (!t->fetching && t->state == TRACK_NEW) {
            track_remove(e, t, NIXL_OK);
            i--;
        }
    }
}

/* ------------------------------------------------------------------------
 * The watch (etcd thread)
 * ------------------------------------------------------------------------ */

static void on_watch_msg(void *arg, const nixl_etcd_watch_msg_t *m)
{
    nixl_md_etcd_t *e = arg;
    char prefix[ETCD_KEY_CAP];
    size_t plen = key_version_prefix(e, prefix);
    e->watch_backoff_ms = 0;
    for (size_t i = 0; i < m->num_events; i++) {
        const nixl_etcd_event_t *ev = &m->events[i];
        if (ev->kv.key_len <= plen || memcmp(ev->kv.key, prefix, plen))
            continue;
        etcd_track_t *t = track_find(e, (const char *)ev->kv.key + plen, ev->kv.key_len - plen);
        if (!t)
            continue;
        /* Only note what happened: the work is done outside the wait, where
         * it may call etcd again. */
        int bye = ev->type == NIXL_ETCD_EVENT_PUT && ev->kv.value_len == sizeof(ETCD_GOODBYE) - 1 &&
                  !memcmp(ev->kv.value, ETCD_GOODBYE, sizeof(ETCD_GOODBYE) - 1);
        if (ev->type == NIXL_ETCD_EVENT_DELETE || bye) {
            t->deleted = 1;
            t->dirty = 0;
            t->left |= bye;
        } else if (ev->kv.mod_revision != t->v_mod_rev || t->state != TRACK_LOADED) {
            t->deleted = 0;
            t->left = 0;
            t->dirty = 1;
            t->missing_since_ns = 0;
            t->next_try_ns = 0;
        }
    }
}

/* Compares the version keys with what we loaded, then watches from the
 * revision that comparison saw, so no change falls between the two. */
static void watch_tick(nixl_md_etcd_t *e, uint64_t now)
{
    char prefix[ETCD_KEY_CAP];
    uint8_t end[ETCD_KEY_CAP];
    size_t plen, elen;
    if (!e->num_tracks || nixl_etcd_watching(e->cli) || now < e->watch_retry_ns)
        return;
    plen = key_version_prefix(e, prefix);
    nixl_etcd_prefix_end(prefix, plen, end, &elen);
    nixl_etcd_op_t op = {.type = NIXL_ETCD_OP_RANGE, .key = prefix, .key_len = plen, .end = end, .end_len = elen,
                         .keys_only = 1};
    nixl_etcd_reply_t r;
    nixl_status_t st = nixl_etcd_range(e->cli, &op, &r);
    if (st == NIXL_OK) {
        for (size_t i = 0; i < e->num_tracks; i++) {
            etcd_track_t *t = e->tracks[i];
            char vkey[ETCD_KEY_CAP];
            size_t vlen = key_version(e, t->name, vkey);
            const nixl_etcd_kv_t *kv = kv_find(&r, vkey, vlen);
            if (kv && (kv->mod_revision != t->v_mod_rev || t->state != TRACK_LOADED)) {
                t->dirty = 1;
                t->next_try_ns = 0;
            }
            if (kv)
                t->missing_since_ns = 0;
            else if (t->state == TRACK_LOADED && !t->missing_since_ns)
                t->missing_since_ns = now; /* maybe etcd restarted empty: give it time to publish again */
        }
        st = nixl_etcd_watch_start(e->cli, prefix, plen, end, elen, r.header.revision + 1);
        nixl_etcd_reply_free(&r);
    }
    if (st == NIXL_OK)
        return;
    if (st != NIXL_ERR_CANCELED)
        e->watch_retry_ns = now + backoff_next(&e->watch_backoff_ms) * MS_NS;
}

/* ------------------------------------------------------------------------
 * Requests and the thread
 * ------------------------------------------------------------------------ */

static void handle_publish(nixl_md_etcd_t *e, etcd_req_t *q, uint64_t now)
{
    etcd_item_t *it = item_find(e, q->label);
    if (!it) {
        if (NIXL_ARRAY_RESERVE(e->items, e->cap_items, e->num_items + 1, 4))
            goto err_nomem;
        it = calloc(1, sizeof(*it));
        if (!it)
            goto err_nomem;
        nixl_strlcpy(it->label, q->label, sizeof(it->label));
        e->items[e->num_items++] = it;
    }
    free(it->blob);
    it->blob = q->blob;
    it->len = q->len;
    q->blob = NULL;
    it->in_etcd = 0;
    it->next_try_ns = 0;
    it->backoff_ms = 0;
    it->taken_warned = 0;
    /* A restarted agent may wait for its predecessor's lease to expire. */
    it->deadline_ns = now + ((uint64_t)e->ttl_s * 1000 + e->timeout_ms) * MS_NS;
    if (cbs_add(&it->cbs, q->cb))
        goto err_nomem;
    return;
err_nomem:
    NIXL_ERROR("agent %s: out of memory queuing an etcd publish", e->agent->name);
    if (q->cb.fn)
        q->cb.fn(e->agent, e->agent->name, NIXL_ERR_NO_MEMORY, q->cb.arg);
}

static void handle_fetch(nixl_md_etcd_t *e, etcd_req_t *q, uint64_t now)
{
    etcd_track_t *t = track_find(e, q->name, strlen(q->name));
    if (!t) {
        if (NIXL_ARRAY_RESERVE(e->tracks, e->cap_tracks, e->num_tracks + 1, 8))
            goto err_nomem;
        t = calloc(1, sizeof(*t));
        if (!t)
            goto err_nomem;
        nixl_strlcpy(t->name, q->name, sizeof(t->name));
        e->tracks[e->num_tracks++] = t;
    }
    if (strcmp(t->label, q->label)) {
        /* The other blob replaces what we loaded: compare against nothing. */
        nixl_strlcpy(t->label, q->label, sizeof(t->label));
        free(t->blob);
        t->blob = NULL;
        t->len = 0;
    }
    uint64_t deadline = now + (uint64_t)q->timeout_ms * MS_NS;
    if (!t->fetching || deadline > t->deadline_ns)
        t->deadline_ns = deadline;
    t->fetching = 1;
    t->next_try_ns = 0;
    t->backoff_ms = 0;
    if (cbs_add(&t->cbs, q->cb))
        goto err_nomem;
    return;
err_nomem:
    NIXL_ERROR("agent %s: out of memory queuing an etcd fetch of %s", e->agent->name, q->name);
    if (q->cb.fn)
        q->cb.fn(e->agent, q->name, NIXL_ERR_NO_MEMORY, q->cb.arg);
}

static void handle_invalidate(nixl_md_etcd_t *e, etcd_req_t *q)
{
    nixl_status_t st = NIXL_OK;
    say_goodbye(e);
    while (e->num_items)
        item_remove(e, e->items[0], NIXL_ERR_CANCELED);
    if (e->lease) {
        /* Revoking the lease deletes every key attached to it at once. */
        st = nixl_etcd_lease_revoke(e->cli, e->lease);
        if (st == NIXL_OK)
            NIXL_INFO("agent %s: metadata removed from etcd", e->agent->name);
        else
            NIXL_WARN("agent %s: cannot revoke etcd lease %llx (%s); the keys expire within %lld s", e->agent->name,
                      (unsigned long long)e->lease, nixl_strerror(st), (long long)e->ttl_s);
        e->lease = 0;
    }
    if (q->cb.fn)
        q->cb.fn(e->agent, e->agent->name, st, q->cb.arg);
}

static void req_free(etcd_req_t *q)
{
    free(q->blob);
    free(q);
}

static int wait_ms(const nixl_md_etcd_t *e, uint64_t now)
{
    uint64_t next = now + ETCD_IDLE_WAIT_MS * MS_NS;
#define ETCD_SOONER_(t)                                                                                            \
    do {                                                                                                           \
        if ((t) < next)                                                                                            \
            next = (t);                                                                                            \
    } while (0)
    if (e->lease)
        ETCD_SOONER_(e->next_keepalive_ns);
    for (size_t i = 0; i < e->num_items; i++)
        if (!e->items[i]->in_etcd)
            ETCD_SOONER_(e->lease ? e->items[i]->next_try_ns : e->lease_retry_ns);
    for (size_t i = 0; i < e->num_tracks; i++) {
        const etcd_track_t *t = e->tracks[i];
        if (t->fetching || t->dirty)
            ETCD_SOONER_(t->next_try_ns);
        if (t->fetching)
            ETCD_SOONER_(t->deadline_ns);
        if (t->missing_since_ns)
            ETCD_SOONER_(t->missing_since_ns + missing_grace_ns(e) + MS_NS);
    }
    if (e->num_tracks && !nixl_etcd_watching(e->cli))
        ETCD_SOONER_(e->watch_retry_ns);
#undef ETCD_SOONER_
    return next <= now ? 0 : (int)((next - now + MS_NS - 1) / MS_NS);
}

static void etcd_shutdown_work(nixl_md_etcd_t *e, etcd_req_t *queued)
{
    nixl_etcd_set_timeout(e->cli, e->timeout_ms < ETCD_SHUTDOWN_REVOKE_MS ? e->timeout_ms : ETCD_SHUTDOWN_REVOKE_MS);
    nixl_etcd_watch_stop(e->cli);
    /* Peers learn at once that we are gone instead of after the TTL (not
     * worth a wait when etcd did not answer lately). */
    if (e->unreachable)
        e->lease = 0;
    say_goodbye(e);
    if (e->lease && nixl_etcd_lease_revoke(e->cli, e->lease) != NIXL_OK)
        NIXL_INFO("agent %s: etcd lease not revoked at exit; its keys expire within %lld s", e->agent->name,
                  (long long)e->ttl_s);
    e->lease = 0;
    while (queued) {
        etcd_req_t *q = queued;
        queued = q->next;
        if (q->cb.fn)
            q->cb.fn(e->agent, q->type == REQ_FETCH ? q->name : e->agent->name, NIXL_ERR_CANCELED, q->cb.arg);
        req_free(q);
    }
    while (e->num_items)
        item_remove(e, e->items[0], NIXL_ERR_CANCELED);
    while (e->num_tracks)
        track_remove(e, e->tracks[0], NIXL_ERR_CANCELED);
}

static void *etcd_main(void *arg)
{
    nixl_md_etcd_t *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        etcd_req_t *q = e->q_head;
        e->q_head = NULL;
        e->q_tail = &e->q_head;
        int stop = e->stop;
        /* stop came with an interrupt (same critical section): clearing it
         * here lets the goodbye below through, and nothing sets it again. */
        if (stop)
            nixl_etcd_resume(e->cli);
        pthread_mutex_unlock(&e->mu);
        if (stop) {
            etcd_shutdown_work(e, q);
            break;
        }
        uint64_t now = nixl_now_ns();
        while (q) {
            etcd_req_t *next = q->next;
            if (q->type == REQ_PUBLISH)
                handle_publish(e, q, now);
            else if (q->type == REQ_FETCH)
                handle_fetch(e, q, now);
            else
                handle_invalidate(e, q);
            req_free(q);
            q = next;
        }
        lease_tick(e, nixl_now_ns());
        items_tick(e, nixl_now_ns());
        watch_tick(e, nixl_now_ns());
        tracks_tick(e, nixl_now_ns());
        nixl_status_t st = nixl_etcd_wait(e->cli, wait_ms(e, nixl_now_ns()), on_watch_msg, e);
        if (st != NIXL_OK && !nixl_etcd_watching(e->cli))
            e->watch_retry_ns = nixl_now_ns() + backoff_next(&e->watch_backoff_ms) * MS_NS;
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * The API side
 * ------------------------------------------------------------------------ */

static nixl_status_t etcd_config(nixl_md_etcd_t *e, const char **endpoints_out)
{
    const char *agent = e->agent->name;
    const char *ep = nixl_cfg_get("NIXL_ETCD_ENDPOINTS");
    if (!ep || !ep[0]) {
        NIXL_ERROR("agent %s: NIXL_ETCD_ENDPOINTS is not set: no etcd to use (e.g. NIXL_ETCD_ENDPOINTS=http://"
                   "127.0.0.1:2379)",
                   agent);
        return NIXL_ERR_INVALID_PARAM;
    }
    const char *ns = nixl_cfg_get("NIXL_ETCD_NAMESPACE");
    size_t n = strlen(ns);
    while (n && ns[n - 1] == '/')
        n--;
    for (size_t i = 0; i < n; i++) {
        if (ns[i] <= 0x20 || ns[i] >= 0x7f) {
            NIXL_ERROR("agent %s: NIXL_ETCD_NAMESPACE \"%s\" has a space or a non-printable byte", agent, ns);
            return NIXL_ERR_INVALID_PARAM;
        }
    }
    if (n > ETCD_NS_MAX) {
        NIXL_ERROR("agent %s: NIXL_ETCD_NAMESPACE is longer than %d bytes", agent, ETCD_NS_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    memcpy(e->ns, ns, n);
    e->ns[n] = '\0';
    uint64_t ttl = nixl_cfg_size("NIXL_ETCD_LEASE_TTL_S");
    if (ttl < 1 || ttl > 86400) {
        NIXL_ERROR("agent %s: NIXL_ETCD_LEASE_TTL_S must be 1..86400 seconds", agent);
        return NIXL_ERR_INVALID_PARAM;
    }
    e->ttl_s = (int64_t)ttl;
    uint64_t to = nixl_cfg_size("NIXL_ETCD_TIMEOUT_MS");
    e->timeout_ms = to < 1 ? 1 : to > 600000 ? 600000 : (uint32_t)to;
    *endpoints_out = ep;
    return NIXL_OK;
}

/* The client, with TLS and the etcd user from the environment (checked
 * by nixl_etcd_create; the password file here, like NIXL_MD_SECRET_FILE). */
static nixl_status_t etcd_client_create(nixl_md_etcd_t *e, const char *endpoints)
{
    const char *pw_file = nixl_cfg_get("NIXL_ETCD_PASSWORD_FILE");
    /* Room for the longest password and its line end; a longer one is refused. */
    char pw[NIXL_ETCD_PASSWORD_MAX + 3];
    size_t pw_len = 0;
    nixl_etcd_security_t sec = {
        .ca_file = nixl_cfg_get("NIXL_ETCD_CA_FILE"),
        .cert_file = nixl_cfg_get("NIXL_ETCD_CERT_FILE"),
        .key_file = nixl_cfg_get("NIXL_ETCD_KEY_FILE"),
        .user = nixl_cfg_get("NIXL_ETCD_USER"),
    };
    if (pw_file && pw_file[0]) {
        nixl_status_t st = nixl_secret_file_read("NIXL_ETCD_PASSWORD_FILE", pw_file, (uint8_t *)pw, sizeof(pw) - 1,
                                                 &pw_len);
        if (st != NIXL_OK) {
            NIXL_ERROR("agent %s: the etcd password cannot be used; etcd is not reached", e->agent->name);
            return st;
        }
        pw[pw_len] = '\0';
        if (pw_len == 0) {
            NIXL_ERROR("agent %s: NIXL_ETCD_PASSWORD_FILE=%s is empty", e->agent->name, pw_file);
            return NIXL_ERR_INVALID_PARAM;
        }
        if (strlen(pw) != pw_len) {
            memset(pw, 0, sizeof(pw));
            NIXL_ERROR("agent %s: NIXL_ETCD_PASSWORD_FILE=%s holds a NUL byte", e->agent->name, pw_file);
            return NIXL_ERR_INVALID_PARAM;
        }
        sec.password = pw;
    }
    nixl_status_t st = nixl_etcd_create(endpoints, e->timeout_ms, &sec, &e->cli);
    memset(pw, 0, sizeof(pw));
    return st;
}

/* The agent's etcd state, created with its thread on first use.  Agent
 * lock held. */
static nixl_status_t etcd_state_locked(nixl_agent_t *a, nixl_md_etcd_t **out)
{
    if (a->etcd) {
        *out = a->etcd;
        return NIXL_OK;
    }
    const char *endpoints;
    nixl_md_etcd_t *e = calloc(1, sizeof(*e));
    if (!e)
        return NIXL_ERR_NO_MEMORY;
    e->agent = a;
    e->q_tail = &e->q_head;
    nixl_status_t st = etcd_config(e, &endpoints);
    if (st != NIXL_OK)
        goto err_free;
    st = etcd_client_create(e, endpoints);
    if (st != NIXL_OK)
        goto err_free;
    pthread_mutex_init(&e->mu, NULL);
    /* The thread must not take the process's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&e->thread, NULL, etcd_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        NIXL_ERROR("agent %s: cannot start the etcd thread: %s", a->name, strerror(rc));
        st = NIXL_ERR_NO_MEMORY;
        goto err_client;
    }
    NIXL_INFO("agent %s: etcd at %s, namespace \"%s\", lease TTL %lld s%s%s", a->name, endpoints, e->ns,
              (long long)e->ttl_s, nixl_cfg_get("NIXL_ETCD_USER")[0] ? ", user " : "", nixl_cfg_get("NIXL_ETCD_USER"));
    a->etcd = e;
    *out = e;
    return NIXL_OK;

err_client:
    pthread_mutex_destroy(&e->mu);
    nixl_etcd_destroy(e->cli);
err_free:
    free(e);
    return st;
}

static void etcd_enqueue(nixl_md_etcd_t *e, etcd_req_t *q)
{
    pthread_mutex_lock(&e->mu);
    *e->q_tail = q;
    e->q_tail = &q->next;
    pthread_mutex_unlock(&e->mu);
    nixl_etcd_wakeup(e->cli);
}

/* The etcd thread calls into the agent: from now on every call locks.  In
 * NIXL_THREAD_NONE mode no other call on this agent runs now (the caller
 * promised), so flipping the mode here is safe. */
static void etcd_agent_serialize(nixl_agent_t *a)
{
    if (!a->serialized) {
        NIXL_INFO("agent %s: uses etcd, so its calls are serialized from now on", a->name);
        a->serialized = 1;
    }
}

static nixl_status_t args_label(const nixl_agent_t *a, const nixl_etcd_args_t *args, char label[ETCD_LABEL_MAX + 1])
{
    label[0] = '\0';
    if (!args || !(args->field_mask & NIXL_ETCD_ARG_LABEL))
        return NIXL_OK;
    if (!args->label || !name_valid(args->label, ETCD_LABEL_MAX, 0)) {
        NIXL_ERROR("agent %s: etcd label '%s' must be 1..%d characters of [A-Za-z0-9_.:@+-]", a->name,
                   args->label ? args->label : "(null)", ETCD_LABEL_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    nixl_strlcpy(label, args->label, ETCD_LABEL_MAX + 1);
    return NIXL_OK;
}

static etcd_cb_t args_cb(const nixl_etcd_args_t *args)
{
    etcd_cb_t cb = {NULL, NULL};
    if (args && (args->field_mask & NIXL_ETCD_ARG_CALLBACK)) {
        cb.fn = args->cb;
        cb.arg = args->cb_arg;
    }
    return cb;
}

NIXL_API nixl_status_t nixl_md_etcd_publish(nixl_agent_t *agent, const nixl_dlist_t *dlist,
                                            const nixl_etcd_args_t *args)
{
    char label[ETCD_LABEL_MAX + 1];
    nixl_md_etcd_t *e;
    if (!agent)
        return NIXL_ERR_NULL;
    nixl_status_t st = args_label(agent, args, label);
    if (st != NIXL_OK)
        return st;
    if (dlist && !label[0]) {
        NIXL_ERROR("agent %s: etcd publish of partial metadata needs a label (NIXL_ETCD_ARG_LABEL)", agent->name);
        return NIXL_ERR_INVALID_PARAM;
    }
    etcd_req_t *q = calloc(1, sizeof(*q));
    if (!q)
        return NIXL_ERR_NO_MEMORY;
    q->type = REQ_PUBLISH;
    nixl_strlcpy(q->label, label, sizeof(q->label));
    q->cb = args_cb(args);
    etcd_agent_serialize(agent);
    nixl_agent_lock(agent);
    st = etcd_state_locked(agent, &e);
    if (st == NIXL_OK)
        st = dlist ? nixl_md_get_local_partial_locked(agent, dlist, NIXL_MD_PARTIAL_CONN_INFO, NULL, "etcd publish",
                                                      &q->blob, &q->len)
                   : nixl_md_get_local_locked(agent, &q->blob, &q->len);
    if (st == NIXL_OK && agent->md_key) {
        void *sealed = NULL;
        size_t sealed_len = 0;
        st = nixl_md_seal(agent->md_key, label, q->blob, q->len, &sealed, &sealed_len);
        if (st == NIXL_OK) {
            free(q->blob);
            q->blob = sealed;
            q->len = sealed_len;
        }
    }
    nixl_agent_unlock(agent);
    if (st != NIXL_OK) {
        req_free(q);
        return st;
    }
    etcd_enqueue(e, q);
    return NIXL_IN_PROG;
}

NIXL_API nixl_status_t nixl_md_etcd_fetch(nixl_agent_t *agent, const char *peer, const nixl_etcd_args_t *args)
{
    char label[ETCD_LABEL_MAX + 1];
    nixl_md_etcd_t *e;
    if (!agent || !peer)
        return NIXL_ERR_NULL;
    if (!name_valid(peer, NIXL_NAME_MAX, 1)) {
        NIXL_ERROR("agent %s: etcd fetch: '%s' is not an agent name", agent->name, peer);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (!strcmp(peer, agent->name)) {
        NIXL_ERROR("agent %s: etcd fetch of its own name", agent->name);
        return NIXL_ERR_SELF;
    }
    nixl_status_t st = args_label(agent, args, label);
    if (st != NIXL_OK)
        return st;
    etcd_req_t *q = calloc(1, sizeof(*q));
    if (!q)
        return NIXL_ERR_NO_MEMORY;
    q->type = REQ_FETCH;
    nixl_strlcpy(q->name, peer, sizeof(q->name));
    nixl_strlcpy(q->label, label, sizeof(q->label));
    q->cb = args_cb(args);
    uint64_t to = args && (args->field_mask & NIXL_ETCD_ARG_TIMEOUT_MS) ? args->timeout_ms
                                                                          : nixl_cfg_size("NIXL_ETCD_FETCH_TIMEOUT_MS");
    q->timeout_ms = to > 86400000 ? 86400000 : (uint32_t)to;
    etcd_agent_serialize(agent);
    nixl_agent_lock(agent);
    st = etcd_state_locked(agent, &e);
    nixl_agent_unlock(agent);
    if (st != NIXL_OK) {
        req_free(q);
        return st;
    }
    etcd_enqueue(e, q);
    return NIXL_IN_PROG;
}

NIXL_API nixl_status_t nixl_md_etcd_invalidate_local(nixl_agent_t *agent, const nixl_etcd_args_t *args)
{
    nixl_md_etcd_t *e;
    if (!agent)
        return NIXL_ERR_NULL;
    etcd_req_t *q = calloc(1, sizeof(*q));
    if (!q)
        return NIXL_ERR_NO_MEMORY;
    q->type = REQ_INVALIDATE;
    q->cb = args_cb(args);
    etcd_agent_serialize(agent);
    nixl_agent_lock(agent);
    nixl_status_t st = etcd_state_locked(agent, &e);
    nixl_agent_unlock(agent);
    if (st != NIXL_OK) {
        req_free(q);
        return st;
    }
    etcd_enqueue(e, q);
    return NIXL_IN_PROG;
}

void nixl_md_etcd_shutdown(nixl_agent_t *agent)
{
    nixl_md_etcd_t *e = agent->etcd;
    if (!e)
        return;
    /* The interrupt cuts a call in progress short; the thread then says
     * goodbye, revokes the lease (bounded) and exits. */
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    nixl_etcd_interrupt(e->cli);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    nixl_etcd_destroy(e->cli);
    pthread_mutex_destroy(&e->mu);
    free(e->items);
    free(e->tracks);
    free(e);
    agent->etcd = NULL;
}

#else /* !NIXL_HAVE_ETCD */

static nixl_status_t etcd_absent(const nixl_agent_t *agent, const char *call)
{
    NIXL_ERROR("agent %s: %s: this libnixl was built without etcd support (libcurl and libcjson were not found "
               "at build time)",
               agent ? agent->name : "?", call);
    return NIXL_ERR_NOT_SUPPORTED;
}

NIXL_API nixl_status_t nixl_md_etcd_publish(nixl_agent_t *agent, const nixl_dlist_t *dlist,
                                            const nixl_etcd_args_t *args)
{
    (void)dlist;
    (void)args;
    return etcd_absent(agent, "nixl_md_etcd_publish");
}

NIXL_API nixl_status_t nixl_md_etcd_fetch(nixl_agent_t *agent, const char *peer, const nixl_etcd_args_t *args)
{
    (void)peer;
    (void)args;
    return etcd_absent(agent, "nixl_md_etcd_fetch");
}

NIXL_API nixl_status_t nixl_md_etcd_invalidate_local(nixl_agent_t *agent, const nixl_etcd_args_t *args)
{
    (void)args;
    return etcd_absent(agent, "nixl_md_etcd_invalidate_local");
}

void nixl_md_etcd_shutdown(nixl_agent_t *agent)
{
    (void)agent;
}

#endif /* NIXL_HAVE_ETCD */
