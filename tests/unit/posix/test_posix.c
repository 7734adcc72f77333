/*
 * test_posix.c - the posix backend through the public API: DRAM to and
 * from files as loopback requests (the agent names itself), on both paths
 * (posix.uring, posix.sync), every byte compared with what pread sees or
 * what was written; more pieces than the ring holds; READ past a file's
 * end; O_DIRECT alignment refused with its reason; bad FILE descriptors.
 *
 *   test_posix uring|sync|odirect|errors
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/io_uring.h>

#include "nixl.h"
#include "nixl/backend.h"

#include "../../common/test_check.h"

static nixl_agent_t *agent_with_posix(const char *name, const char *use_uring)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    nixl_param_t p[2] = {{"use_uring", use_uring}, {"queue_depth", "64"}};
    nixl_backend_t *b = NULL;
    CHECK_ST(a ? nixl_backend_create(a, "posix", p, 2, &b) : NIXL_ERR_NULL, NIXL_OK);
    return a;
}

static int tmp_file(int flags)
{
    char path[] = "/var/tmp/nixl-posix-XXXXXX";
    int fd = mkostemp(path, flags);
    if (fd >= 0)
        unlink(path);
    return fd;
}

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (uint64_t t0 = test_now_ms(); st == NIXL_IN_PROG && test_now_ms() - t0 < 10000;)
        st = nixl_xfer_status(x);
    return st;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 9));
}

/* NP pieces of PIECE bytes, memory pieces shuffled against file pieces,
 * file offset 0 among them; WRITE then READ back into fresh memory. */
static void test_roundtrip(const char *use_uring, const char *want_path)
{
    enum { NP = 1000, PIECE = 4096 + 24 };
    nixl_agent_t *a = agent_with_posix("px", use_uring);
    int fd = tmp_file(0), fd2 = tmp_file(0);
    CHECK(fd >= 0 && fd2 >= 0);
    size_t bytes = (size_t)NP * PIECE;
    unsigned char *src = malloc(bytes), *back = calloc(1, bytes), *fimg = malloc(bytes);
    CHECK(src && back && fimg);
    if (!a || fd < 0 || fd2 < 0 || !src || !back || !fimg)
        return;
    fill(src, bytes, 1);
    nixl_desc_t mem[2] = {{(uintptr_t)src, bytes, 0, 0, NULL}, {(uintptr_t)back, bytes, 0, 0, NULL}};
    nixl_desc_t files[2] = {{0, 0, (uint32_t)fd, 0, NULL}, {0, 0, (uint32_t)fd2, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 2, files};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    static nixl_desc_t ld[NP], fd_[NP], bd[NP];
    for (size_t i = 0; i < NP; i++) {
        size_t k = (i * 389 + 17) % NP; /* file slot of memory piece i */
        /* The first half to fd, the rest to fd2: one request, two files. */
        uint32_t f = i < NP / 2 ? (uint32_t)fd : (uint32_t)fd2;
        ld[i] = (nixl_desc_t){(uintptr_t)src + i * PIECE, PIECE, 0, 0, NULL};
        fd_[i] = (nixl_desc_t){k * PIECE, PIECE, f, 0, NULL};
        bd[i] = (nixl_desc_t){(uintptr_t)back + i * PIECE, PIECE, 0, 0, NULL};
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, NP, ld}, r = {NIXL_MEM_FILE, NP, fd_}, b = {NIXL_MEM_DRAM, NP, bd};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "px", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    if (x && strcmp(info.path, want_path) != 0)
        fprintf(stderr, "WRITE path %s, expected %s\n", info.path, want_path);
    CHECK(x && strcmp(info.path, want_path) == 0 && info.bytes == bytes);
    nixl_xfer_release(x);
    /* What the files hold, read with pread. */
    int bad = 0;
    for (size_t i = 0; i < NP; i++) {
        int f = i < NP / 2 ? fd : fd2;
        ssize_t got = pread(f, fimg, PIECE, (off_t)fd_[i].addr);
        bad += got != PIECE || memcmp(fimg, src + i * PIECE, PIECE) != 0;
    }
    if (bad)
        fprintf(stderr, "%s: %d of %d pieces wrong in the files after WRITE\n", want_path, bad, NP);
    CHECK(bad == 0);
    /* READ them back into other memory: byte for byte what was written. */
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &b, &r, "px", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(memcmp(back, src, bytes) == 0);
    /* Repost after the file changed: the new bytes come back. */
    fill(fimg, PIECE, 9);
    CHECK(pwrite(fd, fimg, PIECE, (off_t)fd_[0].addr) == PIECE);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(memcmp(back, fimg, PIECE) == 0);
    nixl_xfer_release(x);

    /* A READ reaching past fd2's end fails, and says so. */
    off_t end = lseek(fd2, 0, SEEK_END);
    nixl_desc_t past = {(uint64_t)end - 100, 4096, (uint32_t)fd2, 0, NULL};
    nixl_desc_t b4 = {(uintptr_t)back, 4096, 0, 0, NULL};
    nixl_dlist_t pl = {NIXL_MEM_FILE, 1, &past}, bl = {NIXL_MEM_DRAM, 1, &b4};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &bl, &pl, "px", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_ERR_XFER_FAILED);
    nixl_xfer_release(x);
    /* A file range of a file not registered: refused, nothing made. */
    int fd3 = tmp_file(0);
    nixl_desc_t other = {0, 4096, (uint32_t)fd3, 0, NULL};
    nixl_dlist_t ol = {NIXL_MEM_FILE, 1, &other};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &bl, &ol, "px", NULL, &x), NIXL_ERR_NOT_REGISTERED);
    CHECK(x == NULL);
    close(fd3);

    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &ml, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    close(fd);
    close(fd2);
    free(src);
    free(back);
    free(fimg);
}

