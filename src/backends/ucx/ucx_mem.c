/*
 * ucx_mem.c - memory of the ucx backend: local registrations (ucp_mem_map
 * of the caller's pages, then ucp_rkey_pack of their key) and peers' keys
 * (ucp_ep_rkey_unpack on the peer's endpoint).
 *
 * A key blob says which region it is for (address, length) and is refused
 * unless every field matches what the core's metadata says of that region:
 * UCX unpacks its own key bytes without checks of ours, so at least their
 * framing is ours to validate (ucx_rkey_parse; tests/unit/ucx).
 *
 * VRAM: with a UCX built with CUDA (ucp_context memory types, ucx.c) a GPU
 * region is mapped as CUDA memory with its context current (ucx_cu_enter)
 * and its key is UCX's, which cuda_ipc fills with its IPC handle.  Without
 * CUDA in UCX, or when UCX refuses the mapping, it is registered without a
 * UCX handle (failing would fail nixl_mem_register for every GPU buffer,
 * which another backend may carry) and its key says so; a request
 * touching it is NIXL_ERR_NO_PATH (ucx_xfer.c).
 */
#include <stdlib.h>
#include <string.h>

#include "ucx_int.h"

nixl_status_t ucx_rkey_parse(const nixl_be_region_t *region, const void *blob, size_t len, uint32_t *flags,
                             const uint8_t **packed, size_t *packed_len, const char **why)
{
    const uint8_t *p = blob;
    if (!blob || len < UCX_RKEY_HDR) {
        *why = "shorter than its header";
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u32(p) != UCX_RKEY_MAGIC) {
        *why = "bad magic";
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u16(p + 4) != UCX_RKEY_VERSION) {
        *why = "unknown version";
        return NIXL_ERR_BAD_METADATA;
    }
    uint32_t f = nixl_get_u16(p + 6);
    if (f & ~(UCX_RKEY_F_NOCUDA | UCX_RKEY_F_VRAM)) {
        *why = "unknown flags";
        return NIXL_ERR_BAD_METADATA;
    }
    if (((f & UCX_RKEY_F_VRAM) != 0) != (region->mem_type == NIXL_MEM_VRAM)) {
        *why = "VRAM flag does not match the region's memory type";
        return NIXL_ERR_BAD_METADATA;
    }
    if ((f & UCX_RKEY_F_NOCUDA) && !(f & UCX_RKEY_F_VRAM)) {
        *why = "no-key flag on a host region";
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u64(p + 8) != region->addr || nixl_get_u64(p + 16) != region->len) {
        *why = "region address or length differs from the metadata's";
        return NIXL_ERR_BAD_METADATA;
    }
    uint32_t plen = nixl_get_u32(p + 24);
    if ((size_t)plen != len - UCX_RKEY_HDR) {
        *why = "key length does not match the blob's";
        return NIXL_ERR_BAD_METADATA;
    }
    if ((f & UCX_RKEY_F_NOCUDA) ? plen != 0 : (plen == 0 || plen > UCX_RKEY_PACKED_MAX)) {
        *why = "key length out of range";
        return NIXL_ERR_BAD_METADATA;
    }
    *flags = f;
    *packed = plen ? p + UCX_RKEY_HDR : NULL;
    *packed_len = plen;
    return NIXL_OK;
}

nixl_status_t ucx_reg(void *bev, const nixl_be_region_t *region, void **md_out)
{
    ucx_be_t *be = bev;
    if (!region || !md_out)
        return NIXL_ERR_NULL;
    if (region->mem_type != NIXL_MEM_DRAM && region->mem_type != NIXL_MEM_VRAM)
        return NIXL_ERR_MEM_TYPE;
    ucx_reg_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NIXL_ERR_NO_MEMORY;
    g->addr = region->addr;
    g->len = region->len;
    g->mem = region->mem_type;
    int vram = region->mem_type == NIXL_MEM_VRAM;
    if (vram && !be->has_cuda) {
        *md_out = g;
        return NIXL_OK;
    }
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        .address = (void *)(uintptr_t)region->addr,
        .length = region->len,
        .memory_type = vram ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST,
    };
    ucx_lock(be);
    if (vram) {
        g->cu_ctx = region->cuda.ctx;
        if (!be->cu_ctx && g->cu_ctx) {
            be->cu_ctx = g->cu_ctx; /* from now on every holder of the lock binds it */
            UCX_DEBUG(be, "ucx: CUDA context %p (GPU %d) current under this instance's lock from now on", be->cu_ctx,
                      (int)region->cuda.device);
        }
        ucx_cu_use(be, g->cu_ctx);
    }
    ucs_status_t us = ucp_mem_map(be->ctx, &mp, &g->memh);
    if (us == UCS_OK) {
        us = ucp_rkey_pack(be->ctx, g->memh, &g->packed, &g->packed_len);
        if (us != UCS_OK)
            ucp_mem_unmap(be->ctx, g->memh);
        else if (g->packed_len == 0 || g->packed_len > UCX_RKEY_PACKED_MAX) {
            ucp_rkey_buffer_release(g->packed);
            ucp_mem_unmap(be->ctx, g->memh);
            us = UCS_ERR_EXCEEDS_LIMIT;
        }
    }
    ucx_unlock(be);
    if (us != UCS_OK && vram) {
        /* Another backend may carry it: registered, with no key of UCX. */
        UCX_WARN(be, "ucx: UCX cannot map %llu bytes of GPU memory at 0x%llx (GPU %d): %s; requests touching it "
                     "through ucx are NIXL_ERR_NO_PATH",
                 (unsigned long long)region->len, (unsigned long long)region->addr, (int)region->cuda.device,
                 ucs_status_string(us));
        g->memh = NULL;
        *md_out = g;
        return NIXL_OK;
    }
    if (us != UCS_OK) {
        UCX_ERROR(be, "ucx: cannot register %llu bytes at 0x%llx: %s", (unsigned long long)region->len,
                  (unsigned long long)region->addr, ucs_status_string(us));
        free(g);
        return us == UCS_ERR_NO_MEMORY ? NIXL_ERR_NO_MEMORY : NIXL_ERR_BACKEND;
    }
    *md_out = g;
    return NIXL_OK;
}

