/*
 * shm_xfer.c - transfer requests: prepare, post, status, release.
 *
 * prepare groups the work in items of at most 'chunk' bytes.  shm.map
 * (every remote region is mapped here) keeps no per-descriptor state: an
 * item is a (piece, offset, bytes) window over the core's iov array, which
 * stays valid until release, and the copy computes each mapped address as
 * it goes, so making a request of many small pieces costs one read pass.
 * shm.cma builds local/remote iovec arrays once (each side's contiguous
 * runs merge on their own, as the kernel's cost is per remote iovec), at
 * most IOV_MAX per item.  post then only
 * runs the items: inline for small requests (or when there is no pool),
 * else on the worker pool, whose last finishing worker sends the
 * notification and publishes the status.  Posting allocates nothing per
 * descriptor.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "shm_int.h"

#define SHM_PATH_MAP "shm.map"
#define SHM_PATH_CMA "shm.cma"

/* Walks the segments of a request: descriptors cut at 'chunk' bytes, and
 * groups them into items. */
typedef struct shm_layout {
    size_t nseg, nitems;
    uint64_t item_bytes;
    size_t item_count;
} shm_layout_t;

static void shm_layout_add(shm_layout_t *l, uint64_t seg_len, uint64_t chunk)
{
    if (l->nitems == 0 || l->item_count == SHM_IOV_MAX || l->item_bytes + seg_len > chunk) {
        l->nitems++;
        l->item_bytes = 0;
        l->item_count = 0;
    }
    l->item_bytes += seg_len;
    l->item_count++;
    l->nseg++;
}

/* The core resolved every piece inside registered regions of this
 * backend on both sides (and merged only within one region), so ranges are
 * not checked again here (backend.h: a backend may trust its iovs).  What
 * is looked at is per region, not per piece: whether each one is mapped
 * here, and whether reaching it is a fallback.  When every region of the
 * peer is mapped (the peer counts those that are not), neither needs a
 * look; else consecutive pieces almost always share their regions, so a
 * region is looked at when it changes. */
