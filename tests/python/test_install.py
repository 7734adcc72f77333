"""bindings/python installs with pip (no network, no compiler) and the
installed package finds this build's libnixl."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import SRC


def test_pip_install_and_import(tmp_path, build_root):
    for mod in ("pip", "setuptools"):
        if subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True).returncode:
            pytest.skip(f"{sys.executable} has no {mod} (python3-pip / python3-setuptools)")
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "bindings", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--target", str(site), str(src)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NIXL_LIB")}
    env["PYTHONPATH"] = str(site)
    code = ("import nixl; from nixl._api import nixl_agent, nixl_agent_config; "
            "a = nixl_agent('installed', nixl_agent_config(enable_prog_thread=False)); "
            "print(nixl.__file__, nixl.library_path, sorted(a.backends)); a.close()")
    r = subprocess.run([sys.executable, "-c", code], cwd=build_root, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    file, lib, backends = r.stdout.split(" ", 2)
    assert file.startswith(str(site)) and os.path.dirname(lib) == build_root and "'UCX'" in backends
