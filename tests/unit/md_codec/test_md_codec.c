/*
 * test_md_codec.c - unit tests of the metadata codec: every catalog blob
 * (tests/fuzz/md_cases.c) decodes to its exact status, valid ones round-trip,
 * the encoder refuses bad input with NIXL_ERR_INVALID_PARAM and leaves its
 * outputs alone, unsorted regions come out sorted, overlaps are refused,
 * and 200k regions encode and decode in tens of milliseconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/md_codec.h"
#include "md_cases.h"
#include "util/crc32c.h"
#include "util/log.h"
#include "util/time.h"

#include "../../common/test_check.h"


/* blob is version 2's v2 (len2 bytes) as the encoder writes it now:
 * version 3, the total 4 bytes longer, the CRC-32C appended. */
static int is_sealed_v2(const void *blob, size_t len, const uint8_t *v2, size_t len2)
{
    mb_t b = {0};
    mb_bytes(&b, v2, len2);
    mb_seal_v3(&b);
    int same = blob && len == b.len && memcmp(blob, b.p, len) == 0;
    mb_free(&b);
    return same;
}

static const md_case_t *find_case(const md_case_t *cases, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(cases[i].name, name) == 0)
            return &cases[i];
    fprintf(stderr, "no catalog case %s\n", name);
    abort();
}

/* decode -> guarantees -> encode -> decode -> same metadata. */
static void check_round_trip(const char *what, const nixl_md_t *md)
{
    nixl_md_t *again = NULL;
    void *blob = NULL;
    size_t len = 0;
    const char *why;

    if ((why = md_check_guarantees(md))) {
        fprintf(stderr, "%s: guarantee broken: %s\n", what, why);
        failures++;
    }
    CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
    if (!blob)
        return;
    CHECK_ST(nixl_md_decode(blob, len, &again), NIXL_OK);
    if (again && (why = md_diff(md, again))) {
        fprintf(stderr, "%s: round trip changed the %s\n", what, why);
        failures++;
    }
    nixl_md_free(again);
    free(blob);
}

static void test_catalog(void)
{
    md_case_t *cases;
    size_t n = md_cases_build(&cases), ok = 0;

    for (size_t i = 0; i < n; i++) {
        nixl_md_t *md = (nixl_md_t *)&cases; /* sentinel: must stay untouched on failure */
        nixl_status_t st = nixl_md_decode(cases[i].blob, cases[i].len, &md);

        if (st != cases[i].expect) {
            fprintf(stderr, "case %s: decode returned %s, expected %s\n", cases[i].name,
                    nixl_status_name(st), nixl_status_name(cases[i].expect));
            failures++;
        }
        if (st == NIXL_OK) {
            check_round_trip(cases[i].name, md);
            nixl_md_free(md);
            ok++;
        } else if (md != (nixl_md_t *)&cases) {
            fprintf(stderr, "case %s: md_out written on failure\n", cases[i].name);
            failures++;
        }
    }
    printf("catalog: %zu blobs, %zu valid\n", n, ok);
    md_cases_free(cases, n);
}

