/*
 * test_posix_vram.c - GPU memory to and from a file through the posix
 * backend: the counted fallback posix.staged (host staging), every byte
 * checked (pread of the file after WRITE, the GPU's bytes after READ),
 * pieces larger than the staging buffer, the fallback counted, and
 * NIXL_ALLOW_FALLBACK=0 refusing it when the request is made.  Prints a
 * reason and exits 77 without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_util.h"
#include "nixl.h"

#include "../common/test_check.h"

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (uint64_t t0 = test_now_ms(); st == NIXL_IN_PROG && test_now_ms() - t0 < 20000;)
        st = nixl_xfer_status(x);
    return st;
}

int main(void)
{
    char why[256];
    if (gpu_init(why, sizeof(why)) < 1) {
        printf("SKIP posix VRAM: %s\n", why);
        return 77;
    }
    enum { NP = 6 };
    const size_t piece = (size_t)3 << 20, big = (size_t)20 << 20; /* the last piece spans three staging rounds */
    size_t bytes = (NP - 1) * piece + big;
    unsigned char *host = malloc(bytes), *back = malloc(bytes);
    unsigned char *vram = gpu_alloc(0, bytes);
    char path[] = "/var/tmp/nixl-posix-vram-XXXXXX";
    int fd = mkstemp(path);
    CHECK(host && back && vram && fd >= 0);
    if (!host || !back || !vram || fd < 0)
        return 1;
    unlink(path);
    for (size_t i = 0; i < bytes; i++)
        host[i] = (unsigned char)(i * 29 + (i >> 13));
    gpu_put(vram, host, bytes);

    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "pxv"};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, "posix", NULL, 0, &b), NIXL_OK);
    nixl_desc_t vd = {(uintptr_t)vram, bytes, 0, 0, NULL}, fdsc = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t vl = {NIXL_MEM_VRAM, 1, &vd}, fl = {NIXL_MEM_FILE, 1, &fdsc};
    CHECK_ST(nixl_mem_register(a, &vl, NULL), NIXL_OK);
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
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "pxv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    printf("WRITE path %s, %llu bytes\n", x ? info.path : "-", x ? (unsigned long long)info.bytes : 0ull);
    CHECK(x && strcmp(info.path, "posix.staged") == 0);
    nixl_xfer_release(x);
    int bad = 0;
    for (int i = 0; i < NP; i++) {
        unsigned char *p = malloc(ld[i].len);
        bad += !p || pread(fd, p, ld[i].len, (off_t)rd[i].addr) != (ssize_t)ld[i].len ||
               memcmp(p, host + (ld[i].addr - (uintptr_t)vram), ld[i].len) != 0;
        free(p);
    }
    if (bad)
        fprintf(stderr, "%d of %d pieces wrong in the file after the staged WRITE\n", bad, NP);
    CHECK(bad == 0);
    /* READ back into the GPU after clearing it. */
    gpu_set(vram, 0, bytes);
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &l, &r, "pxv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    gpu_get(back, vram, bytes);
    CHECK(memcmp(back, host, bytes) == 0);
    nixl_xfer_release(x);
    /* Counted as a fallback, twice. */
    nixl_fallback_stat_t fs[8];
    size_t nfs = 0;
    uint64_t counted = 0;
    if (nixl_fallback_stats(a, fs, 8, &nfs) == NIXL_OK)
        for (size_t i = 0; i < nfs && i < 8; i++)
            if (strcmp(fs[i].path, "posix.staged") == 0)
                counted += fs[i].count;
    printf("posix.staged counted %llu times\n", (unsigned long long)counted);
    CHECK(counted == 2);
    /* Refused when fallbacks are. */
    setenv("NIXL_ALLOW_FALLBACK", "0", 1);
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "pxv", NULL, &x), NIXL_ERR_NO_PATH);
    CHECK(x == NULL);
    unsetenv("NIXL_ALLOW_FALLBACK");
    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &vl, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    gpu_free(0, vram);
    close(fd);
    free(host);
    free(back);
    if (failures) {
        fprintf(stderr, "test_posix_vram: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_posix_vram: all checks passed\n");
    return 0;
}
