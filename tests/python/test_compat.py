"""NIXL's Python names and behaviours, one by one, against what NIXL documents.

Each test names the NIXL behaviour it holds us to (docs/python.md has the
table of where we differ on purpose).
"""

import os
import ctypes
import pickle
import time

import numpy as np
import pytest

import nixl
import nixl._bindings as nb
import nixl._utils as utils
from nixl._api import nixl_agent, nixl_agent_config, nixl_thread_sync_t, nixlBind

from conftest import make_agent, unique, wait_state


def test_engines_imports_resolve():
    # SGLang, LightLLM: from nixl._api import nixl_agent, nixl_agent_config, nixl_thread_sync_t
    # LMCache: from nixl._api import nixlBind (the bindings module itself)
    assert nixlBind is nb
    import nixl._api as api
    for name in ("nixl_agent", "nixl_agent_config", "nixl_thread_sync_t", "nixl_prepped_dlist_handle",
                 "nixl_xfer_handle", "nixlBind", "DEFAULT_COMM_PORT"):
        assert hasattr(api, name), name


def test_thread_sync_values_are_nixls():
    # NIXL: enum class nixl_thread_sync_t { NONE, STRICT, RW, DEFAULT = NONE }
    assert (nb.NIXL_THREAD_SYNC_NONE, nb.NIXL_THREAD_SYNC_STRICT, nb.NIXL_THREAD_SYNC_RW) == (0, 1, 2)
    assert nb.NIXL_THREAD_SYNC_DEFAULT == nb.NIXL_THREAD_SYNC_NONE
    t = nixl_thread_sync_t
    assert [m.value for m in (t.NIXL_THREAD_SYNC_NONE, t.NIXL_THREAD_SYNC_STRICT, t.NIXL_THREAD_SYNC_RW)] == [0, 1, 2]
    assert t.NIXL_THREAD_SYNC_DEFAULT is t.NIXL_THREAD_SYNC_NONE
    assert nixl.nixl_thread_sync_t is t


@pytest.mark.parametrize("bad", [1, "NIXL_THREAD_SYNC_STRICT", True, 0.0, object()])
def test_sync_mode_of_another_type_is_type_error(bad):
    with pytest.raises(TypeError, match="nixl_thread_sync_t"):
        nixl_agent_config(sync_mode=bad)


def test_sync_mode_default_follows_the_listener():
    # NIXL's rule: None means STRICT when a listener runs, else NONE.
    quiet = nixl_agent(unique("sync"), nixl_agent_config(backends=[], enable_prog_thread=False))
    listening = nixl_agent(unique("sync"), nixl_agent_config(backends=[], enable_prog_thread=False,
                                                             enable_listen_thread=True, listen_port=0))
    try:
        assert quiet.sync_mode is nixl_thread_sync_t.NIXL_THREAD_SYNC_NONE
        assert listening.sync_mode is nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT
    finally:
        quiet.close()
        listening.close()


@pytest.mark.parametrize("mode", list(nixl_thread_sync_t))
def test_sglang_start_up_runs_in_every_mode(mode):
    # SGLang's NixlKVManager: nixl_agent_config(backends=[], num_threads=8, sync_mode=STRICT), then
    # create_backend(backend, params) and a registration.
    conf = nixl_agent_config(backends=[], num_threads=8, sync_mode=mode)
    assert conf.sync_mode is mode
    agent = nixl_agent(unique("sglang"), conf)
    try:
        assert agent.sync_mode is mode
        agent.create_backend("UCX", {"num_threads": "8"})
        buf = nixl.alloc_array(4096)
        descs = agent.register_memory(buf)
        assert descs is not None and len(descs) == 1
        agent.deregister_memory(descs)
    finally:
        agent.close()


# ---- NIXL's low-level surface: nixl._bindings.nixlAgentConfig / nixlAgent ----

def _wait_status(agent, reqh, timeout=20.0):
    deadline = time.monotonic() + timeout
    st = agent.getXferStatus(reqh)
    while st == nb.NIXL_IN_PROG:
        assert time.monotonic() < deadline, "request did not complete"
        time.sleep(0.0005)
        st = agent.getXferStatus(reqh)
    return st


def _wait_notifs(agent, sender, count, timeout=20.0):
    got = {}
    deadline = time.monotonic() + timeout
    while len(got.get(sender, [])) < count:
        assert time.monotonic() < deadline, f"no notification from {sender}"
        got = agent.getNotifs(got)
        time.sleep(0.0005)
    return got


@pytest.fixture
def low_pair():
    """Two nixlAgents of this process with NIXL's UCX backend, 4096-byte buffers from nixl._utils."""
    conf = nb.nixlAgentConfig()
    conf.useProgThread = False
    conf.captureTelemetry = True
    a, b = nb.nixlAgent(unique("lowa"), conf), nb.nixlAgent(unique("lowb"), conf)
    ba, bb = a.createBackend("UCX", {}), b.createBackend("UCX", {})
    size = 4096
    src, dst = utils.malloc_passthru(size), utils.malloc_passthru(size)
    yield a, b, ba, bb, src, dst, size
    a.close()
    b.close()
    utils.free_passthru(src)
    utils.free_passthru(dst)


