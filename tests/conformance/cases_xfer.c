/*
 * cases_xfer.c - conformance cases about transfers and notifications: data
 * lands byte for byte (and nothing else changes), a notification is seen only
 * after its data, the request life cycle (re-post, in flight, cancel), peer
 * generations, dead peers, refused descriptors and path accounting.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

#define XFER_TIMEOUT_MS 20000u

typedef struct piece {
    size_t loff, roff, len;
} piece_t;

typedef struct local_buf {
    uint8_t *p;
    size_t len;
    int shared;
} local_buf_t;

static local_buf_t local_make(conf_ctx_t *ctx, size_t len, uint64_t seed)
{
    local_buf_t b = {.p = conf_buf_alloc(len, ctx->shared), .len = len, .shared = ctx->shared};
    conf_pattern_fill(conf_buf_host(b.p), len, seed, 0);
    conf_buf_push(b.p, 0, len);
    CHECK_OK(conf_register(ctx->agent, b.p, len));
    return b;
}

/* The local buffer's bytes as the cases read them (pulled from VRAM). */
static const uint8_t *local_bytes(const local_buf_t *b)
{
    conf_buf_pull(b->p, 0, b->len);
    return conf_buf_host(b->p);
}

/* Refill the local buffer with stream seed. */
static void local_fill(local_buf_t *b, uint64_t seed)
{
    conf_pattern_fill(conf_buf_host(b->p), b->len, seed, 0);
    conf_buf_push(b->p, 0, b->len);
}

static void local_drop(conf_ctx_t *ctx, local_buf_t *b)
{
    CHECK_OK(conf_deregister(ctx->agent, b->p, b->len));
    conf_buf_free(b->p, b->len, b->shared);
    b->p = NULL;
}

/* Lists for pieces: local descs into lb, remote descs into the target. */
typedef struct lists {
    nixl_desc_t *l, *r;
    nixl_dlist_t ll, rl;
} lists_t;

static lists_t lists_make(const conf_ctx_t *ctx, const local_buf_t *lb, const piece_t *pc, size_t n)
{
    lists_t s;
    s.l = calloc(n ? n : 1, sizeof(*s.l));
    s.r = calloc(n ? n : 1, sizeof(*s.r));
    CHECK(s.l && s.r);
    for (size_t i = 0; i < n; i++) {
        s.l[i].addr = (uint64_t)(uintptr_t)lb->p + pc[i].loff;
        s.l[i].len = pc[i].len;
        s.l[i].dev_id = conf_buf_dev(s.l[i].addr);
        s.r[i].addr = ctx->tgt_addr + pc[i].roff;
        s.r[i].len = pc[i].len;
    }
    s.ll = (nixl_dlist_t){.mem_type = conf_mem_type(), .count = n, .descs = s.l};
    s.rl = (nixl_dlist_t){.mem_type = conf_mem_type(), .count = n, .descs = s.r};
    return s;
}

static void lists_free(lists_t *s)
{
    free(s->l);
    free(s->r);
}

static nixl_xfer_t *xfer_make_pieces(conf_ctx_t *ctx, nixl_op_t op, const local_buf_t *lb, const piece_t *pc,
                                     size_t n, const char *notif)
{
    lists_t s = lists_make(ctx, lb, pc, n);
    nixl_opt_args_t opt = {0};
    if (notif) {
        opt.field_mask = NIXL_OPT_NOTIF;
        opt.notif = notif;
        opt.notif_len = strlen(notif);
    }
    nixl_xfer_t *x = NULL;
    CHECK_OK(conf_xfer_create(ctx->agent, op, &s.ll, &s.rl, CONF_TARGET_NAME, notif ? &opt : NULL, &x));
    CHECK(x != NULL);
    lists_free(&s);
    return x;
}

static void xfer_run(nixl_xfer_t *x)
{
    nixl_status_t s = conf_xfer_post(x);
    if (s != NIXL_OK && s != NIXL_IN_PROG)
        conf_fail_st(s, __FILE__, __LINE__, "nixl_xfer_post: %s", nixl_status_name(s));
    CHECK_OK(conf_wait(x, XFER_TIMEOUT_MS));
}

/* What the target buffer holds after writing pieces of lb over stream tseed. */
static uint8_t *image_after_write(const conf_ctx_t *ctx, uint64_t tseed, const local_buf_t *lb, const piece_t *pc,
                                  size_t n)
{
    uint8_t *img = malloc(ctx->tgt_len);
    CHECK(img != NULL);
    conf_pattern_fill(img, ctx->tgt_len, tseed, 0);
    const uint8_t *local = local_bytes(lb);
    for (size_t i = 0; i < n; i++)
        memcpy(img + pc[i].roff, local + pc[i].loff, pc[i].len);
    return img;
}

static void expect_notif(conf_ctx_t *ctx, const char *want_msg, const uint8_t *img)
{
    conf_notif_t n;
    if (conf_target_wait_notif(ctx, XFER_TIMEOUT_MS, 0, img, img ? ctx->tgt_len : 0, &n))
        conf_fail(__FILE__, __LINE__, "no notification '%s' within %u ms", want_msg, XFER_TIMEOUT_MS);
    if (strcmp(n.sender, CONF_INIT_NAME) != 0)
        conf_fail(__FILE__, __LINE__, "notification from '%s', want '%s'", n.sender, CONF_INIT_NAME);
    if (n.len != strlen(want_msg) || memcmp(n.msg, want_msg, n.len) != 0)
        conf_fail(__FILE__, __LINE__, "notification '%.*s' (%zu bytes), want '%s'", (int)(n.len > 80 ? 80 : n.len),
                  (char *)n.msg, n.len, want_msg);
    free(n.msg);
}

typedef struct init_rx {
    int count;
    char sender[NIXL_NAME_MAX + 1];
    uint8_t msg[64];
    size_t len;
} init_rx_t;

static void init_on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    init_rx_t *rx = arg;
    if (rx->count++ == 0) {
        snprintf(rx->sender, sizeof(rx->sender), "%s", sender);
        rx->len = len < sizeof(rx->msg) ? len : sizeof(rx->msg);
        memcpy(rx->msg, msg, rx->len);
    }
}

static int path_has_backend_prefix(const char *path)
{
    size_t n = strlen(conf_opts.backend);
    return strncmp(path, conf_opts.backend, n) == 0 && path[n] == '.' && path[n + 1] != 0;
}

/* ---- write / read ---- */

