"""Readers of the real corpora: Multi30K (task1, task2) and COCO with Karpathy's splits.

Each reader returns a raw caption table (``pseudopairs.core.io.RAW_CAPTION_COLUMNS``: ``dataset,
split, image_id, lang, caption_idx, raw``; rows ordered by image in image-list order, then
language in the order asked for, then caption index) and, for corpora with images, an image list
(``image_id, path``) whose row order is the image order of that split.

Input problems are reported with the file and line (or the JSON image index) at fault.

Layout of a Multi30K root (the repository's ``data/`` folder, or a copy of it)::

    task2/raw/{split}.{n}.{lang}.gz        n = 1..5, lang en/de (comparable captions)
    task2/image_splits/{split}_images.txt
    task1/raw/{split}.{lang}.gz            lang en/de/fr/cs (translations)
    task1/image_splits/{split}.txt
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import IMAGE_COLUMNS, RAW_CAPTION_COLUMNS, write_json_atomic, write_parquet_atomic

log = logging.getLogger(__name__)

#: upstream split name -> canonical split, per task
MULTI30K_SPLITS = {
    "task2": {"train": "train", "val": "val", "test_2016": "test"},
    "task1": {"train": "train", "val": "val", "test_2016_flickr": "test"},
}
MULTI30K_CORPUS = {"task2": "m30k", "task1": "m30k_task1"}
TASK2_LANGS = ("en", "de")
TASK2_CAPTIONS = 5
TASK1_LANGS = ("en", "de", "fr", "cs")
COCO_SPLITS = {"train": ("train", "restval"), "val": ("val",), "test": ("test",)}


# --------------------------------------------------------------------------------------------
# line files
# --------------------------------------------------------------------------------------------


def _read_lines(path: Path, *, what: str) -> list[str]:
    """Lines of a text file (``.gz`` decompressed), split on ``\\n`` only, strict UTF-8.

    The final newline does not start an extra line; a trailing ``\\r`` is dropped. Raises
    FileNotFoundError (naming ``what``) or ValueError naming ``file:line``.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing {what}")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            data = path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"{path}: cannot read {what} ({err})") from err
    chunks = data.split(b"\n")
    if chunks and chunks[-1] == b"":
        chunks.pop()
    lines = []
    for number, chunk in enumerate(chunks, start=1):
        if chunk.endswith(b"\r"):
            chunk = chunk[:-1]
        try:
            lines.append(chunk.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}:{number}: invalid UTF-8 at byte {err.start} of the line") from err
    return lines


def read_image_split(path: str | os.PathLike) -> list[str]:
    """Image file names listed in a Multi30K image-split file, one per line, in order.

    A ``#suffix`` (used by the task1 ``test_2017_mscoco`` list) is kept in the returned name;
    :func:`multi30k_image_id` drops it. Empty lines and duplicate image ids are errors.
    """
    path = Path(path)
    names = _read_lines(path, what="image list")
    seen: dict[str, int] = {}
    for number, name in enumerate(names, start=1):
        if not name.strip():
            raise ValueError(f"{path}:{number}: empty image name")
        if name != name.strip():
            raise ValueError(f"{path}:{number}: image name {name!r} has surrounding whitespace")
        image_id = multi30k_image_id(name)
        if image_id in seen:
            raise ValueError(f"{path}:{number}: image id {image_id!r} already listed on line {seen[image_id]}")
        seen[image_id] = number
    if not names:
        raise ValueError(f"{path}: image list is empty")
    return names


def multi30k_image_file(name: str) -> str:
    """The file name of an image-split entry (drops a ``#...`` suffix)."""
    return name.split("#", 1)[0]


def multi30k_image_id(name: str) -> str:
    """Image id of an image-split entry: the file name without extension ("1000092795.jpg" ->
    "1000092795")."""
    return PurePosixPath(multi30k_image_file(name)).stem


