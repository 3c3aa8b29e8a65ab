"""``pseudopairs index``: a collection's images (and optionally its captions) embedded by an
exported model (:func:`pseudopairs.load`) into a search index folder (docs/search.md).

The collection (``--images``) is one of:

- a **folder of images** (``.jpg``, ``.jpeg``, ``.png``, ``.webp``, any sub-folders): every image,
  in the sorted order of its path relative to the folder; its id is that path without the
  extension (``dogs/001``);
- a **webdataset**: one ``.tar`` shard, or a folder of shards (and no loose images): every
  sample's image, shards in sorted order, members in their order; the id is the sample's key,
  prefixed by the shard's name when there are several shards;
- an **image list** (``.parquet`` or ``.csv`` with ``image_id`` and ``path``, and ``member``,
  ``offset``, ``size`` for shard members): the pipeline's ``results/images/{corpus}/{split}.parquet``
  of any declared corpus (world, Multi30K, COCO, imagefolder, webdataset), paths relative to
  ``--image-root`` (default: the working directory, as in the workflow).

The index folder::

    plan.json              what is being built (listing digest, model hash, chunk size), first
    images-00000.parquet   id, source, offset, size, vector (float32, L2-normalised) per chunk
    captions.parquet       image_id, lang, caption, vector (with --captions)
    manifest.json          written last: model hash, dim, languages, model folder, root, parts

Every file is written atomically (temporary name, then rename), and ``manifest.json`` last, so a
killed run leaves no folder that looks complete; a rerun with the same collection and model keeps
the finished chunks and embeds the rest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pseudopairs import commands
from pseudopairs.data.corpora import IMAGE_SUFFIXES
from pseudopairs.core.io import atomic_path, write_json_atomic

log = logging.getLogger(__name__)

FORMAT = "pseudopairs-search-index/1"
MANIFEST = "manifest.json"
PLAN = "plan.json"
CAPTIONS = "captions.parquet"
DEFAULT_CHUNK = 4096
CAPTION_TEXT_COLUMNS = ("raw", "caption", "text")


class SearchError(ValueError):
    """Bad input to ``index`` or an index that cannot be used; the message is one line naming the
    file, option or field."""


# --------------------------------------------------------------------------------------------
# The collection
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collection:
    """What ``index`` embeds: ``ids`` and ``sources`` (paths relative to ``root``, or
    ``shard[member]``), ``offset``/``size`` of shard members (−1 for files), and the ``kind``."""

    kind: str
    root: Path
    ids: list[str]
    sources: list[str]
    files: list[str]
    offset: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def digest(self) -> str:
        """SHA-256 of the listing (ids, sources, member ranges): what a resumed run must match."""
        h = hashlib.sha256()
        for i, s, o, z in zip(self.ids, self.sources, self.offset.tolist(), self.size.tolist()):
            h.update(f"{i}\t{s}\t{o}\t{z}\n".encode())
        return h.hexdigest()

    def payload(self, i: int) -> Any:
        """What the model's ``encode_images`` takes for image ``i``: a path, or a member's bytes."""
        if self.offset[i] < 0:
            return self.files[i]
        from pseudopairs.features.network import image_bytes

        return image_bytes(self.files[i], (int(self.offset[i]), int(self.size[i])))


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def _unique(ids: Sequence[str], sources: Sequence[str], where: str) -> None:
    seen: dict[str, str] = {}
    for i, s in zip(ids, sources):
        if i in seen:
            raise SearchError(f"{where}: image id {i!r} appears twice ({seen[i]}, {s})")
        seen[i] = s


def folder_collection(root: Path) -> Collection:
    """Every image under ``root`` (recursively), sorted by relative path."""
    rel = sorted(PurePosixPath(p.relative_to(root).as_posix()) for p in root.rglob("*")
                 if p.is_file() and _is_image(p) and not p.name.startswith("."))
    if not rel:
        raise SearchError(f"--images {root}: no images ({', '.join(IMAGE_SUFFIXES)}) in the folder "
                          "or its sub-folders, and no .tar shards")
    ids = [str(r.with_suffix("")) for r in rel]
    sources = [str(r) for r in rel]
    _unique(ids, sources, f"--images {root}")
    return Collection("folder", root, ids, sources, [str(root / s) for s in sources],
                      np.full(len(ids), -1, np.int64), np.full(len(ids), -1, np.int64))


def shard_collection(root: Path, shards: Sequence[Path]) -> Collection:
    """Every sample's image of the webdataset ``shards`` (under ``root``), in order."""
    from pseudopairs.data.generic import CorpusError, shard_samples

    ids, sources, files, offset, size = [], [], [], [], []
    for shard in shards:
        name = shard.relative_to(root).as_posix()
        try:
            for sample in shard_samples(shard, name):
                if "image" not in sample:
                    continue
                member, off, n = sample["image"]
                ids.append(sample["key"] if len(shards) == 1 else f"{Path(name).stem}/{sample['key']}")
                sources.append(f"{name}[{member}]")
                files.append(str(shard))
                offset.append(off)
                size.append(n)
        except CorpusError as err:
            raise SearchError(f"--images: {err}") from None
    if not ids:
        raise SearchError(f"--images {root}: the shards hold no images")
    _unique(ids, sources, f"--images {root}")
    return Collection("webdataset", root, ids, sources, files, np.asarray(offset, np.int64),
                      np.asarray(size, np.int64))