static const piece_t write_pieces[] = {
    {0, 8192, 4096},
    {100000, 500000, 50000},
    {600000, (1u << 20) - 1, 1}, /* the last byte of the region */
    {5, 0, 3},                   /* the first bytes */
};

static void case_write(conf_ctx_t *ctx)
{
    size_t n = sizeof(write_pieces) / sizeof(write_pieces[0]);
    conf_target_start(ctx, 1u << 20, 1);
    local_buf_t lb = local_make(ctx, 1u << 20, 2);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, write_pieces, n, NULL);
    xfer_run(x);
    uint8_t *img = image_after_write(ctx, 1, &lb, write_pieces, n);
    conf_target_expect(ctx, 0, img, ctx->tgt_len);

    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK(strcmp(info.backend, conf_opts.backend) == 0);
    if (!path_has_backend_prefix(info.path))
        conf_fail(__FILE__, __LINE__, "path '%s' does not start with '%s.'", info.path, conf_opts.backend);
    CHECK_EQ_U64(info.bytes, 4096 + 50000 + 1 + 3);
    CHECK_EQ_U64(info.descs_in, n);
    CHECK_EQ_U64(info.descs, n);
    CHECK_EQ_U64(info.posts, 1);
    conf_note("path %s", info.path);
    conf_xfer_release(x);
    free(img);
    local_drop(ctx, &lb);
}

static void case_read(conf_ctx_t *ctx)
{
    static const piece_t pc[] = {
        {0, 8192, 4096},
        {100000, 500000, 50000},
        {(1u << 20) - 1, 0, 1},
        {4097, (1u << 20) - 3, 3}, /* destinations never overlap: pieces may land in any order */
    };
    size_t n = sizeof(pc) / sizeof(pc[0]);
    conf_target_start(ctx, 1u << 20, 3);
    local_buf_t lb = local_make(ctx, 1u << 20, 4);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_READ, &lb, pc, n, NULL);
    xfer_run(x);
    uint8_t *want = malloc(lb.len);
    CHECK(want != NULL);
    conf_pattern_fill(want, lb.len, 4, 0);
    for (size_t i = 0; i < n; i++)
        conf_pattern_fill(want + pc[i].loff, pc[i].len, 3, pc[i].roff);
    CHECK_BYTES("local buffer after READ", local_bytes(&lb), want, lb.len);
    /* A READ leaves the target unchanged. */
    conf_pattern_fill(want, ctx->tgt_len, 3, 0);
    conf_target_expect(ctx, 0, want, ctx->tgt_len);

    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK(strcmp(info.backend, conf_opts.backend) == 0);
    CHECK(path_has_backend_prefix(info.path));
    CHECK_EQ_U64(info.bytes, 4096 + 50000 + 1 + 3);
    conf_note("path %s", info.path);
    conf_xfer_release(x);
    free(want);
    local_drop(ctx, &lb);
}

/* The target compares its whole buffer at the moment it sees the
 * notification: every byte must be there already. */
static void case_write_notif(conf_ctx_t *ctx)
{
    size_t len = 8u << 20, np = 64;
    piece_t *pc = calloc(np, sizeof(*pc));
    CHECK(pc != NULL);
    for (size_t i = 0; i < np; i++) {
        /* Reverse order, one hole of 4 KiB per piece: no merging. */
        pc[i].loff = i * (len / np);
        pc[i].roff = (np - 1 - i) * (len / np) + 4096;
        pc[i].len = len / np - 4096;
    }
    conf_target_start(ctx, len, 11);
    local_buf_t lb = local_make(ctx, len, 12);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, np, "kv-ready:1");
    uint8_t *img = image_after_write(ctx, 11, &lb, pc, np);
    nixl_status_t s = conf_xfer_post(x);
    if (s != NIXL_OK && s != NIXL_IN_PROG)
        conf_fail_st(s, __FILE__, __LINE__, "nixl_xfer_post: %s", nixl_status_name(s));
    expect_notif(ctx, "kv-ready:1", img);
    CHECK_OK(conf_wait(x, XFER_TIMEOUT_MS));
    CHECK_EQ_U64(conf_target_count_notifs(ctx, 100), 0); /* exactly one notification */
    conf_xfer_release(x);
    free(img);
    free(pc);
    local_drop(ctx, &lb);
}

static void case_notif_standalone(conf_ctx_t *ctx)
{
    conf_target_start(ctx, 4096, 1);
    size_t sizes[] = {1, 2, 100, 4096, 60000, NIXL_NOTIF_MAX, 3, 5, 7, 11};
    size_t nmsg = sizeof(sizes) / sizeof(sizes[0]);
    uint8_t *msg = malloc(NIXL_NOTIF_MAX + 1);
    CHECK(msg != NULL);
    for (size_t i = 0; i < nmsg; i++) {
        conf_pattern_fill(msg, sizes[i], 100 + i, 0);
        msg[0] = (uint8_t)i; /* order marker; the rest includes zero bytes */
        CHECK_OK(conf_notif_send(ctx->agent, CONF_TARGET_NAME, msg, sizes[i], NULL));
    }
    for (size_t i = 0; i < nmsg; i++) {
        conf_notif_t n;
        if (conf_target_wait_notif(ctx, XFER_TIMEOUT_MS, 0, NULL, 0, &n))
            conf_fail(__FILE__, __LINE__, "notification %zu of %zu did not arrive", i + 1, nmsg);
        CHECK(strcmp(n.sender, CONF_INIT_NAME) == 0);
        conf_pattern_fill(msg, sizes[i], 100 + i, 0);
        msg[0] = (uint8_t)i;
        if (n.len != sizes[i])
            conf_fail(__FILE__, __LINE__, "notification %zu: %zu bytes, want %zu (out of order or cut)", i, n.len,
                      sizes[i]);
        CHECK_BYTES("notification", n.msg, msg, n.len);
        free(n.msg);
    }
    CHECK_ST(conf_notif_send(ctx->agent, CONF_TARGET_NAME, msg, NIXL_NOTIF_MAX + 1, NULL), NIXL_ERR_TOO_BIG);
    CHECK_EQ_U64(conf_target_count_notifs(ctx, 100), 0);
    free(msg);

    /* The other way round. */
    CHECK_OK(conf_target_send_notif(ctx, "pong", 4));
    init_rx_t rx;
    memset(&rx, 0, sizeof(rx));
    uint64_t deadline = conf_now_ms() + XFER_TIMEOUT_MS;
    while (rx.count == 0 && conf_now_ms() < deadline) {
        CHECK_OK(nixl_notifs_get(ctx->agent, init_on_notif, &rx, NULL));
        conf_sleep_us(100);
    }
    if (rx.count != 1)
        conf_fail(__FILE__, __LINE__, "initiator got %d notifications from the target, want 1", rx.count);
    CHECK(strcmp(rx.sender, CONF_TARGET_NAME) == 0);
    CHECK(rx.len == 4 && memcmp(rx.msg, "pong", 4) == 0);
}

