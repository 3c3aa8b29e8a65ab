"""Manifests of the image files a split needs, for image folders kept outside the workflow (the
Flickr30K images, distributed on request: ``paper_data.flickr30k_images``).

Such a folder as a directory input would rerun ``features`` (and by modification time everything
after it, up to hundreds of GPU jobs) whenever anything in it changes, e.g. one unrelated file
added. Instead ``features`` depends on a manifest: for each image of the split's image list (its
``path`` column, in list order) the file's size and modification time in nanoseconds (``null``
for a missing file). The manifest is rewritten only when that content changes
(:func:`refresh_manifest`, which the workflow calls when it is parsed, before the DAG is built),
so an unrelated file leaves it — and everything after it — alone, while a changed, added or
removed image of the split makes it newer than the features, which are then recomputed.

Command ``image-manifest`` writes it as a step (rule ``image_manifest``, the first time, after
the image list exists).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pseudopairs import commands

MANIFEST_VERSION = 1


def image_manifest(images: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the files an image list (``image_id, path`` Parquet) names."""
    import pandas as pd

    from pseudopairs.io import reading

    with reading(images, "an image list (Parquet: image_id, path)"):
        paths = pd.read_parquet(images, columns=["path"])["path"].astype(str).tolist()
    files = []
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            files.append([path, None, None])
        else:
            files.append([path, st.st_size, st.st_mtime_ns])
    return {"version": MANIFEST_VERSION, "n_images": len(files),
            "n_missing": sum(1 for f in files if f[1] is None), "files": files}


def _text(manifest: dict[str, Any]) -> str:
    # one file per line: a diff of two manifests shows which images changed
    head = {k: v for k, v in manifest.items() if k != "files"}
    lines = ",\n".join(json.dumps(f, ensure_ascii=False) for f in manifest["files"])
    fields = "".join(f"{json.dumps(k)}: {json.dumps(head[k])}, " for k in sorted(head))
    return "{" + fields + '"files": [\n' + lines + "\n]}\n"


def write_manifest(output: str | os.PathLike, manifest: dict[str, Any]) -> bool:
    """Write ``manifest`` to ``output`` atomically, but only when its text differs from what is
    there (so the file keeps its modification time otherwise); True when written."""
    from pseudopairs.io import write_text_atomic

    text = _text(manifest)
    output = Path(output)
    try:
        if output.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    write_text_atomic(output, text)
    return True


def refresh_manifest(images: str | os.PathLike, output: str | os.PathLike) -> bool | None:
    """Bring ``output`` up to date with the files ``images`` lists, if both exist (before they
    do, rule ``image_manifest`` makes it); True = rewritten, False = unchanged, None = skipped."""
    if not (Path(images).is_file() and Path(output).is_file()):
        return None
    return write_manifest(output, image_manifest(images))


def _cli_image_manifest(args) -> None:
    manifest = image_manifest(args.images)
    changed = "written" if write_manifest(args.output, manifest) else "unchanged"
    print(f"{args.output} ({changed}): {manifest['n_images']} images, {manifest['n_missing']} missing")


def register_cli(subparsers) -> None:
    options = commands.add_command(subparsers, "image-manifest", _cli_image_manifest)
    options.add_argument("--images", required=True, help="image list (Parquet: image_id, path)")
    options.add_argument("--output", required=True, help="manifest (JSON), rewritten only when it changes")
