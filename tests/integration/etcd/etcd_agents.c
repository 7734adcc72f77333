/*
 * etcd_agents.c - separate processes that find each other through etcd only.
 *
 *   etcd_agents --scenario basic|sigkill|restart|netns [--backend shm|libfabric]
 *
 * The launcher starts a private etcd, then copies of this program as agents
 * that know nothing but the etcd URL, their own name and their peer's name.
 * Buffer addresses and progress flags are the application's own keys in
 * the same etcd (NS/test/...), next to nixl's.  The target registers two
 * regions and publishes its metadata (full, and the first region under the
 * label "kv"); the initiator fetches it, READs region 0 and checks every
 * byte, WRITEs region 1 and the target checks every byte.  Then:
 *   basic    the initiator starts first: its fetch waits for the late
 *            target.  Also: a fetch of a peer that never comes times out,
 *            labelled partial metadata limits what a peer loaded from it
 *            alone can reach and adds to a peer loaded in full, and
 *            after the target invalidates itself the initiator's requests
 *            fail with NIXL_ERR_PEER_INVALIDATED.
 *   sigkill  the target is killed with SIGKILL: within its lease TTL the
 *            initiator sees it invalidated and its request fails cleanly.
 *   restart  etcd is killed and restarted empty: both agents publish again
 *            (a third agent fetches both), the initiator's request made
 *            before still moves verified bytes (not stale, not invalidated).
 *   netns    the two agents run in two network namespaces behind a bridge,
 *            etcd on the bridge address (skips unless namespaces can be made);
 *            with --backend libfabric the bytes cross the veths over TCP.
 * Exit status 0 only when every check held; 77 (with the reason) to skip.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd_server.h"
#include "nixl.h"

#define REGION_BYTES (256u * 1024u)
#define TTL_S 2
#define WAIT_MS 30000u
#define SEED_T 0x7461u
#define SEED_I 0x696eu

static const char *who = "launcher";
/* The agents' backend: shm, or libfabric over the namespaces' veths. */
static const char *backend = "shm";
static char url[160], ns[96];

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "etcd_agents[%s]: ", who);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(1);
}

static void check(nixl_status_t s, nixl_status_t want, const char *what)
{
    if (s != want)
        die("%s: %s (%s), expected %s", what, nixl_status_name(s), nixl_strerror(s), nixl_status_name(want));
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint8_t pattern(uint32_t seed, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u ^ seed * 40503u;
    return (uint8_t)(x >> 13 ^ x);
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pattern(seed, i);
}

static long first_bad(const uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern(seed, i))
            return (long)i;
    return -1;
}

/* ---- application keys ---- */

static void app_put(const char *agent, const char *what, const char *value)
{
    char key[256];
    snprintf(key, sizeof(key), "%s/test/%s/%s", ns, agent, what);
    /* etcd may be restarting: retry a while. */
    for (uint64_t end = now_ms() + WAIT_MS; etcd_kv_put(url, key, value) != 0;) {
        if (now_ms() > end)
            die("cannot put %s in etcd at %s", key, url);
        sleep_ms(100);
    }
}

static void app_wait(const char *agent, const char *what, char *out, size_t cap)
{
    char key[256], buf[256];
    snprintf(key, sizeof(key), "%s/test/%s/%s", ns, agent, what);
    for (uint64_t end = now_ms() + WAIT_MS; etcd_kv_get(url, key, out ? out : buf, out ? cap : sizeof(buf)) != 1;) {
        if (now_ms() > end)
            die("%s did not appear in etcd within %u ms", key, WAIT_MS);
        sleep_ms(20);
    }
}

/* ---- callbacks ---- */

typedef struct outcome {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    nixl_status_t st;
} outcome_t;

static void outcome_init(outcome_t *o)
{
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->done = 0;
    o->st = NIXL_IN_PROG;
}

static void on_done(nixl_agent_t *agent, const char *peer, nixl_status_t st, void *arg)
{
    outcome_t *o = arg;
    (void)agent;
    (void)peer;
    pthread_mutex_lock(&o->mu);
    o->done = 1;
    o->st = st;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static nixl_status_t outcome_wait(outcome_t *o, const char *what)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&o->mu);
    while (!o->done)
        if (pthread_cond_timedwait(&o->cv, &o->mu, &ts) == ETIMEDOUT)
            die("%s: no callback within %u ms", what, WAIT_MS);
    nixl_status_t st = o->st;
    pthread_mutex_unlock(&o->mu);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    return st;
}

