/*
 * bench_vram.c - GPU memory for nixlbench: buffers on a chosen GPU, host
 * staging for the pattern fills and checks, and the raw limit of a VRAM row.
 *
 * The CUDA driver is loaded with dlopen into the table libnixl itself uses
 * (nixl/cuda_api.h): nixlbench links no CUDA library, and on a machine
 * without a driver only the vram options fail, with a clear message.  Every
 * call runs in the device's primary context, bound for the call.
 *
 * The limit of a VRAM row is the driver's own copy of the same number of
 * bytes between the same two GPUs, measured in the same run: cuMemcpyPeer
 * (cudaMemcpyPeer underneath) across GPUs, cuMemcpyDtoD on one GPU.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef NIXL_HAVE_CUDA_H

#include "nixl/cuda_api.h"

#define BENCH_MAX_GPUS 16

static nixl_cuda_api_t cu;
static CUresult (*cu_memcpy_peer)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
static CUresult (*cu_memcpy_dtod)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*cu_memcpy_htod)(CUdeviceptr, const void *, size_t);
static CUresult (*cu_memcpy_dtoh)(void *, CUdeviceptr, size_t);
static CUcontext ctxs[BENCH_MAX_GPUS];
static int ngpus = -1;

static void vram_check(CUresult rc, const char *call)
{
    if (rc == CUDA_SUCCESS)
        return;
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName)
        cu.cuGetErrorName(rc, &name);
    if (cu.cuGetErrorString)
        cu.cuGetErrorString(rc, &text);
    bench_die("%s failed: %s: %s", call, name ? name : "CUDA error", text ? text : "");
}

int bench_vram_init(void)
{
    if (ngpus >= 0)
        return ngpus;
    ngpus = 0;
    const char *lib = getenv("NIXL_CUDA_LIB");
    void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        bench_die("vram: no CUDA driver (%s)", dlerror());
#define BENCH_RESOLVE_(fn, sym, req)                                                             \
    *(void **)&cu.fn = dlsym(h, sym);                                                            \
    if (!cu.fn && req)                                                                           \
        bench_die("vram: the CUDA driver lacks %s", sym);
    NIXL_CUDA_FUNCTIONS(BENCH_RESOLVE_)
#undef BENCH_RESOLVE_
    *(void **)&cu_memcpy_peer = dlsym(h, "cuMemcpyPeer");
    *(void **)&cu_memcpy_dtod = dlsym(h, "cuMemcpyDtoD_v2");
    *(void **)&cu_memcpy_htod = dlsym(h, "cuMemcpyHtoD_v2");
    *(void **)&cu_memcpy_dtoh = dlsym(h, "cuMemcpyDtoH_v2");
    if (!cu_memcpy_peer || !cu_memcpy_dtod || !cu_memcpy_htod || !cu_memcpy_dtoh)
        bench_die("vram: the CUDA driver lacks cuMemcpyPeer, cuMemcpyDtoD_v2, cuMemcpyHtoD_v2 or cuMemcpyDtoH_v2");
    vram_check(cu.cuInit(0), "cuInit");
    int n = 0;
    vram_check(cu.cuDeviceGetCount(&n), "cuDeviceGetCount");
    if (n > BENCH_MAX_GPUS)
        n = BENCH_MAX_GPUS;
    CUdevice devs[BENCH_MAX_GPUS];
    for (int d = 0; d < n; d++) {
        vram_check(cu.cuDeviceGet(&devs[d], d), "cuDeviceGet");
        vram_check(cu.cuDevicePrimaryCtxRetain(&ctxs[d], devs[d]), "cuDevicePrimaryCtxRetain");
    }
    /* A serving engine enables peer access between its GPUs (PyTorch does):
     * cuMemcpyPeer then goes over NVLink, which is the limit to compare with. */
    CUresult (*enable_peer)(CUcontext, unsigned) = NULL;
    *(void **)&enable_peer = dlsym(h, "cuCtxEnablePeerAccess");
    for (int a = 0; a < n && enable_peer; a++) {
        for (int b = 0; b < n; b++) {
            int can = 0;
            if (a == b || cu.cuDeviceCanAccessPeer(&can, devs[a], devs[b]) != CUDA_SUCCESS || !can)
                continue;
            vram_check(cu.cuCtxSetCurrent(ctxs[a]), "cuCtxSetCurrent");
            CUresult rc = enable_peer(ctxs[b], 0);
            if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
                vram_check(rc, "cuCtxEnablePeerAccess");
        }
    }
    ngpus = n;
    return n;
}

