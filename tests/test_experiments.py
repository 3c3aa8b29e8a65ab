"""Experiments are data: each stage's contract (``pseudopairs.<stage>.contract``) derives its jobs'
inputs from the config's declarations."""

from __future__ import annotations

import copy
import json
import pytest

from conftest import REPO
from pseudopairs.data import experiments as ex
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.data import contract as data_contract
from pseudopairs.evaluation import contract as evaluation_contract
from pseudopairs.mining import contract as mining_contract
from pseudopairs.mining.job import MiningJob
from pseudopairs.model import contract as model_contract
from pseudopairs.report import contract as report_contract
from pseudopairs.translation import contract as translation_contract


def demo() -> dict:
    return check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml"))


def test_training_spec_of_aligned_c2c_experiment():
    spec = model_contract.training_spec(demo(), "en_de_c2c", 2)
    assert [d["name"] for d in spec["c2i"]] == ["m30k.en", "m30k.de"]
    assert spec["c2i"][1] == {"name": "m30k.de", "lang": "de",
                              "captions": "results/captions/m30k/train.parquet",
                              "features": "results/features/m30k/train.npz"}
    assert spec["c2c"][0]["name"] == "m30k.en+m30k.de"
    assert (spec["c2c"][0]["a"]["lang"], spec["c2c"][0]["b"]["lang"]) == ("en", "de")
    assert spec["validation"] == {"captions": "results/captions/m30k/val.parquet",
                                  "features": "results/features/m30k/val.npz", "langs": ["en", "de"]}
    assert spec["init_from"] is None
    assert spec["vocab"] == {"min_count": 4}


def test_languages_come_from_dataset_declarations_not_names():
    config = demo()
    config["datasets"]["english_coco"] = {"corpus": "coco", "lang": "en"}
    config["experiments"]["x"] = {"c2i": ["english_coco"], "c2c": []}
    spec = model_contract.training_spec(config, "x", 1)
    assert spec["validation"]["langs"] == ["en"]
    assert spec["c2i"][0]["features"] == "results/features/coco/train.npz"


def test_finetune_starts_from_the_same_seed_of_the_source():
    config = copy.deepcopy(demo())
    config["experiments"]["ft"] = {"c2i": ["m30k.de", "coco.en"], "finetune": "de_coco"}
    spec = model_contract.training_spec(config, "ft", 3)
    assert spec["init_from"] == "results/models/de_coco/seed3/checkpoint.pt"
    assert spec["vocab"] == {"path": "results/models/de_coco/seed3/vocab.json"}  # the source's
    assert {"results/models/de_coco/seed3/checkpoint.pt",
            "results/models/de_coco/seed3/vocab.json"} <= set(model_contract.training_inputs(config, "ft", 3))


def test_training_inputs_and_table_inputs():
    config = demo()
    inputs = model_contract.training_inputs(config, "de_coco", 1)
    assert inputs == sorted({"results/captions/m30k/train.parquet",
                             "results/features/m30k/train.npz", "results/captions/coco/train.parquet",
                             "results/features/coco/train.npz", "results/captions/m30k/val.parquet",
                             "results/features/m30k/val.npz"})
    assert report_contract.table_inputs(config, "table3") == [
        f"results/models/{e}/seed{s}/metrics.json" for e in ("en_de_c2c", "en_de_coco_c2c") for s in (1, 2, 3, 4, 5)]
    # a table without seeds of its own reads the config's
    assert report_contract.table_inputs(config, "table4")[:3] == [
        f"results/models/de_coco/seed{s}/metrics.json" for s in (1, 2, 3)]
    # Table 7's DPCCA row has no experiment: it contributes no input.
    assert all("DPCCA" not in p for p in report_contract.table_inputs(config, "table7"))
    assert data_contract.corpora_with_images(config) == ["coco", "m30k"]
    assert data_contract.text_corpora(config) == ["coco", "m30k", "m30k_task1"]


