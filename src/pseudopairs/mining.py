"""Pseudopair mining (paper §2.2): for each query caption, the database caption it is paired with.

The paper encodes every English COCO caption (the queries) and every German Multi30K caption (the
database) with a trained model and pairs each query with its most cosine-similar database caption.
:func:`nearest_neighbours` does that (``criterion="cosine"``) and, beyond the paper, four
hubness-aware criteria that keep a few database captions from being everybody's match (paper §7.2
observes the problem; see :mod:`pseudopairs.hubness` for its diagnostics).

Definitions (``q`` a query row, ``d`` a database row; rows need not be normalised)
------------------------------------------------------------------------------------
* ``cos(q, d)`` — the **exact float64 cosine** of :mod:`pseudopairs.similarity`:
  ``dot64(q', d') / (‖q'‖·‖d'‖)`` evaluated by one deterministic float64 routine (for float32
  inputs every product is exact and only the pairwise summation rounds, ≈ 1e-13 at d = 1024), so
  identical vectors get identical values wherever they are. A zero row has no cosine (ValueError).
* ``cosine`` (the paper): ``argmax_d cos(q, d)``; score = that cosine.
* ``csls`` (Conneau et al. 2018): ``CSLS(q, d) = (2·cos(q, d) − r_q(q)) − r_d(d)``, where
  ``r_q(q)`` is the mean cosine of q's k nearest database rows and ``r_d(d)`` the mean cosine of
  d's k nearest queries (k = 10 by default); score = the CSLS value.
* ``inverted_softmax`` (Smith et al. 2017): each database row spreads a softmax over the queries,
  ``P(q | d) = exp(β·cos(q, d)) / Σ_q' exp(β·cos(q', d))``; each query takes
  ``argmax_d (β·cos(q, d) − L(d))`` with ``L(d) = log Σ_q' exp(β·cos(q', d))``; score = that log
  probability. β defaults to :data:`DEFAULT_BETA` (30; Smith et al. tune it on held-out pairs).
* ``margin`` (Artetxe & Schwenk 2019, ratio margin): ``cos(q, d) / (0.5·(r_q(q) + r_d(d)))``
  with the k-nearest means above (k = 4 by default; ``Σ/(2k) + Σ/(2k)`` is ``(r_q + r_d)/2``);
  score = the ratio. Needs ``r_q + r_d > 0`` for every pair (ValueError otherwise).
* ``mutual``: the cosine match ``q → d`` is kept only if q is also d's cosine match among the
  queries; other queries get index **−1** and score **NaN**; score = the cosine.

Every argmax breaks ties (equal float64 values) towards the **lowest index** (database row, or
query row for a database row's match).

What "exact" means
------------------
The returned index is the argmax of the criterion evaluated in float64 with the formulas above,
and the score is that float64 value rounded to float32 — the same bits a brute-force float64
evaluation of the same formulas gives (:func:`nearest_neighbours_reference`). That holds for
``cosine``, ``mutual``, ``csls`` and ``margin``, whose k-nearest means are computed from exact
cosines too (``r = Σ of the k largest exact cosines in decreasing order / k``). For
``inverted_softmax`` the normaliser ``L(d)`` is accumulated from float32 scores (float32 ``exp``,
float64 sums) and is within a proven bound of the float64 value (about ``β·6e-5 + 2e-6`` at
d = 1024, β = 30); the argmax is exact for the criterion with that ``L``.

How (memory bounded by blocks, :mod:`pseudopairs.similarity`)
--------------------------------------------------------------
A float32 GEMM of float32-rounded unit rows, block by block, keeps per query every database row
within ``2E`` of the best (E = the proven bound on ``|S32 − cos|``, ≈ 6.1e-5 at d = 1024 on the
CPU) — a set that provably contains every exact maximiser — and only those candidates are
rescored in float64. ``csls`` and ``margin``: one pass keeps the k-nearest candidates of every
row and every column (exact means from the candidates), a second pass takes the argmax of the
criterion with the same windowing. ``inverted_softmax``: one pass for ``L(d)``, one for the
argmax. ``mutual``: one pass for both directions' argmax candidates. ``cosine``: one pass.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from pseudopairs.similarity import (
    DEFAULT_BLOCK_ELEMENTS,
    U32,
    ColumnLogSumExp,
    UnitRows,
    UnitRowSource,
    WindowEntries,
    WindowTopK,
    block_shape,
    check_matrix,
    cosine64_pairs,
    cosine_error_bound,
    cpu_threads,
    database32,
    duplicate_groups,
    is_tensor,
    matmul_input_unit,
    resolve_device,
    run_pass,
    unit_rows,
    uses_torch,
)

log = logging.getLogger(__name__)

CRITERIA = ("cosine", "csls", "inverted_softmax", "margin", "mutual")
DEFAULT_K = {"csls": 10, "margin": 4}
DEFAULT_BETA = 30.0
CUDA_BLOCK_ROWS = 8192  # default query rows per block on a GPU
CUDA_BLOCK_ELEMENTS = 1 << 27  # default scores per block on a GPU (512 MiB of float32)
_SLACK = 2.0**-40  # relative room for float64 formula rearrangements between estimate and exact value


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


def _check_criterion(criterion: str, k: Any, beta: Any, n_queries: int, n_database: int) -> tuple[int | None, float | None]:
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {list(CRITERIA)}, got {criterion!r}")
    if criterion in DEFAULT_K:
        k = DEFAULT_K[criterion] if k is None else k
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive whole number, got {k!r}")
        k = int(k)
        if k > n_database:
            raise ValueError(f"k={k} exceeds the {n_database} database rows (criterion {criterion!r} "
                             "averages each query's k nearest database rows)")
        if k > n_queries:
            raise ValueError(f"k={k} exceeds the {n_queries} queries (criterion {criterion!r} "
                             "averages each database row's k nearest queries)")
    elif k is not None:
        raise ValueError(f"k is only used by the criteria {sorted(DEFAULT_K)}, not {criterion!r}")
    if criterion == "inverted_softmax":
        beta = DEFAULT_BETA if beta is None else beta
        if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)) \
                or not (math.isfinite(float(beta)) and float(beta) > 0):
            raise ValueError(f"beta must be a positive finite number, got {beta!r}")
        beta = float(beta)
    elif beta is not None:
        raise ValueError(f"beta is only used by the criterion 'inverted_softmax', not {criterion!r}")
    return k, beta


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


def _inputs(queries: Any, database: Any, threads: int) -> tuple[UnitRows, UnitRows]:
    q = check_matrix(queries, "queries")
    d = check_matrix(database, "database")
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"queries have {q.shape[1]} dimensions but database rows have {d.shape[1]}; "
                         "they must match")
    return (unit_rows(q, name="queries", threads=threads, checked=True),
            unit_rows(d, name="database", threads=threads, checked=True))


# --------------------------------------------------------------------------------------------
# Exact selection from candidates
# --------------------------------------------------------------------------------------------


def _best_per_line(lines: np.ndarray, others: np.ndarray, exact: np.ndarray, n_lines: int) -> tuple[np.ndarray, np.ndarray]:
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


# --------------------------------------------------------------------------------------------
# Block transforms for the second pass (in place on the block's valid part)
# --------------------------------------------------------------------------------------------


def _device_copies(cache: dict, device, *arrays) -> tuple:
    """``arrays`` as torch tensors on ``device``, copied once per device (kept in ``cache``)."""
    key = str(device)
    if key not in cache:
        import torch

        cache[key] = tuple(torch.as_tensor(a, device=device) for a in arrays)
    return cache[key]


def _subtract_columns(offsets32: np.ndarray):
    """``S − offsets32[col]`` (float32, one rounding)."""
    cache: dict = {}

    def transform(block) -> None:
        v = block.valid
        if is_tensor(v):
            (offsets,) = _device_copies(cache, v.device, offsets32)
            v.sub_(offsets[block.col0: block.col1])
        else:
            np.subtract(v, offsets32[None, block.col0: block.col1], out=v)

    return transform


def _divide_pairs(rq32: np.ndarray, rd32: np.ndarray, strip: int = 64):
    """``S / fl32(rq32[row] + rd32[col])`` (float32), in strips of rows."""
    cache: dict = {}

    def transform(block) -> None:
        v = block.valid
        if is_tensor(v):
            tq, td = _device_copies(cache, v.device, rq32, rd32)
            for r in range(0, block.n_rows, strip):
                rows = slice(block.row0 + r, min(block.row1, block.row0 + r + strip))
                den = tq[rows, None] + td[None, block.col0: block.col1]
                v[r: r + strip].div_(den)
            return
        den = np.empty((min(strip, block.n_rows), block.n_cols), dtype=np.float32)
        for r in range(0, block.n_rows, strip):
            h = min(strip, block.n_rows - r)
            np.add(rq32[block.row0 + r: block.row0 + r + h, None], rd32[None, block.col0: block.col1], out=den[:h])
            np.divide(v[r: r + h], den[:h], out=v[r: r + h])

    return transform


# --------------------------------------------------------------------------------------------
# The search
# --------------------------------------------------------------------------------------------


def nearest_neighbours(queries, database, *, criterion="cosine", k=None, beta=None, device=None,
                       block_size=None, progress=False):
    """For each query row, its match among the database rows under ``criterion`` (module doc).

    ``queries`` (n × d) and ``database`` (m × d): numpy arrays of any real dtype or torch tensors;
    rows need not be normalised (each is divided by its norm; a row of zeros is a ValueError).
    ``k``: neighbourhood size of ``csls`` (default 10) and ``margin`` (default 4), ≤ n and ≤ m;
    ``beta``: inverse temperature of ``inverted_softmax`` (default 30); giving either to another
    criterion is a ValueError. ``device``: None (a CUDA tensor input's device, else the CPU),
    ``"cpu"`` (numpy/OpenBLAS float32 GEMM) or a CUDA device (torch; the float64 rescoring stays
    on the CPU). ``block_size``: query rows per score block, or ``(query rows, database rows)``
    (default: 2048 query rows × as many database rows as keep a block ≤ 2**25 scores on the CPU,
    8192 × ≤ 2**27 scores on a GPU).

    Returns ``(indices, scores)`` as numpy: ``indices`` int64 (n,) — database row per query
    (−1 where ``mutual`` rejects it); ``scores`` float32 (n,) — the criterion's value (NaN where
    rejected). Exact in the sense of the module docstring.
    """
    threads = cpu_threads()
    if not isinstance(criterion, str) or criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {list(CRITERIA)}, got {criterion!r}")
    dev = resolve_device(device, queries, database)
    q, d = _inputs(queries, database, threads)
    k, beta = _check_criterion(criterion, k, beta, q.n, d.n)
    rows_wanted, cols_wanted = _block_args(block_size)
    if uses_torch(dev) and rows_wanted is None:  # a GPU wants bigger GEMMs than a CPU
        rows_wanted = min(q.n, CUDA_BLOCK_ROWS)
    budget = CUDA_BLOCK_ELEMENTS if uses_torch(dev) else DEFAULT_BLOCK_ELEMENTS
    rows, cols = block_shape(q.n, d.n, rows=rows_wanted, cols=cols_wanted, budget=budget)
    return _search(q, d, criterion=criterion, k=k, beta=beta, device=dev, rows=rows, cols=cols,
                   progress=progress, threads=threads)


def _search(q: UnitRows, d: UnitRows, *, criterion: str, k, beta, device, rows: int, cols: int,
            progress: bool, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`nearest_neighbours` on prepared rows and an engine device (``"cpu"`` = numpy, or a
    ``torch.device``, which may be the CPU to test the torch code)."""
    n, m = q.n, d.n
    E = cosine_error_bound(q.dim, matmul_unit=matmul_input_unit(device))
    window = 2.0 * E * (1.0 + 2.0**-20)
    source = UnitRowSource(q, device)
    db = database32(d, device)

    def cos_of(lines_q: np.ndarray, lines_d: np.ndarray) -> np.ndarray:
        return cosine64_pairs(q, d, a_rows=lines_q, b_rows=lines_d, threads=threads)

    def one_pass(reducers, desc, transform=None):
        run_pass(source, db, reducers, rows=rows, cols=cols, transform=transform, progress=progress,
                 desc=desc)

    if criterion in ("cosine", "mutual"):
        by_row = WindowTopK(axis="rows", n_lines=n, k=1, window=window)
        by_col = WindowTopK(axis="cols", n_lines=m, k=1, window=window) if criterion == "mutual" else None
        one_pass([r for r in (by_row, by_col) if r is not None], criterion)
        cand = by_row.result()
        best, exact = _best_per_line(cand.line, cand.other, cos_of(cand.line, cand.other), n)
        scores = exact.astype(np.float32)
        if criterion == "cosine":
            return best.astype(np.int64), scores
        cand_d = by_col.result()
        back, _ = _best_per_line(cand_d.line, cand_d.other, cos_of(cand_d.other, cand_d.line), m)
        mutual = back[best] == np.arange(n)
        return np.where(mutual, best, -1).astype(np.int64), np.where(mutual, scores, np.float32(np.nan))

    if criterion in ("csls", "margin"):
        by_row = WindowTopK(axis="rows", n_lines=n, k=k, window=window)
        by_col = WindowTopK(axis="cols", n_lines=m, k=k, window=window)
        one_pass([by_row, by_col], f"{criterion} (k-nearest)")
        cand = by_row.result()
        r_q = _exact_topk_means(cand, cos_of(cand.line, cand.other), k, n)
        cand = by_col.result()
        r_d = _exact_topk_means(cand, cos_of(cand.other, cand.line), k, m)
        if criterion == "csls":
            half32 = (r_d / 2).astype(np.float32)
            offset = float(np.abs(half32).max())
            err = E + U32 * offset * 1.01 + U32 * (1.0 + E + offset) * 1.01
            transform = _subtract_columns(half32)
            scale = 1.0 + E + offset

            def exact_of(lines, others):
                return (2.0 * cos_of(lines, others) - r_q[lines]) - r_d[others]
        else:
            rq32, rd32 = r_q.astype(np.float32), r_d.astype(np.float32)
            spread = float(np.abs(r_q).max() + np.abs(r_d).max())
            delta = 2.01 * U32 * spread
            rho_min = float(r_q.min() + r_d.min())
            if not rho_min - delta > 0:
                raise ValueError(
                    f"margin: r_q + r_d must be positive for every pair (the mean cosine of the {k} "
                    f"nearest neighbours on both sides), but it reaches {rho_min:.3g}; the ratio "
                    "margin is meaningless here — use csls or another k")
            low = rho_min - delta
            err = E / low + delta / (low * rho_min) + U32 * (1.0 + E) / low * 1.01
            transform = _divide_pairs(rq32, rd32)
            scale = (1.0 + E) / low

            def exact_of(lines, others):
                return cos_of(lines, others) / (0.5 * (r_q[lines] + r_d[others]))
    elif criterion == "inverted_softmax":
        lse = ColumnLogSumExp(n_cols=m, beta=beta)
        one_pass([lse], "inverted softmax (normalisers)")
        L = lse.result()
        # rows of one direction (equal up to a power of two: equal exact cosines) share one
        # normaliser, so their exact ties stay ties and go to the lowest index
        L = L[duplicate_groups(d.raw, shift=d.shift)]
        shift32 = (L / beta).astype(np.float32)
        offset = float(np.abs(shift32).max())
        err = E + U32 * offset * 1.01 + U32 * (1.0 + E + offset) * 1.01
        transform = _subtract_columns(shift32)
        scale = 1.0 + E + offset

        def exact_of(lines, others):
            return beta * cos_of(lines, others) - L[others]
    else:  # pragma: no cover - checked above
        raise AssertionError(criterion)

    pick = WindowTopK(axis="rows", n_lines=n, k=1, window=2.0 * err * (1.0 + 2.0**-20) + _SLACK * scale)
    one_pass([pick], f"{criterion} (argmax)", transform=transform)
    cand = pick.result()
    best, exact = _best_per_line(cand.line, cand.other, exact_of(cand.line, cand.other), n)
    return best.astype(np.int64), exact.astype(np.float32)


