"""Atomic file output and the table readers shared by every step.

Every file the pipeline produces is written to a temporary sibling first and renamed into place,
so a killed job never leaves a file that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd


log = logging.getLogger(__name__)


class UnreadableFileError(ValueError):
    """An input file exists but cannot be read (truncated, corrupt, another format)."""


@contextlib.contextmanager
def reading(path: str | os.PathLike, what: str, *, fix: str = "delete it and rerun the step that "
            "writes it") -> Iterator[None]:
    """Turn a library's failure to read ``path`` (a truncated zip, a corrupt Parquet file or
    checkpoint …) into one line that names the file, says what it should be and what to do.
    A missing file stays a :class:`FileNotFoundError` naming it."""
    try:
        yield
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{path}: {what} not found") from err
    except (UnreadableFileError, MemoryError):
        raise
    except Exception as err:  # noqa: BLE001 — whatever the library raised, the file is the cause
        detail = " ".join(str(err).split()) or "no details"
        raise UnreadableFileError(f"{path}: cannot read {what} ({type(err).__name__}: {detail}); "
                                  f"{fix}") from err


def out_of_space(err: BaseException, path: str | os.PathLike) -> OSError | None:
    """A one-line :class:`OSError` naming ``path`` when ``err`` is a full disk (or quota), else
    ``None``."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return OSError(err.errno, f"{path}: no space left on the device while writing it; free "
                                  "some space and rerun (finished outputs and checkpoints are "
                                  "kept, so the step resumes)")
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary name keeps the final suffix (``.parquet``, ``.npz`` …) so libraries that
    dispatch on the extension behave. On error the temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix if suffix is None else suffix
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; give outputs the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        full = out_of_space(err, path)
        if full is not None:
            raise full from err
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; on success it replaces ``path`` (an existing
    directory is moved aside first and removed after the rename), on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        try:
            yield tmp
        except BaseException as err:
            full = out_of_space(err, path)
            if full is not None:
                raise full from err
            raise
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            old.rmdir()
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_owned_files(directory: str | os.PathLike, *, owned: Callable[[str], bool]) -> None:
    """Delete the files of ``directory`` whose names ``owned`` accepts (a step's resumable pieces
    and their temporaries), then the directory itself if that left it empty."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        if entry.is_file() and owned(entry.name):
            entry.unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()


def parse_json_object(value: str | None, *, option: str) -> dict:
    """A command-line JSON object: the text itself, or ``@PATH`` for a file holding it; ``None``
    or blank gives ``{}``. Errors name ``option``."""
    if value is None or not value.strip():
        return {}
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        if not path.exists():
            raise FileNotFoundError(f"{option}: {path} not found")
        text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{option}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{option}: expected a JSON object")
    return data


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_parquet_atomic(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


CAPTION_COLUMNS = ["dataset", "split", "image_id", "lang", "caption_idx", "raw", "text"]
RAW_CAPTION_COLUMNS = CAPTION_COLUMNS[:-1]
IMAGE_COLUMNS = ["image_id", "path"]


def read_captions(path: str | os.PathLike, *, lang: str | None = None) -> pd.DataFrame:
    """Read a caption table, optionally keeping one language; row order is kept."""
    with reading(path, "a caption table (Parquet)"):
        frame = pd.read_parquet(path)
    missing = [c for c in RAW_CAPTION_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a caption table, missing columns {missing}")
    if lang is not None:
        frame = frame[frame["lang"] == lang].reset_index(drop=True)
    return frame


#: A caption table with more empty prepared captions than this share is refused.
MAX_EMPTY_CAPTION_SHARE = 0.01


def check_caption_texts(texts, *, source: str, what: str = "captions") -> None:
    """Refuse an empty or near-empty caption list: no captions at all, or more than
    :data:`MAX_EMPTY_CAPTION_SHARE` of them without a single token (a table of empty captions
    would train on nothing and make every mined query pair with one empty caption)."""
    texts = list(texts)
    if not texts:
        raise ValueError(f"{source}: no {what}")
    empty = sum(1 for t in texts if not isinstance(t, str) or not t.strip())
    if empty > MAX_EMPTY_CAPTION_SHARE * len(texts):
        raise ValueError(f"{source}: {empty} of {len(texts)} {what} are empty "
                         f"(more than {MAX_EMPTY_CAPTION_SHARE:.0%}); check the raw captions")
    if empty:
        log.warning("%s: %d of %d %s are empty", source, empty, len(texts), what)


# A mined pseudopair file (``pairs.parquet``, paper §2.2): one row per query that got a match.
PAIR_COLUMNS = ["query_image_id", "query_caption_idx", "query_lang", "query_text",
                "match_row", "match_image_id", "match_caption_idx", "match_lang", "match_text",
                "match_raw", "similarity", "score"]


def read_pairs(path: str | os.PathLike, columns: list[str] | None = None) -> pd.DataFrame:
    """Read a ``pairs.parquet`` written by the ``mine`` step (columns :data:`PAIR_COLUMNS`, or only
    ``columns`` of them: a reader that needs a few keeps a 566K-pair table small)."""
    with reading(path, "a pseudopair file (Parquet)", fix="delete it and rerun the mine step"):
        if columns is None:
            frame = pd.read_parquet(path)
            present = list(frame.columns)
        else:
            import pyarrow.parquet as pq

            present = pq.read_schema(path).names
            frame = None if set(columns) - set(present) else pd.read_parquet(path, columns=list(columns))
    missing = [c for c in (PAIR_COLUMNS if columns is None else columns) if c not in present]
    if missing:
        raise ValueError(f"{path}: not a pseudopair file, missing columns {missing}")
    return frame


FEATURE_FORMATS = (".npz", ".parquet")


def save_features(path: str | os.PathLike, *, image_ids: list[str], features) -> None:
    """Write image features atomically: ``.npz`` (keys ``image_id``, ``features``) or ``.parquet``
    (column ``image_id`` then one column per dimension, ``f0000`` …). The dtype is kept."""
    import numpy as np

    path = Path(path)
    features = np.asarray(features)
    if features.ndim != 2 or features.shape[0] != len(image_ids):
        raise ValueError(f"{path}: {len(image_ids)} ids but features of shape {features.shape}")
    if path.suffix == ".npz":
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, image_id=np.asarray(image_ids, dtype=str), features=features)
    elif path.suffix == ".parquet":
        columns = {"image_id": pd.Series(list(image_ids), dtype=str)}
        for j in range(features.shape[1]):
            columns[f"f{j:04d}"] = features[:, j]
        write_parquet_atomic(path, pd.DataFrame(columns))
    else:
        raise ValueError(f"{path}: feature files must end in one of {FEATURE_FORMATS}")


def skipped_report(features_path: str | os.PathLike) -> Path:
    """The report of images the feature step skipped, written beside ``features_path``
    (``split.npz`` -> ``split.skipped.tsv``; columns image_id, path, reason)."""
    return Path(features_path).with_suffix(".skipped.tsv")


def check_missing_images(features_path: str | os.PathLike, missing_ids, *, captions) -> None:
    """Captions of images absent from a features file may be dropped only when the feature step
    skipped those images (listed in :func:`skipped_report`); any other missing image means the
    features do not belong to the captions, which is an error naming both files."""
    missing = sorted({str(x) for x in missing_ids})
    if not missing:
        return
    report = skipped_report(features_path)
    listed: set[str] = set()
    if report.exists():
        listed = set(pd.read_csv(report, sep="\t", dtype=str, usecols=["image_id"])["image_id"])
    unlisted = [x for x in missing if x not in listed]
    if unlisted:
        shown = ", ".join(repr(x) for x in unlisted[:5]) + (" …" if len(unlisted) > 5 else "")
        raise ValueError(f"{captions}: {len(unlisted)} image(s) of these captions are neither in "
                         f"{features_path} nor listed as skipped in {report}: {shown}")


def load_features(path: str | os.PathLike):
    """Read features written by :func:`save_features`: returns ``(image_ids, array)``, rows aligned."""
    import numpy as np

    path = Path(path)
    fix = "delete it and rerun the features step"
    if path.suffix == ".npz":
        with reading(path, "a feature file (.npz)", fix=fix):
            with np.load(path, allow_pickle=False) as data:
                return [str(x) for x in data["image_id"]], data["features"]
    if path.suffix == ".parquet":
        with reading(path, "a feature file (Parquet)", fix=fix):
            frame = pd.read_parquet(path)
            ids = frame.pop("image_id").astype(str).tolist()
            return ids, frame.to_numpy()
    raise ValueError(f"{path}: feature files must end in one of {FEATURE_FORMATS}")
