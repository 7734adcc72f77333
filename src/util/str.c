/*
 * str.c - small string helpers used across the library: a bounded copy that
 * always terminates, the edit distance behind "did you mean" warnings, and
 * strict parsers for configuration values (a typo must be an error, never a
 * silently different number).
 */
#include "util/str.h"

#include "nixl/backend.h" /* nixl_param_parse_size/bool: one parser for core and backends */

#include <stdlib.h>
#include <string.h>
#include <strings.h>

size_t nixl_strlcpy(char *dst, const char *src, size_t cap)
{
    size_t len = strlen(src);

    if (cap > 0) {
        size_t n = len < cap - 1 ? len : cap - 1;
        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return len;
}

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

size_t nixl_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t small[128];
    size_t *row = small;

    /* Variable names are short; only absurd inputs need the heap. */
    if (lb + 1 > sizeof(small) / sizeof(small[0])) {
        row = malloc((lb + 1) * sizeof(*row));
        if (row == NULL)
            return la > lb ? la : lb; /* an upper bound is still a safe answer */
    }

    /* One row of the dynamic-programming table; 'diag' holds the cell that
     * the in-place update overwrote. */
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t subst = diag + (a[i - 1] != b[j - 1]);
            row[j] = min3(up + 1, row[j - 1] + 1, subst);
            diag = up;
        }
    }

    size_t d = row[lb];
    if (row != small)
        free(row);
    return d;
}

int nixl_parse_size(const char *s, uint64_t *out)
{
    return nixl_param_parse_size(s, out);
}

int nixl_parse_bool(const char *s, int *out)
{
    return nixl_param_parse_bool(s, out);
}
