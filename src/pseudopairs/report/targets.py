"""What the workflow's final targets are (rule ``all``) and what the report's pages read: the
tables, figures, statistics and checks a config declares, each page's inputs and its label in
``snakemake --report``'s lists. Functions of the config (and, for a report after a partial run,
of which files exist); the rules in ``workflow/rules/tables.smk`` call them directly.

No third-party import: the workflow imports this module when it parses."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from pseudopairs.core import layout
from pseudopairs.workflow import rounds as chains_of_rounds
from pseudopairs.mining.contract import pseudopair_sets
from pseudopairs.report import effects, pages
from pseudopairs.report.contract import parameters_figures as declared_parameters_figures

# The report's subcategories of Tables (listed alphabetically by the report)
PAGES = "Charts and tables (pages)"
DATA = "Data (CSV, Markdown)"
FIGURES = "Figures"


# ----------------------------------------------------------------------------------------------
# The outputs a config declares


def tables(config: dict) -> list[str]:
    return [layout.table(name) for name in config["tables"]]


def table_figures(config: dict) -> list[str]:
    """The tables drawn as bars too (``figure: true``; rule all and the results page)."""
    return [layout.table_figure(name) for name, spec in config["tables"].items() if spec.get("figure")]


def parameters_figures(config: dict) -> list[str]:
    """Each table's ``parameters_figure`` (paper 002's Figure 3) and its points."""
    return [layout.parameters_figure(name, ext) for name in declared_parameters_figures(config)
            for ext in ("png", "csv")]


def pseudopair_stats_outputs(config: dict) -> list[str]:
    """The §7.2 statistics table, when the config declares pseudopair sets."""
    return [layout.pseudopair_stats()] if pseudopair_sets(config) else []


def pseudopair_outputs(config: dict) -> list[str]:
    """§7.2 statistics with their plots, and Figure 1 when the config asks for it."""
    outputs = []
    if pseudopair_sets(config):
        outputs += [layout.pseudopair_stats(), layout.caption_use_plot(), layout.similarity_histogram()]
    if config.get("pseudopair_stats", {}).get("figure"):
        outputs += [layout.pseudopair_figure("png"), layout.pseudopair_figure("html")]
    return outputs


def method_check_outputs(config: dict) -> list[str]:
    """The method check, when the config declares effects."""
    return [layout.method_check()] if config.get("method_check", {}).get("effects") else []


def training_runs_outputs(config: dict) -> list[str]:
    """How every table's training runs ended (written by rule method_check with its CSV)."""
    return [layout.training_runs()] if method_check_outputs(config) else []


def rounds_outputs(config: dict) -> list[str]:
    """Each iterated-bootstrapping chain's summary CSV and figure."""
    return [path for chain in chains_of_rounds.chains(config)
            for path in (layout.rounds_summary(chain), layout.rounds_figure(chain))]


def report_pages(config: dict) -> list[str]:
    """Every HTML page of the report."""
    outputs = [pages.page(name) for name in config["tables"]]
    if method_check_outputs(config):
        outputs.append(pages.page(pages.METHOD_CHECK))
    if pseudopair_stats_outputs(config):
        outputs.append(pages.page(pages.PSEUDOPAIR_STATS))
    return outputs + [pages.page(pages.RESULTS)]


def all_outputs(config: dict) -> list[str]:
    """Everything rule ``all`` builds."""
    return [*tables(config), *table_figures(config), *parameters_figures(config),
            layout.tables_markdown(), *method_check_outputs(config), layout.training_curves(),
            *pseudopair_outputs(config), *rounds_outputs(config), *report_pages(config)]


# ----------------------------------------------------------------------------------------------
# `snakemake --report` after a partial run: what exists


def building_report(workflow: Any) -> bool:
    """Whether Snakemake is building the DAG for ``snakemake --report`` (its
    ``Workflow.create_report`` is on the call stack: Snakemake sets no flag before it builds the
    DAG), in which case the report shows what exists while a run plans everything."""
    code = getattr(getattr(type(workflow), "create_report", None), "__code__", None)
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def presence(workflow: Any) -> Callable[[Iterable[str]], list[str]]:
    """``present(paths)``: the paths as they are, or for ``snakemake --report`` those that exist
    (Snakemake refuses a report() output that does not exist, so a report after
    ``snakemake results/table5.csv`` shows what is there)."""
    def present(paths: Iterable[str]) -> list[str]:
        paths = list(paths)
        return [path for path in paths if Path(path).exists()] if building_report(workflow) else paths

    return present


# ----------------------------------------------------------------------------------------------
# The pages


