/*
 * runner.c - the conformance battery's main: one table of cases run against
 * the backend named on the command line.
 *
 *   conformance --backend shm [--procs 1|2] [--filter NAME] [--timeout S] [--list]
 *               [--fault SPEC [--expect-fault]]
 *
 * Each case runs in its own forked process (and process group, so a target
 * child dies with it) under a deadline: a crash or a hang fails that case by
 * name and the battery goes on.  A case the backend cannot run (missing
 * capability) prints a SKIP line with the reason.  Exit status: 0 when
 * nothing failed, 1 when something failed, 77 when everything was skipped.
 * Under --fault (faults.c) every agent gets NIXL_FAULT=SPEC; with
 * --expect-fault a case ending with an injected error prints FAULT.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"

conf_opts_t conf_opts;

static const char *cur_case = "?";
static int report_fd = -1; /* case process -> runner: why it failed or skipped */

/* ------------------------------------------------------------------------
 * Assertions and notes
 * ------------------------------------------------------------------------ */

static void report(const char *prefix, const char *fmt, va_list ap)
{
    char msg[1024];
    int n = snprintf(msg, sizeof(msg), "%s", prefix);
    if (n < 0 || (size_t)n >= sizeof(msg))
        n = 0;
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    if (report_fd >= 0) {
        ssize_t w = write(report_fd, msg, strlen(msg));
        (void)w;
    } else {
        fprintf(stderr, "%s: %s\n", cur_case, msg);
    }
}

void conf_fail(const char *file, int line, const char *fmt, ...)
{
    char where[256];
    snprintf(where, sizeof(where), "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    report(where, fmt, ap);
    va_end(ap);
    fflush(NULL);
    /* _exit: a failed case must not run leak checks or destructors over
     * state it abandoned. */
    _exit(1);
}

static void report_fmt(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_fmt(const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(prefix, fmt, ap);
    va_end(ap);
}

void conf_fail_st(nixl_status_t st, const char *file, int line, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!conf_fault_is_injected(st))
        conf_fail(file, line, "%s", msg);
    /* Accepted only if no notification of a failed transfer reached the
     * target (this fails the case otherwise). */
    conf_fault_case_end(NULL);
    char where[256];
    snprintf(where, sizeof(where), "%s at %s:%d: ", nixl_status_name(st), file, line);
    report_fmt(where, "%s", msg);
    fflush(NULL);
    _exit(CONF_EXIT_FAULT);
}

void conf_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("", fmt, ap);
    va_end(ap);
    fflush(NULL);
    _exit(77);
}

void conf_note(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("      %s: %s\n", cur_case, msg);
    fflush(stdout);
}

void conf_check_bytes(const char *file, int line, const char *what, const void *got, const void *want, size_t len)
{
    if (memcmp(got, want, len) == 0)
        return;
    const uint8_t *g = got, *w = want;
    size_t i = 0;
    while (g[i] == w[i])
        i++;
    conf_fail(file, line, "%s differs at offset %zu of %zu: got 0x%02x, want 0x%02x", what, i, len, g[i], w[i]);
}

/* ------------------------------------------------------------------------
 * Helpers shared by the cases
 * ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint8_t conf_pattern_byte(uint64_t seed, uint64_t i)
{
    return (uint8_t)(mix64(seed * 0x100000001b3ull ^ (i >> 3)) >> ((i & 7) * 8));
}

void conf_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t start)
{
    uint8_t *p = buf;
    size_t i = 0;
    /* Head up to a word boundary of the stream, whole words, tail. */
    for (; i < len && ((start + i) & 7); i++)
        p[i] = conf_pattern_byte(seed, start + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix64(seed * 0x100000001b3ull ^ ((start + i) >> 3));
        for (int b = 0; b < 8; b++)
            p[i + (size_t)b] = (uint8_t)(w >> (b * 8));
    }
    for (; i < len; i++)
        p[i] = conf_pattern_byte(seed, start + i);
}

uint64_t conf_rand(uint64_t *state)
{
    *state += 1;
    return mix64(*state);
}

uint64_t conf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void conf_sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

