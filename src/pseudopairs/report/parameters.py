"""Paper 002's Figure 3: mean recall (mR) against parameters, one point per row of a retrieval
table that declares ``parameters_figure`` (``table_smalr2``: LA, HEM, SMALR and the † GRU), from
each model's ``metrics.json``.

Two counts per point (means over the seeds: equal across seeds unless the vocabulary differs):
``training_mean`` — ``parameters.training``, every parameter trained, the model's plus the
objective's training-only modules (SMALR's MCLM heads and language classifier) plus what HEM's
pretraining trained and the model does not keep (``parameters.pretraining``: its assignment
layer and the dropped latent rows; ``pretraining_mean``) — and
``trainable_mean`` — ``parameters.trainable``, the model kept at test time (those modules are
dropped). The figure plots one of them (``parameters_figure.count``): ``training`` (default) or
``test_time``. 002 plots training: its Figure 3 compares models by "trainable parameters"
(SMALR "less than 20M parameters, 1/5th the parameter count of … MULE") and then says "SMALR uses
more parameters during training than S-LIWE, [but] far fewer test-time parameters" (7.1M), which
is a statement about a different count than the figure's. (002's 7.1M also leaves out the word
representations, precomputed from training; here that is ``trainable_mean −
text_embedding_mean``.)

A point's mR is, per seed, the mean over the table's languages of that language's mR (the mean of
R@1, R@5 and R@10 in both directions, 002's mR), then the mean and sample standard deviation over
seeds. ``paper_mean_recall`` is the mean of the row's published mR over the same languages (empty
when 002 gives none): 002's models are larger, so its parameter axis is not ours and only its mR
is listed.

``reference`` adds the parameter count of per-language embeddings (every word of every language
its own row: MULE's embedding, :func:`pseudopairs.smalr.hem.per_language_parameter_count`) for a
HEM experiment: both its counts with its hybrid embedding replaced by one row per word of its HEM
vocabulary, rows as wide as HEM's (``hem.pca_dim``) and the same projection, and no HEM pretraining
(its ``parameters.pretraining`` taken off the trained count). It has no mR (no such
model is trained) and is drawn as a vertical line. The hybrid embedding's count is recomputed from
the vocabulary first and must equal ``parameters.text_embedding``.
"""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import atomic_path, write_text_atomic

CSV_COLUMNS = ["label", "experiment", "n", "training_mean", "trainable_mean", "text_embedding_mean",
               "pretraining_mean", "mean_recall_mean", "mean_recall_std", "paper_mean_recall", "beyond_paper", "reference"]

#: ``parameters_figure.count`` -> the CSV column the figure plots and its axis label.
COUNTS = {"training": ("training_mean", "parameters trained (model + training-only modules)"),
          "test_time": ("trainable_mean", "parameters kept at test time")}


