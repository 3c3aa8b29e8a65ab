"""Mining's rows and exact cosines on the device (a GPU; the CPU through the same torch code in the
tests), the same bits as the host's :func:`~pseudopairs.similarity.unit_rows` and
:func:`~pseudopairs.similarity.cosine64_pairs`.

On a GPU the float32 GEMMs of the full mining job took 3.37 s and the job 6.55 s (H200,
docs/benchmarks.md): the rest was the host's numpy work on 566K + 145K rows — the finiteness
check, each row's shift and float64 norm, the float32 unit rows copied block by block to the
device — and the float64 rescoring of every candidate. Here the rows go to the device once, as
given, and

* :func:`device_unit_rows` computes each row's shift (``frexp`` of its largest magnitude) and its
  sum of squares ``dot64(x, x)`` there — the host's formula for rows of ≤ 4-byte floats, in numpy's
  pairwise order (:func:`~pseudopairs.similarity.device_ranks.pairwise_sum64`) — and the norm
  ``2**-shift·sqrt(·)`` from those n numbers on the host (torch's CPU sqrt is not correctly
  rounded), so the same bits;
* :meth:`DeviceUnitRows.unit_block` normalises a block of rows on the device (no host copy);
* :func:`device_cosine_pairs` rescores candidate pairs: ``dot64`` of the raw rows in numpy's order,
  scaled by ``2**-(e_x + e_y)`` and divided by the two norms — each step an IEEE float64 operation,
  so the bits of :func:`~pseudopairs.similarity.cosine64_pairs`.

Rows wider than 4 bytes (float64 input) keep the host path (the shifted float64 rows there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pseudopairs.similarity.device_ranks import PAIR_CHUNK, pairwise_sum64
from pseudopairs.similarity.rows import UnitRows


@dataclass(frozen=True)
class DeviceUnitRows(UnitRows):
    """:class:`~pseudopairs.similarity.UnitRows` (host ``raw``, ``shift``, ``norm`` as numpy) with
    the rows, shifts and norms on the device too."""

    data: Any = None          # the rows as given, on the device
    device_shift: Any = None  # int64
    device_norm: Any = None   # float64

    def unit_block(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` scaled to unit length, float32, on the device (as the torch path of
        :class:`~pseudopairs.similarity.UnitRowSource` computes them from host rows)."""
        factor = torch.ldexp(torch.ones(stop - start, dtype=torch.float64, device=self.data.device),
                             -self.device_shift[start:stop]) / self.device_norm[start:stop]
        return (self.data[start:stop].double() * factor[:, None]).float().contiguous()


def same_device(a: Any, b: Any) -> bool:
    """Whether two torch devices are one (``cuda`` is the current CUDA device, ``cuda:0`` here)."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def narrow(x: Any) -> bool:
    """Whether ``x`` holds floats of at most 4 bytes (float64 products of them are exact)."""
    dtype = x.dtype
    if isinstance(x, torch.Tensor):
        return x.is_floating_point() and x.element_size() <= 4
    return np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize <= 4


def device_unit_rows(raw: np.ndarray, *, name: str, device: torch.device, tensor: Any = None) -> DeviceUnitRows:
    """:func:`~pseudopairs.similarity.unit_rows` of a matrix of ≤ 4-byte floats (``raw``, numpy,
    shape-checked), computed on ``device`` (``tensor``: the same values already there, e.g. the
    encoder's output); a row with NaN or infinity, or of zeros, is a ValueError naming ``name``
    and the row (the host check's messages)."""
    data = tensor if tensor is not None else torch.from_numpy(np.ascontiguousarray(raw))
    data = data.detach().to(device)
    if data.dtype == torch.bfloat16:
        data = data.float()
    n = data.shape[0]
    shift = torch.empty(n, dtype=torch.int64, device=device)
    total = torch.empty(n, dtype=torch.float64, device=device)
    for s in range(0, n, PAIR_CHUNK):
        part = data[s: s + PAIR_CHUNK]
        bad = torch.nonzero(~torch.isfinite(part).all(dim=1))
        if bad.numel():
            raise ValueError(f"{name}: row {s + int(bad[0, 0])} contains NaN or infinite values")
        peak = part.abs().amax(dim=1).double()
        zero = torch.nonzero(peak == 0)
        if zero.numel():
            raise ValueError(f"{name}: row {s + int(zero[0, 0])} is all zeros; its cosine is undefined")
        shift[s: s + PAIR_CHUNK] = torch.frexp(peak).exponent.to(torch.int64) - 1
        squares = part.double() * part.double()
        total[s: s + PAIR_CHUNK] = pairwise_sum64(squares)
    # the square root on the host: IEEE's correctly rounded sqrt, which numpy computes and torch's
    # vectorised CPU sqrt does not (it differs in the last bit for ~1 % of values); n numbers only
    host_shift = shift.cpu().numpy()
    host_norm = np.ldexp(np.sqrt(total.cpu().numpy()), -host_shift)
    return DeviceUnitRows(raw=raw, shift=host_shift, norm=host_norm, data=data, device_shift=shift,
                          device_norm=torch.from_numpy(host_norm).to(device))


def device_cosine_pairs(a: DeviceUnitRows, b: DeviceUnitRows, *, a_rows: np.ndarray, b_rows: np.ndarray) -> np.ndarray:
    """``cos64(a[a_rows[i]], b[b_rows[i]])`` (float64, numpy) computed on the device: the bits of
    :func:`~pseudopairs.similarity.cosine64_pairs` (module docstring)."""
    device = a.data.device
    ia = torch.as_tensor(np.asarray(a_rows, dtype=np.int64), device=device)
    ib = torch.as_tensor(np.asarray(b_rows, dtype=np.int64), device=device)
    out = torch.empty(ia.shape[0], dtype=torch.float64, device=device)
    for s in range(0, ia.shape[0], PAIR_CHUNK):
        x, y = ia[s: s + PAIR_CHUNK], ib[s: s + PAIR_CHUNK]
        dots = pairwise_sum64(a.data[x].double() * b.data[y].double())
        dots = torch.ldexp(dots, -(a.device_shift[x] + b.device_shift[y]))
        out[s: s + PAIR_CHUNK] = dots / (a.device_norm[x] * b.device_norm[y])
    return out.cpu().numpy()
