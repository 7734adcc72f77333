/*
 * bench_ofi.c - the raw limit of nixlbench's libfabric rows: a minimal
 * libfabric write (or read) loop, no library in between.
 *
 * fabtests is not packaged in Debian, so this is our own: the initiator
 * process opens an RDM endpoint of the provider the backend uses (the
 * "provider" and "iface" parameters or their NIXL_LIBFABRIC_* variables,
 * same auto order: efa, verbs, tcp), and a raw target process (this binary
 * re-executed with a hidden role, on this host) opens one too.  Per
 * iteration the loop posts the row's batch of block-sized pieces to the
 * row's target slots, as many in flight as the provider's transmit queue
 * allows (the backend's window), then waits for every completion and ends
 * the iteration the way the backend ends a request: when the provider
 * orders sends after writes, one small message the target answers (the
 * writes have landed when the answer comes); otherwise the writes carry CQ
 * data and the message says how many the target must count before it
 * answers; delivery-complete writes when completion=delivery.  The rate is a mean over timed iterations, like the
 * row's.  The raw target spins only while a row is measured.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "bench_ofi.h"

/* How an iteration of writes ends, as the backend ends a WRITE request
 * (its "completion" parameter): a fence message the target answers, ordered
 * after the writes; writes carrying CQ data and one message with their count
 * the target answers once it counted them; delivery-complete writes. */
enum { OFI_SYNC_FENCE, OFI_SYNC_COUNT, OFI_SYNC_DC };

typedef struct ofi {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *mr;
    void *desc;
    uint8_t *buf;
    size_t len;
    fi_addr_t peer;
    int sync;
    size_t window;
    int wait_fd; /* the raw target sleeps on it between events, as the backend's thread does */
    uint8_t msg[2][64]; /* [0] receive, [1] send */
    struct fi_context2 rctx, sctx, ctx[1];
} ofi_t;

typedef struct ofi_remote {
    uint64_t key, base;
    int virt;
} ofi_remote_t;

static const char *const ofi_auto[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};

static void ofi_die(const char *what, int ret)
{
    bench_die("raw libfabric limit: %s: %s", what, fi_strerror(ret < 0 ? -ret : ret));
}

static int ofi_getinfo(const char *prov, struct fi_info **out, int *dc)
{
    int ret = -FI_ENODATA;
    for (int want_dc = 1; want_dc >= 0; want_dc--) {
        struct fi_info *h = fi_allocinfo();
        if (!h)
            return -FI_ENOMEM;
        h->ep_attr->type = FI_EP_RDM;
        h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
        h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
        h->domain_attr->threading = FI_THREAD_DOMAIN;
        if (want_dc)
            h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
        h->fabric_attr->prov_name = strdup(prov);
        ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, h, out);
        fi_freeinfo(h);
        if (ret == 0) {
            *dc = want_dc;
            return 0;
        }
    }
    return ret;
}

/* The domain the backend would take first: the named one, else the first
 * (IPv4 preferred where a domain has several address formats). */
static const struct fi_info *ofi_pick(const struct fi_info *list, const char *iface)
{
    const struct fi_info *pick = NULL;
    size_t n = strlen(iface);
    for (const struct fi_info *i = list; i; i = i->next) {
        const char *d = i->domain_attr->name;
        if (i->domain_attr->cq_data_size < 4)
            continue;
        if (n) {
            const char *p = strstr(iface, d);
            size_t dl = strlen(d);
            if (!p || (p != iface && p[-1] != ',') || (p[dl] != 0 && p[dl] != ','))
                continue;
        }
        if (!pick) {
            pick = i;
        } else if (strcmp(pick->domain_attr->name, d) == 0 && pick->addr_format != FI_SOCKADDR_IN &&
                   i->addr_format == FI_SOCKADDR_IN) {
            pick = i;
        }
    }
    return pick;
}

