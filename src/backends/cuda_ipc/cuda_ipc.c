/*
 * cuda_ipc.c - the cuda_ipc backend: same host, VRAM, between processes
 * (and between agents of one process).
 *
 * This file holds the ops table, the instance (create/destroy, tunables),
 * who this process is (conn_pack) and how a peer is recognized (peer_load:
 * the same checks as shm, ../common/samehost_proc.c), notifications (the
 * shared datagram socket), and the copy state kept per CUDA context: one
 * non-blocking stream and the gather/scatter kernel module.  The driver is
 * reached only through the host's table (host->cuda->api), loaded on the
 * first VRAM use: an agent that creates this backend but never registers
 * VRAM never calls cuInit.  Exports and imports are cuda_ipc_mem.c,
 * requests cuda_ipc_xfer.c.
 */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_ipc.h"
#include "cuda_ipc_int.h"

/* conn info: magic, version, socket-name length, identity, socket name. */
#define CIP_CONN_MAGIC 0x43504943u /* "CIPC" */

#define CIP_DEFAULT_CE_MIN (4ull << 20)
#define CIP_DEFAULT_KERNEL_MIN 4ull

const char *cip_cu_err(cip_be_t *be, CUresult rc)
{
    return be->host->cuda && be->host->cuda->strerror ? be->host->cuda->strerror((int)rc) : "CUDA error";
}

const nixl_cuda_api_t *cip_api(cip_be_t *be)
{
    if (nixl_likely(be->cu != NULL))
        return be->cu;
    const nixl_host_cuda_t *hc = be->host->cuda;
    const void *api = hc && hc->api ? hc->api() : NULL;
    if (!api) {
        CIP_ERROR(be, "cuda_ipc: no CUDA driver (NIXL_CUDA_LIB): VRAM cannot be moved");
        return NULL;
    }
    be->cu = api;
    return be->cu;
}

/* Load the kernel into the current context; a failure is logged once and
 * leaves the context on the copy engines. */
static void cip_ctx_load_kernel(cip_be_t *be, cip_ctx_t *cx)
{
    const nixl_cuda_api_t *cu = be->cu;
    if (!be->use_kernel)
        return;
    if (nixl_cuda_ipc_fatbin_len == 0) {
        if (!be->kernel_warned++)
            CIP_INFO(be, "cuda_ipc: built without nvcc: batches of small pieces go through the copy engines "
                         "(path cuda_ipc.ce)");
        return;
    }
    CUresult rc = cu->cuModuleLoadData(&cx->module, nixl_cuda_ipc_fatbin);
    if (rc == CUDA_SUCCESS)
        rc = cu->cuModuleGetFunction(&cx->copy_fn, cx->module, "nixl_cuda_ipc_copy_pieces");
    if (rc == CUDA_SUCCESS)
        rc = cu->cuModuleGetFunction(&cx->indexed_fn, cx->module, "nixl_cuda_ipc_copy_indexed");
    if (rc != CUDA_SUCCESS) {
        if (cx->module)
            cu->cuModuleUnload(cx->module);
        cx->module = NULL;
        cx->copy_fn = NULL;
        cx->indexed_fn = NULL;
        CIP_WARN(be, "cuda_ipc: cannot load the gather/scatter kernel on GPU %d (%s): %s; small pieces go "
                     "through the copy engines (path cuda_ipc.ce)",
                 cx->device, cx->bus_id, cip_cu_err(be, rc));
    }
}

