/*
 * test_ucx.c - the ucx backend through its ops, with a fake host (no
 * core): two instances in one process over whatever UCX_TLS allows.
 *
 *   conn_corrupt  every truncation and damaged field of the conn info is
 *                 refused (BAD_METADATA) before UCX sees it; the good one
 *                 loads
 *   rkey_corrupt  the same for a region's key blob, and a key that names
 *                 another region or memory type
 *   xfer          WRITE with a notification (the bytes are there when it
 *                 arrives, sender named), READ back, bytes compared; the
 *                 path names a transport
 *   ep_info       the ucp_ep_print_info parser on UCX 1.13's and 1.16's printouts,
 *                 the protocol tables' (1.13's, 1.20's)
 *   vram          VRAM registers (no UCX handle), its key says so, a
 *                 request is NO_PATH with one ERROR line
 *   fallback      transports=rc_mlx5 over tcp: the request is a fallback,
 *                 counted at post with its cause; transports=tcp: none
 *   peer_lost     a peer process SIGKILLed, loaded as if on another host
 *                 (no pidfd): requests end PEER_GONE through UCX's error
 *                 callback within 5 s, notifications are refused
 *   silent        a peer that never progresses (no thread, no calls) is
 *                 gone for silence: a READ ends PEER_GONE within
 *                 peer_timeout_ms plus a margin (tcp)
 *   renew         a peer gone for silence alone is tried again after twice
 *                 peer_timeout_ms on a new endpoint: the READ then works
 *   cancel_bound  a canceled READ of a peer that never progresses ends
 *                 CANCELED once release_wait_ms (300) passed, before the
 *                 silence rule (2 s) would; the peer's other request ends
 *                 PEER_GONE, a new post is refused (the peer is stalled)
 *   busy          with the instance's lock held by another thread (as a
 *                 UCX call blocking inside progress holds it), status says
 *                 IN_PROG and cancel returns; the recorded cancel ends the
 *                 WRITE CANCELED once the lock is free, never notified;
 *                 posts are queued: one canceled while queued is CANCELED
 *                 at once and never moves, the other moves once the lock
 *                 is free, bytes and its one notification checked; ended
 *                 requests (quiet) are polled, canceled and released, and
 *                 the core's progress returns, with the lock held
 *   tcpold        the connections a renewal waits for (ucx_tcpold.c), on
 *                 a loopback TCP connection with bytes left unacknowledged,
 *                 then drained (no UCX)
 *   learn         what UCX chose, read from its protocol table after a
 *                 first post (UCX_PROTO_ENABLE=y, tcp): path ucx.tcp
 *   chunks        a 5 MiB piece (several operations of UCX_CHUNK) written
 *                 and read back, bytes compared; a short peer_timeout_ms (2 s)
 *                 never fails a healthy peer
 *
 * Exit 77 (skip) with the reason when UCX cannot create an instance here.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/test_check.h"
#include "backends/ucx/ucx.h"
#include "backends/ucx/ucx_int.h"

typedef struct host {
    nixl_host_services_t hs;
    nixl_host_cuda_t cuda;
    char name[64];
    char sender[64];
    uint8_t msg[256];
    size_t msg_len;
    atomic_int notifs;
    /* The data a notification announces: want and watch_len are set
     * before watch is published (release), so that the progress thread's
     * check is ordered after the test's writes for the thread sanitizer. */
    _Atomic(const uint8_t *) watch;
    const uint8_t *want;
    size_t watch_len;
    int watch_bad;
    int fallbacks;
    char cause[128];
} host_t;

static unsigned errors_logged, warns_logged;
static char last_warn[512]; /* the text of the last WARN line */

static int host_log_enabled(nixl_log_level_t level)
{
    const char *e = getenv("UCX_TEST_LOG");
    return level <= NIXL_LOG_WARN || (e && (int)level <= atoi(e));
}

static void host_log(nixl_log_level_t level, const char *where, const char *fmt, ...)
{
    va_list ap;
    if (level == NIXL_LOG_ERROR)
        errors_logged++;
    if (level == NIXL_LOG_WARN)
        warns_logged++;
    if (level == NIXL_LOG_WARN) {
        va_start(ap, fmt);
        vsnprintf(last_warn, sizeof(last_warn), fmt, ap);
        va_end(ap);
    }
    va_start(ap, fmt);
    fprintf(stderr, "[%d %s] ", (int)level, where);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *host_config_get(const char *name)
{
    return getenv(name);
}

static void host_fallback(void *ctx, const char *path, const char *cause)
{
    host_t *h = ctx;
    h->fallbacks++;
    snprintf(h->cause, sizeof(h->cause), "%s: %s", path, cause);
}

static void host_notif_deliver(void *ctx, const char *sender, const void *msg, size_t len)
{
    host_t *h = ctx;
    snprintf(h->sender, sizeof(h->sender), "%s", sender);
    h->msg_len = len < sizeof(h->msg) ? len : sizeof(h->msg);
    memcpy(h->msg, msg, h->msg_len);
    const uint8_t *watch = atomic_load_explicit(&h->watch, memory_order_acquire);
    if (watch && memcmp(watch, h->want, h->watch_len) != 0)
        h->watch_bad = 1;
    atomic_fetch_add(&h->notifs, 1);
}

static void host_init(host_t *h, const char *name)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->hs.abi_version = NIXL_BACKEND_ABI_VERSION;
    h->hs.struct_size = sizeof(h->hs);
    h->hs.ctx = h;
    h->hs.log_enabled = host_log_enabled;
    h->hs.log = host_log;
    h->hs.config_get = host_config_get;
    h->hs.fallback = host_fallback;
    h->hs.notif_deliver = host_notif_deliver;
    h->hs.agent_name = h->name;
    h->hs.cuda = &h->cuda;
}

static const nixl_backend_ops_t *ops;

/* Creates an instance or exits 77 with the reason. */
static void *be_create(host_t *h, const char *name, const nixl_param_t *params, size_t n)
{
    host_init(h, name);
    void *be = NULL;
    nixl_status_t st = ops->create(&h->hs, params, n, &be);
    if (st == NIXL_ERR_NOT_SUPPORTED) {
        printf("SKIP: UCX cannot create an instance here (UCX_TLS=%s; the log line above says why)\n",
               getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
        exit(77);
    }
    CHECK_ST(st, NIXL_OK);
    if (!be)
        exit(1);
    return be;
}

static uint8_t *conn_of(void *be, size_t *len)
{
    *len = 0;
    CHECK_ST(ops->conn_pack(be, NULL, len), NIXL_OK);
    uint8_t *c = malloc(*len);
    CHECK(c != NULL);
    CHECK_ST(ops->conn_pack(be, c, len), NIXL_OK);
    return c;
}

static nixl_be_peer_t who(const char *name)
{
    nixl_be_peer_t p;
    memset(&p, 0, sizeof(p));
    p.name = name;
    p.generation = 1;
    p.same_process = p.same_host = p.same_pidns = p.same_netns = p.same_uid = 1;
    return p;
}

static void *peer_of(void *be, void *other, const char *other_name)
{
    size_t len;
    uint8_t *c = conn_of(other, &len);
    nixl_be_peer_t w = who(other_name);
    void *peer = NULL;
    CHECK_ST(ops->peer_open(be, &w, c, len, &peer), NIXL_OK);
    free(c);
    return peer;
}

static void expect_conn_refused(void *be, const uint8_t *c, size_t len, const char *what)
{
    nixl_be_peer_t w = who("b");
    void *peer = NULL;
    nixl_status_t st = ops->peer_open(be, &w, c, len, &peer);
    if (st != NIXL_ERR_BAD_METADATA) {
        fprintf(stderr, "conn info %s: peer_open returned %s, want NIXL_ERR_BAD_METADATA\n", what,
                nixl_status_name(st));
        failures++;
        if (st == NIXL_OK)
            ops->peer_unload(be, peer);
    }
}

static int case_conn_corrupt(void)
{
    host_t ha, hb;
    void *a = be_create(&ha, "a", NULL, 0), *b = be_create(&hb, "b", NULL, 0);
    size_t len;
    uint8_t *c = conn_of(b, &len);
    CHECK(len > UCX_CONN_HDR);
    for (size_t n = 0; n < len; n++)
        expect_conn_refused(a, c, n, "truncated");
    expect_conn_refused(a, NULL, 0, "absent");
    uint8_t *d = malloc(len + 1);
    CHECK(d != NULL);
    struct {
        size_t off;
        uint8_t xor;
        const char *what;
    } flips[] = {{0, 0x01, "magic"}, {3, 0x80, "magic"}, {4, 0x02, "version"}, {5, 0x01, "version"},
                 {6, 0x01, "reserved"}, {7, 0x10, "reserved"}, {8, 0x01, "address length"},
                 {9, 0x01, "address length"}, {11, 0x80, "address length"}};
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        memcpy(d, c, len);
        d[flips[i].off] ^= flips[i].xor;
        expect_conn_refused(a, d, len, flips[i].what);
    }
    memcpy(d, c, len);
    nixl_put_u32(d + 8, 0);
    expect_conn_refused(a, d, len, "address length 0");
    nixl_put_u32(d + 8, UINT32_MAX);
    expect_conn_refused(a, d, len, "address length 2^32-1");
    memcpy(d, c, len);
    d[len] = 0;
    expect_conn_refused(a, d, len + 1, "with a byte appended");
    /* The parser on its own names the field. */
    const uint8_t *addr;
    size_t alen;
    const char *why = "";
    memcpy(d, c, len);
    d[4] ^= 1;
    CHECK_ST(ucx_conn_parse(d, len, &addr, &alen, &why), NIXL_ERR_BAD_METADATA);
    CHECK(strstr(why, "version") != NULL);
    CHECK_ST(ucx_conn_parse(c, len, &addr, &alen, &why), NIXL_OK);
    CHECK(addr == c + UCX_CONN_HDR && alen == len - UCX_CONN_HDR);
    /* The good one loads. */
    void *peer = peer_of(a, b, "b");
    if (peer)
        ops->peer_unload(a, peer);
    free(d);
    free(c);
    ops->destroy(a);
    ops->destroy(b);
    return failures;
}

static void *key_of(void *be, void *md, size_t *len)
{
    *len = 0;
    CHECK_ST(ops->rkey_pack(be, md, NULL, len), NIXL_OK);
    uint8_t *k = malloc(*len);
    CHECK(k != NULL);
    CHECK_ST(ops->rkey_pack(be, md, k, len), NIXL_OK);
    return k;
}

