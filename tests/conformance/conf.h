/*
 * conf.h - shared pieces of the conformance battery: the case table entry,
 * assertions that end the case process, the per-case context and the
 * "target" peer the cases drive.
 *
 * The target is the agent on the other end of a transfer.  With --procs 1 it
 * lives in the case process; with --procs 2 it lives in a child process
 * (this executable re-run with a hidden role flag) and is driven over a pipe.
 * The cases do not know which: both go through the same command handler.
 */
#ifndef NIXL_CONF_H
#define NIXL_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "nixl.h"

#define CONF_INIT_NAME "conf_init"
#define CONF_TARGET_NAME "conf_target"

/* What a case needs from the backend; missing ones are a visible SKIP. */
enum {
    CONF_NEED_XFER = 1u << 0,  /* transfers to the target (LOCAL or SAME_HOST by procs) */
    CONF_NEED_NOTIF = 1u << 1, /* NIXL_CAP_NOTIF */
    CONF_NEED_PROCS2 = 1u << 2 /* a target in its own process */
};

typedef struct conf_ctx conf_ctx_t;

typedef struct conf_case {
    const char *name;
    void (*fn)(conf_ctx_t *ctx);
    uint32_t needs;
    int shared; /* buffers from nixl_mem_alloc instead of malloc */
    const char *doc;
} conf_case_t;

/* Options of this run (set once by main). */
typedef struct conf_opts {
    const char *backend;
    int procs;
    nixl_mem_t mem;  /* --mem: what every case moves (DRAM, or VRAM on both sides) */
    int dev[2];      /* --devs I,T: GPU of the initiator's and the target's buffers */
    const nixl_backend_info_t *info;
    const char *exe; /* path to re-exec for the target process */
    const char *fault; /* --fault: the NIXL_FAULT spec every agent of the run gets (faults.c) */
    int expect_fault;  /* --expect-fault: a case may end with an error the spec injects */
    int target_netns;        /* --target-netns NAME: that namespace's fd (the target enters it), else -1 */
    const char *target_addr; /* --target-addr IP: where the target's listener is reached (127.0.0.1) */
} conf_opts_t;

extern conf_opts_t conf_opts;

/* The case tables, one per file of cases. */
extern const conf_case_t conf_cases_reg[];
extern const size_t conf_cases_reg_count;
extern const conf_case_t conf_cases_xfer[];
extern const size_t conf_cases_xfer_count;
extern const conf_case_t conf_cases_many[];
extern const size_t conf_cases_many_count;

/* ---- assertions: a failure prints where and why, then ends the case ---- */
void conf_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
void conf_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void conf_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A failure about status st.  With --expect-fault and st an error the
 * spec injects, the case instead ends as FAULT (accepted) once the target
 * confirmed no notification arrived for a failed transfer (faults.c). */
void conf_fail_st(nixl_status_t st, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond))                                                                             \
            conf_fail(__FILE__, __LINE__, "check failed: %s", #cond);                            \
    } while (0)

#define CHECK_ST(expr, want)                                                                     \
    do {                                                                                         \
        nixl_status_t st_got_ = (expr);                                                          \
        nixl_status_t st_want_ = (want);                                                         \
        if (st_got_ != st_want_)                                                                 \
            conf_fail_st(st_got_, __FILE__, __LINE__, "%s returned %s (%d), want %s (%d)", #expr, \
                      nixl_status_name(st_got_), (int)st_got_, nixl_status_name(st_want_),       \
                      (int)st_want_);                                                            \
    } while (0)

#define CHECK_OK(expr) CHECK_ST(expr, NIXL_OK)

