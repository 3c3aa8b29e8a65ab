"""The masked GRU recurrence of a stack of S models, with a hand-written backward (BPTT).

:func:`stacked_gru` runs the recurrence of ``torch.nn.GRU`` (gates r, z, n in PyTorch's order and
formula) over T steps for S models at once, each with R rows::

    r = σ(i_r + h_r)        (i = gates_in[t], the input projections incl. b_ih;
    z = σ(i_z + h_z)         g = h_{t−1} W_hhᵀ + b_hh, split into h_r, h_z, h_n)
    n = tanh(i_n + r ⊙ h_n)
    h' = n + z ⊙ (h_{t−1} − n)                  = (1 − z) ⊙ n + z ⊙ h_{t−1}
    h_t = h' where t < length, else h_{t−1}     (a finished caption's state stops changing)

from h_{−1} = 0, and returns the final state. It is the step loop that
:meth:`pseudopairs.model.stack.StackedRankingModel.encode_captions` ran under autograd, as one
:class:`torch.autograd.Function`, because autograd's handling of that loop cost more GPU time than
its arithmetic: the recurrent weight's gradient was accumulated once per step (a full
``(S, 3H, H)`` read-modify-write each time), each step's select of ``gates_in[t]`` materialised a
zero gradient of the whole ``(T, S, R, 3H)`` input (O(T²) traffic), and the weight gradient was T
small GEMMs.

Backward (m = 1 where t < length else 0; dh = ∂L/∂h_t; the factors below depend on the forward
values only, so they are computed for all steps at once before the loop)::

    dh'      = m ⊙ dh
    dpre_n   = dh' ⊙ (1 − z) ⊙ (1 − n²)              → d(gates_in)_n
    dpre_z   = dh' ⊙ (h_{t−1} − n) ⊙ z ⊙ (1 − z)     → d(gates_in)_z = d(gates_h)_z
    dpre_r   = dpre_n ⊙ h_n ⊙ r ⊙ (1 − r)            → d(gates_in)_r = d(gates_h)_r
    dh_n     = dpre_n ⊙ r                             → d(gates_h)_n
    dh_{t−1} = (1 − m ⊙ (1 − z)) ⊙ dh + d(gates_h)_t · W_hh

so a step of the backward loop is one elementwise product (dh times the step's five factor
blocks, in place) and one ``baddbmm_`` (accumulating into the carry block). Every step's
d(gates_h) stays in one buffer, and after the loop ``dW_hh[s] = Σ_t d(gates_h)[t, s]ᵀ · h_{t−1}[s]``
is ONE batched product over the time-flattened rows; ``db_hh`` is the sum over steps and rows.
d(gates_in) is written once into one preallocated tensor.

On CUDA with ``fused``, the forward's gate arithmetic goes through PyTorch's fused GRU-cell
kernel (``torch.ops.aten._thnn_fused_gru_cell``, the one ``nn.GRUCell`` uses there; same formula)
and the backward recomputes r, z, n from the saved gate pre-activations in a few whole-tensor ops;
the backward itself never calls that kernel's backward.

Two options (``training.stack_compile``, ``training.stack_precision``; both off by default):

- ``compile``: the elementwise work as ``torch.compile``'d kernels (Triton on a GPU, C++ on the
  CPU): each forward step's gates, the new state and the step's records in ONE kernel
  (:func:`_step_gates`, writing into the record buffers), and the backward's five factor blocks
  of all steps in one (:func:`_factors`) instead of about ten whole-tensor passes; a backward step
  stays one elementwise product and one batched product. Same formulas; the compiled kernels may
  contract multiply-adds differently, so results agree with the eager ones to rounding (tested).
- ``low``: the recurrent products ``h·W_hhᵀ`` (forward) and ``d(gates_h)·W_hh`` and the weight
  gradient (backward) take bfloat16 inputs (as ``torch.autocast`` would: products rounded to
  bfloat16); the gate arithmetic, the state and every accumulation stay float32.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

# the backward's factor blocks, in the order they sit in its (S, T, R, 5, H) buffer: d(gates_h)
# is blocks 1–3 (r, z, n_h) — one strided (S, R, 3H) matrix per step for the bmm with W_hh
_N_IN, _R, _Z, _N_H, _CARRY = range(5)


def _fused_available(gates_in: torch.Tensor, fused: bool) -> bool:
    return bool(fused) and gates_in.is_cuda


# ---- the elementwise work, eager or compiled --------------------------------------------------


def _step_gates(gates_in_t: torch.Tensor, g: torch.Tensor, hidden: torch.Tensor, mask_t: torch.Tensor,
                new_t: torch.Tensor, target: torch.Tensor) -> None:
    """One forward step's gate arithmetic (module docstring) on ``g`` = h·W_hhᵀ + b_hh: writes r, z
    into ``g``'s first two thirds, n into ``new_t`` and the next state into ``target``."""
    h = hidden.shape[-1]
    rz = torch.sigmoid(g[..., :2 * h] + gates_in_t[..., :2 * h])
    n = torch.tanh(gates_in_t[..., 2 * h:] + rz[..., :h] * g[..., 2 * h:])
    stepped = n + rz[..., h:] * (hidden - n)
    g[..., :2 * h].copy_(rz)
    new_t.copy_(n)
    target.copy_(torch.where(mask_t[..., None], stepped, hidden))


