/*
 * bench_gds.c - nixlbench --gds: GPU memory to a file and back through the
 * gds backend, against a raw cuFile loop of the same blocks in the same run.
 *
 * One buffer of --size bytes on GPU 0, one file in --dir (O_DIRECT with
 * --direct), blocks of --block bytes at permuted file offsets.  Each pair
 * times the library's WRITE of every block, then the raw loop's (one
 * cuFileWrite per block, one thread, the buffer registered with cuFile the
 * way the backend registers it), then the same for READ; library and raw
 * alternate so drift hits both.  Before any timing, one library WRITE and
 * READ round trip is checked byte for byte.  The report names the path the
 * requests took (gds.direct or gds.compat: with compat, both sides are
 * cuFile's host-staged mode).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "bench_gds.h"
#include "../../src/backends/gds/cufile_api.h"

typedef struct gd_opts {
    const char *dir;
    uint64_t size, block, pairs;
    int direct;
    const char *threads;
} gd_opts_t;

int bench_gds_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--gds") == 0)
            return 1;
    return 0;
}

static void gd_parse(int argc, char **argv, gd_opts_t *o)
{
    *o = (gd_opts_t){.dir = "/var/tmp", .size = 256u << 20, .block = 0, .pairs = 5, .threads = "4"};
    static const struct option lo[] = {{"gds", no_argument, 0, 'g'},          {"dir", required_argument, 0, 'd'},
                                       {"size", required_argument, 0, 's'},   {"block", required_argument, 0, 'b'},
                                       {"pairs", required_argument, 0, 'p'},  {"direct", no_argument, 0, 'D'},
                                       {"threads", required_argument, 0, 't'}, {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'g':
            break;
        case 'd':
            o->dir = optarg;
            break;
        case 's':
            if (bench_parse_size(optarg, &o->size) != 0)
                bench_die("--size %s: not a size", optarg);
            break;
        case 'b':
            if (bench_parse_size(optarg, &o->block) != 0)
                bench_die("--block %s: not a size", optarg);
            break;
        case 'p':
            o->pairs = strtoull(optarg, NULL, 10);
            break;
        case 'D':
            o->direct = 1;
            break;
        case 't':
            o->threads = optarg;
            break;
        default:
            printf("usage: nixlbench --gds [--dir DIR] [--size SIZE] [--block SIZE] [--pairs N] [--direct] "
                   "[--threads N]\n"
                   "  GPU 0 memory to a file in DIR and back through the gds backend, against a raw cuFile loop\n");
            exit(c == 'h' ? 0 : 2);
        }
    }
    if (!o->block)
        o->block = o->size;
    if (!o->size || o->size % o->block || o->pairs == 0 || o->pairs > 1000)
        bench_die("--gds: size a multiple of block, pairs 1..1000");
}

static nixl_cufile_api_t cf;

static void gd_load(void)
{
    const char *lib = getenv("NIXL_GDS_CUFILE_LIB");
    void *h = dlopen(lib && *lib ? lib : "libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        bench_die("--gds: no cuFile (%s)", dlerror());
#define GD_RESOLVE_(f, sym, req, ret, args)                                                              \
    *(void **)&cf.f = dlsym(h, sym);                                                                       \
    if (!cf.f && req)                                                                                      \
        bench_die("--gds: cuFile lacks %s", sym);
    NIXL_CUFILE_FUNCTIONS(GD_RESOLVE_)
#undef GD_RESOLVE_
    if (cf.driver_open().err != 0)
        bench_die("--gds: cuFileDriverOpen failed");
}

static uint64_t gd_slot(uint64_t i, uint64_t n)
{
    return (i * 40503u + 7) % n; /* a permutation when n is not a multiple of 40503's factors (3, 23, 587) */
}

static uint64_t gd_lib(nixl_xfer_t *x)
{
    uint64_t t0 = bench_now_ns();
    nixl_status_t st = nixl_xfer_post(x);
    while (st == NIXL_IN_PROG)
        st = nixl_xfer_status(x);
    bench_check(st, "gds request");
    return bench_now_ns() - t0;
}