static nixl_etcd_args_t args_cb(outcome_t *o, const char *label, uint32_t timeout_ms)
{
    nixl_etcd_args_t a = {.field_mask = NIXL_ETCD_ARG_CALLBACK, .cb = on_done, .cb_arg = o};
    outcome_init(o);
    if (label) {
        a.field_mask |= NIXL_ETCD_ARG_LABEL;
        a.label = label;
    }
    if (timeout_ms) {
        a.field_mask |= NIXL_ETCD_ARG_TIMEOUT_MS;
        a.timeout_ms = timeout_ms;
    }
    return a;
}

/* ---- the agents ---- */

typedef struct agent {
    nixl_agent_t *a;
    uint8_t *reg[2];
    nixl_desc_t d[2];
} agent_t;

static void agent_up(agent_t *ag, const char *name)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    check(nixl_agent_create(&cfg, &ag->a), NIXL_OK, "nixl_agent_create");
    nixl_backend_t *be;
    /* In a namespace the fabric must use its veth, not loopback. */
    nixl_param_t lf[] = {{"provider", "tcp;ofi_rxm"}, {"iface", "eth0"}};
    int is_lf = !strcmp(backend, "libfabric");
    check(nixl_backend_create(ag->a, backend, is_lf ? lf : NULL, is_lf ? 2 : 0, &be), NIXL_OK, "nixl_backend_create");
    for (int i = 0; i < 2; i++) {
        check(nixl_mem_alloc(REGION_BYTES, (void **)&ag->reg[i]), NIXL_OK, "nixl_mem_alloc");
        ag->d[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)ag->reg[i], .len = REGION_BYTES};
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, 2, ag->d};
    check(nixl_mem_register(ag->a, &l, NULL), NIXL_OK, "nixl_mem_register");
}

static void agent_down(agent_t *ag)
{
    nixl_agent_destroy(ag->a);
    for (int i = 0; i < 2; i++)
        nixl_mem_free(ag->reg[i], REGION_BYTES);
}

static void publish(agent_t *ag, const char *label, int region)
{
    outcome_t o;
    nixl_etcd_args_t a = args_cb(&o, label, 0);
    nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &ag->d[region]};
    check(nixl_md_etcd_publish(ag->a, label ? &l : NULL, &a), NIXL_IN_PROG, "nixl_md_etcd_publish");
    check(outcome_wait(&o, "publish"), NIXL_OK, label ? "publish (partial)" : "publish");
}

static nixl_status_t fetch(agent_t *ag, const char *peer, const char *label, uint32_t timeout_ms)
{
    outcome_t o;
    nixl_etcd_args_t a = args_cb(&o, label, timeout_ms);
    check(nixl_md_etcd_fetch(ag->a, peer, &a), NIXL_IN_PROG, "nixl_md_etcd_fetch");
    return outcome_wait(&o, "fetch");
}

static nixl_status_t xfer_make(agent_t *ag, nixl_op_t op, int local, const char *peer, uint64_t raddr,
                               nixl_xfer_t **x)
{
    nixl_desc_t r = {.addr = raddr, .len = REGION_BYTES};
    nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &ag->d[local]}, rl = {NIXL_MEM_DRAM, 1, &r};
    return nixl_xfer_create(ag->a, op, &ll, &rl, peer, NULL, x);
}

static nixl_status_t xfer_run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    uint64_t end = now_ms() + WAIT_MS;
    while (st == NIXL_IN_PROG) {
        if (now_ms() > end)
            die("a transfer did not complete within %u ms", WAIT_MS);
        st = nixl_xfer_status(x);
    }
    return st;
}

/* READ the target's region 0 into ours and check every byte. */
static void read_and_verify(agent_t *ag, const char *peer, uint64_t raddr, const char *what)
{
    nixl_xfer_t *x;
    memset(ag->reg[0], 0, REGION_BYTES);
    check(xfer_make(ag, NIXL_OP_READ, 0, peer, raddr, &x), NIXL_OK, what);
    check(xfer_run(x), NIXL_OK, what);
    long bad = first_bad(ag->reg[0], REGION_BYTES, SEED_T);
    if (bad >= 0)
        die("%s: byte %ld read from %s is wrong", what, bad, peer);
    nixl_xfer_info_t info;
    check(nixl_xfer_info(x, &info), NIXL_OK, "nixl_xfer_info");
    if (strncmp(info.backend, backend, strlen(backend)))
        die("%s went through backend %s, not %s", what, info.backend, backend);
    fprintf(stderr, "etcd_agents[%s]: %s: %u bytes verified, path %s\n", who, what, REGION_BYTES, info.path);
    nixl_xfer_release(x);
}

