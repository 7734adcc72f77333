/*
 * cuda.c - load the CUDA driver with dlopen, classify pointers, bind
 * contexts.  See cuda.h for the contract.
 *
 * Why pointer attributes: cuMemGetAddressRange answers only in the context
 * that owns the memory (a thread with GPU 0 current gets
 * CUDA_ERROR_NOT_FOUND for GPU 1's buffer), while cuPointerGetAttributes
 * answers on any thread.  So a region is classified once at registration
 * from attributes, its owning context recorded, and every later use binds
 * that context first.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda.h"
#include "util/config.h"
#include "util/log.h"
#include "util/str.h"

#ifdef NIXL_HAVE_CUDA_H

#include "nixl/cuda_api.h"

#define NIXL_CUDA_MAX_DEVICES 64

static nixl_cuda_api_t g_api;
static nixl_status_t g_status = NIXL_ERR_NO_CUDA;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Per device, filled on first use under g_dev_lock. */
static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_primary[NIXL_CUDA_MAX_DEVICES];
static char g_bus_id[NIXL_CUDA_MAX_DEVICES][16];

static void cuda_load_once(void)
{
    const char *lib = nixl_cfg_get("NIXL_CUDA_LIB");
    if (!lib || !*lib)
        lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        NIXL_INFO("no CUDA driver (%s): GPU memory is unavailable", dlerror());
        return;
    }
#define NIXL_CUDA_RESOLVE_(fn, sym, req)                                                                       \
    *(void **)&g_api.fn = dlsym(h, sym);                                                                       \
    if (!g_api.fn && req) {                                                                                    \
        NIXL_WARN("CUDA driver %s lacks %s: GPU memory is unavailable", lib, sym);                            \
        goto err;                                                                                              \
    }
    NIXL_CUDA_FUNCTIONS(NIXL_CUDA_RESOLVE_)
#undef NIXL_CUDA_RESOLVE_
    CUresult rc = g_api.cuInit(0);
    if (rc != CUDA_SUCCESS) {
        NIXL_INFO("cuInit failed: %s: GPU memory is unavailable", nixl_cuda_strerror(rc));
        goto err;
    }
    g_api.cuDriverGetVersion(&g_api.driver_version);
    if (g_api.cuDeviceGetCount(&g_api.device_count) != CUDA_SUCCESS)
        g_api.device_count = 0;
    NIXL_INFO("CUDA driver %d.%d, %d device(s)", g_api.driver_version / 1000, g_api.driver_version % 1000 / 10,
              g_api.device_count);
    g_status = NIXL_OK;
    return;
err:
    memset(&g_api, 0, sizeof(g_api));
    /* The handle stays open: the process may have other users of it. */
}

nixl_status_t nixl_cuda_load(const void **api_out)
{
    pthread_once(&g_once, cuda_load_once);
    if (g_status != NIXL_OK)
        return g_status;
    if (api_out)
        *api_out = &g_api;
    return NIXL_OK;
}

const char *nixl_cuda_strerror(int cu_result)
{
    static __thread char buf[160];
    const char *name = NULL, *text = NULL;
    if (g_api.cuGetErrorName)
        g_api.cuGetErrorName((CUresult)cu_result, &name);
    if (g_api.cuGetErrorString)
        g_api.cuGetErrorString((CUresult)cu_result, &text);
    snprintf(buf, sizeof(buf), "%s (%d): %s", name ? name : "CUDA error", cu_result, text ? text : "no description");
    return buf;
}

/* The device's primary context, retained once for the process, and its PCI bus id. */
static nixl_status_t device_facts(int dev, CUcontext *ctx, char bus_id[16])
{
    if (dev < 0 || dev >= NIXL_CUDA_MAX_DEVICES || dev >= g_api.device_count)
        return NIXL_ERR_INVALID_PARAM;
    nixl_status_t st = NIXL_OK;
    pthread_mutex_lock(&g_dev_lock);
    if (!g_primary[dev]) {
        CUdevice d;
        CUresult rc = g_api.cuDeviceGet(&d, dev);
        if (rc == CUDA_SUCCESS)
            rc = g_api.cuDevicePrimaryCtxRetain(&g_primary[dev], d);
        if (rc == CUDA_SUCCESS)
            rc = g_api.cuDeviceGetPCIBusId(g_bus_id[dev], sizeof(g_bus_id[dev]), d);
        if (rc != CUDA_SUCCESS) {
            NIXL_ERROR("CUDA device %d: %s", dev, nixl_cuda_strerror(rc));
            g_primary[dev] = NULL;
            st = NIXL_ERR_BACKEND;
        }
    }
    if (st == NIXL_OK) {
        if (ctx)
            *ctx = g_primary[dev];
        if (bus_id)
            memcpy(bus_id, g_bus_id[dev], 16);
    }
    pthread_mutex_unlock(&g_dev_lock);
    return st;
}

nixl_status_t nixl_cuda_ctx_bind(void *ctx, void **saved)
{
    nixl_status_t st = nixl_cuda_load(NULL);
    if (st != NIXL_OK)
        return st;
    CUcontext prev = NULL;
    CUresult rc = g_api.cuCtxGetCurrent(&prev);
    if (rc == CUDA_SUCCESS && prev != (CUcontext)ctx)
        rc = g_api.cuCtxSetCurrent((CUcontext)ctx);
    if (rc != CUDA_SUCCESS) {
        NIXL_ERROR("binding CUDA context %p: %s", ctx, nixl_cuda_strerror(rc));
        return NIXL_ERR_BACKEND;
    }
    if (saved)
        *saved = prev;
    return NIXL_OK;
}

