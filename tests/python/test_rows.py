"""SGLang's request from Python: N x 3 rows handed to libnixl where they lie.

get_xfer_descs keeps an int64 / uint64 N x 3 array (8-byte columns) as it is;
initialize_xfer hands both arrays to nixl_xfer_create_rows, which reads and
checks every row in its one pass.  Bytes are compared after every transfer:
indexed rows (every layer, the same slots) and rows that are not, every layout,
refused rows (nothing moves), wrong shapes and dtypes (clear errors), and, in a
child process with the unit tests' fake_indexed backend, the indexed request
libnixl recognises in such rows."""

import os
import subprocess
import sys

import numpy as np
import pytest

import nixl

from conftest import HERE, introduce, wait_state

LAYERS, SLOTS, ITEM = 4, 512, 48


def pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 13 + seed) % 251).astype(np.uint8)


@pytest.fixture
def kv(pair):
    """Prefill and decode with LAYERS registered buffers of SLOTS x ITEM bytes each (numpy)."""
    a, b = pair
    src = [pattern(SLOTS * ITEM, 3 * l + 1) for l in range(LAYERS)]
    dst = [np.zeros(SLOTS * ITEM, np.uint8) for _ in range(LAYERS)]
    a.register_memory([(s.ctypes.data, s.nbytes, 0, "") for s in src], "DRAM")
    b.register_memory([(d.ctypes.data, d.nbytes, 0, "") for d in dst], "DRAM")
    introduce(a, b)
    return a, b, src, dst


def sglang_rows(bufs, slots, dtype=np.int64):
    """One (addr, len, dev) row per layer and slot, layer-major (SGLang's arrays)."""
    n = len(slots)
    r = np.empty((len(bufs) * n, 3), dtype)
    for l, buf in enumerate(bufs):
        r[l * n:(l + 1) * n, 0] = buf.ctypes.data + np.asarray(slots, dtype) * ITEM
    r[:, 1] = ITEM
    r[:, 2] = 0
    return r


def landed(src, dst, pairs):
    """Every (layer, src slot, dst slot) of pairs holds the source's bytes; every other dst byte is 0."""
    for l in range(LAYERS):
        want = np.zeros(SLOTS * ITEM, np.uint8)
        for (ll, s, d) in pairs:
            if ll == l:
                want[d * ITEM:(d + 1) * ITEM] = src[l][s * ITEM:(s + 1) * ITEM]
        if not np.array_equal(dst[l], want):
            return False
    return True


def move(a, b, ld, rd, notif=b""):
    h = a.initialize_xfer("WRITE", ld, rd, b.name, notif)
    a.transfer(h)
    assert wait_state(a, h) == "DONE"
    info = a.get_xfer_info(h)
    a.release_xfer_handle(h)
    return info


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_rows_are_read_in_place_and_land(kv, dtype):
    a, b, src, dst = kv
    rng = np.random.default_rng(7)
    ls, rs = rng.permutation(SLOTS)[:300], rng.permutation(SLOTS)[:300]
    lrows, rrows = sglang_rows(src, ls, dtype), sglang_rows(dst, rs, dtype)
    ld, rd = a.get_xfer_descs(lrows, "DRAM"), a.get_xfer_descs(rrows, "DRAM")
    # The lists are the arrays themselves: nothing was copied or converted.
    assert ld._rows is lrows and rd._rows is rrows and len(ld) == LAYERS * 300
    assert ld[301] == (src[1].ctypes.data + int(ls[1]) * ITEM, ITEM, 0)
    info = move(a, b, ld, rd)
    assert ld._rows is lrows and rd._rows is rrows  # initialize_xfer read them where they lie
    assert info.bytes == LAYERS * 300 * ITEM and info.descs_in == LAYERS * 300
    assert landed(src, dst, [(l, int(s), int(d)) for l in range(LAYERS) for s, d in zip(ls, rs)])


