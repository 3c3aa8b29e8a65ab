"""Data-set operations declared in the config (paper 004, §5.2–5.3 and §6): a *selection* data set
is one language of a corpus' training captions, restricted to a seeded subset of its images
and/or to a seeded sample of captions per image.

``select`` (config key of a data set):

- ``images: {fraction: f, part: p, seed: s}`` — the corpus' training images, ordered by image id,
  are permuted with ``seed`` and cut into consecutive parts of ``round(f · n)`` images; the data
  set keeps part ``p`` (0 = the first). Two data sets with the same ``fraction`` and ``seed`` and
  the same ``part`` cover the same images (004's *Bi-overlap*); different parts are disjoint
  (*Bi-disjoint*); one part alone is *Half*.
- ``captions_per_image: k`` (with ``seed``) — each image keeps ``k`` of its captions in this
  language, drawn without replacement by a generator seeded from (``seed``, image id), so the
  draw of an image does not depend on the others (004's *Bi-comparable* / *Multi-comparable*:
  one caption per image from the comparable portion).

The output is a caption table (the columns of :data:`pseudopairs.core.io.CAPTION_COLUMNS`), rows in
the input's order, ``dataset`` set to the data set's name.
"""

from __future__ import annotations

import argparse
import zlib
from typing import Any

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import check_caption_texts, read_captions, write_parquet_atomic


def check_select(select: Any, *, where: str = "select") -> dict:
    """Validate a ``select`` entry; returns it with defaults (errors name the key)."""
    if not isinstance(select, dict) or not select:
        raise ValueError(f"{where}: must give images and/or captions_per_image")
    unknown = sorted(set(select) - {"images", "captions_per_image", "seed"})
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}")
    out = {"seed": select.get("seed", 0)}
    if isinstance(out["seed"], bool) or not isinstance(out["seed"], int) or out["seed"] < 0:
        raise ValueError(f"{where}.seed: must be a whole number >= 0, got {out['seed']!r}")
    if "images" in select:
        images = select["images"]
        if not isinstance(images, dict) or set(images) - {"fraction", "part", "seed"} or "fraction" not in images:
            raise ValueError(f"{where}.images: must be {{fraction, part, seed}}, got {images!r}")
        fraction, part = images["fraction"], images.get("part", 0)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"{where}.images.fraction: must be in (0, 1], got {fraction!r}")
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < round(1 / fraction):
            raise ValueError(f"{where}.images.part: must be a whole number in [0, {round(1 / fraction) - 1}] "
                             f"for fraction {fraction}, got {part!r}")
        out["images"] = {"fraction": float(fraction), "part": part, "seed": images.get("seed", out["seed"])}
    if "captions_per_image" in select:
        k = select["captions_per_image"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"{where}.captions_per_image: must be a whole number >= 1, got {k!r}")
        out["captions_per_image"] = k
    if "images" not in out and "captions_per_image" not in out:
        raise ValueError(f"{where}: must give images and/or captions_per_image")
    return out


def image_subset(image_ids, *, fraction: float, part: int, seed: int) -> set[str]:
    """Part ``part`` of the images permuted with ``seed`` (module docstring)."""
    ordered = np.array(sorted(set(map(str, image_ids))), dtype=object)
    permuted = ordered[np.random.default_rng(seed).permutation(len(ordered))]
    size = int(round(fraction * len(ordered)))
    return set(permuted[part * size: (part + 1) * size].tolist())


def sample_captions(frame: pd.DataFrame, *, k: int, seed: int) -> pd.DataFrame:
    """``k`` captions per image (all of an image's when it has fewer), drawn per image from a
    generator seeded by (``seed``, image id); the kept rows stay in table order."""
    keep = np.zeros(len(frame), dtype=bool)
    positions = np.arange(len(frame))
    for image_id, rows in frame.groupby("image_id", sort=False).indices.items():
        rng = np.random.default_rng([seed, zlib.crc32(str(image_id).encode("utf-8"))])
        chosen = rows if len(rows) <= k else np.sort(rng.choice(rows, size=k, replace=False))
        keep[positions[chosen]] = True
    return frame[keep]


def select_captions(frame: pd.DataFrame, *, lang: str, select: dict, dataset: str) -> pd.DataFrame:
    """The selection data set ``dataset`` from a prepared training caption table."""
    select = check_select(select)
    rows = frame[frame["lang"] == lang].reset_index(drop=True)
    if rows.empty:
        raise ValueError(f"no {lang!r} captions to select from (data set {dataset})")
    if (rows["split"] != "train").any():
        raise ValueError(f"data set {dataset}: selections are made from training captions only")
    if "images" in select:
        keep = image_subset(rows["image_id"], **select["images"])
        rows = rows[rows["image_id"].astype(str).isin(keep)].reset_index(drop=True)
    if "captions_per_image" in select:
        rows = sample_captions(rows, k=select["captions_per_image"], seed=select["seed"]).reset_index(drop=True)
    out = rows.copy()
    out["dataset"] = dataset
    return out


def _cli_select(args: argparse.Namespace) -> None:
    frame = read_captions(args.captions)
    out = select_captions(frame, lang=args.lang, select=args.select, dataset=args.dataset)
    check_caption_texts(out["text"] if "text" in out else out["raw"], source=args.output,
                        what=f"{args.lang} captions of {args.dataset}")
    write_parquet_atomic(args.output, out)
    print(f"{args.dataset}: {len(out)} {args.lang} captions of {out['image_id'].nunique()} images "
          f"-> {args.output}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "select-captions", _cli_select)
    p.add_argument("--captions", required=True, help="prepared training caption table of the corpus")
    p.add_argument("--lang", required=True)
    commands.add_json(p, "--select", "the data set's select entry (images / captions_per_image / seed)")
    p.add_argument("--dataset", required=True, help="the data set's name (the table's dataset column)")
    p.add_argument("--output", required=True)
