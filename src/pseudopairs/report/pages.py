"""Where the report's HTML pages live (:mod:`pseudopairs.report.html` writes them, the rules in
``workflow/rules/tables.smk`` mark them for ``snakemake --report``), and the titles the workflow
gives them. No third-party import: the workflow imports this module when it parses."""

from __future__ import annotations

from pseudopairs.core import layout


RESULTS = "all_results"  # every table, chart, check, statistic and figure on one page
PSEUDOPAIR_STATS = "pseudopair_stats"
METHOD_CHECK = "method_check"

RESULTS_TITLE = "Results: ours against the paper"
PSEUDOPAIR_STATS_TITLE = "§7.2: statistics of the pseudopair sets"
METHOD_CHECK_TITLE = "Method check: the paper's effects in this run"
# Figures: the heading, " — ", then the caption.
TRAINING_CURVES_CAPTION = ("Training curves — validation score (sum of recalls in both directions) "
                           "against updates for every table's models and seeds; the dot marks the "
                           "kept checkpoint")
FIGURE1_CAPTION = ("Figure 1 — COCO images with the German caption each source model's pseudopair "
                   "set transferred to one of their English captions (cf. the paper's Figure 1)")


def page(name: str) -> str:
    """The HTML page ``name`` (a table's name, or one of the names above), under the run's
    results folder (``layout.RESULTS``, read when called: config ``results`` sets it)."""
    return f"{layout.RESULTS}/html/{name}.html"
