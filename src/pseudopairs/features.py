"""Image features: 2048-d ResNet50 average-pool vectors for every image of an image list
(paper §3.1; DESIGN §1, §4).

Preprocessing follows the Multi30K feature extractor: convert to RGB, resize the shorter side to
``resize`` (256 in the paper), centre-crop ``crop`` (224), ImageNet mean/std normalisation. The
network is torchvision's ``resnet50`` with ``fc`` replaced by the identity, in eval mode.

Weights (``features.weights``):
- ``none``: seeded random initialisation (``torch.manual_seed(seed)`` right before construction);
- ``imagenet``: torchvision ``ResNet50_Weights.IMAGENET1K_V1``, read from the torch hub cache
  only — nothing is ever downloaded; a missing cache file is an error that says so;
- a path to a local state dict of a torchvision resnet50 (``fc.*`` may be absent; it is ignored).

Scale and faults: images are decoded, resized and cropped in DataLoader workers (uint8, so the
host-to-device copy is small); normalisation and the forward pass run on the device
(``channels_last``, ``torch.inference_mode``, fp16 autocast on CUDA; ``features.threads``, if
set, is the torch thread count for it, else see :func:`forward_threads`). Batches never cross shards. Every ``shard_size`` images
a finished shard is written atomically to the shard directory together with its image ids, paths,
each image file's size and modification time, and a fingerprint of everything that changes the
numbers (weights, seed, preprocessing, dtype, device kind, library versions). A restarted job
reuses exactly the shards whose ids, image files and fingerprint match, so a killed job resumes; the final file is assembled with
:func:`pseudopairs.io.save_features` and the shards are removed afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Sequence
from urllib.parse import urlparse

import numpy as np
import pandas as pd

from pseudopairs.io import IMAGE_COLUMNS, atomic_path, remove_owned_files, save_features, write_text_atomic

log = logging.getLogger(__name__)

FEATURE_DIM = 2048
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SKIPPED_COLUMNS = ("image_id", "path", "reason")
# Bump when the computation changes in a way that makes old shards wrong.
_CODE_VERSION = 1
_SHARD_PATTERN = re.compile(r"^shard-\d{6}\.npz$")


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeatureSettings:
    """The ``features`` config section (config/config.yaml)."""

    weights: str = "none"
    seed: int = 0
    resize: int = 128
    crop: int = 112
    dtype: str = "float16"
    format: str = "npz"
    batch_size: int = 32
    workers: int = 1
    device: str = "auto"
    shard_size: int = 512
    skip_unreadable: bool = False
    threads: int | None = None  # torch threads for the forward (None: see forward_threads)

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> ValueError:
            return ValueError(f"features.{key}: {why} (got {getattr(self, key)!r})")

        if not isinstance(self.weights, str) or not self.weights:
            raise bad("weights", "must be 'none', 'imagenet' or a path to a state dict file")
        for key, minimum in (("seed", 0), ("resize", 1), ("crop", 1), ("batch_size", 1),
                             ("workers", 0), ("shard_size", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise bad(key, f"must be an integer >= {minimum}")
        if self.crop > self.resize:
            raise bad("crop", f"must not exceed features.resize ({self.resize})")
        if self.dtype not in ("float16", "float32"):
            raise bad("dtype", "must be 'float16' or 'float32'")
        if self.format not in ("npz", "parquet"):
            raise bad("format", "must be 'npz' or 'parquet'")
        if self.device not in ("auto", "cpu", "cuda"):
            raise bad("device", "must be 'auto', 'cpu' or 'cuda'")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise bad("threads", "must be null or an integer >= 1")
        if not isinstance(self.skip_unreadable, bool):
            raise bad("skip_unreadable", "must be true or false")

    @classmethod
    def from_dict(cls, values: dict) -> "FeatureSettings":
        if not isinstance(values, dict):
            raise ValueError(f"features settings must be a JSON object, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"features: unknown setting(s) {', '.join('features.' + k for k in unknown)}")
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Model and weights
# --------------------------------------------------------------------------------------------


def imagenet_checkpoint_path() -> Path:
    """Where torch hub caches ``ResNet50_Weights.IMAGENET1K_V1`` (``$TORCH_HOME/hub/checkpoints``)."""
    import torch
    from torchvision.models import ResNet50_Weights

    url = ResNet50_Weights.IMAGENET1K_V1.url
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)


def load_weights(weights: str) -> dict | None:
    """The state dict named by ``features.weights`` (``None`` for ``none``); never downloads."""
    import torch

    if weights == "none":
        return None
    if weights == "imagenet":
        path = imagenet_checkpoint_path()
        if not path.is_file():
            raise FileNotFoundError(
                f"features.weights: imagenet: ResNet50_Weights.IMAGENET1K_V1 is not in the torch hub "
                f"cache ({path}); using it would need a download, which this pipeline never does. "
                f"Fetch it once with network access (torchvision.models.resnet50(weights='IMAGENET1K_V1')), "
                f"point TORCH_HOME at a cache that holds it, or give a local state dict path instead")
    else:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(
                f"features.weights: {weights!r} is neither 'none' nor 'imagenet' nor an existing state dict file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a corrupt or non-tensor pickle
        raise ValueError(f"features.weights: cannot load state dict {path}: {err}") from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"features.weights: {path} is not a state dict (a mapping of names to tensors)")
    return state


def build_model(weights: str = "none", *, seed: int = 0):
    """torchvision ``resnet50`` with ``fc`` = identity, eval mode, CPU, float32.

    ``weights``: ``none`` (random init after ``torch.manual_seed(seed)``; the global RNG state is
    restored afterwards), ``imagenet`` (hub cache only) or a state dict path.
    """
    import torch
    from torchvision.models import resnet50

    state = load_weights(weights)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = resnet50(weights=None)
    model.fc = torch.nn.Identity()
    if state is not None:
        state = {k: v for k, v in state.items() if not k.startswith("fc.")}
        try:
            result = model.load_state_dict(state, strict=False)
        except RuntimeError as err:  # shape mismatches
            raise ValueError(f"features.weights: {weights} is not a torchvision resnet50 state dict: "
                             f"{' '.join(str(err).split())[:500]}") from err
        problems = []
        if result.missing_keys:
            problems.append(f"missing {result.missing_keys[:5]}{' …' if len(result.missing_keys) > 5 else ''}")
        if result.unexpected_keys:
            problems.append(f"unexpected {result.unexpected_keys[:5]}"
                            f"{' …' if len(result.unexpected_keys) > 5 else ''}")
        if problems:
            raise ValueError(f"features.weights: {weights} is not a torchvision resnet50 state dict: "
                             + "; ".join(problems))
    return model.eval()


def resolve_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("features.device: cuda was asked for but torch sees no CUDA device")
    return torch.device(name)


def prepare_model(model, device):
    """Move a model to ``device`` in ``channels_last`` layout, frozen, eval mode."""
    import torch

    model = model.to(device=device, memory_format=torch.channels_last).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def forward_threads(settings: FeatureSettings, device) -> int:
    """torch intra-op threads for the forward pass: ``features.threads`` when set; otherwise on
    CPU the cores left after the decoding workers (at least 1, at most torch's current count),
    so decoding overlaps with the forward instead of preempting its threads; on CUDA unchanged."""
    import torch

    if settings.threads is not None:
        return settings.threads
    current = torch.get_num_threads()
    if device.type != "cpu" or settings.workers == 0:
        return current
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(current, cores - settings.workers))


def autocast_dtype(device):
    """Mixed precision used for the forward pass: fp16 on CUDA, none (fp32) on CPU."""
    import torch

    return torch.float16 if device.type == "cuda" else None


# --------------------------------------------------------------------------------------------
# Preprocessing (the worker side: decode, resize, crop -> uint8) and normalisation (device side)
# --------------------------------------------------------------------------------------------


def load_image(path: str | os.PathLike, *, resize: int, crop: int):
    """Decode an image file, RGB-convert, resize the shorter side to ``resize`` (bilinear,
    antialiased, as torchvision ``Resize``) and centre-crop ``crop``: uint8 tensor (3, crop, crop)."""
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    with Image.open(path) as img:
        img = img.convert("RGB")  # forces a full decode: truncated/corrupt data fails here
    img = TF.resize(img, [resize], interpolation=InterpolationMode.BILINEAR, antialias=True)
    img = TF.center_crop(img, [crop, crop])
    return TF.pil_to_tensor(img)


def normalize_batch(batch):
    """uint8 (B, 3, H, W) -> float32 ImageNet-normalised, exactly ``ToTensor`` + ``Normalize``."""
    import torch

    mean = torch.tensor(IMAGENET_MEAN, device=batch.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=batch.device).view(1, 3, 1, 1)
    return batch.float().div(255).sub(mean).div(std)


def forward(model, batch, *, device, amp_dtype=None):
    """Features of a uint8 image batch: normalise on ``device``, ``channels_last``, forward under
    autocast (when ``amp_dtype``). Returns a device tensor (B, 2048); the caller moves it."""
    import torch

    x = batch.to(device, non_blocking=True)
    x = normalize_batch(x).contiguous(memory_format=torch.channels_last)
    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        return model(x)


class _ImageDataset:
    """Map-style dataset over selected rows of the image list; never raises on a bad image, it
    returns the failure so the main process can decide (error or skip)."""

    def __init__(self, paths: Sequence[str], *, resize: int, crop: int) -> None:
        self.paths = list(paths)
        self.resize = resize
        self.crop = crop

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, row: int):
        path = self.paths[row]
        try:
            return row, load_image(path, resize=self.resize, crop=self.crop), None, ""
        except FileNotFoundError as err:
            return row, None, "missing", f"file not found: {err}"
        except Exception as err:  # noqa: BLE001 — any decoding failure means "unreadable image"
            return row, None, "unreadable", f"{type(err).__name__}: {err}"


def _collate(items):
    import torch

    good = [(row, tensor) for row, tensor, kind, _ in items if kind is None]
    failures = [(row, kind, reason) for row, _, kind, reason in items if kind is not None]
    rows = [row for row, _ in good]
    images = torch.stack([t for _, t in good]) if good else None
    return rows, images, failures


# --------------------------------------------------------------------------------------------
# Shards
# --------------------------------------------------------------------------------------------


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
                stamps: list[str], fingerprint: str, dtype: str) -> Shard | None:
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
            or stored.features.shape != (kept, FEATURE_DIM) or stored.features.dtype != np.dtype(dtype)):
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
    elif settings.weights == "imagenet":
        path = imagenet_checkpoint_path()
        weights = {"kind": "imagenet", "file": path.name,
                   "size": path.stat().st_size if path.is_file() else None}
    else:
        path = Path(settings.weights)
        if not path.is_file():
            raise FileNotFoundError(
                f"features.weights: {settings.weights!r} is neither 'none' nor 'imagenet' nor an existing state dict file")
        weights = {"kind": "file", "sha256": _file_sha256(path)}
    amp = autocast_dtype(device)
    payload = {
        "code": _CODE_VERSION,
        "weights": weights,
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


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------


class UnreadableImageError(ValueError):
    """An image file exists but cannot be decoded."""


@dataclass
class SkippedImage:
    image_id: str
    path: str
    reason: str


@dataclass
class FeatureResult:
    image_ids: list[str]          # extracted images, in image-list order (skipped ones left out)
    features: np.ndarray          # (len(image_ids), 2048), settings.dtype
    skipped: list[SkippedImage]
    computed: int                 # images pushed through the model in this call (not reused)
    reused_shards: int


def read_image_list(path: str | os.PathLike) -> pd.DataFrame:
    """Read an image list (columns ``image_id``, ``path``); ids must be unique."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image list not found: {path}")
    frame = pd.read_parquet(path)
    return _check_image_list(frame, source=str(path))


