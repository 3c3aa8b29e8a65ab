"""The levers of a batched stack on a GPU, each opt-in and tested on the CPU through the code the
GPU runs: bf16 products (training.stack_precision), compiled elementwise kernels in the GRU
(training.stack_compile) and pinned host buffers for each update's inputs
(training.pinned_memory). Off (the default), a stack is the float32 stack of tests/test_stack.py."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_settings
import torch

import pseudopairs.model.stack_training as stack_training
from pseudopairs.model import stacked_gru as gru_module
from pseudopairs.model.settings import TrainingSettings
from pseudopairs.model.stack import StackedAdam, StackedRankingModel, stacked_update
from pseudopairs.model.stack_graph import PinnedStaging, StaticStackUpdate
from pseudopairs.model.stacked_gru import stacked_gru
from pseudopairs.core.settings import SettingsError
from test_stack import _models, _tokens
from test_stack_graph import _batches

torch.set_num_threads(1)


def _gru_inputs(steps, n_models, rows, hidden, *, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    gates_in = torch.randn(steps, n_models, rows, 3 * hidden, generator=gen, dtype=dtype).requires_grad_()
    w_hh = (torch.randn(n_models, 3 * hidden, hidden, generator=gen, dtype=dtype) * 0.5).requires_grad_()
    b_hh = torch.randn(n_models, 3 * hidden, generator=gen, dtype=dtype).requires_grad_()
    return gates_in, w_hh, b_hh


def _float_models():
    return [model.float() for model in _models()]


# ---- bf16 products ----------------------------------------------------------------------------


def test_bf16_products_are_autocasts_products_and_stay_near_float32():
    models = _float_models()
    wide, narrow = StackedRankingModel(models), StackedRankingModel(models)
    narrow.precision = "bf16"
    features = torch.randn(3, 4, 10)
    # the image layer: exactly the bf16 product of bf16-rounded inputs, then float32 unit rows
    weight, bias = narrow.weight("image_projection.weight"), narrow.weight("image_projection.bias")
    x = (features - narrow.image_mean[:, None, :]) / narrow.image_scale[:, None, :]
    by_hand = torch.baddbmm(bias[:, None, :].bfloat16(), x.bfloat16(), weight.transpose(1, 2).bfloat16())
    got = narrow.encode_images(features)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.nn.functional.normalize(by_hand.float(), dim=-1), rtol=0, atol=0)
    assert 0 < float((got - wide.encode_images(features)).abs().max().detach()) < 2e-2
    rng = np.random.default_rng(0)
    pieces = [_tokens(rng, 4, m.vocab_size, lengths=[3, 1, 5, 2]) for m in models]
    tokens, lengths = torch.stack([p[0] for p in pieces]), torch.stack([p[1] for p in pieces])
    captions = narrow.encode_captions(tokens, lengths)
    assert 0 < float((captions - wide.encode_captions(tokens, lengths)).abs().max().detach()) < 3e-2


def test_the_bf16_recurrence_and_its_gradients_stay_near_float32():
    lengths = torch.tensor([[1, 6, 3, 2], [6, 4, 1, 6], [5, 2, 1, 3]])
    inputs = _gru_inputs(6, 3, 4, 8, seed=0)
    upstream = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    results = {}
    for low in (False, True):
        out = stacked_gru(inputs[0], lengths, *inputs[1:], fused=False, low=low)
        results[low] = (out, torch.autograd.grad((out * upstream).sum(), inputs))
    (out32, grads32), (out16, grads16) = results[False], results[True]
    assert not torch.equal(out16, out32)                       # the products were rounded
    torch.testing.assert_close(out16, out32, rtol=0, atol=3e-2)
    for name, g16, g32 in zip(("gates_in", "w_hh", "b_hh"), grads16, grads32):
        scale = float(g32.abs().max())
        assert float((g16 - g32).abs().max()) < 5e-2 * scale, name


def test_bf16_stacked_updates_follow_the_float32_ones():
    """Twelve updates of three models from one initialisation: the bf16 stack's losses stay
    within 3 % of the float32 stack's (and differ: it is not the float32 path)."""
    runs = {}
    for precision in ("float32", "bf16"):
        stack = StackedRankingModel(_float_models())
        stack.precision = precision
        adam = StackedAdam(stack.parameters_in_order(), lr=1e-2)
        rng = np.random.default_rng(3)
        losses = [stacked_update(stack, adam, _batches(rng, _models(), u, dtype=torch.float32), margin=0.2,
                                 max_violation=True, grad_clip=2.0) for u in range(12)]
        runs[precision] = torch.stack(losses)
    assert torch.isfinite(runs["bf16"]).all() and not torch.equal(runs["bf16"], runs["float32"])
    torch.testing.assert_close(runs["bf16"], runs["float32"], rtol=3e-2, atol=1e-3)


# ---- compiled elementwise kernels ---------------------------------------------------------------