def _factors(mask: torch.Tensor, r: torch.Tensor, z: torch.Tensor, n: torch.Tensor, h_n: torch.Tensor,
             before: torch.Tensor) -> torch.Tensor:
    """The backward's five factor blocks of every step as one ``(S, T, R, 5, H)`` tensor (module
    docstring; block order :data:`_N_IN`, :data:`_R`, :data:`_Z`, :data:`_N_H`, :data:`_CARRY`)."""
    m = mask.to(r.dtype).unsqueeze(-1)
    mz = m * (1 - z)
    a_n = mz - (mz * n) * n
    blocks = torch.stack([a_n, (a_n * h_n) * (r - r * r), (before - n) * z * mz, a_n * r, 1 - mz], dim=-2)
    return blocks.permute(1, 0, 2, 3, 4).contiguous()


_COMPILED: dict = {}


def compiled(name: str):
    """``torch.compile`` of :func:`_step_gates` (``"step"``) or :func:`_factors` (``"factors"``),
    once per process, shapes dynamic: one kernel for every stack size, batch and caption length."""
    if name not in _COMPILED:
        functions = {"step": _step_gates, "factors": _factors}
        _COMPILED[name] = torch.compile(functions[name], dynamic=True, fullgraph=True)
    return _COMPILED[name]


