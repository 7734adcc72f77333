/*
 * ucx_conn.c - peers of the ucx backend: the conn info (our worker's
 * address), the endpoint made when a peer is loaded, how a peer is found
 * gone, which transport its endpoint uses, and notifications.
 *
 * Endpoints are made with UCP_ERR_HANDLING_MODE_PEER and an error
 * callback: when UCX finds the peer unreachable (a reset connection, a
 * keepalive unanswered) it calls back, every operation in flight on the
 * endpoint completes with an error, and the peer is marked gone, so its
 * requests end NIXL_ERR_PEER_GONE and new ones are refused at once.  A
 * peer in our pid namespace is also watched through a pidfd (the core's
 * record of who it is): a process that exited is found at the next post
 * or status call, before UCX's keepalive would notice, and its endpoint is
 * closed so what it had in flight ends.
 *
 * Notifications are active messages (id UCX_AM_NOTIF) whose header is the
 * sender's agent name and whose data is the message, sent eagerly so the
 * receiver always has the whole message in its callback.  The name is what
 * the sender says it is: UCX endpoints made from an address carry no
 * identity of their own (docs/trust.md's rule for peers applies).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_int.h"

/* ---- conn info ---- */

nixl_status_t ucx_conn_pack(void *bev, void *buf, size_t *len)
{
    ucx_be_t *be = bev;
    size_t need = UCX_CONN_HDR + be->addr_len;
    if (!len)
        return NIXL_ERR_NULL;
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    uint8_t *p = buf;
    nixl_put_u32(p, UCX_CONN_MAGIC);
    nixl_put_u16(p + 4, UCX_CONN_VERSION);
    nixl_put_u16(p + 6, 0);
    nixl_put_u32(p + 8, (uint32_t)be->addr_len);
    memcpy(p + UCX_CONN_HDR, be->addr, be->addr_len);
    *len = need;
    return NIXL_OK;
}

nixl_status_t ucx_conn_parse(const void *conn, size_t len, const uint8_t **addr, size_t *addr_len, const char **why)
{
    const uint8_t *p = conn;
    if (!conn || len < UCX_CONN_HDR) {
        *why = "shorter than its header";
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u32(p) != UCX_CONN_MAGIC) {
        *why = "bad magic";
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u16(p + 4) != UCX_CONN_VERSION) {
        *why = "unknown version";
        return NIXL_ERR_BAD_METADATA;
    }
    if (nixl_get_u16(p + 6) != 0) {
        *why = "reserved field not zero";
        return NIXL_ERR_BAD_METADATA;
    }
    uint32_t alen = nixl_get_u32(p + 8);
    if (alen == 0 || alen > UCX_CONN_ADDR_MAX) {
        *why = "worker address length out of range";
        return NIXL_ERR_BAD_METADATA;
    }
    if ((size_t)alen != len - UCX_CONN_HDR) {
        *why = "worker address length does not match the conn info's";
        return NIXL_ERR_BAD_METADATA;
    }
    *addr = p + UCX_CONN_HDR;
    *addr_len = alen;
    return NIXL_OK;
}

/* ---- which transport an endpoint uses ----
 *
 * UCX 1.13 has no query for an endpoint's transports (ucp_ep_query gives
 * its name and socket addresses only), so the endpoint's configuration is
 * printed with ucp_ep_print_info into memory and its lane lines read:
 *
 *   lane[0]:  0:tcp/lo.0 md[0]  -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup
 *   put[1]: 0..<short>..4294967296..<bcopy>..(inf)
 *
 * Which lane carries a request's pieces, from what UCX does with a region
 * an application registered:
 * - the shared-memory transports sysv and posix register nothing (their
 *   memory domains map only what UCX allocated itself), so their RMA lanes
 *   never reach an application's region: theirs count only as AM lanes;
 * - with UCX's newer protocols (proto_v2: the default from UCX 1.16,
 *   UCX_PROTO_ENABLE), a bulk-RMA lane (rma_bw) takes large puts and gets
 *   zero-copy (tcp's put_zcopy, cma), ahead of everything else;
 * - then a lane that puts use (a put[N] line, or an "rma" usage);
 * - then the active-message lane ("am"): UCX emulates RMA over it;
 * - with the older protocols, the bulk-RMA lane last (rendezvous only).
 * UCP_ERR_HANDLING_MODE_PEER leaves out the bulk-RMA lanes of transports
 * that cannot invalidate a region (tcp, cma), hence ucx.tcp over AM there.
 * GPU memory (gpu 1): a lane of a GPU transport (cuda_ipc, gdr_copy...)
 * first, by the same order; without one, the lane host memory takes
 * (tcp or rc, UCX staging through cuda_copy or the NIC reading GPU
 * memory).  Host memory (gpu 0): never a GPU transport's lane.
 * This is the endpoint's configuration, read once when the peer is loaded;
 * the per-piece choice stays UCX's (a piece of a few bytes may go short). */
static int ucx_tl_is_mm(const char *tl)
{
    return strcmp(tl, "sysv") == 0 || strcmp(tl, "posix") == 0;
}

static int ucx_tl_is_gpu(const char *tl)
{
    static const char *const gpu_tl[] = {"cuda", "gdr", "rocm", "ze"};
    for (size_t i = 0; i < sizeof(gpu_tl) / sizeof(gpu_tl[0]); i++)
        if (strncmp(tl, gpu_tl[i], strlen(gpu_tl[i])) == 0)
            return 1;
    return 0;
}

/* A transport inside one node: shared memory, the kernel's copies, the
 * GPU's copy engines.  Its operations move at memory speed and need no
 * chunking for the silence rule (ucx_peer_path_of). */
