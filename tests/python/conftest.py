"""Shared fixtures of the Python package's tests.

Run by Meson (tests/python/meson.build) from the build root, which is how the
package finds this build's libnixl; by hand:

    cd build && PYTHONPATH=../bindings/python /usr/bin/python3 -m pytest ../tests/python
"""

import itertools
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "bindings", "python"))

import nixl  # noqa: E402
from nixl._api import nixl_agent, nixl_agent_config  # noqa: E402

_names = itertools.count()


def unique(prefix):
    """Agent names unique in this process (several tests run in one)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


def make_agent(prefix, **conf):
    conf.setdefault("enable_prog_thread", False)
    return nixl_agent(unique(prefix), nixl_agent_config(**conf))


def introduce(a, b):
    """Each loads the other's metadata, as a connector does over its side channel (the name
    comes back as bytes, as NIXL's)."""
    assert a.add_remote_agent(b.get_agent_metadata()) == b.name.encode()
    assert b.add_remote_agent(a.get_agent_metadata()) == a.name.encode()


def wait_state(agent, handle, timeout=20.0):
    deadline = time.monotonic() + timeout
    state = agent.check_xfer_state(handle)
    while state == "PROC":
        assert time.monotonic() < deadline, "transfer did not complete"
        time.sleep(0.0005)
        state = agent.check_xfer_state(handle)
    return state


def wait_notif(agent, sender, tag, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not agent.check_remote_xfer_done(sender, tag):
        assert time.monotonic() < deadline, f"no notification {tag!r} from {sender}"
        time.sleep(0.001)


@pytest.fixture
def pair():
    """Two agents of this process (prefill, decode); introduce() them once memory is registered.
    They capture telemetry (NIXL's capture_telemetry, as vLLM's connector asks)."""
    a, b = make_agent("pre", capture_telemetry=True), make_agent("dec", capture_telemetry=True)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def build_root():
    return os.path.dirname(nixl.library_path)
