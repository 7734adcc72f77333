/*
 * peer.c - peers' metadata in, and the socket calls.
 *
 * (This agent's blobs, full and partial, are made in md_local.c.)  Loading
 * a peer's blob decodes (and so validates) it completely, then lets every
 * local backend that the peer also runs load the peer and its region keys.
 * Each full load is a new generation (nixl_peer_inc_t), reference-counted:
 * the agent holds one reference, every request made against it another, so
 * a reload or an invalidation never frees what an in-flight request uses;
 * requests notice at post that their generation is no longer current.
 *
 * A partial blob adds to the generation loaded: merged with what is loaded
 * (its regions win where they overlap), re-encoded and decoded again, so
 * the generation's metadata is always one validated blob.  When it only
 * adds, the generation grows in place: the keys requests hold stay loaded
 * and only the new regions' keys are loaded, so requests made before stay
 * valid.  When it changes something already loaded (a region registered
 * again differently, other connection info) it is a reload: a new
 * generation, older requests stale.  Without connection info it needs the
 * same instance of the peer loaded already.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/agent.h"
#include "core/be_call.h"
#include "md/socket.h"
#include "util/config.h"
#include "util/log.h"
#include "util/str.h"

nixl_peer_t *nixl_peer_find(nixl_agent_t *agent, const char *name)
{
    for (size_t i = 0; i < agent->num_peers; i++)
        if (strcmp(agent->peers[i]->name, name) == 0)
            return agent->peers[i];
    return NULL;
}

long nixl_peer_region_find(const nixl_peer_backend_t *bk, nixl_mem_t mem, uint64_t addr, uint64_t len)
{
    const nixl_md_region_t *v = bk->mdb->regions;
    size_t lo = 0, hi = bk->mdb->num_regions;
    /* Last region with (mem_type, addr) <= (mem, addr). */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid].mem_type < mem || (v[mid].mem_type == mem && v[mid].addr <= addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const nixl_md_region_t *r = &v[lo - 1];
    if (r->mem_type != mem)
        return -1;
    uint64_t off = addr - r->addr;
    if (off >= r->len || len > r->len - off)
        return -1;
    return (long)(lo - 1);
}

/* ---- locality ---- */

void nixl_peer_locality(const nixl_md_t *md, const nixl_proc_id_t *self, int loopback, nixl_be_peer_t *out)
{
    memset(out, 0, sizeof(*out));
    out->name = md->name;
    out->pid = md->pid;
    out->uid = md->uid;
    out->start_time = md->start_time;
    if (loopback) {
        out->same_process = out->same_host = out->same_pidns = out->same_netns = out->same_uid = 1;
        return;
    }
    /* Zero namespaces (a version-1 blob, or unreadable) are unknown: never
     * the same as ours. */
    out->same_host = (uint8_t)nixl_host_id_same(&md->host, &self->host);
    out->same_pidns = out->same_host && md->pidns && md->pidns == self->pidns;
    out->same_netns = out->same_host && md->netns && md->netns == self->netns;
    out->same_uid = out->same_host && md->version >= 2 && md->uid == self->uid;
    out->same_process = out->same_pidns && md->pid == self->pid && md->start_time &&
                        md->start_time == self->start_time;
}

int nixl_peer_backend_rank(const nixl_backend_t *b, const nixl_peer_inc_t *inc)
{
    uint32_t caps = be_caps(b);
    if (inc->loc.same_process && (caps & NIXL_CAP_LOCAL))
        return 0;
    if (inc->loc.same_host && (caps & NIXL_CAP_SAME_HOST))
        return 1;
    if (caps & NIXL_CAP_CROSS_HOST)
        return 2;
    return 3;
}

/* NIXL_INTRANODE_NETWORK=off: a network backend (cross-host only) is not
 * given a peer that is on this host and in our network namespace, so
 * nothing but shm and cuda_ipc serves it.  A peer in another network
 * namespace of this kernel is reached as another host would be. */
static int inc_network_refused(const nixl_peer_inc_t *inc, const nixl_backend_t *be)
{
    static _Atomic int warned;
    uint32_t caps = be_caps(be);
    if (inc->loopback || !inc->loc.same_host || !inc->loc.same_netns || (caps & (NIXL_CAP_LOCAL | NIXL_CAP_SAME_HOST)))
        return 0;
    const char *v = nixl_cfg_get("NIXL_INTRANODE_NETWORK");
    if (strcmp(v, "off") == 0)
        return 1;
    if (strcmp(v, "fallback") != 0 && !atomic_exchange(&warned, 1))
        NIXL_WARN("NIXL_INTRANODE_NETWORK=%s is neither fallback nor off: taken as fallback", v);
    return 0;
}

/* ---- loading peers ---- */

/* Unloads one backend's view (its keys, then its peer) and clears it. */
static void bk_unload(nixl_peer_backend_t *bk)
{
    if (!bk->backend)
        return;
    if (bk->rmd) {
        for (uint32_t i = 0; i < bk->mdb->num_regions; i++)
            if (bk->rmd[i])
                be_rkey_unload(bk->backend, bk->rmd[i]);
        free(bk->rmd);
    }
    if (bk->peer)
        be_peer_unload(bk->backend, bk->peer);
    memset(bk, 0, sizeof(*bk));
}

