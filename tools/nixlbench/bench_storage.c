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
 * backend's own queue depth); library and raw measures take turns (with
 * fio's, below) for --pairs pairs, and the row reports the median of the per-pair ratios
 * with their min-max (README: "Benchmarks that lie by chance").  The bytes
 * are checked after the library's READ (every piece is what was written)
 * and after its WRITE (pread of every piece).
 *
 * fio (bench_fio.c) takes a third turn in each pair (the turns rotate,
 * A B C, B C A, C A B, and a WRITE's dirty pages are written back between
 * turns, untimed, so none pays for another's writeback): the same
 * file, block, depth and direction through its io_uring engine, random
 * offsets over the same bytes (its random map touches every piece once a
 * pass), for --fio-ms; the row adds the median of the per-pair ratios
 * library / fio.  fio that is absent, fails or prints what the reader
 * cannot read is said in the row (and, with --need-fio, fails the run).
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
#include "bench_fio.h"
#include "bench_storage.h"

typedef struct st_opts {
    const char *dir;
    uint64_t block, batch, iters, pairs, depth;
    int write, direct;
    const char *json;
    const char *fio;    /* the program (PATH lookup), NULL with --no-fio */
    int need_fio;       /* its absence or failure fails the run */
    uint64_t fio_ms;    /* one fio run */
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
               "                 [--fio PROG] [--fio-ms N] [--no-fio] [--need-fio]\n"
               "  host memory to and from one file in DIR (default /var/tmp) through the posix backend,\n"
               "  against a raw io_uring loop of the same pieces and fio (PROG, default fio from PATH, N ms\n"
               "  a run, default 250) with the same pattern, measured in turns (--pairs rounds);\n"
               "  --no-fio: no fio turn; --need-fio: exit 1 when fio is absent, fails or is unreadable\n");
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
                     .write = 1, .fio = "fio", .fio_ms = 250};
    static const struct option lo[] = {
        {"storage", no_argument, 0, 's'}, {"dir", required_argument, 0, 'd'}, {"op", required_argument, 0, 'o'},
        {"block", required_argument, 0, 'b'}, {"batch", required_argument, 0, 'n'},
        {"iters", required_argument, 0, 'i'}, {"pairs", required_argument, 0, 'p'},
        {"depth", required_argument, 0, 'q'}, {"direct", no_argument, 0, 'D'}, {"json", required_argument, 0, 'j'},
        {"fio", required_argument, 0, 'F'}, {"fio-ms", required_argument, 0, 'M'},
        {"no-fio", no_argument, 0, 'N'}, {"need-fio", no_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *prog = "fio";
    int no_fio = 0;
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
        case 'F': prog = optarg; break;
        case 'M': o->fio_ms = st_num("--fio-ms", optarg); break;
        case 'N': no_fio = 1; break;
        case 'R': o->need_fio = 1; break;
        case 'h': st_usage(stdout); exit(0);
        default: st_usage(stderr); exit(2);
        }
    }
    if (o->batch > (1u << 20) || o->depth > 32768 || o->block > (1ull << 30) || o->pairs > 1000)
        bench_die("--storage: batch <= 1M, depth <= 32768, block <= 1G, pairs <= 1000");
    if (no_fio && o->need_fio)
        bench_die("--storage: --no-fio and --need-fio contradict each other");
    if (o->fio_ms > 600000)
        bench_die("--storage: --fio-ms <= 600000");
    o->fio = no_fio ? NULL : prog;
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

