/*
 * md_codec.c - the metadata blob: the little-endian binary record one agent
 * publishes (name, host identity, per-backend connection info and
 * registered regions) and its peers decode.
 *
 * The decoder treats the blob as hostile.  Every length is checked against
 * the bytes that remain before it is used (by subtraction, so no sum can
 * wrap), nothing is allocated from a count the blob merely claims, and the
 * whole result is validated before it is returned.  Decoding is two passes:
 * a scan that checks the framing and counts backends and regions, then one
 * allocation holding the struct, the backends and every region, then the
 * full parse into it.  The byte layout and the rules are in
 * docs/metadata-format.md; keep both in step.
 *
 * A partial blob is a full one with a PARTIAL section right after the agent
 * section.  That section is not skippable on purpose: a reader that does
 * not know it refuses the blob instead of taking a few regions for the
 * whole of the agent's metadata.
 */
#include "core/md_codec.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "nixl/backend_util.h"
#include "util/crc32c.h"
#include "util/log.h"

enum {
    MD_HEADER_LEN = 16,
    /* Version 3: a u32 CRC-32C of every byte before it ends the blob. */
    MD_CRC_LEN = 4,
    MD_CRC_SINCE = 3,
    MD_SECTION_HEADER_LEN = 8,
    MD_SECTION_AGENT = 1,
    MD_SECTION_BACKEND = 2,
    MD_SECTION_PARTIAL = 3,
    MD_FLAG_MAY_SKIP = 1u << 0,
    /* PARTIAL payload: u32 flags; bit 0 says the backends carry their
     * connection info, the other bits are reserved. */
    MD_PARTIAL_LEN = 4,
    MD_PARTIAL_CONN_INFO = 1u << 0,
    MD_BOOT_ID_LEN = 16,
    /* boot id, pid u32, instance id u64: what follows the hostname in a
     * version-1 agent section; version 2 adds uid u32, start time u64,
     * pid namespace u64, network namespace u64. */
    MD_AGENT_V1_TAIL = MD_BOOT_ID_LEN + 4 + 8,
    MD_AGENT_V2_TAIL = MD_AGENT_V1_TAIL + 4 + 8 + 8 + 8,
    /* mem_type u8, reserved u8, reserved u16, dev_id u32, addr u64,
     * len u64, rkey_len u32: the size of a region without its key. */
    MD_REGION_FIXED_LEN = 1 + 1 + 2 + 4 + 8 + 8 + 4,
};

/* Returns from the enclosing function after logging what was wrong. */
#define MD_REJECT(...)                                                                           \
    do {                                                                                         \
        NIXL_WARN("metadata: " __VA_ARGS__);                                                     \
        return NIXL_ERR_BAD_METADATA;                                                            \
    } while (0)

#define MD_INVALID(...)                                                                          \
    do {                                                                                         \
        NIXL_ERROR("metadata encode: " __VA_ARGS__);                                             \
        return NIXL_ERR_INVALID_PARAM;                                                           \
    } while (0)

/* ------------------------------------------------------------------------
 * Byte order: the kit's little-endian loads and stores (nixl/backend_util.h),
 * as cursors for the encoder.
 * ------------------------------------------------------------------------ */
static uint8_t *st_u8(uint8_t *p, uint8_t v)
{
    p[0] = v;
    return p + 1;
}

static uint8_t *st_u16(uint8_t *p, uint16_t v)
{
    nixl_put_u16(p, v);
    return p + 2;
}

static uint8_t *st_u32(uint8_t *p, uint32_t v)
{
    nixl_put_u32(p, v);
    return p + 4;
}

static uint8_t *st_u64(uint8_t *p, uint64_t v)
{
    nixl_put_u64(p, v);
    return p + 8;
}

static uint8_t *st_bytes(uint8_t *p, const void *src, size_t n)
{
    if (n)
        memcpy(p, src, n);
    return p + n;
}

/* A cursor over untrusted bytes.  Every take checks `left` first. */
typedef struct md_reader {
    const uint8_t *p;
    size_t left;
} md_reader_t;

static const uint8_t *rd_take(md_reader_t *r, size_t n)
{
    const uint8_t *p = r->p;

    if (n > r->left)
        return NULL;
    r->p += n;
    r->left -= n;
    return p;
}

