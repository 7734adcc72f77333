/*
 * xfer.c - transfer requests: prepared lists, making requests, post,
 * status, release.
 *
 * The hot path for paged KV is the two-step form: a list is resolved once
 * (nixl_prep_create: each descriptor to its registered region, one binary
 * search with a last-hit shortcut), then requests are made from index arrays
 * (nixl_xfer_make: one pass that pairs descriptors, checks lengths and
 * merges runs contiguous on both sides into one backend iov).  The one-shot
 * nixl_xfer_create goes through the same code with identity indices.
 *
 * Safety nets that cost nothing per descriptor on post: a request remembers
 * the peer generation it was made against (a reload or invalidation makes
 * the post fail), and the registration epoch (a deregistration since makes
 * the post re-resolve its local descriptors first).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/agent.h"
#include "core/be_call.h"
#include "cuda/cuda.h"
#include "util/config.h"
#include "util/log.h"
#include "util/str.h"
#include "util/time.h"

typedef struct prep_desc {
    uint64_t addr;
    uint64_t len;
    void *h; /* local: nixl_region_t*; remote: the backend's rmd */
} prep_desc_t;

/* A list whose descriptors are runs of one length at one stride inside one
 * region, every run but the last equally long (vLLM's lists of every block:
 * one run per layer), is also kept as those runs: make computes descriptor
 * i from its index instead of loading it from anywhere in the list. */
typedef struct prep_run {
    uint64_t addr, stride, len;
    void *h;
} prep_run_t;

#define PREP_RUN_MIN 32 /* shorter runs: the list is used as it is */
/* Requests of fewer pairs are not looked at for the indexed shape. */
#define ROWS_INDEXED_MIN 64

struct nixl_prep {
    nixl_agent_t *agent;
    int borrowed;            /* d is the agent's create_buf (nixl_xfer_create's own lists) */
    nixl_mem_t mem;
    int remote;
    nixl_peer_t *peer;
    nixl_peer_inc_t *inc;    /* remote: referenced */
    nixl_backend_t *backend; /* remote: chosen backend */
    uint32_t backend_mask;   /* local: backends holding every descriptor */
    uint64_t reg_epoch;
    size_t count;
    prep_desc_t *d;
    prep_run_t *runs;   /* NULL: not run-shaped */
    uint32_t run_len;   /* descriptors per run */
    uint64_t run_magic; /* UINT64_MAX / run_len + 1: i / run_len = (magic * i) >> 64 for 32-bit i */
};

/* Find p's runs (after every resolution: h may change). */
static void prep_runs_find(nixl_prep_t *p)
{
    free(p->runs);
    p->runs = NULL;
    const prep_desc_t *d = p->d;
    size_t n = p->count, c = 1;
    if (n < 2 * PREP_RUN_MIN || n > UINT32_MAX)
        return;
    uint64_t stride = d[1].addr - d[0].addr;
    while (c < n && d[c].len == d[0].len && d[c].h == d[0].h && d[c].addr - d[c - 1].addr == stride)
        c++;
    if (c < PREP_RUN_MIN)
        return;
    size_t nruns = (n + c - 1) / c;
    prep_run_t *runs = malloc(nruns * sizeof(*runs));
    if (!runs)
        return;
    for (size_t k = 0; k < nruns; k++) {
        size_t s = k * c, e = s + c < n ? s + c : n;
        uint64_t st = e - s > 1 ? d[s + 1].addr - d[s].addr : 0;
        for (size_t i = s + 1; i < e; i++)
            if (d[i].len != d[s].len || d[i].h != d[s].h || d[i].addr - d[i - 1].addr != st) {
                free(runs);
                return;
            }
        runs[k] = (prep_run_t){.addr = d[s].addr, .stride = st, .len = d[s].len, .h = d[s].h};
    }
    p->runs = runs;
    p->run_len = (uint32_t)c;
    p->run_magic = UINT64_MAX / c + 1;
}

/* Descriptor i of a run-shaped list. */
static inline prep_desc_t prep_run_desc(const prep_run_t *runs, uint32_t run_len, uint64_t magic, size_t i)
{
    __extension__ typedef unsigned __int128 u128;
    size_t q = (size_t)(((u128)magic * (uint32_t)i) >> 64);
    const prep_run_t *r = &runs[q];
    return (prep_desc_t){.addr = r->addr + (uint64_t)(i - q * run_len) * r->stride, .len = r->len, .h = r->h};
}

/* ---- backend choice ---- */

/* ---- preparing lists ---- */

/* The region of the previous descriptor is tried first (consecutive
 * descriptors almost always share one), its bounds held in locals: the
 * check is two compares, off = addr - base wrapping for addresses below. */
static nixl_status_t prep_resolve_local(nixl_prep_t *p, const nixl_desc_t *src)
{
    nixl_agent_t *a = p->agent;
    const nixl_region_index_t *idx = &a->regs[p->mem];
    nixl_region_t *last = NULL;
    uint64_t base = 0, size = 0;
    uint32_t mask = ~0u;
    prep_desc_t *d = p->d;
    for (size_t i = 0, n = p->count; i < n; i++) {
        uint64_t addr = src ? src[i].addr : d[i].addr;
        uint64_t len = src ? src[i].len : d[i].len;
        if (nixl_unlikely(len == 0)) {
            NIXL_ERROR("agent %s: descriptor %zu has length 0", a->name, i);
            return NIXL_ERR_ZERO_LENGTH;
        }
        uint64_t off = addr - base;
        if (nixl_unlikely(off >= size || len > size - off)) {
            nixl_region_t *r = nixl_region_find(idx, addr, len);
            if (nixl_unlikely(!r)) {
                NIXL_ERROR("agent %s: local descriptor %zu [0x%llx, +%llu) is not inside registered memory", a->name,
                           i, (unsigned long long)addr, (unsigned long long)len);
                return NIXL_ERR_NOT_REGISTERED;
            }
            last = r;
            base = r->addr;
            size = r->len;
            mask &= r->backend_mask;
        }
        d[i].addr = addr;
        d[i].len = len;
        d[i].h = last;
    }
    p->backend_mask = mask;
    p->reg_epoch = a->reg_epoch;
    prep_runs_find(p);
    return NIXL_OK;
}

/* Resolve every descriptor on backend slot bk; NIXL_ERR_NOT_REGISTERED with
 * *bad the first failing index. */
static nixl_status_t prep_resolve_remote(nixl_prep_t *p, const nixl_peer_backend_t *bk, const nixl_desc_t *src,
                                         size_t *bad)
{
    uint64_t base = 0, size = 0;
    void *rmd = NULL;
    prep_desc_t *d = p->d;
    for (size_t i = 0, n = p->count; i < n; i++) {
        uint64_t addr = src[i].addr, len = src[i].len;
        if (nixl_unlikely(len == 0)) {
            *bad = i;
            return NIXL_ERR_ZERO_LENGTH;
        }
        uint64_t off = addr - base;
        if (nixl_unlikely(off >= size || len > size - off)) {
            long r = nixl_peer_region_find(bk, p->mem, addr, len);
            if (r < 0) {
                *bad = i;
                return NIXL_ERR_NOT_REGISTERED;
            }
            base = bk->mdb->regions[r].addr;
            size = bk->mdb->regions[r].len;
            rmd = bk->rmd[r];
        }
        d[i].addr = addr;
        d[i].len = len;
        d[i].h = rmd;
    }
    return NIXL_OK;
}

/* The backends that may carry a request to inc with remote memory rmem,
 * in the order the two-step form tries them; their count. */
static int backend_order(nixl_agent_t *a, nixl_peer_inc_t *inc, const nixl_opt_args_t *opt, nixl_mem_t rmem,
                         const nixl_peer_backend_t **out)
{
    int n = 0;
    for (int rank = 0; rank <= 3; rank++)
        for (int b = 0; b < a->num_backends; b++) {
            const nixl_peer_backend_t *c = &inc->bk[b];
            if (c->backend && nixl_peer_backend_rank(c->backend, inc) == rank && nixl_opt_allows(opt, c->backend) &&
                (be_mem_types(c->backend) & NIXL_MEM_BIT(rmem)))
                out[n++] = c;
        }
    return n;
}

static nixl_status_t prep_choose_remote(nixl_prep_t *p, const nixl_dlist_t *dl, const nixl_opt_args_t *opt)
{
    nixl_agent_t *a = p->agent;
    nixl_status_t last_err = NIXL_ERR_NO_PATH;
    size_t bad = 0;
    const nixl_peer_backend_t *order[NIXL_AGENT_MAX_BACKENDS];
    int nb = backend_order(a, p->inc, opt, p->mem, order);
    for (int k = 0; k < nb; k++) {
        nixl_status_t st = prep_resolve_remote(p, order[k], dl->descs, &bad);
        if (st == NIXL_OK) {
            p->backend = order[k]->backend;
            prep_runs_find(p);
            return NIXL_OK;
        }
        last_err = st;
    }
    if (last_err == NIXL_ERR_NO_PATH)
        NIXL_ERROR("agent %s: no backend of this agent reaches peer %s with memory type %d", a->name, p->peer->name,
                   p->mem);
    else if (last_err == NIXL_ERR_ZERO_LENGTH)
        NIXL_ERROR("agent %s: remote descriptor %zu has length 0", a->name, bad);
    else
        NIXL_ERROR("agent %s: remote descriptor %zu [0x%llx, +%llu) is not inside memory peer %s registered", a->name,
                   bad, (unsigned long long)dl->descs[bad].addr, (unsigned long long)dl->descs[bad].len,
                   p->peer->name);
    return last_err;
}

/* ---- reused buffers ---- */

/* The agent's buffer b grown to at least `bytes` (contents not kept); NULL
 * when memory is short. */
static void *buf_reserve(struct nixl_buf *b, size_t bytes)
{
    if (b->cap >= bytes)
        return b->p;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < bytes)
        cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
    void *p = malloc(cap);
    if (!p)
        return NULL;
    free(b->p);
    b->p = p;
    b->cap = cap;
    return p;
}

/* A pieces array for n pieces: the smallest cached one that fits, else a
 * new one. */
static nixl_be_iov_t *iov_get(nixl_agent_t *a, size_t n, size_t *cap_out)
{
    if (n > SIZE_MAX / sizeof(nixl_be_iov_t))
        return NULL;
    size_t want = n * sizeof(nixl_be_iov_t);
    struct nixl_buf *best = NULL;
    for (int i = 0; i < NIXL_IOV_CACHE; i++) {
        struct nixl_buf *b = &a->iov_cache[i];
        if (b->p && b->cap >= want && (!best || b->cap < best->cap))
            best = b;
    }
    if (best) {
        nixl_be_iov_t *v = best->p;
        *cap_out = best->cap / sizeof(nixl_be_iov_t);
        best->p = NULL;
        best->cap = 0;
        return v;
    }
    *cap_out = n;
    return malloc(want);
}

/* Keep a released request's pieces array for the next request, within
 * the cache's bounds (the smallest kept one makes room for a larger one). */
static void iov_put(nixl_agent_t *a, nixl_be_iov_t *v, size_t cap)
{
    if (!v)
        return;
    size_t bytes = cap * sizeof(*v), held = 0;
    struct nixl_buf *empty = NULL, *smallest = NULL;
    for (int i = 0; i < NIXL_IOV_CACHE; i++) {
        struct nixl_buf *b = &a->iov_cache[i];
        if (!b->p) {
            if (!empty)
                empty = b;
            continue;
        }
        held += b->cap;
        if (!smallest || b->cap < smallest->cap)
            smallest = b;
    }
    struct nixl_buf *slot = empty;
    if (!slot && smallest->cap < bytes) {
        held -= smallest->cap;
        free(smallest->p);
        *smallest = (struct nixl_buf){0};
        slot = smallest;
    }
    if (!slot || held + bytes > NIXL_IOV_CACHE_BYTES) {
        free(v);
        return;
    }
    slot->p = v;
    slot->cap = bytes;
}

/* The peer a request names, with a current generation: the agent itself
 * (loopback: its own registrations are the remote side), or a loaded peer.
 * NULL (logged) with *st the reason. */
