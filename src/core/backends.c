/*
 * backends.c - where backends come from and how an agent gets one.
 *
 * Built-in backends are compiled into libnixl; modules are shared objects
 * named libnixl_backend_<name>.so found in NIXL_PLUGIN_DIR and then in the
 * install's plugin dir, each exporting NIXL_BACKEND_ENTRY.  The list is made
 * once per process.  An ops struct is accepted only if its ABI version is
 * one we speak and it is at least as large as the version-1 struct, so old
 * modules keep working as the struct grows (members are append-only).
 *
 * This file also builds the host-services table each backend instance gets
 * and resolves its parameters: user value, else NIXL_<BACKEND>_<KEY>, else
 * the declared default.
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/agent.h"
#include "core/be_call.h"
#include "core/fault.h"
#include "cuda/cuda.h"
#include "util/config.h"
#include "util/log.h"
#include "util/str.h"

#ifdef NIXL_BUILTIN_SHM
#include "backends/shm/shm.h"
#endif
#ifdef NIXL_BUILTIN_CUDA_IPC
#include "backends/cuda_ipc/cuda_ipc.h"
#endif
#ifdef NIXL_BUILTIN_LIBFABRIC
#include "backends/libfabric/libfabric.h"
#endif
#ifdef NIXL_BUILTIN_POSIX
#include "backends/posix/posix.h"
#endif
#ifdef NIXL_BUILTIN_GDS
#include "backends/gds/gds.h"
#endif

#ifndef NIXL_INSTALL_PLUGIN_DIR
#define NIXL_INSTALL_PLUGIN_DIR ""
#endif

#define NIXL_MAX_IMPLS 32
#define NIXL_OPS_V1_SIZE (offsetof(nixl_backend_ops_t, progress) + sizeof(((nixl_backend_ops_t *)0)->progress))
#define NIXL_OPS_V2_SIZE (offsetof(nixl_backend_ops_t, peer_open) + sizeof(((nixl_backend_ops_t *)0)->peer_open))

static nixl_backend_impl_t g_impls[NIXL_MAX_IMPLS];
static nixl_backend_info_t g_infos[NIXL_MAX_IMPLS];
static size_t g_num_impls;
static pthread_once_t g_impls_once = PTHREAD_ONCE_INIT;

static int backend_name_valid(const char *name)
{
    size_t n = 0;
    if (!name)
        return 0;
    for (; name[n]; n++)
        if (!(islower((unsigned char)name[n]) || isdigit((unsigned char)name[n]) || name[n] == '_'))
            return 0;
    return n > 0 && n <= 31;
}

static const nixl_backend_impl_t *impl_find(const char *name)
{
    for (size_t i = 0; i < g_num_impls; i++)
        if (strcmp(g_impls[i].ops->name, name) == 0)
            return &g_impls[i];
    return NULL;
}

/* Env name of a backend parameter: NIXL_<NAME>_<KEY>, upper case. */
static void param_env_name(const char *backend, const char *key, char *out, size_t cap)
{
    snprintf(out, cap, "NIXL_%s_%s", backend, key);
    for (char *p = out; *p; p++)
        *p = (char)toupper((unsigned char)*p);
}

