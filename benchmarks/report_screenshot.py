"""Open the Snakemake report in headless Chromium and save screenshots, to check what a reader sees.

    .venv/bin/snakemake --cores 2 --report results/report.html     # after a complete run
    .venv/bin/python benchmarks/report_screenshot.py results/report.html --out results/report-screens

Needs Debian's chromium (`apt-get install chromium`). The report is a single self-contained
HTML page (JavaScript); Chromium renders it with its scripts run (--virtual-time-budget) and
writes `report.png` (the start page) and, for each `#fragment` given with --page, one more
PNG. It also prints the text Chromium rendered (--dump-dom) sizes, and fails when the page has
no tables or figures, so a blank report is caught.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=15000"]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("headless Chromium not found: apt-get install chromium")


def screenshot(url: str, out: Path, *, size: str) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
                        f"--screenshot={out}", url], check=True, capture_output=True, timeout=180)


def rendered_dom(url: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                                check=True, capture_output=True, text=True, timeout=180)
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path)
    parser.add_argument("--out", type=Path, default=Path("results/report-screens"))
    parser.add_argument("--page", action="append", default=[], help="URL fragment to capture too")
    parser.add_argument("--size", default="1400,1000")
    args = parser.parse_args()
    if not args.report.is_file():
        print(f"{args.report}: no such report (snakemake --report {args.report})", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    url = args.report.resolve().as_uri()
    dom = rendered_dom(url)
    print(f"rendered DOM: {len(dom)} characters")
    missing = [word for word in ("Table", "Pseudopairs", "Training") if word not in dom]
    screenshot(url, args.out / "report.png", size=args.size)
    print(f"screenshot -> {args.out / 'report.png'}")
    for k, fragment in enumerate(args.page):
        out = args.out / f"report-{k + 1}.png"
        screenshot(f"{url}#{fragment.lstrip('#')}", out, size=args.size)
        print(f"screenshot #{fragment} -> {out}")
    if missing:
        print(f"the rendered report lacks {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