def test_the_compiled_gru_equals_the_eager_one_at_two_shapes():
    """torch.compile (inductor's C++ kernels here, Triton on a GPU) of the step's gates and the
    backward's factor blocks: the same outputs and gradients as the op-by-op path to float32
    rounding, at two shapes (compiled once, shapes dynamic)."""
    for steps, rows, seed in ((6, 4, 0), (3, 7, 1)):
        lengths = torch.randint(1, steps + 1, (3, rows), generator=torch.Generator().manual_seed(seed))
        inputs = _gru_inputs(steps, 3, rows, 5, seed=seed)
        upstream = torch.randn(3, rows, 5, generator=torch.Generator().manual_seed(seed + 10))
        eager = stacked_gru(inputs[0], lengths, *inputs[1:], fused=False)
        fast = stacked_gru(inputs[0], lengths, *inputs[1:], fused=False, compile=True)
        torch.testing.assert_close(fast, eager, rtol=1e-5, atol=1e-6)
        for name, g, w in zip(("gates_in", "w_hh", "b_hh"), torch.autograd.grad((fast * upstream).sum(), inputs),
                              torch.autograd.grad((eager * upstream).sum(), inputs)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=name)
    assert set(gru_module._COMPILED) == {"step", "factors"}
    # the factor blocks by themselves: the compiled function and the op-by-op one
    t, s, r, h = 4, 2, 3, 5
    gen = torch.Generator().manual_seed(7)
    r_, z, n, h_n, before = (torch.rand(t, s, r, h, generator=gen) for _ in range(5))
    mask = torch.rand(t, s, r, generator=gen) > 0.3
    torch.testing.assert_close(gru_module.compiled("factors")(mask, r_, z, n, h_n, before),
                               gru_module._eager_factors(mask, r_, z, n, h_n, before), rtol=1e-6, atol=1e-7)


# ---- pinned host buffers ------------------------------------------------------------------------


class _Event:
    def __init__(self):
        self.waited = False

    def synchronize(self):
        self.waited = True


def test_staging_copies_through_reused_buffers_and_waits_before_reuse():
    staging = PinnedStaging(torch.device("cpu"), pin=False)
    targets = {"features": torch.zeros(2, 3), "tokens": torch.zeros(2, 4, dtype=torch.int64)}
    first = {"features": torch.randn(2, 3), "tokens": torch.randint(0, 9, (2, 4))}
    staging.copy(("k",), first, targets)
    assert all(torch.equal(targets[name], first[name]) for name in first)
    buffers = {name: b.data_ptr() for name, b in staging._buffers[("k",)].items()}
    pending = staging._done[("k",)] = _Event()      # as a GPU leaves the copies' event
    second = {"features": torch.randn(2, 3), "tokens": torch.randint(0, 9, (2, 4))}
    staging.copy(("k",), second, targets)
    assert pending.waited and staging.waits == 1     # waited before overwriting the buffers
    assert all(torch.equal(targets[name], second[name]) for name in second)
    assert {name: b.data_ptr() for name, b in staging._buffers[("k",)].items()} == buffers
    staging.clear()
    assert not staging._buffers


def test_pinned_memory_is_a_no_op_off_a_gpu():
    stack = StackedRankingModel(_models()).double()
    update = StaticStackUpdate(stack, StackedAdam(stack.parameters_in_order(), lr=1e-2), margin=0.2,
                               max_violation=True, grad_clip=2.0, pinned=True)
    assert update.staging is None and not update.graphs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned buffers and CUDA graphs need a GPU")
def test_pinned_replays_equal_pageable_replays_on_cuda():
    losses = {}
    for pinned in (False, True):
        stack = StackedRankingModel(_float_models()).cuda()
        update = StaticStackUpdate(stack, StackedAdam(stack.parameters_in_order(), lr=1e-2), margin=0.2,
                                   max_violation=True, grad_clip=2.0, pinned=pinned)
        rng = np.random.default_rng(5)
        batches = [_batches(rng, _models(), u % 2, dtype=torch.float32) for u in range(8)]
        losses[pinned] = torch.stack([update(b) for b in batches]).cpu()
        assert update.replays > 0 and (update.staging is not None) == pinned
    torch.testing.assert_close(losses[True], losses[False], rtol=0, atol=0)


# ---- the settings ----------------------------------------------------------------------------------


def test_the_levers_are_settings_that_default_off(tmp_path, monkeypatch):
    from test_training import SETTINGS, _world

    defaults = TrainingSettings.defaults()
    assert (defaults["stack_precision"], defaults["stack_compile"], defaults["pinned_memory"]) == ("float32", False, False)
    from pseudopairs.model.job import RunSettings

    with pytest.raises(ValueError, match=r"training.stack_precision: must be one of \['float32', 'bf16'\], got 'fp16'"):
        RunSettings.from_dict(run_settings({**SETTINGS, "stack_precision": "fp16"}))
    built = []

    class Recorded(StackedRankingModel):
        def __init__(self, models):
            super().__init__(models)
            built.append(self)

    monkeypatch.setattr(stack_training, "StackedRankingModel", Recorded)
    spec, _ = _world(tmp_path / "world")
    jobs = [{"seed": s, "spec": spec, "out_dir": str(tmp_path / f"s{s}")} for s in (1, 2)]
    summaries = stack_training.train_stack(jobs=jobs, settings=run_settings({**SETTINGS, "max_updates": 12, "stack_compute": "batched",
                                                                "stack_precision": "bf16"}))
    assert [s["updates"] for s in summaries] == [12, 12]
    assert built and all(stack.precision == "bf16" and not stack.compile for stack in built)
    assert all((tmp_path / f"s{s}" / "checkpoint.pt").is_file() for s in (1, 2))


def test_compiling_without_a_c_compiler_fails_at_once(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SettingsError, match="training.stack_compile: torch.compile needs a C compiler"):
        stack_training.check_compiler()
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/gcc" if name == "gcc" else None)
    stack_training.check_compiler()
