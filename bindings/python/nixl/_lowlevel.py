"""NIXL's low-level classes (nixl._bindings.nixlAgentConfig, nixlAgent) over libnixl.

NIXL's compiled module exposes its C++ agent to Python with integer handles:
createBackend returns a backend handle, prepXferDlist a list handle,
createXferReq / makeXferReq a request handle, and calls return NIXL's status
values (NIXL_SUCCESS, NIXL_IN_PROG) or raise the nixl*Error of a failure.
This module gives the same surface over libnixl's C API; nixl_agent
(nixl._api) gets its C agent from nixlAgent, so a test that replaces
nixl._bindings.nixlAgent sees every agent being made.

The integers are this module's own keys, valid in the agent that gave them:
a request keeps its key when a post with another notification makes it again
(libnixl fixes a request's notification when it is made).  Calls libnixl
has no counterpart for raise nixlNotSupportedError saying what is missing.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from typing import Any, Optional

from . import _lib
from ._descs import create_xfer, index_array, is_strided, nixlRegDList, nixlXferDList, strided_rows, to_dlist
from ._errors import (check, make_error, nixlInvalidKeyError, nixlInvalidParamError, nixlInvalidValueError,
                      nixlMismatchError, nixlNoTelemetryError, nixlNotFoundError, nixlNotSupportedError,
                      nixlRepostActiveError)
from ._telemetry import RunCache, TelemetryFile, merged_count, telemetry_enabled  # noqa: F401
from ._types import nixlXferTelemetry

L = _lib.lib

# NIXL's status values (nixl_status_t), which the low-level calls return or name.
NIXL_STATUS = {
    "NIXL_IN_PROG": 1, "NIXL_SUCCESS": 0, "NIXL_ERR_NOT_POSTED": -1, "NIXL_ERR_INVALID_PARAM": -2,
    "NIXL_ERR_BACKEND": -3, "NIXL_ERR_NOT_FOUND": -4, "NIXL_ERR_MISMATCH": -5, "NIXL_ERR_NOT_ALLOWED": -6,
    "NIXL_ERR_REPOST_ACTIVE": -7, "NIXL_ERR_UNKNOWN": -8, "NIXL_ERR_NOT_SUPPORTED": -9,
    "NIXL_ERR_REMOTE_DISCONNECT": -10, "NIXL_ERR_CANCELED": -11, "NIXL_ERR_NO_TELEMETRY": -12,
}
NIXL_SUCCESS = NIXL_STATUS["NIXL_SUCCESS"]
NIXL_IN_PROG = NIXL_STATUS["NIXL_IN_PROG"]
NIXL_ERR_NOT_FOUND = NIXL_STATUS["NIXL_ERR_NOT_FOUND"]
DEFAULT_COMM_PORT = 8888
NIXL_INIT_AGENT = "NIXL_INIT_AGENT"

# NIXL backend names -> libnixl backends.  An alias stands for every backend of
# ours that does part of what NIXL's backend does; those present in this
# libnixl are created (the core then picks per request by locality and
# memory type).  Names of ours are accepted as they are.  Every plugin of
# NIXL's src/plugins is here (and UCX_MO, MOCK_DRAM, of its older trees and
# tests); one whose backends of ours are not built is nixlNotFoundError,
# naming them (why_missing).
BACKEND_ALIASES: dict[str, tuple[str, ...]] = {
    "UCX": ("shm", "cuda_ipc", "ucx"),
    "UCX_MO": ("shm", "cuda_ipc", "ucx"),
    "LIBFABRIC": ("shm", "cuda_ipc", "libfabric"),
    "UCCL": ("shm", "cuda_ipc", "libfabric"),
    "MOONCAKE": ("shm", "cuda_ipc", "libfabric"),
    "GPUNETIO": ("cuda_ipc", "libfabric"),
    "POSIX": ("posix",),
    "HF3FS": ("posix",),
    "MOCK_DRAM": ("posix",),
    "GDS": ("gds",),
    "GDS_MT": ("gds",),
    "GUSLI": ("block",),
    "OBJ": ("obj",),
    "AZURE_BLOB": ("obj",),
    "INFINIA": ("obj",),
}
# What each NIXL name is, for the error that says what is missing.
BACKEND_KIND: dict[str, str] = {
    "UCX": "transfers within and across hosts", "UCX_MO": "UCX, multi-object",
    "LIBFABRIC": "transfers across hosts over libfabric", "UCCL": "GPU transfers across hosts (UCCL P2P)",
    "MOONCAKE": "transfers across hosts (Mooncake transfer engine)",
    "GPUNETIO": "GPU-initiated RDMA (DOCA GPUNetIO)", "POSIX": "files", "HF3FS": "files on 3FS",
    "MOCK_DRAM": "NIXL's test backend for DRAM and FILE", "GDS": "files to GPU memory (GPUDirect Storage)",
    "GDS_MT": "files to GPU memory, multi-threaded", "GUSLI": "block devices", "OBJ": "object storage (S3)",
    "AZURE_BLOB": "object storage (Azure Blob)", "INFINIA": "object storage (DDN Infinia)",
}
# UCX is SGLang's and vLLM's default and must reach other hosts: without a ucx
# backend built, it takes in libfabric (said once per process).
UCX_CROSS_HOST_STANDIN = "libfabric"
_standin_said: list[bool] = []

# NIXL init parameters that mean one of ours; any other key given to an alias
# is dropped with a warning (it configures a transport we do not have).
PARAM_ALIASES = {"num_threads": "threads", "thread_count": "threads", "num_cpus": "threads",
                 # NIXL's UCX options: our ucx backend's error_handling (peer; none runs as
                 # peer, with a warning) and devices (UCX's NET_DEVICES, names checked against
                 # this UCX's devices)
                 "ucx_error_handling_mode": "error_handling", "ucx_devices": "devices",
                 "device_list": "devices"}

OPS = {"WRITE": _lib.OP_WRITE, "READ": _lib.OP_READ}
def to_bytes(msg: Any) -> bytes:
    if msg is None:
        return b""
    return msg.encode() if isinstance(msg, str) else bytes(msg)


def agent_name(name: Any) -> str:
    """A peer's name as str: NIXL's calls take str or bytes (add_remote_agent returns bytes)."""
    if isinstance(name, (bytes, bytearray, memoryview)):
        return bytes(name).decode()
    if not isinstance(name, str):
        raise TypeError(f"an agent name is str or bytes, not {type(name).__name__}")
    return name


def op_code(operation: Any, call: str) -> int:
    """'READ'/'WRITE' or NIXL_READ/NIXL_WRITE; any other is nixlInvalidKeyError (a KeyError, as NIXL)."""
    if isinstance(operation, str):
        if operation in OPS:
            return OPS[operation]
    elif isinstance(operation, int) and not isinstance(operation, bool) and operation in OPS.values():
        return int(operation)
    raise make_error(nixlInvalidKeyError, call, f"operation must be 'READ' or 'WRITE', not {operation!r}")


def available() -> dict[str, Any]:
    """Backends this libnixl has: name -> {mem_types, caps, params, description, origin}."""
    infos = ctypes.POINTER(_lib.nixl_backend_info_t)()
    n = ctypes.c_size_t()
    check(L.nixl_backends_available(ctypes.byref(infos), ctypes.byref(n)), "nixl_backends_available")
    out = {}
    for i in range(n.value):
        b = infos[i]
        params = {}
        for j in range(b.num_params):
            p = b.params[j]
            params[p.key.decode()] = (p.default_value or b"").decode()
        out[b.name.decode()] = {
            "mem_types": [v for k, v in _lib.MEM_NAMES.items() if b.mem_types & (1 << k)],
            "caps": [v for k, v in _lib.CAP_NAMES.items() if b.caps & k],
            "params": params,
            "description": (b.description or b"").decode(),
            "origin": (b.origin or b"").decode(),
        }
    return out


def targets(plugins: dict[str, Any], name: str) -> list[str]:
    """Our backends that a name stands for (itself, or those of a NIXL alias that are built).

    UCX and UCX_MO take in libfabric while no ucx backend is built, so that
    NIXL's default reaches other hosts (logged once per process)."""
    if name in plugins:
        return [name]
    want = list(BACKEND_ALIASES.get(name, ()))
    if "ucx" in want and "ucx" not in plugins and UCX_CROSS_HOST_STANDIN in plugins:
        want.append(UCX_CROSS_HOST_STANDIN)
        if not _standin_said:
            _standin_said.append(True)
            import logging
            logging.getLogger("nixl").info("NIXL's %s includes our %s backend: no ucx backend is built, and %s "
                                           "is what reaches other hosts", name, UCX_CROSS_HOST_STANDIN,
                                           UCX_CROSS_HOST_STANDIN)
    return [b for b in want if b in plugins]