/* ------------------------------------------------------------------------
 * Rules shared by the decoder and the encoder.  Each returns NULL when the
 * value is acceptable, else a short phrase for the log line.
 * ------------------------------------------------------------------------ */
static int name_char_ok(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == ':' || c == '@' || c == '/' || c == '+' || c == '-';
}

static const char *name_problem(const uint8_t *s, size_t len, size_t max)
{
    if (len == 0)
        return "empty name";
    if (len > max)
        return "name too long";
    for (size_t i = 0; i < len; i++)
        if (!name_char_ok(s[i]))
            return "name has a character outside [A-Za-z0-9_.:@/+-]";
    return NULL;
}

/* Hostnames are only compared and printed: any visible ASCII, may be empty
 * (gethostname can fail). */
static const char *hostname_problem(const uint8_t *s, size_t len)
{
    if (len >= sizeof(((nixl_host_id_t *)0)->hostname))
        return "hostname too long";
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return "hostname has a byte outside visible ASCII";
    return NULL;
}

static const char *region_problem(const nixl_md_region_t *r)
{
    if ((unsigned)r->mem_type >= NIXL_MEM_TYPE_COUNT)
        return "memory type out of range";
    if (r->len == 0)
        return "length 0";
    if (r->len > UINT64_MAX - r->addr)
        return "address + length overflows";
    return NULL;
}

static int region_cmp(const void *a, const void *b)
{
    const nixl_md_region_t *x = a, *y = b;

    if (x->mem_type != y->mem_type)
        return x->mem_type < y->mem_type ? -1 : 1;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return 0;
}

static int regions_sorted(const nixl_md_region_t *r, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++)
        if (region_cmp(&r[i - 1], &r[i]) > 0)
            return 0;
    return 1;
}

/* On sorted regions: index i such that regions i-1 and i overlap, or 0.
 * Adjacent pairs suffice: if a region overlaps a later one, it overlaps
 * its immediate successor too. */
static uint32_t regions_first_overlap(const nixl_md_region_t *r, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++)
        if (r[i - 1].mem_type == r[i].mem_type && r[i - 1].addr + r[i - 1].len > r[i].addr)
            return i;
    return 0;
}

/* ------------------------------------------------------------------------
 * Decoder
 * ------------------------------------------------------------------------ */
typedef struct md_section {
    uint16_t type;
    uint16_t flags;
    md_reader_t payload;
} md_section_t;

static nixl_status_t next_section(md_reader_t *r, uint32_t index, md_section_t *out)
{
    const uint8_t *h = rd_take(r, MD_SECTION_HEADER_LEN);
    uint32_t len;

    if (!h)
        MD_REJECT("section %" PRIu32 ": header truncated (%zu bytes left)", index, r->left);
    len = nixl_get_u32(h + 4);
    out->type = nixl_get_u16(h);
    out->flags = nixl_get_u16(h + 2);
    out->payload.p = rd_take(r, len);
    if (!out->payload.p)
        MD_REJECT("section %" PRIu32 " (type %u): payload length %" PRIu32
                  " exceeds the %zu bytes left",
                  index, out->type, len, r->left);
    out->payload.left = len;
    if (out->flags & ~MD_FLAG_MAY_SKIP)
        MD_REJECT("section %" PRIu32 " (type %u): reserved flag bits 0x%x set", index, out->type,
                  out->flags & ~MD_FLAG_MAY_SKIP);
    return NIXL_OK;
}

typedef struct md_backend_head {
    const uint8_t *name;
    uint8_t name_len;
    const uint8_t *conn;
    uint32_t conn_len;
    uint32_t num_regions;
} md_backend_head_t;

/* The part of a backend section before its regions.  Both passes read it;
 * the scan needs num_regions to size the allocation, which is why the count
 * is bounded here by what the payload can hold. */
