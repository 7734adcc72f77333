/*
 * test_gds.c - the gds backend's own logic on a machine without cuFile:
 * libcufile is replaced by tests/unit/gds/fake_cufile.c (host memory,
 * pread/pwrite), loaded through the backend's cufile_lib parameter.
 * DRAM to and from files (path gds.host) in chunks moved by the thread
 * pool, bytes compared with what pread sees; one cuFile handle per file
 * whatever the number of regions; a READ past the end; cancel by a
 * deadline with chunks still queued; a missing library, a failing driver
 * open.  VRAM (gds.direct / gds.compat) runs on the GPU machine:
 * tests/gpu/test_gds_vram.c.
 *
 *   test_gds FAKE_LIB roundtrip|cancel|errors|no_lib|open_fail
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nixl.h"

#include "../../common/test_check.h"

static const char *fake_lib;

static nixl_agent_t *agent_with_gds(const char *lib, const char *threads, const char *chunk, nixl_status_t want)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "gd"};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    nixl_param_t p[3] = {{"cufile_lib", lib}, {"threads", threads}, {"chunk_bytes", chunk}};
    nixl_backend_t *b = NULL;
    CHECK_ST(a ? nixl_backend_create(a, "gds", p, 3, &b) : NIXL_ERR_NULL, want);
    return a;
}

static int tmp_file(void)
{
    char path[] = "/var/tmp/nixl-gds-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        unlink(path);
    return fd;
}

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (uint64_t t0 = test_now_ms(); st == NIXL_IN_PROG && test_now_ms() - t0 < 20000;)
        st = nixl_xfer_status(x);
    return st;
}

static int live_handles(void)
{
    void *h = dlopen(fake_lib, RTLD_NOW | RTLD_NOLOAD);
    int (*f)(void) = h ? (int (*)(void))dlsym(h, "fake_cufile_live_handles") : NULL;
    int n = f ? f() : -1;
    if (h)
        dlclose(h);
    return n;
}

/* 64 pieces of 100,000 bytes (chunks of 16 KiB: 7 a piece, the last one
 * short) between shuffled memory and file places, two regions of one
 * file and a second file; WRITE, then READ back into other memory. */
static void test_roundtrip(void)
{
    enum { NP = 64, PIECE = 100000 };
    nixl_agent_t *a = agent_with_gds(fake_lib, "4", "16384", NIXL_OK);
    int fd = tmp_file(), fd2 = tmp_file();
    size_t bytes = (size_t)NP * PIECE;
    unsigned char *src = malloc(bytes), *back = calloc(1, bytes), *img = malloc(PIECE);
    CHECK(a && fd >= 0 && fd2 >= 0 && src && back && img);
    if (!a || fd < 0 || fd2 < 0 || !src || !back || !img)
        return;
    for (size_t i = 0; i < bytes; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 11));
    nixl_desc_t mem[2] = {{(uintptr_t)src, bytes, 0, 0, NULL}, {(uintptr_t)back, bytes, 0, 0, NULL}};
    /* fd in two regions (the first half and the rest of the file), fd2 whole. */
    uint64_t half = (uint64_t)NP / 2 * PIECE;
    nixl_desc_t files[3] = {{0, half, (uint32_t)fd, 0, NULL}, {half, 0, (uint32_t)fd, 0, NULL},
                            {0, 0, (uint32_t)fd2, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 3, files};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    CHECK(live_handles() == 2); /* one per file, not per region */
    static nixl_desc_t ld[NP], rd[NP], bd[NP];
    for (size_t i = 0; i < NP; i++) {
        size_t k = (i * 37 + 5) % NP; /* file place of memory piece i */
        uint32_t f = i % 3 == 2 ? (uint32_t)fd2 : (uint32_t)fd;
        ld[i] = (nixl_desc_t){(uintptr_t)src + i * PIECE, PIECE, 0, 0, NULL};
        rd[i] = (nixl_desc_t){(uint64_t)k * PIECE, PIECE, f, 0, NULL};
        bd[i] = (nixl_desc_t){(uintptr_t)back + i * PIECE, PIECE, 0, 0, NULL};
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, NP, ld}, r = {NIXL_MEM_FILE, NP, rd}, b = {NIXL_MEM_DRAM, NP, bd};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "gd", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(x && strcmp(info.path, "gds.host") == 0 && info.bytes == bytes);
    nixl_xfer_release(x);
    int bad = 0;
    for (size_t i = 0; i < NP; i++) {
        ssize_t got = pread((int)rd[i].dev_id, img, PIECE, (off_t)rd[i].addr);
        bad += got != PIECE || memcmp(img, src + i * PIECE, PIECE) != 0;
    }
    if (bad)
        fprintf(stderr, "gds.host: %d of %d pieces wrong in the files after WRITE\n", bad, NP);
    CHECK(bad == 0);
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &b, &r, "gd", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(memcmp(back, src, bytes) == 0);
    /* Posted again after the file changed: the new bytes come back. */
    for (size_t i = 0; i < PIECE; i++)
        img[i] = (unsigned char)(i * 7 + 3);
    CHECK(pwrite((int)rd[0].dev_id, img, PIECE, (off_t)rd[0].addr) == PIECE);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(memcmp(back, img, PIECE) == 0);
    nixl_xfer_release(x);

    /* A READ past fd2's end fails and says so; nothing else is touched. */
    off_t end = lseek(fd2, 0, SEEK_END);
    nixl_desc_t past = {(uint64_t)end - 100, 40000, (uint32_t)fd2, 0, NULL};
    nixl_desc_t b1 = {(uintptr_t)back, 40000, 0, 0, NULL};
    nixl_dlist_t pl = {NIXL_MEM_FILE, 1, &past}, bl = {NIXL_MEM_DRAM, 1, &b1};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &bl, &pl, "gd", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_ERR_XFER_FAILED);
    nixl_xfer_release(x);
    /* A notification on a storage request: refused at post. */
    x = NULL;
    nixl_opt_args_t o = {.field_mask = NIXL_OPT_NOTIF, .notif = "n", .notif_len = 1};
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "gd", &o, &x), NIXL_OK);
    CHECK_ST(x ? nixl_xfer_post(x) : NIXL_ERR_NULL, NIXL_ERR_NOT_SUPPORTED);
    nixl_xfer_release(x);

    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &ml, NULL), NIXL_OK);
    CHECK(live_handles() == 0); /* given back at deregistration */
    nixl_agent_destroy(a);
    close(fd);
    close(fd2);
    free(src);
    free(back);
    free(img);
}

