"""Readers of a user's corpus in the formats users already have (:mod:`pseudopairs.data.corpora`):

- **imagefolder** (Hugging Face ImageFolder): a folder of images (any sub-folders) and one
  ``metadata.csv``, ``metadata.jsonl`` or ``metadata.parquet``; ``file_name`` is an image's path
  relative to the folder, a caption column (``caption_column``, default ``text``) holds one
  caption; several captions of one image are several rows. Language: a column (``lang_column``)
  or the declaration's ``lang``; split: a ``split`` column (train/val/test), else a seeded split
  with ``split_sizes``.
- **webdataset** (img2dataset's output): tar shards, each sample ``{key}.jpg`` (or ``.jpeg``,
  ``.png``, ``.webp``), ``{key}.txt`` (the caption) and ``{key}.json`` (metadata; may give the
  split and language); read member by member (tarfile), images never decoded or copied: the
  image list records each image's shard, byte offset and size, and the features step reads the
  bytes from the shard.

Both give, per split, a raw caption table (``pseudopairs.core.io.RAW_CAPTION_COLUMNS``; images in
first-seen order, then languages in first-seen order, then captions in order) and an image list
(``image_id, path``: the path relative to the corpus' folder; a webdataset's also ``member``,
``offset``, ``size``). An image's id is its ``file_name`` without the extension (imagefolder) or
its key (webdataset).

Bad input is one line naming the file and line (or row), or the shard and key: a missing image,
a caption column absent or a caption empty, a duplicated image or key, metadata that is not
UTF-8, a split with no images. Nothing is written then.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.core.settings import language_hint
from pseudopairs.data.corpora import (IMAGE_SUFFIXES, SPLITS, ImageFolderCorpus, WebDatasetCorpus,
                                      CORPUS_KINDS)
from pseudopairs.core.io import IMAGE_COLUMNS, RAW_CAPTION_COLUMNS, write_parquet_if_changed, write_text_atomic

log = logging.getLogger(__name__)

LANG = re.compile(r"^[a-z]{2}$")
SHOWN = 3
#: the extra columns of a webdataset's image list: the member's name, its bytes in the shard
MEMBER_COLUMNS = ("member", "offset", "size")


class CorpusError(ValueError):
    """Bad input in a user's corpus; the message names the file and row, or shard and key."""


@dataclass
class Caption:
    image_id: str
    lang: str
    raw: str
    where: str        # file:line, or shard:key, for messages


@dataclass
class Collected:
    """What a reader found: captions in reading order, each image's split (None: seeded split),
    its path (and member bytes) and where it was first named."""

    captions: list[Caption] = field(default_factory=list)
    splits: dict[str, str | None] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    members: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# imagefolder
# --------------------------------------------------------------------------------------------


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise CorpusError(f"{path}:{line}: not UTF-8 (byte 0x{data[err.start]:02x} at column "
                          f"{column}); save the metadata as UTF-8") from None


def metadata_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) of a metadata file: ``file:line`` for CSV and JSON Lines, ``file: row N``
    for Parquet."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as err:  # noqa: BLE001 - whatever pyarrow says, the file is the cause
            raise CorpusError(f"{path}: not a readable Parquet file ({' '.join(str(err).split())})") from None
        for number, row in enumerate(table.to_pylist(), start=1):
            yield f"{path}: row {number}", row
        return
    text = _decode(path.read_bytes(), path)
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise CorpusError(f"{path}:{number}: not a JSON object ({err.msg})") from None
            if not isinstance(row, dict):
                raise CorpusError(f"{path}:{number}: not a JSON object")
            yield f"{path}:{number}", row
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None:
        raise CorpusError(f"{path}: empty metadata file (no header)")
    for row in reader:
        if None in row:
            raise CorpusError(f"{path}:{reader.line_num}: more fields than the header has")
        yield f"{path}:{reader.line_num}", row


