/* host.h - who and where this process is: host identity for locality decisions. */
#ifndef NIXL_UTIL_HOST_H
#define NIXL_UTIL_HOST_H

#include <stddef.h>
#include <stdint.h>

typedef struct nixl_host_id {
    char hostname[64];
    uint8_t boot_id[16]; /* /proc/sys/kernel/random/boot_id; zero if unreadable */
} nixl_host_id_t;

/* Fills *out (cached after the first call).  Always succeeds. */
void nixl_host_id_get(nixl_host_id_t *out);
/* 1 when both describe the same running kernel (same boot id, or same
 * hostname when boot ids are unknown). */
int nixl_host_id_same(const nixl_host_id_t *a, const nixl_host_id_t *b);
/* Strict parse of boot_id text (36-char UUID, optionally one trailing
 * newline) into 16 bytes.  0 on success, -1 otherwise. */
int nixl_boot_id_parse(const char *text, size_t len, uint8_t out[16]);

#endif
