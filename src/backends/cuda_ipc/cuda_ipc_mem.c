/*
 * cuda_ipc_mem.c - our VRAM exported to peers, a peer's VRAM imported here.
 *
 * Export (reg): legacy cudaMalloc memory gets one cuIpcGetMemHandle of its
 * allocation (the key carries the region's offset in it); VMM memory
 * (cuMemCreate, expandable segments) may span several mappings, and each is
 * exported as a POSIX file descriptor we keep open: the peer fetches it with
 * pidfd_getfd (same uid, the ptrace rule of CMA).  Memory that can be
 * exported neither way still registers (other backends may want it), is
 * published as "no handle" and warned: only agents of this process reach it.
 *
 * Import: a key is mapped into the context that will copy the first time a
 * request needs it, and the mapping is cached process-wide, refcounted by
 * the keys using it: each allocation is opened once per context however
 * many regions, requests or reloads of the peer refer to it.  Keys name the
 * owner's GPU by PCI bus id, never by ordinal (ordinals differ between
 * processes with CUDA_VISIBLE_DEVICES).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cuda_ipc_int.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* rkey: see cip_rkey_pack. */
#define CIP_RKEY_MAGIC 0x4b504943u /* "CIPK" */
#define CIP_RKEY_VERSION 1
#define CIP_RKEY_FIXED 56
#define CIP_RKEY_LEGACY_LEN (CIP_RKEY_FIXED + CU_IPC_HANDLE_SIZE)
#define CIP_RKEY_SEG 24

enum { CIP_IMPORT_SELF = 3 };

struct cip_import {
    cip_import_t *next;
    int refs;
    int kind;
    CUcontext ctx;
    int kernel_ok;
    /* key */
    CUipcMemHandle handle;
    uint32_t owner_pid;
    uint64_t owner_start, export_id;
    /* our mapping of the key's alloc_base */
    uint64_t base, size;
    size_t nseg, nmapped;
    CUmemGenericAllocationHandle h[CIP_MAX_SEGS];
    uint64_t seg_off[CIP_MAX_SEGS], seg_size[CIP_MAX_SEGS]; /* VMM: where each mapping lies in ours */
};

/* Imports are per process: two agents importing one allocation share it. */
static pthread_mutex_t g_imports_lock = PTHREAD_MUTEX_INITIALIZER;
static cip_import_t *g_imports;

/* ---- export ---- */

static void cip_reg_free_segs(cip_be_t *be, cip_reg_t *m)
{
    for (size_t i = 0; i < m->nseg; i++) {
        if (m->seg[i].fd >= 0)
            close(m->seg[i].fd);
        be->cu->cuMemRelease(m->seg[i].h);
    }
    free(m->seg);
    m->seg = NULL;
    m->nseg = 0;
}

/* Every VMM mapping covering the region, exported as a file descriptor.
 * Returns the reason it cannot be, or NULL. */
static const char *cip_export_vmm(cip_be_t *be, cip_reg_t *m, CUresult *rc_out)
{
    const nixl_cuda_api_t *cu = be->cu;
    *rc_out = CUDA_SUCCESS;
    if (!cu->cuMemRetainAllocationHandle || !cu->cuMemExportToShareableHandle || !cu->cuMemRelease)
        return "the CUDA driver lacks the VMM export calls";
    m->seg = calloc(CIP_MAX_SEGS, sizeof(*m->seg));
    if (!m->seg)
        return "out of memory";
    uint64_t cur = m->addr, end = m->addr + m->len;
    while (cur < end) {
        if (m->nseg == CIP_MAX_SEGS)
            return "the region spans more than " NIXL_BE_STR_(CIP_MAX_SEGS) " VMM mappings";
        CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
        void *mbase = NULL;
        size_t msize = 0;
        void *data[2] = {&mbase, &msize};
        CUresult rc = cu->cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)cur);
        if (rc != CUDA_SUCCESS || !mbase || !msize || (uint64_t)(uintptr_t)mbase > cur ||
            (uint64_t)(uintptr_t)mbase + msize <= cur) {
            *rc_out = rc;
            return "a part of the region is not mapped";
        }
        cip_seg_t *s = &m->seg[m->nseg];
        s->fd = -1;
        rc = cu->cuMemRetainAllocationHandle(&s->h, (void *)(uintptr_t)cur);
        if (rc != CUDA_SUCCESS) {
            *rc_out = rc;
            return "cuMemRetainAllocationHandle failed";
        }
        m->nseg++; /* from here on dereg releases it */
        int fd = -1;
        rc = cu->cuMemExportToShareableHandle(&fd, s->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (rc != CUDA_SUCCESS) {
            *rc_out = rc;
            return "the allocation cannot be exported as a POSIX file descriptor (create it with "
                   "requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)";
        }
        s->fd = fd;
        s->base = (uint64_t)(uintptr_t)mbase;
        s->size = msize;
        cur = s->base + s->size;
    }
    m->alloc_base = m->seg[0].base;
    m->alloc_size = m->seg[m->nseg - 1].base + m->seg[m->nseg - 1].size - m->alloc_base;
    return NULL;
}

