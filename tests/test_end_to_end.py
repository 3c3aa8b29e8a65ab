"""A tiny end-to-end run of the real workflow (world → text → features → train → evaluate →
tables) in a temporary directory, and the rerun behaviour after a config change."""

from __future__ import annotations

import json
import re

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
    config["model"].update(embedding_dim=16, joint_dim=32)
    config["training"].update(batch_size=16, validate_every=10, patience=2, max_updates=30,
                              learning_rate=2e-3)
    config["seeds"] = [1]
    return config


@pytest.mark.slow
def test_tiny_pipeline_builds_tables_and_reruns_only_stale_steps(tmp_path):
    config_path = tmp_path / "tiny.yaml"
    config = tiny_config()
    config_path.write_text(yaml.safe_dump(config))
    targets = ["results/table3.csv", "results/table7.csv"]
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
    log = pd.read_csv(tmp_path / "results/models/en_de_c2c/seed1/train_log.csv")
    assert list(log.columns) == ["update", "task", "dataset", "loss", "val_score"]
    assert set(log["task"]) == {"c2i", "c2c"}
    assert log["val_score"].notna().sum() == 3  # validations at 10, 20, 30
    assert (tmp_path / "results/logs/train/en_de_c2c.seed1.log").exists()
    assert (tmp_path / "results/benchmarks/features/m30k.train.tsv").exists()
    assert not list((tmp_path / "results").rglob("*.tmp*")), "temporary files left behind"

    # Nothing is stale: a dry run schedules nothing.
    result = run_snakemake(tmp_path, *targets, "-n", "--cores", "2", "--configfile", str(config_path))
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr

    # A training change reruns training, evaluation and tables, but not data, text or features.
    config["training"]["learning_rate"] = 1e-3
    config_path.write_text(yaml.safe_dump(config))
    result = run_snakemake(tmp_path, *targets, "-n", "--cores", "2", "--configfile", str(config_path))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts == {"train": 5, "evaluate": 5, "table": 2, "total": 12}