def test_low_level_one_shot_write_with_notification(low_pair):
    a, b, ba, bb, src, dst, size = low_pair
    utils.ba_buf(src, size)
    ctypes.memset(dst, 0, size)
    ra, rb = nb.nixlRegDList(nb.DRAM_SEG), nb.nixlRegDList(nb.DRAM_SEG)
    ra.addDesc((src, size, 0, "a"))
    rb.addDesc((dst, size, 0, "b"))
    assert a.registerMem(ra, [ba]) == nb.NIXL_SUCCESS and b.registerMem(rb, [bb]) == nb.NIXL_SUCCESS
    assert a.loadRemoteMD(b.getLocalMD()) == b.name.encode()
    assert b.loadRemoteMD(a.getLocalMD()) == a.name.encode()
    assert a.checkRemoteMD(b.name, nb.nixlXferDList(nb.DRAM_SEG)) == nb.NIXL_SUCCESS
    assert a.checkRemoteMD("nobody", nb.nixlXferDList(nb.DRAM_SEG)) == nb.NIXL_ERR_NOT_FOUND
    # two contiguous halves: NIXL's createXferReq does not merge, so telemetry counts 2
    local = nb.nixlXferDList(nb.DRAM_SEG, [(src, size // 2, 0), (src + size // 2, size // 2, 0)])
    remote = nb.nixlXferDList(nb.DRAM_SEG, [(dst, size // 2, 0), (dst + size // 2, size // 2, 0)])
    h = a.createXferReq(nb.NIXL_WRITE, local, remote, b.name, "n\0tif")
    assert isinstance(h, int) and h != 0
    assert a.postXferReq(h) in (nb.NIXL_SUCCESS, nb.NIXL_IN_PROG)
    assert _wait_status(a, h) == nb.NIXL_SUCCESS
    assert _wait_notifs(b, a.name, 1) == {a.name: [b"n\0tif"]}
    utils.verify_transfer(src, dst, size)
    assert ctypes.string_at(dst, size) == b"\xba" * size
    t = a.getXferTelemetry(h)
    assert (t.descCount, t.totalBytes) == (2, size) and t.startTime > 0
    assert 0 < t.postDuration <= t.xferDuration
    assert a.queryXferBackend(h) == ba
    assert a.releaseXferReq(h) == nb.NIXL_SUCCESS
    with pytest.raises(nb.nixlInvalidParamError, match="released"):
        a.getXferStatus(h)
    assert a.deregisterMem(ra, [ba]) == nb.NIXL_SUCCESS
    assert a.invalidateRemoteMD(b.name) == nb.NIXL_SUCCESS
    assert a.invalidateRemoteMD(b.name) == nb.NIXL_ERR_NOT_FOUND  # NIXL returns it, does not raise


def test_low_level_prepped_lists_and_a_new_notification_per_post(low_pair):
    a, b, ba, bb, src, dst, size = low_pair
    page = 512
    for i in range(size // page):
        ctypes.memset(src + i * page, i + 1, page)
    ctypes.memset(dst, 0, size)
    a.registerMem(nb.nixlRegDList(nb.DRAM_SEG, [(src, size, 0, "")]))
    b.registerMem(nb.nixlRegDList(nb.DRAM_SEG, [(dst, size, 0, "")]))
    a.loadRemoteMD(b.getLocalMD())
    pages = size // page
    loc = a.prepXferDlist(nb.nixlXferDList(nb.DRAM_SEG, [(src + i * page, page, 0) for i in range(pages)]))
    loc2 = a.prepXferDlist(nb.NIXL_INIT_AGENT, nb.nixlXferDList(nb.DRAM_SEG, [(src, page, 0)]), [ba])
    rem = a.prepXferDlist(b.name, nb.nixlXferDList(nb.DRAM_SEG, [(dst + i * page, page, 0) for i in range(pages)]))
    rev = np.arange(pages, dtype=np.int32)[::-1].copy()
    h = a.makeXferReq(nb.NIXL_WRITE, loc, list(range(pages)), rem, rev, "first")
    a.postXferReq(h)
    assert _wait_status(a, h) == nb.NIXL_SUCCESS
    for i in range(pages):  # page i landed at page pages-1-i
        assert ctypes.string_at(dst + (pages - 1 - i) * page, page) == bytes([i + 1]) * page
    a.postXferReq(h, "second")  # same handle, another notification
    assert _wait_status(a, h) == nb.NIXL_SUCCESS
    assert _wait_notifs(b, a.name, 2) == {a.name: [b"first", b"second"]}
    with pytest.raises(nb.nixlMismatchError):
        a.makeXferReq(nb.NIXL_WRITE, loc, [0, 1], rem, [0])
    with pytest.raises(nb.nixlInvalidParamError, match="prepared as local"):
        a.makeXferReq(nb.NIXL_WRITE, loc, [0], loc2, [0])
    a.releaseXferReq(h)
    for d in (loc, loc2, rem):
        assert a.releasedDlistH(d) == nb.NIXL_SUCCESS
    with pytest.raises(nb.nixlInvalidParamError):
        a.releasedDlistH(loc)


def test_low_level_plugins_backends_and_what_libnixl_lacks(low_pair):
    a, b, ba, bb, src, dst, size = low_pair
    plugins = a.getAvailPlugins()
    assert "UCX" in plugins and "shm" in plugins
    params, mems = a.getPluginParams("UCX")
    assert "DRAM" in mems and isinstance(params, dict)
    bparams, bmems = a.getBackendParams(ba)
    assert bmems == mems and set(bparams) == set(params)
    with pytest.raises(nb.nixlNotFoundError):
        a.createBackend("UVX", {})
    with pytest.raises(nb.nixlNotFoundError):
        a.getBackendParams(12345)
    reg = nb.nixlRegDList(nb.DRAM_SEG, [(src, size, 0, "")])
    for call, args, what in ((a.queryMem, (reg, ba), "memory query"),
                             (a.prepMemView, (nb.nixlXferDList(nb.VRAM_SEG),), "GPU device API")):
        with pytest.raises(nb.nixlNotSupportedError, match=what):
            call(*args)
    assert nb.HAVE_UCX_GPU_DEVICE_API is False


def test_low_level_config_and_empty_name():
    c = nb.nixlAgentConfig(True, True, 0, nb.NIXL_THREAD_SYNC_RW)
    assert (c.useProgThread, c.useListenThread, c.listenPort, c.syncMode) == (True, True, 0, 2)
    d = nb.nixlAgentConfig()
    assert (d.useProgThread, d.useListenThread, d.listenPort, d.captureTelemetry) == (False, False, 8888, False)
    with pytest.raises(ValueError, match="non-empty name") as e:
        nb.nixlAgent("", d)
    assert isinstance(e.value, nixl.nixlInvalidParamError)
    with pytest.raises(ValueError):
        nixl_agent("")
    a = nb.nixlAgent(unique("cfg"), c)
    try:
        assert a.makeConnection is not None and a.getNotifs({}) == {}
    finally:
        a.close()
    with pytest.raises(nb.nixlInvalidParamError, match="closed"):
        a.getLocalMD()


def test_nixl_agent_makes_its_agent_through_bindings(monkeypatch):
    # NIXL's test_sync_mode_agent replaces nixl._bindings.nixlAgent with a spy.
    seen = []
    real = nb.nixlAgent

    def spy(name, config):
        seen.append((name, config.syncMode, config.useListenThread, config.listenPort))
        return real(name, config)

    monkeypatch.setattr(nb, "nixlAgent", spy)
    name = unique("spy")
    agent = nixl_agent(name, nixl_agent_config(backends=[], enable_listen_thread=True, listen_port=0,
                                               sync_mode=nixl_thread_sync_t.NIXL_THREAD_SYNC_RW))
    try:
        assert seen == [(name, nixl_thread_sync_t.NIXL_THREAD_SYNC_RW.value, True, 0)]
        assert isinstance(agent.agent, real) and agent.listen_port > 0
        agent.create_backend("UCX")
        assert set(agent.backends["UCX"]) <= set(agent.agent._ours.values())  # made by the nixlAgent
    finally:
        agent.close()
    assert agent.agent.closed


def test_closing_the_nixlagent_closes_the_nixl_agent(pair):
    a, b = pair
    src = nixl.alloc_array(4096)
    a.register_memory(src)
    rb = b.register_memory(nixl.alloc_array(4096))
    a.add_remote_agent(b.get_agent_metadata())
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), rb.trim(), b.name)
    a.agent.close()  # the C agent is gone: nothing may touch it through a or its handles
    with pytest.raises(nixl.nixlInvalidParamError, match="closed"):
        a.get_agent_metadata()
    h.release()  # refused quietly, not a use after free
    a.close()


# ---- the list classes' whole method set ----

def test_list_methods():
    descs = [(1000, 105, 0), (2000, 30, 0), (1010, 20, 0)]
    x = nb.nixlXferDList(nb.DRAM_SEG, descs)
    assert x.descCount() == 3 and x.getType() == nb.DRAM_SEG and x[0] == descs[0]
    assert x.index((2000, 30, 0)) == 1 and x.getIndex((1010, 20, 0)) == 2
    with pytest.raises(nb.nixlNotFoundError):
        x.index((1, 1, 1))
    x[1] = (3000, 40, 1)
    assert list(x) == [descs[0], (3000, 40, 1), descs[2]]
    x.remDesc(0)
    assert list(x) == [(3000, 40, 1), descs[2]]
    with pytest.raises(IndexError):
        x.remDesc(5)
    assert pickle.loads(pickle.dumps(x)) == x
    x.clear()
    assert x.isEmpty() and x.descCount() == 0
    x.addDesc((2000, 100, 0))
    assert list(x) == [(2000, 100, 0)]
    z = nb.nixlXferDList(nb.VRAM_SEG, 2)  # NIXL's (type, init_size)
    assert list(z) == [(0, 0, 0), (0, 0, 0)] and z.getType() == nb.VRAM_SEG
    r = nb.nixlRegDList(nb.DRAM_SEG, [(1, 2, 0, "m"), (5, 6, 0, b"n")])
    assert r.index((5, 6, 0, "n")) == 1 and r[0] == (1, 2, 0, b"m")
    r[0] = (7, 8, 0, "k")
    assert list(r.trim()) == [(7, 8, 0), (5, 6, 0)] and pickle.loads(pickle.dumps(r)) == r
    a = np.array([[10, 20, 0], [30, 40, 0]], dtype=np.uint64)
    assert list(nb.nixlRegDList(nb.DRAM_SEG, a)) == [(10, 20, 0, b""), (30, 40, 0, b"")]


def test_list_print_goes_to_stdout(capsys):
    nb.nixlXferDList(nb.DRAM_SEG, [(4096, 64, 0), (8192, 32, 0)]).print()
    out = capsys.readouterr().out
    assert "DRAM" in out and "(4096, 64, 0)" in out and "(8192, 32, 0)" in out


def test_remote_dlist():
    rl = nb.nixlRemoteDList(nb.VRAM_SEG, [(1, 2, 0, "peer")])
    rl.append((3, 4, 1, "other"))
    assert rl.descCount() == 2 and rl[1] == (3, 4, 1, "other") and rl.getType() == nb.VRAM_SEG
    with pytest.raises(nixl.nixlInvalidParamError):
        rl.addDesc((1, 2, 0))
    rl.remDesc(0)
    assert list(rl) == [(3, 4, 1, "other")]
    agent = nixl_agent(unique("rdl"), nixl_agent_config(backends=[], enable_prog_thread=False))
    try:
        assert agent.get_remote_descs([(1, 2, 0, "p")], "VRAM") == nb.nixlRemoteDList(nb.VRAM_SEG, [(1, 2, 0, "p")])
        assert agent.get_remote_descs([(1, 2, 0, "p")]) is None
        assert agent.get_remote_descs([(1, 2, 0)], "VRAM") is None  # NIXL: a 4-tuple list is needed
        assert list(agent.get_remote_descs([(1, 2, 0, b"p")], "DRAM")) == [(1, 2, 0, "p")]  # a name as bytes
        with pytest.raises(nb.nixlNotSupportedError, match="GPU device API"):
            agent.prep_mem_view(rl)
    finally:
        agent.close()


# ---- nixl._utils and nixl.logging ----

def test_utils_buffers_fill_and_compare():
    a, b = utils.malloc_passthru(8192), utils.malloc_passthru(8192)
    try:
        assert a % 4096 == 0 and b % 4096 == 0
        utils.ba_buf(a, 8192)
        assert ctypes.string_at(a, 8192) == b"\xba" * 8192
        ctypes.memmove(b, a, 8192)
        utils.verify_transfer(a, b, 8192)
        ctypes.memset(b + 100, 0, 1)
        with pytest.raises(AssertionError, match="byte 100"):
            utils.verify_transfer(a, b, 8192)
    finally:
        utils.free_passthru(a)
        utils.free_passthru(b)


def test_get_logger(capsys, caplog):
    from nixl.logging import get_logger
    log = get_logger("_test_compat")
    assert log.name == "nixl.test_compat"
    with caplog.at_level("INFO", logger="nixl"):
        log.info("hello from the compat test")
    assert "hello from the compat test" in capsys.readouterr().out  # NIXL's handler, on stdout
    assert any(r.getMessage() == "hello from the compat test" for r in caplog.records)  # and it propagates


# ---- NIXL's error model through nixl_agent ----

@pytest.fixture
def ready_pair(pair):
    a, b = pair
    src, dst = nixl.alloc_array(4096), nixl.alloc_array(4096)
    src[:] = 9
    a.register_memory(src)
    rb = b.register_memory(dst)
    assert a.add_remote_agent(b.get_agent_metadata()) == b.name.encode()
    b.add_remote_agent(a.get_agent_metadata())
    return a, b, src, dst, rb


def test_bad_operation_is_key_error(ready_pair):
    a, b, src, dst, rb = ready_pair
    local = a.prep_xfer_dlist("", a.get_xfer_descs(src))
    remote = a.prep_xfer_dlist(b.name, rb.trim())
    with pytest.raises(KeyError) as e:
        a.make_prepped_xfer("RD", local, [0], remote, [0])
    assert isinstance(e.value, nixl.nixlInvalidParamError) and "RD" in str(e.value)
    with pytest.raises(KeyError):
        a.initialize_xfer("WR", a.get_xfer_descs(src), rb.trim(), b.name)
    h = a.make_prepped_xfer("WRITE", local, [0], remote, [0], b"ok")
    a.transfer(h)
    deadline = time.monotonic() + 20
    while a.check_xfer_state(h) == "PROC":
        assert time.monotonic() < deadline
    assert bytes(dst) == bytes(src)


def test_a_failed_request_raises_never_err(ready_pair):
    # NIXL's bindings raise for every error status, so its "ERR" is never returned; ours too.
    a, b, src, dst, rb = ready_pair
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), rb.trim(), b.name)
    a.add_remote_agent(b.get_agent_metadata())  # reloaded: the request is stale
    with pytest.raises(nixl.nixlMismatchError):
        a.transfer(h)
    assert bytes(dst) == bytes(4096)


def test_telemetry_off_by_env_and_desc_count(ready_pair, monkeypatch):
    a, b, src, dst, rb = ready_pair
    base = src.ctypes.data
    halves = a.get_xfer_descs([(base, 2048, 0), (base + 2048, 2048, 0)], "DRAM")
    rhalves = a.get_xfer_descs([(dst.ctypes.data, 2048, 0), (dst.ctypes.data + 2048, 2048, 0)], "DRAM")
    h = a.initialize_xfer("WRITE", halves, rhalves, b.name)
    a.transfer(h)
    while a.check_xfer_state(h) == "PROC":
        pass
    assert a.get_xfer_telemetry(h).descCount == 2  # as given: NIXL's initialize_xfer does not merge
    local, remote = a.prep_xfer_dlist("", halves), a.prep_xfer_dlist(b.name, rhalves)
    m = a.make_prepped_xfer("WRITE", local, [0, 1], remote, [0, 1])
    a.transfer(m)
    while a.check_xfer_state(m) == "PROC":
        pass
    assert a.get_xfer_telemetry(m).descCount == 1  # merged, as NIXL's makeXferReq
    # NIXL_TELEMETRY_ENABLE=no turns telemetry off, even with capture_telemetry (as NIXL)
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "no")
    c = nixl_agent(unique("notel"), nixl_agent_config(backends=["UCX"], capture_telemetry=True,
                                                      enable_prog_thread=False))
    try:
        csrc = nixl.alloc_array(4096)
        c.register_memory(csrc)
        c.add_remote_agent(b.get_agent_metadata())
        hc = c.initialize_xfer("WRITE", c.get_xfer_descs(csrc), rb.trim(), b.name)
        c.transfer(hc)
        while c.check_xfer_state(hc) == "PROC":
            pass
        with pytest.raises(nixl.nixlNoTelemetryError, match="NIXL_TELEMETRY_ENABLE"):
            c.get_xfer_telemetry(hc)
        assert c.get_xfer_info(hc).posts == 1  # ours still says what the request did
    finally:
        c.close()


def test_query_memory_unknown_backend_is_value_error(pair):
    a, _ = pair
    with pytest.raises(ValueError, match="not found"):
        a.query_memory([(0, 0, 0, "/tmp/x")], "POSIX", "FILE")
    a.create_backend("UCX")
    with pytest.raises(nixl.nixlNotSupportedError, match="memory query"):
        a.query_memory([(0, 0, 0, "/tmp/x")], "UCX", "FILE")


def test_the_bytes_name_add_remote_agent_returns_works_where_a_name_goes(pair):
    # NIXL's add_remote_agent gives bytes and its C++ calls take str or bytes: code passes it on.
    a, b = pair
    src, dst = nixl.alloc_array(1024), nixl.alloc_array(1024)
    src[:] = 5
    a.register_memory(src)
    rb = b.register_memory(dst)
    peer = a.add_remote_agent(b.get_agent_metadata())
    b.add_remote_agent(a.get_agent_metadata())
    assert peer == b.name.encode() and a.check_remote_metadata(peer)
    local, remote = a.prep_xfer_dlist(b"", a.get_xfer_descs(src)), a.prep_xfer_dlist(peer, rb.trim())
    h = a.make_prepped_xfer("WRITE", local, [0], remote, [0], b"by-bytes")
    a.transfer(h)
    deadline = time.monotonic() + 20
    while not b.check_remote_xfer_done(a.name.encode(), b"by-bytes"):
        assert time.monotonic() < deadline
    assert bytes(dst) == bytes(src)
    a.send_notif(peer, b"hello")
    while not b.check_remote_xfer_done(a.name, b"hello"):
        assert time.monotonic() < deadline
    h2 = a.initialize_xfer("READ", a.get_xfer_descs(src), rb.trim(), peer)
    a.release_xfer_handle(h2)
    a.remove_remote_agent(peer)
    assert not a.check_remote_metadata(peer)


def test_partial_metadata_blob_adds_regions_to_a_known_peer(pair):
    # NIXL: get_partial_agent_metadata(descs, inc_conn_info, backends) gives bytes add_remote_agent loads;
    # they hold the registrations of descs only, and loading them adds those regions to the peer.
    a, b = pair
    bufs = [nixl.alloc_array(4096) for _ in range(3)]
    for i, buf in enumerate(bufs):
        buf[:] = i + 1
    regs = [b.register_memory(buf) for buf in bufs]
    dst = nixl.alloc_array(4096)
    a.register_memory(dst)
    local = a.get_xfer_descs(dst)

    def read(i):
        dst[:] = 0
        h = a.initialize_xfer("READ", local, regs[i].trim(), b.name)
        a.transfer(h)
        assert wait_state(a, h) == "DONE"
        assert bytes(dst) == bytes([i + 1]) * 4096
        return h

    blob = b.get_partial_agent_metadata(regs[0], True, ["UCX"])
    assert isinstance(blob, bytes) and len(blob) < len(b.get_agent_metadata())
    assert a.add_remote_agent(blob) == b.name.encode()
    assert a.check_remote_metadata(b.name, regs[0].trim()) and not a.check_remote_metadata(b.name, regs[1].trim())
    with pytest.raises(nixl.nixlNotFoundError):
        a.initialize_xfer("READ", local, regs[1].trim(), b.name)
    h0 = read(0)
    # Without connection info: adds to the peer a already knows; h0 stays valid.
    a.add_remote_agent(b.get_partial_agent_metadata(regs[1]))
    read(1)
    dst[:] = 0
    a.transfer(h0)
    assert wait_state(a, h0) == "DONE" and bytes(dst) == bytes([1]) * 4096
    # An empty list: connection info only (NIXL's rule), loadable by an agent that never heard of b.
    c = make_agent("third")
    try:
        c.register_memory(nixl.alloc_array(64))
        with pytest.raises(nixl.nixlNotFoundError, match="UNKNOWN_PEER"):
            c.add_remote_agent(b.get_partial_agent_metadata(regs[2]))  # no connection info, unknown peer
        assert not c.check_remote_metadata(b.name)
        c.add_remote_agent(b.get_partial_agent_metadata([]))
        assert c.check_remote_metadata(b.name) and not c.check_remote_metadata(b.name, regs[2].trim())
        c.add_remote_agent(b.get_partial_agent_metadata(regs[2]))
        assert c.check_remote_metadata(b.name, regs[2].trim())
    finally:
        c.close()


def test_partial_metadata_argument_errors(pair):
    a, _ = pair
    reg = a.register_memory(nixl.alloc_array(4096))
    with pytest.raises(nixl.nixlNotFoundError, match="was not created"):
        a.get_partial_agent_metadata(reg, True, ["UVX"])  # a backend name this agent has not
    outside = a.get_xfer_descs([(reg[0][0] + 4096, 16, 0)], "DRAM")
    with pytest.raises(nixl.nixlNotFoundError, match="NOT_REGISTERED"):
        a.get_partial_agent_metadata(outside, True)
    with pytest.raises(nixl.nixlNotFoundError, match="NOT_REGISTERED"):
        a.send_partial_agent_metadata(outside, True, None, "127.0.0.1", 7777)
    with pytest.raises(nixl.nixlInvalidParamError, match="label"):
        a.send_partial_agent_metadata(reg, True)  # neither an address nor a label


def test_partial_md_example_over_the_listener():
    # NIXL's examples/python/partial_md_example.py (socket exchange), in one process: the target sends
    # the metadata of its first ten buffers to the initiator's listener, the initiator READs them; the
    # second ten are not reachable until the target sends theirs too; every byte is checked.
    target = nixl_agent(unique("target"), nixl_agent_config(True, True, 0))
    init = nixl_agent(unique("initiator"), nixl_agent_config(True, True, 0))
    addrs = []
    try:
        size = 256

        def bufs(seed):
            rows = []
            for i in range(10):
                addr = utils.malloc_passthru(size)
                ctypes.memset(addr, seed + i, size)
                rows.append((addr, size, 0, "test"))
                addrs.append(addr)
            return rows

        t1, t2 = target.get_reg_descs(bufs(10), "DRAM"), target.get_reg_descs(bufs(40), "DRAM")
        assert target.register_memory(t1) is not None and target.register_memory(t2) is not None
        ini = init.get_reg_descs(bufs(0), "DRAM")
        assert init.register_memory(ini) is not None
        x1, x2, xi = t1.trim(), t2.trim(), ini.trim()

        def read_and_check(remote, seed):
            h = init.initialize_xfer("READ", xi, remote, target.name, b"UUID1")
            assert init.transfer(h) != "ERR" and wait_state(init, h) == "DONE"
            for i, (addr, n, _dev) in enumerate(xi):
                assert ctypes.string_at(addr, n) == bytes([seed + i]) * n
            deadline = time.monotonic() + 20
            while not target.check_remote_xfer_done(init.name, b"UUID1"):
                assert time.monotonic() < deadline, "no notification"
            init.release_xfer_handle(h)

        target.send_partial_agent_metadata(t1, True, ["UCX"], "127.0.0.1", init.listen_port)
        assert init.check_remote_metadata(target.name, x1)
        read_and_check(x1, 10)
        with pytest.raises(nb.nixlNotFoundError):  # "Second set of descs was not sent, should fail"
            init.initialize_xfer("READ", xi, x2, target.name, b"UUID1")
        target.send_partial_agent_metadata(t2, True, ["UCX"], "127.0.0.1", init.listen_port)
        read_and_check(x2, 40)
        read_and_check(x1, 10)
        init.remove_remote_agent(target.name)
        target.deregister_memory(t1)
        target.deregister_memory(t2)
        init.deregister_memory(ini)
    finally:
        init.close()
        target.close()
        for addr in addrs:
            utils.free_passthru(addr)


def test_low_level_partial_metadata(low_pair):
    # NIXL's nixlAgent.getLocalPartialMD(descs, inc_conn_info, backends) and
    # sendLocalPartialMD(descs, inc_conn_info, backends, ip_addr, port, label).
    a, b, ba, bb, src, dst, size = low_pair
    reg = nb.nixlRegDList(nb.DRAM_SEG, [(dst, size, 0, "")])
    assert b.registerMem(reg, [bb]) == nb.NIXL_SUCCESS
    remote = nb.nixlXferDList(nb.DRAM_SEG, [(dst, size, 0)])
    md = b.getLocalPartialMD(reg, True, [bb])
    assert isinstance(md, bytes) and len(b.getLocalPartialMD(reg, False, [bb])) < len(md)
    assert a.loadRemoteMD(md) == b.name.encode()
    assert a.checkRemoteMD(b.name, remote) == nb.NIXL_SUCCESS
    with pytest.raises(nb.nixlNotFoundError):
        b.getLocalPartialMD(reg, True, [12345])
    with pytest.raises(nb.nixlInvalidParamError, match="label"):
        b.sendLocalPartialMD(reg, True, [], "", 0, "")
    listening = nixl_agent(unique("lowlisten"), nixl_agent_config(False, True, 0))
    try:
        b.sendLocalPartialMD(reg, True, [bb], "127.0.0.1", listening.listen_port, "")
        assert listening.check_remote_metadata(b.name, remote)
    finally:
        listening.close()


def test_loopback_copies_between_own_registrations():
    # NIXL's prep_xfer_perf and the storage examples name the agent itself as the remote side.
    a = nixl_agent(unique("loop"), nixl_agent_config(backends=[], enable_prog_thread=False))
    try:
        a.create_backend("shm")
        n = 64
        src, dst = nixl.alloc_array(n * 1024), nixl.alloc_array(n * 1024)
        src[:] = np.arange(n * 1024, dtype=np.uint32).astype(np.uint8)
        dst[:] = 0
        a.register_memory([src, dst])
        base_s, base_d = src.__array_interface__["data"][0], dst.__array_interface__["data"][0]
        slots = [(i * 5) % n for i in range(n)]
        lrows = [(base_s + i * 1024, 1024, 0) for i in range(n)]
        rrows = [(base_d + s * 1024, 1024, 0) for s in slots]
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(lrows, "DRAM"), a.get_xfer_descs(rrows, "DRAM"), a.name,
                              b"self")
        assert a.transfer(h) in ("DONE", "PROC")
        assert wait_state(a, h) == "DONE"
        for i, s in enumerate(slots):
            assert bytes(dst[s * 1024:(s + 1) * 1024]) == bytes(src[i * 1024:(i + 1) * 1024])
        deadline = time.monotonic() + 10
        while not a.check_remote_xfer_done(a.name, b"self"):
            assert time.monotonic() < deadline, "no loopback notification"
            time.sleep(0.001)
        # the two-step form, READ back
        dst2 = nixl.alloc_array(n * 1024)
        a.register_memory(dst2)  # a later registration keeps the lists valid
        lh = a.prep_xfer_dlist("NIXL_INIT_AGENT", [(dst2.__array_interface__["data"][0] + i * 1024, 1024, 0)
                                                   for i in range(n)], "DRAM")
        rh = a.prep_xfer_dlist(a.name, rrows, "DRAM")
        x = a.make_prepped_xfer("READ", lh, list(range(n)), rh, list(range(n)))
        a.transfer(x)
        assert wait_state(a, x) == "DONE"
        for i, s in enumerate(slots):
            assert bytes(dst2[i * 1024:(i + 1) * 1024]) == bytes(dst[s * 1024:(s + 1) * 1024])
        a.release_xfer_handle(x)
        a.release_xfer_handle(h)
    finally:
        a.close()


# ---- backend names (issue 11, item 6) ----

# Every plugin of NIXL's src/plugins, and the names its older trees and tests use.
NIXL_PLUGINS = ["UCX", "UCX_MO", "LIBFABRIC", "UCCL", "MOONCAKE", "GPUNETIO", "POSIX", "HF3FS", "MOCK_DRAM", "GDS",
                "GDS_MT", "GUSLI", "OBJ", "AZURE_BLOB", "INFINIA"]


def have_cufile():
    import ctypes
    try:
        ctypes.CDLL(os.environ.get("NIXL_GDS_CUFILE_LIB") or "libcufile.so.0")
        return True
    except OSError:
        return False


@pytest.mark.parametrize("name", NIXL_PLUGINS)
def test_every_nixl_backend_name_maps_or_names_what_is_missing(name):
    from nixl._lowlevel import BACKEND_ALIASES, targets
    assert name in BACKEND_ALIASES
    avail = nixl.available_backends()
    a = nixl_agent(unique("be"), nixl_agent_config(enable_prog_thread=False, backends=[]))
    try:
        if targets(avail, name) and name.startswith("GDS") and not have_cufile():
            # Built, but cuFile is loaded at run time and is not here: a clear refusal.
            with pytest.raises(nixl.nixlNotSupportedError):
                a.create_backend(name)
            assert name not in a.backends
        elif targets(avail, name):
            a.create_backend(name)
            assert name in a.get_plugin_list() and a.backends[name]
            made = {a._name_of[h] for h in a.backends[name]}
            assert made <= set(BACKEND_ALIASES[name]) | {"libfabric"}
        else:
            assert name not in a.get_plugin_list()
            with pytest.raises(nixl.nixlNotFoundError) as e:
                a.create_backend(name)
            missing = ", ".join(BACKEND_ALIASES[name])
            assert f"maps to our {missing}" in str(e.value) and "this libnixl has: " in str(e.value)
            with pytest.raises(nixl.nixlNotFoundError, match=f"maps to our {missing}"):
                a.agent.createBackend(name, {})
    finally:
        a.close()


def _write_64k(a, b, seed, notif, backend):
    """A 64 KiB WRITE from a to b through one backend of theirs, as to another host: each
    loads the other's metadata, the request is polled to DONE and the bytes are compared.
    The handle for the caller's checks, and the two arrays, which the caller holds until its
    agents close (they stay registered)."""
    src = np.random.default_rng(seed).integers(0, 256, 1 << 16, dtype=np.uint8)
    dst = np.zeros(1 << 16, np.uint8)
    a.register_memory(src)
    b.register_memory(dst)
    a.add_remote_agent(b.get_agent_metadata())
    b.add_remote_agent(a.get_agent_metadata())
    h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name, notif,
                          backends=[backend])
    a.transfer(h)
    assert wait_state(a, h, timeout=30) == "DONE"
    assert np.array_equal(src, dst)
    return h, (src, dst)