def test_pseudopair_data_set_of_seed_s_uses_the_pairs_mined_by_seed_s_of_its_source():
    config = demo()
    spec = model_contract.training_spec(config, "en_de_coco_c2c_pseudo25_ft", 2)
    pseudo = spec["c2i"][3]
    assert pseudo == {"name": "coco.de-pseudo25@en_de_coco_c2c", "lang": "de",
                      "captions": "results/pseudopairs/en_de_coco_c2c/seed2/captions.p25.parquet",
                      "features": "results/features/coco/train.npz"}   # the COCO images
    # c2c over COCO English <-> its pseudo-German captions (paper §5), next to the M30K c2c
    assert [c["name"] for c in spec["c2c"]] == ["m30k.en+m30k.de", "coco.en+coco.de-pseudo25@en_de_coco_c2c"]
    assert spec["init_from"] == "results/models/en_de_coco_c2c/seed2/checkpoint.pt"
    mining = mining_contract.mining_job(config, "en_de_coco_c2c", 2)
    assert mining.checkpoint == "results/models/en_de_coco_c2c/seed2/checkpoint.pt"
    assert mining.vocab == "results/models/en_de_coco_c2c/seed2/vocab.json"
    assert (mining.queries.captions, mining.queries.lang) == ("results/captions/coco/train.parquet", "en")
    assert (mining.database.captions, mining.database.lang) == ("results/captions/m30k/train.parquet", "de")
    assert (mining.criterion, mining.params) == ("cosine", {})
    csls = mining_contract.mining_job(config, "de_coco.csls", 1)
    assert (csls.criterion, csls.params, csls.engine.device) == ("csls", {"k": 10}, "auto")
    # the job travels as nested JSON and comes back equal
    assert MiningJob.from_dict(json.loads(csls.to_json())) == csls
    # a retrained pseudopair experiment builds its vocabulary from its own data, pseudopairs included
    assert model_contract.training_spec(config, "de_coco_pseudo", 1)["vocab"] == {"min_count": 4}


def test_synthetic_data_sets_exist_for_training_only_and_need_a_seed():
    config = demo()
    with pytest.raises(ValueError, match="training split only"):
        data_contract.dataset_files(config, "coco.de-mt", "val")
    with pytest.raises(ValueError, match="depend on the seed"):
        data_contract.dataset_files(config, "coco.de-pseudo@de_coco")
    assert translation_contract.translation_source(config, "coco.de-mt")["captions"] == "results/captions/coco/train.parquet"
    assert data_contract.dataset_files(config, "coco.de-mt")["captions"] == "results/translations/coco.de-mt/train.parquet"
    assert translation_contract.translation_datasets(config) == ["coco.de-mt"]


def test_statistics_and_figure_specs():
    config = demo()
    stats = report_contract.pseudopair_stats_spec(config)
    assert stats["top"] == 150 and stats["seeds"] == [1, 2, 3]
    assert stats["sets"]["de_coco"] == {"source": "de_coco", "criterion": "cosine",
                                        "queries": "coco.en", "database": "m30k.de",
                                        "paper": {"used_share_text": 0.37, "top_share_text": 0.23,
                                                  "jaccard_seeds": 0.51, "agreement_seeds": 0.33}}
    assert stats["sets"]["en_de_coco_c2c.mutual"]["criterion"] == "mutual"
    # the reverse direction and the rounds' sets are described like the others
    assert stats["sets"]["de_coco.reverse"]["queries"] == "m30k.de"
    assert stats["sets"]["de_coco.round2"]["source"] == "de_coco_round1"
    # 14 sets (2 sources x 7 criteria) + the reverse set + 2 chains x 3 rounds; x seeds x (pairs, stats);
    # + the demo world's caption meanings and scenes (pseudopair precision)
    assert len(report_contract.pseudopair_stats_inputs(config)) == (14 + 1 + 6) * 3 * 2 + 2
    assert stats["meanings"]["captions"] == "results/world/caption_meanings.parquet"
    assert stats["meanings"]["scenes"] == "results/world/manifest.json"
    assert stats["meanings"]["database_corpus"]["de_coco.reverse"] == "coco"
    assert stats["meanings"]["database_corpus"]["de_coco.round2"] == "m30k"
    # the real data know nothing of what a caption means: no precision, no meaning inputs
    paper = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "paper.yaml"))
    assert report_contract.pseudopair_stats_spec(paper)["meanings"] == {}
    assert not [p for p in report_contract.pseudopair_stats_inputs(paper) if "world" in p]
    assert stats["files"]["de_coco"]["2"] == {"pairs": "results/pseudopairs/de_coco/seed2/pairs.parquet",
                                              "stats": "results/pseudopairs/de_coco/seed2/stats.json"}
    # pseudopair_stats.sets: the statistics of chosen sets only (the rehearsal: Table 5's set)
    config["pseudopair_stats"].update(sets=["en_de_coco_c2c", "de_coco"], compare=[])
    chosen = report_contract.pseudopair_stats_spec(config)
    assert list(chosen["sets"]) == list(chosen["files"]) == ["de_coco", "en_de_coco_c2c"]
    assert len(report_contract.pseudopair_stats_inputs(config)) == 2 * 3 * 2 + 2
    figure = report_contract.pseudopair_figure_spec(config)
    assert figure["pairs"] == {"de_coco": "results/pseudopairs/de_coco/seed1/pairs.parquet",
                               "en_de_coco_c2c": "results/pseudopairs/en_de_coco_c2c/seed1/pairs.parquet"}
    assert figure["images"] == "results/images/coco/train.parquet"


