/*
 * lf_conn.c - who we are to peers, who they are to us, and whether they
 * are still there.
 *
 * The conn info in our metadata names the provider, a random instance id
 * and one endpoint name per rail.  A remote instance is one lf_conn_t,
 * shared by every generation of its metadata we load and by the HELLO it
 * may send us before we ever load it.  Nothing touches the network at load
 * time: the first request or notification sends HELLO (our conn info, our
 * name, our index for the peer); the answer carries the peer's index for us,
 * which we stamp on everything we send it so it finds the connection in one
 * step (and on the remote CQ data of our writes).
 *
 * Liveness is ours: providers such as tcp never report a peer that died or
 * a link that went down.  Each side sends a heartbeat when it has sent
 * nothing for heartbeat_ms; a peer silent for peer_timeout_ms is dead and
 * every request on it fails (PEER_GONE; TIMEOUT when the handshake itself
 * was never answered).  BYE at destroy makes it immediate.  An unanswered
 * handshake proves nothing about the process (a link outage, packet loss):
 * the next request or notification shakes hands again.  Neither does
 * silence alone: a peer declared dead for it is refused at once for twice
 * the peer timeout, then the next use shakes hands again.  A peer that
 * said BYE, or whose connection the provider reported broken, stays
 * refused (until its metadata is loaded again).
 *
 * Every peer rail is in every local rail's address vector, so any rail of
 * ours reaches any rail of theirs: a region registered on our rail 0 can
 * be written into a region the peer registered on its rail 5 (lf_xfer.c
 * picks the pairs).
 *
 * Same-host peers: who a peer is comes from the core (nixl_be_peer_t), and
 * whether libfabric is given a peer on this host is the core's choice
 * (NIXL_INTRANODE_NETWORK; it ranks shm and cuda_ipc first).  intranode
 * says only how such a peer is carried (the provider's own path or the
 * NIC).
 *
 * Conn info (little-endian): u32 magic "LFC1", u16 version (3), u8 rails,
 * u8 provider-name length, u64 instance, u32 address format, u32 flags
 * (0), provider name, then per rail u16 length and the endpoint name.
 * (Version 2 carried the host identity too; it travels once now, in the
 * agent section of the metadata.)
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lf_int.h"

#define LF_CONN_MAGIC 0x3143464cu /* "LFC1" */
#define LF_CONN_VERSION 3

size_t lf_conn_info_size(const lf_be_t *be)
{
    size_t n = LF_CONN_FIXED + strlen(be->prov_name);
    for (unsigned i = 0; i < be->nrails; i++)
        n += 2 + be->rails[i].addr_len;
    return n;
}

void lf_conn_info_write(const lf_be_t *be, uint8_t *p)
{
    size_t plen = strlen(be->prov_name);
    nixl_put_u32(p, LF_CONN_MAGIC);
    nixl_put_u16(p + 4, LF_CONN_VERSION);
    p[6] = (uint8_t)be->nrails;
    p[7] = (uint8_t)plen;
    nixl_put_u64(p + 8, be->inst);
    nixl_put_u32(p + 16, be->addr_format);
    nixl_put_u32(p + 20, 0);
    memcpy(p + LF_CONN_FIXED, be->prov_name, plen);
    p += LF_CONN_FIXED + plen;
    for (unsigned i = 0; i < be->nrails; i++) {
        nixl_put_u16(p, (uint16_t)be->rails[i].addr_len);
        memcpy(p + 2, be->rails[i].addr, be->rails[i].addr_len);
        p += 2 + be->rails[i].addr_len;
    }
}

nixl_status_t lf_conn_pack(void *bev, void *buf, size_t *len)
{
    lf_be_t *be = bev;
    if (!len)
        return NIXL_ERR_NULL;
    size_t need = lf_conn_info_size(be);
    if (!buf || *len < need) {
        *len = need;
        return buf ? NIXL_ERR_TOO_BIG : NIXL_OK;
    }
    lf_conn_info_write(be, buf);
    *len = need;
    return NIXL_OK;
}

