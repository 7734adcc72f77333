/*
 * libfabric.c - the libfabric backend: other hosts over EFA, verbs or TCP
 * (and the same host through the provider or the NIC when a user allows it:
 * intranode).
 *
 * This file holds the ops table, the parameters and the instance
 * (create/destroy).  Rails and provider choice are in lf_rail.c, memory in
 * lf_mem.c, peers and liveness in lf_conn.c, control messages and
 * notifications in lf_ctrl.c, requests in lf_xfer.c, completions and the
 * progress thread in lf_progress.c, rail locality in lf_topo.c, libfabric
 * itself, loaded at the first create, in lf_fi.c (see lf_int.h).  describe
 * (nixl-info -t) prints the rails and the GPU -> rail map.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "libfabric.h"
#include "lf_int.h"
#ifdef NIXL_HAVE_CUDA_H
#include "nixl/cuda_api.h"
#endif

static const nixl_param_info_t lf_params[] = {
    {"provider", "auto",
     "libfabric provider: auto = the first of efa, verbs (verbs;ofi_rxm), tcp (tcp;ofi_rxm) that has a device; or a "
     "provider name such as tcp;ofi_rxm or shm"},
    {"iface", "",
     "domains (NICs) used as rails, comma-separated libfabric domain names (lo, eth0, rdmap0s31-rdm...); empty: every "
     "domain of the provider (tcp: the first one)"},
    {"progress_thread", "1",
     "1: a backend thread progresses the fabric and keeps peers' liveness when the application does not call in; "
     "0: progress only inside calls (peers may then time this agent out while it is idle)"},
    {"heartbeat_ms", "200", "a peer that heard nothing from us for this long gets a heartbeat"},
    {"peer_timeout_ms", "1500",
     "a peer silent this long is dead: its requests fail with NIXL_ERR_PEER_GONE (TIMEOUT when it never answered)"},
    {"stripe_min", "1M", "pieces of at least this many bytes are split over every rail (K/M/G suffixes)"},
    {"max_inflight", "0", "operations in flight per rail; 0: the provider's transmit queue size"},
    {"completion", "auto",
     "how a WRITE knows its data landed: auto = fence (one message per rail pair the target answers, ordered after the "
     "writes) where the provider orders sends after writes, else count (the target answers once it counted every "
     "write by its CQ data); or fence, count, delivery (FI_DELIVERY_COMPLETE on every write)"},
    {"rails", "local",
     "which rails a region is registered on: local = a GPU's memory on the NICs sharing its PCI switch (else its "
     "NUMA node, else all), host memory on the NICs of its NUMA node (all when unknown; needs hwloc and NICs with PCI "
     "addresses); all = every rail"},
    {"topo_xml", "", "hwloc XML topology file used instead of this host's (tests; HWLOC_XMLFILE works too)"},
    {"intranode", "provider",
     "how peers on this host (same kernel and network namespace) are carried when the core gives them to libfabric "
     "(it ranks shm/cuda_ipc first; NIXL_INTRANODE_NETWORK=off never gives them): provider = through the provider's "
     "own same-host path (efa: its shm; tcp: loopback); nic = through the NIC (efa: sets "
     "FI_EFA_ENABLE_SHM_TRANSFER=0 unless the user set it)"},
};
#define LF_NUM_PARAMS (sizeof(lf_params) / sizeof(lf_params[0]))

static const char *lf_param_value(const nixl_param_t *params, size_t n, size_t idx)
{
    const char *v = params ? nixl_param_find(params, n, lf_params[idx].key) : NULL;
    return v ? v : lf_params[idx].default_value;
}

static nixl_status_t lf_parse_params(lf_be_t *be, const nixl_param_t *params, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k;
        for (k = 0; k < LF_NUM_PARAMS; k++)
            if (params[i].key && strcmp(params[i].key, lf_params[k].key) == 0)
                break;
        if (k == LF_NUM_PARAMS) {
            LF_ERROR(be, "libfabric: unknown parameter \"%s\"", params[i].key ? params[i].key : "(null)");
            return NIXL_ERR_INVALID_PARAM;
        }
    }
    const char *v = lf_param_value(params, n, 0);
    if (!*v || strlen(v) >= sizeof(be->prov_param)) {
        LF_ERROR(be, "libfabric: provider=\"%s\" is not valid: expected auto or a provider name", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    snprintf(be->prov_param, sizeof(be->prov_param), "%s", v);
    v = lf_param_value(params, n, 1);
    if (strlen(v) >= sizeof(be->iface_param)) {
        LF_ERROR(be, "libfabric: iface=\"%.40s...\" is too long", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    snprintf(be->iface_param, sizeof(be->iface_param), "%s", v);
    v = lf_param_value(params, n, 2);
    if (nixl_param_parse_bool(v, &be->use_thread) != 0) {
        LF_ERROR(be, "libfabric: progress_thread=\"%s\" is not valid: expected 0 or 1", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    uint64_t hb, to, stripe, inflight;
    v = lf_param_value(params, n, 3);
    if (nixl_param_parse_size(v, &hb) != 0 || hb < 1 || hb > 60000) {
        LF_ERROR(be, "libfabric: heartbeat_ms=\"%s\" is not valid: expected 1 to 60000", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = lf_param_value(params, n, 4);
    if (nixl_param_parse_size(v, &to) != 0 || to < 2 * hb || to > 3600000) {
        LF_ERROR(be, "libfabric: peer_timeout_ms=\"%s\" is not valid: expected at least twice heartbeat_ms (%llu) "
                     "and at most 3600000",
                 v, (unsigned long long)(2 * hb));
        return NIXL_ERR_INVALID_PARAM;
    }
    v = lf_param_value(params, n, 5);
    if (nixl_param_parse_size(v, &stripe) != 0 || stripe < 4096) {
        LF_ERROR(be, "libfabric: stripe_min=\"%s\" is not valid: expected a byte count of at least 4K", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = lf_param_value(params, n, 6);
    if (nixl_param_parse_size(v, &inflight) != 0 || inflight > 65536) {
        LF_ERROR(be, "libfabric: max_inflight=\"%s\" is not valid: expected 0 to 65536", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = lf_param_value(params, n, 7);
    if (strcmp(v, "auto") != 0 && strcmp(v, "fence") != 0 && strcmp(v, "count") != 0 && strcmp(v, "delivery") != 0) {
        LF_ERROR(be, "libfabric: completion=\"%s\" is not valid: expected auto, fence, count or delivery", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    snprintf(be->sync_param, sizeof(be->sync_param), "%s", v);
    v = lf_param_value(params, n, 8);
    if (strcmp(v, "local") != 0 && strcmp(v, "all") != 0) {
        LF_ERROR(be, "libfabric: rails=\"%s\" is not valid: expected local or all", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    be->rails_local = strcmp(v, "local") == 0;
    v = lf_param_value(params, n, 9);
    if (strlen(v) >= sizeof(be->topo_xml)) {
        LF_ERROR(be, "libfabric: topo_xml=\"%.40s...\" is too long", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    snprintf(be->topo_xml, sizeof(be->topo_xml), "%s", v);
    v = lf_param_value(params, n, 10);
    if (strcmp(v, "off") == 0) {
        LF_ERROR(be, "libfabric: intranode=off is no longer a libfabric parameter: which backend serves a same-host "
                     "peer is the core's choice, NIXL_INTRANODE_NETWORK=off (intranode takes provider or nic)");
        return NIXL_ERR_INVALID_PARAM;
    }
    if (strcmp(v, "provider") == 0)
        be->intranode = LF_INTRANODE_PROVIDER;
    else if (strcmp(v, "nic") == 0)
        be->intranode = LF_INTRANODE_NIC;
    else {
        LF_ERROR(be, "libfabric: intranode=\"%s\" is not valid: expected provider or nic", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    be->hb_ns = hb * 1000000ull;
    be->timeout_ns = to * 1000000ull;
    be->stripe_min = stripe;
    be->max_inflight = (unsigned)inflight;
    return NIXL_OK;
}

static int lf_host_usable(const nixl_host_services_t *host)
{
    size_t need = offsetof(nixl_host_services_t, agent_name) + sizeof(host->agent_name);
    return host && host->abi_version >= 1 && host->struct_size >= need && host->log_enabled && host->log &&
           host->fallback && host->notif_deliver;
}

/* A CUDA driver in this process: only then can VRAM be registered here,
 * and only then is FI_HMEM asked of the provider. */
