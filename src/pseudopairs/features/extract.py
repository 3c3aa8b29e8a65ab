"""The ``features`` step — image features: the pooled embedding of a torchvision classification
model (ResNet50's 2048-d average pool in the paper; ``features.arch``, any model of
:mod:`~pseudopairs.features.backbones`) for every image of an image list (paper §3.1).

Preprocessing follows the Multi30K feature extractor: convert to RGB, resize the shorter side to
``resize`` (256 in the paper), centre-crop ``crop`` (224), ImageNet mean/std normalisation. The
network is torchvision's ``resnet50`` (``features.arch``: any torchvision classification model)
with its classifier layer (``fc``, ``heads.head``, ``classifier.2`` …) replaced by the identity, in
eval mode.

Weights (``features.weights``):
- ``none``: seeded random initialisation (``torch.manual_seed(seed)`` right before construction);
- ``imagenet`` (the model's ``IMAGENET1K_V1``: ``ResNet50_Weights.IMAGENET1K_V1`` for the paper)
  or an entry of the model's weights enum (``IMAGENET1K_V2``, ``DEFAULT`` …), read from the torch
  hub cache only — nothing is ever downloaded; a missing cache file is an error that says so, a
  file whose SHA-256 does not begin with the hash in its name too;
- a path to a local state dict of a torchvision network of ``features.arch`` (the classifier's
  keys may be absent; they are ignored) — the demo world's is written by ``pretrain-features``
  (:mod:`pseudopairs.features.pretraining`).

Scale and faults: images are decoded, resized and cropped in DataLoader workers (or, with
``features.decode: device``, JPEGs decoded in batches on the device: :mod:`pseudopairs.features.decode`;
uint8, so the
host-to-device copy is small); normalisation and the forward pass run on the device
(``channels_last``, ``torch.inference_mode``, fp16 autocast on CUDA; ``features.threads``, if
set, is the torch thread count for it, else see :func:`forward_threads`). Batches never cross shards. Every ``shard_size`` images
a finished shard is written atomically to the shard directory together with its image ids, paths,
each image file's size and modification time, and a fingerprint of everything that changes the
numbers (weights, seed, preprocessing, dtype, device kind, library versions). A restarted job
reuses exactly the shards whose ids, image files and fingerprint match, so a killed job resumes; the final file is assembled with
:func:`pseudopairs.core.io.save_features` and the shards are removed afterwards.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.features.backbones import feature_dim
from pseudopairs.features.network import (_collate, _ImageDataset, autocast_dtype,
                                          build_model, forward, forward_threads, prepare_model,
                                          torch_device)
from pseudopairs.features.decode import FileDataset, collate, decode_batch
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.features.shards import (Shard, _read_shard, _write_shard, file_stamps, remove_shards,
                                         settings_fingerprint)
from pseudopairs.core.io import IMAGE_COLUMNS, save_features, write_text_atomic



log = logging.getLogger(__name__)


SKIPPED_COLUMNS = ("image_id", "path", "reason")




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


#: the columns of a webdataset's image list that locate an image inside its shard
MEMBER_COLUMNS = ("member", "offset", "size")


def read_image_list(path: str | os.PathLike) -> pd.DataFrame:
    """Read an image list (columns ``image_id``, ``path``, and for images inside shards
    ``member``, ``offset``, ``size``); ids must be unique."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image list not found: {path}")
    frame = pd.read_parquet(path)
    return _check_image_list(frame, source=str(path))