def read_caption_file(path: str | os.PathLike, *, expected_lines: int, image_list: str | os.PathLike | None = None) -> list[str]:
    """Captions of a Multi30K caption file (one per image, in image-list order).

    Errors name the file and line: invalid UTF-8, an empty (or blank) caption, or a line count
    different from ``expected_lines`` (the length of ``image_list``).
    """
    path = Path(path)
    lines = _read_lines(path, what="caption file")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise ValueError(f"{path}:{number}: empty caption")
    if len(lines) != expected_lines:
        source = f" in {image_list}" if image_list is not None else ""
        raise ValueError(
            f"{path}: {len(lines)} caption lines, expected {expected_lines} (one per image{source})"
        )
    return lines


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


def _caption_table(*, corpus: str, split: str, image_ids: Sequence[str], langs: Sequence[str],
                   captions: Sequence[Sequence[Sequence[str]]]) -> pd.DataFrame:
    """Build a raw caption table from ``captions[lang][caption_idx][image]`` (same count per
    image): rows by image, then lang (given order), then caption_idx."""
    n_images, n_langs = len(image_ids), len(langs)
    n_caps = len(captions[0]) if n_langs else 0
    raw = np.empty((n_langs, n_caps, n_images), dtype=object)
    for li in range(n_langs):
        for ci in range(n_caps):
            raw[li, ci, :] = captions[li][ci]
    raw = raw.transpose(2, 0, 1).reshape(-1)
    n_rows = n_images * n_langs * n_caps
    frame = pd.DataFrame({
        "dataset": pd.Series([corpus] * n_rows, dtype=str),
        "split": pd.Series([split] * n_rows, dtype=str),
        "image_id": pd.Series(np.repeat(np.asarray(image_ids, dtype=object), n_langs * n_caps), dtype=str),
        "lang": pd.Series(np.tile(np.repeat(np.asarray(langs, dtype=object), n_caps), n_images), dtype=str),
        "caption_idx": np.tile(np.arange(n_caps, dtype=np.int64), n_images * n_langs),
        "raw": pd.Series(raw, dtype=str),
    })
    return frame[RAW_CAPTION_COLUMNS]


def image_table(*, image_ids: Sequence[str], files: Sequence[str], images_dir: str | os.PathLike) -> pd.DataFrame:
    """Image list ``(image_id, path)`` with ``path = images_dir / file`` (as given, not resolved)."""
    root = os.fspath(images_dir)
    paths = [os.path.join(root, f) for f in files]
    return pd.DataFrame({"image_id": pd.Series(list(image_ids), dtype=str),
                         "path": pd.Series(paths, dtype=str)})[IMAGE_COLUMNS]


def _canonical(task: str, split: str, canonical_split: str | None) -> str:
    if canonical_split is not None:
        return canonical_split
    try:
        return MULTI30K_SPLITS[task][split]
    except KeyError:
        raise ValueError(
            f"Multi30K {task} split {split!r} has no canonical name; known: "
            f"{sorted(MULTI30K_SPLITS[task])} (pass canonical_split)"
        ) from None


def _available_splits(directory: Path, suffix: str) -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(p.name[: -len(suffix)] for p in directory.iterdir() if p.name.endswith(suffix))


def _image_list_path(root: Path, task: str, split: str) -> Path:
    name = f"{split}_images.txt" if task == "task2" else f"{split}.txt"
    path = root / task / "image_splits" / name
    if not path.is_file():
        suffix = "_images.txt" if task == "task2" else ".txt"
        known = _available_splits(root / task / "image_splits", suffix)
        raise FileNotFoundError(f"{path}: missing image list for Multi30K {task} split {split!r} "
                                f"(splits found: {known or 'none'})")
    return path


