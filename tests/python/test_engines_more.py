"""LightLLM's and LMCache's NIXL call sequences, as their code makes them,
over two processes where the engine uses two, every byte verified.

LightLLM's NixlKVTransporter (lightllm/server/router/model_infer/mode_backend/
pd/nixl_kv_transporter.py and the prefill/decode trans processes): prefill
(this process) and decode (engine_peer_more.py) each make one agent named
"<node_id>_<tp_idx>" (prefill with a config whose capture_telemetry is set
after construction, decode with none), register their kv_move_buffer (one
5-D tensor) and prepare its pages; per task prefill connects decode from its
metadata and serialized registration (add_remote_agent, deserialize_descs,
reg_desc[0], get_xfer_descs, prep_xfer_dlist), sends the pickled task as a
notification decode has no metadata for yet, decode connects back and
answers "ready" with a page, prefill's write thread posts make_prepped_xfer
WRITE of one page (empty notification), its status thread polls, reads the
telemetry and backend, sends "done" and releases the handle; decode hashes
the page.  Then decode goes away: the next request's send_notif raises,
prefill removes it (remove_remote_agent, release_dlist_handle) and serves a
new decode, made as LightLLM's later code makes it (sync_mode STRICT).

LMCache: NixlChannel's two-stage handshake (metadata, then pickled transfer
lists prepared under the bytes names add_remote_agent returned), WRITEs and
READs by page index in both directions with handles left to the garbage
collector; its multi-agent form (backends=[], create_backend with UCX device
parameters, items sharded over the agents); the L2 NixlTransferBackend
(create_backend("UCX", {}), register_memory of one region, handles
released); and the storage agents, whose file and object backends (POSIX,
GDS, GDS_MT, HF3FS, OBJ) this libnixl does not have yet (or GDS without cuFile here): those tests skip
saying which backend is missing, after checking the error NIXL's names give.

MEM is DRAM (numpy); the VRAM runs (torch on cuda:0) skip, with the reason
printed, where torch, CUDA or a libnixl VRAM backend is missing.
"""

import base64
import os
import pickle
import queue
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from nixl._api import nixl_agent, nixl_agent_config, nixl_thread_sync_t, nixlBind

from conftest import HERE

sys.path.insert(0, HERE)
from engine_peer_more import (LightLLMTransporter, LMCacheAgent, LMCachePipe, Pages, missing, page_sha,  # noqa: E402
                              shard, zero_sha)
from test_engines import Child  # noqa: E402

MEMS = ["DRAM", "VRAM"]


def need(kind):
    why = missing(kind)
    if why:
        print(f"SKIP {kind}: {why}")
        pytest.skip(f"{kind}: {why}")


def b64(b):
    return base64.b64encode(b).decode()


def unb64(s):
    return base64.b64decode(s)


# ---------------------------------------------------------------- LightLLM

def lightllm_node_id():
    return uuid.uuid4().int  # LightLLM's pd_node_id: names are "<128-bit int>_<tp_idx>"