static int lf_cuda_driver(const nixl_host_services_t *h)
{
    size_t need = offsetof(nixl_host_services_t, cuda) + sizeof(h->cuda);
    return h->struct_size >= need && h->cuda && h->cuda->api && h->cuda->api() != NULL;
}

/* The shm provider reaches only this host: with the core's
 * NIXL_INTRANODE_NETWORK=off it reaches no peer at all. */
static nixl_status_t lf_intranode_check(lf_be_t *be)
{
    if (strcmp(be->prov_name, "shm") != 0)
        return NIXL_OK;
    if (be->intranode == LF_INTRANODE_NIC) {
        LF_ERROR(be, "libfabric: intranode=nic cannot be honored by provider shm (it has no NIC); use provider=efa, "
                     "verbs or tcp, or intranode=provider");
        return NIXL_ERR_INVALID_PARAM;
    }
    const char *policy = be->host->config_get ? be->host->config_get("NIXL_INTRANODE_NETWORK") : NULL;
    if (policy && strcmp(policy, "off") == 0)
        LF_WARN(be, "libfabric: provider shm reaches only this host, and NIXL_INTRANODE_NETWORK=off keeps same-host "
                    "peers from network backends: this instance reaches no peer");
    return NIXL_OK;
}

static uint64_t lf_random_inst(void)
{
    uint64_t v = 0;
    while (v == 0) {
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
            v = nixl_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
    }
    return v;
}

