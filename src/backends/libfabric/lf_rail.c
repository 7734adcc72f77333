/*
 * lf_rail.c - which provider, which domains, and one endpoint per domain.
 *
 * A rail is one domain of the chosen provider (one NIC for efa and verbs,
 * one interface for tcp) with its own reliable-datagram endpoint, address
 * vector and completion queue.  The provider is the first of efa, verbs,
 * tcp that fi_getinfo offers, or the one named by the "provider" parameter.
 * Whatever MR modes the provider asks for are honored here and in lf_mem.c
 * (local descriptors, virtual addresses or offsets, provider keys or keys we
 * choose, binding to the endpoint).  Rail 0 also carries the control
 * messages: receive buffers stay posted there, and a small pool of
 * registered send buffers holds messages until their completion.
 *
 * Each rail keeps the PCI address fi_info gave for its NIC, if any; with
 * rails=local that places it in the hwloc topology (lf_topo.c), so memory
 * is registered only on the rails near it.
 *
 * VRAM needs FI_HMEM: when this process has a CUDA driver the provider is
 * asked for it first (and FI_MR_HMEM allowed); an answer without it leaves
 * VRAM registered on no rail (lf_mem.c).  Without a driver nothing is
 * asked, so DRAM-only hosts open their domains as they always did.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lf_int.h"

static const char *const lf_auto_provs[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};

nixl_status_t lf_status_of(int fi_err)
{
    if (fi_err < 0)
        fi_err = -fi_err;
    if (lf_err_is_peer_gone(fi_err))
        return NIXL_ERR_PEER_GONE;
    switch (fi_err) {
    case FI_ETIMEDOUT:
        return NIXL_ERR_TIMEOUT;
    default:
        return NIXL_ERR_XFER_FAILED;
    }
}

int lf_err_is_peer_gone(int fi_err)
{
    if (fi_err < 0)
        fi_err = -fi_err;
    switch (fi_err) {
    case FI_ECONNRESET:
    case FI_ECONNREFUSED:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
    case FI_EHOSTDOWN:
    case FI_EHOSTUNREACH:
        return 1;
    default:
        return 0;
    }
}

/* "tcp" and "verbs" alone are connection-oriented: RDM comes through rxm. */
static const char *lf_prov_alias(const char *p)
{
    if (strcmp(p, "tcp") == 0)
        return "tcp;ofi_rxm";
    if (strcmp(p, "verbs") == 0)
        return "verbs;ofi_rxm";
    return p;
}

static struct fi_info *lf_hints(const char *prov, int dc, int hmem)
{
    struct fi_info *h = fi_allocinfo();
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | (hmem ? FI_HMEM : 0);
    /* Modes we can live with: our contexts have fi_context2 room, and a
     * write with remote CQ data may consume a receive buffer. */
    h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT |
                              (hmem ? FI_MR_HMEM : 0);
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    if (dc)
        h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    h->fabric_attr->prov_name = strdup(prov);
    if (!h->fabric_attr->prov_name) {
        fi_freeinfo(h);
        return NULL;
    }
    return h;
}

/* fi_getinfo for one provider: with FI_HMEM first when want_hmem (VRAM
 * reachable matters more than the rest), delivery-complete writes first:
 * they make a completed write mean "landed at the target", which release
 * and cancel rely on.  *dc and *hmem say which one answered. */
static int lf_getinfo(const char *prov, int want_hmem, struct fi_info **out, int *dc, int *hmem)
{
    int ret = -FI_ENODATA;
    for (int with_hmem = want_hmem ? 1 : 0; with_hmem >= 0; with_hmem--) {
        for (int want_dc = 1; want_dc >= 0; want_dc--) {
            struct fi_info *h = lf_hints(prov, want_dc, with_hmem);
            if (!h)
                return -FI_ENOMEM;
            ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, h, out);
            fi_freeinfo(h);
            if (ret == 0) {
                *dc = want_dc;
                *hmem = with_hmem && ((*out)->caps & FI_HMEM);
                return 0;
            }
        }
    }
    return ret;
}

