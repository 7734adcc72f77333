/*
 * reqcost.c - nixl-reqcost: what building a KV-shaped request costs the CPU,
 * without the copy (issue 13, part 1).
 *
 * One process, two agents ("pre" and "dec") with the shm backend (or
 * --backend NAME, with --param KEY=VALUE), a KV cache of N pieces of
 * PIECE bytes on each side in nixl_mem_alloc memory (--malloc: plain heap
 * memory, which shm reaches with CMA rather than a mapping), slots shuffled on
 * both sides so that no two descriptors merge (the honest worst case of
 * page size 1).  With --layers L the cache is L registrations of N / L
 * pieces and the request SGLang's: every layer, the same shuffled slots
 * in each (an indexed request, which a backend taking that form, such as
 * cuda_ipc or the unit tests' fake_indexed, is handed as one).  It times,
 * over REPS rounds, the library calls an engine makes per request:
 *
 *   create   nixl_xfer_create of two N-descriptor lists (SGLang's pattern)
 *   rows     nixl_xfer_create_rows of the same pairs as two N x 3 int64
 *            arrays (SGLang's arrays as Python hands them over)
 *   make     nixl_xfer_make from lists prepared once, every slot in order,
 *            with the request's slots as shuffled index arrays (vLLM's
 *            pattern: block ids into the lists of all blocks)
 *   release  nixl_xfer_release of a request never posted
 *
 * and prints the median of each, per request and per descriptor.  Nothing
 * is posted: the copy is nixlbench's business.  For instruction counts,
 * which are repeatable on a noisy machine, run it under callgrind with
 * collection limited to the call being measured:
 *
 *   valgrind --tool=callgrind --collect-atstart=no --toggle-collect=nixl_xfer_make \
 *       nixl-reqcost --reps 3       # Ir / (3 x N) = instructions per descriptor
 *
 * usage: nixl-reqcost [--descs N] [--piece BYTES] [--reps R] [--seed S] [--layers L]
 *                     [--backend NAME] [--param KEY=VALUE]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nixl.h"

#define CALL(e)                                                                                   \
    do {                                                                                          \
        nixl_status_t st_ = (e);                                                                  \
        if (st_ != NIXL_OK) {                                                                     \
            fprintf(stderr, "nixl-reqcost: %s: %s\n", #e, nixl_strerror(st_));                    \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A permutation of 0..n-1 (xorshift, so runs with one seed are identical). */
static uint32_t *shuffled(size_t n, uint64_t seed)
{
    uint32_t *p = malloc(n * sizeof(*p));
    if (!p)
        exit(1);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint32_t)i;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = n; i > 1; i--) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        size_t j = (size_t)(s % i);
        uint32_t t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    return p;
}

static nixl_agent_t *agent(const char *name, const char *backend, const nixl_param_t *param)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a;
    CALL(nixl_agent_create(&cfg, &a));
    nixl_backend_t *b;
    CALL(nixl_backend_create(a, backend, param, param ? 1 : 0, &b));
    return a;
}

static void introduce(nixl_agent_t *from, nixl_agent_t *to)
{
    void *blob;
    size_t len;
    CALL(nixl_md_get_local(from, &blob, &len));
    CALL(nixl_md_load_remote(to, blob, len, NULL));
    nixl_free(blob);
}

