"""The method check (``results/method_check.csv``): does the demo reproduce the paper's effects?

The config's ``method_check`` section declares, as data:

- ``effects``: the paper's large effects, each "``better`` > ``worse``" on one ``metric`` of one
  ``table`` (a language's Sum = R@1+R@5+R@10 in both directions, ``sum_sum``, or a translation
  direction's R@1 such as ``en2de``). The paper's delta is read from that table's published
  numbers; ours is the difference of the means over seeds, with Welch's t; an effect *holds* when
  our ``better`` beats our ``worse`` with t ≥ ``min_t``.
- ``pseudopairs``: tables whose rows trained on pseudopairs are each compared with their
  ``source`` model and with the fine-tuning ``control`` (the source trained further on its own
  data). The paper's pseudopair effects are small (−10.8 … +4.7 Sum): these rows report the
  difference and its t, and no sign is demanded (``holds`` is empty).

Each comparison uses the runs its table shows: the seeds that table averages over (its ``seeds``,
else the config's). Giving the tables of a near-threshold effect more seeds
(``tables: {table3: {seeds: [1, 2, 3, 4, 5, 6]}}``) tests it with more runs, tables and check alike.

Welch's t = (mean_b − mean_w) / sqrt(s_b²/n_b + s_w²/n_w) with sample standard deviations; with
no spread at all it is ±inf (or NaN for no difference); fewer than two seeds on a side give NaN.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from statistics import mean, stdev

import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import atomic_path, reading

COLUMNS = ["kind", "table", "metric", "better", "worse", "paper_better", "paper_worse", "paper_delta",
           "ours_better", "ours_worse", "ours_delta", "sd_better", "sd_worse", "n_better", "n_worse",
           "welch_t", "holds"]


def welch_t(better: list[float], worse: list[float]) -> float:
    """Welch's t of mean(better) − mean(worse) (module docstring)."""
    if len(better) < 2 or len(worse) < 2:
        return math.nan
    diff = mean(better) - mean(worse)
    se = math.sqrt(stdev(better) ** 2 / len(better) + stdev(worse) ** 2 / len(worse))
    if se == 0:
        return math.nan if diff == 0 else math.copysign(math.inf, diff)
    return diff / se


def metric_value(run: dict, metric: str, *, langs: list[str]) -> float:
    """One number of a ``metrics.json``: a language's Sum, ``sum_sum`` over ``langs``, or a
    translation direction's R@1."""
    if metric == "sum_sum":
        return float(sum(run["retrieval"][lang]["rsum"] for lang in langs))
    if metric in run.get("retrieval", {}):
        return float(run["retrieval"][metric]["rsum"])
    if metric in run.get("translation", {}):
        return float(run["translation"][metric])
    raise ValueError(f"metric {metric!r} is neither a language, sum_sum nor a translation direction "
                     f"of these metrics")


def paper_value(table: dict, experiment: str, metric: str) -> float:
    """The paper's number for ``experiment``'s row of ``table`` on ``metric`` (NaN if none)."""
    for row in table["rows"]:
        if row.get("experiment") == experiment:
            paper = row.get("paper", {})
            if metric == "sum_sum":
                return float(paper.get("sum_sum", math.nan))
            value = paper.get(metric, math.nan)
            return float(value[2]) if isinstance(value, list) else float(value)
    return math.nan


def _runs(spec: dict, experiment: str) -> dict[str, dict]:
    runs = {}
    for seed, path in spec["metrics"][experiment].items():
        with reading(path, "a metrics.json file", fix="delete it and rerun its evaluate job"):
            runs[str(seed)] = json.loads(Path(path).read_text(encoding="utf-8"))
    return runs


def _table_runs(runs: dict, experiment: str, table_name: str, table: dict) -> list[dict]:
    """``experiment``'s runs for the seeds ``table`` averages over (its ``seeds``; all runs given
    when the table names none)."""
    by_seed = runs[experiment]
    if "seeds" not in table:
        return list(by_seed.values())
    missing = [seed for seed in table["seeds"] if str(seed) not in by_seed]
    if missing:
        raise ValueError(f"method check: {table_name} averages over seeds {table['seeds']}, but the "
                         f"spec has no metrics of {experiment!r} for seeds {missing}")
    return [by_seed[str(seed)] for seed in table["seeds"]]


def _record(kind: str, table_name: str, table: dict, metric: str, better: str, worse: str,
            runs: dict, *, min_t: float | None) -> dict:
    langs = table.get("langs", [])
    b = [metric_value(r, metric, langs=langs) for r in _table_runs(runs, better, table_name, table)]
    w = [metric_value(r, metric, langs=langs) for r in _table_runs(runs, worse, table_name, table)]
    paper_b, paper_w = paper_value(table, better, metric), paper_value(table, worse, metric)
    ours_delta = mean(b) - mean(w)
    t = welch_t(b, w)
    holds = "" if min_t is None else ("yes" if ours_delta > 0 and t >= min_t else "no")
    return {"kind": kind, "table": table_name, "metric": metric, "better": better, "worse": worse,
            "paper_better": paper_b, "paper_worse": paper_w, "paper_delta": paper_b - paper_w,
            "ours_better": mean(b), "ours_worse": mean(w), "ours_delta": ours_delta,
            "sd_better": stdev(b) if len(b) > 1 else math.nan,
            "sd_worse": stdev(w) if len(w) > 1 else math.nan,
            "n_better": len(b), "n_worse": len(w), "welch_t": t, "holds": holds}


