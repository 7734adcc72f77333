/*
 * log.c - leveled logging to stderr and the lock-free rate limiter.
 *
 * The level comes from NIXL_LOG_LEVEL, read once.  Each message is formatted
 * into one buffer and handed to a single write() so lines of concurrent
 * threads (and processes sharing the terminal) never interleave.
 */
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/time.h"

#define LOG_DEFAULT_LEVEL NIXL_LOG_WARN
#define LOG_LINE_MAX 2048

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static const char *const level_tags[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
#define LOG_NUM_LEVELS ((int)(sizeof(level_names) / sizeof(level_names[0])))

/* -1 until nixl_log_init ran: the fast path then needs no pthread_once. */
static int log_level = -1;
static int log_env_level = LOG_DEFAULT_LEVEL;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static int level_parse(const char *s)
{
    for (int i = 0; i < LOG_NUM_LEVELS; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

static void log_init_once(void)
{
    const char *env = getenv("NIXL_LOG_LEVEL");
    int bad = 0;

    if (env != NULL && *env != '\0') {
        int lvl = level_parse(env);
        if (lvl >= 0)
            log_env_level = lvl;
        else
            bad = 1;
    }
    __atomic_store_n(&log_level, log_env_level, __ATOMIC_RELEASE);
    /* Only now, so the warning goes through the level just set. */
    if (bad)
        nixl_log_write(NIXL_LOG_WARN, "log", "NIXL_LOG_LEVEL=\"%s\" is not one of error, warn, info, debug, trace; using %s",
                       env, level_names[LOG_DEFAULT_LEVEL]);
}

void nixl_log_init(void)
{
    pthread_once(&log_once, log_init_once);
}

static int log_current_level(void)
{
    int lvl = __atomic_load_n(&log_level, __ATOMIC_ACQUIRE);

    if (__builtin_expect(lvl < 0, 0)) {
        nixl_log_init();
        lvl = __atomic_load_n(&log_level, __ATOMIC_ACQUIRE);
    }
    return lvl;
}

int nixl_log_enabled(nixl_log_level_t level)
{
    return (int)level <= log_current_level();
}

void nixl_log_set_level(int level)
{
    nixl_log_init(); /* so a later first-use does not overwrite the forced level */
    if (level < 0)
        level = log_env_level;
    else if (level >= LOG_NUM_LEVELS)
        level = LOG_NUM_LEVELS - 1;
    __atomic_store_n(&log_level, level, __ATOMIC_RELEASE);
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return; /* nowhere left to report a failing stderr */
        }
        buf += n;
        len -= (size_t)n;
    }
}

void nixl_log_write(nixl_log_level_t level, const char *where, const char *fmt, ...)
{
    char line[LOG_LINE_MAX];
    int saved_errno = errno; /* callers often log, then inspect errno */
    int lvl = (int)level;

    /* Backends reach this through the host services without the macro. */
    if (lvl < 0 || lvl >= LOG_NUM_LEVELS || lvl > log_current_level())
        return;

    int head = snprintf(line, sizeof(line), "nixl[%ld] %s %s: ", (long)getpid(), level_tags[lvl],
                        where != NULL ? where : "?");
    if (head < 0)
        goto out;
    size_t len = (size_t)head < sizeof(line) - 1 ? (size_t)head : sizeof(line) - 1;

    va_list ap;
    va_start(ap, fmt);
    int body = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
    va_end(ap);
    if (body > 0)
        len += (size_t)body < sizeof(line) - len ? (size_t)body : sizeof(line) - len - 1;

    /* One line per message, whatever the caller put at the end. */
    while (len > 0 && line[len - 1] == '\n')
        len--;
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2;
    line[len++] = '\n';

    write_all(STDERR_FILENO, line, len);
out:
    errno = saved_errno;
}
