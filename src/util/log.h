/*
 * log.h - leveled logging for the whole library.
 *
 * NIXL_LOG_LEVEL (error|warn|info|debug|trace, default warn) picks what is
 * printed to stderr.  Check the level before formatting: the macros do.
 * Per-operation warnings go through NIXL_WARN_RATELIMITED so a fallback on
 * every request is reported every time it matters, without flooding.
 */
#ifndef NIXL_UTIL_LOG_H
#define NIXL_UTIL_LOG_H

#include <stdint.h>

#include "nixl/backend_util.h" /* nixl_log_level_t, nixl_ratelimit_t */

/* Reads NIXL_LOG_LEVEL once; later calls are no-ops.  Thread-safe. */
void nixl_log_init(void);
int nixl_log_enabled(nixl_log_level_t level);
void nixl_log_write(nixl_log_level_t level, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For tests: force a level (-1 restores the env value). */
void nixl_log_set_level(int level);

#define NIXL_STR2_(x) #x
#define NIXL_STR_(x) NIXL_STR2_(x)
#define NIXL_LOG(level, ...)                                                                     \
    do {                                                                                         \
        if (nixl_log_enabled(level))                                                             \
            nixl_log_write(level, __FILE__ ":" NIXL_STR_(__LINE__), __VA_ARGS__);                \
    } while (0)
#define NIXL_ERROR(...) NIXL_LOG(NIXL_LOG_ERROR, __VA_ARGS__)
#define NIXL_WARN(...) NIXL_LOG(NIXL_LOG_WARN, __VA_ARGS__)
#define NIXL_INFO(...) NIXL_LOG(NIXL_LOG_INFO, __VA_ARGS__)
#define NIXL_DEBUG(...) NIXL_LOG(NIXL_LOG_DEBUG, __VA_ARGS__)
#define NIXL_TRACE(...) NIXL_LOG(NIXL_LOG_TRACE, __VA_ARGS__)

/* A warning limited by *rl (a static or per-object nixl_ratelimit_t); when
 * messages were dropped since the last one, a second line says how many. */
#define NIXL_WARN_RATELIMITED(rl, interval_ns, ...)                                              \
    do {                                                                                         \
        uint64_t nixl_rl_dropped_;                                                               \
        if (nixl_log_enabled(NIXL_LOG_WARN) && nixl_ratelimit_pass((rl), (interval_ns), &nixl_rl_dropped_)) { \
            nixl_log_write(NIXL_LOG_WARN, __FILE__ ":" NIXL_STR_(__LINE__), __VA_ARGS__);         \
            if (nixl_rl_dropped_ != 0)                                                           \
                nixl_log_write(NIXL_LOG_WARN, __FILE__ ":" NIXL_STR_(__LINE__),                  \
                               "(%llu similar messages suppressed)", (unsigned long long)nixl_rl_dropped_); \
        }                                                                                        \
    } while (0)

#endif
