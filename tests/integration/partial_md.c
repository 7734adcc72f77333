/*
 * partial_md.c - partial metadata between two processes, over the metadata
 * listener, with the shm backend; every byte moved is checked.
 *
 * The launcher forks the target before it makes any agent; the two speak
 * over a socketpair (ports, addresses, "go" and verdicts) and nixl.  The
 * target registers three regions, each with its own pattern, and sends:
 *   1. the partial metadata of region 0, with connection info, to the
 *      initiator's listener: the initiator, which never saw the target
 *      before, READs region 0 and checks it; region 1 is out of reach;
 *   2. that of region 1 without connection info: the initiator READs it,
 *      and a request made before this blob still works (same generation);
 *   3. that of region 2 without connection info to a second listening agent
 *      that never heard of the target: refused with NIXL_ERR_UNKNOWN_PEER,
 *      which the target's call returns;
 *   4. that of region 2 with connection info to the initiator, which WRITEs
 *      it; the target checks every byte.
 * Exit status 0 only when every check on both sides held.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nixl.h"

#define RLEN (256u * 1024u)
#define DEADLINE_S 60

static const char *who = "launcher";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "partial_md[%s]: ", who);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(1);
}

static void expect(nixl_status_t got, nixl_status_t want, const char *what)
{
    if (got != want)
        die("%s: %s, expected %s", what, nixl_status_name(got), nixl_status_name(want));
}

/* The control channel: fixed-size messages of one tag and three numbers. */
typedef struct ctl {
    char tag[16];
    uint64_t v[3];
} ctl_t;

static void ctl_send(int fd, const char *tag, uint64_t a, uint64_t b, uint64_t c)
{
    ctl_t m;
    memset(&m, 0, sizeof(m));
    snprintf(m.tag, sizeof(m.tag), "%s", tag);
    m.v[0] = a;
    m.v[1] = b;
    m.v[2] = c;
    if (write(fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
        die("control write (%s): %s", tag, strerror(errno));
}

static ctl_t ctl_recv(int fd, const char *tag)
{
    ctl_t m;
    ssize_t n = read(fd, &m, sizeof(m));
    if (n != (ssize_t)sizeof(m))
        die("control read, waiting for %s: %s", tag, n == 0 ? "the other side exited" : strerror(errno));
    if (strncmp(m.tag, tag, sizeof(m.tag)) != 0)
        die("control: got %.16s, waiting for %s", m.tag, tag);
    return m;
}

static uint8_t pattern(unsigned region, size_t i)
{
    return (uint8_t)((i * 131u + region * 17u + (i >> 9)) & 0xff);
}

static long first_bad(const uint8_t *p, unsigned region)
{
    for (size_t i = 0; i < RLEN; i++)
        if (p[i] != pattern(region, i))
            return (long)i;
    return -1;
}

static nixl_agent_t *agent_make(const char *name, int listen)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN |
                                             NIXL_AGENT_CONFIG_LISTEN_PORT,
                               .name = name,
                               .listen = listen,
                               .listen_port = 0};
    nixl_agent_t *a = NULL;
    expect(nixl_agent_create(&cfg, &a), NIXL_OK, "nixl_agent_create");
    nixl_backend_t *b = NULL;
    expect(nixl_backend_create(a, "shm", NULL, 0, &b), NIXL_OK, "nixl_backend_create(shm)");
    return a;
}

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    while (st == NIXL_IN_PROG)
        st = nixl_xfer_status(x);
    return st;
}

static nixl_status_t xfer_make(nixl_agent_t *a, nixl_op_t op, uint8_t *local, uint64_t remote, nixl_xfer_t **x)
{
    nixl_desc_t l = {(uint64_t)(uintptr_t)local, RLEN, 0, 0, NULL}, r = {remote, RLEN, 0, 0, NULL};
    nixl_dlist_t L = {NIXL_MEM_DRAM, 1, &l}, R = {NIXL_MEM_DRAM, 1, &r};
    return nixl_xfer_create(a, op, &L, &R, "pmd_target", NULL, x);
}

