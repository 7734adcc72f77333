/*
 * soak.c - nixl-soak: keep one agent busy for a long time and check that
 * nothing wrong ever comes out of it.
 *
 *   nixl-soak [--seconds S | --count N] [--peers P] [--threads T] [--backend shm|libfabric]
 *             [--md pipe|listener] [--param KEY=VALUE]... [--seed X] [--rss-growth-mb M]
 *             [--fd-growth K] [--warmup S] [--notif-timeout-ms MS] [--quiet]
 *
 * The driver forks P peer processes (each its own agent), exchanges
 * metadata with them (blobs over pipes, or their listeners), then T threads
 * post random transfers on the driver's one agent (soak_work.c) while the
 * main thread keeps the clock, samples memory and file descriptors, and a
 * collector thread routes the peers' reports to the thread that waits for
 * them.  The report at the end says what moved and what went wrong; the
 * exit status is 0 only when no byte was wrong, no notification was lost,
 * no call failed and memory did not grow after the warm-up.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "soak_driver.h"

soak_driver_t soak;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nixl-soak [--seconds S | --count N] [--peers P] [--threads T] [--backend NAME]\n"
            "                 [--md pipe|listener] [--param KEY=VALUE]... [--seed X] [--rss-growth-mb M]\n"
            "                 [--fd-growth K] [--warmup S] [--notif-timeout-ms MS] [--quiet]\n"
            "  Random READ/WRITE traffic from T threads of one agent to P peer processes, every\n"
            "  byte checked.  Defaults: --seconds 10, --peers 2, --threads 2, --backend shm,\n"
            "  --md pipe, --rss-growth-mb 16, --fd-growth 0, --warmup 25%% of the run (at most\n"
            "  120 s), --notif-timeout-ms 10000.  --count N stops after N ops.\n"
            "  Exit: 0 all good, 1 something went wrong (see the report), 2 usage, 77 backend absent.\n");
}

static int parse_args(int argc, char **argv, soak_opts_t *o)
{
    o->peers = 2;
    o->threads = 2;
    o->backend = "shm";
    o->rss_growth = 16ull << 20;
    o->notif_timeout_ms = 10000;
    o->warmup = -1;
    o->seed = soak_now_ns();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (!v)
            goto bad;
        i++;
        errno = 0;
        if (strcmp(a, "--seconds") == 0) {
            o->seconds = strtod(v, &end);
            if (o->seconds <= 0)
                goto bad;
        } else if (strcmp(a, "--count") == 0) {
            o->count = strtoull(v, &end, 0);
            if (o->count == 0)
                goto bad;
        } else if (strcmp(a, "--peers") == 0) {
            o->peers = (int)strtol(v, &end, 0);
            if (o->peers < 1 || o->peers > SOAK_MAX_PEERS)
                goto bad;
        } else if (strcmp(a, "--threads") == 0) {
            o->threads = (int)strtol(v, &end, 0);
            if (o->threads < 1 || o->threads > SOAK_MAX_THREADS)
                goto bad;
        } else if (strcmp(a, "--backend") == 0) {
            o->backend = v;
            end = v + strlen(v);
        } else if (strcmp(a, "--md") == 0) {
            if (strcmp(v, "pipe") && strcmp(v, "listener"))
                goto bad;
            o->listen = strcmp(v, "listener") == 0;
            end = v + strlen(v);
        } else if (strcmp(a, "--param") == 0) {
            char *eq = strchr(v, '=');
            if (!eq || o->num_params == sizeof(o->params) / sizeof(o->params[0]))
                goto bad;
            *eq = 0;
            o->params[o->num_params++] = (nixl_param_t){v, eq + 1};
            end = eq + 1 + strlen(eq + 1);
        } else if (strcmp(a, "--seed") == 0) {
            o->seed = strtoull(v, &end, 0);
        } else if (strcmp(a, "--rss-growth-mb") == 0) {
            o->rss_growth = (uint64_t)(strtod(v, &end) * (1 << 20));
        } else if (strcmp(a, "--fd-growth") == 0) {
            o->fd_growth = (int)strtol(v, &end, 0);
        } else if (strcmp(a, "--warmup") == 0) {
            o->warmup = strtod(v, &end);
        } else if (strcmp(a, "--notif-timeout-ms") == 0) {
            o->notif_timeout_ms = (unsigned)strtoul(v, &end, 0);
        } else {
            goto bad;
        }
        if (errno || !end || *end)
            goto bad;
    }
    if (o->seconds > 0 && o->count)
        goto bad;
    if (o->seconds <= 0 && !o->count)
        o->seconds = 10;
    if (o->warmup < 0)
        o->warmup = o->seconds > 0 ? (o->seconds / 4 < 120 ? o->seconds / 4 : 120) : 0;
    return 0;
bad:
    usage(stderr);
    return -1;
}

/* ------------------------------------------------------------------------
 * Peers
 * ------------------------------------------------------------------------ */

