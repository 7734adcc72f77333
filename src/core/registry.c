/*
 * registry.c - local memory registration.
 *
 * Each memory type has a sorted, non-overlapping array of regions so a
 * descriptor resolves with one binary search.  A batch registers all or
 * nothing: it is validated first (no empty range, no overflow, no overlap
 * inside the batch or with what is registered), then handed to every
 * backend that takes the memory type; any failure rolls back what was done.
 * Deregistration must name exactly the ranges that were registered, and is
 * refused while an in-flight request uses them.  It bumps reg_epoch so
 * requests made earlier re-resolve their descriptors before the next post.
 */
#include <stdlib.h>
#include <string.h>

#include "core/agent.h"
#include "cuda/cuda.h"
#include "util/log.h"

nixl_status_t nixl_dlist_check(const nixl_dlist_t *dl, const char *what)
{
    if (!dl) {
        NIXL_ERROR("%s: descriptor list is NULL", what);
        return NIXL_ERR_NULL;
    }
    if ((unsigned)dl->mem_type >= NIXL_MEM_TYPE_COUNT) {
        NIXL_ERROR("%s: memory type %d is not a nixl_mem_t", what, (int)dl->mem_type);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (dl->count == 0) {
        NIXL_ERROR("%s: descriptor list is empty", what);
        return NIXL_ERR_ZERO_LENGTH;
    }
    if (!dl->descs) {
        NIXL_ERROR("%s: descriptor array is NULL", what);
        return NIXL_ERR_NULL;
    }
    return NIXL_OK;
}

nixl_region_t *nixl_region_find(const nixl_region_index_t *idx, uint64_t addr, uint64_t len)
{
    size_t lo = 0, hi = idx->n;
    /* Last region with start <= addr. */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (idx->v[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    nixl_region_t *r = idx->v[lo - 1];
    uint64_t off = addr - r->addr;
    if (off >= r->len || len > r->len - off)
        return NULL;
    return r;
}

static int region_cmp(const void *a, const void *b)
{
    const nixl_region_t *x = *(nixl_region_t *const *)a, *y = *(nixl_region_t *const *)b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Does [addr, addr+len) overlap any region of idx? */
static int index_overlaps(const nixl_region_index_t *idx, uint64_t addr, uint64_t len)
{
    size_t lo = 0, hi = idx->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (idx->v[mid]->addr < addr + len)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* idx->v[lo-1] is the last region starting before our end. */
    return lo > 0 && idx->v[lo - 1]->addr + idx->v[lo - 1]->len > addr;
}

static void region_free(nixl_region_t *r)
{
    free(r->meta);
    free(r);
}

/* The context rule: a backend touches VRAM only with the memory's own
 * context current, whatever thread calls.  NULL saved = nothing bound. */
static void *region_bind(const nixl_region_t *r)
{
    void *saved = NULL;
    if (r->mem_type == NIXL_MEM_VRAM && r->cuda.ctx && nixl_cuda_ctx_bind(r->cuda.ctx, &saved) == NIXL_OK)
        return saved ? saved : (void *)r; /* non-NULL marks "restore" */
    return NULL;
}

static void region_unbind(const nixl_region_t *r, void *saved)
{
    if (saved)
        nixl_cuda_ctx_restore(saved == (const void *)r ? NULL : saved);
}

static void region_unreg(nixl_agent_t *agent, nixl_region_t *r)
{
    void *saved = region_bind(r);
    for (int b = 0; b < agent->num_backends; b++) {
        if (r->backend_mask & (1u << b)) {
            agent->backends[b]->ops->dereg(agent->backends[b]->be, r->md[b]);
            r->backend_mask &= ~(1u << b);
        }
    }
    region_unbind(r, saved);
}

/* Which backends of the agent take this registration. */
static nixl_status_t reg_targets(nixl_agent_t *agent, nixl_mem_t mem, const nixl_opt_args_t *opt, uint32_t *mask_out)
{
    uint32_t mask = 0;
    if (opt && (opt->field_mask & NIXL_OPT_BACKENDS)) {
        if (opt->num_backends && !opt->backends)
            return NIXL_ERR_NULL;
        for (size_t i = 0; i < opt->num_backends; i++) {
            nixl_backend_t *b = opt->backends[i];
            if (!b || b->agent != agent) {
                NIXL_ERROR("agent %s: backend %zu of the options does not belong to this agent", agent->name, i);
                return NIXL_ERR_INVALID_PARAM;
            }
            if (!(b->reg_mem_types & NIXL_MEM_BIT(mem))) {
                NIXL_ERROR("agent %s: backend %s does not take memory type %d", agent->name, b->ops->name, mem);
                return NIXL_ERR_MEM_TYPE;
            }
            mask |= 1u << b->index;
        }
    } else {
        for (int b = 0; b < agent->num_backends; b++)
            if (agent->backends[b]->reg_mem_types & NIXL_MEM_BIT(mem))
                mask |= 1u << b;
    }
    if (!mask) {
        NIXL_ERROR("agent %s: no backend of this agent takes memory type %d (create one first)", agent->name, mem);
        return NIXL_ERR_MEM_TYPE;
    }
    *mask_out = mask;
    return NIXL_OK;
}

static nixl_status_t region_reg(nixl_agent_t *agent, nixl_region_t *r, uint32_t mask)
{
    nixl_be_region_t br = {.mem_type = r->mem_type, .dev_id = r->dev_id, .addr = r->addr, .len = r->len,
                           .cuda = r->cuda};
    void *saved = region_bind(r);
    nixl_status_t st = NIXL_OK;
    for (int b = 0; b < agent->num_backends && st == NIXL_OK; b++) {
        if (!(mask & (1u << b)))
            continue;
        st = agent->backends[b]->ops->reg(agent->backends[b]->be, &br, &r->md[b]);
        if (st != NIXL_OK) {
            NIXL_ERROR("agent %s: backend %s could not register [0x%llx, +%llu): %s", agent->name,
                       agent->backends[b]->ops->name, (unsigned long long)r->addr, (unsigned long long)r->len,
                       nixl_strerror(st));
            /* Undo only what this call did. */
            for (int u = 0; u < b; u++) {
                if ((mask & (1u << u)) && (r->backend_mask & (1u << u))) {
                    agent->backends[u]->ops->dereg(agent->backends[u]->be, r->md[u]);
                    r->backend_mask &= ~(1u << u);
                }
            }
            break;
        }
        r->backend_mask |= 1u << b;
    }
    region_unbind(r, saved);
    return st;
}

/* Record what the driver says about a VRAM region: its device (which
 * must be the descriptor's), owning context, allocation, PCI bus id. */
static nixl_status_t region_classify_vram(nixl_region_t *r, size_t i)
{
    int is_device = 0;
    nixl_status_t st = nixl_cuda_ptr_query(r->addr, r->len, &r->cuda, &is_device);
    if (st == NIXL_ERR_NO_CUDA) {
        NIXL_ERROR("register: descriptor %zu is VRAM but there is no CUDA driver (NIXL_CUDA_LIB)", i);
        return st;
    }
    if (st != NIXL_OK)
        return st;
    if (!is_device) {
        NIXL_ERROR("register: descriptor %zu [0x%llx, +%llu) is listed as VRAM but is not device memory", i,
                   (unsigned long long)r->addr, (unsigned long long)r->len);
        return NIXL_ERR_MEM_TYPE;
    }
    if ((uint32_t)r->cuda.device != r->dev_id) {
        NIXL_ERROR("register: descriptor %zu says device %u but its memory is on device %d (%s)", i, r->dev_id,
                   r->cuda.device, r->cuda.pci_bus_id);
        return NIXL_ERR_INVALID_PARAM;
    }
    return NIXL_OK;
}

NIXL_API nixl_status_t nixl_mem_register(nixl_agent_t *agent, const nixl_dlist_t *dl, const nixl_opt_args_t *opt)
{
    if (!agent)
        return NIXL_ERR_NULL;
    nixl_status_t st = nixl_dlist_check(dl, "register");
    if (st != NIXL_OK)
        return st;

    nixl_region_t **batch = calloc(dl->count, sizeof(*batch));
    if (!batch)
        return NIXL_ERR_NO_MEMORY;
    size_t made = 0;
    for (; made < dl->count; made++) {
        const nixl_desc_t *d = &dl->descs[made];
        if (d->len == 0) {
            NIXL_ERROR("register: descriptor %zu has length 0", made);
            st = NIXL_ERR_ZERO_LENGTH;
            goto err_free;
        }
        if (d->addr == 0 || d->addr + d->len < d->addr) {
            NIXL_ERROR("register: descriptor %zu: address 0x%llx length %llu is not a valid range", made,
                       (unsigned long long)d->addr, (unsigned long long)d->len);
            st = NIXL_ERR_INVALID_PARAM;
            goto err_free;
        }
        if (d->meta_len && !d->meta) {
            st = NIXL_ERR_NULL;
            goto err_free;
        }
        nixl_region_t *r = calloc(1, sizeof(*r));
        if (!r) {
            st = NIXL_ERR_NO_MEMORY;
            goto err_free;
        }
        batch[made] = r;
        r->mem_type = dl->mem_type;
        r->dev_id = dl->mem_type == NIXL_MEM_DRAM ? 0 : d->dev_id;
        r->addr = d->addr;
        r->len = d->len;
        if (dl->mem_type == NIXL_MEM_VRAM) {
            st = region_classify_vram(r, made);
            if (st != NIXL_OK) {
                made++;
                goto err_free;
            }
        }
        if (d->meta_len) {
            r->meta = malloc(d->meta_len);
            if (!r->meta) {
                st = NIXL_ERR_NO_MEMORY;
                made++;
                goto err_free;
            }
            memcpy(r->meta, d->meta, d->meta_len);
            r->meta_len = d->meta_len;
        }
    }
    qsort(batch, dl->count, sizeof(*batch), region_cmp);
    for (size_t i = 1; i < dl->count; i++) {
        if (batch[i - 1]->addr + batch[i - 1]->len > batch[i]->addr) {
            NIXL_ERROR("register: descriptors at 0x%llx and 0x%llx overlap", (unsigned long long)batch[i - 1]->addr,
                       (unsigned long long)batch[i]->addr);
            st = NIXL_ERR_OVERLAP;
            goto err_free;
        }
    }

    nixl_agent_lock(agent);
    nixl_region_index_t *idx = &agent->regs[dl->mem_type];
    uint32_t mask;
    st = reg_targets(agent, dl->mem_type, opt, &mask);
    if (st != NIXL_OK)
        goto err_unlock;
    for (size_t i = 0; i < dl->count; i++) {
        if (index_overlaps(idx, batch[i]->addr, batch[i]->len)) {
            NIXL_ERROR("register: [0x%llx, +%llu) overlaps memory already registered",
                       (unsigned long long)batch[i]->addr, (unsigned long long)batch[i]->len);
            st = NIXL_ERR_OVERLAP;
            goto err_unlock;
        }
    }
    if (idx->n + dl->count > idx->cap) {
        size_t cap = idx->cap ? idx->cap : 64;
        while (cap < idx->n + dl->count)
            cap *= 2;
        nixl_region_t **v = realloc(idx->v, cap * sizeof(*v));
        if (!v) {
            st = NIXL_ERR_NO_MEMORY;
            goto err_unlock;
        }
        idx->v = v;
        idx->cap = cap;
    }
    size_t done = 0;
    for (; done < dl->count; done++) {
        st = region_reg(agent, batch[done], mask);
        if (st != NIXL_OK)
            goto err_unreg;
    }
    /* Merge the sorted batch into the sorted index, from the back. */
    size_t i = idx->n, j = dl->count, k = idx->n + dl->count;
    while (j > 0) {
        if (i > 0 && idx->v[i - 1]->addr > batch[j - 1]->addr)
            idx->v[--k] = idx->v[--i];
        else
            idx->v[--k] = batch[--j];
    }
    idx->n += dl->count;
    nixl_agent_unlock(agent);
    free(batch);
    return NIXL_OK;

err_unreg:
    while (done > 0)
        region_unreg(agent, batch[--done]);
err_unlock:
    nixl_agent_unlock(agent);
err_free:
    for (size_t i2 = 0; i2 < made; i2++)
        if (batch[i2])
            region_free(batch[i2]);
    free(batch);
    return st;
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

NIXL_API nixl_status_t nixl_mem_deregister(nixl_agent_t *agent, const nixl_dlist_t *dl, const nixl_opt_args_t *opt)
{
    (void)opt;
    if (!agent)
        return NIXL_ERR_NULL;
    nixl_status_t st = nixl_dlist_check(dl, "deregister");
    if (st != NIXL_OK)
        return st;
    nixl_region_t **found = calloc(dl->count, sizeof(*found));
    void **mds = calloc(dl->count * NIXL_AGENT_MAX_BACKENDS, sizeof(*mds));
    if (!found || !mds) {
        st = NIXL_ERR_NO_MEMORY;
        goto out_free;
    }

    nixl_agent_lock(agent);
    nixl_region_index_t *idx = &agent->regs[dl->mem_type];
    size_t nmd = 0;
    for (size_t i = 0; i < dl->count; i++) {
        const nixl_desc_t *d = &dl->descs[i];
        nixl_region_t *r = nixl_region_find(idx, d->addr, d->len ? d->len : 1);
        if (!r || r->addr != d->addr || r->len != d->len ||
            (dl->mem_type != NIXL_MEM_DRAM && r->dev_id != d->dev_id)) {
            NIXL_ERROR("deregister: descriptor %zu [0x%llx, +%llu) does not match a registration exactly", i,
                       (unsigned long long)d->addr, (unsigned long long)d->len);
            st = NIXL_ERR_REG_MISMATCH;
            goto out_unlock;
        }
        for (size_t j = 0; j < i; j++) {
            if (found[j] == r) {
                NIXL_ERROR("deregister: descriptor %zu names the same registration twice", i);
                st = NIXL_ERR_REG_MISMATCH;
                goto out_unlock;
            }
        }
        found[i] = r;
        for (int b = 0; b < agent->num_backends; b++)
            if (r->backend_mask & (1u << b))
                mds[nmd++] = r->md[b];
    }
    qsort(mds, nmd, sizeof(*mds), ptr_cmp);
    if (nixl_xfers_in_flight_use(agent, mds, nmd)) {
        NIXL_ERROR("deregister: a request in flight uses this memory; wait for it or release it first");
        st = NIXL_ERR_IN_FLIGHT;
        goto out_unlock;
    }
    for (size_t i = 0; i < dl->count; i++) {
        region_unreg(agent, found[i]);
        found[i]->len = 0; /* mark for compaction */
    }
    size_t w = 0;
    for (size_t i = 0; i < idx->n; i++) {
        if (idx->v[i]->len == 0)
            region_free(idx->v[i]);
        else
            idx->v[w++] = idx->v[i];
    }
    idx->n = w;
    agent->reg_epoch++;
out_unlock:
    nixl_agent_unlock(agent);
out_free:
    free(found);
    free(mds);
    return st;
}

/* Register what the agent already holds with a backend created later. */
nixl_status_t nixl_registry_add_backend(nixl_agent_t *agent, nixl_backend_t *b)
{
    for (int m = 0; m < NIXL_MEM_TYPE_COUNT; m++) {
        if (!(b->reg_mem_types & NIXL_MEM_BIT(m)))
            continue;
        nixl_region_index_t *idx = &agent->regs[m];
        for (size_t i = 0; i < idx->n; i++) {
            nixl_status_t st = region_reg(agent, idx->v[i], 1u << b->index);
            if (st != NIXL_OK) {
                for (size_t j = 0; j < i; j++) {
                    b->ops->dereg(b->be, idx->v[j]->md[b->index]);
                    idx->v[j]->backend_mask &= ~(1u << b->index);
                }
                return st;
            }
        }
    }
    return NIXL_OK;
}

void nixl_registry_destroy(nixl_agent_t *agent)
{
    for (int m = 0; m < NIXL_MEM_TYPE_COUNT; m++) {
        nixl_region_index_t *idx = &agent->regs[m];
        for (size_t i = 0; i < idx->n; i++) {
            region_unreg(agent, idx->v[i]);
            region_free(idx->v[i]);
        }
        free(idx->v);
        idx->v = NULL;
        idx->n = idx->cap = 0;
    }
}
