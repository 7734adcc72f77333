/*
 * cases_reg.c - conformance cases about registration, metadata and bad
 * input: what the API must refuse, with which status, and that a refusal
 * leaves nothing half-done behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

static nixl_dlist_t dl_of(const nixl_desc_t *d, size_t n)
{
    nixl_dlist_t dl = {.mem_type = conf_mem_type(), .count = n, .descs = d};
    return dl;
}

static nixl_desc_t desc_of(const void *base, size_t off, size_t len)
{
    nixl_desc_t d = {.addr = (uint64_t)(uintptr_t)base + off, .len = len,
                     .dev_id = conf_buf_dev((uint64_t)(uintptr_t)base)};
    return d;
}

/* Register, deregister exactly, and refuse deregistrations that do not
 * name a registration exactly (the registration stays intact). */
static void case_reg_basic(conf_ctx_t *ctx)
{
    size_t len = 64 * 1024;
    uint8_t *buf = conf_buf_alloc(len, ctx->shared);
    nixl_desc_t d[3] = {desc_of(buf, 0, 4096), desc_of(buf, 8192, 100), desc_of(buf, 20001, 777)};
    nixl_dlist_t all = dl_of(d, 3);
    CHECK_OK(nixl_mem_register(ctx->agent, &all, NULL));

    nixl_desc_t part = desc_of(buf, 0, 2048); /* a prefix of a registration */
    nixl_dlist_t l = dl_of(&part, 1);
    CHECK_ST(nixl_mem_deregister(ctx->agent, &l, NULL), NIXL_ERR_REG_MISMATCH);
    part = desc_of(buf, 1, 4095); /* same end, other start */
    CHECK_ST(nixl_mem_deregister(ctx->agent, &l, NULL), NIXL_ERR_REG_MISMATCH);
    part = desc_of(buf, 0, 8192); /* a superset */
    CHECK_ST(nixl_mem_deregister(ctx->agent, &l, NULL), NIXL_ERR_REG_MISMATCH);
    part = desc_of(buf, 40000, 10); /* never registered */
    CHECK_ST(nixl_mem_deregister(ctx->agent, &l, NULL), NIXL_ERR_REG_MISMATCH);

    /* A list with one bad entry changes nothing: the good ones stay. */
    nixl_desc_t mixed[2] = {d[1], desc_of(buf, 20001, 776)};
    nixl_dlist_t ml = dl_of(mixed, 2);
    CHECK_ST(nixl_mem_deregister(ctx->agent, &ml, NULL), NIXL_ERR_REG_MISMATCH);

    /* Registered ranges are still there: registering them again overlaps. */
    nixl_dlist_t one = dl_of(&d[1], 1);
    CHECK_ST(nixl_mem_register(ctx->agent, &one, NULL), NIXL_ERR_OVERLAP);

    CHECK_OK(nixl_mem_deregister(ctx->agent, &all, NULL));
    /* Gone now: the same list again no longer matches. */
    CHECK_ST(nixl_mem_deregister(ctx->agent, &all, NULL), NIXL_ERR_REG_MISMATCH);
    /* And the memory can be registered again, in another split. */
    nixl_desc_t whole = desc_of(buf, 0, len);
    nixl_dlist_t wl = dl_of(&whole, 1);
    CHECK_OK(nixl_mem_register(ctx->agent, &wl, NULL));
    CHECK_OK(nixl_mem_deregister(ctx->agent, &wl, NULL));
    conf_buf_free(buf, len, ctx->shared);
}

/* Overlap with an existing registration or within one list is refused,
 * all or nothing. */