static nixl_peer_t *peer_resolve_locked(nixl_agent_t *a, const char *name, nixl_status_t *st)
{
    if (strcmp(name, a->name) == 0)
        return nixl_peer_self(a, st);
    nixl_peer_t *peer = nixl_peer_find(a, name);
    if (!peer) {
        NIXL_ERROR("agent %s: unknown peer '%s' (load its metadata first)", a->name, name);
        *st = NIXL_ERR_UNKNOWN_PEER;
        return NULL;
    }
    if (!peer->cur) {
        NIXL_ERROR("agent %s: peer '%s' was invalidated", a->name, name);
        *st = NIXL_ERR_PEER_INVALIDATED;
        return NULL;
    }
    return peer;
}

/* Files are the agent's own: FILE memory on either side of a request (or
 * in a remote list) that names another agent is refused, whatever that
 * agent's blob says (peers are never sent FILE regions, md_local.c, nor
 * load them, peer.c).  A storage request names the agent itself. */
static nixl_status_t files_are_local(const nixl_agent_t *a, const char *what, const char *peer, nixl_mem_t lmem,
                                     nixl_mem_t rmem)
{
    if (lmem != NIXL_MEM_FILE && rmem != NIXL_MEM_FILE)
        return NIXL_OK;
    NIXL_ERROR("agent %s: %s: FILE memory with peer '%s': files are local; a storage request names the agent itself "
               "('%s') as its peer",
               a->name, what, peer, a->name);
    return NIXL_ERR_MEM_TYPE;
}

static nixl_status_t prep_create_locked(nixl_agent_t *a, const char *peer, const nixl_dlist_t *dl,
                                        const nixl_opt_args_t *opt, struct nixl_buf *borrow, nixl_prep_t **out)
{
    if (peer && strcmp(peer, a->name) != 0 && dl->mem_type == NIXL_MEM_FILE)
        return files_are_local(a, "prepare", peer, NIXL_MEM_DRAM, dl->mem_type);
    nixl_prep_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NIXL_ERR_NO_MEMORY;
    p->agent = a;
    p->mem = dl->mem_type;
    p->count = dl->count;
    nixl_status_t st = NIXL_ERR_NO_MEMORY;
    if (dl->count > SIZE_MAX / sizeof(*p->d))
        goto err;
    p->borrowed = borrow != NULL;
    p->d = borrow ? buf_reserve(borrow, dl->count * sizeof(*p->d)) : malloc(dl->count * sizeof(*p->d));
    if (!p->d)
        goto err;
    if (!peer) {
        st = prep_resolve_local(p, dl->descs);
        if (st != NIXL_OK)
            goto err;
    } else {
        p->remote = 1;
        p->peer = peer_resolve_locked(a, peer, &st);
        if (!p->peer)
            goto err;
        if (p->peer == a->self_peer)
            p->reg_epoch = a->reg_epoch;
        p->inc = p->peer->cur;
        p->inc->refs++;
        st = prep_choose_remote(p, dl, opt);
        if (st != NIXL_OK)
            goto err;
    }
    *out = p;
    return NIXL_OK;
err:
    nixl_peer_inc_unref(p->inc);
    if (!p->borrowed)
        free(p->d);
    free(p->runs);
    free(p);
    return st;
}

static void prep_free_locked(nixl_prep_t *p)
{
    nixl_peer_inc_unref(p->inc);
    if (!p->borrowed)
        free(p->d);
    free(p->runs);
    free(p);
}

NIXL_API nixl_status_t nixl_prep_create(nixl_agent_t *agent, const char *peer, const nixl_dlist_t *dlist,
                                        const nixl_opt_args_t *opt, nixl_prep_t **prep_out)
{
    if (!agent || !prep_out)
        return NIXL_ERR_NULL;
    nixl_dlist_t k;
    nixl_desc_t *tmp;
    nixl_status_t st = nixl_dlist_file_keys(dlist, NIXL_FILE_KEYS_XFER, "prepare", &k, &tmp);
    if (st != NIXL_OK)
        return st;
    nixl_agent_lock(agent);
    st = prep_create_locked(agent, peer, &k, opt, NULL, prep_out);
    nixl_agent_unlock(agent);
    free(tmp);
    return st;
}

NIXL_API void nixl_prep_release(nixl_prep_t *prep)
{
    if (!prep)
        return;
    nixl_agent_t *a = prep->agent;
    nixl_agent_lock(a);
    prep_free_locked(prep);
    nixl_agent_unlock(a);
}

/* ---- making requests ---- */

static nixl_status_t opt_notif(const nixl_opt_args_t *opt, const void **msg, size_t *len)
{
    *msg = NULL;
    *len = 0;
    if (!opt || !(opt->field_mask & NIXL_OPT_NOTIF))
        return NIXL_OK;
    if (opt->notif_len > NIXL_NOTIF_MAX) {
        NIXL_ERROR("notification of %zu bytes exceeds NIXL_NOTIF_MAX (%d)", opt->notif_len, NIXL_NOTIF_MAX);
        return NIXL_ERR_TOO_BIG;
    }
    if (opt->notif_len && !opt->notif)
        return NIXL_ERR_NULL;
    *msg = opt->notif;
    *len = opt->notif_len;
    return NIXL_OK;
}

/* The context rule for requests: with local VRAM, every backend call on
 * the request runs with that memory's context (x->cuda_ctx) current, on any
 * thread; the doorway (be_call.h) binds it. */
static void xfer_backend_release(nixl_xfer_t *x)
{
    be_xfer_release(x->backend, x->cuda_ctx, x->req);
    x->req = NULL;
}

/* An indexed request in its own form: the layers' regions are the iov's
 * (revalidation may have changed the local ones). */
static nixl_status_t xfer_backend_prepare_indexed(nixl_xfer_t *x)
{
    nixl_xfer_ix_t *ix = x->ix;
    for (size_t l = 0; l < ix->layers; l++)
        ix->layer[l].lmd = x->iov[l].lmd;
    nixl_be_xfer_indexed_t bx = {x->op,         x->inc->bk[x->backend->index].peer,
                                 x->local_mem,  x->remote_mem,
                                 ix->layer,     ix->layers,
                                 ix->lslots,    ix->rslots,
                                 ix->nslots,    ix->lstride,
                                 ix->rstride,   ix->item,
                                 x->bytes};
    return be_xfer_prepare_indexed(x->backend, x->cuda_ctx, &bx, &x->req);
}

static nixl_status_t xfer_backend_prepare(nixl_xfer_t *x)
{
    nixl_status_t st;
    if (x->ix) {
        st = xfer_backend_prepare_indexed(x);
    } else {
        nixl_be_xfer_t bx = {x->op, x->inc->bk[x->backend->index].peer, x->local_mem, x->remote_mem,
                             x->iov, x->count, x->bytes};
        st = be_xfer_prepare(x->backend, x->cuda_ctx, &bx, &x->req);
    }
    if (st == NIXL_ERR_NOT_SUPPORTED && x->ix) {
        /* Not an error: the request is made again in pieces. */
        NIXL_DEBUG("agent %s: backend %s takes this indexed request in pieces", x->agent->name, be_name(x->backend));
        x->req = NULL;
        return st;
    }
    if (st != NIXL_OK) {
        NIXL_ERROR("agent %s: backend %s could not prepare a request to %s: %s", x->agent->name,
                   be_name(x->backend), x->peer->name, nixl_strerror(st));
        x->req = NULL;
        return st;
    }
    if (x->req->fallback && !nixl_cfg_bool("NIXL_ALLOW_FALLBACK")) {
        NIXL_ERROR("agent %s: request to %s would take fallback path %s, refused by NIXL_ALLOW_FALLBACK=0",
                   x->agent->name, x->peer->name, x->req->path ? x->req->path : "?");
        xfer_backend_release(x);
        return NIXL_ERR_NO_PATH;
    }
    return NIXL_OK;
}

/* local_idx and remote_idx: both NULL (identity) or neither. */
/* ---- building a request's pieces ----
 *
 * The hot loop of every request (221,184 descriptors for one KV request of
 * page size 1): pair descriptor l of the local list with r of the remote
 * one, check the pair, merge it into the previous piece when both sides
 * continue it in the same regions.  Everything the loop reads repeatedly
 * is in locals, so stores into the piece array cannot force reloads; the
 * local region's backend registration is looked up when the region
 * changes (consecutive descriptors almost always share it).  Returns the
 * index of the first bad pair, or count when every pair was good. */
#define CREQ_PREFETCH 16

static inline __attribute__((always_inline)) size_t
iovs_build_at(const nixl_prep_t *lp, const uint32_t *li, const nixl_prep_t *rp, const uint32_t *ri, const int lruns,
              const int rruns, size_t count, int bi, nixl_be_iov_t *iov, size_t *n_out, uint64_t *bytes_out)
{
    const prep_desc_t *ld = lp->d, *rd = rp->d;
    const size_t lc = lp->count, rc = rp->count;
    const prep_run_t *lrun = lp->runs, *rrun = rp->runs;
    const uint32_t llen = lp->run_len, rlen = rp->run_len;
    const uint64_t lmag = lp->run_magic, rmag = rp->run_magic;
    size_t n = 0;
    uint64_t bytes = 0, lend = 0, rend = 0;
    const void *last_h = NULL;
    void *lmd = NULL, *prmd = NULL, *plmd = NULL;
    nixl_be_iov_t *cur = iov; /* written before it is read: the first pair has plmd NULL */
    for (size_t i = 0; i < count; i++) {
        size_t l = li ? li[i] : i, r = li ? ri[i] : i;
        if (nixl_unlikely((l >= lc) | (r >= rc)))
            return i;
        /* Index arrays are block ids in no order (vLLM's): each pair is two
         * loads from anywhere in the lists, so fetch a few pairs ahead. */
        if (li && !(lruns && rruns)) {
            /* Integer arithmetic: an index out of range (refused at its
             * turn) only prefetches a useless line.  A run-shaped side
             * loads nothing. */
            size_t j = i + CREQ_PREFETCH < count ? i + CREQ_PREFETCH : i;
            if (!lruns)
                __builtin_prefetch((const void *)((uintptr_t)ld + (uintptr_t)li[j] * sizeof(*ld)));
            if (!rruns)
                __builtin_prefetch((const void *)((uintptr_t)rd + (uintptr_t)ri[j] * sizeof(*rd)));
        }
        const prep_desc_t L = lruns ? prep_run_desc(lrun, llen, lmag, l) : ld[l];
        const prep_desc_t R = rruns ? prep_run_desc(rrun, rlen, rmag, r) : rd[r];
        uint64_t la = L.addr, ra = R.addr, len = L.len;
        void *rmd = R.h;
        if (nixl_unlikely(len != R.len))
            return i;
        if (nixl_unlikely(L.h != last_h)) {
            last_h = L.h;
            lmd = ((const nixl_region_t *)last_h)->md[bi];
        }
        bytes += len;
        /* Merging is the exception with paged KV (slots are scattered). */
        if (nixl_unlikely(lend == la) && rend == ra && plmd == lmd && prmd == rmd && n) {
            cur->len += len;
        } else {
            cur = &iov[n++];
            cur->laddr = la;
            cur->raddr = ra;
            cur->len = len;
            cur->lmd = lmd;
            cur->rmd = rmd;
            plmd = lmd;
            prmd = rmd;
        }
        lend = la + len;
        rend = ra + len;
    }
    *n_out = n;
    *bytes_out = bytes;
    return count;
}

/* Both lists run-shaped (vLLM's lists of every block: one run per layer):
 * descriptor k of a side is its run's base + (k - first) x stride, so a
 * pair costs its two indices, their bounds, whether each is still in the
 * run of the previous pair (index arrays walk a layer's blocks before the
 * next layer's), and the piece written.  A side that changes run loads
 * that run; the lengths of the two runs must then agree. */