static int lf_cuda_ipc_rule(const lf_be_t *be);

static nixl_status_t lf_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                               void **be_out)
{
    nixl_status_t st;
    if (!lf_host_usable(host) || !be_out)
        return NIXL_ERR_INVALID_PARAM;
    lf_be_t *be = calloc(1, sizeof(*be));
    if (!be)
        return NIXL_ERR_NO_MEMORY;
    be->host = host;
    be->epfd = -1;
    be->evfd = -1;
    be->txq_tail = &be->txq_head;
    st = lf_parse_params(be, params, num_params);
    if (st != NIXL_OK)
        goto err_free;
    const char *name = host->agent_name ? host->agent_name : "";
    be->agent_name_len = strlen(name);
    if (be->agent_name_len == 0 || be->agent_name_len > LF_NAME_MAX) {
        LF_ERROR(be, "libfabric: the agent name must be 1 to %d bytes (is %zu)", LF_NAME_MAX, be->agent_name_len);
        st = NIXL_ERR_INVALID_PARAM;
        goto err_free;
    }
    memcpy(be->agent_name, name, be->agent_name_len + 1);
    be->inst = lf_random_inst();
    be->cuda_driver = lf_cuda_driver(host);
    st = lf_fi_load(host);
    if (st != NIXL_OK)
        goto err_free;
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_free;
    }
    st = lf_rails_open(be);
    if (st != NIXL_OK)
        goto err_lock;
    st = lf_intranode_check(be);
    if (st != NIXL_OK)
        goto err_rails;
    if (be->shm_hmem) {
        be->shm_cuda_ipc = lf_cuda_ipc_rule(be);
        unsigned pv = be->prov_version >> 16, rev = (be->prov_version & 0xffffu) / 10;
        if (!be->shm_ipc_landed)
            LF_WARN(be, "libfabric: the shm provider of libfabric %u.%u.%u completes a CUDA IPC copy before its bytes "
                        "land (a cudaMemcpy, asynchronous between devices; fixed where FI_HMEM_CUDA_ENABLE_ASYNC_COPY "
                        "exists and is on): GPU memory is staged through host buffers instead, path "
                        "libfabric.shm.sar, a counted fallback",
                    pv / 100, pv % 100, rev);
        else if (!be->shm_cuda_ipc)
            LF_WARN(be, "libfabric: provider shm has no CUDA IPC here (several GPUs without peer access between all "
                        "of them): GPU memory is staged through host buffers, path libfabric.shm.sar, a counted "
                        "fallback");
    }
    st = lf_rails_locality(be);
    if (st != NIXL_OK)
        goto err_rails;
    if (be->use_thread) {
        st = lf_thread_start(be);
        if (st != NIXL_OK)
            goto err_rails;
    }
    LF_INFO(be,
            "libfabric: %s created: provider %s, %u rail(s) (%s%s), %s, cq data %u tag bits, progress thread %s, "
            "VRAM %s, intranode=%s",
            be->agent_name, be->prov_name, be->nrails, be->rails[0].info->domain_attr->name,
            be->nrails > 1 ? ",..." : "", be->sync == LF_SYNC_FENCE   ? "writes fenced per request"
            : be->sync == LF_SYNC_COUNT ? "writes counted at the target"
                                        : "delivery-complete writes",
            be->tag_bits, be->use_thread ? "on" : "off", be->hmem ? "through FI_HMEM (CUDA)" : "unreachable (no HMEM)",
            be->intranode == LF_INTRANODE_PROVIDER ? "provider" : "nic");
    *be_out = be;
    return NIXL_OK;