def read_multi30k_task2(root: str | os.PathLike, split: str, *, canonical_split: str | None = None,
                        langs: Sequence[str] = TASK2_LANGS, n_captions: int = TASK2_CAPTIONS,
                        corpus: str = MULTI30K_CORPUS["task2"]) -> tuple[pd.DataFrame, list[str]]:
    """Multi30K task2 (comparable captions) of one upstream split.

    Reads ``task2/raw/{split}.{n}.{lang}.gz`` (n = 1..n_captions) and
    ``task2/image_splits/{split}_images.txt``; caption_idx = n - 1. Returns the raw caption table
    (corpus ``m30k``, canonical split, e.g. ``test_2016`` -> ``test``) and the image-list entries
    (file names) in order.
    """
    root = Path(root)
    split_name = _canonical("task2", split, canonical_split)
    list_path = _image_list_path(root, "task2", split)
    names = read_image_split(list_path)
    captions = []
    for lang in langs:
        per_lang = []
        for n in range(1, n_captions + 1):
            path = root / "task2" / "raw" / f"{split}.{n}.{lang}.gz"
            per_lang.append(read_caption_file(path, expected_lines=len(names), image_list=list_path))
        captions.append(per_lang)
    ids = [multi30k_image_id(n) for n in names]
    table = _caption_table(corpus=corpus, split=split_name, image_ids=ids, langs=list(langs), captions=captions)
    return table, names


def read_multi30k_task1(root: str | os.PathLike, split: str, *, canonical_split: str | None = None,
                        langs: Sequence[str] | None = None,
                        corpus: str = MULTI30K_CORPUS["task1"]) -> tuple[pd.DataFrame, list[str]]:
    """Multi30K task1 (one caption per image and its translations) of one upstream split.

    Reads ``task1/raw/{split}.{lang}.gz`` and ``task1/image_splits/{split}.txt``; caption_idx 0.
    ``langs=None`` takes whichever of en, de, fr, cs exist for the split (at least one must);
    explicitly requested languages must all exist. Returns (raw caption table, image entries).
    """
    root = Path(root)
    split_name = _canonical("task1", split, canonical_split)
    list_path = _image_list_path(root, "task1", split)
    names = read_image_split(list_path)
    raw_dir = root / "task1" / "raw"
    if langs is None:
        langs = [lang for lang in TASK1_LANGS if (raw_dir / f"{split}.{lang}.gz").is_file()]
        if not langs:
            raise FileNotFoundError(
                f"{raw_dir / f'{split}.en.gz'}: missing caption file for Multi30K task1 split "
                f"{split!r} (no {split}.{{{','.join(TASK1_LANGS)}}}.gz in {raw_dir})"
            )
    captions = [[read_caption_file(raw_dir / f"{split}.{lang}.gz", expected_lines=len(names),
                                   image_list=list_path)] for lang in langs]
    ids = [multi30k_image_id(n) for n in names]
    table = _caption_table(corpus=corpus, split=split_name, image_ids=ids, langs=list(langs), captions=captions)
    return table, names


