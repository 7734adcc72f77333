"""nixl: NIXL's Python API over libnixl (C), for serving engines' KV connectors.

    from nixl._api import nixl_agent, nixl_agent_config

Importing loads libnixl.so (NIXL_LIB, the Meson build tree the process runs
in, or the system loader: see nixl._lib).  docs/python.md is the guide.
"""

from ._api import (BACKEND_ALIASES, DEFAULT_COMM_PORT, NIXL_INIT_AGENT, available_backends, nixl_agent,
                   nixl_agent_config, nixl_thread_sync_t)
from ._descs import nixlRegDList, nixlRemoteDList, nixlXferDList
from ._errors import (nixlBackendError, nixlCancelledError, nixlError, nixlInvalidKeyError, nixlInvalidParamError,
                      nixlInvalidValueError, nixlMismatchError,
                      nixlNotAllowedError, nixlNoTelemetryError, nixlNotFoundError, nixlNotImplementedYet,
                      nixlNotPostedError, nixlNotSupportedError, nixlRemoteDisconnectError, nixlRepostActiveError,
                      nixlUnknownError)
from ._lib import path as library_path
from ._lib import version as library_version
from ._mem import alloc_array, alloc_buffer
from ._types import nixl_path_stat, nixl_prepped_dlist_handle, nixl_xfer_handle, nixl_xfer_info, nixlXferTelemetry

__version__ = "0.1.0"

__all__ = ["BACKEND_ALIASES", "DEFAULT_COMM_PORT", "NIXL_INIT_AGENT", "available_backends", "nixl_agent",
           "nixl_agent_config", "nixl_thread_sync_t", "nixlRegDList", "nixlXferDList", "nixlRemoteDList", "nixl_path_stat",
           "nixl_prepped_dlist_handle",
           "nixl_xfer_handle", "nixl_xfer_info", "nixlXferTelemetry", "library_path", "library_version",
           "alloc_array", "alloc_buffer", "nixlError", "nixlNotPostedError", "nixlInvalidParamError",
           "nixlBackendError", "nixlNotFoundError", "nixlMismatchError", "nixlNotAllowedError",
           "nixlRepostActiveError", "nixlUnknownError", "nixlNotSupportedError", "nixlRemoteDisconnectError",
           "nixlCancelledError", "nixlNoTelemetryError", "nixlNotImplementedYet", "nixlInvalidKeyError",
           "nixlInvalidValueError"]
