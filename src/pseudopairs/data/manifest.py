"""Manifests keyed by content: the files a step reads from a folder the user keeps outside the
workflow (the Flickr30K images of ``paper_data.flickr30k_images``, an ``imagefolder`` or
``webdataset`` corpus: :mod:`pseudopairs.data.corpora`).

Such a folder as a directory input would rerun ``features`` (and by modification time everything
after it, up to hundreds of GPU jobs) whenever anything in it changes, and the folder's path as a
parameter would rerun everything when the same files are reached through another path (a symlink,
a copy on scratch). Instead the step depends on a manifest: for each file it needs, in order, its
name *relative to the folder*, its size and the SHA-256 of its content (``null`` for a missing
file). The manifest is rewritten only when that text changes (:func:`write_manifest`), so

- the same files through another path, a file touched or copied without its modification time,
  an unrelated file added: the manifest keeps its text and its modification time, nothing reruns;
- a changed, added or removed file of the split: the manifest is rewritten, newer than what was
  made from it, which reruns.

Hashing reads every file, so each manifest keeps a sidecar (``….stamps.json``, an input of
nothing) with each file's size and modification time when it was hashed: a refresh
(:func:`refresh_manifest`, which the workflow runs when it parses, before the DAG is built)
hashes again only the files whose size or time changed -- a symlinked folder or a copy made
with ``cp -a`` / ``rsync -a`` reads nothing.

Two kinds of manifest: an image list's (``image-manifest``: the distinct files its ``path``
column names -- images, or a webdataset's shards -- under ``--root``) and a corpus' source files
(``corpus-source`` in :mod:`pseudopairs.data.generic`: an imagefolder's metadata file, a
webdataset's shards).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from pseudopairs import commands

MANIFEST_VERSION = 2
SHOWN = 5   # missing files named in an error


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's content."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def stamps_path(manifest: str | os.PathLike) -> Path:
    """The sidecar of a manifest: size, modification time and digest of each file when hashed."""
    manifest = Path(manifest)
    return manifest.with_name(manifest.name.removesuffix(".json") + ".stamps.json")


def _read_stamps(manifest: str | os.PathLike | None) -> dict[str, list]:
    if manifest is None:
        return {}
    try:
        stamps = json.loads(stamps_path(manifest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def file_manifest(names: Sequence[str], root: str | os.PathLike | None = None, *,
                  previous: str | os.PathLike | None = None) -> tuple[dict[str, Any], dict[str, list]]:
    """The manifest of files ``names`` (relative to ``root``; as given when ``root`` is None),
    each once, in first-seen order, and its stamps. A file whose size and modification time are
    those the ``previous`` manifest's stamps recorded keeps its digest unread."""
    known = _read_stamps(previous)
    files, stamps = [], {}
    for name in dict.fromkeys(names):
        path = os.path.join(os.fspath(root), name) if root is not None else name
        try:
            st = os.stat(path)
        except OSError:
            files.append([name, None, None])
            continue
        old = known.get(name)
        if isinstance(old, list) and len(old) == 3 and old[:2] == [st.st_size, st.st_mtime_ns]:
            digest = old[2]
        else:
            digest = file_digest(path)
        files.append([name, st.st_size, digest])
        stamps[name] = [st.st_size, st.st_mtime_ns, digest]
    manifest = {"version": MANIFEST_VERSION, "n_files": len(files),
                "n_missing": sum(1 for f in files if f[1] is None), "files": files}
    return manifest, stamps


def image_list_files(images: str | os.PathLike) -> tuple[list[str], int]:
    """The files an image list (``image_id, path`` Parquet) names, each once in first-seen order,
    and its image count (the column deduplicated by Arrow: a webdataset's 3 million rows in a few
    hundred shards never become 3 million Python strings)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pseudopairs.core.io import reading

    with reading(images, "an image list (Parquet: image_id, path)"):
        column = pq.read_table(images, columns=["path"]).column("path")
    return [str(name) for name in pc.unique(column).to_pylist()], len(column)


def image_manifest(images: str | os.PathLike, root: str | os.PathLike | None = None, *,
                   previous: str | os.PathLike | None = None) -> tuple[dict[str, Any], dict[str, list]]:
    """The manifest (and stamps) of the files an image list names, relative to ``root``."""
    names, n_images = image_list_files(images)
    manifest, stamps = file_manifest(names, root, previous=previous)
    return {**manifest, "n_images": n_images}, stamps


def missing(manifest: dict[str, Any]) -> list[str]:
    """The names of the manifest's files that were not there."""
    return [f[0] for f in manifest["files"] if f[1] is None]


