"""The method check: Welch's t on hand-computed cases, effects read from metrics files with the
paper's delta taken from the table, pseudopair rows found from the config, the Markdown section."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from conftest import REPO
from pseudopairs.workflow.config import check_config, load_config
from pseudopairs.report.contract import method_check_inputs, method_check_spec
from pseudopairs.report.method_check import (markdown_method_check, markdown_training_runs, method_check,
                                             training_runs, welch_t)


def test_welch_t_hand_computed():
    # means 12 and 10; sample variances 4 and 2; n 3 and 2: se = sqrt(4/3 + 2/2)
    assert welch_t([10.0, 12.0, 14.0], [9.0, 11.0]) == pytest.approx(2.0 / math.sqrt(4 / 3 + 2 / 2))
    assert welch_t([5.0, 5.0], [3.0, 3.0]) == math.inf
    assert welch_t([3.0, 3.0], [5.0, 5.0]) == -math.inf
    assert math.isnan(welch_t([5.0, 5.0], [5.0, 5.0])) and math.isnan(welch_t([5.0], [1.0, 2.0]))


def _metrics(tmp_path, name, seed, *, en=0.0, de=0.0, en2de=0.0, de2en=0.0):
    path = tmp_path / f"{name}.{seed}.json"
    path.write_text(json.dumps({"retrieval": {"en": {"rsum": en}, "de": {"rsum": de}},
                                "translation": {"en2de": en2de, "de2en": de2en}}))
    return str(path)


def test_effects_use_the_papers_delta_and_welch_t(tmp_path):
    tables = {"t1": {"kind": "retrieval", "langs": ["en"], "rows": [
                  {"label": "A", "experiment": "a", "paper": {"en": [1, 1, 300.0]}},
                  {"label": "B", "experiment": "b", "paper": {"en": [1, 1, 310.5]}}]},
              "t5": {"kind": "retrieval", "langs": ["en", "de"], "sum_sum": True, "rows": [
                  {"label": "A", "experiment": "a", "paper": {"sum_sum": 700.0}},
                  {"label": "P", "experiment": "p"}, {"label": "C", "experiment": "c"}]}}
    values = {"a": [(100, 50), (102, 52), (104, 54)], "b": [(110, 0), (111, 0), (112, 0)],
              "p": [(100, 60), (100, 61), (100, 62)], "c": [(90, 50), (90, 50), (90, 50)]}
    metrics = {name: {str(s): _metrics(tmp_path, name, s, en=en, de=de) for s, (en, de) in enumerate(v, 1)}
               for name, v in values.items()}
    spec = {"min_t": 2.0, "tables": tables, "metrics": metrics,
            "effects": [{"table": "t1", "metric": "en", "better": "b", "worse": "a"},
                        {"table": "t1", "metric": "en", "better": "a", "worse": "b"}],
            "pseudopairs": [{"table": "t5", "metric": "sum_sum", "source": "a", "control": "c",
                             "rows": ["p"]}]}
    frame = method_check(spec)
    first = frame.iloc[0]
    assert first["paper_delta"] == pytest.approx(10.5) and first["ours_delta"] == pytest.approx(9.0)
    assert first["welch_t"] == pytest.approx(9.0 / math.sqrt(4 / 3 + 1 / 3)) and first["holds"] == "yes"
    assert frame.iloc[1]["holds"] == "no"       # the reverse claim does not hold
    vs_source, vs_control = frame.iloc[2], frame.iloc[3]
    assert (vs_source["kind"], vs_source["ours_delta"], vs_source["holds"]) == ("pseudopairs vs source", 7.0, "")
    assert math.isnan(vs_source["paper_delta"])   # p has no published number
    assert vs_control["ours_delta"] == pytest.approx(21.0)
    assert vs_control["welch_t"] == pytest.approx(21.0 / math.sqrt(1 / 3))  # the control has no spread
    text = markdown_method_check(frame)
    assert "1 of 2 of the paper's large effects hold" in text
    assert "| large effect | t1 | en | b > a | +10.5 | +9.0 | 3 | 7.0 | yes |" in text
    assert "| pseudopairs vs control | t5 | sum_sum | p > c | – | +21.0 | 3 | 36.4 | · |" in text


def test_the_shipped_method_check_names_the_papers_14_effects_and_the_pseudopair_rows():
    config = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml"))
    spec = method_check_spec(config)
    assert len(spec["effects"]) == 14
    from pseudopairs.report.method_check import paper_value

    deltas = [round(paper_value(spec["tables"][e["table"]], e["better"], e["metric"])
                    - paper_value(spec["tables"][e["table"]], e["worse"], e["metric"]), 1)
              for e in spec["effects"]]
    assert deltas == [6.4, 8.8, 70.4, 13.4, 9.4, 8.5, 17.3, 10.6, 7.5, 8.3, 18.9, 7.9, 7.5, 19.4]
    table4 = spec["pseudopairs"][0]
    assert table4["source"] == "de_coco" and "de_coco_pseudo_ft" in table4["rows"]
    assert "de_coco" not in table4["rows"] and "de_coco_cont" not in table4["rows"]
    # de_coco is a row of Tables 2, 6 and 7 (five seeds) and of Table 4 (three)
    assert spec["metrics"]["de_coco"] == {str(s): f"results/models/de_coco/seed{s}/metrics.json"
                                          for s in (1, 2, 3, 4, 5)}
    # every run of every table is checked for how its training ended
    assert "en_de_coco_c2c_mt" in spec["runs"] and "coco" in spec["runs"]


def test_each_comparison_averages_over_the_seeds_of_its_table(tmp_path):
    # a and b are rows of t1 (seeds 1, 2) and of t3 (seeds 1-4): the check compares what each shows
    tables = {"t1": {"kind": "retrieval", "langs": ["en"], "seeds": [1, 2], "rows": [
                  {"label": "A", "experiment": "a", "paper": {"en": [1, 1, 300.0]}},
                  {"label": "B", "experiment": "b", "paper": {"en": [1, 1, 310.0]}}]},
              "t3": {"kind": "retrieval", "langs": ["en"], "seeds": [1, 2, 3, 4], "rows": [
                  {"label": "A", "experiment": "a", "paper": {"en": [1, 1, 300.0]}},
                  {"label": "B", "experiment": "b", "paper": {"en": [1, 1, 310.0]}}]}}
    values = {"a": [100, 102, 100, 102], "b": [101, 105, 106, 106]}
    metrics = {name: {str(s): _metrics(tmp_path, name, s, en=v) for s, v in enumerate(vs, 1)}
               for name, vs in values.items()}
    effect = {"metric": "en", "better": "b", "worse": "a"}
    spec = {"min_t": 2.0, "tables": tables, "metrics": metrics, "pseudopairs": [],
            "effects": [{"table": "t1", **effect}, {"table": "t3", **effect}]}
    t1, t3 = method_check(spec).itertuples()
    # seeds 1, 2: b 101, 105 (mean 103, var 8); a 100, 102 (mean 101, var 2): t = 2 / sqrt(5)
    assert (t1.n_better, t1.ours_delta, t1.holds) == (2, 2.0, "no")
    assert t1.welch_t == pytest.approx(2.0 / math.sqrt(8 / 2 + 2 / 2))
    # seeds 1-4: b mean 104.5 (var 5.667), a mean 101 (var 1.333): t = 3.5 / sqrt(1.75) = 2.65
    assert (t3.n_better, t3.ours_delta, t3.holds) == (4, 3.5, "yes")
    assert t3.welch_t == pytest.approx(3.5 / math.sqrt((17 / 3) / 4 + (4 / 3) / 4))
    text = markdown_method_check(method_check(spec))
    assert "| large effect | t1 | en | b > a | +10.0 | +2.0 | 2 | 0.9 | no |" in text
    assert "| large effect | t3 | en | b > a | +10.0 | +3.5 | 4 | 2.6 | yes |" in text
    del metrics["a"]["4"]
    with pytest.raises(ValueError, match=r"t3 averages over seeds \[1, 2, 3, 4\], but the spec has no "
                                         r"metrics of 'a' for seeds \[4\]"):
        method_check(spec)


def test_the_spec_reads_each_effect_at_the_seeds_of_its_table():
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["tables"]["table3"]["seeds"] = [1, 2, 3, 4, 5, 6]
    config["tables"]["table1"]["seeds"] = [1, 2, 3]
    spec = method_check_spec(check_config(config))
    assert spec["tables"]["table3"]["seeds"] == [1, 2, 3, 4, 5, 6]
    assert spec["tables"]["table1"]["seeds"] == [1, 2, 3]
    # en_de_c2c is compared in Table 3 (six seeds) and Tables 1, 2, 7 (three or five): its six
    # runs are inputs; en, a row of Table 1 alone, is read at Table 1's three
    assert list(spec["metrics"]["en_de_c2c"]) == ["1", "2", "3", "4", "5", "6"]
    assert list(spec["metrics"]["en"]) == ["1", "2", "3"]
    assert "results/models/en_de_coco_c2c/seed6/metrics.json" in method_check_inputs(check_config(config))


def test_an_effect_naming_a_row_the_table_lacks_fails_the_config_check():
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["method_check"]["effects"][0]["better"] = "de_coco"
    with pytest.raises(ValueError, match="method_check.effects.0.better': 'de_coco' is not a row of table1"):
        check_config(config)


def test_training_runs_name_the_runs_stopped_by_the_guard(tmp_path):
    def run(name, seed, updates, reason):
        path = tmp_path / f"{name}.{seed}.json"
        path.write_text(json.dumps({"checkpoint": {"update": updates - 400, "val_score": 500.0,
                                                   "updates": updates, "stop_reason": reason}}))
        return str(path)

    early = "early stopping: no improvement in 4 validations"
    guard = "reached max_updates=5000 (still improving: raise it)"
    spec = {"runs": {"en": {"1": run("en", 1, 1200, early), "2": run("en", 2, 5000, guard)},
                     "de": {"1": run("de", 1, 900, early)}}}
    runs = training_runs(spec)
    assert runs["at_max_updates"].tolist() == [False, True, False]
    assert runs.loc[1, ["experiment", "seed", "updates", "best_update"]].tolist() == ["en", 2, 5000, 4600]
    text = markdown_training_runs(runs)
    assert text.startswith("Training: 2 of 3 runs of the tables ended by early stopping "
                           "(updates per run 900–5000, median 1200); ")
    assert "**1 stopped at max_updates while still improving**: en seed 2." in text
    assert "none reached the max_updates guard" in markdown_training_runs(runs.iloc[[0, 2]])
    # tables.md reads it back from training_runs.csv
    runs.to_csv(tmp_path / "runs.csv", index=False)
    assert markdown_training_runs(pd.read_csv(tmp_path / "runs.csv", keep_default_na=False, na_values=[""])) == text
