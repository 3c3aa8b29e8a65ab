"""Tables aggregate per-seed metrics into mean, sample std and n, beside the paper's numbers."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from pseudopairs.report import tables


def run(en_rsum, en_i2t, de_rsum=300.0, en2de=80.0):
    metric = {"i2t_r1": en_i2t, "t2i_r1": 20.0, "rsum": en_rsum}
    return {"retrieval": {"en": metric, "de": {"i2t_r1": 30.0, "t2i_r1": 25.0, "rsum": de_rsum}},
            "translation": {"en2de": en2de, "de2en": 70.0}}


SPEC = {"title": "T", "kind": "retrieval", "langs": ["en", "de"], "sum_sum": True,
        "rows": [{"label": "A", "experiment": "a", "paper": {"en": [1.0, 2.0, 3.0], "sum_sum": 9.0}},
                 {"label": "ref only", "paper": {"de": [4.0, 5.0, 6.0]}}]}


def test_summarise_uses_sample_standard_deviation():
    m, s, n = tables.summarise([1.0, 2.0, 4.0])
    assert (m, n) == (7 / 3, 3)
    assert s == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2))
    assert math.isnan(tables.summarise([5.0])[1])


def test_retrieval_table_values():
    frame = tables.retrieval_table(SPEC, {"a": [run(100.0, 10.0), run(110.0, 14.0, de_rsum=310.0)]})
    a = frame.iloc[0]
    assert a["n"] == 2
    assert a["en_rsum_mean"] == 105.0 and a["en_rsum_std"] == pytest.approx(math.sqrt(50))
    assert a["en_i2t_r1_mean"] == 12.0
    assert a["sum_sum_mean"] == pytest.approx((400 + 420) / 2)
    assert a["paper_en_i2t_r1"] == 1.0 and a["paper_en_rsum"] == 3.0 and a["paper_sum_sum"] == 9.0
    assert math.isnan(a["paper_de_rsum"])
    ref = frame.iloc[1]
    assert ref["n"] == 0 and math.isnan(ref["en_rsum_mean"]) and ref["paper_de_t2i_r1"] == 5.0


def test_cli_reads_metrics_files_and_writes_csv_and_markdown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"title": "Table 7", "kind": "translation",
            "rows": [{"label": "DPCCA", "paper": {"en2de": 82.6, "de2en": 79.1}},
                     {"label": "En + De", "experiment": "en_de", "paper": {"en2de": 82.7, "de2en": 83.4}}]}
    for seed, value in [(1, 60.0), (2, 64.0)]:
        path = tmp_path / f"results/models/en_de/seed{seed}/metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(run(1.0, 1.0, en2de=value)))
    from pseudopairs.cli import main
    metrics = {"en_de": {str(s): f"results/models/en_de/seed{s}/metrics.json" for s in (1, 2)}}
    assert main(["table", "--name", "table7", "--spec", json.dumps({**spec, "metrics": metrics}),
                 "--output", "results/table7.csv"]) == 0
    frame = pd.read_csv(tmp_path / "results/table7.csv")
    assert list(frame["row"]) == ["DPCCA", "En + De"]
    assert frame.loc[1, "en2de_r1_mean"] == 62.0 and frame.loc[1, "de2en_r1_mean"] == 70.0
    assert frame.loc[1, "n"] == 2 and frame.loc[0, "n"] == 0
    assert main(["tables-markdown", "--specs", json.dumps({"table7": spec}), "--output",
                 "results/tables.md", "results/table7.csv"]) == 0
    text = (tmp_path / "results/tables.md").read_text()
    assert "| En + De | 62.0 ± 2.8 [82.7] | 70.0 ± 0.0 [83.4] | 2 |" in text


def test_missing_metrics_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="results/models/a/seed1/metrics.json"):
        tables.build_table({**SPEC, "metrics": {"a": {"1": "results/models/a/seed1/metrics.json"}}})


def test_translation_columns_follow_the_paper_order_and_every_row_has_them():
    spec = {"title": "T7", "kind": "translation",
            "rows": [{"label": "A", "experiment": "a", "paper": {"en2de": 90.6, "de2en": 91.2}},
                     {"label": "ref", "paper": {"en2de": 82.6, "de2en": 79.1}}]}
    # metrics.json is written with sorted keys: de2en comes first there.
    runs = [{"translation": {"de2en": 70.0, "en2de": 60.0}}, {"translation": {"de2en": 72.0, "en2de": 64.0}}]
    frame = tables.translation_table(spec, {"a": runs})
    assert list(frame.columns) == ["row", "experiment", "n", "en2de_r1_mean", "en2de_r1_std",
                                   "de2en_r1_mean", "de2en_r1_std", "paper_en2de", "paper_de2en"]
    assert frame.loc[0, "de2en_r1_mean"] == 71.0 and frame.loc[0, "en2de_r1_std"] == pytest.approx(math.sqrt(8))
    assert math.isnan(frame.loc[1, "en2de_r1_mean"]) and frame.loc[1, "paper_de2en"] == 79.1
    text = tables.markdown_table("table7", spec, frame)
    assert "|  | EN→DE R@1 | DE→EN R@1 | n |" in text
    assert "| A | 62.0 ± 2.8 [90.6] | 71.0 ± 1.4 [91.2] | 2 |" in text
    with pytest.raises(ValueError, match="some seeds of experiment 'a' lack translation direction 'de2en'"):
        tables.translation_table(spec, {"a": [runs[0], {"translation": {"en2de": 1.0}}]})


def test_rows_beyond_the_paper_are_marked():
    spec = {**SPEC, "rows": [SPEC["rows"][0], {"label": "B", "experiment": "b", "beyond_paper": True}]}
    frame = tables.retrieval_table(spec, {"a": [run(100.0, 10.0)], "b": [run(90.0, 9.0)]})
    assert frame["beyond_paper"].tolist() == [False, True]
    text = tables.markdown_table("t", spec, frame)
    assert "| B † | 9.0 |" in text and "| A | 10.0 [1.0] |" in text
    assert "† beyond the paper" in text
    assert "†" not in tables.markdown_table("t", SPEC, tables.retrieval_table(SPEC, {"a": [run(100.0, 10.0)]}))


def test_pseudopair_statistics_render_mean_sd_and_paper():
    rows = []
    for seed, used in (("1", 0.30), ("2", 0.40)):
        rows.append({"statistic": "used_share", "pseudopairs": "de_coco", "criterion": "cosine",
                     "source": "de_coco", "compared_with": "", "seeds": seed, "value": used, "paper": 0.37})
    rows.append({"statistic": "jaccard_seeds", "pseudopairs": "de_coco", "criterion": "cosine",
                 "source": "de_coco", "compared_with": "", "seeds": "1,2", "value": 0.5, "paper": 0.51})
    rows.append({"statistic": "jaccard", "pseudopairs": "de_coco", "criterion": "cosine",
                 "source": "de_coco", "compared_with": "x", "seeds": "1", "value": 0.25, "paper": 0.41})
    rows.append({"statistic": "agreement", "pseudopairs": "de_coco", "criterion": "cosine",
                 "source": "de_coco", "compared_with": "x", "seeds": "1", "value": 0.1, "paper": None})
    text = tables.markdown_pseudopair_stats(pd.DataFrame(rows))
    line = next(l for l in text.splitlines() if l.startswith("| de_coco |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:3] == ["de_coco", "cosine", f"35.0 ± {100 * math.sqrt(0.005):.1f} [37.0]"]
    assert cells[10] == "0.50 [0.51]"         # Jaccard across seeds
    assert "| de_coco vs x | 0.25 [0.41] | 0.10 |" in text


def test_retrieval_tables_have_a_mean_recall_column_per_language():
    spec = {**SPEC, "sum_sum": False}
    a1, a2 = run(120.0, 10.0), run(180.0, 14.0)
    a1["retrieval"]["en"]["mean_recall"] = 20.0      # recorded by the evaluate step (rsum / 6)
    a2["retrieval"]["en"]["mean_recall"] = 30.0
    frame = tables.retrieval_table(spec, {"a": [a1, a2]})     # de: older metrics.json, no mean_recall
    a = frame.iloc[0]
    assert a["en_mean_recall_mean"] == 25.0 and a["en_mean_recall_std"] == pytest.approx(math.sqrt(50))
    assert a["de_mean_recall_mean"] == 50.0                   # rsum 300 / 6
    assert a["paper_en_mean_recall"] == 0.5                   # the paper's Sum 3.0 / 6
    assert math.isnan(a["paper_de_mean_recall"]) and frame.iloc[1]["paper_de_mean_recall"] == 1.0
    text = tables.markdown_table("t", spec, frame)
    assert "|  | en I→T R@1 | en T→I R@1 | en Sum | en mR | de I→T R@1 | de T→I R@1 | de Sum | de mR | n |" in text
    assert "| A | 12.0 ± 2.8 [1.0] | 20.0 ± 0.0 [2.0] | 150.0 ± 42.4 [3.0] | 25.0 ± 7.1 [0.5] |" in text
    assert "| ref only | – | – | – | – | – [4.0] | – [5.0] | – [6.0] | – [1.0] | 0 |" in text


# ---------------------------------------------------------------------------------------------
# Paper 004's layouts: a table's own columns, per-language rows, the translation-portion test set


def full(i2t: tuple, t2i: tuple) -> dict:
    """A metrics.json retrieval entry with every recall (R@1, R@5, R@10 per direction)."""
    out = {f"i2t_r{k}": v for k, v in zip((1, 5, 10), i2t)} | {f"t2i_r{k}": v for k, v in zip((1, 5, 10), t2i)}
    out["rsum"] = sum(i2t) + sum(t2i)
    out["mean_recall"] = out["rsum"] / 6
    return out


def test_r10_columns_and_per_language_rows():
    """Table 4's layout: R@10 of both directions per language; the Monolingual row takes its En
    columns from the En model and its De columns from the De model."""
    spec = {"title": "T4", "kind": "retrieval", "langs": ["en", "de"], "columns": ["i2t_r10", "t2i_r10"],
            "rows": [{"label": "Mono", "experiments": {"en": "m_en", "de": "m_de"},
                      "paper": {"en": [56.3, 40.1], "de": [39.5, 20.9]}},
                     {"label": "Bi", "experiment": "bi", "paper": {"en": [67.4, 55.1]}}]}
    en_only = [{"retrieval": {"en": full((10, 20, 60), (5, 15, 40))}},
               {"retrieval": {"en": full((10, 20, 70), (5, 15, 50))}}]
    de_only = [{"retrieval": {"de": full((1, 2, 30), (1, 2, 20))}},
               {"retrieval": {"de": full((1, 2, 34), (1, 2, 22))}}]
    bi = [{"retrieval": {"en": full((9, 9, 80), (9, 9, 70)), "de": full((8, 8, 50), (8, 8, 40))}}] * 2
    frame = tables.retrieval_table(spec, {"m_en": en_only, "m_de": de_only, "bi": bi})
    mono, row = frame.iloc[0], frame.iloc[1]
    assert mono["experiment"] == "en: m_en, de: m_de" and mono["n"] == 2
    assert mono["en_i2t_r10_mean"] == 65.0 and mono["en_t2i_r10_mean"] == 45.0
    assert mono["de_i2t_r10_mean"] == 32.0 and mono["de_t2i_r10_mean"] == 21.0
    assert mono["en_mean_recall_mean"] == pytest.approx((10 + 20 + 65 + 5 + 15 + 45) / 6)
    assert (mono["paper_en_i2t_r10"], mono["paper_en_t2i_r10"], mono["paper_de_t2i_r10"]) == (56.3, 40.1, 20.9)
    assert math.isnan(mono["paper_en_mean_recall"])          # R@10 alone gives no mean recall
    assert row["en_i2t_r10_mean"] == 80.0 and math.isnan(row["paper_de_i2t_r10"])
    assert "en_i2t_r1_mean" not in frame.columns and "en_rsum_mean" not in frame.columns
    text = tables.markdown_table("t4", spec, frame)
    assert "|  | en I→T R@10 | en T→I R@10 | en mR | de I→T R@10 | de T→I R@10 | de mR | n |" in text
    assert "| Mono | 65.0 ± 7.1 [56.3] | 45.0 ± 7.1 [40.1] |" in text
    # a language whose model has fewer seeds: n is the smaller count
    short = tables.retrieval_table(spec, {"m_en": en_only, "m_de": de_only[:1], "bi": bi})
    assert short.iloc[0]["n"] == 1


def test_six_recall_columns_give_the_papers_mean_recall():
    """Tables 2-3: the six recalls as printed; the paper's mR is their mean."""
    spec = {"title": "T2", "kind": "retrieval", "langs": ["en"],
            "columns": ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"],
            "rows": [{"label": "Monolingual", "experiment": "en",
                      "paper": {"en": [42.4, 69.9, 79.8, 30.5, 57.8, 67.9]}}]}
    frame = tables.retrieval_table(spec, {"en": [{"retrieval": {"en": full((40, 70, 80), (30, 60, 70))}}]})
    row = frame.iloc[0]
    assert row["paper_en_i2t_r5"] == 69.9 and row["paper_en_t2i_r10"] == 67.9
    assert row["paper_en_mean_recall"] == pytest.approx((42.4 + 69.9 + 79.8 + 30.5 + 57.8 + 67.9) / 6)
    assert row["en_t2i_r5_mean"] == 60.0 and row["en_mean_recall_mean"] == pytest.approx(350 / 6)
    assert math.isnan(row["en_t2i_r5_std"])                  # one seed


