"""HEM's pretraining step (paper 002, §3.1): learn the latent vocabulary and the assignment of
words to it by embedding sentences that describe the same image — in any language — near each
other.

A sentence's representation is the mean of its words' latent embeddings
(:meth:`~pseudopairs.smalr.hem.LatentAssigner.embed`: each word's reduced FastText vector →
the fully connected layer → a latent token, with 002's exploration: with some probability one of
the best few tokens instead of the best); the loss is Eq. (1), the cosine triplet loss over every
triplet of the minibatch, the top-K most violated negatives of each positive pair
(:func:`pseudopairs.smalr.triplet.group_triplet_loss`). A minibatch: ``batch_images`` images drawn
without replacement from a seeded walk over the images with at least two sentences, and
``sentences_per_image`` of each image's sentences drawn uniformly (seeded) — the positive pairs.

Everything random comes from one ``torch.Generator`` seeded with the run's ``seed`` (and the assigner's
initialisation from ``torch.manual_seed(seed)`` inside a forked RNG), so a run is a function of
its inputs and settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from pseudopairs.smalr.hem import LatentAssigner
from pseudopairs.smalr.settings import HemSettings
from pseudopairs.smalr.triplet import group_triplet_loss


@dataclass
class PretrainResult:
    assigner: LatentAssigner
    losses: list[float] = field(default_factory=list)


def sentence_representations(assigner: LatentAssigner, features: torch.Tensor,
                             lengths: torch.Tensor, **embed_options) -> torch.Tensor:
    """(B, T, feature_dim) padded word features and (B,) lengths (each ≥ 1) → (B, latent_dim):
    the mean of each sentence's word latent embeddings (002: "we average the latent embeddings
    of each word")."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64, device=features.device)
    if bool((lengths < 1).any()):
        raise ValueError("sentence_representations: every sentence needs at least one word")
    words = assigner.embed(features, **embed_options)                      # (B, T, latent_dim)
    steps = torch.arange(features.shape[1], device=features.device)
    present = steps.unsqueeze(0) < lengths.unsqueeze(1)
    present = present.to(words.dtype).unsqueeze(-1)
    return (words * present).sum(dim=1) / lengths.unsqueeze(1).to(words.dtype)


def _pad(sentences: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in sentences], dtype=torch.int64)
    out = torch.zeros(len(sentences), int(lengths.max()), sentences[0].shape[1])
    for i, sentence in enumerate(sentences):
        out[i, : len(sentence)] = sentence
    return out, lengths


class _ImageWalk:
    """Seeded reshuffled walk over the images that have at least two sentences."""

    def __init__(self, images: Sequence[int], generator: torch.Generator) -> None:
        by_image: dict[int, list[int]] = {}
        for index, image in enumerate(images):
            by_image.setdefault(int(image), []).append(index)
        self.sentences = {k: v for k, v in sorted(by_image.items()) if len(v) >= 2}
        if len(self.sentences) < 2:
            raise ValueError("HEM pretraining needs at least two images with two sentences each "
                             "(a positive pair and a negative)")
        self.keys = list(self.sentences)
        self.generator = generator
        self.order: list[int] = []

    def batch(self, size: int, per_image: int) -> tuple[list[int], list[int]]:
        size = min(size, len(self.keys))
        if len(self.order) < size:
            self.order = [self.keys[i] for i in torch.randperm(len(self.keys),
                                                               generator=self.generator)]
        chosen, self.order = self.order[:size], self.order[size:]
        rows, groups = [], []
        for image in chosen:
            pool = self.sentences[image]
            take = torch.randperm(len(pool), generator=self.generator)[:per_image]
            rows += [pool[int(i)] for i in take]
            groups += [image] * len(take)
        return rows, groups


def pretrain_latent_assignment(sentences: Sequence[torch.Tensor], images: Sequence[int],
                               settings: HemSettings, *, seed: int) -> PretrainResult:
    """Train a :class:`LatentAssigner` on ``sentences`` (each a (words, feature_dim) tensor of
    its words' reduced FastText vectors; a sentence with no word is an error) where
    ``images[i]`` is the image sentence ``i`` describes: the config's ``hem`` section
    (``settings``: latent size, Eq. (1)'s margin and top-K, exploration, Adam's learning rate,
    ``steps`` updates of ``batch_images`` × ``sentences_per_image``, ``mode``), everything random
    from ``seed``. Returns the assigner (to freeze) and the loss of each update."""
    if len(sentences) != len(images):
        raise ValueError(f"{len(sentences)} sentences but {len(images)} image ids")
    if not sentences:
        raise ValueError("HEM pretraining: no sentences")
    sentences = [torch.as_tensor(s, dtype=torch.float32) for s in sentences]
    feature_dim = sentences[0].shape[1]
    for i, s in enumerate(sentences):
        if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] != feature_dim:
            raise ValueError(f"sentence {i}: features {tuple(s.shape)}, expected (≥1, "
                             f"{feature_dim})")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        assigner = LatentAssigner(feature_dim, settings.latent_size)
    generator = torch.Generator().manual_seed(int(seed))
    walk = _ImageWalk(images, generator)
    optimiser = torch.optim.Adam(assigner.parameters(), lr=float(settings.learning_rate))
    result = PretrainResult(assigner=assigner)
    explore = {"mode": settings.mode, "generator": generator}
    if settings.mode == "straight_through":
        explore.update(explore_top=settings.explore_top,
                       explore_probability=settings.explore_probability)
    for _ in range(int(settings.steps)):
        rows, groups = walk.batch(int(settings.batch_images), int(settings.sentences_per_image))
        features, lengths = _pad([sentences[r] for r in rows])
        reps = sentence_representations(assigner, features, lengths, **explore)
        loss = group_triplet_loss(reps, groups, margin=float(settings.margin),
                                  top_k=int(settings.top_k))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        result.losses.append(float(loss.detach()))
    assigner.eval()
    return result
