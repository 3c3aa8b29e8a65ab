"""Similarity functions a model is trained and evaluated with: one registry entry each.

An entry gives the function's definition (shown in the docs), ``scores`` — all pairs
``s[i, j] = s(a_i, b_j)`` of two embedding batches in torch, used by the training loss — and
``reference`` — the same in float64 numpy, the brute-force definition the tests and the exact
engines are checked against. Registered here: ``cosine`` (paper 000; both sides L2-normalised,
so the dot product), whose exact blocked engine is :mod:`pseudopairs.similarity`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pseudopairs.registry import Registry


@dataclass(frozen=True)
class SimilarityFunction:
    name: str
    definition: str
    scores: Callable[[Any, Any], Any]              # torch (n, d) x (m, d) -> (n, m)
    reference: Callable[[np.ndarray, np.ndarray], np.ndarray]  # float64 brute force


SIMILARITIES: Registry[SimilarityFunction] = Registry("similarity function",
                                                      modules=("pseudopairs.similarity.functions",))


def _cosine_scores(a, b):
    return a @ b.t()


def _cosine_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


SIMILARITIES.register("cosine", SimilarityFunction(
    name="cosine",
    definition="s(a, b) = a·b / (‖a‖‖b‖); the model's embeddings are L2-normalised, so a·b",
    scores=_cosine_scores, reference=_cosine_reference))