static int wait_invalidated(agent_t *ag, const char *peer, uint32_t ms)
{
    for (uint64_t end = now_ms() + ms; now_ms() < end; sleep_ms(10))
        if (nixl_md_check_remote(ag->a, peer) == NIXL_ERR_UNKNOWN_PEER)
            return 0;
    return -1;
}

static int run_target(const char *scenario, const char *name, const char *peer)
{
    agent_t ag;
    char val[128];
    agent_up(&ag, name);
    fill(ag.reg[0], REGION_BYTES, SEED_T);
    memset(ag.reg[1], 0, REGION_BYTES);
    publish(&ag, NULL, 0);
    publish(&ag, "kv", 0);
    snprintf(val, sizeof(val), "%llu %llu", (unsigned long long)ag.d[0].addr, (unsigned long long)ag.d[1].addr);
    app_put(name, "pool", val);

    app_wait(peer, "wrote", NULL, 0);
    long bad = first_bad(ag.reg[1], REGION_BYTES, SEED_I);
    app_put(name, "verified", bad < 0 ? "ok" : "bad");
    if (bad >= 0)
        die("byte %ld of region 1 written by %s is wrong", bad, peer);

    if (!strcmp(scenario, "sigkill")) {
        for (;;)
            sleep_ms(1000); /* until the launcher kills us */
    }
    if (!strcmp(scenario, "basic")) {
        app_wait(peer, "checked-partial", NULL, 0);
        outcome_t o;
        nixl_etcd_args_t a = args_cb(&o, NULL, 0);
        check(nixl_md_etcd_invalidate_local(ag.a, &a), NIXL_IN_PROG, "nixl_md_etcd_invalidate_local");
        check(outcome_wait(&o, "invalidate"), NIXL_OK, "invalidate_local");
        app_put(name, "invalidated", "yes");
    }
    app_wait(peer, "finish", NULL, 0);
    agent_down(&ag);
    return 0;
}

static void basic_checks(agent_t *ag, const char *name, const char *peer, uint64_t raddr0, uint64_t raddr1)
{
    nixl_etcd_args_t bad = {.field_mask = NIXL_ETCD_ARG_LABEL, .label = "no/slash"};
    nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &ag->d[0]};
    check(nixl_md_etcd_fetch(ag->a, name, NULL), NIXL_ERR_SELF, "fetch of myself");
    check(nixl_md_etcd_fetch(ag->a, peer, &bad), NIXL_ERR_INVALID_PARAM, "fetch with a bad label");
    check(nixl_md_etcd_publish(ag->a, &l, NULL), NIXL_ERR_INVALID_PARAM, "partial publish without a label");
    check(nixl_md_etcd_fetch(ag->a, "no such agent", NULL), NIXL_ERR_INVALID_PARAM, "fetch of a bad name");

    uint64_t t0 = now_ms();
    check(fetch(ag, "nobody", NULL, 300), NIXL_ERR_TIMEOUT, "fetch of a peer that never comes");
    if (now_ms() - t0 > 3000)
        die("a 300 ms fetch took %llu ms to time out", (unsigned long long)(now_ms() - t0));
    check(nixl_md_check_remote(ag->a, "nobody"), NIXL_ERR_UNKNOWN_PEER, "check_remote(nobody)");

    /* The labelled metadata holds region 0 only (with connection info):
     * loaded into a peer forgotten first, it is all we know of it. */
    check(nixl_md_invalidate_remote(ag->a, peer), NIXL_OK, "forget the peer");
    check(fetch(ag, peer, "kv", 0), NIXL_OK, "fetch of the partial metadata");
    nixl_xfer_t *x;
    check(xfer_make(ag, NIXL_OP_READ, 1, peer, raddr1, &x), NIXL_ERR_NOT_REGISTERED,
          "READ of a region outside the partial metadata");
    read_and_verify(ag, peer, raddr0, "READ through the partial metadata");
    check(fetch(ag, peer, NULL, 0), NIXL_OK, "fetch of the full metadata again");
    check(xfer_make(ag, NIXL_OP_READ, 1, peer, raddr1, &x), NIXL_OK, "READ of region 1 with the full metadata");
    check(xfer_run(x), NIXL_OK, "READ of region 1");
    /* Partial metadata adds to what is loaded: loaded over the full one it
     * takes nothing away, and the request made before stays valid. */
    check(fetch(ag, peer, "kv", 0), NIXL_OK, "fetch of the partial metadata over the full one");
    check(xfer_run(x), NIXL_OK, "READ of region 1 (request made before the partial fetch)");
    nixl_xfer_release(x);
}