nixl_status_t lf_conn_parse(const void *buf, size_t len, lf_conn_info_t *out)
{
    const uint8_t *p = buf;
    if (!p || len < LF_CONN_FIXED || nixl_get_u32(p) != LF_CONN_MAGIC)
        return NIXL_ERR_BAD_METADATA;
    if (nixl_get_u16(p + 4) != LF_CONN_VERSION)
        return NIXL_ERR_MD_VERSION;
    unsigned nrails = p[6], plen = p[7];
    if (nrails == 0 || nrails > LF_MAX_RAILS || plen == 0 || plen > LF_PROV_MAX || nixl_get_u32(p + 20) != 0)
        return NIXL_ERR_BAD_METADATA;
    uint64_t inst = nixl_get_u64(p + 8);
    if (inst == 0 || len < LF_CONN_FIXED + plen)
        return NIXL_ERR_BAD_METADATA;
    for (unsigned i = 0; i < plen; i++) {
        uint8_t ch = p[LF_CONN_FIXED + i];
        if (!(isalnum(ch) || ch == ';' || ch == '_' || ch == '-'))
            return NIXL_ERR_BAD_METADATA;
    }
    lf_conn_info_t info;
    memset(&info, 0, sizeof(info));
    info.inst = inst;
    info.addr_format = nixl_get_u32(p + 16);
    memcpy(info.prov, p + LF_CONN_FIXED, plen);
    info.prov[plen] = 0;
    info.nrails = nrails;
    size_t off = LF_CONN_FIXED + plen;
    for (unsigned i = 0; i < nrails; i++) {
        if (len - off < 2)
            return NIXL_ERR_BAD_METADATA;
        uint16_t alen = nixl_get_u16(p + off);
        if (alen == 0 || alen > LF_ADDR_MAX || len - off - 2 < alen)
            return NIXL_ERR_BAD_METADATA;
        info.alen[i] = alen;
        info.addr[i] = p + off + 2;
        off += 2 + (size_t)alen;
    }
    if (off != len)
        return NIXL_ERR_BAD_METADATA;
    *out = info;
    return NIXL_OK;
}

static lf_conn_t *lf_conn_find(lf_be_t *be, uint64_t inst)
{
    for (size_t i = 0; i < be->nconns; i++)
        if (be->conns[i] && be->conns[i]->inst == inst)
            return be->conns[i];
    return NULL;
}

