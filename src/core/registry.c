/*
 * registry.c - local memory registration.
 *
 * Each memory type has a sorted, non-overlapping array of regions so a
 * descriptor resolves with one binary search.  A batch registers all or
 * nothing: it is validated first (no empty range, no overflow, no overlap
 * inside the batch or with what is registered), then handed to every
 * backend that takes the memory type as (region, backend) jobs on the
 * registration pool (reg_pool.c): every job is attempted, and when any
 * fails, what did register is deregistered and the first error in the
 * caller's descriptor order is returned.  Workers only call backends; the
 * region records (md, backend_mask) are written on the calling thread once
 * the pool has joined.
 * Deregistration must name exactly the ranges that were registered, and is
 * refused while an in-flight request uses them.  It bumps reg_epoch so
 * requests made earlier re-resolve their descriptors before the next post.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/agent.h"
#include "core/be_call.h"
#include "core/reg_peers.h"
#include "core/reg_pool.h"
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

nixl_status_t nixl_dlist_file_keys(const nixl_dlist_t *in, int reg, const char *what, nixl_dlist_t *out,
                                   nixl_desc_t **tmp)
{
    *tmp = NULL;
    nixl_status_t st = nixl_dlist_check(in, what);
    if (st != NIXL_OK)
        return st;
    *out = *in;
    if (in->mem_type != NIXL_MEM_FILE)
        return NIXL_OK;
    nixl_desc_t *d = malloc(in->count * sizeof(*d));
    if (!d)
        return NIXL_ERR_NO_MEMORY;
    for (size_t i = 0; i < in->count; i++) {
        d[i] = in->descs[i];
        uint64_t off = d[i].addr, len = d[i].len;
        int path_mode = 0;
        if (reg == NIXL_FILE_KEYS_REG) {
            nixl_file_path_t fp;
            path_mode = nixl_file_path_parse(d[i].meta, d[i].meta_len, &fp, what, i);
            if (path_mode < 0) {
                free(d);
                return NIXL_ERR_INVALID_PARAM;
            }
        }
        if (d[i].dev_id > NIXL_FILE_FD_MAX) {
            NIXL_ERROR("%s: FILE descriptor %zu: %s %u is above %u", what, i, path_mode ? "file id" : "fd",
                       d[i].dev_id, NIXL_FILE_FD_MAX);
            free(d);
            return NIXL_ERR_INVALID_PARAM;
        }
        if (reg == NIXL_FILE_KEYS_REG && !path_mode && fcntl((int)d[i].dev_id, F_GETFD) < 0) {
            NIXL_ERROR("%s: FILE descriptor %zu: fd %u is not an open file descriptor (or give meta "
                       "\"rw:<path>\" for the library to open the file)",
                       what, i, d[i].dev_id);
            free(d);
            return NIXL_ERR_INVALID_PARAM;
        }
        if (reg && len == 0 && off < NIXL_FILE_OFFSET_END)
            len = NIXL_FILE_OFFSET_END - off; /* NIXL's 0: to the end, however far it grows */
        if (off >= NIXL_FILE_OFFSET_END || len > NIXL_FILE_OFFSET_END - off) {
            NIXL_ERROR("%s: FILE descriptor %zu: offset %llu length %llu reaches past %llu bytes (8 TiB), the "
                       "largest file offset this library addresses",
                       what, i, (unsigned long long)off, (unsigned long long)len,
                       (unsigned long long)NIXL_FILE_OFFSET_END);
            free(d);
            return NIXL_ERR_INVALID_PARAM;
        }
        d[i].addr = nixl_file_key(d[i].dev_id, off);
        d[i].len = len;
    }
    out->descs = d;
    *tmp = d;
    return NIXL_OK;
}

