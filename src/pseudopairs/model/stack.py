"""Stacked training: S ranking models of one shape trained together on one device.

The models of a stack keep everything that makes them separate runs — their own seed and
initialisation, vocabulary, data sets, batch streams and task draws, c2c warm-up, validations,
early stopping and files (:mod:`pseudopairs.model.training` drives them). What they share is the
arithmetic: their weights live in tensors with a leading model dimension, and one update runs
the S forward and backward passes as batched matrix products (``torch.bmm``) instead of S small
ones, which keeps a GPU busy where one model of the paper's size leaves it mostly idle.

- :class:`StackedRankingModel` — the weights of S :class:`~pseudopairs.model.encoders.RankingModel`
  (same dimensions; vocabularies may differ in size: the embedding tables are padded to the
  largest, and the rows beyond a model's vocabulary never receive a gradient). Its caption encoder
  is the GRU of ``torch.nn.GRU`` written out step by step (gates r, z, n in PyTorch's order and
  formula), batched over models; a caption's state stops changing after its last real token, so
  the final state is the state after the last real token, as with packed sequences.
- :func:`stacked_contrastive_loss` — the VSE++ hinge loss of each model (cosine similarity),
  ``(S, B, d)`` × ``(S, B, d)`` → ``(S,)``, equal to
  :func:`~pseudopairs.model.losses.contrastive_loss` per model.
- :class:`StackedAdam` — Adam per model and parameter with the state layout of ``torch.optim.Adam``
  (a model's slice converts to and from a ``torch.optim.Adam`` state dict, so a model's resumable
  state is the same whether it trained alone or in a stack). A parameter that got no gradient in
  an update (the image layer in a c2c update) is not stepped, exactly as ``torch.optim.Adam``
  skips a parameter whose ``grad`` is ``None``.
- :func:`stacked_update` — one update of every model in the stack: each model's batch (c2i or
  c2c, drawn by its own trainer), one batched forward, each model's loss, one backward, per-model
  gradient-norm clipping, the Adam step.

Models leave the stack when they stop (:meth:`StackedRankingModel.select`,
:meth:`StackedAdam.select`). Floating-point results equal separate runs up to rounding (the
batched GRU and the Adam arithmetic round differently from ``nn.GRU`` and ``torch.optim.Adam``);
``tests/test_stack.py`` states the tolerance observed.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pseudopairs.data.vocab import PAD_ID
from pseudopairs.model.batches import C2CBatch, C2IBatch
from pseudopairs.model.encoders import RankingModel
from pseudopairs.model.losses import contrastive_loss
from pseudopairs.similarity.functions import SIMILARITIES, caption_similarity

# RankingModel's trainable parameters in the order of ``RankingModel.parameters()`` (the order of
# a torch.optim.Adam state dict over them), and the ones an update trains only when it is c2i.
PARAMETERS = ("image_projection.weight", "image_projection.bias", "embedding.weight",
              "gru.weight_ih_l0", "gru.weight_hh_l0", "gru.bias_ih_l0", "gru.bias_hh_l0")
IMAGE_PARAMETERS = ("image_projection.weight", "image_projection.bias")
BUFFERS = ("image_mean", "image_scale")
EMBEDDING = "embedding.weight"


def _shape_config(model: RankingModel) -> dict:
    return {k: v for k, v in model.config().items() if k != "vocab_size"}


class StackedRankingModel(nn.Module):
    """The weights of S ranking models with a leading model dimension (see the module docstring)."""

    def __init__(self, models: Sequence[RankingModel]) -> None:
        super().__init__()
        if not models:
            raise ValueError("StackedRankingModel: no models")
        shape = _shape_config(models[0])
        for i, model in enumerate(models[1:], 1):
            if _shape_config(model) != shape:
                raise ValueError(f"StackedRankingModel: model {i} has {_shape_config(model)}, "
                                 f"model 0 {shape}; a stack needs one shape")
        self.shape = shape
        self.joint_dim = int(shape["joint_dim"])
        self.image_normalization = shape["image_normalization"]
        self.similarity = shape["similarity"]
        self.nonnegative = SIMILARITIES.get(self.similarity).nonnegative
        self.vocab_sizes = [m.vocab_size for m in models]
        self.padded_vocab = max(self.vocab_sizes)
        self.weights = nn.ParameterDict()
        states = [dict(m.state_dict()) for m in models]
        for name in PARAMETERS:
            rows = [self._pad(name, state[name].detach()) for state in states]
            self.weights[name.replace(".", "__")] = nn.Parameter(torch.stack(rows).clone())
        for name in BUFFERS:
            self.register_buffer(name, torch.stack([state[name].detach() for state in states]).clone())

    def _pad(self, name: str, value: torch.Tensor) -> torch.Tensor:
        if name != EMBEDDING or value.shape[0] == self.padded_vocab:
            return value
        pad = value.new_zeros((self.padded_vocab - value.shape[0], value.shape[1]))
        return torch.cat([value, pad])

    def __len__(self) -> int:
        return len(self.vocab_sizes)

    def weight(self, name: str) -> nn.Parameter:
        return self.weights[name.replace(".", "__")]

    def parameters_in_order(self) -> list[nn.Parameter]:
        return [self.weight(name) for name in PARAMETERS]

    @property
    def device(self) -> torch.device:
        return self.weight(EMBEDDING).device

    # ---- one model's weights in and out ------------------------------------------------------

    def model_state(self, index: int) -> dict[str, torch.Tensor]:
        """Model ``index``'s ``RankingModel`` state dict (detached copies; its own vocabulary rows)."""
        state = {}
        for name in PARAMETERS:
            value = self.weight(name)[index].detach()
            if name == EMBEDDING:
                value = value[:self.vocab_sizes[index]]
            state[name] = value.clone()
        for name in BUFFERS:
            state[name] = getattr(self, name)[index].detach().clone()
        return state

    def copy_into(self, index: int, model: RankingModel) -> None:
        """Load model ``index``'s weights into ``model`` (its separate-run twin)."""
        model.load_state_dict(self.model_state(index))

    @torch.no_grad()
    def select(self, keep: Sequence[int]) -> None:
        """Keep only the models at positions ``keep`` (the others left the stack)."""
        index = torch.as_tensor(list(keep), dtype=torch.long, device=self.device)
        for key, param in self.weights.items():
            self.weights[key] = nn.Parameter(param.detach().index_select(0, index).clone())
        for name in BUFFERS:
            setattr(self, name, getattr(self, name).index_select(0, index).clone())
        self.vocab_sizes = [self.vocab_sizes[i] for i in keep]

    # ---- the forward pass --------------------------------------------------------------------

    def _joint(self, x: torch.Tensor) -> torch.Tensor:
        x = F.normalize(x, dim=-1)
        return x.abs() if self.nonnegative else x

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """``(S, B, image_dim)`` stored features → ``(S, B, joint_dim)`` unit rows (as
        :meth:`RankingModel.encode_images` per model)."""
        weight = self.weight("image_projection.weight")
        features = features.to(device=weight.device, dtype=weight.dtype)
        if self.image_normalization == "l2":
            features = F.normalize(features, dim=-1)
        features = (features - self.image_mean[:, None, :]) / self.image_scale[:, None, :]
        projected = torch.baddbmm(self.weight("image_projection.bias")[:, None, :], features,
                                  weight.transpose(1, 2))
        return self._joint(projected)

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``(S, R, T)`` padded token ids (each model's own vocabulary) and ``(S, R)`` real lengths
        (≥ 1) → ``(S, R, joint_dim)`` unit rows: the GRU state after each caption's last token."""
        n_models, rows, steps = tokens.shape
        embedding = self.weight(EMBEDDING)
        device = embedding.device
        offsets = torch.arange(n_models, device=device).mul_(self.padded_vocab)[:, None, None]
        flat = embedding.reshape(n_models * self.padded_vocab, -1)
        embedded = F.embedding(tokens.to(device) + offsets, flat)             # (S, R, T, E)
        w_ih, w_hh = self.weight("gru.weight_ih_l0"), self.weight("gru.weight_hh_l0")
        b_ih, b_hh = self.weight("gru.bias_ih_l0"), self.weight("gru.bias_hh_l0")
        gates_in = torch.baddbmm(b_ih[:, None, :], embedded.reshape(n_models, rows * steps, -1),
                                 w_ih.transpose(1, 2)).reshape(n_models, rows, steps, -1)
        lengths = lengths.to(device)
        hidden = embedded.new_zeros((n_models, rows, self.joint_dim))
        w_hh_t, b_hh = w_hh.transpose(1, 2), b_hh[:, None, :]
        for t in range(steps):
            gates_h = torch.baddbmm(b_hh, hidden, w_hh_t)
            in_r, in_z, in_n = gates_in[:, :, t].chunk(3, dim=-1)
            h_r, h_z, h_n = gates_h.chunk(3, dim=-1)
            reset = torch.sigmoid(in_r + h_r)
            update = torch.sigmoid(in_z + h_z)
            new = torch.tanh(in_n + reset * h_n)
            stepped = new + update * (hidden - new)                              # (1−z)·n + z·h
            hidden = torch.where((lengths > t)[:, :, None], stepped, hidden)
        return self._joint(hidden)


def stacked_contrastive_loss(a: torch.Tensor, b: torch.Tensor, *, margin: float,
                             max_violation: bool = True) -> torch.Tensor:
    """Each model's VSE++ hinge loss under cosine similarity: ``a``, ``b`` of shape ``(S, B, d)``,
    row i of ``a[s]`` matching row i of ``b[s]``; returns ``(S,)`` — model s's
    :func:`~pseudopairs.model.losses.contrastive_loss` of ``a[s]``, ``b[s]``."""
    if a.ndim != 3 or a.shape != b.shape:
        raise ValueError(f"stacked_contrastive_loss: a {tuple(a.shape)} and b {tuple(b.shape)} must "
                         "be stacks of row-aligned matrices of one shape")
    scores = torch.bmm(a, b.transpose(1, 2))
    positive = scores.diagonal(dim1=1, dim2=2).unsqueeze(2)
    cost_b = (margin - positive + scores).clamp(min=0)
    cost_a = (margin - positive + scores.transpose(1, 2)).clamp(min=0)
    off_diagonal = ~torch.eye(scores.shape[1], dtype=torch.bool, device=scores.device)
    cost_b = cost_b * off_diagonal
    cost_a = cost_a * off_diagonal
    if max_violation:
        return cost_b.max(dim=2).values.sum(dim=1) + cost_a.max(dim=2).values.sum(dim=1)
    return cost_b.sum(dim=(1, 2)) + cost_a.sum(dim=(1, 2))


class StackedAdam:
    """Adam (``torch.optim.Adam``'s defaults and formula, no weight decay) over the stacked
    parameters, stepping each model's slice of a parameter only in the updates that gave it a
    gradient (``active``); per-model, per-parameter step counts."""

    def __init__(self, params: Sequence[torch.Tensor], *, lr: float, betas=(0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps = float(lr), tuple(betas), float(eps)
        n_models, device = self.params[0].shape[0], self.params[0].device
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        # step counts on the parameters' device: the bias corrections need no host round trip
        self.steps = [torch.zeros(n_models, dtype=torch.float64, device=device) for _ in self.params]

    @torch.no_grad()
    def step(self, active: Sequence[torch.Tensor | None]) -> None:
        """One step; ``active[k]``: ``(S,)`` bool tensor (on the parameters' device) of the models
        whose parameter k got a gradient in this update (None: all of them)."""
        beta1, beta2 = self.betas
        for k, param in enumerate(self.params):
            grad = param.grad
            if grad is None:
                continue
            mask = active[k]
            steps = self.steps[k]
            steps += 1 if mask is None else mask.to(torch.float64)
            safe = steps.clamp(min=1)
            shape = (-1,) + (1,) * (param.ndim - 1)
            step_size = (self.lr / (1 - torch.pow(beta1, safe))).to(param.dtype).view(shape)
            correction2_sqrt = (1 - torch.pow(beta2, safe)).sqrt().to(param.dtype).view(shape)
            exp_avg = self.exp_avg[k].lerp(grad, 1 - beta1)
            exp_avg_sq = self.exp_avg_sq[k].mul(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / correction2_sqrt).add_(self.eps)
            new_param = param - step_size * exp_avg / denom
            if mask is None:
                self.exp_avg[k], self.exp_avg_sq[k] = exp_avg, exp_avg_sq
                param.copy_(new_param)
            else:
                where = mask.view(shape)
                self.exp_avg[k] = torch.where(where, exp_avg, self.exp_avg[k])
                self.exp_avg_sq[k] = torch.where(where, exp_avg_sq, self.exp_avg_sq[k])
                param.copy_(torch.where(where, new_param, param))

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    def select(self, keep: Sequence[int], params: Sequence[torch.Tensor]) -> None:
        """Keep the models at positions ``keep``; ``params``: the stack's new parameter tensors."""
        index = torch.as_tensor(list(keep), dtype=torch.long)
        self.params = list(params)
        dev = self.params[0].device
        self.exp_avg = [m.index_select(0, index.to(dev)) for m in self.exp_avg]
        self.exp_avg_sq = [v.index_select(0, index.to(dev)) for v in self.exp_avg_sq]
        self.steps = [s.index_select(0, index.to(dev)) for s in self.steps]

    # ---- one model's state as torch.optim.Adam's -----------------------------------------------

    def torch_state(self, index: int, *, vocab_size: int, param_groups: list) -> dict:
        """Model ``index``'s optimiser state as a ``torch.optim.Adam.state_dict()`` over its
        ``RankingModel.parameters()`` (``param_groups``: that optimiser's own)."""
        state = {}
        for k, name in enumerate(PARAMETERS):
            steps = float(self.steps[k][index])
            if steps == 0:
                continue
            exp_avg, exp_avg_sq = self.exp_avg[k][index], self.exp_avg_sq[k][index]
            if name == EMBEDDING:
                exp_avg, exp_avg_sq = exp_avg[:vocab_size], exp_avg_sq[:vocab_size]
            state[k] = {"step": torch.tensor(steps), "exp_avg": exp_avg.detach().cpu().clone(),
                        "exp_avg_sq": exp_avg_sq.detach().cpu().clone()}
        return {"state": state, "param_groups": param_groups}

    @torch.no_grad()
    def load_torch_state(self, index: int, state: dict) -> None:
        """Set model ``index``'s slice from a ``torch.optim.Adam.state_dict()`` of its model."""
        for k, entry in state.get("state", {}).items():
            k = int(k)
            rows = entry["exp_avg"].shape[0]
            self.exp_avg[k][index, :rows].copy_(entry["exp_avg"])
            self.exp_avg_sq[k][index, :rows].copy_(entry["exp_avg_sq"])
            self.steps[k][index] = float(entry["step"])


# --------------------------------------------------------------------------------------------
# One update of a stack


def _pad_rows(tokens: list[torch.Tensor], lengths: list[torch.Tensor], rows: int,
              steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per model, its caption batches one below the other, padded to ``rows`` × ``steps`` (extra
    rows: one PAD token, length 1 — encoded and never used)."""
    out = torch.full((len(tokens), rows, steps), PAD_ID, dtype=torch.int64)
    out_lengths = torch.ones((len(tokens), rows), dtype=torch.int64)
    for s, (tok, length) in enumerate(zip(tokens, lengths)):
        out[s, :tok.shape[0], :tok.shape[1]] = tok
        out_lengths[s, :tok.shape[0]] = length
    return out, out_lengths


def _captions_of(batch: C2IBatch | C2CBatch) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    if isinstance(batch, C2IBatch):
        return [batch.tokens], [batch.lengths]
    return [batch.tokens_a, batch.tokens_b], [batch.lengths_a, batch.lengths_b]


def stacked_update(stack: StackedRankingModel, optimizer: StackedAdam,
                   batches: Sequence[C2IBatch | C2CBatch], *, margin: float, max_violation: bool,
                   grad_clip: float, similarity: str = "cosine") -> torch.Tensor:
    """One update of each model of ``stack`` on its own batch (``batches[s]``, on the CPU; c2i or
    c2c, drawn by that model's trainer). Returns the ``(S,)`` detached losses (not synchronised)."""
    if len(batches) != len(stack):
        raise ValueError(f"stacked_update: {len(batches)} batches for {len(stack)} models")
    device = stack.device
    non_blocking = device.type == "cuda"
    is_c2i = [isinstance(b, C2IBatch) for b in batches]
    sizes = [int((b.tokens if c else b.tokens_a).shape[0]) for b, c in zip(batches, is_c2i)]
    # every caption batch of every model through one GRU pass
    tokens, lengths, counts = [], [], []
    for batch in batches:
        tok, length = _captions_of(batch)
        tokens.append(torch.cat([torch.nn.functional.pad(t, (0, max(x.shape[1] for x in tok) - t.shape[1]),
                                                         value=PAD_ID) for t in tok]))
        lengths.append(torch.cat([torch.as_tensor(x, dtype=torch.int64) for x in length]))
        counts.append(len(tok))
    rows = max(t.shape[0] for t in tokens)
    steps = max(int(x.max()) for x in lengths)
    tokens, lengths = _pad_rows([t[:, :steps] for t in tokens], lengths, rows, steps)
    captions = stack.encode_captions(tokens.to(device, non_blocking=non_blocking), lengths)
    images = None
    if any(is_c2i):
        width = max(b.features.shape[0] for b, c in zip(batches, is_c2i) if c)
        dim = next(b.features.shape[1] for b, c in zip(batches, is_c2i) if c)
        dtype = next(b.features.dtype for b, c in zip(batches, is_c2i) if c)
        features = torch.zeros((len(batches), width, dim), dtype=dtype)
        for s, (batch, c2i) in enumerate(zip(batches, is_c2i)):
            if c2i:
                features[s, :batch.features.shape[0]] = batch.features
        images = stack.encode_images(features.to(device, non_blocking=non_blocking))
    c2i_mask = torch.tensor(is_c2i).to(device, non_blocking=non_blocking)
    uniform = len(set(sizes)) == 1 and similarity == "cosine" and caption_similarity(similarity) == "cosine"
    if uniform:
        size = sizes[0]
        mask = c2i_mask[:, None, None]
        first = captions[:, :size]
        a = first if images is None else torch.where(mask, images[:, :size], first)
        b = captions[:, size:2 * size] if rows >= 2 * size else first
        if rows >= 2 * size:
            b = torch.where(mask, first, b)
        losses = stacked_contrastive_loss(a, b, margin=margin, max_violation=max_violation)
    else:  # ragged batch sizes or another similarity: each model's loss on its own
        per_model = []
        for s, (c2i, size) in enumerate(zip(is_c2i, sizes)):
            if c2i:
                a, b, sim = images[s, :size], captions[s, :size], similarity
            else:
                a, b, sim = captions[s, :size], captions[s, size:2 * size], caption_similarity(similarity)
            per_model.append(contrastive_loss(a, b, margin=margin, max_violation=max_violation,
                                              similarity=sim))
        losses = torch.stack(per_model)
    optimizer.zero_grad()
    losses.sum().backward()
    params = optimizer.params
    embedding = stack.weight(EMBEDDING)
    if embedding.grad is not None:  # the PAD row learns nothing (nn.Embedding's padding_idx)
        embedding.grad[:, PAD_ID] = 0
    # a c2c update has no image term: its image gradient is zero, and Adam must not step it
    image_mask = c2i_mask
    if grad_clip > 0:
        norms = torch.zeros(len(stack), dtype=params[0].dtype, device=device)
        for param in params:
            if param.grad is not None:
                norms += param.grad.detach().pow(2).flatten(1).sum(dim=1)
        scale = (grad_clip / (norms.sqrt() + 1e-6)).clamp(max=1.0)
        for param in params:
            if param.grad is not None:
                param.grad.mul_(scale.view((-1,) + (1,) * (param.grad.ndim - 1)).to(param.grad.dtype))
    active = [image_mask if name in IMAGE_PARAMETERS else None for name in PARAMETERS]
    optimizer.step(active)
    return losses.detach()


def stack_supported(settings: dict) -> str | None:
    """Why runs with ``settings`` cannot share one batched stack (None: they can): the batched
    update implements the ``sampled`` objective."""
    if settings.get("objective", "sampled") != "sampled":
        return f"objective {settings['objective']!r} (the batched update implements 'sampled')"
    return None

