/*
 * mem.c - the memory the conformance battery moves: host memory (the
 * default) or GPU memory on both sides (--mem vram).
 *
 * Cases never dereference a buffer: they write its host image and push it,
 * pull it before they compare.  For DRAM the image is the buffer and
 * push/pull are no-ops, so the DRAM battery is byte for byte what it was.
 * For VRAM each buffer gets a host image and the CUDA driver (loaded by
 * tests/gpu/gpu_util.c with dlopen) copies between the two.  Built without
 * CUDA's headers, --mem vram skips with the reason.
 *
 * The runner forks a process per case, and CUDA does not survive a fork
 * after cuInit: the runner itself never touches the driver (a forked probe
 * answers whether there are GPUs); each case process loads it on first use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"

#ifdef NIXL_HAVE_CUDA_H
#include "gpu_util.h"
#endif

#define CONF_MAX_VBUFS 64

typedef struct vbuf {
    uint8_t *p;    /* device memory */
    uint8_t *host; /* its image */
    size_t len;
    int dev;
} vbuf_t;

static vbuf_t vbufs[CONF_MAX_VBUFS];

static size_t page_round(size_t len)
{
    return (len + 4095) & ~(size_t)4095;
}

nixl_mem_t conf_mem_type(void)
{
    return conf_opts.mem;
}

const char *conf_mem_arg(void)
{
    return conf_opts.mem == NIXL_MEM_VRAM ? "vram" : "dram";
}

const char *conf_devs_arg(void)
{
    static char buf[32];
    snprintf(buf, sizeof(buf), "%d,%d", conf_opts.dev[0], conf_opts.dev[1]);
    return buf;
}

#ifdef NIXL_HAVE_CUDA_H
static void gpu_ready(void)
{
    char why[256];
    if (gpu_init(why, sizeof(why)) == 0)
        conf_fail(__FILE__, __LINE__, "--mem vram: %s", why);
}

/* How many GPUs there are, asked in a child so this process stays
 * fork-safe; 0 with the reason printed. */
static int gpu_probe(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char why[256];
        int n = gpu_init(why, sizeof(why));
        if (n == 0)
            printf("SKIP  all: --mem vram: %s\n", why);
        fflush(NULL);
        _exit(n > 100 ? 100 : n);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws))
        return 0;
    return WEXITSTATUS(ws);
}
#endif

int conf_mem_init(const char *mem, const char *devs, int probe)
{
    conf_opts.mem = NIXL_MEM_DRAM;
    if (!mem || strcmp(mem, "dram") == 0)
        return 0;
    if (strcmp(mem, "vram") != 0) {
        fprintf(stderr, "--mem: \"%s\" is neither dram nor vram\n", mem);
        return 2;
    }
    conf_opts.mem = NIXL_MEM_VRAM;
    if (devs && sscanf(devs, "%d,%d", &conf_opts.dev[0], &conf_opts.dev[1]) != 2) {
        fprintf(stderr, "--devs: expected I,T (GPU ordinals), got \"%s\"\n", devs);
        return 2;
    }
#ifdef NIXL_HAVE_CUDA_H
    if (!probe)
        return 0;
    int n = gpu_probe();
    if (n == 0)
        return 77;
    if (conf_opts.dev[0] >= n || conf_opts.dev[1] >= n || conf_opts.dev[0] < 0 || conf_opts.dev[1] < 0) {
        printf("SKIP  all: --mem vram on GPUs %d,%d: %d GPU(s) here\n", conf_opts.dev[0], conf_opts.dev[1], n);
        return 77;
    }
    printf("conformance: VRAM on both sides: initiator GPU %d, target GPU %d (of %d)\n", conf_opts.dev[0],
           conf_opts.dev[1], n);
    return 0;
#else
    (void)probe;
    printf("SKIP  all: --mem vram: built without CUDA headers\n");
    return 77;
#endif
}

static vbuf_t *vbuf_of(uint64_t addr)
{
    for (int i = 0; i < CONF_MAX_VBUFS; i++)
        if (vbufs[i].p && addr >= (uint64_t)(uintptr_t)vbufs[i].p &&
            addr - (uint64_t)(uintptr_t)vbufs[i].p < vbufs[i].len)
            return &vbufs[i];
    return NULL;
}