/* intranode=nic on efa: its same-host traffic goes through the NIC only
 * when FI_EFA_ENABLE_SHM_TRANSFER=0, read when libfabric initializes (the
 * first fi_getinfo of the process).  A user's own setting is kept. */
static void lf_intranode_env(lf_be_t *be)
{
    if (be->intranode != LF_INTRANODE_NIC)
        return;
    if (strcmp(be->prov_param, "auto") != 0 && strncmp(be->prov_param, "efa", 3) != 0)
        return;
    const char *v = getenv("FI_EFA_ENABLE_SHM_TRANSFER");
    if (v) {
        if (strcmp(v, "0") != 0)
            LF_WARN(be, "libfabric: intranode=nic, but FI_EFA_ENABLE_SHM_TRANSFER=%s is set: efa keeps sending "
                        "same-host traffic through shared memory",
                    v);
        return;
    }
    if (setenv("FI_EFA_ENABLE_SHM_TRANSFER", "0", 0) == 0)
        LF_INFO(be, "libfabric: intranode=nic: FI_EFA_ENABLE_SHM_TRANSFER=0 set, so efa sends same-host traffic "
                    "through the NIC (effective unless libfabric was initialized earlier in this process)");
}

static int lf_name_in_list(const char *name, const char *list)
{
    size_t n = strlen(name);
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

/* The rails' infos: one per domain, IPv4 preferred where a domain offers
 * several address formats.  Returns how many. */
static unsigned lf_pick_domains(lf_be_t *be, struct fi_info *list, struct fi_info **pick)
{
    unsigned n = 0;
    int tcp_like = strncmp(list->fabric_attr->prov_name, "tcp", 3) == 0;
    for (struct fi_info *i = list; i && n < LF_MAX_RAILS; i = i->next) {
        const char *dname = i->domain_attr->name;
        if (i->domain_attr->cq_data_size < 4) {
            LF_DEBUG(be, "libfabric: domain %s skipped: remote CQ data of %zu bytes (4 needed)", dname,
                     i->domain_attr->cq_data_size);
            continue;
        }
        if (be->iface_param[0] && !lf_name_in_list(dname, be->iface_param))
            continue;
        unsigned k;
        for (k = 0; k < n; k++)
            if (strcmp(pick[k]->domain_attr->name, dname) == 0)
                break;
        if (k < n) {
            if (pick[k]->addr_format != FI_SOCKADDR_IN && i->addr_format == FI_SOCKADDR_IN)
                pick[k] = i;
            continue;
        }
        pick[n++] = i;
    }
    /* tcp lists every interface; without a choice, one is enough. */
    if (tcp_like && !be->iface_param[0] && n > 1)
        n = 1;
    return n;
}

static void lf_rail_close(lf_be_t *be, lf_rail_t *r)
{
    if (r->ep)
        fi_close(&r->ep->fid);
    if (r->index == 0)
        lf_txbufs_free(be);
    if (r->rx_mr)
        fi_close(&r->rx_mr->fid);
    if (r->cq)
        fi_close(&r->cq->fid);
    if (r->av)
        fi_close(&r->av->fid);
    if (r->domain)
        fi_close(&r->domain->fid);
    if (r->fabric)
        fi_close(&r->fabric->fid);
    if (r->info)
        fi_freeinfo(r->info);
    free(r->rx_mem);
    free(r->rx);
    free(r->slots);
    memset(r, 0, sizeof(*r));
    r->wait_fd = -1;
}

/* A buffer of ours the provider touches: registered when the provider
 * wants local descriptors, and bound to the endpoint when it wants that. */
int lf_mr_local(lf_be_t *be, lf_rail_t *r, void *buf, size_t len, uint64_t access, struct fid_mr **out)
{
    struct fid_mr *mr;
    int ret = fi_mr_reg(r->domain, buf, len, access, 0, r->next_key++, 0, &mr, NULL);
    if (ret)
        return ret;
    if (be->mr_endpoint) {
        ret = fi_mr_bind(mr, &r->ep->fid, 0);
        if (!ret)
            ret = fi_mr_enable(mr);
        if (ret) {
            fi_close(&mr->fid);
            return ret;
        }
    }
    *out = mr;
    return 0;
}

nixl_status_t lf_rx_post(lf_be_t *be, lf_rail_t *rail, lf_rxbuf_t *rb)
{
    int ret = fi_recv(rail->ep, rb->buf, rb->cap, rb->desc, FI_ADDR_UNSPEC, &rb->c.fctx);
    if (ret == 0) {
        rb->posted = 1;
        return NIXL_OK;
    }
    rb->posted = 0;
    /* Posted later by progress: a missing buffer only slows senders down. */
    if (ret != -FI_EAGAIN)
        LF_ERROR(be, "libfabric: fi_recv on rail %u failed: %s", rail->index, fi_strerror(-ret));
    return ret == -FI_EAGAIN ? NIXL_IN_PROG : NIXL_ERR_BACKEND;
}

static nixl_status_t lf_rail_buffers(lf_be_t *be, lf_rail_t *r)
{
    int ret;
    size_t cap = r->index == 0 ? LF_MSG_MAX : LF_RX_SMALL_SIZE;
    unsigned n = r->index == 0 ? LF_RX_BUFS : LF_RX_SMALL;
    if (n) {
        r->rx = calloc(n, sizeof(*r->rx));
        r->rx_mem = malloc(cap * n);
        if (!r->rx || !r->rx_mem)
            return NIXL_ERR_NO_MEMORY;
        if (be->mr_local) {
            ret = lf_mr_local(be, r, r->rx_mem, cap * n, FI_RECV, &r->rx_mr);
            if (ret) {
                LF_ERROR(be, "libfabric: registering receive buffers on rail %u failed: %s", r->index,
                         fi_strerror(-ret));
                return NIXL_ERR_BACKEND;
            }
        }
        for (unsigned i = 0; i < n; i++) {
            lf_rxbuf_t *rb = &r->rx[i];
            rb->c.kind = LF_CTX_RX;
            rb->c.rail = r->index;
            rb->buf = r->rx_mem + (size_t)i * cap;
            rb->cap = cap;
            rb->desc = r->rx_mr ? fi_mr_desc(r->rx_mr) : NULL;
            nixl_status_t st = lf_rx_post(be, r, rb);
            if (st == NIXL_ERR_BACKEND)
                return NIXL_ERR_BACKEND;
            if (st != NIXL_OK)
                r->rx_missing++;
        }
        r->nrx = n;
    }
    /* Data slots: the window of this rail, less what control messages use. */
    size_t txq = r->info->tx_attr->size;
    size_t reserve = r->index == 0 ? LF_TX_BUFS : 0;
    size_t ns = txq > reserve + 1 ? txq - reserve : 1;
    if (be->max_inflight && be->max_inflight < ns)
        ns = be->max_inflight;
    r->slots = calloc(ns, sizeof(*r->slots));
    if (!r->slots)
        return NIXL_ERR_NO_MEMORY;
    for (size_t i = 0; i < ns; i++) {
        lf_slot_t *s = &r->slots[i];
        s->c.kind = LF_CTX_DATA;
        s->c.rail = r->index;
        s->next_free = r->free_slots;
        r->free_slots = s;
    }
    r->nslots = r->nfree = (unsigned)ns;
    return NIXL_OK;
}

static nixl_status_t lf_rail_open(lf_be_t *be, lf_rail_t *r, unsigned index, const struct fi_info *info)
{
    int ret;
    const char *what;
    r->index = index;
    r->wait_fd = -1;
    r->next_key = 1;
    r->info = fi_dupinfo(info);
    if (!r->info)
        return NIXL_ERR_NO_MEMORY;
    if (info->nic && info->nic->bus_attr && info->nic->bus_attr->bus_type == FI_BUS_PCI) {
        const struct fi_pci_attr *pci = &info->nic->bus_attr->attr.pci;
        r->has_pci = 1;
        r->pci_domain = pci->domain_id;
        r->pci_bus = pci->bus_id;
        r->pci_dev = pci->device_id;
        r->pci_func = pci->function_id;
    }
    /* Data operations carry their flags; control sends need none. */
    r->info->tx_attr->op_flags = 0;
    what = "fi_fabric";
    ret = fi_fabric(r->info->fabric_attr, &r->fabric, NULL);
    if (ret)
        goto err;
    what = "fi_domain";
    ret = fi_domain(r->fabric, r->info, &r->domain, NULL);
    if (ret)
        goto err;
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 64};
    what = "fi_av_open";
    ret = fi_av_open(r->domain, &av_attr, &r->av, NULL);
    if (ret)
        goto err;
    size_t cq_size = r->info->tx_attr->size + r->info->rx_attr->size + LF_RX_BUFS;
    if (cq_size < 4096)
        cq_size = 4096;
    /* A file descriptor lets the progress thread sleep until the fabric has
     * something for us; providers without one (shm) are polled. */
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA, .size = cq_size, .wait_obj = FI_WAIT_FD};
    if (fi_cq_open(r->domain, &cq_attr, &r->cq, NULL) == 0) {
        if (fi_control(&r->cq->fid, FI_GETWAIT, &r->wait_fd) != 0)
            r->wait_fd = -1;
    } else {
        cq_attr.wait_obj = FI_WAIT_NONE;
        what = "fi_cq_open";
        ret = fi_cq_open(r->domain, &cq_attr, &r->cq, NULL);
        if (ret)
            goto err;
    }
    what = "fi_endpoint";
    ret = fi_endpoint(r->domain, r->info, &r->ep, NULL);
    if (ret)
        goto err;
    what = "fi_ep_bind(av)";
    ret = fi_ep_bind(r->ep, &r->av->fid, 0);
    if (ret)
        goto err;
    what = "fi_ep_bind(cq)";
    ret = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret)
        goto err;
    if (r->info->addr_format == FI_ADDR_STR) {
        /* shm names endpoints after the pid by default: a killed process
         * leaves its region behind, and the next process given that pid
         * would collide with it (EBUSY).  Our instance id makes it unique. */
        char name[64];
        snprintf(name, sizeof(name), "nixl-%d-%016llx-%u", (int)getpid(), (unsigned long long)be->inst, index);
        what = "fi_setname";
        ret = fi_setname(&r->ep->fid, name, strlen(name) + 1);
        if (ret)
            goto err;
    }
    what = "fi_enable";
    ret = fi_enable(r->ep);
    if (ret)
        goto err;
    r->addr_len = sizeof(r->addr);
    what = "fi_getname";
    ret = fi_getname(&r->ep->fid, r->addr, &r->addr_len);
    if (ret)
        goto err;
    if (r->addr_len == 0 || r->addr_len > LF_ADDR_MAX) {
        LF_ERROR(be, "libfabric: rail %u (%s): endpoint name of %zu bytes, at most %d supported", index,
                 r->info->domain_attr->name, r->addr_len, LF_ADDR_MAX);
        return NIXL_ERR_BACKEND;
    }
    nixl_status_t st = lf_rail_buffers(be, r);
    if (st == NIXL_OK && index == 0)
        st = lf_txbufs_init(be);
    return st;
