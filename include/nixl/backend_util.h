/*
 * nixl/backend_util.h - the backend kit: the small helpers every backend
 * (and the core) needs beside the ABI, one copy of each.
 *
 * Everything here is static inline or a macro, so a backend built as a
 * module stays self-contained: it links nothing of the core's.
 *
 *   logging      NIXL_BE_LOG(host, level, ...) and the NIXL_BE_ERROR/WARN/
 *                INFO/DEBUG/TRACE forms check host->log_enabled() before
 *                formatting; NIXL_BE_LOG_RATELIMITED adds a nixl_ratelimit_t
 *   hot paths    nixl_likely / nixl_unlikely
 *   wire bytes   nixl_put_u16/u32/u64, nixl_get_u16/u32/u64: little-endian,
 *                any alignment (metadata blobs, conn info, frames)
 *   time         nixl_now_ns: CLOCK_MONOTONIC in nanoseconds
 *   processes    nixl_proc_start_time: what tells a pid's process from a
 *                later one of the same pid (the core's peer identity, a
 *                same-host backend's liveness checks)
 *   arrays       NIXL_ARRAY_RESERVE: grow an array by doubling
 *
 * nixl/backend.h includes this header; util/ takes nixl_log_level_t and
 * the rate limiter from here, so core and backends share one definition.
 */
#ifndef NIXL_BACKEND_UTIL_H
#define NIXL_BACKEND_UTIL_H

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NIXL_LOG_ERROR = 0,
    NIXL_LOG_WARN = 1,
    NIXL_LOG_INFO = 2,
    NIXL_LOG_DEBUG = 3,
    NIXL_LOG_TRACE = 4,
} nixl_log_level_t;

#if defined(__GNUC__)
#define nixl_likely(x) __builtin_expect(!!(x), 1)
#define nixl_unlikely(x) __builtin_expect(!!(x), 0)
#else
#define nixl_likely(x) (x)
#define nixl_unlikely(x) (x)
#endif

/* ---- time ---- */

static inline uint64_t nixl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- processes ---- */

/* Field 22 of /proc/<pid>/stat (start time, clock ticks since boot): with
 * the pid it names one process for the life of the boot.  The command
 * name (field 2) may hold spaces and parentheses, so fields are counted
 * from the last ')'.  0 on success, -1 when unreadable. */
static inline int nixl_proc_start_time(uint32_t pid, uint64_t *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n;
    do {
        n = read(fd, buf, sizeof(buf) - 1);
    } while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    /* after ')' come fields 3, 4, ...: skip 19 of them to reach field 22 */
    for (int field = 3; field < 22; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
        if (!*p)
            return -1;
    }
    while (*p == ' ')
        p++;
    if (!isdigit((unsigned char)*p))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || (*end != ' ' && *end != '\n' && *end != '\0'))
        return -1;
    *out = v;
    return 0;
}

/* ---- little-endian fields, any alignment ---- */

static inline void nixl_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void nixl_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void nixl_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t nixl_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t nixl_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t nixl_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- rate limiter ---- */

/* At most one message per interval; the one that passes learns how many
 * were dropped since the last.  Lock-free, any thread; zero-initialized. */
typedef struct nixl_ratelimit {
    uint64_t next_ns;    /* atomic */
    uint64_t suppressed; /* atomic */
} nixl_ratelimit_t;

/* 1 when a message may be printed now (*suppressed_out, when not NULL,
 * gets the number dropped since the last one that passed), else 0. */
