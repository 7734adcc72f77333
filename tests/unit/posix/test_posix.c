/*
 * test_posix.c - the posix backend through the public API: DRAM to and
 * from files as loopback requests (the agent names itself), on both paths
 * (posix.uring, posix.sync), every byte compared with what pread sees or
 * what was written; more pieces than the ring holds; READ past a file's
 * end; O_DIRECT alignment refused with its reason; bad FILE descriptors.
 * Faults, each on posix.uring and posix.sync: a file size limit
 * (RLIMIT_FSIZE, EFBIG), a full file system (a 64 KiB tmpfs in a user
 * namespace of our own, ENOSPC), /dev/full, a file unlinked while
 * registered, a registered fd closed, READs at and past a file's end: the
 * status and the log line of each, what landed, that nothing else was
 * touched, and that the agent goes on working after it.
 *
 *   test_posix uring|sync|odirect|errors
 *   test_posix fsize|enospc|devfull|unlinked|closed|eof|vectored|deadline uring|sync
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/io_uring.h>

#include "nixl.h"
#include "nixl/backend.h"

#include "../../common/test_check.h"
#include "../../common/test_capture.h"

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

/* ---- faults ---- */

/* Post x, wait, and return its status with what the library logged. */
static nixl_status_t run_logged(nixl_xfer_t *x, const char **log)
{
    capture_begin();
    nixl_status_t st = x ? run(x) : NIXL_ERR_NULL;
    *log = capture_end();
    return st;
}

/* One request from lists of n pieces (mem[i], file[i]); NULL if refused. */
static nixl_xfer_t *xfer_files(nixl_agent_t *a, const char *self, nixl_op_t op, const nixl_desc_t *mem,
                               const nixl_desc_t *file, size_t n)
{
    nixl_dlist_t l = {NIXL_MEM_DRAM, n, (nixl_desc_t *)mem}, r = {NIXL_MEM_FILE, n, (nixl_desc_t *)file};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, op, &l, &r, self, NULL, &x), NIXL_OK);
    return x;
}

/* Does the file hold want[0, n) at off? */
static int file_has(int fd, off_t off, const unsigned char *want, size_t n)
{
    unsigned char *got = malloc(n);
    int ok = got && pread(fd, got, n, off) == (ssize_t)n && memcmp(got, want, n) == 0;
    free(got);
    return ok;
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Checks the request's path and moves on: the agent still works after a
 * fault (the ring holds nothing of the failed request). */
static void check_recovers(nixl_agent_t *a, const char *self, const char *want_path, int fd, unsigned char *src,
                           unsigned char *back, uint64_t off, size_t n)
{
    nixl_desc_t m = {(uintptr_t)src, n, 0, 0, NULL}, b = {(uintptr_t)back, n, 0, 0, NULL};
    nixl_desc_t f = {off, n, (uint32_t)fd, 0, NULL};
    memset(back, 0, n);
    nixl_xfer_t *x = xfer_files(a, self, NIXL_OP_WRITE, &m, &f, 1);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK(x && nixl_xfer_info(x, &info) == NIXL_OK && strcmp(info.path, want_path) == 0);
    nixl_xfer_release(x);
    x = xfer_files(a, self, NIXL_OP_READ, &b, &f, 1);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    CHECK(memcmp(back, src, n) == 0);
}

/* The child's verdict: 0 passed, 77 skipped (the child said why); any
 * other exit, or a signal (SIGXFSZ, a crash), is a failure, counted. */
static int child_verdict(pid_t pid, const char *what)
{
    int ws = 0;
    CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid);
    if (WIFSIGNALED(ws))
        fprintf(stderr, "%s: the child died of signal %d\n", what, WTERMSIG(ws));
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 77)
        return 77;
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 1;
}

/* RLIMIT_FSIZE: a WRITE past the limit fails with EFBIG (SIGXFSZ ignored,
 * as a server would), one across it writes up to the limit and fails. */
enum { FS_LIMIT = 64 * 1024, FS_PRE = 16 * 1024, FS_OTHER = 8192, FS_MEM = 128 * 1024 };

