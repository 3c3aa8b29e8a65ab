"""The reverse direction: German M30K captions as the queries, English COCO captions as
the database, so the M30K images get pseudo-English captions and De + COCO gets c2c pairs. Mining,
the caption table built from the pairs, training on it (c2i and c2c), the config checks, the
statistics and the DAG are checked for this direction (they were written with COCO queries)."""

from __future__ import annotations

import copy
import re

import numpy as np
import pandas as pd
import pytest
import torch

import pseudopairs.model.training as training
from conftest import REPO, run_snakemake, run_settings
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.data.contract import dataset_files
from pseudopairs.data.experiments import uses_pseudopairs
from pseudopairs.mining import contract as mining_contract
from pseudopairs.model.contract import training_langs
from pseudopairs.core.io import read_pairs
from pseudopairs.mining.statistics import pseudopair_statistics
from pseudopairs.mining.step import mine_pseudopairs, pseudopair_caption_table
from pseudopairs.report.pseudopair_stats import panels
from test_pseudopairs import check_nearest_and_same_things, mining_job
from test_training import SETTINGS, _world
from test_workflow import job_block, job_counts, model_counts

torch.set_num_threads(1)


def demo() -> dict:
    return load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")


# --------------------------------------------------------------------------------------------
# Mining, caption table and training in the reverse direction, on a tiny learnt world


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory):
    """An aligned En+De corpus ("m30k", with a trained model) and a disjoint English-only corpus
    ("coco": other images, other ids, more captions than the aligned German)."""
    root = tmp_path_factory.mktemp("reverse")
    spec, _ = _world(root / "m30k", n_train=60, n_val=40, seed=0)
    training.train(spec=spec, settings=run_settings({**SETTINGS, "max_updates": 200, "validate_every": 50}),
                   out_dir=root / "model", seed=1)
    other, _ = _world(root / "coco_world", n_train=90, n_val=4, seed=5)
    coco = pd.read_parquet(other["c2i"][0]["captions"])
    coco = coco[coco["lang"] == "en"].assign(image_id=lambda f: "coco" + f["image_id"], dataset="coco")
    coco_path = root / "coco.parquet"
    coco.to_parquet(coco_path, index=False)
    return root, spec, str(coco_path)


def test_reverse_mining_gives_each_german_caption_its_nearest_english_coco_caption(two_corpora, tmp_path):
    root, spec, coco = two_corpora
    m30k = spec["c2i"][0]["captions"]
    job = mining_job(root, queries=(m30k, "de"), database=(coco, "en"), name="de_coco.reverse",
                     source="de_coco", engine={"device": "cpu", "block_size": 16,
                                               "encode_batch_size": 32, "threads": 1})
    stats = mine_pseudopairs(job=job, pairs_path=tmp_path / "pairs.parquet",
                             stats_path=tmp_path / "stats.json", progress=False)
    pairs = read_pairs(tmp_path / "pairs.parquet")
    frame = pd.read_parquet(m30k)
    de = frame[frame["lang"] == "de"].reset_index(drop=True)
    en = pd.read_parquet(coco).reset_index(drop=True)
    assert len(pairs) == len(de) == stats["n_queries"] == 300 and stats["n_database"] == len(en) == 450
    assert set(pairs["query_lang"]) == {"de"} and set(pairs["match_lang"]) == {"en"}
    assert pairs["query_image_id"].tolist() == de["image_id"].tolist()          # M30K images
    assert pairs["match_image_id"].str.startswith("coco").all()                  # COCO captions
    # brute force: the most cosine-similar English COCO caption, which names the German
    # caption's colour and shape
    check_nearest_and_same_things(root, queries=de, database=en, pairs=pairs, query_lang="de", match_lang="en")

    # the caption table: English captions of the M30K images, on the German query's caption index
    table = pseudopair_caption_table(pairs, min_percentile=0, dataset="de_coco.reverse.p0")
    assert set(table["lang"]) == {"en"}
    assert table[["image_id", "caption_idx"]].values.tolist() == de[["image_id", "caption_idx"]].values.tolist()
    assert table["text"].tolist() == pairs["match_text"].tolist()
    pseudo_path = tmp_path / "captions.p0.parquet"
    table.to_parquet(pseudo_path, index=False)

    # training reads it as a c2i data set and as the English side of a c2c pair over M30K images
    features = spec["c2i"][0]["features"]
    german = {"name": "m30k.de", "captions": m30k, "features": features, "lang": "de"}
    english = {"name": "m30k.en-pseudo@de_coco.reverse", "captions": str(pseudo_path),
               "features": features, "lang": "en"}
    run = {**spec, "experiment": "de_coco_rev_c2c_ft", "c2i": [german, english],
           "c2c": [{"name": "m30k.de+m30k.en-pseudo@de_coco.reverse", "a": german, "b": english}],
           "vocab": {"path": str(root / "model" / "vocab.json")},
           "init_from": str(root / "model" / "checkpoint.pt")}
    summary = training.train(spec=run, settings=run_settings({**SETTINGS, "max_updates": 40}), out_dir=tmp_path / "ft", seed=1)
    log = pd.read_csv(tmp_path / "ft" / "train_log.csv")
    assert set(log["dataset"]) == {"m30k.de", "m30k.en-pseudo@de_coco.reverse",
                                   "m30k.de+m30k.en-pseudo@de_coco.reverse"}
    assert np.isfinite(log["loss"]).all() and np.isfinite(summary["best_score"])


