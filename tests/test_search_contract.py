"""The search stage's contract: the indexes rule ``all`` builds (``search.indexes``), what the
export job reads (so a changed input exports again), and the config check of the entries."""

from __future__ import annotations

import copy

import pytest

from conftest import REPO
from pseudopairs.workflow.config import ConfigError, check_config, load_config, load_schema
from pseudopairs.search import contract

DEMO = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
SCHEMA = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")


def test_the_demo_indexes_its_main_model_over_the_aligned_test_split():
    assert contract.index_targets(DEMO) == ["results/search/de_coco_pseudo_ft/seed1/m30k_test"]


def test_own_data_indexes_its_french_model():
    own = load_config(REPO / "config" / "config.yaml", REPO / "config" / "own-data.yaml")
    assert contract.index_targets(own) == ["results/search/fr_photos_pseudo_ft/seed1/cartes_test"]
    assert contract.check(own) == []


def test_the_export_reads_the_run_its_data_and_the_feature_network():
    inputs = contract.export_inputs(DEMO, "de_coco_pseudo_ft", 1)
    run = "results/models/de_coco_pseudo_ft/seed1"
    for path in (f"{run}/checkpoint.pt", f"{run}/vocab.json", f"{run}/metrics.json",
                 "results/captions/m30k/train.parquet", "results/features/m30k/train.npz",
                 "results/features/pretrained/resnet18.pt",  # the demo's extractor
                 "results/models/de_coco/seed1/checkpoint.pt"):  # fine-tuned from it
        assert path in inputs, path
    assert inputs == sorted(set(inputs))
    truecased = copy.deepcopy(DEMO)
    truecased["text"]["case"] = "truecase"
    extra = set(contract.export_inputs(truecased, "de_coco_pseudo_ft", 1)) - set(inputs)
    assert extra == {"results/text/truecase.de.model", "results/text/truecase.en.model"}


def test_an_entry_naming_an_unknown_experiment_or_corpus_is_refused_naming_the_key():
    config = copy.deepcopy(DEMO)
    config["search"] = {"indexes": [{"experiment": "de_coco_pseudo_ft", "seed": 1, "corpus": "m30k", "split": "test"},
                                    {"experiment": "fr_photos", "seed": 1, "corpus": "cartes", "split": "test"}]}
    errors = contract.check(config)
    assert errors[0].startswith("config key 'search.indexes[1].experiment': 'fr_photos' is not an experiment")
    assert errors[1] == ("config key 'search.indexes[1].corpus': 'cartes' is not a declared corpus "
                         "(coco, m30k, m30k_task1)")
    assert len(errors) == 2


def test_the_schema_takes_train_val_or_test_and_an_empty_list():
    config = copy.deepcopy(DEMO)
    config["search"] = {"indexes": []}
    check_config(config, SCHEMA)
    assert contract.index_targets(config) == []
    config["search"] = {"indexes": [{"experiment": "de_coco_pseudo_ft", "seed": 1, "corpus": "m30k",
                                     "split": "dev"}]}
    with pytest.raises(ConfigError, match=r"search\.indexes\.0\.split.*'dev'"):
        check_config(config, SCHEMA)