def _read(path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _parameters(metrics: dict, path, key: str) -> int:
    try:
        return int(metrics["parameters"][key])
    except (KeyError, TypeError):
        raise ValueError(f"{path}: no parameters.{key} (a metrics.json from before the parameter "
                         "counts were recorded: evaluate the model again)") from None


def _seed_mean_recall(metrics: dict, path, keys: dict[str, str]) -> float:
    """The mean over the languages of ``keys`` (language -> the metrics.json test set it is read
    from) of each language's mR."""
    from pseudopairs.report.tables import _mean_recall

    values = []
    for lang, key in keys.items():
        try:
            values.append(_mean_recall(metrics[key][lang]))
        except KeyError:
            raise ValueError(f"{path}: no {key}.{lang} mean recall") from None
    return sum(values) / len(values)


def _paper_mean_recall(paper: dict, columns: list[str], langs: list[str]) -> float:
    """The mean over ``langs`` of the row's published mR (its numbers follow the table's
    ``columns``); NaN unless every language has one."""
    from pseudopairs.report.tables import _paper_mean_recall as published

    values = []
    for lang in langs:
        printed = dict(zip(columns, (paper or {}).get(lang) or []))
        value = printed["mean_recall"] if "mean_recall" in printed else published(printed)
        if value is None or math.isnan(float(value)):
            return math.nan
        values.append(float(value))
    return sum(values) / len(values) if values else math.nan


def _reference(reference: dict, metrics: dict[str, dict]) -> dict:
    """The per-language-embedding count for ``reference["experiment"]`` (mean over seeds)."""
    from pseudopairs.report.tables import summarise
    from pseudopairs.smalr.hem import hybrid_parameter_count, per_language_parameter_count

    name = reference["experiment"]
    counts: dict[str, list[float]] = {"training": [], "trainable": []}
    for seed, vocab_path in reference["vocab"].items():
        path = metrics[name][seed]["path"]
        run = metrics[name][seed]["data"]
        vocab = _read(vocab_path)
        words = {lang: len(vocab["specific"].get(lang, [])) + len(vocab["latent"].get(lang, {}))
                 for lang in sorted(set(vocab["specific"]) | set(vocab["latent"]))}
        n_specific = sum(len(v) for v in vocab["specific"].values())
        hybrid = hybrid_parameter_count(n_specific, int(vocab["latent_size"]), reference["row_dim"],
                                        reference["output_dim"])
        recorded = _parameters(run, path, "text_embedding")
        if hybrid != recorded:
            raise ValueError(f"{path}: parameters.text_embedding is {recorded}, but HEM's vocabulary "
                             f"{vocab_path} with rows of {reference['row_dim']} and a projection to "
                             f"{reference['output_dim']} gives {hybrid}: not the model that vocabulary "
                             "and these settings describe")
        per_language = per_language_parameter_count(words, reference["row_dim"], reference["output_dim"])
        pretraining = _parameters(run, path, "pretraining")  # no HEM, no HEM pretraining
        counts["training"].append(float(_parameters(run, path, "training") - pretraining - recorded
                                        + per_language))
        counts["trainable"].append(float(_parameters(run, path, "trainable") - recorded + per_language))
    training, _, n = summarise(counts["training"])
    return {"label": reference["label"], "experiment": name, "n": n, "training_mean": training,
            "trainable_mean": summarise(counts["trainable"])[0],
            "text_embedding_mean": math.nan, "pretraining_mean": 0.0, "mean_recall_mean": math.nan,
            "mean_recall_std": math.nan, "paper_mean_recall": math.nan, "beyond_paper": True,
            "reference": True}


def parameters_table(spec: dict) -> pd.DataFrame:
    """One row per point of the figure (:data:`CSV_COLUMNS`), from the ``metrics.json`` files the
    spec names (:func:`pseudopairs.report.contract.parameters_figure_spec`)."""
    from pseudopairs.report.tables import RETRIEVAL_COLUMNS, read_runs, summarise

    langs, key = list(spec["langs"]), spec.get("retrieval_key", "retrieval")
    keys = {lang: spec.get("retrieval_keys", {}).get(lang, key) for lang in langs}
    columns = list(spec.get("columns") or RETRIEVAL_COLUMNS)
    loaded = {name: {seed: {"path": path, "data": data} for (seed, path), data
                     in zip(by_seed.items(), read_runs(by_seed, name, what="metrics", job="evaluate"))}
              for name, by_seed in spec["metrics"].items()}
    records = []
    for row in spec["rows"]:
        runs = loaded.get(row["experiment"], {})
        if not runs:
            raise ValueError(f"{spec.get('name')}: row {row['label']!r} has no metrics.json")
        training = [float(_parameters(r["data"], r["path"], "training")) for r in runs.values()]
        trainable = [float(_parameters(r["data"], r["path"], "trainable")) for r in runs.values()]
        embedding = [float(_parameters(r["data"], r["path"], "text_embedding")) for r in runs.values()]
        pretraining = [float(_parameters(r["data"], r["path"], "pretraining")) for r in runs.values()]
        recalls = [_seed_mean_recall(r["data"], r["path"], keys) for r in runs.values()]
        mean, std, n = summarise(recalls)
        records.append({"label": row["label"], "experiment": row["experiment"], "n": n,
                        "training_mean": summarise(training)[0],
                        "trainable_mean": summarise(trainable)[0],
                        "text_embedding_mean": summarise(embedding)[0],
                        "pretraining_mean": summarise(pretraining)[0],
                        "mean_recall_mean": mean, "mean_recall_std": std,
                        "paper_mean_recall": _paper_mean_recall(row.get("paper"), columns, langs),
                        "beyond_paper": bool(row.get("beyond_paper", False)), "reference": False})
    if spec.get("reference"):
        records.append(_reference(spec["reference"], loaded))
    return pd.DataFrame.from_records(records, columns=CSV_COLUMNS)


def parameters_figure(frame: pd.DataFrame, path, *, title: str = "", count: str = "training") -> None:
    """The points (mean mR ± sd over seeds against the ``count`` of parameters, :data:`COUNTS`,
    log scale), each labelled; a reference row as a dashed vertical line."""
    if count not in COUNTS:
        raise ValueError(f"parameters figure: count must be one of {list(COUNTS)}, got {count!r}")
    column, axis = COUNTS[count]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    points = frame[~frame["reference"].astype(bool)]
    colours = plt.cm.tab10(range(len(points)))
    for colour, (_, row) in zip(colours, points.iterrows()):
        std = row["mean_recall_std"]
        ax.errorbar([row[column]], [row["mean_recall_mean"]],
                    yerr=None if pd.isna(std) else [[std], [std]], fmt="o", color=colour,
                    capsize=3, label=row["label"])
        ax.annotate(str(row["label"]), (row[column], row["mean_recall_mean"]),
                    textcoords="offset points", xytext=(5, 4), fontsize=7)
    for _, row in frame[frame["reference"].astype(bool)].iterrows():
        ax.axvline(row[column], color="grey", linestyle="--", linewidth=1,
                   label=f"{row['label']} ({row[column]:,.0f})")
    ax.set_xscale("log")
    ax.set_xlabel(axis)
    ax.set_ylabel("mR (mean recall, %)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"{title} (mean ± sd over seeds)" if title else "mean ± sd over seeds", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)


def _cli_parameters_figure(args: argparse.Namespace) -> None:
    frame = parameters_table(args.spec)
    write_text_atomic(args.csv, frame.to_csv(index=False, float_format="%.6g"))
    parameters_figure(frame, args.png, title=args.spec.get("title", ""),
                      count=args.spec.get("count", "training"))
    print(f"{args.spec.get('name')}: {len(frame)} points -> {args.png}, {args.csv}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "parameters-figure", _cli_parameters_figure)
    commands.add_json(p, "--spec", "the figure's rows, metrics files and reference "
                                   "(report.contract.parameters_figure_spec)")
    p.add_argument("--png", required=True, help="the figure (PNG)")
    p.add_argument("--csv", required=True, help="its points (CSV)")
