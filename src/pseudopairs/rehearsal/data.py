"""The ``rehearsal-data`` step: inputs at the paper's counts that cannot be had offline.

- **Flickr30K image files**: one small JPEG per image name of Multi30K's task-1 and task-2 image
  lists (train, val, test 2016; 31,014 names), in the folder ``paper_data.flickr30k_images``
  points to. Each is a seeded random 4 × 4 colour pattern scaled to ``image_size``: every image
  differs, and decoding stays cheap (the features rule's real work is measured on a fraction).
- **The Karpathy COCO JSON** (``caption_datasets.zip`` holding ``dataset_coco.json``): Karpathy's
  split counts (113,287 training images as train + restval, 5,000 val, 5,000 test), five
  captions per image (a sixth for a share of images, which ``read-coco`` drops as on the real
  file), each resampled from the real English Multi30K captions of the mirror, so the COCO text
  has real sentences at the real count (566K training captions).
- **The COCO image archives** (``train2014.zip`` / ``val2014.zip``, each with its top folder):
  one JPEG per image named as in the JSON.
- **Parallel text** for ``train-mt`` (the rehearsal trains its En→De model; the real
  configuration downloads one): Multi30K task 1's train and val sentences, one per line.

``rehearsal.defects`` plants bad inputs (a truncated JPEG, a missing image, a 300-token caption,
an empty caption, a duplicated COCO id) so that a rehearsal shows what each does to the run.
Everything is a pure function of the settings and the mirror; files are written atomically.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from pseudopairs import commands
from pseudopairs.data.text import read_lines
from pseudopairs.core.io import atomic_path, write_text_atomic
from pseudopairs.rehearsal.settings import RehearsalSettings

log = logging.getLogger(__name__)

#: Multi30K image lists whose images the Flickr30K folder must hold (task, file).
IMAGE_LISTS = (("task2", "train_images.txt"), ("task2", "val_images.txt"),
               ("task2", "test_2016_images.txt"), ("task1", "train.txt"), ("task1", "val.txt"),
               ("task1", "test_2016_flickr.txt"))
#: Karpathy split -> the COCO 2014 part its images come from (restval is part of val2014).
COCO_PART = {"train": "train2014", "restval": "val2014", "val": "val2014", "test": "val2014"}
#: Multi30K task-1 split -> the parallel-text split train-mt reads.
PARALLEL_SPLITS = {"train": "train", "val": "val"}


def _read_lines(path: Path) -> list[str]:
    return read_lines(path)[0]


def flickr_image_names(multi30k: str | Path) -> list[str]:
    """Every image name of :data:`IMAGE_LISTS`, in first-seen order, each once."""
    names: dict[str, None] = {}
    for task, name in IMAGE_LISTS:
        for line in _read_lines(Path(multi30k) / task / "image_splits" / name):
            if line.strip():
                names.setdefault(line.strip().split("#")[0], None)
    return list(names)


def english_caption_pool(multi30k: str | Path) -> list[str]:
    """The real English training captions the COCO captions are drawn from: task 2's five
    comparable captions per image and task 1's, empty lines left out."""
    root = Path(multi30k)
    paths = [root / "task2" / "raw" / f"train.{n}.en.gz" for n in range(1, 6)]
    paths.append(root / "task1" / "raw" / "train.en.gz")
    return [line for path in paths for line in _read_lines(path) if line.strip()]


