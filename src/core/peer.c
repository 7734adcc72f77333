/*
 * peer.c - this agent's metadata out, peers' metadata in.
 *
 * nixl_md_get_local serializes the agent through the codec.  Loading a
 * peer's blob decodes (and so validates) it completely, then lets every
 * local backend that the peer also runs load the peer and its region keys.
 * Each load is a new generation (nixl_peer_inc_t), reference-counted: the
 * agent holds one reference, every request made against it another, so a
 * reload or an invalidation never frees what an in-flight request uses;
 * requests notice at post that their generation is no longer current.
 */
#include <stdatomic.h>
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

/* ---- local metadata ---- */

nixl_status_t nixl_md_get_local_locked(nixl_agent_t *a, void **blob_out, size_t *len_out)
{
    nixl_md_t md;
    memset(&md, 0, sizeof(md));
    nixl_strlcpy(md.name, a->name, sizeof(md.name));
    nixl_proc_id_t self;
    nixl_proc_id_get(&self);
    md.host = self.host;
    md.pid = self.pid;
    md.uid = self.uid;
    md.start_time = self.start_time;
    md.pidns = self.pidns;
    md.netns = self.netns;
    md.instance_id = a->instance_id;
    md.num_backends = (uint32_t)a->num_backends;

    nixl_md_backend_t mdb[NIXL_AGENT_MAX_BACKENDS];
    memset(mdb, 0, sizeof(mdb));
    md.backends = mdb;
    nixl_status_t st = NIXL_OK;
    uint8_t *arena = NULL;
    size_t arena_len = 0, arena_cap = 0;

    /* Two passes: sizes first, then the bytes, so one arena holds every key
     * and the codec's pointers stay valid. */
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        for (int b = 0; b < a->num_backends; b++) {
            nixl_backend_t *be = a->backends[b];
            nixl_md_backend_t *m = &mdb[b];
            nixl_strlcpy(m->name, be_name(be), sizeof(m->name));
            size_t n = pass ? arena_len - off : 0;
            st = be_conn_pack(be, pass ? arena + off : NULL, &n);
            if (st != NIXL_OK)
                goto out;
            m->conn = pass ? arena + off : NULL;
            m->conn_len = (uint32_t)n;
            off += n;
            if (pass == 0) {
                size_t cnt = 0;
                /* Local-only memory types (the ops' local_mem_types) are
                 * registered with the backend but never published. */
                for (int t = 0; t < NIXL_MEM_TYPE_COUNT; t++)
                    for (size_t i = 0; i < a->regs[t].n && (be_mem_types(be) & NIXL_MEM_BIT(t)); i++)
                        cnt += (a->regs[t].v[i]->backend_mask >> b) & 1;
                m->num_regions = (uint32_t)cnt;
                m->regions = calloc(cnt ? cnt : 1, sizeof(*m->regions));
                if (!m->regions) {
                    st = NIXL_ERR_NO_MEMORY;
                    goto out;
                }
            }
            size_t k = 0;
            for (int t = 0; t < NIXL_MEM_TYPE_COUNT; t++) {
                for (size_t i = 0; i < a->regs[t].n; i++) {
                    nixl_region_t *r = a->regs[t].v[i];
                    if (!(r->backend_mask & (1u << b)) || !(be_mem_types(be) & NIXL_MEM_BIT(t)))
                        continue;
                    nixl_md_region_t *mr = &m->regions[k++];
                    mr->mem_type = r->mem_type;
                    mr->dev_id = r->dev_id;
                    mr->addr = r->addr;
                    mr->len = r->len;
                    n = pass ? arena_len - off : 0;
                    st = be_rkey_pack(be, r->md[b], pass ? arena + off : NULL, &n);
                    if (st != NIXL_OK)
                        goto out;
                    mr->rkey = pass ? arena + off : NULL;
                    mr->rkey_len = (uint32_t)n;
                    off += n;
                }
            }
        }
        if (pass == 0) {
            arena_cap = off ? off : 1;
            arena = malloc(arena_cap);
            if (!arena) {
                st = NIXL_ERR_NO_MEMORY;
                goto out;
            }
            arena_len = arena_cap;
        }
    }
    st = nixl_md_encode(&md, blob_out, len_out);
