/*
 * test_shm_fork.c - the shm backend between two processes: the parent
 * initiates, a fork()ed child is the target (and once writes back into the
 * parent).  Connection info, keys and commands travel over pipes.
 *
 * The child checks the data the moment each notification arrives, so a
 * notification delivered before its data would fail the test.  At the end
 * the child exits and every use of it must give NIXL_ERR_PEER_GONE, both
 * while it is a zombie and once reaped.
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/shm/shm_int.h"
#include "../../common/test_peer.h"
#include "shm_test_util.h"

#define MiB (1024u * 1024u)
#define REGION_LEN (64 * MiB)
#define NSMALL 10000

enum { R_CMA = 0, R_MAP = 1 };
enum { CMD_FILL = 1, CMD_EXPECT_NOTIF, CMD_CHECK, CMD_WRITE_PARENT, CMD_EXIT };

typedef struct cmd {
    uint32_t op, region, seed, pad;
    uint64_t len;
} cmd_t;

static void write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        CHECK(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* 0 at end of file before anything was read. */
static int read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 && got == 0)
            return 0;
        CHECK(n > 0);
        got += (size_t)n;
    }
    return 1;
}

static void send_blob(int fd, const void *p, size_t len)
{
    uint32_t l = (uint32_t)len;
    write_all(fd, &l, sizeof(l));
    write_all(fd, p, len);
}

static size_t recv_blob(int fd, void *p, size_t cap)
{
    uint32_t l;
    CHECK(read_all(fd, &l, sizeof(l)));
    CHECK(l <= cap);
    CHECK(read_all(fd, p, l));
    return l;
}

/* What one side publishes about one region. */
typedef struct pub_region {
    uint64_t addr, len;
    uint8_t rkey[64];
    size_t rkey_len;
} pub_region_t;

static void publish(int fd, test_side_t *s, void *md, const void *addr, size_t len)
{
    uint8_t key[64];
    size_t klen = sizeof(key);
    CHECK_ST(test_ops()->rkey_pack(s->be, md, key, &klen), NIXL_OK);
    uint64_t al[2] = {(uint64_t)(uintptr_t)addr, len};
    write_all(fd, al, sizeof(al));
    send_blob(fd, key, klen);
}

static void receive_region(int fd, pub_region_t *r)
{
    uint64_t al[2];
    CHECK(read_all(fd, al, sizeof(al)));
    r->addr = al[0];
    r->len = al[1];
    r->rkey_len = recv_blob(fd, r->rkey, sizeof(r->rkey));
}

static void *load_region(test_side_t *s, void *peer, const pub_region_t *r)
{
    nixl_be_region_t reg = {.mem_type = NIXL_MEM_DRAM, .addr = r->addr, .len = r->len};
    void *rmd;
    CHECK_ST(test_ops()->rkey_load(s->be, peer, &reg, r->rkey, r->rkey_len, &rmd), NIXL_OK);
    return rmd;
}

static void send_conn(int fd, test_side_t *s)
{
    uint8_t conn[256];
    size_t len = sizeof(conn);
    CHECK_ST(test_ops()->conn_pack(s->be, conn, &len), NIXL_OK);
    send_blob(fd, conn, len);
}

typedef struct data_check {
    const uint8_t *buf;
    size_t len;
    uint32_t seed;
} data_check_t;

static int data_is(const uint8_t *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != test_pat(seed, i))
            return 0;
    return 1;
}

static int on_notif_check(void *arg, const void *msg, size_t len)
{
    data_check_t *c = arg;
    (void)msg;
    (void)len;
    return data_is(c->buf, c->len, c->seed);
}

/* ---- child: the target ---- */