/* ---- request life cycle ---- */

/* A completed request can be posted again; data changed in between lands. */
static void case_repost(conf_ctx_t *ctx)
{
    static const piece_t pc[] = {{0, 1000, 3000}, {5000, 9001, 777}};
    conf_target_start(ctx, 64 * 1024, 21);
    local_buf_t lb = local_make(ctx, 64 * 1024, 22);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, 2, "again");
    for (int round = 0; round < 3; round++) {
        if (round > 0)
            local_fill(&lb, 30 + (uint64_t)round);
        uint8_t *img = image_after_write(ctx, 21, &lb, pc, 2);
        xfer_run(x);
        expect_notif(ctx, "again", img);
        free(img);
    }
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.posts, 3);
    CHECK_EQ_U64(info.bytes, 3000 + 777);
    CHECK_EQ_U64(conf_target_count_notifs(ctx, 50), 0);
    conf_xfer_release(x);
    local_drop(ctx, &lb);
}

#define BIG_LEN (64u << 20)

#define BIG_PIECES 64

/* BIG_LEN in 64 pieces in reverse order so nothing merges and the backend has work. */
static void big_pieces(piece_t pc[BIG_PIECES])
{
    for (size_t i = 0; i < BIG_PIECES; i++) {
        pc[i].loff = i * (BIG_LEN / BIG_PIECES);
        pc[i].roff = (BIG_PIECES - 1 - i) * (BIG_LEN / BIG_PIECES);
        pc[i].len = BIG_LEN / BIG_PIECES;
    }
}

static nixl_xfer_t *big_write(conf_ctx_t *ctx, local_buf_t *lb, const char *notif)
{
    piece_t pc[BIG_PIECES];
    big_pieces(pc);
    return xfer_make_pieces(ctx, NIXL_OP_WRITE, lb, pc, BIG_PIECES, notif);
}

static void case_post_in_flight(conf_ctx_t *ctx)
{
    conf_target_start(ctx, BIG_LEN, 41);
    local_buf_t lb = local_make(ctx, BIG_LEN, 42);
    nixl_xfer_t *x = big_write(ctx, &lb, NULL);
    nixl_status_t s = conf_xfer_post(x);
    if (s == NIXL_OK) {
        conf_xfer_release(x);
        local_drop(ctx, &lb);
        conf_skip("a %u MiB WRITE completed inside nixl_xfer_post: no request in flight to post again",
                  BIG_LEN >> 20);
    }
    CHECK_ST(s, NIXL_IN_PROG);
    /* Posted again while the backend still moves it: refused. */
    s = conf_xfer_post(x);
    if (s == NIXL_IN_PROG || s == NIXL_OK) {
        /* The post looked first and found the first one done (a fast
         * backend: ucx over loopback tcp), so this was a re-post, as NIXL
         * allows: nothing in flight to refuse. */
        CHECK_OK(conf_wait(x, XFER_TIMEOUT_MS));
        conf_xfer_release(x);
        local_drop(ctx, &lb);
        conf_skip("the %u MiB WRITE completed between the two posts: no request in flight to post again",
                  BIG_LEN >> 20);
    }
    CHECK_ST(s, NIXL_ERR_IN_FLIGHT);
    CHECK_OK(conf_wait(x, XFER_TIMEOUT_MS));
    /* The failed re-post did not disturb the one in flight. */
    uint8_t *img = malloc(BIG_LEN);
    CHECK(img != NULL);
    const uint8_t *local = local_bytes(&lb);
    for (size_t i = 0; i < 64; i++)
        memcpy(img + (63 - i) * (BIG_LEN / 64), local + i * (BIG_LEN / 64), BIG_LEN / 64);
    conf_target_expect(ctx, 0, img, BIG_LEN);
    free(img);
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.bytes, BIG_LEN);
    conf_xfer_release(x);
    local_drop(ctx, &lb);
}

/* Releasing a request in flight cancels it: its notification never
 * arrives, the target memory is not written after release returns, and the
 * agent keeps working. */
static void case_release_in_flight(conf_ctx_t *ctx)
{
    conf_target_start(ctx, BIG_LEN, 51);
    local_buf_t lb = local_make(ctx, BIG_LEN, 52);
    nixl_xfer_t *x = big_write(ctx, &lb, "canceled");
    nixl_status_t s = conf_xfer_post(x);
    conf_xfer_release(x);
    if (s == NIXL_OK) {
        local_drop(ctx, &lb);
        conf_skip("a %u MiB WRITE completed inside nixl_xfer_post: nothing in flight to cancel", BIG_LEN >> 20);
    }
    CHECK_ST(s, NIXL_IN_PROG);
    /* Overwrite the destination; a late write of the canceled request
     * would show up as damage to this pattern. */
    conf_target_fill(ctx, 0, BIG_LEN, 53);
    conf_sleep_us(200 * 1000);

    static const piece_t pc[] = {{0, 17, 1000}};
    nixl_xfer_t *y = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, 1, "after");
    uint8_t *img = malloc(BIG_LEN);
    CHECK(img != NULL);
    conf_pattern_fill(img, BIG_LEN, 53, 0);
    memcpy(img + 17, local_bytes(&lb), 1000);
    xfer_run(y);
    expect_notif(ctx, "after", img); /* "canceled" first would fail here */
    CHECK_EQ_U64(conf_target_count_notifs(ctx, 300), 0);
    conf_target_expect(ctx, 0, img, BIG_LEN);
    free(img);
    conf_xfer_release(y);
    local_drop(ctx, &lb);
}

/* A deadline (NIXL_OPT_TIMEOUT_MS, 1 ms) shorter than a 64 MiB WRITE.  Each
 * post ends NIXL_OK (every byte there when the notification arrives: it
 * had left before the cancel) or NIXL_ERR_TIMEOUT: then no notification
 * ever arrives, the target's memory is not written after the status said
 * so, and a request without deadline still works.  A DRAM run must see at
 * least one timeout (no backend here moves 64 MiB in 1 ms); VRAM over
 * NVLink may finish first, which is said. */