cip_ctx_t *cip_ctx_get(cip_be_t *be, void *ctx, int device)
{
    const nixl_cuda_api_t *cu = be->cu;
    cip_ctx_t *found = NULL;
    pthread_mutex_lock(&be->lock);
    for (int i = 0; i < be->nctx && !found; i++)
        if (be->ctxs[i].ctx == (CUcontext)ctx)
            found = &be->ctxs[i];
    if (found || be->nctx == CIP_MAX_CTX) {
        pthread_mutex_unlock(&be->lock);
        if (!found)
            CIP_ERROR(be, "cuda_ipc: more than %d CUDA contexts in one process", CIP_MAX_CTX);
        return found;
    }
    cip_ctx_t *cx = &be->ctxs[be->nctx];
    memset(cx, 0, sizeof(*cx));
    cx->ctx = (CUcontext)ctx;
    cx->device = device;
    CUdevice dev;
    CUresult rc = cu->cuCtxGetDevice(&dev);
    if (rc == CUDA_SUCCESS && (int)dev != device)
        CIP_WARN(be, "cuda_ipc: context %p is on device %d, its memory was recorded on device %d", ctx, (int)dev,
                 device);
    if (rc == CUDA_SUCCESS)
        cx->device = (int)dev;
    if (rc == CUDA_SUCCESS)
        rc = cu->cuDeviceGetPCIBusId(cx->bus_id, sizeof(cx->bus_id), dev);
    if (rc == CUDA_SUCCESS)
        rc = cu->cuStreamCreate(&cx->stream, CU_STREAM_NON_BLOCKING);
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&be->lock);
        CIP_ERROR(be, "cuda_ipc: setting up copies on GPU %d: %s", device, cip_cu_err(be, rc));
        return NULL;
    }
    cip_ctx_load_kernel(be, cx);
    be->nctx++;
    pthread_mutex_unlock(&be->lock);
    CIP_DEBUG(be, "cuda_ipc: copies on GPU %d (%s): stream ready, kernel %s", device, cx->bus_id,
              cx->copy_fn ? "loaded" : "not used");
    return cx;
}

/* ---- kernel tables ---- */

static void cip_table_free(cip_be_t *be, cip_table_t *t)
{
    if (t->host)
        be->cu->cuMemFreeHost(t->host);
    if (t->dev)
        be->cu->cuMemFree(t->dev);
    free(t);
}

cip_table_t *cip_table_get(cip_be_t *be, cip_ctx_t *cx, size_t n)
{
    pthread_mutex_lock(&be->lock);
    cip_table_t **best = NULL;
    for (cip_table_t **pp = &cx->free_tables; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= n && (!best || (*pp)->cap < (*best)->cap))
            best = pp;
    if (best) {
        cip_table_t *t = *best;
        *best = t->next;
        cx->free_bytes -= t->cap * sizeof(cip_piece_t);
        pthread_mutex_unlock(&be->lock);
        t->next = NULL;
        return t;
    }
    pthread_mutex_unlock(&be->lock);
    size_t cap = CIP_TABLE_MIN;
    while (cap < n && cap <= SIZE_MAX / 2 / sizeof(cip_piece_t))
        cap *= 2;
    cip_table_t *t = calloc(1, sizeof(*t));
    if (!t || cap < n)
        goto oom;
    t->cap = cap;
    CUresult rc = be->cu->cuMemAllocHost((void **)&t->host, cap * sizeof(cip_piece_t));
    if (rc == CUDA_SUCCESS)
        rc = be->cu->cuMemAlloc(&t->dev, cap * sizeof(cip_piece_t));
    if (rc != CUDA_SUCCESS) {
        CIP_ERROR(be, "cuda_ipc: a kernel table of %zu pieces on GPU %d: %s", cap, cx->device, cip_cu_err(be, rc));
        cip_table_free(be, t);
        return NULL;
    }
    return t;
oom:
    free(t);
    CIP_ERROR(be, "cuda_ipc: no memory for a kernel table of %zu pieces", n);
    return NULL;
}

void cip_table_put(cip_be_t *be, cip_ctx_t *cx, cip_table_t *t)
{
    size_t bytes = t->cap * sizeof(cip_piece_t);
    pthread_mutex_lock(&be->lock);
    if (cx->free_bytes + bytes <= CIP_TABLE_POOL_BYTES) {
        t->next = cx->free_tables;
        cx->free_tables = t;
        cx->free_bytes += bytes;
        t = NULL;
    }
    pthread_mutex_unlock(&be->lock);
    if (t)
        cip_table_free(be, t);
}

