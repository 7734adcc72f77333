/*
 * crc32c.h - CRC-32C (Castagnoli, the iSCSI / ext4 polynomial 0x1EDC6F41,
 * reflected), the metadata blob's checksum.  nixl_crc32c("123456789", 9)
 * is 0xE3069283.
 */
#ifndef NIXL_UTIL_CRC32C_H
#define NIXL_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t nixl_crc32c(const void *data, size_t len);

#endif