static void inc_free(nixl_peer_inc_t *inc)
{
    for (int b = 0; b < NIXL_AGENT_MAX_BACKENDS; b++)
        bk_unload(&inc->bk[b]);
    nixl_md_free(inc->md);
    free(inc->blob);
    free(inc);
}

void nixl_peer_inc_unref(nixl_peer_inc_t *inc)
{
    if (inc && --inc->refs == 0)
        inc_free(inc);
}

static nixl_status_t bk_rkey_load(const char *peer_name, nixl_backend_t *be, void *peer, const nixl_md_region_t *r,
                                  uint32_t i, void **rmd_out)
{
    nixl_be_region_t br = {.mem_type = r->mem_type, .dev_id = r->dev_id, .addr = r->addr, .len = r->len};
    nixl_status_t st = be_rkey_load(be, peer, &br, r->rkey, r->rkey_len, rmd_out);
    if (st != NIXL_OK)
        NIXL_WARN("peer %s: backend %s refused the key of region %u: %s", peer_name, be_name(be), i,
                  nixl_strerror(st));
    return st;
}

/* Load one backend's view of the peer into *bk (all or nothing).
 * NIXL_ERR_NO_PATH leaves it unset and is no error. */
static nixl_status_t bk_load(const nixl_peer_inc_t *inc, nixl_backend_t *be, const nixl_md_backend_t *mdb,
                             nixl_peer_backend_t *bk)
{
    void *peer = NULL;
    memset(bk, 0, sizeof(*bk));
    if (inc_network_refused(inc, be)) {
        NIXL_INFO("peer %s is on this host: backend %s not offered (NIXL_INTRANODE_NETWORK=off)", inc->md->name,
                  be_name(be));
        return NIXL_OK;
    }
    nixl_status_t st = be_peer_open(be, &inc->loc, mdb->conn, mdb->conn_len, &peer);
    /* A backend that cannot reach its own agent (libfabric refuses its own
     * instance) is no path for loopback, not a failure of it. */
    if (st == NIXL_ERR_NO_PATH || (st == NIXL_ERR_SELF && inc->loopback)) {
        NIXL_DEBUG("peer %s: backend %s cannot reach it", inc->md->name, be_name(be));
        return NIXL_OK;
    }
    if (st != NIXL_OK) {
        NIXL_WARN("peer %s: backend %s refused its connection info: %s", inc->md->name, be_name(be),
                  nixl_strerror(st));
        return st;
    }
    bk->backend = be;
    bk->peer = peer;
    bk->mdb = mdb;
    bk->rmd = calloc(mdb->num_regions ? mdb->num_regions : 1, sizeof(void *));
    if (!bk->rmd) {
        st = NIXL_ERR_NO_MEMORY;
        goto err;
    }
    for (uint32_t i = 0; i < mdb->num_regions; i++) {
        /* Files are local: a peer's FILE regions (published by an older
         * libnixl, or made up) are not loaded, and no request reaches them
         * (xfer.c refuses FILE memory with any peer but the agent itself). */
        if (mdb->regions[i].mem_type == NIXL_MEM_FILE && !inc->loopback) {
            NIXL_DEBUG("peer %s: backend %s: FILE region %u ignored: files are local", inc->md->name, be_name(be),
                       i);
            continue;
        }
        if ((st = bk_rkey_load(inc->md->name, be, peer, &mdb->regions[i], i, &bk->rmd[i])) != NIXL_OK)
            goto err;
    }
    return NIXL_OK;
err:
    bk_unload(bk);
    return st;
}

static const nixl_md_backend_t *md_backend_named(const nixl_md_t *md, const char *name)
{
    for (uint32_t i = 0; i < md->num_backends; i++)
        if (strcmp(md->backends[i].name, name) == 0)
            return &md->backends[i];
    return NULL;
}

/* A loaded generation from a decoded blob; takes blob (malloc'd) and md
 * whatever happens.  Every backend of ours that knows a backend of the
 * blob loads it, told who the peer is (inc->loc).  self: the blob is this
 * agent's own (loopback).  Its number is the next of the peer of that name
 * (committed by peer_install / nixl_peer_self). */
static nixl_status_t inc_from_md(nixl_agent_t *a, void *blob, nixl_md_t *md, int self, nixl_peer_inc_t **out)
{
    nixl_peer_inc_t *inc = calloc(1, sizeof(*inc));
    if (!inc) {
        nixl_md_free(md);
        free(blob);
        return NIXL_ERR_NO_MEMORY;
    }
    inc->refs = 1;
    inc->agent = a;
    inc->loopback = self;
    inc->blob = blob;
    inc->md = md;
    nixl_proc_id_t me;
    nixl_proc_id_get(&me);
    nixl_peer_locality(md, &me, self, &inc->loc);
    const nixl_peer_t *known = self ? a->self_peer : nixl_peer_find(a, md->name);
    inc->generation = inc->loc.generation = (known ? known->generation : 0) + 1;
    for (int b = 0; b < a->num_backends; b++) {
        const nixl_md_backend_t *mdb = md_backend_named(md, be_name(a->backends[b]));
        if (!mdb)
            continue;
        nixl_status_t st = bk_load(inc, a->backends[b], mdb, &inc->bk[b]);
        if (st != NIXL_OK) {
            inc_free(inc);
            return st;
        }
    }
    *out = inc;
    return NIXL_OK;
}