static void test_reference_contents(void)
{
    md_case_t *cases;
    size_t n = md_cases_build(&cases);
    const md_case_t *ref = find_case(cases, n, "ok-reference");
    nixl_md_t *md = NULL;
    void *blob = NULL;
    size_t len = 0;

    CHECK_ST(nixl_md_decode(ref->blob, ref->len, &md), NIXL_OK);
    if (md) {
        CHECK(strcmp(md->name, "prefill-0") == 0);
        CHECK(strcmp(md->host.hostname, "node-a.example") == 0);
        CHECK(md->host.boot_id[0] == 0 && md->host.boot_id[15] == 15);
        CHECK(md->pid == 4242);
        CHECK(md->instance_id == 0x1122334455667788ull && md->uid == 1000 && md->netns == 0xf0000008ull);
        CHECK(md->num_backends == 2);
        CHECK(strcmp(md->backends[0].name, "shm") == 0);
        CHECK(md->backends[0].conn_len == 14 && memcmp(md->backends[0].conn, "shm:/nixl-4242", 14) == 0);
        CHECK(md->backends[0].num_regions == 3);
        CHECK(md->backends[0].regions[1].addr == 0x20000 && md->backends[0].regions[1].len == 0x2000);
        CHECK(md->backends[0].regions[1].rkey_len == 8 && md->backends[0].regions[1].rkey[7] == 0xa7);
        CHECK(md->backends[0].regions[0].rkey_len == 0 && md->backends[0].regions[0].rkey == NULL);
        CHECK(strcmp(md->backends[1].name, "ucx") == 0);
        CHECK(md->backends[1].regions[1].mem_type == NIXL_MEM_VRAM);
        CHECK(md->backends[1].regions[1].dev_id == 1);
        CHECK(md->backends[1].regions[1].addr == 0x7f0000000000ull);
        /* Sorted, without skippable sections: the encoding is canonical. */
        CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
        CHECK(is_sealed_v2(blob, len, ref->blob, ref->len));
        free(blob);
        nixl_md_free(md);
    }

    /* A skipped section vanishes; everything else is kept. */
    md = NULL;
    CHECK_ST(nixl_md_decode(find_case(cases, n, "ok-backend-type-256-skippable")->blob,
                            find_case(cases, n, "ok-backend-type-256-skippable")->len, &md),
             NIXL_OK);
    if (md) {
        CHECK(md->num_backends == 1 && strcmp(md->backends[0].name, "ucx") == 0);
        nixl_md_free(md);
    }
    md_cases_free(cases, n);
}

/* A version-1 blob is read, its identity beyond the pid unknown (0), and
 * re-encoded in the current version. */
static void test_version_1(void)
{
    md_case_t *cases;
    size_t n = md_cases_build(&cases);
    const md_case_t *c = find_case(cases, n, "ok-version-1");
    nixl_md_t *md = NULL, *again = NULL;
    void *blob = NULL;
    size_t len = 0;

    CHECK_ST(nixl_md_decode(c->blob, c->len, &md), NIXL_OK);
    if (md) {
        CHECK(md->version == 1 && md->pid == 4242 && strcmp(md->name, "p0") == 0);
        CHECK(md->uid == 0 && md->start_time == 0 && md->pidns == 0 && md->netns == 0);
        CHECK(md->num_backends == 1 && md->backends[0].num_regions == 1);
        CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
        CHECK(len == c->len + 28 + 4 && blob && ((const uint8_t *)blob)[4] == NIXL_MD_VERSION);
        CHECK_ST(nixl_md_decode(blob, len, &again), NIXL_OK);
        CHECK(again && again->version == NIXL_MD_VERSION && !md_diff(md, again));
        nixl_md_free(again);
        free(blob);
        nixl_md_free(md);
    }
    md_cases_free(cases, n);
}

/* The hex dump in docs/metadata-format.md; keep the two identical. */
static const uint8_t doc_example[] = {
    0x4e, 0x58, 0x4d, 0x44, 0x02, 0x00, 0x10, 0x00, 0x89, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x3e, 0x00, 0x00, 0x00, 0x02, 0x70, 0x30, 0x02, 0x6e, 0x31, 0x00, 0x01,
    0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x92, 0x10,
    0x00, 0x00, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xe8, 0x03, 0x00, 0x00, 0x08, 0x07,
    0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0xfc, 0xff, 0xff, 0xef, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00,
    0x00, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x03, 0x73,
    0x68, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x78, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0xa0, 0xa1,
};