static void expect_key_refused(void *be, void *peer, const nixl_be_region_t *r, const uint8_t *k, size_t len,
                               const char *what)
{
    void *rmd = NULL;
    nixl_status_t st = ops->rkey_load(be, peer, r, k, len, &rmd);
    if (st != NIXL_ERR_BAD_METADATA) {
        fprintf(stderr, "key %s: rkey_load returned %s, want NIXL_ERR_BAD_METADATA\n", what, nixl_status_name(st));
        failures++;
        if (st == NIXL_OK)
            ops->rkey_unload(be, rmd);
    }
}

static int case_rkey_corrupt(void)
{
    host_t ha, hb;
    void *a = be_create(&ha, "a", NULL, 0), *b = be_create(&hb, "b", NULL, 0);
    static uint8_t buf[65536];
    nixl_be_region_t r = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)buf, .len = sizeof(buf)};
    void *md = NULL;
    CHECK_ST(ops->reg(b, &r, &md), NIXL_OK);
    void *peer = peer_of(a, b, "b");
    size_t len;
    uint8_t *k = key_of(b, md, &len);
    CHECK(len > UCX_RKEY_HDR);
    for (size_t n = 0; n < len; n++)
        expect_key_refused(a, peer, &r, k, n, "truncated");
    uint8_t *d = malloc(len + 1);
    CHECK(d != NULL);
    struct {
        size_t off;
        uint8_t xor;
        const char *what;
    } flips[] = {{0, 0x01, "magic"}, {2, 0x40, "magic"}, {4, 0x01, "version"}, {6, 0x01, "no-key flag on DRAM"},
                 {6, 0x02, "VRAM flag on DRAM"}, {6, 0x04, "unknown flag"}, {7, 0x80, "unknown flag"}, {8, 0x01, "address"}, {15, 0x01, "address"},
                 {16, 0x01, "length"}, {23, 0x80, "length"}, {24, 0x01, "key length"}, {27, 0x01, "key length"}};
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        memcpy(d, k, len);
        d[flips[i].off] ^= flips[i].xor;
        expect_key_refused(a, peer, &r, d, len, flips[i].what);
    }
    memcpy(d, k, len);
    d[len] = 0;
    expect_key_refused(a, peer, &r, d, len + 1, "with a byte appended");
    /* The right blob for another region, or another memory type. */
    nixl_be_region_t other = r;
    other.addr += 4096;
    other.len -= 4096;
    expect_key_refused(a, peer, &other, k, len, "of another region");
    other = r;
    other.mem_type = NIXL_MEM_VRAM;
    expect_key_refused(a, peer, &other, k, len, "for VRAM");
    /* A DRAM blob claiming to be a VRAM key without bytes. */
    memcpy(d, k, UCX_RKEY_HDR);
    nixl_put_u16(d + 6, UCX_RKEY_F_NOCUDA | UCX_RKEY_F_VRAM);
    nixl_put_u32(d + 24, 0);
    expect_key_refused(a, peer, &r, d, UCX_RKEY_HDR, "VRAM flags on a DRAM region");
    /* VRAM blobs: the no-key flag without bytes, else bytes. */
    nixl_be_region_t vr = r;
    vr.mem_type = NIXL_MEM_VRAM;
    nixl_put_u16(d + 6, UCX_RKEY_F_NOCUDA);
    expect_key_refused(a, peer, &vr, d, UCX_RKEY_HDR, "no-key flag without the VRAM flag");
    nixl_put_u16(d + 6, UCX_RKEY_F_VRAM);
    expect_key_refused(a, peer, &vr, d, UCX_RKEY_HDR, "VRAM key without bytes");
    memcpy(d, k, len);
    nixl_put_u16(d + 6, UCX_RKEY_F_NOCUDA | UCX_RKEY_F_VRAM);
    expect_key_refused(a, peer, &vr, d, len, "no-key VRAM blob with bytes");
    /* The version before VRAM keys. */
    memcpy(d, k, len);
    nixl_put_u16(d + 4, 1);
    expect_key_refused(a, peer, &r, d, len, "version 1");
    void *rmd = NULL;
    CHECK_ST(ops->rkey_load(a, peer, &r, k, len, &rmd), NIXL_OK);
    if (rmd)
        ops->rkey_unload(a, rmd);
    free(d);
    free(k);
    ops->peer_unload(a, peer);
    ops->dereg(b, md);
    ops->destroy(a);
    ops->destroy(b);
    return failures;
}

static nixl_status_t wait_req(void *be, nixl_be_req_t *req, nixl_status_t st)
{
    uint64_t t0 = test_now_ms();
    while (st == NIXL_IN_PROG && test_now_ms() - t0 < 10000)
        st = ops->xfer_status(be, req);
    return st;
}

static int case_xfer(void)
{
    /* The buffers are filled before the instances' threads start: UCX
     * lands a peer's put with its own memcpy on b's thread, ordered after
     * these writes only through UCX, which the thread sanitizer cannot see
     * (it then reported, and suppressed, every word of the 1 MiB check in
     * the notification, for seconds past the test's wait). */
    enum { N = 1 << 20 };
    uint8_t *la = malloc(N), *rb = malloc(N), *want = malloc(N);
    CHECK(la && rb && want);
    for (size_t i = 0; i < N; i++) {
        la[i] = (uint8_t)(i * 7 + 1);
        rb[i] = want[i] = (uint8_t)(i * 13 + 5);
    }
    host_t ha, hb;
    void *a = be_create(&ha, "a", NULL, 0), *b = be_create(&hb, "b", NULL, 0);
    nixl_be_region_t lr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)la, .len = N};
    nixl_be_region_t rr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)rb, .len = N};
    void *lmd = NULL, *rmd_b = NULL, *rmd = NULL;
    CHECK_ST(ops->reg(a, &lr, &lmd), NIXL_OK);
    CHECK_ST(ops->reg(b, &rr, &rmd_b), NIXL_OK);
    void *peer = peer_of(a, b, "b");
    size_t klen;
    uint8_t *k = key_of(b, rmd_b, &klen);
    CHECK_ST(ops->rkey_load(a, peer, &rr, k, klen, &rmd), NIXL_OK);
    free(k);
    if (!peer || !rmd)
        return ++failures;
    CHECK_ST(ops->peer_connect(a, peer), NIXL_OK); /* wired up before the first request */

    /* WRITE three pieces; the untouched bytes stay. */
    nixl_be_iov_t iov[3] = {
        {lr.addr, rr.addr + 100, 1000, lmd, rmd},
        {lr.addr + 4096, rr.addr + 8192, 300000, lmd, rmd},
        {lr.addr + N - 7, rr.addr + N - 7, 7, lmd, rmd},
    };
    for (int i = 0; i < 3; i++)
        memcpy(want + (iov[i].raddr - rr.addr), la + (iov[i].laddr - lr.addr), iov[i].len);
    hb.want = want;
    hb.watch_len = N;
    atomic_store_explicit(&hb.watch, rb, memory_order_release);
    nixl_be_xfer_t x = {NIXL_OP_WRITE, peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, iov, 3, 301007};
    nixl_be_req_t *req = NULL;
    CHECK_ST(ops->xfer_prepare(a, &x, &req), NIXL_OK);
    if (!req)
        return ++failures;
    CHECK(req->path && strncmp(req->path, "ucx.", 4) == 0 && strcmp(req->path, "ucx.unknown") != 0);
    printf("path %s\n", req->path);
    CHECK_ST(wait_req(a, req, ops->xfer_post(a, req, "done", 4)), NIXL_OK);
    uint64_t t0 = test_now_ms();
    while (atomic_load(&hb.notifs) == 0 && test_now_ms() - t0 < 5000)
        ops->progress(b);
    CHECK(atomic_load(&hb.notifs) == 1);
    CHECK(hb.watch_bad == 0);
    CHECK(strcmp(hb.sender, "a") == 0);
    CHECK(hb.msg_len == 4 && memcmp(hb.msg, "done", 4) == 0);
    CHECK(memcmp(rb, want, N) == 0);
    atomic_store_explicit(&hb.watch, NULL, memory_order_release);
    ops->xfer_release(a, req);

    /* READ it back into other places of ours. */
    memset(la, 0xee, N);
    nixl_be_iov_t back[2] = {{lr.addr + 10, rr.addr + 100, 1000, lmd, rmd},
                             {lr.addr + 500000, rr.addr + 8192, 300000, lmd, rmd}};
    nixl_be_xfer_t y = {NIXL_OP_READ, peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, back, 2, 301000};
    CHECK_ST(ops->xfer_prepare(a, &y, &req), NIXL_OK);
    CHECK_ST(wait_req(a, req, ops->xfer_post(a, req, NULL, 0)), NIXL_OK);
    CHECK(memcmp(la + 10, want + 100, 1000) == 0);
    CHECK(memcmp(la + 500000, want + 8192, 300000) == 0);
    CHECK(la[9] == 0xee && la[1010] == 0xee && la[499999] == 0xee && la[800000] == 0xee);
    ops->xfer_release(a, req);

    /* A standalone notification, the other way round. */
    void *peer_a = peer_of(b, a, "a");
    CHECK_ST(ops->notif_send(b, peer_a, "hi", 2), NIXL_OK);
    t0 = test_now_ms();
    while (atomic_load(&ha.notifs) == 0 && test_now_ms() - t0 < 5000) {
        ops->progress(a);
        ops->progress(b);
    }
    CHECK(atomic_load(&ha.notifs) == 1 && strcmp(ha.sender, "b") == 0 && ha.msg_len == 2);
    ops->peer_unload(b, peer_a);

    ops->rkey_unload(a, rmd);
    ops->peer_unload(a, peer);
    ops->dereg(a, lmd);
    ops->dereg(b, rmd_b);
    ops->destroy(a);
    ops->destroy(b);
    free(la);
    free(rb);
    free(want);
    return failures;
}

