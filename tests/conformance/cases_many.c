/*
 * cases_many.c - conformance cases with many descriptors: 100,000 pieces
 * that cannot merge, in the two-step form (prepare each side once, make by
 * index) and the one-shot form, plus layouts whose merging the test predicts
 * exactly (nixl_xfer_info.descs counts merged runs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

#define MANY 100000u
#define PIECE 24u      /* bytes per descriptor */
#define LSTRIDE 32u    /* local slots have 8-byte holes: never contiguous */
#define RSTRIDE 40u    /* remote slots too */
#define LBASE 3u       /* odd starts */
#define RBASE 1u
#define MANY_TIMEOUT_MS 60000u

typedef struct many {
    uint8_t *local;
    size_t llen;
    nixl_desc_t *ld, *rd; /* local slot i, remote slot j */
    uint32_t *perm;       /* local i goes to remote slot perm[i] */
} many_t;

static void shuffle(uint32_t *v, size_t n, uint64_t *rs)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = conf_rand(rs) % i;
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

static void many_setup(conf_ctx_t *ctx, many_t *m)
{
    conf_target_start(ctx, (size_t)MANY * RSTRIDE + 64, 201);
    m->llen = (size_t)MANY * LSTRIDE + 64;
    m->local = conf_buf_alloc(m->llen, ctx->shared);
    conf_pattern_fill(conf_buf_host(m->local), m->llen, 202, 0);
    conf_buf_push(m->local, 0, m->llen);
    CHECK_OK(conf_register(ctx->agent, m->local, m->llen));
    m->ld = calloc(MANY, sizeof(*m->ld));
    m->rd = calloc(MANY, sizeof(*m->rd));
    m->perm = calloc(MANY, sizeof(*m->perm));
    CHECK(m->ld && m->rd && m->perm);
    for (uint32_t i = 0; i < MANY; i++) {
        m->ld[i].addr = (uint64_t)(uintptr_t)m->local + LBASE + (uint64_t)i * LSTRIDE;
        m->ld[i].len = PIECE;
        m->ld[i].dev_id = conf_buf_dev((uint64_t)(uintptr_t)m->local);
        m->rd[i].addr = ctx->tgt_addr + RBASE + (uint64_t)i * RSTRIDE;
        m->rd[i].len = PIECE;
        m->perm[i] = i;
    }
    uint64_t rs = 7;
    shuffle(m->perm, MANY, &rs);
}

static void many_teardown(conf_ctx_t *ctx, many_t *m)
{
    CHECK_OK(conf_deregister(ctx->agent, m->local, m->llen));
    conf_buf_free(m->local, m->llen, ctx->shared);
    free(m->ld);
    free(m->rd);
    free(m->perm);
}

/* The target image after local slot i went to remote slot perm[i]. */
static uint8_t *many_image(const conf_ctx_t *ctx, const many_t *m)
{
    uint8_t *img = malloc(ctx->tgt_len);
    CHECK(img != NULL);
    conf_pattern_fill(img, ctx->tgt_len, 201, 0);
    conf_buf_pull(m->local, 0, m->llen);
    const uint8_t *local = conf_buf_host(m->local);
    for (uint32_t i = 0; i < MANY; i++)
        memcpy(img + RBASE + (size_t)m->perm[i] * RSTRIDE, local + LBASE + (size_t)i * LSTRIDE, PIECE);
    return img;
}

static nixl_opt_args_t notif_opt(const char *msg)
{
    nixl_opt_args_t o = {.field_mask = NIXL_OPT_NOTIF, .notif = msg, .notif_len = strlen(msg)};
    return o;
}

static void wait_notif_image(conf_ctx_t *ctx, const char *msg, const uint8_t *img)
{
    conf_notif_t n;
    if (conf_target_wait_notif(ctx, MANY_TIMEOUT_MS, 0, img, ctx->tgt_len, &n))
        conf_fail(__FILE__, __LINE__, "no notification '%s'", msg);
    CHECK(n.len == strlen(msg) && memcmp(n.msg, msg, n.len) == 0);
    free(n.msg);
}