nixl_region_t *nixl_region_find(const nixl_region_index_t *idx, uint64_t addr, uint64_t len)
{
    long i = nixl_region_index(idx, addr, len);
    return i < 0 ? NULL : idx->v[i];
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
    if (r->fd_owned)
        close(r->fd);
    free(r->meta);
    free(r);
}

/* Path mode: open the file meta names (validated by nixl_dlist_file_keys)
 * for region r; the region owns the fd. */
static nixl_status_t region_open_path(nixl_region_t *r, const nixl_desc_t *d, size_t i)
{
    nixl_file_path_t fp;
    if (nixl_file_path_parse(d->meta, d->meta_len, &fp, "register", i) != 1)
        return NIXL_OK;
    int fd = open(fp.path, fp.flags | O_CLOEXEC, 0644);
    if (fd < 0) {
        NIXL_ERROR("register: FILE descriptor %zu (file id %u): open(\"%s\"): %s", i, d->dev_id, fp.path,
                   strerror(errno));
        return NIXL_ERR_INVALID_PARAM;
    }
    r->fd = fd;
    r->fd_owned = 1;
    return NIXL_OK;
}

/* NIXL's rule: a file registered in path mode has a file id of its own;
 * no other registration (of the batch or before) uses it.  So where a
 * path-mode region is, it is the only one of its id, and one look at the
 * first region of an id says whether the id is free, used, or a path's.
 * batch: sorted by address (regions of one id are neighbours). */
static nixl_status_t file_ids_check(const nixl_region_index_t *idx, nixl_region_t *const *batch, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const nixl_region_t *r = batch[i];
        const uint64_t lo = nixl_file_key(r->dev_id, 0), hi = lo + NIXL_FILE_OFFSET_END;
        size_t a = 0, b = idx->n;
        while (a < b) {
            size_t mid = (a + b) / 2;
            if (idx->v[mid]->addr + idx->v[mid]->len <= lo)
                a = mid + 1;
            else
                b = mid;
        }
        int before = a < idx->n && idx->v[a]->addr < hi;
        int clash = before && (r->fd_owned || idx->v[a]->fd_owned);
        for (size_t j = i ? i - 1 : 1; !clash && j <= i + 1 && j < n; j += 2)
            clash = batch[j]->dev_id == r->dev_id && (r->fd_owned || batch[j]->fd_owned);
        if (clash) {
            NIXL_ERROR("register: file id %u is already in use: a file registered by path (meta \"rw:<path>\") "
                       "needs a dev_id no other FILE registration uses",
                       r->dev_id);
            return NIXL_ERR_INVALID_PARAM;
        }
    }
    return NIXL_OK;
}

/* The context rule (a backend touches VRAM only with the memory's own
 * context current, whatever thread calls) is kept by the doorway:
 * be_reg / be_dereg bind the region's recorded context. */
