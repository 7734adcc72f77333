/*
 * md_cases.c - blob builder, fixtures, comparison and the catalog of
 * hand-made metadata blobs (see md_cases.h).  The builder writes the format
 * of docs/metadata-format.md independently of src/core/md_codec.c, so the
 * catalog tests the decoder against the document, not against itself.
 */
#include "md_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (!q) {
        fprintf(stderr, "md_cases: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

/* ------------------------------------------------------------------------
 * Builder
 * ------------------------------------------------------------------------ */
void mb_free(mb_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static uint8_t *mb_grow(mb_t *b, size_t n)
{
    if (n == 0)
        return b->p; /* may be NULL: no arithmetic on it */
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap * 2 : 256;

        while (cap - b->len < n)
            cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    b->len += n;
    return b->p + b->len - n;
}

void mb_set_u8(mb_t *b, size_t off, uint8_t v)
{
    b->p[off] = v;
}

void mb_set_u16(mb_t *b, size_t off, uint16_t v)
{
    b->p[off] = (uint8_t)v;
    b->p[off + 1] = (uint8_t)(v >> 8);
}

void mb_set_u32(mb_t *b, size_t off, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b->p[off + (size_t)i] = (uint8_t)(v >> (8 * i));
}

void mb_set_u64(mb_t *b, size_t off, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b->p[off + (size_t)i] = (uint8_t)(v >> (8 * i));
}

void mb_u8(mb_t *b, uint8_t v)
{
    mb_grow(b, 1);
    mb_set_u8(b, b->len - 1, v);
}

void mb_u16(mb_t *b, uint16_t v)
{
    mb_grow(b, 2);
    mb_set_u16(b, b->len - 2, v);
}

void mb_u32(mb_t *b, uint32_t v)
{
    mb_grow(b, 4);
    mb_set_u32(b, b->len - 4, v);
}

void mb_u64(mb_t *b, uint64_t v)
{
    mb_grow(b, 8);
    mb_set_u64(b, b->len - 8, v);
}

void mb_bytes(mb_t *b, const void *src, size_t n)
{
    uint8_t *p = mb_grow(b, n);

    if (n)
        memcpy(p, src, n);
}

/* The catalog's blobs are version 2 (no checksum), so that each damaged
 * one reaches the check it was made for; the version-3 cases below add
 * the checksum to the reference blob (mb_seal_v3). */
void mb_header(mb_t *b, uint32_t num_sections)
{
    mb_header_v(b, num_sections, MB_CATALOG_VERSION);
}

/* CRC-32C bit by bit: written from the polynomial, independently of
 * src/util/crc32c.c. */
uint32_t mb_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

void mb_seal_v3(mb_t *b)
{
    mb_set_u16(b, 4, 3);
    mb_set_u32(b, 8, (uint32_t)b->len + 4);
    mb_u32(b, mb_crc32c(b->p, b->len));
}

void mb_header_v(mb_t *b, uint32_t num_sections, uint16_t version)
{
    mb_u32(b, NIXL_MD_MAGIC);
    mb_u16(b, version);
    mb_u16(b, 16);
    mb_u32(b, 0);
    mb_u32(b, num_sections);
}

void mb_done(mb_t *b)
{
    mb_set_u32(b, 8, (uint32_t)b->len);
}

size_t mb_sec_begin(mb_t *b, uint16_t type, uint16_t flags)
{
    mb_u16(b, type);
    mb_u16(b, flags);
    mb_u32(b, 0);
    return b->len - 4;
}

void mb_sec_end(mb_t *b, size_t len_at)
{
    mb_set_u32(b, len_at, (uint32_t)(b->len - len_at - 4));
}

void mb_agent(mb_t *b, const char *name, const char *hostname)
{
    mb_agent_v(b, name, hostname, MB_CATALOG_VERSION);
}

/* The identity fields of a version-2 agent section in the catalog: uid,
 * start time, pid and network namespace inodes. */
#define MB_UID 1000u
#define MB_START 0x0102030405060708ull
#define MB_PIDNS 0xeffffffcull
#define MB_NETNS 0xf0000008ull

void mb_agent_v(mb_t *b, const char *name, const char *hostname, uint16_t version)
{
    size_t at = mb_sec_begin(b, 1, 0);

    mb_u8(b, (uint8_t)strlen(name));
    mb_bytes(b, name, strlen(name));
    mb_u8(b, (uint8_t)strlen(hostname));
    mb_bytes(b, hostname, strlen(hostname));
    for (uint8_t i = 0; i < 16; i++)
        mb_u8(b, i);
    mb_u32(b, 4242);
    mb_u64(b, 0x1122334455667788ull);
    if (version >= 2) {
        mb_u32(b, MB_UID);
        mb_u64(b, MB_START);
        mb_u64(b, MB_PIDNS);
        mb_u64(b, MB_NETNS);
    }
    mb_sec_end(b, at);
}

size_t mb_backend_begin(mb_t *b, const char *name, const void *conn, uint32_t conn_len,
                        uint32_t num_regions)
{
    size_t at = mb_sec_begin(b, 2, 0);

    mb_u8(b, (uint8_t)strlen(name));
    mb_bytes(b, name, strlen(name));
    mb_u32(b, conn_len);
    mb_bytes(b, conn, conn_len);
    mb_u32(b, num_regions);
    return at;
}

void mb_partial(mb_t *b, uint16_t section_flags, uint32_t flags)
{
    size_t at = mb_sec_begin(b, 3, section_flags);

    mb_u32(b, flags);
    mb_sec_end(b, at);
}

void mb_region(mb_t *b, uint8_t mem_type, uint32_t dev_id, uint64_t addr, uint64_t len,
               uint32_t rkey_len)
{
    mb_u8(b, mem_type);
    mb_u8(b, 0);
    mb_u16(b, 0);
    mb_u32(b, dev_id);
    mb_u64(b, addr);
    mb_u64(b, len);
    mb_u32(b, rkey_len);
    for (uint32_t i = 0; i < rkey_len; i++)
        mb_u8(b, (uint8_t)(0xa0 + i));
}

/* ------------------------------------------------------------------------
 * Fixtures and comparison
 * ------------------------------------------------------------------------ */
static const uint8_t key_pool[64] = {
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,
    0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00,
    0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0,
    0xde, 0xad, 0xbe, 0xef, 0xca, 0xfe, 0xba, 0xbe, 0x8b, 0xad, 0xf0, 0x0d, 0x0b, 0xad, 0xc0, 0xde,
};

nixl_md_t *md_fixture_new(uint32_t num_backends, uint32_t num_regions, int shuffle)
{
    size_t size = sizeof(nixl_md_t) + num_backends * sizeof(nixl_md_backend_t) +
                  (size_t)num_backends * num_regions * sizeof(nixl_md_region_t);
    nixl_md_t *md = xrealloc(NULL, size);
    nixl_md_region_t *regions;
    uint64_t rng = 0x9e3779b97f4a7c15ull;

    memset(md, 0, size);
    snprintf(md->name, sizeof(md->name), "agent-%u.%u", num_backends, num_regions);
    snprintf(md->host.hostname, sizeof(md->host.hostname), "node-7.cluster");
    for (int i = 0; i < 16; i++)
        md->host.boot_id[i] = (uint8_t)(0x30 + i);
    md->pid = 31337;
    md->instance_id = 0xfedcba9876543210ull;
    md->uid = 4321;
    md->start_time = 123456789;
    md->pidns = 4026531836ull;
    md->netns = 4026531840ull;
    md->num_backends = num_backends;
    md->backends = num_backends ? (nixl_md_backend_t *)(md + 1) : NULL;
    regions = (nixl_md_region_t *)((nixl_md_backend_t *)(md + 1) + num_backends);

    for (uint32_t b = 0; b < num_backends; b++) {
        nixl_md_backend_t *be = &md->backends[b];

        snprintf(be->name, sizeof(be->name), "backend_%u", b);
        be->conn = key_pool + b % 16;
        be->conn_len = b % 17;
        be->num_regions = num_regions;
        be->regions = num_regions ? regions : NULL;
        /* Sorted unless shuffled: the first half DRAM, the rest VRAM, over
         * the same address range (types must not count as overlapping). */
        for (uint32_t i = 0, half = (num_regions + 1) / 2; i < num_regions; i++) {
            nixl_md_region_t *rg = &regions[i];
            uint32_t slot = i < half ? i : i - half;

            rg->mem_type = i < half ? NIXL_MEM_DRAM : NIXL_MEM_VRAM;
            rg->dev_id = rg->mem_type == NIXL_MEM_VRAM ? i % 8 : 0;
            rg->addr = 0x100000ull + (uint64_t)slot * 0x3000 + b;
            rg->len = 0x1000 + (i % 7) * 0x100;
            rg->rkey_len = i % 5;
            rg->rkey = rg->rkey_len ? key_pool + i % 32 : NULL;
        }
        if (shuffle) {
            for (uint32_t i = num_regions; i > 1; i--) {
                nixl_md_region_t t;
                uint32_t j;

                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                j = (uint32_t)((rng >> 33) % i);
                t = regions[i - 1];
                regions[i - 1] = regions[j];
                regions[j] = t;
            }
        }
        regions += num_regions;
    }
    return md;
}

static int bytes_equal(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

const char *md_diff(const nixl_md_t *a, const nixl_md_t *b)
{
    if (strcmp(a->name, b->name) != 0)
        return "agent name";
    if (strcmp(a->host.hostname, b->host.hostname) != 0)
        return "hostname";
    if (memcmp(a->host.boot_id, b->host.boot_id, sizeof(a->host.boot_id)) != 0)
        return "boot id";
    if (a->pid != b->pid)
        return "pid";
    if (a->instance_id != b->instance_id)
        return "instance id";
    if (a->uid != b->uid || a->start_time != b->start_time)
        return "uid or start time";
    if (a->pidns != b->pidns || a->netns != b->netns)
        return "namespaces";
    if (a->partial != b->partial)
        return "partial flag";
    if (a->conn_omitted != b->conn_omitted)
        return "connection info omitted flag";
    if (a->num_backends != b->num_backends)
        return "backend count";
    for (uint32_t i = 0; i < a->num_backends; i++) {
        const nixl_md_backend_t *x = &a->backends[i], *y = &b->backends[i];

        if (strcmp(x->name, y->name) != 0)
            return "backend name";
        if (!bytes_equal(x->conn, x->conn_len, y->conn, y->conn_len))
            return "backend connection info";
        if (x->num_regions != y->num_regions)
            return "region count";
        for (uint32_t r = 0; r < x->num_regions; r++) {
            const nixl_md_region_t *p = &x->regions[r], *q = &y->regions[r];

            if (p->mem_type != q->mem_type || p->dev_id != q->dev_id || p->addr != q->addr ||
                p->len != q->len)
                return "region fields";
            if (!bytes_equal(p->rkey, p->rkey_len, q->rkey, q->rkey_len))
                return "region key";
        }
    }
    return NULL;
}

static int name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n == 0 || n > max)
        return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@/+-") == n;
}

const char *md_check_guarantees(const nixl_md_t *md)
{
    if (!name_ok(md->name, NIXL_NAME_MAX))
        return "agent name";
    if (strnlen(md->host.hostname, sizeof(md->host.hostname)) >= sizeof(md->host.hostname))
        return "hostname not terminated";
    if (md->num_backends > NIXL_MD_MAX_BACKENDS)
        return "too many backends";
    if (md->conn_omitted && !md->partial)
        return "connection info omitted from a full blob";
    for (uint32_t i = 0; i < md->num_backends; i++) {
        const nixl_md_backend_t *be = &md->backends[i];

        if (!name_ok(be->name, NIXL_MD_BACKEND_NAME_MAX))
            return "backend name";
        if (md->conn_omitted && be->conn_len)
            return "connection info in a partial blob that omits it";
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(md->backends[j].name, be->name) == 0)
                return "duplicate backend";
        for (uint32_t r = 0; r < be->num_regions; r++) {
            const nixl_md_region_t *rg = &be->regions[r], *prev = rg - 1;

            if ((unsigned)rg->mem_type >= NIXL_MEM_TYPE_COUNT || rg->len == 0 ||
                rg->addr + rg->len < rg->addr)
                return "bad region";
            if (r == 0 || prev->mem_type < rg->mem_type)
                continue;
            if (prev->mem_type > rg->mem_type || prev->addr + prev->len > rg->addr)
                return "regions unsorted or overlapping";
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------
 * The catalog
 * ------------------------------------------------------------------------ */
typedef struct catalog {
    md_case_t *v;
    size_t n;
    size_t cap;
} catalog_t;

static void add_bytes(catalog_t *c, const char *name, nixl_status_t expect, int in_corpus,
                      const uint8_t *p, size_t len)
{
    md_case_t *k;

    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->v = xrealloc(c->v, c->cap * sizeof(*c->v));
    }
    k = &c->v[c->n++];
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->expect = expect;
    k->in_corpus = in_corpus;
    k->len = len;
    k->blob = xrealloc(NULL, len);
    if (len)
        memcpy(k->blob, p, len);
}

/* Adds b (finishing its total length) and frees it. */
static void add(catalog_t *c, const char *name, nixl_status_t expect, mb_t *b)
{
    mb_done(b);
    add_bytes(c, name, expect, 1, b->p, b->len);
    mb_free(b);
}

/* The reference blob most malformed cases are one patch away from, with
 * the offsets of the fields they patch. */
typedef struct std_blob {
    mb_t b;
    size_t agent_len_at, agent_name, host, boot_id, agent_payload;
    size_t be_len_at[2], be_name[2], be_conn[2], be_count[2];
    size_t region[2][3];
} std_blob_t;

static const char std_conn0[] = "shm:/nixl-4242";
static const uint8_t std_conn1[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};

static void std_build(std_blob_t *s)
{
    mb_t *b = &s->b;

    memset(s, 0, sizeof(*s));
    mb_header(b, 3);
    s->agent_len_at = b->len + 4;
    s->agent_name = b->len + 8;
    s->host = s->agent_name + 1 + strlen("prefill-0");
    s->boot_id = s->host + 1 + strlen("node-a.example");
    mb_agent(b, "prefill-0", "node-a.example");
    s->agent_payload = b->len - s->agent_name;

    s->be_len_at[0] = b->len + 4;
    s->be_name[0] = b->len + 8;
    s->be_conn[0] = s->be_name[0] + 1 + 3;
    s->be_count[0] = s->be_conn[0] + 4 + strlen(std_conn0);
    mb_backend_begin(b, "shm", std_conn0, (uint32_t)strlen(std_conn0), 3);
    s->region[0][0] = b->len;
    mb_region(b, NIXL_MEM_DRAM, 0, 0x10000, 0x1000, 0);
    s->region[0][1] = b->len;
    mb_region(b, NIXL_MEM_DRAM, 0, 0x20000, 0x2000, 8);
    s->region[0][2] = b->len;
    mb_region(b, NIXL_MEM_DRAM, 0, 0x40000, 0x100, 3);
    mb_sec_end(b, s->be_len_at[0]);

    s->be_len_at[1] = b->len + 4;
    s->be_name[1] = b->len + 8;
    s->be_conn[1] = s->be_name[1] + 1 + 3;
    s->be_count[1] = s->be_conn[1] + 4 + sizeof(std_conn1);
    mb_backend_begin(b, "ucx", std_conn1, sizeof(std_conn1), 2);
    s->region[1][0] = b->len;
    mb_region(b, NIXL_MEM_DRAM, 0, 0x10000, 0x1000, 16);
    s->region[1][1] = b->len;
    mb_region(b, NIXL_MEM_VRAM, 1, 0x7f0000000000ull, 0x200000, 12);
    mb_sec_end(b, s->be_len_at[1]);
    mb_done(b);
}

/* Adds the reference blob with one field overwritten (width 1, 2, 4, 8). */
static void add_patch(catalog_t *c, const std_blob_t *s, const char *name, nixl_status_t expect,
                      size_t off, int width, uint64_t v)
{
    mb_t b = {0};

    mb_bytes(&b, s->b.p, s->b.len);
    switch (width) {
    case 1: mb_set_u8(&b, off, (uint8_t)v); break;
    case 2: mb_set_u16(&b, off, (uint16_t)v); break;
    case 4: mb_set_u32(&b, off, (uint32_t)v); break;
    default: mb_set_u64(&b, off, v); break;
    }
    add_bytes(c, name, expect, 1, b.p, b.len);
    mb_free(&b);
}

static void add_truncations(catalog_t *c, const std_blob_t *s)
{
    char name[48];

    for (size_t k = 0; k < s->b.len; k++) {
        mb_t b = {0};
        /* Corpus: the whole header, then a sample; the unit test runs all. */
        int in_corpus = k < 20 || k % 9 == 0 || k == s->b.len - 1;

        mb_bytes(&b, s->b.p, k);
        /* Past the total-length field, make it agree with the cut so the
         * decoder has to find the truncation inside the sections. */
        if (k >= 12) {
            mb_set_u32(&b, 8, (uint32_t)k);
            snprintf(name, sizeof(name), "bad-cut-at-%zu", k);
        } else {
            snprintf(name, sizeof(name), "bad-truncated-at-%zu", k);
        }
        add_bytes(c, name, NIXL_ERR_BAD_METADATA, in_corpus, b.p, b.len);
        mb_free(&b);
    }
}

/* The section whose length field is at len_at, cut to each shorter payload
 * with its length and the total kept consistent: the framing holds, so the
 * decoder must find the shortfall inside the section's own fields.  Then
 * the same section with one byte too many. */
static void add_short_payloads(catalog_t *c, const std_blob_t *s, size_t len_at, const char *what)
{
    const uint8_t *src = s->b.p;
    size_t payload = len_at + 4, full = src[len_at] | (size_t)src[len_at + 1] << 8;
    char name[48];
    mb_t b = {0};

    for (size_t k = 0; k < full; k++) {
        mb_bytes(&b, src, payload + k);
        mb_bytes(&b, src + payload + full, s->b.len - payload - full);
        mb_set_u32(&b, len_at, (uint32_t)k);
        mb_done(&b);
        snprintf(name, sizeof(name), "bad-short-%s-payload-%zu", what, k);
        add_bytes(c, name, NIXL_ERR_BAD_METADATA, k % 5 == 0, b.p, b.len);
        mb_free(&b);
    }
    mb_bytes(&b, src, payload + full);
    mb_u8(&b, 0);
    mb_bytes(&b, src + payload + full, s->b.len - payload - full);
    mb_set_u32(&b, len_at, (uint32_t)full + 1);
    mb_done(&b);
    snprintf(name, sizeof(name), "bad-%s-extra-byte", what);
    add_bytes(c, name, NIXL_ERR_BAD_METADATA, 1, b.p, b.len);
    mb_free(&b);
}

static void add_std_patches(catalog_t *c, const std_blob_t *s)
{
    const nixl_status_t bad = NIXL_ERR_BAD_METADATA;
    const size_t r00 = s->region[0][0], r01 = s->region[0][1], r11 = s->region[1][1];

    add_bytes(c, "ok-reference", NIXL_OK, 1, s->b.p, s->b.len);
    add_patch(c, s, "bad-magic", bad, 0, 4, 0xdeadbeef);
    add_patch(c, s, "bad-magic-byte-swapped", bad, 0, 4, 0x4e584d44);
    add_patch(c, s, "version-0", NIXL_ERR_MD_VERSION, 4, 2, 0);
    add_patch(c, s, "version-next", NIXL_ERR_MD_VERSION, 4, 2, NIXL_MD_VERSION + 1);
    /* A version-2 agent section under a version-1 header: 28 bytes too many. */
    add_patch(c, s, "bad-version-1-with-v2-agent", bad, 4, 2, 1);
    add_patch(c, s, "version-65535", NIXL_ERR_MD_VERSION, 4, 2, 0xffff);
    add_patch(c, s, "bad-header-len-20", bad, 6, 2, 20);
    add_patch(c, s, "bad-header-len-0", bad, 6, 2, 0);
    add_patch(c, s, "bad-total-len-short", bad, 8, 4, s->b.len - 1);
    add_patch(c, s, "bad-total-len-long", bad, 8, 4, s->b.len + 1);
    add_patch(c, s, "bad-total-len-huge", bad, 8, 4, 0xffffffff);
    add_patch(c, s, "bad-section-count-0", bad, 12, 4, 0);
    add_patch(c, s, "bad-section-count-1-trailing", bad, 12, 4, 1);
    add_patch(c, s, "bad-section-count-more", bad, 12, 4, 4);
    add_patch(c, s, "bad-section-count-huge", bad, 12, 4, 0xffffffff);
    add_patch(c, s, "bad-agent-type-0", bad, s->agent_len_at - 4, 2, 0);
    add_patch(c, s, "bad-agent-reserved-flag", bad, s->agent_len_at - 2, 2, 2);
    add_patch(c, s, "bad-agent-flags-ffff", bad, s->agent_len_at - 2, 2, 0xffff);
    add_patch(c, s, "ok-agent-skip-flag-ignored", NIXL_OK, s->agent_len_at - 2, 2, 1);
    add_patch(c, s, "bad-agent-section-len-huge", bad, s->agent_len_at, 4, 0xffffffff);
    add_patch(c, s, "bad-agent-section-len-short", bad, s->agent_len_at, 4, 30);
    add_patch(c, s, "bad-agent-section-len-long", bad, s->agent_len_at, 4, s->agent_payload + 1);
    add_patch(c, s, "bad-agent-section-len-v1", bad, s->agent_len_at, 4, s->agent_payload - 28);
    add_patch(c, s, "bad-agent-name-len-lies", bad, s->agent_name, 1, 255);
    add_patch(c, s, "bad-agent-name-len-0", bad, s->agent_name, 1, 0);
    add_patch(c, s, "bad-agent-name-char-space", bad, s->agent_name + 3, 1, ' ');
    add_patch(c, s, "bad-agent-name-char-nul", bad, s->agent_name + 1, 1, 0);
    add_patch(c, s, "bad-agent-name-char-high", bad, s->agent_name + 9, 1, 0xc3);
    add_patch(c, s, "bad-hostname-len-lies", bad, s->host, 1, 200);
    add_patch(c, s, "bad-hostname-char-del", bad, s->host + 2, 1, 0x7f);
    add_patch(c, s, "bad-hostname-char-nul", bad, s->host + 1, 1, 0);
    add_patch(c, s, "bad-backend-type-256-not-skippable", bad, s->be_len_at[0] - 4, 2, 256);
    add_patch(c, s, "ok-backend-type-256-skippable", NIXL_OK, s->be_len_at[0] - 4, 4, 0x00010100);
    /* Type 3 is PARTIAL: a backend payload is not its 4 bytes, skippable or not. */
    add_patch(c, s, "bad-backend-becomes-partial", bad, s->be_len_at[0] - 4, 2, 3);
    add_patch(c, s, "bad-backend-becomes-partial-skippable", bad, s->be_len_at[0] - 4, 4, 0x00010003);
    add_patch(c, s, "bad-backend-becomes-agent", bad, s->be_len_at[1] - 4, 2, 1);
    add_patch(c, s, "bad-backend-section-len-huge", bad, s->be_len_at[0], 4, 0xfffffff0);
    add_patch(c, s, "bad-backend-section-len-short", bad, s->be_len_at[1], 4, 60);
    add_patch(c, s, "bad-backend-section-len-long", bad, s->be_len_at[0], 4, 148);
    add_patch(c, s, "bad-backend-name-len-lies", bad, s->be_name[1], 1, 250);
    add_patch(c, s, "bad-backend-name-len-0", bad, s->be_name[0], 1, 0);
    add_patch(c, s, "bad-backend-name-char", bad, s->be_name[0] + 2, 1, '$');
    add_patch(c, s, "bad-backend-conn-len-huge", bad, s->be_conn[0], 4, 0xffffffff);
    add_patch(c, s, "bad-backend-conn-len-plus-1", bad, s->be_conn[0], 4, strlen(std_conn0) + 1);
    add_patch(c, s, "bad-region-count-huge", bad, s->be_count[0], 4, 0xffffffff);
    add_patch(c, s, "bad-region-count-over-limit", bad, s->be_count[0], 4, NIXL_MD_MAX_REGIONS + 1);
    add_patch(c, s, "bad-region-count-plus-1", bad, s->be_count[0], 4, 4);
    add_patch(c, s, "bad-region-count-minus-1", bad, s->be_count[0], 4, 2);
    add_patch(c, s, "bad-region-mem-type-5", bad, r01, 1, NIXL_MEM_TYPE_COUNT);
    add_patch(c, s, "bad-region-mem-type-255", bad, r11, 1, 255);
    add_patch(c, s, "ok-region-mem-type-file", NIXL_OK, r11, 1, NIXL_MEM_FILE);
    add_patch(c, s, "bad-region-reserved-u8", bad, r00 + 1, 1, 1);
    add_patch(c, s, "bad-region-reserved-u16", bad, r01 + 2, 2, 0x8000);
    add_patch(c, s, "bad-region-zero-length", bad, r01 + 16, 8, 0);
    add_patch(c, s, "bad-region-addr-len-overflow", bad, r11 + 8, 8, 0xffffffffffe00000ull);
    add_patch(c, s, "ok-region-ends-at-max", NIXL_OK, r11 + 8, 8, 0xffffffffffdfffffull);
    add_patch(c, s, "bad-region-len-max", bad, r00 + 16, 8, UINT64_MAX);
    add_patch(c, s, "bad-region-rkey-len-huge", bad, r01 + 24, 4, 0xffffffff);
    add_patch(c, s, "bad-region-rkey-len-plus-1", bad, r01 + 24, 4, 9);
    add_patch(c, s, "bad-region-rkey-len-minus-1", bad, r01 + 24, 4, 7);
    add_patch(c, s, "bad-overlap-by-one-byte", bad, r01 + 8, 8, 0x10fff);
    add_patch(c, s, "ok-adjacent-regions", NIXL_OK, r01 + 8, 8, 0x11000);
    add_patch(c, s, "bad-overlap-same-addr", bad, r01 + 8, 8, 0x10000);
    add_patch(c, s, "bad-overlap-unsorted", bad, r00 + 8, 8, 0x21fff);
    add_patch(c, s, "ok-unsorted-regions", NIXL_OK, r00 + 8, 8, 0x50000);
    /* Renames "ucx" to "shm": length byte 3, then "shm". */
    add_patch(c, s, "bad-duplicate-backend-names", bad, s->be_name[1], 4, 0x6d687303);
}

static void add_section_shapes(catalog_t *c)
{
    const nixl_status_t bad = NIXL_ERR_BAD_METADATA;
    static const char long_agent[] =
        "a123456789b123456789c123456789d123456789e123456789f123456789xyz"; /* 63 */
    static const char long_backend[] = "B123456789C123456789D123456789E"; /* 31 */
    static const char host63[] =
        "h123456789h123456789h123456789h123456789h123456789h123456789abc";
    char name[48];
    mb_t b = {0};
    size_t at;

    /* The worked example of docs/metadata-format.md, byte for byte. */
    mb_header(&b, 2);
    mb_agent(&b, "p0", "n1");
    at = mb_backend_begin(&b, "shm", "x", 1, 1);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x10000, 0x1000, 2);
    mb_sec_end(&b, at);
    add(c, "ok-doc-example", NIXL_OK, &b);

    mb_header(&b, 1);
    mb_agent(&b, "decode-0", "node-b");
    add(c, "ok-agent-only", NIXL_OK, &b);

    /* Version 1 is still read: its agent section has no uid, start time
     * or namespaces; a version-1 section under a version-2 header is short. */
    mb_header_v(&b, 2, 1);
    mb_agent_v(&b, "p0", "n1", 1);
    at = mb_backend_begin(&b, "shm", "x", 1, 1);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x10000, 0x1000, 2);
    mb_sec_end(&b, at);
    add(c, "ok-version-1", NIXL_OK, &b);

    mb_header_v(&b, 1, 2);
    mb_agent_v(&b, "p0", "n1", 1);
    add(c, "bad-version-2-with-v1-agent", bad, &b);

    mb_header(&b, 1);
    mb_agent(&b, "x", "");
    add(c, "ok-empty-hostname", NIXL_OK, &b);

    mb_header(&b, 2);
    mb_agent(&b, long_agent, host63);
    at = mb_backend_begin(&b, long_backend, NULL, 0, 0);
    mb_sec_end(&b, at);
    add(c, "ok-longest-names", NIXL_OK, &b);

    mb_header(&b, 1);
    mb_agent(&b, "a123456789b123456789c123456789d123456789e123456789f123456789wxyz", "h");
    add(c, "bad-agent-name-64", bad, &b);

    mb_header(&b, 1);
    mb_agent(&b, "a", "h123456789h123456789h123456789h123456789h123456789h123456789abcd");
    add(c, "bad-hostname-64", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "B123456789C123456789D123456789EF", NULL, 0, 0);
    mb_sec_end(&b, at);
    add(c, "bad-backend-name-32", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "all_chars.:@/+-AZaz09", "h");
    at = mb_backend_begin(&b, "z_.:@/+-", "c", 1, 0);
    mb_sec_end(&b, at);
    add(c, "ok-name-charset", NIXL_OK, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "shm", NULL, 0, 0);
    mb_sec_end(&b, at);
    add(c, "ok-one-backend-no-regions", NIXL_OK, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "shm", "conn", 4, 1);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x7fff00001000ull, 4096, 0);
    mb_sec_end(&b, at);
    add(c, "ok-one-backend-one-region", NIXL_OK, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "cuda_ipc", "c", 1, 40);
    for (uint32_t i = 0; i < 40; i++)
        mb_region(&b, (uint8_t)(i % 3), i % 4, 0x1000ull * (i / 3) + 0x100000, 0x800, i % 9);
    mb_sec_end(&b, at);
    add(c, "ok-one-backend-many-regions", NIXL_OK, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "cuda_ipc", "c", 1, 40);
    for (uint32_t i = 40; i-- > 0;)
        mb_region(&b, (uint8_t)(i % 2), 0, 0x1000ull * i, 0x1000, 1);
    mb_sec_end(&b, at);
    add(c, "ok-reversed-regions", NIXL_OK, &b);

    mb_header(&b, 3);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "shm", "one", 3, 1);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x1000, 0x1000, 4);
    mb_sec_end(&b, at);
    at = mb_backend_begin(&b, "ucx", "two", 3, 1);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x1000, 0x1000, 4); /* same range, other backend: fine */
    mb_sec_end(&b, at);
    add(c, "ok-two-backends-same-range", NIXL_OK, &b);

    mb_header(&b, 1 + NIXL_MD_MAX_BACKENDS);
    mb_agent(&b, "a", "h");
    for (int i = 0; i < NIXL_MD_MAX_BACKENDS; i++) {
        snprintf(name, sizeof(name), "be%d", i);
        at = mb_backend_begin(&b, name, NULL, 0, 0);
        mb_sec_end(&b, at);
    }
    add(c, "ok-max-backends", NIXL_OK, &b);

    mb_header(&b, 2 + NIXL_MD_MAX_BACKENDS);
    mb_agent(&b, "a", "h");
    for (int i = 0; i <= NIXL_MD_MAX_BACKENDS; i++) {
        snprintf(name, sizeof(name), "be%d", i);
        at = mb_backend_begin(&b, name, NULL, 0, 0);
        mb_sec_end(&b, at);
    }
    add(c, "bad-too-many-backends", bad, &b);

    /* Unknown sections: skipped when flagged, anywhere after the agent. */
    mb_header(&b, 4);
    mb_agent(&b, "a", "h");
    at = mb_sec_begin(&b, 77, 1);
    mb_bytes(&b, "future data", 11);
    mb_sec_end(&b, at);
    at = mb_backend_begin(&b, "shm", NULL, 0, 1);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x1000, 0x1000, 0);
    mb_sec_end(&b, at);
    at = mb_sec_begin(&b, 0xffff, 1);
    mb_sec_end(&b, at);
    add(c, "ok-unknown-skippable-sections", NIXL_OK, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_sec_begin(&b, 77, 0);
    mb_bytes(&b, "future data", 11);
    mb_sec_end(&b, at);
    add(c, "bad-unknown-section-not-skippable", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_sec_begin(&b, 0, 0);
    mb_sec_end(&b, at);
    add(c, "bad-section-type-0", bad, &b);

    mb_header(&b, 2);
    at = mb_sec_begin(&b, 77, 1);
    mb_sec_end(&b, at);
    mb_agent(&b, "a", "h");
    add(c, "bad-skippable-before-agent", bad, &b);

    mb_header(&b, 2);
    at = mb_backend_begin(&b, "shm", NULL, 0, 0);
    mb_sec_end(&b, at);
    mb_agent(&b, "a", "h");
    add(c, "bad-backend-before-agent", bad, &b);

    mb_header(&b, 1);
    at = mb_backend_begin(&b, "shm", NULL, 0, 0);
    mb_sec_end(&b, at);
    add(c, "bad-no-agent", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    mb_agent(&b, "b", "h");
    add(c, "bad-two-agents", bad, &b);

    mb_header(&b, 0);
    add(c, "bad-no-sections", bad, &b);

    mb_header(&b, 1);
    mb_agent(&b, "a", "h");
    mb_u8(&b, 0);
    add(c, "bad-trailing-byte", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "shm", NULL, 0, 3);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x3000, 0x1000, 0);
    mb_region(&b, NIXL_MEM_VRAM, 0, 0x1000, 0x1000, 0);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x1000, 0x2001, 0);
    mb_sec_end(&b, at);
    add(c, "bad-overlap-across-dram-vram-order", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "shm", NULL, 0, 3);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x1000, 0x10000, 0);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x4000, 0x10, 0); /* inside the first */
    mb_region(&b, NIXL_MEM_VRAM, 0, 0x1000, 0x10000, 0);
    mb_sec_end(&b, at);
    add(c, "bad-overlap-contained", bad, &b);

    /* A claimed count no payload can hold must be refused before any
     * allocation is sized from it. */
    mb_header(&b, 2);
    mb_agent(&b, "a", "h");
    at = mb_backend_begin(&b, "shm", NULL, 0, NIXL_MD_MAX_REGIONS);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x1000, 0x1000, 0);
    mb_sec_end(&b, at);
    add(c, "bad-region-count-max-with-one", bad, &b);

    /* The shortest blob announcing a future version: a header that will
     * not be readable must still yield NIXL_ERR_MD_VERSION. */
    mb_u32(&b, NIXL_MD_MAGIC);
    mb_u16(&b, NIXL_MD_VERSION + 1);
    add_bytes(c, "version-next-6-bytes", NIXL_ERR_MD_VERSION, 1, b.p, b.len);
    mb_free(&b);
}