def why_missing(name: str, plugins: Optional[dict[str, Any]] = None) -> str:
    """Why a backend name maps to nothing built: what it stands for, and what this libnixl has."""
    have = f" (this libnixl has: {', '.join(plugins) or 'none'})" if plugins is not None else ""
    if name in BACKEND_ALIASES:
        ours = BACKEND_ALIASES[name]
        return (f"NIXL's {name} ({BACKEND_KIND.get(name, 'a NIXL backend')}) maps to our "
                f"{', '.join(ours)}, {'which is not' if len(ours) == 1 else 'none of which is'} built{have}")
    return f"unknown backend name: neither NIXL's ({', '.join(BACKEND_ALIASES)}) nor ours{have}"


def translate(plugins: dict[str, Any], alias: str, ours: str, params: dict[str, str], log: Any,
              who: str) -> dict[str, str]:
    """A NIXL backend's init parameters, as our backend `ours` names them (others dropped, said
    unless another backend the alias stands for takes them)."""
    known = plugins[ours]["params"]
    out = {}
    for k, v in params.items():
        k2 = PARAM_ALIASES.get(k, k)
        if k2 in known:
            out[k2] = v
        elif any(k2 in plugins[b]["params"] for b in targets(plugins, alias)):
            continue  # num_threads -> shm's threads: nothing to say about cuda_ipc and libfabric
        else:
            log.warning("agent %s: %s parameter %s=%s has no meaning for our %s backend: ignored", who, alias, k,
                        v, ours)
    return out


# ---- notifications: nixl_notifs_get hands each one to _notif_cb ----
# arg names the list of the call in flight (several threads may drain at once).
# Module-level so that agents hold no reference cycle through their callback.
_sinks: dict[int, list] = {}
_sink_ids = itertools.count(1)


def _on_notif(sender: bytes, msg: int, n: int, arg: int) -> None:
    sink = _sinks.get(arg)
    if sink is not None:
        sink.append((sender.decode(errors="replace"), ctypes.string_at(msg, n) if n else b""))


_notif_cb = _lib.NOTIF_CB(_on_notif)


def drain(agent_ptr: int, call: str) -> list[tuple[str, bytes]]:
    """Every notification received since the last drain, as (sender, message), in arrival order."""
    token = next(_sink_ids)
    sink: list[tuple[str, bytes]] = []
    _sinks[token] = sink
    try:
        check(L.nixl_notifs_get(agent_ptr, _notif_cb, token, None), call)
    finally:
        del _sinks[token]
    return sink


def partial_blob(agent: Any, dl: Any, inc_conn_info: bool, opt: Any, call: str) -> bytes:
    """nixl_md_get_local_partial of the descriptor list dl, as bytes (both APIs' partial-metadata call)."""
    c = dl._c()
    blob = ctypes.c_void_p()
    n = ctypes.c_size_t()
    check(L.nixl_md_get_local_partial(agent, ctypes.byref(c), _lib.MD_PARTIAL_CONN_INFO if inc_conn_info else 0,
                                      opt, ctypes.byref(blob), ctypes.byref(n)), call, f"{len(dl)} descriptors")
    try:
        return ctypes.string_at(blob.value, n.value)
    finally:
        L.nixl_free(blob)


