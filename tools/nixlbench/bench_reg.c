/*
 * bench_reg.c - the registration replay (--reg-replay): the start-up of a
 * serving node shaped like the field report's Kimi-K3 deployment
 * (workloads.md), where the process of every rank registers its 182-buffer
 * KV pool at the same moment.
 *
 * The parent forks --procs processes.  Each makes an agent and a backend,
 * allocates the buffer set (untouched: registering is what is measured),
 * says it is ready through one pipe and blocks reading a second one, which
 * the parent closes once every process is ready: all of them enter
 * nixl_mem_register within microseconds of each other.  A sampler thread
 * reads Threads: of /proc/self/status every millisecond meanwhile.  Each
 * process sends back the time of its batch and its peak thread count; the
 * parent prints them, the slowest time and the highest peak.  Compare
 * NIXL_REG_CONCURRENCY=auto (--reg-cap auto) with 0, one thread per buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_reg.h"

#define REG_BUFS 182
#define REG_MIN_BYTES 2560ull                        /* 2.5 KB */
#define REG_MAX_BYTES (391ull << 20)                 /* 391 MB */
#define REG_TOTAL_BYTES 15354508902ull               /* 14.3 GiB */
#define REG_FLOOR_BYTES 4096ull
#define REG_MAX_PROCS 256
#define REG_MAX_PARAMS 16

typedef struct reg_opts {
    uint32_t procs;
    uint64_t scale;
    const char *cap; /* NULL: NIXL_REG_CONCURRENCY as the environment has it */
    const char *backend;
    bench_alloc_t alloc;
    nixl_param_t params[REG_MAX_PARAMS];
    char param_keys[REG_MAX_PARAMS][64];
    size_t num_params;
    const char *json_path;
    int quiet;
    uint32_t timeout_ms;
} reg_opts_t;

/* What a process sends back: under PIPE_BUF, so one write() is atomic. */
typedef struct reg_result {
    int32_t idx;
    int32_t status;
    uint32_t peak_threads;
    uint32_t base_threads;
    uint64_t ns;
    uint64_t cpu_ns; /* CPU time of the whole process over the batch */
    char what[48];   /* the call that failed */
} reg_result_t;

/* ---- the buffer set ---- */

static double curve_total(double p)
{
    double sum = 0;
    for (int i = 0; i < REG_BUFS; i++)
        sum += (double)REG_MIN_BYTES + (double)(REG_MAX_BYTES - REG_MIN_BYTES) * pow(i / (double)(REG_BUFS - 1), p);
    return sum;
}

/* The field report gives the set's count, extremes and total only (182
 * buffers, 2.5 KB to 391 MB, 14.3 GiB).  We put the sizes on a power curve
 * between the extremes, size(i) = min + (max - min) * (i / 181)^p, with p
 * solved by bisection so they add up to the total (p is about 3.9): many
 * small buffers (indexes, scales) and a tail of large KV layers, the shape
 * such a pool has.  Sizes are rounded up to 256 B, then shuffled with a fixed
 * seed so large and small interleave as layers do.  --reg-scale K > 1
 * divides every size by K, with a floor of 4 KiB. */
static void reg_sizes(uint64_t scale, uint64_t *sizes)
{
    double lo = 0.01, hi = 100; /* the total falls as p grows */
    for (int it = 0; it < 200; it++) {
        double mid = (lo + hi) / 2;
        if (curve_total(mid) > (double)REG_TOTAL_BYTES)
            lo = mid;
        else
            hi = mid;
    }
    for (int i = 0; i < REG_BUFS; i++) {
        double v = (double)REG_MIN_BYTES +
                   (double)(REG_MAX_BYTES - REG_MIN_BYTES) * pow(i / (double)(REG_BUFS - 1), (lo + hi) / 2);
        uint64_t b = ((uint64_t)v + 255) & ~255ull;
        b /= scale;
        sizes[i] = scale > 1 && b < REG_FLOOR_BYTES ? REG_FLOOR_BYTES : b;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = REG_BUFS - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1));
        uint64_t t = sizes[i];
        sizes[i] = sizes[j];
        sizes[j] = t;
    }
}

/* Memory of the set, left untouched. */
static void *reg_alloc(bench_alloc_t kind, size_t len)
{
    void *p = NULL;
    if (kind == BENCH_ALLOC_NIXL)
        return nixl_mem_alloc(len, &p) == NIXL_OK ? p : NULL;
    return posix_memalign(&p, 4096, len) == 0 ? p : NULL;
}

