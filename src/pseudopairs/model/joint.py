"""Batches of the ``joint`` objective (paper 003; :mod:`pseudopairs.model.objectives` describes the
design): groups of c2i data sets over the same images, and the seeded, resumable sampler that
draws one group and one batch of its images — each with one caption per data set — per update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from pseudopairs.model.batches import (BatchStream, C2CData, C2IData, _rng_state, _set_rng_state,
                                       stream_rng)


@dataclass
class JointBatch:
    """``features``: (B, image_dim) of the batch's images; ``captions[data set] = (tokens, lengths,
    rows)``: one caption of each image that has one in that data set, ``rows`` (ascending, numpy)
    their positions among the B images."""

    features: torch.Tensor
    captions: dict

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "JointBatch":
        return JointBatch(self.features.to(device, non_blocking=non_blocking),
                          {name: (tokens.to(device, non_blocking=non_blocking), lengths, rows)
                           for name, (tokens, lengths, rows) in self.captions.items()})


class JointGroup:
    """The c2i data sets of an experiment over one features array (the same images) and the c2c
    data sets between two of them. Its images: every feature row with at least one caption in
    one of the data sets, ascending."""

    def __init__(self, c2i: Sequence[C2IData], c2c: Sequence[C2CData]) -> None:
        self.datasets = [d.name for d in c2i]
        self.name = "+".join(self.datasets)
        self.features = c2i[0].captions.features
        self.data = {d.name: d for d in c2i}
        self.images = np.unique(np.concatenate([d.captions.feature_rows for d in c2i]))
        if len(self.images) < 2:
            raise ValueError(f"joint group {self.name}: {len(self.images)} image(s); a contrastive "
                             "batch needs at least 2")
        self._captions: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for d in c2i:  # per data set: its caption indices grouped by image position
            pos = np.searchsorted(self.images, d.captions.feature_rows)
            order = np.argsort(pos, kind="stable")
            starts = np.searchsorted(pos[order], np.arange(len(self.images) + 1))
            self._captions[d.name] = (order, starts)
        by_set = {id(d.captions): d.name for d in c2i}
        self.c2c = [(by_set[id(p.a)], by_set[id(p.b)], p.name) for p in c2c]

    def __len__(self) -> int:
        return len(self.images)

    def batch(self, positions: np.ndarray, rng: np.random.Generator) -> JointBatch:
        """The images at ``positions`` (into :attr:`images`) and, per data set in order, one of each
        image's captions drawn uniformly with ``rng``."""
        features = torch.from_numpy(np.asarray(self.features[self.images[positions]], dtype=np.float32))
        captions = {}
        for name in self.datasets:
            order, starts = self._captions[name]
            first, count = starts[positions], starts[positions + 1] - starts[positions]
            rows = np.flatnonzero(count > 0)
            if rows.size == 0:
                continue
            picked = order[first[rows] + rng.integers(0, count[rows])]
            tokens, lengths = self.data[name].captions.tokens.batch(picked)
            captions[name] = (tokens, lengths, rows)
        return JointBatch(features, captions)


def joint_groups(c2i: Sequence[C2IData], c2c: Sequence[C2CData]) -> list[JointGroup]:
    """The c2i data sets grouped by features array (first appearance order), each c2c data set in
    the group that holds both its caption sets."""
    keys: list[int] = []
    members: dict[int, list[C2IData]] = {}
    for d in c2i:
        key = id(d.captions.features)
        if key not in members:
            keys.append(key)
            members[key] = []
        members[key].append(d)
    pairs: dict[int, list[C2CData]] = {key: [] for key in keys}
    for p in c2c:
        home = [key for key in keys
                if {id(p.a), id(p.b)} <= {id(d.captions) for d in members[key]}]
        if not home:
            raise ValueError(f"objective joint: c2c data set {p.name} pairs captions that are not "
                             "both c2i data sets over the same images; joint scores caption–caption "
                             "pairs of the images of one batch only (use objective sampled)")
        pairs[home[0]].append(p)
    return [JointGroup(members[key], pairs[key]) for key in keys]


class JointSampler:
    """Each update: a group uniformly (seeded; no draw with one group), the next batch of its
    image stream and one caption per image and data set (seeded per group); all state saved."""

    def __init__(self, groups: Sequence[JointGroup], *, batch_size: int, seed: int) -> None:
        self.groups = list(groups)
        self.streams = {g.name: BatchStream(len(g), batch_size, rng=stream_rng(seed, f"joint:{g.name}"))
                        for g in self.groups}
        self.caption_rngs = {g.name: stream_rng(seed, f"joint-captions:{g.name}") for g in self.groups}
        self.rng = stream_rng(seed, "joint-groups")

    def next(self) -> tuple[JointGroup, JointBatch]:
        group = self.groups[int(self.rng.integers(len(self.groups)))] if len(self.groups) > 1 else self.groups[0]
        positions = self.streams[group.name].next()
        return group, group.batch(positions, self.caption_rngs[group.name])

    def state_dict(self) -> dict:
        return {"rng": _rng_state(self.rng),
                "streams": {name: s.state_dict() for name, s in self.streams.items()},
                "captions": {name: _rng_state(r) for name, r in self.caption_rngs.items()}}

    def load_state_dict(self, state: dict) -> None:
        if set(state["streams"]) != set(self.streams):
            raise ValueError(f"saved joint groups {sorted(state['streams'])} differ from {sorted(self.streams)}")
        _set_rng_state(self.rng, state["rng"])
        for name, stream in self.streams.items():
            stream.load_state_dict(state["streams"][name])
            _set_rng_state(self.caption_rngs[name], state["captions"][name])


def joint_sampler(trainer, *, c2i: Sequence[C2IData], c2c: Sequence[C2CData], seed: int) -> JointSampler:
    """The ``joint`` objective's setup (:class:`pseudopairs.model.objectives.Objective`)."""
    return JointSampler(joint_groups(c2i, c2c), batch_size=trainer.settings.batch_size, seed=seed)