err:
    LF_ERROR(be, "libfabric: rail %u (%s, domain %s): %s failed: %s", index, r->info->fabric_attr->prov_name,
             r->info->domain_attr->name, what, fi_strerror(-ret));
    return NIXL_ERR_BACKEND;
}

/* shm regions live in /dev/shm under the endpoint's name; a process killed
 * leaves its own behind.  Ours are named nixl-<pid>-<instance>-<rail>: those
 * of processes that no longer exist are removed. */
static void lf_shm_sweep(lf_be_t *be)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    unsigned removed = 0;
    while ((e = readdir(d)) != NULL) {
        int pid, n = 0;
        unsigned long long inst;
        unsigned rail;
        if (sscanf(e->d_name, "nixl-%d-%16llx-%u%n", &pid, &inst, &rail, &n) != 3 || e->d_name[n] != 0 || pid <= 0)
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        if (unlink(path) == 0)
            removed++;
    }
    closedir(d);
    if (removed)
        LF_INFO(be, "libfabric: removed %u shm region(s) left by processes that no longer exist", removed);
}

/* Up to 2.6.0, shm's CUDA IPC copy is a cudaMemcpy, which returns before
 * a device-to-device copy is done: the initiator's completion (and so a
 * READ, and a WRITE's notification) came before the bytes landed
 * (measured on an H200: 256 MiB "written" at 17 TB/s, READs verified
 * wrong; libfabric issue 11231).  The fix (the v2.6.x branch after 2.6.0,
 * and 2.7) copies on a stream and completes at its event, and defines
 * the variable FI_HMEM_CUDA_ENABLE_ASYNC_COPY (on unless set false) that
 * turns it off again.  Its version still says 2.6.0, so the variable is
 * what tells: in params, as fi_getparams lists them. */
