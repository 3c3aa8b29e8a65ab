"""Iterated bootstrapping: a ``rounds:`` chain expands into ordinary config entries;
the per-chain summary (validation and test scores, §7.2 shares, overlap with the previous round,
the validation stop rule) and its figure on a hand case; the demo's chains in the DAG."""

from __future__ import annotations

import copy
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from conftest import REPO, run_snakemake
from pseudopairs.core import layout
from pseudopairs.workflow import rounds as chains
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.core.io import PAIR_COLUMNS
from pseudopairs.report import rounds_summary as report_rounds
from test_workflow import job_block, job_counts, model_counts


def demo() -> dict:
    return check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml"))


def toy_chain(**over) -> dict:
    return {"source": "src", "rounds": 2, "pseudopairs": {"queries": "coco.en", "database": "m30k.de"},
            "dataset": {"corpus": "coco", "lang": "de"}, "experiment": {"c2i": ["m30k.de", "coco.en"]},
            **over}


# --------------------------------------------------------------------------------------------
# Expansion


def test_a_chain_expands_into_sets_data_sets_experiments_a_table_and_comparisons():
    config = {"rounds": {"toy": toy_chain(c2c_pseudopairs=True)}, "seeds": [1]}
    chains.expand_rounds(config)
    assert config["pseudopairs"]["toy.round1"] == {"source": "src", "queries": "coco.en", "database": "m30k.de"}
    assert config["pseudopairs"]["toy.round2"]["source"] == "toy_round1"   # mined by round 1's model
    assert config["datasets"]["coco.de-pseudo@toy.round2"] == {"corpus": "coco", "lang": "de",
                                                                "pseudopairs": "toy.round2"}
    assert config["experiments"]["toy_round2"] == {
        "c2i": ["m30k.de", "coco.en", "coco.de-pseudo@toy.round2"],
        "c2c": [["coco.en", "coco.de-pseudo@toy.round2"]], "finetune": "toy_round1"}
    table = config["tables"]["table_rounds_toy"]
    assert [row["experiment"] for row in table["rows"]] == ["src", "toy_round1", "toy_round2"]
    assert table["langs"] == ["de"] and all(row["beyond_paper"] for row in table["rows"])
    assert config["pseudopair_stats"]["compare"] == [{"a": "toy.round2", "b": "toy.round1"}]
    before = copy.deepcopy(config)
    assert chains.expand_rounds(config) == before                     # expanding twice: no change
    retrained = chains.expand_rounds({"rounds": {"toy": toy_chain(finetune=False)}})
    assert "finetune" not in retrained["experiments"]["toy_round2"]
    clash = {"rounds": {"toy": toy_chain()}, "experiments": {"toy_round1": {"c2i": ["m30k.de"]}}}
    with pytest.raises(ValueError, match=r"would overwrite experiments\.toy_round1"):
        chains.expand_rounds(clash)
    with pytest.raises(ValueError, match=r"rounds\.toy\.rounds': must be a whole number"):
        chains.expand_rounds({"rounds": {"toy": toy_chain(rounds=0)}})


def test_the_demo_has_a_chain_in_table_4s_and_one_in_table_5s_setting():
    config = demo()
    assert chains.chains(config) == ["de_coco", "en_de_coco_c2c"]
    de = chains.chain_rounds(config, "de_coco")
    assert [r["experiment"] for r in de] == ["de_coco", "de_coco_round1", "de_coco_round2", "de_coco_round3"]
    assert config["experiments"]["de_coco_round3"]["finetune"] == "de_coco_round2"
    assert not config["experiments"]["de_coco_round3"].get("c2c")    # Table 4: no c2c
    c2c = config["experiments"]["en_de_coco_c2c_round2"]
    assert c2c["c2c"] == [["m30k.en", "m30k.de"], ["coco.en", "coco.de-pseudo@en_de_coco_c2c.round2"]]
    assert config["tables"]["table_rounds_en_de_coco_c2c"]["sum_sum"] is True
    # round 1 is the paper's single "+ fine-tune" round under another name
    assert ({k: v for k, v in config["pseudopairs"]["de_coco.round1"].items() if k != "paper"}
            == {"source": "de_coco", "queries": "coco.en", "database": "m30k.de"})
    spec = chains.summary_spec(config, "en_de_coco_c2c")
    assert spec["langs"] == ["en", "de"] and spec["top"] == 150 and spec["seeds"] == ["1", "2", "3"]
    assert spec["rounds"][0]["pairs"] == {}                           # round 0 mined nothing
    assert spec["rounds"][2]["pairs"]["3"] == "results/pseudopairs/en_de_coco_c2c.round2/seed3/pairs.parquet"
    assert spec["rounds"][3]["metrics"]["1"] == "results/models/en_de_coco_c2c_round3/seed1/metrics.json"
    assert len(chains.summary_inputs(config, "de_coco")) == 4 * 3 + 3 * 3 * 2
    with pytest.raises(ValueError, match="unknown chain 'nope'"):
        chains.chain_rounds(config, "nope")


