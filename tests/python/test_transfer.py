"""Transfers between two agents of one process: both APIs, notifications,
telemetry and path accounting, backends by NIXL's names, handle life cycle."""

import logging
import time

import numpy as np
import pytest

import nixl
from nixl._api import nixl_agent, nixl_agent_config

from conftest import introduce, make_agent, unique, wait_notif, wait_state

N = 1 << 20


def pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 7 + seed) % 251).astype(np.uint8)


@pytest.mark.parametrize("shared", [True, False], ids=["alloc_array", "numpy"])
def test_one_shot_write_then_read(pair, shared):
    a, b = pair
    src = nixl.alloc_array(N) if shared else np.zeros(N, np.uint8)
    dst = nixl.alloc_array(N) if shared else np.zeros(N, np.uint8)
    src[:] = pattern(N, 1)
    a.register_memory(src)
    rb = b.register_memory(dst)
    introduce(a, b)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), rb.trim(), b.name, b"kv-ready")
    assert a.transfer(h) in ("DONE", "PROC")
    assert wait_state(a, h) == "DONE"
    wait_notif(b, a.name, b"kv-")
    assert np.array_equal(src, dst)
    info = a.get_xfer_info(h)
    assert (info.backend, info.bytes, info.descs_in, info.posts) == ("shm", N, 1, 1)
    assert info.path == ("shm.map" if shared else "shm.cma")
    a.release_xfer_handle(h)

    dst[:] = pattern(N, 2)  # decode's bytes changed; read them back into prefill
    h = a.initialize_xfer("READ", a.get_xfer_descs([(src.ctypes.data, N, 0)], "DRAM"),
                          a.get_xfer_descs([(dst.ctypes.data, N, 0)], "DRAM"), b.name)
    a.transfer(h)
    assert wait_state(a, h) == "DONE"
    assert np.array_equal(src, pattern(N, 2))
    stats = a.get_path_stats()
    assert stats[info.path].requests == 2 and stats[info.path].bytes == 2 * N and stats[info.path].errors == 0
    assert a.get_fallback_stats() == []


def test_two_step_api_scatters_pages_and_merges_runs(pair):
    a, b = pair
    pages, page = 256, 1152
    src = nixl.alloc_array((pages, page))
    dst = nixl.alloc_array((pages, page))
    for p in range(pages):
        src[p] = pattern(page, p)
    a.register_memory([src])
    b.register_memory([dst])
    introduce(a, b)
    rows = lambda arr: np.array([[arr.ctypes.data + p * page, page, 0] for p in range(pages)], np.uint64)
    lh = a.prep_xfer_dlist("NIXL_INIT_AGENT", rows(src), "DRAM")
    rh = a.prep_xfer_dlist(b.name, rows(dst), "DRAM")
    assert a.check_remote_metadata(b.name, rows(dst)[:3].tolist() and a.get_xfer_descs(rows(dst), "DRAM"))

    # Pages 0..99 to 100..199 in order (one merged run), then a shuffled scatter.
    h1 = a.make_prepped_xfer("WRITE", lh, list(range(100)), rh, np.arange(100, 200, dtype=np.int32), "run")
    assert wait_state(a, h1) if a.transfer(h1) == "PROC" else True
    info = a.get_xfer_info(h1)
    assert info.descs_in == 100 and info.descs == 1 and info.bytes == 100 * page
    assert np.array_equal(dst[100:200], src[:100])
    perm = np.random.default_rng(5).permutation(pages).astype(np.uint32)
    h2 = a.make_prepped_xfer("WRITE", lh, np.arange(pages), rh, perm, notif_msg=b"scatter")
    a.transfer(h2)
    assert wait_state(a, h2) == "DONE"
    wait_notif(b, a.name, b"scatter")
    assert all(np.array_equal(dst[perm[i]], src[i]) for i in range(pages))
    tel = a.get_xfer_telemetry(h2)
    assert tel.totalBytes == pages * page and tel.descCount == a.get_xfer_info(h2).descs and tel.startTime > 0

    with pytest.raises(nixl.nixlMismatchError):
        a.make_prepped_xfer("WRITE", lh, [0, 1], rh, [0])
    with pytest.raises(nixl.nixlInvalidParamError):
        a.make_prepped_xfer("COPY", lh, [0], rh, [0])
    with pytest.raises(nixl.nixlInvalidParamError):
        a.make_prepped_xfer("WRITE", lh, [pages], rh, [0])
    for h in (h1, h2):
        a.release_xfer_handle(h)
    a.release_dlist_handle(lh)
    a.release_dlist_handle(rh)
    with pytest.raises(nixl.nixlInvalidParamError, match="released"):
        a.make_prepped_xfer("WRITE", lh, [0], rh, [0])


