"""Exact retrieval ranks under the ``order`` similarity (:mod:`pseudopairs.similarity.functions`).

``s(v, c) = −E(v, c)`` with the order violation ``E(v, c) = ‖max(0, c − v)‖²`` of an image row
``v`` and a caption row ``c``. It is no dot product, so the float32 GEMM of the cosine engine does
not apply; instead the score matrix is computed **in float64, in blocks**, and every decision is
made on those float64 values.

Exact scores
------------
One deterministic routine computes ``E`` wherever it is needed (a block of the matrix, or a list
of pairs): both rows converted to float64 (exact for float16/32/64 inputs), ``c − v`` elementwise,
``max(·, 0)``, squared elementwise, then summed over the dimension by a fixed **halving tree**
(:func:`halving_sum_`: the upper part of the row is added onto the lower part, then halves are
added until one value is left — an order fixed by the dimension alone). Every step is one IEEE
float64 operation per element (subtraction, maximum, multiplication, addition), done the same way
by numpy on the CPU and by torch on a GPU, so the same pair of rows gives the same bits in a block,
in a pair list, on either device. Its rounding error is about ``(⌈log2 d⌉ + 3)·u·E`` at most
(u = 2**-53; all terms are ≥ 0) — irrelevant to the ranks, which are defined on these values.

Ranks
-----
The rule of :mod:`pseudopairs.similarity.ranks`: a query's rank is the number of candidates whose
exact score is **strictly higher** than the correct item's (here: whose violation is strictly
lower), so ties — equal float64 values, e.g. duplicate rows — favour the correct item; for I→T the
correct score is the best over the image's captions. :func:`order_rank_counts` first computes
each caption's violation with its own image (the pair routine), then walks the
images × captions matrix in blocks of at most ``block_elements`` elements of the
``rows × cols × d`` float64 intermediate (2**16 = 512 KiB per thread on the CPU, cache-sized;
2**26 on a GPU), so memory stays bounded for any number of images and captions; each block adds,
per image row, the captions below that image's best violation and, per caption column, the images
below the caption's own violation. CPU blocks run on numpy over the process's CPUs; a CUDA device
runs the same operations in torch float64. Cost: ``n·m·d`` pairs of coordinates, a few float64
operations each (measured on one loaded CPU core: ≈ 5 s per 10^9, so ≈ 25 s for 1,000 × 5,000 at
d = 1,024; the demo's 200 × 1,000 at d = 128 takes ≈ 0.1 s).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
from tqdm import tqdm

from pseudopairs.similarity.arrays import _map_chunks, cpu_threads, is_tensor, to_numpy, uses_torch

CPU_BLOCK_ELEMENTS = 1 << 16   # float64 elements of one block's rows × cols × d intermediate (CPU)
CUDA_BLOCK_ELEMENTS = 1 << 26  # the same on a GPU
_PAIR_CHUNK = 512               # pairs per chunk of the pair routine


# --------------------------------------------------------------------------------------------
# The deterministic float64 routine
# --------------------------------------------------------------------------------------------


def halving_sum_(x: Any) -> Any:
    """Σ over the last axis of ``x`` (numpy or torch), IN PLACE, by a halving tree: with ``h`` the
    largest power of two below ``d``, elements ``h..d−1`` are added onto ``0..d−h−1``, then
    ``x[..., h:2h]`` onto ``x[..., :h]`` for h = h/2, …, 1. Elementwise additions only, in an order
    fixed by ``d``: identical bits for identical rows, whatever the leading axes. Returns the view
    ``x[..., 0]``."""
    d = x.shape[-1]
    if d > 1:
        h = 1 << ((d - 1).bit_length() - 1)
        x[..., : d - h] += x[..., h:d]
        while h > 1:
            h //= 2
            x[..., :h] += x[..., h: 2 * h]
    return x[..., 0]


def _violation_terms_(diff: Any) -> Any:
    """``max(diff, 0)²`` in place (``diff = c − v``, float64)."""
    if is_tensor(diff):
        diff.clamp_(min=0.0)
        diff.mul_(diff)
    else:
        np.maximum(diff, 0.0, out=diff)
        np.multiply(diff, diff, out=diff)
    return diff


def _buffer(buf: Any, shape: tuple, like: Any) -> Any:
    """A float64 work array of ``shape``: a view of ``buf`` when it is big enough, else new."""
    size = math.prod(shape)
    if buf is not None and buf.shape[0] >= size:
        return buf[:size].reshape(shape)
    if is_tensor(like):
        import torch

        return torch.empty(shape, dtype=torch.float64, device=like.device)
    return np.empty(shape, dtype=np.float64)


def violation_block(v: Any, c: Any, *, buf: Any = None) -> Any:
    """``E[i, j] = ‖max(0, c_j − v_i)‖²`` of float64 rows ``v`` (r × d) and ``c`` (m × d), both
    numpy or both torch on one device: an (r, m) float64 block (``buf``: a flat float64 work
    array of ≥ r·m·d elements to reuse)."""
    diff = _buffer(buf, (v.shape[0], c.shape[0], v.shape[1]), v)
    if is_tensor(v):
        import torch

        torch.sub(c.unsqueeze(0), v.unsqueeze(1), out=diff)
        return halving_sum_(_violation_terms_(diff)).clone()
    np.subtract(c[None, :, :], v[:, None, :], out=diff)
    return halving_sum_(_violation_terms_(diff)).copy()


def violation_pairs(v: Any, c: Any, *, v_rows: Any, c_rows: Any) -> Any:
    """``E(v[v_rows[k]], c[c_rows[k]])`` for each k (float64, same module as the inputs) — the
    same bits as the matching entries of :func:`violation_block`."""
    n = len(v_rows)
    if is_tensor(v):
        import torch

        out = torch.empty(n, dtype=torch.float64, device=v.device)
        v_rows = torch.as_tensor(v_rows, device=v.device)
        c_rows = torch.as_tensor(c_rows, device=v.device)
    else:
        out = np.empty(n, dtype=np.float64)
        v_rows = np.asarray(v_rows, dtype=np.int64)
        c_rows = np.asarray(c_rows, dtype=np.int64)
    for s in range(0, n, _PAIR_CHUNK):
        e = min(n, s + _PAIR_CHUNK)
        out[s:e] = halving_sum_(_violation_terms_(c[c_rows[s:e]] - v[v_rows[s:e]]))
    return out


def order_scores64(images: Any, captions: Any, *, image_rows: Any, caption_rows: Any) -> np.ndarray:
    """Exact float64 order scores ``s(v, c) = −E(v, c)`` of the pairs (image ``image_rows[k]``,
    caption ``caption_rows[k]``) of two matrices (numpy or torch; computed on the CPU)."""
    v, c = _float64(images, "cpu"), _float64(captions, "cpu")
    return -violation_pairs(v, c, v_rows=image_rows, c_rows=caption_rows)


def order_matrix64(images: Any, captions: Any) -> np.ndarray:
    """The full images × captions matrix of exact order scores (O(n·m·d) work; for checks)."""
    v, c = _float64(images, "cpu"), _float64(captions, "cpu")
    rows, cols = order_block_shape(v.shape[0], c.shape[0], v.shape[1], budget=CPU_BLOCK_ELEMENTS)
    out = np.empty((v.shape[0], c.shape[0]), dtype=np.float64)
    for r0 in range(0, v.shape[0], rows):
        for c0 in range(0, c.shape[0], cols):
            out[r0: r0 + rows, c0: c0 + cols] = -violation_block(v[r0: r0 + rows], c[c0: c0 + cols])
    return out


# --------------------------------------------------------------------------------------------
# Ranks
# --------------------------------------------------------------------------------------------


def _float64(x: Any, device: Any, name: str = "embeddings") -> Any:
    """``x`` as float64 rows (exact for float16/32/64 input): numpy for the CPU engine, a torch
    tensor on ``device`` otherwise. NaN or infinite values are a ValueError."""
    if uses_torch(device):
        import torch

        t = x.detach() if is_tensor(x) else torch.from_numpy(np.ascontiguousarray(to_numpy(x)))
        t = t.to(device=device, dtype=torch.float64).contiguous()
        finite = bool(torch.isfinite(t).all())
    else:
        t = np.ascontiguousarray(to_numpy(x), dtype=np.float64)
        finite = bool(np.isfinite(t).all())
    if not finite:
        raise ValueError(f"{name}: contains NaN or infinite values")
    if t.shape[0] and float(abs(t).max()) > 2.0**500:  # squared differences would overflow
        raise ValueError(f"{name}: values too large for order scores; rescale the embeddings")
    return t


def order_block_shape(n: int, m: int, d: int, *, rows: int | None = None,
                      budget: int = CPU_BLOCK_ELEMENTS) -> tuple[int, int]:
    """(image rows, caption columns) of a block whose ``rows × cols × d`` float64 intermediate
    holds at most ``budget`` elements (at least one pair). ``rows`` asks for that many rows (fewer
    when the budget holds fewer)."""
    if rows is None:
        cols = max(1, min(m, budget // d))
        rows = max(1, min(n, budget // (cols * d)))
    else:  # as asked, within the budget
        rows = max(1, min(n, int(rows), budget // d))
        cols = max(1, min(m, budget // (rows * d)))
    return rows, cols


def order_rank_counts(images: Any, captions: Any, index: np.ndarray, *, device: Any = "cpu",
                      block_size: int | None = None, block_elements: int | None = None,
                      progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(per image row: captions scoring strictly above its best correct caption; per caption:
    images scoring strictly above its own image) under the order similarity — exact, in bounded
    memory (module docstring). ``images`` (n × d), ``captions`` (m × d): validated numeric
    matrices (numpy or torch); ``index``: int64 image row of each caption; ``device``: ``"cpu"``
    (numpy) or a ``torch.device``; ``block_size``: image rows per block (default: from the budget);
    ``block_elements``: the budget. Rows of images without captions count 0."""
    on_torch = uses_torch(device)
    v, c = _float64(images, device, "image_embeddings"), _float64(captions, device, "caption_embeddings")
    n, m, d = v.shape[0], c.shape[0], v.shape[1]
    budget = int(block_elements or (CUDA_BLOCK_ELEMENTS if on_torch else CPU_BLOCK_ELEMENTS))
    rows, cols = order_block_shape(n, m, d, rows=block_size, budget=budget)
    own = violation_pairs(v, c, v_rows=index, c_rows=np.arange(m))
    own_np = to_numpy(own)
    best = np.full(n, -np.inf)                  # no caption: nothing counts
    has = np.bincount(index, minlength=n) > 0
    best[has] = np.inf
    np.minimum.at(best, index, own_np)
    if on_torch:
        import torch

        best_t = torch.as_tensor(best, device=v.device)
        i2t = torch.zeros(n, dtype=torch.int64, device=v.device)
        t2i = torch.zeros(m, dtype=torch.int64, device=v.device)
        buf = torch.empty(rows * cols * d, dtype=torch.float64, device=v.device)
        with torch.no_grad():
            for r0 in tqdm(range(0, n, rows), desc="order ranks", disable=not progress):
                for c0 in range(0, m, cols):
                    e = violation_block(v[r0: r0 + rows], c[c0: c0 + cols], buf=buf)
                    i2t[r0: r0 + rows] += (e < best_t[r0: r0 + rows, None]).sum(dim=1)
                    t2i[c0: c0 + cols] += (e < own[None, c0: c0 + cols]).sum(dim=0)
        return i2t.cpu().numpy(), t2i.cpu().numpy()
    return _cpu_rank_counts(v, c, best, own_np, rows=rows, cols=cols, progress=progress)


