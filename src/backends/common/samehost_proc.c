/*
 * samehost_proc.c - who a process is and whether it still runs, for the
 * backends that reach peers on this host (shm, cuda_ipc).
 *
 * A peer is recognized by what survives pid reuse and namespaces: the
 * kernel boot id, the pid namespace, and the pid together with its start
 * time.  We hold a pidfd on it (Linux 5.3+), so a post can tell in one
 * poll() that it exited; without pidfds the start time is re-read instead.
 * Yama's ptrace rule lives here too: both CMA (shm) and pidfd_getfd
 * (cuda_ipc's VMM handles) need ptrace-attach rights over the peer.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "samehost.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define SAMEHOST_CAP_SYS_PTRACE 19

int samehost_read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return (int)got;
}

/* The command name (field 2) may hold spaces and parentheses, so fields
 * are counted from the last ')'. */
int samehost_proc_start_time(pid_t pid, uint64_t *out)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (samehost_read_file(path, buf, sizeof(buf)) <= 0)
        return -1;
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    /* after ')' come fields 3, 4, ...: skip 19 of them to reach field 22 */
    for (int field = 3; field < 22; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
        if (!*p)
            return -1;
    }
    while (*p == ' ')
        p++;
    if (!isdigit((unsigned char)*p))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || (*end != ' ' && *end != '\n' && *end != '\0'))
        return -1;
    *out = v;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* boot_id is a UUID "xxxxxxxx-xxxx-..."; zero when unreadable. */
static void read_boot_id(uint8_t out[16])
{
    char buf[64];
    memset(out, 0, 16);
    if (samehost_read_file("/proc/sys/kernel/random/boot_id", buf, sizeof(buf)) <= 0)
        return;
    uint8_t id[16];
    int n = 0;
    for (const char *p = buf; *p && *p != '\n' && n < 32; p++) {
        if (*p == '-')
            continue;
        int v = hexval((unsigned char)*p);
        if (v < 0)
            return;
        if (n % 2 == 0)
            id[n / 2] = (uint8_t)(v << 4);
        else
            id[n / 2] |= (uint8_t)v;
        n++;
    }
    if (n == 32)
        memcpy(out, id, 16);
}

nixl_status_t samehost_ident_self(const nixl_host_services_t *host, const char *who, samehost_ident_t *out)
{
    samehost_ident_t id;
    struct stat st;
    memset(&id, 0, sizeof(id));
    id.pid = (uint32_t)getpid();
    id.uid = (uint32_t)getuid();
    if (samehost_proc_start_time(getpid(), &id.start_time) != 0) {
        NIXL_BE_ERROR(host, "%s: cannot read our start time from /proc/self/stat: %s (is /proc mounted?)", who,
                  strerror(errno));
        return NIXL_ERR_BACKEND;
    }
    if (stat("/proc/self/ns/pid", &st) != 0) {
        NIXL_BE_ERROR(host, "%s: cannot stat /proc/self/ns/pid: %s", who, strerror(errno));
        return NIXL_ERR_BACKEND;
    }
    id.pidns_dev = (uint64_t)st.st_dev;
    id.pidns_ino = (uint64_t)st.st_ino;
    read_boot_id(id.boot_id);
    *out = id;
    return NIXL_OK;
}

void samehost_ident_pack(const samehost_ident_t *id, uint8_t *p)
{
    nixl_put_u32(p, id->pid);
    nixl_put_u32(p + 4, id->uid);
    nixl_put_u64(p + 8, id->start_time);
    nixl_put_u64(p + 16, id->pidns_dev);
    nixl_put_u64(p + 24, id->pidns_ino);
    memcpy(p + 32, id->boot_id, 16);
}

void samehost_ident_unpack(const uint8_t *p, samehost_ident_t *id)
{
    id->pid = nixl_get_u32(p);
    id->uid = nixl_get_u32(p + 4);
    id->start_time = nixl_get_u64(p + 8);
    id->pidns_dev = nixl_get_u64(p + 16);
    id->pidns_ino = nixl_get_u64(p + 24);
    memcpy(id->boot_id, p + 32, 16);
}

nixl_status_t samehost_ident_reachable(const nixl_host_services_t *host, const char *who, const char *peer_name,
                                       const samehost_ident_t *self, const samehost_ident_t *peer,
                                       int can_ptrace_any)
{
    if (peer->pid == 0 || peer->pid > INT32_MAX) {
        NIXL_BE_ERROR(host, "%s: conn info of peer %s names pid %u", who, peer_name, peer->pid);
        return NIXL_ERR_BAD_METADATA;
    }
    if (memcmp(peer->boot_id, self->boot_id, 16) != 0) {
        NIXL_BE_DEBUG(host, "%s: peer %s runs under another kernel boot: not reachable over %s", who, peer_name, who);
        return NIXL_ERR_NO_PATH;
    }
    if (peer->pidns_dev != self->pidns_dev || peer->pidns_ino != self->pidns_ino) {
        NIXL_BE_INFO(host, "%s: peer %s is in another pid namespace: not reachable over %s", who, peer_name, who);
        return NIXL_ERR_NO_PATH;
    }
    if (peer->uid != self->uid && !can_ptrace_any) {
        NIXL_BE_INFO(host, "%s: peer %s runs as uid %u, we as uid %u without CAP_SYS_PTRACE: the kernel would refuse "
                       "to let us reach its memory",
                 who, peer_name, peer->uid, self->uid);
        return NIXL_ERR_NO_PATH;
    }
    return NIXL_OK;
}