def test_repost_and_notification_given_at_transfer(pair):
    a, b = pair
    src, dst = nixl.alloc_array(4096), nixl.alloc_array(4096)
    a.register_memory(src)
    b.register_memory(dst)
    introduce(a, b)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name, b"first")
    for i in range(3):
        src[:] = i + 1
        a.transfer(h)
        assert wait_state(a, h) == "DONE" and int(dst[0]) == i + 1
    assert a.get_xfer_info(h).posts == 3
    a.transfer(h, notif_msg="second")  # NIXL lets the post set the notification
    assert wait_state(a, h) == "DONE"
    got = []
    deadline = time.monotonic() + 20.0  # a deadline, not a count of polls: a loaded CI box is slow
    while time.monotonic() < deadline:
        for msgs in b.get_new_notifs().values():
            got += msgs
        if b"second" in got and got.count(b"first") == 3:
            break
        time.sleep(0.001)
    assert got == [b"first"] * 3 + [b"second"]


@pytest.mark.parametrize("count,prog", [(8, False), (300, True)], ids=["polled", "progress-thread"])
def test_standalone_notifications_and_their_order(count, prog):
    # Without a progress thread the receiver takes notifications off the
    # backend only when it polls, and the shm queue holds about ten: a sender
    # then waits (and times out after 2 s).  With one, any number queue up.
    a, b = make_agent("nt"), make_agent("nt", enable_prog_thread=prog)
    introduce(a, b)
    for i in range(count):
        a.send_notif(b.name, f"n{i}")
    b.send_notif(a.name, b"")
    got = {}
    deadline = time.monotonic() + 10  # polls, not a count of them: delivery takes what it takes
    while len(got.get(a.name, [])) < count and time.monotonic() < deadline:
        for k, v in b.get_new_notifs().items():
            got.setdefault(k, []).extend(v)
        time.sleep(0.0005)
    assert got == {a.name: [f"n{i}".encode() for i in range(count)]}
    wait_notif(a, b.name, b"")
    assert not b.check_remote_xfer_done(a.name, b"n")
    a.send_notif(b.name, b"xx-tag-yy")
    deadline = time.monotonic() + 10
    while not b.check_remote_xfer_done(a.name, b"tag", tag_is_prefix=False):
        if time.monotonic() > deadline:
            pytest.fail("substring match not found")
        time.sleep(0.0005)
    a.close()
    b.close()


def test_metadata_checks_and_removal(pair):
    a, b = pair
    introduce(a, b)
    assert a.check_remote_metadata(b.name) and not a.check_remote_metadata("nobody")
    buf = np.zeros(4096, np.uint8)
    b.register_memory(buf)
    a.add_remote_agent(b.get_agent_metadata())  # reload: newer generation
    assert a.check_remote_metadata(b.name, [(buf.ctypes.data, 4096, 0)] and a.get_xfer_descs(buf))
    assert not a.check_remote_metadata(b.name, a.get_xfer_descs([(buf.ctypes.data + 4096, 8, 0)], "DRAM"))
    a.make_connection(b.name)  # shm: nothing to set up ahead of a request, done at once
    a.make_connection(b.name, ["shm"])
    a.remove_remote_agent(b.name)
    assert not a.check_remote_metadata(b.name)
    with pytest.raises(nixl.nixlNotFoundError):
        a.make_connection(b.name)  # no longer loaded: NIXL_ERR_UNKNOWN_PEER


