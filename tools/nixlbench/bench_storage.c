/*
 * bench_storage.c - nixlbench --storage: host memory to and from a file
 * through the posix backend, against a raw io_uring loop of the same
 * pieces in the same run.
 *
 * One process, one file (in --dir, unlinked at the end; --direct opens it
 * with O_DIRECT), --batch pieces of --block bytes whose file offsets are a
 * permutation of the memory order (so nothing merges).  A measure is
 * --iters posts of the one request (library) or --iters rounds of the raw
 * loop (every piece one io_uring read or write, --depth in flight, the
 * backend's own queue depth); library and raw measures alternate, A B A B,
 * for --pairs pairs, and the row reports the median of the per-pair ratios
 * with their min-max (README: "Benchmarks that lie by chance").  The bytes
 * are checked after the library's READ (every piece is what was written)
 * and after its WRITE (pread of every piece).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef BENCH_HAVE_URING
#include <liburing.h>
#endif

#include "bench.h"
#include "bench_storage.h"

typedef struct st_opts {
    const char *dir;
    uint64_t block, batch, iters, pairs, depth;
    int write, direct;
    const char *json;
} st_opts_t;

int bench_storage_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--storage") == 0)
            return 1;
    return 0;
}

static void st_usage(FILE *f)
{
    fprintf(f, "usage: nixlbench --storage [--dir DIR] [--op write|read] [--block SIZE] [--batch N] [--iters N]\n"
               "                 [--pairs N] [--depth N] [--direct] [--json FILE]\n"
               "  host memory to and from one file in DIR (default /var/tmp) through the posix backend,\n"
               "  against a raw io_uring loop of the same pieces, measured alternately (--pairs pairs)\n");
}

static uint64_t st_num(const char *opt, const char *v)
{
    uint64_t x;
    if (bench_parse_size(v, &x) != 0 || x == 0)
        bench_die("%s: \"%s\" is not a positive size", opt, v);
    return x;
}

static void st_parse(int argc, char **argv, st_opts_t *o)
{
    *o = (st_opts_t){.dir = "/var/tmp", .block = 1 << 20, .batch = 64, .iters = 5, .pairs = 5, .depth = 64,
                     .write = 1};
    static const struct option lo[] = {
        {"storage", no_argument, 0, 's'}, {"dir", required_argument, 0, 'd'}, {"op", required_argument, 0, 'o'},
        {"block", required_argument, 0, 'b'}, {"batch", required_argument, 0, 'n'},
        {"iters", required_argument, 0, 'i'}, {"pairs", required_argument, 0, 'p'},
        {"depth", required_argument, 0, 'q'}, {"direct", no_argument, 0, 'D'}, {"json", required_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 's': break;
        case 'd': o->dir = optarg; break;
        case 'o':
            if (strcmp(optarg, "write") && strcmp(optarg, "read"))
                bench_die("--op: \"%s\" is neither read nor write", optarg);
            o->write = strcmp(optarg, "write") == 0;
            break;
        case 'b': o->block = st_num("--block", optarg); break;
        case 'n': o->batch = st_num("--batch", optarg); break;
        case 'i': o->iters = st_num("--iters", optarg); break;
        case 'p': o->pairs = st_num("--pairs", optarg); break;
        case 'q': o->depth = st_num("--depth", optarg); break;
        case 'D': o->direct = 1; break;
        case 'j': o->json = optarg; break;
        case 'h': st_usage(stdout); exit(0);
        default: st_usage(stderr); exit(2);
        }
    }
    if (o->batch > (1u << 20) || o->depth > 32768 || o->block > (1ull << 30) || o->pairs > 1000)
        bench_die("--storage: batch <= 1M, depth <= 32768, block <= 1G, pairs <= 1000");
}

/* File slot of memory piece i: a permutation (odd multiplier mod batch). */
static uint64_t st_slot(uint64_t i, uint64_t n)
{
    uint64_t k = n > 2 ? (n / 2) | 1 : 1;
    while (n % k == 0 && k > 1)
        k += 2;
    return (i * k + 1) % n;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#ifdef BENCH_HAVE_URING
/* The raw limit: every piece one io_uring op, depth in flight. */
static uint64_t st_raw(struct io_uring *ring, int fd, unsigned char *buf, const st_opts_t *o)
{
    uint64_t t0 = bench_now_ns();
    for (uint64_t it = 0; it < o->iters; it++) {
        uint64_t next = 0, done = 0, inflight = 0;
        while (done < o->batch) {
            while (next < o->batch && inflight < o->depth) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
                if (!sqe)
                    break;
                void *p = buf + next * o->block;
                off_t at = (off_t)(st_slot(next, o->batch) * o->block);
                if (o->write)
                    io_uring_prep_write(sqe, fd, p, (unsigned)o->block, at);
                else
                    io_uring_prep_read(sqe, fd, p, (unsigned)o->block, at);
                next++;
                inflight++;
            }
            io_uring_submit(ring);
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(ring, &cqe) != 0)
                bench_die("raw io_uring: wait failed");
            do { /* every completion there is, as the backend reaps them */
                if (cqe->res != (int)o->block)
                    bench_die("raw io_uring: a piece moved %d of %" PRIu64 " bytes", cqe->res, o->block);
                io_uring_cqe_seen(ring, cqe);
                inflight--;
                done++;
            } while (io_uring_peek_cqe(ring, &cqe) == 0);
        }
    }
    return bench_now_ns() - t0;
}
#endif

