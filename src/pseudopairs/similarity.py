"""Blocked similarity engine shared by retrieval evaluation and pseudopair mining.

Both callers need statistics of a score matrix ``S = Q · Dᵀ`` (queries × database) that is too big
to hold: mining at paper scale is 566K COCO captions × 145K Multi30K captions × 1024 dimensions.
This module computes ``S`` in **blocks** (a block of query rows × a chunk of database rows, at most
:data:`DEFAULT_BLOCK_ELEMENTS` scores by default) with a float32 GEMM — numpy/OpenBLAS on the CPU,
torch on CUDA — and hands every block to *reducers* that keep what the caller needs, so one pass
over the blocks can feed several statistics:

* :class:`WindowTopK` — per row (or per column): every entry within ``window`` of the line's
  ``k``-th largest value (``k = 1``: the argmax candidates; ``k > 1``: a superset of the top-k);
* :class:`ColumnLogSumExp` — per column: ``log Σ_rows exp(β·S)``;
* :class:`ThresholdCounter` — per row and per column: how many entries are strictly above a
  threshold, and which entries are too close to it to decide in float32.

Exact scores
------------
Float32 block scores choose candidates; decisions are made in float64 by one deterministic routine,
:func:`dot64_pairs`: ``dot64(x, y) = Σ_j x_j·y_j`` with both rows converted to float64, multiplied
elementwise and summed by ``numpy.add.reduce`` along the contiguous row (numpy's pairwise
summation, whose order depends only on the dimension). The same pair of vectors therefore gives the
same bits wherever it occurs, and for float32 inputs the products are exact, so the only rounding
is in the summation (``≤ γ_d·Σ|x_j y_j|`` in float64, about 1e-13 for d = 1024).
The **cosine** is ``cos64(x, y) = dot64(x', y') / (‖x'‖·‖y'‖)`` with ``‖x'‖ = sqrt(dot64(x', x'))``
and ``x' = 2**-e·x`` (a per-row power of two that puts ``max|x'|`` in [1, 2); it is exact and leaves
the result unchanged except where the unscaled computation would overflow or underflow).

Error bounds
------------
A float32 GEMM entry of rows whose elements carry relative errors ≤ ``u_in`` (against the exact
rows) satisfies ``|S32 − x·y| ≤ ((1+u_in)²(1+γ_d) − 1)·Σ|x_j y_j| + underflow`` for *any*
summation order, FMA or not (:func:`gemm_relative_error`), where ``γ_d = d·u/(1 − d·u)`` and
``u = 2**-24``. ``u_in`` combines the rounding of the inputs to float32 (a float32 conversion, or
the normalisation of :func:`unit_block32`) with what the matmul itself rounds
(:func:`matmul_input_unit`: nothing for numpy/OpenBLAS; ``2**-11`` when torch may use TF32 and
``2**-8`` when it may use bfloat16, read from torch's float32 matmul precision).
``Σ|x_j y_j| ≤ ‖x‖·‖y‖`` (Cauchy–Schwarz), so for unit rows the bound is one number,
:func:`cosine_error_bound` (≈ 6.1e-5 at d = 1024 on the CPU: a worst case, far above typical
errors). Candidate windows are twice the bound (the candidate's and the competitor's errors),
so a candidate set provably contains every entry a float64 decision could pick.
"""

from __future__ import annotations

import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np
from tqdm import tqdm

U32 = 2.0**-24  # float32 unit roundoff
U64 = 2.0**-53  # float64 unit roundoff
TF32_UNIT = 2.0**-11  # TF32 keeps 10 fraction bits
BF16_UNIT = 2.0**-8  # bfloat16 keeps 7 fraction bits
MIN_NORMAL32 = 2.0**-126
EXP32_ULPS = 4.0  # assumed accuracy of float32 exp (numpy's SIMD exp measures ≤ 2.4 ulp; CUDA expf ≤ 2)

DEFAULT_BLOCK_ELEMENTS = 1 << 25  # scores per block: 128 MiB of float32
DEFAULT_BLOCK_ROWS = 2048  # query rows per block when both sides are large (keeps the GEMM efficient)
CHUNK = 64  # entries per chunk maximum (see WindowTopK)
_DOT64_CHUNK = 1024  # pairs per float64 chunk (two 1024×d float64 arrays: 16 MiB at d = 1024)


# --------------------------------------------------------------------------------------------
# Error bounds
# --------------------------------------------------------------------------------------------


def gamma(n: int, unit: float) -> float:
    """Higham's ``γ_n = n·u / (1 − n·u)``: the relative error bound of n roundings."""
    nu = n * unit
    if nu >= 0.5:
        raise ValueError(f"gamma: n·u = {nu} is too large for a meaningful bound")
    return nu / (1.0 - nu)


