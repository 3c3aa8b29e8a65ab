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
  formula), batched over models, with a hand-written backward through time
  (:mod:`pseudopairs.model.stacked_gru`); a caption's state stops changing after its last real
  token, so the final state is the state after the last real token, as with packed sequences.
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
from pseudopairs.model.stacked_gru import stacked_gru
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
        # on a GPU, the GRU step's gates go through PyTorch's fused GRU-cell kernel (the one
        # nn.GRUCell uses there; the same formula); False: the step written out op by op
        self.fused_cell = True
        # training.stack_precision: "bf16" runs the batched products (input projections, image
        # layer, the recurrence) on bfloat16 inputs, as torch.autocast does; training.stack_compile:
        # the GRU's elementwise work as compiled kernels (model/stacked_gru.py). Both off: float32,
        # op by op, equal to separate training
        self.precision = "float32"
        self.compile = False
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

    def _products(self, device: torch.device):
        """The context of the batched products: bf16 autocast with ``precision`` bf16, else none."""
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")

    def _joint(self, x: torch.Tensor) -> torch.Tensor:
        x = F.normalize(x.float() if self.precision == "bf16" else x, dim=-1)
        return x.abs() if self.nonnegative else x

    def _of(self, name: str, models: torch.Tensor | None) -> torch.Tensor:
        """A stacked parameter or buffer, of every model or of the models at ``models``."""
        value = self.weight(name) if name in PARAMETERS else getattr(self, name)
        return value if models is None else value.index_select(0, models)

    def encode_images(self, features: torch.Tensor, models: torch.Tensor | None = None) -> torch.Tensor:
        """``(S, B, image_dim)`` stored features → ``(S, B, joint_dim)`` unit rows (as
        :meth:`RankingModel.encode_images` per model); ``models``: the positions (a long tensor on
        the device) of the models whose features these are, when not all."""
        weight = self._of("image_projection.weight", models)
        features = features.to(device=weight.device, dtype=weight.dtype)
        if self.image_normalization == "l2":
            features = F.normalize(features, dim=-1)
        features = (features - self._of("image_mean", models)[:, None, :]) / self._of("image_scale", models)[:, None, :]
        with self._products(weight.device):
            projected = torch.baddbmm(self._of("image_projection.bias", models)[:, None, :], features,
                                      weight.transpose(1, 2))
        return self._joint(projected)

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor,
                        models: torch.Tensor | None = None) -> torch.Tensor:
        """``(S, R, T)`` padded token ids (each model's own vocabulary) and ``(S, R)`` real lengths
        (≥ 1) → ``(S, R, joint_dim)`` unit rows: the GRU state after each caption's last token;
        ``models`` as for :meth:`encode_images`."""
        n_models, rows, steps = tokens.shape
        embedding = self._of(EMBEDDING, models)
        device = embedding.device
        offsets = torch.arange(n_models, device=device).mul_(self.padded_vocab)[:, None, None]
        flat = embedding.reshape(n_models * self.padded_vocab, -1)
        embedded = F.embedding(tokens.to(device) + offsets, flat)             # (S, R, T, E)
        w_ih, w_hh = self._of("gru.weight_ih_l0", models), self._of("gru.weight_hh_l0", models)
        b_ih, b_hh = self._of("gru.bias_ih_l0", models), self._of("gru.bias_hh_l0", models)
        with self._products(device):
            gates_in = torch.baddbmm(b_ih[:, None, :], embedded.reshape(n_models, rows * steps, -1),
                                     w_ih.transpose(1, 2)).reshape(n_models, rows, steps, -1)
        gates_in = gates_in.permute(2, 0, 1, 3).to(w_hh.dtype).contiguous()  # (T, S, R, 3H)
        lengths = lengths.to(device)
        # the masked recurrence as one autograd Function with a hand-written backward (one
        # weight-gradient product over all steps); on CUDA with fused_cell its forward's gates go
        # through PyTorch's fused GRU-cell kernel
        hidden = stacked_gru(gates_in, lengths, w_hh, b_hh, fused=self.fused_cell and device.type == "cuda",
                             compile=self.compile, low=self.precision == "bf16")
        return self._joint(hidden)