int main(int argc, char **argv)
{
    size_t n = 221184, piece = 1152, reps = 10, layers = 1;
    uint64_t seed = 1;
    const char *backend = "shm";
    nixl_param_t param = {NULL, NULL};
    char pkey[64];
    int heap = 0;
    for (int i = 1; i < argc;) { /* the one option without a value, taken out first */
        if (strcmp(argv[i], "--malloc") != 0) {
            i++;
            continue;
        }
        heap = 1;
        memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof(*argv)); /* with argv[argc], NULL */
        argc--;
    }
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            argv[i] = "?"; /* an option without its value: usage */
        if (strcmp(argv[i], "--descs") == 0)
            n = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--piece") == 0)
            piece = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--layers") == 0)
            layers = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--backend") == 0)
            backend = argv[i + 1];
        else if (strcmp(argv[i], "--param") == 0 && strchr(argv[i + 1], '=') &&
                 (size_t)(strchr(argv[i + 1], '=') - argv[i + 1]) < sizeof(pkey)) {
            size_t k = (size_t)(strchr(argv[i + 1], '=') - argv[i + 1]);
            memcpy(pkey, argv[i + 1], k);
            pkey[k] = 0;
            param = (nixl_param_t){pkey, argv[i + 1] + k + 1};
        } else {
            fprintf(stderr, "usage: nixl-reqcost [--descs N] [--piece BYTES] [--reps R] [--seed S] [--layers L]\n"
                            "                    [--backend NAME] [--param KEY=VALUE] [--malloc]\n");
            return 2;
        }
    }
    if (n == 0 || piece == 0 || reps == 0 || n > UINT32_MAX || layers == 0 || n % layers) {
        fprintf(stderr, "nixl-reqcost: --descs, --piece, --reps and --layers must be > 0 (descs < 2^32, a "
                        "multiple of layers)\n");
        return 2;
    }
    const nixl_param_t *pp = param.key ? &param : NULL;
    nixl_agent_t *pre = agent("pre", backend, pp), *dec = agent("dec", backend, pp);
    void *src, *dst;
    if (heap) {
        src = aligned_alloc(4096, (n * piece + 4095) / 4096 * 4096);
        dst = aligned_alloc(4096, (n * piece + 4095) / 4096 * 4096);
        if (!src || !dst)
            return 1;
    } else {
        CALL(nixl_mem_alloc(n * piece, &src));
        CALL(nixl_mem_alloc(n * piece, &dst));
    }
    /* One registration per layer, each of the layer's slots. */
    const size_t ns = n / layers;
    nixl_desc_t *lreg = malloc(layers * sizeof(*lreg)), *rreg = malloc(layers * sizeof(*rreg));
    if (!lreg || !rreg)
        return 1;
    for (size_t l = 0; l < layers; l++) {
        lreg[l] = (nixl_desc_t){.addr = (uintptr_t)src + l * ns * piece, .len = ns * piece};
        rreg[l] = (nixl_desc_t){.addr = (uintptr_t)dst + l * ns * piece, .len = ns * piece};
    }
    nixl_dlist_t regs = {NIXL_MEM_DRAM, layers, lreg}, regd = {NIXL_MEM_DRAM, layers, rreg};
    CALL(nixl_mem_register(pre, &regs, NULL));
    CALL(nixl_mem_register(dec, &regd, NULL));
    introduce(dec, pre);
    introduce(pre, dec);

    /* Request pair i = (layer l, k): slot ls[k] of layer l to slot rsl[k] of layer l. */
    uint32_t *lsl = shuffled(ns, seed), *rsl0 = shuffled(ns, seed + 1);
    uint32_t *ls = malloc(n * sizeof(*ls)), *rsl = malloc(n * sizeof(*rsl));
    nixl_desc_t *ld = malloc(n * sizeof(*ld)), *rdd = malloc(n * sizeof(*rdd));
    nixl_desc_t *lall = malloc(n * sizeof(*lall)), *rall = malloc(n * sizeof(*rall));
    int64_t *lrows = malloc(3 * n * sizeof(*lrows)), *rrows = malloc(3 * n * sizeof(*rrows));
    double *t_create = calloc(reps, sizeof(double)), *t_make = calloc(reps, sizeof(double));
    double *t_rel = calloc(reps, sizeof(double)), *t_rows = calloc(reps, sizeof(double));
    if (!ls || !rsl || !ld || !rdd || !lall || !rall || !lrows || !rrows || !t_create || !t_make || !t_rel ||
        !t_rows)
        return 1;
    for (size_t i = 0; i < n; i++) {
        size_t l = i / ns, k = i % ns;
        ls[i] = (uint32_t)(l * ns + lsl[k]); /* index into the lists of every slot */
        rsl[i] = (uint32_t)(l * ns + rsl0[k]);
        ld[i] = (nixl_desc_t){.addr = (uintptr_t)src + (uint64_t)ls[i] * piece, .len = piece};
        rdd[i] = (nixl_desc_t){.addr = (uintptr_t)dst + (uint64_t)rsl[i] * piece, .len = piece};
        lall[i] = (nixl_desc_t){.addr = (uintptr_t)src + (uint64_t)i * piece, .len = piece};
        rall[i] = (nixl_desc_t){.addr = (uintptr_t)dst + (uint64_t)i * piece, .len = piece};
        lrows[3 * i] = (int64_t)ld[i].addr;
        rrows[3 * i] = (int64_t)rdd[i].addr;
        lrows[3 * i + 1] = rrows[3 * i + 1] = (int64_t)piece;
        lrows[3 * i + 2] = rrows[3 * i + 2] = 0;
    }
    nixl_rows_t lr = {NIXL_MEM_DRAM, n, (const uint64_t *)lrows, 3, 1};
    nixl_rows_t rr = {NIXL_MEM_DRAM, n, (const uint64_t *)rrows, 3, 1};
    nixl_dlist_t ll = {NIXL_MEM_DRAM, n, ld}, rl = {NIXL_MEM_DRAM, n, rdd};
    nixl_dlist_t lal = {NIXL_MEM_DRAM, n, lall}, ral = {NIXL_MEM_DRAM, n, rall};
    nixl_prep_t *lp, *rp;
    CALL(nixl_prep_create(pre, NULL, &lal, NULL, &lp));
    CALL(nixl_prep_create(pre, "dec", &ral, NULL, &rp));

    size_t descs_after = 0;
    char path[64] = "";
    for (size_t r = 0; r < reps; r++) {
        nixl_xfer_t *x;
        double t0 = now_s();
        CALL(nixl_xfer_create(pre, NIXL_OP_WRITE, &ll, &rl, "dec", NULL, &x));
        double t1 = now_s();
        nixl_xfer_release(x);
        double t2 = now_s();
        CALL(nixl_xfer_make(pre, NIXL_OP_WRITE, lp, ls, rp, rsl, n, NULL, &x));
        double t3 = now_s();
        nixl_xfer_release(x);
        double t4 = now_s();
        CALL(nixl_xfer_create_rows(pre, NIXL_OP_WRITE, &lr, &rr, "dec", NULL, &x));
        t_rows[r] = now_s() - t4;
        nixl_xfer_info_t info;
        CALL(nixl_xfer_info(x, &info));
        descs_after = info.descs;
        snprintf(path, sizeof(path), "%s", info.path);
        nixl_xfer_release(x);
        t_create[r] = t1 - t0;
        t_rel[r] = t2 - t1;
        t_make[r] = t3 - t2;
    }
    double c = median(t_create, reps), m = median(t_make, reps), rel = median(t_rel, reps);
    double rw = median(t_rows, reps);
    printf("# nixl-reqcost: %s, %zu descriptors of %zu B in %zu layers, slots shuffled on both sides (%zu after "
           "merging), median of %zu rounds\n",
           path, n, piece, layers, descs_after, reps);
    printf("%-8s %10s %12s\n", "call", "ms", "ns/desc");
    printf("%-8s %10.3f %12.1f\n", "create", c * 1e3, c * 1e9 / (double)n);
    printf("%-8s %10.3f %12.1f\n", "rows", rw * 1e3, rw * 1e9 / (double)n);
    printf("%-8s %10.3f %12.1f\n", "make", m * 1e3, m * 1e9 / (double)n);
    printf("%-8s %10.3f %12.1f\n", "release", rel * 1e3, rel * 1e9 / (double)n);
    nixl_prep_release(lp);
    nixl_prep_release(rp);
    nixl_agent_destroy(pre);
    nixl_agent_destroy(dec);
    if (heap) {
        free(src);
        free(dst);
    } else {
        nixl_mem_free(src, n * piece);
        nixl_mem_free(dst, n * piece);
    }
    free(ls);
    free(rsl);
    free(lsl);
    free(rsl0);
    free(lreg);
    free(rreg);
    free(lrows);
    free(rrows);
    free(t_rows);
    free(ld);
    free(rdd);
    free(lall);
    free(rall);
    free(t_create);
    free(t_make);
    free(t_rel);
    return 0;
}
