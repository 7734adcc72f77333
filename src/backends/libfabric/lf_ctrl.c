/*
 * lf_ctrl.c - control messages, and notifications released only after
 * their data landed.
 *
 * Control messages (HELLO, ACK, HEARTBEAT, NOTIF, CANCEL, BYE) go over
 * rail 0 with fi_send into buffers the peer keeps posted.  They wait in one
 * FIFO queue until the peer's index for us is known and the provider takes
 * them, so per peer they leave in the order they were queued; a NOTIF gets
 * its sequence number when it leaves, and the receiver hands notifications
 * to the agent strictly in that order.
 *
 * Counting: every write of a request that carries a notification brings
 * remote CQ data [our index at the target | tag].  The target counts writes
 * per (connection, tag) over all its rails, whichever of its rails each
 * write landed on (any rail of the initiator may write to any of ours);
 * the NOTIF says how many to expect, and is released
 * only once that many were counted.  A canceled request sends CANCEL
 * instead, so the target can forget the tag once the writes that were
 * posted have come in.
 *
 * Header (40 bytes, little-endian): u32 magic "LFM1", u8 type, u8 version,
 * u16 0, u32 receiver's index for the sender (UINT32_MAX in HELLO), u32
 * sender's index for the receiver, u64 sender instance, u64 receiver
 * instance, u64 sequence (NOTIF) or 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lf_int.h"

lf_cmsg_t *lf_cmsg_new(lf_conn_t *c, uint8_t type, size_t body_len)
{
    lf_cmsg_t *m = malloc(sizeof(*m) + LF_HDR_SIZE + body_len);
    if (!m)
        return NULL;
    memset(m, 0, sizeof(*m) + LF_HDR_SIZE);
    m->c.kind = LF_CTX_TX;
    m->conn = c;
    m->type = type;
    m->len = LF_HDR_SIZE + body_len;
    nixl_put_u32(m->data, LF_MSG_MAGIC);
    m->data[4] = type;
    m->data[5] = LF_MSG_VERSION;
    return m;
}

void lf_txq_push(lf_be_t *be, lf_cmsg_t *m)
{
    m->next = NULL;
    *be->txq_tail = m;
    be->txq_tail = &m->next;
}

/* A send buffer is registered on every rail: fences go out on all. */
static int lf_txbuf_reg(lf_be_t *be, lf_txbuf_t *b)
{
    for (unsigned r = 0; r < be->nrails; r++) {
        int ret = lf_mr_local(be, &be->rails[r], b->buf, LF_MSG_MAX, FI_SEND, &b->mr[r]);
        if (ret)
            return ret;
        b->desc[r] = fi_mr_desc(b->mr[r]);
    }
    return 0;
}

nixl_status_t lf_txbufs_init(lf_be_t *be)
{
    if (!be->mr_local)
        return NIXL_OK;
    be->txbufs = calloc(LF_TX_BUFS, sizeof(*be->txbufs));
    if (!be->txbufs)
        return NIXL_ERR_NO_MEMORY;
    for (unsigned i = 0; i < LF_TX_BUFS; i++) {
        lf_txbuf_t *b = calloc(1, sizeof(*b));
        if (!b)
            return NIXL_ERR_NO_MEMORY;
        be->txbufs[be->ntxbufs++] = b;
        b->buf = malloc(LF_MSG_MAX);
        if (!b->buf)
            return NIXL_ERR_NO_MEMORY;
        int ret = lf_txbuf_reg(be, b);
        if (ret) {
            LF_ERROR(be, "libfabric: registering a send buffer failed: %s", fi_strerror(-ret));
            return NIXL_ERR_BACKEND;
        }
        b->next_free = be->tx_free;
        be->tx_free = b;
    }
    return NIXL_OK;
}

void lf_txbufs_free(lf_be_t *be)
{
    for (size_t i = 0; i < be->ntxbufs; i++) {
        lf_txbuf_t *b = be->txbufs[i];
        for (unsigned r = 0; r < LF_MAX_RAILS; r++)
            if (b->mr[r])
                fi_close(&b->mr[r]->fid);
        free(b->buf);
        free(b);
    }
    free(be->txbufs);
    be->txbufs = NULL;
    be->ntxbufs = 0;
    be->tx_free = NULL;
}

