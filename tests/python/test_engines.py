"""The engines' own call sequences over two processes, every byte verified.

SGLang's NixlKVManager: prefill (this process) and decode (engine_peer.py)
start up as SGLang's conn.py has them; per request prefill groups the page
indices into contiguous runs, makes get_xfer_descs + initialize_xfer +
transfer per chunk and for the aux data, and a transfer worker thread (which
never selects a device) polls check_xfer_state; decode parses the
"<room>_kv_<chunk>_<is_last>_<pp_rank>" / "<room>_aux" notifications.

vLLM's NixlConnector: decode (this process) registers (addr, len, dev, "")
tuples, prepares its block list and prefill's once, and per request makes a
READ with make_prepped_xfer from int32 descriptor-id arrays, polls it, reads
its telemetry (and the telemetry file), releases it; prefill (engine_peer.py)
parses the "<req_id>:<tp_ratio>" notifications.
"""

import base64
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid

import numpy as np

from nixl._api import nixl_agent, nixl_agent_config

from conftest import HERE

sys.path.insert(0, HERE)
from engine_peer import block_pattern  # noqa: E402


class Child:
    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "engine_peer.py")] + [str(a) for a in args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self.read()

    def read(self):
        line = self.proc.stdout.readline()
        assert line, f"engine_peer.py exited with {self.proc.wait()}"
        r = json.loads(line)
        assert "error" not in r, r["error"]
        return r

    def call(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        if self.proc.poll() is None:
            self.call(cmd="quit")
        assert self.proc.wait(timeout=30) == 0


def group_concurrent_contiguous(src, dst):
    """SGLang's grouping: split the index pairs where either side stops being contiguous."""
    src, dst = np.asarray(src), np.asarray(dst)
    cut = np.where((np.diff(src) != 1) | (np.diff(dst) != 1))[0] + 1
    return np.split(src, cut), np.split(dst, cut)


def test_sglang_nixl_kv_manager_pattern():
    layers, pages, item_len, aux_len = 4, 96, 2048, 64
    decode = Child("sglang-decode", layers, pages, item_len, aux_len)
    hello = decode.hello
    # prefill start-up, as decode's: an agent named by a uuid, num_threads=8, UCX by default
    agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(num_threads=8))
    pool = np.zeros((layers, pages, item_len), np.uint8)
    kv = [pool[l] for l in range(layers)]
    aux = np.zeros((pages, aux_len), np.uint8)
    gpu_id = 0
    kv_descs = agent.register_memory([(k.ctypes.data, k.nbytes, gpu_id, "") for k in kv], "DRAM")
    aux_descs = agent.register_memory([(aux.ctypes.data, aux.nbytes, 0, "")], "DRAM")
    assert kv_descs and aux_descs
    peer_name = agent.add_remote_agent(base64.b64decode(hello["agent_metadata"]))
    assert peer_name == hello["agent_name"].encode()
    dst_kv_ptrs, dst_aux_ptr, dst_gpu_id = hello["kv_ptrs"], hello["aux_ptr"], hello["gpu_id"]

    def send_kvcache(prefill_kv_indices, dst_kv_indices, notif):
        src_blocks, dst_blocks = group_concurrent_contiguous(prefill_kv_indices, dst_kv_indices)
        src_addrs, dst_addrs = [], []
        for layer in range(layers):
            src_ptr, dst_ptr = kv[layer].ctypes.data, dst_kv_ptrs[layer]
            for s_run, d_run in zip(src_blocks, dst_blocks):
                length = item_len * len(s_run)
                src_addrs.append((src_ptr + int(s_run[0]) * item_len, length, gpu_id))
                dst_addrs.append((dst_ptr + int(d_run[0]) * item_len, length, dst_gpu_id))
        src_descs = agent.get_xfer_descs(src_addrs, "DRAM")
        dst_descs = agent.get_xfer_descs(dst_addrs, "DRAM")
        handle = agent.initialize_xfer("WRITE", src_descs, dst_descs, peer_name, notif.encode("ascii"))
        assert handle
        assert agent.transfer(handle) in ("DONE", "PROC")
        return handle, len(src_addrs)

    def send_aux(src_slot, dst_slot, notif):
        src = agent.get_xfer_descs([(aux.ctypes.data + src_slot * aux_len, aux_len, 0)], "DRAM")
        dst = agent.get_xfer_descs([(dst_aux_ptr + dst_slot * aux_len, aux_len, 0)], "DRAM")
        handle = agent.initialize_xfer("WRITE", src, dst, peer_name, notif.encode("ascii"))
        agent.transfer(handle)
        return handle

    jobs, errors, sent = queue.Queue(), [], []

    def transfer_worker():  # SGLang's transfer thread: posts and polls, never selects a device
        while True:
            job = jobs.get()
            if job is None:
                return
            try:
                room, src_idx, dst_idx, aux_src, aux_dst, chunks = job
                handles = []
                for c, (s, d) in enumerate(zip(np.array_split(src_idx, chunks), np.array_split(dst_idx, chunks))):
                    h, n = send_kvcache(s, d, f"{room}_kv_{c}_{int(c == chunks - 1)}_0")
                    handles.append((h, n))
                handles.append((send_aux(aux_src, aux_dst, f"{room}_aux"), 1))
                for h, n in handles:
                    deadline = time.monotonic() + 30
                    while (state := agent.check_xfer_state(h)) == "PROC":
                        assert time.monotonic() < deadline, f"room {room} stuck"
                        time.sleep(0.0002)
                    assert state == "DONE"
                    assert agent.get_xfer_info(h).descs_in == n
                    agent.release_xfer_handle(h)
                sent.append(room)
            except Exception as e:  # the main thread reports it
                errors.append(f"room {job[0]}: {type(e).__name__}: {e}")

    worker = threading.Thread(target=transfer_worker, daemon=True)
    worker.start()
    rng = np.random.default_rng(11)
    try:
        for batch in range(4):
            rooms = []
            spare = rng.permutation(pages)  # the rooms in flight use distinct prefill pages, as SGLang's do
            for k in range(3):
                room = 1000 + batch * 3 + k
                n = int(rng.integers(1, 30))
                src_idx = np.sort(spare[k * 30:k * 30 + n])  # sorted: contiguous runs happen
                for layer in range(layers):
                    for p in src_idx:
                        kv[layer][p] = ((np.arange(item_len) * 7 + room * 3 + layer * 11 + int(p)) % 256)
                aux_src = int(spare[k * 30])
                aux[aux_src] = (np.arange(aux_len) + room) % 256
                info = decode.call(cmd="alloc", room=room, pages=n)
                dst_idx = np.array(info["dst_kv_indices"])
                chunks = 2 if n > 1 else 1
                jobs.put((room, src_idx, dst_idx, aux_src, info["dst_aux_index"], chunks))
                want = hashlib.sha256()
                for layer in range(layers):
                    want.update(kv[layer][src_idx].tobytes())
                want.update(aux[aux_src].tobytes())
                rooms.append((room, chunks, want.hexdigest()))
            for room, chunks, want in rooms:
                got = decode.call(cmd="wait", room=room, chunks=chunks)
                assert not errors, errors
                assert got["bad"] == [] and got["sha"] == want, room
        assert sorted(sent) == list(range(1000, 1012))
    finally:
        jobs.put(None)
        worker.join(timeout=30)
        agent.deregister_memory(kv_descs)
        agent.deregister_memory(aux_descs)
        agent.close()
        decode.close()
    assert not errors, errors


def test_vllm_nixl_connector_pattern(tmp_path, monkeypatch):
    from nixl._telemetry import read_events
    regions, blocks, block_len = 3, 64, 1024
    prefill = Child("vllm-prefill", regions, blocks, block_len)
    md = prefill.hello
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path))  # the decode agent writes NIXL's telemetry file
    wrapper = nixl_agent(str(uuid.uuid4()), nixl_agent_config(backends=["UCX"], capture_telemetry=True))
    region_bytes = blocks * block_len
    big = np.zeros(regions * (region_bytes + 4096), np.uint8)  # regions apart, as separate tensors are
    caches = [big[r * (region_bytes + 4096):r * (region_bytes + 4096) + region_bytes] for r in range(regions)]
    try:
        caches_data = [(c.ctypes.data, region_bytes, 0, "") for c in caches]
        reg = wrapper.register_memory(caches_data, "DRAM")
        assert reg
        local_blocks = [(c.ctypes.data + b * block_len, block_len, 0) for c in caches for b in range(blocks)]
        src_side = wrapper.prep_xfer_dlist("NIXL_INIT_AGENT", wrapper.get_xfer_descs(local_blocks, "DRAM"))
        remote_name = wrapper.add_remote_agent(base64.b64decode(md["agent_metadata"]))
        assert remote_name == md["engine_id"].encode()
        remote_blocks = [(base + b * md["block_len"], md["block_len"], 0) for base in md["kv_caches_base_addr"]
                         for b in range(md["num_blocks"])]
        dst_side = wrapper.prep_xfer_dlist(remote_name, wrapper.get_xfer_descs(remote_blocks, "DRAM"))

        def block_descs_ids(block_ids):  # vLLM's _get_block_descs_ids: region-major, int32
            ids = np.arange(regions)[:, None] * blocks + np.asarray(block_ids)[None, :]
            return ids.flatten().astype(np.int32)

        rng = np.random.default_rng(5)
        total = 0
        for req in range(8):
            seed = 100 + req
            prefill.call(cmd="fill", seed=seed)
            n = int(rng.integers(1, 24))
            remote_ids = np.sort(rng.choice(blocks, n, replace=False))
            local_ids = np.sort(rng.choice(blocks, n, replace=False))
            big[:] = 0
            req_id = f"cmpl-{req}-{uuid.uuid4().hex[:8]}"
            handle = wrapper.make_prepped_xfer("READ", src_side, block_descs_ids(local_ids), dst_side,
                                               block_descs_ids(remote_ids), notif_msg=f"{req_id}:1".encode())
            wrapper.transfer(handle)
            deadline = time.monotonic() + 30
            while (state := wrapper.check_xfer_state(handle)) == "PROC":
                assert time.monotonic() < deadline
                time.sleep(0.0002)
            assert state == "DONE"
            tel = wrapper.get_xfer_telemetry(handle)  # vLLM's NixlKVConnectorStats.record_transfer
            runs = 1 + int(np.count_nonzero((np.diff(local_ids) != 1) | (np.diff(remote_ids) != 1)))
            assert tel.totalBytes == regions * n * block_len and tel.descCount == regions * runs
            assert tel.xferDuration >= tel.postDuration >= 1 and tel.startTime > 0
            wrapper.release_xfer_handle(handle)
            total += tel.totalBytes
            for r in range(regions):
                for lb, rb in zip(local_ids, remote_ids):
                    got = caches[r][lb * block_len:(lb + 1) * block_len]
                    assert np.array_equal(got, block_pattern(r, int(rb), seed, block_len)), (req, r, lb)
            untouched = np.ones(blocks, bool)
            untouched[local_ids] = False
            for r in range(regions):
                assert not caches[r].reshape(blocks, block_len)[untouched].any()
            assert prefill.call(cmd="wait_notif", req_id=req_id)["count"] == 1
        events = read_events(str(tmp_path / wrapper.name))
        assert sum(v for e, v in events if e == "agent_rx_bytes") == total
        assert sum(v for e, v in events if e == "agent_rx_requests_num") == 8
        assert ("agent_memory_registered", regions * region_bytes) in events
        wrapper.release_dlist_handle(src_side)
        wrapper.release_dlist_handle(dst_side)
        wrapper.deregister_memory(reg)
    finally:
        wrapper.close()
        prefill.close()
