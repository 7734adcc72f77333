/*
 * reqcost.c - nixl-reqcost: what building a KV-shaped request costs the CPU,
 * without the copy (issue 13, part 1).
 *
 * One process, two agents ("pre" and "dec") with the shm backend, a KV
 * cache of N pieces of PIECE bytes on each side in nixl_mem_alloc memory,
 * slots shuffled on both sides so that no two descriptors merge (the
 * honest worst case of page size 1).  It times, over REPS rounds, the
 * library calls an engine makes per request:
 *
 *   create   nixl_xfer_create of two N-descriptor lists (SGLang's pattern)
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
 * usage: nixl-reqcost [--descs N] [--piece BYTES] [--reps R] [--seed S]
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

static nixl_agent_t *agent(const char *name)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a;
    CALL(nixl_agent_create(&cfg, &a));
    nixl_backend_t *b;
    CALL(nixl_backend_create(a, "shm", NULL, 0, &b));
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
    size_t n = 221184, piece = 1152, reps = 10;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--descs") == 0)
            n = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--piece") == 0)
            piece = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = strtoull(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 0);
        else {
            fprintf(stderr, "usage: nixl-reqcost [--descs N] [--piece BYTES] [--reps R] [--seed S]\n");
            return 2;
        }
    }
    if (n == 0 || piece == 0 || reps == 0 || n > UINT32_MAX) {
        fprintf(stderr, "nixl-reqcost: --descs, --piece and --reps must be > 0 (descs < 2^32)\n");
        return 2;
    }
    nixl_agent_t *pre = agent("pre"), *dec = agent("dec");
    void *src, *dst;
    CALL(nixl_mem_alloc(n * piece, &src));
    CALL(nixl_mem_alloc(n * piece, &dst));
    nixl_desc_t rs = {.addr = (uintptr_t)src, .len = n * piece}, rd = {.addr = (uintptr_t)dst, .len = n * piece};
    nixl_dlist_t regs = {NIXL_MEM_DRAM, 1, &rs}, regd = {NIXL_MEM_DRAM, 1, &rd};
    CALL(nixl_mem_register(pre, &regs, NULL));
    CALL(nixl_mem_register(dec, &regd, NULL));
    introduce(dec, pre);
    introduce(pre, dec);

    uint32_t *ls = shuffled(n, seed), *rsl = shuffled(n, seed + 1);
    nixl_desc_t *ld = malloc(n * sizeof(*ld)), *rdd = malloc(n * sizeof(*rdd));
    nixl_desc_t *lall = malloc(n * sizeof(*lall)), *rall = malloc(n * sizeof(*rall));
    double *t_create = calloc(reps, sizeof(double)), *t_make = calloc(reps, sizeof(double));
    double *t_rel = calloc(reps, sizeof(double));
    if (!ld || !rdd || !lall || !rall || !t_create || !t_make || !t_rel)
        return 1;
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nixl_desc_t){.addr = (uintptr_t)src + (uint64_t)ls[i] * piece, .len = piece};
        rdd[i] = (nixl_desc_t){.addr = (uintptr_t)dst + (uint64_t)rsl[i] * piece, .len = piece};
        lall[i] = (nixl_desc_t){.addr = (uintptr_t)src + (uint64_t)i * piece, .len = piece};
        rall[i] = (nixl_desc_t){.addr = (uintptr_t)dst + (uint64_t)i * piece, .len = piece};
    }
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
    printf("# nixl-reqcost: %s, %zu descriptors of %zu B, slots shuffled on both sides (%zu after merging), "
           "median of %zu rounds\n",
           path, n, piece, descs_after, reps);
    printf("%-8s %10s %12s\n", "call", "ms", "ns/desc");
    printf("%-8s %10.3f %12.1f\n", "create", c * 1e3, c * 1e9 / (double)n);
    printf("%-8s %10.3f %12.1f\n", "make", m * 1e3, m * 1e9 / (double)n);
    printf("%-8s %10.3f %12.1f\n", "release", rel * 1e3, rel * 1e9 / (double)n);
    nixl_prep_release(lp);
    nixl_prep_release(rp);
    nixl_agent_destroy(pre);
    nixl_agent_destroy(dec);
    nixl_mem_free(src, n * piece);
    nixl_mem_free(dst, n * piece);
    free(ls);
    free(rsl);
    free(ld);
    free(rdd);
    free(lall);
    free(rall);
    free(t_create);
    free(t_make);
    free(t_rel);
    return 0;
}
