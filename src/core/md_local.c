/*
 * md_local.c - this agent's metadata out: the full blob (nixl_md_get_local,
 * the listener's FETCH, etcd publish, loopback) and partial blobs
 * (nixl_md_get_local_partial, nixl_md_send_local_partial, a labelled etcd
 * publish), made by one builder from one selection.
 *
 * A partial blob carries the agent section as a full one does, a PARTIAL
 * section, the chosen backends (with their connection info, or without it
 * when the peer already has it) and, of the registrations, only those that
 * hold the descriptors asked for (docs/metadata-format.md).  The peer adds
 * those regions to what it knows of us (peer.c) instead of replacing it.
 *
 * Everything here runs under the agent lock: the registry and the backends
 * must not change while their keys are packed.  Local-only memory types
 * (a backend's local_mem_types) are registered but never published, so a
 * region appears only for the backends whose published types include it.
 * FILE regions are never published either: files are the agent's own (a
 * storage request names the agent itself), so only the agent's view of
 * itself (nixl_md_get_self_locked, loopback) carries them.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/agent.h"
#include "core/be_call.h"
#include "util/log.h"
#include "util/str.h"

/* What a blob describes. */
typedef struct md_select {
    uint32_t backends;   /* mask over agent->backends */
    int partial;         /* write a PARTIAL section */
    int conn;            /* carry each backend's connection info */
    int skip_empty;      /* leave out a backend that has no region to show */
    int files;           /* show FILE regions: only the agent's view of itself */
    nixl_mem_t mem;      /* with keep: the one memory type shown */
    const uint8_t *keep; /* NULL: every region; else one flag per index of regs[mem] */
} md_select_t;

static int region_selected(const nixl_agent_t *a, const md_select_t *s, const nixl_backend_t *be, int t, size_t i)
{
    const nixl_region_t *r = a->regs[t].v[i];
    if (!(r->backend_mask & (1u << be->index)) || !(be_mem_types(be) & NIXL_MEM_BIT(t)))
        return 0;
    if (t == NIXL_MEM_FILE && !s->files)
        return 0;
    return !s->keep || ((nixl_mem_t)t == s->mem && s->keep[i]);
}

static size_t regions_selected(const nixl_agent_t *a, const md_select_t *s, const nixl_backend_t *be)
{
    size_t n = 0;
    for (int t = 0; t < NIXL_MEM_TYPE_COUNT; t++)
        for (size_t i = 0; i < a->regs[t].n; i++)
            n += (size_t)region_selected(a, s, be, t, i);
    return n;
}

/* The one builder.  Two passes over the backends' pack calls: sizes first,
 * then the bytes, so one arena holds every key and connection info and the
 * codec's pointers stay valid until the encode. */
static nixl_status_t md_build_locked(nixl_agent_t *a, const md_select_t *s, void **blob_out, size_t *len_out)
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
    md.partial = s->partial;
    md.conn_omitted = s->partial && !s->conn;

    nixl_md_backend_t mdb[NIXL_AGENT_MAX_BACKENDS];
    nixl_backend_t *chosen[NIXL_AGENT_MAX_BACKENDS];
    memset(mdb, 0, sizeof(mdb));
    uint32_t n = 0;
    nixl_status_t st = NIXL_OK;
    uint8_t *arena = NULL;
    size_t arena_len = 0;

    for (int b = 0; b < a->num_backends; b++) {
        if (!(s->backends & (1u << b)))
            continue;
        size_t cnt = regions_selected(a, s, a->backends[b]);
        if (cnt == 0 && s->skip_empty)
            continue;
        mdb[n].num_regions = (uint32_t)cnt;
        mdb[n].regions = calloc(cnt ? cnt : 1, sizeof(*mdb[n].regions));
        chosen[n++] = a->backends[b];
        if (!mdb[n - 1].regions) {
            st = NIXL_ERR_NO_MEMORY;
            goto out;
        }
    }
    md.num_backends = n;
    md.backends = mdb;

    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        for (uint32_t k = 0; k < n; k++) {
            nixl_backend_t *be = chosen[k];
            nixl_md_backend_t *m = &mdb[k];
            size_t len;
            nixl_strlcpy(m->name, be_name(be), sizeof(m->name));
            if (s->conn) {
                len = pass ? arena_len - off : 0;
                st = be_conn_pack(be, pass ? arena + off : NULL, &len);
                if (st != NIXL_OK)
                    goto out;
                m->conn = pass ? arena + off : NULL;
                m->conn_len = (uint32_t)len;
                off += len;
            }
            size_t j = 0;
            for (int t = 0; t < NIXL_MEM_TYPE_COUNT; t++) {
                for (size_t i = 0; i < a->regs[t].n; i++) {
                    if (!region_selected(a, s, be, t, i))
                        continue;
                    const nixl_region_t *r = a->regs[t].v[i];
                    nixl_md_region_t *mr = &m->regions[j++];
                    mr->mem_type = r->mem_type;
                    mr->dev_id = r->mem_type == NIXL_MEM_FILE ? (uint32_t)r->fd : r->dev_id;
                    mr->addr = r->addr;
                    mr->len = r->len;
                    len = pass ? arena_len - off : 0;
                    st = be_rkey_pack(be, r->md[be->index], pass ? arena + off : NULL, &len);
                    if (st != NIXL_OK)
                        goto out;
                    mr->rkey = pass ? arena + off : NULL;
                    mr->rkey_len = (uint32_t)len;
                    off += len;
                }
            }
        }
        if (pass == 0) {
            arena_len = off ? off : 1;
            arena = malloc(arena_len);
            if (!arena) {
                st = NIXL_ERR_NO_MEMORY;
                goto out;
            }
        }
    }
    st = nixl_md_encode(&md, blob_out, len_out);