static nixl_status_t shm_check_xfer(shm_be_t *be, const nixl_be_xfer_t *x, int *mapped_out, int *fallback_out,
                                     uint64_t *uniform_out)
{
    int mapped = be->map_enabled, fallback = 0;
    if (x->op != NIXL_OP_READ && x->op != NIXL_OP_WRITE) {
        SHM_ERROR(be, "shm: unknown transfer op %d", (int)x->op);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (x->local_mem != NIXL_MEM_DRAM || x->remote_mem != NIXL_MEM_DRAM) {
        SHM_ERROR(be, "shm: transfers between DRAM only (got %d -> %d)", (int)x->local_mem, (int)x->remote_mem);
        return NIXL_ERR_MEM_TYPE;
    }
    if (!x->peer || !x->iov || x->count == 0)
        return x->count == 0 ? NIXL_ERR_ZERO_LENGTH : NIXL_ERR_NULL;
    const void *last_l = NULL, *last_r = NULL;
    /* In the same pass: whether every piece has one length (paged KV),
     * which lets the mapped path find its items by arithmetic. */
    const uint64_t len0 = x->iov[0].len;
    uint64_t other = 0;
    if (mapped && ((const shm_peer_t *)x->peer)->cma_regions == 0) {
        /* Every region of the peer is mapped here, none is a fallback:
         * nothing per region to look at. */
        for (size_t i = 0; i < x->count; i++)
            other |= x->iov[i].len ^ len0;
        *mapped_out = 1;
        *fallback_out = 0;
        *uniform_out = other ? 0 : len0;
        return NIXL_OK;
    }
    for (size_t i = 0; i < x->count; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        other |= v->len ^ len0;
        if (nixl_likely(v->lmd == last_l && v->rmd == last_r))
            continue;
        const shm_rmd_t *r = v->rmd;
        if (!v->lmd || !r || r->peer != x->peer) {
            SHM_ERROR(be, "shm: piece %zu of a transfer has no registration of this backend on both sides", i);
            return NIXL_ERR_INVALID_PARAM;
        }
        if (!r->base)
            mapped = 0;
        if (r->fallback)
            fallback = 1;
        last_l = v->lmd;
        last_r = r;
    }
    *mapped_out = mapped;
    *fallback_out = mapped ? 0 : fallback;
    *uniform_out = other ? 0 : len0;
    return NIXL_OK;
}

/* Append [base, +len) to iov[0..*n), extending the last iovec when it ends
 * where this one starts and belongs to the same item (in_item > 0).
 * Returns 1 when a new iovec was used. */
static size_t shm_iov_append(struct iovec *iov, size_t *n, size_t in_item, void *base, size_t len)
{
    if (in_item && (uint8_t *)iov[*n - 1].iov_base + iov[*n - 1].iov_len == (uint8_t *)base) {
        iov[*n - 1].iov_len += len;
        return 0;
    }
    iov[*n].iov_base = base;
    iov[*n].iov_len = len;
    (*n)++;
    return 1;
}

/* Keep r's block as the spare when it is larger than the one kept (and
 * not too large), else free it. */
static void shm_req_put(shm_be_t *be, shm_req_t *r)
{
    if (r->alloc > SHM_SPARE_MAX) {
        free(r);
        return;
    }
    shm_req_t *old = atomic_exchange(&be->spare, r);
    if (old && old->alloc > r->alloc) {
        old = atomic_exchange(&be->spare, old); /* r (or a block another thread kept meanwhile) */
    }
    free(old);
}

/* A request block of at least `size` bytes, its header zeroed (the spare
 * when it fits, else a new one); zero the rest that needs it.  NULL when
 * memory is short. */
static shm_req_t *shm_req_alloc(shm_be_t *be, size_t size)
{
    shm_req_t *r = atomic_exchange(&be->spare, NULL);
    if (r && r->alloc >= size) {
        size_t cap = r->alloc;
        memset(r, 0, sizeof(*r));
        r->alloc = cap;
        return r;
    }
    if (r)
        shm_req_put(be, r); /* too small for this one: kept for smaller ones */
    r = calloc(1, size);
    if (r)
        r->alloc = size;
    return r;
}

void shm_spare_free(shm_be_t *be)
{
    free(atomic_exchange(&be->spare, NULL));
}

static void shm_req_init(shm_req_t *r, shm_be_t *be, shm_peer_t *peer, nixl_op_t op, int mapped, int fallback,
                         uint64_t bytes)
{
    r->be = be;
    r->peer = peer;
    r->op = op;
    r->mapped = mapped;
    r->bytes = bytes;
    r->hdr.path = mapped ? SHM_PATH_MAP : SHM_PATH_CMA;
    r->hdr.fallback = (uint32_t)fallback;
    atomic_init(&r->status, NIXL_OK);
    atomic_init(&r->err, NIXL_OK);
    atomic_init(&r->cancel, 0);
}

/* shm.map: items are windows over x->iov; nothing per descriptor is kept.
 * uniform: the one length of every piece, or 0. */
static nixl_status_t shm_prepare_mapped(shm_be_t *be, const nixl_be_xfer_t *x, int fallback, uint64_t uniform,
                                        nixl_be_req_t **req_out)
{
    uint64_t bytes = x->bytes; /* the core's sum of the pieces */
    if (bytes == 0) {
        SHM_ERROR(be, "shm: transfer of %zu pieces moves no bytes", x->count);
        return NIXL_ERR_ZERO_LENGTH;
    }
    size_t nitems = (size_t)((bytes + be->chunk - 1) / be->chunk);
    shm_req_t *r = shm_req_alloc(be, sizeof(*r) + nitems * sizeof(shm_item_t));
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->items = (shm_item_t *)(r + 1);
    memset(r->items, 0, nitems * sizeof(shm_item_t));
    r->iov = x->iov;
    r->niov = x->count;
    if (uniform) {
        /* Pieces of one length: item k starts at byte k x chunk, in piece
         * (k x chunk) / length; nothing to walk. */
        if (nixl_unlikely(bytes / uniform != x->count || bytes % uniform)) {
            SHM_ERROR(be, "shm: the request's byte count %llu is not its %zu pieces of %llu bytes",
                      (unsigned long long)bytes, x->count, (unsigned long long)uniform);
            shm_req_put(be, r);
            return NIXL_ERR_INVALID_PARAM;
        }
        for (size_t k = 0; k < nitems; k++) {
            uint64_t start = (uint64_t)k * be->chunk, want = bytes - start;
            r->items[k].first = (size_t)(start / uniform);
            r->items[k].rfirst = (size_t)(start % uniform);
            r->items[k].bytes = (size_t)(want < be->chunk ? want : be->chunk);
        }
        goto done;
    }
    /* Cut the byte stream every 'chunk' bytes: item k starts at byte
     * k * chunk, found by walking the pieces once. */
    size_t piece = 0;
    uint64_t off = 0;
    for (size_t k = 0; k < nitems; k++) {
        shm_item_t *it = &r->items[k];
        it->first = piece;
        it->rfirst = (size_t)off;
        uint64_t want = bytes - (uint64_t)k * be->chunk;
        it->bytes = (size_t)(want < be->chunk ? want : be->chunk);
        uint64_t left = it->bytes;
        while (left > 0) {
            if (nixl_unlikely(piece == x->count)) {
                SHM_ERROR(be, "shm: the request's byte count %llu exceeds the sum of its %zu pieces",
                          (unsigned long long)bytes, x->count);
                shm_req_put(be, r);
                return NIXL_ERR_INVALID_PARAM;
            }
            uint64_t in_piece = x->iov[piece].len - off;
            if (in_piece > left) {
                off += left;
                break;
            }
            left -= in_piece;
            piece++;
            off = 0;
        }
    }
done:
    r->nitems = nitems;
    shm_req_init(r, be, x->peer, x->op, 1, fallback, bytes);
    *req_out = &r->hdr;
    return NIXL_OK;
}

static void shm_run_mapped(const shm_req_t *r, const shm_item_t *it)
{
    size_t piece = it->first;
    uint64_t off = it->rfirst, left = it->bytes;
    int write = r->op == NIXL_OP_WRITE;
    while (left > 0) {
        const nixl_be_iov_t *v = &r->iov[piece];
        const shm_rmd_t *rmd = v->rmd;
        uint64_t n = v->len - off;
        if (n > left)
            n = left;
        uint8_t *local = (uint8_t *)(uintptr_t)(v->laddr + off);
        uint8_t *remote = rmd->base + (v->raddr - rmd->addr) + off;
        if (write)
            memcpy(remote, local, (size_t)n);
        else
            memcpy(local, remote, (size_t)n);
        left -= n;
        piece++;
        off = 0;
    }
}

/* ---- shm.cma of pieces of one length (paged KV) ----
 *
 * Items of `per` whole pieces (chunk / length, at most SHM_IOV_MAX): no
 * layout pass, no splitting, one pass that writes both iovec arrays.
 * shm_cma_block allocates the request; shm_cma_piece adds piece j of an
 * item. */
static shm_req_t *shm_cma_block(shm_be_t *be, size_t pieces, uint64_t len, uint64_t *per_out, size_t *nitems_out,
                                nixl_status_t *st)
{
    *st = NIXL_ERR_TOO_BIG;
    uint64_t per = be->chunk / len;
    if (per > SHM_IOV_MAX)
        per = SHM_IOV_MAX;
    const size_t nitems = (size_t)((pieces + per - 1) / per);
    if (pieces > (SIZE_MAX / 2 - sizeof(shm_req_t)) / (2 * sizeof(struct iovec) + sizeof(shm_item_t))) {
        SHM_ERROR(be, "shm: transfer of %zu pieces is too large to describe", pieces);
        return NULL;
    }
    *st = NIXL_ERR_NO_MEMORY;
    shm_req_t *r = shm_req_alloc(be, sizeof(*r) + pieces * 2 * sizeof(struct iovec) + nitems * sizeof(shm_item_t));
    if (!r)
        return NULL;
    r->liov = (struct iovec *)(r + 1);
    r->riov = r->liov + pieces;
    r->items = (shm_item_t *)(r->riov + pieces);
    r->nseg = pieces;
    r->nitems = nitems;
    *per_out = per;
    *nitems_out = nitems;
    return r;
}

static inline void shm_cma_piece(shm_req_t *r, shm_item_t *it, size_t *nl, size_t *nr, size_t j, uint64_t local,
                                 uint64_t remote, size_t len)
{
    it->count += shm_iov_append(r->liov, nl, j, (void *)(uintptr_t)local, len);
    it->rcount += shm_iov_append(r->riov, nr, j, (void *)(uintptr_t)remote, len);
}

static nixl_status_t shm_prepare_cma_uniform(shm_be_t *be, const nixl_be_xfer_t *x, int fallback, uint64_t len,
                                             nixl_be_req_t **req_out)
{
    if (nixl_unlikely(x->bytes / len != x->count || x->bytes % len)) {
        SHM_ERROR(be, "shm: the request's byte count %llu is not its %zu pieces of %llu bytes",
                  (unsigned long long)x->bytes, x->count, (unsigned long long)len);
        return NIXL_ERR_INVALID_PARAM;
    }
    uint64_t per;
    size_t nitems;
    nixl_status_t st;
    shm_req_t *r = shm_cma_block(be, x->count, len, &per, &nitems, &st);
    if (!r)
        return st;
    size_t nl = 0, nr = 0, g = 0;
    for (size_t k = 0; k < nitems; k++) {
        shm_item_t *it = &r->items[k];
        const size_t n = x->count - g < per ? x->count - g : (size_t)per;
        *it = (shm_item_t){.first = nl, .rfirst = nr, .bytes = (size_t)(n * len)};
        const nixl_be_iov_t *v = &x->iov[g];
        for (size_t j = 0; j < n; j++)
            shm_cma_piece(r, it, &nl, &nr, j, v[j].laddr, v[j].raddr, (size_t)len);
        g += n;
    }
    shm_req_init(r, be, x->peer, x->op, 0, fallback, x->bytes);
    *req_out = &r->hdr;
    return NIXL_OK;
}

nixl_status_t shm_xfer_prepare(void *bev, const nixl_be_xfer_t *x, nixl_be_req_t **req_out)
{
    shm_be_t *be = bev;
    int mapped, fallback;
    uint64_t uniform;
    if (!x || !req_out)
        return NIXL_ERR_NULL;
    nixl_status_t st = shm_check_xfer(be, x, &mapped, &fallback, &uniform);
    if (st != NIXL_OK)
        return st;

    if (mapped)
        return shm_prepare_mapped(be, x, fallback, uniform, req_out);
    if (uniform && uniform <= be->chunk)
        return shm_prepare_cma_uniform(be, x, fallback, uniform, req_out);

    shm_layout_t lay = {0};
    uint64_t bytes = 0;
    for (size_t i = 0; i < x->count; i++) {
        for (uint64_t off = 0; off < x->iov[i].len; off += be->chunk) {
            uint64_t left = x->iov[i].len - off;
            shm_layout_add(&lay, left < be->chunk ? left : be->chunk, be->chunk);
        }
        bytes += x->iov[i].len;
    }
    if (lay.nseg == 0) {
        SHM_ERROR(be, "shm: transfer of %zu pieces moves no bytes", x->count);
        return NIXL_ERR_ZERO_LENGTH;
    }
    size_t seg_size = 2 * sizeof(struct iovec);
    if (lay.nseg > (SIZE_MAX / 2 - sizeof(shm_req_t)) / (seg_size + sizeof(shm_item_t))) {
        SHM_ERROR(be, "shm: transfer of %zu pieces is too large to describe", lay.nseg);
        return NIXL_ERR_TOO_BIG;
    }
    size_t size = sizeof(shm_req_t) + lay.nseg * seg_size + lay.nitems * sizeof(shm_item_t);
    shm_req_t *r = shm_req_alloc(be, size);
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    uint8_t *tail = (uint8_t *)(r + 1);
    r->liov = (struct iovec *)tail;
    r->riov = r->liov + lay.nseg;
    tail += lay.nseg * 2 * sizeof(struct iovec);
    r->items = (shm_item_t *)tail;
    memset(r->items, 0, lay.nitems * sizeof(shm_item_t)); /* the iovecs are written before they are read */

    shm_layout_t fill = {0};
    size_t nliov = 0, nriov = 0;
    for (size_t i = 0; i < x->count; i++) {
        const nixl_be_iov_t *v = &x->iov[i];
        for (uint64_t off = 0; off < v->len; off += be->chunk) {
            uint64_t left = v->len - off, len = left < be->chunk ? left : be->chunk;
            size_t nitems_before = fill.nitems;
            shm_layout_add(&fill, len, be->chunk);
            shm_item_t *it = &r->items[fill.nitems - 1];
            if (fill.nitems != nitems_before) {
                it->first = nliov;
                it->rfirst = nriov;
            }
            it->bytes += (size_t)len;
            uint8_t *local = (uint8_t *)(uintptr_t)(v->laddr + off);
            it->count += shm_iov_append(r->liov, &nliov, it->count, local, (size_t)len);
            it->rcount +=
                shm_iov_append(r->riov, &nriov, it->rcount, (void *)(uintptr_t)(v->raddr + off), (size_t)len);
        }
    }
    r->nseg = lay.nseg;
    r->nitems = lay.nitems;
    shm_req_init(r, be, x->peer, x->op, 0, fallback, bytes);
    *req_out = &r->hdr;
    return NIXL_OK;
}

/* shm.cma of an indexed request: the iovec arrays built from the layers
 * and slots (no pieces array in between), as for pieces of one length.
 * Pieces larger than 'chunk' are left to the pieces path, which splits
 * them. */
static nixl_status_t shm_prepare_indexed_cma(shm_be_t *be, const nixl_be_xfer_indexed_t *x, int fallback,
                                             nixl_be_req_t **req_out)
{
    const uint64_t item = x->item_len;
    if (item > be->chunk)
        return NIXL_ERR_NOT_SUPPORTED;
    const size_t pieces = x->layers * x->nslots, ns = x->nslots;
    uint64_t per;
    size_t nitems;
    nixl_status_t st;
    shm_req_t *r = shm_cma_block(be, pieces, item, &per, &nitems, &st);
    if (!r)
        return st;
    size_t nl = 0, nr = 0, l = 0, t = 0, g = 0;
    for (size_t k = 0; k < nitems; k++) {
        shm_item_t *it = &r->items[k];
        const size_t n = pieces - g < per ? pieces - g : (size_t)per;
        *it = (shm_item_t){.first = nl, .rfirst = nr, .bytes = (size_t)(n * item)};
        for (size_t j = 0; j < n; j++) {
            const nixl_be_layer_t *ly = &x->layer[l];
            shm_cma_piece(r, it, &nl, &nr, j, ly->lbase + (uint64_t)x->lslots[t] * x->lstride,
                          ly->rbase + (uint64_t)x->rslots[t] * x->rstride, (size_t)item);
            if (++t == ns) {
                t = 0;
                l++;
            }
        }
        g += n;
    }
    shm_req_init(r, be, x->peer, x->op, 0, fallback, x->bytes);
    *req_out = &r->hdr;
    return NIXL_OK;
}

/* ---- indexed requests in their own form: shm.map ----
 *
 * Paged KV as the engine holds it: layers x nslots pieces of item_len
 * bytes at base + slot x stride on each side.  Nothing per piece is
 * built: an item is a run of pieces in layer-major order, and the copy
 * computes each piece's two addresses from its layer and slot as it goes,
 * so preparing costs the layers, not the pieces.  The core checked that
 * every layer's span lies inside one registration on each side
 * (backend.h).  A request with a layer the peer did not let us map goes
 * to shm.cma (shm_prepare_indexed_cma). */
nixl_status_t shm_xfer_prepare_indexed(void *bev, const nixl_be_xfer_indexed_t *x, nixl_be_req_t **req_out)
{
    shm_be_t *be = bev;
    if (!x || !req_out || !x->peer || !x->layer || !x->lslots || !x->rslots)
        return NIXL_ERR_NULL;
    if (x->op != NIXL_OP_READ && x->op != NIXL_OP_WRITE) {
        SHM_ERROR(be, "shm: unknown transfer op %d", (int)x->op);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (x->local_mem != NIXL_MEM_DRAM || x->remote_mem != NIXL_MEM_DRAM) {
        SHM_ERROR(be, "shm: transfers between DRAM only (got %d -> %d)", (int)x->local_mem, (int)x->remote_mem);
        return NIXL_ERR_MEM_TYPE;
    }
    if (x->layers == 0 || x->nslots == 0 || x->item_len == 0)
        return NIXL_ERR_ZERO_LENGTH;
    const size_t pieces = x->layers * x->nslots;
    if (x->layers > SIZE_MAX / x->nslots || x->item_len > UINT64_MAX / pieces ||
        x->bytes != x->item_len * pieces) {
        SHM_ERROR(be, "shm: indexed request of %zu x %zu pieces of %llu bytes does not add up to %llu bytes",
                  x->layers, x->nslots, (unsigned long long)x->item_len, (unsigned long long)x->bytes);
        return NIXL_ERR_INVALID_PARAM;
    }
    int mapped = be->map_enabled, fallback = 0;
    if (!mapped || ((const shm_peer_t *)x->peer)->cma_regions != 0) {
        for (size_t l = 0; l < x->layers; l++) {
            const shm_rmd_t *rm = x->layer[l].rmd;
            if (!x->layer[l].lmd || !rm || rm->peer != x->peer) {
                SHM_ERROR(be, "shm: layer %zu of an indexed request has no registration of this backend on both sides",
                          l);
                return NIXL_ERR_INVALID_PARAM;
            }
            if (!rm->base)
                mapped = 0;
            if (rm->fallback)
                fallback = 1;
        }
    }
    if (!mapped)
        return shm_prepare_indexed_cma(be, x, fallback, req_out);
    /* Items of whole pieces, about 'chunk' bytes each (one piece when a
     * piece is larger). */
    const uint64_t per = x->item_len >= be->chunk ? 1 : be->chunk / x->item_len;
    const size_t nitems = (size_t)((pieces + per - 1) / per);
    shm_req_t *r = shm_req_alloc(be, sizeof(*r) + nitems * sizeof(shm_item_t));
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->items = (shm_item_t *)(r + 1);
    for (size_t k = 0; k < nitems; k++) {
        size_t first = (size_t)(k * per), n = pieces - first < per ? pieces - first : (size_t)per;
        r->items[k] = (shm_item_t){.first = first, .count = n, .bytes = (size_t)(n * x->item_len)};
    }
    r->nitems = nitems;
    r->layer = x->layer;
    r->lslots = x->lslots;
    r->rslots = x->rslots;
    r->nslots = x->nslots;
    r->lstride = x->lstride;
    r->rstride = x->rstride;
    r->item_len = x->item_len;
    shm_req_init(r, be, x->peer, x->op, 1, 0, x->bytes);
    *req_out = &r->hdr;
    return NIXL_OK;
}

/* Pieces [first, first + count) of an indexed request. */
static void shm_run_indexed(const shm_req_t *r, const shm_item_t *it)
{
    const size_t ns = r->nslots, item = (size_t)r->item_len;
    const uint64_t lst = r->lstride, rst = r->rstride;
    const int write = r->op == NIXL_OP_WRITE, adjacent = lst == item && rst == item;
    size_t l = it->first / ns, t = it->first % ns, left = it->count;
    while (left > 0) {
        const nixl_be_layer_t *ly = &r->layer[l];
        const shm_rmd_t *rmd = ly->rmd;
        uint8_t *lbase = (uint8_t *)(uintptr_t)ly->lbase, *rbase = rmd->base + (ly->rbase - rmd->addr);
        size_t stop = ns - t < left ? ns : t + left;
        left -= stop - t;
        while (t < stop) {
            const uint32_t ls = r->lslots[t], rs = r->rslots[t];
            size_t run = 1; /* pieces next to each other on both sides: one copy */
            if (adjacent)
                while (t + run < stop && r->lslots[t + run] == ls + run && r->rslots[t + run] == rs + run)
                    run++;
            uint8_t *local = lbase + (uint64_t)ls * lst, *remote = rbase + (uint64_t)rs * rst;
            if (write)
                memcpy(remote, local, item * run);
            else
                memcpy(local, remote, item * run);
            t += run;
        }
        t = 0;
        l++;
    }
}

/* Record the first error of a post and log it once. */
static nixl_status_t shm_req_fail(shm_req_t *r, nixl_status_t st, int err, size_t done, size_t want)
{
    int expected = NIXL_OK;
    if (!atomic_compare_exchange_strong(&r->err, &expected, (int)st))
        return st;
    shm_be_t *be = r->be;
    const char *call = r->op == NIXL_OP_WRITE ? "process_vm_writev to" : "process_vm_readv from";
    if (st == NIXL_ERR_PERMISSION) {
        char scope[32] = "no Yama";
        if (be->ptrace_scope >= 0)
            snprintf(scope, sizeof(scope), "is %d", be->ptrace_scope);
        SHM_ERROR(be, "shm: CMA refused by the kernel (%s peer %s (pid %d): %s): same uid needed and a "
                      "dumpable peer; kernel.yama.ptrace_scope must be 0 or 1 (%s), or grant CAP_SYS_PTRACE",
                  call, r->peer->name, (int)r->peer->pid, strerror(err), scope);
    } else if (st == NIXL_ERR_PEER_GONE) {
        SHM_ERROR(be, "shm: %s peer %s (pid %d): the peer has exited", call, r->peer->name, (int)r->peer->pid);
    } else if (err) {
        SHM_ERROR(be, "shm: %s peer %s failed: %s", call, r->peer->name, strerror(err));
    } else {
        SHM_ERROR(be, "shm: %s peer %s moved %zu of %zu bytes: part of a range is not mapped", call,
                  r->peer->name, done, want);
    }
    return st;
}

nixl_status_t shm_req_run_item(shm_req_t *r, size_t i)
{
    const shm_item_t *it = &r->items[i];
    if (r->layer) {
        shm_run_indexed(r, it);
        return NIXL_OK;
    }
    if (r->mapped) {
        shm_run_mapped(r, it);
        return NIXL_OK;
    }
    size_t want = it->bytes;
    ssize_t n;
    do {
        if (r->op == NIXL_OP_WRITE)
            n = process_vm_writev(r->peer->pid, r->liov + it->first, it->count, r->riov + it->rfirst, it->rcount, 0);
        else
            n = process_vm_readv(r->peer->pid, r->liov + it->first, it->count, r->riov + it->rfirst, it->rcount, 0);
    } while (n < 0 && errno == EINTR);
    if (nixl_likely((size_t)n == want))
        return NIXL_OK;
    if (n >= 0)
        return shm_req_fail(r, NIXL_ERR_XFER_FAILED, 0, (size_t)n, want);
    int e = errno;
    nixl_status_t st = (e == EPERM || e == EACCES) ? NIXL_ERR_PERMISSION
                       : e == ESRCH                ? NIXL_ERR_PEER_GONE
                                                   : NIXL_ERR_XFER_FAILED;
    return shm_req_fail(r, st, e, 0, want);
}

/* A mapped request without a notification has nothing that fails when
 * the peer is gone (its memory stays mapped here; CMA would fail with
 * ESRCH, the notification finds no socket), and the post's liveness check
 * may be up to SAMEHOST_LIVENESS_NS old: such a request looks once more,
 * after the copy, so that it never succeeds towards a peer that had
 * already exited when it was posted. */
static nixl_status_t shm_req_done_check(shm_req_t *r)
{
    if (r->mapped && !r->notif.has)
        return samehost_proc_alive(r->be->host, "shm", &r->peer->proc, 1);
    return NIXL_OK;
}

void shm_req_finish(shm_req_t *r, int canceled)
{
    int st = atomic_load(&r->err);
    if (st == NIXL_OK && canceled)
        st = NIXL_ERR_CANCELED;
    if (st == NIXL_OK && r->notif.has)
        st = samehost_notif_send_raw(&r->be->notif, &r->peer->notif, r->notif.buf, r->notif.len, &r->cancel);
    if (st == NIXL_OK)
        st = shm_req_done_check(r);
    atomic_store_explicit(&r->status, st, memory_order_release);
}

nixl_status_t shm_xfer_post(void *bev, nixl_be_req_t *hdr, const void *notif, size_t notif_len)
{
    shm_be_t *be = bev;
    shm_req_t *r = (shm_req_t *)hdr;
    if (!r)
        return NIXL_ERR_NULL;
    if (atomic_load_explicit(&r->status, memory_order_acquire) == NIXL_IN_PROG)
        return NIXL_ERR_IN_FLIGHT;
    nixl_status_t st = shm_peer_check(be, r->peer);
    if (st == NIXL_OK)
        st = samehost_notif_msg_set(&be->notif, &r->notif, notif, notif_len);
    if (nixl_unlikely(st != NIXL_OK)) {
        atomic_store(&r->status, st);
        return st;
    }
    atomic_store(&r->err, NIXL_OK);
    atomic_store(&r->cancel, 0);

    if (!be->pool || r->bytes <= be->inline_max) {
        for (size_t i = 0; i < r->nitems && st == NIXL_OK; i++)
            st = shm_req_run_item(r, i);
        if (st == NIXL_OK && r->notif.has)
            st = samehost_notif_send_raw(&be->notif, &r->peer->notif, r->notif.buf, r->notif.len, NULL);
        if (st == NIXL_OK)
            st = shm_req_done_check(r);
        atomic_store(&r->status, st);
        return st;
    }
    atomic_store(&r->status, NIXL_IN_PROG);
    shm_pool_submit(be->pool, r);
    return NIXL_IN_PROG;
}

nixl_status_t shm_xfer_status(void *bev, nixl_be_req_t *hdr)
{
    (void)bev;
    shm_req_t *r = (shm_req_t *)hdr;
    return (nixl_status_t)atomic_load_explicit(&r->status, memory_order_acquire);
}

/* The pool's workers only count the items left, and the last one sends
 * the notification only if the flag is still clear when it does (the
 * status then says which happened). */
void shm_xfer_cancel(void *bev, nixl_be_req_t *hdr)
{
    (void)bev;
    shm_req_t *r = (shm_req_t *)hdr;
    if (r && r->pooled)
        atomic_store(&r->cancel, 1);
}

void shm_xfer_release(void *bev, nixl_be_req_t *hdr)
{
    shm_be_t *be = bev;
    shm_req_t *r = (shm_req_t *)hdr;
    if (!r)
        return;
    if (r->pooled)
        shm_pool_cancel(be->pool, r);
    samehost_notif_msg_free(&r->notif);
    shm_req_put(be, r);
}
