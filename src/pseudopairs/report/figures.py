"""Figures: Figure 1 of the paper (COCO images with the German caption each source model
transferred to them by pseudopair mining, §7.2) as a PNG and a self-contained HTML page, the
training curves of every table's models, and a table drawn as grouped bars (``figure: true``: paper
004's Figure 3).

The images are drawn at random (seeded) among the query images that every shown pseudopair set
annotated; for each image the figure shows its first English caption that got a match in every
set, and the German caption each set transferred for that English caption.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import logging
import textwrap

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.data.experiments import row_experiments
from pseudopairs.core.io import atomic_path, read_pairs, write_text_atomic

log = logging.getLogger(__name__)


def choose_examples(pairs: dict[str, pd.DataFrame], *, n_images: int, seed: int) -> pd.DataFrame:
    """One row per shown image: ``image_id``, ``query_caption_idx``, ``query_text`` and one column
    per pseudopair set with the caption it transferred (``match_raw``). Images are sampled with
    ``numpy.random.default_rng(seed)`` among those whose caption got a match in every set."""
    if not pairs:
        raise ValueError("Figure 1: no pseudopair sets given")
    keys = ["query_image_id", "query_caption_idx"]
    merged = None
    for name, frame in pairs.items():
        part = frame[keys + ["query_text", "match_raw"]].rename(columns={"match_raw": name})
        merged = part if merged is None else merged.merge(part.drop(columns="query_text"), on=keys)
    merged = merged.sort_values(keys, kind="stable").drop_duplicates("query_image_id", keep="first")
    if merged.empty:
        raise ValueError(f"Figure 1: no query image has a match in every set {list(pairs)}")
    rng = np.random.default_rng(seed)
    n = min(int(n_images), len(merged))
    chosen = np.sort(rng.choice(len(merged), size=n, replace=False))
    out = merged.iloc[chosen].rename(columns={"query_image_id": "image_id"})
    return out.reset_index(drop=True)


def _image_path(images: pd.DataFrame, image_id: str) -> str:
    match = images.loc[images["image_id"] == image_id, "path"]
    if match.empty:
        raise ValueError(f"Figure 1: image {image_id!r} is not in the image list")
    return str(match.iloc[0])


def render_png(examples: pd.DataFrame, *, images: pd.DataFrame, sources: dict[str, str], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    names = list(sources)
    fig, axes = plt.subplots(len(examples), 2, figsize=(11, 2.6 * len(examples)),
                             gridspec_kw={"width_ratios": [1, 3]}, squeeze=False)
    for (ax_img, ax_txt), (_, row) in zip(axes, examples.iterrows()):
        with Image.open(_image_path(images, row["image_id"])) as img:
            ax_img.imshow(img.convert("RGB"))
        ax_img.set_axis_off()
        lines = [f"EN ({row['image_id']}): {row['query_text']}"]
        for name in names:
            lines.append(f"{name} (from {sources[name]}): {row[name]}")
        wrapped = "\n".join(textwrap.fill(line, 90, subsequent_indent="    ") for line in lines)
        ax_txt.text(0, 0.5, wrapped, va="center", ha="left", fontsize=9, family="DejaVu Sans")
        ax_txt.set_axis_off()
    fig.suptitle("Captions transferred to COCO images by pseudopair mining (cf. paper Figure 1)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def _data_uri(path: str) -> str:
    from PIL import Image

    with Image.open(path) as img:
        buffer = io.BytesIO()
        img.convert("RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def render_html(examples: pd.DataFrame, *, images: pd.DataFrame, sources: dict[str, str],
                seed: int, path) -> None:
    """A self-contained page (images embedded as data URIs)."""
    rows = []
    for _, row in examples.iterrows():
        uri = _data_uri(_image_path(images, row["image_id"]))
        cells = "".join(f"<tr><th>{html.escape(name)}<br><small>source {html.escape(src)}</small></th>"
                        f"<td lang=\"de\">{html.escape(str(row[name]))}</td></tr>"
                        for name, src in sources.items())
        rows.append(
            f"<figure><img src=\"{uri}\" alt=\"{html.escape(row['image_id'])}\" width=\"224\">"
            f"<figcaption><table><tr><th>English ({html.escape(row['image_id'])})</th>"
            f"<td lang=\"en\">{html.escape(row['query_text'])}</td></tr>{cells}</table>"
            f"</figcaption></figure>")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Pseudopair examples</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}figure{{display:flex;gap:1.5em;
align-items:center;border-bottom:1px solid #ccc;padding:1em 0}}th{{text-align:left;padding-right:1em;
vertical-align:top}}img{{image-rendering:pixelated}}</style></head><body>
<h1>Captions transferred by pseudopair mining</h1>
<p>COCO images with the German caption that each source model's pseudopair set (seed {seed})
transferred to the English caption shown (cf. Figure 1 of Kádár et al.).</p>
{''.join(rows)}
</body></html>
"""
    write_text_atomic(path, page)


def pseudopair_figure(spec: dict, *, png, html_path) -> pd.DataFrame:
    pairs = {name: read_pairs(path) for name, path in spec["pairs"].items()}
    images = pd.read_parquet(spec["images"])
    examples = choose_examples(pairs, n_images=spec["n_images"], seed=spec["sample_seed"])
    render_png(examples, images=images, sources=spec["sources"], path=png)
    render_html(examples, images=images, sources=spec["sources"], seed=spec["seed"], path=html_path)
    return examples


def _cli_figure(args: argparse.Namespace) -> None:
    examples = pseudopair_figure(args.spec, png=args.png, html_path=args.html)
    print(examples.to_string(index=False))


# --------------------------------------------------------------------------------------------
# Training curves


