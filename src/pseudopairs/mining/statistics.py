"""Hubness diagnostics and the §7.2 statistics of mined pseudopairs (paper §7.2; Radovanović et
al. 2010).

A mining run gives each query the database row it was paired with (``indices``; −1 = no match,
as the ``mutual`` criterion produces). These functions describe how evenly the database was used.
Definitions, for the **k-occurrence counts** ``c_j`` = how many queries picked database row j
(n = number of database rows, ``μ`` = mean of c, ``C = Σ c`` = number of picks):

* :func:`skewness` — ``mean((c − μ)³) / σ³`` with the population σ (0 for a perfectly even use
  with σ = 0 is undefined: NaN). Large positive values = a few hubs picked very often.
* :func:`gini` — ``Σ_i Σ_j |c_i − c_j| / (2·n²·μ)``: 0 = every row used equally, → 1 = one row
  takes every pick.
* :func:`robin_hood` (Hoover index) — ``Σ_j |c_j − μ| / (2·C)``: the share of all picks that would
  have to move to another row to make the use even.
* :func:`unused_share` / :func:`used_share` — share of database rows picked never / at least once
  (paper: "cover 40% of the German captions").
* :func:`top_share` — share of the picks taken by the ``top`` most-picked rows (paper: "the top
  150 captions cover 23%").
* :func:`used_share_unique` — like :func:`used_share` but counting distinct database *texts*
  (duplicate captions count once).
* :func:`jaccard` — ``|A ∩ B| / |A ∪ B|`` of two sets (NaN when both are empty).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

USAGE_KEYS = ("used_share", "unused_share", "top_share", "skewness", "gini", "robin_hood")


def k_occurrence(indices: Any, *, n_database: int) -> np.ndarray:
    """Counts per database row (int64, length ``n_database``) of how often ``indices`` picked it;
    negative entries (no match) are ignored."""
    if isinstance(n_database, bool) or int(n_database) != n_database or n_database < 1:
        raise ValueError(f"n_database must be a positive whole number, got {n_database!r}")
    idx = np.asarray(indices)
    if idx.ndim != 1:
        raise ValueError(f"indices: expected a 1-D array, got shape {idx.shape}")
    if idx.size and idx.dtype.kind not in "iu":
        raise ValueError(f"indices: expected integer rows, got dtype {idx.dtype}")
    idx = idx.astype(np.int64)
    picked = idx[idx >= 0]
    if picked.size and int(picked.max()) >= n_database:
        raise ValueError(f"indices: row {int(picked.max())} is outside the {n_database} database rows")
    return np.bincount(picked, minlength=int(n_database)).astype(np.int64)


def _counts(counts: Any) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"counts: expected a non-empty 1-D array, got shape {c.shape}")
    if (c < 0).any() or not np.isfinite(c).all():
        raise ValueError("counts: expected finite non-negative counts")
    return c


def skewness(counts: Any) -> float:
    """Population skewness ``mean((c − μ)³) / σ³`` (NaN when every count is equal)."""
    c = _counts(counts)
    dev = c - c.mean()
    var = float(np.mean(dev**2))
    if var == 0:
        return math.nan
    return float(np.mean(dev**3) / var**1.5)


def gini(counts: Any) -> float:
    """Gini coefficient ``Σ_i Σ_j |c_i − c_j| / (2·n²·μ)`` (NaN when there are no picks), computed
    from the sorted counts: ``(2·Σ_i i·c_(i)) / (n·Σc) − (n + 1)/n`` with i = 1..n ascending."""
    c = np.sort(_counts(counts))
    n, total = c.size, float(c.sum())
    if total == 0:
        return math.nan
    ranks = np.arange(1, n + 1, dtype=np.float64)
    return float(2.0 * np.dot(ranks, c) / (n * total) - (n + 1.0) / n)


def robin_hood(counts: Any) -> float:
    """Robin Hood (Hoover) index ``Σ|c − μ| / (2·Σc)`` (NaN when there are no picks)."""
    c = _counts(counts)
    total = float(c.sum())
    if total == 0:
        return math.nan
    return float(np.abs(c - c.mean()).sum() / (2.0 * total))


def unused_share(counts: Any) -> float:
    """Share of database rows never picked."""
    c = _counts(counts)
    return float(np.count_nonzero(c == 0) / c.size)


def used_share(counts: Any) -> float:
    """Share of database rows picked at least once."""
    c = _counts(counts)
    return float(np.count_nonzero(c > 0) / c.size)


def top_share(counts: Any, *, top: int = 150) -> float:
    """Share of all picks taken by the ``top`` most-picked database rows (NaN without picks)."""
    if isinstance(top, bool) or int(top) != top or top < 1:
        raise ValueError(f"top must be a positive whole number, got {top!r}")
    c = _counts(counts)
    total = float(c.sum())
    if total == 0:
        return math.nan
    return float(np.sort(c)[::-1][: int(top)].sum() / total)


def used_share_unique(indices: Any, *, database_texts: Sequence[str]) -> float:
    """Share of the distinct database texts that some query picked (a text counts as used when
    any row carrying it was picked; negative indices are ignored)."""
    texts = np.asarray(list(database_texts), dtype=object)
    if texts.size == 0:
        raise ValueError("database_texts: empty")
    counts = k_occurrence(indices, n_database=texts.size)
    return len(set(texts[counts > 0].tolist())) / len(set(texts.tolist()))


def jaccard(a: Iterable, b: Iterable) -> float:
    """``|A ∩ B| / |A ∪ B|`` of the two collections taken as sets (NaN when both are empty)."""
    a, b = set(a), set(b)
    union = a | b
    return len(a & b) / len(union) if union else math.nan


def usage_summary(indices: Any, *, n_database: int, top: int = 150) -> dict[str, float]:
    """The :data:`USAGE_KEYS` statistics of one mining run's picks (``indices``, −1 = no match)."""
    counts = k_occurrence(indices, n_database=n_database)
    return {
        "used_share": used_share(counts),
        "unused_share": unused_share(counts),
        "top_share": top_share(counts, top=top),
        "skewness": skewness(counts),
        "gini": gini(counts),
        "robin_hood": robin_hood(counts),
    }


