"""The paper's tables from per-model ``metrics.json`` files: mean, standard deviation (sample,
ddof=1; empty for one seed) and n over seeds, with the published numbers beside ours.

Retrieval tables report, per language, the table's ``columns`` (keys of metrics.json; default:
paper 000's R@1 I→T, R@1 T→I and Sum = R@1+R@5+R@10 of both directions; paper 004's tables use the
six recalls, R@10 of both directions, or T→I R@10 alone), then the mean recall mR (paper 002: the mean of the six
recalls, Sum / 6; a metrics.json from before mean_recall was recorded gives rsum / 6). The paper's
numbers of a language are listed in the order of ``columns``; the paper's mR is its Sum / 6, or the
mean of its six recalls when the table lists them, else unknown. ``sum_sum: true`` adds Sum(Sum)
over the table's languages. A row names one ``experiment``, or per-language ``experiments``
(``{en: A, de: B}``: paper 004's monolingual rows, one model per language). ``retrieval_key``
(from :func:`pseudopairs.report.contract.table_spec`) says which test set of metrics.json the table
reads: ``retrieval`` (the evaluation corpus) or ``portion_retrieval`` (the translation corpus'
test split). Translation tables (Table 7) report R@1 of the true translation in both directions.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from statistics import mean, stdev

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.data.experiments import row_experiments
from pseudopairs.core.io import atomic_path, reading, write_text_atomic

RETRIEVAL_COLUMNS = ("i2t_r1", "t2i_r1", "rsum")  # paper 000's three numbers per language (default)
MEAN_RECALL = "mean_recall"  # one more column per language: mR = rsum / 6 (paper 002)
RECALLS = tuple(f"{d}_r{k}" for d in ("i2t", "t2i") for k in (1, 5, 10))
# every per-language metric a table may list (the keys of metrics.json's retrieval entries)
METRICS = (*RECALLS, "i2t_medr", "t2i_medr", "rsum", MEAN_RECALL)
HEADINGS = {"i2t_r1": "I→T R@1", "i2t_r5": "I→T R@5", "i2t_r10": "I→T R@10",
            "t2i_r1": "T→I R@1", "t2i_r5": "T→I R@5", "t2i_r10": "T→I R@10",
            "i2t_medr": "I→T medr", "t2i_medr": "T→I medr", "rsum": "Sum", MEAN_RECALL: "mR"}


def table_metrics(spec: dict) -> tuple[str, ...]:
    """The per-language columns of a retrieval table: its ``columns`` (the paper's numbers follow
    this order), then mR unless listed."""
    listed = tuple(spec.get("columns") or RETRIEVAL_COLUMNS)
    return listed if MEAN_RECALL in listed else (*listed, MEAN_RECALL)


def row_experiment(row: dict, lang: str | None = None) -> str | None:
    """The experiment behind a row's columns of ``lang``: its per-language ``experiments`` entry,
    else its ``experiment`` (None: a row of published numbers only)."""
    if "experiments" in row:
        return row["experiments"].get(lang) if lang is not None else None
    return row.get("experiment")


def _paper_mean_recall(paper: dict) -> float:
    """The paper's mR from the numbers it prints: Sum / 6, else the mean of its six recalls."""
    if paper.get("rsum") is not None and not pd.isna(paper["rsum"]):
        return float(paper["rsum"]) / 6.0
    values = [paper.get(k) for k in RECALLS]
    if all(v is not None and not pd.isna(v) for v in values):
        return float(sum(values)) / len(values)
    return math.nan


def _mean_recall(metrics: dict) -> float:
    return float(metrics[MEAN_RECALL]) if MEAN_RECALL in metrics else float(metrics["rsum"]) / 6.0


def summarise(values: list[float]) -> tuple[float, float, int]:
    """(mean, sample standard deviation or NaN for a single value, n)."""
    if not values:
        return math.nan, math.nan, 0
    return mean(values), (stdev(values) if len(values) > 1 else math.nan), len(values)


def _put(record: dict, name: str, values: list[float]) -> None:
    m, s, _ = summarise(values)
    record[f"{name}_mean"] = m
    record[f"{name}_std"] = s


