"""The demo world's feature extractor (pseudopairs.features.pretraining): labels of a scene, a
state dict the features step loads, determinism, the config checks around features.weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import REPO
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.features import pretraining as P
from pseudopairs.features.network import FEATURE_DIMS, build_model
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.core.settings import SettingsError
from pseudopairs.world.scene import Scene
from pseudopairs.world.settings import SceneSettings

torch.set_num_threads(1)

WORLD = SceneSettings.from_dict({"seed": 3, "image_size": 32})
FEATURES = FeatureSettings.from_dict({"arch": "resnet18", "resize": 32, "crop": 32})


def test_labels_name_what_the_scene_shows():
    scene = P.pretraining_scene(WORLD, 0)
    assert isinstance(scene, Scene)
    names = {n for n, v in zip(P.label_names(), P.scene_labels(scene)) if v}
    expected = {f"background={scene.background}", f"background_colour={scene.background_colour}"}
    for g in scene.groups:
        count = min(g.count, 3)
        expected |= {f"kind={g.kind}", f"{g.kind}.colour={g.colour}", f"{g.kind}.size={g.size}",
                     f"{g.kind}.texture={g.texture}", f"{g.kind}.count={count}",
                     f"object_colour={g.colour}", f"object_size={g.size}",
                     f"object_texture={g.texture}", f"object_count={count}"}
    assert names == expected
    assert len(set(P.label_names())) == len(P.label_names())
    # scenes alternate between the two corpora's distributions and are not the corpora's images
    assert P.pretraining_scene(WORLD, 0) == scene and P.pretraining_scene(WORLD, 1) != scene


def test_exact_match_rates_per_family():
    families = P.label_families()
    truth = torch.zeros(2, len(P.label_names()), dtype=torch.bool)
    predicted = truth.clone()
    predicted[0, families["kind"][0]] = True     # scene 0: one kind wrong
    rates = P.exact_match_rates(predicted, truth)
    assert rates["kind"] == 0.5 and rates["colour"] == 1.0 and rates["background"] == 1.0


def test_pretraining_writes_a_state_dict_the_features_step_loads(tmp_path):
    settings = P.FeaturePretrainingSettings.from_dict({"images": 8, "held_out": 4, "epochs": 1, "batch_size": 4,
                                             "learning_rate": 1e-3, "threads": 1})
    out = tmp_path / "w" / "resnet18.pt"
    report = P.pretrain(world=WORLD, settings=settings, features=FEATURES, output=out)
    assert report["updates"] == 2 and np.isfinite(report["final_train_loss"])
    assert set(report["held_out_exact_match"]) == set(P.label_families())
    assert json.loads((tmp_path / "w" / "resnet18.pt.json").read_text())["arch"] == "resnet18"
    assert sorted(p.name for p in out.parent.iterdir()) == ["resnet18.pt", "resnet18.pt.json"]
    state = torch.load(out, weights_only=True)
    assert state and not any(k.startswith("fc.") for k in state)
    model = build_model(str(out), arch="resnet18")
    with torch.inference_mode():
        assert model(torch.zeros(1, 3, 32, 32)).shape == (1, FEATURE_DIMS["resnet18"])
    # the pretrained weights are what the features step uses, not a fresh initialisation
    assert torch.equal(model.state_dict()["conv1.weight"], state["conv1.weight"])
    assert not torch.equal(build_model("none", arch="resnet18").state_dict()["conv1.weight"], state["conv1.weight"])
    # a pure function of the settings
    P.pretrain(world=WORLD, settings=settings, features=FEATURES, output=tmp_path / "again.pt")
    again = torch.load(tmp_path / "again.pt", weights_only=True)
    assert all(torch.equal(state[k], again[k]) for k in state)
    # a resnet50 cannot read a resnet18 state dict: the error names the key and the arch
    with pytest.raises(ValueError, match=r"features.weights: .* is not a torchvision resnet50 state dict"):
        build_model(str(out), arch="resnet50")


def test_settings_are_checked_by_key():
    with pytest.raises(SettingsError, match=r"feature_pretraining.batch_size: must not exceed"):
        P.FeaturePretrainingSettings.from_dict({"images": 4, "batch_size": 8})
    with pytest.raises(SettingsError, match=r"feature_pretraining: unknown setting\(s\) feature_pretraining.arch"):
        P.FeaturePretrainingSettings.from_dict({"arch": "resnet18"})   # the arch is features.arch
    with pytest.raises(SettingsError, match=r"world.max_objects: must be ≥ world.max_groups"):
        SceneSettings.from_dict({"seed": 1, "max_groups": 3, "max_objects": 2})
    assert SceneSettings.of_world({"seed": 1, "image_size": 64, "images": {}, "parallel": {}}) == {
        "seed": 1, "image_size": 64}


def _demo():
    return load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")


def test_the_demo_uses_the_pretrained_extractor_and_the_checks_guard_it():
    config = check_config(_demo())
    assert config["features"]["weights"] == "results/features/pretrained/resnet18.pt"
    assert config["features"]["arch"] == "resnet18"
    other = _demo()
    other["features"]["arch"] = "resnet50"
    with pytest.raises(ConfigError, match=r"features.weights.*does not match features.arch 'resnet50'; "
                                          r"rule pretrain_features writes results/features/pretrained/resnet50.pt"):
        check_config(other)
    real = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                       REPO / "config" / "paper.yaml")
    real["features"]["weights"] = "results/features/pretrained/resnet50.pt"
    with pytest.raises(ConfigError, match=r"written by rule pretrain_features, which trains on the demo world"):
        check_config(real)
