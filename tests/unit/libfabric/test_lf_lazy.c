/*
 * test_lf_lazy.c - libnixl loads libfabric at the first libfabric create,
 * never before (src/backends/libfabric/lf_fi.c).  This program links only
 * libnixl; each case is its own process, as loading is once per process.
 *
 *   test_lf_lazy lazy      libfabric is not in the process after libnixl
 *                          loaded, after listing the backends, after an agent
 *                          with shm moved bytes; it is once a libfabric
 *                          backend is created (tcp on lo)
 *   test_lf_lazy missing   NIXL_LIBFABRIC_LIB names a library that is not
 *                          there: create fails NIXL_ERR_NOT_SUPPORTED, the
 *                          backend's ERROR line names the library and
 *                          dlerror()'s text (once: a second create does not
 *                          repeat it), and shm still moves bytes
 *   test_lf_lazy version LIB VERSIONED
 *                          LIB (fake_fabric.c) has the five functions at
 *                          FABRIC_99.0 only: create fails NOT_SUPPORTED
 *                          naming the version it wanted, nothing of LIB is
 *                          called (they abort); VERSIONED 0 (meson found no
 *                          versions: the backend uses dlsym) skips
 *
 * "In the process" is read twice: a mapping of a file named libfabric.so*
 * in /proc/self/maps, and dlopen(RTLD_NOLOAD) of libfabric.so.1.  Exits 77
 * when libnixl was built without libfabric, or libfabric.so.1 cannot be
 * loaded here.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

#include "../../common/test_check_exit.h"

#define BUF_LEN (256u << 10)

/* A mapped file whose name contains sub (/proc/self/maps). */
static int mapped(const char *sub)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        const char *path = strchr(line, '/');
        const char *base = path ? strrchr(path, '/') + 1 : NULL;
        found = base && strstr(base, sub) != NULL;
    }
    fclose(f);
    return found;
}

/* libfabric in this process, by both readings; they must agree. */
static int libfabric_loaded(void)
{
    int in_maps = mapped("libfabric.so");
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h)
        dlclose(h);
    if (in_maps != (h != NULL)) {
        fprintf(stderr, "libfabric mapped: %d, but dlopen(RTLD_NOLOAD): %s\n", in_maps, h ? "loaded" : "not loaded");
        exit(1);
    }
    return in_maps;
}

static void expect_not_loaded(const char *when)
{
    if (libfabric_loaded()) {
        fprintf(stderr, "FAIL: libfabric.so.1 is loaded %s\n", when);
        exit(1);
    }
    printf("not loaded %s\n", when);
}

static void skip_without_libfabric(void)
{
    const nixl_backend_info_t *infos;
    size_t n;
    CHECK_ST(nixl_backends_available(&infos, &n), NIXL_OK);
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, "libfabric") == 0)
            return;
    printf("SKIP: libnixl was built without the libfabric backend\n");
    exit(77);
}

static nixl_agent_t *agent_make(const char *name)
{
    nixl_agent_t *a = NULL;
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    CHECK_ST(nixl_agent_create(&cfg, &a), NIXL_OK);
    return a;
}

/* An agent with shm: a loopback WRITE of the buffer's first half onto its
 * second half, bytes checked. */
static void shm_moves_bytes(nixl_agent_t *a, const char *name)
{
    nixl_backend_t *shm = NULL;
    nixl_status_t st = nixl_backend_create(a, "shm", NULL, 0, &shm);
    if (st != NIXL_OK) {
        printf("SKIP: the shm backend cannot be created here (%s)\n", nixl_status_name(st));
        exit(77);
    }
    uint8_t *buf = malloc(BUF_LEN);
    CHECK(buf);
    for (size_t i = 0; i < BUF_LEN; i++)
        buf[i] = (uint8_t)(i * 13 + (i >> 9));
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)buf, .len = BUF_LEN};
    nixl_dlist_t dl = {NIXL_MEM_DRAM, 1, &d};
    CHECK_ST(nixl_mem_register(a, &dl, NULL), NIXL_OK);
    const size_t half = BUF_LEN / 2;
    nixl_desc_t ld = {.addr = (uint64_t)(uintptr_t)buf, .len = half};
    nixl_desc_t rd = {.addr = (uint64_t)(uintptr_t)buf + half, .len = half};
    nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &ld}, rl = {NIXL_MEM_DRAM, 1, &rd};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &ll, &rl, name, NULL, &x), NIXL_OK);
    st = nixl_xfer_post(x);
    struct timespec ts = {0, 20000};
    for (int i = 0; i < 500000 && st == NIXL_IN_PROG; i++) {
        nanosleep(&ts, NULL);
        st = nixl_xfer_status(x);
    }
    CHECK_ST(st, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
    CHECK(strncmp(info.path, "shm.", 4) == 0);
    nixl_xfer_release(x);
    CHECK(memcmp(buf, buf + half, half) == 0);
    printf("shm moved %zu bytes (%s)\n", half, info.path);
    CHECK_ST(nixl_mem_deregister(a, &dl, NULL), NIXL_OK);
    free(buf);
}