class LightLLMPrefill:
    """Prefill's trans process: its transporter and the threads that drive it."""

    def __init__(self, mem, shape):
        self.pages = Pages(mem, shape)
        self.tr = LightLLMTransporter(lightllm_node_id(), 0, self.pages, capture_telemetry=True)
        self.free = queue.Queue()
        for p in range(self.pages.pages):
            self.free.put(p)
        self.waiting = {}  # key -> task (request sent, waiting for "ready")
        self.inflight = {}  # key -> task (WRITE posted)
        self.lock = threading.Lock()
        self.write_q = queue.Queue()
        self.errors, self.done, self.telemetry = [], [], []
        self.running = True
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self.accept_loop, self.write_loop, self.status_loop)]
        for t in self.threads:
            t.start()

    def fail(self, where, e):
        self.errors.append(f"{where}: {type(e).__name__}: {e}")

    def accept_loop(self):  # accept_decode_write_task_loop
        while self.running:
            try:
                notifs = self.tr.nixl_agent.get_new_notifs()
                for _sender, msgs in notifs.items():
                    for msg in msgs:
                        task = pickle.loads(msg)
                        assert task["write_stage"] == "ready", task["write_stage"]
                        with self.lock:
                            mine = self.waiting.pop(task["key"])
                        mine["dst_page_index"] = task["dst_page_index"]
                        self.write_q.put(mine)
                if not notifs:
                    time.sleep(0.001)
            except Exception as e:
                self.fail("accept", e)
                time.sleep(0.01)

    def write_loop(self):  # write_peer_kv_loop -> write_blocks_paged
        while True:
            task = self.write_q.get()
            if task is None:
                return
            try:
                handle = self.tr.nixl_agent.make_prepped_xfer(
                    "WRITE", self.tr.page_local_xfer_handles, [task["src_page_index"]],
                    self.tr.remote_agents[task["decode_agent_name"]], [task["dst_page_index"]], b"")
                if not handle:
                    raise RuntimeError("make_prepped_xfer gave no handle")
                self.tr.nixl_agent.transfer(handle)
                task["xfer_handle"] = handle
                with self.lock:
                    self.inflight[task["key"]] = task
            except Exception as e:
                self.fail("write", e)

    def status_loop(self):  # update_task_status_loop, then success_loop
        agent = self.tr.nixl_agent
        while self.running:
            with self.lock:
                tasks = list(self.inflight.values())
            for task in tasks:
                try:
                    h = task["xfer_handle"]
                    state = agent.check_xfer_state(h)
                    if state == "PROC":
                        continue
                    assert state == "DONE", state
                    with self.lock:
                        del self.inflight[task["key"]]
                    telem = agent.get_xfer_telemetry(h)
                    self.telemetry.append((telem.totalBytes, telem.xferDuration, telem.postDuration,
                                           agent.query_xfer_backend(h)))
                    done = {k: v for k, v in task.items() if k != "xfer_handle"}
                    agent.send_notif(remote_agent_name=task["decode_agent_name"],
                                     notif_msg=self.tr.task_msg(done, "done", "prefill"))
                    agent.release_xfer_handle(handle=h)
                    self.free.put(task["src_page_index"])
                    self.done.append(task["key"])
                except Exception as e:
                    self.fail("status", e)
            time.sleep(0.001)

    def submit(self, decode_hello, rid, seed):
        """A chunk of a request: copy KV into a free page, connect decode if needed, send the request."""
        src = self.free.get(timeout=30)
        self.pages.fill(src, seed)
        d = decode_hello
        self.tr.connect_add_remote_agent(d["agent_name"], unb64(d["agent_metadata"]), d["num_pages"],
                                         unb64(d["page_reg_desc"]))
        key = f"{rid}_{seed}_{seed + 1}"
        task = {"key": key, "request_id": rid, "src_page_index": src, "decode_agent_name": d["agent_name"]}
        with self.lock:
            self.waiting[key] = task
        try:
            self.tr.nixl_agent.send_notif(remote_agent_name=d["agent_name"],
                                          notif_msg=self.tr.task_msg(task, "request", "prefill"))
        except BaseException:  # ready_transfer_loop: forget the task, drop the peer, fail the task
            with self.lock:
                del self.waiting[key]
            self.tr.remove_remote_agent(d["agent_name"])
            self.free.put(src)
            raise
        return key, page_sha(seed, src, self.pages.page_len)

    def stop(self):
        self.running = False
        self.write_q.put(None)
        for t in self.threads:
            t.join(timeout=10)


