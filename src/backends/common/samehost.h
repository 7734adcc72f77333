/*
 * samehost.h - what the same-host backends (shm, cuda_ipc) share: who a
 * process is and whether it still runs (samehost_proc.c), and the
 * notification datagram socket between agents of one host
 * (samehost_notif.c).  One piece of code per idea, used by both.
 *
 * These helpers see only include/nixl/backend.h (and its kit,
 * nixl/backend_util.h): they log through the host services of the backend
 * instance that owns them, prefixed with its name.
 */
#ifndef NIXL_BACKENDS_COMMON_SAMEHOST_H
#define NIXL_BACKENDS_COMMON_SAMEHOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>

#include "nixl/backend.h"

/* ------------------------------------------------------------------------
 * Processes (samehost_proc.c)
 * ------------------------------------------------------------------------ */

/* A peer process we hold a pidfd on. */
typedef struct samehost_proc {
    char name[64];                  /* the peer agent's name, for log lines */
    pid_t pid;
    int pidfd;                      /* -1 when the kernel has no pidfd_open */
    uint64_t start_time;
    _Atomic int gone_logged;        /* "peer exited" is logged once, not per post */
    _Atomic uint64_t next_check_ns; /* liveness is looked at again from then on */
} samehost_proc_t;

/* Read a small file whole (NUL-terminated); bytes read or -1 (errno). */
int samehost_read_file(const char *path, char *buf, size_t cap);
/* NIXL_OK when the core's record says the peer can be reached from here:
 * the same host and pid namespace, a pid that can be a pid, our uid or
 * can_ptrace_any.  Else NIXL_ERR_NO_PATH (or NIXL_ERR_BAD_METADATA for
 * an impossible pid), logged. */
nixl_status_t samehost_peer_reachable(const nixl_host_services_t *host, const char *who, const nixl_be_peer_t *peer,
                                      int can_ptrace_any);

/* Open a pidfd on the peer and check it is the process of that start time:
 * NIXL_ERR_PEER_GONE when it exited or its pid was reused. */
nixl_status_t samehost_proc_open(const nixl_host_services_t *host, const char *who, const char *peer_name,
                                 pid_t pid, uint64_t start_time, samehost_proc_t *out);
void samehost_proc_close(samehost_proc_t *p);
/* NIXL_OK while the peer runs; NIXL_ERR_PEER_GONE (logged once) after it
 * exited.  Looks at most once per SAMEHOST_LIVENESS_NS (cheap on a post
 * path) unless always is set: a backend whose writes into a dead peer's
 * memory would not fail (mapped GPU memory outlives its process) must look
 * every time. */
#define SAMEHOST_LIVENESS_NS 1000000ull
nixl_status_t samehost_proc_alive(const nixl_host_services_t *host, const char *who, samehost_proc_t *p, int always);

/* Yama: with ptrace_scope 1 allow any process of this user to attach
 * (process_vm_*, pidfd_getfd need it), logging what was done.  Outputs
 * the scope (-1: no Yama) and whether we hold CAP_SYS_PTRACE. */
void samehost_ptrace_setup(const nixl_host_services_t *host, const char *who, const char *why, int *scope_out,
                           int *can_ptrace_any_out);

/* ------------------------------------------------------------------------
 * Notifications (samehost_notif.c)
 * ------------------------------------------------------------------------ */

#define SAMEHOST_NAME_MAX 63       /* agent names, as NIXL_NAME_MAX */
#define SAMEHOST_SOCK_NAME_MAX 100 /* abstract socket name, without the leading NUL */

/* The receiving end: one AF_UNIX datagram socket in the abstract namespace
 * per backend instance, drained by a receiver thread that hands each
 * notification to the agent's inbox as it arrives. */
typedef struct samehost_notif {
    const nixl_host_services_t *host;
    const char *who; /* backend name, prefix of socket names and log lines */
    uint32_t uid;
    char agent_name[SAMEHOST_NAME_MAX + 1];
    size_t agent_name_len;
    int sock;
    char sock_name[SAMEHOST_SOCK_NAME_MAX + 1];
    uint8_t *rx_buf;
    size_t rx_cap;
    uint64_t drop_warn_ns; /* rate limit of "dropped a datagram" warnings */
    uint64_t dropped;
    /* receiver thread: delivers to the agent as datagrams arrive */
    pthread_t rx_thread;
    int rx_running;
    int stop_fd[2];
} samehost_notif_t;