static void impl_add(const nixl_backend_ops_t *ops, const char *origin)
{
    if (!ops || ops->abi_version < NIXL_BACKEND_ABI_VERSION_MIN || ops->abi_version > NIXL_BACKEND_ABI_VERSION ||
        ops->struct_size < (ops->abi_version >= 2 ? NIXL_OPS_V2_SIZE : NIXL_OPS_V1_SIZE)) {
        NIXL_WARN("backend from %s ignored: ABI version %u size %u, this library speaks versions %u to %u", origin,
                  ops ? ops->abi_version : 0, ops ? ops->struct_size : 0, NIXL_BACKEND_ABI_VERSION_MIN,
                  NIXL_BACKEND_ABI_VERSION);
        return;
    }
    /* Version 1 loads peers with peer_load, version 2 with peer_open. */
    int peer_op = ops->abi_version >= 2 ? ops->peer_open != NULL : ops->peer_load != NULL;
    if (!backend_name_valid(ops->name) || !ops->create || !ops->destroy || !ops->reg || !ops->dereg ||
        !peer_op || !ops->peer_unload || !ops->rkey_load || !ops->rkey_unload || !ops->xfer_prepare ||
        !ops->xfer_post || !ops->xfer_status || !ops->xfer_release ||
        ((ops->caps & NIXL_CAP_NOTIF) && !ops->notif_send)) {
        NIXL_WARN("backend from %s ignored: bad name or a required op is missing", origin);
        return;
    }
    if (impl_find(ops->name)) {
        NIXL_INFO("backend %s from %s ignored: one of that name is already loaded", ops->name, origin);
        return;
    }
    if (g_num_impls == NIXL_MAX_IMPLS) {
        NIXL_WARN("backend %s from %s ignored: too many backends", ops->name, origin);
        return;
    }
    nixl_backend_impl_t *im = &g_impls[g_num_impls];
    im->ops = ops;
    nixl_strlcpy(im->origin, origin, sizeof(im->origin));
    im->info.name = ops->name;
    im->info.description = ops->description ? ops->description : "";
    im->info.mem_types = ops->mem_types;
    im->info.caps = ops->caps;
    im->info.num_params = ops->num_params;
    im->info.params = ops->params;
    im->info.origin = im->origin;
    g_infos[g_num_impls] = im->info;
    g_num_impls++;

    for (size_t i = 0; i < ops->num_params; i++) {
        char env[128];
        param_env_name(ops->name, ops->params[i].key, env, sizeof(env));
        /* The table keeps the pointer: give it a string that lives forever. */
        char *name = strdup(env);
        if (name)
            nixl_cfg_add(name, ops->params[i].default_value ? ops->params[i].default_value : "",
                         ops->params[i].doc ? ops->params[i].doc : "");
    }
}

static void scan_dir(const char *dir)
{
    if (!dir || !*dir)
        return;
    DIR *d = opendir(dir);
    if (!d) {
        NIXL_DEBUG("plugin dir %s: not readable", dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "libnixl_backend_", 16) != 0 || n < 20 || strcmp(e->d_name + n - 3, ".so") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        /* A module named like a backend we already have is not even opened:
         * loading two copies of one backend (say, a sanitizer build's
         * module next to the built-in one) can break the process. */
        char name[64];
        size_t nlen = n - 16 - 3;
        if (nlen < sizeof(name)) {
            memcpy(name, e->d_name + 16, nlen);
            name[nlen] = 0;
            if (impl_find(name)) {
                NIXL_INFO("backend module %s skipped: backend %s is already loaded", path, name);
                continue;
            }
        }
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            NIXL_WARN("backend module %s: %s", path, dlerror());
            continue;
        }
        nixl_backend_entry_fn fn;
        *(void **)&fn = dlsym(h, NIXL_BACKEND_ENTRY);
        if (!fn) {
            NIXL_WARN("backend module %s: no symbol %s", path, NIXL_BACKEND_ENTRY);
            dlclose(h);
            continue;
        }
        size_t before = g_num_impls;
        impl_add(fn(), path);
        if (g_num_impls == before)
            dlclose(h);
        /* Accepted modules stay loaded for the life of the process. */
    }
    closedir(d);
}