# --------------------------------------------------------------------------------------------
# Brute force (for checks)
# --------------------------------------------------------------------------------------------


def cosine_matrix64(queries, database) -> np.ndarray:
    """The full n × m matrix of exact float64 cosines (:func:`similarity.cosine64_pairs` on every
    pair) — O(n·m) memory and time, for checks."""
    q, d = _inputs(queries, database, cpu_threads())
    qi, dj = np.meshgrid(np.arange(q.n), np.arange(d.n), indexing="ij")
    return cosine64_pairs(q, d, a_rows=qi.ravel(), b_rows=dj.ravel(), threads=cpu_threads()).reshape(q.n, d.n)


def log_sum_exp_columns64(cos: np.ndarray, beta: float) -> np.ndarray:
    """``log Σ_rows exp(beta·cos[row, col])`` per column in float64 (brute force)."""
    peak = cos.max(axis=0)
    return beta * peak + np.log(np.exp(beta * (cos - peak[None, :])).sum(axis=0))


def nearest_neighbours_reference(queries, database, *, criterion="cosine", k=None, beta=None):
    """:func:`nearest_neighbours` by brute force on the full float64 cosine matrix (same formulas,
    float64 log-sum-exp for ``inverted_softmax``); small inputs only. Returns the same pair."""
    cos = cosine_matrix64(queries, database)
    n, m = cos.shape
    k, beta = _check_criterion(criterion, k, beta, n, m)
    if criterion in ("cosine", "mutual"):
        score = cos
    elif criterion in ("csls", "margin"):
        r_q = topk_mean(-np.sort(-cos, axis=1)[:, :k])
        r_d = topk_mean(-np.sort(-cos.T, axis=1)[:, :k])
        if criterion == "csls":
            score = (2.0 * cos - r_q[:, None]) - r_d[None, :]
        else:
            if r_q.min() + r_d.min() <= 0:
                raise ValueError("margin: r_q + r_d must be positive for every pair")
            score = cos / (0.5 * (r_q[:, None] + r_d[None, :]))
    else:
        score = beta * cos - log_sum_exp_columns64(cos, beta)[None, :]
    best = score.argmax(axis=1)  # first maximum: the lowest index
    values = score[np.arange(n), best].astype(np.float32)
    if criterion == "mutual":
        back = cos.argmax(axis=0)
        ok = back[best] == np.arange(n)
        return np.where(ok, best, -1).astype(np.int64), np.where(ok, values, np.float32(np.nan))
    return best.astype(np.int64), values


