/*
 * test_cuda_ipc.c - the cuda_ipc backend on a machine without a GPU (CI):
 * what must hold whatever the hardware.
 *
 *   test_cuda_ipc loads | no_driver | notif | conn_corrupt | rkey_corrupt
 *
 * loads        the backend is listed, with VRAM and SAME_HOST|LOCAL|NOTIF|PROGRESS
 * no_driver    with no CUDA driver the backend still creates, VRAM
 *              registration fails with NIXL_ERR_NO_CUDA, DRAM still works
 * notif        notifications between two agents over cuda_ipc (the socket
 *              shared with shm) need no GPU
 * conn_corrupt peer_load refuses truncated, altered or extended conn info
 * rkey_corrupt rkey_load refuses malformed keys (the blob is untrusted)
 * stage_server the staging server (cuda_ipc.staged) takes requests from any
 *              process of our uid: malformed messages close the connection,
 *              pieces outside the staging buffer or outside registered VRAM
 *              are refused by code, and the connection stays usable
 *
 * Built only with CUDA's headers; without them a stub prints why and skips.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../common/test_peer.h"
#include "backends/cuda_ipc/cuda_ipc.h"
#include "cuda/cuda.h"
#include "nixl.h"
#include "nixl/backend.h"
#include "util/config.h"

#define CHECK(c)                                                                                 \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                          \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)
#define CHECK_ST(e, want)                                                                        \
    do {                                                                                         \
        nixl_status_t st_ = (e);                                                                 \
        if (st_ != (want)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: %s = %s, want %s\n", __FILE__, __LINE__, #e,              \
                    nixl_status_name(st_), nixl_status_name(want));                              \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static const nixl_backend_info_t *find_backend(const char *name)
{
    const nixl_backend_info_t *v;
    size_t n;
    CHECK(nixl_backends_available(&v, &n) == NIXL_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return &v[i];
    return NULL;
}

static nixl_agent_t *agent_make(const char *name, const char *backend)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a;
    CHECK_ST(nixl_agent_create(&cfg, &a), NIXL_OK);
    nixl_backend_t *b;
    CHECK_ST(nixl_backend_create(a, backend, NULL, 0, &b), NIXL_OK);
    return a;
}

static int test_loads(void)
{
    const nixl_backend_info_t *b = find_backend("cuda_ipc");
    CHECK(b != NULL);
    CHECK(b->mem_types == NIXL_MEM_BIT(NIXL_MEM_VRAM));
    uint32_t want = NIXL_CAP_SAME_HOST | NIXL_CAP_LOCAL | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS;
    CHECK((b->caps & want) == want && !(b->caps & NIXL_CAP_CROSS_HOST));
    CHECK(strcmp(b->origin, "built-in") == 0);
    printf("cuda_ipc: built in, VRAM, caps 0x%x\n", b->caps);
    return 0;
}

static int test_no_driver(void)
{
    /* Before anything loads the driver. */
    setenv("NIXL_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    nixl_agent_t *a = agent_make("nodrv", "cuda_ipc");
    static uint8_t fake[4096];
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)fake, .len = sizeof(fake), .dev_id = 0};
    nixl_dlist_t l = {.mem_type = NIXL_MEM_VRAM, .count = 1, .descs = &d};
    CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_ERR_NO_CUDA);
    /* The rest of the library works: DRAM with shm, when it is there. */
    nixl_backend_t *shm;
    if (find_backend("shm") && nixl_backend_create(a, "shm", NULL, 0, &shm) == NIXL_OK) {
        l.mem_type = NIXL_MEM_DRAM;
        CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_OK);
        CHECK_ST(nixl_mem_deregister(a, &l, NULL), NIXL_OK);
    }
    nixl_agent_destroy(a);
    printf("no driver: backend created, VRAM registration -> NIXL_ERR_NO_CUDA\n");
    return 0;
}

typedef struct rx {
    int n;
    char sender[NIXL_NAME_MAX + 1];
    char msg[64];
} rx_t;