static int ucx_tl_is_local(const char *tl)
{
    return ucx_tl_is_mm(tl) || ucx_tl_is_gpu(tl) || strcmp(tl, "cma") == 0 || strcmp(tl, "knem") == 0 ||
           strcmp(tl, "xpmem") == 0 || strcmp(tl, "self") == 0;
}

/* A lane line's transport, from its "lane[" up to end: "lane[0]:  0:tcp/lo.0
 * md[0] -> ...", the name between the second ':' and the '/'.  Its start,
 * with its length (1 to UCX_TL_NAME_MAX) in *n; NULL if none. */
static const char *ucx_lane_tl(const char *lane, const char *end, size_t *n)
{
    const char *c = memchr(lane, ':', (size_t)(end - lane));
    c = c ? memchr(c + 1, ':', (size_t)(end - c - 1)) : NULL;
    const char *slash = c ? memchr(c, '/', (size_t)(end - c)) : NULL;
    if (!slash || slash - c - 1 <= 0 || slash - c - 1 > UCX_TL_NAME_MAX)
        return NULL;
    *n = (size_t)(slash - c - 1);
    return c + 1;
}

int ucx_ep_info_transport(const char *info, int proto_v2, int gpu, char *tl, size_t cap)
{
    enum { LANES = 32 };
    enum { S_BW_V1 = 1, S_AM = 2, S_RMA = 3, S_BW_V2 = 4, S_GPU = 8 };
    char names[LANES][UCX_TL_NAME_MAX + 1];
    int score[LANES];
    int nl = 0;
    memset(score, 0, sizeof(score));
    for (const char *line = info; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        char buf[256];
        if (n >= sizeof(buf))
            n = sizeof(buf) - 1;
        memcpy(buf, line, n);
        buf[n] = 0;
        line = eol ? eol + 1 : NULL;
        char *s = strstr(buf, "lane[");
        int idx;
        if (s && sscanf(s, "lane[%d]:", &idx) == 1 && idx >= 0 && idx < LANES) {
            size_t namelen;
            const char *name = ucx_lane_tl(s, buf + n, &namelen);
            if (!name)
                continue;
            memcpy(names[idx], name, namelen);
            names[idx][namelen] = 0;
            const char *slash = name + namelen;
            if (idx >= nl) {
                for (int k = nl; k < idx; k++)
                    names[k][0] = 0;
                nl = idx + 1;
            }
            int mm = ucx_tl_is_mm(names[idx]);
            const char *uses = strstr(slash, "->");
            int sc = 0;
            for (const char *t = uses ? strchr(uses + 2, ' ') : NULL; t && *t;) {
                while (*t == ' ')
                    t++;
                size_t tn = strcspn(t, " ");
                int v = 0;
                if (tn >= 6 && strncmp(t, "rma_bw", 6) == 0)
                    v = mm ? 0 : proto_v2 ? S_BW_V2 : S_BW_V1;
                else if (tn >= 3 && strncmp(t, "rma", 3) == 0)
                    v = mm ? 0 : S_RMA;
                else if (tn >= 2 && strncmp(t, "am", 2) == 0 && (tn == 2 || t[2] == '#'))
                    v = S_AM;
                sc = sc > v ? sc : v;
                t += tn;
            }
            if (sc && ucx_tl_is_gpu(names[idx]))
                sc = gpu ? sc + S_GPU : 0;
            score[idx] = score[idx] > sc ? score[idx] : sc;
            continue;
        }
        s = strstr(buf, "put[");
        if (s && sscanf(s, "put[%d]:", &idx) == 1 && idx >= 0 && idx < nl && names[idx][0] &&
            !ucx_tl_is_mm(names[idx])) {
            int sc = !ucx_tl_is_gpu(names[idx]) ? S_RMA : gpu ? S_RMA + S_GPU : 0;
            score[idx] = score[idx] > sc ? score[idx] : sc;
        }
    }
    int best = -1;
    for (int i = 0; i < nl; i++)
        if (names[i][0] && score[i] > 0 && (best < 0 || score[i] > score[best]))
            best = i;
    if (best < 0 || strlen(names[best]) >= cap)
        return -1;
    strcpy(tl, names[best]);
    return 0;
}

/* The transports of an endpoint's lanes, " tl tl ... ", from a printout
 * of ucp_ep_print_info (each once; what fits of cap). */
void ucx_ep_info_lanes(const char *info, char *out, size_t cap)
{
    size_t n = 0;
    if (cap < 2)
        return;
    out[n++] = ' ';
    out[n] = 0;
    for (const char *l = info; l && *l;) {
        size_t len = strcspn(l, "\n");
        const char *s = memmem(l, len, "lane[", 5);
        size_t tn;
        const char *name = s ? ucx_lane_tl(s, l + len, &tn) : NULL;
        if (name) {
            char w[UCX_TL_NAME_MAX + 3];
            snprintf(w, sizeof(w), " %.*s ", (int)tn, name);
            if (!strstr(out, w) && n + tn + 1 < cap) {
                memcpy(out + n, w + 1, tn + 1);
                n += tn + 1;
                out[n] = 0;
            }
        }
        l += len + (l[len] == '\n');
    }
}