def test_ucx_reaches_other_hosts_through_libfabric_when_no_ucx_is_built(caplog, monkeypatch):
    import logging
    from nixl import _lowlevel
    avail = nixl.available_backends()
    if "ucx" in avail or "libfabric" not in avail:
        pytest.skip(f"needs libfabric and no ucx backend built (built: {', '.join(avail)})")
    monkeypatch.setattr(_lowlevel, "_standin_said", [])  # as in a fresh process
    with caplog.at_level(logging.INFO, logger="nixl"):
        agents = [nixl_agent(unique("ucx"), nixl_agent_config(enable_prog_thread=False)) for _ in range(2)]
    try:
        for a in agents:
            made = [a._name_of[h] for h in a.backends["UCX"]]
            assert "libfabric" in made and "CROSS_HOST" in avail["libfabric"]["caps"]
        said = [r for r in caplog.records if "no ucx backend is built" in r.getMessage()]
        assert len(said) == 1  # once per process, not per agent
        # the bytes go over libfabric when asked, as they would to another host
        a, b = agents
        h, _bufs = _write_64k(a, b, 4, b"over-lf", "libfabric")
        assert a.get_xfer_info(h).path.startswith("libfabric") and a.query_xfer_backend(h) == "UCX"
    finally:
        for a in agents:
            a.close()


