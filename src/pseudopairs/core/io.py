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


@contextlib.contextmanager
def naming_full_disk(path: str | os.PathLike) -> Iterator[None]:
    """Re-raise a full disk (or quota) inside the block as :func:`out_of_space`'s one line
    naming ``path``; any other error unchanged."""
    try:
        yield
    except OSError as err:
        full = out_of_space(err, path)
        if full is not None:
            raise full from err
        raise


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
        with naming_full_disk(path):
            yield tmp_path
            os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; on success it replaces ``path`` (an existing
    directory is moved aside first and removed after the rename), on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        with naming_full_disk(path):
            yield tmp
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


def write_parquet_if_changed(path: str | os.PathLike, frame: pd.DataFrame) -> bool:
    """Write ``frame`` to a temporary sibling of ``path`` and rename it into place only when its
    bytes differ from the file already there, which otherwise keeps its modification time (so
    Snakemake sees nothing new downstream). True when the file was (re)written."""
    import filecmp

    path = Path(path)
    if not path.is_file():
        write_parquet_atomic(path, frame)
        return True
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp.parquet", dir=path.parent)
    os.close(fd)
    scratch = Path(scratch)
    try:
        with naming_full_disk(path):
            frame.to_parquet(scratch, index=False)
            if filecmp.cmp(scratch, path, shallow=False):
                return False
            os.chmod(scratch, 0o666 & ~_umask())
            os.replace(scratch, path)
            return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            scratch.unlink()


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


BACKBONE_KEY = "backbone"  # the features file's record of its network (save_features)


def save_features(path: str | os.PathLike, *, image_ids: list[str], features,
                  backbone: dict | None = None) -> None:
    """Write image features atomically: ``.npz`` (keys ``image_id``, ``features``) or ``.parquet``
    (column ``image_id`` then one column per dimension, ``f0000`` …). The dtype is kept.
    ``backbone``: the network's record (``arch``, ``dim`` …; :func:`feature_backbone` reads it),
    as JSON under the npz key ``backbone`` or in the Parquet file's pandas attrs."""
    import numpy as np

    path = Path(path)
    features = np.asarray(features)
    if features.ndim != 2 or features.shape[0] != len(image_ids):
        raise ValueError(f"{path}: {len(image_ids)} ids but features of shape {features.shape}")
    if backbone is not None and int(backbone.get("dim", features.shape[1])) != features.shape[1]:
        raise ValueError(f"{path}: backbone {backbone.get('arch')} records dim {backbone['dim']} but the "
                         f"features have {features.shape[1]} columns")
    record = {} if backbone is None else {BACKBONE_KEY: json.dumps(backbone, sort_keys=True)}
    if path.suffix == ".npz":
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, image_id=np.asarray(image_ids, dtype=str), features=features,
                         **{key: np.asarray(value) for key, value in record.items()})
    elif path.suffix == ".parquet":
        columns = {"image_id": pd.Series(list(image_ids), dtype=str)}
        for j in range(features.shape[1]):
            columns[f"f{j:04d}"] = features[:, j]
        frame = pd.DataFrame(columns)
        frame.attrs.update(record)
        write_parquet_atomic(path, frame)
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


def feature_backbone(path: str | os.PathLike) -> dict | None:
    """The network record a features file holds (``arch``, ``dim``, ``weights`` …; written by the
    features step), or None for a file written without one."""
    import numpy as np

    path = Path(path)
    fix = "delete it and rerun the features step"
    if path.suffix == ".npz":
        with reading(path, "a feature file (.npz)", fix=fix):
            with np.load(path, allow_pickle=False) as data:
                text = str(data[BACKBONE_KEY]) if BACKBONE_KEY in data.files else None
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        with reading(path, "a feature file (Parquet)", fix=fix):
            meta = pq.read_schema(path).metadata or {}
        attrs = json.loads(meta[b"PANDAS_ATTRS"]) if b"PANDAS_ATTRS" in meta else {}
        text = attrs.get(BACKBONE_KEY)
    else:
        raise ValueError(f"{path}: feature files must end in one of {FEATURE_FORMATS}")
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError as err:
        raise ValueError(f"{path}: unreadable backbone record ({err}); {fix}") from None
    if not isinstance(record, dict) or not isinstance(record.get("dim"), int):
        raise ValueError(f"{path}: the backbone record {text[:80]!r} has no integer dim; {fix}")
    return record


def _describe_backbone(record: dict) -> str:
    arch = record.get("arch")
    return f"{record['dim']}-d" + (f" {arch} ({record.get('weights')})" if arch else "")


def check_feature_files(widths: dict[str, int], *, image_dim: int | None = None,
                        model: str | None = None) -> dict | None:
    """The features files one step reads (path -> columns loaded) come from one network: each
    file's backbone record (:func:`feature_backbone`) matches its columns, all records name the
    same model, size and weights, and (``image_dim``) the size is the one ``model`` (a checkpoint)
    was trained on. Returns the network's record (None where no file has one); a mismatch is a
    ``ValueError`` naming the files and their networks."""
    records: dict[str, dict] = {}
    for path, width in widths.items():
        record = feature_backbone(path)
        if record is not None and record["dim"] != int(width):
            raise ValueError(f"{path}: recorded as {_describe_backbone(record)} features but holds "
                             f"{width} columns; delete it and rerun the features step")
        records[str(path)] = record if record is not None else {"dim": int(width)}
    networks = {(r["dim"], r.get("arch"), r.get("weights")) if r.get("arch") else (r["dim"],)
                for r in records.values()}
    dims = {r["dim"] for r in records.values()}
    named = {key for key in networks if len(key) > 1}
    if len(dims) > 1 or len(named) > 1:
        listed = "; ".join(f"{path}: {_describe_backbone(r)}" for path, r in records.items())
        raise ValueError(f"image features of different networks in one step ({listed}); give every "
                         "corpus features of the same features.arch and weights")
    found = next((r for r in records.values() if r.get("arch")), None)
    if image_dim is not None and dims and next(iter(dims)) != int(image_dim):
        what = _describe_backbone(found) if found else f"{next(iter(dims))}-d"
        raise ValueError(f"{model or 'the model'} takes {image_dim}-d image features, but "
                         f"{', '.join(records)} hold{'s' if len(records) == 1 else ''} {what} features: "
                         "it was trained on another features.arch; retrain it on these features or "
                         "give it the features it was trained on")
    return found