# --------------------------------------------------------------------------------------------
# The pipeline step: mine a pseudopair set with a trained model (paper §2.2)
# --------------------------------------------------------------------------------------------

PAIR_COLUMNS = ["query_image_id", "query_caption_idx", "query_lang", "query_text",
                "match_row", "match_image_id", "match_caption_idx", "match_lang", "match_text",
                "match_raw", "similarity", "score"]
MINING_SETTINGS = ("criterion", "k", "beta", "device", "block_size", "encode_batch_size", "threads")


def _check_mining_spec(spec: dict) -> dict:
    if not isinstance(spec, dict):
        raise ValueError(f"mining spec must be a JSON object, got {type(spec).__name__}")
    missing = [k for k in ("pseudopairs", "source", "seed", "checkpoint", "vocab", "queries",
                           "database", "settings") if k not in spec]
    if missing:
        raise ValueError(f"mining spec lacks {missing}")
    for role in ("queries", "database"):
        ref = spec[role]
        if not isinstance(ref, dict) or not ref.get("captions") or not ref.get("lang"):
            raise ValueError(f"mining spec: {role} must give captions and lang, got {ref!r}")
    unknown = sorted(set(spec["settings"]) - set(MINING_SETTINGS))
    if unknown:
        raise ValueError(f"mining settings: unknown key(s) {unknown}; known: {list(MINING_SETTINGS)}")
    return spec