static void impls_init(void)
{
    nixl_log_init();
#ifdef NIXL_BUILTIN_SHM
    impl_add(nixl_backend_shm_ops(), "built-in");
#endif
#ifdef NIXL_BUILTIN_CUDA_IPC
    impl_add(nixl_backend_cuda_ipc_ops(), "built-in");
#endif
#ifdef NIXL_BUILTIN_LIBFABRIC
    impl_add(nixl_backend_libfabric_ops(), "built-in");
#endif
#ifdef NIXL_BUILTIN_POSIX
    impl_add(nixl_backend_posix_ops(), "built-in");
#endif
#ifdef NIXL_BUILTIN_GDS
    impl_add(nixl_backend_gds_ops(), "built-in");
#endif
    /* NIXL_PLUGIN_DIR may list several directories, separated by ':'. */
    const char *env = getenv("NIXL_PLUGIN_DIR");
    while (env && *env) {
        const char *end = strchr(env, ':');
        size_t n = end ? (size_t)(end - env) : strlen(env);
        char dir[512];
        if (n > 0 && n < sizeof(dir)) {
            memcpy(dir, env, n);
            dir[n] = 0;
            scan_dir(dir);
        }
        env = end ? end + 1 : NULL;
    }
    scan_dir(NIXL_INSTALL_PLUGIN_DIR);
}

void nixl_backend_impls(const nixl_backend_impl_t **impls_out, size_t *count_out)
{
    pthread_once(&g_impls_once, impls_init);
    *impls_out = g_impls;
    *count_out = g_num_impls;
}

NIXL_API nixl_status_t nixl_backends_available(const nixl_backend_info_t **infos_out, size_t *count_out)
{
    if (!infos_out || !count_out)
        return NIXL_ERR_NULL;
    const nixl_backend_impl_t *im;
    size_t n;
    nixl_backend_impls(&im, &n);
    *infos_out = g_infos;
    *count_out = n;
    return NIXL_OK;
}

NIXL_API size_t nixl_config_count(void)
{
    const nixl_backend_impl_t *im;
    size_t n;
    nixl_backend_impls(&im, &n);
    return nixl_cfg_count();
}

NIXL_API nixl_status_t nixl_config_get(size_t index, nixl_config_info_t *info_out)
{
    if (!info_out)
        return NIXL_ERR_NULL;
    if (index >= nixl_config_count())
        return NIXL_ERR_INVALID_PARAM;
    const nixl_cfg_row_t *r = nixl_cfg_row(index);
    info_out->name = r->name;
    info_out->default_value = r->def;
    info_out->doc = r->doc;
    info_out->value = nixl_cfg_get(r->name);
    return NIXL_OK;
}

/* ---- host services ---- */

static void host_log(nixl_log_level_t level, const char *where, const char *fmt, ...)
{
    if (!nixl_log_enabled(level))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    nixl_log_write(level, where, "%s", msg);
}

static void host_fallback(void *ctx, const char *path, const char *cause)
{
    nixl_backend_t *b = ctx;
    nixl_stats_fallback(b->agent->stats, b->agent->name, path, cause);
}

/* Any thread, any time between create() and destroy() returning. */
static void host_notif_deliver(void *ctx, const char *sender, const void *msg, size_t len)
{
    nixl_backend_t *b = ctx;
    if (nixl_inbox_push(&b->agent->inbox, sender, msg, len) != NIXL_OK)
        NIXL_ERROR("agent %s: out of memory: notification from %s (%zu bytes) dropped", b->agent->name, sender,
                   len);
}

static size_t host_notif_backlog(void *ctx)
{
    nixl_backend_t *b = ctx;
    pthread_mutex_lock(&b->agent->inbox.lock);
    size_t n = b->agent->inbox.bytes;
    pthread_mutex_unlock(&b->agent->inbox.lock);
    return n;
}

