/*
 * fuzz_ucx.c - libFuzzer harness for the ucx backend's two wire formats,
 * the conn info and the key blob (src/backends/ucx/ucx_int.h): the bytes a
 * peer's metadata carries before UCX sees any of them.
 *
 * The first input byte picks the entry point, modulo 3: 0 ucx_conn_parse; 1
 * and 2 ucx_rkey_parse for a DRAM and a VRAM region.  The region a key is
 * judged against is the one the blob itself names (its address and length
 * fields, when present), so that inputs reach the checks past the region's;
 * with the byte's next bit (3..5) it is shifted by one byte, which must be
 * refused.  Beyond "does not crash", an accepted blob must mean what the
 * format says:
 *   - conn info: the address lies inside the blob and is all of the rest
 *     after the 12-byte header, 1..64 KiB of it;
 *   - key blob: the VRAM flag set exactly for a VRAM region; the no-key flag
 *     only with it and with no bytes; otherwise 1..64 KiB of key bytes,
 *     exactly the rest after the 28-byte header, inside the blob.
 * replay.c runs the same function over tests/fuzz/ucx_corpus in every build
 * with UCX's headers (test fuzz-ucx-corpus), and then fuzz_replay_done
 * checks that the corpus had an accepted blob of every kind (conn info, DRAM
 * key, VRAM key, VRAM without a key) and refused ones of each parser: a
 * corpus that reaches no accept checks nothing.  The corpus files are one
 * selector byte then a blob: good ones of each kind and damaged ones
 * (magic, version, flags, lengths, region fields, truncations).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ucx/ucx_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_ucx: %s\n", what);
    abort();
}

/* accepted: conn, DRAM key, VRAM key, VRAM no-key; refused: conn, key */
static unsigned ok_conn, ok_dram, ok_vram, ok_nokey, bad_conn, bad_key;

void fuzz_replay_done(void);
void fuzz_replay_done(void)
{
    printf("fuzz_ucx: accepted conn %u, DRAM key %u, VRAM key %u, VRAM no-key %u; refused conn %u, key %u\n",
           ok_conn, ok_dram, ok_vram, ok_nokey, bad_conn, bad_key);
    if (!ok_conn || !ok_dram || !ok_vram || !ok_nokey || !bad_conn || !bad_key)
        fail("the corpus lacks an accepted or a refused blob of some kind");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t sel = data[0] % 3;
    const int shifted = (data[0] / 3) % 2;
    const uint8_t *blob = data + 1;
    const size_t len = size - 1;
    const char *why = NULL;
    if (sel == 0) {
        const uint8_t *addr = NULL;
        size_t alen = 0;
        if (ucx_conn_parse(blob, len, &addr, &alen, &why) != NIXL_OK) {
            if (!why)
                fail("conn info refused without a reason");
            bad_conn++;
            return 0;
        }
        if (len < UCX_CONN_HDR || addr != blob + UCX_CONN_HDR || alen != len - UCX_CONN_HDR || alen == 0 ||
            alen > UCX_CONN_ADDR_MAX)
            fail("conn info accepted with an address outside its bytes");
        ok_conn++;
        return 0;
    }
    nixl_be_region_t region = {.mem_type = sel == 2 ? NIXL_MEM_VRAM : NIXL_MEM_DRAM};
    if (len >= 24) {
        region.addr = nixl_get_u64(blob + 8);
        region.len = nixl_get_u64(blob + 16);
    }
    if (shifted)
        region.addr++;
    uint32_t flags = 0;
    const uint8_t *packed = NULL;
    size_t plen = 0;
    if (ucx_rkey_parse(&region, blob, len, &flags, &packed, &plen, &why) != NIXL_OK) {
        if (!why)
            fail("key blob refused without a reason");
        bad_key++;
        return 0;
    }
    if (shifted)
        fail("key blob accepted for a region it does not name");
    if (len < UCX_RKEY_HDR || nixl_get_u64(blob + 8) != region.addr || nixl_get_u64(blob + 16) != region.len)
        fail("key blob accepted for another region");
    if (((flags & UCX_RKEY_F_VRAM) != 0) != (region.mem_type == NIXL_MEM_VRAM))
        fail("key blob accepted with a VRAM flag that does not match the region");
    if (flags & ~(UCX_RKEY_F_VRAM | UCX_RKEY_F_NOCUDA))
        fail("key blob accepted with unknown flags");
    if (flags & UCX_RKEY_F_NOCUDA) {
        if (!(flags & UCX_RKEY_F_VRAM) || packed || plen || len != UCX_RKEY_HDR)
            fail("no-key blob accepted with key bytes, or for host memory");
    } else if (!packed || packed != blob + UCX_RKEY_HDR || plen != len - UCX_RKEY_HDR || plen == 0 ||
               plen > UCX_RKEY_PACKED_MAX) {
        fail("key blob accepted with key bytes outside it");
    }
    if (flags & UCX_RKEY_F_NOCUDA)
        ok_nokey++;
    else if (flags & UCX_RKEY_F_VRAM)
        ok_vram++;
    else
        ok_dram++;
    return 0;
}