def test_ucx_is_our_ucx_backend_when_built(caplog):
    import logging
    avail = nixl.available_backends()
    if "ucx" not in avail:
        pytest.skip(f"needs the ucx backend (built: {', '.join(avail)})")
    with caplog.at_level(logging.INFO, logger="nixl"):
        agents = [nixl_agent(unique("ucx"), nixl_agent_config(enable_prog_thread=False)) for _ in range(2)]
    try:
        for a in agents:
            made = [a._name_of[h] for h in a.backends["UCX"]]
            assert "ucx" in made and "libfabric" not in made
        assert not [r for r in caplog.records if "no ucx backend is built" in r.getMessage()]
        # the bytes go over ucx when asked, as they would to another host
        a, b = agents
        deadline = time.monotonic() + 30  # the transfer and its notification, together
        h, _bufs = _write_64k(a, b, 5, b"over-ucx", "ucx")
        assert a.get_xfer_info(h).path.startswith("ucx.") and a.query_xfer_backend(h) == "UCX"
        got = []
        while not got and time.monotonic() < deadline:
            for msgs in b.get_new_notifs().values():
                got += msgs
        assert got == [b"over-ucx"]
    finally:
        for a in agents:
            a.close()


def test_ucx_nixl_options(caplog, capfd):
    """NIXL's UCX options reach our ucx backend: ucx_error_handling_mode=peer, ucx_devices and
    device_list are taken (not "ignored"); none, which this backend cannot honour, runs as peer
    with a warning saying so (engines and deployment scripts written for NIXL pass it), and a
    value NIXL does not have either is an error, not a quiet UCX without its cross-host backend."""
    import logging
    avail = nixl.available_backends()
    if "ucx" not in avail:
        pytest.skip(f"needs the ucx backend (built: {', '.join(avail)})")
    a = nixl_agent(unique("ucxopt"), nixl_agent_config(backends=[]))
    try:
        with caplog.at_level(logging.WARNING, logger="nixl"):
            a.create_backend("UCX", {"ucx_error_handling_mode": "peer", "ucx_devices": "lo"})
        assert not [r for r in caplog.records if "has no meaning" in r.getMessage()]
        opts = a.get_backend_params("UCX")
        assert opts["error_handling"] == "peer" and opts["devices"] == "lo"
    finally:
        a.close()
    c = nixl_agent(unique("ucxdl"), nixl_agent_config(backends=[]))
    try:
        c.create_backend("UCX", {"device_list": "mlx5_0, lo"})  # NIXL's form; no mlx5_0 here: a warning
        assert c.get_backend_params("UCX")["devices"] == "mlx5_0, lo"
    finally:
        c.close()
    b = nixl_agent(unique("ucxbad"), nixl_agent_config(backends=[]))
    try:
        with pytest.raises(nixl._api.nixlInvalidParamError):
            b.create_backend("UCX", {"ucx_error_handling_mode": "off"})
        assert "UCX" not in b.backends
    finally:
        b.close()
    capfd.readouterr()
    pair = [nixl_agent(unique("ucxnone"), nixl_agent_config(enable_prog_thread=False, backends=[]))
            for _ in range(2)]
    try:
        for a in pair:
            a.create_backend("UCX", {"ucx_error_handling_mode": "none"})
        assert capfd.readouterr().err.count("error_handling=none is taken as peer") == 2
        h, _bufs = _write_64k(pair[0], pair[1], 7, b"", "ucx")
        assert pair[0].get_xfer_info(h).path.startswith("ucx.")
    finally:
        for a in pair:
            a.close()