static void on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    rx_t *r = arg;
    if (r->n++ == 0) {
        snprintf(r->sender, sizeof(r->sender), "%s", sender);
        snprintf(r->msg, sizeof(r->msg), "%.*s", (int)(len < 63 ? len : 63), (const char *)msg);
    }
}

static int test_notif(void)
{
    nixl_agent_t *a = agent_make("cip_a", "cuda_ipc"), *b = agent_make("cip_b", "cuda_ipc");
    void *blob;
    size_t len;
    CHECK_ST(nixl_md_get_local(b, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    CHECK_ST(nixl_notif_send(a, "cip_b", "hello-vram", 10, NULL), NIXL_OK);
    rx_t r = {0};
    for (int i = 0; i < 2000 && r.n == 0; i++) {
        CHECK_ST(nixl_notifs_get(b, on_notif, &r, NULL), NIXL_OK);
        usleep(1000);
    }
    CHECK(r.n == 1 && strcmp(r.sender, "cip_a") == 0 && strcmp(r.msg, "hello-vram") == 0);
    nixl_agent_destroy(a);
    nixl_agent_destroy(b);
    printf("notification over cuda_ipc delivered\n");
    return 0;
}

/* ---- the ops, driven directly ---- */

static int host_log_enabled(nixl_log_level_t level)
{
    return level <= NIXL_LOG_WARN || getenv("CIP_TEST_LOG");
}

static void host_log(nixl_log_level_t level, const char *where, const char *fmt, ...)
{
    (void)level;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%s] ", where);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void host_fallback(void *ctx, const char *path, const char *cause)
{
    (void)ctx;
    fprintf(stderr, "fallback %s: %s\n", path, cause);
}

static void host_deliver(void *ctx, const char *sender, const void *msg, size_t len)
{
    (void)ctx;
    (void)sender;
    (void)msg;
    (void)len;
}

static nixl_host_services_t test_host(const char *name)
{
    nixl_host_services_t h = {
        .abi_version = NIXL_BACKEND_ABI_VERSION,
        .struct_size = sizeof(nixl_host_services_t),
        .log_enabled = host_log_enabled,
        .log = host_log,
        .config_get = nixl_cfg_get,
        .fallback = host_fallback,
        .notif_deliver = host_deliver,
        .agent_name = name,
        .cuda = nixl_cuda_host(),
    };
    return h;
}

static int test_conn_corrupt(void)
{
    const nixl_backend_ops_t *ops = nixl_backend_cuda_ipc_ops();
    nixl_host_services_t h = test_host("cip_conn");
    void *be;
    CHECK_ST(ops->create(&h, NULL, 0, &be), NIXL_OK);
    uint8_t conn[256];
    size_t len = sizeof(conn);
    CHECK_ST(ops->conn_pack(be, conn, &len), NIXL_OK);
    void *peer;
    nixl_be_peer_t self = test_peer_here("self", getpid()), p = test_peer_here("p", getpid()), w;
    CHECK_ST(ops->peer_open(be, &self, conn, len, &peer), NIXL_OK);
    ops->peer_unload(be, peer);
    for (size_t cut = 0; cut < len; cut++)
        CHECK(ops->peer_open(be, &p, conn, cut, &peer) != NIXL_OK);
    uint8_t bad[260];
    memcpy(bad, conn, len);
    bad[len] = 'x';
    CHECK_ST(ops->peer_open(be, &p, bad, len + 1, &peer), NIXL_ERR_BAD_METADATA);
    for (size_t i = 0; i < 8; i++) {
        memcpy(bad, conn, len);
        bad[i] ^= 0x40;
        CHECK(ops->peer_open(be, &p, bad, len, &peer) != NIXL_OK);
    }
    memcpy(bad, conn, len);
    bad[len - 1] = '/'; /* not a socket-name character */
    CHECK_ST(ops->peer_open(be, &p, bad, len, &peer), NIXL_ERR_BAD_METADATA);
    w = p;
    w.same_host = 0; /* the core found another kernel boot */
    CHECK_ST(ops->peer_open(be, &w, conn, len, &peer), NIXL_ERR_NO_PATH);
    w = p;
    w.same_pidns = 0;
    CHECK_ST(ops->peer_open(be, &w, conn, len, &peer), NIXL_ERR_NO_PATH);
    ops->destroy(be);
    printf("conn info: %zu truncations, flips and extensions refused\n", len);
    return 0;
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A key as cuda_ipc_mem.c lays it out (see cip_rkey_pack). */
static size_t make_key(uint8_t *k, int kind, uint32_t nseg, uint64_t base, uint64_t size)
{
    memset(k, 0, 56 + 64 * 24);
    put_u32(k, 0x4b504943u);
    put_u16(k + 4, 1);
    put_u16(k + 6, (uint16_t)kind);
    put_u32(k + 12, nseg);
    put_u64(k + 16, 7);
    memcpy(k + 24, "0000:1b:00.0", 12);
    put_u64(k + 40, base);
    put_u64(k + 48, size);
    if (kind == 1)
        return 56 + 64;
    for (uint32_t i = 0; i < nseg; i++) {
        put_u64(k + 56 + i * 24, base + i * (size / nseg));
        put_u64(k + 56 + i * 24 + 8, size / nseg);
        put_u32(k + 56 + i * 24 + 16, 10 + i);
    }
    return 56 + (size_t)nseg * 24;
}

static int test_rkey_corrupt(void)
{
    const nixl_backend_ops_t *ops = nixl_backend_cuda_ipc_ops();
    nixl_host_services_t h = test_host("cip_rkey");
    void *be, *peer, *rmd;
    CHECK_ST(ops->create(&h, NULL, 0, &be), NIXL_OK);
    uint8_t conn[256];
    size_t clen = sizeof(conn);
    CHECK_ST(ops->conn_pack(be, conn, &clen), NIXL_OK);
    nixl_be_peer_t self = test_peer_here("self", getpid());
    CHECK_ST(ops->peer_open(be, &self, conn, clen, &peer), NIXL_OK);
    nixl_be_region_t reg = {.mem_type = NIXL_MEM_VRAM, .addr = 0x7f0000100000ull, .len = 1 << 20};
    uint8_t k[56 + 64 * 24];

    size_t n = make_key(k, 1, 0, 0x7f0000000000ull, 4 << 20);
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_OK);
    ops->rkey_unload(be, rmd);
    for (size_t cut = 0; cut < n; cut++)
        CHECK(ops->rkey_load(be, peer, &reg, k, cut, &rmd) != NIXL_OK);
    make_key(k, 1, 0, 0x7f0000180000ull, 4 << 20); /* region starts before the allocation */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_BAD_METADATA);
    make_key(k, 1, 0, 0x7f0000000000ull, 1 << 20); /* region ends past it */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_BAD_METADATA);
    make_key(k, 1, 0, 0x7f0000000000ull, 4 << 20);
    memcpy(k + 24, "0000:1b:00.0/../", 16); /* bus id not of bus-id characters */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_BAD_METADATA);
    make_key(k, 1, 0, 0x7f0000000000ull, 4 << 20);
    put_u16(k + 6, 9); /* unknown kind */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_BAD_METADATA);
    make_key(k, 1, 0, 0x7f0000000000ull, 4 << 20);
    put_u16(k + 4, 2);
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_MD_VERSION);

    n = make_key(k, 2, 4, 0x7f0000000000ull, 4 << 20);
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_OK);
    ops->rkey_unload(be, rmd);
    put_u64(k + 56 + 24, 0x7f0000000000ull + 4096); /* mapping 1 does not follow mapping 0 */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_BAD_METADATA);
    n = make_key(k, 2, 4, 0x7f0000000000ull, 4 << 20);
    put_u32(k + 56 + 16, 0x80000000u); /* fd out of range */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_BAD_METADATA);
    n = make_key(k, 2, 4, 0x7f0000000000ull, 4 << 20);
    put_u32(k + 12, 65); /* more mappings than any key holds */
    CHECK(ops->rkey_load(be, peer, &reg, k, n, &rmd) == NIXL_ERR_BAD_METADATA);
    n = make_key(k, 2, 0, 0x7f0000000000ull, 4 << 20); /* VMM without mappings */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_ERR_BAD_METADATA);
    n = make_key(k, 0, 0, 0x7f0000000000ull, 4 << 20); /* "no handle" is a valid key */
    CHECK_ST(ops->rkey_load(be, peer, &reg, k, n, &rmd), NIXL_OK);
    ops->rkey_unload(be, rmd);
    nixl_be_region_t dram = reg;
    dram.mem_type = NIXL_MEM_DRAM;
    CHECK_ST(ops->rkey_load(be, peer, &dram, k, n, &rmd), NIXL_ERR_BAD_METADATA);

    ops->peer_unload(be, peer);
    ops->destroy(be);
    printf("remote keys: malformed ones refused\n");
    return 0;
}

