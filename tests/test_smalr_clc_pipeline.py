"""Cross-Lingual Consistency in the pipeline (paper 002 §3.4): the evaluation variant's scores,
ranks and aggregates on a hand-worked case, the parallel text, the contract and config checks,
the table rows, and both configurations' dry runs."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import paper_dry_run, run_snakemake
from pseudopairs.smalr import clc_contract, paper
from pseudopairs.evaluation.clc import (clc_metrics, query_versions, ranks_from_scores,
                                        retrieval_from_scores, score_tensor)
from pseudopairs.smalr.clc_text import write_parallel_text
from pseudopairs.similarity.metrics import retrieval_metrics
from test_experiments import demo
from test_workflow import job_counts


# ---------------------------------------------------------------------------------------------
# scores, ranks and aggregates by hand

# three languages, two queries (query q describes image q), two images
S = torch.tensor([[[0.9, 0.1], [0.6, 0.4]],     # en: query 1 is wrong (0.4 < 0.6)
                  [[0.2, 0.5], [0.1, 0.8]],     # de: query 0 is wrong
                  [[0.7, 0.3], [0.2, 0.6]]], dtype=torch.float64)


def test_ranks_and_clc_a_by_hand():
    index = np.array([0, 1])
    # en alone: T->I, query 0 ranks image 0 first (0.9 > 0.1), query 1 ranks image 1 second
    # (0.4 < 0.6); I->T, image 0's query scores 0.9 > 0.6 and image 1's 0.4 > 0.1: both first
    ranks = ranks_from_scores(S[0], index)
    assert ranks["t2i"].tolist() == [0, 1] and ranks["i2t"].tolist() == [0, 0]
    # CLC-A = mean: [[0.6, 0.3], [0.3, 0.6]] -> every query and image at rank 0
    from pseudopairs.smalr.clc import clc_a
    mean = clc_a(S)
    assert torch.allclose(mean.double(), torch.tensor([[0.6, 0.3], [0.3, 0.6]], dtype=torch.float64))
    m = retrieval_from_scores(mean, index)
    assert m["t2i_r1"] == 100.0 and m["i2t_r1"] == 100.0 and m["mean_recall"] == 100.0
    single = retrieval_from_scores(S[0], index)
    assert single["t2i_r1"] == 50.0 and single["i2t_r1"] == 100.0


def test_ties_rank_the_correct_candidate_first_and_match_the_exact_engine():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(7, 5)).astype(np.float32)
    captions = rng.normal(size=(12, 5)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    captions /= np.linalg.norm(captions, axis=1, keepdims=True)
    index = rng.integers(0, 6, size=12)                    # image 6 has no caption
    scores = score_tensor(torch.from_numpy(images), [torch.from_numpy(captions)], "cosine")[0]
    ours = retrieval_from_scores(scores, index)
    exact = retrieval_metrics(image_embeddings=images, caption_embeddings=captions,
                              caption_image_index=index, similarity="cosine")
    assert ours == pytest.approx(exact)
    tied = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    assert ranks_from_scores(tied, [1])["t2i"].tolist() == [0]
    # ties="last": image 0, scoring as the correct image 1, ranks above it (I->T: image 1's only
    # query is its own, so nothing ranks above it)
    last = ranks_from_scores(tied, [1], ties="last")
    assert last["t2i"].tolist() == [1] and last["i2t"].tolist() == [0]
    both = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)   # I->T: query 1 ties query 0
    assert ranks_from_scores(both, [0, 1], ties="last")["i2t"].tolist() == [1, 1]
    assert ranks_from_scores(both, [0, 1])["i2t"].tolist() == [0, 0]
    assert retrieval_from_scores(scores, index, ties="last") == pytest.approx(exact)   # no ties: the same
    with pytest.raises(ValueError, match="ties must be one of"):
        ranks_from_scores(tied, [1], ties="random")


def test_a_collapsed_clc_classifier_ranks_nothing_first():
    """A constant score (CLC-C on Eq. (3)'s plateau, or all its ReLU units off: exactly 0) ties
    every candidate: CLC-C's metrics rank the ties above the correct one, so it recalls nothing
    (with the engines' convention it would recall everything: 100)."""
    n = 20
    flat = torch.zeros(2, n, n, dtype=torch.float64)
    test = {lang: (flat, np.arange(n)) for lang in ("en", "de")}
    gen = torch.Generator().manual_seed(0)
    val = {lang: (torch.rand(2, n, n, generator=gen, dtype=torch.float64), np.arange(n)) for lang in ("en", "de")}
    classifier = {"hidden": 4, "iterations": 2, "learning_rate": 0.05, "margin": 0.2, "top_k": 2,
                  "init": "uniform", "seed": 0}
    result = clc_metrics(val, test, langs=["en", "de"], classifier=classifier, seed=1)
    assert result["ties"] == {"single": "first", "clc_a": "first", "clc_c": "last"}
    assert result["clc_c"]["en"]["mean_recall"] == 0.0
    # the query alone and CLC-A rank as every other row (the engines' convention: 100 here)
    assert result["single"]["en"]["mean_recall"] == result["clc_a"]["en"]["mean_recall"] == 100.0
    assert retrieval_from_scores(flat[0], np.arange(n))["mean_recall"] == 100.0


def test_clc_metrics_train_on_val_and_report_each_query_language():
    gen = torch.Generator().manual_seed(0)

    def split(n):
        out = {}
        for k, lang in enumerate(("en", "de", "fr")):
            s = torch.rand(3, n, n, generator=gen, dtype=torch.float64)
            s[:, torch.arange(n), torch.arange(n)] += 0.3          # the true image scores higher
            out[lang] = (s, np.arange(n))
        return out

    val, test = split(6), split(5)
    classifier = {"hidden": 4, "iterations": 5, "learning_rate": 0.05, "margin": 0.2, "top_k": 2,
                  "init": "uniform", "seed": 0}
    a = clc_metrics(val, test, langs=["en", "de", "fr"], classifier=classifier, seed=1)
    b = clc_metrics(val, test, langs=["en", "de", "fr"], classifier=classifier, seed=1)
    assert a == b                                                    # seeded
    assert a["clc_c_training"]["queries"] == 18 and len(a["clc_c_training"]["losses"]) == 5
    from pseudopairs.smalr.clc import clc_a
    for k, lang in enumerate(("en", "de", "fr")):
        s, index = test[lang]
        assert a["single"][lang] == retrieval_from_scores(s[k], index)     # its own language's slot
        assert a["clc_a"][lang] == retrieval_from_scores(clc_a(s.float()).double(), index)
        assert set(a["clc_c"][lang]) >= {"i2t_r1", "t2i_r1", "mean_recall"}


def test_query_versions_align_translations_by_caption():
    captions = pd.DataFrame({"image_id": ["a", "b", "c"], "caption_idx": [0, 0, 0],
                             "lang": ["en", "en", "de"], "text": ["a dog", "a cat", "ein hund"]})
    de = pd.DataFrame({"image_id": ["b", "a"], "caption_idx": [0, 0], "text": ["eine katze", "ein hund"]})
    versions, index = query_versions(captions, {"de": de}, ["b", "a", "c"], lang="en",
                                     langs=["en", "de"], source="captions.parquet", features="f")
    assert versions == {"en": ["a dog", "a cat"], "de": ["ein hund", "eine katze"]}
    assert index.tolist() == [1, 0]
    with pytest.raises(ValueError, match="tr.parquet: 1 en captions"):
        query_versions(captions, {"de": de.iloc[:1]}, ["b", "a", "c"], lang="en", langs=["en", "de"],
                       source="captions.parquet", features="f", names={"de": "tr.parquet"})


def test_split_scores_take_each_languages_queries_from_its_own_caption_table(tmp_path):
    """En's queries from a five-captions-per-image table, Fr's from a one-caption table, each
    scored in both languages (its translation matched by image and caption): the (L, Q, I) scores
    are the similarity of each version's encoding with each image's, worked out here by hand."""
    from pseudopairs.core.io import save_features, write_parquet_atomic
    from pseudopairs.evaluation.clc import split_scores

    def table(path, rows):
        frame = pd.DataFrame(rows, columns=["image_id", "lang", "caption_idx", "text"])
        frame.insert(0, "dataset", "d")
        frame.insert(1, "split", "test")
        frame["raw"] = frame["text"]
        write_parquet_atomic(path, frame)
        return str(path)

    images = ["i0", "i1"]
    features = tmp_path / "test.npz"
    save_features(features, image_ids=images, features=np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
    five = table(tmp_path / "five.parquet", [(i, "en", k, f"{i} en {k}") for i in images for k in range(5)])
    one = table(tmp_path / "one.parquet", [("i1", "fr", 0, "i1 fr"), ("i0", "fr", 0, "i0 fr"),
                                           ("i0", "en", 0, "not a query: the five-caption table has En")])
    en2fr = table(tmp_path / "en2fr.parquet", [(i, "fr", k, f"{i} en {k} -> fr") for i in images for k in range(5)])
    fr2en = table(tmp_path / "fr2en.parquet", [(i, "en", 0, f"{i} fr -> en") for i in images])
    spec = {"langs": ["en", "fr"], "features": {"test": str(features)},
            "captions": {"test": {"en": five, "fr": one}},
            "translations": {"test": {"en": {"fr": en2fr}, "fr": {"en": fr2en}}}}
    seen = []

    def encode_texts(texts, lang):   # a caption of image i points at i; a translation off it (cosine 0.6)
        seen.append((lang, list(texts)))
        own = {"i0": [1.0, 0.0], "i1": [0.0, 1.0]}
        translated = {"i0": [0.6, 0.8], "i1": [0.8, 0.6]}
        return torch.tensor([(translated if "->" in t else own)[t[:2]] for t in texts], dtype=torch.float64)

    out = split_scores(spec, "test", encode_images=lambda f: torch.as_tensor(f, dtype=torch.float64),
                       encode_texts=encode_texts, similarity="cosine")
    en, index = out["en"]
    assert en.shape == (2, 10, 2) and index.tolist() == [0] * 5 + [1] * 5
    assert en[0, :5, 0].tolist() == pytest.approx([1.0] * 5)                  # slot en: the caption
    assert en[1, :5, 0].tolist() == pytest.approx([0.6] * 5)                  # slot fr: en -> fr
    assert en[0, 5:, 0].tolist() == pytest.approx([0.0] * 5) and en[1, 5:, 1].tolist() == pytest.approx([0.6] * 5)
    fr, index = out["fr"]
    assert fr.shape == (2, 2, 2) and index.tolist() == [1, 0]                  # the table's order
    assert seen[2] == ("en", ["i1 fr -> en", "i0 fr -> en"]) and seen[3] == ("fr", ["i1 fr", "i0 fr"])
    assert fr[:, 0, 1].tolist() == pytest.approx([0.6, 1.0])                  # slot en: a translation


# ---------------------------------------------------------------------------------------------
# parallel text


def test_world_parallel_text_in_four_languages_extends_the_en_de_pairs(tmp_path):
    from pseudopairs.world.generate import parallel_pairs
    from pseudopairs.world.settings import WorldSettings
    world = copy.deepcopy(demo()["world"])
    world["parallel"] = {"train": 4}
    spec = {"source": "world", "langs": ["en", "de", "fr", "cs"], "world": world,
            "sizes": {"train": 4, "val": 2}}
    outputs = {f"{s}_{lang}": str(tmp_path / f"{s}.{lang}") for s in ("train", "val")
               for lang in spec["langs"]}
    assert write_parallel_text(spec, outputs) == {"train": 4, "val": 2}
    lines = {k: (tmp_path / f"{k.replace('_', '.')}").read_text().splitlines() for k in outputs}
    assert all(len(lines[f"train_{lang}"]) == 4 for lang in spec["langs"])
    pairs = parallel_pairs(WorldSettings.from_dict(world), "train")
    assert lines["train_en"] == [en for en, _ in pairs] and lines["train_de"] == [de for _, de in pairs]
    assert lines["train_fr"] != lines["train_en"]


def test_corpus_parallel_text_pairs_captions_by_image(tmp_path):
    from pseudopairs.core.io import write_parquet_atomic
    frame = pd.DataFrame({"dataset": "m30k_task1", "split": "train",
                          "image_id": ["i2", "i1", "i1", "i2"], "lang": ["en", "en", "fr", "fr"],
                          "caption_idx": [0, 0, 0, 0], "raw": ["B", "A", "a-fr", "b-fr"],
                          "text": ["b", "a", "a-fr", "b-fr"]})
    path = tmp_path / "train.parquet"
    write_parquet_atomic(path, frame)
    outputs = {"train_en": str(tmp_path / "train.en"), "train_fr": str(tmp_path / "train.fr")}
    write_parallel_text({"source": "corpus", "langs": ["en", "fr"], "captions": {"train": str(path)}},
                        outputs)
    assert (tmp_path / "train.en").read_text() == "A\nB\n"
    assert (tmp_path / "train.fr").read_text() == "a-fr\nb-fr\n"


# ---------------------------------------------------------------------------------------------
# contract, config, table


def test_directions_and_models_of_the_demo():
    config = demo()
    assert clc_contract.clc_langs(config) == ["en", "de", "fr", "cs"]
    assert len(clc_contract.directions(config)) == 12
    assert "en2de" not in clc_contract.trained_directions(config)
    assert len(clc_contract.trained_directions(config)) == 11
    assert clc_contract.model_dir(config, "en2de") == "results/translation_model/ctranslate2"
    assert clc_contract.model_dir(config, "fr2cs") == "results/clc/mt/fr2cs/ctranslate2"
    assert clc_contract.train_inputs(config, "fr2cs") == {
        "source_train": "results/clc/parallel/train.fr", "target_train": "results/clc/parallel/train.cs",
        "source_valid": "results/clc/parallel/val.fr", "target_valid": "results/clc/parallel/val.cs"}
    spec = clc_contract.evaluation_spec(config, "smalr")
    assert spec["translations"]["test"]["de"] == {
        t: f"results/clc/translations/de2{t}/test.parquet" for t in ("en", "fr", "cs")}
    # 002's Table 2: En and De queries are the comparable portion's five captions per image (the
    # table's lang_test_corpora, as the SMALR row above the CLC rows), Fr and Cs the translation
    # portion's one; each direction translates its source language's query set
    assert spec["captions"]["test"] == {"en": "results/captions/m30k/test.parquet",
                                        "de": "results/captions/m30k/test.parquet",
                                        "fr": "results/captions/m30k_task1/test.parquet",
                                        "cs": "results/captions/m30k_task1/test.parquet"}
    assert spec["captions"]["val"]["en"] == "results/captions/m30k/val.parquet"
    assert clc_contract.translate_spec(config, "de2fr", "test")["captions"] == "results/captions/m30k/test.parquet"
    assert clc_contract.translate_spec(config, "fr2de", "val")["captions"] == \
        "results/captions/m30k_task1/val.parquet"
    inputs = clc_contract.evaluation_inputs(config, "smalr", 1)
    assert {"results/captions/m30k/test.parquet", "results/captions/m30k_task1/val.parquet"} <= set(inputs)
    assert spec["classifier"]["hidden"] == paper.CLC_HIDDEN
    assert spec["classifier"]["iterations"] == paper.CLC_ITERATIONS
    assert clc_contract.clc_models(config) == {"smalr": [1, 2]}


def test_table_2_clc_rows_are_the_papers_numbers():
    rows = {row["label"]: row for row in demo()["tables"]["table_smalr2"]["rows"] if row.get("clc")}
    assert {label: row["clc"] for label, row in rows.items()} == {"SMALR-CLC-A": "clc_a",
                                                                   "SMALR-CLC-C": "clc_c"}
    for label, row in rows.items():
        assert row["paper"] == {lang: [v] for lang, v in paper.TABLE_2_MULTI30K[label].items()}


def test_config_errors_name_the_key():
    from pseudopairs.workflow.config import contract_errors
    config = demo()
    rows = config["tables"]["table_smalr2"]["rows"]
    k = next(i for i, row in enumerate(rows) if row.get("clc"))
    bad = copy.deepcopy(config)
    bad["tables"]["table_smalr2"]["rows"][k]["clc"] = "clc_b"
    assert any(f"tables.table_smalr2.rows.{k}.clc" in m and "clc_b" in m for m in contract_errors(bad))
    bad = copy.deepcopy(config)
    bad["tables"]["table_smalr2"]["test_corpus"] = bad["evaluation"]["corpus"]
    assert any(f"tables.table_smalr2.rows.{k}.clc" in m and "translation corpus" in m
               for m in contract_errors(bad))
    bad = copy.deepcopy(config)             # a second CLC table testing De elsewhere: refused
    second = copy.deepcopy(bad["tables"]["table_smalr2"])
    second["lang_test_corpora"] = {"en": "m30k"}
    bad["tables"]["table_smalr2_copy"] = second
    assert any("tables.table_smalr2_copy.lang_test_corpora.de" in m and "'m30k_task1'" in m
               and "table_smalr2 test de on 'm30k'" in m for m in clc_contract.check(bad)), clc_contract.check(bad)
    bad = copy.deepcopy(config)
    bad["clc"] = {"parallel": "web"}
    assert any("clc.parallel" in m for m in clc_contract.check(bad))
    bad = copy.deepcopy(config)
    bad["data"]["source"] = "paper"
    assert any("'clc.parallel'" in m and "corpus" in m for m in clc_contract.check(bad))
    assert not clc_contract.check(config)


def test_table_reads_clc_rows_from_metrics_clc_json(tmp_path):
    from pseudopairs.report.tables import build_table
    from pseudopairs.report.contract import table_spec
    spec = table_spec(demo(), "table_smalr2")
    assert spec["clc_metrics"] == {"smalr": {"1": "results/models/smalr/seed1/metrics.clc.json",
                                             "2": "results/models/smalr/seed2/metrics.clc.json"}}
    langs = spec["langs"]

    def metrics(value):
        return {lang: {"i2t_r1": value, "t2i_r1": value, "rsum": 6 * value, "mean_recall": value}
                for lang in langs}

    for part in ("metrics", "clc_metrics"):
        for name, by_seed in spec[part].items():
            for seed, _ in list(by_seed.items()):
                path = tmp_path / f"{part}.{name}.{seed}.json"
                body = ({"clc_a": metrics(70.0 + int(seed)), "clc_c": metrics(80.0 + int(seed))}
                        if part == "clc_metrics" else {"portion_retrieval": metrics(10.0 + int(seed)),
                                                       "retrieval": metrics(20.0 + int(seed))})
                path.write_text(json.dumps(body))
                by_seed[seed] = str(path)
    frame = build_table(spec).set_index("row")
    # En and De on test 2016's five captions per image (`retrieval`), Fr and Cs on the
    # translation portion's one; the CLC rows on the translation portion in all four
    assert frame.loc["SMALR", "en_mean_recall_mean"] == pytest.approx(21.5)
    assert frame.loc["SMALR", "fr_mean_recall_mean"] == pytest.approx(11.5)
    assert frame.loc["SMALR-CLC-A", "en_mean_recall_mean"] == pytest.approx(71.5)
    assert frame.loc["SMALR-CLC-C", "cs_mean_recall_mean"] == pytest.approx(81.5)
    assert frame.loc["SMALR-CLC-C", "paper_en_mean_recall"] == pytest.approx(74.5)


# ---------------------------------------------------------------------------------------------
# dry runs


def test_demo_dag_lists_the_clc_jobs(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/table_smalr2.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["clc_parallel_text"] == 1
    assert counts["train_mt_clc"] == 11 and counts["convert_mt_clc"] == 11   # all but en->de
    assert counts["translate_clc"] == 12 * 2                                # val and test
    assert counts["evaluate_clc"] == 2                                      # smalr, seeds 1-2


def test_real_configuration_dag_lists_the_clc_jobs(tmp_path):
    result = paper_dry_run(tmp_path, "results/table_smalr2.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["train_mt_clc"] == 11 and counts["translate_clc"] == 24
    assert counts["evaluate_clc"] == 3                                      # paper.yaml: seeds 1-3
    assert '"source":"corpus"' in result.stdout                             # Multi30K task 1
    assert "results/captions/m30k_task1/train.parquet" in result.stdout
