"""What one training update computes, per objective (see :mod:`pseudopairs.model.objectives`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pseudopairs.model.batches import C2CBatch, C2IBatch
from pseudopairs.model.encoders import RankingModel
from pseudopairs.model.losses import contrastive_loss

if TYPE_CHECKING:
    from pseudopairs.model.training import Trainer


def embed_batch(model: RankingModel, batch: C2IBatch | C2CBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-aligned embeddings of a batch: (images, captions) for c2i, (captions a, b) for c2c."""
    if isinstance(batch, C2IBatch):
        return model.encode_images(batch.features), model.encode_captions(batch.tokens, batch.lengths)
    return (model.encode_captions(batch.tokens_a, batch.lengths_a),
            model.encode_captions(batch.tokens_b, batch.lengths_b))


def train_step(model: RankingModel, optimizer: torch.optim.Optimizer, batch: C2IBatch | C2CBatch,
               *, margin: float, max_violation: bool, grad_clip: float,
               similarity: str = "cosine") -> torch.Tensor:
    """One optimiser update on one batch (already on the model's device); returns the detached
    loss (not synchronised: reading it is the caller's choice)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    a, b = embed_batch(model, batch)
    loss = contrastive_loss(a, b, margin=margin, max_violation=max_violation, similarity=similarity)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.detach()


def sampled_step(trainer: "Trainer") -> tuple[str, str, torch.Tensor]:
    task, name = trainer.sampler.draw(c2c_enabled=trainer.c2c_enabled)
    key = (task, name)
    batch = trainer.data[key].batch(trainer.streams[key].next())
    settings = trainer.settings
    loss = train_step(trainer.model, trainer.optimizer,
                      batch.to(trainer.device, non_blocking=trainer.device.type == "cuda"),
                      margin=settings["margin"], max_violation=settings["max_violation"],
                      grad_clip=settings["grad_clip"], similarity=settings["similarity"])
    return task, name, loss
