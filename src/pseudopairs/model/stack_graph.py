"""A stack's update at static shapes, captured once per shape as a CUDA graph and replayed.

:func:`pseudopairs.model.stack.stacked_update` builds every update's tensors at that update's own
shapes and dispatches its ~650 kernels from Python. At the paper's shapes on one H200, a stack of
ten spends 21 of its 31 ms per update on the host dispatching them, with the device idle for much
of it (``benchmarks/training.py --stack 10 --profile``). :class:`StaticStackUpdate` runs the same
arithmetic at shapes fixed by a small key, so that on a GPU each key's update is captured once as
a CUDA graph (forward, backward, clipping and Adam step) and then replayed: the host copies the
models' batches into the key's device buffers and launches one graph.

The key is ``(rows, steps, c2i models)``: the batch rows (the largest batch of the update), the
caption steps rounded up to a multiple of :data:`STEP_BUCKET` (padded steps are masked in the
recurrence: a caption's state stops at its last token, so they change nothing), and how many of
the models draw a c2i batch in this update (their images go through their image layers, the
other models' first captions through the GRU — the same passes as ``stacked_update``, with the
models' positions in device buffers). Rows beyond a model's own batch are masked out of its loss
(:func:`~pseudopairs.model.stack.stacked_contrastive_loss` with ``valid``). The optimiser keeps its
state in place (:class:`~pseudopairs.model.stack.StackedAdam`), so a replay reads and writes the
same tensors as the eager step.

Off a GPU (or with ``graphs=False``) the same static-shape function runs eagerly: that is what the
CPU tests compare against ``stacked_update``. A key's first update runs eagerly (the warm-up a
capture needs), and the graph is captured after it; every later update of that key is a replay.
When the stack changes (a model leaves it), :meth:`StaticStackUpdate.reset` drops the graphs.
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from pseudopairs.model.batches import C2CBatch, C2IBatch
from pseudopairs.model.stack import (StackedAdam, StackedRankingModel, padded_captions, padded_features,
                                     stacked_contrastive_loss, step_models)

log = logging.getLogger(__name__)

# caption steps are padded up to a multiple of this: fewer shapes (graphs) against padded steps
# the recurrence computes for nothing. Measured on an H200 (docs/benchmarks.md): with 8, captions
# of 6-18 tokens ran 24 steps and a stack of ten in float32 was slower than without graphs.
STEP_BUCKET = 2


class PinnedStaging:
    """Host-to-device copies of an update's inputs through host buffers kept per shape key —
    pinned (page-locked) on a GPU, so that each copy is asynchronous (a copy from pageable memory
    is staged through a driver buffer, synchronously) and the host goes on drawing the next
    batches while the device copies and computes (``training.pinned_memory``).

    A key's buffers are reused by every update of that key: before they are overwritten, the
    event recorded after their last copies is waited for (by then long finished: the device ran
    the whole update since). Off a GPU (``pin=False``) the same code copies synchronously through
    ordinary buffers — the path the CPU tests run."""

    def __init__(self, device: torch.device, *, pin: bool | None = None) -> None:
        self.device = torch.device(device)
        self.pin = self.device.type == "cuda" if pin is None else bool(pin)
        self._buffers: dict[tuple, dict[str, torch.Tensor]] = {}
        self._done: dict[tuple, object] = {}
        self.waits = 0  # events waited for before a reuse (read by the tests)

    def copy(self, key: tuple, host: dict[str, torch.Tensor], targets: dict[str, torch.Tensor]) -> None:
        """Copy each ``host[name]`` into the device tensor ``targets[name]`` (same shape and
        dtype) through key ``key``'s host buffers."""
        buffers = self._buffers.get(key)
        if buffers is None:
            buffers = {name: torch.empty(value.shape, dtype=value.dtype, pin_memory=self.pin)
                       for name, value in host.items()}
            self._buffers[key] = buffers
        done = self._done.pop(key, None)
        if done is not None:
            done.synchronize()
            self.waits += 1
        for name, value in host.items():
            buffers[name].copy_(value)
            targets[name].copy_(buffers[name], non_blocking=self.pin)
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
            self._done[key] = event

    def clear(self) -> None:
        self._buffers.clear()
        self._done.clear()


