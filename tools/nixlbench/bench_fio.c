/*
 * bench_fio.c - fio beside nixlbench --storage: run fio (posix_spawn, no
 * shell) with the row's pattern and read job 0's rate from its JSON.
 *
 * The reader is deliberately small: it checks that the text from the
 * first '{' is one complete, well-formed JSON object (strings, escapes,
 * numbers, literals, nesting up to 64 levels, every byte inside the given
 * length), then walks to jobs[0].read (or .write) and takes bw_bytes, or
 * io_bytes and runtime.  Escapes in keys are not decoded (fio's keys have
 * none), so a key spelled with an escape never matches.  Anything else is
 * "unreadable", reported in the row, never a crash: this is another
 * program's output, and a stand-in may print anything.
 *
 * fio runs for a fixed time (time_based) on the bench's own file, which it
 * inherits and opens as /proc/self/fd/<fd> (the file is unlinked, and the
 * inherited descriptor is the only name it has), with invalidate=0 so a
 * page-cache row stays a page-cache row.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_fio.h"

extern char **environ;

#define JR_MAX_DEPTH 64
#define FIO_OUT_MAX (8u << 20)   /* fio's JSON for one job is a few KiB */
#define FIO_GRACE_MS 60000u      /* past the job's time, before fio is killed */

/* ---- the JSON reader ---- */

typedef struct jr {
    const char *p, *end;
} jr_t;

static void jr_ws(jr_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/* A string at j->p: its raw bytes between the quotes (escapes checked, not
 * decoded) in *s / *n.  0, or -1 when malformed or cut short. */
static int jr_string(jr_t *j, const char **s, size_t *n)
{
    if (j->p >= j->end || *j->p != '"')
        return -1;
    const char *start = ++j->p;
    while (j->p < j->end) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            *s = start;
            *n = (size_t)(j->p - start);
            j->p++;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            if (++j->p >= j->end)
                return -1;
            c = (unsigned char)*j->p;
            if (c == 'u') {
                if (j->end - j->p < 5)
                    return -1;
                for (int k = 1; k <= 4; k++)
                    if (!isxdigit((unsigned char)j->p[k]))
                        return -1;
                j->p += 4;
            } else if (!c || !strchr("\"\\/bfnrt", c)) {
                return -1;
            }
        }
        j->p++;
    }
    return -1;
}

static int jr_digits(jr_t *j)
{
    const char *s = j->p;
    while (j->p < j->end && isdigit((unsigned char)*j->p))
        j->p++;
    return j->p > s ? 0 : -1;
}

/* A number's syntax at j->p (JSON's grammar); 0, or -1. */
static int jr_number_span(jr_t *j)
{
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end || !isdigit((unsigned char)*j->p))
        return -1;
    if (*j->p == '0')
        j->p++;
    else
        jr_digits(j);
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (jr_digits(j) != 0)
            return -1;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (jr_digits(j) != 0)
            return -1;
    }
    return 0;
}

/* A number's value (at most 63 characters: fio prints integers and short
 * decimals); 0, or -1 when it is not a number or not finite. */
static int jr_number(jr_t *j, double *v)
{
    const char *s = j->p;
    if (jr_number_span(j) != 0)
        return -1;
    size_t n = (size_t)(j->p - s);
    char tmp[64];
    if (n >= sizeof(tmp))
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    *v = strtod(tmp, NULL);
    return isfinite(*v) ? 0 : -1;
}

static int jr_literal(jr_t *j, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
        return -1;
    j->p += n;
    return 0;
}

/* Step over one value of any kind, checking its syntax; 0, or -1. */
static int jr_skip(jr_t *j, int depth)
{
    jr_ws(j);
    if (j->p >= j->end || depth > JR_MAX_DEPTH)
        return -1;
    const char *s;
    size_t n;
    switch (*j->p) {
    case '{':
    case '[': {
        char close = *j->p == '{' ? '}' : ']';
        int object = close == '}';
        j->p++;
        jr_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        }
        for (;;) {
            if (object) {
                jr_ws(j);
                if (jr_string(j, &s, &n) != 0)
                    return -1;
                jr_ws(j);
                if (j->p >= j->end || *j->p != ':')
                    return -1;
                j->p++;
            }
            if (jr_skip(j, depth + 1) != 0)
                return -1;
            jr_ws(j);
            if (j->p >= j->end)
                return -1;
            if (*j->p == close) {
                j->p++;
                return 0;
            }
            if (*j->p != ',')
                return -1;
            j->p++;
        }
    }
    case '"': return jr_string(j, &s, &n);
    case 't': return jr_literal(j, "true");
    case 'f': return jr_literal(j, "false");
    case 'n': return jr_literal(j, "null");
    default: return jr_number_span(j);
    }
}