def test_backends_by_nixl_names(caplog):
    avail = nixl.available_backends()
    assert "shm" in avail and "DRAM" in avail["shm"]["mem_types"]
    with caplog.at_level(logging.WARNING, logger="nixl"):
        a = nixl_agent(unique("be"), nixl_agent_config(enable_prog_thread=False, num_threads=2,
                                                       backends=["UCX", "LIBFABRIC", "GDS", "NOPE"]))
    try:
        assert "GDS" in caplog.text and "NOPE" in caplog.text
        # What NIXL's names stand for in this libnixl (docs/python.md): the
        # backends of ours that exist in this build, one instance each.
        # UCX must reach other hosts: without a ucx backend it takes in libfabric.
        ucx = [x for x in ("shm", "cuda_ipc", "ucx") + (() if "ucx" in avail else ("libfabric",)) if x in avail]
        lf = [x for x in ("shm", "cuda_ipc", "libfabric") if x in avail]
        assert set(a.backends) == {"UCX", "LIBFABRIC"} | set(ucx) | set(lf)
        assert a.backends["UCX"] == [a.backends[x][0] for x in ucx]
        assert a.backends["LIBFABRIC"] == [a.backends[x][0] for x in lf]
        assert a.backends["shm"][0] in a.backends["UCX"] and a.backends["shm"][0] in a.backends["LIBFABRIC"]
        assert a.get_backend_params("UCX")["threads"] == "2"
        assert "DRAM" in a.get_backend_mem_types("UCX")
        assert "UCX" in a.get_plugin_list() and "shm" in a.get_plugin_list()
        assert "threads" in a.get_plugin_params("UCX") and a.get_plugin_mem_types("shm") == ["DRAM"]
        with pytest.raises(nixl.nixlNotFoundError):
            a.create_backend("NOPE")
        a.create_backend("shm")  # made for UCX already: the same instance
        assert a.backends["shm"][0] == a.backends["UCX"][0]
        buf = np.zeros(64, np.uint8)
        a.register_memory(buf, backends=["UCX"])
        a.deregister_memory(a.get_reg_descs(buf), backends=["LIBFABRIC"])
        with pytest.raises(nixl.nixlNotFoundError, match="not created"):
            a.register_memory(buf, backends=["POSIX"])
    finally:
        a.close()
    with caplog.at_level(logging.WARNING, logger="nixl"):
        b = nixl_agent(unique("be"), nixl_agent_config(enable_prog_thread=False, backends=[]))
        b.create_backend("UCX", {"num_threads": "3", "num_workers": "2"})  # NIXL UCX's, not ours
    assert "num_workers" in caplog.text and b.get_backend_params("UCX")["threads"] == "3"
    b.close()
    c = make_agent("be", backends=["shm"])
    with pytest.raises(nixl.nixlNotAllowedError, match="EXISTS"):
        c.create_backend("shm")
    c.close()


def test_query_backend_and_prog_thread():
    a = make_agent("pt", enable_prog_thread=True)
    b = make_agent("pt", enable_prog_thread=True, backends=["shm"])
    with a, b:
        src, dst = nixl.alloc_array(8192), nixl.alloc_array(8192)
        src[:] = 9
        a.register_memory(src)
        b.register_memory(dst)
        introduce(a, b)
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name, b"pt")
        a.transfer(h)
        assert wait_state(a, h) == "DONE" and a.query_xfer_backend(h) == "UCX"
        wait_notif(b, a.name, b"pt")
        assert int(dst.sum()) == 9 * 8192


def test_handles_after_close_and_release():
    a, b = make_agent("life"), make_agent("life")
    src, dst = nixl.alloc_array(4096), nixl.alloc_array(4096)
    a.register_memory(src)
    b.register_memory(dst)
    introduce(a, b)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name)
    lh = a.prep_xfer_dlist("", a.get_xfer_descs(src))
    h.release()
    h.release()  # twice is harmless
    with pytest.raises(nixl.nixlInvalidParamError, match="released"):
        a.transfer(h)
    h2 = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name)
    with pytest.raises(nixl.nixlInvalidParamError, match="belongs to agent"):
        b.check_xfer_state(h2)
    a.close()
    a.close()
    with pytest.raises(nixl.nixlInvalidParamError):
        a.transfer(h2)
    with pytest.raises(nixl.nixlInvalidParamError, match="closed"):
        a.get_agent_metadata()
    del h2, lh  # handles of a closed agent are not freed again
    b.close()