nixl_agent_t *conf_agent_create(const char *name, int listen, nixl_backend_t **backend_out)
{
    nixl_agent_config_t cfg = {
        .field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN,
        .name = name,
        .listen = listen,
    };
    nixl_agent_t *agent = NULL;
    nixl_status_t s = nixl_agent_create(&cfg, &agent);
    if (s != NIXL_OK)
        conf_fail_st(s, __FILE__, __LINE__, "nixl_agent_create(%s): %s", name, nixl_status_name(s));
    s = nixl_backend_create(agent, conf_opts.backend, NULL, 0, backend_out);
    if (s != NIXL_OK)
        conf_fail_st(s, __FILE__, __LINE__, "nixl_backend_create(%s): %s", conf_opts.backend,
                     nixl_status_name(s));
    return agent;
}

nixl_status_t conf_register(nixl_agent_t *agent, void *addr, size_t len)
{
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)addr, .len = len, .dev_id = conf_buf_dev((uint64_t)(uintptr_t)addr)};
    nixl_dlist_t dl = {.mem_type = conf_mem_type(), .count = 1, .descs = &d};
    return nixl_mem_register(agent, &dl, NULL);
}

nixl_status_t conf_deregister(nixl_agent_t *agent, void *addr, size_t len)
{
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)addr, .len = len, .dev_id = conf_buf_dev((uint64_t)(uintptr_t)addr)};
    nixl_dlist_t dl = {.mem_type = conf_mem_type(), .count = 1, .descs = &d};
    return nixl_mem_deregister(agent, &dl, NULL);
}

nixl_status_t conf_wait(nixl_xfer_t *xfer, unsigned timeout_ms)
{
    uint64_t deadline = conf_now_ms() + timeout_ms;
    for (;;) {
        nixl_status_t s = conf_xfer_status(xfer);
        if (s != NIXL_IN_PROG)
            return s;
        if (conf_now_ms() >= deadline)
            return NIXL_ERR_TIMEOUT;
        conf_sleep_us(20);
    }
}

/* ------------------------------------------------------------------------
 * Running cases
 * ------------------------------------------------------------------------ */

typedef struct case_ref {
    const conf_case_t *c;
} case_ref_t;

static case_ref_t *all_cases;
static size_t num_cases;

static void cases_add(const conf_case_t *tab, size_t n)
{
    case_ref_t *v = realloc(all_cases, (num_cases + n) * sizeof(*v));
    if (!v)
        abort();
    all_cases = v;
    for (size_t i = 0; i < n; i++)
        all_cases[num_cases++].c = &tab[i];
}

/* NULL when the backend can run the case, else why not. */
static const char *case_unmet(const conf_case_t *c, char *buf, size_t cap)
{
    uint32_t caps = conf_opts.info->caps;
    if (c->shared && conf_opts.mem != NIXL_MEM_DRAM)
        return "--mem vram: the case is about nixl_mem_alloc host memory";
    if ((c->needs & CONF_NEED_PROCS2) && conf_opts.procs != 2)
        return "needs the target in its own process (run with --procs 2)";
    if (c->needs & CONF_NEED_XFER) {
        uint32_t want = conf_opts.procs == 1 ? NIXL_CAP_LOCAL : NIXL_CAP_SAME_HOST;
        /* A cross-host backend reaches any peer: the agents hold only the
         * backend under test, so the core takes it for this one too. */
        if (!(caps & (want | NIXL_CAP_CROSS_HOST))) {
            snprintf(buf, cap, "backend %s lacks %s", conf_opts.backend,
                     conf_opts.procs == 1 ? "NIXL_CAP_LOCAL (two agents in one process)"
                                          : "NIXL_CAP_SAME_HOST");
            return buf;
        }
        if (!(conf_opts.info->mem_types & NIXL_MEM_BIT(conf_opts.mem))) {
            snprintf(buf, cap, "backend %s does not take %s (--mem)", conf_opts.backend,
                     conf_opts.mem == NIXL_MEM_VRAM ? "VRAM" : "DRAM");
            return buf;
        }
    }
    if ((c->needs & CONF_NEED_NOTIF) && !(caps & NIXL_CAP_NOTIF)) {
        snprintf(buf, cap, "backend %s lacks NIXL_CAP_NOTIF", conf_opts.backend);
        return buf;
    }
    return NULL;
}

static void case_body(const conf_case_t *c)
{
    conf_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.c = c;
    ctx.shared = c->shared;
    conf_fault_case_begin(&ctx);
    ctx.agent = conf_agent_create(CONF_INIT_NAME, 0, &ctx.backend);
    c->fn(&ctx);
    conf_fault_case_end(&ctx);
    conf_target_stop(&ctx);
    nixl_agent_destroy(ctx.agent);
}