static void reg_free(bench_alloc_t kind, void *p, size_t len)
{
    if (kind == BENCH_ALLOC_NIXL)
        nixl_mem_free(p, len);
    else
        free(p);
}

/* ---- thread sampler ---- */

typedef struct sampler {
    pthread_t thread;
    int fd;
    atomic_int stop;
    unsigned peak;
} sampler_t;

static unsigned threads_now(int fd)
{
    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *t = strstr(buf, "\nThreads:");
    return t ? (unsigned)strtoul(t + 9, NULL, 10) : 0;
}

static void *sampler_main(void *arg)
{
    sampler_t *s = arg;
    const struct timespec ms = {0, 1000000};
    while (!atomic_load(&s->stop)) {
        unsigned v = threads_now(s->fd);
        if (v > s->peak)
            s->peak = v;
        nanosleep(&ms, NULL);
    }
    return NULL;
}

/* ---- one process ---- */

/* CPU time of every thread of this process (the sampler's included, about
 * 20 us a sample): unlike the wall time, it barely moves with the load of
 * the machine, and it shows what thread creation costs. */
static uint64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void child_send(int fd, const reg_result_t *r)
{
    ssize_t n;
    do
        n = write(fd, r, sizeof(*r));
    while (n < 0 && errno == EINTR);
}

static void child_wait_go(int ready_fd, int go_fd)
{
    char c = 'r';
    ssize_t n;
    do
        n = write(ready_fd, &c, 1);
    while (n < 0 && errno == EINTR);
    do
        n = read(go_fd, &c, 1); /* returns 0 when the parent closes it */
    while (n < 0 && errno == EINTR);
}

static int child_run(const reg_opts_t *o, int idx, int ready_fd, int go_fd, int res_fd, const uint64_t *sizes)
{
    reg_result_t r = {.idx = idx, .status = NIXL_OK};
    void *bufs[REG_BUFS] = {0};
    nixl_desc_t d[REG_BUFS];
    nixl_agent_t *agent = NULL;
    nixl_backend_t *b = NULL;
    sampler_t s = {.fd = -1};
    int sampling = 0, waited = 0;
    char name[32];
    snprintf(name, sizeof(name), "reg%d", idx);
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_status_t st = nixl_agent_create(&cfg, &agent);
    if (st != NIXL_OK) {
        snprintf(r.what, sizeof(r.what), "nixl_agent_create");
        goto out;
    }
    st = nixl_backend_create(agent, o->backend, o->params, o->num_params, &b);
    if (st != NIXL_OK) {
        snprintf(r.what, sizeof(r.what), "nixl_backend_create(%s)", o->backend);
        goto out;
    }
    for (int i = 0; i < REG_BUFS; i++) {
        bufs[i] = reg_alloc(o->alloc, sizes[i]);
        if (!bufs[i]) {
            st = NIXL_ERR_NO_MEMORY;
            snprintf(r.what, sizeof(r.what), "allocating buffer %d", i);
            goto out;
        }
        d[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)bufs[i], .len = sizes[i]};
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, REG_BUFS, d};
    s.fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (s.fd < 0 || pthread_create(&s.thread, NULL, sampler_main, &s) != 0) {
        st = NIXL_ERR_IO;
        snprintf(r.what, sizeof(r.what), "starting the thread sampler");
        goto out;
    }
    sampling = 1;
    r.base_threads = threads_now(s.fd);

    child_wait_go(ready_fd, go_fd);
    waited = 1;
    uint64_t c0 = cpu_now_ns(), t0 = bench_now_ns();
    st = nixl_mem_register(agent, &l, NULL);
    r.ns = bench_now_ns() - t0;
    r.cpu_ns = cpu_now_ns() - c0;
    atomic_store(&s.stop, 1);
    pthread_join(s.thread, NULL);
    sampling = 0;
    r.peak_threads = s.peak;
    if (st != NIXL_OK) {
        snprintf(r.what, sizeof(r.what), "nixl_mem_register");
        goto out;
    }
    st = nixl_mem_deregister(agent, &l, NULL);
    if (st != NIXL_OK)
        snprintf(r.what, sizeof(r.what), "nixl_mem_deregister");
