"""Scenes: a background and groups of objects, drawn from a corpus' distribution by a generator that is a pure function of (seed, corpus, split, index, purpose)."""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, replace
from typing import Sequence

import numpy as np

from pseudopairs.world.content import (BACKGROUNDS, COUNT_PROBS, GROUP_COUNT_PROBS, KIND_WEIGHTS,
                                       KINDS, P_LARGE, RGB, SIZE_FRACTION, kinds_of)
from pseudopairs.world.grammar import CONDITIONS, MATERIALS, ObjectGroup, weighted_index



@dataclass(frozen=True)
class Instance:
    """One drawn object: its group, bounding box (x0, y0, x1, y1; exclusive end) and exact RGB."""

    group: int
    box: tuple[int, int, int, int]
    rgb: tuple[int, int, int]


@dataclass(frozen=True)
class Scene:
    background: str
    background_colour: str
    background_rgb: tuple[int, int, int]
    groups: tuple[ObjectGroup, ...]
    instances: tuple[Instance, ...]
    texture_seed: int  # drives the background's random details (sand grains, clouds …)

    def to_json(self) -> dict:
        objects = []
        for g, group in enumerate(self.groups):
            # unrendered details only where the world has them (the aligned world's manifest
            # stays as it was)
            record = {k: v for k, v in asdict(group).items() if v is not None}
            mine = [inst for inst in self.instances if inst.group == g]
            record["boxes"] = [list(inst.box) for inst in mine]
            record["rgbs"] = [list(inst.rgb) for inst in mine]
            objects.append(record)
        return {"background": self.background, "background_colour": self.background_colour,
                "background_rgb": list(self.background_rgb), "objects": objects,
                "texture_seed": self.texture_seed}


def _stable_code(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def image_rng(seed: int, corpus: str, split: str, index: int, purpose: str) -> np.random.Generator:
    """The generator of one image for one purpose ("scene", "captions.en", "captions.de",
    "task1"): a pure function of its arguments, independent of generation order."""
    entropy = [int(seed), _stable_code(corpus), _stable_code(split), int(index), _stable_code(purpose)]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def _choice(rng: np.random.Generator, names: Sequence[str], weights: Sequence[float]) -> str:
    return names[weighted_index(rng, weights)]


def _jitter(rgb: tuple[int, int, int], rng: np.random.Generator, amount: int) -> tuple[int, int, int]:
    delta = rng.integers(-amount, amount + 1, size=3)
    return tuple(int(v) for v in np.clip(np.asarray(rgb) + delta, 0, 255))


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> int:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(w, 0) * max(h, 0)


def object_extent(kind: str, size: str, image_size: int, scale: float = 1.0) -> tuple[int, int]:
    """(width, height) in pixels of an object: square-equivalent side × √aspect / ÷ √aspect."""
    side = SIZE_FRACTION[size] * image_size * scale
    aspect = KINDS[kind].aspect
    w, h = side * math.sqrt(aspect), side / math.sqrt(aspect)
    shrink = min(1.0, 0.92 * image_size / max(w, h))
    return max(6, int(round(w * shrink))), max(6, int(round(h * shrink)))


def sample_scene(rng: np.random.Generator, *, corpus: str, image_size: int, max_groups: int = 3,
                 max_count: int = 3, max_objects: int = 6) -> Scene:
    """Draw a scene of ``corpus``: background, 1..max_groups groups of distinct kinds, each with a
    colour, size, texture and count, and a non-overlapping-if-possible layout."""
    if corpus not in KIND_WEIGHTS:
        raise ValueError(f"unknown corpus {corpus!r}; expected one of {list(KIND_WEIGHTS)}")
    bg_names = list(BACKGROUNDS)
    background = _choice(rng, bg_names, [BACKGROUNDS[b].weights[corpus] for b in bg_names])
    bg_colours = BACKGROUNDS[background].colours
    background_colour = bg_colours[int(rng.integers(len(bg_colours)))]
    background_rgb = _jitter(RGB[background_colour], rng, 12)

    n_groups = weighted_index(rng, GROUP_COUNT_PROBS[corpus][:max_groups]) + 1
    names = kinds_of(corpus)
    weights = np.array([KIND_WEIGHTS[corpus][k] for k in names], dtype=float)
    order = rng.choice(len(names), size=n_groups, replace=False, p=weights / weights.sum())
    count_p = (COUNT_PROBS + (0.0,) * max(0, max_count - len(COUNT_PROBS)))[:max_count]
    groups = []
    budget = max_objects
    for j, k in enumerate(order):
        kind = names[int(k)]
        visual = KINDS[kind]
        colours = [c for c in visual.colours if c != background_colour]
        colour = colours[int(rng.integers(len(colours)))]
        texture = visual.textures[int(rng.integers(len(visual.textures)))]
        size = "large" if rng.random() < P_LARGE else "small"
        count = weighted_index(rng, count_p) + 1
        count = min(count, budget - (n_groups - j - 1))
        budget -= count
        groups.append(ObjectGroup(kind, colour, size, texture, count))

    # Layout: large objects first; each placed at the least-overlapping of 40 candidate spots.
    order_inst = sorted(((g, c) for g, group in enumerate(groups) for c in range(group.count)),
                        key=lambda gc: (groups[gc[0]].size != "large", gc))
    instances: list[Instance] = []
    for g, _ in order_inst:
        group = groups[g]
        w, h = object_extent(group.kind, group.size, image_size, float(rng.uniform(0.9, 1.1)))
        best, best_cost = None, None
        for _try in range(40):
            x0 = int(rng.integers(0, image_size - w + 1))
            y0 = int(rng.integers(0, image_size - h + 1))
            box = (x0, y0, x0 + w, y0 + h)
            cost = sum(_overlap(box, other.box) for other in instances)
            if best_cost is None or cost < best_cost:
                best, best_cost = box, cost
            if cost == 0:
                break
        instances.append(Instance(g, best, _jitter(RGB[group.colour], rng, 15)))
    texture_seed = int(rng.integers(2**31 - 1))
    return Scene(background, background_colour, background_rgb, tuple(groups), tuple(instances),
                 texture_seed)


def with_unrendered_details(scene: Scene, rng: np.random.Generator) -> Scene:
    """The scene with a condition and a material for each group, drawn from ``rng`` (its own
    stream, so the scene, its rendering and the feature pretraining's scenes are unchanged):
    facts the captions may state and the image does not show."""
    groups = tuple(replace(g, condition=CONDITIONS[int(rng.integers(len(CONDITIONS)))],
                           material=MATERIALS[int(rng.integers(len(MATERIALS)))])
                   for g in scene.groups)
    return replace(scene, groups=groups)