nixl_status_t lf_conn_get(lf_be_t *be, const lf_conn_info_t *info, lf_conn_t **out)
{
    lf_conn_t *c = lf_conn_find(be, info->inst);
    if (c) {
        *out = c;
        return NIXL_OK;
    }
    if (be->nconns >= UINT32_MAX - 1)
        return NIXL_ERR_TOO_BIG;
    if (be->nconns == be->cconns) {
        size_t cap = be->cconns ? 2 * be->cconns : 16;
        lf_conn_t **v = realloc(be->conns, cap * sizeof(*v));
        if (!v)
            return NIXL_ERR_NO_MEMORY;
        be->conns = v;
        be->cconns = cap;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return NIXL_ERR_NO_MEMORY;
    c->idx = (uint32_t)be->nconns;
    c->inst = info->inst;
    c->state = LF_CONN_IDLE;
    c->rnrails = info->nrails;
    for (unsigned i = 0; i < info->nrails; i++) {
        memcpy(c->raddr[i], info->addr[i], info->alen[i]);
        c->ralen[i] = info->alen[i];
    }
    c->since_ns = nixl_now_ns();
    be->conns[be->nconns++] = c;
    *out = c;
    return NIXL_OK;
}

/* Same provider and address format, or the peer is out of our reach. */
static nixl_status_t lf_conn_reachable(lf_be_t *be, const lf_conn_info_t *info, const nixl_be_peer_t *peer)
{
    const char *who = peer->name;
    if (strcmp(info->prov, be->prov_name) != 0 || info->addr_format != be->addr_format) {
        LF_INFO(be, "libfabric: peer %s runs provider %s (address format %u), we run %s (%u): not reachable", who,
                info->prov, info->addr_format, be->prov_name, be->addr_format);
        return NIXL_ERR_NO_PATH;
    }
    if (info->inst == be->inst) {
        /* The agent itself (the core's loopback, every storage request)
         * is no peer of ours: said quietly.  Another process carrying our
         * instance id is a forged or corrupt blob. */
        if (peer->same_process)
            LF_DEBUG(be, "libfabric: %s is this instance: not reachable through itself", who);
        else
            LF_ERROR(be, "libfabric: peer %s carries our own instance id", who);
        return NIXL_ERR_SELF;
    }
    return NIXL_OK;
}

nixl_status_t lf_peer_open(void *bev, const nixl_be_peer_t *peer, const void *conn, size_t conn_len, void **peer_out)
{
    lf_be_t *be = bev;
    if (!peer_out || !peer)
        return NIXL_ERR_NULL;
    const char *who = peer->name, *peer_name = peer->name;
    lf_conn_info_t info;
    nixl_status_t st = lf_conn_parse(conn, conn_len, &info);
    if (st != NIXL_OK) {
        LF_ERROR(be, "libfabric: conn info of peer %s (%zu bytes) is %s", who, conn_len,
                 st == NIXL_ERR_MD_VERSION ? "of a version we do not speak" : "malformed");
        return st;
    }
    st = lf_conn_reachable(be, &info, peer);
    if (st != NIXL_OK)
        return st;
    if (peer->same_host && peer->same_netns)
        LF_DEBUG(be, "libfabric: peer %s is on this host: reached through %s (intranode=%s)", who,
                 be->intranode == LF_INTRANODE_NIC ? "the NIC" : "the provider",
                 be->intranode == LF_INTRANODE_NIC ? "nic" : "provider");
    pthread_mutex_lock(&be->lock);
    lf_conn_t *c;
    st = lf_conn_get(be, &info, &c);
    if (st == NIXL_OK) {
        c->refs++;
        if (!c->name[0] && peer_name)
            snprintf(c->name, sizeof(c->name), "%s", peer_name);
        if (c->state == LF_CONN_DOWN && c->down_status != NIXL_ERR_NO_PATH) {
            /* Loaded again after it was declared dead (maybe wrongly):
             * the next use tries a fresh handshake. */
            LF_INFO(be, "libfabric: peer %s loaded again: its connection will be tried anew", who);
            c->state = LF_CONN_IDLE;
            c->have_ridx = 0;
            c->since_ns = nixl_now_ns();
        }
        *peer_out = c;
    }
    pthread_mutex_unlock(&be->lock);
    return st;
}

/* nixl_md_connect: the handshake the first request would make, now.  The
 * lock is dropped between looks so the progress thread (or our own calls
 * to progress, without one) can take the answer; the core holds the
 * peer, so c stays.  A handshake unanswered is declared down (TIMEOUT)
 * after peer_timeout_ms by the usual tick; we wait a little past that. */
nixl_status_t lf_peer_connect(void *bev, void *peer)
{
    lf_be_t *be = bev;
    lf_conn_t *c = peer;
    if (!c)
        return NIXL_ERR_NULL;
    uint64_t deadline = nixl_now_ns() + 2 * be->timeout_ns + 100000000ull;
    pthread_mutex_lock(&be->lock);
    nixl_status_t st = lf_conn_use(be, c);
    while (st == NIXL_OK && c->state != LF_CONN_UP) {
        if (c->state == LF_CONN_DOWN) {
            st = c->down_status;
            break;
        }
        if (nixl_now_ns() > deadline) {
            st = NIXL_ERR_TIMEOUT;
            break;
        }
        lf_progress_op_locked(be);
        pthread_mutex_unlock(&be->lock);
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&be->lock);
    }
    pthread_mutex_unlock(&be->lock);
    if (st == NIXL_OK)
        LF_DEBUG(be, "libfabric: %s: connected to %s ahead of its first request", be->agent_name, c->name);
    else
        LF_ERROR(be, "libfabric: %s: connecting to %s: %s", be->agent_name, c->name[0] ? c->name : "?",
                 st == NIXL_ERR_TIMEOUT ? "no answer to the handshake within the peer timeout"
                                        : "the connection is down");
    return st;
}

