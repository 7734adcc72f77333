/*
 * trust.c - the same-host claims of docs/trust.md, tested: a process of
 * another user on this host cannot reach an agent's memory or feed it
 * notifications, through the library or around it.
 *
 * The owner (this process, root) registers memory with shm (and cuda_ipc
 * when built).  A child sends one well-formed notification datagram to the
 * owner's socket while still root (the control: it must arrive), then drops
 * to user nobody and tries, in order:
 *   - the same datagram: must be dropped (SO_PASSCRED uid check);
 *   - loading the owner's metadata and writing into its registered memory
 *     through the API: the shm peer load refuses another user, so the
 *     request cannot be made (NIXL_ERR_NO_PATH);
 *   - process_vm_writev straight into the owner's buffer: the kernel says
 *     EPERM (PR_SET_PTRACER_ANY, which shm sets under Yama scope 1, widens
 *     attach rights to other processes of the SAME user only);
 *   - the cuda_ipc staging socket: connection closed at once (SO_PEERCRED).
 * Afterwards the owner's bytes are intact and it saw exactly the control
 * notification.
 *
 * Needs root (to become another user); otherwise exits 77 with the reason.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

#define BUF_LEN (1u << 20)
#define NOBODY 65534

#define CHECK(c)                                                                                 \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                          \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)
#define CHECK_OK(e)                                                                              \
    do {                                                                                         \
        nixl_status_t st_ = (e);                                                                 \
        if (st_ != NIXL_OK) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #e, nixl_status_name(st_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* What the child found, sent back over a pipe. */
typedef struct verdict {
    int dgram_root_sent, dgram_nobody_sent;
    int md_load;       /* nixl_md_load_remote status */
    int xfer_create;   /* nixl_xfer_create status */
    int vm_errno;      /* errno of process_vm_writev (0: it worked!) */
    int stage_tried;   /* a cuda_ipc staging socket was found */
    int stage_closed;  /* ... and the server closed our connection */
} verdict_t;

/* The abstract socket of the owner whose name starts with prefix, from
 * /proc/net/unix (names are "@nixl-<backend>.<pid>.<n>.<random>"). */
static int find_socket(const char *prefix, const char *suffix, char *out, size_t cap)
{
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f)
        return -1;
    char line[512];
    int found = -1;
    while (found < 0 && fgets(line, sizeof(line), f)) {
        char *at = strchr(line, '@');
        if (!at)
            continue;
        at[strcspn(at, "\n")] = 0;
        size_t n = strlen(at + 1), sl = suffix ? strlen(suffix) : 0;
        if (strncmp(at + 1, prefix, strlen(prefix)) != 0)
            continue;
        int is_stg = n >= 4 && strcmp(at + 1 + n - 4, ".stg") == 0;
        if (suffix ? n < sl || strcmp(at + 1 + n - sl, suffix) != 0 : is_stg)
            continue;
        if (n < cap) {
            memcpy(out, at + 1, n + 1);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

static socklen_t abstract_addr(struct sockaddr_un *a, const char *name)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(a->sun_path + 1, name, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* A well-formed notification datagram ("SHMN", version 1, sender, payload). */
static int send_notif(const char *sock, const char *sender, const char *msg)
{
    uint8_t b[256];
    size_t sl = strlen(sender), ml = strlen(msg);
    const uint32_t magic = 0x4e4d4853u;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(magic >> (8 * i));
    b[4] = 1;
    b[5] = 0;
    b[6] = (uint8_t)sl;
    b[7] = 0;
    memcpy(b + 8, sender, sl);
    memcpy(b + 8 + sl, msg, ml);
    struct sockaddr_un a;
    socklen_t al = abstract_addr(&a, sock);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    ssize_t k = sendto(fd, b, 8 + sl + ml, 0, (struct sockaddr *)&a, al);
    close(fd);
    return k == (ssize_t)(8 + sl + ml);
}

static void child_main(int wfd, int rfd, pid_t owner, uint64_t buf_addr)
{
    verdict_t v;
    memset(&v, 0, sizeof(v));
    char prefix[64], shm_sock[128], stg_sock[128];
    snprintf(prefix, sizeof(prefix), "nixl-shm.%d.", (int)owner);
    CHECK(find_socket(prefix, NULL, shm_sock, sizeof(shm_sock)) == 0);
    v.dgram_root_sent = send_notif(shm_sock, "sender", "as-root");

    /* The owner's metadata, before dropping privileges. */
    size_t len = 0;
    CHECK(read(rfd, &len, sizeof(len)) == (ssize_t)sizeof(len) && len > 0 && len < (1u << 24));
    uint8_t *blob = malloc(len);
    CHECK(blob);
    for (size_t got = 0; got < len;) {
        ssize_t k = read(rfd, blob + got, len - got);
        CHECK(k > 0);
        got += (size_t)k;
    }

    CHECK(setgid(NOBODY) == 0 && setuid(NOBODY) == 0);
    CHECK(getuid() == NOBODY);
    v.dgram_nobody_sent = send_notif(shm_sock, "intruder", "as-nobody");

    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "trust_intruder"};
    nixl_agent_t *a;
    CHECK_OK(nixl_agent_create(&cfg, &a));
    nixl_backend_t *be;
    CHECK_OK(nixl_backend_create(a, "shm", NULL, 0, &be));
    void *mine;
    CHECK_OK(nixl_mem_alloc(BUF_LEN, &mine));
    memset(mine, 0x66, BUF_LEN);
    nixl_desc_t ld = {.addr = (uintptr_t)mine, .len = BUF_LEN}, rd = {.addr = buf_addr, .len = BUF_LEN};
    nixl_dlist_t ll = {NIXL_MEM_DRAM, 1, &ld}, rl = {NIXL_MEM_DRAM, 1, &rd};
    CHECK_OK(nixl_mem_register(a, &ll, NULL));
    char name[NIXL_NAME_MAX + 1];
    v.md_load = nixl_md_load_remote(a, blob, len, name);
    nixl_xfer_t *x = NULL;
    v.xfer_create = v.md_load == NIXL_OK ? nixl_xfer_create(a, NIXL_OP_WRITE, &ll, &rl, "trust_owner", NULL, &x)
                                         : v.md_load;
    if (x) {
        /* Must not happen; if it does, show what the post does. */
        nixl_status_t st = nixl_xfer_post(x);
        while (st == NIXL_IN_PROG)
            st = nixl_xfer_status(x);
        nixl_xfer_release(x);
    }

    struct iovec l = {mine, 4096}, r = {(void *)(uintptr_t)buf_addr, 4096};
    v.vm_errno = process_vm_writev(owner, &l, 1, &r, 1, 0) < 0 ? errno : 0;

    snprintf(prefix, sizeof(prefix), "nixl-cuda_ipc.%d.", (int)owner);
    if (find_socket(prefix, ".stg", stg_sock, sizeof(stg_sock)) == 0) {
        v.stage_tried = 1;
        struct sockaddr_un sa;
        socklen_t sal = abstract_addr(&sa, stg_sock);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sal) == 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            char c;
            v.stage_closed = poll(&p, 1, 5000) == 1 && recv(fd, &c, 1, 0) == 0;
        } else {
            v.stage_closed = 1; /* refused outright */
        }
        if (fd >= 0)
            close(fd);
    }
    CHECK(write(wfd, &v, sizeof(v)) == (ssize_t)sizeof(v));
    nixl_agent_destroy(a);
    nixl_mem_free(mine, BUF_LEN);
    free(blob);
    _exit(0);
}

