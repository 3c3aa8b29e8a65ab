"""Exact retrieval ranks counted on the device (a GPU; the CPU through the same torch code in
the tests): the float32 GEMM, the window tests and the float64 settling all stay there, and only
the counts (or, for :func:`~pseudopairs.similarity.metrics.retrieval_metrics`, the metrics:
:func:`~pseudopairs.similarity.metrics.metrics_of_counts`) come back.

The host engine (:func:`pseudopairs.similarity.ranks._exact_rank_counts`) settles the entries a
float32 score cannot order in float64 on the CPU with :func:`~pseudopairs.similarity.dot64_pairs`
(``numpy.add.reduce``'s pairwise summation of the float64 products). On a GPU that host work —
the thresholds, copying candidates back, numpy float64 — cost 20–25× the GEMM itself
(docs/benchmarks.md). Here:

* :func:`pairwise_sum64` sums the last dimension in **numpy's pairwise order** (blocks of ≤ 128
  split in halves rounded to multiples of 8; within a block eight running sums, combined as
  ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))``, then the remainder in sequence), as whole-tensor float64
  additions, so :func:`dot64_rows` gives the **same bits** as ``dot64_pairs`` (IEEE float64
  products and sums are correctly rounded on every device; tested against numpy).
* A float32 entry ``s`` of rows ``x, y`` is within ``E = rel·‖x‖·‖y‖ + slack`` of the exact score
  (the float32 GEMM's bound, TF32 included when torch may use it, plus the float64 error;
  :mod:`pseudopairs.similarity.bounds`), and so is a float32 threshold ``t`` (a row-wise product),
  so ``s > t + 2E`` proves a strictly higher exact score and ``s < t − 2E`` a lower-or-equal one;
  the entries between are rescored with :func:`dot64_rows` and compared with their line's exact
  threshold — the host engine's rule and its numbers, hence the same ranks
  (:func:`device_rank_counts`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pseudopairs.similarity.bounds import (U32, combine_units, dot64_relative_error, gemm_relative_error,
                                           matmul_input_unit, underflow_slack)

BLOCK_ELEMENTS = 1 << 26  # float32 scores per block (256 MiB) on a GPU
CPU_BLOCK_ELEMENTS = 1 << 22  # on the CPU (the tests)
PAIR_CHUNK = 1 << 14  # pairs per float64 product chunk (128 MiB at d = 1024)


# --------------------------------------------------------------------------------------------
# numpy's pairwise summation, on tensors
# --------------------------------------------------------------------------------------------


def _leaf(x: torch.Tensor) -> torch.Tensor:
    """numpy's sum of a block of ``n ≤ 128`` along the last dimension (any leading shape)."""
    n = x.shape[-1]
    if n < 8:
        total = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
        for i in range(n):
            total = total + x[..., i]
        return total
    whole = n - n % 8
    lanes = x[..., :whole].unflatten(-1, (whole // 8, 8))
    r = lanes[..., 0, :]
    for i in range(1, whole // 8):
        r = r + lanes[..., i, :]
    while r.shape[-1] > 1:  # ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))
        r = r[..., 0::2] + r[..., 1::2]
    total = r[..., 0]
    for i in range(whole, n):
        total = total + x[..., i]
    return total


def _split(n: int) -> int:
    half = n // 2
    return half - half % 8


def pairwise_sum64(x: torch.Tensor) -> torch.Tensor:
    """``numpy.add.reduce(x, axis=-1)`` for a float64 tensor, bit for bit: the same pairwise
    order (module docstring). Leaves of equal length at equal depth of the recursion are summed
    together as one batched block."""
    n = x.shape[-1]
    if n <= 128:
        return _leaf(x)
    n2 = _split(n)
    if n2 == n - n2 and n % 16 == 0 and (n & (n - 1)) == 0:  # a power of two: all leaves alike
        leaves = n // 128
        sums = _leaf(x.unflatten(-1, (leaves, 128)))        # (..., leaves)
        while sums.shape[-1] > 1:                            # the recursion's halves, bottom up
            sums = sums[..., 0::2] + sums[..., 1::2]
        return sums[..., 0]
    return pairwise_sum64(x[..., :n2]) + pairwise_sum64(x[..., n2:])


def dot64_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``dot64(x[i], y[i])`` per row (float64 products summed in numpy's pairwise order): the
    bits :func:`pseudopairs.similarity.dot64_pairs` gives for the same rows."""
    out = torch.empty(x.shape[0], dtype=torch.float64, device=x.device)
    for s in range(0, x.shape[0], PAIR_CHUNK):
        out[s: s + PAIR_CHUNK] = pairwise_sum64(x[s: s + PAIR_CHUNK].double() * y[s: s + PAIR_CHUNK].double())
    return out


# --------------------------------------------------------------------------------------------
# The rank counts
# --------------------------------------------------------------------------------------------


def _as_tensor(x: Any, device: torch.device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return (x.float() if x.dtype == torch.bfloat16 else x).to(device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def _window32(center: torch.Tensor, half: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``(lo, hi)`` with ``lo ≤ center − half`` and ``hi ≥ center + half``."""
    lo64, hi64 = center - half, center + half
    lo, hi = lo64.float(), hi64.float()
    lo = torch.where(lo.double() > lo64, torch.nextafter(lo, torch.tensor(-torch.inf, device=lo.device)), lo)
    hi = torch.where(hi.double() < hi64, torch.nextafter(hi, torch.tensor(torch.inf, device=hi.device)), hi)
    return lo, hi


class _Side:
    """One side of the score matrix on the device: the values as given (exact scores read these,
    in float64), their float32 copy for the GEMM, and an upper bound on each row's norm."""

    def __init__(self, x: Any, device: torch.device, name: str) -> None:
        self.raw = _as_tensor(x, device)
        if not isinstance(x, torch.Tensor) and self.raw.is_floating_point() \
                and not bool(torch.isfinite(self.raw).all()):  # tensors: checked by the caller
            raise ValueError(f"{name}: contains NaN or infinite values")
        self.gemm = self.raw.to(torch.float32).contiguous()
        dim = self.raw.shape[1]
        squares = (self.gemm * self.gemm).sum(dim=1).double()
        inflate = 1.0 + 2.0 * gemm_relative_error(dim + 2)
        self.norm = torch.sqrt((squares + dim * 2.0**-126) * inflate) * (1.0 + 2.0**-20)


def device_rank_counts(images: Any, captions: Any, index: Any, *, device: torch.device,
                       columns: bool = True, block_rows: int | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(per image row: the captions whose exact score is strictly above its best correct caption's
    — 0 for an image without captions, which is no query; per caption: the images strictly above
    its own image, or None without ``columns``), as int64 tensors on ``device``. Inputs validated
    by the caller (:func:`pseudopairs.similarity.ranks.retrieval_ranks`).

    One pass of float32 blocks of whole image rows. The thresholds are float32 row-wise products
    (a caption with its own image; an image's best over its captions), within ``E`` of the exact
    score like any GEMM entry, so an entry more than ``W = 2E`` above a line's threshold is
    exactly higher and one more than ``W`` below is not. The pairs of a caption and its own image
    are left out of the comparison (an image's correct captions are never above its best, a
    caption's own image never above itself), so in a trained model's scores the windows are
    mostly empty; the entries inside them are settled with :func:`dot64_rows` against the exact
    thresholds of their lines, all in one float64 pass."""
    device = torch.device(device)
    with torch.no_grad():
        x, y = _Side(images, device, "image_embeddings"), _Side(captions, device, "caption_embeddings")
        idx = _as_tensor(np.asarray(index, dtype=np.int64), device)
        n_img, n_cap, dim = x.raw.shape[0], y.raw.shape[0], x.raw.shape[1]
        norms = torch.stack([x.norm.max(), y.norm.max()]).tolist()
        if not all(np.isfinite(norms)):
            raise ValueError("embeddings: values too large for float32 scoring; rescale the embeddings")
        x_max, y_max = norms
        if x_max * y_max > 2.0**120:
            raise ValueError("embeddings: dot products this large overflow float32 scoring; rescale the embeddings")
        # float32 thresholds: each caption with its own image, each image's best caption
        own32 = (x.gemm[idx] * y.gemm).sum(dim=1).double()
        best32 = torch.full((n_img,), -torch.inf, dtype=torch.float64, device=device)
        best32.scatter_reduce_(0, idx, own32, reduce="amax")
        has_caption = torch.isfinite(best32)
        # an entry and a threshold are each within E = rel·‖x‖·‖y‖ + slack of the exact value
        unit = combine_units(U32, matmul_input_unit(device))
        rel = gemm_relative_error(dim, input_unit=unit) + dot64_relative_error(dim)
        slack = underflow_slack(dim, x_absmax=x_max, y_absmax=y_max)
        grow = 2.0 * (1.0 + 2.0**-20)
        row_lo, row_hi = _window32(torch.where(has_caption, best32, 0.0), (rel * x.norm * y_max + slack) * grow)
        row_lo = torch.where(has_caption, row_lo, torch.inf)   # no query: nothing counted
        row_hi = torch.where(has_caption, row_hi, torch.inf)
        col_lo = col_hi = None
        if columns:
            col_lo, col_hi = _window32(own32, (rel * x_max * y.norm + slack) * grow)
        order = torch.argsort(idx, stable=True)                 # captions grouped by image
        starts = torch.searchsorted(idx[order], torch.arange(n_img + 1, device=device)).tolist()
        budget = BLOCK_ELEMENTS if device.type == "cuda" else CPU_BLOCK_ELEMENTS
        rows = int(block_rows) if block_rows else max(1, min(n_img, budget // max(1, n_cap)))
        above_rows = torch.zeros(n_img, dtype=torch.int64, device=device)
        above_cols = torch.zeros(n_cap, dtype=torch.int64, device=device) if columns else None
        near_rows, near_cols = [], []
        for r0 in range(0, n_img, rows):
            r1 = min(n_img, r0 + rows)
            scores = x.gemm[r0:r1] @ y.gemm.T                               # (rows, n_cap) float32
            caps = order[starts[r0]:starts[r1]]
            scores[idx[caps] - r0, caps] = -torch.inf                       # the own pairs: never above
            up = scores > row_hi[r0:r1, None]
            above_rows[r0:r1] = up.sum(dim=1)
            near = torch.nonzero((scores >= row_lo[r0:r1, None]) & ~up)
            near_rows.append(near + torch.tensor([r0, 0], device=device))
            if columns:
                up = scores > col_hi[None, :]
                above_cols += up.sum(dim=0)
                near = torch.nonzero((scores >= col_lo[None, :]) & ~up)
                near_cols.append(near + torch.tensor([r0, 0], device=device))
            del scores, up
        near_rows = torch.cat(near_rows)
        near_cols = torch.cat(near_cols) if columns else near_rows[:0]
        settled_rows, settled_cols = _settle(x, y, idx, order, near_rows, near_cols, n_img=n_img, n_cap=n_cap)
        i2t = above_rows + settled_rows
        return i2t, (above_cols + settled_cols if columns else None)


def _settle(x: _Side, y: _Side, idx: torch.Tensor, order: torch.Tensor, near_rows: torch.Tensor,
            near_cols: torch.Tensor, *, n_img: int, n_cap: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image row and per caption, how many of the window entries ((image row, caption) pairs
    ``near_rows`` of the rows' windows, ``near_cols`` of the columns') score exactly strictly
    above the line's exact threshold (an image's best correct caption; a caption's own image).
    One :func:`dot64_rows` pass over the entries and the pairs their exact thresholds need."""
    device = idx.device
    count_rows = torch.zeros(n_img, dtype=torch.int64, device=device)
    count_cols = torch.zeros(n_cap, dtype=torch.int64, device=device)
    if near_rows.shape[0] == 0 and near_cols.shape[0] == 0:
        return count_rows, count_cols
    # the exact thresholds of the lines involved: the columns' own pairs, the rows' correct pairs
    cols = torch.unique(near_cols[:, 1])
    rows = torch.unique(near_rows[:, 0])
    involved = torch.zeros(n_img, dtype=torch.bool, device=device)
    involved[rows] = True
    correct = order[involved[idx[order]]]                    # the captions of the involved images
    pairs = torch.cat([near_rows, near_cols, torch.stack([idx[cols], cols], dim=1),
                       torch.stack([idx[correct], correct], dim=1)])
    exact = dot64_rows(x.raw[pairs[:, 0]], y.raw[pairs[:, 1]])
    a, b, c = near_rows.shape[0], near_cols.shape[0], cols.shape[0]
    entry_rows, entry_cols, own_cols, correct_rows = exact[:a], exact[a:a + b], exact[a + b:a + b + c], exact[a + b + c:]
    best = torch.full((n_img,), -torch.inf, dtype=torch.float64, device=device)
    best.scatter_reduce_(0, idx[correct], correct_rows, reduce="amax")
    count_rows.index_add_(0, near_rows[:, 0], (entry_rows > best[near_rows[:, 0]]).to(torch.int64))
    own = torch.zeros(n_cap, dtype=torch.float64, device=device)
    own[cols] = own_cols
    count_cols.index_add_(0, near_cols[:, 1], (entry_cols > own[near_cols[:, 1]]).to(torch.int64))
    return count_rows, count_cols
