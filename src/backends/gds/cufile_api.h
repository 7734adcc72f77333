/*
 * cufile_api.h - the cuFile calls the gds backend resolves at run time.
 *
 * The CI box has no <cufile.h>, and libnixl never links libcufile: gds.c
 * loads libcufile.so.0 with dlopen and fills nixl_cufile_api_t.  The types
 * below are written from cuFile's documented API (the GPUDirect Storage
 * API reference: CUfileError_t, CUfileDescr_t, CUfileDrvProps_t) under our
 * own names; tests/gpu/cufile_layout.c compares every size and offset with
 * the toolkit's <cufile.h> on a machine that has one.
 */
#ifndef NIXL_BACKENDS_GDS_CUFILE_API_H
#define NIXL_BACKENDS_GDS_CUFILE_API_H

#include <stddef.h>
#include <sys/types.h>

/* CUfileError_t: err is a CUfileOpError (CU_FILE_SUCCESS = 0, failures from
 * 5000 on), cu_err the CUresult behind CU_FILE_CUDA_DRIVER_ERROR. */
typedef struct nixl_cufile_error {
    int err;
    int cu_err;
} nixl_cufile_error_t;

#define NIXL_CUFILE_SUCCESS 0
#define NIXL_CUFILE_HANDLE_TYPE_OPAQUE_FD 1 /* CU_FILE_HANDLE_TYPE_OPAQUE_FD */

/* CUfileDescr_t */
typedef struct nixl_cufile_descr {
    int type;
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops; /* NULL: the kernel's file system */
} nixl_cufile_descr_t;

/* CUfileDrvProps_t: what the driver session reports.  nvfs.major_version
 * is 0 when the nvidia-fs kernel driver is absent (compatibility mode). */
typedef struct nixl_cufile_props {
    struct {
        unsigned int major_version;
        unsigned int minor_version;
        size_t poll_thresh_size;
        size_t max_direct_io_size;
        unsigned int dstatusflags;  /* bit per file system kind the driver can do DMA with */
        unsigned int dcontrolflags; /* bit 0 poll mode, 1 compat mode allowed */
    } nvfs;
    unsigned int fflags;
    unsigned int max_device_cache_size;
    unsigned int per_buffer_cache_size;
    unsigned int max_device_pinned_mem_size;
    unsigned int max_batch_io_size;
    unsigned int max_batch_io_timeout_msecs;
} nixl_cufile_props_t;

/* dstatusflags bits (CUfileDriverStatusFlags_t) */
enum {
    NIXL_CUFILE_FS_LUSTRE = 0,
    NIXL_CUFILE_FS_WEKAFS = 1,
    NIXL_CUFILE_FS_NFS = 2,
    NIXL_CUFILE_FS_GPFS = 3,
    NIXL_CUFILE_FS_NVME = 4,
    NIXL_CUFILE_FS_NVMEOF = 5,
    NIXL_CUFILE_FS_SCSI = 6,
    NIXL_CUFILE_FS_BEEGFS = 9,
};

typedef void *nixl_cufile_handle_t;

/* X(field, "symbol", required, return type, parameters) */
#define NIXL_CUFILE_FUNCTIONS(X)                                                                         \
    X(driver_open, "cuFileDriverOpen", 1, nixl_cufile_error_t, (void))                                   \
    X(driver_get_properties, "cuFileDriverGetProperties", 0, nixl_cufile_error_t, (nixl_cufile_props_t *)) \
    X(handle_register, "cuFileHandleRegister", 1, nixl_cufile_error_t,                                   \
      (nixl_cufile_handle_t *, nixl_cufile_descr_t *))                                                   \
    X(handle_deregister, "cuFileHandleDeregister", 1, void, (nixl_cufile_handle_t))                      \
    X(buf_register, "cuFileBufRegister", 1, nixl_cufile_error_t, (const void *, size_t, int))            \
    X(buf_deregister, "cuFileBufDeregister", 1, nixl_cufile_error_t, (const void *))                      \
    X(read, "cuFileRead", 1, ssize_t, (nixl_cufile_handle_t, void *, size_t, off_t, off_t))               \
    X(write, "cuFileWrite", 1, ssize_t, (nixl_cufile_handle_t, const void *, size_t, off_t, off_t))

typedef struct nixl_cufile_api {
#define NIXL_CUFILE_FIELD_(f, sym, req, ret, args) ret(*f) args;
    NIXL_CUFILE_FUNCTIONS(NIXL_CUFILE_FIELD_)
#undef NIXL_CUFILE_FIELD_
} nixl_cufile_api_t;

#endif