def test_translation_portion_tables_read_portion_retrieval():
    """Tables 6-7 read the translation corpus' test results (``portion_retrieval``), not the
    evaluation corpus' (``retrieval``) of the same model."""
    spec = {"title": "T7", "kind": "retrieval", "langs": ["fr"], "columns": ["t2i_r10"],
            "retrieval_key": "portion_retrieval",
            "rows": [{"label": "Multilingual", "experiment": "m", "paper": {"fr": [56.3]}}]}
    runs = [{"retrieval": {"en": full((1, 1, 1), (1, 1, 1))},
             "portion_retrieval": {"fr": full((5, 10, 20), (6, 12, 50))}}]
    frame = tables.retrieval_table(spec, {"m": runs})
    assert frame.iloc[0]["fr_t2i_r10_mean"] == 50.0 and frame.iloc[0]["paper_fr_t2i_r10"] == 56.3
    with pytest.raises(KeyError):
        tables.retrieval_table({**spec, "retrieval_key": "retrieval"}, {"m": runs})


def test_a_table_reads_each_language_from_its_own_test_set():
    """Paper 002's Table 2 (``retrieval_keys``, from ``lang_test_corpora``): En from the evaluation
    corpus' test (five captions per image, ``retrieval``), Fr from the translation portion's
    (``portion_retrieval``), in one row of one model; a CLC row reads its own aggregate in every
    language."""
    spec = {"title": "T2", "kind": "retrieval", "langs": ["en", "fr"], "columns": ["mean_recall"],
            "retrieval_key": "portion_retrieval",
            "retrieval_keys": {"en": "retrieval", "fr": "portion_retrieval"},
            "rows": [{"label": "SMALR", "experiment": "m"}, {"label": "CLC-A", "experiment": "m", "clc": "clc_a"}]}
    runs = [{"retrieval": {"en": full((60, 80, 90), (30, 60, 60))},             # mR 63.33
             "portion_retrieval": {"en": full((1, 1, 1), (1, 1, 1)), "fr": full((40, 50, 60), (40, 50, 60))}}]
    clc = [{"clc_a": {"en": full((9, 9, 9), (9, 9, 9)), "fr": full((6, 6, 6), (6, 6, 6))}}]
    frame = tables.retrieval_table(spec, {"m": runs, tables.clc_key("m"): clc})
    smalr, clc_row = frame.iloc[0], frame.iloc[1]
    assert smalr["en_mean_recall_mean"] == pytest.approx(380 / 6)          # not the portion's 1
    assert smalr["fr_mean_recall_mean"] == pytest.approx(50.0)
    assert (clc_row["en_mean_recall_mean"], clc_row["fr_mean_recall_mean"]) == (9.0, 6.0)


