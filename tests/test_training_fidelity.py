"""Training details that change results: the c2c warm-up as the authors' code does it,
paper 004's pooled c2c pairs, and its once-per-epoch validation of monolingual models."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch

import pseudopairs.model.training as training
from pseudopairs.data.vocab import build_vocabulary
from pseudopairs.model.batches import (BatchStream, C2CData, CaptionSet, PooledC2CData, TaskSampler,
                                       TokenTable, stream_rng)
from pseudopairs.model.losses import plateau_loss
from pseudopairs.model.schedule import C2CWarmup, updates_per_epoch, validation_interval, warmup_over
from pseudopairs.model.stack_training import train_stack
from test_training import SETTINGS, _world

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return _world(tmp_path_factory.mktemp("world"))


# ---------------------------------------------------------------------------------------------
# The c2c warm-up: decided at validations on the mean c2i loss since the previous one


def test_the_warm_up_ends_when_the_periods_mean_is_below_the_threshold():
    assert not warmup_over([52.0, 50.0, 48.0], threshold=49.0)     # mean 50
    assert not warmup_over([49.0, 49.0], threshold=49.0)            # not below
    assert warmup_over([50.0, 48.0, 47.0], threshold=49.0)          # mean 48.33
    assert not warmup_over([], threshold=49.0)                      # nothing to judge


def _replay(losses, *, validate_every, threshold):
    """Feed a hand-made c2i loss sequence (one per update) to the warm-up as a run does; the
    update at whose validation c2c went on (None: never)."""
    warmup = C2CWarmup(threshold)
    for update, loss in enumerate(losses, start=1):
        warmup.note(loss)
        if update % validate_every == 0 and warmup.at_validation():
            return update
    return None


def test_the_warm_up_judges_each_validation_period_on_its_own_and_only_at_validations():
    # periods of 3 updates; threshold 49. Period 1 mean 60; period 2 mean 45: ends at update 6.
    # The last 10 losses (the former rule) never average below 49 here: 5 x 60 + 5 x 45 = 52.5.
    assert _replay([60, 60, 60, 45, 45, 45], validate_every=3, threshold=49.0) == 6
    # one low loss in the middle of a period switches nothing until the validation, and then
    # only if the whole period's mean is below: (51 + 10 + 51) / 3 = 37.3 -> at update 3
    assert _replay([51, 10, 51], validate_every=3, threshold=49.0) == 3
    assert _replay([51, 10], validate_every=3, threshold=49.0) is None
    # the losses of a period that did not end it are dropped: (90, 90, 90) then (48, 48, 48)
    # ends at 6 (their mean over both periods, 69, would not)
    assert _replay([90, 90, 90, 48, 48, 48], validate_every=3, threshold=49.0) == 6
    assert _replay([50] * 12, validate_every=3, threshold=49.0) is None


def test_the_warm_up_is_only_for_max_violation_runs_with_c2c_data():
    plateau = plateau_loss(batch_size=128, margin=0.2, max_violation=True)
    on = C2CWarmup.for_run(c2c_warmup=0.96, has_c2c=True, max_violation=True, plateau=plateau)
    assert not on.enabled and on.threshold == pytest.approx(0.96 * 51.2)   # the authors' 49
    for kwargs in ({"c2c_warmup": 0.96, "has_c2c": True, "max_violation": False},
                   {"c2c_warmup": 0.96, "has_c2c": False, "max_violation": True},
                   {"c2c_warmup": None, "has_c2c": True, "max_violation": True}):
        assert C2CWarmup.for_run(plateau=plateau, **kwargs).enabled, kwargs


def test_the_warm_up_state_round_trips_in_the_middle_of_a_period():
    warmup = C2CWarmup(49.0)
    for loss in (50.0, torch.tensor(47.0)):
        warmup.note(loss)
    again = C2CWarmup(49.0)
    again.load_state_dict(warmup.state_dict())
    assert again.state_dict() == {"enabled": False, "losses": [50.0, 47.0]}
    again.note(46.0)
    assert again.at_validation() and again.enabled     # mean 47.67 < 49
    warmup.note(52.0)
    assert not warmup.at_validation()                  # mean 49.67


def test_each_model_of_a_batched_stack_ends_its_warm_up_on_its_own_as_alone(world, tmp_path):
    spec, _ = world
    settings = {**SETTINGS, "stack_compute": "batched", "max_updates": 100, "c2c_warmup": 0.95}
    seeds = (1, 2)
    stacked = train_stack(jobs=[{"seed": s, "spec": spec, "out_dir": str(tmp_path / f"stack{s}")}
                                for s in seeds], settings=settings)
    # each model its own (observed on the 2-core AVX-512 CPU: 60 and 50)
    assert stacked[0]["c2c_from"] != stacked[1]["c2c_from"]
    for summary, seed in zip(stacked, seeds):
        alone = training.train(spec=spec, settings=settings, out_dir=tmp_path / f"alone{seed}", seed=seed)
        assert summary["c2c_from"] == alone["c2c_from"] and summary["c2c_from"] % 10 == 0
        a = pd.read_csv(tmp_path / f"stack{seed}" / "train_log.csv")
        b = pd.read_csv(tmp_path / f"alone{seed}" / "train_log.csv")
        assert a[["update", "task", "dataset"]].equals(b[["update", "task", "dataset"]])


# ---------------------------------------------------------------------------------------------
# Paper 004: all c2c pairs one data set


def _caption_set(name, lang, per_image, n_images, vocab):
    ids, idx, texts = [], [], []
    for image in range(n_images):
        for j in range(per_image):
            ids.append(f"img{image}")
            idx.append(j)
            texts.append(" ".join([lang] * (1 + j) + [f"w{image}"]))   # length tells the caption
    return CaptionSet(name=name, lang=lang, image_ids=np.array(ids), caption_idx=np.array(idx),
                      texts=texts, tokens=TokenTable.encode(vocab, texts))


def _lessons_table7_pairs(n_images=4):
    """004 Table 7's c2c data: 5 En + 5 De comparable captions, 1 Fr + 1 Cs per image, the six
    language pairs as six c2c data sets."""
    words = ["en", "de", "fr", "cs"] + [f"w{i}" for i in range(n_images)]
    vocab = build_vocabulary([" ".join(words)], min_count=1)
    sets = {"en": _caption_set("m30k.en", "en", 5, n_images, vocab),
            "de": _caption_set("m30k.de", "de", 5, n_images, vocab),
            "fr": _caption_set("m30k_task1.fr", "fr", 1, n_images, vocab),
            "cs": _caption_set("m30k_task1.cs", "cs", 1, n_images, vocab)}
    pairs = [("en", "de"), ("en", "fr"), ("en", "cs"), ("de", "fr"), ("de", "cs"), ("fr", "cs")]
    return [C2CData(f"{a}+{b}", sets[a], sets[b]) for a, b in pairs], vocab


def test_a_pool_holds_every_pair_once_and_batches_mix_language_pairs():
    parts, vocab = _lessons_table7_pairs(n_images=4)
    pool = PooledC2CData(parts)
    assert [len(p) for p in parts] == [100, 20, 20, 20, 20, 4] and len(pool) == 4 * 46
    indices = np.array([0, 100, 183, 99, 120])       # en+de first, en+fr first, fr+cs last, ...
    batch = pool.batch(indices)
    assert pool.part_of(indices).tolist() == [0, 1, 5, 0, 2]
    for row, (k, start) in enumerate([(0, 0), (1, 0), (5, 3), (0, 99), (2, 0)]):
        a, b = parts[k].pairs[start]
        want_a, want_b = parts[k].a.tokens.sequence(a), parts[k].b.tokens.sequence(b)
        assert batch.tokens_a[row, :int(batch.lengths_a[row])].tolist() == want_a
        assert batch.tokens_b[row, :int(batch.lengths_b[row])].tolist() == want_b
        assert int(batch.lengths_a[row]) == len(want_a) and (batch.tokens_a[row, len(want_a):] == 0).all()


def test_pooled_batches_draw_english_german_as_25_of_46_pairs_and_uniform_draws_as_1_of_6():
    parts, _ = _lessons_table7_pairs(n_images=4)
    pool = PooledC2CData(parts)
    stream = BatchStream(len(pool), 23, rng=stream_rng(1, "c2c"))   # 8 batches = one pass
    counts, mixed = Counter(), 0
    for _ in range(8 * 25):                                           # 25 passes
        part = pool.part_of(stream.next())
        counts.update(part.tolist())
        mixed += len(set(part.tolist())) > 1
    total = sum(counts.values())
    assert counts[0] / total == pytest.approx(25 / 46) and counts[5] / total == pytest.approx(1 / 46)
    assert all(counts[k] / total == pytest.approx(5 / 46) for k in (1, 2, 3, 4))
    assert mixed > 0                                                  # a batch mixes pairs
    # without the pool (paper 000): a c2c data set uniformly, then a batch of it
    sampler = TaskSampler(c2i=["x"], c2c=[p.name for p in parts], c2c_probability=1.0,
                          rng=stream_rng(1, "task-sampler"))
    drawn = Counter(sampler.draw()[1] for _ in range(6000))
    assert drawn["en+de"] / 6000 == pytest.approx(1 / 6, abs=0.02)


def test_a_run_with_c2c_pool_draws_its_c2c_batches_from_the_one_pool(world, tmp_path):
    spec, _ = world
    ref = {k: spec["c2i"][0][k] for k in ("captions", "features")}
    pooled = {**spec, "c2c": [spec["c2c"][0],
                              {"name": "m30k.de+m30k.en", "a": {**ref, "name": "m30k.de", "lang": "de"},
                               "b": {**ref, "name": "m30k.en", "lang": "en"}}]}
    _ = training.train(spec=pooled, settings={**SETTINGS, "c2c_pool": True, "max_updates": 20},
                       out_dir=tmp_path / "pool", seed=1)
    log = pd.read_csv(tmp_path / "pool" / "train_log.csv")
    assert set(log.loc[log["task"] == "c2c", "dataset"]) == {"m30k.en+m30k.de+m30k.de+m30k.en"}
    _ = training.train(spec=pooled, settings={**SETTINGS, "max_updates": 20}, out_dir=tmp_path / "sets", seed=1)
    log = pd.read_csv(tmp_path / "sets" / "train_log.csv")
    assert set(log.loc[log["task"] == "c2c", "dataset"]) == {"m30k.en+m30k.de", "m30k.de+m30k.en"}


# ---------------------------------------------------------------------------------------------
# Paper 004: monolingual models validated once per epoch


def test_an_epoch_is_one_pass_of_every_batch_stream():
    assert updates_per_epoch([100, 30], batch_size=16) == 6 + 1
    assert updates_per_epoch([10], batch_size=16) == 1        # smaller than a batch: one batch
    assert validation_interval(validate_every=500, validate_every_epochs=None, epoch_updates=7) == 500
    assert validation_interval(validate_every=500, validate_every_epochs=2, epoch_updates=7) == 14


def test_a_monolingual_run_validates_once_per_epoch(world, tmp_path):
    spec, _ = world
    english = {**spec, "experiment": "en", "c2i": spec["c2i"][:1], "c2c": [],
               "validation": {**spec["validation"], "langs": ["en"]}}
    # 60 images x 5 English captions = 300 items, batches of 16: 18 updates per epoch
    training.train(spec=english, settings={**SETTINGS, "validate_every_epochs": 1, "max_updates": 40},
                   out_dir=tmp_path, seed=1)
    log = pd.read_csv(tmp_path / "train_log.csv")
    assert log.loc[log["val_score"].notna(), "update"].tolist() == [18, 36, 40]


# ---------------------------------------------------------------------------------------------
# The rows of papers 003 and 004 carry these settings as data (config/experiments.yaml)


@pytest.mark.parametrize("configfile", ["config.yaml", "paper.yaml"])
def test_the_rows_of_papers_003_and_004_train_as_their_systems_did(configfile):
    from pathlib import Path

    from pseudopairs.config import check_config, load_config
    from pseudopairs.model.contract import training_settings
    from pseudopairs.model.settings import check_settings

    repo = Path(__file__).resolve().parents[1]
    config = check_config(load_config(repo / "config" / "experiments.yaml", repo / "config" / configfile))
    settings = {name: check_settings(training_settings(config, name)) for name in config["experiments"]}
    # 004's code (2018) and 003 had no c2c warm-up; paper 000's rows keep the config's
    assert settings["en_de_c2c"]["c2c_warmup"] == 0.96
    for name in ("t_en_de_c2c", "c1_en_de_c2c", "half_en_de_c2c", "t_multi_c2c", "c1_multi_c2c",
                 "t_multi_comp_c2c", "en_de_c2c_joint", "t_multi_joint"):
        assert settings[name]["c2c_warmup"] is None, name
    # 004's four-language c2c: all pairs one data set; paper 000's rows: a c2c data set uniformly
    pooled = {name for name, s in settings.items() if s["c2c_pool"]}
    assert pooled == {"t_multi_c2c", "c1_multi_c2c", "t_multi_comp_c2c"}
    # 004's monolingual models validate once per epoch; 000's (also 004's Full Monolingual) do not
    per_epoch = {name for name, s in settings.items() if s["validate_every_epochs"] is not None}
    assert per_epoch == {"t_en", "t_de", "t_fr", "t_cs", "half_en", "half_de", "c1_en", "c1_de"}
    assert all(settings[name]["validate_every_epochs"] == 1 for name in per_epoch)
