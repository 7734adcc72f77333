#!/usr/bin/env python3
"""kv_connector_gpu.py - kv_connector.py with the KV caches in GPU memory:
prefill's on cuda:0, decode's on cuda:1, as torch tensors (one per layer).

    PYTHONPATH=bindings/python python3 examples/python/kv_connector_gpu.py [same options as kv_connector.py]

The flow is kv_connector.py's, unchanged: tensors are registered as they are
(register_memory(list of tensors): VRAM descriptors found by duck typing),
page lists are prepared once, and the transfer worker thread -- which never
calls torch.cuda.set_device -- posts WRITEs of many page-sized descriptors
while decode waits on notifications and verifies the pages on its GPU.

It prints "SKIP: <reason>" and exits 77 when torch, CUDA, two GPUs or a
libnixl backend for VRAM is missing.
"""

from __future__ import annotations

import os
import sys

SKIP = 77


def skip(reason: str) -> int:
    print(f"SKIP: {reason}")
    return SKIP


def preflight() -> str:
    """Why this machine cannot run the example, or "" when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if torch.cuda.device_count() < 2:
        return f"two GPUs needed, torch sees {torch.cuda.device_count()}"
    import nixl
    if not any("VRAM" in b["mem_types"] for b in nixl.available_backends().values()):
        return "this libnixl has no backend for VRAM yet (the GPU backend: issue 3)"
    return ""


class TorchPool:
    """A KV cache on one GPU: one (pages x page_bytes) uint8 tensor per layer."""

    mem_type = "VRAM"

    def __init__(self, layers: int, pages: int, page_bytes: int, device: int = 0):
        import torch
        self.torch = torch
        self.dev = device
        self.device = torch.device("cuda", device)
        self.layers = [torch.zeros((pages, page_bytes), dtype=torch.uint8, device=self.device)
                       for _ in range(layers)]
        self._ramp = torch.arange(page_bytes, dtype=torch.int64, device=self.device)

    def buffers(self) -> list:
        return self.layers

    def base(self, layer: int) -> int:
        return self.layers[layer].data_ptr()

    def _pattern(self, seeds) -> "object":
        s = self.torch.as_tensor(seeds, dtype=self.torch.int64, device=self.device)
        return ((self._ramp[None, :] + s[:, None]) % 251).to(self.torch.uint8)

    def fill(self, layer: int, pages, seeds) -> None:
        idx = self.torch.as_tensor(pages, dtype=self.torch.int64, device=self.device)
        self.layers[layer][idx] = self._pattern(seeds)

    def check(self, layer: int, pages, seeds) -> bool:
        idx = self.torch.as_tensor(pages, dtype=self.torch.int64, device=self.device)
        return bool(self.torch.equal(self.layers[layer][idx], self._pattern(seeds)))

    def sync(self) -> None:
        # Kernels that wrote the pages must finish before another engine reads them.
        self.torch.cuda.synchronize(self.device)


def main() -> int:
    role_decode = "--role" in sys.argv and sys.argv[sys.argv.index("--role") + 1] == "decode"
    if not role_decode:
        why = preflight()
        if why:
            return skip(why)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kv_connector
    return kv_connector.main(TorchPool)


if __name__ == "__main__":
    sys.exit(main())