def method_check(spec: dict) -> pd.DataFrame:
    """The rows of ``method_check.csv`` (:data:`COLUMNS`) from the spec the rule passes
    (:func:`pseudopairs.report.contract.method_check_spec`: the config's ``method_check`` section, the
    tables, the pseudopair rows of each table and every ``metrics.json`` per experiment and seed)."""
    runs = {name: _runs(spec, name) for name in spec["metrics"]}
    tables = spec["tables"]
    records = [_record("large effect", e["table"], tables[e["table"]], e["metric"], e["better"],
                       e["worse"], runs, min_t=spec["min_t"]) for e in spec["effects"]]
    for entry in spec["pseudopairs"]:
        table = tables[entry["table"]]
        for experiment in entry["rows"]:
            for kind, other in (("pseudopairs vs source", entry["source"]),
                                ("pseudopairs vs control", entry["control"])):
                records.append(_record(kind, entry["table"], table, entry["metric"], experiment, other,
                                       runs, min_t=None))
    return pd.DataFrame.from_records(records, columns=COLUMNS)


RUN_COLUMNS = ["experiment", "seed", "updates", "best_update", "val_score", "stop_reason", "at_max_updates"]


def training_runs(spec: dict) -> pd.DataFrame:
    """How each training run of the tables ended (:data:`RUN_COLUMNS`), from its ``metrics.json``:
    ``at_max_updates`` is true for a run stopped by the ``max_updates`` guard instead of early
    stopping (a model still improving: its comparisons are comparisons of training budgets)."""
    records = []
    for name, by_seed in spec.get("runs", {}).items():
        for seed, path in by_seed.items():
            with reading(path, "a metrics.json file", fix="delete it and rerun its evaluate job"):
                ckpt = json.loads(Path(path).read_text(encoding="utf-8")).get("checkpoint", {})
            reason = ckpt.get("stop_reason", "")
            records.append({"experiment": name, "seed": int(seed), "updates": ckpt.get("updates"),
                            "best_update": ckpt.get("update"), "val_score": ckpt.get("val_score"),
                            "stop_reason": reason, "at_max_updates": reason.startswith("reached max_updates")})
    return pd.DataFrame.from_records(records, columns=RUN_COLUMNS)


def markdown_training_runs(runs: pd.DataFrame) -> str:
    """One paragraph: how many runs early stopping ended, and which hit the guard."""
    if runs.empty:
        return ""
    guard = runs[runs["at_max_updates"]]
    text = (f"Training: {len(runs) - len(guard)} of {len(runs)} runs of the tables ended by early stopping "
            f"(updates per run {int(runs['updates'].min())}–{int(runs['updates'].max())}, median "
            f"{int(runs['updates'].median())}); ")
    if guard.empty:
        return text + "none reached the max_updates guard.\n"
    names = ", ".join(f"{r.experiment} seed {r.seed}" for r in guard.itertuples())
    return text + f"**{len(guard)} stopped at max_updates while still improving**: {names}.\n"


def markdown_method_check(frame: pd.DataFrame) -> str:
    """The method check as a Markdown section of results/tables.md."""
    def num(value, digits=1) -> str:
        return "–" if pd.isna(value) else (f"{value:+.{digits}f}" if digits == 1 else f"{value:.{digits}f}")

    large = frame[frame["kind"] == "large effect"]
    held = int((large["holds"] == "yes").sum())
    lines = ["## Method check: the paper's effects in this run", "",
             f"{held} of {len(large)} of the paper's large effects hold (better > worse with Welch's "
             "t over the seeds of its table ≥ the configured minimum). Pseudopair rows: "
             "difference and t against their source and the fine-tuning control (the paper's "
             "pseudopair effects are small; no sign is demanded).", "",
             "| kind | table | metric | better > worse | paper Δ | ours Δ | seeds | Welch t | holds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, row in frame.iterrows():
        t = row["welch_t"]
        t_text = "–" if pd.isna(t) else ("∞" if math.isinf(t) and t > 0 else "−∞" if math.isinf(t) else f"{t:.1f}")
        n_b, n_w = int(row["n_better"]), int(row["n_worse"])
        seeds = str(n_b) if n_b == n_w else f"{n_b}/{n_w}"
        lines.append(f"| {row['kind']} | {row['table']} | {row['metric']} | {row['better']} > {row['worse']} "
                     f"| {num(row['paper_delta'])} | {num(row['ours_delta'])} | {seeds} | {t_text} "
                     f"| {row['holds'] or '·'} |")
    return "\n".join(lines) + "\n"


def _cli_method_check(args: argparse.Namespace) -> None:
    frame = method_check(args.spec)
    runs = training_runs(args.spec)
    if args.runs:
        with atomic_path(args.runs) as tmp:
            runs.to_csv(tmp, index=False, float_format="%.4f")
    with atomic_path(args.output) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.4f")
    print(markdown_method_check(frame))
    print(markdown_training_runs(runs))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "method-check", _cli_method_check)
    commands.add_json(p, "--spec", "the method_check section with its metrics files (report.contract.method_check_spec)")
    p.add_argument("--output", required=True, help="method_check.csv")
    p.add_argument("--runs", default=None, help="training_runs.csv: how each table's training run ended")
