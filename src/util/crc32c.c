/*
 * crc32c.c - CRC-32C: the SSE4.2 crc32 instruction where the CPU has it
 * (chosen once, at run time: Debian builds for baseline x86-64), else a
 * table of 8 x 256 entries consumed 8 bytes at a time.
 */
#include "util/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u /* 0x1EDC6F41 reflected */

static uint32_t tab[8][256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            tab[t][i] = (tab[t - 1][i] >> 8) ^ tab[0][tab[t - 1][i] & 0xff];
}

static uint32_t crc_table(uint32_t c, const uint8_t *p, size_t n)
{
    pthread_once(&tab_once, tab_init);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian: the low bytes first */
        c = tab[7][w & 0xff] ^ tab[6][(w >> 8) & 0xff] ^ tab[5][(w >> 16) & 0xff] ^ tab[4][(w >> 24) & 0xff] ^
            tab[3][(w >> 32) & 0xff] ^ tab[2][(w >> 40) & 0xff] ^ tab[1][(w >> 48) & 0xff] ^ tab[0][w >> 56];
    }
    while (n--)
        c = (c >> 8) ^ tab[0][(c ^ *p++) & 0xff];
    return c;
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define CRC32C_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
#if defined(__x86_64__)
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
    }
    c = (uint32_t)c64;
#endif
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

#ifdef CRC32C_HW
static int have_hw;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_init(void)
{
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
}
#endif

uint32_t nixl_crc32c(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint32_t c = 0xffffffffu;
#ifdef CRC32C_HW
    pthread_once(&hw_once, hw_init);
    if (have_hw)
        return ~crc_hw(c, p, len);
#endif
    return ~crc_table(c, p, len);
}
