"""NIXL's Python names and behaviours, one by one, against what NIXL documents.

Each test names the NIXL behaviour it holds us to (docs/python.md has the
table of where we differ on purpose).
"""

import pytest

import nixl
import nixl._bindings as nb
from nixl._api import nixl_agent, nixl_agent_config, nixl_thread_sync_t, nixlBind

from conftest import unique


def test_engines_imports_resolve():
    # SGLang, LightLLM: from nixl._api import nixl_agent, nixl_agent_config, nixl_thread_sync_t
    # LMCache: from nixl._api import nixlBind (the bindings module itself)
    assert nixlBind is nb
    import nixl._api as api
    for name in ("nixl_agent", "nixl_agent_config", "nixl_thread_sync_t", "nixl_prepped_dlist_handle",
                 "nixl_xfer_handle", "nixlBind", "DEFAULT_COMM_PORT"):
        assert hasattr(api, name), name


def test_thread_sync_values_are_nixls():
    # NIXL: enum class nixl_thread_sync_t { NONE, STRICT, RW, DEFAULT = NONE }
    assert (nb.NIXL_THREAD_SYNC_NONE, nb.NIXL_THREAD_SYNC_STRICT, nb.NIXL_THREAD_SYNC_RW) == (0, 1, 2)
    assert nb.NIXL_THREAD_SYNC_DEFAULT == nb.NIXL_THREAD_SYNC_NONE
    t = nixl_thread_sync_t
    assert [m.value for m in (t.NIXL_THREAD_SYNC_NONE, t.NIXL_THREAD_SYNC_STRICT, t.NIXL_THREAD_SYNC_RW)] == [0, 1, 2]
    assert t.NIXL_THREAD_SYNC_DEFAULT is t.NIXL_THREAD_SYNC_NONE
    assert nixl.nixl_thread_sync_t is t


@pytest.mark.parametrize("bad", [1, "NIXL_THREAD_SYNC_STRICT", True, 0.0, object()])
def test_sync_mode_of_another_type_is_type_error(bad):
    with pytest.raises(TypeError, match="nixl_thread_sync_t"):
        nixl_agent_config(sync_mode=bad)


def test_sync_mode_default_follows_the_listener():
    # NIXL's rule: None means STRICT when a listener runs, else NONE.
    quiet = nixl_agent(unique("sync"), nixl_agent_config(backends=[], enable_prog_thread=False))
    listening = nixl_agent(unique("sync"), nixl_agent_config(backends=[], enable_prog_thread=False,
                                                             enable_listen_thread=True, listen_port=0))
    try:
        assert quiet.sync_mode is nixl_thread_sync_t.NIXL_THREAD_SYNC_NONE
        assert listening.sync_mode is nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT
    finally:
        quiet.close()
        listening.close()


@pytest.mark.parametrize("mode", list(nixl_thread_sync_t))
def test_sglang_start_up_runs_in_every_mode(mode):
    # SGLang's NixlKVManager: nixl_agent_config(backends=[], num_threads=8, sync_mode=STRICT), then
    # create_backend(backend, params) and a registration.
    conf = nixl_agent_config(backends=[], num_threads=8, sync_mode=mode)
    assert conf.sync_mode is mode
    agent = nixl_agent(unique("sglang"), conf)
    try:
        assert agent.sync_mode is mode
        agent.create_backend("UCX", {"num_threads": "8"})
        buf = nixl.alloc_array(4096)
        descs = agent.register_memory(buf)
        assert descs is not None and len(descs) == 1
        agent.deregister_memory(descs)
    finally:
        agent.close()