out:
    for (int b = 0; b < a->num_backends; b++)
        free(mdb[b].regions);
    free(arena);
    return st;
}

NIXL_API nixl_status_t nixl_md_get_local(nixl_agent_t *agent, void **blob_out, size_t *len_out)
{
    if (!agent || !blob_out || !len_out)
        return NIXL_ERR_NULL;
    nixl_agent_lock(agent);
    nixl_status_t st = nixl_md_get_local_locked(agent, blob_out, len_out);
    nixl_agent_unlock(agent);
    return st;
}

NIXL_API void nixl_free(void *ptr)
{
    free(ptr);
}

static void inc_free(nixl_peer_inc_t *inc)
{
    for (int b = 0; b < NIXL_AGENT_MAX_BACKENDS; b++) {
        nixl_peer_backend_t *bk = &inc->bk[b];
        if (!bk->backend)
            continue;
        if (bk->rmd) {
            for (uint32_t i = 0; i < bk->mdb->num_regions; i++)
                if (bk->rmd[i])
                    be_rkey_unload(bk->backend, bk->rmd[i]);
            free(bk->rmd);
        }
        if (bk->peer)
            be_peer_unload(bk->backend, bk->peer);
    }
    nixl_md_free(inc->md);
    free(inc->blob);
    free(inc);
}

void nixl_peer_inc_unref(nixl_peer_inc_t *inc)
{
    if (inc && --inc->refs == 0)
        inc_free(inc);
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

/* Load one backend's view of the peer.  NIXL_ERR_NO_PATH leaves it unset. */
static nixl_status_t inc_load_backend(nixl_peer_inc_t *inc, nixl_backend_t *be, const nixl_md_backend_t *mdb)
{
    nixl_peer_backend_t *bk = &inc->bk[be->index];
    void *peer = NULL;
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
    if (!bk->rmd)
        return NIXL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < mdb->num_regions; i++) {
        const nixl_md_region_t *r = &mdb->regions[i];
        nixl_be_region_t br = {.mem_type = r->mem_type, .dev_id = r->dev_id, .addr = r->addr, .len = r->len};
        st = be_rkey_load(be, peer, &br, r->rkey, r->rkey_len, &bk->rmd[i]);
        if (st != NIXL_OK) {
            NIXL_WARN("peer %s: backend %s refused the key of region %u: %s", inc->md->name, be_name(be), i,
                      nixl_strerror(st));
            return st;
        }
    }
    return NIXL_OK;
}

/* A loaded generation from a blob (copied): decoded, every backend of
 * ours that knows the blob's backend loads it.  self: the blob is this
 * agent's own (loopback), else naming this agent is refused.  Its number
 * is the next of the peer of that name (committed by the caller). */
