"""``sinkhorn`` (beyond the paper): equal-preference mining — Huang et al. 2019, "Hubless Nearest
Neighbor Search for Bilingual Lexicon Induction" (HNN; code baidu-research/HNN), and the Sinkhorn
normalisation of Pan et al. 2025 (DBSN; code ppanzx/DBSN). The kernel ``exp(β·cos)`` is scaled
(Sinkhorn–Knopp) towards a transport plan ``P = diag(u)·K·diag(v)`` with uniform marginals — every
query sends, and every database caption receives, the same mass — and each query takes the
caption its row of the plan favours. A caption many queries like (a hub) gets a small ``v``.

Definition (log domain, ``a = 1/n`` per query, ``b = 1/m`` per database row; ``c = cos``):

    L¹(d)   = log Σ_q exp(β·c(q, d))                       (u ≡ 1: the inverted softmax normaliser)
    gᵗ(q)   = log(m/n) − log Σ_d exp(β·c(q, d) − Lᵗ(d))    (row scaling, log u)
    Lᵗ⁺¹(d) = log Σ_q exp(β·c(q, d) + gᵗ(q))               (column scaling, v = e^(−L)/m)

for t = 1 … T, stopping at ``T = iterations`` or at the first t ≥ 2 with
``max_d |Lᵗ − Lᵗ⁻¹| ≤ tol`` (then every column marginal of the row-scaled plan is within a factor
``e^tol`` of ``b``). With ``g = g^(T−1)`` (0 for T = 1) and ``L = L^T`` the index is
``argmax_d β·c(q, d) − L(d)`` (``g(q)`` is constant in a row) and the score
``(β·c(q, d) − L(d)) + g(q) = log(m·P(q, d))`` — the log of the plan entry normalised over its
column, i.e. ``inverted_softmax``'s log probability when T = 1 (then the two criteria agree bit for
bit).

Parameters: ``beta`` = 30 (HNN's ``--epsilon`` 1/30, also ``inverted_softmax``'s default), any
positive finite number; ``iterations`` = 30 (HNN's ``--iters`` default; each iteration is one pass
over the score matrix), a positive whole number; ``tol`` = 1e-3, ≥ 0 (0: always run all
iterations; DBSN's POT solver runs up to 1000 iterations to 1e-9, which at this scale is hundreds
of passes).

What is exact, and the float32 part. The scalings come from precise (float32 GEMM) passes — the
first a :class:`~pseudopairs.similarity.ColumnLogSumExp`, each further one a single pass over
blocks of whole rows that updates ``g`` for the block's rows and accumulates the column
log-sum-exp of ``β·S + g`` (one GEMM per iteration). Each log-sum-exp is 1-Lipschitz in the
max-norm of its arguments, so an error ``β·E32`` in every score plus the rounding of each step
adds up: ``‖L − L_exact‖∞ ≤ Σ_steps (β·E32 + ε_step)`` with ``ε_step`` from :func:`_lse_rounding`
(:attr:`Scalings.bound`, about ``2T·β·E32``), against the same iteration on exact cosines. For the
computed ``g`` and ``L`` the index and score are exact: the bits :func:`reference_given` gives on
the float64 cosine matrix with the same ``g`` and ``L``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from pseudopairs.mining.criteria import Criterion, param, positive_number, whole_number, register
from pseudopairs.mining.criteria import inverted_softmax as isf
from pseudopairs.mining.search import argmax_reference
from pseudopairs.similarity import (
    EXP32_ULPS,
    MIN_NORMAL32,
    U32,
    U64,
    ColumnLogSumExp,
    duplicate_groups,
    gamma,
)

DEFAULT_BETA = 30.0
DEFAULT_ITERATIONS = 30
DEFAULT_TOL = 1e-3


class Scalings(NamedTuple):
    """The computed log scalings: ``g`` (per query), ``L`` (per database row), the iterations
    run, the last ``max|ΔL|`` (inf after one iteration) and the proven bound on the error of
    ``g`` and ``L`` against the same iteration on exact cosines."""

    g: np.ndarray
    L: np.ndarray
    iterations: int
    change: float
    bound: float


def _lse_rounding(*, magnitude: float, terms: int, blocks: int) -> float:
    """Rounding error of one float32 log-sum-exp step whose arguments ``β·S ± offset`` are below
    ``magnitude`` in size: the arguments (offset to float32, ``β·S``, the sum, the shift by the
    maximum; β itself rounded to float32: ≤ 6·u32·magnitude), float32 exp (:data:`EXP32_ULPS` ulp), float64 sums over
    ``terms`` terms and ``blocks`` rescalings, underflow (≤ 2**-126 per term; the sum is ≥ 1),
    then the log and the final float64 additions."""
    rel = (2 * EXP32_ULPS * U32 + gamma(terms + 1, U64) + terms * MIN_NORMAL32
           + (2 * blocks + 4) * U64)
    return 6.0 * 1.01 * U32 * magnitude + rel / (1.0 - rel) + 8 * U64 * (magnitude + math.log(terms + 1) + 1.0)


def _iterate(ctx, beta: float, L: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One Sinkhorn iteration on precise blocks of whole rows: ``g`` from ``L`` for each block's
    rows, then the column log-sum-exp of ``β·S + g`` accumulated over the blocks (torch ops, on
    the CPU for numpy blocks)."""
    import torch

    n, m = ctx.n, ctx.m
    shift = math.log(m / n)
    g = np.empty(n, dtype=np.float64)
    peak = total = neg_l = work = None
    blocks = 0
    for block in ctx.whole_rows("sinkhorn (iteration)"):
        s = block.valid if torch.is_tensor(block.valid) else torch.from_numpy(block.valid)
        if work is None:
            work = torch.empty((block.scores.shape[0], m), dtype=torch.float32, device=s.device)
            neg_l = torch.as_tensor(-L, dtype=torch.float32, device=s.device)
            peak = torch.full((m,), -math.inf, dtype=torch.float32, device=s.device)
            total = torch.zeros(m, dtype=torch.float64, device=s.device)
        t = work[: block.n_rows]
        torch.mul(s, beta, out=t).add_(neg_l)  # β·S − L
        row_peak = t.amax(dim=1, keepdim=True)
        t.sub_(row_peak).exp_()
        lse = row_peak[:, 0].double() + torch.log(t.sum(dim=1, dtype=torch.float64))
        g_block = shift - lse
        g[block.row0: block.row1] = g_block.cpu().numpy()
        torch.mul(s, beta, out=t).add_(g_block.float()[:, None])  # β·S + g
        new_peak = torch.maximum(peak, t.amax(dim=0))
        t.sub_(new_peak).exp_()
        finite = torch.isfinite(peak)
        rescale = torch.where(finite, torch.exp((peak.double() - new_peak.double()).where(finite, 0.0)), 0.0)
        total = total * rescale + t.sum(dim=0, dtype=torch.float64)
        peak = new_peak
        blocks += 1
    L_new = (peak.double() + torch.log(total)).cpu().numpy()
    return g, L_new, blocks