# ---- telemetry (issue 11, item 4) ----

def _shm_pair(capture, n=1 << 14):
    a = nixl_agent(unique("tela"), nixl_agent_config(enable_prog_thread=False, backends=["shm"],
                                                    capture_telemetry=capture))
    b = nixl_agent(unique("telb"), nixl_agent_config(enable_prog_thread=False, backends=["shm"]))
    src, dst = nixl.alloc_array(n), nixl.alloc_array(n)
    src[:] = np.arange(n) % 253
    a.register_memory(src)
    b.register_memory(dst)
    a.add_remote_agent(b.get_agent_metadata())
    return a, b, src, dst


def _done(a, h):
    deadline = time.monotonic() + 20
    while a.check_xfer_state(h) == "PROC":
        assert time.monotonic() < deadline


@pytest.mark.parametrize("env,capture,on", [(None, False, False), (None, True, True), ("yes", False, True),
                                            ("ENABLE", False, True), ("1", False, True), ("no", True, False),
                                            ("Disable", True, False), ("0", False, False)])
def test_telemetry_is_switched_as_nixl_switches_it(monkeypatch, env, capture, on):
    # NIXL: NIXL_TELEMETRY_ENABLE decides when set; unset, captureTelemetry decides.
    if env is None:
        monkeypatch.delenv("NIXL_TELEMETRY_ENABLE", raising=False)
    else:
        monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", env)
    a, b, src, dst = _shm_pair(capture)
    try:
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name)
        a.transfer(h)
        _done(a, h)
        assert np.array_equal(src, dst)
        if on:
            t = a.get_xfer_telemetry(h)
            assert t.totalBytes == src.nbytes and t.descCount == 1 and t.xferDuration >= t.postDuration >= 1
        else:
            with pytest.raises(nixl.nixlNoTelemetryError, match="telemetry is off"):
                a.get_xfer_telemetry(h)
        assert a.agent.telemetry is on
    finally:
        a.close()
        b.close()