def _check_image_list(frame: pd.DataFrame, *, source: str) -> pd.DataFrame:
    missing = [c for c in IMAGE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{source}: not an image list, missing columns {missing}")
    frame = pd.DataFrame({"image_id": frame["image_id"].astype(str).tolist(),
                          "path": frame["path"].astype(str).tolist()})
    dup = frame["image_id"][frame["image_id"].duplicated()]
    if len(dup):
        raise ValueError(f"{source}: duplicate image_id {dup.iloc[0]!r} ({len(dup)} duplicates)")
    return frame


def _check_files_exist(frame: pd.DataFrame, *, source: str) -> None:
    missing = [(i, p) for i, p in zip(frame["image_id"], frame["path"]) if not os.path.isfile(p)]
    if missing:
        image_id, path = missing[0]
        more = f" (and {len(missing) - 1} more missing)" if len(missing) > 1 else ""
        raise FileNotFoundError(f"image {image_id!r}: file not found: {path} (listed in {source}){more}")


def _clean_reason(reason: str) -> str:
    return " ".join(str(reason).split())


def extract_features(
    images: pd.DataFrame | str | os.PathLike,
    *,
    settings: FeatureSettings,
    shard_dir: str | os.PathLike | None = None,
    model=None,
    progress: bool = True,
) -> FeatureResult:
    """Extract features for every row of the image list, in its order.

    ``shard_dir``: where finished shards are written and looked up for resuming (``None``: keep
    everything in memory, no resume). ``model``: an already prepared model (see
    :func:`prepare_model`) to use instead of building one from ``settings.weights`` — the
    benchmark passes one; the shard fingerprint still describes ``settings``.
    """
    import torch
    from tqdm import tqdm

    source = str(images) if not isinstance(images, pd.DataFrame) else "image list"
    frame = read_image_list(images) if not isinstance(images, pd.DataFrame) else _check_image_list(images, source=source)
    ids = frame["image_id"].tolist()
    paths = frame["path"].tolist()
    n = len(ids)
    _check_files_exist(frame, source=source)

    device = resolve_device(settings.device)
    amp_dtype = autocast_dtype(device)
    np_dtype = np.dtype(settings.dtype)
    fingerprint = settings_fingerprint(settings, device=device)
    stamps = file_stamps(paths)
    size = settings.shard_size
    n_shards = (n + size - 1) // size
    bounds = [(k * size, min(n, (k + 1) * size)) for k in range(n_shards)]

    shards: dict[int, Shard] = {}
    if shard_dir is not None:
        shard_dir = Path(shard_dir)
        for k, (lo, hi) in enumerate(bounds):
            stored = _read_shard(shard_dir, k, image_ids=ids[lo:hi], paths=paths[lo:hi],
                                 stamps=stamps[lo:hi], fingerprint=fingerprint, dtype=settings.dtype)
            if stored is not None:
                if not settings.skip_unreadable:
                    for image_id, path, reason in zip(stored.image_ids, stored.paths, stored.reasons):
                        if reason:
                            raise UnreadableImageError(f"image {image_id!r}: cannot decode {path}: {reason}")
                shards[k] = stored
    reused = len(shards)
    pending = [k for k in range(n_shards) if k not in shards]
    rows = [r for k in pending for r in range(*bounds[k])]
    if reused:
        log.info("reusing %d of %d shards from %s; %d images to compute", reused, n_shards, shard_dir, len(rows))

    if rows:
        if model is None:
            model = prepare_model(build_model(settings.weights, seed=settings.seed), device)
        dataset = _ImageDataset(paths, resize=settings.resize, crop=settings.crop)
        # Batches never cross a shard boundary and start at shard starts, so every shard is
        # computed with the same batches whether or not earlier shards were reused: a resumed
        # run gives bit-identical features (CPU kernels may round differently per batch shape).
        batches = [list(range(lo, hi))[j:j + settings.batch_size]
                   for lo, hi in (bounds[k] for k in pending) for j in range(0, hi - lo, settings.batch_size)]
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=batches, num_workers=settings.workers,
            collate_fn=_collate, pin_memory=device.type == "cuda",
            prefetch_factor=4 if settings.workers > 0 else None)

        # Per pending shard: extracted rows -> feature vector, skipped rows -> reason.
        done_rows: dict[int, dict[int, np.ndarray | str]] = {k: {} for k in pending}

        def absorb(batch_rows: list[int], feats: np.ndarray) -> None:
            for j, row in enumerate(batch_rows):
                done_rows[row // size][row] = feats[j]

        def absorb_failure(row: int, reason: str) -> None:
            done_rows[row // size][row] = reason

        def flush() -> None:
            for k in list(done_rows):
                lo, hi = bounds[k]
                if len(done_rows[k]) < hi - lo:
                    continue
                got = done_rows.pop(k)
                vectors = [got[r] for r in range(lo, hi) if not isinstance(got[r], str)]
                shard = Shard(
                    index=k, image_ids=ids[lo:hi], paths=paths[lo:hi],
                    features=(np.stack(vectors) if vectors else np.zeros((0, FEATURE_DIM))).astype(np_dtype),
                    reasons=[got[r] if isinstance(got[r], str) else "" for r in range(lo, hi)],
                    fingerprint=fingerprint, stamps=stamps[lo:hi])
                if shard_dir is not None:
                    _write_shard(shard_dir, shard)
                shards[k] = shard

        cudnn_before = torch.backends.cudnn.benchmark
        threads_before = torch.get_num_threads()
        torch.backends.cudnn.benchmark = device.type == "cuda"
        torch.set_num_threads(forward_threads(settings, device))
        try:
            with torch.inference_mode(), tqdm(total=len(rows), desc="features", unit="img",
                                              disable=not progress, dynamic_ncols=True) as bar:
                in_flight = None  # (rows, device tensor): copy back one batch late, so the GPU keeps busy
                for batch_rows, batch, failures in loader:
                    for row, kind, reason in failures:
                        where = f"image {ids[row]!r}: "
                        if kind == "missing":
                            raise FileNotFoundError(f"{where}{reason} (listed in {source})")
                        if not settings.skip_unreadable:
                            raise UnreadableImageError(
                                f"{where}cannot decode {paths[row]}: {reason} "
                                f"(set features.skip_unreadable: true to skip such images)")
                        absorb_failure(row, _clean_reason(reason))
                    launched = None
                    if batch is not None:
                        launched = (batch_rows, forward(model, batch, device=device, amp_dtype=amp_dtype))
                    if in_flight is not None:
                        absorb(in_flight[0], _to_numpy(in_flight[1], np_dtype, ids, in_flight[0]))
                    in_flight = launched
                    flush()
                    bar.update(len(batch_rows) + len(failures))
                if in_flight is not None:
                    absorb(in_flight[0], _to_numpy(in_flight[1], np_dtype, ids, in_flight[0]))
                flush()
        finally:
            torch.backends.cudnn.benchmark = cudnn_before
            torch.set_num_threads(threads_before)
        assert not done_rows, f"unfinished shards {sorted(done_rows)}"

    out_ids: list[str] = []
    blocks: list[np.ndarray] = []
    skipped: list[SkippedImage] = []
    for k in range(n_shards):
        shard = shards[k]
        for image_id, path, reason in zip(shard.image_ids, shard.paths, shard.reasons):
            if reason:
                skipped.append(SkippedImage(image_id, path, reason))
            else:
                out_ids.append(image_id)
        blocks.append(shard.features)
    features = np.concatenate(blocks) if blocks else np.zeros((0, FEATURE_DIM), dtype=np_dtype)
    return FeatureResult(image_ids=out_ids, features=features.astype(np_dtype, copy=False),
                         skipped=skipped, computed=len(rows), reused_shards=reused)


def _to_numpy(tensor, np_dtype: np.dtype, ids: list[str], rows: list[int]) -> np.ndarray:
    array = tensor.float().cpu().numpy()
    out = array.astype(np_dtype)
    if not np.isfinite(out).all():
        bad = int(np.nonzero(~np.isfinite(out).all(axis=1))[0][0])
        raise RuntimeError(
            f"image {ids[rows[bad]]!r}: non-finite feature values in features.dtype {np_dtype} "
            f"(largest magnitude {np.nanmax(np.abs(array)):.3g}); use features.dtype: float32")
    return out


def skipped_tsv(skipped: Sequence[SkippedImage]) -> str:
    lines = ["\t".join(SKIPPED_COLUMNS)]
    for item in skipped:
        lines.append("\t".join(_clean_reason(x) for x in (item.image_id, item.path, item.reason)))
    return "\n".join(lines) + "\n"


def run_features(
    images_path: str | os.PathLike,
    output_path: str | os.PathLike,
    skipped_path: str | os.PathLike,
    *,
    settings: FeatureSettings,
    shard_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> FeatureResult:
    """The ``pseudopairs features`` step: extract, write the skipped TSV (always) and the feature
    file (atomically, via ``save_features``), then remove the shards."""
    output_path = Path(output_path)
    suffix = output_path.suffix.lstrip(".")
    if suffix != settings.format:
        raise ValueError(f"features.format is {settings.format!r} but the output {output_path} "
                         f"ends in {output_path.suffix!r}; they must agree")
    shard_dir = Path(shard_dir) if shard_dir is not None else output_path.with_name(output_path.name + ".shards")
    result = extract_features(images_path, settings=settings, shard_dir=shard_dir, progress=progress)
    write_text_atomic(skipped_path, skipped_tsv(result.skipped))
    save_features(output_path, image_ids=result.image_ids, features=result.features)
    remove_shards(shard_dir)
    log.info("wrote %s: %d images x %d (%s); %d skipped; %d computed, %d shards reused",
             output_path, len(result.image_ids), FEATURE_DIM, settings.dtype, len(result.skipped),
             result.computed, result.reused_shards)
    return result


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _cmd_features(args: argparse.Namespace) -> int:
    try:
        values = json.loads(args.settings)
    except json.JSONDecodeError as err:
        raise ValueError(f"--settings is not valid JSON: {err}") from err
    settings = FeatureSettings.from_dict(values)
    run_features(args.images, args.output, args.skipped, settings=settings, shard_dir=args.shard_dir)
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "features", help="ResNet50 average-pool features for an image list",
        description="Extract 2048-d ResNet50 average-pool features for every image of an image "
                    "list (rows in its order); resumable through shards.")
    p.add_argument("--images", required=True, help="image list Parquet (image_id, path)")
    p.add_argument("--output", required=True, help="feature file (.npz or .parquet = features.format)")
    p.add_argument("--skipped", required=True, help="TSV of skipped images (image_id, path, reason); always written")
    p.add_argument("--settings", required=True, help="the features config section as JSON")
    p.add_argument("--shard-dir", default=None, help="resumable shards (default: {output}.shards/)")
    p.set_defaults(func=_cmd_features)
