"""NIXL's test helpers (nixl._utils): host buffers by address, a fill and a compare.

NIXL's tests and examples allocate with malloc_passthru(size) (aligned to
4096 bytes, for O_DIRECT file I/O), fill with ba_buf(addr, size) (0xba
bytes), check with verify_transfer(a, b, size) and free with
free_passthru(addr).  Here they are libc calls through ctypes.
verify_transfer raises AssertionError naming the first differing byte (NIXL's
C assert aborts the process in a debug build and checks nothing otherwise).
"""

from __future__ import annotations

import ctypes

_libc = ctypes.CDLL(None, use_errno=True)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

IO_SIZE = 4096


def malloc_passthru(size: int) -> int:
    """The address of size bytes of host memory aligned to 4096; MemoryError if none."""
    if size < 0:
        raise ValueError(f"size must be >= 0, not {size}")
    p = ctypes.c_void_p()
    rc = _libc.posix_memalign(ctypes.byref(p), IO_SIZE, max(int(size), 1))
    if rc != 0 or not p.value:
        raise MemoryError(f"malloc_passthru({size}): posix_memalign failed ({rc})")
    return p.value


def free_passthru(buf: int) -> None:
    _libc.free(buf)


def ba_buf(addr: int, size: int) -> None:
    """Fill size bytes at addr with 0xba."""
    ctypes.memset(addr, 0xBA, size)


def verify_transfer(addr1: int, addr2: int, size: int) -> None:
    """Compare size bytes at addr1 and addr2; AssertionError at the first difference."""
    a = ctypes.string_at(addr1, size)
    b = ctypes.string_at(addr2, size)
    if a != b:
        i = next(j for j in range(size) if a[j] != b[j])
        raise AssertionError(f"verify_transfer: byte {i} differs (0x{a[i]:02x} at 0x{addr1 + i:x}, "
                             f"0x{b[i]:02x} at 0x{addr2 + i:x})")


__all__ = ["malloc_passthru", "free_passthru", "ba_buf", "verify_transfer"]
