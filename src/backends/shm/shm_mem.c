/*
 * shm_mem.c - registration (our memory) and remote keys (a peer's memory).
 *
 * A region that lies inside one shared, writable file mapping (a memfd from
 * nixl_mem_alloc, a /dev/shm file) is offered to peers as {pid, fd, file
 * offset}: we keep a duplicate of a descriptor of that file open, the peer
 * opens /proc/<pid>/fd/<n>, checks it is the same file and maps it once
 * (path shm.map: plain memcpy, no syscall per descriptor).  Any other region
 * is reached with process_vm_readv/writev (shm.cma).  When a mapping was
 * offered but cannot be made, the region falls back to shm.cma and the host
 * counts that fallback with its cause.
 *
 * reg and dereg may run on several threads at once (NIXL_CAP_REG_MT): what
 * they share, the list of kept files and the maps snapshot, is touched only
 * under reg_lock; the rest of a registration is its own.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm_int.h"

/* rkey: magic, version, kind; MAP adds pid, fd, reserved, offset, dev, ino. */
#define SHM_RKEY_MAGIC 0x4b53 /* "SK" */
#define SHM_RKEY_VERSION 1
#define SHM_RKEY_CMA 1
#define SHM_RKEY_MAP 2
#define SHM_RKEY_CMA_LEN 4
#define SHM_RKEY_MAP_LEN 40

static int shm_fd_is(int fd, uint64_t dev, uint64_t ino)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

/* A descriptor of ours open on (dev, ino), duplicated; -1 if none. */
static int shm_find_open_fd(uint64_t dev, uint64_t ino)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int self = dirfd(d), found = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long n = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || n < 0 || n > INT32_MAX || n == self)
            continue;
        if (!shm_fd_is((int)n, dev, ino))
            continue;
        int dup_fd = fcntl((int)n, F_DUPFD_CLOEXEC, 3);
        /* The number may have been closed and reused meanwhile: check the copy. */
        if (dup_fd >= 0 && shm_fd_is(dup_fd, dev, ino)) {
            found = dup_fd;
            break;
        }
        if (dup_fd >= 0)
            close(dup_fd);
    }
    closedir(d);
    return found;
}

static int shm_path_openable(const char *path)
{
    static const char deleted[] = " (deleted)";
    size_t n = strlen(path), dn = sizeof(deleted) - 1;
    if (path[0] != '/' || strchr(path, '\\'))
        return 0;
    return !(n >= dn && strcmp(path + n - dn, deleted) == 0);
}

/* Open a descriptor of the file behind vma, or -1. */
static int shm_open_vma_file(const shm_vma_t *vma)
{
    int fd = shm_find_open_fd(vma->dev, vma->ino);
    if (fd >= 0)
        return fd;
    /* Needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE); works for a memfd
     * whose descriptor was closed after mmap. */
    char path[96];
    snprintf(path, sizeof(path), "/proc/self/map_files/%llx-%llx", (unsigned long long)vma->start,
             (unsigned long long)vma->end);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && shm_fd_is(fd, vma->dev, vma->ino))
        return fd;
    if (fd >= 0)
        close(fd);
    if (!shm_path_openable(vma->path))
        return -1;
    fd = open(vma->path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && shm_fd_is(fd, vma->dev, vma->ino))
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Under reg_lock.  NULL: the region is reached with CMA only. */
static shm_file_t *shm_file_for(shm_be_t *be, uint64_t addr, uint64_t len, uint64_t *offset_out)
{
    shm_vma_t vma;
    if (shm_maps_find(be, addr, len, &vma) != 1)
        return NULL;
    /* A read-only mapping must stay read-only: a peer's writable mapping
     * would bypass our protection, so such memory goes over CMA. */
    if (!vma.shared || !vma.readable || !vma.writable || vma.ino == 0)
        return NULL;
    shm_file_t *f;
    for (f = be->files; f; f = f->next)
        if (f->dev == vma.dev && f->ino == vma.ino)
            break;
    if (!f) {
        int fd = shm_open_vma_file(&vma);
        if (fd < 0) {
            SHM_DEBUG(be, "shm: %s is shared but no descriptor of it can be kept; its region goes over shm.cma",
                      vma.path[0] ? vma.path : "(anonymous shared mapping)");
            return NULL;
        }
        f = calloc(1, sizeof(*f));
        if (!f) {
            close(fd);
            return NULL;
        }
        f->dev = vma.dev;
        f->ino = vma.ino;
        f->fd = fd;
        f->next = be->files;
        be->files = f;
    }
    f->refs++;
    *offset_out = vma.offset + (addr - vma.start);
    return f;
}