static uint64_t st_lib(nixl_xfer_t *x, const st_opts_t *o)
{
    uint64_t t0 = bench_now_ns();
    for (uint64_t it = 0; it < o->iters; it++) {
        nixl_status_t st = nixl_xfer_post(x);
        while (st == NIXL_IN_PROG)
            st = nixl_xfer_status(x);
        bench_check(st, "storage request");
    }
    return bench_now_ns() - t0;
}

int bench_storage_main(int argc, char **argv)
{
    st_opts_t o;
    st_parse(argc, argv, &o);
#ifndef BENCH_HAVE_URING
    (void)o;
    bench_die("--storage: nixlbench was built without liburing (the raw limit is an io_uring loop)");
#else
    char path[512];
    snprintf(path, sizeof(path), "%s/nixlbench-storage-%d", o.dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (o.direct ? O_DIRECT : 0), 0600);
    if (fd < 0)
        bench_die("--storage: open %s: %s", path, strerror(errno));
    unlink(path);
    size_t bytes = (size_t)(o.block * o.batch);
    unsigned char *buf = NULL, *want = NULL;
    if (posix_memalign((void **)&buf, 4096, bytes) != 0 || posix_memalign((void **)&want, 4096, bytes) != 0)
        bench_die("--storage: no memory for %zu bytes", bytes);
    for (size_t i = 0; i < bytes; i++)
        want[i] = (unsigned char)(i * 37 + (i >> 12));
    memcpy(buf, want, bytes);
    /* The file holds the pattern at the permuted offsets before anything is measured. */
    for (uint64_t i = 0; i < o.batch; i++)
        if (pwrite(fd, want + i * o.block, o.block, (off_t)(st_slot(i, o.batch) * o.block)) != (ssize_t)o.block)
            bench_die("--storage: writing the file: %s", strerror(errno));
    fsync(fd);

    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "nixlbench-storage"};
    nixl_agent_t *a;
    bench_check(nixl_agent_create(&cfg, &a), "nixl_agent_create");
    char depth[32];
    snprintf(depth, sizeof(depth), "%" PRIu64, o.depth);
    nixl_param_t p = {"queue_depth", depth};
    nixl_backend_t *b;
    bench_check(nixl_backend_create(a, "posix", &p, 1, &b), "nixl_backend_create(posix)");
    nixl_desc_t md = {(uintptr_t)buf, bytes, 0, 0, NULL}, fdesc = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 1, &md}, fl = {NIXL_MEM_FILE, 1, &fdesc};
    bench_check(nixl_mem_register(a, &ml, NULL), "register memory");
    bench_check(nixl_mem_register(a, &fl, NULL), "register file");
    nixl_desc_t *ld = calloc(o.batch, sizeof(*ld)), *rd = calloc(o.batch, sizeof(*rd));
    if (!ld || !rd)
        bench_die("--storage: no memory for the lists");
    for (uint64_t i = 0; i < o.batch; i++) {
        ld[i] = (nixl_desc_t){(uintptr_t)buf + i * o.block, o.block, 0, 0, NULL};
        rd[i] = (nixl_desc_t){st_slot(i, o.batch) * o.block, o.block, (uint32_t)fd, 0, NULL};
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, o.batch, ld}, r = {NIXL_MEM_FILE, o.batch, rd};
    nixl_xfer_t *x;
    bench_check(nixl_xfer_create(a, o.write ? NIXL_OP_WRITE : NIXL_OP_READ, &l, &r, "nixlbench-storage", NULL, &x),
                "nixl_xfer_create(storage)");
    /* Correctness first: one post, every piece checked. */
    if (!o.write)
        memset(buf, 0, bytes);
    st_lib(x, &(st_opts_t){.iters = 1});
    if (!o.write && memcmp(buf, want, bytes) != 0)
        bench_die("--storage: READ brought back other bytes than the file holds");
    unsigned char *piece = NULL;
    if (posix_memalign((void **)&piece, 4096, o.block) != 0)
        bench_die("--storage: no memory");
    for (uint64_t i = 0; o.write && piece && i < o.batch; i++)
        if (pread(fd, piece, o.block, (off_t)rd[i].addr) != (ssize_t)o.block ||
            memcmp(piece, want + i * o.block, o.block) != 0)
            bench_die("--storage: piece %" PRIu64 " is not in the file after WRITE", i);
    free(piece);
    nixl_xfer_info_t info;
    bench_check(nixl_xfer_info(x, &info), "nixl_xfer_info");

    struct io_uring ring;
    int rc = io_uring_queue_init((unsigned)o.depth, &ring, 0);
    if (rc != 0)
        bench_die("--storage: io_uring_queue_init: %s (the raw limit needs io_uring)", strerror(-rc));
    st_raw(&ring, fd, buf, &(st_opts_t){.iters = 1, .batch = o.batch, .block = o.block, .depth = o.depth,
                                        .write = o.write}); /* warm-up */
    double *ratio = calloc(o.pairs, sizeof(double)), *lg = calloc(o.pairs, sizeof(double)),
           *rg = calloc(o.pairs, sizeof(double));
    if (!ratio || !lg || !rg)
        bench_die("--storage: no memory");
    double moved = (double)bytes * (double)o.iters;
    for (uint64_t k = 0; k < o.pairs; k++) {
        lg[k] = moved / (double)st_lib(x, &o);
        rg[k] = moved / (double)st_raw(&ring, fd, buf, &o);
        ratio[k] = lg[k] / rg[k];
    }
    double lo = ratio[0], hi = ratio[0];
    for (uint64_t k = 1; k < o.pairs; k++) {
        lo = ratio[k] < lo ? ratio[k] : lo;
        hi = ratio[k] > hi ? ratio[k] : hi;
    }
    qsort(ratio, o.pairs, sizeof(double), cmp_d);
    qsort(lg, o.pairs, sizeof(double), cmp_d);
    qsort(rg, o.pairs, sizeof(double), cmp_d);
    double med = ratio[o.pairs / 2], lmed = lg[o.pairs / 2], rmed = rg[o.pairs / 2];
    printf("# nixlbench --storage: %s %" PRIu64 " x %" PRIu64 " B, file in %s%s, depth %" PRIu64 ", %" PRIu64
           " pairs of %" PRIu64 " posts; limit: raw io_uring loop of the same pieces\n",
           o.write ? "write" : "read", o.batch, o.block, o.dir, o.direct ? " (O_DIRECT)" : " (page cache)", o.depth,
           o.pairs, o.iters);
    printf("%8s %8s %10s %10s %7s %13s  %s\n", "block", "batch", "GB/s", "limit GB/s", "ratio", "(min-max)", "path");
    printf("%8" PRIu64 " %8" PRIu64 " %10.2f %10.2f %7.3f %6.3f-%-6.3f  %s\n", o.block, o.batch, lmed, rmed, med, lo,
           hi, info.path);
    if (o.json) {
        FILE *f = fopen(o.json, "a");
        if (!f)
            bench_die("--json %s: %s", o.json, strerror(errno));
        fprintf(f,
                "{\"mode\":\"storage\",\"op\":\"%s\",\"block_size\":%" PRIu64 ",\"batch_size\":%" PRIu64
                ",\"direct\":%d,\"gbps\":%.3f,\"limit_gbps\":%.3f,\"ratio\":%.4f,\"ratio_min\":%.4f,"
                "\"ratio_max\":%.4f,\"pairs\":%" PRIu64 ",\"path\":\"%s\"}\n",
                o.write ? "write" : "read", o.block, o.batch, o.direct, lmed, rmed, med, lo, hi, o.pairs, info.path);
        fclose(f);
    }
    io_uring_queue_exit(&ring);
    nixl_xfer_release(x);
    bench_check(nixl_mem_deregister(a, &fl, NULL), "deregister file");
    bench_check(nixl_mem_deregister(a, &ml, NULL), "deregister memory");
    nixl_agent_destroy(a);
    close(fd);
    free(ld);
    free(rd);
    free(buf);
    free(want);
    free(ratio);
    free(lg);
    free(rg);
    return 0;
#endif
}