/* Copies and decodes (validates) a blob; the copy outlives the result. */
static nixl_status_t blob_decode_copy(const void *blob, size_t len, void **copy_out, nixl_md_t **md_out)
{
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return NIXL_ERR_NO_MEMORY;
    memcpy(copy, blob, len);
    nixl_status_t st = nixl_md_decode(copy, len, md_out);
    if (st != NIXL_OK) {
        free(copy);
        return st;
    }
    *copy_out = copy;
    return NIXL_OK;
}

static size_t regs_count(const nixl_agent_t *a)
{
    size_t n = 0;
    for (int t = 0; t < NIXL_MEM_TYPE_COUNT; t++)
        n += a->regs[t].n;
    return n;
}

/* Loopback: the agent as the remote side of its own requests (NIXL's
 * NIXL_INIT_AGENT-to-itself, and every storage transfer, whose file
 * regions are the agent's own).  Its generation is built from the agent's
 * own metadata the first time it is named and again whenever the
 * registrations or backends changed since; it is not in the peer list, so
 * nothing lists, invalidates or replaces it from outside. */
nixl_peer_t *nixl_peer_self(nixl_agent_t *a, nixl_status_t *st_out)
{
    nixl_peer_t *p = a->self_peer;
    size_t nregs = regs_count(a);
    if (p && p->cur && a->self_epoch == a->reg_epoch && a->self_regs == nregs &&
        a->self_backends == a->num_backends) {
        *st_out = NIXL_OK;
        return p;
    }
    void *blob = NULL, *copy = NULL;
    size_t len = 0;
    nixl_md_t *md = NULL;
    nixl_peer_inc_t *inc = NULL;
    nixl_status_t st = nixl_md_get_self_locked(a, &blob, &len);
    if (st == NIXL_OK && (st = blob_decode_copy(blob, len, &copy, &md)) == NIXL_OK)
        st = inc_from_md(a, copy, md, 1, &inc);
    free(blob);
    if (st == NIXL_OK && !p) {
        p = calloc(1, sizeof(*p));
        if (p) {
            nixl_strlcpy(p->name, a->name, sizeof(p->name));
            a->self_peer = p;
        } else {
            st = NIXL_ERR_NO_MEMORY;
        }
    }
    if (st != NIXL_OK) {
        if (inc)
            inc_free(inc);
        NIXL_ERROR("agent %s: cannot make itself the remote side of a loopback request: %s", a->name,
                   nixl_strerror(st));
        *st_out = st;
        return NULL;
    }
    nixl_peer_inc_unref(p->cur);
    p->cur = inc;
    p->generation = inc->generation;
    a->self_epoch = a->reg_epoch;
    a->self_regs = nregs;
    a->self_backends = a->num_backends;
    *st_out = NIXL_OK;
    return p;
}

/* Makes inc the current generation of the peer it names (added to the
 * list if new); the generation it replaces stays alive for its requests. */
static nixl_status_t peer_install(nixl_agent_t *a, nixl_peer_inc_t *inc, nixl_peer_t **p_out)
{
    nixl_peer_t *p = nixl_peer_find(a, inc->md->name);
    if (!p) {
        if (NIXL_ARRAY_RESERVE(a->peers, a->cap_peers, a->num_peers + 1, 16))
            return NIXL_ERR_NO_MEMORY;
        p = calloc(1, sizeof(*p));
        if (!p)
            return NIXL_ERR_NO_MEMORY;
        nixl_strlcpy(p->name, inc->md->name, sizeof(p->name));
        a->peers[a->num_peers++] = p;
    }
    nixl_peer_inc_unref(p->cur);
    p->cur = inc;
    p->generation = inc->generation;
    *p_out = p;
    return NIXL_OK;
}

static nixl_status_t load_new_generation(nixl_agent_t *a, void *blob, nixl_md_t *md, const char *how,
                                         char name_out[NIXL_NAME_MAX + 1])
{
    nixl_peer_inc_t *inc = NULL;
    nixl_peer_t *p = NULL;
    nixl_status_t st = inc_from_md(a, blob, md, 0, &inc);
    if (st != NIXL_OK)
        return st;
    if ((st = peer_install(a, inc, &p)) != NIXL_OK) {
        inc_free(inc);
        return st;
    }
    NIXL_INFO("agent %s: loaded peer %s%s (generation %llu, %s)", a->name, p->name, how,
              (unsigned long long)inc->generation,
              inc->loc.same_process ? "this process" : inc->loc.same_host ? "this host" : "another host");
    if (name_out)
        nixl_strlcpy(name_out, p->name, NIXL_NAME_MAX + 1);
    return NIXL_OK;
}

/* ---- partial blobs: adding to a loaded peer ---- */