def read_multi30k(root: str | os.PathLike, *, task: str, split: str, canonical_split: str | None = None,
                  langs: Sequence[str] | None = None, corpus: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Dispatch to :func:`read_multi30k_task1` / :func:`read_multi30k_task2`."""
    if task not in MULTI30K_CORPUS:
        raise ValueError(f"unknown Multi30K task {task!r} (expected task1 or task2)")
    corpus = corpus or MULTI30K_CORPUS[task]
    if task == "task2":
        return read_multi30k_task2(root, split, canonical_split=canonical_split,
                                   langs=langs or TASK2_LANGS, corpus=corpus)
    return read_multi30k_task1(root, split, canonical_split=canonical_split, langs=langs, corpus=corpus)


def multi30k_image_table(names: Sequence[str], *, images_dir: str | os.PathLike) -> pd.DataFrame:
    """Image list for Multi30K (Flickr30K) images: ``path = images_dir / file name``."""
    return image_table(image_ids=[multi30k_image_id(n) for n in names],
                       files=[multi30k_image_file(n) for n in names], images_dir=images_dir)


# --------------------------------------------------------------------------------------------
# COCO (Karpathy splits)
# --------------------------------------------------------------------------------------------


def load_karpathy_json(path: str | os.PathLike) -> dict[str, Any]:
    """Load ``dataset_coco.json``, or its copy inside ``caption_datasets.zip``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing Karpathy split file")
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                member = next((n for n in zf.namelist() if PurePosixPath(n).name == "dataset_coco.json"), None)
                if member is None:
                    raise ValueError(f"{path}: no dataset_coco.json inside the archive")
                text = zf.read(member).decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: invalid UTF-8 ({err})") from err
    except zipfile.BadZipFile as err:
        raise ValueError(f"{path}: not a valid zip file ({err})") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from err
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{path}: expected an object with an 'images' list")
    return data


def read_coco_karpathy(path: str | os.PathLike, split: str, *, images_dir: str | os.PathLike = ".",
                       max_captions: int | None = 5, corpus: str = "coco",
                       ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """COCO captions and images of one canonical split from Karpathy's ``dataset_coco.json``.

    ``train`` = Karpathy ``train`` + ``restval``; image order = order in the JSON; image_id =
    ``str(cocoid)``; path = ``images_dir / filepath / filename``; language ``en``; ``raw`` = the
    sentence's ``raw`` text. The first ``max_captions`` sentences of each image are kept (None =
    all). Returns (raw caption table, image list, stats) where stats counts the images with more
    (or fewer) than ``max_captions`` sentences and the sentences dropped.
    """
    if split not in COCO_SPLITS:
        raise ValueError(f"unknown COCO split {split!r} (expected one of {sorted(COCO_SPLITS)})")
    if max_captions is not None and max_captions < 1:
        raise ValueError(f"max_captions must be >= 1 or None, got {max_captions}")
    path = Path(path)
    data = load_karpathy_json(path)
    wanted = COCO_SPLITS[split]
    known_splits = {s for group in COCO_SPLITS.values() for s in group}
    ids: list[str] = []
    files: list[str] = []
    cap_ids: list[str] = []
    cap_idx: list[int] = []
    cap_raw: list[str] = []
    seen: dict[str, int] = {}
    over = fewer = dropped = 0
    for index, image in enumerate(data["images"]):
        where = f"{path}: images[{index}]"
        if not isinstance(image, dict):
            raise ValueError(f"{where}: expected an object")
        for key in ("split", "cocoid", "filepath", "filename", "sentences"):
            if key not in image:
                raise ValueError(f"{where}: missing key {key!r}")
        if image["split"] not in known_splits:
            raise ValueError(f"{where}: unknown split {image['split']!r}")
        if image["split"] not in wanted:
            continue
        image_id = str(image["cocoid"])
        if image_id in seen:
            raise ValueError(f"{where}: cocoid {image_id} already used by images[{seen[image_id]}]")
        seen[image_id] = index
        sentences = image["sentences"]
        if not isinstance(sentences, list) or not sentences:
            raise ValueError(f"{where}: 'sentences' must be a non-empty list")
        keep = sentences if max_captions is None else sentences[:max_captions]
        if max_captions is not None:
            if len(sentences) > max_captions:
                over += 1
                dropped += len(sentences) - max_captions
            elif len(sentences) < max_captions:
                fewer += 1
        for j, sentence in enumerate(keep):
            if not isinstance(sentence, dict) or "raw" not in sentence:
                raise ValueError(f"{where}.sentences[{j}]: missing key 'raw'")
            raw = sentence["raw"]
            if not isinstance(raw, str) or not raw.strip():
                raise ValueError(f"{where}.sentences[{j}]: empty caption")
            cap_ids.append(image_id)
            cap_idx.append(j)
            cap_raw.append(raw)
        ids.append(image_id)
        files.append(os.path.join(str(image["filepath"]), str(image["filename"])))
    if not ids:
        raise ValueError(f"{path}: no images in Karpathy split(s) {'+'.join(wanted)}")
    n = len(cap_ids)
    captions = pd.DataFrame({
        "dataset": pd.Series([corpus] * n, dtype=str),
        "split": pd.Series([split] * n, dtype=str),
        "image_id": pd.Series(cap_ids, dtype=str),
        "lang": pd.Series(["en"] * n, dtype=str),
        "caption_idx": np.asarray(cap_idx, dtype=np.int64),
        "raw": pd.Series(cap_raw, dtype=str),
    })[RAW_CAPTION_COLUMNS]
    images = image_table(image_ids=ids, files=files, images_dir=images_dir)
    stats = {
        "split": split,
        "karpathy_splits": list(wanted),
        "images": len(ids),
        "captions": n,
        "max_captions": max_captions,
        "images_with_more_captions": over,
        "images_with_fewer_captions": fewer,
        "captions_dropped": dropped,
    }
    if over:
        log.info("%s %s: %d images had more than %d captions; %d extra captions dropped",
                 path, split, over, max_captions, dropped)
    return captions, images, stats


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _cmd_read_multi30k(args) -> int:
    langs = [x for x in args.langs.split(",") if x] if args.langs else None
    table, names = read_multi30k(args.root, task=args.task, split=args.split,
                                 canonical_split=args.canonical_split, langs=langs, corpus=args.corpus)
    write_parquet_atomic(args.captions_out, table)
    log.info("%s: %d captions of %d images (%s)", args.captions_out, len(table), len(names),
             ",".join(table["lang"].unique()))
    if args.images_out:
        write_parquet_atomic(args.images_out, multi30k_image_table(names, images_dir=args.images_dir or ""))
    return 0


def _cmd_read_coco(args) -> int:
    captions, images, stats = read_coco_karpathy(args.karpathy_json, args.split, images_dir=args.images_dir,
                                                 max_captions=args.max_captions or None, corpus=args.corpus)
    write_parquet_atomic(args.captions_out, captions)
    write_parquet_atomic(args.images_out, images)
    if args.stats_out:
        write_json_atomic(args.stats_out, stats)
    log.info("%s: %s", args.captions_out, json.dumps(stats))
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "read-multi30k", _cmd_read_multi30k)
    p.add_argument("--root", required=True, help="Multi30K data folder (holds task1/ and task2/)")
    p.add_argument("--task", required=True, choices=sorted(MULTI30K_CORPUS))
    p.add_argument("--split", required=True, help="upstream split name, e.g. train, val, test_2016, test_2016_flickr")
    p.add_argument("--canonical-split", default=None, choices=["train", "val", "test"],
                   help="split name written to the table (default: train/val/test from the upstream name)")
    p.add_argument("--langs", default=None,
                   help="comma-separated languages (task2 default en,de; task1 default: all of en,de,fr,cs present)")
    p.add_argument("--corpus", default=None, help="dataset name (default m30k for task2, m30k_task1 for task1)")
    p.add_argument("--captions-out", required=True, help="raw caption table (.parquet)")
    p.add_argument("--images-dir", default=None,
                   help="Flickr30K image folder, prefixed to the image paths (default: none, the paths are "
                        "relative to that folder, which the features step is given)")
    p.add_argument("--images-out", default=None, help="image list (.parquet)")

    p = commands.add_command(subparsers, "read-coco", _cmd_read_coco)
    p.add_argument("--karpathy-json", required=True, help="dataset_coco.json (or caption_datasets.zip)")
    p.add_argument("--split", required=True, choices=sorted(COCO_SPLITS),
                   help="canonical split (train = Karpathy train + restval)")
    p.add_argument("--images-dir", required=True, help="COCO image root holding train2014/ and val2014/")
    p.add_argument("--corpus", default="coco", help="dataset name (default coco)")
    p.add_argument("--captions-out", required=True)
    p.add_argument("--images-out", required=True)
    p.add_argument("--max-captions", type=int, default=5, help="captions kept per image (0 = all; default 5)")
    p.add_argument("--stats-out", default=None, help="JSON with image/caption counts and captions dropped")
