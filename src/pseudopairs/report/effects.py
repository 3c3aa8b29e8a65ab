"""The effects a table shows: each row's difference from its source row, ours (mean ± sd over
seeds of the per-seed difference) beside the paper's difference, for the report's effect charts
(:func:`pseudopairs.report.charts.effect_chart_svg`).

A row's **source** is the row of the same table whose model it builds on, read from the
configuration (never from the labels), first match wins:

1. *mined from*: the row's experiment trains on a pseudopair data set, and the pseudopair set's
   ``source`` experiment is another row of the table (Tables 4 and 5: "+ pseudo" against the
   model that mined the pairs; a round of iterated bootstrapping against the previous round);
2. *fine-tuned from*: the experiment's ``finetune`` start is another row (the control);
3. *method check*: an effect of the config's ``method_check.effects`` on this table names the
   experiment as ``better``; its ``worse`` is the source (Table 1 "+ c2c" against "+ De", Table
   5 "+ Translation" against its base model);
4. otherwise the table's first row with a model (its reference row: En, De, De + COCO, …).

Ours: for each seed s the row's value minus its source's value at seed s (both read as the table
reads them, :mod:`pseudopairs.report.tables`), then the mean and the sample standard deviation
(ddof=1) over the seeds; the mean equals mean(row) − mean(source). The seeds pair up: seed s of
a pseudopair or fine-tuned row uses the pairs mined by / the checkpoint of seed s of its source.
The paper's difference is the row's published number minus its source's, as the table lists them.
"""

from __future__ import annotations

import math
from statistics import mean, stdev

import pandas as pd

from pseudopairs.core import layout
from pseudopairs.data.experiments import row_experiments, table_seeds
from pseudopairs.report.contract import table_spec

REASONS = ("mined from", "fine-tuned from", "method check", "reference row")


def _row_model(row: dict) -> str | None:
    """The experiment a row's sources are looked up by: its ``experiment`` (a row with one model
    per language has none)."""
    return row.get("experiment") if "experiments" not in row else None


def _pseudopair_sources(config: dict, name: str) -> list[str]:
    """The experiments that mined the pseudopairs experiment ``name`` trains on (c2i or c2c)."""
    exp = config.get("experiments", {}).get(name, {})
    sets = list(exp.get("c2i", [])) + [d for pair in exp.get("c2c", []) for d in pair]
    sources = []
    for ds in dict.fromkeys(sets):
        mined = config.get("datasets", {}).get(ds, {}).get("pseudopairs")
        source = config.get("pseudopairs", {}).get(mined, {}).get("source") if mined else None
        if source and source not in sources:
            sources.append(source)
    return sources


def row_sources(config: dict, table: str) -> list[dict | None]:
    """Per row of ``table``: ``{"row": index of its source row, "reason": one of REASONS}``, or
    None (no model, or the reference row itself). Rules in the module docstring."""
    rows = config["tables"][table]["rows"]
    index: dict[str, int] = {}
    for k, row in enumerate(rows):
        model = _row_model(row)
        if model is not None:
            index.setdefault(model, k)
    effects = [e for e in config.get("method_check", {}).get("effects", []) if e.get("table") == table]
    reference = next((k for k, row in enumerate(rows) if row_experiments(row)), None)
    out: list[dict | None] = []
    for k, row in enumerate(rows):
        if not row_experiments(row):
            out.append(None)
            continue
        model = _row_model(row)
        found = None
        if model is not None:
            candidates = [("mined from", s) for s in _pseudopair_sources(config, model)]
            finetune = config.get("experiments", {}).get(model, {}).get("finetune")
            if finetune:
                candidates.append(("fine-tuned from", finetune))
            candidates += [("method check", e["worse"]) for e in effects if e.get("better") == model]
            for reason, source in candidates:
                if source in index and index[source] != k:
                    found = {"row": index[source], "reason": reason}
                    break
        if found is None and reference is not None and reference != k:
            found = {"row": reference, "reason": "reference row"}
        out.append(found)
    return out


