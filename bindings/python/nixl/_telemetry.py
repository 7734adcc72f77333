"""NIXL's telemetry, as an agent of this package keeps it.

Two parts:

* whether telemetry is on (NIXL's rule): NIXL_TELEMETRY_ENABLE decides when
  it is set (y/yes/on/true/enable/1 or n/no/off/false/disable/0, any case);
  unset, the agent config's capture_telemetry (captureTelemetry) decides.
  Off, get_xfer_telemetry raises nixlNoTelemetryError.

* the telemetry file NIXL's readers read (NIXL_TELEMETRY_DIR): with
  telemetry on and NIXL_TELEMETRY_DIR set (and NIXL_TELEMETRY_EXPORTER
  unset, empty or BUFFER), each agent makes the file DIR/<agent name>: a
  cyclic buffer in a shared mapping, as NIXL's docs/telemetry.md describes
  (TELEMETRY_VERSION 4):

      header (40 bytes, native byte order):
          u64 write_pos, u64 read_pos, i32 version, i32 expected_version,
          u64 capacity, u64 mask (= capacity - 1; capacity a power of 2)
      then capacity events of 16 bytes: u32 event_type, 4 bytes padding,
          u64 value

  The writer owns write_pos, a reader owns read_pos; the buffer is full
  when write_pos + 1 == read_pos (mod capacity), and a full buffer drops
  the event (counted, and said later as agent_telemetry_events_dropped).
  capacity is NIXL_TELEMETRY_BUFFER_SIZE (default 4096).

  Events are written when they happen, on the thread of the call that
  sees them (NIXL stages them and flushes every NIXL_TELEMETRY_RUN_INTERVAL
  ms; ours needs no thread): agent_memory_registered / _deregistered with
  the bytes of each (de)registration call; for each post of a request, when
  the call that sees it complete returns (transfer() that returns "DONE",
  else the check_xfer_state() that first says "DONE"), agent_xfer_post_time
  and agent_xfer_time (us), agent_tx_bytes or agent_rx_bytes (WRITE / READ),
  and agent_tx_requests_num or agent_rx_requests_num (1); agent_err_* (1)
  when a transfer call raises, by NIXL's status of the error class.
  NIXL_TELEMETRY_ENABLED_METRICS (comma-separated globs of event names)
  keeps only the events it names, as NIXL's.
"""

from __future__ import annotations

import fnmatch
import logging
import mmap
import os
import struct
import threading
from array import array
from typing import Any, Optional, Sequence

log = logging.getLogger("nixl")

TELEMETRY_VERSION = 4
HEADER = struct.Struct("=QQiiQQ")  # write_pos, read_pos, version, expected_version, capacity, mask
EVENT = struct.Struct("=I4xQ")  # event_type, padding, value
DEFAULT_BUFFER_SIZE = 4096

# NIXL's nixl_telemetry_event_type_t, in its order.
EVENT_NAMES = ("agent_tx_bytes", "agent_rx_bytes", "agent_tx_requests_num", "agent_rx_requests_num",
               "agent_memory_registered", "agent_memory_deregistered", "agent_xfer_time", "agent_xfer_post_time",
               "agent_err_not_posted", "agent_err_invalid_param", "agent_err_backend", "agent_err_not_found",
               "agent_err_mismatch", "agent_err_not_allowed", "agent_err_repost_active", "agent_err_unknown",
               "agent_err_not_supported", "agent_err_remote_disconnect", "agent_err_canceled",
               "agent_err_no_telemetry", "agent_telemetry_events_dropped")
EV = {n: i for i, n in enumerate(EVENT_NAMES)}

# Our error class -> NIXL's agent_err_* event.
_ERR_EVENT = {
    "nixlNotPostedError": "agent_err_not_posted", "nixlInvalidParamError": "agent_err_invalid_param",
    "nixlBackendError": "agent_err_backend", "nixlNotFoundError": "agent_err_not_found",
    "nixlMismatchError": "agent_err_mismatch", "nixlNotAllowedError": "agent_err_not_allowed",
    "nixlRepostActiveError": "agent_err_repost_active", "nixlUnknownError": "agent_err_unknown",
    "nixlNotSupportedError": "agent_err_not_supported", "nixlRemoteDisconnectError": "agent_err_remote_disconnect",
    "nixlCancelledError": "agent_err_canceled", "nixlNoTelemetryError": "agent_err_no_telemetry",
}

_TRUE = ("y", "yes", "on", "true", "enable", "1")
_FALSE = ("n", "no", "off", "false", "disable", "0")


def telemetry_enabled(capture: bool) -> bool:
    """NIXL's rule: NIXL_TELEMETRY_ENABLE decides when set, else capture_telemetry."""
    v = os.environ.get("NIXL_TELEMETRY_ENABLE")
    if v is None:
        return bool(capture)
    w = v.strip().lower()
    if w in _TRUE:
        return True
    if w in _FALSE:
        if capture:
            log.warning("NIXL_TELEMETRY_ENABLE=%s: telemetry is off; capture_telemetry=True is ignored", v)
        return False
    log.warning("NIXL_TELEMETRY_ENABLE=%r is neither true (%s) nor false (%s): taken as unset", v,
                "/".join(_TRUE), "/".join(_FALSE))
    return bool(capture)


