/*
 * test_ucx_core.c - the ucx backend through the core: two agents of one
 * process, each with ucx alone, over UCX_TLS=tcp.
 *
 *   fallback  transports=rc_mlx5,dc_mlx5 on the initiator: under
 *             NIXL_ALLOW_FALLBACK=0 a request is refused (NO_PATH, nothing
 *             moved); allowed, it moves the bytes on ucx.tcp and
 *             nixl_fallback_stats names that path with its cause
 *
 * Exit 77 (skip) with the reason without UCX_TLS=tcp or when the backend
 * cannot be created.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/test_check.h"
#include "nixl.h"

static nixl_agent_t *agent(const char *name, const nixl_param_t *p, size_t np)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&cfg, &a), NIXL_OK);
    nixl_backend_t *b = NULL;
    nixl_status_t st = nixl_backend_create(a, "ucx", p, np, &b);
    if (st == NIXL_ERR_NOT_SUPPORTED || st == NIXL_ERR_UNKNOWN_BACKEND) {
        printf("SKIP: no ucx backend here (%s; the log line above says why)\n", nixl_status_name(st));
        exit(77);
    }
    CHECK_ST(st, NIXL_OK);
    return a;
}

static void exchange(nixl_agent_t *from, nixl_agent_t *to)
{
    void *blob = NULL;
    size_t len = 0;
    CHECK_ST(nixl_md_get_local(from, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(to, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
}

static int case_fallback(void)
{
    const char *tls = getenv("UCX_TLS");
    if (!tls || strcmp(tls, "tcp") != 0) {
        printf("SKIP: needs UCX_TLS=tcp (a transport the parameter does not list)\n");
        return 77;
    }
    nixl_param_t p = {"transports", "rc_mlx5,dc_mlx5"};
    nixl_agent_t *a = agent("init", &p, 1), *b = agent("target", NULL, 0);
    enum { N = 65536 };
    uint8_t *src = malloc(N), *dst = malloc(N);
    CHECK(src && dst);
    for (size_t i = 0; i < N; i++) {
        src[i] = (uint8_t)(i * 31 + 3);
        dst[i] = 0;
    }
    nixl_desc_t ds = {.addr = (uintptr_t)src, .len = N}, dd = {.addr = (uintptr_t)dst, .len = N};
    nixl_dlist_t ls = {NIXL_MEM_DRAM, 1, &ds}, ld = {NIXL_MEM_DRAM, 1, &dd};
    CHECK_ST(nixl_mem_register(a, &ls, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(b, &ld, NULL), NIXL_OK);
    exchange(b, a);
    exchange(a, b);

    nixl_xfer_t *x = NULL;
    setenv("NIXL_ALLOW_FALLBACK", "0", 1);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &ls, &ld, "target", NULL, &x), NIXL_ERR_NO_PATH);
    CHECK(x == NULL);
    for (size_t i = 0; i < N; i++)
        if (dst[i] != 0) {
            CHECK(!"a refused request moved bytes");
            break;
        }

    unsetenv("NIXL_ALLOW_FALLBACK");
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &ls, &ld, "target", NULL, &x), NIXL_OK);
    if (!x)
        return ++failures;
    nixl_status_t st = nixl_xfer_post(x);
    uint64_t t0 = test_now_ms();
    while (st == NIXL_IN_PROG && test_now_ms() - t0 < 10000)
        st = nixl_xfer_status(x);
    CHECK_ST(st, NIXL_OK);
    CHECK(memcmp(src, dst, N) == 0);
    nixl_xfer_info_t info;
    CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
    CHECK(strcmp(info.path, "ucx.tcp") == 0);
    nixl_fallback_stat_t fb[16];
    size_t nf = 0;
    CHECK_ST(nixl_fallback_stats(a, fb, 16, &nf), NIXL_OK);
    int found = 0;
    for (size_t i = 0; i < nf && i < 16; i++)
        if (strcmp(fb[i].path, "ucx.tcp") == 0 && fb[i].count == 1 && strstr(fb[i].cause, "transports=rc_mlx5,dc_mlx5")) {
            found = 1;
            printf("fallback row: %s, %llu, cause \"%s\"\n", fb[i].path, (unsigned long long)fb[i].count,
                   fb[i].cause);
        }
    CHECK(found);
    nixl_xfer_release(x);
    nixl_agent_destroy(a);
    nixl_agent_destroy(b);
    free(src);
    free(dst);
    return failures;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "fallback") != 0) {
        fprintf(stderr, "usage: %s fallback\n", argv[0]);
        return 2;
    }
    int rc = case_fallback();
    if (rc == 77)
        return 77;
    return failures ? 1 : 0;
}