int lf_shm_ipc_lands(const struct fi_param *params, int n)
{
    for (int i = 0; params && i < n; i++) {
        if (!params[i].name || strcmp(params[i].name, "FI_HMEM_CUDA_ENABLE_ASYNC_COPY") != 0)
            continue;
        const char *v = params[i].value;
        if (!v)
            return 1;
        return !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
                 strcasecmp(v, "off") == 0);
    }
    return 0;
}

static void lf_set_modes(lf_be_t *be, const struct fi_info *info, int dc)
{
    int mr_mode = info->domain_attr->mr_mode;
    snprintf(be->prov_name, sizeof(be->prov_name), "%s", info->fabric_attr->prov_name);
    /* "tcp;ofi_rxm" is tcp to a user: the path names the core provider. */
    char shortname[32];
    size_t n = strcspn(be->prov_name, ";");
    if (n >= sizeof(shortname))
        n = sizeof(shortname) - 1;
    memcpy(shortname, be->prov_name, n);
    shortname[n] = 0;
    snprintf(be->path_write, sizeof(be->path_write), "libfabric.%s.write", shortname);
    snprintf(be->path_read, sizeof(be->path_read), "libfabric.%s.read", shortname);
    snprintf(be->path_ipc_write, sizeof(be->path_ipc_write), "libfabric.%s.ipc.write", shortname);
    snprintf(be->path_ipc_read, sizeof(be->path_ipc_read), "libfabric.%s.ipc.read", shortname);
    snprintf(be->path_sar_write, sizeof(be->path_sar_write), "libfabric.%s.sar.write", shortname);
    snprintf(be->path_sar_read, sizeof(be->path_sar_read), "libfabric.%s.sar.read", shortname);
    be->addr_format = info->addr_format;
    be->virt_addr = (mr_mode & FI_MR_VIRT_ADDR) != 0;
    be->prov_key = (mr_mode & FI_MR_PROV_KEY) != 0;
    be->mr_local = (mr_mode & FI_MR_LOCAL) != 0;
    be->mr_endpoint = (mr_mode & FI_MR_ENDPOINT) != 0;
    be->rx_cq_data = (info->mode & FI_RX_CQ_DATA) != 0;
    /* A WRITE request is done once its data landed.  Where sends are
     * ordered after writes, one FENCE per rail the target answers; else the
     * writes carry CQ data and the target answers once it counted them all
     * (every provider used here has CQ data).  Delivery-complete writes are
     * there when asked for. */
    int saw = (info->tx_attr->msg_order & FI_ORDER_SAW) != 0;
    be->dc_ok = dc;
    if (strcmp(be->sync_param, "fence") == 0 && !saw)
        LF_WARN(be, "libfabric: completion=fence asked, but provider %s does not order sends after writes: "
                    "counting writes instead", be->prov_name);
    if (strcmp(be->sync_param, "delivery") == 0 && !dc)
        LF_WARN(be, "libfabric: completion=delivery asked, but provider %s does not take FI_DELIVERY_COMPLETE",
                be->prov_name);
    if (strcmp(be->sync_param, "delivery") == 0 && dc)
        be->sync = LF_SYNC_DELIVERY;
    else if (strcmp(be->sync_param, "count") == 0 || !saw)
        be->sync = LF_SYNC_COUNT;
    else
        be->sync = LF_SYNC_FENCE;
    be->dc_flag = be->sync == LF_SYNC_DELIVERY ? FI_DELIVERY_COMPLETE : 0;
    be->tag_bits = info->domain_attr->cq_data_size >= 8 ? 32 : 20;
    be->idx_bits = info->domain_attr->cq_data_size >= 8 ? 32 : 12;
    /* Operations are cut at 1 GiB at most, whatever the provider allows:
     * the counts stay far from overflowing and large pieces pipeline. */
    be->max_msg = 1ull << 30;
    if (info->ep_attr->max_msg_size && info->ep_attr->max_msg_size < be->max_msg)
        be->max_msg = info->ep_attr->max_msg_size;
}