/* ---- what UCX chose for an operation (its newer protocols) ----
 *
 * ucp_worker_print_info lists, per remote key configuration, the protocol
 * UCX selected for each operation and pair of memory types so far, one
 * table each (1.13 writes "ucp_get*()", 1.20 "ucp_get*"):
 *
 *   | <endpoint config> | remote memory read by ucp_get* into cuda/GPU0 from cuda/dev[0] |
 *   |            0..inf | software emulation                     | sysv/memory |
 *
 * The row covering a size names the transport ("52% on tcp/lo and 48% on
 * tcp/eth0": the first).  Tables of other endpoints' configurations are
 * told apart by a transport that is not among this peer's lanes. */

/* The cells of a table row, trimmed, from its first '|'; how many. */
static int ucx_row_cells(char *line, char **cell, int max)
{
    char *p = strchr(line, '|');
    int n = 0;
    while (p && n < max) {
        char *q = strchr(p + 1, '|');
        if (!q)
            break;
        char *a = p + 1, *b = q;
        while (a < b && *a == ' ')
            a++;
        while (b > a && b[-1] == ' ')
            b--;
        *b = 0;
        cell[n++] = a;
        p = q;
    }
    return n;
}

/* A range cell's bound: "inf" (UINT64_MAX) or a size ("8240", "8K"). */
static int ucx_bound(const char *s, uint64_t *v)
{
    if (strcmp(s, "inf") == 0) {
        *v = UINT64_MAX;
        return 0;
    }
    return nixl_param_parse_size(s, v);
}

/* 1 when a range cell ("0..inf", "85..8240", "0") holds size; the cell is
 * cut at its "..". */
static int ucx_range_has(char *r, uint64_t size)
{
    uint64_t lo, hi;
    char *dots = strstr(r, "..");
    if (dots)
        *dots = 0;
    if (ucx_bound(r, &lo) != 0)
        return 0;
    hi = lo;
    if (dots && ucx_bound(dots + 2, &hi) != 0)
        return 0;
    return lo <= size && size <= hi;
}

static int ucx_mem_is_cuda(const char *s)
{
    return strncmp(s, "cuda", 4) == 0 && s[4] != '-'; /* not cuda-managed */
}

/* Whether a table header is the operation and memory types asked. */
static int ucx_proto_header_is(const char *h, int get, int lcuda, int rcuda)
{
    const char *p = strstr(h, get ? "ucp_get*" : "ucp_put*");
    if (!p)
        return 0;
    p += 8;
    if (*p == '(' && p[1] == ')')
        p += 2; /* 1.13: no attributes; "(fast-completion)" is another table */
    if (*p != ' ')
        return 0;
    const char *k1 = get ? " into " : " from ", *k2 = get ? " from " : " to ";
    const char *l = strstr(p, k1);
    const char *r = l ? strstr(l + strlen(k1), k2) : NULL;
    return r && ucx_mem_is_cuda(l + strlen(k1)) == lcuda && ucx_mem_is_cuda(r + strlen(k2)) == rcuda;
}

int ucx_proto_info_transport(const char *info, const char *lanes, int get, int lcuda, int rcuda, uint64_t size,
                             char *tl, size_t tlcap, char *desc, size_t dcap)
{
    int in = 0;
    for (const char *l = info; l && *l;) {
        size_t len = strcspn(l, "\n");
        char buf[320];
        size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
        memcpy(buf, l, n);
        buf[n] = 0;
        l += len + (l[len] == '\n');
        char *cell[4];
        int nc = ucx_row_cells(buf, cell, 4);
        if (nc == 2) {
            in = ucx_proto_header_is(cell[1], get, lcuda, rcuda);
            continue;
        }
        if (nc != 3 || !in || !ucx_range_has(cell[0], size))
            continue;
        /* the first "tl/dev" word of the row's configuration */
        char *w = cell[2];
        size_t wn = 0;
        while (*w) {
            wn = strcspn(w, " ");
            if (memchr(w, '/', wn))
                break;
            w += wn;
            while (*w == ' ')
                w++;
            wn = 0;
        }
        size_t tn = wn ? (size_t)((char *)memchr(w, '/', wn) - w) : 0;
        if (tn == 0 || tn > UCX_TL_NAME_MAX || tn >= tlcap)
            continue; /* "no data fetch": nothing moves there */
        char word[UCX_TL_NAME_MAX + 3];
        snprintf(word, sizeof(word), " %.*s ", (int)tn, w);
        if (lanes && *lanes && !strstr(lanes, word)) {
            in = 0; /* another endpoint configuration's table */
            continue;
        }
        memcpy(tl, w, tn);
        tl[tn] = 0;
        snprintf(desc, dcap, "%s", cell[1]);
        return 0;
    }
    return -1;
}

int ucx_proto_v2(void)
{
    const char *e = getenv("UCX_PROTO_ENABLE");
    if (e && *e) {
        static const char *const off[] = {"n", "no", "off", "0", "N", "NO", "OFF", "false"};
        for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
            if (strcmp(e, off[i]) == 0)
                return 0;
        return 1;
    }
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    return major > 1 || (major == 1 && minor >= 16);
}

size_t ucx_ctx_info_resources(const char *info, char *out, size_t cap)
{
    size_t n = 0, count = 0;
    if (cap)
        out[0] = '\0';
    for (const char *line = info; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *next = eol ? eol + 1 : NULL;
        /* "#      resource 1  :  md 1  dev 1  flags -- tcp/lo": the name after "-- " */
        const char *r = memmem(line, len, "resource", 8);
        const char *d = r ? memmem(r, len - (size_t)(r - line), "-- ", 3) : NULL;
        if (d) {
            const char *name = d + 3;
            size_t nl = 0;
            while (name + nl < line + len && name[nl] > ' ' && name[nl] <= '~')
                nl++;
            if (nl && n + nl + 2 <= cap) {
                n += (size_t)snprintf(out + n, cap - n, "%s%.*s", count ? " " : "", (int)nl, name);
                count++;
            }
        }
        line = next;
    }
    return count;
}

