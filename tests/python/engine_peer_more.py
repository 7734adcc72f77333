"""LightLLM's and LMCache's sides for test_engines_more.py, started through
engine_peer.py (same JSON lines on stdin/stdout; the engines use their own
side channels: LightLLM's PD master and NIXL notifications, LMCache's ZMQ
sockets).

    engine_peer.py lightllm-decode MEM NODE_ID PAGES PAGE_SIZE LAYERS HEADS HEAD_DIM [none|strict]
    engine_peer.py lmcache-receiver VARIANT MEM AGENTS PAGES PAGE_BYTES DEV_ID
    engine_peer.py lmcache-pipe-receiver MEM CHUNKS CHUNK_BYTES

lightllm-decode is LightLLM's decode node (NixlKVTransporter with its
decode_trans_process threads): one agent named "<node_id>_<tp_idx>" made
with no config, its paged kv_move_buffer registered as one tensor, its
pages prepared once; a thread takes prefill's pickled task notifications,
connects prefill from the metadata and serialized descriptors they carry,
picks a destination page and answers "ready" with send_notif; on "done" it
reads the page (the bytes test_engines_more.py checks) and frees it.

lmcache-receiver is the receiving side of LMCache's NIXL transfer code:
VARIANT "channel" is NixlChannel (transfer_channel/nixl_channel.py: one
agent per side, backends through nixl_agent_config, get_reg_descs then
register_memory, handles never released), "sharded" is its multi-agent form
(backends=[] then create_backend("UCX", params), AGENTS agents over one
buffer), "remote" is the L2 remote-transfer NixlTransferBackend
(backends=[] then create_backend("UCX", {}), register_memory of one region,
handles released).  It answers the two-stage handshake (metadata, then
serialized transfer descriptors), READs from the test's buffer on request,
and reports a hash of every page so that every byte is checked.

lmcache-pipe-receiver is the receiver of LMCache's older NixlPipe
(connector/nixl_connector_v2.py): see LMCachePipe.

MEM is a Pages kind: DRAM (numpy), torch-cpu (a torch tensor in host
memory) or VRAM (torch on cuda:0).
"""

import base64
import hashlib
import json
import pickle
import sys
import threading
import time
import uuid

import numpy as np

from nixl._api import nixlBind, nixl_agent, nixl_agent_config, nixl_thread_sync_t  # noqa: F401 (as the engines)