#define DEADLINE_ROUNDS 4

static void case_deadline(conf_ctx_t *ctx)
{
    conf_target_start(ctx, BIG_LEN, 61);
    local_buf_t lb = local_make(ctx, BIG_LEN, 62);
    enum { NP = BIG_PIECES };
    piece_t pc[NP];
    big_pieces(pc);
    lists_t s = lists_make(ctx, &lb, pc, NP);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF | NIXL_OPT_TIMEOUT_MS, .notif = "dl", .notif_len = 2,
                           .timeout_ms = 1};
    nixl_xfer_t *x = NULL;
    CHECK_OK(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &s.ll, &s.rl, CONF_TARGET_NAME, &opt, &x));
    lists_free(&s);
    nixl_xfer_t *y = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, NP, "after");
    uint8_t *img = image_after_write(ctx, 61, &lb, pc, NP);
    uint8_t *fill = malloc(BIG_LEN);
    CHECK(fill != NULL);
    int timeouts = 0, oks = 0;
    uint64_t max_ms = 0;
    for (int round = 0; round < DEADLINE_ROUNDS; round++) {
        conf_target_fill(ctx, 0, BIG_LEN, 61);
        uint64_t t0 = conf_now_ms();
        nixl_status_t st = conf_xfer_post(x);
        if (st == NIXL_IN_PROG)
            st = conf_wait(x, XFER_TIMEOUT_MS);
        uint64_t ms = conf_now_ms() - t0;
        if (st == NIXL_OK) {
            oks++;
            expect_notif(ctx, "dl", img);
            continue;
        }
        if (st != NIXL_ERR_TIMEOUT)
            conf_fail_st(st, __FILE__, __LINE__, "a post with a 1 ms deadline ended %s", nixl_status_name(st));
        timeouts++;
        max_ms = ms > max_ms ? ms : max_ms;
        if (ms > 10000)
            conf_fail(__FILE__, __LINE__, "NIXL_ERR_TIMEOUT came %llu ms after the post of a 1 ms deadline",
                      (unsigned long long)ms);
        /* Nothing writes the target any more: a fresh pattern stays. */
        conf_target_fill(ctx, 0, BIG_LEN, 63 + (uint64_t)round);
        conf_sleep_us(100 * 1000);
        conf_pattern_fill(fill, BIG_LEN, 63 + (uint64_t)round, 0);
        conf_target_expect(ctx, 0, fill, BIG_LEN);
        CHECK_EQ_U64(conf_target_count_notifs(ctx, 200), 0);
        /* The agent, the peer and the memory still work. */
        conf_target_fill(ctx, 0, BIG_LEN, 61);
        xfer_run(y);
        expect_notif(ctx, "after", img);
    }
    CHECK_EQ_U64(conf_target_count_notifs(ctx, 100), 0);
    conf_note("%d of %d posts timed out (NIXL_ERR_TIMEOUT at most %llu ms after the post), %d completed first",
              timeouts, DEADLINE_ROUNDS, (unsigned long long)max_ms, oks);
    if (timeouts == 0 && conf_mem_type() == NIXL_MEM_DRAM)
        conf_fail(__FILE__, __LINE__, "no 64 MiB WRITE outlived a 1 ms deadline: the deadline was not enforced");
    conf_xfer_release(x);
    conf_xfer_release(y);
    free(fill);
    free(img);
    local_drop(ctx, &lb);
}

/* A series of requests, each with its own notification when it is a
 * WRITE: every one succeeds with exact bytes and exactly its notification,
 * or (with --expect-fault) fails with an injected error, sends nothing, and
 * is posted again until it succeeds.  Small requests complete inside post,
 * large ones on the backend's own time, so faults meet both.  Without
 * faults it is a plain series of transfers. */
#define SERIES_ROUNDS 16
#define SERIES_SLOT (1u << 20)

static void case_series(conf_ctx_t *ctx)
{
    size_t len = (size_t)SERIES_ROUNDS * SERIES_SLOT;
    conf_target_start(ctx, len, 131);
    local_buf_t lb = local_make(ctx, len, 132);
    uint8_t *want = malloc(SERIES_SLOT);
    CHECK(want != NULL);
    unsigned failures = 0;
    for (unsigned i = 0; i < SERIES_ROUNDS; i++) {
        size_t off = (size_t)i * SERIES_SLOT;
        piece_t pc = {off, off, i % 2 ? SERIES_SLOT : 4096 + i};
        int write = i % 4 != 3;
        char msg[32];
        snprintf(msg, sizeof(msg), "series:%u", i);
        nixl_xfer_t *x = xfer_make_pieces(ctx, write ? NIXL_OP_WRITE : NIXL_OP_READ, &lb, &pc, 1, write ? msg : NULL);
        for (unsigned attempt = 1;; attempt++) {
            nixl_status_t s = conf_xfer_post(x);
            if (s == NIXL_IN_PROG)
                s = conf_wait(x, XFER_TIMEOUT_MS);
            if (s == NIXL_OK)
                break;
            /* Anything but an injected error fails; so does a fourth one
             * in a row (as a FAULT end). */
            if (!conf_fault_is_injected(s) || attempt == 4)
                conf_fail_st(s, __FILE__, __LINE__, "round %u attempt %u: %s", i, attempt, nixl_status_name(s));
            failures++;
        }
        if (write) {
            /* The target compares the slot when it sees the notification. */
            conf_pattern_fill(want, pc.len, 132, off);
            conf_notif_t n;
            if (conf_target_wait_notif(ctx, XFER_TIMEOUT_MS, off, want, pc.len, &n))
                conf_fail(__FILE__, __LINE__, "round %u: no notification '%s'", i, msg);
            if (n.len != strlen(msg) || memcmp(n.msg, msg, n.len) != 0)
                conf_fail(__FILE__, __LINE__, "round %u: notification '%.*s', want '%s'", i,
                          (int)(n.len > 40 ? 40 : n.len), (char *)n.msg, msg);
            free(n.msg);
        } else {
            conf_pattern_fill(want, pc.len, 131, off);
            CHECK_BYTES("local slot after READ", local_bytes(&lb) + off, want, pc.len);
        }
        conf_xfer_release(x);
    }
    /* A failed attempt's notification would be left over here. */
    CHECK_EQ_U64(conf_target_count_notifs(ctx, 100), 0);
    uint8_t *img = malloc(len);
    CHECK(img != NULL);
    conf_pattern_fill(img, len, 131, 0);
    for (unsigned i = 0; i < SERIES_ROUNDS; i++)
        if (i % 4 != 3)
            conf_pattern_fill(img + (size_t)i * SERIES_SLOT, i % 2 ? SERIES_SLOT : 4096 + i, 132,
                              (size_t)i * SERIES_SLOT);
    conf_target_expect(ctx, 0, img, len);
    if (failures)
        conf_note("%u injected failure(s), each posted again until it succeeded", failures);
    free(img);
    free(want);
    local_drop(ctx, &lb);
}