def test_desc_count_is_what_nixl_counts(monkeypatch):
    """initialize_xfer: as given.  make_prepped_xfer: NIXL's merging, which joins consecutive
    indices only inside one dense run (equal lengths, back to back) of each prepared list."""
    monkeypatch.delenv("NIXL_TELEMETRY_ENABLE", raising=False)
    n = 1 << 14
    a, b, src, dst = _shm_pair(True, n)
    try:
        s, d = src.ctypes.data, dst.ctypes.data

        def run(kind, ldescs, rdescs, lidx=None, ridx=None, **kw):
            dst[:] = 0
            if kind == "one-shot":
                h = a.initialize_xfer("WRITE", a.get_xfer_descs(ldescs, "DRAM"), a.get_xfer_descs(rdescs, "DRAM"),
                                      b.name)
            else:
                lp, rp = a.prep_xfer_dlist("", ldescs, "DRAM"), a.prep_xfer_dlist(b.name, rdescs, "DRAM")
                h = a.make_prepped_xfer("WRITE", lp, lidx, rp, ridx, **kw)
            a.transfer(h)
            _done(a, h)
            pairs = list(zip(lidx, ridx)) if lidx is not None else list(enumerate(range(len(ldescs))))
            for li, ri in pairs:  # every byte of every descriptor landed
                (la, ln, _), (ra, _, _) = ldescs[li], rdescs[ri]
                assert np.array_equal(dst[ra - d:ra - d + ln], src[la - s:la - s + ln])
            return a.get_xfer_telemetry(h).descCount, a.get_xfer_info(h).descs

        pages = [(s + i * 1024, 1024, 0) for i in range(8)]
        rpages = [(d + i * 1024, 1024, 0) for i in range(8)]
        assert run("one-shot", pages, rpages)[0] == 8  # NIXL's createXferReq does not merge
        assert run("prep", pages, rpages, list(range(8)), list(range(8)))[0] == 1
        assert run("prep", pages, rpages, list(range(8)), list(range(8)), skip_desc_merge=True)[0] == 8
        assert run("prep", pages, rpages, [7, 6, 5, 4, 3, 2, 1, 0], list(range(8)))[0] == 8
        assert run("prep", pages, rpages, [0, 1, 2, 5, 6], [3, 4, 5, 0, 1])[0] == 2
        # back to back but of two lengths: two runs in NIXL, one range for libnixl's merging
        mixed = [(s, 1024, 0), (s + 1024, 2048, 0)]
        rmixed = [(d, 1024, 0), (d + 1024, 2048, 0)]
        nixl_count, ours = run("prep", mixed, rmixed, [0, 1], [0, 1])
        assert (nixl_count, ours) == (2, 1)
        # equal lengths with gaps: a sparse run, never merged by NIXL
        sparse = [(s + i * 2048, 1024, 0) for i in range(4)]
        rsparse = [(d + i * 1024, 1024, 0) for i in range(4)]
        assert run("prep", sparse, rsparse, [0, 1, 2, 3], [0, 1, 2, 3])[0] == 4
        # the list as prepared counts, not as changed afterwards
        mine = a.get_xfer_descs(pages, "DRAM")
        lp, rp = a.prep_xfer_dlist("", mine), a.prep_xfer_dlist(b.name, rpages, "DRAM")
        mine[1] = (s + 4096, 1024, 0)  # no longer back to back with descriptor 0
        dst[:] = 0
        h = a.make_prepped_xfer("WRITE", lp, [0, 1], rp, [0, 1])
        a.transfer(h)
        _done(a, h)
        assert np.array_equal(dst[:2048], src[:2048]) and not dst[2048:].any()  # the prepared ranges moved
        assert a.get_xfer_telemetry(h).descCount == 1
        # the same with a numpy index array (NIXL's engines pass those)
        assert run("prep", pages, rpages, np.arange(8, dtype=np.int32), np.arange(8, dtype=np.int32))[0] == 1
    finally:
        a.close()
        b.close()


