/*
 * ucx_ucp.c - UCX, loaded when the first ucx instance is created rather
 * than linked into the module.
 *
 * Why: the core opens every backend module it finds when a process first
 * lists or creates backends, and libucp brings libucm, which patches the
 * process's mmap, munmap, madvise, brk... as soon as it is loaded.  Linked,
 * every process that uses libnixl for anything (a shm-only engine, nixl-info,
 * the Python package imported beside PyTorch) carried those hooks and UCX's
 * libraries; LeakSanitizer's exit-time tracer crashed in such processes
 * (CI, stop 28).  Now nothing of UCX is in memory until ucx_ucp_load runs,
 * from create (ucx.c), and then for the life of the process.
 *
 * What: the functions listed in ucx_ucp.h, resolved with dlsym on the
 * library's handle (which searches its dependencies too: ucs_status_string
 * and ucs_memory_type_names are libucs's), and ucp_get_version checked
 * against our headers' API version: an older UCX would misread our
 * structures' field masks.  UCX does not version its symbols.
 */
#define UCX_UCP_NO_MACROS
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ucx_ucp.h"

#define UCX_UCP_LIB_DEFAULT "libucp.so.0"

ucx_ucp_api_t ucx_ucp;

enum { UCX_UCP_UNTRIED = 0, UCX_UCP_LOADED, UCX_UCP_FAILED };

/* Written under ucx_ucp_lock; LOADED is published with release after
 * ucx_ucp is filled. */
static pthread_mutex_t ucx_ucp_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int ucx_ucp_state;
static int ucx_ucp_reported;
static char ucx_ucp_error[512];
static char ucx_ucp_lib[256];

static void *ucx_ucp_sym(void *h, const char *lib, const char *name)
{
    dlerror();
    void *p = dlsym(h, name);
    if (!p) {
        const char *e = dlerror();
        snprintf(ucx_ucp_error, sizeof(ucx_ucp_error), "%s has no %s (UCX older than %d.%d?): %s", lib, name,
                 UCP_API_MAJOR, UCP_API_MINOR, e ? e : "not found");
    }
    return p;
}

static int ucx_ucp_open(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(ucx_ucp_error, sizeof(ucx_ucp_error), "cannot load %s: %s", lib, e ? e : "unknown error");
        return -1;
    }
    /* Through void *: ISO C has no cast between object and function pointers. */
#define UCX_UCP_RESOLVE_(f)                                                                        \
    do {                                                                                           \
        void *p_ = ucx_ucp_sym(h, lib, #f);                                                        \
        if (!p_)                                                                                   \
            goto err_close;                                                                        \
        memcpy(&ucx_ucp.f, &p_, sizeof(p_));                                                       \
    } while (0);
    UCX_UCP_FUNCS(UCX_UCP_RESOLVE_)
#undef UCX_UCP_RESOLVE_
    ucx_ucp.ucs_memory_type_names = ucx_ucp_sym(h, lib, "ucs_memory_type_names");
    if (!ucx_ucp.ucs_memory_type_names)
        goto err_close;
    unsigned major = 0, minor = 0, release = 0;
    ucx_ucp.ucp_get_version(&major, &minor, &release);
    if (major != UCP_API_MAJOR || minor < UCP_API_MINOR) {
        snprintf(ucx_ucp_error, sizeof(ucx_ucp_error), "%s is UCX %u.%u.%u; this backend was built for UCX %d.%d or a "
                 "later %d.x", lib, major, minor, release, UCP_API_MAJOR, UCP_API_MINOR, UCP_API_MAJOR);
        goto err_close;
    }
    return 0;

err_close:
    memset(&ucx_ucp, 0, sizeof(ucx_ucp));
    dlclose(h);
    return -1;
}

nixl_status_t ucx_ucp_load(const nixl_host_services_t *host)
{
    if (atomic_load_explicit(&ucx_ucp_state, memory_order_acquire) == UCX_UCP_LOADED)
        return NIXL_OK;
    pthread_mutex_lock(&ucx_ucp_lock);
    int state = atomic_load_explicit(&ucx_ucp_state, memory_order_relaxed);
    if (state == UCX_UCP_UNTRIED) {
        const char *lib = host->config_get ? host->config_get("NIXL_UCX_LIB") : NULL;
        if (!lib || !*lib)
            lib = UCX_UCP_LIB_DEFAULT;
        snprintf(ucx_ucp_lib, sizeof(ucx_ucp_lib), "%s", lib);
        state = ucx_ucp_open(ucx_ucp_lib) == 0 ? UCX_UCP_LOADED : UCX_UCP_FAILED;
        atomic_store_explicit(&ucx_ucp_state, state, memory_order_release);
        if (state == UCX_UCP_LOADED)
            NIXL_BE_DEBUG(host, "ucx: loaded %s (UCX %s)", ucx_ucp_lib, ucx_ucp.ucp_get_version_string());
    }
    int report = state == UCX_UCP_FAILED && !ucx_ucp_reported;
    if (report)
        ucx_ucp_reported = 1;
    pthread_mutex_unlock(&ucx_ucp_lock);
    if (state == UCX_UCP_LOADED)
        return NIXL_OK;
    /* Once per process at ERROR; ucx_ucp_error no longer changes. */
    NIXL_BE_LOG(host, report ? NIXL_LOG_ERROR : NIXL_LOG_DEBUG, "ucx backend unavailable: %s (NIXL_UCX_LIB)",
                ucx_ucp_error);
    return NIXL_ERR_NOT_SUPPORTED;
}
