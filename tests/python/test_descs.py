"""Descriptor lists from every kind of input the NIXL API accepts."""

import ctypes
import pickle
import time

import numpy as np
import pytest

import nixl
from nixl._bindings import DRAM_SEG, VRAM_SEG, nixlXferDList

from conftest import make_agent


class FakeDevice:
    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class FakeTensor:
    """Has exactly the torch.Tensor members the package reads (torch is not needed)."""

    def __init__(self, array=None, addr=0, nbytes=0, device="cpu", index=None, contiguous=True):
        self.array = array  # keeps the memory alive
        self.addr = array.ctypes.data if array is not None else addr
        self.nbytes = array.nbytes if array is not None else nbytes
        self.device = FakeDevice(device, index)
        self.is_cuda = device == "cuda"
        self.contiguous = contiguous

    def data_ptr(self):
        return self.addr

    def numel(self):
        return self.nbytes // 2

    def element_size(self):
        return 2

    def get_device(self):
        return self.device.index if self.is_cuda else -1

    def is_contiguous(self):
        return self.contiguous


class FakeCudaArray:
    """An object with __cuda_array_interface__ (CuPy, Numba) on device 3."""

    class _Dev:
        id = 3

    device = _Dev()

    def __init__(self, ptr, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


@pytest.fixture
def agent():
    a = make_agent("descs", backends=[])
    yield a
    a.close()


@pytest.fixture
def refused(caplog):
    """refused(fn, *args, why=...): NIXL's rule for get_*_descs and register_memory: input that
    makes no list gives None, and the error log says why."""
    def check(fn, *args, why):
        caplog.clear()
        with caplog.at_level("ERROR", logger="nixl"):
            assert fn(*args) is None
        assert any(why in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    return check


def test_tuples_need_a_mem_type(agent, refused):
    d = agent.get_xfer_descs([(0x1000, 64, 0), (0x2000, 128, 1)], "DRAM")
    assert isinstance(d, nixlXferDList) and d.getType() == DRAM_SEG and d.mem_type == "DRAM"
    assert list(d) == [(0x1000, 64, 0), (0x2000, 128, 1)] and d.descCount() == 2 and not d.isEmpty()
    refused(agent.get_xfer_descs, [(0x1000, 64, 0)], why="mem_type")
    refused(agent.get_reg_descs, [(0x1000, 64, 0, "m")], why="mem_type")
    refused(agent.register_memory, [(0x1000, 64, 0, "m")], why="mem_type")
    refused(agent.get_xfer_descs, [(-1, 64, 0)], "DRAM", why="non-negative")
    refused(agent.get_xfer_descs, [(1, 2)], "DRAM", why="descriptor is")
    # An unknown memory type is a KeyError (NIXL looks the name up in a dict), and ours.
    for call in (agent.get_xfer_descs, agent.get_reg_descs, agent.register_memory, agent.prep_xfer_dlist):
        args = ("", [(0x1000, 64, 0)], "HBM") if call == agent.prep_xfer_dlist else ([(0x1000, 64, 0)], "HBM")
        with pytest.raises(KeyError, match="unknown memory type") as e:
            call(*args)
        assert isinstance(e.value, nixl.nixlInvalidParamError) and isinstance(e.value, nixl.nixlInvalidKeyError)
    # The calls that use descriptors (not make them) still raise, with the reason.
    with pytest.raises(nixl.nixlInvalidParamError, match="mem_type"):
        agent.prep_xfer_dlist("", [(0x1000, 64, 0)])
    with pytest.raises(nixl.nixlInvalidParamError, match="descriptor is"):
        nixlXferDList(DRAM_SEG, [(1, 2)])


def test_a_list_of_the_other_kind_is_refused(agent, refused):
    reg = agent.get_reg_descs([(0x1000, 64, 0, "m")], "DRAM")
    xfer = agent.get_xfer_descs([(0x1000, 64, 0)], "DRAM")
    refused(agent.get_xfer_descs, reg, why="nixlRegDList was given")
    refused(agent.get_reg_descs, xfer, why="nixlXferDList was given")
    refused(agent.register_memory, xfer, why="nixlXferDList was given")
    assert agent.get_xfer_descs(reg.trim()) == xfer and agent.get_reg_descs(reg) is reg


def test_reg_tuples_carry_meta(agent):
    r = agent.get_reg_descs([(0x1000, 64, 0, "a"), (0x2000, 64, 0, b"\x00b"), (0x3000, 8, 0)], "cuda")
    assert r.getType() == VRAM_SEG
    assert list(r) == [(0x1000, 64, 0, b"a"), (0x2000, 64, 0, b"\x00b"), (0x3000, 8, 0, b"")]
    assert list(r.trim()) == [(0x1000, 64, 0), (0x2000, 64, 0), (0x3000, 8, 0)]
    back = agent.deserialize_descs(agent.get_serialized_descs(r))
    assert back == r and back is not r
    assert pickle.loads(pickle.dumps(r.trim())) == r.trim()
    x = nixlXferDList(DRAM_SEG)
    x.append((1, 2, 3))
    assert x[-1] == (1, 2, 3) and len(x) == 1


def test_nx3_array_is_rows_with_a_mem_type_and_a_buffer_without(agent):
    rows = np.array([[0x1000, 64, 0], [0x2000, 32, 0]], dtype=np.uint64)
    assert list(agent.get_xfer_descs(rows, "DRAM")) == [(0x1000, 64, 0), (0x2000, 32, 0)]
    assert list(agent.get_reg_descs(rows.astype(np.int64), "DRAM")) == [(0x1000, 64, 0, b""), (0x2000, 32, 0, b"")]
    assert list(agent.get_xfer_descs(rows)) == [(rows.ctypes.data, rows.nbytes, 0)]
    assert list(agent.get_xfer_descs([rows], "DRAM")) == [(rows.ctypes.data, rows.nbytes, 0)]
    assert agent.get_reg_descs(np.array([[-5, 1, 0]]), "DRAM") is None  # logged: non-negative
    # A transfer list of int64 rows keeps them as they are: checked where it is used.
    d = agent.get_xfer_descs(np.array([[-5, 1, 0]]), "DRAM")
    assert len(d) == 1 and d[0] == (-5, 1, 0)
    with pytest.raises(nixl.nixlInvalidParamError, match="non-negative"):
        agent.prep_xfer_dlist("", d)


def test_nx3_rows_of_every_layout(agent, refused):
    """int64 / uint64 rows with 8-byte columns (C order, or a column slice) are kept as they are
    and read in place when used; any other layout is converted through numpy at once.  The list
    is the same either way; a list of rows sees the array as it is when used."""
    n = 1000
    base = np.empty((n, 4), np.int64)
    base[:, 0] = 0x10000 + 64 * np.arange(n)
    base[:, 1] = 64 + np.arange(n)
    base[:, 2] = np.arange(n) % 4
    base[:, 3] = -1
    want = [(0x10000 + 64 * i, 64 + i, i % 4) for i in range(n)]
    for rows in (base[:, :3], np.ascontiguousarray(base[:, :3]), base[:, :3].astype(np.uint64),
                 np.asfortranarray(base[:, :3]), base[:, :3].astype(np.int32), base[::-1, :3][::-1]):
        d = agent.get_xfer_descs(rows, "DRAM")
        assert list(d) == want, (rows.dtype, rows.strides)
        assert all(type(x) is int for x in d[0])
    for view in (True, False):
        rows = np.ascontiguousarray(base[:, :3]) if view else np.asfortranarray(base[:, :3])
        d = agent.get_xfer_descs(rows, "DRAM")
        assert (d._rows is rows) == view
        rows[0] = 7  # a list of rows reads the array when used; a converted one was copied
        assert d[0] == ((7, 7, 7) if view else want[0]) and list(d)[1:] == want[1:]
        rows[0] = base[0, :3]
        d.append((1, 2, 3))  # grows like any other: its own words now, the array is not written
        assert len(d) == n + 1 and d[n] == (1, 2, 3) and d[0] == want[0] and d._rows is None
        rows[1] = 9
        assert d[1] == want[1]
        d.remDesc(0)
        assert d[0] == want[1] and rows[0, 0] == want[0][0]
        d[0] = (5, 6, 7)
        assert d[0] == (5, 6, 7) and rows[0, 0] == want[0][0]
    # Refused rows: a list of words refuses them when made, a list of rows when used.
    bad = np.ascontiguousarray(base[:, :3])
    bad[700, 1] = -5
    refused(agent.get_reg_descs, bad, "DRAM", why="row 700")
    refused(agent.get_xfer_descs, np.asfortranarray(bad), "DRAM", why="non-negative")
    d = agent.get_xfer_descs(bad, "DRAM")
    with pytest.raises(nixl.nixlInvalidParamError, match="row 700"):
        agent.prep_xfer_dlist("", d)
    bad[700, 1] = 64
    bad[3, 2] = 1 << 32
    with pytest.raises(nixl.nixlInvalidParamError, match=r"device id out of range \(row 3"):
        agent.prep_xfer_dlist("", agent.get_xfer_descs(bad.astype(np.uint64), "DRAM"))


def test_index_arrays_of_every_integer_type(agent):
    from nixl._descs import index_array
    for dt in (np.int32, np.uint32, np.int64, np.uint64, np.int16):
        keep, addr, n = index_array(np.arange(5, dtype=dt)[::-1], "t")
        assert n == 5 and list((ctypes.c_uint32 * 5).from_address(addr)) == [4, 3, 2, 1, 0]
    for bad in (np.array([0, -1], np.int64), np.array([0, -1], np.int32), np.array([1 << 32], np.int64),
                np.array([1 << 32], np.uint64)):
        with pytest.raises(nixl.nixlInvalidParamError):
            index_array(bad, "t")


def test_numpy_buffers(agent, refused):
    a = np.zeros((4, 1000), dtype=np.float32)
    b = np.zeros(3, dtype=np.complex128)
    assert list(agent.get_reg_descs(a)) == [(a.ctypes.data, 16000, 0, b"")]
    assert list(agent.get_xfer_descs([a, b])) == [(a.ctypes.data, 16000, 0), (b.ctypes.data, 48, 0)]
    assert list(agent.get_xfer_descs(a[1])) == [(a.ctypes.data + 4000, 4000, 0)]
    assert agent.get_xfer_descs(np.asfortranarray(a))[0][1] == 16000
    refused(agent.get_xfer_descs, a[:, ::2], why="not contiguous")
    refused(agent.register_memory, a[:, ::2], why="not contiguous")


def test_tensors_by_duck_typing(agent, refused):
    host = np.zeros(512, dtype=np.uint8)
    cpu = FakeTensor(host)
    assert list(agent.get_xfer_descs(cpu)) == [(host.ctypes.data, 512, 0)]
    g = FakeTensor(addr=0x7f0000000000, nbytes=4096, device="cuda", index=1)
    d = agent.get_reg_descs([g, FakeTensor(addr=0x7f0000100000, nbytes=64, device="cuda", index=1)])
    assert d.mem_type == "VRAM" and list(d) == [(0x7f0000000000, 4096, 1, b""), (0x7f0000100000, 64, 1, b"")]
    refused(agent.get_xfer_descs, [cpu, g], why="one memory type")
    refused(agent.get_xfer_descs, FakeTensor(host, contiguous=False), why="not contiguous")
    refused(agent.get_reg_descs, FakeTensor(host, contiguous=False), why="not contiguous")
    with pytest.raises(nixl.nixlNotSupportedError, match="xpu"):
        agent.get_xfer_descs(FakeTensor(addr=1, nbytes=2, device="xpu", index=0))


def test_cuda_array_interface_and_ctypes(agent, refused):
    d = agent.get_xfer_descs(FakeCudaArray(0x7f0000000000, (16, 4)))
    assert d.mem_type == "VRAM" and list(d) == [(0x7f0000000000, 256, 3)]
    refused(agent.get_xfer_descs, FakeCudaArray(0x7f0000000000, (16, 4), strides=(32, 4)), why="not contiguous")
    buf = (ctypes.c_uint8 * 100)()
    assert list(agent.get_xfer_descs(buf)) == [(ctypes.addressof(buf), 100, 0)]
    refused(agent.get_xfer_descs, object(), why="cannot make descriptors")
    with pytest.raises(nixl.nixlInvalidParamError, match="cannot make descriptors"):
        agent.initialize_xfer("WRITE", object(), [(1, 2, 0)], "nobody")


def test_many_descriptors_are_cheap(agent):
    n = 200_000
    rows = np.empty((n, 3), dtype=np.uint64)
    rows[:, 0] = 0x10000000 + np.arange(n, dtype=np.uint64) * 1152
    rows[:, 1] = 1152
    rows[:, 2] = 0
    t = time.perf_counter()
    d = agent.get_xfer_descs(rows, "DRAM")
    fast = time.perf_counter() - t
    assert len(d) == n and d[n - 1] == (0x10000000 + (n - 1) * 1152, 1152, 0)
    t = time.perf_counter()
    d2 = agent.get_xfer_descs([tuple(int(v) for v in r) for r in rows[:20000]], "DRAM")
    assert len(d2) == 20000 and d2[19999] == d[19999]
    slow = time.perf_counter() - t
    assert fast < 1.0 and slow < 5.0, (fast, slow)


def test_alloc_array_is_shared_memory_freed_with_its_views():
    a = nixl.alloc_array((8, 1024), dtype=np.uint16)
    assert a.shape == (8, 1024) and a.dtype == np.uint16 and not a.any()
    view = a[2]
    del a
    view[:] = 7  # the view keeps the mapping alive
    assert int(view.sum()) == 7 * 1024
    buf = nixl.alloc_buffer(4096)
    assert ctypes.sizeof(buf) == 4096
    with pytest.raises(nixl.nixlInvalidParamError):
        nixl.alloc_buffer(0)


def test_big_lists_reuse_words_only_of_dead_lists(agent):
    """Lists from big numpy rows take their words from lists that died (no fresh pages per
    request); a live list is never written by a newer one."""
    import gc
    n = 100_000  # 3.2 MB of words: pooled
    rows = [np.column_stack([np.arange(n, dtype=np.int64) * 64 + k * 10**9 + 4096,
                             np.full(n, 64, np.int64), np.zeros(n, np.int64)]) for k in range(3)]
    a = agent.get_xfer_descs(rows[0], "DRAM")
    b = agent.get_xfer_descs(rows[1], "DRAM")
    assert a[n - 1] == (int(rows[0][-1, 0]), 64, 0) and b[n - 1] == (int(rows[1][-1, 0]), 64, 0)
    addr_b = b._words.ctypes.data
    del b
    gc.collect()
    c = agent.get_xfer_descs(rows[2], "DRAM")
    assert c._words.ctypes.data == addr_b  # b's words, now c's
    assert list(a[:3]) == [tuple(int(x) for x in r) for r in rows[0][:3]] and a[n - 1][0] == int(rows[0][-1, 0])
    assert c[0] == (int(rows[2][0, 0]), 64, 0) and c[n - 1] == (int(rows[2][-1, 0]), 64, 0)
