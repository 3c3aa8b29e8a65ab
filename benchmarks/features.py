"""Throughput of the feature pipeline versus a bare model forward.

Writes N synthetic PNGs (``--format jpeg``: JPEGs) to a temporary directory, then measures in one process, on one device,
with one batch size and one prepared model (ResNet50, random weights, ``channels_last``):

- pipeline: ``pseudopairs.features.extract.extract_features`` from the PNG files to the feature array
  (DataLoader workers decoding/resizing/cropping, normalisation on the device, forward, copy
  back, dtype cast, shard files written to the temporary directory);
- bare forward: only ``model(x)`` over the same images already decoded, preprocessed,
  normalised and sitting on the device in batches.

ratio = pipeline images/s ÷ bare images/s (1.0 = the data path costs nothing). On CUDA it also
measures 224-px crops (resize 256, the paper's setting) of 375-px JPEGs with fp16 autocast, decoded
by the workers (``features.decode: cpu``) and then on the device (``decode: device``, batched
``torchvision.io.decode_jpeg``), against the goal of 2,000 img/s. Both measurements use the
torch thread count the pipeline picks for its forward (`forward_threads`; on CPU with 1 worker on
2 cores: 1 thread, the decoding worker gets the other core); `--threads` overrides it.

On a CPU that thread count holds the bare forward back as well as the pipeline's (1 thread of 2
here, while the pipeline's decoding uses the other core), so the ratio above says what the data
path costs at equal forward threads. A CPU run therefore also times the bare forward at torch's
default thread count (the process's ``torch.get_num_threads()`` before the benchmark sets any:
the cores, or ``OMP_NUM_THREADS``) and prints ``ratio vs default threads`` = pipeline images/s ÷
that bare rate: the pipeline against the plain forward one would write without it.

    .venv/bin/python benchmarks/features.py [--images N --size S --device auto --workers W]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image

from pseudopairs.features import extract as F
from pseudopairs.features import network as N


def write_pngs(directory: Path, *, count: int, size: int, seed: int, fmt: str = "png") -> pd.DataFrame:
    """Synthetic photographs-ish: smooth colour gradients, a few boxes and mild noise (PNG-coded,
    or JPEG at quality 90 with ``fmt="jpeg"``, as COCO's and Flickr30K's files are)."""
    rng = np.random.default_rng(seed)
    height, width = size, int(round(size * 4 / 3))  # landscape, like Flickr/COCO photos
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    rows = []
    for i in range(count):
        base = rng.uniform(0, 255, size=3)
        slope = rng.uniform(-1, 1, size=(2, 3)) * 255 / size
        img = base + yy[..., None] * slope[0] + xx[..., None] * slope[1]
        for _ in range(3):
            y0, x0 = rng.integers(0, height - 8), rng.integers(0, width - 8)
            img[y0:y0 + rng.integers(8, height // 2), x0:x0 + rng.integers(8, width // 2)] = rng.uniform(0, 255, 3)
        img += rng.normal(0, 6, size=img.shape)
        path = directory / f"img{i:06d}.{'jpg' if fmt == 'jpeg' else 'png'}"
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, **({"quality": 90} if fmt == "jpeg" else {}))
        rows.append((f"img{i:06d}", str(path)))
    return pd.DataFrame(rows, columns=["image_id", "path"])


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_forward_rate(model, frame: pd.DataFrame, settings: F.FeatureSettings, device) -> tuple[float, int]:
    """images/s of model(x) alone over preprocessed, normalised batches already on the device, and
    the torch thread count the timed forward actually ran with (observed inside the timed loop, so
    the label printed beside a rate is the count that produced it)."""
    amp = N.autocast_dtype(device)
    batches = []
    paths = frame["path"].tolist()
    for lo in range(0, len(paths), settings.batch_size):
        uint8 = torch.stack([N.load_image(p, resize=settings.resize, crop=settings.crop)
                             for p in paths[lo:lo + settings.batch_size]])
        x = N.normalize_batch(uint8.to(device)).contiguous(memory_format=torch.channels_last)
        batches.append(x)
    with torch.inference_mode():
        synchronize(device)
        start = time.perf_counter()
        used = set()
        for x in batches:
            used.add(torch.get_num_threads())
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                y = model(x)
        synchronize(device)
        elapsed = time.perf_counter() - start
    assert y.shape[1] == N.FEATURE_DIM
    [threads] = used
    return len(paths) / elapsed, threads


def pipeline_rate(model, frame: pd.DataFrame, settings: F.FeatureSettings, shard_dir: Path) -> float:
    F.remove_shards(shard_dir)
    start = time.perf_counter()
    result = F.extract_features(frame, settings=settings, shard_dir=shard_dir, model=model, progress=False)
    elapsed = time.perf_counter() - start
    assert result.features.shape == (len(frame), N.FEATURE_DIM) and result.computed == len(frame)
    F.remove_shards(shard_dir)
    return len(frame) / elapsed


def measure(label: str, *, tmp: Path, count: int, size: int, settings: F.FeatureSettings,
            repeats: int, default_threads: int, fmt: str = "png") -> dict:
    """Best-of-``repeats`` rates of the pipeline and the bare forward at the pipeline's forward
    threads; on a CPU also the bare forward at ``default_threads`` (torch's default)."""
    device = N.torch_device(settings.device)
    image_dir = tmp / f"{fmt}{size}-{count}"
    if not image_dir.is_dir():
        image_dir.mkdir()
        write_pngs(image_dir, count=count, size=size, seed=0, fmt=fmt)
    frame = pd.DataFrame({"path": sorted(str(p) for p in image_dir.iterdir())})
    frame.insert(0, "image_id", [Path(p).stem for p in frame["path"]])
    model = N.prepare_model(N.build_model("none", seed=0), device)
    # The bare forward runs with the thread count the pipeline uses for its forward.
    torch.set_num_threads(default_threads)
    threads = N.forward_threads(settings, device)
    torch.set_num_threads(threads)
    on_cpu = device.type == "cpu"

    def bare_at_default_threads(rows: pd.DataFrame) -> tuple[float, int]:
        torch.set_num_threads(default_threads)
        try:
            return bare_forward_rate(model, rows, settings, device)
        finally:
            torch.set_num_threads(threads)

    # Warm up every path (allocator, cudnn autotuning, page cache of the PNGs).
    warm = frame.head(min(len(frame), 2 * settings.batch_size))
    pipeline_rate(model, warm, settings, tmp / "shards")
    bare_forward_rate(model, warm, settings, device)
    if on_cpu:
        bare_at_default_threads(warm)
    pipe, bare, bare_default = [], [], []
    bare_used, default_used = set(), set()  # the thread counts the two bare forwards ran with
    for _ in range(repeats):  # interleaved, so background load hits them alike
        rate, used = bare_forward_rate(model, frame, settings, device)
        bare.append(rate)
        bare_used.add(used)
        if on_cpu:
            rate, used = bare_at_default_threads(frame)
            bare_default.append(rate)
            default_used.add(used)
        pipe.append(pipeline_rate(model, frame, settings, tmp / "shards"))
    row = {
        "label": label, "device": str(device), "images": count, "format": fmt, "image_size": size,
        "decode": settings.decode,
        "resize": settings.resize, "crop": settings.crop, "batch_size": settings.batch_size,
        "workers": settings.workers, "torch_threads": threads, "bare_threads_observed": sorted(bare_used),
        "amp": str(N.autocast_dtype(device)), "pipeline_img_s": max(pipe), "bare_img_s": max(bare),
    }
    row["ratio"] = row["pipeline_img_s"] / row["bare_img_s"]
    print(f"[{label}] {device} {count} {fmt.upper()}s {size}px, decode {settings.decode} -> resize "
          f"{settings.resize} crop {settings.crop}, "
          f"batch {settings.batch_size}, workers {settings.workers}, threads {threads}, "
          f"amp {row['amp']}: pipeline {row['pipeline_img_s']:.1f} img/s, bare forward "
          f"{row['bare_img_s']:.1f} img/s, ratio {row['ratio']:.3f}", flush=True)
    if on_cpu:
        row["default_threads"] = default_threads
        row["bare_default_threads_observed"] = sorted(default_used)
        row["bare_default_threads_img_s"] = max(bare_default)
        row["ratio_vs_default_threads"] = row["pipeline_img_s"] / row["bare_default_threads_img_s"]
        print(f"[{label}] bare forward at torch's default {default_threads} threads "
              f"{row['bare_default_threads_img_s']:.1f} img/s; ratio vs default threads "
              f"{row['ratio_vs_default_threads']:.3f} (pipeline at {threads} forward threads + "
              f"{settings.workers} decoding workers)", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=320, help="number of synthetic PNGs")
    parser.add_argument("--size", type=int, default=112, help="PNG height in px (width = 4/3 of it)")
    parser.add_argument("--resize", type=int, default=128)
    parser.add_argument("--crop", type=int, default=112)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--workers", type=int, default=None,
                        help="DataLoader workers (default: 1 on CPU, min(8, cores - 1) on CUDA)")
    parser.add_argument("--threads", type=int, default=None,
                        help="features.threads: torch threads for the forward, in both measurements "
                             "(default: the pipeline's own choice, pseudopairs.features.network.forward_threads)")
    parser.add_argument("--repeats", type=int, default=2, help="timed repetitions; the best is kept")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--format", default="png", choices=["png", "jpeg"], help="synthetic image files")
    parser.add_argument("--decode", default="cpu", choices=["cpu", "device"], help="features.decode")
    parser.add_argument("--calibration", default=None,
                        help="on CUDA: record the faster 224-px pipeline rate in this calibration file "
                             "(pseudopairs.workflow.calibration; rates.features_images_per_s)")
    args = parser.parse_args(argv)

    default_threads = torch.get_num_threads()  # torch's own choice, before anything sets it
    device = N.torch_device(args.device)
    cores = os.cpu_count() or 1
    workers = args.workers if args.workers is not None else (1 if device.type == "cpu" else max(1, min(8, cores - 1)))
    base = dict(weights="none", seed=0, dtype="float16", format="npz", batch_size=args.batch_size,
                workers=workers, device=device.type, shard_size=512, threads=args.threads)
    results = []
    with tempfile.TemporaryDirectory(prefix="pp-features-bench-") as tmp:
        tmp = Path(tmp)
        results.append(measure("default", tmp=tmp, count=args.images, size=args.size, repeats=args.repeats,
                               fmt=args.format, default_threads=default_threads,
                               settings=F.FeatureSettings(resize=args.resize, crop=args.crop, decode=args.decode,
                                                          **base)))
        if device.type == "cuda":  # the paper's 224-px crops of JPEGs: decoded by the workers, then on the device
            big = dict(base, batch_size=max(args.batch_size, 128))
            for decode in ("cpu", "device"):
                results.append(measure(f"paper-224-amp-{decode}", tmp=tmp, count=max(args.images, 2048), size=375,
                                       repeats=args.repeats, fmt="jpeg", default_threads=default_threads,
                                       settings=F.FeatureSettings(resize=256, crop=224, decode=decode, **big)))
            paper = [r for r in results if r["label"].startswith("paper-224")]
            best = max(paper, key=lambda r: r["pipeline_img_s"])
            print(f"224 px JPEGs: decode cpu {paper[0]['pipeline_img_s']:.0f} img/s, decode device "
                  f"{paper[1]['pipeline_img_s']:.0f} img/s ({paper[1]['pipeline_img_s'] / paper[0]['pipeline_img_s']:.2f}x); "
                  f"best {best['pipeline_img_s']:.0f} img/s = {best['pipeline_img_s'] / 2000:.2f}x the goal of 2,000 "
                  f"(bare forward {best['bare_img_s']:.0f})", flush=True)
            if args.calibration:
                from pseudopairs.workflow.calibration import record

                record(args.calibration, gpu_model=torch.cuda.get_device_name(),
                       rates={"features_images_per_s": round(best["pipeline_img_s"], 1)},
                       note=f"benchmarks/features.py, 224 px JPEGs, decode {best['decode']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