def _enabled_metrics() -> list[bool]:
    spec = os.environ.get("NIXL_TELEMETRY_ENABLED_METRICS", "")
    tokens = {t.strip() for t in spec.split(",") if t.strip()}
    if not tokens:
        return [True] * len(EVENT_NAMES)
    on = [any(fnmatch.fnmatchcase(n, t) for t in tokens) for n in EVENT_NAMES]
    for t in tokens:
        if not any(fnmatch.fnmatchcase(n, t) for n in EVENT_NAMES):
            log.warning("NIXL_TELEMETRY_ENABLED_METRICS entry %r matches no telemetry event: ignored", t)
    return on


class TelemetryFile:
    """The cyclic buffer of one agent in DIR/<agent name> (module docstring has the format)."""

    def __init__(self, path: str, capacity: int):
        if capacity <= 0 or capacity & (capacity - 1):
            raise ValueError(f"NIXL_TELEMETRY_BUFFER_SIZE must be a power of 2, not {capacity}")
        self.path = path
        self.capacity = capacity
        self._mask = capacity - 1
        self._lock = threading.Lock()
        self._dropped = 0
        self._on = _enabled_metrics()
        size = HEADER.size + EVENT.size * capacity
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        HEADER.pack_into(self._map, 0, 0, 0, TELEMETRY_VERSION, TELEMETRY_VERSION, capacity, self._mask)

    @classmethod
    def for_agent(cls, name: str) -> Optional["TelemetryFile"]:
        """The file of agent `name` when NIXL_TELEMETRY_DIR asks for one, else None."""
        d = os.environ.get("NIXL_TELEMETRY_DIR")
        if not d:
            return None
        exporter = os.environ.get("NIXL_TELEMETRY_EXPORTER", "")
        if exporter not in ("", "BUFFER"):
            log.warning("NIXL_TELEMETRY_EXPORTER=%s: this package has only NIXL's file exporter (BUFFER); agent %s "
                        "collects telemetry without writing it", exporter, name)
            return None
        cap = int(os.environ.get("NIXL_TELEMETRY_BUFFER_SIZE", DEFAULT_BUFFER_SIZE))
        f = cls(os.path.join(d, name), cap)
        log.info("agent %s: telemetry written to %s (%d events)", name, f.path, cap)
        return f

    def _push(self, typ: int, value: int) -> bool:
        m = self._map
        w = struct.unpack_from("=Q", m, 0)[0]
        r = struct.unpack_from("=Q", m, 8)[0]
        nxt = (w + 1) & self._mask
        if nxt == r:
            return False
        EVENT.pack_into(m, HEADER.size + EVENT.size * w, typ, value & 0xFFFFFFFFFFFFFFFF)
        struct.pack_into("=Q", m, 0, nxt)  # after the event: a reader never sees half of one
        return True

    def events(self, pairs: Sequence[tuple[str, int]]) -> None:
        """Append events (name, value), all or none (as NIXL's batch of a request's four)."""
        todo = [(EV[n], v) for n, v in pairs if self._on[EV[n]]]
        if not todo:
            return
        with self._lock:
            if self._map.closed:
                return
            if self._dropped and self._on[EV["agent_telemetry_events_dropped"]]:
                if self._push(EV["agent_telemetry_events_dropped"], self._dropped):
                    self._dropped = 0
            m = self._map
            w = struct.unpack_from("=Q", m, 0)[0]
            r = struct.unpack_from("=Q", m, 8)[0]
            free = (r - w - 1) & self._mask
            if free < len(todo):
                self._dropped += len(todo)
                return
            for typ, v in todo:
                self._push(typ, v)

    def error(self, exc: BaseException) -> None:
        for cls in type(exc).__mro__:
            ev = _ERR_EVENT.get(cls.__name__)
            if ev:
                self.events([(ev, 1)])
                return

    def xfer_done(self, is_write: bool, nbytes: int, post_us: int, xfer_us: int) -> None:
        d = "tx" if is_write else "rx"
        self.events([("agent_xfer_post_time", post_us), ("agent_xfer_time", xfer_us), (f"agent_{d}_bytes", nbytes),
                     (f"agent_{d}_requests_num", 1)])

    def close(self) -> None:
        with self._lock:
            if not self._map.closed:
                self._map.flush()
                self._map.close()


