"""Open the Snakemake report in headless Chromium and save screenshots, to check what a reader sees.

    .venv/bin/snakemake --cores 2 --report results/report.html     # after a complete run
    .venv/bin/python benchmarks/report_screenshot.py results/report.html --out results/report-screens

Needs Debian's chromium (`apt-get install -y chromium`). Chromium is driven over the DevTools
pipe (pseudopairs.report.browser): it writes `report.png` (the start page: workflow description
and rule graph), then opens the Tables category and clicks the view button of each result given
with --result (default: the all-results page, results/html/all_results.html), as a reader would,
and writes `result-N.png` with that page shown in the report's frame. It prints what the frame
holds (tables, images, text) and fails when the report has no result categories or a shown page
has no table, so a blank report is caught. `--docs` also copies the first result's screenshot to
docs/report-screenshot.png.

Without a run, `--synthetic DIR` makes one from tests/report_fixture.py's synthetic metrics (every
model and seed of the shipped demo configuration's tables) in DIR: the workflow's own rules build
each table, its page and the method check there (`--allowed-rules`: the metrics count as given),
the all-results page is written by `report-page` from what exists, and `snakemake --report` reports
what exists; then the screenshots are taken as above.

    .venv/bin/python benchmarks/report_screenshot.py --synthetic /tmp/synthetic --docs
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from pseudopairs.report import browser

DOCS = REPO / "docs" / "report-screenshot.png"
PAGES = "Charts and tables (pages)"  # the report's subcategory of the HTML pages (common.smk)


def synthetic_run(root: Path) -> Path:
    """A report of synthetic metrics in ``root`` (module docstring); returns the report's path."""
    import contextlib
    import json
    import os
    import subprocess

    sys.path.insert(0, str(REPO / "tests"))
    from report_fixture import shipped_config, write_metrics

    from pseudopairs.report import html as report_html
    from pseudopairs.report import pages
    from pseudopairs.report.effects import page_spec

    config = shipped_config()
    root.mkdir(parents=True, exist_ok=True)
    write_metrics(root, config)
    snakemake = [str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"), "-d", str(root)]
    targets = [pages.page(name) for name in config["tables"]] + [pages.page(pages.METHOD_CHECK)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run([*snakemake, "--cores", "2", "--allowed-rules", "table", "report_table", "method_check",
                    "report_method_check", "--", *targets], check=True, env=env)
    note = "Synthetic metrics (tests/report_fixture.py), seeds 1, 2, 3: a picture of the report, not results."
    specs = {name: page_spec(config, name) for name in config["tables"]}
    with contextlib.chdir(root):  # the pages read the metrics where the workflow put them
        text = report_html.build_page(
            title=pages.RESULTS_TITLE, specs=specs, tables=[f"results/{name}.csv" for name in config["tables"]],
            csvs=[(pages.METHOD_CHECK_TITLE, "results/method_check.csv")], pseudopair_stats=None, images=[],
            ours_label="ours (demo world)", note=note)
        (root / pages.page(pages.RESULTS)).write_text(text, encoding="utf-8")
        for name in config["tables"]:  # each table's page again, saying the metrics are synthetic
            text = report_html.build_page(title=None, specs=specs, tables=[f"results/{name}.csv"], csvs=[],
                                          pseudopair_stats=None, images=[], ours_label="ours (demo world)", note=note)
            (root / pages.page(name)).write_text(text, encoding="utf-8")
    subprocess.run([*snakemake, "--report", str(root / "report.html")], check=True, env=env)
    print(json.dumps({"synthetic run": str(root)}))
    return root / "report.html"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, nargs="?", help="the report (default with --synthetic: DIR/report.html)")
    parser.add_argument("--synthetic", type=Path, default=None, metavar="DIR",
                        help="make a synthetic run in DIR and report it (module docstring)")
    parser.add_argument("--out", type=Path, default=Path("results/report-screens"))
    parser.add_argument("--result", action="append", default=[],
                        help="a result to open, by its name in the report's list (default: All results)")
    parser.add_argument("--category", default="Tables", help="the category the results are in")
    parser.add_argument("--subcategory", default=PAGES, help="the subcategory the results are in")
    parser.add_argument("--size", default="1400,1000", help="window width,height")
    parser.add_argument("--docs", action="store_true", help=f"copy the first result's screenshot to {DOCS}")
    args = parser.parse_args()
    if browser.find_chromium() is None:
        print("headless Chromium not found: apt-get install -y chromium", file=sys.stderr)
        return 2
    if args.synthetic is not None and args.report is None:
        args.report = synthetic_run(args.synthetic.resolve())
    if args.report is None:
        parser.error("give the report, or --synthetic DIR")
    if not args.report.is_file():
        print(f"{args.report}: no such report (snakemake --report {args.report})", file=sys.stderr)
        return 2
    width, height = (int(v) for v in args.size.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    start = browser.view_report(args.report, screenshot=args.out / "report.png", width=width, height=height)
    print(f"start page -> {args.out / 'report.png'}; categories: {', '.join(sorted(start.categories))}")
    failures = [] if start.categories else ["the report has no result categories"]
    for k, result in enumerate(args.result or ["All results"], start=1):
        shot = args.out / f"result-{k}.png"
        view = browser.view_report(args.report, result, screenshot=shot, width=width, height=height,
                                   category=args.category, subcategory=args.subcategory or None)
        print(f"{result} -> {shot}: {view.frame_tables} tables, {view.frame_images} images, "
              f"{len(view.frame_text)} characters of text")
        if not view.frame_tables:
            failures.append(f"{result}: the frame shows no table")
        if not browser.non_blank(shot, region=(0.3, 0.0, 1.0, 1.0)):
            failures.append(f"{result}: the screenshot's frame is blank")
        if k == 1 and args.docs:
            shutil.copyfile(shot, DOCS)
            print(f"copied to {DOCS}")
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
