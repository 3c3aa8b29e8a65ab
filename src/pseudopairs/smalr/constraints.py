"""MULE's alignment constraints as SMALR uses them (paper 002, §3.3; Kim et al. 2020):

- **neighbourhood constraints** (:func:`neighbourhood_loss`): Eq. (1)'s triplet loss among
  sentences — sentences of the same image (any language) are positives, of other images
  negatives; applied to the universal embedding (HEM's output, averaged per sentence) and to the
  final sentence representation;
- **adversarial language classifier** (:class:`LanguageClassifier`): predicts the language of a
  universal-embedding vector behind a gradient reversal (:func:`gradient_reversal`: identity
  forward, ``−scale ×`` the gradient backward), so one optimiser step trains the classifier to
  tell the languages apart and the embedding to make them indistinguishable;
- **the image–sentence loss** (:func:`image_sentence_loss`, Eq. (3)): the bidirectional triplet
  loss in the joint space, the second direction weighted by 002's 1.5.

Eq. (4)'s weights for summing these are in :data:`pseudopairs.smalr.paper.TOTAL_LOSS_WEIGHTS`.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pseudopairs.smalr.paper import IMAGE_SENTENCE_SECOND_DIRECTION
from pseudopairs.smalr.triplet import (bidirectional_triplet_loss, cosine_similarities,
                                       group_triplet_loss)


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return -ctx.scale * grad, None


def gradient_reversal(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Identity forward; the gradient flowing back through it is multiplied by ``−scale``."""
    if float(scale) < 0:
        raise ValueError(f"gradient_reversal: scale must be ≥ 0, got {scale}")
    return _Reverse.apply(x, float(scale))


class GradientReversal(nn.Module):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gradient_reversal(x, self.scale)


class LanguageClassifier(nn.Module):
    """Gradient reversal → (``hidden`` units, ReLU →) a score per language. MULE's classifier
    width is a setting here (``hidden=None``: one linear layer)."""

    def __init__(self, input_dim: int, languages: Sequence[str], *, hidden: int | None = None,
                 reversal_scale: float = 1.0) -> None:
        super().__init__()
        self.languages = tuple(languages)
        if len(set(self.languages)) != len(self.languages) or len(self.languages) < 2:
            raise ValueError(f"LanguageClassifier: needs two or more distinct languages, got "
                             f"{list(self.languages)}")
        self.reversal = GradientReversal(reversal_scale)
        if hidden is None:
            self.layers = nn.Linear(int(input_dim), len(self.languages))
        else:
            self.layers = nn.Sequential(nn.Linear(int(input_dim), int(hidden)), nn.ReLU(),
                                        nn.Linear(int(hidden), len(self.languages)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(self.reversal(x))

    def loss(self, x: torch.Tensor, langs: Sequence[str]) -> torch.Tensor:
        """Mean cross-entropy of the language of each row of ``x`` (names from ``languages``)."""
        if len(langs) != x.shape[0]:
            raise ValueError(f"LanguageClassifier.loss: {len(langs)} languages for "
                             f"{x.shape[0]} rows")
        unknown = sorted(set(langs) - set(self.languages))
        if unknown:
            raise ValueError(f"LanguageClassifier.loss: unknown languages {unknown}")
        target = torch.tensor([self.languages.index(lang) for lang in langs], device=x.device)
        return F.cross_entropy(self(x), target)


def neighbourhood_loss(representations: torch.Tensor, images, *, margin: float,
                       top_k: int) -> torch.Tensor:
    """The neighbourhood constraints: Eq. (1) among sentences grouped by their image."""
    return group_triplet_loss(representations, images, margin=margin, top_k=top_k)


def image_sentence_loss(images: torch.Tensor, sentences: torch.Tensor, positive: torch.Tensor,
                        *, margin: float, top_k: int,
                        second_weight: float = IMAGE_SENTENCE_SECOND_DIRECTION) -> torch.Tensor:
    """Eq. (3) on embeddings: ``images`` (I, D), ``sentences`` (S, D), ``positive`` (I, S) the
    matching pairs; cosine similarity, images as anchors + ``second_weight`` × sentences as
    anchors. 002 also applies it to the masked sentences of MCLM: pass those as more columns."""
    return bidirectional_triplet_loss(cosine_similarities(images, sentences), positive,
                                      margin=margin, top_k=top_k, second_weight=second_weight)