def _reverse_pairs(rows, *, texts):
    return pd.DataFrame([{
        "query_image_id": f"m{i // 2}", "query_caption_idx": i % 2, "query_lang": "de",
        "query_text": f"de {i}", "match_row": row, "match_image_id": f"coco{row}",
        "match_caption_idx": 0, "match_lang": "en", "match_text": texts[row], "match_raw": texts[row],
        "similarity": 0.5, "score": 0.5} for i, row in enumerate(rows)])


def test_statistics_and_plot_panels_of_a_reverse_set():
    texts = ["a dog", "a cat", "a dog", "a cow", "a hen"]
    sets = {"fwd": {"source": "de_coco", "criterion": "cosine", "queries": "coco.en", "database": "m30k.de"},
            "rev": {"source": "de_coco", "criterion": "cosine", "queries": "m30k.de", "database": "coco.en"},
            "fwd.round1": {"source": "de_coco", "criterion": "cosine", "queries": "coco.en",
                           "database": "m30k.de"}}
    pairs = {"rev": _reverse_pairs([0, 0, 2, 3], texts=texts)}
    spec = {"sets": {"rev": sets["rev"]}, "seeds": [1], "top": 1, "compare": []}
    frame = pseudopair_statistics(spec, load=lambda name, seed: (
        pairs[name], {"n_database": 5, "n_database_unique_texts": 4}))
    value = dict(zip(frame["statistic"], frame["value"]))
    # rows 0, 0, 2, 3 of 5 English COCO captions; texts "a dog" x3, "a cow"
    assert value["used_share"] == pytest.approx(3 / 5) and value["top_share"] == pytest.approx(2 / 4)
    assert value["top_share_text"] == pytest.approx(3 / 4) and value["used_share_unique"] == pytest.approx(2 / 4)
    # caption-use and similarity plots: one panel per source and direction; a round of the
    # paper's direction shares the paper's set's panel, the reverse set gets its own
    assert panels({"sets": sets}) == {("de_coco", "coco.en", "m30k.de"): ["fwd", "fwd.round1"],
                                      ("de_coco", "m30k.de", "coco.en"): ["rev"]}


# --------------------------------------------------------------------------------------------
# The config checks and the DAG