static int case_ep_info(void)
{
    /* v2: UCX's newer protocols (1.16's default).  The printouts are what
     * 1.13.1 (CI box) and 1.16.0 (the GPU machine) print. */
    static const struct {
        const char *text;
        int v2;
        const char *want;     /* host memory's transport */
        const char *want_gpu; /* GPU memory's; NULL: the same */
    } cases[] = {
        {"#\n# UCP endpoint \n#\n#               peer: <no debug data>\n"
         "#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive "
         "wireup\n#\n#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)\n#\n"
         "#                  rma_bw: mds rndv_rkey_size 9\n",
         0, "tcp", NULL},
        /* sysv and posix register no application memory: their put lanes
         * never carry a piece; RMA goes over the AM lane (sysv) */
        {"#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] am am_bw#0\n"
         "#                 lane[1]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255]\n"
         "#                 lane[2]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] rma_bw#0\n"
         "#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)\n"
         "#                  put[1]: 0..<short>..4294967296..<bcopy>..(inf)\n",
         0, "sysv", NULL},
        /* the same lanes under 1.16's protocols: cma's zero-copy takes the pieces */
        {"#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] seg 4294967295 am "
         "am_bw#0\n"
         "#                 lane[1]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255] seg 4294967295\n"
         "#                 lane[2]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] seg 4294967295 "
         "rma_bw#0\n",
         1, "cma", NULL},
        /* peer failure handling (1.16): no bulk-RMA lane, sysv's AM */
        {"#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] seg 4294967295 am "
         "am_bw#0 keepalive\n"
         "#                 lane[1]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255] seg 4294967295\n",
         1, "sysv", NULL},
        {"#                 lane[0]:  1:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] seg 4294967295 "
         "rma_bw#0 am am_bw#0\n"
         "#                 lane[1]:  0:tcp/eth0.0 md[0]              -> md[0]/tcp/sysdev[255] seg 4294967295 "
         "rma_bw#1 wireup\n",
         1, "tcp", NULL},
        {"#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 wireup\n"
         "#                 lane[1]:  2:cma/memory.0 md[1]            -> md[1]/cma/sysdev[255] rma_bw#0\n",
         0, "tcp", NULL},
        {"#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 wireup\n"
         "#                 lane[1]:  2:cma/memory.0 md[1]            -> md[1]/cma/sysdev[255] rma_bw#0\n",
         1, "cma", NULL},
        {"#                 lane[0]:  1:rc_mlx5/mlx5_0:1 md[1] -> md[1]/ib/sysdev[255] rma#0 amo am am_bw#0\n"
         "#                 lane[1]:  4:ud_verbs/mlx5_0:1 md[1] -> md[1]/ib/sysdev[255] wireup\n",
         0, "rc_mlx5", NULL},
        {"# no lanes at all\n", 0, NULL, NULL},
        {"#  lane[0]:  0:this_name_is_far_too_long_for_a_transport/x md[0] -> am\n", 0, NULL, NULL},
        /* a put line for a lane never described */
        {"#                  put[3]: 0..<short>..(inf)\n", 0, NULL, NULL},
        /* a UCX with CUDA inside a node: cuda_ipc's bulk lane carries GPU
         * memory, never host memory */
        {"#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] seg 4294967295 am "
         "am_bw#0 keepalive\n"
         "#                 lane[1]:  3:cuda_ipc/cuda md[3]           -> md[3]/cuda_ipc/sysdev[255] seg 4294967295 "
         "rma_bw#0\n"
         "#                 lane[2]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] seg 4294967295 "
         "rma_bw#1\n",
         1, "cma", "cuda_ipc"},
        /* only a GPU transport has RMA: host memory goes over sysv's AM */
        {"#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] am am_bw#0\n"
         "#                 lane[1]:  3:cuda_ipc/cuda md[3]           -> md[3]/cuda_ipc/sysdev[255] rma_bw#0\n"
         "#                  put[1]: 0..<zcopy>..(inf)\n",
         0, "sysv", "cuda_ipc"},
        /* between hosts: no GPU lane, GPU memory goes where host memory does */
        {"#                 lane[0]:  1:rc_mlx5/mlx5_0:1 md[1] -> md[1]/ib/sysdev[255] rma_bw#0 am am_bw#0\n", 1,
         "rc_mlx5", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int gpu = 0; gpu < 2; gpu++) {
            const char *want = gpu && cases[i].want_gpu ? cases[i].want_gpu : cases[i].want;
            char tl[UCX_TL_NAME_MAX + 1] = "";
            int rc = ucx_ep_info_transport(cases[i].text, cases[i].v2, gpu, tl, sizeof(tl));
            if (want ? rc != 0 || strcmp(tl, want) != 0 : rc == 0) {
                fprintf(stderr, "ep_info %zu (%s memory): rc %d tl '%s', want %s\n", i, gpu ? "GPU" : "host", rc, tl,
                        want ? want : "none");
                failures++;
            }
        }
    }
    /* The lanes' transports, each once. */
    char lanes[96];
    ucx_ep_info_lanes("#                 lane[0]:  3:sysv/memory.0 md[2]  -> md[2]/sysv/sysdev[255] am keepalive\n"
                      "#                 lane[1]:  4:posix/memory.0 md[3] -> md[3]/posix/sysdev[255]\n"
                      "#                 lane[2]:  6:cuda_ipc/cuda.0 md[5] -> md[5]/cuda_ipc/sysdev[255] rma_bw#0\n"
                      "#                 lane[3]:  3:sysv/memory.0 md[2]  -> md[2]/sysv/sysdev[255] am\n",
                      lanes, sizeof(lanes));
    CHECK(strcmp(lanes, " sysv posix cuda_ipc ") == 0);
    ucx_ep_info_lanes("no lanes\n", lanes, sizeof(lanes));
    CHECK(strcmp(lanes, " ") == 0);

    /* UCX's protocol tables: ucp_worker_print_info of 1.13.1 (CI box,
     * UCX_PROTO_ENABLE=y, tcp) and UCX_PROTO_INFO's lines of 1.20.0 with
     * CUDA (the GPU machine, one H100, no NVLink), whose READ between GPU
     * buffers and WRITE from host memory are emulated over sysv; the last
     * table is another endpoint configuration's (tcp: not this peer's). */
    static const char pt113[] =
        "# | 0x55f3a953ce30 ep_cfg[0] | rendezvous data send() from host memory to host                      |\n"
        "# +--------------------------+----------------------------------+-----------------------------------+\n"
        "# |                  0..2827 | fragmented copy-in copy-out      | tcp/lo                            |\n"
        "# |                2828..inf | zero-copy fenced write to remote | 52% on tcp/lo and 48% on tcp/eth0 |\n"
        "# | 0x55f3a953ce30 ep_cfg[0] | remote memory write by ucp_put*() from host memory to host    |\n"
        "# +--------------------------+------------------------------------------------------+--------+\n"
        "# |                   0..inf | software emulation                                   | tcp/lo |\n"
        "# | 0x55f3a953ce30 ep_cfg[0] | remote memory read by ucp_get*(fast-completion) into host memory from host |\n"
        "# |                   0..inf | zero-copy                                            | cma/memory |\n"
        "# | 0x55f3a953ce30 ep_cfg[0] | remote memory read by ucp_get*() into host memory from host    |\n"
        "# |                        0 | no data fetch                                         |        |\n"
        "# |                   1..8K  | copy-out                                              | tcp/eth0 |\n"
        "# |                 8193..inf | zero-copy                                            | 52% on tcp/lo and 48% on tcp/eth0 |\n";
    static const char pt120[] =
        "[1796686347.5] [vm:1720 :0]   | ucp_context_0 intra-node cfg#1 | remote memory read by ucp_get* into "
        "cuda/GPU0 from cuda/dev[0]    |\n"
        "[1796686347.5] [vm:1720 :0]   +--------------------------------+---------------------------+-------------+\n"
        "[1796686347.5] [vm:1720 :0]   |                         0..inf | software emulation        | sysv/memory |\n"
        "[1796686347.5] [vm:1720 :0]   | ucp_context_0 intra-node cfg#1 | remote memory write by ucp_put* from "
        "host memory to cuda/dev[0]    |\n"
        "[1796686347.5] [vm:1720 :0]   |                         0..inf | software emulation        | sysv/memory |\n"
        "[1796686347.5] [vm:1720 :0]   | ucp_context_0 intra-node cfg#1 | remote memory write by ucp_put* from "
        "cuda/GPU0 to cuda/dev[0]    |\n"
        "[1796686347.5] [vm:1720 :0]   |                         0..inf | zero-copy                 | cuda_ipc/cuda |\n"
        "[1796686347.5] [vm:1720 :0]   | ucp_context_0 inter-node cfg#2 | remote memory write by ucp_put* from "
        "cuda/GPU0 to cuda    |\n"
        "[1796686347.5] [vm:1720 :0]   |                         0..inf | software emulation        | tcp/eth0 |\n";
    static const struct {
        const char *text, *lanes;
        int get, lcuda, rcuda;
        uint64_t size;
        const char *tl, *desc; /* NULL: no table says */
    } pt[] = {
        {pt113, " tcp ", 0, 0, 0, 1 << 20, "tcp", "software emulation"},
        {pt113, " tcp ", 1, 0, 0, 0, NULL, NULL}, /* nothing moves: no transport */
        {pt113, " tcp ", 1, 0, 0, 4096, "tcp", "copy-out"},
        {pt113, " tcp ", 1, 0, 0, 8192, "tcp", "copy-out"},
        {pt113, " tcp ", 1, 0, 0, 8193, "tcp", "zero-copy"},
        {pt113, " tcp ", 0, 1, 0, 4096, NULL, NULL}, /* no table for GPU memory */
        {pt120, " sysv posix cuda_ipc ", 1, 1, 1, 64 << 20, "sysv", "software emulation"},
        {pt120, " sysv posix cuda_ipc ", 0, 0, 1, 64 << 20, "sysv", "software emulation"},
        {pt120, " sysv posix cuda_ipc ", 0, 1, 1, 256 << 20, "cuda_ipc", "zero-copy"},
        {pt120, " tcp ", 0, 1, 1, 1 << 20, "tcp", "software emulation"}, /* the other endpoint's */
        {pt120, NULL, 0, 1, 1, 1 << 20, "cuda_ipc", "zero-copy"},          /* any lanes: the first */
        {pt120, " sysv posix cuda_ipc ", 1, 1, 0, 1 << 20, NULL, NULL},
        {"| a | b |\n| 0..x | y | z/w |\n| 1..99999999999999999999 | d | t/u |\n", NULL, 0, 0, 0, 5, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(pt) / sizeof(pt[0]); i++) {
        char tl[UCX_TL_NAME_MAX + 1] = "", desc[64] = "";
        int rc = ucx_proto_info_transport(pt[i].text, pt[i].lanes, pt[i].get, pt[i].lcuda, pt[i].rcuda, pt[i].size, tl,
                                          sizeof(tl), desc, sizeof(desc));
        if (pt[i].tl ? rc != 0 || strcmp(tl, pt[i].tl) != 0 || strcmp(desc, pt[i].desc) != 0 : rc == 0) {
            fprintf(stderr, "proto table %zu: rc %d tl '%s' desc '%s', want %s\n", i, rc, tl, desc,
                    pt[i].tl ? pt[i].tl : "none");
            failures++;
        }
    }

    /* ucp_context_print_info's resource lines (UCX 1.13.1 on the CI box). */
    static const char ctx_info[] = "#\n# UCP context\n#\n#     component 0  :  self\n"
                                   "#            md 1  :  component 1  tcp \n"
                                   "#      resource 0  :  md 0  dev 0  flags -- self/memory0\n"
                                   "#      resource 1  :  md 1  dev 1  flags -- tcp/lo\n"
                                   "#      resource 5  :  md 4  dev 3  flags -- cma/memory\n#\n";
    char res[64];
    CHECK(ucx_ctx_info_resources(ctx_info, res, sizeof(res)) == 3);
    CHECK(strcmp(res, "self/memory0 tcp/lo cma/memory") == 0);
    /* What does not fit is left out whole; no resource lines, none. */
    CHECK(ucx_ctx_info_resources(ctx_info, res, 20) == 2 && strcmp(res, "self/memory0 tcp/lo") == 0);
    CHECK(ucx_ctx_info_resources("# resource 0 : flags --\n# md 0\n", res, sizeof(res)) == 0 && res[0] == 0);
    CHECK(ucx_ctx_info_resources("# resource 0 : flags -- tcp/lo", res, sizeof(res)) == 1 && !strcmp(res, "tcp/lo"));

    /* devices against a resource list: a name without a port takes every
     * port, one with a port that port; shared memory's and self's devices
     * are not network devices; each name found once; the rest missing. */
    static const char rl[] = "self/memory0 tcp/lo tcp/eth0 rc_mlx5/mlx5_0:1 dc_mlx5/mlx5_0:1 rc_mlx5/mlx5_1:1 "
                             "rc_mlx5/mlx5_1:2 sysv/memory cma/memory cuda_copy/cuda";
    static const struct {
        const char *want, *found, *missing;
    } dm[] = {
        {"lo", "lo", ""},
        {"mlx5_0", "mlx5_0:1", ""},
        {"mlx5_1", "mlx5_1:1,mlx5_1:2", ""},
        {"mlx5_1:2,eth0", "mlx5_1:2,eth0", ""},
        {"mlx5_0:2", "", "mlx5_0:2"},
        {"mlx5_9,lo,memory,cuda", "lo", "mlx5_9,memory,cuda"},
        {"mlx5_0:1,mlx5_0", "mlx5_0:1", ""},
        {"eth", "", "eth"},
    };
    for (size_t i = 0; i < sizeof(dm) / sizeof(dm[0]); i++) {
        char found[64], missing[64];
        ucx_devices_match(dm[i].want, rl, found, sizeof(found), missing, sizeof(missing));
        if (strcmp(found, dm[i].found) || strcmp(missing, dm[i].missing)) {
            fprintf(stderr, "devices '%s': found '%s' missing '%s', want '%s' '%s'\n", dm[i].want, found, missing,
                    dm[i].found, dm[i].missing);
            failures++;
        }
    }
    return failures;
}

/* Without CUDA in UCX (Debian's, Ubuntu's): GPU regions register with no
 * UCX handle, their keys say so, and a request with VRAM on either side
 * is NO_PATH with one ERROR line.  (With CUDA in UCX the GPU machine runs
 * the real thing: conformance --mem vram, tests/gpu/run.sh.) */
static int case_vram(void)
{
    host_t ha, hb;
    void *a = be_create(&ha, "a", NULL, 0), *b = be_create(&hb, "b", NULL, 0);
    char text[2048];
    size_t tlen = sizeof(text);
    CHECK_ST(ops->describe(a, text, &tlen), NIXL_OK);
    if (strstr(text, "CUDA memory: yes")) {
        printf("SKIP: vram: this UCX has CUDA support (its fake GPU memory would be mapped as CUDA memory)\n");
        ops->destroy(a);
        ops->destroy(b);
        return 77;
    }
    static uint8_t fake_gpu[4096], host_mem[4096];
    nixl_be_region_t vr = {.mem_type = NIXL_MEM_VRAM, .addr = (uint64_t)(uintptr_t)fake_gpu, .len = sizeof(fake_gpu)};
    nixl_be_region_t dr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)host_mem, .len = sizeof(host_mem)};
    void *vmd = NULL, *dmd = NULL, *vrmd = NULL;
    CHECK_ST(ops->reg(b, &vr, &vmd), NIXL_OK);
    CHECK_ST(ops->reg(a, &dr, &dmd), NIXL_OK);
    size_t klen;
    uint8_t *k = key_of(b, vmd, &klen);
    CHECK(klen == UCX_RKEY_HDR && nixl_get_u16(k + 6) == (UCX_RKEY_F_NOCUDA | UCX_RKEY_F_VRAM));
    void *peer = peer_of(a, b, "b");
    CHECK_ST(ops->rkey_load(a, peer, &vr, k, klen, &vrmd), NIXL_OK);
    free(k);
    nixl_be_iov_t iov = {dr.addr, vr.addr, 64, dmd, vrmd};
    nixl_be_xfer_t x = {NIXL_OP_WRITE, peer, NIXL_MEM_DRAM, NIXL_MEM_VRAM, &iov, 1, 64};
    nixl_be_req_t *req = NULL;
    unsigned e0 = errors_logged;
    CHECK_ST(ops->xfer_prepare(a, &x, &req), NIXL_ERR_NO_PATH);
    x.op = NIXL_OP_READ;
    CHECK_ST(ops->xfer_prepare(a, &x, &req), NIXL_ERR_NO_PATH);
    CHECK(errors_logged - e0 == 1);
    CHECK(req == NULL);
    /* Local VRAM to the peer's DRAM: NO_PATH too, no new ERROR line. */
    void *avmd = NULL, *bdmd = NULL, *drmd = NULL;
    CHECK_ST(ops->reg(a, &vr, &avmd), NIXL_OK);
    CHECK_ST(ops->reg(b, &dr, &bdmd), NIXL_OK);
    k = key_of(b, bdmd, &klen);
    CHECK_ST(ops->rkey_load(a, peer, &dr, k, klen, &drmd), NIXL_OK);
    free(k);
    nixl_be_iov_t iov2 = {vr.addr, dr.addr, 64, avmd, drmd};
    nixl_be_xfer_t x2 = {NIXL_OP_WRITE, peer, NIXL_MEM_VRAM, NIXL_MEM_DRAM, &iov2, 1, 64};
    CHECK_ST(ops->xfer_prepare(a, &x2, &req), NIXL_ERR_NO_PATH);
    CHECK(errors_logged - e0 == 1);
    CHECK(req == NULL);
    ops->rkey_unload(a, drmd);
    ops->dereg(a, avmd);
    ops->dereg(b, bdmd);
    ops->rkey_unload(a, vrmd);
    ops->peer_unload(a, peer);
    ops->dereg(a, dmd);
    ops->dereg(b, vmd);
    ops->destroy(a);
    ops->destroy(b);
    return failures;
}