def missing_message(manifest: dict[str, Any], *, what: str, root: str | os.PathLike | None) -> str | None:
    """One line naming how many of the manifest's files are missing and the first ones (None when
    none is)."""
    names = missing(manifest)
    if not names:
        return None
    where = f" from {root}" if root is not None else ""
    more = ", …" if len(names) > SHOWN else ""
    return (f"{what}: {len(names)} of {manifest['n_files']} files are missing{where} (first: "
            f"{', '.join(names[:SHOWN])}{more})")


def _text(manifest: dict[str, Any]) -> str:
    # one file per line: a diff of two manifests shows which files changed
    head = {k: v for k, v in manifest.items() if k != "files"}
    lines = ",\n".join(json.dumps(f, ensure_ascii=False) for f in manifest["files"])
    fields = "".join(f"{json.dumps(k)}: {json.dumps(head[k])}, " for k in sorted(head))
    return "{" + fields + '"files": [\n' + lines + "\n]}\n"


def write_manifest(output: str | os.PathLike, manifest: dict[str, Any],
                   stamps: dict[str, list] | None = None) -> bool:
    """Write ``manifest`` to ``output`` atomically, but only when its text differs from what is
    there (so the file keeps its modification time otherwise), and its ``stamps`` beside it when
    they changed; True when the manifest was written."""
    from pseudopairs.core.io import write_text_atomic

    output = Path(output)
    if stamps is not None:
        text = json.dumps(stamps, sort_keys=True, separators=(",", ":")) + "\n"
        try:
            same = stamps_path(output).read_text(encoding="utf-8") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            write_text_atomic(stamps_path(output), text)
    text = _text(manifest)
    try:
        if output.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    write_text_atomic(output, text)
    return True


def read_manifest(path: str | os.PathLike) -> dict[str, Any] | None:
    """A manifest written by :func:`write_manifest` (None when absent or of another version)."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("version") == MANIFEST_VERSION else None


def refresh_manifest(images: str | os.PathLike, output: str | os.PathLike,
                     root: str | os.PathLike | None = None) -> bool | dict[str, Any] | None:
    """Bring an image list's manifest ``output`` up to date, if both exist (before they do, rule
    ``image_manifest`` makes it); True = rewritten, False = unchanged, None = skipped. A manifest
    that would name missing files is not written (nor its stamps): a dry run refused for them
    leaves every file as it was, so pointing back at the complete folder reruns nothing; that
    manifest is returned instead, for the refusal to name its files."""
    if not (Path(images).is_file() and Path(output).is_file()):
        return None
    manifest, stamps = image_manifest(images, root, previous=output)
    if missing(manifest):
        return manifest
    return write_manifest(output, manifest, stamps)


def refresh_source(names: Iterable[str], output: str | os.PathLike, root: str | os.PathLike) -> bool | None:
    """Bring a corpus' source manifest ``output`` up to date, if it exists (before it does, rule
    ``corpus_source`` makes it)."""
    if not Path(output).is_file():
        return None
    return write_manifest(output, *file_manifest(list(names), root, previous=output))


def _cli_image_manifest(args) -> None:
    manifest, stamps = image_manifest(args.images, args.root, previous=args.output)
    problem = missing_message(manifest, what=f"image list {args.images}", root=args.root)
    if problem:   # the features of this split would fail: say so before any is submitted
        raise FileNotFoundError(problem)
    changed = "written" if write_manifest(args.output, manifest, stamps) else "unchanged"
    print(f"{args.output} ({changed}): {manifest['n_images']} images in {manifest['n_files']} files")


def register_cli(subparsers) -> None:
    options = commands.add_command(subparsers, "image-manifest", _cli_image_manifest)
    options.add_argument("--images", required=True, help="image list (Parquet: image_id, path)")
    options.add_argument("--root", default=None, help="the folder the list's paths are relative to")
    options.add_argument("--output", required=True, help="manifest (JSON), rewritten only when it changes")
