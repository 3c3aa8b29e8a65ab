"""Image backbones by name (pseudopairs.features.backbones; config/README.md): any torchvision
classification model with random weights on a few small images, its pooled embedding, the size
recorded in the features file and checked by the model and evaluation steps, torchvision weights
from the hub cache only, and a missing weights file refused before any job."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from PIL import Image

from pseudopairs.features import backbones
from pseudopairs.features import extract as F
from pseudopairs.features import network as N
from pseudopairs.features.settings import FeatureSettings
from pseudopairs.core.io import check_feature_files, feature_backbone, load_features, save_features

torch.set_num_threads(1)


def images(directory, count: int, *, size: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        path = directory / f"{i}.png"
        Image.fromarray((rng.random((size, size + 7, 3)) * 255).astype(np.uint8)).save(path)
        rows.append((f"img{i}", str(path)))
    return pd.DataFrame(rows, columns=["image_id", "path"])


def settings(**overrides) -> FeatureSettings:
    base = dict(resize=36, crop=32, dtype="float32", format="npz", batch_size=2, workers=0,
                device="cpu", shard_size=8)
    return FeatureSettings(**{**base, **overrides})


def by_hand(arch: str, head, paths, *, seed: int, resize: int, crop: int) -> np.ndarray:
    """The reference: torchvision's builder after torch.manual_seed(seed), the classifier removed
    by hand (``head(model)``), torchvision's standard transforms, one image at a time."""
    from torchvision import transforms

    torch.manual_seed(seed)
    model = getattr(torchvision.models, arch)(weights=None)
    head(model)
    model.eval()
    transform = transforms.Compose([
        transforms.Resize(resize), transforms.CenterCrop(crop), transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    with torch.inference_mode():
        return np.stack([model(transform(Image.open(p).convert("RGB")).unsqueeze(0))[0].numpy()
                         for p in paths])


def _strip(path: str):
    def head(model):
        backbones.replace_module(model, path, torch.nn.Identity())
    return head


def test_the_pooled_embedding_of_each_family_has_its_published_size():
    """ResNet avgpool 2,048, ViT-B/16 class token 768, ConvNeXt-Base 1,024 (config/README.md; sizes read
    from the models, built on the meta device: no weights are made)."""
    assert backbones.feature_dim("resnet50") == 2048
    assert backbones.feature_dim("resnet152") == 2048
    assert backbones.feature_dim("vit_b_16") == 768
    assert backbones.feature_dim("convnext_base") == 1024
    assert backbones.feature_dim("resnet18") == 512
    assert backbones.feature_dim("regnet_x_400mf") == 400          # a builder the meta device refuses
    assert backbones.fixed_input_size("vit_b_16") == 224 and backbones.fixed_input_size("resnet50") is None
    assert N.FEATURE_DIMS["efficientnet_b0"] == 1280
    model = torchvision.models.convnext_base()
    assert backbones.classifier_name(model) == "classifier.2"
    assert backbones.classifier_name(torchvision.models.vit_b_16()) == "heads.head"


@pytest.mark.parametrize("arch, head, crop", [
    ("mobilenet_v3_small", "classifier.3", 32),
    ("convnext_tiny", "classifier.2", 32),
    ("vit_b_32", "heads.head", 224),
])
def test_random_weight_features_of_other_families_equal_torchvisions_by_hand(tmp_path, arch, head, crop):
    frame = images(tmp_path / "img", 3, size=crop + 6)
    resize = crop + 4
    result = F.extract_features(frame, settings=settings(arch=arch, resize=resize, crop=crop, seed=5),
                                progress=False)
    dim = backbones.feature_dim(arch)
    assert result.features.shape == (3, dim)
    expected = by_hand(arch, _strip(head), frame["path"], seed=5, resize=resize, crop=crop)
    assert expected.shape == (3, dim)
    np.testing.assert_allclose(result.features, expected, rtol=1e-4, atol=1e-4)


def test_the_features_file_records_its_network_and_a_local_state_dict_of_another_family_is_used(tmp_path):
    """A convnext_tiny state dict of our own (its classifier included: ignored) is the features'
    network; the features file records arch, size and weights."""
    torch.manual_seed(21)
    model = torchvision.models.convnext_tiny()
    weights = tmp_path / "convnext_tiny.pt"
    torch.save(model.state_dict(), weights)
    frame = images(tmp_path / "img", 2)
    frame.to_parquet(tmp_path / "list.parquet", index=False)
    out = tmp_path / "features.npz"
    F.run_features(tmp_path / "list.parquet", out, tmp_path / "skipped.tsv", progress=False,
                   settings=settings(arch="convnext_tiny", weights=str(weights)))
    ids, feats = load_features(out)

    def trained(m):
        m.load_state_dict(model.state_dict())
        m.classifier[2] = torch.nn.Identity()

    np.testing.assert_allclose(feats, by_hand("convnext_tiny", trained, frame["path"], seed=0, resize=36,
                                              crop=32), rtol=1e-4, atol=1e-4)
    record = feature_backbone(out)
    assert record == {"arch": "convnext_tiny", "dim": 768, "weights": str(weights), "resize": 36, "crop": 32}
    # a state dict of another family is refused, naming the file and the model
    with pytest.raises(ValueError, match=rf"features\.weights: {weights} is not a torchvision resnet18 state dict"):
        N.build_model(str(weights), arch="resnet18")


def test_torchvision_weights_of_any_model_come_from_the_hub_cache_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "hub-home"))
    monkeypatch.setattr(torch.hub, "download_url_to_file",
                        lambda url, *a, **k: pytest.fail(f"a download was attempted: {url}"))
    path = N.weights_checkpoint_path("IMAGENET1K_V1", "mobilenet_v3_small")
    url = torchvision.models.MobileNet_V3_Small_Weights.IMAGENET1K_V1.url
    assert path == tmp_path / "hub-home" / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    frame = images(tmp_path / "img", 2)
    chosen = settings(arch="mobilenet_v3_small", weights="IMAGENET1K_V1")
    with pytest.raises(FileNotFoundError, match=r"MobileNet_V3_Small_Weights\.IMAGENET1K_V1 is not in the "
                                                rf"torch hub cache \({path}\)"):
        F.extract_features(frame, settings=chosen, progress=False)
    torch.manual_seed(2)
    model = torchvision.models.mobilenet_v3_small()
    path.parent.mkdir(parents=True)
    torch.save(model.state_dict(), path)
    monkeypatch.setattr(backbones, "verify_hub_file", lambda p: None)  # our file, not torchvision's
    result = F.extract_features(frame, settings=chosen, progress=False)

    def cached(m):
        m.load_state_dict(model.state_dict())
        m.classifier[3] = torch.nn.Identity()

    np.testing.assert_allclose(result.features, by_hand("mobilenet_v3_small", cached, frame["path"], seed=0,
                                                        resize=36, crop=32), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("values, message", [
    (dict(arch="resnet_huge"), "config key 'features.arch': 'resnet_huge' is not a torchvision "
                               "classification model"),
    (dict(arch="squeezenet1_1"), "config key 'features.arch': 'squeezenet1_1' has no linear classifier"),
    (dict(arch="vit_b_16", crop=112, resize=128), "config key 'features.crop': vit_b_16 takes 224 x 224 "
                                                  "inputs only"),
    (dict(arch="convnext_base", weights="IMAGENET1K_V2"), "config key 'features.weights': 'IMAGENET1K_V2': "
                                                         "torchvision's ConvNeXt_Base_Weights has no "
                                                         "IMAGENET1K_V2 (it has IMAGENET1K_V1, or DEFAULT)"),
])
def test_a_backbone_torchvision_lacks_is_refused_at_parse_time_naming_the_key(values, message):
    errors = FeatureSettings.config_errors(values)
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert FeatureSettings.config_errors(dict(arch="vit_b_16", crop=224, resize=256, weights="DEFAULT")) == []


def test_the_model_stage_checks_the_recorded_size(tmp_path):
    a, b, c = tmp_path / "a.npz", tmp_path / "b.npz", tmp_path / "c.parquet"
    save_features(a, image_ids=["x"], features=np.ones((1, 4), np.float32),
                  backbone={"arch": "resnet50", "dim": 4, "weights": "imagenet"})
    save_features(b, image_ids=["y"], features=np.ones((1, 4), np.float32),
                  backbone={"arch": "vit_b_16", "dim": 4, "weights": "IMAGENET1K_V1"})
    save_features(c, image_ids=["z"], features=np.ones((1, 6), np.float32),
                  backbone={"arch": "convnext_base", "dim": 6, "weights": "none"})
    assert feature_backbone(c)["arch"] == "convnext_base"                   # Parquet: in its attrs
    assert check_feature_files({a: 4})["arch"] == "resnet50"
    with pytest.raises(ValueError, match=rf"different networks in one step \({a}: 4-d resnet50 \(imagenet\); "
                                         rf"{b}: 4-d vit_b_16"):
        check_feature_files({a: 4, b: 4})
    with pytest.raises(ValueError, match=rf"{a}: 4-d resnet50 \(imagenet\); {c}: 6-d convnext_base"):
        check_feature_files({a: 4, c: 6})
    with pytest.raises(ValueError, match=rf"{a}: recorded as 4-d resnet50 \(imagenet\) features but holds 5 columns"):
        check_feature_files({a: 5})
    with pytest.raises(ValueError, match=rf"ckpt.pt takes 2048-d image features, but {c} holds 6-d convnext_base"):
        check_feature_files({c: 6}, image_dim=2048, model="ckpt.pt")
    with pytest.raises(ValueError, match="records dim 3 but the features have 4 columns"):
        save_features(tmp_path / "d.npz", image_ids=["x"], features=np.ones((1, 4)), backbone={"arch": "r", "dim": 3})
    old = tmp_path / "old.npz"  # a file from before the record: its columns are its size
    save_features(old, image_ids=["x"], features=np.ones((1, 4), np.float32))
    assert feature_backbone(old) is None and check_feature_files({old: 4, a: 4})["arch"] == "resnet50"


def test_a_missing_weights_file_stops_the_dry_run_naming_it(tmp_path):
    """Before any job, a dry run included: a state dict path no rule writes, and torchvision
    weights the torch hub cache lacks, each in one line naming the file and the config key."""
    import os
    import subprocess
    import sys

    from conftest import REPO, paper_dry_run, run_snakemake, snakemake_exe

    absent = tmp_path / "weights" / "mine.pt"
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"features: {{weights: {absent}}}\n")
    result = run_snakemake(tmp_path, "-n", "--cores", "1", "results/features/coco/val.npz", "--configfile", str(mine))
    lines = [line.strip() for line in (result.stdout + result.stderr).splitlines() if str(absent) in line]
    assert result.returncode != 0 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"config key 'features.weights': {absent}: no such state dict file"), lines
    # one line, once: not inside Snakemake's InputFunctionException traceback
    for noise in ("InputFunctionException", "Traceback", "WorkflowError", "Wildcards:"):
        assert noise not in result.stdout + result.stderr, (result.stdout + result.stderr)[-2000:]

    empty = tmp_path / "empty-torch-home"
    empty.mkdir()
    work = tmp_path / "paper"
    work.mkdir()
    (work / "flickr30k").mkdir()
    site = work / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {work / 'flickr30k'}}}\n"
                    "features: {arch: vit_b_16, weights: IMAGENET1K_V1, resize: 256, crop: 224}\n")
    env = {**os.environ, "TORCH_HOME": str(empty),
           "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run([snakemake_exe(), "-s", str(REPO / "Snakefile"), "-d", str(work), "-n", "--cores", "1",
                             "results/features/coco/val.npz", "--configfile", str(REPO / "config" / "paper.yaml"),
                             str(site)], capture_output=True, text=True, timeout=600, env=env)
    cached = empty / "hub" / "checkpoints" / "vit_b_16-c867db91.pth"
    lines = [line.strip() for line in (result.stdout + result.stderr).splitlines() if str(cached) in line]
    assert result.returncode != 0 and len(lines) == 1, (result.stdout + result.stderr)[-3000:]
    assert lines[0].startswith("config key 'features.weights': IMAGENET1K_V1: the features job of coco val needs "
                               "the vit_b_16 weights ViT_B_16_Weights.IMAGENET1K_V1, which are not in the torch "
                               f"hub cache ({cached}; TORCH_HOME={empty})"), lines
    assert not (work / "results" / "features").exists()
    # with the file in the cache the plan goes through (the shipped paper configuration's too)
    (tmp_path / "ok").mkdir()
    assert paper_dry_run(tmp_path / "ok", "results/features/coco/val.npz").returncode == 0


