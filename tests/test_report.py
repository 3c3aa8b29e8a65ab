"""The report's HTML pages: the tables as HTML (ours as mean ± sd, the paper's number under it,
† on rows beyond the paper), any CSV with paper columns, the §7.2 statistics, the effect charts
(each row's difference from its source row, ours beside the paper's); the report after a partial
run; and a real `snakemake --report` of a tiny run, opened in headless Chromium."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser

import pandas as pd
import pytest
import yaml

from conftest import run_snakemake
from pseudopairs.report import html as pages_html
from pseudopairs.report import tables


class Cells(HTMLParser):
    """The rows of every <table> of a page: [[(tag, class, text), ...], ...] per table. A value
    cell (ours over the paper's number, one <td>) reads as two cells, ("td", "ours", text) and
    ("td", "paper", text), as far as it has them; non-breaking spaces read as spaces."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[tuple[str, str, str]]]] = []
        self._cell = None
        self._parts: list[list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = [tag, cls, ""]
            self._parts = [] if tag == "td" and cls == "value" else None
        elif tag == "span" and self._parts is not None and cls in ("ours", "paper"):
            self._parts.append([cls, ""])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data
            if self._parts:
                self._parts[-1][1] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            if self._parts is not None:
                cells = [(self._cell[0], cls, text.replace("\u00a0", " ").strip()) for cls, text in self._parts]
            else:
                cells = [(self._cell[0], self._cell[1], self._cell[2].replace("\u00a0", " ").strip())]
            self.tables[-1][-1].extend(cells)
            self._cell, self._parts = None, None


def parse(text: str) -> list[list[list[tuple[str, str, str]]]]:
    parser = Cells()
    parser.feed(text)
    return parser.tables


def body_rows(table) -> dict[str, list[tuple[str, str]]]:
    """Data rows by their label: [(class, text), ...] of the cells after the label."""
    rows = {}
    for row in table:
        if row and row[0][0] == "th" and "label" in row[0][1] and len(row) > 1 and row[1][0] == "td":
            rows[row[0][2]] = [(cls, text) for _, cls, text in row[1:]]
    return rows


def metrics(en_rsum: float, en_i2t: float, de_rsum: float = 300.0) -> dict:
    return {"retrieval": {"en": {"i2t_r1": en_i2t, "t2i_r1": 20.0, "rsum": en_rsum},
                          "de": {"i2t_r1": 30.0, "t2i_r1": 25.0, "rsum": de_rsum}},
            "translation": {"en2de": 80.0, "de2en": 70.0}}


SPEC = {"title": "Table 9: a test table", "kind": "retrieval", "langs": ["en", "de"], "sum_sum": True,
        "rows": [{"label": "A", "experiment": "a", "paper": {"en": [1.0, 2.0, 3.0], "sum_sum": 9.0}},
                 {"label": "ref only", "paper": {"de": [4.0, 5.0, 6.0]}},
                 {"label": "B <new>", "experiment": "b", "beyond_paper": True}]}


@pytest.fixture
def table_csv(tmp_path):
    """A table CSV as the `table` step writes it (and the tables read back from it)."""
    frame = tables.retrieval_table(SPEC, {"a": [metrics(100.0, 10.0), metrics(110.0, 14.0, de_rsum=310.0)],
                                          "b": [metrics(90.0, 9.0)]})
    path = tmp_path / "table9.csv"
    frame.to_csv(path, index=False, float_format="%.4f")
    return path


def test_a_table_renders_ours_with_sd_the_paper_beside_and_daggers(table_csv):
    frame = pd.read_csv(table_csv, keep_default_na=False, na_values=[""])
    text = pages_html.html_table(frame, pages_html.table_columns(SPEC, frame))
    (table,) = parse(text)
    header = [[cell[2] for cell in row] for row in table[:2]]
    assert header[0][1:3] == ["EN", "DE"] and header[0][3:] == ["Sum(Sum)", "n"]
    assert header[1][:3] == ["I→T R@1", "T→I R@1", "Sum"]
    assert "ours" not in header[1]  # ours and the paper's number share one column
    rows = body_rows(table)
    assert list(rows) == ["A", "ref only", "B <new> †"]  # escaped in the page, † on the new row
    a = rows["A"]
    # EN I→T R@1: ours 12.0 ± 2.8 (sample sd of 10, 14), the paper's 1.0 in the cell beside
    assert a[0] == ("ours", f"12.0 ± {math.sqrt(8):.1f}") and a[1] == ("paper", "1.0")
    en_sum = next(k for k, h in enumerate(pages_html.table_columns(SPEC, frame)) if h.heading == "Sum")
    assert a[2 * en_sum] == ("ours", f"105.0 ± {math.sqrt(50):.1f}") and a[2 * en_sum + 1] == ("paper", "3.0")
    assert a[-3:] == [("ours", f"410.0 ± {math.sqrt(200):.1f}"), ("paper", "9.0"), ("text", "2")]
    assert rows["ref only"][0] == ("ours", "–") and ("paper", "6.0") in rows["ref only"]
    b = rows["B <new> †"]
    assert b[0] == ("ours", "9.0") and b[1] == ("paper", "–") and b[-1] == ("text", "1")  # one seed: no ±
    assert "B &lt;new&gt;" in text and '<tr class="beyond">' in text
    # one <td> per value: ours over the paper's number
    assert text.count('<td class="value">') == 3 * len(pages_html.table_columns(SPEC, frame, with_n=False))


def test_table_7_has_one_r1_per_direction_beside_the_paper():
    spec = {"title": "Table 7", "kind": "translation",
            "rows": [{"label": "DPCCA", "paper": {"en2de": 82.6, "de2en": 79.1}},
                     {"label": "En + De", "experiment": "en_de", "paper": {"en2de": 82.7, "de2en": 83.4}}]}
    runs = [{"translation": {"en2de": 60.0, "de2en": 70.0}}, {"translation": {"en2de": 64.0, "de2en": 70.0}}]
    frame = tables.translation_table(spec, {"en_de": runs})
    for columns in (pages_html.table_columns(spec, frame), None):  # declared, and inferred (generic)
        (table,) = parse(pages_html.html_table(frame, columns))
        rows = {label: [c for c in cells if c[0] != "text"] for label, cells in body_rows(table).items()}
        assert rows["En + De"] == [("ours", "62.0 ± 2.8"), ("paper", "82.7"), ("ours", "70.0 ± 0.0"),
                                   ("paper", "83.4")]
        assert rows["DPCCA"][:2] == [("ours", "–"), ("paper", "82.6")]
    assert [c.heading for c in pages_html.table_columns(spec, frame)] == ["EN→DE R@1", "DE→EN R@1", "n"]


def test_any_csv_with_paper_columns_renders_without_a_declaration():
    """The hook for results such as method_check.csv: ours_X / sd_X / paper_X (or X_mean /
    X_std / paper_X) pair up; every other column is shown as it is."""
    frame = pd.DataFrame([{"kind": "large effect", "better": "en_de", "paper_better": 352.8, "ours_better": 250.0,
                           "sd_better": 4.0, "paper_delta": 6.4, "ours_delta": 10.25, "welch_t": float("inf"),
                           "n_better": 2, "holds": "yes"}])
    columns = pages_html.infer_columns(frame)
    assert [(c.heading, c.text, c.ours, c.sd, c.paper) for c in columns] == [
        ("kind", "kind", None, None, None), ("better", "better", None, None, None),
        ("better", None, "ours_better", "sd_better", "paper_better"),
        ("delta", None, "ours_delta", None, "paper_delta"), ("welch t", "welch_t", None, None, None),
        ("n better", "n_better", None, None, None), ("holds", "holds", None, None, None)]
    (table,) = parse(pages_html.html_table(frame))
    cells = [(cls, text) for _, cls, text in table[-1]]
    assert cells == [("text", "large effect"), ("text", "en_de"), ("ours", "250.0 ± 4.0"), ("paper", "352.8"),
                     ("ours", "10.2"), ("paper", "6.4"), ("text", "∞"), ("text", "2"), ("text", "yes")]


def test_pseudopair_statistics_render_mean_sd_and_the_paper_beside():
    rows = [{"statistic": "used_share", "pseudopairs": "de_coco", "criterion": "cosine", "source": "de_coco",
             "compared_with": "", "seeds": seed, "value": used, "paper": 0.37}
            for seed, used in (("1", 0.30), ("2", 0.40))]
    rows.append({"statistic": "gini", "pseudopairs": "de_coco", "criterion": "cosine", "source": "de_coco",
                 "compared_with": "", "seeds": "1", "value": 0.5, "paper": None})
    rows.append({"statistic": "jaccard", "pseudopairs": "de_coco", "criterion": "cosine", "source": "de_coco",
                 "compared_with": "x", "seeds": "1", "value": 0.25, "paper": 0.41})
    section = pages_html.pseudopair_stats_section(pd.DataFrame(rows), "§7.2")
    sets, pairs = parse(section)
    de_coco = body_rows(sets)["de_coco"]
    assert de_coco[0] == ("text", "cosine")
    assert de_coco[1:3] == [("ours", f"35.0 ± {100 * math.sqrt(0.005):.1f}"), ("paper", "37.0")]  # percent
    headings = [c[2] for c in sets[0]]
    gini = list(tables.STATS_HEADINGS).index("gini")
    assert headings[2 + gini] == "Gini" and de_coco[1 + 2 * gini: 3 + 2 * gini] == [("ours", "0.50"), ("paper", "–")]
    assert body_rows(pairs)["de_coco vs x"][:2] == [("ours", "0.25"), ("paper", "0.41")]


def test_report_page_writes_a_self_contained_page_with_tables_charts_and_figures(table_csv, tmp_path):
    from PIL import Image

    from pseudopairs.cli import main

    png = tmp_path / "curves.png"
    Image.new("RGB", (8, 8), "white").save(png)
    check = tmp_path / "method_check.csv"
    pd.DataFrame([{"kind": "large effect", "ours_delta": 1.0, "paper_delta": 2.0}]).to_csv(check, index=False)
    out = tmp_path / "html" / "all.html"
    assert main(["report-page", "--title", "Results", "--specs", json.dumps({"table9": SPEC}), "--table",
                 str(table_csv), "--csv", "Method check", str(check), "--image", "Curves — how it trained",
                 str(png), "--note", "a demo run", "--output", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.count("<table") == 2
    assert "<h2>Table 9: a test table</h2>" in text and "<h2>Method check</h2>" in text
    assert "<h2>Curves</h2>" in text and "<figcaption>How it trained</figcaption>" in text
    assert text.count('src="data:image/svg+xml;base64,') == 1  # the table's chart
    assert text.count('src="data:image/png;base64,') == 1
    assert "a demo run" in text and pages_html.BEYOND_NOTE in text
    assert "http://" not in text.replace("http://www.w3.org", "")  # nothing fetched from elsewhere
    # one table alone: its title is the page's
    single = tmp_path / "table9.html"
    assert main(["report-page", "--specs", json.dumps({"table9": SPEC}), "--table", str(table_csv),
                 "--output", str(single)]) == 0
    assert "<title>Table 9: a test table</title>" in single.read_text(encoding="utf-8")
    assert main(["report-page", "--output", str(tmp_path / "empty.html")]) == 1


def test_the_effect_chart_panels_are_the_sums():
    frame = tables.retrieval_table(SPEC, {"a": [metrics(100.0, 10.0)], "b": [metrics(90.0, 9.0)]})
    metrics_ = pages_html.chart_columns(SPEC, frame)
    assert [(c.group, c.heading) for c in metrics_] == [("EN", "Sum"), ("DE", "Sum"), ("", "Sum(Sum)")]


# Two models over three seeds; B builds on A (its source). Per seed: EN Sum and DE Sum.
EFFECT_SPEC = {"title": "Table 8: effects", "kind": "retrieval", "langs": ["en", "de"], "sum_sum": True,
               "rows": [{"label": "A", "experiment": "a", "paper": {"en": [40.0, 30.0, 350.0], "de": [30.0, 20.0, 300.0],
                                                                    "sum_sum": 650.0}},
                        {"label": "ref only", "paper": {"en": [1.0, 2.0, 3.0]}},
                        {"label": "B", "experiment": "b", "paper": {"en": [41.0, 29.0, 353.5], "de": [31.0, 21.0, 298.0],
                                                                    "sum_sum": 651.5}}],
               "sources": [None, None, {"row": 0, "reason": "mined from"}]}
A_SUMS = [(300.0, 250.0), (310.0, 240.0), (305.0, 262.0)]
B_SUMS = [(309.0, 251.0), (311.0, 250.0), (322.0, 263.0)]


def effect_runs() -> dict:
    return {"a": [metrics(en, 10.0 + k, de_rsum=de) for k, (en, de) in enumerate(A_SUMS)],
            "b": [metrics(en, 11.0, de_rsum=de) for en, de in B_SUMS]}


def test_an_effect_is_the_mean_and_sd_of_the_per_seed_differences_beside_the_papers():
    """Hand-made: ours = mean(B) − mean(A) (= the mean of the per-seed differences), sd = the
    sample sd of the per-seed differences, the paper's = its B − A as the table lists them."""
    from statistics import mean, stdev

    from pseudopairs.report.effects import seed_frames, table_effects

    runs = effect_runs()
    frame = tables.retrieval_table(EFFECT_SPEC, runs)
    per_seed = seed_frames(EFFECT_SPEC, runs)
    assert len(per_seed) == 3 and per_seed[1].loc[2, "en_rsum_mean"] == 311.0
    effects = table_effects(EFFECT_SPEC, frame, pages_html.chart_columns(EFFECT_SPEC, frame), per_seed)
    by_metric = {e["metric"]: e for e in effects}
    assert set(by_metric) == {"EN Sum", "DE Sum", "Sum(Sum)"}  # one row with a source, three panels
    en = by_metric["EN Sum"]
    assert (en["row"], en["source"], en["reason"], en["n"]) == ("B", "A", "mined from", 3)
    assert en["ours"] == pytest.approx(mean(b for b, _ in B_SUMS) - mean(a for a, _ in A_SUMS))
    assert en["ours"] == pytest.approx(9.0)
    assert en["sd"] == pytest.approx(stdev([9.0, 1.0, 17.0])) and en["sd"] == pytest.approx(8.0)  # by hand
    assert en["paper"] == pytest.approx(353.5 - 350.0)
    de = by_metric["DE Sum"]
    assert de["ours"] == pytest.approx(4.0) and de["sd"] == pytest.approx(stdev([1.0, 10.0, 1.0]))
    assert de["paper"] == pytest.approx(-2.0)
    both = by_metric["Sum(Sum)"]
    assert both["ours"] == pytest.approx(13.0) and both["sd"] == pytest.approx(stdev([10.0, 11.0, 18.0]))
    assert both["paper"] == pytest.approx(1.5)


def effects_data(text: str) -> list[dict]:
    import re

    (data,) = re.findall(r'<script type="application/json" class="effects"[^>]*>(.*?)</script>', text, re.S)
    return json.loads(data)


def test_the_page_draws_the_effects_from_the_metrics_files_and_shows_its_title_once(tmp_path):
    """report-page with a page spec (seeds and the pattern of the metrics files): the chart's data
    are the per-seed differences read from the files; the single table's title is the page's
    heading and appears once."""
    import base64

    from pseudopairs.cli import main

    runs = effect_runs()
    for name, by_seed in runs.items():
        for seed, run in enumerate(by_seed, start=1):
            path = tmp_path / "models" / name / f"seed{seed}" / "metrics.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(run))
    csv = tmp_path / "table8.csv"
    tables.retrieval_table(EFFECT_SPEC, runs).to_csv(csv, index=False, float_format="%.4f")
    spec = {**EFFECT_SPEC, "seeds": [1, 2, 3],
            "metrics_pattern": str(tmp_path / "models" / "{experiment}" / "seed{seed}" / "metrics.json")}
    out = tmp_path / "table8.html"
    assert main(["report-page", "--specs", json.dumps({"table8": spec}), "--table", str(csv),
                 "--ours-label", "ours (demo world)", "--output", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    data = {e["metric"]: e for e in effects_data(text)}
    assert data["EN Sum"]["ours"] == pytest.approx(9.0) and data["EN Sum"]["sd"] == pytest.approx(8.0)
    assert data["EN Sum"]["paper"] == pytest.approx(3.5) and data["Sum(Sum)"]["n"] == 3
    assert text.count("Table 8: effects") == 2  # <title> and <h1>; no second heading
    assert "<h2>" not in text and text.count('src="data:image/svg+xml;base64,') == 1
    svg = base64.b64decode(text.split('src="data:image/svg+xml;base64,')[1].split('"')[0]).decode()
    assert "ours (demo world)" in svg and "paper" in svg and "+9.0 ± 8.0" in svg and "+3.5" in svg
    # without the metrics files: the difference of the means, no sd
    bare = tmp_path / "bare.html"
    assert main(["report-page", "--specs", json.dumps({"table8": EFFECT_SPEC}), "--table", str(csv),
                 "--output", str(bare)]) == 0
    plain = {e["metric"]: e for e in effects_data(bare.read_text(encoding="utf-8"))}
    assert plain["EN Sum"]["ours"] == pytest.approx(9.0) and plain["EN Sum"]["sd"] is None


def test_each_row_of_the_shipped_tables_has_its_source_from_the_configuration():
    """Sources come from the config: the model that mined a row's pseudopairs, its fine-tuning
    start, the worse side of a method-check effect, else the table's first row with a model."""
    from report_fixture import shipped_config

    from pseudopairs.report.effects import row_sources

    config = shipped_config()

    def sources(table):
        rows = config["tables"][table]["rows"]
        named = {}
        for k, (row, source) in enumerate(zip(rows, row_sources(config, table))):
            label = row["label"] if row["label"] != "+ fine-tune" else f"{rows[k - 1]['label']} / ft"
            named[label] = None if source is None else (rows[source["row"]]["label"], source["reason"])
        return named

    table5 = sources("table5")
    assert table5["En+De+COCO+c2c"] is None
    assert table5["+ pseudo"] == ("En+De+COCO+c2c", "mined from")
    assert table5["+ pseudo 75% / ft"] == ("En+De+COCO+c2c", "mined from")
    assert table5["+ Translation"] == ("En+De+COCO+c2c", "method check")
    assert table5["control: fine-tune without pseudopairs"] == ("En+De+COCO+c2c", "fine-tuned from")
    table1 = sources("table1")
    assert table1["+ De"] == ("En", "method check") and table1["+ c2c"] == ("+ De", "method check")
    assert table1["COCO"] == ("En", "reference row") and table1["+ En"] == ("COCO", "method check")
    table7 = sources("table7")
    assert table7["DPCCA"] is None and table7["En + De"] is None
    assert table7["En + De + c2c"] == ("En + De", "method check")
    assert sources("table4")["+ pseudo-English of M30K (reverse) / fine-tune"] == ("De + COCO", "mined from")
    rounds = sources("table_rounds_de_coco")
    assert rounds["round 2"] == ("round 1", "mined from") and rounds["round 1"] == ("round 0 (de_coco)", "mined from")
    lessons4 = sources("table_lessons4")  # one model per language in the first row: still the reference
    assert lessons4["Bi-translation"] == ("Monolingual", "reference row")


def test_the_workflow_description_names_the_feature_network_of_the_config_in_use():
    """workflow/report/workflow.rst, rendered as `snakemake --report` renders it: ResNet18 on the
    demo, ResNet50 with config/paper.yaml."""
    from types import SimpleNamespace

    from jinja2 import Environment
    from report_fixture import REPO, shipped_config

    from pseudopairs.workflow.config import check_config, load_config

    template = Environment(trim_blocks=True, lstrip_blocks=True).from_string(
        (REPO / "workflow" / "report" / "workflow.rst").read_text(encoding="utf-8"))
    paper = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                                     REPO / "config" / "paper.yaml"))
    demo = template.render(snakemake=SimpleNamespace(config=shipped_config()), files=[])
    real = template.render(snakemake=SimpleNamespace(config=paper), files=[])
    assert "ResNet18" in demo and "ResNet50" not in demo and "world scenes" in demo
    assert "ResNet50" in real and "ResNet18" not in real and "ImageNet" in real


# --------------------------------------------------------------------------------------------
# A real report of a tiny run, in headless Chromium
# --------------------------------------------------------------------------------------------


def tiny_report_config() -> dict:
    """The tiny end-to-end world (one seed), every table cut to rows of the two source models
    that the pseudopair statistics need anyway, one pseudopair row beyond the paper and rows the
    paper alone reports."""
    from test_end_to_end import at_seeds, tiny_config

    config = tiny_config()
    aligned = {"label": "En+De+COCO+c2c", "experiment": "en_de_coco_c2c",
               "paper": {"en": [46.5, 34.8, 378.9], "de": [40.6, 28.8, 344.6], "sum_sum": 723.5}}
    disjoint = {"label": "De + COCO", "experiment": "de_coco", "paper": {"de": [36.4, 25.7, 319.7]}}
    config["tables"] = {
        "table1": {"rows": [{"label": "En", "paper": {"en": [40.5, 28.8, 346.4]}}, aligned]},
        "table2": {"rows": [{"label": "De", "paper": {"de": [34.9, 24.6, 311.2]}}, disjoint]},
        "table3": {"rows": [aligned]},
        "table4": {"rows": [disjoint, {"label": "+ pseudo CSLS", "experiment": "de_coco_csls",
                                       "beyond_paper": True}]},
        "table5": {"rows": [aligned]},
        "table5_criteria": {"rows": [aligned]},
        "table6": {"rows": [disjoint]},
        "table7": {"rows": [{"label": "DPCCA", "paper": {"en2de": 82.6, "de2en": 79.1}},
                            {"label": "En + De + COCO + c2c", "experiment": "en_de_coco_c2c",
                             "paper": {"en2de": 90.0, "de2en": 90.1}},
                            {"label": "De + COCO", "experiment": "de_coco", "paper": {"en2de": 73.4, "de2en": 70.7}}]},
    }
    # paper 004's tables (their own columns, per-language rows, French and Czech tested on the
    # translation portion, Figure 3 drawn as bars) on the same two models, at the run's one seed
    lessons = {"seeds": [1]}
    config["tables"].update({
        "table_lessons2": {**lessons, "rows": [{"label": "En+De+COCO+c2c", "experiment": "en_de_coco_c2c"}]},
        "table_lessons3": {**lessons, "rows": [{"label": "De + COCO", "experiment": "de_coco"}]},
        "table_lessons4": {**lessons, "rows": [{"label": "per language", "paper": {"en": [56.3, 40.1]},
                                                "experiments": {"en": "en_de_coco_c2c", "de": "de_coco"}}]},
        "table_lessons5": {**lessons, "rows": [{"label": "De + COCO", "experiment": "de_coco"}]},
        "table_lessons6": {**lessons, "rows": [{"label": "En+De+COCO+c2c", "experiment": "en_de_coco_c2c"}]},
        "table_lessons7": {**lessons, "rows": [{"label": "De + COCO", "experiment": "de_coco",
                                                "paper": {"fr": [47.0], "cs": [42.0]}}]},
        "table_lessons_fig3": {**lessons, "rows": [{"label": "per language",
                                                    "experiments": {"en": "en_de_coco_c2c", "de": "de_coco"}}]},
        # paper 002's Table 2 cut to a SMALR row: the fasttext, pretrain_hem, hem + smalr
        # training and evaluation jobs run for real (the translation-portion rows: the
        # augmented set's translation models would add minutes, and are not the report's test)
        "table_smalr2": {**lessons, "rows": [{"label": "SMALR", "experiment": "smalr_task1",
                                              "paper": {"en": [69.6], "de": [64.7]}}],
                         "parameters_figure": {"name": "smalr_params",
                                               "reference": {"label": "per-language embeddings",
                                                             "experiment": "smalr_hem_task1"}}},
    })
    at_seeds(config, [1])     # every table at the run's one seed
    # each chain of iterated bootstrapping cut to one round (its table is a page like the others)
    config["rounds"] = {chain: {"rounds": 1} for chain in ("de_coco", "en_de_coco_c2c")}
    config["method_check"] = {"min_t": 2, "pseudopairs": [],
                              "effects": [{"table": "table7", "metric": "de2en", "worse": "de_coco",
                                           "better": "en_de_coco_c2c"}]}
    return config


@pytest.mark.slow
def test_a_real_report_shows_the_tables_in_chromium(tmp_path):
    """`snakemake` then `snakemake --report` on a tiny run; Chromium opens the report, clicks the
    all-results page in the Tables category and finds every table in the report's frame. The
    checks without a browser (the pages, two tables against metrics.json, the report) run first,
    so that they run where Chromium is missing."""
    from pseudopairs.report import browser

    config_path = tmp_path / "tiny.yaml"
    config_path.write_text(yaml.safe_dump(tiny_report_config()))
    run = run_snakemake(tmp_path, "--cores", "2", "--configfile", str(config_path), timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    pages = sorted(p.name for p in (tmp_path / "results" / "html").iterdir())
    assert pages == ["all_results.html", "method_check.html", "pseudopair_stats.html",
                     *(f"table{k}.html" for k in range(1, 6)), "table5_criteria.html", "table6.html", "table7.html",
                     *(f"table_lessons{k}.html" for k in range(2, 8)), "table_lessons_fig3.html",
                     "table_rounds_de_coco.html", "table_rounds_en_de_coco_c2c.html", "table_smalr2.html"]
    assert (tmp_path / "results" / "figures" / "table_lessons_fig3.png").is_file()
    metrics = json.loads((tmp_path / "results/models/de_coco/seed1/metrics.json").read_text())
    lessons7 = pd.read_csv(tmp_path / "results" / "table_lessons7.csv")     # the translation portion
    assert lessons7.loc[0, "cs_t2i_r10_mean"] == pytest.approx(metrics["portion_retrieval"]["cs"]["t2i_r10"])
    lessons4 = pd.read_csv(tmp_path / "results" / "table_lessons4.csv")     # the comparable test
    assert lessons4.loc[0, "de_i2t_r10_mean"] == pytest.approx(metrics["retrieval"]["de"]["i2t_r10"])
    report = tmp_path / "results" / "report.html"
    run = run_snakemake(tmp_path, "--report", str(report), "--configfile", str(config_path))
    assert run.returncode == 0, run.stderr[-3000:]
    assert report.is_file() and "results/html/all_results.html" in report.read_text(encoding="utf-8")

    if browser.find_chromium() is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    start = browser.view_report(report)
    assert start.categories == {"Tables", "Pseudopairs", "Training"} and "Start here" in start.menu_text
    shot = tmp_path / "all_results.png"
    view = browser.view_report(report, "All results", subcategory=PAGES, screenshot=shot)
    # 7 tables and Table 5's criteria, 7 of paper 004, 1 of paper 002 and 2 of rounds, the method
    # check, the §7.2 sets and their comparison, and the demo world's pseudopair precision
    assert view.frame_tables == 18 + 1 + 2 + 1, view.frame_text[:3000]
    assert "precision of the pseudopairs (demo world)" in view.frame_text
    # an effect chart per table with two rows of models (Tables 4 and 7, both chains' rounds), the
    # training curves, Figure 1, 004's Figure 3 as bars, 002's Figure 3 (mR against parameters)
    assert view.frame_images == 4 + 4
    for text in ("Table 1: English M30K test 2016", "Table 7: translation retrieval", "Method check",
                 "§7.2", "Training curves", "Figure 1", "+ pseudo CSLS †", "DPCCA", "82.6", "De + COCO",
                 "004 Table 7: high-to-low resource transfer", "004 Figure 3", "T→I R@10",
                 "002 Figure 3"):
        assert text in view.frame_text, text
    assert browser.non_blank(shot, region=(0.3, 0.0, 1.0, 1.0)), f"the report's frame is blank: {shot}"
    table = browser.view_report(report, "Table 4", subcategory=PAGES)
    assert table.frame_tables == 1 and table.frame_images == 1 and "319.7" in table.frame_text


PAGES = "Charts and tables (pages)"  # the report's subcategory of the HTML pages (common.smk)


@pytest.mark.slow
def test_the_report_shows_what_exists_after_table_5_alone(tmp_path):
    """After Table 5 alone (its models' metrics, its CSV and page built by the workflow's own
    rules; every other table missing) `snakemake --report` reports what is there instead of
    failing on the results a complete run would add, while a run still plans everything. In
    Chromium: the report lists Table 5 by name, its page shows the effect chart and the table,
    and nothing on the page is wider than the report's frame."""
    from report_fixture import shipped_config, write_metrics

    from pseudopairs.report import browser

    write_metrics(tmp_path, shipped_config(), ["table5"])
    run = run_snakemake(tmp_path, "--cores", "1", "--allowed-rules", "table", "report_table", "--",
                        "results/html/table5.html")
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "results" / "table5.csv").is_file() and not (tmp_path / "results" / "table1.csv").exists()
    report = tmp_path / "report.html"
    run = run_snakemake(tmp_path, "--report", str(report))
    assert run.returncode == 0, run.stderr[-3000:]
    text = report.read_text(encoding="utf-8")
    assert "results/html/table5.html" in text and "results/table5.csv" in text
    assert "results/table1.csv" not in text and "all_results.html" not in text
    plan = run_snakemake(tmp_path, "-n")  # a run plans every table and page all the same
    assert plan.returncode == 0 and "report_results" in plan.stdout and "method_check" in plan.stdout

    if browser.find_chromium() is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    view = browser.view_report(report, "Table 5", subcategory=PAGES, screenshot=tmp_path / "table5.png")
    assert view.results == ["Table 5"]  # a name, not a path; the only page there is
    assert view.frame_tables == 1 and view.frame_images == 1, view.frame_text[:2000]
    assert "En+De+COCO+c2c" in view.frame_text and "Sum(Sum)" in view.frame_text
    assert view.frame_text.count("Table 5: pseudopairs and translations") == 1  # the title once
    assert 500 < view.frame_width < 1400
    shown = browser.overflow(tmp_path / "results" / "html" / "table5.html", view.frame_width)
    assert shown["wide"] == [] and shown["scroll"] <= shown["width"], shown
    assert browser.listed(report, subcategory="Data (CSV, Markdown)") == ["Table 5"]


def test_a_large_png_is_embedded_re_encoded_under_the_budget_and_a_small_one_as_it_is(tmp_path):
    """The report frame shows a page from a data URL, which Chromium refuses above 2 MB: a large
    figure is embedded with 256 colours (and smaller if need be), deterministically; small ones
    are embedded byte for byte."""
    import io

    import numpy as np
    from PIL import Image

    from pseudopairs.report.html import compact_png

    rng = np.random.default_rng(0)
    smooth = np.linspace(0, 255, 600 * 800 * 3).reshape(600, 800, 3) % 256
    noisy = (smooth + rng.normal(0, 40, smooth.shape)).clip(0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noisy).save(buf, format="PNG")
    big = buf.getvalue()
    assert len(big) > 500_000
    out = compact_png(big, budget=200_000)
    assert len(out) <= 200_000 and out == compact_png(big, budget=200_000)
    shown = Image.open(io.BytesIO(out))
    assert shown.format == "PNG" and shown.width >= 800 // 4 and shown.width / shown.height == pytest.approx(800 / 600, rel=0.01)
    small = io.BytesIO()
    Image.fromarray(noisy[:20, :20]).save(small, format="PNG")
    assert compact_png(small.getvalue(), budget=200_000) == small.getvalue()
    # the page embeds the compact bytes, not the file's
    path = tmp_path / "big.png"
    path.write_bytes(big)
    section = pages_html.image_section("Training curves — a caption", path)
    assert len(section) < len(big)