def _columns(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except Exception as err:  # noqa: BLE001
            raise CorpusError(f"{path}: not a readable Parquet file ({' '.join(str(err).split())})") from None
    if path.suffix == ".csv":
        first = _decode(path.read_bytes().split(b"\n", 1)[0], path)
        return next(csv.reader([first]), [])
    return []   # JSON Lines: checked row by row


def _check_split(split: str | None, has_split: bool | None, *, where: str, missing: str) -> bool:
    """Whether the corpus' rows give their split: decided by the first row, then each row must
    agree (``missing`` says what a row lacks) and name one of :data:`SPLITS`."""
    if has_split is None:
        has_split = split is not None
    if (split is not None) != has_split:
        raise CorpusError(f"{where}: {missing}")
    if split is not None and split not in SPLITS:
        raise CorpusError(f"{where}: split {split!r} is not one of {', '.join(SPLITS)}")
    return has_split


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return str(value)


def image_id_of(file_name: str) -> str:
    """An imagefolder image's id: its path in the folder without the extension."""
    return str(PurePosixPath(file_name).with_suffix(""))


def collect_imagefolder(settings: ImageFolderCorpus, root: Path, metadata: str) -> Collected:
    path = root / metadata
    columns = _columns(path)
    wanted = ["file_name", settings.caption_column] + ([settings.lang_column] if settings.lang_column else [])
    absent = [c for c in wanted if columns and c not in columns]
    if absent:
        raise CorpusError(f"{path}: no column {absent[0]!r} (columns: {', '.join(columns)})"
                          + (f"; set caption_column to the caption column" if absent[0] == settings.caption_column else ""))
    found = Collected()
    seen: dict[tuple[str, str, str], str] = {}
    has_split: bool | None = None
    for where, row in metadata_rows(path):
        for column in wanted:
            if column not in row:
                raise CorpusError(f"{where}: no {column!r} field")
        name = _text(row["file_name"])
        if not name or not name.strip():
            raise CorpusError(f"{where}: empty file_name")
        pure = PurePosixPath(name.replace("\\", "/"))
        if pure.is_absolute() or ".." in pure.parts or pure.suffix.lower() not in IMAGE_SUFFIXES:
            raise CorpusError(f"{where}: file_name {name!r} must be an image's path inside the folder "
                              f"({', '.join(IMAGE_SUFFIXES)})")
        name = str(pure)
        caption = _text(row[settings.caption_column])
        if caption is None or not caption.strip():
            raise CorpusError(f"{where}: empty caption (column {settings.caption_column!r}) for {name}")
        lang = settings.lang if settings.lang_column is None else _text(row[settings.lang_column])
        if not lang or not LANG.match(lang):
            raise CorpusError(f"{where}: language {lang!r} (column {settings.lang_column!r}) is not a "
                              f"two-letter ISO 639-1 code such as fr{language_hint(lang)}")
        split = _text(row.get(settings.split_column)) if settings.split_column in row else None
        has_split = _check_split(split, has_split, where=where,
                                 missing=f"no {settings.split_column!r} value, while earlier rows have one")
        image_id = image_id_of(name)
        if image_id in found.paths and found.paths[image_id] != name:
            raise CorpusError(f"{where}: {name} and {found.paths[image_id]} ({found.where[image_id]}) "
                              f"have one image id {image_id!r}; rename one")
        if image_id in found.splits and found.splits[image_id] != split:
            raise CorpusError(f"{where}: {name} is in split {split!r} here and in "
                              f"{found.splits[image_id]!r} at {found.where[image_id]}")
        key = (image_id, lang, caption)
        if key in seen:
            raise CorpusError(f"{where}: duplicate row: {name} has this {lang} caption already at {seen[key]}")
        seen[key] = where
        if image_id not in found.paths:
            found.paths[image_id], found.splits[image_id], found.where[image_id] = name, split, where
        found.captions.append(Caption(image_id, lang, caption, where))
    if not found.captions:
        raise CorpusError(f"{path}: no rows")
    missing = [i for i, name in found.paths.items() if not (root / name).is_file()]
    if missing:
        first = missing[0]
        more = f"; first: {', '.join(found.paths[i] for i in missing[:SHOWN])}" if len(missing) > 1 else ""
        raise CorpusError(f"{found.where[first]}: image {found.paths[first]} not found in {root} "
                          f"({len(missing)} of {len(found.paths)} images missing{more})")
    return found


# --------------------------------------------------------------------------------------------
# webdataset
# --------------------------------------------------------------------------------------------


def sample_key(member: str) -> tuple[str, str]:
    """(key, extension) of a shard member: the path up to the first dot of its file name."""
    folder, _, name = member.rpartition("/")
    stem, _, ext = name.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def shard_samples(path: Path, name: str) -> Iterator[dict[str, Any]]:
    """The samples of one shard, in order: ``key``, ``image`` (member, offset, size) and the text
    of ``txt`` and ``json``; read member by member, images skipped over, never read."""
    try:
        tar = tarfile.open(path, mode="r:")
    except (tarfile.TarError, OSError) as err:
        raise CorpusError(f"{name}: not a readable tar shard ({err})") from None
    samples: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    with tar:
        try:
            for member in tar:
                if not member.isfile():
                    continue
                key, ext = sample_key(member.name)
                sample = samples.get(key)
                if sample is None:
                    sample = samples[key] = {"key": key}
                    order.append(key)
                if f".{ext}" in IMAGE_SUFFIXES:
                    if "image" in sample:
                        raise CorpusError(f"{name}: sample {key!r} has two images ({sample['image'][0]}, {member.name})")
                    sample["image"] = (member.name, member.offset_data, member.size)
                elif ext in ("txt", "json"):
                    if ext in sample:
                        raise CorpusError(f"{name}: sample {key!r} has two {ext} members")
                    data = tar.extractfile(member).read()
                    try:
                        sample[ext] = data.decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise CorpusError(f"{name}: {member.name} is not UTF-8 (byte 0x{data[err.start]:02x} "
                                          f"at offset {err.start})") from None
        except (tarfile.TarError, EOFError, OSError) as err:
            raise CorpusError(f"{name}: not a readable tar shard ({err})") from None
    for key in order:
        yield samples[key]


def collect_webdataset(settings: WebDatasetCorpus, root: Path, shards: Sequence[str]) -> Collected:
    found = Collected()
    has_split: bool | None = None
    for shard in shards:
        for sample in shard_samples(root / shard, shard):
            key, where = sample["key"], f"{shard}: sample {sample['key']!r}"
            if key in found.where:
                raise CorpusError(f"{where}: key {key!r} appears twice (also in {found.where[key].split(':')[0]})")
            if "image" not in sample:
                raise CorpusError(f"{where} has no image ({key}.jpg, .png or .webp)")
            if "txt" not in sample:
                raise CorpusError(f"{where} has no caption ({key}.txt)")
            caption = sample["txt"].rstrip("\r\n")
            if not caption.strip():
                raise CorpusError(f"{where}: {key}.txt is empty")
            meta: dict[str, Any] = {}
            if "json" in sample:
                try:
                    meta = json.loads(sample["json"])
                except json.JSONDecodeError as err:
                    raise CorpusError(f"{where}: {key}.json is not valid JSON ({err.msg})") from None
                if not isinstance(meta, dict):
                    raise CorpusError(f"{where}: {key}.json is not a JSON object")
            lang = settings.lang if settings.lang_field is None else _text(meta.get(settings.lang_field))
            if not lang or not LANG.match(lang):
                raise CorpusError(f"{where}: language {lang!r} ({key}.json field {settings.lang_field!r}) "
                                  f"is not a two-letter ISO 639-1 code such as fr{language_hint(lang)}")
            split = _text(meta.get(settings.split_field))
            has_split = _check_split(split, has_split, where=where,
                                     missing=f"{key}.json has no {settings.split_field!r}, while earlier samples do")
            found.paths[key], found.splits[key], found.where[key] = shard, split, where
            found.members[key] = sample["image"]
            found.captions.append(Caption(key, lang, caption, where))
    if not found.captions:
        raise CorpusError(f"{', '.join(shards[:SHOWN])}: no samples")
    return found


# --------------------------------------------------------------------------------------------
# splits and tables
# --------------------------------------------------------------------------------------------


def seeded_split(image_ids: Sequence[str], sizes: dict[str, int], seed: int, *, corpus: str) -> dict[str, str]:
    """A seeded split of the images: ``sizes['val']`` and ``sizes['test']`` images drawn (by a
    permutation of the sorted ids, so the metadata's row order does not matter), the rest train."""
    ids = sorted(image_ids)
    n_val, n_test = sizes["val"], sizes["test"]
    if n_val + n_test >= len(ids):
        raise CorpusError(f"config key 'corpora.{corpus}.split_sizes': val {n_val} + test {n_test} "
                          f"leave split 'train' no images (the corpus has {len(ids)})")
    order = np.random.default_rng(seed).permutation(len(ids))
    splits = {}
    for rank, index in enumerate(order):
        splits[ids[index]] = "val" if rank < n_val else "test" if rank < n_val + n_test else "train"
    return splits


def assign_splits(found: Collected, settings, *, corpus: str, source: str, column: str) -> dict[str, str]:
    if next(iter(found.splits.values())) is not None:
        splits = dict(found.splits)
        for split in SPLITS:
            if split not in splits.values():
                held = ", ".join(s for s in SPLITS if s in splits.values())
                raise CorpusError(f"{source}: split {split!r} has no images ({column!r} holds {held})")
        return splits
    if settings.split_sizes is None:
        raise CorpusError(f"config key 'corpora.{corpus}.split_sizes': {source} gives no "
                          f"{column!r}; set split_sizes (val, test) for a seeded split")
    return seeded_split(list(found.paths), settings.split_sizes, settings.seed, corpus=corpus)


def corpus_tables(found: Collected, splits: dict[str, str], *, corpus: str,
                  ) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Per split: (raw caption table, image list)."""
    by_image: dict[str, dict[str, list[str]]] = {}
    for caption in found.captions:
        by_image.setdefault(caption.image_id, {}).setdefault(caption.lang, []).append(caption.raw)
    out = {}
    for split in SPLITS:
        rows, images = [], []
        for image_id, langs in by_image.items():
            if splits[image_id] != split:
                continue
            images.append(image_id)
            for lang, raws in langs.items():
                rows += [(corpus, split, image_id, lang, k, raw) for k, raw in enumerate(raws)]
        captions = pd.DataFrame(rows, columns=RAW_CAPTION_COLUMNS).astype(
            {c: str for c in RAW_CAPTION_COLUMNS if c != "caption_idx"}).astype({"caption_idx": np.int64})
        image_list = pd.DataFrame({"image_id": pd.Series(images, dtype=str),
                                   "path": pd.Series([found.paths[i] for i in images], dtype=str)})
        if found.members:
            member = [found.members[i] for i in images]
            image_list["member"] = pd.Series([m[0] for m in member], dtype=str)
            image_list["offset"] = np.asarray([m[1] for m in member], dtype=np.int64)
            image_list["size"] = np.asarray([m[2] for m in member], dtype=np.int64)
        out[split] = (captions, image_list[list(IMAGE_COLUMNS) + [c for c in MEMBER_COLUMNS if c in image_list]])
    return out


def read_corpus(corpus: str, declaration: dict[str, Any], root: str | os.PathLike,
                ) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Read a generic corpus (its ``corpora`` entry, folder ``root``) into per-split tables."""
    from pseudopairs.data.corpora import corpus_settings, source_files

    config = {"corpora": {corpus: {**declaration, **_root_key(declaration, root)}}}
    kind = CORPUS_KINDS.get(declaration["kind"])
    settings = corpus_settings(config, corpus)
    names = source_files(config, corpus)
    root = Path(root)
    if kind.name == "imagefolder":
        found = collect_imagefolder(settings, root, names[0])
        source, column = str(root / names[0]), settings.split_column
    else:
        found = collect_webdataset(settings, root, names)
        shown = names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"
        source, column = f"{shown} ({{key}}.json)", settings.split_field
    splits = assign_splits(found, settings, corpus=corpus, source=source, column=column)
    return corpus_tables(found, splits, corpus=corpus)


def _root_key(declaration: dict[str, Any], root) -> dict[str, str]:
    """The declaration's folder key pointed at ``root`` (the same files through another path)."""
    if declaration["kind"] == "imagefolder":
        return {"root": str(root)}
    shards = PurePosixPath(declaration["shards"])
    if shards.suffix == ".tar" or "{" in shards.name:
        return {"shards": str(PurePosixPath(str(root)) / shards.name)}
    return {"shards": str(root)}


def images_key(declaration: dict[str, Any], source: str | os.PathLike) -> str:
    """What a corpus' image lists are made from: the SHA-256 of its reading settings (the
    declaration without its folder) and of its source manifest's text. Rule ``corpus_images``
    writes it beside the lists; :func:`refresh_image_lists` compares it at each parse."""
    import hashlib

    from pseudopairs.data.corpora import reading_settings

    name = "corpus"
    settings = reading_settings({"corpora": {name: declaration}}, name)
    text = json.dumps(settings, sort_keys=True) + "\n" + Path(source).read_text(encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest() + "\n"


def write_image_lists(tables: dict[str, tuple[pd.DataFrame, pd.DataFrame]], outputs: Sequence[str]) -> list[str]:
    """Each split's image list, rewritten only where its content changed (an unchanged list keeps
    its modification time, so its features do not rerun); returns the lists rewritten."""
    return [out for split, out in zip(SPLITS, outputs) if write_parquet_if_changed(out, tables[split][1])]


def refresh_image_lists(config: dict, name: str) -> list[str] | None:
    """Bring a generic corpus' image lists up to date before the DAG is built (main process): when
    its source manifest or reading settings changed since the lists were made (their key), the
    corpus is read again and each list rewritten only if its content changed. So an edited
    caption reruns the caption side only (rule ``read_corpus``), while an added or moved image
    makes its split's list newer and reruns its features. None when there is nothing to refresh
    (no lists yet: rule ``corpus_images`` makes them) or the corpus cannot be read (its
    ``read_corpus`` job says why)."""
    from pseudopairs.core import layout
    from pseudopairs.data.corpora import declaration, image_root

    key_path = Path(layout.corpus_images_key(name))
    source = Path(layout.corpus_source(name))
    lists = [layout.images(name, split) for split in SPLITS]
    if not (key_path.is_file() and source.is_file() and all(Path(p).is_file() for p in lists)):
        return None
    entry = declaration(config, name)
    key = images_key(entry, source)
    if key_path.read_text(encoding="utf-8") == key:
        return []
    try:
        tables = read_corpus(name, entry, image_root(config, name))
    except (OSError, ValueError):
        return None
    rewritten = write_image_lists(tables, lists)
    write_text_atomic(key_path, key)
    return rewritten


def _cmd_read_corpus(args) -> int:
    if not args.captions_out and not args.images_out:
        raise ValueError("read-corpus: give --captions-out, --images-out or both")
    tables = read_corpus(args.corpus, args.declaration, args.root)
    for split, captions_out in zip(SPLITS, args.captions_out or []):
        captions, images = tables[split]
        changed = "written" if write_parquet_if_changed(captions_out, captions) else "unchanged"
        log.info("%s %s: %d captions of %d images (%s), %s", args.corpus, split, len(captions),
                 len(images), ",".join(captions["lang"].unique()), changed)
    if args.images_out:
        rewritten = write_image_lists(tables, args.images_out)
        log.info("%s: image lists rewritten: %s", args.corpus, ", ".join(rewritten) or "none")
    if args.images_key:
        write_text_atomic(args.images_key, images_key(args.declaration, args.source))
    return 0


def _cmd_corpus_source(args) -> int:
    from pseudopairs.data.corpora import image_root, source_files
    from pseudopairs.data.manifest import file_manifest, write_manifest

    config = {"corpora": {args.corpus: args.declaration}}
    manifest, stamps = file_manifest(source_files(config, args.corpus), image_root(config, args.corpus),
                                     previous=args.output)
    changed = "written" if write_manifest(args.output, manifest, stamps) else "unchanged"
    print(f"{args.output} ({changed}): {manifest['n_files']} source files")
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "read-corpus", _cmd_read_corpus)
    p.add_argument("--corpus", required=True, help="the corpus' name (the tables' dataset column)")
    commands.add_json(p, "--declaration", "the corpus' entry of the config's corpora section")
    p.add_argument("--root", required=True, help="its folder (imagefolder root, the shards' folder)")
    p.add_argument("--captions-out", nargs=len(SPLITS), metavar="PARQUET",
                   help=f"raw caption tables of {', '.join(SPLITS)} (each rewritten only when it changes)")
    p.add_argument("--images-out", nargs=len(SPLITS), metavar="PARQUET",
                   help=f"image lists of {', '.join(SPLITS)} (each rewritten only when it changes)")
    p.add_argument("--images-key", default=None, metavar="FILE",
                   help="write here what the image lists were made from (needs --source)")
    p.add_argument("--source", default=None, help="the corpus' source manifest (corpus-source)")

    p = commands.add_command(subparsers, "corpus-source", _cmd_corpus_source)
    p.add_argument("--corpus", required=True, help="the corpus' name")
    commands.add_json(p, "--declaration", "the corpus' entry of the config's corpora section")
    p.add_argument("--output", required=True, help="the manifest (JSON), rewritten only when it changes")