static nixl_status_t parse_backend_head(md_reader_t *r, uint32_t index, md_backend_head_t *out)
{
    const uint8_t *p;
    const char *why;

    if (!(p = rd_take(r, 1)))
        MD_REJECT("backend #%" PRIu32 ": truncated before the name", index);
    out->name_len = p[0];
    if (!(out->name = rd_take(r, out->name_len)))
        MD_REJECT("backend #%" PRIu32 ": name length %u exceeds the %zu bytes left", index,
                  out->name_len, r->left);
    if ((why = name_problem(out->name, out->name_len, NIXL_MD_BACKEND_NAME_MAX)))
        MD_REJECT("backend #%" PRIu32 ": %s", index, why);
    if (!(p = rd_take(r, 4)))
        MD_REJECT("backend %.*s: truncated before the connection info", out->name_len,
                  (const char *)out->name);
    out->conn_len = nixl_get_u32(p);
    if (!(out->conn = rd_take(r, out->conn_len)))
        MD_REJECT("backend %.*s: connection info length %" PRIu32 " exceeds the %zu bytes left",
                  out->name_len, (const char *)out->name, out->conn_len, r->left);
    if (!(p = rd_take(r, 4)))
        MD_REJECT("backend %.*s: truncated before the region count", out->name_len,
                  (const char *)out->name);
    out->num_regions = nixl_get_u32(p);
    if (out->num_regions > NIXL_MD_MAX_REGIONS)
        MD_REJECT("backend %.*s: %" PRIu32 " regions, more than the limit %u", out->name_len,
                  (const char *)out->name, out->num_regions, NIXL_MD_MAX_REGIONS);
    if (out->num_regions > r->left / MD_REGION_FIXED_LEN)
        MD_REJECT("backend %.*s: %" PRIu32 " regions cannot fit in the %zu bytes left",
                  out->name_len, (const char *)out->name, out->num_regions, r->left);
    return NIXL_OK;
}

typedef struct md_scan {
    uint16_t version;
    md_reader_t sections; /* from the first section to the end */
    uint32_t num_sections;
    uint32_t num_backends;
    size_t num_regions;
} md_scan_t;

static nixl_status_t scan_header(const uint8_t *b, size_t len, md_scan_t *scan)
{
    uint32_t magic, total;
    uint16_t version, header_len;

    /* Magic and version are read before the header is known to be whole,
     * so that a blob from a future version with a longer header is
     * reported as a version mismatch, not as garbage. */
    if (len < 4)
        MD_REJECT("%zu bytes, too short for a header", len);
    magic = nixl_get_u32(b);
    if (magic != NIXL_MD_MAGIC)
        MD_REJECT("bad magic 0x%08" PRIx32 " (expected 0x%08x)", magic, NIXL_MD_MAGIC);
    if (len < 6)
        MD_REJECT("%zu bytes, too short for a header", len);
    version = nixl_get_u16(b + 4);
    if (version < NIXL_MD_VERSION_MIN || version > NIXL_MD_VERSION) {
        NIXL_WARN("metadata: format version %u, this build reads versions %u to %u", version,
                  NIXL_MD_VERSION_MIN, NIXL_MD_VERSION);
        return NIXL_ERR_MD_VERSION;
    }
    scan->version = version;
    if (len < MD_HEADER_LEN)
        MD_REJECT("%zu bytes, too short for a header", len);
    header_len = nixl_get_u16(b + 6);
    if (header_len != MD_HEADER_LEN)
        MD_REJECT("header length %u (expected %u)", header_len, MD_HEADER_LEN);
    total = nixl_get_u32(b + 8);
    if (total != len)
        MD_REJECT("header says %" PRIu32 " bytes but the blob has %zu", total, len);
    size_t end = len;
    if (version >= MD_CRC_SINCE) {
        /* Checked before anything else is read: a blob damaged on its way
         * is refused as that, not as whatever its damage looks like. */
        if (len < MD_HEADER_LEN + MD_CRC_LEN)
            MD_REJECT("%zu bytes, too short for a version-%u blob and its checksum", len, version);
        end = len - MD_CRC_LEN;
        uint32_t want = nixl_get_u32(b + end), got = nixl_crc32c(b, end);
        if (got != want)
            MD_REJECT("checksum 0x%08" PRIx32 " does not match the blob's 0x%08" PRIx32
                      " (damaged in transit or storage)",
                      got, want);
    }
    scan->num_sections = nixl_get_u32(b + 12);
    scan->sections.p = b + MD_HEADER_LEN;
    scan->sections.left = end - MD_HEADER_LEN;
    return NIXL_OK;
}

