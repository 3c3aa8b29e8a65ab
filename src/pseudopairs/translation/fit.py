"""The training loop of the demo Transformer (``train-mt``), resumable from a saved state.

:func:`train_transformer` hands a snapshot of the whole training state to a ``save`` callback
every ``checkpoint_every`` updates and once more when training has ended: the model and
optimizer (Adam moments and step counts) states, torch's CPU random state (dropout), and the loop
state (:class:`LoopState`: update count, epoch, position in the epoch's batch order, the batch
generator's state at the start of the epoch, the running loss sums and the log so far). The
learning rate is a function of the update count. Given such a snapshot as ``resume``, the loop
rebuilds the epoch's batch order from the saved generator state, skips the batches already done
and goes on, so that a resumed run computes exactly what an uninterrupted one does (on the CPU,
with the same thread count).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch
from torch.nn import functional as F

from pseudopairs.translation.settings import TranslationTrainSettings
from pseudopairs.translation.transformer import (PAD_ID, Seq2SeqTransformer, TransformerShape,
                                                 evaluate_nll, inverse_sqrt_lr, length_batches,
                                                 pad_batch)

logger = logging.getLogger(__name__)


@dataclass
class LoopState:
    """Where the loop is: plain values only (saved as they are)."""

    step: int = 0                 # updates done
    epoch: int = 1                # the epoch under way (1-based)
    position: int = 0             # batches of this epoch done
    epoch_rng: dict = field(default_factory=dict)  # batch generator state at this epoch's start
    running: float = 0.0          # summed training loss since the last log row
    running_tokens: int = 0
    history: list = field(default_factory=list)    # rows: step, epoch, kind, loss, lr
    finished: bool = False


def snapshot(model: Seq2SeqTransformer, optimizer: torch.optim.Optimizer, loop: LoopState) -> dict:
    """The whole training state (copies: later updates do not change it)."""
    return {
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer": _clone(optimizer.state_dict()),
        "torch_rng": torch.get_rng_state(),
        "loop": _clone(asdict(loop)),
    }


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _update(model, optimizer, batch, train_src, train_tgt, *, rate: float,
            settings: TranslationTrainSettings) -> tuple[float, int]:
    """One Adam update on ``batch``; returns the summed loss and the number of target tokens."""
    for group in optimizer.param_groups:
        group["lr"] = rate
    src = pad_batch([train_src[i] for i in batch])
    tgt_in = pad_batch([train_tgt[i] for i in batch], bos=True)
    tgt_out = pad_batch([train_tgt[i] for i in batch], eos=True)
    logits = model(src, tgt_in)
    tokens = int((tgt_out != PAD_ID).sum())
    loss_sum = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                               ignore_index=PAD_ID, label_smoothing=settings.label_smoothing,
                               reduction="sum")
    optimizer.zero_grad(set_to_none=True)
    (loss_sum / tokens).backward()
    if settings.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip_norm)
    optimizer.step()
    return float(loss_sum.detach()), tokens


def train_transformer(train_src, train_tgt, *, valid_src, valid_tgt, shape: TransformerShape,
                      settings: TranslationTrainSettings, resume: dict | None = None,
                      save: Callable[[dict], None] | None = None, progress: bool = True, log=None):
    """Train :class:`Seq2SeqTransformer` on id sequences (no specials; they are added here).

    Adam (β = 0.9, 0.98, ε = 1e-9) with :func:`inverse_sqrt_lr`, label-smoothed cross-entropy
    summed over target tokens and divided by their number, gradient-norm clipping. Stops after
    ``settings.epochs`` passes or ``settings.max_steps`` updates, whichever comes first;
    validation NLL after every epoch. Seeded: the same inputs, settings and torch thread count
    give the same weights. ``save`` gets a :func:`snapshot` every ``settings.checkpoint_every``
    updates and at the end (``loop.finished``); ``resume`` is such a snapshot to continue from.
    Returns ``(model, history)``; ``history`` rows: ``step, epoch, kind, loss, lr``.
    """
    from tqdm import tqdm

    s = settings
    if not train_src:
        raise ValueError("no training pairs left to train on")
    torch.manual_seed(s.seed)
    model = Seq2SeqTransformer(shape)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, betas=(0.9, 0.98), eps=1e-9)
    rng = np.random.default_rng(s.seed)
    src_lengths = [len(x) for x in train_src]
    tgt_lengths = [len(x) for x in train_tgt]
    per_epoch = len(length_batches(src_lengths, tgt_lengths, batch_tokens=s.batch_tokens,
                                   rng=np.random.default_rng(s.seed)))
    planned = per_epoch * s.epochs if s.max_steps is None else min(per_epoch * s.epochs, s.max_steps)
    if planned <= s.warmup_steps:
        logger.warning("translation.train.warmup_steps (%d) >= the %d updates this run makes (%d per epoch x "
                    "epochs %d%s): the learning rate never reaches translation.train.lr (%g); lower "
                    "warmup_steps or train longer", s.warmup_steps, planned, per_epoch, s.epochs,
                    "" if s.max_steps is None else f", max_steps {s.max_steps}", s.lr)
    loop = LoopState(epoch_rng=rng.bit_generator.state)
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        torch.set_rng_state(resume["torch_rng"])
        loop = LoopState(**_clone(resume["loop"]))
        rng.bit_generator.state = loop.epoch_rng
    if loop.finished:
        return model.eval(), loop.history
    every = s.checkpoint_every
    bar = tqdm(total=planned, initial=loop.step, desc="train-mt", unit="step", disable=not progress,
               dynamic_ncols=True)
    try:
        while loop.epoch <= s.epochs:
            loop.epoch_rng = rng.bit_generator.state  # (the saved one when resuming this epoch)
            batches = length_batches(src_lengths, tgt_lengths, batch_tokens=s.batch_tokens, rng=rng)
            for batch in batches[loop.position:]:
                if s.max_steps is not None and loop.step >= s.max_steps:
                    break
                loop.step += 1
                loop.position += 1
                rate = inverse_sqrt_lr(loop.step, lr=s.lr, warmup_steps=s.warmup_steps)
                loss, tokens = _update(model, optimizer, batch, train_src, train_tgt, rate=rate,
                                       settings=s)
                loop.running += loss
                loop.running_tokens += tokens
                bar.update(1)
                if loop.step % s.log_every == 0:
                    mean = loop.running / max(loop.running_tokens, 1)
                    loop.history.append({"step": loop.step, "epoch": loop.epoch, "kind": "train",
                                         "loss": mean, "lr": rate})
                    bar.set_postfix(loss=f"{mean:.3f}", lr=f"{rate:.2e}")
                    loop.running, loop.running_tokens = 0.0, 0
                if save is not None and every is not None and loop.step % every == 0:
                    save(snapshot(model, optimizer, loop))
            valid = evaluate_nll(model, valid_src, valid_tgt, batch_tokens=s.batch_tokens)
            loop.history.append({"step": loop.step, "epoch": loop.epoch, "kind": "valid", "loss": valid,
                                 "lr": inverse_sqrt_lr(loop.step, lr=s.lr, warmup_steps=s.warmup_steps)})
            if log is not None:
                log.info("epoch %d, step %d: validation NLL %.4f (perplexity %.2f)",
                         loop.epoch, loop.step, valid, math.exp(min(valid, 50.0)))
            if s.max_steps is not None and loop.step >= s.max_steps:
                break
            loop.epoch, loop.position = loop.epoch + 1, 0
    finally:
        bar.close()
    loop.finished = True
    if save is not None and every is not None:
        save(snapshot(model, optimizer, loop))
    return model.eval(), loop.history