/* ---- peer generations ---- */

static void case_peer_invalidated(conf_ctx_t *ctx)
{
    static const piece_t pc[] = {{0, 0, 512}};
    conf_target_start(ctx, 4096, 61);
    local_buf_t lb = local_make(ctx, 4096, 62);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, 1, NULL);
    xfer_run(x);
    CHECK_OK(nixl_md_invalidate_remote(ctx->agent, CONF_TARGET_NAME));
    CHECK_ST(conf_xfer_post(x), NIXL_ERR_PEER_INVALIDATED);
    lists_t l = lists_make(ctx, &lb, pc, 1);
    nixl_xfer_t *y = NULL;
    CHECK_ERR(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &l.ll, &l.rl, CONF_TARGET_NAME, NULL, &y));
    CHECK(y == NULL);
    /* Loaded again: new requests work, the old one stays refused. */
    conf_target_exchange(ctx);
    CHECK_ERR(conf_xfer_post(x));
    CHECK_OK(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &l.ll, &l.rl, CONF_TARGET_NAME, NULL, &y));
    conf_target_fill(ctx, 0, 4096, 63);
    xfer_run(y);
    uint8_t *img = image_after_write(ctx, 63, &lb, pc, 1);
    conf_target_expect(ctx, 0, img, 4096);
    free(img);
    lists_free(&l);
    conf_xfer_release(y);
    conf_xfer_release(x);
    local_drop(ctx, &lb);
}

static void case_reload_stale(conf_ctx_t *ctx)
{
    static const piece_t pc[] = {{0, 100, 1000}};
    conf_target_start(ctx, 4096, 71);
    local_buf_t lb = local_make(ctx, 4096, 72);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, 1, NULL);
    xfer_run(x);
    conf_target_exchange(ctx); /* the peer's metadata again: a new generation */
    CHECK_ST(conf_xfer_post(x), NIXL_ERR_STALE);
    CHECK_ST(conf_xfer_post(x), NIXL_ERR_STALE);
    conf_target_fill(ctx, 0, 4096, 73);
    nixl_xfer_t *y = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, 1, NULL);
    xfer_run(y);
    uint8_t *img = image_after_write(ctx, 73, &lb, pc, 1);
    conf_target_expect(ctx, 0, img, 4096);
    free(img);
    conf_xfer_release(y);
    conf_xfer_release(x);
    local_drop(ctx, &lb);
}

/* ---- exact ranges ---- */

static void case_unaligned(conf_ctx_t *ctx)
{
    static const piece_t wp[] = {
        {1, 3, 1}, {7, 4097, 3}, {8191, 10001, 4097}, {20001, 33333, 511},
        {0, 0, 1}, {65535, 65535, 1}, {30001, 50001, 13},
    };
    static const piece_t rp[] = {{3, 1, 5}, {4099, 7, 17}, {12345, 20000, 1023}, {40001, 65530, 6}, {65535, 0, 1}};
    size_t nw = sizeof(wp) / sizeof(wp[0]), nr = sizeof(rp) / sizeof(rp[0]);
    conf_target_start(ctx, 65536, 81);
    local_buf_t lb = local_make(ctx, 65536, 82);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, wp, nw, NULL);
    xfer_run(x);
    uint8_t *img = image_after_write(ctx, 81, &lb, wp, nw);
    conf_target_expect(ctx, 0, img, 65536);
    conf_xfer_release(x);

    /* READ odd ranges back into a fresh local pattern. */
    local_fill(&lb, 83);
    x = xfer_make_pieces(ctx, NIXL_OP_READ, &lb, rp, nr, NULL);
    xfer_run(x);
    uint8_t *want = malloc(lb.len);
    CHECK(want != NULL);
    conf_pattern_fill(want, lb.len, 83, 0);
    for (size_t i = 0; i < nr; i++)
        memcpy(want + rp[i].loff, img + rp[i].roff, rp[i].len);
    CHECK_BYTES("local buffer after unaligned READ", local_bytes(&lb), want, lb.len);
    conf_xfer_release(x);
    free(want);
    free(img);
    local_drop(ctx, &lb);
}

/* ---- indexed requests ---- */

/* Both 1 MiB buffers as 4 layers of 256 KiB, slots of 1,000 bytes moving
 * 600 (odd sizes, unaligned slots), 64 of 262 slots shuffled on each side:
 * a WRITE lands exactly (the rest of the target unchanged) and its
 * notification arrives after the bytes, a READ of other slots brings the
 * target's bytes back; then each refusal (a slot past the target's end,
 * a stride whose slot x stride overflows, layer counts that differ, no
 * bytes) moves nothing. */
enum { IX_LAYERS = 4, IX_LAYER = 1 << 18, IX_STRIDE = 1000, IX_ITEM = 600, IX_N = 64, IX_SLOTS = 262 };