/* A resource device that NET_DEVICES selects: not shared memory's or
 * self's ("memory", "memory0"), not a GPU's copy engine. */
static int ucx_net_resource(const char *tl, size_t tl_len, const char *dev, size_t dev_len)
{
    static const char *const local_tl[] = {"self", "sysv", "posix", "cma", "knem", "xpmem", "cuda", "rocm", "gdr", "ze"};
    if (dev_len >= 6 && memcmp(dev, "memory", 6) == 0)
        return 0;
    for (size_t i = 0; i < sizeof(local_tl) / sizeof(local_tl[0]); i++) {
        size_t n = strlen(local_tl[i]);
        if (tl_len >= n && memcmp(tl, local_tl[i], n) == 0)
            return 0;
    }
    return 1;
}

/* Append name to a comma list unless it is there already. */
static void ucx_list_add(char *list, size_t cap, const char *name, size_t len)
{
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n == len && memcmp(p, name, len) == 0)
            return;
        p += n + (p[n] == ',');
    }
    size_t used = strlen(list);
    if (used + len + 2 <= cap)
        snprintf(list + used, cap - used, "%s%.*s", used ? "," : "", (int)len, name);
}

void ucx_devices_match(const char *want, const char *resources, char *found, size_t fcap, char *missing,
                       size_t mcap)
{
    found[0] = missing[0] = '\0';
    for (const char *w = want; *w;) {
        size_t wl = strcspn(w, ",");
        int any = 0;
        /* resources: "tl/dev tl/dev ..." */
        for (const char *r = resources; *r;) {
            size_t rl = strcspn(r, " ");
            const char *slash = memchr(r, '/', rl);
            if (slash) {
                const char *dev = slash + 1;
                size_t dl = rl - (size_t)(dev - r);
                size_t base = strcspn(dev, ":");
                base = base < dl ? base : dl;
                int hit = (dl == wl && memcmp(dev, w, wl) == 0) ||
                          (memchr(w, ':', wl) == NULL && base == wl && memcmp(dev, w, wl) == 0);
                if (hit && ucx_net_resource(r, (size_t)(slash - r), dev, dl)) {
                    ucx_list_add(found, fcap, dev, dl);
                    any = 1;
                }
            }
            r += rl;
            while (*r == ' ')
                r++;
        }
        if (!any)
            ucx_list_add(missing, mcap, w, wl);
        w += wl + (w[wl] == ',');
    }
}

const char *ucx_path_intern(ucx_be_t *be, const char *tl)
{
    char p[48];
    snprintf(p, sizeof(p), "ucx.%s", tl);
    for (unsigned i = 0; i < be->npaths; i++)
        if (strcmp(be->paths[i], p) == 0)
            return be->paths[i];
    if (be->npaths == UCX_PATHS_MAX)
        return "ucx.other";
    snprintf(be->paths[be->npaths], sizeof(be->paths[0]), "%s", p);
    return be->paths[be->npaths++];
}

/* 1 when the transports parameter is set and tl is not in it, with the
 * cause written to cause. */
static int ucx_tl_unwanted(ucx_be_t *be, const char *tl, char *cause, size_t cap)
{
    if (!be->ntransports)
        return 0;
    for (unsigned i = 0; i < be->ntransports; i++)
        if (strcmp(be->transports[i], tl) == 0)
            return 0;
    char list[64] = "";
    size_t n = 0;
    for (unsigned i = 0; i < be->ntransports && n < sizeof(list); i++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i ? "," : "", be->transports[i]);
    snprintf(cause, cap, "UCX chose transport %s, not in transports=%s", tl, list);
    return 1;
}

/* One of a peer's two paths (host memory, GPU memory): "ucx.<tl>", and
 * whether that transport is outside the transports parameter's. */
static void ucx_peer_path_of(ucx_be_t *be, ucx_peer_t *peer, const char *info, int gpu)
{
    char tl[UCX_TL_NAME_MAX + 1] = "unknown";
    if (!info || ucx_ep_info_transport(info, be->proto_v2, gpu, tl, sizeof(tl)) != 0)
        snprintf(tl, sizeof(tl), "unknown");
    peer->path[gpu] = ucx_path_intern(be, tl);
    /* Network transports get their pieces in UCX_CHUNK operations, so a
     * slow link still gives news every MiB (the silence rule, README).  A
     * transport inside the node gets each piece whole: there each
     * operation costs more than its bytes (cuda_ipc: about 6 us of UCX
     * per operation, a MiB copied in under 1 us), and a chunked 256 MiB
     * WRITE between GPU buffers moved 192 GB/s against 1431 whole. */
    peer->chunk[gpu] = ucx_tl_is_local(tl) ? UINT64_MAX : UCX_CHUNK;
    peer->fallback[gpu] = ucx_tl_unwanted(be, tl, peer->cause[gpu], sizeof(peer->cause[gpu]));
}

/* What UCX chose for a GPU request's kind, asked once per kind and
 * endpoint after the first post (UCX selects a protocol at an operation's
 * first use).  The lanes guess a GPU request's path; UCX may still move it
 * otherwise: with cuda_ipc among the lanes, UCX 1.20 on a node without
 * NVLink emulates a READ between GPU buffers, and any WRITE from host
 * memory into GPU memory, with active messages over shared memory, about
 * 1 GB/s where the copy engine gives 9 to 1400 (README, GPU memory).
 * Such a request then names that path, and is a fallback (counted, its
 * cause logged; NIXL_ALLOW_FALLBACK=0 refuses the kind from the next
 * request on) when the endpoint had a GPU lane UCX left unused for it. */