nixl_status_t cip_reg(void *bev, const nixl_be_region_t *r, void **md_out)
{
    cip_be_t *be = bev;
    if (!r || !md_out)
        return NIXL_ERR_NULL;
    if (r->mem_type == NIXL_MEM_DRAM) {
        /* Local side only (never published): nothing to export, no driver
         * call, so an agent that never moves VRAM never calls cuInit. */
        cip_reg_t *h = calloc(1, sizeof(*h));
        if (!h)
            return NIXL_ERR_NO_MEMORY;
        h->addr = r->addr;
        h->len = r->len;
        h->host = 1;
        *md_out = h;
        return NIXL_OK;
    }
    if (r->mem_type != NIXL_MEM_VRAM) {
        CIP_ERROR(be, "cuda_ipc: registers VRAM (and local DRAM) only (got memory type %d)", (int)r->mem_type);
        return NIXL_ERR_MEM_TYPE;
    }
    if (!cip_api(be))
        return NIXL_ERR_NO_CUDA;
    if (!r->cuda.ctx) {
        CIP_ERROR(be, "cuda_ipc: VRAM [0x%llx, +%llu) comes without its owning context", (unsigned long long)r->addr,
                  (unsigned long long)r->len);
        return NIXL_ERR_INVALID_PARAM;
    }
    cip_reg_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NIXL_ERR_NO_MEMORY;
    m->addr = r->addr;
    m->len = r->len;
    m->ctx = r->cuda.ctx;
    m->device = r->cuda.device;
    memcpy(m->bus_id, r->cuda.pci_bus_id, sizeof(m->bus_id));
    m->bus_id[sizeof(m->bus_id) - 1] = '\0';
    pthread_mutex_lock(&be->lock);
    m->export_id = ++be->export_seq;
    pthread_mutex_unlock(&be->lock);

    const char *why = NULL;
    CUresult rc = CUDA_SUCCESS;
    if (r->cuda.flags & NIXL_CUDA_MEM_VMM) {
        why = cip_export_vmm(be, m, &rc);
        if (!why)
            m->kind = CIP_KIND_VMM;
        else
            cip_reg_free_segs(be, m);
    } else if (r->cuda.flags & NIXL_CUDA_MEM_LEGACY_IPC) {
        /* The core made the owning context current. */
        rc = be->cu->cuIpcGetMemHandle(&m->handle, (CUdeviceptr)r->cuda.alloc_base);
        if (rc == CUDA_SUCCESS) {
            m->kind = CIP_KIND_LEGACY;
            m->alloc_base = r->cuda.alloc_base;
            m->alloc_size = r->cuda.alloc_size;
        } else {
            why = "cuIpcGetMemHandle failed";
        }
    } else {
        why = "the driver says it is neither legacy-IPC capable nor VMM memory (a stream-ordered pool?)";
    }
    if (m->kind == CIP_KIND_NONE) {
        m->alloc_base = m->addr;
        m->alloc_size = m->len;
        CIP_WARN(be, "cuda_ipc: VRAM [0x%llx, +%llu) on GPU %d (%s) has no IPC handle: %s%s%s; only agents of this "
                     "process can reach it",
                 (unsigned long long)m->addr, (unsigned long long)m->len, m->device, m->bus_id, why,
                 rc != CUDA_SUCCESS ? ": " : "", rc != CUDA_SUCCESS ? cip_cu_err(be, rc) : "");
    }
    pthread_rwlock_wrlock(&be->reg_rw);
    m->next = be->regs;
    if (be->regs)
        be->regs->prev = m;
    be->regs = m;
    pthread_rwlock_unlock(&be->reg_rw);
    *md_out = m;
    return NIXL_OK;
}

