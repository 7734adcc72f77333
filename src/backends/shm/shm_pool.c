/*
 * shm_pool.c - worker threads that run the items of large requests.
 *
 * The queue holds requests, not items: a worker takes the head request,
 * claims its next item index and runs it, so submitting costs one lock and
 * no per-item linking, and workers share the oldest request first.  The
 * worker that finishes a request's last item sends its notification and
 * publishes its status (shm_req_finish).  'running' counts the workers that
 * still touch a request (item or finish); cancel waits for it to reach 0,
 * which takes at most the items running right now.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm_int.h"

struct shm_pool {
    shm_be_t *be;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a request was queued, or stop */
    pthread_cond_t idle; /* a worker let go of a canceled request */
    shm_req_t *head, *tail;
    int stop;
    unsigned nthreads;
    pthread_t *threads;
};

static void shm_pool_dequeue(shm_pool_t *pool, shm_req_t *r)
{
    shm_req_t **pp = &pool->head, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (!*pp)
        return;
    *pp = r->qnext;
    if (pool->tail == r)
        pool->tail = prev;
    r->qnext = NULL;
    r->queued = 0;
}

static void *shm_pool_worker(void *arg)
{
    shm_pool_t *pool = arg;
    /* Copies are throughput work: as SCHED_BATCH a woken worker does not
     * preempt the thread that just posted (or the application's own
     * threads) when cores are few.  Best effort. */
    struct sched_param sp = {.sched_priority = 0};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->stop && !pool->head)
            pthread_cond_wait(&pool->work, &pool->lock);
        if (pool->stop)
            break;
        shm_req_t *r = pool->head;
        size_t i = r->next_item++;
        if (r->next_item == r->nitems)
            shm_pool_dequeue(pool, r);
        r->running++;
        pthread_mutex_unlock(&pool->lock);

        /* After a failure or a cancel the remaining items are only counted. */
        if (!atomic_load_explicit(&r->cancel, memory_order_relaxed) &&
            atomic_load_explicit(&r->err, memory_order_relaxed) == NIXL_OK)
            shm_req_run_item(r, i);

        pthread_mutex_lock(&pool->lock);
        if (++r->done == r->nitems) {
            /* The lock orders every other worker's copies before this point. */
            int canceled = atomic_load(&r->cancel);
            pthread_mutex_unlock(&pool->lock);
            shm_req_finish(r, canceled);
            pthread_mutex_lock(&pool->lock);
        }
        if (--r->running == 0 && atomic_load_explicit(&r->cancel, memory_order_relaxed))
            pthread_cond_broadcast(&pool->idle);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

nixl_status_t shm_pool_create(shm_be_t *be, unsigned nthreads, shm_pool_t **pool_out)
{
    shm_pool_t *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return NIXL_ERR_NO_MEMORY;
    pool->be = be;
    pool->threads = calloc(nthreads, sizeof(pthread_t));
    if (!pool->threads)
        goto err_free;
    if (pthread_mutex_init(&pool->lock, NULL) != 0)
        goto err_threads;
    if (pthread_cond_init(&pool->work, NULL) != 0)
        goto err_lock;
    if (pthread_cond_init(&pool->idle, NULL) != 0)
        goto err_work;

    /* Workers take no signals: the application's handlers run elsewhere. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (; pool->nthreads < nthreads; pool->nthreads++) {
        rc = pthread_create(&pool->threads[pool->nthreads], NULL, shm_pool_worker, pool);
        if (rc != 0)
            break;
        char name[16];
        snprintf(name, sizeof(name), "nixl-shm-%u", pool->nthreads);
        pthread_setname_np(pool->threads[pool->nthreads], name);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        SHM_ERROR(be, "shm: cannot start copy thread %u of %u: %s", pool->nthreads + 1, nthreads, strerror(rc));
        goto err_join;
    }
    *pool_out = pool;
    return NIXL_OK;

err_join:
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    for (unsigned i = 0; i < pool->nthreads; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->idle);
err_work:
    pthread_cond_destroy(&pool->work);
err_lock:
    pthread_mutex_destroy(&pool->lock);
err_threads:
    free(pool->threads);
err_free:
    free(pool);
    return NIXL_ERR_NO_MEMORY;
}

void shm_pool_destroy(shm_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    for (unsigned i = 0; i < pool->nthreads; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->idle);
    pthread_cond_destroy(&pool->work);
    pthread_mutex_destroy(&pool->lock);
    free(pool->threads);
    free(pool);
}

void shm_pool_submit(shm_pool_t *pool, shm_req_t *r)
{
    pthread_mutex_lock(&pool->lock);
    r->next_item = 0;
    r->done = 0;
    r->pooled = 1;
    r->queued = 1;
    r->qnext = NULL;
    if (pool->tail)
        pool->tail->qnext = r;
    else
        pool->head = r;
    pool->tail = r;
    if (r->nitems > 1)
        pthread_cond_broadcast(&pool->work);
    else
        pthread_cond_signal(&pool->work);
    pthread_mutex_unlock(&pool->lock);
}

void shm_pool_cancel(shm_pool_t *pool, shm_req_t *r)
{
    pthread_mutex_lock(&pool->lock);
    atomic_store(&r->cancel, 1);
    if (r->queued)
        shm_pool_dequeue(pool, r);
    while (r->running)
        pthread_cond_wait(&pool->idle, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}
