"""Training objectives: what one update computes. One registry entry each (config key
``training.objective``).

``sampled`` (papers 000 and 004): each update draws a task — c2c with probability
``c2c_probability`` when the experiment has c2c data sets (and the c2c warm-up, if any, has
ended), else c2i — then a data set of that task uniformly and the next batch of its stream, and
takes one optimiser step on the ranking loss of that batch. With ``c2c_pool`` (paper 004) the
c2c data sets are one data set of all their pairs, so a c2c batch mixes language pairs.

``joint`` (paper 003, Calixto & Liu 2017, §3 Eq. 1–3): every update sums the pairwise ranking
loss over every pair of sources present for the images of one batch — the image with each of its
captions (image–caption pairs, R_MM), and, for the pairs of languages the experiment lists as
c2c, the two captions (caption–caption pairs, R_ML) — and takes one optimiser step on the sum
(equal weights: their β = 0.5, up to a factor 2). Batches (:mod:`pseudopairs.model.joint`):

- the experiment's c2i data sets are grouped by their images (the same features file): one
  *group* per image collection, e.g. Multi30K En + De, or COCO En + pseudo-De; a c2c data set
  joins the group holding both its caption sets (one over images no group holds is an error);
- each update draws a group uniformly (seeded), then the next ``batch_size`` images of the
  group's image stream (a :class:`~pseudopairs.model.batches.BatchStream` over every image with
  at least one caption in one of the group's data sets: shuffled, walked, reshuffled; the
  partial batch dropped) and, for every data set, one of each image's captions uniformly
  (seeded);
- the loss of a pair is scored on the images having both sources (an image may lack a caption in
  a data set, e.g. a COCO image whose pseudopairs were filtered out), with the in-batch
  negatives and the ``max_violation`` and ``margin`` settings of ``sampled``; image–caption pairs
  use the run's similarity (the image as ``v`` of ``order``), caption–caption pairs its
  caption–caption counterpart;
- with ``c2c_warmup`` (and max-violation) the caption–caption pairs join after the validation at
  which the image–caption part, scaled to one full batch and averaged since the previous
  validation, has left the collapsed plateau (as ``sampled`` switches c2c on);
- the group's image stream, the caption draws and the group draws are seeded from the run's
  seed and saved in the resumable state, so a killed run resumes to the same weights.
``c2c_probability`` and ``c2c_pool`` are not used by ``joint``. The training log names the task ``joint`` and the
group (its data sets joined by ``+``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from pseudopairs.core.registry import Registry


@dataclass(frozen=True)
class Objective:
    name: str
    summary: str
    # "module:function" of one update of a Trainer, returning (task, data set name, detached
    # loss); imported when a run uses it, so the registry itself needs no torch.
    update: str
    # "module:function" building the objective's own state from (trainer, c2i=, c2c=, seed=):
    # an object with state_dict / load_state_dict, saved with the trainer; None: nothing beyond
    # the trainer's streams and task sampler.
    setup: str | None = None

    def update_function(self) -> Callable:
        return _load(self.update)

    def setup_function(self) -> Callable | None:
        return None if self.setup is None else _load(self.setup)


def _load(target: str) -> Callable:
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


OBJECTIVES: Registry[Objective] = Registry("training objective", modules=("pseudopairs.model.objectives",))


# one entry per objective, registered under its name
for _objective in (
    Objective(
        name="sampled", update="pseudopairs.model.updates:sampled_update",
        summary="one task per update (c2c with probability c2c_probability, else c2i), one data set "
                "of it uniformly, one batch (papers 000, 004)"),
    Objective(
        name="joint", update="pseudopairs.model.updates:joint_update",
        setup="pseudopairs.model.joint:joint_sampler",
        summary="one batch of images of one image collection per update, one caption per data set "
                "per image; the ranking loss summed over every image–caption pair and every c2c "
                "caption–caption pair (paper 003)"),
    Objective(
        name="smalr", update="pseudopairs.model.smalr_objective:smalr_update",
        setup="pseudopairs.model.smalr_objective:smalr_setup",
        summary="joint's batches; 002's Eq. (3) on the unmasked and masked captions, plus MULE's "
                "neighbourhood constraints and adversarial language classifier and masked "
                "cross-language modelling, weighted (paper 002, SMALR)"),
):
    OBJECTIVES.register(_objective.name, _objective)
