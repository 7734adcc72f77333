/*
 * reg_pool.c - the registration worker pool (reg_pool.h).
 *
 * Registering memory is a start-up cost users wait on, and its cost is in
 * the kernel and the NIC driver (pinning pages, building translation
 * tables), so some parallelism pays.  Unbounded parallelism does not: one
 * thread per buffer put 1,100+ threads on a node whose 8 processes
 * registered at once (workloads.md), and the best cap measured there was
 * near cores / processes.  So a batch gets at most N workers, the calling
 * thread being one, made for the batch and joined before it returns.
 *
 * Jobs are handed out in batch order under one mutex: a worker takes the
 * first job not started whose lane is free (a serial lane is busy while one
 * of its jobs runs), sleeps when only busy lanes have jobs left, and leaves
 * when none are left.  Jobs are long (a system call at least), so one lock
 * round per job costs nothing that shows.
 */
#include "core/reg_pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/config.h"
#include "util/log.h"
#include "util/time.h"

/* How often a batch asks whether other agents started registering. */
#define POOL_REFRESH_NS (5ull * 1000 * 1000)

typedef struct pool {
    const nixl_reg_batch_t *b;
    pthread_mutex_t lock;
    pthread_cond_t lane_freed;
    unsigned char *started; /* per job */
    size_t first;           /* every job before it has started */
    uint32_t busy;          /* serial lanes running a job */
    unsigned cap;           /* workers numbered >= cap leave */
    int refreshing;
    uint64_t next_refresh_ns;
} pool_t;

typedef struct pool_worker {
    pool_t *pool;
    unsigned id;
    pthread_t thread;
} pool_worker_t;

#define PICK_NONE ((size_t)-1) /* every job has started */
#define PICK_WAIT ((size_t)-2) /* the jobs left wait for a busy lane */

static unsigned job_lane(const nixl_reg_batch_t *b, size_t j)
{
    return b->lane ? b->lane[j] % NIXL_REG_POOL_LANES : 0;
}

/* Under p->lock. */
static size_t pool_pick(pool_t *p)
{
    const nixl_reg_batch_t *b = p->b;
    int waiting = 0;
    while (p->first < b->njobs && p->started[p->first])
        p->first++;
    for (size_t j = p->first; j < b->njobs; j++) {
        if (p->started[j])
            continue;
        uint32_t bit = 1u << job_lane(b, j);
        if ((b->serial_lanes & bit) && (p->busy & bit)) {
            waiting = 1;
            continue;
        }
        return j;
    }
    return waiting ? PICK_WAIT : PICK_NONE;
}

/* Under p->lock, which it drops while asking. */
static void pool_refresh_cap(pool_t *p)
{
    uint64_t now = nixl_now_ns();
    if (!p->b->cap_now || p->refreshing || now < p->next_refresh_ns)
        return;
    p->refreshing = 1;
    pthread_mutex_unlock(&p->lock);
    unsigned c = p->b->cap_now(p->b->cap_ctx);
    pthread_mutex_lock(&p->lock);
    if (c < 1)
        c = 1;
    if (c < p->cap) {
        NIXL_DEBUG("registration pool: other agents started registering; %u workers instead of %u", c, p->cap);
        p->cap = c;
    }
    p->refreshing = 0;
    p->next_refresh_ns = nixl_now_ns() + POOL_REFRESH_NS;
}

static void pool_work(pool_t *p, unsigned id)
{
    const nixl_reg_batch_t *b = p->b;
    pthread_mutex_lock(&p->lock);
    while (id < p->cap) {
        size_t j = pool_pick(p);
        if (j == PICK_NONE)
            break;
        if (j == PICK_WAIT) {
            pthread_cond_wait(&p->lane_freed, &p->lock);
            continue;
        }
        uint32_t bit = 1u << job_lane(b, j);
        int serial = (b->serial_lanes & bit) != 0;
        p->started[j] = 1;
        if (serial)
            p->busy |= bit;
        pthread_mutex_unlock(&p->lock);
        b->status[j] = b->run(b->ctx, j);
        pthread_mutex_lock(&p->lock);
        if (serial) {
            p->busy &= ~bit;
            pthread_cond_broadcast(&p->lane_freed);
        }
        pool_refresh_cap(p);
    }
    pthread_mutex_unlock(&p->lock);
}

