"""Every exception class, raised for its cause; the status table is complete."""

import socket

import numpy as np
import pytest

import nixl
import nixl._bindings as nb
from nixl import _errors, _lib

from conftest import introduce, make_agent, unique, wait_state


@pytest.fixture
def ready(pair):
    """pair with a registered buffer each (shared memory) and metadata exchanged."""
    a, b = pair
    src, dst = nixl.alloc_array(1 << 16), nixl.alloc_array(1 << 16)
    a.register_memory(src)
    b.register_memory(dst)
    introduce(a, b)
    return a, b, src, dst


def xfer(a, b, src, dst, **kw):
    return a.initialize_xfer("WRITE", a.get_xfer_descs(src), a.get_xfer_descs(dst), b.name, **kw)


def test_table_covers_every_status_of_the_library():
    known = _lib.known_statuses()
    assert known[0] == "NIXL_OK" and known[1] == "NIXL_IN_PROG"
    missing = [n for c, n in known.items() if c < 0 and n not in _errors.STATUS_CLASS]
    assert not missing, f"add these statuses to nixl/_errors.py STATUS_CLASS and docs/python.md: {missing}"
    stale = [n for n in _errors.STATUS_CLASS if n not in known.values()]
    assert not stale, f"STATUS_CLASS names statuses libnixl no longer has: {stale}"


def test_nixl_names_are_importable_from_bindings():
    for cls in _errors.ALL:
        assert getattr(nb, cls.__name__) is cls and issubclass(cls, nixl.nixlError)
        assert issubclass(cls, Exception) and cls.nixl_status_str.startswith("NIXL_ERR_")
    assert len({c.nixl_status_str for c in _errors.ALL}) == 12


def test_every_raised_error_carries_our_status():
    with pytest.raises(nixl.nixlInvalidParamError) as e:
        make_agent("bad name with spaces")
    assert e.value.status == -1 and e.value.status_name == "NIXL_ERR_INVALID_PARAM"
    # nixl_agent makes its C agent through nixl._bindings.nixlAgent, which names itself
    assert e.value.call == "nixlAgent" and str(e.value).startswith("NIXL_ERR_INVALID_PARAM: nixlAgent:")


def test_invalid_param(pair):
    a, b = pair
    with pytest.raises(nixl.nixlInvalidParamError, match="ZERO_LENGTH"):
        a.register_memory([])
    with pytest.raises(nixl.nixlInvalidParamError, match="BAD_METADATA"):
        a.add_remote_agent(b"not a metadata blob")
    with pytest.raises(nixl.nixlInvalidParamError, match="TOO_BIG"):
        introduce(a, b)
        a.send_notif(b.name, b"x" * (_lib.NIXL_NOTIF_MAX + 1))


def test_not_found(ready):
    a, b, src, dst = ready
    with pytest.raises(nixl.nixlNotFoundError, match="UNKNOWN_PEER"):
        a.initialize_xfer("WRITE", a.get_xfer_descs(src), a.get_xfer_descs(dst), "nobody")
    with pytest.raises(nixl.nixlNotFoundError, match="UNKNOWN_PEER"):
        a.remove_remote_agent("nobody")
    with pytest.raises(nixl.nixlNotFoundError, match="NOT_REGISTERED"):
        xfer(a, b, np.zeros(1 << 16, np.uint8), dst)
    with pytest.raises(nixl.nixlNotFoundError, match="REG_MISMATCH"):
        a.deregister_memory(a.get_reg_descs(src[:100]))
    with pytest.raises(nixl.nixlNotFoundError, match="OBJ .object storage .S3.. maps to our obj, "
                                                     "which is not built"):
        a.create_backend("OBJ")


def test_mismatch(ready):
    a, b, src, dst = ready
    with pytest.raises(nixl.nixlMismatchError, match="LENGTH_MISMATCH"):
        a.initialize_xfer("WRITE", a.get_xfer_descs([src[:10], src[10:20]]), a.get_xfer_descs(dst[:10]), b.name)
    h = xfer(a, b, src, dst)
    a.add_remote_agent(b.get_agent_metadata())  # the peer reloaded: requests made before are stale
    with pytest.raises(nixl.nixlMismatchError, match="STALE"):
        a.transfer(h)
    with pytest.raises(nixl.nixlMismatchError, match="is agent"):
        b2 = make_agent("md", enable_listen_thread=True)
        try:
            a.fetch_remote_metadata("someone-else", "127.0.0.1", b2.listen_port)
        finally:
            b2.close()


