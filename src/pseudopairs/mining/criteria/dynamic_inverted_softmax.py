"""``dynamic_inverted_softmax`` (Bogolin et al. 2022, "Cross Modal Retrieval with Querybank
Normalisation" — QB-Norm's Dynamic Inverted Softmax, code ioanacroi/qb-norm; beyond the paper).

QB-Norm normalises a query's similarities with the inverted softmax over a *querybank* only when
the query's nearest gallery item lies in the bank's **activation set** — the gallery items that
are some bank query's top-k neighbour — and leaves it alone otherwise. Here the bank is the COCO
queries themselves. Taken literally that makes every query's nearest item active (the query is in
its own bank), and the criterion collapses to ``inverted_softmax``; so a query's own top-k does
not count for it (leave-one-out, the analogue of QB-Norm's bank being disjoint from its test
queries): the query is normalised iff its nearest database row is also in the top-k of **another**
query.

Definition (ties everywhere to the lowest database index, as in every criterion): ``top_k(q)`` =
the first k database rows in the order (cos(q, ·) decreasing, index increasing), k capped at the
number of database rows; ``count(d)`` = the number of queries with d in their ``top_k``; a query
is *normalised* iff ``count(top_1(q)) ≥ 2``. Normalised: ``argmax_d β·cos(q, d) − L(d)`` with the
inverted softmax normaliser ``L(d) = log Σ_q' exp(β·cos(q', d))`` over all queries; otherwise its
cosine match ``top_1(q)``. The score is ``β·cos(q, d) − L(d)`` of the chosen d either way (the
inverted-softmax log probability, comparable across queries).

Parameters (defaults from the qb-norm code, ``dynamic_inverted_softmax.py``): ``beta`` = 20, the
inverse temperature (its README: "The value used for the inverse temperature is 20", with other
values for a few models; the DBSN code runs the same function at 1/τ ≈ 50–105), any positive
finite number; ``k`` = 1, the activation set's top-k, any positive whole number (k ≥ the number
of database rows puts every row in every top-k: then, with two or more queries, the criterion is
``inverted_softmax``).

What is exact: the top-k sets and the gating are exact (float64 cosines of a superset of
candidates from a precise float32 pass); ``L`` is accumulated from float32 scores within a proven
bound (as for ``inverted_softmax``); for that ``L`` indices and scores are the bits of the
brute-force formula (:func:`reference_given`).
"""

from __future__ import annotations

import numpy as np

from pseudopairs.mining.criteria import Criterion, positive_number, whole_number, register
from pseudopairs.mining.criteria import inverted_softmax as isf
from pseudopairs.mining.search import exact_topk
from pseudopairs.similarity import WindowTopK

DEFAULT_BETA = 20.0
DEFAULT_K = 1


def normalised_queries(topk: np.ndarray, n_database: int) -> np.ndarray:
    """Which queries are normalised: their nearest row (``topk[:, 0]``) is in another query's
    top-k (it is in its own, so the count of queries holding it must be ≥ 2)."""
    count = np.bincount(topk.ravel(), minlength=n_database)
    return count[topk[:, 0]] >= 2


def _combine(normalised, isf_pick, nearest, nearest_value):
    idx, score = isf_pick
    return (np.where(normalised, idx, nearest).astype(np.int64),
            np.where(normalised, score, nearest_value.astype(np.float32)).astype(np.float32))


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    beta, k = params["beta"], min(params["k"], ctx.m)
    top = WindowTopK(axis="rows", n_lines=ctx.n, k=k, window=ctx.window32, exact_of=ctx.cos_of)
    L = isf.normaliser(ctx, beta, extra=(top,), desc="dynamic inverted softmax (normalisers, top-k)")
    cand = top.result()
    topk = exact_topk(cand, ctx.cos_of(cand.line, cand.other), k, ctx.n)
    normalised = normalised_queries(topk, ctx.m)
    nearest = topk[:, 0]
    value = beta * ctx.cos_of(np.arange(ctx.n), nearest) - L[nearest]
    if normalised.any():
        pick = isf.argmax_given(ctx, beta, L, desc="dynamic inverted softmax (argmax)")
    else:
        pick = (nearest, value.astype(np.float32))
    return _combine(normalised, pick, nearest, value)


def reference_given(cos: np.ndarray, params: dict, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The criterion by brute force on the float64 cosine matrix, for a given normaliser ``L``."""
    beta, k = params["beta"], min(params["k"], cos.shape[1])
    topk = np.argsort(-cos, axis=1, kind="stable")[:, :k]
    nearest = topk[:, 0]
    value = beta * cos[np.arange(cos.shape[0]), nearest] - L[nearest]
    return _combine(normalised_queries(topk, cos.shape[1]), isf.reference_given(cos, beta, L), nearest, value)


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    return reference_given(cos, params, isf.log_sum_exp_columns64(cos, params["beta"]))


register(Criterion(
    name="dynamic_inverted_softmax", search=search, reference=reference,
    params=(positive_number("beta", DEFAULT_BETA),
            whole_number("k", DEFAULT_K)),
    summary="dynamic inverted softmax (QB-Norm, Bogolin et al. 2022), the queries as the bank",
    definition="inverted_softmax's argmax_d β·cos(q, d) − L(d) for queries whose nearest database "
               "row is in another query's top-k (the activation set, leave-one-out), else the "
               "cosine match; score = β·cos(q, d) − L(d) of the pick (L accumulated from float32 "
               "scores within a proven bound)"))