static void child_main(int rfd, int wfd)
{
    const nixl_backend_ops_t *ops = test_ops();
    test_side_t b;
    CHECK_ST(test_side_create(&b, "child", NULL), NIXL_OK);
    test_mem_t mem[2];
    test_mem_malloc(&mem[R_CMA], REGION_LEN);
    test_mem_memfd(&mem[R_MAP], REGION_LEN);
    void *md[2];
    for (int i = 0; i < 2; i++)
        md[i] = test_reg(&b, mem[i].p, mem[i].len);
    send_conn(wfd, &b);
    for (int i = 0; i < 2; i++)
        publish(wfd, &b, md[i], mem[i].p, mem[i].len);

    /* the parent, for the write back */
    uint8_t pconn[256];
    size_t pconn_len = recv_blob(rfd, pconn, sizeof(pconn));
    pub_region_t preg;
    receive_region(rfd, &preg);
    void *ppeer;
    nixl_be_peer_t pwho = test_peer_here("parent", getppid());
    CHECK_ST(ops->peer_open(b.be, &pwho, pconn, pconn_len, &ppeer), NIXL_OK);
    void *prmd = load_region(&b, ppeer, &preg);

    data_check_t dc;
    test_host_set_hook(&b.host, on_notif_check, &dc);
    cmd_t c;
    while (read_all(rfd, &c, sizeof(c))) {
        uint32_t ok = 1;
        test_mem_t *m = &mem[c.region & 1];
        switch (c.op) {
        case CMD_FILL:
            test_fill(m->p, c.len, c.seed);
            break;
        case CMD_EXPECT_NOTIF:
            dc.buf = m->p;
            dc.len = c.len;
            dc.seed = c.seed;
            test_host_clear(&b.host);
            write_all(wfd, &ok, sizeof(ok)); /* ready */
            ok = test_wait_notifs(&b, 1, 20000) && b.host.num_notifs == 1 && b.host.notifs[0].hook_ok &&
                 strcmp(b.host.notifs[0].sender, "parent") == 0;
            break;
        case CMD_CHECK:
            ok = data_is(m->p, c.len, c.seed);
            break;
        case CMD_WRITE_PARENT: {
            test_mem_t src;
            test_mem_malloc(&src, c.len);
            test_fill(src.p, c.len, c.seed);
            void *lmd = test_reg(&b, src.p, src.len);
            nixl_be_iov_t iov = {.laddr = (uint64_t)(uintptr_t)src.p, .raddr = preg.addr, .len = c.len,
                                 .lmd = lmd, .rmd = prmd};
            const char *path;
            ok = test_xfer(&b, ppeer, NIXL_OP_WRITE, &iov, 1, "from-child", 10, &path, NULL) == NIXL_OK &&
                 strcmp(path, "shm.cma") == 0;
            ops->dereg(b.be, lmd);
            test_mem_free(&src);
            break;
        }
        case CMD_EXIT:
            goto out;
        default:
            ok = 0;
        }
        write_all(wfd, &ok, sizeof(ok));
    }
out:
    ops->rkey_unload(b.be, prmd);
    ops->peer_unload(b.be, ppeer);
    for (int i = 0; i < 2; i++) {
        ops->dereg(b.be, md[i]);
        test_mem_free(&mem[i]);
    }
    test_side_destroy(&b);
}

/* ---- parent: the initiator ---- */

typedef struct parent {
    test_side_t a;
    int rfd, wfd;
    void *peer;
    void *rmd[2];
    pub_region_t reg[2];
    test_mem_t local;
    void *lmd;
} parent_t;

static uint32_t child_cmd(parent_t *p, uint32_t op, uint32_t region, uint32_t seed, uint64_t len)
{
    cmd_t c = {.op = op, .region = region, .seed = seed, .len = len};
    write_all(p->wfd, &c, sizeof(c));
    uint32_t ok = 0;
    CHECK(read_all(p->rfd, &ok, sizeof(ok)));
    return ok;
}

static uint32_t child_reply(parent_t *p)
{
    uint32_t ok = 0;
    CHECK(read_all(p->rfd, &ok, sizeof(ok)));
    return ok;
}

