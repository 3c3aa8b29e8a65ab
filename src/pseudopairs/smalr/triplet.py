"""Paper 002's triplet loss (§3.1 Eq. 1, after Wang et al.'s Embedding Network and MULE): for a
triplet (anchor ``a``, positive ``p``, negative ``n``), ``max(0, m + d(a, p) − d(a, n))`` with
the cosine distance ``d = 1 − cos``; a minibatch enumerates every triplet and keeps, for each
(anchor, positive) pair, its ``top_k`` most violated negatives.

With ``d = 1 − s`` (``s`` a similarity), ``m + d(a, p) − d(a, n) = m − s(a, p) + s(a, n)``, so the
functions here work on similarity (or score) matrices: cosine similarities of embeddings for
Eq. (1) and the neighbourhood constraints, the CLC-C module's aggregated scores for Eq. (3).

The reduction, written out (002 names the top-K selection, not the reduction): for each pair
(a, p) with at least one negative, the mean of its ``min(top_k, #negatives)`` largest hinge
values; the loss is the mean over those pairs (0, differentiable, when there is none). The
``top_k`` most violated negatives of a pair are the anchor's ``top_k`` most similar negatives:
the hinge is increasing in ``s(a, n)``, so the choice does not depend on the positive.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_similarities(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(A, D), (C, D) → (A, C) cosine similarities (rows L2-normalised; a zero row scores 0)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"cosine_similarities: need (A, D) and (C, D), got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    return F.normalize(a, dim=1) @ F.normalize(b, dim=1).t()


def top_negatives(scores: torch.Tensor, negative: torch.Tensor, top_k: int) -> torch.Tensor:
    """(A, C) scores and a boolean (A, C) mask of allowed negatives → (A, min(top_k, C)) the
    ``top_k`` largest negative scores of each row, descending, ``-inf`` where a row has fewer
    negatives."""
    if int(top_k) < 1:
        raise ValueError(f"top_k must be ≥ 1, got {top_k}")
    if scores.shape != negative.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and negative mask "
                         f"{tuple(negative.shape)} differ in shape")
    masked = scores.masked_fill(~negative.bool(), float("-inf"))
    k = min(int(top_k), scores.shape[1])
    return masked.topk(k, dim=1).values


def hinge_over_selected(positive_scores: torch.Tensor, anchors: torch.Tensor,
                        negatives: torch.Tensor, *, margin: float) -> torch.Tensor:
    """The reduction of the module docstring on already selected scores: ``positive_scores``
    (P,) the score of each (anchor, positive) pair, ``anchors`` (P,) its anchor's row in
    ``negatives`` (A, k) — the anchor's selected negative scores, ``-inf`` for none."""
    if positive_scores.ndim != 1 or anchors.shape != positive_scores.shape:
        raise ValueError("hinge_over_selected: positive_scores and anchors must be (P,) vectors")
    chosen = negatives[anchors]                                          # (P, k)
    present = torch.isfinite(chosen)
    cost = (margin - positive_scores.unsqueeze(1) + chosen.masked_fill(~present, 0.0)).clamp(min=0)
    cost = cost * present
    counts = present.sum(dim=1)
    has = counts > 0
    if not bool(has.any()):
        return cost.sum() * 0.0          # no triplet: zero, still part of the graph
    per_pair = cost[has].sum(dim=1) / counts[has]
    return per_pair.mean()


def triplet_loss_from_scores(scores: torch.Tensor, positive: torch.Tensor,
                             negative: torch.Tensor | None = None, *, margin: float,
                             top_k: int) -> torch.Tensor:
    """Eq. (1) over a score matrix: rows are anchors, columns candidates; ``positive`` (A, C)
    marks each anchor's positives, ``negative`` its negatives (default: every non-positive)."""
    positive = positive.bool()
    if positive.shape != scores.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and positive mask "
                         f"{tuple(positive.shape)} differ in shape")
    negative = ~positive if negative is None else negative.bool()
    if bool((positive & negative).any()):
        raise ValueError("a candidate cannot be both a positive and a negative of one anchor")
    selected = top_negatives(scores, negative, top_k)
    anchors, columns = positive.nonzero(as_tuple=True)
    return hinge_over_selected(scores[anchors, columns], anchors, selected, margin=margin)


def group_triplet_loss(embeddings: torch.Tensor, groups, *, margin: float,
                       top_k: int) -> torch.Tensor:
    """Eq. (1) within one set of sentences (002 §3.1's pretraining, §3.3's neighbourhood
    constraints): ``groups`` (N,) — the image each sentence describes (any language); another
    sentence of the same group is a positive, every sentence of another group a negative (the
    anchor itself is neither). Cosine similarity."""
    groups = torch.as_tensor(groups, device=embeddings.device)
    if groups.shape != (embeddings.shape[0],):
        raise ValueError(f"groups {tuple(groups.shape)} must give one group per embedding row "
                         f"({embeddings.shape[0]})")
    same = groups.unsqueeze(0) == groups.unsqueeze(1)
    eye = torch.eye(len(groups), dtype=torch.bool, device=embeddings.device)
    scores = cosine_similarities(embeddings, embeddings)
    return triplet_loss_from_scores(scores, same & ~eye, ~same, margin=margin, top_k=top_k)


def bidirectional_triplet_loss(scores: torch.Tensor, positive: torch.Tensor, *, margin: float,
                               top_k: int, second_weight: float) -> torch.Tensor:
    """Eq. (3) (§3.3): ``scores`` (I, S), images × sentences, ``positive`` (I, S) the matching
    pairs; images as anchors plus ``second_weight`` (002: 1.5) × sentences as anchors."""
    positive = positive.bool()
    first = triplet_loss_from_scores(scores, positive, margin=margin, top_k=top_k)
    second = triplet_loss_from_scores(scores.t(), positive.t(), margin=margin, top_k=top_k)
    return first + second_weight * second