static void fsize_child(const char *use_uring, const char *want_path, int fd, int other,
                        const unsigned char *pre, const unsigned char *oth)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {FS_LIMIT, FS_LIMIT};
    CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    nixl_agent_t *a = agent_with_posix("pxf", use_uring);
    unsigned char *src = malloc(FS_MEM), *back = malloc(FS_MEM), *copy = malloc(FS_MEM);
    CHECK(src && back && copy);
    if (!a || !src || !back || !copy)
        return;
    fill(src, FS_MEM, 5);
    memcpy(copy, src, FS_MEM);
    nixl_desc_t mem[2] = {{(uintptr_t)src, FS_MEM, 0, 0, NULL}, {(uintptr_t)back, FS_MEM, 0, 0, NULL}};
    nixl_desc_t files[2] = {{0, 0, (uint32_t)fd, 0, NULL}, {0, 0, (uint32_t)other, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 2, files};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    const char *log;

    /* Wholly past the limit: nothing written, the file as it was. */
    nixl_desc_t m1 = {(uintptr_t)src, 4096, 0, 0, NULL}, f1 = {FS_LIMIT + 4096, 4096, (uint32_t)fd, 0, NULL};
    nixl_xfer_t *x = xfer_files(a, "pxf", NIXL_OP_WRITE, &m1, &f1, 1);
    CHECK_ST(run_logged(x, &log), NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "File too large") != NULL);
    nixl_xfer_release(x);
    CHECK(lseek(fd, 0, SEEK_END) == FS_PRE && file_has(fd, 0, pre, FS_PRE));

    /* Three pieces, the middle one past the limit: the request fails; the
     * file outside its pieces and the other file are untouched. */
    nixl_desc_t m3[3] = {{(uintptr_t)src, 4096, 0, 0, NULL},
                         {(uintptr_t)src + 4096, 4096, 0, 0, NULL},
                         {(uintptr_t)src + 8192, 4096, 0, 0, NULL}};
    nixl_desc_t f3[3] = {{FS_PRE, 4096, (uint32_t)fd, 0, NULL},
                         {FS_LIMIT + 8192, 4096, (uint32_t)fd, 0, NULL},
                         {FS_PRE + 8192, 4096, (uint32_t)fd, 0, NULL}};
    x = xfer_files(a, "pxf", NIXL_OP_WRITE, m3, f3, 3);
    CHECK_ST(run_logged(x, &log), NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "File too large") != NULL && strstr(log, "[73728, +4096)") != NULL);
    nixl_xfer_release(x);
    CHECK(file_has(fd, 0, pre, FS_PRE) && file_has(other, 0, oth, FS_OTHER));
    CHECK(lseek(fd, 0, SEEK_END) <= FS_LIMIT);

    /* Across the limit: the bytes below it land (a short write), the rest
     * is EFBIG, the request fails, the file ends at the limit. */
    nixl_desc_t m2 = {(uintptr_t)src + 16384, 8192, 0, 0, NULL}, f2 = {FS_LIMIT - 4096, 8192, (uint32_t)fd, 0, NULL};
    x = xfer_files(a, "pxf", NIXL_OP_WRITE, &m2, &f2, 1);
    CHECK_ST(run_logged(x, &log), NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "File too large") != NULL);
    nixl_xfer_release(x);
    CHECK(lseek(fd, 0, SEEK_END) == FS_LIMIT && file_has(fd, FS_LIMIT - 4096, src + 16384, 4096));
    CHECK(file_has(fd, 0, pre, FS_PRE) && file_has(other, 0, oth, FS_OTHER));

    /* Below the limit everything works as before, and no source byte changed. */
    check_recovers(a, "pxf", want_path, fd, src, back, FS_PRE, 8192);
    CHECK(memcmp(src, copy, FS_MEM) == 0);
    nixl_agent_destroy(a);
    free(src);
    free(back);
    free(copy);
}

static void test_fsize(const char *use_uring, const char *want_path)
{
    int fd = tmp_file(0), other = tmp_file(0);
    CHECK(fd >= 0 && other >= 0);
    unsigned char pre[FS_PRE], oth[FS_OTHER];
    fill(pre, FS_PRE, 11);
    fill(oth, FS_OTHER, 12);
    CHECK(pwrite(fd, pre, FS_PRE, 0) == FS_PRE && pwrite(other, oth, FS_OTHER, 0) == FS_OTHER);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fsize_child(use_uring, want_path, fd, other, pre, oth);
        fflush(NULL);
        _exit(failures ? 1 : 0);
    }
    if (child_verdict(pid, "fsize") == 77)
        exit(77);
    /* What the child left, seen without its limit. */
    CHECK(lseek(fd, 0, SEEK_END) == FS_LIMIT && file_has(fd, 0, pre, FS_PRE) && file_has(other, 0, oth, FS_OTHER));
    close(fd);
    close(other);
}

/* ENOSPC from a real file system: a tmpfs of 64 KiB mounted in a user and
 * mount namespace of a child (no privilege needed where unprivileged user
 * namespaces are allowed; a skip, said, where they are not). */
enum { NS_FS = 64 * 1024, NS_PIECES = 32, NS_OTHER = 8192 };

static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