static void case_lazy(void)
{
    /* libnixl itself is mapped: the reading sees this process's libraries. */
    CHECK(mapped("libnixl.so"));
    expect_not_loaded("after libnixl loaded");
    skip_without_libfabric();
    expect_not_loaded("after nixl_backends_available");

    nixl_agent_t *a = agent_make("lazy");
    expect_not_loaded("after nixl_agent_create");
    shm_moves_bytes(a, "lazy");
    expect_not_loaded("after an shm transfer");

    nixl_param_t p[2] = {{"provider", "tcp"}, {"iface", "lo"}};
    nixl_backend_t *lf = NULL;
    nixl_status_t st = nixl_backend_create(a, "libfabric", p, 2, &lf);
    int loaded = libfabric_loaded();
    if (st == NIXL_ERR_NOT_SUPPORTED && !loaded) {
        printf("SKIP: libfabric.so.1 cannot be loaded here (the create's ERROR line says why)\n");
        exit(77);
    }
    if (!loaded) {
        fprintf(stderr, "FAIL: libfabric create returned %s, and libfabric.so.1 is not loaded\n",
                nixl_status_name(st));
        exit(1);
    }
    /* Loaded either way; a host without tcp on lo still fails the create. */
    printf("loaded after nixl_backend_create(libfabric): %s\n", nixl_status_name(st));
    if (st != NIXL_OK)
        CHECK_ST(st, NIXL_ERR_NOT_SUPPORTED);
    nixl_agent_destroy(a);
    /* Never unloaded: providers keep global state. */
    CHECK(libfabric_loaded());
}

/* Everything written to stderr while fn runs, into out. */
static void capture_stderr(void (*fn)(void), char *out, size_t cap)
{
    FILE *tmp = tmpfile();
    CHECK(tmp);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    CHECK(saved >= 0);
    CHECK(dup2(fileno(tmp), STDERR_FILENO) >= 0);
    fn();
    fflush(stderr);
    CHECK(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = 0;
    fclose(tmp);
    fputs(out, stderr); /* still in the test's log */
}

#define MISSING_LIB "/nonexistent/libfabric.so.1"

static void create_fails(const char *name)
{
    nixl_agent_t *a = agent_make(name);
    nixl_backend_t *lf = NULL;
    CHECK_ST(nixl_backend_create(a, "libfabric", NULL, 0, &lf), NIXL_ERR_NOT_SUPPORTED);
    CHECK(lf == NULL);
    nixl_agent_destroy(a);
}

static void one_create(void)
{
    create_fails("version");
}

static void two_creates(void)
{
    create_fails("missing1");
    create_fails("missing2");
}

static size_t count(const char *text, const char *sub)
{
    size_t n = 0;
    for (const char *p = strstr(text, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

static void case_missing(void)
{
    skip_without_libfabric();
    CHECK(setenv("NIXL_LIBFABRIC_LIB", MISSING_LIB, 1) == 0);
    CHECK(setenv("NIXL_LOG_LEVEL", "warn", 1) == 0);
    static char log[16384];
    capture_stderr(two_creates, log, sizeof(log));
    /* The backend's ERROR line once for both creates, naming the library
     * and what dlerror said (the core adds its "create failed" to each). */
    CHECK(count(log, "libfabric backend unavailable") == 1);
    CHECK(count(log, " ERROR ") == 3);
    const char *line = strstr(log, "libfabric backend unavailable: cannot load " MISSING_LIB ": ");
    CHECK(line && line < strstr(log, "create failed"));
    CHECK(strstr(line, "No such file or directory") != NULL);
    expect_not_loaded("after a create that could not load it");

    nixl_agent_t *a = agent_make("after");
    shm_moves_bytes(a, "after");
    nixl_agent_destroy(a);
    expect_not_loaded("at the end");
}

static void case_version(const char *lib, const char *versioned)
{
    skip_without_libfabric();
    if (strcmp(versioned, "1") != 0) {
        printf("SKIP: meson found no libfabric symbol versions: the backend resolves with dlsym\n");
        exit(77);
    }
    CHECK(setenv("NIXL_LIBFABRIC_LIB", lib, 1) == 0);
    CHECK(setenv("NIXL_LOG_LEVEL", "warn", 1) == 0);
    static char log[16384];
    capture_stderr(one_create, log, sizeof(log));
    char want[1024];
    snprintf(want, sizeof(want), "libfabric backend unavailable: %s has no fi_getinfo@FABRIC_1.", lib);
    CHECK(strstr(log, want) != NULL);
    CHECK(count(log, "libfabric backend unavailable") == 1);
    /* The library was opened, then let go. */
    CHECK(!mapped("fake_fabric"));
    expect_not_loaded("after refusing a library of another ABI");
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "version") == 0)
        case_version(argv[2], argv[3]);
    else if (argc != 2) {
        fprintf(stderr, "usage: %s lazy | missing | version LIB VERSIONED\n", argv[0]);
        return 2;
    } else if (strcmp(argv[1], "lazy") == 0)
        case_lazy();
    else if (strcmp(argv[1], "missing") == 0)
        case_missing();
    else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    printf("ok %s\n", argv[1]);
    return 0;
}
