#!/usr/bin/env python3
"""kv_e2e.py - the whole KV request from Python, as the engines make it (issue 13, part 5).

    PYTHONPATH=bindings/python python3 tools/kv_e2e.py [--mem DRAM|VRAM] [--layers 27]
        [--tokens 8192] [--item 1152] [--reqs 10] [--run 1] [--json FILE]

Two processes: this one is prefill (the initiator), a spawned child is decode
(the target).  Each holds a KV cache of LAYERS buffers of TOKENS slots of
ITEM bytes (numpy arrays for DRAM; torch tensors on cuda:0 for VRAM, both
processes on the same GPU), registered as the engines register theirs.  Per
request every slot of every layer moves once, slots shuffled on both sides
(page size 1; --run R keeps runs of R consecutive slots, which merge), in
each engine's shape:

  sglang  the engine builds two N x 3 int64 arrays (addr, len, dev), then
          get_xfer_descs x 2, initialize_xfer, transfer, poll
          check_xfer_state until DONE, release_xfer_handle;
  vllm    both sides' block lists prepared once (prep_xfer_dlist), then per
          request make_prepped_xfer from two int64 index arrays, transfer,
          poll, release;
  indexed ours: make_indexed_xfer from the layer bases and the two slot
          arrays (no rows at all), transfer, poll, release.

It prints the median of each phase over REQS requests and the library's
time per request (everything but the engine's own array building), beside
two floors measured in the same run: arr.copy() of one N x 3 array (what
reading the descriptors once costs) and the poll phase itself (the copy).
After the timed requests decode checks every slot byte for byte; a mismatch
exits 1.  Exits 77 (SKIP) when VRAM is asked for and torch or CUDA is missing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

SKIP = 77


def pattern_np(np, layer, slots, item):
    """What source slot `slots` of `layer` holds: a byte ramp seeded by (layer, slot)."""
    s = np.asarray(slots, dtype=np.int64)[:, None]
    return ((s * 7 + layer * 131 + np.arange(item, dtype=np.int64)[None, :] * 3) % 251).astype(np.uint8)


class Cache:
    """LAYERS buffers of TOKENS x ITEM bytes in DRAM (numpy) or on cuda:0 (torch)."""

    def __init__(self, mem, layers, tokens, item):
        import numpy as np
        self.np, self.mem, self.layers, self.tokens, self.item = np, mem, layers, tokens, item
        if mem == "VRAM":
            import torch
            self.torch = torch
            self.bufs = [torch.zeros((tokens, item), dtype=torch.uint8, device="cuda:0") for _ in range(layers)]
            self.ptrs = [b.data_ptr() for b in self.bufs]
        else:
            self.bufs = [np.zeros((tokens, item), np.uint8) for _ in range(layers)]
            self.ptrs = [b.ctypes.data for b in self.bufs]
        self.dev = 0

    def fill(self):
        np = self.np
        for l, b in enumerate(self.bufs):
            p = pattern_np(np, l, np.arange(self.tokens), self.item)
            if self.mem == "VRAM":
                b.copy_(self.torch.from_numpy(p))
            else:
                b[:] = p
        if self.mem == "VRAM":
            self.torch.cuda.synchronize()

    def clear(self):
        for b in self.bufs:
            b.zero_() if self.mem == "VRAM" else b.fill(0)
        if self.mem == "VRAM":
            self.torch.cuda.synchronize()

    def host(self, layer):
        b = self.bufs[layer]
        return b.cpu().numpy() if self.mem == "VRAM" else b


def decode_main(conn, mem, layers, tokens, item):
    """The target: register, hand out metadata and pointers, then check what landed on request."""
    from nixl._api import nixl_agent
    cache = Cache(mem, layers, tokens, item)
    agent = nixl_agent("decode")
    agent.register_memory(cache.bufs if mem == "VRAM" else
                          [(p, tokens * item, 0, "") for p in cache.ptrs], None if mem == "VRAM" else "DRAM")
    conn.send({"md": agent.get_agent_metadata(), "ptrs": cache.ptrs})
    while True:
        msg = conn.recv()
        if msg["cmd"] == "quit":
            break
        if msg["cmd"] == "clear":
            cache.clear()
            conn.send("ok")
            continue
        # check: destination slot d[i] of every layer holds source slot s[i]'s pattern
        np = cache.np
        s, d = np.asarray(msg["src"]), np.asarray(msg["dst"])
        bad = 0
        for l in range(layers):
            got = cache.host(l)[d]
            bad += int((got != pattern_np(np, l, s, item)).any(axis=1).sum())
        conn.send(bad)


def slots_for(np, rng, tokens, run):
    """A shuffled permutation of the slots in runs of `run` consecutive slots."""
    starts = rng.permutation(tokens // run) * run
    return (starts[:, None] + np.arange(run)[None, :]).reshape(-1)


def rows(np, ptrs, slots, item, dev):
    """SGLang's arrays: one (addr, len, dev) int64 row per layer and slot, layer-major."""
    n = len(slots)
    a = np.empty((len(ptrs) * n, 3), np.int64)
    for l, p in enumerate(ptrs):
        a[l * n:(l + 1) * n, 0] = p + slots * item
    a[:, 1] = item
    a[:, 2] = dev
    return a


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mem", choices=("DRAM", "VRAM"), default="DRAM")
    ap.add_argument("--layers", type=int, default=27)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--item", type=int, default=1152)
    ap.add_argument("--reqs", type=int, default=10)
    ap.add_argument("--run", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.tokens % args.run:
        print("kv_e2e: --tokens must be a multiple of --run", file=sys.stderr)
        return 2
    import numpy as np
    if args.mem == "VRAM":
        try:
            import torch
        except ImportError:
            print("SKIP: torch is not installed")
            return SKIP
        if not torch.cuda.is_available():
            print("SKIP: torch sees no CUDA device")
            return SKIP
    from nixl._api import nixl_agent

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=decode_main, args=(child, args.mem, args.layers, args.tokens, args.item))
    proc.start()
    try:
        return run(args, np, nixl_agent, parent)
    finally:
        parent.send({"cmd": "quit"})
        proc.join(30)