static int fallback_run(const char *transports, int want_fallback)
{
    host_t ha, hb;
    nixl_param_t p = {"transports", transports};
    void *a = be_create(&ha, "a", &p, 1), *b = be_create(&hb, "b", NULL, 0);
    static uint8_t src[4096], dst[4096];
    nixl_be_region_t lr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)src, .len = sizeof(src)};
    nixl_be_region_t rr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)dst, .len = sizeof(dst)};
    void *lmd = NULL, *bmd = NULL, *rmd = NULL;
    CHECK_ST(ops->reg(a, &lr, &lmd), NIXL_OK);
    CHECK_ST(ops->reg(b, &rr, &bmd), NIXL_OK);
    void *peer = peer_of(a, b, "b");
    size_t klen;
    uint8_t *k = key_of(b, bmd, &klen);
    CHECK_ST(ops->rkey_load(a, peer, &rr, k, klen, &rmd), NIXL_OK);
    free(k);
    memset(src, 0x5a, sizeof(src));
    nixl_be_iov_t iov = {lr.addr, rr.addr, sizeof(src), lmd, rmd};
    nixl_be_xfer_t x = {NIXL_OP_WRITE, peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &iov, 1, sizeof(src)};
    nixl_be_req_t *req = NULL;
    CHECK_ST(ops->xfer_prepare(a, &x, &req), NIXL_OK);
    if (!req)
        return ++failures;
    CHECK(strcmp(req->path, "ucx.tcp") == 0);
    CHECK((int)req->fallback == want_fallback);
    CHECK_ST(wait_req(a, req, ops->xfer_post(a, req, NULL, 0)), NIXL_OK);
    CHECK(memcmp(src, dst, sizeof(src)) == 0);
    CHECK(ha.fallbacks == want_fallback);
    if (want_fallback) {
        printf("fallback counted: %s\n", ha.cause);
        CHECK(strstr(ha.cause, "ucx.tcp") && strstr(ha.cause, "transports=rc_mlx5,dc_mlx5"));
    }
    ops->xfer_release(a, req);
    ops->rkey_unload(a, rmd);
    ops->peer_unload(a, peer);
    ops->dereg(a, lmd);
    ops->dereg(b, bmd);
    ops->destroy(a);
    ops->destroy(b);
    return failures;
}

/* Every value of key, alone, makes create NIXL_ERR_INVALID_PARAM. */
static void expect_create_refused(host_t *h, const char *key, const char *const *values, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        nixl_param_t p = {key, values[i]};
        void *be = NULL;
        CHECK_ST(ops->create(&h->hs, &p, 1, &be), NIXL_ERR_INVALID_PARAM);
    }
}

/* key=value alone makes create NIXL_OK; the instance is destroyed. */
static void expect_create_ok(host_t *h, const char *key, const char *value)
{
    nixl_param_t p = {key, value};
    void *be = NULL;
    CHECK_ST(ops->create(&h->hs, &p, 1, &be), NIXL_OK);
    if (be)
        ops->destroy(be);
}

static int case_fallback(void)
{
    const char *tls = getenv("UCX_TLS");
    if (!tls || strcmp(tls, "tcp") != 0) {
        printf("SKIP: fallback needs UCX_TLS=tcp (a known transport to be refused)\n");
        return 77;
    }
    fallback_run("rc_mlx5,dc_mlx5", 1);
    fallback_run("tcp", 0);
    host_t h;
    host_init(&h, "c");
    static const char *const bad_tls[] = {"tcp,,sm", "TCP"};
    expect_create_refused(&h, "transports", bad_tls, sizeof(bad_tls) / sizeof(bad_tls[0]));
    /* spin_us: 0 to 100000 microseconds; 0 (nap at once) is valid. */
    static const char *const bad_spin[] = {"100001", "-1", "x", ""};
    expect_create_refused(&h, "spin_us", bad_spin, sizeof(bad_spin) / sizeof(bad_spin[0]));
    expect_create_ok(&h, "spin_us", "0");
    /* error_handling (NIXL's ucx_error_handling_mode): peer runs; none is
     * taken as peer with one WARN line saying so, not ignored (README: UCX
     * does not end a dead peer's operations without it), other values are
     * refused.  devices: UCX device names only. */
    static const char *const bad_mode[] = {"PEER", "", "peer ", "None"};
    expect_create_refused(&h, "error_handling", bad_mode, sizeof(bad_mode) / sizeof(bad_mode[0]));
    unsigned w0 = warns_logged, e0 = errors_logged;
    expect_create_ok(&h, "error_handling", "none");
    CHECK(warns_logged - w0 == 1 && errors_logged == e0);
    static const char *const bad_dev[] = {"eth0;rm", "mlx5_0:1 eth0", "a/b", ",", "lo,,eth0"};
    expect_create_refused(&h, "devices", bad_dev, sizeof(bad_dev) / sizeof(bad_dev[0]));
    /* devices=lo leaves tcp/lo the only tcp resource; a device this UCX
     * lacks (LMCache passes mlx5_0:1 everywhere) is said on our log and
     * leaves UCX's choice; NIXL's "a, b" form is taken. */
    static const struct {
        const char *devices;
        int lo_only;
    } dv[] = {{"lo", 1}, {"mlx5_0:1", 0}, {"mlx5_0, lo", 1}};
    for (size_t i = 0; i < sizeof(dv) / sizeof(dv[0]); i++) {
        void *be = NULL;
        nixl_param_t dp[2] = {{"error_handling", "peer"}, {"devices", dv[i].devices}};
        CHECK_ST(ops->create(&h.hs, dp, 2, &be), NIXL_OK);
        if (!be)
            continue;
        char text[2048];
        size_t len = sizeof(text);
        CHECK_ST(ops->describe(be, text, &len), NIXL_OK);
        CHECK(strstr(text, "tcp/lo") != NULL);
        if (dv[i].lo_only)
            CHECK(strstr(text, "tcp/eth") == NULL);
        ops->destroy(be);
    }
    return failures;
}