static int peers_spawn(void)
{
    for (int i = 0; i < soak.o.peers; i++) {
        int cmd[2], rep[2];
        if (pipe2(cmd, O_CLOEXEC) || pipe2(rep, O_CLOEXEC)) {
            perror("nixl-soak: pipe2");
            return -1;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("nixl-soak: fork");
            return -1;
        }
        if (pid == 0) {
            /* Forked before the driver made any thread or agent. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (int j = 0; j < i; j++) {
                close(soak.peer[j].cmd_fd);
                close(soak.peer[j].rep_fd);
            }
            close(cmd[1]);
            close(rep[0]);
            soak_peer_args_t pa = {.index = i, .backend = soak.o.backend, .params = soak.o.params,
                                   .num_params = soak.o.num_params, .listen = soak.o.listen,
                                   .cmd_fd = cmd[0], .rep_fd = rep[1], .threads = soak.o.threads};
            int rc = soak_peer_main(&pa);
            /* exit, not _exit: LeakSanitizer checks the peer too. */
            exit(rc);
        }
        close(cmd[0]);
        close(rep[1]);
        soak_peer_h_t *p = &soak.peer[i];
        p->pid = pid;
        p->cmd_fd = cmd[1];
        p->rep_fd = rep[0];
        snprintf(p->name, sizeof(p->name), "soak-peer-%d", i);
    }
    return 0;
}

/* Metadata both ways with every peer, before any thread runs. */
static int peers_connect(void)
{
    void *mine = NULL;
    size_t mine_len = 0;
    nixl_status_t st = NIXL_OK;
    if (!soak.o.listen && (st = nixl_md_get_local(soak.agent, &mine, &mine_len)) != NIXL_OK) {
        fprintf(stderr, "nixl-soak: nixl_md_get_local: %s\n", nixl_status_name(st));
        return -1;
    }
    int rc = -1;
    for (int i = 0; i < soak.o.peers; i++) {
        soak_peer_h_t *p = &soak.peer[i];
        soak_rep_t r;
        if (soak_read_all(p->rep_fd, &r, sizeof(r)) || r.type != SR_READY) {
            fprintf(stderr, "nixl-soak: peer %d did not start (see its messages above)\n", i);
            goto out;
        }
        p->base[SOAK_KIND_MAP] = r.a[0];
        p->base[SOAK_KIND_CMA] = r.a[1];
        char name[NIXL_NAME_MAX + 1] = "";
        if (soak.o.listen) {
            st = nixl_md_fetch_remote(soak.agent, "127.0.0.1", (uint16_t)r.a[2], name);
            if (st == NIXL_OK)
                st = nixl_md_send_local(soak.agent, "127.0.0.1", (uint16_t)r.a[2]);
        } else {
            void *blob = malloc(r.plen ? r.plen : 1);
            if (!blob || soak_read_all(p->rep_fd, blob, r.plen)) {
                free(blob);
                fprintf(stderr, "nixl-soak: peer %d: short metadata\n", i);
                goto out;
            }
            st = nixl_md_load_remote(soak.agent, blob, r.plen, name);
            free(blob);
            soak_cmd_t c = {.type = SC_MD, .thread = -1, .plen = mine_len};
            if (st == NIXL_OK && (soak_write_all(p->cmd_fd, &c, sizeof(c)) ||
                                  soak_write_all(p->cmd_fd, mine, mine_len) ||
                                  soak_read_all(p->rep_fd, &r, sizeof(r)) || r.type != SR_READY)) {
                fprintf(stderr, "nixl-soak: peer %d did not load the driver's metadata\n", i);
                goto out;
            }
        }
        if (st != NIXL_OK) {
            fprintf(stderr, "nixl-soak: metadata with peer %d: %s\n", i, nixl_status_name(st));
            goto out;
        }
        if (strcmp(name, p->name) != 0) {
            fprintf(stderr, "nixl-soak: peer %d calls itself '%s'\n", i, name);
            goto out;
        }
    }
    rc = 0;
out:
    nixl_free(mine);
    return rc;
}