err_rails:
    lf_rails_close(be);
err_lock:
    pthread_mutex_destroy(&be->lock);
err_free:
    free(be);
    return st;
}

/* Tell peers we are leaving, so their requests fail now rather than at
 * their timeout; best effort, bounded. */
static void lf_say_bye(lf_be_t *be)
{
    size_t n = 0;
    for (size_t i = 0; i < be->nconns; i++) {
        lf_conn_t *c = be->conns[i];
        if (!c || c->state != LF_CONN_UP || !c->have_ridx)
            continue;
        lf_cmsg_t *m = lf_cmsg_new(c, LF_MSG_BYE, 0);
        if (!m)
            break;
        lf_txq_push(be, m);
        n++;
    }
    if (!n)
        return;
    uint64_t deadline = nixl_now_ns() + 100000000ull;
    for (;;) {
        lf_progress_locked(be, 1);
        if ((!be->txq_head && !be->tx_flight) || nixl_now_ns() > deadline)
            break;
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

/* Operations still in flight (to peers that vanished, their requests long
 * failed) get a short while to complete before the endpoints close. */
static void lf_drain(lf_be_t *be)
{
    uint64_t deadline = nixl_now_ns() + 200000000ull;
    for (;;) {
        unsigned busy = 0;
        for (unsigned i = 0; i < be->nrails; i++)
            busy += be->rails[i].nslots - be->rails[i].nfree;
        if (!busy || nixl_now_ns() > deadline)
            return;
        lf_progress_locked(be, 1);
        pthread_mutex_unlock(&be->lock);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&be->lock);
    }
}

static void lf_destroy(void *bev)
{
    lf_be_t *be = bev;
    if (!be)
        return;
    lf_thread_stop(be);
    pthread_mutex_lock(&be->lock);
    lf_say_bye(be);
    lf_drain(be);
    be->closing = 1;
    while (be->active) {
        /* The core released every request before; one left over is
         * dropped from the list so nothing refers to it. */
        lf_req_t *r = be->active;
        be->active = r->anext;
        r->on_list = 0;
    }
    pthread_mutex_unlock(&be->lock);
    /* Endpoints first: after they are closed the provider holds none of
     * our messages or buffers. */
    lf_rails_close(be);
    lf_txq_free(be);
    lf_conns_free(be);
    pthread_mutex_destroy(&be->lock);
    free(be);
}

/* ---- describe: the rails and the GPU -> rail map (nixl-info -t) ---- */

typedef struct lf_text {
    char *p;
    size_t len, cap;
    int oom;
} lf_text_t;

__attribute__((format(printf, 2, 3))) static void lf_text_add(lf_text_t *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        if (t->oom)
            return;
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            t->oom = 1;
            return;
        }
        if (t->p && (size_t)k < t->cap - t->len) {
            t->len += (size_t)k;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap < t->len + (size_t)k + 1)
            cap *= 2;
        char *np = realloc(t->p, cap);
        if (!np) {
            t->oom = 1;
            return;
        }
        t->p = np;
        t->cap = cap;
    }
}