/* 1 when the process behind pidfd has exited. */
static int pidfd_exited(int pidfd)
{
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    int n;
    do
        n = poll(&pfd, 1, 0);
    while (n < 0 && errno == EINTR);
    return n > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR));
}

nixl_status_t samehost_proc_open(const nixl_host_services_t *host, const char *who, const char *peer_name,
                                 pid_t pid, uint64_t start_time, samehost_proc_t *out)
{
    samehost_proc_t p;
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", peer_name ? peer_name : "?");
    p.pid = pid;
    p.start_time = start_time;
    p.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (p.pidfd < 0) {
        if (errno == ESRCH) {
            NIXL_BE_ERROR(host, "%s: peer %s (pid %d) has exited", who, p.name, (int)pid);
            return NIXL_ERR_PEER_GONE;
        }
        if (errno != ENOSYS) {
            NIXL_BE_ERROR(host, "%s: pidfd_open(%d) for peer %s failed: %s", who, (int)pid, p.name, strerror(errno));
            return NIXL_ERR_BACKEND;
        }
        /* Kernel < 5.3: go on without; liveness comes from start time checks. */
    }
    /* Checked after pidfd_open: if it matches now, the pidfd is that process. */
    uint64_t now_start;
    if (samehost_proc_start_time(pid, &now_start) != 0 || now_start != start_time ||
        (p.pidfd >= 0 && pidfd_exited(p.pidfd))) {
        NIXL_BE_ERROR(host, "%s: peer %s (pid %d) is gone: the process exited or its pid was reused", who, p.name,
                  (int)pid);
        if (p.pidfd >= 0)
            close(p.pidfd);
        return NIXL_ERR_PEER_GONE;
    }
    atomic_init(&p.gone_logged, 0);
    atomic_init(&p.next_check_ns, 0);
    *out = p;
    return NIXL_OK;
}

void samehost_proc_close(samehost_proc_t *p)
{
    if (p->pidfd >= 0)
        close(p->pidfd);
    p->pidfd = -1;
}

nixl_status_t samehost_proc_alive(const nixl_host_services_t *host, const char *who, samehost_proc_t *p, int always)
{
    /* A poll() per post would be the largest cost of a small request: look
     * at most once per SAMEHOST_LIVENESS_NS per peer.  A peer that died in
     * between is still caught by what the backend does next (the
     * notification finds no socket, CMA fails with ESRCH). */
    uint64_t now = nixl_now_ns();
    if (!always && now < atomic_load_explicit(&p->next_check_ns, memory_order_relaxed))
        return NIXL_OK;
    if (nixl_likely(p->pidfd >= 0)) {
        if (nixl_likely(!pidfd_exited(p->pidfd))) {
            atomic_store_explicit(&p->next_check_ns, now + SAMEHOST_LIVENESS_NS, memory_order_relaxed);
            return NIXL_OK;
        }
    } else {
        uint64_t t;
        if (samehost_proc_start_time(p->pid, &t) == 0 && t == p->start_time) {
            atomic_store_explicit(&p->next_check_ns, now + SAMEHOST_LIVENESS_NS, memory_order_relaxed);
            return NIXL_OK;
        }
    }
    if (!atomic_exchange(&p->gone_logged, 1))
        NIXL_BE_ERROR(host, "%s: peer %s (pid %d) has exited", who, p->name, (int)p->pid);
    return NIXL_ERR_PEER_GONE;
}

static int has_cap(int cap)
{
    char buf[4096];
    if (samehost_read_file("/proc/self/status", buf, sizeof(buf)) <= 0)
        return 0;
    const char *p = strstr(buf, "\nCapEff:");
    if (!p)
        return 0;
    unsigned long long eff = strtoull(p + 8, NULL, 16);
    return (eff >> cap) & 1;
}

void samehost_ptrace_setup(const nixl_host_services_t *host, const char *who, const char *why, int *scope_out,
                           int *can_ptrace_any_out)
{
    char buf[32];
    int scope = samehost_read_file("/proc/sys/kernel/yama/ptrace_scope", buf, sizeof(buf)) > 0 ? atoi(buf) : -1;
    int cap = has_cap(SAMEHOST_CAP_SYS_PTRACE);
    if (scope == 1) {
        /* Scope 1 lets only ancestors attach; peers are not our ancestors. */
        if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
            NIXL_BE_INFO(host, "%s: kernel.yama.ptrace_scope is 1: allowed any process of this user to attach to us "
                           "(PR_SET_PTRACER_ANY) so same-host peers can %s",
                     who, why);
        else
            NIXL_BE_WARN(host, "%s: prctl(PR_SET_PTRACER_ANY) failed: %s; peers that are not our ancestors will get "
                           "NIXL_ERR_PERMISSION when they %s",
                     who, strerror(errno), why);
    } else if (scope >= 2) {
        NIXL_BE_WARN(host, "%s: kernel.yama.ptrace_scope is %d: peers need CAP_SYS_PTRACE to %s%s", who, scope, why,
                 cap ? " (we have it)" : " (we lack it)");
    }
    *scope_out = scope;
    *can_ptrace_any_out = cap;
}
