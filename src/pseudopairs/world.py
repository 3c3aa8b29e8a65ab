"""The offline demo world (DESIGN §5): rendered scenes of coloured objects with English and German
captions from a grammar (:mod:`pseudopairs.world_grammar`).

Two corpora:

- ``m30k``: Multi30K-like; per image 5 English + 5 German captions drawn independently
  (comparable, like task2), plus ``m30k_task1``: one English caption and its exact German
  translation per image (parallel, like task1), over the same images;
- ``coco``: COCO-like, English only, scenes from a shifted distribution: some object kinds occur
  only in ``coco`` (kite, fish), some only in ``m30k`` (flag, egg), and the proportions of kinds and
  backgrounds differ.

The random-weight ResNet50 used for the demo's features keeps colour well, shape weakly and
position not at all, so every kind has a characteristic silhouette and aspect ratio, a small set
of textures and a palette, objects are drawn large, and captions talk about kind, colour, size,
texture, count and background, never positions.

Everything is a pure function of the seed: each image draws from its own generator derived from
(seed, corpus, split, index, purpose), so results do not depend on generation order or on the
sizes of other splits.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
import zlib
from dataclasses import asdict, dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFilter
from tqdm import tqdm

from pseudopairs import cli
from pseudopairs.io import (IMAGE_COLUMNS, RAW_CAPTION_COLUMNS, atomic_path, write_parquet_atomic,
                            write_text_atomic)
from pseudopairs.world_grammar import (BACKGROUND_PHRASES, KIND_NOUNS, CaptionSpec, ObjectGroup,
                                       realise, sample_caption_spec, weighted_index)

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
CORPORA = ("m30k", "coco")
TASK1 = "m30k_task1"
PARALLEL_SPLITS = ("train", "val")  # the parallel text of the demo MT model
LANG_ORDER = ("de", "en")  # rows within an image: languages in sorted order

# --------------------------------------------------------------------------------------------
# The world's content
# --------------------------------------------------------------------------------------------

RGB: dict[str, tuple[int, int, int]] = {
    "red": (200, 35, 35), "blue": (40, 75, 200), "green": (40, 150, 50),
    "yellow": (235, 205, 35), "purple": (135, 50, 165), "orange": (235, 125, 25),
    "white": (240, 240, 240), "black": (30, 30, 30), "grey": (125, 125, 130),
    "brown": (125, 80, 45),
}


@dataclass(frozen=True)
class KindVisual:
    aspect: float  # width / height of the bounding box
    textures: tuple[str, ...]
    colours: tuple[str, ...]


KINDS: dict[str, KindVisual] = {
    "box": KindVisual(1.0, ("striped", "checkered"), ("red", "blue", "yellow", "orange", "white")),
    "ball": KindVisual(1.0, ("dotted", "plain", "striped"), ("red", "blue", "yellow", "green", "orange")),
    "tower": KindVisual(0.42, ("checkered", "plain"), ("white", "black", "purple", "red", "blue")),
    "flag": KindVisual(1.35, ("striped", "plain"), ("red", "blue", "green", "yellow", "white")),
    "kite": KindVisual(0.75, ("checkered", "plain"), ("red", "yellow", "purple", "orange", "green")),
    "star": KindVisual(1.0, ("plain", "dotted"), ("yellow", "white", "orange", "purple", "red")),
    "tent": KindVisual(1.35, ("striped", "plain"), ("green", "orange", "blue", "yellow", "red")),
    "egg": KindVisual(0.75, ("dotted", "plain"), ("white", "yellow", "blue", "green", "purple")),
    "ring": KindVisual(1.0, ("plain", "striped"), ("black", "yellow", "purple", "red", "blue")),
    "fish": KindVisual(1.8, ("dotted", "striped"), ("orange", "blue", "yellow", "green", "purple")),
    "house": KindVisual(0.85, ("plain", "checkered"), ("red", "white", "yellow", "blue", "black")),
    "bottle": KindVisual(0.4, ("plain", "striped"), ("green", "blue", "black", "purple", "white")),
}

# Relative frequency of each kind per corpus; a kind absent from a corpus never occurs there.
KIND_WEIGHTS: dict[str, dict[str, float]] = {
    "m30k": {"box": 3, "ball": 3, "tower": 2, "star": 2, "tent": 2, "ring": 1, "house": 1,
             "bottle": 1, "flag": 3, "egg": 3},
    "coco": {"box": 1, "ball": 2, "tower": 2, "star": 1, "tent": 1, "ring": 3, "house": 3,
             "bottle": 3, "kite": 3, "fish": 3},
}


@dataclass(frozen=True)
class BackgroundVisual:
    colours: tuple[str, ...]  # colour names it may have (the caption adjective)
    weights: Mapping[str, float]  # relative frequency per corpus


BACKGROUNDS: dict[str, BackgroundVisual] = {
    "lawn": BackgroundVisual(("green",), {"m30k": 3, "coco": 1}),
    "beach": BackgroundVisual(("yellow",), {"m30k": 3, "coco": 1}),
    "snow": BackgroundVisual(("white",), {"m30k": 2, "coco": 1}),
    "water": BackgroundVisual(("blue",), {"m30k": 2, "coco": 1}),
    "road": BackgroundVisual(("grey",), {"m30k": 1, "coco": 3}),
    "carpet": BackgroundVisual(("red", "purple", "blue", "green"), {"m30k": 1, "coco": 2}),
    "wall": BackgroundVisual(("red", "grey"), {"m30k": 1, "coco": 2}),
    "sky": BackgroundVisual(("blue",), {"m30k": 1, "coco": 2}),
    "floor": BackgroundVisual(("brown",), {"m30k": 1, "coco": 3}),
}

# Number of object groups (distinct kinds) per scene: probabilities of 1, 2, 3 groups.
GROUP_COUNT_PROBS = {"m30k": (0.3, 0.45, 0.25), "coco": (0.25, 0.4, 0.35)}
COUNT_PROBS = (0.55, 0.3, 0.15)  # objects per group: 1, 2, 3, …
P_LARGE = 0.55
SIZE_FRACTION = {"large": 0.46, "small": 0.27}  # side of a square-equivalent box / image side


def kinds_of(corpus: str) -> list[str]:
    return [k for k, w in KIND_WEIGHTS[corpus].items() if w > 0]


def _check_tables() -> None:
    for corpus, weights in KIND_WEIGHTS.items():
        for kind in weights:
            if kind not in KINDS or kind not in KIND_NOUNS:
                raise RuntimeError(f"kind {kind!r} of {corpus} lacks a visual or a lexicon entry")
    for bg in BACKGROUNDS:
        if bg not in BACKGROUND_PHRASES:
            raise RuntimeError(f"background {bg!r} has no phrases")


_check_tables()


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorldSettings:
    seed: int
    images: Mapping[str, Mapping[str, int]]  # corpus -> split -> number of images
    image_size: int = 112
    captions_per_image: int = 5
    max_groups: int = 3  # distinct kinds per scene (captions mention 1..min(3, groups))
    max_count: int = 3  # objects per group
    max_objects: int = 6  # objects per scene
    # sentence pairs (English, exact German translation) of the parallel text for the demo's
    # machine translation model: split -> number of pairs (none by default)
    parallel: Mapping[str, int] = dataclass_field(default_factory=dict)

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any]) -> "WorldSettings":
        if not isinstance(settings, Mapping):
            raise ValueError("world settings must be a JSON object")
        known = {"seed", "images", "image_size", "captions_per_image", "max_groups", "max_count",
                 "max_objects", "parallel"}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(f"world: unknown key(s) {unknown}; known: {sorted(known)}")
        for key in ("seed", "images"):
            if key not in settings:
                raise ValueError(f"world: missing required key '{key}'")

        def integer(key: str, value: Any, low: int, high: int | None = None) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"world.{key} must be an integer, got {value!r}")
            if value < low or (high is not None and value > high):
                raise ValueError(f"world.{key} must be in [{low}, {high if high is not None else '∞'}], got {value}")
            return value

        images = settings["images"]
        if not isinstance(images, Mapping) or not images:
            raise ValueError("world.images must map corpus names to {train, val, test} sizes")
        parsed: dict[str, dict[str, int]] = {}
        for corpus, sizes in images.items():
            if corpus not in CORPORA:
                raise ValueError(f"world.images: unknown corpus {corpus!r}; expected {list(CORPORA)}")
            if not isinstance(sizes, Mapping) or set(sizes) != set(SPLITS):
                raise ValueError(f"world.images.{corpus} must have exactly the keys {list(SPLITS)}")
            parsed[corpus] = {s: integer(f"images.{corpus}.{s}", sizes[s], 1, 999_999) for s in SPLITS}
        parallel = settings.get("parallel", {})
        if not isinstance(parallel, Mapping) or not set(parallel) <= set(PARALLEL_SPLITS):
            raise ValueError(f"world.parallel must map some of {list(PARALLEL_SPLITS)} to numbers of "
                             f"sentence pairs, got {parallel!r}")
        out = cls(
            parallel={s: integer(f"parallel.{s}", parallel[s], 1, 9_999_999) for s in PARALLEL_SPLITS
                      if s in parallel},
            seed=integer("seed", settings["seed"], 0),
            images=parsed,
            image_size=integer("image_size", settings.get("image_size", 112), 32, 1024),
            captions_per_image=integer("captions_per_image", settings.get("captions_per_image", 5), 1, 10),
            max_groups=integer("max_groups", settings.get("max_groups", 3), 1, 3),
            max_count=integer("max_count", settings.get("max_count", 3), 1, 9),
            max_objects=integer("max_objects", settings.get("max_objects", 6), 1, 27),
        )
        if out.max_objects < out.max_groups:
            raise ValueError(f"world.max_objects ({out.max_objects}) must be ≥ world.max_groups ({out.max_groups})")
        return out


# --------------------------------------------------------------------------------------------
# Scenes
# --------------------------------------------------------------------------------------------


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
            record = asdict(group)
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


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _shade(rgb: Sequence[int], factor: float) -> tuple[int, int, int]:
    """factor < 1 darkens, > 1 lightens towards white."""
    out = [v * factor if factor <= 1 else v + (255 - v) * (factor - 1) for v in rgb]
    return tuple(min(255, max(0, int(round(v)))) for v in out)


def _contrast(rgb: Sequence[int]) -> tuple[int, int, int]:
    """Pattern colour for a textured object: darker for light colours, lighter for dark ones."""
    luminance = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    return _shade(rgb, 0.5) if luminance > 90 else _shade(rgb, 1.55)


def render_background(background: str, rgb: tuple[int, int, int], *, image_size: int,
                      texture_seed: int) -> Image.Image:
    """The background image: each kind has its own characteristic pattern."""
    s = image_size
    rng = np.random.default_rng(texture_seed)
    img = Image.new("RGB", (s, s), rgb)
    draw = ImageDraw.Draw(img)
    u = max(1, s // 16)
    if background == "lawn":  # mown stripes plus blades
        for i, x in enumerate(range(0, s, 2 * u)):
            if i % 2:
                draw.rectangle([x, 0, x + 2 * u - 1, s], fill=_shade(rgb, 0.85))
        for _ in range(s // 3):
            x, y = (int(v) for v in rng.integers(0, s, size=2))
            draw.line([x, y, x + int(rng.integers(-1, 2)), y - u], fill=_shade(rgb, 0.65))
    elif background == "beach":  # sand grains
        for _ in range(s // 2):
            x, y = (int(v) for v in rng.integers(0, s, size=2))
            draw.point((x, y), fill=_shade(rgb, 0.7))
    elif background == "snow":  # bluish drifts and flakes
        for y in range(0, s, 3 * u):
            draw.arc([-u, y, s + u, y + 3 * u], 0, 180, fill=(200, 210, 230))
        for _ in range(s // 4):
            x, y = (int(v) for v in rng.integers(0, s, size=2))
            draw.point((x, y), fill=(190, 205, 230))
    elif background == "water":  # waves
        phase = float(rng.uniform(0, 2 * math.pi))
        for y0 in range(u, s, 2 * u):
            pts = [(x, y0 + 0.6 * u * math.sin(phase + x * 2 * math.pi / (4 * u))) for x in range(0, s + 1, 2)]
            draw.line(pts, fill=_shade(rgb, 1.35), width=max(1, u // 3))
    elif background == "road":  # asphalt with edge lines and a dashed centre line
        draw.rectangle([0, 0, s, u], fill=_shade(rgb, 1.4))
        draw.rectangle([0, s - u, s, s], fill=_shade(rgb, 1.4))
        y = s // 2
        for x in range(int(rng.integers(0, 4 * u)) - 4 * u, s, 4 * u):
            draw.rectangle([x, y - u // 3, x + 2 * u, y + u // 3], fill=(235, 235, 235))
    elif background == "carpet":  # diamond lattice
        step = 4 * u
        for c in range(-s, 2 * s, step):
            draw.line([c, 0, c + s, s], fill=_shade(rgb, 0.6), width=max(1, u // 2))
            draw.line([c, 0, c - s, s], fill=_shade(rgb, 0.6), width=max(1, u // 2))
    elif background == "wall":  # bricks and mortar
        bh, bw = 2 * u, 4 * u
        mortar = (215, 210, 200)
        for r, y in enumerate(range(0, s, bh)):
            draw.line([0, y, s, y], fill=mortar, width=max(1, u // 3))
            offset = (bw // 2) * (r % 2)
            for x in range(-offset, s, bw):
                draw.line([x, y, x, y + bh], fill=mortar, width=max(1, u // 3))
    elif background == "sky":  # vertical gradient and clouds
        arr = np.empty((s, s, 3), dtype=np.float32)
        t = np.linspace(0.0, 1.0, s, dtype=np.float32)[:, None]
        top, bottom = np.asarray(_shade(rgb, 0.8), np.float32), np.asarray(_shade(rgb, 1.5), np.float32)
        arr[:] = (top * (1 - t) + bottom * t)[:, None, :]
        img = Image.fromarray(arr.round().astype(np.uint8), "RGB")
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(1, 3))):
            cx, cy = int(rng.integers(0, s)), int(rng.integers(0, s // 2))
            for dx in (-2 * u, 0, 2 * u):
                draw.ellipse([cx + dx - 2 * u, cy - u - abs(dx) // 3, cx + dx + 2 * u, cy + u],
                             fill=(250, 250, 252))
    elif background == "floor":  # planks
        ph = 3 * u
        for r, y in enumerate(range(0, s, ph)):
            draw.rectangle([0, y, s, y + ph], fill=_shade(rgb, 0.9 + 0.2 * ((r * 7) % 3) / 2))
            draw.line([0, y, s, y], fill=_shade(rgb, 0.5))
            x = int(rng.integers(0, s))
            draw.line([x, y, x, y + ph], fill=_shade(rgb, 0.5))
    else:
        raise ValueError(f"unknown background {background!r}")
    return img


def shape_mask(kind: str, w: int, h: int) -> Image.Image:
    """The kind's silhouette as an ``L`` mask of size (w, h) (255 inside)."""
    m = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(m)
    W, H = w - 1, h - 1
    if kind == "box":
        d.rectangle([0, 0, W, H], fill=255)
    elif kind in ("ball", "egg"):
        d.ellipse([0, 0, W, H], fill=255)
    elif kind == "tower":  # body with three merlons
        top = round(0.15 * H)
        d.rectangle([0, top, W, H], fill=255)
        for i in range(3):
            x0 = round(i * W * 2 / 5)
            d.rectangle([x0, 0, x0 + round(W / 5), top], fill=255)
    elif kind == "flag":  # cloth on the upper part, pole drawn as a detail
        d.rectangle([round(0.12 * W), 0, W, round(0.62 * H)], fill=255)
    elif kind == "kite":
        d.polygon([(W / 2, 0), (W, 0.4 * H), (W / 2, H), (0, 0.4 * H)], fill=255)
    elif kind == "star":
        pts = []
        for i in range(10):
            r = 0.5 if i % 2 == 0 else 0.21
            a = -math.pi / 2 + i * math.pi / 5
            pts.append((W / 2 + r * W * math.cos(a), H * 0.55 + r * H * 1.05 * math.sin(a)))
        d.polygon(pts, fill=255)
    elif kind == "tent":
        d.polygon([(W / 2, 0), (W, H), (0, H)], fill=255)
    elif kind == "ring":
        d.ellipse([0, 0, W, H], fill=255)
        d.ellipse([0.27 * W, 0.27 * H, 0.73 * W, 0.73 * H], fill=0)
    elif kind == "fish":
        d.ellipse([0, 0.1 * H, 0.75 * W, 0.9 * H], fill=255)
        d.polygon([(0.66 * W, 0.5 * H), (W, 0.05 * H), (W, 0.95 * H)], fill=255)
    elif kind == "house":
        d.rectangle([0.08 * W, 0.45 * H, 0.92 * W, H], fill=255)
        d.polygon([(0, 0.5 * H), (W / 2, 0), (W, 0.5 * H)], fill=255)
    elif kind == "bottle":
        d.rectangle([0, 0.4 * H, W, H], fill=255)
        d.ellipse([0, 0.28 * H, W, 0.52 * H], fill=255)
        d.rectangle([0.32 * W, 0, 0.68 * W, 0.36 * H], fill=255)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return m


