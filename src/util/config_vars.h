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
    X(NIXL_FALLBACK_WARN_MS, "1000", "at most one fallback warning per path and cause per this many ms") \
    X(NIXL_CUDA_LIB, "libcuda.so.1", "the CUDA driver library loaded at run time (VRAM support)")         \
    X(NIXL_ALLOW_FALLBACK, "1", "0 refuses fallback paths: requests that would take one fail instead") \
    X(NIXL_LISTEN_ADDR, "0.0.0.0", "address the metadata listener binds to")                   \
    X(NIXL_PROGRESS_INTERVAL_US, "100", "progress thread period in microseconds")

#endif
