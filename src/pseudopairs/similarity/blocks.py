"""The score matrix in blocks: a float32 GEMM per block of query rows × database rows, handed to
reducers (see :mod:`pseudopairs.similarity`)."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np
from tqdm import tqdm

from pseudopairs.similarity.arrays import _torch, is_tensor, uses_torch
from pseudopairs.similarity.lowp import BF16Rows, Scratch, bf16_from_blocks, gemm_bf16, to_bf16
from pseudopairs.similarity.rows import UnitRows, unit_block32

DEFAULT_BLOCK_ELEMENTS = 1 << 25  # scores per block: 128 MiB of float32
DEFAULT_BLOCK_ROWS = 2048  # query rows per block when both sides are large (keeps the GEMM efficient)
CHUNK = 64  # entries per chunk maximum (see reducers.WindowTopK)

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
        if getattr(self.rows, "data", None) is not None:
            from pseudopairs.similarity.device_rows import same_device

            if same_device(self.rows.data.device, self.device):
                return self.rows.unit_block(start, stop)  # rows already on the device (device_rows)
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


def database_bf16(rows: UnitRows, device: Any = "cpu") -> BF16Rows:
    """All rows of ``rows`` normalised as by :func:`database32`, then rounded to bfloat16 (with
    each row's rounding error; no float32 copy of the whole matrix is kept)."""
    return bf16_from_blocks(rows.n, UnitRowSource(rows, device).block, torch_buffers=uses_torch(device))


def iter_blocks(queries: RowSource, database: Any, *, rows: int, cols: int, progress: bool = False,
                desc: str | None = None) -> Iterator[Block]:
    """Score blocks ``queries[r0:r1] @ database[c0:c1].T``, row blocks outer, database chunks inner.

    ``database`` is float32 numpy (CPU, OpenBLAS), a torch tensor (its device), or
    :class:`~pseudopairs.similarity.lowp.BF16Rows` (the bf16 candidate GEMM; query blocks are
    rounded to bf16 as they come). One padded float32 buffer is reused (see :class:`Block`)."""
    n, m = queries.n, int(database.shape[0])
    low = isinstance(database, BF16Rows)
    on_torch = database.torch_buffers if low else is_tensor(database)
    shape = (_round_up(min(rows, n), CHUNK), _round_up(min(cols, m), CHUNK))
    if on_torch:
        device = database.data.device if low else database.device
        buffer = _torch().empty(shape, dtype=_torch().float32, device=device)
    else:
        buffer = np.empty(shape, dtype=np.float32)
    filled = list(shape)  # extent of the buffer that may hold anything but -inf
    scratch = Scratch() if low else None
    starts = [(r0, c0) for r0 in range(0, n, rows) for c0 in range(0, m, cols)]
    for r0, c0 in tqdm(starts, desc=desc, unit="block", disable=not progress):
        r1, c1 = min(n, r0 + rows), min(m, c0 + cols)
        b, c = r1 - r0, c1 - c0
        if c0 == 0:
            q = queries.block(r0, r1)
            if low:
                q = to_bf16(q)
        if filled[0] > b:
            buffer[b: filled[0], :] = -math.inf
        if filled[1] > c:
            buffer[:, c: filled[1]] = -math.inf
        filled = [b, c]
        view = buffer[:b, :c]
        if low:
            gemm_bf16(q, database.data[c0:c1], view, scratch=scratch)
        elif on_torch:
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


