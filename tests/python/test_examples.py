"""The Python examples run as tests (small sizes)."""

import os
import re
import subprocess
import sys

from conftest import SRC

EXAMPLES = os.path.join(SRC, "examples", "python")
SMALL = ["--requests", "24", "--layers", "4", "--pages", "256", "--src-pages", "128", "--page-bytes", "4096",
         "--min-pages", "4", "--max-pages", "32", "--window", "6"]


def run(script, args=SMALL):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SRC, "bindings", "python"),
                                                      os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script)] + args, env=env, capture_output=True,
                          text=True, timeout=240)


def test_kv_connector_dram():
    r = run("kv_connector.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "decode: 24 requests verified, 0 bad" in r.stdout and "'shm.map': 24" in r.stdout, r.stdout


def test_kv_connector_gpu_runs_or_says_why_not():
    r = run("kv_connector_gpu.py")
    if r.returncode == 77:
        assert r.stdout.startswith("SKIP: ") and len(r.stdout.strip()) > len("SKIP: "), r.stdout
        print(r.stdout.strip())
    else:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "decode: 24 requests verified, 0 bad" in r.stdout, r.stdout


def test_two_peers_both_sides_verify_every_row():
    r = run("two_peers.py", [])  # spawns the target, runs the initiator
    assert r.returncode == 0, r.stdout + r.stderr
    assert "initiator: 4 READs (twice), 2 WRITEs, 896 bytes in the last posts; rows verified" in r.stdout, r.stdout
    assert "target: 2 writes, 8 reads notified; rows verified" in r.stdout, r.stdout


def test_kv_offload_pages_through_a_file_into_other_slots(tmp_path):
    """examples/python/kv_offload.py at a small shape: a WRITE of every page to a file and a READ
    into other slots, both one request through POSIX, every byte compared by the example; on the
    default path (posix.uring, or posix.sync where io_uring is refused) and on posix.sync; with
    --file the file stays, one page per (layer, token)."""
    kept = tmp_path / "kv.bin"
    for extra, paths in (([], ("posix.uring", "posix.sync")), (["--sync", "--file", str(kept)], ("posix.sync",))):
        r = run("kv_offload.py", ["--tokens", "256", "--layers", "3"] + extra)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "result:          OK, every byte came back" in r.stdout, r.stdout
        assert "768 pages, 884,736 B" in r.stdout and "768 pieces given" in r.stdout, r.stdout
        took = re.findall(r"path: +(\S+) \(backend posix\)", r.stdout)
        assert len(took) == 2 and all(p in paths for p in took), r.stdout
    assert kept.stat().st_size == 768 * 1152


def test_kv_e2e_tool_moves_and_verifies_every_slot():
    """tools/kv_e2e.py (the whole-request benchmark) at a small shape: both engine shapes run,
    decode finds every slot's bytes, and the table names every phase."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SRC, "bindings", "python"),
                                                      os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, os.path.join(SRC, "tools", "kv_e2e.py"), "--layers", "3", "--tokens", "512",
                        "--item", "96", "--reqs", "3"], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1536 descriptors per request" in r.stdout, r.stdout
    assert "# bytes verified: all slots correct" in r.stdout, r.stdout
    assert any(line.startswith("sglang ") for line in r.stdout.splitlines()), r.stdout
    assert any(line.startswith("vllm ") for line in r.stdout.splitlines()), r.stdout
    assert any(line.startswith("indexed ") for line in r.stdout.splitlines()), r.stdout


def test_kv_create_tool_runs(build_root):
    """tools/kv_create.py (SGLang's request made from Python, no copy) at a small shape, on shm
    and, where the build has it, on the unit tests' fake_indexed module (the indexed path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SRC, "bindings", "python"),
                                                      os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, os.path.join(SRC, "tools", "kv_create.py"), "--layers", "3", "--tokens", "256",
           "--item", "64", "--reqs", "2"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "# kv_create: shm (shm." in r.stdout and "total" in r.stdout, r.stdout + r.stderr
    plugins = os.path.join(build_root, "tests", "unit", "core")
    if os.path.exists(os.path.join(plugins, "libnixl_backend_fake_indexed.so")):
        env["NIXL_PLUGIN_DIR"] = plugins + os.pathsep + os.environ.get("NIXL_PLUGIN_DIR", "")
        r = subprocess.run(cmd + ["--backend", "fake_indexed", "--param", "indexed=1"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and "(fake.indexed)" in r.stdout, r.stdout + r.stderr


def test_listener_on_a_reachable_address_warns_once(tmp_path):
    """An agent whose unauthenticated listener binds an address other hosts reach says so once per
    process, naming the risk and the fixes (docs/trust.md); on loopback, or with a shared secret
    (NIXL_MD_SECRET_FILE), it says nothing."""
    code = ("from nixl._api import nixl_agent, nixl_agent_config\n"
            "a = nixl_agent('w1', nixl_agent_config(enable_listen_thread=True, backends=[]))\n"
            "b = nixl_agent('w2', nixl_agent_config(enable_listen_thread=True, backends=[]))\n"
            "a.close(); b.close()\n")
    base = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SRC, "bindings", "python"),
                                                       os.environ.get("PYTHONPATH", "")]))
    secret = tmp_path / "secret"
    secret.write_text("a secret shared by the deployment\n")
    secret.chmod(0o600)
    for addr, want, extra in (("0.0.0.0", 1, {}), ("127.0.0.1", 0, {}),
                              ("0.0.0.0", 0, {"NIXL_MD_SECRET_FILE": str(secret)})):
        env = dict(base, NIXL_LISTEN_ADDR=addr, **extra)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        lines = [l for l in r.stderr.splitlines() if "is not authenticated" in l]
        assert len(lines) == want, (addr, r.stderr)
        if want:
            assert "NIXL_LISTEN_ADDR=127.0.0.1" in lines[0] and "NIXL_MD_SECRET_FILE" in lines[0], lines[0]
            assert f"{addr}:" in lines[0], lines[0]