def pair_cosines(queries, database, *, rows) -> np.ndarray:
    """Exact float64 cosine of each query row with its matched database row ``rows[i]`` (the
    similarity stored with a pair; the same routine :func:`nearest_neighbours` decides with)."""
    threads = cpu_threads()
    q, d = _inputs(queries, database, threads)
    return cosine64_pairs(q, d, a_rows=np.arange(q.n), b_rows=rows, threads=threads)


def mine_pseudopairs(*, spec: dict, pairs_path, stats_path, progress: bool = True) -> dict:
    """Encode the query and database captions with the source model, take each query's match by
    ``settings.criterion`` and write ``pairs.parquet`` (:data:`PAIR_COLUMNS`, one row per query
    that got a match, in query order) and ``stats.json``, both atomically."""
    import time

    import pandas as pd
    import torch

    from pseudopairs.hubness import usage_summary
    from pseudopairs.io import check_caption_texts, read_captions, write_json_atomic, write_parquet_atomic
    from pseudopairs.training import encode_captions_texts, load_model, resolve_device
    from pseudopairs.vocab import Vocabulary

    spec = _check_mining_spec(spec)
    settings = {"criterion": "cosine", **spec["settings"]}
    torch.set_num_threads(int(settings.get("threads", 1)))
    device = resolve_device(settings.get("device", "auto"))
    started = time.perf_counter()
    model, meta = load_model(spec["checkpoint"], device=device)
    vocab = Vocabulary.load(spec["vocab"])
    tables = {}
    for role in ("queries", "database"):
        ref = spec[role]
        frame = read_captions(ref["captions"], lang=ref["lang"])
        if frame.empty:
            raise ValueError(f"{ref['captions']}: no {ref['lang']!r} captions to mine ({role})")
        if "text" not in frame.columns:
            raise ValueError(f"{ref['captions']}: caption table has no prepared 'text' column")
        check_caption_texts(frame["text"], source=ref["captions"], what=f"{ref['lang']} captions ({role})")
        tables[role] = frame
    batch = int(settings.get("encode_batch_size", 256))
    embeddings = {role: encode_captions_texts(model, vocab, tables[role]["text"].astype(str).tolist(),
                                              batch_size=batch, progress=progress)
                  for role in ("queries", "database")}
    encoded = time.perf_counter()
    indices, scores = nearest_neighbours(
        embeddings["queries"].numpy(), embeddings["database"].numpy(),
        criterion=settings["criterion"], k=settings.get("k"), beta=settings.get("beta"),
        device=str(device), block_size=settings.get("block_size"), progress=progress)
    mined = time.perf_counter()
    matched = indices >= 0
    q = tables["queries"][matched].reset_index(drop=True)
    rows = indices[matched]
    d = tables["database"].iloc[rows].reset_index(drop=True)
    similarity = pair_cosines(embeddings["queries"].numpy()[matched], embeddings["database"].numpy(), rows=rows)
    pairs = pd.DataFrame({
        "query_image_id": q["image_id"].astype(str), "query_caption_idx": q["caption_idx"].astype("int64"),
        "query_lang": q["lang"], "query_text": q["text"].astype(str),
        "match_row": rows.astype("int64"), "match_image_id": d["image_id"].astype(str),
        "match_caption_idx": d["caption_idx"].astype("int64"), "match_lang": d["lang"],
        "match_text": d["text"].astype(str), "match_raw": d["raw"].astype(str),
        "similarity": similarity.astype("float32"), "score": scores[matched].astype("float32"),
    })
    database_texts = tables["database"]["text"].astype(str)
    stats = {
        "pseudopairs": spec["pseudopairs"], "source": spec["source"], "seed": int(spec["seed"]),
        "settings": settings, "checkpoint_update": meta.get("update"),
        "n_queries": int(len(tables["queries"])), "n_pairs": int(matched.sum()),
        "n_unmatched": int((~matched).sum()), "n_database": int(len(database_texts)),
        "n_database_unique_texts": int(database_texts.nunique()),
        "seconds": {"encode": round(encoded - started, 3), "mine": round(mined - encoded, 3)},
        **usage_summary(rows, n_database=len(database_texts)),
    }
    write_parquet_atomic(pairs_path, pairs)
    write_json_atomic(stats_path, stats)
    log.info("%s seed %s: %d pairs from %d queries; %.1f%% of %d database captions used",
             spec["pseudopairs"], spec["seed"], stats["n_pairs"], stats["n_queries"],
             100 * stats["used_share"], stats["n_database"])
    return stats


