"""A tiny end-to-end run of the real workflow (world → text → features → train → evaluate →
tables) in a temporary directory, and the rerun behaviour after a config change."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from test_workflow import job_counts


def tiny_config() -> dict:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["world"].update(image_size=64, images={"m30k": {"train": 40, "val": 16, "test": 16},
                                                  "coco": {"train": 40, "val": 8, "test": 8}})
    config["vocab"]["min_count"] = 1
    config["features"].update(resize=64, crop=56, batch_size=16, workers=0, shard_size=32)
    # the demo's feature extractor, pretrained on a handful of scenes (rule pretrain_features)
    config["feature_pretraining"].update(images=16, held_out=4, epochs=1, batch_size=8, threads=1)
    config["model"].update(embedding_dim=16, joint_dim=32)
    # c2c from the first update: 30 updates are too few to leave the plateau (the c2c warm-up)
    config["training"].update(batch_size=16, validate_every=10, patience=2, max_updates=30,
                              learning_rate=2e-3, c2c_warmup=None)
    at_seeds(config, [1])
    # one job per model: the rerun counts below are per model (stack jobs: the test after it)
    config["training"]["stack"] = [1]
    return config


def at_seeds(config: dict, seeds: list[int]) -> dict:
    """``seeds`` for the config, for every named seed list the tables of experiments.yaml name
    (the method check's tables: five) and for every table the config gives seeds of its own, so
    that a layered tiny config trains these seeds alone."""
    config["seeds"] = seeds
    for name in config.get("seed_lists", {}):
        config["seed_lists"][name] = list(seeds)
    for table in config.get("tables", {}).values():
        table["seeds"] = seeds
    return config


TINY_TABLE4 = [{"label": "De + COCO", "experiment": "de_coco"},
               {"label": "+ fine-tune", "experiment": "de_coco_pseudo_ft"},
               {"label": "+ pseudo CSLS", "experiment": "de_coco_csls", "beyond_paper": True}]


@pytest.mark.slow
def test_tiny_pipeline_builds_tables_and_reruns_only_stale_steps(tmp_path):
    config_path = tmp_path / "tiny.yaml"
    config = tiny_config()
    # A layered config file: only what differs from config/config.yaml (+ experiments.yaml).
    config.setdefault("tables", {})["table4"] = {"rows": TINY_TABLE4}
    config_path.write_text(yaml.safe_dump(config))
    targets = ["results/table3.csv", "results/table7.csv", "results/table4.csv"]
    result = run_snakemake(tmp_path, *targets, "--cores", "2", "--configfile", str(config_path))
    assert result.returncode == 0, result.stderr[-3000:]

    table3 = pd.read_csv(tmp_path / "results/table3.csv")
    assert list(table3["row"]) == ["En+De+c2c", "+ COCO"]
    assert list(table3["n"]) == [1, 1]
    assert table3.loc[1, "paper_de_rsum"] == 344.6
    metrics = json.loads((tmp_path / "results/models/en_de_coco_c2c/seed1/metrics.json").read_text())
    for lang in ("en", "de"):
        m = metrics["retrieval"][lang]
        assert table3.loc[1, f"{lang}_rsum_mean"] == pytest.approx(m["rsum"], abs=1e-3)
        assert m["rsum"] == pytest.approx(sum(m[k] for k in ("i2t_r1", "i2t_r5", "i2t_r10",
                                                              "t2i_r1", "t2i_r5", "t2i_r10")))
    table7 = pd.read_csv(tmp_path / "results/table7.csv")
    assert table7.loc[0, "row"] == "DPCCA" and table7.loc[0, "n"] == 0
    assert 0 <= table7.loc[1, "en2de_r1_mean"] <= 100
    table4 = pd.read_csv(tmp_path / "results/table4.csv")
    assert list(table4["row"]) == ["De + COCO", "+ fine-tune", "+ pseudo CSLS"]
    assert list(table4["beyond_paper"]) == [False, False, True]
    log = pd.read_csv(tmp_path / "results/models/en_de_c2c/seed1/train_log.csv")
    assert list(log.columns) == ["update", "task", "dataset", "loss", "val_score"]
    assert set(log["task"]) == {"c2i", "c2c"}
    assert log["val_score"].notna().sum() == 3  # validations at 10, 20, 30
    # the fine-tuned pseudopair model trained on the pairs mined by De+COCO (seed 1), kept its vocabulary
    ft_log = pd.read_csv(tmp_path / "results/models/de_coco_pseudo_ft/seed1/train_log.csv")
    assert set(ft_log["dataset"]) == {"m30k.de", "coco.en", "coco.de-pseudo@de_coco"}
    assert ((tmp_path / "results/models/de_coco_pseudo_ft/seed1/vocab.json").read_text()
            == (tmp_path / "results/models/de_coco/seed1/vocab.json").read_text())
    pairs = pd.read_parquet(tmp_path / "results/pseudopairs/de_coco/seed1/pairs.parquet")
    assert len(pairs) == 40 * 5 and set(pairs["match_lang"]) == {"de"}
    assert (tmp_path / "results/logs/train/en_de_c2c.seed1.log").exists()
    assert (tmp_path / "results/benchmarks/features/m30k.train.tsv").exists()
    pretrained = json.loads((tmp_path / "results/features/pretrained/resnet18.pt.json").read_text())
    assert pretrained["arch"] == "resnet18" and pretrained["updates"] == 2
    assert (tmp_path / "results/logs/pretrain_features/resnet18.log").exists()
    assert (tmp_path / "results/benchmarks/mine/de_coco.csls.seed1.tsv").exists()
    assert not list((tmp_path / "results").rglob("*.tmp*")), "temporary files left behind"

    def dry_run_counts(changed: dict) -> dict:
        config_path.write_text(yaml.safe_dump(changed))
        result = run_snakemake(tmp_path, *targets, "-n", "--cores", "2", "--configfile", str(config_path))
        assert result.returncode == 0, result.stderr
        if "Nothing to be done" in result.stdout + result.stderr:
            return {}
        return job_counts(result.stdout)

    # Nothing is stale: a dry run schedules nothing.
    assert dry_run_counts(config) == {}

    # A mining parameter of one pseudopair set reruns that set's mining and what depends on it.
    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["pseudopairs"] = {"de_coco.csls": {"mining": {"criterion": "csls", "k": 3}}}
    assert dry_run_counts(changed) == {"mine": 1, "pseudopair_captions": 1, "train": 1, "evaluate": 1,
                                       "table": 1, "total": 5}

    # One experiment's own training setting reruns that experiment only (and its table).
    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["experiments"] = {"de_coco_pseudo_ft": {"training": {"learning_rate": 1e-3}}}
    assert dry_run_counts(changed) == {"train": 1, "evaluate": 1, "table": 1, "total": 3}

    # The source model's setting reruns it, its pseudopairs and everything trained on them.
    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["experiments"] = {"de_coco": {"training": {"learning_rate": 1e-3}}}
    assert dry_run_counts(changed) == {"train": 3, "evaluate": 3, "mine": 2, "pseudopair_captions": 2,
                                       "table": 2, "total": 12}

    # A global training change reruns training, evaluation, mining and tables, but not data,
    # text or features.
    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["training"]["learning_rate"] = 1e-3
    counts = dry_run_counts(changed)
    assert counts == {"train": 7, "evaluate": 7, "mine": 2, "pseudopair_captions": 2, "table": 3, "total": 21}

    # The corpora's sizes do not change the pretraining scenes: the extractor is not retrained
    # (the world and everything after it is).
    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["world"]["images"]["coco"]["train"] = 48
    counts = dry_run_counts(changed)
    assert counts["world"] == 1 and counts["features"] >= 1 and "pretrain_features" not in counts
    # A pretraining setting retrains the extractor and recomputes every feature file.
    changed = yaml.safe_load(yaml.safe_dump(config))
    changed["feature_pretraining"]["seed"] = 1
    counts = dry_run_counts(changed)
    assert counts["pretrain_features"] == 1 and counts["features"] == 4 and "world" not in counts


@pytest.mark.slow
def test_tiny_stack_job_trains_its_block_and_a_new_seed_retrains_nothing_else(tmp_path):
    """Seeds 1-2 of one experiment in one train job (training.stack [2]) and one
    evaluation job: each model's files where a job of its own writes them, one log per stack;
    nothing is stale afterwards; adding seed 3 (a new stack) plans seed 3's jobs only."""
    config_path = tmp_path / "tiny.yaml"
    config = tiny_config()
    config["training"]["stack"] = [2]
    at_seeds(config, [1, 2])
    config_path.write_text(yaml.safe_dump(config))
    targets = [f"results/models/en_de/seed{seed}/metrics.json" for seed in (1, 2)]
    result = run_snakemake(tmp_path, *targets, "--cores", "2", "--configfile", str(config_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train_stack_seeds1_2" in result.stderr + result.stdout
    for seed in (1, 2):
        model = tmp_path / f"results/models/en_de/seed{seed}"
        assert sorted(p.name for p in model.iterdir()) == ["checkpoint.pt", "metrics.json", "train_log.csv",
                                                         "vocab.json"]
        assert json.loads((model / "metrics.json").read_text())["seed"] == seed
    log = (tmp_path / "results/logs/train/en_de.seeds1-2.log").read_text()
    assert "trained en_de seed 1:" in log and "trained en_de seed 2:" in log
    assert (tmp_path / "results/benchmarks/evaluate/en_de.seeds1-2.tsv").exists()
    rerun = run_snakemake(tmp_path, *targets, "-n", "--cores", "2", "--configfile", str(config_path))
    assert "Nothing to be done" in rerun.stdout + rerun.stderr
    at_seeds(config, [1, 2, 3])
    config_path.write_text(yaml.safe_dump(config))
    more = run_snakemake(tmp_path, *targets, "results/models/en_de/seed3/metrics.json", "-n", "--cores", "2",
                         "--configfile", str(config_path))
    assert more.returncode == 0, more.stderr[-3000:]
    assert job_counts(more.stdout) == {"train": 1, "evaluate": 1, "total": 2}

