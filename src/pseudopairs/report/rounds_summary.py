"""Iterated bootstrapping, one summary per chain (beyond the paper):
``results/rounds_{chain}.csv`` and ``results/figures/rounds_{chain}.png`` from each round's
``metrics.json`` and pairs (:func:`pseudopairs.workflow.rounds.summary_spec` lists them).

Round 0 is the chain's source model; round r ≥ 1 is the model trained on the pairs mined by round
r−1's model (``{chain}.round{r}``). Per round, the mean and sample standard deviation over seeds
(seed s of round r continues seed s of round r−1) of:

- ``val``: the model's validation score, the one early stopping used (Sum of R@1, 5, 10 in both
  directions over every language of its training data, on the evaluation corpus' validation
  split; ``checkpoint.val_score`` of ``metrics.json``);
- ``metric``: the chain's test metric, the Sum of each language of the chain's table, summed
  (Sum(Sum) over English and German; the German Sum for ``langs: [de]``);
- ``top_share_text`` / ``top_share``: the share of round r's pairs taken by the ``top`` (150) most
  transferred captions — by caption text, as the paper's notebook counts, and by database row (§7.2);
  ``used_share``: the share of database captions transferred at least once;
- ``jaccard_previous``: Jaccard overlap of the captions transferred in rounds r and r−1 (§7.2's
  between-set statistic; from round 2 on, round 1 has no previous pairs);
- ``same_match_previous``: the share of queries (matched in both rounds) that got the same
  database caption as in round r−1 — 1 when the rounds have stopped changing.

**Stop rule** (:func:`stop_round`): the rounds are trained in order and a round is kept going
only while it improves the validation score; the first round whose score is not above its
predecessor's stops the chain, and the predecessor is the round kept (every round improving:
the last). A Snakemake DAG is static, so every round is trained and the rule is applied
afterwards: ``kept`` marks the round it keeps on the seeds' mean scores, ``kept_seeds`` lists the
seeds whose own chain (the rule on that seed's scores) keeps that round. Test scores play no part.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import atomic_path, read_pairs, reading, write_text_atomic
from pseudopairs.mining.statistics import (
    top_share_of_texts,
    transferred_jaccard,
    usage_summary,
)

#: per round and seed (:func:`seed_values`); each is summarised as ``NAME_mean``, ``NAME_std``
VALUES = ("val", "metric", "top_share_text", "top_share", "used_share", "jaccard_previous",
          "same_match_previous")
COLUMNS = ["chain", "round", "experiment", "pseudopairs", "metric_name", "n",
           *[f"{v}_{s}" for v in VALUES for s in ("mean", "std")], "improved", "kept", "kept_seeds"]


def metric_name(langs: Sequence[str]) -> str:
    """``Sum(Sum)`` for several languages, ``Sum (de)`` for one."""
    return "Sum(Sum)" if len(langs) > 1 else f"Sum ({langs[0]})"


def same_match_share(previous: pd.DataFrame, current: pd.DataFrame) -> float:
    """Share of the queries matched in both pair sets (by image and caption index) whose
    transferred caption (database row) is the same; NaN when no query is matched in both."""
    keys = ["query_image_id", "query_caption_idx"]
    both = previous[keys + ["match_row"]].merge(current[keys + ["match_row"]], on=keys,
                                                suffixes=("_a", "_b"))
    if both.empty:
        return math.nan
    return float((both["match_row_a"] == both["match_row_b"]).mean())


def stop_round(scores: Sequence[float]) -> int:
    """The round a validation-driven stop keeps (module docstring): the predecessor of the first
    round whose score is not strictly above the one before (NaN never is), else the last round."""
    for r in range(1, len(scores)):
        if not float(scores[r]) > float(scores[r - 1]):
            return r - 1
    return len(scores) - 1


def _metrics(path: str) -> dict:
    with reading(path, "a metrics.json file", fix="delete it and rerun its evaluate job"):
        return json.loads(Path(path).read_text(encoding="utf-8"))


def _mining_stats(path: str) -> dict:
    with reading(path, "a pseudopair stats.json file", fix="delete it and rerun the mine step"):
        return json.loads(Path(path).read_text(encoding="utf-8"))


def seed_values(spec: dict) -> pd.DataFrame:
    """One row per round and seed: ``round``, ``seed`` and :data:`VALUES` (NaN where a round has
    no pairs, or no previous pairs)."""
    langs, top = spec["langs"], int(spec["top"])
    records = []
    previous: dict[str, pd.DataFrame] = {}
    for entry in spec["rounds"]:
        current: dict[str, pd.DataFrame] = {}
        for seed in spec["seeds"]:
            run = _metrics(entry["metrics"][seed])
            record = {"round": int(entry["round"]), "seed": seed,
                      "val": float(run.get("checkpoint", {}).get("val_score", math.nan)),
                      "metric": float(sum(run["retrieval"][lang]["rsum"] for lang in langs))}
            record.update({k: math.nan for k in VALUES[2:]})
            if entry["pseudopairs"]:
                pairs = read_pairs(entry["pairs"][seed])
                n_database = int(_mining_stats(entry["stats"][seed])["n_database"])
                usage = usage_summary(pairs["match_row"].to_numpy(), n_database=n_database, top=top)
                record.update(top_share_text=top_share_of_texts(pairs["match_text"], top=top),
                              top_share=usage["top_share"], used_share=usage["used_share"])
                if seed in previous:
                    before = previous[seed]
                    record["jaccard_previous"] = transferred_jaccard(before["match_row"], pairs["match_row"])
                    record["same_match_previous"] = same_match_share(before, pairs)
                current[seed] = pairs
            records.append(record)
        previous = current
    return pd.DataFrame.from_records(records, columns=["round", "seed", *VALUES])


def _mean_std(values: pd.Series) -> tuple[float, float]:
    v = values.dropna().to_numpy(dtype=float)
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else math.nan)


def summarise_rounds(spec: dict, per_seed: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``rounds_{chain}.csv`` (:data:`COLUMNS`): per round the mean and sample sd over
    seeds of :data:`VALUES`, ``improved`` (mean validation score above the previous round's;
    empty for round 0), ``kept`` (the round the stop rule keeps on the mean scores) and
    ``kept_seeds`` (the seeds whose own stop rule keeps it)."""
    records = []
    for entry in spec["rounds"]:
        rows = per_seed[per_seed["round"] == int(entry["round"])]
        record = {"chain": spec["chain"], "round": int(entry["round"]), "experiment": entry["experiment"],
                  "pseudopairs": entry["pseudopairs"] or "", "metric_name": metric_name(spec["langs"]),
                  "n": int(rows["metric"].notna().sum())}
        for value in VALUES:
            record[f"{value}_mean"], record[f"{value}_std"] = _mean_std(rows[value])
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    means = frame["val_mean"].tolist()
    frame["improved"] = [pd.NA] + [bool(means[r] > means[r - 1]) for r in range(1, len(means))]
    frame["improved"] = frame["improved"].astype("boolean")
    kept = stop_round(means)
    frame["kept"] = [r == kept for r in range(len(frame))]
    by_seed = {seed: stop_round(per_seed[per_seed["seed"] == seed].sort_values("round")["val"].tolist())
               for seed in spec["seeds"]}
    frame["kept_seeds"] = [",".join(s for s, k in by_seed.items() if k == r) for r in range(len(frame))]
    return frame[COLUMNS]


