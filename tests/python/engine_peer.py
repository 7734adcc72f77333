"""The other process of test_engines.py: one side of an inference engine's KV
connector, set up and driven the way the engine's own code does, spoken to
by JSON lines on stdin/stdout (the engines use ZMQ side channels for this).

    engine_peer.py sglang-decode LAYERS PAGES ITEM_LEN AUX_LEN
    engine_peer.py vllm-prefill REGIONS BLOCKS BLOCK_LEN
    engine_peer.py lightllm-decode ... | lmcache-receiver ...   (engine_peer_more.py)

sglang-decode is SGLang's NixlKVManager on the decode side: it registers its
KV layers and aux buffer, hands its agent metadata and pointers to prefill,
allocates destination pages per request (room), and parses prefill's
notifications ("<room>_kv_<chunk>_<is_last>_<pp_rank>", "<room>_aux") to
learn when a room is complete.

vllm-prefill is vLLM's NixlConnector on the prefill side: it registers its
KV caches, prepares its block list once, hands out its metadata, and
collects the "<req_id>:<tp_ratio>" notifications decode's READs carry.
"""

import base64
import hashlib
import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))

import numpy as np  # noqa: E402

from nixl._api import nixl_agent, nixl_agent_config  # noqa: E402


def block_pattern(region, block, seed, n):
    """What vllm-prefill's block (region, block) holds after fill(seed); test_engines.py checks it."""
    return ((np.arange(n, dtype=np.int64) * 31 + region * 7919 + block * 104729 + seed * 13) % 251).astype(np.uint8)


def reply(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def sglang_decode(layers, pages, item_len, aux_len):
    # SGLang: nixl_agent(str(uuid.uuid4()), nixl_agent_config(num_threads=8)); backends default to UCX
    agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(num_threads=8))
    pool = np.zeros((layers, pages, item_len), np.uint8)  # one buffer per layer (VRAM in SGLang)
    kv = [pool[l] for l in range(layers)]
    aux = np.zeros((pages, aux_len), np.uint8)
    gpu_id = 0
    kv_descs = agent.register_memory([(k.ctypes.data, k.nbytes, gpu_id, "") for k in kv], "DRAM")
    aux_descs = agent.register_memory([(aux.ctypes.data, aux.nbytes, 0, "")], "DRAM")
    if not kv_descs or not aux_descs:
        raise RuntimeError("NIXL memory registration failed")
    reply(agent_name=agent.name, agent_metadata=base64.b64encode(agent.get_agent_metadata()).decode(),
          kv_ptrs=[k.ctypes.data for k in kv], aux_ptr=aux.ctypes.data, gpu_id=gpu_id)

    free = list(range(pages))
    rooms = {}  # room -> {"pages", "aux", "chunks", "last", "aux_done"}
    bad = []

    def poll():
        # decode's notification parsing, as NixlKVManager's
        for _peer, msgs in agent.get_new_notifs().items():
            for msg in msgs:
                parts = msg.decode("ascii").split("_")
                room = int(parts[0])
                r = rooms.get(room)
                if r is None:
                    bad.append(f"notification for unknown room {room}: {msg!r}")
                    continue
                if parts[1] == "kv":
                    chunk, is_last, pp_rank = int(parts[2]), bool(int(parts[3])), int(parts[4])
                    r["chunks"].add(chunk)
                    r["last"] = r["last"] or is_last
                    if pp_rank != 0:
                        bad.append(f"pp_rank {pp_rank} in {msg!r}")
                elif parts[1] == "aux":
                    r["aux_done"] = True
                else:
                    bad.append(f"unknown notification {msg!r}")

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["cmd"]
        if op == "alloc":  # decode picks the pages and an aux slot of a room (TransferInfo)
            n = cmd["pages"]
            got, free[:] = free[:n], free[n:]
            slot = got[0]
            rooms[cmd["room"]] = {"pages": got, "aux": slot, "chunks": set(), "last": False, "aux_done": False}
            reply(dst_kv_indices=got, dst_aux_index=slot)
        elif op == "wait":  # until the room's last KV chunk and its aux have been notified
            room = rooms[cmd["room"]]
            deadline = time.monotonic() + 30
            while not (room["last"] and room["aux_done"] and len(room["chunks"]) == cmd["chunks"]):
                if time.monotonic() > deadline:
                    reply(error=f"room {cmd['room']} incomplete: {room}")
                    break
                poll()
                time.sleep(0.0005)
            else:
                h = hashlib.sha256()
                for k in kv:
                    h.update(k[room["pages"]].tobytes())
                h.update(aux[room["aux"]].tobytes())
                reply(sha=h.hexdigest(), bad=bad)
                free.extend(room["pages"])
                pool[:, room["pages"]] = 0  # the next room's pages start clean
                aux[room["aux"]] = 0
                del rooms[cmd["room"]]
        elif op == "quit":
            agent.deregister_memory(kv_descs)
            agent.deregister_memory(aux_descs)
            agent.close()
            reply(ok=True)
            return 0
    return 1


