/*
 * gpu_util.c - load the CUDA driver for tests and give them the few calls
 * they need (see gpu_util.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"

nixl_cuda_api_t gpu_cu;
static CUcontext g_ctx[GPU_MAX_DEVICES];
static char g_bus[GPU_MAX_DEVICES][16];
static int g_count = -1;

static void gpu_die(const char *call, CUresult rc)
{
    const char *name = NULL, *text = NULL;
    if (gpu_cu.cuGetErrorName)
        gpu_cu.cuGetErrorName(rc, &name);
    if (gpu_cu.cuGetErrorString)
        gpu_cu.cuGetErrorString(rc, &text);
    fprintf(stderr, "gpu: %s failed: %s (%d): %s\n", call, name ? name : "?", (int)rc, text ? text : "");
    fflush(NULL);
    exit(1);
}

#define GPU_CHECK(call)                                                                          \
    do {                                                                                         \
        CUresult gpu_rc_ = (call);                                                               \
        if (gpu_rc_ != CUDA_SUCCESS)                                                             \
            gpu_die(#call, gpu_rc_);                                                             \
    } while (0)

int gpu_init(char *why, size_t cap)
{
    if (g_count >= 0)
        return g_count;
    g_count = 0;
    const char *lib = getenv("NIXL_CUDA_LIB");
    void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, cap, "no CUDA driver (%s)", dlerror());
        return 0;
    }
#define GPU_RESOLVE_(fn, sym, req)                                                               \
    *(void **)&gpu_cu.fn = dlsym(h, sym);                                                        \
    if (!gpu_cu.fn && req) {                                                                     \
        snprintf(why, cap, "the CUDA driver lacks %s", sym);                                     \
        return 0;                                                                                \
    }
    NIXL_CUDA_FUNCTIONS(GPU_RESOLVE_)
#undef GPU_RESOLVE_
    CUresult rc = gpu_cu.cuInit(0);
    int n = 0;
    if (rc == CUDA_SUCCESS)
        rc = gpu_cu.cuDeviceGetCount(&n);
    if (rc != CUDA_SUCCESS || n == 0) {
        snprintf(why, cap, rc != CUDA_SUCCESS ? "cuInit failed (error %d)" : "no GPU", (int)rc);
        return 0;
    }
    if (n > GPU_MAX_DEVICES)
        n = GPU_MAX_DEVICES;
    for (int d = 0; d < n; d++) {
        CUdevice dev;
        GPU_CHECK(gpu_cu.cuDeviceGet(&dev, d));
        GPU_CHECK(gpu_cu.cuDevicePrimaryCtxRetain(&g_ctx[d], dev));
        GPU_CHECK(gpu_cu.cuDeviceGetPCIBusId(g_bus[d], sizeof(g_bus[d]), dev));
    }
    g_count = n;
    return n;
}

CUcontext gpu_ctx(int dev)
{
    if (dev < 0 || dev >= g_count) {
        fprintf(stderr, "gpu: no device %d (%d found)\n", dev, g_count);
        exit(1);
    }
    return g_ctx[dev];
}

const char *gpu_bus_id(int dev)
{
    gpu_ctx(dev);
    return g_bus[dev];
}

void gpu_bind(int dev)
{
    GPU_CHECK(gpu_cu.cuCtxSetCurrent(gpu_ctx(dev)));
}

/* Run a call in dev's context, restoring the thread's own after. */
static CUcontext enter(int dev)
{
    CUcontext prev = NULL;
    GPU_CHECK(gpu_cu.cuCtxGetCurrent(&prev));
    GPU_CHECK(gpu_cu.cuCtxSetCurrent(gpu_ctx(dev)));
    return prev;
}

static void leave(CUcontext prev)
{
    GPU_CHECK(gpu_cu.cuCtxSetCurrent(prev));
}

/* Which device holds p (pointer attributes answer in any context). */
static int device_of(const void *p)
{
    int ord = -1;
    GPU_CHECK(gpu_cu.cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)p));
    return ord;
}

void *gpu_alloc(int dev, size_t len)
{
    CUcontext prev = enter(dev);
    CUdeviceptr p = 0;
    GPU_CHECK(gpu_cu.cuMemAlloc(&p, len));
    leave(prev);
    return (void *)(uintptr_t)p;
}

void gpu_free(int dev, void *p)
{
    CUcontext prev = enter(dev);
    GPU_CHECK(gpu_cu.cuMemFree((CUdeviceptr)(uintptr_t)p));
    leave(prev);
}

void *gpu_alloc_vmm(int dev, size_t len, int chunks, gpu_vmm_t *v)
{
    if (!gpu_cu.cuMemCreate || !gpu_cu.cuMemMap || !gpu_cu.cuMemSetAccess) {
        fprintf(stderr, "gpu: the driver lacks the VMM calls\n");
        exit(1);
    }
    if (chunks < 1 || chunks > 8)
        chunks = 1;
    CUcontext prev = enter(dev);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    GPU_CHECK(gpu_cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t per = (len + (size_t)chunks - 1) / (size_t)chunks;
    per = (per + gran - 1) / gran * gran;
    memset(v, 0, sizeof(*v));
    v->dev = dev;
    v->chunk = per;
    v->nchunks = chunks;
    v->size = per * (size_t)chunks;
    GPU_CHECK(gpu_cu.cuMemAddressReserve(&v->va, v->size, 0, 0, 0));
    for (int i = 0; i < chunks; i++) {
        GPU_CHECK(gpu_cu.cuMemCreate(&v->h[i], per, &prop, 0));
        GPU_CHECK(gpu_cu.cuMemMap(v->va + (size_t)i * per, per, 0, v->h[i], 0));
    }
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof(ad));
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = dev;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    GPU_CHECK(gpu_cu.cuMemSetAccess(v->va, v->size, &ad, 1));
    leave(prev);
    return (void *)(uintptr_t)v->va;
}

void gpu_free_vmm(gpu_vmm_t *v)
{
    CUcontext prev = enter(v->dev);
    for (int i = 0; i < v->nchunks; i++) {
        GPU_CHECK(gpu_cu.cuMemUnmap(v->va + (size_t)i * v->chunk, v->chunk));
        GPU_CHECK(gpu_cu.cuMemRelease(v->h[i]));
    }
    GPU_CHECK(gpu_cu.cuMemAddressFree(v->va, v->size));
    leave(prev);
    memset(v, 0, sizeof(*v));
}

void gpu_put(void *dst, const void *src, size_t len)
{
    CUcontext prev = enter(device_of(dst));
    GPU_CHECK(gpu_cu.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, len));
    /* From pageable memory it may return before the DMA lands: wait, or a
     * peer's write that comes next could be overwritten by it. */
    GPU_CHECK(gpu_cu.cuStreamSynchronize(NULL));
    leave(prev);
}

void gpu_get(void *dst, const void *src, size_t len)
{
    CUcontext prev = enter(device_of(src));
    GPU_CHECK(gpu_cu.cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, len));
    leave(prev);
}

void gpu_set(void *dst, uint8_t v, size_t len)
{
    CUcontext prev = enter(device_of(dst));
    GPU_CHECK(gpu_cu.cuMemsetD8((CUdeviceptr)(uintptr_t)dst, v, len));
    GPU_CHECK(gpu_cu.cuStreamSynchronize(NULL));
    leave(prev);
}
