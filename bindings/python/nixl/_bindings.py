"""NIXL's compiled module (nixl._bindings), here plain Python over libnixl.

What Python code imports from it: the exception classes (``from
nixl._bindings import nixlRemoteDisconnectError``), the memory-type,
operation and status constants and their enums, the descriptor list classes,
the telemetry type, and the low-level agent (nixlAgentConfig, nixlAgent:
integer handles, NIXL's status values; see _lowlevel.py).  nixl._api is built
on this module (``nixl._api.nixlBind``): nixl_agent makes its C agent with
``nixlBind.nixlAgent(name, nixlBind.nixlAgentConfig())``, looked up at each
call, so a test may replace it.
"""

from enum import IntEnum

from . import _lib
from ._descs import nixlRegDList, nixlRemoteDList, nixlXferDList
from ._errors import (nixlBackendError, nixlCancelledError, nixlError, nixlInvalidParamError, nixlMismatchError,
                      nixlNotAllowedError, nixlNoTelemetryError, nixlNotFoundError, nixlNotPostedError,
                      nixlNotSupportedError, nixlRemoteDisconnectError, nixlRepostActiveError, nixlUnknownError)
from ._lowlevel import DEFAULT_COMM_PORT, NIXL_INIT_AGENT, NIXL_STATUS, nixlAgent, nixlAgentConfig
from ._types import nixlXferTelemetry

# libnixl has no UCX GPU device API: prepMemView / prep_mem_view raise nixlNotSupportedError.
HAVE_UCX_GPU_DEVICE_API = False


class nixl_mem_t(IntEnum):
    DRAM_SEG = _lib.MEM_DRAM
    VRAM_SEG = _lib.MEM_VRAM
    BLK_SEG = _lib.MEM_BLOCK
    OBJ_SEG = _lib.MEM_OBJ
    FILE_SEG = _lib.MEM_FILE


class nixl_xfer_op_t(IntEnum):
    NIXL_READ = _lib.OP_READ
    NIXL_WRITE = _lib.OP_WRITE


class nixl_cost_t(IntEnum):
    NIXL_COST_ANALYTICAL_BACKEND = 0


# NIXL's status values: what the low-level calls return (SUCCESS, IN_PROG) or name.
nixl_status_t = IntEnum("nixl_status_t", NIXL_STATUS)


class nixl_thread_sync_t(IntEnum):
    NIXL_THREAD_SYNC_NONE = 0
    NIXL_THREAD_SYNC_STRICT = 1
    NIXL_THREAD_SYNC_RW = 2
    NIXL_THREAD_SYNC_DEFAULT = 0


DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG = (nixl_mem_t.DRAM_SEG, nixl_mem_t.VRAM_SEG, nixl_mem_t.BLK_SEG,
                                                  nixl_mem_t.OBJ_SEG, nixl_mem_t.FILE_SEG)
NIXL_READ, NIXL_WRITE = nixl_xfer_op_t.NIXL_READ, nixl_xfer_op_t.NIXL_WRITE
NIXL_COST_ANALYTICAL_BACKEND = nixl_cost_t.NIXL_COST_ANALYTICAL_BACKEND
(NIXL_IN_PROG, NIXL_SUCCESS, NIXL_ERR_NOT_POSTED, NIXL_ERR_INVALID_PARAM, NIXL_ERR_BACKEND, NIXL_ERR_NOT_FOUND,
 NIXL_ERR_MISMATCH, NIXL_ERR_NOT_ALLOWED, NIXL_ERR_REPOST_ACTIVE, NIXL_ERR_UNKNOWN, NIXL_ERR_NOT_SUPPORTED,
 NIXL_ERR_REMOTE_DISCONNECT, NIXL_ERR_CANCELED, NIXL_ERR_NO_TELEMETRY) = tuple(nixl_status_t)

# NIXL's thread synchronization modes (nixl_thread_sync_t), by NIXL's values.
# Every one of them creates the C agent NIXL_THREAD_SERIALIZED: docs/python.md,
# "Threads", says why that is at least as safe as each NIXL mode.
NIXL_THREAD_SYNC_NONE = 0
NIXL_THREAD_SYNC_STRICT = 1
NIXL_THREAD_SYNC_RW = 2
NIXL_THREAD_SYNC_DEFAULT = NIXL_THREAD_SYNC_NONE

__all__ = ["DEFAULT_COMM_PORT", "NIXL_INIT_AGENT", "HAVE_UCX_GPU_DEVICE_API", "NIXL_THREAD_SYNC_NONE",
           "NIXL_THREAD_SYNC_STRICT", "NIXL_THREAD_SYNC_RW", "NIXL_THREAD_SYNC_DEFAULT", "NIXL_READ", "NIXL_WRITE",
           "NIXL_COST_ANALYTICAL_BACKEND", "DRAM_SEG", "VRAM_SEG", "BLK_SEG", "OBJ_SEG", "FILE_SEG",
           "nixl_mem_t", "nixl_xfer_op_t", "nixl_cost_t", "nixl_status_t", "nixl_thread_sync_t",
           "nixlRegDList", "nixlXferDList", "nixlRemoteDList", "nixlXferTelemetry", "nixlAgentConfig",
           "nixlAgent", "nixlError", "nixlNotPostedError", "nixlInvalidParamError", "nixlBackendError",
           "nixlNotFoundError", "nixlMismatchError", "nixlNotAllowedError", "nixlRepostActiveError",
           "nixlUnknownError", "nixlNotSupportedError", "nixlRemoteDisconnectError", "nixlCancelledError",
           "nixlNoTelemetryError", "NIXL_IN_PROG", "NIXL_SUCCESS", "NIXL_ERR_NOT_POSTED", "NIXL_ERR_INVALID_PARAM",
           "NIXL_ERR_BACKEND", "NIXL_ERR_NOT_FOUND", "NIXL_ERR_MISMATCH", "NIXL_ERR_NOT_ALLOWED",
           "NIXL_ERR_REPOST_ACTIVE", "NIXL_ERR_UNKNOWN", "NIXL_ERR_NOT_SUPPORTED", "NIXL_ERR_REMOTE_DISCONNECT",
           "NIXL_ERR_CANCELED", "NIXL_ERR_NO_TELEMETRY"]
assert set(__all__) >= set(NIXL_STATUS)