/* O_DIRECT: aligned pieces move, a misaligned one is refused at creation. */
static void test_odirect(void)
{
    int fd = tmp_file(O_DIRECT);
    if (fd < 0) {
        printf("SKIP odirect: /var/tmp does not take O_DIRECT here (%s)\n", strerror(errno));
        exit(77);
    }
    nixl_agent_t *a = agent_with_posix("pxd", "1");
    enum { N = 64 * 1024 };
    unsigned char *buf = NULL, *back = NULL;
    CHECK(posix_memalign((void **)&buf, 4096, N) == 0 && posix_memalign((void **)&back, 4096, N) == 0);
    fill(buf, N, 3);
    memset(back, 0, N);
    nixl_desc_t mem[2] = {{(uintptr_t)buf, N, 0, 0, NULL}, {(uintptr_t)back, N, 0, 0, NULL}};
    nixl_desc_t file = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 1, &file};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    nixl_desc_t w = {(uintptr_t)buf, N, 0, 0, NULL}, wf = {0, N, (uint32_t)fd, 0, NULL};
    nixl_desc_t rb = {(uintptr_t)back, N, 0, 0, NULL};
    nixl_dlist_t wl = {NIXL_MEM_DRAM, 1, &w}, wfl = {NIXL_MEM_FILE, 1, &wf}, rl = {NIXL_MEM_DRAM, 1, &rb};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &wl, &wfl, "pxd", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &rl, &wfl, "pxd", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(memcmp(back, buf, N) == 0);
    nixl_xfer_release(x);
    /* Misaligned: offset 100. */
    nixl_desc_t mis = {100, 4096, (uint32_t)fd, 0, NULL}, m4 = {(uintptr_t)buf, 4096, 0, 0, NULL};
    nixl_dlist_t misl = {NIXL_MEM_FILE, 1, &mis}, m4l = {NIXL_MEM_DRAM, 1, &m4};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &m4l, &misl, "pxd", NULL, &x), NIXL_ERR_INVALID_PARAM);
    CHECK(x == NULL);
    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &ml, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    close(fd);
    free(buf);
    free(back);
}