static void run_and_wait(nixl_xfer_t *x)
{
    nixl_status_t s = conf_xfer_post(x);
    if (s != NIXL_OK && s != NIXL_IN_PROG)
        conf_fail_st(s, __FILE__, __LINE__, "nixl_xfer_post: %s", nixl_status_name(s));
    CHECK_OK(conf_wait(x, MANY_TIMEOUT_MS));
}

static void note_info(const nixl_xfer_t *x, const char *what)
{
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    conf_note("%s: %llu descriptors given, %llu after merging, %llu bytes, post %.2f ms, post->done %.2f ms, path %s",
              what, (unsigned long long)info.descs_in, (unsigned long long)info.descs,
              (unsigned long long)info.bytes, info.post_ns / 1e6, info.xfer_ns / 1e6, info.path);
}

/* 100,000 non-mergeable descriptors, two-step: prepare both sides once,
 * WRITE by index with a notification, then READ them back by index. */
static void case_many_two_step(conf_ctx_t *ctx)
{
    many_t m;
    many_setup(ctx, &m);
    nixl_dlist_t ll = {.mem_type = conf_mem_type(), .count = MANY, .descs = m.ld};
    nixl_dlist_t rl = {.mem_type = conf_mem_type(), .count = MANY, .descs = m.rd};
    nixl_prep_t *lp = NULL, *rp = NULL;
    uint64_t t0 = conf_now_ms();
    CHECK_OK(nixl_prep_create(ctx->agent, NULL, &ll, NULL, &lp));
    CHECK_OK(nixl_prep_create(ctx->agent, CONF_TARGET_NAME, &rl, NULL, &rp));
    uint64_t t1 = conf_now_ms();
    uint32_t *lidx = malloc(MANY * sizeof(*lidx));
    CHECK(lidx != NULL);
    for (uint32_t i = 0; i < MANY; i++)
        lidx[i] = i;

    nixl_opt_args_t o = notif_opt("many-2step");
    nixl_xfer_t *x = NULL;
    CHECK_OK(conf_xfer_make(ctx->agent, NIXL_OP_WRITE, lp, lidx, rp, m.perm, MANY, &o, &x));
    uint64_t t2 = conf_now_ms();
    uint8_t *img = many_image(ctx, &m);
    run_and_wait(x);
    wait_notif_image(ctx, "many-2step", img);
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.descs_in, MANY);
    CHECK_EQ_U64(info.descs, MANY);
    CHECK_EQ_U64(info.bytes, (uint64_t)MANY * PIECE);
    conf_note("prepare both sides %llu ms, make %llu ms", (unsigned long long)(t1 - t0),
              (unsigned long long)(t2 - t1));
    note_info(x, "two-step WRITE");
    conf_xfer_release(x);

    /* READ the same pairs back into a scrambled local buffer. */
    uint8_t *orig = malloc(m.llen);
    CHECK(orig != NULL);
    conf_buf_pull(m.local, 0, m.llen);
    memcpy(orig, conf_buf_host(m.local), m.llen);
    conf_pattern_fill(conf_buf_host(m.local), m.llen, 203, 0);
    conf_buf_push(m.local, 0, m.llen);
    uint8_t *want = malloc(m.llen);
    CHECK(want != NULL);
    conf_pattern_fill(want, m.llen, 203, 0);
    for (uint32_t i = 0; i < MANY; i++)
        memcpy(want + LBASE + (size_t)i * LSTRIDE, orig + LBASE + (size_t)i * LSTRIDE, PIECE);
    CHECK_OK(conf_xfer_make(ctx->agent, NIXL_OP_READ, lp, lidx, rp, m.perm, MANY, NULL, &x));
    run_and_wait(x);
    conf_buf_pull(m.local, 0, m.llen);
    CHECK_BYTES("local buffer after 100,000-descriptor READ", conf_buf_host(m.local), want, m.llen);
    note_info(x, "two-step READ");
    conf_xfer_release(x);

    /* Index out of range: refused. */
    lidx[5] = MANY;
    nixl_xfer_t *bad = NULL;
    CHECK_ERR(conf_xfer_make(ctx->agent, NIXL_OP_WRITE, lp, lidx, rp, m.perm, MANY, NULL, &bad));
    CHECK(bad == NULL);

    free(want);
    free(orig);
    free(img);
    free(lidx);
    nixl_prep_release(rp);
    nixl_prep_release(lp);
    many_teardown(ctx, &m);
}

