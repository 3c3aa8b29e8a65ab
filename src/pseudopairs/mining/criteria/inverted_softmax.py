"""``inverted_softmax`` (Smith et al. 2017; beyond the paper): each database caption spreads a
softmax over the queries, and each query takes the caption that gives it the most probability."""

from __future__ import annotations

import numpy as np

from pseudopairs.mining.criteria import Criterion, Param, register
from pseudopairs.mining.search import (argmax_reference, column_offset_error, subtract_columns,
                                       transformed_argmax)
from pseudopairs.similarity import ColumnLogSumExp, duplicate_groups

DEFAULT_BETA = 30.0


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    beta = params["beta"]
    lse = ColumnLogSumExp(n_cols=ctx.m, beta=beta)
    ctx.one_pass([lse], "inverted softmax (normalisers)")
    # rows of one direction (equal up to a power of two: equal exact cosines) share one
    # normaliser, so their exact ties stay ties and go to the lowest index
    L = lse.result()[duplicate_groups(ctx.d.raw, shift=ctx.d.shift)]
    shift32 = (L / beta).astype(np.float32)
    err, scale = column_offset_error(ctx, shift32)
    return transformed_argmax(
        ctx, transform=subtract_columns(shift32), err=err, scale=scale,
        desc="inverted_softmax (argmax)",
        exact_of=lambda lines, others: beta * ctx.cos_of(lines, others) - L[others])


def log_sum_exp_columns64(cos: np.ndarray, beta: float) -> np.ndarray:
    """``log Σ_rows exp(beta·cos[row, col])`` per column in float64 (brute force)."""
    peak = cos.max(axis=0)
    return beta * peak + np.log(np.exp(beta * (cos - peak[None, :])).sum(axis=0))


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    beta = params["beta"]
    return argmax_reference(beta * cos - log_sum_exp_columns64(cos, beta)[None, :])


register(Criterion(
    name="inverted_softmax", search=search, reference=reference,
    params=(Param("beta", DEFAULT_BETA, float, 0.0, "a positive finite number", low_open=True),),
    summary="inverted softmax (Smith et al. 2017)",
    definition="argmax_d β·cos(q, d) − log Σ_q' exp(β·cos(q', d)); score = that log probability "
               "(the normaliser accumulated from float32 scores within a proven bound)"))