def list_collection(path: Path, image_root: Path) -> Collection:
    """The images of an image list (the pipeline's ``results/images/{corpus}/{split}.parquet``)."""
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, dtype=str)
    except Exception as err:  # noqa: BLE001 - any unreadable list is one line naming it
        raise SearchError(f"--images {path}: not a readable image list ({err})") from None
    for column in ("image_id", "path"):
        if column not in frame.columns:
            raise SearchError(f"--images {path}: no column {column!r} (an image list has image_id, path)")
    members = "member" in frame.columns
    ids = frame["image_id"].astype(str).tolist()
    paths = frame["path"].astype(str).tolist()
    sources = [f"{p}[{m}]" for p, m in zip(paths, frame["member"])] if members else paths
    _unique(ids, sources, f"--images {path}")
    files = [str(image_root / p) for p in paths]
    for row, f in enumerate(files):
        if not Path(f).is_file():
            raise SearchError(f"--images {path} row {row + 1}: {f} not found (paths are relative to "
                              f"--image-root, here {image_root})")
    n = len(ids)
    offset = frame["offset"].astype(np.int64).to_numpy() if members else np.full(n, -1, np.int64)
    size = frame["size"].astype(np.int64).to_numpy() if members else np.full(n, -1, np.int64)
    return Collection("list", image_root, ids, sources, files, offset, size)


def collection(images: str | os.PathLike, *, image_root: str | os.PathLike | None = None) -> Collection:
    """The collection ``--images`` names (module docstring)."""
    path = Path(images)
    if not path.exists():
        raise SearchError(f"--images {path}: not found")
    if path.is_file() and path.suffix in (".parquet", ".csv"):
        return list_collection(path, Path(image_root or ".").resolve())
    if path.is_file() and path.suffix == ".tar":
        return shard_collection(path.parent.resolve(), [path.resolve()])
    if path.is_dir():
        root = path.resolve()
        shards = sorted(p for p in root.rglob("*.tar") if p.is_file())
        if shards and not any(_is_image(p) for p in root.rglob("*") if p.is_file()):
            return shard_collection(root, shards)
        return folder_collection(root)
    raise SearchError(f"--images {path}: expected a folder of images, a .tar shard or an image list "
                      "(.parquet/.csv)")


# --------------------------------------------------------------------------------------------
# Chunks
# --------------------------------------------------------------------------------------------


def part_name(i: int) -> str:
    return f"images-{i:05d}.parquet"


def vector_column(vectors: np.ndarray) -> pa.FixedSizeListArray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])


def write_part(path: Path, *, ids: Sequence[str], sources: Sequence[str], offset: np.ndarray,
               size: np.ndarray, vectors: np.ndarray) -> None:
    table = pa.table({"id": pa.array(list(ids), pa.string()), "source": pa.array(list(sources), pa.string()),
                      "offset": pa.array(offset, pa.int64()), "size": pa.array(size, pa.int64()),
                      "vector": vector_column(vectors)})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_vectors(table: pa.Table, column: str = "vector") -> np.ndarray:
    """A fixed-size-list column as an (n, dim) float32 array."""
    col = table.column(column).combine_chunks()
    dim = col.type.list_size
    return col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, dim)


