/*
 * nixl/cuda_api.h - the CUDA driver calls libnixl resolves at run time.
 *
 * libnixl never links libcuda: src/cuda loads libcuda.so.1 with dlopen and
 * fills this table.  Backends that drive GPUs include this header (it needs
 * CUDA's <cuda.h> for the types) and get the table from the host services
 * (host->cuda->api), so one process resolves the driver once.
 *
 * Each row: the driver function (its name as <cuda.h> spells it; the header
 * maps some to _v2 symbols, and so do the field names) and the exact symbol
 * exported by libcuda.so.1.  A missing symbol leaves its field NULL; the
 * required ones make loading fail.
 */
#ifndef NIXL_CUDA_API_H
#define NIXL_CUDA_API_H

#include <cuda.h>

/* X(function, "symbol", required) */
#define NIXL_CUDA_FUNCTIONS(X)                                                                           \
    X(cuInit, "cuInit", 1)                                                                                \
    X(cuDriverGetVersion, "cuDriverGetVersion", 1)                                                        \
    X(cuGetErrorName, "cuGetErrorName", 1)                                                                \
    X(cuGetErrorString, "cuGetErrorString", 1)                                                            \
    X(cuDeviceGetCount, "cuDeviceGetCount", 1)                                                            \
    X(cuDeviceGet, "cuDeviceGet", 1)                                                                      \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 1)                                                    \
    X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 1)                                                      \
    X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 1)                                                  \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1)                                            \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 1)                                       \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", 1)                                                              \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 1)                                                              \
    X(cuCtxGetDevice, "cuCtxGetDevice", 1)                                                                \
    X(cuPointerGetAttribute, "cuPointerGetAttribute", 1)                                                  \
    X(cuPointerGetAttributes, "cuPointerGetAttributes", 1)                                                \
    X(cuMemGetAddressRange, "cuMemGetAddressRange_v2", 1)                                                 \
    X(cuIpcGetMemHandle, "cuIpcGetMemHandle", 1)                                                          \
    X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", 1)                                                     \
    X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 1)                                                      \
    X(cuStreamCreate, "cuStreamCreate", 1)                                                                \
    X(cuStreamDestroy, "cuStreamDestroy_v2", 1)                                                           \
    X(cuStreamSynchronize, "cuStreamSynchronize", 1)                                                      \
    X(cuEventCreate, "cuEventCreate", 1)                                                                  \
    X(cuEventRecord, "cuEventRecord", 1)                                                                  \
    X(cuEventQuery, "cuEventQuery", 1)                                                                    \
    X(cuEventSynchronize, "cuEventSynchronize", 1)                                                        \
    X(cuEventDestroy, "cuEventDestroy_v2", 1)                                                             \
    X(cuMemcpyAsync, "cuMemcpyAsync", 1)                                                                  \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 1)                                                       \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 1)                                                       \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 1)                                                       \
    X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 1)                                                          \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", 1)                                                                 \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", 1)                                                                 \
    X(cuMemsetD8, "cuMemsetD8_v2", 1)                                                                     \
    X(cuMemAlloc, "cuMemAlloc_v2", 1)                                                                     \
    X(cuMemFree, "cuMemFree_v2", 1)                                                                       \
    X(cuMemAllocHost, "cuMemAllocHost_v2", 1)                                                             \
    X(cuMemFreeHost, "cuMemFreeHost", 1)                                                                  \
    X(cuMemHostRegister, "cuMemHostRegister_v2", 1)                                                       \
    X(cuMemHostUnregister, "cuMemHostUnregister", 1)                                                      \
    X(cuModuleLoadData, "cuModuleLoadData", 1)                                                            \
    X(cuModuleGetFunction, "cuModuleGetFunction", 1)                                                      \
    X(cuModuleUnload, "cuModuleUnload", 1)                                                                \
    X(cuLaunchKernel, "cuLaunchKernel", 1)                                                                \
    X(cuMemCreate, "cuMemCreate", 0)                                                                      \
    X(cuMemRelease, "cuMemRelease", 0)                                                                    \
    X(cuMemAddressReserve, "cuMemAddressReserve", 0)                                                      \
    X(cuMemAddressFree, "cuMemAddressFree", 0)                                                            \
    X(cuMemMap, "cuMemMap", 0)                                                                            \
    X(cuMemUnmap, "cuMemUnmap", 0)                                                                        \
    X(cuMemSetAccess, "cuMemSetAccess", 0)                                                                \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 0)                                  \
    X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 0)                                      \
    X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 0)                                    \
    X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 0)                                \
    X(cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", 0)

typedef struct nixl_cuda_api {
#define NIXL_CUDA_FIELD_(fn, sym, req) __typeof__(fn) *fn;
    NIXL_CUDA_FUNCTIONS(NIXL_CUDA_FIELD_)
#undef NIXL_CUDA_FIELD_
    int driver_version;
    int device_count;
} nixl_cuda_api_t;

#endif
