#!/usr/bin/env python3
"""kv_connector.py - NIXL's Python API used the way a disaggregated-serving KV
connector (SGLang, vLLM, Dynamo) uses it: prefill pushes KV pages into decode.

    PYTHONPATH=bindings/python python3 examples/python/kv_connector.py [--requests 64] [--layers 8] ...

Two processes on this host, one agent each, KV caches in DRAM:

  decode  (spawned by this script) has a metadata listener and a KV cache of
          --layers layers x --pages pages x --page-bytes, registered layer by
          layer.  It is the scheduler: for each request it picks free
          destination pages and sends (request id, page ids) to prefill over a
          side channel (here a pipe; vLLM uses ZMQ, SGLang an HTTP bootstrap).
          It waits on notifications (get_new_notifs), and when "req-<id>"
          arrives it verifies every byte of that request's pages.
  prefill (this process) fetches decode's metadata from the listener,
          prepares both sides' page lists once (prep_xfer_dlist), "computes"
          each request's KV into free source pages and hands the job to a
          transfer worker thread.  The worker (which never selects a device)
          makes each request from index arrays (make_prepped_xfer: every layer
          of every page, with the notification), posts it, keeps several in
          flight and polls them with check_xfer_state.

Exit status 0 when decode saw every byte right, 1 otherwise.  The same flow
runs on GPUs in kv_connector_gpu.py (torch tensors instead of numpy arrays).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

import nixl
from nixl._api import nixl_agent, nixl_agent_config

PREFILL, DECODE = "kv-prefill", "kv-decode"


def page_seeds(req: int, layer: int, npages: int) -> np.ndarray:
    """What distinguishes page j of layer `layer` of request `req` (so misplaced bytes are caught)."""
    j = np.arange(npages, dtype=np.int64)
    return (req * 7919 + layer * 104729 + j * 31) % 251


class DramPool:
    """A KV cache in host memory: one (pages x page_bytes) uint8 array per layer.

    nixl.alloc_array puts it in shared memory, so the peer on this host copies
    with memcpy (path shm.map); plain numpy arrays work too (path shm.cma).
    """

    mem_type = "DRAM"

    def __init__(self, layers: int, pages: int, page_bytes: int, device: int = 0):
        self.page_bytes = page_bytes
        self.dev = 0
        self.layers = [nixl.alloc_array((pages, page_bytes)) for _ in range(layers)]
        self._ramp = np.arange(page_bytes, dtype=np.int64)

    def buffers(self) -> list:
        return self.layers

    def base(self, layer: int) -> int:
        return self.layers[layer].ctypes.data

    def _pattern(self, seeds: np.ndarray) -> np.ndarray:
        return ((self._ramp[None, :] + seeds[:, None]) % 251).astype(np.uint8)

    def fill(self, layer: int, pages: np.ndarray, seeds: np.ndarray) -> None:
        self.layers[layer][pages] = self._pattern(seeds)

    def check(self, layer: int, pages: np.ndarray, seeds: np.ndarray) -> bool:
        return bool((self.layers[layer][pages] == self._pattern(seeds)).all())

    def sync(self) -> None:
        pass


def page_rows(pool_bases: list[int], pages: int, page_bytes: int, dev: int) -> np.ndarray:
    """N x 3 (addr, len, dev) rows, page p of layer l at index l * pages + p."""
    rows = np.empty((len(pool_bases) * pages, 3), dtype=np.uint64)
    for layer, base in enumerate(pool_bases):
        sl = slice(layer * pages, (layer + 1) * pages)
        rows[sl, 0] = base + np.arange(pages, dtype=np.uint64) * page_bytes
        rows[sl, 1] = page_bytes
        rows[sl, 2] = dev
    return rows


# ---------------------------------------------------------------- decode ----

def send(msg: dict) -> None:
    print(json.dumps(msg), flush=True)


def run_decode(args: argparse.Namespace, pool_cls: Any) -> int:
    pool = pool_cls(args.layers, args.pages, args.page_bytes, device=args.decode_device)
    agent = nixl_agent(DECODE, nixl_agent_config(enable_listen_thread=True, backends=["UCX"]))
    agent.register_memory(pool.buffers())
    send({"agent": DECODE, "port": agent.listen_port, "bases": [pool.base(i) for i in range(args.layers)],
          "pages": args.pages, "page_bytes": args.page_bytes, "mem_type": pool.mem_type, "dev": pool.dev})
    if sys.stdin.readline().strip() != "ready":
        return 1
    rng = np.random.default_rng(1)
    free = list(range(args.pages))
    outstanding: dict[str, tuple[int, np.ndarray]] = {}
    verified = bad = 0
    next_req = 0
    t0 = time.perf_counter()
    while next_req < args.requests or outstanding:
        # Schedule while there is room in the window and free pages.
        while next_req < args.requests and len(outstanding) < args.window:
            n = int(rng.integers(args.min_pages, args.max_pages + 1))
            if n > len(free):
                break
            pick = rng.choice(len(free), size=n, replace=False)
            dst = np.array([free[i] for i in pick], dtype=np.int64)
            for p in sorted(pick, reverse=True):
                free.pop(p)
            outstanding[f"req-{next_req}"] = (next_req, dst)
            send({"req": next_req, "dst": dst.tolist()})
            next_req += 1
        # A notification means every byte of its request has landed.
        for sender, msgs in agent.get_new_notifs().items():
            for m in msgs:
                tag = m.decode()
                if sender != PREFILL or tag not in outstanding:
                    print(f"decode: unexpected notification {tag!r} from {sender}", file=sys.stderr)
                    bad += 1
                    continue
                req, dst = outstanding.pop(tag)
                pool.sync()
                ok = all(pool.check(layer, dst, page_seeds(req, layer, len(dst))) for layer in range(args.layers))
                verified += ok
                bad += not ok
                if not ok:
                    print(f"decode: request {req}: pages differ", file=sys.stderr)
                free.extend(dst.tolist())
        time.sleep(0.0002)
    send({"done": True, "verified": verified, "bad": bad, "seconds": time.perf_counter() - t0})
    sys.stdin.readline()  # "bye": prefill has nothing in flight any more
    agent.close()
    return 0 if bad == 0 else 1


# --------------------------------------------------------------- prefill ----

class Job:
    __slots__ = ("req", "src", "lidx", "ridx", "tag", "handle")

    def __init__(self, req: int, src: np.ndarray, lidx: np.ndarray, ridx: np.ndarray):
        self.req, self.src, self.lidx, self.ridx = req, src, lidx, ridx
        self.tag = f"req-{req}".encode()
        self.handle = None


def transfer_worker(agent: nixl_agent, lh: Any, rh: Any, jobs: "queue.Queue", done: "queue.Queue",
                    report: dict) -> None:
    """Posts WRITEs and polls them; never touches device selection (the calling thread has none)."""
    inflight: list[Job] = []
    stopping = False
    try:
        while inflight or not stopping:
            try:
                while True:  # take every queued job; block only when idle
                    job = jobs.get(block=not inflight and not stopping, timeout=None)
                    if job is None:
                        stopping = True
                        break
                    job.handle = agent.make_prepped_xfer("WRITE", lh, job.lidx, rh, job.ridx, notif_msg=job.tag)
                    agent.transfer(job.handle)
                    inflight.append(job)
                    if jobs.empty():
                        break
            except queue.Empty:
                pass
            still = []
            for job in inflight:
                if agent.check_xfer_state(job.handle) == "PROC":
                    still.append(job)
                    continue
                info = agent.get_xfer_info(job.handle)
                report["paths"][info.path] = report["paths"].get(info.path, 0) + 1
                report["descs_in"] += info.descs_in
                report["descs"] += info.descs
                report["bytes"] += info.bytes
                report["xfer_us"].append(info.xfer_ns / 1000)
                agent.release_xfer_handle(job.handle)
                done.put(job)
            inflight = still
            if inflight:
                time.sleep(0.0001)
    except nixl.nixlError as e:
        report["error"] = f"{type(e).__name__}: {e}"
        done.put(None)


def run_prefill(args: argparse.Namespace, pool_cls: Any) -> int:
    script = os.path.abspath(sys.argv[0])
    child_args = [sys.executable, script, "--role", "decode"] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k != "role"]
    dec = subprocess.Popen(child_args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        return prefill(args, pool_cls, dec)
    finally:
        if dec.poll() is None:
            try:
                dec.stdin.write("bye\n")
                dec.stdin.flush()
            except OSError:
                pass
            try:
                dec.wait(timeout=30)
            except subprocess.TimeoutExpired:
                dec.kill()


def prefill(args: argparse.Namespace, pool_cls: Any, dec: subprocess.Popen) -> int:
    line = dec.stdout.readline()
    if not line:
        print("prefill: decode exited before the handshake", file=sys.stderr)
        return 1
    hs = json.loads(line)
    pool = pool_cls(args.layers, args.src_pages, args.page_bytes, device=args.prefill_device)
    agent = nixl_agent(PREFILL, nixl_agent_config(backends=["UCX"]))
    agent.register_memory(pool.buffers())
    agent.fetch_remote_metadata(hs["agent"], "127.0.0.1", hs["port"])
    agent.send_local_metadata("127.0.0.1", hs["port"])  # decode may notify us back

    # Both sides' page lists, prepared once; requests index into them.
    lh = agent.prep_xfer_dlist("NIXL_INIT_AGENT",
                               page_rows([pool.base(i) for i in range(args.layers)], args.src_pages,
                                         args.page_bytes, pool.dev), pool.mem_type)
    rh = agent.prep_xfer_dlist(hs["agent"], page_rows(hs["bases"], hs["pages"], hs["page_bytes"], hs["dev"]),
                               hs["mem_type"])

    jobs: "queue.Queue" = queue.Queue()
    done: "queue.Queue" = queue.Queue()
    report: dict = {"paths": {}, "descs_in": 0, "descs": 0, "bytes": 0, "xfer_us": []}
    worker = threading.Thread(target=transfer_worker, args=(agent, lh, rh, jobs, done, report),
                              name="transfer-worker", daemon=True)
    worker.start()
    dec.stdin.write("ready\n")
    dec.stdin.flush()

    free = list(range(args.src_pages))
    layer_off = np.arange(args.layers, dtype=np.int64)
    result: dict = {}
    t0 = time.perf_counter()
    for line in dec.stdout:
        msg = json.loads(line)
        if msg.get("done"):
            result = msg
            break
        dst = np.array(msg["dst"], dtype=np.int64)
        while len(free) < len(dst):  # wait for the worker to give pages back
            job = done.get()
            if job is None:
                break
            free.extend(job.src.tolist())
        if "error" in report:
            break
        src = np.array([free.pop() for _ in range(len(dst))], dtype=np.int64)
        for layer in range(args.layers):  # the "forward pass" that computes this request's KV
            pool.fill(layer, src, page_seeds(msg["req"], layer, len(src)))
        pool.sync()
        lidx = (layer_off[:, None] * args.src_pages + src[None, :]).ravel().astype(np.uint32)
        ridx = (layer_off[:, None] * hs["pages"] + dst[None, :]).ravel().astype(np.uint32)
        jobs.put(Job(msg["req"], src, lidx, ridx))
        while not done.empty():
            job = done.get_nowait()
            if job is not None:
                free.extend(job.src.tolist())
    jobs.put(None)
    worker.join()
    secs = time.perf_counter() - t0
    agent.release_dlist_handle(lh)
    agent.release_dlist_handle(rh)

    lat = sorted(report["xfer_us"]) or [0.0]
    print(f"prefill: {len(report['xfer_us'])} requests, {report['descs_in']} descriptors "
          f"({report['descs']} after merging), {report['bytes'] / 2**20:.1f} MiB in {secs:.2f} s; "
          f"per-request transfer p50 {lat[len(lat) // 2]:.0f} us, max {lat[-1]:.0f} us")
    print(f"prefill: paths taken {report['paths']}; agent path counters "
          f"{ {p: (s.requests, s.bytes) for p, s in agent.get_path_stats().items()} }")
    if "error" in report:
        print(f"prefill: transfer worker failed: {report['error']}", file=sys.stderr)
        return 1
    print(f"decode: {result.get('verified', 0)} requests verified, {result.get('bad', '?')} bad")
    ok = result.get("bad") == 0 and result.get("verified") == args.requests
    agent.close()
    return 0 if ok else 1


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=["prefill", "decode"], default="prefill")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--pages", type=int, default=1024, help="decode's KV pool, pages per layer")
    p.add_argument("--src-pages", type=int, default=512, help="prefill's KV pool, pages per layer")
    p.add_argument("--page-bytes", type=int, default=16384)
    p.add_argument("--min-pages", type=int, default=8, help="pages per request, at least")
    p.add_argument("--max-pages", type=int, default=64, help="pages per request, at most")
    p.add_argument("--window", type=int, default=8, help="requests decode keeps outstanding")
    p.add_argument("--prefill-device", type=int, default=0)
    p.add_argument("--decode-device", type=int, default=1)
    a = p.parse_args(argv)
    if a.max_pages > min(a.pages // a.window, a.src_pages) or a.min_pages > a.max_pages:
        p.error("need min-pages <= max-pages <= min(pages / window, src-pages)")
    return a


def main(pool_cls: Any = DramPool, argv: list[str] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.role == "decode":
        return run_decode(args, pool_cls)
    return run_prefill(args, pool_cls)


if __name__ == "__main__":
    sys.exit(main())
