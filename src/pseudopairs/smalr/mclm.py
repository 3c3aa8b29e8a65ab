"""Masked Cross-Language Modelling (paper 002, §3.2 and supplementary §7.4).

Two sentences that describe the same image in two languages are masked (``fraction`` of their
words, 002: 20%); the representations of the two MASKED sentences are concatenated and one fully
connected layer, shared by every language pair (:class:`MCLMHead`), predicts the representations
of BOTH UNMASKED sentences; the loss compares prediction and target as unit vectors (002's
Eq. (2), whose printed form our copy lost; written out here as
``‖n(p_a) − n(s_a)‖² + ‖n(p_b) − n(s_b)‖²`` = ``(2 − 2 cos(p_a, s_a)) + (2 − 2 cos(p_b, s_b))``,
mean over the batch, ``n`` the L2 normalisation). :func:`mclm_all_pairs` sums it over every
unique pair of languages (002: "for all unique pairs of languages").

§7.4: the loss uses two representations of a masked sentence — the *average* one (the masked
words removed, the remaining word embeddings averaged: :attr:`MaskedBatch.kept_ids` and
:func:`average_representation`) and the *sentence-level* one (masked words replaced by a MASK
token, the sentence through the recurrent encoder: :attr:`MaskedBatch.masked_ids`). The masking
is the caller's ids; the loss takes whatever encoder outputs it is given.

Masking (:func:`mask_tokens`): a sentence of ``n`` words gets ``min(n − 1, max(1,
round(fraction · n)))`` masked positions (none for ``fraction`` 0), drawn uniformly without
replacement from a seeded ``torch.Generator`` (one-word sentences are left unmasked, so the
average representation always has a word); ``targets`` holds the original id at masked positions
and ``IGNORE_INDEX`` elsewhere.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskedBatch:
    masked_ids: torch.Tensor    # (B, T): masked positions hold mask_id
    targets: torch.Tensor       # (B, T): original id at masked positions, IGNORE_INDEX elsewhere
    kept_ids: torch.Tensor      # (B, T): the unmasked words moved left, padding after
    kept_lengths: torch.Tensor  # (B,)

    @property
    def mask(self) -> torch.Tensor:
        return self.targets != IGNORE_INDEX


def masked_count(length: int, fraction: float) -> int:
    """How many of a sentence's ``length`` words are masked (see the module docstring)."""
    if length < 2 or fraction <= 0:
        return 0
    return min(length - 1, max(1, math.floor(fraction * length + 0.5)))


def mask_tokens(ids: torch.Tensor, lengths, *, fraction: float, mask_id: int, pad_id: int = 0,
                generator: torch.Generator | None = None) -> MaskedBatch:
    """Mask (B, T) padded token ids with real ``lengths``; see the module docstring."""
    ids = torch.as_tensor(ids, dtype=torch.int64)
    lengths = torch.as_tensor(lengths, dtype=torch.int64)
    if ids.ndim != 2 or lengths.shape != (ids.shape[0],):
        raise ValueError(f"mask_tokens: ids {tuple(ids.shape)} and lengths "
                         f"{tuple(lengths.shape)} do not match")
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"mask_tokens: fraction must be in [0, 1), got {fraction}")
    if bool((lengths < 1).any()) or bool((lengths > ids.shape[1]).any()):
        raise ValueError("mask_tokens: every length must be between 1 and the padded width")
    masked = ids.clone()
    targets = torch.full_like(ids, IGNORE_INDEX)
    kept = torch.full_like(ids, pad_id)
    kept_lengths = torch.empty_like(lengths)
    for row, length in enumerate(lengths.tolist()):
        count = masked_count(length, float(fraction))
        positions = torch.randperm(length, generator=generator)[:count]
        masked[row, positions] = mask_id
        targets[row, positions] = ids[row, positions]
        keep = torch.ones(length, dtype=torch.bool)
        keep[positions] = False
        kept_lengths[row] = int(keep.sum())
        kept[row, : kept_lengths[row]] = ids[row, :length][keep]
    return MaskedBatch(masked_ids=masked, targets=targets, kept_ids=kept,
                       kept_lengths=kept_lengths)