uint32_t conf_buf_dev(uint64_t addr)
{
    const vbuf_t *v = conf_opts.mem == NIXL_MEM_VRAM ? vbuf_of(addr) : NULL;
    return v ? (uint32_t)v->dev : 0;
}

void *conf_buf_alloc_dev(size_t len, int shared, int dev)
{
    void *p = NULL;
    if (conf_opts.mem == NIXL_MEM_VRAM) {
#ifdef NIXL_HAVE_CUDA_H
        int i = 0;
        while (i < CONF_MAX_VBUFS && vbufs[i].p)
            i++;
        if (i == CONF_MAX_VBUFS)
            conf_fail(__FILE__, __LINE__, "more than %d VRAM buffers at once", CONF_MAX_VBUFS);
        gpu_ready();
        vbufs[i].host = malloc(len ? len : 1);
        if (!vbufs[i].host)
            conf_fail(__FILE__, __LINE__, "out of memory for a %zu-byte host image", len);
        vbufs[i].p = gpu_alloc(dev, len);
        vbufs[i].len = len;
        vbufs[i].dev = dev;
        /* Image and buffer start equal. */
        memset(vbufs[i].host, 0, len);
        gpu_put(vbufs[i].p, vbufs[i].host, len);
        return vbufs[i].p;
#else
        (void)dev;
        conf_fail(__FILE__, __LINE__, "VRAM without CUDA headers");
#endif
    }
    (void)dev;
    if (shared) {
        nixl_status_t s = nixl_mem_alloc(len, &p);
        if (s != NIXL_OK)
            conf_fail(__FILE__, __LINE__, "nixl_mem_alloc(%zu): %s", len, nixl_status_name(s));
    } else {
        if (posix_memalign(&p, 4096, page_round(len)))
            conf_fail(__FILE__, __LINE__, "posix_memalign(%zu) failed", len);
    }
    return p;
}

void *conf_buf_alloc(size_t len, int shared)
{
    return conf_buf_alloc_dev(len, shared, conf_opts.dev[0]);
}

void conf_buf_free(void *p, size_t len, int shared)
{
    if (!p)
        return;
    if (conf_opts.mem == NIXL_MEM_VRAM) {
#ifdef NIXL_HAVE_CUDA_H
        vbuf_t *v = vbuf_of((uint64_t)(uintptr_t)p);
        if (!v || v->p != p)
            conf_fail(__FILE__, __LINE__, "freeing %p: not a VRAM buffer of this battery", p);
        gpu_free(v->dev, v->p);
        free(v->host);
        memset(v, 0, sizeof(*v));
#endif
        return;
    }
    if (shared)
        nixl_mem_free(p, len);
    else
        free(p);
}

uint8_t *conf_buf_host(const void *buf)
{
    if (conf_opts.mem != NIXL_MEM_VRAM)
        return (uint8_t *)(uintptr_t)buf;
    vbuf_t *v = vbuf_of((uint64_t)(uintptr_t)buf);
    if (!v || v->p != buf)
        conf_fail(__FILE__, __LINE__, "%p is not the start of a VRAM buffer of this battery", buf);
    return v->host;
}

void conf_buf_push(const void *buf, size_t off, size_t len)
{
#ifdef NIXL_HAVE_CUDA_H
    if (conf_opts.mem == NIXL_MEM_VRAM && len) {
        uint8_t *h = conf_buf_host(buf);
        gpu_put((uint8_t *)(uintptr_t)buf + off, h + off, len);
    }
#else
    (void)buf;
    (void)off;
    (void)len;
#endif
}

void conf_buf_pull(const void *buf, size_t off, size_t len)
{
#ifdef NIXL_HAVE_CUDA_H
    if (conf_opts.mem == NIXL_MEM_VRAM && len) {
        uint8_t *h = conf_buf_host(buf);
        gpu_get(h + off, (const uint8_t *)buf + off, len);
    }
#else
    (void)buf;
    (void)off;
    (void)len;
#endif
}
