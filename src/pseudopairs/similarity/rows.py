"""Exact float64 scores and the unit rows they are computed from (see :mod:`pseudopairs.similarity`,
"Exact scores")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pseudopairs.similarity.arrays import _map_chunks, _torch, is_tensor, to_numpy

_DOT64_CHUNK = 1024  # pairs per float64 chunk (two 1024×d float64 arrays: 16 MiB at d = 1024)

# --------------------------------------------------------------------------------------------
# Exact (float64) scores
# --------------------------------------------------------------------------------------------


def dot64_pairs(x: np.ndarray, y: np.ndarray, *, x_rows: np.ndarray, y_rows: np.ndarray,
                threads: int = 1) -> np.ndarray:
    """``dot64(x[x_rows[i]], y[y_rows[i]])`` for each i, float64 — THE deterministic exact score.

    The two rows are multiplied elementwise in float64 (exact for float32 and narrower inputs)
    and the products summed with ``numpy.add.reduce`` along the contiguous row (pairwise
    summation, an order fixed by the dimension), so the result depends only on the two rows'
    values, never on their positions or on the batch.
    """
    x_rows = np.asarray(x_rows, dtype=np.int64)
    y_rows = np.asarray(y_rows, dtype=np.int64)
    if x_rows.shape != y_rows.shape or x_rows.ndim != 1:
        raise ValueError("dot64_pairs: x_rows and y_rows must be 1-D and of equal length")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"dot64_pairs: rows of {x.shape[1]} and {y.shape[1]} dimensions")
    out = np.empty(x_rows.shape[0], dtype=np.float64)
    step = 64  # pairs per float64 product buffer (cache-sized)

    def work(s: int, e: int) -> None:
        products = np.empty((min(step, e - s), x.shape[1]), dtype=np.float64)
        for u in range(s, e, step):
            v = min(e, u + step)
            p = products[: v - u]
            np.multiply(x[x_rows[u:v]], y[y_rows[u:v]], out=p, dtype=np.float64)
            out[u:v] = np.add.reduce(p, axis=1)

    _map_chunks(work, x_rows.shape[0], _DOT64_CHUNK, threads)
    return out


@dataclass(frozen=True)
class UnitRows:
    """Rows prepared for cosine scoring: ``raw`` as given (numpy, real dtype, never copied in full),
    the per-row power-of-two ``shift`` (``max|2**-shift·x| ∈ [1, 2)``) and the float64 ``norm`` of
    the shifted row. See the module docstring for the cosine's definition."""

    raw: np.ndarray
    shift: np.ndarray
    norm: np.ndarray

    @property
    def n(self) -> int:
        return int(self.raw.shape[0])

    @property
    def dim(self) -> int:
        return int(self.raw.shape[1])


def check_matrix(x: Any, name: str, *, finite: bool = True) -> np.ndarray:
    """``x`` as a 2-D numpy array of finite real numbers with at least one row and one column;
    ValueError naming ``name`` otherwise (``finite=False``: the caller checks finiteness)."""
    if is_tensor(x):
        if x.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D matrix (rows × dims), got shape {tuple(x.shape)}")
        if x.is_complex() or x.dtype == _torch().bool:
            raise ValueError(f"{name}: expected real numbers, got dtype {x.dtype}")
    try:
        arr = to_numpy(x)
    except Exception as err:  # noqa: BLE001 - report any conversion failure as bad input
        raise ValueError(f"{name}: cannot be read as an array ({err})") from err
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D matrix (rows × dims), got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: no rows (shape {arr.shape})")
    if arr.shape[1] == 0:
        raise ValueError(f"{name}: rows have no dimensions (shape {arr.shape})")
    if finite and arr.dtype.kind == "f":
        for s in range(0, arr.shape[0], 4096):
            bad = ~np.isfinite(arr[s: s + 4096]).all(axis=1)
            if bad.any():
                raise ValueError(f"{name}: row {s + int(np.flatnonzero(bad)[0])} contains NaN or "
                                 "infinite values")
    return arr


def unit_rows(x: Any, *, name: str, threads: int = 1, checked: bool = False) -> UnitRows:
    """Validate ``x`` (see :func:`check_matrix`; skipped when ``checked``, i.e. ``x`` came from it)
    and compute each row's shift and norm; a row of zeros has no direction and is a ValueError
    naming ``name`` and the row.

    ``norm = sqrt(dot64(x', x'))``. For inputs of ≤ 4 bytes (float32 and narrower) no float64
    square or partial sum can overflow or underflow, so it equals ``2**-shift·sqrt(dot64(x, x))``
    bit for bit and is computed that way (no shifted copy)."""
    raw = x if checked else check_matrix(x, name)
    n = raw.shape[0]
    shift = np.empty(n, dtype=np.int64)
    norm = np.empty(n, dtype=np.float64)
    narrow = raw.dtype.itemsize <= 4

    def work(s: int, e: int) -> None:
        part = raw[s:e]
        peak = np.abs(part).max(axis=1).astype(np.float64)
        zero = np.flatnonzero(peak == 0)
        if zero.size:
            raise ValueError(f"{name}: row {s + int(zero[0])} is all zeros; its cosine is undefined")
        shift[s:e] = np.frexp(peak)[1] - 1  # peak = m·2**e, m ∈ [0.5, 1) → peak·2**-(e-1) ∈ [1, 2)
        if narrow:
            squares = np.multiply(part, part, dtype=np.float64)
            norm[s:e] = np.ldexp(np.sqrt(np.add.reduce(squares, axis=1)), -shift[s:e])
        else:
            block = np.ldexp(np.asarray(part, dtype=np.float64), -shift[s:e, None])
            np.multiply(block, block, out=block)
            norm[s:e] = np.sqrt(np.add.reduce(block, axis=1))

    _map_chunks(work, n, _DOT64_CHUNK, threads)
    return UnitRows(raw=raw, shift=shift, norm=norm)