def test_every_layout_lands_the_same(kv):
    """Column slices and strided rows are read in place; reversed or Fortran-ordered rows and
    big-endian words are converted first; the bytes that land are the same."""
    a, b, src, dst = kv
    rng = np.random.default_rng(11)
    ls, rs = rng.permutation(SLOTS)[:64], rng.permutation(SLOTS)[:64]
    lrows, rrows = sglang_rows(src, ls), sglang_rows(dst, rs)
    pairs = [(l, int(s), int(d)) for l in range(LAYERS) for s, d in zip(ls, rs)]

    def wide(r):  # a column slice of an N x 4 array: rows 32 bytes apart
        w = np.full((r.shape[0], 4), -1, np.int64)
        w[:, :3] = r
        return w[:, :3]

    def every_other(r):  # rows 48 bytes apart, the other rows garbage
        w = np.full((2 * r.shape[0], 3), -1, np.int64)
        w[::2] = r
        return w[::2]

    layouts = [(wide, True), (every_other, True), (lambda r: r[::-1].copy()[::-1], False),
               (np.asfortranarray, False), (lambda r: r.astype(">i8"), False), (lambda r: r.astype(">u8"), False)]
    for make, in_place in layouts:
        for d in dst:
            d[:] = 0
        L, R = make(lrows), make(rrows)
        ld, rd = a.get_xfer_descs(L, "DRAM"), a.get_xfer_descs(R, "DRAM")
        assert (ld._rows is not None) == in_place, (L.dtype, L.strides)
        move(a, b, ld, rd)
        assert landed(src, dst, pairs), (L.dtype, L.strides)


def test_rows_that_are_no_indexed_request_land(kv):
    """Rows of mixed lengths, layers in any order, slots differing per layer, and lists whose
    layers are not one registration each: the general path, same bytes."""
    a, b, src, dst = kv
    rng = np.random.default_rng(5)
    pairs = [(int(rng.integers(LAYERS)), int(s), int(d)) for s, d in
             zip(rng.permutation(SLOTS)[:200], rng.permutation(SLOTS)[:200])]
    lr = np.array([(src[l].ctypes.data + s * ITEM, ITEM, 0) for l, s, _ in pairs], np.int64)
    rr = np.array([(dst[l].ctypes.data + d * ITEM, ITEM, 0) for l, _, d in pairs], np.uint64)
    move(a, b, a.get_xfer_descs(lr, "DRAM"), a.get_xfer_descs(rr, "DRAM"))
    assert landed(src, dst, pairs)
    # Two slots in a row of one layer, as one row of twice the length, next to single slots.
    for d in dst:
        d[:] = 0
    lr = np.array([(src[0].ctypes.data, 2 * ITEM, 0), (src[1].ctypes.data + 5 * ITEM, ITEM, 0)], np.int64)
    rr = np.array([(dst[0].ctypes.data + 10 * ITEM, 2 * ITEM, 0), (dst[1].ctypes.data, ITEM, 0)], np.int64)
    info = move(a, b, a.get_xfer_descs(lr, "DRAM"), a.get_xfer_descs(rr, "DRAM"))
    assert info.bytes == 3 * ITEM
    assert landed(src, dst, [(0, 0, 10), (0, 1, 11), (1, 5, 0)])
    # One side rows, the other tuples: the rows become words, the request is the same.
    for d in dst:
        d[:] = 0
    rt = [(dst[0].ctypes.data + 10 * ITEM, 2 * ITEM, 0), (dst[1].ctypes.data, ITEM, 0)]
    move(a, b, a.get_xfer_descs(lr, "DRAM"), a.get_xfer_descs(rt, "DRAM"))
    assert landed(src, dst, [(0, 0, 10), (0, 1, 11), (1, 5, 0)])


def test_refused_rows_move_nothing(kv):
    """A negative field (int64) or a device id of 2^32 or more, in any layer, on either side:
    initialize_xfer raises nixlInvalidParamError naming the row, and no request is made."""
    a, b, src, dst = kv
    ls = np.arange(100)
    for side in (0, 1):
        for row, col, value in ((3, 0, -ITEM), (250, 1, -1), (399, 2, 1 << 32), (0, 2, -1)):
            lrows, rrows = sglang_rows(src, ls), sglang_rows(dst, ls[::-1])
            (rrows if side else lrows)[row, col] = value
            ld, rd = a.get_xfer_descs(lrows, "DRAM"), a.get_xfer_descs(rrows, "DRAM")
            assert ld is not None and rd is not None  # rows are checked where they are used
            with pytest.raises(nixl.nixlInvalidParamError, match=f"row {row}"):
                a.initialize_xfer("WRITE", ld, rd, b.name)
    assert all(not d.any() for d in dst)
    big = sglang_rows(src, ls, np.uint64)
    big[7, 2] = 1 << 32
    with pytest.raises(nixl.nixlInvalidParamError, match="row 7"):
        a.initialize_xfer("WRITE", a.get_xfer_descs(big, "DRAM"), a.get_xfer_descs(sglang_rows(dst, ls), "DRAM"),
                          b.name)
    with pytest.raises(nixl.nixlMismatchError):  # lengths differ: counted, not read
        a.initialize_xfer("WRITE", a.get_xfer_descs(sglang_rows(src, ls), "DRAM"),
                          a.get_xfer_descs(sglang_rows(dst, ls[:50]), "DRAM"), b.name)
    assert all(not d.any() for d in dst)