static void ix_slots(uint32_t *s, uint64_t seed)
{
    uint32_t all[IX_SLOTS];
    for (uint32_t i = 0; i < IX_SLOTS; i++)
        all[i] = i;
    uint64_t st = seed;
    for (uint32_t i = IX_SLOTS - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(conf_rand(&st) % (i + 1)), t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    memcpy(s, all, IX_N * sizeof(*s));
}

static void ix_pieces(piece_t *pc, const uint32_t *ls, const uint32_t *rs)
{
    for (size_t l = 0; l < IX_LAYERS; l++)
        for (size_t t = 0; t < IX_N; t++)
            pc[l * IX_N + t] = (piece_t){.loff = l * IX_LAYER + (size_t)ls[t] * IX_STRIDE,
                                         .roff = l * IX_LAYER + (size_t)rs[t] * IX_STRIDE, .len = IX_ITEM};
}

static void case_indexed(conf_ctx_t *ctx)
{
    conf_target_start(ctx, IX_LAYERS * IX_LAYER, 91);
    local_buf_t lb = local_make(ctx, IX_LAYERS * IX_LAYER, 92);
    uint64_t lbase[IX_LAYERS], rbase[IX_LAYERS];
    for (size_t l = 0; l < IX_LAYERS; l++) {
        lbase[l] = (uint64_t)(uintptr_t)lb.p + l * IX_LAYER;
        rbase[l] = ctx->tgt_addr + l * IX_LAYER;
    }
    uint32_t ls[IX_N], rs[IX_N];
    ix_slots(ls, 93);
    ix_slots(rs, 94);
    nixl_indexed_t L = {conf_mem_type(), IX_LAYERS, lbase, IX_STRIDE, ls};
    nixl_indexed_t R = {conf_mem_type(), IX_LAYERS, rbase, IX_STRIDE, rs};
    static piece_t pc[IX_LAYERS * IX_N];
    ix_pieces(pc, ls, rs);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = "indexed", .notif_len = 7};
    nixl_xfer_t *x = NULL;
    CHECK_OK(conf_xfer_create_indexed(ctx->agent, NIXL_OP_WRITE, &L, &R, IX_N, IX_ITEM, CONF_TARGET_NAME, &opt, &x));
    xfer_run(x);
    uint8_t *img = image_after_write(ctx, 91, &lb, pc, IX_LAYERS * IX_N);
    expect_notif(ctx, "indexed", img);
    conf_target_expect(ctx, 0, img, ctx->tgt_len);
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.descs_in, IX_LAYERS * IX_N);
    CHECK_EQ_U64(info.bytes, (uint64_t)IX_LAYERS * IX_N * IX_ITEM);
    conf_note("path %s, %llu pieces after merging", info.path, (unsigned long long)info.descs);
    conf_xfer_release(x);

    /* READ other slots back into a fresh local pattern. */
    ix_slots(ls, 95);
    ix_slots(rs, 96);
    ix_pieces(pc, ls, rs);
    local_fill(&lb, 97);
    CHECK_OK(conf_xfer_create_indexed(ctx->agent, NIXL_OP_READ, &L, &R, IX_N, IX_ITEM, CONF_TARGET_NAME, NULL, &x));
    xfer_run(x);
    uint8_t *want = malloc(lb.len);
    CHECK(want != NULL);
    conf_pattern_fill(want, lb.len, 97, 0);
    for (size_t i = 0; i < IX_LAYERS * IX_N; i++)
        memcpy(want + pc[i].loff, img + pc[i].roff, pc[i].len);
    CHECK_BYTES("local buffer after an indexed READ", local_bytes(&lb), want, lb.len);
    conf_xfer_release(x);

    /* Refusals: nothing made, nothing moved. */
    x = NULL;
    uint32_t keep = rs[IX_N - 1];
    rs[IX_N - 1] = IX_LAYER / IX_STRIDE + 1; /* past the last layer's end */
    CHECK_ST(conf_xfer_create_indexed(ctx->agent, NIXL_OP_WRITE, &L, &R, IX_N, IX_ITEM, CONF_TARGET_NAME, NULL, &x),
             NIXL_ERR_NOT_REGISTERED);
    rs[IX_N - 1] = keep;
    nixl_indexed_t over = R;
    over.stride = UINT64_MAX / 4;
    CHECK_ST(conf_xfer_create_indexed(ctx->agent, NIXL_OP_WRITE, &L, &over, IX_N, IX_ITEM, CONF_TARGET_NAME, NULL, &x),
             NIXL_ERR_INVALID_PARAM);
    nixl_indexed_t fewer = R;
    fewer.layers = IX_LAYERS - 1;
    CHECK_ST(conf_xfer_create_indexed(ctx->agent, NIXL_OP_WRITE, &L, &fewer, IX_N, IX_ITEM, CONF_TARGET_NAME, NULL,
                                      &x),
             NIXL_ERR_LENGTH_MISMATCH);
    CHECK_ST(conf_xfer_create_indexed(ctx->agent, NIXL_OP_WRITE, &L, &R, IX_N, 0, CONF_TARGET_NAME, NULL, &x),
             NIXL_ERR_ZERO_LENGTH);
    CHECK(x == NULL);
    conf_target_expect(ctx, 0, img, ctx->tgt_len);
    free(want);
    free(img);
    local_drop(ctx, &lb);
}

/* ---- refused requests ---- */

static void case_length_mismatch(conf_ctx_t *ctx)
{
    static const piece_t pc[] = {{0, 0, 64}, {128, 128, 64}, {256, 256, 64}};
    conf_target_start(ctx, 4096, 1);
    local_buf_t lb = local_make(ctx, 4096, 2);
    lists_t l = lists_make(ctx, &lb, pc, 3);
    nixl_xfer_t *x = NULL;
    l.ll.count = 2;
    CHECK_ST(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &l.ll, &l.rl, CONF_TARGET_NAME, NULL, &x),
             NIXL_ERR_LENGTH_MISMATCH);
    CHECK_ST(conf_xfer_create(ctx->agent, NIXL_OP_READ, &l.rl, &l.ll, CONF_TARGET_NAME, NULL, &x),
             NIXL_ERR_LENGTH_MISMATCH);
    CHECK(x == NULL);
    /* Same count, one pair of different sizes: refused as well. */
    l.ll.count = 3;
    l.r[1].len = 65;
    CHECK_ERR(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &l.ll, &l.rl, CONF_TARGET_NAME, NULL, &x));
    CHECK(x == NULL);
    lists_free(&l);
    uint8_t img[4096];
    conf_pattern_fill(img, sizeof(img), 1, 0);
    conf_target_expect(ctx, 0, img, sizeof(img));
    local_drop(ctx, &lb);
}

static void expect_not_registered(conf_ctx_t *ctx, uint64_t laddr, uint64_t raddr, uint64_t len, const char *what)
{
    nixl_desc_t l = {.addr = laddr, .len = len, .dev_id = conf_buf_dev(laddr)}, r = {.addr = raddr, .len = len};
    nixl_dlist_t ll = {.mem_type = conf_mem_type(), .count = 1, .descs = &l};
    nixl_dlist_t rl = {.mem_type = conf_mem_type(), .count = 1, .descs = &r};
    nixl_xfer_t *x = NULL;
    for (int op = 0; op < 2; op++) {
        nixl_status_t s = conf_xfer_create(ctx->agent, (nixl_op_t)op, &ll, &rl, CONF_TARGET_NAME, NULL, &x);
        if (s != NIXL_ERR_NOT_REGISTERED)
            conf_fail(__FILE__, __LINE__, "%s (%s): nixl_xfer_create returned %s, want NIXL_ERR_NOT_REGISTERED",
                      what, op ? "WRITE" : "READ", nixl_status_name(s));
        CHECK(x == NULL);
    }
}

