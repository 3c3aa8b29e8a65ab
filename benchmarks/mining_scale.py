"""Benchmark: the mining engine at the size users bring (docs/benchmarks.md) -- memory, time and CPU
of ``nearest_neighbours`` as the queries and the database grow towards 1M x 1M, on synthetic
vectors.

Each size runs in a fresh child process, which

1. builds its synthetic float32 rows (``--data matched``: every query is a random database row
   plus noise, cosine about 0.7 to it -- the clear best match a trained model gives; ``random``:
   i.i.d. Gaussian rows, whose best matches nearly tie -- the engine's worst case for candidates);
2. reads its resident memory (the inputs: ``n x d`` + ``m x d`` float32), resets the kernel's
   peak-RSS mark (``/proc/self/clear_refs``), runs ``nearest_neighbours(criterion)`` once;
3. reports the peak RSS during the search, the engine's own memory above the inputs (peak minus
   the RSS before the call), wall time and CPU time (user + system; CPU / wall = cores busy).

Bounded memory means the engine's own memory grows with n + m (its per-row state and one copy of
the database in the candidate GEMM's precision), never with n x m: the printed ``extra / (n+m)``
stays flat while the score matrix (``n x m x 4`` bytes, printed for scale) grows quadratically.
The time of the exact search is dominated by the n x m x d GEMM; the projection to ``--project``
(default 1M x 1M) scales the largest square size's time by n x m (printed as such, labelled a
projection). ``--sizes`` are ``n`` or ``nxm``.

Run (low priority on a shared machine)::

    nice -n 19 python benchmarks/mining_scale.py --sizes 16384,32768,65536,131072 --dim 1024
    nice -n 19 python benchmarks/mining_scale.py --sizes 1000000x16384,16384x1000000 --dim 1024
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

GIB = 1024**3


def parse_size(text: str) -> tuple[int, int]:
    """``"65536"`` -> (65536, 65536); ``"1000000x16384"`` -> (1000000, 16384); ``1M``/``64k`` ok."""
    def number(part: str) -> int:
        part = part.strip().lower()
        scale = {"k": 1_000, "m": 1_000_000}.get(part[-1:], 1)
        return int(float(part[:-1] if scale > 1 else part) * scale)

    n, _, m = text.partition("x")
    return number(n), number(m or n)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="16384,32768,65536",
                        help="comma-separated sizes, each n (square) or nxm (queries x database)")
    parser.add_argument("--dim", type=int, default=1024, help="vector size (the paper's joint space: 1024)")
    parser.add_argument("--data", choices=("matched", "random"), default="matched")
    parser.add_argument("--criterion", default="cosine")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--project", default="1000000", help="size to project the time to (n or nxm)")
    parser.add_argument("--json", default=None, help="also write the measurements to this file")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # child: run one size
    return parser.parse_args(argv)


# --------------------------------------------------------------------------------------------
# Child: one size


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def synthetic_rows(n: int, m: int, dim: int, *, data: str, seed: int):
    """float32 ``queries`` (n x dim) and ``database`` (m x dim), built block by block."""
    import numpy as np

    rng = np.random.default_rng(seed)
    step = 16384
    database = np.empty((m, dim), dtype=np.float32)
    for s in range(0, m, step):
        database[s: s + step] = rng.standard_normal((min(m, s + step) - s, dim), dtype=np.float32)
    queries = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, step):
        rows = min(n, s + step) - s
        noise = rng.standard_normal((rows, dim), dtype=np.float32)
        if data == "matched":  # a database row plus noise of the same size: cosine ~ 0.7 to it
            noise += database[rng.integers(0, m, size=rows)]
        queries[s: s + rows] = noise
    return queries, database


def run_one(n: int, m: int, args: argparse.Namespace) -> dict:
    from pseudopairs.mining import nearest_neighbours
    from pseudopairs.similarity import bf16_enabled

    warm_q, warm_d = synthetic_rows(64, 4096, args.dim, data=args.data, seed=args.seed + 1)
    nearest_neighbours(warm_q, warm_d, criterion=args.criterion)  # libraries, thread pools
    del warm_q, warm_d
    queries, database = synthetic_rows(n, m, args.dim, data=args.data, seed=args.seed)
    before = _status_kib("VmRSS") * 1024
    peak_reset = _reset_peak()
    usage0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    indices, scores = nearest_neighbours(queries, database, criterion=args.criterion)
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    peak = _status_kib("VmHWM") * 1024
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    return {"n": n, "m": m, "dim": args.dim, "data": args.data, "criterion": args.criterion,
            "inputs_gib": (queries.nbytes + database.nbytes) / GIB, "rss_before_gib": before / GIB,
            "peak_rss_gib": peak / GIB, "peak_is_search_only": peak_reset,
            "extra_gib": (peak - before) / GIB, "score_matrix_gib": n * m * 4 / GIB,
            "wall_s": wall, "cpu_s": cpu, "cores_busy": cpu / wall if wall > 0 else float("nan"),
            "bf16_path_available": bool(bf16_enabled("cpu")),
            "matched": int((indices >= 0).sum()), "mean_score": float(scores.mean())}


# --------------------------------------------------------------------------------------------
# Parent: every size in its own process, the table and the projection


def cpu_description() -> str:
    flags, model = set(), "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    extras = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{model}, {simd}{' (' + ', '.join(extras) + ')' if extras else ''}, {os.cpu_count()} cores"


def memory_fit(rows: list[dict]) -> tuple[float, float] | None:
    """Least-squares ``extra = a + b·(n+m)`` in bytes over the runs (None with fewer than two
    distinct n+m)."""
    import numpy as np

    x = np.array([r["n"] + r["m"] for r in rows], dtype=float)
    y = np.array([r["extra_gib"] * GIB for r in rows], dtype=float)
    if len(set(x.tolist())) < 2:
        return None
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.one:
        n, m = parse_size(args.one)
        print(json.dumps(run_one(n, m, args)))
        return
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    print(f"machine: {cpu_description()}; load average before: {os.getloadavg()[0]:.2f}")
    print(f"data: {args.data}, dim {args.dim}, criterion {args.criterion}; each size in its own process")
    header = (f"{'n':>9} {'m':>9} {'inputs':>8} {'peak RSS':>9} {'extra':>7} {'extra/(n+m)':>12} "
              f"{'n·m·4':>9} {'wall':>9} {'CPU':>9} {'cores':>6}")
    print(header)
    rows = []
    for n, m in sizes:
        child = [sys.executable, __file__, "--one", f"{n}x{m}", "--dim", str(args.dim), "--data", args.data,
                 "--criterion", args.criterion, "--seed", str(args.seed)]
        result = subprocess.run(child, capture_output=True, text=True, env=os.environ)
        if result.returncode != 0:
            print(f"{n:>9} {m:>9}  failed (exit {result.returncode}): {result.stderr.strip()[-400:]}")
            continue
        row = json.loads(result.stdout.strip().splitlines()[-1])
        rows.append(row)
        per_row = row["extra_gib"] * GIB / (n + m)
        print(f"{n:>9} {m:>9} {row['inputs_gib']:7.2f}G {row['peak_rss_gib']:8.2f}G {row['extra_gib']:6.2f}G "
              f"{per_row:9.0f} B/r {row['score_matrix_gib']:8.1f}G {row['wall_s']:8.1f}s "
              f"{row['cpu_s']:8.1f}s {row['cores_busy']:6.2f}", flush=True)
    squares = [r for r in rows if r["n"] == r["m"]] or rows
    if squares:
        pn, pm = parse_size(args.project)
        ref = max(squares, key=lambda r: r["n"] * r["m"])
        scale = (pn * pm) / (ref["n"] * ref["m"])
        print(f"projection (not measured): {pn} x {pm} at dim {args.dim} ~ {ref['wall_s'] * scale / 60:.0f} min "
              f"wall ({ref['cpu_s'] * scale / 3600:.1f} CPU-hours), scaling the {ref['n']} x {ref['m']} run by "
              f"n·m ({scale:.0f}x)")
        fit = memory_fit(rows)
        if fit is not None:
            base, per_row = fit
            print(f"engine memory above the inputs, fitted as a + b·(n+m) over the runs: a = {base / GIB:.2f} GiB, "
                  f"b = {per_row:.0f} bytes per row -> {(base + per_row * (pn + pm)) / GIB:.1f} GiB at "
                  f"{pn} x {pm} (inputs {(pn + pm) * args.dim * 4 / GIB:.1f} GiB; the score matrix would be "
                  f"{pn * pm * 4 / GIB:.0f} GiB)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