static void test_doc_example(void)
{
    md_case_t *cases;
    size_t n = md_cases_build(&cases);
    const md_case_t *c = find_case(cases, n, "ok-doc-example");
    nixl_md_t *md = NULL;
    void *blob = NULL;
    size_t len = 0;

    CHECK(c->len == sizeof(doc_example) && memcmp(c->blob, doc_example, c->len) == 0);
    CHECK_ST(nixl_md_decode(doc_example, sizeof(doc_example), &md), NIXL_OK);
    if (md) {
        CHECK(strcmp(md->name, "p0") == 0 && strcmp(md->host.hostname, "n1") == 0);
        CHECK(md->pid == 4242 && md->instance_id == 0x1122334455667788ull);
        CHECK(md->version == 2 && md->uid == 1000 && md->start_time == 0x0102030405060708ull);
        CHECK(md->pidns == 0xeffffffcull && md->netns == 0xf0000008ull);
        CHECK(md->num_backends == 1 && strcmp(md->backends[0].name, "shm") == 0);
        CHECK(md->backends[0].conn_len == 1 && md->backends[0].conn[0] == 'x');
        CHECK(md->backends[0].num_regions == 1);
        CHECK(md->backends[0].regions[0].addr == 0x10000 && md->backends[0].regions[0].len == 0x1000);
        CHECK(md->backends[0].regions[0].rkey_len == 2 && md->backends[0].regions[0].rkey[1] == 0xa1);
        CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
        CHECK(is_sealed_v2(blob, len, doc_example, sizeof(doc_example)));
        free(blob);
        nixl_md_free(md);
    }
    md_cases_free(cases, n);
}

/* The partial worked example of docs/metadata-format.md. */
static const uint8_t doc_partial_example[] = {
    0x4e, 0x58, 0x4d, 0x44, 0x02, 0x00, 0x10, 0x00, 0x94, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x3e, 0x00, 0x00, 0x00, 0x02, 0x70, 0x30, 0x02, 0x6e, 0x31, 0x00, 0x01,
    0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x92, 0x10,
    0x00, 0x00, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xe8, 0x03, 0x00, 0x00, 0x08, 0x07,
    0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0xfc, 0xff, 0xff, 0xef, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00,
    0x00, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x03, 0x73, 0x68, 0x6d, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
    0x00, 0x00, 0xa0, 0xa1,
};

/* Partial blobs: the worked example byte for byte, the two flags through
 * decode and encode, and the encoder's refusals. */
static void test_partial(void)
{
    md_case_t *cases;
    size_t n = md_cases_build(&cases);
    const md_case_t *c = find_case(cases, n, "ok-partial-doc-example");
    nixl_md_t *md = NULL;
    void *blob = NULL;
    size_t len = 0;

    CHECK(c->len == sizeof(doc_partial_example) && memcmp(c->blob, doc_partial_example, c->len) == 0);
    CHECK_ST(nixl_md_decode(doc_partial_example, sizeof(doc_partial_example), &md), NIXL_OK);
    if (md) {
        CHECK(md->partial == 1 && md->conn_omitted == 1);
        CHECK(strcmp(md->name, "p0") == 0 && md->num_backends == 1);
        CHECK(md->backends[0].conn_len == 0 && md->backends[0].conn == NULL);
        CHECK(md->backends[0].num_regions == 1 && md->backends[0].regions[0].addr == 0x20000);
        CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
        CHECK(is_sealed_v2(blob, len, doc_partial_example, sizeof(doc_partial_example)));
        free(blob);
        /* Connection info cannot be added to a blob that says it has none,
         * nor left out of a full one. */
        blob = (void *)&failures;
        printf("partial encode with bad input: two expected ERROR lines follow\n");
        fflush(stdout);
        md->backends[0].conn = (const uint8_t *)"x";
        md->backends[0].conn_len = 1;
        CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_ERR_INVALID_PARAM);
        md->backends[0].conn = NULL;
        md->backends[0].conn_len = 0;
        md->partial = 0;
        CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_ERR_INVALID_PARAM);
        CHECK(blob == (void *)&failures);
        nixl_md_free(md);
    }

    md = NULL;
    c = find_case(cases, n, "ok-partial-with-conn");
    CHECK_ST(nixl_md_decode(c->blob, c->len, &md), NIXL_OK);
    if (md) {
        CHECK(md->partial == 1 && md->conn_omitted == 0);
        CHECK(md->backends[0].conn_len == 4 && memcmp(md->backends[0].conn, "conn", 4) == 0);
        nixl_md_free(md);
    }

    /* A full blob says neither; a fixture made partial round-trips. */
    md = NULL;
    c = find_case(cases, n, "ok-reference");
    CHECK_ST(nixl_md_decode(c->blob, c->len, &md), NIXL_OK);
    if (md) {
        CHECK(md->partial == 0 && md->conn_omitted == 0);
        nixl_md_free(md);
    }
    nixl_md_t *x = md_fixture_new(2, 6, 0);
    x->partial = 1;
    check_round_trip("partial fixture", x);
    x->conn_omitted = 1;
    for (uint32_t b = 0; b < x->num_backends; b++) {
        x->backends[b].conn = NULL;
        x->backends[b].conn_len = 0;
    }
    check_round_trip("partial fixture without connection info", x);
    free(x);
    md_cases_free(cases, n);
}