void cip_dereg(void *bev, void *md)
{
    cip_be_t *be = bev;
    cip_reg_t *m = md;
    if (!m)
        return;
    if (m->host) {
        free(m);
        return;
    }
    /* Waits for a staged copy into it to end (the server reads under reg_rw). */
    pthread_rwlock_wrlock(&be->reg_rw);
    if (m->prev)
        m->prev->next = m->next;
    else
        be->regs = m->next;
    if (m->next)
        m->next->prev = m->prev;
    pthread_rwlock_unlock(&be->reg_rw);
    if (m->kind == CIP_KIND_VMM)
        cip_reg_free_segs(be, m);
    free(m);
}

/* Layout, little-endian:
 *   0 u32 magic, 4 u16 version, 6 u16 kind, 8 u32 owner's device ordinal,
 *  12 u32 VMM mappings, 16 u64 export id, 24 char[16] PCI bus id,
 *  40 u64 allocation (or mapping span) base, 48 u64 its size,
 *  56 legacy: the 64-byte IPC handle; VMM: per mapping u64 base, u64 size,
 *     u32 fd number in the owner, u32 zero. */
nixl_status_t cip_rkey_pack(void *bev, void *md, void *buf, size_t *len)
{
    (void)bev;
    const cip_reg_t *m = md;
    if (!m || !len)
        return NIXL_ERR_NULL;
    if (m->host) {
        *len = 0; /* never published (local_mem_types); nothing to say */
        return NIXL_OK;
    }
    size_t need = m->kind == CIP_KIND_LEGACY ? CIP_RKEY_LEGACY_LEN
                  : m->kind == CIP_KIND_VMM  ? CIP_RKEY_FIXED + m->nseg * CIP_RKEY_SEG
                                             : CIP_RKEY_FIXED;
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    memset(p, 0, need);
    nixl_put_u32(p, CIP_RKEY_MAGIC);
    nixl_put_u16(p + 4, CIP_RKEY_VERSION);
    nixl_put_u16(p + 6, (uint16_t)m->kind);
    nixl_put_u32(p + 8, (uint32_t)m->device);
    nixl_put_u32(p + 12, (uint32_t)m->nseg);
    nixl_put_u64(p + 16, m->export_id);
    memcpy(p + 24, m->bus_id, 16);
    nixl_put_u64(p + 40, m->alloc_base);
    nixl_put_u64(p + 48, m->alloc_size);
    if (m->kind == CIP_KIND_LEGACY)
        memcpy(p + CIP_RKEY_FIXED, &m->handle, CU_IPC_HANDLE_SIZE);
    for (size_t i = 0; m->kind == CIP_KIND_VMM && i < m->nseg; i++) {
        uint8_t *s = p + CIP_RKEY_FIXED + i * CIP_RKEY_SEG;
        nixl_put_u64(s, m->seg[i].base);
        nixl_put_u64(s + 8, m->seg[i].size);
        nixl_put_u32(s + 16, (uint32_t)m->seg[i].fd);
    }
    *len = need;
    return NIXL_OK;
}

static int cip_bus_id_valid(const uint8_t *b)
{
    size_t n = 0;
    while (n < 16 && b[n])
        n++;
    if (n == 0 || n == 16)
        return 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.'))
            return 0;
    }
    for (size_t i = n; i < 16; i++)
        if (b[i])
            return 0;
    return 1;
}

