"""Host memory that same-host peers map directly (our addition to NIXL's API).

nixl_mem_alloc gives a shared mapping: a peer on this host copies into it
with memcpy (path shm.map) instead of one process_vm_writev per descriptor
(shm.cma).  The memory is freed when the returned object, and every view of
it, is garbage; deregister it before dropping the last reference.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from . import _lib
from ._errors import check


def alloc_buffer(nbytes: int) -> ctypes.Array:
    """A ctypes byte array of nbytes in shareable host memory (zero-filled)."""
    if nbytes <= 0:
        from ._errors import make_error, nixlInvalidParamError
        raise make_error(nixlInvalidParamError, "alloc_buffer", f"size must be positive, not {nbytes}")
    p = ctypes.c_void_p()
    check(_lib.lib.nixl_mem_alloc(nbytes, ctypes.byref(p)), "alloc_buffer", f"{nbytes} bytes")
    buf = (ctypes.c_uint8 * nbytes).from_address(p.value)
    weakref.finalize(buf, _lib.lib.nixl_mem_free, p.value, nbytes)
    return buf


def alloc_array(shape: Any, dtype: Any = "uint8") -> Any:
    """A numpy array in shareable host memory (needs numpy)."""
    import numpy as np
    dt = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    count = 1
    for s in shape:
        count *= int(s)
    buf = alloc_buffer(max(count * dt.itemsize, 1))
    return np.frombuffer(buf, dtype=dt, count=count).reshape(shape)
