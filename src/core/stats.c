/*
 * stats.c - path accounting.
 *
 * Every completed request adds to the row of its path (requests, bytes,
 * descriptors after merging, errors, fallbacks).  Every fallback is counted
 * by (path, cause) and warned about, rate-limited per (path, cause) by
 * NIXL_FALLBACK_WARN_MS, so a user sees it every time it keeps happening,
 * not once per process.  Backend threads may report fallbacks, hence the
 * mutex (taken once per completed request, never per descriptor).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/agent.h"
#include "util/config.h"
#include "util/log.h"
#include "util/str.h"

#define STATS_MAX_PATHS 64
#define STATS_MAX_FALLBACKS 128

typedef struct fallback_row {
    nixl_fallback_stat_t s;
    nixl_ratelimit_t rl;
} fallback_row_t;

struct nixl_stats {
    pthread_mutex_t lock;
    nixl_path_stat_t paths[STATS_MAX_PATHS];
    size_t num_paths;
    fallback_row_t fb[STATS_MAX_FALLBACKS];
    size_t num_fb;
};

nixl_stats_t *nixl_stats_create(void)
{
    nixl_stats_t *s = calloc(1, sizeof(*s));
    if (s)
        pthread_mutex_init(&s->lock, NULL);
    return s;
}

void nixl_stats_destroy(nixl_stats_t *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static nixl_path_stat_t *path_row(nixl_stats_t *s, const char *path)
{
    for (size_t i = 0; i < s->num_paths; i++)
        if (strcmp(s->paths[i].path, path) == 0)
            return &s->paths[i];
    if (s->num_paths == STATS_MAX_PATHS)
        return NULL;
    nixl_path_stat_t *r = &s->paths[s->num_paths++];
    nixl_strlcpy(r->path, path, sizeof(r->path));
    return r;
}

void nixl_stats_complete(nixl_stats_t *s, const char *path, int fallback, uint64_t bytes, uint64_t descs, int error)
{
    pthread_mutex_lock(&s->lock);
    nixl_path_stat_t *r = path_row(s, path);
    if (r) {
        r->requests++;
        if (error) {
            r->errors++;
        } else {
            r->bytes += bytes;
            r->descs += descs;
        }
        if (fallback)
            r->fallbacks++;
    }
    pthread_mutex_unlock(&s->lock);
}

void nixl_stats_fallback(nixl_stats_t *s, const char *agent, const char *path, const char *cause)
{
    uint64_t count = 0, suppressed = 0;
    int warn = 0;
    pthread_mutex_lock(&s->lock);
    fallback_row_t *row = NULL;
    for (size_t i = 0; i < s->num_fb && !row; i++)
        if (strcmp(s->fb[i].s.path, path) == 0 && strcmp(s->fb[i].s.cause, cause) == 0)
            row = &s->fb[i];
    if (!row && s->num_fb < STATS_MAX_FALLBACKS) {
        row = &s->fb[s->num_fb++];
        nixl_strlcpy(row->s.path, path, sizeof(row->s.path));
        nixl_strlcpy(row->s.cause, cause, sizeof(row->s.cause));
    }
    if (row) {
        count = ++row->s.count;
        warn = nixl_ratelimit_pass(&row->rl, nixl_cfg_size("NIXL_FALLBACK_WARN_MS") * 1000000ull, &suppressed);
    } else {
        warn = 1;
    }
    pthread_mutex_unlock(&s->lock);
    if (warn)
        NIXL_WARN("agent %s: FALLBACK to %s: %s (%llu times so far%s)", agent, path, cause,
                  (unsigned long long)count, suppressed ? ", some warnings suppressed" : "");
}

NIXL_API nixl_status_t nixl_path_stats(nixl_agent_t *agent, nixl_path_stat_t *out, size_t cap, size_t *count_out)
{
    if (!agent || !count_out || (cap && !out))
        return NIXL_ERR_NULL;
    nixl_stats_t *s = agent->stats;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->num_paths && i < cap; i++)
        out[i] = s->paths[i];
    *count_out = s->num_paths;
    pthread_mutex_unlock(&s->lock);
    return NIXL_OK;
}

NIXL_API nixl_status_t nixl_fallback_stats(nixl_agent_t *agent, nixl_fallback_stat_t *out, size_t cap,
                                           size_t *count_out)
{
    if (!agent || !count_out || (cap && !out))
        return NIXL_ERR_NULL;
    nixl_stats_t *s = agent->stats;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->num_fb && i < cap; i++)
        out[i] = s->fb[i].s;
    *count_out = s->num_fb;
    pthread_mutex_unlock(&s->lock);
    return NIXL_OK;
}