NIXL_API nixl_status_t nixl_backend_create(nixl_agent_t *agent, const char *name, const nixl_param_t *params,
                                           size_t num_params, nixl_backend_t **backend_out)
{
    if (!agent || !name || !backend_out || (num_params && !params))
        return NIXL_ERR_NULL;
    const nixl_backend_impl_t *impls;
    size_t n;
    nixl_backend_impls(&impls, &n);
    const nixl_backend_impl_t *im = impl_find(name);
    if (!im) {
        NIXL_ERROR("agent %s: unknown backend '%s' (nixl-info lists the available ones)", agent->name, name);
        return NIXL_ERR_UNKNOWN_BACKEND;
    }
    const nixl_backend_ops_t *ops = im->ops;

    for (size_t i = 0; i < num_params; i++) {
        int known = 0;
        if (!params[i].key || !params[i].value)
            return NIXL_ERR_NULL;
        for (size_t j = 0; j < ops->num_params; j++)
            known |= strcmp(params[i].key, ops->params[j].key) == 0;
        if (!known) {
            NIXL_ERROR("agent %s: backend %s has no parameter '%s'", agent->name, name, params[i].key);
            return NIXL_ERR_INVALID_PARAM;
        }
    }

    nixl_status_t st = NIXL_OK;
    nixl_agent_lock(agent);
    for (int i = 0; i < agent->num_backends; i++) {
        /* By name: under NIXL_FAULT b->ops is a wrapper's table (fault.c). */
        if (strcmp(agent->backends[i]->ops->name, ops->name) == 0) {
            NIXL_ERROR("agent %s: backend %s already created", agent->name, name);
            st = NIXL_ERR_EXISTS;
            goto out;
        }
    }
    if (agent->num_backends == NIXL_AGENT_MAX_BACKENDS) {
        st = NIXL_ERR_TOO_BIG;
        goto out;
    }

    nixl_param_t resolved[64];
    if (ops->num_params > 64) {
        st = NIXL_ERR_TOO_BIG;
        goto out;
    }
    for (size_t j = 0; j < ops->num_params; j++) {
        const char *v = NULL;
        for (size_t i = 0; i < num_params; i++)
            if (strcmp(params[i].key, ops->params[j].key) == 0)
                v = params[i].value;
        if (!v) {
            char env[128];
            param_env_name(ops->name, ops->params[j].key, env, sizeof(env));
            v = nixl_cfg_get(env);
        }
        resolved[j].key = ops->params[j].key;
        resolved[j].value = v ? v : (ops->params[j].default_value ? ops->params[j].default_value : "");
    }

    nixl_backend_t *b = calloc(1, sizeof(*b));
    if (!b) {
        st = NIXL_ERR_NO_MEMORY;
        goto out;
    }
    b->agent = agent;
    b->ops = ops;
    b->index = agent->num_backends;
    b->reg_mem_types = ops->mem_types;
    if (ops->struct_size >= offsetof(nixl_backend_ops_t, local_mem_types) + sizeof(ops->local_mem_types))
        b->reg_mem_types |= ops->local_mem_types;
    b->host.abi_version = NIXL_BACKEND_ABI_VERSION;
    b->host.struct_size = sizeof(b->host);
    b->host.ctx = b;
    b->host.log_enabled = nixl_log_enabled;
    b->host.log = host_log;
    b->host.config_get = nixl_cfg_get;
    b->host.fallback = host_fallback;
    b->host.notif_deliver = host_notif_deliver;
    b->host.notif_backlog = host_notif_backlog;
    b->host.agent_name = agent->name;
    b->host.cuda = nixl_cuda_host();
    st = ops->create(&b->host, resolved, ops->num_params, &b->be);
    if (st != NIXL_OK) {
        NIXL_ERROR("agent %s: backend %s: create failed: %s", agent->name, name, nixl_strerror(st));
        free(b);
        goto out;
    }
    /* NIXL_FAULT: a bad spec fails here; a rule naming this backend puts
     * the fault-injection wrapper between the core and it (fault.c). */
    st = nixl_fault_install(b);
    if (st != NIXL_OK) {
        nixl_backend_free(b);
        goto out;
    }
    agent->backends[agent->num_backends++] = b;
    st = nixl_registry_add_backend(agent, b);
    if (st != NIXL_OK) {
        agent->backends[--agent->num_backends] = NULL;
        nixl_backend_free(b);
        goto out;
    }
    *backend_out = b;
out:
    nixl_agent_unlock(agent);
    return st;
}

void nixl_backend_free(nixl_backend_t *b)
{
    nixl_fault_uninstall(b);
    b->ops->destroy(b->be);
    free(b);
}