static void case_reg_overlap(conf_ctx_t *ctx)
{
    size_t len = 64 * 1024;
    uint8_t *buf = conf_buf_alloc(len, ctx->shared);
    nixl_desc_t a = desc_of(buf, 4096, 4096);
    nixl_dlist_t al = dl_of(&a, 1);
    CHECK_OK(nixl_mem_register(ctx->agent, &al, NULL));

    nixl_desc_t probes[] = {
        desc_of(buf, 4096 + 100, 10), /* inside */
        desc_of(buf, 4000, 100),      /* across the start */
        desc_of(buf, 8191, 2),        /* across the end by one byte */
        desc_of(buf, 0, 65536),       /* around it */
        desc_of(buf, 4096, 4096),     /* the same range */
    };
    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
        nixl_dlist_t pl = dl_of(&probes[i], 1);
        CHECK_ST(nixl_mem_register(ctx->agent, &pl, NULL), NIXL_ERR_OVERLAP);
    }
    /* Touching (not overlapping) neighbours are fine. */
    nixl_desc_t n2[2] = {desc_of(buf, 0, 4096), desc_of(buf, 8192, 4096)};
    nixl_dlist_t nl = dl_of(n2, 2);
    CHECK_OK(nixl_mem_register(ctx->agent, &nl, NULL));
    CHECK_OK(nixl_mem_deregister(ctx->agent, &nl, NULL));

    /* Two entries of one list overlapping each other: refused, and the
     * first (valid) entry did not stay registered. */
    nixl_desc_t self_ov[3] = {desc_of(buf, 16384, 4096), desc_of(buf, 32768, 100), desc_of(buf, 32800, 100)};
    nixl_dlist_t sl = dl_of(self_ov, 3);
    CHECK_ST(nixl_mem_register(ctx->agent, &sl, NULL), NIXL_ERR_OVERLAP);
    nixl_dlist_t first = dl_of(&self_ov[0], 1);
    CHECK_OK(nixl_mem_register(ctx->agent, &first, NULL));
    CHECK_OK(nixl_mem_deregister(ctx->agent, &first, NULL));

    CHECK_OK(nixl_mem_deregister(ctx->agent, &al, NULL));
    conf_buf_free(buf, len, ctx->shared);
}

static void case_reg_zero_length(conf_ctx_t *ctx)
{
    size_t len = 8192;
    uint8_t *buf = conf_buf_alloc(len, ctx->shared);
    nixl_desc_t z = desc_of(buf, 0, 0);
    nixl_dlist_t zl = dl_of(&z, 1);
    CHECK_ST(nixl_mem_register(ctx->agent, &zl, NULL), NIXL_ERR_ZERO_LENGTH);
    /* A zero-length entry after a good one: nothing stays registered. */
    nixl_desc_t two[2] = {desc_of(buf, 0, 4096), desc_of(buf, 4096, 0)};
    nixl_dlist_t tl = dl_of(two, 2);
    CHECK_ST(nixl_mem_register(ctx->agent, &tl, NULL), NIXL_ERR_ZERO_LENGTH);
    nixl_dlist_t good = dl_of(&two[0], 1);
    CHECK_OK(nixl_mem_register(ctx->agent, &good, NULL));
    CHECK_OK(nixl_mem_deregister(ctx->agent, &good, NULL));
    /* An empty list. */
    nixl_dlist_t empty = dl_of(two, 0);
    CHECK_ST(nixl_mem_register(ctx->agent, &empty, NULL), NIXL_ERR_ZERO_LENGTH);
    CHECK_ST(nixl_mem_deregister(ctx->agent, &empty, NULL), NIXL_ERR_ZERO_LENGTH);
    /* A zero-length range cannot name a registration. */
    CHECK_ST(nixl_mem_deregister(ctx->agent, &zl, NULL), NIXL_ERR_REG_MISMATCH);
    conf_buf_free(buf, len, ctx->shared);
}

static void case_reg_null(conf_ctx_t *ctx)
{
    CHECK_ST(nixl_mem_register(ctx->agent, NULL, NULL), NIXL_ERR_NULL);
    CHECK_ST(nixl_mem_deregister(ctx->agent, NULL, NULL), NIXL_ERR_NULL);
    nixl_dlist_t nd = {.mem_type = NIXL_MEM_DRAM, .count = 2, .descs = NULL};
    CHECK_ST(nixl_mem_register(ctx->agent, &nd, NULL), NIXL_ERR_NULL);
    CHECK_ST(nixl_mem_register(NULL, &nd, NULL), NIXL_ERR_NULL);
    void *blob = NULL;
    size_t len = 0;
    CHECK_ST(nixl_md_get_local(ctx->agent, NULL, &len), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_get_local(ctx->agent, &blob, NULL), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_load_remote(ctx->agent, NULL, 16, NULL), NIXL_ERR_NULL);
    nixl_xfer_t *x = NULL;
    CHECK_ST(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, NULL, NULL, "x", NULL, &x), NIXL_ERR_NULL);
    CHECK(x == NULL);
}

