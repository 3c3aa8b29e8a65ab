"""The ``rehearsal`` config section (config/rehearsal.yaml): what the rehearsal makes, and which
steps it runs on a measured fraction of their work."""

from __future__ import annotations

from dataclasses import dataclass

from pseudopairs.core.settings import Settings, setting

#: Karpathy's COCO splits and their image counts (dataset_coco.json): train + restval is the
#: paper's 113,287 training images (566K captions), val and test 5,000 each.
KARPATHY_COUNTS = {"train": 82_783, "restval": 30_504, "val": 5_000, "test": 5_000}

#: Bad inputs the rehearsal can plant, each where a real data set could hold it: a Flickr30K file
#: cut short, one missing, a 300-token COCO caption, an empty one, and two COCO entries with one id.
DEFECTS = ("truncated_jpeg", "missing_image", "long_caption", "empty_caption", "duplicate_image")

_COUNTS_SHAPE = {"additionalProperties": False, "required": list(KARPATHY_COUNTS),
                 "properties": {s: {"type": "integer", "minimum": 1} for s in KARPATHY_COUNTS}}
_REDUCED_SHAPE = {"additionalProperties": {
    "type": "object", "additionalProperties": False, "required": ["fraction", "note"],
    "properties": {"fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                   "note": {"type": "string", "minLength": 1}}}}


@dataclass(frozen=True)
class RehearsalSettings(Settings):
    """``rehearsal``: the inputs made at the paper's counts, and the steps reduced to a fraction."""

    SECTION = "rehearsal"

    multi30k: str = setting(kind=str, doc="local Multi30K mirror (task1/, task2/): the real text, "
                                          "also the source of the resampled COCO captions")
    seed: int = setting(0, kind=int, low=0, doc="draws of the COCO captions and image colours")
    image_size: int = setting(32, kind=int, low=8, high=512, doc="side of each generated JPEG")
    coco: dict = setting(dict(KARPATHY_COUNTS), kind=dict, shape=_COUNTS_SHAPE,
                         doc="Karpathy split -> COCO images (train, restval, val, test)")
    sixth_caption: float = setting(0.01, kind=float, low=0.0, high=1.0,
                                   doc="share of COCO images given a 6th caption (read-coco keeps 5)")
    defects: list = setting([], kind=list, shape={"items": {"enum": list(DEFECTS)}, "uniqueItems": True},
                            doc="bad inputs to plant (docs/scale.md, 'Bad input at scale'): "
                                + ", ".join(DEFECTS))
    reduced: dict = setting({}, kind=dict, shape=_REDUCED_SHAPE,
                            doc="rule (or a glob of rules) -> {fraction, note}: a step run on this "
                                "fraction of its full-size work, the CSV extrapolates time by "
                                "1/fraction; fraction 1: the whole work with cheaper settings")

    def check(self) -> None:
        unknown = [d for d in self.defects if d not in DEFECTS]
        if unknown:
            raise self.bad("defects", f"unknown defect(s) {unknown}; expected some of {list(DEFECTS)}")
        for split in KARPATHY_COUNTS:
            if not isinstance(self.coco.get(split), int) or self.coco[split] < 1:
                raise self.bad("coco", f"needs a positive image count for {split!r}")
        for rule, entry in self.reduced.items():
            fraction = entry.get("fraction") if isinstance(entry, dict) else None
            if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
                raise self.bad("reduced", f"{rule}.fraction must be in (0, 1]")
            if not isinstance(entry.get("note"), str) or not entry["note"].strip():
                raise self.bad("reduced", f"{rule}.note must say what was reduced")