/* The core's question before it lets another instance take this peer's
 * name (peer_alive): heard from within three heartbeats (a live peer's
 * progress sends one whenever it has sent us nothing for heartbeat_ms),
 * so a crashed process stops counting as alive well before the peer
 * timeout, and one that said goodbye at once. */
int lf_peer_alive(void *bev, void *peer)
{
    lf_be_t *be = bev;
    lf_conn_t *c = peer;
    if (!c)
        return -1;
    uint64_t win = 3 * be->hb_ns < be->timeout_ns ? 3 * be->hb_ns : be->timeout_ns;
    pthread_mutex_lock(&be->lock);
    int v = -1;
    if (c->state == LF_CONN_DOWN && (c->closed || c->down_status == NIXL_ERR_PEER_GONE))
        v = 0;
    else if (c->state == LF_CONN_UP && c->closed)
        v = 0;
    else if (c->state == LF_CONN_UP && nixl_now_ns() - c->last_rx_ns < win)
        v = 1;
    pthread_mutex_unlock(&be->lock);
    return v;
}

static void lf_conn_free(lf_conn_t *c)
{
    lf_conn_rx_reset(c);
    free(c->fa);
    free(c->tags);
    free(c);
}

void lf_peer_unload(void *bev, void *peer)
{
    lf_be_t *be = bev;
    lf_conn_t *c = peer;
    if (!c)
        return;
    pthread_mutex_lock(&be->lock);
    if (c->refs)
        c->refs--;
    /* A connection never used (a blob loaded and dropped) goes now; one
     * that talked stays until destroy: late messages may still name it. */
    if (c->refs == 0 && !c->used && c->state == LF_CONN_IDLE) {
        be->conns[c->idx] = NULL;
        lf_conn_free(c);
    }
    pthread_mutex_unlock(&be->lock);
}

static void lf_conn_av_remove(lf_be_t *be, lf_conn_t *c, unsigned rails)
{
    for (unsigned r = 0; r < rails; r++)
        fi_av_remove(be->rails[r].av, c->fa + (size_t)r * c->rnrails, c->rnrails, 0);
}

/* Every rail of the peer into every rail's address vector: a region on
 * any rail of ours can reach one on any rail of theirs. */
static nixl_status_t lf_conn_av(lf_be_t *be, lf_conn_t *c)
{
    if (c->av_done)
        return NIXL_OK;
    if (!c->fa) {
        c->fa = calloc((size_t)be->nrails * c->rnrails, sizeof(*c->fa));
        if (!c->fa)
            return NIXL_ERR_NO_MEMORY;
    }
    for (unsigned r = 0; r < be->nrails; r++) {
        for (unsigned j = 0; j < c->rnrails; j++) {
            fi_addr_t *fa = c->fa + (size_t)r * c->rnrails + j;
            int ret = fi_av_insert(be->rails[r].av, c->raddr[j], 1, fa, 0, NULL);
            if (ret == 1)
                continue;
            LF_ERROR(be, "libfabric: peer %s: its rail %u address is not usable on our rail %u (%s)",
                     c->name[0] ? c->name : "?", j, r, ret < 0 ? fi_strerror(-ret) : "refused");
            if (j)
                fi_av_remove(be->rails[r].av, c->fa + (size_t)r * c->rnrails, j, 0);
            lf_conn_av_remove(be, c, r);
            return NIXL_ERR_NO_PATH;
        }
    }
    c->av_done = 1;
    return NIXL_OK;
}

