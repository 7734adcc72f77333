/*
 * md_cases.h - test support for the metadata codec, shared by the unit test,
 * the fuzz harness and the corpus generator: a byte-level blob builder (to
 * write blobs the encoder would refuse to produce), a fixture generator, a
 * structural comparison, and the catalog of hand-made blobs with the status
 * each must decode to.  One catalog, so the corpus and the unit test agree.
 */
#ifndef NIXL_TESTS_MD_CASES_H
#define NIXL_TESTS_MD_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "core/md_codec.h"

/* Growable byte buffer; every writer aborts on allocation failure. */
typedef struct mb {
    uint8_t *p;
    size_t len;
    size_t cap;
} mb_t;

void mb_free(mb_t *b);
void mb_u8(mb_t *b, uint8_t v);
void mb_u16(mb_t *b, uint16_t v);
void mb_u32(mb_t *b, uint32_t v);
void mb_u64(mb_t *b, uint64_t v);
void mb_bytes(mb_t *b, const void *src, size_t n);
void mb_set_u8(mb_t *b, size_t off, uint8_t v);
void mb_set_u16(mb_t *b, size_t off, uint16_t v);
void mb_set_u32(mb_t *b, size_t off, uint32_t v);
void mb_set_u64(mb_t *b, size_t off, uint64_t v);
/* The format version of the catalog's blobs (md_cases.c says why). */
#define MB_CATALOG_VERSION 2
/* CRC-32C, and a finished version-2 blob made version 3: version field,
 * total length and the checksum appended. */
uint32_t mb_crc32c(const uint8_t *p, size_t n);
void mb_seal_v3(mb_t *b);
/* Header with a placeholder total length; mb_done writes the real one. */
void mb_header(mb_t *b, uint32_t num_sections);
/* A header of the given format version (mb_header: the current one). */
void mb_header_v(mb_t *b, uint32_t num_sections, uint16_t version);
void mb_done(mb_t *b);
/* Returns the offset of the section's length field, for mb_sec_end. */
size_t mb_sec_begin(mb_t *b, uint16_t type, uint16_t flags);
void mb_sec_end(mb_t *b, size_t len_at);
/* A whole agent section (boot id 0..15, pid 4242, instance 0x1122334455667788). */
void mb_agent(mb_t *b, const char *name, const char *hostname);
/* The agent section of a format version (1: without uid, start time and
 * namespaces). */
void mb_agent_v(mb_t *b, const char *name, const char *hostname, uint16_t version);
/* Opens a backend section up to its region count; close with mb_sec_end. */
size_t mb_backend_begin(mb_t *b, const char *name, const void *conn, uint32_t conn_len,
                        uint32_t num_regions);
/* A whole PARTIAL section: flags bit 0 = connection info included. */
void mb_partial(mb_t *b, uint16_t section_flags, uint32_t flags);
/* A region whose key is rkey_len bytes of a fixed pattern. */
void mb_region(mb_t *b, uint8_t mem_type, uint32_t dev_id, uint64_t addr, uint64_t len,
               uint32_t rkey_len);

/* A metadata struct with num_backends backends of num_regions regions each
 * (varied types, lengths and keys); shuffled when `shuffle`.  One block:
 * free() it. */
nixl_md_t *md_fixture_new(uint32_t num_backends, uint32_t num_regions, int shuffle);

/* NULL when a and b describe the same metadata (bytes compared, not
 * pointers; regions compared in order), else what differs. */
const char *md_diff(const nixl_md_t *a, const nixl_md_t *b);
/* NULL when md holds every guarantee md_codec.h promises after decode. */
const char *md_check_guarantees(const nixl_md_t *md);

typedef struct md_case {
    char name[48];
    nixl_status_t expect;
    int in_corpus; /* some families (every truncation) are sampled for the corpus */
    uint8_t *blob;
    size_t len;
} md_case_t;

/* Builds the catalog; free with md_cases_free. */
size_t md_cases_build(md_case_t **cases_out);
void md_cases_free(md_case_t *cases, size_t n);

#endif