NIXL_API const char *nixl_backend_name(const nixl_backend_t *backend)
{
    return backend ? be_name(backend) : "";
}

/* nixl_backend_describe: describe was appended to the ops after version 1,
 * so a module built before it has a shorter struct and no such member
 * (be_describe says NOT_SUPPORTED then). */
NIXL_API nixl_status_t nixl_backend_describe(nixl_backend_t *backend, char *buf, size_t *len)
{
    if (!backend || !len)
        return NIXL_ERR_NULL;
    size_t n = buf ? *len : 0;
    nixl_agent_lock(backend->agent);
    nixl_status_t st = be_describe(backend, buf, &n);
    nixl_agent_unlock(backend->agent);
    if (st == NIXL_OK && buf && n > *len)
        st = NIXL_ERR_TOO_BIG;
    if (st == NIXL_OK || st == NIXL_ERR_TOO_BIG)
        *len = n;
    return st;
}

/* ---- nixl_mem_query ---- */

/* One FILE descriptor: a path in meta (path mode's "rw:<path>" too), else
 * the fd in dev_id. */
static void mem_query_file(const nixl_desc_t *d, size_t i, nixl_mem_info_t *out)
{
    struct stat st;
    int rc;
    *out = (nixl_mem_info_t){0};
    nixl_file_path_t fp;
    int pm = nixl_file_path_parse(d->meta, d->meta_len, &fp, "memory query", i);
    if (pm < 0)
        return;
    if (pm > 0) {
        rc = stat(fp.path, &st);
    } else if (d->meta_len) {
        char path[4096];
        size_t n = d->meta_len < sizeof(path) - 1 ? d->meta_len : 0;
        if (n == 0 || memchr(d->meta, 0, n))
            return; /* too long, or not a path: not reachable */
        memcpy(path, d->meta, n);
        path[n] = 0;
        rc = stat(path, &st);
    } else {
        rc = fstat((int)d->dev_id, &st);
    }
    if (rc != 0)
        return;
    out->accessible = 1;
    out->size = (uint64_t)st.st_size;
    out->mode = (uint32_t)st.st_mode;
    out->mtime = (int64_t)st.st_mtime;
}

NIXL_API nixl_status_t nixl_mem_query(nixl_agent_t *agent, const nixl_dlist_t *dlist, const char *backend,
                                      nixl_mem_info_t *out)
{
    if (!agent || !backend || !dlist || (!out && dlist->count))
        return NIXL_ERR_NULL;
    nixl_status_t st = NIXL_OK;
    if ((unsigned)dlist->mem_type >= NIXL_MEM_TYPE_COUNT || (dlist->count && !dlist->descs)) {
        NIXL_ERROR("agent %s: memory query: memory type %d or descriptors invalid", agent->name, (int)dlist->mem_type);
        return NIXL_ERR_INVALID_PARAM;
    }
    nixl_agent_lock(agent);
    nixl_backend_t *b = NULL;
    for (int i = 0; i < agent->num_backends && !b; i++)
        if (strcmp(be_name(agent->backends[i]), backend) == 0)
            b = agent->backends[i];
    if (!b) {
        NIXL_ERROR("agent %s: memory query: no backend %s on this agent", agent->name, backend);
        st = NIXL_ERR_UNKNOWN_BACKEND;
    } else if (!(b->reg_mem_types & NIXL_MEM_BIT(dlist->mem_type)) || dlist->mem_type != NIXL_MEM_FILE) {
        NIXL_ERROR("agent %s: memory query: backend %s cannot say anything of memory type %d (FILE only, through "
                   "a backend that takes files)",
                   agent->name, backend, (int)dlist->mem_type);
        st = NIXL_ERR_NOT_SUPPORTED;
    }
    nixl_agent_unlock(agent);
    if (st != NIXL_OK)
        return st;
    for (size_t i = 0; i < dlist->count; i++)
        mem_query_file(&dlist->descs[i], i, &out[i]);
    return NIXL_OK;
}