def reply(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def unb64(s: str) -> bytes:
    return base64.b64decode(s)


def pattern(seed: int, page: int, n: int) -> np.ndarray:
    """The bytes a page holds after it was filled for (seed, page)."""
    return ((np.arange(n, dtype=np.int64) * 131 + page * 7919 + seed * 104729 + 17) % 253).astype(np.uint8)


def missing(kind: str) -> str:
    """Why a Pages kind cannot be used here ("" when it can): torch, and for VRAM CUDA and a libnixl
    backend for VRAM."""
    if kind == "DRAM":
        return ""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if kind == "torch-cpu":
        return ""
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    import nixl
    if not any("VRAM" in b["mem_types"] for b in nixl.available_backends().values()):
        return "this libnixl has no backend for VRAM"
    return ""


class Pages:
    """A buffer of equal pages, viewed page by page as bytes: kind "DRAM" is a numpy array, "torch-cpu" a
    torch tensor in host memory (what LightLLM hands over), "VRAM" a torch tensor on cuda:0."""

    def __init__(self, kind: str, shape: tuple, dtype: str = "float16"):
        self.kind = kind
        self.mem = "VRAM" if kind == "VRAM" else "DRAM"  # the memory type of the NIXL lists
        if kind == "DRAM":
            self.torch = None
            self.buf = np.zeros(shape, dtype)
            self.addr = self.buf.ctypes.data
            self.page_len = self.buf[0].nbytes
        else:
            import torch
            self.torch = torch
            self.buf = torch.zeros(shape, dtype=getattr(torch, dtype), device="cuda:0" if kind == "VRAM" else "cpu")
            self.addr = self.buf.data_ptr()
            self.page_len = self.buf[0].numel() * self.buf.element_size()
        self.pages = shape[0]

    def _sync(self) -> None:
        if self.kind == "VRAM":
            self.torch.cuda.synchronize()

    def _bytes(self, page: int):
        p = self.buf[page]
        if self.torch is None:
            return p.view(np.uint8).reshape(-1)
        return p.view(self.torch.uint8).reshape(-1)

    def fill(self, page: int, seed: int) -> None:
        pat = pattern(seed, page, self.page_len)
        if self.torch is None:
            self._bytes(page)[:] = pat
        else:
            self._bytes(page).copy_(self.torch.from_numpy(pat).to(self.buf.device))
        self._sync()

    def zero(self, page: int = None) -> None:
        if page is None:
            self.buf[:] = 0
        else:
            self.buf[page] = 0
        self._sync()

    def get(self, page: int) -> bytes:
        self._sync()
        if self.torch is None:
            return self._bytes(page).tobytes()
        return self._bytes(page).cpu().numpy().tobytes()

    def sha(self, page: int) -> str:
        return hashlib.sha256(self.get(page)).hexdigest()


def page_sha(seed: int, page: int, n: int) -> str:
    return hashlib.sha256(pattern(seed, page, n).tobytes()).hexdigest()


ZERO_SHA = {}


def zero_sha(n: int) -> str:
    if n not in ZERO_SHA:
        ZERO_SHA[n] = hashlib.sha256(bytes(n)).hexdigest()
    return ZERO_SHA[n]


# ---- LightLLM ----

class LightLLMTransporter:
    """LightLLM's NixlKVTransporter: one agent, the paged kv_move_buffer, prepared page lists per peer."""

    def __init__(self, node_id: int, tp_idx: int, pages: Pages, capture_telemetry: bool, strict: bool = False):
        self.node_id, self.tp_idx = node_id, tp_idx
        self.capture_telemetry = capture_telemetry
        conf = None
        if strict:  # LightLLM's later form (its thread-safety work): STRICT sync, telemetry set after
            conf = nixl_agent_config(sync_mode=nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT)
        if capture_telemetry:  # LIGHTLLM_NIXL_CAPTURE_TELEMETRY: the attribute is set after construction
            conf = conf or nixl_agent_config()
            conf.capture_telemetry = True
        self.nixl_agent = nixl_agent(self.agent_name, conf)
        self.pages = pages
        self.num_pages = pages.pages
        self.page_len = pages.page_len
        self.page_reg_desc = self.nixl_agent.register_memory(pages.buf)  # the tensor itself
        if not self.page_reg_desc:
            raise RuntimeError("register_memory of the kv_move_buffer gave no list")
        self.page_local_xfer_handles = self.create_paged_xfer_handles(self.page_reg_desc, self.num_pages)
        self.remote_agents = {}  # name -> prepared page list of that peer
        self.lock = threading.Lock()

    @property
    def agent_name(self) -> str:
        return f"{self.node_id}_{self.tp_idx}"

    @property
    def agent_metadata(self) -> bytes:
        return self.nixl_agent.get_agent_metadata()

    @property
    def local_page_mem_desc(self) -> bytes:
        return self.nixl_agent.get_serialized_descs(self.page_reg_desc)

    def create_paged_xfer_handles(self, reg_desc, page_num: int, agent_name: str = ""):
        base_addr, _, device_id, _ = reg_desc[0]  # a registration descriptor is a 4-tuple
        pages_data = [(base_addr + i * self.page_len, self.page_len, device_id) for i in range(page_num)]
        descs = self.nixl_agent.get_xfer_descs(pages_data, self.pages.mem)  # LightLLM passes "VRAM"
        return self.nixl_agent.prep_xfer_dlist(agent_name, descs, self.pages.mem)

    def connect_add_remote_agent(self, name: str, metadata: bytes, num_pages: int, page_reg_desc: bytes) -> None:
        with self.lock:
            if name in self.remote_agents:
                return
            peer_name = self.nixl_agent.add_remote_agent(metadata)
            if isinstance(peer_name, bytes):
                peer_name = peer_name.decode()
            assert peer_name == name, f"peer name {peer_name} does not match remote name {name}"
            page_mem_desc = self.nixl_agent.deserialize_descs(page_reg_desc)
            self.remote_agents[name] = self.create_paged_xfer_handles(page_mem_desc, num_pages, agent_name=peer_name)

    def remove_remote_agent(self, name: str) -> None:
        with self.lock:
            handles = self.remote_agents.pop(name, None)
        if handles is not None:
            self.nixl_agent.remove_remote_agent(name)
            self.nixl_agent.release_dlist_handle(handles)

    def task_msg(self, task: dict, stage: str, side: str) -> bytes:
        """A pickled task as LightLLM sends it: this side's name, metadata, page count and serialized pages."""
        t = dict(task, write_stage=stage)
        t[f"{side}_agent_name"] = self.agent_name
        t[f"{side}_agent_metadata"] = self.agent_metadata
        t[f"{side}_num_pages"] = self.num_pages
        t[f"{side}_page_reg_desc"] = self.local_page_mem_desc
        return pickle.dumps(t)

    def shutdown(self) -> None:
        self.nixl_agent.deregister_memory(self.page_reg_desc)
        self.nixl_agent.release_dlist_handle(self.page_local_xfer_handles)
        for name in list(self.remote_agents):
            self.remove_remote_agent(name)


def lightllm_decode(mem, node_id, num_pages, page_size, layers, heads, head_dim, config="none"):
    pages = Pages(mem, (num_pages, page_size, layers, heads, head_dim))
    tr = LightLLMTransporter(node_id, 0, pages, capture_telemetry=False, strict=config == "strict")
    reply(agent_name=tr.agent_name, agent_metadata=b64(tr.agent_metadata), num_pages=tr.num_pages,
          page_reg_desc=b64(tr.local_page_mem_desc), page_len=tr.page_len)
    free = list(range(num_pages))
    waiting = {}  # key -> dst page
    results = {}  # key -> sha of the page when prefill said "done"
    errors = []
    state_lock = threading.Lock()
    running = [True]

    def accept_peer_task_loop():  # decode_trans_process: notifications from prefill
        while running[0]:
            try:
                notifs = tr.nixl_agent.get_new_notifs()
                for _sender, msgs in notifs.items():
                    for msg in msgs:
                        task = pickle.loads(msg)
                        key = task["key"]
                        if task["write_stage"] == "request":
                            tr.connect_add_remote_agent(task["prefill_agent_name"], task["prefill_agent_metadata"],
                                                        task["prefill_num_pages"], task["prefill_page_reg_desc"])
                            with state_lock:
                                if not free:
                                    raise RuntimeError(f"no free page for {key}")
                                dst = free.pop(0)
                                waiting[key] = dst
                            task["dst_page_index"] = dst
                            tr.nixl_agent.send_notif(remote_agent_name=task["prefill_agent_name"],
                                                     notif_msg=tr.task_msg(task, "ready", "decode"))
                        elif task["write_stage"] == "done":
                            with state_lock:
                                dst = waiting.pop(key)
                            sha = pages.sha(dst)
                            pages.zero(dst)  # the next task's page starts clean
                            with state_lock:
                                results[key] = sha
                                free.append(dst)
                        else:
                            errors.append(f"unknown stage in {task}")
                if not notifs:
                    time.sleep(0.001)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.01)

    t = threading.Thread(target=accept_peer_task_loop, daemon=True)
    t.start()
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "wait":
            deadline = time.monotonic() + 30
            while cmd["key"] not in results and not errors and time.monotonic() < deadline:
                time.sleep(0.001)
            if errors or cmd["key"] not in results:
                reply(error=f"{cmd['key']}: {errors or 'no done notification'}")
            else:
                reply(sha=results.pop(cmd["key"]), free=len(free))
        elif cmd["cmd"] == "quit":
            running[0] = False
            t.join(timeout=10)
            tr.shutdown()  # LightLLM's shutdown; the agent goes with the process
            reply(ok=True, errors=errors)
            return 0
    return 1


