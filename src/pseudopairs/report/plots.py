"""Plots of the mined pseudopairs (paper §7.2): caption use (rank–frequency, log-log) and the
similarity of the mined pairs, one panel per source model."""

from __future__ import annotations

import numpy as np

from pseudopairs.io import atomic_path, read_pairs


def _source_panels(spec: dict, path, *, draw, xlabel: str, ylabel: str, title: str, load=None) -> None:
    """One panel per source model (first seed), ``draw(ax, pairs, info)`` once per pseudopair set
    of that source; saved atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    seed = spec["seeds"][0]
    sources = list(dict.fromkeys(info["source"] for info in spec["sets"].values()))
    fig, axes = plt.subplots(1, len(sources), figsize=(5.5 * len(sources), 4.2), squeeze=False)
    for ax, source in zip(axes[0], sources):
        for name, info in spec["sets"].items():
            if info["source"] == source:
                pairs = load(name, seed)[0] if load else read_pairs(spec["files"][name][str(seed)]["pairs"])
                draw(ax, pairs, info)
        ax.set_title(f"source {source}, seed {seed}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def caption_use_plot(spec: dict, path, *, load=None) -> None:
    """Log-log rank–frequency plot of caption use (times each database caption was transferred,
    most used first), one line per pseudopair set, seed = the first seed; one panel per source."""

    def draw(ax, pairs, info):
        counts = np.sort(np.bincount(pairs["match_row"].to_numpy()))[::-1]
        counts = counts[counts > 0]
        ax.loglog(np.arange(1, len(counts) + 1), counts, label=f"{info['criterion']} ({len(counts)} used)")
        ax.grid(True, which="both", alpha=0.3)

    _source_panels(spec, path, draw=draw, xlabel="caption rank by use", ylabel="times transferred",
                   title="Caption use of the mined pseudopairs (hubness: a few captions transferred "
                         "very often)", load=load)


def similarity_histograms(spec: dict, path, *, load=None) -> None:
    """Histogram of the cosine similarity of the mined pairs, one line per pseudopair set (first
    seed), one panel per source model; dotted lines mark the 25th and 75th percentiles of the
    paper's (cosine) set, where the "25%" and "75%" filters cut."""

    def draw(ax, pairs, info):
        values = pairs["similarity"].to_numpy(dtype=float)
        ax.hist(values, bins=50, histtype="step", density=True,
                label=f"{info['criterion']} ({len(values)} pairs)")
        if info["criterion"] == "cosine":
            for q in (25, 75):
                ax.axvline(np.percentile(values, q), linestyle=":", color="grey")

    _source_panels(spec, path, draw=draw, xlabel="cosine similarity of the pair", ylabel="density",
                   title="Similarity of the mined pseudopairs (dotted: 25th/75th percentile of the "
                         "cosine set)", load=load)