static void enospc_child(const char *use_uring, const char *want_path, const char *dir)
{
    uid_t uid = getuid();
    gid_t gid = getgid();
    char map[64], fpath[256], gpath[256];
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
        printf("SKIP enospc: no user namespace of our own here (unshare: %s)\n", strerror(errno));
        fflush(NULL);
        _exit(77);
    }
    snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
    int mapped = write_text("/proc/self/setgroups", "deny") == 0 && write_text("/proc/self/uid_map", map) == 0;
    snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
    mapped = mapped && write_text("/proc/self/gid_map", map) == 0;
    snprintf(map, sizeof(map), "size=%u", (unsigned)NS_FS);
    if (!mapped || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("nixl-test", dir, "tmpfs", 0, map) != 0) {
        printf("SKIP enospc: cannot mount a small tmpfs in our own namespace here (%s)\n", strerror(errno));
        fflush(NULL);
        _exit(77);
    }
    snprintf(fpath, sizeof(fpath), "%s/f", dir);
    snprintf(gpath, sizeof(gpath), "%s/g", dir);
    int fd = open(fpath, O_RDWR | O_CREAT, 0600), other = open(gpath, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && other >= 0);
    unsigned char oth[NS_OTHER];
    fill(oth, NS_OTHER, 21);
    CHECK(pwrite(other, oth, NS_OTHER, 0) == NS_OTHER);
    size_t bytes = (size_t)NS_PIECES * 4096;
    unsigned char *src = malloc(bytes), *back = malloc(bytes), *got = malloc(4096);
    nixl_agent_t *a = agent_with_posix("pxn", use_uring);
    CHECK(src && back && got);
    if (!a || !src || !back || !got || fd < 0 || other < 0)
        return;
    fill(src, bytes, 22);
    nixl_desc_t mem[2] = {{(uintptr_t)src, bytes, 0, 0, NULL}, {(uintptr_t)back, bytes, 0, 0, NULL}};
    nixl_desc_t files[2] = {{0, 0, (uint32_t)fd, 0, NULL}, {0, 0, (uint32_t)other, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 2, files};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);

    /* 128 KiB into what is left of 64 KiB. */
    static nixl_desc_t md[NS_PIECES], fdd[NS_PIECES];
    for (size_t i = 0; i < NS_PIECES; i++) {
        md[i] = (nixl_desc_t){(uintptr_t)src + i * 4096, 4096, 0, 0, NULL};
        fdd[i] = (nixl_desc_t){i * 4096, 4096, (uint32_t)fd, 0, NULL};
    }
    const char *log;
    nixl_xfer_t *x = xfer_files(a, "pxn", NIXL_OP_WRITE, md, fdd, NS_PIECES);
    CHECK_ST(run_logged(x, &log), NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "No space left on device") != NULL);
    nixl_xfer_release(x);
    /* What landed is the request's bytes where they belong (pieces may
     * complete out of order: a page not written reads as zeros). */
    off_t size = lseek(fd, 0, SEEK_END);
    CHECK(size > 0 && size < (off_t)bytes);
    int bad = 0, landed = 0;
    for (off_t off = 0; off < size; off += 4096) {
        size_t n = (size_t)(size - off < 4096 ? size - off : 4096);
        CHECK(pread(fd, got, n, off) == (ssize_t)n);
        int same = memcmp(got, src + off, n) == 0;
        landed += same;
        bad += !same && !all_zero(got, n);
    }
    CHECK(bad == 0 && landed > 0);
    CHECK(file_has(other, 0, oth, NS_OTHER));
    printf("enospc %s: %d of %d pages landed before the file system was full\n", want_path, landed, NS_PIECES);

    /* Room again: the same agent writes and reads back. */
    CHECK(ftruncate(fd, 0) == 0);
    check_recovers(a, "pxn", want_path, fd, src, back, 0, 16384);
    nixl_agent_destroy(a);
    close(fd);
    close(other);
    free(src);
    free(back);
    free(got);
}

static void test_enospc(const char *use_uring, const char *want_path)
{
    char dir[] = "/var/tmp/nixl-posix-full-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        enospc_child(use_uring, want_path, dir);
        fflush(NULL);
        _exit(failures ? 1 : 0);
    }
    int v = child_verdict(pid, "enospc");
    CHECK(rmdir(dir) == 0); /* the tmpfs went with the child's namespace */
    if (v == 77)
        exit(77);
}

