/* str.h - small string helpers: bounded copy, edit distance, strict number parsing. */
#ifndef NIXL_UTIL_STR_H
#define NIXL_UTIL_STR_H

#include <stddef.h>
#include <stdint.h>

/* Copy at most cap-1 bytes and NUL-terminate; returns strlen(src). */
size_t nixl_strlcpy(char *dst, const char *src, size_t cap);
/* Levenshtein distance (case-sensitive). */
size_t nixl_edit_distance(const char *a, const char *b);
/* Parse an unsigned integer with optional suffix K/M/G (powers of 1024).
 * The whole string must be consumed.  Returns 0 on success, -1 otherwise. */
int nixl_parse_size(const char *s, uint64_t *out);
/* Parse 0/1/yes/no/true/false/on/off (case-insensitive).  0 or -1. */
int nixl_parse_bool(const char *s, int *out);

#endif
