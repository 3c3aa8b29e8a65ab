"""Reducers: what one pass over the score blocks keeps (per-line windows of the top scores,
per-column log-sum-exp, threshold counts with the undecided entries); see
:mod:`pseudopairs.similarity`."""

from __future__ import annotations

import math
import sys
import threading
from typing import Any, NamedTuple

import numpy as np

from pseudopairs.similarity.arrays import _map_chunks, _torch, cpu_threads, is_tensor
from pseudopairs.similarity.blocks import CHUNK, Block
from pseudopairs.similarity.bounds import EXP32_ULPS, MIN_NORMAL32, U32, U64, gamma

# --------------------------------------------------------------------------------------------
# Block primitives (numpy and torch)
# --------------------------------------------------------------------------------------------


def _np(x: Any) -> np.ndarray:
    return x.cpu().numpy() if is_tensor(x) else np.asarray(x)


_PARALLEL_MIN = 1 << 22  # entries from which a numpy reduction is split over the CPUs


def _parallel_max(part: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[:] = part.max(axis=1)`` for a 3-D numpy view, split over the first axis on the
    process's CPUs when it is big (numpy releases the GIL inside the reduction)."""
    threads = cpu_threads() if part.size >= _PARALLEL_MIN else 1
    step = max(1, -(-part.shape[0] // threads))
    _map_chunks(lambda s, e: np.max(part[s:e], axis=1, out=out[s:e]), part.shape[0], step, threads)
    return out


def chunk_max_rows(scores: Any, n_rows: int, chunk: int = CHUNK) -> Any:
    """Maximum of each *comb* of ``chunk`` entries in each of the first ``n_rows`` rows of a padded
    block: comb j of a row holds the columns ``j + t·(width / chunk)``, t < chunk. Shape
    ``(n_rows, width / chunk)``. (Combs rather than runs: the reduction then runs across
    contiguous memory, which numpy vectorises.)"""
    width = scores.shape[1]
    part = scores[:n_rows].reshape(n_rows, chunk, width // chunk)
    if is_tensor(part):
        return part.amax(dim=1)
    return _parallel_max(part, np.empty((n_rows, width // chunk), dtype=part.dtype))


def chunk_max_cols(scores: Any, n_cols: int, chunk: int = CHUNK) -> Any:
    """Maximum of each run of ``chunk`` rows in each of the first ``n_cols`` columns of a padded
    block: shape ``(height / chunk, n_cols)``."""
    height = scores.shape[0]
    part = scores.reshape(height // chunk, chunk, scores.shape[1])
    if is_tensor(part):
        return part.amax(dim=1)[:, :n_cols]
    return _parallel_max(part, np.empty((height // chunk, scores.shape[1]), dtype=part.dtype))[:, :n_cols]


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


#: The most window entries (line, other, value: 20 bytes each, ~5 GB) a :class:`WindowTopK`
#: without ``exact_of`` keeps. A trained model keeps a few per line; far more means the scores
#: nearly tie.
MAX_WINDOW_ENTRIES = 250_000_000
#: With ``exact_of``, kept entries beyond this many (~320 MB) are settled: rescored exactly and cut
#: to each line's k best, so memory stays bounded however close the scores are.
SETTLE_ENTRIES = 16_000_000


def settle_entries(entries: WindowEntries, exact: np.ndarray, k: int
                   ) -> tuple[WindowEntries, np.ndarray, np.ndarray]:
    """Per line, the ``k`` entries with the largest ``exact`` values (ties: lower ``other``),
    grouped by line in decreasing exact order; also the lines that have k entries and their k-th
    exact values."""
    order = np.lexsort((entries.other, -exact, entries.line))
    line, other, value, exact = entries.line[order], entries.other[order], entries.value[order], exact[order]
    starts, _ = _group_starts(line)
    rank = np.arange(line.size) - np.repeat(starts, np.diff(np.r_[starts, line.size]))
    keep, kth_at = rank < k, rank == k - 1
    return WindowEntries(line[keep], other[keep], value[keep]), line[kth_at], exact[kth_at]


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

    Near-ties (a collapsed model's scores all lie within the window) would keep every entry.
    Given ``exact_of(lines, others) -> float64`` (the value the window's scores estimate within
    ``window / 2``), the kept entries are **settled** whenever they pass ``settle_at``: rescored
    exactly and cut to each line's k best (ties: lower ``other``), and the line's threshold raised
    to its k-th exact value − ``window`` — an entry below it is below the k-th exact value, so no
    answer changes. Memory then stays within ``settle_at`` entries plus one block's; without
    ``exact_of`` the reducer stops at ``max_entries`` with an error naming the near-ties.
    """

    def __init__(self, *, axis: str, n_lines: int, k: int, window: float, chunk: int | None = None,
                 max_entries: int = MAX_WINDOW_ENTRIES, exact_of=None, settle_at: int | None = None):
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
        self._done_entries = 0
        self._done_fresh = 0  # finished row lines' entries added since they were last settled
        self.max_entries, self.n_lines = int(max_entries), int(n_lines)
        self.exact_of = exact_of
        self.settle_at = max(1, int(SETTLE_ENTRIES if settle_at is None else settle_at))
        self.settled = 0  # how many times kept entries were settled (logged by callers)
        self.peak_entries = 0  # the most entries kept at once

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
            self._check_size()

    def _check_size(self) -> None:
        """Stop, saying why, before the kept entries outgrow the memory a trained model needs
        (a collapsed model's scores all lie within the window: every entry would be kept)."""
        kept = self._done_entries + self._kept
        self.peak_entries = max(self.peak_entries, kept + self._pending)
        if kept > self.max_entries:
            raise ValueError(
                f"similarity engine: {kept:,} candidates within the error window of the best "
                f"scores ({kept / max(1, self.n_lines):,.0f} per {self.axis[:-1]} on average) exceed "
                f"the limit of {self.max_entries:,} (~{self.max_entries * 20 / 1e9:.0f} GB): the "
                f"scores nearly tie, as a collapsed model's do (embeddings almost identical, e.g. "
                f"max-violation training stuck on its plateau or stopped after a few updates); "
                f"check the model's validation scores before mining or evaluating with it")

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
        if self.exact_of is not None and entries.line.size + self._done_entries > self.settle_at:
            entries = self._settle(entries)
            if self._done_fresh and self._done_entries + entries.line.size > self.settle_at:
                done = self._settle(WindowEntries(*(np.concatenate(p) for p in zip(*self._done))))
                self._done, self._done_entries, self._done_fresh = [done], done.line.size, 0
        self._parts = [tuple(entries)]
        self._pending, self._kept = 0, entries.line.size
        return entries

    def _settle(self, entries: WindowEntries) -> WindowEntries:
        """Cut ``entries`` to each line's k best by exact value and raise those lines' thresholds."""
        exact = np.asarray(self.exact_of(entries.line, entries.other), dtype=np.float64)
        settled, lines, kth = settle_entries(entries, exact, self.k)
        self.threshold[lines] = np.maximum(self.threshold[lines], kth - self.window)
        self.settled += 1
        return _sort_entries(*settled)

    def end_rows(self, row0: int, row1: int) -> None:
        if self.axis == "rows":  # a row block's lines are complete: move them out of the log
            finished = self._compact()  # may settle (replace) the finished lines first
            self._done.append(finished)
            self._done_entries += finished.line.size
            self._done_fresh += finished.line.size
            self._parts, self._kept = [], 0
            self._check_size()
        elif self._pending > self._kept // 2:  # tighten the column thresholds once per row block
            self._compact()
            self._check_size()

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
    is a plain word subtraction. Strips run on the process's CPUs in parallel (numpy releases
    the GIL), each with its own masks and column counts.
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
        self.threads = cpu_threads()

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
        lo_r, hi_r = (lo_r, hi_r) if self.do_rows else (None, None)
        totals: list[np.ndarray] = []
        local = threading.local()

        def work(s: int, e: int) -> None:  # numpy releases the GIL: strips run in parallel
            if getattr(local, "masks", None) is None:
                local.masks = [np.zeros((strip, width), dtype=bool) for _ in range(2)]
                local.col_above = np.zeros(self.n_cols, dtype=np.int64)
                totals.append(local.col_above)
            self._update_strip(block, s, e, lo_r, hi_r, local.masks, local.col_above)

        _map_chunks(work, block.n_rows, strip, self.threads)
        for part in totals:
            self.col_above += part

    def _update_strip(self, block: Block, s: int, e: int, lo_r, hi_r, masks, col_above) -> None:
        """Rows ``s:e`` of a numpy block (≤ 255 rows: byte lanes cannot carry)."""
        c = self.n_cols
        h, g0 = e - s, block.row0 + s
        part, up, near = block.scores[s:e], masks[0][:h], masks[1][:h]
        if self.do_rows:
            np.greater(part, hi_r[s:e, None], out=up)
            np.greater_equal(part, lo_r[s:e, None], out=near)
            n_above = count_true_rows(up)
            extra = count_true_rows(near) - n_above - self.row_expected[g0: g0 + h]
            self.row_above[g0: g0 + h] = n_above
            if extra.min(initial=0) < 0:
                raise RuntimeError("internal error: a row's threshold entry fell outside its "
                                   "proven error window")
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
                col_above += words_up.view(np.uint8)[:c]
            else:  # pragma: no cover - big-endian machines
                n_up = up.sum(axis=0)[:c]
                window = (near.sum(axis=0)[:c] - n_up).astype(np.int64)
                col_above += n_up
            a, z = np.searchsorted(self._col_sorted_rows, [g0, g0 + h])
            expected = self._col_order[a:z]
            if expected.size and int(window[expected].min()) < 1:
                raise RuntimeError("internal error: a column's threshold entry fell outside its "
                                   "proven error window")
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
                                   "proven error window")
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
                                   "proven error window")
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

