/*
 * file_path.c - NIXL's path mode for FILE registrations.
 *
 * A FILE descriptor normally names its file by the fd in dev_id, opened
 * by the caller.  In path mode its meta says which file to open instead:
 *
 *   meta  := access ("," flag)* ":" path
 *   access:  "ro" (O_RDONLY) | "rw" (O_RDWR)
 *   flag:    "direct" (O_DIRECT) | "sync" (O_SYNC) | "noatime" (O_NOATIME)
 *          | "create" (O_CREAT, mode 0644)
 *
 * (NIXL's grammar, src/utils/file of NIXL.)  The core opens the file when
 * the descriptor is registered and closes it when it is deregistered;
 * dev_id then is the caller's name for the file, which transfers use as
 * they would an fd.  Meta that does not start with an access token and a
 * colon or comma is not path mode (a path kept for nixl_mem_query, say).
 * Where NIXL reads a malformed path-mode string (an unknown flag, an empty
 * path) as fd mode after a debug line, this refuses it, naming the fault:
 * the caller meant a path, and the fd it would otherwise use is whatever
 * dev_id happens to be.
 */
#include <fcntl.h>
#include <string.h>

#include "agent.h"
#include "util/log.h"

/* Does meta[0, len) start with word, followed by ',' or ':'? */
static int starts_token(const uint8_t *meta, size_t len, const char *word)
{
    size_t n = strlen(word);
    return len > n && memcmp(meta, word, n) == 0 && (meta[n] == ',' || meta[n] == ':');
}

int nixl_file_path_parse(const uint8_t *meta, size_t len, nixl_file_path_t *out, const char *what, size_t i)
{
    if (!meta || !(starts_token(meta, len, "ro") || starts_token(meta, len, "rw")))
        return 0;
    int flags = meta[1] == 'o' ? O_RDONLY : O_RDWR;
    const uint8_t *colon = memchr(meta, ':', len);
    if (!colon) {
        NIXL_ERROR("%s: FILE descriptor %zu: path mode \"%.*s\" has no ':' before its path", what, i,
                   (int)(len < 64 ? len : 64), (const char *)meta);
        return -1;
    }
    /* The flags after the access token, each up to the next ',' or the ':'. */
    const uint8_t *p = meta + 2;
    while (p < colon) {
        p++; /* the ',' */
        const uint8_t *e = p;
        while (e < colon && *e != ',')
            e++;
        size_t n = (size_t)(e - p);
        if (n == 6 && memcmp(p, "direct", 6) == 0)
            flags |= O_DIRECT;
        else if (n == 4 && memcmp(p, "sync", 4) == 0)
            flags |= O_SYNC;
        else if (n == 7 && memcmp(p, "noatime", 7) == 0)
            flags |= O_NOATIME;
        else if (n == 6 && memcmp(p, "create", 6) == 0)
            flags |= O_CREAT;
        else {
            NIXL_ERROR("%s: FILE descriptor %zu: path mode flag \"%.*s\" is none of direct, sync, noatime, create",
                       what, i, (int)(n < 32 ? n : 32), (const char *)p);
            return -1;
        }
        p = e;
    }
    size_t plen = len - (size_t)(colon + 1 - meta);
    if (plen == 0 || plen >= sizeof(out->path) || memchr(colon + 1, 0, plen)) {
        NIXL_ERROR("%s: FILE descriptor %zu: path mode path %s", what, i,
                   plen == 0                  ? "is empty"
                   : plen >= sizeof(out->path) ? "is longer than PATH_MAX"
                                              : "holds a NUL byte");
        return -1;
    }
    memcpy(out->path, colon + 1, plen);
    out->path[plen] = 0;
    out->flags = flags;
    return 1;
}
