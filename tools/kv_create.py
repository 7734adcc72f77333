#!/usr/bin/env python3
"""kv_create.py - what making SGLang's KV request costs from Python, without the copy (issue 13).

    NIXL_LIB=<builddir> PYTHONPATH=bindings/python python3 tools/kv_create.py [--backend shm]
        [--param KEY=VALUE] [--layers 27] [--tokens 8192] [--item 1152] [--reqs 20]

One process, two agents ("pre" and "dec") on BACKEND, each with LAYERS numpy
buffers of TOKENS x ITEM bytes registered.  Per request, slots shuffled on
both sides, the engine's two N x 3 int64 arrays are built (not timed), then
get_xfer_descs x 2, initialize_xfer and release_xfer_handle are timed;
nothing is posted (tools/kv_e2e.py measures the whole request, copy
included, across two processes).  It prints the medians beside arr.copy() of
one array, measured in the same loop.  With the unit tests' fake_indexed
module (NIXL_PLUGIN_DIR=<builddir>/tests/unit/core, --backend fake_indexed
--param indexed=1), which takes indexed requests in their form as cuda_ipc
does, it shows on a machine without a GPU what the indexed path costs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="shm")
    ap.add_argument("--param", action="append", default=[], help="KEY=VALUE for the backend")
    ap.add_argument("--layers", type=int, default=27)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--item", type=int, default=1152)
    ap.add_argument("--reqs", type=int, default=20)
    args = ap.parse_args()
    from nixl._api import nixl_agent, nixl_agent_config
    L, T, item = args.layers, args.tokens, args.item
    params = dict(p.split("=", 1) for p in args.param)

    def agent(name):
        a = nixl_agent(name, nixl_agent_config(backends=[]))
        a.create_backend(args.backend, params)
        return a

    pre, dec = agent("pre"), agent("dec")
    src = [np.zeros(T * item, np.uint8) for _ in range(L)]
    dst = [np.zeros(T * item, np.uint8) for _ in range(L)]
    pre.register_memory([(b.ctypes.data, b.nbytes, 0, "") for b in src], "DRAM")
    dec.register_memory([(b.ctypes.data, b.nbytes, 0, "") for b in dst], "DRAM")
    peer = pre.add_remote_agent(dec.get_agent_metadata())
    sp, dp = [b.ctypes.data for b in src], [b.ctypes.data for b in dst]
    rng = np.random.default_rng(1)

    def rows(ptrs, slots):  # SGLang's array: one (addr, len, dev) row per layer and slot
        r = np.empty((L * T, 3), np.int64)
        for l, p in enumerate(ptrs):
            r[l * T:(l + 1) * T, 0] = p + slots * item
        r[:, 1] = item
        r[:, 2] = 0
        return r

    times: dict[str, list[float]] = {"descs": [], "init": [], "release": [], "copy": []}
    path = ""
    for k in range(args.reqs + 1):  # the first: warm-up
        s, d = rows(sp, rng.permutation(T)), rows(dp, rng.permutation(T))
        t0 = time.perf_counter()
        sd, dd = pre.get_xfer_descs(s, "DRAM"), pre.get_xfer_descs(d, "DRAM")
        t1 = time.perf_counter()
        h = pre.initialize_xfer("WRITE", sd, dd, peer)
        t2 = time.perf_counter()
        info = pre.get_xfer_info(h)
        t3 = time.perf_counter()
        pre.release_xfer_handle(h)
        t4 = time.perf_counter()
        s.copy()
        t5 = time.perf_counter()
        path = info.path
        if k:
            for name, v in (("descs", t1 - t0), ("init", t2 - t1), ("release", t4 - t3), ("copy", t5 - t4)):
                times[name].append(v * 1e3)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    total = med["descs"] + med["init"] + med["release"]
    print(f"# kv_create: {args.backend} ({path}), {L} layers x {T} slots x {item} B = {L * T} rows a side, "
          f"median of {args.reqs} requests, ms")
    print(f"descs {med['descs']:.3f}  init {med['init']:.3f}  release {med['release']:.3f}  total {total:.3f}  "
          f"(arr.copy() of one array {med['copy']:.3f}; descs = {med['descs'] / (2 * med['copy']):.2f} x two copies)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
