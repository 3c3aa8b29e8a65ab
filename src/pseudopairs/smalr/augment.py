"""The ``augment-captions`` step: one augmented data set of paper 002 (§4; its config and the
translation jobs it reads: :mod:`pseudopairs.smalr.augment_contract`).

Its caption table holds, in this order, the captions in the data set's language of every
``human`` source table, then every ``translated`` table (``translate-captions`` output, already
in that language), each image's captions numbered 0, 1, … in that order (``caption_idx``), with a
``source`` column naming where each came from (the source data set; ``mt:`` before a
translation's). Every image must have at least ``min_per_image`` captions: an image with fewer is
an error naming the data set, the image and its count, and nothing is written. The JSON sidecar
records the captions per source and the fewest, mean and most captions per image.
"""

from __future__ import annotations

import argparse
import json
import logging

import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import CAPTION_COLUMNS, read_captions, write_json_atomic, write_parquet_atomic

log = logging.getLogger(__name__)


def _part(path, *, lang: str, source: str, what: str) -> pd.DataFrame:
    frame = read_captions(path, lang=lang)
    if "text" not in frame.columns:
        raise ValueError(f"{path}: caption table has no prepared 'text' column ({what} {source})")
    if frame.empty:
        raise ValueError(f"{path}: no {lang!r} captions ({what} {source})")
    frame = frame[CAPTION_COLUMNS].copy()
    frame["source"] = source if what == "human" else f"mt:{source}"
    return frame


def augmented_table(spec: dict) -> pd.DataFrame:
    """The augmented caption table of ``spec`` (:func:`pseudopairs.smalr.augment_contract.augment_spec`);
    raises when an image has fewer than ``min_per_image`` captions."""
    lang, name = spec["lang"], spec["dataset"]
    parts = [_part(p["captions"], lang=lang, source=p["source"], what="human") for p in spec["human"]]
    parts += [_part(p["captions"], lang=lang, source=p["source"], what="translation of")
              for p in spec["translated"]]
    if not parts:
        raise ValueError(f"data set {name}: no human or translated captions to augment")
    frame = pd.concat(parts, ignore_index=True)
    frame["image_id"] = frame["image_id"].astype(str)
    frame["caption_idx"] = frame.groupby("image_id", sort=False).cumcount().astype("int64")
    frame["dataset"], frame["split"] = name, "train"
    counts = frame.groupby("image_id", sort=False).size()
    short = counts[counts < int(spec["min_per_image"])]
    if len(short):
        image, count = short.index[0], int(short.iloc[0])
        raise ValueError(f"data set {name}: image {image!r} has {count} {lang} caption(s), fewer than "
                         f"augment.min_per_image = {spec['min_per_image']} ({len(short)} of "
                         f"{len(counts)} images have too few); add sources under augment")
    return frame


def summary(frame: pd.DataFrame, spec: dict) -> dict:
    counts = frame.groupby("image_id", sort=False).size()
    return {"dataset": spec["dataset"], "lang": spec["lang"], "captions": int(len(frame)),
            "images": int(len(counts)), "min_per_image_required": int(spec["min_per_image"]),
            "per_image": {"min": int(counts.min()), "mean": float(counts.mean()), "max": int(counts.max())},
            "per_source": {str(k): int(v) for k, v in frame["source"].value_counts(sort=False).items()}}


def _cli_augment(args: argparse.Namespace) -> None:
    frame = augmented_table(args.spec)
    info = summary(frame, args.spec)
    write_parquet_atomic(args.output, frame)
    write_json_atomic(args.sidecar, info)   # last: its presence says the table is complete
    print(json.dumps(info, indent=2))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "augment-captions", _cli_augment)
    commands.add_json(p, "--spec", "the augmented data set (smalr.augment_contract.augment_spec)")
    p.add_argument("--output", required=True, help="the augmented caption table (.parquet)")
    p.add_argument("--sidecar", required=True, help="its counts (JSON)")