def _fused_cell(gates_in: torch.Tensor, gates_h: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """PyTorch's fused GRU-cell kernel (CUDA): ``(N, 3H)``, ``(N, 3H)``, ``(N, H)`` → the next
    state ``(N, H)`` (its workspace is not used)."""
    return torch.ops.aten._thnn_fused_gru_cell(gates_in, gates_h, hidden)[0]


class StackedGRU(torch.autograd.Function):
    """``(gates_in, lengths, w_hh, b_hh, fused)`` → the final hidden state ``(S, R, H)``; see the
    module docstring. ``gates_in``: ``(T, S, R, 3H)``; ``lengths``: ``(S, R)`` int64 on the
    device; ``w_hh``: ``(S, 3H, H)``; ``b_hh``: ``(S, 3H)``."""

    @staticmethod
    def forward(ctx, gates_in: torch.Tensor, lengths: torch.Tensor, w_hh: torch.Tensor,
                b_hh: torch.Tensor, fused: bool, compile_: bool = False, low: bool = False) -> torch.Tensor:
        steps, n_models, rows, width = gates_in.shape
        hidden_size = width // 3
        if width != 3 * hidden_size or w_hh.shape != (n_models, width, hidden_size) \
                or b_hh.shape != (n_models, width) or lengths.shape != (n_models, rows):
            raise ValueError(f"stacked_gru: gates_in {tuple(gates_in.shape)}, lengths "
                             f"{tuple(lengths.shape)}, w_hh {tuple(w_hh.shape)}, b_hh "
                             f"{tuple(b_hh.shape)} do not fit (T, S, R, 3H), (S, R), (S, 3H, H), (S, 3H)")
        use_fused = _fused_available(gates_in, fused) and not compile_
        h2 = 2 * hidden_size
        lengths = lengths.to(gates_in.device)
        # mask[t, s, r]: step t is a real token of caption (s, r)
        mask = lengths.unsqueeze(0) > torch.arange(steps, device=gates_in.device)[:, None, None]
        # the forward's record: gates_h of every step (non-fused: its r and z thirds replaced by
        # r and z once computed; h_n stays), n of every step (non-fused), h_{t−1} of every step
        gates_h = gates_in.new_empty((steps, n_models, rows, width))
        new = None if use_fused else gates_in.new_empty((steps, n_models, rows, hidden_size))
        before = gates_in.new_empty((steps, n_models, rows, hidden_size))
        out = gates_in.new_empty((n_models, rows, hidden_size))
        if steps:
            before[0].zero_()
        else:
            out.zero_()
        w_hh_t, bias = w_hh.transpose(1, 2), b_hh[:, None, :]
        w_low = w_hh_t.to(torch.bfloat16) if low else None
        step = compiled("step") if compile_ else None
        for t in range(steps):
            hidden = before[t]
            target = before[t + 1] if t + 1 < steps else out
            g = gates_h[t]
            if low:  # the product in bfloat16 (rounded as autocast rounds it), the bias in float32
                torch.add(torch.bmm(hidden.to(torch.bfloat16), w_low), bias, out=g)
            else:
                torch.baddbmm(bias, hidden, w_hh_t, out=g)
            if step is not None:  # one compiled kernel: gates, records and the next state
                step(gates_in[t], g, hidden, mask[t], new[t], target)
                continue
            if use_fused:  # one launch for the gate arithmetic
                stepped = _fused_cell(gates_in[t].reshape(n_models * rows, width),
                                      g.view(n_models * rows, width),
                                      hidden.view(n_models * rows, hidden_size))
                stepped = stepped.view(n_models, rows, hidden_size)
            else:
                rz = g[..., :h2]
                rz.add_(gates_in[t, ..., :h2]).sigmoid_()                   # r, z
                n = new[t]
                torch.addcmul(gates_in[t, ..., h2:], rz[..., :hidden_size], g[..., h2:], out=n)
                n.tanh_()
                stepped = torch.addcmul(n, rz[..., hidden_size:], hidden - n)  # n + z·(h − n)
            torch.where(mask[t, :, :, None], stepped, hidden, out=target)
        ctx.use_fused, ctx.compile, ctx.low = use_fused, bool(compile_), bool(low)
        ctx.save_for_backward(gates_in if use_fused else None, w_hh, mask, gates_h, new, before)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        gates_in, w_hh, mask, gates_h, new, before = ctx.saved_tensors
        need_in, _, need_w, need_b = ctx.needs_input_grad[:4]
        steps, n_models, rows, width = gates_h.shape
        hidden_size = width // 3
        h2 = 2 * hidden_size
        if steps == 0:
            return (gates_h.new_zeros(gates_h.shape) if need_in else None, None,
                    torch.zeros_like(w_hh) if need_w else None,
                    w_hh.new_zeros((n_models, width)) if need_b else None, None, None, None)
        h_n = gates_h[..., h2:]
        if ctx.use_fused:  # recompute r, z, n from the saved pre-activations (whole tensors)
            rz = torch.sigmoid(gates_h[..., :h2] + gates_in[..., :h2])
            r, z = rz[..., :hidden_size], rz[..., hidden_size:]
            del rz
            n = torch.addcmul(gates_in[..., h2:], r, h_n).tanh_()
        else:
            r, z, n = gates_h[..., :hidden_size], gates_h[..., hidden_size:h2], new
        # the five factor blocks of every step, (S, T, R, 5, H), multiplied by dh in place by the
        # loop: one compiled kernel, or op by op
        factors = (compiled("factors") if ctx.compile else _eager_factors)(mask, r, z, n, h_n, before)
        del r, z, n, h_n

        dh = grad_out
        w_low = w_hh.to(torch.bfloat16) if ctx.low else None
        for t in range(steps - 1, -1, -1):
            block = factors[:, t]                                            # (S, R, 5, H)
            block.mul_(dh.unsqueeze(2))
            if t:  # dh_{t−1} = carry ⊙ dh + d(gates_h)_t · W_hh, accumulated in the carry block
                d_gates_h = block[:, :, _R:_CARRY].reshape(n_models, rows, width)
                if w_low is not None:
                    dh = block[:, :, _CARRY].add_(torch.bmm(d_gates_h.to(torch.bfloat16), w_low))
                else:
                    dh = block[:, :, _CARRY].baddbmm_(d_gates_h, w_hh)

        d_gates_h = factors[:, :, :, _R:_CARRY].reshape(n_models, steps * rows, width)
        grad_w = grad_b = grad_in = None
        if need_w:  # ONE product over all steps: Σ_t d(gates_h)_tᵀ · h_{t−1}
            flat_before = before.permute(1, 0, 2, 3).reshape(n_models, steps * rows, hidden_size)
            if ctx.low:
                grad_w = torch.bmm(d_gates_h.transpose(1, 2).to(torch.bfloat16),
                                   flat_before.to(torch.bfloat16)).to(w_hh.dtype)
            else:
                grad_w = torch.bmm(d_gates_h.transpose(1, 2), flat_before)
        if need_b:
            grad_b = d_gates_h.sum(dim=1)
        if need_in:
            # written once, in (S, R, T, 3H) memory order (the order a caller that permuted
            # (S, R, T, 3H) input projections into (T, S, R, 3H) needs back), returned as
            # (T, S, R, 3H)
            grad = gates_h.new_empty((n_models, rows, steps, 3, hidden_size))
            g = grad.permute(0, 2, 1, 3, 4)                                  # (S, T, R, 3, H)
            g[..., :2, :].copy_(factors[..., _R:_N_H, :])
            g[..., 2, :].copy_(factors[..., _N_IN, :])
            grad_in = grad.view(n_models, rows, steps, width).permute(2, 0, 1, 3)
        return grad_in, None, grad_w, grad_b, None, None, None


def _eager_factors(mask, r, z, n, h_n, before) -> torch.Tensor:
    """:func:`_factors` op by op: the five factor blocks of every step, ``(S, T, R, 5, H)``, filled
    through a ``(T, S, R, 5, H)`` view."""
    steps, n_models, rows, hidden_size = before.shape
    factors = before.new_empty((n_models, steps, rows, 5, hidden_size))
    f = factors.permute(1, 0, 2, 3, 4)
    m = mask.to(before.dtype).unsqueeze(-1)                              # (T, S, R, 1)
    mz = m * (1 - z)                                                     # m ⊙ (1 − z)
    torch.neg(mz, out=f[..., _CARRY, :]).add_(1)                         # 1 − m(1 − z)
    a_n = torch.addcmul(mz, mz * n, n, value=-1, out=f[..., _N_IN, :])   # m(1 − z)(1 − n²)
    torch.mul(a_n, r, out=f[..., _N_H, :])
    torch.mul(a_n, h_n, out=f[..., _R, :]).mul_(torch.addcmul(r, r, r, value=-1))
    torch.sub(before, n, out=f[..., _Z, :]).mul_(z).mul_(mz)             # m(h − n) z(1 − z)
    return factors


def stacked_gru(gates_in: torch.Tensor, lengths: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor,
                *, fused: bool, compile: bool = False, low: bool = False) -> torch.Tensor:
    """The final hidden state ``(S, R, H)`` of the masked GRU recurrence (module docstring) over
    ``gates_in`` ``(T, S, R, 3H)`` (input projections incl. ``b_ih``) for rows of ``lengths``
    ``(S, R)`` with recurrent weights ``w_hh`` ``(S, 3H, H)`` and ``b_hh`` ``(S, 3H)``, from a zero
    initial state. ``fused``: on CUDA, use PyTorch's fused GRU-cell kernel for the forward's gates
    (ignored elsewhere, and when ``compile``); ``compile``: the elementwise work as compiled
    kernels; ``low``: the recurrent products in bfloat16 (module docstring)."""
    return StackedGRU.apply(gates_in, lengths, w_hh, b_hh, bool(fused), bool(compile), bool(low))