static void *pool_thread(void *arg)
{
    pool_worker_t *w = arg;
    pool_work(w->pool, w->id);
    return NULL;
}

static void run_inline(const nixl_reg_batch_t *b)
{
    for (size_t j = 0; j < b->njobs; j++)
        b->status[j] = b->run(b->ctx, j);
}

void nixl_reg_pool_run(const nixl_reg_batch_t *b)
{
    unsigned workers = b->workers;
    if ((size_t)workers > b->njobs)
        workers = (unsigned)b->njobs;
    if (workers <= 1) {
        run_inline(b);
        return;
    }
    pool_t p = {.b = b, .cap = workers, .next_refresh_ns = nixl_now_ns() + POOL_REFRESH_NS};
    p.started = calloc(b->njobs, 1);
    pool_worker_t *w = calloc(workers, sizeof(*w));
    if (!p.started || !w) {
        NIXL_WARN("registration pool: out of memory; registering %zu jobs on the calling thread", b->njobs);
        free(p.started);
        free(w);
        run_inline(b);
        return;
    }
    pthread_mutex_init(&p.lock, NULL);
    pthread_cond_init(&p.lane_freed, NULL);

    /* Workers take no signals: the application's handlers run on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    unsigned made = 1; /* worker 0 is the calling thread */
    for (; made < workers; made++) {
        w[made].pool = &p;
        w[made].id = made;
        int rc = pthread_create(&w[made].thread, NULL, pool_thread, &w[made]);
        if (rc != 0) {
            NIXL_WARN("registration pool: could not start worker %u of %u (%s); going on with %u", made + 1,
                      workers, strerror(rc), made);
            break;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (made < workers) {
        /* Numbers past the made ones must not hold the cap up. */
        pthread_mutex_lock(&p.lock);
        p.cap = made;
        pthread_mutex_unlock(&p.lock);
    }

    pool_work(&p, 0);
    for (unsigned i = 1; i < made; i++)
        pthread_join(w[i].thread, NULL);

    pthread_cond_destroy(&p.lane_freed);
    pthread_mutex_destroy(&p.lock);
    free(w);
    free(p.started);
}

nixl_reg_cap_mode_t nixl_reg_cap_mode(unsigned *n_out)
{
    static int warned; /* atomic */
    const char *v = nixl_cfg_get("NIXL_REG_CONCURRENCY");
    if (!v || !v[0] || strcmp(v, "auto") == 0)
        return NIXL_REG_CAP_AUTO;
    unsigned long n = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9' && n <= 1000000; p++)
        n = n * 10 + (unsigned long)(*p - '0');
    if (*p || p == v || n > 1000000) {
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            NIXL_WARN("NIXL_REG_CONCURRENCY=\"%s\" is neither auto nor a number up to 1000000; using auto", v);
        return NIXL_REG_CAP_AUTO;
    }
    if (n == 0)
        return NIXL_REG_CAP_PER_BUFFER;
    *n_out = (unsigned)n;
    return NIXL_REG_CAP_FIXED;
}

/* The cores this host has, shared equally by the agents registering now;
 * but no more than this process may run on (a rank pinned to a few cores
 * gains nothing from more threads; ranks pinned to disjoint sets keep their
 * own share, since online / agents is then about each one's set).  At most
 * NIXL_REG_AUTO_MAX: past a few dozen threads a process's registrations
 * queue on the kernel's mm lock and the driver's per-domain locks, so more
 * only adds stacks and context switches (8 ranks on 192 cores did best at
 * 16).  At least 1: the caller's thread. */
unsigned nixl_reg_cap_auto(unsigned agents)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1)
        online = 1;
    long mine = online;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        mine = CPU_COUNT(&set);
    long share = online / (agents ? agents : 1);
    if (share > mine)
        share = mine;
    if (share > NIXL_REG_AUTO_MAX)
        share = NIXL_REG_AUTO_MAX;
    return share < 1 ? 1u : (unsigned)share;
}
