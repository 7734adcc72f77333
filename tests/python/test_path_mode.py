"""NIXL's path mode for files from Python: register_memory of FILE tuples whose meta is
"rw,create:<path>" makes the library open (and create) the file; transfers name it by the
tuple's device id, the agent as the peer; deregister_memory closes it.  The bytes are read
back from the path, and a malformed path-mode string is refused."""

import os

import numpy as np
import pytest

import nixl
from conftest import make_agent, wait_state


def wait_done(agent, h):
    return wait_state(agent, h)  # a deadline, not a count of polls


def test_path_mode_roundtrip(tmp_path):
    path = str(tmp_path / "kv.bin")
    a = make_agent("pm", backends=["POSIX"])
    with a:
        src = np.arange(16 * 4096, dtype=np.uint8) * 7
        back = np.zeros_like(src)
        a.register_memory(src)
        a.register_memory(back)
        files = a.register_memory([(0, 0, 11, "rw,create:" + path)], "FILE")
        assert os.path.exists(path)
        info = a.query_memory([(0, 0, 11, "rw,create:" + path)], "POSIX", mem_type="FILE")
        assert info[0] is not None and info[0]["size"] == "0"
        # Pieces in reverse order in the file.
        rows = np.array([[(15 - i) * 4096, 4096, 11] for i in range(16)], dtype=np.int64)
        fdescs = a.get_xfer_descs(rows, "FILE")
        mrows = np.array([[src.ctypes.data + i * 4096, 4096, 0] for i in range(16)], dtype=np.int64)
        brows = np.array([[back.ctypes.data + i * 4096, 4096, 0] for i in range(16)], dtype=np.int64)
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(mrows, "DRAM"), fdescs, a.name)
        assert a.transfer(h) in ("PROC", "DONE") and wait_done(a, h) == "DONE"
        a.release_xfer_handle(h)
        on_disk = np.fromfile(path, dtype=np.uint8).reshape(16, 4096)
        assert np.array_equal(on_disk[::-1].reshape(-1), src)
        h = a.initialize_xfer("READ", a.get_xfer_descs(brows, "DRAM"), fdescs, a.name)
        assert a.transfer(h) in ("PROC", "DONE") and wait_done(a, h) == "DONE"
        a.release_xfer_handle(h)
        assert np.array_equal(back, src)
        a.deregister_memory(files)
        with pytest.raises(nixl.nixlInvalidParamError):
            a.register_memory([(0, 0, 12, "rw,fast:" + path)], "FILE")
        with pytest.raises(nixl.nixlInvalidParamError):
            a.register_memory([(0, 0, 12, "ro:" + str(tmp_path / "missing"))], "FILE")