static void region_unreg(nixl_agent_t *agent, nixl_region_t *r)
{
    for (int b = 0; b < agent->num_backends; b++) {
        if (r->backend_mask & (1u << b)) {
            be_dereg(agent->backends[b], r, r->md[b]);
            r->backend_mask &= ~(1u << b);
        }
    }
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
                NIXL_ERROR("agent %s: backend %s does not take memory type %d", agent->name, be_name(b), mem);
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

/* One (region, backend) registration of a batch.  md is the job's own
 * output: the region's record is updated by the caller after the join. */
typedef struct reg_job {
    nixl_region_t *r;
    nixl_backend_t *b;
    void *md;
} reg_job_t;

typedef struct reg_run {
    const char *agent_name;
    reg_job_t *jobs;
} reg_run_t;

/* On a pool worker: the context rule holds there too, so the region's
 * recorded context is bound around the call, per job. */
static nixl_status_t reg_job_run(void *ctx, size_t j)
{
    reg_run_t *run = ctx;
    reg_job_t *job = &run->jobs[j];
    const nixl_region_t *r = job->r;
    nixl_status_t st = be_reg(job->b, r, &job->md);
    if (st != NIXL_OK)
        NIXL_ERROR("agent %s: backend %s could not register [0x%llx, +%llu): %s", run->agent_name,
                   be_name(job->b), (unsigned long long)r->addr, (unsigned long long)r->len, nixl_strerror(st));
    return st;
}

static nixl_status_t dereg_job_run(void *ctx, size_t j)
{
    reg_run_t *run = ctx;
    reg_job_t *job = &run->jobs[j];
    be_dereg(job->b, job->r, job->md);
    return NIXL_OK;
}

static unsigned reg_cap_now(void *peers)
{
    return nixl_reg_cap_auto(nixl_reg_peers_count(peers));
}

/* Run every job on the pool, sized by NIXL_REG_CONCURRENCY for a batch of
 * nbufs buffers.  lane[j] is the job's backend index; backends without
 * NIXL_CAP_REG_MT get one job at a time. */
static void reg_jobs_run(nixl_agent_t *agent, reg_job_t *jobs, const uint8_t *lane, size_t njobs, size_t nbufs,
                         nixl_reg_job_fn fn, nixl_status_t *status)
{
    reg_run_t run = {.agent_name = agent->name, .jobs = jobs};
    nixl_reg_batch_t batch = {.njobs = njobs, .workers = 1, .run = fn, .ctx = &run, .lane = lane, .status = status};
    for (int b = 0; b < agent->num_backends; b++)
        if (!(be_caps(agent->backends[b]) & NIXL_CAP_REG_MT))
            batch.serial_lanes |= 1u << b;
    nixl_reg_peers_t peers = {.fd = -1, .slot = -1};
    if (njobs > 1) {
        unsigned n = 1;
        nixl_reg_cap_mode_t mode = nixl_reg_cap_mode(&n);
        /* Join even with a fixed cap: agents on auto must count us. */
        nixl_reg_peers_join(&peers);
        if (mode == NIXL_REG_CAP_FIXED) {
            batch.workers = n;
        } else if (mode == NIXL_REG_CAP_PER_BUFFER) {
            batch.workers = nbufs > 1000000 ? 1000000u : (unsigned)nbufs;
        } else {
            batch.workers = reg_cap_now(&peers);
            batch.cap_now = reg_cap_now;
            batch.cap_ctx = &peers;
        }
    }
    NIXL_DEBUG("agent %s: %zu registration jobs, at most %u at once", agent->name, njobs, batch.workers);
    nixl_reg_pool_run(&batch);
    nixl_reg_peers_leave(&peers);
}

/* Register regions[0..n) (in the caller's order) with the backends of mask.
 * All or nothing; see the top of the file. */
static nixl_status_t regions_reg(nixl_agent_t *agent, nixl_region_t *const *regions, size_t n, uint32_t mask)
{
    nixl_backend_t *bk[NIXL_AGENT_MAX_BACKENDS];
    size_t nb = 0;
    for (int b = 0; b < agent->num_backends; b++)
        if (mask & (1u << b))
            bk[nb++] = agent->backends[b];
    if (n == 0 || nb == 0)
        return NIXL_OK;
    size_t njobs = n * nb;
    reg_job_t *jobs = calloc(njobs, sizeof(*jobs));
    nixl_status_t *status = calloc(njobs, sizeof(*status));
    uint8_t *lane = malloc(njobs);
    nixl_status_t st = NIXL_OK;
    if (!jobs || !status || !lane) {
        st = NIXL_ERR_NO_MEMORY;
        goto out_free;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < nb; k++) {
            jobs[i * nb + k] = (reg_job_t){.r = regions[i], .b = bk[k]};
            lane[i * nb + k] = (uint8_t)bk[k]->index;
        }
    }
    reg_jobs_run(agent, jobs, lane, njobs, n, reg_job_run, status);

    size_t failed = 0, kept = 0;
    for (size_t j = 0; j < njobs; j++) {
        if (status[j] == NIXL_OK)
            continue;
        if (st == NIXL_OK)
            st = status[j];
        failed++;
    }
    if (st == NIXL_OK) {
        for (size_t j = 0; j < njobs; j++) {
            jobs[j].r->md[jobs[j].b->index] = jobs[j].md;
            jobs[j].r->backend_mask |= 1u << jobs[j].b->index;
        }
        goto out_free;
    }
    /* Roll back: deregister what did register, on the pool as well. */
    for (size_t j = 0; j < njobs; j++) {
        if (status[j] == NIXL_OK) {
            lane[kept] = lane[j];
            jobs[kept++] = jobs[j];
        }
    }
    if (kept)
        reg_jobs_run(agent, jobs, lane, kept, n, dereg_job_run, status);
    NIXL_ERROR("agent %s: %zu of %zu registrations failed; the %zu that succeeded were undone", agent->name, failed,
               njobs, kept);
out_free:
    free(jobs);
    free(status);
    free(lane);
    return st;
}

