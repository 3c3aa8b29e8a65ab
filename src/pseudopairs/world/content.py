"""What the demo world shows: colours, object kinds (silhouette proportions, textures, palettes), backgrounds, and how often each occurs per corpus (the distribution shift between m30k and coco)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pseudopairs.world.grammar import BACKGROUND_SENSES, NOUN_VARIANTS



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
            if kind not in KINDS or kind not in NOUN_VARIANTS:
                raise RuntimeError(f"kind {kind!r} of {corpus} lacks a visual or a lexicon entry")
    for bg in BACKGROUNDS:
        if bg not in BACKGROUND_SENSES:
            raise RuntimeError(f"background {bg!r} has no phrases")


_check_tables()
