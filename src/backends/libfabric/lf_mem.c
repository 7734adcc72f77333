/*
 * lf_mem.c - memory registration and remote keys.
 *
 * A region is registered on the rails near its memory (rails=local, the
 * default): a GPU's memory on the NICs that share its PCI switch (found by
 * the GPU's PCI bus id, so CUDA_VISIBLE_DEVICES cannot mislead it), host
 * memory on the NICs of its NUMA node; on every rail with rails=all or
 * when the topology cannot tell (lf_topo.c).  Keys follow the provider's MR
 * mode: with FI_MR_PROV_KEY the provider picks them and we read them back;
 * otherwise we request keys, unique per domain (a counter per rail).  The
 * remote key blob says which rails have a key, carries those keys and
 * whether the owner's provider addresses memory by virtual address
 * (FI_MR_VIRT_ADDR) or by offset into the region; the initiator turns
 * remote addresses into what the owner expects once, at prepare, and pairs
 * its rails holding the local region with the owner's rails holding the
 * remote one (lf_xfer.c).
 *
 * VRAM: with FI_HMEM (CUDA) it is registered with fi_mr_regattr, iface
 * CUDA, the region's device ordinal and FI_HMEM_DEVICE_ONLY, while the core
 * holds the memory's context current (the context rule).  The flag is true
 * of every VRAM region (the core classifies managed memory as host memory,
 * src/cuda/cuda.c) and it is what the shm provider (libfabric 1.20 to 2.6
 * read) asks before it moves device memory by CUDA IPC, one copy by the
 * peer; without it shm stages every byte through host bounce buffers (SAR).
 * shm before 2.6.1 does not get the flag: its IPC completes before the
 * data landed (lf_rail.c, lf_shm_path).  Without HMEM the registration still
 * succeeds (the same buffer goes to cuda_ipc, and failing here would fail
 * nixl_mem_register for every VRAM buffer) but on no rail: its key says so
 * and any request touching it, ours or a peer's, is NIXL_ERR_NO_PATH.
 *
 * Remote key blob (little-endian): u32 magic "LFK1", u8 version (2), u8
 * rails (the owner's), u8 flags (bit 0: virtual addresses; bit 1: VRAM
 * without HMEM, an empty rail set), u8 0, u32 rail set (bit i: rail i has
 * a key), u32 0, then u64 key per rail of the set, lowest rail first.
 */
#include <stdlib.h>
#include <string.h>

#include "lf_int.h"

#define LF_RKEY_MAGIC 0x314b464cu /* "LFK1" */
#define LF_RKEY_VERSION 2
#define LF_RKEY_FIXED 16
#define LF_RKEY_VIRT 1u
#define LF_RKEY_NO_HMEM 2u

static void lf_reg_close(lf_reg_t *g)
{
    for (unsigned i = 0; i < LF_MAX_RAILS; i++)
        if (g->mr[i])
            fi_close(&g->mr[i]->fid);
    free(g);
}

uint32_t lf_reg_rails(lf_be_t *be, const nixl_be_region_t *region)
{
    if (!be->topo)
        return be->all_rails;
    uint32_t m;
    if (region->mem_type == NIXL_MEM_VRAM) {
        char bus_id[sizeof(region->cuda.pci_bus_id) + 1];
        memcpy(bus_id, region->cuda.pci_bus_id, sizeof(region->cuda.pci_bus_id));
        bus_id[sizeof(bus_id) - 1] = '\0';
        m = lf_topo_gpu_rails(be->topo, bus_id);
    } else {
        m = lf_topo_numa_rails(be->topo, lf_topo_addr_numa(be->topo, (const void *)(uintptr_t)region->addr));
    }
    m &= be->all_rails;
    return m ? m : be->all_rails;
}

/* One registration on rail r: host memory with fi_mr_reg, VRAM with
 * fi_mr_regattr naming CUDA and the device.  *what: the call that failed. */
static int lf_mr_reg_one(lf_be_t *be, lf_rail_t *r, const nixl_be_region_t *region, struct fid_mr **mr,
                         const char **what)
{
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    void *addr = (void *)(uintptr_t)region->addr;
    if (region->mem_type == NIXL_MEM_VRAM) {
        struct iovec iov = {.iov_base = addr, .iov_len = region->len};
        struct fi_mr_attr attr = {
            .mr_iov = &iov,
            .iov_count = 1,
            .access = access,
            .requested_key = r->next_key,
            .iface = FI_HMEM_CUDA,
        };
        attr.device.cuda = region->cuda.device;
        *what = "fi_mr_regattr (FI_HMEM_CUDA)";
        /* shm before 2.6.1 is given no IPC (it completes too early). */
        uint64_t flags = be->shm_hmem && !be->shm_ipc_landed ? 0 : FI_HMEM_DEVICE_ONLY;
        return fi_mr_regattr(r->domain, &attr, flags, mr);
    }
    *what = "fi_mr_reg";
    return fi_mr_reg(r->domain, addr, region->len, access, 0, r->next_key, 0, mr, NULL);
}

