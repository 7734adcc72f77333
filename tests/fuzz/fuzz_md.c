/*
 * fuzz_md.c - libFuzzer harness for the metadata decoder, the one parser of
 * untrusted bytes in nixl.  Beyond "does not crash", it checks what a
 * successful decode promises: the result holds md_codec.h's guarantees, the
 * encoder accepts it, the re-encoded blob decodes to the same metadata and
 * re-encodes to the same bytes, and the canonical blob is never longer than
 * the input (only skipped sections may be dropped), except that an older
 * input comes out in the current version: MD_V3_GROWTH bytes of checksum
 * longer, and from version 1 an agent section MD_V1_GROWTH bytes longer.  replay.c runs the same
 * function over the committed corpus in every build.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/md_codec.h"
#include "md_cases.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* uid u32, start time u64, two namespace inodes u64: what version 2 added;
 * the CRC-32C trailer: what version 3 added. */
#define MD_V1_GROWTH 28
#define MD_V3_GROWTH 4

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_md: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    nixl_md_t *first, *second;
    void *blob1, *blob2;
    size_t len1, len2;
    const char *why;
    nixl_status_t st;

    /* A warning per rejected input would dominate the run; NIXL_LOG_LEVEL
     * still wins when set. */
    if (!quiet) {
        if (!getenv("NIXL_LOG_LEVEL"))
            nixl_log_set_level(NIXL_LOG_ERROR);
        quiet = 1;
    }

    st = nixl_md_decode(data, size, &first);
    if (st != NIXL_OK) {
        if (st != NIXL_ERR_BAD_METADATA && st != NIXL_ERR_MD_VERSION)
            fail("decode returned an unexpected status", nixl_status_name(st));
        return 0;
    }
    if ((why = md_check_guarantees(first)))
        fail("decoded metadata breaks a guarantee", why);
    if (nixl_md_encode(first, &blob1, &len1) != NIXL_OK)
        fail("the encoder refused decoded metadata", NULL);
    if (len1 > size + (first->version == 1 ? MD_V1_GROWTH : 0) + (first->version < 3 ? MD_V3_GROWTH : 0))
        fail("the canonical encoding is longer than the input", NULL);
    if (nixl_md_decode(blob1, len1, &second) != NIXL_OK)
        fail("the decoder refused the encoder's output", NULL);
    if ((why = md_diff(first, second)))
        fail("decode(encode(decode(input))) differs from decode(input)", why);
    if (nixl_md_encode(second, &blob2, &len2) != NIXL_OK)
        fail("second encode failed", NULL);
    if (len1 != len2 || memcmp(blob1, blob2, len1) != 0)
        fail("the encoding is not stable", NULL);

    free(blob2);
    nixl_md_free(second);
    free(blob1);
    nixl_md_free(first);
    return 0;
}
