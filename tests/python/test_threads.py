"""Several Python threads on one agent; the GIL is released while C blocks."""

import os
import socket
import threading
import time


import pytest

import nixl
from nixl._api import nixl_thread_sync_t

from conftest import introduce, make_agent, wait_state


def test_gil_is_released_while_a_call_blocks(pair):
    a, _ = pair
    silent = socket.socket()  # accepts (backlog) and never answers: the fetch waits for its timeout
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    port = silent.getsockname()[1]
    old = os.environ.get("NIXL_MD_TIMEOUT_MS")
    os.environ["NIXL_MD_TIMEOUT_MS"] = "1000"
    result = {}

    def fetch():
        t = time.monotonic()
        try:
            a.fetch_remote_metadata("x", "127.0.0.1", port)
        except nixl.nixlError as e:
            result["error"] = e
        result["secs"] = time.monotonic() - t

    try:
        th = threading.Thread(target=fetch)
        th.start()
        spins = 0
        while th.is_alive():  # Python work on this thread while the other sits in C
            spins += 1
        th.join()
    finally:
        silent.close()
        if old is None:
            del os.environ["NIXL_MD_TIMEOUT_MS"]
        else:
            os.environ["NIXL_MD_TIMEOUT_MS"] = old
    assert isinstance(result.get("error"), nixl.nixlBackendError) and result["error"].status_name == "NIXL_ERR_TIMEOUT"
    assert 0.8 < result["secs"] < 5
    # Held, the GIL allows ~10k turns (before the call starts); released, millions.
    assert spins > 100000, f"only {spins} loop turns in {result['secs']:.1f} s: the GIL was held"


# NIXL's RW mode promises concurrent posts and polls from many threads; every
# mode gives the same serialized C agent here, so each must hold it.
@pytest.mark.parametrize("sync_mode", [None, nixl_thread_sync_t.NIXL_THREAD_SYNC_RW,
                                       nixl_thread_sync_t.NIXL_THREAD_SYNC_NONE])
def test_threads_post_on_one_agent_and_notifications_arrive_once(sync_mode):
    a = make_agent("mt", sync_mode=sync_mode)
    b = make_agent("mt", enable_prog_thread=True, sync_mode=sync_mode)
    threads, rounds, n = 4, 25, 1 << 16
    src = [nixl.alloc_array(n) for _ in range(threads)]
    dst = [nixl.alloc_array(n) for _ in range(threads)]
    a.register_memory(src)
    b.register_memory(dst)
    introduce(a, b)
    errors, seen = [], []

    def worker(t):
        try:
            for r in range(rounds):
                src[t][:] = (t * rounds + r) % 251
                h = a.initialize_xfer("WRITE", a.get_xfer_descs(src[t]), a.get_xfer_descs(dst[t]), b.name,
                                      f"t{t}-r{r}")
                a.transfer(h)
                assert wait_state(a, h) == "DONE"
                assert int(dst[t][0]) == int(dst[t][-1]) == (t * rounds + r) % 251
                a.release_xfer_handle(h)
        except Exception as e:  # reported below
            errors.append(e)

    def drain():  # two of these compete for the same notifications
        end = time.monotonic() + 60
        while len(seen) < threads * rounds and time.monotonic() < end and not errors:
            for msgs in b.get_new_notifs().values():
                seen.extend(msgs)
            time.sleep(0.0005)

    ths = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    ths += [threading.Thread(target=drain) for _ in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    a.close()
    b.close()
    assert not errors, errors
    assert sorted(seen) == sorted(f"t{t}-r{r}".encode() for t in range(threads) for r in range(rounds))


def test_release_racing_use_is_refused_not_crashed(pair):
    a, b = pair
    src, dst = nixl.alloc_array(4096), nixl.alloc_array(4096)
    a.register_memory(src)
    b.register_memory(dst)
    introduce(a, b)
    for _ in range(20):
        h = a.initialize_xfer("WRITE", a.get_xfer_descs(src), a.get_xfer_descs(dst), b.name)
        a.transfer(h)
        outcome = []

        def poll():
            try:
                while True:
                    a.check_xfer_state(h)
            except nixl.nixlInvalidParamError as e:
                outcome.append(str(e))

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.001)
        a.release_xfer_handle(h)
        th.join(timeout=10)
        assert outcome and "released" in outcome[0]