enum { RES_PASS, RES_FAIL, RES_SKIP, RES_FAULT };

static int case_run(const conf_case_t *c, unsigned timeout_s)
{
    char why[256];
    const char *unmet = case_unmet(c, why, sizeof(why));
    if (unmet) {
        printf("SKIP  %s: %s\n", c->name, unmet);
        return RES_SKIP;
    }
    int rp[2];
    if (pipe2(rp, O_CLOEXEC)) {
        printf("FAIL  %s: pipe2: %s\n", c->name, strerror(errno));
        return RES_FAIL;
    }
    fflush(NULL);
    uint64_t t0 = conf_now_ms();
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL  %s: fork: %s\n", c->name, strerror(errno));
        close(rp[0]);
        close(rp[1]);
        return RES_FAIL;
    }
    if (pid == 0) {
        setpgid(0, 0);
        close(rp[0]);
        report_fd = rp[1];
        cur_case = c->name;
        case_body(c);
        fflush(NULL);
        exit(0);
    }
    setpgid(pid, pid);
    close(rp[1]);

    int ws = 0, timed_out = 0;
    uint64_t deadline = t0 + (uint64_t)timeout_s * 1000u;
    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            ws = 0;
            break;
        }
        if (conf_now_ms() >= deadline) {
            timed_out = 1;
            kill(-pid, SIGKILL); /* the case and its target child */
            kill(pid, SIGKILL);
            while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        conf_sleep_us(2000);
    }
    /* Whatever the case left behind in its group (a target child) goes too. */
    kill(-pid, SIGKILL);

    char msg[1100];
    ssize_t n = 0;
    fcntl(rp[0], F_SETFL, O_NONBLOCK);
    for (;;) {
        ssize_t k = read(rp[0], msg + n, sizeof(msg) - 1 - (size_t)n);
        if (k <= 0)
            break;
        n += k;
    }
    close(rp[0]);
    msg[n > 0 ? n : 0] = 0;
    uint64_t ms = conf_now_ms() - t0;

    if (timed_out) {
        printf("FAIL  %s: hung: no result after %u s%s%s\n", c->name, timeout_s, n ? "; last report: " : "", msg);
        return RES_FAIL;
    }
    if (WIFSIGNALED(ws)) {
        printf("FAIL  %s: crashed with signal %d (%s)%s%s\n", c->name, WTERMSIG(ws), strsignal(WTERMSIG(ws)),
               n ? ": " : "", msg);
        return RES_FAIL;
    }
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    if (code == 0) {
        printf("PASS  %s (%llu ms)\n", c->name, (unsigned long long)ms);
        return RES_PASS;
    }
    if (code == 77) {
        printf("SKIP  %s: %s\n", c->name, n ? msg : "(no reason given)");
        return RES_SKIP;
    }
    if (code == CONF_EXIT_FAULT && conf_opts.expect_fault) {
        printf("FAULT %s: ended by injected %s (%llu ms)\n", c->name, msg, (unsigned long long)ms);
        return RES_FAULT;
    }
    printf("FAIL  %s: %s\n", c->name, n ? msg : "exited with an error and no report (sanitizer? see stderr)");
    return RES_FAIL;
}

/* Whether an instance of the backend can be created here at all (ucx with
 * no usable transport, say): tried once in a child, so the runner itself
 * never holds a backend across the forks of the cases.  0 when it can;
 * otherwise the creation's status, its name in why. */
static int backend_creatable(const char *name, char *why, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 0;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return 0;
    }
    if (pid == 0) {
        close(fds[0]);
        nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "conf_probe"};
        nixl_agent_t *a = NULL;
        nixl_backend_t *b = NULL;
        nixl_status_t st = nixl_agent_create(&cfg, &a);
        if (st == NIXL_OK)
            st = nixl_backend_create(a, name, NULL, 0, &b);
        if (a)
            nixl_agent_destroy(a);
        int32_t v = (int32_t)st;
        ssize_t w = write(fds[1], &v, sizeof(v));
        (void)w;
        _exit(0);
    }
    close(fds[1]);
    int32_t v = 0;
    ssize_t r = read(fds[0], &v, sizeof(v));
    close(fds[0]);
    waitpid(pid, NULL, 0);
    if (r != (ssize_t)sizeof(v) || v == NIXL_OK)
        return 0;
    snprintf(why, cap, "%s", nixl_status_name((nixl_status_t)v));
    return (int)v;
}

