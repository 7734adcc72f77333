/*
 * lf_fi.c - libfabric, loaded when the first instance is created rather
 * than linked into libnixl.
 *
 * Why: loading libfabric.so.1 costs every process about 200 ms of sleep on
 * Debian (its psm2 and infinipath dependencies wait ~100 ms each in their
 * ELF constructors) and maps ibverbs, efa and psm2.  Linked, every process
 * that loads libnixl paid that, most of them never creating this backend.
 * Now nothing of libfabric is in memory until lf_fi_load() runs, from
 * create (libfabric.c).  The library stays loaded for the life of the
 * process: its providers keep global state and exit handlers.
 *
 * What: the backend calls five functions of the library (fi_getinfo,
 * fi_freeinfo, fi_dupinfo, fi_fabric, fi_strerror), and two more where the
 * library has them (fi_getparams, fi_freeparams: which variables this
 * libfabric defines, lf_rail.c); everything else in
 * <rdma/fi_*.h> is static inline, through the ops tables of the objects
 * those return.  This file defines functions of the same names, hidden
 * (never exported from libnixl), that forward to the library's.  So the
 * call sites, and the headers' inlines (fi_allocinfo calls fi_dupinfo),
 * read as plain libfabric code.  An executable that links libfabric itself
 * as well as libnixl (nixlbench) sees no clash: libnixl.so does not export
 * these names, so the executable binds the library's, and libnixl binds
 * its own.  Where the backend's objects are linked statically (test_lf,
 * libnixl_internal) the executable's definitions win over the library's at
 * link time and, being hidden, are never seen by libfabric.
 *
 * Symbol versions: libfabric versions its symbols, and the older versions
 * of fi_getinfo and friends take an older struct fi_info.  A link binds the
 * default version of the build-time library, which matches the headers we
 * compiled against; a plain dlsym would bind the default of whatever is
 * installed at run time, maybe a newer ABI.  So meson finds, at configure
 * time, the version a link binds for each function (LF_FI_V_<name>,
 * src/backends/libfabric/meson.build) and this file asks for exactly that
 * with dlvsym.  A run-time library without it fails create, as a link
 * would have failed to load.  Without the defines (cross build, detection
 * failed; meson says so) it falls back to dlsym.
 *
 * Failure: a library that does not load, or lacks a function, makes create
 * return NIXL_ERR_NOT_SUPPORTED (as a host without a usable provider does),
 * with one ERROR line naming the library and dlerror(); the rest of libnixl
 * is untouched.  NIXL_LIBFABRIC_LIB (core table) names another library.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "lf_int.h"

#define LF_FI_LIB_DEFAULT "libfabric.so.1"

#ifdef LF_FI_VERSIONED
#define LF_FI_HOW "the build-time library's symbol versions"
#else
#define LF_FI_HOW "the default symbol versions (meson found none)"
#endif
#ifndef LF_FI_V_fi_getinfo
#define LF_FI_V_fi_getinfo NULL
#endif
#ifndef LF_FI_V_fi_freeinfo
#define LF_FI_V_fi_freeinfo NULL
#endif
#ifndef LF_FI_V_fi_dupinfo
#define LF_FI_V_fi_dupinfo NULL
#endif
#ifndef LF_FI_V_fi_fabric
#define LF_FI_V_fi_fabric NULL
#endif
#ifndef LF_FI_V_fi_strerror
#define LF_FI_V_fi_strerror NULL
#endif
#ifndef LF_FI_V_fi_getparams
#define LF_FI_V_fi_getparams NULL
#endif
#ifndef LF_FI_V_fi_freeparams
#define LF_FI_V_fi_freeparams NULL
#endif

static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
    int (*getparams)(struct fi_param **, int *); /* optional: NULL when absent */
    void (*freeparams)(struct fi_param *);
} lf_fi;

enum { LF_FI_UNTRIED = 0, LF_FI_LOADED, LF_FI_FAILED };

/* Written under lf_fi_lock; LF_FI_LOADED is published with release after
 * lf_fi is filled, so the forwarders read the pointers without the lock. */
static pthread_mutex_t lf_fi_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int lf_fi_state;
static int lf_fi_reported;
static char lf_fi_error[512];

static void *lf_fi_sym(void *h, const char *lib, const char *name, const char *version)
{
    dlerror();
#ifdef LF_FI_VERSIONED
    void *p = version ? dlvsym(h, name, version) : dlsym(h, name);
#else
    void *p = dlsym(h, name);
#endif
    if (!p) {
        const char *e = dlerror();
        snprintf(lf_fi_error, sizeof(lf_fi_error), "%s has no %s%s%s (built against another libfabric?): %s", lib,
                 name, version ? "@" : "", version ? version : "", e ? e : "not found");
    }
    return p;
}

/* lf_fi_sym for an optional function: NULL, and no error kept, if absent. */
static void *dlvsym_or_sym(void *h, const char *name, const char *version)
{
#ifdef LF_FI_VERSIONED
    void *p = version ? dlvsym(h, name, version) : dlsym(h, name);
#else
    (void)version;
    void *p = dlsym(h, name);
#endif
    dlerror();
    return p;
}

