"""Similarity functions a model is trained and evaluated with: one registry entry each
(config key ``training.similarity``; the model stores its function in its checkpoint).

An entry gives the function's definition (shown in the docs), ``scores`` — all pairs
``s[i, j] = s(a_i, b_j)`` of two embedding batches in torch, used by the training loss; for
image–caption pairs ``a`` are the images and ``b`` the captions — and ``reference`` — the same
in float64 numpy, the brute-force definition the tests check the exact engines against. Beside
them:

- ``nonnegative``: the model makes its embeddings non-negative (``|x|`` of the unit row, which
  keeps the unit norm), as the function needs;
- ``between_captions``: the registered function used between two captions (c2c training pairs,
  caption–caption mining, translation retrieval) — a symmetric one, since two captions are
  items of the same kind;
- ``margin``: the hinge margin the function's paper trains with (a documented hint: the margin
  is the ``training.margin`` setting);
- ``ranks`` and ``pairs``: ``"module:function"`` of the function's exact blocked retrieval-rank
  engine and of its exact float64 score of listed (image, caption) pairs, the routine both the
  engine and the per-query reference decide with (``None``: the GEMM engine and ``dot64`` of
  :mod:`pseudopairs.similarity` used by :mod:`pseudopairs.similarity.ranks`, for ``cosine``).

Registered here:

- ``cosine`` (paper 000): both sides L2-normalised, so the dot product.
- ``order`` (paper 001's asymmetric similarity, Pivot-Asym / Parallel-Asym; the order embeddings
  of Vendrov et al. 2016, their caption–image retrieval): ``s(v, c) = −‖max(0, c − v)‖²`` of an
  image ``v`` and a caption ``c``, on non-negative embeddings (Vendrov: absolute values of the
  embeddings; here ``|x|`` of the unit row), margin 0.05 (001's experiment setup: 0.05 for the
  asymmetric, 0.2 for the symmetric similarity). It is 0 exactly when ``c ≤ v`` in every coordinate: in Vendrov's
  reversed product order (``x ⪯ y`` iff ``x ≥ y`` coordinatewise, the origin on top) the image
  lies below its caption — the caption is the image's abstraction — and the penalty measures by
  how much that order is violated. Two captions are of the same kind, so between captions the
  symmetric counterpart is used: the cosine of the (unit, non-negative) embeddings. For unit
  rows ``s(a, b) + s(b, a) = −‖a − b‖² = 2·cos(a, b) − 2``, so the cosine ranks exactly as the
  symmetrised order violation. Its exact ranks: :mod:`pseudopairs.similarity.order`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pseudopairs.core.registry import Registry


@dataclass(frozen=True)
class SimilarityFunction:
    name: str
    definition: str
    scores: Callable[[Any, Any], Any]              # torch (n, d) x (m, d) -> (n, m)
    reference: Callable[[np.ndarray, np.ndarray], np.ndarray]  # float64 brute force
    nonnegative: bool = False                     # embeddings are |unit rows|
    between_captions: str | None = None           # None: this function itself
    margin: float | None = None                   # the margin of the function's paper (a hint)
    ranks: str | None = None                      # "module:function" exact rank engine; None: cosine's
    pairs: str | None = None                      # "module:function" exact scores of listed pairs

    @property
    def caption_similarity(self) -> str:
        """The registered function scoring two captions under this one."""
        return self.between_captions or self.name

    def rank_engine(self) -> Callable | None:
        """The exact blocked retrieval-rank engine (imported on use), or None for cosine's:
        ``(images, captions, index, *, device, block_size, progress) -> (i2t counts per image
        row, t2i counts per caption)``."""
        return _load(self.ranks)

    def pair_scores(self) -> Callable | None:
        """Exact float64 scores of listed pairs (imported on use), or None for cosine's:
        ``(images, captions, *, image_rows, caption_rows) -> scores``."""
        return _load(self.pairs)


def _load(target: str | None) -> Callable | None:
    if target is None:
        return None
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


SIMILARITIES: Registry[SimilarityFunction] = Registry("similarity function",
                                                      modules=("pseudopairs.similarity.functions",))


def caption_similarity(name: str) -> str:
    """The similarity between two captions of a model trained with similarity ``name``."""
    return SIMILARITIES.get(name).caption_similarity


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
    scores=_cosine_scores, reference=_cosine_reference, margin=0.2))


def _order_scores(v, c):
    """``s[i, j] = −‖max(0, c_j − v_i)‖²`` (torch; an (n, m, d) intermediate)."""
    return -(c.unsqueeze(0) - v.unsqueeze(1)).clamp(min=0).pow(2).sum(dim=2)


def _order_reference(v: np.ndarray, c: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    return -np.square(np.maximum(c[None, :, :] - v[:, None, :], 0.0)).sum(axis=2)


SIMILARITIES.register("order", SimilarityFunction(
    name="order",
    definition="s(v, c) = −‖max(0, c − v)‖² of image v and caption c on non-negative embeddings "
               "(|x| of the unit row); between two captions: the cosine (paper 001, Vendrov et al. 2016)",
    scores=_order_scores, reference=_order_reference, nonnegative=True, between_captions="cosine",
    margin=0.05, ranks="pseudopairs.similarity.order:order_rank_counts",
    pairs="pseudopairs.similarity.order:order_scores64"))