def _finished(path: Path, ids: Sequence[str]) -> bool:
    """Whether ``path`` is a complete part holding exactly ``ids`` (a resumed run keeps it)."""
    if not path.is_file():
        return False
    try:
        return pq.read_table(path, columns=["id"]).column("id").to_pylist() == list(ids)
    except Exception:  # noqa: BLE001 - an unreadable part is rebuilt
        return False


def _plan(items: Collection, model, chunk: int) -> dict:
    return {"format": FORMAT, "listing": items.digest(), "images": len(items), "chunk": chunk,
            "model_hash": model.model_hash, "dim": int(model.dim)}


def _start(out: Path, plan: dict) -> None:
    """Begin or resume: an earlier run's parts are kept only when its plan is this one."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    old = out / PLAN
    same = False
    if old.is_file():
        try:
            same = json.loads(old.read_text(encoding="utf-8")) == plan
        except (OSError, ValueError):
            same = False
    if not same:
        for entry in out.iterdir():
            if entry.is_file() and (entry.name.startswith("images-") or entry.name == CAPTIONS
                                    or entry.name.startswith(".images-")):
                entry.unlink()
        write_json_atomic(old, plan)


def embed_images(items: Collection, model, out: Path, *, chunk: int, batch_size: int,
                 progress: bool = True) -> list[dict]:
    """Embed the collection chunk by chunk into ``out``; finished chunks are skipped."""
    from tqdm import tqdm

    parts = []
    bar = tqdm(total=len(items), unit="image", desc="index", disable=not progress)
    for c, start in enumerate(range(0, len(items), chunk)):
        stop = min(len(items), start + chunk)
        path = out / part_name(c)
        ids = items.ids[start:stop]
        if not _finished(path, ids):
            vectors = np.empty((stop - start, model.dim), np.float32)
            for b in range(start, stop, batch_size):
                e = min(stop, b + batch_size)
                vectors[b - start: e - start] = model.encode_images([items.payload(i) for i in range(b, e)],
                                                                    batch_size=batch_size)
                bar.update(e - b)
            write_part(path, ids=ids, sources=items.sources[start:stop], offset=items.offset[start:stop],
                       size=items.size[start:stop], vectors=vectors)
        else:
            bar.update(stop - start)
        parts.append({"file": path.name, "rows": stop - start})
    bar.close()
    return parts


# --------------------------------------------------------------------------------------------
# Captions
# --------------------------------------------------------------------------------------------


def read_caption_table(path: Path, *, lang: str | None) -> pd.DataFrame:
    """``image_id``, ``lang``, ``caption`` of a caption table (the pipeline's raw caption table, or
    a .csv/.tsv/.jsonl/.parquet with ``image_id`` and ``raw``/``caption``/``text``, and ``lang``
    unless ``--lang`` gives it)."""
    try:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        elif path.suffix == ".jsonl":
            frame = pd.read_json(path, lines=True, dtype=False)
        else:
            frame = pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",", dtype=str,
                                keep_default_na=False)
    except Exception as err:  # noqa: BLE001
        raise SearchError(f"--captions {path}: not a readable caption table ({err})") from None
    text = next((c for c in CAPTION_TEXT_COLUMNS if c in frame.columns), None)
    if "image_id" not in frame.columns or text is None:
        raise SearchError(f"--captions {path}: needs columns image_id and one of {', '.join(CAPTION_TEXT_COLUMNS)}")
    if lang is None and "lang" not in frame.columns:
        raise SearchError(f"--captions {path}: no 'lang' column; give the captions' language with --lang")
    out = pd.DataFrame({"image_id": frame["image_id"].astype(str),
                        "lang": lang if lang is not None else frame["lang"].astype(str),
                        "caption": frame[text].astype(str)})
    empty = np.flatnonzero(out["caption"].str.strip() == "")
    if empty.size:
        raise SearchError(f"--captions {path} row {empty[0] + 1}: the caption is empty")
    return out


def embed_captions(path: Path, model, out: Path, *, ids: set[str], lang: str | None,
                   batch_size: int) -> dict:
    """Embed the captions (in the model's languages) of the indexed images into ``captions.parquet``."""
    table = read_caption_table(path, lang=lang)
    unknown = np.flatnonzero(~table["image_id"].isin(ids).to_numpy())
    if unknown.size:
        row = int(unknown[0])
        raise SearchError(f"--captions {path} row {row + 1}: image_id {table['image_id'].iloc[row]!r} "
                          "is not in the indexed collection")
    if lang is not None and lang not in model.languages:
        raise SearchError(f"--lang: {lang!r} is not one of the model's languages ({', '.join(model.languages)})")
    dropped = sorted(set(table["lang"]) - set(model.languages))
    if dropped:
        log.info("captions in %s skipped: the model's languages are %s", ", ".join(dropped),
                 ", ".join(model.languages))
    table = table[table["lang"].isin(model.languages)].reset_index(drop=True)
    if table.empty:
        raise SearchError(f"--captions {path}: no caption in the model's languages ({', '.join(model.languages)})")
    vectors = np.empty((len(table), model.dim), np.float32)
    for code, rows in table.groupby("lang", sort=True).indices.items():
        vectors[rows] = model.encode_texts(table["caption"].iloc[rows].tolist(), lang=code,
                                           batch_size=batch_size)
    arrow = pa.table({"image_id": pa.array(table["image_id"].tolist(), pa.string()),
                      "lang": pa.array(table["lang"].tolist(), pa.string()),
                      "caption": pa.array(table["caption"].tolist(), pa.string()),
                      "vector": vector_column(vectors)})
    with atomic_path(out / CAPTIONS) as tmp:
        pq.write_table(arrow, tmp)
    return {"file": CAPTIONS, "rows": len(table), "languages": sorted(set(table["lang"]))}


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def build_index(*, model: Any, images: str | os.PathLike, out: str | os.PathLike,
                image_root: str | os.PathLike | None = None, captions: str | os.PathLike | None = None,
                lang: str | None = None, chunk: int = DEFAULT_CHUNK, batch_size: int = 64,
                device: str = "cpu", progress: bool = True) -> dict:
    """Build (or finish) the index of ``images`` in ``out`` with ``model`` (an exported model's
    folder, or a loaded model); returns its manifest."""
    from pseudopairs.search.model import load

    if chunk < 1:
        raise SearchError(f"--chunk: must be ≥ 1, got {chunk}")
    if batch_size < 1:
        raise SearchError(f"--batch-size: must be ≥ 1, got {batch_size}")
    items = collection(images, image_root=image_root)
    if not hasattr(model, "encode_images"):
        if not Path(model).is_dir():
            raise SearchError(f"--model {model}: not found (an exported model folder: pseudopairs export)")
        model = load(model, device=device)
    out = Path(out)
    plan = _plan(items, model, chunk)
    _start(out, plan)
    parts = embed_images(items, model, out, chunk=chunk, batch_size=batch_size, progress=progress)
    caption_info = None
    if captions is not None:
        caption_info = embed_captions(Path(captions), model, out, ids=set(items.ids), lang=lang,
                                      batch_size=256)
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("pseudopairs")
    except PackageNotFoundError:  # run from a source tree that is not installed
        __version__ = None
    manifest = {**plan, "kind": items.kind, "root": str(items.root), "model": str(Path(model.folder).resolve()),
                "languages": list(model.languages), "parts": parts, "captions": caption_info,
                "version": __version__}
    write_json_atomic(out / MANIFEST, manifest)
    log.info("indexed %d images%s into %s", len(items),
             f" and {caption_info['rows']} captions" if caption_info else "", out)
    return manifest


def _cmd_index(args: argparse.Namespace) -> int:
    build_index(model=args.model, images=args.images, out=args.index_dir, image_root=args.image_root,
                captions=args.captions, lang=args.lang, chunk=args.chunk, batch_size=args.batch_size,
                device=args.device, progress=not args.no_progress)
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "index", _cmd_index, description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an exported model folder (pseudopairs export)")
    p.add_argument("--images", required=True,
                   help="a folder of images, a webdataset (.tar shard or folder of shards), or an image "
                        "list (.parquet/.csv: image_id, path; the pipeline's results/images/CORPUS/SPLIT.parquet)")
    p.add_argument("--image-root", default=None,
                   help="the folder an image list's paths are relative to (default: the working directory)")
    p.add_argument("--captions", default=None,
                   help="the collection's captions (image_id, raw/caption/text, lang), for image -> caption search")
    p.add_argument("--lang", default=None, help="the captions' language when the table has no lang column")
    p.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, help="images per part file (the unit of resuming)")
    p.add_argument("--batch-size", type=int, default=64, help="images per forward pass")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("index_dir", metavar="INDEX_DIR", help="the index folder to write (or finish)")