/* /dev/full as a FILE: every WRITE fails with ENOSPC, a READ gives zeros. */
static void test_devfull(const char *use_uring, const char *want_path)
{
    int fd = open("/dev/full", O_RDWR);
    if (fd < 0) {
        printf("SKIP devfull: /dev/full cannot be opened here (%s)\n", strerror(errno));
        exit(77);
    }
    int ok_fd = tmp_file(0);
    CHECK(ok_fd >= 0);
    enum { N = 64 * 1024 };
    unsigned char *src = malloc(N), *back = malloc(N), *copy = malloc(N);
    nixl_agent_t *a = agent_with_posix("pxz", use_uring);
    CHECK(src && back && copy);
    if (!a || !src || !back || !copy)
        return;
    fill(src, N, 31);
    memcpy(copy, src, N);
    nixl_desc_t mem[2] = {{(uintptr_t)src, N, 0, 0, NULL}, {(uintptr_t)back, N, 0, 0, NULL}};
    nixl_desc_t files[2] = {{0, 0, (uint32_t)fd, 0, NULL}, {0, 0, (uint32_t)ok_fd, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 2, files};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    nixl_desc_t m[2] = {{(uintptr_t)src, 4096, 0, 0, NULL}, {(uintptr_t)src + 8192, 8192, 0, 0, NULL}};
    nixl_desc_t b[2] = {{(uintptr_t)back, 4096, 0, 0, NULL}, {(uintptr_t)back + 8192, 8192, 0, 0, NULL}};
    nixl_desc_t f[2] = {{0, 4096, (uint32_t)fd, 0, NULL}, {1 << 20, 8192, (uint32_t)fd, 0, NULL}};
    const char *log;
    nixl_xfer_t *x = xfer_files(a, "pxz", NIXL_OP_WRITE, m, f, 2);
    CHECK_ST(run_logged(x, &log), NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "No space left on device") != NULL);
    nixl_xfer_release(x);
    memset(back, 0xaa, N);
    x = xfer_files(a, "pxz", NIXL_OP_READ, b, f, 2);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    CHECK(all_zero(back, 4096) && all_zero(back + 8192, 8192) && back[4096] == 0xaa && back[8191] == 0xaa &&
          back[16384] == 0xaa);
    CHECK(memcmp(src, copy, N) == 0);
    check_recovers(a, "pxz", want_path, ok_fd, src, back, 0, 16384);
    nixl_agent_destroy(a);
    close(fd);
    close(ok_fd);
    free(src);
    free(back);
    free(copy);
}

/* Unlinked while registered: the fd still names the file, so transfers go
 * on; a query by the old path says it is not there, by the fd that it is. */
static void test_unlinked(const char *use_uring, const char *want_path)
{
    char path[] = "/var/tmp/nixl-posix-unlinked-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    enum { NP = 8, PIECE = 4096 + 24 };
    unsigned char *src = malloc(NP * PIECE), *back = calloc(1, NP * PIECE);
    nixl_agent_t *a = agent_with_posix("pxu", use_uring);
    CHECK(src && back);
    if (!a || fd < 0 || !src || !back)
        return;
    fill(src, NP * PIECE, 41);
    nixl_desc_t mem[2] = {{(uintptr_t)src, NP * PIECE, 0, 0, NULL}, {(uintptr_t)back, NP * PIECE, 0, 0, NULL}};
    nixl_desc_t file = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 1, &file};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    CHECK(unlink(path) == 0);
    nixl_desc_t m[NP], b[NP], f[NP];
    for (size_t i = 0; i < NP; i++) {
        size_t k = (i * 5 + 3) % NP;
        m[i] = (nixl_desc_t){(uintptr_t)src + i * PIECE, PIECE, 0, 0, NULL};
        b[i] = (nixl_desc_t){(uintptr_t)back + i * PIECE, PIECE, 0, 0, NULL};
        f[i] = (nixl_desc_t){k * PIECE, PIECE, (uint32_t)fd, 0, NULL};
    }
    nixl_xfer_t *x = xfer_files(a, "pxu", NIXL_OP_WRITE, m, f, NP);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK(x && nixl_xfer_info(x, &info) == NIXL_OK && strcmp(info.path, want_path) == 0);
    nixl_xfer_release(x);
    int bad = 0;
    for (size_t i = 0; i < NP; i++)
        bad += !file_has(fd, (off_t)f[i].addr, src + i * PIECE, PIECE);
    CHECK(bad == 0);
    x = xfer_files(a, "pxu", NIXL_OP_READ, b, f, NP);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    CHECK(memcmp(back, src, NP * PIECE) == 0);
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    nixl_desc_t q[3] = {{0, 0, 0, (uint32_t)strlen(path), (uint8_t *)path},
                        {0, 0, (uint32_t)fd, 0, NULL},
                        {0, 0, 0, (uint32_t)strlen(proc), (uint8_t *)proc}};
    nixl_dlist_t ql = {NIXL_MEM_FILE, 3, q};
    nixl_mem_info_t qi[3];
    CHECK_ST(nixl_mem_query(a, &ql, "posix", qi), NIXL_OK);
    CHECK(!qi[0].accessible && qi[0].size == 0);
    CHECK(qi[1].accessible && qi[1].size == NP * PIECE && qi[2].accessible && qi[2].size == NP * PIECE);
    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    close(fd);
    free(src);
    free(back);
}

