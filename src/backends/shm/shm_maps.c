/*
 * shm_maps.c - which mapping backs an address of this process.
 *
 * Registration asks whether a range lies inside one shared file mapping, so
 * peers could map the same file instead of copying with process_vm_*.
 * Kernels 6.11+ answer one address at a time with the PROCMAP_QUERY ioctl on
 * /proc/self/maps (no text, no whole-file read).  Older kernels get the text
 * parsed; that snapshot is reused for a few milliseconds so a batch of
 * registrations reads the file once.  A stale snapshot can only err towards
 * "not covered" (we re-read) or describe a mapping that was replaced within
 * that window: registration additionally needs the file to be open here
 * (see shm_mem.c), and deregistration drops the snapshot.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "shm_int.h"

#define SHM_MAPS_TTL_NS (10ull * 1000 * 1000)

/* The PROCMAP_QUERY interface (linux/fs.h of 6.11), declared here because
 * build hosts may carry older kernel headers. */
struct shm_procmap_query {
    uint64_t size;
    uint64_t query_flags;
    uint64_t query_addr;
    uint64_t vma_start;
    uint64_t vma_end;
    uint64_t vma_flags;
    uint64_t vma_page_size;
    uint64_t vma_offset;
    uint64_t inode;
    uint32_t dev_major;
    uint32_t dev_minor;
    uint32_t vma_name_size;
    uint32_t build_id_size;
    uint64_t vma_name_addr;
    uint64_t build_id_addr;
};
#define SHM_PROCMAP_QUERY _IOWR('f', 17, struct shm_procmap_query)
#define SHM_PMQ_VMA_READABLE 0x01u
#define SHM_PMQ_VMA_WRITABLE 0x02u
#define SHM_PMQ_VMA_SHARED 0x08u

void shm_maps_init(shm_maps_t *m)
{
    memset(m, 0, sizeof(*m));
    m->fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    m->use_query = m->fd >= 0;
}

void shm_maps_fini(shm_maps_t *m)
{
    if (m->fd >= 0)
        close(m->fd);
    free(m->text);
    free(m->vmas);
    memset(m, 0, sizeof(*m));
    m->fd = -1;
}

void shm_maps_invalidate(shm_maps_t *m)
{
    m->taken_ns = 0;
}

static int shm_hex_field(char **pp, char term, uint64_t *out)
{
    char *p = *pp;
    uint64_t v = 0;
    int digits = 0;
    for (;; p++) {
        int c = (unsigned char)*p, d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            break;
        if (v >> 60)
            return -1;
        v = (v << 4) | (uint64_t)d;
        digits++;
    }
    if (!digits || *p != term)
        return -1;
    *pp = p + 1;
    *out = v;
    return 0;
}

static int shm_dec_field(char **pp, uint64_t *out)
{
    char *p = *pp;
    uint64_t v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
        digits++;
    }
    if (!digits || (*p != ' ' && *p != '\n' && *p != '\0'))
        return -1;
    *pp = p;
    *out = v;
    return 0;
}

/* One line: "start-end perms offset major:minor inode [path]".  The path
 * runs to the end of the line and may hold spaces (the kernel escapes
 * newlines as \012). */
static int shm_parse_line(char *line, shm_vma_t *v)
{
    char *p = line;
    uint64_t major, minor;
    if (shm_hex_field(&p, '-', &v->start) || shm_hex_field(&p, ' ', &v->end) || v->end <= v->start)
        return -1;
    if (strlen(p) < 5 || p[4] != ' ')
        return -1;
    v->readable = p[0] == 'r';
    v->writable = p[1] == 'w';
    v->shared = p[3] == 's';
    p += 5;
    if (shm_hex_field(&p, ' ', &v->offset) || shm_hex_field(&p, ':', &major) || shm_hex_field(&p, ' ', &minor) ||
        shm_dec_field(&p, &v->ino))
        return -1;
    v->dev = (uint64_t)makedev((unsigned)major, (unsigned)minor);
    while (*p == ' ')
        p++;
    v->path = p;
    return 0;
}

