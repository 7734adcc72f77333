#!/usr/bin/env python3
"""Two peers, a target and an initiator, using the whole of the usual API
once: the metadata listener, descriptors handed over in a notification,
prepared lists used by index, one-shot requests, reposting with a new
notification, notifications checked on the target, and every byte checked on
both sides at the end.  Shaped like NIXL's examples/python/expanded_two_peers.py
(same command line), written for this package and numpy (no torch needed).

    two_peers.py --mode target --ip 0.0.0.0 --port 5555     # first, on one host
    two_peers.py --mode initiator --ip <target's ip> --port 5555
    two_peers.py                                             # both: spawns the target here

The target holds 16 rows of 64 bytes, row r filled with r + 1.  The
initiator (rows zero, 12..15 its own 0xe0 + r):
  1. READs, four requests of three rows each from prepared lists, indices
     [s, s+4, s+8] local <- [s+8, s+4, s] remote; the remote list is made from
     NIXL 1.5 strided rows (one N x 5 row: 16 rows of 64 bytes);
  2. WRITEs one random half of each of its rows 12..15 over the target's,
     two requests of two descriptors (tuples, then an N x 3 numpy array);
  3. reposts the four READs with new notifications.
The target waits for every notification, then checks its rows 0..11 are
untouched and rows 12..15 hold exactly the halves named in the WRITEs'
notifications; the initiator checks rows 0..11 are the remote rows the
indices name.  Exit status 0 when both agree.
"""

import argparse
import os
import pickle
import random
import subprocess
import sys
import time

import numpy as np

from nixl._api import nixl_agent, nixl_agent_config
from nixl.logging import get_logger

log = get_logger(__name__)
ROWS, ROW = 16, 64


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ip", default="127.0.0.1", help="target: address to listen on; initiator: the target's")
    p.add_argument("--port", type=int, default=5555, help="the target's listener port (0: any, printed)")
    p.add_argument("--backend", default="UCX")
    p.add_argument("--mode", choices=["target", "initiator", "both"], default="both")
    p.add_argument("--tag", default="", help="appended to the agent names (several runs on one host)")
    p.add_argument("--timeout", type=float, default=30.0)
    return p.parse_args(argv)


def wait_for(what, cond, timeout):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.001)