static size_t iovs_build_runs(const nixl_prep_t *lp, const uint32_t *li, const nixl_prep_t *rp, const uint32_t *ri,
                              size_t count, int bi, nixl_be_iov_t *iov, size_t *n_out, uint64_t *bytes_out)
{
    /* The runs of the previous pair: descriptors [first, first + n) (none
     * yet).  An index outside them, in range or not, takes the slow way. */
    uint64_t lfirst = 0, rfirst = 0, ln = 0, rn = 0, lbase = 0, rbase = 0, lst = 0, rst = 0, len = 0, bytes = 0;
    void *lmd = NULL, *rmd = NULL;
    nixl_be_iov_t *end = iov;
    uint64_t lend = ~0ull, rend = ~0ull; /* where the last piece ends: none yet */
    for (size_t i = 0; i < count; i++) {
        const uint64_t l = li[i], r = ri[i];
        uint64_t lo = l - lfirst, ro = r - rfirst;
        if (nixl_unlikely((lo >= ln) | (ro >= rn))) {
            if ((l >= lp->count) | (r >= rp->count))
                return i;
            const uint64_t lrl = lp->run_len, rrl = rp->run_len;
            const prep_run_t *lrun = &lp->runs[l / lrl], *rrun = &rp->runs[r / rrl];
            if (lrun->len != rrun->len)
                return i;
            lfirst = l - l % lrl;
            rfirst = r - r % rrl;
            ln = lp->count - lfirst < lrl ? lp->count - lfirst : lrl;
            rn = rp->count - rfirst < rrl ? rp->count - rfirst : rrl;
            lo = l - lfirst;
            ro = r - rfirst;
            lbase = lrun->addr;
            lst = lrun->stride;
            rbase = rrun->addr;
            rst = rrun->stride;
            len = lrun->len;
            lmd = ((const nixl_region_t *)lrun->h)->md[bi];
            rmd = rrun->h;
            lend = rend = ~0ull;
        }
        const uint64_t la = lbase + lo * lst, ra = rbase + ro * rst;
        bytes += len;
        if (nixl_unlikely(la == lend) && ra == rend)
            end[-1].len += len;
        else
            *end++ = (nixl_be_iov_t){.laddr = la, .raddr = ra, .len = len, .lmd = lmd, .rmd = rmd};
        lend = la + len;
        rend = ra + len;
    }
    *n_out = (size_t)(end - iov);
    *bytes_out = bytes;
    return count;
}

/* One instance per shape, so the compiler drops what a shape does not
 * need: the index loads of the identity form (the two-step
 * nixl_xfer_create pairs descriptor i with descriptor i), the loads of a
 * run-shaped side, the run lookup and the length and region checks of
 * two lists of one run each (one layer's blocks on each side). */
static size_t iovs_build(const nixl_prep_t *lp, const uint32_t *li, const nixl_prep_t *rp, const uint32_t *ri,
                         size_t count, int bi, nixl_be_iov_t *iov, size_t *n_out, uint64_t *bytes_out)
{
    if (lp->runs && rp->runs)
        return iovs_build_runs(lp, li, rp, ri, count, bi, iov, n_out, bytes_out);
    if (lp->runs)
        return iovs_build_at(lp, li, rp, ri, 1, 0, count, bi, iov, n_out, bytes_out);
    if (rp->runs)
        return iovs_build_at(lp, li, rp, ri, 0, 1, count, bi, iov, n_out, bytes_out);
    return iovs_build_at(lp, li, rp, ri, 0, 0, count, bi, iov, n_out, bytes_out);
}

static size_t iovs_build_identity(const nixl_prep_t *lp, const nixl_prep_t *rp, size_t count, int bi,
                                  nixl_be_iov_t *iov, size_t *n_out, uint64_t *bytes_out)
{
    return iovs_build_at(lp, NULL, rp, NULL, 0, 0, count, bi, iov, n_out, bytes_out);
}

/* Why pair i was refused, logged; its status. */
static nixl_status_t iovs_explain(nixl_agent_t *a, const nixl_prep_t *lp, const uint32_t *li, const nixl_prep_t *rp,
                                  const uint32_t *ri, size_t i)
{
    size_t l = li ? li[i] : i, r = ri ? ri[i] : i;
    if (l >= lp->count || r >= rp->count) {
        NIXL_ERROR("agent %s: make: index pair %zu (%zu, %zu) out of range (%zu, %zu)", a->name, i, l, r,
                   lp->count, rp->count);
        return NIXL_ERR_INVALID_PARAM;
    }
    NIXL_ERROR("agent %s: make: pair %zu: local length %llu != remote length %llu", a->name, i,
               (unsigned long long)lp->d[l].len, (unsigned long long)rp->d[r].len);
    return NIXL_ERR_LENGTH_MISMATCH;
}

static nixl_status_t xfer_setup_locked(nixl_agent_t *a, nixl_xfer_t *x, nixl_op_t op, nixl_backend_t *b,
                                       nixl_peer_t *peer, nixl_peer_inc_t *inc, nixl_mem_t local_mem,
                                       nixl_mem_t remote_mem, void *cuda_ctx, const nixl_opt_args_t *opt,
                                       const void *notif, size_t notif_len, nixl_xfer_t **out);

static int xfer_make_indexed(nixl_agent_t *a, nixl_op_t op, const nixl_prep_t *lp, const uint32_t *li,
                             const nixl_prep_t *rp, const uint32_t *ri, size_t count, const nixl_opt_args_t *opt,
                             const void *notif, size_t notif_len, nixl_status_t *st_out, nixl_xfer_t **out);

