"""``margin`` (Artetxe & Schwenk 2019, ratio margin; beyond the paper)."""

from __future__ import annotations

import numpy as np

from pseudopairs.mining.criteria import Criterion, whole_number, register
from pseudopairs.mining.search import (argmax_reference, device_copies, knearest_means,
                                       knearest_means_reference, transformed_argmax)
from pseudopairs.similarity import U32, is_tensor


def _divide_pairs(rq32: np.ndarray, rd32: np.ndarray, strip: int = 64):
    """Block transform ``S / fl32(rq32[row] + rd32[col])`` (float32), in strips of rows."""
    cache: dict = {}

    def transform(block) -> None:
        v = block.valid
        if is_tensor(v):
            tq, td = device_copies(cache, v.device, rq32, rd32)
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


def _positive_neighbourhoods(r_q: np.ndarray, r_d: np.ndarray, k: int, slack: float = 0.0) -> float:
    rho_min = float(r_q.min() + r_d.min())
    if not rho_min - slack > 0:
        raise ValueError(
            f"margin: r_q + r_d must be positive for every pair (the mean cosine of the {k} "
            f"nearest neighbours on both sides), but it reaches {rho_min:.3g}; the ratio "
            "margin is meaningless here — use csls or another k")
    return rho_min


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    k = params["k"]
    r_q, r_d = knearest_means(ctx, k, "margin (k-nearest)")
    rq32, rd32 = r_q.astype(np.float32), r_d.astype(np.float32)
    delta = 2.01 * U32 * float(np.abs(r_q).max() + np.abs(r_d).max())
    rho_min = _positive_neighbourhoods(r_q, r_d, k, slack=delta)
    low = rho_min - delta
    err = ctx.E / low + delta / (low * rho_min) + U32 * (1.0 + ctx.E) / low * 1.01
    return transformed_argmax(
        ctx, transform=_divide_pairs(rq32, rd32), err=err, scale=(1.0 + ctx.E) / low,
        desc="margin (argmax)",
        exact_of=lambda lines, others: ctx.cos_of(lines, others) / (0.5 * (r_q[lines] + r_d[others])))


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    r_q, r_d = knearest_means_reference(cos, params["k"])
    _positive_neighbourhoods(r_q, r_d, params["k"])
    return argmax_reference(cos / (0.5 * (r_q[:, None] + r_d[None, :])))


register(Criterion(
    name="margin", search=search, reference=reference,
    params=(whole_number("k", 4, neighbourhood=True),),
    summary="ratio margin (Artetxe & Schwenk 2019)",
    definition="argmax_d cos(q, d) / (0.5·(r_q(q) + r_d(d))) with the k-nearest means of csls; "
               "needs r_q + r_d > 0; score = the ratio"))
