"""Effect charts for the HTML pages (:mod:`pseudopairs.report.html`): one panel per metric (a
language's Sum, Sum(Sum), a translation direction's R@1, …), one line per table row with a source
row (:mod:`pseudopairs.report.effects`): ours (the mean difference from the source, ± sd over
seeds) and the paper's difference as two markers on an axis centred on zero, each world's number
printed beside the panel. Absolute numbers of the two worlds are never drawn against each other.
Written as SVG (vector, deterministic: no date, fixed ids)."""

from __future__ import annotations

import io
import math

import numpy as np

OURS_COLOUR = "#2f6690"
PAPER_MARKER_COLOUR = "#7b8794"


def _limit(values: list[float]) -> float:
    """Half the width of a symmetric axis around zero that shows every value (a tenth more)."""
    finite = [abs(v) for v in values if not math.isnan(v)]
    top = max(finite, default=0.0)
    return 1.0 if top == 0 else top * 1.12


def _signed(value: float, digits: int = 1) -> str:
    return "–" if math.isnan(value) else f"{value:+.{digits}f}".replace("-", "−")


def effect_chart_svg(effects: list[dict], *, labels: dict[int, str], ours_label: str = "ours") -> str:
    """The effect chart as SVG text: one panel per metric, one line per row with a source (the
    rows of :func:`pseudopairs.report.effects.table_effects`), two markers on an axis symmetric
    around zero: ours (mean difference, ± sd over seeds) and the paper's difference, each printed
    beside the panel. ``labels``: row index → the row's label (with its source where the rows
    differ in source)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(dict.fromkeys(e["metric"] for e in effects))
    rows = list(dict.fromkeys(e["row_index"] for e in effects))
    n, panels = len(rows), len(metrics)
    y = {r: k for k, r in enumerate(rows)}
    offset = 0.18
    height = 1.1 + 0.36 * n
    with plt.rc_context({"svg.hashsalt": "pseudopairs", "svg.fonttype": "none", "font.size": 10.5,
                         "font.family": "DejaVu Sans"}):
        fig, axes = plt.subplots(1, panels, figsize=(1.8 + 3.4 * panels, height), sharey=True, squeeze=False)
        for ax, metric in zip(axes[0], metrics):
            shown = [e for e in effects if e["metric"] == metric]
            ours = np.array([e["ours"] for e in shown], dtype=float)
            sd = np.array([e["sd"] for e in shown], dtype=float)
            paper = np.array([e["paper"] for e in shown], dtype=float)
            ys = np.array([y[e["row_index"]] for e in shown], dtype=float)
            lim = _limit([*(np.abs(ours) + np.nan_to_num(sd)), *paper])
            ax.axvline(0.0, color="#3e4c59", linewidth=0.9, zorder=1)
            ax.errorbar(ours, ys - offset, xerr=np.where(np.isnan(sd), 0.0, sd), fmt="o", color=OURS_COLOUR,
                        markersize=5, ecolor=OURS_COLOUR, elinewidth=1.2, capsize=2.5, zorder=3,
                        label=f"{ours_label}: mean ± sd over seeds")
            ax.plot(paper, ys + offset, "D", color=PAPER_MARKER_COLOUR, markerfacecolor="white",
                    markeredgewidth=1.3, markersize=5, zorder=3, label="paper")
            for k in range(len(shown)):
                ours_text = _signed(ours[k]) + ("" if np.isnan(sd[k]) else f" ± {sd[k]:.1f}")
                ax.annotate(ours_text, (1.02, ys[k] - offset), xycoords=("axes fraction", "data"),
                            va="center", fontsize=9, color=OURS_COLOUR, annotation_clip=False)
                ax.annotate(_signed(paper[k]), (1.02, ys[k] + offset), xycoords=("axes fraction", "data"),
                            va="center", fontsize=9, color=PAPER_MARKER_COLOUR, annotation_clip=False)
            ax.set_xlim(-lim, lim)
            ax.set_title(f"Δ {metric}", fontsize=11)
            ax.grid(axis="x", alpha=0.3)
            ax.set_axisbelow(True)
            ax.spines[["top", "right"]].set_visible(False)
            for k in range(n):
                if k % 2:
                    ax.axhspan(k - 0.5, k + 0.5, color="#f5f7fa", zorder=0)
        first = axes[0][0]
        first.set_yticks(range(n), [labels.get(r, str(r)) for r in rows])
        first.set_ylim(n - 0.5, -0.5)
        handles, names = first.get_legend_handles_labels()
        order = sorted(range(len(names)), key=lambda k: names[k] == "paper")  # ours first
        fig.legend([handles[k] for k in order], [names[k] for k in order], loc="upper center", ncol=2,
                   frameon=False, fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.36 / height), w_pad=4.5)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]
