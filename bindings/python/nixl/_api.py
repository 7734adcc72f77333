"""NIXL's Python API (nixl._api) over libnixl.

nixl_agent_config and nixl_agent answer to the names and meanings of NIXL's
Python API, so a KV connector written for NIXL runs on libnixl unchanged;
docs/python.md lists the methods, what differs and what we add (per-request
path and telemetry, the agent's path and fallback counters, shareable host
memory).

nixl_agent is built on nixl._bindings (nixlBind): its C agent comes from
nixlBind.nixlAgent(name, nixlBind.nixlAgentConfig()), looked up at each
agent's creation (a test may replace it), and its backends are made by that
nixlAgent.  Its other methods call libnixl directly, keeping handle objects
(per-handle locks, release once) and our additions (deadlines, paths).

Threads: the C agent is always created NIXL_THREAD_SERIALIZED, whatever
sync_mode (nixl_thread_sync_t) says, so any method may be called from any
thread; every C call releases the GIL (ctypes.CDLL).
The Python-side state (notification map, backends) has its own lock, and
handles (_types.py) lock themselves.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import weakref
from enum import Enum
from typing import Any, Optional, Union

from . import _bindings as nixlBind
from . import _lib
from ._descs import (_DList, base_array, index_array, is_strided, mem_type_code, nixlRegDList, nixlRemoteDList, nixlXferDList,
                     create_xfer, strided_rows, to_dlist)
from ._errors import (check, make_error, nixlInvalidKeyError, nixlInvalidParamError, nixlInvalidValueError,
                      nixlMismatchError, nixlNoTelemetryError, nixlNotFoundError, nixlNotImplementedYet,
                      nixlNotPostedError, nixlNotSupportedError, nixlRepostActiveError)
from ._lowlevel import (BACKEND_ALIASES, PARAM_ALIASES, agent_name, available, drain, make_opt,  # noqa: F401
                        estimate_cost, merged_counter, op_code, partial_blob, targets, telemetry_of, to_bytes,
                        query_mem, translate, why_missing)
from ._telemetry import RunCache

agent_name_of = agent_name  # prep_xfer_dlist's parameter is called agent_name, as NIXL's
from ._types import (_Handle, nixl_path_stat, nixl_prepped_dlist_handle, nixl_xfer_handle,  # noqa: F401
                     nixl_xfer_info, nixlXferTelemetry)

log = logging.getLogger("nixl")
L = _lib.lib

DEFAULT_COMM_PORT = nixlBind.DEFAULT_COMM_PORT
NIXL_INIT_AGENT = nixlBind.NIXL_INIT_AGENT
ETCD_ISSUE = "issue 5 (metadata at scale: etcd)"

_to_bytes = to_bytes
_avail = available


def available_backends() -> dict[str, Any]:
    """Our addition: every backend this libnixl has, with its memory types, capabilities and parameters."""
    return _avail()


class nixl_thread_sync_t(Enum):
    """NIXL's thread synchronization modes; DEFAULT is NONE, as in NIXL.

    Each one gives the same C agent, NIXL_THREAD_SERIALIZED (one lock per
    agent; every call from any thread at any time): NONE and STRICT because
    an uncontended lock costs nothing beside a ctypes call, RW because it
    must allow concurrent posts and polls from many threads, which the lock
    serializes safely.  docs/python.md, "Threads", has the table.
    """

    NIXL_THREAD_SYNC_NONE = nixlBind.NIXL_THREAD_SYNC_NONE
    NIXL_THREAD_SYNC_STRICT = nixlBind.NIXL_THREAD_SYNC_STRICT
    NIXL_THREAD_SYNC_RW = nixlBind.NIXL_THREAD_SYNC_RW
    NIXL_THREAD_SYNC_DEFAULT = nixlBind.NIXL_THREAD_SYNC_DEFAULT


class nixl_agent_config:
    """NIXL's agent configuration.

    enable_prog_thread: a progress thread drives the backends (else calls do).
    enable_listen_thread / listen_port: the metadata listener (port 0 = any
    free port; read it back from nixl_agent.listen_port).  capture_telemetry
    (or NIXL_TELEMETRY_ENABLE) turns telemetry on, as in NIXL (_telemetry.py).
    num_threads > 0 sets the copy threads of backends that have them (shm
    "threads").  backends: NIXL names (see BACKEND_ALIASES) or ours.
    sync_mode: a nixl_thread_sync_t or None (NIXL's rule: STRICT with a
    listener, else NONE); anything else is TypeError, as in NIXL.
    """

    def __init__(self, enable_prog_thread: bool = True, enable_listen_thread: bool = False, listen_port: int = 0,
                 capture_telemetry: bool = False, num_threads: int = 0, backends: Optional[list[str]] = None,
                 sync_mode: Optional[nixl_thread_sync_t] = None):
        if sync_mode is not None and not isinstance(sync_mode, nixl_thread_sync_t):
            raise TypeError(f"sync_mode must be a nixl_thread_sync_t or None, not {type(sync_mode).__name__} "
                            f"{sync_mode!r}")
        self.backends = list(backends) if backends is not None else ["UCX"]
        self.enable_pthread = bool(enable_prog_thread)
        self.enable_listen = bool(enable_listen_thread)
        self.port = int(listen_port)
        self.capture_telemetry = bool(capture_telemetry)
        self.num_threads = int(num_threads)
        self.sync_mode = sync_mode


class nixl_agent:
    """One agent per process: backends, registered memory, peers, requests."""

    def __init__(self, agent_name: str, nixl_conf: Optional[nixl_agent_config] = None, instantiate_all: bool = False):
        self._closed = True  # until the C agent exists
        if nixl_conf and instantiate_all:
            log.warning("nixl_agent: instantiate_all ignored because a config was given")
            instantiate_all = False
        conf = nixl_conf or nixl_agent_config()
        self.name = agent_name
        # NIXL's mode, kept for whoever reads it; the C agent is serialized in every mode.
        self.sync_mode = conf.sync_mode or (nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT if conf.enable_listen
                                            else nixl_thread_sync_t.NIXL_THREAD_SYNC_NONE)
        if not 0 <= conf.port <= 65535:
            raise make_error(nixlInvalidParamError, "nixl_agent", f"listen_port {conf.port} is not a TCP port")
        # As NIXL's nixl_agent: a nixlAgentConfig, then nixlBind.nixlAgent (looked up now, so a test may spy on it).
        cfg = nixlBind.nixlAgentConfig()
        cfg.useProgThread = conf.enable_pthread
        cfg.useListenThread = conf.enable_listen
        cfg.listenPort = conf.port
        cfg.syncMode = self.sync_mode.value
        cfg.pthrDelay = 0
        cfg.lthrDelay = 100000
        cfg.captureTelemetry = conf.capture_telemetry
        self.agent = nixlBind.nixlAgent(agent_name, cfg)
        self._agent = self.agent._p("nixl_agent")
        self._closed = False
        self._handles: "weakref.WeakSet[_Handle]" = weakref.WeakSet()
        self._lock = threading.Lock()  # self.notifs and the backend tables
        self.notifs: dict[str, list[bytes]] = {}
        self.backends: dict[str, list[int]] = {}  # name given -> C backend handles
        self._ours: dict[str, int] = {}  # our backend name -> C handle
        self._name_of: dict[int, str] = {}  # and back
        self._alias_of: dict[str, str] = {}  # our backend name -> the name it was asked for
        self._params: dict[str, dict[str, str]] = {}
        self.backend_mems: dict[str, list[str]] = {}
        self.backend_options: dict[str, dict[str, str]] = {}
        self._plugins = self.agent._plugins
        self.plugin_list = self.get_plugin_list()
        wanted = list(self._plugins) if instantiate_all else conf.backends
        for b in wanted:
            if b not in self.plugin_list:
                log.warning("nixl_agent %s: backend %s skipped: not available in this libnixl (%s)", agent_name, b,
                            self._why_missing(b))
                continue
            init = {}
            if conf.num_threads > 0:  # NIXL's knob; ours is the backend's "threads" parameter
                key = "num_threads" if b not in self._plugins else "threads"
                if key == "num_threads" or "threads" in self._plugins[b]["params"]:
                    init[key] = str(conf.num_threads)
            try:
                self.create_backend(b, init)
            except nixlNotSupportedError as e:
                # Built, but what it loads at run time is not here (gds without
                # cuFile): as NIXL skips a plugin that does not load.
                log.warning("nixl_agent %s: backend %s skipped: it cannot run here (%s; its log line says why)",
                            agent_name, b, e)

    # ---- life cycle (close and the context manager are our additions) ----
    def close(self) -> None:
        """Destroy the agent now: requests are canceled, memory deregistered, handles become invalid."""
        if self._closed:
            return
        self._closed = True
        for h in list(self._handles):
            h._orphan()
        self.agent.close()
        self._agent = None

    def __enter__(self) -> "nixl_agent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def _closed(self) -> bool:
        """Closed by close(), or its nixlAgent closed directly (then its C agent is gone too)."""
        d = self.__dict__
        agent = d.get("agent")
        return d.get("_closed_v", True) or agent is None or agent.closed

    @_closed.setter
    def _closed(self, v: bool) -> None:
        self.__dict__["_closed_v"] = v

    def _ptr(self, call: str) -> int:
        if self._closed:
            raise make_error(nixlInvalidParamError, call, f"agent {self.name} was closed")
        return self._agent

    @property
    def listen_port(self) -> int:
        """The port of this agent's metadata listener (0 without one). Our addition."""
        return int(L.nixl_agent_listen_port(self._ptr("listen_port")))

    # ---- backends ----
    def _why_missing(self, name: str) -> str:
        return why_missing(name, self._plugins)

    def _targets(self, name: str) -> list[str]:
        return targets(self._plugins, name)

    def get_plugin_list(self) -> list[str]:
        """Our backends, then the NIXL names that map to at least one of them."""
        return list(self._plugins) + [a for a in BACKEND_ALIASES if targets(self._plugins, a)]

    def get_plugin_mem_types(self, backend: str) -> list[str]:
        mems: list[str] = []
        for b in self._targets(backend):
            mems += [m for m in self._plugins[b]["mem_types"] if m not in mems]
        if not mems:
            log.warning("plugin %s is not available: %s", backend, self._why_missing(backend))
        return mems

    def get_plugin_params(self, backend: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for b in self._targets(backend):
            out.update(self._plugins[b]["params"])
        if not self._targets(backend):
            log.warning("plugin %s is not available: %s", backend, self._why_missing(backend))
        return out

    def get_backend_mem_types(self, backend: str) -> list[str]:
        if backend not in self.backend_mems:
            log.warning("backend %s was not created in agent %s", backend, self.name)
        return list(self.backend_mems.get(backend, []))

    def get_backend_params(self, backend: str) -> dict[str, str]:
        """The parameters a created backend got: given, else NIXL_<BACKEND>_<KEY>, else the default."""
        if backend not in self.backend_options:
            log.warning("backend %s was not created in agent %s", backend, self.name)
        return dict(self.backend_options.get(backend, {}))

    def create_backend(self, backend: str, initParams: Optional[dict[str, str]] = None) -> None:
        """Create a backend by our name, or by a NIXL name (every backend of ours it maps to)."""
        call = "create_backend"
        params = {str(k): str(v) for k, v in (initParams or {}).items()}
        targets = self._targets(backend)
        if not targets:
            raise make_error(nixlNotFoundError, call, f"backend {backend!r}: {self._why_missing(backend)}")
        alias = backend not in self._plugins
        handles, mems, opts, made, failed = [], [], {}, [], []
        with self._lock:
            for b in targets:
                if b in self._ours and (alias or b in self._alias_of):  # made already, for an alias
                    handles.append(self._ours[b])
                else:
                    own = self._translate(backend, b, params) if alias else params
                    try:
                        handles.append(self._create_one(b, own, call))
                    except Exception as e:
                        # a value the user gave that a backend refuses is an error, not a
                        # backend to go without (UCX's ucx_error_handling_mode=off)
                        if not alias or (isinstance(e, nixlInvalidParamError) and own):
                            raise
                        failed.append(e)  # an alias needs only some of its backends (no GPU: no cuda_ipc)
                        log.warning("agent %s: %s without our %s backend: %s", self.name, backend, b, e)
                        continue
                    if alias:
                        self._alias_of.setdefault(b, backend)
                made.append(b)
                mems += [m for m in self._plugins[b]["mem_types"] if m not in mems]
                opts.update(self._params[b])
            if not handles:
                raise failed[0]
            self.backends[backend] = handles
            self.backend_mems[backend] = mems
            self.backend_options[backend] = opts
        log.info("agent %s: backend %s created (%s)", self.name, backend, ", ".join(made))

    def _translate(self, alias: str, ours: str, params: dict[str, str]) -> dict[str, str]:
        return translate(self._plugins, alias, ours, params, log, self.name)

    def _create_one(self, name: str, params: dict[str, str], call: str) -> int:
        self._ptr(call)
        h = self.agent.create_c(name, params, call)  # the nixlAgent makes the C backend
        eff = self.agent._params[name]
        self._ours[name] = h
        self._name_of[h] = name
        self._params[name] = eff
        self.backends[name] = [h]
        self.backend_mems[name] = list(self._plugins[name]["mem_types"])
        self.backend_options[name] = dict(eff)
        return h

    def _opt(self, backends: Optional[list[str]], notif: Optional[bytes], call: str, mem: Optional[str] = None,
             timeout_ms: Optional[int] = None):
        """A nixl_opt_args_t (and what it points to, to keep alive), or None when nothing is set.

        With mem (registration), a NIXL name stands only for those of its
        backends that take that memory type: libnixl wants each one listed to.
        """
        hs: list[int] = []
        for b in backends or ():
            if b not in self.backends:
                raise make_error(nixlNotFoundError, call, f"backend {b!r} was not created in agent {self.name}")
            mine = self.backends[b]
            if mem is not None and b not in self._ours:
                mine = [h for h in mine if mem in self._plugins[self._name_of[h]]["mem_types"]] or mine
            hs += [h for h in mine if h not in hs]
        return make_opt(hs, notif, call, timeout_ms)

    # ---- memory ----
    @staticmethod
    def _descs_or_none(descs: Any, mem_type: Any, reg: bool, call: str) -> Optional[_DList]:
        """NIXL's rule: input that makes no list gives None (logged why); an unknown mem_type is a KeyError."""
        other = nixlXferDList if reg else nixlRegDList
        if isinstance(descs, other):
            log.error("%s: a %s was given; %s wants a %s (%s)", call, other.__name__, call,
                      "nixlRegDList" if reg else "nixlXferDList",
                      "get_reg_descs(list(xfer_list), mem_type)" if reg else "reg_list.trim()")
            return None
        if mem_type is not None:
            mem_type_code(mem_type, call)  # nixlInvalidKeyError (a KeyError) for an unknown name, as NIXL
        try:
            return to_dlist(descs, mem_type, reg, call)
        except nixlInvalidKeyError:
            raise
        except (nixlInvalidParamError, IndexError) as e:
            log.error("%s: no descriptor list made: %s", call, e)
            return None

    def get_reg_descs(self, descs: Any, mem_type: Optional[str] = None) -> Optional[nixlRegDList]:
        """A nixlRegDList of descs, or None (logged why) when they make none, as NIXL."""
        return self._descs_or_none(descs, mem_type, True, "get_reg_descs")  # type: ignore[return-value]

    def get_xfer_descs(self, descs: Any, mem_type: Optional[str] = None) -> Optional[nixlXferDList]:
        """A nixlXferDList of descs, or None (logged why) when they make none, as NIXL."""
        return self._descs_or_none(descs, mem_type, False, "get_xfer_descs")  # type: ignore[return-value]

    def get_remote_descs(self, descs: Any, mem_type: Optional[str] = None) -> Optional[nixlRemoteDList]:
        """NIXL's nixlRemoteDList of (addr, len, dev, agent_name) tuples (for prep_mem_view); None if bad."""
        if isinstance(descs, nixlRemoteDList):
            return descs
        if mem_type is None:
            log.error("get_remote_descs: mem_type is required")
            return None
        code = mem_type_code(mem_type, "get_remote_descs")
        try:
            return nixlRemoteDList(code, list(descs))
        except (nixlInvalidParamError, TypeError) as e:
            log.error("get_remote_descs: no descriptor list made: %s", e)
            return None

    def register_memory(self, reg_list: Any, mem_type: Optional[str] = None,
                        backends: Optional[list[str]] = None) -> Optional[nixlRegDList]:
        """Register; returns the nixlRegDList, or None (logged why) when reg_list makes none (as
        get_reg_descs).  A registration libnixl refuses raises its nixl*Error."""
        descs = self.get_reg_descs(reg_list, mem_type)
        if descs is None:
            return None
        opt, _keep = self._opt(backends, None, "register_memory", descs.mem_type)
        c = descs._c()
        check(L.nixl_mem_register(self._ptr("register_memory"), ctypes.byref(c), opt), "register_memory",
              f"{len(descs)} {descs.mem_type} descriptors")
        self.agent.memory_event(True, descs)
        return descs

    def deregister_memory(self, dereg_list: Any, backends: Optional[list[str]] = None) -> None:
        descs = to_dlist(dereg_list, None, True, "deregister_memory")
        opt, _keep = self._opt(backends, None, "deregister_memory", descs.mem_type)
        c = descs._c()
        check(L.nixl_mem_deregister(self._ptr("deregister_memory"), ctypes.byref(c), opt), "deregister_memory",
              f"{len(descs)} {descs.mem_type} descriptors")
        self.agent.memory_event(False, descs)

    def query_memory(self, reg_list: Any, backend: str, mem_type: Optional[str] = None) -> list:
        if backend not in self.backends:  # NIXL checks this first, with ValueError
            raise ValueError(f"Backend '{backend}' not found. Available backends: {list(self.backends)}")
        descs = to_dlist(reg_list, mem_type, True, "query_memory")
        return query_mem(self._ptr("query_memory"), descs, [self._name_of[h] for h in self.backends[backend]],
                         "query_memory")

    # ---- metadata ----
    def get_agent_metadata(self) -> bytes:
        self._ptr("get_agent_metadata")
        return self.agent.getLocalMD()

    def add_remote_agent(self, metadata: bytes) -> bytes:
        """Load a peer's metadata; returns its name as bytes (as NIXL). Loading a known peer replaces it."""
        md = bytes(metadata)
        name = ctypes.create_string_buffer(_lib.NIXL_NAME_MAX + 1)
        check(L.nixl_md_load_remote(self._ptr("add_remote_agent"), md, len(md), name), "add_remote_agent",
              f"{len(md)} bytes of metadata")
        return name.value

    def remove_remote_agent(self, agent: str) -> None:
        agent = agent_name(agent)
        check(L.nixl_md_invalidate_remote(self._ptr("remove_remote_agent"), agent.encode()), "remove_remote_agent",
              f"peer {agent!r}")

    def check_remote_metadata(self, agent: str, descs: Any = None) -> bool:
        """True when the peer's metadata is loaded (and, given descs, covers them)."""
        call = "check_remote_metadata"
        agent = agent_name(agent)
        st = L.nixl_md_check_remote(self._ptr(call), agent.encode())
        if st != _lib.NIXL_OK or descs is None:
            return st == _lib.NIXL_OK
        dl = to_dlist(descs, None, False, call)
        if not len(dl):
            return True
        c = dl._c()
        prep = ctypes.c_void_p()
        if L.nixl_prep_create(self._agent, agent.encode(), ctypes.byref(c), None, ctypes.byref(prep)) != 0:
            return False
        L.nixl_prep_release(prep)
        return True

    def _etcd(self, call: str, fn: str, *args: Any) -> None:
        """Queue an etcd request (the agent's etcd thread does it; poll check_remote_metadata)."""
        if fn not in _lib.HAVE:
            raise _no_etcd(call)
        check(getattr(L, fn)(self._ptr(call), *args), call, "through etcd (NIXL_ETCD_ENDPOINTS, docs/etcd.md)")

    @staticmethod
    def _etcd_args(label: str = "") -> Any:
        if not label:
            return None
        a = _lib.nixl_etcd_args_t()
        a.field_mask = _lib.ETCD_ARG_LABEL
        a.label = label.encode()
        return a

    def send_local_metadata(self, ip_addr: str = "", port: int = DEFAULT_COMM_PORT) -> None:
        """Push this agent's metadata to a peer's listener (blocks up to NIXL_MD_TIMEOUT_MS), or
        without ip_addr publish it in etcd (returns at once)."""
        if not ip_addr:
            return self._etcd("send_local_metadata", "nixl_md_etcd_publish", None, None)
        check(L.nixl_md_send_local(self._ptr("send_local_metadata"), ip_addr.encode(), port), "send_local_metadata",
              f"to {ip_addr}:{port}")

    def fetch_remote_metadata(self, remote_agent: str, ip_addr: str = "", port: int = DEFAULT_COMM_PORT,
                              label: str = "") -> None:
        """Pull a peer's metadata from its listener and load it (blocks up to NIXL_MD_TIMEOUT_MS), or
        without ip_addr ask etcd for it (returns at once; check_remote_metadata says when it is loaded)."""
        call = "fetch_remote_metadata"
        remote_agent = agent_name(remote_agent)
        if not ip_addr:
            args = self._etcd_args(label)
            return self._etcd(call, "nixl_md_etcd_fetch", remote_agent.encode(),
                              ctypes.byref(args) if args else None)
        name = ctypes.create_string_buffer(_lib.NIXL_NAME_MAX + 1)
        check(L.nixl_md_fetch_remote(self._ptr(call), ip_addr.encode(), port, name), call,
              f"from {ip_addr}:{port}")
        got = name.value.decode()
        if remote_agent and got != remote_agent:
            raise make_error(nixlMismatchError, call, f"{ip_addr}:{port} is agent {got!r}, not {remote_agent!r} "
                             f"(its metadata was loaded)")

    def invalidate_local_metadata(self, ip_addr: str = "", port: int = DEFAULT_COMM_PORT) -> None:
        """Tell a peer's listener to forget this agent, or without ip_addr remove it from etcd."""
        call = "invalidate_local_metadata"
        if not ip_addr:
            return self._etcd(call, "nixl_md_etcd_invalidate_local", None)
        check(L.nixl_md_invalidate_local(self._ptr(call), ip_addr.encode(), port), call, f"at {ip_addr}:{port}")

    def _partial_args(self, descs: Any, backends: Optional[list[str]], call: str) -> tuple[Any, Any, Any]:
        """The C list and options of a partial-metadata call (and what they point to, to keep alive)."""
        dl = to_dlist(descs, None, False, call)
        opt, keep = self._opt(backends, None, call)
        return dl, dl._c(), (opt, keep)

    def get_partial_agent_metadata(self, descs: Any, inc_conn_info: bool = False,
                                   backends: Optional[list[str]] = None) -> bytes:
        """NIXL's: the metadata of the registrations holding descs (an empty list: connection info
        only), for backends (all when none), with connection info when inc_conn_info. A peer's
        add_remote_agent adds those regions to what it has of this agent; without connection info
        the peer must know this agent already (else nixlNotFoundError there)."""
        call = "get_partial_agent_metadata"
        dl, _c, (opt, _keep) = self._partial_args(descs, backends, call)
        return partial_blob(self._ptr(call), dl, inc_conn_info, opt, call)

    def send_partial_agent_metadata(self, descs: Any, inc_conn_info: bool = False,
                                    backends: Optional[list[str]] = None, ip_addr: str = "",
                                    port: int = DEFAULT_COMM_PORT, label: str = "") -> None:
        """With ip_addr: get_partial_agent_metadata's blob to the peer's listener, which loads it
        (blocks up to NIXL_MD_TIMEOUT_MS; the peer's refusal raises here). Without: publish it in
        etcd under label (connection info always included there; returns at once)."""
        call = "send_partial_agent_metadata"
        if ip_addr:
            dl, c, (opt, _keep) = self._partial_args(descs, backends, call)
            check(L.nixl_md_send_local_partial(self._ptr(call), ctypes.byref(c),
                                               _lib.MD_PARTIAL_CONN_INFO if inc_conn_info else 0, opt,
                                               ip_addr.encode(), port), call,
                  f"{len(dl)} descriptors to {ip_addr}:{port}")
            return
        if not label:
            raise make_error(nixlInvalidParamError, call, "a label is required to publish partial metadata in etcd "
                             "(or give ip_addr and port to send it to a peer's listener)")
        dl = to_dlist(descs, None, False, call)
        c = dl._c()
        self._etcd(call, "nixl_md_etcd_publish", ctypes.byref(c), ctypes.byref(self._etcd_args(label)))

    def make_connection(self, remote_agent: str, backends: Optional[list[str]] = None) -> None:
        """Connect to a loaded peer now (every backend that reaches it, or those named), so its first
        transfer pays no handshake (nixl_md_connect).  Optional: transfers connect themselves."""
        call = "make_connection"
        remote_agent = agent_name(remote_agent)
        opt, _keep = self._opt(backends, None, call)
        check(L.nixl_md_connect(self._ptr(call), remote_agent.encode(), opt), call, f"peer {remote_agent!r}")

    # ---- transfers ----
    def prep_xfer_dlist(self, agent_name: str, xfer_list: Any, mem_type: Optional[str] = None,
                        backends: Optional[list[str]] = None) -> nixl_prepped_dlist_handle:
        """Prepare a list once: agent_name NIXL_INIT_AGENT or "" = my side, else the peer's name."""
        call = "prep_xfer_dlist"
        strided = None
        if is_strided(xfer_list):  # NIXL 1.5's N x 5 rows: a mem_type is required (ValueError, as NIXL)
            if mem_type is None:
                raise make_error(nixlInvalidValueError, call, "Please specify a mem type for strided descriptors")
            strided = strided_rows(xfer_list, call)
        descs = to_dlist(xfer_list if strided is None else strided, mem_type, False, call)
        name = agent_name_of(agent_name)
        peer = None if name in ("", NIXL_INIT_AGENT) else name
        opt, _keep = self._opt(backends, None, call)
        c = descs._c()
        out = ctypes.c_void_p()
        check(L.nixl_prep_create(self._ptr(call), peer.encode() if peer else None, ctypes.byref(c), opt,
                                 ctypes.byref(out)), call,
              f"{len(descs)} descriptors of {'this agent' if peer is None else 'peer ' + repr(peer)}")
        return nixl_prepped_dlist_handle(self, out.value, peer, len(descs), descs.getType(),
                                         RunCache(descs, strided))

    def make_prepped_xfer(self, operation: str, local_xfer_side: nixl_prepped_dlist_handle, local_indices: Any,
                          remote_xfer_side: nixl_prepped_dlist_handle, remote_indices: Any,
                          notif_msg: Union[bytes, str] = b"", backends: Optional[list[str]] = None,
                          skip_desc_merge: bool = False, timeout_ms: Optional[int] = None) -> nixl_xfer_handle:
        """A request from index arrays into two prepared lists (runs are always merged; with
        skip_desc_merge telemetry counts the descriptors as given, as NIXL's unmerged request would).

        timeout_ms (ours): each post must end within it, else check_xfer_state
        raises NIXL_ERR_TIMEOUT (a nixlBackendError) and the notification is
        never delivered; 0 = no deadline; None = NIXL_XFER_TIMEOUT_MS.
        """
        call = "make_prepped_xfer"
        op = self._op(operation, call)
        lkeep, laddr, ln = index_array(local_indices, call)
        rkeep, raddr, rn = index_array(remote_indices, call)
        if ln != rn:
            raise make_error(nixlMismatchError, call, f"{ln} local indices but {rn} remote indices")
        if remote_xfer_side.peer is None:
            raise make_error(nixlInvalidParamError, call, "the remote side was prepared as local (NIXL_INIT_AGENT)")
        notif = _to_bytes(notif_msg)

        def make(msg: bytes) -> int:
            opt, _keep = self._opt(backends, msg if msg else None, call, timeout_ms=timeout_ms)
            first, second = sorted((local_xfer_side, remote_xfer_side), key=id)
            with first._lock, second._lock:
                lp = local_xfer_side._get(self, call)
                rp = remote_xfer_side._get(self, call)
                out = ctypes.c_void_p()
                check(L.nixl_xfer_make(self._ptr(call), op, lp, laddr, rp, raddr, ln, opt, ctypes.byref(out)), call,
                      f"{operation} of {ln} descriptors with {remote_xfer_side.peer}")
            return out.value

        def remake(msg: bytes, _indices: Any = (lkeep, rkeep)) -> int:  # the index arrays live with the request
            return make(msg)

        count = None if skip_desc_merge else merged_counter(local_xfer_side.runs, lkeep, remote_xfer_side.runs, rkeep)
        return nixl_xfer_handle(self, make(notif), remote_xfer_side.peer, notif, remake, count, op == _lib.OP_WRITE)

    def initialize_xfer(self, operation: str, local_descs: Any, remote_descs: Any, remote_agent: str,
                        notif_msg: Union[bytes, str] = b"", backends: Optional[list[str]] = None,
                        timeout_ms: Optional[int] = None) -> nixl_xfer_handle:
        """A one-shot request: descriptor i of local_descs pairs with descriptor i of remote_descs.

        timeout_ms: as for make_prepped_xfer.
        """
        call = "initialize_xfer"
        remote_agent = agent_name(remote_agent)
        op = self._op(operation, call)
        ld = to_dlist(local_descs, None, False, call)
        rd = to_dlist(remote_descs, None, False, call)
        notif = _to_bytes(notif_msg)

        def make(msg: bytes) -> int:
            opt, _keep = self._opt(backends, msg if msg else None, call, timeout_ms=timeout_ms)
            out = ctypes.c_void_p()
            check(create_xfer(self._ptr(call), op, ld, rd, remote_agent.encode(), opt, ctypes.byref(out)), call,
                  f"{operation} of {len(ld)} descriptors with {remote_agent!r}")
            return out.value

        return nixl_xfer_handle(self, make(notif), remote_agent, notif, make, None, op == _lib.OP_WRITE)

    def make_indexed_xfer(self, operation: str, remote_agent: str, local_bases: Any, local_slots: Any,
                          remote_bases: Any, remote_slots: Any, item_len: int, mem_type: str,
                          remote_mem_type: Optional[str] = None, local_stride: Optional[int] = None,
                          remote_stride: Optional[int] = None, notif_msg: Union[bytes, str] = b"",
                          backends: Optional[list[str]] = None, timeout_ms: Optional[int] = None) -> nixl_xfer_handle:
        """An indexed request (ours, libnixl's nixl_xfer_create_indexed): for every layer l and slot t,
        item_len bytes between local_bases[l] + local_slots[t] * local_stride and
        remote_bases[l] + remote_slots[t] * remote_stride, layer-major.

        A paged KV cache's request without its rows: the layer buffers' addresses (lists or integer
        arrays, one per layer, the same count on both sides), the request's token slots on each side
        (lists or integer arrays of one length, the same for every layer), and the slot's size.
        Strides default to item_len; remote_mem_type to mem_type.  Returns a request handle like
        initialize_xfer's: transfer, check_xfer_state, release_xfer_handle.  A piece outside
        registered memory raises nixlNotFoundError (libnixl's NIXL_ERR_NOT_REGISTERED), an overflowing
        slot x stride nixlInvalidParamError; nothing is made then.
        """
        call = "make_indexed_xfer"
        remote_agent = agent_name(remote_agent)
        op = self._op(operation, call)
        lmem = mem_type_code(mem_type, call)
        rmem = mem_type_code(remote_mem_type if remote_mem_type is not None else mem_type, call)
        if not isinstance(item_len, int) or isinstance(item_len, bool) or item_len < 0:
            raise make_error(nixlInvalidParamError, call, f"item_len must be a non-negative integer, not {item_len!r}")
        lst = item_len if local_stride is None else local_stride
        rst = item_len if remote_stride is None else remote_stride
        for name, v in (("local_stride", lst), ("remote_stride", rst)):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 64:
                raise make_error(nixlInvalidParamError, call, f"{name} must be an integer in [0, 2**64), not {v!r}")
        lbk, lbaddr, lbn = base_array(local_bases, call)
        rbk, rbaddr, rbn = base_array(remote_bases, call)
        lsk, lsaddr, lsn = index_array(local_slots, call)
        rsk, rsaddr, rsn = index_array(remote_slots, call)
        if lsn != rsn:
            raise make_error(nixlMismatchError, call, f"{lsn} local slots but {rsn} remote slots")
        if lbn != rbn:
            raise make_error(nixlMismatchError, call, f"{lbn} local layers but {rbn} remote layers")
        notif = _to_bytes(notif_msg)

        def make(msg: bytes, _keep: Any = (lbk, rbk, lsk, rsk)) -> int:
            opt, _okeep = self._opt(backends, msg if msg else None, call, timeout_ms=timeout_ms)
            lc = _lib.nixl_indexed_t(lmem, lbn, lbaddr or None, lst, lsaddr or None)
            rc = _lib.nixl_indexed_t(rmem, rbn, rbaddr or None, rst, rsaddr or None)
            out = ctypes.c_void_p()
            check(L.nixl_xfer_create_indexed(self._ptr(call), op, ctypes.byref(lc), ctypes.byref(rc), lsn, item_len,
                                             remote_agent.encode(), opt, ctypes.byref(out)), call,
                  f"{operation} of {lbn} layers x {lsn} slots with {remote_agent!r}")
            return out.value

        return nixl_xfer_handle(self, make(notif), remote_agent, notif, make, None, op == _lib.OP_WRITE)

    def _op(self, operation: str, call: str) -> int:
        return op_code(operation, call)  # nixlInvalidKeyError (a KeyError, as NIXL) if not READ/WRITE

    @staticmethod
    def _state(st: int) -> str:
        return "DONE" if st == _lib.NIXL_OK else "PROC" if st == _lib.NIXL_IN_PROG else "ERR"

    def transfer(self, handle: nixl_xfer_handle, notif_msg: Union[bytes, str] = b"") -> str:
        """Post (or re-post) a request: "DONE" if it completed inside the call, "PROC" if it runs.

        A notif_msg given here replaces the request's notification (the
        request is made again with it).  Errors raise their nixl*Error.
        """
        call = "transfer"
        msg = _to_bytes(notif_msg)
        with handle._lock:
            ptr = handle._get(self, call)
            if msg and msg != handle.notif:
                if L.nixl_xfer_status(ptr) == _lib.NIXL_IN_PROG:  # what a plain re-post would say
                    raise make_error(nixlRepostActiveError, call, f"request to {handle.peer!r} is still in flight")
                new = handle._remake(msg)
                L.nixl_xfer_release(ptr)
                handle._ptr = ptr = new
                handle.notif = msg
                handle.posted = False
            handle.start_us = time.time_ns() // 1000
            st = L.nixl_xfer_post(ptr)
            if st >= 0:
                handle.posted = True
                handle.reported = st == _lib.NIXL_OK
                if st == _lib.NIXL_OK:
                    self.agent.xfer_event(ptr, handle.is_write)
        try:
            return self._state(check(st, call, f"request to {handle.peer!r}"))
        except Exception as e:
            self.agent.error_event(e)
            raise

    def check_xfer_state(self, handle: nixl_xfer_handle) -> str:
        """"DONE", "PROC", or raises the failed request's nixl*Error (as NIXL's bindings do)."""
        call = "check_xfer_state"
        with handle._lock:
            ptr = handle._get(self, call)
            st = L.nixl_xfer_status(ptr)
            posted = handle.posted
            if st == _lib.NIXL_OK and posted and not handle.reported:  # the first to see it done tells the file
                handle.reported = True
                self.agent.xfer_event(ptr, handle.is_write)
        try:
            if st == _lib.ERR_INVALID_PARAM and not posted:  # what libnixl says of a request never posted
                raise make_error(nixlNotPostedError, call, f"request to {handle.peer!r} was never posted")
            return self._state(check(st, call, f"request to {handle.peer!r}"))
        except Exception as e:
            self.agent.error_event(e)
            raise

    def release_xfer_handle(self, handle: nixl_xfer_handle) -> None:
        """Free a request; one in flight is canceled (its notification is never delivered)."""
        handle.release()

    def release_dlist_handle(self, handle: nixl_prepped_dlist_handle) -> None:
        handle.release()

    def prep_mem_view(self, dlist: Any, *, backends: Optional[list[str]] = None) -> int:
        """NIXL's memory view (UCX GPU device API): not in libnixl, raises nixlNotSupportedError."""
        return self.agent.prepMemView(dlist, [])

    def release_mem_view(self, mvh: int) -> None:
        self.agent.releaseMemView(mvh)

    def _info(self, handle: nixl_xfer_handle, call: str) -> _lib.nixl_xfer_info_t:
        info = _lib.nixl_xfer_info_t()
        with handle._lock:
            check(L.nixl_xfer_info(handle._get(self, call), ctypes.byref(info)), call)
        return info

    def get_xfer_telemetry(self, handle: nixl_xfer_handle) -> nixlXferTelemetry:
        """NIXL's telemetry: startTime (us since the epoch), durations (us), bytes, descriptors as NIXL
        counts them.  Off (NIXL_TELEMETRY_ENABLE false, or unset without capture_telemetry):
        nixlNoTelemetryError."""
        call = "get_xfer_telemetry"
        if not self.agent.telemetry:
            raise make_error(nixlNoTelemetryError, call, "telemetry is off (NIXL_TELEMETRY_ENABLE false, or unset "
                             "without capture_telemetry)")
        info = self._info(handle, call)
        if not info.posts:
            raise make_error(nixlNoTelemetryError, call, f"request to {handle.peer!r} was never posted")
        return telemetry_of(info, handle.start_us, handle.desc_count)

    def get_xfer_info(self, handle: nixl_xfer_handle) -> nixl_xfer_info:
        """Our addition: backend, path ("shm.map", ...), bytes, descriptors before/after merging, times in ns."""
        return nixl_xfer_info(self._info(handle, "get_xfer_info"))

    def query_xfer_backend(self, handle: nixl_xfer_handle) -> str:
        """The backend a request uses, by the name it was created under ("UCX" if asked for as UCX)."""
        b = self._info(handle, "query_xfer_backend").backend.decode()
        return self._alias_of.get(b, b)

    def estimate_xfer_cost(self, req_handle: nixl_xfer_handle) -> tuple[int, int, str]:
        """(duration_us, err_margin_us, "ANALYTICAL_BACKEND"), as NIXL returns it: our own estimate
        from the request's path, bytes and runs (docs/python.md), made without posting it."""
        d, m = estimate_cost(self._info(req_handle, "estimate_xfer_cost"))
        return d, m, "ANALYTICAL_BACKEND"

    # ---- path accounting (our addition) ----
    def get_path_stats(self) -> dict[str, nixl_path_stat]:
        """Every path this agent used: requests, bytes, descriptors, errors, fallbacks."""
        rows = self._rows(L.nixl_path_stats, _lib.nixl_path_stat_t, "get_path_stats")
        return {r.path.decode(): nixl_path_stat(r) for r in rows}

    def get_fallback_stats(self) -> list[tuple[str, str, int]]:
        """Every (path, cause, count) of a fallback this agent took."""
        rows = self._rows(L.nixl_fallback_stats, _lib.nixl_fallback_stat_t, "get_fallback_stats")
        return [(r.path.decode(), r.cause.decode(), r.count) for r in rows]

    def _rows(self, fn: Any, typ: Any, call: str) -> list:
        cap = 16
        while True:
            arr = (typ * cap)()
            n = ctypes.c_size_t()
            check(fn(self._ptr(call), arr, cap, ctypes.byref(n)), call)
            if n.value <= cap:
                return list(arr[:n.value])
            cap = n.value

    # ---- notifications ----
    def _drain(self, call: str) -> list[tuple[str, bytes]]:
        return drain(self._ptr(call), call)

    def get_new_notifs(self, backends: Optional[list[str]] = None) -> dict[str, list[bytes]]:
        """Notifications received since the last call: {sender: [message, ...]} in arrival order."""
        out: dict[str, list[bytes]] = {}
        for sender, msg in self._drain("get_new_notifs"):
            out.setdefault(sender, []).append(msg)
        return out

    def update_notifs(self, backends: Optional[list[str]] = None) -> dict[str, list[bytes]]:
        """Add new notifications to self.notifs (kept until check_remote_xfer_done finds them)."""
        got = self._drain("update_notifs")
        with self._lock:
            for sender, msg in got:
                self.notifs.setdefault(sender, []).append(msg)
            return self.notifs

    def check_remote_xfer_done(self, remote_agent_name: str, lookup_tag: Union[bytes, str],
                               backends: Optional[list[str]] = None, tag_is_prefix: bool = True) -> bool:
        """True (and the message is consumed) when a notification from that peer starts with (or,
        tag_is_prefix=False, contains) lookup_tag."""
        remote_agent_name = agent_name(remote_agent_name)
        tag = _to_bytes(lookup_tag)
        self.update_notifs()
        with self._lock:
            msgs = self.notifs.get(remote_agent_name, [])
            for i, m in enumerate(msgs):
                if (m.startswith(tag) if tag_is_prefix else tag in m):
                    del msgs[i]
                    return True
        return False

    def send_notif(self, remote_agent_name: str, notif_msg: Union[bytes, str], backend: Optional[str] = None) -> None:
        call = "send_notif"
        remote_agent_name = agent_name(remote_agent_name)
        msg = _to_bytes(notif_msg)
        opt, _keep = self._opt([backend] if backend else None, None, call)
        check(L.nixl_notif_send(self._ptr(call), remote_agent_name.encode(), msg, len(msg), opt), call,
              f"to {remote_agent_name!r}")

    # ---- descriptor (de)serialization, as NIXL has them ----
    def get_serialized_descs(self, descs: _DList) -> bytes:
        import pickle
        return pickle.dumps(descs)

    def deserialize_descs(self, serialized_descs: bytes) -> _DList:
        import pickle
        return pickle.loads(serialized_descs)


def _no_etcd(call: str) -> nixlNotImplementedYet:
    return make_error(nixlNotImplementedYet, call,
                      f"this libnixl has no metadata server (etcd) calls yet ({ETCD_ISSUE}); pass ip_addr and port "
                      f"of the peer's listener, or exchange get_agent_metadata() bytes yourself")
