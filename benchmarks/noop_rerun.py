"""Stale-step benchmark: how long Snakemake takes to find that nothing needs rerunning.

Run it after a complete run (the default: the demo's results/ in the repository root):

    .venv/bin/python benchmarks/noop_rerun.py                      # targets: everything (rule all)
    .venv/bin/python benchmarks/noop_rerun.py --directory /tmp/run results/table5.csv

It times, in the same run and on the same results, (a) the real no-op rerun
(`snakemake --cores 2 TARGETS`, which must report "Nothing to be done"), (b) a dry run of the same
targets, and (c) the floor of any Snakemake invocation of this workflow, `snakemake --list-rules`
(parsing the Snakefile and validating the config, no DAG). It prints the seconds (median of
--repeats) and the ratios; the goal is a no-op rerun of at most 10 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def snakemake(directory: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    exe = Path(sys.executable).with_name("snakemake")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    start = time.perf_counter()
    result = subprocess.run([str(exe), "-s", str(REPO / "Snakefile"), "-d", str(directory), *args],
                            capture_output=True, text=True, env=env)
    return time.perf_counter() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="targets (default: rule all)")
    parser.add_argument("--directory", type=Path, default=REPO, help="working directory holding results/")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configfile", nargs="*", default=[])
    args = parser.parse_args()
    extra = (["--configfile", *args.configfile] if args.configfile else [])
    if not (args.directory / "results").is_dir():
        print(f"{args.directory}/results does not exist: run the workflow first", file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {"no-op rerun": [], "dry run": [], "parse only (--list-rules)": []}
    for _ in range(args.repeats):
        seconds, result = snakemake(args.directory, "--cores", "2", *args.targets, *extra)
        text = result.stdout + result.stderr
        if result.returncode != 0 or "Nothing to be done" not in text:
            print("the rerun was not a no-op (or failed):\n" + text[-3000:], file=sys.stderr)
            return 1
        times["no-op rerun"].append(seconds)
        times["dry run"].append(snakemake(args.directory, "-n", "--cores", "2", *args.targets, *extra)[0])
        times["parse only (--list-rules)"].append(snakemake(args.directory, "--list-rules", *extra)[0])
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = medians["parse only (--list-rules)"]
    print(f"targets: {' '.join(args.targets) or '(rule all)'}; directory: {args.directory}; "
          f"median of {args.repeats}")
    for name, value in medians.items():
        print(f"  {name:28s} {value:6.2f} s   ratio to parse-only {value / floor:5.2f}")
    verdict = "meets" if medians["no-op rerun"] <= 10 else "MISSES"
    print(f"no-op rerun {medians['no-op rerun']:.2f} s: {verdict} the goal of <= 10 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