/* The median of v[0..n) (sorted in place), with its min and max when asked. */
static double st_median(double *v, uint64_t n, double *lo, double *hi)
{
    qsort(v, n, sizeof(double), cmp_d);
    if (lo)
        *lo = v[0];
    if (hi)
        *hi = v[n - 1];
    return v[n / 2];
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
           *rg = calloc(o.pairs, sizeof(double)), *fratio = calloc(o.pairs, sizeof(double)),
           *fg = calloc(o.pairs, sizeof(double));
    if (!ratio || !lg || !rg || !fratio || !fg)
        bench_die("--storage: no memory");
    double moved = (double)bytes * (double)o.iters;
    bench_fio_job_t job = {.prog = o.fio, .fd = fd, .write = o.write, .direct = o.direct, .block = o.block,
                           .size = bytes, .depth = o.depth, .ms = o.fio_ms};
    bench_fio_status_t fst = BENCH_FIO_OK;
    char fwhy[256] = "";
    for (uint64_t k = 0; k < o.pairs; k++) {
        /* The turns rotate (library, raw, fio; raw, fio, library; ...) so no
         * one of them always follows another; each WRITE turn's dirty pages
         * are written back before the next turn (untimed), which would
         * otherwise pay for them. */
        for (unsigned t = 0; t < 3; t++) {
            switch ((t + k) % 3) {
            case 0: lg[k] = moved / (double)st_lib(x, &o); break;
            case 1: rg[k] = moved / (double)st_raw(&ring, fd, buf, &o); break;
            default:
                if (o.fio && fst == BENCH_FIO_OK) {
                    double bps = 0;
                    fst = bench_fio_run(&job, &bps, fwhy, sizeof(fwhy));
                    fg[k] = bps / 1e9;
                }
                break;
            }
            if (o.write)
                fdatasync(fd);
        }
        ratio[k] = lg[k] / rg[k];
        fratio[k] = o.fio && fst == BENCH_FIO_OK ? lg[k] / fg[k] : 0;
    }
    double lo, hi, med = st_median(ratio, o.pairs, &lo, &hi), lmed = st_median(lg, o.pairs, NULL, NULL),
                   rmed = st_median(rg, o.pairs, NULL, NULL);
    int have_fio = o.fio && fst == BENCH_FIO_OK;
    double flo = 0, fhi = 0, fmed = have_fio ? st_median(fratio, o.pairs, &flo, &fhi) : 0,
           fgmed = have_fio ? st_median(fg, o.pairs, NULL, NULL) : 0;
    char fcol[64];
    if (have_fio)
        snprintf(fcol, sizeof(fcol), "%10.2f %7.3f %6.3f-%-6.3f", fgmed, fmed, flo, fhi);
    else if (o.fio)
        snprintf(fcol, sizeof(fcol), "fio: %-27s", bench_fio_status_name(fst));
    else
        snprintf(fcol, sizeof(fcol), "%-32s", "fio: not run (--no-fio)");
    printf("# nixlbench --storage: %s %" PRIu64 " x %" PRIu64 " B, file in %s%s, depth %" PRIu64 ", %" PRIu64
           " pairs of %" PRIu64 " posts; limit: raw io_uring loop of the same pieces",
           o.write ? "write" : "read", o.batch, o.block, o.dir, o.direct ? " (O_DIRECT)" : " (page cache)", o.depth,
           o.pairs, o.iters);
    if (o.fio)
        printf("; fio: %s, %" PRIu64 " ms a run", o.fio, o.fio_ms);
    printf("\n");
    printf("%8s %8s %10s %10s %7s %13s %10s %7s %13s  %s\n", "block", "batch", "GB/s", "limit GB/s", "ratio",
           "(min-max)", "fio GB/s", "vs fio", "(min-max)", "path");
    printf("%8" PRIu64 " %8" PRIu64 " %10.2f %10.2f %7.3f %6.3f-%-6.3f %s  %s\n", o.block, o.batch, lmed, rmed, med,
           lo, hi, fcol, info.path);
    if (o.fio && !have_fio)
        printf("# fio: %s: %s\n", bench_fio_status_name(fst), fwhy);
    if (o.json) {
        FILE *f = fopen(o.json, "a");
        if (!f)
            bench_die("--json %s: %s", o.json, strerror(errno));
        fprintf(f,
                "{\"mode\":\"storage\",\"op\":\"%s\",\"block_size\":%" PRIu64 ",\"batch_size\":%" PRIu64
                ",\"direct\":%d,\"gbps\":%.3f,\"limit_gbps\":%.3f,\"ratio\":%.4f,\"ratio_min\":%.4f,"
                "\"ratio_max\":%.4f,\"pairs\":%" PRIu64 ",\"path\":\"%s\",\"fio\":\"%s\"",
                o.write ? "write" : "read", o.block, o.batch, o.direct, lmed, rmed, med, lo, hi, o.pairs, info.path,
                o.fio ? bench_fio_status_name(fst) : "not run");
        if (have_fio)
            fprintf(f, ",\"fio_gbps\":%.3f,\"ratio_fio\":%.4f,\"ratio_fio_min\":%.4f,\"ratio_fio_max\":%.4f", fgmed,
                    fmed, flo, fhi);
        fprintf(f, "}\n");
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
    free(fratio);
    free(fg);
    if (o.need_fio && !have_fio) {
        fprintf(stderr, "nixlbench: --need-fio: fio %s: %s\n", bench_fio_status_name(fst), fwhy);
        return 1;
    }
    return 0;
#endif
}