static const nixl_backend_info_t *backend_find(const char *name, char *avail, size_t cap)
{
    const nixl_backend_info_t *infos = NULL;
    size_t count = 0;
    avail[0] = 0;
    if (nixl_backends_available(&infos, &count) != NIXL_OK)
        return NULL;
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        if (strcmp(infos[i].name, name) == 0)
            return &infos[i];
        int k = snprintf(avail + used, cap - used, "%s%s", used ? ", " : "", infos[i].name);
        if (k > 0 && (size_t)k < cap - used)
            used += (size_t)k;
    }
    return NULL;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s --backend NAME [--procs 1|2] [--mem dram|vram] [--devs I,T] [--filter SUBSTRING]\n"
            "          [--timeout SECONDS] [--list] [--fault SPEC [--expect-fault]]\n"
            "          [--target-netns NAME --target-addr IP]\n"
            "  Runs the conformance battery against one backend.  --procs 2 puts the target\n"
            "  agent in a child process and exchanges metadata through its listener; with\n"
            "  --target-netns that child runs in the network namespace NAME (ip netns), its\n"
            "  listener reached at IP there (a cross-host backend between two hosts).  --mem vram\n"
            "  runs every case on GPU memory of both sides (initiator GPU I, target GPU T; 0,0).\n"
            "  --fault runs every agent under NIXL_FAULT=SPEC (docs/faults.md); --expect-fault lets a\n"
            "  case end with an error SPEC injects (FAULT), never with wrong bytes, a hang, another\n"
            "  error or a notification for a failed transfer.\n",
            argv0);
}

/* Every case is a fork of this process.  libfabric is loaded by its
 * backend at the first create (src/backends/libfabric/lf_fi.c), ~200 ms on
 * Debian, so each case would pay it again; loaded here once (not
 * initialized: no fi_* call), the cases inherit it, as they did when
 * libnixl linked it.  Failure is left to the cases to report. */
static void preload_backend_library(const char *backend)
{
    if (strcmp(backend, "libfabric") != 0)
        return;
    const char *lib = getenv("NIXL_LIBFABRIC_LIB");
    if (!dlopen(lib && *lib ? lib : "libfabric.so.1", RTLD_NOW | RTLD_LOCAL))
        printf("note: libfabric not preloaded: %s\n", dlerror());
}

