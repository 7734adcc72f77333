/*
 * bench_etcd_run.c - runs nixlbench's etcd mode as a test: a private etcd,
 * N copies of the same nixlbench command, nothing shared but the etcd URL.
 *
 *   bench_etcd_run NIXLBENCH --ranks N --scheme S [--netns] [--need-backend B] [-- nixlbench args]
 *
 * Passes when every rank exits 0 (each row was verified byte for byte by
 * the ranks themselves) and rank 0, alone, wrote one JSON row per row of
 * the sweep.  With --netns, two ranks run in two network namespaces behind
 * a bridge and reach etcd on the bridge address.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd_server.h"
#include "nixl.h"

#define MAX_RANKS 8
#define RUN_TIMEOUT_MS 90000u

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    int c;
    if (!f)
        return 0;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    const char *bench = NULL, *scheme = "pairwise", *need = NULL;
    int ranks = 2, use_netns = 0, extra = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            extra = i + 1;
            break;
        } else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
            ranks = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--scheme") && i + 1 < argc) {
            scheme = argv[++i];
        } else if (!strcmp(argv[i], "--netns")) {
            use_netns = 1;
        } else if (!strcmp(argv[i], "--need-backend") && i + 1 < argc) {
            need = argv[++i];
        } else if (!bench) {
            bench = argv[i];
        }
    }
    if (!bench || ranks < 2 || ranks > MAX_RANKS || (use_netns && ranks != 2)) {
        fprintf(stderr, "usage: %s NIXLBENCH --ranks 2..%d --scheme S [--netns (2 ranks)] [--need-backend B] [-- args]\n", argv[0],
                MAX_RANKS);
        return 2;
    }

    if (need) {
        const nixl_backend_info_t *infos;
        size_t nb = 0;
        int found = 0;
        if (nixl_backends_available(&infos, &nb) == NIXL_OK)
            for (size_t i = 0; i < nb; i++)
                found |= !strcmp(infos[i].name, need);
        if (!found) {
            printf("SKIP: backend %s is not available in this build\n", need);
            return 77;
        }
    }
    test_netns_t nn = {0};
    if (use_netns && test_netns_create(&nn))
        return 77;
    etcd_server_t srv;
    int rc = etcd_server_start(&srv, use_netns ? nn.bridge_ip : NULL);
    if (rc) {
        test_netns_destroy(&nn);
        return rc;
    }
    char namespace[64], json[MAX_RANKS][320];
    snprintf(namespace, sizeof(namespace), "/nixl-bench-test-%ld", (long)getpid());
    setenv("NIXL_ETCD_NAMESPACE", namespace, 1);

    pid_t pids[MAX_RANKS];
    fflush(NULL);
    for (int r = 0; r < ranks; r++) {
        snprintf(json[r], sizeof(json[r]), "%s/rank%d.json", srv.dir, r);
        char *av[64];
        int n = 0;
        char ranks_s[8];
        snprintf(ranks_s, sizeof(ranks_s), "%d", ranks);
        if (use_netns) {
            av[n++] = "ip";
            av[n++] = "netns";
            av[n++] = "exec";
            av[n++] = nn.ns[r];
        }
        av[n++] = (char *)bench;
        av[n++] = "--etcd";
        av[n++] = srv.url;
        av[n++] = "--ranks";
        av[n++] = ranks_s;
        av[n++] = "--scheme";
        av[n++] = (char *)scheme;
        av[n++] = "--json";
        av[n++] = json[r];
        av[n++] = "--timeout-ms";
        av[n++] = "30000";
        for (int i = extra; i < argc && n < 62; i++)
            av[n++] = argv[i];
        av[n] = NULL;
        pid_t parent = getpid();
        pids[r] = fork();
        if (pids[r] < 0) {
            fprintf(stderr, "fork: %s\n", strerror(errno));
            return 1;
        }
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            execvp(av[0], av);
            fprintf(stderr, "exec %s: %s\n", av[0], strerror(errno));
            _exit(127);
        }
    }
    int failed = 0;
    uint64_t deadline = now_ms() + RUN_TIMEOUT_MS;
    for (int r = 0; r < ranks; r++) {
        int status;
        for (;;) {
            if (waitpid(pids[r], &status, WNOHANG) == pids[r])
                break;
            if (now_ms() > deadline) {
                fprintf(stderr, "bench_etcd_run: process %d did not finish within %u ms\n", r, RUN_TIMEOUT_MS);
                for (int k = 0; k < ranks; k++)
                    kill(pids[k], SIGKILL);
                waitpid(pids[r], &status, 0);
                break;
            }
            usleep(10000);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench_etcd_run: process %d failed (status 0x%x)\n", r, (unsigned)status);
            failed = 1;
        }
    }
    /* Rank 0 (whichever process got it) alone writes the JSON. */
    int writers = 0;
    size_t rows = 0;
    struct stat st;
    for (int r = 0; r < ranks; r++) {
        if (stat(json[r], &st) == 0) {
            writers++;
            rows = count_lines(json[r]);
        }
    }
    if (!failed && (writers != 1 || rows == 0)) {
        fprintf(stderr, "bench_etcd_run: %d JSON files written (expected 1 from rank 0), %zu rows\n", writers, rows);
        failed = 1;
    }
    etcd_server_cleanup(&srv);
    test_netns_destroy(&nn);
    if (!failed)
        printf("bench_etcd_run: %d ranks, scheme %s%s: every rank passed, %zu rows\n", ranks, scheme,
               use_netns ? ", two network namespaces" : "", rows);
    return failed;
}