# --------------------------------------------------------------------------------------------
# §7.2 statistics of mined pseudopair sets (the pipeline step)
# --------------------------------------------------------------------------------------------

STATS_COLUMNS = ["statistic", "pseudopairs", "criterion", "source", "compared_with", "seeds",
                 "value", "paper"]
# per set and seed; then across the seeds of a set; then between two sets at the same seed
PER_RUN = ("n_pairs", "used_share", "used_share_unique", "used_share_text", "top_share",
           "top_share_text", "unused_share", "skewness", "gini", "robin_hood")
ACROSS_SEEDS = ("jaccard_seeds", "agreement_seeds")
# the columns of a pairs table the statistics read (the step reads only these)
STATS_PAIR_COLUMNS = ["query_image_id", "match_row", "match_text"]
BETWEEN_SETS = ("jaccard", "agreement")


def transferred_jaccard(rows_a, rows_b) -> float:
    """Jaccard overlap of the sets of database captions (rows) two pair sets transferred."""
    return jaccard(set(np.asarray(rows_a).tolist()), set(np.asarray(rows_b).tolist()))


def image_agreement(pairs_a, pairs_b) -> float:
    """Paper §7.2: "when a caption is transferred by both models, the overlap of the caption
    annotating the same COCO image". Restricted to the database captions both sets transferred,
    the Jaccard overlap of their (caption, query image) pairs: 1 when every shared caption
    annotates exactly the same images in both, 0 when never the same image."""
    shared = set(pairs_a["match_row"].tolist()) & set(pairs_b["match_row"].tolist())

    def links(pairs):
        kept = pairs[pairs["match_row"].isin(shared)]
        return set(zip(kept["match_row"].tolist(), kept["query_image_id"].tolist()))

    return jaccard(links(pairs_a), links(pairs_b))