/* Partial blobs: a PARTIAL section (type 3, payload u32 flags, bit 0 =
 * connection info included) as section 1, and nowhere else. */
static void add_partial_shapes(catalog_t *c)
{
    const nixl_status_t bad = NIXL_ERR_BAD_METADATA;
    char name[48];
    mb_t b = {0}, ex = {0};
    size_t at;

    /* The partial worked example of docs/metadata-format.md. */
    mb_header(&ex, 3);
    mb_agent(&ex, "p0", "n1");
    mb_partial(&ex, 0, 0);
    at = mb_backend_begin(&ex, "shm", NULL, 0, 1);
    mb_region(&ex, NIXL_MEM_DRAM, 0, 0x20000, 0x1000, 2);
    mb_sec_end(&ex, at);
    mb_done(&ex);
    add_bytes(c, "ok-partial-doc-example", NIXL_OK, 1, ex.p, ex.len);
    /* Every truncation of it (its total length kept in step past the header). */
    for (size_t k = 16; k < ex.len; k++) {
        mb_bytes(&b, ex.p, k);
        mb_set_u32(&b, 8, (uint32_t)k);
        snprintf(name, sizeof(name), "bad-partial-cut-at-%zu", k);
        /* Corpus: cuts around and inside the PARTIAL section (58..69), a few others. */
        add_bytes(c, name, bad, (k >= 58 && k <= 70 && k % 2 == 0) || k % 24 == 0 || k == ex.len - 1, b.p,
                  b.len);
        mb_free(&b);
    }
    mb_free(&ex);

    mb_header(&b, 3);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 0, 1);
    at = mb_backend_begin(&b, "shm", "conn", 4, 2);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x20000, 0x1000, 2);
    mb_region(&b, NIXL_MEM_VRAM, 3, 0x20000, 0x1000, 5);
    mb_sec_end(&b, at);
    add(c, "ok-partial-with-conn", NIXL_OK, &b);

    mb_header(&b, 2);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 0, 1);
    add(c, "ok-partial-agent-only", NIXL_OK, &b);

    mb_header(&b, 4);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 0, 0);
    at = mb_backend_begin(&b, "shm", NULL, 0, 1);
    mb_region(&b, NIXL_MEM_DRAM, 0, 0x20000, 0x1000, 0);
    mb_sec_end(&b, at);
    at = mb_backend_begin(&b, "libfabric", NULL, 0, 0);
    mb_sec_end(&b, at);
    add(c, "ok-partial-no-conn-two-backends", NIXL_OK, &b);

    mb_header(&b, 3);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 1, 1); /* MAY_SKIP on a known type: allowed, ignored */
    at = mb_sec_begin(&b, 77, 1);
    mb_bytes(&b, "later", 5);
    mb_sec_end(&b, at);
    add(c, "ok-partial-skip-flag-ignored", NIXL_OK, &b);

    mb_header(&b, 3);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 0, 0);
    at = mb_backend_begin(&b, "shm", "x", 1, 0);
    mb_sec_end(&b, at);
    add(c, "bad-partial-no-conn-but-conn-bytes", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 0, 2);
    add(c, "bad-partial-reserved-bit-1", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 0, 0x80000001u);
    add(c, "bad-partial-reserved-bit-31", bad, &b);

    mb_header(&b, 2);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 2, 1);
    add(c, "bad-partial-section-reserved-flag", bad, &b);

    for (uint32_t len = 0; len <= 8; len++) {
        if (len == 4)
            continue;
        mb_header(&b, 2);
        mb_agent(&b, "p0", "n1");
        at = mb_sec_begin(&b, 3, 0);
        for (uint32_t i = 0; i < len; i++)
            mb_u8(&b, i == 0 ? 1 : 0);
        mb_sec_end(&b, at);
        snprintf(name, sizeof(name), "bad-partial-payload-%u", len);
        add(c, name, bad, &b);
    }

    mb_header(&b, 3);
    mb_agent(&b, "p0", "n1");
    at = mb_backend_begin(&b, "shm", "x", 1, 0);
    mb_sec_end(&b, at);
    mb_partial(&b, 0, 1);
    add(c, "bad-partial-after-backend", bad, &b);

    mb_header(&b, 3);
    mb_agent(&b, "p0", "n1");
    mb_partial(&b, 0, 1);
    mb_partial(&b, 0, 1);
    add(c, "bad-partial-twice", bad, &b);

    mb_header(&b, 2);
    mb_partial(&b, 0, 1);
    mb_agent(&b, "p0", "n1");
    add(c, "bad-partial-before-agent", bad, &b);

    mb_header(&b, 1);
    mb_partial(&b, 0, 1);
    add(c, "bad-partial-only", bad, &b);
}

