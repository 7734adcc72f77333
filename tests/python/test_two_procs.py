"""Two processes: metadata over the listener, numpy buffers moved both ways
with notifications, bytes verified; a peer that dies."""

import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import nixl

from conftest import HERE, make_agent, unique, wait_notif, wait_state

N = 4 << 20
PAGE = 4096


class Peer:
    """peer.py in a child process, spoken to over its stdin/stdout."""

    def __init__(self, shared=True, n=N):
        self.name = unique("peer")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py"), self.name, str(n),
                                      "1" if shared else "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        hello = self._read()
        self.port, self.addr, self.len, self.pid = hello["port"], hello["addr"], hello["len"], hello["pid"]

    def _read(self):
        line = self.proc.stdout.readline()
        assert line, f"peer exited with {self.proc.wait()}"
        return json.loads(line)

    def try_call(self, **cmd):
        """The peer's answer, an error included."""
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def call(self, **cmd):
        r = self.try_call(**cmd)
        assert "error" not in r, r["error"]
        return r

    def close(self):
        if self.proc.poll() is None:
            self.call(cmd="quit")
        assert self.proc.wait(timeout=30) == 0

    def kill(self):
        self.proc.stdin.write(json.dumps({"cmd": "crash"}) + "\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=30) == 3


def peer_pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 13 + seed) % 251).astype(np.uint8)


@pytest.mark.parametrize("shared", [True, False], ids=["alloc_array", "numpy"])
def test_listener_metadata_and_numpy_both_ways(shared):
    peer = Peer(shared)
    a = make_agent("init")
    try:
        src = np.random.default_rng(3).integers(0, 256, N, dtype=np.uint8)
        dst = nixl.alloc_array(N) if shared else np.zeros(N, np.uint8)
        a.register_memory([src, dst])
        a.fetch_remote_metadata(peer.name, "127.0.0.1", peer.port)
        assert a.check_remote_metadata(peer.name)
        a.send_local_metadata("127.0.0.1", peer.port)
        assert peer.call(cmd="known", peer=a.name)["known"]
        remote = a.get_xfer_descs([(peer.addr, N, 0)], "DRAM")

        # WRITE with a notification: when the peer sees it, the bytes are there.
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), remote, peer.name, b"write-1")
        a.transfer(h)
        assert wait_state(a, h) == "DONE"
        assert a.get_xfer_info(h).path == ("shm.map" if shared else "shm.cma")
        peer.call(cmd="wait_notif", sender=a.name, tag="write-1")
        assert peer.call(cmd="sha")["sha"] == hashlib.sha256(src.tobytes()).hexdigest()

        # The peer writes new bytes and says so; READ them back page by page, reversed (two-step API).
        peer.call(cmd="fill", seed=7)
        peer.call(cmd="notify", to=a.name, msg="filled")
        wait_notif(a, peer.name, b"filled")
        pages = N // PAGE
        lrows = np.array([[dst.ctypes.data + p * PAGE, PAGE, 0] for p in range(pages)], np.uint64)
        rrows = np.array([[peer.addr + p * PAGE, PAGE, 0] for p in range(pages)], np.uint64)
        lh = a.prep_xfer_dlist("NIXL_INIT_AGENT", lrows, "DRAM")
        rh = a.prep_xfer_dlist(peer.name, rrows, "DRAM")
        h2 = a.make_prepped_xfer("READ", lh, np.arange(pages)[::-1].copy(), rh, np.arange(pages), b"read-1")
        a.transfer(h2)
        assert wait_state(a, h2) == "DONE"
        want = peer_pattern(N, 7).reshape(pages, PAGE)[::-1].ravel()
        assert np.array_equal(dst, want)
        peer.call(cmd="wait_notif", sender=a.name, tag="read-1")  # READs notify too
        stats = a.get_path_stats()
        assert sum(s.requests for s in stats.values()) == 2 and sum(s.errors for s in stats.values()) == 0
        for h in (h, h2):
            a.release_xfer_handle(h)
        a.release_dlist_handle(lh)
        a.release_dlist_handle(rh)
        a.invalidate_local_metadata("127.0.0.1", peer.port)
        assert not peer.call(cmd="known", peer=a.name)["known"]
    finally:
        a.close()
        peer.close()