typedef struct seen {
    int root, nobody, other;
} seen_t;

static void on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    seen_t *s = arg;
    (void)sender;
    if (len == 7 && memcmp(msg, "as-root", 7) == 0)
        s->root++;
    else if (len == 9 && memcmp(msg, "as-nobody", 9) == 0)
        s->nobody++;
    else
        s->other++;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (geteuid() != 0) {
        printf("SKIP: needs root to run a peer as another user (setuid); running as uid %d\n", (int)geteuid());
        return 77;
    }
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "trust_owner"};
    nixl_agent_t *a;
    CHECK_OK(nixl_agent_create(&cfg, &a));
    nixl_backend_t *be;
    CHECK_OK(nixl_backend_create(a, "shm", NULL, 0, &be));
    int have_cip = nixl_backend_create(a, "cuda_ipc", NULL, 0, &be) == NIXL_OK;
    void *buf;
    CHECK_OK(nixl_mem_alloc(BUF_LEN, &buf));
    memset(buf, 0x11, BUF_LEN);
    nixl_desc_t d = {.addr = (uintptr_t)buf, .len = BUF_LEN};
    nixl_dlist_t l = {NIXL_MEM_DRAM, 1, &d};
    CHECK_OK(nixl_mem_register(a, &l, NULL));
    void *blob;
    size_t len;
    CHECK_OK(nixl_md_get_local(a, &blob, &len));

    int to_parent[2], to_child[2];
    CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0);
    pid_t owner = getpid();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(to_parent[0]);
        close(to_child[1]);
        child_main(to_parent[1], to_child[0], owner, (uint64_t)(uintptr_t)buf);
    }
    close(to_parent[1]);
    close(to_child[0]);
    CHECK(write(to_child[1], &len, sizeof(len)) == (ssize_t)sizeof(len));
    CHECK(write(to_child[1], blob, len) == (ssize_t)len);
    nixl_free(blob);
    verdict_t v;
    CHECK(read(to_parent[0], &v, sizeof(v)) == (ssize_t)sizeof(v));
    int ws = 0;
    CHECK(waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);

    seen_t s = {0, 0, 0};
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        CHECK_OK(nixl_notifs_get(a, on_notif, &s, NULL));
        usleep(1000);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 500);

    printf("control datagram from root: sent %d, delivered %d\n", v.dgram_root_sent, s.root);
    printf("datagram from nobody:       sent %d, delivered %d\n", v.dgram_nobody_sent, s.nobody);
    printf("nobody loads our metadata:  %s; creates a WRITE into our memory: %s\n",
           nixl_status_name((nixl_status_t)v.md_load), nixl_status_name((nixl_status_t)v.xfer_create));
    printf("nobody process_vm_writev:   %s\n", v.vm_errno ? strerror(v.vm_errno) : "succeeded");
    if (v.stage_tried)
        printf("nobody connects to the cuda_ipc staging socket: %s\n", v.stage_closed ? "closed at once" : "kept");
    else
        printf("cuda_ipc staging socket: %s\n", have_cip ? "not found" : "cuda_ipc not built here");

    CHECK(v.dgram_root_sent && s.root == 1); /* the control: the path works */
    CHECK(v.dgram_nobody_sent && s.nobody == 0 && s.other == 0);
    CHECK(v.xfer_create != NIXL_OK);
    CHECK(v.vm_errno == EPERM);
    CHECK(!have_cip || (v.stage_tried && v.stage_closed));
    for (size_t i = 0; i < BUF_LEN; i++)
        CHECK(((uint8_t *)buf)[i] == 0x11);
    CHECK_OK(nixl_mem_deregister(a, &l, NULL));
    nixl_agent_destroy(a);
    nixl_mem_free(buf, BUF_LEN);
    printf("PASS: another user reached neither our memory nor our notifications\n");
    return 0;
}