def _check_image_list(frame: pd.DataFrame, *, source: str) -> pd.DataFrame:
    missing = [c for c in IMAGE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{source}: not an image list, missing columns {missing}")
    out = pd.DataFrame({"image_id": frame["image_id"].astype(str).tolist(),
                        "path": frame["path"].astype(str).tolist()})
    if "member" in frame.columns:
        for column in MEMBER_COLUMNS:
            out[column] = frame[column].tolist()
    dup = out["image_id"][out["image_id"].duplicated()]
    if len(dup):
        raise ValueError(f"{source}: duplicate image_id {dup.iloc[0]!r} ({len(dup)} duplicates)")
    return out


@dataclass
class ImageSources:
    """Where each image of a list is read from: the file (the list's path under the corpus'
    folder, ``root``), the bytes inside it (a shard member), and its name in messages and shards
    (relative to the folder, so a moved folder keeps its shards: the list's path, and a member's
    ``shard[member]``)."""

    files: list[str]
    ranges: list[tuple[int, int] | None]
    labels: list[str]
    shown: list[str]   # in messages: the file, and a member's shard[member]


def image_sources(frame: pd.DataFrame, root: str | os.PathLike | None = None) -> ImageSources:
    paths = frame["path"].tolist()
    files = [os.path.join(os.fspath(root), p) for p in paths] if root is not None else list(paths)
    if "member" not in frame.columns:
        return ImageSources(files, [None] * len(files), list(paths), files)
    ranges = [(int(o), int(n)) for o, n in zip(frame["offset"], frame["size"])]
    labels = [f"{p}[{m}]" for p, m in zip(paths, frame["member"])]
    shown = [f"{f}[{m}]" for f, m in zip(files, frame["member"])]
    return ImageSources(files, ranges, labels, shown)


def _check_files_exist(frame: pd.DataFrame, sources: ImageSources, *, source: str) -> None:
    exists: dict[str, bool] = {}
    missing = [(i, f) for i, f in zip(frame["image_id"], sources.files)
               if not exists.setdefault(f, os.path.isfile(f))]
    if missing:
        image_id, path = missing[0]
        more = f" (and {len(missing) - 1} more missing)" if len(missing) > 1 else ""
        raise FileNotFoundError(f"image {image_id!r}: file not found: {path} (listed in {source}){more}")


def _clean_reason(reason: str) -> str:
    return " ".join(str(reason).split())


@dataclass
class _Job:
    """One extraction: the image list, its shards, the settings and what they fingerprint."""

    ids: list[str]
    paths: list[str]              # each image's name in messages and shards (ImageSources.labels)
    files: list[str]              # the file each image is read from
    ranges: list                  # its bytes in that file (a shard member), or None
    shown: list[str]              # its name in messages (ImageSources.shown)
    source: str
    settings: FeatureSettings
    shard_dir: Path | None
    device: Any
    fingerprint: str
    stamps: list[str]
    bounds: list[tuple[int, int]]
    shards: dict[int, Shard] = field(default_factory=dict)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.settings.dtype)


def _reuse_shards(job: _Job) -> None:
    """Take every stored shard that still matches (ids, paths, image files, fingerprint)."""
    if job.shard_dir is None:
        return
    for k, (lo, hi) in enumerate(job.bounds):
        stored = _read_shard(job.shard_dir, k, image_ids=job.ids[lo:hi], paths=job.paths[lo:hi],
                             stamps=job.stamps[lo:hi], fingerprint=job.fingerprint,
                             dtype=job.settings.dtype, arch=job.settings.arch)
        if stored is not None:
            if not job.settings.skip_unreadable:
                for image_id, path, reason in zip(stored.image_ids, stored.paths, stored.reasons):
                    if reason:
                        raise UnreadableImageError(f"image {image_id!r}: cannot decode {path}: {reason}")
            job.shards[k] = stored