class StaticStackUpdate:
    """One update of every model of ``stack`` (as :func:`~pseudopairs.model.stack.stacked_update`:
    each model's batch, drawn by its own trainer, one batched forward and backward, per-model
    clipping, the Adam step) at static shapes; on CUDA with ``graphs`` a replayed graph per shape
    key (module docstring). Cosine similarity only (the batched loss)."""

    def __init__(self, stack: StackedRankingModel, optimizer: StackedAdam, *, margin: float,
                 max_violation: bool, grad_clip: float, similarity: str = "cosine",
                 graphs: bool = True, pinned: bool = False) -> None:
        if similarity != "cosine":
            raise ValueError(f"StaticStackUpdate: similarity {similarity!r} (the batched loss is cosine)")
        self.stack, self.optimizer = stack, optimizer
        self.margin, self.max_violation, self.grad_clip = float(margin), bool(max_violation), float(grad_clip)
        self.graphs = bool(graphs) and stack.device.type == "cuda"
        self._entries: dict[tuple, dict] = {}
        self._pool = None
        self.captures = self.replays = 0  # graphs captured and replayed (read by tests and the benchmark)
        # training.pinned_memory: a replay's inputs through pinned host buffers (GPU only)
        self.staging = PinnedStaging(stack.device) if pinned and self.graphs else None

    def reset(self) -> None:
        """Forget every captured graph and buffer (the stack's tensors were replaced)."""
        self._entries.clear()
        self._pool = None
        if self.staging is not None:
            self.staging.clear()

    # ---- host side ----------------------------------------------------------------------------

    def _host_inputs(self, batches: Sequence[C2IBatch | C2CBatch]) -> tuple[tuple, dict]:
        """The update's key and its inputs as CPU tensors of the key's shapes."""
        if len(batches) != len(self.stack):
            raise ValueError(f"StaticStackUpdate: {len(batches)} batches for {len(self.stack)} models")
        is_c2i = [isinstance(b, C2IBatch) for b in batches]
        c2i_at = [s for s, c in enumerate(is_c2i) if c]
        c2c_at = [s for s, c in enumerate(is_c2i) if not c]
        b_side = [(b.tokens, b.lengths) if c else (b.tokens_b, b.lengths_b) for b, c in zip(batches, is_c2i)]
        a_side = [(batches[s].tokens_a, batches[s].lengths_a) for s in c2c_at]
        sizes = [int(tok.shape[0]) for tok, _ in b_side]
        rows = max(sizes)
        longest = max(int(torch.as_tensor(length).max()) for _, length in b_side + a_side)
        steps = -(-longest // STEP_BUCKET) * STEP_BUCKET
        host = {"valid": torch.arange(rows)[None, :] < torch.tensor(sizes)[:, None],
                "is_c2i": torch.tensor(is_c2i)}
        host["tokens_b"], host["lengths_b"] = padded_captions(*zip(*b_side), rows=rows, steps=steps)
        if c2i_at:
            host["features"] = padded_features([batches[s].features for s in c2i_at], rows=rows)
            host["c2i_index"] = torch.tensor(c2i_at)
        if c2c_at:
            host["tokens_a"], host["lengths_a"] = padded_captions(*zip(*a_side), rows=rows, steps=steps)
            host["c2c_index"] = torch.tensor(c2c_at)
        host["unorder"] = torch.argsort(torch.tensor(c2i_at + c2c_at))  # part rows → model order
        key = (rows, steps, len(c2i_at), str(host["features"].dtype) if c2i_at else None)
        return key, host

    # ---- the update (device side; captured as is) ------------------------------------------------

    def _step(self, x: dict) -> torch.Tensor:
        """The update on device inputs ``x``: the ``(S,)`` losses. No host synchronisation, no
        host→device copy and no tensor of a data-dependent shape (it is captured as a graph)."""
        stack = self.stack
        b_side = stack.encode_captions(x["tokens_b"], x["lengths_b"])
        parts = []
        if "features" in x:
            parts.append(stack.encode_images(x["features"], x["c2i_index"]))
        if "tokens_a" in x:
            parts.append(stack.encode_captions(x["tokens_a"], x["lengths_a"], x["c2c_index"]))
        a_side = torch.cat(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            a_side = a_side.index_select(0, x["unorder"])
        losses = stacked_contrastive_loss(a_side, b_side, margin=self.margin,
                                          max_violation=self.max_violation, valid=x["valid"])
        step_models(stack, self.optimizer, losses, grad_clip=self.grad_clip, is_c2i=x["is_c2i"])
        return losses.detach()

    def __call__(self, batches: Sequence[C2IBatch | C2CBatch]) -> torch.Tensor:
        """Update every model on its batch; the ``(S,)`` detached losses (a tensor of their own,
        not synchronised)."""
        key, host = self._host_inputs(batches)
        device = self.stack.device
        non_blocking = device.type == "cuda"
        entry = self._entries.get(key) if self.graphs else None
        if entry is None:
            inputs = {name: value.to(device, non_blocking=non_blocking) for name, value in host.items()}
            if not self.graphs:
                return self._step(inputs)
            return self._first(key, inputs)
        if self.staging is not None:
            self.staging.copy(key, host, entry["inputs"])
        else:
            for name, value in host.items():
                entry["inputs"][name].copy_(value, non_blocking=True)
        entry["graph"].replay()
        self.replays += 1
        return entry["losses"].clone()

    def _first(self, key: tuple, inputs: dict) -> torch.Tensor:
        """A key's first update: eagerly on a side stream (the warm-up a capture needs), then
        the capture of the key's graph over the same input buffers (capturing runs nothing)."""
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            losses = self._step(inputs)
        current.wait_stream(side)
        losses.record_stream(current)  # read on the current stream after this returns
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                captured = self._step(inputs)
        except RuntimeError as err:  # keep training eagerly rather than fail the run
            log.warning("CUDA graph capture failed (%s); this stack's updates run without graphs", err)
            self.graphs = False
            self.reset()
            return losses
        self._pool = graph.pool()
        self._entries[key] = {"graph": graph, "inputs": inputs, "losses": captured}
        self.captures += 1
        return losses
