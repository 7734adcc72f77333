#!/usr/bin/env python3
"""kv_offload.py - a KV cache offloaded from host memory to a file and brought
back into other slots, through NIXL's Python API (the twin of examples/kv_offload.c).

    PYTHONPATH=bindings/python python3 examples/python/kv_offload.py [--tokens 8192] [--layers 27] ...

The KV is shaped like DeepSeek-V2-Lite's: 27 layers, one numpy array per
layer of 8,192 token slots x 1,152 B, page size 1: 221,184 pages, 254.8 MB.
Prefill holds token t at slot pslot[t] (shuffled); one WRITE puts every page
into the file in (layer, token) order, one READ brings every page back into a
second cache at slot dslot[t] (shuffled otherwise), and every byte is
compared.  Both are storage requests of the POSIX backend (our posix): the
agent registers the file as FILE (offset 0, length 0: the whole file, fd) and
names itself as the remote agent, its DRAM on the local side (as NIXL's
storage examples and LMCache do).  Each request is made from two N x 3 int64
row arrays, (address, length, 0) and (file offset, length, fd).

The caches come from nixl.alloc_array (numpy arrays in page-aligned host
memory, as --direct needs).  --file PATH writes PATH (created or truncated,
kept); without it a file under /var/tmp is used and removed at the end.
--sync takes posix.sync instead of posix.uring; --cold flushes the file and
drops it from the page cache before the READ.  Exit status 0 when every byte
came back.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import nixl
from nixl._api import nixl_agent, nixl_agent_config

NAME = "kv_offload_py"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=8192, help="token slots per layer")
    p.add_argument("--layers", type=int, default=27)
    p.add_argument("--page-bytes", type=int, default=1152, help="bytes of one token's page in one layer")
    p.add_argument("--file", default=None, help="the file to write (kept); default a temporary one under /var/tmp")
    p.add_argument("--direct", action="store_true", help="open the file with O_DIRECT (pages of 4096 B multiples)")
    p.add_argument("--sync", action="store_true", help="posix.sync (pread/pwrite in the post), not posix.uring")
    p.add_argument("--cold", action="store_true", help="flush the file and drop it from the page cache before the READ")
    a = p.parse_args(argv)
    if min(a.tokens, a.layers, a.page_bytes) <= 0:
        p.error("--tokens, --layers and --page-bytes must be positive")
    if a.direct and a.page_bytes % 4096:
        p.error(f"--direct needs --page-bytes a multiple of 4096, not {a.page_bytes}")
    return a


def rows(first: np.ndarray, length: int, dev: int) -> np.ndarray:
    """N x 3 int64 rows (first[i], length, dev): the form NIXL's get_xfer_descs takes."""
    r = np.empty((first.size, 3), dtype=np.int64)
    r[:, 0] = first
    r[:, 1] = length
    r[:, 2] = dev
    return r


def move(agent: nixl_agent, op: str, mem_rows: np.ndarray, file_rows: np.ndarray, title: str) -> None:
    t0 = time.perf_counter()
    local = agent.get_xfer_descs(mem_rows, "DRAM")
    remote = agent.get_xfer_descs(file_rows, "FILE")
    handle = agent.initialize_xfer(op, local, remote, agent.name)  # storage: the agent is its own peer
    t1 = time.perf_counter()
    state = agent.transfer(handle)
    while state == "PROC":
        state = agent.check_xfer_state(handle)  # raises the request's error if it failed
    t2 = time.perf_counter()
    info = agent.get_xfer_info(handle)
    agent.release_xfer_handle(handle)
    print(title)
    print(f"  request:       {info.descs_in:,} pieces given, {info.descs:,} after merging, one request, "
          f"made in {(t1 - t0) * 1e3:.1f} ms")
    print(f"  post to done:  {(t2 - t1) * 1e3:.1f} ms, {info.bytes:,} B, {info.bytes / (t2 - t1) / 1e9:.2f} GB/s")
    print(f"  path:          {info.path} (backend {info.backend})")


