"""Resumable shards of the features step: each finished shard is written atomically with its image ids, paths, the stamps of its image files and a fingerprint of the settings, and reused only while all of those match."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pseudopairs.features.backbones import feature_dim, is_enum_weights
from pseudopairs.features.network import autocast_dtype, weights_checkpoint_path
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.core.io import atomic_path, remove_owned_files

log = logging.getLogger(__name__)



# Bump when the computation changes in a way that makes old shards wrong.
_CODE_VERSION = 1


_SHARD_PATTERN = re.compile(r"^shard-\d{6}\.npz$")


@dataclass
class Shard:
    """Rows ``[start, start + len(image_ids))`` of the image list; ``reasons[i]`` is '' for an
    extracted image and the skip reason otherwise; ``features`` holds the extracted rows only."""

    index: int
    image_ids: list[str]
    paths: list[str]
    features: np.ndarray
    reasons: list[str]
    fingerprint: str
    stamps: list[str]  # per image: its file's size and modification time (see file_stamps)


def shard_path(shard_dir: Path, index: int) -> Path:
    return Path(shard_dir) / f"shard-{index:06d}.npz"


def _write_shard(shard_dir: Path, shard: Shard) -> Path:
    path = shard_path(shard_dir, shard.index)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, image_id=np.asarray(shard.image_ids, dtype=str),
                     path=np.asarray(shard.paths, dtype=str), features=shard.features,
                     reason=np.asarray(shard.reasons, dtype=str),
                     fingerprint=np.asarray(shard.fingerprint),
                     stamp=np.asarray(shard.stamps, dtype=str))
    return path


def file_stamps(paths: Sequence[str]) -> list[str]:
    """``size:mtime_ns:inode`` of each image file: a shard is reused only while every one of its
    image files is unchanged (a regenerated or replaced image has a new modification time or a new
    inode), as training's ``last.pt`` is reused only while its input files are."""
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append("missing")
        else:
            stamps.append(f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
    return stamps


def _read_shard(shard_dir: Path, index: int, *, image_ids: list[str], paths: list[str],
                stamps: list[str], fingerprint: str, dtype: str, arch: str = "resnet50") -> Shard | None:
    """The stored shard if it exists and matches ids, paths, the image files' stamps and the
    fingerprint; else ``None``."""
    path = shard_path(shard_dir, index)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            stored = Shard(index=index, image_ids=[str(x) for x in data["image_id"]],
                           paths=[str(x) for x in data["path"]], features=data["features"],
                           reasons=[str(x) for x in data["reason"]],
                           fingerprint=str(data["fingerprint"]),
                           stamps=[str(x) for x in data["stamp"]] if "stamp" in data else [])
    except Exception as err:  # noqa: BLE001 — an unreadable shard is simply recomputed
        log.warning("shard %s unreadable (%s); recomputing it", path, err)
        return None
    kept = sum(1 for r in stored.reasons if not r)
    if stored.stamps != stamps:
        log.info("shard %s: image files changed since it was written; recomputing it", path)
        return None
    if (stored.fingerprint != fingerprint or stored.image_ids != image_ids or stored.paths != paths
            or stored.features.shape != (kept, feature_dim(arch)) or stored.features.dtype != np.dtype(dtype)):
        log.info("shard %s is from other settings or images; recomputing it", path)
        return None
    return stored


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def settings_fingerprint(settings: FeatureSettings, *, device) -> str:
    """Hash of everything that changes the feature values (not batch size, workers, shard size)."""
    import torch
    import torchvision

    if settings.weights == "none":
        weights = {"kind": "none", "seed": settings.seed}
    elif is_enum_weights(settings.weights):
        path = weights_checkpoint_path(settings.weights, settings.arch)
        weights = {"kind": settings.weights, "file": path.name,
                   "size": path.stat().st_size if path.is_file() else None}
    else:
        path = Path(settings.weights)
        if not path.is_file():
            raise FileNotFoundError(
                f"features.weights: {settings.weights!r} is neither 'none' nor torchvision weights nor an "
                "existing state dict file")
        weights = {"kind": "file", "sha256": _file_sha256(path)}
    amp = autocast_dtype(device)
    payload = {
        "code": _CODE_VERSION,
        "weights": weights,
        **({"arch": settings.arch} if settings.arch != "resnet50" else {}),  # resnet50 shards stay valid
        **({"decode": settings.decode} if settings.decode != "cpu" else {}),  # so do CPU-decoded ones
        "resize": settings.resize,
        "crop": settings.crop,
        "dtype": settings.dtype,
        "compute": f"{device.type}:{'amp-' + str(amp) if amp is not None else 'fp32'}",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def remove_shards(shard_dir: Path) -> None:
    """Delete our shard files (and their temporaries), then the directory if it is empty."""
    remove_owned_files(shard_dir, owned=lambda name: bool(
        _SHARD_PATTERN.match(name) or (name.startswith(".shard-") and ".tmp" in name)))