def top_share_of_texts(texts, *, top: int = 150) -> float:
    """Share of the pairs whose transferred caption is one of the ``top`` most transferred caption
    *texts* (identical captions counted together, as the paper's notebook counts by string)."""
    import pandas as pd

    # counted by hashing (value_counts), not by sorting a fixed-width copy of every text
    # (np.unique of .astype(str): ~0.4 GB for 566K captions); the same counts, the same float
    values = texts if isinstance(texts, pd.Series) else pd.Series(list(texts), dtype=object)
    counts = values.astype(str).value_counts(dropna=False).to_numpy()
    return float(counts[:top].sum() / counts.sum()) if counts.size else math.nan


def run_statistics(pairs, *, n_database: int, database_unique_texts: int, top: int) -> dict[str, float]:
    """:data:`PER_RUN` statistics of one mined set. By row (each database caption a row of the
    caption table): ``used_share``, ``top_share`` …; by caption text, as the paper's notebook
    counts (57,791 distinct German strings used / 145K captions = its "40 %"):
    ``used_share_text`` = distinct transferred texts / database rows, ``top_share_text`` = the
    share of pairs the ``top`` most transferred texts take; ``used_share_unique`` = distinct
    transferred texts / distinct database texts."""
    rows = pairs["match_row"].to_numpy()
    summary = usage_summary(rows, n_database=n_database, top=top)
    distinct_used = pairs["match_text"].nunique()
    return {
        "n_pairs": float(len(pairs)),
        "used_share_unique": (distinct_used / database_unique_texts
                              if database_unique_texts else math.nan),
        "used_share_text": distinct_used / n_database if n_database else math.nan,
        "top_share_text": top_share_of_texts(pairs["match_text"], top=top),
        **{k: summary[k] for k in ("used_share", "top_share", "unused_share", "skewness", "gini",
                                   "robin_hood")},
    }


class _SetReduction:
    """What the cross-set statistics need of one mined set, without its frame: the sorted distinct
    database rows it transferred (``rows``, for :func:`transferred_jaccard`) and its distinct
    (row, query image) links as sorted int64 keys ``row·2³² + image code`` (for
    :func:`image_agreement`; image codes come from one :class:`_ImageCodes` so that equal ids get
    equal codes in every set). About 8 bytes per pair instead of the frame's ~0.3 KB."""

    __slots__ = ("rows", "links")

    def __init__(self, pairs, codes: "_ImageCodes"):
        rows = pairs["match_row"].to_numpy().astype(np.int64)
        self.rows = np.unique(rows)
        self.links = np.unique(rows * (1 << 32) + codes.encode(pairs["query_image_id"]))


class _ImageCodes:
    """Query image ids → consecutive int64 codes shared by every set of one statistics run."""

    def __init__(self):
        self.index: dict = {}

    def encode(self, ids) -> np.ndarray:
        import pandas as pd

        local, uniques = pd.factorize(ids, use_na_sentinel=False)
        table = np.fromiter((self.index.setdefault(u, len(self.index)) for u in uniques),
                            dtype=np.int64, count=len(uniques))
        return table[local] if len(local) else np.zeros(0, dtype=np.int64)


def _reduced_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """:func:`jaccard` of two sorted distinct arrays (the same counts, so the same float)."""
    shared = np.intersect1d(a, b, assume_unique=True).size
    union = a.size + b.size - shared
    return shared / union if union else math.nan


def _reduced_agreement(a: _SetReduction, b: _SetReduction) -> float:
    """:func:`image_agreement` of two reduced sets."""
    shared = np.intersect1d(a.rows, b.rows, assume_unique=True)
    kept_a = a.links[np.isin(a.links >> 32, shared)]
    kept_b = b.links[np.isin(b.links >> 32, shared)]
    return _reduced_jaccard(kept_a, kept_b)