def _read_ring(path):
    """Our own reader of NIXL's telemetry file (docs/telemetry.md, cyclic buffer version 4): a
    40-byte header (u64 write_pos, u64 read_pos, i32 version, i32 expected_version, u64 capacity,
    u64 mask), then capacity events of (u32 type, 4 bytes padding, u64 value); consumes what it reads."""
    import mmap
    import struct
    names = ["agent_tx_bytes", "agent_rx_bytes", "agent_tx_requests_num", "agent_rx_requests_num",
             "agent_memory_registered", "agent_memory_deregistered", "agent_xfer_time", "agent_xfer_post_time"]
    names += ["agent_err_" + e for e in ("not_posted", "invalid_param", "backend", "not_found", "mismatch",
                                         "not_allowed", "repost_active", "unknown", "not_supported",
                                         "remote_disconnect", "canceled", "no_telemetry")]
    names += ["agent_telemetry_events_dropped"]
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
    w, r, version, expected, cap, mask = struct.unpack_from("<QQiiQQ", m, 0)
    assert (version, expected) == (4, 4) and mask == cap - 1 and m.size() == 40 + 16 * cap
    out = []
    while r != w:
        typ, value = struct.unpack_from("<I4xQ", m, 40 + 16 * r)
        out.append((names[typ], value))
        r = (r + 1) & mask
    struct.pack_into("<Q", m, 8, r)
    m.close()
    return out


def test_telemetry_dir_gets_the_file_nixls_readers_read(tmp_path, monkeypatch):
    monkeypatch.delenv("NIXL_TELEMETRY_ENABLE", raising=False)
    monkeypatch.delenv("NIXL_TELEMETRY_EXPORTER", raising=False)
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path))
    n = 1 << 14
    a, b, src, dst = _shm_pair(True, n)
    try:
        path = tmp_path / a.name
        assert path.exists() and not (tmp_path / b.name).exists()  # b did not ask for telemetry
        assert _read_ring(path) == [("agent_memory_registered", n)]
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name)
        a.transfer(h)
        _done(a, h)
        assert np.array_equal(src, dst)
        _done(a, h)  # seen done again: no second report
        ev = _read_ring(path)
        t = a.get_xfer_telemetry(h)
        assert ev == [("agent_xfer_post_time", t.postDuration), ("agent_xfer_time", t.xferDuration),
                      ("agent_tx_bytes", n), ("agent_tx_requests_num", 1)]
        back = np.zeros(n // 2, np.uint8)
        a.register_memory(back)
        r = a.initialize_xfer("READ", a.get_xfer_descs(back), b.get_xfer_descs(dst[:n // 2]), b.name)
        a.transfer(r)
        _done(a, r)
        assert np.array_equal(back, src[:n // 2])
        with pytest.raises(nixl.nixlNotPostedError):
            a.check_xfer_state(a.initialize_xfer("READ", a.get_xfer_descs(back[:8]), b.get_xfer_descs(dst[:8]),
                                                 b.name))
        a.deregister_memory(a.get_reg_descs(back))
        names = [e[0] for e in _read_ring(path)]
        assert names == ["agent_memory_registered", "agent_xfer_post_time", "agent_xfer_time", "agent_rx_bytes",
                         "agent_rx_requests_num", "agent_err_not_posted", "agent_memory_deregistered"]
    finally:
        a.close()
        b.close()


def test_telemetry_file_full_drops_and_says_so(tmp_path, monkeypatch):
    from nixl._telemetry import read_events
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "y")
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path))
    monkeypatch.setenv("NIXL_TELEMETRY_BUFFER_SIZE", "8")
    a = nixl_agent(unique("full"), nixl_agent_config(enable_prog_thread=False, backends=["shm"]))
    try:
        bufs = [np.zeros(64 * (i + 1), np.uint8) for i in range(10)]
        for buf in bufs[:9]:
            a.register_memory(buf)
        got = read_events(str(tmp_path / a.name))  # the package's reader agrees with the test's
        assert got == [("agent_memory_registered", 64 * (i + 1)) for i in range(7)]  # 8 slots, one kept free
        a.register_memory(bufs[9])
        assert _read_ring(tmp_path / a.name) == [("agent_telemetry_events_dropped", 2),
                                                 ("agent_memory_registered", 640)]
    finally:
        a.close()


def test_telemetry_enabled_metrics_keeps_what_it_names(tmp_path, monkeypatch):
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "on")
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path))
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLED_METRICS", "agent_tx_*, agent_xfer_time")
    a, b, src, dst = _shm_pair(False)
    try:
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name)
        a.transfer(h)
        _done(a, h)
        assert np.array_equal(src, dst)
        assert [e[0] for e in _read_ring(tmp_path / a.name)] == ["agent_xfer_time", "agent_tx_bytes",
                                                                  "agent_tx_requests_num"]
        assert (tmp_path / b.name).exists()  # the variable turns it on for every agent
    finally:
        a.close()
        b.close()


# ---- NIXL 1.5's strided descriptor arrays (issue 11, item 5) ----

def test_strided_rows_stand_for_their_blocks_wherever_rows_go(pair):
    a, _ = pair
    rows = np.array([[0x10000, 64, 0, 256, 4], [0x90000, 128, 1, 128, 2]], np.uint64)
    flat = [(0x10000 + k * 256, 64, 0) for k in range(4)] + [(0x90000 + k * 128, 128, 1) for k in range(2)]
    assert list(a.get_xfer_descs(rows, "DRAM")) == flat
    assert list(a.get_xfer_descs([tuple(int(v) for v in r) for r in rows], "DRAM")) == flat
    assert list(nb.nixlXferDList(nb.DRAM_SEG, rows.astype(np.int64))) == flat
    assert [d[:3] for d in a.get_reg_descs(rows, "DRAM")] == flat
    # without a mem_type an N x 5 array is a buffer, as an N x 3 one (get_*_descs); prep_xfer_dlist
    # wants one, with NIXL's ValueError
    assert list(a.get_xfer_descs(rows)) == [(rows.ctypes.data, rows.nbytes, 0)]
    with pytest.raises(ValueError, match="mem type"):
        a.prep_xfer_dlist("", rows)
    assert a.get_xfer_descs(np.array([[0x10000, 64, 0, 64, 0]], np.uint64), "DRAM") is None  # count 0
    with pytest.raises(nixl.nixlInvalidParamError, match="count"):
        a.prep_xfer_dlist("", np.array([[0x10000, 64, 0, 64, 0]], np.uint64), "DRAM")