def test_wrong_shapes_and_dtypes_are_clear_errors(kv, caplog):
    a, b, src, dst = kv
    r = sglang_rows(src, np.arange(8))
    bad = [(np.zeros((8, 4), np.int64), "N x 3"), (np.zeros((8, 2), np.uint64), "N x 3"),
           (np.zeros((2, 8, 3), np.int64), "N x 3"), (np.zeros(3, np.int64), "N x 3"),
           (r.astype(np.float64), "integers")]
    for arr, why in bad:
        caplog.clear()
        with caplog.at_level("ERROR", logger="nixl"):
            assert a.get_xfer_descs(arr, "DRAM") is None  # NIXL's get_xfer_descs: None, logged
        assert any(why in m.getMessage() for m in caplog.records), [m.getMessage() for m in caplog.records]
        with pytest.raises(nixl.nixlInvalidParamError, match=why):
            a.prep_xfer_dlist("", arr, "DRAM")
    # Without mem_type a numpy array is a buffer (ours); in a list, whatever its shape, with or without.
    arr = np.zeros((8, 4), np.int64)
    assert list(a.get_xfer_descs(arr)) == list(a.get_xfer_descs([arr], "DRAM")) == [(arr.ctypes.data, 256, 0)]


CHILD = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from nixl._api import nixl_agent, nixl_agent_config

L, T, ITEM = 6, 700, 40
def agent(name):
    a = nixl_agent(name, nixl_agent_config(backends=[]))
    a.create_backend("fake_indexed", {"indexed": "1"})
    return a
a, b = agent("ix-pre"), agent("ix-dec")
src = [((np.arange(T * ITEM) * 7 + l) % 251).astype(np.uint8) for l in range(L)]
dst = [np.zeros(T * ITEM, np.uint8) for _ in range(L)]
a.register_memory([(s.ctypes.data, s.nbytes, 0, "") for s in src], "DRAM")
b.register_memory([(d.ctypes.data, d.nbytes, 0, "") for d in dst], "DRAM")
peer = a.add_remote_agent(b.get_agent_metadata())
rng = np.random.default_rng(3)
for dtype, shape in ((np.int64, "indexed"), (np.uint64, "indexed"), (np.int64, "swapped")):
    ls, rs = rng.permutation(T)[:500], rng.permutation(T)[:500]
    def rows(bufs, slots):
        r = np.empty((L * len(slots), 3), dtype)
        for l, buf in enumerate(bufs):
            r[l * len(slots):(l + 1) * len(slots), 0] = buf.ctypes.data + slots.astype(dtype) * ITEM
        r[:, 1] = ITEM
        r[:, 2] = 0
        return r
    lr, rr = rows(src, ls), rows(dst, rs)
    if shape == "swapped":  # two rows of layer 2 swapped on both sides: no longer that shape
        for r in (lr, rr):
            r[[1003, 1007]] = r[[1007, 1003]]
    for d in dst:
        d[:] = 0
    ld, rd = a.get_xfer_descs(lr, "DRAM"), a.get_xfer_descs(rr, "DRAM")
    h = a.initialize_xfer("WRITE", ld, rd, peer)
    assert ld._rows is lr and rd._rows is rr
    a.transfer(h)
    while a.check_xfer_state(h) == "PROC":
        pass
    info = a.get_xfer_info(h)
    a.release_xfer_handle(h)
    for l in range(L):
        got = dst[l].reshape(T, ITEM)[rs]
        want = src[l].reshape(T, ITEM)[ls]
        assert np.array_equal(got, want), (dtype, shape, l)
    print(shape, np.dtype(dtype).name, info.path, info.descs_in)
"""


def test_indexed_rows_reach_the_indexed_form(build_root):
    """In a child process with the unit tests' fake_indexed backend (which takes indexed requests
    in their form): SGLang's int64 and uint64 rows are made as one indexed request
    ("fake.indexed"), rows that are almost that shape in pieces ("fake.copy"); bytes compared."""
    plugins = os.path.join(build_root, "tests", "unit", "core")
    if not os.path.exists(os.path.join(plugins, "libnixl_backend_fake_indexed.so")):
        pytest.skip("no fake_indexed backend in this build")
    env = dict(os.environ, NIXL_PLUGIN_DIR=plugins + os.pathsep + os.environ.get("NIXL_PLUGIN_DIR", ""))
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                                    "bindings", "python")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["indexed int64 fake.indexed 3000", "indexed uint64 fake.indexed 3000",
                                          "swapped int64 fake.copy 3000"], out.stdout