static void read_verified(nixl_agent_t *a, uint8_t *buf, uint64_t remote, unsigned region, const char *what)
{
    nixl_xfer_t *x = NULL;
    memset(buf, 0, RLEN);
    expect(xfer_make(a, NIXL_OP_READ, buf, remote, &x), NIXL_OK, what);
    expect(run(x), NIXL_OK, what);
    long bad = first_bad(buf, region);
    if (bad >= 0)
        die("%s: byte %ld of region %u is wrong", what, bad, region);
    nixl_xfer_info_t info;
    expect(nixl_xfer_info(x, &info), NIXL_OK, "nixl_xfer_info");
    fprintf(stderr, "partial_md[%s]: %s: %u bytes verified (path %s)\n", who, what, RLEN, info.path);
    nixl_xfer_release(x);
}

static int run_target(int fd)
{
    who = "target";
    nixl_agent_t *a = agent_make("pmd_target", 0);
    uint8_t *r[3];
    for (unsigned i = 0; i < 3; i++) {
        expect(nixl_mem_alloc(RLEN, (void **)&r[i]), NIXL_OK, "nixl_mem_alloc");
        for (size_t k = 0; k < RLEN; k++)
            r[i][k] = pattern(i, k);
        nixl_desc_t d = {(uint64_t)(uintptr_t)r[i], RLEN, 0, 0, NULL};
        nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &d};
        expect(nixl_mem_register(a, &l, NULL), NIXL_OK, "nixl_mem_register");
    }
    memset(r[2], 0, RLEN); /* the initiator WRITEs it */
    /* A descriptor anywhere inside a region publishes the whole region. */
    nixl_desc_t part[3];
    nixl_dlist_t pl[3];
    for (unsigned i = 0; i < 3; i++) {
        part[i] = (nixl_desc_t){(uint64_t)(uintptr_t)r[i] + 4096, 4096, 0, 0, NULL};
        pl[i] = (nixl_dlist_t){NIXL_MEM_DRAM, 1, &part[i]};
    }
    ctl_t m = ctl_recv(fd, "ports");
    uint16_t port = (uint16_t)m.v[0], stranger = (uint16_t)m.v[1];

    expect(nixl_md_send_local_partial(a, &pl[0], NIXL_MD_PARTIAL_CONN_INFO, NULL, "127.0.0.1", port), NIXL_OK,
           "send partial metadata of region 0 with connection info");
    ctl_send(fd, "sent0", (uint64_t)(uintptr_t)r[0], (uint64_t)(uintptr_t)r[1], (uint64_t)(uintptr_t)r[2]);
    ctl_recv(fd, "go1");
    expect(nixl_md_send_local_partial(a, &pl[1], 0, NULL, "127.0.0.1", port), NIXL_OK,
           "send partial metadata of region 1 without connection info");
    ctl_send(fd, "sent1", 0, 0, 0);
    ctl_recv(fd, "go2");
    fprintf(stderr, "partial_md[target]: a listener that does not know us refuses a blob without connection info; "
                    "ERROR lines follow\n");
    expect(nixl_md_send_local_partial(a, &pl[2], 0, NULL, "127.0.0.1", stranger), NIXL_ERR_UNKNOWN_PEER,
           "send partial metadata without connection info to an agent that does not know us");
    expect(nixl_md_send_local_partial(a, &pl[2], NIXL_MD_PARTIAL_CONN_INFO, NULL, "127.0.0.1", port), NIXL_OK,
           "send partial metadata of region 2 with connection info");
    ctl_send(fd, "sent2", 0, 0, 0);
    ctl_recv(fd, "wrote2");
    long bad = first_bad(r[2], 2);
    ctl_send(fd, "verdict", bad < 0 ? 0 : 1, (uint64_t)bad, 0);
    if (bad >= 0)
        die("byte %ld of region 2 written by the initiator is wrong", bad);
    fprintf(stderr, "partial_md[target]: region 2 written by the initiator: %u bytes verified\n", RLEN);
    ctl_recv(fd, "bye");
    nixl_agent_destroy(a);
    for (unsigned i = 0; i < 3; i++)
        nixl_mem_free(r[i], RLEN);
    return 0;
}

