"""The target process of test_two_procs.py: one agent with a metadata
listener and one registered buffer, driven by JSON commands on stdin (one
per line, one JSON answer per line on stdout).

    peer.py NAME NBYTES SHARED(0|1)

Partial metadata: "register2" registers a second buffer (its own region),
"send_partial" sends the partial metadata of one buffer to a listener.
"""

import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))

import numpy as np  # noqa: E402

import nixl  # noqa: E402
from nixl._api import nixl_agent, nixl_agent_config  # noqa: E402


def pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 13 + seed) % 251).astype(np.uint8)


def main():
    name, n, shared = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    agent = nixl_agent(name, nixl_agent_config(enable_listen_thread=True, backends=["UCX"]))
    buf = nixl.alloc_array(n) if shared else np.zeros(n, np.uint8)
    reg = agent.register_memory(buf)
    regs = {"buf": reg}
    bufs = [buf]
    out = sys.stdout

    def reply(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    reply(port=agent.listen_port, addr=buf.ctypes.data, len=n, pid=os.getpid())
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["cmd"]
        try:
            if op == "wait_notif":
                deadline = time.monotonic() + cmd.get("timeout", 20)
                while not agent.check_remote_xfer_done(cmd["sender"], cmd["tag"].encode()):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no notification {cmd['tag']!r} from {cmd['sender']}")
                    time.sleep(0.001)
                reply(ok=True)
            elif op == "sha":
                reply(sha=hashlib.sha256(buf.tobytes()).hexdigest())
            elif op == "fill":
                buf[:] = pattern(n, cmd["seed"])
                reply(ok=True)
            elif op == "notify":
                agent.send_notif(cmd["to"], cmd["msg"].encode())
                reply(ok=True)
            elif op == "register2":
                buf2 = nixl.alloc_array(cmd["n"])
                buf2[:] = pattern(cmd["n"], cmd["seed"])
                bufs.append(buf2)
                regs["buf2"] = agent.register_memory(buf2)
                reply(addr=buf2.ctypes.data)
            elif op == "send_partial":
                agent.send_partial_agent_metadata(regs[cmd["which"]], cmd["conn"], None, "127.0.0.1", cmd["port"])
                reply(ok=True)
            elif op == "known":
                reply(known=agent.check_remote_metadata(cmd["peer"]))
            elif op == "crash":
                os._exit(3)
            elif op == "quit":
                for r in regs.values():
                    agent.deregister_memory(r)
                agent.close()
                reply(ok=True)
                return 0
        except Exception as e:  # the test prints it
            reply(error=f"{type(e).__name__}: {e}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