def stacked_contrastive_loss(a: torch.Tensor, b: torch.Tensor, *, margin: float,
                             max_violation: bool = True, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Each model's VSE++ hinge loss under cosine similarity: ``a``, ``b`` of shape ``(S, B, d)``,
    row i of ``a[s]`` matching row i of ``b[s]``; returns ``(S,)`` — model s's
    :func:`~pseudopairs.model.losses.contrastive_loss` of ``a[s]``, ``b[s]``. ``valid``: an
    ``(S, B)`` bool mask of the rows that are items (model s's batch is its valid rows; padding
    rows neither score nor are negatives — the hinge costs are ≥ 0, so zeros leave every maximum
    and sum as over the valid rows alone); None: every row."""
    if a.ndim != 3 or a.shape != b.shape:
        raise ValueError(f"stacked_contrastive_loss: a {tuple(a.shape)} and b {tuple(b.shape)} must "
                         "be stacks of row-aligned matrices of one shape")
    scores = torch.bmm(a, b.transpose(1, 2))
    positive = scores.diagonal(dim1=1, dim2=2).unsqueeze(2)
    cost_b = (margin - positive + scores).clamp(min=0)
    cost_a = (margin - positive + scores.transpose(1, 2)).clamp(min=0)
    off_diagonal = ~torch.eye(scores.shape[1], dtype=torch.bool, device=scores.device)
    if valid is not None:
        off_diagonal = off_diagonal & valid[:, :, None] & valid[:, None, :]
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
            # the state is updated in place: a captured CUDA graph (stack_graph) keeps its addresses
            if mask is None:
                self.exp_avg[k].copy_(exp_avg)
                self.exp_avg_sq[k].copy_(exp_avg_sq)
                param.copy_(new_param)
            else:
                where = mask.view(shape)
                self.exp_avg[k].copy_(torch.where(where, exp_avg, self.exp_avg[k]))
                self.exp_avg_sq[k].copy_(torch.where(where, exp_avg_sq, self.exp_avg_sq[k]))
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


def padded_captions(tokens: list[torch.Tensor], lengths: list[torch.Tensor], *, rows: int | None = None,
                    steps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One caption batch per model, padded to one ``(n, rows, steps)`` block (extra rows: one PAD
    token, length 1 — encoded and never used); ``rows`` / ``steps`` default to the largest batch
    and the longest caption."""
    rows = max(t.shape[0] for t in tokens) if rows is None else rows
    steps = max(int(torch.as_tensor(x).max()) for x in lengths) if steps is None else steps
    out = torch.full((len(tokens), rows, steps), PAD_ID, dtype=torch.int64)
    out_lengths = torch.ones((len(tokens), rows), dtype=torch.int64)
    for s, (tok, length) in enumerate(zip(tokens, lengths)):
        width = min(tok.shape[1], steps)
        out[s, :tok.shape[0], :width] = tok[:, :width]
        out_lengths[s, :tok.shape[0]] = torch.as_tensor(length)
    return out, out_lengths


def padded_features(features: list[torch.Tensor], *, rows: int) -> torch.Tensor:
    """The image features of some models' c2i batches as one ``(n, rows, image_dim)`` block, zero
    rows beyond each batch."""
    out = torch.zeros((len(features), rows, features[0].shape[1]), dtype=features[0].dtype)
    for k, block in enumerate(features):
        out[k, :block.shape[0]] = block
    return out


def stacked_update(stack: StackedRankingModel, optimizer: StackedAdam,
                   batches: Sequence[C2IBatch | C2CBatch], *, margin: float, max_violation: bool,
                   grad_clip: float, similarity: str = "cosine") -> torch.Tensor:
    """One update of each model of ``stack`` on its own batch (``batches[s]``, on the CPU; c2i or
    c2c, drawn by that model's trainer). Returns the ``(S,)`` detached losses (not synchronised).

    Two GRU passes: the caption side every model has (a c2i batch's captions, a c2c batch's
    second captions) for all models, then the first captions of the c2c models only; the images
    of the c2i models through their image layers."""
    if len(batches) != len(stack):
        raise ValueError(f"stacked_update: {len(batches)} batches for {len(stack)} models")
    device = stack.device
    non_blocking = device.type == "cuda"
    is_c2i = [isinstance(b, C2IBatch) for b in batches]
    sizes = [int((b.tokens if c else b.tokens_a).shape[0]) for b, c in zip(batches, is_c2i)]
    c2i_at = [s for s, c in enumerate(is_c2i) if c]
    c2c_at = [s for s, c in enumerate(is_c2i) if not c]

    def on_device(x: torch.Tensor) -> torch.Tensor:
        return x.to(device, non_blocking=non_blocking)

    tokens, lengths = padded_captions([b.tokens if c else b.tokens_b for b, c in zip(batches, is_c2i)],
                                      [b.lengths if c else b.lengths_b for b, c in zip(batches, is_c2i)])
    b_side = stack.encode_captions(on_device(tokens), lengths)
    parts = []
    if c2i_at:
        features = padded_features([batches[s].features for s in c2i_at],
                                   rows=max(sizes[s] for s in c2i_at))
        parts.append(stack.encode_images(on_device(features), on_device(torch.tensor(c2i_at))))
    if c2c_at:
        tokens, lengths = padded_captions([batches[s].tokens_a for s in c2c_at],
                                          [batches[s].lengths_a for s in c2c_at])
        parts.append(stack.encode_captions(on_device(tokens), lengths, on_device(torch.tensor(c2c_at))))
    rows = max(p.shape[1] for p in parts + [b_side])
    parts = [p if p.shape[1] == rows else F.pad(p, (0, 0, 0, rows - p.shape[1])) for p in parts]
    b_side = b_side if b_side.shape[1] == rows else F.pad(b_side, (0, 0, 0, rows - b_side.shape[1]))
    a_side = torch.cat(parts) if len(parts) > 1 else parts[0]
    if c2i_at and c2c_at:  # back into the models' order
        order = torch.as_tensor(c2i_at + c2c_at)
        a_side = a_side.index_select(0, on_device(torch.argsort(order)))
    if len(set(sizes)) == 1 and similarity == "cosine":
        size = sizes[0]
        losses = stacked_contrastive_loss(a_side[:, :size], b_side[:, :size], margin=margin,
                                          max_violation=max_violation)
    else:  # ragged batch sizes or another similarity: each model's loss on its own
        losses = torch.stack([
            contrastive_loss(a_side[s, :size], b_side[s, :size], margin=margin, max_violation=max_violation,
                             similarity=similarity if c2i else caption_similarity(similarity))
            for s, (c2i, size) in enumerate(zip(is_c2i, sizes))])
    step_models(stack, optimizer, losses, grad_clip=grad_clip, is_c2i=on_device(torch.tensor(is_c2i)))
    return losses.detach()


def step_models(stack: StackedRankingModel, optimizer: StackedAdam, losses: torch.Tensor, *,
                grad_clip: float, is_c2i: torch.Tensor) -> None:
    """The end of a stacked update: backward from each model's loss (``(S,)``), no gradient for
    the PAD row, per-model gradient-norm clipping, the Adam step; ``is_c2i``: ``(S,)`` bool on the
    device, the models whose update had an image term (no host synchronisation: a CUDA graph
    captures this)."""
    optimizer.zero_grad()
    losses.sum().backward()
    params = optimizer.params
    embedding = stack.weight(EMBEDDING)
    if embedding.grad is not None:  # the PAD row learns nothing (nn.Embedding's padding_idx)
        embedding.grad[:, PAD_ID] = 0
    if grad_clip > 0:
        norms = torch.zeros(len(stack), dtype=params[0].dtype, device=params[0].device)
        for param in params:
            if param.grad is not None:
                norms += param.grad.detach().pow(2).flatten(1).sum(dim=1)
        scale = (grad_clip / (norms.sqrt() + 1e-6)).clamp(max=1.0)
        for param in params:
            if param.grad is not None:
                param.grad.mul_(scale.view((-1,) + (1,) * (param.grad.ndim - 1)).to(param.grad.dtype))
    # a c2c update has no image term: no image gradient, and Adam must not step the image layer
    optimizer.step([is_c2i if name in IMAGE_PARAMETERS else None for name in PARAMETERS])


def stack_supported(settings) -> str | None:
    """Why runs with ``settings`` (:class:`~pseudopairs.model.job.RunSettings`) cannot share one
    batched stack (None: they can): the batched update implements the ``sampled`` objective and
    the ``gru`` text encoder."""
    if settings.training.objective != "sampled":
        return f"objective {settings.training.objective!r} (the batched update implements 'sampled')"
    if settings.model.text_encoder != "gru":
        return f"text_encoder {settings.model.text_encoder!r} (the batched model implements 'gru')"
    if settings.model.image_layers != 1 or settings.model.text_projection:
        return ("image_layers 2 or text_projection (the batched model implements one image layer "
                "and no text layer)")
    return None