static void case_many_one_shot(conf_ctx_t *ctx)
{
    many_t m;
    many_setup(ctx, &m);
    /* Pair i: local slot i -> remote slot perm[i]. */
    nixl_desc_t *rd = malloc(MANY * sizeof(*rd));
    CHECK(rd != NULL);
    for (uint32_t i = 0; i < MANY; i++)
        rd[i] = m.rd[m.perm[i]];
    nixl_dlist_t ll = {.mem_type = conf_mem_type(), .count = MANY, .descs = m.ld};
    nixl_dlist_t rl = {.mem_type = conf_mem_type(), .count = MANY, .descs = rd};
    nixl_opt_args_t o = notif_opt("many-1shot");
    nixl_xfer_t *x = NULL;
    uint64_t t0 = conf_now_ms();
    CHECK_OK(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &ll, &rl, CONF_TARGET_NAME, &o, &x));
    uint64_t t1 = conf_now_ms();
    uint8_t *img = many_image(ctx, &m);
    run_and_wait(x);
    wait_notif_image(ctx, "many-1shot", img);
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.descs_in, MANY);
    CHECK_EQ_U64(info.descs, MANY);
    CHECK_EQ_U64(info.bytes, (uint64_t)MANY * PIECE);
    conf_note("create %llu ms", (unsigned long long)(t1 - t0));
    note_info(x, "one-shot WRITE");
    conf_xfer_release(x);
    free(img);
    free(rd);
    many_teardown(ctx, &m);
}

/* Contiguous slot lists on both sides, paired in KV-like runs: the test
 * knows how many runs are contiguous on both sides and expects exactly that
 * many descriptors after merging (two-step and one-shot). */