static const char *region_path(int region)
{
    return region == R_MAP ? "shm.map" : "shm.cma";
}

/* Pieces of 1 KiB: local piece i lands at remote offset perm[i] KiB, and the
 * local bytes are chosen so the remote region ends as pattern 'seed'. */
static nixl_be_iov_t *small_iovs(parent_t *p, int region, const uint32_t *perm, uint32_t seed)
{
    nixl_be_iov_t *iov = calloc(NSMALL, sizeof(*iov));
    CHECK(iov);
    for (size_t i = 0; i < NSMALL; i++) {
        uint8_t *l = p->local.p + i * 1024;
        for (size_t k = 0; k < 1024; k++)
            l[k] = test_pat(seed, (size_t)perm[i] * 1024 + k);
        iov[i].laddr = (uint64_t)(uintptr_t)l;
        iov[i].raddr = p->reg[region].addr + (uint64_t)perm[i] * 1024;
        iov[i].len = 1024;
        iov[i].lmd = p->lmd;
        iov[i].rmd = p->rmd[region];
    }
    return iov;
}

static void parent_write_notif(parent_t *p, int region)
{
    uint32_t *perm = test_perm(NSMALL, 17);
    uint32_t seed = 100 + (uint32_t)region;
    nixl_be_iov_t *iov = small_iovs(p, region, perm, seed);
    CHECK(child_cmd(p, CMD_EXPECT_NOTIF, (uint32_t)region, seed, NSMALL * 1024));
    const char *path;
    CHECK_ST(test_xfer(&p->a, p->peer, NIXL_OP_WRITE, iov, NSMALL, "small", 5, &path, NULL), NIXL_OK);
    CHECK(strcmp(path, region_path(region)) == 0);
    CHECK(child_reply(p));
    free(iov);
    free(perm);
}

static void parent_large(parent_t *p, int region)
{
    uint32_t seed = 200 + (uint32_t)region;
    test_fill(p->local.p, REGION_LEN, seed);
    nixl_be_iov_t iov = {.laddr = (uint64_t)(uintptr_t)p->local.p, .raddr = p->reg[region].addr,
                         .len = REGION_LEN, .lmd = p->lmd, .rmd = p->rmd[region]};
    CHECK(child_cmd(p, CMD_EXPECT_NOTIF, (uint32_t)region, seed, REGION_LEN));
    nixl_status_t first;
    double t0 = test_now_s();
    CHECK_ST(test_xfer(&p->a, p->peer, NIXL_OP_WRITE, &iov, 1, "large", 5, NULL, &first), NIXL_OK);
    double t1 = test_now_s();
    CHECK_ST(first, NIXL_IN_PROG);
    CHECK(child_reply(p));
    printf("fork: 64 MiB write over %s in %.1f ms\n", region_path(region), (t1 - t0) * 1e3);
}

static void parent_read(parent_t *p, int region)
{
    uint32_t seed = 300 + (uint32_t)region;
    CHECK(child_cmd(p, CMD_FILL, (uint32_t)region, seed, REGION_LEN));
    uint32_t *perm = test_perm(NSMALL, 23);
    nixl_be_iov_t *iov = small_iovs(p, region, perm, 0);
    memset(p->local.p, 0, REGION_LEN);
    const char *path;
    CHECK_ST(test_xfer(&p->a, p->peer, NIXL_OP_READ, iov, NSMALL, NULL, 0, &path, NULL), NIXL_OK);
    CHECK(strcmp(path, region_path(region)) == 0);
    for (size_t i = 0; i < NSMALL; i++)
        for (size_t k = 0; k < 1024; k++)
            CHECK(p->local.p[i * 1024 + k] == test_pat(seed, (size_t)perm[i] * 1024 + k));
    /* and one large read through the pool */
    memset(p->local.p, 0, REGION_LEN);
    nixl_be_iov_t big = {.laddr = (uint64_t)(uintptr_t)p->local.p, .raddr = p->reg[region].addr,
                         .len = REGION_LEN, .lmd = p->lmd, .rmd = p->rmd[region]};
    CHECK_ST(test_xfer(&p->a, p->peer, NIXL_OP_READ, &big, 1, NULL, 0, NULL, NULL), NIXL_OK);
    CHECK(data_is(p->local.p, REGION_LEN, seed));
    free(iov);
    free(perm);
}