static int cip_inside(uint64_t addr, uint64_t len, uint64_t base, uint64_t size)
{
    return addr >= base && len <= size && addr - base <= size - len;
}

nixl_status_t cip_rkey_load(void *bev, void *peerv, const nixl_be_region_t *region, const void *rkey,
                            size_t rkey_len, void **rmd_out)
{
    cip_be_t *be = bev;
    cip_peer_t *peer = peerv;
    const uint8_t *p = rkey;
    if (!peer || !region || !rmd_out)
        return NIXL_ERR_NULL;
    const char *who = peer->name;
    if (region->mem_type != NIXL_MEM_VRAM) {
        CIP_ERROR(be, "cuda_ipc: peer %s published a region of memory type %d", who, (int)region->mem_type);
        return NIXL_ERR_BAD_METADATA;
    }
    if (!p || rkey_len < CIP_RKEY_FIXED || nixl_get_u32(p) != CIP_RKEY_MAGIC) {
        CIP_ERROR(be, "cuda_ipc: key of peer %s region [0x%llx, +%llu) is %zu bytes or has a bad magic number", who,
                  (unsigned long long)region->addr, (unsigned long long)region->len, rkey_len);
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u16(p + 4) != CIP_RKEY_VERSION) {
        CIP_ERROR(be, "cuda_ipc: key of peer %s is version %u, we speak %u", who, nixl_get_u16(p + 4),
                  CIP_RKEY_VERSION);
        return NIXL_ERR_MD_VERSION;
    }
    int kind = nixl_get_u16(p + 6);
    uint32_t nseg = nixl_get_u32(p + 12);
    uint64_t base = nixl_get_u64(p + 40), size = nixl_get_u64(p + 48);
    size_t want = kind == CIP_KIND_LEGACY ? CIP_RKEY_LEGACY_LEN
                  : kind == CIP_KIND_VMM  ? CIP_RKEY_FIXED + (size_t)nseg * CIP_RKEY_SEG
                                          : CIP_RKEY_FIXED;
    if (kind > CIP_KIND_VMM || rkey_len != want || (kind == CIP_KIND_VMM) != (nseg != 0) || nseg > CIP_MAX_SEGS ||
        !cip_bus_id_valid(p + 24) || !cip_inside(region->addr, region->len, base, size) || region->len == 0) {
        CIP_ERROR(be, "cuda_ipc: key of peer %s region [0x%llx, +%llu) is malformed (kind %d, %u mappings, %zu "
                      "bytes, allocation [0x%llx, +%llu))",
                  who, (unsigned long long)region->addr, (unsigned long long)region->len, kind, nseg, rkey_len,
                  (unsigned long long)base, (unsigned long long)size);
        return NIXL_ERR_BAD_METADATA;
    }
    cip_rmd_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->peer = peer;
    r->addr = region->addr;
    r->len = region->len;
    r->kind = kind;
    r->owner_device = nixl_get_u32(p + 8);
    r->export_id = nixl_get_u64(p + 16);
    memcpy(r->bus_id, p + 24, 16);
    r->alloc_base = base;
    r->alloc_size = size;
    if (kind == CIP_KIND_LEGACY)
        memcpy(&r->handle, p + CIP_RKEY_FIXED, CU_IPC_HANDLE_SIZE);
    if (kind == CIP_KIND_VMM) {
        r->seg = calloc(nseg, sizeof(*r->seg));
        if (!r->seg) {
            free(r);
            return NIXL_ERR_NO_MEMORY;
        }
        uint64_t next = base;
        for (uint32_t i = 0; i < nseg; i++) {
            const uint8_t *s = p + CIP_RKEY_FIXED + (size_t)i * CIP_RKEY_SEG;
            cip_seg_t *g = &r->seg[i];
            g->base = nixl_get_u64(s);
            g->size = nixl_get_u64(s + 8);
            uint32_t fd = nixl_get_u32(s + 16);
            /* Mappings follow each other exactly and cover the span. */
            if (g->base != next || g->size == 0 || g->size > base + size - next || fd > INT32_MAX ||
                nixl_get_u32(s + 20) != 0) {
                CIP_ERROR(be, "cuda_ipc: key of peer %s: VMM mapping %u is malformed", who, i);
                free(r->seg);
                free(r);
                return NIXL_ERR_BAD_METADATA;
            }
            g->fd = (int)fd;
            next = g->base + g->size;
        }
        if (next != base + size) {
            CIP_ERROR(be, "cuda_ipc: key of peer %s: VMM mappings do not cover their span", who);
            free(r->seg);
            free(r);
            return NIXL_ERR_BAD_METADATA;
        }
        r->nseg = nseg;
    }
    *rmd_out = r;
    return NIXL_OK;
}