nixl_status_t lf_rails_open(lf_be_t *be)
{
    struct fi_info *list = NULL;
    int dc = 0, hmem = 0, ret = -FI_ENODATA;
    char tried[256] = "";
    lf_intranode_env(be);
    if (strcmp(be->prov_param, "auto") == 0) {
        for (size_t i = 0; i < sizeof(lf_auto_provs) / sizeof(lf_auto_provs[0]) && !list; i++) {
            ret = lf_getinfo(lf_auto_provs[i], be->cuda_driver, &list, &dc, &hmem);
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof(tried) - used, "%s%s", used ? ", " : "", lf_auto_provs[i]);
            if (ret)
                list = NULL;
        }
    } else {
        const char *p = lf_prov_alias(be->prov_param);
        snprintf(tried, sizeof(tried), "%s", p);
        ret = lf_getinfo(p, be->cuda_driver, &list, &dc, &hmem);
        if (ret)
            list = NULL;
    }
    if (!list) {
        LF_ERROR(be, "libfabric: no usable provider (tried %s): %s; fi_info -l lists what this host has", tried,
                 fi_strerror(-ret));
        return NIXL_ERR_NOT_SUPPORTED;
    }
    struct fi_info *pick[LF_MAX_RAILS];
    unsigned n = lf_pick_domains(be, list, pick);
    if (n == 0) {
        char avail[256] = "";
        size_t used = 0;
        for (struct fi_info *i = list; i; i = i->next) {
            if (lf_name_in_list(i->domain_attr->name, avail))
                continue;
            int k = snprintf(avail + used, sizeof(avail) - used, "%s%s", used ? "," : "", i->domain_attr->name);
            if (k < 0 || (size_t)k >= sizeof(avail) - used)
                break;
            used += (size_t)k;
        }
        LF_ERROR(be, "libfabric: provider %s has no domain matching iface=\"%s\" with remote CQ data (domains: %s)",
                 list->fabric_attr->prov_name, be->iface_param, avail);
        fi_freeinfo(list);
        return NIXL_ERR_NOT_SUPPORTED;
    }
    lf_set_modes(be, pick[0], dc);
    be->hmem = hmem;
    be->shm_hmem = hmem && strcmp(be->prov_name, "shm") == 0;
    be->prov_version = pick[0]->fabric_attr->prov_version;
    if (be->shm_hmem) {
        struct fi_param *params = NULL;
        int nparams = 0;
        if (fi_getparams(&params, &nparams) == 0) {
            be->shm_ipc_landed = lf_shm_ipc_lands(params, nparams);
            fi_freeparams(params);
        }
    }
    if (be->cuda_driver && !hmem)
        LF_INFO(be, "libfabric: provider %s has no CUDA HMEM support (FI_HMEM): VRAM registered with it reaches no "
                    "peer (cross-host GPU memory needs EFA or verbs with HMEM)",
                be->prov_name);
    if (pick[0]->addr_format == FI_ADDR_STR)
        lf_shm_sweep(be);
    nixl_status_t st = NIXL_OK;
    for (unsigned i = 0; i < n; i++) {
        st = lf_rail_open(be, &be->rails[i], i, pick[i]);
        be->nrails = i + 1;
        if (st != NIXL_OK)
            break;
        if (be->rails[i].info->ep_attr->max_msg_size && be->rails[i].info->ep_attr->max_msg_size < be->max_msg)
            be->max_msg = be->rails[i].info->ep_attr->max_msg_size;
    }
    fi_freeinfo(list);
    if (st != NIXL_OK) {
        lf_rails_close(be);
        return st;
    }
    be->all_rails = be->nrails == 32 ? UINT32_MAX : (1u << be->nrails) - 1;
    return NIXL_OK;
}