static void shm_file_put(shm_be_t *be, shm_file_t *file)
{
    if (--file->refs)
        return;
    for (shm_file_t **pp = &be->files; *pp; pp = &(*pp)->next) {
        if (*pp == file) {
            *pp = file->next;
            break;
        }
    }
    close(file->fd);
    free(file);
}

nixl_status_t shm_reg(void *bev, const nixl_be_region_t *region, void **md_out)
{
    shm_be_t *be = bev;
    if (!region || !md_out)
        return NIXL_ERR_NULL;
    if (region->mem_type != NIXL_MEM_DRAM) {
        SHM_ERROR(be, "shm: cannot register memory of type %d: DRAM only", (int)region->mem_type);
        return NIXL_ERR_MEM_TYPE;
    }
    if (region->len == 0 || region->addr + region->len < region->addr) {
        SHM_ERROR(be, "shm: cannot register [0x%llx, +%llu): empty or wraps", (unsigned long long)region->addr,
                  (unsigned long long)region->len);
        return NIXL_ERR_INVALID_PARAM;
    }
    shm_reg_t *r = calloc(1, sizeof(*r));
    if (!r)
        return NIXL_ERR_NO_MEMORY;
    r->addr = region->addr;
    r->len = region->len;
    if (be->map_enabled) {
        pthread_mutex_lock(&be->reg_lock);
        r->file = shm_file_for(be, r->addr, r->len, &r->offset);
        pthread_mutex_unlock(&be->reg_lock);
    }
    *md_out = r;
    return NIXL_OK;
}

void shm_dereg(void *bev, void *md)
{
    shm_be_t *be = bev;
    shm_reg_t *r = md;
    if (!r)
        return;
    pthread_mutex_lock(&be->reg_lock);
    if (r->file)
        shm_file_put(be, r->file);
    /* The memory may be unmapped next: drop what we knew about it. */
    shm_maps_invalidate(&be->maps);
    pthread_mutex_unlock(&be->reg_lock);
    free(r);
}

nixl_status_t shm_rkey_pack(void *bev, void *md, void *buf, size_t *len)
{
    shm_be_t *be = bev;
    shm_reg_t *r = md;
    if (!r || !len)
        return NIXL_ERR_NULL;
    size_t need = r->file ? SHM_RKEY_MAP_LEN : SHM_RKEY_CMA_LEN;
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    memset(p, 0, need);
    nixl_put_u16(p, SHM_RKEY_MAGIC);
    p[2] = SHM_RKEY_VERSION;
    p[3] = r->file ? SHM_RKEY_MAP : SHM_RKEY_CMA;
    if (r->file) {
        nixl_put_u32(p + 4, be->self_pid);
        nixl_put_u32(p + 8, (uint32_t)r->file->fd);
        nixl_put_u64(p + 16, r->offset);
        nixl_put_u64(p + 24, r->file->dev);
        nixl_put_u64(p + 32, r->file->ino);
    }
    *len = need;
    return NIXL_OK;
}

/* Map the peer's file range; on failure fill cause (short, for the
 * fallback counters) and log the detail. */
static int shm_rmd_map(shm_be_t *be, shm_rmd_t *rmd, int fd, uint64_t offset, uint64_t dev, uint64_t ino,
                       const char **cause)
{
    shm_peer_t *peer = rmd->peer;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)peer->pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) {
        *cause = "map: cannot open the peer's file";
        SHM_INFO(be, "shm: cannot open %s of peer %s: %s", path, peer->name, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino) {
        *cause = "map: the peer's descriptor is another file";
        SHM_INFO(be, "shm: %s of peer %s is not the file it registered", path, peer->name);
        goto err_close;
    }
    if (offset > (uint64_t)st.st_size || rmd->len > (uint64_t)st.st_size - offset) {
        /* Touching a page past the end of the file would raise SIGBUS. */
        *cause = "map: region ends past the end of the file";
        SHM_INFO(be, "shm: region of peer %s at file offset %llu + %llu ends past the file size %lld", peer->name,
                 (unsigned long long)offset, (unsigned long long)rmd->len, (long long)st.st_size);
        goto err_close;
    }
    uint64_t page = (uint64_t)be->page_size;
    uint64_t aligned = offset & ~(page - 1), delta = offset - aligned;
    uint64_t map_len = (delta + rmd->len + page - 1) & ~(page - 1);
    void *p = mmap(NULL, (size_t)map_len, PROT_READ | PROT_WRITE, MAP_SHARED, f, (off_t)aligned);
    if (p == MAP_FAILED) {
        *cause = "map: mmap of the peer's file failed";
        SHM_INFO(be, "shm: mmap of %llu bytes of %s (peer %s) failed: %s", (unsigned long long)map_len, path,
                 peer->name, strerror(errno));
        goto err_close;
    }
    close(f);
    rmd->map = p;
    rmd->map_len = (size_t)map_len;
    rmd->base = (uint8_t *)p + delta;
    return 0;

err_close:
    close(f);
    return -1;
}

