"""Pseudopair search (paper §2.2): for each query caption, the database caption it is paired
with under a registered criterion (:mod:`pseudopairs.mining.criteria`).

The paper encodes every English COCO caption (the queries) and every German Multi30K caption (the
database) with a trained model and pairs each query with its most cosine-similar database caption
(criterion ``cosine``). Beyond the paper, hubness-aware criteria keep a few database captions
from being everybody's match (paper §7.2 observes the problem; :mod:`pseudopairs.mining.statistics`
measures it).

``cos(q, d)`` is the **exact float64 cosine** of :mod:`pseudopairs.similarity`:
``dot64(q', d') / (‖q'‖·‖d'‖)`` evaluated by one deterministic float64 routine (for float32
inputs every product is exact and only the pairwise summation rounds, ≈ 1e-13 at d = 1024), so
identical vectors get identical values wherever they are. A zero row has no cosine (ValueError).

What "exact" means: the returned index is the argmax of the criterion evaluated in float64, and
the score is that float64 value rounded to float32 — the same bits the criterion's brute-force
reference gives (:func:`nearest_neighbours_reference`). How (memory bounded by blocks): a float32
GEMM of float32-rounded unit rows, block by block, keeps per query every database row within
``2E`` of the best (E = the proven bound on ``|S32 − cos|``, ≈ 6.1e-5 at d = 1024 on the CPU) — a
set that provably contains every exact maximiser — and only those candidates are rescored in
float64. Where the CPU has a bfloat16 unit (or on a GPU) the candidate GEMM runs in bf16 with its
own proven ``E`` (≈ 4e-3 to 8e-3 at d = 1024; :mod:`pseudopairs.similarity.lowp`): more
candidates, the same result; passes that accumulate normalisers stay float32. The passes a
criterion needs are built from the pieces below (:class:`SearchContext`, :func:`knearest_means`,
:func:`transformed_argmax`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pseudopairs.mining import criteria as criteria_registry
from pseudopairs.similarity.functions import caption_similarity
from pseudopairs.similarity import (DEFAULT_BLOCK_ELEMENTS, U32, UnitRows, UnitRowSource, WindowEntries,
                                    WindowTopK, accumulation_unit, bf16_cosine_error_bound,
                                    bf16_enabled, block_shape, check_matrix, cosine64_pairs,
                                    cosine_error_bound, cpu_threads, database32, database_bf16,
                                    engine_device, is_tensor, iter_blocks, matmul_input_unit,
                                    max_rounding_error, output_unit, run_pass, unit_rows, uses_torch)

log = logging.getLogger(__name__)

CUDA_BLOCK_ROWS = 8192  # default query rows per block on a GPU
CUDA_BLOCK_ELEMENTS = 1 << 27  # default scores per block on a GPU (512 MiB of float32)
SLACK = 2.0**-40  # relative room for float64 formula rearrangements between estimate and exact value
#: The bf16 candidate GEMM is skipped for the float32 one when a sample of queries finds more than
#: this many database rows per query within the bf16 window of its best score: the scores nearly
#: tie (a barely trained model's do), and rescoring them in float64 would cost far more than the
#: faster GEMM saves. A trained model keeps ~1-3 (docs/benchmarks.md).
CROWDED_WINDOW = 512
PROBE_ROWS = 256  # queries in that sample, evenly spaced
PROBE_MIN_SCORES = 1 << 26  # searches smaller than this many scores skip the probe


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


def _block_args(block_size: Any) -> tuple[int | None, int | None]:
    """``block_size``: None (automatic), query rows per block, or (query rows, database rows)."""
    if block_size is None:
        return None, None
    if isinstance(block_size, (tuple, list)):
        if len(block_size) != 2:
            raise ValueError(f"block_size must be rows or (rows, cols), got {block_size!r}")
        rows, cols = block_size
    else:
        rows, cols = block_size, None
    for value in (rows, cols):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                  or value < 1):
            raise ValueError(f"block_size must be positive whole numbers, got {block_size!r}")
    return (None if rows is None else int(rows)), (None if cols is None else int(cols))


def _inputs(queries: Any, database: Any, threads: int, device: Any = "cpu") -> tuple[UnitRows, UnitRows]:
    """Both sides checked and prepared for cosine scoring; on a torch device (a GPU) with rows of
    ≤ 4-byte floats, prepared there (:mod:`pseudopairs.similarity.device_rows`: the same bits)."""
    on_device = uses_torch(device)
    q = check_matrix(queries, "queries", finite=not on_device)
    d = check_matrix(database, "database", finite=not on_device)
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"queries have {q.shape[1]} dimensions but database rows have {d.shape[1]}; "
                         "they must match")
    if on_device:
        from pseudopairs.similarity.device_rows import device_unit_rows, narrow

        if narrow(q) and narrow(d):  # finiteness checked there
            return (device_unit_rows(q, name="queries", device=device, tensor=_on(queries, device)),
                    device_unit_rows(d, name="database", device=device, tensor=_on(database, device)))
        q, d = check_matrix(q, "queries"), check_matrix(d, "database")  # wide rows: on the host
    return (unit_rows(q, name="queries", threads=threads, checked=True),
            unit_rows(d, name="database", threads=threads, checked=True))


def _on(x: Any, device: Any) -> Any:
    """``x`` itself when it is a tensor already on ``device`` (no host round trip), else None."""
    from pseudopairs.similarity.device_rows import same_device

    return x if is_tensor(x) and same_device(x.device, device) else None


# --------------------------------------------------------------------------------------------
# The search context and the passes criteria are built from
# --------------------------------------------------------------------------------------------


@dataclass
class SearchContext:
    """Prepared rows, the engine device, the block shape and the error bounds of one search.

    Candidate passes (:meth:`one_pass`) run on the fastest exact path: the bf16 GEMM where
    :func:`~pseudopairs.similarity.bf16_enabled` says so, else float32; ``E`` bounds their
    ``|S − cos|`` and ``window = 2E``. Passes that accumulate scores (``precise=True``: the
    log-sum-exp normalisers) always run the float32 GEMM, bounded by ``E32`` — so a criterion's
    result does not depend on the path."""

    q: UnitRows
    d: UnitRows
    device: Any
    rows: int
    cols: int
    progress: bool
    threads: int

    def __post_init__(self) -> None:
        from pseudopairs.similarity.device_rows import DeviceUnitRows

        self.n, self.m = self.q.n, self.d.n
        self.on_device = isinstance(self.q, DeviceUnitRows) and isinstance(self.d, DeviceUnitRows)
        self.E32 = cosine_error_bound(self.q.dim, matmul_unit=matmul_input_unit(self.device))
        self._source = UnitRowSource(self.q, self.device)
        self._db32 = None
        self.bf16 = bf16_enabled(self.device)
        self.crowding = None  # bf16 window rows per sampled query, where probed
        if self.bf16:
            self._fast = database_bf16(self.d, self.device)
            q_err = max_rounding_error(self.n, self._source.block)
            self.E = bf16_cosine_error_bound(self.q.dim, q_err, self._fast.err_max,
                                             unit=accumulation_unit(self.device),
                                             out_unit=output_unit(self.device))
            if self.n * self.m >= PROBE_MIN_SCORES:
                self.crowding = window_crowding(self.q, self._fast, self.device,
                                                window=2.0 * self.E * (1.0 + 2.0**-20), cols=self.cols)
                if self.crowding > CROWDED_WINDOW:
                    log.info("the bf16 window holds %.0f database rows per query (sampled; > %d): the "
                             "scores nearly tie, so the candidate passes use the float32 GEMM",
                             self.crowding, CROWDED_WINDOW)
                    self.bf16 = False
        if not self.bf16:
            self._fast = self.db32
            self.E = self.E32
        self.window = 2.0 * self.E * (1.0 + 2.0**-20)
        self.window32 = 2.0 * self.E32 * (1.0 + 2.0**-20)

    @property
    def path(self) -> str:
        """``"bf16"`` or ``"float32"``: the GEMM of the candidate passes."""
        return "bf16" if self.bf16 else "float32"

    @property
    def db32(self) -> Any:
        """The float32 unit database rows (built on first use)."""
        if self._db32 is None:
            self._db32 = database32(self.d, self.device)
        return self._db32

    def cos_of(self, lines_q: np.ndarray, lines_d: np.ndarray) -> np.ndarray:
        """Exact float64 cosines of the pairs (query ``lines_q[i]``, database ``lines_d[i]``); on the
        device when the rows are there (the same bits)."""
        if self.on_device:
            from pseudopairs.similarity.device_rows import device_cosine_pairs

            return device_cosine_pairs(self.q, self.d, a_rows=lines_q, b_rows=lines_d)
        return cosine64_pairs(self.q, self.d, a_rows=lines_q, b_rows=lines_d, threads=self.threads)

    def cos_of_columns(self, lines_d: np.ndarray, lines_q: np.ndarray) -> np.ndarray:
        """:meth:`cos_of` for entries of database lines (a column reducer's ``line``, ``other``)."""
        return self.cos_of(lines_q, lines_d)

    def one_pass(self, reducers, desc: str, transform=None, *, precise: bool = False) -> None:
        """One blocked pass over the scores, feeding ``reducers``: the candidate GEMM (bound
        ``E``), or with ``precise`` the float32 GEMM (bound ``E32``)."""
        run_pass(self._source, self.db32 if precise else self._fast, reducers, rows=self.rows,
                 cols=self.cols, transform=transform, progress=self.progress, desc=desc)

    def whole_rows(self, desc: str):
        """Precise (float32, bound ``E32``) score blocks that each hold whole rows: as many rows
        as keep a block within ``rows × cols`` scores (at least one)."""
        rows = max(1, min(self.rows, (self.rows * self.cols) // self.m))
        return iter_blocks(self._source, self.db32, rows=rows, cols=self.m, progress=self.progress, desc=desc)


def window_crowding(q: UnitRows, database: Any, device: Any, *, window: float, cols: int,
                    sample: int | None = None) -> float:
    """Mean number of ``database`` rows within ``window`` of the best score, over up to
    ``sample`` (default :data:`PROBE_ROWS`) evenly spaced queries: two passes of that sample over
    the database GEMM given (bf16 or float32)."""
    rows = np.unique(np.linspace(0, q.n - 1, min(q.n, sample or PROBE_ROWS)).astype(np.int64))
    probe = UnitRowSource(UnitRows(raw=q.raw[rows], shift=q.shift[rows], norm=q.norm[rows]), device)
    best = np.full(rows.size, -np.inf)
    count = np.zeros(rows.size, dtype=np.int64)
    for block in iter_blocks(probe, database, rows=rows.size, cols=cols):
        np.maximum(best, _host(block).max(axis=1), out=best)
    for block in iter_blocks(probe, database, rows=rows.size, cols=cols):
        count += (_host(block) >= (best - window)[:, None]).sum(axis=1)
    return float(count.mean())


def _host(block) -> np.ndarray:
    """The block's valid scores as a float64 numpy array."""
    s = block.scores[: block.n_rows, : block.n_cols]
    return (s.float().cpu().numpy() if is_tensor(s) else np.asarray(s)).astype(np.float64)


def best_per_line(lines: np.ndarray, others: np.ndarray, exact: np.ndarray, n_lines: int) -> tuple[np.ndarray, np.ndarray]:
    """Per line, the candidate with the largest exact value, ties to the lowest ``other``."""
    order = np.lexsort((others, -exact, lines))
    lines, others, exact = lines[order], others[order], exact[order]
    first = np.r_[True, lines[1:] != lines[:-1]] if lines.size else np.zeros(0, dtype=bool)
    if int(first.sum()) != n_lines or (lines.size and not np.array_equal(lines[first], np.arange(n_lines))):
        raise RuntimeError("internal error: a line has no candidate")
    return others[first], exact[first]


def topk_mean(values_desc: np.ndarray) -> np.ndarray:
    """Mean of each row of ``values_desc`` (n × k, each row in decreasing order), summed in that
    order: ``Σ/k``. Shared by the engine and the brute-force reference so both give the same bits."""
    values_desc = np.ascontiguousarray(values_desc, dtype=np.float64)
    total = values_desc[:, 0].copy()
    for j in range(1, values_desc.shape[1]):
        total += values_desc[:, j]
    return total / values_desc.shape[1]


def _exact_topk_means(entries: WindowEntries, exact: np.ndarray, k: int, n_lines: int) -> np.ndarray:
    """Per line, the mean of the k largest exact values among its candidates."""
    order = np.lexsort((-exact, entries.line))
    lines, exact = entries.line[order], exact[order]
    starts = np.flatnonzero(np.r_[True, lines[1:] != lines[:-1]]) if lines.size else np.zeros(0, dtype=np.int64)
    counts = np.diff(np.r_[starts, lines.size])
    if starts.size != n_lines or counts.min(initial=k) < k:
        raise RuntimeError("internal error: a line has fewer than k candidates")
    return topk_mean(exact[starts[:, None] + np.arange(k)[None, :]])


def exact_topk(entries: WindowEntries, exact: np.ndarray, k: int, n_lines: int) -> np.ndarray:
    """Per line, the k candidates (``other``) with the largest exact values, in decreasing order,
    ties to the lowest ``other``: an (n_lines × k) array."""
    order = np.lexsort((entries.other, -exact, entries.line))
    lines, others = entries.line[order], entries.other[order]
    starts = np.flatnonzero(np.r_[True, lines[1:] != lines[:-1]]) if lines.size else np.zeros(0, dtype=np.int64)
    counts = np.diff(np.r_[starts, lines.size])
    if starts.size != n_lines or counts.min(initial=k) < k:
        raise RuntimeError("internal error: a line has fewer than k candidates")
    return others[starts[:, None] + np.arange(k)[None, :]]


def cosine_argmax_candidates(ctx: SearchContext, *, columns: bool, desc: str):
    """One pass keeping every row's (and, with ``columns``, every column's) argmax candidates."""
    by_row = WindowTopK(axis="rows", n_lines=ctx.n, k=1, window=ctx.window, exact_of=ctx.cos_of)
    by_col = (WindowTopK(axis="cols", n_lines=ctx.m, k=1, window=ctx.window, exact_of=ctx.cos_of_columns)
              if columns else None)
    ctx.one_pass([r for r in (by_row, by_col) if r is not None], desc)
    return by_row.result(), (by_col.result() if columns else None)


def knearest_means(ctx: SearchContext, k: int, desc: str) -> tuple[np.ndarray, np.ndarray]:
    """``r_q`` (mean exact cosine of each query's k nearest database rows) and ``r_d`` (of each
    database row's k nearest queries), from one pass keeping the k-nearest candidates both ways.
    The pass is precise (float32): around a k-th value (k > 1) scores are dense, and the bf16
    window would hold several times more candidates than the float32 one, whose float64
    rescoring costs more than the faster GEMM saves (csls at 4,096 × 145,000 here: 75 s with the
    bf16 window, 55 s with the float32 one)."""
    precise = k > 1
    window = ctx.window32 if precise else ctx.window
    by_row = WindowTopK(axis="rows", n_lines=ctx.n, k=k, window=window, exact_of=ctx.cos_of)
    by_col = WindowTopK(axis="cols", n_lines=ctx.m, k=k, window=window, exact_of=ctx.cos_of_columns)
    ctx.one_pass([by_row, by_col], desc, precise=precise)
    cand = by_row.result()
    r_q = _exact_topk_means(cand, ctx.cos_of(cand.line, cand.other), k, ctx.n)
    cand = by_col.result()
    r_d = _exact_topk_means(cand, ctx.cos_of(cand.other, cand.line), k, ctx.m)
    return r_q, r_d


def knearest_means_reference(cos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`knearest_means` by brute force on the full float64 cosine matrix."""
    return topk_mean(-np.sort(-cos, axis=1)[:, :k]), topk_mean(-np.sort(-cos.T, axis=1)[:, :k])


def transformed_argmax(ctx: SearchContext, *, transform, err: float, scale: float,
                       exact_of: Callable[[np.ndarray, np.ndarray], np.ndarray],
                       desc: str, as64: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The argmax of a criterion whose float32 estimate is ``transform`` applied to each score
    block, within ``err`` of its float64 value (``exact_of``), values of size ≤ ``scale``; the
    value as float32 (float64 with ``as64``)."""
    pick = WindowTopK(axis="rows", n_lines=ctx.n, k=1, window=2.0 * err * (1.0 + 2.0**-20) + SLACK * scale,
                      exact_of=exact_of)
    ctx.one_pass([pick], desc, transform=transform)
    cand = pick.result()
    best, exact = best_per_line(cand.line, cand.other, exact_of(cand.line, cand.other), ctx.n)
    return best.astype(np.int64), exact.astype(np.float64 if as64 else np.float32)


def device_copies(cache: dict, device, *arrays) -> tuple:
    """``arrays`` as torch tensors on ``device``, copied once per device (kept in ``cache``)."""
    key = str(device)
    if key not in cache:
        import torch

        cache[key] = tuple(torch.as_tensor(a, device=device) for a in arrays)
    return cache[key]


def subtract_columns(offsets32: np.ndarray):
    """Block transform ``S − offsets32[col]`` (float32, one rounding), in place."""
    cache: dict = {}

    def transform(block) -> None:
        v = block.valid
        if is_tensor(v):
            (offsets,) = device_copies(cache, v.device, offsets32)
            v.sub_(offsets[block.col0: block.col1])
        else:
            np.subtract(v, offsets32[None, block.col0: block.col1], out=v)

    return transform


def column_offset_error(ctx: SearchContext, offsets32: np.ndarray) -> tuple[float, float]:
    """(error bound, value scale) of ``S − offsets32[col]`` against its float64 value."""
    offset = float(np.abs(offsets32).max())
    return ctx.E + U32 * offset * 1.01 + U32 * (1.0 + ctx.E + offset) * 1.01, 1.0 + ctx.E + offset


# --------------------------------------------------------------------------------------------
# The public search and its brute-force reference
# --------------------------------------------------------------------------------------------


def nearest_neighbours(queries, database, *, criterion=criteria_registry.DEFAULT_CRITERION, k=None,
                       beta=None, device=None, block_size=None, progress=False, similarity="cosine",
                       **params):
    """For each query row, its match among the database rows under ``criterion`` (a registered
    criterion; :func:`pseudopairs.mining.criteria.docs_table` lists them with their definitions).

    ``queries`` (n × d) and ``database`` (m × d): numpy arrays of any real dtype or torch tensors;
    rows need not be normalised (each is divided by its norm; a row of zeros is a ValueError).
    ``k``, ``beta`` and any other keyword: the criterion's parameters (``k``: neighbourhood of
    ``csls`` (default 10) and ``margin`` (4), ≤ n and ≤ m, activation top-k of
    ``dynamic_inverted_softmax`` (1); ``beta``: inverse temperature of ``inverted_softmax`` (30),
    ``dynamic_inverted_softmax`` (20) and ``sinkhorn`` (30); ``iterations`` (30) and ``tol``
    (1e-3) of ``sinkhorn``); giving one to a criterion without it is a ValueError. ``device``:
    None (a CUDA tensor input's device, else the CPU), ``"cpu"`` (numpy/OpenBLAS float32 GEMM, or
    the bf16 candidate GEMM where the CPU has a bfloat16 unit:
    :func:`pseudopairs.similarity.bf16_enabled`) or a CUDA device (torch; bf16 tensor cores from
    compute capability 8.0; the float64 rescoring stays on the CPU). ``block_size``: query rows per
    score block, or ``(query rows, database rows)`` (default: 2048 query rows × as many database
    rows as keep a block ≤ 2**25 scores on the CPU, 8192 × ≤ 2**27 scores on a GPU).

    ``similarity``: the one the encoding model was trained with; captions are compared with its
    caption–caption counterpart (:func:`pseudopairs.similarity.functions.caption_similarity`: the
    cosine for ``cosine`` and for ``order``), which must be the cosine of this engine.

    Returns ``(indices, scores)`` as numpy: ``indices`` int64 (n,) — database row per query
    (−1 where the criterion rejects the query); ``scores`` float32 (n,) — the criterion's value
    (NaN where rejected). Exact in the sense of the module docstring.
    """
    if caption_similarity(similarity) != "cosine":
        raise ValueError(f"mining compares captions by the cosine; a {similarity!r} model's "
                         f"captions need {caption_similarity(similarity)!r}")
    threads = cpu_threads()
    spec = criteria_registry.get(criterion)
    dev = engine_device(device, queries, database)
    q, d = _inputs(queries, database, threads, dev)
    values = {**params, **{key: v for key, v in (("k", k), ("beta", beta)) if v is not None}}
    values = criteria_registry.check_params(criterion, values, n_queries=q.n, n_database=d.n)
    rows_wanted, cols_wanted = _block_args(block_size)
    if uses_torch(dev) and rows_wanted is None:  # a GPU wants bigger GEMMs than a CPU
        rows_wanted = min(q.n, CUDA_BLOCK_ROWS)
    budget = CUDA_BLOCK_ELEMENTS if uses_torch(dev) else DEFAULT_BLOCK_ELEMENTS
    rows, cols = block_shape(q.n, d.n, rows=rows_wanted, cols=cols_wanted, budget=budget)
    ctx = SearchContext(q=q, d=d, device=dev, rows=rows, cols=cols, progress=progress, threads=threads)
    indices, scores = spec.search(ctx, values)
    return np.asarray(indices, dtype=np.int64), np.asarray(scores, dtype=np.float32)


def cosine_matrix64(queries, database) -> np.ndarray:
    """The full n × m matrix of exact float64 cosines (:func:`similarity.cosine64_pairs` on every
    pair) — O(n·m) memory and time, for checks."""
    q, d = _inputs(queries, database, cpu_threads())
    qi, dj = np.meshgrid(np.arange(q.n), np.arange(d.n), indexing="ij")
    return cosine64_pairs(q, d, a_rows=qi.ravel(), b_rows=dj.ravel(), threads=cpu_threads()).reshape(q.n, d.n)


def argmax_reference(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise argmax (first maximum: the lowest index) and its value as float32."""
    best = score.argmax(axis=1)
    return best.astype(np.int64), score[np.arange(score.shape[0]), best].astype(np.float32)


def nearest_neighbours_reference(queries, database, *, criterion=criteria_registry.DEFAULT_CRITERION,
                                 k=None, beta=None, **params):
    """:func:`nearest_neighbours` by brute force on the full float64 cosine matrix (the
    criterion's reference definition); small inputs only. Returns the same pair."""
    spec = criteria_registry.get(criterion)
    cos = cosine_matrix64(queries, database)
    values = {**params, **{key: v for key, v in (("k", k), ("beta", beta)) if v is not None}}
    values = criteria_registry.check_params(criterion, values, n_queries=cos.shape[0], n_database=cos.shape[1])
    indices, scores = spec.reference(cos, values)
    return np.asarray(indices, dtype=np.int64), np.asarray(scores, dtype=np.float32)


def pair_cosines(queries, database, *, rows) -> np.ndarray:
    """Exact float64 cosine of each query row with its matched database row ``rows[i]`` (the
    similarity stored with a pair; the same routine :func:`nearest_neighbours` decides with)."""
    threads = cpu_threads()
    q, d = _inputs(queries, database, threads)
    return cosine64_pairs(q, d, a_rows=np.arange(q.n), b_rows=rows, threads=threads)