def main(argv=None) -> int:
    a = parse_args(argv)
    T, L, P = a.tokens, a.layers, a.page_bytes
    nbytes = L * T * P
    flags = os.O_RDWR | os.O_CREAT | (os.O_DIRECT if a.direct else 0)
    if a.file:
        path, remove = a.file, False
        fd = os.open(path, flags | os.O_TRUNC, 0o644)
    else:
        f, path = tempfile.mkstemp(prefix="nixl-kv-offload-py-", dir="/var/tmp")
        os.close(f)
        remove = True
        fd = os.open(path, flags, 0o600)
    print(f"kv_offload.py: KV like DeepSeek-V2-Lite: {L} layers x {T:,} tokens x {P:,} B pages (page size 1): "
          f"{L * T:,} pages, {nbytes / 1e6:.1f} MB")
    print(f"file:            {path} ({'O_DIRECT' if a.direct else 'page cache'}{', removed at the end' if remove else ''})")
    agent = None
    try:
        if a.sync:
            agent = nixl_agent(NAME, nixl_agent_config(backends=[]))
            agent.create_backend("posix", {"use_uring": "0"})
        else:
            agent = nixl_agent(NAME, nixl_agent_config(backends=["POSIX"]))
        rng = np.random.default_rng(14)
        prefill = [nixl.alloc_array((T, P)) for _ in range(L)]
        decode = [nixl.alloc_array((T, P)) for _ in range(L)]
        for layer in prefill:
            layer[...] = np.frombuffer(rng.bytes(T * P), dtype=np.uint8).reshape(T, P)
        for layer in decode:
            layer[...] = 0x5a  # what an unused slot holds, so a page that did not arrive shows
        pslot, dslot = rng.permutation(T), rng.permutation(T)
        print(f"slots:           shuffled in both caches; {int((pslot != dslot).sum()):,} of {T:,} tokens land "
              f"in another slot than they left")
        mem_reg = agent.register_memory(prefill + decode)  # numpy arrays: DRAM, one region each
        file_reg = agent.register_memory([(0, 0, fd, "")], "FILE")  # offset 0, length 0: the whole file
        print()

        # Piece (l, t): slot[t] of layer l in a cache, page l * T + t of the file.
        def cache_rows(cache, slot):
            bases = np.array([layer.ctypes.data for layer in cache], dtype=np.int64)
            return rows((bases[:, None] + slot[None, :].astype(np.int64) * P).ravel(), P, 0)

        file_rows = rows(np.arange(L * T, dtype=np.int64) * P, P, fd)
        move(agent, "WRITE", cache_rows(prefill, pslot), file_rows, "WRITE: prefill's cache -> the file")
        size = os.fstat(fd).st_size
        if size != nbytes:
            print(f"the file holds {size:,} bytes after the WRITE, expected {nbytes:,}")
            return 1
        if a.cold:
            t0 = time.perf_counter()
            os.fdatasync(fd)
            dt = time.perf_counter() - t0
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            print(f"  flushed:       fdatasync {dt * 1e3:.1f} ms ({nbytes / dt / 1e9:.2f} GB/s to the device), "
                  f"then dropped from the page cache")
        print()
        move(agent, "READ", cache_rows(decode, dslot), file_rows, "READ: the file -> decode's cache, other slots")

        bad = 0
        for layer in range(L):
            same = (decode[layer][dslot] == prefill[layer][pslot]).all(axis=1)
            if not same.all():
                for t in np.flatnonzero(~same)[:max(0, 5 - bad)]:
                    print(f"  layer {layer} token {t} (slot {dslot[t]}) differs")
                bad += int((~same).sum())
        print()
        if bad:
            print(f"verified:        FAILED, {bad:,} of {L * T:,} pages differ")
        else:
            print(f"verified:        every page, in its new slot\n                 {L * T:,} pages, {nbytes:,} B")
        agent.deregister_memory(file_reg)
        agent.deregister_memory(mem_reg)
        print(f"result:          {'FAILED' if bad else 'OK, every byte came back'}")
        return 1 if bad else 0
    finally:
        if agent is not None:
            agent.close()
        os.close(fd)
        if remove:
            os.unlink(path)


if __name__ == "__main__":
    sys.exit(main())