def vllm_prefill(regions, blocks, block_len):
    # vLLM: NixlWrapper(str(uuid.uuid4()), nixl_agent_config(backends=..., capture_telemetry=True))
    agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(backends=["UCX"], capture_telemetry=True))
    # KV caches: one tensor per layer/region; a gap between them so that no two are back to back
    region_bytes = blocks * block_len
    big = np.zeros(regions * (region_bytes + 4096), np.uint8)
    caches = [big[r * (region_bytes + 4096):r * (region_bytes + 4096) + region_bytes] for r in range(regions)]
    caches_data = [(c.ctypes.data, region_bytes, 0, "") for c in caches]  # (base_addr, region_len, tp_rank, "")
    descs = agent.get_reg_descs(caches_data, "DRAM")
    agent.register_memory(descs, backends=["UCX"])
    blocks_data = [(c.ctypes.data + b * block_len, block_len, 0) for c in caches for b in range(blocks)]
    src_side = agent.prep_xfer_dlist("NIXL_INIT_AGENT", agent.get_xfer_descs(blocks_data, "DRAM"))
    reply(agent_metadata=base64.b64encode(agent.get_agent_metadata()).decode(), engine_id=agent.name,
          kv_caches_base_addr=[c.ctypes.data for c in caches], num_blocks=blocks, block_len=block_len)
    done: dict[str, int] = {}  # req_id -> notifications seen (one per READ of the request)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["cmd"]
        if op == "fill":
            for r, c in enumerate(caches):
                for b in range(blocks):
                    c[b * block_len:(b + 1) * block_len] = block_pattern(r, b, cmd["seed"], block_len)
            reply(ok=True)
        elif op == "wait_notif":  # prefill's get_finished: parse "<req_id>:<tp_ratio>"
            deadline = time.monotonic() + 30
            while done.get(cmd["req_id"], 0) < 1:
                if time.monotonic() > deadline:
                    reply(error=f"no notification for {cmd['req_id']}; have {sorted(done)}")
                    break
                for notifs in agent.get_new_notifs().values():
                    for notif in notifs:
                        req_id, tp_ratio = notif.decode("utf-8").rsplit(":", 1)
                        assert int(tp_ratio) == 1, notif
                        done[req_id] = done.get(req_id, 0) + 1
                time.sleep(0.0005)
            else:
                reply(count=done.pop(cmd["req_id"]))
        elif op == "quit":
            agent.release_dlist_handle(src_side)
            agent.deregister_memory(descs, backends=["UCX"])
            agent.close()
            reply(ok=True)
            return 0
    return 1


def main():
    role, args = sys.argv[1], [int(a) if a.lstrip("-").isdigit() else a for a in sys.argv[2:]]
    if role == "sglang-decode":
        return sglang_decode(*args)
    if role == "vllm-prefill":
        return vllm_prefill(*args)
    if role in ("lightllm-decode", "lmcache-receiver", "lmcache-pipe-receiver"):
        import engine_peer_more  # LightLLM's and LMCache's sides: engine_peer_more.py
        return engine_peer_more.main(role, args)
    raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    sys.exit(main())
