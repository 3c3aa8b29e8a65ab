"""The demo world exported in the formats users' own data come in (:mod:`pseudopairs.data.generic`),
for the worked example of docs/own-data.md (config/own-data.yaml): the method on "your own"
disjoint data, offline.

- :data:`EXPORTS` ``imagefolder``: the large English set (the world's COCO-like corpus, every
  split): one PNG per image at the folder's top (``{image_id}.png``) and ``metadata.csv`` with
  ``file_name, text, lang, split``, one row per caption;
- ``webdataset``: a small set in French (the aligned corpus' images with the French caption of
  its translation portion): tar shards ``00000.tar`` … of :data:`SHARD_SIZE` samples, each
  ``{image_id}.png``, ``{image_id}.txt`` and ``{image_id}.json`` (``key``, ``caption``,
  ``split``, ``status``, ``width``, ``height``, as img2dataset writes them).

Read back as corpora, they give the world's own caption tables (tests/test_corpora.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pandas as pd

from pseudopairs import commands
from pseudopairs.data.corpora import WORLD_EXPORTS
from pseudopairs.core.io import atomic_directory

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
SHARD_SIZE = 500
EXPORTS = WORLD_EXPORTS   # format -> the corpus whose captions (in lang) and the corpus whose images


def _tables(captions: list[str], images: list[str], lang: str) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    out = []
    for split, caption_path, image_path in zip(SPLITS, captions, images):
        table = pd.read_parquet(caption_path)
        out.append((split, table[table["lang"] == lang], pd.read_parquet(image_path)))
    return out


def export_imagefolder(captions: list[str], images: list[str], *, lang: str, output: str | Path) -> dict[str, Any]:
    """An ImageFolder of the captions in ``lang``: images copied, ``metadata.csv`` (UTF-8)."""
    counts = {"images": 0, "captions": 0}
    with atomic_directory(output) as folder:
        text = io.StringIO(newline="")
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["file_name", "text", "lang", "split"])
        for split, table, image_list in _tables(captions, images, lang):
            paths = dict(zip(image_list["image_id"], image_list["path"]))
            for image_id, rows in table.groupby("image_id", sort=False):
                name = f"{image_id}.png"
                shutil.copyfile(paths[image_id], folder / name)
                counts["images"] += 1
                for raw in rows.sort_values("caption_idx", kind="stable")["raw"]:
                    writer.writerow([name, raw, lang, split])
                    counts["captions"] += 1
        (folder / "metadata.csv").write_text(text.getvalue(), encoding="utf-8")
    return counts


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def export_webdataset(captions: list[str], images: list[str], *, lang: str, output: str | Path,
                      shard_size: int = SHARD_SIZE) -> dict[str, Any]:
    """img2dataset-style shards of the first caption in ``lang`` of every image."""
    from PIL import Image

    samples = []
    for split, table, image_list in _tables(captions, images, lang):
        first = table[table["caption_idx"] == table.groupby("image_id")["caption_idx"].transform("min")]
        caption = dict(zip(first["image_id"], first["raw"]))
        samples += [(split, image_id, path, caption[image_id])
                    for image_id, path in zip(image_list["image_id"], image_list["path"]) if image_id in caption]
    with atomic_directory(output) as folder:
        for shard, start in enumerate(range(0, len(samples), shard_size)):
            with tarfile.open(folder / f"{shard:05d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for split, key, path, text in samples[start:start + shard_size]:
                    data = Path(path).read_bytes()
                    with Image.open(io.BytesIO(data)) as img:
                        width, height = img.size
                    meta = {"key": key, "caption": text, "split": split, "status": "success",
                            "width": width, "height": height}
                    _add(tar, f"{key}.png", data)
                    _add(tar, f"{key}.txt", text.encode("utf-8"))
                    _add(tar, f"{key}.json", json.dumps(meta, ensure_ascii=False).encode("utf-8"))
    return {"images": len(samples), "captions": len(samples), "shards": -(-len(samples) // shard_size)}


def export_parallel(world: dict[str, Any], langs: tuple[str, ...], output: str | Path) -> dict[str, int]:
    """The world's parallel sentences (``world.parallel`` per split) in ``langs``, one file per
    split and language (``{split}.{lang}``, line k of each the same sentence): the parallel
    text a user brings to train a translation model of their own."""
    from pseudopairs.core.io import write_text_atomic
    from pseudopairs.world.generate import parallel_sentences
    from pseudopairs.world.settings import WorldSettings

    settings = WorldSettings.from_dict(world)
    counts = {}
    for split, n in settings.parallel.items():
        sentences = parallel_sentences(settings, split, n, langs)
        for lang in langs:
            write_text_atomic(Path(output) / f"{split}.{lang}", "".join(s[lang] + "\n" for s in sentences))
        counts[split] = len(sentences)
    return counts


def _cmd_export_parallel(args: argparse.Namespace) -> int:
    counts = export_parallel(args.world, tuple(args.langs), args.output)
    log.info("%s: parallel text in %s: %s", args.output, ", ".join(args.langs), counts)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    spec = EXPORTS[args.format]
    export = export_imagefolder if args.format == "imagefolder" else export_webdataset
    counts = export(args.captions, args.images, lang=spec["lang"], output=args.output)
    log.info("%s (%s, %s): %s", args.output, args.format, spec["lang"], counts)
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "export-world-corpus", _cmd_export)
    p.add_argument("--format", required=True, choices=sorted(EXPORTS))
    p.add_argument("--captions", nargs=len(SPLITS), required=True, metavar="PARQUET",
                   help=f"the raw caption tables of {', '.join(SPLITS)}")
    p.add_argument("--images", nargs=len(SPLITS), required=True, metavar="PARQUET",
                   help=f"the image lists of {', '.join(SPLITS)}")
    p.add_argument("--output", required=True, help="the corpus folder (replaced atomically)")

    p = commands.add_command(subparsers, "export-world-parallel", _cmd_export_parallel)
    commands.add_json(p, "--world", "the config's world section (its parallel sizes)")
    p.add_argument("--langs", nargs="+", required=True, help="the languages (e.g. en fr)")
    p.add_argument("--output", required=True, help="the folder of {split}.{lang} files")