@pytest.mark.parametrize("mem", ["torch-cpu", "DRAM", "VRAM"])  # LightLLM hands over a torch tensor
def test_lightllm_nixl_kv_transporter_pattern(mem):
    need(mem)
    shape = (6, 8, 3, 4, 32)  # pages, page_size (tokens), layers, 2 * kv heads, head_dim; float16
    page_len = 8 * 3 * 4 * 32 * 2
    decode = Child("lightllm-decode", mem, lightllm_node_id(), 5, *shape[1:])
    assert decode.hello["page_len"] == page_len
    prefill = LightLLMPrefill(mem, shape)
    decodes = [decode]
    try:
        assert prefill.tr.nixl_agent.agent.telemetry  # capture_telemetry set on the config after construction
        assert isinstance(prefill.tr.page_reg_desc, nixlBind.nixlRegDList) and len(prefill.tr.page_reg_desc) == 1
        addr, length, dev, meta = prefill.tr.page_reg_desc[0]
        assert (addr, length, meta) == (prefill.pages.addr, 6 * page_len, b"")
        seed = 0

        def run_requests(d, n, in_flight=3):
            nonlocal seed
            pending = []
            for i in range(n):
                seed += 1
                pending.append(prefill.submit(d.hello, 4000 + seed, seed))
                if len(pending) >= in_flight:
                    key, want = pending.pop(0)
                    got = d.call(cmd="wait", key=key)
                    assert not prefill.errors, prefill.errors
                    assert got["sha"] == want, key
            for key, want in pending:
                got = d.call(cmd="wait", key=key)
                assert not prefill.errors, prefill.errors
                assert got["sha"] == want, key

        run_requests(decode, 12)
        # decode goes away: the next request's send_notif fails, LightLLM removes the peer (remove_remote_agent,
        # release_dlist_handle) and fails the task; a new decode is served
        gone = decode.hello["agent_name"]
        decode.close()
        with pytest.raises(nixlBind.nixlRemoteDisconnectError):
            prefill.submit(decode.hello, 9999, 999)
        assert gone not in prefill.tr.remote_agents and prefill.free.qsize() == shape[0]
        with pytest.raises(nixlBind.nixlNotFoundError):  # it is gone from the agent too
            prefill.tr.nixl_agent.make_connection(gone)
        decode = Child("lightllm-decode", mem, lightllm_node_id(), 4, *shape[1:], "strict")
        decodes.append(decode)
        run_requests(decode, 6, in_flight=2)
        deadline = time.monotonic() + 30
        while len(prefill.done) < 18 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not prefill.errors, prefill.errors
        assert len(prefill.done) == 18 and len(prefill.telemetry) == 18
        for total, xfer_us, post_us, backend in prefill.telemetry:
            assert total == page_len and xfer_us >= post_us >= 1 and backend == "UCX"
    finally:
        prefill.stop()
        prefill.tr.shutdown()
        prefill.tr.nixl_agent.close()
        for d in decodes:
            d.close()
    assert not prefill.errors, prefill.errors


# ---------------------------------------------------------------- LMCache: NixlChannel and the remote backend

