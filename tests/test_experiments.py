"""Experiments are data: their training inputs are derived from the config's declarations."""

from __future__ import annotations

import copy

from conftest import REPO
from pseudopairs import experiments as ex
from pseudopairs.config import check_config, load_config


def demo() -> dict:
    return check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml"))


def test_training_spec_of_aligned_c2c_experiment():
    spec = ex.training_spec(demo(), "en_de_c2c", 2)
    assert [d["name"] for d in spec["c2i"]] == ["m30k.en", "m30k.de"]
    assert spec["c2i"][1] == {"name": "m30k.de", "lang": "de",
                              "captions": "results/captions/m30k/train.parquet",
                              "features": "results/features/m30k/train.npz"}
    assert spec["c2c"][0]["name"] == "m30k.en+m30k.de"
    assert (spec["c2c"][0]["a"]["lang"], spec["c2c"][0]["b"]["lang"]) == ("en", "de")
    assert spec["validation"] == {"captions": "results/captions/m30k/val.parquet",
                                  "features": "results/features/m30k/val.npz", "langs": ["en", "de"]}
    assert spec["init_from"] is None


def test_languages_come_from_dataset_declarations_not_names():
    config = demo()
    config["datasets"]["english_coco"] = {"corpus": "coco", "lang": "en"}
    config["experiments"]["x"] = {"c2i": ["english_coco"], "c2c": []}
    spec = ex.training_spec(config, "x", 1)
    assert spec["validation"]["langs"] == ["en"]
    assert spec["c2i"][0]["features"] == "results/features/coco/train.npz"


def test_finetune_starts_from_the_same_seed_of_the_source():
    config = copy.deepcopy(demo())
    config["experiments"]["ft"] = {"c2i": ["m30k.de", "coco.en"], "finetune": "de_coco"}
    spec = ex.training_spec(config, "ft", 3)
    assert spec["init_from"] == "results/models/de_coco/seed3/checkpoint.pt"
    assert "results/models/de_coco/seed3/checkpoint.pt" in ex.training_inputs(config, "ft", 3)


def test_training_inputs_and_table_inputs():
    config = demo()
    inputs = ex.training_inputs(config, "de_coco", 1)
    assert inputs == sorted({"results/vocab.json", "results/captions/m30k/train.parquet",
                             "results/features/m30k/train.npz", "results/captions/coco/train.parquet",
                             "results/features/coco/train.npz", "results/captions/m30k/val.parquet",
                             "results/features/m30k/val.npz"})
    assert ex.table_inputs(config, "table3") == [
        "results/models/en_de_c2c/seed1/metrics.json", "results/models/en_de_c2c/seed2/metrics.json",
        "results/models/en_de_coco_c2c/seed1/metrics.json", "results/models/en_de_coco_c2c/seed2/metrics.json"]
    # Table 7's DPCCA row has no experiment: it contributes no input.
    assert all("DPCCA" not in p for p in ex.table_inputs(config, "table7"))
    assert ex.corpora_with_images(config) == ["coco", "m30k"]
    assert ex.text_corpora(config) == ["coco", "m30k", "m30k_task1"]
