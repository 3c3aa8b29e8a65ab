"""The ``pretrain-features`` step — the demo world's stand-in for ImageNet pretraining:
a torchvision ResNet (``features.arch``) trained from scratch to recognise what the world's scenes
show; the ``features`` step then uses its state dict exactly like ImageNet weights
(``features.weights`` = the file written here, ``results/features/pretrained/{arch}.pt``).

Why: the real pipeline's image side is an ImageNet-trained ResNet50 whose features name objects.
A random-weight ResNet50 on the world's renders sees colour and background and hardly any shape
or texture (ridge probe on single-group scenes: object kind 19.8 %, texture 40.0 % = chance), while
the captions talk mostly about kinds; a model trained on such features cannot learn what the
method transfers, so every comparison of the demo's tables sat in the noise. With this extractor
the same probe reads kind 99.5 %, colour 99.5, size 99.5, texture 91.0, count 83.2
(docs/results.md).

The pretraining images are NOT the corpora's images: freshly drawn scenes of their own random
stream (purpose ``pretrain``), alternating between the m30k and the coco distribution — a
general-domain "ImageNet" that knows the kinds of both corpora. They are rendered in memory and
preprocessed exactly like the ``features`` step's input (:func:`~pseudopairs.features.network.preprocess`).
Each scene is labelled (multi-hot, binary cross-entropy) with what its captions can say: each
kind present; kind x colour, size, texture, count; the same attributes unbound ("some object is
red" — without them colour stayed at 52 %); background and its colour. The classifier head
(``fc``) is not written: the ``features`` step replaces it by the identity anyway.

The result is a pure function of the ``world`` section's scene keys (seed, image size, max_*: not
the corpora's sizes), the ``feature_pretraining`` section and ``features.arch/resize/crop`` (CPU, ``feature_pretraining.threads`` torch threads, one seed).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pseudopairs import commands
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.core.io import atomic_path, write_text_atomic
from pseudopairs.core.settings import Settings, setting
from pseudopairs.world.content import BACKGROUNDS, KINDS, RGB
from pseudopairs.world.settings import CORPORA, SceneSettings

log = logging.getLogger(__name__)

SIZES = ("large", "small")
TEXTURES = ("plain", "striped", "dotted", "checkered")
MAX_COUNT = 3  # counts above are one label ("3 or more"), as the captions' numerals top out


@dataclass(frozen=True)
class FeaturePretrainingSettings(Settings):
    """The ``feature_pretraining`` config section (demo world only)."""

    SECTION = "feature_pretraining"

    images: int = setting(8000, kind=int, low=1, doc="rendered training scenes")
    held_out: int = setting(500, kind=int, low=1, doc="further scenes for the report's exact-match rates")
    epochs: int = setting(5, kind=int, low=1, doc="passes over the training scenes")
    batch_size: int = setting(32, kind=int, low=1, doc="scenes per update")
    learning_rate: float = setting(3.0e-3, kind=float, low=0, low_open=True, doc="one-cycle peak (Adam)")
    seed: int = setting(0, kind=int, low=0, doc="initialisation and order of the scenes")
    threads: int = setting(2, kind=int, low=1,
                           doc="torch CPU threads (part of the result: CPU reductions split by thread)")

    def check(self) -> None:
        if self.batch_size > self.images:
            raise self.bad("batch_size", f"must not exceed feature_pretraining.images ({self.images})")


def label_names() -> list[str]:
    """The multi-hot label vector's entries, in order."""
    kinds, colours = sorted(KINDS), sorted(RGB)
    names = [f"kind={k}" for k in kinds]
    names += [f"{k}.colour={c}" for k in kinds for c in colours]
    names += [f"{k}.size={s}" for k in kinds for s in SIZES]
    names += [f"{k}.texture={t}" for k in kinds for t in TEXTURES]
    names += [f"{k}.count={n}" for k in kinds for n in range(1, MAX_COUNT + 1)]
    names += [f"object_colour={c}" for c in colours]
    names += [f"object_size={s}" for s in SIZES]
    names += [f"object_texture={t}" for t in TEXTURES]
    names += [f"object_count={n}" for n in range(1, MAX_COUNT + 1)]
    names += [f"background={b}" for b in sorted(BACKGROUNDS)]
    names += [f"background_colour={c}" for c in colours]
    return names


_INDEX = {name: i for i, name in enumerate(label_names())}


def scene_labels(scene) -> np.ndarray:
    """Multi-hot float32 vector of what a :class:`~pseudopairs.world.scene.Scene` shows."""
    y = np.zeros(len(_INDEX), dtype=np.float32)
    for g in scene.groups:
        count = min(g.count, MAX_COUNT)
        for name in (f"kind={g.kind}", f"{g.kind}.colour={g.colour}", f"{g.kind}.size={g.size}",
                     f"{g.kind}.texture={g.texture}", f"{g.kind}.count={count}",
                     f"object_colour={g.colour}", f"object_size={g.size}",
                     f"object_texture={g.texture}", f"object_count={count}"):
            y[_INDEX[name]] = 1.0
    y[_INDEX[f"background={scene.background}"]] = 1.0
    y[_INDEX[f"background_colour={scene.background_colour}"]] = 1.0
    return y


