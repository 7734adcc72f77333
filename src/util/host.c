/*
 * host.c - host and process identity for locality decisions (same host ->
 * intra-node backends).  The kernel's boot id is the primary key of a
 * host: it is shared by every container on one kernel and changes on
 * reboot, which the hostname does not guarantee.  The hostname is the
 * fallback when no boot id is readable.  A process is its pid, told apart
 * from a later process of the same pid by its start time, in a pid and a
 * network namespace (their inodes are unique on one kernel).
 */
#include "util/host.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nixl/backend_util.h"
#include "util/log.h"

#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
#define BOOT_ID_TEXT_LEN 36

static nixl_host_id_t host_id;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int nixl_boot_id_parse(const char *text, size_t len, uint8_t out[16])
{
    uint8_t id[16];
    size_t nbytes = 0;

    if (text == NULL)
        return -1;
    if (len == BOOT_ID_TEXT_LEN + 1 && text[BOOT_ID_TEXT_LEN] == '\n')
        len--;
    if (len != BOOT_ID_TEXT_LEN)
        return -1;

    /* 8-4-4-4-12 hex digits; dashes exactly at 8, 13, 18, 23. */
    for (size_t i = 0; i < BOOT_ID_TEXT_LEN;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i] != '-')
                return -1;
            i++;
            continue;
        }
        int hi = hex_value(text[i]), lo = hex_value(text[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        id[nbytes++] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }

    memcpy(out, id, sizeof(id));
    return 0;
}

static void boot_id_read(uint8_t out[16])
{
    char buf[64];
    ssize_t n;
    int fd = open(BOOT_ID_PATH, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        NIXL_DEBUG("cannot open %s: %s; host identity falls back to the hostname", BOOT_ID_PATH, strerror(errno));
        return;
    }
    do {
        n = read(fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    close(fd);

    if (n < 0)
        NIXL_DEBUG("cannot read %s: %s; host identity falls back to the hostname", BOOT_ID_PATH, strerror(errno));
    else if (nixl_boot_id_parse(buf, (size_t)n, out) != 0)
        NIXL_WARN("%s does not hold a UUID; host identity falls back to the hostname", BOOT_ID_PATH);
}

static void host_id_init(void)
{
    if (gethostname(host_id.hostname, sizeof(host_id.hostname)) != 0) {
        NIXL_WARN("gethostname failed: %s", strerror(errno));
        host_id.hostname[0] = '\0';
    }
    /* POSIX leaves a truncated name unterminated. */
    host_id.hostname[sizeof(host_id.hostname) - 1] = '\0';
    boot_id_read(host_id.boot_id);
}

void nixl_host_id_get(nixl_host_id_t *out)
{
    pthread_once(&host_once, host_id_init);
    *out = host_id;
}

static int boot_id_known(const uint8_t id[16])
{
    for (int i = 0; i < 16; i++)
        if (id[i] != 0)
            return 1;
    return 0;
}

int nixl_host_id_same(const nixl_host_id_t *a, const nixl_host_id_t *b)
{
    if (boot_id_known(a->boot_id) && boot_id_known(b->boot_id))
        return memcmp(a->boot_id, b->boot_id, sizeof(a->boot_id)) == 0;
    /* An empty hostname says nothing; never call two unknowns the same host. */
    if (a->hostname[0] == '\0')
        return 0;
    return strncmp(a->hostname, b->hostname, sizeof(a->hostname)) == 0;
}

static uint64_t ns_inode(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

void nixl_proc_id_get(nixl_proc_id_t *out)
{
    memset(out, 0, sizeof(*out));
    nixl_host_id_get(&out->host);
    out->pid = (uint32_t)getpid();
    out->uid = (uint32_t)getuid();
    if (nixl_proc_start_time(out->pid, &out->start_time) != 0)
        out->start_time = 0;
    out->pidns = ns_inode("/proc/self/ns/pid");
    out->netns = ns_inode("/proc/self/ns/net");
}