/* Pass 1: framing, section order, and the counts that size the allocation. */
static nixl_status_t scan_blob(const uint8_t *b, size_t len, md_scan_t *scan)
{
    md_reader_t r;
    md_section_t sec;
    md_backend_head_t head;
    nixl_status_t st;

    st = scan_header(b, len, scan);
    if (st != NIXL_OK)
        return st;
    scan->num_backends = 0;
    scan->num_regions = 0;
    r = scan->sections;
    if (scan->num_sections == 0)
        MD_REJECT("no sections (an agent section is required)");
    for (uint32_t i = 0; i < scan->num_sections; i++) {
        st = next_section(&r, i, &sec);
        if (st != NIXL_OK)
            return st;
        if (i == 0 && sec.type != MD_SECTION_AGENT)
            MD_REJECT("section 0 has type %u, the agent section must come first", sec.type);
        switch (sec.type) {
        case MD_SECTION_AGENT:
            if (i != 0)
                MD_REJECT("section %" PRIu32 ": a second agent section", i);
            break;
        case MD_SECTION_PARTIAL:
            /* Only section 1 may be it, so there is at most one, and it is
             * known before any backend section is parsed. */
            if (i != 1)
                MD_REJECT("section %" PRIu32 ": the partial section must come right after the agent section", i);
            if (sec.payload.left != MD_PARTIAL_LEN)
                MD_REJECT("partial section: payload of %zu bytes (expected %u)", sec.payload.left, MD_PARTIAL_LEN);
            if (nixl_get_u32(sec.payload.p) & ~(uint32_t)MD_PARTIAL_CONN_INFO)
                MD_REJECT("partial section: reserved flag bits 0x%" PRIx32 " set",
                          nixl_get_u32(sec.payload.p) & ~(uint32_t)MD_PARTIAL_CONN_INFO);
            break;
        case MD_SECTION_BACKEND:
            if (scan->num_backends == NIXL_MD_MAX_BACKENDS)
                MD_REJECT("more than %u backend sections", NIXL_MD_MAX_BACKENDS);
            st = parse_backend_head(&sec.payload, scan->num_backends, &head);
            if (st != NIXL_OK)
                return st;
            scan->num_backends++;
            scan->num_regions += head.num_regions;
            break;
        default:
            if (!(sec.flags & MD_FLAG_MAY_SKIP))
                MD_REJECT("section %" PRIu32 ": unknown type %u not marked skippable", i,
                          sec.type);
            break;
        }
    }
    if (r.left != 0)
        MD_REJECT("%zu bytes after the last of %" PRIu32 " sections", r.left, scan->num_sections);
    return NIXL_OK;
}

static nixl_status_t parse_agent(md_reader_t *r, uint16_t version, nixl_md_t *md)
{
    const uint8_t *p, *name, *host;
    const char *why;
    uint8_t name_len, host_len;

    if (!(p = rd_take(r, 1)))
        MD_REJECT("agent section: truncated before the name");
    name_len = p[0];
    if (!(name = rd_take(r, name_len)))
        MD_REJECT("agent section: name length %u exceeds the %zu bytes left", name_len, r->left);
    if ((why = name_problem(name, name_len, NIXL_NAME_MAX)))
        MD_REJECT("agent section: %s", why);
    if (!(p = rd_take(r, 1)))
        MD_REJECT("agent %.*s: truncated before the hostname", name_len, (const char *)name);
    host_len = p[0];
    if (!(host = rd_take(r, host_len)))
        MD_REJECT("agent %.*s: hostname length %u exceeds the %zu bytes left", name_len,
                  (const char *)name, host_len, r->left);
    if ((why = hostname_problem(host, host_len)))
        MD_REJECT("agent %.*s: %s", name_len, (const char *)name, why);
    size_t tail = version >= 2 ? MD_AGENT_V2_TAIL : MD_AGENT_V1_TAIL;
    if (!(p = rd_take(r, tail)))
        MD_REJECT("agent %.*s: truncated in its identity (boot id, pid, instance id%s)", name_len,
                  (const char *)name, version >= 2 ? ", uid, start time, namespaces" : "");
    if (r->left != 0)
        MD_REJECT("agent %.*s: %zu unexpected bytes at the end of the section", name_len,
                  (const char *)name, r->left);

    memcpy(md->name, name, name_len);
    md->name[name_len] = '\0';
    memcpy(md->host.hostname, host, host_len);
    md->host.hostname[host_len] = '\0';
    memcpy(md->host.boot_id, p, MD_BOOT_ID_LEN);
    md->pid = nixl_get_u32(p + MD_BOOT_ID_LEN);
    md->instance_id = nixl_get_u64(p + MD_BOOT_ID_LEN + 4);
    md->version = version;
    md->uid = md->start_time = md->pidns = md->netns = 0;
    if (version >= 2) {
        p += MD_AGENT_V1_TAIL;
        md->uid = nixl_get_u32(p);
        md->start_time = nixl_get_u64(p + 4);
        md->pidns = nixl_get_u64(p + 12);
        md->netns = nixl_get_u64(p + 20);
    }
    return NIXL_OK;
}