static void lf_fill_header(lf_be_t *be, lf_cmsg_t *m)
{
    lf_conn_t *c = m->conn;
    nixl_put_u32(m->data + 8, m->type == LF_MSG_HELLO ? UINT32_MAX : c->ridx);
    nixl_put_u32(m->data + 12, c->idx);
    nixl_put_u64(m->data + 16, be->inst);
    nixl_put_u64(m->data + 24, c->inst);
    nixl_put_u64(m->data + 32, m->type == LF_MSG_NOTIF ? c->next_seq : 0);
}

static int lf_cmsg_ready(const lf_cmsg_t *m)
{
    const lf_conn_t *c = m->conn;
    if (m->type == LF_MSG_HELLO)
        return c->state == LF_CONN_HELLO || c->state == LF_CONN_UP;
    return c->state == LF_CONN_UP && c->have_ridx;
}

void lf_txq_flush(lf_be_t *be)
{
    lf_cmsg_t **pp = &be->txq_head;
    while (*pp && be->tx_inflight < LF_TX_BUFS) {
        lf_cmsg_t *m = *pp;
        lf_conn_t *c = m->conn;
        if (!lf_cmsg_ready(m)) {
            /* Its connection is not up yet: later messages of other peers
             * may pass, its own stay behind it. */
            pp = &m->next;
            continue;
        }
        lf_rail_t *rail = &be->rails[m->rail];
        if (rail->eagain) {
            pp = &m->next;
            continue;
        }
        void *buf = m->data, *desc = NULL;
        if (be->mr_local) {
            if (!be->tx_free)
                break;
            m->txbuf = be->tx_free;
            be->tx_free = m->txbuf->next_free;
            buf = m->txbuf->buf;
            desc = m->txbuf->desc[m->rail];
        }
        lf_fill_header(be, m);
        if (buf != m->data)
            memcpy(buf, m->data, m->len);
        int ret = (int)fi_send(rail->ep, buf, m->len, desc, lf_conn_addr(c, m->rail, m->rrail), &m->c.fctx);
        if (ret == -FI_EAGAIN) {
            if (m->txbuf) {
                m->txbuf->next_free = be->tx_free;
                be->tx_free = m->txbuf;
                m->txbuf = NULL;
            }
            /* Messages of this rail wait for progress; order per peer
             * holds because each peer's messages of one rail queue in
             * order and those of rail 0 never depend on other rails. */
            rail->eagain = 1;
            pp = &m->next;
            continue;
        }
        /* Out of the queue either way. */
        *pp = m->next;
        if (!*pp)
            be->txq_tail = pp;
        if (m->req)
            m->req->notif_msg = NULL;
        if (ret) {
            LF_ERROR(be, "libfabric: sending a control message (type %u) to %s failed: %s", m->type,
                     c->name[0] ? c->name : "?", fi_strerror(-ret));
            if (m->txbuf) {
                m->txbuf->next_free = be->tx_free;
                be->tx_free = m->txbuf;
            }
            if (m->req)
                lf_req_notif_done(be, m->req, m->req_gen, ret);
            if (m->type == LF_MSG_HEARTBEAT)
                c->hb_queued = 0;
            free(m);
            if (lf_err_is_peer_gone(ret))
                lf_conn_down(be, c, NIXL_ERR_PEER_GONE, "sending failed");
            pp = &be->txq_head; /* the queue may have changed */
            continue;
        }
        if (m->type == LF_MSG_NOTIF)
            c->next_seq++;
        if (m->type == LF_MSG_HEARTBEAT)
            c->hb_queued = 0;
        c->last_tx_ns = nixl_now_ns();
        m->next = be->tx_flight;
        be->tx_flight = m;
        be->tx_inflight++;
    }
}

void lf_tx_done(lf_be_t *be, lf_cmsg_t *m, int err)
{
    lf_cmsg_t **pp = &be->tx_flight;
    while (*pp && *pp != m)
        pp = &(*pp)->next;
    if (*pp)
        *pp = m->next;
    if (!m->orphan)
        be->tx_inflight--;
    if (m->txbuf) {
        m->txbuf->next_free = be->tx_free;
        be->tx_free = m->txbuf;
    }
    lf_conn_t *c = m->conn;
    if (m->req)
        lf_req_notif_done(be, m->req, m->req_gen, err);
    if (err && !m->orphan) {
        LF_DEBUG(be, "libfabric: control message (type %u) to %s failed: %s", m->type, c->name,
                 fi_strerror(err < 0 ? -err : err));
        if (lf_err_is_peer_gone(err))
            lf_conn_down(be, c, NIXL_ERR_PEER_GONE, "a message to it failed");
    }
    free(m);
}