def note(config: dict) -> str:
    """The line under each page's title: where this run's numbers come from."""
    seeds = config["seeds"]
    runs = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    if config["data"]["source"] == "world":
        return (f"Demo world (synthetic data), {runs}: the numbers show the machinery and how the "
                "methods compare inside one small world; they are not comparable to the paper's.")
    return f"Real data (Multi30K, COCO), {runs}."


def ours_label(config: dict) -> str:
    """Our numbers' name in the effect charts: which world they come from."""
    return "ours (demo world)" if config["data"]["source"] == "world" else "ours (real data)"


def page_name(config: dict, name: str) -> tuple[str, str]:
    """(short name, what it shows) of a table or page for the report's lists: its title split at
    the first ": " (Table 1, English M30K test 2016, aligned setting)."""
    titles = {
        pages.RESULTS: "All results: every table with its effect chart, the checks and figures",
        pages.METHOD_CHECK: pages.METHOD_CHECK_TITLE,
        pages.PSEUDOPAIR_STATS: pages.PSEUDOPAIR_STATS_TITLE,
    }
    title = titles.get(name) or config["tables"].get(name, {}).get("title") or name
    short, _, about = title.partition(": ")
    return short, about


def labels(config: dict, name: str | Callable[[Any], str]) -> Callable[[Any], dict[str, str]]:
    """The label a result has in the report's lists (a ``report(labels=...)`` function), shown
    there instead of the file's path: the short name of a table or page (:func:`page_name`) or
    ``name`` itself. ``name``: a table or page name, or a function of the wildcards giving one."""
    pick = name if callable(name) else (lambda wildcards: name)
    return lambda wildcards: {"name": page_name(config, pick(wildcards))[0]}


def table_page_inputs(config: dict, table: str) -> dict[str, Any]:
    """A table's page: its CSV and the metrics of every row's model and seed (the per-seed
    differences of its effect chart)."""
    return {"table": layout.table(table), "metrics": effects.page_inputs(config, table)}


def table_page_specs(config: dict, table: str) -> dict[str, Any]:
    """One table's page spec (its config entry, row sources, seeds), keyed by its name."""
    return {table: effects.page_spec(config, table)}


def figures(config: dict) -> list[tuple[str, str]]:
    """(caption, path) of the figures on the results page: training curves, Figure 1, the tables
    drawn as bars, paper 002's Figure 3."""
    shown = [(pages.TRAINING_CURVES_CAPTION, layout.training_curves())]
    if config.get("pseudopair_stats", {}).get("figure"):
        shown.append((pages.FIGURE1_CAPTION, layout.pseudopair_figure("png")))
    for name, spec in config["tables"].items():
        if spec.get("figure"):  # "heading — caption"
            caption = "bars: ours (mean ± sd over seeds), the paper's number as a tick where known"
            shown.append((f"{spec['title']} — {caption}", layout.table_figure(name)))
    for name, table in declared_parameters_figures(config).items():
        title = config["tables"][table]["parameters_figure"].get("title", name)
        caption = "mR (mean ± sd over seeds) against trainable parameters"
        shown.append((f"{title} — {caption}", layout.parameters_figure(name)))
    return shown


def natural(path: str) -> list:
    """Sort key: table1 … table7 before table10, whatever order layered config files left."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def results_inputs(config: dict, present: Callable[[Iterable[str]], list[str]]) -> dict[str, Any]:
    """The results page's inputs, tables in natural order (for ``snakemake --report``, through
    ``present``: the tables and figures that exist), and the metrics of every table's chart."""
    shown_tables = present(sorted(tables(config), key=natural))
    names = [Path(path).stem for path in shown_tables]
    return {
        "tables": shown_tables,
        "metrics": sorted({path for name in names for path in effects.page_inputs(config, name)}),
        "method_check": present(method_check_outputs(config)),
        "stats": present(pseudopair_stats_outputs(config)),
        "figures": present(path for _, path in figures(config)),
    }


def results_specs(config: dict, table_paths: Iterable[str]) -> dict[str, Any]:
    """The page spec of every table on the results page."""
    return {Path(path).stem: effects.page_spec(config, Path(path).stem) for path in table_paths}


def results_args(config: dict, inputs: Any) -> list[str]:
    """``report-page``'s sections for the results page, as a list (each item quoted in the shell);
    ``inputs``: the job's named inputs (:func:`results_inputs`)."""
    args = [arg for path in inputs.tables for arg in ("--table", path)]
    args += [arg for path in inputs.method_check for arg in ("--csv", pages.METHOD_CHECK_TITLE, path)]
    args += [arg for path in inputs.stats for arg in ("--pseudopair-stats", path)]
    captions = {path: caption for caption, path in figures(config)}
    args += [arg for path in inputs.figures for arg in ("--image", captions[path], path)]
    return args