@pytest.mark.parametrize("mem", MEMS)
@pytest.mark.parametrize("variant,agents", [("channel", 1), ("sharded", 2), ("remote", 1)])
def test_lmcache_nixl_transfer_pattern(variant, agents, mem):
    need(mem)
    num_pages, page_bytes = 24, 4096
    dev_id = 1 if (variant == "channel" and mem == "DRAM") else 0  # NixlChannel passes tp_rank as the device
    receiver = Child("lmcache-receiver", variant, mem, agents, num_pages, page_bytes, dev_id)
    pages = Pages(mem, (num_pages, page_bytes), "uint8")
    mine = [LMCacheAgent(variant, pages, dev_id) for _ in range(agents)]
    local_id, peer_id = f"sender-{uuid.uuid4().hex[:6]}", "receiver-0"
    try:
        if variant == "sharded":
            assert receiver.hello["params"] is not None and mine[0].params is not None
        if variant == "remote":  # NixlTransferBackend.connect_peer on both sides
            w = mine[0]
            r = receiver.call(cmd="connect", peer_id=local_id, peer_metadata=b64(w.agent.get_agent_metadata()),
                              peer_xfer_descs=b64(w.agent.get_serialized_descs(w.xfer_descs)))
            name = w.agent.add_remote_agent(unb64(r["peer_metadata"]))
            w.remote[peer_id] = w.agent.prep_xfer_dlist(name, w.agent.deserialize_descs(unb64(r["peer_xfer_descs"])))
        else:  # NixlChannel.lazy_init_peer_connection: metadata first, then the transfer lists
            r = receiver.call(cmd="init", local_meta_bytes_list=[b64(w.agent.get_agent_metadata()) for w in mine])
            names = [w.agent.add_remote_agent(unb64(md)) for w, md in zip(mine, r["remote_meta_bytes_list"])]
            assert all(isinstance(n, bytes) for n in names)
            rr = receiver.call(cmd="memreg", remote_agent_names=r["remote_agent_names"], local_id=local_id,
                               local_xfer_dlist_bytes_list=[b64(w.agent.get_serialized_descs(w.xfer_descs))
                                                            for w in mine])
            for w, name, dl in zip(mine, names, rr["remote_xfer_dlist_bytes_list"]):
                dlist = w.agent.deserialize_descs(unb64(dl))
                assert isinstance(dlist, nixlBind.nixlXferDList) and len(dlist) == num_pages
                w.remote[peer_id] = w.agent.prep_xfer_dlist(name, dlist)
        rng = np.random.default_rng(3 + agents)
        for rnd in range(3):
            seed = 50 + rnd
            for p in range(num_pages):
                pages.fill(p, seed)
            receiver.call(cmd="zero")
            # batched_write: our pages -> the receiver's, by page index
            n = int(rng.integers(1, num_pages))
            local_idx = [int(i) for i in rng.choice(num_pages, n, replace=False)]
            remote_idx = [int(i) for i in rng.choice(num_pages, n, replace=False)]
            for w, (li, ri) in zip(mine, shard(local_idx, remote_idx, agents)):
                if li:
                    w.xfer("WRITE", li, peer_id, ri)
            want = [zero_sha(page_bytes)] * num_pages
            for li, ri in zip(local_idx, remote_idx):
                want[ri] = page_sha(seed, li, page_bytes)
            assert receiver.call(cmd="shas")["shas"] == want, rnd
            # the receiver READs some of ours (batched_read with our id as sender_id)
            r_local = [int(i) for i in rng.choice(num_pages, 5, replace=False)]
            r_remote = [int(i) for i in rng.choice(num_pages, 5, replace=False)]
            receiver.call(cmd="read", sender_id=local_id, local_idx=r_local, remote_idx=r_remote)
            for li, ri in zip(r_local, r_remote):
                want[li] = page_sha(seed, ri, page_bytes)
            assert receiver.call(cmd="shas")["shas"] == want, rnd
            # and we READ the receiver's pages back into ours
            pages.zero()
            back = list(range(num_pages))
            for w, (li, ri) in zip(mine, shard(back, back, agents)):
                w.xfer("READ", li, peer_id, ri)
            assert [pages.sha(p) for p in range(num_pages)] == want, rnd
    finally:
        for w in mine:
            if w.agent is not None:
                w.close()
        if variant == "remote":
            del mine  # NixlTransferBackend drops its agent without closing it
        receiver.close()