static nixl_status_t xfer_make_locked(nixl_agent_t *a, nixl_op_t op, nixl_prep_t *lp, const uint32_t *li,
                                      const nixl_prep_t *rp, const uint32_t *ri, size_t count,
                                      const nixl_opt_args_t *opt, nixl_xfer_t **out)
{
    if (lp->agent != a || rp->agent != a || lp->remote || !rp->remote) {
        NIXL_ERROR("agent %s: make: the local list must be prepared with peer NULL, the remote one with a peer, "
                   "both on this agent", a->name);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (op != NIXL_OP_READ && op != NIXL_OP_WRITE) {
        NIXL_ERROR("agent %s: make: op %d is neither READ nor WRITE", a->name, (int)op);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (count == 0) {
        NIXL_ERROR("agent %s: make: no descriptors", a->name);
        return NIXL_ERR_ZERO_LENGTH;
    }
    if (rp->peer == a->self_peer) {
        /* Loopback: a newer generation of the agent itself only adds
         * registrations; a removed one makes the remote list stale. */
        if (rp->reg_epoch != a->reg_epoch) {
            NIXL_ERROR("agent %s: make: a registration of this agent was removed since the loopback list was "
                       "prepared: prepare it again",
                       a->name);
            return NIXL_ERR_STALE;
        }
    } else if (rp->peer->cur != rp->inc) {
        NIXL_ERROR("agent %s: make: peer %s was %s since the remote list was prepared", a->name, rp->peer->name,
                   rp->peer->cur ? "reloaded" : "invalidated");
        return rp->peer->cur ? NIXL_ERR_STALE : NIXL_ERR_PEER_INVALIDATED;
    } else if (lp->mem == NIXL_MEM_FILE || rp->mem == NIXL_MEM_FILE) {
        return files_are_local(a, "make", rp->peer->name, lp->mem, rp->mem);
    }
    if (lp->reg_epoch != a->reg_epoch) {
        nixl_status_t st = prep_resolve_local(lp, NULL);
        if (st != NIXL_OK)
            return st;
    }
    nixl_backend_t *b = rp->backend;
    if (!(lp->backend_mask & (1u << b->index))) {
        NIXL_ERROR("agent %s: local memory of this request is not registered with backend %s", a->name,
                   be_name(b));
        return NIXL_ERR_NOT_REGISTERED;
    }
    const void *notif;
    size_t notif_len;
    nixl_status_t st = opt_notif(opt, &notif, &notif_len);
    if (st != NIXL_OK)
        return st;
    if (li && count >= ROWS_INDEXED_MIN && lp->runs && rp->runs && be_can_indexed(b) &&
        xfer_make_indexed(a, op, lp, li, rp, ri, count, opt, notif, notif_len, &st, out))
        return st;

    nixl_xfer_t *x = calloc(1, sizeof(*x));
    if (!x)
        return NIXL_ERR_NO_MEMORY;
    x->iov = iov_get(a, count, &x->iov_cap);
    if (!x->iov) {
        free(x);
        return NIXL_ERR_NO_MEMORY;
    }
    size_t n = 0;
    uint64_t bytes = 0;
    size_t bad = li ? iovs_build(lp, li, rp, ri, count, b->index, x->iov, &n, &bytes)
                    : iovs_build_identity(lp, rp, count, b->index, x->iov, &n, &bytes);
    if (nixl_unlikely(bad != count)) {
        st = iovs_explain(a, lp, li, rp, ri, bad);
        iov_put(a, x->iov, x->iov_cap);
        free(x);
        return st;
    }
    x->count = n;
    x->descs_in = count;
    x->bytes = bytes;
    void *ctx = lp->mem == NIXL_MEM_VRAM ? ((const nixl_region_t *)lp->d[li ? li[0] : 0].h)->cuda.ctx : NULL;
    return xfer_setup_locked(a, x, op, b, rp->peer, rp->inc, lp->mem, rp->mem, ctx, opt, notif, notif_len, out);
}

/* The rest of making a request once its pieces are in x (iov, count,
 * descs_in, bytes): what it is, its notification, the backend's prepare,
 * the agent's list.  On failure x and its pieces are freed. */
static nixl_status_t xfer_setup_locked(nixl_agent_t *a, nixl_xfer_t *x, nixl_op_t op, nixl_backend_t *b,
                                       nixl_peer_t *peer, nixl_peer_inc_t *inc, nixl_mem_t local_mem,
                                       nixl_mem_t remote_mem, void *cuda_ctx, const nixl_opt_args_t *opt,
                                       const void *notif, size_t notif_len, nixl_xfer_t **out)
{
    nixl_status_t st;
    x->agent = a;
    x->op = op;
    x->backend = b;
    x->peer = peer;
    x->inc = inc;
    x->inc->refs++;
    x->local_mem = local_mem;
    x->remote_mem = remote_mem;
    x->reg_epoch = a->reg_epoch;
    x->timeout_ns = opt && (opt->field_mask & NIXL_OPT_TIMEOUT_MS) ? (uint64_t)opt->timeout_ms * 1000000ull
                                                                   : a->xfer_timeout_ns;
    x->cuda_ctx = cuda_ctx;
    x->niov = x->ix ? x->ix->layers : x->count;
    if (notif_len) {
        x->notif = malloc(notif_len);
        if (!x->notif) {
            st = NIXL_ERR_NO_MEMORY;
            goto err_unref;
        }
        memcpy(x->notif, notif, notif_len);
        x->notif_len = notif_len;
    } else if (opt && (opt->field_mask & NIXL_OPT_NOTIF)) {
        /* An empty notification is still a notification. */
        x->notif = malloc(1);
        if (!x->notif) {
            st = NIXL_ERR_NO_MEMORY;
            goto err_unref;
        }
    }
    st = xfer_backend_prepare(x);
    if (st != NIXL_OK)
        goto err_unref;
    x->next = a->xfers;
    if (a->xfers)
        a->xfers->prev = x;
    a->xfers = x;
    *out = x;
    return NIXL_OK;
err_unref:
    nixl_peer_inc_unref(x->inc);
    free(x->notif);
    iov_put(a, x->iov, x->iov_cap);
    free(x->ix);
    free(x);
    return st;
}

NIXL_API nixl_status_t nixl_xfer_make(nixl_agent_t *agent, nixl_op_t op, const nixl_prep_t *local,
                                      const uint32_t *local_idx, const nixl_prep_t *remote,
                                      const uint32_t *remote_idx, size_t count, const nixl_opt_args_t *opt,
                                      nixl_xfer_t **xfer_out)
{
    if (!agent || !local || !remote || !xfer_out || (count && (!local_idx || !remote_idx)))
        return NIXL_ERR_NULL;
    nixl_agent_lock(agent);
    /* The local prep may be re-resolved after a deregistration: that only
     * refreshes its cache, it stays the same list. */
    nixl_status_t st =
        xfer_make_locked(agent, op, (nixl_prep_t *)local, local_idx, remote, remote_idx, count, opt, xfer_out);
    nixl_agent_unlock(agent);
    return st;
}

/* ---- requests built in one pass ----
 *
 * nixl_xfer_create of two lists (SGLang's request: 221,184 fresh pairs)
 * and the indexed request resolve both sides and build the pieces in one
 * pass, with no resolved lists in between: the pass costs what reading
 * (or computing) the pairs costs.  Each pair is resolved against the
 * regions of the previous pair first. */
typedef struct piece_acc {
    const nixl_region_index_t *idx; /* local regions */
    const nixl_peer_backend_t *bk;  /* the backend and its view of the peer */
    nixl_mem_t rmem;
    int bi;
    uint64_t lbase, lsize, rbase, rsize, lnext, rnext, bytes;
    /* The fast test: a piece of length plen lies inside the current
     * regions when its offsets from their bases are below lcnt and rcnt
     * (size - plen + 1, the starts that fit; 0 before the first piece,
     * which nothing is below). */
    uint64_t plen, lcnt, rcnt;
    void *lmd, *rmd;
    nixl_be_iov_t *iov;
    nixl_be_iov_t *end; /* the next piece to write */
    int high; /* a region reached ends above 2^63 (rows of int64 must then be read for signs) */
} piece_acc_t;

enum { PIECE_OK, PIECE_LOCAL, PIECE_REMOTE };

static void piece_acc_init(piece_acc_t *p, nixl_agent_t *a, nixl_mem_t lmem, nixl_mem_t rmem,
                           const nixl_peer_backend_t *bk, nixl_be_iov_t *iov)
{
    *p = (piece_acc_t){.idx = &a->regs[lmem], .bk = bk, .rmem = rmem, .bi = bk->backend->index,
                       .lnext = ~0ull, .rnext = ~0ull, .iov = iov, .end = iov};
}

/* Whether [a, a + len) with len >= 1 lies inside [base, base + size), in
 * one test: a region ends at or below 2^64 - 1 (registration and the
 * metadata decoder refuse wrapping ranges), so an address below base
 * gives an offset of at least size, and a zero len fails too (its
 * len - 1 is 2^64 - 1, never below a size). */
static inline int piece_outside(uint64_t a, uint64_t len, uint64_t base, uint64_t size)
{
    uint64_t off = a - base, last = off + (len - 1);
    return (last < off) | (last >= size);
}

/* Add one pair (len 0 is refused as PIECE_LOCAL).  A piece continues the
 * previous one when both addresses are where the previous one ended and
 * neither side changed region (a region change sets the ends to ~0,
 * which no address equals).
 * PIECE_LOCAL: la is not in a region registered with the backend;
 * PIECE_REMOTE: ra is not in the backend's view of the peer. */
static int piece_regions(piece_acc_t *p, uint64_t la, uint64_t ra, uint64_t len);

static inline __attribute__((always_inline)) int piece_add(piece_acc_t *p, uint64_t la, uint64_t ra, uint64_t len)
{
    /* Pieces of paged KV have one length and stay in their regions: one
     * compare for the length and one per side. */
    if (nixl_unlikely(len != p->plen || la - p->lbase >= p->lcnt || ra - p->rbase >= p->rcnt)) {
        int why = piece_regions(p, la, ra, len);
        if (why != PIECE_OK)
            return why;
    }
    p->bytes += len;
    /* Merging is the exception with paged KV (slots are scattered). */
    if (nixl_unlikely(la == p->lnext && ra == p->rnext))
        p->end[-1].len += len;
    else
        *p->end++ = (nixl_be_iov_t){.laddr = la, .raddr = ra, .len = len, .lmd = p->lmd, .rmd = p->rmd};
    p->lnext = la + len;
    p->rnext = ra + len;
    return PIECE_OK;
}

/* The slow way of piece_add: the regions of a piece that left the
 * current ones (or has another length), looked up; the fast test set up
 * for its length. */
static int piece_regions(piece_acc_t *p, uint64_t la, uint64_t ra, uint64_t len)
{
    if (piece_outside(la, len, p->lbase, p->lsize)) {
        if (len == 0)
            return PIECE_LOCAL;
        const nixl_region_t *r = nixl_region_find(p->idx, la, len);
        if (!r || !(r->backend_mask & (1u << p->bi)))
            return PIECE_LOCAL;
        p->lbase = r->addr;
        p->lsize = r->len;
        p->lmd = r->md[p->bi];
        p->lnext = ~0ull;
        p->high |= (int)((r->addr + r->len - 1) >> 63);
    }
    if (nixl_unlikely(piece_outside(ra, len, p->rbase, p->rsize))) {
        long r = nixl_peer_region_find(p->bk, p->rmem, ra, len);
        if (r < 0)
            return PIECE_REMOTE;
        p->rbase = p->bk->mdb->regions[r].addr;
        p->rsize = p->bk->mdb->regions[r].len;
        p->rmd = p->bk->rmd[r];
        p->lnext = p->rnext = ~0ull; /* no merge across regions: pieces_pass tests lnext first */
        p->high |= (int)((p->rbase + p->rsize - 1) >> 63);
    }
    /* Both inside (len >= 1, no larger than either region). */
    p->plen = len;
    p->lcnt = p->lsize - len + 1;
    p->rcnt = p->rsize - len + 1;
    return PIECE_OK;
}

/* A request from pieces already in x->iov (n of them, from `pairs` pairs): the rest of making it. */
static nixl_status_t xfer_from_pieces(nixl_agent_t *a, nixl_xfer_t *x, const piece_acc_t *p, size_t pairs,
                                      nixl_op_t op, nixl_peer_t *peer, nixl_peer_inc_t *inc, nixl_mem_t lmem,
                                      const nixl_opt_args_t *opt, const void *notif, size_t notif_len,
                                      nixl_xfer_t **out)
{
    x->count = (size_t)(p->end - p->iov);
    x->descs_in = pairs;
    x->bytes = p->bytes;
    /* With VRAM, the context of the first local piece (the two-step form's choice). */
    void *ctx = lmem == NIXL_MEM_VRAM ? nixl_region_find(p->idx, x->iov[0].laddr, x->iov[0].len)->cuda.ctx : NULL;
    return xfer_setup_locked(a, x, op, p->bk->backend, peer, inc, lmem, p->rmem, ctx, opt, notif, notif_len, out);
}

/* nixl_xfer_create in one pass on the backend the two-step form would try
 * first.  When a remote descriptor is not inside that backend's view of
 * the peer (another backend may hold it), the request is made the
 * two-step way, which tries them all and says why none fits. */
typedef enum { FUSED_DONE, FUSED_TWO_STEP } fused_t;

/* One side of a one-shot request as its passes read it: descriptor i's
 * address, length and device are the words w[i * stride + 0, 1, 2].  A
 * nixl_desc_t list is stride 4 (its device word also holds meta_len, never
 * looked at); rows (nixl_xfer_create_rows) are stride >= 3 and checked as
 * they are read: no field with `sign` set, no device id of 2^32 or more. */
typedef struct {
    nixl_mem_t mem;
    const uint64_t *w;
    size_t stride;
    int rows;
    uint64_t sign; /* rows of int64: 1 << 63 */
} side_t;

#define DEV_HI 0xffffffff00000000ull

static side_t side_of_dlist(const nixl_dlist_t *d)
{
    /* nixl_desc_t is four 64-bit words: addr, len, dev_id | meta_len, meta. */
    _Static_assert(sizeof(nixl_desc_t) == 4 * sizeof(uint64_t) && offsetof(nixl_desc_t, len) == 8,
                   "nixl_desc_t is read as 4 words");
    return (side_t){d->mem_type, (const uint64_t *)(const void *)d->descs, 4, 0, 0};
}

/* The first refused row of rows side s (count rows), or count. */
static size_t rows_first_bad(const side_t *s, size_t count)
{
    if (!s->rows)
        return count;
    for (size_t i = 0; i < count; i++) {
        const uint64_t *r = s->w + i * s->stride;
        if (((r[0] | r[1] | r[2]) & s->sign) || (r[2] & DEV_HI))
            return i;
    }
    return count;
}

/* INVALID_PARAM (logged, naming the row) when a row of side s is refused, else NIXL_OK. */
static nixl_status_t rows_check_side(nixl_agent_t *a, const char *side, const side_t *s, size_t count)
{
    size_t i = rows_first_bad(s, count);
    if (i == count)
        return NIXL_OK;
    const uint64_t *r = s->w + i * s->stride;
    char row[96];
    snprintf(row, sizeof(row), s->sign ? "%lld, %lld, %lld" : "%llu, %llu, %llu", (unsigned long long)r[0],
             (unsigned long long)r[1], (unsigned long long)r[2]);
    NIXL_ERROR("agent %s: transfer: %s row %zu (%s): %s", a->name, side, i, row,
               ((r[0] | r[1] | r[2]) & s->sign) ? "a field is negative" : "device id out of range");
    return NIXL_ERR_INVALID_PARAM;
}

static nixl_status_t rows_check(nixl_agent_t *a, const side_t *L, const side_t *R, size_t count)
{
    nixl_status_t st = rows_check_side(a, "local", L, count);
    return st != NIXL_OK ? st : rows_check_side(a, "remote", R, count);
}

/* The pieces pass: pairs [0, count) into p, reading descriptor words at
 * strides ls / rs (constants where inlined); chk: OR the rows' device
 * words into *dev.  A row whose piece lies inside a region below 2^63
 * has no address or length with the sign bit set, so only the device
 * word needs reading for the rows' check (p->high says when it is not
 * enough).  The index of the first pair that stopped it (count: none)
 * and *why. */
static inline __attribute__((always_inline)) size_t pieces_pass(piece_acc_t *p, const uint64_t *lw, size_t ls,
                                                                 const uint64_t *rw, size_t rs, size_t count,
                                                                 const int chk, int *why, uint64_t *dev)
{
    /* piece_add with its state in locals (p's address escapes to
     * piece_regions, so its fields would be loaded and stored per pair),
     * written back around the slow way.  A piece continues the previous
     * one only when its local address is where that one ended (rare with
     * scattered slots); only then is the remote end read, from the piece. */
    uint64_t d_acc = 0, plen = p->plen, lbase = p->lbase, lcnt = p->lcnt, rbase = p->rbase, rcnt = p->rcnt;
    uint64_t lnext = p->lnext, bytes = p->bytes;
    void *lmd = p->lmd, *rmd = p->rmd;
    nixl_be_iov_t *end = p->end;
    int w = PIECE_OK;
    const uint64_t *l = lw, *r = rw, *const lstop = lw + count * ls;
    for (; l != lstop; l += ls, r += rs) {
        const uint64_t len = l[1], la = l[0], ra = r[0];
        if (chk)
            d_acc |= l[2] | r[2];
        if (nixl_unlikely(len != r[1]))
            break;
        if (nixl_unlikely(len != plen || la - lbase >= lcnt || ra - rbase >= rcnt)) {
            p->lnext = lnext;
            w = piece_regions(p, la, ra, len);
            if (nixl_unlikely(w != PIECE_OK))
                break;
            plen = p->plen;
            lbase = p->lbase;
            lcnt = p->lcnt;
            rbase = p->rbase;
            rcnt = p->rcnt;
            lnext = p->lnext;
            lmd = p->lmd;
            rmd = p->rmd;
        }
        bytes += len;
        if (nixl_unlikely(la == lnext) && end[-1].raddr + end[-1].len == ra)
            end[-1].len += len;
        else
            *end++ = (nixl_be_iov_t){.laddr = la, .raddr = ra, .len = len, .lmd = lmd, .rmd = rmd};
        lnext = la + len;
    }
    p->lnext = lnext;
    p->rnext = end > p->iov ? end[-1].raddr + end[-1].len : ~0ull;
    p->bytes = bytes;
    p->end = end;
    *why = w;
    if (chk)
        *dev = d_acc;
    return (size_t)(l - lw) / ls;
}

static int xfer_create_rows_indexed(nixl_agent_t *a, nixl_op_t op, const side_t *L, const side_t *R, size_t count,
                                    nixl_peer_t *peer, const nixl_peer_backend_t *bk, const nixl_opt_args_t *opt,
                                    const void *notif, size_t notif_len, nixl_status_t *st_out, nixl_xfer_t **out);

static fused_t xfer_create_fused(nixl_agent_t *a, nixl_op_t op, const side_t *L, const side_t *R, size_t count,
                                 nixl_peer_t *peer, const nixl_opt_args_t *opt, nixl_status_t *st_out,
                                 nixl_xfer_t **out)
{
    nixl_peer_inc_t *inc = peer->cur;
    const nixl_peer_backend_t *order[NIXL_AGENT_MAX_BACKENDS];
    if (backend_order(a, inc, opt, R->mem, order) == 0)
        return FUSED_TWO_STEP;
    const void *notif;
    size_t notif_len;
    nixl_status_t st = opt_notif(opt, &notif, &notif_len);
    if (st != NIXL_OK) {
        *st_out = st;
        return FUSED_DONE;
    }
    if (count >= ROWS_INDEXED_MIN && be_can_indexed(order[0]->backend) &&
        xfer_create_rows_indexed(a, op, L, R, count, peer, order[0], opt, notif, notif_len, st_out, out))
        return FUSED_DONE;
    nixl_xfer_t *x = calloc(1, sizeof(*x));
    if (x)
        x->iov = iov_get(a, count, &x->iov_cap);
    if (!x || !x->iov) {
        free(x);
        *st_out = NIXL_ERR_NO_MEMORY;
        return FUSED_DONE;
    }
    piece_acc_t p;
    piece_acc_init(&p, a, L->mem, R->mem, order[0], x->iov);
    int why;
    uint64_t dev = 0;
    size_t i;
    if (!L->rows)
        i = pieces_pass(&p, L->w, 4, R->w, 4, count, 0, &why, &dev);
    else if (L->stride == 3 && R->stride == 3)
        i = pieces_pass(&p, L->w, 3, R->w, 3, count, 1, &why, &dev);
    else
        i = pieces_pass(&p, L->w, L->stride, R->w, R->stride, count, 1, &why, &dev);
    int bad = L->rows && ((dev & DEV_HI) || (p.high && (L->sign | R->sign) &&
                                             (rows_first_bad(L, count) < count || rows_first_bad(R, count) < count)));
    if (i == count && !bad) {
        *st_out = xfer_from_pieces(a, x, &p, count, op, peer, inc, L->mem, opt, notif, notif_len, out);
        return FUSED_DONE;
    }
    iov_put(a, x->iov, x->iov_cap);
    free(x);
    /* A refused row is the error, whatever else stopped the pass. */
    if ((st = rows_check(a, L, R, count)) != NIXL_OK) {
        *st_out = st;
        return FUSED_DONE;
    }
    if (why == PIECE_REMOTE)
        return FUSED_TWO_STEP;
    const uint64_t *ld = L->w + i * L->stride, *rd = R->w + i * R->stride;
    if (ld[1] == 0 || rd[1] == 0) {
        NIXL_ERROR("agent %s: transfer: descriptor pair %zu has length 0", a->name, i);
        st = NIXL_ERR_ZERO_LENGTH;
    } else if (ld[1] != rd[1]) {
        NIXL_ERROR("agent %s: transfer: pair %zu: local length %llu != remote length %llu", a->name, i,
                   (unsigned long long)ld[1], (unsigned long long)rd[1]);
        st = NIXL_ERR_LENGTH_MISMATCH;
    } else if (!nixl_region_find(p.idx, ld[0], ld[1])) {
        NIXL_ERROR("agent %s: local descriptor %zu [0x%llx, +%llu) is not inside registered memory", a->name, i,
                   (unsigned long long)ld[0], (unsigned long long)ld[1]);
        st = NIXL_ERR_NOT_REGISTERED;
    } else {
        NIXL_ERROR("agent %s: local memory of this request is not registered with backend %s", a->name,
                   be_name(p.bk->backend));
        st = NIXL_ERR_NOT_REGISTERED;
    }
    *st_out = st;
    return FUSED_DONE;
}

/* ---- indexed requests ---- */

/* A side's smallest and largest slot. */
typedef struct {
    uint32_t min, max;
} slot_range_t;

/* NIXL_ERR_INVALID_PARAM (logged) when the span a side's slots reach from
 * a base (max slot x stride + item) overflows, from any base. */
static nixl_status_t indexed_span_check(nixl_agent_t *a, const char *side, const nixl_indexed_t *s, size_t nslots,
                                        uint64_t item, slot_range_t *range)
{
    uint32_t min = UINT32_MAX, max = 0;
    for (size_t t = 0; t < nslots; t++) {
        uint32_t v = s->slots[t];
        min = v < min ? v : min;
        max = v > max ? v : max;
    }
    *range = (slot_range_t){min, max};
    if (s->stride && (uint64_t)max > (UINT64_MAX - item) / s->stride) {
        NIXL_ERROR("agent %s: indexed request: %s slot %u x stride %llu overflows", a->name, side, max,
                   (unsigned long long)s->stride);
        return NIXL_ERR_INVALID_PARAM;
    }
    uint64_t span = (uint64_t)max * s->stride + item;
    for (size_t l = 0; l < s->layers; l++)
        if (s->bases[l] > UINT64_MAX - span) {
            NIXL_ERROR("agent %s: indexed request: %s layer %zu: base 0x%llx + slot %u x stride %llu overflows",
                       a->name, side, l, (unsigned long long)s->bases[l], max, (unsigned long long)s->stride);
            return NIXL_ERR_INVALID_PARAM;
        }
    return NIXL_OK;
}

static nixl_status_t indexed_check(nixl_agent_t *a, const char *side, const nixl_indexed_t *s)
{
    if (!s->bases || !s->slots) {
        NIXL_ERROR("agent %s: indexed request: %s bases or slots NULL", a->name, side);
        return NIXL_ERR_NULL;
    }
    if ((unsigned)s->mem_type >= NIXL_MEM_TYPE_COUNT) {
        NIXL_ERROR("agent %s: indexed request: %s memory type %d is not a nixl_mem_t", a->name, side,
                   (int)s->mem_type);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (s->mem_type == NIXL_MEM_FILE) {
        NIXL_ERROR("agent %s: indexed request: %s memory is FILE: indexed requests move memory, files go by lists",
                   a->name, side);
        return NIXL_ERR_MEM_TYPE;
    }
    return NIXL_OK;
}

/* Pieces (l, t) = (local base l + local slot t x stride, remote ...), layer-major, on backend bk. */
static int indexed_build(piece_acc_t *p, const nixl_indexed_t *L, const nixl_indexed_t *R, size_t nslots,
                         uint64_t item, size_t *bad)
{
    const uint32_t *ls = L->slots, *rs = R->slots;
    const uint64_t lst = L->stride, rst = R->stride;
    for (size_t l = 0; l < L->layers; l++) {
        const uint64_t lb = L->bases[l], rb = R->bases[l];
        for (size_t t = 0; t < nslots; t++) {
            int why = piece_add(p, lb + (uint64_t)ls[t] * lst, rb + (uint64_t)rs[t] * rst, item);
            if (nixl_unlikely(why != PIECE_OK)) {
                *bad = l * nslots + t;
                return why;
            }
        }
    }
    return PIECE_OK;
}

/* ---- the indexed form itself (xfer_prepare_indexed) ----
 *
 * When every layer's span on each side (from its smallest slot's piece to
 * its largest's) lies inside one registration, every piece of the layer
 * does: the request is checked with one lookup per layer and side, and
 * its host work is its layers and slots.  Otherwise (a layer across
 * regions, or the backend declines) it is built in pieces. */
typedef enum { NATIVE_DONE, NATIVE_PIECES } native_t;

/* The arrays of an indexed request in one block (freed with free()): its
 * layers, then its local and remote slots.  NULL when memory is short. */
static nixl_xfer_ix_t *ix_alloc(size_t layers, size_t nslots)
{
    if (layers > (SIZE_MAX / 4) / sizeof(nixl_be_layer_t) || nslots > (SIZE_MAX / 4) / (2 * sizeof(uint32_t)))
        return NULL;
    nixl_xfer_ix_t *ix = malloc(sizeof(*ix) + layers * sizeof(nixl_be_layer_t) + 2 * nslots * sizeof(uint32_t));
    if (!ix)
        return NULL;
    *ix = (nixl_xfer_ix_t){.layer = (nixl_be_layer_t *)(ix + 1), .layers = layers, .nslots = nslots};
    ix->lslots = (uint32_t *)(ix->layer + layers);
    ix->rslots = ix->lslots + nslots;
    return ix;
}

/* own: NULL, or a block from ix_alloc whose slots already are L's and R's
 * (L->slots == own->lslots): taken, freed on every path.  merged: the
 * pieces the request would have after merging (nixl_xfer_info's descs,
 * NIXL's descCount), when the caller counted them; 0: every piece. */
static native_t xfer_indexed_native(nixl_agent_t *a, nixl_op_t op, const nixl_indexed_t *L, const nixl_indexed_t *R,
                                    size_t nslots, uint64_t item, const slot_range_t *lr, const slot_range_t *rr,
                                    nixl_peer_t *peer, nixl_peer_inc_t *inc, const nixl_peer_backend_t *bk,
                                    const nixl_opt_args_t *opt, const void *notif, size_t notif_len,
                                    nixl_xfer_ix_t *own, size_t merged, nixl_status_t *st_out, nixl_xfer_t **out)
{
    const size_t layers = L->layers, pieces = layers * nslots;
    const int bi = bk->backend->index;
    if (item > UINT64_MAX / pieces) {
        free(own);
        return NATIVE_PIECES; /* its bytes do not fit a count: the pieces path says which piece is bad */
    }
    const uint64_t lspan = (uint64_t)(lr->max - lr->min) * L->stride + item;
    const uint64_t rspan = (uint64_t)(rr->max - rr->min) * R->stride + item;
    const nixl_region_index_t *idx = &a->regs[L->mem_type];
    nixl_xfer_t *x = calloc(1, sizeof(*x));
    nixl_xfer_ix_t *ix = own ? own : x ? ix_alloc(layers, nslots) : NULL;
    if (x && ix)
        x->iov = iov_get(a, layers, &x->iov_cap);
    if (!x || !ix || !x->iov) {
        free(ix);
        free(x);
        *st_out = NIXL_ERR_NO_MEMORY;
        return NATIVE_DONE;
    }
    ix->lstride = L->stride;
    ix->rstride = R->stride;
    ix->item = item;
    const nixl_region_t *lreg = NULL, *first = NULL;
    long rreg = -1;
    for (size_t l = 0; l < layers; l++) {
        uint64_t la = L->bases[l] + (uint64_t)lr->min * L->stride, ra = R->bases[l] + (uint64_t)rr->min * R->stride;
        /* Layers often share a region (one buffer for the whole cache). */
        if (!lreg || la < lreg->addr || la - lreg->addr > lreg->len || lspan > lreg->len - (la - lreg->addr)) {
            lreg = nixl_region_find(idx, la, lspan);
            if (!lreg || !(lreg->backend_mask & (1u << bi)))
                goto pieces;
        }
        const nixl_md_region_t *rd = rreg >= 0 ? &bk->mdb->regions[rreg] : NULL;
        if (!rd || ra < rd->addr || ra - rd->addr > rd->len || rspan > rd->len - (ra - rd->addr)) {
            rreg = nixl_peer_region_find(bk, R->mem_type, ra, rspan);
            if (rreg < 0)
                goto pieces;
        }
        if (!first)
            first = lreg;
        void *lmd = lreg->md[bi], *rmd = bk->rmd[rreg];
        ix->layer[l] = (nixl_be_layer_t){.lbase = L->bases[l], .rbase = R->bases[l], .lmd = lmd, .rmd = rmd};
        x->iov[l] = (nixl_be_iov_t){.laddr = la, .raddr = ra, .len = lspan, .lmd = lmd, .rmd = rmd};
    }
    if (!own) {
        memcpy(ix->lslots, L->slots, nslots * sizeof(uint32_t));
        memcpy(ix->rslots, R->slots, nslots * sizeof(uint32_t));
    }
    x->ix = ix;
    x->count = merged ? merged : pieces;
    x->descs_in = pieces;
    x->bytes = item * pieces;
    void *ctx = L->mem_type == NIXL_MEM_VRAM ? first->cuda.ctx : NULL;
    nixl_status_t st = xfer_setup_locked(a, x, op, bk->backend, peer, inc, L->mem_type, R->mem_type, ctx, opt,
                                         notif, notif_len, out);
    if (st == NIXL_ERR_NOT_SUPPORTED)
        return NATIVE_PIECES; /* x was freed */
    *st_out = st;
    return NATIVE_DONE;
pieces:
    iov_put(a, x->iov, x->iov_cap);
    free(ix);
    free(x);
    return NATIVE_PIECES;
}

/* ---- lists that are an indexed request ----
 *
 * SGLang's request is two lists of base_l + slot_t x item, layer after
 * layer (one registered buffer per layer), the same slots in every layer;
 * vLLM's lists of block ids, made with nixl_xfer_create, have that shape too.
 * When the backend takes indexed requests, such lists are recognised in
 * one reading pass (no pieces built) and made as one: the layer length n
 * is where the first local row leaves the first row's region; every later
 * layer must repeat the first layer's offsets on both sides, every length
 * be the same, every offset a multiple of it.  Anything else, or a decline,
 * and the lists are made the usual way.  1: made (or failed: *st_out). */

/* The later layers' pass: every layer l in [1, layers) repeats the first
 * layer's offsets (off[t], roff[t]) from its first row, every length is
 * item; with chk the rows' device words are OR-ed into *dev (their
 * addresses and lengths are then known: the caller checks each layer's
 * span for signs).  1: they all do.  Branch-free inside a layer: the
 * differences are OR-ed and tested once. */
static inline __attribute__((always_inline)) int layers_repeat(const uint64_t *lw, size_t ls, const uint64_t *rw,
                                                               size_t rs, size_t n, size_t layers, uint64_t item,
                                                               const uint64_t *loff, const uint64_t *roff,
                                                               const int chk, uint64_t *dev)
{
    uint64_t d_acc = 0;
    for (size_t l = 1; l < layers; l++) {
        const uint64_t *lL = lw + l * n * ls, *rL = rw + l * n * rs;
        const uint64_t lb = lL[0], rb = rL[0];
        uint64_t diff = 0;
        for (size_t t = 0; t < n; t++) {
            const uint64_t *x = lL + t * ls, *y = rL + t * rs;
            diff |= ((x[0] - lb) ^ loff[t]) | ((y[0] - rb) ^ roff[t]) | (x[1] ^ item) | (y[1] ^ item);
            if (chk)
                d_acc |= x[2] | y[2];
        }
        if (diff)
            return 0;
    }
    if (chk)
        *dev |= d_acc;
    return 1;
}

static int xfer_create_rows_indexed(nixl_agent_t *a, nixl_op_t op, const side_t *L, const side_t *R, size_t count,
                                    nixl_peer_t *peer, const nixl_peer_backend_t *bk, const nixl_opt_args_t *opt,
                                    const void *notif, size_t notif_len, nixl_status_t *st_out, nixl_xfer_t **out)
{
    const uint64_t *lw = L->w, *rw = R->w;
    const size_t ls = L->stride, rs = R->stride;
    const uint64_t item = lw[1];
    if (item == 0 || rw[1] != item || item > INT64_MAX)
        return 0;
    const nixl_region_t *r0 = nixl_region_find(&a->regs[L->mem], lw[0], item);
    if (!r0)
        return 0;
    /* One layer (every row in one region, the last one tells) is made
     * in pieces: this pass divides each offset by the item, which costs
     * more than the pieces save. */
    if (lw[(count - 1) * ls] - r0->addr < r0->len)
        return 0;
    size_t n = 1;
    while (n < count && lw[n * ls] - r0->addr < r0->len)
        n++;
    if (count % n != 0)
        return 0;
    const size_t layers = count / n;
    /* Scratch (the agent's, reused): the first layer's offsets, quotients and slots, each side. */
    if (n > SIZE_MAX / (5 * sizeof(uint64_t)))
        return 0;
    uint64_t *loff = buf_reserve(&a->create_buf[0], 5 * n * sizeof(uint64_t));
    if (!loff)
        return 0;
    uint64_t *roff = loff + n;
    int64_t *lq = (int64_t *)(roff + n), *rq = lq + n;
    uint32_t *slots = (uint32_t *)(rq + n);
    /* The first layer: offsets from its first row, each a multiple of item (one division each). */
    const uint64_t l0 = lw[0], q0 = rw[0];
    int64_t lmin = 0, rmin = 0, lmax = 0, rmax = 0;
    uint64_t ls_acc = 0, rs_acc = 0, d_acc = 0;
    const int64_t sitem = (int64_t)item;
    for (size_t t = 0; t < n; t++) {
        const uint64_t *x = lw + t * ls, *y = rw + t * rs;
        loff[t] = x[0] - l0;
        roff[t] = y[0] - q0;
        int64_t lo = (int64_t)loff[t], ro = (int64_t)roff[t];
        int64_t lqt = lo / sitem, rqt = ro / sitem;
        if (x[1] != item || y[1] != item || lo - lqt * sitem || ro - rqt * sitem)
            return 0;
        lq[t] = lqt;
        rq[t] = rqt;
        lmin = lqt < lmin ? lqt : lmin;
        lmax = lqt > lmax ? lqt : lmax;
        rmin = rqt < rmin ? rqt : rmin;
        rmax = rqt > rmax ? rqt : rmax;
        if (L->rows) {
            ls_acc |= x[0] | x[1] | x[2];
            rs_acc |= y[0] | y[1] | y[2];
            d_acc |= x[2] | y[2];
        }
    }
    /* Slots fit a uint32; from a layer's lowest row to its highest is below
     * 2^63 bytes (no registration is that large). */
    const uint64_t ldq = (uint64_t)lmax - (uint64_t)lmin, rdq = (uint64_t)rmax - (uint64_t)rmin;
    if (ldq > UINT32_MAX || rdq > UINT32_MAX || ldq > INT64_MAX / item || rdq > INT64_MAX / item)
        return 0;
    const uint64_t lspan = ldq * item, rspan = rdq * item;
    uint64_t dev = d_acc;
    int same;
    if (!L->rows)
        same = layers_repeat(lw, 4, rw, 4, n, layers, item, loff, roff, 0, &dev);
    else if (ls == 3 && rs == 3)
        same = layers_repeat(lw, 3, rw, 3, n, layers, item, loff, roff, 1, &dev);
    else
        same = layers_repeat(lw, ls, rw, rs, n, layers, item, loff, roff, 1, &dev);
    /* Refused rows (the pieces path names them): a device id of 2^32 or
     * more, anywhere, or in the first layer any signed field; later
     * layers' addresses lie in their span, lengths are item. */
    if (!same || (L->rows && ((dev & DEV_HI) || (ls_acc & L->sign) || (rs_acc & R->sign))))
        return 0;
    for (size_t t = 0; t < n; t++)
        slots[t] = (uint32_t)((uint64_t)lq[t] - (uint64_t)lmin);
    for (size_t t = 0; t < n; t++)
        slots[n + t] = (uint32_t)((uint64_t)rq[t] - (uint64_t)rmin);
    uint64_t *bases = malloc(2 * layers * sizeof(uint64_t));
    if (!bases)
        return 0;
    uint64_t high = 0;
    for (size_t l = 0; l < layers; l++) {
        /* the layer's lowest row: lmin <= 0 */
        bases[l] = lw[l * n * ls] + (uint64_t)(lmin * sitem);
        bases[layers + l] = rw[l * n * rs] + (uint64_t)(rmin * sitem);
        /* every address of the layer's rows lies in [base, base + span]: signed when an end is */
        high |= (L->sign & (bases[l] | (bases[l] + lspan))) |
                (R->sign & (bases[layers + l] | (bases[layers + l] + rspan)));
    }
    if (high) {
        free(bases);
        return 0;
    }
    const nixl_indexed_t Li = {L->mem, layers, bases, item, slots};
    const nixl_indexed_t Ri = {R->mem, layers, bases + layers, item, slots + n};
    const slot_range_t lr = {0, (uint32_t)ldq};
    const slot_range_t rr = {0, (uint32_t)rdq};
    native_t got = xfer_indexed_native(a, op, &Li, &Ri, n, item, &lr, &rr, peer, peer->cur, bk, opt, notif, notif_len, NULL, 0,
                                       st_out, out);
    free(bases);
    return got == NATIVE_DONE;
}

/* Branch-free passes over index arrays, four lanes at a time (GCC's and
 * clang's vector extensions: SSE2 on x86-64, NEON on arm64), then the
 * tail.  Nonzero when any index is refused. */
typedef uint32_t u32x4 __attribute__((vector_size(16)));

static inline u32x4 u32x4_load(const uint32_t *p)
{
    u32x4 v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* slots[t] = idx[t] - first for t < n; nonzero when one is bound or more. */
static uint32_t slots_of(const uint32_t *idx, size_t n, uint32_t first, uint32_t bound, uint32_t *slots)
{
    size_t t = 0;
    u32x4 bad4 = {0, 0, 0, 0};
    for (; t + 4 <= n; t += 4) {
        const u32x4 v = u32x4_load(idx + t) - first;
        bad4 |= (u32x4)(v >= bound);
        memcpy(slots + t, &v, sizeof(v));
    }
    uint32_t bad = bad4[0] | bad4[1] | bad4[2] | bad4[3];
    for (; t < n; t++) {
        slots[t] = idx[t] - first;
        bad |= slots[t] >= bound;
    }
    return bad;
}

/* Nonzero unless g[t] - idx[t] is d for every t < n (modulo 2^32). */
static uint32_t group_differs(const uint32_t *g, const uint32_t *idx, size_t n, uint32_t d)
{
    size_t t = 0;
    u32x4 diff4 = {0, 0, 0, 0};
    for (; t + 4 <= n; t += 4)
        diff4 |= (u32x4_load(g + t) - u32x4_load(idx + t)) ^ d;
    uint32_t diff = diff4[0] | diff4[1] | diff4[2] | diff4[3];
    for (; t < n; t++)
        diff |= (g[t] - idx[t]) ^ d;
    return diff;
}

/* How many t in [1, n) continue the piece of t - 1 on both sides (slots
 * one higher each), for items that follow each other in memory. */
static size_t slots_merging(const uint32_t *ls, const uint32_t *rs, size_t n)
{
    size_t t = 1, m = 0;
    u32x4 m4 = {0, 0, 0, 0};
    for (; t + 4 <= n; t += 4) {
        const u32x4 dl = u32x4_load(ls + t) - u32x4_load(ls + t - 1), dr = u32x4_load(rs + t) - u32x4_load(rs + t - 1);
        m4 -= (u32x4)((dl == 1) & (dr == 1)); /* a lane's true is all ones: -1 */
    }
    m = (size_t)m4[0] + m4[1] + m4[2] + m4[3];
    for (; t < n; t++)
        m += ls[t] - ls[t - 1] == 1 && rs[t] - rs[t - 1] == 1;
    return m;
}

/* One side of vLLM's make: indices into a run-shaped list (one run per
 * layer), n per layer, each group inside one run at the same positions as
 * the first group's.  Fills slots (the positions), bases (the runs'
 * starts), the stride, item and the slots' range.  0: not that shape (or
 * an index out of range: the pieces path names it).
 *
 * A run's descriptors all lie in its one region, so the slots need no
 * smallest and largest: each is checked below the shortest run's length
 * (the last run may be short), and the range given is [0, that - 1],
 * every piece of which is a descriptor of the list.  A later group
 * repeats the first one's positions when g[t] - idx[t] is g[0] - idx[0]
 * for every t: modulo 2^32 that is g[t] = run start + slot, exact as the
 * list has fewer than 2^32 descriptors. */
static int make_side_indexed(const nixl_prep_t *p, const uint32_t *idx, size_t n, size_t layers, uint32_t *slots,
                             uint64_t *bases, uint64_t *stride, uint64_t *item, slot_range_t *range)
{
    const prep_run_t *runs = p->runs;
    const uint32_t rl = p->run_len;
    const uint64_t magic = p->run_magic, nruns = (p->count + rl - 1) / rl;
    __extension__ typedef unsigned __int128 u128;
#define RUN_OF(i) ((size_t)(((u128)magic * (uint32_t)(i)) >> 64))
    const size_t q0 = RUN_OF(idx[0]);
    if (q0 >= nruns)
        return 0;
    const uint32_t first = (uint32_t)(q0 * rl), off = idx[0] - first;
    const uint64_t st = runs[q0].stride, len = runs[q0].len;
    uint64_t bound = rl;
    for (size_t l = 0; l < layers; l++) {
        const uint32_t g0 = idx[l * n];
        const size_t q = RUN_OF(g0);
        if (q >= nruns || g0 - (uint32_t)(q * rl) != off || runs[q].stride != st || runs[q].len != len)
            return 0;
        const uint64_t avail = p->count - (uint64_t)q * rl;
        bound = avail < bound ? avail : bound;
        bases[l] = runs[q].addr;
    }
#undef RUN_OF
    uint32_t bad = slots_of(idx, n, first, (uint32_t)bound, slots);
    for (size_t l = 1; l < layers && !bad; l++)
        bad |= group_differs(idx + l * n, idx, n, idx[l * n] - idx[0]);
    if (bad)
        return 0;
    *stride = st;
    *item = len;
    *range = (slot_range_t){0, (uint32_t)(bound - 1)};
    return 1;
}

/* vLLM's request, nixl_xfer_make from lists of every block (one run per
 * layer) and block ids per layer: the same indexed shape, recognised from
 * the indices (the layer length n is where the first local index leaves
 * the first one's run; all of them when the last one has not: one
 * layer).  1: made (or failed: *st_out). */
static int xfer_make_indexed(nixl_agent_t *a, nixl_op_t op, const nixl_prep_t *lp, const uint32_t *li,
                             const nixl_prep_t *rp, const uint32_t *ri, size_t count, const nixl_opt_args_t *opt,
                             const void *notif, size_t notif_len, nixl_status_t *st_out, nixl_xfer_t **out)
{
    __extension__ typedef unsigned __int128 u128;
    const size_t q0 = (size_t)(((u128)lp->run_magic * li[0]) >> 64);
    const uint64_t first = (uint64_t)q0 * lp->run_len;
    size_t n = count;
    if ((uint64_t)li[count - 1] - first >= lp->run_len) {
        n = 1;
        while (n < count && (uint64_t)li[n] - first < lp->run_len)
            n++;
    }
    if (count % n != 0)
        return 0;
    const size_t layers = count / n;
    nixl_xfer_ix_t *ix = ix_alloc(layers, n);
    uint64_t *bases = ix ? malloc(2 * layers * sizeof(uint64_t)) : NULL;
    uint64_t lst, rst, litem, ritem;
    slot_range_t lr, rr;
    int ok = bases && make_side_indexed(lp, li, n, layers, ix->lslots, bases, &lst, &litem, &lr) &&
             make_side_indexed(rp, ri, n, layers, ix->rslots, bases + layers, &rst, &ritem, &rr) && litem == ritem &&
             litem > 0;
    /* Slots that mostly run on (blocks allocated in order) are fewer and
     * larger pieces once merged, which every backend moves better than
     * one item at a time: those are made in pieces. */
    size_t merges = 0;
    if (ok && lst == litem && rst == litem) {
        merges = slots_merging(ix->lslots, ix->rslots, n);
        ok = 2 * merges <= n;
    }
    native_t got = NATIVE_PIECES;
    if (ok) {
        const nixl_indexed_t L = {lp->mem, layers, bases, lst, ix->lslots};
        const nixl_indexed_t R = {rp->mem, layers, bases + layers, rst, ix->rslots};
        const nixl_peer_backend_t *bk = &rp->inc->bk[rp->backend->index];
        got = xfer_indexed_native(a, op, &L, &R, n, litem, &lr, &rr, rp->peer, rp->inc, bk, opt, notif, notif_len,
                                  ix, layers * (n - merges), st_out, out);
    } else {
        free(ix);
    }
    free(bases);
    return got == NATIVE_DONE;
}

static nixl_status_t xfer_create_indexed_locked(nixl_agent_t *a, nixl_op_t op, const nixl_indexed_t *L,
                                                const nixl_indexed_t *R, size_t nslots, uint64_t item,
                                                const char *peer_name, const nixl_opt_args_t *opt, nixl_xfer_t **out)
{
    nixl_status_t st;
    nixl_peer_t *peer = peer_resolve_locked(a, peer_name, &st);
    if (!peer)
        return st;
    slot_range_t lr, rr;
    if ((st = indexed_span_check(a, "local", L, nslots, item, &lr)) != NIXL_OK ||
        (st = indexed_span_check(a, "remote", R, nslots, item, &rr)) != NIXL_OK)
        return st;
    const void *notif;
    size_t notif_len;
    if ((st = opt_notif(opt, &notif, &notif_len)) != NIXL_OK)
        return st;
    nixl_peer_inc_t *inc = peer->cur;
    const nixl_peer_backend_t *order[NIXL_AGENT_MAX_BACKENDS];
    int nb = backend_order(a, inc, opt, R->mem_type, order);
    if (nb == 0) {
        NIXL_ERROR("agent %s: no backend of this agent reaches peer %s with memory type %d", a->name, peer->name,
                   R->mem_type);
        return NIXL_ERR_NO_PATH;
    }
    size_t pairs = L->layers * nslots;
    nixl_xfer_t *x = NULL;
    size_t bad = 0;
    int why = PIECE_OK;
    piece_acc_t p;
    for (int k = 0; k < nb; k++) {
        if (be_can_indexed(order[k]->backend) &&
            xfer_indexed_native(a, op, L, R, nslots, item, &lr, &rr, peer, inc, order[k], opt, notif, notif_len, NULL, 0,
                                &st, out) == NATIVE_DONE)
            return st;
        if (!x) {
            x = calloc(1, sizeof(*x));
            if (x)
                x->iov = iov_get(a, pairs, &x->iov_cap);
            if (!x || !x->iov) {
                free(x);
                return NIXL_ERR_NO_MEMORY;
            }
        }
        piece_acc_init(&p, a, L->mem_type, R->mem_type, order[k], x->iov);
        why = indexed_build(&p, L, R, nslots, item, &bad);
        if (why == PIECE_OK)
            return xfer_from_pieces(a, x, &p, pairs, op, peer, inc, L->mem_type, opt, notif, notif_len, out);
        if (why == PIECE_LOCAL) {
            uint64_t la = L->bases[bad / nslots] + (uint64_t)L->slots[bad % nslots] * L->stride;
            if (!nixl_region_find(p.idx, la, item))
                break; /* not registered at all: no backend will do */
        }
    }
    iov_put(a, x->iov, x->iov_cap);
    free(x);
    size_t l = bad / nslots, t = bad % nslots;
    const nixl_indexed_t *S = why == PIECE_LOCAL ? L : R;
    uint64_t addr = S->bases[l] + (uint64_t)S->slots[t] * S->stride;
    if (why == PIECE_LOCAL)
        NIXL_ERROR("agent %s: indexed request: local layer %zu slot %u [0x%llx, +%llu) is not inside memory "
                   "registered with a backend that reaches peer %s",
                   a->name, l, S->slots[t], (unsigned long long)addr, (unsigned long long)item, peer->name);
    else
        NIXL_ERROR("agent %s: indexed request: remote layer %zu slot %u [0x%llx, +%llu) is not inside memory peer "
                   "%s registered",
                   a->name, l, S->slots[t], (unsigned long long)addr, (unsigned long long)item, peer->name);
    return NIXL_ERR_NOT_REGISTERED;
}

NIXL_API nixl_status_t nixl_xfer_create_indexed(nixl_agent_t *agent, nixl_op_t op, const nixl_indexed_t *local,
                                                const nixl_indexed_t *remote, size_t nslots, uint64_t item_len,
                                                const char *peer, const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out)
{
    if (!agent || !local || !remote || !peer || !xfer_out)
        return NIXL_ERR_NULL;
    nixl_status_t st;
    if ((st = indexed_check(agent, "local", local)) != NIXL_OK || (st = indexed_check(agent, "remote", remote)) != NIXL_OK)
        return st;
    if (op != NIXL_OP_READ && op != NIXL_OP_WRITE) {
        NIXL_ERROR("agent %s: indexed request: op %d is neither READ nor WRITE", agent->name, (int)op);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (local->layers == 0 || nslots == 0 || item_len == 0) {
        NIXL_ERROR("agent %s: indexed request: %zu layers x %zu slots of %llu bytes moves nothing", agent->name,
                   local->layers, nslots, (unsigned long long)item_len);
        return NIXL_ERR_ZERO_LENGTH;
    }
    if (local->layers != remote->layers) {
        NIXL_ERROR("agent %s: indexed request: %zu local layers, %zu remote layers", agent->name, local->layers,
                   remote->layers);
        return NIXL_ERR_LENGTH_MISMATCH;
    }
    if (local->layers > SIZE_MAX / nslots || local->layers * nslots > SIZE_MAX / sizeof(nixl_be_iov_t)) {
        NIXL_ERROR("agent %s: indexed request: %zu layers x %zu slots is too many pieces", agent->name, local->layers,
                   nslots);
        return NIXL_ERR_TOO_BIG;
    }
    nixl_agent_lock(agent);
    st = xfer_create_indexed_locked(agent, op, local, remote, nslots, item_len, peer, opt, xfer_out);
    nixl_agent_unlock(agent);
    return st;
}

static nixl_status_t xfer_create_keyed(nixl_agent_t *agent, nixl_op_t op, const nixl_dlist_t *local,
                                       const nixl_dlist_t *remote, const char *peer, const nixl_opt_args_t *opt,
                                       nixl_xfer_t **xfer_out);

NIXL_API nixl_status_t nixl_xfer_create(nixl_agent_t *agent, nixl_op_t op, const nixl_dlist_t *local,
                                        const nixl_dlist_t *remote, const char *peer, const nixl_opt_args_t *opt,
                                        nixl_xfer_t **xfer_out)
{
    if (!agent || !peer || !xfer_out)
        return NIXL_ERR_NULL;
    nixl_dlist_t lk, rk;
    nixl_desc_t *ltmp = NULL, *rtmp = NULL;
    nixl_status_t st = nixl_dlist_file_keys(local, NIXL_FILE_KEYS_XFER, "transfer (local list)", &lk, &ltmp);
    if (st == NIXL_OK)
        st = nixl_dlist_file_keys(remote, NIXL_FILE_KEYS_XFER, "transfer (remote list)", &rk, &rtmp);
    if (st == NIXL_OK)
        st = xfer_create_keyed(agent, op, &lk, &rk, peer, opt, xfer_out);
    free(ltmp);
    free(rtmp);
    return st;
}

static nixl_status_t xfer_create_keyed(nixl_agent_t *agent, nixl_op_t op, const nixl_dlist_t *local,
                                       const nixl_dlist_t *remote, const char *peer, const nixl_opt_args_t *opt,
                                       nixl_xfer_t **xfer_out)
{
    nixl_status_t st;
    if (local->count != remote->count) {
        NIXL_ERROR("agent %s: transfer: local list has %zu descriptors, remote list %zu", agent->name, local->count,
                   remote->count);
        return NIXL_ERR_LENGTH_MISMATCH;
    }
    if (op != NIXL_OP_READ && op != NIXL_OP_WRITE) {
        NIXL_ERROR("agent %s: transfer: op %d is neither READ nor WRITE", agent->name, (int)op);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (strcmp(peer, agent->name) != 0 && (st = files_are_local(agent, "transfer", peer, local->mem_type,
                                                                 remote->mem_type)) != NIXL_OK)
        return st;
    nixl_agent_lock(agent);
    if (strcmp(peer, agent->name) != 0) {
        nixl_peer_t *p = nixl_peer_find(agent, peer);
        if (p && p->cur) {
            const side_t L = side_of_dlist(local), R = side_of_dlist(remote);
            if (xfer_create_fused(agent, op, &L, &R, local->count, p, opt, &st, xfer_out) == FUSED_DONE) {
                nixl_agent_unlock(agent);
                return st;
            }
        }
    }
    nixl_prep_t *lp = NULL, *rp = NULL;
    st = prep_create_locked(agent, NULL, local, opt, &agent->create_buf[0], &lp);
    if (st == NIXL_OK)
        st = prep_create_locked(agent, peer, remote, opt, &agent->create_buf[1], &rp);
    if (st == NIXL_OK)
        st = xfer_make_locked(agent, op, lp, NULL, rp, NULL, local->count, opt, xfer_out);
    if (lp)
        prep_free_locked(lp);
    if (rp)
        prep_free_locked(rp);
    nixl_agent_unlock(agent);
    return st;
}

/* Rows made into descriptors (nixl_descs_from_rows), for the paths that
 * take lists: a new array in *out (free it), or the error, logged. */
static nixl_status_t rows_to_dlist(nixl_agent_t *a, const char *side, const nixl_rows_t *r, nixl_dlist_t *dl,
                                   nixl_desc_t **out)
{
    *out = NULL;
    *dl = (nixl_dlist_t){r->mem_type, r->count, NULL};
    if (!r->count)
        return NIXL_OK;
    if (r->count > SIZE_MAX / sizeof(nixl_desc_t) || !(*out = malloc(r->count * sizeof(nixl_desc_t))))
        return NIXL_ERR_NO_MEMORY;
    size_t bad = 0;
    nixl_status_t st = nixl_descs_from_rows(*out, r->rows, r->count, r->stride, r->is_signed, &bad);
    if (st != NIXL_OK) {
        const side_t s = {r->mem_type, r->rows, r->stride, 1, r->is_signed ? 1ull << 63 : 0};
        rows_check_side(a, side, &s, r->count); /* logs the row */
        free(*out);
        *out = NULL;
        return st;
    }
    dl->descs = *out;
    return NIXL_OK;
}

NIXL_API nixl_status_t nixl_xfer_create_rows(nixl_agent_t *agent, nixl_op_t op, const nixl_rows_t *local,
                                             const nixl_rows_t *remote, const char *peer,
                                             const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out)
{
    if (!agent || !local || !remote || !peer || !xfer_out || (local->count && !local->rows) ||
        (remote->count && !remote->rows))
        return NIXL_ERR_NULL;
    if (local->stride < 3 || remote->stride < 3) {
        NIXL_ERROR("agent %s: transfer: rows are at least 3 words apart (stride %zu, %zu)", agent->name,
                   local->stride, remote->stride);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (local->count != remote->count) {
        NIXL_ERROR("agent %s: transfer: local list has %zu descriptors, remote list %zu", agent->name, local->count,
                   remote->count);
        return NIXL_ERR_LENGTH_MISMATCH;
    }
    /* Memory to a peer: read in place, in the one-pass paths. */
    if ((op == NIXL_OP_READ || op == NIXL_OP_WRITE) && local->count && (unsigned)local->mem_type < NIXL_MEM_FILE &&
        (unsigned)remote->mem_type < NIXL_MEM_FILE && strcmp(peer, agent->name) != 0) {
        const side_t L = {local->mem_type, local->rows, local->stride, 1, local->is_signed ? 1ull << 63 : 0};
        const side_t R = {remote->mem_type, remote->rows, remote->stride, 1, remote->is_signed ? 1ull << 63 : 0};
        nixl_status_t st;
        nixl_agent_lock(agent);
        nixl_peer_t *p = nixl_peer_find(agent, peer);
        fused_t f = p && p->cur ? xfer_create_fused(agent, op, &L, &R, local->count, p, opt, &st, xfer_out)
                                : FUSED_TWO_STEP;
        nixl_agent_unlock(agent);
        if (f == FUSED_DONE)
            return st;
    }
    /* Anything else (files, loopback, another backend, an error to name): as lists. */
    nixl_dlist_t ll, rl;
    nixl_desc_t *lt, *rt = NULL;
    nixl_status_t st = rows_to_dlist(agent, "local", local, &ll, &lt);
    if (st == NIXL_OK)
        st = rows_to_dlist(agent, "remote", remote, &rl, &rt);
    if (st == NIXL_OK)
        st = nixl_xfer_create(agent, op, &ll, &rl, peer, opt, xfer_out);
    free(lt);
    free(rt);
    return st;
}

/* ---- post, status, release ---- */

static void xfer_finish(nixl_xfer_t *x, nixl_status_t st)
{
    x->xfer_ns = nixl_now_ns() - x->t_post;
    x->state = st == NIXL_OK ? NIXL_XFER_DONE : NIXL_XFER_FAILED;
    x->error = st;
    const nixl_be_req_t *h = x->req;
    nixl_stats_complete(x->agent->stats, h->path ? h->path : "?", (int)h->fallback, x->bytes, x->count,
                        st != NIXL_OK);
    if (st != NIXL_OK)
        NIXL_ERROR("agent %s: request to %s over %s failed: %s", x->agent->name, x->peer->name,
                   h->path ? h->path : "?", nixl_strerror(st));
}

/* After a deregistration: every local piece must still be registered; a
 * piece whose registration changed makes the backend request be rebuilt. */
static nixl_status_t xfer_revalidate(nixl_xfer_t *x)
{
    nixl_agent_t *a = x->agent;
    int bi = x->backend->index, changed = 0;
    for (size_t i = 0; i < x->niov; i++) {
        nixl_region_t *r = nixl_region_find(&a->regs[x->local_mem], x->iov[i].laddr, x->iov[i].len);
        if (!r || !(r->backend_mask & (1u << bi))) {
            NIXL_ERROR("agent %s: post: local memory [0x%llx, +%llu) was deregistered since the request was made",
                       a->name, (unsigned long long)x->iov[i].laddr, (unsigned long long)x->iov[i].len);
            return NIXL_ERR_NOT_REGISTERED;
        }
        if (r->md[bi] != x->iov[i].lmd) {
            x->iov[i].lmd = r->md[bi];
            changed = 1;
        }
    }
    if (changed) {
        xfer_backend_release(x);
        nixl_status_t st = xfer_backend_prepare(x);
        if (st == NIXL_ERR_NOT_SUPPORTED) {
            NIXL_ERROR("agent %s: post: backend %s no longer takes this indexed request after its memory was "
                       "registered again: make it again",
                       a->name, be_name(x->backend));
            return NIXL_ERR_STALE;
        }
        if (st != NIXL_OK)
            return st;
    }
    x->reg_epoch = a->reg_epoch;
    return NIXL_OK;
}

/* The request's deadline passed: have the backend cancel it, and say how
 * it stands now.  Its status then ends NIXL_ERR_CANCELED
 * (reported as NIXL_ERR_TIMEOUT), or NIXL_OK when the notification was
 * already on its way. */
static nixl_status_t xfer_deadline(nixl_xfer_t *x)
{
    nixl_backend_t *b = x->backend;
    if (!be_can_cancel(b)) {
        if (!b->cancel_warned) {
            b->cancel_warned = 1;
            NIXL_WARN("agent %s: backend %s cannot cancel requests: their deadlines are not enforced",
                      x->agent->name, be_name(b));
        }
        x->timeout_ns = 0;
        return NIXL_IN_PROG;
    }
    NIXL_INFO("agent %s: request to %s over %s passed its deadline of %llu ms: canceling it", x->agent->name,
              x->peer->name, x->req->path ? x->req->path : "?", (unsigned long long)(x->timeout_ns / 1000000));
    x->canceling = 1;
    be_xfer_cancel(b, x->cuda_ctx, x->req);
    return be_xfer_status(b, x->cuda_ctx, x->req);
}

static nixl_status_t xfer_poll_locked(nixl_xfer_t *x)
{
    if (x->state != NIXL_XFER_IN_FLIGHT)
        return NIXL_OK;
    nixl_status_t st = be_xfer_status(x->backend, x->cuda_ctx, x->req);
    if (nixl_unlikely(st == NIXL_IN_PROG && x->timeout_ns && !x->canceling) &&
        nixl_now_ns() - x->t_post > x->timeout_ns)
        st = xfer_deadline(x);
    if (st == NIXL_ERR_CANCELED && x->canceling)
        st = NIXL_ERR_TIMEOUT;
    if (st != NIXL_IN_PROG)
        xfer_finish(x, st);
    return st;
}

NIXL_API nixl_status_t nixl_xfer_post(nixl_xfer_t *x)
{
    if (!x)
        return NIXL_ERR_NULL;
    nixl_agent_t *a = x->agent;
    nixl_agent_lock(a);
    nixl_status_t st;
    if (x->state == NIXL_XFER_IN_FLIGHT && xfer_poll_locked(x) == NIXL_IN_PROG) {
        NIXL_ERROR("agent %s: post: the request is still in flight", a->name);
        st = NIXL_ERR_IN_FLIGHT;
        goto out;
    }
    if (!x->req) {
        st = NIXL_ERR_NO_PATH;
        goto out;
    }
    if (x->peer == a->self_peer) {
        if (x->reg_epoch != a->reg_epoch) {
            NIXL_ERROR("agent %s: post: a registration of this agent was removed since this loopback request was "
                       "made: make it again",
                       a->name);
            st = NIXL_ERR_STALE;
            goto out;
        }
    } else if (x->peer->cur != x->inc) {
        NIXL_ERROR("agent %s: post: peer %s was %s after this request was made", a->name, x->peer->name,
                   x->peer->cur ? "reloaded" : "invalidated");
        st = x->peer->cur ? NIXL_ERR_STALE : NIXL_ERR_PEER_INVALIDATED;
        goto out;
    }
    if (x->reg_epoch != a->reg_epoch) {
        st = xfer_revalidate(x);
        if (st != NIXL_OK)
            goto out;
    }
    x->t_post = nixl_now_ns();
    x->posts++;
    x->canceling = 0;
    st = be_xfer_post(x->backend, x->cuda_ctx, x->req, x->notif, x->notif_len);
    x->post_ns = nixl_now_ns() - x->t_post;
    if (st == NIXL_IN_PROG)
        x->state = NIXL_XFER_IN_FLIGHT;
    else
        xfer_finish(x, st);
out:
    nixl_agent_unlock(a);
    return st;
}

NIXL_API nixl_status_t nixl_xfer_status(nixl_xfer_t *x)
{
    if (!x)
        return NIXL_ERR_NULL;
    nixl_agent_t *a = x->agent;
    nixl_agent_lock(a);
    nixl_status_t st;
    switch (x->state) {
    case NIXL_XFER_IN_FLIGHT:
        st = xfer_poll_locked(x);
        break;
    case NIXL_XFER_DONE:
        st = NIXL_OK;
        break;
    case NIXL_XFER_FAILED:
        st = x->error;
        break;
    default:
        NIXL_ERROR("agent %s: status: the request was never posted", a->name);
        st = NIXL_ERR_INVALID_PARAM;
        break;
    }
    nixl_agent_unlock(a);
    return st;
}

static void xfer_free_locked(nixl_xfer_t *x)
{
    nixl_agent_t *a = x->agent;
    if (x->req) {
        if (x->state == NIXL_XFER_IN_FLIGHT) {
            /* Released in flight: its notification is never sent.  Where
             * the backend can cancel, it is told first, so that the look
             * below (for the counts) cannot be the call that completes the
             * request and sends it (ucx sends from its status call). */
            nixl_status_t st;
            if (be_can_cancel(x->backend)) {
                be_xfer_cancel(x->backend, x->cuda_ctx, x->req);
                st = be_xfer_status(x->backend, x->cuda_ctx, x->req);
                if (st != NIXL_IN_PROG && st != NIXL_ERR_CANCELED)
                    xfer_finish(x, st); /* too late to cancel: it ended as it would have */
            } else {
                st = xfer_poll_locked(x);
            }
            if (st == NIXL_IN_PROG || st == NIXL_ERR_CANCELED) {
                NIXL_INFO("agent %s: request to %s released in flight: canceled", a->name, x->peer->name);
                nixl_stats_complete(a->stats, x->req->path ? x->req->path : "?", (int)x->req->fallback, 0, 0, 1);
            }
        }
        xfer_backend_release(x);
    }
    if (x->prev)
        x->prev->next = x->next;
    else
        a->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    nixl_peer_inc_unref(x->inc);
    free(x->notif);
    iov_put(a, x->iov, x->iov_cap);
    free(x->ix);
    free(x);
}

NIXL_API void nixl_xfer_release(nixl_xfer_t *x)
{
    if (!x)
        return;
    nixl_agent_t *a = x->agent;
    nixl_agent_lock(a);
    xfer_free_locked(x);
    nixl_agent_unlock(a);
}

NIXL_API nixl_status_t nixl_xfer_info(const nixl_xfer_t *x, nixl_xfer_info_t *info)
{
    if (!x || !info)
        return NIXL_ERR_NULL;
    nixl_agent_lock(x->agent);
    memset(info, 0, sizeof(*info));
    nixl_strlcpy(info->backend, be_name(x->backend), sizeof(info->backend));
    nixl_strlcpy(info->path, x->req && x->req->path ? x->req->path : "", sizeof(info->path));
    info->bytes = x->bytes;
    info->descs = x->count;
    info->descs_in = x->descs_in;
    info->post_ns = x->post_ns;
    info->xfer_ns = x->state == NIXL_XFER_IN_FLIGHT ? 0 : x->xfer_ns;
    info->posts = x->posts;
    nixl_agent_unlock(x->agent);
    return NIXL_OK;
}

void nixl_xfers_destroy(nixl_agent_t *agent)
{
    while (agent->xfers)
        xfer_free_locked(agent->xfers);
    for (int i = 0; i < 2; i++) {
        free(agent->create_buf[i].p);
        agent->create_buf[i] = (struct nixl_buf){0};
    }
    for (int i = 0; i < NIXL_IOV_CACHE; i++) {
        free(agent->iov_cache[i].p);
        agent->iov_cache[i] = (struct nixl_buf){0};
    }
}

static int md_in(void *const *v, size_t n, void *md)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uintptr_t)v[mid] < (uintptr_t)md)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo] == md;
}

int nixl_xfers_in_flight_use(nixl_agent_t *agent, void *const *mds, size_t n)
{
    for (nixl_xfer_t *x = agent->xfers; x; x = x->next) {
        if (x->state != NIXL_XFER_IN_FLIGHT || xfer_poll_locked(x) != NIXL_IN_PROG)
            continue;
        for (size_t i = 0; i < x->niov; i++)
            if (md_in(mds, n, x->iov[i].lmd))
                return 1;
    }
    return 0;
}
