/*
 * test_lf_core.c - the libfabric backend seen through the core, two agents
 * in this process (so on one host): which backend the core picks for a
 * same-host peer under each policy (the core's NIXL_INTRANODE_NETWORK,
 * libfabric's intranode), and VRAM without a driver.
 *
 *   test_lf_core CASE     intranode_default | intranode_off |
 *                         intranode_provider | vram_no_driver | connect
 *
 * libfabric runs tcp on lo.  NIXL_LIBFABRIC_INTRANODE and
 * NIXL_INTRANODE_NETWORK are removed from the environment first: each case
 * says its policy or relies on the default.  Exits 77 when tcp on lo or shm is not available.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nixl.h"

#include "../../common/test_check_exit.h"

#define LEN (1u << 20)

typedef struct side {
    nixl_agent_t *a;
    nixl_backend_t *shm, *lf;
    uint8_t *buf;
} side_t;

/* intranode: NULL for the default. */
static void side_make(side_t *s, const char *name, int with_shm, const char *intranode, uint8_t seed)
{
    memset(s, 0, sizeof(*s));
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    CHECK_ST(nixl_agent_create(&cfg, &s->a), NIXL_OK);
    if (with_shm) {
        nixl_status_t st = nixl_backend_create(s->a, "shm", NULL, 0, &s->shm);
        if (st != NIXL_OK) {
            printf("SKIP: the shm backend cannot be created here (%s)\n", nixl_status_name(st));
            exit(77);
        }
    }
    nixl_param_t p[3] = {{"provider", "tcp"}, {"iface", "lo"}, {"intranode", intranode}};
    nixl_status_t st = nixl_backend_create(s->a, "libfabric", p, intranode ? 3 : 2, &s->lf);
    if (st == NIXL_ERR_UNKNOWN_BACKEND || st == NIXL_ERR_NOT_SUPPORTED) {
        printf("SKIP: libfabric with tcp on lo is not available here (%s)\n", nixl_status_name(st));
        exit(77);
    }
    CHECK_ST(st, NIXL_OK);
    s->buf = malloc(LEN);
    CHECK(s->buf);
    for (size_t i = 0; i < LEN; i++)
        s->buf[i] = (uint8_t)(seed + i * 7 + (i >> 10));
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)s->buf, .len = LEN};
    nixl_dlist_t dl = {NIXL_MEM_DRAM, 1, &d};
    CHECK_ST(nixl_mem_register(s->a, &dl, NULL), NIXL_OK);
}

static void side_drop(side_t *s)
{
    nixl_agent_destroy(s->a);
    free(s->buf);
}