def scalings(ctx, beta: float, iterations: int, tol: float) -> Scalings:
    """The log scalings ``g`` and ``L`` of the module docstring, with their proven bound. Rows of
    one direction share their scaling (equal exact cosines: exact ties stay ties)."""
    lse = ColumnLogSumExp(n_cols=ctx.m, beta=beta)
    ctx.one_pass([lse], "sinkhorn (iteration 1)", precise=True)
    L, g = lse.result(), np.zeros(ctx.n)
    bound = lse.error_bound(score_error=ctx.E32)
    t, change = 1, math.inf
    score = beta * (1.0 + ctx.E32)
    while t < iterations and not change <= tol:
        g, L_new, blocks = _iterate(ctx, beta, L)
        bound += beta * ctx.E32 + _lse_rounding(magnitude=score + float(np.abs(L).max()), terms=ctx.m, blocks=1)
        bound += beta * ctx.E32 + _lse_rounding(magnitude=score + float(np.abs(g).max()), terms=ctx.n,
                                                blocks=blocks)
        change = float(np.abs(L_new - L).max())
        L, t = L_new, t + 1
    groups_q = duplicate_groups(ctx.q.raw, shift=ctx.q.shift)
    groups_d = duplicate_groups(ctx.d.raw, shift=ctx.d.shift)
    return Scalings(g[groups_q], L[groups_d], t, change, bound)


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    beta = params["beta"]
    sc = scalings(ctx, beta, params["iterations"], params["tol"])
    idx, value = isf.argmax_given(ctx, beta, sc.L, desc="sinkhorn (argmax)", as64=True)
    return idx, (value + sc.g).astype(np.float32)


def sinkhorn64(cos: np.ndarray, beta: float, iterations: int, tol: float) -> Scalings:
    """The iteration of the module docstring by brute force in float64 on the cosine matrix."""
    n, m = cos.shape
    kernel = beta * cos
    L, g = isf.log_sum_exp_columns64(cos, beta), np.zeros(n)
    t, change = 1, math.inf
    while t < iterations and not change <= tol:
        arg = kernel - L[None, :]
        peak = arg.max(axis=1)
        g = math.log(m / n) - (peak + np.log(np.exp(arg - peak[:, None]).sum(axis=1)))
        arg = kernel + g[:, None]
        peak = arg.max(axis=0)
        L_new = peak + np.log(np.exp(arg - peak[None, :]).sum(axis=0))
        change = float(np.abs(L_new - L).max())
        L, t = L_new, t + 1
    return Scalings(g, L, t, change, 0.0)


def reference_given(cos: np.ndarray, beta: float, g: np.ndarray, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The criterion by brute force for given scalings ``g`` and ``L``."""
    idx, _ = argmax_reference(beta * cos - L[None, :])
    value = beta * cos[np.arange(cos.shape[0]), idx] - L[idx]
    return idx, (value + g).astype(np.float32)


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    sc = sinkhorn64(cos, params["beta"], params["iterations"], params["tol"])
    return reference_given(cos, params["beta"], sc.g, sc.L)


register(Criterion(
    name="sinkhorn", search=search, reference=reference,
    params=(positive_number("beta", DEFAULT_BETA),
            whole_number("iterations", DEFAULT_ITERATIONS),
            param("tol", DEFAULT_TOL, kind=float, low=0.0, what="a finite number ≥ 0")),
    summary="Sinkhorn equal-preference scaling (Huang et al. 2019 hubless NN; DBSN 2025)",
    definition="argmax_d β·cos(q, d) − L(d), L = the column log-scaling of exp(β·cos) after Sinkhorn "
               "iterations towards uniform marginals (≤ `iterations`, until ‖ΔL‖∞ ≤ `tol`; one "
               "iteration = inverted_softmax); score = log(m·P(q, d)), the plan entry over its column "
               "(scalings accumulated from float32 scores within a proven bound)"))