def test_strided_expansion_is_cheap():
    from nixl._descs import expand_strided
    rows = np.zeros((2000, 5), np.uint64)
    rows[:, 0] = np.arange(2000, dtype=np.uint64) * (1 << 20)
    rows[:, 1], rows[:, 3], rows[:, 4] = 4096, 8192, 100
    t = time.perf_counter()
    dl = nb.nixlXferDList(nb.DRAM_SEG, rows)
    assert time.perf_counter() - t < 2.0 and len(dl) == 200000
    assert dl[100 * 7 + 3] == (7 * (1 << 20) + 3 * 8192, 4096, 0)
    assert expand_strided(rows)[-1].tolist() == [1999 * (1 << 20) + 99 * 8192, 4096, 0]


def test_strided_prepped_lists_move_every_block(monkeypatch):
    monkeypatch.delenv("NIXL_TELEMETRY_ENABLE", raising=False)
    page, n_pages = 512, 32
    a, b, src, dst = _shm_pair(True, page * n_pages * 2)
    try:
        s, d = src.ctypes.data, dst.ctypes.data
        # local: every other page (a sparse run); remote: two dense runs of 16 pages back to back
        local = np.array([[s, page, 0, 2 * page, n_pages]], np.uint64)
        remote = np.array([[d, page, 0, page, 16], [d + 16 * page, page, 0, page, 16]], np.int64)
        lp = a.prep_xfer_dlist("NIXL_INIT_AGENT", local, "DRAM")
        rp = a.prep_xfer_dlist(b.name, remote, "DRAM")
        idx = np.arange(n_pages, dtype=np.int32)
        h = a.make_prepped_xfer("WRITE", lp, idx, rp, idx[::-1].copy())
        a.transfer(h)
        _done(a, h)
        for i in range(n_pages):  # local block i (page 2i of src) landed in remote block 31 - i
            r = n_pages - 1 - i
            assert np.array_equal(dst[r * page:(r + 1) * page], src[2 * i * page:(2 * i + 1) * page]), i
        assert a.get_xfer_telemetry(h).descCount == n_pages  # a sparse local run: nothing merges
        # dense on both sides: merges within a run, not across the two remote rows (NIXL's runs)
        lp2 = a.prep_xfer_dlist("", np.array([[s, page, 0, page, n_pages]], np.uint64), "DRAM")
        dst[:] = 0
        h2 = a.make_prepped_xfer("WRITE", lp2, idx, rp, idx)
        a.transfer(h2)
        _done(a, h2)
        assert np.array_equal(dst[:n_pages * page], src[:n_pages * page])
        assert a.get_xfer_telemetry(h2).descCount == 2
        # the low-level form: prepXferDlist(agent_name, mem_type, N x 5 array, backend)
        lh = a.agent.prepXferDlist(b.name, nb.DRAM_SEG, remote, [])
        assert isinstance(lh, int)
        a.agent.releasedDlistH(lh)
    finally:
        a.close()
        b.close()


# ---- estimate_xfer_cost (issue 11, item 5): our own model, NIXL's shape ----

def test_estimate_xfer_cost_follows_path_and_size(pair):
    from nixl._lowlevel import PATH_GBPS, REQUEST_US
    a, b = pair
    n = 4 << 20
    src, dst = nixl.alloc_array(n), nixl.alloc_array(n)
    src[:] = 7
    a.register_memory(src)
    b.register_memory(dst)
    a.add_remote_agent(b.get_agent_metadata())
    small = a.initialize_xfer("WRITE", a.get_xfer_descs(src[:4096]), b.get_xfer_descs(dst[:4096]), b.name)
    big = a.initialize_xfer("WRITE", a.get_xfer_descs(src), b.get_xfer_descs(dst), b.name)
    ds, ms, method = a.estimate_xfer_cost(small)
    db, mb, _ = a.estimate_xfer_cost(big)  # before any post: from the path chosen at creation
    assert method == "ANALYTICAL_BACKEND" and 0 < ms <= ds and 0 < mb <= db
    path = a.get_xfer_info(big).path
    rate = PATH_GBPS.get(path) or PATH_GBPS[path.split(".")[0]]
    assert db >= REQUEST_US + n / (rate * 1000) and db > ds
    a.transfer(big)
    while a.check_xfer_state(big) == "PROC":
        pass
    assert np.array_equal(dst, src)
    dl, ml, m = a.agent.estimateXferCost(a.agent.createXferReq("READ", a.get_xfer_descs(src),
                                                               b.get_xfer_descs(dst), b.name))
    assert (dl, ml, m) == (db, mb, nb.NIXL_COST_ANALYTICAL_BACKEND)
    a.release_xfer_handle(small)
    with pytest.raises(nixl.nixlInvalidParamError, match="released"):
        a.estimate_xfer_cost(small)


def test_desc_count_without_numpy_counts_the_same(monkeypatch):
    import sys
    from nixl._telemetry import RunCache, merged_count
    rng = np.random.default_rng(2)
    for trial in range(20):
        n = 40
        lens = rng.choice([64, 64, 64, 128], n)
        gaps = rng.choice([0, 0, 0, 64], n)
        addr = np.cumsum(lens + gaps) - (lens + gaps)
        local = [(int(a), int(ln), 0) for a, ln in zip(addr, lens)]
        remote = [(int(a) + (1 << 30), int(ln), 0) for a, ln in zip(addr, lens)]
        start = int(rng.integers(0, n - 10))
        idx = list(range(start, start + 10)) if trial % 2 else sorted(rng.choice(n, 10, replace=False).tolist())
        with_np = merged_count(RunCache(local), idx, RunCache(remote), idx)
        monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy now fails
        try:
            without = merged_count(RunCache(local), idx, RunCache(remote), idx)
        finally:
            monkeypatch.setitem(sys.modules, "numpy", np)  # the same module back, not a reload
        assert with_np == without and 1 <= with_np <= len(idx), (trial, idx)


def test_telemetry_file_that_cannot_be_made_fails_the_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "y")
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path / "missing"))
    with pytest.raises(nixl.nixlInvalidParamError, match="NIXL_TELEMETRY_DIR"):
        nixl_agent(unique("nodir"), nixl_agent_config(enable_prog_thread=False, backends=["shm"]))
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path))
    monkeypatch.setenv("NIXL_TELEMETRY_BUFFER_SIZE", "100")  # NIXL's ring needs a power of 2
    with pytest.raises(nixl.nixlInvalidParamError, match="power of 2"):
        nixl_agent(unique("odd"), nixl_agent_config(enable_prog_thread=False, backends=["shm"]))


def test_query_memory_of_files_through_posix(tmp_path):
    """NIXL's query_memory with POSIX: per descriptor None (no such file) or a dict of strings (size, mode,
    mtime), files named by a path in meta (NIXL's (0, 0, 0, path)) or by their fd; other memory types refused."""
    a = nixl_agent(unique("qm"), nixl_agent_config(enable_prog_thread=False, backends=[]))
    try:
        if "POSIX" not in a.get_plugin_list():
            pytest.skip("this libnixl has no posix backend")
        a.create_backend("POSIX")
        f = tmp_path / "kv.bin"
        f.write_bytes(b"k" * 5000)
        fd = os.open(str(f), os.O_RDONLY)
        try:
            resp = a.query_memory([(0, 0, 0, str(f)), (0, 0, 0, str(tmp_path / "missing")), (0, 0, fd, "")],
                                  "POSIX", mem_type="FILE")
        finally:
            os.close(fd)
        st = os.stat(str(f))
        assert resp[1] is None
        for r in (resp[0], resp[2]):
            assert r == {"size": "5000", "mode": str(st.st_mode), "mtime": str(int(st.st_mtime))}
        with pytest.raises(nixl.nixlNotSupportedError, match="memory query"):
            a.query_memory([(0, 0, 0, str(f))], "POSIX", mem_type="DRAM")
    finally:
        a.close()