static void test_unsorted_sorted(void)
{
    md_case_t *cases;
    size_t n = md_cases_build(&cases);
    const md_case_t *c = find_case(cases, n, "ok-unsorted-regions");
    nixl_md_t *md = NULL;

    CHECK_ST(nixl_md_decode(c->blob, c->len, &md), NIXL_OK);
    if (md) {
        const nixl_md_region_t *r = md->backends[0].regions;

        CHECK(md->backends[0].num_regions == 3);
        CHECK(r[0].addr == 0x20000 && r[1].addr == 0x40000 && r[2].addr == 0x50000);
        /* Keys travel with their regions. */
        CHECK(r[0].rkey_len == 8 && r[1].rkey_len == 3 && r[2].rkey_len == 0);
        CHECK(r[2].len == 0x1000);
        nixl_md_free(md);
    }

    md = NULL;
    c = find_case(cases, n, "ok-reversed-regions");
    CHECK_ST(nixl_md_decode(c->blob, c->len, &md), NIXL_OK);
    if (md) {
        const nixl_md_region_t *r = md->backends[0].regions;

        CHECK(md->backends[0].num_regions == 40);
        CHECK(r[0].mem_type == NIXL_MEM_DRAM && r[0].addr == 0);
        CHECK(r[19].mem_type == NIXL_MEM_DRAM && r[19].addr == 38 * 0x1000);
        CHECK(r[20].mem_type == NIXL_MEM_VRAM && r[20].addr == 0x1000);
        CHECK(md_check_guarantees(md) == NULL);
        nixl_md_free(md);
    }
    md_cases_free(cases, n);
}

static void test_round_trip_shapes(void)
{
    static const uint32_t shapes[][2] = {{0, 0}, {1, 0}, {1, 1}, {2, 25}, {NIXL_MD_MAX_BACKENDS, 10}};

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        nixl_md_t *x = md_fixture_new(shapes[i][0], shapes[i][1], 1);
        nixl_md_t *y = NULL;
        void *blob = NULL;
        size_t len = 0;
        const char *why;

        CHECK_ST(nixl_md_encode(x, &blob, &len), NIXL_OK);
        if (blob)
            CHECK_ST(nixl_md_decode(blob, len, &y), NIXL_OK);
        /* The decoder sorts; compare against x sorted the same way. */
        for (uint32_t b = 0; b < x->num_backends; b++) {
            nixl_md_region_t *r = x->backends[b].regions;

            for (uint32_t k = 1; k < x->backends[b].num_regions; k++) {
                nixl_md_region_t t = r[k];
                uint32_t j = k;

                while (j > 0 && (r[j - 1].mem_type > t.mem_type ||
                                 (r[j - 1].mem_type == t.mem_type && r[j - 1].addr > t.addr))) {
                    r[j] = r[j - 1];
                    j--;
                }
                r[j] = t;
            }
        }
        if (y && (why = md_diff(x, y))) {
            fprintf(stderr, "shape %u x %u: round trip changed the %s\n", shapes[i][0],
                    shapes[i][1], why);
            failures++;
        }
        if (y && shapes[i][0] == 0)
            CHECK(y->num_backends == 0 && y->backends == NULL);
        nixl_md_free(y);
        free(blob);
        free(x);
    }
}