/* A registered buffer stuck under an orphan is replaced so the pool keeps
 * its size; the stuck one comes back if its completion ever arrives. */
static void lf_txbuf_replace(lf_be_t *be)
{
    lf_txbuf_t *b = calloc(1, sizeof(*b));
    lf_txbuf_t **v = realloc(be->txbufs, (be->ntxbufs + 1) * sizeof(*v));
    if (!b || !v) {
        free(b);
        if (v)
            be->txbufs = v;
        return;
    }
    be->txbufs = v;
    be->txbufs[be->ntxbufs++] = b;
    b->buf = malloc(LF_MSG_MAX);
    if (!b->buf || lf_txbuf_reg(be, b) != 0)
        return; /* freed with the others at destroy */
    b->next_free = be->tx_free;
    be->tx_free = b;
}

void lf_txq_drop_conn(lf_be_t *be, lf_conn_t *c)
{
    lf_cmsg_t **pp = &be->txq_head;
    while (*pp) {
        lf_cmsg_t *m = *pp;
        if (m->conn != c) {
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        if (m->req)
            m->req->notif_msg = NULL;
        free(m);
    }
    be->txq_tail = &be->txq_head;
    while (*be->txq_tail)
        be->txq_tail = &(*be->txq_tail)->next;
    /* In flight to a dead peer: the provider may never complete them, so
     * they stop counting against the window. */
    for (lf_cmsg_t *m = be->tx_flight; m; m = m->next) {
        if (m->conn != c || m->orphan)
            continue;
        m->orphan = 1;
        be->tx_inflight--;
        if (m->txbuf)
            lf_txbuf_replace(be);
    }
}

void lf_txq_free(lf_be_t *be)
{
    while (be->txq_head) {
        lf_cmsg_t *m = be->txq_head;
        be->txq_head = m->next;
        free(m);
    }
    be->txq_tail = &be->txq_head;
    while (be->tx_flight) {
        lf_cmsg_t *m = be->tx_flight;
        be->tx_flight = m->next;
        free(m);
    }
    be->tx_inflight = 0;
}

/* ---- receiving ---- */

uint64_t lf_data_make(const lf_be_t *be, uint32_t idx, uint32_t tag)
{
    uint64_t mask = (1ull << be->tag_bits) - 1;
    return ((uint64_t)idx << be->tag_bits) | (tag & mask);
}

static lf_tag_t *lf_tag_find(lf_conn_t *c, uint32_t tag, int create)
{
    for (size_t i = 0; i < c->ntags; i++)
        if (c->tags[i].tag == tag)
            return &c->tags[i];
    if (!create)
        return NULL;
    if (c->ntags == c->ctags) {
        size_t cap = c->ctags ? 2 * c->ctags : 8;
        lf_tag_t *v = realloc(c->tags, cap * sizeof(*v));
        if (!v)
            return NULL;
        c->tags = v;
        c->ctags = cap;
    }
    lf_tag_t *t = &c->tags[c->ntags++];
    memset(t, 0, sizeof(*t));
    t->tag = tag;
    t->expect = UINT64_MAX;
    return t;
}

static void lf_tag_remove(lf_conn_t *c, lf_tag_t *t)
{
    *t = c->tags[--c->ntags];
}

void lf_conn_rx_reset(lf_conn_t *c)
{
    while (c->pend) {
        lf_rnotif_t *n = c->pend;
        c->pend = n->next;
        free(n);
    }
    c->ntags = 0;
}

static void lf_fence_ack(lf_be_t *be, lf_conn_t *c, uint64_t id)
{
    lf_cmsg_t *m = lf_cmsg_new(c, LF_MSG_FENCE_ACK, LF_FENCE_BODY);
    if (!m) {
        LF_ERROR(be, "libfabric: out of memory answering a fence of %s", c->name);
        return;
    }
    memset(m->data + LF_HDR_SIZE, 0, LF_FENCE_BODY);
    nixl_put_u64(m->data + LF_HDR_SIZE, id);
    lf_txq_push(be, m);
}

/* Release, in order, every notification whose writes were all counted. */
static void lf_conn_release(lf_be_t *be, lf_conn_t *c)
{
    while (c->pend && c->pend->seq == c->rx_next_seq) {
        lf_rnotif_t *n = c->pend;
        if (n->expect > 0) {
            lf_tag_t *t = lf_tag_find(c, n->tag, 0);
            if (!t || t->seen < n->expect)
                return;
            lf_tag_remove(c, t);
        }
        /* Straight into the agent's inbox (notif_deliver may be called
         * from any thread, this one holding be->lock included): the
         * bytes are copied once more, there, and nowhere else. */
        be->host->notif_deliver(be->host->ctx, c->name, n->msg, n->len);
        if (n->ack)
            lf_fence_ack(be, c, n->fence_id);
        c->pend = n->next;
        c->rx_next_seq++;
        free(n);
    }
}

void lf_conn_rx_resync(lf_be_t *be, lf_conn_t *c, uint64_t peer_seq)
{
    if (peer_seq <= c->rx_next_seq)
        return;
    unsigned dropped = 0;
    while (c->pend && c->pend->seq < peer_seq) {
        lf_rnotif_t *n = c->pend;
        if (n->expect > 0) {
            lf_tag_t *t = lf_tag_find(c, n->tag, 0);
            if (t)
                lf_tag_remove(c, t);
        }
        c->pend = n->next;
        free(n);
        dropped++;
    }
    LF_INFO(be,
            "libfabric: %s: peer %s shook hands again at notification %llu (we were at %llu): the %llu before it "
            "belong to requests it ended (%u held here dropped; any arriving later are dropped)",
            be->agent_name, c->name, (unsigned long long)peer_seq, (unsigned long long)c->rx_next_seq,
            (unsigned long long)(peer_seq - c->rx_next_seq), dropped);
    c->rx_next_seq = peer_seq;
    lf_conn_release(be, c);
}

static void lf_on_notif(lf_be_t *be, lf_conn_t *c, const uint8_t *msg, size_t len)
{
    if (len < LF_HDR_SIZE + LF_NOTIF_BODY)
        return;
    const uint8_t *b = msg + LF_HDR_SIZE;
    uint64_t seq = nixl_get_u64(msg + 32), expect = nixl_get_u64(b), fence_id = nixl_get_u64(b + 16);
    uint32_t tag = nixl_get_u32(b + 8), mlen = nixl_get_u32(b + 12), flags = nixl_get_u32(b + 24);
    if (mlen > NIXL_NOTIF_MAX || len != LF_HDR_SIZE + LF_NOTIF_BODY + (size_t)mlen || (flags & ~LF_NOTIF_ACK)) {
        LF_WARN(be, "libfabric: malformed notification of %zu bytes from %s dropped", len, c->name);
        return;
    }
    if (seq < c->rx_next_seq) {
        LF_DEBUG(be, "libfabric: duplicate notification %llu from %s dropped", (unsigned long long)seq, c->name);
        return;
    }
    /* Its turn, and every write it announces already counted (the usual
     * case: the writes complete before their notification is sent):
     * straight from the wire into the agent's inbox, the one copy. */
    if (seq == c->rx_next_seq && (!c->pend || c->pend->seq > seq)) {
        lf_tag_t *t = expect > 0 ? lf_tag_find(c, tag, 0) : NULL;
        if (expect == 0 || (t && t->seen >= expect)) {
            if (t)
                lf_tag_remove(c, t);
            be->host->notif_deliver(be->host->ctx, c->name, b + LF_NOTIF_BODY, mlen);
            if (flags & LF_NOTIF_ACK)
                lf_fence_ack(be, c, fence_id);
            c->rx_next_seq++;
            lf_conn_release(be, c);
            return;
        }
    }
    /* Held until its turn comes and its writes are counted (protocol). */
    lf_rnotif_t *n = malloc(sizeof(*n) + mlen);
    if (!n) {
        LF_ERROR(be, "libfabric: out of memory: a notification from %s (%u bytes) dropped", c->name, mlen);
        return;
    }
    n->seq = seq;
    n->expect = expect;
    n->fence_id = fence_id;
    n->ack = (flags & LF_NOTIF_ACK) != 0;
    n->tag = tag;
    n->len = mlen;
    memcpy(n->msg, b + LF_NOTIF_BODY, mlen);
    lf_rnotif_t **pp = &c->pend;
    while (*pp && (*pp)->seq < seq)
        pp = &(*pp)->next;
    if (*pp && (*pp)->seq == seq) {
        free(n);
        return;
    }
    n->next = *pp;
    *pp = n;
    if (expect > 0 && !lf_tag_find(c, tag, 1)) {
        LF_ERROR(be, "libfabric: out of memory counting writes from %s", c->name);
        return;
    }
    lf_conn_release(be, c);
}

static void lf_on_cancel(lf_conn_t *c, const uint8_t *msg, size_t len)
{
    if (len != LF_HDR_SIZE + LF_CANCEL_BODY)
        return;
    uint32_t tag = nixl_get_u32(msg + LF_HDR_SIZE);
    uint64_t posted = nixl_get_u64(msg + LF_HDR_SIZE + 8);
    lf_tag_t *t = lf_tag_find(c, tag, posted > 0);
    if (!t)
        return;
    t->expect = posted;
    t->cancel = 1;
    if (t->seen >= posted)
        lf_tag_remove(c, t);
}

void lf_ctrl_on_write_data(lf_be_t *be, uint64_t data)
{
    uint64_t idx = data >> be->tag_bits;
    uint32_t tag = (uint32_t)(data & ((1ull << be->tag_bits) - 1));
    lf_conn_t *c = idx < be->nconns ? be->conns[idx] : NULL;
    if (!c || c->state == LF_CONN_DOWN) {
        LF_DEBUG(be, "libfabric: a write with data %016llx for no live connection", (unsigned long long)data);
        return;
    }
    c->last_rx_ns = nixl_now_ns();
    lf_tag_t *t = lf_tag_find(c, tag, 1);
    if (!t) {
        LF_ERROR(be, "libfabric: out of memory counting writes from %s", c->name);
        return;
    }
    t->seen++;
    if (t->cancel || t->fence) {
        if (t->seen >= t->expect) {
            if (t->fence)
                lf_fence_ack(be, c, t->fence_id);
            lf_tag_remove(c, t);
        }
        return;
    }
    if (c->pend && c->pend->tag == tag && t->seen >= c->pend->expect)
        lf_conn_release(be, c);
}

/* A plain FENCE is processed after every write before it on its rail
 * (the provider orders sends after writes): answering says they landed.  A
 * counted one is answered once its tag's writes were all counted. */
static void lf_on_fence(lf_be_t *be, lf_conn_t *c, const uint8_t *b)
{
    uint64_t id = nixl_get_u64(b), expect = nixl_get_u64(b + 16);
    uint32_t tag = nixl_get_u32(b + 8), flags = nixl_get_u32(b + 12);
    if (!(flags & LF_FENCE_COUNTED)) {
        lf_fence_ack(be, c, id);
        return;
    }
    lf_tag_t *t = lf_tag_find(c, tag, 1);
    if (!t) {
        LF_ERROR(be, "libfabric: out of memory counting writes from %s", c->name);
        return;
    }
    t->fence = 1;
    t->fence_id = id;
    t->expect = expect;
    if (t->seen >= expect) {
        lf_fence_ack(be, c, id);
        lf_tag_remove(c, t);
    }
}

void lf_ctrl_on_message(lf_be_t *be, const uint8_t *msg, size_t len)
{
    if (len < LF_HDR_SIZE || nixl_get_u32(msg) != LF_MSG_MAGIC || msg[5] != LF_MSG_VERSION) {
        LF_DEBUG(be, "libfabric: a message of %zu bytes that is not ours dropped", len);
        return;
    }
    uint8_t type = msg[4];
    if (type == LF_MSG_HELLO) {
        lf_conn_on_hello(be, msg, len);
        return;
    }
    uint32_t idx = nixl_get_u32(msg + 8);
    lf_conn_t *c = idx < be->nconns ? be->conns[idx] : NULL;
    if (!c || c->inst != nixl_get_u64(msg + 16) || nixl_get_u64(msg + 24) != be->inst) {
        LF_DEBUG(be, "libfabric: message type %u for connection %u of another instance dropped", type, idx);
        return;
    }
    if (c->state == LF_CONN_DOWN) {
        if (type != LF_MSG_ACK && type != LF_MSG_BYE && !c->closed && c->down_status != NIXL_ERR_NO_PATH) {
            /* We declared it dead but it talks: shake hands again, which
             * puts both sides' sequence numbers back in step. */
            LF_INFO(be, "libfabric: %s: peer %s declared gone still talks: connecting again", be->agent_name,
                    c->name);
            c->state = LF_CONN_IDLE;
            c->have_ridx = 0;
            lf_conn_use(be, c);
        }
        return;
    }
    c->last_rx_ns = nixl_now_ns();
    switch (type) {
    case LF_MSG_ACK:
        if (len == LF_HDR_SIZE + LF_ACK_BODY)
            lf_conn_on_ack(be, c, msg);
        break;
    case LF_MSG_HEARTBEAT:
        break;
    case LF_MSG_NOTIF:
        if (c->state == LF_CONN_UP)
            lf_on_notif(be, c, msg, len);
        break;
    case LF_MSG_CANCEL:
        lf_on_cancel(c, msg, len);
        break;
    case LF_MSG_BYE:
        c->closed = 1;
        lf_conn_down(be, c, NIXL_ERR_PEER_GONE, "it closed");
        break;
    case LF_MSG_FENCE:
        if (len == LF_HDR_SIZE + LF_FENCE_BODY && c->state == LF_CONN_UP)
            lf_on_fence(be, c, msg + LF_HDR_SIZE);
        break;
    case LF_MSG_FENCE_ACK:
        if (len == LF_HDR_SIZE + LF_FENCE_BODY)
            lf_req_fence_done(be, c, nixl_get_u64(msg + LF_HDR_SIZE));
        break;
    default:
        LF_DEBUG(be, "libfabric: message of unknown type %u from %s dropped", type, c->name);
        break;
    }
}

/* ---- sending notifications ---- */

lf_cmsg_t *lf_notif_msg(lf_be_t *be, lf_conn_t *c, const void *msg, size_t len, uint32_t tag, uint64_t expect,
                        int ack, uint64_t fence_id)
{
    lf_cmsg_t *m = lf_cmsg_new(c, LF_MSG_NOTIF, LF_NOTIF_BODY + len);
    if (!m)
        return NULL;
    uint8_t *b = m->data + LF_HDR_SIZE;
    nixl_put_u64(b, expect);
    nixl_put_u32(b + 8, tag);
    nixl_put_u32(b + 12, (uint32_t)len);
    nixl_put_u64(b + 16, ack ? fence_id : 0);
    nixl_put_u32(b + 24, ack ? LF_NOTIF_ACK : 0);
    nixl_put_u32(b + 28, 0);
    if (len)
        memcpy(b + LF_NOTIF_BODY, msg, len);
    lf_txq_push(be, m);
    (void)be;
    return m;
}

/* One FENCE from our rail r to their rail j. */
static int lf_fence_one(lf_be_t *be, lf_conn_t *c, unsigned r, unsigned j, uint64_t id, int counted, uint32_t tag,
                        uint64_t expect)
{
    lf_cmsg_t *m = lf_cmsg_new(c, LF_MSG_FENCE, LF_FENCE_BODY);
    if (!m)
        return 0;
    m->rail = (uint8_t)r;
    m->rrail = (uint8_t)j;
    uint8_t *b = m->data + LF_HDR_SIZE;
    nixl_put_u64(b, id);
    nixl_put_u32(b + 8, counted ? tag : 0);
    nixl_put_u32(b + 12, counted ? LF_FENCE_COUNTED : 0);
    nixl_put_u64(b + 16, counted ? expect : 0);
    lf_txq_push(be, m);
    return 1;
}

unsigned lf_fence_queue(lf_be_t *be, lf_conn_t *c, const uint32_t *pairs, uint64_t id, int counted, uint32_t tag,
                        uint64_t expect)
{
    /* Counting does not care which rails the writes took: the target
     * counts a transfer's writes over all its rails. */
    if (counted)
        return (unsigned)lf_fence_one(be, c, 0, 0, id, 1, tag, expect);
    /* The provider orders a send after the writes before it between one
     * endpoint and one peer endpoint only: a FENCE per pair used. */
    unsigned n = 0;
    for (unsigned r = 0; r < be->nrails; r++) {
        for (uint32_t set = pairs[r]; set; set &= set - 1) {
            if (!lf_fence_one(be, c, r, (unsigned)__builtin_ctz(set), id, 0, tag, expect))
                return n;
            n++;
        }
    }
    return n;
}

nixl_status_t lf_notif_send(void *bev, void *peer, const void *msg, size_t len)
{
    lf_be_t *be = bev;
    lf_conn_t *c = peer;
    if (!c || (len && !msg))
        return NIXL_ERR_NULL;
    if (len > NIXL_NOTIF_MAX)
        return NIXL_ERR_TOO_BIG;
    pthread_mutex_lock(&be->lock);
    nixl_status_t st = lf_conn_use(be, c);
    if (st == NIXL_OK && !lf_notif_msg(be, c, msg, len, 0, 0, 0, 0))
        st = NIXL_ERR_NO_MEMORY;
    if (st == NIXL_OK)
        lf_progress_op_locked(be);
    pthread_mutex_unlock(&be->lock);
    return st;
}