def test_partial_metadata_from_another_process_over_the_listener():
    # NIXL's partial_md_example across processes: the peer sends the metadata of one region, with its
    # connection info, to our listener, later that of a second region without it; each is READ and
    # checked byte for byte, and a request made between the two stays valid.
    n = 1 << 16
    peer = Peer(shared=True, n=n)
    a = make_agent("init", enable_listen_thread=True, listen_port=0)
    stranger = make_agent("stranger", enable_listen_thread=True, listen_port=0)
    try:
        dst = nixl.alloc_array(n)
        a.register_memory(dst)
        local = a.get_xfer_descs(dst)
        first = a.get_xfer_descs([(peer.addr, n, 0)], "DRAM")
        peer.call(cmd="fill", seed=11)
        addr2 = peer.call(cmd="register2", n=n, seed=12)["addr"]
        second = a.get_xfer_descs([(addr2, n, 0)], "DRAM")

        peer.call(cmd="send_partial", which="buf", conn=True, port=a.listen_port)
        assert a.check_remote_metadata(peer.name, first)
        assert not a.check_remote_metadata(peer.name, second)
        with pytest.raises(nixl.nixlNotFoundError):
            a.initialize_xfer("READ", local, second, peer.name)
        h1 = a.initialize_xfer("READ", local, first, peer.name)
        assert a.transfer(h1) in ("DONE", "PROC") and wait_state(a, h1) == "DONE"
        assert np.array_equal(dst, peer_pattern(n, 11))

        peer.call(cmd="send_partial", which="buf2", conn=False, port=a.listen_port)
        assert a.check_remote_metadata(peer.name, second)
        h2 = a.initialize_xfer("READ", local, second, peer.name)
        a.transfer(h2)
        assert wait_state(a, h2) == "DONE"
        assert np.array_equal(dst, peer_pattern(n, 12))
        dst[:] = 0
        a.transfer(h1)  # made before the second blob: still valid
        assert wait_state(a, h1) == "DONE"
        assert np.array_equal(dst, peer_pattern(n, 11))
        a.release_xfer_handle(h1)
        a.release_xfer_handle(h2)

        # A listener that never heard of the peer refuses a blob without connection info, and the
        # sender's call says so.
        r = peer.try_call(cmd="send_partial", which="buf2", conn=False, port=stranger.listen_port)
        assert "nixlNotFoundError" in r.get("error", "") and "UNKNOWN_PEER" in r["error"], r
        assert not stranger.check_remote_metadata(peer.name)
    finally:
        stranger.close()
        a.close()
        peer.close()


def test_dead_peer_fails_requests_with_remote_disconnect():
    peer = Peer(shared=True, n=1 << 16)
    a = make_agent("init")
    try:
        src = nixl.alloc_array(1 << 16)
        a.register_memory(src)
        a.fetch_remote_metadata(peer.name, "127.0.0.1", peer.port)
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), a.get_xfer_descs([(peer.addr, 1 << 16, 0)], "DRAM"),
                              peer.name, b"lost")
        peer.kill()
        t = time.monotonic()
        with pytest.raises(nixl.nixlRemoteDisconnectError) as e:
            a.transfer(h)
            wait_state(a, h)
        assert e.value.status_name == "NIXL_ERR_PEER_GONE" and time.monotonic() - t < 10
    finally:
        a.close()


def test_listener_with_a_shared_secret(tmp_path, monkeypatch):
    """NIXL_MD_SECRET_FILE (issue 15): agents that share the secret exchange metadata through the
    listener; one without it is refused (nixlNotAllowedError, NIXL_ERR_NOT_AUTHENTICATED) both ways,
    and nothing it sent is loaded or forgotten; a secret others may read stops the agent at creation."""
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode() + b"\n")
    secret.chmod(0o600)
    monkeypatch.setenv("NIXL_MD_SECRET_FILE", str(secret))
    peer = Peer()  # its listener, from our environment, requires the secret
    a = make_agent("keyed")
    monkeypatch.delenv("NIXL_MD_SECRET_FILE")
    b = make_agent("keyless")
    try:
        a.fetch_remote_metadata(peer.name, "127.0.0.1", peer.port)
        assert a.check_remote_metadata(peer.name)
        a.send_local_metadata("127.0.0.1", peer.port)
        assert peer.call(cmd="known", peer=a.name)["known"]

        with pytest.raises(nixl.nixlNotAllowedError, match="NOT_AUTHENTICATED"):
            b.fetch_remote_metadata(peer.name, "127.0.0.1", peer.port)
        assert not b.check_remote_metadata(peer.name)
        with pytest.raises(nixl.nixlNotAllowedError, match="NOT_AUTHENTICATED"):
            b.send_local_metadata("127.0.0.1", peer.port)
        assert not peer.call(cmd="known", peer=b.name)["known"]
        # An unauthenticated INVALIDATE under a's name forgets nothing.
        with pytest.raises(nixl.nixlNotAllowedError, match="NOT_AUTHENTICATED"):
            raw_invalidate(a.name, peer.port)
        assert peer.call(cmd="known", peer=a.name)["known"]

        secret.chmod(0o644)
        monkeypatch.setenv("NIXL_MD_SECRET_FILE", str(secret))
        with pytest.raises(nixl.nixlNotAllowedError, match="PERMISSION"):
            make_agent("readable-secret")
    finally:
        a.close()
        b.close()
        peer.close()


def raw_invalidate(name, port):
    """An unauthenticated listener INVALIDATE naming any agent (what an attacker can send; the C
    call only ever names the calling agent): a hand-made version-1 frame (src/md/socket.h)."""
    import socket
    import struct
    from nixl._errors import check
    payload = name.encode()
    frame = struct.pack("<IHHiI", 0x4b53584e, 1, 3, 0, len(payload)) + payload
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(frame)
        s.shutdown(socket.SHUT_WR)
        rep = b""
        while len(rep) < 16:
            chunk = s.recv(16 - len(rep))
            if not chunk:
                break
            rep += chunk
    assert len(rep) == 16, "the listener closed without a reply"
    check(struct.unpack("<i", rep[8:12])[0], "invalidate (raw frame)", f"as {name}")