/* The sending end towards one peer (one socket per peer, so a peer that
 * stops reading blocks only notifications to itself). */
typedef struct samehost_notif_peer {
    int sock;
    struct sockaddr_un addr;
    socklen_t addr_len;
    const char *name; /* the peer's agent name, owned by the caller */
} samehost_notif_peer_t;

/* Bind the socket (name "<who>.<pid>.<counter>.<random>").  The agent name
 * (1..63 bytes) becomes the sender of every notification. */
nixl_status_t samehost_notif_open(samehost_notif_t *n, const nixl_host_services_t *host, const char *who,
                                  const char *agent_name, uint32_t uid);
void samehost_notif_close(samehost_notif_t *n);
/* A socket name taken from a peer's conn info is [A-Za-z0-9._-]{1,100}. */
int samehost_notif_name_valid(const uint8_t *s, size_t n);
nixl_status_t samehost_notif_peer_open(const samehost_notif_t *n, samehost_notif_peer_t *peer, const char *peer_name,
                                       const char *sock_name, size_t name_len);
void samehost_notif_peer_close(samehost_notif_peer_t *peer);
/* Size of the datagram carrying len payload bytes from this agent. */
size_t samehost_notif_size(const samehost_notif_t *n, size_t len);
/* Build the datagram in buf (at least samehost_notif_size bytes). */
void samehost_notif_build(const samehost_notif_t *n, uint8_t *buf, const void *msg, size_t len);
/* Send a built datagram; may sleep up to ~2 s while the peer's queue is
 * full, unless *cancel (may be NULL) becomes set.  Any thread. */
nixl_status_t samehost_notif_send_raw(const samehost_notif_t *n, const samehost_notif_peer_t *peer,
                                      const uint8_t *dgram, size_t len, _Atomic int *cancel);
/* A request's notification, built once per post into a buffer the request
 * keeps (grown, never shrunk). */
typedef struct samehost_notif_msg {
    uint8_t *buf;
    size_t cap, len;
    int has; /* the current post carries a notification */
} samehost_notif_msg_t;

/* Build msg (NULL: no notification) into m; NIXL_ERR_TOO_BIG past
 * NIXL_NOTIF_MAX (logged). */
nixl_status_t samehost_notif_msg_set(const samehost_notif_t *n, samehost_notif_msg_t *m, const void *msg, size_t len);
void samehost_notif_msg_free(samehost_notif_msg_t *m);

/* ------------------------------------------------------------------------
 * Connection info of a same-host backend (samehost_notif.c): u32 magic
 * (the backend's own), u16 version, u16 socket-name length, the
 * notification socket name.  Little-endian.  Who the process is travels
 * once, in the agent section of the metadata (version 1 of this conn info
 * carried it too).
 * ------------------------------------------------------------------------ */
#define SAMEHOST_CONN_VERSION 2
#define SAMEHOST_CONN_FIXED 8

/* Same convention as the backend ABI's conn_pack: buf NULL asks the size. */
nixl_status_t samehost_conn_pack(const samehost_notif_t *n, uint32_t magic, void *buf, size_t *len);
/* Validate a peer's conn info completely (untrusted); outputs its socket
 * name (pointing into conn).  Logged errors: NIXL_ERR_BAD_METADATA,
 * NIXL_ERR_MD_VERSION. */
nixl_status_t samehost_conn_unpack(const samehost_notif_t *n, uint32_t magic, const char *peer_name, const void *conn,
                                   size_t len, const char **sock_name_out, size_t *sock_name_len_out);

/* Everything a same-host backend does to load a peer: validate its conn
 * info, check from the core's record that it can be reached from here,
 * open a pidfd on it (checked against its start time) and a socket
 * towards its notification socket.  name_out (SAMEHOST_NAME_MAX + 1
 * bytes) must stay where it is: the notification end keeps a pointer to
 * it.  All or nothing. */
nixl_status_t samehost_peer_connect(const samehost_notif_t *n, int can_ptrace_any, uint32_t magic,
                                    const nixl_be_peer_t *peer, const void *conn, size_t len, char *name_out,
                                    samehost_proc_t *proc_out, samehost_notif_peer_t *notif_out);
void samehost_peer_disconnect(samehost_proc_t *proc, samehost_notif_peer_t *notif);

/* Build and send one notification (at most NIXL_NOTIF_MAX bytes). */
nixl_status_t samehost_notif_send(const samehost_notif_t *n, const samehost_notif_peer_t *peer, const void *msg,
                                  size_t len);

#endif