static void parent_many_small_check(parent_t *p, int region)
{
    uint32_t *perm = test_perm(NSMALL, 29);
    uint32_t seed = 400 + (uint32_t)region;
    nixl_be_iov_t *iov = small_iovs(p, region, perm, seed);
    CHECK_ST(test_xfer(&p->a, p->peer, NIXL_OP_WRITE, iov, NSMALL, NULL, 0, NULL, NULL), NIXL_OK);
    CHECK(child_cmd(p, CMD_CHECK, (uint32_t)region, seed, NSMALL * 1024));
    free(iov);
    free(perm);
}

static void parent_write_back(parent_t *p)
{
    data_check_t dc = {p->local.p, 1 * MiB, 500};
    memset(p->local.p, 0, REGION_LEN);
    test_host_set_hook(&p->a.host, on_notif_check, &dc);
    test_host_clear(&p->a.host);
    CHECK(child_cmd(p, CMD_WRITE_PARENT, 0, 500, 1 * MiB));
    CHECK(test_wait_notifs(&p->a, 1, 10000));
    CHECK(p->a.host.notifs[0].hook_ok && strcmp(p->a.host.notifs[0].sender, "child") == 0);
    CHECK(p->a.host.notifs[0].len == 10 && memcmp(p->a.host.notifs[0].msg, "from-child", 10) == 0);
    test_host_set_hook(&p->a.host, NULL, NULL);
}