void bench_vram_bind(int dev)
{
    if (bench_vram_init() <= dev || dev < 0)
        bench_die("vram: no GPU %d here (%d found)", dev, ngpus);
    vram_check(cu.cuCtxSetCurrent(ctxs[dev]), "cuCtxSetCurrent");
}

void *bench_vram_alloc(int dev, size_t len)
{
    CUdeviceptr p = 0;
    bench_vram_bind(dev);
    vram_check(cu.cuMemAlloc(&p, len), "cuMemAlloc");
    vram_check(cu.cuMemsetD8(p, 0, len), "cuMemsetD8");
    vram_check(cu.cuStreamSynchronize(NULL), "cuStreamSynchronize");
    return (void *)(uintptr_t)p;
}

void bench_vram_free(int dev, void *p)
{
    if (!p)
        return;
    bench_vram_bind(dev);
    vram_check(cu.cuMemFree((CUdeviceptr)(uintptr_t)p), "cuMemFree");
}

void bench_vram_put(int dev, void *dst, const void *src, size_t len)
{
    bench_vram_bind(dev);
    vram_check(cu.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, len), "cuMemcpyHtoD");
    /* From pageable memory it may return before the DMA lands. */
    vram_check(cu.cuStreamSynchronize(NULL), "cuStreamSynchronize");
}

void bench_vram_get(int dev, void *dst, const void *src, size_t len)
{
    bench_vram_bind(dev);
    vram_check(cu.cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, len), "cuMemcpyDtoH");
}

void bench_vram_set(int dev, void *dst, uint8_t v, size_t len)
{
    bench_vram_bind(dev);
    vram_check(cu.cuMemsetD8((CUdeviceptr)(uintptr_t)dst, v, len), "cuMemsetD8");
    vram_check(cu.cuStreamSynchronize(NULL), "cuStreamSynchronize");
}

const char *bench_vram_limit_name(int src_dev, int dst_dev)
{
    return src_dev == dst_dev ? "cuMemcpyDtoD" : "cuMemcpyPeer";
}

double bench_vram_limit(int src_dev, int dst_dev, uint64_t bytes)
{
    enum { REPS = 5 };
    const uint64_t min_rep_ns = 5000000;
    void *src = bench_vram_alloc(src_dev, bytes), *dst = bench_vram_alloc(dst_dev, bytes);
    CUdeviceptr s = (CUdeviceptr)(uintptr_t)src, d = (CUdeviceptr)(uintptr_t)dst;
    bench_vram_bind(src_dev);
    uint64_t passes = 1;
    for (int warm = 1;; warm = 0) {
        uint64_t t0 = bench_now_ns();
        for (uint64_t p = 0; p < passes; p++)
            vram_check(src_dev == dst_dev ? cu_memcpy_dtod(d, s, bytes)
                                          : cu_memcpy_peer(d, ctxs[dst_dev], s, ctxs[src_dev], bytes),
                       bench_vram_limit_name(src_dev, dst_dev));
        if (!warm && (bench_now_ns() - t0 >= min_rep_ns || passes >= (1ull << 30)))
            break;
        if (!warm)
            passes *= 2;
    }
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < REPS; r++)
        for (uint64_t p = 0; p < passes; p++)
            vram_check(src_dev == dst_dev ? cu_memcpy_dtod(d, s, bytes)
                                          : cu_memcpy_peer(d, ctxs[dst_dev], s, ctxs[src_dev], bytes),
                       bench_vram_limit_name(src_dev, dst_dev));
    uint64_t dt = bench_now_ns() - t0;
    bench_vram_free(src_dev, src);
    bench_vram_free(dst_dev, dst);
    return (double)bytes * (double)passes * REPS * 1e9 / (double)(dt ? dt : 1);
}

