/*
 * test_peer.h - for tests that drive a version-2 backend's ops directly
 * (without the core): the locality record the core would hand peer_open
 * for a peer process of this host, in our namespaces and of our uid.
 *
 *   nixl_be_peer_t who = test_peer_here("b", getpid());
 *   CHECK_ST(ops->peer_open(be, &who, conn, conn_len, &peer), NIXL_OK);
 *
 * The record must outlive the peer (peer_open may keep who->name); read it
 * while the peer process runs (its start time is read from /proc), and
 * keep it to load the same process again after it died.
 */
#ifndef NIXL_TESTS_COMMON_TEST_PEER_H
#define NIXL_TESTS_COMMON_TEST_PEER_H

#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "nixl/backend.h"

static inline nixl_be_peer_t test_peer_here(const char *name, pid_t pid)
{
    nixl_be_peer_t p;
    memset(&p, 0, sizeof(p));
    p.name = name;
    p.generation = 1;
    p.same_host = p.same_pidns = p.same_netns = p.same_uid = 1;
    p.pid = (uint32_t)pid;
    p.uid = (uint32_t)getuid();
    if (nixl_proc_start_time((uint32_t)pid, &p.start_time) != 0)
        p.start_time = 0;
    p.same_process = pid == getpid();
    return p;
}

#endif
