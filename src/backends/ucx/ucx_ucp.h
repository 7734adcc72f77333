/*
 * ucx_ucp.h - UCX (libucp and the libucs it brings), loaded at the ucx
 * backend's first create instead of linked into its module (ucx_ucp.c).
 *
 * Every UCX function the backend calls is a pointer in ucx_ucp, and the
 * call sites read as plain UCX code: below, each name is a macro for its
 * pointer.  ucp.h's static inlines are compiled before those macros and
 * would bind the real symbols, so the backend calls none of them (ucp_init
 * is ucp_init_version with our headers' API version); the test
 * ucx_module_lazy checks that the module has no undefined UCX symbol and
 * no DT_NEEDED on UCX.
 */
#ifndef NIXL_BACKENDS_UCX_UCP_H
#define NIXL_BACKENDS_UCX_UCP_H

#include <ucp/api/ucp.h>

#include "nixl/backend.h"

#define UCX_UCP_FUNCS(X)                                                                           \
    X(ucp_get_version)                                                                             \
    X(ucp_get_version_string)                                                                      \
    X(ucp_config_read)                                                                             \
    X(ucp_config_modify)                                                                           \
    X(ucp_config_release)                                                                          \
    X(ucp_init_version)                                                                            \
    X(ucp_cleanup)                                                                                 \
    X(ucp_context_query)                                                                           \
    X(ucp_context_print_info)                                                                      \
    X(ucp_worker_create)                                                                           \
    X(ucp_worker_destroy)                                                                          \
    X(ucp_worker_progress)                                                                         \
    X(ucp_worker_arm)                                                                              \
    X(ucp_worker_get_efd)                                                                          \
    X(ucp_worker_get_address)                                                                      \
    X(ucp_worker_release_address)                                                                  \
    X(ucp_worker_set_am_recv_handler)                                                              \
    X(ucp_ep_create)                                                                               \
    X(ucp_ep_close_nbx)                                                                            \
    X(ucp_ep_flush_nbx)                                                                            \
    X(ucp_worker_flush_nbx)                                                                        \
    X(ucp_ep_print_info)                                                                           \
    X(ucp_worker_print_info)                                                                       \
    X(ucp_ep_rkey_unpack)                                                                          \
    X(ucp_rkey_destroy)                                                                            \
    X(ucp_rkey_pack)                                                                               \
    X(ucp_rkey_buffer_release)                                                                     \
    X(ucp_mem_map)                                                                                 \
    X(ucp_mem_unmap)                                                                               \
    X(ucp_put_nbx)                                                                                 \
    X(ucp_get_nbx)                                                                                 \
    X(ucp_am_send_nbx)                                                                             \
    X(ucp_request_check_status)                                                                    \
    X(ucp_request_cancel)                                                                          \
    X(ucp_request_free)                                                                            \
    X(ucs_status_string)

typedef struct ucx_ucp_api {
#define UCX_UCP_FIELD_(f) __typeof__(f) *f;
    UCX_UCP_FUNCS(UCX_UCP_FIELD_)
#undef UCX_UCP_FIELD_
    const char **ucs_memory_type_names; /* data, in libucs */
} ucx_ucp_api_t;

/* Filled by ucx_ucp_load; read only after it returned NIXL_OK. */
extern ucx_ucp_api_t ucx_ucp;

/* Load UCX once per process: NIXL_UCX_LIB (core table; default
 * libucp.so.0), every function above, and a version at least our headers'
 * API.  NIXL_OK, or NIXL_ERR_NOT_SUPPORTED with one ERROR line (the first
 * time) naming the library and what was wrong.  UCX stays loaded for the
 * life of the process (libucm's hooks cannot be taken back). */
nixl_status_t ucx_ucp_load(const nixl_host_services_t *host);

#ifndef UCX_UCP_NO_MACROS
#define ucp_get_version (*ucx_ucp.ucp_get_version)
#define ucp_get_version_string (*ucx_ucp.ucp_get_version_string)
#define ucp_config_read (*ucx_ucp.ucp_config_read)
#define ucp_config_modify (*ucx_ucp.ucp_config_modify)
#define ucp_config_release (*ucx_ucp.ucp_config_release)
#define ucp_init_version (*ucx_ucp.ucp_init_version)
#define ucp_cleanup (*ucx_ucp.ucp_cleanup)
#define ucp_context_query (*ucx_ucp.ucp_context_query)
#define ucp_context_print_info (*ucx_ucp.ucp_context_print_info)
#define ucp_worker_create (*ucx_ucp.ucp_worker_create)
#define ucp_worker_destroy (*ucx_ucp.ucp_worker_destroy)
#define ucp_worker_progress (*ucx_ucp.ucp_worker_progress)
#define ucp_worker_arm (*ucx_ucp.ucp_worker_arm)
#define ucp_worker_get_efd (*ucx_ucp.ucp_worker_get_efd)
#define ucp_worker_get_address (*ucx_ucp.ucp_worker_get_address)
#define ucp_worker_release_address (*ucx_ucp.ucp_worker_release_address)
#define ucp_worker_set_am_recv_handler (*ucx_ucp.ucp_worker_set_am_recv_handler)
#define ucp_ep_create (*ucx_ucp.ucp_ep_create)
#define ucp_ep_close_nbx (*ucx_ucp.ucp_ep_close_nbx)
#define ucp_ep_flush_nbx (*ucx_ucp.ucp_ep_flush_nbx)
#define ucp_worker_flush_nbx (*ucx_ucp.ucp_worker_flush_nbx)
#define ucp_ep_print_info (*ucx_ucp.ucp_ep_print_info)
#define ucp_worker_print_info (*ucx_ucp.ucp_worker_print_info)
#define ucp_ep_rkey_unpack (*ucx_ucp.ucp_ep_rkey_unpack)
#define ucp_rkey_destroy (*ucx_ucp.ucp_rkey_destroy)
#define ucp_rkey_pack (*ucx_ucp.ucp_rkey_pack)
#define ucp_rkey_buffer_release (*ucx_ucp.ucp_rkey_buffer_release)
#define ucp_mem_map (*ucx_ucp.ucp_mem_map)
#define ucp_mem_unmap (*ucx_ucp.ucp_mem_unmap)
#define ucp_put_nbx (*ucx_ucp.ucp_put_nbx)
#define ucp_get_nbx (*ucx_ucp.ucp_get_nbx)
#define ucp_am_send_nbx (*ucx_ucp.ucp_am_send_nbx)
#define ucp_request_check_status (*ucx_ucp.ucp_request_check_status)
#define ucp_request_cancel (*ucx_ucp.ucp_request_cancel)
#define ucp_request_free (*ucx_ucp.ucp_request_free)
#define ucs_status_string (*ucx_ucp.ucs_status_string)
#define ucs_memory_type_names (ucx_ucp.ucs_memory_type_names)
#endif

#endif