def run(args, np, nixl_agent, conn) -> int:
    L, T, item = args.layers, args.tokens, args.item
    cache = Cache(args.mem, L, T, item)
    cache.fill()
    agent = nixl_agent("prefill")
    agent.register_memory(cache.bufs if args.mem == "VRAM" else
                          [(p, T * item, 0, "") for p in cache.ptrs], None if args.mem == "VRAM" else "DRAM")
    hello = conn.recv()
    peer = agent.add_remote_agent(hello["md"])
    dptrs = hello["ptrs"]
    mem = args.mem
    n = L * T
    rng = np.random.default_rng(1)
    results = {}

    def wait(h):
        while True:
            st = agent.check_xfer_state(h)
            if st == "DONE":
                return
            if st not in ("PROC",):
                raise RuntimeError(f"request state {st}")

    def verify(s, d, what):
        conn.send({"cmd": "check", "src": s.tolist(), "dst": d.tolist()})
        bad = conn.recv()
        if bad:
            print(f"kv_e2e: {what}: {bad} of {n} slots hold wrong bytes", file=sys.stderr)
        conn.send({"cmd": "clear"})
        conn.recv()
        return bad

    class Laps:
        """Named intervals of one request: lap(name) ends the one begun by the previous lap."""

        def __init__(self):
            self.times, self.t = {}, time.perf_counter()

        def __call__(self, name):
            t = time.perf_counter()
            self.times[name] = (t - self.t) * 1e3
            self.t = t

    def post_wait_release(h, lap):
        agent.transfer(h)
        lap("post")
        wait(h)
        lap("wait")
        agent.release_xfer_handle(h)
        lap("release")

    def shape(name, one):
        """reqs + 1 requests of one engine's shape (the first: imports and warm-up), fresh slots
        each; the medians of their phases; the last one's bytes checked by decode."""
        ph = {}
        for r in range(args.reqs + 1):
            s, d = slots_for(np, rng, T, args.run), slots_for(np, rng, T, args.run)
            lap = Laps()
            one(s, d, lap)
            for k, v in lap.times.items():
                if r:
                    ph.setdefault(k, []).append(v)
        results[name] = {k: median(v) for k, v in ph.items()}
        return verify(s, d, name)

    def sglang(s, d, lap):  # two lists per request
        src, dst = rows(np, cache.ptrs, s, item, 0), rows(np, dptrs, d, item, 0)
        lap("build")
        sd, dd = agent.get_xfer_descs(src, mem), agent.get_xfer_descs(dst, mem)
        lap("descs")
        h = agent.initialize_xfer("WRITE", sd, dd, peer)
        lap("init")
        post_wait_release(h, lap)
        src.copy()
        lap("copy_floor")

    # vLLM: lists prepared once, index arrays per request
    all_slots = np.arange(T)
    t0 = time.perf_counter()
    lside = agent.prep_xfer_dlist("", rows(np, cache.ptrs, all_slots, item, 0), mem)
    rside = agent.prep_xfer_dlist(peer, rows(np, dptrs, all_slots, item, 0), mem)
    prep_ms = (time.perf_counter() - t0) * 1e3
    layer_base = (np.arange(L, dtype=np.int64) * T)[:, None]

    def vllm(s, d, lap):
        li, ri = (layer_base + s[None, :]).reshape(-1), (layer_base + d[None, :]).reshape(-1)
        lap("build")
        h = agent.make_prepped_xfer("WRITE", lside, li, rside, ri)
        lap("make")
        post_wait_release(h, lap)

    def indexed(s, d, lap):  # ours: no rows at all
        h = agent.make_indexed_xfer("WRITE", peer, cache.ptrs, s, dptrs, d, item, mem)
        lap("make")
        post_wait_release(h, lap)

    bad = shape("sglang", sglang) + shape("vllm", vllm) + shape("indexed", indexed)
    agent.release_dlist_handle(lside)
    agent.release_dlist_handle(rside)
    results["vllm"]["prep_once"] = prep_ms

    # The library's time: every phase but the engine's own array building and the floor.
    for res in results.values():
        res["library"] = sum(v for k, v in res.items() if k not in ("build", "copy_floor", "prep_once"))
    sg, vl = results["sglang"], results["vllm"]
    print(f"# kv_e2e: {mem}, {L} layers x {T} slots x {item} B = {n} descriptors per request "
          f"(runs of {args.run}), median of {args.reqs} requests, ms")
    cols = ("build", "descs", "init", "post", "wait", "release", "library")
    print(f"{'engine':8} " + " ".join(f"{c:>7}" for c in cols) + f" {'lib-wait':>8}")
    for name, res in results.items():
        res = dict(res, init=res.get("init", res.get("make")))  # make_* calls are the init column
        print(f"{name:8} " + " ".join(f"{res[c]:7.2f}" if c in res and res[c] is not None else f"{'-':>7}"
                                      for c in cols) + f" {res['library'] - res['wait']:8.2f}")
    print(f"# floors: arr.copy() of one {n} x 3 array {sg['copy_floor']:.3f} ms (descs = 2 arrays: "
          f"{sg['descs'] / (2 * sg['copy_floor']):.1f} x); the copy (wait) {sg['wait']:.3f} ms; "
          f"vllm prep_xfer_dlist once {vl['prep_once']:.1f} ms")
    print(f"# bytes verified: {'all slots correct' if bad == 0 else f'{bad} wrong slots'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "bad": bad}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