/* The CUDA ordinal (in this process) of the GPU at bus id, -1 if none. */
static int lf_cuda_ordinal(const lf_be_t *be, const char *bus_id)
{
#ifdef NIXL_HAVE_CUDA_H
    const nixl_host_services_t *h = be->host;
    size_t need = offsetof(nixl_host_services_t, cuda) + sizeof(h->cuda);
    if (h->struct_size < need || !h->cuda || !h->cuda->api)
        return -1;
    const nixl_cuda_api_t *cu = h->cuda->api();
    uint32_t dom, d2;
    uint8_t bus, dev, fn, b2, v2, f2;
    if (!cu || lf_topo_parse_busid(bus_id, &dom, &bus, &dev, &fn) != 0)
        return -1;
    for (int i = 0; i < cu->device_count; i++) {
        CUdevice d;
        char id[32];
        if (cu->cuDeviceGet(&d, i) != CUDA_SUCCESS || cu->cuDeviceGetPCIBusId(id, sizeof(id), d) != CUDA_SUCCESS)
            continue;
        if (lf_topo_parse_busid(id, &d2, &b2, &v2, &f2) == 0 && d2 == dom && b2 == bus && v2 == dev && f2 == fn)
            return i;
    }
#else
    (void)be;
    (void)bus_id;
#endif
    return -1;
}

/* libfabric's own rule for CUDA IPC (src/hmem_cuda.c, 1.19 to 2.6): on
 * when this process sees one GPU, or every pair of its GPUs has peer
 * access; otherwise shm moves GPU memory through host bounce buffers. */
static int lf_cuda_ipc_rule(const lf_be_t *be)
{
#ifdef NIXL_HAVE_CUDA_H
    const nixl_host_services_t *h = be->host;
    size_t need = offsetof(nixl_host_services_t, cuda) + sizeof(h->cuda);
    if (h->struct_size < need || !h->cuda || !h->cuda->api)
        return 0;
    const nixl_cuda_api_t *cu = h->cuda->api();
    if (!cu || cu->device_count < 1)
        return 0;
    for (int i = 0; i < cu->device_count; i++) {
        for (int j = 0; j < cu->device_count; j++) {
            CUdevice a, b;
            int ok = 0;
            if (i == j)
                continue;
            if (cu->cuDeviceGet(&a, i) != CUDA_SUCCESS || cu->cuDeviceGet(&b, j) != CUDA_SUCCESS ||
                cu->cuDeviceCanAccessPeer(&ok, a, b) != CUDA_SUCCESS || !ok)
                return 0;
        }
    }
    return 1;
#else
    (void)be;
    return 0;
#endif
}

static void lf_describe_text(lf_be_t *be, lf_topo_t *t, lf_text_t *out)
{
    char set[128];
    lf_text_add(out, "libfabric %s: provider %s, %u rail(s), rails=%s, topology: %s\n", be->agent_name,
                be->prov_name, be->nrails, be->rails_local ? "local" : "all", t ? lf_topo_source(t) : "not loaded");
    lf_text_add(out, "  VRAM: %s; same-host peers (when the core gives them: NIXL_INTRANODE_NETWORK): intranode=%s\n",
                be->hmem           ? "FI_HMEM (CUDA), any rail pair"
                : be->cuda_driver ? "unreachable (the provider has no CUDA HMEM support)"
                                   : "unreachable (no CUDA driver here)",
                be->intranode == LF_INTRANODE_PROVIDER ? "provider" : "nic");
    for (unsigned i = 0; i < be->nrails; i++) {
        const lf_rail_t *r = &be->rails[i];
        char pci[24] = "-", numa[16] = "-";
        if (r->has_pci)
            snprintf(pci, sizeof(pci), "%04x:%02x:%02x.%x", r->pci_domain, r->pci_bus, r->pci_dev, r->pci_func);
        int node = t ? lf_topo_rail_numa(t, i) : -1;
        if (node >= 0)
            snprintf(numa, sizeof(numa), "%d", node);
        lf_text_add(out, "  rail %-2u  domain %-20s  pci %-12s  numa %s\n", i, r->info->domain_attr->name, pci,
                    numa);
    }
    size_t ngpu = t ? lf_topo_gpus(t, NULL, 0) : 0;
    if (ngpu == 0) {
        lf_text_add(out, "  no GPU in the topology\n");
        return;
    }
    char(*ids)[LF_TOPO_BUSID_LEN] = calloc(ngpu, sizeof(*ids));
    if (!ids) {
        out->oom = 1;
        return;
    }
    ngpu = lf_topo_gpus(t, ids, ngpu);
    if (!lf_topo_located(t))
        lf_text_add(out, "  (no rail has a place in the topology: every GPU gets every rail)\n");
    for (size_t g = 0; g < ngpu; g++) {
        char ord[16] = "-";
        int o = lf_cuda_ordinal(be, ids[g]);
        if (o >= 0)
            snprintf(ord, sizeof(ord), "%d", o);
        uint32_t m = lf_topo_gpu_rails(t, ids[g]);
        lf_text_add(out, "  gpu %s  cuda %-3s  rails %s%s\n", ids[g], ord, lf_topo_mask_str(m, set, sizeof(set)),
                    be->rails_local ? "" : " (rails=all: registered on every rail)");
    }
    free(ids);
}

