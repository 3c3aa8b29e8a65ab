"""Self-contained HTML pages of the results for ``snakemake --report`` (which shows an HTML
result in the page itself, in a frame): each of the paper's tables as ours (mean ± sd over seeds)
with the paper's number under it, rows beyond the paper marked †, and an effect chart — each
row's difference from its source row, ours beside the paper's (:mod:`pseudopairs.report.effects`);
any CSV with ``paper_*`` columns (the method check); the §7.2 pseudopair statistics; and figures
(PNG), all embedded, so a page can be mailed on its own. A table fits the report's frame: ours and
the paper's number share a cell (two lines), and long labels wrap.

The generic part is :func:`infer_columns` + :func:`html_table`: a CSV whose values come as
``X_mean`` (and ``X_std``) or ``ours_X`` (and ``sd_X``), with the paper's number as ``paper_X``,
renders as a table without any declaration (``report-page --csv TITLE CSV``). The paper's tables
get headings from their config entry instead (:func:`table_columns`).
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import write_text_atomic
from pseudopairs.report.tables import _PERCENT as PERCENT_STATISTICS
from pseudopairs.report.tables import (
    HEADINGS,
    MEAN_RECALL,
    NO_PRECISION_NOTE,
    PRECISION_NOTE,
    STATS_HEADINGS,
    precision_table,
    summarise,
    table_metrics,
)

DAGGER = "†"
BEYOND_NOTE = f"{DAGGER} beyond the paper: rows the paper does not report."
LEGEND = ("Each cell: ours, mean ± sample standard deviation over the seeds (n; no ± for one seed), "
          "above the paper's published number (grey, italic). – : no number.")


@dataclass(frozen=True)
class Column:
    """One column of a results table: ``text`` (a CSV column shown as it is) or a value — ours
    (``ours``, a mean, with ``sd``) and/or the paper's (``paper``), shown as two cells side by
    side. ``group`` heads consecutive columns (a language); values are multiplied by ``scale``."""

    heading: str
    text: str | None = None
    ours: str | None = None
    sd: str | None = None
    paper: str | None = None
    group: str = ""
    digits: int = 1
    scale: float = 1.0

    @property
    def paired(self) -> bool:
        return self.text is None and self.ours is not None and self.paper is not None


# --------------------------------------------------------------------------------------------
# Cells


def number(value, digits: int = 1, scale: float = 1.0) -> str:
    """A number as shown in the tables; '' for a missing one."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ""
    try:
        x = float(value) * scale
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(x):
        return ""
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if float(value) == int(float(value)) and not isinstance(value, float) and scale == 1.0:
        return str(int(float(value)))
    return f"{x:.{digits}f}"


def _get(row: pd.Series, column: str | None):
    return row.get(column) if column is not None else None


def ours_text(row: pd.Series, column: Column) -> str:
    mean = number(_get(row, column.ours), column.digits, column.scale)
    if not mean:
        return "–"
    sd = number(_get(row, column.sd), column.digits, column.scale)
    return f"{mean} ± {sd}" if sd else mean


def ours_html(row: pd.Series, column: Column) -> str:
    """:func:`ours_text` as HTML: the mean and "± sd" each kept on one line, the line free to
    break between them (a narrow column shows the sd under the mean)."""
    text = ours_text(row, column)
    mean, _, sd = text.partition(" ± ")
    if not sd:
        return f'<span class="m">{html.escape(mean)}</span>'
    return f'<span class="m">{html.escape(mean)}</span> <span class="sd">±\u00a0{html.escape(sd)}</span>'


def paper_text(row: pd.Series, column: Column) -> str:
    return number(_get(row, column.paper), column.digits, column.scale) or "–"


