"""The ranking losses (paper §2; VSE++, Faghri et al.): hinge losses over in-batch negatives of
row-aligned embeddings, the hardest negative ("max violation") or the sum over all negatives,
both directions, summed over the batch."""

from __future__ import annotations

import torch

from pseudopairs.similarity.functions import SIMILARITIES


def contrastive_loss(a: torch.Tensor, b: torch.Tensor, *, margin: float,
                     max_violation: bool = True, similarity: str = "cosine") -> torch.Tensor:
    """VSE++ hinge loss of row-aligned embeddings (row i of ``a`` matches row i of ``b``: images
    and captions, or the captions of two languages); returns the SUM over the batch (a scalar
    tensor). ``similarity`` names a registered similarity function
    (:mod:`pseudopairs.similarity.functions`; ``cosine``: L2-normalised rows, ``s = a @ b.T``).

    With ``s[i, j] = s(a_i, b_j)``: ``cost_b[i, j] = max(0, margin - s[i, i] + s[i, j])`` (a_i against the
    wrong b_j) and ``cost_a[i, j] = max(0, margin - s[i, i] + s[j, i])`` (b_i against the wrong
    a_j), diagonal excluded. ``max_violation``: Σ_i max_j cost_b[i, j] + max_j cost_a[i, j];
    otherwise Σ_ij of both. Only the diagonal is masked, as in VSE++: a duplicate of item i
    elsewhere in the batch counts as a negative.
    """
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"contrastive_loss: a {tuple(a.shape)} and b {tuple(b.shape)} must be "
                         "row-aligned matrices of the same shape")
    scores = SIMILARITIES.get(similarity).scores(a, b)
    positive = scores.diagonal().unsqueeze(1)              # s[i, i] as a column
    cost_b = (margin - positive + scores).clamp(min=0)      # [i, j] = m - s[i,i] + s[i,j]
    cost_a = (margin - positive + scores.t()).clamp(min=0)  # [i, j] = m - s[i,i] + s[j,i]
    off_diagonal = ~torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    cost_b = cost_b * off_diagonal
    cost_a = cost_a * off_diagonal
    if max_violation:
        return cost_b.max(dim=1).values.sum() + cost_a.max(dim=1).values.sum()
    return cost_b.sum() + cost_a.sum()