static int same_instance(const nixl_md_t *x, const nixl_md_t *y)
{
    return x->instance_id == y->instance_id && x->pid == y->pid &&
           memcmp(x->host.boot_id, y->host.boot_id, sizeof(x->host.boot_id)) == 0 &&
           strcmp(x->host.hostname, y->host.hostname) == 0;
}

static int bytes_same(const uint8_t *x, uint32_t xn, const uint8_t *y, uint32_t yn)
{
    return xn == yn && (xn == 0 || memcmp(x, y, xn) == 0);
}

static int region_same(const nixl_md_region_t *x, const nixl_md_region_t *y)
{
    return x->mem_type == y->mem_type && x->dev_id == y->dev_id && x->addr == y->addr && x->len == y->len &&
           bytes_same(x->rkey, x->rkey_len, y->rkey, y->rkey_len);
}

/* The region of mb (sorted) that overlaps r, or NULL.  Regions of mb do
 * not overlap one another, so the last one starting at or before r and
 * the first one after it are the only candidates. */
static const nixl_md_region_t *region_overlapping(const nixl_md_backend_t *mb, const nixl_md_region_t *r)
{
    const nixl_md_region_t *v = mb->regions;
    size_t lo = 0, hi = mb->num_regions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid].mem_type < r->mem_type || (v[mid].mem_type == r->mem_type && v[mid].addr <= r->addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && v[lo - 1].mem_type == r->mem_type && v[lo - 1].addr + v[lo - 1].len > r->addr)
        return &v[lo - 1];
    if (lo < mb->num_regions && v[lo].mem_type == r->mem_type && r->addr + r->len > v[lo].addr)
        return &v[lo];
    return NULL;
}

typedef struct md_merge {
    nixl_md_t md; /* old + new; points into both blobs until encoded */
    nixl_md_backend_t be[2 * NIXL_MD_MAX_BACKENDS];
    int changed;  /* a region or connection info already loaded differs */
    size_t added; /* regions (and backends) the peer did not have */
} md_merge_t;

/* One backend of the merge: the new regions, and the old ones none of
 * them overlaps.  An old region a new one overlaps without being the same
 * was replaced (the peer registered that memory again): changed. */
static nixl_status_t merge_regions(const nixl_md_backend_t *old, const nixl_md_backend_t *add, md_merge_t *m,
                                   nixl_md_backend_t *out)
{
    uint32_t n_old = old ? old->num_regions : 0, n_add = add ? add->num_regions : 0, k = 0;
    out->regions = calloc((size_t)n_old + n_add + 1, sizeof(*out->regions));
    if (!out->regions)
        return NIXL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < n_old; i++) {
        const nixl_md_region_t *hit = add ? region_overlapping(add, &old->regions[i]) : NULL;
        if (!hit)
            out->regions[k++] = old->regions[i];
        else if (!region_same(hit, &old->regions[i]))
            m->changed = 1;
    }
    for (uint32_t i = 0; i < n_add; i++) {
        const nixl_md_region_t *hit = old ? region_overlapping(old, &add->regions[i]) : NULL;
        if (!hit || !region_same(hit, &add->regions[i]))
            m->added++;
        out->regions[k++] = add->regions[i];
    }
    out->num_regions = k;
    return NIXL_OK;
}

static void merge_free(md_merge_t *m)
{
    for (uint32_t i = 0; i < m->md.num_backends; i++)
        free(m->be[i].regions);
}

/* old (what is loaded, with connection info) plus the partial blob add, of
 * the same instance: every backend of old, then those of add that old
 * lacks; each backend's connection info from add when add carries it. */
static nixl_status_t md_merge(const nixl_agent_t *a, const nixl_md_t *old, const nixl_md_t *add, md_merge_t *m)
{
    memset(m, 0, sizeof(*m));
    m->md = *old;
    m->md.partial = 0;
    m->md.conn_omitted = 0;
    m->md.backends = m->be;
    m->md.num_backends = 0;
    nixl_status_t st = NIXL_OK;
    for (uint32_t i = 0; i < old->num_backends && st == NIXL_OK; i++) {
        const nixl_md_backend_t *ob = &old->backends[i], *nb = md_backend_named(add, ob->name);
        nixl_md_backend_t *out = &m->be[m->md.num_backends++];
        nixl_strlcpy(out->name, ob->name, sizeof(out->name));
        out->conn = ob->conn;
        out->conn_len = ob->conn_len;
        if (nb && !add->conn_omitted) {
            if (!bytes_same(ob->conn, ob->conn_len, nb->conn, nb->conn_len))
                m->changed = 1;
            out->conn = nb->conn;
            out->conn_len = nb->conn_len;
        }
        st = merge_regions(ob, nb, m, out);
    }
    for (uint32_t i = 0; i < add->num_backends && st == NIXL_OK; i++) {
        const nixl_md_backend_t *nb = &add->backends[i];
        if (md_backend_named(old, nb->name))
            continue;
        if (add->conn_omitted) {
            int ours = 0;
            for (int b = 0; b < a->num_backends; b++)
                ours |= strcmp(be_name(a->backends[b]), nb->name) == 0;
            if (ours) {
                NIXL_ERROR("agent %s: partial metadata of %s names its backend %s, whose connection info this "
                           "agent never received: send it with connection info",
                           a->name, old->name, nb->name);
                st = NIXL_ERR_UNKNOWN_PEER;
                break;
            }
            NIXL_DEBUG("agent %s: partial metadata of %s: backend %s is not one of ours, ignored", a->name,
                       old->name, nb->name);
            continue;
        }
        nixl_md_backend_t *out = &m->be[m->md.num_backends++];
        nixl_strlcpy(out->name, nb->name, sizeof(out->name));
        out->conn = nb->conn;
        out->conn_len = nb->conn_len;
        m->added++;
        st = merge_regions(NULL, nb, m, out);
    }
    if (st != NIXL_OK)
        merge_free(m);
    return st;
}

