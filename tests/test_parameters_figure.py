"""Paper 002's Figure 3 (mR against parameters, trained or kept at test time): the points computed
from hand-made metrics.json files, the per-language-embedding reference, the PNG written, the
figure declared as config data (table_smalr2's ``parameters_figure``) and the demo's dry run."""

from __future__ import annotations

import copy
import json
import math

import pandas as pd
import pytest

from conftest import run_snakemake
from pseudopairs import cli
from pseudopairs.report import contract
from pseudopairs.report.parameters import CSV_COLUMNS, parameters_figure, parameters_table
from test_experiments import demo


def _metrics(path, *, trainable, text_embedding, recalls, key="portion_retrieval", heads=0, pretraining=0):
    """A metrics.json with ``recalls[lang]`` = its retrieval entry; ``heads``: parameters trained
    besides the model's; ``pretraining``: HEM's pretraining ones (``training`` = trainable + heads
    + pretraining)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({key: recalls, "parameters": {
        "trainable": trainable, "total": trainable + 7, "text_embedding": text_embedding,
        "pretraining": pretraining, "training": trainable + heads + pretraining}}))
    return str(path)


def _spec(tmp_path, *, reference=True):
    m = tmp_path / "metrics"
    vocab = tmp_path / "hem_vocab.json"
    # HEM: 3 specific words (en a, b; de c), 2 latent tokens; en has 4 words, de 2
    vocab.write_text(json.dumps({"latent_size": 2, "specific": {"de": ["c"], "en": ["a", "b"]},
                                 "latent": {"de": {"z": 0}, "en": {"x": 0, "y": 1}}}))
    spec = {
        "name": "fig", "title": "Figure 3", "langs": ["en", "de"], "columns": ["mean_recall"],
        "retrieval_key": "portion_retrieval",
        "rows": [{"label": "LA", "experiment": "la", "paper": {"en": [65.5], "de": [61.3]}},
                 {"label": "HEM", "experiment": "hem", "paper": {"en": [69.2]}},
                 {"label": "GRU", "experiment": "gru", "beyond_paper": True}],
        "metrics": {
            # seed mR: (50 + 40) / 2 = 45 and (60 + 50) / 2 = 55; de of seed 1 from its Sum / 6
            "la": {"1": _metrics(m / "la1.json", trainable=1000, text_embedding=100,
                                 recalls={"en": {"mean_recall": 50.0}, "de": {"rsum": 240.0}}),
                   "2": _metrics(m / "la2.json", trainable=1000, text_embedding=100,
                                 recalls={"en": {"mean_recall": 60.0}, "de": {"mean_recall": 50.0}})},
            # hybrid embedding: (2 + 3 + 2) rows x 4 + a 4 -> 5 projection = 28 + 25 = 53
            # SMALR-like: 300 parameters of training-only heads besides the model's 1053; HEM's
            # pretraining: 3 latent tokens scored from 4-d rows (3·4 + 3 = 15) and the 1 of them
            # dropped (4): 19
            "hem": {"1": _metrics(m / "hem1.json", trainable=1053, text_embedding=53, heads=300, pretraining=19,
                                  recalls={"en": {"mean_recall": 70.0}, "de": {"mean_recall": 62.0}}),
                    "2": _metrics(m / "hem2.json", trainable=1053, text_embedding=53, heads=300, pretraining=19,
                                  recalls={"en": {"mean_recall": 68.0}, "de": {"mean_recall": 60.0}})},
            # one seed: no standard deviation; a parameter count that differs by seed is averaged
            "gru": {"1": _metrics(m / "gru1.json", trainable=5001, text_embedding=4000,
                                  recalls={"en": {"mean_recall": 30.0}, "de": {"mean_recall": 20.0}})},
        },
    }
    if reference:
        spec["reference"] = {"label": "per-language", "experiment": "hem", "row_dim": 4,
                             "output_dim": 5, "vocab": {"1": str(vocab), "2": str(vocab)}}
    return spec


def test_points_are_the_mean_over_languages_and_seeds(tmp_path):
    frame = parameters_table(_spec(tmp_path))
    assert list(frame.columns) == CSV_COLUMNS
    rows = frame.set_index("label")
    assert rows.loc["LA", "trainable_mean"] == 1000 and rows.loc["LA", "n"] == 2
    assert rows.loc["LA", "training_mean"] == 1000                              # no heads
    # trained: the model's 1053, the heads' 300, the pretraining's 19; kept at test time: 1053
    assert rows.loc["HEM", "training_mean"] == 1372 and rows.loc["HEM", "trainable_mean"] == 1053
    assert rows.loc["HEM", "pretraining_mean"] == 19 and rows.loc["LA", "pretraining_mean"] == 0
    assert rows.loc["LA", "mean_recall_mean"] == pytest.approx(50.0)
    assert rows.loc["LA", "mean_recall_std"] == pytest.approx(math.sqrt(50.0))   # 45, 55: sd 7.07
    assert rows.loc["LA", "paper_mean_recall"] == pytest.approx((65.5 + 61.3) / 2)
    assert rows.loc["HEM", "mean_recall_mean"] == pytest.approx(65.0)            # 66 and 64
    assert rows.loc["HEM", "mean_recall_std"] == pytest.approx(math.sqrt(2.0))
    assert math.isnan(rows.loc["HEM", "paper_mean_recall"])                      # no German number
    assert rows.loc["GRU", "n"] == 1 and math.isnan(rows.loc["GRU", "mean_recall_std"])
    assert rows.loc["GRU", "mean_recall_mean"] == 25.0 and bool(rows.loc["GRU", "beyond_paper"])
    # per-language embeddings: the HEM model's 1053 - 53 + (2 + 4 + 2) x 4 + 25 = 1057 kept at
    # test time, 1372 - 19 (no HEM pretraining) - 53 + 57 = 1357 trained
    ref = rows.loc["per-language"]
    assert bool(ref["reference"]) and ref["trainable_mean"] == 1057 and ref["training_mean"] == 1357
    assert math.isnan(ref["mean_recall_mean"])


def test_points_read_each_language_from_its_own_test_set(tmp_path):
    """``retrieval_keys`` (002's Table 2: En and De on test 2016's five captions per image): a
    point's mR takes English from ``retrieval`` and German from ``portion_retrieval`` here."""
    spec = _spec(tmp_path, reference=False)
    for seed, path in spec["metrics"]["gru"].items():
        data = json.loads(open(path).read())
        data["retrieval"] = {"en": {"mean_recall": 80.0}}
        open(path, "w").write(json.dumps(data))
    spec["retrieval_keys"] = {"en": "retrieval", "de": "portion_retrieval"}
    rows = parameters_table({**spec, "rows": [r for r in spec["rows"] if r["experiment"] == "gru"]}).set_index("label")
    assert rows.loc["GRU", "mean_recall_mean"] == pytest.approx((80.0 + 20.0) / 2)