static inline int nixl_ratelimit_pass(nixl_ratelimit_t *rl, uint64_t interval_ns, uint64_t *suppressed_out)
{
    uint64_t now = nixl_now_ns();
    uint64_t next = __atomic_load_n(&rl->next_ns, __ATOMIC_RELAXED);
    /* Whoever moves next_ns forward owns this slot; everyone else counts
     * as suppressed, so exactly one caller passes per interval. */
    if (now >= next &&
        __atomic_compare_exchange_n(&rl->next_ns, &next, now + interval_ns, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        uint64_t dropped = __atomic_exchange_n(&rl->suppressed, 0, __ATOMIC_ACQ_REL);
        if (suppressed_out)
            *suppressed_out = dropped;
        return 1;
    }
    __atomic_fetch_add(&rl->suppressed, 1, __ATOMIC_RELAXED);
    return 0;
}

/* ---- logging through the host (nixl_host_services_t of nixl/backend.h) ---- */

#define NIXL_BE_STR2_(x) #x
#define NIXL_BE_STR_(x) NIXL_BE_STR2_(x)
#define NIXL_BE_WHERE_ __FILE__ ":" NIXL_BE_STR_(__LINE__)

/* host: a const nixl_host_services_t *.  Nothing is formatted unless the
 * level is printed. */
#define NIXL_BE_LOG(host, lvl, ...)                                                              \
    do {                                                                                         \
        const nixl_host_services_t *nixl_be_h_ = (host);                                         \
        if (nixl_be_h_->log_enabled(lvl))                                                        \
            nixl_be_h_->log(lvl, NIXL_BE_WHERE_, __VA_ARGS__);                                   \
    } while (0)
#define NIXL_BE_ERROR(host, ...) NIXL_BE_LOG(host, NIXL_LOG_ERROR, __VA_ARGS__)
#define NIXL_BE_WARN(host, ...) NIXL_BE_LOG(host, NIXL_LOG_WARN, __VA_ARGS__)
#define NIXL_BE_INFO(host, ...) NIXL_BE_LOG(host, NIXL_LOG_INFO, __VA_ARGS__)
#define NIXL_BE_DEBUG(host, ...) NIXL_BE_LOG(host, NIXL_LOG_DEBUG, __VA_ARGS__)
#define NIXL_BE_TRACE(host, ...) NIXL_BE_LOG(host, NIXL_LOG_TRACE, __VA_ARGS__)

/* The same, at most once per interval_ns for the limiter rl (a
 * nixl_ratelimit_t *); a second line says how many were dropped. */
#define NIXL_BE_LOG_RATELIMITED(host, lvl, rl, interval_ns, ...)                                 \
    do {                                                                                         \
        const nixl_host_services_t *nixl_be_h_ = (host);                                         \
        uint64_t nixl_be_dropped_ = 0;                                                           \
        if (nixl_be_h_->log_enabled(lvl) && nixl_ratelimit_pass((rl), (interval_ns), &nixl_be_dropped_)) { \
            nixl_be_h_->log(lvl, NIXL_BE_WHERE_, __VA_ARGS__);                                   \
            if (nixl_be_dropped_)                                                                \
                nixl_be_h_->log(lvl, NIXL_BE_WHERE_, "(%llu similar messages suppressed)",       \
                                (unsigned long long)nixl_be_dropped_);                           \
        }                                                                                        \
    } while (0)

/* ---- growable arrays ---- */

/* Grow the array whose pointer is stored at slot (a T **, passed as void *)
 * to hold at least need elements of elem bytes: capacity doubles from
 * min_cap.  0 on success (*cap updated), -1 on overflow or out of memory
 * (the array and *cap unchanged).  Use NIXL_ARRAY_RESERVE. */
static inline int nixl_array_grow_(void *slot, size_t *cap, size_t need, size_t elem, size_t min_cap)
{
    size_t ncap = *cap ? *cap : (min_cap ? min_cap : 1);
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            return -1;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem)
        return -1;
    void *old;
    memcpy(&old, slot, sizeof(old)); /* the pointer's bytes: no T ** / void ** aliasing */
    void *p = realloc(old, ncap * elem);
    if (!p)
        return -1;
    memcpy(slot, &p, sizeof(p));
    *cap = ncap;
    return 0;
}

/* Make room for need elements in arr (a T * lvalue) of capacity cap (a
 * size_t lvalue): 0 when there is room, -1 when it could not grow. */
#define NIXL_ARRAY_RESERVE(arr, cap, need, min_cap)                                              \
    ((size_t)(need) <= (cap) ? 0 : nixl_array_grow_(&(arr), &(cap), (size_t)(need), sizeof(*(arr)), (min_cap)))

#ifdef __cplusplus
}
#endif
#endif /* NIXL_BACKEND_UTIL_H */