/* Runs encode on a fixture broken by `breakit` and expects INVALID_PARAM
 * with the outputs untouched. */
static void expect_encode_invalid(const char *what, void (*breakit)(nixl_md_t *md))
{
    nixl_md_t *md = md_fixture_new(3, 8, 0);
    void *blob = (void *)&failures;
    size_t len = 12345;
    nixl_status_t st;

    breakit(md);
    st = nixl_md_encode(md, &blob, &len);
    if (st != NIXL_ERR_INVALID_PARAM) {
        fprintf(stderr, "encode with %s returned %s, expected NIXL_ERR_INVALID_PARAM\n", what,
                nixl_status_name(st));
        failures++;
    }
    if (blob != (void *)&failures || len != 12345) {
        fprintf(stderr, "encode with %s wrote its outputs on failure\n", what);
        failures++;
    }
    if (st == NIXL_OK)
        free(blob);
    free(md);
}

static void brk_agent_empty(nixl_md_t *md) { md->name[0] = '\0'; }
static void brk_agent_char(nixl_md_t *md) { md->name[2] = ' '; }
static void brk_agent_unterminated(nixl_md_t *md) { memset(md->name, 'a', sizeof(md->name)); }
static void brk_host_char(nixl_md_t *md) { md->host.hostname[0] = '\t'; }
static void brk_host_unterminated(nixl_md_t *md)
{
    memset(md->host.hostname, 'h', sizeof(md->host.hostname));
}
static void brk_too_many_backends(nixl_md_t *md) { md->num_backends = NIXL_MD_MAX_BACKENDS + 1; }
static void brk_no_backend_array(nixl_md_t *md) { md->backends = NULL; }
static void brk_backend_dup(nixl_md_t *md) { strcpy(md->backends[2].name, md->backends[0].name); }
static void brk_backend_empty(nixl_md_t *md) { md->backends[1].name[0] = '\0'; }
static void brk_backend_char(nixl_md_t *md) { md->backends[1].name[0] = '*'; }
static void brk_backend_unterminated(nixl_md_t *md)
{
    memset(md->backends[1].name, 'b', sizeof(md->backends[1].name));
}
static void brk_conn_null(nixl_md_t *md)
{
    md->backends[0].conn = NULL;
    md->backends[0].conn_len = 4;
}
static void brk_regions_null(nixl_md_t *md) { md->backends[1].regions = NULL; }
static void brk_regions_over_limit(nixl_md_t *md) { md->backends[1].num_regions = NIXL_MD_MAX_REGIONS + 1; }
static void brk_region_len0(nixl_md_t *md) { md->backends[1].regions[3].len = 0; }
static void brk_region_overflow(nixl_md_t *md)
{
    md->backends[1].regions[3].addr = UINT64_MAX - 10;
    md->backends[1].regions[3].len = 11;
}
static void brk_region_type(nixl_md_t *md) { md->backends[1].regions[3].mem_type = NIXL_MEM_TYPE_COUNT; }
static void brk_rkey_null(nixl_md_t *md)
{
    md->backends[1].regions[0].rkey = NULL;
    md->backends[1].regions[0].rkey_len = 3;
}
static void brk_overlap(nixl_md_t *md)
{
    /* Regions 0..3 are DRAM: make 0 overlap 2, leaving the array unsorted. */
    md->backends[2].regions[0].addr = md->backends[2].regions[2].addr + 1;
}