const char *bench_host_limit_name(int to_device)
{
    return to_device ? "cuMemcpyHtoD" : "cuMemcpyDtoH";
}

/* Between host memory allocated as the row's (pageable or not) and GPU dev:
 * the driver's own copy of the same bytes, the limit of a DRAM<->VRAM row. */
double bench_host_limit(int dev, int to_device, uint64_t bytes, bench_alloc_t alloc)
{
    enum { REPS = 5 };
    const uint64_t min_rep_ns = 5000000;
    void *host = bench_alloc(alloc, bytes);
    void *vram = bench_vram_alloc(dev, bytes);
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)vram;
    memset(host, 1, bytes);
    bench_vram_bind(dev);
#define HOST_COPY() vram_check(to_device ? cu_memcpy_htod(d, host, bytes) : cu_memcpy_dtoh(host, d, bytes), \
                               bench_host_limit_name(to_device))
    HOST_COPY(); /* warm: first touch, driver staging buffers */
    uint64_t passes = 1;
    for (;;) {
        uint64_t t0 = bench_now_ns();
        for (uint64_t p = 0; p < passes; p++)
            HOST_COPY();
        if (bench_now_ns() - t0 >= min_rep_ns || passes >= (1ull << 30))
            break;
        passes *= 2;
    }
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < REPS; r++)
        for (uint64_t p = 0; p < passes; p++)
            HOST_COPY();
    uint64_t dt = bench_now_ns() - t0;
#undef HOST_COPY
    bench_vram_free(dev, vram);
    bench_free(alloc, host, bytes);
    return (double)bytes * (double)passes * REPS * 1e9 / (double)(dt ? dt : 1);
}

#else /* !NIXL_HAVE_CUDA_H */

int bench_vram_init(void)
{
    bench_die("vram: nixlbench was built without CUDA headers (-Dgpu_include_dir)");
    return 0;
}

void bench_vram_bind(int dev)
{
    (void)dev;
    bench_vram_init();
}

void *bench_vram_alloc(int dev, size_t len)
{
    (void)dev;
    (void)len;
    bench_vram_init();
    return NULL;
}

void bench_vram_free(int dev, void *p)
{
    (void)dev;
    (void)p;
}

void bench_vram_put(int dev, void *dst, const void *src, size_t len)
{
    (void)dev;
    (void)dst;
    (void)src;
    (void)len;
    bench_vram_init();
}

void bench_vram_get(int dev, void *dst, const void *src, size_t len)
{
    bench_vram_put(dev, dst, src, len);
}

void bench_vram_set(int dev, void *dst, uint8_t v, size_t len)
{
    (void)v;
    bench_vram_put(dev, dst, NULL, len);
}

const char *bench_vram_limit_name(int src_dev, int dst_dev)
{
    (void)src_dev;
    (void)dst_dev;
    return "none";
}

double bench_vram_limit(int src_dev, int dst_dev, uint64_t bytes)
{
    (void)src_dev;
    (void)dst_dev;
    (void)bytes;
    bench_vram_init();
    return 0;
}

const char *bench_host_limit_name(int to_device)
{
    (void)to_device;
    return "none";
}

double bench_host_limit(int dev, int to_device, uint64_t bytes, bench_alloc_t alloc)
{
    (void)dev;
    (void)to_device;
    (void)bytes;
    (void)alloc;
    bench_vram_init();
    return 0;
}

#endif
