"""Finding libnixl.so and declaring its C API for ctypes.

Every other module reaches the library through ``lib`` and the structures
below; nothing here knows NIXL's Python names.  The library is opened with
ctypes.CDLL (not PyDLL), so every call into it releases the GIL for its whole
duration: a call that blocks (a metadata fetch, a post that copies) lets other
Python threads run.

Where the library comes from, first match wins:
  1. NIXL_LIB: the path of libnixl.so (or a directory holding it);
  2. the Meson build tree the process runs in (the current directory or a
     parent holding build.ninja and libnixl.so.0);
  3. the system loader (libnixl.so.0, then ctypes.util.find_library).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_size_t, c_uint16, c_uint32, c_uint64,
                    c_void_p)

# The C API this module declares; a library of another major version has
# other structures and is refused.
ABI_MAJOR = 0
_SONAMES = ("libnixl.so.0", "libnixl.so")


class NixlLibraryNotFound(ImportError):
    """libnixl.so could not be loaded; the message lists every place tried."""


def _candidates_in(directory: str) -> list[str]:
    return [os.path.join(directory, n) for n in _SONAMES if os.path.exists(os.path.join(directory, n))]


def _build_tree_dirs(start: str) -> list[str]:
    """The Meson build root containing start (start itself or a parent)."""
    d = os.path.abspath(start)
    while True:
        if os.path.exists(os.path.join(d, "build.ninja")):
            return [d]
        parent = os.path.dirname(d)
        if parent == d:
            return []
        d = parent


def _load() -> tuple[ctypes.CDLL, str]:
    tried: list[str] = []
    env = os.environ.get("NIXL_LIB")
    if env:
        paths = _candidates_in(env) if os.path.isdir(env) else [env]
        if not paths:
            raise NixlLibraryNotFound(f"NIXL_LIB={env}: no {' or '.join(_SONAMES)} in that directory")
        try:
            return ctypes.CDLL(paths[0]), paths[0]
        except OSError as e:
            raise NixlLibraryNotFound(f"NIXL_LIB={env}: {e}{_asan_hint(str(e))}") from e
    for d in _build_tree_dirs(os.getcwd()):
        for p in _candidates_in(d):
            try:
                return ctypes.CDLL(p), p
            except OSError as e:
                tried.append(f"{p}: {e}{_asan_hint(str(e))}")
    names = list(_SONAMES)
    found = ctypes.util.find_library("nixl")
    if found and found not in names:
        names.append(found)
    for n in names:
        try:
            return ctypes.CDLL(n), n
        except OSError as e:
            tried.append(f"{n}: {e}")
    raise NixlLibraryNotFound("libnixl not found. Set NIXL_LIB to the path of libnixl.so, run from a Meson build "
                              "directory, or install the library where the loader finds it. Tried:\n  " +
                              "\n  ".join(tried or ["(nothing)"]))


def _asan_hint(msg: str) -> str:
    if "ASan runtime" in msg or "libasan" in msg:
        return " (a sanitizer build: run python with LD_PRELOAD=$(cc -print-file-name=libasan.so))"
    return ""


# ---- structures of include/nixl.h ----

class nixl_desc_t(Structure):
    _fields_ = [("addr", c_uint64), ("len", c_uint64), ("dev_id", c_uint32), ("meta_len", c_uint32),
                ("meta", c_void_p)]


class nixl_dlist_t(Structure):
    _fields_ = [("mem_type", c_int), ("count", c_size_t), ("descs", c_void_p)]


class nixl_rows_t(Structure):
    _fields_ = [("mem_type", c_int), ("count", c_size_t), ("rows", c_void_p), ("stride", c_size_t),
                ("is_signed", c_int)]


class nixl_indexed_t(Structure):
    _fields_ = [("mem_type", c_int), ("layers", c_size_t), ("bases", c_void_p), ("stride", c_uint64),
                ("slots", c_void_p)]


class nixl_agent_config_t(Structure):
    _fields_ = [("field_mask", c_uint64), ("name", c_char_p), ("progress_thread", c_int), ("listen", c_int),
                ("listen_port", c_uint16), ("thread_mode", c_int), ("progress_interval_us", c_uint32)]


class nixl_param_t(Structure):
    _fields_ = [("key", c_char_p), ("value", c_char_p)]


class nixl_param_info_t(Structure):
    _fields_ = [("key", c_char_p), ("default_value", c_char_p), ("doc", c_char_p)]


class nixl_backend_info_t(Structure):
    _fields_ = [("name", c_char_p), ("description", c_char_p), ("mem_types", c_uint32), ("caps", c_uint32),
                ("num_params", c_size_t), ("params", POINTER(nixl_param_info_t)), ("origin", c_char_p)]


class nixl_opt_args_t(Structure):
    _fields_ = [("field_mask", c_uint64), ("backends", c_void_p), ("num_backends", c_size_t), ("notif", c_void_p),
                ("notif_len", c_size_t), ("timeout_ms", c_uint32)]


class nixl_mem_info_t(Structure):
    _fields_ = [("accessible", c_int), ("size", c_uint64), ("mode", c_uint32), ("mtime", ctypes.c_int64)]


class nixl_xfer_info_t(Structure):
    _fields_ = [("backend", c_char * 32), ("path", c_char * 48), ("bytes", c_uint64), ("descs", c_uint64),
                ("descs_in", c_uint64), ("post_ns", c_uint64), ("xfer_ns", c_uint64), ("posts", c_uint64)]


class nixl_path_stat_t(Structure):
    _fields_ = [("path", c_char * 48), ("requests", c_uint64), ("bytes", c_uint64), ("descs", c_uint64),
                ("errors", c_uint64), ("fallbacks", c_uint64)]


class nixl_fallback_stat_t(Structure):
    _fields_ = [("path", c_char * 48), ("cause", c_char * 80), ("count", c_uint64)]


class nixl_etcd_args_t(Structure):
    _fields_ = [("field_mask", c_uint64), ("label", c_char_p), ("timeout_ms", c_uint32), ("cb", c_void_p),
                ("cb_arg", c_void_p)]


class nixl_config_info_t(Structure):
    _fields_ = [("name", c_char_p), ("default_value", c_char_p), ("doc", c_char_p), ("value", c_char_p)]


# Constants of include/nixl.h.
NIXL_OK, NIXL_IN_PROG = 0, 1
ERR_INVALID_PARAM = -1
NIXL_NAME_MAX = 63
NIXL_NOTIF_MAX = 65536
MEM_DRAM, MEM_VRAM, MEM_BLOCK, MEM_OBJ, MEM_FILE = 0, 1, 2, 3, 4
MEM_NAMES = {MEM_DRAM: "DRAM", MEM_VRAM: "VRAM", MEM_BLOCK: "BLOCK", MEM_OBJ: "OBJ", MEM_FILE: "FILE"}
THREAD_SERIALIZED = 1
OP_READ, OP_WRITE = 0, 1
CFG_NAME, CFG_PROGRESS_THREAD, CFG_LISTEN, CFG_LISTEN_PORT, CFG_THREAD_MODE = 1, 2, 4, 8, 16
CFG_PROGRESS_INTERVAL_US = 32
OPT_BACKENDS, OPT_NOTIF, OPT_TIMEOUT_MS = 1, 2, 4
ETCD_ARG_LABEL, ETCD_ARG_TIMEOUT_MS = 1, 2
MD_PARTIAL_CONN_INFO = 1
CAP_NAMES = {1: "LOCAL", 2: "SAME_HOST", 4: "CROSS_HOST", 8: "NOTIF", 16: "PROGRESS"}

# nixl_notif_cb_t: void (*)(const char *sender, const void *msg, size_t len, void *arg)
NOTIF_CB = ctypes.CFUNCTYPE(None, c_char_p, c_void_p, c_size_t, c_void_p)

_P = c_void_p
_PP = POINTER(c_void_p)
_STATUS = c_int
_PROTOTYPES = {
    "nixl_strerror": (c_char_p, [c_int]),
    "nixl_status_name": (c_char_p, [c_int]),
    "nixl_version": (c_char_p, []),
    "nixl_agent_create": (_STATUS, [POINTER(nixl_agent_config_t), _PP]),
    "nixl_agent_destroy": (None, [_P]),
    "nixl_agent_name": (c_char_p, [_P]),
    "nixl_agent_listen_port": (c_uint16, [_P]),
    "nixl_backends_available": (_STATUS, [POINTER(POINTER(nixl_backend_info_t)), POINTER(c_size_t)]),
    "nixl_backend_create": (_STATUS, [_P, c_char_p, POINTER(nixl_param_t), c_size_t, _PP]),
    "nixl_backend_name": (c_char_p, [_P]),
    "nixl_mem_register": (_STATUS, [_P, POINTER(nixl_dlist_t), POINTER(nixl_opt_args_t)]),
    "nixl_mem_deregister": (_STATUS, [_P, POINTER(nixl_dlist_t), POINTER(nixl_opt_args_t)]),
    "nixl_mem_alloc": (_STATUS, [c_size_t, _PP]),
    "nixl_mem_free": (None, [_P, c_size_t]),
    "nixl_mem_query": (_STATUS, [_P, POINTER(nixl_dlist_t), c_char_p, c_void_p]),
    "nixl_md_get_local": (_STATUS, [_P, _PP, POINTER(c_size_t)]),
    "nixl_md_get_local_partial": (_STATUS, [_P, POINTER(nixl_dlist_t), c_uint32, POINTER(nixl_opt_args_t), _PP,
                                            POINTER(c_size_t)]),
    "nixl_md_load_remote": (_STATUS, [_P, c_char_p, c_size_t, c_char_p]),
    "nixl_md_invalidate_remote": (_STATUS, [_P, c_char_p]),
    "nixl_md_check_remote": (_STATUS, [_P, c_char_p]),
    "nixl_md_connect": (_STATUS, [_P, c_char_p, POINTER(nixl_opt_args_t)]),
    "nixl_md_send_local": (_STATUS, [_P, c_char_p, c_uint16]),
    "nixl_md_send_local_partial": (_STATUS, [_P, POINTER(nixl_dlist_t), c_uint32, POINTER(nixl_opt_args_t),
                                             c_char_p, c_uint16]),
    "nixl_md_fetch_remote": (_STATUS, [_P, c_char_p, c_uint16, c_char_p]),
    "nixl_md_invalidate_local": (_STATUS, [_P, c_char_p, c_uint16]),
    "nixl_free": (None, [_P]),
    "nixl_xfer_create": (_STATUS, [_P, c_int, POINTER(nixl_dlist_t), POINTER(nixl_dlist_t), c_char_p,
                                   POINTER(nixl_opt_args_t), _PP]),
    "nixl_prep_create": (_STATUS, [_P, c_char_p, POINTER(nixl_dlist_t), POINTER(nixl_opt_args_t), _PP]),
    "nixl_prep_release": (None, [_P]),
    "nixl_descs_from_rows": (_STATUS, [_P, _P, c_size_t, c_size_t, c_int, POINTER(c_size_t)]),
    "nixl_xfer_create_rows": (_STATUS, [_P, c_int, POINTER(nixl_rows_t), POINTER(nixl_rows_t), c_char_p,
                                        POINTER(nixl_opt_args_t), _PP]),
    "nixl_xfer_create_indexed": (_STATUS, [_P, c_int, POINTER(nixl_indexed_t), POINTER(nixl_indexed_t), c_size_t,
                                           c_uint64, c_char_p, POINTER(nixl_opt_args_t), _PP]),
    "nixl_xfer_make": (_STATUS, [_P, c_int, _P, _P, _P, _P, c_size_t, POINTER(nixl_opt_args_t), _PP]),
    "nixl_xfer_post": (_STATUS, [_P]),
    "nixl_xfer_status": (_STATUS, [_P]),
    "nixl_xfer_release": (None, [_P]),
    "nixl_xfer_info": (_STATUS, [_P, POINTER(nixl_xfer_info_t)]),
    "nixl_notif_send": (_STATUS, [_P, c_char_p, c_char_p, c_size_t, POINTER(nixl_opt_args_t)]),
    "nixl_notifs_get": (_STATUS, [_P, NOTIF_CB, _P, POINTER(c_size_t)]),
    "nixl_agent_progress": (_STATUS, [_P]),
    "nixl_path_stats": (_STATUS, [_P, POINTER(nixl_path_stat_t), c_size_t, POINTER(c_size_t)]),
    "nixl_fallback_stats": (_STATUS, [_P, POINTER(nixl_fallback_stat_t), c_size_t, POINTER(c_size_t)]),
    "nixl_config_count": (c_size_t, []),
    "nixl_config_get": (_STATUS, [c_size_t, POINTER(nixl_config_info_t)]),
}
# Calls a libnixl may lack (being built while this package was written); HAVE
# says which are there.
_OPTIONAL = {
    "nixl_md_etcd_publish": (_STATUS, [_P, POINTER(nixl_dlist_t), POINTER(nixl_etcd_args_t)]),
    "nixl_md_etcd_fetch": (_STATUS, [_P, c_char_p, POINTER(nixl_etcd_args_t)]),
    "nixl_md_etcd_invalidate_local": (_STATUS, [_P, POINTER(nixl_etcd_args_t)]),
}
HAVE: set[str] = set()


def _declare(cdll: ctypes.CDLL, where: str) -> None:
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in _OPTIONAL.items():
        fn = getattr(cdll, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
            HAVE.add(name)
    if missing:
        raise NixlLibraryNotFound(f"{where}: not the libnixl this package was written for: "
                                  f"missing {', '.join(missing)}")


def _check_layout() -> None:
    # _descs packs nixl_desc_t as four 64-bit words; make sure that is the C layout.
    if (ctypes.sizeof(nixl_desc_t) != 32 or nixl_desc_t.dev_id.offset != 16 or nixl_desc_t.meta.offset != 24 or
            ctypes.sizeof(c_void_p) != 8):
        raise ImportError("nixl: unsupported platform (the binding needs 64-bit pointers)")


lib, path = _load()
_declare(lib, path)
_check_layout()
version = lib.nixl_version().decode()
if int(version.split(".")[0]) != ABI_MAJOR:
    raise NixlLibraryNotFound(f"{path} is libnixl {version}; this package speaks the {ABI_MAJOR}.x API")

LITTLE_ENDIAN = sys.byteorder == "little"


def status_name(st: int) -> str:
    return lib.nixl_status_name(st).decode()


def strerror(st: int) -> str:
    return lib.nixl_strerror(st).decode()


def known_statuses() -> dict[int, str]:
    """Every status code the loaded library knows, with its symbol."""
    out = {}
    for code in range(-128, 2):
        name = status_name(code)
        if name != "NIXL_UNKNOWN_STATUS":
            out[code] = name
    return out
