"""The names NIXL's compiled module (nixl._bindings) exports that Python code
imports directly: the exception classes (``from nixl._bindings import
nixlRemoteDisconnectError``), the memory-type and operation constants, the
descriptor list classes and the telemetry type.  Here they are plain Python
over libnixl.  nixl._api is built on this module (``nixl._api.nixlBind``).
"""

from ._descs import nixlRegDList, nixlXferDList
from ._errors import (nixlBackendError, nixlCancelledError, nixlError, nixlInvalidParamError, nixlMismatchError,
                      nixlNotAllowedError, nixlNoTelemetryError, nixlNotFoundError, nixlNotPostedError,
                      nixlNotSupportedError, nixlRemoteDisconnectError, nixlRepostActiveError, nixlUnknownError)
from ._lib import MEM_BLOCK as BLK_SEG
from ._lib import MEM_DRAM as DRAM_SEG
from ._lib import MEM_FILE as FILE_SEG
from ._lib import MEM_OBJ as OBJ_SEG
from ._lib import MEM_VRAM as VRAM_SEG
from ._lib import OP_READ as NIXL_READ
from ._lib import OP_WRITE as NIXL_WRITE
from ._types import nixlXferTelemetry

NIXL_SUCCESS = 0
NIXL_IN_PROG = 1
DEFAULT_COMM_PORT = 8888
NIXL_INIT_AGENT = "NIXL_INIT_AGENT"

# NIXL's thread synchronization modes (nixl_thread_sync_t), by NIXL's values.
# Every one of them creates the C agent NIXL_THREAD_SERIALIZED: docs/python.md,
# "Threads", says why that is at least as safe as each NIXL mode.
NIXL_THREAD_SYNC_NONE = 0
NIXL_THREAD_SYNC_STRICT = 1
NIXL_THREAD_SYNC_RW = 2
NIXL_THREAD_SYNC_DEFAULT = NIXL_THREAD_SYNC_NONE

__all__ = ["DEFAULT_COMM_PORT", "NIXL_INIT_AGENT", "NIXL_SUCCESS", "NIXL_IN_PROG", "NIXL_THREAD_SYNC_NONE",
           "NIXL_THREAD_SYNC_STRICT", "NIXL_THREAD_SYNC_RW", "NIXL_THREAD_SYNC_DEFAULT", "NIXL_READ", "NIXL_WRITE",
           "DRAM_SEG", "VRAM_SEG", "BLK_SEG", "OBJ_SEG", "FILE_SEG", "nixlRegDList", "nixlXferDList",
           "nixlXferTelemetry", "nixlError", "nixlNotPostedError", "nixlInvalidParamError", "nixlBackendError",
           "nixlNotFoundError", "nixlMismatchError", "nixlNotAllowedError", "nixlRepostActiveError",
           "nixlUnknownError", "nixlNotSupportedError", "nixlRemoteDisconnectError", "nixlCancelledError",
           "nixlNoTelemetryError"]
