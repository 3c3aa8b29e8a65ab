"""JPEG decoding on the device (``features.decode: device``): the DataLoader workers only read
each file's bytes, and the main process decodes a batch of JPEGs at once with
``torchvision.io.decode_jpeg(..., device=...)`` (nvJPEG on a GPU), then resizes and crops the
decoded tensors where they are (:func:`preprocess_tensor`), so the CPU workers no longer bind
(at 224 px on an H200 the PIL path fed 1,324 img/s to a forward that runs 13,944;
docs/benchmarks.md).

What stays the same: the files each row reads, the shorter side resized to ``resize`` (bilinear,
antialiased) and the centre crop of ``crop``, as :func:`pseudopairs.features.network.preprocess`
does with PIL — on uint8 tensors instead (torchvision's tensor resize rounds its own way, so a
pixel may differ by a level or two from PIL's; the features agree to float tolerance, tested).
Files that are not JPEGs (the demo world's PNGs) are decoded and preprocessed by the worker as
before. A JPEG the batch decoder rejects is decoded alone, and, failing that, by PIL on the CPU
(nvJPEG does not take every JPEG, e.g. CMYK); one neither reads is reported like the CPU path's
(skipped or an error, ``features.skip_unreadable``). (torchvision 0.29 marks its image decoders
deprecated in favour of TorchCodec; they still work, and the warning is silenced here.)
"""

from __future__ import annotations

from typing import Any, Sequence

from pseudopairs.features.network import image_bytes, load_image

JPEG_MAGIC = b"\xff\xd8\xff"


def is_jpeg(data: bytes) -> bool:
    return data[:3] == JPEG_MAGIC


def preprocess_tensor(image, *, resize: int, crop: int):
    """A decoded ``(3, H, W)`` uint8 tensor (on any device) with its shorter side resized to
    ``resize`` (bilinear, antialiased) and centre-cropped to ``crop``: ``(3, crop, crop)`` uint8."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as TF

    image = TF.resize(image, [resize], interpolation=InterpolationMode.BILINEAR, antialias=True)
    return TF.center_crop(image, [crop, crop])


class FileDataset:
    """Map-style dataset over the image list's rows for device decoding: a JPEG comes back as its
    raw bytes (a uint8 tensor), any other image decoded and preprocessed on the CPU (as
    :class:`pseudopairs.features.network._ImageDataset` does); never raises, it returns the
    failure so the main process decides."""

    def __init__(self, paths: Sequence[str], *, resize: int, crop: int,
                 ranges: Sequence[tuple[int, int] | None] | None = None) -> None:
        self.paths = list(paths)
        # (offset, size) of an image inside its file: a webdataset shard's member
        self.ranges = list(ranges) if ranges is not None else [None] * len(self.paths)
        self.resize, self.crop = resize, crop

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, row: int):
        import torch

        path, byte_range = self.paths[row], self.ranges[row]
        try:
            data = image_bytes(path, byte_range)
        except FileNotFoundError as err:
            return row, None, "missing", f"file not found: {err}"
        except (OSError, ValueError) as err:
            return row, None, "unreadable", f"{type(err).__name__}: {err}"
        if is_jpeg(data):
            return row, ("jpeg", torch.frombuffer(bytearray(data), dtype=torch.uint8)), None, ""
        try:
            return row, ("ready", load_image(path, resize=self.resize, crop=self.crop, byte_range=byte_range)), None, ""
        except Exception as err:  # noqa: BLE001 — any decoding failure means "unreadable image"
            return row, None, "unreadable", f"{type(err).__name__}: {err}"


def collate(items):
    """``(rows, payloads, failures)``: the good rows with their ``("jpeg", bytes)`` or
    ``("ready", uint8 image)`` payloads, and ``(row, kind, reason)`` of the failed ones."""
    good = [(row, payload) for row, payload, kind, _ in items if kind is None]
    failures = [(row, kind, reason) for row, _, kind, reason in items if kind is not None]
    return [row for row, _ in good], [payload for _, payload in good], failures


def _pil_decode(data, *, resize: int, crop: int):
    """The CPU path's decoding of a file's bytes (a uint8 tensor): the preprocessed image, or
    why it cannot be read."""
    import io

    from PIL import Image

    from pseudopairs.features.network import preprocess

    try:
        with Image.open(io.BytesIO(data.numpy().tobytes())) as img:
            img = img.convert("RGB")
        return preprocess(img, resize=resize, crop=crop)
    except Exception as err:  # noqa: BLE001 — any decoding failure means "unreadable image"
        return f"{type(err).__name__}: {err}"


def decode_batch(rows: list[int], payloads: list[tuple[str, Any]], *, device, resize: int,
                 crop: int) -> tuple[list[int], Any, list[tuple[int, str, str]]]:
    """Decode a batch's JPEGs on ``device`` (one batched ``decode_jpeg``), resize and crop every
    image there: ``(rows, uint8 (B, 3, crop, crop) on device or None, failures)``."""
    import warnings

    import torch
    from torchvision.io import ImageReadMode
    from torchvision.io import decode_jpeg as _decode_jpeg

    def decode_jpeg(*args, **kwargs):  # torchvision 0.29 warns that TorchCodec supersedes it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return _decode_jpeg(*args, **kwargs)

    payloads = list(payloads)
    jpegs = [k for k, (kind, _) in enumerate(payloads) if kind == "jpeg"]
    decoded: dict[int, Any] = {}
    failures: list[tuple[int, str, str]] = []
    if jpegs:
        data = [payloads[k][1] for k in jpegs]
        try:
            images = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
            decoded.update(zip(jpegs, images))
        except RuntimeError:  # one bad file fails the batch: decode each alone to name it
            for k in jpegs:
                try:
                    decoded[k] = decode_jpeg(payloads[k][1], mode=ImageReadMode.RGB, device=device)
                except RuntimeError as err:  # a JPEG nvJPEG cannot take (CMYK, ...) PIL may read
                    image = _pil_decode(payloads[k][1], resize=resize, crop=crop)
                    if isinstance(image, str):
                        failures.append((rows[k], "unreadable", f"{type(err).__name__}: {err}; {image}"))
                    else:
                        payloads[k] = ("ready", image)
    kept, tensors = [], []
    for k, (kind, payload) in enumerate(payloads):
        if kind == "ready":
            tensors.append(payload.to(device))
        elif k in decoded:
            tensors.append(preprocess_tensor(decoded[k], resize=resize, crop=crop))
        else:
            continue
        kept.append(rows[k])
    return kept, (torch.stack(tensors) if tensors else None), failures
