/*
 * takeover.c - docs/trust.md claim 16: without a secret, the listener does
 * not let anyone silently take over a live peer.
 *
 * The owner (this process) runs agent "owner" with its listener on every
 * address.  Child 1 makes agent "victim", sends its metadata to
 * 127.0.0.1:port and stays alive.  Then, while it lives:
 *   - child 2 makes another agent named "victim" (another instance) and
 *     sends its metadata: refused (the owner still holds child 1's);
 *   - child 2 sends an INVALIDATE of "victim" from a socket bound to
 *     127.0.0.2 (not the address victim's metadata came from): refused,
 *     and victim stays loaded;
 *   - child 1 itself invalidates through 127.0.0.1: done.
 * After child 1 exits, a new instance under its name is accepted (a
 * restart is not a takeover).  The owner checks each outcome by the
 * generation it holds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nixl.h"

static int failures;
#define CHECK(c)                                                                        \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "takeover.c:%d: CHECK failed: %s\n", __LINE__, #c);         \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

static nixl_agent_t *mk(const char *name, int listen)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    if (listen) {
        c.field_mask |= NIXL_AGENT_CONFIG_LISTEN | NIXL_AGENT_CONFIG_LISTEN_PORT;
        c.listen = 1;
        c.listen_port = 0;
    }
    nixl_agent_t *a = NULL;
    nixl_status_t st = nixl_agent_create(&c, &a);
    if (st != NIXL_OK) {
        fprintf(stderr, "agent %s: %s\n", name, nixl_status_name(st));
        exit(2);
    }
    nixl_backend_t *b;
    if (nixl_backend_create(a, "shm", NULL, 0, &b) != NIXL_OK)
        exit(2);
    return a;
}

/* An unauthenticated INVALIDATE of name (listener frame version 1: magic
 * "NXSK", version, type 3, status, length, then the name) from a socket
 * bound to src: the status the listener answers, or NIXL_ERR_IO. */
static nixl_status_t raw_invalidate(const char *src, uint16_t port, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET}, to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, src, &me.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
        fprintf(stderr, "raw INVALIDATE from %s: %s\n", src, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NIXL_ERR_IO;
    }
    uint8_t f[16 + 64];
    uint32_t magic = 0x4b53584eu, len = (uint32_t)strlen(name);
    memset(f, 0, 16);
    for (int i = 0; i < 4; i++) {
        f[i] = (uint8_t)(magic >> (8 * i));
        f[12 + i] = (uint8_t)(len >> (8 * i));
    }
    f[4] = 1; /* version 1: no MAC */
    f[6] = 3; /* INVALIDATE */
    memcpy(f + 16, name, len);
    uint8_t r[16];
    ssize_t got = -1;
    if (send(fd, f, 16 + len, MSG_NOSIGNAL) == (ssize_t)(16 + len))
        got = recv(fd, r, sizeof(r), MSG_WAITALL);
    close(fd);
    if (got != (ssize_t)sizeof(r))
        return NIXL_ERR_IO;
    uint32_t st = 0;
    for (int i = 0; i < 4; i++)
        st |= (uint32_t)r[8 + i] << (8 * i);
    return (nixl_status_t)(int32_t)st;
}

/* Child: read the owner's port, make "victim"; then act on the pipe's
 * commands.  Children are forked before the owner starts any thread. */
static void child(int cmd_fd, int ans_fd)
{
    alarm(50);
    uint16_t port = 0;
    if (read(cmd_fd, &port, sizeof(port)) != sizeof(port))
        _exit(3);
    nixl_agent_t *v = mk("victim", 0);
    char c;
    while (read(cmd_fd, &c, 1) == 1) {
        nixl_status_t st = NIXL_ERR_INVALID_PARAM;
        if (c == 's')
            st = nixl_md_send_local(v, "127.0.0.1", port);
        else if (c == 'i')
            st = nixl_md_invalidate_local(v, "127.0.0.1", port);
        else if (c == 'j')
            st = raw_invalidate("127.0.0.2", port, "victim");
        else if (c == 'q')
            break;
        int s = (int)st;
        if (write(ans_fd, &s, sizeof(s)) != sizeof(s))
            break;
    }
    nixl_agent_destroy(v);
    _exit(0);
}

typedef struct {
    pid_t pid;
    int cmd, ans;
} kid_t;

static kid_t spawn(void)
{
    int c[2], a[2];
    if (pipe(c) || pipe(a))
        exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        close(c[1]);
        close(a[0]);
        child(c[0], a[1]);
    }
    close(c[0]);
    close(a[1]);
    return (kid_t){pid, c[1], a[0]};
}

static const char *g_step = "start";

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "takeover: no answer within 40 s at step: ";
    if (write(2, msg, sizeof(msg) - 1) < 0 || write(2, g_step, strlen(g_step)) < 0 || write(2, "\n", 1) < 0)
        _exit(1);
    _exit(1);
}

static nixl_status_t ask(kid_t k, char c)
{
    int s = 1;
    if (write(k.cmd, &c, 1) != 1 || read(k.ans, &s, sizeof(s)) != sizeof(s))
        return NIXL_ERR_IO;
    return (nixl_status_t)s;
}

static void finish(kid_t k)
{
    char q = 'q';
    if (write(k.cmd, &q, 1) != 1)
        kill(k.pid, SIGKILL);
    waitpid(k.pid, NULL, 0);
    close(k.cmd);
    close(k.ans);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("NIXL_MD_SECRET_FILE"))
        unsetenv("NIXL_MD_SECRET_FILE"); /* the claim is about the listener without a secret */
    kid_t one = spawn(), two = spawn();
    signal(SIGALRM, on_alarm);
    alarm(40);
    nixl_agent_t *owner = mk("owner", 1);
    uint16_t port = nixl_agent_listen_port(owner);
    if (write(one.cmd, &port, sizeof(port)) != sizeof(port) || write(two.cmd, &port, sizeof(port)) != sizeof(port))
        return 2;

    g_step = "first instance's SEND";
    CHECK(ask(one, 's') == NIXL_OK);
    CHECK(nixl_md_check_remote(owner, "victim") == NIXL_OK);

    g_step = "second instance's SEND";
    nixl_status_t st = ask(two, 's');
    printf("another instance under a live peer's name: %s\n", nixl_status_name(st));
    CHECK(st != NIXL_OK);
    g_step = "INVALIDATE from 127.0.0.2";
    st = ask(two, 'j');
    printf("INVALIDATE from 127.0.0.2 (victim's metadata came from 127.0.0.1): %s\n", nixl_status_name(st));
    CHECK(st != NIXL_OK);
    CHECK(nixl_md_check_remote(owner, "victim") == NIXL_OK);

    /* The peer itself, from its own address. */
    g_step = "the peer's own INVALIDATE";
    st = ask(one, 'i');
    printf("INVALIDATE by the peer itself: %s\n", nixl_status_name(st));
    CHECK(st == NIXL_OK);
    CHECK(nixl_md_check_remote(owner, "victim") != NIXL_OK);
    g_step = "the peer's SEND again";
    CHECK(ask(one, 's') == NIXL_OK); /* and it may come back */

    /* Child 1 exits: child 2's instance is a restart now, accepted. */
    g_step = "a restart's SEND";
    finish(one);
    st = ask(two, 's');
    printf("a new instance after the old one exited: %s\n", nixl_status_name(st));
    CHECK(st == NIXL_OK);
    finish(two);

    nixl_agent_destroy(owner);
    if (failures) {
        fprintf(stderr, "takeover: %d check(s) failed\n", failures);
        return 1;
    }
    printf("takeover: all checks passed\n");
    return 0;
}
