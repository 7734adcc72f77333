/*
 * fake_cufile.c - a stand-in for libcufile.so.0, so the gds backend's own
 * logic runs on a machine without cuFile: the calls of
 * src/backends/gds/cufile_api.h over pread/pwrite on host memory.
 *
 * Like cuFile it refuses a second handle for an fd that has one, so the
 * test sees the backend share one handle per file.  Environment:
 *   FAKE_CUFILE_OPEN_FAIL=1  cuFileDriverOpen fails (error 5001)
 *   FAKE_CUFILE_DELAY_US=N   every read and write sleeps N us first
 * fake_cufile_live_handles() tells the test how many handles are open.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/backends/gds/cufile_api.h"

#define FAKE_MAX_FDS 1024
#define FAKE_API __attribute__((visibility("default"))) /* the build hides symbols by default */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int handle_of[FAKE_MAX_FDS]; /* 1 + fd's handle slot in use */
static int live;
static int opened;

FAKE_API int fake_cufile_live_handles(void);
int fake_cufile_live_handles(void)
{
    pthread_mutex_lock(&lock);
    int n = live;
    pthread_mutex_unlock(&lock);
    return n;
}

FAKE_API nixl_cufile_error_t cuFileDriverOpen(void);
nixl_cufile_error_t cuFileDriverOpen(void)
{
    const char *f = getenv("FAKE_CUFILE_OPEN_FAIL");
    if (f && *f == '1')
        return (nixl_cufile_error_t){5001, 0};
    opened = 1;
    return (nixl_cufile_error_t){0, 0};
}

FAKE_API nixl_cufile_error_t cuFileDriverGetProperties(nixl_cufile_props_t *p);
nixl_cufile_error_t cuFileDriverGetProperties(nixl_cufile_props_t *p)
{
    memset(p, 0, sizeof(*p)); /* no nvidia-fs: compatibility mode */
    p->nvfs.dcontrolflags = 1u << 1;
    return (nixl_cufile_error_t){0, 0};
}

FAKE_API nixl_cufile_error_t cuFileHandleRegister(nixl_cufile_handle_t *fh, nixl_cufile_descr_t *d);
nixl_cufile_error_t cuFileHandleRegister(nixl_cufile_handle_t *fh, nixl_cufile_descr_t *d)
{
    if (!opened || !d || d->type != NIXL_CUFILE_HANDLE_TYPE_OPAQUE_FD || d->fs_ops)
        return (nixl_cufile_error_t){5002, 0};
    int fd = d->handle.fd;
    if (fd < 0 || fd >= FAKE_MAX_FDS || fcntl(fd, F_GETFL) < 0)
        return (nixl_cufile_error_t){5003, 0};
    pthread_mutex_lock(&lock);
    int dup = handle_of[fd] != 0;
    if (!dup) {
        handle_of[fd] = 1;
        live++;
    }
    pthread_mutex_unlock(&lock);
    if (dup)
        return (nixl_cufile_error_t){5004, 0}; /* already registered */
    *fh = (nixl_cufile_handle_t)(uintptr_t)(fd + 1);
    return (nixl_cufile_error_t){0, 0};
}

FAKE_API void cuFileHandleDeregister(nixl_cufile_handle_t fh);
void cuFileHandleDeregister(nixl_cufile_handle_t fh)
{
    int fd = (int)(uintptr_t)fh - 1;
    pthread_mutex_lock(&lock);
    if (fd >= 0 && fd < FAKE_MAX_FDS && handle_of[fd]) {
        handle_of[fd] = 0;
        live--;
    }
    pthread_mutex_unlock(&lock);
}

FAKE_API nixl_cufile_error_t cuFileBufRegister(const void *p, size_t n, int flags);
nixl_cufile_error_t cuFileBufRegister(const void *p, size_t n, int flags)
{
    (void)p;
    (void)n;
    (void)flags;
    return (nixl_cufile_error_t){0, 0};
}

FAKE_API nixl_cufile_error_t cuFileBufDeregister(const void *p);
nixl_cufile_error_t cuFileBufDeregister(const void *p)
{
    (void)p;
    return (nixl_cufile_error_t){0, 0};
}

static void delay(void)
{
    const char *d = getenv("FAKE_CUFILE_DELAY_US");
    if (d && *d)
        usleep((useconds_t)atoi(d));
}

static int fd_of(nixl_cufile_handle_t fh)
{
    int fd = (int)(uintptr_t)fh - 1;
    return fd >= 0 && fd < FAKE_MAX_FDS && handle_of[fd] ? fd : -1;
}

FAKE_API ssize_t cuFileRead(nixl_cufile_handle_t fh, void *base, size_t n, off_t off, off_t boff);
ssize_t cuFileRead(nixl_cufile_handle_t fh, void *base, size_t n, off_t off, off_t boff)
{
    delay();
    int fd = fd_of(fh);
    if (fd < 0)
        return -5005;
    return pread(fd, (char *)base + boff, n, off);
}

FAKE_API ssize_t cuFileWrite(nixl_cufile_handle_t fh, const void *base, size_t n, off_t off, off_t boff);
ssize_t cuFileWrite(nixl_cufile_handle_t fh, const void *base, size_t n, off_t off, off_t boff)
{
    delay();
    int fd = fd_of(fh);
    if (fd < 0)
        return -5005;
    return pwrite(fd, (const char *)base + boff, n, off);
}
