"""The ``pseudopair-stats`` step (paper §7.2): the statistics of every mined pseudopair set
(:func:`pseudopairs.mining.statistics.pseudopair_statistics`) as results/pseudopair_stats.csv, and
its plots — caption use (rank–frequency, log-log) and the similarity of the mined pairs, one panel
per source model and direction (queries → database: the paper's COCO → M30K German, or the reverse
M30K German → COCO English)."""

from __future__ import annotations

import numpy as np

from pseudopairs import commands
from pseudopairs.core.io import atomic_path, read_pairs
from pseudopairs.mining.statistics import pseudopair_statistics


def panels(spec: dict) -> dict[tuple, list[str]]:
    """The sets of each panel: one panel per source model and direction (queries → database; a
    set without them in the spec counts as the paper's direction), in the spec's order."""
    grouped: dict[tuple, list[str]] = {}
    for name, info in spec["sets"].items():
        key = (info["source"], info.get("queries", ""), info.get("database", ""))
        grouped.setdefault(key, []).append(name)
    return grouped


def set_label(name: str, info: dict, detail: str) -> str:
    """A line's legend: the set's name and criterion (several sets of one panel can share a
    criterion, e.g. a round of iterated bootstrapping and the paper's set)."""
    return f"{name}: {info['criterion']} ({detail})"


def _source_panels(spec: dict, path, *, draw, xlabel: str, ylabel: str, title: str, load=None,
                   columns: int = 3) -> None:
    """One panel per source model and direction (:func:`panels`; first seed), at most ``columns``
    per row, ``draw(ax, pairs, name, info)`` once per pseudopair set of the panel; saved
    atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = spec["seeds"][0]
    groups = panels(spec)
    ncols = min(columns, len(groups))
    nrows = -(-len(groups) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 4.2 * nrows), squeeze=False)
    for ax, ((source, queries, database), names) in zip(axes.flat, groups.items()):
        for name in names:
            info = spec["sets"][name]
            pairs = load(name, seed)[0] if load else read_pairs(spec["files"][name][str(seed)]["pairs"])
            draw(ax, pairs, name, info)
        direction = f", {queries} → {database}" if queries and database else ""
        ax.set_title(f"source {source}{direction}, seed {seed}", fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def caption_use_plot(spec: dict, path, *, load=None) -> None:
    """Log-log rank–frequency plot of caption use (times each database caption was transferred,
    most used first), one line per pseudopair set, seed = the first seed; one panel per source
    and direction."""

    def draw(ax, pairs, name, info):
        counts = np.sort(np.bincount(pairs["match_row"].to_numpy()))[::-1]
        counts = counts[counts > 0]
        ax.loglog(np.arange(1, len(counts) + 1), counts, label=set_label(name, info, f"{len(counts)} used"))
        ax.grid(True, which="both", alpha=0.3)

    _source_panels(spec, path, draw=draw, xlabel="caption rank by use", ylabel="times transferred",
                   title="Caption use of the mined pseudopairs (hubness: a few captions transferred "
                         "very often)", load=load)


def similarity_histograms(spec: dict, path, *, load=None) -> None:
    """Histogram of the cosine similarity of the mined pairs, one line per pseudopair set (first
    seed), one panel per source model and direction; dotted lines mark the 25th and 75th
    percentiles of each cosine set, where the "25%" and "75%" filters cut."""

    def draw(ax, pairs, name, info):
        values = pairs["similarity"].to_numpy(dtype=float)
        ax.hist(values, bins=50, histtype="step", density=True,
                label=set_label(name, info, f"{len(values)} pairs"))
        if info["criterion"] == "cosine":
            for q in (25, 75):
                ax.axvline(np.percentile(values, q), linestyle=":", color="grey")

    _source_panels(spec, path, draw=draw, xlabel="cosine similarity of the pair", ylabel="density",
                   title="Similarity of the mined pseudopairs (dotted: 25th/75th percentile of the "
                         "cosine set)", load=load)


def _cli_pseudopair_stats(args) -> None:
    spec = args.spec
    frame = pseudopair_statistics(spec)
    with atomic_path(args.output) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.4f")
    caption_use_plot(spec, args.plot)
    similarity_histograms(spec, args.histogram)
    print(frame.to_string(index=False))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "pseudopair-stats", _cli_pseudopair_stats)
    commands.add_json(p, "--spec", "the sets, seeds and their files (report.contract.pseudopair_stats_spec)")
    p.add_argument("--output", required=True, help="pseudopair_stats.csv")
    p.add_argument("--plot", required=True, help="caption-use plot (PNG)")
    p.add_argument("--histogram", required=True, help="similarity histograms (PNG)")