static void ofi_open(ofi_t *e, const char *prov, const char *iface, const char *completion, size_t len, int want_fd)
{
    struct fi_info *list = NULL;
    int dc = 0, ret = -FI_ENODATA;
    if (strcmp(prov, "auto") == 0) {
        for (size_t i = 0; i < sizeof(ofi_auto) / sizeof(ofi_auto[0]) && ret; i++)
            ret = ofi_getinfo(ofi_auto[i], &list, &dc);
    } else {
        const char *p = strcmp(prov, "tcp") == 0 ? "tcp;ofi_rxm" : strcmp(prov, "verbs") == 0 ? "verbs;ofi_rxm" : prov;
        ret = ofi_getinfo(p, &list, &dc);
    }
    if (ret)
        ofi_die("fi_getinfo", ret);
    const struct fi_info *pick = ofi_pick(list, iface);
    if (!pick)
        bench_die("raw libfabric limit: no domain matches iface \"%s\"", iface);
    e->info = fi_dupinfo(pick);
    fi_freeinfo(list);
    if ((ret = fi_fabric(e->info->fabric_attr, &e->fabric, NULL)))
        ofi_die("fi_fabric", ret);
    if ((ret = fi_domain(e->fabric, e->info, &e->domain, NULL)))
        ofi_die("fi_domain", ret);
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 4};
    if ((ret = fi_av_open(e->domain, &aa, &e->av, NULL)))
        ofi_die("fi_av_open", ret);
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = e->info->tx_attr->size + 64,
                            .wait_obj = want_fd ? FI_WAIT_FD : FI_WAIT_NONE};
    e->wait_fd = -1;
    if (want_fd && fi_cq_open(e->domain, &ca, &e->cq, NULL) == 0) {
        if (fi_control(&e->cq->fid, FI_GETWAIT, &e->wait_fd))
            e->wait_fd = -1;
    } else {
        ca.wait_obj = FI_WAIT_NONE;
        if ((ret = fi_cq_open(e->domain, &ca, &e->cq, NULL)))
            ofi_die("fi_cq_open", ret);
    }
    if ((ret = fi_endpoint(e->domain, e->info, &e->ep, NULL)))
        ofi_die("fi_endpoint", ret);
    if ((ret = fi_ep_bind(e->ep, &e->av->fid, 0)) || (ret = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)))
        ofi_die("fi_ep_bind", ret);
    if (e->info->addr_format == FI_ADDR_STR) {
        /* shm: a name of our own, as the backend does (default names are
         * the pid's, and a region left by a dead process would collide). */
        char name[64];
        snprintf(name, sizeof(name), "nixlbench-%d-%d", (int)getpid(), want_fd);
        if ((ret = fi_setname(&e->ep->fid, name, strlen(name) + 1)))
            ofi_die("fi_setname", ret);
    }
    if ((ret = fi_enable(e->ep)))
        ofi_die("fi_enable", ret);
    e->len = len + sizeof(e->msg);
    if (posix_memalign((void **)&e->buf, 4096, e->len))
        bench_die("raw libfabric limit: out of memory for %zu bytes", e->len);
    memset(e->buf, 0x5a, e->len);
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
    if ((ret = fi_mr_reg(e->domain, e->buf, e->len, access, 0, 1, 0, &e->mr, NULL)))
        ofi_die("fi_mr_reg", ret);
    if (e->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        if ((ret = fi_mr_bind(e->mr, &e->ep->fid, 0)) || (ret = fi_mr_enable(e->mr)))
            ofi_die("fi_mr_bind", ret);
    }
    e->desc = fi_mr_desc(e->mr);
    /* Same choice as the backend (lf_rail.c). */
    int saw = (e->info->tx_attr->msg_order & FI_ORDER_SAW) != 0;
    if (strcmp(completion, "delivery") == 0 && dc)
        e->sync = OFI_SYNC_DC;
    else if (strcmp(completion, "count") == 0 || !saw)
        e->sync = OFI_SYNC_COUNT;
    else
        e->sync = OFI_SYNC_FENCE;
    size_t tx = e->info->tx_attr->size;
    e->window = tx > 32 ? tx - 16 : tx;
}

/* Endpoint first: shm removes its region when the endpoint closes. */
static void ofi_close(ofi_t *e)
{
    if (e->ep)
        fi_close(&e->ep->fid);
    if (e->mr)
        fi_close(&e->mr->fid);
    if (e->cq)
        fi_close(&e->cq->fid);
    if (e->av)
        fi_close(&e->av->fid);
    if (e->domain)
        fi_close(&e->domain->fid);
    if (e->fabric)
        fi_close(&e->fabric->fid);
    if (e->info)
        fi_freeinfo(e->info);
    free(e->buf);
    memset(e, 0, sizeof(*e));
}

/* The small messages live at the end of the registered buffer. */
static uint8_t *ofi_msgbuf(ofi_t *e, int which)
{
    return e->buf + e->len - sizeof(e->msg) + (size_t)which * sizeof(e->msg[0]);
}

