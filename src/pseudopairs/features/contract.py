"""The features stage's contract: :func:`check` of the ``features`` and ``feature_pretraining``
sections (by the settings classes the steps read; ``features.weights`` naming the demo's
pretrained extractor), the ``pretrain-features`` job's settings, and the features jobs' weights:
the file they read (an input, or a file in the torch hub cache) and the refusal, before any job
runs, when it is missing."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from pseudopairs.core import layout
from pseudopairs.features.pretraining import FeaturePretrainingSettings
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.world.settings import SceneSettings


def feature_settings(config: dict) -> FeatureSettings:
    """The ``features`` section, typed."""
    return FeatureSettings.from_dict(config["features"])


def job_threads(config: dict) -> int:
    """Cores a features job asks for: its decoding workers and its forward threads (null: the
    one core the workers leave)."""
    settings = feature_settings(config)
    return settings.workers + (settings.threads or 1)


def pretraining_settings(config: dict) -> dict:
    """The ``feature_pretraining`` section with the step's defaults filled in."""
    return asdict(FeaturePretrainingSettings.from_dict(config.get("feature_pretraining", {})))


def world_scene_settings(config: dict) -> dict:
    """The world keys that scenes depend on (not the corpora's sizes): pretraining reruns only
    when they change."""
    return SceneSettings.of_world(config["world"])


def pretrained_weights_errors(config: dict) -> list[str]:
    """features.weights naming the demo's pretrained extractor (rule pretrain_features) needs the
    demo world (its scenes) and a matching features.arch."""
    weights = (config.get("features") or {}).get("weights")
    arch = (config.get("features") or {}).get("arch", "resnet50")
    folder = layout.pretrained_features("ARCH").rsplit("/", 1)[0] + "/"
    if not isinstance(weights, str) or not weights.startswith(folder):
        return []
    if (config.get("data") or {}).get("source") != "world":
        return [f"config key 'features.weights': {weights} is written by rule pretrain_features, "
                f"which trains on the demo world's scenes; with data.source "
                f"{(config.get('data') or {}).get('source')!r} give 'imagenet' or a state dict of your own"]
    if weights != layout.pretrained_features(arch):
        return [f"config key 'features.weights': {weights} does not match features.arch {arch!r}; "
                f"rule pretrain_features writes {layout.pretrained_features(arch)}"]
    return []


def is_pretrained_output(config: dict, weights: str) -> bool:
    """Whether ``weights`` is the file rule pretrain_features writes (the demo's extractor)."""
    return (config.get("data") or {}).get("source") == "world" and weights == layout.pretrained_features(
        (config.get("features") or {}).get("arch", "resnet50"))


def weights_inputs(config: dict) -> list[str]:
    """The features jobs' weights input: a state dict named by features.weights (new weights, new
    features; the demo's pretrained extractor is built by rule pretrain_features); nothing for
    ``none`` and for torchvision weights, read from the torch hub cache (not a workflow file)."""
    from pseudopairs.features.backbones import is_enum_weights

    weights = config["features"]["weights"]
    return [] if weights == "none" or is_enum_weights(weights) else [weights]


def weights_file(config: dict) -> Path | None:
    """The file the features jobs load weights from: the hub cache's file of torchvision weights,
    the state dict path, or None (``none``). Imports torch only for torchvision weights."""
    from pseudopairs.features.backbones import is_enum_weights

    features = config["features"]
    if features["weights"] == "none":
        return None
    if is_enum_weights(features["weights"]):
        from pseudopairs.features.network import weights_checkpoint_path

        return weights_checkpoint_path(features["weights"], features.get("arch", "resnet50"))
    return Path(features["weights"])


def _missing_message(config: dict, path: Path, jobs: str, *, one: bool) -> str:
    need = "needs" if one else "need"
    features = config["features"]
    weights = features["weights"]
    if weights == path.as_posix() or Path(weights) == path:
        return (f"config key 'features.weights': {path}: no such state dict file, and no rule writes "
                f"it; {jobs} {need} it. Give the path of a state dict of a torchvision "
                f"{features.get('arch', 'resnet50')}, 'none' or torchvision weights (imagenet)")
    from pseudopairs.features.backbones import hub_checkpoint_sketch

    arch = features.get("arch", "resnet50")
    entry = hub_checkpoint_sketch(arch, weights)
    return (f"config key 'features.weights': {weights}: {jobs} {need} the {arch} weights "
            f"{entry}, which are not in the torch hub cache ({path}; TORCH_HOME="
            f"{os.environ.get('TORCH_HOME', '(unset)')}): set TORCH_HOME to a cache that holds "
            f"{path.name} on every node, or fetch it once with network access "
            f"(torchvision.models.get_model({arch!r}, weights={entry.split('.')[-1]!r}))")


def missing_weights(config: dict, corpus: str, split: str) -> str | None:
    """Why the features job of ``corpus``/``split`` cannot run for want of its weights file, when
    that job is bound to run (its output does not exist) -- checked while Snakemake builds the DAG,
    so a dry run says it too; None otherwise. A file some rule writes (the demo's extractor) is
    the DAG's business."""
    weights = config["features"]["weights"]
    if weights == "none" or is_pretrained_output(config, weights):
        return None
    output = layout.features(corpus, split, config["features"]["format"])
    if Path(output).exists():
        return None  # whether it reruns is known after the DAG: needrun_weights_problem
    try:
        path = weights_file(config)
    except ImportError:  # a Snakemake without torch (--sdm conda/apptainer): the jobs say it
        return None
    if path is None or path.is_file():
        return None
    return _missing_message(config, path, f"the features job of {corpus} {split}", one=True)


def needrun_weights_problem(config: dict, n_jobs: int) -> str | None:
    """At the start of a run with ``n_jobs`` features jobs to run: why they cannot (the weights
    file is missing), in one line naming the file (and TORCH_HOME for torchvision weights), before
    any is submitted, instead of failing (and retrying) each of them; None when they can."""
    weights = config["features"]["weights"]
    if not n_jobs or weights == "none" or is_pretrained_output(config, weights):
        return None
    try:
        path = weights_file(config)
    except ImportError:
        return None
    if path is None or path.is_file():
        return None
    return _missing_message(config, path, f"{n_jobs} features job(s)", one=n_jobs == 1)


def check(config: dict) -> list[str]:
    return (pretrained_weights_errors(config) + FeatureSettings.config_errors(config.get("features"))
            + FeaturePretrainingSettings.config_errors(config.get("feature_pretraining")))
