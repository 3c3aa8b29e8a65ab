"""``inverted_softmax`` (Smith et al. 2017; beyond the paper): each database caption spreads a
softmax over the queries, and each query takes the caption that gives it the most probability.

What is exact: the normaliser ``L(d) = log Σ_q exp(β·cos(q, d))`` is accumulated from float32
scores (one precise pass, :class:`~pseudopairs.similarity.ColumnLogSumExp`, within its proven
bound of the float64 value); for that ``L`` the index is the exact float64 argmax of
``β·cos(q, d) − L(d)`` and the score its value, the bits the brute-force formula gives on the same
``L`` (:func:`reference_given`)."""

from __future__ import annotations

import numpy as np

from pseudopairs.mining.criteria import Criterion, positive_number, register
from pseudopairs.mining.search import (argmax_reference, column_offset_error, subtract_columns,
                                       transformed_argmax)
from pseudopairs.similarity import ColumnLogSumExp, duplicate_groups

DEFAULT_BETA = 30.0


def normaliser(ctx, beta: float, extra=(), desc: str = "inverted softmax (normalisers)") -> np.ndarray:
    """``L(d)`` per database row from one precise (float32) pass, which also feeds the reducers
    ``extra``. Rows of one direction (equal up to a power of two: equal exact cosines) share one
    normaliser, so their exact ties stay ties and go to the lowest index."""
    lse = ColumnLogSumExp(n_cols=ctx.m, beta=beta)
    ctx.one_pass([lse, *extra], desc, precise=True)
    return lse.result()[duplicate_groups(ctx.d.raw, shift=ctx.d.shift)]


def argmax_given(ctx, beta: float, L: np.ndarray, desc: str = "inverted_softmax (argmax)", *,
                 as64: bool = False):
    """The exact argmax of ``β·cos(q, d) − L(d)`` per query and its value (float32, or float64
    with ``as64``), for the given ``L``."""
    shift32 = (L / beta).astype(np.float32)
    err, scale = column_offset_error(ctx, shift32)
    return transformed_argmax(
        ctx, transform=subtract_columns(shift32), err=err, scale=scale, desc=desc, as64=as64,
        exact_of=lambda lines, others: beta * ctx.cos_of(lines, others) - L[others])


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    return argmax_given(ctx, params["beta"], normaliser(ctx, params["beta"]))


def log_sum_exp_columns64(cos: np.ndarray, beta: float) -> np.ndarray:
    """``log Σ_rows exp(beta·cos[row, col])`` per column in float64 (brute force)."""
    peak = cos.max(axis=0)
    return beta * peak + np.log(np.exp(beta * (cos - peak[None, :])).sum(axis=0))


def reference_given(cos: np.ndarray, beta: float, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The criterion by brute force for a given normaliser ``L``."""
    return argmax_reference(beta * cos - L[None, :])


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    return reference_given(cos, params["beta"], log_sum_exp_columns64(cos, params["beta"]))


register(Criterion(
    name="inverted_softmax", search=search, reference=reference,
    params=(positive_number("beta", DEFAULT_BETA),),
    summary="inverted softmax (Smith et al. 2017)",
    definition="argmax_d β·cos(q, d) − log Σ_q' exp(β·cos(q', d)); score = that log probability "
               "(the normaliser accumulated from float32 scores within a proven bound)"))
