/*
 * test_gds_vram.c - GPU memory to and from a file through the gds backend
 * and the real cuFile: every byte checked (pread of the file after WRITE,
 * the GPU's bytes after READ), a piece split into chunks across the
 * backend's threads, requests posted from a thread with no CUDA context
 * current (the threads bind the memory's), the path named (gds.direct, or
 * gds.compat counted as a fallback and refused under NIXL_ALLOW_FALLBACK=0),
 * and host memory through cuFile (gds.host).  Prints a reason and exits 77
 * without a GPU or without libcufile.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/backends/gds/cufile_api.h"
#include "gpu_util.h"
#include "nixl.h"

#include "../common/test_check.h"

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (uint64_t t0 = test_now_ms(); st == NIXL_IN_PROG && test_now_ms() - t0 < 60000;)
        st = nixl_xfer_status(x);
    return st;
}

typedef struct {
    nixl_xfer_t *x;
    nixl_status_t st;
    int had_ctx;
} post_arg_t;

/* A new thread: no context current, as in an engine's own I/O thread. */
static void *post_thread(void *p)
{
    post_arg_t *a = p;
    CUcontext cur = NULL;
    gpu_cu.cuCtxGetCurrent(&cur);
    a->had_ctx = cur != NULL;
    a->st = run(a->x);
    return NULL;
}

static nixl_status_t run_in_thread(nixl_xfer_t *x)
{
    post_arg_t a = {x, NIXL_ERR_NULL, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, post_thread, &a) != 0)
        return NIXL_ERR_NO_MEMORY;
    pthread_join(t, NULL);
    CHECK(!a.had_ctx);
    return a.st;
}

static uint64_t counted(nixl_agent_t *a, const char *path)
{
    nixl_fallback_stat_t fs[8];
    size_t nfs = 0;
    uint64_t n = 0;
    if (nixl_fallback_stats(a, fs, 8, &nfs) == NIXL_OK)
        for (size_t i = 0; i < nfs && i < 8; i++)
            if (strcmp(fs[i].path, path) == 0)
                n += fs[i].count;
    return n;
}