/* A peer process that dies, seen through UCX alone: the peer is loaded
 * as if on another host (no pid namespace in common, so no pidfd), its
 * process SIGKILLed, and a request to it must end NIXL_ERR_PEER_GONE
 * through the endpoint's error callback (the kernel's reset for tcp,
 * UCX's keepalive for sm), in bounded time. */
static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static int case_peer_lost(void)
{
    enum { N = 1 << 20 };
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        host_t hb;
        void *b = be_create(&hb, "victim", NULL, 0);
        uint8_t *buf = malloc(N);
        memset(buf, 0x11, N);
        nixl_be_region_t r = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)buf, .len = N};
        void *md = NULL;
        if (ops->reg(b, &r, &md) != NIXL_OK)
            _exit(1);
        size_t clen, klen;
        uint8_t *c = conn_of(b, &clen), *k = key_of(b, md, &klen);
        uint64_t hdr[3] = {r.addr, clen, klen};
        if (write_all(fds[1], hdr, sizeof(hdr)) || write_all(fds[1], c, clen) || write_all(fds[1], k, klen))
            _exit(1);
        for (;;)
            pause(); /* the progress thread serves the peer */
    }
    close(fds[1]);
    uint64_t hdr[3];
    CHECK(read_all(fds[0], hdr, sizeof(hdr)) == 0);
    uint8_t *c = malloc(hdr[1]), *k = malloc(hdr[2]);
    CHECK(c && k && read_all(fds[0], c, hdr[1]) == 0 && read_all(fds[0], k, hdr[2]) == 0);
    close(fds[0]);
    host_t ha;
    void *a = be_create(&ha, "survivor", NULL, 0);
    uint8_t *lb = malloc(N);
    memset(lb, 0x22, N);
    nixl_be_region_t lr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)lb, .len = N};
    nixl_be_region_t rr = {.mem_type = NIXL_MEM_DRAM, .addr = hdr[0], .len = N};
    void *lmd = NULL, *peer = NULL, *rmd = NULL;
    CHECK_ST(ops->reg(a, &lr, &lmd), NIXL_OK);
    nixl_be_peer_t w = who("victim");
    w.same_process = w.same_host = w.same_pidns = w.same_netns = 0; /* as another host */
    CHECK_ST(ops->peer_open(a, &w, c, hdr[1], &peer), NIXL_OK);
    CHECK_ST(ops->rkey_load(a, peer, &rr, k, hdr[2], &rmd), NIXL_OK);
    free(c);
    free(k);
    if (!peer || !rmd) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return ++failures;
    }
    nixl_be_iov_t iov = {lr.addr, rr.addr, N, lmd, rmd};
    nixl_be_xfer_t x = {NIXL_OP_READ, peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &iov, 1, N};
    nixl_be_req_t *req = NULL;
    CHECK_ST(ops->xfer_prepare(a, &x, &req), NIXL_OK);
    CHECK_ST(wait_req(a, req, ops->xfer_post(a, req, NULL, 0)), NIXL_OK);
    CHECK(lb[0] == 0x11 && lb[N - 1] == 0x11); /* the peer's bytes: it is alive */
    CHECK(ops->peer_alive(a, peer) == -1); /* no pidfd: nothing to judge by */

    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    uint64_t t0 = test_now_ms();
    nixl_status_t st = NIXL_IN_PROG;
    /* A READ needs the dead peer's memory (or, emulated, its answer): it
     * may not succeed, nor hang; it ends when UCX finds the peer gone. */
    st = wait_req(a, req, ops->xfer_post(a, req, NULL, 0));
    uint64_t ms = test_now_ms() - t0;
    printf("READ from the killed peer: %s after %llu ms\n", nixl_status_name(st), (unsigned long long)ms);
    CHECK_ST(st, NIXL_ERR_PEER_GONE);
    CHECK(ms < 5000);
    CHECK(ops->peer_alive(a, peer) == 0);
    CHECK_ST(ops->notif_send(a, peer, "x", 1), NIXL_ERR_PEER_GONE);
    CHECK_ST(ops->peer_connect(a, peer), NIXL_ERR_PEER_GONE);
    ops->xfer_release(a, req);
    ops->rkey_unload(a, rmd);
    ops->peer_unload(a, peer);
    ops->dereg(a, lmd);
    ops->destroy(a);
    free(lb);
    return failures;
}

/* The cases of a peer that stops progressing: instance a (peer_timeout_ms
 * 300) READs 64 KiB from instance b, which has no thread and is progressed
 * only when the case says so (over tcp UCX needs it to answer wireup and
 * RMA).  rb holds a pattern. */
typedef struct silent_pair {
    host_t ha, hb;
    void *a, *b, *peer, *lmd, *rmd_b, *rmd;
    uint8_t *la, *rb;
    nixl_be_iov_t iov;
    nixl_be_req_t *req;
} silent_pair_t;

enum { SILENT_LEN = 1 << 16 };

/* 0 when the pair is ready with its READ prepared; 77 (skip) without
 * UCX_TLS=tcp; else the failure count. */
static int silent_open_with(silent_pair_t *p, const char *name, const nixl_param_t *pa, size_t npa)
{
    const char *tls = getenv("UCX_TLS");
    if (!tls || strcmp(tls, "tcp") != 0) {
        printf("SKIP: %s needs UCX_TLS=tcp (over shared memory a READ needs no answer from the peer)\n", name);
        return 77;
    }
    memset(p, 0, sizeof(*p));
    nixl_param_t pb = {"progress_thread", "0"};
    p->a = be_create(&p->ha, "a", pa, npa);
    p->b = be_create(&p->hb, "b", &pb, 1);
    p->la = calloc(1, SILENT_LEN);
    p->rb = malloc(SILENT_LEN);
    CHECK(p->la && p->rb);
    for (size_t i = 0; i < SILENT_LEN; i++)
        p->rb[i] = (uint8_t)(i * 17 + 9);
    nixl_be_region_t lr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)p->la, .len = SILENT_LEN};
    nixl_be_region_t rr = {.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)p->rb, .len = SILENT_LEN};
    CHECK_ST(ops->reg(p->a, &lr, &p->lmd), NIXL_OK);
    CHECK_ST(ops->reg(p->b, &rr, &p->rmd_b), NIXL_OK);
    p->peer = peer_of(p->a, p->b, "b");
    size_t klen;
    uint8_t *k = key_of(p->b, p->rmd_b, &klen);
    CHECK_ST(ops->rkey_load(p->a, p->peer, &rr, k, klen, &p->rmd), NIXL_OK);
    free(k);
    if (!p->peer || !p->rmd)
        return ++failures;
    p->iov = (nixl_be_iov_t){lr.addr, rr.addr, SILENT_LEN, p->lmd, p->rmd};
    nixl_be_xfer_t x = {NIXL_OP_READ, p->peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &p->iov, 1, SILENT_LEN};
    CHECK_ST(ops->xfer_prepare(p->a, &x, &p->req), NIXL_OK);
    return p->req ? 0 : ++failures;
}

static int silent_open(silent_pair_t *p, const char *name)
{
    nixl_param_t pa = {"peer_timeout_ms", "300"};
    return silent_open_with(p, name, &pa, 1);
}

static void silent_close(silent_pair_t *p)
{
    ops->xfer_release(p->a, p->req);
    ops->rkey_unload(p->a, p->rmd);
    ops->peer_unload(p->a, p->peer);
    ops->dereg(p->a, p->lmd);
    ops->dereg(p->b, p->rmd_b);
    ops->destroy(p->a);
    ops->destroy(p->b);
    free(p->la);
    free(p->rb);
}

/* A peer that never progresses is gone for the silence rule: a READ ends
 * PEER_GONE within peer_timeout_ms (300) plus a margin, with one ERROR
 * line saying why, never hangs. */
static int case_silent(void)
{
    silent_pair_t p;
    int rc = silent_open(&p, "silent");
    if (rc)
        return rc;
    unsigned errors_before = errors_logged;
    uint64_t t0 = test_now_ms();
    nixl_status_t st = wait_req(p.a, p.req, ops->xfer_post(p.a, p.req, NULL, 0));
    uint64_t ms = test_now_ms() - t0;
    printf("READ from a peer that never progresses: %s after %llu ms (peer_timeout_ms=300)\n", nixl_status_name(st),
           (unsigned long long)ms);
    CHECK_ST(st, NIXL_ERR_PEER_GONE);
    CHECK(ms >= 300 && ms < 3000);
    CHECK(errors_logged > errors_before);
    CHECK(ops->peer_alive(p.a, p.peer) == 0);
    CHECK_ST(ops->notif_send(p.a, p.peer, "x", 1), NIXL_ERR_PEER_GONE);
    silent_close(&p);
    return failures;
}

/* A peer gone for silence alone is tried again: b makes no progress until
 * a's READ ended PEER_GONE; then b progresses.  A post within twice the
 * timeout is refused at once; after it, a new endpoint is made, the key
 * unpacked on it, and the READ returns b's bytes.  UCX's own errors (a
 * reset) stay final: peer_lost. */