def test_not_allowed(ready):
    a, b, src, dst = ready
    with pytest.raises(nixl.nixlNotAllowedError, match="OVERLAP"):
        a.register_memory(src[100:200])
    with pytest.raises(nixl.nixlNotAllowedError, match="SELF"):
        a.add_remote_agent(a.get_agent_metadata())


def test_repost_active(ready):
    a, b, _, _ = ready
    n = 64 << 20
    big_src, big_dst = np.ones(n, np.uint8), np.zeros(n, np.uint8)  # shm.cma: copied by the worker pool
    a.register_memory(big_src)
    b.register_memory(big_dst)
    introduce(a, b)
    h = xfer(a, b, big_src, big_dst)
    for _ in range(5):
        if a.transfer(h) == "PROC":
            try:
                with pytest.raises(nixl.nixlRepostActiveError, match="in flight"):
                    a.transfer(h, notif_msg=b"new")  # would make the request again: refused too
                a.transfer(h)
            except nixl.nixlRepostActiveError as e:
                assert e.status_name == "NIXL_ERR_IN_FLIGHT"
                wait_state(a, h)
                return
            except pytest.fail.Exception:
                pass  # it completed between the two checks
        wait_state(a, h)
    pytest.skip("every 64 MiB WRITE completed inside its post: no request was ever in flight")


def test_backend_error_when_nobody_listens(pair):
    a, _ = pair
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nobody listens on
    with pytest.raises(nixl.nixlBackendError, match="IO"):
        a.fetch_remote_metadata("x", "127.0.0.1", port)
    with pytest.raises(nixl.nixlBackendError, match="IO"):
        a.send_local_metadata("127.0.0.1", port)


def test_remote_disconnect_after_removal(ready):
    a, b, src, dst = ready
    h = xfer(a, b, src, dst)
    a.remove_remote_agent(b.name)
    with pytest.raises(nixl.nixlRemoteDisconnectError, match="PEER_INVALIDATED"):
        a.transfer(h)
    with pytest.raises(nixl.nixlRemoteDisconnectError):
        a.send_notif(b.name, b"hi")


def test_not_supported(pair):
    a, _ = pair
    with pytest.raises(nixl.nixlNotSupportedError, match="MEM_TYPE|NO_CUDA"):  # no VRAM backend, or no GPU
        a.register_memory([(0x7f0000000000, 4096, 0, "")], "VRAM")
    with pytest.raises(nixl.nixlNotFoundError, match="NOT_REGISTERED"):  # loopback works; this memory is not registered
        a.prep_xfer_dlist(a.name, [(1, 1, 0)], "DRAM")
    with pytest.raises(nixl.nixlNotSupportedError):
        a.query_memory([], "UCX")


def test_not_posted_and_no_telemetry(ready):
    a, b, src, dst = ready
    h = xfer(a, b, src, dst)
    with pytest.raises(nixl.nixlNotPostedError):
        a.check_xfer_state(h)
    with pytest.raises(nixl.nixlNoTelemetryError):
        a.get_xfer_telemetry(h)
    a.transfer(h)
    assert wait_state(a, h) == "DONE"
    assert a.get_xfer_telemetry(h).totalBytes == 1 << 16


def test_statuses_no_call_can_reach_map_to_their_classes():
    # CANCELED is what a request released in flight ends with; it never
    # reaches a caller, but its class is fixed.  An unknown code is nixlUnknownError.
    for name, cls in (("NIXL_ERR_CANCELED", nixl.nixlCancelledError), ("NIXL_ERR_PEER_GONE",
                      nixl.nixlRemoteDisconnectError), ("NIXL_ERR_TIMEOUT", nixl.nixlBackendError)):
        code = next(c for c, n in _lib.known_statuses().items() if n == name)
        with pytest.raises(cls, match=name):
            _errors.check(code, "test")
    with pytest.raises(nixl.nixlUnknownError, match="NIXL_UNKNOWN_STATUS"):
        _errors.check(-127, "test")
    assert _errors.class_for("NIXL_ERR_FROM_THE_FUTURE") is nixl.nixlUnknownError
    assert _errors.check(1, "test") == 1 and _errors.check(0, "test") == 0


def test_unique_names_helper_is_valid():
    make_agent(unique("ok")).close()