def is_flagged(value) -> bool:
    """A ``beyond_paper`` cell as read back from a CSV (bool, 'True', 1, 'yes')."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    try:
        return bool(value) and not (isinstance(value, float) and math.isnan(value))
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------------------------
# Columns: generic (any CSV with paper columns) and the paper's tables


_ROLES = ((re.compile(r"(.+)_mean$"), "ours"), (re.compile(r"(.+)_std$"), "sd"),
          (re.compile(r"^ours_(.+)"), "ours"), (re.compile(r"^sd_(.+)"), "sd"),
          (re.compile(r"^paper_(.+)"), "paper"))


def infer_columns(frame: pd.DataFrame, *, label: str = "row", hidden=("beyond_paper",)) -> list[Column]:
    """The columns of any CSV with the paper's numbers beside ours: ``X_mean``/``ours_X`` is our
    value of X (sd: ``X_std``/``sd_X``), ``paper_X`` the paper's (a ``paper_X`` with no value of
    its own pairs with our ``X_<suffix>``, as Table 7's ``paper_en2de`` with ``en2de_r1_mean``);
    every other column is shown as it is, in the CSV's order."""
    order: list[tuple[str, str]] = []  # ("text", column) or ("value", key)
    values: dict[str, dict[str, str]] = {}
    for name in frame.columns:
        if name == label or name in hidden:
            continue
        for pattern, role in _ROLES:
            match = pattern.match(name)
            if match:
                key = match.group(1)
                if key not in values:
                    values[key] = {}
                    order.append(("value", key))
                values[key].setdefault(role, name)
                break
        else:
            order.append(("text", name))
    for key, roles in list(values.items()):  # paper_K alone + ours of K_<suffix> -> one column
        if set(roles) == {"paper"}:
            owners = [k for k, r in values.items() if k.startswith(f"{key}_") and "ours" in r and "paper" not in r]
            if len(owners) == 1:
                values[owners[0]]["paper"] = roles["paper"]
                del values[key]
    columns = []
    for kind, name in order:
        if kind == "text":
            columns.append(Column(name.replace("_", " "), text=name))
        elif name in values:
            roles = values[name]
            if "ours" not in roles and "paper" not in roles:  # an sd alone: show it as it is
                columns.append(Column(roles["sd"].replace("_", " "), text=roles["sd"]))
                continue
            columns.append(Column(name.replace("_", " "), ours=roles.get("ours"), sd=roles.get("sd"),
                                  paper=roles.get("paper")))
    return columns


def _direction(key: str) -> str:
    return key.replace("2", "→").upper() if re.fullmatch(r"[a-z]+2[a-z]+", key) else key


# Headings of the retrieval columns a table CSV has per language (``{lang}_{metric}_mean``); the
# table's own ``columns`` give their order (pseudopairs.report.tables.table_metrics); a metric not
# named here is shown under its own name, after those.
RETRIEVAL_HEADINGS = dict(HEADINGS)


def table_columns(spec: dict, frame: pd.DataFrame, *, with_n: bool = True) -> list[Column]:
    """The columns of one of the papers' tables (results/tableN.csv with its config entry), as
    the CSV has them: per language the table's metrics (paper 000: I→T R@1, T→I R@1, Sum) and mR,
    then Sum(Sum); Table 7 one R@1 per direction."""
    def value(heading: str, key: str, paper: str, group: str = "") -> Column:
        return Column(heading, ours=f"{key}_mean", sd=f"{key}_std",
                      paper=paper if paper in frame.columns else None, group=group)

    if spec.get("kind") == "translation":
        keys = [c[: -len("_r1_mean")] for c in frame.columns if c.endswith("_r1_mean")]
        columns = [value(f"{_direction(k)} R@1", f"{k}_r1", f"paper_{k}") for k in keys]
    else:
        columns = []
        for lang in spec.get("langs", []):
            measured = [c[len(lang) + 1: -len("_mean")] for c in frame.columns
                        if c.startswith(f"{lang}_") and c.endswith("_mean")]
            metrics = [m for m in table_metrics(spec) if m in measured]
            metrics += [m for m in measured if m not in metrics]
            columns += [value(RETRIEVAL_HEADINGS.get(m, m.replace("_", " ")), f"{lang}_{m}", f"paper_{lang}_{m}",
                              lang.upper()) for m in metrics]
        if "sum_sum_mean" in frame.columns:
            columns.append(value("Sum(Sum)", "sum_sum", "paper_sum_sum"))
    return columns + ([Column("n", text="n")] if with_n and "n" in frame.columns else [])