out:
    if (sampling) {
        atomic_store(&s.stop, 1);
        pthread_join(s.thread, NULL);
    }
    if (s.fd >= 0)
        close(s.fd);
    if (!waited)
        child_wait_go(ready_fd, go_fd); /* the parent counts every process ready */
    r.status = st;
    child_send(res_fd, &r);
    if (agent)
        nixl_agent_destroy(agent);
    for (int i = 0; i < REG_BUFS; i++)
        if (bufs[i])
            reg_free(o->alloc, bufs[i], sizes[i]);
    return st == NIXL_OK ? 0 : 1;
}

/* ---- options ---- */

enum {
    RO_REPLAY = 256, RO_PROCS, RO_SCALE, RO_CAP, RO_BACKEND, RO_PARAM, RO_ALLOC, RO_JSON, RO_QUIET, RO_TIMEOUT, RO_HELP,
};

static const struct option reg_long_opts[] = {
    {"reg-replay", no_argument, NULL, RO_REPLAY},
    {"procs", required_argument, NULL, RO_PROCS},
    {"reg-scale", required_argument, NULL, RO_SCALE},
    {"reg-cap", required_argument, NULL, RO_CAP},
    {"backend", required_argument, NULL, RO_BACKEND},
    {"param", required_argument, NULL, RO_PARAM},
    {"alloc", required_argument, NULL, RO_ALLOC},
    {"json", required_argument, NULL, RO_JSON},
    {"quiet", no_argument, NULL, RO_QUIET},
    {"timeout-ms", required_argument, NULL, RO_TIMEOUT},
    {"help", no_argument, NULL, RO_HELP},
    {NULL, 0, NULL, 0},
};

static void reg_usage(FILE *f)
{
    fputs("usage: nixlbench --reg-replay [options]\n"
          "  --procs N              processes registering at the same moment (default 1)\n"
          "  --reg-scale K          divide every buffer size by K, 4 KiB at least (default 16: 0.9 GiB a process)\n"
          "  --reg-cap auto|N       NIXL_REG_CONCURRENCY of the processes (0: one thread per buffer);\n"
          "                         default: the environment's\n"
          "  --backend NAME         backend registering the memory (default shm)\n"
          "  --param KEY=VALUE      backend parameter (repeatable)\n"
          "  --alloc nixl|malloc    nixl_mem_alloc (default) or posix_memalign; memory is not touched\n"
          "  --json FILE            one JSON object: per-process times and peaks, slowest, max peak\n"
          "  --quiet                no table on stdout\n"
          "  --timeout-ms N         give up on the processes after this long (default 120000)\n",
          f);
}

static int reg_bad(const char *fmt, const char *arg)
{
    fputs("nixlbench: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(nixlbench --reg-replay --help lists the options)\n", stderr);
    return 2;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v;
    if (bench_parse_size(s, &v) || v > max)
        return -1;
    *out = v;
    return 0;
}

/* 0 when the options parse, else the exit status. */
static int reg_parse(int argc, char **argv, reg_opts_t *o)
{
    uint64_t v;
    int c;
    *o = (reg_opts_t){.procs = 1, .scale = 16, .backend = "shm", .alloc = BENCH_ALLOC_NIXL, .timeout_ms = 120000};
    optind = 1;
    while ((c = getopt_long(argc, argv, "", reg_long_opts, NULL)) != -1) {
        switch (c) {
        case RO_REPLAY: break;
        case RO_PROCS:
            if (parse_u64(optarg, REG_MAX_PROCS, &v) || v == 0)
                return reg_bad("--procs: \"%s\" is not a number from 1 to 256", optarg);
            o->procs = (uint32_t)v;
            break;
        case RO_SCALE:
            if (parse_u64(optarg, 1u << 20, &v) || v == 0)
                return reg_bad("--reg-scale: \"%s\" is not a number from 1 to 1M", optarg);
            o->scale = v;
            break;
        case RO_CAP:
            if (strcmp(optarg, "auto") != 0 && parse_u64(optarg, 1000000, &v))
                return reg_bad("--reg-cap: \"%s\" is neither auto nor a number", optarg);
            o->cap = optarg;
            break;
        case RO_BACKEND: o->backend = optarg; break;
        case RO_PARAM: {
            const char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || (size_t)(eq - optarg) >= sizeof(o->param_keys[0]))
                return reg_bad("--param: expected KEY=VALUE, got \"%s\"", optarg);
            if (o->num_params == REG_MAX_PARAMS)
                return reg_bad("--param: at most 16 parameters (\"%s\")", optarg);
            char *key = o->param_keys[o->num_params];
            memcpy(key, optarg, (size_t)(eq - optarg));
            key[eq - optarg] = '\0';
            o->params[o->num_params++] = (nixl_param_t){.key = key, .value = eq + 1};
            break;
        }
        case RO_ALLOC:
            if (!strcmp(optarg, "nixl"))
                o->alloc = BENCH_ALLOC_NIXL;
            else if (!strcmp(optarg, "malloc"))
                o->alloc = BENCH_ALLOC_MALLOC;
            else
                return reg_bad("--alloc: \"%s\" is neither nixl nor malloc", optarg);
            break;
        case RO_JSON: o->json_path = optarg; break;
        case RO_QUIET: o->quiet = 1; break;
        case RO_TIMEOUT:
            if (parse_u64(optarg, 3600000, &v) || v == 0)
                return reg_bad("--timeout-ms: \"%s\" is not a number of milliseconds", optarg);
            o->timeout_ms = (uint32_t)v;
            break;
        case RO_HELP: reg_usage(stdout); exit(0);
        default: reg_usage(stderr); return 2;
        }
    }
    if (optind < argc)
        return reg_bad("--reg-replay: unexpected argument \"%s\"", argv[optind]);
    return 0;
}