# --------------------------------------------------------------------------------------------
# The stop rule and the summary, on a hand case


def test_the_stop_rule_keeps_the_round_before_the_first_that_does_not_improve():
    assert report_rounds.stop_round([5, 6, 6, 9]) == 1      # a tie is no improvement
    assert report_rounds.stop_round([5, 4, 9]) == 0
    assert report_rounds.stop_round([1, 2, 3]) == 2         # every round improves: the last
    assert report_rounds.stop_round([7]) == 0
    assert report_rounds.stop_round([1, math.nan, 3]) == 0  # a missing score never improves


TEXTS = {0: "x", 1: "y", 2: "x", 3: "z"}   # database rows 0 and 2 carry the same caption text


def _write_pairs(path, matches):
    """A pair file from {(query image, caption idx): database row}."""
    frame = pd.DataFrame([{
        "query_image_id": img, "query_caption_idx": idx, "query_lang": "en", "query_text": f"q {img}{idx}",
        "match_row": row, "match_image_id": f"m{row}", "match_caption_idx": 0, "match_lang": "de",
        "match_text": TEXTS[row], "match_raw": TEXTS[row], "similarity": 0.5, "score": 0.5,
    } for (img, idx), row in matches.items()], columns=PAIR_COLUMNS)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)


def _write_metrics(path, *, val, rsum):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"retrieval": {"de": {"rsum": rsum}}, "checkpoint": {"val_score": val}}))


QUERIES = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
HAND = {  # (round, seed): (validation score, German Sum, database row per query or None)
    (0, "1"): (100, 50, None), (0, "2"): (110, 60, None),
    (1, "1"): (120, 70, [0, 0, 1, 2]), (1, "2"): (115, 66, [3, 3, 3, 1]),
    (2, "1"): (118, 80, [0, 1, 1, 2]), (2, "2"): (125, 90, [3, 2, 1, None]),  # b1 unmatched
}