/* An error of any kind (never NIXL_OK nor NIXL_IN_PROG). */
#define CHECK_ERR(expr)                                                                          \
    do {                                                                                         \
        nixl_status_t st_got_ = (expr);                                                          \
        if (st_got_ >= 0)                                                                        \
            conf_fail(__FILE__, __LINE__, "%s returned %s, want an error", #expr,                \
                      nixl_status_name(st_got_));                                                \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                       \
    do {                                                                                         \
        uint64_t eq_a_ = (uint64_t)(a), eq_b_ = (uint64_t)(b);                                   \
        if (eq_a_ != eq_b_)                                                                      \
            conf_fail(__FILE__, __LINE__, "%s = %llu, want %s = %llu", #a,                       \
                      (unsigned long long)eq_a_, #b, (unsigned long long)eq_b_);                 \
    } while (0)

/* Byte-for-byte comparison; a failure names the first differing offset. */
void conf_check_bytes(const char *file, int line, const char *what, const void *got, const void *want,
                      size_t len);
#define CHECK_BYTES(what, got, want, len) conf_check_bytes(__FILE__, __LINE__, what, got, want, len)

/* ---- helpers ---- */
/* Deterministic bytes: byte i of stream 'seed' (independent of where a
 * fill starts, so pieces of one stream can be compared). */
uint8_t conf_pattern_byte(uint64_t seed, uint64_t i);
void conf_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t start);
uint64_t conf_rand(uint64_t *state);
uint64_t conf_now_ms(void);
void conf_sleep_us(unsigned us);

/* Buffers: shared (nixl_mem_alloc) or plain (page-aligned malloc); with
 * --mem vram, device memory on the initiator's GPU (conf_buf_alloc) or the
 * target's (conf_buf_alloc_dev).  Cases touch a buffer's bytes only through
 * its host image: write the image and push it, pull before reading it.
 * With DRAM the image is the buffer itself and push/pull do nothing, so
 * the DRAM battery runs exactly as it always did (mem.c). */
void *conf_buf_alloc(size_t len, int shared);
void *conf_buf_alloc_dev(size_t len, int shared, int dev);
void conf_buf_free(void *p, size_t len, int shared);
uint8_t *conf_buf_host(const void *buf);
void conf_buf_push(const void *buf, size_t off, size_t len);
void conf_buf_pull(const void *buf, size_t off, size_t len);
/* The memory type of this run and the device of the buffer holding addr
 * (0 for DRAM), for descriptor lists. */
nixl_mem_t conf_mem_type(void);
uint32_t conf_buf_dev(uint64_t addr);
/* Set up --mem: 0, 2 for a bad value, or 77 with the reason printed when
 * VRAM is unavailable (probe: ask a child process whether there are GPUs). */
int conf_mem_init(const char *mem, const char *devs, int probe);
/* The --mem and --devs of this run, for the target process's command line. */
const char *conf_mem_arg(void);
const char *conf_devs_arg(void);

/* Agent with the backend under test created in it. */
nixl_agent_t *conf_agent_create(const char *name, int listen, nixl_backend_t **backend_out);
nixl_status_t conf_register(nixl_agent_t *agent, void *addr, size_t len);
nixl_status_t conf_deregister(nixl_agent_t *agent, void *addr, size_t len);

/* Poll a request until it leaves IN_PROG; NIXL_ERR_TIMEOUT after timeout_ms. */
nixl_status_t conf_wait(nixl_xfer_t *xfer, unsigned timeout_ms);

/* Cases make, post, poll and release requests and send notifications
 * through these (same arguments as nixl_*): they keep count of which
 * requests carrying a notification succeeded, so that the target is checked
 * to have received no more notifications than that (faults.c). */
nixl_status_t conf_xfer_create(nixl_agent_t *agent, nixl_op_t op, const nixl_dlist_t *local,
                               const nixl_dlist_t *remote, const char *peer, const nixl_opt_args_t *opt,
                               nixl_xfer_t **xfer_out);
nixl_status_t conf_xfer_make(nixl_agent_t *agent, nixl_op_t op, const nixl_prep_t *local, const uint32_t *local_idx,
                             const nixl_prep_t *remote, const uint32_t *remote_idx, size_t count,
                             const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out);
nixl_status_t conf_xfer_create_indexed(nixl_agent_t *agent, nixl_op_t op, const nixl_indexed_t *local,
                                       const nixl_indexed_t *remote, size_t nslots, uint64_t item_len,
                                       const char *peer, const nixl_opt_args_t *opt, nixl_xfer_t **xfer_out);
nixl_status_t conf_xfer_post(nixl_xfer_t *xfer);
nixl_status_t conf_xfer_status(nixl_xfer_t *xfer);
void conf_xfer_release(nixl_xfer_t *xfer);
nixl_status_t conf_notif_send(nixl_agent_t *agent, const char *peer, const void *msg, size_t len,
                              const nixl_opt_args_t *opt);

/* ---- the per-case context ---- */
typedef struct conf_target conf_target_t;

struct conf_ctx {
    const conf_case_t *c;
    int shared;
    nixl_agent_t *agent; /* the initiator, CONF_INIT_NAME */
    nixl_backend_t *backend;
    conf_target_t *tgt;
    uint64_t tgt_addr; /* the target's registered buffer, in its address space */
    size_t tgt_len;
};

/* Start the target with one registered buffer of len bytes filled with
 * stream 'seed', then exchange metadata both ways (blobs in one process,
 * the target's listener across processes). */
void conf_target_start(conf_ctx_t *ctx, size_t len, uint64_t seed);
/* Exchange metadata again (the peer gets a new generation). */
void conf_target_exchange(conf_ctx_t *ctx);
/* Exit the target, checking it ended cleanly. */
void conf_target_stop(conf_ctx_t *ctx);

/* The target's buffer [off, off+len) must equal want. */
void conf_target_expect(conf_ctx_t *ctx, size_t off, const void *want, size_t len);
void conf_target_fill(conf_ctx_t *ctx, size_t off, size_t len, uint64_t seed);
void conf_target_get(conf_ctx_t *ctx, size_t off, size_t len, void *out);

/* Wait up to timeout_ms for the next notification to the target.  When
 * want != NULL the target compares its buffer [off, off+len) with want at
 * the moment it sees the notification.  Returns 0 and fills msg/sender, or
 * -1 on timeout.  *msg_out is malloc'd. */
typedef struct conf_notif {
    char sender[NIXL_NAME_MAX + 1];
    void *msg;
    size_t len;
} conf_notif_t;
int conf_target_wait_notif(conf_ctx_t *ctx, unsigned timeout_ms, size_t off, const void *want, size_t len,
                           conf_notif_t *out);
/* Notifications the target received within window_ms (queued ones count). */
size_t conf_target_count_notifs(conf_ctx_t *ctx, unsigned window_ms);
/* The target sends a notification to the initiator. */
nixl_status_t conf_target_send_notif(conf_ctx_t *ctx, const void *msg, size_t len);
/* nixl_md_check_remote on the target for the initiator. */
nixl_status_t conf_target_check_peer(conf_ctx_t *ctx);
/* The target's metadata blob (malloc'd). */
void conf_target_md_get(conf_ctx_t *ctx, void **blob_out, size_t *len_out);
/* Load a blob into the target; returns the status and the name it gave. */
nixl_status_t conf_target_md_load(conf_ctx_t *ctx, const void *blob, size_t len, char name_out[NIXL_NAME_MAX + 1]);
/* --procs 2 only: SIGKILL the target process and reap it. */
void conf_target_kill(conf_ctx_t *ctx);

/* ---- fault mode (faults.c) ---- */
/* Check --fault / --expect-fault, export NIXL_FAULT for every process of
 * the run, and set up the counters the case processes share.  0, or 2 with
 * the reason printed. */
int conf_fault_init(void);
/* The case process starts / ends case ctx: at the end, notifications the
 * target still holds are counted and must not exceed the successful
 * transfers that carried one. */
void conf_fault_case_begin(conf_ctx_t *ctx);
void conf_fault_case_end(conf_ctx_t *ctx);
/* The target handed the case n notifications. */
void conf_fault_notifs_seen(size_t n);
/* 1 when st is an error the --fault spec injects and --expect-fault is on. */
int conf_fault_is_injected(nixl_status_t st);
/* Exit status of a case that ended with an injected error. */
#define CONF_EXIT_FAULT 3
/* The runner's closing lines: what was injected and observed; non-zero
 * when the run must fail (notifications for failed transfers, or, with
 * --expect-fault, no case ever met an injected error). */
int conf_fault_summary(size_t faulted);

/* The hidden role: serve target commands on these fds until EOF. */
int conf_target_main(int rfd, int wfd);

#endif