static nixl_status_t inc_from_blob(nixl_agent_t *a, const void *blob, size_t len, int self, nixl_peer_inc_t **out)
{
    nixl_status_t st;
    nixl_peer_inc_t *inc = calloc(1, sizeof(*inc));
    if (!inc)
        return NIXL_ERR_NO_MEMORY;
    inc->refs = 1;
    inc->agent = a;
    inc->loopback = self;
    inc->blob = malloc(len ? len : 1);
    if (!inc->blob) {
        free(inc);
        return NIXL_ERR_NO_MEMORY;
    }
    memcpy(inc->blob, blob, len);
    st = nixl_md_decode(inc->blob, len, &inc->md);
    if (st != NIXL_OK) {
        free(inc->blob);
        free(inc);
        return st;
    }
    nixl_md_t *md = inc->md;
    if (!self && strcmp(md->name, a->name) == 0) {
        NIXL_ERROR("agent %s: refusing to load its own name as a peer", a->name);
        st = NIXL_ERR_SELF;
        goto err;
    }
    nixl_proc_id_t me;
    nixl_proc_id_get(&me);
    nixl_peer_locality(md, &me, self, &inc->loc);
    const nixl_peer_t *known = self ? a->self_peer : nixl_peer_find(a, md->name);
    inc->generation = inc->loc.generation = (known ? known->generation : 0) + 1;
    for (uint32_t i = 0; i < md->num_backends; i++) {
        for (int b = 0; b < a->num_backends; b++) {
            if (strcmp(md->backends[i].name, be_name(a->backends[b])) == 0) {
                st = inc_load_backend(inc, a->backends[b], &md->backends[i]);
                if (st != NIXL_OK)
                    goto err;
            }
        }
    }
    *out = inc;
    return NIXL_OK;
err:
    inc_free(inc);
    return st;
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
    void *blob = NULL;
    size_t len = 0;
    nixl_peer_inc_t *inc = NULL;
    nixl_status_t st = nixl_md_get_local_locked(a, &blob, &len);
    if (st == NIXL_OK)
        st = inc_from_blob(a, blob, len, 1, &inc);
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

nixl_status_t nixl_md_load_remote_locked(nixl_agent_t *a, const void *blob, size_t len,
                                         char name_out[NIXL_NAME_MAX + 1])
{
    nixl_peer_inc_t *inc = NULL;
    nixl_status_t st = inc_from_blob(a, blob, len, 0, &inc);
    if (st != NIXL_OK)
        return st;
    nixl_md_t *md = inc->md;

    nixl_peer_t *p = nixl_peer_find(a, md->name);
    if (!p) {
        if (NIXL_ARRAY_RESERVE(a->peers, a->cap_peers, a->num_peers + 1, 16)) {
            st = NIXL_ERR_NO_MEMORY;
            goto err;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
            st = NIXL_ERR_NO_MEMORY;
            goto err;
        }
        nixl_strlcpy(p->name, md->name, sizeof(p->name));
        a->peers[a->num_peers++] = p;
    }
    nixl_peer_inc_unref(p->cur);
    p->cur = inc;
    p->generation = inc->generation;
    NIXL_INFO("agent %s: loaded peer %s (generation %llu, %s)", a->name, p->name,
              (unsigned long long)inc->generation,
              inc->loc.same_process ? "this process" : inc->loc.same_host ? "this host" : "another host");
    if (name_out)
        nixl_strlcpy(name_out, p->name, NIXL_NAME_MAX + 1);
    return NIXL_OK;
err:
    inc_free(inc);
    return st;
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
        if (opt && (opt->field_mask & NIXL_OPT_BACKENDS)) {
            int named = 0;
            for (size_t i = 0; i < opt->num_backends && opt->backends; i++)
                named |= opt->backends[i] == bk->backend;
            if (!named)
                continue;
        }
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
    st = nixl_md_sock_send(ip, port, blob, len, md_timeout_ms());
    free(blob);
    return st;
}

NIXL_API nixl_status_t nixl_md_fetch_remote(nixl_agent_t *agent, const char *ip, uint16_t port,
                                            char name_out[NIXL_NAME_MAX + 1])
{
    if (!agent || !ip)
        return NIXL_ERR_NULL;
    void *blob = NULL;
    size_t len = 0;
    nixl_status_t st = nixl_md_sock_fetch(ip, port, md_timeout_ms(), &blob, &len);
    if (st != NIXL_OK)
        return st;
    st = nixl_md_load_remote(agent, blob, len, name_out);
    free(blob);
    return st;
}

NIXL_API nixl_status_t nixl_md_invalidate_local(nixl_agent_t *agent, const char *ip, uint16_t port)
{
    if (!agent || !ip)
        return NIXL_ERR_NULL;
    return nixl_md_sock_invalidate(ip, port, agent->name, md_timeout_ms());
}