def _judge(spec: dict):
    """The precision judge of a spec with ``meanings`` (the demo world), else None."""
    if not spec.get("meanings"):
        return None
    from pseudopairs.mining.precision import Judge

    return Judge(spec["meanings"])


def pseudopair_statistics(spec: dict, *, load=None):
    """The long table of results/pseudopair_stats.csv (:data:`STATS_COLUMNS`): every set's
    :data:`PER_RUN` statistics per seed, :data:`ACROSS_SEEDS` per pair of seeds, and
    :data:`BETWEEN_SETS` for each configured comparison per seed; the paper's figure beside.

    With ``spec["meanings"]`` (the demo world: its caption meanings, scenes and each set's
    database corpus) every set's :data:`~pseudopairs.mining.precision.PRECISION_STATISTICS`
    follow its per-run statistics (:mod:`pseudopairs.mining.precision`); without (real data)
    they are absent.

    ``load(name, seed)`` → ``(pairs frame, mining stats dict)``; each set and seed is loaded
    once, and one at a time: its frame is reduced to the per-run statistics and a
    :class:`_SetReduction` (its distinct rows and (row, image) links, ~8 bytes per pair) and
    dropped before the next is loaded, so memory grows by one frame plus the reductions, not by
    every frame (at the paper's size a login node would otherwise hold tens of GB). A set's
    reductions are kept only while a statistic still needs them."""
    import gc
    import itertools
    import json

    import pandas as pd

    from pseudopairs.core.io import read_pairs
    from pseudopairs.mining.precision import PRECISION_PAIR_COLUMNS, PRECISION_STATISTICS

    judge = _judge(spec)
    columns = (STATS_PAIR_COLUMNS if judge is None else
               list(dict.fromkeys(STATS_PAIR_COLUMNS + PRECISION_PAIR_COLUMNS)))
    per_run_statistics = PER_RUN if judge is None else PER_RUN + PRECISION_STATISTICS

    def default_load(name, seed):
        files = spec["files"][name][str(seed)]
        stats = json.loads(Path(files["stats"]).read_text(encoding="utf-8"))
        return read_pairs(files["pairs"], columns=columns), stats

    load = load or default_load
    codes = _ImageCodes()
    reduced: dict = {}
    per_run: dict = {}

    def reduce(name, seed):
        """Load one set at one seed, keep its statistics and its reduction, drop its frame."""
        if (name, seed) in reduced:
            return
        pairs, stats = load(name, seed)
        per_run[name, seed] = run_statistics(
            pairs, n_database=stats["n_database"],
            database_unique_texts=stats["n_database_unique_texts"], top=spec["top"])
        if judge is not None:
            per_run[name, seed].update(judge(name, pairs))
        reduced[name, seed] = _SetReduction(pairs, codes)
        del pairs, stats
        gc.collect()   # a frame's column caches can form cycles: free it before the next load

    records = []
    seeds = list(spec["seeds"])
    compared = {c[k] for c in spec.get("compare", []) for k in ("a", "b")}
    for name, info in spec["sets"].items():
        base = {"pseudopairs": name, "criterion": info["criterion"], "source": info["source"],
                "compared_with": ""}
        paper = info.get("paper", {})
        for seed in seeds:
            reduce(name, seed)
            values = per_run.pop((name, seed))
            for statistic in per_run_statistics:
                records.append({**base, "statistic": statistic, "seeds": str(seed),
                                "value": values[statistic], "paper": paper.get(statistic, math.nan)})
        for s1, s2 in itertools.combinations(seeds, 2):
            r1, r2 = reduced[name, s1], reduced[name, s2]
            for statistic, value in (("jaccard_seeds", _reduced_jaccard(r1.rows, r2.rows)),
                                     ("agreement_seeds", _reduced_agreement(r1, r2))):
                records.append({**base, "statistic": statistic, "seeds": f"{s1},{s2}", "value": value,
                                "paper": paper.get(statistic, math.nan)})
        if name not in compared:
            for seed in seeds:
                reduced.pop((name, seed), None)
    for comparison in spec.get("compare", []):
        a, b = comparison["a"], comparison["b"]
        paper = comparison.get("paper", {})
        for seed in seeds:
            reduce(a, seed)
            reduce(b, seed)
            per_run.pop((a, seed), None)
            per_run.pop((b, seed), None)
            ra, rb = reduced[a, seed], reduced[b, seed]
            base = {"pseudopairs": a, "criterion": spec["sets"][a]["criterion"],
                    "source": spec["sets"][a]["source"], "compared_with": b, "seeds": str(seed)}
            records.append({**base, "statistic": "jaccard", "paper": paper.get("jaccard", math.nan),
                            "value": _reduced_jaccard(ra.rows, rb.rows)})
            records.append({**base, "statistic": "agreement", "paper": paper.get("agreement", math.nan),
                            "value": _reduced_agreement(ra, rb)})
    return pd.DataFrame.from_records(records, columns=STATS_COLUMNS)