/* Pass 2 for one backend section.  `regions` has room for the count the
 * scan read from this same section. */
static nixl_status_t parse_backend(md_reader_t *r, uint32_t index, nixl_md_backend_t *be,
                                   nixl_md_region_t *regions)
{
    md_backend_head_t head;
    nixl_status_t st;
    uint32_t i;

    st = parse_backend_head(r, index, &head);
    if (st != NIXL_OK)
        return st;
    memcpy(be->name, head.name, head.name_len);
    be->name[head.name_len] = '\0';
    be->conn = head.conn_len ? head.conn : NULL;
    be->conn_len = head.conn_len;
    be->num_regions = head.num_regions;
    be->regions = head.num_regions ? regions : NULL;

    for (i = 0; i < head.num_regions; i++) {
        nixl_md_region_t *rg = &regions[i];
        const uint8_t *p = rd_take(r, MD_REGION_FIXED_LEN);
        const char *why;

        if (!p)
            MD_REJECT("region %" PRIu32 " of backend %s: truncated (%zu bytes left)", i, be->name,
                      r->left);
        if (p[1] != 0 || nixl_get_u16(p + 2) != 0)
            MD_REJECT("region %" PRIu32 " of backend %s: reserved bytes not zero", i, be->name);
        rg->mem_type = (nixl_mem_t)p[0];
        rg->dev_id = nixl_get_u32(p + 4);
        rg->addr = nixl_get_u64(p + 8);
        rg->len = nixl_get_u64(p + 16);
        rg->rkey_len = nixl_get_u32(p + 24);
        if (!(rg->rkey = rd_take(r, rg->rkey_len)))
            MD_REJECT("region %" PRIu32 " of backend %s: key length %" PRIu32
                      " exceeds the %zu bytes left",
                      i, be->name, rg->rkey_len, r->left);
        if (rg->rkey_len == 0)
            rg->rkey = NULL;
        if ((why = region_problem(rg)))
            MD_REJECT("region %" PRIu32 " of backend %s (type %u, addr 0x%" PRIx64 ", len %" PRIu64
                      "): %s",
                      i, be->name, (unsigned)p[0], rg->addr, rg->len, why);
    }
    if (r->left != 0)
        MD_REJECT("backend %s: %zu unexpected bytes after its %" PRIu32 " regions", be->name,
                  r->left, head.num_regions);

    if (!regions_sorted(regions, head.num_regions))
        qsort(regions, head.num_regions, sizeof(*regions), region_cmp);
    i = regions_first_overlap(regions, head.num_regions);
    if (i)
        MD_REJECT("backend %s: regions [0x%" PRIx64 ", +%" PRIu64 ") and [0x%" PRIx64 ", +%" PRIu64
                  ") of memory type %u overlap",
                  be->name, regions[i - 1].addr, regions[i - 1].len, regions[i].addr,
                  regions[i].len, (unsigned)regions[i].mem_type);
    return NIXL_OK;
}

static size_t align_up(size_t n)
{
    const size_t a = _Alignof(max_align_t);
    return (n + a - 1) / a * a;
}

/* Pass 2: everything, into the block sized by the scan; md->backends and
 * next_regions point into it. */