out:
    for (uint32_t k = 0; k < NIXL_AGENT_MAX_BACKENDS; k++)
        free(mdb[k].regions);
    free(arena);
    return st;
}

nixl_status_t nixl_md_get_local_locked(nixl_agent_t *a, void **blob_out, size_t *len_out)
{
    md_select_t s = {.conn = 1};
    for (int b = 0; b < a->num_backends; b++)
        s.backends |= 1u << b;
    return md_build_locked(a, &s, blob_out, len_out);
}

nixl_status_t nixl_md_get_self_locked(nixl_agent_t *a, void **blob_out, size_t *len_out)
{
    md_select_t s = {.conn = 1, .files = 1};
    for (int b = 0; b < a->num_backends; b++)
        s.backends |= 1u << b;
    return md_build_locked(a, &s, blob_out, len_out);
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

/* ---- partial blobs ---- */

/* The backends a partial blob describes: those of opt (all when it names
 * none) that publish the list's memory type, when the list is not empty. */
static nixl_status_t partial_backends(const nixl_agent_t *a, const nixl_dlist_t *dl, const nixl_opt_args_t *opt,
                                      const char *what, uint32_t *mask_out)
{
    uint32_t mask = 0;
    if (opt && (opt->field_mask & NIXL_OPT_BACKENDS) && opt->num_backends) {
        if (!opt->backends) {
            NIXL_ERROR("agent %s: %s: %zu backends in the options but no backend array", a->name, what,
                       opt->num_backends);
            return NIXL_ERR_NULL;
        }
        for (size_t i = 0; i < opt->num_backends; i++) {
            const nixl_backend_t *b = opt->backends[i];
            if (!b || b->agent != a) {
                NIXL_ERROR("agent %s: %s: backend %zu of the options is %s", a->name, what, i,
                           b ? "a backend of another agent" : "NULL");
                return NIXL_ERR_UNKNOWN_BACKEND;
            }
            mask |= 1u << b->index;
        }
    } else {
        for (int b = 0; b < a->num_backends; b++)
            mask |= 1u << b;
    }
    if (dl->count == 0) {
        *mask_out = mask;
        return NIXL_OK;
    }
    uint32_t publish = 0;
    for (int b = 0; b < a->num_backends; b++)
        if ((mask & (1u << b)) && (be_mem_types(a->backends[b]) & NIXL_MEM_BIT(dl->mem_type)))
            publish |= 1u << b;
    if (!publish) {
        NIXL_ERROR("agent %s: %s: none of the %s backends publishes memory type %d to peers", a->name, what,
                   opt && (opt->field_mask & NIXL_OPT_BACKENDS) && opt->num_backends ? "chosen" : "agent's",
                   (int)dl->mem_type);
        return NIXL_ERR_MEM_TYPE;
    }
    *mask_out = publish;
    return NIXL_OK;
}

/* keep[i] = 1 for each registration of dl's type holding a descriptor; each
 * descriptor must lie inside one registered with a chosen backend. */
static nixl_status_t partial_regions(const nixl_agent_t *a, const nixl_dlist_t *dl, uint32_t mask, const char *what,
                                     uint8_t *keep)
{
    const nixl_region_index_t *idx = &a->regs[dl->mem_type];
    for (size_t i = 0; i < dl->count; i++) {
        const nixl_desc_t *d = &dl->descs[i];
        if (d->len == 0) {
            NIXL_ERROR("agent %s: %s: descriptor %zu (0x%llx) has length 0", a->name, what, i,
                       (unsigned long long)d->addr);
            return NIXL_ERR_ZERO_LENGTH;
        }
        long r = nixl_region_index(idx, d->addr, d->len);
        if (r < 0) {
            NIXL_ERROR("agent %s: %s: descriptor %zu [0x%llx, +%llu) of memory type %d is not inside a registered "
                       "region",
                       a->name, what, i, (unsigned long long)d->addr, (unsigned long long)d->len,
                       (int)dl->mem_type);
            return NIXL_ERR_NOT_REGISTERED;
        }
        if (!(idx->v[r]->backend_mask & mask)) {
            NIXL_ERROR("agent %s: %s: descriptor %zu [0x%llx, +%llu) lies in a region registered with none of the "
                       "chosen backends",
                       a->name, what, i, (unsigned long long)d->addr, (unsigned long long)d->len);
            return NIXL_ERR_NOT_REGISTERED;
        }
        keep[r] = 1;
    }
    return NIXL_OK;
}

nixl_status_t nixl_md_get_local_partial_locked(nixl_agent_t *a, const nixl_dlist_t *dl, uint32_t flags,
                                               const nixl_opt_args_t *opt, const char *what, void **blob_out,
                                               size_t *len_out)
{
    if (!dl) {
        NIXL_ERROR("agent %s: %s: the descriptor list is NULL (an empty list, count 0, asks for connection info "
                   "only)",
                   a->name, what);
        return NIXL_ERR_NULL;
    }
    if ((unsigned)dl->mem_type >= NIXL_MEM_TYPE_COUNT) {
        NIXL_ERROR("agent %s: %s: memory type %d is not a nixl_mem_t", a->name, what, (int)dl->mem_type);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (dl->count && !dl->descs) {
        NIXL_ERROR("agent %s: %s: %zu descriptors but the array is NULL", a->name, what, dl->count);
        return NIXL_ERR_NULL;
    }
    if (flags & ~(uint32_t)NIXL_MD_PARTIAL_CONN_INFO) {
        NIXL_ERROR("agent %s: %s: unknown flag bits 0x%x", a->name, what,
                   (unsigned)(flags & ~(uint32_t)NIXL_MD_PARTIAL_CONN_INFO));
        return NIXL_ERR_INVALID_PARAM;
    }
    if (dl->mem_type == NIXL_MEM_FILE && dl->count) {
        NIXL_ERROR("agent %s: %s: FILE regions are never published to peers: files are local (a storage request "
                   "names the agent itself as its peer)",
                   a->name, what);
        return NIXL_ERR_MEM_TYPE;
    }
    md_select_t s = {.partial = 1, .mem = dl->mem_type};
    nixl_status_t st = partial_backends(a, dl, opt, what, &s.backends);
    if (st != NIXL_OK)
        return st;
    /* An empty list is NIXL's way to send connection info alone. */
    s.conn = (flags & NIXL_MD_PARTIAL_CONN_INFO) || dl->count == 0;
    s.skip_empty = !s.conn;
    size_t nregs = a->regs[dl->mem_type].n;
    uint8_t *keep = calloc(nregs ? nregs : 1, 1);
    if (!keep)
        return NIXL_ERR_NO_MEMORY;
    s.keep = keep;
    st = partial_regions(a, dl, s.backends, what, keep);
    if (st == NIXL_OK)
        st = md_build_locked(a, &s, blob_out, len_out);
    free(keep);
    return st;
}

NIXL_API nixl_status_t nixl_md_get_local_partial(nixl_agent_t *agent, const nixl_dlist_t *dlist, uint32_t flags,
                                                 const nixl_opt_args_t *opt, void **blob_out, size_t *len_out)
{
    if (!agent || !blob_out || !len_out) {
        NIXL_ERROR("nixl_md_get_local_partial: %s is NULL", !agent ? "the agent" : !blob_out ? "blob_out" : "len_out");
        return NIXL_ERR_NULL;
    }
    nixl_agent_lock(agent);
    nixl_status_t st =
        nixl_md_get_local_partial_locked(agent, dlist, flags, opt, "partial metadata", blob_out, len_out);
    nixl_agent_unlock(agent);
    return st;
}