/* Blobs both ways by hand: each side learns the other's name. */
static void case_md_roundtrip(conf_ctx_t *ctx)
{
    conf_target_start(ctx, 4096, 1);
    void *blob = NULL;
    size_t len = 0;
    conf_target_md_get(ctx, &blob, &len);
    CHECK(len > 0);
    char name[NIXL_NAME_MAX + 1] = "";
    CHECK_OK(nixl_md_load_remote(ctx->agent, blob, len, name));
    CHECK(strcmp(name, CONF_TARGET_NAME) == 0);
    /* NULL name_out is allowed. */
    CHECK_OK(nixl_md_load_remote(ctx->agent, blob, len, NULL));
    free(blob);
    CHECK_OK(nixl_md_check_remote(ctx->agent, CONF_TARGET_NAME));

    void *mine = NULL;
    CHECK_OK(nixl_md_get_local(ctx->agent, &mine, &len));
    char tname[NIXL_NAME_MAX + 1] = "";
    nixl_status_t s = conf_target_md_load(ctx, mine, len, tname);
    nixl_free(mine);
    CHECK_OK(s);
    CHECK(strcmp(tname, CONF_INIT_NAME) == 0);
    CHECK_OK(conf_target_check_peer(ctx));

    CHECK_ST(nixl_md_check_remote(ctx->agent, "conf_nobody"), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_md_check_remote(ctx->agent, CONF_INIT_NAME), NIXL_ERR_UNKNOWN_PEER);
    CHECK_OK(nixl_md_invalidate_remote(ctx->agent, CONF_TARGET_NAME));
    CHECK(nixl_md_check_remote(ctx->agent, CONF_TARGET_NAME) != NIXL_OK);
    conf_target_exchange(ctx);
    CHECK_OK(nixl_md_check_remote(ctx->agent, CONF_TARGET_NAME));
}

static void case_md_self(conf_ctx_t *ctx)
{
    void *mine = NULL;
    size_t len = 0;
    CHECK_OK(nixl_md_get_local(ctx->agent, &mine, &len));
    char name[NIXL_NAME_MAX + 1] = "";
    nixl_status_t s = nixl_md_load_remote(ctx->agent, mine, len, name);
    nixl_free(mine);
    CHECK_ST(s, NIXL_ERR_SELF);
    CHECK_ST(nixl_md_check_remote(ctx->agent, CONF_INIT_NAME), NIXL_ERR_UNKNOWN_PEER);
}

/* Truncated and corrupted blobs: exact refusals for the ones that cannot be
 * valid, no crash (and a coherent peer if accepted) for random damage. */
static void case_md_bad(conf_ctx_t *ctx)
{
    nixl_backend_t *ob = NULL;
    nixl_agent_t *other = conf_agent_create("conf_other", 0, &ob);
    size_t blen = 16384;
    uint8_t *buf = conf_buf_alloc(blen, ctx->shared);
    nixl_desc_t d[2] = {desc_of(buf, 0, 4096), desc_of(buf, 8192, 4096)};
    nixl_dlist_t dl = dl_of(d, 2);
    CHECK_OK(nixl_mem_register(other, &dl, NULL));
    void *blob = NULL;
    size_t len = 0;
    CHECK_OK(nixl_md_get_local(other, &blob, &len));
    CHECK(len > 8);
    uint8_t *copy = malloc(len);
    CHECK(copy != NULL);
    char name[NIXL_NAME_MAX + 1];

    for (size_t cut = 1; cut < len; cut++) {
        memcpy(copy, blob, cut);
        nixl_status_t s = nixl_md_load_remote(ctx->agent, copy, cut, name);
        if (s != NIXL_ERR_BAD_METADATA)
            conf_fail(__FILE__, __LINE__, "blob truncated to %zu of %zu bytes: got %s, want NIXL_ERR_BAD_METADATA",
                      cut, len, nixl_status_name(s));
    }
    CHECK_ST(nixl_md_check_remote(ctx->agent, "conf_other"), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ERR(nixl_md_load_remote(ctx->agent, blob, 0, name));

    /* Every bit of the magic matters. */
    for (size_t i = 0; i < 4; i++) {
        memcpy(copy, blob, len);
        copy[i] ^= 0x20;
        CHECK_ST(nixl_md_load_remote(ctx->agent, copy, len, name), NIXL_ERR_BAD_METADATA);
    }
    /* Trailing garbage after a valid blob is corruption too. */
    uint8_t *longer = malloc(len + 7);
    CHECK(longer != NULL);
    memcpy(longer, blob, len);
    memset(longer + len, 0xa5, 7);
    CHECK_ST(nixl_md_load_remote(ctx->agent, longer, len + 7, name), NIXL_ERR_BAD_METADATA);
    free(longer);

    /* Random damage: one to four bytes changed.  Acceptance is allowed only
     * when the result is a coherent peer. */
    uint64_t rs = 12345;
    size_t accepted = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(copy, blob, len);
        int nflip = 1 + (int)(conf_rand(&rs) % 4);
        for (int k = 0; k < nflip; k++)
            copy[conf_rand(&rs) % len] ^= (uint8_t)(1 + conf_rand(&rs) % 255);
        memset(name, 0, sizeof(name));
        nixl_status_t s = nixl_md_load_remote(ctx->agent, copy, len, name);
        if (s == NIXL_OK) {
            accepted++;
            CHECK(name[0] != 0);
            CHECK_OK(nixl_md_check_remote(ctx->agent, name));
            CHECK_OK(nixl_md_invalidate_remote(ctx->agent, name));
        } else if (s >= 0) {
            conf_fail(__FILE__, __LINE__, "corrupted blob: got %s", nixl_status_name(s));
        }
    }
    conf_note("3000 randomly damaged blobs of %zu bytes: %zu accepted as coherent peers, the rest refused", len,
              accepted);

    free(copy);
    nixl_free(blob);
    CHECK_OK(nixl_mem_deregister(other, &dl, NULL));
    nixl_agent_destroy(other);
    conf_buf_free(buf, blen, ctx->shared);
}