def percentile_filter(scores, *, min_percentile: float) -> np.ndarray:
    """Boolean mask of the pairs to keep: score ≥ the ``min_percentile``-th percentile of all
    ``scores`` (numpy's linear interpolation). 0 keeps every pair; the paper's "25%" removes the
    pairs below the 25th percentile, its "75%" keeps those at or above the 75th."""
    scores = np.asarray(scores, dtype=np.float64)
    if not 0 <= float(min_percentile) <= 100:
        raise ValueError(f"min_percentile must be in [0, 100], got {min_percentile}")
    if scores.size == 0:
        raise ValueError("percentile_filter: no pairs")
    if float(min_percentile) == 0:
        return np.ones(scores.shape, dtype=bool)
    return scores >= np.percentile(scores, float(min_percentile))


def pseudopair_caption_table(pairs, *, min_percentile: float, dataset: str):
    """The kept pairs as a caption table (columns of :data:`pseudopairs.io.CAPTION_COLUMNS` plus
    ``score``): each kept pair stays with its own query image and caption index, its caption is
    the matched one (language, raw and prepared text)."""
    import pandas as pd

    keep = percentile_filter(pairs["score"].to_numpy(), min_percentile=min_percentile)
    kept = pairs[keep]
    return pd.DataFrame({
        "dataset": dataset, "split": "train", "image_id": kept["query_image_id"].astype(str),
        "lang": kept["match_lang"], "caption_idx": kept["query_caption_idx"].astype("int64"),
        "raw": kept["match_raw"], "text": kept["match_text"], "score": kept["score"],
    }).reset_index(drop=True)


