"""Descriptor lists, and turning what Python callers hold into them.

A list stores its descriptors as a flat array of 64-bit words laid out
exactly as the C nixl_desc_t (addr, len, dev_id|meta_len, meta), so a call
hands the library a pointer to it with no per-descriptor work: an
array('Q'), or, for a list made from a numpy array, a 1-D uint64 numpy
array filled by libnixl's nixl_descs_from_rows in one pass (221,184 rows of
an SGLang request in about the time of arr.copy(); it becomes an array('Q')
the first time the list is appended to or shrunk).  A transfer list made
from an int64 / uint64 N x 3 array with 8-byte columns (SGLang's) is not
converted at all: it keeps the array (rows_view) and initialize_xfer hands
libnixl the rows where they lie (nixl_xfer_create_rows, which checks each);
whatever else needs its words converts it then, once.  Callers give any of:

  - a list of (addr, len, dev) or (addr, len, dev, meta) tuples, with mem_type;
  - an N x 3 integer numpy array of rows (addr, len, dev), with mem_type;
  - NIXL 1.5's strided rows, with mem_type: an N x 5 integer numpy array (or
    a list of 5-tuples) of (addr, len, dev, stride, count), each row `count`
    blocks of `len` bytes whose starts are `stride` bytes apart; the list
    holds the blocks one by one (flat index = NIXL's), expanded with numpy;
  - a tensor (duck-typed: data_ptr(), numel(), element_size(), device,
    is_cuda, get_device()), an object with __cuda_array_interface__ (VRAM),
    an object with __array_interface__ such as a numpy array (DRAM), or a
    ctypes object (DRAM): one descriptor covering its memory;
  - a list of such buffers: one descriptor each, all of one memory type;
  - a list already built (nixlRegDList / nixlXferDList).

An N x 3 integer numpy array is rows only when mem_type is given (NIXL's
meaning); without mem_type a numpy array is a buffer.  Wrap an array in a
list to register it as a buffer whatever its shape.  Neither numpy nor torch
is imported unless the caller passed one of their objects.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from array import array
from typing import Any, Iterable, Optional

from . import _lib
from ._errors import make_error, nixlInvalidKeyError, nixlInvalidParamError, nixlNotFoundError, nixlNotSupportedError

MEM_TYPES = {"DRAM": _lib.MEM_DRAM, "cpu": _lib.MEM_DRAM, "VRAM": _lib.MEM_VRAM, "cuda": _lib.MEM_VRAM,
             "BLOCK": _lib.MEM_BLOCK, "BLK": _lib.MEM_BLOCK, "OBJ": _lib.MEM_OBJ, "FILE": _lib.MEM_FILE}
_U32 = 1 << 32

if array("I").itemsize != 4 or array("Q").itemsize != 8:
    raise ImportError("nixl: unsupported platform (array 'I'/'Q' are not 32/64-bit)")


def _invalid(call: str, detail: str) -> nixlInvalidParamError:
    return make_error(nixlInvalidParamError, call, detail)


def mem_type_code(mem_type: Any, call: str) -> int:
    """'DRAM', 'VRAM', 'cpu', 'cuda', ... or one of the *_SEG integers.

    An unknown one is nixlInvalidKeyError: a KeyError, as NIXL's dict lookup
    of the name raises, and a nixlInvalidParamError.
    """
    if isinstance(mem_type, str):
        if mem_type in MEM_TYPES:
            return MEM_TYPES[mem_type]
    elif isinstance(mem_type, int) and not isinstance(mem_type, bool) and mem_type in _lib.MEM_NAMES:
        return int(mem_type)
    raise make_error(nixlInvalidKeyError, call,
                     f"unknown memory type {mem_type!r} (use one of {', '.join(MEM_TYPES)})")


def _dev_word(dev: int, meta_len: int) -> int:
    # Third word of nixl_desc_t: the uint32 dev_id then the uint32 meta_len.
    return dev | (meta_len << 32) if _lib.LITTLE_ENDIAN else (dev << 32) | meta_len


def _split_dev_word(w: int) -> tuple[int, int]:
    return (w & 0xFFFFFFFF, w >> 32) if _lib.LITTLE_ENDIAN else (w >> 32, w & 0xFFFFFFFF)


class _DList:
    """Descriptors of one memory type, stored as C nixl_desc_t words, or (a transfer list made
    from an N x 3 int64 / uint64 array) as that array's rows until something needs the words."""

    __slots__ = ("_mem", "_w", "_rows", "_keep", "__weakref__")
    _with_meta = False
    _rows_ok = False  # lists of this class may keep numpy rows as they are

    def __init__(self, type: Any = _lib.MEM_DRAM, descs: Any = None, init_size: int = 0):
        self._mem = mem_type_code(type, self.__class__.__name__)
        self._w: Any = array("Q")
        self._rows: Any = None  # an N x 3 int64 / uint64 array read in place (rows_view), or None
        self._keep: list[bytes] = []  # meta bytes the words point into
        if isinstance(descs, int) and not isinstance(descs, bool):  # NIXL's (type, init_size)
            descs, init_size = None, descs
        if init_size:
            if init_size < 0:
                raise _invalid(self.__class__.__name__, f"init_size must be >= 0, not {init_size}")
            self._words = array("Q", bytes(32 * init_size))  # that many (0, 0, 0) descriptors
        if descs is not None:
            if _is_ndarray(descs):
                rows = rows_view(descs) if self._rows_ok else None
                if rows is not None:
                    self._rows, self._w = rows, None
                else:
                    self._set_numpy_words(_rows_from_ndarray(descs, self.__class__.__name__))
            else:
                self._add_rows(descs)

    def _set_numpy_words(self, w: Any) -> None:
        self._w, self._rows = w, None
        if not isinstance(w, array) and w.nbytes >= _POOL_MIN:
            weakref.finalize(self, _pool_put, w)

    @property
    def _words(self) -> Any:
        """The nixl_desc_t words; a list of rows becomes words here (each row checked: a refused
        one raises nixlInvalidParamError naming it, and the list stays rows)."""
        if self._rows is not None:
            self._set_numpy_words(_rows_from_ndarray(self._rows, self.__class__.__name__))
        return self._w

    @_words.setter
    def _words(self, w: Any) -> None:
        self._w, self._rows = w, None

    def _rows_c(self) -> Optional[_lib.nixl_rows_t]:
        """The C view of a list of rows (nixl_xfer_create_rows), or None for a list of words."""
        r = self._rows
        if r is None:
            return None
        return _lib.nixl_rows_t(self._mem, r.shape[0], r.ctypes.data, r.strides[0] // 8, int(r.dtype.kind == "i"))

    def _mutable(self) -> array:
        """The words as an array('Q') (a numpy-backed list becomes one), to grow or shrink."""
        if not isinstance(self._words, array):
            self._words = words_array(self._words)
        return self._words

    def _add_rows(self, rows: Iterable[Any]) -> None:
        call = self.__class__.__name__
        words, keep = self._mutable(), self._keep
        try:
            for r in rows:
                if isinstance(r, (tuple, list)) and len(r) == 5:  # strided: (addr, len, dev, stride, count)
                    a0, ln, dev, stride, count = r
                    if min(a0, ln, dev, stride) < 0 or count < 1 or dev >= _U32:
                        raise _invalid(call, f"a strided row needs non-negative fields and count >= 1, not {r!r}")
                    dw = _dev_word(dev, 0)
                    for k in range(count):
                        words.extend((a0 + k * stride, ln, dw, 0))
                    continue
                if not isinstance(r, (tuple, list)) or len(r) not in (3, 4):
                    raise _invalid(call, f"a descriptor is (addr, len, dev) or (addr, len, dev, meta), not {r!r}")
                meta = r[3] if len(r) == 4 and self._with_meta else None
                mptr = mlen = 0
                if meta:
                    mb = meta.encode() if isinstance(meta, str) else bytes(meta)
                    keep.append(mb)
                    mptr = ctypes.cast(ctypes.c_char_p(mb), ctypes.c_void_p).value or 0
                    mlen = len(mb)
                dev = r[2]
                if not 0 <= dev < _U32:
                    raise _invalid(call, f"device id {dev} out of range in {r!r}")
                words.extend((r[0], r[1], _dev_word(dev, mlen), mptr))
        except (OverflowError, TypeError) as e:
            raise _invalid(call, f"descriptor fields must be non-negative integers ({e})") from None

    # ---- NIXL's list methods ----
    def getType(self) -> int:
        return self._mem

    @property
    def mem_type(self) -> str:
        return _lib.MEM_NAMES[self._mem]

    def descCount(self) -> int:
        return len(self)

    def isEmpty(self) -> bool:
        return len(self) == 0

    def __len__(self) -> int:
        r = self._rows
        return r.shape[0] if r is not None else len(self._w) // 4

    def _row(self, i: int) -> tuple:
        r = self._rows
        if r is not None:  # read in place, as it is (checked where the list is used)
            a, ln, dev = r[i].tolist()
            return (a, ln, dev)
        w = self._w[4 * i:4 * i + 4]
        dev, mlen = _split_dev_word(int(w[2]))
        if not self._with_meta:
            return (int(w[0]), int(w[1]), dev)
        return (int(w[0]), int(w[1]), dev, ctypes.string_at(int(w[3]), mlen) if mlen else b"")

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("descriptor index out of range")
        return self._row(i)

    def __iter__(self):
        return (self._row(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._mem == self._mem and list(other) == list(self)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def addDesc(self, desc: tuple) -> None:
        self._add_rows([desc])

    append = addDesc

    def __setitem__(self, i: int, desc: tuple) -> None:
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError("descriptor index out of range")
        one = self.__class__(self._mem, [desc])
        self._words[4 * j:4 * j + 4] = one._words
        self._keep += one._keep

    def remDesc(self, index: int) -> None:
        """Remove descriptor index (NIXL's remDesc); the later ones move down."""
        n = len(self)
        j = index + n if index < 0 else index
        if not 0 <= j < n:
            raise IndexError("descriptor index out of range")
        del self._mutable()[4 * j:4 * j + 4]

    def clear(self) -> None:
        self._words = array("Q")
        self._keep = []

    def index(self, desc: tuple) -> int:
        """The index of the first descriptor equal to desc; nixlNotFoundError if none (as NIXL)."""
        want = tuple(desc)
        if self._with_meta and len(want) == 4 and isinstance(want[3], str):
            want = want[:3] + (want[3].encode(),)
        for i in range(len(self)):
            if self._row(i) == want:
                return i
        raise make_error(nixlNotFoundError, "index", f"no descriptor {desc!r} in this list")

    getIndex = index  # the C++ name

    def print(self) -> None:
        """Print the list, one descriptor a line (NIXL's print, to stdout)."""
        lines = [f"{self.__class__.__name__} of mem type {self.mem_type}, {len(self)} descriptors"]
        lines += [f"    {r!r}" for r in self]
        print("\n".join(lines))

    def __reduce__(self):
        return (self.__class__, (self._mem, list(self)))

    def __repr__(self) -> str:
        head = ", ".join(repr(r) for r in self[:3])
        more = ", ..." if len(self) > 3 else ""
        return f"{self.__class__.__name__}({self.mem_type}, {len(self)} descs: [{head}{more}])"

    def _c(self) -> _lib.nixl_dlist_t:
        """The C view; valid while this list is alive and not appended to."""
        n = len(self)
        return _lib.nixl_dlist_t(self._mem, n, words_addr(self._words) if n else None)

    def _total_len(self) -> int:
        """The bytes the list covers."""
        return int(sum(int(x) for x in self._words[1::4]))


class nixlXferDList(_DList):
    """Descriptors of a transfer: (addr, len, dev) rows."""

    __slots__ = ()
    _rows_ok = True


class nixlRegDList(_DList):
    """Descriptors of a registration: (addr, len, dev, meta) rows."""

    __slots__ = ()
    _with_meta = True

    def trim(self) -> nixlXferDList:
        """The same ranges as a transfer list (meta dropped)."""
        out = nixlXferDList(self._mem)
        out._words = words_array(self._words)
        for i in range(len(out)):
            dev, _ = _split_dev_word(out._words[4 * i + 2])
            out._words[4 * i + 2] = _dev_word(dev, 0)
            out._words[4 * i + 3] = 0
        return out


class nixlRemoteDList:
    """NIXL's list of remote descriptors: (addr, len, dev, agent_name) rows.

    It exists so code that builds one (get_remote_descs) runs; the only NIXL
    call that takes one, prep_mem_view, needs UCX's GPU device API, which
    libnixl has not (nixl._bindings.HAVE_UCX_GPU_DEVICE_API is False).
    """

    __slots__ = ("_mem", "_rows")

    def __init__(self, type: Any = _lib.MEM_DRAM, descs: Any = None, init_size: int = 0):
        self._mem = mem_type_code(type, "nixlRemoteDList")
        if isinstance(descs, int) and not isinstance(descs, bool):
            descs, init_size = None, descs
        self._rows: list[tuple] = [(0, 0, 0, "")] * init_size
        for d in descs or ():
            self.addDesc(d)

    @staticmethod
    def _check(desc: Any) -> tuple:
        if not isinstance(desc, tuple) or len(desc) != 4:
            raise _invalid("nixlRemoteDList", f"a remote descriptor is (addr, len, dev, agent_name), not {desc!r}")
        a, n, d, name = desc
        if isinstance(name, (bytes, bytearray)):  # the name add_remote_agent returned
            name = bytes(name).decode()
        if not all(isinstance(v, int) and v >= 0 for v in (a, n, d)) or not isinstance(name, str):
            raise _invalid("nixlRemoteDList", f"bad remote descriptor {desc!r}")
        return (a, n, d, name)

    def getType(self) -> int:
        return self._mem

    def descCount(self) -> int:
        return len(self._rows)

    def isEmpty(self) -> bool:
        return not self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: Any) -> Any:
        return self._rows[i]

    def __setitem__(self, i: int, desc: tuple) -> None:
        self._rows[i] = self._check(desc)

    def __iter__(self):
        return iter(list(self._rows))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, nixlRemoteDList) and other._mem == self._mem and other._rows == self._rows

    __hash__ = None  # type: ignore[assignment]

    def addDesc(self, desc: tuple) -> None:
        self._rows.append(self._check(desc))

    append = addDesc

    def remDesc(self, index: int) -> None:
        del self._rows[index]

    def clear(self) -> None:
        self._rows = []

    def print(self) -> None:
        print("\n".join([f"nixlRemoteDList of mem type {_lib.MEM_NAMES[self._mem]}, {len(self)} descriptors"] +
                        [f"    {r!r}" for r in self._rows]))

    def __reduce__(self):
        return (self.__class__, (self._mem, list(self._rows)))

    def __repr__(self) -> str:
        return f"nixlRemoteDList({_lib.MEM_NAMES[self._mem]}, {len(self)} descs)"


# ---- recognizing buffers ----

def _is_ndarray(o: Any) -> bool:
    return type(o).__module__ == "numpy" and type(o).__name__ == "ndarray"


def _is_desc_array(o: Any) -> bool:
    """A 2-D N x 3 (or strided N x 5) integer array: rows of descriptors (NIXL's meaning, with a mem_type)."""
    if not _is_ndarray(o):
        return False
    return o.ndim == 2 and o.shape[1] in (3, 5) and o.dtype.kind in "iu"


def is_strided(o: Any) -> bool:
    """NIXL 1.5's strided rows: an N x 5 integer array, or a non-empty list of 5-tuples."""
    if _is_ndarray(o):
        return o.ndim == 2 and o.shape[1] == 5 and o.dtype.kind in "iu"
    return isinstance(o, (list, tuple)) and bool(o) and isinstance(o[0], (tuple, list)) and len(o[0]) == 5


def strided_rows(o: Any, call: str) -> Any:
    """Strided rows as a checked N x 5 uint64 numpy array; without numpy, a list of 5-tuples as
    given (checked when the list is made)."""
    try:
        import numpy as np
    except ImportError:
        return [tuple(r) for r in o]
    try:
        a = np.asarray(o)
    except (TypeError, ValueError) as e:
        raise _invalid(call, f"strided rows are (addr, len, dev, stride, count) integers ({e})") from None
    if a.ndim != 2 or a.shape[1] != 5 or (a.size and a.dtype.kind not in "iu"):
        raise _invalid(call, f"strided rows are N x 5 integers, not {a.shape} {a.dtype}")
    if a.shape[0]:
        if a.dtype.kind == "i" and int(a.min()) < 0:
            raise _invalid(call, "strided fields must be non-negative")
        if int(a[:, 4].min()) < 1:
            raise _invalid(call, "a strided row's count must be at least 1")
        if int(a[:, 2].max()) >= _U32:
            raise _invalid(call, "device id out of range")
    return a.astype(np.uint64, copy=False)


def expand_strided(a: Any) -> Any:
    """N x 5 strided rows -> the (sum of counts) x 3 blocks they stand for, in order, with numpy."""
    import numpy as np
    counts = a[:, 4].astype(np.int64)
    row = np.repeat(np.arange(a.shape[0]), counts)
    first = np.cumsum(counts) - counts
    k = (np.arange(int(counts.sum()), dtype=np.int64) - first[row]).astype(np.uint64)
    out = np.empty((row.size, 3), dtype=np.uint64)
    out[:, 0] = a[row, 0] + k * a[row, 3]
    out[:, 1] = a[row, 1]
    out[:, 2] = a[row, 2]
    return out


# Words arrays of lists made from numpy rows are kept when their list dies and handed to the
# next list of a size they fit: an SGLang request's two 7 MB lists would otherwise fault in
# fresh pages every time.  The words never leave the list (the library copies what it reads).
_POOL_MIN = 1 << 20
_POOL_BYTES = 64 << 20
_pool: list[Any] = []
_pool_lock = threading.Lock()


def _pool_get(words: int) -> Any:
    """A uint64 array of `words` words, from the pool when one fits (not zeroed)."""
    import numpy as np
    if words * 8 >= _POOL_MIN:
        with _pool_lock:
            best = None
            for i, a in enumerate(_pool):
                if a.size >= words and a.size <= 2 * words and (best is None or a.size < _pool[best].size):
                    best = i
            if best is not None:
                return _pool.pop(best)[:words]
    return np.empty(words, dtype=np.uint64)


def _pool_put(w: Any) -> None:
    base = w.base if w.base is not None else w
    with _pool_lock:
        if sum(a.nbytes for a in _pool) + base.nbytes <= _POOL_BYTES and len(_pool) < 8:
            _pool.append(base)


def words_array(w: Any) -> array:
    """A copy of descriptor words as an array('Q') (from an array('Q') or a numpy array)."""
    if isinstance(w, array):
        return array("Q", w)
    out = array("Q")
    out.frombytes(w.tobytes())
    return out


def words_addr(w: Any) -> int:
    """The address of descriptor words (an array('Q') or a numpy array)."""
    return w.buffer_info()[0] if isinstance(w, array) else w.ctypes.data


def rows_view(a: Any) -> Any:
    """a itself when libnixl reads its rows in place (nixl_xfer_create_rows): a non-empty N x 3
    int64 / uint64 array of aligned 8-byte columns, rows a multiple of 8 bytes apart (C order,
    or a column slice of a wider array); else None.  Nothing is read or copied here."""
    import numpy as np
    if a.ndim != 2 or a.shape[1] != 3 or a.shape[0] == 0 or a.dtype not in (np.int64, np.uint64):
        return None
    s0, s1 = a.strides
    if s1 != 8 or s0 < 24 or s0 % 8 or not a.flags.aligned:
        return None
    return a


def _rows_from_ndarray(a: Any, call: str) -> Any:
    """nixl_desc_t words of an N x 3 (or N x 5) integer array: one pass in libnixl for C-ordered
    int64 / uint64 rows (the engines' arrays), numpy for anything else."""
    import numpy as np
    if not _is_desc_array(a):
        raise _invalid(call, f"a descriptor array is N x 3 (or strided N x 5) integers, not {a.shape} {a.dtype}")
    if a.shape[1] == 5:
        a = expand_strided(strided_rows(a, call))
    n = a.shape[0]
    if a.dtype not in (np.int64, np.uint64) or a.strides[1] != 8 or a.strides[0] % 8 or a.strides[0] < 24:
        if a.dtype.kind == "i" and n and int(a.min()) < 0:
            raise _invalid(call, "descriptor fields must be non-negative")
        a = np.ascontiguousarray(a, dtype=np.uint64)
    w = _pool_get(4 * n)
    if n:
        bad = ctypes.c_size_t(0)
        st = _lib.lib.nixl_descs_from_rows(w.ctypes.data, a.ctypes.data, n, a.strides[0] // 8,
                                            int(a.dtype.kind == "i"), ctypes.byref(bad))
        if st != 0:
            r = [int(x) for x in a[bad.value]]
            if min(r) < 0:
                raise _invalid(call, f"descriptor fields must be non-negative (row {bad.value}: {r})")
            raise _invalid(call, f"device id out of range (row {bad.value}: {r})")
    return w


def create_xfer(agent: Any, op: int, ld: _DList, rd: _DList, peer: bytes, opt: Any, out: Any) -> int:
    """libnixl's one-shot create of two transfer lists (the status): lists of rows go as rows
    (nixl_xfer_create_rows reads them where they lie, checking each), others as their words.  A
    refused row raises nixlInvalidParamError naming it, as the list's words would."""
    lr, rr = ld._rows_c(), rd._rows_c()
    if lr is not None and rr is not None:
        st = _lib.lib.nixl_xfer_create_rows(agent, op, ctypes.byref(lr), ctypes.byref(rr), peer, opt, out)
        if st == _lib.ERR_INVALID_PARAM:
            ld._words, rd._words  # noqa: B018  (a refused row raises, naming it)
        return st
    lc, rc = ld._c(), rd._c()
    return _lib.lib.nixl_xfer_create(agent, op, ctypes.byref(lc), ctypes.byref(rc), peer, opt, out)


def _is_tensor(o: Any) -> bool:
    return all(callable(getattr(o, m, None)) for m in ("data_ptr", "numel", "element_size"))


def _tensor_desc(t: Any, call: str) -> tuple[int, int, int, int]:
    if callable(getattr(t, "is_contiguous", None)) and not t.is_contiguous():
        raise _invalid(call, "tensor is not contiguous (register its storage, or .contiguous() a copy)")
    dev = getattr(t, "device", None)
    kind = getattr(dev, "type", None) or (str(dev).split(":")[0] if dev is not None else "cpu")
    is_cuda = getattr(t, "is_cuda", None)
    if is_cuda is None:
        is_cuda = kind == "cuda"
    if is_cuda:
        ordinal = t.get_device() if callable(getattr(t, "get_device", None)) else getattr(dev, "index", 0)
        mem, devid = _lib.MEM_VRAM, max(int(ordinal or 0), 0)
    elif kind == "cpu":
        mem, devid = _lib.MEM_DRAM, 0
    else:
        raise make_error(nixlNotSupportedError, call, f"tensors on '{kind}' devices are not supported")
    return mem, int(t.data_ptr()), int(t.numel()) * int(t.element_size()), devid


def _interface_desc(iface: dict, call: str) -> tuple[int, int]:
    """(addr, nbytes) of an __array_interface__ / __cuda_array_interface__, checked contiguous."""
    shape = tuple(int(s) for s in iface["shape"])
    typestr = iface["typestr"]
    itemsize = int(typestr[2:])
    n = 1
    for s in shape:
        n *= s
    strides = iface.get("strides")
    if strides is not None and n > 1:
        c_order, f_order, acc = [], [], itemsize
        for s in reversed(shape):
            c_order.insert(0, acc)
            acc *= s
        acc = itemsize
        for s in shape:
            f_order.append(acc)
            acc *= s
        live = [i for i, s in enumerate(shape) if s > 1]  # strides of size-1 axes do not matter
        if not (all(strides[i] == c_order[i] for i in live) or all(strides[i] == f_order[i] for i in live)):
            raise _invalid(call, "array is not contiguous (register its base, or a contiguous copy)")
    if iface.get("offset"):
        raise _invalid(call, "array interfaces with an offset are not supported")
    return int(iface["data"][0] or 0), n * itemsize


def _cai_device(o: Any) -> int:
    dev = getattr(o, "device", None)
    for attr in ("id", "index"):
        v = getattr(dev, attr, None)
        if isinstance(v, int):
            return v
    if callable(getattr(o, "get_device", None)):
        return max(int(o.get_device()), 0)
    return 0


def buffer_desc(o: Any, call: str) -> Optional[tuple[int, int, int, int]]:
    """(mem, addr, nbytes, dev) of one buffer object, or None when o is not one."""
    if _is_tensor(o):
        return _tensor_desc(o, call)
    iface = getattr(o, "__cuda_array_interface__", None)
    if isinstance(iface, dict):
        addr, n = _interface_desc(iface, call)
        return _lib.MEM_VRAM, addr, n, _cai_device(o)
    iface = getattr(o, "__array_interface__", None)
    if isinstance(iface, dict):
        addr, n = _interface_desc(iface, call)
        return _lib.MEM_DRAM, addr, n, 0
    if isinstance(o, (ctypes.Array, ctypes.Structure, ctypes.Union)):
        return _lib.MEM_DRAM, ctypes.addressof(o), ctypes.sizeof(o), 0
    return None


def to_dlist(obj: Any, mem_type: Any, reg: bool, call: str) -> _DList:
    """What get_reg_descs (reg=True) and get_xfer_descs (reg=False) return."""
    cls = nixlRegDList if reg else nixlXferDList
    if isinstance(obj, _DList):
        if isinstance(obj, cls):
            return obj
        if reg:
            return nixlRegDList(obj._mem, list(obj))
        return obj.trim()
    if _is_ndarray(obj) and mem_type is not None:
        if _is_desc_array(obj):
            return cls(mem_type_code(mem_type, call), obj)
        # Rows gone wrong, not a buffer: 64-bit integers of another shape, or N x 3 non-integers.
        if obj.dtype.kind in "iu" and obj.dtype.itemsize == 8:
            raise _invalid(call, f"descriptor rows are an N x 3 (addr, len, dev) or strided N x 5 integer array, "
                                 f"not {obj.shape} {obj.dtype} (for the array's own memory, pass [arr])")
        if obj.ndim == 2 and obj.shape[1] == 3:
            raise _invalid(call, f"descriptor rows are integers, not {obj.dtype} (for the array's own memory, "
                                 "pass [arr])")
    one = buffer_desc(obj, call)
    if one is not None:
        return cls(one[0], [one[1:]])
    if isinstance(obj, (list, tuple)):
        if not obj:
            return cls(mem_type_code(mem_type, call) if mem_type is not None else _lib.MEM_DRAM)
        if isinstance(obj[0], (tuple, list)):
            if mem_type is None:
                raise _invalid(call, "mem_type ('DRAM', 'VRAM', ...) is required with descriptor tuples")
            if is_strided(obj) and all(isinstance(r, (tuple, list)) and len(r) == 5 for r in obj):
                try:
                    import numpy  # noqa: F401  (expands in one pass when present)
                except ImportError:
                    return cls(mem_type_code(mem_type, call), obj)
                return cls(mem_type_code(mem_type, call), strided_rows(obj, call))
            return cls(mem_type_code(mem_type, call), obj)
        rows, mem = [], None
        for o in obj:
            d = buffer_desc(o, call)
            if d is None:
                raise _invalid(call, f"cannot make a descriptor from {type(o).__name__}")
            if mem is not None and d[0] != mem:
                raise _invalid(call, "all buffers of one list must be of one memory type (all DRAM or all VRAM)")
            mem = d[0]
            rows.append(d[1:])
        return cls(mem, rows)
    raise _invalid(call, f"cannot make descriptors from {type(obj).__name__}")


def _int_vector(o: Any, code: str, what: str, call: str) -> tuple[Any, Any]:
    """(numpy array, None) for a numpy argument after checking it is 1-D integers, else
    (None, array(code) of the values), the kind of C array base_array and index_array hand over."""
    if _is_ndarray(o):
        if o.ndim != 1 or (o.size and o.dtype.kind not in "iu"):
            raise _invalid(call, f"{what} must be a 1-D integer array, not {o.shape} {o.dtype}")
        return o, None
    try:
        return None, array(code, o)
    except (OverflowError, TypeError) as e:
        raise _invalid(call, f"{what} must be non-negative integers ({e})") from None


def base_array(bases: Any, call: str) -> tuple[Any, int, int]:
    """(keep-alive object, address, count) of a uint64 C array of addresses (a list or an integer numpy array)."""
    nd, a = _int_vector(bases, "Q", "bases", call)
    if nd is not None:
        import numpy as np
        if nd.size and nd.dtype.kind == "i" and int(nd.min()) < 0:
            raise _invalid(call, "bases must be non-negative")
        a = np.ascontiguousarray(nd, dtype=np.uint64)
        return a, a.ctypes.data, int(a.size)
    return a, a.buffer_info()[0], len(a)


def index_array(idx: Any, call: str) -> tuple[Any, int, int]:
    """(keep-alive object, address, count) of a uint32 C array holding idx."""
    nd, a = _int_vector(idx, "I", "indices", call)
    if nd is not None:
        import numpy as np
        # One reduction, no temporary: a negative index or one of 2**32 or more sets a high bit.
        if nd.size and nd.dtype.itemsize > 4 and int(np.bitwise_or.reduce(nd, axis=None)) >> 32:
            raise _invalid(call, "indices must be in [0, 2**32)")
        if nd.size and nd.dtype.kind == "i" and nd.dtype.itemsize <= 4 and int(nd.min()) < 0:
            raise _invalid(call, "indices must be in [0, 2**32)")
        if nd.dtype.itemsize == 4 and nd.flags.c_contiguous:
            a = nd.view(np.uint32)  # int32 / uint32: checked above, read as they are
        else:
            a = np.ascontiguousarray(nd, dtype=np.uint32)
        return a, a.ctypes.data, int(a.size)
    return a, a.buffer_info()[0], len(a)