def average_representation(embeddings: torch.Tensor, lengths) -> torch.Tensor:
    """(B, T, D) word embeddings and (B,) real lengths (≥ 1) → (B, D) the mean of the real
    words (§7.4's average representation; with :attr:`MaskedBatch.kept_ids` the masked words are
    left out, so it is the mean over the shorter sentence)."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64, device=embeddings.device)
    if bool((lengths < 1).any()):
        raise ValueError("average_representation: every sentence needs at least one word")
    present = torch.arange(embeddings.shape[1], device=embeddings.device) < lengths.unsqueeze(1)
    total = (embeddings * present.unsqueeze(-1).to(embeddings.dtype)).sum(dim=1)
    return total / lengths.unsqueeze(1).to(embeddings.dtype)


class MCLMHead(nn.Module):
    """The fully connected layer shared by all language pairs: ``[ŝ_a; ŝ_b]`` (2·dim) →
    predictions of ``[s_a; s_b]`` (2·dim)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        if int(dim) < 1:
            raise ValueError(f"MCLMHead: dim must be ≥ 1, got {dim}")
        self.dim = int(dim)
        self.layer = nn.Linear(2 * self.dim, 2 * self.dim)

    def forward(self, masked_a: torch.Tensor, masked_b: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.layer(torch.cat([masked_a, masked_b], dim=-1))
        return out[..., : self.dim], out[..., self.dim:]


def mclm_loss(head: MCLMHead, unmasked_a: torch.Tensor, unmasked_b: torch.Tensor,
              masked_a: torch.Tensor, masked_b: torch.Tensor, *,
              detach_targets: bool = False) -> torch.Tensor:
    """Eq. (2) for one language pair, row-aligned (row i of each: the same image): the mean over
    rows of ``‖n(p_a) − n(s_a)‖² + ‖n(p_b) − n(s_b)‖²``. ``detach_targets``: no gradient through
    the unmasked representations (002 does not say; default: they get one)."""
    shapes = {tuple(t.shape) for t in (unmasked_a, unmasked_b, masked_a, masked_b)}
    if len(shapes) != 1 or unmasked_a.ndim != 2 or unmasked_a.shape[1] != head.dim:
        raise ValueError(f"mclm_loss: need four (B, {head.dim}) row-aligned representations, got "
                         f"{sorted(shapes)}")
    predicted_a, predicted_b = head(masked_a, masked_b)
    if detach_targets:
        unmasked_a, unmasked_b = unmasked_a.detach(), unmasked_b.detach()
    loss_a = (F.normalize(predicted_a, dim=1) - F.normalize(unmasked_a, dim=1)).pow(2).sum(dim=1)
    loss_b = (F.normalize(predicted_b, dim=1) - F.normalize(unmasked_b, dim=1)).pow(2).sum(dim=1)
    return (loss_a + loss_b).mean()


def mclm_all_pairs(head: MCLMHead, unmasked: Mapping[str, torch.Tensor],
                   masked: Mapping[str, torch.Tensor], *,
                   detach_targets: bool = False) -> torch.Tensor:
    """:func:`mclm_loss` summed over every unique pair of languages (sorted, each pair once, the
    alphabetically first language as ``a``); ``unmasked[lang]`` and ``masked[lang]`` are
    (B, dim), row i of every language describing the same image."""
    if set(unmasked) != set(masked):
        raise ValueError(f"mclm_all_pairs: languages differ: {sorted(unmasked)} vs "
                         f"{sorted(masked)}")
    if len(unmasked) < 2:
        raise ValueError("mclm_all_pairs: needs at least two languages")
    terms = [mclm_loss(head, unmasked[a], unmasked[b], masked[a], masked[b],
                       detach_targets=detach_targets)
             for a, b in itertools.combinations(sorted(unmasked), 2)]
    return torch.stack(terms).sum()
