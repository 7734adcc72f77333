/*
 * fake_fabric.c - a library that has libfabric's five functions, but only
 * at a symbol version no libfabric has (FABRIC_99.0, fake_fabric.map), for
 * test_lf_lazy's "version" case: the backend must refuse it (it resolves
 * each function at its build-time version), where a plain dlsym would bind
 * these.  Each aborts if it is ever called.
 */
#include <stdlib.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#define FAKE_API __attribute__((visibility("default")))

FAKE_API int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                        const struct fi_info *hints, struct fi_info **info)
{
    abort();
}

FAKE_API void fi_freeinfo(struct fi_info *info)
{
    abort();
}

FAKE_API struct fi_info *fi_dupinfo(const struct fi_info *info)
{
    abort();
}

FAKE_API int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    abort();
}

FAKE_API const char *fi_strerror(int errnum)
{
    abort();
}