/* ---- import ---- */

/* Undo an import in its own context (any thread may drop the last key). */
static void cip_import_free(cip_be_t *be, cip_import_t *im)
{
    const nixl_cuda_api_t *cu = be->cu;
    if (im->kind != CIP_IMPORT_SELF && cu) {
        nixl_be_ctx_scope_t scope = {NULL, 0};
        if (nixl_be_ctx_enter(be->host->cuda, im->ctx, &scope) == NIXL_OK) {
            if (im->kind == CIP_KIND_LEGACY) {
                if (im->base)
                    cu->cuIpcCloseMemHandle((CUdeviceptr)im->base);
            } else {
                for (size_t i = 0; i < im->nmapped; i++)
                    cu->cuMemUnmap((CUdeviceptr)(im->base + im->seg_off[i]), im->seg_size[i]);
                if (im->base)
                    cu->cuMemAddressFree((CUdeviceptr)im->base, im->size);
                for (size_t i = 0; i < im->nseg; i++)
                    cu->cuMemRelease(im->h[i]);
            }
            nixl_be_ctx_leave(be->host->cuda, &scope);
        }
    }
    free(im);
}

static void cip_import_unref(cip_be_t *be, cip_import_t *im)
{
    if (im->kind == CIP_IMPORT_SELF) {
        free(im);
        return;
    }
    pthread_mutex_lock(&g_imports_lock);
    int last = --im->refs == 0;
    if (last) {
        cip_import_t **pp = &g_imports;
        while (*pp && *pp != im)
            pp = &(*pp)->next;
        if (*pp)
            *pp = im->next;
    }
    pthread_mutex_unlock(&g_imports_lock);
    if (last)
        cip_import_free(be, im);
}

void cip_rkey_unload(void *bev, void *rmdv)
{
    cip_be_t *be = bev;
    cip_rmd_t *r = rmdv;
    if (!r)
        return;
    for (int i = 0; i < r->nimp; i++)
        cip_import_unref(be, r->imp[i]);
    free(r->seg);
    free(r);
}

static int cip_import_matches(const cip_import_t *im, const cip_rmd_t *r, CUcontext ctx)
{
    if (im->ctx != ctx || im->kind != r->kind)
        return 0;
    if (r->kind == CIP_KIND_LEGACY)
        return memcmp(&im->handle, &r->handle, sizeof(r->handle)) == 0;
    return im->owner_pid == r->peer->pid && im->owner_start == r->peer->start_time &&
           im->export_id == r->export_id;
}

int cip_device_of_bus(cip_be_t *be, const char *bus_id)
{
    const nixl_cuda_api_t *cu = be->cu;
    for (int d = 0; d < cu->device_count; d++) {
        CUdevice dev;
        char b[16];
        if (cu->cuDeviceGet(&dev, d) == CUDA_SUCCESS && cu->cuDeviceGetPCIBusId(b, sizeof(b), dev) == CUDA_SUCCESS &&
            strcasecmp(b, bus_id) == 0)
            return d;
    }
    return -1;
}

/* Why a peer's memory cannot be mapped; the caller stages or fails. */
typedef struct cip_why {
    char *buf;
    size_t cap;
} cip_why_t;