void cip_tables_free(cip_be_t *be, cip_ctx_t *cx)
{
    while (cx->free_tables) {
        cip_table_t *t = cx->free_tables;
        cx->free_tables = t->next;
        cip_table_free(be, t);
    }
    cx->free_bytes = 0;
}

void *cip_host_ctx(cip_be_t *be, cip_rmd_t *rmd, int *device)
{
    if (rmd->host_ctx) {
        *device = rmd->host_dev;
        return rmd->host_ctx;
    }
    const nixl_cuda_api_t *cu = be->cu;
    int dev = cip_device_of_bus(be, rmd->bus_id);
    if (dev < 0)
        dev = 0; /* the peer's GPU is not visible here: import through P2P, or stage */
    if (dev >= cu->device_count || dev >= CIP_MAX_DEV) {
        CIP_ERROR(be, "cuda_ipc: no GPU in this process to copy host memory to peer %s's GPU %s", rmd->peer->name,
                  rmd->bus_id);
        return NULL;
    }
    pthread_mutex_lock(&be->lock);
    CUcontext ctx = be->prim[dev];
    CUresult rc = CUDA_SUCCESS;
    if (!ctx) {
        CUdevice d;
        rc = cu->cuDeviceGet(&d, dev);
        if (rc == CUDA_SUCCESS)
            rc = cu->cuDevicePrimaryCtxRetain(&ctx, d);
        if (rc == CUDA_SUCCESS)
            be->prim[dev] = ctx;
    }
    pthread_mutex_unlock(&be->lock);
    if (rc != CUDA_SUCCESS) {
        CIP_ERROR(be, "cuda_ipc: the primary context of GPU %d: %s", dev, cip_cu_err(be, rc));
        return NULL;
    }
    rmd->host_ctx = ctx;
    rmd->host_dev = dev;
    *device = dev;
    return ctx;
}

nixl_status_t cip_peer_alive(cip_be_t *be, cip_peer_t *peer)
{
    /* Every time: our mapping of a dead peer's VRAM may outlive it, so a
     * copy into it would "succeed" (one poll() is cheap next to a launch). */
    return samehost_proc_alive(be->host, "cuda_ipc", &peer->proc, 1);
}

/* ---- tunables ---- */

