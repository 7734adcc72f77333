/*
 * shm.c - the shm backend: same host, DRAM, between processes (and between
 * agents of one process).
 *
 * This file holds the ops table and its parameters, the instance
 * (create/destroy), who this process is (conn_pack) and how a peer is
 * recognized (peer_load): same kernel boot, same pid namespace, and a pidfd
 * whose process start time matches, so a reused pid is never mistaken for
 * the peer.  Memory, transfers, workers and notifications live in the other
 * shm_*.c files (see shm_int.h).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm.h"
#include "shm_int.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define SHM_CAP_SYS_PTRACE 19
#define SHM_THREADS_MAX 64

/* conn info: magic, version, socket-name length, then fixed fields, then
 * the socket name.  Little-endian. */
#define SHM_CONN_MAGIC 0x434d4853u /* "SHMC" */
#define SHM_CONN_VERSION 1
#define SHM_CONN_FIXED 56

static const nixl_param_info_t shm_params[] = {
    {"threads", "auto",
     "worker threads copying large requests: auto = min(4, online cores - 1); 0 = no pool, every copy runs inside post"},
    {"inline_max", "65536", "requests of at most this many bytes are copied inside post (K/M/G suffixes)"},
    {"chunk", "1048576", "bytes per work item of the worker pool; large descriptors are split at this size"},
    {"map", "1", "1: map a peer's shared-file memory and memcpy (shm.map); 0: always process_vm_* (shm.cma)"},
};
#define SHM_NUM_PARAMS (sizeof(shm_params) / sizeof(shm_params[0]))

int shm_read_file(const char *path, char *buf, size_t cap)
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

/* Field 22 of /proc/<pid>/stat.  The command name (field 2) may hold spaces
 * and parentheses, so fields are counted from the last ')'. */
int shm_proc_start_time(pid_t pid, uint64_t *out)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (shm_read_file(path, buf, sizeof(buf)) <= 0)
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

