/*
 * nixlbench.c - the project's benchmark: options, the two roles, and the
 * target process's life cycle.
 *
 * Without --peer both sides run on this host: the benchmark re-executes
 * itself as the target (--role target), learns the target's metadata port
 * through a pipe and drives the transfers from this process; the target is
 * told to quit at the end and reaped, and its failure fails the run.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_reg.h"
#include "bench_storage.h"
#include "bench_gds.h"
#ifdef BENCH_HAVE_OFI
#include "bench_ofi.h"
#endif

static pid_t child_pid;   /* the spawned target, 0 when none */
static int child_status;  /* valid once child_done */
static int child_done;

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void bench_set_child(pid_t pid)
{
    child_pid = pid;
    child_done = 0;
}

static void child_describe(char *buf, size_t cap)
{
    if (WIFEXITED(child_status))
        snprintf(buf, cap, "exit status %d", WEXITSTATUS(child_status));
    else if (WIFSIGNALED(child_status))
        snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(child_status), strsignal(WTERMSIG(child_status)));
    else
        snprintf(buf, cap, "status 0x%x", (unsigned)child_status);
}

int bench_child_alive(void)
{
    if (child_pid <= 0)
        return 0;
    if (!child_done && waitpid(child_pid, &child_status, WNOHANG) == child_pid)
        child_done = 1;
    return child_done ? -1 : 0;
}

static void child_kill(void)
{
    if (child_pid <= 0 || bench_child_alive() < 0)
        return;
    kill(child_pid, SIGKILL);
    if (waitpid(child_pid, &child_status, 0) == child_pid)
        child_done = 1;
}

int bench_child_reap(nixl_agent_t *agent, uint32_t timeout_ms)
{
    char why[64];
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    const struct timespec nap = {0, 1000000};
    if (child_pid <= 0)
        return 0;
    while (bench_child_alive() == 0) {
        if (bench_now_ns() > deadline) {
            fprintf(stderr, "nixlbench: the target did not exit within %u ms of \"quit\"; killing it\n",
                    timeout_ms);
            child_kill();
            child_pid = 0;
            return -1;
        }
        /* Progress errors here only matter if the target never exits. */
        (void)nixl_agent_progress(agent);
        nanosleep(&nap, NULL);
    }
    child_pid = 0;
    if (WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0)
        return 0;
    child_describe(why, sizeof(why));
    fprintf(stderr, "nixlbench: the target failed: %s\n", why);
    return -1;
}

static void (*at_exit_fns[4])(void);
static unsigned n_at_exit;

