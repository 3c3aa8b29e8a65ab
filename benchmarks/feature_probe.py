"""What the demo's image features carry: a linear probe per caption attribute.

Renders single-group world scenes of their own random stream (purpose ``probe``, never the
corpora's or the pretraining's images), extracts features with each network named on the
command line, and fits a one-vs-all ridge classifier per attribute (kind, colour, size, texture,
count, background; features standardised; lambda picked on the last 20 % of the training part)
— the test accuracy is how much of the attribute a linear read-out finds. The majority class is
printed as the floor.

    python benchmarks/feature_probe.py results/features/pretrained/resnet18.pt
    python benchmarks/feature_probe.py none:resnet50:112:128:112 results/features/pretrained/resnet18.pt:resnet18:64:64:64

Each network is ``WEIGHTS[:ARCH[:IMAGE_SIZE:RESIZE:CROP]]`` (default arch resnet18 and 64/64/64,
the demo's; ``none:resnet50:112:128:112`` is the demo's former random-weight extractor).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pseudopairs.features.network import build_model, normalize_batch, preprocess  # noqa: E402
from pseudopairs.world.content import BACKGROUNDS, KINDS, RGB  # noqa: E402
from pseudopairs.world.render import render_scene  # noqa: E402
from pseudopairs.world.scene import image_rng, sample_scene  # noqa: E402

ATTRIBUTES = ("kind", "colour", "size", "texture", "count", "background")
TEXTURES = ("plain", "striped", "dotted", "checkered")


def probe_scenes(n: int, *, image_size: int, seed: int):
    return [sample_scene(image_rng(seed, "probe", corpus, i, "scene"), corpus=corpus,
                         image_size=image_size, max_groups=1)
            for i, corpus in ((i, ("m30k", "coco")[i % 2]) for i in range(n))]


def labels(scenes) -> dict[str, np.ndarray]:
    groups = [s.groups[0] for s in scenes]
    kinds, colours, backgrounds = sorted(KINDS), sorted(RGB), sorted(BACKGROUNDS)
    return {"kind": np.array([kinds.index(g.kind) for g in groups]),
            "colour": np.array([colours.index(g.colour) for g in groups]),
            "size": np.array([int(g.size == "large") for g in groups]),
            "texture": np.array([TEXTURES.index(g.texture) for g in groups]),
            "count": np.array([g.count - 1 for g in groups]),
            "background": np.array([backgrounds.index(s.background) for s in scenes])}


def ridge_accuracy(x_train, y_train, x_test, y_test, lambdas=(0.1, 1.0, 10.0, 100.0, 1000.0)) -> float:
    mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
    x_train, x_test = (x_train - mu) / sd, (x_test - mu) / sd
    targets = -np.ones((len(y_train), int(max(y_train.max(), y_test.max())) + 1))
    targets[np.arange(len(y_train)), y_train] = 1

    def fit(x, y, lam):
        x1 = np.hstack([x, np.ones((len(x), 1))])
        return np.linalg.solve(x1.T @ x1 + lam * np.eye(x1.shape[1]), x1.T @ y)

    def predict(x, w):
        return (np.hstack([x, np.ones((len(x), 1))]) @ w).argmax(1)

    cut = int(0.8 * len(y_train))
    best = max(lambdas, key=lambda lam: float(
        (predict(x_train[cut:], fit(x_train[:cut], targets[:cut], lam)) == y_train[cut:]).mean()))
    return float((predict(x_test, fit(x_train, targets, best)) == y_test).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("networks", nargs="+", help="WEIGHTS[:ARCH[:IMAGE_SIZE:RESIZE:CROP]]")
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=600)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = args.train + args.test
    for spec in args.networks:
        parts = spec.split(":")
        defaults = ["", "resnet18", "64", "64", "64"]   # the demo's arch and sizes
        weights, arch, size, resize, crop = parts + defaults[len(parts):]
        size, resize, crop = int(size), int(resize), int(crop)
        scenes = probe_scenes(n, image_size=size, seed=args.seed)
        images = torch.stack([preprocess(render_scene(s, image_size=size), resize=resize, crop=crop) for s in scenes])
        model = build_model(weights, seed=0, arch=arch)
        start = time.perf_counter()
        with torch.inference_mode():
            feats = torch.cat([model(normalize_batch(images[i:i + 64])) for i in range(0, n, 64)]).double().numpy()
        seconds = time.perf_counter() - start
        truth = labels(scenes)
        accuracy = {a: ridge_accuracy(feats[:args.train], truth[a][:args.train], feats[args.train:],
                                      truth[a][args.train:]) for a in ATTRIBUTES}
        floor = {a: float(np.bincount(truth[a][args.train:]).max() / args.test) for a in ATTRIBUTES}
        print(f"{arch} weights={weights} image {size} px, resize {resize}, crop {crop}: {feats.shape[1]}-d, "
              f"{n / seconds:.0f} images/s")
        print("  probe accuracy %: " + "  ".join(f"{a} {100 * accuracy[a]:.1f}" for a in ATTRIBUTES))
        print("  majority class %: " + "  ".join(f"{a} {100 * floor[a]:.1f}" for a in ATTRIBUTES))


if __name__ == "__main__":
    main()
