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
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pseudopairs.report import browser
from pseudopairs.report.pages import RESULTS, page

DOCS = Path(__file__).resolve().parents[1] / "docs" / "report-screenshot.png"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path)
    parser.add_argument("--out", type=Path, default=Path("results/report-screens"))
    parser.add_argument("--result", action="append", default=[],
                        help=f"a result to open, as the report lists it (default: {page(RESULTS)})")
    parser.add_argument("--category", default="Tables", help="the category the results are in")
    parser.add_argument("--size", default="1400,1000", help="window width,height")
    parser.add_argument("--docs", action="store_true", help=f"copy the first result's screenshot to {DOCS}")
    args = parser.parse_args()
    if browser.find_chromium() is None:
        print("headless Chromium not found: apt-get install -y chromium", file=sys.stderr)
        return 2
    if not args.report.is_file():
        print(f"{args.report}: no such report (snakemake --report {args.report})", file=sys.stderr)
        return 2
    width, height = (int(v) for v in args.size.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    start = browser.view_report(args.report, screenshot=args.out / "report.png", width=width, height=height)
    print(f"start page -> {args.out / 'report.png'}; categories: {', '.join(sorted(start.categories))}")
    failures = [] if start.categories else ["the report has no result categories"]
    for k, result in enumerate(args.result or [page(RESULTS)], start=1):
        shot = args.out / f"result-{k}.png"
        view = browser.view_report(args.report, result, screenshot=shot, width=width, height=height,
                                   category=args.category)
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
