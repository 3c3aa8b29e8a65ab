"""SMALR in the pipeline (paper 002): the train-fasttext and pretrain-hem steps on a tiny world,
their outputs read by a hem training run, the experiments' specs, 002's Table 2 as config data,
and the workflow's jobs in both configurations."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch

from conftest import paper_dry_run, run_snakemake, run_settings
from pseudopairs.model import contract as ex
from pseudopairs.core.io import read_captions
from pseudopairs.model import training
from pseudopairs.model.text_encoders import load_vocabulary
from pseudopairs.smalr import paper
from pseudopairs.model import smalr_contract as specs
from pseudopairs.smalr.step import pretrain_hem_step, train_fasttext_step
from test_experiments import demo
from test_training import SETTINGS, _world
from test_workflow import job_counts, model_counts

pytest.importorskip("gensim", reason="pip install 'pseudopairs[smalr]' (gensim)")
torch.set_num_threads(1)

HEM = {"specific_per_language": 3, "latent_size": 8, "pca_dim": 4, "steps": 20, "batch_images": 8}


def _steps(root, *, seed=1, hem=HEM):
    spec, _ = _world(root)
    captions, features = spec["c2i"][0]["captions"], spec["c2i"][0]["features"]
    vectors = {}
    for lang in ("en", "de"):
        vectors[lang] = str(root / f"fasttext.{lang}.vec")
        train_fasttext_step({"experiment": "x", "seed": seed, "lang": lang, "captions": [captions],
                             "settings": {"dim": 8, "epochs": 2}}, vectors[lang])
    hem_spec = {"experiment": "x", "seed": seed, "vectors": vectors, "settings": hem,
                "sentences": [{"captions": captions, "features": features, "lang": lang}
                              for lang in ("en", "de")]}
    summary = pretrain_hem_step(hem_spec, vocab_out=root / "hem_vocab.json", init_out=root / "hem_init.pt")
    return spec, summary


def test_steps_build_a_hem_vocabulary_that_training_reads(tmp_path):
    spec, summary = _steps(tmp_path)
    frame = read_captions(spec["c2i"][0]["captions"])
    vocab = load_vocabulary(tmp_path / "hem_vocab.json")
    for lang in ("en", "de"):
        counts = Counter(w for t in frame[frame["lang"] == lang]["text"] for w in t.split())
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        assert vocab.specific[lang] == tuple(ranked[:3])          # each language's 3 most frequent
        assert set(vocab.latent[lang]) == set(ranked[3:])         # every other word on a latent token
    assert summary["specific"] == 6 and summary["latent_used"] == vocab.latent_size <= 8
    assert summary["sentences"] == len(frame) and summary["images"] == 60
    init = torch.load(tmp_path / "hem_init.pt", weights_only=True)
    assert tuple(init["weight"].shape) == (2 + 6 + vocab.latent_size, 4)
    run = {**spec, "vocab": {"path": str(tmp_path / "hem_vocab.json")},
           "text_init": str(tmp_path / "hem_init.pt")}
    result = training.train(spec=run, settings=run_settings({**SETTINGS, "text_encoder": "hem", "objective": "smalr",
                                                "max_updates": 10}), out_dir=tmp_path / "model", seed=1)
    assert result["updates"] == 10
    assert load_vocabulary(tmp_path / "model" / "vocab.json") == vocab


def test_steps_are_deterministic_and_language_agnostic_has_no_specific_rows(tmp_path):
    _steps(tmp_path / "a")
    _steps(tmp_path / "b")
    for name in ("fasttext.en.vec", "hem_vocab.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert torch.equal(torch.load(tmp_path / "a" / "hem_init.pt", weights_only=True)["weight"],
                       torch.load(tmp_path / "b" / "hem_init.pt", weights_only=True)["weight"])
    _, summary = _steps(tmp_path / "la", hem={**HEM, "specific_per_language": 0})
    vocab = load_vocabulary(tmp_path / "la" / "hem_vocab.json")
    assert summary["specific"] == 0 and vocab.specific == {"de": (), "en": ()}


def test_steps_refuse_bad_inputs_naming_them(tmp_path):
    spec, _ = _world(tmp_path)
    val = spec["validation"]["captions"]
    with pytest.raises(ValueError, match=r"val.parquet: FastText and HEM train on training captions only"):
        train_fasttext_step({"seed": 1, "lang": "en", "captions": [val], "settings": {}}, tmp_path / "v.vec")
    with pytest.raises(Exception, match=r"fasttext.dim"):
        train_fasttext_step({"seed": 1, "lang": "en", "captions": [spec["c2i"][0]["captions"]],
                             "settings": {"dim": 0}}, tmp_path / "v.vec")
    with pytest.raises(ValueError, match=r"no FastText vectors for \['de'\]"):
        pretrain_hem_step({"experiment": "x", "seed": 1, "settings": HEM, "vectors": {"en": "e.vec"},
                           "sentences": [{"captions": spec["c2i"][0]["captions"], "features": "f",
                                          "lang": "de"}]},
                          vocab_out=tmp_path / "v.json", init_out=tmp_path / "i.pt")


def test_hem_experiments_read_the_steps_outputs_and_others_are_unchanged():
    config = demo()
    spec = ex.training_spec(config, "smalr", 2)
    assert spec["vocab"] == {"path": "results/smalr/smalr/seed2/hem_vocab.json"}
    assert spec["text_init"] == "results/smalr/smalr/seed2/hem_init.pt"
    assert {spec["vocab"]["path"], spec["text_init"]} <= set(ex.training_inputs(config, "smalr", 2))
    assert "text_init" not in ex.training_spec(config, "t_multi", 2)     # job parameters as before
    assert ex.training_spec(config, "t_multi", 2)["vocab"] == {"min_count": config["vocab"]["min_count"]}
    hem = specs.hem_spec(config, "smalr_la", 1)
    assert hem["format"] == "pseudopairs.hem-init/2"     # a tracked parameter: an older file reruns the job
    assert hem["settings"]["specific_per_language"] == 0                  # the experiment's override
    assert hem["settings"]["latent_size"] == config["hem"]["latent_size"]
    assert hem["vectors"]["cs"] == "results/smalr/smalr_la/seed1/fasttext.cs.vec"
    # 002's rows read the augmented French set (002 §4); the dagger rows the translation portion
    assert specs.fasttext_inputs(config, "smalr", 1, "fr") == ["results/smalr/augment/m30k_aug.fr/train.parquet"]
    assert specs.fasttext_inputs(config, "smalr_task1", 1, "fr") == ["results/captions/m30k_task1/train.parquet"]
    assert ex.experiment_model(config, "smalr").text_encoder == "hem"
    assert ex.experiment_training(config, "smalr").objective == "smalr"
    assert ex.experiment_training(config, "smalr_hem").smalr_mclm_weight == 0.0
    assert ex.experiment_training(config, "smalr_hem_task1").smalr_mclm_weight == 0.0
    assert [name for name, lang in specs.hem_runs(config) if lang == "en"] == [
        "smalr_la", "smalr_hem", "smalr", "smalr_hem_task1", "smalr_task1"]


def test_a_bad_hem_override_names_its_key():
    from pseudopairs.workflow.config import check_config
    config = copy.deepcopy(demo())
    config["experiments"]["smalr"]["hem"] = {"pca_dim": 0}
    with pytest.raises(Exception, match=r"experiments.smalr.hem.*pca_dim|hem.pca_dim"):
        check_config(config)


def test_table_2_rows_are_the_papers_numbers():
    table = demo()["tables"]["table_smalr2"]
    assert table["columns"] == ["mean_recall"] and table["langs"] == ["en", "de", "fr", "cs"]
    published = {row["label"]: row["paper"] for row in table["rows"] if "paper" in row}
    # every row of 002's Table 2 (c), the CLC rows included (tests/test_smalr_clc_pipeline.py)
    assert published == {label: {lang: [value] for lang, value in numbers.items()}
                         for label, numbers in paper.TABLE_2_MULTI30K.items()}
    dagger = [row for row in table["rows"] if row.get("beyond_paper")]
    assert [row["experiment"] for row in dagger] == ["smalr_hem_task1", "smalr_task1", "t_multi"]


def test_demo_dag_of_table_2(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/table_smalr2.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    # 5 hem experiments (LA, HEM, SMALR and the two dagger rows) x 2 seeds (config:
    # table_smalr2's seeds) x 4 languages; one HEM each
    assert counts["fasttext"] == 5 * 2 * 4 and counts["pretrain_hem"] == 5 * 2
    assert model_counts(result.stdout) == {"train": 6 * 2, "evaluate": 6 * 2}


def test_real_configuration_dag_lists_the_fasttext_and_hem_jobs(tmp_path):
    result = paper_dry_run(tmp_path, "results/table_smalr2.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    seeds = 3                                                  # paper.yaml: table_smalr2 seeds 1-3
    assert counts["fasttext"] == 5 * seeds * 4 and counts["pretrain_hem"] == 5 * seeds
    assert '"latent_size":40000' in result.stdout and '"dim":300' in result.stdout
    # 002's sizes (§3.1, §4): a 512-d universal embedding and joint space for its rows only
    assert '"embedding_dim":512' in result.stdout and '"joint_dim":512' in result.stdout


def test_pretrain_hem_whitens_unless_told_not_to(tmp_path, monkeypatch):
    """hem.whiten (default true) reaches build_hem: unwhitened, the demo world's words all start
    on a few latent tokens (docs/smalr.md)."""
    import pseudopairs.smalr.hem_build as hem_build
    seen = []
    real = hem_build.build_hem

    def spy(*args, **kwargs):
        seen.append(kwargs["settings"].whiten)
        return real(*args, **kwargs)

    monkeypatch.setattr(hem_build, "build_hem", spy)
    _steps(tmp_path / "a")
    _steps(tmp_path / "b", hem={**HEM, "whiten": False})
    assert seen == [True, False]
