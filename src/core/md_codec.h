/*
 * md_codec.h - the metadata blob: encode and decode.
 *
 * The blob is untrusted input.  nixl_md_decode validates it completely (see
 * docs/metadata-format.md) before anything reads it, and returns a struct
 * whose byte fields point into the blob (the blob must outlive it).
 * Guarantees after a successful decode:
 *  - names are 1..NIXL_NAME_MAX (agent) / 1..31 (backend) bytes of
 *    [A-Za-z0-9_.:@/+-], NUL-terminated in the struct;
 *  - backend names are unique;
 *  - every region has len > 0, addr + len does not overflow, mem_type <
 *    NIXL_MEM_TYPE_COUNT, and within one backend the regions are sorted by
 *    (mem_type, addr) and do not overlap;
 *  - conn_omitted is set only on a partial blob, and then every backend's
 *    conn_len is 0.
 */
#ifndef NIXL_CORE_MD_CODEC_H
#define NIXL_CORE_MD_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "nixl.h"
#include "util/host.h"

#define NIXL_MD_MAGIC 0x444d584eu /* "NXMD" little-endian */
#define NIXL_MD_VERSION 3     /* written: version 2's layout and a CRC-32C of the blob at its end */
#define NIXL_MD_VERSION_MIN 1 /* oldest read: version 1 lacks uid, start time, namespaces (read as 0);
                                 versions 1 and 2 carry no checksum */
#define NIXL_MD_MAX_BACKENDS 64
#define NIXL_MD_MAX_REGIONS (1u << 22)
#define NIXL_MD_BACKEND_NAME_MAX 31

typedef struct nixl_md_region {
    nixl_mem_t mem_type;
    uint32_t dev_id;
    uint64_t addr;
    uint64_t len;
    const uint8_t *rkey;
    uint32_t rkey_len;
} nixl_md_region_t;

typedef struct nixl_md_backend {
    char name[NIXL_MD_BACKEND_NAME_MAX + 1];
    const uint8_t *conn;
    uint32_t conn_len;
    uint32_t num_regions;
    nixl_md_region_t *regions;
} nixl_md_backend_t;

typedef struct nixl_md {
    char name[NIXL_NAME_MAX + 1];
    nixl_host_id_t host;
    uint32_t pid;
    uint64_t instance_id; /* random per agent instance */
    /* Version 2 (0 when decoded from version 1, or unknown to the sender). */
    uint32_t uid;
    uint64_t start_time; /* field 22 of /proc/<pid>/stat */
    uint64_t pidns;      /* pid namespace inode */
    uint64_t netns;      /* network namespace inode */
    uint16_t version;    /* decoded: the blob's format version; ignored by the encoder */
    uint32_t num_backends;
    nixl_md_backend_t *backends;
    /* A partial blob (PARTIAL section): only some of the agent's regions,
     * which a peer adds to what it holds instead of replacing it. */
    int partial;
    /* Partial without connection info: the conn fields are empty and mean
     * "as already loaded", not "none". */
    int conn_omitted;
} nixl_md_t;

/* Decode and validate.  *md_out is freed with nixl_md_free. */
nixl_status_t nixl_md_decode(const void *blob, size_t len, nixl_md_t **md_out);
void nixl_md_free(nixl_md_t *md);
/* Encode; regions of each backend may come in any order (the encoder
 * sorts a copy).  *blob_out is malloc'd. */
nixl_status_t nixl_md_encode(const nixl_md_t *md, void **blob_out, size_t *len_out);

#endif