def chart_columns(spec: dict, frame: pd.DataFrame) -> list[Column]:
    """What a table's chart shows: each language's Sum (and Sum(Sum)); Table 7 each direction; a
    table without Sum its own columns when it has at most two per language (paper 004's R@10
    tables), else each language's mR (004's six-recall tables: one panel per language keeps the
    chart, and the all-results page, small)."""
    columns = table_columns(spec, frame, with_n=False)
    if spec.get("kind") == "translation":
        return columns
    sums = [c for c in columns if c.heading in ("Sum", "Sum(Sum)")]
    if sums:
        return sums
    mean_recall = RETRIEVAL_HEADINGS[MEAN_RECALL]
    own = [c for c in columns if c.heading != mean_recall]
    per_language = len(own) / max(len(spec.get("langs", [])), 1)
    return own if per_language <= 2 else [c for c in columns if c.heading == mean_recall]


# --------------------------------------------------------------------------------------------
# The table


def _header(columns: list[Column], *, label: str | None) -> str:
    """Up to two header rows: the groups (languages) and the headings; a heading with no group
    spans both rows. A value column is one column: ours over the paper's number."""
    grouped = any(c.group for c in columns)
    depth = 1 + grouped
    rows: list[list[str]] = [[] for _ in range(depth)]
    if label is not None:
        rows[0].append(f'<th rowspan="{depth}" class="label">{html.escape(label)}</th>')
    for k, column in enumerate(columns):
        top = 1 if grouped and column.group else 0
        if top and (k == 0 or columns[k - 1].group != column.group):
            width = sum(1 for _ in _run(columns[k:], column.group))
            rows[0].append(f'<th colspan="{width}" class="group">{html.escape(column.group)}</th>')
        span = depth - top
        attrs = f' rowspan="{span}"' if span > 1 else ""
        kind = "value" if column.text is None else "text"
        rows[top].append(f'<th class="{kind}"{attrs}>{html.escape(column.heading)}</th>')
    return "<thead>" + "".join(f"<tr>{''.join(r)}</tr>" for r in rows if r) + "</thead>"


def _run(columns: list[Column], group: str):
    """The leading columns of ``columns`` in ``group``."""
    for column in columns:
        if column.group != group:
            return
        yield column


def _cells(row: pd.Series, column: Column) -> str:
    if column.text is not None:
        value = row.get(column.text)
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            text = number(value, column.digits, column.scale)
        else:
            text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
        return f'<td class="text" data-value="{html.escape(text)}">{html.escape(text)}</td>'
    parts = []
    if column.ours is not None:
        parts.append(f'<span class="ours">{ours_html(row, column)}</span>')
    if column.paper is not None:
        parts.append(f'<span class="paper" title="paper">{html.escape(paper_text(row, column))}</span>')
    return f'<td class="value">{"".join(parts)}</td>'


def html_table(frame: pd.DataFrame, columns: list[Column] | None = None, *, label: str = "row",
               flag: str = "beyond_paper", caption: str | None = None) -> str:
    """A ``<table>`` of ``frame``: the ``label`` column first (with † where ``flag`` is true),
    then ``columns`` (default :func:`infer_columns`): ours as "mean ± sd", the paper's number
    under it in the same cell."""
    columns = infer_columns(frame, label=label, hidden=(flag,)) if columns is None else columns
    has_label = label in frame.columns
    body = []
    for _, row in frame.iterrows():
        beyond = flag in frame.columns and is_flagged(row.get(flag))
        cells = ""
        if has_label:
            name = html.escape(str(row[label])) + (f' <span class="dagger">{DAGGER}</span>' if beyond else "")
            cells += f'<th scope="row" class="label">{name}</th>'
        cells += "".join(_cells(row, c) for c in columns)
        body.append(f'<tr class="{"beyond" if beyond else "paper-row"}">{cells}</tr>')
    head = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    head += _header(columns, label="" if has_label else None)
    dense = " dense" if len(columns) > 10 else ""  # many columns: a smaller font keeps it in the frame
    return f'<div class="scroll"><table class="results{dense}">{head}<tbody>{"".join(body)}</tbody></table></div>'


