"""The ``smalr`` training objective (paper 002, SMALR, §3.2–3.3; registered in
:mod:`pseudopairs.model.objectives`): what one update computes, with the library's pieces in
:mod:`pseudopairs.smalr`.

Batches are the ``joint`` objective's (:mod:`pseudopairs.model.joint`): one batch of images of
one image collection, one caption per c2i data set (language) per image. One update sums

- **Eq. (3)**, the image–sentence triplet loss (cosine, images as anchors + 1.5 × sentences as
  anchors, the ``smalr_top_k`` most violated negatives, ``training.margin``), over the captions
  and, with masked positives, their masked versions too (002 §3.3: "we also compute Eq. (3)
  using the masked sentence representations used in the MCLM module"): a masked caption is one
  more positive of its image. ``smalr_masked_positives`` null (default): exactly when the MCLM
  module is on — the masked sentences are MCLM's (002 Fig. 2: MCLM "also augment[s] the original
  dataset with masked sentences"), so HEM and LA, which "do not include MCLM", have none;
  true / false: always / never;
- ``smalr_neighbourhood_weight`` × MULE's **neighbourhood constraints** (Eq. (1) among the
  captions of the batch, grouped by image, any language) on the universal embedding (the mean of
  the text encoder's word vectors, §7.4's average representation) plus on the final sentence
  representation;
- ``smalr_language_weight`` × the **adversarial language classifier**'s cross-entropy on the
  universal embedding (behind a gradient reversal: one step trains the classifier to tell the
  languages apart and the text encoder to hide them); not built with weight 0 or one language;
- ``smalr_mclm_weight`` × **masked cross-language modelling** (Eq. (2)): for every pair of data
  sets in different languages, on the images having a caption in both, the two masked
  representations, concatenated, predict both unmasked ones through one layer shared by every
  language pair; at the sentence level (the GRU's output on the sentence with its masked words
  replaced) and at the average level (the mean word vector without the masked words), one head
  per level (§7.4). With ``smalr_mclm_detach`` (default) the unmasked targets get no gradient.
  Weight 0: no MCLM module (no heads, and no masking unless ``smalr_masked_positives: true``).

Masked words are replaced by UNK (neither vocabulary has a MASK token; UNK is the token the
model already reads for a word it does not know). Eq. (4)'s weights are 002's (1e-4, 1e-6, 5e-2),
given to the terms in the order the text introduces them (its equation is blank in our copy).
The heads, the classifier, their Adam (the run's learning rate), the masking generator and the
batch sampler are the objective's resumable state. c2c data sets give no extra pairs: the
sentences of one image in two languages are the cross-lingual pairs.

Parameters (002 §5: "SMALR uses more parameters during training … far fewer test-time
parameters"): the heads and the classifier are trained but dropped after training (they are
not in the checkpoint's model); :meth:`SmalrState.training_only_parameters` counts them, and the
training step records the count in the checkpoint (``objective_parameters``), so metrics.json
has both counts (``parameters.training`` and ``parameters.trainable``).
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
from torch import nn

from pseudopairs.data.vocab import UNK_ID
from pseudopairs.model.batches import C2CData, C2IData
from pseudopairs.model.joint import JointBatch, joint_sampler
from pseudopairs.model.updates import optimise
from pseudopairs.smalr.constraints import (LanguageClassifier, image_sentence_loss,
                                           neighbourhood_loss)
from pseudopairs.smalr.mclm import MCLMHead, average_representation, mask_tokens, mclm_loss

if TYPE_CHECKING:
    from pseudopairs.model.settings import TrainingSettings
    from pseudopairs.model.training import Trainer

TERMS = ("image_sentence", "neighbourhood", "language", "mclm")


class SmalrHeads(nn.Module):
    """The objective's own trained modules: the MCLM heads (``sentence``: joint_dim,
    ``average``: embedding_dim; none without ``mclm``) and the language classifier (none without
    ``classifier`` or with one language)."""

    def __init__(self, *, joint_dim: int, embedding_dim: int, languages: Sequence[str],
                 hidden: int | None, mclm: bool = True, classifier: bool = True) -> None:
        super().__init__()
        self.sentence = MCLMHead(joint_dim) if mclm else None
        self.average = MCLMHead(embedding_dim) if mclm else None
        self.classifier = (LanguageClassifier(embedding_dim, sorted(languages), hidden=hidden)
                           if classifier and len(set(languages)) >= 2 else None)

    @property
    def mclm(self) -> bool:
        return self.sentence is not None


@dataclass
class Encoded:
    """One data set's captions of a batch: ``rows`` (numpy) their images among the batch's,
    the final (``full``) and universal (``average``) representations, and the same of the
    masked captions (None when nothing is masked: no MCLM and no masked positives)."""
    lang: str
    rows: np.ndarray
    full: torch.Tensor
    masked: torch.Tensor | None
    average: torch.Tensor
    average_masked: torch.Tensor | None


def masked_positives(settings: TrainingSettings) -> bool:
    """Whether Eq. (3) also scores the masked captions: ``smalr_masked_positives``, or when it is
    null, whether the MCLM module is on (``smalr_mclm_weight`` > 0)."""
    chosen = settings.smalr_masked_positives
    return mclm_on(settings) if chosen is None else bool(chosen)


def mclm_on(settings: TrainingSettings) -> bool:
    """Whether the run has the MCLM module (its loss, heads and masked sentences)."""
    return float(settings.smalr_mclm_weight) > 0


def encode_batch(model, batch: JointBatch, langs: dict, *, fraction: float,
                 generator: torch.Generator, mask: bool = True) -> tuple[torch.Tensor, dict[str, Encoded]]:
    """The image embeddings and each data set's :class:`Encoded` captions (masks drawn from
    ``generator`` in the batch's data-set order; none drawn without ``mask``)."""
    images = model.encode_images(batch.features)
    encoded = {}
    for name, (tokens, lengths, rows) in batch.captions.items():
        if not mask:
            encoded[name] = Encoded(lang=langs[name], rows=np.asarray(rows),
                                    full=model.encode_captions(tokens, lengths), masked=None,
                                    average=average_representation(model.embedding(tokens), lengths),
                                    average_masked=None)
            continue
        masked = mask_tokens(tokens.cpu(), lengths, fraction=fraction, mask_id=UNK_ID,
                             generator=generator)
        masked_ids = masked.masked_ids.to(tokens.device)
        kept_ids = masked.kept_ids.to(tokens.device)
        encoded[name] = Encoded(
            lang=langs[name], rows=np.asarray(rows),
            full=model.encode_captions(tokens, lengths),
            masked=model.encode_captions(masked_ids, lengths),
            average=average_representation(model.embedding(tokens), lengths),
            average_masked=average_representation(model.embedding(kept_ids), masked.kept_lengths))
    return images, encoded