def _band(ax, x, mean, std, *, label: str, **style) -> None:
    """A mean line with markers and the ± sd band shaded (no band where the sd is NaN)."""
    x = np.asarray(x, dtype=float)
    mean, std = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
    (line,) = ax.plot(x, mean, marker="o", label=label, **style)
    ax.fill_between(x, mean - std, mean + std, alpha=0.2, color=line.get_color())


def rounds_figure(summary: pd.DataFrame, *, top: int = 150):
    """Two panels over the rounds: the chain's test metric (left) and, in percent, the top-``top``
    share of each round's pairs and the pairs unchanged from the previous round (right); the seeds'
    ± sd shaded, the round the stop rule keeps dotted. Returns the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chain, name = summary["chain"].iloc[0], summary["metric_name"].iloc[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    _band(left, summary["round"], summary["metric_mean"], summary["metric_std"], label=f"test {name}")
    kept = int(summary.loc[summary["kept"], "round"].iloc[0])
    left.axvline(kept, linestyle=":", color="grey", label=f"stop rule (validation) keeps round {kept}")
    left.set_ylabel(name)
    mined = summary[summary["round"] > 0]
    _band(right, mined["round"], 100 * mined["top_share_text_mean"], 100 * mined["top_share_text_std"],
          label=f"top-{top} share (by caption text)")
    changed = mined[mined["same_match_previous_mean"].notna()]
    if not changed.empty:
        _band(right, changed["round"], 100 * changed["same_match_previous_mean"],
              100 * changed["same_match_previous_std"], label="pairs unchanged from previous round",
              linestyle="--")
    right.set_ylabel("% of the round's pairs")
    right.set_ylim(0, 105)
    for ax in (left, right):
        ax.set_xlabel("round (0 = source model)")
        ax.set_xticks(summary["round"].tolist())
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    n = int(summary["n"].max())
    fig.suptitle(f"Iterated bootstrapping, chain {chain}: mean over {n} seed{'s' if n != 1 else ''} "
                 "(shaded: ± sd)")
    fig.tight_layout()
    return fig


def write_rounds(spec: dict, *, output, figure) -> pd.DataFrame:
    """Write ``rounds_{chain}.csv`` and its figure (both atomically); returns the summary."""
    import matplotlib.pyplot as plt

    summary = summarise_rounds(spec, seed_values(spec))
    write_text_atomic(output, summary.to_csv(index=False))
    fig = rounds_figure(summary, top=int(spec["top"]))
    with atomic_path(figure) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return summary


def _cli_rounds_summary(args: argparse.Namespace) -> None:
    summary = write_rounds(args.spec, output=args.output, figure=args.figure)
    kept = summary.loc[summary["kept"]].iloc[0]
    print(summary.to_string(index=False))
    print(f"{args.spec['chain']}: the validation stop rule keeps round {kept['round']} "
          f"({kept['experiment']}) -> {args.output}, {args.figure}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "rounds-summary", _cli_rounds_summary)
    commands.add_json(p, "--spec", "the chain's rounds with their files (rounds.summary_spec)")
    p.add_argument("--output", required=True, help="rounds_{chain}.csv")
    p.add_argument("--figure", required=True, help="rounds_{chain}.png")
