/*
 * host.h - who and where this process is, for locality decisions: the one
 * place the kernel's boot id, the process's start time and its namespaces
 * are read.  The core puts them in the agent section of its metadata and
 * computes, per loaded peer, what the backends are told (nixl_be_peer_t).
 */
#ifndef NIXL_UTIL_HOST_H
#define NIXL_UTIL_HOST_H

#include <stddef.h>
#include <stdint.h>

typedef struct nixl_host_id {
    char hostname[64];
    uint8_t boot_id[16]; /* /proc/sys/kernel/random/boot_id; zero if unreadable */
} nixl_host_id_t;

/* The process as its peers see it: its host, and what tells it apart
 * there (pid with start time survives pid reuse; the namespaces say
 * whether the pid and the network mean the same thing to a peer). */
typedef struct nixl_proc_id {
    nixl_host_id_t host;
    uint32_t pid;
    uint32_t uid;
    uint64_t start_time; /* field 22 of /proc/<pid>/stat, clock ticks since boot; 0 if unreadable */
    uint64_t pidns;      /* inode of /proc/self/ns/pid; 0 if unreadable */
    uint64_t netns;      /* inode of /proc/self/ns/net; 0 if unreadable */
} nixl_proc_id_t;

/* Fills *out (cached after the first call).  Always succeeds. */
void nixl_host_id_get(nixl_host_id_t *out);
/* 1 when both describe the same running kernel (same boot id, or same
 * hostname when boot ids are unknown). */
int nixl_host_id_same(const nixl_host_id_t *a, const nixl_host_id_t *b);
/* This process now (the host part cached; pid, start time and namespaces
 * read on each call, so a forked child describes itself).  Always
 * succeeds; what cannot be read is 0. */
void nixl_proc_id_get(nixl_proc_id_t *out);

/* Strict parse of boot_id text (36-char UUID, optionally one trailing
 * newline) into 16 bytes.  0 on success, -1 otherwise. */
int nixl_boot_id_parse(const char *text, size_t len, uint8_t out[16]);

#endif