# ---- LMCache ----

class LMCacheAgent:
    """One of LMCache's NIXL agents over one buffer of pages, made as VARIANT makes it."""

    def __init__(self, variant: str, pages: Pages, dev_id: int):
        self.variant = variant
        self.pages = pages
        mem = "cpu" if pages.mem == "DRAM" else ("VRAM" if variant == "channel" else "cuda")
        ptr, size, page = pages.addr, pages.pages * pages.page_len, pages.page_len
        if variant == "channel":  # NixlAgentWrapper
            self.agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(backends=["UCX"]))
            self.reg_descs = self.agent.get_reg_descs([(ptr, size, dev_id, "")], mem_type=mem)
            self.agent.register_memory(self.reg_descs)
        elif variant == "sharded":  # NixlAgentWrapper with backend_params (UCX device pinning)
            self.agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(backends=[]))
            self.agent.create_backend("UCX", {"ucx_devices": "mlx5_0:1", "device_list": "mlx5_0"})
            self.params = self.agent.get_backend_params("UCX")
            self.reg_descs = self.agent.get_reg_descs([(ptr, size, dev_id, "")], mem_type=mem)
            self.agent.register_memory(self.reg_descs)
        else:  # "remote": NixlTransferBackend.register_local_memory
            mem = "DRAM" if pages.mem == "DRAM" else "VRAM"
            self.agent = nixl_agent(f"NixlRTA_{uuid.uuid4().hex[:8]}", nixl_agent_config(backends=[]))
            self.agent.create_backend("UCX", {})
            self.reg_descs = self.agent.register_memory([(ptr, size, dev_id, "")], mem_type=mem)
        if not self.reg_descs:
            raise RuntimeError(f"{variant}: registration gave no list")
        self.xfer_descs = self.agent.get_xfer_descs([(a, page, dev_id) for a in range(ptr, ptr + size, page)],
                                                    mem_type=mem)
        self.xfer_handler = self.agent.prep_xfer_dlist("", self.xfer_descs, mem_type=mem)
        self.remote = {}  # peer id -> prepared list of that peer's pages

    def xfer(self, op: str, local_idx: list, peer_id: str, remote_idx: list) -> None:
        """batched_write / batched_read (or the remote backend's write/read + poll + release)."""
        handle = self.agent.make_prepped_xfer(op, self.xfer_handler, local_idx, self.remote[peer_id], remote_idx)
        self.agent.transfer(handle)
        deadline = time.monotonic() + 30
        while True:
            status = self.agent.check_xfer_state(handle)
            if status == "ERR":
                raise RuntimeError("Failed to transfer objects to remote peer")
            if status == "DONE":
                break
            assert time.monotonic() < deadline, f"{op} stuck in {status}"
            time.sleep(0.001)
        if self.variant == "remote":
            self.agent.release_xfer_handle(handle)
        # NixlChannel leaves its handles to the garbage collector

    def close(self) -> None:
        if self.variant == "remote":  # close(): deregister, then drop the agent
            self.agent.deregister_memory(self.reg_descs)
            self.agent = None
            return
        self.agent.deregister_memory(self.reg_descs)
        self.agent.release_dlist_handle(self.xfer_handler)
        for h in self.remote.values():
            self.agent.release_dlist_handle(h)


