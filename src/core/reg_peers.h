/*
 * reg_peers.h - how many agents of this host are registering memory right
 * now, so the registration pool can share the cores with them.
 *
 * Agents of one user find each other through a small file (by default
 * /dev/shm/nixl-reg-<uid>, NIXL_REG_PEERS_FILE overrides it): a fixed array
 * of slots {pid, start time, token}.  An agent holds a slot for the duration
 * of one registration batch.  Nothing here ever fails the caller: when the
 * file cannot be used, the agent counts itself only.
 */
#ifndef NIXL_CORE_REG_PEERS_H
#define NIXL_CORE_REG_PEERS_H

#include <stdint.h>

/* Slots in the file; agents beyond this many are not seen by the others. */
#define NIXL_REG_PEERS_SLOTS 256
#define NIXL_REG_PEERS_MAGIC 0x5052584eu /* "NXRP" */
#define NIXL_REG_PEERS_VERSION 1u

/* The file, in host byte order (it never leaves the host). */
typedef struct nixl_reg_peers_slot {
    uint32_t pid; /* 0: free */
    uint32_t zero;
    uint64_t start; /* start time of pid: /proc/<pid>/stat field 22 */
    uint64_t token;
} nixl_reg_peers_slot_t;

typedef struct nixl_reg_peers_table {
    uint32_t magic;
    uint32_t version;
    uint32_t nslots;    /* NIXL_REG_PEERS_SLOTS */
    uint32_t slot_size; /* sizeof(nixl_reg_peers_slot_t) */
    nixl_reg_peers_slot_t slot[NIXL_REG_PEERS_SLOTS];
} nixl_reg_peers_table_t;

typedef struct nixl_reg_peers {
    int fd;         /* -1: the file is not used (count ourselves only) */
    int slot;       /* our slot, -1 when none was free */
    uint64_t token; /* tells our slot from another agent's of the same process */
} nixl_reg_peers_t;

/* Claim a slot for this batch; dead agents' slots are reclaimed on the way. */
void nixl_reg_peers_join(nixl_reg_peers_t *p);
/* Agents registering on this host now, ourselves included: at least 1. */
unsigned nixl_reg_peers_count(nixl_reg_peers_t *p);
/* Give the slot back and close the file. */
void nixl_reg_peers_leave(nixl_reg_peers_t *p);
/* Start time of a process in clock ticks after boot; 0 when unknown. */
uint64_t nixl_reg_peers_start_time(int pid);

#endif
