/* op_pool.c - threads running the operations of queued jobs (op_pool.h). */
#include <pthread.h>
#include <stdlib.h>

#include "op_pool.h"

#define OP_POOL_MAX_THREADS 64

struct nixl_op_pool {
    pthread_mutex_t lock;
    pthread_cond_t work; /* a job was queued, or stop */
    pthread_cond_t idle; /* an operation finished */
    int stop;
    nixl_op_job_t *head, *tail; /* jobs with operations not yet started */
    unsigned nthreads;
    pthread_t threads[OP_POOL_MAX_THREADS];
};

static void dequeue(nixl_op_pool_t *p, nixl_op_job_t *j)
{
    if (!j->queued)
        return;
    nixl_op_job_t **pp = &p->head, *prev = NULL;
    while (*pp && *pp != j) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (*pp) {
        *pp = j->qnext;
        if (p->tail == j)
            p->tail = prev;
    }
    j->qnext = NULL;
    j->queued = 0;
}

static void *op_pool_thread(void *arg)
{
    nixl_op_pool_t *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && !p->head)
            pthread_cond_wait(&p->work, &p->lock);
        if (p->stop)
            break;
        nixl_op_job_t *j = p->head;
        size_t i = j->next++;
        j->running++;
        if (j->next == j->nops)
            dequeue(p, j);
        pthread_mutex_unlock(&p->lock);
        nixl_status_t st = j->run(j->ctx, i);
        pthread_mutex_lock(&p->lock);
        j->running--;
        j->left--;
        if (st != NIXL_OK && j->status == NIXL_OK) {
            j->status = st;
            /* What of a failed job has not started never will. */
            j->left -= j->nops - j->next;
            j->next = j->nops;
            dequeue(p, j);
        }
        pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

nixl_status_t nixl_op_pool_create(unsigned nthreads, nixl_op_pool_t **out)
{
    if (!out || nthreads == 0 || nthreads > OP_POOL_MAX_THREADS)
        return NIXL_ERR_INVALID_PARAM;
    nixl_op_pool_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NIXL_ERR_NO_MEMORY;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (; p->nthreads < nthreads; p->nthreads++)
        if (pthread_create(&p->threads[p->nthreads], NULL, op_pool_thread, p) != 0)
            break;
    if (p->nthreads == 0) {
        nixl_op_pool_destroy(p);
        return NIXL_ERR_BACKEND;
    }
    *out = p;
    return NIXL_OK;
}

void nixl_op_pool_destroy(nixl_op_pool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void nixl_op_pool_submit(nixl_op_pool_t *p, nixl_op_job_t *j)
{
    pthread_mutex_lock(&p->lock);
    j->next = j->running = 0;
    j->left = j->nops;
    j->status = NIXL_OK;
    j->canceled = 0;
    j->qnext = NULL;
    if (j->nops) {
        j->queued = 1;
        if (p->tail)
            p->tail->qnext = j;
        else
            p->head = j;
        p->tail = j;
        pthread_cond_broadcast(&p->work);
    }
    pthread_mutex_unlock(&p->lock);
}

nixl_status_t nixl_op_pool_status(nixl_op_pool_t *p, nixl_op_job_t *j)
{
    pthread_mutex_lock(&p->lock);
    nixl_status_t st;
    if (j->running || (j->left && !j->canceled && j->status == NIXL_OK))
        st = NIXL_IN_PROG;
    else if (j->status != NIXL_OK)
        st = j->status;
    else
        st = j->left ? NIXL_ERR_CANCELED : NIXL_OK;
    pthread_mutex_unlock(&p->lock);
    return st;
}

void nixl_op_pool_cancel(nixl_op_pool_t *p, nixl_op_job_t *j)
{
    pthread_mutex_lock(&p->lock);
    if (j->next < j->nops) {
        j->canceled = 1;
        j->next = j->nops;
        dequeue(p, j);
    }
    pthread_mutex_unlock(&p->lock);
}

void nixl_op_pool_wait(nixl_op_pool_t *p, nixl_op_job_t *j)
{
    nixl_op_pool_cancel(p, j);
    pthread_mutex_lock(&p->lock);
    while (j->running)
        pthread_cond_wait(&p->idle, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
