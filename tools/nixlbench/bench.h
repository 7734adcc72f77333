/*
 * bench.h - what the pieces of nixlbench share: the options, the test
 * pattern and layout permutation both processes recompute from a seed, the
 * notification inbox, timing and the fatal-error helpers.
 *
 * nixlbench uses only the public API (nixl.h); nothing here reaches into
 * the library's internals.
 */
#ifndef NIXLBENCH_BENCH_H
#define NIXLBENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "nixl.h"

#define BENCH_MAX_ROWS 4096
#define BENCH_MSG_MAX 256

typedef enum { BENCH_ALLOC_NIXL = 0, BENCH_ALLOC_MALLOC = 1 } bench_alloc_t;
typedef enum { BENCH_MEM_DRAM = 0, BENCH_MEM_VRAM = 1 } bench_mem_t;

/* The KV replay (--kv-replay): DeepSeek-V2-Lite's MLA cache of one 8,192-token
 * request, page size 1, one buffer per layer (docs: workloads.md). */
#define BENCH_KV_LAYERS 27
#define BENCH_KV_TOKENS 8192
#define BENCH_KV_TOKEN_BYTES 1152
typedef enum { BENCH_LAYOUT_SHUFFLED = 0, BENCH_LAYOUT_CONTIG = 1 } bench_layout_t;
/* --etcd: who initiates to whom among the ranks (bench_etcd.c) */
typedef enum { BENCH_SCHEME_PAIRWISE = 0, BENCH_SCHEME_MANY_TO_ONE = 1, BENCH_SCHEME_ONE_TO_MANY = 2 } bench_scheme_t;

typedef struct bench_opts {
    const char *backend;
    nixl_op_t op;
    bench_alloc_t alloc;
    bench_layout_t layout;
    uint64_t block_min, block_max; /* equal when not a sweep */
    uint64_t batch_min, batch_max;
    uint64_t iters;                /* 0: chosen per row */
    uint64_t pairs;                /* library/limit measurements interleaved per row (A B A B ...); 0: default */
    uint64_t warmup;
    uint64_t max_bytes;            /* largest block*batch a row may use */
    uint64_t seed;
    uint32_t timeout_ms;           /* waiting for the target's answers */
    uint32_t target_poll_us;       /* target's sleep between idle polls */
    nixl_param_t params[16]; /* --param KEY=VALUE, given to the backend on both sides */
    size_t num_params;
    char param_keys[16][64];
    const char *json_path;
    int quiet;
    /* memory of each side: DRAM, or VRAM on a GPU (ordinal in that process) */
    bench_mem_t init_mem, tgt_mem;
    int init_dev, tgt_dev;
    const char *perftest; /* --perftest: ucx rows' limit binary, "none", or NULL (ucx_perftest on PATH) */
    int kv_replay;
    int kv_e2e; /* --kv-e2e: the replay, then whole requests in the engines' shapes */
    /* connection */
    int is_target;
    const char *peer_ip; /* NULL: spawn the target locally */
    uint16_t peer_port;
    uint16_t listen_port; /* target role */
    int report_fd;        /* target role: where to write "port N" (-1: stdout) */
    /* etcd mode (bench_etcd.c): N processes coordinated through etcd */
    const char *etcd_url; /* NULL: not this mode */
    uint32_t ranks;
    bench_scheme_t scheme;
    const char *run_id;
} bench_opts_t;

/* A backend parameter of the rows, as the backend will see it: --param
 * KEY=VALUE, else the environment's env (NIXL_<BACKEND>_<KEY>), else def.
 * Inline: bench_ucx.c is also built alone (tests/unit/nixlbench). */
static inline const char *bench_param(const bench_opts_t *o, const char *key, const char *env, const char *def)
{
    for (size_t i = 0; i < o->num_params; i++)
        if (strcmp(o->params[i].key, key) == 0)
            return o->params[i].value;
    const char *v = getenv(env);
    return v ? v : def;
}

/* ---- failure helpers (nixlbench.c) ---- */

/* Print "nixlbench: <what>: <message>" and exit 1; the spawned target is
 * stopped first, then the bench_at_exit handlers run (newest first). */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Run fn at exit, a normal one or bench_die's (which leaves through
 * _exit: the agents are alive there, and a leak check at exit would
 * report what only their backends' own pools still hold). */
void bench_at_exit(void (*fn)(void));
/* Exit 1 naming the call that failed when st is an error. */
void bench_check(nixl_status_t st, const char *call);
/* The spawned target, so a fatal error does not leave it behind. */
void bench_set_child(pid_t pid);
/* 0 while the spawned target runs (or none was spawned), -1 once it died. */
int bench_child_alive(void);
/* Wait up to timeout_ms for the spawned target to exit, driving the agent
 * meanwhile; kill it past that.  0 when it exited with status 0 (or none
 * was spawned). */
int bench_child_reap(nixl_agent_t *agent, uint32_t timeout_ms);

/* ---- time ---- */
uint64_t bench_now_ns(void);

/* ---- pattern and layout (bench_pattern.c) ---- */

/* Byte x of the initiator's buffer in the row with this seed is a fixed
 * function of (seed, x); fill writes [x0, x0+len) of it at p. */