void ucx_dereg(void *bev, void *md)
{
    ucx_be_t *be = bev;
    ucx_reg_t *g = md;
    if (!g)
        return;
    if (g->memh) {
        ucx_lock(be);
        ucx_cu_use(be, g->cu_ctx);
        ucp_rkey_buffer_release(g->packed);
        ucp_mem_unmap(be->ctx, g->memh);
        ucx_unlock(be);
    }
    free(g);
}

nixl_status_t ucx_rkey_pack(void *bev, void *md, void *buf, size_t *len)
{
    (void)bev;
    ucx_reg_t *g = md;
    if (!g || !len)
        return NIXL_ERR_NULL;
    size_t plen = g->memh ? g->packed_len : 0;
    size_t need = UCX_RKEY_HDR + plen;
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    nixl_put_u32(p, UCX_RKEY_MAGIC);
    nixl_put_u16(p + 4, UCX_RKEY_VERSION);
    nixl_put_u16(p + 6, (g->mem == NIXL_MEM_VRAM ? UCX_RKEY_F_VRAM : 0) | (g->memh ? 0 : UCX_RKEY_F_NOCUDA));
    nixl_put_u64(p + 8, g->addr);
    nixl_put_u64(p + 16, g->len);
    nixl_put_u32(p + 24, (uint32_t)plen);
    if (plen)
        memcpy(p + UCX_RKEY_HDR, g->packed, plen);
    *len = need;
    return NIXL_OK;
}

nixl_status_t ucx_rkey_load(void *bev, void *peerv, const nixl_be_region_t *region, const void *rkey,
                            size_t rkey_len, void **rmd_out)
{
    ucx_be_t *be = bev;
    ucx_peer_t *peer = peerv;
    if (!peer || !region || !rmd_out)
        return NIXL_ERR_NULL;
    uint32_t flags;
    const uint8_t *packed;
    size_t plen;
    const char *why = "";
    nixl_status_t st = ucx_rkey_parse(region, rkey, rkey_len, &flags, &packed, &plen, &why);
    if (st != NIXL_OK) {
        UCX_ERROR(be, "ucx: key of a region of peer %s refused: %s", peer->name, why);
        return st;
    }
    ucx_rmd_t *rm = calloc(1, sizeof(*rm));
    if (!rm)
        return NIXL_ERR_NO_MEMORY;
    rm->addr = region->addr;
    rm->len = region->len;
    rm->flags = flags;
    void *copy = NULL;
    if (packed) {
        copy = malloc(plen); /* aligned, for UCX's reader */
        if (!copy) {
            free(rm);
            return NIXL_ERR_NO_MEMORY;
        }
        memcpy(copy, packed, plen);
    }
    ucx_lock(be);
    if (packed) {
        ucs_status_t us = peer->ep ? ucp_ep_rkey_unpack(peer->ep, copy, &rm->rkey) : UCS_ERR_NOT_CONNECTED;
        if (us != UCS_OK) {
            int connected = peer->ep != NULL;
            ucx_unlock(be);
            UCX_ERROR(be, "ucx: key of a region of peer %s: ucp_ep_rkey_unpack: %s", peer->name,
                      ucs_status_string(us));
            free(copy);
            free(rm);
            return connected ? NIXL_ERR_BAD_METADATA : NIXL_ERR_PEER_GONE;
        }
        rm->gen = peer->gen;
        rm->packed = copy; /* kept: a renewed endpoint unpacks it again */
        rm->packed_len = plen;
    }
    rm->peer = peer;
    rm->next = peer->rmds;
    if (peer->rmds)
        peer->rmds->prev = rm;
    peer->rmds = rm;
    ucx_unlock(be);
    *rmd_out = rm;
    return NIXL_OK;
}

void ucx_rkey_unload(void *bev, void *rmdv)
{
    ucx_be_t *be = bev;
    ucx_rmd_t *rm = rmdv;
    if (!rm)
        return;
    ucx_lock(be);
    if (rm->rkey)
        ucp_rkey_destroy(rm->rkey);
    if (rm->peer) {
        if (rm->prev)
            rm->prev->next = rm->next;
        else
            rm->peer->rmds = rm->next;
        if (rm->next)
            rm->next->prev = rm->prev;
    }
    ucx_unlock(be);
    free(rm->packed);
    free(rm);
}