/* Each side loads the other's metadata. */
static void sides_link(side_t *x, side_t *y)
{
    void *blob;
    size_t len;
    CHECK_ST(nixl_md_get_local(y->a, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(x->a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    CHECK_ST(nixl_md_get_local(x->a, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(y->a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
}

static void count_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    (void)sender;
    (void)msg;
    (void)len;
    (*(int *)arg)++;
}

/* op of [4096, +64K) between a and b (b named "b"); lf_only restricts the
 * request to a's libfabric.  Returns the request's status at make, or its
 * final status, with the path it took in path (when it ran). */
static nixl_status_t xfer(side_t *a, side_t *b, nixl_op_t op, int lf_only, char *path, size_t path_cap)
{
    const size_t off = 4096, n = 65536;
    nixl_desc_t ld = {.addr = (uint64_t)(uintptr_t)a->buf + off, .len = n};
    nixl_desc_t rd = {.addr = (uint64_t)(uintptr_t)b->buf + off, .len = n};
    nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &ld}, rl = {NIXL_MEM_DRAM, 1, &rd};
    nixl_backend_t *only[1] = {a->lf};
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = "done", .notif_len = 4};
    if (lf_only) {
        opt.field_mask |= NIXL_OPT_BACKENDS;
        opt.backends = only;
        opt.num_backends = 1;
    }
    nixl_xfer_t *x = NULL;
    nixl_status_t st = nixl_xfer_create(a->a, op, &ll, &rl, "b", &opt, &x);
    if (st != NIXL_OK)
        return st;
    int notifs = 0;
    st = nixl_xfer_post(x);
    struct timespec ts = {0, 20000};
    for (int i = 0; i < 500000 && st == NIXL_IN_PROG; i++) {
        nanosleep(&ts, NULL);
        st = nixl_xfer_status(x);
        nixl_notifs_get(b->a, count_notif, &notifs, NULL);
    }
    CHECK_ST(st, NIXL_OK);
    for (int i = 0; i < 100000 && notifs == 0; i++) {
        nanosleep(&ts, NULL);
        nixl_notifs_get(b->a, count_notif, &notifs, NULL);
    }
    CHECK(notifs == 1);
    nixl_xfer_info_t info;
    CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
    snprintf(path, path_cap, "%s", info.path);
    nixl_xfer_release(x);
    /* WRITE copied a's bytes to b, READ b's to a: equal either way. */
    CHECK(memcmp(a->buf + off, b->buf + off, n) == 0);
    /* Fresh bytes for the next request. */
    for (size_t i = 0; i < n; i++)
        a->buf[off + i] ^= 0x3c;
    printf("%s: %s\n", op == NIXL_OP_WRITE ? "write" : "read", path);
    return NIXL_OK;
}

/* shm and libfabric in both agents, intranode left alone (provider): shm
 * moves the bytes; libfabric carries them only when the request names it. */
static void case_intranode_default(void)
{
    side_t a, b;
    side_make(&a, "a", 1, NULL, 1);
    side_make(&b, "b", 1, NULL, 2);
    sides_link(&a, &b);
    char path[64];
    CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 0, path, sizeof(path)), NIXL_OK);
    CHECK(strncmp(path, "shm.", 4) == 0);
    CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 1, path, sizeof(path)), NIXL_OK);
    CHECK(strcmp(path, "libfabric.tcp.write") == 0);
    side_drop(&a);
    side_drop(&b);
}

/* NIXL_INTRANODE_NETWORK=off: the core never gives a same-host peer to
 * libfabric.  With only libfabric there is no path; beside shm, shm moves
 * the bytes and a request naming libfabric finds no path either. */
static void case_intranode_off(void)
{
    setenv("NIXL_INTRANODE_NETWORK", "off", 1);
    char path[64];
    {
        side_t a, b;
        side_make(&a, "a", 0, NULL, 1);
        side_make(&b, "b", 0, NULL, 2);
        sides_link(&a, &b);
        CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 0, path, sizeof(path)), NIXL_ERR_NO_PATH);
        CHECK_ST(xfer(&a, &b, NIXL_OP_READ, 0, path, sizeof(path)), NIXL_ERR_NO_PATH);
        CHECK_ST(nixl_notif_send(a.a, "b", "x", 1, NULL), NIXL_ERR_NO_PATH);
        side_drop(&a);
        side_drop(&b);
    }
    side_t a, b;
    side_make(&a, "a", 1, NULL, 3);
    side_make(&b, "b", 1, NULL, 4);
    sides_link(&a, &b);
    CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 0, path, sizeof(path)), NIXL_OK);
    CHECK(strncmp(path, "shm.", 4) == 0);
    CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 1, path, sizeof(path)), NIXL_ERR_NO_PATH);
    side_drop(&a);
    side_drop(&b);
}

/* intranode=provider: libfabric alone carries the bytes (tcp over lo);
 * beside shm it is taken only when the request names it. */
