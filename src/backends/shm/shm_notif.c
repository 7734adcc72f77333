/*
 * shm_notif.c - the shm backend's notification ops.
 *
 * The socket, the datagram format and its validation are shared with the
 * other same-host backend (../common/samehost_notif.c); what is shm's own
 * is checking that the peer still runs before sending.
 */
#include "shm_int.h"

nixl_status_t shm_notif_send(void *bev, void *peerv, const void *msg, size_t len)
{
    shm_be_t *be = bev;
    shm_peer_t *peer = peerv;
    if (!peer || (!msg && len))
        return NIXL_ERR_NULL;
    nixl_status_t st = shm_peer_check(be, peer);
    if (st != NIXL_OK)
        return st;
    return samehost_notif_send(&be->notif, &peer->notif, msg, len);
}