void ucx_peer_learn_locked(ucx_be_t *be, ucx_peer_t *peer, ucx_req_t *r)
{
    const int get = r->op == NIXL_OP_READ;
    ucx_chose_t *c = &peer->chose[get][r->lvram][r->rvram];
    r->learn = 0;
    if (c->known)
        goto give;
    c->known = 1;
    uint64_t size = 0;
    for (size_t i = 0; i < r->count; i++)
        size = r->iov[i].len > size ? r->iov[i].len : size;
    if (r->ix.layer)
        size = r->ix.item_len > size ? r->ix.item_len : size;
    size = size < r->chunk ? size : r->chunk;
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f)
        return;
    ucp_worker_print_info(be->worker, f);
    fclose(f);
    char tl[UCX_TL_NAME_MAX + 1], desc[64];
    int rc = ucx_proto_info_transport(text, peer->lanes, get, r->lvram, r->rvram, size, tl, sizeof(tl), desc,
                                      sizeof(desc));
    free(text);
    const char *what = get ? "READ into" : "WRITE from";
    const char *lm = r->lvram ? "GPU" : "host", *rm = r->rvram ? "GPU" : "host";
    if (rc != 0) {
        UCX_DEBUG(be, "ucx: peer %s: %s %s memory, %s memory there: UCX's protocol table says nothing, path %s",
                  peer->name, what, lm, rm, r->hdr.path);
        return;
    }
    c->path = ucx_path_intern(be, tl);
    const char *gl = peer->path[1] && strncmp(peer->path[1], "ucx.", 4) == 0 ? peer->path[1] + 4 : "";
    if (strstr(desc, "emulation") && ucx_tl_is_gpu(gl) && !ucx_tl_is_gpu(tl)) {
        c->fallback = 1;
        snprintf(c->cause, sizeof(c->cause), "UCX moves it by %.40s over %.24s, not on its GPU lane %.24s", desc, tl,
                 gl);
    } else {
        c->fallback = ucx_tl_unwanted(be, tl, c->cause, sizeof(c->cause));
    }
    UCX_INFO(be, "ucx: peer %s: %s %s memory, %s memory there (pieces of %llu bytes): UCX chose %s on %s, path %s%s",
             peer->name, what, lm, rm, (unsigned long long)size, desc, tl, c->path, c->fallback ? " (fallback)" : "");
give:
    if (!c->path)
        return;
    if (c->fallback && !r->hdr.fallback) /* its post counted it as no fallback */
        be->host->fallback(be->host->ctx, c->path, c->cause);
    ucx_req_chosen(r, c);
}

static void ucx_peer_path(ucx_be_t *be, ucx_peer_t *peer)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (f) {
        ucp_ep_print_info(peer->ep, f);
        fclose(f);
    }
    ucx_peer_path_of(be, peer, text, 0);
    ucx_peer_path_of(be, peer, text, 1);
    ucx_ep_info_lanes(text, peer->lanes, sizeof(peer->lanes));
    memset(peer->chose, 0, sizeof(peer->chose)); /* a new endpoint: UCX chooses again */
    /* UCX's own lines, for whoever asks why this path (NIXL_LOG_LEVEL=debug). */
    for (const char *l = text; l && *l && be->host->log_enabled(NIXL_LOG_DEBUG);) {
        size_t n = strcspn(l, "\n");
        const char *lane = memmem(l, n, "lane[", 5);
        if (lane)
            UCX_DEBUG(be, "ucx: peer %s: %.*s", peer->name, (int)(n - (size_t)(lane - l)), lane);
        l += n + (l[n] == '\n');
    }
    free(text);
    UCX_DEBUG(be, "ucx: peer %s: endpoint uses %s%s for host memory, %s%s for GPU memory", peer->name, peer->path[0],
              peer->fallback[0] ? " (fallback)" : "", peer->path[1], peer->fallback[1] ? " (fallback)" : "");
}

/* ---- peers ---- */

static void ucx_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_peer_t *peer = arg;
    /* Runs inside ucp_worker_progress, be->lock held.  The endpoint is
     * closed after progress returns (ucx_peers_reap_locked).  One closed
     * already (peer->ep NULL or a renewed one) is news of nothing: UCX
     * reports a closed endpoint's keepalive timeout seconds later, which
     * must not fail the new one. */
    if (ep != peer->ep)
        return;
    if (!peer->gone) {
        peer->gone = 1;
        peer->gone_status = status;
    }
    peer->close_owed = 1;
}

static void ucx_ep_close_locked(ucx_be_t *be, ucx_peer_t *peer, int force, uint64_t wait_ms)
{
    if (!peer->ep)
        return;
    for (ucx_rmd_t *rm = peer->rmds; rm; rm = rm->next) /* before their endpoint (ucp_rkey_destroy) */
        if (rm->rkey) {
            ucp_rkey_destroy(rm->rkey);
            rm->rkey = NULL;
        }
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    void *req = ucp_ep_close_nbx(peer->ep, &rp);
    peer->ep = NULL;
    if (!UCS_PTR_IS_PTR(req))
        return;
    uint64_t deadline = nixl_now_ns() + wait_ms * 1000000ull;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && nixl_now_ns() < deadline)
        ucp_worker_progress(be->worker);
    ucp_request_free(req);
}