static uint64_t gd_raw(nixl_cufile_handle_t fh, void *buf, const gd_opts_t *o, int write, uint64_t nb, int reg)
{
    uint64_t t0 = bench_now_ns();
    for (uint64_t i = 0; i < nb; i++) {
        off_t at = (off_t)(gd_slot(i, nb) * o->block);
        char *p = (char *)buf + (reg ? 0 : i * o->block);
        off_t boff = reg ? (off_t)(i * o->block) : 0;
        ssize_t got = write ? cf.write(fh, p, o->block, at, boff) : cf.read(fh, p, o->block, at, boff);
        if (got != (ssize_t)o->block)
            bench_die("--gds: raw cuFile %s of block %" PRIu64 ": %zd", write ? "write" : "read", i, got);
    }
    return bench_now_ns() - t0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int bench_gds_main(int argc, char **argv)
{
    gd_opts_t o;
    gd_parse(argc, argv, &o);
    uint64_t nb = o.size / o.block;
    if (nb > 1 && (nb % 3 == 0 || nb % 23 == 0 || nb % 587 == 0))
        bench_die("--gds: size / block must not be a multiple of 3, 23 or 587");
    bench_vram_init();
    void *buf = bench_vram_alloc(0, o.size);
    unsigned char *want = malloc(o.size), *back = malloc(o.size);
    if (!want || !back)
        bench_die("--gds: no host memory");
    for (uint64_t i = 0; i < o.size; i++)
        want[i] = (unsigned char)(i * 37 + (i >> 12));
    bench_vram_put(0, buf, want, o.size);
    char path[512];
    snprintf(path, sizeof(path), "%s/nixlbench-gds-%d", o.dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (o.direct ? O_DIRECT : 0), 0600);
    if (fd < 0)
        bench_die("--gds: open %s: %s", path, strerror(errno));
    unlink(path);

    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "nixlbench-gds"};
    nixl_agent_t *a;
    bench_check(nixl_agent_create(&cfg, &a), "nixl_agent_create");
    nixl_param_t p = {"threads", o.threads};
    nixl_backend_t *b;
    bench_check(nixl_backend_create(a, "gds", &p, 1, &b), "nixl_backend_create(gds)");
    nixl_desc_t md = {(uintptr_t)buf, o.size, 0, 0, NULL}, fdesc = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t ml = {NIXL_MEM_VRAM, 1, &md}, fl = {NIXL_MEM_FILE, 1, &fdesc};
    bench_check(nixl_mem_register(a, &ml, NULL), "register VRAM");
    bench_check(nixl_mem_register(a, &fl, NULL), "register file");
    nixl_desc_t *ld = calloc(nb, sizeof(*ld)), *rd = calloc(nb, sizeof(*rd));
    if (!ld || !rd)
        bench_die("--gds: no memory");
    for (uint64_t i = 0; i < nb; i++) {
        ld[i] = (nixl_desc_t){(uintptr_t)buf + i * o.block, o.block, 0, 0, NULL};
        rd[i] = (nixl_desc_t){gd_slot(i, nb) * o.block, o.block, (uint32_t)fd, 0, NULL};
    }
    nixl_dlist_t l = {NIXL_MEM_VRAM, nb, ld}, r = {NIXL_MEM_FILE, nb, rd};
    nixl_xfer_t *xw, *xr;
    bench_check(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "nixlbench-gds", NULL, &xw), "create WRITE");
    bench_check(nixl_xfer_create(a, NIXL_OP_READ, &l, &r, "nixlbench-gds", NULL, &xr), "create READ");
    /* Correctness first: WRITE, clear the GPU buffer, READ, compare. */
    gd_lib(xw);
    bench_vram_set(0, buf, 0, o.size);
    gd_lib(xr);
    bench_vram_get(0, back, buf, o.size);
    if (memcmp(back, want, o.size) != 0)
        bench_die("--gds: the bytes read back differ from those written");
    nixl_xfer_info_t info;
    bench_check(nixl_xfer_info(xw, &info), "nixl_xfer_info");

    /* The raw loop: the same session, its own handle of the file, the
     * buffer registered when the library's path is direct (as gds does). */
    gd_load();
    bench_vram_bind(0);
    int reg = strcmp(info.path, "gds.direct") == 0 && cf.buf_register(buf, o.size, 0).err == 0;
    /* cuFile allows one handle per fd: the raw loop opens the file again. */
    char self[64];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    int fd2 = open(self, O_RDWR | (o.direct ? O_DIRECT : 0));
    if (fd2 < 0)
        bench_die("--gds: reopen: %s", strerror(errno));
    nixl_cufile_descr_t d;
    memset(&d, 0, sizeof(d));
    d.type = NIXL_CUFILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd2;
    nixl_cufile_handle_t fh;
    if (cf.handle_register(&fh, &d).err != 0)
        bench_die("--gds: raw cuFileHandleRegister failed");
    gd_raw(fh, buf, &o, 1, nb, reg); /* warm-up */
    double *ratio[2], *lg[2], *rg[2];
    for (int w = 0; w < 2; w++) {
        ratio[w] = calloc(o.pairs, sizeof(double));
        lg[w] = calloc(o.pairs, sizeof(double));
        rg[w] = calloc(o.pairs, sizeof(double));
        if (!ratio[w] || !lg[w] || !rg[w])
            bench_die("--gds: no memory");
    }
    for (uint64_t k = 0; k < o.pairs; k++)
        for (int w = 1; w >= 0; w--) {
            lg[w][k] = (double)o.size / (double)gd_lib(w ? xw : xr);
            bench_vram_bind(0);
            rg[w][k] = (double)o.size / (double)gd_raw(fh, buf, &o, w, nb, reg);
            ratio[w][k] = lg[w][k] / rg[w][k];
        }
    printf("# nixlbench --gds: %" PRIu64 " x %" PRIu64 " B, GPU 0 <-> a file in %s%s, %s threads, %" PRIu64
           " pairs; limit: a raw cuFile loop of the same blocks (buffer %s)\n",
           nb, o.block, o.dir, o.direct ? " (O_DIRECT)" : " (page cache)", o.threads, o.pairs,
           reg ? "registered" : "not registered");
    printf("%6s %10s %8s %10s %10s %7s %13s  %s\n", "op", "block", "blocks", "GB/s", "limit GB/s", "ratio",
           "(min-max)", "path");
    for (int w = 1; w >= 0; w--) {
        double lo = ratio[w][0], hi = ratio[w][0];
        for (uint64_t k = 1; k < o.pairs; k++) {
            lo = ratio[w][k] < lo ? ratio[w][k] : lo;
            hi = ratio[w][k] > hi ? ratio[w][k] : hi;
        }
        qsort(ratio[w], o.pairs, sizeof(double), cmp_d);
        qsort(lg[w], o.pairs, sizeof(double), cmp_d);
        qsort(rg[w], o.pairs, sizeof(double), cmp_d);
        printf("%6s %10" PRIu64 " %8" PRIu64 " %10.2f %10.2f %7.3f %6.3f-%-6.3f  %s\n", w ? "write" : "read", o.block,
               nb, lg[w][o.pairs / 2], rg[w][o.pairs / 2], ratio[w][o.pairs / 2], lo, hi, info.path);
        free(ratio[w]);
        free(lg[w]);
        free(rg[w]);
    }
    cf.handle_deregister(fh);
    if (reg)
        cf.buf_deregister(buf);
    close(fd2);
    nixl_xfer_release(xw);
    nixl_xfer_release(xr);
    bench_check(nixl_mem_deregister(a, &fl, NULL), "deregister file");
    bench_check(nixl_mem_deregister(a, &ml, NULL), "deregister VRAM");
    nixl_agent_destroy(a);
    close(fd);
    bench_vram_free(0, buf);
    free(ld);
    free(rd);
    free(want);
    free(back);
    return 0;
}