/* Route each report to the thread waiting for it, until every peer closed
 * its pipe. */
static void *collector_main(void *arg)
{
    struct pollfd pfd[SOAK_MAX_PEERS];
    int open_fds = soak.o.peers;
    for (int i = 0; i < soak.o.peers; i++)
        pfd[i] = (struct pollfd){.fd = soak.peer[i].rep_fd, .events = POLLIN};
    while (open_fds > 0) {
        int n = poll(pfd, (nfds_t)soak.o.peers, 1000);
        if (n < 0 && errno != EINTR)
            break;
        for (int i = 0; n > 0 && i < soak.o.peers; i++) {
            if (pfd[i].fd < 0 || !pfd[i].revents)
                continue;
            soak_rep_t r;
            if (soak_read_all(pfd[i].fd, &r, sizeof(r))) {
                pfd[i].fd = -1;
                open_fds--;
                if (!soak.peer[i].got_stats) {
                    soak_rep_t gone = {.type = SR_ERROR, .thread = -1, .peer = i, .status = NIXL_ERR_PEER_GONE};
                    soak_mbox_push(&soak.main_mb, &gone);
                }
                continue;
            }
            r.peer = i;
            if (r.type == SR_STATS) {
                memcpy(soak.peer[i].stats, r.a, sizeof(soak.peer[i].stats));
                soak.peer[i].got_stats = 1;
            }
            if (r.thread >= 0 && r.thread < soak.o.threads)
                soak_mbox_push(&soak.w[r.thread].mb, &r);
            else
                soak_mbox_push(&soak.main_mb, &r);
        }
    }
    return NULL;
}

/* Errors peers report on their own (a failed nixl call, a vanished peer). */
static void main_mb_drain(void)
{
    pthread_mutex_lock(&soak.main_mb.mu);
    for (size_t i = 0; i < soak.main_mb.n; i++) {
        const soak_rep_t *r = &soak.main_mb.q[i];
        if (r->type == SR_ERROR) {
            uint64_t c = r->status < 0 && -r->status < SOAK_ERR_CODES ? (uint64_t)-r->status : 0;
            soak.w[0].c.errors[c]++;
            soak_fail("peer %d: %s", r->peer, nixl_status_name(r->status));
        }
    }
    soak.main_mb.n = 0;
    pthread_mutex_unlock(&soak.main_mb.mu);
}

/* ------------------------------------------------------------------------
 * Report
 * ------------------------------------------------------------------------ */

static double mib(uint64_t b)
{
    return (double)b / (1 << 20);
}

static void counters_sum(soak_counters_t *t)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < soak.o.threads; i++) {
        const soak_counters_t *c = &soak.w[i].c;
#define SUM(f) t->f += c->f;
        SOAK_COUNTER_FIELDS(SUM)
#undef SUM
        for (int e = 0; e < SOAK_ERR_CODES; e++)
            t->errors[e] += c->errors[e];
        for (int p = 0; p < SOAK_PATHS && c->path[p][0]; p++) {
            for (int q = 0; q < SOAK_PATHS; q++) {
                if (!t->path[q][0])
                    snprintf(t->path[q], sizeof(t->path[q]), "%s", c->path[p]);
                if (strcmp(t->path[q], c->path[p]) == 0) {
                    t->path_count[q] += c->path_count[p];
                    break;
                }
            }
        }
    }
}

typedef struct mem_sample {
    uint64_t rss_start, rss_warm, rss_end;
    uint64_t anon_start, anon_warm, anon_end;
    int fds_warm, fds_end;
} mem_sample_t;

