"""Devices, arrays and threads of the similarity engine: numpy on the CPU (OpenBLAS float32
GEMM), torch on a GPU; float64 work spread over the process's CPUs."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

# --------------------------------------------------------------------------------------------
# Devices and arrays
# --------------------------------------------------------------------------------------------


def _torch():
    """The torch module if it is imported (an input can only be a tensor then), else None."""
    return sys.modules.get("torch")


def is_tensor(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def uses_torch(device: Any) -> bool:
    """The engine's device convention: ``None`` or the string ``"cpu"`` = numpy on the CPU;
    a ``torch.device`` (CUDA, or CPU for tests of the torch code) = torch."""
    return not (device is None or (isinstance(device, str) and device == "cpu"))


def engine_device(device: Any, *inputs: Any) -> Any:
    """The engine device for a public ``device`` argument: ``None`` → the device of a CUDA tensor
    among ``inputs``, else ``"cpu"``; any CPU device → ``"cpu"`` (numpy/OpenBLAS, the fastest
    float32 GEMM on the CPU); anything else → that ``torch.device``."""
    if device is not None:
        if isinstance(device, str) and device.split(":")[0] == "cpu":
            return "cpu"
        import torch

        device = torch.device(device)
        return "cpu" if device.type == "cpu" else device
    for x in inputs:
        if is_tensor(x) and x.device.type != "cpu":
            return x.device
    return "cpu"


def to_numpy(x: Any) -> np.ndarray:
    """A numpy view or copy of ``x`` (torch tensors are detached and moved to the CPU; bfloat16,
    which numpy lacks, becomes float32 exactly)."""
    if is_tensor(x):
        x = x.detach()
        if x.dtype == _torch().bfloat16:
            x = x.float()
        return x.cpu().numpy()
    return np.asarray(x)


def cpu_threads() -> int:
    """Helper threads for the float64 and reduction work on the CPU: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _map_chunks(fn: Callable[[int, int], None], n: int, chunk: int, threads: int) -> None:
    """Call ``fn(start, stop)`` over ``range(0, n, chunk)``, on ``threads`` threads (numpy releases
    the GIL inside its loops, so float64 work runs in parallel)."""
    spans = [(s, min(n, s + chunk)) for s in range(0, n, chunk)]
    if threads <= 1 or len(spans) <= 1:
        for s, e in spans:
            fn(s, e)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(spans))) as pool:
        for future in [pool.submit(fn, s, e) for s, e in spans]:
            future.result()