def label_families() -> dict[str, list[int]]:
    """Label family (kind, colour, size, texture, count, object_*, background, …) -> its indices."""
    families: dict[str, list[int]] = {}
    for i, name in enumerate(label_names()):
        families.setdefault(name.split("=")[0].split(".")[-1], []).append(i)
    return families


def pretraining_scene(world: SceneSettings, index: int):
    """Scene ``index`` of the pretraining stream (never one of the corpora's images)."""
    from pseudopairs.world.scene import image_rng, sample_scene

    corpus = CORPORA[index % len(CORPORA)]
    return sample_scene(image_rng(world.seed, "pretrain", "train", index, f"scene.{corpus}"),
                        corpus=corpus, image_size=world.image_size, max_groups=world.max_groups,
                        max_count=world.max_count, max_objects=world.max_objects)


def render_scenes(world: SceneSettings, start: int, stop: int, *, resize: int, crop: int):
    """uint8 images (n, 3, crop, crop), preprocessed like the ``features`` step's, and labels
    (n, labels) of pretraining scenes ``start .. stop-1``."""
    import torch

    from pseudopairs.features.network import preprocess
    from pseudopairs.world.render import render_scene

    images, labels = [], []
    for index in range(start, stop):
        scene = pretraining_scene(world, index)
        images.append(preprocess(render_scene(scene, image_size=world.image_size), resize=resize, crop=crop))
        labels.append(scene_labels(scene))
    return torch.stack(images), torch.from_numpy(np.stack(labels))


def exact_match_rates(predicted, truth) -> dict[str, float]:
    """Per label family: the share of scenes whose every label of the family is predicted right."""
    return {family: float((predicted[:, idx] == truth[:, idx]).all(1).float().mean())
            for family, idx in label_families().items()}


def pretrain(*, world: SceneSettings, settings: FeaturePretrainingSettings, features: FeatureSettings,
             output: str | Path) -> dict:
    """Train ``features.arch`` on rendered scenes; write its state dict without its classifier to
    ``output`` (atomically) and a JSON report beside it (``output`` + ``.json``). Returns the report."""
    import torch

    from pseudopairs.features.backbones import classifier_name, embedding_dim, replace_module
    from pseudopairs.features.network import normalize_batch, torchvision_resnet

    torch.set_num_threads(settings.threads)
    start = time.perf_counter()
    images, labels = render_scenes(world, 0, settings.images + settings.held_out,
                                   resize=features.resize, crop=features.crop)
    render_s = time.perf_counter() - start
    train_x, train_y = images[:settings.images], labels[:settings.images]
    test_x, test_y = images[settings.images:], labels[settings.images:]
    per_epoch = settings.images // settings.batch_size

    losses: list[float] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = torchvision_resnet(features.arch)
        head = classifier_name(model)  # fc of a ResNet: replaced by the scenes' labels
        replace_module(model, head, torch.nn.Linear(embedding_dim(model), labels.shape[1]))
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=settings.learning_rate, total_steps=settings.epochs * per_epoch, pct_start=0.15)
        generator = torch.Generator().manual_seed(settings.seed)
        model.train()
        for epoch in range(settings.epochs):
            order = torch.randperm(settings.images, generator=generator)
            for b in range(per_epoch):
                rows = order[b * settings.batch_size:(b + 1) * settings.batch_size]
                x = normalize_batch(train_x[rows]).contiguous(memory_format=torch.channels_last)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), train_y[rows])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                losses.append(loss.item())
            log.info("epoch %d/%d: mean loss %.4f (%.0f s)", epoch + 1, settings.epochs,
                     float(np.mean(losses[-per_epoch:])), time.perf_counter() - start)
    model.eval()
    with torch.inference_mode():
        logits = torch.cat([model(normalize_batch(test_x[i:i + 256])) for i in range(0, len(test_x), 256)])
    report = {
        "arch": features.arch, "settings": asdict(settings), "labels": len(_INDEX),
        "updates": settings.epochs * per_epoch,
        "render_seconds": round(render_s, 1),
        "train_seconds": round(time.perf_counter() - start - render_s, 1),
        "final_train_loss": float(np.mean(losses[-50:])),
        "held_out_exact_match": exact_match_rates(logits > 0, test_y > 0.5),
    }
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(head + ".")}
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(output) as tmp:
        torch.save(state, tmp)
    write_text_atomic(output.with_name(output.name + ".json"), json.dumps(report, indent=2) + "\n")
    log.info("wrote %s; held-out exact match %s", output, report["held_out_exact_match"])
    return report


def _cmd_pretrain(args: argparse.Namespace) -> int:
    report = pretrain(world=SceneSettings.from_dict(args.world),
                      settings=FeaturePretrainingSettings.from_dict(args.settings),
                      features=FeatureSettings.from_dict(args.features), output=args.output)
    print(json.dumps(report["held_out_exact_match"]))
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "pretrain-features", _cmd_pretrain,
        description="Train features.arch on freshly rendered world scenes to name what they show; "
                    "write its state dict (for features.weights) and a JSON report beside it.")
    commands.add_json(p, "--world", "the world config section's scene keys (seed, image_size, max_*)")
    commands.add_json(p, "--settings", "the feature_pretraining config section")
    commands.add_json(p, "--features", "the features config section (arch, resize, crop)")
    p.add_argument("--output", required=True, help="state dict to write (.pt); the report goes to OUTPUT.json")