/* The same generation, grown to md (a superset of inc->md with the same
 * connection info): the keys of regions it had are kept (requests hold
 * them), those of new regions are loaded, and a backend of ours that had
 * no view of the peer gets one.  All or nothing; takes blob and md. */
static nixl_status_t inc_extend(nixl_agent_t *a, nixl_peer_inc_t *inc, void *blob, nixl_md_t *md)
{
    nixl_peer_backend_t grown[NIXL_AGENT_MAX_BACKENDS];
    uint8_t *fresh[NIXL_AGENT_MAX_BACKENDS];
    nixl_status_t st = NIXL_OK;
    int b;
    memset(grown, 0, sizeof(grown));
    memset(fresh, 0, sizeof(fresh));
    for (b = 0; b < a->num_backends && st == NIXL_OK; b++) {
        nixl_backend_t *be = a->backends[b];
        nixl_peer_backend_t *bk = &inc->bk[b];
        const nixl_md_backend_t *mb = md_backend_named(md, be_name(be));
        if (!mb)
            continue;
        if (!bk->backend) {
            /* The peer's backend is new, or ours came after the peer. */
            st = bk_load(inc, be, mb, &grown[b]);
            continue;
        }
        grown[b] = *bk;
        grown[b].mdb = mb;
        grown[b].rmd = calloc(mb->num_regions ? mb->num_regions : 1, sizeof(void *));
        fresh[b] = calloc(mb->num_regions ? mb->num_regions : 1, 1);
        if (!grown[b].rmd || !fresh[b]) {
            st = NIXL_ERR_NO_MEMORY;
            break;
        }
        for (uint32_t i = 0; i < mb->num_regions && st == NIXL_OK; i++) {
            const nixl_md_region_t *r = &mb->regions[i];
            if (r->mem_type == NIXL_MEM_FILE)
                continue; /* files are local: never loaded from a peer (bk_load) */
            long j = nixl_peer_region_find(bk, r->mem_type, r->addr, r->len);
            if (j >= 0 && region_same(&bk->mdb->regions[j], r)) {
                grown[b].rmd[i] = bk->rmd[j];
            } else {
                st = bk_rkey_load(md->name, be, bk->peer, r, i, &grown[b].rmd[i]);
                fresh[b][i] = st == NIXL_OK;
            }
        }
    }
    if (st != NIXL_OK) {
        for (b = 0; b < a->num_backends; b++) {
            if (!inc->bk[b].backend) {
                bk_unload(&grown[b]); /* a view made here, whole */
            } else if (grown[b].rmd) {
                for (uint32_t i = 0; fresh[b] && i < grown[b].mdb->num_regions; i++)
                    if (fresh[b][i])
                        be_rkey_unload(grown[b].backend, grown[b].rmd[i]);
                free(grown[b].rmd);
            }
            free(fresh[b]);
        }
        nixl_md_free(md);
        free(blob);
        return st;
    }
    for (b = 0; b < a->num_backends; b++) {
        if (inc->bk[b].backend && grown[b].rmd)
            free(inc->bk[b].rmd); /* every key in it moved to grown */
        if (grown[b].backend)
            inc->bk[b] = grown[b];
        free(fresh[b]);
    }
    nixl_md_free(inc->md);
    free(inc->blob);
    inc->md = md;
    inc->blob = blob;
    inc->loc.name = md->name; /* the same instance: nothing else of the record changes */
    return NIXL_OK;
}

static size_t md_region_total(const nixl_md_t *md)
{
    size_t n = 0;
    for (uint32_t i = 0; i < md->num_backends; i++)
        n += md->backends[i].num_regions;
    return n;
}