void bench_at_exit(void (*fn)(void))
{
    if (n_at_exit == sizeof(at_exit_fns) / sizeof(at_exit_fns[0]) || atexit(fn) != 0)
        bench_die("more exit handlers than nixlbench keeps");
    at_exit_fns[n_at_exit++] = fn;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("nixlbench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    child_kill();
    /* Each handler runs once: one that dies runs the rest. */
    while (n_at_exit)
        at_exit_fns[--n_at_exit]();
    fflush(NULL);
    _exit(1);
}

void bench_check(nixl_status_t st, const char *call)
{
    if (st >= 0)
        return;
    bench_die("%s failed: %s (%s)", call, nixl_strerror(st), nixl_status_name(st));
}

/* ---------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fputs("usage: nixlbench [options]\n"
          "  --backend NAME         backend to measure (default shm)\n"
          "  --op write|read        write: local -> target; read: target -> local (default write)\n"
          "  --block SIZE|MIN:MAX   bytes per descriptor, or a sweep of powers of two (K/M/G suffixes;\n"
          "                         default 1K:64M)\n"
          "  --batch N|MIN:MAX      descriptors per request, or a sweep of powers of two (default 1)\n"
          "  --iters N              timed posts per row (default enough to move 256 MiB, at least 20,\n"
          "                         at most 100000)\n"
          "  --warmup N             untimed posts per row (default 3)\n"
          "  --pairs N              the row's timed posts are split into N parts, each followed by one\n"
          "                         measurement of the raw limit (A B A B ...); ratio = median of the N\n"
          "                         part ratios, with their min and max (default 5 for host memory, 1\n"
          "                         with VRAM on a side)\n"
          "  --layout shuffled|contig  where initiator block i lands on the target: a random slot\n"
          "                         (default; runs cannot merge) or slot i (runs merge)\n"
          "  --alloc nixl|malloc    buffers from nixl_mem_alloc (shared: shm.map) or malloc (shm.cma)\n"
          "  --initiator-mem dram|vram  --target-mem dram|vram   memory of each side (default dram)\n"
          "  --initiator-dev N      --target-dev N     GPU of each side's vram (default 0)\n"
          "  --kv-replay            one KV request instead of rows: DeepSeek-V2-Lite, 27 layers x 8192\n"
          "                         tokens x 1152 B, page size 1, one buffer per layer, slots shuffled\n"
          "                         on both sides; reports ms per request and the path\n"
          "  --kv-e2e               --kv-replay, then --iters whole requests of each engine's shape,\n"
          "                         fresh slots each: SGLang (nixl_xfer_create of two lists) and vLLM\n"
          "                         (nixl_xfer_make from lists of every slot prepared once); reports\n"
          "                         each phase (make, post, wait, release) against the copy floor\n"
          "  --reg-replay           N processes registering a Kimi-K3-like KV pool at once: time and\n"
          "                         peak threads (nixlbench --reg-replay --help for its options)\n"
          "  --storage              host memory to and from a file (posix) against a raw io_uring loop\n"
          "                         (nixlbench --storage --help for its options)\n"
          "  --gds                  GPU memory to and from a file (gds) against a raw cuFile loop\n"
          "                         (nixlbench --gds --help for its options)\n"
          "  --param KEY=VALUE      backend parameter, both sides (repeatable; e.g. threads=0)\n"
          "  --perftest PATH|none   ucx rows: the ucx_perftest whose same-run rate is the limit\n"
          "                         (default: ucx_perftest on PATH; none, or not found: memcpy)\n"
          "  --json FILE            one JSON object per row per line\n"
          "  --quiet                no table on stdout (errors still go to stderr)\n"
          "  --max-bytes SIZE       skip rows whose block x batch exceeds this (default 1G)\n"
          "  --seed N               pattern and permutation seed (default 1)\n"
          "  --timeout-ms N         wait for the target's answers at most this long (default 30000)\n"
          "  --etcd URL[,URL...]    N processes coordinated through etcd (run the same command N\n"
          "                         times, on any hosts): ranks, barriers, metadata (docs/etcd.md)\n"
          "  --ranks N              --etcd: how many processes take part\n"
          "  --scheme pairwise|many-to-one|one-to-many  --etcd: 2k -> 2k+1, all -> 0, or 0 -> all\n"
          "  --run-id ID            --etcd: name of the run in etcd (default nixlbench)\n"
          "  --peer IP:PORT         use a target started elsewhere instead of spawning one\n"
          "  --role target          be a target: --listen-port P (0: any), serves until \"quit\"\n"
          "  --target-poll-us N     target's sleep between idle polls (default 1000, 0: spin)\n",
          f);
}

enum {
    OPT_BACKEND = 256, OPT_OP, OPT_BLOCK, OPT_BATCH, OPT_ITERS, OPT_WARMUP, OPT_LAYOUT, OPT_ALLOC,
    OPT_INIT_MEM, OPT_TARGET_MEM, OPT_JSON, OPT_QUIET, OPT_MAX_BYTES, OPT_SEED, OPT_TIMEOUT, OPT_PEER,
    OPT_ROLE, OPT_LISTEN_PORT, OPT_REPORT_FD, OPT_POLL_US, OPT_PARAM, OPT_HELP,
    OPT_INIT_DEV, OPT_TARGET_DEV, OPT_KV_REPLAY, OPT_KV_E2E, OPT_PAIRS,
    OPT_ETCD, OPT_RANKS, OPT_SCHEME, OPT_RUN_ID, /* --etcd mode */
    OPT_PERFTEST,
};

static const struct option long_opts[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"op", required_argument, NULL, OPT_OP},
    {"block", required_argument, NULL, OPT_BLOCK},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"iters", required_argument, NULL, OPT_ITERS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"pairs", required_argument, NULL, OPT_PAIRS},
    {"layout", required_argument, NULL, OPT_LAYOUT},
    {"alloc", required_argument, NULL, OPT_ALLOC},
    {"initiator-mem", required_argument, NULL, OPT_INIT_MEM},
    {"target-mem", required_argument, NULL, OPT_TARGET_MEM},
    {"json", required_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
    {"seed", required_argument, NULL, OPT_SEED},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"peer", required_argument, NULL, OPT_PEER},
    {"role", required_argument, NULL, OPT_ROLE},
    {"listen-port", required_argument, NULL, OPT_LISTEN_PORT},
    {"report-fd", required_argument, NULL, OPT_REPORT_FD},
    {"target-poll-us", required_argument, NULL, OPT_POLL_US},
    {"param", required_argument, NULL, OPT_PARAM},
    {"help", no_argument, NULL, OPT_HELP},
    {"initiator-dev", required_argument, NULL, OPT_INIT_DEV},
    {"target-dev", required_argument, NULL, OPT_TARGET_DEV},
    {"kv-replay", no_argument, NULL, OPT_KV_REPLAY},
    {"kv-e2e", no_argument, NULL, OPT_KV_E2E},
    {"etcd", required_argument, NULL, OPT_ETCD},
    {"ranks", required_argument, NULL, OPT_RANKS},
    {"scheme", required_argument, NULL, OPT_SCHEME},
    {"run-id", required_argument, NULL, OPT_RUN_ID},
    {"perftest", required_argument, NULL, OPT_PERFTEST},
    {NULL, 0, NULL, 0},
};