static nixl_status_t parse_blob(const md_scan_t *scan, nixl_md_t *md,
                                nixl_md_region_t *next_regions)
{
    md_reader_t r = scan->sections;
    md_section_t sec;
    nixl_status_t st = NIXL_OK;

    for (uint32_t i = 0; i < scan->num_sections; i++) {
        st = next_section(&r, i, &sec);
        if (st != NIXL_OK)
            return st;
        if (sec.type == MD_SECTION_AGENT) {
            st = parse_agent(&sec.payload, scan->version, md);
        } else if (sec.type == MD_SECTION_PARTIAL) {
            /* The scan checked its place, length and flags. */
            md->partial = 1;
            md->conn_omitted = !(nixl_get_u32(sec.payload.p) & MD_PARTIAL_CONN_INFO);
        } else if (sec.type == MD_SECTION_BACKEND) {
            nixl_md_backend_t *be = &md->backends[md->num_backends];

            st = parse_backend(&sec.payload, md->num_backends, be, next_regions);
            if (st != NIXL_OK)
                return st;
            for (uint32_t j = 0; j < md->num_backends; j++)
                if (strcmp(md->backends[j].name, be->name) == 0)
                    MD_REJECT("backend %s appears twice", be->name);
            if (md->conn_omitted && be->conn_len)
                MD_REJECT("backend %s: %" PRIu32 " bytes of connection info in a partial blob that says it "
                          "carries none",
                          be->name, be->conn_len);
            next_regions += be->num_regions;
            md->num_backends++;
        }
        if (st != NIXL_OK)
            return st;
    }
    return NIXL_OK;
}

nixl_status_t nixl_md_decode(const void *blob, size_t len, nixl_md_t **md_out)
{
    md_scan_t scan;
    nixl_md_t *md;
    size_t off_backends, off_regions, size;
    nixl_status_t st;

    if (!blob || !md_out)
        return NIXL_ERR_NULL;
    st = scan_blob(blob, len, &scan);
    if (st != NIXL_OK)
        return st;

    /* The scan bounded num_regions by len / MD_REGION_FIXED_LEN, so this
     * block is at most a small multiple of the blob. */
    off_backends = align_up(sizeof(nixl_md_t));
    off_regions = off_backends + align_up(scan.num_backends * sizeof(nixl_md_backend_t));
    if (scan.num_regions > (SIZE_MAX - off_regions) / sizeof(nixl_md_region_t)) {
        NIXL_ERROR("metadata: %zu regions do not fit in memory", scan.num_regions);
        return NIXL_ERR_NO_MEMORY;
    }
    size = off_regions + scan.num_regions * sizeof(nixl_md_region_t);
    md = calloc(1, size);
    if (!md) {
        NIXL_ERROR("metadata: cannot allocate %zu bytes for %zu regions", size, scan.num_regions);
        return NIXL_ERR_NO_MEMORY;
    }
    md->backends = (nixl_md_backend_t *)((uint8_t *)md + off_backends);

    st = parse_blob(&scan, md, (nixl_md_region_t *)((uint8_t *)md + off_regions));
    if (st != NIXL_OK)
        goto err_free;
    if (md->num_backends == 0)
        md->backends = NULL;
    *md_out = md;
    return NIXL_OK;

err_free:
    free(md);
    return st;
}

void nixl_md_free(nixl_md_t *md)
{
    /* One block holds the struct, its backends and their regions. */
    free(md);
}

/* ------------------------------------------------------------------------
 * Encoder
 * ------------------------------------------------------------------------ */

/* Validates what can be checked without sorting and returns the blob size
 * and the largest region count (to size the sort scratch). */