/* The provider said FI_HMEM but cannot register CUDA memory (built
 * without it): VRAM is unreachable from now on, said once. */
static int lf_hmem_unsupported(lf_be_t *be, int ret)
{
    if (ret != -FI_ENOSYS && ret != -FI_EOPNOTSUPP && ret != -FI_ENODATA)
        return 0;
    be->hmem = 0;
    LF_WARN(be, "libfabric: provider %s offers FI_HMEM but cannot register CUDA memory (%s): VRAM is registered on "
                "no rail and cannot be moved over libfabric",
            be->prov_name, fi_strerror(-ret));
    return 1;
}

nixl_status_t lf_reg(void *bev, const nixl_be_region_t *region, void **md_out)
{
    lf_be_t *be = bev;
    if (!region || !md_out)
        return NIXL_ERR_NULL;
    if (region->mem_type != NIXL_MEM_DRAM && region->mem_type != NIXL_MEM_VRAM) {
        LF_ERROR(be, "libfabric: memory type %d is not supported (DRAM and VRAM)", (int)region->mem_type);
        return NIXL_ERR_MEM_TYPE;
    }
    if (region->len == 0 || region->addr == 0)
        return NIXL_ERR_INVALID_PARAM;
    lf_reg_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NIXL_ERR_NO_MEMORY;
    g->addr = region->addr;
    g->len = region->len;
    int vram = region->mem_type == NIXL_MEM_VRAM;
    if (vram) {
        g->cuda_ctx = region->cuda.ctx;
        g->cuda_ipc = (region->cuda.flags & NIXL_CUDA_MEM_LEGACY_IPC) != 0;
    }
    nixl_status_t st = NIXL_OK;
    pthread_mutex_lock(&be->lock);
    if (vram && !be->hmem) {
        LF_DEBUG(be, "libfabric: VRAM [0x%llx, +%llu) registered on no rail: provider %s has no CUDA HMEM support",
                 (unsigned long long)region->addr, (unsigned long long)region->len, be->prov_name);
        g->no_hmem = 1;
        pthread_mutex_unlock(&be->lock);
        *md_out = g;
        return NIXL_OK;
    }
    uint32_t rails = lf_reg_rails(be, region);
    if (be->topo) {
        char set[128];
        LF_DEBUG(be, "libfabric: [0x%llx, +%llu) goes on rails %s", (unsigned long long)region->addr,
                 (unsigned long long)region->len, lf_topo_mask_str(rails, set, sizeof(set)));
    }
    for (unsigned i = 0; i < be->nrails; i++) {
        if (!(rails & (1u << i)))
            continue;
        lf_rail_t *r = &be->rails[i];
        struct fid_mr *mr = NULL;
        const char *what;
        int ret = lf_mr_reg_one(be, r, region, &mr, &what);
        if (ret && vram && i == (unsigned)__builtin_ctz(rails) && lf_hmem_unsupported(be, ret)) {
            g->no_hmem = 1;
            break;
        }
        if (!ret && be->mr_endpoint) {
            what = "fi_mr_bind";
            ret = fi_mr_bind(mr, &r->ep->fid, 0);
            if (!ret) {
                what = "fi_mr_enable";
                ret = fi_mr_enable(mr);
            }
        }
        if (ret) {
            LF_ERROR(be, "libfabric: %s of [0x%llx, +%llu) on rail %u (%s) failed: %s", what,
                     (unsigned long long)region->addr, (unsigned long long)region->len, i,
                     r->info->domain_attr->name, fi_strerror(-ret));
            if (mr)
                fi_close(&mr->fid);
            st = ret == -FI_ENOMEM ? NIXL_ERR_NO_MEMORY : NIXL_ERR_BACKEND;
            break;
        }
        r->next_key++;
        g->mr[i] = mr;
        g->desc[i] = fi_mr_desc(mr);
        g->key[i] = fi_mr_key(mr);
        g->rails |= 1u << i;
        if (g->key[i] == FI_KEY_NOTAVAIL) {
            /* Raw keys (FI_MR_RAW) were not asked for; a provider handing
             * them anyway cannot be driven by this backend. */
            LF_ERROR(be, "libfabric: rail %u (%s) has no plain key for a registration", i,
                     r->info->domain_attr->name);
            st = NIXL_ERR_BACKEND;
            break;
        }
    }
    if (st != NIXL_OK) {
        lf_reg_close(g);
        pthread_mutex_unlock(&be->lock);
        return st;
    }
    pthread_mutex_unlock(&be->lock);
    *md_out = g;
    return NIXL_OK;
}

