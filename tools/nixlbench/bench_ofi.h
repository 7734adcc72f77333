/*
 * bench_ofi.h - the raw libfabric limit of nixlbench's libfabric rows
 * (bench_ofi.c): the same provider moving the same pieces with nothing of
 * the library in between.
 */
#ifndef NIXLBENCH_BENCH_OFI_H
#define NIXLBENCH_BENCH_OFI_H

#include <stdint.h>

#include "bench.h"

/* 1 when the rows are measured against the raw libfabric loop: the backend
 * is libfabric and host memory is on both sides. */
int bench_ofi_wanted(const bench_opts_t *o);
/* Bytes per second of the raw loop: batch pieces of block bytes per
 * iteration, piece i to slot[i] of the target (or back for a read), all in
 * flight at once up to the provider's window, each iteration finished the
 * way the backend finishes a request.  Exits on failure. */
double bench_ofi_limit(const bench_opts_t *o, uint64_t block, uint64_t batch, const uint32_t *slot, nixl_op_t op);
/* The hidden role of the raw target process: nixlbench --ofi-raw-target
 * PROVIDER IFACE COMPLETION BYTES, driven over stdin/stdout. */
int bench_ofi_target_main(int argc, char **argv);

#endif