static nixl_status_t encode_check(const nixl_md_t *md, size_t *size_out, uint32_t *max_regions_out)
{
    const char *why;
    size_t name_len = strnlen(md->name, sizeof(md->name));
    size_t host_len = strnlen(md->host.hostname, sizeof(md->host.hostname));
    uint64_t total, payload;
    uint32_t max_regions = 0;

    if ((why = name_problem((const uint8_t *)md->name, name_len, NIXL_NAME_MAX)))
        MD_INVALID("agent: %s", why);
    if ((why = hostname_problem((const uint8_t *)md->host.hostname, host_len)))
        MD_INVALID("agent %s: %s", md->name, why);
    if (md->num_backends > NIXL_MD_MAX_BACKENDS)
        MD_INVALID("%" PRIu32 " backends, more than the limit %u", md->num_backends,
                   NIXL_MD_MAX_BACKENDS);
    if (md->num_backends && !md->backends)
        MD_INVALID("%" PRIu32 " backends but no backend array", md->num_backends);
    if (md->conn_omitted && !md->partial)
        MD_INVALID("agent %s: connection info can be left out of a partial blob only", md->name);

    total = MD_HEADER_LEN + MD_SECTION_HEADER_LEN + 1 + name_len + 1 + host_len + MD_AGENT_V2_TAIL + MD_CRC_LEN;
    if (md->partial)
        total += MD_SECTION_HEADER_LEN + MD_PARTIAL_LEN;
    for (uint32_t b = 0; b < md->num_backends; b++) {
        const nixl_md_backend_t *be = &md->backends[b];
        size_t be_len = strnlen(be->name, sizeof(be->name));

        if ((why = name_problem((const uint8_t *)be->name, be_len, NIXL_MD_BACKEND_NAME_MAX)))
            MD_INVALID("backend %" PRIu32 ": %s", b, why);
        for (uint32_t j = 0; j < b; j++)
            if (strcmp(md->backends[j].name, be->name) == 0)
                MD_INVALID("backend %s appears twice", be->name);
        if (be->conn_len && !be->conn)
            MD_INVALID("backend %s: connection info length %" PRIu32 " but no bytes", be->name,
                       be->conn_len);
        if (be->conn_len && md->conn_omitted)
            MD_INVALID("backend %s: connection info in a partial blob that leaves it out", be->name);
        if (be->num_regions > NIXL_MD_MAX_REGIONS)
            MD_INVALID("backend %s: %" PRIu32 " regions, more than the limit %u", be->name,
                       be->num_regions, NIXL_MD_MAX_REGIONS);
        if (be->num_regions && !be->regions)
            MD_INVALID("backend %s: %" PRIu32 " regions but no region array", be->name,
                       be->num_regions);
        payload = 1 + be_len + 4 + (uint64_t)be->conn_len + 4 +
                  (uint64_t)be->num_regions * MD_REGION_FIXED_LEN;
        for (uint32_t i = 0; i < be->num_regions; i++) {
            const nixl_md_region_t *rg = &be->regions[i];

            if ((why = region_problem(rg)))
                MD_INVALID("region %" PRIu32 " of backend %s (type %u, addr 0x%" PRIx64
                           ", len %" PRIu64 "): %s",
                           i, be->name, (unsigned)rg->mem_type, rg->addr, rg->len, why);
            if (rg->rkey_len && !rg->rkey)
                MD_INVALID("region %" PRIu32 " of backend %s: key length %" PRIu32 " but no bytes",
                           i, be->name, rg->rkey_len);
            payload += rg->rkey_len;
        }
        /* Each term is below 2^32 and there are at most 2^22 + 4 of them,
         * so the sums cannot wrap a uint64_t. */
        if (payload > UINT32_MAX)
            MD_INVALID("backend %s: section of %" PRIu64 " bytes exceeds the 4 GiB limit",
                       be->name, payload);
        total += MD_SECTION_HEADER_LEN + payload;
        if (be->num_regions > max_regions)
            max_regions = be->num_regions;
    }
    if (total > UINT32_MAX)
        MD_INVALID("blob of %" PRIu64 " bytes exceeds the 4 GiB limit", total);
    *size_out = (size_t)total;
    *max_regions_out = max_regions;
    return NIXL_OK;
}

static uint8_t *encode_agent(uint8_t *p, const nixl_md_t *md)
{
    size_t name_len = strlen(md->name);
    size_t host_len = strlen(md->host.hostname);
    uint32_t payload = (uint32_t)(1 + name_len + 1 + host_len + MD_AGENT_V2_TAIL);

    p = st_u16(p, MD_SECTION_AGENT);
    p = st_u16(p, 0);
    p = st_u32(p, payload);
    p = st_u8(p, (uint8_t)name_len);
    p = st_bytes(p, md->name, name_len);
    p = st_u8(p, (uint8_t)host_len);
    p = st_bytes(p, md->host.hostname, host_len);
    p = st_bytes(p, md->host.boot_id, MD_BOOT_ID_LEN);
    p = st_u32(p, md->pid);
    p = st_u64(p, md->instance_id);
    p = st_u32(p, md->uid);
    p = st_u64(p, md->start_time);
    p = st_u64(p, md->pidns);
    return st_u64(p, md->netns);
}

static uint8_t *encode_partial(uint8_t *p, const nixl_md_t *md)
{
    p = st_u16(p, MD_SECTION_PARTIAL);
    p = st_u16(p, 0);
    p = st_u32(p, MD_PARTIAL_LEN);
    return st_u32(p, md->conn_omitted ? 0 : MD_PARTIAL_CONN_INFO);
}

