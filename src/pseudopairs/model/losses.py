"""The ranking losses (paper §2; VSE++, Faghri et al.): hinge losses over in-batch negatives of
row-aligned embeddings, the hardest negative ("max violation") or the sum over all negatives,
both directions, summed over the batch, with a registered similarity
(:mod:`pseudopairs.similarity.functions`); and the multi-source sum of them
(:func:`joint_loss`, paper 003) of the ``joint`` objective."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from pseudopairs.similarity.functions import SIMILARITIES


def contrastive_loss(a: torch.Tensor, b: torch.Tensor, *, margin: float,
                     max_violation: bool = True, similarity: str = "cosine") -> torch.Tensor:
    """VSE++ hinge loss of row-aligned embeddings (row i of ``a`` matches row i of ``b``: images
    and captions, or the captions of two languages); returns the SUM over the batch (a scalar
    tensor). ``similarity`` names a registered similarity function
    (:mod:`pseudopairs.similarity.functions`; ``cosine``: L2-normalised rows, ``s = a @ b.T``;
    ``order``: ``s[i, j] = −‖max(0, b_j − a_i)‖²``, so for image–caption pairs ``a`` are the
    images — the ``v`` of the order — and ``b`` the captions).

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


def joint_loss(sources: Mapping[str, tuple[torch.Tensor, np.ndarray]],
               pairs: Sequence[tuple[str, str, str]], *, margin: float, max_violation: bool = True,
               sizes: list | None = None) -> torch.Tensor:
    """The multi-source ranking loss (paper 003, Calixto & Liu: Eq. 1–3 with equal weights): the
    :func:`contrastive_loss` of every listed pair of sources, summed.

    ``sources[name] = (embeddings, rows)``: the embeddings of the batch items that HAVE that source
    (an image's caption in one language), ``rows`` their ascending positions in the batch.
    ``pairs``: ``(a, b, similarity)`` — ``a`` the image side of an image–caption pair (``v`` of an
    asymmetric similarity). A pair is scored on the items that have both sources, row-aligned;
    pairs with fewer than two such items (no negative) are skipped. ``sizes``, if given, gets the
    number of items of each pair scored. Returns a scalar tensor (0 when nothing was scored).
    """
    total = None
    for a, b, similarity in pairs:
        emb_a, rows_a = sources[a]
        emb_b, rows_b = sources[b]
        _, at_a, at_b = np.intersect1d(np.asarray(rows_a), np.asarray(rows_b), assume_unique=True,
                                       return_indices=True)
        if at_a.size < 2:
            continue
        term = contrastive_loss(emb_a[torch.as_tensor(at_a, device=emb_a.device)],
                                emb_b[torch.as_tensor(at_b, device=emb_b.device)],
                                margin=margin, max_violation=max_violation, similarity=similarity)
        total = term if total is None else total + term
        if sizes is not None:
            sizes.append(int(at_a.size))
    if total is None:
        first = next(iter(sources.values()))[0]
        return first.new_zeros(())
    return total


def plateau_loss(*, batch_size: int, margin: float, max_violation: bool) -> float:
    """The loss of one batch when every embedding is the same (every hinge equals the margin):
    what training sits at while it has not left the collapsed start."""
    negatives = 1 if max_violation else batch_size - 1
    return 2.0 * batch_size * negatives * margin