static int report(const soak_counters_t *t, const mem_sample_t *m, double secs)
{
    int bad = atomic_load(&soak.failed);
    printf("nixl-soak: backend %s, %d peers, %d threads, %.1f s, seed 0x%llx\n", soak.o.backend, soak.o.peers,
           soak.o.threads, secs, (unsigned long long)soak.o.seed);
    printf("  transfers      %llu in %llu ops (%llu READ, %llu WRITE, %llu fan-out, %llu re-posts, %llu two-step), "
           "%.1f MiB, %llu descriptors, %.1f MiB/s\n",
           (unsigned long long)t->transfers, (unsigned long long)t->ops, (unsigned long long)t->reads,
           (unsigned long long)t->writes, (unsigned long long)t->fanouts, (unsigned long long)t->reposts,
           (unsigned long long)t->two_step, mib(t->bytes), (unsigned long long)t->descs,
           secs > 0 ? mib(t->bytes) / secs : 0.0);
    printf("  paths         ");
    for (int p = 0; p < SOAK_PATHS && t->path[p][0]; p++)
        printf(" %s %llu", t->path[p], (unsigned long long)t->path_count[p]);
    printf("\n  cancels        %llu (released in flight %llu, notified anyway %llu)\n",
           (unsigned long long)t->cancels, (unsigned long long)t->cancels_in_flight,
           (unsigned long long)t->cancel_notifs);
    printf("  notifications  expected %llu, received %llu, lost %llu; unexpected reports %llu\n",
           (unsigned long long)t->notif_expected, (unsigned long long)t->notif_received,
           (unsigned long long)t->lost_notifs, (unsigned long long)t->unexpected_reports);
    printf("  mismatches     %llu\n", (unsigned long long)t->mismatches);
    printf("  errors        ");
    int any = 0;
    for (int e = 0; e < SOAK_ERR_CODES; e++) {
        if (t->errors[e]) {
            printf(" %s %llu", e ? nixl_status_name((nixl_status_t)-e) : "other", (unsigned long long)t->errors[e]);
            any = 1;
        }
    }
    printf("%s\n", any ? "" : " none");
    if (t->mismatches || t->lost_notifs || t->unexpected_reports || any || t->notif_expected != t->notif_received)
        bad = 1;

    int64_t growth = (int64_t)m->anon_end - (int64_t)m->anon_warm;
    printf("  driver memory  RSS %.1f / %.1f / %.1f MiB, RssAnon %.1f / %.1f / %.1f MiB (start / warm / end); "
           "growth after warm-up %+.2f MiB (limit %.0f)\n",
           mib(m->rss_start), mib(m->rss_warm), mib(m->rss_end), mib(m->anon_start), mib(m->anon_warm),
           mib(m->anon_end), (double)growth / (1 << 20), mib(soak.o.rss_growth));
    if (growth > (int64_t)soak.o.rss_growth) {
        fprintf(stderr, "nixl-soak: FAIL: driver RssAnon grew %.2f MiB after warm-up\n", (double)growth / (1 << 20));
        bad = 1;
    }
    printf("  driver fds     %d after warm-up, %d at the end (%+d, limit %+d)\n", m->fds_warm, m->fds_end,
           m->fds_end - m->fds_warm, soak.o.fd_growth);
    if (m->fds_end - m->fds_warm > soak.o.fd_growth) {
        fprintf(stderr, "nixl-soak: FAIL: the driver holds %d more file descriptors than after warm-up\n",
                m->fds_end - m->fds_warm);
        bad = 1;
    }
    for (int i = 0; i < soak.o.peers; i++) {
        const soak_peer_h_t *p = &soak.peer[i];
        if (!p->got_stats) {
            printf("  peer %d         no final report\n", i);
            bad = 1;
            continue;
        }
        const uint64_t *s = p->stats;
        int64_t g = (int64_t)s[SS_RSS_END] - (int64_t)s[SS_RSS_WARM];
        int fg = (int)s[SS_FDS_END] - (int)s[SS_FDS_WARM];
        printf("  peer %d         RssAnon %.1f / %.1f / %.1f MiB (%+.2f), fds %+d, notifications %llu (%llu bad), "
               "errors %llu\n",
               i, mib(s[SS_RSS_START]), mib(s[SS_RSS_WARM]), mib(s[SS_RSS_END]), (double)g / (1 << 20), fg,
               (unsigned long long)s[SS_NOTIFS], (unsigned long long)s[SS_BAD_NOTIFS],
               (unsigned long long)s[SS_ERRORS]);
        if (g > (int64_t)soak.o.rss_growth || fg > soak.o.fd_growth || s[SS_BAD_NOTIFS] || s[SS_ERRORS]) {
            fprintf(stderr, "nixl-soak: FAIL: peer %d: memory, fds, bad notifications or errors (see above)\n", i);
            bad = 1;
        }
    }
    printf("  result         %s\n", bad ? "FAIL" : "PASS");
    return bad;
}