/* ---- the parent ---- */

/* Read exactly len bytes before the deadline; 0 on success, -1 on EOF or
 * timeout. */
static int read_until(int fd, void *buf, size_t len, uint64_t deadline)
{
    size_t got = 0;
    while (got < len) {
        uint64_t now = bench_now_ns();
        if (now >= deadline)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            continue;
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

static void kill_all(const pid_t *pids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
}

/* "2.5 KiB", "24.4 MiB", "0.89 GiB" */
static void fmt_bytes(uint64_t v, char *buf, size_t cap)
{
    if (v >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB", (double)v / (double)(1ull << 30));
    else if (v >= (1ull << 20))
        snprintf(buf, cap, "%.1f MiB", (double)v / (double)(1ull << 20));
    else
        snprintf(buf, cap, "%.1f KiB", (double)v / 1024.0);
}

static void report(const reg_opts_t *o, const uint64_t *sizes, const reg_result_t *res, const char *cap)
{
    uint64_t total = 0, smin = UINT64_MAX, smax = 0, slowest = 0;
    unsigned peak = 0;
    for (int i = 0; i < REG_BUFS; i++) {
        total += sizes[i];
        smin = sizes[i] < smin ? sizes[i] : smin;
        smax = sizes[i] > smax ? sizes[i] : smax;
    }
    for (uint32_t i = 0; i < o->procs; i++) {
        slowest = res[i].ns > slowest ? res[i].ns : slowest;
        peak = res[i].peak_threads > peak ? res[i].peak_threads : peak;
    }
    char lo[32], hi[32], tot[32];
    fmt_bytes(smin, lo, sizeof(lo));
    fmt_bytes(smax, hi, sizeof(hi));
    fmt_bytes(total, tot, sizeof(tot));
    if (!o->quiet) {
        printf("# nixlbench %s reg-replay: %u process(es) x %d buffers (Kimi-K3-like set / %" PRIu64
               ": %s .. %s, %s each), backend %s, alloc %s, NIXL_REG_CONCURRENCY=%s\n",
               nixl_version(), o->procs, REG_BUFS, o->scale, lo, hi, tot, o->backend, bench_alloc_name(o->alloc), cap);
        printf("%6s %10s %10s %13s %8s\n", "proc", "reg ms", "cpu ms", "peak threads", "before");
        for (uint32_t i = 0; i < o->procs; i++)
            printf("%6u %10.2f %10.2f %13u %8u\n", i, (double)res[i].ns / 1e6, (double)res[i].cpu_ns / 1e6,
                   res[i].peak_threads, res[i].base_threads);
        printf("# slowest %.2f ms, max peak threads %u (threads of one process, sampled every 1 ms: main, "
               "sampler, the backend's own and the registration workers)\n",
               (double)slowest / 1e6, peak);
        fflush(stdout);
    }
    if (o->json_path) {
        FILE *f = fopen(o->json_path, "w");
        if (!f) {
            fprintf(stderr, "nixlbench: cannot open %s: %s\n", o->json_path, strerror(errno));
            return;
        }
        fprintf(f,
                "{\"mode\":\"reg_replay\",\"backend\":\"%s\",\"alloc\":\"%s\",\"procs\":%u,\"buffers\":%d"
                ",\"reg_scale\":%" PRIu64 ",\"bytes_per_proc\":%" PRIu64 ",\"min_buffer\":%" PRIu64
                ",\"max_buffer\":%" PRIu64 ",\"reg_concurrency\":\"%s\",\"slowest_ms\":%.6g,\"max_peak_threads\":%u"
                ",\"reg_ms\":[",
                o->backend, bench_alloc_name(o->alloc), o->procs, REG_BUFS, o->scale, total, smin, smax, cap,
                (double)slowest / 1e6, peak);
        for (uint32_t i = 0; i < o->procs; i++)
            fprintf(f, "%s%.6g", i ? "," : "", (double)res[i].ns / 1e6);
        fputs("],\"cpu_ms\":[", f);
        for (uint32_t i = 0; i < o->procs; i++)
            fprintf(f, "%s%.6g", i ? "," : "", (double)res[i].cpu_ns / 1e6);
        fputs("],\"peak_threads\":[", f);
        for (uint32_t i = 0; i < o->procs; i++)
            fprintf(f, "%s%u", i ? "," : "", res[i].peak_threads);
        fputs("]}\n", f);
        fclose(f);
    }
}

int bench_reg_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--reg-replay") == 0)
            return 1;
    return 0;
}

int bench_reg_main(int argc, char **argv)
{
    reg_opts_t o;
    int rc = reg_parse(argc, argv, &o);
    if (rc)
        return rc;
    if (o.cap)
        setenv("NIXL_REG_CONCURRENCY", o.cap, 1);
    const char *cap = getenv("NIXL_REG_CONCURRENCY");
    cap = cap && cap[0] ? cap : "auto";
    uint64_t sizes[REG_BUFS];
    reg_sizes(o.scale, sizes);

    int ready[2], go[2], res[2];
    if (pipe(ready) || pipe(go) || pipe(res)) {
        fprintf(stderr, "nixlbench: pipe: %s\n", strerror(errno));
        return 1;
    }
    pid_t parent = getpid(), pids[REG_MAX_PROCS] = {0};
    fflush(NULL);
    for (uint32_t i = 0; i < o.procs; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            fprintf(stderr, "nixlbench: fork: %s\n", strerror(errno));
            kill_all(pids, i);
            return 1;
        }
        if (pids[i] == 0) {
            /* A process must not outlive a replay that crashed. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            close(ready[0]);
            close(go[1]);
            close(res[0]);
            _exit(child_run(&o, (int)i, ready[1], go[0], res[1], sizes));
        }
    }
    close(ready[1]);
    close(go[0]);
    close(res[1]);

    reg_result_t *results = calloc(o.procs, sizeof(*results));
    char *marks = malloc(o.procs);
    uint64_t deadline = bench_now_ns() + (uint64_t)o.timeout_ms * 1000000ull;
    int failed = 0;
    if (!results || !marks || read_until(ready[0], marks, o.procs, deadline) != 0) {
        fprintf(stderr, "nixlbench: not every process got ready within %u ms\n", o.timeout_ms);
        failed = 1;
    }
    close(go[1]); /* go: every process's read() returns */
    for (uint32_t i = 0; i < o.procs && !failed; i++) {
        reg_result_t r;
        if (read_until(res[0], &r, sizeof(r), deadline) != 0 || r.idx < 0 || (uint32_t)r.idx >= o.procs) {
            fprintf(stderr, "nixlbench: a process did not report within %u ms\n", o.timeout_ms);
            failed = 1;
            break;
        }
        results[r.idx] = r;
        if (r.status != NIXL_OK) {
            fprintf(stderr, "nixlbench: process %d: %s failed: %s (%s)\n", r.idx, r.what,
                    nixl_strerror((nixl_status_t)r.status), nixl_status_name((nixl_status_t)r.status));
            failed = 1;
        }
    }
    if (failed)
        kill_all(pids, o.procs);
    for (uint32_t i = 0; i < o.procs; i++) {
        int status = 0;
        if (waitpid(pids[i], &status, 0) == pids[i] && !failed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "nixlbench: process %u exited badly (status 0x%x)\n", i, (unsigned)status);
            failed = 1;
        }
    }
    close(ready[0]);
    close(res[0]);
    if (!failed)
        report(&o, sizes, results, cap);
    free(results);
    free(marks);
    return failed ? 1 : 0;
}