@pytest.mark.parametrize("mem", ["torch-cpu", "DRAM", "VRAM"])
def test_lmcache_nixl_pipe_pattern(mem):
    """LMCache's older NixlPipe (v2 connector): sender here, receiver in engine_peer_more.py."""
    need(mem)
    chunks, chunk_bytes = 6, 8192
    receiver = Child("lmcache-pipe-receiver", mem, chunks, chunk_bytes)
    pipe = LMCachePipe("sender", mem, chunks, chunk_bytes)
    try:
        assert receiver.hello["name"].startswith("NixlRole.RECEIVER") and pipe.agent.name.startswith("NixlRole.")
        r = receiver.call(cmd="init", sender_meta=b64(pipe.agent.get_agent_metadata()))
        pipe.peer_name = pipe.agent.add_remote_agent(unb64(r["meta"])).decode("utf-8")
        remote_xfer_descs = pipe.agent.deserialize_descs(unb64(r["descs"]))
        assert isinstance(remote_xfer_descs, nixlBind.nixlXferDList) and len(remote_xfer_descs) == chunks
        pipe.local_handler = pipe.agent.prep_xfer_dlist("", pipe.local_xfer_descs)
        pipe.remote_handler = pipe.agent.prep_xfer_dlist(pipe.peer_name, remote_xfer_descs)
        for rnd, used in enumerate((chunks, 2, 5)):
            # flush(): wait for the receiver's ack, write the chunks in use, then say done with its uuid
            deadline, uid = time.monotonic() + 30, None
            while uid is None:
                assert time.monotonic() < deadline, "no ack from the receiver"
                notifs = pipe.agent.get_new_notifs()
                if pipe.peer_name not in notifs:
                    time.sleep(0.001)
                    continue
                for n in notifs[pipe.peer_name]:
                    text = n.decode("utf-8")
                    if text.startswith("ack:"):
                        uid = text[4:]
            for i in range(used):
                pipe.fill(i, 70 + rnd)
            idx = list(range(used))
            handle = pipe.agent.make_prepped_xfer("WRITE", pipe.local_handler, idx, pipe.remote_handler, idx)
            pipe.agent.transfer(handle)
            while (status := pipe.agent.check_xfer_state(handle)) != "DONE":
                assert status == "PROC", status
                time.sleep(0.001)
            pipe.agent.send_notif(pipe.peer_name, f"done:{uid}")
            got = receiver.call(cmd="wait_read")["shas"]
            assert got[:used] == [page_sha(70 + rnd, i, chunk_bytes) for i in range(used)], rnd
            if rnd == 0:
                full = got
            else:  # chunks past the ones written keep what the earlier rounds left there
                assert got[used:] == full[used:], rnd
                full = got
    finally:
        pipe.close()
        receiver.close()


# ---------------------------------------------------------------- LMCache: the NIXL storage backends

STORAGE = ["POSIX", "GDS", "GDS_MT", "HF3FS", "OBJ"]


def storage_agent(backend, params):
    """NixlStorageAgent's start-up: backends=[], the prog thread, STRICT sync, then create_backend."""
    name = "NixlAgent_" + str(uuid.uuid4())
    agent = nixl_agent(name, nixl_agent_config(backends=[], enable_prog_thread=True,
                                               sync_mode=nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT))
    if backend not in agent.get_plugin_list():
        with pytest.raises(nixlBind.nixlNotFoundError, match="not built") as e:
            agent.create_backend(backend, params)
        agent.close()
        why = f"LMCache's {backend} storage needs a libnixl storage backend not built yet ({e.value})"
        print(f"SKIP LMCache {backend}: {why}")
        pytest.skip(why)
    if backend.startswith("GDS"):
        import ctypes
        try:
            ctypes.CDLL(os.environ.get("NIXL_GDS_CUFILE_LIB") or "libcufile.so.0")
        except OSError as e:
            with pytest.raises(nixlBind.nixlNotSupportedError):  # built, but cuFile is loaded at run time
                agent.create_backend(backend, params)
            agent.close()
            why = f"LMCache's {backend} storage runs on our gds backend, which needs cuFile: {e}"
            print(f"SKIP LMCache {backend}: {why}")
            pytest.skip(why)
    agent.create_backend(backend, params)
    return name, agent


