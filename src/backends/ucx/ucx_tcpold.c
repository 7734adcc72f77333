/*
 * ucx_tcpold.c - the TCP connections an endpoint closed for silence leaves
 * behind, so that a new endpoint to the same peer waits for them.
 *
 * UCX 1.13's tcp transport closes its sockets with a plain close(): data
 * still queued or unacknowledged goes on being sent by the kernel, and
 * once a link that was down comes back it lands in the peer's memory, the
 * bytes of a WRITE that ended NIXL_ERR_PEER_GONE long ago.  Seen in
 * faults-ucx-netns-blackout-renew (about 1 run in 10 before this): a WRITE
 * on the renewed endpoint was found at its notification holding bytes of
 * a WRITE that had failed on the old one.  UCX says nothing of its
 * sockets (and keeps a closed endpoint's until its own timeout), so they
 * are found in /proc: when the peer is found stalled, the TCP connections
 * of this process (/proc/self/fd's sockets in /proc/net/tcp and tcp6) with
 * bytes sent and not acknowledged are kept by their addresses.  The peer
 * is tried again only once each was seen with nothing unacknowledged, or
 * gone: every byte queued on it reached the peer's kernel by then, or
 * never will (its UCX reads the old socket before a new connection has
 * even finished its wireup: a narrow window, not a proof).  Others of ours
 * busy at that moment (another peer's) are waited for too, briefly.
 * Where /proc cannot be read the time rule alone stands.
 *
 * /proc's text is the kernel's: parsed field by field all the same, a line
 * that does not parse is skipped.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ucx_int.h"

/* The socket inodes of this process's descriptors (sorted); how many, or 0. */
static size_t ucx_sock_inodes(unsigned long *out, size_t cap)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    char path[64], link[64];
    while ((e = readdir(d)) && n < cap) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%.20s", e->d_name);
        ssize_t len = readlink(path, link, sizeof(link) - 1);
        if (len <= 8)
            continue;
        link[len] = '\0';
        unsigned long ino;
        char end;
        if (sscanf(link, "socket:[%lu%c", &ino, &end) == 2 && end == ']')
            out[n++] = ino;
    }
    closedir(d);
    return n;
}

static int ucx_has_inode(const unsigned long *v, size_t n, unsigned long ino)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == ino)
            return 1;
    return 0;
}

/* One line of /proc/net/tcp{,6}: its addresses ("LOCAL REMOTE", the
 * kernel's hex), state, send queue and inode.  0 when it parsed. */
typedef struct {
    char tuple[UCX_TCP_TUPLE_MAX];
    unsigned state;
    unsigned long txq, inode;
} ucx_tcp_line_t;

static int ucx_tcp_line_parse(const char *line, ucx_tcp_line_t *t)
{
    char local[48], remote[48];
    unsigned st;
    unsigned long txq, inode;
    /* sl local remote st tx:rx tr:when retrnsmt uid timeout inode */
    if (sscanf(line, " %*[0-9]: %47[0-9A-Fa-f:] %47[0-9A-Fa-f:] %x %lx:%*x %*x:%*x %*x %*u %*u %lu", local, remote,
               &st, &txq, &inode) != 5)
        return -1;
    size_t nl = strlen(local), nr = strlen(remote);
    if (nl + nr + 2 > sizeof(t->tuple))
        return -1;
    memcpy(t->tuple, local, nl);
    t->tuple[nl] = ' ';
    memcpy(t->tuple + nl + 1, remote, nr + 1);
    t->state = st;
    t->txq = txq;
    t->inode = inode;
    return 0;
}

/* Calls fn for every parsed line of both tables; 0 when at least one
 * table was read. */
static int ucx_tcp_lines(void (*fn)(const ucx_tcp_line_t *, void *), void *arg)
{
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    int read_one = 0;
    char line[512];
    for (size_t i = 0; i < 2; i++) {
        FILE *f = fopen(tables[i], "re");
        if (!f)
            continue;
        read_one = 1;
        while (fgets(line, sizeof(line), f)) {
            ucx_tcp_line_t t;
            if (ucx_tcp_line_parse(line, &t) == 0)
                fn(&t, arg);
        }
        fclose(f);
    }
    return read_one ? 0 : -1;
}

#define UCX_SOCKS_MAX 4096

typedef struct {
    ucx_peer_t *peer;
    const unsigned long *ours;
    size_t nours;
} ucx_mark_arg_t;

static void ucx_mark_line(const ucx_tcp_line_t *t, void *arg)
{
    ucx_mark_arg_t *a = arg;
    ucx_peer_t *p = a->peer;
    if (t->txq && t->inode && p->nold < UCX_OLD_CONNS_MAX && ucx_has_inode(a->ours, a->nours, t->inode))
        memcpy(p->old_conns[p->nold++], t->tuple, UCX_TCP_TUPLE_MAX);
}

unsigned ucx_tcpold_mark(ucx_peer_t *peer)
{
    peer->nold = 0;
    unsigned long *ours = malloc(sizeof(*ours) * UCX_SOCKS_MAX);
    if (!ours)
        return 0;
    ucx_mark_arg_t a = {peer, ours, ucx_sock_inodes(ours, UCX_SOCKS_MAX)};
    if (a.nours)
        (void)ucx_tcp_lines(ucx_mark_line, &a);
    free(ours);
    return peer->nold;
}

typedef struct {
    const ucx_peer_t *peer;
    unsigned char busy[UCX_OLD_CONNS_MAX];
} ucx_busy_arg_t;

static void ucx_busy_line(const ucx_tcp_line_t *t, void *arg)
{
    ucx_busy_arg_t *a = arg;
    if (!t->txq)
        return;
    for (unsigned i = 0; i < a->peer->nold; i++)
        if (!strcmp(a->peer->old_conns[i], t->tuple))
            a->busy[i] = 1;
}

unsigned ucx_tcpold_busy(ucx_peer_t *peer)
{
    if (!peer->nold)
        return 0;
    ucx_busy_arg_t a = {peer, {0}};
    if (ucx_tcp_lines(ucx_busy_line, &a) != 0) {
        peer->nold = 0; /* the tables went away: the time rule alone */
        return 0;
    }
    /* A connection seen with nothing unacknowledged, or gone, is done for
     * good: everything queued on it before was acknowledged by then, or
     * will never be sent. */
    unsigned n = 0;
    for (unsigned i = 0; i < peer->nold; i++)
        if (a.busy[i])
            memmove(peer->old_conns[n++], peer->old_conns[i], UCX_TCP_TUPLE_MAX);
    peer->nold = n;
    return n;
}