def duplicate_groups(x: np.ndarray, *, shift: np.ndarray | None = None) -> np.ndarray:
    """For each row of ``x``, the first row with identical values (itself if none); with ``shift``
    (a :class:`UnitRows` shift) the rows compared are ``2**-shift·x`` in float64, so rows that are
    power-of-two multiples of each other — the same direction, the same exact cosines — count
    as duplicates too. Rows are hashed with a wrapping 64-bit polynomial of their bytes, and rows
    sharing a hash are compared exactly: a hash collision can only miss a duplicate."""
    n = x.shape[0]

    def rows_of(s: int, e: int) -> np.ndarray:
        part = np.asarray(x[s:e])
        if shift is not None:
            part = np.ldexp(np.asarray(part, dtype=np.float64), -shift[s:e, None])
        part = np.ascontiguousarray(part).reshape(e - s, -1).view(np.uint8)
        pad = (-part.shape[1]) % 8
        if pad:
            part = np.concatenate([part, np.zeros((e - s, pad), dtype=np.uint8)], axis=1)
        return part.view(np.uint64)

    width = rows_of(0, min(n, 1)).shape[1]
    weights = np.random.default_rng(0x5EED).integers(1, 2**63, size=width, dtype=np.uint64) | np.uint64(1)
    key = np.empty(n, dtype=np.uint64)
    for s in range(0, n, 4096):  # wrapping uint64 arithmetic: multiply and sum modulo 2**64
        key[s: s + 4096] = np.sum(rows_of(s, min(n, s + 4096)) * weights[None, :], axis=1, dtype=np.uint64)
    first = np.arange(n)
    order = np.lexsort((np.arange(n), key))
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    ends = np.r_[starts[1:], n]
    for a, b in zip(starts[ends - starts > 1], ends[ends - starts > 1]):
        members = order[a:b]
        for i in members[1:]:
            for j in members:
                if j >= i:
                    break
                if first[j] == j and np.array_equal(rows_of(i, i + 1), rows_of(j, j + 1)):
                    first[i] = j
                    break
    return first


def cosine64_pairs(a: UnitRows, b: UnitRows, *, a_rows: np.ndarray, b_rows: np.ndarray,
                   threads: int = 1) -> np.ndarray:
    """``cos64(a[a_rows[i]], b[b_rows[i]])`` for each i (float64): the exact cosine of the module doc.

    ``dot64(x', y') = 2**-(e_x + e_y)·dot64(x, y)`` bit for bit when no float64 product or partial
    sum of the unshifted rows can overflow or underflow — always so for float32 and narrower
    inputs — so only wider inputs are shifted before the product."""
    a_rows = np.asarray(a_rows, dtype=np.int64)
    b_rows = np.asarray(b_rows, dtype=np.int64)
    if _shift_first(a) or _shift_first(b):
        n = a_rows.shape[0]
        dots = np.empty(n, dtype=np.float64)

        def work(s: int, e: int) -> None:
            xa = np.ldexp(np.asarray(a.raw[a_rows[s:e]], dtype=np.float64), -a.shift[a_rows[s:e], None])
            xb = np.ldexp(np.asarray(b.raw[b_rows[s:e]], dtype=np.float64), -b.shift[b_rows[s:e], None])
            dots[s:e] = dot64_pairs(xa, xb, x_rows=np.arange(e - s), y_rows=np.arange(e - s))

        _map_chunks(work, n, _DOT64_CHUNK, threads)
    else:
        dots = dot64_pairs(a.raw, b.raw, x_rows=a_rows, y_rows=b_rows, threads=threads)
        dots = np.ldexp(dots, -(a.shift[a_rows] + b.shift[b_rows]))
    return dots / (a.norm[a_rows] * b.norm[b_rows])


def _shift_first(rows: UnitRows) -> bool:
    """Whether float64 products of these rows could leave float64's normal range unshifted."""
    return rows.raw.dtype.itemsize > 4 and rows.raw.dtype.kind == "f"


def unit_block32(rows: UnitRows, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` scaled to unit length and rounded to float32 (C order): each row times
    the float64 factor ``2**-shift / norm`` — in float32 for float32 rows (factor rounded to
    float32, then one float32 product), else in float64 then rounded. Each element is within
    :func:`normalisation_unit` (relative) of the exact unit row."""
    factor = np.ldexp(1.0, -rows.shift[start:stop]) / rows.norm[start:stop]
    part = rows.raw[start:stop]
    if part.dtype == np.float32 and bool(np.all((factor > 2.0**-100) & (factor < 2.0**100))):
        return np.multiply(part, factor.astype(np.float32)[:, None])
    return (np.asarray(part, dtype=np.float64) * factor[:, None]).astype(np.float32)


