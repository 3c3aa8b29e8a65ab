"""The static-shape stacked update (model/stack_graph.py): equal to ``stacked_update`` on the CPU
(float64, mixed c2i/c2c models, ragged batches), the masked loss, and on CUDA its replayed graphs
equal to the same update run eagerly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pseudopairs.model.batches import C2CBatch, C2IBatch
from pseudopairs.model.losses import contrastive_loss
from pseudopairs.model.stack import StackedAdam, StackedRankingModel, stacked_contrastive_loss, stacked_update
from pseudopairs.model.stack_graph import STEP_BUCKET, StaticStackUpdate
from test_stack import _models, _tokens

torch.set_num_threads(1)


def _batches(rng, models, update, *, rows=(4, 4, 3), dtype=torch.float64, device="cpu"):
    """One update's batches: model s draws c2c when (update + s) is odd, else c2i; model 2's
    batches have ``rows[2]`` rows (the last, short batch of an epoch)."""
    batches = []
    for s, model in enumerate(models):
        n = rows[s]
        if (update + s) % 2:
            tok_a, len_a = _tokens(rng, n, model.vocab_size, lengths=list(rng.integers(1, 11, n)))
            tok_b, len_b = _tokens(rng, n, model.vocab_size, lengths=list(rng.integers(1, 11, n)))
            batches.append(C2CBatch(tok_a, len_a, tok_b, len_b))
        else:
            tok, length = _tokens(rng, n, model.vocab_size, lengths=list(rng.integers(1, 11, n)))
            batches.append(C2IBatch(torch.randn(n, 10, dtype=dtype), tok, length))
    return batches


def test_the_masked_stacked_loss_is_each_models_loss_over_its_own_rows():
    a = torch.nn.functional.normalize(torch.randn(3, 5, 4, dtype=torch.float64), dim=-1)
    b = torch.nn.functional.normalize(torch.randn(3, 5, 4, dtype=torch.float64), dim=-1)
    sizes = [5, 2, 4]
    valid = torch.arange(5)[None, :] < torch.tensor(sizes)[:, None]
    for max_violation in (True, False):
        got = stacked_contrastive_loss(a, b, margin=0.2, max_violation=max_violation, valid=valid)
        want = [contrastive_loss(a[s, :n], b[s, :n], margin=0.2, max_violation=max_violation)
                for s, n in enumerate(sizes)]
        torch.testing.assert_close(got, torch.stack(want), rtol=0, atol=1e-12)
    # every row valid: the unmasked loss, bit for bit
    full = torch.ones(3, 5, dtype=torch.bool)
    assert torch.equal(stacked_contrastive_loss(a, b, margin=0.2, valid=full),
                       stacked_contrastive_loss(a, b, margin=0.2))


def test_the_static_update_equals_stacked_update_on_mixed_and_ragged_batches():
    """Six updates of three models in float64: steps padded to a multiple of STEP_BUCKET, the
    c2i/c2c split changing every update, one model's batches one row short."""
    stacks, adams = [], []
    for _ in range(2):
        stack = StackedRankingModel(_models()).double()
        stacks.append(stack)
        adams.append(StackedAdam(stack.parameters_in_order(), lr=1e-2))
    static = StaticStackUpdate(stacks[1], adams[1], margin=0.2, max_violation=True, grad_clip=0.5)
    assert not static.graphs  # the CPU runs the static update eagerly
    rng = np.random.default_rng(4)
    keys, models = set(), _models()
    for update in range(6):
        batches = _batches(rng, models, update)
        keys.add(static._host_inputs(batches)[0])
        want = stacked_update(stacks[0], adams[0], batches, margin=0.2, max_violation=True, grad_clip=0.5)
        got = static(batches)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for s in range(3):
        for name, value in stacks[0].model_state(s).items():
            torch.testing.assert_close(stacks[1].model_state(s)[name], value, rtol=0, atol=1e-12, msg=name)
    for k in range(len(adams[0].params)):
        assert torch.equal(adams[0].steps[k], adams[1].steps[k])
        torch.testing.assert_close(adams[1].exp_avg_sq[k], adams[0].exp_avg_sq[k], rtol=0, atol=1e-12)
    # the keys: 4 rows, steps a multiple of the bucket, 1 or 2 c2i models
    assert {k[0] for k in keys} == {4} and all(k[1] % STEP_BUCKET == 0 for k in keys)
    assert {k[2] for k in keys} == {1, 2}


def test_the_static_update_refuses_another_similarity():
    stack = StackedRankingModel(_models())
    with pytest.raises(ValueError, match="similarity 'order'"):
        StaticStackUpdate(stack, StackedAdam(stack.parameters_in_order(), lr=1e-2), margin=0.05,
                          max_violation=True, grad_clip=2.0, similarity="order")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graph_replays_equal_the_static_update_run_eagerly():
    """float32 on the GPU: 12 updates whose keys repeat (replays), then a model leaves the stack
    (graphs reset) and 4 more; losses and weights of the graphed stack against the eager one."""
    stacks, adams, updates = [], [], []
    for graphs in (False, True):
        stack = StackedRankingModel([m.float() for m in _models()]).cuda()
        adam = StackedAdam(stack.parameters_in_order(), lr=1e-3)
        stacks.append(stack)
        adams.append(adam)
        updates.append(StaticStackUpdate(stack, adam, margin=0.2, max_violation=True, grad_clip=2.0,
                                         graphs=graphs))
    assert updates[1].graphs and not updates[0].graphs
    rng = np.random.default_rng(5)
    models = _models()
    for update in range(16):
        if update == 12:
            for stack, adam, step in zip(stacks, adams, updates):
                stack.select([0, 2])
                adam.select([0, 2], stack.parameters_in_order())
                step.reset()
            models = [models[0], models[2]]
        rows = (4, 4, 4) if len(models) == 3 else (4, 3)
        batches = _batches(rng, models, update % 4, rows=rows, dtype=torch.float32)
        want, got = updates[0](batches), updates[1](batches)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert updates[1].graphs and updates[1].captures >= 2 and updates[1].replays >= 8
    for s in range(2):
        for name, value in stacks[0].model_state(s).items():
            torch.testing.assert_close(stacks[1].model_state(s)[name], value, rtol=1e-4, atol=1e-5, msg=name)