void nixl_cuda_ctx_restore(void *saved)
{
    if (g_status != NIXL_OK)
        return;
    CUcontext cur = NULL;
    if (g_api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != (CUcontext)saved)
        g_api.cuCtxSetCurrent((CUcontext)saved);
}

nixl_status_t nixl_cuda_ptr_query(uint64_t addr, uint64_t len, nixl_be_cuda_region_t *out, int *is_device)
{
    nixl_status_t st = nixl_cuda_load(NULL);
    if (st != NIXL_OK)
        return st;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_CONTEXT,          CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    };
    unsigned int mem_type = 0;
    int ordinal = -1, managed = 0, legacy = 0;
    CUcontext ctx = NULL;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *data[] = {&mem_type, &ordinal, &ctx, &managed, &legacy, &start, &size};
    CUresult rc = g_api.cuPointerGetAttributes(sizeof(attrs) / sizeof(attrs[0]), attrs, data, (CUdeviceptr)addr);
    if (rc != CUDA_SUCCESS || mem_type != CU_MEMORYTYPE_DEVICE || managed) {
        /* Host, managed or unknown memory: not VRAM. */
        *is_device = 0;
        return NIXL_OK;
    }
    nixl_be_cuda_region_t r;
    memset(&r, 0, sizeof(r));
    r.device = ordinal;
    CUcontext primary = NULL;
    st = device_facts(ordinal, &primary, r.pci_bus_id);
    if (st != NIXL_OK)
        return st;
    if (legacy)
        r.flags |= NIXL_CUDA_MEM_LEGACY_IPC;
    if (g_api.cuMemRetainAllocationHandle) {
        CUmemGenericAllocationHandle h;
        if (g_api.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)addr) == CUDA_SUCCESS) {
            r.flags |= NIXL_CUDA_MEM_VMM;
            g_api.cuMemRelease(h);
        }
    }
    /* VMM memory belongs to no context: use the device's primary one. */
    r.ctx = ctx ? (void *)ctx : (void *)primary;
    if (r.flags & NIXL_CUDA_MEM_VMM) {
        CUpointer_attribute ma[] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
        void *mbase = NULL;
        size_t msize = 0;
        void *md[] = {&mbase, &msize};
        if (g_api.cuPointerGetAttributes(2, ma, md, (CUdeviceptr)addr) == CUDA_SUCCESS && mbase && msize) {
            start = (CUdeviceptr)(uintptr_t)mbase;
            size = msize;
        }
    }
    if (!start || !size) {
        /* Older drivers: ask for the range inside the owning context. */
        void *saved;
        if (nixl_cuda_ctx_bind(r.ctx, &saved) == NIXL_OK) {
            rc = g_api.cuMemGetAddressRange(&start, &size, (CUdeviceptr)addr);
            nixl_cuda_ctx_restore(saved);
            if (rc != CUDA_SUCCESS) {
                NIXL_ERROR("CUDA memory 0x%llx on device %d: address range: %s", (unsigned long long)addr, ordinal,
                           nixl_cuda_strerror(rc));
                return NIXL_ERR_BACKEND;
            }
        }
    }
    r.alloc_base = (uint64_t)start;
    r.alloc_size = (uint64_t)size;
    /* A legacy allocation is one block; VMM regions may span several
     * mappings (expandable segments), which the backend walks. */
    if (!(r.flags & NIXL_CUDA_MEM_VMM) &&
        (addr < r.alloc_base || len > r.alloc_size || addr - r.alloc_base > r.alloc_size - len)) {
        NIXL_ERROR("VRAM [0x%llx, +%llu) runs past its allocation [0x%llx, +%llu) on device %d",
                   (unsigned long long)addr, (unsigned long long)len, (unsigned long long)r.alloc_base,
                   (unsigned long long)r.alloc_size, ordinal);
        return NIXL_ERR_INVALID_PARAM;
    }
    *out = r;
    *is_device = 1;
    return NIXL_OK;
}

static const void *cuda_api(void)
{
    const void *api = NULL;
    return nixl_cuda_load(&api) == NIXL_OK ? api : NULL;
}

#else /* !NIXL_HAVE_CUDA_H */

nixl_status_t nixl_cuda_load(const void **api_out)
{
    (void)api_out;
    return NIXL_ERR_NO_CUDA;
}

nixl_status_t nixl_cuda_ptr_query(uint64_t addr, uint64_t len, nixl_be_cuda_region_t *out, int *is_device)
{
    (void)addr;
    (void)len;
    (void)out;
    (void)is_device;
    return NIXL_ERR_NO_CUDA;
}

nixl_status_t nixl_cuda_ctx_bind(void *ctx, void **saved)
{
    (void)ctx;
    (void)saved;
    return NIXL_ERR_NO_CUDA;
}

void nixl_cuda_ctx_restore(void *saved)
{
    (void)saved;
}

const char *nixl_cuda_strerror(int cu_result)
{
    (void)cu_result;
    return "built without CUDA headers";
}

static const void *cuda_api(void)
{
    return NULL;
}

#endif

/* The driver is loaded on the first call that needs it, not when a backend
 * is created: agents that never touch VRAM never pay cuInit. */
static const nixl_host_cuda_t g_host = {
    .api = cuda_api,
    .ctx_bind = nixl_cuda_ctx_bind,
    .ctx_restore = nixl_cuda_ctx_restore,
    .ptr_query = nixl_cuda_ptr_query,
    .strerror = nixl_cuda_strerror,
};

const nixl_host_cuda_t *nixl_cuda_host(void)
{
    return &g_host;
}
