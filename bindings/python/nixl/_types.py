"""The objects nixl_agent hands out: handles of prepared lists and requests,
and the telemetry and path-accounting records.

A handle belongs to one agent and is released once: release() (or the
agent's release_* method, or garbage collection) frees the C object; a
released handle, or one whose agent was closed, is refused with
nixlInvalidParamError instead of touching freed memory.  Each handle has a
lock, so a release racing a use from another thread is safe.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Optional

from . import _lib
from ._errors import make_error, nixlInvalidParamError

if TYPE_CHECKING:
    from ._api import nixl_agent

L = _lib.lib


class _Handle:
    """A C handle owned by one agent; released once, refused after."""

    __slots__ = ("_agent", "_ptr", "_lock", "__weakref__")
    _kind = "handle"

    def __init__(self, agent: "nixl_agent", ptr: int):
        self._agent = agent
        self._ptr = ptr
        self._lock = threading.Lock()
        agent._handles.add(self)

    def _get(self, agent: "nixl_agent", call: str) -> int:
        """The C pointer; the caller holds self._lock."""
        if self._agent is not agent:
            raise make_error(nixlInvalidParamError, call, f"this {self._kind} belongs to agent {self._agent.name}")
        if not self._ptr:
            raise make_error(nixlInvalidParamError, call, f"this {self._kind} was released")
        return self._ptr

    def _free(self, ptr: int) -> None:
        raise NotImplementedError

    def release(self) -> None:
        with self._lock:
            ptr, self._ptr = self._ptr, 0
            if ptr and not self._agent._closed:
                self._free(ptr)

    def _orphan(self) -> None:
        # The agent is being destroyed, which frees this too.
        with self._lock:
            self._ptr = 0

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: nothing left to release into
            pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(0x{self._ptr:x}{'' if self._ptr else ', released'})"


class nixl_prepped_dlist_handle(_Handle):
    """A descriptor list prepared once (prep_xfer_dlist); requests index into it."""

    __slots__ = ("peer", "count", "mem_type", "runs")
    _kind = "prepared list"

    def __init__(self, agent: "nixl_agent", ptr: int, peer: Optional[str], count: int, mem_type: int,
                 runs: Any = None):
        super().__init__(agent, ptr)
        self.peer = peer
        self.count = count
        self.mem_type = mem_type
        self.runs = runs  # _telemetry.RunCache: NIXL's runs of the list, for telemetry's descCount

    def _free(self, ptr: int) -> None:
        L.nixl_prep_release(ptr)


class nixl_xfer_handle(_Handle):
    """A transfer request: post it with transfer(), poll check_xfer_state()."""

    __slots__ = ("peer", "notif", "posted", "start_us", "_remake", "desc_count", "is_write", "reported")
    _kind = "transfer handle"

    def __init__(self, agent: "nixl_agent", ptr: int, peer: str, notif: bytes, remake: Any,
                 desc_count: Any = None, is_write: bool = True):
        super().__init__(agent, ptr)
        self.desc_count = desc_count  # telemetry's descCount as NIXL counts it: f(nixl_xfer_info_t) -> int
        self.is_write = is_write
        self.reported = False  # this post's completion went to the telemetry file
        self.peer = peer
        self.notif = notif
        self.posted = False
        self.start_us = 0
        self._remake = remake  # how to make this request again with another notification

    def _free(self, ptr: int) -> None:
        L.nixl_xfer_release(ptr)


class nixlXferTelemetry:
    """NIXL's per-request telemetry; times in microseconds."""

    __slots__ = ("startTime", "postDuration", "xferDuration", "totalBytes", "descCount")

    def __init__(self, startTime: int, postDuration: int, xferDuration: int, totalBytes: int, descCount: int):
        self.startTime = startTime
        self.postDuration = postDuration
        self.xferDuration = xferDuration
        self.totalBytes = totalBytes
        self.descCount = descCount

    def __repr__(self) -> str:
        return ("nixlXferTelemetry(startTime=%d, postDuration=%d, xferDuration=%d, totalBytes=%d, descCount=%d)" %
                (self.startTime, self.postDuration, self.xferDuration, self.totalBytes, self.descCount))


class nixl_xfer_info:
    """Where and how a request went (our addition): libnixl's nixl_xfer_info_t."""

    __slots__ = ("backend", "path", "bytes", "descs", "descs_in", "post_ns", "xfer_ns", "posts")

    def __init__(self, c: _lib.nixl_xfer_info_t):
        self.backend = c.backend.decode()
        self.path = c.path.decode()
        self.bytes, self.descs, self.descs_in = c.bytes, c.descs, c.descs_in
        self.post_ns, self.xfer_ns, self.posts = c.post_ns, c.xfer_ns, c.posts

    def __repr__(self) -> str:
        return "nixl_xfer_info(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


class nixl_path_stat:
    """One path's counters (our addition): requests, bytes, descs, errors, fallbacks."""

    __slots__ = ("path", "requests", "bytes", "descs", "errors", "fallbacks")

    def __init__(self, c: _lib.nixl_path_stat_t):
        self.path = c.path.decode()
        self.requests, self.bytes, self.descs = c.requests, c.bytes, c.descs
        self.errors, self.fallbacks = c.errors, c.fallbacks

    def __repr__(self) -> str:
        return "nixl_path_stat(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"
