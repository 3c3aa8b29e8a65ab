"""The ``rehearsal-summary`` step: ``results/rehearsal.csv`` from the rules' ``benchmark:`` files.

One row per rule that ran (its jobs' summed wall and CPU seconds, the longest job, the largest
peak RSS, MB written), in the order the rules first finished; rules the rehearsal ran on a
fraction of their full-size work (``rehearsal.reduced``) carry the fraction, its note and a
full-size time extrapolated by 1 / fraction; every other row is measured whole. Then one row per
top-level folder of the results with its size on disk, and a total.

Rules Snakemake runs where it runs (``localrules``: on a cluster, the login node) must stay
under ``login_limit_mb`` of peak memory; a rule above it fails the step, naming it.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from pseudopairs import commands
from pseudopairs.core.io import write_text_atomic

log = logging.getLogger(__name__)

COLUMNS = ("step", "jobs", "wall_s", "longest_job_s", "cpu_s", "peak_rss_mb", "written_mb",
           "disk_mb", "login_node", "fraction", "full_size_s", "how", "note")
#: Snakemake's benchmark columns this step reads.
BENCHMARK_COLUMNS = ("s", "max_rss", "io_out", "cpu_time")


def read_benchmark(path: Path) -> dict[str, float]:
    """The first row of a Snakemake benchmark TSV (``s``, ``max_rss`` MB, ``io_out`` MB,
    ``cpu_time`` s); a missing value ("NA", "-") reads as 0."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows:
        raise ValueError(f"{path}: empty benchmark file")
    missing = [c for c in BENCHMARK_COLUMNS if c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: not a Snakemake benchmark file (no column {missing[0]!r})")
    out = {}
    for column in BENCHMARK_COLUMNS:
        try:
            out[column] = float(rows[0][column])
        except ValueError:
            out[column] = 0.0
    return out


def step_rows(benchmarks: Path, *, reduced: Mapping[str, Mapping[str, Any]],
              login_rules: Iterable[str]) -> list[dict[str, Any]]:
    """One row per rule folder of ``benchmarks`` (``{rule}/{job}.tsv``), see the module doc."""
    login = set(login_rules)
    rules: dict[str, dict[str, Any]] = {}
    for path in sorted(benchmarks.rglob("*.tsv")):
        rule = path.relative_to(benchmarks).parts[0]
        if rule == path.name:
            continue  # a file beside the rule folders
        bench = read_benchmark(path)
        row = rules.setdefault(rule, {
            "step": rule, "jobs": 0, "wall_s": 0.0, "longest_job_s": 0.0, "cpu_s": 0.0,
            "peak_rss_mb": 0.0, "written_mb": 0.0, "first_done": path.stat().st_mtime})
        row["jobs"] += 1
        row["wall_s"] += bench["s"]
        row["longest_job_s"] = max(row["longest_job_s"], bench["s"])
        row["cpu_s"] += bench["cpu_time"]
        row["peak_rss_mb"] = max(row["peak_rss_mb"], bench["max_rss"])
        row["written_mb"] += bench["io_out"]
        row["first_done"] = min(row["first_done"], path.stat().st_mtime)
    unknown = sorted(p for p in reduced if not fnmatch.filter(rules, p))
    if unknown:
        raise ValueError(f"rehearsal.reduced names rule(s) with no benchmark file under "
                         f"{benchmarks}: {unknown}")
    out = []
    for row in sorted(rules.values(), key=lambda r: (r.pop("first_done"), r["step"])):
        entry = reduced.get(row["step"]) or next(
            (e for p, e in reduced.items() if fnmatch.fnmatchcase(row["step"], p)), None)
        fraction = float(entry["fraction"]) if entry else 1.0
        how = ("measured" if entry is None else "measured, reduced settings" if fraction == 1
               else f"extrapolated ({fraction:g} of the work measured)")
        row.update(login_node=row["step"] in login, fraction=fraction,
                   full_size_s=row["wall_s"] / fraction, how=how,
                   note=entry["note"] if entry else "", disk_mb="")
        out.append(row)
    return out


def folder_mb(path: Path) -> float:
    """Bytes on disk under ``path`` (files only, links not followed), in MB."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                total += os.stat(full).st_size
    return total / 1e6


def disk_rows(results: Path) -> list[dict[str, Any]]:
    """One row per top-level folder of ``results`` with its size (``disk_mb``)."""
    return [{"step": f"disk: {path.as_posix()}", "disk_mb": folder_mb(path), "how": "measured"}
            for path in sorted(p for p in results.iterdir() if p.is_dir())]


def login_node_errors(rows: Iterable[Mapping[str, Any]], *, limit_mb: float) -> list[str]:
    """A message per login-node rule whose peak RSS exceeds ``limit_mb``."""
    return [f"login-node rule {row['step']!r} peaked at {row['peak_rss_mb']:.0f} MB "
            f"(limit {limit_mb:.0f} MB): make it a cluster job or stream its input"
            for row in rows if row.get("login_node") and row["peak_rss_mb"] > limit_mb]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}" if value >= 1 or value == 0 else f"{value:.3g}"
    return str(value)


def to_csv(rows: list[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: _fmt(row.get(c, "")) for c in COLUMNS})
    return buffer.getvalue()


def summarise(*, benchmarks: Path, results: Path, reduced: Mapping[str, Mapping[str, Any]],
              login_rules: Iterable[str], login_limit_mb: float) -> list[dict[str, Any]]:
    steps = step_rows(benchmarks, reduced=reduced, login_rules=login_rules)
    if not steps:
        raise ValueError(f"{benchmarks}: no benchmark files: run the rehearsal's steps first")
    errors = login_node_errors(steps, limit_mb=login_limit_mb)
    if errors:
        raise ValueError("; ".join(errors))
    total = {"step": "total (steps)", "jobs": sum(r["jobs"] for r in steps),
             "wall_s": sum(r["wall_s"] for r in steps), "cpu_s": sum(r["cpu_s"] for r in steps),
             "full_size_s": sum(r["full_size_s"] for r in steps),
             "how": "sum of the rows above (job time, not the run's elapsed time)"}
    return steps + [total] + disk_rows(results)


def _cli(args: argparse.Namespace) -> int:
    rows = summarise(benchmarks=Path(args.benchmarks), results=Path(args.results),
                     reduced=args.settings.get("reduced", {}),
                     login_rules=[r for r in args.login_rules.split(",") if r],
                     login_limit_mb=args.login_limit_mb)
    text = to_csv(rows)
    write_text_atomic(Path(args.output), text)
    print(text, end="")
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "rehearsal-summary", _cli)
    commands.add_json(p, "--settings", "the config's rehearsal section (its reduced steps)")
    p.add_argument("--login-rules", default="", help="comma-separated local rules (login node)")
    p.add_argument("--login-limit-mb", type=float, default=2048.0, help="peak RSS allowed to a local rule")
    for option, what in (("--benchmarks", "the rules' benchmark folder (results/benchmarks)"),
                         ("--results", "results root whose folders' sizes are listed"),
                         ("--output", "rehearsal.csv to write")):
        p.add_argument(option, required=True, help=what)