void ucx_peer_fail_locked(ucx_be_t *be, ucx_peer_t *peer, const char *why)
{
    if (!peer->gone) {
        peer->gone = 1;
        peer->gone_status = UCS_ERR_CONNECTION_RESET;
    }
    if (!peer->gone_logged) {
        /* An error for the requests it fails; a peer that went away with
         * nothing in flight (its agent was destroyed first) is news only. */
        peer->gone_logged = 1;
        NIXL_BE_LOG(be->host, peer->nreqs ? NIXL_LOG_ERROR : NIXL_LOG_INFO, "ucx: peer %s is gone: %s%s",
                    peer->name, why, peer->nreqs ? "" : " (no request in flight)");
    }
    peer->close_owed = 0;
    ucx_ep_close_locked(be, peer, 1, 100);
}

/* The silence rule, at most once a millisecond: UCX over tcp reports
 * neither a link that went down nor a peer that stopped answering while
 * data is unacknowledged (TCP retransmits for minutes; UCX's keepalive
 * waits behind the data), so a request would hang.  A peer with requests
 * in flight from which no operation of ours completed and no message came
 * for peer_timeout_ms, counted from the later of that and its first
 * request in flight, is gone. */
static void ucx_silence_check_locked(ucx_be_t *be, uint64_t now)
{
    if (now - be->silence_checked_ns < 1000000ull)
        return;
    be->silence_checked_ns = now;
    for (ucx_peer_t *p = be->peers; p; p = p->next) {
        if (p->activity != p->activity_seen) {
            p->activity_seen = p->activity;
            p->heard_ns = now;
        }
        if (!p->nreqs || p->gone || !p->ep)
            continue;
        uint64_t since = p->heard_ns > p->busy_since_ns ? p->heard_ns : p->busy_since_ns;
        if (now - since > be->peer_timeout_ns) {
            char why[192];
            snprintf(why, sizeof(why), "nothing completed for %llu ms with %u request(s) in flight (link down, or "
                     "the peer stopped progressing; peer_timeout_ms)", (unsigned long long)((now - since) / 1000000ull),
                     p->nreqs);
            ucx_peer_stalled_locked(be, p, why);
        }
    }
}

void ucx_peer_stalled_locked(ucx_be_t *be, ucx_peer_t *peer, const char *why)
{
    int known = peer->gone; /* UCX's own verdict (final), or stalled already */
    char text[320];
    if (known)
        snprintf(text, sizeof(text), "%s", why);
    else
        snprintf(text, sizeof(text), "%s; tried again on a new endpoint %llu ms after this, once its TCP "
                 "connections have nothing unacknowledged", why, (unsigned long long)(2 * be->peer_timeout_ns / 1000000ull));
    ucx_peer_fail_locked(be, peer, text);
    if (!known) {
        peer->silent = 1; /* tried again later (ucx_peer_check_locked) */
        peer->gone_ns = nixl_now_ns();
        unsigned n = ucx_tcpold_mark(peer);
        UCX_DEBUG(be, "ucx: peer %s: %u TCP connection(s) with bytes unacknowledged to wait for", peer->name, n);
    }
}

void ucx_peers_reap_locked(ucx_be_t *be, uint64_t now)
{
    for (ucx_peer_t *p = be->peers; p; p = p->next) {
        if (!p->close_owed)
            continue;
        char why[96];
        snprintf(why, sizeof(why), "UCX reported %s", ucs_status_string(p->gone_status));
        ucx_peer_fail_locked(be, p, why);
    }
    if (be->peer_timeout_ns)
        ucx_silence_check_locked(be, now);
}

static ucs_status_t ucx_ep_open_locked(ucx_be_t *be, ucx_peer_t *peer)
{
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = peer->addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ucx_ep_error, .arg = peer},
    };
    ucs_status_t us = ucp_ep_create(be->worker, &ep, &peer->ep);
    if (us == UCS_OK)
        ucx_peer_path(be, peer);
    else
        peer->ep = NULL;
    return us;
}

/* A peer gone for silence alone, nothing of it in flight any more, at
 * least twice peer_timeout_ms ago: a new endpoint from its address (a 3 s
 * blackout is not the end of a peer).  Its requests' keys are unpacked
 * again at their next post (ucx_rmd_fresh_locked).  A peer that is really
 * gone fails this one the same way, after another timeout. */
static void ucx_peer_renew_locked(ucx_be_t *be, ucx_peer_t *peer)
{
    uint64_t now = nixl_now_ns();
    if (!peer->silent || peer->nreqs || peer->ep || now - peer->gone_ns < 2 * be->peer_timeout_ns)
        return;
    if (peer->nold) { /* its old connections first (ucx_tcpold.c); /proc looked at every 10 ms at most */
        if (now - peer->old_checked_ns < 10000000ull)
            return;
        peer->old_checked_ns = now;
        unsigned busy = ucx_tcpold_busy(peer);
        if (busy) {
            UCX_DEBUG(be, "ucx: peer %s: %u TCP connection(s) still with bytes unacknowledged: not yet",
                      peer->name, busy);
            return;
        }
    }
    ucs_status_t us = ucx_ep_open_locked(be, peer);
    if (us != UCS_OK) {
        peer->gone_ns = now;
        UCX_INFO(be, "ucx: peer %s: no new endpoint: %s", peer->name, ucs_status_string(us));
        return;
    }
    peer->gen++;
    peer->gone = 0;
    peer->gone_logged = 0;
    peer->close_owed = 0;
    peer->silent = 0;
    peer->heard_ns = now;
    UCX_INFO(be, "ucx: peer %s: trying again after its silence, on a new endpoint (%s)", peer->name, peer->path[0]);
}

