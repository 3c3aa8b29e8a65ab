"""Training: determinism, resume equality, early stopping, NaN handling, fine-tuning, CLI, and a
small run that learns."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from conftest import run_settings
import torch

import pseudopairs.model.training as training
from pseudopairs.model import checkpoints, encode, updates
from pseudopairs.core.io import CAPTION_COLUMNS, save_features, write_json_atomic
from pseudopairs.data.vocab import build_vocabulary

torch.set_num_threads(1)

COLOURS = {"en": ["red", "blue", "green", "yellow", "white", "black"],
           "de": ["rot", "blau", "gruen", "gelb", "weiss", "schwarz"]}
SHAPES = {"en": ["ball", "box", "cup", "star", "ring"],
          "de": ["kugel", "kiste", "tasse", "stern", "ring"]}
TEMPLATES = {"en": ["a {c} {s}", "the {c} {s}", "one {c} {s} here", "a {s} that is {c}", "{c} {s}"],
             "de": ["ein {c} {s}", "der {s} ist {c}", "{c} {s}", "hier ein {c} {s}", "das {c} {s}"]}
FEATURE_DIM = 24


def _world(root, *, n_train=60, n_val=40, seed=0):
    """A tiny learnable world: an image is a (colour, shape) pair; its features are the sum of a
    random vector per colour and per shape plus noise; 5 En + 5 De captions name both."""
    rng = np.random.default_rng(seed)
    colour_vec = rng.normal(size=(6, FEATURE_DIM))
    shape_vec = rng.normal(size=(5, FEATURE_DIM))
    paths = {}
    for split, n in (("train", n_train), ("val", n_val)):
        rows, ids, feats = [], [], []
        for k in range(n):
            c, s = int(rng.integers(6)), int(rng.integers(5))
            image_id = f"{split}{k:03d}"
            ids.append(image_id)
            feats.append(colour_vec[c] + shape_vec[s] + 0.1 * rng.normal(size=FEATURE_DIM))
            for lang in ("en", "de"):
                for j, template in enumerate(TEMPLATES[lang]):
                    text = template.format(c=COLOURS[lang][c], s=SHAPES[lang][s])
                    rows.append(("m30k", split, image_id, lang, j, text, text))
        captions = root / "captions" / f"{split}.parquet"
        captions.parent.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame(rows, columns=CAPTION_COLUMNS)
        frame.to_parquet(captions, index=False)
        features = root / "features" / f"{split}.npz"
        save_features(features, image_ids=ids, features=np.asarray(feats, dtype=np.float16))
        paths[split] = (str(captions), str(features))
        if split == "train":
            vocab = build_vocabulary(frame["text"], min_count=1)
            write_json_atomic(root / "vocab.json", vocab.to_json())
    train_caps, train_feats = paths["train"]
    val_caps, val_feats = paths["val"]

    def ref(lang):
        return {"name": f"m30k.{lang}", "captions": train_caps, "features": train_feats, "lang": lang}

    spec = {"experiment": "en_de_c2c", "c2i": [ref("en"), ref("de")],
            "c2c": [{"name": "m30k.en+m30k.de", "a": ref("en"), "b": ref("de")}],
            "validation": {"captions": val_caps, "features": val_feats, "langs": ["en", "de"]},
            "vocab": {"path": str(root / "vocab.json")}, "init_from": None}
    return spec, str(root / "vocab.json")


SETTINGS = {"batch_size": 16, "learning_rate": 5e-3, "grad_clip": 2.0, "margin": 0.2,
            "max_violation": True, "c2c_probability": 0.5, "validate_every": 10, "patience": 100,
            "max_updates": 30, "device": "cpu", "threads": 1, "embedding_dim": 12, "joint_dim": 24,
            "image_normalization": "raw"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return _world(tmp_path_factory.mktemp("world"))


def _run(world, out_dir, *, seed=1, **overrides):
    spec, vocab = world
    return training.train(spec=spec, settings=run_settings({**SETTINGS, **overrides}), out_dir=out_dir, seed=seed)


def _weights(out_dir):
    return torch.load(out_dir / "checkpoint.pt", weights_only=True)["model_state"]


def _same_weights(w1, w2):
    return w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)


class _Killed(Exception):
    pass


def _count_updates(monkeypatch, *, fail_at=None, exc=_Killed, module=updates, name="train_update"):
    """Wrap ``module.name`` (default updates.train_update): count calls, raise ``exc`` at call
    ``fail_at``."""
    calls = {"n": 0}
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if fail_at is not None and calls["n"] == fail_at:
            raise exc("simulated kill")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


# --------------------------------------------------------------------------------------------


def test_training_writes_checkpoint_and_log(world, tmp_path):
    summary = _run(world, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "train_log.csv", "vocab.json"]
    frame = pd.read_csv(tmp_path / "train_log.csv")
    assert list(frame.columns) == ["update", "task", "dataset", "loss", "val_score"]
    assert frame["update"].tolist() == list(range(1, 31))
    assert set(frame["task"]) == {"c2i", "c2c"}
    assert set(frame["dataset"]) == {"m30k.en", "m30k.de", "m30k.en+m30k.de"}
    assert (frame["task"] == "c2c").eq(frame["dataset"] == "m30k.en+m30k.de").all()
    assert frame.loc[frame["val_score"].notna(), "update"].tolist() == [10, 20, 30]
    assert np.isfinite(frame["loss"]).all() and (frame["loss"] >= 0).all()
    model, meta = checkpoints.load_model(tmp_path / "checkpoint.pt")
    assert meta["best_score"] == summary["best_score"] == frame["val_score"].max()
    assert meta["update"] == summary["best_update"]
    assert meta["val_score"] == meta["best_score"]
    assert set(meta["val_metrics"]) == {"en", "de"}
    assert meta["best_score"] == pytest.approx(meta["val_metrics"]["en"]["rsum"] + meta["val_metrics"]["de"]["rsum"])
    assert (meta["embedding_dim"], meta["joint_dim"], meta["image_dim"]) == (12, 24, FEATURE_DIM)
    assert meta["spec"]["experiment"] == "en_de_c2c"
    # The encoders used by evaluation reproduce the validation score of the checkpoint.
    from pseudopairs.evaluation import retrieval_metrics
    from pseudopairs.core.io import load_features, read_captions
    from pseudopairs.data.vocab import Vocabulary
    spec, vocab_path = world
    ids, feats = load_features(spec["validation"]["features"])
    images = encode.encode_image_features(model, feats)
    captions = read_captions(spec["validation"]["captions"], lang="de")
    texts = encode.encode_captions_texts(model, Vocabulary.load(vocab_path), captions["text"].tolist(),
                                           batch_size=7)
    assert torch.allclose(texts.norm(dim=1), torch.ones(len(texts)), atol=1e-5)
    row = {image: i for i, image in enumerate(ids)}
    metrics = retrieval_metrics(image_embeddings=images, caption_embeddings=texts,
                                caption_image_index=np.array([row[i] for i in captions["image_id"]]))
    assert metrics["rsum"] == pytest.approx(meta["val_metrics"]["de"]["rsum"])


def test_same_seed_same_weights_other_seed_other_weights(world, tmp_path):
    _run(world, tmp_path / "a", max_updates=12)
    _run(world, tmp_path / "b", max_updates=12)
    _run(world, tmp_path / "c", max_updates=12, seed=2)
    assert _same_weights(_weights(tmp_path / "a"), _weights(tmp_path / "b"))
    assert (tmp_path / "a" / "train_log.csv").read_text() == (tmp_path / "b" / "train_log.csv").read_text()
    assert not _same_weights(_weights(tmp_path / "a"), _weights(tmp_path / "c"))


def test_killed_run_resumes_to_the_same_result(world, tmp_path, monkeypatch):
    _run(world, tmp_path / "straight", max_updates=40)
    # Killed during update 25: the state of update 20 is on disk.
    _count_updates(monkeypatch, fail_at=25)
    with pytest.raises(_Killed):
        _run(world, tmp_path / "resumed", max_updates=40)
    # Nothing that looks complete is left: the rule's outputs appear only when training ends.
    assert sorted(p.name for p in (tmp_path / "resumed").iterdir()) == ["last.pt", "train_log.partial.csv"]
    logged = pd.read_csv(tmp_path / "resumed" / "train_log.partial.csv")
    assert logged["update"].max() == 20
    calls = _count_updates(monkeypatch)
    _run(world, tmp_path / "resumed", max_updates=40)
    assert calls["n"] == 20                  # updates 21..40 only: it resumed, not restarted
    assert sorted(p.name for p in (tmp_path / "resumed").iterdir()) == ["checkpoint.pt", "train_log.csv", "vocab.json"]
    assert _same_weights(_weights(tmp_path / "straight"), _weights(tmp_path / "resumed"))
    assert ((tmp_path / "straight" / "train_log.csv").read_text()
            == (tmp_path / "resumed" / "train_log.csv").read_text())


def test_stale_state_from_other_settings_is_not_resumed(world, tmp_path, monkeypatch):
    _count_updates(monkeypatch, fail_at=15)
    with pytest.raises(_Killed):
        _run(world, tmp_path, max_updates=20)
    calls = _count_updates(monkeypatch)
    _run(world, tmp_path, max_updates=20, learning_rate=1e-3)
    assert calls["n"] == 20


def test_early_stopping_after_patience_validations(world, tmp_path, monkeypatch):
    scores = iter([1.0, 3.0, 2.0, 3.0, 2.5, 9.0, 9.0])
    monkeypatch.setattr(training, "validate", lambda model, val_sets: (next(scores), {}))
    summary = _run(world, tmp_path / "stopped", validate_every=2, patience=3, max_updates=100)
    # Validations at 2 (1.0, best), 4 (3.0, best), 6, 8 (3.0 is no improvement), 10 → stop.
    assert summary["updates"] == 10 and summary["best_update"] == 4 and summary["best_score"] == 3.0
    assert "no improvement in 3 validations" in summary["stop_reason"]
    frame = pd.read_csv(tmp_path / "stopped" / "train_log.csv")
    assert frame["update"].max() == 10
    assert frame.dropna()["val_score"].tolist() == [1.0, 3.0, 2.0, 3.0, 2.5]
    # The kept weights are those of update 4.
    scores = iter([1.0, 3.0])
    _run(world, tmp_path / "four", validate_every=2, patience=3, max_updates=4)
    assert _same_weights(_weights(tmp_path / "stopped"), _weights(tmp_path / "four"))


def test_max_updates_is_a_guard_the_log_names(world, tmp_path, monkeypatch, caplog):
    scores = iter([1.0, 2.0, 3.0])  # still improving at every validation
    monkeypatch.setattr(training, "validate", lambda model, val_sets: (next(scores), {}))
    with caplog.at_level("WARNING", logger="pseudopairs.model.training"):
        summary = _run(world, tmp_path, validate_every=2, patience=3, max_updates=6)
    assert summary["updates"] == 6 and summary["best_update"] == 6
    assert summary["stop_reason"] == "reached max_updates=6 (still improving: raise it)"
    assert "en_de_c2c seed 1: stopped by the max_updates guard (6), not by early stopping" in caplog.text
    assert checkpoints.load_model(tmp_path / "checkpoint.pt")[1]["stop_reason"] == summary["stop_reason"]


def test_nan_loss_stops_with_clear_error_and_keeps_last_checkpoint(world, tmp_path, monkeypatch):
    real = updates.contrastive_loss
    calls = {"n": 0}

    def poisoned(a, b, **kwargs):
        calls["n"] += 1
        loss = real(a, b, **kwargs)
        return loss * float("nan") if calls["n"] == 13 else loss

    monkeypatch.setattr(updates, "contrastive_loss", poisoned)
    with pytest.raises(RuntimeError, match=r"non-finite training loss \(nan\) at update 13 "
                                           r"\(task c2[ic], data set m30k\.[^)]+\).*state last saved "
                                           r"\(at the validation of update 10\).*last\.pt"):
        _run(world, tmp_path)
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    assert state["progress"]["update"] == 10
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    # No output that looks complete; the last good state is readable as a model.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "train_log.partial.csv"]
    assert pd.read_csv(tmp_path / "train_log.partial.csv")["update"].max() == 10
    model, meta = checkpoints.load_model(tmp_path / "last.pt")
    assert meta["update"] == 10 and meta["best_score"] == state["progress"]["best_score"]
    assert _same_weights(model.state_dict(), state["progress"]["best_state"])


def test_non_finite_weights_stop_at_the_next_validation(world, tmp_path, monkeypatch):
    real = updates.train_update
    calls = {"n": 0}

    def poison_weights(model, *args, **kwargs):
        loss = real(model, *args, **kwargs)       # this update's loss is still finite
        calls["n"] += 1
        if calls["n"] == 20:
            with torch.no_grad():
                model.gru.weight_hh_l0[0, 0] = float("inf")
        return loss

    monkeypatch.setattr(updates, "train_update", poison_weights)
    with pytest.raises(RuntimeError, match=r"non-finite weights \(gru\.weight_hh_l0\) after update 20"
                                           r".*state last saved \(at the validation of update 10\)"):
        _run(world, tmp_path)
    assert torch.load(tmp_path / "last.pt", weights_only=True)["progress"]["update"] == 10
    assert not (tmp_path / "checkpoint.pt").exists()


def test_fine_tuning_starts_from_the_source_weights(world, tmp_path, monkeypatch):
    _run(world, tmp_path / "source", max_updates=10)
    spec, vocab = world
    source = _weights(tmp_path / "source")
    seen = {}
    real = updates.train_update

    def spy(model, *args, **kwargs):
        seen.setdefault("first", {k: v.clone() for k, v in model.state_dict().items()})
        return real(model, *args, **kwargs)

    monkeypatch.setattr(updates, "train_update", spy)
    ft_spec = {**spec, "init_from": str(tmp_path / "source" / "checkpoint.pt")}
    training.train(spec=ft_spec, settings=run_settings({**SETTINGS, "max_updates": 10}), out_dir=tmp_path / "ft", seed=1)
    assert _same_weights(seen["first"], source)
    with pytest.raises(ValueError, match="init_from .* has dims"):
        training.train(spec=ft_spec, settings=run_settings({**SETTINGS, "joint_dim": 8}), out_dir=tmp_path / "bad", seed=1)


def test_bad_inputs_are_reported_by_key(world, tmp_path):
    spec, vocab = world
    with pytest.raises(ValueError, match=r"training: unknown setting\(s\) training\.batchsize"):
        training.train(spec=spec, settings=run_settings({**SETTINGS, "batchsize": 3}), out_dir=tmp_path, seed=1)
    with pytest.raises(ValueError, match=r"training\.c2c_probability: must be a number in \[0, 1\], got 1\.5"):
        training.train(spec=spec, settings=run_settings({**SETTINGS, "c2c_probability": 1.5}), out_dir=tmp_path, seed=1)
    with pytest.raises(ValueError, match=r"c2i\[0\] lacks \['features'\]"):
        bad = {**spec, "c2i": [{k: v for k, v in spec["c2i"][0].items() if k != "features"}]}
        training.train(spec=bad, settings=run_settings(SETTINGS), out_dir=tmp_path, seed=1)


def test_cli_accepts_json_and_file_arguments(world, tmp_path, capsys):
    from pseudopairs.model import stack_training

    spec, vocab = world
    parser = argparse.ArgumentParser()
    stack_training.register_cli(parser.add_subparsers(dest="command"))
    job = {"experiment": "en_de_c2c", "settings": run_settings({**SETTINGS, "max_updates": 5}),
           "models": {"3": {"spec": spec, "out_dir": str(tmp_path / "out")}}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    args = parser.parse_args(["train", "--job", f"@{tmp_path / 'job.json'}"])
    args.func(args)
    assert torch.load(tmp_path / "out" / "checkpoint.pt", weights_only=True)["seed"] == 3
    with pytest.raises(SystemExit):  # refused while parsing the arguments, before any work
        parser.parse_args(["train", "--job", "{not json"])
    assert "argument --job: --job: not valid JSON" in capsys.readouterr().err
    # a bad setting is refused naming the job's field and the setting's config key
    with pytest.raises(ValueError, match=r"training job.settings.training: training.batch_size: must be an "
                                         r"integer >= 2, got 1"):
        stack_training.train_job(stack_training.TrainingJob.from_dict(
            {**job, "settings": run_settings({**SETTINGS, "batch_size": 1})}))


def test_tiny_training_run_learns(world, tmp_path):
    spec, vocab = world
    summary = _run(world, tmp_path, max_updates=250, validate_every=50)
    # Chance level for 40 validation images with 5 captions each: I→T R@1,5,10 ≈ 2.5, 12, 23 %,
    # T→I ≈ 2.5, 12.5, 25 %, so rsum ≈ 78 per language, ≈ 155 for En + De.
    per_lang = {lang: m["rsum"] for lang, m in summary["val_metrics"].items()}
    assert all(v > 300 for v in per_lang.values()), per_lang


# --------------------------------------------------------------------------------------------
# Image feature normalisation (config model.image_normalization)


def test_standardisation_is_a_fixed_affine_map_kept_in_the_checkpoint(world, tmp_path):
    spec, vocab = world
    out = tmp_path / "std"
    _run(world, out, image_normalization="standardize", max_updates=10)
    model, _ = checkpoints.load_model(out / "checkpoint.pt")
    from pseudopairs.core.io import load_features
    _, train_feats = load_features(spec["c2i"][0]["features"])
    x = train_feats.astype(np.float64)
    # statistics over the distinct training images (en and de share one features file: counted once)
    assert np.allclose(model.image_mean.numpy(), x.mean(0), atol=1e-5)
    assert np.allclose(model.image_scale.numpy(), x.std(0), atol=1e-5)
    feats = torch.from_numpy(train_feats[:4].astype(np.float32))
    by_hand = torch.nn.functional.normalize(
        model.image_projection((feats - torch.from_numpy(x.mean(0)).float()) / torch.from_numpy(x.std(0)).float()), dim=1)
    assert torch.allclose(model.encode_images(feats), by_hand, atol=1e-5)


def test_standardisation_rescues_max_violation_from_a_common_component(tmp_path):
    """Features with a large shared offset (as random-weight ResNet features have) make the
    max-violation loss collapse; standardising them lets the same run learn."""
    spec, vocab = _world(tmp_path / "w", n_train=60, n_val=40, seed=3)
    for split in ("train", "val"):
        path = spec["c2i"][0]["features"] if split == "train" else spec["validation"]["features"]
        from pseudopairs.core.io import load_features
        ids, feats = load_features(path)
        offset = 50.0 + np.abs(np.random.default_rng(0).normal(size=feats.shape[1])) * 20
        save_features(path, image_ids=ids, features=(feats.astype(np.float32) + offset).astype(np.float32))
    scores = {}
    for flag in (False, True):
        mode = "standardize" if flag else "raw"
        summary = training.train(spec=spec, settings=run_settings({**SETTINGS, "image_normalization": mode, "max_updates": 60,
                                                      "c2c_probability": 0.0, "learning_rate": 2e-3}),
                                 out_dir=tmp_path / f"run{flag}", seed=1)
        scores[flag] = summary["best_score"]
    assert scores[True] > scores[False] + 50, scores


# --------------------------------------------------------------------------------------------
# A tiny train + evaluate on the demo world (world → text → features → train → metrics.json)


def _chance_rsum(*, n_images: int, per_image: int) -> float:
    """Expected rsum of random embeddings: I→T finds one of ``per_image`` captions among all
    ``n_images * per_image``; T→I finds one image among ``n_images``."""
    n_captions = n_images * per_image
    total = 0.0
    for k in (1, 5, 10):
        miss = 1.0
        for j in range(k):
            miss *= (n_captions - per_image - j) / (n_captions - j)
        total += 100 * (1 - miss) + 100 * k / n_images
    return total


@pytest.mark.slow
def test_tiny_demo_world_train_and_evaluate(tmp_path):
    from pseudopairs.cli import main
    from pseudopairs.evaluation import METRIC_KEYS, retrieval_metrics, translation_retrieval
    from pseudopairs.features.extract import FeatureSettings, run_features
    from pseudopairs.core.io import load_features, read_captions, write_parquet_atomic
    from pseudopairs.evaluation.step import parallel_texts
    from pseudopairs.data.text import prepare_captions
    from pseudopairs.data.vocab import Vocabulary
    from pseudopairs.world.generate import build_world

    root = tmp_path
    n_test = 40
    build_world({"seed": 7, "image_size": 64,
                 "images": {"m30k": {"train": 160, "val": 40, "test": n_test}}}, root)
    paths = {}
    for corpus, split in [("m30k", "train"), ("m30k", "val"), ("m30k", "test"), ("m30k_task1", "test")]:
        paths[corpus, split] = root / "captions" / corpus / f"{split}.parquet"
        raw = read_captions(root / "captions" / "raw" / corpus / f"{split}.parquet")
        write_parquet_atomic(paths[corpus, split], prepare_captions(raw))
    settings = FeatureSettings(resize=64, crop=56, workers=0, batch_size=40, threads=1, device="cpu")
    for split in ("train", "val", "test"):
        run_features(root / "images" / "m30k" / f"{split}.parquet", root / "features" / f"{split}.npz",
                     root / "features" / f"{split}.skipped.tsv", settings=settings, progress=False)
    vocab = build_vocabulary(read_captions(paths["m30k", "train"])["text"], min_count=1)
    write_json_atomic(root / "vocab.json", vocab.to_json())

    def ref(lang):
        return {"name": f"m30k.{lang}", "captions": str(paths["m30k", "train"]),
                "features": str(root / "features" / "train.npz"), "lang": lang}

    spec = {"experiment": "en_de_c2c", "c2i": [ref("en"), ref("de")],
            "c2c": [{"name": "m30k.en+m30k.de", "a": ref("en"), "b": ref("de")}],
            "validation": {"captions": str(paths["m30k", "val"]),
                           "features": str(root / "features" / "val.npz"), "langs": ["en", "de"]},
            "vocab": {"path": str(root / "vocab.json")}}
    summary = training.train(spec=spec, out_dir=root / "model", seed=1,
                             settings=run_settings({**SETTINGS, "batch_size": 32, "learning_rate": 2e-3,
                                       "max_violation": False, "validate_every": 50,
                                       "max_updates": 400, "embedding_dim": 32, "joint_dim": 64,
                                       "image_normalization": "standardize"}))

    evaluation = {"captions": str(paths["m30k", "test"]), "features": str(root / "features" / "test.npz"),
                  "langs": ["en", "de"], "translation_captions": str(paths["m30k_task1", "test"]),
                  "translation_langs": ["en", "de"]}
    out = root / "model" / "metrics.json"
    job = {"experiment": "en_de_c2c", "device": "cpu", "threads": 1, "data": evaluation,
           "models": {"1": {"checkpoint": str(root / "model" / "checkpoint.pt"),
                            "vocab": str(root / "vocab.json"), "output": str(out)}}}
    assert main(["evaluate", "--job", json.dumps(job)]) == 0
    metrics = json.loads(out.read_text())
    assert set(metrics) == {"experiment", "seed", "retrieval", "translation", "sum_sum", "checkpoint",
                            "parameters"}
    assert metrics["parameters"]["trainable"] == sum(p.numel() for p in
                                                     checkpoints.load_model(root / "model" / "checkpoint.pt")[0].parameters())
    assert (metrics["experiment"], metrics["seed"]) == ("en_de_c2c", 1)
    assert metrics["checkpoint"] == {"update": summary["best_update"], "val_score": summary["best_score"],
                                     "updates": summary["updates"], "stop_reason": summary["stop_reason"]}
    assert set(metrics["retrieval"]) == {"en", "de"}
    assert metrics["sum_sum"] == pytest.approx(sum(m["rsum"] for m in metrics["retrieval"].values()))

    # The numbers are those of the model's encoders on the test split and the task1 pairs ...
    model, _ = checkpoints.load_model(root / "model" / "checkpoint.pt")
    vocab = Vocabulary.load(root / "vocab.json")
    ids, feats = load_features(root / "features" / "test.npz")
    images = encode.encode_image_features(model, feats)
    captions = read_captions(paths["m30k", "test"])
    row = {image: i for i, image in enumerate(ids)}
    for lang in ("en", "de"):
        subset = captions[captions["lang"] == lang]
        expected = retrieval_metrics(
            image_embeddings=images,
            caption_embeddings=encode.encode_captions_texts(model, vocab, subset["text"].tolist()),
            caption_image_index=np.array([row[i] for i in subset["image_id"]]))
        assert set(metrics["retrieval"][lang]) == set(METRIC_KEYS)
        assert metrics["retrieval"][lang] == pytest.approx(expected)
    en, de = parallel_texts(read_captions(paths["m30k_task1", "test"]), source_lang="en",
                            target_lang="de", source="task1")
    assert len(en) == n_test
    en_emb = encode.encode_captions_texts(model, vocab, en)
    de_emb = encode.encode_captions_texts(model, vocab, de)
    assert metrics["translation"] == pytest.approx({
        "en2de": translation_retrieval(source_embeddings=en_emb, target_embeddings=de_emb)["r1"],
        "de2en": translation_retrieval(source_embeddings=de_emb, target_embeddings=en_emb)["r1"]})

    # ... and far above chance (rsum ≈ 77 per language for 40 images × 5 captions; R@1 2.5 %).
    chance = _chance_rsum(n_images=n_test, per_image=5)
    assert chance == pytest.approx(77.3, abs=0.1)
    for lang in ("en", "de"):
        assert metrics["retrieval"][lang]["rsum"] > 2 * chance, metrics["retrieval"]
    assert min(metrics["translation"].values()) > 10 * 100 / n_test, metrics["translation"]


# --------------------------------------------------------------------------------------------
# Per-run vocabulary (the authors' code builds each run's vocabulary from its own training data)


def test_vocabulary_is_built_from_the_runs_own_training_captions(world, tmp_path):
    spec, _ = world
    en_only = {**spec, "experiment": "en", "c2i": [spec["c2i"][0]], "c2c": [],
               "validation": {**spec["validation"], "langs": ["en"]}, "vocab": {"min_count": 1}}
    training.train(spec=en_only, settings=run_settings({**SETTINGS, "max_updates": 10}), out_dir=tmp_path / "en", seed=1)
    words = json.loads((tmp_path / "en" / "vocab.json").read_text())["words"]
    english = {w for c in COLOURS["en"] + SHAPES["en"] for w in c.split()}
    assert english <= set(words)
    assert not {"rot", "kugel", "ein", "der"} & set(words)   # German-only words are not counted
    # min_count applies to the run's own counts: "here" occurs only in one English template
    # ("one {c} {s} here"), once per training image
    n_train = 60
    training.train(spec={**en_only, "vocab": {"min_count": n_train + 1}},
                   settings=run_settings({**SETTINGS, "max_updates": 10}), out_dir=tmp_path / "en61", seed=1)
    kept = json.loads((tmp_path / "en61" / "vocab.json").read_text())
    assert "here" not in kept["words"] and all(c >= n_train + 1 for c in kept["counts"].values())
    assert kept["min_count"] == n_train + 1


def test_fine_tuning_keeps_the_source_vocabulary(world, tmp_path):
    spec, _ = world
    built = {**spec, "vocab": {"min_count": 2}}
    training.train(spec=built, settings=run_settings({**SETTINGS, "max_updates": 10}), out_dir=tmp_path / "src", seed=1)
    ft = {**spec, "vocab": {"path": str(tmp_path / "src" / "vocab.json")},
          "init_from": str(tmp_path / "src" / "checkpoint.pt")}
    training.train(spec=ft, settings=run_settings({**SETTINGS, "max_updates": 10}), out_dir=tmp_path / "ft", seed=1)
    assert (tmp_path / "ft" / "vocab.json").read_text() == (tmp_path / "src" / "vocab.json").read_text()
    with pytest.raises(ValueError, match="spec: vocab must be"):
        training.train(spec={**spec, "vocab": {"min_count": 2, "path": "x"}}, settings=run_settings(SETTINGS),
                       out_dir=tmp_path / "bad", seed=1)
    with pytest.raises(FileNotFoundError, match="nowhere.json: vocabulary not found"):
        training.train(spec={**spec, "vocab": {"path": str(tmp_path / "nowhere.json")}},
                       settings=run_settings(SETTINGS), out_dir=tmp_path / "bad", seed=1)


def test_l2_image_normalisation_is_applied_before_the_affine_layer(world, tmp_path):
    spec, _ = world
    _run(world, tmp_path, image_normalization="l2", max_updates=10)
    model, meta = checkpoints.load_model(tmp_path / "checkpoint.pt")
    assert meta["image_normalization"] == "l2" and model.image_normalization == "l2"
    from pseudopairs.core.io import load_features
    _, feats = load_features(spec["c2i"][0]["features"])
    x = torch.from_numpy(feats[:5].astype(np.float32))
    by_hand = torch.nn.functional.normalize(
        model.image_projection(x / x.norm(dim=1, keepdim=True)), dim=1)
    assert torch.allclose(model.encode_images(x), by_hand, atol=1e-6)
    # scaling an image's features changes nothing under l2 (it does under raw)
    assert torch.allclose(model.encode_images(3 * x), model.encode_images(x), atol=1e-6)
    with pytest.raises(ValueError, match=r"model\.image_normalization: must be one of \[.raw., .l2., .standardize.\]"):
        _run(world, tmp_path / "bad", image_normalization="whiten")


# ---------------------------------------------------------------------------------------------
# c2c warm-up (the authors' code: c2c only once the c2i loss left the collapsed plateau)


def test_plateau_loss_is_the_loss_of_equal_embeddings():
    from pseudopairs.model.losses import contrastive_loss
    from pseudopairs.model.losses import plateau_loss

    same = torch.nn.functional.normalize(torch.ones(6, 4), dim=1)
    for max_violation in (True, False):
        got = float(contrastive_loss(same, same, margin=0.2, max_violation=max_violation))
        assert got == pytest.approx(plateau_loss(batch_size=6, margin=0.2, max_violation=max_violation))
    assert plateau_loss(batch_size=128, margin=0.2, max_violation=True) == pytest.approx(51.2)
    assert plateau_loss(batch_size=128, margin=0.2, max_violation=False) == pytest.approx(2 * 128 * 127 * 0.2)


def test_c2c_waits_until_the_c2i_loss_leaves_the_plateau(world, tmp_path):
    """The authors' rule: decided at validations (every 10 updates here) on the mean c2i loss
    since the previous validation; c2c from the next update on, and it stays on."""
    from pseudopairs.model.losses import plateau_loss

    straight = _run(world, tmp_path / "straight", max_updates=60)
    log = pd.read_csv(tmp_path / "straight" / "train_log.csv")
    assert straight["c2c_from"] is None and (log["task"].iloc[:20] == "c2c").any()

    summary = _run(world, tmp_path / "warm", max_updates=100, c2c_warmup=0.9)
    log = pd.read_csv(tmp_path / "warm" / "train_log.csv")
    start = summary["c2c_from"]
    assert start is not None and 10 <= start < 100 and start % 10 == 0   # only at validations
    before = log[log["update"] <= start]
    assert (before["task"] == "c2i").all()          # no c2c while on the plateau
    threshold = 0.9 * plateau_loss(batch_size=SETTINGS["batch_size"], margin=0.2, max_violation=True)
    period = before["loss"].iloc[-10:]              # the c2i losses since the previous validation
    assert period.mean() < threshold
    if start > 10:                                  # the previous period's mean did not end it
        assert before["loss"].iloc[-20:-10].mean() >= threshold
    assert (log[log["update"] > start]["task"] == "c2c").any()   # switched on, and stays on


def test_no_warm_up_with_the_sum_of_hinges(world, tmp_path):
    """The authors' code waits only with max-violation: with the sum over negatives c2c is drawn
    from the first update, whatever c2c_warmup says."""
    summary = _run(world, tmp_path, max_updates=20, c2c_warmup=0.9, max_violation=False)
    log = pd.read_csv(tmp_path / "train_log.csv")
    assert summary["c2c_from"] is None and (log["task"].iloc[:10] == "c2c").any()


def test_killed_run_with_warm_up_resumes_to_the_same_result(world, tmp_path, monkeypatch):
    _run(world, tmp_path / "straight", max_updates=50, c2c_warmup=0.9)
    _count_updates(monkeypatch, fail_at=35)
    with pytest.raises(_Killed):
        _run(world, tmp_path / "resumed", max_updates=50, c2c_warmup=0.9)
    _count_updates(monkeypatch)
    _run(world, tmp_path / "resumed", max_updates=50, c2c_warmup=0.9)
    assert _same_weights(_weights(tmp_path / "straight"), _weights(tmp_path / "resumed"))
    assert ((tmp_path / "straight" / "train_log.csv").read_text()
            == (tmp_path / "resumed" / "train_log.csv").read_text())


# --------------------------------------------------------------------------------------------
# The order similarity (paper 001) and the joint objective (paper 003)


def test_tiny_training_run_with_the_order_similarity_learns(world, tmp_path):
    from pseudopairs.evaluation import retrieval_metrics
    from pseudopairs.core.io import load_features, read_captions
    from pseudopairs.data.vocab import Vocabulary

    summary = _run(world, tmp_path, similarity="order", margin=0.05, max_updates=250, validate_every=50)
    per_lang = {lang: m["rsum"] for lang, m in summary["val_metrics"].items()}
    assert all(v > 300 for v in per_lang.values()), per_lang          # chance ≈ 78 per language
    model, meta = checkpoints.load_model(tmp_path / "checkpoint.pt")
    assert model.similarity == "order" and meta["similarity"] == "order"
    # evaluation ranks with the model's similarity and reproduces the validation score
    spec, vocab_path = world
    ids, feats = load_features(spec["validation"]["features"])
    images = encode.encode_image_features(model, feats)
    captions = read_captions(spec["validation"]["captions"], lang="en")
    texts = encode.encode_captions_texts(model, Vocabulary.load(vocab_path), captions["text"].tolist())
    assert (images >= 0).all() and (texts >= 0).all()
    row = {image: i for i, image in enumerate(ids)}
    index = np.array([row[i] for i in captions["image_id"]])
    metrics = retrieval_metrics(image_embeddings=images, caption_embeddings=texts,
                                caption_image_index=index, similarity=model.similarity)
    assert metrics["rsum"] == pytest.approx(meta["val_metrics"]["en"]["rsum"])
    assert metrics["mean_recall"] == pytest.approx(metrics["rsum"] / 6)


def test_c2c_batches_of_an_order_run_use_the_cosine(world, tmp_path, monkeypatch):
    from pseudopairs.model import losses

    seen = []
    real = losses.contrastive_loss

    def spy(a, b, **kwargs):
        seen.append(kwargs["similarity"])
        return real(a, b, **kwargs)

    monkeypatch.setattr(updates, "contrastive_loss", spy)
    _run(world, tmp_path, similarity="order", margin=0.05, max_updates=20)
    log = pd.read_csv(tmp_path / "train_log.csv")
    assert seen == ["cosine" if task == "c2c" else "order" for task in log["task"]]


def _count_joint_updates(monkeypatch, *, fail_at=None):
    return _count_updates(monkeypatch, fail_at=fail_at, name="joint_update")


def test_tiny_joint_run_trains_and_logs_one_joint_task(world, tmp_path):
    summary = _run(world, tmp_path, objective="joint", max_updates=250, validate_every=50)
    per_lang = {lang: m["rsum"] for lang, m in summary["val_metrics"].items()}
    assert all(v > 300 for v in per_lang.values()), per_lang
    log = pd.read_csv(tmp_path / "train_log.csv")
    assert set(log["task"]) == {"joint"} and set(log["dataset"]) == {"m30k.en+m30k.de"}
    assert np.isfinite(log["loss"]).all() and (log["loss"] >= 0).all()


def test_joint_update_is_the_sum_over_every_pair_of_sources(world, tmp_path, monkeypatch):
    from pseudopairs.model import losses

    calls = []
    real = losses.joint_loss

    def spy(sources, pairs, **kwargs):
        calls.append((sorted(sources), list(pairs)))
        return real(sources, pairs, **kwargs)

    monkeypatch.setattr(updates, "joint_loss", spy)
    _run(world, tmp_path, objective="joint", similarity="order", margin=0.05, max_updates=3)
    assert calls[0] == (["image", "m30k.de", "m30k.en"],
                        [("image", "m30k.en", "order"), ("image", "m30k.de", "order")])
    assert calls[1] == (["image", "m30k.de", "m30k.en"], [("m30k.en", "m30k.de", "cosine")])
    assert len(calls) == 6


def test_joint_runs_are_deterministic_and_a_killed_one_resumes_to_the_same_result(world, tmp_path, monkeypatch):
    _run(world, tmp_path / "a", objective="joint", max_updates=40)
    _run(world, tmp_path / "b", objective="joint", max_updates=40)
    assert _same_weights(_weights(tmp_path / "a"), _weights(tmp_path / "b"))
    _count_joint_updates(monkeypatch, fail_at=25)
    with pytest.raises(_Killed):
        _run(world, tmp_path / "resumed", objective="joint", max_updates=40)
    assert pd.read_csv(tmp_path / "resumed" / "train_log.partial.csv")["update"].max() == 20
    calls = _count_joint_updates(monkeypatch)
    _run(world, tmp_path / "resumed", objective="joint", max_updates=40)
    assert calls["n"] == 20
    assert _same_weights(_weights(tmp_path / "a"), _weights(tmp_path / "resumed"))
    assert ((tmp_path / "a" / "train_log.csv").read_text()
            == (tmp_path / "resumed" / "train_log.csv").read_text())


def test_joint_with_warm_up_adds_the_caption_pairs_once_off_the_plateau(world, tmp_path, monkeypatch):
    from pseudopairs.model import losses

    c2c_terms = []
    real = losses.joint_loss

    def spy(sources, pairs, **kwargs):
        c2c_terms.append(any(a != "image" for a, _, _ in pairs))
        return real(sources, pairs, **kwargs)

    monkeypatch.setattr(updates, "joint_loss", spy)
    summary = _run(world, tmp_path, objective="joint", c2c_warmup=0.9, max_updates=60)
    start = summary["c2c_from"]
    assert start is not None and 10 <= start < 60 and start % 10 == 0
    assert not any(c2c_terms[:start])   # one c2i call per update until c2c went on ...
    assert any(c2c_terms[start:])       # ... then the caption–caption pairs join


def test_a_language_of_the_translation_portion_validates_and_tests_on_its_own_table(world, tmp_path):
    """Paper 004's French: validated on the translation portion's val table (``lang_captions``,
    the same images), and tested there (``portion_langs`` → ``portion_retrieval`` in the
    metrics) with the numbers the retrieval engine gives on those captions."""
    from pseudopairs.data.vocab import Vocabulary
    from pseudopairs.evaluation import retrieval_metrics
    from pseudopairs.evaluation.step import evaluate_checkpoint
    from pseudopairs.core.io import load_features, read_captions

    spec, vocab_path = world
    val = read_captions(spec["validation"]["captions"])
    # a one-caption-per-image table in en, de and "fr" (German words: in the vocabulary)
    task1 = val[val["caption_idx"] == 0].copy()
    fr = val[(val["lang"] == "de") & (val["caption_idx"] == 1)].assign(lang="fr", caption_idx=0)
    task1 = pd.concat([task1, fr], ignore_index=True)
    task1_path = tmp_path / "task1_val.parquet"
    task1.to_parquet(task1_path, index=False)
    spec = {**spec, "validation": {**spec["validation"], "langs": ["en", "fr"],
                                   "lang_captions": {"fr": str(task1_path)}}}
    training.train(spec=spec, settings=run_settings({**SETTINGS, "max_updates": 20}), out_dir=tmp_path / "m", seed=1)
    model, meta = checkpoints.load_model(tmp_path / "m" / "checkpoint.pt")
    assert set(meta["val_metrics"]) == {"en", "fr"}
    ids, feats = load_features(spec["validation"]["features"])
    images = encode.encode_image_features(model, feats)
    row = {image: i for i, image in enumerate(ids)}
    texts = encode.encode_captions_texts(model, Vocabulary.load(vocab_path), fr["text"].tolist())
    expected = retrieval_metrics(image_embeddings=images, caption_embeddings=texts,
                                 caption_image_index=np.array([row[i] for i in fr["image_id"]]))
    assert meta["val_metrics"]["fr"]["rsum"] == pytest.approx(expected["rsum"])
    assert expected["rsum"] != pytest.approx(meta["val_metrics"]["en"]["rsum"])
    evaluation = {"captions": spec["validation"]["captions"], "features": spec["validation"]["features"],
                  "langs": ["en"], "translation_captions": str(task1_path), "translation_langs": ["en", "de"]}
    plain = evaluate_checkpoint(checkpoint=str(tmp_path / "m" / "checkpoint.pt"), vocab_path=vocab_path,
                                spec=evaluation)
    assert "portion_retrieval" not in plain and set(plain["retrieval"]) == {"en"}
    result = evaluate_checkpoint(checkpoint=str(tmp_path / "m" / "checkpoint.pt"), vocab_path=vocab_path,
                                 spec={**evaluation, "portion_captions": str(task1_path),
                                       "portion_langs": ["en", "fr"]})
    assert result["retrieval"] == plain["retrieval"] and result["sum_sum"] == plain["sum_sum"]
    assert set(result["portion_retrieval"]) == {"en", "fr"}
    assert result["portion_retrieval"]["fr"] == pytest.approx(expected)
    # English of the portion: one caption per image, not the five of the comparable table
    assert result["portion_retrieval"]["en"] != pytest.approx(result["retrieval"]["en"])


def test_training_benchmark_replays_the_trainers_batches_and_prints_its_ratio(monkeypatch, capsys):
    """benchmarks/training.py times a bare loop over the batches an identical Trainer draws
    (Trainer.next_batch, the sampled objective's own draw); it broke once when that draw moved.
    Runs it at the demo shapes, 4 updates, on the CPU: the bare loop gets, in order, the very
    batches the real trainer's updates draw (warm-up and timed blocks), and it prints its ratios."""
    import dataclasses
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "training.py"
    module_spec = importlib.util.spec_from_file_location("benchmark_training", bench)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    drawn: dict[int, list] = {}     # each Trainer's draws, by the trainer
    updated: set[int] = set()       # the trainers whose update() ran (the real one)
    replayed: list = []             # what the bare loop ran, in order
    next_batch, update, run_bare = training.Trainer.next_batch, training.Trainer.update, module.run_bare

    def drawing(self):
        out = next_batch(self)
        drawn.setdefault(id(self), []).append(out[2])
        return out

    def updating(self):
        updated.add(id(self))
        return update(self)

    def bare(model, optimizer, batches):
        replayed.extend(batches)
        return run_bare(model, optimizer, batches)

    monkeypatch.setattr(training.Trainer, "next_batch", drawing)
    monkeypatch.setattr(training.Trainer, "update", updating)
    monkeypatch.setattr(module, "run_bare", bare)
    monkeypatch.setattr(sys, "argv", [str(bench), "--preset", "demo", "--device", "cpu", "--updates", "4",
                                      "--warmup", "1", "--blocks", "2"])
    module.main()
    [real] = updated
    assert len(drawn) == 2 and len(replayed) == 1 + 4  # the real trainer and its twin; warm-up + timed

    def same(a, b):
        return type(a) is type(b) and all(torch.equal(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    assert len(drawn[real]) == len(replayed)
    differ = [k for k, (a, b) in enumerate(zip(drawn[real], replayed)) if not same(a, b)]
    assert not differ, f"the bare loop's batches {differ} are not the real trainer's draws"
    out = capsys.readouterr().out
    ratios = [float(line.split(":")[1].split()[0]) for line in out.splitlines() if line.startswith("ratio")]
    assert len(ratios) == 2 and all(r > 0 for r in ratios), out


def test_validation_scores_the_same_with_either_candidate_gemm(world, monkeypatch):
    """An untrained model (near-random embeddings: many close scores) validated with float32
    candidates (the default) and with the engine's own choice forced to bf16: the ranks are
    exact either way, so the score and every metric are equal; an unknown choice is refused."""
    from pseudopairs.model.encoders import RankingModel
    from pseudopairs.model.inputs import load_data, run_vocabulary

    spec, _ = world
    vocab = run_vocabulary(spec)
    _, _, sets, image_dim = load_data(spec, vocab)
    torch.manual_seed(0)
    model = RankingModel(len(vocab), embedding_dim=12, joint_dim=24, image_dim=image_dim)
    monkeypatch.setenv("PSEUDOPAIRS_BF16", "1")
    score, metrics = encode.validate(model, sets)
    assert encode.validate(model, sets, candidates="auto") == (score, metrics)
    assert set(metrics) == {"en", "de"} and score == sum(m["rsum"] for m in metrics.values())
    with pytest.raises(ValueError, match="candidates must be one of"):
        encode.validate(model, sets, candidates="bf16")


# ---------------------------------------------------------------------------------------------
# One c2c update computed by hand


def _hand_gru_last(emb, w_ih, w_hh, b_ih, b_hh, tokens, length):
    """PyTorch's documented GRU, written out: r, z, n gates (order r|z|n in the stacked weights),
    h' = (1 - z) * n + z * h, from h = 0, over the first ``length`` tokens."""
    h = torch.zeros(w_hh.shape[1], dtype=emb.dtype)
    hidden = w_hh.shape[1]
    for t in range(length):
        x = emb[tokens[t]]
        gi = w_ih @ x + b_ih
        gh = w_hh @ h + b_hh
        r = torch.sigmoid(gi[:hidden] + gh[:hidden])
        z = torch.sigmoid(gi[hidden:2 * hidden] + gh[hidden:2 * hidden])
        n = torch.tanh(gi[2 * hidden:] + r * gh[2 * hidden:])
        h = (1 - z) * n + z * h
    return h


def test_one_c2c_update_is_the_hand_computed_loss_and_gradient_step():
    """A c2c update on a tiny model (vocabulary 7, 3-d embeddings, 2-d joint space; three
    caption pairs of different lengths): the returned loss is the VSE++ max-violation hinge
    written out here on the captions of side a against side b (GRU by PyTorch's documented
    equations, unit rows, cosine), and the step is plain SGD by that loss's gradient, computed
    by autograd through the formula here, not through the model. A c2c step that encodes one side
    twice (or scores a side against itself) gives another loss and another step."""
    from pseudopairs.model.batches import C2CBatch
    from pseudopairs.model.encoders import RankingModel

    torch.manual_seed(3)
    model = RankingModel(7, embedding_dim=3, joint_dim=2, image_dim=4)
    tokens_a = torch.tensor([[1, 2, 3], [4, 5, 0], [6, 0, 0]])
    lengths_a = torch.tensor([3, 2, 1])
    tokens_b = torch.tensor([[2, 6, 0], [3, 3, 4], [5, 1, 0]])
    lengths_b = torch.tensor([2, 3, 2])
    margin, lr = 0.5, 0.3

    names = ["embedding.weight", "gru.weight_ih_l0", "gru.weight_hh_l0", "gru.bias_ih_l0", "gru.bias_hh_l0"]
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    leaves = {k: before[k].clone().double().requires_grad_(True) for k in names}

    def side(tokens, lengths):
        rows = [_hand_gru_last(leaves["embedding.weight"], leaves["gru.weight_ih_l0"], leaves["gru.weight_hh_l0"],
                               leaves["gru.bias_ih_l0"], leaves["gru.bias_hh_l0"], tokens[i], int(lengths[i]))
                for i in range(len(tokens))]
        return torch.stack([r / r.norm() for r in rows])

    a, b = side(tokens_a, lengths_a), side(tokens_b, lengths_b)
    s = a @ b.t()
    expected = 0.0
    for i in range(3):
        worst_b = max(torch.clamp(margin - s[i, i] + s[i, j], min=0) for j in range(3) if j != i)
        worst_a = max(torch.clamp(margin - s[i, i] + s[j, i], min=0) for j in range(3) if j != i)
        expected = expected + worst_b + worst_a
    expected.backward()
    assert float(expected.detach()) > 0  # some hinge is active: the gradient is not zero

    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss = updates.train_update(model, optimizer, C2CBatch(tokens_a, lengths_a, tokens_b, lengths_b),
                                margin=margin, max_violation=True, grad_clip=0.0)
    assert float(loss) == pytest.approx(float(expected.detach()), abs=1e-5)
    after = dict(model.named_parameters())
    for k in names:
        step = (before[k].double() - lr * leaves[k].grad).float()
        assert torch.allclose(after[k].detach(), step, atol=1e-6), k
        assert not torch.equal(after[k].detach(), before[k]), k
    # the image branch takes no part in a c2c update
    assert torch.equal(after["image_projection.weight"].detach(), before["image_projection.weight"])