static void case_unknown_backend(conf_ctx_t *ctx)
{
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(ctx->agent, "conf_no_such_backend", NULL, 0, &b), NIXL_ERR_UNKNOWN_BACKEND);
    CHECK(b == NULL);
    /* An unknown parameter of a real backend is refused as well. */
    nixl_agent_t *other = NULL;
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "conf_other"};
    CHECK_OK(nixl_agent_create(&cfg, &other));
    nixl_param_t p = {.key = "conf_no_such_key", .value = "1"};
    CHECK_ST(nixl_backend_create(other, conf_opts.backend, &p, 1, &b), NIXL_ERR_INVALID_PARAM);
    CHECK(b == NULL);
    CHECK_OK(nixl_backend_create(other, conf_opts.backend, NULL, 0, &b));
    CHECK(strcmp(nixl_backend_name(b), conf_opts.backend) == 0);
    nixl_agent_destroy(other);
}

static void case_unknown_peer(conf_ctx_t *ctx)
{
    size_t len = 8192;
    uint8_t *buf = conf_buf_alloc(len, ctx->shared);
    CHECK_OK(conf_register(ctx->agent, buf, len));
    nixl_desc_t l = desc_of(buf, 0, 64), r = {.addr = 0x10000, .len = 64};
    nixl_dlist_t ll = dl_of(&l, 1), rl = dl_of(&r, 1);
    nixl_xfer_t *x = NULL;
    CHECK_ST(conf_xfer_create(ctx->agent, NIXL_OP_WRITE, &ll, &rl, "conf_nobody", NULL, &x),
             NIXL_ERR_UNKNOWN_PEER);
    CHECK(x == NULL);
    nixl_prep_t *p = NULL;
    CHECK_ST(nixl_prep_create(ctx->agent, "conf_nobody", &rl, NULL, &p), NIXL_ERR_UNKNOWN_PEER);
    CHECK(p == NULL);
    CHECK_ST(conf_notif_send(ctx->agent, "conf_nobody", "hi", 2, NULL), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_md_check_remote(ctx->agent, "conf_nobody"), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_md_invalidate_remote(ctx->agent, "conf_nobody"), NIXL_ERR_UNKNOWN_PEER);
    CHECK_OK(conf_deregister(ctx->agent, buf, len));
    conf_buf_free(buf, len, ctx->shared);
}

const conf_case_t conf_cases_reg[] = {
    {"reg_basic", case_reg_basic, 0, 0, "register/deregister; inexact deregistration -> REG_MISMATCH"},
    {"reg_basic_shared", case_reg_basic, 0, 1, "reg_basic on nixl_mem_alloc memory"},
    {"reg_overlap", case_reg_overlap, 0, 0, "overlapping registrations -> OVERLAP, all or nothing"},
    {"reg_zero_length", case_reg_zero_length, 0, 0, "zero-length descriptor or empty list -> ZERO_LENGTH"},
    {"reg_null", case_reg_null, 0, 0, "NULL lists and outputs -> NULL"},
    {"md_roundtrip", case_md_roundtrip, 0, 0, "blobs both ways, names returned, check_remote"},
    {"md_self", case_md_self, 0, 0, "loading one's own metadata -> SELF"},
    {"md_bad", case_md_bad, 0, 0, "truncated/corrupted metadata -> BAD_METADATA, never a crash"},
    {"unknown_backend", case_unknown_backend, 0, 0, "unknown backend -> UNKNOWN_BACKEND; unknown param"},
    {"unknown_peer", case_unknown_peer, 0, 0, "requests/notifs to an unknown peer -> UNKNOWN_PEER"},
};
const size_t conf_cases_reg_count = sizeof(conf_cases_reg) / sizeof(conf_cases_reg[0]);