static nixl_status_t cip_read_tunables(cip_be_t *be)
{
    const char *k = be->host->config_get("NIXL_CUDA_IPC_KERNEL");
    const char *m = be->host->config_get("NIXL_CUDA_IPC_CE_MIN");
    const char *n = be->host->config_get("NIXL_CUDA_IPC_KERNEL_MIN");
    const char *map = be->host->config_get("NIXL_CUDA_IPC_MAP");
    be->use_kernel = 1;
    be->map_peers = 1;
    if (map && *map && nixl_param_parse_bool(map, &be->map_peers) != 0) {
        CIP_ERROR(be, "cuda_ipc: NIXL_CUDA_IPC_MAP=\"%s\" is not valid: expected 0 or 1", map);
        return NIXL_ERR_INVALID_PARAM;
    }
    be->ce_min = CIP_DEFAULT_CE_MIN;
    be->kernel_min = CIP_DEFAULT_KERNEL_MIN;
    if (k && *k) {
        if (strcmp(k, "0") && strcmp(k, "1")) {
            CIP_ERROR(be, "cuda_ipc: NIXL_CUDA_IPC_KERNEL=\"%s\" is not valid: expected 0 or 1", k);
            return NIXL_ERR_INVALID_PARAM;
        }
        be->use_kernel = k[0] == '1';
    }
    if (m && *m && (nixl_param_parse_size(m, &be->ce_min) || be->ce_min == 0)) {
        CIP_ERROR(be, "cuda_ipc: NIXL_CUDA_IPC_CE_MIN=\"%s\" is not valid: expected a byte count such as 4M", m);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (n && *n && (nixl_param_parse_size(n, &be->kernel_min) || be->kernel_min == 0)) {
        CIP_ERROR(be, "cuda_ipc: NIXL_CUDA_IPC_KERNEL_MIN=\"%s\" is not valid: expected a count of at least 1", n);
        return NIXL_ERR_INVALID_PARAM;
    }
    return NIXL_OK;
}

/* ---- instance ---- */

static int cip_host_usable(const nixl_host_services_t *host)
{
    size_t need = offsetof(nixl_host_services_t, cuda) + sizeof(host->cuda);
    return host && host->abi_version >= 1 && host->struct_size >= need && host->log_enabled && host->log &&
           host->config_get && host->fallback && host->notif_deliver && host->cuda && host->cuda->ctx_bind &&
           host->cuda->ctx_restore;
}

static nixl_status_t cip_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                                void **be_out)
{
    (void)params;
    (void)num_params;
    if (!cip_host_usable(host) || !be_out)
        return NIXL_ERR_INVALID_PARAM;
    cip_be_t *be = calloc(1, sizeof(*be));
    if (!be)
        return NIXL_ERR_NO_MEMORY;
    be->host = host;
    be->notif.sock = -1;
    nixl_status_t st = cip_read_tunables(be);
    if (st != NIXL_OK)
        goto err_free;
    be->self_uid = (uint32_t)getuid();
    /* pidfd_getfd (VMM handles) needs ptrace-attach rights over the exporter. */
    samehost_ptrace_setup(host, "cuda_ipc", "fetch the file descriptors of our VMM memory (pidfd_getfd)",
                          &be->ptrace_scope, &be->can_ptrace_any);
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_free;
    }
    if (pthread_rwlock_init(&be->reg_rw, NULL) != 0) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_lock;
    }
    st = cip_workers_init(be);
    if (st != NIXL_OK)
        goto err_rw;
    st = samehost_notif_open(&be->notif, host, "cuda_ipc", host->agent_name, be->self_uid);
    if (st != NIXL_OK)
        goto err_workers;
    st = cip_stage_server_start(be);
    if (st != NIXL_OK)
        goto err_notif;
    CIP_DEBUG(be, "cuda_ipc: created: kernel %s (%zu bytes of fatbin), ce_min %llu, kernel_min %llu, socket @%s",
              be->use_kernel ? "on" : "off", nixl_cuda_ipc_fatbin_len, (unsigned long long)be->ce_min,
              (unsigned long long)be->kernel_min, be->notif.sock_name);
    *be_out = be;
    return NIXL_OK;

err_notif:
    samehost_notif_close(&be->notif);
err_workers:
    cip_workers_fini(be);
err_rw:
    pthread_rwlock_destroy(&be->reg_rw);
err_lock:
    pthread_mutex_destroy(&be->lock);
err_free:
    free(be);
    return st;
}

static void cip_destroy(void *bev)
{
    cip_be_t *be = bev;
    if (!be)
        return;
    cip_workers_fini(be);
    cip_stage_server_stop(be);
    for (int i = 0; i < be->nctx; i++) {
        cip_ctx_t *cx = &be->ctxs[i];
        nixl_be_ctx_scope_t scope = {NULL, 0};
        if (nixl_be_ctx_enter(be->host->cuda, cx->ctx, &scope) != NIXL_OK)
            continue;
        be->cu->cuStreamSynchronize(cx->stream);
        cip_tables_free(be, cx);
        be->cu->cuStreamDestroy(cx->stream);
        if (cx->module)
            be->cu->cuModuleUnload(cx->module);
        nixl_be_ctx_leave(be->host->cuda, &scope);
    }
    for (int d = 0; d < CIP_MAX_DEV; d++) {
        CUdevice dev;
        if (be->prim[d] && be->cu->cuDeviceGet(&dev, d) == CUDA_SUCCESS)
            be->cu->cuDevicePrimaryCtxRelease(dev);
    }
    samehost_notif_close(&be->notif);
    pthread_rwlock_destroy(&be->reg_rw);
    pthread_mutex_destroy(&be->lock);
    free(be);
}