def retrieval_table(spec: dict, metrics: dict[str, list[dict]]) -> pd.DataFrame:
    """``metrics[experiment]`` = the metrics.json contents of its seeds."""
    langs = spec["langs"]
    columns = table_metrics(spec)
    listed = tuple(spec.get("columns") or RETRIEVAL_COLUMNS)   # what the paper's lists hold
    records = []
    for row in spec["rows"]:
        # a CLC row: its experiment's metrics.clc.json, under the row's aggregate (clc_a, clc_c)
        default = spec.get("retrieval_key", "retrieval")
        # per language (``retrieval_keys``: a table with ``lang_test_corpora``); a CLC row reads
        # metrics.clc.json, whose queries per language follow the same lang_test_corpora
        keys = {lang: row["clc"] if row.get("clc") else spec.get("retrieval_keys", {}).get(lang, default)
                for lang in langs}
        runs = {lang: metrics.get(clc_key(row["experiment"]) if row.get("clc") else row_experiment(row, lang), [])
                for lang in langs}
        names = ({lang: row_experiment(row, lang) for lang in langs} if "experiments" in row else None)
        record = {"row": row["label"],
                  "experiment": (", ".join(f"{lang}: {n}" for lang, n in names.items() if n) if names
                                 else row.get("experiment", "")),
                  "n": min(len(r) for r in runs.values()) if langs else 0,
                  "beyond_paper": bool(row.get("beyond_paper", False))}
        for lang in langs:
            for column in columns:
                if column == MEAN_RECALL:
                    values = [_mean_recall(run[keys[lang]][lang]) for run in runs[lang]]
                else:
                    values = [float(run[keys[lang]][lang][column]) for run in runs[lang]]
                _put(record, f"{lang}_{column}", values)
        if spec.get("sum_sum"):
            per_seed = zip(*(runs[lang] for lang in langs)) if len({len(r) for r in runs.values()}) == 1 else []
            _put(record, "sum_sum", [sum(run[keys[lang]][lang]["rsum"] for lang, run in zip(langs, seed_runs))
                                     for seed_runs in per_seed])
        paper = row.get("paper", {})
        for lang in langs:
            printed = dict(zip(listed, paper.get(lang, [math.nan] * len(listed))))
            for column in columns:
                value = printed.get(column, math.nan)
                record[f"paper_{lang}_{column}"] = math.nan if value is None else value
            if MEAN_RECALL not in printed:
                record[f"paper_{lang}_{MEAN_RECALL}"] = _paper_mean_recall(printed)
        if spec.get("sum_sum"):
            record["paper_sum_sum"] = paper.get("sum_sum", math.nan)
        records.append(record)
    return pd.DataFrame.from_records(records)


def translation_directions(spec: dict, metrics: dict[str, list[dict]]) -> list[str]:
    """The table's directions (``en2de``, ...): in the order the rows' ``paper`` entries name them,
    then any other direction a run reports; every row gets the same columns."""
    named = [d for row in spec["rows"] for d in row.get("paper", {})]
    measured = [d for runs in metrics.values() for run in runs for d in run["translation"]]
    return list(dict.fromkeys(named + measured))


def translation_table(spec: dict, metrics: dict[str, list[dict]]) -> pd.DataFrame:
    directions = translation_directions(spec, metrics)
    records = []
    for row in spec["rows"]:
        runs = metrics.get(row.get("experiment"), [])
        record = {"row": row["label"], "experiment": row.get("experiment", ""), "n": len(runs)}
        for direction in directions:
            values = [run["translation"][direction] for run in runs if direction in run["translation"]]
            if values and len(values) != len(runs):
                raise ValueError(f"table row {row['label']!r}: some seeds of experiment "
                                 f"{row.get('experiment')!r} lack translation direction {direction!r}")
            _put(record, f"{direction}_r1", values)
        for direction in directions:
            record[f"paper_{direction}"] = row.get("paper", {}).get(direction, math.nan)
        records.append(record)
    return pd.DataFrame.from_records(records)