static nixl_status_t lf_describe(void *bev, char *buf, size_t *len)
{
    lf_be_t *be = bev;
    if (!be || !len)
        return NIXL_ERR_NULL;
    /* The instance's topology, or one loaded for this answer (rails=all,
     * one rail or no PCI address: the instance has none). */
    lf_topo_t *t = be->topo;
    if (!t) {
        lf_topo_rail_t tr[LF_MAX_RAILS];
        lf_rails_topo(be, tr);
        nixl_status_t st = lf_topo_open(be->host, be->topo_xml, tr, be->nrails, &t);
        if (st != NIXL_OK)
            return st;
    }
    lf_text_t out = {0};
    lf_describe_text(be, t, &out);
    if (t != be->topo)
        lf_topo_close(t);
    if (out.oom) {
        free(out.p);
        return NIXL_ERR_NO_MEMORY;
    }
    size_t need = out.len + 1;
    nixl_status_t st = NIXL_OK;
    if (buf && *len >= need)
        memcpy(buf, out.p, need);
    else if (buf)
        st = NIXL_ERR_TOO_BIG;
    free(out.p);
    *len = need;
    return st;
}

static const nixl_backend_ops_t lf_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "libfabric",
    .description = "other hosts over libfabric (EFA, verbs, TCP; same host when intranode allows): RDMA write/read "
                   "with remote CQ data from any rail to any rail, VRAM through FI_HMEM, notifications released after "
                   "every write was counted, heartbeats for liveness",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM) | NIXL_MEM_BIT(NIXL_MEM_VRAM),
    .caps = NIXL_CAP_CROSS_HOST | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS,
    .params = lf_params,
    .num_params = LF_NUM_PARAMS,
    .create = lf_create,
    .destroy = lf_destroy,
    .reg = lf_reg,
    .dereg = lf_dereg,
    .rkey_pack = lf_rkey_pack,
    .conn_pack = lf_conn_pack,
    .peer_open = lf_peer_open,
    .peer_unload = lf_peer_unload,
    .peer_connect = lf_peer_connect,
    .peer_alive = lf_peer_alive,
    .rkey_load = lf_rkey_load,
    .rkey_unload = lf_rkey_unload,
    .xfer_prepare = lf_xfer_prepare,
    .xfer_post = lf_xfer_post,
    .xfer_status = lf_xfer_status,
    .xfer_release = lf_xfer_release,
    .notif_send = lf_notif_send,
    .progress = lf_progress,
    .describe = lf_describe,
    .xfer_cancel = lf_xfer_cancel,
};

const nixl_backend_ops_t *nixl_backend_libfabric_ops(void)
{
    return &lf_ops;
}

#ifndef NIXL_BUILTIN_LIBFABRIC
__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void);

__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void)
{
    return &lf_ops;
}
#endif
