/*
 * rows.c - descriptors from the integer rows engines hold (issue 13, part 3).
 *
 * SGLang builds, per request, an N x 3 int64 array of (addr, len, dev)
 * rows: 221,184 of them for one KV request.  Turning it into nixl_desc_t
 * is one pass here, with the range checks folded in, so a list the Python
 * binding must convert costs about what reading the array once costs.  Its
 * transfer lists of such rows are not converted at all: initialize_xfer
 * hands them to nixl_xfer_create_rows (xfer.c), which reads them in place.
 */
#include "nixl.h"

NIXL_API nixl_status_t nixl_descs_from_rows(nixl_desc_t *descs, const uint64_t *rows, size_t n, size_t stride,
                                            int is_signed, size_t *bad_row)
{
    if (n && (!descs || !rows))
        return NIXL_ERR_NULL;
    if (stride < 3)
        return NIXL_ERR_INVALID_PARAM;
    /* Refused bits: the high half of the device id; with int64 words, the
     * sign of any field.  OR-ed over a block, tested once per block, so
     * the loop is loads and stores. */
    const uint64_t sign = is_signed ? 1ull << 63 : 0, devhi = 0xffffffff00000000ull;
    size_t i = 0;
    while (i < n) {
        size_t end = n - i > 256 ? i + 256 : n;
        uint64_t bad_s = 0, bad_d = 0;
        for (size_t k = i; k < end; k++) {
            const uint64_t *r = rows + k * stride;
            uint64_t a = r[0], l = r[1], d = r[2];
            bad_s |= a | l | d;
            bad_d |= d;
            descs[k].addr = a;
            descs[k].len = l;
            descs[k].dev_id = (uint32_t)d;
            descs[k].meta_len = 0;
            descs[k].meta = NULL;
        }
        if ((bad_s & sign) | (bad_d & devhi)) {
            for (size_t k = i; k < end; k++) {
                const uint64_t *r = rows + k * stride;
                if (((r[0] | r[1] | r[2]) & sign) || (r[2] & devhi)) {
                    if (bad_row)
                        *bad_row = k;
                    return NIXL_ERR_INVALID_PARAM;
                }
            }
        }
        i = end;
    }
    return NIXL_OK;
}