def _compute_shards(job: _Job, pending: list[int], *, model, progress: bool) -> None:
    """Run the model over the pending shards' images; each shard is stored as soon as it is done."""
    import torch
    from tqdm import tqdm

    settings, device, size, bounds = job.settings, job.device, job.settings.shard_size, job.bounds
    rows = [r for k in pending for r in range(*bounds[k])]
    amp_dtype = autocast_dtype(device)
    if model is None:
        model = prepare_model(build_model(settings.weights, seed=settings.seed, arch=settings.arch), device)
    on_device = settings.decode == "device"  # JPEGs decoded on the device (features.decode)
    dataset = (FileDataset if on_device else _ImageDataset)(job.files, resize=settings.resize, crop=settings.crop,
                                                            ranges=job.ranges)
    # Batches never cross a shard boundary and start at shard starts, so every shard is
    # computed with the same batches whether or not earlier shards were reused: a resumed
    # run gives bit-identical features (CPU kernels may round differently per batch shape).
    batches = [list(range(lo, hi))[j:j + settings.batch_size]
               for lo, hi in (bounds[k] for k in pending) for j in range(0, hi - lo, settings.batch_size)]
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, num_workers=settings.workers,
        collate_fn=collate if on_device else _collate, pin_memory=device.type == "cuda" and not on_device,
        prefetch_factor=4 if settings.workers > 0 else None)

    # Per pending shard: extracted rows -> feature vector, skipped rows -> reason.
    done_rows: dict[int, dict[int, np.ndarray | str]] = {k: {} for k in pending}

    def absorb(batch_rows: list[int], feats: np.ndarray) -> None:
        for j, row in enumerate(batch_rows):
            done_rows[row // size][row] = feats[j]

    def flush() -> None:
        for k in list(done_rows):
            lo, hi = bounds[k]
            if len(done_rows[k]) < hi - lo:
                continue
            got = done_rows.pop(k)
            vectors = [got[r] for r in range(lo, hi) if not isinstance(got[r], str)]
            shard = Shard(
                index=k, image_ids=job.ids[lo:hi], paths=job.paths[lo:hi],
                features=(np.stack(vectors) if vectors else np.zeros((0, feature_dim(settings.arch)))).astype(job.np_dtype),
                reasons=[got[r] if isinstance(got[r], str) else "" for r in range(lo, hi)],
                fingerprint=job.fingerprint, stamps=job.stamps[lo:hi])
            if job.shard_dir is not None:
                _write_shard(job.shard_dir, shard)
            job.shards[k] = shard

    def to_numpy(in_flight) -> np.ndarray:
        return _to_numpy(in_flight[1], job.np_dtype, job.ids, in_flight[0])

    cudnn_before = torch.backends.cudnn.benchmark
    threads_before = torch.get_num_threads()
    torch.backends.cudnn.benchmark = device.type == "cuda"
    torch.set_num_threads(forward_threads(settings, device))
    try:
        with torch.inference_mode(), tqdm(total=len(rows), desc="features", unit="img",
                                          disable=not progress, dynamic_ncols=True) as bar:
            in_flight = None  # (rows, device tensor): copy back one batch late, so the GPU keeps busy
            for batch_rows, batch, failures in loader:
                if on_device:  # the batch's file bytes -> decoded, resized, cropped there
                    batch_rows, batch, more = decode_batch(batch_rows, batch, device=device,
                                                           resize=settings.resize, crop=settings.crop)
                    failures = failures + more
                for row, kind, reason in failures:
                    where = f"image {job.ids[row]!r}: "
                    if kind == "missing":
                        raise FileNotFoundError(f"{where}{reason} (listed in {job.source})")
                    if not settings.skip_unreadable:
                        raise UnreadableImageError(
                            f"{where}cannot decode {job.shown[row]}: {reason} "
                            f"(set features.skip_unreadable: true to skip such images)")
                    done_rows[row // size][row] = _clean_reason(reason)
                launched = None
                if batch is not None:
                    launched = (batch_rows, forward(model, batch, device=device, amp_dtype=amp_dtype))
                if in_flight is not None:
                    absorb(in_flight[0], to_numpy(in_flight))
                in_flight = launched
                flush()
                bar.update(len(batch_rows) + len(failures))
            if in_flight is not None:
                absorb(in_flight[0], to_numpy(in_flight))
            flush()
    finally:
        torch.backends.cudnn.benchmark = cudnn_before
        torch.set_num_threads(threads_before)
    assert not done_rows, f"unfinished shards {sorted(done_rows)}"


def extract_features(
    images: pd.DataFrame | str | os.PathLike,
    *,
    settings: FeatureSettings,
    shard_dir: str | os.PathLike | None = None,
    model=None,
    progress: bool = True,
    root: str | os.PathLike | None = None,
) -> FeatureResult:
    """Extract features for every row of the image list, in its order.

    ``shard_dir``: where finished shards are written and looked up for resuming (``None``: keep
    everything in memory, no resume). ``model``: an already prepared model (see
    :func:`pseudopairs.features.network.prepare_model`) to use instead of building one from
    ``settings.weights`` — the benchmark passes one; the shard fingerprint still describes
    ``settings``. ``root``: the folder the list's paths are relative to (a corpus kept outside
    the workflow, :func:`pseudopairs.data.corpora.image_root`).
    """
    source = str(images) if not isinstance(images, pd.DataFrame) else "image list"
    frame = read_image_list(images) if not isinstance(images, pd.DataFrame) else _check_image_list(images, source=source)
    sources = image_sources(frame, root)
    ids = frame["image_id"].tolist()
    n = len(ids)
    _check_files_exist(frame, sources, source=source)
    device = torch_device(settings.device)
    size = settings.shard_size
    job = _Job(ids=ids, paths=sources.labels, files=sources.files, ranges=sources.ranges,
               shown=sources.shown, source=source,
               settings=settings, shard_dir=Path(shard_dir) if shard_dir is not None else None, device=device,
               fingerprint=settings_fingerprint(settings, device=device), stamps=file_stamps(sources.files),
               bounds=[(k * size, min(n, (k + 1) * size)) for k in range(-(-n // size))])
    _reuse_shards(job)
    reused = len(job.shards)
    pending = [k for k in range(len(job.bounds)) if k not in job.shards]
    computed = sum(job.bounds[k][1] - job.bounds[k][0] for k in pending)
    if reused:
        log.info("reusing %d of %d shards from %s; %d images to compute", reused, len(job.bounds),
                 job.shard_dir, computed)
    if pending:
        _compute_shards(job, pending, model=model, progress=progress)

    out_ids: list[str] = []
    blocks: list[np.ndarray] = []
    skipped: list[SkippedImage] = []
    for k in range(len(job.bounds)):
        shard = job.shards[k]
        for image_id, path, reason in zip(shard.image_ids, shard.paths, shard.reasons):
            if reason:
                skipped.append(SkippedImage(image_id, path, reason))
            else:
                out_ids.append(image_id)
        blocks.append(shard.features)
    features = np.concatenate(blocks) if blocks else np.zeros((0, feature_dim(job.settings.arch)), dtype=job.np_dtype)
    return FeatureResult(image_ids=out_ids, features=features.astype(job.np_dtype, copy=False),
                         skipped=skipped, computed=computed, reused_shards=reused)


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


def backbone_record(settings: FeatureSettings) -> dict:
    """What the features file records of its network (:func:`pseudopairs.core.io.feature_backbone`):
    the model, the size of its embedding, the weights, the input size."""
    return {"arch": settings.arch, "dim": feature_dim(settings.arch), "weights": settings.weights,
            "resize": settings.resize, "crop": settings.crop}


def check_preprocessing(settings: FeatureSettings) -> None:
    """Log where torchvision weights were trained at another input size than features.resize /
    crop (the features are still computed as configured)."""
    from pseudopairs.features import backbones

    if not backbones.is_enum_weights(settings.weights):
        return
    preset = backbones.weights_entry(settings.arch, settings.weights).transforms()
    resize, crop = list(preset.resize_size)[0], list(preset.crop_size)[0]
    if (resize, crop) != (settings.resize, settings.crop):
        log.warning("features.weights %s of %s were trained on %d px crops of %d px images; "
                    "features.resize/crop are %d/%d", settings.weights, settings.arch, crop, resize,
                    settings.resize, settings.crop)


def run_features(
    images_path: str | os.PathLike,
    output_path: str | os.PathLike,
    skipped_path: str | os.PathLike,
    *,
    settings: FeatureSettings,
    shard_dir: str | os.PathLike | None = None,
    progress: bool = True,
    root: str | os.PathLike | None = None,
) -> FeatureResult:
    """The ``pseudopairs features`` step: extract, write the skipped TSV (always) and the feature
    file (atomically, via ``save_features``), then remove the shards."""
    output_path = Path(output_path)
    suffix = output_path.suffix.lstrip(".")
    if suffix != settings.format:
        raise ValueError(f"features.format is {settings.format!r} but the output {output_path} "
                         f"ends in {output_path.suffix!r}; they must agree")
    shard_dir = Path(shard_dir) if shard_dir is not None else output_path.with_name(output_path.name + ".shards")
    check_preprocessing(settings)
    result = extract_features(images_path, settings=settings, shard_dir=shard_dir, progress=progress, root=root)
    write_text_atomic(skipped_path, skipped_tsv(result.skipped))
    save_features(output_path, image_ids=result.image_ids, features=result.features,
                  backbone=backbone_record(settings))
    remove_shards(shard_dir)
    log.info("wrote %s: %d images x %d (%s); %d skipped; %d computed, %d shards reused",
             output_path, len(result.image_ids), feature_dim(settings.arch), settings.dtype, len(result.skipped),
             result.computed, result.reused_shards)
    return result


def _cmd_features(args: argparse.Namespace) -> int:
    settings = FeatureSettings.from_dict(args.settings)
    run_features(args.images, args.output, args.skipped, settings=settings, shard_dir=args.shard_dir,
                 root=args.image_root)
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "features", _cmd_features,
        description="Extract the pooled embedding of features.arch for every image of an image "
                    "list (rows in its order); resumable through shards.")
    p.add_argument("--images", required=True, help="image list Parquet (image_id, path)")
    p.add_argument("--output", required=True, help="feature file (.npz or .parquet = features.format)")
    p.add_argument("--skipped", required=True, help="TSV of skipped images (image_id, path, reason); always written")
    commands.add_json(p, "--settings", "the features config section")
    p.add_argument("--shard-dir", default=None, help="resumable shards (default: {output}.shards/)")
    p.add_argument("--image-root", default=None,
                   help="the folder the image list's paths are relative to (a corpus kept outside the workflow)")