def test_the_reference_checks_the_vocabulary_against_the_recorded_count(tmp_path):
    spec = _spec(tmp_path)
    spec["reference"]["row_dim"] = 8
    with pytest.raises(ValueError, match=r"hem1\.json: parameters\.text_embedding is 53, but HEM's "
                                         r"vocabulary .*hem_vocab\.json with rows of 8"):
        parameters_table(spec)


def test_a_metrics_file_without_counts_is_named(tmp_path):
    spec = _spec(tmp_path, reference=False)
    path = spec["metrics"]["la"]["2"]
    data = json.loads(open(path).read())
    del data["parameters"]
    open(path, "w").write(json.dumps(data))
    with pytest.raises(ValueError, match=r"la2\.json: no parameters\.training"):
        parameters_table(spec)
    # a metrics.json written before the training count was recorded
    data["parameters"] = {"trainable": 1000, "total": 1007, "text_embedding": 100}
    open(path, "w").write(json.dumps(data))
    with pytest.raises(ValueError, match=r"la2\.json: no parameters\.training \(a metrics\.json "
                                         r"from before"):
        parameters_table(spec)


def test_cli_writes_the_png_and_the_csv(tmp_path):
    spec = _spec(tmp_path)
    png, csv = tmp_path / "out" / "fig.png", tmp_path / "out" / "fig.csv"
    assert cli.main(["parameters-figure", "--spec", json.dumps(spec), "--png", str(png),
                     "--csv", str(csv)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    frame = pd.read_csv(csv)
    assert frame["label"].tolist() == ["LA", "HEM", "GRU", "per-language"]
    assert frame["trainable_mean"].tolist() == [1000, 1053, 5001, 1057]
    assert frame["training_mean"].tolist() == [1000, 1372, 5001, 1357]
    assert frame["mean_recall_mean"].iloc[:3].tolist() == pytest.approx([50.0, 65.0, 25.0])
    assert sorted(p.name for p in png.parent.iterdir()) == ["fig.csv", "fig.png"]


@pytest.mark.parametrize("count, column", [("training", "training_mean"), ("test_time", "trainable_mean")])
def test_the_figure_plots_the_count_it_is_given(tmp_path, monkeypatch, count, column):
    """``count`` picks the x of every point and of the reference line, and names the axis."""
    import matplotlib.axes

    frame = parameters_table(_spec(tmp_path))
    seen = {}
    real_errorbar, real_axvline = matplotlib.axes.Axes.errorbar, matplotlib.axes.Axes.axvline

    def errorbar(self, x, y, **kwargs):
        seen.setdefault("points", []).append(x[0])
        return real_errorbar(self, x, y, **kwargs)

    def axvline(self, x=0, **kwargs):
        seen["line"] = x
        return real_axvline(self, x, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", errorbar)
    monkeypatch.setattr(matplotlib.axes.Axes, "axvline", axvline)
    parameters_figure(frame, tmp_path / "fig.png", count=count)
    assert seen["points"] == frame[column].iloc[:3].tolist()
    assert seen["line"] == frame[column].iloc[3]
    with pytest.raises(ValueError, match="count must be one of \\['training', 'test_time'\\], got 'all'"):
        parameters_figure(frame, tmp_path / "fig.png", count="all")


def test_the_demo_declares_figure_3_for_table_2():
    config = demo()
    assert contract.parameters_figures(config) == {"smalr_params": "table_smalr2"}
    spec = contract.parameters_figure_spec(config, "smalr_params")
    assert spec["count"] == "training"                     # 002's Figure 3: parameters trained
    assert [row["experiment"] for row in spec["rows"]] == ["smalr_la", "smalr_hem", "smalr", "smalr_hem_task1",
                                                           "smalr_task1", "t_multi"]
    assert spec["langs"] == ["en", "de", "fr", "cs"] and spec["retrieval_key"] == "portion_retrieval"
    assert spec["metrics"]["smalr"] == {"1": "results/models/smalr/seed1/metrics.json",
                                        "2": "results/models/smalr/seed2/metrics.json"}
    reference = spec["reference"]
    assert reference["experiment"] == "smalr_hem"
    assert reference["row_dim"] == config["hem"]["pca_dim"]
    assert reference["output_dim"] == config["model"]["embedding_dim"]
    assert "results/smalr/smalr_hem/seed1/hem_vocab.json" in contract.parameters_figure_inputs(config, "smalr_params")


def test_a_bad_figure_declaration_is_refused_naming_the_key():
    from pseudopairs.workflow.config import ConfigError, check_config, load_schema

    config = copy.deepcopy(demo())
    config["tables"]["table_smalr2"]["parameters_figure"]["reference"]["experiment"] = "t_multi"
    with pytest.raises(ConfigError, match=r"tables\.table_smalr2\.parameters_figure\.reference\.experiment"
                                          r".*'t_multi' does not use the hem text encoder"):
        check_config(config, load_schema())
    config = copy.deepcopy(demo())
    config["tables"]["table_smalr2"]["parameters_figure"]["colour"] = "red"
    with pytest.raises(ConfigError, match=r"tables\.table_smalr2\.parameters_figure.*'colour'"):
        check_config(config, load_schema())


def test_demo_dag_draws_figure_3(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/figures/smalr_params.png")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rule parameters_figure:" in result.stdout
    assert "output: results/figures/smalr_params.png, results/figures/smalr_params.csv" in result.stdout