def gemm_relative_error(dim: int, *, input_unit: float = U32) -> float:
    """``e`` with ``|S32 − x·y| ≤ e·Σ_j|x_j y_j|`` (+ :func:`underflow_slack`) for one float32 GEMM
    entry of rows each of whose elements carries a relative rounding error ≤ ``input_unit``
    (against x and y), accumulated in float32 in any order (FMA or not)."""
    return (1.0 + input_unit) ** 2 * (1.0 + gamma(dim, U32)) - 1.0


def combine_units(*units: float) -> float:
    """Relative error bound of successive roundings: ``Π(1 + u) − 1``."""
    total = 1.0
    for unit in units:
        total *= 1.0 + unit
    return total - 1.0


def dot64_relative_error(dim: int) -> float:
    """``e`` with ``|dot64(x, y) − x·y| ≤ e·Σ_j|x_j y_j|`` (d products, d − 1 additions in float64)."""
    return gamma(dim + 1, U64)


def underflow_slack(dim: int, *, x_absmax: float = 1.0, y_absmax: float = 1.0) -> float:
    """Absolute error float32 under/flush-to-zero can add to one dot product of length ``dim``."""
    return 2.0 * (dim + 2) * MIN_NORMAL32 * max(1.0, x_absmax) * max(1.0, y_absmax)


def normalisation_unit(dim: int) -> float:
    """Relative error of each element of :func:`unit_block32` against the exact unit row: the
    float64 norm (≤ (d/2 + 2)·2**-53), the float64 scale factor, and two float32 roundings (the
    factor, and the product — or the float64 product rounded to float32)."""
    return 2.0 * U32 + (dim + 8) * U64


def cosine_error_bound(dim: int, *, matmul_unit: float = 0.0) -> float:
    """``E`` with ``|S32 − cos64| ≤ E`` for a float32 GEMM entry of two :func:`unit_block32` rows
    and the float64 cosine :func:`cosine64_pairs` of the same rows. ``matmul_unit``: the
    rounding the matmul itself applies to its float32 inputs (:func:`matmul_input_unit`).

    Terms: the GEMM bound with every input element's relative error (normalisation, then the
    matmul's own rounding), the float64 cosine's own error (``≤ (2d + 10)·2**-53``) and float32
    underflow (``Σ|x_j y_j| ≤ ‖x‖·‖y‖ = 1`` for unit rows).
    """
    unit = combine_units(normalisation_unit(dim), matmul_unit)
    return gemm_relative_error(dim, input_unit=unit) + (2 * dim + 10) * U64 + underflow_slack(dim)


def matmul_input_unit(device: Any) -> float:
    """Relative rounding a float32 matmul applies to its float32 inputs on ``device``: 0 for
    numpy/OpenBLAS (true float32); on torch devices read from torch's float32 matmul
    precision: ``2**-11`` when TF32 may be used, ``2**-8`` when bfloat16 may be (and when the
    setting cannot be read)."""
    if not uses_torch(device):
        return 0.0
    try:
        import torch

        precision = torch.get_float32_matmul_precision()
        if precision == "highest" and not torch.backends.cuda.matmul.allow_tf32:
            return 0.0
        return TF32_UNIT if precision in ("highest", "high") else BF16_UNIT
    except Exception:  # noqa: BLE001 - unknown torch API: assume the least precise option
        return BF16_UNIT


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


def resolve_device(device: Any, *inputs: Any) -> Any:
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


def check_matrix(x: Any, name: str) -> np.ndarray:
    """``x`` as a 2-D numpy array of finite real numbers with at least one row and one column;
    ValueError naming ``name`` otherwise."""
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
    if arr.dtype.kind == "f":
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


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------


class Block(NamedTuple):
    """One block of scores: rows ``row0:row1`` (queries) × columns ``col0:col1`` (database).

    ``scores`` is a padded float32 buffer (numpy, or torch on CUDA) whose top-left
    ``(row1 − row0) × (col1 − col0)`` corner holds the block; every other entry is −inf. Its shape is
    a multiple of :data:`CHUNK` on both sides. It is reused by the next block: copy what you keep.
    """

    row0: int
    row1: int
    col0: int
    col1: int
    scores: Any

    @property
    def n_rows(self) -> int:
        return self.row1 - self.row0

    @property
    def n_cols(self) -> int:
        return self.col1 - self.col0

    @property
    def valid(self) -> Any:
        return self.scores[: self.n_rows, : self.n_cols]