int main(int argc, char **argv)
{
    const char *filter = NULL, *mem = NULL, *devs = NULL, *netns = NULL;
    unsigned timeout_s = 60;
    int list = 0;
    conf_opts.procs = 1;
    conf_opts.target_netns = -1;
    conf_opts.target_addr = "127.0.0.1";

    if (argc == 4 && strcmp(argv[1], "--target-role") == 0)
        return conf_target_main(atoi(argv[2]), atoi(argv[3]));
    if (argc == 6 && strcmp(argv[1], "--target-role") == 0) {
        /* The target of a VRAM run: its memory and GPUs as the driver's. */
        int rc = conf_mem_init(argv[4], argv[5], 0);
        return rc ? rc : conf_target_main(atoi(argv[2]), atoi(argv[3]));
    }

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--backend") == 0 && v) {
            conf_opts.backend = v;
            i++;
        } else if (strcmp(a, "--procs") == 0 && v) {
            conf_opts.procs = atoi(v);
            i++;
        } else if (strcmp(a, "--filter") == 0 && v) {
            filter = v;
            i++;
        } else if (strcmp(a, "--timeout") == 0 && v) {
            timeout_s = (unsigned)atoi(v);
            i++;
        } else if (strcmp(a, "--mem") == 0 && v) {
            mem = v;
            i++;
        } else if (strcmp(a, "--devs") == 0 && v) {
            devs = v;
            i++;
        } else if (strcmp(a, "--list") == 0) {
            list = 1;
        } else if (strcmp(a, "--fault") == 0 && v) {
            conf_opts.fault = v;
            i++;
        } else if (strcmp(a, "--expect-fault") == 0) {
            conf_opts.expect_fault = 1;
        } else if (strcmp(a, "--target-netns") == 0 && v) {
            netns = v;
            i++;
        } else if (strcmp(a, "--target-addr") == 0 && v) {
            conf_opts.target_addr = v;
            i++;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    cases_add(conf_cases_reg, conf_cases_reg_count);
    cases_add(conf_cases_xfer, conf_cases_xfer_count);
    cases_add(conf_cases_many, conf_cases_many_count);
    if (list) {
        for (size_t i = 0; i < num_cases; i++)
            printf("%-24s %s\n", all_cases[i].c->name, all_cases[i].c->doc);
        free(all_cases);
        return 0;
    }
    if (!conf_opts.backend || (conf_opts.procs != 1 && conf_opts.procs != 2) || timeout_s == 0) {
        usage(argv[0]);
        free(all_cases);
        return 2;
    }
    if (netns) {
        /* Opened here, entered by each target (target.c) before its exec. */
        char path[300];
        snprintf(path, sizeof(path), "/run/netns/%s", netns);
        if (conf_opts.procs != 2 || strcmp(conf_opts.target_addr, "127.0.0.1") == 0) {
            fprintf(stderr, "--target-netns needs --procs 2 and --target-addr (the target's address there)\n");
            free(all_cases);
            return 2;
        }
        conf_opts.target_netns = open(path, O_RDONLY | O_CLOEXEC);
        if (conf_opts.target_netns < 0) {
            fprintf(stderr, "--target-netns %s: %s: %s\n", netns, path, strerror(errno));
            free(all_cases);
            return 2;
        }
    }
    if (conf_fault_init()) {
        usage(argv[0]);
        free(all_cases);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    int mrc = conf_mem_init(mem, devs, 1);
    if (mrc) {
        free(all_cases);
        return mrc;
    }

    /* Re-executing ourselves for the target must not depend on PATH. */
    static char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        fprintf(stderr, "cannot read /proc/self/exe: %s\n", strerror(errno));
        return 1;
    }
    exe[n] = 0;
    conf_opts.exe = exe;

    char avail[512];
    conf_opts.info = backend_find(conf_opts.backend, avail, sizeof(avail));
    if (!conf_opts.info) {
        printf("SKIP  all: backend '%s' is not available here (available: %s)\n", conf_opts.backend,
               avail[0] ? avail : "none");
        free(all_cases);
        return 77;
    }
    char why[64];
    if (backend_creatable(conf_opts.backend, why, sizeof(why)) == NIXL_ERR_NOT_SUPPORTED) {
        printf("SKIP  all: backend '%s' cannot be created here (%s: the log line above says why)\n",
               conf_opts.backend, why);
        free(all_cases);
        return 77;
    }
    preload_backend_library(conf_opts.backend);
    const nixl_backend_info_t *bi = conf_opts.info;
    printf("conformance: backend %s (%s), caps:%s%s%s%s%s, procs %d\n", bi->name, bi->origin,
           bi->caps & NIXL_CAP_LOCAL ? " local" : "", bi->caps & NIXL_CAP_SAME_HOST ? " same_host" : "",
           bi->caps & NIXL_CAP_CROSS_HOST ? " cross_host" : "", bi->caps & NIXL_CAP_NOTIF ? " notif" : "",
           bi->caps & NIXL_CAP_PROGRESS ? " progress" : "", conf_opts.procs);

    size_t pass = 0, fail = 0, skip = 0, faulted = 0;
    for (size_t i = 0; i < num_cases; i++) {
        const conf_case_t *c = all_cases[i].c;
        if (filter && !strstr(c->name, filter))
            continue;
        switch (case_run(c, timeout_s)) {
        case RES_PASS:
            pass++;
            break;
        case RES_SKIP:
            skip++;
            break;
        case RES_FAULT:
            faulted++;
            break;
        default:
            fail++;
            break;
        }
    }
    free(all_cases);
    if (conf_opts.fault)
        printf("summary: %zu passed, %zu ended by an injected fault, %zu skipped, %zu failed (backend %s, procs %d, "
               "%s, NIXL_FAULT=%s)\n",
               pass, faulted, skip, fail, conf_opts.backend, conf_opts.procs,
               conf_opts.mem == NIXL_MEM_VRAM ? "VRAM" : "DRAM", conf_opts.fault);
    else
        printf("summary: %zu passed, %zu skipped, %zu failed (backend %s, procs %d, %s)\n", pass, skip, fail,
               conf_opts.backend, conf_opts.procs, conf_opts.mem == NIXL_MEM_VRAM ? "VRAM" : "DRAM");
    if (conf_fault_summary(faulted))
        fail++;
    if (fail)
        return 1;
    if (pass + faulted == 0)
        return 77;
    return 0;
}