/* A registered fd closed: requests touching it fail at post with EBADF
 * (the line says to deregister first), requests to other files work, also
 * after the agent's view of its registrations was rebuilt, and the closed
 * fd's registration can still be removed. */
static void test_closed(const char *use_uring, const char *want_path)
{
    int fa = tmp_file(0), fb = tmp_file(0);
    CHECK(fa >= 0 && fb >= 0);
    enum { N = 16384 };
    unsigned char *src = malloc(N), *back = malloc(N), *extra = malloc(4096), keep[4096];
    nixl_agent_t *a = agent_with_posix("pxc", use_uring);
    CHECK(src && back && extra);
    if (!a || fa < 0 || fb < 0 || !src || !back || !extra)
        return;
    fill(src, N, 51);
    fill(keep, sizeof(keep), 52);
    CHECK(pwrite(fb, keep, sizeof(keep), 8192) == (ssize_t)sizeof(keep));
    nixl_desc_t mem[2] = {{(uintptr_t)src, N, 0, 0, NULL}, {(uintptr_t)back, N, 0, 0, NULL}};
    nixl_desc_t files[2] = {{0, 0, (uint32_t)fa, 0, NULL}, {0, 0, (uint32_t)fb, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 2, files};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    nixl_desc_t m = {(uintptr_t)src, 4096, 0, 0, NULL}, pa = {0, 4096, (uint32_t)fa, 0, NULL};
    nixl_desc_t pb = {0, 4096, (uint32_t)fb, 0, NULL};
    nixl_xfer_t *xa = xfer_files(a, "pxc", NIXL_OP_WRITE, &m, &pa, 1);
    nixl_xfer_t *xb = xfer_files(a, "pxc", NIXL_OP_WRITE, &m, &pb, 1);
    /* The log file is opened before the close, so that nothing takes the
     * closed number meanwhile (a reused number is another file: see
     * src/backends/posix/README.md). */
    capture_begin();
    close(fa);
    nixl_status_t st = xa ? run(xa) : NIXL_ERR_NULL;
    const char *log = capture_end();
    CHECK_ST(st, NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "Bad file descriptor") != NULL && strstr(log, "deregister") != NULL);
    CHECK_ST(xb ? run(xb) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(file_has(fb, 0, src, 4096) && file_has(fb, 8192, keep, sizeof(keep)));
    nixl_xfer_release(xa);
    nixl_xfer_release(xb);
    /* A registration made now rebuilds the agent's view of itself: the
     * other file still works, the closed one still fails at post. */
    nixl_desc_t e = {(uintptr_t)extra, 4096, 0, 0, NULL};
    nixl_dlist_t el = {NIXL_MEM_DRAM, 1, &e};
    CHECK_ST(nixl_mem_register(a, &el, NULL), NIXL_OK);
    nixl_desc_t m2 = {(uintptr_t)src + 4096, 4096, 0, 0, NULL};
    xb = xfer_files(a, "pxc", NIXL_OP_WRITE, &m2, &pb, 1);
    CHECK_ST(xb ? run(xb) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(xb);
    CHECK(file_has(fb, 0, src + 4096, 4096));
    capture_begin();
    xa = xfer_files(a, "pxc", NIXL_OP_WRITE, &m2, &pa, 1);
    st = xa ? run(xa) : NIXL_ERR_NULL;
    log = capture_end();
    CHECK_ST(st, NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "Bad file descriptor") != NULL);
    nixl_xfer_release(xa);
    /* Deregistered (the fd need not be open for that): refused at creation. */
    nixl_dlist_t fal = {NIXL_MEM_FILE, 1, &files[0]};
    CHECK_ST(nixl_mem_deregister(a, &fal, NULL), NIXL_OK);
    nixl_dlist_t l1 = {NIXL_MEM_DRAM, 1, &m}, r1 = {NIXL_MEM_FILE, 1, &pa};
    xa = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l1, &r1, "pxc", NULL, &xa), NIXL_ERR_NOT_REGISTERED);
    CHECK(xa == NULL);
    check_recovers(a, "pxc", want_path, fb, src, back, 0, N);
    nixl_agent_destroy(a);
    close(fb);
    free(src);
    free(back);
    free(extra);
}

/* READs at and across a file's end: XFER_FAILED, the log names the piece
 * and how much was read; memory outside the piece is untouched. */
