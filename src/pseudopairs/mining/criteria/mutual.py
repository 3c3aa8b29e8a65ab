"""``mutual`` (beyond the paper): the cosine match q → d is kept only if q is also d's cosine
match among the queries; other queries get no pair."""

from __future__ import annotations

import numpy as np

from pseudopairs.mining.criteria import Criterion, register
from pseudopairs.mining.search import argmax_reference, best_per_line, cosine_argmax_candidates


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    cand, cand_d = cosine_argmax_candidates(ctx, columns=True, desc="mutual")
    best, exact = best_per_line(cand.line, cand.other, ctx.cos_of(cand.line, cand.other), ctx.n)
    back, _ = best_per_line(cand_d.line, cand_d.other, ctx.cos_of(cand_d.other, cand_d.line), ctx.m)
    mutual = back[best] == np.arange(ctx.n)
    scores = exact.astype(np.float32)
    return np.where(mutual, best, -1).astype(np.int64), np.where(mutual, scores, np.float32(np.nan))


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    best, values = argmax_reference(cos)
    back = cos.argmax(axis=0)
    ok = back[best] == np.arange(cos.shape[0])
    return np.where(ok, best, -1).astype(np.int64), np.where(ok, values, np.float32(np.nan))


register(Criterion(
    name="mutual", params=(), search=search, reference=reference,
    summary="mutual cosine nearest neighbours only",
    definition="the cosine match q → d, kept only if q is also d's cosine match among the queries "
               "(else no pair: index −1, score NaN)"))