/* A deadline passes with most chunks still queued (one thread, 20 ms a
 * chunk): the request ends NIXL_ERR_TIMEOUT soon after, the queued
 * chunks never start, release returns. */
static void test_cancel(void)
{
    setenv("FAKE_CUFILE_DELAY_US", "20000", 1);
    nixl_agent_t *a = agent_with_gds(fake_lib, "1", "4096", NIXL_OK);
    int fd = tmp_file();
    enum { BYTES = 200 * 4096 };
    unsigned char *src = calloc(1, BYTES);
    CHECK(a && fd >= 0 && src);
    if (!a || fd < 0 || !src)
        return;
    nixl_desc_t m = {(uintptr_t)src, BYTES, 0, 0, NULL}, f = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 1, &m}, fl = {NIXL_MEM_FILE, 1, &f};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    nixl_desc_t piece = {0, BYTES, (uint32_t)fd, 0, NULL};
    nixl_dlist_t pl = {NIXL_MEM_FILE, 1, &piece};
    nixl_opt_args_t o = {.field_mask = NIXL_OPT_TIMEOUT_MS, .timeout_ms = 100};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &ml, &pl, "gd", &o, &x), NIXL_OK);
    uint64_t t0 = test_now_ms();
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_ERR_TIMEOUT);
    uint64_t took = test_now_ms() - t0;
    if (took >= 3000) /* all 200 chunks would take 4 s */
        fprintf(stderr, "cancel: the request ended after %llu ms\n", (unsigned long long)took);
    CHECK(took < 3000);
    CHECK(lseek(fd, 0, SEEK_END) < BYTES); /* not everything was written */
    nixl_xfer_release(x);
    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &ml, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    close(fd);
    free(src);
}

static void test_errors(void)
{
    nixl_agent_t *a = agent_with_gds(fake_lib, "2", "16777216", NIXL_OK);
    if (!a)
        return;
    /* A closed fd: refused at registration. */
    int fd = tmp_file();
    close(fd);
    nixl_desc_t f = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t fl = {NIXL_MEM_FILE, 1, &f};
    CHECK(nixl_mem_register(a, &fl, NULL) != NIXL_OK);
    CHECK(live_handles() == 0);
    nixl_agent_destroy(a);
    /* Bad parameters. */
    a = agent_with_gds(fake_lib, "0", "16777216", NIXL_ERR_INVALID_PARAM);
    nixl_agent_destroy(a);
    a = agent_with_gds(fake_lib, "2", "100", NIXL_ERR_INVALID_PARAM);
    nixl_agent_destroy(a);
}

int main(int argc, char **argv)
{
    fake_lib = argc > 1 ? argv[1] : "";
    const char *c = argc > 2 ? argv[2] : "";
    if (strcmp(c, "roundtrip") == 0)
        test_roundtrip();
    else if (strcmp(c, "cancel") == 0)
        test_cancel();
    else if (strcmp(c, "errors") == 0)
        test_errors();
    else if (strcmp(c, "no_lib") == 0) {
        nixl_agent_destroy(agent_with_gds("/nonexistent/libcufile.so.0", "2", "16777216", NIXL_ERR_NOT_SUPPORTED));
    } else if (strcmp(c, "open_fail") == 0) {
        setenv("FAKE_CUFILE_OPEN_FAIL", "1", 1);
        nixl_agent_destroy(agent_with_gds(fake_lib, "2", "16777216", NIXL_ERR_BACKEND));
    } else {
        fprintf(stderr, "usage: test_gds FAKE_LIB roundtrip|cancel|errors|no_lib|open_fail\n");
        return 2;
    }
    if (failures) {
        fprintf(stderr, "test_gds %s: %d check(s) failed\n", c, failures);
        return 1;
    }
    printf("test_gds %s: OK\n", c);
    return 0;
}