/* In the object at obj->p (already checked well formed), the value of
 * member key: 1 with *val at it, 0 when there is none (or on a syntax
 * error, which a checked object has not). */
static int jr_member(const jr_t *obj, const char *key, jr_t *val)
{
    jr_t j = *obj;
    jr_ws(&j);
    if (j.p >= j.end || *j.p != '{')
        return 0;
    j.p++;
    size_t klen = strlen(key);
    for (;;) {
        jr_ws(&j);
        const char *s;
        size_t n;
        if (jr_string(&j, &s, &n) != 0)
            return 0;
        jr_ws(&j);
        if (j.p >= j.end || *j.p != ':')
            return 0;
        j.p++;
        jr_ws(&j);
        if (n == klen && memcmp(s, key, n) == 0) {
            *val = j;
            return 1;
        }
        if (jr_skip(&j, 1) != 0)
            return 0;
        jr_ws(&j);
        if (j.p >= j.end || *j.p != ',')
            return 0;
        j.p++;
    }
}

/* Member key of obj as a number >= 0: 1 with *v, 0 absent, -1 not such a number. */
static int jr_member_number(const jr_t *obj, const char *key, double *v)
{
    jr_t val;
    if (!jr_member(obj, key, &val))
        return 0;
    return jr_number(&val, v) == 0 && *v >= 0 ? 1 : -1;
}

int bench_fio_json_read(const char *text, size_t len, int write, bench_fio_result_t *out, const char **why)
{
    const char *brace = text ? memchr(text, '{', len) : NULL;
    if (!brace) {
        *why = "no JSON object in the output";
        return -1;
    }
    jr_t root = {brace, text + len}, check = root;
    if (jr_skip(&check, 0) != 0) {
        *why = "malformed or truncated JSON";
        return -1;
    }
    root.end = check.p; /* text after the object is not fio's JSON */
    jr_t jobs, job;
    if (!jr_member(&root, "jobs", &jobs) || *jobs.p != '[') {
        *why = "no \"jobs\" array";
        return -1;
    }
    job = jobs;
    job.p++;
    jr_ws(&job);
    if (job.p >= job.end || *job.p != '{') {
        *why = "\"jobs\" has no job object";
        return -1;
    }
    double err = 0;
    if (jr_member_number(&job, "error", &err) < 0) {
        *why = "job 0's \"error\" is not a number";
        return -1;
    }
    jr_t dir;
    if (!jr_member(&job, write ? "write" : "read", &dir) || *dir.p != '{') {
        *why = write ? "job 0 has no \"write\" object" : "job 0 has no \"read\" object";
        return -1;
    }
    double bw = 0, io = 0, ms = 0;
    int has_bw = jr_member_number(&dir, "bw_bytes", &bw), has_io = jr_member_number(&dir, "io_bytes", &io),
        has_ms = jr_member_number(&dir, "runtime", &ms);
    if (has_bw < 0 || has_io < 0 || has_ms < 0) {
        *why = "bw_bytes, io_bytes or runtime is not a number >= 0";
        return -1;
    }
    double rate = 0;
    if (has_bw && bw > 0)
        rate = bw;
    else if (has_io && has_ms && ms > 0)
        rate = io * 1000.0 / ms;
    else if (!has_bw && !(has_io && has_ms)) {
        *why = "job 0 has neither bw_bytes nor io_bytes and runtime";
        return -1;
    }
    if (rate <= 0 && err == 0) {
        *why = "job 0 moved no bytes";
        return -1;
    }
    /* fio's errors are errno values; a larger number is kept as one large one. */
    *out = (bench_fio_result_t){.bytes_per_s = rate, .job_error = err > 1e9 ? 1000000000 : (int64_t)err};
    return 0;
}

/* ---- running fio ---- */

const char *bench_fio_status_name(bench_fio_status_t st)
{
    switch (st) {
    case BENCH_FIO_OK: return "ok";
    case BENCH_FIO_ABSENT: return "not installed";
    case BENCH_FIO_FAILED: return "failed";
    case BENCH_FIO_UNREADABLE: return "unreadable";
    }
    return "?";
}

static uint64_t fio_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Everything the child writes to fd until it closes it, at most FIO_OUT_MAX
 * bytes, within deadline (ms, monotonic).  0; -1 past the deadline; -2 too
 * much output; -3 no memory or a read error. */
