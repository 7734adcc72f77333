/*
 * lf_mem.c - memory registration and remote keys.
 *
 * A region is registered on every rail.  Keys follow the provider's MR
 * mode: with FI_MR_PROV_KEY the provider picks them and we read them back;
 * otherwise we request keys, unique per domain (a counter per rail).  The
 * remote key blob carries one key per rail and whether the owner's provider
 * addresses memory by virtual address (FI_MR_VIRT_ADDR) or by offset into
 * the region; the initiator turns remote addresses into what the owner
 * expects once, at prepare.
 *
 * Remote key blob (little-endian): u32 magic "LFK1", u8 version, u8 rails,
 * u8 flags (bit 0: virtual addresses), u8 0, then u64 key per rail.
 */
#include <stdlib.h>
#include <string.h>

#include "lf_int.h"

#define LF_RKEY_MAGIC 0x314b464cu /* "LFK1" */
#define LF_RKEY_VERSION 1
#define LF_RKEY_FIXED 8

static void lf_reg_close(lf_reg_t *g)
{
    for (unsigned i = 0; i < g->nrails; i++)
        if (g->mr[i])
            fi_close(&g->mr[i]->fid);
    free(g);
}

nixl_status_t lf_reg(void *bev, const nixl_be_region_t *region, void **md_out)
{
    lf_be_t *be = bev;
    if (!region || !md_out)
        return NIXL_ERR_NULL;
    if (region->mem_type != NIXL_MEM_DRAM) {
        LF_ERROR(be, "libfabric: memory type %d is not supported yet (DRAM only)", (int)region->mem_type);
        return NIXL_ERR_MEM_TYPE;
    }
    if (region->len == 0 || region->addr == 0)
        return NIXL_ERR_INVALID_PARAM;
    lf_reg_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NIXL_ERR_NO_MEMORY;
    g->addr = region->addr;
    g->len = region->len;
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    nixl_status_t st = NIXL_OK;
    pthread_mutex_lock(&be->lock);
    for (unsigned i = 0; i < be->nrails; i++) {
        lf_rail_t *r = &be->rails[i];
        struct fid_mr *mr = NULL;
        const char *what = "fi_mr_reg";
        int ret = fi_mr_reg(r->domain, (void *)(uintptr_t)region->addr, region->len, access, 0, r->next_key, 0, &mr,
                            NULL);
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
        g->nrails = i + 1;
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
    size_t need = LF_RKEY_FIXED + 8 * (size_t)g->nrails;
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    lf_put_u32(p, LF_RKEY_MAGIC);
    p[4] = LF_RKEY_VERSION;
    p[5] = (uint8_t)g->nrails;
    p[6] = be->virt_addr ? 1 : 0;
    p[7] = 0;
    for (unsigned i = 0; i < g->nrails; i++)
        lf_put_u64(p + LF_RKEY_FIXED + 8 * i, g->key[i]);
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
    if (!p || rkey_len < LF_RKEY_FIXED || lf_get_u32(p) != LF_RKEY_MAGIC) {
        LF_ERROR(be, "libfabric: remote key of a region of peer %s is malformed (%zu bytes)",
                 c->name[0] ? c->name : "?", rkey_len);
        return NIXL_ERR_BAD_METADATA;
    }
    if (p[4] != LF_RKEY_VERSION) {
        LF_ERROR(be, "libfabric: remote key version %u, we speak %u", p[4], LF_RKEY_VERSION);
        return NIXL_ERR_MD_VERSION;
    }
    unsigned n = p[5];
    if (n == 0 || n != c->rnrails || rkey_len != LF_RKEY_FIXED + 8 * (size_t)n || (p[6] & ~1u) || p[7]) {
        LF_ERROR(be, "libfabric: remote key of %zu bytes for %u rails does not fit a peer with %u rails", rkey_len,
                 n, c->rnrails);
        return NIXL_ERR_BAD_METADATA;
    }
    if (region->mem_type != NIXL_MEM_DRAM || region->len == 0 || region->addr + region->len < region->addr) {
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
    m->virt_addr = p[6] & 1;
    m->nrails = n;
    for (unsigned i = 0; i < n; i++)
        m->keys[i] = lf_get_u64(p + LF_RKEY_FIXED + 8 * i);
    *rmd_out = m;
    return NIXL_OK;
}

void lf_rkey_unload(void *bev, void *rmd)
{
    (void)bev;
    free(rmd);
}