/* A partial blob (decoded: blob and md are taken). */
static nixl_status_t load_partial(nixl_agent_t *a, void *blob, nixl_md_t *md, char name_out[NIXL_NAME_MAX + 1])
{
    nixl_peer_t *p = nixl_peer_find(a, md->name);
    nixl_peer_inc_t *cur = p ? p->cur : NULL;
    nixl_status_t st;
    if (cur && !same_instance(cur->md, md)) {
        if (md->conn_omitted) {
            NIXL_ERROR("agent %s: partial metadata of %s carries no connection info, and the %s loaded is another "
                       "instance of it (instance id %016llx, this one %016llx): load its full metadata, or a "
                       "partial blob with connection info",
                       a->name, md->name, md->name, (unsigned long long)cur->md->instance_id,
                       (unsigned long long)md->instance_id);
            st = NIXL_ERR_UNKNOWN_PEER;
            goto out;
        }
        return load_new_generation(a, blob, md, " from the partial metadata of a new instance (the old one's "
                                   "regions are dropped)", name_out);
    }
    if (!cur) {
        if (md->conn_omitted) {
            NIXL_ERROR("agent %s: partial metadata of %s carries no connection info, and %s is %s: load its full "
                       "metadata, or a partial blob with connection info, first",
                       a->name, md->name, md->name, p ? "invalidated" : "not loaded");
            st = NIXL_ERR_UNKNOWN_PEER;
            goto out;
        }
        return load_new_generation(a, blob, md, " from partial metadata", name_out);
    }

    md_merge_t *m = malloc(sizeof(*m));
    void *mblob = NULL, *mcopy = NULL;
    size_t mlen = 0;
    nixl_md_t *merged = NULL;
    if (!m) {
        st = NIXL_ERR_NO_MEMORY;
        goto out;
    }
    /* md_merge and the codec log what they refuse. */
    st = md_merge(a, cur->md, md, m);
    if (st == NIXL_OK) {
        st = nixl_md_encode(&m->md, &mblob, &mlen);
        merge_free(m);
        if (st == NIXL_OK)
            st = blob_decode_copy(mblob, mlen, &mcopy, &merged);
        if (st != NIXL_OK)
            NIXL_ERROR("agent %s: the partial metadata of %s cannot be merged with what is loaded: %s", a->name,
                       md->name, nixl_strerror(st));
    }
    int changed = m->changed;
    size_t added = m->added;
    free(m);
    free(mblob);
    if (st != NIXL_OK)
        goto out;
    nixl_md_free(md);
    free(blob);
    if (changed)
        return load_new_generation(a, mcopy, merged, " again: its partial metadata changes regions or connection "
                                   "info already loaded, so requests made before are stale", name_out);
    if (added == 0) {
        NIXL_INFO("agent %s: partial metadata of %s adds nothing to generation %llu", a->name, p->name,
                  (unsigned long long)cur->generation);
        nixl_md_free(merged);
        free(mcopy);
    } else {
        if ((st = inc_extend(a, cur, mcopy, merged)) != NIXL_OK) {
            NIXL_ERROR("agent %s: the regions of the partial metadata of %s cannot be loaded: %s", a->name,
                       p->name, nixl_strerror(st));
            return st;
        }
        NIXL_INFO("agent %s: peer %s: partial metadata added to generation %llu (now %zu regions); requests made "
                  "before stay valid",
                  a->name, p->name, (unsigned long long)cur->generation, md_region_total(cur->md));
    }
    if (name_out)
        nixl_strlcpy(name_out, p->name, NIXL_NAME_MAX + 1);
    return NIXL_OK;
out:
    nixl_md_free(md);
    free(blob);
    return st;
}

/* A peer whose process we cannot look at (another host or pid
 * namespace): alive if a backend that reaches it heard from it recently
 * (peer_alive), gone if one knows it gone and none heard it; else -1. */
static int inc_backends_alive(const nixl_peer_inc_t *inc)
{
    int verdict = -1;
    for (int b = 0; b < NIXL_AGENT_MAX_BACKENDS; b++) {
        const nixl_peer_backend_t *bk = &inc->bk[b];
        int v = bk->backend ? be_peer_alive(bk->backend, bk->peer) : -1;
        if (v == 1)
            return 1;
        if (v == 0)
            verdict = 0;
    }
    return verdict;
}

/* Whether the process of a loaded peer still runs: 1 yes, 0 no, -1
 * unknown.  A same-host peer in our pid namespace: by its pid and start
 * time.  Another host or pid namespace: as its backends see it.  This very
 * process: unknown (an agent may be made again under its name, and
 * whatever sends is already inside). */