static int case_renew(void)
{
    silent_pair_t p;
    int rc = silent_open(&p, "renew");
    if (rc)
        return rc;
    CHECK_ST(wait_req(p.a, p.req, ops->xfer_post(p.a, p.req, NULL, 0)), NIXL_ERR_PEER_GONE);
    uint64_t gone = test_now_ms();
    /* Refused at once while the peer is in its penalty (2 x 300 ms). */
    CHECK_ST(ops->xfer_post(p.a, p.req, NULL, 0), NIXL_ERR_PEER_GONE);
    while (test_now_ms() - gone < 700)
        ops->progress(p.b);
    nixl_status_t st = ops->xfer_post(p.a, p.req, NULL, 0);
    uint64_t t0 = test_now_ms();
    while (st == NIXL_IN_PROG && test_now_ms() - t0 < 10000) {
        ops->progress(p.b);
        st = ops->xfer_status(p.a, p.req);
    }
    printf("READ after the renewal: %s in %llu ms\n", nixl_status_name(st), (unsigned long long)(test_now_ms() - t0));
    CHECK_ST(st, NIXL_OK);
    CHECK(memcmp(p.la, p.rb, SILENT_LEN) == 0);
    CHECK(ops->peer_alive(p.a, p.peer) != 0);
    silent_close(&p);
    return failures;
}

/* The cancel bound: UCX cannot cancel a get, and b never answers, so only
 * the bound ends the canceled READ: CANCELED at release_wait_ms (300),
 * long before the silence rule (peer_timeout_ms 2000).  The endpoint is
 * closed for it: the peer's other READ ends PEER_GONE, and a post is
 * refused until the renewal (twice the peer timeout; case renew). */
static int case_cancel_bound(void)
{
    silent_pair_t p;
    nixl_param_t pa[] = {{"peer_timeout_ms", "2000"}, {"release_wait_ms", "300"}};
    int rc = silent_open_with(&p, "cancel_bound", pa, 2);
    if (rc)
        return rc;
    nixl_be_req_t *other = NULL;
    nixl_be_xfer_t x = {NIXL_OP_READ, p.peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &p.iov, 1, SILENT_LEN};
    CHECK_ST(ops->xfer_prepare(p.a, &x, &other), NIXL_OK);
    CHECK_ST(ops->xfer_post(p.a, other, NULL, 0), NIXL_IN_PROG);
    CHECK_ST(ops->xfer_post(p.a, p.req, NULL, 0), NIXL_IN_PROG);
    unsigned errors_before = errors_logged;
    uint64_t t0 = test_now_ms();
    ops->xfer_cancel(p.a, p.req);
    nixl_status_t st = wait_req(p.a, p.req, NIXL_IN_PROG);
    uint64_t ms = test_now_ms() - t0;
    printf("canceled READ from a peer that never progresses: %s %llu ms after the cancel (release_wait_ms=300, "
           "peer_timeout_ms=2000)\n", nixl_status_name(st), (unsigned long long)ms);
    CHECK_ST(st, NIXL_ERR_CANCELED);
    CHECK(ms >= 300 && ms < 1500);
    CHECK(errors_logged > errors_before);
    CHECK_ST(wait_req(p.a, other, NIXL_IN_PROG), NIXL_ERR_PEER_GONE);
    CHECK_ST(ops->xfer_post(p.a, other, NULL, 0), NIXL_ERR_PEER_GONE);
    ops->xfer_release(p.a, other);
    silent_close(&p);
    return failures;
}

/* A thread inside UCX for long (UCX 1.13's tcp sends with a blocking send
 * inside ucp_worker_progress) does not hold the caller: with a's lock held
 * by another thread, as that call would hold it, status answers IN_PROG
 * and cancel returns, both while the lock is still held (no clock in the
 * check: the holder lets go only when told).  The recorded cancel is
 * applied once the lock is free: the WRITE, stuck until b progresses,
 * ends CANCELED and its notification is never delivered.  Then posts made
 * while the lock is held (below). */
static atomic_int hold_state; /* 1: the lock is held; 2: let it go; 3: let go after 3 s untold */

static void *hold_main(void *arg)
{
    ucx_be_t *be = arg;
    pthread_mutex_lock(&be->lock);
    atomic_store(&hold_state, 1);
    uint64_t t0 = test_now_ms();
    while (atomic_load(&hold_state) == 1) {
        usleep(1000);
        if (test_now_ms() - t0 > 3000) { /* a caller blocked behind us: fail the case, do not hang */
            int held = 1;
            atomic_compare_exchange_strong(&hold_state, &held, 3);
        }
    }
    pthread_mutex_unlock(&be->lock);
    return NULL;
}

/* Starts a thread holding be's lock until hold_state is set to 2; 0 once
 * it holds it. */
static int hold_begin(pthread_t *t, void *be)
{
    atomic_store(&hold_state, 0);
    if (pthread_create(t, NULL, hold_main, be) != 0)
        return -1;
    while (atomic_load(&hold_state) != 1)
        usleep(100);
    return 0;
}

static int case_busy(void)
{
    silent_pair_t p;
    nixl_param_t pa = {"peer_timeout_ms", "5000"};
    int rc = silent_open_with(&p, "busy", &pa, 1);
    if (rc)
        return rc;
    nixl_be_req_t *w = NULL;
    nixl_be_xfer_t x = {NIXL_OP_WRITE, p.peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &p.iov, 1, SILENT_LEN};
    CHECK_ST(ops->xfer_prepare(p.a, &x, &w), NIXL_OK);
    if (!w)
        return ++failures;
    CHECK_ST(ops->xfer_post(p.a, w, "n", 1), NIXL_IN_PROG); /* b never answered: in flight */
    pthread_t t;
    if (hold_begin(&t, p.a) != 0)
        return ++failures;
    CHECK_ST(ops->xfer_status(p.a, w), NIXL_IN_PROG);
    CHECK(atomic_load(&hold_state) == 1);
    ops->xfer_cancel(p.a, w);
    CHECK(atomic_load(&hold_state) == 1); /* returned with the lock still held */
    CHECK_ST(ops->xfer_status(p.a, w), NIXL_IN_PROG);
    printf("status and cancel returned while the instance's lock was held\n");
    atomic_store(&hold_state, 2);
    pthread_join(t, NULL);
    nixl_status_t st = NIXL_IN_PROG;
    uint64_t t0 = test_now_ms();
    while (st == NIXL_IN_PROG && test_now_ms() - t0 < 10000) {
        ops->progress(p.b);
        st = ops->xfer_status(p.a, w);
    }
    printf("the WRITE canceled while the lock was held: %s\n", nixl_status_name(st));
    CHECK_ST(st, NIXL_ERR_CANCELED);
    t0 = test_now_ms();
    while (test_now_ms() - t0 < 300)
        ops->progress(p.b);
    CHECK(atomic_load(&p.hb.notifs) == 0);

    /* Posts while the lock is held are queued: w2 (notification "m") and
     * w3 ("z", canceled while queued) both return IN_PROG while it is
     * held; w3 is CANCELED at once.  Once the lock is free w2 moves (b's
     * bytes become a's), "m" arrives, "z" never does. */
    nixl_be_req_t *w2 = NULL, *w3 = NULL;
    CHECK_ST(ops->xfer_prepare(p.a, &x, &w2), NIXL_OK);
    CHECK_ST(ops->xfer_prepare(p.a, &x, &w3), NIXL_OK);
    if (!w2 || !w3)
        return ++failures;
    for (size_t i = 0; i < SILENT_LEN; i++)
        p.la[i] = (uint8_t)(i * 5 + 3);
    if (hold_begin(&t, p.a) != 0)
        return ++failures;
    CHECK_ST(ops->xfer_post(p.a, w2, "m", 1), NIXL_IN_PROG);
    CHECK_ST(ops->xfer_post(p.a, w3, "z", 1), NIXL_IN_PROG);
    CHECK_ST(ops->xfer_post(p.a, w3, "z", 1), NIXL_ERR_IN_FLIGHT); /* still queued */
    ops->xfer_cancel(p.a, w3);
    CHECK_ST(ops->xfer_status(p.a, w3), NIXL_ERR_CANCELED);
    CHECK_ST(ops->xfer_status(p.a, w2), NIXL_IN_PROG);
    CHECK(atomic_load(&hold_state) == 1); /* every call returned with the lock still held */
    printf("posts queued and a queued post canceled while the instance's lock was held\n");
    atomic_store(&hold_state, 2);
    pthread_join(t, NULL);
    st = NIXL_IN_PROG;
    t0 = test_now_ms();
    while (st == NIXL_IN_PROG && test_now_ms() - t0 < 10000) {
        ops->progress(p.b);
        st = ops->xfer_status(p.a, w2);
    }
    printf("the WRITE posted while the lock was held: %s\n", nixl_status_name(st));
    CHECK_ST(st, NIXL_OK);
    t0 = test_now_ms();
    while ((atomic_load(&p.hb.notifs) == 0 || test_now_ms() - t0 < 300) && test_now_ms() - t0 < 5000)
        ops->progress(p.b);
    CHECK(atomic_load(&p.hb.notifs) == 1 && p.hb.msg_len == 1 && p.hb.msg[0] == 'm');
    CHECK(memcmp(p.rb, p.la, SILENT_LEN) == 0);

    /* Requests their caller saw ended, with nothing of them left to UCX
     * (w2's notification sent: its status is asked until then), are quiet:
     * status, cancel and release need no lock, nor does the core's
     * progress. */
    t0 = test_now_ms();
    while (!atomic_load(&((ucx_req_t *)w2)->quiet) && test_now_ms() - t0 < 5000)
        (void)ops->xfer_status(p.a, w2);
    CHECK(atomic_load(&((ucx_req_t *)w2)->quiet) && atomic_load(&((ucx_req_t *)w)->quiet));
    if (hold_begin(&t, p.a) != 0)
        return ++failures;
    CHECK_ST(ops->progress(p.a), NIXL_OK);
    CHECK_ST(ops->xfer_status(p.a, w2), NIXL_OK);
    CHECK_ST(ops->xfer_status(p.a, w), NIXL_ERR_CANCELED);
    ops->xfer_cancel(p.a, w2);
    ops->xfer_release(p.a, w2);
    ops->xfer_release(p.a, w);
    CHECK(atomic_load(&hold_state) == 1); /* all of it returned with the lock still held */
    printf("progress, and status, cancel and release of ended requests, returned while the lock was held\n");
    atomic_store(&hold_state, 2);
    pthread_join(t, NULL);
    CHECK_ST(ops->xfer_status(p.a, w3), NIXL_ERR_CANCELED); /* canceled while queued: never quiet */
    ops->xfer_release(p.a, w3);
    silent_close(&p);
    return failures;
}

/* Two instances, a and b, with three buffers of n bytes: la (a's source,
 * a pattern), rb (b's, 0x5a) and back (a's for READs, 0xee), registered;
 * a loaded b's key of rb as rmd.  The cases that move bytes between them
 * start here. */
typedef struct xpair {
    host_t ha, hb;
    void *a, *b, *peer;
    size_t n;
    uint8_t *la, *rb, *back;
    nixl_be_region_t lr, br, rr;
    void *lmd, *bmd, *rmd_b, *rmd;
} xpair_t;