ucs_status_t ucx_rmd_fresh_locked(ucx_be_t *be, ucx_rmd_t *rm)
{
    ucx_peer_t *peer = rm->peer;
    if (!rm->packed || (rm->gen == peer->gen && rm->rkey))
        return UCS_OK;
    if (!peer->ep)
        return UCS_ERR_NOT_CONNECTED;
    ucp_rkey_h k;
    ucs_status_t us = ucp_ep_rkey_unpack(peer->ep, rm->packed, &k);
    if (us != UCS_OK) {
        UCX_ERROR(be, "ucx: key of a region of peer %s on its new endpoint: ucp_ep_rkey_unpack: %s", peer->name,
                  ucs_status_string(us));
        return us;
    }
    if (rm->rkey)
        ucp_rkey_destroy(rm->rkey);
    rm->rkey = k;
    rm->gen = peer->gen;
    return UCS_OK;
}

nixl_status_t ucx_peer_check_locked(ucx_be_t *be, ucx_peer_t *peer)
{
    if (nixl_unlikely(peer->close_owed))
        ucx_peers_reap_locked(be, nixl_now_ns());
    if (nixl_unlikely(peer->gone) && peer->silent)
        ucx_peer_renew_locked(be, peer);
    if (nixl_unlikely(peer->gone))
        return NIXL_ERR_PEER_GONE;
    if (peer->have_proc && samehost_proc_alive(be->host, "ucx", &peer->proc, 0) != NIXL_OK) {
        ucx_peer_fail_locked(be, peer, "its process exited");
        return NIXL_ERR_PEER_GONE;
    }
    return NIXL_OK;
}

nixl_status_t ucx_peer_open(void *bev, const nixl_be_peer_t *who, const void *conn, size_t conn_len,
                            void **peer_out)
{
    ucx_be_t *be = bev;
    if (!who || !peer_out)
        return NIXL_ERR_NULL;
    const uint8_t *addr;
    size_t alen;
    const char *why = "";
    nixl_status_t st = ucx_conn_parse(conn, conn_len, &addr, &alen, &why);
    if (st != NIXL_OK) {
        UCX_ERROR(be, "ucx: conn info of peer %s refused: %s", who->name ? who->name : "?", why);
        return st;
    }
    ucx_peer_t *peer = calloc(1, sizeof(*peer));
    if (!peer)
        return NIXL_ERR_NO_MEMORY;
    peer->be = be;
    snprintf(peer->name, sizeof(peer->name), "%s", who->name ? who->name : "?");
    if (who->same_pidns && who->pid && !who->same_process) {
        st = samehost_proc_open(be->host, "ucx", peer->name, (pid_t)who->pid, who->start_time, &peer->proc);
        if (st == NIXL_ERR_PEER_GONE) {
            free(peer);
            return st;
        }
        peer->have_proc = st == NIXL_OK;
    }
    /* UCX copies what it needs of the address during ep creation; an
     * aligned copy of ours is passed, not a pointer into the blob. */
    void *acopy = malloc(alen);
    if (!acopy) {
        st = NIXL_ERR_NO_MEMORY;
        goto err_proc;
    }
    memcpy(acopy, addr, alen);
    peer->addr = acopy; /* kept: a renewal makes a new endpoint from it */
    peer->addr_len = alen;
    ucx_lock(be);
    ucs_status_t us = ucx_ep_open_locked(be, peer);
    if (us != UCS_OK) {
        ucx_unlock(be);
        UCX_ERROR(be, "ucx: no endpoint to peer %s: ucp_ep_create: %s (UCX_TLS=%s)", peer->name,
                  ucs_status_string(us), getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
        st = us == UCS_ERR_UNREACHABLE ? NIXL_ERR_NO_PATH : NIXL_ERR_BACKEND;
        free(peer->addr);
        goto err_proc;
    }
    peer->next = be->peers;
    be->peers = peer;
    ucx_unlock(be);
    *peer_out = peer;
    return NIXL_OK;

err_proc:
    if (peer->have_proc)
        samehost_proc_close(&peer->proc);
    free(peer);
    return st;
}

void ucx_peer_unload(void *bev, void *peerv)
{
    ucx_be_t *be = bev;
    ucx_peer_t *peer = peerv;
    if (!peer)
        return;
    ucx_lock(be);
    for (ucx_peer_t **pp = &be->peers; *pp; pp = &(*pp)->next)
        if (*pp == peer) {
            *pp = peer->next;
            break;
        }
    /* A live peer gets what we sent it (flush), bounded; a gone one is
     * closed at once. */
    ucx_ep_close_locked(be, peer, peer->gone, be->release_wait_ms);
    for (ucx_rmd_t *rm = peer->rmds, *next; rm; rm = next) { /* keys the core still holds */
        next = rm->next;
        rm->peer = NULL;
        rm->prev = rm->next = NULL;
    }
    peer->rmds = NULL;
    ucx_unlock(be);
    if (peer->have_proc)
        samehost_proc_close(&peer->proc);
    free(peer->addr);
    free(peer);
}

/* Wire the endpoint up now: a flush completes once UCX connected its lanes
 * and the peer answered, so the first request pays nothing of it.  Bounded
 * by release_wait_ms. */
nixl_status_t ucx_peer_connect(void *bev, void *peerv)
{
    ucx_be_t *be = bev;
    ucx_peer_t *peer = peerv;
    ucx_lock(be);
    nixl_status_t st = ucx_peer_check_locked(be, peer);
    if (st != NIXL_OK || !peer->ep) {
        ucx_unlock(be);
        return NIXL_ERR_PEER_GONE;
    }
    ucp_request_param_t rp = {.op_attr_mask = 0};
    void *req = ucp_ep_flush_nbx(peer->ep, &rp);
    ucs_status_t us = UCS_OK;
    if (UCS_PTR_IS_ERR(req)) {
        us = UCS_PTR_STATUS(req);
    } else if (req) {
        uint64_t deadline = nixl_now_ns() + be->release_wait_ms * 1000000ull;
        while ((us = ucp_request_check_status(req)) == UCS_INPROGRESS && nixl_now_ns() < deadline)
            ucp_worker_progress(be->worker);
        ucp_request_free(req);
    }
    ucx_peers_reap_locked(be, nixl_now_ns());
    if (peer->gone)
        st = NIXL_ERR_PEER_GONE;
    else if (us == UCS_INPROGRESS)
        st = NIXL_ERR_TIMEOUT;
    else
        st = ucx_status_of(us);
    ucx_unlock(be);
    if (st != NIXL_OK)
        UCX_ERROR(be, "ucx: connecting to peer %s: %s", peer->name,
                  us == UCS_INPROGRESS ? "no answer within release_wait_ms" : ucs_status_string(us));
    return st;
}

/* 0 once the peer is known gone.  1 only where there is something to judge
 * by, a pidfd on its process; an endpoint alone proves nothing (UCX keeps
 * alive only endpoints it wired up, and says nothing of when it last heard
 * the peer), so otherwise -1: the core must not refuse a restarted peer's
 * new instance on our word. */
int ucx_peer_alive(void *bev, void *peerv)
{
    ucx_be_t *be = bev;
    ucx_peer_t *peer = peerv;
    ucx_lock(be);
    int r = peer->gone ? 0 : -1;
    if (r < 0 && peer->have_proc)
        r = samehost_proc_alive(be->host, "ucx", &peer->proc, 1) == NIXL_OK ? 1 : 0;
    ucx_unlock(be);
    return r;
}

/* ---- notifications ---- */

static void ucx_notif_own_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_req_t *r = user_data;
    /* The request may be done already (its data landed before the send
     * was handed over): a failed send is logged, not reported. */
    if (status != UCS_OK)
        UCX_ERROR(r->be, "ucx: the notification of a request to %s failed: %s", r->peer->name,
                  ucs_status_string(status));
    r->am_req = NULL;
    ucp_request_free(request);
}

