/*
 * bench_fio.h - fio beside nixlbench --storage (bench_fio.c): run fio with
 * the row's pattern and read its rate from its JSON output.
 *
 * Depends on libc only, so the unit test (tests/unit/nixlbench) builds the
 * reader without the rest of nixlbench.
 */
#ifndef NIXLBENCH_BENCH_FIO_H
#define NIXLBENCH_BENCH_FIO_H

#include <stddef.h>
#include <stdint.h>

typedef enum bench_fio_status {
    BENCH_FIO_OK,
    BENCH_FIO_ABSENT,     /* the program could not be started (not installed) */
    BENCH_FIO_FAILED,     /* it ran and failed: exit status, signal, a job error, timeout */
    BENCH_FIO_UNREADABLE, /* it exited 0 but its output is not the JSON we read */
} bench_fio_status_t;

/* One fio run: job 0 moves block-sized pieces at random offsets of the
 * first size bytes of the file (every piece once per pass, fio's random
 * map), depth in flight through ioengine=io_uring, for ms milliseconds. */
typedef struct bench_fio_job {
    const char *prog; /* "fio" (looked up in PATH) or a path */
    int fd;           /* the file: fio inherits it and opens /proc/self/fd/<fd> */
    int write, direct;
    uint64_t block, size, depth, ms;
} bench_fio_job_t;

/* What fio's JSON says about job 0's reads (or writes). */
typedef struct bench_fio_result {
    double bytes_per_s; /* bw_bytes, else io_bytes / runtime (ms) */
    int64_t job_error;  /* job 0's "error" (0 when fio has none) */
} bench_fio_result_t;

/* Read fio's --output-format=json text (len bytes; any text before the
 * first '{' is skipped; the object must be complete and well formed).
 * 0 and *out on success; -1 with *why (a static string) when the text is
 * malformed, truncated, or lacks the fields (jobs[0].read or .write with
 * bw_bytes, or io_bytes and runtime, moving more than 0 bytes). */
int bench_fio_json_read(const char *text, size_t len, int write, bench_fio_result_t *out, const char **why);

/* Run the job.  BENCH_FIO_OK with *bytes_per_s; otherwise why (a message
 * of at most why_len bytes) says what went wrong. */
bench_fio_status_t bench_fio_run(const bench_fio_job_t *job, double *bytes_per_s, char *why, size_t why_len);

/* "ok", "not installed", "failed", "unreadable". */
const char *bench_fio_status_name(bench_fio_status_t st);

#endif