static int run_initiator(const char *scenario, const char *name, const char *peer)
{
    agent_t ag;
    char val[128];
    unsigned long long raddr0, raddr1;
    agent_up(&ag, name);
    publish(&ag, NULL, 0);

    /* In "basic" the target starts later: the fetch waits for it. */
    uint64_t t0 = now_ms();
    check(fetch(&ag, peer, NULL, 20000), NIXL_OK, "fetch of the target");
    check(nixl_md_check_remote(ag.a, peer), NIXL_OK, "check_remote after the fetch");
    fprintf(stderr, "etcd_agents[%s]: %s loaded after %llu ms\n", who, peer, (unsigned long long)(now_ms() - t0));
    app_wait(peer, "pool", val, sizeof(val));
    if (sscanf(val, "%llu %llu", &raddr0, &raddr1) != 2)
        die("bad pool value \"%s\"", val);

    read_and_verify(&ag, peer, raddr0, "READ of region 0");
    fill(ag.reg[1], REGION_BYTES, SEED_I);
    nixl_xfer_t *x;
    check(xfer_make(&ag, NIXL_OP_WRITE, 1, peer, raddr1, &x), NIXL_OK, "WRITE request");
    check(xfer_run(x), NIXL_OK, "WRITE of region 1");
    nixl_xfer_release(x);
    app_put(name, "wrote", "yes");
    app_wait(peer, "verified", val, sizeof(val));
    if (strcmp(val, "ok"))
        die("the target found the written bytes wrong");

    if (!strcmp(scenario, "basic")) {
        basic_checks(&ag, name, peer, raddr0, raddr1);
        check(xfer_make(&ag, NIXL_OP_READ, 0, peer, raddr0, &x), NIXL_OK, "request made before the invalidation");
        app_put(name, "checked-partial", "yes");
        app_wait(peer, "invalidated", NULL, 0);
        if (wait_invalidated(&ag, peer, 3000))
            die("%s still loaded 3 s after it invalidated itself in etcd", peer);
        check(nixl_xfer_post(x), NIXL_ERR_PEER_INVALIDATED, "post against an invalidated peer");
        nixl_xfer_release(x);
    } else if (!strcmp(scenario, "sigkill")) {
        check(xfer_make(&ag, NIXL_OP_READ, 0, peer, raddr0, &x), NIXL_OK, "request before the kill");
        check(xfer_run(x), NIXL_OK, "READ before the kill");
        app_put(name, "armed", "yes");
        /* The launcher kills the target now and times how long we take. */
        if (wait_invalidated(&ag, peer, (TTL_S + 10) * 1000))
            die("%s was not invalidated within %d s of being killed", peer, TTL_S + 10);
        check(nixl_xfer_post(x), NIXL_ERR_PEER_INVALIDATED, "post against a killed peer");
        nixl_xfer_release(x);
        nixl_xfer_t *y;
        nixl_status_t st = xfer_make(&ag, NIXL_OP_READ, 0, peer, raddr0, &y);
        if (st == NIXL_OK)
            die("a new request to a killed peer was accepted");
    } else if (!strcmp(scenario, "restart")) {
        check(xfer_make(&ag, NIXL_OP_READ, 0, peer, raddr0, &x), NIXL_OK, "request before the restart");
        app_put(name, "armed", "yes");
        app_wait("launcher", "checked", NULL, 0); /* etcd restarted, a third agent fetched us both */
        memset(ag.reg[0], 0, REGION_BYTES);
        check(xfer_run(x), NIXL_OK, "request made before the restart, posted after");
        long bad = first_bad(ag.reg[0], REGION_BYTES, SEED_T);
        if (bad >= 0)
            die("byte %ld read after the restart is wrong", bad);
        nixl_xfer_release(x);
        check(nixl_md_check_remote(ag.a, peer), NIXL_OK, "check_remote after the restart");
    }
    app_put(name, "finish", "yes");
    agent_down(&ag);
    return 0;
}