/* ------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------ */

static int backend_present(const char *name)
{
    const nixl_backend_info_t *infos = NULL;
    size_t n = 0;
    if (nixl_backends_available(&infos, &n) != NIXL_OK)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, name) == 0)
            return 1;
    return 0;
}

static int driver_setup(void)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_THREAD_MODE,
                               .name = SOAK_DRIVER_NAME, .thread_mode = NIXL_THREAD_SERIALIZED};
    nixl_status_t st = nixl_agent_create(&cfg, &soak.agent);
    if (st != NIXL_OK) {
        fprintf(stderr, "nixl-soak: nixl_agent_create: %s\n", nixl_status_name(st));
        return -1;
    }
    nixl_backend_t *be;
    st = nixl_backend_create(soak.agent, soak.o.backend, soak.o.params, soak.o.num_params, &be);
    if (st != NIXL_OK) {
        fprintf(stderr, "nixl-soak: nixl_backend_create(%s): %s\n", soak.o.backend, nixl_status_name(st));
        return -1;
    }
    soak.len = (size_t)soak.o.threads * SOAK_SLOT;
    void *m = NULL, *c = NULL;
    st = nixl_mem_alloc(soak.len, &m);
    if (st != NIXL_OK || posix_memalign(&c, 4096, soak.len)) {
        fprintf(stderr, "nixl-soak: cannot allocate 2 x %zu bytes\n", soak.len);
        if (st == NIXL_OK)
            nixl_mem_free(m, soak.len);
        return -1;
    }
    soak.buf[SOAK_KIND_MAP] = m;
    soak.buf[SOAK_KIND_CMA] = c;
    memset(m, 0, soak.len);
    memset(c, 0, soak.len);
    nixl_desc_t d[2] = {{.addr = (uintptr_t)m, .len = soak.len}, {.addr = (uintptr_t)c, .len = soak.len}};
    nixl_dlist_t dl = {NIXL_MEM_DRAM, 2, d};
    st = nixl_mem_register(soak.agent, &dl, NULL);
    if (st != NIXL_OK) {
        fprintf(stderr, "nixl-soak: nixl_mem_register: %s\n", nixl_status_name(st));
        return -1;
    }
    return 0;
}

static void driver_teardown(void)
{
    if (soak.agent)
        nixl_agent_destroy(soak.agent); /* deregisters what is registered */
    if (soak.buf[SOAK_KIND_MAP])
        nixl_mem_free(soak.buf[SOAK_KIND_MAP], soak.len);
    free(soak.buf[SOAK_KIND_CMA]);
}

static void sample_warm(mem_sample_t *m)
{
    m->rss_warm = soak_rss();
    m->anon_warm = soak_rss_anon();
    m->fds_warm = soak_fd_count();
    for (int i = 0; i < soak.o.peers; i++) {
        soak_cmd_t c = {.type = SC_WARM, .thread = -1};
        if (soak_write_all(soak.peer[i].cmd_fd, &c, sizeof(c)))
            soak_fail("peer %d's command pipe is closed", i);
    }
}

