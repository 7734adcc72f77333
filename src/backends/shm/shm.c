/*
 * shm.c - the shm backend: same host, DRAM, between processes (and between
 * agents of one process).
 *
 * This file holds the ops table and its parameters, the instance
 * (create/destroy), who this process is (conn_pack) and how a peer is
 * recognized (peer_load): same kernel boot, same pid namespace, and a pidfd
 * whose process start time matches, so a reused pid is never mistaken for
 * the peer (the checks themselves are ../common/samehost_proc.c).  Memory, transfers, workers and notifications live in the other
 * shm_*.c files (see shm_int.h).
 */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "shm.h"
#include "shm_int.h"

#define SHM_THREADS_MAX 64

/* conn info: magic, version, socket-name length, then fixed fields, then
 * the socket name.  Little-endian. */
#define SHM_CONN_MAGIC 0x434d4853u /* "SHMC" */

static const nixl_param_info_t shm_params[] = {
    {"threads", "auto",
     "worker threads copying large requests: auto = min(4, online cores - 1); 0 = no pool, every copy runs inside post"},
    {"inline_max", "65536", "requests of at most this many bytes are copied inside post (K/M/G suffixes)"},
    {"chunk", "1048576", "bytes per work item of the worker pool; large descriptors are split at this size"},
    {"map", "1", "1: map a peer's shared-file memory and memcpy (shm.map); 0: always process_vm_* (shm.cma)"},
};
#define SHM_NUM_PARAMS (sizeof(shm_params) / sizeof(shm_params[0]))

/* ---- parameters ---- */

static const char *shm_param_value(const nixl_param_t *params, size_t n, size_t idx)
{
    const char *v = params ? nixl_param_find(params, n, shm_params[idx].key) : NULL;
    return v ? v : shm_params[idx].default_value;
}

