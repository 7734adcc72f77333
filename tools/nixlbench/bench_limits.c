/*
 * bench_limits.c - the raw limit each row is compared with.
 *
 * A transfer through shared memory is at best one memcpy per descriptor, so
 * the limit is one thread copying the very same pieces (same block size,
 * same count, same layout permutation) between two local buffers.  Its
 * ratio tells what the library costs on top of the copy itself.
 */
#include <string.h>

#include "bench.h"

/* Through a volatile pointer the compiler can neither inline nor drop the
 * copies: we time the libc memcpy a backend would call. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;

static void copy_pass(uint8_t *dst, const uint8_t *src, uint64_t block, uint64_t batch, const uint32_t *slot,
                      nixl_op_t op)
{
    if (op == NIXL_OP_WRITE) {
        for (uint64_t i = 0; i < batch; i++)
            copy_fn(dst + (uint64_t)slot[i] * block, src + i * block, block);
    } else {
        for (uint64_t i = 0; i < batch; i++)
            copy_fn(dst + i * block, src + (uint64_t)slot[i] * block, block);
    }
    __asm__ volatile("" ::: "memory");
}

double bench_memcpy_limit(uint8_t *dst, const uint8_t *src, uint64_t block, uint64_t batch, const uint32_t *slot,
                          nixl_op_t op)
{
    enum { REPS = 5 };
    const uint64_t min_rep_ns = 5000000; /* long enough for the clock to be exact */
    uint64_t bytes = block * batch;
    uint64_t passes = 1;

    /* Calibrate: double the passes until one rep lasts min_rep_ns. */
    for (;;) {
        uint64_t t0 = bench_now_ns();
        for (uint64_t p = 0; p < passes; p++)
            copy_pass(dst, src, block, batch, slot, op);
        if (bench_now_ns() - t0 >= min_rep_ns || passes >= (1ull << 30))
            break;
        passes *= 2;
    }
    /* The transfer's rate is a mean over its iterations, so the limit is a
     * mean too: comparing a mean with a best-of would charge the library
     * for the machine's noise. */
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < REPS; r++)
        for (uint64_t p = 0; p < passes; p++)
            copy_pass(dst, src, block, batch, slot, op);
    uint64_t dt = bench_now_ns() - t0;
    if (dt == 0)
        dt = 1;
    return (double)bytes * (double)passes * REPS * 1e9 / (double)dt;
}