@pytest.fixture
def hand_chain(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # the layout's paths are relative to the working directory
    config = chains.expand_rounds({"rounds": {"toy": toy_chain()}, "seeds": [1, 2],
                                   "pseudopair_stats": {"top": 2}})
    spec = chains.summary_spec(config, "toy")
    for (r, seed), (val, rsum, rows) in HAND.items():
        entry = spec["rounds"][r]
        _write_metrics(tmp_path / entry["metrics"][seed], val=val, rsum=rsum)
        if rows is not None:
            _write_pairs(tmp_path / entry["pairs"][seed],
                         {q: row for q, row in zip(QUERIES, rows) if row is not None})
            (tmp_path / entry["stats"][seed]).write_text(json.dumps({"n_database": 4}))
    return tmp_path, spec


def test_rounds_summary_of_a_hand_built_chain(hand_chain):
    root, spec = hand_chain
    out, png = root / layout.rounds_summary("toy"), root / layout.rounds_figure("toy")
    report_rounds.write_rounds(spec, output=out, figure=png)
    table = pd.read_csv(out, keep_default_na=False, na_values=[""], dtype={"kept_seeds": str})
    assert list(table.columns) == report_rounds.COLUMNS
    assert table["experiment"].tolist() == ["src", "toy_round1", "toy_round2"]
    assert table["metric_name"].tolist() == ["Sum (de)"] * 3 and table["n"].tolist() == [2, 2, 2]
    expect = {  # by hand: mean and sample sd over the two seeds
        "val": [(105, 7.0711), (117.5, 3.5355), (121.5, 4.9497)],
        "metric": [(55, 7.0711), (68, 2.8284), (85, 7.0711)],
        # top 2 by text: round 1 seed 1 x,x,y,x -> 4/4, seed 2 z,z,z,y -> 4/4; round 2: x,y,y,x
        # -> 4/4, z,x,y -> 2/3
        "top_share_text": [None, (1.0, 0.0), (5 / 6, 0.2357)],
        # by row: counts [2,1,1,0] -> 3/4, [0,1,0,3] -> 4/4; [1,2,1,0] -> 3/4, [1,1,1,0] -> 2/3
        "top_share": [None, (0.875, 0.1768), (17 / 24, 0.0589)],
        "used_share": [None, (0.625, 0.1768), (0.75, 0.0)],
        # rows {0,1,2} vs {0,1,2}: 1; {1,3} vs {1,2,3}: 2/3
        "jaccard_previous": [None, None, (5 / 6, 0.2357)],
        # same caption as the round before: 3 of 4 queries; 1 of the 3 matched in both
        "same_match_previous": [None, None, (13 / 24, 0.2946)],
    }
    for value, rows in expect.items():
        for r, pair in enumerate(rows):
            mean, sd = table.loc[r, f"{value}_mean"], table.loc[r, f"{value}_std"]
            if pair is None:
                assert math.isnan(mean) and math.isnan(sd), (value, r)
            else:
                assert mean == pytest.approx(pair[0], abs=1e-4), (value, r)
                assert sd == pytest.approx(pair[1], abs=1e-4), (value, r)
    # means 105 < 117.5 < 121.5: every round improves, the stop rule keeps the last; seed 1's own
    # chain (100, 120, 118) stops after round 1, seed 2's (110, 115, 125) keeps round 2
    assert table["improved"].tolist()[1:] == [True, True] and pd.isna(table.loc[0, "improved"])
    assert table["kept"].tolist() == [False, False, True]
    assert table["kept_seeds"].fillna("").tolist() == ["", "1", "2"]
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size[0] > 500


def test_the_stop_rule_on_mean_validation_scores_in_the_summary(hand_chain):
    root, spec = hand_chain
    entry = spec["rounds"][2]
    for seed in ("1", "2"):   # round 2 now worse on validation, better on test: validation decides
        _write_metrics(root / entry["metrics"][seed], val=101, rsum=200)
    summary = report_rounds.summarise_rounds(spec, report_rounds.seed_values(spec))
    assert summary["improved"].tolist()[1:] == [True, False]
    assert summary["kept"].tolist() == [False, True, False]
    assert summary["kept_seeds"].tolist() == ["", "1,2", ""]


def test_the_rounds_figure_plots_the_summarys_values(hand_chain):
    root, spec = hand_chain
    summary = report_rounds.summarise_rounds(spec, report_rounds.seed_values(spec))
    fig = report_rounds.rounds_figure(summary, top=2)
    left, right = fig.axes
    metric, stop = left.lines
    assert list(metric.get_xdata()) == [0, 1, 2]
    assert np.allclose(metric.get_ydata(), [55, 68, 85])
    assert list(stop.get_xdata()) == [2, 2] and "keeps round 2" in stop.get_label()
    band = left.collections[0].get_paths()[0].vertices   # mean ± sd, shaded
    for x, y in ((0, 55 - 7.0711), (0, 55 + 7.0711), (2, 85 + 7.0711), (1, 68 - 2.8284)):
        assert np.isclose(band, [x, y], atol=1e-3).all(axis=1).any(), (x, y)
    top, unchanged = right.lines
    assert list(top.get_xdata()) == [1, 2] and np.allclose(top.get_ydata(), [100, 250 / 3])
    assert list(unchanged.get_xdata()) == [2] and np.allclose(unchanged.get_ydata(), [1300 / 24])
    assert "top-2 share" in top.get_label()
    import matplotlib.pyplot as plt

    plt.close(fig)


# --------------------------------------------------------------------------------------------
# The DAG


def test_a_chains_summary_dag_trains_every_round_from_the_one_before(tmp_path):
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "2", layout.rounds_summary("de_coco"),
                           layout.rounds_figure("de_coco"))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["rounds_summary"] == 1
    assert model_counts(result.stdout) == {"train": 4 * 3, "evaluate": 4 * 3}   # rounds 0-3 x 3 seeds
    assert counts["mine"] == 3 * 3 and counts["pseudopair_captions"] == 3 * 3
    blocks = re.split(r"\n(?=rule |localrule )", result.stdout)
    mine = next(b for b in blocks if "rule mine:" in b and "pseudopairs=de_coco.round2, seed=2" in b)
    assert "results/models/de_coco_round1/seed2/checkpoint.pt" in mine
    train = job_block(result.stdout, "train", "results/models/de_coco_round3/seed1/checkpoint.pt")
    assert "results/models/de_coco_round2/seed1/checkpoint.pt" in train
    assert "results/pseudopairs/de_coco.round3/seed1/captions.p0.parquet" in train
    summary = next(b for b in blocks if "rule rounds_summary:" in b)
    assert "results/benchmarks/rounds_summary/de_coco.tsv" in summary
    assert "results/logs/rounds_summary/de_coco.log" in summary


def test_the_per_round_table_and_all_include_both_chains(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/table_rounds_en_de_coco_c2c.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert model_counts(result.stdout)["train"] == 4 * 3 and counts["mine"] == 3 * 3 and counts["table"] == 1
    everything = run_snakemake(tmp_path, "-n", "--cores", "2", "all")
    assert everything.returncode == 0, everything.stderr[-3000:]
    counts = job_counts(everything.stdout)
    assert counts["rounds_summary"] == 2
    assert "results/rounds_en_de_coco_c2c.csv" in everything.stdout
    assert "results/figures/rounds_de_coco.png" in everything.stdout


def test_an_unknown_chain_is_no_target(tmp_path):
    # the summary rule's chain wildcard is constrained to the configured chains: no rule matches
    result = run_snakemake(tmp_path, "-n", "--cores", "1", "results/rounds_nope.csv")
    assert result.returncode != 0
    assert "No rule to produce results/rounds_nope.csv" in result.stdout + result.stderr, result.stdout[-2000:]


def test_a_chain_that_clashes_with_an_experiment_fails_before_any_job(tmp_path):
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["experiments"]["de_coco_round2"] = {"c2i": ["m30k.de"]}
    with pytest.raises(ConfigError, match=r"rounds\.de_coco': would overwrite experiments\.de_coco_round2"):
        check_config(config)
