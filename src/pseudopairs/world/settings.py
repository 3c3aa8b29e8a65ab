"""The config's ``world`` section (the offline demo world)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from pseudopairs.core.settings import Settings, setting
from pseudopairs.world.grammar import LANGUAGE_RELATIONS, CaptionStyle

SPLITS = ("train", "val", "test")
CORPORA = ("m30k", "coco")
PARALLEL_SPLITS = ("train", "val")  # the parallel text of the demo MT model


def _counts(value: Any, *, key: str, keys: tuple[str, ...], exact: bool, high: int) -> dict[str, int]:
    if not isinstance(value, Mapping) or (set(value) != set(keys) if exact else not set(value) <= set(keys)):
        which = "exactly" if exact else "some of"
        raise ValueError(f"{key} must map {which} {list(keys)} to numbers, got {value!r}")
    out = {}
    for name in keys:
        if name in value:
            n = value[name]
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= high:
                raise ValueError(f"{key}.{name} must be an integer in [1, {high}], got {n!r}")
            out[name] = n
    return out


def _counts_shape(keys: tuple[str, ...], *, high: int, exact: bool) -> dict:
    """The JSON schema of what :func:`_counts` accepts (for the config schema)."""
    out = {"additionalProperties": False,
           "properties": {k: {"type": "integer", "minimum": 1, "maximum": high} for k in keys}}
    return {**out, "required": list(keys)} if exact else out


IMAGE_COUNTS_HIGH, PARALLEL_COUNTS_HIGH = 999_999, 9_999_999


@dataclass(frozen=True, kw_only=True)
class SceneSettings(Settings):
    """What draws and renders a scene (the ``world`` keys the scene stream depends on): the
    corpora's images and the feature pretraining's scenes (pseudopairs.features.pretraining)."""

    SECTION = "world"

    seed: int = setting(kind=int, low=0, doc="every random choice of the world derives from it")
    image_size: int = setting(112, kind=int, low=32, high=1024, doc="rendered PNG side in pixels")
    max_groups: int = setting(3, kind=int, low=1, high=3, doc="distinct kinds per scene")
    max_count: int = setting(3, kind=int, low=1, high=9, doc="objects per group")
    max_objects: int = setting(6, kind=int, low=1, high=27, doc="objects per scene")

    def check(self) -> None:
        if self.max_objects < self.max_groups:
            raise self.bad("max_objects", f"must be ≥ world.max_groups ({self.max_groups})")

    @classmethod
    def of_world(cls, world: Mapping[str, Any]) -> dict:
        """The scene keys of a ``world`` section (what a scene-only step takes)."""
        keys = [f.name for f in fields(cls)]
        return {k: v for k, v in world.items() if k in keys}


@dataclass(frozen=True, kw_only=True)
class WorldSettings(SceneSettings):
    """Sizes and randomness of the demo world."""

    SECTION = "world"

    images: dict = setting(kind=dict, doc="corpus (m30k, coco) -> {train, val, test} image counts",
                           shape={"additionalProperties": False, "required": list(CORPORA),
                                  "properties": {c: {"type": "object", **_counts_shape(
                                      SPLITS, high=IMAGE_COUNTS_HIGH, exact=True)} for c in CORPORA}})
    captions_per_image: int = setting(5, kind=int, low=1, high=10, doc="per image and language")
    parallel: dict = setting({}, kind=dict, doc="split (train, val) -> sentence pairs of the MT model's text",
                             shape=_counts_shape(PARALLEL_SPLITS, high=PARALLEL_COUNTS_HIGH, exact=False))
    languages: str = setting("aligned", kind=str, choices=LANGUAGE_RELATIONS,
                             doc="aligned: every language realises a spec with one lexicon, variant for "
                                 "variant; divergent: lexicons that are not one-to-one (hypernyms, German "
                                 "Kugel for ball and egg, German material compounds) and language-specific "
                                 "word order")
    unrendered: float = setting(0.0, kind=float, low=0.0, high=1.0,
                                doc="probability that a caption names each unrendered detail (condition, "
                                    "material) of an object it mentions; above 0 every object has them, "
                                    "and the image does not show them")
    visible_detail: float = setting(1.0, kind=float, low=0.0, high=1.0,
                                    doc="scales the probabilities that a caption names an object's colour "
                                        "(0.75), size (0.4) and texture (0.3)")

    @property
    def caption_style(self) -> CaptionStyle:
        return CaptionStyle(self.languages, self.unrendered, self.visible_detail)

    def check(self) -> None:
        super().check()
        if not self.images:
            raise self.bad("images", "must map corpus names to {train, val, test} sizes")
        for corpus, sizes in self.images.items():
            if corpus not in CORPORA:
                raise self.bad("images", f"unknown corpus {corpus!r}; expected {list(CORPORA)}")
            try:
                _counts(sizes, key=f"world.images.{corpus}", keys=SPLITS, exact=True, high=IMAGE_COUNTS_HIGH)
            except ValueError as err:
                raise self.bad("images", str(err)) from None
        try:
            _counts(self.parallel, key="world.parallel", keys=PARALLEL_SPLITS, exact=False,
                    high=PARALLEL_COUNTS_HIGH)
        except ValueError as err:
            raise self.bad("parallel", str(err)) from None