def test_an_experiments_own_training_settings_override_the_config():
    config = copy.deepcopy(demo())
    config["experiments"]["de_coco"]["training"] = {"learning_rate": 1e-3, "patience": 7}
    settings = model_contract.run_settings(config, "de_coco")
    assert (settings.training.learning_rate, settings.training.patience) == (1e-3, 7)
    assert settings.training.batch_size == config["training"]["batch_size"]
    assert settings.model.joint_dim == config["model"]["joint_dim"]          # the model's settings too
    assert model_contract.run_settings(config, "en").training.learning_rate == config["training"]["learning_rate"]
    # the job passes each section's explicit values; regrouping seeds (training.stack) is no setting
    # of a run, so it reruns no job whose block is unchanged
    job = model_contract.training_job(config, "de_coco", [1, 2, 3])
    assert job.to_dict()["settings"]["training"]["patience"] == 7 and "stack" not in job.to_dict()["settings"]["training"]
    assert list(job.models) == ["1", "2", "3"] and job.models["2"].out_dir == "results/models/de_coco/seed2"


def test_paper_004_french_and_czech_validate_and_test_on_the_translation_portion():
    """Fr and Cs exist in the translation portion only: a model trained on them validates those
    languages on its val split (same images, the evaluation corpus' features); a model shown by a
    translation-portion table is also tested there in that table's languages. Every other model's
    specs (job parameters) stay as they were, so nothing already trained reruns."""
    config = demo()
    spec = model_contract.training_spec(config, "t_multi", 1)
    assert spec["validation"] == {"captions": "results/captions/m30k/val.parquet",
                                  "features": "results/features/m30k/val.npz",
                                  "langs": ["en", "de", "fr", "cs"],
                                  "lang_captions": {"fr": "results/captions/m30k_task1/val.parquet",
                                                    "cs": "results/captions/m30k_task1/val.parquet"}}
    assert [d["features"] for d in spec["c2i"]] == ["results/features/m30k/train.npz"] * 4
    assert "results/captions/m30k_task1/val.parquet" in model_contract.training_inputs(config, "t_multi", 1)
    assert "lang_captions" not in model_contract.training_spec(config, "t_en", 1)["validation"]
    evaluation = evaluation_contract.evaluation_data(config, "t_fr")
    assert evaluation.portion_langs == ["en", "de", "fr", "cs"]     # Tables 6 and 7
    assert evaluation.portion_captions == "results/captions/m30k_task1/test.parquet"
    assert evaluation_contract.evaluation_data(config, "t_multi_comp").portion_langs == ["fr", "cs"]   # Table 7 only
    for name in ("en", "c1_en_de_c2c", "t_en_de"):       # tested on the comparable test only
        assert evaluation_contract.evaluation_data(config, name) == evaluation_contract.evaluation_data(config)
        assert (evaluation_contract.evaluation_data(config, name).portion_langs,
                evaluation_contract.evaluation_data(config, name).portion_captions) == ([], None)
    config["evaluation"]["portion_langs"] = ["cs"]       # every model, then the tables' languages
    assert evaluation_contract.evaluation_data(config, "en").portion_langs == ["cs"]
    assert evaluation_contract.evaluation_data(config, "t_multi").portion_langs == ["cs", "en", "de", "fr"]