@pytest.mark.parametrize("backend", STORAGE)
def test_lmcache_nixl_storage_backend(backend, tmp_path):
    page, pool_size = 4096, 6
    params = {} if backend != "OBJ" else {"bucket": "lmcache-test"}
    name, agent = storage_agent(backend, params)
    mem = Pages("DRAM", (pool_size, page), "uint8")
    fds = []
    try:
        # init_mem_handlers: the buffer registered page by page, its pages prepared locally
        reg_list = [(a, page, 0, "") for a in range(mem.addr, mem.addr + pool_size * page, page)]
        mem_reg = agent.register_memory(reg_list, mem_type="DRAM")
        mem_xfer = agent.prep_xfer_dlist("", agent.get_xfer_descs([t[:3] for t in reg_list], mem_type="DRAM"),
                                         mem_type="DRAM")
        # init_storage_handlers_file / _object: a pool of files or keys, prepared by the agent's own name
        if backend == "OBJ":
            keys = [f"obj_{i}_{uuid.uuid4().hex[:4]}" for i in range(pool_size)]
            st_reg = agent.register_memory([(0, page, i, k) for i, k in enumerate(keys)], mem_type="OBJ")
            st_desc, st_mem = [(0, page, i) for i in range(pool_size)], "OBJ"
        else:
            for i in range(pool_size):
                fds.append(os.open(str(tmp_path / f"obj_{i}.bin"), os.O_CREAT | os.O_RDWR, 0o644))
            st_reg = agent.register_memory([(0, page, fd, "") for fd in fds], mem_type="FILE")
            st_desc, st_mem = [(0, page, fd) for fd in fds], "FILE"
        st_xfer = agent.prep_xfer_dlist(name, st_desc, mem_type=st_mem)  # the raw tuples, loopback
        for p in range(pool_size):
            mem.fill(p, 9)

        def post_blocking(h):
            state = agent.transfer(h)
            while state != "DONE" and state != "ERR":
                state = agent.check_xfer_state(h)
                time.sleep(0.001)
            assert state == "DONE"
            agent.release_xfer_handle(h)

        post_blocking(agent.make_prepped_xfer("WRITE", mem_xfer, [0, 1, 2], st_xfer, [4, 0, 2]))
        mem.zero()
        post_blocking(agent.make_prepped_xfer("READ", mem_xfer, [5, 3, 1], st_xfer, [4, 0, 2]))
        assert [mem.sha(p) for p in (5, 3, 1)] == [page_sha(9, p, page) for p in (0, 1, 2)]
        agent.release_dlist_handle(st_xfer)
        agent.release_dlist_handle(mem_xfer)
        agent.deregister_memory(st_reg)
        agent.deregister_memory(mem_reg)
    finally:
        agent.close()
        for fd in fds:
            os.close(fd)


def test_lmcache_storage_memory_forms_over_ucx():
    """The memory side of LMCache's storage agents, over UCX (the storage backends are not built): the
    buffer registered as back-to-back page-sized regions with mem_type given by position, its pages
    prepared locally and, from the raw tuples, by the agent's own name; WRITE and READ between them."""
    page, n = 4096, 8
    name = "NixlAgent_" + str(uuid.uuid4())
    agent = nixl_agent(name, nixl_agent_config(backends=[], enable_prog_thread=True,
                                               sync_mode=nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT))
    agent.create_backend("UCX", {})
    mem = Pages("DRAM", (n, page), "uint8")
    try:
        reg_list = [(a, page, 0, "") for a in range(mem.addr, mem.addr + n * page, page)]
        reg = agent.register_memory(reg_list, "DRAM")
        assert reg is not None and len(reg) == n
        xfer_desc = [t[:3] for t in reg_list]
        local = agent.prep_xfer_dlist("", agent.get_xfer_descs(xfer_desc, mem_type="DRAM"), mem_type="DRAM")
        own = agent.prep_xfer_dlist(name, xfer_desc, mem_type="DRAM")
        for p in range(4):
            mem.fill(p, 21)
        for op, li, ri in (("WRITE", [0, 1, 2, 3], [7, 5, 6, 4]), ("READ", [3, 2], [4, 7])):
            h = agent.make_prepped_xfer(op, local, li, own, ri)
            state = agent.transfer(h)
            while state != "DONE" and state != "ERR":
                state = agent.check_xfer_state(h)
            assert state == "DONE"
            agent.release_xfer_handle(h)
        want = {7: 0, 5: 1, 6: 2, 4: 3, 3: 3, 2: 0}  # page -> the page whose bytes it holds
        for p, src in want.items():
            assert mem.sha(p) == page_sha(21, src, page), p
        assert mem.sha(0) == page_sha(21, 0, page) and mem.sha(1) == page_sha(21, 1, page)
        with pytest.raises(nixlBind.nixlNotSupportedError, match="memory query"):  # nixl_desc_exists (OBJ)
            agent.query_memory([(0, 0, 0, "key")], "UCX", mem_type="OBJ")
        agent.release_dlist_handle(own)
        agent.release_dlist_handle(local)
        agent.deregister_memory(reg)
    finally:
        agent.close()
