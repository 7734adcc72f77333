"""Metadata through etcd: NIXL's send/fetch/invalidate without an address.
Needs a libnixl with the etcd calls and the etcd binary (a private server is
started); otherwise the calls must say why they cannot work.  The TLS and
etcd-user tests also need openssl and etcdctl (they skip, saying so)."""

import os
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


def free_ports(n):
    """n distinct ports nobody listens on now (each socket held until all are picked)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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


# ---- etcd over TLS, with users (issue 15) ----

OPENSSL = shutil.which("openssl")
ETCDCTL = shutil.which("etcdctl")
MAKE_CERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration", "etcd", "make_certs.sh")
TOKEN_TTL_S = 2


@pytest.fixture
def secure_etcd(tmp_path, monkeypatch):
    """An etcd with https:// URLs, --client-cert-auth and auth enabled (2-second simple tokens):
    root, and alice whose role reads and writes the nixl namespace.  The environment of the
    agents made afterwards is set for it (CA, client certificate, alice and her password file);
    yields the paths a test may swap."""
    if not HAVE:
        pytest.skip("this libnixl has no etcd calls")
    for binary, package in ((ETCD, "etcd-server"), (ETCDCTL, "etcd-client"), (OPENSSL, "openssl")):
        if not binary:
            pytest.skip(f"no {package} binary (apt-get install {package})")
    certs = tmp_path / "certs"
    subprocess.run(["sh", MAKE_CERTS, str(certs)], check=True, stdout=subprocess.DEVNULL)
    log = open(tmp_path / "etcd.log", "w")

    def start():
        cp, pp, mp = free_ports(3)
        client, peer, metrics = f"https://127.0.0.1:{cp}", f"http://127.0.0.1:{pp}", f"http://127.0.0.1:{mp}"
        proc = subprocess.Popen([ETCD, "--name", "t", "--data-dir", str(tmp_path / f"data-{cp}"),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                 "--initial-cluster", f"t={peer}", "--initial-cluster-state", "new",
                                 "--log-level", "error", "--listen-metrics-urls", metrics,
                                 "--cert-file", str(certs / "server.pem"), "--key-file", str(certs / "server.key"),
                                 "--trusted-ca-file", str(certs / "ca.pem"), "--client-cert-auth",
                                 "--auth-token", "simple", "--auth-token-ttl", str(TOKEN_TTL_S),
                                 "--bcrypt-cost", "4"], stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:  # the plain-HTTP metrics listener answers /health too
                if b"true" in urllib.request.urlopen(metrics + "/health", timeout=1).read():
                    return proc, client
            except OSError:
                pass
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=30)
        return None, client

    for _ in range(3):  # a port taken between our pick and etcd's bind: pick again
        proc, client = start()
        if proc:
            break
    assert proc, f"etcd with TLS did not become healthy: {(tmp_path / 'etcd.log').read_text()}"
    ctl = [ETCDCTL, f"--endpoints={client}", f"--cacert={certs / 'ca.pem'}", f"--cert={certs / 'client.pem'}",
           f"--key={certs / 'client.key'}"]
    try:
        env = dict(os.environ, ETCDCTL_API="3")
        for args in (["user", "add", "root:rootpw", "--interactive=false"],
                     ["user", "add", "alice:alicepw", "--interactive=false"], ["role", "add", "nixl"],
                     ["role", "grant-permission", "nixl", "--prefix=true", "readwrite", "/nixl/"],
                     ["user", "grant-role", "alice", "nixl"], ["auth", "enable"]):
            subprocess.run(ctl + args, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        password = tmp_path / "alice.password"
        password.write_text("alicepw\n")
        password.chmod(0o600)
        paths = {"ca": certs / "ca.pem", "other_ca": certs / "other-ca.pem", "cert": certs / "client.pem",
                 "key": certs / "client.key", "password": password, "url": client}
        for var, value in (("NIXL_ETCD_ENDPOINTS", client), ("NIXL_ETCD_CA_FILE", paths["ca"]),
                           ("NIXL_ETCD_CERT_FILE", paths["cert"]), ("NIXL_ETCD_KEY_FILE", paths["key"]),
                           ("NIXL_ETCD_USER", "alice"), ("NIXL_ETCD_PASSWORD_FILE", password)):
            monkeypatch.setenv(var, str(value))
        yield paths
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_tls_and_user_publish_fetch_transfer_token_renewed(secure_etcd):
    """Two agents find each other through an etcd that wants TLS, a client certificate and a user;
    a transfer runs on the metadata loaded from it; past the token's TTL both renew theirs and a
    publish and a fetch still work."""
    a, b = make_agent("tls-a"), make_agent("tls-b")
    try:
        src, dst = nixl.alloc_array(1 << 16), nixl.alloc_array(1 << 16)
        src[:] = 7
        a.register_memory(src)
        reg = b.register_memory(dst)
        b.send_local_metadata()
        a.fetch_remote_metadata(b.name)
        until(lambda: a.check_remote_metadata(b.name), "a never loaded b's metadata over TLS")
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), reg.trim(), b.name, b"over-tls")
        a.transfer(h)
        assert wait_state(a, h) == "DONE"
        wait_notif(b, a.name, b"over-tls")
        assert int(dst.min()) == int(dst.max()) == 7

        # Idle past the TTL (etcd drops tokens on a 1 s tick; keep-alives carry no auth): both expire.
        time.sleep(2 * TOKEN_TTL_S + 1)
        b.send_partial_agent_metadata(reg, label="kv")
        a.fetch_remote_metadata(b.name, label="kv")
        until(lambda: a.check_remote_metadata(b.name, reg.trim()), "no partial metadata after the token expired")
    finally:
        for x in (a, b):
            x.close()


def test_tls_wrong_ca_loads_nothing(secure_etcd, monkeypatch, capfd):
    b = make_agent("tls-good")
    monkeypatch.setenv("NIXL_ETCD_CA_FILE", str(secure_etcd["other_ca"]))
    a = make_agent("tls-wrong-ca")
    try:
        b.register_memory(nixl.alloc_array(1 << 12))
        b.send_local_metadata()
        a.fetch_remote_metadata(b.name)
        deadline = time.monotonic() + 10
        err = ""
        while "TLS failed" not in err and time.monotonic() < deadline:
            time.sleep(0.1)
            err += capfd.readouterr().err
        assert f"etcd {secure_etcd['url']}: TLS failed" in err, err
        assert "unable to get local issuer certificate" in err, err  # curl's own words
        time.sleep(1)
        assert not a.check_remote_metadata(b.name), "metadata loaded through an etcd the CA does not vouch for"
    finally:
        for x in (a, b):
            x.close()


def test_wrong_password_loads_nothing(secure_etcd, tmp_path, monkeypatch, capfd):
    b = make_agent("auth-good")
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-alices-password\n")
    wrong.chmod(0o600)
    monkeypatch.setenv("NIXL_ETCD_PASSWORD_FILE", str(wrong))
    a = make_agent("auth-wrong")
    try:
        b.register_memory(nixl.alloc_array(1 << 12))
        b.send_local_metadata()
        a.fetch_remote_metadata(b.name)
        deadline = time.monotonic() + 10
        err = ""
        while "authenticating as user alice failed" not in err and time.monotonic() < deadline:
            time.sleep(0.1)
            err += capfd.readouterr().err
        assert (f"etcd {secure_etcd['url']}: authenticating as user alice failed: etcdserver: authentication "
                "failed, invalid user ID or password") in err, err
        time.sleep(1)
        assert not a.check_remote_metadata(b.name), "metadata loaded with a wrong password"
    finally:
        for x in (a, b):
            x.close()


def test_tls_and_user_settings_refused_at_first_use(tmp_path, monkeypatch, capfd):
    """Wrong settings fail the first etcd call at once, with a line saying why; no etcd needed."""
    if not HAVE:
        pytest.skip("this libnixl has no etcd calls")
    pem = tmp_path / "ca.pem"
    pem.write_text("only opened before the first connection\n")
    password = tmp_path / "password"
    password.write_text("pw\n")
    password.chmod(0o644)
    monkeypatch.setenv("NIXL_ETCD_ENDPOINTS", "https://127.0.0.1:1")
    cases = [
        ({"NIXL_ETCD_CERT_FILE": str(pem)}, "NIXL_ETCD_CERT_FILE is set but NIXL_ETCD_KEY_FILE is not"),
        ({"NIXL_ETCD_CA_FILE": str(tmp_path / "missing.pem")}, "cannot be read: No such file or directory"),
        ({"NIXL_ETCD_USER": "alice"}, "NIXL_ETCD_USER is set but no password"),
        ({"NIXL_ETCD_USER": "alice", "NIXL_ETCD_PASSWORD_FILE": str(password)},
         "can be read or written by others (mode 0644)"),
        ({"NIXL_ETCD_CA_FILE": str(pem), "NIXL_ETCD_ENDPOINTS": "http://127.0.0.1:1"}, "use https://"),
    ]
    for env, why in cases:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            a = make_agent("tls-config")
            try:
                capfd.readouterr()
                with pytest.raises(nixl.nixlError):
                    a.fetch_remote_metadata("anyone")
                assert why in capfd.readouterr().err, why
            finally:
                a.close()