static int xpair_open(xpair_t *p, size_t n, const nixl_param_t *pa, size_t npa, unsigned mul, unsigned add)
{
    memset(p, 0, sizeof(*p));
    p->a = be_create(&p->ha, "a", pa, npa);
    p->b = be_create(&p->hb, "b", NULL, 0);
    p->n = n;
    p->la = malloc(n);
    p->rb = malloc(n);
    p->back = malloc(n);
    if (!p->la || !p->rb || !p->back)
        return ++failures;
    for (size_t i = 0; i < n; i++) {
        p->la[i] = (uint8_t)(i * mul + add);
        p->rb[i] = 0x5a;
        p->back[i] = 0xee;
    }
    p->lr = (nixl_be_region_t){.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)p->la, .len = n};
    p->br = (nixl_be_region_t){.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)p->back, .len = n};
    p->rr = (nixl_be_region_t){.mem_type = NIXL_MEM_DRAM, .addr = (uint64_t)(uintptr_t)p->rb, .len = n};
    CHECK_ST(ops->reg(p->a, &p->lr, &p->lmd), NIXL_OK);
    CHECK_ST(ops->reg(p->a, &p->br, &p->bmd), NIXL_OK);
    CHECK_ST(ops->reg(p->b, &p->rr, &p->rmd_b), NIXL_OK);
    p->peer = peer_of(p->a, p->b, "b");
    size_t klen;
    uint8_t *k = key_of(p->b, p->rmd_b, &klen);
    CHECK_ST(ops->rkey_load(p->a, p->peer, &p->rr, k, klen, &p->rmd), NIXL_OK);
    free(k);
    return p->peer && p->rmd ? 0 : ++failures;
}

/* b's first notification, within 5 s. */
static void xpair_notified(xpair_t *p)
{
    uint64_t t0 = test_now_ms();
    while (atomic_load(&p->hb.notifs) == 0 && test_now_ms() - t0 < 5000)
        ops->progress(p->b);
    CHECK(atomic_load(&p->hb.notifs) == 1);
}

static void xpair_close(xpair_t *p)
{
    ops->rkey_unload(p->a, p->rmd);
    ops->peer_unload(p->a, p->peer);
    ops->dereg(p->a, p->lmd);
    ops->dereg(p->a, p->bmd);
    ops->dereg(p->b, p->rmd_b);
    ops->destroy(p->a);
    ops->destroy(p->b);
    free(p->la);
    free(p->rb);
    free(p->back);
}

/* The indexed form, 2 layers x 7 slots of 100 bytes at a stride of one
 * item on both sides: slots next to each other on both sides go as one
 * piece (5-7 -> 10-12, 2-3 -> 0-1), slots next to each other on one side
 * only do not (9 -> 4, 10 -> 6).  A WRITE lands exactly (the rest of the
 * target untouched) when its notification arrives; a READ of the same
 * pieces brings them back into another buffer.  Requests that do not add
 * up, have no bytes or lack a registration are refused. */
enum { IXU_LAYERS = 2, IXU_LAYER = 4096, IXU_ITEM = 100, IXU_N = 7 };

static void ixu_image(uint8_t *want, const uint8_t *src, const uint32_t *from, const uint32_t *to)
{
    for (size_t l = 0; l < IXU_LAYERS; l++)
        for (size_t t = 0; t < IXU_N; t++)
            memcpy(want + l * IXU_LAYER + (size_t)to[t] * IXU_ITEM, src + l * IXU_LAYER + (size_t)from[t] * IXU_ITEM,
                   IXU_ITEM);
}

static int case_indexed(void)
{
    xpair_t p;
    const size_t N = IXU_LAYERS * IXU_LAYER;
    uint8_t *want = malloc(N);
    if (!want || xpair_open(&p, N, NULL, 0, 31, 7))
        return ++failures;
    static const uint32_t ls[IXU_N] = {5, 6, 7, 2, 3, 9, 10}, rs[IXU_N] = {10, 11, 12, 0, 1, 4, 6};
    nixl_be_layer_t wl[IXU_LAYERS], rl[IXU_LAYERS];
    for (size_t l = 0; l < IXU_LAYERS; l++) {
        wl[l] = (nixl_be_layer_t){p.lr.addr + l * IXU_LAYER, p.rr.addr + l * IXU_LAYER, p.lmd, p.rmd};
        rl[l] = (nixl_be_layer_t){p.br.addr + l * IXU_LAYER, p.rr.addr + l * IXU_LAYER, p.bmd, p.rmd};
    }
    const uint64_t bytes = (uint64_t)IXU_LAYERS * IXU_N * IXU_ITEM;
    nixl_be_xfer_indexed_t x = {NIXL_OP_WRITE, p.peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, wl, IXU_LAYERS,
                                ls, rs, IXU_N, IXU_ITEM, IXU_ITEM, IXU_ITEM, bytes};
    nixl_be_req_t *req = NULL;
    CHECK_ST(ops->xfer_prepare_indexed(p.a, &x, &req), NIXL_OK);
    if (!req)
        return ++failures;
    CHECK_ST(wait_req(p.a, req, ops->xfer_post(p.a, req, "i", 1)), NIXL_OK);
    xpair_notified(&p);
    memset(want, 0x5a, N);
    ixu_image(want, p.la, ls, rs);
    CHECK(memcmp(p.rb, want, N) == 0);
    ops->xfer_release(p.a, req);
    nixl_be_xfer_indexed_t y = x;
    y.op = NIXL_OP_READ;
    y.layer = rl;
    CHECK_ST(ops->xfer_prepare_indexed(p.a, &y, &req), NIXL_OK);
    CHECK_ST(wait_req(p.a, req, ops->xfer_post(p.a, req, NULL, 0)), NIXL_OK);
    memset(want, 0xee, N);
    ixu_image(want, p.la, ls, ls); /* back's slot ls[t] holds what la's slot ls[t] sent */
    CHECK(memcmp(p.back, want, N) == 0);
    ops->xfer_release(p.a, req);

    nixl_be_xfer_indexed_t bad = x;
    bad.bytes = bytes + 1;
    req = NULL;
    CHECK_ST(ops->xfer_prepare_indexed(p.a, &bad, &req), NIXL_ERR_INVALID_PARAM);
    bad = x;
    bad.item_len = 0;
    CHECK_ST(ops->xfer_prepare_indexed(p.a, &bad, &req), NIXL_ERR_ZERO_LENGTH);
    nixl_be_layer_t norm[IXU_LAYERS] = {wl[0], {wl[1].lbase, wl[1].rbase, p.lmd, NULL}};
    bad = x;
    bad.layer = norm;
    CHECK_ST(ops->xfer_prepare_indexed(p.a, &bad, &req), NIXL_ERR_INVALID_PARAM);
    bad = x;
    bad.local_mem = NIXL_MEM_VRAM; /* this UCX (Debian's) has no CUDA */
    CHECK_ST(ops->xfer_prepare_indexed(p.a, &bad, &req), NIXL_ERR_NO_PATH);
    CHECK(req == NULL);
    xpair_close(&p);
    free(want);
    return failures;
}

/* A stretch of progress calls that held the instance UCX_STALL_WARN_MS or
 * longer is said, once, with its time (what netfaults.sh reads when a
 * request ended late under loss); a shorter one is not.  The stretch is
 * given, not made: UCX blocks like that only under a lossy link. */
static int case_stall(void)
{
    host_t h;
    void *be = be_create(&h, "stall", NULL, 0);
    uint64_t now = nixl_now_ns(), ms = 1000000u;
    unsigned w0 = warns_logged;
    ucx_stall_check(be, now - (UCX_STALL_WARN_MS - 1) * ms, now);
    ucx_stall_check(be, now, now);
    CHECK(warns_logged == w0);
    ucx_stall_check(be, now - 1234 * ms, now);
    CHECK(warns_logged == w0 + 1);
    CHECK(strstr(last_warn, "UCX held this instance for 1234 ms inside ucp_worker_progress") != NULL);
    ucx_stall_check(be, now - UCX_STALL_WARN_MS * ms, now);
    CHECK(warns_logged == w0 + 2);
    ops->destroy(be);
    return failures;
}

/* ucx_tcpold.c on a TCP connection of this process over loopback, no UCX:
 * a reader that does not read and a writer that wrote until its buffers
 * were full leave the writer's socket with bytes unacknowledged.  mark
 * keeps exactly that connection (the listener and the reader's side have
 * none), busy counts it; once the reader took every byte, busy drops it. */
