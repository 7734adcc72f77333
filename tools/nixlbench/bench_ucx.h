/*
 * bench_ucx.h - the raw limit of nixlbench's ucx rows (bench_ucx.c):
 * ucx_perftest of the same message size, outstanding count and transports,
 * measured in the same run.
 */
#ifndef NIXLBENCH_BENCH_UCX_H
#define NIXLBENCH_BENCH_UCX_H

#include <stdint.h>
#include <stdio.h>

#include "bench.h"

/* 1 when the rows are measured against ucx_perftest: the backend is ucx,
 * host memory is on both sides and a perftest binary is there (--perftest
 * PATH, else ucx_perftest on PATH; --perftest none: never). */
int bench_ucx_wanted(const bench_opts_t *o);
/* For ucx rows of host memory: one "# limit: ..." line saying which limit
 * the rows use (perftest and its UCX_TLS, or memcpy and why). */
void bench_ucx_describe(const bench_opts_t *o, FILE *f);
/* Bytes per second of one perftest run: messages of block bytes, batch
 * outstanding, ucp_put_bw for a WRITE and ucp_get for a READ.  Exits with
 * perftest's own output on failure. */
double bench_ucx_limit(const bench_opts_t *o, uint64_t block, uint64_t batch, nixl_op_t op);
/* The overall bandwidth of perftest's "-f -v" output (a CSV header line
 * naming overall_bw in MB/s of 2^20 bytes, then the numbers), 0 when
 * found. */
int bench_ucx_parse_csv(const char *out, double *bytes_per_s);

#endif
