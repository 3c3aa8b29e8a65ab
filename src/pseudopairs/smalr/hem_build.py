"""HEM end to end (paper 002, §3.1), from a run's training sentences and each language's FastText
vectors to a frozen-assignment :class:`~pseudopairs.smalr.hem.HybridEmbedding`:

1. count each language's words in the training sentences;
2. per language, fit PCA (FastText dim → ``pca_dim``, 002: 300 → 50) on the vectors of the words
   the training text uses, and reduce them (monolingual spaces are reduced separately);
3. split each language's vocabulary: the ``specific_per_language`` most frequent words keep a
   row, the rest go to the latent vocabulary;
4. pretrain the assignment and the latent rows on the training sentences grouped by image
   (:mod:`pseudopairs.smalr.hem_pretrain`; every word of a sentence is mapped to a latent token,
   as in 002's pretraining);
5. hard-assign the non-specific words, drop unused latent tokens, and build the embedding with
   the specific words' reduced vectors and the pretrained latent rows as its initial rows.

A word without a vector (possible with published vectors) is left out of the vocabulary — it
encodes as UNK — and listed in :attr:`HEMBuild.missing`. Everything is a function of the inputs
and the run's ``seed``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from pseudopairs.smalr.fasttext import WordVectors
from pseudopairs.smalr.hem import (PCA, HybridEmbedding, HybridVocabulary, assign_vocabulary,
                                   fit_pca, pretraining_parameter_count, split_vocabulary)
from pseudopairs.smalr.hem_pretrain import pretrain_latent_assignment
from pseudopairs.smalr.settings import HemSettings


@dataclass(frozen=True)
class Sentence:
    lang: str
    image: int
    tokens: tuple[str, ...]


@dataclass
class HEMBuild:
    vocabulary: HybridVocabulary
    embedding: HybridEmbedding
    pca: dict[str, PCA]
    losses: list[float]
    missing: dict[str, list[str]] = field(default_factory=dict)
    # parameters the pretraining trained that the model does not keep (the assignment layer and
    # the dropped latent rows: pseudopairs.smalr.hem.pretraining_parameter_count)
    pretraining_parameters: int = 0


def build_hem(sentences: Sequence[Sentence], vectors: Mapping[str, WordVectors], *,
              settings: HemSettings, seed: int, output_dim: int | None = None) -> HEMBuild:
    """Steps 1–5 of the module docstring with the config's ``hem`` section (``settings``) and the
    run's ``seed``; ``vectors[lang]`` are that language's FastText vectors (every language of
    ``sentences`` needs some). ``settings.whiten``: the reduced vectors with unit variance per
    component (:meth:`~pseudopairs.smalr.hem.PCA.transform`); unwhitened, the first components
    dominate the assignment layer's scores, and on the demo world all of a language's words start
    on a few latent tokens (docs/smalr.md)."""
    specific_per_language, pca_dim = settings.specific_per_language, settings.pca_dim
    langs = sorted({s.lang for s in sentences})
    absent = [lang for lang in langs if lang not in vectors]
    if absent:
        raise ValueError(f"build_hem: no word vectors for {absent}")
    counts = {lang: Counter() for lang in langs}
    for sentence in sentences:
        counts[sentence.lang].update(sentence.tokens)
    reduced: dict[str, dict[str, torch.Tensor]] = {}
    pcas: dict[str, PCA] = {}
    missing: dict[str, list[str]] = {}
    for lang in langs:
        index = vectors[lang].index()
        known = sorted(w for w in counts[lang] if w in index)
        missing[lang] = sorted(w for w in counts[lang] if w not in index)
        if not known:
            raise ValueError(f"build_hem: {lang}: none of the training words has a vector")
        rows = torch.as_tensor(vectors[lang].vectors[[index[w] for w in known]])
        pcas[lang] = fit_pca(rows, pca_dim)
        reduced[lang] = dict(zip(known, pcas[lang].transform(rows, whiten=settings.whiten)))
    specific, rest = split_vocabulary(
        {lang: {w: c for w, c in counts[lang].items() if w in reduced[lang]} for lang in langs},
        specific_per_language=specific_per_language)
    features, images = [], []
    for sentence in sentences:
        words = [reduced[sentence.lang][t] for t in sentence.tokens if t in reduced[sentence.lang]]
        if words:
            features.append(torch.stack(words))
            images.append(sentence.image)
    result = pretrain_latent_assignment(features, images, settings, seed=seed)
    rest_features = {lang: (list(rest[lang]),
                            torch.stack([reduced[lang][w] for w in rest[lang]])
                            if rest[lang] else torch.zeros(0, pca_dim))
                     for lang in langs}
    vocabulary, kept = assign_vocabulary(specific, rest_features, result.assigner)
    specific_rows = {lang: torch.stack([reduced[lang][w] for w in specific[lang]])
                     if specific[lang] else torch.zeros(0, pca_dim) for lang in langs}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))                 # the projection's initialisation
        embedding = HybridEmbedding.build(vocabulary, specific_rows,
                                          result.assigner.latent.detach()[kept],
                                          output_dim=output_dim)
    assigner = result.assigner
    pretraining = pretraining_parameter_count(latent_size=assigner.latent_size,
                                              feature_dim=assigner.feature_dim,
                                              latent_dim=assigner.latent_dim, kept=len(kept))
    return HEMBuild(vocabulary=vocabulary, embedding=embedding, pca=pcas, losses=result.losses,
                    missing=missing, pretraining_parameters=pretraining)