def clc_key(name: str) -> tuple[str, str]:
    """Where :func:`load_metrics` keeps experiment ``name``'s metrics.clc.json (a row with ``clc``)."""
    return ("clc", name)


def read_runs(by_seed: dict, name: str, *, what: str, job: str) -> list[dict]:
    """One experiment's JSON files (seed → path), in seed order: a missing or unreadable file is an
    error naming it and the ``job`` that makes it."""
    runs = []
    for seed, path in by_seed.items():
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: {what} of experiment {name!r} seed {seed} are missing")
        with reading(path, f"a {path.name} file", fix=f"delete it and rerun its {job} job"):
            runs.append(json.loads(path.read_text(encoding="utf-8")))
    return runs


def load_metrics(spec: dict) -> dict[str, list[dict]]:
    """Read the ``metrics.json`` files the rule passes in ``spec["metrics"]`` (experiment → seed
    → path, made by :func:`pseudopairs.report.contract.table_spec`), for every experiment a row
    names, and for rows with ``clc`` their ``spec["clc_metrics"]`` (under :func:`clc_key`); a
    missing file is an error."""
    metrics: dict = {}
    for name in dict.fromkeys(row["experiment"] for row in spec["rows"] if row.get("clc")):
        if name not in spec.get("clc_metrics", {}):
            raise ValueError(f"table spec: no metrics.clc.json files given for experiment {name!r}")
        metrics[clc_key(name)] = read_runs(spec["clc_metrics"][name], name, what="CLC metrics",
                                            job="evaluate_clc")
    for name in (n for row in spec["rows"] for n in row_experiments(row)):
        if name in metrics:
            continue
        if name not in spec["metrics"]:
            raise ValueError(f"table spec: no metrics files given for experiment {name!r}")
        metrics[name] = read_runs(spec["metrics"][name], name, what="metrics", job="evaluate")
    return metrics


def build_table(spec: dict) -> pd.DataFrame:
    metrics = load_metrics(spec)
    if spec["kind"] == "translation":
        return translation_table(spec, metrics)
    return retrieval_table(spec, metrics)


def _fmt(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.1f}"
    return str(value)