def shard(local_idx: list, remote_idx: list, n: int) -> list:
    """NixlChannel's sharding over its agents: item i goes to agent i % n."""
    return [(local_idx[a::n], remote_idx[a::n]) for a in range(n)]


def lmcache_receiver(variant, mem, agents, num_pages, page_bytes, dev_id):
    pages = Pages(mem, (num_pages, page_bytes), "uint8")
    wrappers = [LMCacheAgent(variant, pages, dev_id) for _ in range(agents)]
    reply(agents=len(wrappers), params=getattr(wrappers[0], "params", None))
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["cmd"]
        try:
            if op == "init":  # NixlInitRequest: load the sender's agents, answer with ours
                names = [w.agent.add_remote_agent(unb64(md)) for w, md in zip(wrappers, cmd["local_meta_bytes_list"])]
                assert all(isinstance(n, bytes) for n in names), names  # LMCache's msgspec field is bytes
                reply(remote_agent_names=[b64(n) for n in names],
                      remote_meta_bytes_list=[b64(w.agent.get_agent_metadata()) for w in wrappers])
            elif op == "memreg":  # NixlMemRegRequest: prepare the sender's pages under the name we returned
                for w, name, dl in zip(wrappers, cmd["remote_agent_names"], cmd["local_xfer_dlist_bytes_list"]):
                    dlist = w.agent.deserialize_descs(unb64(dl))
                    w.remote[cmd["local_id"]] = w.agent.prep_xfer_dlist(unb64(name), dlist)
                reply(remote_xfer_dlist_bytes_list=[b64(w.agent.get_serialized_descs(w.xfer_descs)) for w in wrappers])
            elif op == "connect":  # NixlTransferBackend.connect_peer
                w = wrappers[0]
                name = w.agent.add_remote_agent(unb64(cmd["peer_metadata"]))
                w.remote[cmd["peer_id"]] = w.agent.prep_xfer_dlist(name, w.agent.deserialize_descs(
                    unb64(cmd["peer_xfer_descs"])))
                reply(peer_metadata=b64(w.agent.get_agent_metadata()),
                      peer_xfer_descs=b64(w.agent.get_serialized_descs(w.xfer_descs)))
            elif op == "zero":
                pages.zero()
                reply(ok=True)
            elif op == "fill":
                for p in range(num_pages):
                    pages.fill(p, cmd["seed"])
                reply(ok=True)
            elif op == "read":  # the receiver READs from the sender (batched_read / read)
                for w, (li, ri) in zip(wrappers, shard(cmd["local_idx"], cmd["remote_idx"], len(wrappers))):
                    if li:
                        w.xfer("READ", li, cmd["sender_id"], ri)
                reply(ok=True)
            elif op == "shas":
                reply(shas=[pages.sha(p) for p in range(num_pages)])
            elif op == "quit":
                for w in wrappers:
                    w.close()
                reply(ok=True)
                return 0
        except Exception as e:
            reply(error=f"{op}: {type(e).__name__}: {e}")
    return 1