def test_tables_name_seed_lists_that_a_layered_config_changes_once():
    """config.yaml's tables name `check` and `lessons`; the paper configuration changes the two
    lists and every table naming them follows; a name with no list is refused by its key."""
    config = demo()
    assert config["tables"]["table6"]["seeds"] == "check" and config["seed_lists"]["check"] == [1, 2, 3, 4, 5]
    paper = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                                     REPO / "config" / "paper.yaml"))
    assert [ex.table_seeds(paper, t) for t in ("table1", "table7", "table_lessons5", "table_smalr2")] == \
        [[1, 2, 3], [1, 2, 3], list(range(1, 11)), [1, 2, 3]]
    rehearsal = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                                         REPO / "config" / "paper.yaml", REPO / "config" / "rehearsal.yaml"))
    assert ex.table_seeds(rehearsal, "table5") == [1] and ex.table_seeds(rehearsal, "table3") == [1]
    bad = copy.deepcopy(config)
    bad["tables"]["table3"]["seeds"] = "chek"
    with pytest.raises(ValueError, match=r"'tables.table3.seeds': no seed list 'chek' under seed_lists "
                                         r"\(known: check, lessons, smalr\)"):
        check_config(bad)


def test_a_per_language_test_corpus_is_checked():
    bad = copy.deepcopy(demo())
    bad["tables"]["table_smalr2"]["lang_test_corpora"] = {"en": "coco", "it": "m30k"}
    with pytest.raises(ConfigError) as err:
        check_config(bad)
    assert "config key 'tables.table_smalr2.lang_test_corpora.it': not one of the table's langs" in str(err.value)
    assert ("config key 'tables.table_smalr2.lang_test_corpora.en': 'coco' is neither the evaluation corpus "
            "'m30k' nor the translation corpus 'm30k_task1'") in str(err.value)
    bad = copy.deepcopy(demo())
    bad["tables"]["table_smalr2"]["lang_test_corpora"] = {"fr": "m30k"}     # no French there
    with pytest.raises(ConfigError, match=r"tables.table_smalr2.langs.2': models are not tested in 'fr' "
                                          r"on corpus 'm30k' \(languages there: en, de\)"):
        check_config(bad)


def test_tables_average_over_their_own_seeds():
    """The demo's 004 tables use two seeds, the method check's tables five, the others the
    config's three; a model several tables show is trained for the union."""
    config = demo()
    assert ex.table_seeds(config, "table1") == [1, 2, 3, 4, 5] and ex.table_seeds(config, "table_lessons2") == [1, 2]
    assert ex.table_seeds(config, "table4") == [1, 2, 3]
    spec = report_contract.table_spec(config, "table_lessons4")
    assert spec["metrics"]["t_de"] == {"1": "results/models/t_de/seed1/metrics.json",
                                       "2": "results/models/t_de/seed2/metrics.json"}
    assert "retrieval_key" not in spec                                      # the comparable test
    assert report_contract.table_spec(config, "table_lessons6")["retrieval_key"] == "portion_retrieval"
    assert "retrieval_keys" not in report_contract.table_spec(config, "table_lessons6")
    # 002's Table 2 (and its Figure 3): En and De on test 2016's five captions per image, Fr and Cs
    # on the translation portion's one (002 §4)
    smalr2 = {"en": "retrieval", "de": "retrieval", "fr": "portion_retrieval", "cs": "portion_retrieval"}
    assert report_contract.table_spec(config, "table_smalr2")["retrieval_keys"] == smalr2
    assert report_contract.parameters_figure_spec(config, "smalr_params")["retrieval_keys"] == smalr2
    assert [ex.table_lang_test_corpus(config, "table_smalr2", lang) for lang in ("en", "de", "fr", "cs")] == \
        ["m30k", "m30k", "m30k_task1", "m30k_task1"]
    assert ex.table_experiments(config, "table_lessons4") == ["t_en", "t_de", "t_en_de", "t_en_de_c2c",
                                                              "c1_en_de", "c1_en_de_c2c"]
    models = ex.shown_models(config)
    assert models["en"] == [1, 2, 3, 4, 5] and models["t_fr"] == [1, 2]
    assert models["de_coco_csls"] == [1, 2, 3] and models["c1_en"] == [1, 2]
    logs = report_contract.training_curves_spec(config)["logs"]
    assert set(logs["t_fr"]) == {"1", "2"} and set(logs["en"]) == {"1", "2", "3", "4", "5"}
    assert set(report_contract.method_check_spec(config)["runs"]["t_cs"]) == {"1", "2"}