def make_opt(handles: Optional[list[int]], notif: Optional[bytes], call: str,
             timeout_ms: Optional[int] = None) -> tuple[Any, Any]:
    """A nixl_opt_args_t (and what it points to, to keep alive), or (None, None) when nothing is set."""
    if not handles and notif is None and timeout_ms is None:
        return None, None
    opt = _lib.nixl_opt_args_t()
    keep: list[Any] = []
    if timeout_ms is not None:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 <= timeout_ms <= 0xFFFFFFFF:
            raise make_error(nixlInvalidParamError, call,
                             f"timeout_ms must be an int from 0 (no deadline) to 2**32-1, not {timeout_ms!r}")
        opt.field_mask |= _lib.OPT_TIMEOUT_MS
        opt.timeout_ms = timeout_ms
    if handles:
        arr = (ctypes.c_void_p * len(handles))(*handles)
        keep.append(arr)
        opt.field_mask |= _lib.OPT_BACKENDS
        opt.backends = ctypes.cast(arr, ctypes.c_void_p)
        opt.num_backends = len(handles)
    if notif is not None:
        buf = ctypes.create_string_buffer(notif, max(len(notif), 1))
        keep.append(buf)
        opt.field_mask |= _lib.OPT_NOTIF
        opt.notif = ctypes.cast(buf, ctypes.c_void_p)
        opt.notif_len = len(notif)
    keep.append(opt)
    return ctypes.byref(opt), keep