def block_shape(n_rows: int, n_cols: int, *, rows: int | None = None, cols: int | None = None,
                budget: int = DEFAULT_BLOCK_ELEMENTS) -> tuple[int, int]:
    """(query rows, database columns) per block. Given values win (capped at the matrix);
    otherwise rows = :data:`DEFAULT_BLOCK_ROWS` (or, when ``cols`` is given, as many as keep
    ``rows × cols ≤ budget``) and cols = as many as keep the block within ``budget``."""
    for label, value in (("rows", rows), ("cols", cols)):
        if value is not None and (isinstance(value, bool) or int(value) != value or int(value) < 1):
            raise ValueError(f"block {label} must be a positive whole number, got {value!r}")
    if rows is None:
        rows = DEFAULT_BLOCK_ROWS if cols is None else max(1, budget // int(cols))
    rows = min(int(rows), n_rows)
    if cols is None:
        cols = max(1, budget // rows)
    return rows, min(int(cols), n_cols)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class RowSource:
    """Query rows handed to the GEMM as float32 blocks on the engine's device."""

    n: int

    def block(self, start: int, stop: int) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class DenseRows(RowSource):
    """Rows already in float32 on the engine's device (numpy or torch)."""

    def __init__(self, data: Any):
        self.data = data
        self.n = int(data.shape[0])

    def block(self, start: int, stop: int) -> Any:
        return self.data[start:stop]


class UnitRowSource(RowSource):
    """Rows of a :class:`UnitRows`, normalised block by block (no full float32 copy is kept)."""

    def __init__(self, rows: UnitRows, device: Any = "cpu"):
        self.rows = rows
        self.device = device
        self.n = rows.n

    def block(self, start: int, stop: int) -> Any:
        if not uses_torch(self.device):
            return unit_block32(self.rows, start, stop)
        import torch

        raw = torch.as_tensor(np.ascontiguousarray(self.rows.raw[start:stop])).to(self.device)
        factor = np.ldexp(1.0, -self.rows.shift[start:stop]) / self.rows.norm[start:stop]
        factor = torch.as_tensor(factor, device=self.device)
        return (raw.double() * factor[:, None]).float().contiguous()


def database32(rows: UnitRows, device: Any = "cpu") -> Any:
    """All rows of ``rows`` normalised and rounded to float32, on ``device`` (numpy on the CPU)."""
    source = UnitRowSource(rows, device)
    step = 16384
    if uses_torch(device):
        import torch

        parts = [source.block(s, min(rows.n, s + step)) for s in range(0, rows.n, step)]
        return torch.cat(parts) if len(parts) > 1 else parts[0]
    out = np.empty((rows.n, rows.dim), dtype=np.float32)
    for s in range(0, rows.n, step):
        out[s: s + step] = unit_block32(rows, s, min(rows.n, s + step))
    return out


def iter_blocks(queries: RowSource, database: Any, *, rows: int, cols: int, progress: bool = False,
                desc: str | None = None) -> Iterator[Block]:
    """Score blocks ``queries[r0:r1] @ database[c0:c1].T``, row blocks outer, database chunks inner.

    ``database`` is float32 numpy (CPU, OpenBLAS) or a torch tensor (its device). One padded buffer
    is reused (see :class:`Block`)."""
    n, m = queries.n, int(database.shape[0])
    on_torch = is_tensor(database)
    shape = (_round_up(min(rows, n), CHUNK), _round_up(min(cols, m), CHUNK))
    if on_torch:
        buffer = _torch().empty(shape, dtype=_torch().float32, device=database.device)
    else:
        buffer = np.empty(shape, dtype=np.float32)
    filled = list(shape)  # extent of the buffer that may hold anything but -inf
    starts = [(r0, c0) for r0 in range(0, n, rows) for c0 in range(0, m, cols)]
    for r0, c0 in tqdm(starts, desc=desc, unit="block", disable=not progress):
        r1, c1 = min(n, r0 + rows), min(m, c0 + cols)
        b, c = r1 - r0, c1 - c0
        if c0 == 0:
            q = queries.block(r0, r1)
        if filled[0] > b:
            buffer[b: filled[0], :] = -math.inf
        if filled[1] > c:
            buffer[:, c: filled[1]] = -math.inf
        filled = [b, c]
        view = buffer[:b, :c]
        if on_torch:
            _torch().matmul(q, database[c0:c1].T, out=view)
        else:
            np.matmul(q, database[c0:c1].T, out=view)
        yield Block(r0, r1, c0, c1, buffer)


def run_pass(queries: RowSource, database: Any, reducers: Sequence[Any], *, rows: int, cols: int,
             transform: Callable[[Block], None] | None = None, progress: bool = False,
             desc: str | None = None) -> None:
    """One pass over the score blocks: ``transform(block)`` (in place, optional), then every
    reducer's ``update(block)``; a reducer's ``end_rows(row0, row1)`` (if it has one) after the last
    block of each row block."""
    m = int(database.shape[0])
    for block in iter_blocks(queries, database, rows=rows, cols=cols, progress=progress, desc=desc):
        if transform is not None:
            transform(block)
        for reducer in reducers:
            reducer.update(block)
        if block.col1 == m:
            for reducer in reducers:
                end = getattr(reducer, "end_rows", None)
                if end is not None:
                    end(block.row0, block.row1)


# --------------------------------------------------------------------------------------------
# Block primitives (numpy and torch)
# --------------------------------------------------------------------------------------------


def _np(x: Any) -> np.ndarray:
    return x.cpu().numpy() if is_tensor(x) else np.asarray(x)


def chunk_max_rows(scores: Any, n_rows: int, chunk: int = CHUNK) -> Any:
    """Maximum of each *comb* of ``chunk`` entries in each of the first ``n_rows`` rows of a padded
    block: comb j of a row holds the columns ``j + t·(width / chunk)``, t < chunk. Shape
    ``(n_rows, width / chunk)``. (Combs rather than runs: the reduction then runs across
    contiguous memory, which numpy vectorises.)"""
    width = scores.shape[1]
    part = scores[:n_rows].reshape(n_rows, chunk, width // chunk)
    return part.amax(dim=1) if is_tensor(part) else part.max(axis=1)


def chunk_max_cols(scores: Any, n_cols: int, chunk: int = CHUNK) -> Any:
    """Maximum of each run of ``chunk`` rows in each of the first ``n_cols`` columns of a padded
    block: shape ``(height / chunk, n_cols)``."""
    height = scores.shape[0]
    part = scores.reshape(height // chunk, chunk, scores.shape[1])
    part = part.amax(dim=1) if is_tensor(part) else part.max(axis=1)
    return part[:, :n_cols]


def kth_largest(values: Any, k: int, *, axis: int) -> np.ndarray:
    """The k-th largest value along ``axis`` (−inf where the axis is shorter than k), as numpy."""
    length = values.shape[axis]
    if length < k:
        shape = list(values.shape)
        del shape[axis]
        return np.full(shape, -np.inf, dtype=np.float32)
    if is_tensor(values):
        return values.topk(k, dim=axis).values.select(axis, k - 1).cpu().numpy()
    if k == 1:
        return values.max(axis=axis)
    return np.take(np.partition(values, length - k, axis=axis), length - k, axis=axis)


# --------------------------------------------------------------------------------------------
# Reducer: entries near the top of each line
# --------------------------------------------------------------------------------------------


class WindowEntries(NamedTuple):
    """Entries of a score matrix, grouped by line (row or column) and, within a line, by
    decreasing value: ``line[i]``, ``other[i]`` (the column of a row line / the row of a column
    line) and the float32 ``value[i]``."""

    line: np.ndarray
    other: np.ndarray
    value: np.ndarray


def _sort_entries(line, other, value) -> WindowEntries:
    order = np.lexsort((other, -value.astype(np.float64), line))
    return WindowEntries(line[order], other[order], value[order])


def _group_starts(sorted_line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first index of each line's run, the line of each run) in a sorted line array."""
    if sorted_line.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_line[1:] != sorted_line[:-1]])
    return starts, sorted_line[starts]


class WindowTopK:
    """Per line of the score matrix (``axis="rows"``: each query row; ``"cols"``: each database
    column), keeps **every entry ≥ (the line's k-th largest value) − window** — for k = 1 the
    argmax candidates, for k > 1 the top k and everything within ``window`` of the k-th. Streaming
    over blocks, it only ever drops entries below a proven lower bound of the final k-th value minus
    the window: the k-th largest kept so far, or the k-th largest of a block's chunk maxima (k
    chunks whose maxima are ≥ b hold k entries ≥ b).

    Per block this costs one pass for the chunk maxima (combs of :data:`CHUNK` entries of a row,
    runs of ``CHUNK / 4`` entries of a column) plus a gather of the chunks that can hold
    candidates. Row lines are finished at the end of each row
    block (``end_rows``), column lines at the end of the pass; :meth:`result` returns the entries.
    """

    def __init__(self, *, axis: str, n_lines: int, k: int, window: float, chunk: int | None = None):
        if axis not in ("rows", "cols"):
            raise ValueError(f"WindowTopK: axis must be 'rows' or 'cols', got {axis!r}")
        if k < 1:
            raise ValueError(f"WindowTopK: k must be ≥ 1, got {k}")
        if not window >= 0:
            raise ValueError(f"WindowTopK: window must be ≥ 0, got {window}")
        if chunk is None:  # column runs are gathered across rows: shorter runs, fewer gathered
            chunk = CHUNK if axis == "rows" else CHUNK // 4
        if CHUNK % chunk:
            raise ValueError(f"WindowTopK: chunk must divide {CHUNK}, got {chunk}")
        self.axis, self.k, self.window, self.chunk = axis, int(k), float(window), int(chunk)
        self.threshold = np.full(n_lines, -np.inf, dtype=np.float64)  # never keep below this
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending = 0
        self._kept = 0
        self._done: list[WindowEntries] = []

    # -- candidates of one block -------------------------------------------------------------
    def update(self, block: Block) -> None:
        s = block.scores
        b, c, L = block.n_rows, block.n_cols, self.chunk
        if self.axis == "rows":
            cm = chunk_max_rows(s, b, L)  # (b, width/L)
            lower = kth_largest(cm, self.k, axis=1).astype(np.float64)
            thr = np.maximum(self.threshold[block.row0: block.row1], lower - self.window)
            self.threshold[block.row0: block.row1] = thr
            thr_dev = _like(cm, thr)
            r, g = _nonzero(cm >= thr_dev[:, None])
            if r.size == 0:
                return
            cols = g[:, None] + np.arange(L)[None, :] * (s.shape[1] // L)  # comb g of each row
            vals = _np(_gather(s, r[:, None], cols))
            keep = (vals >= thr[r][:, None]) & (cols < c) & (vals > -np.inf)
            rr, jj = np.nonzero(keep)
            lines, others, values = block.row0 + r[rr], block.col0 + cols[rr, jj], vals[rr, jj]
        else:
            cm = chunk_max_cols(s, c, L)  # (height/L, c)
            lower = kth_largest(cm, self.k, axis=0).astype(np.float64)
            thr = np.maximum(self.threshold[block.col0: block.col1], lower - self.window)
            self.threshold[block.col0: block.col1] = thr
            thr_dev = _like(cm, thr)
            g, j = _nonzero(cm >= thr_dev[None, :])
            if g.size == 0:
                return
            rows = g[:, None] * L + np.arange(L)[None, :]
            vals = _np(_gather(s, rows, j[:, None]))
            keep = (vals >= thr[j][:, None]) & (rows < b) & (vals > -np.inf)
            gg, ii = np.nonzero(keep)
            lines, others, values = block.col0 + j[gg], block.row0 + rows[gg, ii], vals[gg, ii]
        self._parts.append((lines.astype(np.int64), others.astype(np.int64), values.astype(np.float32)))
        self._pending += lines.size
        if self._pending > max(1 << 20, 2 * self._kept):
            self._compact()

    def _compact(self) -> WindowEntries:
        """Merge the parts, raise each line's threshold to its k-th kept value − window, drop below."""
        if not self._parts:
            return WindowEntries(*(np.zeros(0, dtype=t) for t in (np.int64, np.int64, np.float32)))
        entries = _sort_entries(*(np.concatenate(p) for p in zip(*self._parts)))
        starts, lines = _group_starts(entries.line)
        counts = np.diff(np.r_[starts, entries.line.size])
        full = counts >= self.k
        kth = entries.value[starts[full] + self.k - 1].astype(np.float64)
        self.threshold[lines[full]] = np.maximum(self.threshold[lines[full]], kth - self.window)
        keep = entries.value >= self.threshold[entries.line]
        entries = WindowEntries(entries.line[keep], entries.other[keep], entries.value[keep])
        self._parts = [tuple(entries)]
        self._pending, self._kept = 0, entries.line.size
        return entries

    def end_rows(self, row0: int, row1: int) -> None:
        if self.axis == "rows":  # a row block's lines are complete: move them out of the log
            self._done.append(self._compact())
            self._parts, self._kept = [], 0
        elif self._pending > self._kept // 2:  # tighten the column thresholds once per row block
            self._compact()

    def result(self) -> WindowEntries:
        """All kept entries, by line and decreasing value (ties: lower ``other`` first)."""
        parts = self._done + ([self._compact()] if self._parts else [])
        if not parts:
            return WindowEntries(*(np.zeros(0, dtype=t) for t in (np.int64, np.int64, np.float32)))
        return WindowEntries(*(np.concatenate(p) for p in zip(*parts)))


def _like(template: Any, values: np.ndarray) -> Any:
    """``values`` as float32 on the template's backend (for comparisons with block data)."""
    if is_tensor(template):
        return _torch().as_tensor(values, dtype=_torch().float32, device=template.device)
    return values.astype(np.float32)


def _nonzero(mask: Any) -> tuple[np.ndarray, np.ndarray]:
    if is_tensor(mask):
        idx = _torch().nonzero(mask).cpu().numpy()
        return idx[:, 0].astype(np.int64), idx[:, 1].astype(np.int64)
    a, b = np.nonzero(mask)
    return a.astype(np.int64), b.astype(np.int64)


def _gather(scores: Any, rows: np.ndarray, cols: np.ndarray) -> Any:
    """``scores[rows, cols]`` with broadcasting index arrays (indices past the padded buffer are
    clamped; callers mask them out)."""
    rows = np.minimum(rows, scores.shape[0] - 1)
    cols = np.minimum(cols, scores.shape[1] - 1)
    if is_tensor(scores):
        torch = _torch()
        return scores[torch.as_tensor(rows, device=scores.device), torch.as_tensor(cols, device=scores.device)]
    return scores[rows, cols]


# --------------------------------------------------------------------------------------------
# Reducer: column log-sum-exp
# --------------------------------------------------------------------------------------------


class ColumnLogSumExp:
    """Per database column: ``log Σ_rows exp(beta·S[row, col])`` (float64), streaming with a
    running maximum. Terms are computed in float32 (``exp(fl(fl(S − max)·beta))``) in strips of
    ``strip`` rows summed in float32, then accumulated in float64; :meth:`error_bound` bounds the
    result's error against the same formula on exact scores that are within ``score_error`` of S.
    """

    def __init__(self, *, n_cols: int, beta: float, strip: int = CHUNK):
        if not (math.isfinite(beta) and beta > 0):
            raise ValueError(f"ColumnLogSumExp: beta must be a positive finite number, got {beta}")
        self.beta, self.strip = float(beta), int(strip)
        self.peak = np.full(n_cols, -np.inf, dtype=np.float32)
        self.total = np.zeros(n_cols, dtype=np.float64)
        self.n_rows = 0
        self.n_blocks = 0

    def update(self, block: Block) -> None:
        s = block.valid
        b, c0, c1 = block.n_rows, block.col0, block.col1
        if c0 == 0:
            self.n_rows += b
        self.n_blocks += 1
        if is_tensor(s):
            torch = _torch()
            new_peak = np.maximum(self.peak[c0:c1], s.amax(dim=0).cpu().numpy())
            peak_dev = torch.as_tensor(new_peak, device=s.device)
            part = torch.zeros(c1 - c0, dtype=torch.float64, device=s.device)
            for r in range(0, b, self.strip):
                t = torch.exp((s[r: r + self.strip] - peak_dev) * self.beta)
                part += t.sum(dim=0, dtype=torch.float32).double()
            part = part.cpu().numpy()
        else:
            new_peak = np.maximum(self.peak[c0:c1], s.max(axis=0))
            part = np.zeros(c1 - c0, dtype=np.float64)
            tmp = np.empty((min(self.strip, b), c1 - c0), dtype=np.float32)
            for r in range(0, b, self.strip):
                rows = min(self.strip, b - r)
                t = tmp[:rows]
                np.subtract(s[r: r + rows], new_peak[None, :], out=t)
                np.multiply(t, np.float32(self.beta), out=t)
                np.exp(t, out=t)
                part += np.add.reduce(t, axis=0)
        old = self.peak[c0:c1].astype(np.float64)
        with np.errstate(invalid="ignore"):
            rescale = np.where(np.isfinite(old), np.exp(self.beta * (old - new_peak.astype(np.float64))), 0.0)
        self.total[c0:c1] = self.total[c0:c1] * rescale + part
        self.peak[c0:c1] = new_peak

    def result(self) -> np.ndarray:
        """``log Σ exp(beta·S)`` per column (float64)."""
        return self.beta * self.peak.astype(np.float64) + np.log(self.total)

    def error_bound(self, *, score_error: float, score_absmax: float = 1.0) -> float:
        """Bound on ``|result − log Σ exp(beta·s)|`` for exact scores ``s`` with ``|S − s| ≤
        score_error`` and ``|S| ≤ score_absmax``: ``beta·score_error`` (the log-sum-exp is
        1-Lipschitz) plus the relative error of the computed sum (argument rounding, float32 exp
        within :data:`EXP32_ULPS` ulp, float32 strip sums, float64 rescaling, underflow), through
        the log. The sum is ≥ 1 (the maximum contributes exp(0) = 1), so absolute errors count
        as relative ones."""
        argument = (2 * U32 + U32**2) * 2 * (score_absmax + score_error) * self.beta
        rel = (math.expm1(argument) + EXP32_ULPS * 2 * U32 + gamma(self.strip, U32)
               + self.n_rows * MIN_NORMAL32 * 2 + (2 * self.n_blocks + 4) * U64)
        return self.beta * score_error + rel / (1 - rel) + 4 * U64 * self.beta * (score_absmax + 1)


# --------------------------------------------------------------------------------------------
# Reducer: counts above thresholds (retrieval ranks)
# --------------------------------------------------------------------------------------------


_LANES16 = np.uint64(0x00FF00FF00FF00FF)
_FOLD16 = np.uint64(0x0001000100010001)


def _lane_group(words: int) -> int:
    """The largest divisor of ``words`` that is ≤ 255 (byte lanes summed over that many words
    cannot carry)."""
    return next(g for g in range(min(words, 255), 0, -1) if words % g == 0)


def count_true_rows(mask: np.ndarray) -> np.ndarray:
    """Number of True values in each row of a C-contiguous bool array whose width is a multiple
    of 8. Rows are read as 64-bit words whose eight byte lanes (0 or 1 each) are summed over
    groups of ≤ 255 words without carries, then folded to 16-bit lanes and added up."""
    words = mask.view(np.uint64)
    h, w = words.shape
    g = _lane_group(w)
    sums = words.reshape(h, w // g, g).sum(axis=2)  # byte lanes ≤ 255
    pairs = (sums & _LANES16) + ((sums >> np.uint64(8)) & _LANES16)  # 16-bit lanes ≤ 510
    return ((pairs * _FOLD16) >> np.uint64(48)).sum(axis=1).astype(np.int64)  # group totals ≤ 2040


def count_true_cols(mask: np.ndarray) -> np.ndarray:
    """Number of True values in each column of a C-contiguous bool array of ≤ 255 rows whose
    width is a multiple of 8 (bytes summed lane-wise in 64-bit words, which cannot carry)."""
    if mask.shape[0] > 255 or sys.byteorder != "little":
        return mask.sum(axis=0, dtype=np.int64)
    return mask.view(np.uint64).sum(axis=0).view(np.uint8).astype(np.int64)


class Undecided(NamedTuple):
    """Score-matrix entries (``row[i]``, ``col[i]``) that float32 cannot order against their
    line's threshold; ``axis`` says whether the line is the row or the column."""

    row: np.ndarray
    col: np.ndarray


class ThresholdCounter:
    """Per row and/or per column of the score matrix, with a window ``[lo, hi]`` around each
    line's threshold: counts the entries **strictly above hi** and collects the entries inside
    the window beyond the ones the caller expects there (``row_expected[i]`` entries in row i;
    the entry in row ``col_expected_row[j]`` of column j, if ≥ 0). Those are the entries whose
    order against the threshold float32 cannot decide; the caller settles them in float64.

    Row thresholds are passed per block (``update(block, row_lo=…, row_hi=…)``) — blocks must
    hold whole rows; column thresholds are fixed (``col_lo``/``col_hi``, one per column); pass
    ``rows=False`` / no column thresholds to skip a direction. The numpy path works in strips of
    ≤ 255 rows: each comparison writes a byte mask, rows are counted with one popcount per
    8 bytes (:func:`count_true_rows`) and columns by summing the masks as 64-bit words, eight
    byte-lanes at a time that cannot carry (≤ 255 rows); since ``hi ≥ lo`` every lane of the
    "≥ lo" sum is ≥ the same lane of the "> hi" sum, so their difference (the window counts)
    is a plain word subtraction.
    """

    def __init__(self, *, n_rows: int, n_cols: int, rows: bool, col_lo=None, col_hi=None,
                 row_expected=None, col_expected_row=None):
        self.n_rows, self.n_cols, self.do_rows = n_rows, n_cols, bool(rows)
        self.do_cols = col_lo is not None
        self.col_lo = None if col_lo is None else np.asarray(col_lo, dtype=np.float32)
        self.col_hi = None if col_hi is None else np.asarray(col_hi, dtype=np.float32)
        if self.do_cols and not bool(np.all(self.col_hi >= self.col_lo)):
            raise ValueError("ThresholdCounter: every column needs hi ≥ lo")
        self.row_expected = (np.zeros(n_rows, dtype=np.int64) if row_expected is None
                             else np.asarray(row_expected, dtype=np.int64))
        self.col_expected_row = (np.full(n_cols, -1, dtype=np.int64) if col_expected_row is None
                                 else np.asarray(col_expected_row, dtype=np.int64))
        self.row_above = np.zeros(n_rows, dtype=np.int64)
        self.col_above = np.zeros(n_cols, dtype=np.int64)
        self._undecided_rows: list[tuple[np.ndarray, np.ndarray]] = []
        self._undecided_cols: list[tuple[np.ndarray, np.ndarray]] = []
        self._col_order = np.argsort(self.col_expected_row, kind="stable")
        self._col_sorted_rows = self.col_expected_row[self._col_order]
        self._masks: list[np.ndarray] = []

    def update(self, block: Block, *, row_lo=None, row_hi=None) -> None:
        if block.col0 != 0 or block.col1 != self.n_cols:
            raise ValueError("ThresholdCounter: blocks must hold whole rows")
        if is_tensor(block.scores):
            self._update_torch(block, row_lo, row_hi)
            return
        if self.do_rows:
            lo_r = np.asarray(row_lo, dtype=np.float32)
            hi_r = np.asarray(row_hi, dtype=np.float32)
            if not bool(np.all(hi_r >= lo_r)):
                raise ValueError("ThresholdCounter: every row needs hi ≥ lo")
        width = block.scores.shape[1]
        strip = max(8, min(248, (1 << 20) // max(1, width) // 8 * 8))
        if not self._masks or self._masks[0].shape != (strip, width):
            self._masks = [np.zeros((strip, width), dtype=bool) for _ in range(2)]
        above, inside = self._masks
        c = self.n_cols
        scores = block.scores
        for s in range(0, block.n_rows, strip):
            e = min(block.n_rows, s + strip)
            h, g0 = e - s, block.row0 + s
            part, up, near = scores[s:e], above[:h], inside[:h]
            if self.do_rows:
                np.greater(part, hi_r[s:e, None], out=up)
                np.greater_equal(part, lo_r[s:e, None], out=near)
                n_above = count_true_rows(up)
                extra = count_true_rows(near) - n_above - self.row_expected[g0: g0 + h]
                self.row_above[g0: g0 + h] = n_above
                if extra.min(initial=0) < 0:
                    raise RuntimeError("internal error: a row's threshold entry fell outside its "
                                       "proven float32 error window")
                for i in np.flatnonzero(extra > 0):
                    cols = np.flatnonzero(near[i, :c] & ~up[i, :c])
                    self._undecided_rows.append((np.full(cols.size, g0 + i, dtype=np.int64), cols))
            if self.do_cols:
                np.greater(part[:, :c], self.col_hi[None, :], out=up[:, :c])
                np.greater_equal(part[:, :c], self.col_lo[None, :], out=near[:, :c])
                up[:, c:] = False
                near[:, c:] = False
                if sys.byteorder == "little":
                    words_up = up.view(np.uint64).sum(axis=0)
                    window = (near.view(np.uint64).sum(axis=0) - words_up).view(np.uint8)[:c].copy()
                    self.col_above += words_up.view(np.uint8)[:c]
                else:  # pragma: no cover - big-endian machines
                    n_up = up.sum(axis=0)[:c]
                    window = (near.sum(axis=0)[:c] - n_up).astype(np.int64)
                    self.col_above += n_up
                a, z = np.searchsorted(self._col_sorted_rows, [g0, g0 + h])
                expected = self._col_order[a:z]
                if expected.size and int(window[expected].min()) < 1:
                    raise RuntimeError("internal error: a column's threshold entry fell outside its "
                                       "proven float32 error window")
                window[expected] -= 1
                cols = np.flatnonzero(window)
                if cols.size:
                    rr, jj = np.nonzero(near[:, cols] & ~up[:, cols])
                    self._undecided_cols.append((g0 + rr.astype(np.int64), cols[jj].astype(np.int64)))

    def _update_torch(self, block: Block, row_lo, row_hi) -> None:
        torch = _torch()
        s = block.valid
        dev = s.device
        g0, b = block.row0, block.n_rows
        if self.do_rows:
            lo = torch.as_tensor(np.asarray(row_lo, dtype=np.float32), device=dev)[:, None]
            hi = torch.as_tensor(np.asarray(row_hi, dtype=np.float32), device=dev)[:, None]
            above = s > hi
            inside = (s >= lo) & ~above
            n_above = above.sum(dim=1).cpu().numpy()
            extra = inside.sum(dim=1).cpu().numpy() - self.row_expected[g0: g0 + b]
            self.row_above[g0: g0 + b] = n_above
            if extra.min(initial=0) < 0:
                raise RuntimeError("internal error: a row's threshold entry fell outside its "
                                   "proven float32 error window")
            rows = np.flatnonzero(extra > 0)
            if rows.size:
                idx = torch.nonzero(inside[torch.as_tensor(rows, device=dev)]).cpu().numpy()
                self._undecided_rows.append((g0 + rows[idx[:, 0]], idx[:, 1].astype(np.int64)))
        if self.do_cols:
            lo = torch.as_tensor(self.col_lo, device=dev)[None, :]
            hi = torch.as_tensor(self.col_hi, device=dev)[None, :]
            above = s > hi
            inside = (s >= lo) & ~above
            self.col_above += above.sum(dim=0).cpu().numpy()
            extra = inside.sum(dim=0).cpu().numpy()
            if self.col_expected_row is not None:
                exp = (self.col_expected_row >= g0) & (self.col_expected_row < g0 + b)
                extra = extra - exp
            if extra.min(initial=0) < 0:
                raise RuntimeError("internal error: a column's threshold entry fell outside its "
                                   "proven float32 error window")
            cols = np.flatnonzero(extra > 0)
            if cols.size:
                idx = torch.nonzero(inside[:, torch.as_tensor(cols, device=dev)]).cpu().numpy()
                self._undecided_cols.append((g0 + idx[:, 0].astype(np.int64), cols[idx[:, 1]]))

    def undecided(self) -> tuple[Undecided, Undecided]:
        """(entries to settle for the row lines, entries to settle for the column lines)."""
        def cat(parts):
            if not parts:
                return Undecided(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            return Undecided(*(np.concatenate(p).astype(np.int64) for p in zip(*parts)))

        return cat(self._undecided_rows), cat(self._undecided_cols)
