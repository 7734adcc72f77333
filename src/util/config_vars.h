/*
 * config_vars.h - every NIXL_* variable the core reads: X(name, default, doc).
 * Backends' parameters are added at run time as NIXL_<BACKEND>_<KEY>.
 */
#ifndef NIXL_UTIL_CONFIG_VARS_H
#define NIXL_UTIL_CONFIG_VARS_H

#define NIXL_CONFIG_LIST(X)                                                                      \
    X(NIXL_LOG_LEVEL, "warn", "log level: error, warn, info, debug or trace")                    \
    X(NIXL_PLUGIN_DIR, "", "directories (separated by :) searched first for backend modules libnixl_backend_*.so") \
    X(NIXL_MD_TIMEOUT_MS, "5000", "timeout of metadata socket operations, in milliseconds")      \
    X(NIXL_XFER_TIMEOUT_MS, "0", "deadline of each post of a request that sets no NIXL_OPT_TIMEOUT_MS, in milliseconds: past it nixl_xfer_status cancels the request and returns NIXL_ERR_TIMEOUT; 0 = none") \
    X(NIXL_FALLBACK_WARN_MS, "1000", "at most one fallback warning per path and cause per this many ms") \
    X(NIXL_CUDA_LIB, "libcuda.so.1", "the CUDA driver library loaded at run time (VRAM support)")         \
    X(NIXL_LIBFABRIC_LIB, "libfabric.so.1", "libfabric backend: the libfabric library it loads at its first create (each function at the symbol version of the build-time libfabric)") \
    X(NIXL_UCX_LIB, "libucp.so.0", "ucx backend: the libucp it loads at its first create (UCX at least the build-time version; until then nothing of UCX is in the process)") \
    X(NIXL_ALLOW_FALLBACK, "1", "0 refuses fallback paths: requests that would take one fail instead") \
    X(NIXL_INTRANODE_NETWORK, "fallback", "whether a network backend (libfabric) carries traffic to a peer on this host (same kernel and network namespace): fallback = yes, ranked after shm and cuda_ipc, so only where they cannot reach the peer or its memory; off = never") \
    X(NIXL_LISTEN_ADDR, "0.0.0.0", "address the metadata listener binds to")                   \
    X(NIXL_MD_SECRET_FILE, "", "a file (mode 600 or stricter, 16 to 4096 bytes) holding the secret the deployment's agents share: every listener request and reply then carries an HMAC-SHA256 with a time and nonce, blobs published to etcd are sealed with one, and unauthenticated, replayed or unsealed ones are refused (NIXL_ERR_NOT_AUTHENTICATED); empty: none") \
    X(NIXL_LIB, "", "Python package: the libnixl.so (or its directory) to load instead of searching") \
    /* NIXL's telemetry, as the Python package writes it (bindings/python/nixl/_telemetry.py) */  \
    X(NIXL_TELEMETRY_ENABLE, "", "Python package: telemetry on (1/yes/true/on) or off (0/no/false/off) whatever capture_telemetry says; empty: capture_telemetry decides") \
    X(NIXL_TELEMETRY_DIR, "", "Python package: each agent writes NIXL's telemetry file <dir>/<agent name> (while telemetry is on); empty: no file") \
    X(NIXL_TELEMETRY_BUFFER_SIZE, "4096", "Python package: events the telemetry file's ring holds (a power of 2)") \
    X(NIXL_TELEMETRY_EXPORTER, "", "Python package: NIXL's exporter name; only its file exporter (BUFFER, or empty) is there") \
    X(NIXL_TELEMETRY_ENABLED_METRICS, "", "Python package: comma-separated globs of the telemetry events written; empty: all") \
    X(NIXL_TELEMETRY_RUN_INTERVAL, "", "Python package: accepted for NIXL's sake; events are written when they happen, not on an interval") \
    X(NIXL_PROGRESS_INTERVAL_US, "100", "progress thread period in microseconds")                \
    /* registration pool (src/core/reg_pool.c, reg_peers.c) */                                   \
    X(NIXL_REG_CONCURRENCY, "auto", "registrations of one nixl_mem_register batch running at once: auto = online cores / agents of this host registering at that moment (1..64), N = at most N, 0 = one thread per buffer (unbounded)") \
    X(NIXL_REG_PEERS_FILE, "", "file through which agents of this host count each other for NIXL_REG_CONCURRENCY=auto (empty: /dev/shm/nixl-reg-<uid>)") \
    /* cuda_ipc: core rows, so the table is the same whether or not CUDA headers were found */ \
    X(NIXL_CUDA_IPC_KERNEL, "1", "cuda_ipc: 1 moves many small pieces with one gather/scatter kernel launch (cuda_ipc.kernel); 0 always uses the copy engines (cuda_ipc.ce)") \
    X(NIXL_CUDA_IPC_CE_MIN, "4M", "cuda_ipc: pieces of at least this many bytes (K/M/G suffixes) go to the copy engines") \
    X(NIXL_CUDA_IPC_KERNEL_MIN, "4", "cuda_ipc: fewer small pieces than this in a request go to the copy engines")                \
    X(NIXL_CUDA_IPC_MAP, "1", "cuda_ipc: 0 never maps a peer's VRAM here, so every request between processes takes the staged fallback (cuda_ipc.staged); for tests and broken IPC") \
    /* fault injection (src/core/fault.c, docs/faults.md) */                                     \
    X(NIXL_FAULT, "", "fault injection for tests: comma-separated BACKEND:OP:NTH:ACTION rules, e.g. shm:xfer_post:3:fail,*:reg:*:delay=5ms (OP: reg, peer_load, rkey_load, xfer_prepare, xfer_post, xfer_status, notif_send, progress; NTH: N, N+ or *; ACTION: fail, fail=NIXL_ERR_..., delay=DURATION); empty = off") \
    /* etcd channel (src/core/md_etcd.c) */                                                      \
    X(NIXL_ETCD_ENDPOINTS, "", "etcd endpoints, comma-separated URLs (http://10.0.0.1:2379,...), tried in order: the next one when one fails") \
    X(NIXL_ETCD_NAMESPACE, "/nixl", "prefix of every etcd key nixl writes or reads")            \
    X(NIXL_ETCD_LEASE_TTL_S, "10", "TTL of an agent's etcd lease, in seconds: a dead agent's keys expire after at most this") \
    X(NIXL_ETCD_TIMEOUT_MS, "2000", "timeout of one etcd request, in milliseconds (all endpoints together)") \
    X(NIXL_ETCD_FETCH_TIMEOUT_MS, "30000", "how long an etcd fetch waits for the peer's metadata to appear, by default") \
    X(NIXL_ETCD_CA_FILE, "", "PEM file of the CAs that sign the etcd servers' certificates (https:// endpoints; empty: the system's CAs); the peer and its host name are always verified") \
    X(NIXL_ETCD_CERT_FILE, "", "PEM client certificate presented to etcd (etcd --client-cert-auth); needs NIXL_ETCD_KEY_FILE") \
    X(NIXL_ETCD_KEY_FILE, "", "PEM private key (not encrypted) of NIXL_ETCD_CERT_FILE") \
    X(NIXL_ETCD_USER, "", "etcd user to authenticate as (etcd auth enabled); needs NIXL_ETCD_PASSWORD_FILE") \
    X(NIXL_ETCD_PASSWORD_FILE, "", "a file (mode 600 or stricter) holding the password of NIXL_ETCD_USER, one trailing newline dropped; there is no variable holding the password itself")

#endif
