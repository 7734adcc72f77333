"""The exceptions, named as NIXL's Python bindings name them, and which of
libnixl's statuses raises which.

NIXL has twelve error classes; libnixl has finer statuses.  Each status maps
to the NIXL class whose meaning it shares (the table below, also in
docs/python.md), and every raised exception carries the libnixl status too:
``e.status`` (the negative code), ``e.status_name`` ("NIXL_ERR_UNKNOWN_PEER")
and ``e.call`` (the Python method that failed).  ``str(e)`` starts with NIXL's
status string ("NIXL_ERR_NOT_FOUND") so code that matches on it keeps working.

This module does not load the library: it can be imported for its classes
alone.
"""

from __future__ import annotations

from typing import Optional


class nixlError(RuntimeError):
    """Base of every nixl error (our addition; NIXL's classes share only Exception)."""

    nixl_status_str = "NIXL_ERR_UNKNOWN"

    def __init__(self, message: str = "", status: Optional[int] = None, status_name: Optional[str] = None,
                 call: Optional[str] = None):
        super().__init__(message or self.nixl_status_str)
        self.status = status
        self.status_name = status_name
        self.call = call


class nixlNotPostedError(nixlError):
    """A request was asked for its state before it was ever posted."""
    nixl_status_str = "NIXL_ERR_NOT_POSTED"


class nixlInvalidParamError(nixlError):
    nixl_status_str = "NIXL_ERR_INVALID_PARAM"


class nixlBackendError(nixlError):
    nixl_status_str = "NIXL_ERR_BACKEND"


class nixlNotFoundError(nixlError):
    nixl_status_str = "NIXL_ERR_NOT_FOUND"


class nixlMismatchError(nixlError):
    nixl_status_str = "NIXL_ERR_MISMATCH"


class nixlNotAllowedError(nixlError):
    nixl_status_str = "NIXL_ERR_NOT_ALLOWED"


class nixlRepostActiveError(nixlError):
    nixl_status_str = "NIXL_ERR_REPOST_ACTIVE"


class nixlUnknownError(nixlError):
    nixl_status_str = "NIXL_ERR_UNKNOWN"


class nixlNotSupportedError(nixlError):
    nixl_status_str = "NIXL_ERR_NOT_SUPPORTED"


class nixlRemoteDisconnectError(nixlError):
    nixl_status_str = "NIXL_ERR_REMOTE_DISCONNECT"


class nixlCancelledError(nixlError):
    nixl_status_str = "NIXL_ERR_CANCELED"


class nixlNoTelemetryError(nixlError):
    nixl_status_str = "NIXL_ERR_NO_TELEMETRY"


class nixlNotImplementedYet(nixlNotSupportedError, NotImplementedError):
    """A NIXL feature whose libnixl part is still being built; the message names the issue."""


class nixlInvalidKeyError(nixlInvalidParamError, KeyError):
    """An unknown operation or memory type name: NIXL's Python looks these up in a
    dict and raises KeyError; ours is that KeyError and a nixlInvalidParamError."""

    __str__ = BaseException.__str__  # not KeyError's repr() of the message


class nixlInvalidValueError(nixlInvalidParamError, ValueError):
    """A value NIXL's C++ refuses with std::invalid_argument (ValueError in Python),
    such as an empty agent name; ours is that ValueError and a nixlInvalidParamError."""


ALL = (nixlNotPostedError, nixlInvalidParamError, nixlBackendError, nixlNotFoundError, nixlMismatchError,
       nixlNotAllowedError, nixlRepostActiveError, nixlUnknownError, nixlNotSupportedError,
       nixlRemoteDisconnectError, nixlCancelledError, nixlNoTelemetryError)

# libnixl status (include/nixl.h) -> the NIXL class of the same meaning.
STATUS_CLASS = {
    "NIXL_ERR_INVALID_PARAM": nixlInvalidParamError,
    "NIXL_ERR_NULL": nixlInvalidParamError,
    "NIXL_ERR_LENGTH_MISMATCH": nixlMismatchError,
    "NIXL_ERR_ZERO_LENGTH": nixlInvalidParamError,
    "NIXL_ERR_NOT_SUPPORTED": nixlNotSupportedError,
    "NIXL_ERR_NO_MEMORY": nixlBackendError,
    "NIXL_ERR_TOO_BIG": nixlInvalidParamError,
    "NIXL_ERR_NOT_REGISTERED": nixlNotFoundError,
    "NIXL_ERR_OVERLAP": nixlNotAllowedError,
    "NIXL_ERR_REG_MISMATCH": nixlNotFoundError,
    "NIXL_ERR_MEM_TYPE": nixlNotSupportedError,
    "NIXL_ERR_UNKNOWN_PEER": nixlNotFoundError,
    "NIXL_ERR_PEER_INVALIDATED": nixlRemoteDisconnectError,
    "NIXL_ERR_STALE": nixlMismatchError,
    "NIXL_ERR_BAD_METADATA": nixlInvalidParamError,
    "NIXL_ERR_MD_VERSION": nixlNotSupportedError,
    "NIXL_ERR_PEER_GONE": nixlRemoteDisconnectError,
    "NIXL_ERR_SELF": nixlNotAllowedError,
    "NIXL_ERR_NAME_TAKEN": nixlNotAllowedError,
    "NIXL_ERR_NOT_AUTHENTICATED": nixlNotAllowedError,
    "NIXL_ERR_IN_FLIGHT": nixlRepostActiveError,
    "NIXL_ERR_CANCELED": nixlCancelledError,
    "NIXL_ERR_NO_PATH": nixlNotFoundError,
    "NIXL_ERR_TIMEOUT": nixlBackendError,
    "NIXL_ERR_XFER_FAILED": nixlBackendError,
    "NIXL_ERR_UNKNOWN_BACKEND": nixlNotFoundError,
    "NIXL_ERR_BACKEND": nixlBackendError,
    "NIXL_ERR_PERMISSION": nixlNotAllowedError,
    "NIXL_ERR_NO_CUDA": nixlNotSupportedError,
    "NIXL_ERR_IO": nixlBackendError,
    "NIXL_ERR_ABI": nixlNotSupportedError,
    "NIXL_ERR_EXISTS": nixlNotAllowedError,
}


def class_for(status_name: str) -> type:
    """The exception class for a libnixl status symbol; nixlUnknownError for one this table lacks."""
    return STATUS_CLASS.get(status_name, nixlUnknownError)


def make_error(cls: type, call: str, detail: str, status: Optional[int] = None,
               status_name: Optional[str] = None) -> nixlError:
    """An exception whose text reads '<NIXL status>: <call>: <detail>'."""
    return cls(f"{cls.nixl_status_str}: {call}: {detail}", status, status_name, call)


def check(st: int, call: str, detail: str = "") -> int:
    """Return st when it is NIXL_OK or NIXL_IN_PROG; raise the status's class otherwise."""
    if st >= 0:
        return st
    from . import _lib  # here, so the classes above import without the library
    name = _lib.status_name(st)
    text = f"{name} ({_lib.strerror(st)})"
    if detail:
        text += f"; {detail}"
    raise make_error(class_for(name), call, text, st, name)