def any_beyond(frame: pd.DataFrame, flag: str = "beyond_paper") -> bool:
    return flag in frame.columns and any(is_flagged(v) for v in frame[flag])


# --------------------------------------------------------------------------------------------
# §7.2 statistics


def pseudopair_stats_frames(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[Column], pd.DataFrame, list[Column]]:
    """results/pseudopair_stats.csv (long: one value per statistic, set and seed or seed pair)
    as two wide tables of mean, sd over the seeds and the paper's figure: one row per pseudopair
    set, and one per pair of sets compared (shares in percent)."""
    compared = frame["compared_with"].fillna("").astype(str)
    own, between = frame[compared == ""], frame[compared != ""].assign(compared_with=compared[compared != ""])

    def summary(group: pd.DataFrame, statistic: str, record: dict) -> None:
        rows = group[group["statistic"] == statistic]
        values = [float(v) for v in rows["value"] if not pd.isna(v)]
        m, sd, _ = summarise(values)
        record[f"{statistic}_mean"], record[f"{statistic}_std"] = m, sd
        paper = rows["paper"].iloc[0] if len(rows) else math.nan
        record[f"paper_{statistic}"] = math.nan if pd.isna(paper) else float(paper)

    def column(statistic: str, heading: str) -> Column:
        percent = statistic in PERCENT_STATISTICS
        return Column(heading, ours=f"{statistic}_mean", sd=f"{statistic}_std", paper=f"paper_{statistic}",
                      digits=1 if percent else 2, scale=100.0 if percent else 1.0)

    records = []
    for name, group in own.groupby("pseudopairs", sort=False):
        record = {"row": name, "criterion": str(group["criterion"].iloc[0])}
        for statistic in STATS_HEADINGS:
            summary(group, statistic, record)
        records.append(record)
    sets = pd.DataFrame.from_records(records)
    set_columns = [Column("criterion", text="criterion"), *(column(s, h) for s, h in STATS_HEADINGS.items())]
    records = []
    for (a, b), group in between.groupby(["pseudopairs", "compared_with"], sort=False):
        record = {"row": f"{a} vs {b}"}
        for statistic in ("jaccard", "agreement"):
            summary(group, statistic, record)
        records.append(record)
    pairs = pd.DataFrame.from_records(records)
    pair_columns = [column("jaccard", "Jaccard of transferred captions"), column("agreement", "per-image agreement")]
    return sets, set_columns, pairs, pair_columns


# --------------------------------------------------------------------------------------------
# Sections and the page


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _section(title: str, body: str) -> str:
    return f'<section id="{_anchor(title)}"><h2>{html.escape(title)}</h2>{body}</section>'


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def figure(uri: str, caption: str, *, css: str = "figure") -> str:
    return (f'<figure class="{css}"><img src="{uri}" alt="{html.escape(caption)}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def table_section(name: str, spec: dict | None, frame: pd.DataFrame, *,
                  per_seed: list[pd.DataFrame] | None = None, ours_label: str = "ours") -> str:
    """One of the paper's tables: its effect chart (each row's difference from its source row,
    ours beside the paper's; :func:`effect_section`), then the table."""
    if not spec:
        return _section(name, html_table(frame))
    title = spec.get("title", name)
    body = effect_section(name, spec, frame, per_seed=per_seed, ours_label=ours_label)
    body += html_table(frame, table_columns(spec, frame))
    if any_beyond(frame):
        body += f'<p class="note">{html.escape(BEYOND_NOTE)}</p>'
    return _section(title, body)