/* ---- identity and peers ---- */

static nixl_status_t cip_conn_pack(void *bev, void *buf, size_t *len)
{
    cip_be_t *be = bev;
    return samehost_conn_pack(&be->notif, CIP_CONN_MAGIC, buf, len);
}

static nixl_status_t cip_peer_open(void *bev, const nixl_be_peer_t *who, const void *conn, size_t conn_len,
                                   void **peer_out)
{
    cip_be_t *be = bev;
    if (!peer_out || !who)
        return NIXL_ERR_NULL;
    cip_peer_t *peer = calloc(1, sizeof(*peer));
    if (!peer)
        return NIXL_ERR_NO_MEMORY;
    nixl_status_t st = samehost_peer_connect(&be->notif, be->can_ptrace_any, CIP_CONN_MAGIC, who, conn, conn_len,
                                             peer->name, &peer->proc, &peer->notif);
    if (st != NIXL_OK) {
        free(peer);
        return st;
    }
    peer->pid = who->pid;
    peer->start_time = who->start_time;
    peer->same_process = who->same_process;
    *peer_out = peer;
    return NIXL_OK;
}

static void cip_peer_unload(void *bev, void *peerv)
{
    cip_peer_t *peer = peerv;
    if (!peer)
        return;
    cip_stage_conn_close(bev, peer);
    samehost_peer_disconnect(&peer->proc, &peer->notif);
    free(peer);
}

/* ---- notifications ---- */

static nixl_status_t cip_notif_send(void *bev, void *peerv, const void *msg, size_t len)
{
    cip_be_t *be = bev;
    cip_peer_t *peer = peerv;
    if (!peer || (!msg && len))
        return NIXL_ERR_NULL;
    nixl_status_t st = cip_peer_alive(be, peer);
    if (st != NIXL_OK)
        return st;
    return samehost_notif_send(&be->notif, &peer->notif, msg, len);
}

static const nixl_backend_ops_t cip_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "cuda_ipc",
    .description = "same host, VRAM: CUDA IPC (legacy handles, VMM file descriptors) opened once per peer; "
                   "copy engines for large pieces (cuda_ipc.ce), one gather/scatter kernel per batch of small "
                   "ones (cuda_ipc.kernel); local DRAM to and from a peer's VRAM; host staging only as a counted fallback "
                   "(cuda_ipc.staged)",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_VRAM),
    .caps = NIXL_CAP_LOCAL | NIXL_CAP_SAME_HOST | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS,
    .params = NULL,
    .num_params = 0,
    .create = cip_create,
    .destroy = cip_destroy,
    .reg = cip_reg,
    .dereg = cip_dereg,
    .rkey_pack = cip_rkey_pack,
    .conn_pack = cip_conn_pack,
    .peer_open = cip_peer_open,
    .peer_unload = cip_peer_unload,
    .rkey_load = cip_rkey_load,
    .rkey_unload = cip_rkey_unload,
    .xfer_prepare = cip_xfer_prepare,
    .xfer_prepare_indexed = cip_xfer_prepare_indexed,
    .xfer_post = cip_xfer_post,
    .xfer_status = cip_xfer_status,
    .xfer_release = cip_xfer_release,
    .notif_send = cip_notif_send,
    .local_mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM),
    .xfer_cancel = cip_xfer_cancel,
};

const nixl_backend_ops_t *nixl_backend_cuda_ipc_ops(void)
{
    return &cip_ops;
}