static void case_intranode_provider(void)
{
    char path[64];
    {
        side_t a, b;
        side_make(&a, "a", 0, "provider", 1);
        side_make(&b, "b", 0, "provider", 2);
        sides_link(&a, &b);
        CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 0, path, sizeof(path)), NIXL_OK);
        CHECK(strcmp(path, "libfabric.tcp.write") == 0);
        CHECK_ST(xfer(&a, &b, NIXL_OP_READ, 0, path, sizeof(path)), NIXL_OK);
        CHECK(strcmp(path, "libfabric.tcp.read") == 0);
        side_drop(&a);
        side_drop(&b);
    }
    side_t a, b;
    side_make(&a, "a", 1, "provider", 3);
    side_make(&b, "b", 1, "provider", 4);
    sides_link(&a, &b);
    CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 0, path, sizeof(path)), NIXL_OK);
    CHECK(strncmp(path, "shm.", 4) == 0);
    CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 1, path, sizeof(path)), NIXL_OK);
    CHECK(strcmp(path, "libfabric.tcp.write") == 0);
    side_drop(&a);
    side_drop(&b);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* nixl_md_connect (NIXL's make_connection): the handshake ahead of the
 * first request.  Errors by code: an unknown peer, a request naming no
 * backend that reaches it.  The first WRITE's time is printed with and
 * without it (a measurement, not a check: timing is the benchmarks'). */
static void case_connect(void)
{
    char path[64];
    double first[2];
    for (int warm = 0; warm < 2; warm++) {
        side_t a, b;
        side_make(&a, "a", 0, NULL, (uint8_t)(1 + warm));
        side_make(&b, "b", 0, NULL, (uint8_t)(3 + warm));
        sides_link(&a, &b);
        if (warm) {
            double t0 = now_ms();
            CHECK_ST(nixl_md_connect(a.a, "b", NULL), NIXL_OK);
            printf("connect: %.3f ms\n", now_ms() - t0);
            CHECK_ST(nixl_md_connect(a.a, "b", NULL), NIXL_OK); /* again: already up */
            CHECK_ST(nixl_md_connect(a.a, "nobody", NULL), NIXL_ERR_UNKNOWN_PEER);
            nixl_backend_t *none[1] = {b.lf}; /* b's instance, not one of a's */
            nixl_opt_args_t opt = {.field_mask = NIXL_OPT_BACKENDS, .backends = none, .num_backends = 1};
            CHECK_ST(nixl_md_connect(a.a, "b", &opt), NIXL_ERR_NO_PATH);
            /* Loopback: libfabric does not reach its own instance, and it is
             * all this agent has. */
            CHECK_ST(nixl_md_connect(a.a, "a", NULL), NIXL_ERR_NO_PATH);
        }
        double t0 = now_ms();
        CHECK_ST(xfer(&a, &b, NIXL_OP_WRITE, 0, path, sizeof(path)), NIXL_OK);
        first[warm] = now_ms() - t0;
        CHECK(strcmp(path, "libfabric.tcp.write") == 0);
        side_drop(&a);
        side_drop(&b);
    }
    printf("first WRITE of 64 KiB: %.3f ms without nixl_md_connect, %.3f ms after it\n", first[0], first[1]);
}

/* Host memory listed as VRAM: the core classifies it before any backend,
 * so libfabric taking VRAM changes nothing there (NO_CUDA without a
 * driver; with one, not device memory). */
static void case_vram_no_driver(void)
{
    side_t a;
    side_make(&a, "a", 0, NULL, 1);
    const nixl_backend_info_t *infos;
    size_t n;
    CHECK_ST(nixl_backends_available(&infos, &n), NIXL_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, "libfabric") == 0)
            CHECK(infos[i].mem_types & NIXL_MEM_BIT(NIXL_MEM_VRAM));
    static uint8_t page[8192];
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)page, .len = sizeof(page), .dev_id = 0};
    nixl_dlist_t dl = {NIXL_MEM_VRAM, 1, &d};
    nixl_status_t st = nixl_mem_register(a.a, &dl, NULL);
    printf("host memory registered as VRAM: %s\n", nixl_status_name(st));
    CHECK(st == NIXL_ERR_NO_CUDA || st == NIXL_ERR_MEM_TYPE);
    side_drop(&a);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"intranode_default", case_intranode_default},
    {"intranode_off", case_intranode_off},
    {"intranode_provider", case_intranode_provider},
    {"vram_no_driver", case_vram_no_driver},
    {"connect", case_connect},
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    unsetenv("NIXL_LIBFABRIC_INTRANODE");
    unsetenv("NIXL_INTRANODE_NETWORK");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(cases[i].name, argv[1]) == 0) {
            cases[i].fn();
            printf("ok %s\n", argv[1]);
            return 0;
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
