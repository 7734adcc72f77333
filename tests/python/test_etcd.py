"""Metadata through etcd: NIXL's send/fetch/invalidate without an address.
Needs a libnixl with the etcd calls and the etcd binary (a private server is
started); otherwise the calls must say why they cannot work."""

import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

import nixl
from nixl import _lib

from conftest import make_agent, wait_notif, wait_state

HAVE = "nixl_md_etcd_publish" in _lib.HAVE
ETCD = shutil.which("etcd")


def until(cond, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def etcd(tmp_path, monkeypatch):
    if not HAVE:
        pytest.skip("this libnixl has no etcd calls")
    if not ETCD:
        pytest.skip("no etcd binary (apt-get install etcd-server)")
    cp, pp = free_port(), free_port()
    client, peer = f"http://127.0.0.1:{cp}", f"http://127.0.0.1:{pp}"
    log = open(tmp_path / "etcd.log", "w")
    proc = subprocess.Popen([ETCD, "--name", "t", "--data-dir", str(tmp_path / "data"), "--listen-client-urls",
                             client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"t={peer}",
                             "--initial-cluster-state", "new", "--log-level", "error"], stdout=log, stderr=log)

    def healthy():
        try:
            return b"true" in urllib.request.urlopen(client + "/health", timeout=1).read()
        except OSError:
            return False

    try:
        until(healthy, "etcd did not become healthy", 30)
        monkeypatch.setenv("NIXL_ETCD_ENDPOINTS", client)
        yield client
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_without_etcd_the_calls_say_why(monkeypatch):
    monkeypatch.delenv("NIXL_ETCD_ENDPOINTS", raising=False)
    a = make_agent("noetcd")
    try:
        for call in (lambda: a.send_local_metadata(), lambda: a.fetch_remote_metadata("x"),
                     lambda: a.invalidate_local_metadata()):
            if HAVE:  # no endpoints configured (or built without libcurl: not supported)
                with pytest.raises((nixl.nixlInvalidParamError, nixl.nixlNotSupportedError), match="etcd"):
                    call()
            else:
                with pytest.raises(NotImplementedError, match="issue 5"):
                    call()
                with pytest.raises(nixl.nixlNotSupportedError):
                    call()
        with pytest.raises(nixl.nixlInvalidParamError, match="label"):
            a.send_partial_agent_metadata([], label="")
    finally:
        a.close()


def test_publish_fetch_transfer_invalidate(etcd):
    a, b, c = make_agent("etcd-a"), make_agent("etcd-b"), make_agent("etcd-c")
    try:
        src, dst = nixl.alloc_array(1 << 20), nixl.alloc_array(1 << 20)
        src[:] = 42
        a.register_memory(src)
        reg = b.register_memory(dst)
        b.send_local_metadata()  # publish; returns at once
        a.fetch_remote_metadata(b.name)
        until(lambda: a.check_remote_metadata(b.name), "a never loaded b's metadata from etcd")

        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), reg.trim(), b.name, b"via-etcd")
        a.transfer(h)
        assert wait_state(a, h) == "DONE"
        wait_notif(b, a.name, b"via-etcd")
        assert int(dst.min()) == int(dst.max()) == 42

        b.send_partial_agent_metadata(reg, label="kv")  # labelled partial metadata
        c.fetch_remote_metadata(b.name, label="kv")
        until(lambda: c.check_remote_metadata(b.name, reg.trim()), "c never loaded b's partial metadata")

        b.invalidate_local_metadata()  # watchers forget b
        until(lambda: not a.check_remote_metadata(b.name), "a still knows b after b left etcd")
        with pytest.raises(nixl.nixlRemoteDisconnectError):
            a.transfer(h)
    finally:
        for x in (a, b, c):
            x.close()


def test_signed_blobs_with_a_shared_secret(etcd, tmp_path, monkeypatch):
    """NIXL_MD_SECRET_FILE (issue 15): blobs published to etcd are sealed with HMAC-SHA256; an agent
    with the secret loads only sealed ones that verify, one without it loads no sealed one, and a
    keyed agent does not load an unsigned blob (whoever can write etcd could have put it there)."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"a secret the deployment shares\n")
    secret.chmod(0o600)
    monkeypatch.setenv("NIXL_MD_SECRET_FILE", str(secret))
    signer, reader = make_agent("etcd-signer"), make_agent("etcd-reader")
    monkeypatch.delenv("NIXL_MD_SECRET_FILE")
    keyless, plain = make_agent("etcd-keyless"), make_agent("etcd-plain")
    try:
        signer.register_memory(nixl.alloc_array(1 << 16))
        plain.register_memory(nixl.alloc_array(1 << 16))
        signer.send_local_metadata()
        plain.send_local_metadata()
        reader.fetch_remote_metadata(signer.name)
        until(lambda: reader.check_remote_metadata(signer.name), "the keyed reader never loaded the signed blob")
        keyless.fetch_remote_metadata(signer.name)
        reader.fetch_remote_metadata(plain.name)
        keyless.fetch_remote_metadata(plain.name)
        # The keyless agent does load the unsigned blob (no secret, NIXL's default): once it has,
        # the refusals had their time too (the fetches run on one etcd thread per agent, in order).
        until(lambda: keyless.check_remote_metadata(plain.name), "the keyless agent never loaded the plain blob")
        time.sleep(0.5)
        assert not keyless.check_remote_metadata(signer.name), "a signed blob loaded without the secret"
        assert not reader.check_remote_metadata(plain.name), "an unsigned blob loaded into a keyed agent"
    finally:
        for x in (signer, reader, keyless, plain):
            x.close()