def smalr_terms(images: torch.Tensor, encoded: dict[str, Encoded], heads: SmalrHeads, *,
                margin: float, top_k: int, detach_targets: bool = False,
                masked_positives: bool = True) -> dict[str, torch.Tensor]:
    """The four unweighted terms of one update (module docstring) on encoded captions; the
    masked captions are more Eq. (3) positives only with ``masked_positives``, and MCLM is
    computed only when ``heads`` have the MCLM heads."""
    sets = list(encoded.values())
    device = images.device
    rows = torch.as_tensor(np.concatenate([e.rows for e in sets]), device=device)
    if masked_positives:
        if any(e.masked is None for e in sets):
            raise ValueError("smalr_terms: masked positives need the masked captions (encode with mask)")
        columns = torch.cat([e.full for e in sets] + [e.masked for e in sets])
        column_images = torch.cat([rows, rows])
    else:
        columns = torch.cat([e.full for e in sets])
        column_images = rows
    positive = torch.arange(images.shape[0], device=device).unsqueeze(1) == column_images.unsqueeze(0)
    terms = {"image_sentence": image_sentence_loss(images, columns, positive, margin=margin,
                                                   top_k=top_k)}
    universal = torch.cat([e.average for e in sets])
    terms["neighbourhood"] = (neighbourhood_loss(universal, rows, margin=margin, top_k=top_k)
                              + neighbourhood_loss(torch.cat([e.full for e in sets]), rows,
                                                   margin=margin, top_k=top_k))
    langs = [e.lang for e in sets for _ in range(len(e.rows))]
    terms["language"] = (heads.classifier.loss(universal, langs) if heads.classifier is not None
                         else universal.sum() * 0.0)
    mclm = universal.sum() * 0.0
    pairs = itertools.combinations(sorted(sets, key=lambda e: e.lang), 2) if heads.mclm else ()
    for a, b in pairs:
        if a.lang == b.lang:
            continue
        common, ia, ib = np.intersect1d(a.rows, b.rows, assume_unique=True, return_indices=True)
        if len(common) == 0:
            continue
        ia, ib = torch.as_tensor(ia, device=device), torch.as_tensor(ib, device=device)
        mclm = mclm + mclm_loss(heads.sentence, a.full[ia], b.full[ib], a.masked[ia], b.masked[ib],
                                detach_targets=detach_targets)
        mclm = mclm + mclm_loss(heads.average, a.average[ia], b.average[ib],
                                a.average_masked[ia], b.average_masked[ib], detach_targets=detach_targets)
    terms["mclm"] = mclm
    return terms