static nixl_status_t cip_no_path(cip_be_t *be, const cip_rmd_t *r, const cip_ctx_t *cx, cip_why_t *why,
                                 const char *what, CUresult rc, int err)
{
    if (why->cap)
        snprintf(why->buf, why->cap, "VRAM of peer %s (GPU %s) cannot be mapped into GPU %d (%s): %s%s%s",
                 r->peer->name, r->bus_id, cx->device, cx->bus_id, what, rc != CUDA_SUCCESS || err ? ": " : "",
                 rc != CUDA_SUCCESS ? cip_cu_err(be, rc) : err ? strerror(err) : "");
    return NIXL_ERR_NO_PATH;
}

static nixl_status_t cip_import_legacy(cip_be_t *be, const cip_rmd_t *r, const cip_ctx_t *cx, cip_import_t *im,
                                       cip_why_t *why)
{
    CUdeviceptr p = 0;
    CUresult rc = be->cu->cuIpcOpenMemHandle(&p, r->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc != CUDA_SUCCESS) {
        const char *what = "cuIpcOpenMemHandle failed";
        if (cip_device_of_bus(be, r->bus_id) < 0)
            what = "cuIpcOpenMemHandle failed (the peer's GPU is not visible in this process: CUDA_VISIBLE_DEVICES?)";
        return cip_no_path(be, r, cx, why, what, rc, 0);
    }
    im->base = (uint64_t)p;
    im->size = r->alloc_size;
    im->kernel_ok = 1;
    return NIXL_OK;
}

static nixl_status_t cip_import_vmm(cip_be_t *be, const cip_rmd_t *r, const cip_ctx_t *cx, cip_import_t *im,
                                    cip_why_t *why)
{
    const nixl_cuda_api_t *cu = be->cu;
    if (!cu->cuMemImportFromShareableHandle || !cu->cuMemAddressReserve || !cu->cuMemMap || !cu->cuMemSetAccess)
        return cip_no_path(be, r, cx, why, "the CUDA driver lacks the VMM import calls", CUDA_SUCCESS, 0);
    if (r->peer->proc.pidfd < 0)
        return cip_no_path(be, r, cx, why, "the kernel has no pidfd (Linux 5.6+ needed to fetch VMM handles)",
                           CUDA_SUCCESS, 0);
    for (size_t i = 0; i < r->nseg; i++) {
        int fd = (int)syscall(SYS_pidfd_getfd, r->peer->proc.pidfd, r->seg[i].fd, 0);
        if (fd < 0) {
            int e = errno;
            return cip_no_path(be, r, cx, why,
                               e == EPERM || e == EACCES
                                   ? "pidfd_getfd refused (same uid and ptrace rights over the peer needed; "
                                     "kernel.yama.ptrace_scope 0 or 1, or CAP_SYS_PTRACE)"
                                   : "pidfd_getfd failed",
                               CUDA_SUCCESS, e);
        }
        CUresult rc = cu->cuMemImportFromShareableHandle(&im->h[i], (void *)(uintptr_t)fd,
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        if (rc != CUDA_SUCCESS)
            return cip_no_path(be, r, cx, why, "cuMemImportFromShareableHandle failed", rc, 0);
        im->nseg++;
    }
    CUdeviceptr va = 0;
    CUresult rc = cu->cuMemAddressReserve(&va, r->alloc_size, 0, 0, 0);
    if (rc != CUDA_SUCCESS)
        return cip_no_path(be, r, cx, why, "cuMemAddressReserve failed", rc, 0);
    im->base = (uint64_t)va;
    im->size = r->alloc_size;
    /* cip_import_free undoes what was done of the rest. */
    for (size_t i = 0; i < r->nseg; i++) {
        im->seg_off[i] = r->seg[i].base - r->alloc_base;
        im->seg_size[i] = r->seg[i].size;
        rc = cu->cuMemMap(va + im->seg_off[i], im->seg_size[i], 0, im->h[i], 0);
        if (rc != CUDA_SUCCESS)
            return cip_no_path(be, r, cx, why, "cuMemMap failed", rc, 0);
        im->nmapped++;
    }
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof(ad));
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = cx->device;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    rc = cu->cuMemSetAccess(va, r->alloc_size, &ad, 1);
    if (rc != CUDA_SUCCESS)
        return cip_no_path(be, r, cx, why, "cuMemSetAccess failed", rc, 0);
    im->kernel_ok = 1;
    return NIXL_OK;
}