static int lf_fi_open(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(lf_fi_error, sizeof(lf_fi_error), "cannot load %s: %s", lib, e ? e : "unknown error");
        return -1;
    }
    /* Through void *: ISO C has no cast between object and function pointers. */
#define LF_FI_RESOLVE_(field, name)                                                                          \
    do {                                                                                                     \
        void *p_ = lf_fi_sym(h, lib, #name, LF_FI_V_##name);                                                 \
        if (!p_)                                                                                             \
            goto err_close;                                                                                  \
        memcpy(&lf_fi.field, &p_, sizeof(p_));                                                               \
    } while (0)
    LF_FI_RESOLVE_(getinfo, fi_getinfo);
    LF_FI_RESOLVE_(freeinfo, fi_freeinfo);
    LF_FI_RESOLVE_(dupinfo, fi_dupinfo);
    LF_FI_RESOLVE_(fabric, fi_fabric);
    LF_FI_RESOLVE_(strerror, fi_strerror);
#undef LF_FI_RESOLVE_
    /* Optional, both or neither. */
    void *gp = dlvsym_or_sym(h, "fi_getparams", LF_FI_V_fi_getparams);
    void *fp = dlvsym_or_sym(h, "fi_freeparams", LF_FI_V_fi_freeparams);
    if (gp && fp) {
        memcpy(&lf_fi.getparams, &gp, sizeof(gp));
        memcpy(&lf_fi.freeparams, &fp, sizeof(fp));
    }
    return 0;

err_close:
    memset(&lf_fi, 0, sizeof(lf_fi));
    dlclose(h);
    return -1;
}

nixl_status_t lf_fi_load(const nixl_host_services_t *host)
{
    if (atomic_load_explicit(&lf_fi_state, memory_order_acquire) == LF_FI_LOADED)
        return NIXL_OK;
    pthread_mutex_lock(&lf_fi_lock);
    int state = atomic_load_explicit(&lf_fi_state, memory_order_relaxed);
    if (state == LF_FI_UNTRIED) {
        const char *lib = host->config_get ? host->config_get("NIXL_LIBFABRIC_LIB") : NULL;
        if (!lib || !*lib)
            lib = LF_FI_LIB_DEFAULT;
        state = lf_fi_open(lib) == 0 ? LF_FI_LOADED : LF_FI_FAILED;
        atomic_store_explicit(&lf_fi_state, state, memory_order_release);
        if (state == LF_FI_LOADED)
            NIXL_BE_DEBUG(host, "libfabric: loaded %s, its functions at %s", lib, LF_FI_HOW);
    }
    int report = state == LF_FI_FAILED && !lf_fi_reported;
    if (report)
        lf_fi_reported = 1;
    pthread_mutex_unlock(&lf_fi_lock);
    if (state == LF_FI_LOADED)
        return NIXL_OK;
    /* Once per process; lf_fi_error no longer changes. */
    NIXL_BE_LOG(host, report ? NIXL_LOG_ERROR : NIXL_LOG_DEBUG, "libfabric backend unavailable: %s", lf_fi_error);
    return NIXL_ERR_NOT_SUPPORTED;
}

/* The forwarders.  Before a successful lf_fi_load() nothing of the backend
 * runs (every path goes through an instance), so these only guard against
 * a misuse: they fail instead of calling through NULL. */
static int lf_fi_ready(void)
{
    return atomic_load_explicit(&lf_fi_state, memory_order_acquire) == LF_FI_LOADED;
}

__attribute__((visibility("hidden"))) int fi_getinfo(uint32_t version, const char *node, const char *service,
                                                     uint64_t flags, const struct fi_info *hints,
                                                     struct fi_info **info)
{
    if (!lf_fi_ready())
        return -FI_ENOSYS;
    return lf_fi.getinfo(version, node, service, flags, hints, info);
}

__attribute__((visibility("hidden"))) void fi_freeinfo(struct fi_info *info)
{
    if (lf_fi_ready())
        lf_fi.freeinfo(info);
}

__attribute__((visibility("hidden"))) struct fi_info *fi_dupinfo(const struct fi_info *info)
{
    return lf_fi_ready() ? lf_fi.dupinfo(info) : NULL;
}

__attribute__((visibility("hidden"))) int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
                                                    void *context)
{
    if (!lf_fi_ready())
        return -FI_ENOSYS;
    return lf_fi.fabric(attr, fabric, context);
}

__attribute__((visibility("hidden"))) const char *fi_strerror(int errnum)
{
    return lf_fi_ready() ? lf_fi.strerror(errnum) : "libfabric not loaded";
}

__attribute__((visibility("hidden"))) int fi_getparams(struct fi_param **params, int *count)
{
    if (!lf_fi_ready() || !lf_fi.getparams)
        return -FI_ENOSYS;
    return lf_fi.getparams(params, count);
}

__attribute__((visibility("hidden"))) void fi_freeparams(struct fi_param *params)
{
    if (lf_fi_ready() && lf_fi.freeparams)
        lf_fi.freeparams(params);
}