static void lf_queue_hello(lf_be_t *be, lf_conn_t *c, uint8_t type)
{
    size_t clen = type == LF_MSG_HELLO ? lf_conn_info_size(be) : 0;
    size_t body = type == LF_MSG_HELLO ? LF_HELLO_BODY + be->agent_name_len + clen : LF_ACK_BODY;
    lf_cmsg_t *m = lf_cmsg_new(c, type, body);
    if (!m) {
        LF_ERROR(be, "libfabric: out of memory for a handshake message to %s", c->name[0] ? c->name : "?");
        return;
    }
    uint8_t *b = m->data + LF_HDR_SIZE;
    if (type == LF_MSG_HELLO) {
        nixl_put_u16(b, (uint16_t)be->agent_name_len);
        nixl_put_u16(b + 2, 0);
        nixl_put_u32(b + 4, (uint32_t)clen);
        nixl_put_u64(b + 8, c->next_seq);
        memcpy(b + LF_HELLO_BODY, be->agent_name, be->agent_name_len);
        lf_conn_info_write(be, b + LF_HELLO_BODY + be->agent_name_len);
    } else {
        nixl_put_u64(b, c->next_seq);
    }
    lf_txq_push(be, m);
}

/* One INFO line per connection per second at most: a caller retrying in
 * a loop against an unreachable peer must not flood the log. */
static void lf_conn_retry_log(lf_be_t *be, lf_conn_t *c)
{
    uint64_t now = nixl_now_ns();
    c->retries++;
    if (c->retry_log_ns && now - c->retry_log_ns < 1000000000ull) {
        c->retry_quiet++;
        return;
    }
    LF_INFO(be, "libfabric: %s: peer %s did not answer the handshake: trying again (retry %llu, %llu not logged)",
            be->agent_name, c->name[0] ? c->name : "?", (unsigned long long)c->retries,
            (unsigned long long)c->retry_quiet);
    c->retry_log_ns = now;
    c->retry_quiet = 0;
}

nixl_status_t lf_conn_use(lf_be_t *be, lf_conn_t *c)
{
    switch (c->state) {
    case LF_CONN_UP:
    case LF_CONN_HELLO:
        return NIXL_OK;
    case LF_CONN_DOWN:
        if (c->down_retry) {
            /* We reset it ourselves: the peer may be fine. */
            c->down_retry = 0;
            c->state = LF_CONN_IDLE;
            c->have_ridx = 0;
            break;
        }
        if (c->down_silent) {
            /* Declared gone for silence alone: heavy loss or a stall looks
             * the same.  Refused at once for twice the peer timeout, then
             * the next use shakes hands again (a dead process then fails
             * that handshake, bounded by the same timeout). */
            if (nixl_now_ns() - c->since_ns < 2 * be->timeout_ns)
                return c->down_status;
            LF_INFO(be, "libfabric: %s: peer %s was declared gone for its silence %llu ms ago: trying it again",
                    be->agent_name, c->name[0] ? c->name : "?",
                    (unsigned long long)((nixl_now_ns() - c->since_ns) / 1000000));
            c->down_silent = 0;
            c->state = LF_CONN_IDLE;
            c->have_ridx = 0;
            break;
        }
        if (c->down_status != NIXL_ERR_TIMEOUT)
            return c->down_status;
        /* Only the handshake went unanswered: a link outage or heavy loss
         * looks the same as a dead process, so try again (bounded by the
         * same timeout).  Liveness, not this, declares a peer gone. */
        lf_conn_retry_log(be, c);
        c->state = LF_CONN_IDLE;
        c->have_ridx = 0;
        break;
    case LF_CONN_IDLE:
        break;
    }
    nixl_status_t st = lf_conn_av(be, c);
    if (st != NIXL_OK) {
        lf_conn_down(be, c, st, "its address is not usable");
        return st;
    }
    c->used = 1;
    c->state = LF_CONN_HELLO;
    c->since_ns = nixl_now_ns();
    lf_queue_hello(be, c, LF_MSG_HELLO);
    return NIXL_OK;
}