def test_load_metrics_reads_every_experiment_of_per_language_rows(tmp_path):
    paths = {}
    for name, value in (("a", 10.0), ("b", 20.0)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"retrieval": {"en": full((value, value, value), (1, 1, 1)),
                                                  "de": full((value, value, value), (1, 1, 1))}}))
        paths[name] = {"1": str(path)}
    spec = {"title": "T", "kind": "retrieval", "langs": ["en", "de"], "columns": ["i2t_r1"],
            "rows": [{"label": "Mono", "experiments": {"en": "a", "de": "b"}}], "metrics": paths}
    frame = tables.build_table(spec)
    assert (frame.loc[0, "en_i2t_r1_mean"], frame.loc[0, "de_i2t_r1_mean"]) == (10.0, 20.0)
    with pytest.raises(ValueError, match="no metrics files given for experiment 'b'"):
        tables.build_table({**spec, "metrics": {"a": paths["a"]}})


def test_table_figure_draws_every_row(tmp_path):
    """Figure 3 as bars: a PNG with one panel per language; a non-retrieval table is refused."""
    from PIL import Image

    from pseudopairs.report.figures import table_figure

    spec = {"title": "Figure 3", "kind": "retrieval", "langs": ["en", "de"], "columns": ["i2t_r10", "t2i_r10"],
            "rows": [{"label": "Mono", "experiments": {"en": "a", "de": "b"}}, {"label": "Multi", "experiment": "c"}]}
    runs = [{"retrieval": {lang: full((1, 2, v), (1, 2, v - 5)) for lang in ("en", "de")}} for v in (40, 44)]
    frame = tables.retrieval_table(spec, {"a": runs, "b": runs, "c": runs[:1]})
    path = tmp_path / "fig3.png"
    table_figure(spec, frame, path)
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > image.size[1] > 100
    with pytest.raises(ValueError, match="not a retrieval table"):
        table_figure({**spec, "kind": "translation"}, frame, tmp_path / "x.png")
