"""The Hybrid Embedding Model (paper 002, §3.1): each language keeps its own embedding for its
``specific_per_language`` most frequent words; every other word is mapped by a HARD assignment
to one token of a latent vocabulary shared by all languages, so the table grows with the latent
vocabulary, not with each language's vocabulary.

- :func:`split_vocabulary` — which words of each language are language-specific (most frequent
  first, ties alphabetical);
- :func:`fit_pca` — FastText 300-d → 50-d (a torch SVD; deterministic signs);
- :class:`LatentAssigner` — the fully connected layer from a word's reduced FastText vector to a
  score per latent token (softmax over the latent vocabulary; argmax = the hard assignment) and
  the latent token embeddings; pretrained by :mod:`pseudopairs.smalr.hem_pretrain`;
- :class:`HybridVocabulary` — the token ids (PAD 0, UNK 1, language-specific words, then latent
  words) and the row each id reads (``(lang, word)`` keys: the same form in two languages is two
  words);
- :class:`HybridEmbedding` — ids → rows (a language-specific row, or the row of the word's latent
  token: the assignment is a frozen buffer, the rows are trainable), then 002's fully connected
  layer into the universal embedding (50 → 512 in 002); PAD positions give zero vectors;
- :func:`parameter_count`, :func:`hybrid_parameter_count`, :func:`per_language_parameter_count`.

Departure, written down: 002 feeds language-specific words through the fully connected layer
from their FastText features; here the latent rows live in the same (PCA) space and share that
layer, so both kinds of row are ``feature_dim`` wide (002 does not give the latent rows' width).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

PAD_ID = 0
UNK_ID = 1
PAD = "<pad>"
UNK = "<unk>"


def split_vocabulary(counts: Mapping[str, Mapping[str, int]], *, specific_per_language: int
                     ) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """``counts[lang][word]`` training counts → (language-specific words, the rest), per language:
    the ``specific_per_language`` most frequent words (ties broken alphabetically) keep their own
    row; the rest, alphabetical, go to the latent vocabulary. ``0`` gives 002's
    Language-Agnostic model (every word latent)."""
    if int(specific_per_language) < 0:
        raise ValueError(f"specific_per_language must be ≥ 0, got {specific_per_language}")
    specific: dict[str, tuple[str, ...]] = {}
    rest: dict[str, tuple[str, ...]] = {}
    for lang in sorted(counts):
        words = counts[lang]
        for word, count in words.items():
            if not isinstance(word, str) or not word or word in (PAD, UNK):
                raise ValueError(f"{lang}: {word!r} cannot be a vocabulary word")
            if int(count) < 1:
                raise ValueError(f"{lang}: word {word!r} has count {count}; counts must be ≥ 1")
        ranked = sorted(words, key=lambda w: (-int(words[w]), w))
        specific[lang] = tuple(ranked[:specific_per_language])
        rest[lang] = tuple(sorted(ranked[specific_per_language:]))
    return specific, rest


@dataclass(frozen=True)
class PCA:
    """``transform(x) = (x − mean) @ components.T``; ``components`` (dim, in_dim), orthonormal
    rows, most variance first, each row's largest-magnitude entry positive (a fixed sign, so a
    refit on the same data gives the same map)."""
    mean: torch.Tensor
    components: torch.Tensor
    explained_variance: torch.Tensor

    def transform(self, x, *, whiten: bool = False) -> torch.Tensor:
        """``whiten``: each component divided by its standard deviation (unit variance on the
        fitted rows; a component of zero variance is left as it is)."""
        x = torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x, dtype=torch.float64)
        out = (x - self.mean) @ self.components.t()
        if whiten:
            scale = self.explained_variance.sqrt()
            out = out / torch.where(scale > 0, scale, torch.ones_like(scale))
        return out.to(torch.float32)


def fit_pca(vectors, dim: int) -> PCA:
    """PCA of the rows of ``vectors`` (N, in_dim) to ``dim`` components (float64 SVD of the
    centred rows). ``dim`` cannot exceed min(N, in_dim)."""
    x = torch.as_tensor(np.asarray(vectors) if not torch.is_tensor(vectors) else vectors,
                        dtype=torch.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"fit_pca: need a non-empty (N, D) matrix, got {tuple(x.shape)}")
    if not 1 <= int(dim) <= min(x.shape):
        raise ValueError(f"fit_pca: {dim} components from {x.shape[0]} vectors of dimension "
                         f"{x.shape[1]}; at most {min(x.shape)}")
    mean = x.mean(dim=0)
    _, singular, vh = torch.linalg.svd(x - mean, full_matrices=False)
    components = vh[:dim].clone()
    flip = components.gather(1, components.abs().argmax(dim=1, keepdim=True)).sign()
    components *= torch.where(flip == 0, torch.ones_like(flip), flip)
    variance = singular[:dim] ** 2 / max(x.shape[0] - 1, 1)
    return PCA(mean=mean, components=components, explained_variance=variance)


class LatentAssigner(nn.Module):
    """002's assignment model: ``scorer`` — one fully connected layer from a word's reduced
    FastText vector (``feature_dim``) to a score per latent token; ``latent`` — the latent token
    embeddings (``latent_size`` × ``latent_dim``, learned in the same pretraining)."""

    def __init__(self, feature_dim: int, latent_size: int, latent_dim: int | None = None) -> None:
        super().__init__()
        if int(feature_dim) < 1 or int(latent_size) < 1:
            raise ValueError(f"LatentAssigner: feature_dim and latent_size must be ≥ 1, got "
                             f"{feature_dim}, {latent_size}")
        self.feature_dim = int(feature_dim)
        self.latent_size = int(latent_size)
        self.latent_dim = int(latent_dim or feature_dim)
        self.scorer = nn.Linear(self.feature_dim, self.latent_size)
        self.latent = nn.Parameter(torch.empty(self.latent_size, self.latent_dim))
        nn.init.normal_(self.latent, std=self.latent_dim ** -0.5)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """(..., feature_dim) → (..., latent_size) scores (their softmax: the soft assignment)."""
        return self.scorer(features)

    @torch.no_grad()
    def assign(self, features: torch.Tensor) -> torch.Tensor:
        """The hard assignment: argmax of the scores (a tie goes to the lowest latent index)."""
        return self.logits(features).argmax(dim=-1)

    def choose(self, logits: torch.Tensor, *, explore_top: int = 1,
               explore_probability: float = 0.0,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """The token each word uses in a pretraining step: the argmax, except that with
        probability ``explore_probability`` (independently per word) one of the ``explore_top``
        best-scoring tokens drawn uniformly (002's exploration parameters)."""
        best = logits.argmax(dim=-1)
        top = min(int(explore_top), logits.shape[-1])
        if top <= 1 or explore_probability <= 0:
            return best
        flat = logits.detach().reshape(-1, logits.shape[-1])
        explore = torch.rand(flat.shape[0], generator=generator) < float(explore_probability)
        pick = torch.randint(top, (flat.shape[0],), generator=generator)
        candidates = flat.topk(top, dim=-1).indices
        drawn = candidates.gather(1, pick.to(candidates.device).unsqueeze(1)).squeeze(1)
        chosen = torch.where(explore.to(flat.device), drawn, best.reshape(-1))
        return chosen.reshape(best.shape)

    def embed(self, features: torch.Tensor, *, mode: str = "straight_through",
              explore_top: int = 1, explore_probability: float = 0.0,
              generator: torch.Generator | None = None) -> torch.Tensor:
        """(..., feature_dim) word features → (..., latent_dim) latent embeddings for pretraining.

        ``straight_through``: the forward pass uses the chosen token's row (hard, with
        exploration); the gradient reaches the scorer through the softmax, as if the softmax
        weights had been used (p + stop_gradient(onehot − p)). ``soft``: the softmax-weighted
        mixture of all rows (no exploration). 002 says the assignment is hard and predicted by
        the layer but not how the layer gets its gradient; see docs/smalr.md."""
        logits = self.logits(features)
        probabilities = logits.softmax(dim=-1)
        if mode == "soft":
            return probabilities @ self.latent
        if mode != "straight_through":
            raise ValueError(f"embed: mode must be 'straight_through' or 'soft', got {mode!r}")
        chosen = self.choose(logits, explore_top=explore_top,
                             explore_probability=explore_probability, generator=generator)
        onehot = torch.nn.functional.one_hot(chosen, self.latent_size).to(probabilities.dtype)
        weights = probabilities + (onehot - probabilities).detach()
        return weights @ self.latent


@dataclass(frozen=True)
class HybridVocabulary:
    """Ids: PAD 0, UNK 1, then each language's specific words (languages sorted, most frequent
    first), then each language's latent words (alphabetical). ``latent[lang][word]`` is the
    word's latent token, ``0 ≤ token < latent_size``."""
    specific: Mapping[str, tuple[str, ...]]
    latent: Mapping[str, Mapping[str, int]]
    latent_size: int

    def __post_init__(self) -> None:
        keys = [(lang, w) for lang in sorted(self.specific) for w in self.specific[lang]]
        self_n = len(keys)
        keys += [(lang, w) for lang in sorted(self.latent) for w in sorted(self.latent[lang])]
        if len(set(keys)) != len(keys):
            raise ValueError("HybridVocabulary: a (language, word) is listed twice")
        for lang, words in self.latent.items():
            for word, token in words.items():
                if not 0 <= int(token) < self.latent_size:
                    raise ValueError(f"HybridVocabulary: {lang} {word!r} → latent token {token} "
                                     f"outside 0..{self.latent_size - 1}")
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_n_specific", self_n)
        object.__setattr__(self, "_index", {k: i + 2 for i, k in enumerate(keys)})

    @property
    def n_specific(self) -> int:
        return self._n_specific  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return 2 + len(self._keys)  # type: ignore[attr-defined]

    def id_of(self, lang: str, word: str) -> int:
        return self._index.get((lang, word), UNK_ID)  # type: ignore[attr-defined]

    def encode(self, lang: str, text: str) -> list[int]:
        """Ids of a prepared (space-joined) sentence of ``lang``; unknown words → UNK."""
        return [self.id_of(lang, token) for token in text.split()]

    def rows(self) -> torch.Tensor:
        """(len(self),) the table row of each id: PAD 0, UNK 1, the i-th specific word 2 + i,
        a latent word 2 + n_specific + its latent token."""
        latent_rows = [2 + self.n_specific + int(self.latent[lang][w])
                       for lang, w in self._keys[self.n_specific:]]  # type: ignore[attr-defined]
        return torch.tensor([PAD_ID, UNK_ID, *range(2, 2 + self.n_specific), *latent_rows],
                            dtype=torch.int64)

    def to_json(self) -> dict:
        return {"latent_size": self.latent_size,
                "specific": {lang: list(words) for lang, words in sorted(self.specific.items())},
                "latent": {lang: dict(sorted(words.items()))
                           for lang, words in sorted(self.latent.items())}}

    @classmethod
    def from_json(cls, data: dict) -> "HybridVocabulary":
        return cls(specific={k: tuple(v) for k, v in data["specific"].items()},
                   latent={k: {w: int(t) for w, t in v.items()} for k, v in data["latent"].items()},
                   latent_size=int(data["latent_size"]))


def assign_vocabulary(specific: Mapping[str, Sequence[str]],
                      rest_features: Mapping[str, tuple[Sequence[str], torch.Tensor]],
                      assigner: LatentAssigner, *, drop_unused: bool = True
                      ) -> tuple[HybridVocabulary, torch.Tensor]:
    """Hard-assign every non-specific word (``rest_features[lang] = (words, (n, feature_dim)
    reduced FastText rows)``) with ``assigner``. With ``drop_unused`` the latent tokens no word
    uses are dropped and the rest renumbered in order (002: "not all latent tokens are being
    used at the end of pretraining, which are dropped"). Returns the vocabulary and the indices
    of the kept latent tokens into ``assigner.latent`` (their rows, in the new order)."""
    assigned: dict[str, dict[str, int]] = {}
    for lang in sorted(rest_features):
        words, features = rest_features[lang]
        if len(words) != len(features):
            raise ValueError(f"{lang}: {len(words)} words but {len(features)} feature rows")
        tokens = assigner.assign(torch.as_tensor(features, dtype=torch.float32)).tolist() \
            if len(words) else []
        assigned[lang] = dict(zip(words, (int(t) for t in tokens)))
    kept = torch.arange(assigner.latent_size)
    if drop_unused:
        used = sorted({t for words in assigned.values() for t in words.values()})
        kept = torch.tensor(used, dtype=torch.int64)
        new = {old: i for i, old in enumerate(used)}
        assigned = {lang: {w: new[t] for w, t in words.items()} for lang, words in assigned.items()}
    vocab = HybridVocabulary(specific={k: tuple(v) for k, v in specific.items()}, latent=assigned,
                             latent_size=int(len(kept)))
    return vocab, kept


class HybridEmbedding(nn.Module):
    """Token ids → universal embedding. ``weight`` rows: PAD, UNK, the language-specific words,
    the latent tokens (all trainable); ``row_of_id`` (a buffer: the frozen assignment) picks the
    row of each id; ``projection`` is 002's fully connected layer (``None``: no layer, the rows
    are the output). PAD positions output zeros."""

    def __init__(self, row_of_id: torch.Tensor, weight: torch.Tensor, *,
                 output_dim: int | None = None) -> None:
        super().__init__()
        row_of_id = torch.as_tensor(row_of_id, dtype=torch.int64)
        weight = torch.as_tensor(weight, dtype=torch.float32)
        if row_of_id.ndim != 1 or weight.ndim != 2:
            raise ValueError("HybridEmbedding: row_of_id must be (V,), weight (R, D)")
        if len(row_of_id) and (int(row_of_id.min()) < 0 or int(row_of_id.max()) >= len(weight)):
            raise ValueError(f"HybridEmbedding: row_of_id points outside the {len(weight)} rows")
        self.register_buffer("row_of_id", row_of_id)
        self.weight = nn.Parameter(weight.clone())
        self.projection = None if output_dim is None else nn.Linear(weight.shape[1],
                                                                    int(output_dim))

    @classmethod
    def build(cls, vocab: HybridVocabulary, specific_features: Mapping[str, torch.Tensor],
              latent_rows: torch.Tensor, *, output_dim: int | None = None) -> "HybridEmbedding":
        """Rows initialised from the specific words' reduced FastText rows (in the vocabulary's
        order, ``specific_features[lang]`` aligned with ``vocab.specific[lang]``) and the
        pretrained latent rows (``latent_rows``: one per latent token of ``vocab``); PAD and UNK
        rows zero."""
        latent_rows = torch.as_tensor(latent_rows, dtype=torch.float32)
        if latent_rows.shape[0] != vocab.latent_size:
            raise ValueError(f"HybridEmbedding.build: {latent_rows.shape[0]} latent rows for a "
                             f"latent vocabulary of {vocab.latent_size}")
        parts = [torch.zeros(2, latent_rows.shape[1])]
        for lang in sorted(vocab.specific):
            rows = torch.as_tensor(specific_features[lang], dtype=torch.float32)
            if rows.shape != (len(vocab.specific[lang]), latent_rows.shape[1]):
                raise ValueError(f"HybridEmbedding.build: {lang}: specific rows "
                                 f"{tuple(rows.shape)}, expected "
                                 f"({len(vocab.specific[lang])}, {latent_rows.shape[1]})")
            parts.append(rows)
        parts.append(latent_rows)
        return cls(vocab.rows(), torch.cat(parts), output_dim=output_dim)

    @property
    def output_dim(self) -> int:
        return self.weight.shape[1] if self.projection is None else self.projection.out_features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = torch.as_tensor(ids, dtype=torch.int64, device=self.weight.device)
        out = self.weight[self.row_of_id[ids]]
        if self.projection is not None:
            out = self.projection(out)
        return out * (ids != PAD_ID).unsqueeze(-1).to(out.dtype)


def parameter_count(module: nn.Module, *, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters of ``module``; buffers (the frozen assignment) are not
    parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def hybrid_parameter_count(n_specific: int, latent_size: int, feature_dim: int,
                           output_dim: int | None = None) -> int:
    """:class:`HybridEmbedding`'s parameters without building it: (2 + specific + latent) rows
    of ``feature_dim``, plus the projection's weight and bias."""
    rows = (2 + int(n_specific) + int(latent_size)) * int(feature_dim)
    if output_dim is None:
        return rows
    return rows + int(feature_dim) * int(output_dim) + int(output_dim)


def pretraining_parameter_count(*, latent_size: int, feature_dim: int, latent_dim: int,
                                kept: int) -> int:
    """Parameters HEM's pretraining trains that the model does not carry on (002 §3.1: "we
    perform a pretraining step where we learn both the initial representation of the latent
    vocabulary as well as how to assign the infrequent words"): the assignment layer
    (:class:`LatentAssigner`'s ``scorer``, ``latent_size × feature_dim + latent_size``; 2.04M at
    002's 40K × 50) and the latent rows dropped as unused (``(latent_size − kept) × latent_dim``).
    The ``kept`` latent rows become the model's rows and are counted there."""
    if not 0 <= int(kept) <= int(latent_size):
        raise ValueError(f"pretraining_parameter_count: kept must be in 0..{latent_size}, got {kept}")
    scorer = int(latent_size) * int(feature_dim) + int(latent_size)
    return scorer + (int(latent_size) - int(kept)) * int(latent_dim)


def per_language_parameter_count(vocabulary_sizes: Mapping[str, int], feature_dim: int,
                                 output_dim: int | None = None) -> int:
    """The same count when every word of every language keeps its own row (MULE; HEM with every
    word specific): the parameters HEM saves, for 002's Figure 3."""
    return hybrid_parameter_count(sum(int(n) for n in vocabulary_sizes.values()), 0, feature_dim,
                                  output_dim)