static void ofi_post_recv(ofi_t *e)
{
    int ret;
    while ((ret = (int)fi_recv(e->ep, ofi_msgbuf(e, 0), sizeof(e->msg[0]), e->desc, FI_ADDR_UNSPEC, &e->rctx)) ==
           -FI_EAGAIN)
        fi_cq_read(e->cq, NULL, 0);
    if (ret)
        ofi_die("fi_recv", ret);
}

/* One completion of ours; returns its context. */
static void *ofi_wait_one(ofi_t *e)
{
    struct fi_cq_data_entry ce;
    for (;;) {
        ssize_t n = fi_cq_read(e->cq, &ce, 1);
        if (n == 1)
            return ce.op_context;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            fi_cq_readerr(e->cq, &ee, 0);
            ofi_die("completion", ee.err);
        }
        if (n != -FI_EAGAIN)
            ofi_die("fi_cq_read", (int)n);
        sched_yield();
    }
}

/* The target's wait: like the backend's thread, poll while events come,
 * sleep on the CQ's descriptor (when it has one) after a quiet spell.
 * Writes carrying CQ data are counted into *counted (their context means
 * nothing). */
static void *ofi_serve_one(ofi_t *e, uint64_t *counted)
{
    struct fi_cq_data_entry ce;
    uint64_t last = bench_now_ns();
    for (;;) {
        ssize_t n = fi_cq_read(e->cq, &ce, 1);
        if (n == 1 && (ce.flags & FI_REMOTE_CQ_DATA) && !(ce.flags & FI_RECV)) {
            (*counted)++;
            last = bench_now_ns();
            return NULL;
        }
        if (n == 1)
            return ce.op_context;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            fi_cq_readerr(e->cq, &ee, 0);
            ofi_die("completion", ee.err);
        }
        if (n != -FI_EAGAIN)
            ofi_die("fi_cq_read", (int)n);
        if (e->wait_fd < 0 || bench_now_ns() - last < 200000) {
            sched_yield();
            continue;
        }
        struct fid *f = &e->cq->fid;
        if (fi_trywait(e->fabric, &f, 1) == FI_SUCCESS) {
            struct pollfd p = {.fd = e->wait_fd, .events = POLLIN};
            if (poll(&p, 1, 100) > 0)
                last = bench_now_ns();
        }
    }
}

/* A one-letter message, with a count for 'F'. */
static void ofi_send_byte(ofi_t *e, char c, uint64_t count)
{
    uint8_t *m = ofi_msgbuf(e, 1);
    m[0] = (uint8_t)c;
    memcpy(m + 1, &count, sizeof(count));
    int ret;
    while ((ret = (int)fi_send(e->ep, m, 1 + sizeof(count), e->desc, e->peer, &e->sctx)) == -FI_EAGAIN)
        fi_cq_read(e->cq, NULL, 0);
    if (ret)
        ofi_die("fi_send", ret);
}