static void ucx_notif_copy_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    free(user_data);
    ucp_request_free(request);
}

/* owner NULL: a standalone notification, whose bytes are copied; else the
 * request's, whose buffer lives until the request is released (release
 * waits for the send). */
nixl_status_t ucx_notif_post_locked(ucx_be_t *be, ucx_peer_t *peer, const void *msg, size_t len, ucx_req_t *owner)
{
    void *copy = NULL;
    if (!owner && len) {
        copy = malloc(len);
        if (!copy)
            return NIXL_ERR_NO_MEMORY;
        memcpy(copy, msg, len);
        msg = copy;
    }
    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_EAGER,
        .cb.send = owner ? ucx_notif_own_done : ucx_notif_copy_done,
        .user_data = owner ? (void *)owner : copy,
    };
    const char *name = be->host->agent_name;
    void *req = ucp_am_send_nbx(peer->ep, UCX_AM_NOTIF, name, strlen(name), msg, len, &rp);
    if (UCS_PTR_IS_ERR(req)) {
        free(copy);
        UCX_ERROR(be, "ucx: notification to %s: ucp_am_send_nbx: %s", peer->name,
                  ucs_status_string(UCS_PTR_STATUS(req)));
        return peer->gone ? NIXL_ERR_PEER_GONE : ucx_status_of(UCS_PTR_STATUS(req));
    }
    if (!req) {
        free(copy);
        return NIXL_OK;
    }
    if (owner)
        owner->am_req = req;
    return NIXL_OK;
}

nixl_status_t ucx_notif_send(void *bev, void *peerv, const void *msg, size_t len)
{
    ucx_be_t *be = bev;
    ucx_peer_t *peer = peerv;
    ucx_lock(be);
    nixl_status_t st = ucx_peer_check_locked(be, peer);
    if (st == NIXL_OK)
        st = ucx_notif_post_locked(be, peer, msg, len, NULL);
    if (st == NIXL_OK)
        ucx_progress_locked(be);
    ucx_unlock(be);
    return st;
}

ucs_status_t ucx_am_recv(void *arg, const void *header, size_t header_length, void *data, size_t length,
                         const ucp_am_recv_param_t *param)
{
    ucx_be_t *be = arg;
    /* Eager data (UCP_AM_RECV_ATTR_FLAG_DATA or not) is valid for the
     * callback's duration: notif_deliver copies it. */
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        /* Sent eagerly by our peers: a rendezvous message is not ours. */
        UCX_WARN(be, "ucx: a notification arrived by rendezvous: dropped");
        return UCS_OK;
    }
    char name[UCX_NAME_MAX + 1];
    if (header_length == 0 || header_length > UCX_NAME_MAX || memchr(header, 0, header_length)) {
        UCX_WARN(be, "ucx: a notification with a bad sender name (%zu bytes): dropped", header_length);
        return UCS_OK;
    }
    memcpy(name, header, header_length);
    name[header_length] = 0;
    for (ucx_peer_t *p = be->peers; p; p = p->next) /* news from it (the silence rule) */
        if (strcmp(p->name, name) == 0)
            p->activity++;
    be->host->notif_deliver(be->host->ctx, name, data, length);
    return UCS_OK;
}