static void test_encode_invalid(void)
{
    nixl_md_t *md = md_fixture_new(1, 1, 0);
    void *blob;
    size_t len;

    printf("encode with bad input: one expected ERROR line per case follows\n");
    fflush(stdout);
    CHECK_ST(nixl_md_encode(NULL, &blob, &len), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_encode(md, NULL, &len), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_encode(md, &blob, NULL), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_decode(NULL, 0, &md), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_decode("", 0, NULL), NIXL_ERR_NULL);
    free(md);

    expect_encode_invalid("empty agent name", brk_agent_empty);
    expect_encode_invalid("a space in the agent name", brk_agent_char);
    expect_encode_invalid("an unterminated agent name", brk_agent_unterminated);
    expect_encode_invalid("a tab in the hostname", brk_host_char);
    expect_encode_invalid("an unterminated hostname", brk_host_unterminated);
    expect_encode_invalid("65 backends", brk_too_many_backends);
    expect_encode_invalid("no backend array", brk_no_backend_array);
    expect_encode_invalid("duplicate backend names", brk_backend_dup);
    expect_encode_invalid("an empty backend name", brk_backend_empty);
    expect_encode_invalid("a '*' in a backend name", brk_backend_char);
    expect_encode_invalid("an unterminated backend name", brk_backend_unterminated);
    expect_encode_invalid("conn_len without conn", brk_conn_null);
    expect_encode_invalid("regions NULL", brk_regions_null);
    expect_encode_invalid("too many regions", brk_regions_over_limit);
    expect_encode_invalid("a zero-length region", brk_region_len0);
    expect_encode_invalid("addr + len overflowing", brk_region_overflow);
    expect_encode_invalid("a memory type out of range", brk_region_type);
    expect_encode_invalid("rkey_len without rkey", brk_rkey_null);
    expect_encode_invalid("overlapping unsorted regions", brk_overlap);
}

static void test_encode_leaves_input(void)
{
    nixl_md_t *md = md_fixture_new(2, 50, 1);
    size_t size = sizeof(nixl_md_t) + 2 * sizeof(nixl_md_backend_t) + 100 * sizeof(nixl_md_region_t);
    void *copy = malloc(size), *blob = NULL;
    size_t len;

    memcpy(copy, md, size);
    CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
    CHECK(memcmp(copy, md, size) == 0);
    free(blob);
    free(copy);
    free(md);
}