static void hex_put(char *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static size_t hex_get(const char *s, uint8_t *out, size_t cap)
{
    size_t n = 0;
    while (s[0] && s[1] && n < cap) {
        unsigned v;
        if (sscanf(s, "%2x", &v) != 1)
            break;
        out[n++] = (uint8_t)v;
        s += 2;
    }
    return n;
}

static void ofi_insert_peer(ofi_t *e, const char *hex)
{
    uint8_t addr[256];
    size_t n = hex_get(hex, addr, sizeof(addr));
    if (n == 0 || fi_av_insert(e->av, addr, 1, &e->peer, 0, NULL) != 1)
        bench_die("raw libfabric limit: bad peer address \"%s\"", hex);
}

/* ---- the raw target process ---- */

int bench_ofi_target_main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    ofi_t e;
    memset(&e, 0, sizeof(e));
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    ofi_open(&e, argv[2], argv[3], argv[4], (size_t)strtoull(argv[5], NULL, 10), 1);
    uint8_t addr[256];
    size_t alen = sizeof(addr);
    int ret = fi_getname(&e.ep->fid, addr, &alen);
    if (ret || alen > sizeof(addr))
        ofi_die("fi_getname", ret);
    char hex[2 * sizeof(addr) + 1];
    hex_put(hex, addr, alen);
    uint64_t key = fi_mr_key(e.mr);
    printf("ready %s %" PRIu64 " %" PRIu64 " %d\n", hex, key, (uint64_t)(uintptr_t)e.buf,
           (e.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? 1 : 0);
    fflush(stdout);
    char line[1024];
    while (fgets(line, sizeof(line), stdin)) {
        if (strncmp(line, "peer ", 5) == 0) {
            line[strcspn(line, "\n")] = 0;
            ofi_insert_peer(&e, line + 5);
            ofi_post_recv(&e);
        } else if (strncmp(line, "go", 2) == 0) {
            /* Serve until the initiator says stop: reading the CQ is what
             * moves manual-progress providers. */
            uint64_t counted = 0, want = 0;
            int fence = 0;
            for (;;) {
                void *ctx = ofi_serve_one(&e, &counted);
                if (ctx == &e.rctx) {
                    char c = (char)ofi_msgbuf(&e, 0)[0];
                    memcpy(&want, ofi_msgbuf(&e, 0) + 1, sizeof(want));
                    ofi_post_recv(&e);
                    if (c == 'S')
                        break;
                    fence = c == 'F';
                }
                /* Answered once the writes it counts have come in. */
                if (fence && counted >= want) {
                    counted -= want;
                    fence = 0;
                    ofi_send_byte(&e, 'A', 0);
                }
            }
            printf("stopped\n");
            fflush(stdout);
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
    }
    ofi_close(&e);
    return 0;
}

/* ---- the initiator side ---- */

static struct {
    int ready;
    ofi_t e;
    ofi_remote_t rem;
    FILE *to, *from;
    pid_t pid;
    uint64_t max;
} g_ofi;

int bench_ofi_wanted(const bench_opts_t *o)
{
    return strcmp(o->backend, "libfabric") == 0 && o->init_mem == BENCH_MEM_DRAM && o->tgt_mem == BENCH_MEM_DRAM;
}

static void ofi_stop_target(void)
{
    if (!g_ofi.pid)
        return;
    fprintf(g_ofi.to, "quit\n");
    fflush(g_ofi.to);
    int ws;
    waitpid(g_ofi.pid, &ws, 0);
    g_ofi.pid = 0;
    ofi_close(&g_ofi.e);
}

/* The largest row of the sweep, as the initiator sizes its buffer. */
static uint64_t ofi_max_row(const bench_opts_t *o)
{
    uint64_t max = 0;
    for (uint64_t ba = o->batch_min; ba <= o->batch_max; ba *= 2)
        for (uint64_t bl = o->block_min; bl <= o->block_max; bl *= 2)
            if (bl <= o->max_bytes / ba && bl * ba > max)
                max = bl * ba;
    return max;
}

static void ofi_start(const bench_opts_t *o)
{
    const char *prov = bench_param(o, "provider", "NIXL_LIBFABRIC_PROVIDER", "auto");
    const char *iface = bench_param(o, "iface", "NIXL_LIBFABRIC_IFACE", "");
    const char *completion = bench_param(o, "completion", "NIXL_LIBFABRIC_COMPLETION", "auto");
    uint64_t max = ofi_max_row(o);
    char bytes[32];
    snprintf(bytes, sizeof(bytes), "%" PRIu64, max);
    int to[2], from[2];
    if (pipe(to) || pipe(from))
        bench_die("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]);
        close(to[1]);
        close(from[0]);
        close(from[1]);
        char *args[] = {"nixlbench", "--ofi-raw-target", (char *)prov, (char *)iface, (char *)completion, bytes, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    g_ofi.pid = pid;
    g_ofi.to = fdopen(to[1], "w");
    g_ofi.from = fdopen(from[0], "r");
    bench_at_exit(ofi_stop_target);

    /* The backend's CQs carry a file descriptor (its thread sleeps on it),
     * which costs a little per completion: so does the raw loop's. */
    ofi_open(&g_ofi.e, prov, iface, completion, max, 1);
    g_ofi.max = max;
    char line[1024], hex[600];
    if (!fgets(line, sizeof(line), g_ofi.from) ||
        sscanf(line, "ready %599s %" SCNu64 " %" SCNu64 " %d", hex, &g_ofi.rem.key, &g_ofi.rem.base, &g_ofi.rem.virt) != 4)
        bench_die("raw libfabric limit: the raw target did not start");
    ofi_insert_peer(&g_ofi.e, hex);
    uint8_t addr[256];
    size_t alen = sizeof(addr);
    int ret = fi_getname(&g_ofi.e.ep->fid, addr, &alen);
    if (ret || alen > sizeof(addr))
        ofi_die("fi_getname", ret);
    hex_put(hex, addr, alen);
    fprintf(g_ofi.to, "peer %s\n", hex);
    fflush(g_ofi.to);
    ofi_post_recv(&g_ofi.e);
    g_ofi.ready = 1;
}

/* One iteration: every piece posted and completed, then the end of a
 * request as the backend does it. */
static void ofi_iter(ofi_t *e, const ofi_remote_t *rem, uint64_t block, uint64_t batch, const uint32_t *slot,
                     nixl_op_t op)
{
    uint64_t posted = 0, done = 0, inflight = 0;
    struct fi_cq_data_entry ce[64];
    uint64_t base_flags = FI_COMPLETION;
    if (op == NIXL_OP_WRITE && e->sync == OFI_SYNC_DC)
        base_flags |= FI_DELIVERY_COMPLETE;
    if (op == NIXL_OP_WRITE && e->sync == OFI_SYNC_COUNT)
        base_flags |= FI_REMOTE_CQ_DATA;
    while (done < batch) {
        while (posted < batch && inflight < e->window) {
            uint64_t flags = base_flags;
            if (posted + 1 < batch && inflight + 1 < e->window)
                flags |= FI_MORE;
            uint64_t roff = (uint64_t)slot[posted] * block;
            struct iovec iov = {.iov_base = e->buf + posted * block, .iov_len = block};
            void *desc = e->desc;
            struct fi_rma_iov riov = {.addr = (rem->virt ? rem->base : 0) + roff, .len = block, .key = rem->key};
            struct fi_msg_rma m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = e->peer,
                                   .rma_iov = &riov, .rma_iov_count = 1, .context = e->ctx};
            ssize_t ret = op == NIXL_OP_WRITE ? fi_writemsg(e->ep, &m, flags) : fi_readmsg(e->ep, &m, flags);
            if (ret == -FI_EAGAIN)
                break;
            if (ret)
                ofi_die(op == NIXL_OP_WRITE ? "fi_writemsg" : "fi_readmsg", (int)ret);
            posted++;
            inflight++;
        }
        ssize_t n = fi_cq_read(e->cq, ce, 64);
        if (n == -FI_EAGAIN) {
            sched_yield(); /* as nixlbench polls a request */
            continue;
        }
        if (n < 0) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            fi_cq_readerr(e->cq, &ee, 0);
            ofi_die("completion", ee.err);
        }
        for (ssize_t i = 0; i < n; i++) {
            if (ce[i].op_context == e->ctx) {
                done++;
                inflight--;
            }
        }
    }
    if (op == NIXL_OP_WRITE && e->sync != OFI_SYNC_DC) {
        ofi_send_byte(e, 'F', e->sync == OFI_SYNC_COUNT ? batch : 0);
        while (ofi_wait_one(e) != &e->rctx)
            ;
        ofi_post_recv(e);
    }}

double bench_ofi_limit(const bench_opts_t *o, uint64_t block, uint64_t batch, const uint32_t *slot, nixl_op_t op)
{
    enum { REPS = 3 };
    const uint64_t min_rep_ns = 20000000;
    if (!g_ofi.ready)
        ofi_start(o);
    if (block * batch > g_ofi.max)
        bench_die("raw libfabric limit: row of %" PRIu64 " bytes exceeds the sweep's largest", block * batch);
    fprintf(g_ofi.to, "go\n");
    fflush(g_ofi.to);
    ofi_t *e = &g_ofi.e;
    for (int w = 0; w < 3; w++)
        ofi_iter(e, &g_ofi.rem, block, batch, slot, op);
    uint64_t iters = 1;
    for (;;) {
        uint64_t t0 = bench_now_ns();
        for (uint64_t i = 0; i < iters; i++)
            ofi_iter(e, &g_ofi.rem, block, batch, slot, op);
        if (bench_now_ns() - t0 >= min_rep_ns || iters >= (1u << 20))
            break;
        iters *= 2;
    }
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < REPS; r++)
        for (uint64_t i = 0; i < iters; i++)
            ofi_iter(e, &g_ofi.rem, block, batch, slot, op);
    uint64_t dt = bench_now_ns() - t0;
    ofi_send_byte(e, 'S', 0);
    while (ofi_wait_one(e) != &e->sctx)
        ;
    char line[64];
    if (!fgets(line, sizeof(line), g_ofi.from) || strncmp(line, "stopped", 7) != 0)
        bench_die("raw libfabric limit: the raw target stopped answering");
    return (double)(block * batch) * (double)(iters * REPS) * 1e9 / (double)(dt ? dt : 1);
}