static nixl_status_t shm_parse_params(shm_be_t *be, const nixl_param_t *params, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k;
        for (k = 0; k < SHM_NUM_PARAMS; k++)
            if (params[i].key && strcmp(params[i].key, shm_params[k].key) == 0)
                break;
        if (k == SHM_NUM_PARAMS) {
            SHM_ERROR(be, "shm: unknown parameter \"%s\" (known: threads, inline_max, chunk, map)",
                      params[i].key ? params[i].key : "(null)");
            return NIXL_ERR_INVALID_PARAM;
        }
    }

    uint64_t threads = 0, inline_max, chunk;
    int map;
    const char *v = shm_param_value(params, n, 0);
    int threads_auto = strcmp(v, "auto") == 0;
    if (!threads_auto && (nixl_param_parse_size(v, &threads) != 0 || threads > SHM_THREADS_MAX)) {
        SHM_ERROR(be, "shm: threads=\"%s\" is not valid: expected auto or 0 to %d", v, SHM_THREADS_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = shm_param_value(params, n, 1);
    if (nixl_param_parse_size(v, &inline_max) != 0) {
        SHM_ERROR(be, "shm: inline_max=\"%s\" is not valid: expected a byte count such as 65536 or 64K", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = shm_param_value(params, n, 2);
    if (nixl_param_parse_size(v, &chunk) != 0 || chunk < 4096 || chunk > (1ull << 30)) {
        SHM_ERROR(be, "shm: chunk=\"%s\" is not valid: expected a byte count from 4K to 1G", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = shm_param_value(params, n, 3);
    if (nixl_param_parse_bool(v, &map) != 0) {
        SHM_ERROR(be, "shm: map=\"%s\" is not valid: expected 0 or 1", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (threads_auto) {
        /* Leave one core to the thread that posts and polls: on a small box
         * a worker per core would fight it for the CPU. */
        long cores = sysconf(_SC_NPROCESSORS_ONLN) - 1;
        threads = cores < 1 ? 0 : (uint64_t)(cores < 4 ? cores : 4);
    }
    be->threads = (unsigned)threads;
    be->inline_max = inline_max;
    be->chunk = chunk;
    be->map_enabled = map;
    return NIXL_OK;
}

/* ---- instance ---- */

static int shm_host_usable(const nixl_host_services_t *host)
{
    size_t need = offsetof(nixl_host_services_t, agent_name) + sizeof(host->agent_name);
    return host && host->abi_version >= 1 && host->struct_size >= need && host->log_enabled && host->log &&
           host->fallback && host->notif_deliver;
}

static nixl_status_t shm_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                                void **be_out)
{
    nixl_status_t st;
    if (!shm_host_usable(host) || !be_out)
        return NIXL_ERR_INVALID_PARAM;
    shm_be_t *be = calloc(1, sizeof(*be));
    if (!be)
        return NIXL_ERR_NO_MEMORY;
    be->host = host;
    be->notif.sock = -1;
    st = shm_parse_params(be, params, num_params);
    if (st != NIXL_OK)
        goto err_free;
    be->page_size = sysconf(_SC_PAGESIZE);
    if (be->page_size <= 0)
        be->page_size = 4096;

    be->self_pid = (uint32_t)getpid();
    be->self_uid = (uint32_t)getuid();
    samehost_ptrace_setup(host, "shm", "use CMA (process_vm_readv/writev)", &be->ptrace_scope,
                          &be->can_ptrace_any);

    if (pthread_mutex_init(&be->reg_lock, NULL) != 0) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_free;
    }
    shm_maps_init(&be->maps);

    st = samehost_notif_open(&be->notif, host, "shm", host->agent_name, be->self_uid);
    if (st != NIXL_OK)
        goto err_maps;
    if (be->threads > 0) {
        st = shm_pool_create(be, be->threads, &be->pool);
        if (st != NIXL_OK)
            goto err_notif;
    }
    SHM_DEBUG(be, "shm: created: threads %u%s, inline_max %llu, chunk %llu, map %d, socket @%s", be->threads,
              be->pool ? "" : " (no pool)", (unsigned long long)be->inline_max, (unsigned long long)be->chunk,
              be->map_enabled, be->notif.sock_name);
    *be_out = be;
    return NIXL_OK;

err_notif:
    samehost_notif_close(&be->notif);
err_maps:
    shm_maps_fini(&be->maps);
    pthread_mutex_destroy(&be->reg_lock);
err_free:
    free(be);
    return st;
}

static void shm_destroy(void *bev)
{
    shm_be_t *be = bev;
    if (!be)
        return;
    if (be->pool)
        shm_pool_destroy(be->pool);
    samehost_notif_close(&be->notif);
    /* Registrations should be gone; close what a careless core left. */
    while (be->files) {
        shm_file_t *f = be->files;
        be->files = f->next;
        close(f->fd);
        free(f);
    }
    shm_maps_fini(&be->maps);
    pthread_mutex_destroy(&be->reg_lock);
    shm_spare_free(be);
    free(be);
}

/* ---- identity and peers ---- */

static nixl_status_t shm_conn_pack(void *bev, void *buf, size_t *len)
{
    shm_be_t *be = bev;
    return samehost_conn_pack(&be->notif, SHM_CONN_MAGIC, buf, len);
}

static nixl_status_t shm_peer_open(void *bev, const nixl_be_peer_t *who, const void *conn, size_t conn_len,
                                   void **peer_out)
{
    shm_be_t *be = bev;
    nixl_status_t st;

    if (!peer_out || !who)
        return NIXL_ERR_NULL;
    shm_peer_t *peer = calloc(1, sizeof(*peer));
    if (!peer)
        return NIXL_ERR_NO_MEMORY;
    st = samehost_peer_connect(&be->notif, be->can_ptrace_any, SHM_CONN_MAGIC, who, conn, conn_len, peer->name,
                               &peer->proc, &peer->notif);
    if (st != NIXL_OK) {
        free(peer);
        return st;
    }
    peer->pid = (pid_t)who->pid;
    *peer_out = peer;
    return NIXL_OK;
}

static void shm_peer_unload(void *bev, void *peerv)
{
    shm_peer_t *peer = peerv;
    (void)bev;
    if (!peer)
        return;
    samehost_peer_disconnect(&peer->proc, &peer->notif);
    free(peer);
}

nixl_status_t shm_peer_check(shm_be_t *be, shm_peer_t *peer)
{
    return samehost_proc_alive(be->host, "shm", &peer->proc, 0);
}

static const nixl_backend_ops_t shm_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "shm",
    .description = "same host, DRAM: maps a peer's shared-file memory (shm.map) or copies with "
                   "process_vm_readv/writev (shm.cma)",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM),
    .caps = NIXL_CAP_LOCAL | NIXL_CAP_SAME_HOST | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS | NIXL_CAP_REG_MT,
    .params = shm_params,
    .num_params = SHM_NUM_PARAMS,
    .create = shm_create,
    .destroy = shm_destroy,
    .reg = shm_reg,
    .dereg = shm_dereg,
    .rkey_pack = shm_rkey_pack,
    .conn_pack = shm_conn_pack,
    .peer_open = shm_peer_open,
    .peer_unload = shm_peer_unload,
    .rkey_load = shm_rkey_load,
    .rkey_unload = shm_rkey_unload,
    .xfer_prepare = shm_xfer_prepare,
    .xfer_post = shm_xfer_post,
    .xfer_status = shm_xfer_status,
    .xfer_release = shm_xfer_release,
    .notif_send = shm_notif_send,
    .xfer_cancel = shm_xfer_cancel,
    .xfer_prepare_indexed = shm_xfer_prepare_indexed,
};

const nixl_backend_ops_t *nixl_backend_shm_ops(void)
{
    return &shm_ops;
}

#ifndef NIXL_BUILTIN_SHM
__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void);

__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void)
{
    return &shm_ops;
}
#endif