static int shm_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* boot_id is a UUID "xxxxxxxx-xxxx-..."; zero when unreadable. */
static void shm_read_boot_id(uint8_t out[16])
{
    char buf[64];
    memset(out, 0, 16);
    if (shm_read_file("/proc/sys/kernel/random/boot_id", buf, sizeof(buf)) <= 0)
        return;
    uint8_t id[16];
    int n = 0;
    for (const char *p = buf; *p && *p != '\n' && n < 32; p++) {
        if (*p == '-')
            continue;
        int v = shm_hexval((unsigned char)*p);
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

static int shm_read_ptrace_scope(void)
{
    char buf[32];
    if (shm_read_file("/proc/sys/kernel/yama/ptrace_scope", buf, sizeof(buf)) <= 0)
        return -1;
    return atoi(buf);
}

static int shm_has_cap(int cap)
{
    char buf[4096];
    if (shm_read_file("/proc/self/status", buf, sizeof(buf)) <= 0)
        return 0;
    const char *p = strstr(buf, "\nCapEff:");
    if (!p)
        return 0;
    unsigned long long eff = strtoull(p + 8, NULL, 16);
    return (eff >> cap) & 1;
}

static nixl_status_t shm_self_ident(shm_be_t *be)
{
    shm_ident_t *id = &be->self;
    struct stat st;
    id->pid = (uint32_t)getpid();
    id->uid = (uint32_t)getuid();
    if (shm_proc_start_time(getpid(), &id->start_time) != 0) {
        SHM_ERROR(be, "cannot read our start time from /proc/self/stat: %s (is /proc mounted?)", strerror(errno));
        return NIXL_ERR_BACKEND;
    }
    if (stat("/proc/self/ns/pid", &st) != 0) {
        SHM_ERROR(be, "cannot stat /proc/self/ns/pid: %s", strerror(errno));
        return NIXL_ERR_BACKEND;
    }
    id->pidns_dev = (uint64_t)st.st_dev;
    id->pidns_ino = (uint64_t)st.st_ino;
    shm_read_boot_id(id->boot_id);
    return NIXL_OK;
}

/* ---- parameters ---- */

/* Decimal, optional K/M/G (powers of 1024), nothing else. */
static int shm_parse_size(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (!s || !isdigit((unsigned char)*p))
        return -1;
    for (; isdigit((unsigned char)*p); p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*p) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        return -1;
    }
    if (shift) {
        if (p[1] != '\0' || v > (UINT64_MAX >> shift))
            return -1;
        v <<= shift;
    }
    *out = v;
    return 0;
}

static int shm_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    if (!s)
        return -1;
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

static const char *shm_param_value(const nixl_param_t *params, size_t n, size_t idx)
{
    const char *v = params ? nixl_param_find(params, n, shm_params[idx].key) : NULL;
    return v ? v : shm_params[idx].default_value;
}

static nixl_status_t shm_parse_params(shm_be_t *be, const nixl_param_t *params, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k;
        for (k = 0; k < SHM_NUM_PARAMS; k++)
            if (params[i].key && strcmp(params[i].key, shm_params[k].key) == 0)
                break;
        if (k == SHM_NUM_PARAMS) {
            SHM_ERROR(be, "shm: unknown parameter \"%s\" (known: threads, inline_max, chunk, map)",
                      params[i].key ? params[i].key : "(null)");
            return NIXL_ERR_INVALID_PARAM;
        }
    }

    uint64_t threads, inline_max, chunk;
    int map;
    const char *v = shm_param_value(params, n, 0);
    int threads_auto = strcmp(v, "auto") == 0;
    if (!threads_auto && (shm_parse_size(v, &threads) != 0 || threads > SHM_THREADS_MAX)) {
        SHM_ERROR(be, "shm: threads=\"%s\" is not valid: expected auto or 0 to %d", v, SHM_THREADS_MAX);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = shm_param_value(params, n, 1);
    if (shm_parse_size(v, &inline_max) != 0) {
        SHM_ERROR(be, "shm: inline_max=\"%s\" is not valid: expected a byte count such as 65536 or 64K", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = shm_param_value(params, n, 2);
    if (shm_parse_size(v, &chunk) != 0 || chunk < 4096 || chunk > (1ull << 30)) {
        SHM_ERROR(be, "shm: chunk=\"%s\" is not valid: expected a byte count from 4K to 1G", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    v = shm_param_value(params, n, 3);
    if (shm_parse_bool(v, &map) != 0) {
        SHM_ERROR(be, "shm: map=\"%s\" is not valid: expected 0 or 1", v);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (threads_auto) {
        /* Leave one core to the thread that posts and polls: on a small box
         * a worker per core would fight it for the CPU. */
        long cores = sysconf(_SC_NPROCESSORS_ONLN) - 1;
        threads = cores < 1 ? 0 : (uint64_t)(cores < 4 ? cores : 4);
    }
    be->threads = (unsigned)threads;
    be->inline_max = inline_max;
    be->chunk = chunk;
    be->map_enabled = map;
    return NIXL_OK;
}

/* ---- instance ---- */

static int shm_host_usable(const nixl_host_services_t *host)
{
    size_t need = offsetof(nixl_host_services_t, agent_name) + sizeof(host->agent_name);
    return host && host->abi_version >= 1 && host->struct_size >= need && host->log_enabled && host->log &&
           host->fallback && host->notif_deliver;
}

static void shm_setup_ptrace(shm_be_t *be)
{
    be->ptrace_scope = shm_read_ptrace_scope();
    be->can_ptrace_any = shm_has_cap(SHM_CAP_SYS_PTRACE);
    if (be->ptrace_scope == 1) {
        /* Scope 1 lets only ancestors attach; peers are not our ancestors. */
        if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
            SHM_INFO(be, "shm: kernel.yama.ptrace_scope is 1: allowed any process of this user to read/write "
                         "our memory with process_vm_* (PR_SET_PTRACER_ANY) so same-host peers can use CMA");
        else
            SHM_WARN(be, "shm: prctl(PR_SET_PTRACER_ANY) failed: %s; peers that are not our ancestors will get "
                         "NIXL_ERR_PERMISSION on shm.cma",
                     strerror(errno));
    } else if (be->ptrace_scope >= 2) {
        SHM_WARN(be, "shm: kernel.yama.ptrace_scope is %d: process_vm_* between processes needs CAP_SYS_PTRACE%s; "
                     "memory from nixl_mem_alloc still goes over shm.map",
                 be->ptrace_scope, be->can_ptrace_any ? " (we have it)" : " (we lack it)");
    }
}

static nixl_status_t shm_create(const nixl_host_services_t *host, const nixl_param_t *params, size_t num_params,
                                void **be_out)
{
    nixl_status_t st;
    if (!shm_host_usable(host) || !be_out)
        return NIXL_ERR_INVALID_PARAM;
    shm_be_t *be = calloc(1, sizeof(*be));
    if (!be)
        return NIXL_ERR_NO_MEMORY;
    be->host = host;
    be->sock = -1;
    st = shm_parse_params(be, params, num_params);
    if (st != NIXL_OK)
        goto err_free;

    const char *name = host->agent_name ? host->agent_name : "";
    be->agent_name_len = strlen(name);
    if (be->agent_name_len > SHM_NAME_MAX) {
        SHM_ERROR(be, "shm: agent name is %zu bytes, at most %d allowed", be->agent_name_len, SHM_NAME_MAX);
        st = NIXL_ERR_INVALID_PARAM;
        goto err_free;
    }
    if (be->agent_name_len == 0) {
        /* Receivers drop notifications without a sender. */
        SHM_ERROR(be, "shm: the agent has no name");
        st = NIXL_ERR_INVALID_PARAM;
        goto err_free;
    }
    memcpy(be->agent_name, name, be->agent_name_len + 1);
    be->page_size = sysconf(_SC_PAGESIZE);
    if (be->page_size <= 0)
        be->page_size = 4096;

    st = shm_self_ident(be);
    if (st != NIXL_OK)
        goto err_free;
    shm_setup_ptrace(be);

    if (pthread_mutex_init(&be->reg_lock, NULL) != 0) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_free;
    }
    shm_maps_init(&be->maps);

    st = shm_notif_open(be);
    if (st != NIXL_OK)
        goto err_maps;
    if (be->threads > 0) {
        st = shm_pool_create(be, be->threads, &be->pool);
        if (st != NIXL_OK)
            goto err_notif;
    }
    SHM_DEBUG(be, "shm: created: threads %u%s, inline_max %llu, chunk %llu, map %d, socket @%s", be->threads,
              be->pool ? "" : " (no pool)", (unsigned long long)be->inline_max, (unsigned long long)be->chunk,
              be->map_enabled, be->sock_name);
    *be_out = be;
    return NIXL_OK;

err_notif:
    shm_notif_close(be);
err_maps:
    shm_maps_fini(&be->maps);
    pthread_mutex_destroy(&be->reg_lock);
err_free:
    free(be);
    return st;
}

static void shm_destroy(void *bev)
{
    shm_be_t *be = bev;
    if (!be)
        return;
    if (be->pool)
        shm_pool_destroy(be->pool);
    shm_notif_close(be);
    /* Registrations should be gone; close what a careless core left. */
    while (be->files) {
        shm_file_t *f = be->files;
        be->files = f->next;
        close(f->fd);
        free(f);
    }
    shm_maps_fini(&be->maps);
    pthread_mutex_destroy(&be->reg_lock);
    free(be);
}

/* ---- identity and peers ---- */

static nixl_status_t shm_conn_pack(void *bev, void *buf, size_t *len)
{
    shm_be_t *be = bev;
    size_t name_len = strlen(be->sock_name);
    size_t need = SHM_CONN_FIXED + name_len;
    if (!len)
        return NIXL_ERR_NULL;
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    shm_put_u32(p, SHM_CONN_MAGIC);
    shm_put_u16(p + 4, SHM_CONN_VERSION);
    shm_put_u16(p + 6, (uint16_t)name_len);
    shm_put_u32(p + 8, be->self.pid);
    shm_put_u32(p + 12, be->self.uid);
    shm_put_u64(p + 16, be->self.start_time);
    shm_put_u64(p + 24, be->self.pidns_dev);
    shm_put_u64(p + 32, be->self.pidns_ino);
    memcpy(p + 40, be->self.boot_id, 16);
    memcpy(p + SHM_CONN_FIXED, be->sock_name, name_len);
    *len = need;
    return NIXL_OK;
}

static int shm_sock_name_valid(const uint8_t *s, size_t n)
{
    if (n == 0 || n > SHM_SOCK_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum(s[i]) || s[i] == '-' || s[i] == '.' || s[i] == '_'))
            return 0;
    return 1;
}

/* 1 when the process behind pidfd has exited. */
static int shm_pidfd_exited(int pidfd)
{
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    int n;
    do
        n = poll(&pfd, 1, 0);
    while (n < 0 && errno == EINTR);
    return n > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR));
}

static nixl_status_t shm_peer_load(void *bev, const char *peer_name, const void *conn, size_t conn_len,
                                   void **peer_out)
{
    shm_be_t *be = bev;
    const uint8_t *p = conn;
    const char *who = peer_name ? peer_name : "?";
    nixl_status_t st;

    if (!peer_out)
        return NIXL_ERR_NULL;
    if (!p || conn_len < SHM_CONN_FIXED) {
        SHM_ERROR(be, "shm: conn info of peer %s is %zu bytes, at least %d expected", who, conn_len,
                  SHM_CONN_FIXED);
        return NIXL_ERR_BAD_METADATA;
    }
    if (shm_get_u32(p) != SHM_CONN_MAGIC) {
        SHM_ERROR(be, "shm: conn info of peer %s has a bad magic number", who);
        return NIXL_ERR_BAD_METADATA;
    }
    if (shm_get_u16(p + 4) != SHM_CONN_VERSION) {
        SHM_ERROR(be, "shm: conn info of peer %s is version %u, we speak %u", who, shm_get_u16(p + 4),
                  SHM_CONN_VERSION);
        return NIXL_ERR_MD_VERSION;
    }
    size_t name_len = shm_get_u16(p + 6);
    if (conn_len != SHM_CONN_FIXED + name_len || !shm_sock_name_valid(p + SHM_CONN_FIXED, name_len)) {
        SHM_ERROR(be, "shm: conn info of peer %s is malformed (%zu bytes, socket name of %zu)", who, conn_len,
                  name_len);
        return NIXL_ERR_BAD_METADATA;
    }
    uint32_t pid = shm_get_u32(p + 8), uid = shm_get_u32(p + 12);
    uint64_t start_time = shm_get_u64(p + 16);
    if (pid == 0 || pid > INT32_MAX) {
        SHM_ERROR(be, "shm: conn info of peer %s names pid %u", who, pid);
        return NIXL_ERR_BAD_METADATA;
    }
    if (memcmp(p + 40, be->self.boot_id, 16) != 0) {
        SHM_DEBUG(be, "shm: peer %s runs under another kernel boot: not reachable over shm", who);
        return NIXL_ERR_NO_PATH;
    }
    if (shm_get_u64(p + 24) != be->self.pidns_dev || shm_get_u64(p + 32) != be->self.pidns_ino) {
        SHM_INFO(be, "shm: peer %s is in another pid namespace: not reachable over shm", who);
        return NIXL_ERR_NO_PATH;
    }
    if (uid != be->self.uid && !be->can_ptrace_any) {
        SHM_INFO(be, "shm: peer %s runs as uid %u, we as uid %u without CAP_SYS_PTRACE: the kernel would refuse "
                     "both shm paths",
                 who, uid, be->self.uid);
        return NIXL_ERR_NO_PATH;
    }

    shm_peer_t *peer = calloc(1, sizeof(*peer));
    if (!peer)
        return NIXL_ERR_NO_MEMORY;
    snprintf(peer->name, sizeof(peer->name), "%s", who);
    peer->pid = (pid_t)pid;
    peer->start_time = start_time;
    peer->sock = -1;
    peer->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (peer->pidfd < 0) {
        if (errno == ESRCH) {
            SHM_ERROR(be, "shm: peer %s (pid %u) has exited", who, pid);
            st = NIXL_ERR_PEER_GONE;
            goto err_free;
        }
        if (errno != ENOSYS) {
            SHM_ERROR(be, "shm: pidfd_open(%u) for peer %s failed: %s", pid, who, strerror(errno));
            st = NIXL_ERR_BACKEND;
            goto err_free;
        }
        /* Kernel < 5.3: go on without; liveness comes from start time checks. */
    }
    /* Checked after pidfd_open: if it matches now, the pidfd is that process. */
    uint64_t now_start;
    if (shm_proc_start_time(peer->pid, &now_start) != 0 || now_start != start_time ||
        (peer->pidfd >= 0 && shm_pidfd_exited(peer->pidfd))) {
        SHM_ERROR(be, "shm: peer %s (pid %u) is gone: the process exited or its pid was reused", who, pid);
        st = NIXL_ERR_PEER_GONE;
        goto err_pidfd;
    }
    st = shm_notif_peer_open(be, peer, (const char *)p + SHM_CONN_FIXED, name_len);
    if (st != NIXL_OK)
        goto err_pidfd;
    *peer_out = peer;
    return NIXL_OK;

err_pidfd:
    if (peer->pidfd >= 0)
        close(peer->pidfd);
err_free:
    free(peer);
    return st;
}

static void shm_peer_unload(void *bev, void *peerv)
{
    shm_peer_t *peer = peerv;
    (void)bev;
    if (!peer)
        return;
    shm_notif_peer_close(peer);
    if (peer->pidfd >= 0)
        close(peer->pidfd);
    free(peer);
}

/* NIXL_OK while the peer runs; NIXL_ERR_PEER_GONE once it exited. */
nixl_status_t shm_peer_check(shm_be_t *be, shm_peer_t *peer)
{
    /* A poll() per post would be the largest cost of a small request: look
     * at most once per SHM_LIVENESS_NS per peer.  A peer that died in
     * between is still caught: CMA fails with ESRCH, and the notification
     * finds no socket. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (now < atomic_load_explicit(&peer->next_check_ns, memory_order_relaxed))
        return NIXL_OK;
    if (shm_likely(peer->pidfd >= 0)) {
        if (shm_likely(!shm_pidfd_exited(peer->pidfd))) {
            atomic_store_explicit(&peer->next_check_ns, now + SHM_LIVENESS_NS, memory_order_relaxed);
            return NIXL_OK;
        }
    } else {
        uint64_t t;
        if (shm_proc_start_time(peer->pid, &t) == 0 && t == peer->start_time) {
            atomic_store_explicit(&peer->next_check_ns, now + SHM_LIVENESS_NS, memory_order_relaxed);
            return NIXL_OK;
        }
    }
    if (!atomic_exchange(&peer->gone_logged, 1))
        SHM_ERROR(be, "shm: peer %s (pid %d) has exited", peer->name, (int)peer->pid);
    return NIXL_ERR_PEER_GONE;
}

static const nixl_backend_ops_t shm_ops = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_backend_ops_t),
    .name = "shm",
    .description = "same host, DRAM: maps a peer's shared-file memory (shm.map) or copies with "
                   "process_vm_readv/writev (shm.cma)",
    .mem_types = NIXL_MEM_BIT(NIXL_MEM_DRAM),
    .caps = NIXL_CAP_LOCAL | NIXL_CAP_SAME_HOST | NIXL_CAP_NOTIF | NIXL_CAP_PROGRESS,
    .params = shm_params,
    .num_params = SHM_NUM_PARAMS,
    .create = shm_create,
    .destroy = shm_destroy,
    .reg = shm_reg,
    .dereg = shm_dereg,
    .rkey_pack = shm_rkey_pack,
    .conn_pack = shm_conn_pack,
    .peer_load = shm_peer_load,
    .peer_unload = shm_peer_unload,
    .rkey_load = shm_rkey_load,
    .rkey_unload = shm_rkey_unload,
    .xfer_prepare = shm_xfer_prepare,
    .xfer_post = shm_xfer_post,
    .xfer_status = shm_xfer_status,
    .xfer_release = shm_xfer_release,
    .notif_send = shm_notif_send,
    .progress = shm_progress,
};

const nixl_backend_ops_t *nixl_backend_shm_ops(void)
{
    return &shm_ops;
}

#ifndef NIXL_BUILTIN_SHM
__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void);

__attribute__((visibility("default"))) const nixl_backend_ops_t *nixl_backend_get_ops(void)
{
    return &shm_ops;
}
#endif
