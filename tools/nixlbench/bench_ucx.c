/*
 * bench_ucx.c - the raw limit of nixlbench's ucx rows: ucx_perftest
 * (Debian's ucx-utils), UCX's own benchmark, run in the same measurement
 * turns as the row.
 *
 * Per measurement a perftest server and client are started on this host;
 * both inherit the environment, so UCX_TLS and the rest of UCX's settings
 * pick the same transports as the row's agents.  The backend's endpoints
 * have UCX's peer failure handling, and that decides UCX's lanes (with
 * it, tcp and cma have no zero-copy put and UCX emulates RMA with active
 * messages), so perftest's endpoints get it too (-e), with the settings
 * the backend makes for it (MM_ERROR_HANDLING, KEEPALIVE_INTERVAL) where
 * the user left them alone: the same transport, not a faster one the row
 * cannot take.  The client runs the row's pattern as closely as perftest
 * has it, with messages of the row's block size, for about as many bytes
 * as a row part moves; its overall bandwidth is the limit:
 *   - WRITE, batch 1: ucp_put_lat, each put seen landed by the peer before
 *     the next (ping-pong; its rate is block / one-way latency).  A
 *     request of one piece ends when its bytes landed, which is that;
 *     ucp_put_bw -O 1 starts the next put once the last may reuse its
 *     buffer, overlapping the two copies of consecutive puts, a pattern no
 *     request has (on the CI box 1.2x put_lat's rate at 1 MiB);
 *   - WRITE, batch N: ucp_put_bw -O N, N puts outstanding (perftest has
 *     no flush per N puts: an upper bound for the row);
 *   - READ: ucp_get -O batch (a get completes when its bytes are here,
 *     as a request does).
 * Its
 * memory is application memory, as the row's: perftest allocates through
 * ucp_mem_map, and UCX's default allocator order (UCX_ALLOC_PRIO) takes
 * sysv's own segments first, which the peer maps straight in (a put is
 * one memcpy into a cache-hot mapping), a path no registered buffer of an
 * application gets (its bytes go as active messages through sysv's FIFO).
 * So perftest's puts run with UCX_ALLOC_PRIO=heap where the user left it
 * alone: over sm the ratio then says what libnixl costs, as over tcp (CI
 * box, 1 MiB: the limit 10.7 GB/s against 24.3 with UCX's memory).  Gets
 * keep UCX's memory (perftest_env says why).
 * libc only: nothing of UCX is linked.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_ucx.h"

/* The perftest binary: --perftest PATH, else ucx_perftest on PATH. */
static const char *perftest_path(const bench_opts_t *o)
{
    static char found[4096];
    static int looked;
    if (o->perftest)
        return strcmp(o->perftest, "none") ? o->perftest : NULL;
    if (!looked) {
        looked = 1;
        const char *path = getenv("PATH");
        while (path && *path) {
            const char *end = strchr(path, ':');
            size_t len = end ? (size_t)(end - path) : strlen(path);
            if (len && len + sizeof("/ucx_perftest") < sizeof(found)) {
                memcpy(found, path, len);
                memcpy(found + len, "/ucx_perftest", sizeof("/ucx_perftest"));
                if (access(found, X_OK) == 0)
                    return found;
            }
            path = end ? end + 1 : NULL;
        }
        found[0] = '\0';
    }
    return found[0] ? found : NULL;
}

int bench_ucx_wanted(const bench_opts_t *o)
{
    return !strcmp(o->backend, "ucx") && o->init_mem == BENCH_MEM_DRAM && o->tgt_mem == BENCH_MEM_DRAM &&
           perftest_path(o) != NULL;
}

void bench_ucx_describe(const bench_opts_t *o, FILE *f)
{
    if (strcmp(o->backend, "ucx") || o->init_mem != BENCH_MEM_DRAM || o->tgt_mem != BENCH_MEM_DRAM)
        return;
    const char *tls = getenv("UCX_TLS");
    const char *p = perftest_path(o);
    if (p)
        fprintf(f, "# limit: %s %s%s, message = block, outstanding = batch, UCX_TLS=%s, same run\n", p,
                o->op == NIXL_OP_WRITE ? "-t ucp_put_lat at batch 1 (each put landed before the next), else "
                                         "-t ucp_put_bw"
                                       : "-t ucp_get",
                o->op == NIXL_OP_WRITE ? " -e (peer failure handling, as the backend's endpoints), heap buffers"
                                       : " -e (peer failure handling, as the backend's endpoints), UCX's buffers",
                tls ? tls : "(unset)");
    else
        fprintf(f, "# limit: memcpy of the same pieces: %s\n",
                o->perftest ? "--perftest none" : "no ucx_perftest on PATH (Debian's ucx-utils)");
}

/* A port that was free a moment ago on every address, for the perftest
 * server (which binds the wildcard): bound on the wildcard, so that the
 * kernel skips a port some socket holds on one address only, as UCX's tcp
 * interfaces do. */