def reference_sources(rows: list[dict]) -> list[dict | None]:
    """Rule 4 alone (a table spec without the config around it): every row with a model against
    the table's first row with a model."""
    reference = next((k for k, row in enumerate(rows) if row_experiments(row)), None)
    return [{"row": reference, "reason": "reference row"} if row_experiments(row) and k != reference else None
            for k, row in enumerate(rows)]


def page_spec(config: dict, table: str) -> dict:
    """What a table's report page reads besides its CSV: the table's config entry (as the
    ``table`` step gets it), each row's source, and its metrics files as the seeds of the table
    and the pattern of their paths (:func:`metrics_files`; compact on the command line)."""
    spec = {key: value for key, value in table_spec(config, table).items() if key != "metrics"}
    return {**spec, "sources": row_sources(config, table), "seeds": table_seeds(config, table),
            "metrics_pattern": layout.metrics("{experiment}", "{seed}")}


def metrics_files(spec: dict) -> dict[str, dict[str, str]]:
    """experiment → seed → the metrics.json of a :func:`page_spec` (every experiment a row
    shows, every seed of the table), as :func:`pseudopairs.report.tables.load_metrics` reads them."""
    if "metrics" in spec:
        return spec["metrics"]
    names = dict.fromkeys(name for row in spec["rows"] for name in row_experiments(row))
    return {name: {str(seed): spec["metrics_pattern"].format(experiment=name, seed=seed) for seed in spec["seeds"]}
            for name in names}


def page_inputs(config: dict, table: str) -> list[str]:
    """The metrics files of :func:`page_spec` (the page rule's inputs besides the CSV)."""
    return [path for by_seed in metrics_files(page_spec(config, table)).values() for path in by_seed.values()]


# --------------------------------------------------------------------------------------------
# The differences


def seed_frames(spec: dict, runs: dict[str, list[dict]]) -> list[pd.DataFrame]:
    """One table per seed, as the ``table`` step computes it from that seed's metrics alone (its
    ``X_mean`` columns are that seed's values). ``runs``: experiment → metrics per seed, in the
    table's seed order."""
    from pseudopairs.report.tables import retrieval_table, translation_table

    n = min((len(r) for r in runs.values()), default=0)
    build = translation_table if spec.get("kind") == "translation" else retrieval_table
    return [build(spec, {name: [by_seed[k]] for name, by_seed in runs.items()}) for k in range(n)]


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def table_effects(spec: dict, frame: pd.DataFrame, columns: list, per_seed: list[pd.DataFrame]) -> list[dict]:
    """The chart's data: per row with a source and per column of ``columns``
    (:class:`pseudopairs.report.html.Column`: ``ours`` = ``X_mean``, ``paper`` = ``paper_X``),
    ``{"row", "source", "reason", "metric", "ours", "sd", "n", "paper"}``: ours the mean of the
    per-seed differences, sd their sample standard deviation (NaN for one seed), n the seeds, the
    paper's difference from ``frame``'s paper columns (NaN where either number is unknown)."""
    sources = spec.get("sources") or reference_sources(spec.get("rows", []))
    labels = [str(v) for v in frame["row"]]
    records = []
    for k, source in enumerate(sources):
        if source is None or k >= len(frame):
            continue
        s = source["row"]
        for column in columns:
            deltas = []
            for seed in per_seed:
                d = _number(seed.iloc[k].get(column.ours)) - _number(seed.iloc[s].get(column.ours))
                if not math.isnan(d):
                    deltas.append(d * column.scale)
            paper = math.nan
            if column.paper is not None and column.paper in frame.columns:
                paper = (_number(frame.iloc[k][column.paper]) - _number(frame.iloc[s][column.paper])) * column.scale
            records.append({"row": labels[k], "row_index": k, "source": labels[s], "source_index": s,
                            "reason": source["reason"], "metric": f"{column.group} {column.heading}".strip(),
                            "ours": mean(deltas) if deltas else math.nan,
                            "sd": stdev(deltas) if len(deltas) > 1 else math.nan,
                            "n": len(deltas), "paper": paper})
    return records
