/*
 * mem.c - nixl_mem_alloc: host memory that same-host peers can map.
 *
 * The memory is a memfd mapped MAP_SHARED.  The fd stays open for the life
 * of the allocation so a backend (shm) can find it through /proc/self/fd
 * and publish it; a peer then maps the same pages and copies with plain
 * memcpy (path shm.map) instead of a syscall per descriptor.  The file is
 * sealed against shrinking, so no peer can truncate it under us.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nixl.h"
#include "util/log.h"

typedef struct mem_block {
    struct mem_block *next;
    void *ptr;
    size_t len;
    int fd;
} mem_block_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_block_t *g_blocks;

static size_t page_round(size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (len + pg - 1) / pg * pg;
}

NIXL_API nixl_status_t nixl_mem_alloc(size_t len, void **ptr_out)
{
    if (!ptr_out)
        return NIXL_ERR_NULL;
    if (len == 0)
        return NIXL_ERR_ZERO_LENGTH;
    size_t sz = page_round(len);
    mem_block_t *b = malloc(sizeof(*b));
    if (!b)
        return NIXL_ERR_NO_MEMORY;
    b->fd = memfd_create("nixl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (b->fd < 0) {
        NIXL_ERROR("nixl_mem_alloc: memfd_create: %m");
        free(b);
        return NIXL_ERR_NO_MEMORY;
    }
    if (ftruncate(b->fd, (off_t)sz) != 0) {
        NIXL_ERROR("nixl_mem_alloc: ftruncate %zu: %m", sz);
        goto err_close;
    }
    /* A peer that maps this memory opens the file read-write; sealed, it
     * cannot shrink it under us (our next touch would be a SIGBUS). */
    if (fcntl(b->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
        NIXL_ERROR("nixl_mem_alloc: sealing the memfd: %m");
        goto err_close;
    }
    b->ptr = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
    if (b->ptr == MAP_FAILED) {
        NIXL_ERROR("nixl_mem_alloc: mmap %zu: %m", sz);
        goto err_close;
    }
    b->len = sz;
    pthread_mutex_lock(&g_lock);
    b->next = g_blocks;
    g_blocks = b;
    pthread_mutex_unlock(&g_lock);
    *ptr_out = b->ptr;
    return NIXL_OK;
err_close:
    close(b->fd);
    free(b);
    return NIXL_ERR_NO_MEMORY;
}

NIXL_API void nixl_mem_free(void *ptr, size_t len)
{
    (void)len;
    if (!ptr)
        return;
    pthread_mutex_lock(&g_lock);
    mem_block_t **pp = &g_blocks;
    while (*pp && (*pp)->ptr != ptr)
        pp = &(*pp)->next;
    mem_block_t *b = *pp;
    if (b)
        *pp = b->next;
    pthread_mutex_unlock(&g_lock);
    if (!b) {
        NIXL_ERROR("nixl_mem_free: %p was not returned by nixl_mem_alloc", ptr);
        return;
    }
    munmap(b->ptr, b->len);
    close(b->fd);
    free(b);
}