nixl_status_t shm_rkey_load(void *bev, void *peerv, const nixl_be_region_t *region, const void *rkey,
                            size_t rkey_len, void **rmd_out)
{
    shm_be_t *be = bev;
    shm_peer_t *peer = peerv;
    const uint8_t *p = rkey;
    if (!peer || !region || !rmd_out)
        return NIXL_ERR_NULL;
    if (region->mem_type != NIXL_MEM_DRAM || region->len == 0 || region->addr + region->len < region->addr) {
        SHM_ERROR(be, "shm: remote region of peer %s is not DRAM or is empty", peer->name);
        return NIXL_ERR_INVALID_PARAM;
    }
    if (!p || rkey_len < SHM_RKEY_CMA_LEN || nixl_get_u16(p) != SHM_RKEY_MAGIC) {
        SHM_ERROR(be, "shm: key of a region of peer %s is malformed (%zu bytes)", peer->name, rkey_len);
        return NIXL_ERR_BAD_METADATA;
    }
    if (p[2] != SHM_RKEY_VERSION) {
        SHM_ERROR(be, "shm: key of a region of peer %s is version %u, we speak %u", peer->name, p[2],
                  SHM_RKEY_VERSION);
        return NIXL_ERR_MD_VERSION;
    }
    int map = 0;
    uint32_t fd = 0;
    uint64_t offset = 0, dev = 0, ino = 0;
    if (p[3] == SHM_RKEY_CMA && rkey_len == SHM_RKEY_CMA_LEN) {
        map = 0;
    } else if (p[3] == SHM_RKEY_MAP && rkey_len == SHM_RKEY_MAP_LEN) {
        fd = nixl_get_u32(p + 8);
        offset = nixl_get_u64(p + 16);
        dev = nixl_get_u64(p + 24);
        ino = nixl_get_u64(p + 32);
        if (nixl_get_u32(p + 4) != (uint32_t)peer->pid || fd > INT32_MAX || nixl_get_u32(p + 12) != 0 ||
            offset > INT64_MAX || region->len > INT64_MAX - offset) {
            SHM_ERROR(be, "shm: mapping key of a region of peer %s is inconsistent", peer->name);
            return NIXL_ERR_BAD_METADATA;
        }
        map = 1;
    } else {
        SHM_ERROR(be, "shm: key of a region of peer %s has kind %u and %zu bytes", peer->name, p[3], rkey_len);
        return NIXL_ERR_BAD_METADATA;
    }

    shm_rmd_t *rmd = calloc(1, sizeof(*rmd));
    if (!rmd)
        return NIXL_ERR_NO_MEMORY;
    rmd->peer = peer;
    rmd->addr = region->addr;
    rmd->len = region->len;
    if (map && be->map_enabled) {
        const char *cause = NULL;
        if (shm_rmd_map(be, rmd, (int)fd, offset, dev, ino, &cause) != 0) {
            rmd->fallback = 1;
            be->host->fallback(be->host->ctx, "shm.cma", cause);
        }
    }
    if (!rmd->base)
        peer->cma_regions++;
    *rmd_out = rmd;
    return NIXL_OK;
}

void shm_rkey_unload(void *bev, void *rmdv)
{
    shm_rmd_t *rmd = rmdv;
    (void)bev;
    if (!rmd)
        return;
    if (!rmd->base)
        rmd->peer->cma_regions--;
    if (rmd->map)
        munmap(rmd->map, rmd->map_len);
    free(rmd);
}
