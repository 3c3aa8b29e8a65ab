"""The feature network and its input: a torchvision classification model (``features.arch``;
:mod:`pseudopairs.features.backbones`) with its classifier layer removed (weights: seeded random,
torchvision's published weights from the torch hub cache only, or a local state dict), image
decoding and preprocessing, the forward pass."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Sequence

from pseudopairs.features import backbones
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.core.settings import resolve_device as settings_device


FEATURE_DIM = 2048  # resnet50, the paper's


class _FeatureDims(Mapping):
    """``FEATURE_DIMS[arch]``: the pooled embedding's size of any ``features.arch``
    (:func:`pseudopairs.features.backbones.feature_dim`). The paper (config/paper.yaml) uses
    resnet50 (2,048); the demo world a resnet18 pretrained on world scenes by `pretrain-features`
    (pseudopairs.features.pretraining): 4x cheaper on 2 CPU cores, 512-d."""

    def __getitem__(self, arch: str) -> int:
        try:
            return backbones.feature_dim(arch)
        except backbones.BackboneError as err:
            raise KeyError(str(err)) from None

    def __iter__(self):
        return iter(backbones.backbone_names())

    def __len__(self) -> int:
        return len(backbones.backbone_names())


FEATURE_DIMS = _FeatureDims()


IMAGENET_MEAN = (0.485, 0.456, 0.406)


IMAGENET_STD = (0.229, 0.224, 0.225)


def weights_checkpoint_path(weights: str, arch: str = "resnet50") -> Path:
    """Where torch hub caches the torchvision weights ``weights`` (``imagenet`` or an entry of
    ``arch``'s weights enum): ``$TORCH_HOME/hub/checkpoints/<file of its URL>``."""
    return backbones.hub_checkpoint_path(arch, weights)


def imagenet_checkpoint_path() -> Path:
    """Where torch hub caches ``ResNet50_Weights.IMAGENET1K_V1`` (``$TORCH_HOME/hub/checkpoints``)."""
    return weights_checkpoint_path("imagenet", "resnet50")


def load_weights(weights: str, arch: str = "resnet50") -> dict | None:
    """The state dict named by ``features.weights`` (``None`` for ``none``); never downloads."""
    import torch

    if weights == "none":
        return None
    if backbones.is_enum_weights(weights):
        path = weights_checkpoint_path(weights, arch)
        if not path.is_file():
            entry = backbones.hub_checkpoint_sketch(arch, weights)
            raise FileNotFoundError(
                f"features.weights: {weights}: {entry} is not in the torch hub "
                f"cache ({path}); using it would need a download, which this pipeline never does. "
                f"Fetch it once with network access (torchvision.models.get_model({arch!r}, "
                f"weights={entry.split('.')[-1]!r})), point TORCH_HOME at a cache that holds it, or "
                "give a local state dict path instead")
        backbones.verify_hub_file(path)
    else:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(
                f"features.weights: {weights!r} is neither 'none' nor torchvision weights nor an "
                "existing state dict file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a corrupt or non-tensor pickle
        raise ValueError(f"features.weights: cannot load state dict {path}: {err}") from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"features.weights: {path} is not a state dict (a mapping of names to tensors)")
    return state


def torchvision_resnet(arch: str):
    """An untrained torchvision model of ``arch`` (any :func:`backbones.check_arch` name; the
    ResNets were the first), float32, CPU."""
    try:
        return backbones.untrained(arch)
    except backbones.BackboneError as err:
        raise ValueError(str(err)) from None


def build_model(weights: str = "none", *, seed: int = 0, arch: str = "resnet50"):
    """torchvision ``arch`` (default ``resnet50``) with its classifier layer = identity (the
    pooled embedding, :mod:`~pseudopairs.features.backbones`), eval mode, CPU, float32.

    ``weights``: ``none`` (random init after ``torch.manual_seed(seed)``; the global RNG state is
    restored afterwards), ``imagenet`` or a weights enum entry (hub cache only) or a state dict path.
    """
    import torch

    state = load_weights(weights, arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, _, head = backbones.headless(arch)
    if state is not None:
        state = {k: v for k, v in state.items() if not k.startswith(head + ".")}
        try:
            result = model.load_state_dict(state, strict=False)
        except RuntimeError as err:  # shape mismatches
            raise ValueError(f"features.weights: {weights} is not a torchvision {arch} state dict: "
                             f"{' '.join(str(err).split())[:500]}") from err
        problems = []
        if result.missing_keys:
            problems.append(f"missing {result.missing_keys[:5]}{' …' if len(result.missing_keys) > 5 else ''}")
        if result.unexpected_keys:
            problems.append(f"unexpected {result.unexpected_keys[:5]}"
                            f"{' …' if len(result.unexpected_keys) > 5 else ''}")
        if problems:
            raise ValueError(f"features.weights: {weights} is not a torchvision {arch} state dict: "
                             + "; ".join(problems))
    return model.eval()


def torch_device(name: str):
    """The torch device of ``features.device`` (:func:`pseudopairs.core.settings.resolve_device`)."""
    import torch

    return torch.device(settings_device(name, key="features.device"))


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


def preprocess(img, *, resize: int, crop: int):
    """An RGB PIL image resized (shorter side ``resize``; bilinear, antialiased, as torchvision
    ``Resize``) and centre-cropped to ``crop``: uint8 tensor (3, crop, crop)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    img = TF.resize(img, [resize], interpolation=InterpolationMode.BILINEAR, antialias=True)
    return TF.pil_to_tensor(TF.center_crop(img, [crop, crop]))


def image_bytes(path: str | os.PathLike, byte_range: tuple[int, int] | None = None) -> bytes:
    """An image file's bytes, or the ``(offset, size)`` bytes of one inside it (a webdataset
    shard's member); a shard that ends early is a ValueError."""
    with open(path, "rb") as handle:
        if byte_range is None:
            return handle.read()
        offset, size = byte_range
        handle.seek(offset)
        data = handle.read(size)
    if len(data) != size:
        raise ValueError(f"the shard ends {size - len(data)} bytes before the image does")
    return data


def load_image(path: str | os.PathLike, *, resize: int, crop: int,
               byte_range: tuple[int, int] | None = None):
    """Decode an image file -- or the ``(offset, size)`` bytes of one inside it (a webdataset
    shard's member) --, RGB-convert and :func:`preprocess` it."""
    import io

    from PIL import Image

    source = io.BytesIO(image_bytes(path, byte_range)) if byte_range is not None else path
    with Image.open(source) as img:
        img = img.convert("RGB")  # forces a full decode: truncated/corrupt data fails here
    return preprocess(img, resize=resize, crop=crop)


def normalize_batch(batch):
    """uint8 (B, 3, H, W) -> float32 ImageNet-normalised, exactly ``ToTensor`` + ``Normalize``."""
    import torch

    mean = torch.tensor(IMAGENET_MEAN, device=batch.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=batch.device).view(1, 3, 1, 1)
    return batch.float().div(255).sub(mean).div(std)


def forward(model, batch, *, device, amp_dtype=None):
    """Features of a uint8 image batch: normalise on ``device``, ``channels_last``, forward under
    autocast (when ``amp_dtype``). Returns a device tensor (B, feature dim); the caller moves it."""
    import torch

    x = batch.to(device, non_blocking=True)
    x = normalize_batch(x).contiguous(memory_format=torch.channels_last)
    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        return model(x)


class _ImageDataset:
    """Map-style dataset over selected rows of the image list; never raises on a bad image, it
    returns the failure so the main process can decide (error or skip)."""

    def __init__(self, paths: Sequence[str], *, resize: int, crop: int,
                 ranges: Sequence[tuple[int, int] | None] | None = None) -> None:
        self.paths = list(paths)
        self.ranges = list(ranges) if ranges is not None else [None] * len(self.paths)
        self.resize = resize
        self.crop = crop

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, row: int):
        path = self.paths[row]
        try:
            image = load_image(path, resize=self.resize, crop=self.crop, byte_range=self.ranges[row])
            return row, image, None, ""
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