static void bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void bad_usage(const char *fmt, ...)
{
    va_list ap;
    fputs("nixlbench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(nixlbench --help lists the options)\n", stderr);
    exit(2);
}

static uint64_t parse_count(const char *opt, const char *s, uint64_t max)
{
    uint64_t v;
    if (bench_parse_size(s, &v) || v > max)
        bad_usage("%s: \"%s\" is not a number up to %" PRIu64, opt, s, max);
    return v;
}

static bench_mem_t parse_mem(const char *opt, const char *s)
{
    if (!strcmp(s, "dram"))
        return BENCH_MEM_DRAM;
    if (!strcmp(s, "vram"))
        return BENCH_MEM_VRAM;
    bad_usage("%s: unknown memory \"%s\" (dram or vram)", opt, s);
}

static void parse_peer(const char *s, bench_opts_t *o, char *ip, size_t cap)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= cap)
        bad_usage("--peer: expected IP:PORT, got \"%s\"", s);
    memcpy(ip, s, (size_t)(colon - s));
    ip[colon - s] = '\0';
    uint64_t port = parse_count("--peer", colon + 1, 65535);
    if (!port)
        bad_usage("--peer: port 0 is not a port");
    o->peer_ip = ip;
    o->peer_port = (uint16_t)port;
}

/* KEY=VALUE: the value stays in argv, the key is copied into the options. */
static void add_param(bench_opts_t *o, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        bad_usage("--param: expected KEY=VALUE, got \"%s\"", kv);
    if (o->num_params == sizeof(o->params) / sizeof(o->params[0]))
        bad_usage("--param: at most %zu parameters", sizeof(o->params) / sizeof(o->params[0]));
    char *key = o->param_keys[o->num_params];
    if ((size_t)(eq - kv) >= sizeof(o->param_keys[0]))
        bad_usage("--param: key of \"%s\" is too long", kv);
    memcpy(key, kv, (size_t)(eq - kv));
    key[eq - kv] = '\0';
    o->params[o->num_params++] = (nixl_param_t){.key = key, .value = eq + 1};
}