int shm_maps_parse(char *text, shm_vma_t **vmas, size_t *n, size_t *cap)
{
    size_t count = 0;
    char *line = text;
    while (*line) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (NIXL_ARRAY_RESERVE(*vmas, *cap, count + 1, 256))
            return -1;
        if (shm_parse_line(line, &(*vmas)[count]) != 0)
            return -1;
        count++;
        if (!nl)
            break;
        line = nl + 1;
    }
    *n = count;
    return 0;
}

static int shm_maps_refresh(shm_maps_t *m)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    for (;;) {
        if (NIXL_ARRAY_RESERVE(m->text, m->text_cap, got + 4096, 65536))
            goto err_close;
        ssize_t r = read(fd, m->text + got, m->text_cap - got - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            goto err_close;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    m->text[got] = '\0';
    m->taken_ns = 0;
    if (shm_maps_parse(m->text, &m->vmas, &m->nvmas, &m->vmas_cap) != 0) {
        errno = EPROTO;
        return -1;
    }
    m->taken_ns = nixl_now_ns();
    return 0;

err_close:
    close(fd);
    return -1;
}

/* 1: inside one cached vma; 0: not covered by a single one. */
static int shm_maps_lookup(const shm_maps_t *m, uint64_t addr, uint64_t len, shm_vma_t *out)
{
    size_t lo = 0, hi = m->nvmas;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->vmas[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == m->nvmas || m->vmas[lo].start > addr || addr + len > m->vmas[lo].end)
        return 0;
    *out = m->vmas[lo];
    return 1;
}

static int shm_maps_query(shm_maps_t *m, uint64_t addr, uint64_t len, shm_vma_t *out)
{
    struct shm_procmap_query q;
    memset(&q, 0, sizeof(q));
    q.size = sizeof(q);
    q.query_addr = addr;
    q.vma_name_addr = (uint64_t)(uintptr_t)m->name;
    q.vma_name_size = sizeof(m->name);
    if (ioctl(m->fd, SHM_PROCMAP_QUERY, &q) != 0)
        return errno == ENOENT ? 0 : -1;
    if (q.vma_name_size == 0)
        m->name[0] = '\0';
    m->name[sizeof(m->name) - 1] = '\0';
    if (addr + len > q.vma_end)
        return 0;
    out->start = q.vma_start;
    out->end = q.vma_end;
    out->offset = q.vma_offset;
    out->dev = (uint64_t)makedev(q.dev_major, q.dev_minor);
    out->ino = q.inode;
    out->readable = !!(q.vma_flags & SHM_PMQ_VMA_READABLE);
    out->writable = !!(q.vma_flags & SHM_PMQ_VMA_WRITABLE);
    out->shared = !!(q.vma_flags & SHM_PMQ_VMA_SHARED);
    out->path = m->name;
    return 1;
}

int shm_maps_find(shm_be_t *be, uint64_t addr, uint64_t len, shm_vma_t *out)
{
    shm_maps_t *m = &be->maps;
    if (len == 0 || addr + len < addr)
        return 0;
    if (m->use_query) {
        int r = shm_maps_query(m, addr, len, out);
        if (r >= 0)
            return r;
        if (errno == ENOTTY || errno == EINVAL || errno == EOPNOTSUPP)
            m->use_query = 0; /* kernel < 6.11: parse from now on */
        else
            SHM_DEBUG(be, "shm: PROCMAP_QUERY at 0x%llx failed (%s); parsing /proc/self/maps this time",
                      (unsigned long long)addr, strerror(errno));
    }
    int fresh = 0;
    if (!m->taken_ns || nixl_now_ns() - m->taken_ns > SHM_MAPS_TTL_NS) {
        if (shm_maps_refresh(m) != 0)
            goto err_read;
        fresh = 1;
    }
    if (shm_maps_lookup(m, addr, len, out))
        return 1;
    if (fresh)
        return 0;
    /* Not covered in an old snapshot: the mapping may be newer than it. */
    if (shm_maps_refresh(m) != 0)
        goto err_read;
    return shm_maps_lookup(m, addr, len, out);

err_read:
    SHM_WARN(be, "shm: cannot read /proc/self/maps: %s; registrations use shm.cma", strerror(errno));
    return -1;
}