/* Deregister regions[0..n) from the backends of mask they are registered
 * with, on the pool; clears their bits. */
static void regions_dereg(nixl_agent_t *agent, nixl_region_t *const *regions, size_t n, uint32_t mask)
{
    size_t njobs = 0;
    for (size_t i = 0; i < n; i++)
        njobs += (size_t)__builtin_popcount(regions[i]->backend_mask & mask);
    if (njobs == 0)
        return;
    reg_job_t *jobs = calloc(njobs, sizeof(*jobs));
    nixl_status_t *status = calloc(njobs, sizeof(*status));
    uint8_t *lane = malloc(njobs);
    if (!jobs || !status || !lane) {
        /* Out of memory: one at a time on this thread still works. */
        for (size_t i = 0; i < n; i++) {
            for (int b = 0; b < agent->num_backends; b++) {
                if (regions[i]->backend_mask & mask & (1u << b)) {
                    be_dereg(agent->backends[b], regions[i], regions[i]->md[b]);
                    regions[i]->backend_mask &= ~(1u << b);
                }
            }
        }
        goto out_free;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        for (int b = 0; b < agent->num_backends; b++) {
            if (regions[i]->backend_mask & mask & (1u << b)) {
                jobs[j] = (reg_job_t){.r = regions[i], .b = agent->backends[b], .md = regions[i]->md[b]};
                lane[j++] = (uint8_t)b;
            }
        }
    }
    reg_jobs_run(agent, jobs, lane, njobs, n, dereg_job_run, status);
    for (size_t i = 0; i < n; i++)
        regions[i]->backend_mask &= ~mask;
out_free:
    free(jobs);
    free(status);
    free(lane);
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

static nixl_status_t mem_register_keyed(nixl_agent_t *agent, const nixl_dlist_t *dl, const nixl_opt_args_t *opt);

NIXL_API nixl_status_t nixl_mem_register(nixl_agent_t *agent, const nixl_dlist_t *dl, const nixl_opt_args_t *opt)
{
    if (!agent)
        return NIXL_ERR_NULL;
    nixl_dlist_t k;
    nixl_desc_t *tmp;
    nixl_status_t st = nixl_dlist_file_keys(dl, NIXL_FILE_KEYS_REG, "register", &k, &tmp);
    if (st == NIXL_OK)
        st = mem_register_keyed(agent, &k, opt);
    free(tmp);
    return st;
}

static nixl_status_t mem_register_keyed(nixl_agent_t *agent, const nixl_dlist_t *dl, const nixl_opt_args_t *opt)
{
    nixl_status_t st = NIXL_OK;

    nixl_region_t **batch = calloc(dl->count, sizeof(*batch)), **order = NULL;
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
        r->fd = dl->mem_type == NIXL_MEM_FILE ? (int)d->dev_id : -1;
        if (dl->mem_type == NIXL_MEM_FILE) {
            st = region_open_path(r, d, made);
            if (st != NIXL_OK) {
                made++;
                goto err_free;
            }
        }
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
    /* The pool works (and reports the first error) in the caller's order;
     * the index wants address order. */
    order = malloc(dl->count * sizeof(*order));
    if (!order) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_free;
    }
    memcpy(order, batch, dl->count * sizeof(*order));
    qsort(batch, dl->count, sizeof(*batch), region_cmp);
    for (size_t i = 1; i < dl->count; i++) {
        if (batch[i - 1]->addr + batch[i - 1]->len > batch[i]->addr) {
            if (dl->mem_type == NIXL_MEM_FILE)
                NIXL_ERROR("register: FILE ranges of fd %u at offsets %llu and %llu overlap", batch[i]->dev_id,
                           (unsigned long long)nixl_file_offset(batch[i - 1]->addr),
                           (unsigned long long)nixl_file_offset(batch[i]->addr));
            else
                NIXL_ERROR("register: descriptors at 0x%llx and 0x%llx overlap",
                           (unsigned long long)batch[i - 1]->addr, (unsigned long long)batch[i]->addr);
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
    if (dl->mem_type == NIXL_MEM_FILE && (st = file_ids_check(idx, batch, dl->count)) != NIXL_OK)
        goto err_unlock;
    for (size_t i = 0; i < dl->count; i++) {
        if (index_overlaps(idx, batch[i]->addr, batch[i]->len)) {
            NIXL_ERROR("register: [0x%llx, +%llu) overlaps memory already registered",
                       (unsigned long long)batch[i]->addr, (unsigned long long)batch[i]->len);
            st = NIXL_ERR_OVERLAP;
            goto err_unlock;
        }
    }
    if (NIXL_ARRAY_RESERVE(idx->v, idx->cap, idx->n + dl->count, 64)) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_unlock;
    }
    st = regions_reg(agent, order, dl->count, mask);
    if (st != NIXL_OK)
        goto err_unlock;
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
    free(order);
    free(batch);
    return NIXL_OK;

err_unlock:
    nixl_agent_unlock(agent);
err_free:
    for (size_t i2 = 0; i2 < made; i2++)
        if (batch[i2])
            region_free(batch[i2]);
    free(order);
    free(batch);
    return st;
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

static nixl_status_t mem_deregister_keyed(nixl_agent_t *agent, const nixl_dlist_t *dl);

NIXL_API nixl_status_t nixl_mem_deregister(nixl_agent_t *agent, const nixl_dlist_t *dl, const nixl_opt_args_t *opt)
{
    (void)opt;
    if (!agent)
        return NIXL_ERR_NULL;
    nixl_dlist_t k;
    nixl_desc_t *tmp;
    nixl_status_t st = nixl_dlist_file_keys(dl, NIXL_FILE_KEYS_DEREG, "deregister", &k, &tmp);
    if (st == NIXL_OK)
        st = mem_deregister_keyed(agent, &k);
    free(tmp);
    return st;
}

static nixl_status_t mem_deregister_keyed(nixl_agent_t *agent, const nixl_dlist_t *dl)
{
    nixl_status_t st = NIXL_OK;
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

/* Register what the agent already holds with a backend created later:
 * every memory type it takes, all or nothing. */
nixl_status_t nixl_registry_add_backend(nixl_agent_t *agent, nixl_backend_t *b)
{
    uint32_t bit = 1u << b->index;
    for (int m = 0; m < NIXL_MEM_TYPE_COUNT; m++) {
        if (!(b->reg_mem_types & NIXL_MEM_BIT(m)))
            continue;
        nixl_status_t st = regions_reg(agent, agent->regs[m].v, agent->regs[m].n, bit);
        if (st != NIXL_OK) {
            for (int u = 0; u < m; u++)
                regions_dereg(agent, agent->regs[u].v, agent->regs[u].n, bit);
            return st;
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