void lf_rails_topo(const lf_be_t *be, lf_topo_rail_t *out)
{
    for (unsigned i = 0; i < be->nrails; i++) {
        const lf_rail_t *r = &be->rails[i];
        out[i].domain = r->info->domain_attr->name;
        out[i].has_pci = r->has_pci;
        out[i].pci_domain = r->pci_domain;
        out[i].pci_bus = r->pci_bus;
        out[i].pci_dev = r->pci_dev;
        out[i].pci_func = r->pci_func;
    }
}

nixl_status_t lf_rails_locality(lf_be_t *be)
{
    unsigned with_pci = 0;
    for (unsigned i = 0; i < be->nrails; i++)
        with_pci += be->rails[i].has_pci != 0;
    /* One rail leaves nothing to choose. */
    if (!be->rails_local || be->nrails < 2)
        return NIXL_OK;
    if (!with_pci) {
        LF_INFO(be, "libfabric: provider %s gives no PCI address for its %u rails: every region goes on every rail",
                be->prov_name, be->nrails);
        return NIXL_OK;
    }
    lf_topo_rail_t tr[LF_MAX_RAILS];
    lf_rails_topo(be, tr);
    nixl_status_t st = lf_topo_open(be->host, be->topo_xml, tr, be->nrails, &be->topo);
    if (st != NIXL_OK)
        return st;
    char placed[128];
    LF_INFO(be, "libfabric: rails placed in the topology (%s): %s of %u", lf_topo_source(be->topo),
            lf_topo_mask_str(lf_topo_located(be->topo), placed, sizeof(placed)), be->nrails);
    return NIXL_OK;
}