/* `regions` is the backend's regions, sorted. */
static uint8_t *encode_backend(uint8_t *p, const nixl_md_backend_t *be,
                               const nixl_md_region_t *regions)
{
    size_t name_len = strlen(be->name);
    uint8_t *len_at;

    p = st_u16(p, MD_SECTION_BACKEND);
    p = st_u16(p, 0);
    len_at = p;
    p += 4;
    p = st_u8(p, (uint8_t)name_len);
    p = st_bytes(p, be->name, name_len);
    p = st_u32(p, be->conn_len);
    p = st_bytes(p, be->conn, be->conn_len);
    p = st_u32(p, be->num_regions);
    for (uint32_t i = 0; i < be->num_regions; i++) {
        const nixl_md_region_t *rg = &regions[i];

        p = st_u8(p, (uint8_t)rg->mem_type);
        p = st_u8(p, 0);
        p = st_u16(p, 0);
        p = st_u32(p, rg->dev_id);
        p = st_u64(p, rg->addr);
        p = st_u64(p, rg->len);
        p = st_u32(p, rg->rkey_len);
        p = st_bytes(p, rg->rkey, rg->rkey_len);
    }
    st_u32(len_at, (uint32_t)(p - (len_at + 4)));
    return p;
}

nixl_status_t nixl_md_encode(const nixl_md_t *md, void **blob_out, size_t *len_out)
{
    nixl_md_region_t *scratch = NULL;
    uint32_t max_regions, overlap;
    uint8_t *blob, *p;
    size_t size;
    nixl_status_t st;

    if (!md || !blob_out || !len_out)
        return NIXL_ERR_NULL;
    st = encode_check(md, &size, &max_regions);
    if (st != NIXL_OK)
        return st;
    blob = malloc(size);
    if (!blob) {
        NIXL_ERROR("metadata encode: cannot allocate %zu bytes", size);
        return NIXL_ERR_NO_MEMORY;
    }

    p = st_u32(blob, NIXL_MD_MAGIC);
    p = st_u16(p, NIXL_MD_VERSION);
    p = st_u16(p, MD_HEADER_LEN);
    p = st_u32(p, (uint32_t)size);
    p = st_u32(p, 1 + (md->partial ? 1 : 0) + md->num_backends);
    p = encode_agent(p, md);
    if (md->partial)
        p = encode_partial(p, md);
    for (uint32_t b = 0; b < md->num_backends; b++) {
        const nixl_md_backend_t *be = &md->backends[b];
        const nixl_md_region_t *sorted = be->regions;

        /* The caller's array is const: sort a copy, only when needed. */
        if (!regions_sorted(be->regions, be->num_regions)) {
            if (!scratch && !(scratch = malloc((size_t)max_regions * sizeof(*scratch)))) {
                NIXL_ERROR("metadata encode: cannot allocate sort space for %" PRIu32 " regions",
                           max_regions);
                st = NIXL_ERR_NO_MEMORY;
                goto err_free_blob;
            }
            memcpy(scratch, be->regions, (size_t)be->num_regions * sizeof(*scratch));
            qsort(scratch, be->num_regions, sizeof(*scratch), region_cmp);
            sorted = scratch;
        }
        overlap = regions_first_overlap(sorted, be->num_regions);
        if (overlap) {
            NIXL_ERROR("metadata encode: backend %s: regions [0x%" PRIx64 ", +%" PRIu64
                       ") and [0x%" PRIx64 ", +%" PRIu64 ") of memory type %u overlap",
                       be->name, sorted[overlap - 1].addr, sorted[overlap - 1].len,
                       sorted[overlap].addr, sorted[overlap].len,
                       (unsigned)sorted[overlap].mem_type);
            st = NIXL_ERR_INVALID_PARAM;
            goto err_free_scratch;
        }
        p = encode_backend(p, be, sorted);
    }
    p = st_u32(p, nixl_crc32c(blob, (size_t)(p - blob)));
    assert((size_t)(p - blob) == size);
    free(scratch);
    *blob_out = blob;
    *len_out = size;
    return NIXL_OK;

err_free_scratch:
    free(scratch);
err_free_blob:
    free(blob);
    return st;
}