static void case_not_registered(conf_ctx_t *ctx)
{
    size_t len = 65536;
    conf_target_start(ctx, len, 91);
    local_buf_t lb = local_make(ctx, len, 92);
    uint8_t *unreg = malloc(4096);
    CHECK(unreg != NULL);
    uint64_t l0 = (uint64_t)(uintptr_t)lb.p, r0 = ctx->tgt_addr;

    expect_not_registered(ctx, (uint64_t)(uintptr_t)unreg, r0, 64, "local descriptor in unregistered memory");
    expect_not_registered(ctx, l0 + len - 8, r0, 16, "local descriptor running past its region");
    expect_not_registered(ctx, l0, r0 + len + 4096, 16, "remote descriptor outside every region");
    expect_not_registered(ctx, l0, r0 + len - 8, 16, "remote descriptor running past its region");
    expect_not_registered(ctx, l0, r0 - 8, 16, "remote descriptor starting before its region");

    /* Two touching registrations are two regions: a descriptor across the
     * seam is not inside one registration. */
    uint8_t *two = conf_buf_alloc(8192, ctx->shared);
    nixl_desc_t halves[2] = {{.addr = (uint64_t)(uintptr_t)two, .len = 4096},
                             {.addr = (uint64_t)(uintptr_t)two + 4096, .len = 4096}};
    halves[0].dev_id = halves[1].dev_id = conf_buf_dev((uint64_t)(uintptr_t)two);
    nixl_dlist_t hl = {.mem_type = conf_mem_type(), .count = 2, .descs = halves};
    CHECK_OK(nixl_mem_register(ctx->agent, &hl, NULL));
    expect_not_registered(ctx, (uint64_t)(uintptr_t)two + 4000, r0, 200, "local descriptor across two registrations");

    /* The two-step form checks at prepare time. */
    nixl_desc_t bad = {.addr = r0 + len - 1, .len = 2};
    nixl_dlist_t bl = {.mem_type = conf_mem_type(), .count = 1, .descs = &bad};
    nixl_prep_t *p = NULL;
    CHECK_ST(nixl_prep_create(ctx->agent, CONF_TARGET_NAME, &bl, NULL, &p), NIXL_ERR_NOT_REGISTERED);
    bad.addr = (uint64_t)(uintptr_t)unreg;
    CHECK_ST(nixl_prep_create(ctx->agent, NULL, &bl, NULL, &p), NIXL_ERR_NOT_REGISTERED);
    CHECK(p == NULL);

    CHECK_OK(nixl_mem_deregister(ctx->agent, &hl, NULL));
    conf_buf_free(two, 8192, ctx->shared);
    uint8_t *img = malloc(len);
    CHECK(img != NULL);
    conf_pattern_fill(img, len, 91, 0);
    conf_target_expect(ctx, 0, img, len);
    free(img);
    free(unreg);
    local_drop(ctx, &lb);
}

/* A target killed with SIGKILL: a request to it fails (never succeeds,
 * never hangs) within 2 s. */
static void case_peer_gone(conf_ctx_t *ctx)
{
    static const piece_t pc[] = {{0, 0, 1u << 20}};
    conf_target_start(ctx, 1u << 20, 101);
    local_buf_t lb = local_make(ctx, 1u << 20, 102);
    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, 1, NULL);
    xfer_run(x);
    conf_target_kill(ctx);

    uint64_t t0 = conf_now_ms();
    nixl_status_t s = conf_xfer_post(x);
    while (s == NIXL_IN_PROG && conf_now_ms() - t0 < 2000) {
        conf_sleep_us(200);
        s = conf_xfer_status(x);
    }
    uint64_t ms = conf_now_ms() - t0;
    if (s == NIXL_IN_PROG)
        conf_fail(__FILE__, __LINE__, "request to a dead peer still in progress after %llu ms",
                  (unsigned long long)ms);
    if (s == NIXL_OK)
        conf_fail(__FILE__, __LINE__, "request to a dead peer reported success");
    conf_note("re-posted request to the dead peer: %s after %llu ms%s", nixl_status_name(s), (unsigned long long)ms,
              s == NIXL_ERR_PEER_GONE ? "" : " (not NIXL_ERR_PEER_GONE)");
    CHECK(ms <= 2000);

    /* A new request to it as well (refused at create or failing). */
    lists_t l = lists_make(ctx, &lb, pc, 1);
    nixl_xfer_t *y = NULL;
    t0 = conf_now_ms();
    s = conf_xfer_create(ctx->agent, NIXL_OP_READ, &l.ll, &l.rl, CONF_TARGET_NAME, NULL, &y);
    if (s == NIXL_OK) {
        s = conf_xfer_post(y);
        while (s == NIXL_IN_PROG && conf_now_ms() - t0 < 2000) {
            conf_sleep_us(200);
            s = conf_xfer_status(y);
        }
        conf_xfer_release(y);
    }
    ms = conf_now_ms() - t0;
    if (s >= 0)
        conf_fail(__FILE__, __LINE__, "new READ from a dead peer: %s after %llu ms", nixl_status_name(s),
                  (unsigned long long)ms);
    conf_note("new request to the dead peer: %s after %llu ms", nixl_status_name(s), (unsigned long long)ms);
    lists_free(&l);
    conf_xfer_release(x);
    local_drop(ctx, &lb);
}

/* ---- path accounting ---- */

static const nixl_path_stat_t *stat_row(const nixl_path_stat_t *rows, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].path, path) == 0)
            return &rows[i];
    return NULL;
}