int main(void)
{
    char why[256];
    if (gpu_init(why, sizeof(why)) < 1) {
        printf("SKIP gds VRAM: %s\n", why);
        return 77;
    }
    const char *lib = getenv("NIXL_GDS_CUFILE_LIB");
    void *cf = dlopen(lib && *lib ? lib : "libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!cf) {
        printf("SKIP gds VRAM: no cuFile here (%s)\n", dlerror());
        return 77;
    }
    /* Whether cuFile itself can take a file there: in a container without
     * udev it cannot even in compatibility mode (cuFileHandleRegister fails:
     * its cufile.log says it found no volume attributes).  A skip with the
     * reason, never a pass; a failure of ours only where raw cuFile works. */
    const char *pdir = getenv("NIXL_TEST_GDS_DIR");
    char probe[512];
    snprintf(probe, sizeof(probe), "%s/nixl-gds-probe-XXXXXX", pdir && *pdir ? pdir : "/var/tmp");
    int pfd = mkstemp(probe);
    nixl_cufile_error_t (*drv_open)(void) = NULL;
    nixl_cufile_error_t (*h_reg)(nixl_cufile_handle_t *, nixl_cufile_descr_t *) = NULL;
    void (*h_dereg)(nixl_cufile_handle_t) = NULL;
    *(void **)&drv_open = dlsym(cf, "cuFileDriverOpen");
    *(void **)&h_reg = dlsym(cf, "cuFileHandleRegister");
    *(void **)&h_dereg = dlsym(cf, "cuFileHandleDeregister");
    if (pfd < 0 || !drv_open || !h_reg || !h_dereg) {
        printf("SKIP gds VRAM: cannot probe cuFile (a file in %s, or its symbols)\n", probe);
        return 77;
    }
    unlink(probe);
    nixl_cufile_error_t pe = drv_open();
    if (pe.err != NIXL_CUFILE_SUCCESS) {
        printf("SKIP gds VRAM: cuFileDriverOpen fails here (cuFile error %d)\n", pe.err);
        return 77;
    }
    nixl_cufile_descr_t pd;
    memset(&pd, 0, sizeof(pd));
    pd.type = NIXL_CUFILE_HANDLE_TYPE_OPAQUE_FD;
    pd.handle.fd = pfd;
    nixl_cufile_handle_t ph = NULL;
    pe = h_reg(&ph, &pd);
    if (pe.err != NIXL_CUFILE_SUCCESS) {
        printf("SKIP gds VRAM: cuFile cannot take a file in %s here: cuFileHandleRegister fails with cuFile error "
               "%d (cufile.log says why; NIXL_TEST_GDS_DIR picks another directory)\n",
               pdir && *pdir ? pdir : "/var/tmp", pe.err);
        return 77;
    }
    h_dereg(ph);
    close(pfd);
    enum { NP = 6 };
    const size_t piece = (size_t)3 << 20, big = (size_t)40 << 20; /* the last piece: three chunks */
    size_t bytes = (NP - 1) * piece + big;
    unsigned char *host = malloc(bytes), *back = malloc(bytes);
    unsigned char *vram = gpu_alloc(0, bytes);
    /* NIXL_TEST_GDS_DIR: where the file goes (cuFile must be able to take a
     * file there; default /var/tmp). */
    const char *dir = getenv("NIXL_TEST_GDS_DIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/nixl-gds-vram-XXXXXX", dir && *dir ? dir : "/var/tmp");
    int fd = mkstemp(path);
    CHECK(host && back && vram && fd >= 0);
    if (!host || !back || !vram || fd < 0)
        return 1;
    unlink(path);
    for (size_t i = 0; i < bytes; i++)
        host[i] = (unsigned char)(i * 29 + (i >> 13));
    gpu_put(vram, host, bytes);

    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "gdv"};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, "gds", NULL, 0, &b), NIXL_OK);
    if (!b) {
        fprintf(stderr, "test_gds_vram: the gds backend could not be created (its log says why)\n");
        return 1;
    }
    nixl_desc_t vd = {(uintptr_t)vram, bytes, 0, 0, NULL}, hd = {(uintptr_t)back, bytes, 0, 0, NULL},
                fdsc = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t vl = {NIXL_MEM_VRAM, 1, &vd}, hl = {NIXL_MEM_DRAM, 1, &hd}, fl = {NIXL_MEM_FILE, 1, &fdsc};
    CHECK_ST(nixl_mem_register(a, &vl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &hl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    /* Memory pieces in order, file pieces reversed. */
    nixl_desc_t ld[NP], rd[NP];
    size_t off = 0;
    for (int i = 0; i < NP; i++) {
        size_t len = i == NP - 1 ? big : piece;
        ld[i] = (nixl_desc_t){(uintptr_t)vram + off, len, 0, 0, NULL};
        off += len;
    }
    size_t foff = 0;
    for (int i = NP - 1; i >= 0; i--) {
        rd[i] = (nixl_desc_t){foff, ld[i].len, (uint32_t)fd, 0, NULL};
        foff += ld[i].len;
    }
    nixl_dlist_t l = {NIXL_MEM_VRAM, NP, ld}, r = {NIXL_MEM_FILE, NP, rd};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "gdv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run_in_thread(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    printf("WRITE path %s, %llu bytes\n", x ? info.path : "-", x ? (unsigned long long)info.bytes : 0ull);
    int compat = x && strcmp(info.path, "gds.compat") == 0;
    CHECK(x && (compat || strcmp(info.path, "gds.direct") == 0));
    nixl_xfer_release(x);
    int bad = 0;
    for (int i = 0; i < NP; i++) {
        unsigned char *p = malloc(ld[i].len);
        bad += !p || pread(fd, p, ld[i].len, (off_t)rd[i].addr) != (ssize_t)ld[i].len ||
               memcmp(p, host + (ld[i].addr - (uintptr_t)vram), ld[i].len) != 0;
        free(p);
    }
    if (bad)
        fprintf(stderr, "%d of %d pieces wrong in the file after the gds WRITE\n", bad, NP);
    CHECK(bad == 0);
    /* READ back into the GPU after clearing it, again from a context-less thread. */
    gpu_set(vram, 0, bytes);
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &l, &r, "gdv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run_in_thread(x) : NIXL_ERR_NULL, NIXL_OK);
    gpu_get(back, vram, bytes);
    CHECK(memcmp(back, host, bytes) == 0);
    nixl_xfer_release(x);
    uint64_t n = counted(a, "gds.compat");
    printf("gds.compat counted %llu times\n", (unsigned long long)n);
    CHECK(n == (compat ? 2u : 0u));
    /* Host memory through cuFile: the file's bytes come back into DRAM. */
    memset(back, 0, bytes);
    nixl_desc_t hp = {(uintptr_t)back, bytes, 0, 0, NULL}, fp = {0, bytes, (uint32_t)fd, 0, NULL};
    nixl_dlist_t hpl = {NIXL_MEM_DRAM, 1, &hp}, fpl = {NIXL_MEM_FILE, 1, &fp};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &hpl, &fpl, "gdv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(x && strcmp(info.path, "gds.host") == 0);
    nixl_xfer_release(x);
    unsigned char *fimg = malloc(bytes);
    CHECK(fimg && pread(fd, fimg, bytes, 0) == (ssize_t)bytes && memcmp(back, fimg, bytes) == 0);
    free(fimg);
    /* compat is a fallback: refused when fallbacks are. */
    if (compat) {
        setenv("NIXL_ALLOW_FALLBACK", "0", 1);
        x = NULL;
        CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "gdv", NULL, &x), NIXL_ERR_NO_PATH);
        CHECK(x == NULL);
        unsetenv("NIXL_ALLOW_FALLBACK");
    }
    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &hl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &vl, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    gpu_free(0, vram);
    close(fd);
    free(host);
    free(back);
    if (failures) {
        fprintf(stderr, "test_gds_vram: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_gds_vram: all checks passed (%s)\n", compat ? "gds.compat" : "gds.direct");
    return 0;
}
