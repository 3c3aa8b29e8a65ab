"""What one training update computes, per objective (see :mod:`pseudopairs.model.objectives`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from pseudopairs.model.batches import C2CBatch, C2IBatch
from pseudopairs.model.encoders import RankingModel
from pseudopairs.model.losses import contrastive_loss, joint_loss, plateau_loss
from pseudopairs.similarity.functions import caption_similarity

if TYPE_CHECKING:
    from pseudopairs.model.training import Trainer


def embed_batch(model: RankingModel, batch: C2IBatch | C2CBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-aligned embeddings of a batch: (images, captions) for c2i, (captions a, b) for c2c."""
    if isinstance(batch, C2IBatch):
        return model.encode_images(batch.features), model.encode_captions(batch.tokens, batch.lengths)
    return (model.encode_captions(batch.tokens_a, batch.lengths_a),
            model.encode_captions(batch.tokens_b, batch.lengths_b))


def optimise(model: RankingModel, optimizer: torch.optim.Optimizer, loss: torch.Tensor, *,
             grad_clip: float) -> None:
    """Backpropagate ``loss``, clip the gradient norm (``grad_clip`` > 0), take the step."""
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()


def train_update(model: RankingModel, optimizer: torch.optim.Optimizer, batch: C2IBatch | C2CBatch,
               *, margin: float, max_violation: bool, grad_clip: float,
               similarity: str = "cosine") -> torch.Tensor:
    """One optimiser update on one batch (already on the model's device); returns the detached
    loss (not synchronised: reading it is the caller's choice). ``similarity``: the run's; a c2c
    batch is scored with its caption–caption counterpart (``order`` → ``cosine``)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    a, b = embed_batch(model, batch)
    if isinstance(batch, C2CBatch):
        similarity = caption_similarity(similarity)
    loss = contrastive_loss(a, b, margin=margin, max_violation=max_violation, similarity=similarity)
    optimise(model, optimizer, loss, grad_clip=grad_clip)
    return loss.detach()


def sampled_update(trainer: "Trainer") -> tuple[str, str, torch.Tensor]:
    task, name, batch = trainer.next_batch()
    settings = trainer.settings
    loss = train_update(trainer.model, trainer.optimizer,
                      batch.to(trainer.device, non_blocking=trainer.device.type == "cuda"),
                      margin=settings.margin, max_violation=settings.max_violation,
                      grad_clip=settings.grad_clip, similarity=settings.similarity)
    if task == "c2i":
        trainer.note_c2i_loss(loss)
    return task, name, loss


def joint_update(trainer: "Trainer") -> tuple[str, str, torch.Tensor]:
    """One update of the ``joint`` objective: the summed ranking loss of every image–caption pair
    and (once any c2c warm-up has ended) every c2c caption–caption pair of one batch of images."""
    c2c_on = trainer.c2c_enabled           # a warm-up ends at a validation: c2c from the next update
    group, batch = trainer.objective_state.next()
    batch = batch.to(trainer.device, non_blocking=trainer.device.type == "cuda")
    model, settings = trainer.model, trainer.settings
    model.train()
    trainer.optimizer.zero_grad(set_to_none=True)
    n_images = batch.features.shape[0]
    sources = {"image": (model.encode_images(batch.features), np.arange(n_images))}
    for name, (tokens, lengths, rows) in batch.captions.items():
        sources[name] = (model.encode_captions(tokens, lengths), rows)
    similarity = settings.similarity
    options = {"margin": settings.margin, "max_violation": settings.max_violation}
    sizes: list[int] = []
    loss = joint_loss(sources, [("image", name, similarity) for name in batch.captions], sizes=sizes,
                      **options)
    if not c2c_on and sizes:                # the warm-up watches the image–caption part
        plateau = sum(plateau_loss(batch_size=k, **options) for k in sizes)
        full = plateau_loss(batch_size=n_images, **options)
        trainer.note_c2i_loss(loss.detach() * (full / plateau))
    if c2c_on:
        pairs = [(a, b, caption_similarity(similarity)) for a, b, _ in group.c2c
                 if a in sources and b in sources]
        loss = loss + joint_loss(sources, pairs, **options)
    if loss.requires_grad:                  # else no pair had two items: nothing to learn from
        optimise(model, trainer.optimizer, loss, grad_clip=settings.grad_clip)
    return "joint", group.name, loss.detach()