def target(args):
    me, peer = "target" + args.tag, "initiator" + args.tag
    agent = nixl_agent(me, nixl_agent_config(True, True, args.port, backends=[args.backend]))
    rows = np.repeat(np.arange(1, ROWS + 1, dtype=np.uint8), ROW).reshape(ROWS, ROW)
    reg = agent.register_memory(rows)  # one registration; transfers may use any part of it
    if not reg:
        log.error("target: registration failed")
        return 1
    print(f"PORT {agent.listen_port}", flush=True)  # "both" mode reads it

    # Hand the initiator what it needs once its metadata is here: the rows as a
    # descriptor list, and the layout (for descriptors it makes itself).
    wait_for("the initiator's metadata", lambda: agent.check_remote_metadata(peer), args.timeout)
    descs = agent.get_xfer_descs([rows[r] for r in range(ROWS)])
    layout = (rows.ctypes.data, ROWS, ROW, 0, "DRAM")
    agent.send_notif(peer, pickle.dumps((agent.get_serialized_descs(descs), layout)))

    reads = {f"Read idx {s},{s + 4},{s + 8}{again}".encode() for s in range(4) for again in ("", " again")}
    writes = []
    while reads or len(writes) < 2:
        got = wait_for("notifications", agent.get_new_notifs, args.timeout)
        for msg in got.get(peer, []):
            if msg in reads:
                reads.remove(msg)
            elif msg.startswith(b"Write"):
                writes.append(msg.decode())
            else:
                log.error("target: unexpected notification %r", msg)
                return 1

    want = np.repeat(np.arange(1, ROWS + 1, dtype=np.uint8), ROW).reshape(ROWS, ROW)
    for w in writes:  # "Write rows 12(first),13(second)"
        for part in w.split(" ")[2].split(","):
            r, half = int(part.split("(")[0]), part.split("(")[1].rstrip(")")
            off = 0 if half == "first" else ROW // 2
            want[r, off:off + ROW // 2] = 0xE0 + r
    ok = np.array_equal(rows, want)
    print(f"target: {len(writes)} writes, 8 reads notified; rows {'verified' if ok else 'WRONG'}", flush=True)
    if not ok:
        log.error("target: rows differ from what the notifications say:\n%s", rows[:, ::16])
    wait_for("the initiator to let go", lambda: not agent.check_remote_metadata(peer), args.timeout)
    agent.deregister_memory(reg)
    agent.close()
    return 0 if ok else 1


def drain(agent, handles, what, timeout):
    left = list(handles)
    deadline = time.monotonic() + timeout
    while left:
        for h in list(left):
            if agent.check_xfer_state(h) == "DONE":  # a failed request raises its nixl*Error
                left.remove(h)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: {len(left)} requests still running")


def initiator(args):
    me, peer = "initiator" + args.tag, "target" + args.tag
    agent = nixl_agent(me, nixl_agent_config(True, True, 0, capture_telemetry=True, backends=[args.backend]))
    rows = np.zeros((ROWS, ROW), np.uint8)
    rows[12:] = (0xE0 + np.arange(12, ROWS, dtype=np.uint8))[:, None]
    reg = agent.register_memory(rows)

    # Metadata both ways over the target's listener, then the target's descriptors in a notification.
    agent.send_local_metadata(args.ip, args.port)
    agent.fetch_remote_metadata(peer, args.ip, args.port)
    notifs = wait_for("the target's descriptors", agent.get_new_notifs, args.timeout)
    descs_blob, (base, n_rows, row_len, remote_dev, remote_mem) = pickle.loads(notifs[peer][0])
    target_descs = agent.deserialize_descs(descs_blob)
    assert len(target_descs) == n_rows == ROWS and row_len == ROW

    # 1) Blocks known in advance: prepare both lists once, then requests by index.  The remote side
    #    from one strided row (NIXL 1.5): 16 blocks of 64 bytes, 64 apart; the same blocks as target_descs.
    local_side = agent.prep_xfer_dlist("", agent.get_xfer_descs([rows[r] for r in range(ROWS)]))
    strided = np.array([[base, row_len, remote_dev, row_len, n_rows]], np.uint64)
    assert list(agent.get_xfer_descs(strided, remote_mem)) == list(target_descs)
    remote_side = agent.prep_xfer_dlist(peer, strided, remote_mem)
    reads = []
    for s in range(4):
        idx = [s, s + 4, s + 8]
        reads.append(agent.make_prepped_xfer("READ", local_side, idx, remote_side, idx[::-1],
                                             f"Read idx {s},{s + 4},{s + 8}".encode()))

    # 2) Locations chosen at transfer time: one-shot requests, a random half of rows 12..15.
    random.seed(0)
    offs = {r: random.choice((0, ROW // 2)) for r in range(12, ROWS)}
    half = ROW // 2

    def name(r):
        return f"{r}({'first' if offs[r] == 0 else 'second'})"

    w0_local = [(rows[r].ctypes.data + offs[r], half, 0) for r in (12, 13)]
    w0_remote = [(base + r * row_len + offs[r], half, remote_dev) for r in (12, 13)]
    w1_local = np.array([[rows[r].ctypes.data + offs[r], half, 0] for r in (14, 15)], np.uint64)
    w1_remote = np.array([[base + r * row_len + offs[r], half, remote_dev] for r in (14, 15)], np.uint64)
    writes = [agent.initialize_xfer("WRITE", agent.get_xfer_descs(w0_local, "DRAM"),
                                    agent.get_xfer_descs(w0_remote, remote_mem), peer,
                                    f"Write rows {name(12)},{name(13)}".encode()),
              agent.initialize_xfer("WRITE", agent.get_xfer_descs(w1_local, "DRAM"),
                                    agent.get_xfer_descs(w1_remote, remote_mem), peer,
                                    f"Write rows {name(14)},{name(15)}".encode())]

    # The READs together, then the WRITEs together (waiting orders them), then the READs again.
    for h in reads:
        agent.transfer(h)
    drain(agent, reads, "READs", args.timeout)
    for h in writes:
        agent.transfer(h)
    drain(agent, writes, "WRITEs", args.timeout)
    for s, h in enumerate(reads):
        agent.transfer(h, f"Read idx {s},{s + 4},{s + 8} again".encode())  # a new notification, same request
    drain(agent, reads, "READs again", args.timeout)

    want = np.zeros((ROWS, ROW), np.uint8)
    for s in range(4):
        for lr, rr in zip((s, s + 4, s + 8), (s + 8, s + 4, s)):
            want[lr] = rr + 1
    want[12:] = (0xE0 + np.arange(12, ROWS, dtype=np.uint8))[:, None]
    ok = np.array_equal(rows, want)
    tel = [agent.get_xfer_telemetry(h) for h in reads + writes]
    print(f"initiator: {len(reads)} READs (twice), {len(writes)} WRITEs, "
          f"{sum(t.totalBytes for t in tel)} bytes in the last posts; rows {'verified' if ok else 'WRONG'}",
          flush=True)

    for h in reads + writes:
        agent.release_xfer_handle(h)
    agent.release_dlist_handle(local_side)
    agent.release_dlist_handle(remote_side)
    agent.remove_remote_agent(peer)
    agent.invalidate_local_metadata(args.ip, args.port)  # the target waits for this to finish
    agent.deregister_memory(reg)
    agent.close()
    return 0 if ok else 1


def both(args):
    tag = args.tag or f"-{os.getpid()}"
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--mode", "target", "--ip", "127.0.0.1",
                              "--port", "0", "--backend", args.backend, "--tag", tag,
                              "--timeout", str(args.timeout)], stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    while line and not line.startswith("PORT "):  # the target's log lines (nixl.logging writes to stdout)
        print(line, end="")
        line = child.stdout.readline()
    if not line:
        print(f"target did not start: exit {child.wait()}")
        return 1
    args.ip, args.port, args.tag = "127.0.0.1", int(line.split()[1]), tag
    rc = initiator(args)
    out, _ = child.communicate(timeout=args.timeout)
    print(out, end="")
    return rc or child.returncode


if __name__ == "__main__":
    a = parse_args()
    sys.exit({"target": target, "initiator": initiator, "both": both}[a.mode](a))