def test_training_refuses_features_of_another_network_than_its_source_or_its_other_files(tmp_path):
    """Training reads the records: a fine-tuning source trained on 24-d features refuses 32-d
    ones, and two corpora's features from different networks are refused, naming both files."""
    import copy as _copy

    from conftest import run_settings
    from test_training import SETTINGS, _world

    from pseudopairs.model import training

    spec, _ = _world(tmp_path / "world")
    source = training.train(spec=spec, settings=run_settings(SETTINGS), out_dir=tmp_path / "source", seed=1)
    assert source is not None
    ids, feats = load_features(spec["c2i"][0]["features"])
    wide = tmp_path / "wide.npz"
    save_features(wide, image_ids=ids, features=np.concatenate([feats, feats[:, :8]], axis=1),
                  backbone={"arch": "vit_b_16", "dim": 32, "weights": "IMAGENET1K_V1"})
    val_ids, val_feats = load_features(spec["validation"]["features"])
    wide_val = tmp_path / "wide_val.npz"
    save_features(wide_val, image_ids=val_ids, features=np.concatenate([val_feats, val_feats[:, :8]], axis=1),
                  backbone={"arch": "vit_b_16", "dim": 32, "weights": "IMAGENET1K_V1"})
    tuned = _copy.deepcopy(spec)
    for ref in tuned["c2i"] + [side for pair in tuned["c2c"] for side in (pair["a"], pair["b"])]:
        ref["features"] = str(wide)
    tuned["validation"]["features"] = str(wide_val)
    tuned["init_from"] = str(tmp_path / "source" / "checkpoint.pt")
    with pytest.raises(ValueError, match=r"init_from .*checkpoint\.pt was trained on 24-d image features; this "
                                         r"run's features are 32-d"):
        training.train(spec=tuned, settings=run_settings(SETTINGS), out_dir=tmp_path / "tuned", seed=1)
    mixed = _copy.deepcopy(spec)
    save_features(tmp_path / "r.npz", image_ids=ids, features=feats,
                  backbone={"arch": "resnet50", "dim": 24, "weights": "imagenet"})
    save_features(tmp_path / "c.npz", image_ids=val_ids, features=val_feats,
                  backbone={"arch": "convnext_tiny", "dim": 24, "weights": "none"})
    mixed["c2i"][0]["features"] = mixed["c2i"][1]["features"] = str(tmp_path / "r.npz")
    mixed["validation"]["features"] = str(tmp_path / "c.npz")
    with pytest.raises(ValueError, match=r"image features of different networks in one step \(.*r\.npz: 24-d "
                                         r"resnet50 \(imagenet\); .*c\.npz: 24-d convnext_tiny \(none\)\)"):
        training.train(spec=mixed, settings=run_settings(SETTINGS), out_dir=tmp_path / "mixed", seed=1)