void lf_dereg(void *bev, void *md)
{
    lf_be_t *be = bev;
    if (!md)
        return;
    pthread_mutex_lock(&be->lock);
    lf_reg_close(md);
    pthread_mutex_unlock(&be->lock);
}

nixl_status_t lf_rkey_pack(void *bev, void *md, void *buf, size_t *len)
{
    lf_be_t *be = bev;
    lf_reg_t *g = md;
    if (!len || !g)
        return NIXL_ERR_NULL;
    size_t need = LF_RKEY_FIXED + 8 * (size_t)__builtin_popcount(g->rails);
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    nixl_put_u32(p, LF_RKEY_MAGIC);
    p[4] = LF_RKEY_VERSION;
    p[5] = (uint8_t)be->nrails;
    p[6] = (uint8_t)((be->virt_addr ? LF_RKEY_VIRT : 0) | (g->no_hmem ? LF_RKEY_NO_HMEM : 0));
    p[7] = 0;
    nixl_put_u32(p + 8, g->rails);
    nixl_put_u32(p + 12, 0);
    size_t k = 0;
    for (unsigned i = 0; i < be->nrails; i++)
        if (g->rails & (1u << i))
            nixl_put_u64(p + LF_RKEY_FIXED + 8 * k++, g->key[i]);
    *len = need;
    return NIXL_OK;
}

nixl_status_t lf_rkey_load(void *bev, void *peer, const nixl_be_region_t *region, const void *rkey, size_t rkey_len,
                           void **rmd_out)
{
    lf_be_t *be = bev;
    lf_conn_t *c = peer;
    const uint8_t *p = rkey;
    if (!c || !region || !rmd_out)
        return NIXL_ERR_NULL;
    if (!p || rkey_len < LF_RKEY_FIXED || nixl_get_u32(p) != LF_RKEY_MAGIC) {
        LF_ERROR(be, "libfabric: remote key of a region of peer %s is malformed (%zu bytes)",
                 c->name[0] ? c->name : "?", rkey_len);
        return NIXL_ERR_BAD_METADATA;
    }
    if (p[4] != LF_RKEY_VERSION) {
        LF_ERROR(be, "libfabric: remote key version %u, we speak %u", p[4], LF_RKEY_VERSION);
        return NIXL_ERR_MD_VERSION;
    }
    unsigned n = p[5];
    uint32_t set = nixl_get_u32(p + 8);
    uint32_t all = n >= 32 ? UINT32_MAX : (1u << n) - 1;
    int no_hmem = (p[6] & LF_RKEY_NO_HMEM) != 0;
    /* An empty rail set exactly when the owner could not register its VRAM. */
    if (n == 0 || n != c->rnrails || (p[6] & ~(LF_RKEY_VIRT | LF_RKEY_NO_HMEM)) || p[7] || (set == 0) != no_hmem ||
        (no_hmem && region->mem_type != NIXL_MEM_VRAM) || (set & ~all) || nixl_get_u32(p + 12) ||
        rkey_len != LF_RKEY_FIXED + 8 * (size_t)__builtin_popcount(set)) {
        LF_ERROR(be, "libfabric: remote key of %zu bytes for rails 0x%x of %u does not fit a peer with %u rails",
                 rkey_len, set, n, c->rnrails);
        return NIXL_ERR_BAD_METADATA;
    }
    if ((region->mem_type != NIXL_MEM_DRAM && region->mem_type != NIXL_MEM_VRAM) || region->len == 0 ||
        region->addr + region->len < region->addr) {
        LF_ERROR(be, "libfabric: remote region [0x%llx, +%llu) of memory type %d is not usable",
                 (unsigned long long)region->addr, (unsigned long long)region->len, (int)region->mem_type);
        return NIXL_ERR_BAD_METADATA;
    }
    lf_rmd_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NIXL_ERR_NO_MEMORY;
    m->conn = c;
    m->addr = region->addr;
    m->len = region->len;
    m->virt_addr = (p[6] & LF_RKEY_VIRT) != 0;
    m->no_hmem = no_hmem;
    m->nrails = n;
    m->rails = set;
    size_t k = 0;
    for (unsigned i = 0; i < n; i++)
        if (set & (1u << i))
            m->keys[i] = nixl_get_u64(p + LF_RKEY_FIXED + 8 * k++);
    *rmd_out = m;
    return NIXL_OK;
}

void lf_rkey_unload(void *bev, void *rmd)
{
    (void)bev;
    free(rmd);
}