/* Rails whose endpoint could not be closed safely, kept for the life of
 * the process: the provider may still refer to their memory.  Reachable
 * from here, so leak checkers do not count them. */
typedef struct lf_grave {
    struct lf_grave *next;
    lf_rail_t rail;
    lf_cmsg_t *msgs;
    lf_txbuf_t **txbufs;
} lf_grave_t;
static lf_grave_t *lf_graveyard;
static pthread_mutex_t lf_graveyard_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned lf_rail_busy_reads(const lf_rail_t *r)
{
    unsigned n = 0;
    for (unsigned i = 0; i < r->nslots; i++)
        n += r->slots[i].busy && r->slots[i].read;
    return n;
}

/* A READ still in flight to a peer that vanished makes fi_close of an rxm
 * endpoint crash (libfabric 1.17, tcp): such a rail is left open. */
static int lf_rail_bury(lf_be_t *be, lf_rail_t *r)
{
    unsigned n = lf_rail_busy_reads(r);
    if (!n)
        return 0;
    lf_grave_t *g = calloc(1, sizeof(*g));
    if (!g)
        return 0;
    LF_WARN(be, "libfabric: %s: %u read(s) to vanished peers never completed on rail %u; its endpoint is left open "
                "(closing it would crash the provider)",
            be->agent_name, n, r->index);
    g->rail = *r;
    if (r->index == 0) {
        g->msgs = be->tx_flight;
        be->tx_flight = NULL;
        be->tx_inflight = 0;
        g->txbufs = be->txbufs;
        be->txbufs = NULL;
        be->ntxbufs = 0;
        be->tx_free = NULL;
    }
    pthread_mutex_lock(&lf_graveyard_lock);
    g->next = lf_graveyard;
    lf_graveyard = g;
    pthread_mutex_unlock(&lf_graveyard_lock);
    memset(r, 0, sizeof(*r));
    r->wait_fd = -1;
    return 1;
}

void lf_rails_close(lf_be_t *be)
{
    for (unsigned i = be->nrails; i-- > 0;)
        if (!lf_rail_bury(be, &be->rails[i]))
            lf_rail_close(be, &be->rails[i]);
    be->nrails = 0;
    be->all_rails = 0;
    lf_topo_close(be->topo);
    be->topo = NULL;
}