def _cpu_rank_counts(v: np.ndarray, c: np.ndarray, best: np.ndarray, own: np.ndarray, *, rows: int,
                     cols: int, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """The block walk of :func:`order_rank_counts` on numpy, image-row spans spread over threads."""
    n, m = v.shape[0], c.shape[0]
    i2t = np.zeros(n, dtype=np.int64)
    partial: list[np.ndarray] = []
    lock = threading.Lock()
    threads = cpu_threads()
    span = max(rows, math.ceil(n / threads))
    bar = tqdm(total=n, desc="order ranks", disable=not progress)

    def work(s: int, e: int) -> None:
        t2i = np.zeros(m, dtype=np.int64)
        buf = np.empty(rows * cols * v.shape[1], dtype=np.float64)
        for r0 in range(s, e, rows):
            r1 = min(e, r0 + rows)
            for c0 in range(0, m, cols):
                block = violation_block(v[r0:r1], c[c0: c0 + cols], buf=buf)
                i2t[r0:r1] += np.count_nonzero(block < best[r0:r1, None], axis=1)
                t2i[c0: c0 + cols] += np.count_nonzero(block < own[None, c0: c0 + cols], axis=0)
            with lock:
                bar.update(r1 - r0)
        with lock:
            partial.append(t2i)

    _map_chunks(work, n, span, threads)
    bar.close()
    return i2t, np.sum(partial, axis=0, dtype=np.int64)