def test_the_config_checks_the_reverse_direction_by_role_not_by_corpus():
    config = check_config(demo())
    assert config["datasets"]["m30k.en-pseudo@de_coco.reverse"]["corpus"] == "m30k"
    files = dataset_files(config, "m30k.en-pseudo@de_coco.reverse", seed=2)
    assert files == {"name": "m30k.en-pseudo@de_coco.reverse", "lang": "en",
                     "captions": "results/pseudopairs/de_coco.reverse/seed2/captions.p0.parquet",
                     "features": "results/features/m30k/train.npz"}
    mining = mining_contract.mining_job(config, "de_coco.reverse", 1)
    assert (mining.queries.lang, mining.database.lang) == ("de", "en")
    assert mining.queries.captions == "results/captions/m30k/train.parquet"
    assert mining.database.captions == "results/captions/coco/train.parquet"
    assert training_langs(config, "de_coco_rev_c2c_ft") == ["de", "en"]   # validated like De+COCO

    wrong = demo()   # pseudo-English of the COCO images: the reverse pairs annotate M30K images
    wrong["datasets"]["m30k.en-pseudo@de_coco.reverse"]["corpus"] = "coco"
    with pytest.raises(ConfigError, match=r"gives 'en' captions of 'm30k' images, but the data set says "
                                          r"corpus 'coco'"):
        check_config(wrong)
    # a neighbourhood k is checked against each role's size: 5,000 German queries, 15,000 English
    # COCO captions in the demo (the reverse of the paper's direction)
    big_k = demo()
    big_k["pseudopairs"]["de_coco.reverse"]["mining"] = {"criterion": "csls", "k": 6000}
    with pytest.raises(ConfigError, match=r"k=6000 exceeds the 5000 queries .*m30k\.de: 5000, coco\.en: 15000"):
        check_config(big_k)
    fits = demo()
    fits["pseudopairs"]["de_coco.reverse"]["mining"] = {"criterion": "csls", "k": 4000}
    check_config(fits)
    mixed = demo()
    mixed["experiments"]["de_coco_rev_c2c_ft"]["c2c"] = [["coco.en", "m30k.en-pseudo@de_coco.reverse"]]
    with pytest.raises(ConfigError, match="a c2c pair needs two languages over the same images"):
        check_config(copy.deepcopy(mixed))


def test_the_reverse_rows_dag(tmp_path):
    targets = [f"results/models/{name}/seed{seed}/metrics.json"
               for name in ("de_coco_rev_ft", "de_coco_rev_c2c_ft", "de_coco_both_c2c_ft") for seed in (1, 2, 3)]
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "2", *targets)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    # De+COCO and the three reverse rows; the reverse set and the paper's set (both directions row)
    assert model_counts(result.stdout) == {"train": 4 * 3, "evaluate": 3 * 3}
    assert counts["mine"] == 2 * 3 and counts["pseudopair_captions"] == 2 * 3
    blocks = re.split(r"\n(?=rule |localrule )", result.stdout)
    mine = next(b for b in blocks if "rule mine:" in b and "pseudopairs=de_coco.reverse, seed=3" in b)
    assert "results/models/de_coco/seed3/checkpoint.pt" in mine
    assert "results/captions/m30k/train.parquet" in mine and "results/captions/coco/train.parquet" in mine
    train = job_block(result.stdout, "train", "results/models/de_coco_rev_c2c_ft/seed2/checkpoint.pt")
    assert "results/pseudopairs/de_coco.reverse/seed2/captions.p0.parquet" in train
    assert "results/models/de_coco/seed2/checkpoint.pt" in train
    both = job_block(result.stdout, "train", "results/models/de_coco_both_c2c_ft/seed1/checkpoint.pt")
    assert "results/pseudopairs/de_coco/seed1/captions.p0.parquet" in both
    assert "results/pseudopairs/de_coco.reverse/seed1/captions.p0.parquet" in both


def test_table4_shows_the_reverse_rows_beyond_the_paper():
    config = check_config(demo())
    rows = {row["experiment"]: row for row in config["tables"]["table4"]["rows"] if "experiment" in row}
    for name in ("de_coco_rev_ft", "de_coco_rev_c2c_ft", "de_coco_both_c2c_ft"):
        assert rows[name]["beyond_paper"] is True and "paper" not in rows[name]
        assert uses_pseudopairs(config, name)     # the method check compares it with its source