/* ---- the staging server ---- */

enum { STG_HELLO = 1, STG_WRITE = 2, STG_READ = 3, STG_REPLY = 4 };
#define STG_HDR 24

static void stg_put_hdr(uint8_t *p, uint32_t magic, uint16_t type, uint64_t seq, uint32_t count)
{
    put_u32(p, magic);
    put_u16(p + 4, 1);
    put_u16(p + 6, type);
    put_u64(p + 8, seq);
    put_u32(p + 16, count);
    put_u32(p + 20, 0);
}

/* A connection to the server whose notification socket is named in conn. */
static int stg_dial(const uint8_t *conn, size_t len)
{
    size_t name_len = (size_t)conn[6] | ((size_t)conn[7] << 8);
    CHECK(name_len > 0 && 8 + name_len == len); /* samehost conn info version 2: magic, version, length, name */
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path + 1, conn + 8, name_len);
    memcpy(a.sun_path + 1 + name_len, ".stg", 4);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 5 + name_len)) ==
          0);
    return fd;
}

/* 1 when the server closed the connection within 5 s. */
static int stg_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 5000) == 1);
    uint8_t b[64];
    return recv(fd, b, sizeof(b), 0) == 0;
}

/* The status of the reply to seq. */
static int32_t stg_reply(int fd, uint64_t seq)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 5000) == 1);
    uint8_t b[STG_HDR];
    CHECK(recv(fd, b, sizeof(b), 0) == STG_HDR);
    CHECK(b[6] == STG_REPLY);
    uint64_t got = 0;
    for (int i = 7; i >= 0; i--)
        got = (got << 8) | b[8 + i];
    CHECK(got == seq);
    return (int32_t)((uint32_t)b[20] | ((uint32_t)b[21] << 8) | ((uint32_t)b[22] << 16) | ((uint32_t)b[23] << 24));
}