/* Run the threads until the clock or the count says stop. */
static void run(mem_sample_t *m, double *secs)
{
    uint64_t t0 = soak_now_ns(), next_print = t0 + 10000000000ull;
    int warm = 0;
    for (int i = 0; i < soak.o.threads; i++) {
        if (pthread_create(&soak.w[i].th, NULL, soak_worker_main, &soak.w[i])) {
            soak_fail("cannot start thread %d", i);
            soak.o.threads = i;
            break;
        }
    }
    for (;;) {
        soak_sleep_us(20000);
        main_mb_drain();
        uint64_t now = soak_now_ns();
        double el = (double)(now - t0) / 1e9;
        uint64_t done = atomic_load(&soak.started);
        if (!warm && ((soak.o.seconds > 0 && el >= soak.o.warmup) ||
                      (soak.o.count && done >= soak.o.count / 4))) {
            sample_warm(m);
            warm = 1;
        }
        if (!soak.o.quiet && now >= next_print) {
            printf("  %6.0f s: %llu transfers, RssAnon %.1f MiB\n", el,
                   (unsigned long long)atomic_load(&soak.transfers), mib(soak_rss_anon()));
            fflush(stdout);
            next_print += 10000000000ull;
        }
        if (soak.o.seconds > 0 && el >= soak.o.seconds)
            atomic_store(&soak.stop, 1);
        if (atomic_load(&soak.stop) || (soak.o.count && done >= soak.o.count + (uint64_t)soak.o.threads))
            break;
    }
    atomic_store(&soak.stop, 1);
    for (int i = 0; i < soak.o.threads; i++)
        pthread_join(soak.w[i].th, NULL);
    *secs = (double)(soak_now_ns() - t0) / 1e9;
    if (!warm)
        sample_warm(m);
    main_mb_drain();
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv, &soak.o))
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (!backend_present(soak.o.backend)) {
        printf("SKIP: backend '%s' is not available here (nixl-info lists what is)\n", soak.o.backend);
        return 77;
    }
    soak.w = calloc((size_t)soak.o.threads, sizeof(*soak.w));
    if (!soak.w)
        return 1;
    for (int i = 0; i < soak.o.threads; i++) {
        soak.w[i].t = i;
        soak.w[i].rng = soak_mix64(soak.o.seed + (uint64_t)i * 0x1234567);
        soak_mbox_init(&soak.w[i].mb);
    }
    soak_mbox_init(&soak.main_mb);

    int rc = 1;
    mem_sample_t m = {0};
    double secs = 0;
    pthread_t collector;
    int collecting = 0;
    if (peers_spawn() || driver_setup() || peers_connect())
        goto out;
    m.rss_start = soak_rss();
    m.anon_start = soak_rss_anon();
    if (pthread_create(&collector, NULL, collector_main, NULL)) {
        fprintf(stderr, "nixl-soak: cannot start the collector thread\n");
        goto out;
    }
    collecting = 1;
    run(&m, &secs);
    m.rss_end = soak_rss();
    m.anon_end = soak_rss_anon();
    m.fds_end = soak_fd_count();
    rc = 0;
out:
    for (int i = 0; i < soak.o.peers; i++) {
        if (soak.peer[i].pid <= 0)
            continue;
        soak_cmd_t c = {.type = SC_EXIT, .thread = -1};
        if (soak_write_all(soak.peer[i].cmd_fd, &c, sizeof(c)))
            fprintf(stderr, "nixl-soak: peer %d is gone\n", i);
        close(soak.peer[i].cmd_fd);
    }
    if (collecting)
        pthread_join(collector, NULL); /* every peer closed its report pipe */
    int peers_ok = 1;
    for (int i = 0; i < soak.o.peers; i++) {
        if (soak.peer[i].pid <= 0)
            continue;
        int ws = 0;
        while (waitpid(soak.peer[i].pid, &ws, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            fprintf(stderr, "nixl-soak: peer %d ended with %s %d\n", i, WIFEXITED(ws) ? "status" : "signal",
                    WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
            peers_ok = 0;
        }
        close(soak.peer[i].rep_fd);
    }
    driver_teardown();
    if (rc == 0) {
        soak_counters_t t;
        counters_sum(&t);
        rc = report(&t, &m, secs) || !peers_ok;
    }
    for (int i = 0; i < soak.o.threads; i++)
        soak_mbox_destroy(&soak.w[i].mb);
    soak_mbox_destroy(&soak.main_mb);
    free(soak.w);
    return rc;
}