def effect_section(name: str, spec: dict, frame: pd.DataFrame, *, per_seed: list[pd.DataFrame] | None,
                   ours_label: str = "ours") -> str:
    """The effect chart of a table (SVG) with its data as JSON (``<script type="application/json"
    class="effects">``: the records of :func:`pseudopairs.report.effects.table_effects`). Without
    the per-seed metrics (``per_seed`` None) ours is the difference of the means, with no sd."""
    from pseudopairs.report.charts import effect_chart_svg
    from pseudopairs.report.effects import table_effects

    metrics = chart_columns(spec, frame)
    if not metrics or frame.empty or not spec.get("rows"):
        return ""
    effects = table_effects(spec, frame, metrics, per_seed if per_seed else [frame])
    if not effects:
        return ""
    names = row_labels(frame)
    sources = {e["source"] for e in effects}
    labels = {e["row_index"]: names[e["row_index"]] + ("" if len(sources) == 1 else f"  (vs {e['source']})")
              for e in effects}
    svg = effect_chart_svg(effects, labels=labels, ours_label=ours_label)
    against = f"its difference from {next(iter(sources))}" if len(sources) == 1 else (
        "its difference from its source row (vs …)")
    spread = ("mean ± sd over seeds of the per-seed difference" if per_seed else
              "difference of the means; no per-seed metrics, no sd")
    caption = (f"{spec.get('title', name).split(':')[0]}, each row: {against}; {ours_label} ({spread}; "
               "blue dot) beside the paper's (grey diamond), each world against itself on an axis "
               "centred on no change. A row's source: the model that mined its pseudopairs or that it "
               "was fine-tuned from, else the weaker side of a method-check effect, else the table's "
               "first row.")
    data = json.dumps([{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in e.items()}
                       for e in effects], ensure_ascii=False).replace("</", "<\\/")
    return (figure(data_uri(svg.encode("utf-8"), "image/svg+xml"), caption, css="chart effects")
            + f'<script type="application/json" class="effects" data-table="{html.escape(name)}">{data}</script>')


def row_labels(frame: pd.DataFrame, *, label: str = "row", flag: str = "beyond_paper") -> list[str]:
    flags = frame[flag] if flag in frame.columns else [False] * len(frame)
    return [f"{name} {DAGGER}" if is_flagged(b) else str(name) for name, b in zip(frame[label], flags)]


def csv_section(title: str, frame: pd.DataFrame) -> str:
    """Any CSV with paper columns (the method check), columns inferred."""
    return _section(title, html_table(frame))


def pseudopair_stats_section(frame: pd.DataFrame, title: str) -> str:
    sets, set_columns, pairs, pair_columns = pseudopair_stats_frames(frame)
    body = ('<p class="note">Mean ± sd over seeds (Jaccard and agreement across seeds: over pairs '
            "of seeds); shares of each set's database captions (German M30K training captions; English "
            "COCO captions for a reverse-direction set) in percent.</p>")
    body += html_table(sets, set_columns)
    if not pairs.empty:
        body += "<h3>Sets compared (same seed)</h3>" + html_table(pairs, pair_columns)
    precision = precision_table(frame)   # beyond the paper, the demo world only
    body += (f'<p class="note">{html.escape(NO_PRECISION_NOTE)}</p>' if precision.empty else
             "<h3>Beyond the paper: precision of the pseudopairs (demo world)</h3>"
             f'<p class="note">{html.escape(PRECISION_NOTE)}</p>' + html_table(precision))
    return _section(title, body)


#: an embedded PNG larger than this is re-encoded smaller (:func:`compact_png`): a page that
#: Snakemake's report embeds is shown from a data URL, which Chromium refuses above 2 MB (blank frame)
IMAGE_BUDGET = 150_000


def compact_png(data: bytes, *, budget: int = IMAGE_BUDGET) -> bytes:
    """``data`` itself when it fits ``budget`` bytes; otherwise the image with 256 colours
    (median cut, no dithering: deterministic), and if that still does not fit, also scaled down
    until it does (a quarter of the width at the least). The original file stays as it was."""
    if len(data) <= budget:
        return data
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    scale = 1.0
    while True:
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        shown = image if scale == 1.0 else image.resize(size, Image.Resampling.LANCZOS)
        out = io.BytesIO()
        shown.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            out, format="PNG", optimize=True)
        if out.tell() <= budget or scale <= 0.25:
            return out.getvalue()
        scale = max(0.25, scale * 0.8)


