/*
 * samehost_proc.c - whether a peer process can be reached and whether it
 * still runs, for the backends that reach peers on this host (shm,
 * cuda_ipc).
 *
 * Who the peer is comes from the core (nixl_be_peer_t, computed from the
 * identity in its metadata): the same kernel and pid namespace make its
 * pid a pid here, and the pid with its start time survives pid reuse.  We
 * hold a pidfd on it (Linux 5.3+), checked against that start time, so a
 * post can tell in one poll() that it exited; without pidfds the start
 * time is re-read instead.
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

nixl_status_t samehost_peer_reachable(const nixl_host_services_t *host, const char *who, const nixl_be_peer_t *peer,
                                      int can_ptrace_any)
{
    if (!peer->same_host) {
        NIXL_BE_DEBUG(host, "%s: peer %s runs on another host (or kernel boot): not reachable over %s", who,
                      peer->name, who);
        return NIXL_ERR_NO_PATH;
    }
    if (!peer->same_pidns) {
        NIXL_BE_INFO(host, "%s: peer %s is in another pid namespace (or did not say which): not reachable over %s",
                     who, peer->name, who);
        return NIXL_ERR_NO_PATH;
    }
    if (peer->pid == 0 || peer->pid > INT32_MAX) {
        NIXL_BE_ERROR(host, "%s: metadata of peer %s names pid %u", who, peer->name, peer->pid);
        return NIXL_ERR_BAD_METADATA;
    }
    if (!peer->same_uid && !can_ptrace_any) {
        NIXL_BE_INFO(host, "%s: peer %s runs as uid %u, we as uid %u without CAP_SYS_PTRACE: the kernel would refuse "
                           "to let us reach its memory",
                     who, peer->name, peer->uid, (unsigned)getuid());
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
    if (nixl_proc_start_time((uint32_t)pid, &now_start) != 0 || now_start != start_time ||
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
        if (nixl_proc_start_time((uint32_t)p->pid, &t) == 0 && t == p->start_time) {
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