static void case_path_stats(conf_ctx_t *ctx)
{
    static const piece_t pc[] = {{0, 0, 1000}, {2000, 3000, 24}, {4000, 5000, 7}};
    conf_target_start(ctx, 65536, 111);
    local_buf_t lb = local_make(ctx, 65536, 112);
    enum { CAP = 64 };
    nixl_path_stat_t before[CAP], after[CAP];
    size_t nb = 0, na = 0;
    CHECK_OK(nixl_path_stats(ctx->agent, before, CAP, &nb));
    CHECK(nb <= CAP);

    nixl_xfer_t *x = xfer_make_pieces(ctx, NIXL_OP_WRITE, &lb, pc, 3, NULL);
    xfer_run(x);
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK(strcmp(info.backend, conf_opts.backend) == 0);
    if (!path_has_backend_prefix(info.path))
        conf_fail(__FILE__, __LINE__, "path '%s' does not start with '%s.'", info.path, conf_opts.backend);
    CHECK_EQ_U64(info.bytes, 1031);
    CHECK_EQ_U64(info.descs, 3);
    CHECK_EQ_U64(info.descs_in, 3);
    CHECK_EQ_U64(info.posts, 1);

    for (int round = 1; round <= 2; round++) {
        CHECK_OK(nixl_path_stats(ctx->agent, after, CAP, &na));
        CHECK(na <= CAP);
        const nixl_path_stat_t *a = stat_row(after, na, info.path);
        const nixl_path_stat_t *b = stat_row(before, nb, info.path);
        if (!a)
            conf_fail(__FILE__, __LINE__, "nixl_path_stats has no row for path '%s'", info.path);
        nixl_path_stat_t zero;
        memset(&zero, 0, sizeof(zero));
        if (!b)
            b = &zero;
        CHECK_EQ_U64(a->requests - b->requests, 1);
        CHECK_EQ_U64(a->bytes - b->bytes, info.bytes);
        CHECK_EQ_U64(a->descs - b->descs, info.descs);
        CHECK_EQ_U64(a->errors - b->errors, 0);
        memcpy(before, after, sizeof(after));
        nb = na;
        if (round == 1)
            xfer_run(x); /* a re-post counts again */
    }
    /* Fewer rows than exist: the count still says how many there are. */
    if (na > 1) {
        size_t n1 = 0;
        CHECK_OK(nixl_path_stats(ctx->agent, after, 1, &n1));
        CHECK_EQ_U64(n1, na);
    }
    /* A path counted as a fallback must show up, with a cause, among the
     * fallback rows: a fallback is never silent. */
    nixl_fallback_stat_t fb[CAP];
    size_t nf = 0;
    CHECK_OK(nixl_fallback_stats(ctx->agent, fb, CAP, &nf));
    CHECK(nf <= CAP);
    for (size_t i = 0; i < na; i++) {
        if (after[i].fallbacks == 0)
            continue;
        uint64_t counted = 0;
        for (size_t j = 0; j < nf; j++)
            if (strcmp(fb[j].path, after[i].path) == 0 && fb[j].cause[0])
                counted += fb[j].count;
        if (counted == 0)
            conf_fail(__FILE__, __LINE__, "path %s was taken %llu time(s) as a fallback but no fallback row names it",
                      after[i].path, (unsigned long long)after[i].fallbacks);
    }
    conf_note("path %s: %zu path rows, %zu fallback rows", info.path, na, nf);
    conf_xfer_release(x);
    local_drop(ctx, &lb);
}

const conf_case_t conf_cases_xfer[] = {
    {"write", case_write, CONF_NEED_XFER, 0, "WRITE pieces land byte for byte, neighbours untouched; xfer_info"},
    {"write_shared", case_write, CONF_NEED_XFER, 1, "write on nixl_mem_alloc memory"},
    {"read", case_read, CONF_NEED_XFER, 0, "READ pieces land byte for byte, target unchanged"},
    {"read_shared", case_read, CONF_NEED_XFER, 1, "read on nixl_mem_alloc memory"},
    {"write_notif", case_write_notif, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "target sees every byte when it sees the notification"},
    {"write_notif_shared", case_write_notif, CONF_NEED_XFER | CONF_NEED_NOTIF, 1,
     "write_notif on nixl_mem_alloc memory"},
    {"notif_standalone", case_notif_standalone, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "notifications both ways, exact bytes, in order; too big -> TOO_BIG"},
    {"repost", case_repost, CONF_NEED_XFER | CONF_NEED_NOTIF, 0, "re-post of a completed request sends new data"},
    {"post_in_flight", case_post_in_flight, CONF_NEED_XFER, 0, "posting a request in flight -> IN_FLIGHT"},
    {"release_in_flight", case_release_in_flight, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "release in flight cancels: no notification, no late writes"},
    {"release_in_flight_shared", case_release_in_flight, CONF_NEED_XFER | CONF_NEED_NOTIF, 1,
     "release_in_flight on nixl_mem_alloc memory"},
    {"deadline", case_deadline, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "1 ms deadline on 64 MiB: NIXL_ERR_TIMEOUT with no notification and no late writes, or NIXL_OK complete"},
    {"series", case_series, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "16 requests: each succeeds with its notification or fails with an injected error and is posted again"},
    {"series_shared", case_series, CONF_NEED_XFER | CONF_NEED_NOTIF, 1, "series on nixl_mem_alloc memory"},
    {"peer_invalidated", case_peer_invalidated, CONF_NEED_XFER, 0, "post after invalidation -> PEER_INVALIDATED"},
    {"reload_stale", case_reload_stale, CONF_NEED_XFER, 0, "post after a reload of the peer -> STALE"},
    {"unaligned", case_unaligned, CONF_NEED_XFER, 0, "odd addresses and lengths land exactly, guards intact"},
    {"unaligned_shared", case_unaligned, CONF_NEED_XFER, 1, "unaligned on nixl_mem_alloc memory"},
    {"indexed", case_indexed, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "indexed WRITE and READ land exactly (layers x shuffled slots), refusals move nothing"},
    {"indexed_shared", case_indexed, CONF_NEED_XFER | CONF_NEED_NOTIF, 1, "indexed on nixl_mem_alloc memory"},
    {"length_mismatch", case_length_mismatch, CONF_NEED_XFER, 0, "lists of different lengths -> LENGTH_MISMATCH"},
    {"not_registered", case_not_registered, CONF_NEED_XFER, 0,
     "descriptors outside or across registrations -> NOT_REGISTERED"},
    {"peer_gone", case_peer_gone, CONF_NEED_XFER | CONF_NEED_PROCS2, 0,
     "requests to a SIGKILLed peer fail within 2 s"},
    {"peer_gone_shared", case_peer_gone, CONF_NEED_XFER | CONF_NEED_PROCS2, 1, "peer_gone on nixl_mem_alloc memory"},
    {"path_stats", case_path_stats, CONF_NEED_XFER, 0, "xfer_info and nixl_path_stats account exactly"},
    {"path_stats_shared", case_path_stats, CONF_NEED_XFER, 1, "path_stats on nixl_mem_alloc memory"},
};
const size_t conf_cases_xfer_count = sizeof(conf_cases_xfer) / sizeof(conf_cases_xfer[0]);