def training_curves(*, tables: dict[str, dict], logs: dict[str, dict], path, read_log=None) -> None:
    """Validation score against updates for every experiment of every table and seed: one panel
    per table, one colour per experiment, one line style per seed (the best checkpoint marked).
    ``logs``: experiment → seed → the ``train_log.csv`` the rule passes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    read_log = read_log or (lambda experiment, seed: pd.read_csv(logs[experiment][str(seed)]))
    seeds = list(dict.fromkeys(seed for by_seed in logs.values() for seed in by_seed))
    panels = [(name, spec) for name, spec in tables.items()
              if any(row_experiments(row) for row in spec["rows"])]
    if not panels:
        raise ValueError("training curves: no table names an experiment")
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.2 * columns, 4.3 * rows), squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, (name, spec) in zip(axes.flat, panels):
        experiments = list(dict.fromkeys(n for row in spec["rows"] for n in row_experiments(row)))
        colours = plt.cm.tab20(np.linspace(0, 1, max(len(experiments), 2)))
        for colour, experiment in zip(colours, experiments):
            for k, seed in enumerate(seeds):
                if str(seed) not in logs.get(experiment, {str(seed): None}):
                    continue   # a seed only other tables average over
                frame = read_log(experiment, seed)
                val = frame.dropna(subset=["val_score"])
                if val.empty:
                    continue
                ax.plot(val["update"], val["val_score"], styles[k % len(styles)], color=colour,
                        label=experiment if k == 0 else None, linewidth=1.2)
                best = val.loc[val["val_score"].idxmax()]
                ax.plot([best["update"]], [best["val_score"]], "o", color=colour, markersize=3)
        ax.set_title(spec.get("title", name).split(":")[0], fontsize=10)
        ax.set_xlabel("update")
        ax.set_ylabel("validation score (sum of recalls)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    fig.suptitle(f"Validation score during training (seeds {', '.join(map(str, seeds))}: "
                 f"{', '.join(styles[:len(seeds)])}; dot = kept checkpoint)")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)


def table_figure(spec: dict, frame: pd.DataFrame, path) -> None:
    """A retrieval table (its CSV ``frame`` and config entry ``spec``) as grouped bars: one panel
    per language, one group per column of the table (mR left out), one bar per row — ours, the
    mean with ± sd over seeds — and the paper's number as a black tick where it is known (paper
    004's Figure 3: monolingual, bilingual, multilingual, both directions)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pseudopairs.report.tables import HEADINGS, MEAN_RECALL, table_metrics

    if spec.get("kind") != "retrieval":
        raise ValueError(f"table figure: {spec.get('title')!r} is not a retrieval table")
    langs = list(spec["langs"])
    columns = [c for c in table_metrics(spec) if c != MEAN_RECALL] or [MEAN_RECALL]
    labels = [str(label) + (" †" if bool(beyond) else "")
              for label, beyond in zip(frame["row"], frame.get("beyond_paper", [False] * len(frame)))]
    n_rows = len(frame)
    width = 0.8 / max(n_rows, 1)
    x = np.arange(len(columns))
    colours = plt.cm.tab10(np.arange(n_rows) % 10)
    fig, axes = plt.subplots(1, len(langs), figsize=(1.5 + 1.1 * len(columns) * len(langs) + 0.3 * n_rows, 3.8),
                             sharey=True, squeeze=False)
    for ax, lang in zip(axes[0], langs):
        for k in range(n_rows):
            row = frame.iloc[k]
            mean = np.array([row.get(f"{lang}_{c}_mean", np.nan) for c in columns], dtype=float)
            sd = np.array([row.get(f"{lang}_{c}_std", np.nan) for c in columns], dtype=float)
            paper = np.array([row.get(f"paper_{lang}_{c}", np.nan) for c in columns], dtype=float)
            offset = x - 0.4 + (k + 0.5) * width
            ax.bar(offset, np.nan_to_num(mean), width * 0.92, color=colours[k], label=labels[k],
                   yerr=np.where(np.isnan(sd), 0.0, sd), error_kw={"lw": 0.8, "capsize": 2})
            known = ~np.isnan(paper)
            if known.any():
                ax.plot(offset[known], paper[known], "_", color="black", markersize=9, markeredgewidth=2,
                        label="paper" if k == 0 else None)
        ax.set_xticks(x, [HEADINGS.get(c, c) for c in columns], fontsize=8)
        ax.set_title(lang.upper(), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0][0].set_ylabel("recall (%)")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=8, frameon=False)
    fig.suptitle(f"{spec.get('title', '')} (mean ± sd over seeds)", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)


def _cli_table_figure(args: argparse.Namespace) -> None:
    table_figure(args.spec, pd.read_csv(args.table), args.output)
    print(f"{args.spec.get('title', args.table)} -> {args.output}")


def _cli_training_curves(args: argparse.Namespace) -> None:
    training_curves(tables=args.spec["tables"], logs=args.spec["logs"], path=args.output)
    print(f"training curves -> {args.output}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "pseudopair-figure", _cli_figure)
    commands.add_json(p, "--spec", "report.contract.pseudopair_figure_spec")
    p.add_argument("--png", required=True)
    p.add_argument("--html", required=True)
    p = commands.add_command(subparsers, "training-curves", _cli_training_curves)
    commands.add_json(p, "--spec", "the tables and their training logs (report.contract.training_curves_spec)")
    p.add_argument("--output", required=True, help="PNG")
    p = commands.add_command(subparsers, "table-figure", _cli_table_figure)
    commands.add_json(p, "--spec", "the table's config entry")
    p.add_argument("--table", required=True, help="the table's CSV (pseudopairs table)")
    p.add_argument("--output", required=True, help="PNG")