static void test_eof(const char *use_uring, const char *want_path)
{
    int fd = tmp_file(0);
    CHECK(fd >= 0);
    enum { FSZ = 10000, N = 32768 };
    unsigned char *src = malloc(N), *back = malloc(N), img[FSZ];
    nixl_agent_t *a = agent_with_posix("pxo", use_uring);
    CHECK(src && back);
    if (!a || fd < 0 || !src || !back)
        return;
    fill(img, FSZ, 61);
    fill(src, N, 62);
    CHECK(pwrite(fd, img, FSZ, 0) == FSZ);
    nixl_desc_t mem[2] = {{(uintptr_t)src, N, 0, 0, NULL}, {(uintptr_t)back, N, 0, 0, NULL}};
    nixl_desc_t file = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 1, &file};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    const char *log;
    /* At the end: nothing to read. */
    memset(back, 0xcc, N);
    nixl_desc_t b1 = {(uintptr_t)back + 4096, 4096, 0, 0, NULL}, f1 = {FSZ, 4096, (uint32_t)fd, 0, NULL};
    nixl_xfer_t *x = xfer_files(a, "pxo", NIXL_OP_READ, &b1, &f1, 1);
    CHECK_ST(run_logged(x, &log), NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "reaches past the end of the file (0 bytes read)") != NULL);
    nixl_xfer_release(x);
    /* Across it: what the file has arrives, the request still fails. */
    nixl_desc_t f2 = {FSZ - 1000, 4096, (uint32_t)fd, 0, NULL};
    x = xfer_files(a, "pxo", NIXL_OP_READ, &b1, &f2, 1);
    CHECK_ST(run_logged(x, &log), NIXL_ERR_XFER_FAILED);
    CHECK(strstr(log, "reaches past the end of the file (1000 bytes read)") != NULL);
    nixl_xfer_release(x);
    CHECK(memcmp(back + 4096, img + FSZ - 1000, 1000) == 0);
    int outside = 1;
    for (size_t i = 0; i < N; i++)
        if ((i < 4096 || i >= 8192) && back[i] != 0xcc)
            outside = 0;
    CHECK(outside);
    /* The file did not change, and a READ inside it works. */
    CHECK(lseek(fd, 0, SEEK_END) == FSZ && file_has(fd, 0, img, FSZ));
    nixl_desc_t b3 = {(uintptr_t)back, FSZ, 0, 0, NULL}, f3 = {0, FSZ, (uint32_t)fd, 0, NULL};
    x = xfer_files(a, "pxo", NIXL_OP_READ, &b3, &f3, 1);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK(x && nixl_xfer_info(x, &info) == NIXL_OK && strcmp(info.path, want_path) == 0);
    nixl_xfer_release(x);
    CHECK(memcmp(back, img, FSZ) == 0);
    nixl_agent_destroy(a);
    close(fd);
    free(src);
    free(back);
}

/* Whether this kernel lets us make a ring at all (the backend says so in
 * its log and takes posix.sync): a skip, never a pass. */
static void need_uring(const char *what)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    long fd = syscall(__NR_io_uring_setup, 4, &p);
    if (fd < 0) {
        printf("SKIP %s: io_uring_setup refused here (%s)\n", what, strerror(errno));
        exit(77);
    }
    close((int)fd);
}

/* Pieces that follow each other in a file are one vectored operation (up
 * to 1,024 of them): 3,000 pages of 1,000 B (not a multiple of anything),
 * memory shuffled, file in order, so operations of 1,024, 1,024 and 952
 * pieces; plus a run that a gap in the file and another fd split.  WRITE,
 * check with pread, READ back into other memory; then a READ of a run that
 * the file's end cuts in its middle: XFER_FAILED, the pages before the
 * end arrived, the memory after them untouched. */
