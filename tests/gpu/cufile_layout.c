/*
 * cufile_layout.c - our declarations of cuFile's types
 * (src/backends/gds/cufile_api.h) against the toolkit's <cufile.h>, size
 * and offset of every field the backend passes or reads.  Built only where
 * <cufile.h> is found (the GPU machine), so a mismatch is a build error
 * there; the program itself only says so.
 */
#include <stddef.h>
#include <stdio.h>

#include <cufile.h>

#include "../../src/backends/gds/cufile_api.h"

#define SAME_SIZE(ours, theirs) _Static_assert(sizeof(ours) == sizeof(theirs), #ours " differs from " #theirs)
#define SAME_OFF(ours, f1, theirs, f2)                                                                 \
    _Static_assert(offsetof(ours, f1) == offsetof(theirs, f2), #ours "." #f1 " is not where " #theirs "." #f2 " is")

SAME_SIZE(nixl_cufile_error_t, CUfileError_t);
SAME_OFF(nixl_cufile_error_t, err, CUfileError_t, err);
SAME_OFF(nixl_cufile_error_t, cu_err, CUfileError_t, cu_err);
SAME_SIZE(nixl_cufile_descr_t, CUfileDescr_t);
SAME_OFF(nixl_cufile_descr_t, type, CUfileDescr_t, type);
SAME_OFF(nixl_cufile_descr_t, handle.fd, CUfileDescr_t, handle.fd);
SAME_OFF(nixl_cufile_descr_t, fs_ops, CUfileDescr_t, fs_ops);
SAME_SIZE(nixl_cufile_props_t, CUfileDrvProps_t);
SAME_OFF(nixl_cufile_props_t, nvfs.major_version, CUfileDrvProps_t, nvfs.major_version);
SAME_OFF(nixl_cufile_props_t, nvfs.dstatusflags, CUfileDrvProps_t, nvfs.dstatusflags);
SAME_OFF(nixl_cufile_props_t, nvfs.dcontrolflags, CUfileDrvProps_t, nvfs.dcontrolflags);
SAME_OFF(nixl_cufile_props_t, max_batch_io_size, CUfileDrvProps_t, max_batch_io_size);
_Static_assert(NIXL_CUFILE_HANDLE_TYPE_OPAQUE_FD == CU_FILE_HANDLE_TYPE_OPAQUE_FD, "handle type");
_Static_assert(NIXL_CUFILE_SUCCESS == CU_FILE_SUCCESS, "success");
_Static_assert(NIXL_CUFILE_FS_NVME == CU_FILE_NVME_SUPPORTED && NIXL_CUFILE_FS_NFS == CU_FILE_NFS_SUPPORTED &&
                   NIXL_CUFILE_FS_LUSTRE == CU_FILE_LUSTRE_SUPPORTED && NIXL_CUFILE_FS_BEEGFS == CU_FILE_BEEGFS_SUPPORTED,
               "file system bits");

int main(void)
{
    printf("cufile_layout: our cuFile declarations match <cufile.h>\n");
    return 0;
}
