/*
 * reg_peers.c - counting the agents of this host that register memory at
 * the same moment (reg_peers.h), through one small file per user.
 *
 * The file is a header and NIXL_REG_PEERS_SLOTS slots {pid, start time,
 * token}.  Every read-modify-write of it holds flock(); an agent keeps its
 * slot for one registration batch only, so the count is "agents registering
 * now", not "agents alive".  A process that dies mid-batch leaves its slot
 * behind: a slot whose pid is gone, or whose pid now belongs to a process
 * started at another time (pid reuse), is not counted and is reclaimed by
 * the next agent that joins.  Locks are only ever tried for a bounded time:
 * a stuck holder costs us the count, never a hang.
 */
#include "core/reg_peers.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/config.h"
#include "util/log.h"
#include "nixl/backend_util.h"
#include "util/time.h"

#define PEERS_LOCK_MS 20
#define PEERS_LEAVE_LOCK_MS 200

typedef nixl_reg_peers_slot_t peers_slot_t;
typedef nixl_reg_peers_table_t peers_table_t;

static uint64_t peers_token_counter; /* atomic */

uint64_t nixl_reg_peers_start_time(int pid)
{
    uint64_t t;
    return nixl_proc_start_time((uint32_t)pid, &t) == 0 ? t : 0;
}

/* 1 while the agent that wrote the slot can still be registering. */
static int slot_alive(const peers_slot_t *s)
{
    if (s->pid == 0)
        return 0;
    if (kill((pid_t)s->pid, 0) != 0 && errno == ESRCH)
        return 0;
    uint64_t start = nixl_reg_peers_start_time((pid_t)s->pid);
    /* Unreadable /proc (hidepid): trust kill(). */
    return start == 0 || start == s->start;
}

/* flock, tried for at most ms milliseconds.  0 when held. */
static int peers_lock(int fd, int op, int ms)
{
    uint64_t deadline = nixl_now_ns() + (uint64_t)ms * 1000000ull;
    const struct timespec nap = {0, 200000};
    for (;;) {
        if (flock(fd, op | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        if (nixl_now_ns() >= deadline)
            return -1;
        nanosleep(&nap, NULL);
    }
}

static int table_valid(const peers_table_t *t)
{
    return t->magic == NIXL_REG_PEERS_MAGIC && t->version == NIXL_REG_PEERS_VERSION &&
           t->nslots == NIXL_REG_PEERS_SLOTS && t->slot_size == sizeof(peers_slot_t);
}

static int table_read(int fd, peers_table_t *t)
{
    ssize_t n = pread(fd, t, sizeof(*t), 0);
    if (n == 0) {
        /* A new file: ours to lay out. */
        memset(t, 0, sizeof(*t));
        t->magic = NIXL_REG_PEERS_MAGIC;
        t->version = NIXL_REG_PEERS_VERSION;
        t->nslots = NIXL_REG_PEERS_SLOTS;
        t->slot_size = sizeof(peers_slot_t);
        return 0;
    }
    return n == (ssize_t)sizeof(*t) && table_valid(t) ? 0 : -1;
}

void nixl_reg_peers_join(nixl_reg_peers_t *p)
{
    char path[256];
    const char *v = nixl_cfg_get("NIXL_REG_PEERS_FILE");
    p->fd = -1;
    p->slot = -1;
    p->token = __atomic_add_fetch(&peers_token_counter, 1, __ATOMIC_RELAXED);
    if (v && v[0])
        snprintf(path, sizeof(path), "%s", v);
    else
        snprintf(path, sizeof(path), "/dev/shm/nixl-reg-%u", (unsigned)geteuid());

    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        NIXL_DEBUG("registration peers file %s: %s; counting this agent only", path, strerror(errno));
        return;
    }
    struct stat st;
    /* Someone else's file in a shared directory is not to be trusted. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        NIXL_INFO("registration peers file %s is not a regular file of ours; counting this agent only", path);
        goto err_close;
    }
    if (peers_lock(fd, LOCK_EX, PEERS_LOCK_MS) != 0) {
        NIXL_DEBUG("registration peers file %s stays locked; counting this agent only", path);
        goto err_close;
    }
    peers_table_t *t = malloc(sizeof(*t));
    if (!t)
        goto err_unlock;
    if (table_read(fd, t) != 0) {
        NIXL_INFO("registration peers file %s has another layout; counting this agent only", path);
        goto err_free;
    }
    pid_t self = getpid();
    int mine = -1;
    for (int i = 0; i < NIXL_REG_PEERS_SLOTS; i++) {
        if (t->slot[i].pid && !slot_alive(&t->slot[i]))
            memset(&t->slot[i], 0, sizeof(t->slot[i])); /* a dead agent's slot */
        if (mine < 0 && t->slot[i].pid == 0)
            mine = i;
    }
    if (mine >= 0)
        t->slot[mine] =
            (peers_slot_t){.pid = (uint32_t)self, .start = nixl_reg_peers_start_time(self), .token = p->token};
    if (pwrite(fd, t, sizeof(*t), 0) != (ssize_t)sizeof(*t)) {
        NIXL_DEBUG("registration peers file %s: write failed; counting this agent only", path);
        goto err_free;
    }
    free(t);
    flock(fd, LOCK_UN);
    p->fd = fd;
    p->slot = mine;
    return;

err_free:
    free(t);
err_unlock:
    flock(fd, LOCK_UN);
err_close:
    close(fd);
}

unsigned nixl_reg_peers_count(nixl_reg_peers_t *p)
{
    if (p->fd < 0)
        return 1;
    peers_table_t *t = malloc(sizeof(*t));
    if (!t)
        return 1;
    unsigned n = 0;
    if (peers_lock(p->fd, LOCK_SH, PEERS_LOCK_MS) != 0)
        goto out;
    int ok = pread(p->fd, t, sizeof(*t), 0) == (ssize_t)sizeof(*t) && table_valid(t);
    flock(p->fd, LOCK_UN);
    if (!ok)
        goto out;
    for (int i = 0; i < NIXL_REG_PEERS_SLOTS; i++)
        n += (unsigned)slot_alive(&t->slot[i]);
    if (p->slot < 0)
        n++; /* no slot was free: we are not in the table */
out:
    free(t);
    return n ? n : 1;
}

void nixl_reg_peers_leave(nixl_reg_peers_t *p)
{
    if (p->fd < 0)
        return;
    if (p->slot >= 0 && peers_lock(p->fd, LOCK_EX, PEERS_LEAVE_LOCK_MS) == 0) {
        peers_slot_t s;
        off_t off = (off_t)(offsetof(peers_table_t, slot) + (size_t)p->slot * sizeof(s));
        if (pread(p->fd, &s, sizeof(s), off) == (ssize_t)sizeof(s) && s.token == p->token &&
            s.pid == (uint32_t)getpid()) {
            memset(&s, 0, sizeof(s));
            if (pwrite(p->fd, &s, sizeof(s), off) != (ssize_t)sizeof(s))
                NIXL_DEBUG("registration peers file: could not free slot %d", p->slot);
        }
        flock(p->fd, LOCK_UN);
    } else if (p->slot >= 0) {
        /* Counted by the others until this process exits; harmless. */
        NIXL_DEBUG("registration peers file stays locked; slot %d not freed", p->slot);
    }
    close(p->fd);
    p->fd = -1;
    p->slot = -1;
}