class LMCachePipe:
    """LMCache's older NixlPipe (storage_backend/connector/nixl_connector_v2.py): an agent named
    str(role) + str(device), its buffer registered as the tuple of chunks torch.split gives, the
    registration's trim() prepared, metadata and the serialized trimmed list over the side channel, names
    decoded from bytes, acks and "done" as str notifications, check_remote_xfer_done on the receiver."""

    def __init__(self, role: str, kind: str, chunks: int, chunk_bytes: int):
        self.kind = kind
        self.chunk_bytes = chunk_bytes
        device = "cpu" if kind != "VRAM" else "cuda:0"
        if kind == "DRAM":
            self.buffer = np.zeros(chunks * chunk_bytes, np.uint8)
            self.parts = tuple(np.split(self.buffer, chunks))
        else:
            import torch
            self.torch = torch
            self.buffer = torch.zeros(chunks * chunk_bytes, dtype=torch.uint8, device=device)
            self.parts = torch.split(self.buffer, chunk_bytes, dim=0)  # a tuple of tensors
        self.agent = nixl_agent(f"NixlRole.{role.upper()}{device}")
        self.reg_descs = self.agent.register_memory(self.parts)
        if not self.reg_descs:
            raise RuntimeError("register_memory of the split buffer gave no list")
        self.local_xfer_descs = self.reg_descs.trim()
        self.local_handler = self.remote_handler = None
        self.peer_name = None

    def chunk(self, i: int) -> bytes:
        if self.kind == "DRAM":
            return self.parts[i].tobytes()
        if self.kind == "VRAM":
            self.torch.cuda.synchronize()
        return self.parts[i].cpu().numpy().tobytes()

    def fill(self, i: int, seed: int) -> None:
        pat = pattern(seed, i, self.chunk_bytes)
        if self.kind == "DRAM":
            self.parts[i][:] = pat
        else:
            self.parts[i].copy_(self.torch.from_numpy(pat).to(self.buffer.device))
            if self.kind == "VRAM":
                self.torch.cuda.synchronize()

    def close(self) -> None:
        self.agent.deregister_memory(self.reg_descs)
        self.agent.remove_remote_agent(self.peer_name)
        for h in (self.local_handler, self.remote_handler):
            if h is not None:
                self.agent.release_dlist_handle(h)


def lmcache_pipe_receiver(kind, chunks, chunk_bytes):
    pipe = LMCachePipe("receiver", kind, chunks, chunk_bytes)
    reply(name=pipe.agent.name)
    state = {"uuid": None}

    def ack_receive():
        state["uuid"] = uuid.uuid4().hex
        pipe.agent.send_notif(pipe.peer_name, f"ack:{state['uuid']}")  # a str notification

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["cmd"]
        try:
            if op == "init":
                pipe.peer_name = pipe.agent.add_remote_agent(unb64(cmd["sender_meta"])).decode("utf-8")
                reply(meta=b64(pipe.agent.get_agent_metadata()),
                      descs=b64(pipe.agent.get_serialized_descs(pipe.local_xfer_descs)))
                ack_receive()
            elif op == "wait_read":
                message = f"done:{state['uuid']}"
                deadline = time.monotonic() + 30
                while not pipe.agent.check_remote_xfer_done(pipe.peer_name, message.encode("utf-8")):
                    assert time.monotonic() < deadline, f"no {message!r} from {pipe.peer_name}"
                    time.sleep(0.001)
                shas = [hashlib.sha256(pipe.chunk(i)).hexdigest() for i in range(chunks)]
                ack_receive()
                reply(shas=shas)
            elif op == "quit":
                pipe.close()
                reply(ok=True)
                return 0
        except Exception as e:
            reply(error=f"{op}: {type(e).__name__}: {e}")
    return 1


def main(role, args):
    if role == "lightllm-decode":
        return lightllm_decode(*args)
    if role == "lmcache-pipe-receiver":
        return lmcache_pipe_receiver(*args)
    return lmcache_receiver(*args)