static void test_vectored(const char *use_uring, const char *want_path)
{
    enum { NP = 3000, PAGE = 1000, TAIL = 40 };
    nixl_agent_t *a = agent_with_posix("pxv", use_uring);
    int fd = tmp_file(0), fd2 = tmp_file(0);
    CHECK(fd >= 0 && fd2 >= 0);
    size_t bytes = (size_t)(NP + TAIL) * PAGE;
    unsigned char *src = malloc(bytes), *back = malloc(bytes), *img = malloc(PAGE);
    CHECK(a && src && back && img);
    if (!a || fd < 0 || fd2 < 0 || !src || !back || !img)
        return;
    fill(src, bytes, 3);
    nixl_desc_t mem[2] = {{(uintptr_t)src, bytes, 0, 0, NULL}, {(uintptr_t)back, bytes, 0, 0, NULL}};
    nixl_desc_t files[2] = {{0, 0, (uint32_t)fd, 0, NULL}, {0, 0, (uint32_t)fd2, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem}, fl = {NIXL_MEM_FILE, 2, files};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    static nixl_desc_t ld[NP + TAIL], fd_[NP + TAIL], bd[NP + TAIL];
    for (size_t i = 0; i < NP + TAIL; i++) {
        size_t m = (i * 1543 + 11) % (NP + TAIL); /* memory slot of file page i */
        ld[i] = (nixl_desc_t){(uintptr_t)src + m * PAGE, PAGE, 0, 0, NULL};
        bd[i] = (nixl_desc_t){(uintptr_t)back + m * PAGE, PAGE, 0, 0, NULL};
        if (i < NP)
            fd_[i] = (nixl_desc_t){(uint64_t)i * PAGE, PAGE, (uint32_t)fd, 0, NULL};
        else /* the tail: fd2, with a gap after its first half */
            fd_[i] = (nixl_desc_t){(uint64_t)(i - NP + (i - NP >= TAIL / 2 ? 7 : 0)) * PAGE, PAGE, (uint32_t)fd2, 0,
                                   NULL};
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, NP + TAIL, ld}, r = {NIXL_MEM_FILE, NP + TAIL, fd_},
                 b = {NIXL_MEM_DRAM, NP + TAIL, bd};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "pxv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_info_t info;
    CHECK_ST(x ? nixl_xfer_info(x, &info) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(x && strcmp(info.path, want_path) == 0 && info.bytes == bytes);
    nixl_xfer_release(x);
    int bad = 0;
    for (size_t i = 0; i < NP + TAIL; i++) {
        int f = i < NP ? fd : fd2;
        ssize_t got = pread(f, img, PAGE, (off_t)fd_[i].addr);
        bad += got != PAGE || memcmp(img, (void *)(uintptr_t)ld[i].addr, PAGE) != 0;
    }
    if (bad)
        fprintf(stderr, "%s vectored: %d of %d pages wrong in the files after WRITE\n", want_path, bad, NP + TAIL);
    CHECK(bad == 0);
    memset(back, 0, bytes);
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &b, &r, "pxv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(memcmp(back, src, bytes) == 0);
    /* Posted again: the same bytes again (every operation starts over). */
    memset(back, 0, bytes);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    CHECK(memcmp(back, src, bytes) == 0);
    nixl_xfer_release(x);

    /* The end of fd cut in the middle of a run: pages 0..NP-1 are there,
     * ask for NP + 5 in order. */
    enum { ASK = NP + 5 };
    static nixl_desc_t pd[ASK], pm[ASK];
    for (size_t i = 0; i < ASK; i++) {
        pd[i] = (nixl_desc_t){(uint64_t)i * PAGE, PAGE, (uint32_t)fd, 0, NULL};
        pm[i] = (nixl_desc_t){(uintptr_t)back + i * PAGE, PAGE, 0, 0, NULL};
    }
    memset(back, 0xee, bytes);
    nixl_dlist_t pl = {NIXL_MEM_FILE, ASK, pd}, mlist = {NIXL_MEM_DRAM, ASK, pm};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &mlist, &pl, "pxv", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_ERR_XFER_FAILED);
    nixl_xfer_release(x);
    int before = 0, after = 0;
    for (size_t i = 0; i < NP; i++) {
        ssize_t got = pread(fd, img, PAGE, (off_t)i * PAGE);
        before += got != PAGE || memcmp(img, back + i * PAGE, PAGE) != 0;
    }
    for (size_t k = (size_t)NP * PAGE; k < bytes; k++)
        after += back[k] != 0xee;
    if (before || after)
        fprintf(stderr, "%s vectored EOF: %d pages before the end wrong, %d bytes after it touched\n", want_path,
                before, after);
    CHECK(before == 0 && after == 0);

    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &ml, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    close(fd);
    close(fd2);
    free(src);
    free(back);
    free(img);
}

/* A deadline is enforced (the backend cancels): a WRITE of 100,000 pieces
 * of 256 B at scattered offsets (no two follow each other in the file, so
 * 100,000 operations) with a 1 ms deadline, one thread or a small ring,
 * ends in NIXL_ERR_TIMEOUT with part of it written; the file then stays as
 * it is (nothing lands late); without a deadline the same request moves
 * every piece. */
static void test_deadline(const char *use_uring, const char *want_path)
{
    enum { NP = 100000, PIECE = 256 };
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "pxd"};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    nixl_param_t p[3] = {{"use_uring", use_uring}, {"queue_depth", "16"}, {"threads", "1"}};
    nixl_backend_t *be = NULL;
    CHECK_ST(a ? nixl_backend_create(a, "posix", p, 3, &be) : NIXL_ERR_NULL, NIXL_OK);
    int fd = tmp_file(0);
    size_t bytes = (size_t)NP * PIECE;
    unsigned char *src = malloc(bytes), *img = malloc(2 * bytes), *img2 = malloc(2 * bytes);
    static nixl_desc_t ld[NP], fdd[NP];
    CHECK(be && fd >= 0 && src && img && img2);
    if (!be || fd < 0 || !src || !img || !img2)
        return;
    fill(src, bytes, 5);
    CHECK(ftruncate(fd, (off_t)(2 * bytes)) == 0);
    nixl_desc_t m = {(uintptr_t)src, bytes, 0, 0, NULL}, f = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 1, &m}, fl = {NIXL_MEM_FILE, 1, &f};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    for (size_t i = 0; i < NP; i++) {
        ld[i] = (nixl_desc_t){(uintptr_t)src + i * PIECE, PIECE, 0, 0, NULL};
        fdd[i] = (nixl_desc_t){((i * 7919) % NP) * 2 * PIECE, PIECE, (uint32_t)fd, 0, NULL}; /* gaps between */
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, NP, ld}, r = {NIXL_MEM_FILE, NP, fdd};
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_TIMEOUT_MS, .timeout_ms = 1};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "pxd", &opt, &x), NIXL_OK);
    nixl_status_t st = x ? run(x) : NIXL_ERR_NULL;
    if (st != NIXL_ERR_TIMEOUT)
        fprintf(stderr, "%s deadline: %s, expected NIXL_ERR_TIMEOUT\n", want_path, nixl_strerror(st));
    CHECK(st == NIXL_ERR_TIMEOUT);
    CHECK(pread(fd, img, 2 * bytes, 0) == (ssize_t)(2 * bytes));
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK(pread(fd, img2, 2 * bytes, 0) == (ssize_t)(2 * bytes));
    CHECK(memcmp(img, img2, 2 * bytes) == 0); /* nothing landed after the status said so */
    size_t landed = 0;
    for (size_t i = 0; i < NP; i++) {
        unsigned char got[PIECE];
        landed += pread(fd, got, PIECE, (off_t)fdd[i].addr) == PIECE && memcmp(got, src + i * PIECE, PIECE) == 0;
    }
    printf("%s deadline: %zu of %d pieces had landed when it was canceled\n", want_path, landed, NP);
    CHECK(landed < NP);
    nixl_xfer_release(x);
    /* Without a deadline: every piece. */
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "pxd", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    int bad = 0;
    for (size_t i = 0; i < NP; i++) {
        unsigned char got[PIECE];
        bad += pread(fd, got, PIECE, (off_t)fdd[i].addr) != PIECE || memcmp(got, src + i * PIECE, PIECE) != 0;
    }
    CHECK(bad == 0);
    CHECK_ST(nixl_mem_deregister(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_deregister(a, &ml, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    close(fd);
    free(src);
    free(img);
    free(img2);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    static const struct {
        const char *name;
        void (*fn)(const char *use_uring, const char *want_path);
    } faults[] = {{"fsize", test_fsize},       {"enospc", test_enospc}, {"devfull", test_devfull},
                  {"unlinked", test_unlinked}, {"closed", test_closed}, {"eof", test_eof},
                  {"vectored", test_vectored}, {"deadline", test_deadline}};
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
        if (strcmp(c, faults[i].name) != 0)
            continue;
        const char *path = argc > 2 ? argv[2] : "";
        if (strcmp(path, "uring") != 0 && strcmp(path, "sync") != 0) {
            fprintf(stderr, "usage: test_posix %s uring|sync\n", c);
            return 2;
        }
        int uring = strcmp(path, "uring") == 0;
        if (uring)
            need_uring(c);
        faults[i].fn(uring ? "1" : "0", uring ? "posix.uring" : "posix.sync");
        if (failures) {
            fprintf(stderr, "test_posix %s %s: %d check(s) failed\n", c, path, failures);
            return 1;
        }
        printf("test_posix %s %s: all checks passed\n", c, path);
        return 0;
    }
    if (strcmp(c, "uring") == 0) {
        need_uring("uring");
        test_roundtrip("1", "posix.uring");
    }
    else if (strcmp(c, "sync") == 0)
        test_roundtrip("0", "posix.sync");
    else if (strcmp(c, "odirect") == 0)
        test_odirect();
    else if (strcmp(c, "errors") == 0)
        test_errors();
    else {
        fprintf(stderr, "usage: test_posix uring|sync|odirect|errors, or test_posix "
                        "fsize|enospc|devfull|unlinked|closed|eof|vectored|deadline uring|sync\n");
        return 2;
    }
    if (failures) {
        fprintf(stderr, "test_posix %s: %d check(s) failed\n", c, failures);
        return 1;
    }
    printf("test_posix %s: all checks passed\n", c);
    return 0;
}