static int inc_process_alive(const nixl_peer_inc_t *inc)
{
    if (inc->loc.same_process)
        return -1;
    if (!inc->loc.same_pidns)
        return inc_backends_alive(inc);
    if (!inc->loc.start_time || !inc->loc.pid)
        return -1;
    uint64_t t = 0;
    if (nixl_proc_start_time(inc->loc.pid, &t) != 0 || t != inc->loc.start_time)
        return 0;
    /* A killed process not yet reaped still has its /proc entry: its state says it is over. */
    char path[48], buf[512];
    snprintf(path, sizeof(path), "/proc/%u/stat", inc->loc.pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    if (rp && (rp[1] == ' ') && (rp[2] == 'Z' || rp[2] == 'X' || rp[2] == 'x'))
        return 0;
    return 1;
}

static void peer_note_from(nixl_agent_t *a, const char *name, const char *from)
{
    nixl_peer_t *p = nixl_peer_find(a, name);
    if (p && from)
        nixl_strlcpy(p->from, from, sizeof(p->from));
}

/* Without a secret, a blob from the network (from non-NULL) of another
 * instance under the name of a loaded peer whose process still runs is a
 * takeover: NIXL_ERR_NAME_TAKEN (logged). */
static nixl_status_t takeover_check(nixl_agent_t *a, const nixl_md_t *md, const char *from)
{
    nixl_peer_t *p = from && !a->md_key && !md->partial ? nixl_peer_find(a, md->name) : NULL;
    const nixl_md_t *old = p && p->cur ? p->cur->md : NULL;
    if (old && (old->instance_id != md->instance_id || !nixl_host_id_same(&old->host, &md->host)) &&
        inc_process_alive(p->cur) == 1) {
        NIXL_WARN("agent %s: refused metadata from %s under the name of peer %s: it is another instance (pid "
                  "%u, was %u) while the known one still runs (%s); set NIXL_MD_SECRET_FILE to authenticate peers "
                  "(docs/trust.md)",
                  a->name, *from ? from : "?", md->name, md->pid, old->pid,
                  p->cur->loc.same_pidns ? "its process is there" : "a backend heard from it just now");
        return NIXL_ERR_NAME_TAKEN;
    }
    return NIXL_OK;
}

/* Load a blob; from: the network address it came from (NULL: loaded
 * otherwise), checked for a takeover and noted on the peer. */
static nixl_status_t md_load_locked(nixl_agent_t *a, const void *blob, size_t len, const char *from,
                                    char name_out[NIXL_NAME_MAX + 1])
{
    void *copy;
    nixl_md_t *md;
    nixl_status_t st = blob_decode_copy(blob, len, &copy, &md);
    if (st != NIXL_OK)
        return st;
    if (strcmp(md->name, a->name) == 0) {
        NIXL_ERROR("agent %s: refusing to load its own name as a peer", a->name);
        st = NIXL_ERR_SELF;
    } else {
        st = takeover_check(a, md, from);
    }
    if (st != NIXL_OK) {
        nixl_md_free(md);
        free(copy);
        return st;
    }
    char name[NIXL_NAME_MAX + 1];
    nixl_strlcpy(name, md->name, sizeof(name)); /* md belongs to the peer once loaded */
    st = md->partial ? load_partial(a, copy, md, name_out) : load_new_generation(a, copy, md, "", name_out);
    if (st == NIXL_OK)
        peer_note_from(a, name, from);
    return st;
}

nixl_status_t nixl_md_load_remote_locked(nixl_agent_t *a, const void *blob, size_t len,
                                         char name_out[NIXL_NAME_MAX + 1])
{
    return md_load_locked(a, blob, len, NULL, name_out);
}

nixl_status_t nixl_md_load_remote_from_locked(nixl_agent_t *a, const void *blob, size_t len, const char *from,
                                              char name_out[NIXL_NAME_MAX + 1])
{
    return md_load_locked(a, blob, len, from, name_out);
}

NIXL_API nixl_status_t nixl_md_load_remote(nixl_agent_t *agent, const void *blob, size_t len,
                                           char name_out[NIXL_NAME_MAX + 1])
{
    if (!agent || !blob)
        return NIXL_ERR_NULL;
    nixl_agent_lock(agent);
    nixl_status_t st = nixl_md_load_remote_locked(agent, blob, len, name_out);
    nixl_agent_unlock(agent);
    return st;
}

nixl_status_t nixl_md_invalidate_from_locked(nixl_agent_t *a, const char *name, const char *from)
{
    nixl_peer_t *p = nixl_peer_find(a, name);
    if (!a->md_key && p && p->cur && p->from[0] && from && strcmp(p->from, from) != 0) {
        NIXL_WARN("agent %s: refused INVALIDATE of peer %s from %s: its metadata came from %s; set "
                  "NIXL_MD_SECRET_FILE to authenticate peers (docs/trust.md)",
                  a->name, name, from, p->from);
        return NIXL_ERR_PERMISSION;
    }
    return nixl_md_invalidate_remote_locked(a, name);
}

nixl_status_t nixl_md_invalidate_remote_locked(nixl_agent_t *a, const char *name)
{
    nixl_peer_t *p = nixl_peer_find(a, name);
    if (!p || !p->cur) {
        NIXL_ERROR("agent %s: invalidate: no loaded peer named '%s'", a->name, name);
        return NIXL_ERR_UNKNOWN_PEER;
    }
    nixl_peer_inc_unref(p->cur);
    p->cur = NULL;
    NIXL_INFO("agent %s: peer %s invalidated", a->name, name);
    return NIXL_OK;
}

NIXL_API nixl_status_t nixl_md_invalidate_remote(nixl_agent_t *agent, const char *peer)
{
    if (!agent || !peer)
        return NIXL_ERR_NULL;
    nixl_agent_lock(agent);
    nixl_status_t st = nixl_md_invalidate_remote_locked(agent, peer);
    nixl_agent_unlock(agent);
    return st;
}

NIXL_API nixl_status_t nixl_md_check_remote(nixl_agent_t *agent, const char *peer)
{
    if (!agent || !peer)
        return NIXL_ERR_NULL;
    nixl_agent_lock(agent);
    nixl_peer_t *p = nixl_peer_find(agent, peer);
    nixl_status_t st = p && p->cur ? NIXL_OK : NIXL_ERR_UNKNOWN_PEER;
    nixl_agent_unlock(agent);
    return st;
}

NIXL_API nixl_status_t nixl_md_connect(nixl_agent_t *agent, const char *peer, const nixl_opt_args_t *opt)
{
    if (!agent || !peer)
        return NIXL_ERR_NULL;
    nixl_agent_lock(agent);
    nixl_status_t st = NIXL_OK;
    nixl_peer_t *p = strcmp(peer, agent->name) == 0 ? nixl_peer_self(agent, &st) : nixl_peer_find(agent, peer);
    if (!p || !p->cur) {
        if (st == NIXL_OK) {
            NIXL_ERROR("agent %s: connect: no loaded peer named '%s'", agent->name, peer);
            st = NIXL_ERR_UNKNOWN_PEER;
        }
        nixl_agent_unlock(agent);
        return st;
    }
    int tried = 0;
    /* The agent lock stays held (a backend's ops never run at once); a
     * backend waits at most its own peer timeout. */
    for (int b = 0; b < agent->num_backends && st == NIXL_OK; b++) {
        nixl_peer_backend_t *bk = &p->cur->bk[b];
        if (!bk->backend)
            continue;
        if (!nixl_opt_allows(opt, bk->backend))
            continue;
        tried++;
        st = be_peer_connect(bk->backend, bk->peer);
        if (st != NIXL_OK)
            NIXL_ERROR("agent %s: connect to %s over %s: %s", agent->name, peer, be_name(bk->backend),
                       nixl_strerror(st));
    }
    if (st == NIXL_OK && tried == 0) {
        NIXL_ERROR("agent %s: connect: no backend %sreaches peer %s", agent->name,
                   opt && (opt->field_mask & NIXL_OPT_BACKENDS) ? "of those named " : "", peer);
        st = NIXL_ERR_NO_PATH;
    }
    nixl_agent_unlock(agent);
    return st;
}

void nixl_peers_destroy(nixl_agent_t *agent)
{
    if (agent->self_peer) {
        nixl_peer_inc_unref(agent->self_peer->cur);
        free(agent->self_peer);
        agent->self_peer = NULL;
    }
    for (size_t i = 0; i < agent->num_peers; i++) {
        nixl_peer_inc_unref(agent->peers[i]->cur);
        free(agent->peers[i]);
    }
    free(agent->peers);
    agent->peers = NULL;
    agent->num_peers = agent->cap_peers = 0;
}

/* ---- metadata over the socket channel ---- */

static int md_timeout_ms(void)
{
    uint64_t v = nixl_cfg_size("NIXL_MD_TIMEOUT_MS");
    return v > 600000 ? 600000 : (int)v;
}

NIXL_API nixl_status_t nixl_md_send_local(nixl_agent_t *agent, const char *ip, uint16_t port)
{
    if (!agent || !ip)
        return NIXL_ERR_NULL;
    void *blob;
    size_t len;
    nixl_status_t st = nixl_md_get_local(agent, &blob, &len);
    if (st != NIXL_OK)
        return st;
    st = nixl_md_sock_send_k(agent->md_key, ip, port, blob, len, md_timeout_ms());
    free(blob);
    return st;
}

NIXL_API nixl_status_t nixl_md_send_local_partial(nixl_agent_t *agent, const nixl_dlist_t *dlist, uint32_t flags,
                                                  const nixl_opt_args_t *opt, const char *ip, uint16_t port)
{
    if (!agent || !ip) {
        NIXL_ERROR("nixl_md_send_local_partial: %s is NULL", agent ? "the address" : "the agent");
        return NIXL_ERR_NULL;
    }
    void *blob;
    size_t len;
    nixl_agent_lock(agent);
    nixl_status_t st =
        nixl_md_get_local_partial_locked(agent, dlist, flags, opt, "send partial metadata", &blob, &len);
    nixl_agent_unlock(agent);
    if (st != NIXL_OK)
        return st;
    st = nixl_md_sock_send_k(agent->md_key, ip, port, blob, len, md_timeout_ms());
    free(blob);
    if (st != NIXL_OK)
        NIXL_ERROR("agent %s: partial metadata (%zu bytes) to %s:%u: %s (a status of the peer's load: its log "
                   "says why)",
                   agent->name, len, ip, (unsigned)port, nixl_status_name(st));
    return st;
}

NIXL_API nixl_status_t nixl_md_fetch_remote(nixl_agent_t *agent, const char *ip, uint16_t port,
                                            char name_out[NIXL_NAME_MAX + 1])
{
    if (!agent || !ip)
        return NIXL_ERR_NULL;
    void *blob = NULL;
    size_t len = 0;
    nixl_status_t st = nixl_md_sock_fetch_k(agent->md_key, ip, port, md_timeout_ms(), &blob, &len);
    if (st != NIXL_OK)
        return st;
    nixl_agent_lock(agent);
    st = nixl_md_load_remote_from_locked(agent, blob, len, ip, name_out);
    nixl_agent_unlock(agent);
    free(blob);
    return st;
}

NIXL_API nixl_status_t nixl_md_invalidate_local(nixl_agent_t *agent, const char *ip, uint16_t port)
{
    if (!agent || !ip)
        return NIXL_ERR_NULL;
    return nixl_md_sock_invalidate_k(agent->md_key, ip, port, agent->name, md_timeout_ms());
}
