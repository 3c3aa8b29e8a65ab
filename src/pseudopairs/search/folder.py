"""The exported model folder's format: what ``config.json`` records and how the folder's files
are checked against it.

A folder (``pseudopairs export``) holds::

    config.json                  format, languages, joint space, model sizes, text preparation,
                                 image network, tensors, and the SHA-256 of every other file
    model.safetensors            the ranking model (image branch, word embeddings, GRU)
    image_network.safetensors    the feature network's weights (absent for torchvision's
                                 published weights: named with their SHA-256, read from the
                                 torch hub cache)
    vocab.json                   the run's vocabulary (shared or HEM)
    text/<lang>.truecase         a language's truecaser (case: truecase)
    text/<lang>.sentencepiece    a language's SentencePiece model (tokenizer: sentencepiece)
    metrics.json                 the run's test metrics
    README.md                    the model card (Hugging Face layout)

Nothing in a folder is unpickled: weights are safetensors, everything else JSON or text.
:func:`model_hash` (SHA-256 of ``config.json``'s bytes, which record every other file's
SHA-256) names the exported model; an index stores it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pseudopairs.core.io import UnreadableFileError
from pseudopairs.data.manifest import file_digest as file_sha256  # the one file hash (manifests too)

FORMAT = "pseudopairs.search-model/1"
CONFIG = "config.json"
MODEL_WEIGHTS = "model.safetensors"
IMAGE_WEIGHTS = "image_network.safetensors"
VOCABULARY = "vocab.json"
METRICS = "metrics.json"
CARD = "README.md"


class ModelFolderError(UnreadableFileError):
    """An exported model folder (or the run it is exported from) that cannot be used as it is:
    a missing or altered file, tensors that do not match ``config.json``; the message names the
    file."""


def model_hash(folder: str | Path) -> str:
    """The exported model's identity: the SHA-256 of its ``config.json`` (which records the
    SHA-256 of every other file of the folder)."""
    return file_sha256(Path(folder) / CONFIG)


def files_table(folder: Path) -> dict[str, str]:
    """``{relative path: SHA-256}`` of every file of ``folder`` but ``config.json``, sorted."""
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CONFIG)
    return {p.relative_to(folder).as_posix(): file_sha256(p) for p in paths}


def tensor_table(path: Path) -> dict[str, dict[str, Any]]:
    """``{name: {"shape": [...], "dtype": "F32"}}`` of a safetensors file's tensors (its header
    only: no tensor is read)."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(path), framework="pt") as handle:
        for name in sorted(handle.keys()):
            view = handle.get_slice(name)
            out[name] = {"shape": list(view.get_shape()), "dtype": view.get_dtype()}
    return out


def write_config(folder: Path, config: dict) -> None:
    (folder / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                 encoding="utf-8")


def read_config(folder: Path) -> dict:
    """``config.json`` of an exported folder, its format checked."""
    path = folder / CONFIG
    if not folder.is_dir():
        raise ModelFolderError(f"{folder}: no such model folder (pseudopairs export writes one)")
    if not path.is_file():
        raise ModelFolderError(f"{path}: missing; not an exported model folder (pseudopairs export writes one)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFolderError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        got = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise ModelFolderError(f"{path}: format {got!r}, expected {FORMAT!r} (an exported model folder)")
    for key in ("files", "tensors", "languages", "dim", "model", "text", "image"):
        if key not in config:
            raise ModelFolderError(f"{path}: no {key!r} entry")
    return config


def verify_files(folder: Path, config: dict) -> None:
    """Every file ``config.json`` lists is there with its SHA-256; a missing or altered file is
    a :class:`ModelFolderError` naming it."""
    for name, expected in sorted(config["files"].items()):
        path = folder / name
        if not path.is_file():
            raise ModelFolderError(f"{path}: missing from the model folder (config.json lists it)")
        actual = file_sha256(path)
        if actual != expected:
            raise ModelFolderError(f"{path}: altered (SHA-256 {actual[:16]}…, config.json records "
                                   f"{expected[:16]}…); export the model again")


def check_tensors(folder: Path, name: str, config: dict) -> None:
    """The tensors of ``folder/name`` (its safetensors header) against ``config.json``'s
    ``tensors`` entry: the same names, shapes and dtypes, else a :class:`ModelFolderError`
    naming the file and the tensor."""
    path = folder / name
    expected = config["tensors"].get(name)
    if expected is None:
        raise ModelFolderError(f"{folder / CONFIG}: no tensors entry for {name}")
    try:
        actual = tensor_table(path)
    except Exception as err:  # noqa: BLE001 - a file safetensors cannot read is bad input
        raise ModelFolderError(f"{path}: not a safetensors file ({type(err).__name__}: {err})") from None
    for tensor in sorted(set(expected) | set(actual)):
        if tensor not in actual:
            raise ModelFolderError(f"{path}: tensor {tensor!r} missing (config.json lists it "
                                   f"{expected[tensor]['shape']})")
        if tensor not in expected:
            raise ModelFolderError(f"{path}: tensor {tensor!r} is not in config.json")
        if actual[tensor] != expected[tensor]:
            raise ModelFolderError(f"{path}: tensor {tensor!r} is {actual[tensor]['dtype']} "
                                   f"{actual[tensor]['shape']}, config.json says "
                                   f"{expected[tensor]['dtype']} {expected[tensor]['shape']}")


def read_tensors(folder: Path, name: str, config: dict) -> dict:
    """The tensors of ``folder/name`` (safetensors: nothing is unpickled), checked first
    (:func:`check_tensors`)."""
    from safetensors.torch import load_file

    check_tensors(folder, name, config)
    return load_file(str(folder / name), device="cpu")