static void parent_main(pid_t child, int rfd, int wfd)
{
    const nixl_backend_ops_t *ops = test_ops();
    parent_t p;
    memset(&p, 0, sizeof(p));
    p.rfd = rfd;
    p.wfd = wfd;
    CHECK_ST(test_side_create(&p.a, "parent", NULL), NIXL_OK);
    test_mem_malloc(&p.local, REGION_LEN);
    p.lmd = test_reg(&p.a, p.local.p, p.local.len);

    uint8_t conn[256];
    size_t conn_len = recv_blob(rfd, conn, sizeof(conn));
    for (int i = 0; i < 2; i++)
        receive_region(rfd, &p.reg[i]);
    send_conn(wfd, &p.a);
    publish(wfd, &p.a, p.lmd, p.local.p, p.local.len);

    /* Read while the child runs: loading it again after it died must
     * name the process that was. */
    nixl_be_peer_t cwho = test_peer_here("child", child);
    CHECK_ST(ops->peer_open(p.a.be, &cwho, conn, conn_len, &p.peer), NIXL_OK);
    for (int i = 0; i < 2; i++)
        p.rmd[i] = load_region(&p.a, p.peer, &p.reg[i]);
    CHECK(p.a.host.fallbacks == 0);

    for (int r = R_CMA; r <= R_MAP; r++) {
        parent_write_notif(&p, r);
        parent_large(&p, r);
        parent_read(&p, r);
        parent_many_small_check(&p, r);
    }
    /* standalone notification */
    CHECK(child_cmd(&p, CMD_EXPECT_NOTIF, 0, 0, 0));
    CHECK_ST(ops->notif_send(p.a.be, p.peer, "standalone", 10), NIXL_OK);
    CHECK(child_reply(&p));
    parent_write_back(&p);
    printf("fork: transfers both ways: ok\n");

    /* A request prepared while the child lives, posted after it died. */
    nixl_be_iov_t iov = {.laddr = (uint64_t)(uintptr_t)p.local.p, .raddr = p.reg[R_CMA].addr, .len = 4096,
                         .lmd = p.lmd, .rmd = p.rmd[R_CMA]};
    nixl_be_xfer_t x = {.op = NIXL_OP_WRITE, .peer = p.peer, .local_mem = NIXL_MEM_DRAM,
                        .remote_mem = NIXL_MEM_DRAM, .iov = &iov, .count = 1, .bytes = 4096};
    nixl_be_req_t *req[2];
    CHECK_ST(ops->xfer_prepare(p.a.be, &x, &req[0]), NIXL_OK);
    iov.raddr = p.reg[R_MAP].addr;
    iov.rmd = p.rmd[R_MAP];
    CHECK_ST(ops->xfer_prepare(p.a.be, &x, &req[1]), NIXL_OK);
    CHECK(strcmp(req[1]->path, "shm.map") == 0);

    cmd_t c = {.op = CMD_EXIT};
    write_all(wfd, &c, sizeof(c));
    uint32_t dummy;
    CHECK(read_all(rfd, &dummy, sizeof(dummy)) == 0); /* EOF: the child is closing down */
    /* wait until it is a zombie (not reaped yet) */
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    CHECK(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT) == 0);
    CHECK(si.si_code == CLD_EXITED && si.si_status == 0);
    for (int i = 0; i < 2; i++) {
        CHECK_ST(ops->xfer_post(p.a.be, req[i], NULL, 0), NIXL_ERR_PEER_GONE);
        CHECK_ST(ops->xfer_status(p.a.be, req[i]), NIXL_ERR_PEER_GONE);
    }
    CHECK_ST(ops->notif_send(p.a.be, p.peer, "x", 1), NIXL_ERR_PEER_GONE);
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 2; i++) {
        CHECK_ST(ops->xfer_post(p.a.be, req[i], "n", 1), NIXL_ERR_PEER_GONE);
        ops->xfer_release(p.a.be, req[i]);
    }
    void *again;
    CHECK_ST(ops->peer_open(p.a.be, &cwho, conn, conn_len, &again), NIXL_ERR_PEER_GONE);
    printf("fork: dead peer gives NIXL_ERR_PEER_GONE: ok\n");

    for (int i = 0; i < 2; i++)
        ops->rkey_unload(p.a.be, p.rmd[i]);
    ops->peer_unload(p.a.be, p.peer);
    ops->dereg(p.a.be, p.lmd);
    test_mem_free(&p.local);
    test_side_destroy(&p.a);
}

/* ---- the kernel refusing CMA ---- */

/* Root becomes nobody, so that neither process can override the check. */
static void drop_privileges(void)
{
    if (geteuid() != 0)
        return;
    CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
}

/* The target: non-dumpable, so a peer of the same uid without
 * CAP_SYS_PTRACE may neither process_vm_* it nor open its /proc/<pid>/fd. */
static void perm_target(int wfd, int hold_fd)
{
    drop_privileges();
    CHECK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0);
    test_side_t b;
    CHECK_ST(test_side_create(&b, "target", NULL), NIXL_OK);
    test_mem_t mem[2];
    test_mem_malloc(&mem[R_CMA], MiB);
    test_mem_memfd(&mem[R_MAP], MiB);
    void *md[2];
    send_conn(wfd, &b);
    for (int i = 0; i < 2; i++) {
        md[i] = test_reg(&b, mem[i].p, mem[i].len);
        publish(wfd, &b, md[i], mem[i].p, mem[i].len);
    }
    uint8_t x;
    while (read(hold_fd, &x, 1) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < 2; i++) {
        test_ops()->dereg(b.be, md[i]);
        test_mem_free(&mem[i]);
    }
    test_side_destroy(&b);
}