static void time_large(const char *what, int shuffle)
{
    const uint32_t n = 200000;
    nixl_md_t *md = md_fixture_new(1, n, shuffle), *back = NULL;
    void *blob = NULL;
    size_t len = 0;
    uint64_t t0, t1, t2;

    t0 = nixl_now_ns();
    CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
    t1 = nixl_now_ns();
    if (blob)
        CHECK_ST(nixl_md_decode(blob, len, &back), NIXL_OK);
    t2 = nixl_now_ns();
    printf("200k regions (%s): blob %zu bytes, encode %.1f ms, decode %.1f ms\n", what, len,
           (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6);
    if (back) {
        CHECK(back->backends[0].num_regions == n);
        CHECK(md_check_guarantees(back) == NULL);
        if (!shuffle)
            CHECK(md_diff(md, back) == NULL);
    }
    nixl_md_free(back);
    free(blob);

    /* Same blob, regions written in reverse: the decoder must sort them. */
    if (!shuffle) {
        mb_t b = {0};
        size_t at;

        mb_header(&b, 2);
        mb_agent(&b, "big", "h");
        at = mb_backend_begin(&b, "shm", NULL, 0, n);
        for (uint32_t i = n; i-- > 0;)
            mb_region(&b, NIXL_MEM_DRAM, 0, 0x1000ull * i, 0x1000, 0);
        mb_sec_end(&b, at);
        mb_done(&b);
        back = NULL;
        t0 = nixl_now_ns();
        CHECK_ST(nixl_md_decode(b.p, b.len, &back), NIXL_OK);
        t1 = nixl_now_ns();
        printf("200k regions (reversed blob): decode %.1f ms\n", (double)(t1 - t0) / 1e6);
        if (back) {
            CHECK(back->backends[0].regions[0].addr == 0);
            CHECK(back->backends[0].regions[n - 1].addr == 0x1000ull * (n - 1));
            CHECK(md_check_guarantees(back) == NULL);
        }
        nixl_md_free(back);
        mb_free(&b);
    }
    free(md);
}

/* CRC-32C: the standard check value, and the library's (SSE4.2 or table)
 * against the bitwise one of md_cases.c on every length to 300 and every
 * alignment. */
static void test_crc32c(void)
{
    CHECK(nixl_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(nixl_crc32c("", 0) == 0);
    static uint8_t buf[320];
    uint64_t s = 7;
    for (size_t i = 0; i < sizeof(buf); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(s >> 56);
    }
    int bad = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 300; n++)
            bad += nixl_crc32c(buf + off, n) != mb_crc32c(buf + off, n);
    CHECK(bad == 0);
}

/* Version 3: every single-bit flip of an encoded blob, and 20,000 random
 * damages of 1 to 4 bytes, are refused; none loads.  The same damages,
 * where they fall inside it, are applied to the version-2 reference (the
 * same bytes without the checksum) and counted, for the record. */
static void test_v3_damage(void)
{
    md_case_t *cases;
    size_t n = md_cases_build(&cases);
    const md_case_t *ref = find_case(cases, n, "ok-reference");
    nixl_md_t *md = NULL;
    void *blob = NULL;
    size_t len = 0;
    CHECK_ST(nixl_md_decode(ref->blob, ref->len, &md), NIXL_OK);
    CHECK_ST(nixl_md_encode(md, &blob, &len), NIXL_OK);
    nixl_md_free(md);
    if (!blob) {
        md_cases_free(cases, n);
        return;
    }
    uint8_t *b = blob, *d = malloc(len), *e = malloc(ref->len);
    CHECK(d != NULL && e != NULL && b[4] == 3);
    size_t loaded = 0, tried = 0, v2_loaded = 0;
    for (size_t i = 0; d && e && i < len; i++)
        for (int k = 0; k < 8; k++) {
            memcpy(d, b, len);
            d[i] ^= (uint8_t)(1u << k);
            md = NULL;
            tried++;
            if (nixl_md_decode(d, len, &md) == NIXL_OK) {
                loaded++;
                nixl_md_free(md);
            }
        }
    uint64_t s = 11;
    size_t v2_tried = 0;
    for (int t = 0; d && e && t < 20000; t++) {
        memcpy(d, b, len);
        memcpy(e, ref->blob, ref->len);
        int e_changed = 0;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int nb = 1 + (int)((s >> 60) % 4);
        int changed = 0;
        for (int j = 0; j < nb; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)((s >> 33) % len);
            uint8_t v = (uint8_t)(s >> 8);
            changed |= d[at] != v;
            d[at] = v;
            if (at < ref->len && at >= 16) { /* past the header, which differs between the versions */
                e_changed |= e[at] != v;
                e[at] = v;
            }
        }
        if (!changed)
            continue;
        tried++;
        md = NULL;
        if (nixl_md_decode(d, len, &md) == NIXL_OK) {
            loaded++;
            nixl_md_free(md);
        }
        if (!e_changed)
            continue;
        v2_tried++;
        md = NULL;
        if (nixl_md_decode(e, ref->len, &md) == NIXL_OK) {
            v2_loaded++;
            nixl_md_free(md);
        }
    }
    printf("version 3: %zu of %zu damaged blobs loaded (the same damages to version 2: %zu of %zu loaded)\n",
           loaded, tried, v2_loaded, v2_tried);
    CHECK(loaded == 0);
    free(e);
    free(d);
    free(blob);
    md_cases_free(cases, n);
}

int main(void)
{
    /* The catalog makes the decoder warn hundreds of times by design. */
    if (!getenv("NIXL_LOG_LEVEL"))
        nixl_log_set_level(NIXL_LOG_ERROR);

    test_catalog();
    test_crc32c();
    test_v3_damage();
    test_reference_contents();
    test_doc_example();
    test_version_1();
    test_partial();
    test_unsorted_sorted();
    test_round_trip_shapes();
    test_encode_invalid();
    test_encode_leaves_input();
    time_large("sorted", 0);
    time_large("shuffled", 1);

    if (failures) {
        fprintf(stderr, "test_md_codec: %d failures\n", failures);
        return 1;
    }
    printf("test_md_codec: all passed\n");
    return 0;
}