static int run_initiator(int fd)
{
    who = "initiator";
    nixl_agent_t *a = agent_make("pmd_init", 1), *stranger = agent_make("pmd_stranger", 1);
    uint8_t *buf = NULL;
    expect(nixl_mem_alloc(RLEN, (void **)&buf), NIXL_OK, "nixl_mem_alloc");
    nixl_desc_t d = {(uint64_t)(uintptr_t)buf, RLEN, 0, 0, NULL};
    nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &d};
    expect(nixl_mem_register(a, &l, NULL), NIXL_OK, "nixl_mem_register");
    expect(nixl_md_check_remote(a, "pmd_target"), NIXL_ERR_UNKNOWN_PEER, "check_remote before any metadata");
    ctl_send(fd, "ports", nixl_agent_listen_port(a), nixl_agent_listen_port(stranger), 0);

    ctl_t m = ctl_recv(fd, "sent0");
    uint64_t r0 = m.v[0], r1 = m.v[1], r2 = m.v[2];
    expect(nixl_md_check_remote(a, "pmd_target"), NIXL_OK, "check_remote after the first partial blob");
    read_verified(a, buf, r0, 0, "READ of region 0, learned from the first partial blob");
    nixl_xfer_t *x = NULL;
    fprintf(stderr, "partial_md[initiator]: region 1 is not in the blob yet; an ERROR line follows\n");
    expect(xfer_make(a, NIXL_OP_READ, buf, r1, &x), NIXL_ERR_NOT_REGISTERED, "READ of region 1 before its blob");
    nixl_xfer_t *before = NULL;
    expect(xfer_make(a, NIXL_OP_READ, buf, r0, &before), NIXL_OK, "request on region 0");

    ctl_send(fd, "go1", 0, 0, 0);
    ctl_recv(fd, "sent1");
    read_verified(a, buf, r1, 1, "READ of region 1, learned from a blob without connection info");
    memset(buf, 0, RLEN);
    expect(run(before), NIXL_OK, "the request made before the second blob");
    long bad = first_bad(buf, 0);
    if (bad >= 0)
        die("request made before the second blob: byte %ld of region 0 is wrong", bad);

    ctl_send(fd, "go2", 0, 0, 0);
    ctl_recv(fd, "sent2");
    expect(nixl_md_check_remote(stranger, "pmd_target"), NIXL_ERR_UNKNOWN_PEER, "the stranger still knows nothing");
    for (size_t k = 0; k < RLEN; k++)
        buf[k] = pattern(2, k);
    expect(xfer_make(a, NIXL_OP_WRITE, buf, r2, &x), NIXL_OK, "WRITE request into region 2");
    expect(run(x), NIXL_OK, "WRITE into region 2");
    nixl_xfer_release(x);
    expect(run(before), NIXL_OK, "the request made before, after the third blob");
    ctl_send(fd, "wrote2", 0, 0, 0);
    m = ctl_recv(fd, "verdict");
    if (m.v[0] != 0)
        die("the target found byte %llu of region 2 wrong", (unsigned long long)m.v[1]);
    nixl_xfer_release(before);
    ctl_send(fd, "bye", 0, 0, 0);
    nixl_agent_destroy(stranger);
    nixl_agent_destroy(a);
    nixl_mem_free(buf, RLEN);
    return 0;
}

int main(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        die("socketpair: %s", strerror(errno));
    /* No agent exists yet: the child starts with no thread of ours. */
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    alarm(DEADLINE_S);
    if (pid == 0) {
        close(sv[0]);
        _exit(run_target(sv[1]));
    }
    close(sv[1]);
    int rc = run_initiator(sv[0]);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        die("waitpid: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the target failed (status 0x%x)", status);
    if (rc == 0)
        fprintf(stderr, "partial_md: every check held on both sides\n");
    return rc;
}