/* A newcomer after the restart: both agents must be in etcd again. */
static int run_checker(const char *name, const char *t, const char *i)
{
    agent_t ag;
    agent_up(&ag, name);
    check(fetch(&ag, t, NULL, 15000), NIXL_OK, "fetch of the target after the restart");
    check(fetch(&ag, i, NULL, 15000), NIXL_OK, "fetch of the initiator after the restart");
    agent_down(&ag);
    return 0;
}

/* ---- the launcher ---- */

typedef struct child {
    pid_t pid;
    const char *role;
} child_t;

static char self_path[4096];

static pid_t spawn(const char *netns, const char *scenario, const char *role, const char *name, const char *peer)
{
    char *argv[24];
    int n = 0;
    if (netns) {
        argv[n++] = "ip";
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = (char *)netns;
    }
    argv[n++] = self_path;
    argv[n++] = "--scenario";
    argv[n++] = (char *)scenario;
    argv[n++] = "--role";
    argv[n++] = (char *)role;
    argv[n++] = "--name";
    argv[n++] = (char *)name;
    argv[n++] = "--peer";
    argv[n++] = (char *)peer;
    argv[n++] = "--url";
    argv[n++] = url;
    argv[n++] = "--ns";
    argv[n++] = ns;
    argv[n++] = "--backend";
    argv[n++] = (char *)backend;
    argv[n] = NULL;
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Waits for the child; -1 on failure or after timeout_ms (then kills it). */
static int reap(pid_t pid, const char *what, uint32_t timeout_ms)
{
    int status;
    for (uint64_t end = now_ms() + timeout_ms;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (now_ms() > end) {
            fprintf(stderr, "etcd_agents: %s did not finish within %u ms\n", what, timeout_ms);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        sleep_ms(5);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    fprintf(stderr, "etcd_agents: %s failed (status 0x%x)\n", what, (unsigned)status);
    return -1;
}

static int launch(const char *scenario)
{
    etcd_server_t srv;
    test_netns_t nn = {0};
    const char *listen_ip = NULL;
    int rc = 1;
    if (!strcmp(scenario, "netns")) {
        if (test_netns_create(&nn))
            return 77;
        listen_ip = nn.bridge_ip;
    }
    int st = etcd_server_start(&srv, listen_ip);
    if (st) {
        test_netns_destroy(&nn);
        return st;
    }
    snprintf(url, sizeof(url), "%s", srv.url);
    snprintf(ns, sizeof(ns), "/nixl-test-%ld", (long)getpid());
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
    if (len <= 0)
        die("readlink /proc/self/exe: %s", strerror(errno));
    self_path[len] = '\0';
    char tname[64], iname[64];
    snprintf(tname, sizeof(tname), "target-%ld", (long)getpid());
    snprintf(iname, sizeof(iname), "initiator-%ld", (long)getpid());

    const char *nst = nn.made ? nn.ns[0] : NULL, *nsi = nn.made ? nn.ns[1] : NULL;
    pid_t ti, tt;
    if (!strcmp(scenario, "basic")) {
        /* The initiator first: its fetch must wait for the late target. */
        ti = spawn(nsi, scenario, "initiator", iname, tname);
        sleep_ms(1500);
        tt = spawn(nst, scenario, "target", tname, iname);
        rc = reap(ti, "the initiator", 60000) | reap(tt, "the target", 10000);
    } else if (!strcmp(scenario, "sigkill")) {
        tt = spawn(NULL, scenario, "target", tname, iname);
        ti = spawn(NULL, scenario, "initiator", iname, tname);
        app_wait(iname, "armed", NULL, 0);
        uint64_t t0 = now_ms();
        kill(tt, SIGKILL);
        waitpid(tt, NULL, 0);
        rc = reap(ti, "the initiator", (TTL_S + 15) * 1000);
        uint64_t took = now_ms() - t0;
        fprintf(stderr, "etcd_agents: the killed target was invalidated %llu ms after SIGKILL (lease TTL %d s)\n",
                (unsigned long long)took, TTL_S);
        /* etcd checks expiry twice a second; the watch adds a little. */
        if (!rc && took > TTL_S * 1000 + 2000) {
            fprintf(stderr, "etcd_agents: that is over the TTL plus 2 s\n");
            rc = -1;
        }
    } else if (!strcmp(scenario, "restart")) {
        tt = spawn(NULL, scenario, "target", tname, iname);
        ti = spawn(NULL, scenario, "initiator", iname, tname);
        app_wait(iname, "armed", NULL, 0);
        /* Crash etcd and bring it back with nothing: the agents must notice
         * their lease is gone and publish again. */
        if (etcd_server_restart(&srv, 1))
            die("etcd did not restart");
        char cname[64], both[140];
        snprintf(cname, sizeof(cname), "checker-%ld", (long)getpid());
        snprintf(both, sizeof(both), "%s,%s", tname, iname);
        pid_t tc = spawn(NULL, scenario, "checker", cname, both);
        rc = reap(tc, "the checker", 30000);
        app_put("launcher", "checked", "yes");
        rc |= reap(ti, "the initiator", 30000) | reap(tt, "the target", 10000);
    } else if (!strcmp(scenario, "netns")) {
        tt = spawn(nst, scenario, "target", tname, iname);
        ti = spawn(nsi, scenario, "initiator", iname, tname);
        rc = reap(ti, "the initiator", 60000) | reap(tt, "the target", 10000);
    } else {
        fprintf(stderr, "etcd_agents: unknown scenario \"%s\"\n", scenario);
        rc = 2;
    }
    etcd_server_cleanup(&srv);
    test_netns_destroy(&nn);
    if (!rc)
        printf("etcd_agents: scenario %s passed\n", scenario);
    else
        fprintf(stderr, "etcd_agents: scenario %s FAILED: the process or check named in the etcd_agents: lines "
                        "above (a child's own reason comes before its status)\n", scenario);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *scenario = NULL, *role = NULL, *name = NULL, *peer = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--scenario"))
            scenario = argv[i + 1];
        else if (!strcmp(argv[i], "--role"))
            role = argv[i + 1];
        else if (!strcmp(argv[i], "--name"))
            name = argv[i + 1];
        else if (!strcmp(argv[i], "--peer"))
            peer = argv[i + 1];
        else if (!strcmp(argv[i], "--url"))
            snprintf(url, sizeof(url), "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--ns"))
            snprintf(ns, sizeof(ns), "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--backend"))
            backend = argv[i + 1];
    }
    if (!scenario) {
        fprintf(stderr, "usage: %s --scenario basic|sigkill|restart|netns [--backend shm|libfabric]\n", argv[0]);
        return 2;
    }
    if (!role) {
        /* Probe: is etcd support built in?  (The call fails at once if not;
         * with it, it only queues work for an endpoint never contacted.) */
        nixl_agent_t *a;
        setenv("NIXL_ETCD_ENDPOINTS", "http://127.0.0.1:1", 1);
        nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "probe"};
        if (nixl_agent_create(&cfg, &a) == NIXL_OK) {
            nixl_status_t st = nixl_md_etcd_invalidate_local(a, NULL);
            nixl_agent_destroy(a);
            if (st == NIXL_ERR_NOT_SUPPORTED) {
                printf("SKIP: libnixl was built without etcd support (libcurl, libcjson)\n");
                return 77;
            }
        }
        unsetenv("NIXL_ETCD_ENDPOINTS");
        const nixl_backend_info_t *infos;
        size_t nb = 0;
        int found = 0;
        if (nixl_backends_available(&infos, &nb) == NIXL_OK)
            for (size_t i = 0; i < nb; i++)
                found |= !strcmp(infos[i].name, backend);
        if (!found) {
            printf("SKIP: backend %s is not available in this build\n", backend);
            return 77;
        }
        return launch(scenario);
    }
    who = role;
    if (!name || !peer || !url[0] || !ns[0])
        die("missing --name, --peer, --url or --ns");
    /* All an agent knows of etcd is this URL. */
    setenv("NIXL_ETCD_ENDPOINTS", url, 1);
    setenv("NIXL_ETCD_NAMESPACE", ns, 1);
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%d", TTL_S);
    setenv("NIXL_ETCD_LEASE_TTL_S", ttl, 1);
    setenv("NIXL_ETCD_TIMEOUT_MS", "1000", 1);
    if (!strcmp(role, "target"))
        return run_target(scenario, name, peer);
    if (!strcmp(role, "initiator"))
        return run_initiator(scenario, name, peer);
    if (!strcmp(role, "checker")) {
        /* --peer TARGET,INITIATOR */
        char both[160];
        snprintf(both, sizeof(both), "%s", peer);
        char *comma = strchr(both, ',');
        if (!comma)
            die("the checker needs --peer TARGET,INITIATOR");
        *comma = '\0';
        return run_checker(name, both, comma + 1);
    }
    die("unknown role \"%s\"", role);
}