def total_loss(terms: dict[str, torch.Tensor], settings: TrainingSettings) -> torch.Tensor:
    """Eq. (4): Eq. (3) plus the weighted constraint terms."""
    return (terms["image_sentence"] + settings.smalr_neighbourhood_weight * terms["neighbourhood"]
            + settings.smalr_language_weight * terms["language"]
            + settings.smalr_mclm_weight * terms["mclm"])


class SmalrState:
    """The objective's resumable state: the joint sampler, the heads and their Adam, and the
    masking generator, all seeded from the run's seed."""

    def __init__(self, trainer: "Trainer", *, c2i: Sequence[C2IData], c2c: Sequence[C2CData],
                 seed: int) -> None:
        self.sampler = joint_sampler(trainer, c2i=c2i, c2c=c2c, seed=seed)
        self.langs = {d.name: d.captions.lang for d in c2i}
        model, settings = trainer.model, trainer.settings
        self.mclm, self.masked_positives = mclm_on(settings), masked_positives(settings)
        key = zlib.crc32(b"smalr-heads")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed) * 1_000_003 + key)
            self.heads = SmalrHeads(joint_dim=model.joint_dim, embedding_dim=model.embedding_dim,
                                    languages=sorted(set(self.langs.values())),
                                    hidden=settings.smalr_language_hidden, mclm=self.mclm,
                                    classifier=float(settings.smalr_language_weight) > 0)
        self.heads.to(trainer.device)
        parameters = list(self.heads.parameters())
        self.optimizer = (torch.optim.Adam(parameters, lr=settings.learning_rate)
                          if parameters else None)
        self.generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + key + 1)

    @property
    def masking(self) -> bool:
        """Whether an update masks its captions (for MCLM or as Eq. (3) positives)."""
        return self.mclm or self.masked_positives

    def training_only_parameters(self) -> int:
        """The parameters this objective trains besides the model's and drops after training:
        the MCLM heads and the language classifier (002: parameters "during training", not at
        test time)."""
        return sum(p.numel() for p in self.heads.parameters() if p.requires_grad)

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "heads": self.heads.state_dict(),
                "optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.heads.load_state_dict(state["heads"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


def smalr_setup(trainer: "Trainer", *, c2i: Sequence[C2IData], c2c: Sequence[C2CData],
                seed: int) -> SmalrState:
    """The objective's setup (:class:`pseudopairs.model.objectives.Objective`)."""
    return SmalrState(trainer, c2i=c2i, c2c=c2c, seed=seed)


def smalr_update(trainer: "Trainer") -> tuple[str, str, torch.Tensor]:
    """One update of the ``smalr`` objective (module docstring); the log names the task
    ``smalr`` and the image collection's data sets."""
    state: SmalrState = trainer.objective_state
    settings, model = trainer.settings, trainer.model
    group, batch = state.sampler.next()
    batch = batch.to(trainer.device, non_blocking=trainer.device.type == "cuda")
    model.train()
    state.heads.train()
    trainer.optimizer.zero_grad(set_to_none=True)
    if state.optimizer is not None:
        state.optimizer.zero_grad(set_to_none=True)
    images, encoded = encode_batch(model, batch, state.langs,
                                   fraction=settings.smalr_mask_fraction,
                                   generator=state.generator, mask=state.masking)
    terms = smalr_terms(images, encoded, state.heads, margin=settings.margin,
                        top_k=settings.smalr_top_k, detach_targets=settings.smalr_mclm_detach,
                        masked_positives=state.masked_positives)
    loss = total_loss(terms, settings)
    optimise(model, trainer.optimizer, loss, grad_clip=settings.grad_clip)
    if state.optimizer is not None:
        if settings.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(state.heads.parameters(), settings.grad_clip)
        state.optimizer.step()
    return "smalr", group.name, loss.detach()