static void case_merge_runs(conf_ctx_t *ctx)
{
    const uint32_t n = MANY;
    size_t len = (size_t)n * PIECE;
    conf_target_start(ctx, len, 301);
    uint8_t *local = conf_buf_alloc(len, ctx->shared);
    uint8_t *local_img = conf_buf_host(local); /* never changed by a transfer here */
    conf_pattern_fill(local_img, len, 302, 0);
    conf_buf_push(local, 0, len);
    CHECK_OK(conf_register(ctx->agent, local, len));
    nixl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd)), *rpair = calloc(n, sizeof(*rpair));
    uint32_t *lidx = calloc(n, sizeof(*lidx)), *ridx = calloc(n, sizeof(*ridx));
    CHECK(ld && rd && rpair && lidx && ridx);
    for (uint32_t i = 0; i < n; i++) {
        ld[i].addr = (uint64_t)(uintptr_t)local + (uint64_t)i * PIECE;
        ld[i].len = PIECE;
        ld[i].dev_id = conf_buf_dev((uint64_t)(uintptr_t)local);
        rd[i].addr = ctx->tgt_addr + (uint64_t)i * PIECE;
        rd[i].len = PIECE;
        lidx[i] = i;
    }
    /* Remote slots: runs of 1..64 slots, runs in shuffled order. */
    uint32_t *run_start = calloc(n, sizeof(*run_start)), *run_len = calloc(n, sizeof(*run_len));
    uint32_t *order = calloc(n, sizeof(*order));
    CHECK(run_start && run_len && order);
    uint64_t rs = 99;
    uint32_t nruns = 0;
    for (uint32_t at = 0; at < n;) {
        uint32_t l = 1 + (uint32_t)(conf_rand(&rs) % 64);
        if (l > n - at)
            l = n - at;
        run_start[nruns] = at;
        run_len[nruns] = l;
        order[nruns] = nruns;
        nruns++;
        at += l;
    }
    shuffle(order, nruns, &rs);
    uint32_t k = 0;
    for (uint32_t r = 0; r < nruns; r++)
        for (uint32_t j = 0; j < run_len[order[r]]; j++)
            ridx[k++] = run_start[order[r]] + j;
    uint64_t expect = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i == 0 || ridx[i] != ridx[i - 1] + 1)
            expect++;
        rpair[i] = rd[ridx[i]];
    }
    uint8_t *img = malloc(len);
    CHECK(img != NULL);
    conf_pattern_fill(img, len, 301, 0);
    for (uint32_t i = 0; i < n; i++)
        memcpy(img + (size_t)ridx[i] * PIECE, local_img + (size_t)i * PIECE, PIECE);

    nixl_dlist_t ll = {.mem_type = conf_mem_type(), .count = n, .descs = ld};
    nixl_dlist_t rl = {.mem_type = conf_mem_type(), .count = n, .descs = rd};
    nixl_prep_t *lp = NULL, *rp = NULL;
    CHECK_OK(nixl_prep_create(ctx->agent, NULL, &ll, NULL, &lp));
    CHECK_OK(nixl_prep_create(ctx->agent, CONF_TARGET_NAME, &rl, NULL, &rp));

    /* Identity pairing: everything is one run. */
    nixl_xfer_t *x = NULL;
    CHECK_OK(conf_xfer_make(ctx->agent, NIXL_OP_WRITE, lp, lidx, rp, lidx, n, NULL, &x));
    run_and_wait(x);
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.descs_in, n);
    CHECK_EQ_U64(info.descs, 1);
    CHECK_EQ_U64(info.bytes, len);
    conf_target_expect(ctx, 0, local_img, len);
    conf_xfer_release(x);

    /* Runs. */
    conf_target_fill(ctx, 0, len, 301);
    CHECK_OK(conf_xfer_make(ctx->agent, NIXL_OP_WRITE, lp, lidx, rp, ridx, n, NULL, &x));
    run_and_wait(x);
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.descs_in, n);
    CHECK_EQ_U64(info.descs, expect);
    conf_target_expect(ctx, 0, img, len);
    note_info(x, "two-step, runs of 1..64");
    conf_xfer_release(x);

    /* The same pairing one-shot. */
    conf_target_fill(ctx, 0, len, 301);
    nixl_dlist_t pl = {.mem_type = conf_mem_type(), .count = n, .descs = rpair};
    CHECK_OK(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &ll, &pl, CONF_TARGET_NAME, NULL, &x));
    run_and_wait(x);
    CHECK_OK(nixl_xfer_info(x, &info));
    CHECK_EQ_U64(info.descs, expect);
    conf_target_expect(ctx, 0, img, len);
    conf_xfer_release(x);

    nixl_prep_release(rp);
    nixl_prep_release(lp);
    free(img);
    free(order);
    free(run_len);
    free(run_start);
    free(ridx);
    free(lidx);
    free(rpair);
    free(rd);
    free(ld);
    CHECK_OK(conf_deregister(ctx->agent, local, len));
    conf_buf_free(local, len, ctx->shared);
}

const conf_case_t conf_cases_many[] = {
    {"many_two_step", case_many_two_step, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "100,000 non-mergeable descriptors: prepare once, WRITE+notif and READ by index"},
    {"many_two_step_shared", case_many_two_step, CONF_NEED_XFER | CONF_NEED_NOTIF, 1,
     "many_two_step on nixl_mem_alloc memory"},
    {"many_one_shot", case_many_one_shot, CONF_NEED_XFER | CONF_NEED_NOTIF, 0,
     "100,000 non-mergeable descriptors in one nixl_xfer_create"},
    {"merge_runs", case_merge_runs, CONF_NEED_XFER, 0, "runs contiguous on both sides merge, exactly as predicted"},
    {"merge_runs_shared", case_merge_runs, CONF_NEED_XFER, 1, "merge_runs on nixl_mem_alloc memory"},
};
const size_t conf_cases_many_count = sizeof(conf_cases_many) / sizeof(conf_cases_many[0]);
