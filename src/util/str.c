/*
 * str.c - small string helpers used across the library: a bounded copy that
 * always terminates, the edit distance behind "did you mean" warnings, and
 * strict parsers for configuration values (a typo must be an error, never a
 * silently different number).
 */
#include "util/str.h"

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
    uint64_t v = 0;
    const char *p = s;

    if (s == NULL || *s < '0' || *s > '9')
        return -1; /* no sign, no blank, no empty string */
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }

    unsigned shift = 0;
    switch (*p) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        p++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        p++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        p++;
        break;
    default:
        return -1;
    }
    if (*p != '\0')
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;

    *out = v << shift;
    return 0;
}

int nixl_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};

    if (s == NULL)
        return -1;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}