def pseudopair_statistics_reference(spec: dict, *, load=None):
    """:func:`pseudopair_statistics` as computed before it streamed: every frame loaded once and
    kept until the end, the cross-set figures from the frame functions
    (:func:`transferred_jaccard`, :func:`image_agreement`) — the definitions the streaming code
    reproduces exactly (tests) and the plain reference of ``benchmarks/statistics_memory.py``.
    Same columns; the paper's figures are left out (NaN)."""
    import itertools
    import json

    import pandas as pd

    from pseudopairs.core.io import read_pairs

    def default_load(name, seed):
        files = spec["files"][name][str(seed)]
        return read_pairs(files["pairs"]), json.loads(Path(files["stats"]).read_text(encoding="utf-8"))

    load = load or default_load
    judge = _judge(spec)
    cache: dict = {}

    def get(name, seed):
        if (name, seed) not in cache:
            cache[name, seed] = load(name, seed)
        return cache[name, seed]

    records = []
    for name, info in spec["sets"].items():
        base = {"pseudopairs": name, "criterion": info["criterion"], "source": info["source"],
                "compared_with": "", "paper": math.nan}
        for seed in spec["seeds"]:
            pairs, stats = get(name, seed)
            values = run_statistics(pairs, n_database=stats["n_database"],
                                    database_unique_texts=stats["n_database_unique_texts"], top=spec["top"])
            if judge is not None:
                values.update(judge(name, pairs))
            records += [{**base, "statistic": k, "seeds": str(seed), "value": v}
                        for k, v in ({k: values[k] for k in PER_RUN} | values).items()]
        for s1, s2 in itertools.combinations(spec["seeds"], 2):
            (p1, _), (p2, _) = get(name, s1), get(name, s2)
            records += [{**base, "statistic": "jaccard_seeds", "seeds": f"{s1},{s2}",
                         "value": transferred_jaccard(p1["match_row"], p2["match_row"])},
                        {**base, "statistic": "agreement_seeds", "seeds": f"{s1},{s2}",
                         "value": image_agreement(p1, p2)}]
    for c in spec.get("compare", []):
        for seed in spec["seeds"]:
            (pa, _), (pb, _) = get(c["a"], seed), get(c["b"], seed)
            base = {"pseudopairs": c["a"], "criterion": spec["sets"][c["a"]]["criterion"],
                    "source": spec["sets"][c["a"]]["source"], "compared_with": c["b"],
                    "seeds": str(seed), "paper": math.nan}
            records += [{**base, "statistic": "jaccard",
                         "value": transferred_jaccard(pa["match_row"], pb["match_row"])},
                        {**base, "statistic": "agreement", "value": image_agreement(pa, pb)}]
    return pd.DataFrame.from_records(records, columns=STATS_COLUMNS)