def markdown_table(name: str, spec: dict, frame: pd.DataFrame) -> str:
    """One table as Markdown: ours as "mean ± std", the paper's number in brackets."""
    if spec["kind"] == "translation":
        keys = [c[: -len("_r1_mean")] for c in frame.columns if c.endswith("_r1_mean")]
        header = ["", *[f"{k.replace('2', '→').upper()} R@1" for k in keys], "n"]
        cells = [[row["row"], *[_cell(row, f"{k}_r1", f"paper_{k}") for k in keys], str(row["n"])]
                 for _, row in frame.iterrows()]
    else:
        langs = spec["langs"]
        columns = table_metrics(spec)
        header = [""]
        for lang in langs:
            header += [f"{lang} {HEADINGS[c]}" for c in columns]
        if spec.get("sum_sum"):
            header.append("Sum(Sum)")
        header.append("n")
        cells = []
        for _, row in frame.iterrows():
            line = [_label(row)]
            for lang in langs:
                line += [_cell(row, f"{lang}_{c}", f"paper_{lang}_{c}") for c in columns]
            if spec.get("sum_sum"):
                line.append(_cell(row, "sum_sum", "paper_sum_sum"))
            line.append(str(row["n"]))
            cells.append(line)
    lines = [f"## {spec['title']}", "", "| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(line) + " |" for line in cells]
    if "beyond_paper" in frame.columns and frame["beyond_paper"].astype(bool).any():
        lines += ["", "† beyond the paper: rows the paper does not report."]
    return "\n".join(lines) + "\n"


def _label(row) -> str:
    beyond = row.get("beyond_paper", False)
    return f"{row['row']} †" if isinstance(beyond, (bool, np.bool_)) and beyond else str(row["row"])


def _cell(row, ours: str, paper: str) -> str:
    m, s = row.get(f"{ours}_mean", math.nan), row.get(f"{ours}_std", math.nan)
    text = _fmt(m) if not pd.isna(m) else "–"
    if not pd.isna(s):
        text += f" ± {_fmt(s)}"
    ref = row.get(paper, math.nan)
    if not pd.isna(ref):
        text += f" [{_fmt(float(ref))}]"
    return text


def _cli_table(args: argparse.Namespace) -> None:
    spec = args.spec
    frame = build_table(spec)
    with atomic_path(args.output) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.4f")
    print(markdown_table(args.name, spec, frame))


def _cli_markdown(args: argparse.Namespace) -> None:
    specs = args.specs
    parts = ["# Results\n",
             "Ours: mean ± standard deviation over seeds (n = number of seeds); the paper's "
             "published number in [brackets].\n"]
    for path in args.tables:
        name = Path(path).stem
        parts.append(markdown_table(name, specs[name], pd.read_csv(path)))
    if args.method_check:
        from pseudopairs.report.method_check import markdown_method_check

        parts.append(markdown_method_check(pd.read_csv(args.method_check, keep_default_na=False,
                                                       na_values=[""])))
    if args.training_runs:
        from pseudopairs.report.method_check import markdown_training_runs

        parts.append(markdown_training_runs(pd.read_csv(args.training_runs, keep_default_na=False,
                                                        na_values=[""])))
    if args.pseudopair_stats:
        parts.append(markdown_pseudopair_stats(pd.read_csv(args.pseudopair_stats, keep_default_na=False,
                                                           na_values=[""])))
    write_text_atomic(args.output, "\n".join(parts))


# Columns of the §7.2 summary: statistic -> heading (shares in percent)
STATS_HEADINGS = {"used_share": "captions used %", "used_share_text": "caption texts used % (paper's count)",
                  "used_share_unique": "unique texts used %", "top_share": "top-N share %",
                  "top_share_text": "top-N texts share %", "gini": "Gini", "skewness": "skewness",
                  "robin_hood": "Robin Hood", "jaccard_seeds": "Jaccard across seeds",
                  "agreement_seeds": "per-image agreement across seeds"}
_PERCENT = {"used_share", "used_share_text", "used_share_unique", "top_share", "top_share_text"}


# Pseudopair precision (demo world; pseudopairs.mining.precision): statistic "precision" and one
# "precision_{attribute}" per attribute a caption can mention
PRECISION = "precision"
PRECISION_NOTE = ("Beyond the paper, demo world only: the share of mined captions that truly describe "
                  "the query image's scene — every detail the caption says holds in the scene (all "
                  "details), and per attribute the share of the captions saying it in which it holds "
                  "(colour, size, texture, count: judged where the object's kind is in the scene; "
                  "background colour: where the background is). Mean ± sd over seeds, in percent.")
NO_PRECISION_NOTE = ("Pseudopair precision: not computed — only the demo world knows what each caption "
                     "means (the real data have no caption meanings).")


def precision_statistics(frame: pd.DataFrame) -> list[str]:
    """The precision statistics of a pseudopair_stats table, in their order (none for real data)."""
    return [s for s in dict.fromkeys(frame["statistic"].astype(str))
            if s == PRECISION or s.startswith(PRECISION + "_")]


def precision_heading(statistic: str) -> str:
    """``precision`` → "all details %", ``precision_background_colour`` → "background colour %"."""
    name = statistic[len(PRECISION) + 1:].replace("_", " ") if statistic != PRECISION else "all details"
    return f"{name} %"


def precision_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The precision statistics as a wide table in percent: one row per pseudopair set (``row``,
    ``criterion``, ``{statistic}_mean`` and ``_std`` over seeds); empty for real data."""
    statistics = precision_statistics(frame)
    own = frame[(frame["compared_with"].isna() | (frame["compared_with"] == ""))
                & frame["statistic"].isin(statistics)]
    records = []
    for name, group in own.groupby("pseudopairs", sort=False):
        record = {"row": name, "criterion": str(group["criterion"].iloc[0])}
        for statistic in statistics:
            values = [100.0 * float(v) for v in group[group["statistic"] == statistic]["value"] if not pd.isna(v)]
            _put(record, statistic, values)
        records.append(record)
    return pd.DataFrame.from_records(records)


def markdown_precision(frame: pd.DataFrame) -> str:
    """:func:`precision_table` as Markdown (mean ± sd over seeds, percent), or one line saying
    precision is not computed."""
    table = precision_table(frame)
    if table.empty:
        return NO_PRECISION_NOTE + "\n"
    statistics = precision_statistics(frame)
    header = ["pseudopair set", "criterion", *(precision_heading(s) for s in statistics)]
    lines = ["## Beyond the paper: precision of the pseudopairs (demo world)", "", PRECISION_NOTE, "",
             "| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for record in table.to_dict("records"):
        cells = []
        for statistic in statistics:
            m, sd = record[f"{statistic}_mean"], record[f"{statistic}_std"]
            cells.append("–" if math.isnan(m) else f"{m:.1f}" + ("" if math.isnan(sd) else f" ± {sd:.1f}"))
        lines.append("| " + " | ".join([record["row"], record["criterion"], *cells]) + " |")
    return "\n".join(lines) + "\n"


def markdown_pseudopair_stats(frame: pd.DataFrame) -> str:
    """§7.2 statistics (results/pseudopair_stats.csv) as Markdown: one row per pseudopair set,
    mean ± sd over seeds (or seed pairs), the paper's figure in [brackets]; then the comparisons
    between sets."""
    def cell(values: pd.Series, paper, statistic: str) -> str:
        scale = 100.0 if statistic in _PERCENT else 1.0
        m, sd, _ = summarise([float(v) * scale for v in values if not pd.isna(v)])
        digits = 1 if scale == 100.0 else 2
        text = "–" if math.isnan(m) else f"{m:.{digits}f}"
        if not math.isnan(sd):
            text += f" ± {sd:.{digits}f}"
        if paper is not None and not pd.isna(paper):
            text += f" [{float(paper) * scale:.{digits}f}]"
        return text

    own = frame[frame["compared_with"].isna() | (frame["compared_with"] == "")]
    header = ["pseudopair set", "criterion", *STATS_HEADINGS.values()]
    lines = ["## §7.2: statistics of the pseudopair sets", "",
             ("Mean ± sd over seeds (Jaccard and agreement: over pairs of seeds); the paper's figure "
              "in [brackets]. Shares of each set's database captions (German M30K training captions; "
              "English COCO captions for a reverse-direction set)."), "",
             "| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for name, group in own.groupby("pseudopairs", sort=False):
        line = [name, str(group["criterion"].iloc[0])]
        for statistic in STATS_HEADINGS:
            rows = group[group["statistic"] == statistic]
            line.append(cell(rows["value"], rows["paper"].iloc[0] if len(rows) else None, statistic)
                        if len(rows) else "–")
        lines.append("| " + " | ".join(line) + " |")
    between = frame[~(frame["compared_with"].isna() | (frame["compared_with"] == ""))]
    if not between.empty:
        lines += ["", "| sets compared (same seed) | Jaccard of transferred captions | per-image agreement |",
                  "|---|---|---|"]
        for (a, b), group in between.groupby(["pseudopairs", "compared_with"], sort=False):
            cells = []
            for statistic in ("jaccard", "agreement"):
                rows = group[group["statistic"] == statistic]
                cells.append(cell(rows["value"], rows["paper"].iloc[0], statistic))
            lines.append(f"| {a} vs {b} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n\n" + markdown_precision(frame)


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "table", _cli_table)
    p.add_argument("--name", required=True)
    commands.add_json(p, "--spec", "the table's config entry with its metrics files (report.contract.table_spec)")
    p.add_argument("--output", required=True)
    p = commands.add_command(subparsers, "tables-markdown", _cli_markdown)
    commands.add_json(p, "--specs", "the config's tables section")
    p.add_argument("--output", required=True)
    p.add_argument("--pseudopair-stats", default=None, help="results/pseudopair_stats.csv to render too")
    p.add_argument("--method-check", default=None, help="results/method_check.csv to render too")
    p.add_argument("--training-runs", default=None, help="results/training_runs.csv: one line on how training ended")
    p.add_argument("tables", nargs="+")