/* The peer's side of the connection starts at its next_seq. */
static void lf_conn_up(lf_be_t *be, lf_conn_t *c, uint32_t ridx, uint64_t peer_seq)
{
    uint64_t now = nixl_now_ns();
    c->ridx = ridx;
    c->have_ridx = 1;
    if (c->state != LF_CONN_UP) {
        /* Writes counted before the answer arrived (they may overtake it
         * on another rail) are kept; lf_conn_down cleared older state. */
        c->rx_next_seq = peer_seq;
        c->state = LF_CONN_UP;
        c->since_ns = now;
        c->last_tx_ns = now;
        LF_DEBUG(be, "libfabric: %s: connection to %s up (our index %u, theirs %u)", be->agent_name, c->name,
                 c->idx, ridx);
    }
    c->last_rx_ns = now;
}

static int lf_name_ok(const uint8_t *s, size_t n)
{
    if (n == 0 || n > LF_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

void lf_conn_on_hello(lf_be_t *be, const uint8_t *msg, size_t len)
{
    if (len < LF_HDR_SIZE + LF_HELLO_BODY)
        return;
    const uint8_t *b = msg + LF_HDR_SIZE;
    size_t nlen = nixl_get_u16(b), clen = nixl_get_u32(b + 4);
    uint64_t peer_seq = nixl_get_u64(b + 8);
    if (nixl_get_u16(b + 2) != 0 || len != LF_HDR_SIZE + LF_HELLO_BODY + nlen + clen ||
        !lf_name_ok(b + LF_HELLO_BODY, nlen)) {
        LF_DEBUG(be, "libfabric: malformed HELLO of %zu bytes dropped", len);
        return;
    }
    uint64_t src_inst = nixl_get_u64(msg + 16), dst_inst = nixl_get_u64(msg + 24);
    if (dst_inst != be->inst) {
        /* Meant for an earlier process at our address. */
        LF_DEBUG(be, "libfabric: HELLO for instance %016llx dropped (we are %016llx)", (unsigned long long)dst_inst,
                 (unsigned long long)be->inst);
        return;
    }
    char name[LF_NAME_MAX + 1];
    memcpy(name, b + LF_HELLO_BODY, nlen);
    name[nlen] = 0;
    lf_conn_info_t info;
    nixl_be_peer_t sender = {.name = name}; /* a HELLO on the wire: no locality known */
    if (lf_conn_parse(b + LF_HELLO_BODY + nlen, clen, &info) != NIXL_OK || info.inst != src_inst ||
        lf_conn_reachable(be, &info, &sender) != NIXL_OK) {
        LF_WARN(be, "libfabric: HELLO from %s with bad connection info dropped", name);
        return;
    }
    lf_conn_t *c;
    if (lf_conn_get(be, &info, &c) != NIXL_OK) {
        LF_ERROR(be, "libfabric: out of memory for a connection from %s", name);
        return;
    }
    if (strcmp(c->name, name) != 0)
        snprintf(c->name, sizeof(c->name), "%s", name);
    if (c->state == LF_CONN_DOWN)
        LF_INFO(be, "libfabric: %s: peer %s is back (HELLO): connection revived", be->agent_name, name);
    if (lf_conn_av(be, c) != NIXL_OK) {
        lf_conn_down(be, c, NIXL_ERR_NO_PATH, "its address is not usable");
        return;
    }
    c->used = 1;
    /* A HELLO is sent only by a side whose connection is not up: if ours
     * still is, the peer reset its side (lf_conn_reset) without our
     * noticing, and what it sent before may never come. */
    if (c->state == LF_CONN_UP)
        lf_conn_rx_resync(be, c, peer_seq);
    lf_conn_up(be, c, nixl_get_u32(msg + 12), peer_seq);
    lf_queue_hello(be, c, LF_MSG_ACK);
}

void lf_conn_on_ack(lf_be_t *be, lf_conn_t *c, const uint8_t *msg)
{
    if (c->state == LF_CONN_DOWN && c->down_status == NIXL_ERR_NO_PATH)
        return;
    lf_conn_up(be, c, nixl_get_u32(msg + 12), nixl_get_u64(msg + LF_HDR_SIZE));
}

void lf_conn_down(lf_be_t *be, lf_conn_t *c, nixl_status_t st, const char *why)
{
    if (c->state == LF_CONN_DOWN)
        return;
    int was_up = c->state == LF_CONN_UP;
    c->state = LF_CONN_DOWN;
    c->down_retry = 0;
    c->down_silent = 0;
    c->down_status = st;
    c->since_ns = nixl_now_ns();
    c->hb_queued = 0;
    if (st == NIXL_ERR_PEER_GONE && strcmp(why, "it closed") == 0)
        LF_INFO(be, "libfabric: %s: peer %s %s", be->agent_name, c->name[0] ? c->name : "?", why);
    else if (st == NIXL_ERR_XFER_FAILED)
        ; /* lf_conn_reset said why */
    else if (st == NIXL_ERR_TIMEOUT)
        LF_WARN(be, "libfabric: %s: peer %s did not answer the handshake (%s): its requests fail, the next one "
                    "tries again",
                be->agent_name, c->name[0] ? c->name : "?", why);
    else
        LF_ERROR(be, "libfabric: %s: peer %s is gone (%s)%s", be->agent_name, c->name[0] ? c->name : "?", why,
                 was_up ? "" : " before the handshake completed");
    lf_txq_drop_conn(be, c);
    lf_reqs_fail_conn(be, c, st);
    lf_conn_rx_reset(c);
    /* Dropping its addresses closes the provider's connection to it: what
     * was stuck in flight completes (canceled) instead of lingering, and
     * rxm would otherwise trip over it when the endpoint closes. */
    if (c->av_done) {
        lf_conn_av_remove(be, c, be->nrails);
        c->av_done = 0;
    }
}

void lf_conn_reset(lf_be_t *be, lf_conn_t *c, const char *why)
{
    if (c->state == LF_CONN_DOWN)
        return;
    LF_WARN(be, "libfabric: %s: resetting the connection to %s: %s", be->agent_name, c->name[0] ? c->name : "?", why);
    lf_conn_down(be, c, NIXL_ERR_XFER_FAILED, why);
    c->down_retry = 1;
}

void lf_conn_tick(lf_be_t *be, uint64_t now)
{
    for (size_t i = 0; i < be->nconns; i++) {
        lf_conn_t *c = be->conns[i];
        if (!c)
            continue;
        if (c->state == LF_CONN_HELLO && now - c->since_ns > be->timeout_ns) {
            lf_conn_down(be, c, NIXL_ERR_TIMEOUT, "no answer to the handshake");
            continue;
        }
        if (c->state != LF_CONN_UP)
            continue;
        if (now > c->last_rx_ns && now - c->last_rx_ns > be->timeout_ns) {
            char why[64];
            snprintf(why, sizeof(why), "silent for %llu ms", (unsigned long long)((now - c->last_rx_ns) / 1000000));
            lf_conn_down(be, c, NIXL_ERR_PEER_GONE, why);
            c->down_silent = 1;
            continue;
        }
        if (!c->hb_queued && now - c->last_tx_ns >= be->hb_ns) {
            lf_cmsg_t *m = lf_cmsg_new(c, LF_MSG_HEARTBEAT, 0);
            if (m) {
                c->hb_queued = 1;
                lf_txq_push(be, m);
            }
        }
    }
}

void lf_conns_free(lf_be_t *be)
{
    for (size_t i = 0; i < be->nconns; i++)
        if (be->conns[i])
            lf_conn_free(be->conns[i]);
    free(be->conns);
    be->conns = NULL;
    be->nconns = be->cconns = 0;
}