static int case_tcpold(void)
{
    if (access("/proc/net/tcp", R_OK) != 0 || access("/proc/self/fd", R_OK) != 0) {
        printf("SKIP: tcpold needs /proc/net/tcp and /proc/self/fd\n");
        return 77;
    }
    int small = 4096, one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t slen = sizeof(sa);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    CHECK(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) == 0); /* the accepted side's window */
    CHECK(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 1) == 0);
    CHECK(getsockname(l, (struct sockaddr *)&sa, &slen) == 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c >= 0 && setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
    CHECK(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
    CHECK(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    int r = accept(l, NULL, NULL);
    CHECK(r >= 0);
    if (failures)
        return failures;
    CHECK(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK) == 0);
    static uint8_t buf[1 << 16];
    size_t sent = 0;
    for (;;) {
        ssize_t n = write(c, buf, sizeof(buf));
        if (n <= 0)
            break;
        sent += (size_t)n;
    }
    ucx_peer_t peer;
    memset(&peer, 0, sizeof(peer));
    unsigned marked = ucx_tcpold_mark(&peer), busy = ucx_tcpold_busy(&peer);
    printf("%zu bytes written, the reader not reading: %u connection(s) kept, %u busy (%s)\n", sent, marked, busy,
           marked ? peer.old_conns[0] : "-");
    CHECK(sent > 0);
    CHECK(marked == 1 && busy == 1);
    size_t got = 0;
    while (got < sent) {
        ssize_t n = read(r, buf, sizeof(buf));
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    CHECK(got == sent);
    uint64_t t0 = test_now_ms();
    while (ucx_tcpold_busy(&peer) && test_now_ms() - t0 < 5000)
        usleep(1000);
    printf("after the reader took every byte: %u busy\n", ucx_tcpold_busy(&peer));
    CHECK(peer.nold == 0);
    close(c);
    close(r);
    close(l);
    return failures;
}

/* Over a network transport pieces larger than UCX_CHUNK go as several
 * operations, inside the node each whole: a WRITE of one piece of 5 MiB +
 * 3 bytes at odd offsets, then a READ of it back, bytes compared, the
 * neighbours untouched; under a peer_timeout_ms of 2000 a healthy peer is
 * never found silent. */
static int case_chunks(void)
{
    xpair_t p;
    nixl_param_t pa = {"peer_timeout_ms", "2000"};
    const size_t L = 5 * UCX_CHUNK + 3;
    if (xpair_open(&p, L + 64, &pa, 1, 29, 11))
        return failures;
    nixl_be_iov_t w = {p.lr.addr + 5, p.rr.addr + 17, L, p.lmd, p.rmd};
    nixl_be_xfer_t x = {NIXL_OP_WRITE, p.peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &w, 1, L};
    nixl_be_req_t *req = NULL;
    CHECK_ST(ops->xfer_prepare(p.a, &x, &req), NIXL_OK);
    if (!req)
        return ++failures;
    const ucx_req_t *u = (const ucx_req_t *)req;
    const int net = strcmp(u->hdr.path, "ucx.tcp") == 0;
    printf("  chunks: path %s, operations of at most %llu bytes\n", u->hdr.path, (unsigned long long)u->chunk);
    CHECK(net || strcmp(u->hdr.path, "ucx.sysv") == 0 || strcmp(u->hdr.path, "ucx.posix") == 0);
    CHECK(u->chunk == (net ? UCX_CHUNK : UINT64_MAX));
    /* The target's bytes are looked at once its notification arrived (an
     * atomic of the fake host: what orders UCX's writes into rb before our
     * reads, for ThreadSanitizer as for the contract). */
    CHECK_ST(wait_req(p.a, req, ops->xfer_post(p.a, req, "c", 1)), NIXL_OK);
    xpair_notified(&p);
    CHECK(memcmp(p.rb + 17, p.la + 5, L) == 0);
    CHECK(p.rb[16] == 0x5a && p.rb[17 + L] == 0x5a);
    ops->xfer_release(p.a, req);
    nixl_be_iov_t r = {p.br.addr + 1, p.rr.addr + 17, L, p.bmd, p.rmd};
    nixl_be_xfer_t y = {NIXL_OP_READ, p.peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &r, 1, L};
    CHECK_ST(ops->xfer_prepare(p.a, &y, &req), NIXL_OK);
    CHECK_ST(wait_req(p.a, req, ops->xfer_post(p.a, req, NULL, 0)), NIXL_OK);
    CHECK(memcmp(p.back + 1, p.la + 5, L) == 0);
    CHECK(p.back[0] == 0xee && p.back[1 + L] == 0xee);
    CHECK(ops->peer_alive(p.a, p.peer) != 0);
    ops->xfer_release(p.a, req);
    xpair_close(&p);
    return failures;
}

/* What UCX chose, read from its protocol table after a first post: the
 * step a GPU request takes (ucx_peer_learn_locked), asked here of host
 * requests (a UCX without CUDA has no GPU request) under UCX's newer
 * protocols over tcp (UCX_PROTO_ENABLE=y): the table names tcp for WRITE
 * and READ, no fallback; the request and the next of its kind carry it;
 * bytes compared.  Without the newer protocols there is no table: skip. */
static int case_learn(void)
{
    if (!ucx_proto_v2()) {
        printf("SKIP learn: UCX's older protocols have no protocol table (set UCX_PROTO_ENABLE=y)\n");
        return 77;
    }
    xpair_t p;
    const size_t L = 256 * 1024;
    if (xpair_open(&p, L, NULL, 0, 7, 3))
        return failures;
    ucx_peer_t *peer = p.peer;
    for (int get = 0; get < 2; get++) {
        for (int round = 0; round < 2; round++) {
            nixl_be_iov_t v = {get ? p.br.addr : p.lr.addr, p.rr.addr, L, get ? p.bmd : p.lmd, p.rmd};
            nixl_be_xfer_t x = {get ? NIXL_OP_READ : NIXL_OP_WRITE, p.peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &v, 1, L};
            nixl_be_req_t *req = NULL;
            CHECK_ST(ops->xfer_prepare(p.a, &x, &req), NIXL_OK);
            if (!req)
                return ++failures;
            ucx_req_t *u = (ucx_req_t *)req;
            const ucx_chose_t *c = &peer->chose[get][0][0];
            CHECK(c->known == round);
            u->learn = !c->known; /* as a GPU request's prepare sets it */
            CHECK_ST(wait_req(p.a, req, ops->xfer_post(p.a, req, NULL, 0)), NIXL_OK);
            printf("  learn: %s round %d: known %d, path %s, fallback %d\n", get ? "READ" : "WRITE", round, c->known,
                   c->path ? c->path : "(none)", c->fallback);
            CHECK(c->known && c->path && strcmp(c->path, "ucx.tcp") == 0 && !c->fallback);
            CHECK(strcmp(u->hdr.path, "ucx.tcp") == 0 && !u->hdr.fallback && !u->learn);
            CHECK(memcmp(get ? p.back : p.rb, p.la, L) == 0);
            ops->xfer_release(p.a, req);
        }
    }
    xpair_close(&p);
    return failures;
}

/* The CUDA context rule without a GPU: a fake driver table keeps each
 * thread's current context in a thread-local and counts the binds.  Once
 * an instance has a context (as its first GPU registration gives it under
 * a UCX with CUDA), every op of the caller's runs with it current and
 * gives the caller's own back when it returns; each progress thread binds
 * it once and keeps it; a piece of memory of another context binds that
 * one for its post.  The bytes still land. */
#define FAKE_A ((void *)(uintptr_t)0xa0) /* the instances' context */
#define FAKE_B ((void *)(uintptr_t)0xb0) /* a region's other context */
#define FAKE_C ((void *)(uintptr_t)0xc0) /* the caller's own */
static _Thread_local void *fake_cur;
static pthread_t fake_caller;
static atomic_uint fake_thread_sets, fake_caller_sets, fake_b_binds;

static nixl_status_t fake_bind(void *ctx, void **saved)
{
    *saved = fake_cur;
    if (fake_cur != ctx) {
        fake_cur = ctx;
        atomic_fetch_add(pthread_equal(pthread_self(), fake_caller) ? &fake_caller_sets : &fake_thread_sets, 1);
    }
    if (ctx == FAKE_B)
        atomic_fetch_add(&fake_b_binds, 1);
    return NIXL_OK;
}

static void fake_restore(void *saved)
{
    fake_cur = saved;
}

static void cu_set(void *be, void *ctx, ucx_reg_t *g, void *gctx)
{
    ucx_be_t *u = be;
    pthread_mutex_lock(&u->lock);
    if (ctx)
        u->cu_ctx = ctx;
    if (g)
        g->cu_ctx = gctx;
    pthread_mutex_unlock(&u->lock);
}

static int case_cuctx(void)
{
    xpair_t p;
    if (xpair_open(&p, 1u << 16, NULL, 0, 13, 5))
        return failures;
    p.ha.cuda.ctx_bind = p.hb.cuda.ctx_bind = fake_bind;
    p.ha.cuda.ctx_restore = p.hb.cuda.ctx_restore = fake_restore;
    fake_caller = pthread_self();
    fake_cur = FAKE_C;
    cu_set(p.a, FAKE_A, NULL, NULL);
    cu_set(p.b, FAKE_A, NULL, NULL);

    nixl_be_iov_t w = {p.lr.addr, p.rr.addr, p.n, p.lmd, p.rmd};
    nixl_be_xfer_t x = {NIXL_OP_WRITE, p.peer, NIXL_MEM_DRAM, NIXL_MEM_DRAM, &w, 1, p.n};
    nixl_be_req_t *req = NULL;
    CHECK_ST(ops->xfer_prepare(p.a, &x, &req), NIXL_OK);
    if (!req)
        return ++failures;
    unsigned sets0 = atomic_load(&fake_caller_sets);
    nixl_status_t st = ops->xfer_post(p.a, req, "k", 1);
    CHECK(fake_cur == FAKE_C);
    uint64_t t0 = test_now_ms();
    while (st == NIXL_IN_PROG && test_now_ms() - t0 < 10000) {
        st = ops->xfer_status(p.a, req);
        CHECK(fake_cur == FAKE_C); /* given back after every call */
    }
    CHECK_ST(st, NIXL_OK);
    xpair_notified(&p);
    CHECK(fake_cur == FAKE_C);
    CHECK(memcmp(p.rb, p.la, p.n) == 0);
    CHECK(atomic_load(&fake_caller_sets) > sets0); /* the caller's calls ran with A */

    /* Left alone, both progress threads take their locks again and again:
     * each bound A once and kept it. */
    usleep(100000);
    unsigned ts = atomic_load(&fake_thread_sets);
    CHECK(ts == 2);
    usleep(100000);
    CHECK(atomic_load(&fake_thread_sets) == ts);

    /* A piece of memory of another context: B bound for the post. */
    cu_set(p.a, NULL, p.lmd, FAKE_B);
    memset(p.rb, 0x5a, p.n);
    CHECK_ST(wait_req(p.a, req, ops->xfer_post(p.a, req, NULL, 0)), NIXL_OK);
    CHECK(fake_cur == FAKE_C);
    CHECK(atomic_load(&fake_b_binds) >= 1);
    CHECK(memcmp(p.rb, p.la, p.n) == 0);
    ops->xfer_release(p.a, req);
    CHECK(fake_cur == FAKE_C);
    cu_set(p.a, NULL, p.lmd, NULL);
    xpair_close(&p);
    CHECK(fake_cur == FAKE_C);
    printf("cuctx: caller binds %u, progress threads' %u, B %u\n", atomic_load(&fake_caller_sets),
           atomic_load(&fake_thread_sets), atomic_load(&fake_b_binds));
    return failures;
}

int main(int argc, char **argv)
{
    ops = nixl_backend_ucx_ops();
    if (argc < 2) {
        fprintf(stderr, "usage: %s conn_corrupt|rkey_corrupt|xfer|ep_info|vram|fallback|peer_lost|silent|chunks|renew|cancel_bound|busy|tcpold|stall|indexed|cuctx|learn\n", argv[0]);
        return 2;
    }
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"conn_corrupt", case_conn_corrupt}, {"rkey_corrupt", case_rkey_corrupt}, {"xfer", case_xfer},
                 {"ep_info", case_ep_info},           {"vram", case_vram},                 {"fallback", case_fallback},
                 {"peer_lost", case_peer_lost},       {"silent", case_silent},             {"chunks", case_chunks},
                 {"renew", case_renew},                {"cancel_bound", case_cancel_bound},
                 {"busy", case_busy},                 {"tcpold", case_tcpold},
                 {"stall", case_stall},               {"indexed", case_indexed},
                 {"cuctx", case_cuctx},               {"learn", case_learn}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(argv[1], cases[i].name) != 0)
            continue;
        int rc = cases[i].fn();
        if (rc == 77)
            return 77;
        if (failures)
            fprintf(stderr, "%s: %d failure(s)\n", argv[1], failures);
        return failures ? 1 : 0;
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
