"""``cosine`` (the paper, §2.2): each query takes its most cosine-similar database caption."""

from __future__ import annotations

import numpy as np

from pseudopairs.mining.criteria import Criterion, register
from pseudopairs.mining.search import argmax_reference, best_per_line, cosine_argmax_candidates


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    cand, _ = cosine_argmax_candidates(ctx, columns=False, desc="cosine")
    best, exact = best_per_line(cand.line, cand.other, ctx.cos_of(cand.line, cand.other), ctx.n)
    return best.astype(np.int64), exact.astype(np.float32)


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    return argmax_reference(cos)


register(Criterion(
    name="cosine", params=(), search=search, reference=reference,
    summary="the most cosine-similar database caption (paper §2.2)",
    definition="argmax_d cos(q, d); score = that cosine"))