def image_section(caption: str, path: str | Path) -> str:
    """A figure: the caption up to " — " is the section's heading, the rest its caption. PNGs
    over :data:`IMAGE_BUDGET` are embedded re-encoded (:func:`compact_png`)."""
    path = Path(path)
    mime = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
    data = path.read_bytes()
    if path.suffix.lower() == ".png":
        data = compact_png(data)
    uri = data_uri(data, mime.get(path.suffix.lower(), "application/octet-stream"))
    heading, _, rest = caption.partition(" — ")
    return _section(heading, figure(uri, (rest[:1].upper() + rest[1:]) or heading))


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI","DejaVu Sans",sans-serif;margin:1.2em 1.4em;color:#1f2933;
  line-height:1.4;max-width:90em}
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.2em;margin:1.8em 0 .5em;border-bottom:1px solid #d5dbe1;
  padding-bottom:.2em}h3{font-size:1em}
p.legend,p.note{color:#52606d;font-size:.9em;margin:.3em 0}p.run{background:#fff8e1;border-left:4px solid #f0b429;
  padding:.4em .8em;font-size:.9em}
nav ul{columns:2;column-gap:3em;font-size:.9em;padding-left:1.2em}
.scroll{overflow-x:auto;max-width:100%}
table.results{border-collapse:collapse;font-size:.8em;font-variant-numeric:tabular-nums;margin:.5em 0;max-width:100%}
table.results th,table.results td{padding:.2em .45em;border-bottom:1px solid #e4e7eb;vertical-align:top}
table.results thead th{background:#f0f4f8;text-align:center;border-bottom:1px solid #bcccdc;vertical-align:bottom;
  font-weight:600}
table.results th.group{border-bottom:1px solid #9fb3c8}
table.results th.label{text-align:left;font-weight:600;overflow-wrap:anywhere;min-width:6em}
table.results td.value{text-align:right;border-right:1px solid #eef1f4}
table.results td.value .ours{display:block;font-weight:600;color:#102a43}
table.results td.value .paper{display:block;color:#7b8794;font-style:italic;font-size:.92em}
table.results .m,table.results .sd{white-space:nowrap}
table.results .sd{font-weight:normal;color:#334e68}
table.results td.text{text-align:left;overflow-wrap:anywhere}
table.results td.text[data-value="yes"]{color:#0e7c3a;font-weight:600}
table.results td.text[data-value="no"]{color:#b42318;font-weight:600}
table.results.dense{font-size:.7em}table.results.dense th,table.results.dense td{padding:.2em .3em}
table.results tr.beyond{background:#f5f7ff}
table.results tr:hover{background:#fffbea}
.dagger{color:#3e4c9b;font-weight:bold}
figure{margin:.8em 0}figure img{max-width:100%;height:auto;border:1px solid #eef1f4}
figure.chart img{border:none}
figcaption{font-size:.85em;color:#52606d;max-width:60em}
"""


def page(title: str, sections: list[str], *, note: str = "", contents: bool = False) -> str:
    """A complete HTML document (no external resource: styles inline, images as data URIs). The
    title is shown once: a single section headed like the page loses its own heading."""
    if len(sections) == 1:
        sections = [sections[0].replace(f"<h2>{html.escape(title)}</h2>", "", 1)]
    toc = ""
    if contents and len(sections) > 1:
        items = re.findall(r'<section id="([^"]+)"><h2>(.*?)</h2>', "".join(sections))
        toc = "<nav><ul>" + "".join(f'<li><a href="#{a}">{t}</a></li>' for a, t in items) + "</ul></nav>"
    run = f'<p class="run">{html.escape(note)}</p>' if note else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f'<h1>{html.escape(title)}</h1><p class="legend">{html.escape(LEGEND)}</p>{run}{toc}'
            f'{"".join(sections)}</body></html>\n')


def _read(path) -> pd.DataFrame:
    from pseudopairs.core.io import reading

    with reading(path, "a results CSV", fix="delete it and rerun the step that writes it"):
        return pd.read_csv(path, keep_default_na=False, na_values=[""])


def per_seed_tables(spec: dict | None) -> list[pd.DataFrame] | None:
    """The table of each seed (:func:`pseudopairs.report.effects.seed_frames`) from the metrics
    files its spec names (``metrics``: experiment → seed → path, as the ``table`` step gets them,
    or ``seeds`` and ``metrics_pattern``: :func:`pseudopairs.report.effects.page_spec`); None for a
    spec without them."""
    if not spec or not (spec.get("metrics") or spec.get("metrics_pattern")):
        return None
    from pseudopairs.report.effects import metrics_files, seed_frames
    from pseudopairs.report.tables import load_metrics

    return seed_frames(spec, load_metrics({**spec, "metrics": metrics_files(spec)}))


def build_page(*, title: str | None, specs: dict, tables: list[str], csvs: list[tuple[str, str]],
               pseudopair_stats: str | None, images: list[tuple[str, str]], note: str = "",
               ours_label: str = "ours") -> str:
    """The page ``report-page`` writes: the tables (name = the CSV's stem, its config entry in
    ``specs``, with ``sources`` and ``metrics`` for the effect chart), the other CSVs, the §7.2
    statistics, then the images, in that order."""
    from pseudopairs.report.pages import PSEUDOPAIR_STATS_TITLE

    sections = [table_section(Path(path).stem, specs.get(Path(path).stem), _read(path),
                              per_seed=per_seed_tables(specs.get(Path(path).stem)), ours_label=ours_label)
                for path in tables]
    sections += [csv_section(caption, _read(path)) for caption, path in csvs]
    if pseudopair_stats:
        sections.append(pseudopair_stats_section(_read(pseudopair_stats), PSEUDOPAIR_STATS_TITLE))
    sections += [image_section(caption, path) for caption, path in images]
    if title is None:
        only = specs.get(Path(tables[0]).stem, {}) if len(tables) == 1 else {}
        title = only.get("title") or (csvs[0][0] if len(csvs) == 1 and not tables else "Results")
    return page(title, sections, note=note, contents=len(sections) > 2)


def _cli_page(args: argparse.Namespace) -> None:
    if not (args.table or args.csv or args.pseudopair_stats or args.image):
        raise ValueError("report-page: nothing to show (give --table, --csv, --pseudopair-stats or --image)")
    text = build_page(title=args.title, specs=args.specs, tables=args.table,
                      csvs=[tuple(c) for c in args.csv], pseudopair_stats=args.pseudopair_stats,
                      images=[tuple(i) for i in args.image], note=args.note, ours_label=args.ours_label)
    write_text_atomic(args.output, text)
    print(f"{args.output}: {text.count('<table')} tables, {text.count('<img')} images, {len(text)} characters")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "report-page", _cli_page)
    p.add_argument("--output", required=True, help="the HTML page")
    p.add_argument("--title", default=None, help="default: the one table's title, else 'Results'")
    commands.add_json(p, "--specs", "the config's tables section (titles, kinds, languages)", required=False)
    p.add_argument("--table", action="append", default=[], metavar="CSV",
                   help="a table written by `table` (its name, the file's stem, picks its --specs entry)")
    p.add_argument("--csv", nargs=2, action="append", default=[], metavar=("TITLE", "CSV"),
                   help="any CSV with paper_* columns beside ours (X_mean/X_std or ours_X/sd_X)")
    p.add_argument("--pseudopair-stats", default=None, metavar="CSV", help="results/pseudopair_stats.csv")
    p.add_argument("--image", nargs=2, action="append", default=[], metavar=("CAPTION", "PNG"),
                   help="a figure to embed")
    p.add_argument("--note", default="", help="a sentence about this run, shown under the title")
    p.add_argument("--ours-label", default="ours", help="our numbers' name in the effect charts "
                   "(e.g. 'ours (demo world)')")
