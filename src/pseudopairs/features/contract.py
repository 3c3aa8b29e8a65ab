"""The features stage's contract: :func:`check` of the ``features`` and ``feature_pretraining``
sections (by the settings classes the steps read; ``features.weights`` naming the demo's
pretrained extractor), and the ``pretrain-features`` job's settings."""

from __future__ import annotations

from dataclasses import asdict

from pseudopairs import layout
from pseudopairs.features.pretraining import PretrainSettings
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.world.settings import SceneSettings


def pretraining_settings(config: dict) -> dict:
    """The ``feature_pretraining`` section with the step's defaults filled in."""
    return asdict(PretrainSettings.from_dict(config.get("feature_pretraining", {})))


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


def check(config: dict) -> list[str]:
    return (pretrained_weights_errors(config) + FeatureSettings.config_errors(config.get("features"))
            + PretrainSettings.config_errors(config.get("feature_pretraining")))