static unsigned free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
        bench_die("ucx_perftest: socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t al = sizeof(a);
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(s, (struct sockaddr *)&a, &al) != 0)
        bench_die("ucx_perftest: no free port: %s", strerror(errno));
    close(s);
    return ntohs(a.sin_port);
}

/* 1 when process pid holds the socket of this inode. */
static int pid_holds_socket(pid_t pid, unsigned long inode)
{
    char dir[64], want[48];
    snprintf(dir, sizeof(dir), "/proc/%ld/fd", (long)pid);
    snprintf(want, sizeof(want), "socket:[%lu]", inode);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int hit = 0;
    struct dirent *e;
    while (!hit && (e = readdir(d)) != NULL) {
        char path[128], link[64];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%.32s", dir, e->d_name);
        ssize_t len = readlink(path, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        hit = !strcmp(link, want);
    }
    closedir(d);
    return hit;
}

/* 1 once the server's own socket listens on port (from /proc/net/tcp*, so
 * that looking does not connect to the server, which would take our probe
 * for its client).  Whose socket it is matters: another process's listener
 * on the same port of another address is not the server (a client sent
 * there is refused). */
static int port_listening(pid_t server, unsigned port)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    char want[16];
    snprintf(want, sizeof(want), ":%04X", port);
    for (size_t i = 0; i < 2; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f)
            continue;
        char line[512];
        int hit = 0;
        while (!hit && fgets(line, sizeof(line), f)) {
            char local[128], state[8];
            unsigned long inode;
            /* sl local remote st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, "%*s %127s %*s %7s %*s %*s %*s %*s %*s %lu", local, state, &inode) != 3)
                continue;
            const char *colon = strrchr(local, ':');
            hit = colon && !strcmp(colon, want) && !strcmp(state, "0A") && pid_holds_socket(server, inode);
        }
        fclose(f);
        if (hit)
            return 1;
    }
    return 0;
}

/* perftest's environment: ours, plus the UCX settings the backend makes
 * for its endpoints (ucx.c) where the user left them alone, and for puts
 * heap buffers (above).  A get keeps UCX's own memory: over sm and tcp UCX
 * emulates a get of heap memory with active messages the perftest server
 * answers only now and then (CI box, sm: 0.6-2.5 GB/s at 1-64 MiB against
 * 7.6-9.2 for the row), a limit of perftest's server rather than of UCX.
 * Made before fork: the child of a threaded process only execs. */
static char **perftest_env(const bench_opts_t *o, int heap_buffers)
{
    extern char **environ;
    static char **envs[2];
    static char mm[] = "UCX_MM_ERROR_HANDLING=y", heap[] = "UCX_ALLOC_PRIO=heap", ka[64];
    char ***env = &envs[heap_buffers ? 1 : 0];
    if (*env)
        return *env;
    size_t n = 0;
    while (environ[n])
        n++;
    char **e = calloc(n + 4, sizeof(*e));
    if (!e)
        bench_die("ucx_perftest: out of memory");
    memcpy(e, environ, n * sizeof(*e));
    if (!getenv("UCX_MM_ERROR_HANDLING") && !getenv("UCX_POSIX_ERROR_HANDLING") && !getenv("UCX_SYSV_ERROR_HANDLING"))
        e[n++] = mm;
    if (heap_buffers && !getenv("UCX_ALLOC_PRIO"))
        e[n++] = heap;
    if (!getenv("UCX_KEEPALIVE_INTERVAL")) {
        snprintf(ka, sizeof(ka), "UCX_KEEPALIVE_INTERVAL=%.32sms",
                 bench_param(o, "keepalive_ms", "NIXL_UCX_KEEPALIVE_MS", "500"));
        e[n++] = ka;
    }
    *env = e;
    return e;
}

static pid_t spawn(const bench_opts_t *o, char *const argv[], int out_fd, int heap_buffers)
{
    char **env = perftest_env(o, heap_buffers);
    pid_t pid = fork();
    if (pid < 0)
        bench_die("ucx_perftest: fork: %s", strerror(errno));
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(out_fd >= 0 ? out_fd : null, 1);
            dup2(out_fd >= 0 ? out_fd : null, 2);
        }
        execve(argv[0], argv, env);
        _exit(127);
    }
    return pid;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait for pid up to deadline_ns; kill it past that.  Its wait status, or
 * -1 when it was killed. */
static int reap(pid_t pid, uint64_t deadline_ns)
{
    int ws;
    for (;;) {
        pid_t w = waitpid(pid, &ws, WNOHANG);
        if (w == pid)
            return ws;
        if (w < 0 && errno != EINTR)
            return -1;
        if (bench_now_ns() > deadline_ns) {
            kill(pid, SIGKILL);
            (void)waitpid(pid, &ws, 0);
            return -1;
        }
        sleep_ms(2);
    }
}

int bench_ucx_parse_csv(const char *out, double *bytes_per_s)
{
    /* The header names the columns; overall_bw is in MB/s of 2^20 bytes. */
    const char *h = strstr(out, "iterations,");
    if (!h)
        return -1;
    const char *hend = strchr(h, '\n');
    if (!hend)
        return -1;
    const char *hstop = hend[-1] == '\r' ? hend - 1 : hend;
    int col = -1, c = 0;
    for (const char *p = h; p < hstop; c++) {
        const char *comma = memchr(p, ',', (size_t)(hstop - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(hstop - p);
        if (len == strlen("overall_bw") && !memcmp(p, "overall_bw", len))
            col = c;
        if (!comma)
            break;
        p = comma + 1;
    }
    if (col < 0)
        return -1;
    const char *p = hend + 1;
    while (*p == ' ')
        p++;
    for (c = 0; c < col; c++) {
        p = strchr(p, ',');
        if (!p)
            return -1;
        p++;
    }
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !(v > 0) || !isfinite(v) || (*end != ',' && *end != '\n' && *end != '\0' && *end != '\r'))
        return -1;
    *bytes_per_s = v * 1048576.0;
    return 0;
}

double bench_ucx_limit(const bench_opts_t *o, uint64_t block, uint64_t batch, nixl_op_t op)
{
    const char *bin = perftest_path(o);
    if (!bin)
        bench_die("ucx_perftest: not found");
    /* About 256 MiB per measurement, like a row part; at least 100 messages. */
    uint64_t iters = (256ull << 20) / block;
    if (iters < 100)
        iters = 100;
    if (iters > 200000)
        iters = 200000;
    uint64_t warm = iters / 10 < 10 ? 10 : iters / 10;
    char port[16], size[24], n[24], w[24], outstanding[24];
    unsigned pnum = free_port();
    snprintf(port, sizeof(port), "%u", pnum);
    snprintf(size, sizeof(size), "%" PRIu64, block);
    snprintf(n, sizeof(n), "%" PRIu64, iters);
    snprintf(w, sizeof(w), "%" PRIu64, warm);
    snprintf(outstanding, sizeof(outstanding), "%" PRIu64, batch);
    char *server_argv[] = {(char *)bin, "-p", port, NULL};
    int lat = op == NIXL_OP_WRITE && batch == 1; /* a latency test: one at a time, no -O */
    const char *test = op != NIXL_OP_WRITE ? "ucp_get" : lat ? "ucp_put_lat" : "ucp_put_bw";
    char *client_argv[] = {(char *)bin, "127.0.0.1", "-p", port, "-t", (char *)test, "-s", size, "-n", n, "-w", w,
                           "-e", "-f", "-v", lat ? NULL : "-O", outstanding, NULL};
    uint64_t deadline = bench_now_ns() + (uint64_t)o->timeout_ms * 1000000ull;

    /* The port was free when picked; another process may take it before
     * the server binds it, and the server then exits: a new port, a few
     * times. */
    pid_t server = -1;
    for (int tries = 0; server < 0; tries++) {
        if (tries) {
            pnum = free_port();
            snprintf(port, sizeof(port), "%u", pnum);
        }
        server = spawn(o, server_argv, -1, op == NIXL_OP_WRITE);
        while (!port_listening(server, pnum)) {
            int ws;
            if (waitpid(server, &ws, WNOHANG) == server) {
                if (tries < 2) {
                    server = -1;
                    break;
                }
                bench_die("ucx_perftest: the server (%s -p %s) exited before it listened (status %d)", bin, port,
                          ws);
            }
            if (bench_now_ns() > deadline) {
                kill(server, SIGKILL);
                (void)waitpid(server, &ws, 0);
                bench_die("ucx_perftest: the server did not listen on port %s within %u ms", port, o->timeout_ms);
            }
            sleep_ms(2);
        }
    }
    int fds[2];
    if (pipe(fds) != 0)
        bench_die("ucx_perftest: pipe: %s", strerror(errno));
    pid_t client = spawn(o, client_argv, fds[1], op == NIXL_OP_WRITE);
    close(fds[1]);
    char out[16384];
    size_t len = 0;
    for (;;) {
        ssize_t k = read(fds[0], out + len, sizeof(out) - 1 - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
        if (len == sizeof(out) - 1) /* keep the tail: the numbers come last */
            len = 0;
    }
    out[len] = '\0';
    close(fds[0]);
    int cs = reap(client, deadline);
    int ss = reap(server, deadline);
    double bps;
    if (cs != 0 || bench_ucx_parse_csv(out, &bps) != 0)
        bench_die("ucx_perftest: %s %s -s %s -O %s failed (client status %d, server %d): %.400s", bin,
                  client_argv[5], size, outstanding, cs, ss, out);
    if (ss != 0)
        bench_die("ucx_perftest: the server ended with status %d", ss);
    return bps;
}