def pattern_jpeg(seed: int, name: str, size: int) -> bytes:
    """A JPEG of ``size`` × ``size`` pixels: a 4 × 4 colour pattern drawn from (seed, name)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
    cells = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
    image = Image.fromarray(cells, mode="RGB").resize((size, size), Image.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def coco_karpathy(settings: RehearsalSettings, pool: list[str]) -> dict[str, Any]:
    """A ``dataset_coco.json`` object with Karpathy's fields (``images``: split, cocoid,
    filepath, filename, imgid, sentences with raw, tokens, imgid, sentid)."""
    if not pool:
        raise ValueError("rehearsal: the Multi30K mirror gave no English captions to resample")
    rng = np.random.default_rng([settings.seed, 2014])
    total = sum(settings.coco.values())
    cocoids = np.sort(rng.choice(600_000, size=total, replace=False))
    images, sentid, imgid = [], 0, 0
    for split, count in settings.coco.items():
        part = COCO_PART[split]
        extra = rng.random(count) < settings.sixth_caption
        picks = rng.integers(0, len(pool), size=(count, 6))
        for k in range(count):
            cocoid = int(cocoids[imgid])
            sentences = []
            for j in range(6 if extra[k] else 5):
                raw = pool[picks[k, j]]
                sentences.append({"raw": raw, "tokens": raw.lower().rstrip(" .").split(),
                                  "imgid": imgid, "sentid": sentid})
                sentid += 1
            images.append({"split": split, "cocoid": cocoid, "filepath": part,
                           "filename": f"COCO_{part}_{cocoid:012d}.jpg", "imgid": imgid,
                           "sentids": [s["sentid"] for s in sentences], "sentences": sentences})
            imgid += 1
    return {"dataset": "coco", "images": images}


#: The 300-token caption of the ``long_caption`` defect.
LONG_CAPTION = " ".join(["A", "dog", "runs", "on", "the", "grass"] * 50)


def plant_caption_defects(data: dict[str, Any], defects) -> list[str]:
    """Plant the caption defects in the first training images of a Karpathy object (in place);
    returns what was planted, one line each."""
    train = [im for im in data["images"] if im["split"] in ("train", "restval")]
    planted = []
    if "long_caption" in defects:
        train[0]["sentences"][0]["raw"] = LONG_CAPTION
        planted.append(f"long_caption: cocoid {train[0]['cocoid']}, sentence 0 (300 tokens)")
    if "empty_caption" in defects:
        train[0]["sentences"][1]["raw"] = "   "
        planted.append(f"empty_caption: cocoid {train[0]['cocoid']}, sentence 1")
    if "duplicate_image" in defects:
        train[1]["cocoid"] = train[0]["cocoid"]
        planted.append(f"duplicate_image: cocoid {train[0]['cocoid']} on two images")
    return planted


def write_zip_atomic(path: Path, members) -> int:
    """Write ``members`` ((name, bytes) pairs) as a stored zip; returns the member count."""
    count = 0
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in members:
            zf.writestr(name, data)
            count += 1
    return count


def build(settings: RehearsalSettings, *, flickr_dir: Path, karpathy_zip: Path, coco_zip_dir: Path,
          parallel_dir: Path) -> dict[str, Any]:
    """Write every rehearsal input (module docstring); returns counts and seconds."""
    start = time.perf_counter()
    root = Path(settings.multi30k)
    names = flickr_image_names(root)
    flickr_dir.mkdir(parents=True, exist_ok=True)
    # the image defects hit the first training images of task 2's list
    truncated = names[0] if "truncated_jpeg" in settings.defects else None
    missing = names[1] if "missing_image" in settings.defects else None
    for name in tqdm(names, desc="flickr30k images", unit="img", mininterval=5.0):
        target = flickr_dir / name
        if name == missing:
            target.unlink(missing_ok=True)
            continue
        jpeg = pattern_jpeg(settings.seed, name, settings.image_size)
        if name == truncated:
            jpeg = jpeg[: len(jpeg) // 2]
        if name == truncated or not target.is_file() or target.stat().st_size != len(jpeg):
            with atomic_path(target) as tmp:
                tmp.write_bytes(jpeg)
    for split, out in PARALLEL_SPLITS.items():
        for lang in ("en", "de"):
            lines = _read_lines(root / "task1" / "raw" / f"{split}.{lang}.gz")
            write_text_atomic(parallel_dir / f"{out}.{lang}", "".join(line + "\n" for line in lines))
    data = coco_karpathy(settings, english_caption_pool(root))
    planted = plant_caption_defects(data, settings.defects)
    planted += [f"truncated_jpeg: {flickr_dir / truncated}"] if truncated else []
    planted += [f"missing_image: {flickr_dir / missing}"] if missing else []
    for line in planted:
        log.warning("planted defect %s", line)
    for part in sorted(set(COCO_PART.values())):
        members = ((f"{part}/{image['filename']}",
                    pattern_jpeg(settings.seed, image["filename"], settings.image_size))
                   for image in tqdm(data["images"], desc=part, unit="img", mininterval=5.0)
                   if image["filepath"] == part)
        write_zip_atomic(coco_zip_dir / f"{part}.zip", members)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    write_zip_atomic(karpathy_zip, [("dataset_coco.json", text.encode("utf-8"))])
    captions = sum(min(5, len(image["sentences"])) for image in data["images"]
                   if image["split"] in ("train", "restval"))
    summary = {"flickr_images": len(names), "coco_images": len(data["images"]),
               "coco_train_captions": captions, "defects": planted,
               "seconds": round(time.perf_counter() - start, 1)}
    log.info("rehearsal inputs: %s", summary)
    return summary


def _cli(args: argparse.Namespace) -> int:
    settings = RehearsalSettings.from_dict(args.settings)
    summary = build(settings, flickr_dir=Path(args.flickr_dir), karpathy_zip=Path(args.karpathy_zip),
                    coco_zip_dir=Path(args.coco_zip_dir), parallel_dir=Path(args.parallel_dir))
    print(json.dumps(summary, sort_keys=True))
    return 0


#: The step's output paths: (option, what it names).
OUTPUT_OPTIONS = (("--flickr-dir", "folder of the Flickr30K image files"),
                  ("--karpathy-zip", "caption_datasets.zip to write"),
                  ("--coco-zip-dir", "folder of train2014.zip and val2014.zip"),
                  ("--parallel-dir", "folder of {train,val}.{en,de}"))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "rehearsal-data", _cli)
    commands.add_json(p, "--settings", "the config's rehearsal section")
    for option, what in OUTPUT_OPTIONS:
        p.add_argument(option, required=True, help=what)
