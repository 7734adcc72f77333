/*
 * config.c - the table of NIXL_* variables and their values.
 *
 * Static rows come from NIXL_CONFIG_LIST; backends' parameters are appended
 * at run time when backends are enumerated.  Appends take a mutex, but
 * readers take none: a row is written before the count that covers it is
 * published (release/acquire), and rows never move or change afterwards.
 * Values are read from the environment on every call, so a test or tool
 * that sets a variable sees it at once.
 */
#include "util/config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/config_vars.h"
#include "util/log.h"
#include "util/str.h"

#define CFG_DYN_MAX 256
#define CFG_NAME_MAX 256

static const nixl_cfg_row_t cfg_static[] = {
#define CFG_ROW_(name, def, doc) {#name, def, doc},
    NIXL_CONFIG_LIST(CFG_ROW_)
#undef CFG_ROW_
};
#define CFG_NUM_STATIC (sizeof(cfg_static) / sizeof(cfg_static[0]))

static nixl_cfg_row_t cfg_dyn[CFG_DYN_MAX];
static size_t cfg_dyn_count; /* atomic: published after the row is written */
static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER;
/* One flag per row: its bad value was warned about. */
static unsigned char cfg_warned[CFG_NUM_STATIC + CFG_DYN_MAX];
static pthread_once_t cfg_env_once = PTHREAD_ONCE_INIT;

size_t nixl_cfg_count(void)
{
    return CFG_NUM_STATIC + __atomic_load_n(&cfg_dyn_count, __ATOMIC_ACQUIRE);
}

const nixl_cfg_row_t *nixl_cfg_row(size_t i)
{
    if (i < CFG_NUM_STATIC)
        return &cfg_static[i];
    i -= CFG_NUM_STATIC;
    if (i < __atomic_load_n(&cfg_dyn_count, __ATOMIC_ACQUIRE))
        return &cfg_dyn[i];
    return NULL;
}

/* Index of the row named by the first len bytes of name, or -1. */
static long cfg_find(const char *name, size_t len)
{
    size_t n = nixl_cfg_count();

    for (size_t i = 0; i < n; i++) {
        const char *rn = nixl_cfg_row(i)->name;
        if (strncmp(rn, name, len) == 0 && rn[len] == '\0')
            return (long)i;
    }
    return -1;
}

const char *nixl_cfg_get(const char *name)
{
    if (name == NULL)
        return NULL;
    long idx = cfg_find(name, strlen(name));
    if (idx < 0)
        return NULL;
    const char *env = getenv(name);
    return env != NULL ? env : nixl_cfg_row((size_t)idx)->def;
}

void nixl_cfg_add(const char *name, const char *def, const char *doc)
{
    if (name == NULL || def == NULL || strncmp(name, "NIXL_", 5) != 0) {
        NIXL_ERROR("configuration row needs a NIXL_* name and a default (got %s)", name ? name : "NULL");
        return;
    }

    pthread_mutex_lock(&cfg_lock);
    long idx = cfg_find(name, strlen(name));
    if (idx >= 0) {
        if (strcmp(nixl_cfg_row((size_t)idx)->def, def) != 0)
            NIXL_DEBUG("%s added twice with different defaults; keeping \"%s\"", name,
                       nixl_cfg_row((size_t)idx)->def);
        goto out_unlock;
    }
    size_t n = __atomic_load_n(&cfg_dyn_count, __ATOMIC_RELAXED);
    if (n == CFG_DYN_MAX) {
        NIXL_ERROR("configuration table full (%d run-time rows); %s not added", CFG_DYN_MAX, name);
        goto out_unlock;
    }
    cfg_dyn[n].name = name;
    cfg_dyn[n].def = def;
    cfg_dyn[n].doc = doc != NULL ? doc : "";
    __atomic_store_n(&cfg_dyn_count, n + 1, __ATOMIC_RELEASE);
out_unlock:
    pthread_mutex_unlock(&cfg_lock);
}

/* The value to parse: the environment's, or NULL to use the default. */
static const char *cfg_env_value(const char *name, long *idx_out)
{
    long idx = name != NULL ? cfg_find(name, strlen(name)) : -1;

    if (idx < 0) {
        NIXL_ERROR("%s is not a configuration variable", name ? name : "NULL");
        *idx_out = -1;
        return NULL;
    }
    *idx_out = idx;
    return getenv(name);
}

static void cfg_warn_bad(long idx, const char *value, const char *what)
{
    if (__atomic_exchange_n(&cfg_warned[idx], 1, __ATOMIC_RELAXED) == 0) {
        const nixl_cfg_row_t *row = nixl_cfg_row((size_t)idx);
        NIXL_WARN("%s=\"%s\" is not %s; using the default \"%s\"", row->name, value, what, row->def);
    }
}

uint64_t nixl_cfg_size(const char *name)
{
    long idx;
    const char *env = cfg_env_value(name, &idx);
    uint64_t v;

    if (idx < 0)
        return 0;
    if (env != NULL) {
        if (nixl_parse_size(env, &v) == 0)
            return v;
        cfg_warn_bad(idx, env, "a size (digits with an optional K, M or G)");
    }
    if (nixl_parse_size(nixl_cfg_row((size_t)idx)->def, &v) == 0)
        return v;
    NIXL_ERROR("default of %s is not a size", name);
    return 0;
}

int nixl_cfg_bool(const char *name)
{
    long idx;
    const char *env = cfg_env_value(name, &idx);
    int v;

    if (idx < 0)
        return 0;
    if (env != NULL) {
        if (nixl_parse_bool(env, &v) == 0)
            return v;
        cfg_warn_bad(idx, env, "a boolean (0/1, yes/no, true/false, on/off)");
    }
    if (nixl_parse_bool(nixl_cfg_row((size_t)idx)->def, &v) == 0)
        return v;
    NIXL_ERROR("default of %s is not a boolean", name);
    return 0;
}

/* The known name closest to 'name' when it is near enough to be a typo. */
static const char *cfg_suggest(const char *name)
{
    size_t len = strlen(name);
    size_t limit = len / 4 > 2 ? len / 4 : 2;
    size_t best = (size_t)-1;
    const char *best_name = NULL;
    size_t n = nixl_cfg_count();

    for (size_t i = 0; i < n; i++) {
        const char *rn = nixl_cfg_row(i)->name;
        size_t d = nixl_edit_distance(name, rn);
        if (d < best) {
            best = d;
            best_name = rn;
        }
    }
    return best <= limit ? best_name : NULL;
}

static void cfg_check_env_once(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *var = *e;
        if (strncmp(var, "NIXL_", 5) != 0)
            continue;
        const char *eq = strchr(var, '=');
        size_t len = eq != NULL ? (size_t)(eq - var) : strlen(var);
        if (cfg_find(var, len) >= 0)
            continue;

        char name[CFG_NAME_MAX];
        const char *hint = NULL;
        if (len < sizeof(name)) {
            memcpy(name, var, len);
            name[len] = '\0';
            hint = cfg_suggest(name);
        }
        if (hint != NULL)
            NIXL_WARN("unknown variable %.*s in the environment; did you mean %s?", (int)len, var, hint);
        else
            NIXL_WARN("unknown variable %.*s in the environment (nixl-info -c lists the known ones)", (int)len,
                      var);
    }
}

void nixl_cfg_check_env(void)
{
    pthread_once(&cfg_env_once, cfg_check_env_once);
}