/* Same process: the peer's pointers are ours.  A kernel may touch them only
 * in the context that owns them (contexts do not see each other's memory). */
static nixl_status_t cip_import_self(cip_be_t *be, const cip_rmd_t *r, const cip_ctx_t *cx, cip_import_t *im)
{
    nixl_be_cuda_region_t info;
    int is_device = 0;
    im->base = r->alloc_base;
    im->size = r->alloc_size;
    if (be->host->cuda->ptr_query && be->host->cuda->ptr_query(r->addr, r->len, &info, &is_device) == NIXL_OK &&
        is_device)
        im->kernel_ok = info.ctx == (void *)cx->ctx;
    (void)be;
    return NIXL_OK;
}

nixl_status_t cip_rmd_view(cip_be_t *be, cip_rmd_t *r, cip_ctx_t *cx, cip_view_t *out, char *cause,
                           size_t cause_cap)
{
    cip_why_t whybuf = {cause, cause_cap}, *why = &whybuf;
    for (int i = 0; i < r->nimp; i++) {
        if (r->imp[i]->ctx == cx->ctx) {
            out->base = r->imp[i]->base;
            out->kernel_ok = r->imp[i]->kernel_ok;
            return NIXL_OK;
        }
    }
    if (r->nimp == CIP_MAX_CTX)
        return cip_no_path(be, r, cx, why, "used from too many contexts", CUDA_SUCCESS, 0);
    if (!r->peer->same_process && r->kind == CIP_KIND_NONE)
        return cip_no_path(be, r, cx, why, "the peer could not export it (no IPC handle; see the peer's log)", CUDA_SUCCESS,
                           0);

    cip_import_t *im = NULL;
    nixl_status_t st = NIXL_OK;
    if (!r->peer->same_process) {
        pthread_mutex_lock(&g_imports_lock);
        for (im = g_imports; im && !cip_import_matches(im, r, cx->ctx); im = im->next)
            ;
        if (im)
            im->refs++;
        pthread_mutex_unlock(&g_imports_lock);
    }
    if (!im) {
        im = calloc(1, sizeof(*im));
        if (!im)
            return NIXL_ERR_NO_MEMORY;
        im->refs = 1;
        im->ctx = cx->ctx;
        if (r->peer->same_process) {
            im->kind = CIP_IMPORT_SELF;
            st = cip_import_self(be, r, cx, im);
        } else {
            im->kind = r->kind;
            im->handle = r->handle;
            im->owner_pid = r->peer->pid;
            im->owner_start = r->peer->start_time;
            im->export_id = r->export_id;
            st = r->kind == CIP_KIND_LEGACY ? cip_import_legacy(be, r, cx, im, why) : cip_import_vmm(be, r, cx, im, why);
        }
        if (st != NIXL_OK) {
            cip_import_free(be, im);
            return st;
        }
        if (im->kind != CIP_IMPORT_SELF) {
            /* Another thread may have imported the same meanwhile: the
             * driver refcounts, both stay valid; keep ours in the list too. */
            pthread_mutex_lock(&g_imports_lock);
            im->next = g_imports;
            g_imports = im;
            pthread_mutex_unlock(&g_imports_lock);
        }
        CIP_DEBUG(be, "cuda_ipc: imported VRAM of peer %s (GPU %s, %s, %llu bytes) into GPU %d (%s) at 0x%llx",
                  r->peer->name, r->bus_id,
                  im->kind == CIP_KIND_LEGACY ? "legacy handle" : im->kind == CIP_KIND_VMM ? "VMM" : "same process",
                  (unsigned long long)r->alloc_size, cx->device, cx->bus_id, (unsigned long long)im->base);
    }
    r->imp[r->nimp++] = im;
    out->base = im->base;
    out->kernel_ok = im->kernel_ok;
    return NIXL_OK;
}