def read_pairs(path) -> "pd.DataFrame":
    import pandas as pd

    from pseudopairs.io import reading

    with reading(path, "a pseudopair file (Parquet)", fix="delete it and rerun the mine step"):
        frame = pd.read_parquet(path)
    missing = [c for c in PAIR_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a pseudopair file, missing columns {missing}")
    return frame


def _cli_mine(args) -> None:
    import json

    spec = json.loads(args.spec)
    spec["settings"]["threads"] = args.threads
    stats = mine_pseudopairs(spec=spec, pairs_path=args.pairs, stats_path=args.stats)
    print(json.dumps({k: v for k, v in stats.items() if k != "settings"}, indent=2))


def _cli_pseudopair_captions(args) -> None:
    from pseudopairs.io import write_parquet_atomic

    pairs = read_pairs(args.pairs)
    table = pseudopair_caption_table(pairs, min_percentile=args.min_percentile, dataset=args.dataset)
    write_parquet_atomic(args.output, table)
    print(f"{len(table)} of {len(pairs)} pairs kept at or above percentile {args.min_percentile:g} "
          f"-> {args.output}")


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("mine", help="mine a pseudopair set with a trained model -> pairs.parquet")
    p.add_argument("--spec", required=True, help="resolved mining inputs as JSON (experiments.mining_spec)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--pairs", required=True, help="pairs.parquet (written atomically)")
    p.add_argument("--stats", required=True, help="stats.json (written atomically)")
    p.set_defaults(func=_cli_mine)
    p = subparsers.add_parser("pseudopair-captions",
                              help="keep the pairs at or above a score percentile, as a caption table")
    p.add_argument("--pairs", required=True)
    p.add_argument("--min-percentile", type=float, required=True)
    p.add_argument("--dataset", required=True, help="value of the table's dataset column")
    p.add_argument("--output", required=True)
    p.set_defaults(func=_cli_pseudopair_captions)