_STRIPE_DIRECTION = {"flag": "h", "ring": "h", "bottle": "h", "tent": "d", "ball": "h"}


def texture_patch(kind: str, texture: str, rgb: tuple[int, int, int], w: int, h: int) -> np.ndarray:
    """(h, w, 3) uint8 fill for an object: its colour with the texture in a contrasting shade."""
    yy, xx = np.mgrid[0:h, 0:w]
    period = max(4, round(min(w, h) / 4))
    if texture == "plain":
        pattern = np.zeros((h, w), dtype=bool)
    elif texture == "striped":
        direction = _STRIPE_DIRECTION.get(kind, "v")
        coord = {"h": yy, "v": xx, "d": xx + yy}[direction]
        pattern = (coord // max(2, period // 2)) % 2 == 1
    elif texture == "dotted":
        cy = (yy % period) - period / 2 + 0.5
        cx = (xx % period) - period / 2 + 0.5
        pattern = cx**2 + cy**2 <= (period * 0.28) ** 2
    elif texture == "checkered":
        p = max(2, period // 2 + 1)
        pattern = ((yy // p) + (xx // p)) % 2 == 1
    else:
        raise ValueError(f"unknown texture {texture!r}")
    out = np.empty((h, w, 3), dtype=np.uint8)
    out[:] = np.asarray(rgb, dtype=np.uint8)
    out[pattern] = np.asarray(_contrast(rgb), dtype=np.uint8)
    return out


_OUTLINE = (25, 25, 25)


def _details(kind: str, draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int],
             rgb: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    w, h = x1 - x0 - 1, y1 - y0 - 1
    dark = (45, 40, 35)
    if kind == "flag":
        draw.rectangle([x0, y0, x0 + max(1, round(0.08 * w)), y1 - 1], fill=dark)
    elif kind == "tent":
        draw.polygon([(x0 + w / 2, y0 + 0.45 * h), (x0 + 0.62 * w, y1 - 1), (x0 + 0.38 * w, y1 - 1)],
                     fill=dark)
    elif kind == "house":
        draw.rectangle([x0 + 0.42 * w, y0 + 0.72 * h, x0 + 0.58 * w, y1 - 1], fill=dark)
    elif kind == "fish":
        r = max(1, round(0.06 * h))
        cx, cy = x0 + 0.18 * w, y0 + 0.42 * h
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=dark)
    elif kind == "kite":
        draw.line([(x0 + w / 2, y0), (x0 + w / 2, y1 - 1)], fill=dark)
        draw.line([(x0, y0 + 0.4 * h), (x1 - 1, y0 + 0.4 * h)], fill=dark)


def render_scene(scene: Scene, *, image_size: int) -> Image.Image:
    """Draw a scene: background, then each object (dark outline, textured silhouette, details)."""
    img = render_background(scene.background, scene.background_rgb, image_size=image_size,
                            texture_seed=scene.texture_seed)
    draw = ImageDraw.Draw(img)
    for inst in scene.instances:
        group = scene.groups[inst.group]
        x0, y0, x1, y1 = inst.box
        w, h = x1 - x0, y1 - y0
        mask = shape_mask(group.kind, w, h)
        # outline: the silhouette grown by one pixel, pasted under the object
        pad = Image.new("L", (w + 2, h + 2), 0)
        pad.paste(mask, (1, 1))
        outline = pad.filter(ImageFilter.MaxFilter(3))
        img.paste(Image.new("RGB", outline.size, _OUTLINE), (x0 - 1, y0 - 1), outline)
        patch = Image.fromarray(texture_patch(group.kind, group.texture, inst.rgb, w, h), "RGB")
        img.paste(patch, (x0, y0), mask)
        _details(group.kind, draw, inst.box, inst.rgb)
    return img


# --------------------------------------------------------------------------------------------
# Captions
# --------------------------------------------------------------------------------------------


def comparable_captions(scene: Scene, *, rng: np.random.Generator, lang: str,
                        n: int) -> list[tuple[CaptionSpec, str]]:
    """``n`` captions of a scene in one language, each from its own spec (distinct texts when
    the grammar allows: a duplicate is redrawn up to 20 times)."""
    out: list[tuple[CaptionSpec, str]] = []
    seen: set[str] = set()
    for _ in range(n):
        for attempt in range(21):
            spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background)
            text = realise(spec, lang=lang, groups=scene.groups, background=scene.background,
                           background_colour=scene.background_colour)
            if text not in seen:
                break
        seen.add(text)
        out.append((spec, text))
    return out


def parallel_caption(scene: Scene, *, rng: np.random.Generator) -> tuple[CaptionSpec, str, str]:
    """One spec realised in English and in German: a sentence and its exact translation."""
    spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background)
    kw = dict(groups=scene.groups, background=scene.background,
              background_colour=scene.background_colour)
    return spec, realise(spec, lang="en", **kw), realise(spec, lang="de", **kw)


def image_id(corpus: str, split: str, index: int) -> str:
    return f"{corpus}_{split}_{index:06d}"


@dataclass(frozen=True)
class WorldImage:
    image_id: str
    scene: Scene
    captions: Mapping[str, list[str]]  # lang -> captions (comparable)
    task1: tuple[str, str] | None  # (en, de) for m30k


def generate_image(settings: WorldSettings, corpus: str, split: str, index: int) -> WorldImage:
    """Scene and captions of one image, a pure function of (settings, corpus, split, index)."""
    scene = sample_scene(image_rng(settings.seed, corpus, split, index, "scene"), corpus=corpus,
                         image_size=settings.image_size, max_groups=settings.max_groups,
                         max_count=settings.max_count, max_objects=settings.max_objects)
    langs = ("en", "de") if corpus == "m30k" else ("en",)
    captions = {
        lang: [text for _, text in comparable_captions(
            scene, rng=image_rng(settings.seed, corpus, split, index, f"captions.{lang}"),
            lang=lang, n=settings.captions_per_image)]
        for lang in langs
    }
    task1 = None
    if corpus == "m30k":
        _, en, de = parallel_caption(scene, rng=image_rng(settings.seed, corpus, split, index, "task1"))
        task1 = (en, de)
    return WorldImage(image_id(corpus, split, index), scene, captions, task1)


def parallel_pairs(settings: WorldSettings, split: str) -> list[tuple[str, str]]:
    """``settings.parallel[split]`` raw (English, German) sentence pairs for training the demo's
    machine translation model: one parallel caption of a freshly drawn scene each, scenes drawn
    from the m30k and coco distributions in turn (a general-domain MT system knows the kinds of
    both corpora). Pure function of the seed, like every image; pair k of a split never
    depends on the split's size."""
    pairs = []
    for index in range(settings.parallel.get(split, 0)):
        corpus = CORPORA[index % len(CORPORA)]
        scene = sample_scene(image_rng(settings.seed, "parallel", split, index, f"scene.{corpus}"),
                             corpus=corpus, image_size=settings.image_size,
                             max_groups=settings.max_groups, max_count=settings.max_count,
                             max_objects=settings.max_objects)
        _, en, de = parallel_caption(scene, rng=image_rng(settings.seed, "parallel", split, index, "caption"))
        pairs.append((en, de))
    return pairs


def parallel_text_path(out_root: str | Path, split: str, lang: str) -> Path:
    return Path(out_root) / "world" / "parallel" / f"{split}.{lang}"


# --------------------------------------------------------------------------------------------
# Writing the world
# --------------------------------------------------------------------------------------------


def _caption_frame(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=RAW_CAPTION_COLUMNS)
    frame["caption_idx"] = frame["caption_idx"].astype("int64")
    return frame


def write_png_atomic(path: Path, img: Image.Image) -> None:
    with atomic_path(path) as tmp:
        img.save(tmp, format="PNG")


def build_world(settings: Mapping[str, Any] | WorldSettings, out_root: str | Path) -> dict:
    """Generate the whole world under ``out_root`` (see the module docstring and DESIGN §5):
    PNGs, image lists, raw caption tables (m30k, m30k_task1, coco) and ``world/manifest.json``
    (written last). Returns a summary (counts, seconds, bytes)."""
    cfg = settings if isinstance(settings, WorldSettings) else WorldSettings.from_dict(settings)
    out_root = Path(out_root)
    start = time.perf_counter()
    png_bytes = 0
    scenes: dict[str, dict[str, list[dict]]] = {}
    summary: dict[str, Any] = {"images": {}, "captions": {}}
    for corpus in CORPORA:
        if corpus not in cfg.images:
            continue
        image_dir = out_root / "world" / "images" / corpus
        image_dir.mkdir(parents=True, exist_ok=True)
        written: set[str] = set()
        scenes[corpus] = {}
        for split in SPLITS:
            n = cfg.images[corpus][split]
            image_rows, caption_rows, task1_rows, records = [], [], [], []
            for index in tqdm(range(n), desc=f"world {corpus}/{split}", unit="img", mininterval=2.0):
                item = generate_image(cfg, corpus, split, index)
                path = image_dir / f"{item.image_id}.png"
                write_png_atomic(path, render_scene(item.scene, image_size=cfg.image_size))
                png_bytes += path.stat().st_size
                written.add(path.name)
                image_rows.append((item.image_id, str(path)))
                for lang in LANG_ORDER:
                    for k, text in enumerate(item.captions.get(lang, [])):
                        caption_rows.append((corpus, split, item.image_id, lang, k, text))
                if item.task1 is not None:
                    en, de = item.task1
                    task1_rows.append((TASK1, split, item.image_id, "de", 0, de))
                    task1_rows.append((TASK1, split, item.image_id, "en", 0, en))
                records.append({"image_id": item.image_id, "path": str(path), **item.scene.to_json()})
            write_parquet_atomic(out_root / "images" / corpus / f"{split}.parquet",
                                 pd.DataFrame(image_rows, columns=IMAGE_COLUMNS))
            write_parquet_atomic(out_root / "captions" / "raw" / corpus / f"{split}.parquet",
                                 _caption_frame(caption_rows))
            summary["captions"][f"{corpus}/{split}"] = len(caption_rows)
            if task1_rows:
                write_parquet_atomic(out_root / "captions" / "raw" / TASK1 / f"{split}.parquet",
                                     _caption_frame(task1_rows))
                summary["captions"][f"{TASK1}/{split}"] = len(task1_rows)
            summary["images"][f"{corpus}/{split}"] = n
            scenes[corpus][split] = records
        # PNGs from an earlier, larger world would be mistaken for part of this one
        for stale in image_dir.glob("*.png"):
            if stale.name not in written:
                stale.unlink()
    manifest = {
        "seed": cfg.seed,
        "image_size": cfg.image_size,
        "captions_per_image": cfg.captions_per_image,
        "max_groups": cfg.max_groups,
        "max_count": cfg.max_count,
        "max_objects": cfg.max_objects,
        "images": {c: dict(s) for c, s in cfg.images.items()},
        "corpus_kinds": {c: kinds_of(c) for c in cfg.images},
        "kind_weights": {c: dict(KIND_WEIGHTS[c]) for c in cfg.images},
        "background_weights": {c: {b: v.weights[c] for b, v in BACKGROUNDS.items()} for c in cfg.images},
        "scenes": scenes,
    }
    # compact JSON: the manifest holds every scene (a few MB when indented)
    write_text_atomic(out_root / "world" / "manifest.json",
                      json.dumps(manifest, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
    summary.update(seconds=round(time.perf_counter() - start, 2), png_bytes=png_bytes,
                   manifest_bytes=(out_root / "world" / "manifest.json").stat().st_size)
    log.info("world written under %s: %s", out_root, summary)
    return summary


def write_parallel_text(settings: Mapping[str, Any] | WorldSettings, out_root: str | Path) -> dict:
    """Write the world's parallel text (:func:`parallel_pairs`) as plain files, one sentence per
    line: ``world/parallel/{split}.{en,de}`` under ``out_root``. Returns the pair counts."""
    cfg = settings if isinstance(settings, WorldSettings) else WorldSettings.from_dict(settings)
    if not cfg.parallel:
        raise ValueError("world.parallel: no parallel text asked for (e.g. {train: 20000, val: 500})")
    counts = {}
    for split, n in cfg.parallel.items():
        pairs = parallel_pairs(cfg, split)
        for k, lang in enumerate(("en", "de")):
            write_text_atomic(parallel_text_path(out_root, split, lang),
                              "".join(pair[k] + "\n" for pair in pairs))
        counts[split] = len(pairs)
    return counts


def _cli_world(args: argparse.Namespace) -> int:
    summary = build_world(args.settings, Path(args.out_root))
    print(json.dumps(summary, sort_keys=True))
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("world", help=cli.COMMANDS["world"].summary, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_json(p, "--settings", "the config's world section")
    p.add_argument("--out-root", required=True, help="results root (e.g. results)")
    p.set_defaults(func=_cli_world)
    p = subparsers.add_parser("world-parallel", help=cli.COMMANDS["world-parallel"].summary)
    cli.add_json(p, "--settings", "the config's world section (with parallel)")
    p.add_argument("--out-root", required=True, help="results root (e.g. results)")
    p.set_defaults(func=lambda args: print(json.dumps(write_parallel_text(args.settings,
                                                                          Path(args.out_root)))))