static void stg_hello(int fd, size_t size, int with_fd)
{
    uint8_t b[STG_HDR + 8];
    stg_put_hdr(b, 0x47545343u, STG_HELLO, 0, 0);
    put_u64(b + STG_HDR, size);
    int mfd = memfd_create("test-stage", MFD_CLOEXEC);
    CHECK(mfd >= 0 && ftruncate(mfd, (off_t)size) == 0);
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof(ctl));
    struct iovec io = {b, sizeof(b)};
    struct msghdr mh = {.msg_iov = &io, .msg_iovlen = 1};
    if (with_fd) {
        mh.msg_control = ctl;
        mh.msg_controllen = sizeof(ctl);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
    }
    CHECK(sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(b));
    close(mfd);
}

static void stg_request(int fd, uint16_t type, uint64_t seq, uint64_t addr, uint64_t len, uint64_t off)
{
    uint8_t b[STG_HDR + 24];
    stg_put_hdr(b, 0x47545343u, type, seq, 1);
    put_u64(b + STG_HDR, addr);
    put_u64(b + STG_HDR + 8, len);
    put_u64(b + STG_HDR + 16, off);
    CHECK(send(fd, b, sizeof(b), MSG_NOSIGNAL) == (ssize_t)sizeof(b));
}

static int test_stage_server(void)
{
    const nixl_backend_ops_t *ops = nixl_backend_cuda_ipc_ops();
    nixl_host_services_t h = test_host("cip_stage");
    void *be;
    CHECK_ST(ops->create(&h, NULL, 0, &be), NIXL_OK);
    uint8_t conn[256];
    size_t len = sizeof(conn);
    CHECK_ST(ops->conn_pack(be, conn, &len), NIXL_OK);
    uint8_t junk[STG_HDR];
    int closed = 0;

    int fd = stg_dial(conn, len); /* bad magic */
    stg_put_hdr(junk, 0x12345678u, STG_HELLO, 0, 0);
    CHECK(send(fd, junk, sizeof(junk), 0) == (ssize_t)sizeof(junk));
    closed += stg_closed(fd);
    close(fd);
    fd = stg_dial(conn, len); /* a request before the hello */
    stg_request(fd, STG_WRITE, 1, 0x1000, 16, 0);
    closed += stg_closed(fd);
    close(fd);
    fd = stg_dial(conn, len); /* a hello without its memfd */
    stg_hello(fd, 4096, 0);
    closed += stg_closed(fd);
    close(fd);
    fd = stg_dial(conn, len); /* a buffer larger than any initiator makes */
    stg_hello(fd, 1ull << 40, 1);
    closed += stg_closed(fd);
    close(fd);
    fd = stg_dial(conn, len); /* too short for its pieces */
    stg_hello(fd, 4096, 1);
    CHECK(stg_reply(fd, 0) == NIXL_OK);
    stg_put_hdr(junk, 0x47545343u, STG_WRITE, 1, 2);
    CHECK(send(fd, junk, sizeof(junk), 0) == (ssize_t)sizeof(junk));
    closed += stg_closed(fd);
    close(fd);
    CHECK(closed == 5);

    /* A good connection: bad pieces get a status, the connection lives on. */
    fd = stg_dial(conn, len);
    stg_hello(fd, 4096, 1);
    CHECK(stg_reply(fd, 0) == NIXL_OK);
    stg_request(fd, STG_WRITE, 1, 0x1000, 16, 4090); /* past the buffer's end */
    CHECK(stg_reply(fd, 1) == NIXL_ERR_INVALID_PARAM);
    stg_request(fd, STG_READ, 2, 0x1000, 0, 0); /* empty piece */
    CHECK(stg_reply(fd, 2) == NIXL_ERR_INVALID_PARAM);
    stg_request(fd, STG_WRITE, 3, (uint64_t)(uintptr_t)conn, 16, 0); /* not registered VRAM */
    CHECK(stg_reply(fd, 3) == NIXL_ERR_NOT_REGISTERED);
    stg_request(fd, STG_READ, 4, ~0ull - 8, 16, 0); /* wraps around */
    CHECK(stg_reply(fd, 4) == NIXL_ERR_NOT_REGISTERED);
    close(fd);
    ops->destroy(be);
    printf("staging server: 5 malformed connections closed, 4 bad pieces refused by code\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s loads|no_driver|notif|conn_corrupt|rkey_corrupt|stage_server\n", argv[0]);
        return 2;
    }
    const char *t = argv[1];
    if (!strcmp(t, "loads"))
        return test_loads();
    if (!strcmp(t, "no_driver"))
        return test_no_driver();
    if (!strcmp(t, "notif"))
        return test_notif();
    if (!strcmp(t, "conn_corrupt"))
        return test_conn_corrupt();
    if (!strcmp(t, "rkey_corrupt"))
        return test_rkey_corrupt();
    if (!strcmp(t, "stage_server"))
        return test_stage_server();
    fprintf(stderr, "unknown test %s\n", t);
    return 2;
}