/* Version 3: the reference blob with its checksum loads; damaged anywhere
 * (a sample of single-bit flips here, every bit in test_md_codec), with its
 * checksum gone, zeroed, or no room for it, it is refused. */
static void add_v3_shapes(catalog_t *c, const std_blob_t *s)
{
    const nixl_status_t bad = NIXL_ERR_BAD_METADATA;
    mb_t b = {0};
    char name[48];

    mb_bytes(&b, s->b.p, s->b.len);
    mb_seal_v3(&b);
    add_bytes(c, "ok-v3-reference", NIXL_OK, 1, b.p, b.len);
    for (size_t off = 6; off < b.len; off += 7) {
        b.p[off] ^= (uint8_t)(1u << (off % 8));
        snprintf(name, sizeof(name), "bad-v3-flip-%zu", off);
        add_bytes(c, name, bad, 1, b.p, b.len);
        b.p[off] ^= (uint8_t)(1u << (off % 8));
    }
    mb_set_u32(&b, b.len - 4, 0);
    add_bytes(c, "bad-v3-crc-zero", bad, 1, b.p, b.len);
    /* The version-2 reference relabelled 3, its last 4 bytes taken for a checksum. */
    add_patch(c, s, "bad-v3-no-checksum", bad, 4, 2, 3);
    mb_free(&b);
    mb_header_v(&b, 0, 3);
    mb_done(&b);
    add(c, "bad-v3-no-room-for-checksum", bad, &b);
    /* The same damage with the checksum made to match: caught by what it damaged. */
    mb_bytes(&b, s->b.p, s->b.len);
    mb_set_u8(&b, s->agent_name, ' ');
    mb_seal_v3(&b);
    add_bytes(c, "bad-v3-sealed-name-char-space", bad, 1, b.p, b.len);
    mb_free(&b);
}

size_t md_cases_build(md_case_t **cases_out)
{
    catalog_t c = {0};
    std_blob_t s;

    std_build(&s);
    add_v3_shapes(&c, &s);
    add_std_patches(&c, &s);
    add_truncations(&c, &s);
    add_short_payloads(&c, &s, s.agent_len_at, "agent");
    add_short_payloads(&c, &s, s.be_len_at[0], "backend0");
    add_short_payloads(&c, &s, s.be_len_at[1], "backend1");
    mb_free(&s.b);
    add_section_shapes(&c);
    add_partial_shapes(&c);
    *cases_out = c.v;
    return c.n;
}

void md_cases_free(md_case_t *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(cases[i].blob);
    free(cases);
}