static int perm_initiator(int rfd, pid_t target)
{
    const nixl_backend_ops_t *ops = test_ops();
    drop_privileges();
    test_side_t a;
    CHECK_ST(test_side_create(&a, "initiator", NULL), NIXL_OK);
    if (((shm_be_t *)a.be)->can_ptrace_any) {
        printf("perm: this user holds CAP_SYS_PTRACE: the kernel would not refuse\n");
        test_side_destroy(&a);
        return 77;
    }
    uint8_t conn[256];
    size_t conn_len = recv_blob(rfd, conn, sizeof(conn));
    pub_region_t reg[2];
    for (int i = 0; i < 2; i++)
        receive_region(rfd, &reg[i]);
    void *peer;
    nixl_be_peer_t who = test_peer_here("target", target);
    CHECK_ST(ops->peer_open(a.be, &who, conn, conn_len, &peer), NIXL_OK);
    void *rmd[2];
    for (int i = 0; i < 2; i++)
        rmd[i] = load_region(&a, peer, &reg[i]);
    /* the memfd could not be opened through /proc: counted fallback */
    CHECK(a.host.fallbacks == 1);
    printf("perm: fallback cause: %s\n", a.host.last_cause);
    test_mem_t l;
    test_mem_malloc(&l, MiB);
    void *lmd = test_reg(&a, l.p, l.len);
    for (int i = 0; i < 2; i++) {
        nixl_be_iov_t iov = {.laddr = (uint64_t)(uintptr_t)l.p, .raddr = reg[i].addr, .len = 4096,
                             .lmd = lmd, .rmd = rmd[i]};
        const char *path;
        CHECK_ST(test_xfer(&a, peer, NIXL_OP_WRITE, &iov, 1, "x", 1, &path, NULL), NIXL_ERR_PERMISSION);
        CHECK(strcmp(path, "shm.cma") == 0);
        CHECK_ST(test_xfer(&a, peer, NIXL_OP_READ, &iov, 1, NULL, 0, NULL, NULL), NIXL_ERR_PERMISSION);
        ops->rkey_unload(a.be, rmd[i]);
    }
    ops->peer_unload(a.be, peer);
    ops->dereg(a.be, lmd);
    test_mem_free(&l);
    test_side_destroy(&a);
    return 0;
}

static int case_perm(void)
{
    int conn_pipe[2], hold_pipe[2];
    CHECK(pipe(conn_pipe) == 0 && pipe(hold_pipe) == 0);
    fflush(NULL);
    pid_t target = fork();
    CHECK(target >= 0);
    if (target == 0) {
        close(conn_pipe[0]);
        close(hold_pipe[1]);
        perm_target(conn_pipe[1], hold_pipe[0]);
        exit(0);
    }
    close(hold_pipe[0]);
    close(conn_pipe[1]);
    pid_t ini = fork();
    CHECK(ini >= 0);
    if (ini == 0) {
        close(hold_pipe[1]);
        exit(perm_initiator(conn_pipe[0], target));
    }
    close(conn_pipe[0]);
    int st_ini, st_target;
    CHECK(waitpid(ini, &st_ini, 0) == ini);
    close(hold_pipe[1]); /* lets the target finish */
    CHECK(waitpid(target, &st_target, 0) == target);
    CHECK(WIFEXITED(st_target) && WEXITSTATUS(st_target) == 0);
    CHECK(WIFEXITED(st_ini));
    if (WEXITSTATUS(st_ini) == 77)
        return 77;
    CHECK(WEXITSTATUS(st_ini) == 0);
    printf("perm: CMA refused by the kernel gives NIXL_ERR_PERMISSION: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "perm") == 0)
        return case_perm();
    int to_child[2], to_parent[2];
    CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        child_main(to_child[0], to_parent[1]);
        close(to_parent[1]);
        exit(0);
    }
    close(to_child[0]);
    close(to_parent[1]);
    parent_main(pid, to_parent[0], to_child[1]);
    close(to_child[1]);
    close(to_parent[0]);
    return 0;
}