def read_events(path: str) -> list[tuple[str, int]]:
    """Our reader of the format (tests and tools): every unread event, consumed as NIXL's readers do."""
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
    try:
        w, r, version, _exp, cap, mask = HEADER.unpack_from(m, 0)
        if version != TELEMETRY_VERSION:
            raise RuntimeError(f"{path}: telemetry version {version}, not {TELEMETRY_VERSION}")
        out = []
        while r != w:
            typ, v = EVENT.unpack_from(m, HEADER.size + EVENT.size * r)
            out.append((EVENT_NAMES[typ] if typ < len(EVENT_NAMES) else f"unknown_event_{typ}", v))
            r = (r + 1) & mask
        struct.pack_into("=Q", m, 8, r)
        return out
    finally:
        m.close()


# ---- descCount as NIXL counts it ----

def _runs(rows: Any) -> tuple[list[int], list[int], list[int], list[bool], list[int]]:
    """NIXL's prepared list as runs (its populate): equal-length blocks of one device at a constant
    positive stride.  Per block: its run; per run: first block, block count, dense (stride == len),
    stride.  (NIXL also ends a run at the end of a registered region; ours does not know the
    peer's regions, so adjacent registrations of one run count as one.)"""
    run_of: list[int] = []
    start: list[int] = []
    count: list[int] = []
    stride: list[int] = []
    prev = None
    cur_len = cur_dev = None
    for i, (addr, ln, dev) in enumerate(rows):
        ext = False
        if prev is not None and ln == cur_len and dev == cur_dev:
            if count[-1] == 1:
                ext = addr > prev
                if ext:
                    stride[-1] = addr - prev
            else:
                ext = addr - prev == stride[-1]
        if ext:
            count[-1] += 1
        else:
            start.append(i)
            count.append(1)
            stride.append(ln)
            cur_len, cur_dev = ln, dev
        run_of.append(len(start) - 1)
        prev = addr
    lens = [rows[s][1] for s in start]
    dense = [stride[k] == lens[k] for k in range(len(start))]
    return run_of, start, count, dense, stride


class RunCache:
    """The runs of one prepared list, made the first time a request's telemetry asks."""

    __slots__ = ("_descs", "_strided", "_runs", "_lock")

    def __init__(self, descs: Any, strided: Any = None):
        # (addr, len, dev) as prepared: a copy, since the caller's list may change afterwards
        from ._descs import words_array
        words = getattr(descs, "_words", None)
        self._descs = None if strided is not None else (words_array(words) if words is not None else list(descs))
        self._strided = strided  # N x 5 rows given to prep_xfer_dlist: NIXL keeps them as its runs
        self._runs: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._runs is None:
                if self._strided is not None:
                    self._runs = _strided_runs(self._strided)
                elif isinstance(self._descs, array):
                    w = self._descs
                    from ._descs import _split_dev_word
                    self._runs = _runs(list(zip(w[0::4], w[1::4], [_split_dev_word(x)[0] for x in w[2::4]])))
                else:
                    self._runs = _runs([r[:3] for r in self._descs])
                self._descs = self._strided = None
            return self._runs


def _strided_runs(rows: Any) -> tuple[list[int], list[int], list[int], list[bool], list[int]]:
    """The runs of a strided list as NIXL keeps them: one per row, dense when stride == len."""
    counts = [int(r[4]) for r in rows]
    run_of: list[int] = []
    start: list[int] = []
    at = 0
    for k, c in enumerate(counts):
        start.append(at)
        run_of.extend([k] * c)
        at += c
    stride = [int(r[3]) for r in rows]
    dense = [int(r[3]) == int(r[1]) for r in rows]
    return run_of, start, counts, dense, stride


def merged_count(lruns: RunCache, lidx: Any, rruns: RunCache, ridx: Any) -> int:
    """How many descriptors NIXL's makeXferReq makes of these indices: consecutive indices merge
    while both sides stay in one dense run of the same stride."""
    lr, rr = lruns.get(), rruns.get()
    n = len(lidx)
    if n == 0:
        return 0
    lrun_of, _, _, ldense, lstride = lr
    rrun_of, _, _, _, rstride = rr
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        li = np.asarray(lidx, dtype=np.int64)
        ri = np.asarray(ridx, dtype=np.int64)
        lrun = np.asarray(lrun_of, dtype=np.int64)[li]
        rrun = np.asarray(rrun_of, dtype=np.int64)[ri]
        mergeable = np.asarray(ldense)[lrun] & (np.asarray(lstride)[lrun] == np.asarray(rstride)[rrun])
        joins = ((li[1:] == li[:-1] + 1) & (ri[1:] == ri[:-1] + 1) & (lrun[1:] == lrun[:-1]) &
                 (rrun[1:] == rrun[:-1]) & mergeable[:-1])
        return int(n - np.count_nonzero(joins))
    c = 1
    for k in range(1, n):
        a, b = int(lidx[k - 1]), int(ridx[k - 1])
        la, ra = lrun_of[a], rrun_of[b]
        if not (int(lidx[k]) == a + 1 and int(ridx[k]) == b + 1 and lrun_of[a + 1] == la and rrun_of[b + 1] == ra
                and ldense[la] and lstride[la] == rstride[ra]):
            c += 1
    return c
