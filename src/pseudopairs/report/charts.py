"""Charts of ours against the paper for the HTML pages (:mod:`pseudopairs.report.html`): one
panel per metric (a language's Sum, Sum(Sum), a translation direction's R@1), one pair of
horizontal bars per table row — ours (mean, with ± sd error bars over seeds) and the paper's
published number. Written as SVG (vector, deterministic: no date, fixed ids)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

OURS_COLOUR = "#2f6690"
PAPER_COLOUR = "#c9ccd1"


def _values(frame: pd.DataFrame, column: str | None, scale: float = 1.0) -> np.ndarray:
    if column is None or column not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float) * scale


def chart_svg(frame: pd.DataFrame, metrics: list, *, labels: list[str]) -> str:
    """The chart as SVG text. ``metrics``: :class:`pseudopairs.report.html.Column` values (their
    ``ours``, ``sd`` and ``paper`` columns of ``frame``); ``labels``: one per row, top to bottom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, panels = len(frame), len(metrics)
    y = np.arange(n)
    height = 0.4
    with plt.rc_context({"svg.hashsalt": "pseudopairs", "svg.fonttype": "none", "font.size": 9,
                         "font.family": "DejaVu Sans"}):
        fig, axes = plt.subplots(1, panels, figsize=(1.8 + 3.4 * panels, 0.9 + 0.3 * n), sharey=True,
                                 squeeze=False)
        for ax, metric in zip(axes[0], metrics):
            ours = _values(frame, metric.ours, metric.scale)
            sd = np.nan_to_num(_values(frame, metric.sd, metric.scale), nan=0.0)
            paper = _values(frame, metric.paper, metric.scale)
            ax.barh(y - height / 2, np.nan_to_num(ours), height, color=OURS_COLOUR, label="ours (mean ± sd)",
                    xerr=np.where(np.isnan(ours), 0.0, sd), error_kw={"ecolor": "#0b2233", "capsize": 2, "lw": 0.8})
            ax.barh(y + height / 2, np.nan_to_num(paper), height, color=PAPER_COLOUR, edgecolor="#8a9099",
                    linewidth=0.5, label="paper")
            for k in np.flatnonzero(np.isnan(ours) & ~np.isnan(paper)):
                ax.text(0, y[k] - height / 2, " no run", va="center", fontsize=7, color="#7b8794")
            title = f"{metric.group} {metric.heading}".strip()
            ax.set_title(title, fontsize=10)
            ax.grid(axis="x", alpha=0.3)
            ax.set_axisbelow(True)
            ax.spines[["top", "right"]].set_visible(False)
        first = axes[0][0]
        first.set_yticks(y, labels)
        first.invert_yaxis()
        handles, names = first.get_legend_handles_labels()
        fig.legend(handles, names, loc="upper right", ncol=2, frameon=False, fontsize=8)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (0.9 + 0.3 * n)))
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]