def test_deadline_times_out_without_notification(pair):
    """timeout_ms (ours): a 64 MiB WRITE cannot finish in 1 ms, so the request
    raises NIXL_ERR_TIMEOUT, the target never sees its notification, and the
    same memory still moves with a request without deadline."""
    a, b = pair
    n = 64 << 20
    src = np.full(n, 7, np.uint8)
    dst = np.zeros(n, np.uint8)
    a.register_memory(src)
    rb = b.register_memory(dst)
    introduce(a, b)
    with pytest.raises(nixl.nixlInvalidParamError):
        a.initialize_xfer("WRITE", a.get_xfer_descs(src), rb.trim(), b.name, b"late", timeout_ms=-1)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), rb.trim(), b.name, b"late", timeout_ms=1)
    a.transfer(h)
    with pytest.raises(nixl.nixlBackendError) as e:
        wait_state(a, h)
    assert e.value.status_name == "NIXL_ERR_TIMEOUT"
    time.sleep(0.2)
    assert b.get_new_notifs().get(a.name, []) == []
    a.release_xfer_handle(h)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), rb.trim(), b.name, b"whole", timeout_ms=0)
    a.transfer(h)
    assert wait_state(a, h) == "DONE"
    wait_notif(b, a.name, b"whole")
    assert np.array_equal(src, dst)
    a.release_xfer_handle(h)


def test_indexed_request_moves_every_layer_and_slot(pair):
    """make_indexed_xfer (ours): 4 layers x 64 of 256 slots, shuffled on both sides, as SGLang's
    pages would be, from lists and from numpy arrays; every slot checked, a repost moves new bytes,
    bad input raises and moves nothing."""
    a, b = pair
    layers, slots, item = 4, 256, 96
    src = [nixl.alloc_array((slots, item)) for _ in range(layers)]
    dst = [nixl.alloc_array((slots, item)) for _ in range(layers)]
    a.register_memory(src)
    b.register_memory(dst)
    introduce(a, b)
    rng = np.random.default_rng(3)
    ls, rs = rng.permutation(slots)[:64], rng.permutation(slots)[:64]
    lb, rb = [x.ctypes.data for x in src], np.array([x.ctypes.data for x in dst], np.uint64)
    for round, (lslots, rslots) in enumerate(((ls.tolist(), rs), (ls.astype(np.int32), rs.astype(np.uint32)))):
        for l in range(layers):
            src[l][:] = pattern(slots * item, l * 10 + round).reshape(slots, item)
            dst[l][:] = 0
        h = a.make_indexed_xfer("WRITE", b.name, lb, lslots, rb, rslots, item, "DRAM", notif_msg=b"idx")
        assert a.transfer(h) in ("DONE", "PROC")
        assert wait_state(a, h) == "DONE"
        wait_notif(b, a.name, b"idx")
        for l in range(layers):
            assert np.array_equal(dst[l][rs], src[l][ls]), (round, l)
            others = np.setdiff1d(np.arange(slots), rs)
            assert not dst[l][others].any()
        info = a.get_xfer_info(h)
        assert (info.descs_in, info.bytes) == (layers * 64, layers * 64 * item)
        for l in range(layers):  # a repost moves what the source holds now
            src[l][:] = pattern(slots * item, 99 + l).reshape(slots, item)
        a.transfer(h)
        assert wait_state(a, h) == "DONE"
        assert all(np.array_equal(dst[l][rs], src[l][ls]) for l in range(layers))
        a.release_xfer_handle(h)
    for l in range(layers):
        dst[l][:] = 0
    bad_slots = rs.copy()
    bad_slots[-1] = slots * 4  # past the last layer's buffer
    with pytest.raises(nixl.nixlError):
        a.make_indexed_xfer("WRITE", b.name, lb, ls, rb, bad_slots, item, "DRAM")
    with pytest.raises(nixl.nixlMismatchError):
        a.make_indexed_xfer("WRITE", b.name, lb, ls, rb[:2], rs, item, "DRAM")
    with pytest.raises(nixl.nixlMismatchError):
        a.make_indexed_xfer("WRITE", b.name, lb, ls[:3], rb, rs, item, "DRAM")
    with pytest.raises(nixl.nixlInvalidParamError):
        a.make_indexed_xfer("WRITE", b.name, lb, [-1] * 64, rb, rs, item, "DRAM")
    with pytest.raises(nixl.nixlInvalidParamError):
        a.make_indexed_xfer("WRITE", b.name, lb, ls, rb, rs, item, "DRAM", remote_stride=-8)
    assert not any(d.any() for d in dst)
