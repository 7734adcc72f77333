/*
 * test_ucx_lazy.c - UCX is loaded by the ucx backend's first create, not
 * by opening its module (src/backends/ucx/ucx_ucp.c).  One case per
 * process, since UCX is loaded once per process:
 *
 *   lazy     listing the backends opens the module and maps nothing of
 *            UCX (no libucp, libucs, libuct or libucm in /proc/self/maps);
 *            the first create maps libucp and libucm, and the instance
 *            works (nixl_backend_describe names the UCX)
 *   missing  NIXL_UCX_LIB names no library: create is NOT_SUPPORTED with
 *            one ERROR line naming it, a second create too (no new line),
 *            and the shm backend of the same agent still works
 *   nosym    NIXL_UCX_LIB is a library without UCX's functions (libm): the
 *            line names the first missing function
 *
 * Exit 77 (skip) with the reason when the ucx module is not among the
 * backends, or UCX cannot create an instance here (lazy).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/test_check.h"
#include "../../common/test_capture.h"
#include "nixl.h"

/* 1 when a line of /proc/self/maps names lib (say "libucp.so"). */
static int mapped(const char *lib)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[1024];
    int hit = 0;
    while (!hit && fgets(line, sizeof(line), f))
        hit = strstr(line, lib) != NULL;
    fclose(f);
    return hit;
}

static int any_ucx_mapped(void)
{
    return mapped("/libucp.so") || mapped("/libucs.so") || mapped("/libuct.so") || mapped("/libucm.so");
}

static int have_ucx_module(void)
{
    const nixl_backend_info_t *infos;
    size_t n = 0;
    CHECK_ST(nixl_backends_available(&infos, &n), NIXL_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, "ucx") == 0)
            return 1;
    return 0;
}

static nixl_agent_t *agent(void)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "lazy"};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&cfg, &a), NIXL_OK);
    return a;
}

static nixl_status_t create_ucx(nixl_agent_t *a)
{
    nixl_backend_t *b = NULL;
    return nixl_backend_create(a, "ucx", NULL, 0, &b);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static int case_lazy(void)
{
    CHECK(any_ucx_mapped() == 0); /* not even before: the test does not link UCX */
    if (!have_ucx_module()) {
        printf("SKIP: no ucx backend among the modules (NIXL_PLUGIN_DIR)\n");
        return 77;
    }
    CHECK(mapped("libnixl_backend_ucx.so") == 1);
    CHECK(any_ucx_mapped() == 0);
    nixl_agent_t *a = agent();
    CHECK(any_ucx_mapped() == 0);
    nixl_backend_t *b = NULL;
    nixl_status_t st = nixl_backend_create(a, "ucx", NULL, 0, &b);
    if (st == NIXL_ERR_NOT_SUPPORTED) {
        printf("SKIP: UCX cannot create an instance here (the log line above says why)\n");
        nixl_agent_destroy(a);
        return 77;
    }
    CHECK_ST(st, NIXL_OK);
    CHECK(mapped("/libucp.so") == 1);
    CHECK(mapped("/libucm.so") == 1);
    char text[4096];
    size_t len = sizeof(text);
    CHECK_ST(nixl_backend_describe(b, text, &len), NIXL_OK);
    CHECK(strncmp(text, "UCX ", 4) == 0);
    printf("lazy: nothing of UCX before the first create; then: %.*s", (int)strcspn(text, "\n") + 1, text);
    nixl_agent_destroy(a);
    return failures;
}

static int case_unloadable(const char *lib, const char *want)
{
    if (!have_ucx_module()) {
        printf("SKIP: no ucx backend among the modules (NIXL_PLUGIN_DIR)\n");
        return 77;
    }
    setenv("NIXL_UCX_LIB", lib, 1);
    nixl_agent_t *a = agent();
    capture_begin();
    nixl_status_t st = create_ucx(a);
    char *first = strdup(capture_end());
    CHECK_ST(st, NIXL_ERR_NOT_SUPPORTED);
    CHECK(first && count(first, "ucx backend unavailable") == 1);
    CHECK(first && strstr(first, lib) != NULL);
    CHECK(first && strstr(first, want) != NULL);
    capture_begin();
    st = create_ucx(a);
    char *second = strdup(capture_end());
    CHECK_ST(st, NIXL_ERR_NOT_SUPPORTED);
    CHECK(second && count(second, "ucx backend unavailable") == 0); /* said once */
    CHECK(any_ucx_mapped() == 0);
    /* The agent is untouched: shm moves bytes. */
    nixl_backend_t *shm = NULL;
    CHECK_ST(nixl_backend_create(a, "shm", NULL, 0, &shm), NIXL_OK);
    free(first);
    free(second);
    nixl_agent_destroy(a);
    return failures;
}

int main(int argc, char **argv)
{
    int rc = -1;
    if (argc == 2 && strcmp(argv[1], "lazy") == 0)
        rc = case_lazy();
    else if (argc == 2 && strcmp(argv[1], "missing") == 0)
        rc = case_unloadable("/nonexistent/libucp.so.0", "cannot load");
    else if (argc == 2 && strcmp(argv[1], "nosym") == 0)
        rc = case_unloadable("libm.so.6", "has no ucp_get_version");
    else {
        fprintf(stderr, "usage: %s lazy|missing|nosym\n", argv[0]);
        return 2;
    }
    if (rc == 77)
        return 77;
    return failures ? 1 : 0;
}