/* FILE descriptors the core refuses, each with its status. */
static void test_errors(void)
{
    nixl_agent_t *a = agent_with_posix("pxe", "1");
    int fd = tmp_file(0);
    nixl_desc_t closed = {0, 0, 100000, 0, NULL};
    nixl_dlist_t cl = {NIXL_MEM_FILE, 1, &closed};
    CHECK_ST(nixl_mem_register(a, &cl, NULL), NIXL_ERR_INVALID_PARAM);
    nixl_desc_t huge = {NIXL_FILE_OFFSET_END, 4096, (uint32_t)fd, 0, NULL};
    nixl_dlist_t hl = {NIXL_MEM_FILE, 1, &huge};
    CHECK_ST(nixl_mem_register(a, &hl, NULL), NIXL_ERR_INVALID_PARAM);
    nixl_desc_t bigfd = {0, 4096, NIXL_FILE_FD_MAX + 1, 0, NULL};
    nixl_dlist_t bl = {NIXL_MEM_FILE, 1, &bigfd};
    CHECK_ST(nixl_mem_register(a, &bl, NULL), NIXL_ERR_INVALID_PARAM);
    /* Offset 0 with a length is a region like any other; two of one file may not overlap. */
    nixl_desc_t two[2] = {{0, 8192, (uint32_t)fd, 0, NULL}, {4096, 8192, (uint32_t)fd, 0, NULL}};
    nixl_dlist_t tl = {NIXL_MEM_FILE, 2, two};
    CHECK_ST(nixl_mem_register(a, &tl, NULL), NIXL_ERR_OVERLAP);
    nixl_dlist_t one = {NIXL_MEM_FILE, 1, two};
    CHECK_ST(nixl_mem_register(a, &one, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &one, NULL), NIXL_OK);

    /* nixl_mem_query: a path in meta, an fd, a file that is not there. */
    CHECK(pwrite(fd, "0123456789", 10, 0) == 10);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    nixl_desc_t q[3] = {{0, 0, 0, (uint32_t)strlen(path), (uint8_t *)path},
                        {0, 0, (uint32_t)fd, 0, NULL},
                        {0, 0, 0, 19, (uint8_t *)"/nonexistent/nixl/x"}};
    nixl_dlist_t ql = {NIXL_MEM_FILE, 3, q};
    nixl_mem_info_t info[3];
    CHECK_ST(nixl_mem_query(a, &ql, "posix", info), NIXL_OK);
    CHECK(info[0].accessible && info[0].size == 10 && info[1].accessible && info[1].size == 10 &&
          !info[2].accessible && info[2].size == 0);
    CHECK_ST(nixl_mem_query(a, &ql, "nope", info), NIXL_ERR_UNKNOWN_BACKEND);
    nixl_dlist_t qd = {NIXL_MEM_DRAM, 1, q};
    CHECK_ST(nixl_mem_query(a, &qd, "posix", info), NIXL_ERR_NOT_SUPPORTED);
    nixl_agent_destroy(a);
    close(fd);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "uring") == 0) {
        /* Whether this kernel lets us make a ring at all (the backend says
         * so in its log and takes posix.sync): a skip, never a pass. */
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        long fd = syscall(__NR_io_uring_setup, 4, &p);
        if (fd < 0) {
            printf("SKIP uring: io_uring_setup refused here (%s)\n", strerror(errno));
            return 77;
        }
        close((int)fd);
        test_roundtrip("1", "posix.uring");
    }
    else if (strcmp(c, "sync") == 0)
        test_roundtrip("0", "posix.sync");
    else if (strcmp(c, "odirect") == 0)
        test_odirect();
    else if (strcmp(c, "errors") == 0)
        test_errors();
    else {
        fprintf(stderr, "usage: test_posix uring|sync|odirect|errors\n");
        return 2;
    }
    if (failures) {
        fprintf(stderr, "test_posix %s: %d check(s) failed\n", c, failures);
        return 1;
    }
    printf("test_posix %s: all checks passed\n", c);
    return 0;
}