void bench_pattern_fill(uint8_t *p, uint64_t seed, uint64_t x0, size_t len);
/* Index of the first byte of p that differs from the pattern, or -1. */
int64_t bench_pattern_check(const uint8_t *p, uint64_t seed, uint64_t x0, size_t len);
/* slot[i] = target block that initiator block i pairs with: identity for
 * contig, a permutation derived from seed for shuffled.  slot has count
 * entries. */
void bench_layout_slots(bench_layout_t layout, uint64_t seed, uint32_t *slot, size_t count);
/* Seed of one row, derived from the run's seed and the row's number. */
uint64_t bench_row_seed(uint64_t base, uint64_t row);
/* Fill the target's buffer so that, read back through the layout, the
 * initiator's buffer holds the pattern. */
void bench_target_fill(uint8_t *buf, uint64_t seed, uint64_t block, uint64_t batch, bench_layout_t layout);
/* Offset in the target buffer of the first wrong byte after a write, or -1. */
int64_t bench_target_check(const uint8_t *buf, uint64_t seed, uint64_t block, uint64_t batch, bench_layout_t layout);

/* Parse "64K", "1M", "4096" (powers of 1024); 0 on success. */
int bench_parse_size(const char *s, uint64_t *out);
/* "64M" or "1K:64M" (sweep of powers of two); 0 on success. */
int bench_parse_range(const char *s, uint64_t *min_out, uint64_t *max_out);
/* "64 KiB" style for tables. */
void bench_fmt_size(uint64_t v, char *buf, size_t cap);

/* ---- memory (bench_pattern.c) ---- */
void *bench_alloc(bench_alloc_t kind, size_t len);
void bench_free(bench_alloc_t kind, void *p, size_t len);
const char *bench_alloc_name(bench_alloc_t kind);
const char *bench_layout_name(bench_layout_t layout);

/* ---- notification inbox (bench_notif.c) ---- */

typedef struct bench_msg {
    char sender[NIXL_NAME_MAX + 1];
    char text[BENCH_MSG_MAX]; /* NUL-terminated; longer messages are cut */
} bench_msg_t;

/* Collect every pending notification of the agent into the inbox. */
void bench_inbox_poll(nixl_agent_t *agent);
/* Pop the oldest message, 0 when there was one. */
int bench_inbox_pop(bench_msg_t *msg_out);
/* Wait for a message whose text starts with one of the prefixes (others
 * are dropped with a warning); exits on timeout or when the spawned target
 * dies. */
void bench_inbox_wait(nixl_agent_t *agent, const char *const *prefixes, size_t n, uint32_t timeout_ms,
                      bench_msg_t *msg_out);
void bench_notif_send(nixl_agent_t *agent, const char *peer, const char *text);

/* ---- the two roles ---- */
int bench_run_target(const bench_opts_t *o);
int bench_run_initiator(const bench_opts_t *o, const char *ip, uint16_t port);
/* Every rank of an --etcd run (bench_etcd.c). */
int bench_run_etcd(const bench_opts_t *o);

/* ---- GPU memory (bench_vram.c) ---- */

/* Load the CUDA driver; the number of GPUs.  Exits with a message when there
 * is no driver. */
int bench_vram_init(void);
/* Make GPU dev's primary context current on this thread (and leave it). */
void bench_vram_bind(int dev);
void *bench_vram_alloc(int dev, size_t len);
void bench_vram_free(int dev, void *p);
void bench_vram_put(int dev, void *dst, const void *src, size_t len);
void bench_vram_get(int dev, void *dst, const void *src, size_t len);
void bench_vram_set(int dev, void *dst, uint8_t v, size_t len);
/* Bytes per second of the driver's copy of bytes from src_dev to dst_dev
 * (cuMemcpyPeer across GPUs, cuMemcpyDtoD on one), a mean like the rows. */
double bench_vram_limit(int src_dev, int dst_dev, uint64_t bytes);
const char *bench_vram_limit_name(int src_dev, int dst_dev);
/* DRAM <-> VRAM rows: cuMemcpyHtoD / cuMemcpyDtoH of host memory allocated
 * as the row's, to or from GPU dev. */
double bench_host_limit(int dev, int to_device, uint64_t bytes, bench_alloc_t alloc);
const char *bench_host_limit_name(int to_device);
const char *bench_mem_name(bench_mem_t mem);

/* ---- KV replay (bench_kv.c) ---- */
int bench_kv_run(const bench_opts_t *o, const char *ip, uint16_t port);
/* Target side: "kvalloc" and "kvchk" requests; 1 when m was one of them. */
int bench_kv_target_handle(nixl_agent_t *agent, const bench_msg_t *m);
void bench_kv_target_drop(nixl_agent_t *agent);

/* ---- the raw limit (bench_limits.c) ---- */

/* Bytes per second of one thread's memcpy of the same pieces: batch blocks
 * from a contiguous source to the layout's slots (write) or back (read).
 * src and dst hold at least block*batch bytes. */
double bench_memcpy_limit(uint8_t *dst, const uint8_t *src, uint64_t block, uint64_t batch, const uint32_t *slot,
                          nixl_op_t op);

#endif