static void parse_opts(int argc, char **argv, bench_opts_t *o, char *ip, size_t ip_cap)
{
    *o = (bench_opts_t){
        .backend = "shm", .op = NIXL_OP_WRITE, .alloc = BENCH_ALLOC_NIXL, .layout = BENCH_LAYOUT_SHUFFLED,
        .block_min = 1024, .block_max = 64u << 20, .batch_min = 1, .batch_max = 1, .warmup = 3,
        .max_bytes = 1ull << 30, .seed = 1, .timeout_ms = 30000, .target_poll_us = 1000, .report_fd = -1,
    };
    int c;
    while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (c) {
        case OPT_BACKEND: o->backend = optarg; break;
        case OPT_PERFTEST:
            if (strcmp(optarg, "none") && access(optarg, X_OK) != 0)
                bad_usage("--perftest: \"%s\" is not an executable (a ucx_perftest, or none)", optarg);
            o->perftest = optarg;
            break;
        case OPT_OP:
            if (!strcmp(optarg, "write"))
                o->op = NIXL_OP_WRITE;
            else if (!strcmp(optarg, "read"))
                o->op = NIXL_OP_READ;
            else
                bad_usage("--op: \"%s\" is neither read nor write", optarg);
            break;
        case OPT_BLOCK:
            if (bench_parse_range(optarg, &o->block_min, &o->block_max) || o->block_max > (1ull << 40))
                bad_usage("--block: expected SIZE or MIN:MAX (powers of two, at most 1T), got \"%s\"", optarg);
            break;
        case OPT_BATCH:
            if (bench_parse_range(optarg, &o->batch_min, &o->batch_max) || o->batch_max > (1ull << 31))
                bad_usage("--batch: expected N or MIN:MAX (powers of two, at most 2G), got \"%s\"", optarg);
            break;
        case OPT_ITERS: o->iters = parse_count("--iters", optarg, 1ull << 40); break;
        case OPT_WARMUP: o->warmup = parse_count("--warmup", optarg, 1ull << 40); break;
        case OPT_PAIRS:
            o->pairs = parse_count("--pairs", optarg, 1000);
            if (o->pairs == 0)
                bad_usage("--pairs: at least 1");
            break;
        case OPT_LAYOUT:
            if (!strcmp(optarg, "shuffled"))
                o->layout = BENCH_LAYOUT_SHUFFLED;
            else if (!strcmp(optarg, "contig"))
                o->layout = BENCH_LAYOUT_CONTIG;
            else
                bad_usage("--layout: \"%s\" is neither shuffled nor contig", optarg);
            break;
        case OPT_ALLOC:
            if (!strcmp(optarg, "nixl"))
                o->alloc = BENCH_ALLOC_NIXL;
            else if (!strcmp(optarg, "malloc"))
                o->alloc = BENCH_ALLOC_MALLOC;
            else
                bad_usage("--alloc: \"%s\" is neither nixl nor malloc", optarg);
            break;
        case OPT_INIT_MEM: o->init_mem = parse_mem("--initiator-mem", optarg); break;
        case OPT_TARGET_MEM: o->tgt_mem = parse_mem("--target-mem", optarg); break;
        case OPT_INIT_DEV: o->init_dev = (int)parse_count("--initiator-dev", optarg, 1023); break;
        case OPT_TARGET_DEV: o->tgt_dev = (int)parse_count("--target-dev", optarg, 1023); break;
        case OPT_KV_REPLAY: o->kv_replay = 1; break;
        case OPT_KV_E2E: o->kv_replay = o->kv_e2e = 1; break;
        case OPT_JSON: o->json_path = optarg; break;
        case OPT_QUIET: o->quiet = 1; break;
        case OPT_MAX_BYTES:
            if (bench_parse_size(optarg, &o->max_bytes) || !o->max_bytes)
                bad_usage("--max-bytes: \"%s\" is not a size", optarg);
            break;
        case OPT_SEED: o->seed = parse_count("--seed", optarg, UINT64_MAX); break;
        case OPT_TIMEOUT: o->timeout_ms = (uint32_t)parse_count("--timeout-ms", optarg, 3600000); break;
        case OPT_PEER: parse_peer(optarg, o, ip, ip_cap); break;
        case OPT_ROLE:
            if (!strcmp(optarg, "target"))
                o->is_target = 1;
            else if (!strcmp(optarg, "initiator"))
                o->is_target = 0;
            else
                bad_usage("--role: \"%s\" is neither initiator nor target", optarg);
            break;
        case OPT_LISTEN_PORT: o->listen_port = (uint16_t)parse_count("--listen-port", optarg, 65535); break;
        case OPT_REPORT_FD: o->report_fd = (int)parse_count("--report-fd", optarg, 1 << 20); break;
        case OPT_POLL_US: o->target_poll_us = (uint32_t)parse_count("--target-poll-us", optarg, 1000000); break;
        case OPT_PARAM: add_param(o, optarg); break;
        case OPT_ETCD: o->etcd_url = optarg; break;
        case OPT_RANKS: o->ranks = (uint32_t)parse_count("--ranks", optarg, 1024); break;
        case OPT_SCHEME:
            if (!strcmp(optarg, "pairwise"))
                o->scheme = BENCH_SCHEME_PAIRWISE;
            else if (!strcmp(optarg, "many-to-one"))
                o->scheme = BENCH_SCHEME_MANY_TO_ONE;
            else if (!strcmp(optarg, "one-to-many"))
                o->scheme = BENCH_SCHEME_ONE_TO_MANY;
            else
                bad_usage("--scheme: \"%s\" is not pairwise, many-to-one or one-to-many", optarg);
            break;
        case OPT_RUN_ID: o->run_id = optarg; break;
        case OPT_HELP: usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc)
        bad_usage("unexpected argument \"%s\"", argv[optind]);
    if (o->is_target && o->peer_ip)
        bad_usage("--peer is for the initiator; a target listens (--listen-port)");
    if (o->etcd_url && (o->is_target || o->peer_ip))
        bad_usage("--etcd replaces --peer and --role: every rank runs the same command");
    if (o->etcd_url && o->ranks < 2)
        bad_usage("--etcd needs --ranks N (2 or more)");
    if (!o->run_id)
        o->run_id = "nixlbench";
    for (const char *r = o->run_id; *r; r++)
        if (!((*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z') || (*r >= '0' && *r <= '9') || strchr("_.-", *r)) ||
            r - o->run_id >= 64)
            bad_usage("--run-id: 1..64 characters of [A-Za-z0-9_.-]");
    if (!o->run_id[0])
        bad_usage("--run-id: 1..64 characters of [A-Za-z0-9_.-]");
}

/* Re-executes this binary as the target and returns the port it listens on. */
static uint16_t spawn_target(const bench_opts_t *o)
{
    int fds[2];
    if (pipe(fds))
        bench_die("pipe: %s", strerror(errno));
    char fd_arg[16], poll_arg[16];
    snprintf(fd_arg, sizeof(fd_arg), "%d", fds[1]);
    snprintf(poll_arg, sizeof(poll_arg), "%u", o->target_poll_us);
    char *args[16 + 2 * sizeof(o->params) / sizeof(o->params[0])];
    char param_args[sizeof(o->params) / sizeof(o->params[0])][256];
    size_t na = 0;
    args[na++] = "nixlbench";
    args[na++] = "--role";
    args[na++] = "target";
    args[na++] = "--listen-port";
    args[na++] = "0";
    args[na++] = "--backend";
    args[na++] = (char *)o->backend;
    args[na++] = "--report-fd";
    args[na++] = fd_arg;
    args[na++] = "--target-poll-us";
    args[na++] = poll_arg;
    for (size_t i = 0; i < o->num_params; i++) {
        snprintf(param_args[i], sizeof(param_args[i]), "%s=%s", o->params[i].key, o->params[i].value);
        args[na++] = "--param";
        args[na++] = param_args[i];
    }
    args[na] = NULL;
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        /* The target must not outlive a benchmark that crashed. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(fds[0]);
        execv("/proc/self/exe", args);
        fprintf(stderr, "nixlbench: exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    bench_set_child(pid);
    close(fds[1]);

    char line[64];
    size_t n = 0;
    uint64_t deadline = bench_now_ns() + (uint64_t)o->timeout_ms * 1000000ull;
    while (n < sizeof(line) - 1 && !memchr(line, '\n', n)) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        uint64_t now = bench_now_ns();
        if (now >= deadline)
            bench_die("the target did not report its port within %u ms", o->timeout_ms);
        int rc = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            bench_die("poll: %s", strerror(errno));
        if (rc == 0)
            continue;
        ssize_t got = read(fds[0], line + n, sizeof(line) - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            char why[64] = "still running";
            for (int i = 0; i < 100 && bench_child_alive() == 0; i++)
                usleep(10000);
            if (bench_child_alive() < 0)
                child_describe(why, sizeof(why));
            bench_die("the target exited before reporting its port (%s)", why);
        }
        n += (size_t)got;
    }
    close(fds[0]);
    line[n] = '\0';
    unsigned port;
    if (sscanf(line, "port %u", &port) != 1 || port == 0 || port > 65535)
        bench_die("unexpected report from the target: \"%s\"", line);
    return (uint16_t)port;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    char ip[64];
#ifdef BENCH_HAVE_OFI
    /* The raw target of the libfabric limit (bench_ofi.c). */
    if (argc > 1 && strcmp(argv[1], "--ofi-raw-target") == 0)
        return bench_ofi_target_main(argc, argv);
#endif
    /* The registration replay has options of its own (bench_reg.c). */
    if (bench_reg_wanted(argc, argv))
        return bench_reg_main(argc, argv);
    /* So have the storage rows (bench_storage.c). */
    if (bench_storage_wanted(argc, argv))
        return bench_storage_main(argc, argv);
#ifdef BENCH_HAVE_GDS
    /* And GPU memory to files through gds (bench_gds.c). */
    if (bench_gds_wanted(argc, argv))
        return bench_gds_main(argc, argv);
#endif
    parse_opts(argc, argv, &o, ip, sizeof(ip));
    /* A vanished peer must be an error return, not a signal. */
    signal(SIGPIPE, SIG_IGN);

    if (o.etcd_url)
        return bench_run_etcd(&o);
    if (o.is_target)
        return bench_run_target(&o);
    if (o.peer_ip)
        return o.kv_replay ? bench_kv_run(&o, o.peer_ip, o.peer_port) : bench_run_initiator(&o, o.peer_ip, o.peer_port);
    uint16_t port = spawn_target(&o);
    return o.kv_replay ? bench_kv_run(&o, "127.0.0.1", port) : bench_run_initiator(&o, "127.0.0.1", port);
}