static int fio_slurp(int fd, uint64_t deadline, char **buf_out, size_t *len_out)
{
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return -3;
    for (;;) {
        uint64_t now = fio_now_ms();
        if (now >= deadline) {
            free(buf);
            return -1;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int rc = poll(&pfd, 1, (int)(deadline - now > 1000 ? 1000 : deadline - now));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0) {
            free(buf);
            return -3;
        }
        if (rc == 0)
            continue;
        if (len == cap) {
            if (cap >= FIO_OUT_MAX) {
                free(buf);
                return -2;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return -3;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            free(buf);
            return -3;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    *buf_out = buf;
    *len_out = len;
    return 0;
}

bench_fio_status_t bench_fio_run(const bench_fio_job_t *job, double *bytes_per_s, char *why, size_t why_len)
{
    int fdflags = fcntl(job->fd, F_GETFD);
    if (fdflags < 0 || (fdflags & FD_CLOEXEC)) {
        snprintf(why, why_len, "the file's descriptor %d is not inherited (closed or close-on-exec)", job->fd);
        return BENCH_FIO_FAILED;
    }
    char a_file[64], a_rw[32], a_bs[48], a_size[48], a_depth[48], a_bsub[64], a_bcmax[64], a_direct[16],
        a_runtime[48];
    snprintf(a_file, sizeof(a_file), "--filename=/proc/self/fd/%d", job->fd);
    snprintf(a_rw, sizeof(a_rw), "--rw=%s", job->write ? "randwrite" : "randread");
    snprintf(a_bs, sizeof(a_bs), "--bs=%llu", (unsigned long long)job->block);
    snprintf(a_size, sizeof(a_size), "--size=%llu", (unsigned long long)job->size);
    snprintf(a_depth, sizeof(a_depth), "--iodepth=%llu", (unsigned long long)job->depth);
    snprintf(a_bsub, sizeof(a_bsub), "--iodepth_batch_submit=%llu", (unsigned long long)job->depth);
    snprintf(a_bcmax, sizeof(a_bcmax), "--iodepth_batch_complete_max=%llu", (unsigned long long)job->depth);
    snprintf(a_direct, sizeof(a_direct), "--direct=%d", job->direct ? 1 : 0);
    snprintf(a_runtime, sizeof(a_runtime), "--runtime=%llums", (unsigned long long)job->ms);
    char *argv[] = {(char *)job->prog, "--name=nixlbench", a_file, a_rw, a_bs, a_size, "--ioengine=io_uring",
                    a_depth, a_bsub, a_bcmax, a_direct, "--invalidate=0", "--time_based=1", a_runtime,
                    "--output-format=json", NULL};
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return BENCH_FIO_FAILED;
    }
    posix_spawn_file_actions_t fa;
    pid_t pid;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0) {
        rc = posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
        if (rc == 0)
            rc = posix_spawnp(&pid, job->prog, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
    }
    close(out[1]);
    if (rc != 0) {
        close(out[0]);
        snprintf(why, why_len, "%s: %s", job->prog, strerror(rc));
        return rc == ENOENT ? BENCH_FIO_ABSENT : BENCH_FIO_FAILED;
    }
    char *text = NULL;
    size_t len = 0;
    int got = fio_slurp(out[0], fio_now_ms() + job->ms + FIO_GRACE_MS, &text, &len);
    close(out[0]);
    if (got == -1 || got == -2)
        kill(pid, SIGKILL); /* our own child: it overran */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got == -1) {
        snprintf(why, why_len, "did not finish within %llu ms (killed)",
                 (unsigned long long)(job->ms + FIO_GRACE_MS));
        return BENCH_FIO_FAILED;
    }
    if (got == -3) {
        snprintf(why, why_len, "reading its output failed");
        return BENCH_FIO_FAILED;
    }
    if (got == -2) {
        snprintf(why, why_len, "more than %u bytes of output", FIO_OUT_MAX);
        return BENCH_FIO_UNREADABLE;
    }
    if (WIFSIGNALED(status) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status))
            snprintf(why, why_len, "killed by signal %d", WTERMSIG(status));
        else
            snprintf(why, why_len, "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        free(text);
        return BENCH_FIO_FAILED;
    }
    bench_fio_result_t res;
    const char *reason = NULL;
    rc = bench_fio_json_read(text, len, job->write, &res, &reason);
    free(text);
    if (rc != 0) {
        snprintf(why, why_len, "%s", reason);
        return BENCH_FIO_UNREADABLE;
    }
    if (res.job_error != 0) {
        snprintf(why, why_len, "job error %lld (%s)", (long long)res.job_error, strerror((int)res.job_error));
        return BENCH_FIO_FAILED;
    }
    *bytes_per_s = res.bytes_per_s;
    return BENCH_FIO_OK;
}