def telemetry_of(info: _lib.nixl_xfer_info_t, start_us: int, desc_count: Any) -> nixlXferTelemetry:
    """NIXL's telemetry of a request: durations in microseconds, rounded up (a post that took any
    time reports at least 1 us); descCount as NIXL counts it: desc_count(info), or as given when
    desc_count is None (createXferReq, makeXferReq with skip_desc_merge: NIXL does not merge)."""
    return nixlXferTelemetry(start_us, -(-info.post_ns // 1000), -(-info.xfer_ns // 1000), info.bytes,
                             info.descs_in if desc_count is None else desc_count(info))


def merged_counter(lruns: Any, lkeep: Any, rruns: Any, rkeep: Any) -> Any:
    """descCount of a makeXferReq / make_prepped_xfer request: NIXL's merging of the indices,
    worked out the first time it is asked for (_telemetry.merged_count), then kept."""
    got: list[int] = []

    def count(_info: Any) -> int:
        if not got:
            got.append(merged_count(lruns, lkeep, rruns, rkeep))
        return got[0]
    return count


# ---- estimateXferCost / estimate_xfer_cost: our own analytical model ----
# Sustained rate of each path (GB/s = 1000 bytes/us) and the fixed costs of a
# request, from what each path does: shm.map is one memcpy per run in the
# sender; shm.cma one process_vm_writev per run (a syscall, page walks);
# cuda_ipc.ce copy-engine DMA over NVLink / PCIe; cuda_ipc.kernel a copy
# kernel (many small runs); cuda_ipc.staged through host memory on both
# sides; libfabric the NIC.  A path not listed takes its backend's rate,
# else UNKNOWN_PATH_GBPS.  docs/python.md, "Transfers", has the table.
PATH_GBPS = {"shm.map": 8.0, "shm.cma": 4.0, "shm": 4.0, "cuda_ipc.ce": 40.0, "cuda_ipc.kernel": 30.0,
             "cuda_ipc.kernel.indexed": 30.0, "cuda_ipc": 40.0, "cuda_ipc.staged": 5.0, "libfabric": 5.0, "ucx": 10.0}
UNKNOWN_PATH_GBPS = 1.0
REQUEST_US = 5.0  # post, completion, notification
DESC_US = {"shm.cma": 0.5, "shm.map": 0.05}  # each run after merging (others: DEFAULT_DESC_US)
DEFAULT_DESC_US = 0.2
COST_MARGIN = 0.5  # the error margin: half the estimate


def estimate_cost(info: _lib.nixl_xfer_info_t) -> tuple[int, int]:
    """(duration_us, err_margin_us) of a request from its path, bytes and runs (after merging)."""
    path, backend = info.path.decode(), info.backend.decode()
    gbps = PATH_GBPS.get(path) or PATH_GBPS.get(path.split(".")[0]) or PATH_GBPS.get(backend) or UNKNOWN_PATH_GBPS
    per_desc = DESC_US.get(path, DEFAULT_DESC_US)
    us = REQUEST_US + per_desc * info.descs + info.bytes / (gbps * 1000.0)
    d = max(1, int(-(-us // 1)))
    return d, max(1, int(-(-d * COST_MARGIN // 1)))



def query_mem(agent_ptr: int, descs: Any, names: list, call: str) -> list:
    """NIXL's queryMem / query_memory through nixl_mem_query: per descriptor None (it does not exist or
    cannot be reached) or a dict of strings, as NIXL's file backends answer ({"size", "mode", "mtime"})."""
    if not isinstance(descs, nixlRegDList):
        raise TypeError(f"{call}: descs must be a nixlRegDList, not {type(descs).__name__}")
    c = descs._c()  # an empty list is answered [] by a backend that can query, refused by others
    out = (_lib.nixl_mem_info_t * max(len(descs), 1))()
    st = _lib.NIXL_OK
    for name in names:  # the first of the handle's backends that can answer
        st = L.nixl_mem_query(agent_ptr, ctypes.byref(c), name.encode(), out)
        if st == _lib.NIXL_OK:
            break
    check(st, call, f"memory query of {len(descs)} {descs.mem_type} descriptors through {', '.join(names)}")
    return [{"size": str(r.size), "mode": str(r.mode), "mtime": str(r.mtime)} if r.accessible else None
            for r in out[:len(descs)]]

class nixlAgentConfig:
    """NIXL's agent configuration (C++ nixlAgentConfig), positional as NIXL's constructors:
    (useProgThread, useListenThread, listenPort, syncMode, num_workers, pthrDelay, lthrDelay,
    captureTelemetry).  libnixl uses useProgThread, useListenThread, listenPort and pthrDelay
    (the progress thread's period in us, 0 = libnixl's default); captureTelemetry turns telemetry
    on (_telemetry.py); syncMode is kept (every mode gives a serialized C agent, docs/python.md);
    the rest are kept and unused."""

    def __init__(self, useProgThread: bool = False, useListenThread: bool = False,
                 listenPort: int = DEFAULT_COMM_PORT, syncMode: int = 0, num_workers: int = 1, pthrDelay: int = 0,
                 lthrDelay: int = 100000, captureTelemetry: bool = False, etcdWatchTimeout: Any = 5000000):
        self.useProgThread = bool(useProgThread)
        self.useListenThread = bool(useListenThread)
        self.listenPort = int(listenPort)
        self.syncMode = int(getattr(syncMode, "value", syncMode))
        self.num_workers = int(num_workers)
        self.pthrDelay = int(pthrDelay)
        self.lthrDelay = int(lthrDelay)
        self.captureTelemetry = bool(captureTelemetry)
        self.etcdWatchTimeout = etcdWatchTimeout

    def __repr__(self) -> str:
        return ("nixlAgentConfig(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")")


class _Req:
    """A request made through nixlAgent: its C pointer now, and how to make it again."""

    __slots__ = ("ptr", "notif", "posted", "start_us", "remake", "peer", "desc_count", "is_write", "reported")

    def __init__(self, ptr: int, notif: bytes, remake: Any, peer: str, desc_count: Any, is_write: bool):
        self.ptr, self.notif, self.remake, self.peer, self.desc_count = ptr, notif, remake, peer, desc_count
        self.is_write = is_write
        self.reported = False
        self.posted = False
        self.start_us = 0


class nixlAgent:
    """NIXL's C++ agent (nixl._bindings.nixlAgent) over a libnixl agent.

    nixlAgent(name, nixlAgentConfig): an empty name is ValueError (as NIXL's
    std::invalid_argument); any other refused name is nixlInvalidParamError.
    close() (ours) destroys the C agent now; it is also destroyed when garbage.
    """

    def __init__(self, name: str, config: Optional[nixlAgentConfig] = None):
        self._ptr_v: Optional[int] = None
        cfg = config if config is not None else nixlAgentConfig()
        if not isinstance(name, str):
            raise TypeError(f"agent name must be a str, not {type(name).__name__}")
        if not name:
            raise make_error(nixlInvalidValueError, "nixlAgent", "Agent needs a non-empty name")
        port = int(cfg.listenPort)
        if not 0 <= port <= 65535:
            raise make_error(nixlInvalidParamError, "nixlAgent", f"listen port {port} is not a TCP port")
        c = _lib.nixl_agent_config_t()
        c.field_mask = (_lib.CFG_NAME | _lib.CFG_PROGRESS_THREAD | _lib.CFG_LISTEN | _lib.CFG_LISTEN_PORT |
                        _lib.CFG_THREAD_MODE)
        c.name = name.encode()
        c.progress_thread = int(bool(cfg.useProgThread))
        c.listen = int(bool(cfg.useListenThread))
        c.listen_port = port
        c.thread_mode = _lib.THREAD_SERIALIZED  # whatever syncMode says: docs/python.md, "Threads"
        delay = int(getattr(cfg, "pthrDelay", 0) or 0)
        if 0 < delay <= 0xFFFFFFFF:
            c.field_mask |= _lib.CFG_PROGRESS_INTERVAL_US
            c.progress_interval_us = delay
        ptr = ctypes.c_void_p()
        check(L.nixl_agent_create(ctypes.byref(c), ctypes.byref(ptr)), "nixlAgent", f"agent {name!r}")
        self._ptr_v = ptr.value
        self.name = name
        self.config = cfg
        self.telemetry = telemetry_enabled(bool(getattr(cfg, "captureTelemetry", False)))
        self.telemetry_file: Optional[TelemetryFile] = None
        self._lock = threading.RLock()
        self._plugins = available()
        self._ours: dict[str, int] = {}  # our backend name -> C handle
        self._name_of: dict[int, str] = {}  # and back
        self._params: dict[str, dict[str, str]] = {}  # our backend -> its effective parameters
        self._groups: dict[int, list[int]] = {}  # backend handle given out -> C handles
        self._group_name: dict[int, str] = {}
        self._group_of: dict[int, int] = {}  # C handle -> the first handle given out holding it
        self._ids = itertools.count(1 << 12)
        self._preps: dict[int, tuple[int, Optional[str], RunCache]] = {}
        self._reqs: dict[int, _Req] = {}
        # NIXL_TELEMETRY_DIR: the file NIXL's telemetry readers read (_telemetry.py)
        try:
            self.telemetry_file = TelemetryFile.for_agent(name) if self.telemetry else None
        except (OSError, ValueError) as e:  # NIXL's agent constructor throws here too
            self.close()
            raise make_error(nixlInvalidParamError, "nixlAgent", f"telemetry file of agent {name!r} "
                             f"(NIXL_TELEMETRY_DIR, NIXL_TELEMETRY_BUFFER_SIZE): {e}") from None

    # ---- life cycle (ours) ----
    def close(self) -> None:
        with getattr(self, "_lock", threading.RLock()):
            p, self._ptr_v = self._ptr_v, None
            if p:
                self._preps.clear()
                self._reqs.clear()
                L.nixl_agent_destroy(p)
            tf = getattr(self, "telemetry_file", None)
            if tf is not None:
                tf.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return not self._ptr_v

    def _p(self, call: str) -> int:
        if not self._ptr_v:
            raise make_error(nixlInvalidParamError, call, f"agent {getattr(self, 'name', '?')} was closed")
        return self._ptr_v

    def __repr__(self) -> str:
        return f"nixlAgent({getattr(self, 'name', '?')!r}{'' if self._ptr_v else ', closed'})"

    # ---- plugins and backends ----
    def getAvailPlugins(self) -> list[str]:
        """Our backends, then the NIXL names that map to at least one of them."""
        return list(self._plugins) + [a for a in BACKEND_ALIASES if targets(self._plugins, a)]

    def _mems_params(self, names: list[str]) -> tuple[dict[str, str], list[str]]:
        params: dict[str, str] = {}
        mems: list[str] = []
        for b in names:
            params.update(self._params.get(b, self._plugins[b]["params"]))
            mems += [m for m in self._plugins[b]["mem_types"] if m not in mems]
        return params, mems

    def getPluginParams(self, type: str) -> tuple[dict[str, str], list[str]]:
        t = targets(self._plugins, type)
        if not t:
            raise make_error(nixlNotFoundError, "getPluginParams",
                             f"plugin {type!r}: {why_missing(type, self._plugins)}")
        return self._mems_params_defaults(t)

    def _mems_params_defaults(self, names: list[str]) -> tuple[dict[str, str], list[str]]:
        params: dict[str, str] = {}
        mems: list[str] = []
        for b in names:
            params.update(self._plugins[b]["params"])
            mems += [m for m in self._plugins[b]["mem_types"] if m not in mems]
        return params, mems

    def getBackendParams(self, backend: int) -> tuple[dict[str, str], list[str]]:
        hs = self._backend_handles([backend], "getBackendParams")
        return self._mems_params([self._name_of[h] for h in hs])

    def create_c(self, name: str, params: dict[str, str], call: str) -> int:
        """Create our backend `name` with params (ours; nixl_agent uses it): its C handle."""
        keys = [k.encode() for k in params]
        vals = [v.encode() for v in params.values()]
        arr = (_lib.nixl_param_t * max(len(keys), 1))()
        for i, (k, v) in enumerate(zip(keys, vals)):
            arr[i].key, arr[i].value = k, v
        out = ctypes.c_void_p()
        with self._lock:
            check(L.nixl_backend_create(self._p(call), name.encode(), arr if keys else None, len(keys),
                                        ctypes.byref(out)), call, f"backend {name!r} with {params or 'defaults'}")
            eff = {}
            for k, default in self._plugins[name]["params"].items():
                env = os.environ.get(f"NIXL_{name}_{k}".upper())
                eff[k] = params.get(k, env if env is not None else default)
            self._ours[name] = out.value
            self._name_of[out.value] = name
            self._params[name] = eff
        return out.value

    def createBackend(self, type: str, initParams: Optional[dict[str, str]] = None) -> int:
        """A backend by our name or a NIXL name (then every backend of ours it maps to, made once
        and shared between names); returns its handle for registerMem(..., [handle]) and the like."""
        call = "createBackend"
        from ._api import log
        params = {str(k): str(v) for k, v in (initParams or {}).items()}
        t = targets(self._plugins, type)
        if not t:
            raise make_error(nixlNotFoundError, call, f"backend {type!r}: {why_missing(type, self._plugins)}")
        alias = type not in self._plugins
        hs: list[int] = []
        failed: list[Exception] = []
        with self._lock:
            for b in t:
                if b in self._ours and alias:
                    hs.append(self._ours[b])
                    continue
                try:
                    hs.append(self.create_c(b, translate(self._plugins, type, b, params, log, self.name)
                                            if alias else params, call))
                except Exception as e:
                    if not alias:
                        raise
                    failed.append(e)  # an alias needs only some of its backends (no GPU: no cuda_ipc)
                    log.warning("agent %s: %s without our %s backend: %s", self.name, type, b, e)
            if not hs:
                raise failed[0]
            gid = hs[0] if not alias else next(self._ids)
            self._groups[gid] = hs
            self._group_name[gid] = type
            for h in hs:
                self._group_of.setdefault(h, gid)
        return gid

    def _backend_handles(self, backends: Any, call: str, mem: Optional[str] = None) -> list[int]:
        """The C handles of the backend handles given (those taking mem, for a registration)."""
        hs: list[int] = []
        for b in backends or ():
            if isinstance(b, bool) or not isinstance(b, int) or b not in self._groups:
                raise make_error(nixlNotFoundError, call, f"{b!r} is not a backend handle of agent {self.name}")
            mine = self._groups[b]
            if mem is not None and len(mine) > 1:
                mine = [h for h in mine if mem in self._plugins[self._name_of[h]]["mem_types"]] or mine
            hs += [h for h in mine if h not in hs]
        return hs

    # ---- memory ----
    def _reg(self, fn: Any, descs: Any, backends: Any, call: str) -> int:
        if not isinstance(descs, nixlRegDList):
            raise TypeError(f"{call}: descs must be a nixlRegDList, not {type(descs).__name__}")
        opt, _keep = make_opt(self._backend_handles(backends, call, descs.mem_type), None, call)
        c = descs._c()
        check(fn(self._p(call), ctypes.byref(c), opt), call, f"{len(descs)} {descs.mem_type} descriptors")
        self.memory_event(fn is L.nixl_mem_register, descs)
        return NIXL_SUCCESS

    def memory_event(self, registered: bool, descs: Any) -> None:
        """agent_memory_registered / _deregistered: the bytes of one call (ours; nixl_agent uses it)."""
        tf = self.telemetry_file
        if tf is not None:
            tf.events([("agent_memory_registered" if registered else "agent_memory_deregistered",
                        descs._total_len())])

    def xfer_event(self, ptr: int, is_write: bool) -> None:
        """A post seen complete: NIXL's four transfer events (ours; nixl_agent uses it)."""
        tf = self.telemetry_file
        if tf is not None:
            info = _lib.nixl_xfer_info_t()
            if L.nixl_xfer_info(ptr, ctypes.byref(info)) == _lib.NIXL_OK:
                tf.xfer_done(is_write, info.bytes, -(-info.post_ns // 1000), -(-info.xfer_ns // 1000))

    def error_event(self, exc: BaseException) -> None:
        tf = self.telemetry_file
        if tf is not None:
            tf.error(exc)

    def registerMem(self, descs: nixlRegDList, backends: Any = ()) -> int:
        return self._reg(L.nixl_mem_register, descs, backends, "registerMem")

    def deregisterMem(self, descs: nixlRegDList, backends: Any = ()) -> int:
        return self._reg(L.nixl_mem_deregister, descs, backends, "deregisterMem")

    def queryMem(self, descs: Any, backend: int) -> list:
        hs = self._backend_handles([backend], "queryMem")
        return query_mem(self._p("queryMem"), descs, [self._name_of[h] for h in hs], "queryMem")

    # ---- metadata ----
    def getLocalMD(self) -> bytes:
        blob = ctypes.c_void_p()
        n = ctypes.c_size_t()
        check(L.nixl_md_get_local(self._p("getLocalMD"), ctypes.byref(blob), ctypes.byref(n)), "getLocalMD")
        try:
            return ctypes.string_at(blob.value, n.value)
        finally:
            L.nixl_free(blob)

    def getLocalPartialMD(self, descs: Any, inc_conn_info: bool = False, backends: Any = ()) -> bytes:
        """The registrations holding descs (an empty list: connection info only), for the backend
        handles given (all when none), with connection info when inc_conn_info; loadRemoteMD on a
        peer adds them to what it holds of this agent."""
        call = "getLocalPartialMD"
        dl = to_dlist(descs, None, False, call)
        opt, _keep = make_opt(self._backend_handles(backends, call), None, call)
        return partial_blob(self._p(call), dl, inc_conn_info, opt, call)

    def loadRemoteMD(self, remote_metadata: Any) -> bytes:
        """Load a peer's metadata; returns its name as bytes (as NIXL)."""
        md = to_bytes(remote_metadata)
        name = ctypes.create_string_buffer(_lib.NIXL_NAME_MAX + 1)
        check(L.nixl_md_load_remote(self._p("loadRemoteMD"), md, len(md), name), "loadRemoteMD",
              f"{len(md)} bytes of metadata")
        return name.value

    def invalidateRemoteMD(self, remote_agent: str) -> int:
        """NIXL returns the status (NIXL_ERR_NOT_FOUND for an unknown peer) instead of raising."""
        remote_agent = agent_name(remote_agent)
        st = L.nixl_md_invalidate_remote(self._p("invalidateRemoteMD"), remote_agent.encode())
        if _lib.status_name(st) == "NIXL_ERR_UNKNOWN_PEER":
            return NIXL_ERR_NOT_FOUND
        check(st, "invalidateRemoteMD", f"peer {remote_agent!r}")
        return NIXL_SUCCESS

    def checkRemoteMD(self, remote_name: str, descs: Any = None) -> int:
        """NIXL_SUCCESS when the peer is known (and its metadata covers descs), else NIXL_ERR_NOT_FOUND."""
        p = self._p("checkRemoteMD")
        remote_name = agent_name(remote_name)
        if L.nixl_md_check_remote(p, remote_name.encode()) != _lib.NIXL_OK:
            return NIXL_ERR_NOT_FOUND
        if descs is None or not len(descs):
            return NIXL_SUCCESS
        c = to_dlist(descs, None, False, "checkRemoteMD")._c()
        prep = ctypes.c_void_p()
        if L.nixl_prep_create(p, remote_name.encode(), ctypes.byref(c), None, ctypes.byref(prep)) != 0:
            return NIXL_ERR_NOT_FOUND
        L.nixl_prep_release(prep)
        return NIXL_SUCCESS

    def etcd(self, call: str, fn: str, *args: Any) -> None:
        """Queue an etcd request (the agent's etcd thread does it)."""
        if fn not in _lib.HAVE:
            from ._api import _no_etcd
            raise _no_etcd(call)
        check(getattr(L, fn)(self._p(call), *args), call, "through etcd (NIXL_ETCD_ENDPOINTS, docs/etcd.md)")

    @staticmethod
    def etcd_args(label: str = "") -> Any:
        if not label:
            return None
        a = _lib.nixl_etcd_args_t()
        a.field_mask = _lib.ETCD_ARG_LABEL
        a.label = label.encode()
        return a

    def sendLocalMD(self, ip_addr: str = "", port: int = 0) -> None:
        call = "sendLocalMD"
        if not ip_addr:
            return self.etcd(call, "nixl_md_etcd_publish", None, None)
        check(L.nixl_md_send_local(self._p(call), ip_addr.encode(), port or DEFAULT_COMM_PORT), call,
              f"to {ip_addr}:{port or DEFAULT_COMM_PORT}")

    def sendLocalPartialMD(self, descs: Any, inc_conn_info: bool = False, backends: Any = (), ip_addr: str = "",
                           port: int = 0, label: str = "") -> None:
        """With ip_addr: getLocalPartialMD's blob to the peer's listener (port 0: DEFAULT_COMM_PORT),
        which loads it; without: published in etcd under label (connection info always included)."""
        call = "sendLocalPartialMD"
        dl = to_dlist(descs, None, False, call)
        if ip_addr:
            port = port or DEFAULT_COMM_PORT
            opt, _keep = make_opt(self._backend_handles(backends, call), None, call)
            c = dl._c()
            check(L.nixl_md_send_local_partial(self._p(call), ctypes.byref(c),
                                               _lib.MD_PARTIAL_CONN_INFO if inc_conn_info else 0, opt,
                                               ip_addr.encode(), port), call,
                  f"{len(dl)} descriptors to {ip_addr}:{port}")
            return
        if not label:
            raise make_error(nixlInvalidParamError, call, "a label is required to publish partial metadata in etcd "
                             "(or give ip_addr to send it to a peer's listener)")
        c = dl._c()
        self.etcd(call, "nixl_md_etcd_publish", ctypes.byref(c), ctypes.byref(self.etcd_args(label)))

    def fetch_name(self, ip_addr: str, port: int, call: str) -> str:
        """Fetch and load the metadata of the agent listening at ip_addr:port; its name (ours)."""
        name = ctypes.create_string_buffer(_lib.NIXL_NAME_MAX + 1)
        check(L.nixl_md_fetch_remote(self._p(call), ip_addr.encode(), port, name), call, f"from {ip_addr}:{port}")
        return name.value.decode()

    def fetchRemoteMD(self, remote_agent: str, ip_addr: str = "", port: int = 0, label: str = "") -> None:
        call = "fetchRemoteMD"
        remote_agent = agent_name(remote_agent)
        if not ip_addr:
            args = self.etcd_args(label)
            return self.etcd(call, "nixl_md_etcd_fetch", remote_agent.encode(), ctypes.byref(args) if args else None)
        port = port or DEFAULT_COMM_PORT
        got = self.fetch_name(ip_addr, port, call)
        if remote_agent and got != remote_agent:
            raise make_error(nixlMismatchError, call, f"{ip_addr}:{port} is agent {got!r}, not {remote_agent!r} "
                             f"(its metadata was loaded)")

    def invalidateLocalMD(self, ip_addr: str = "", port: int = 0) -> None:
        call = "invalidateLocalMD"
        if not ip_addr:
            return self.etcd(call, "nixl_md_etcd_invalidate_local", None)
        check(L.nixl_md_invalidate_local(self._p(call), ip_addr.encode(), port or DEFAULT_COMM_PORT), call,
              f"at {ip_addr}:{port or DEFAULT_COMM_PORT}")

    def makeConnection(self, remote_agent: str, backends: Any = ()) -> int:
        """Connect to a loaded peer now (nixl_md_connect), through every backend that reaches it or those given."""
        call = "makeConnection"
        remote_agent = agent_name(remote_agent)
        opt, _keep = make_opt(self._backend_handles(backends, call), None, call)
        check(L.nixl_md_connect(self._p(call), remote_agent.encode(), opt), call, f"peer {remote_agent!r}")
        return NIXL_SUCCESS

    # ---- transfers ----
    def prepXferDlist(self, *args: Any, **kw: Any) -> int:
        """prepXferDlist(agent_name, descs, backend=[]) or prepXferDlist(descs, backend=[]) (local side);
        agent_name NIXL_INIT_AGENT is the local side too.  NIXL 1.5's strided form:
        prepXferDlist([agent_name,] mem_type, N x 5 array, backend=[])."""
        call = "prepXferDlist"
        if args and isinstance(args[0], (str, bytes)):
            name, rest = agent_name(args[0]), args[1:]
        else:
            name, rest = agent_name(kw.pop("agent_name", NIXL_INIT_AGENT)), args
        strided = None
        if rest and isinstance(rest[0], int) and not isinstance(rest[0], bool) or "mem_type" in kw:
            # NIXL 1.5: prepXferDlist([agent_name,] mem_type, N x 5 array, backend=[])
            mem = rest[0] if rest and isinstance(rest[0], int) else kw.pop("mem_type")
            rest = rest[1:] if rest and isinstance(rest[0], int) else rest
            arr = rest[0] if rest else kw.pop("descs")
            if not is_strided(arr):
                raise TypeError(f"{call}: with a mem_type, descs must be an N x 5 array of strided rows")
            strided = strided_rows(arr, call)
            descs = nixlXferDList(mem, strided)
            rest = (descs,) + tuple(rest[1:])
        descs = rest[0] if rest else kw.pop("descs")
        backends = rest[1] if len(rest) > 1 else kw.pop("backend", kw.pop("backends", ()))
        if not isinstance(descs, nixlXferDList):
            raise TypeError(f"{call}: descs must be a nixlXferDList, not {type(descs).__name__}")
        peer = None if name in ("", NIXL_INIT_AGENT) else name
        opt, _keep = make_opt(self._backend_handles(backends, call), None, call)
        c = descs._c()
        out = ctypes.c_void_p()
        with self._lock:
            check(L.nixl_prep_create(self._p(call), peer.encode() if peer else None, ctypes.byref(c), opt,
                                     ctypes.byref(out)), call,
                  f"{len(descs)} descriptors of {'this agent' if peer is None else 'peer ' + repr(peer)}")
            self._preps[out.value] = (out.value, peer, RunCache(descs, strided))
        return out.value

    def releasedDlistH(self, handle: int) -> int:
        with self._lock:
            rec = self._preps.pop(handle, None)
            if rec is None:
                raise make_error(nixlInvalidParamError, "releasedDlistH", f"{handle!r} is not a prepared list of "
                                 f"agent {self.name} (or was released)")
            if self._ptr_v:
                L.nixl_prep_release(rec[0])
        return NIXL_SUCCESS

    def _new_req(self, make: Any, notif: bytes, peer: str, desc_count: Any, is_write: bool) -> int:
        ptr = make(notif)
        with self._lock:  # a key of our own: the C pointer changes when a new notification remakes it
            key = next(self._ids)
            self._reqs[key] = _Req(ptr, notif, make, peer, desc_count, is_write)
        return key

    def _req(self, reqh: int, call: str) -> _Req:
        rec = self._reqs.get(reqh) if isinstance(reqh, int) else None
        if rec is None or not self._ptr_v:
            raise make_error(nixlInvalidParamError, call, f"{reqh!r} is not a request of agent {self.name} "
                             f"(or was released)")
        return rec

    def makeXferReq(self, operation: Any, local_side: int, local_indices: Any, remote_side: int,
                    remote_indices: Any, notif_msg: Any = b"", backend: Any = (), skip_desc_merg: bool = False,
                    timeout_ms: Optional[int] = None) -> int:
        call = "makeXferReq"
        op = op_code(operation, call)
        lkeep, laddr, ln = index_array(local_indices, call)
        rkeep, raddr, rn = index_array(remote_indices, call)
        if ln != rn:
            raise make_error(nixlMismatchError, call, f"{ln} local indices but {rn} remote indices")
        with self._lock:
            lrec, rrec = self._preps.get(local_side), self._preps.get(remote_side)
        if lrec is None or rrec is None:
            raise make_error(nixlInvalidParamError, call, "local_side and remote_side must be prepared lists of "
                             f"agent {self.name} (prepXferDlist)")
        if rrec[1] is None:
            raise make_error(nixlInvalidParamError, call, "the remote side was prepared as local (NIXL_INIT_AGENT)")
        hs = self._backend_handles(backend, call)

        def make(msg: bytes, _keep: Any = (lkeep, rkeep)) -> int:
            opt, _k = make_opt(hs, msg if msg else None, call, timeout_ms)
            out = ctypes.c_void_p()
            check(L.nixl_xfer_make(self._p(call), op, lrec[0], laddr, rrec[0], raddr, ln, opt, ctypes.byref(out)),
                  call, f"{ln} descriptors with {rrec[1]}")
            return out.value

        counter = None if skip_desc_merg else merged_counter(lrec[2], lkeep, rrec[2], rkeep)
        return self._new_req(make, to_bytes(notif_msg), rrec[1], counter, op == _lib.OP_WRITE)

    def createXferReq(self, operation: Any, local_descs: Any, remote_descs: Any, remote_agent: str,
                      notif_msg: Any = b"", backend: Any = (), timeout_ms: Optional[int] = None) -> int:
        call = "createXferReq"
        op = op_code(operation, call)
        remote_agent = agent_name(remote_agent)
        for d in (local_descs, remote_descs):
            if not isinstance(d, nixlXferDList):
                raise TypeError(f"{call}: descriptor lists must be nixlXferDList, not {type(d).__name__}")
        hs = self._backend_handles(backend, call)

        def make(msg: bytes) -> int:
            opt, _k = make_opt(hs, msg if msg else None, call, timeout_ms)
            out = ctypes.c_void_p()
            check(create_xfer(self._p(call), op, local_descs, remote_descs, remote_agent.encode(), opt,
                              ctypes.byref(out)), call,
                  f"{len(local_descs)} descriptors with {remote_agent!r}")
            return out.value

        return self._new_req(make, to_bytes(notif_msg), remote_agent, None, op == _lib.OP_WRITE)

    def estimateXferCost(self, req_handle: int) -> tuple[int, int, int]:
        """(duration_us, err_margin_us, NIXL_COST_ANALYTICAL_BACKEND): our model of the request's
        path, bytes and runs (estimate_cost), not a measurement."""
        call = "estimateXferCost"
        with self._lock:
            rec = self._req(req_handle, call)
            info = self.xfer_info(rec.ptr, call)
        d, m = estimate_cost(info)
        return d, m, 0  # NIXL_COST_ANALYTICAL_BACKEND

    def postXferReq(self, reqh: int, notif_msg: Any = b"") -> int:
        """Post (or re-post) a request: NIXL_SUCCESS when it completed inside the call, else NIXL_IN_PROG.

        A notif_msg other than the request's replaces it (the request is made again with it)."""
        call = "postXferReq"
        msg = to_bytes(notif_msg)
        with self._lock:
            rec = self._req(reqh, call)
            if msg and msg != rec.notif:
                if L.nixl_xfer_status(rec.ptr) == _lib.NIXL_IN_PROG:  # what a plain re-post would say
                    raise make_error(nixlRepostActiveError, call, f"request to {rec.peer!r} is still in flight")
                new = rec.remake(msg)
                L.nixl_xfer_release(rec.ptr)
                rec.ptr, rec.notif, rec.posted = new, msg, False
            rec.start_us = time.time_ns() // 1000
            st = L.nixl_xfer_post(rec.ptr)
            if st >= 0:
                rec.posted = True
                rec.reported = st == _lib.NIXL_OK
                if st == _lib.NIXL_OK:
                    self.xfer_event(rec.ptr, rec.is_write)
        try:
            return check(st, call, f"request to {rec.peer!r}")
        except Exception as e:
            self.error_event(e)
            raise

    def getXferStatus(self, reqh: int) -> int:
        """NIXL_SUCCESS, NIXL_IN_PROG, or raises the failed request's nixl*Error."""
        call = "getXferStatus"
        with self._lock:
            rec = self._req(reqh, call)
            st, posted = L.nixl_xfer_status(rec.ptr), rec.posted
            if st == _lib.NIXL_OK and posted and not rec.reported:
                rec.reported = True
                self.xfer_event(rec.ptr, rec.is_write)
        try:
            if st == _lib.ERR_INVALID_PARAM and not posted:
                from ._errors import nixlNotPostedError
                raise make_error(nixlNotPostedError, call, f"request to {rec.peer!r} was never posted")
            return check(st, call, f"request to {rec.peer!r}")
        except Exception as e:
            self.error_event(e)
            raise

    def xfer_info(self, ptr: int, call: str) -> _lib.nixl_xfer_info_t:
        info = _lib.nixl_xfer_info_t()
        check(L.nixl_xfer_info(ptr, ctypes.byref(info)), call)
        return info

    def getXferTelemetry(self, reqh: int) -> nixlXferTelemetry:
        call = "getXferTelemetry"
        if not self.telemetry:
            raise make_error(nixlNoTelemetryError, call, "telemetry is off (NIXL_TELEMETRY_ENABLE false, or unset "
                             "without capture_telemetry)")
        with self._lock:
            rec = self._req(reqh, call)
            info = self.xfer_info(rec.ptr, call)
        if not info.posts:
            raise make_error(nixlNoTelemetryError, call, f"request to {rec.peer!r} was never posted")
        return telemetry_of(info, rec.start_us, rec.desc_count)

    def queryXferBackend(self, reqh: int) -> int:
        """The backend handle (from createBackend) that holds the backend the request uses."""
        call = "queryXferBackend"
        with self._lock:
            rec = self._req(reqh, call)
            b = self.xfer_info(rec.ptr, call).backend.decode()
            h = self._ours.get(b)
            if h is None or h not in self._group_of:
                raise make_error(nixlNotFoundError, call, f"backend {b!r} was not made by createBackend")
            return self._group_of[h]

    def releaseXferReq(self, reqh: int) -> int:
        """Free a request; one in flight is canceled (its notification is never delivered)."""
        with self._lock:
            rec = self._req(reqh, "releaseXferReq")
            del self._reqs[reqh]
            L.nixl_xfer_release(rec.ptr)
        return NIXL_SUCCESS

    # ---- notifications ----
    def getNotifs(self, notif_map: Optional[dict] = None, backends: Any = ()) -> dict:
        """Add the notifications received since the last call to notif_map ({sender: [bytes]}); returns it."""
        out = notif_map if notif_map is not None else {}
        for sender, msg in drain(self._p("getNotifs"), "getNotifs"):
            out.setdefault(sender, []).append(msg)
        return out

    def genNotif(self, remote_agent: str, msg: Any, backends: Any = ()) -> int:
        call = "genNotif"
        remote_agent = agent_name(remote_agent)
        m = to_bytes(msg)
        if isinstance(backends, int) and not isinstance(backends, bool):
            backends = [backends]
        opt, _keep = make_opt(self._backend_handles(backends, call), None, call)
        check(L.nixl_notif_send(self._p(call), remote_agent.encode(), m, len(m), opt), call,
              f"to {remote_agent!r}")
        return NIXL_SUCCESS

    # ---- UCX GPU device API ----
    def prepMemView(self, dlist: Any, backends: Any = ()) -> int:
        raise make_error(nixlNotSupportedError, "prepMemView", "memory views need UCX's GPU device API, which "
                         "libnixl has not (HAVE_UCX_GPU_DEVICE_API is False)")

    def releaseMemView(self, mvh: int) -> None:
        raise make_error(nixlNotSupportedError, "releaseMemView", "memory views need UCX's GPU device API, which "
                         "libnixl has not (HAVE_UCX_GPU_DEVICE_API is False)")


__all__ = ["nixlAgentConfig", "nixlAgent", "NIXL_STATUS", "DEFAULT_COMM_PORT", "NIXL_INIT_AGENT",
           "BACKEND_ALIASES"]
