"""Benchmark: pseudopair mining (nearest_neighbours) vs the bare GEMMs the job needs, vs faiss,
on both candidate paths (float32 and bf16), and each hubness-aware criterion vs cosine mining —
side by side in one run.

Data: random float32 unit vectors, ``--queries`` × ``--database`` × ``--dim`` (paper scale is
566,113 COCO captions × 145,000 Multi30K German captions × 1024). On a CPU the full job is a
~170 TFLOP score matrix (tens of minutes on 2 cores), so the default runs a measured fraction of
the queries (every database row) and prints the **extrapolation** to all queries, linear in the
number of queries — labelled as such.

Contenders, timed in the same run on the same data (``--repeats`` times, interleaved; minima
reported — the machine may be shared):
* **bare GEMMs** — the float32 score matrix the job needs, nothing else: query blocks × database
  chunks into a preallocated buffer, in our tiling and in a larger one; the faster is the floor
  any exact float32 miner pays. Goal for the float32 path: ours ≤ 1.15× that floor.
* **ours, float32 path** — ``nearest_neighbours(criterion="cosine")`` with the bf16 candidate
  pass forced off (``bf16_mode(False)``): the path of CPUs without a bfloat16 unit.
* **ours, bf16 path** — the same with the bf16 candidate GEMM forced on (only where the CPU has a
  bfloat16 dot-product unit, ``avx512_bf16``/``amx_bf16``; ``--paths`` overrides): candidates in a
  wider proven window, every one rescored in float64 — the same indices and scores (checked).
  Goal: ≥ 1.5× faster than faiss.
* **faiss** ``IndexFlatIP.search(k=1)`` on the same (already normalised) float32 data, CPU only
  (faiss-cpu, the ``bench`` extra). Argmax agreement is checked: a disagreement must be a float32
  near-tie (printed with the exact cosine difference), where faiss may pick either.
* each registered **criterion** (pseudopairs.mining.criteria) relative to cosine mining, on the
  automatic path; ``sinkhorn`` runs ``--sinkhorn-iterations`` iterations (each a float32 pass) and
  the default count is extrapolated from the measured cost per iteration.

``--device cuda`` times the same on a GPU (torch; default: the full job; the rows normalised and
the candidates rescored on the device, :mod:`pseudopairs.similarity.device_rows`; ``--tf32`` lets torch
use TF32 tensor cores for the float32 path, which the error bound then accounts for; the bf16 path
uses bf16 tensor cores with a float32 output). Goals there: ≤ 1.5× the bare GEMMs and ≤ 3 s for
the full job on an H100 — not measurable on a machine without a GPU. ``--profile`` shows where
the rest of the time goes; ``--calibration FILE`` records the job's time for the SLURM requests.

Run: ``.venv/bin/python benchmarks/mining.py [--queries 16384] [--database 145000] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import os
import time

FULL_QUERIES = 566_113  # COCO Karpathy train + restval captions (113,287 images × ~5)
FULL_DATABASE = 145_000  # Multi30K task2 German training captions (29,000 images × 5)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--queries", type=int, default=None, help="default: 16384 on cpu, the full 566,113 on cuda")
    parser.add_argument("--database", type=int, default=FULL_DATABASE)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of the main contenders (minimum)")
    parser.add_argument("--paths", default="auto",
                        help="candidate paths to time: 'auto' (float32, and bf16 where the CPU has a "
                             "bfloat16 unit), or a comma-separated subset of float32,bf16")
    parser.add_argument("--criteria", default=None,
                        help="criteria to time against cosine, comma-separated ('' for none; default: "
                             "every registered criterion, pseudopairs.mining.criteria)")
    parser.add_argument("--sinkhorn-iterations", type=int, default=3,
                        help="iterations timed for sinkhorn (its default count is extrapolated)")
    parser.add_argument("--no-faiss", action="store_true")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare float32 GEMMs")
    parser.add_argument("--tf32", action="store_true", help="cuda: allow TF32 matmuls (bounded; wider windows)")
    parser.add_argument("--threads", type=int, default=0, help="BLAS/OpenMP threads (0 = library defaults)")
    parser.add_argument("--profile", action="store_true",
                        help="after the timings, profile one search on the automatic path (cProfile: "
                             "where the time beyond the GEMMs goes, host phases and device waits)")
    parser.add_argument("--calibration", default=None,
                        help="cuda: record the full job's time and each criterion's factor in this "
                             "calibration file (pseudopairs.workflow.calibration; rates.mine_s, mine_criterion_factor)")
    return parser.parse_args()


def unit_rows(rng, rows: int, dim: int):
    import numpy as np

    out = np.empty((rows, dim), dtype=np.float32)
    for s in range(0, rows, 8192):
        x = rng.standard_normal((min(rows, s + 8192) - s, dim), dtype=np.float32)
        out[s: s + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


class Timer:
    def __init__(self, cuda: bool):
        self.cuda = cuda

    def __call__(self, fn):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = fn()
        if self.cuda:
            torch.cuda.synchronize()
        return result, time.perf_counter() - t0


def bare_gemm(queries, database, rows: int, cols: int, *, cuda: bool, device: str) -> None:
    """The float32 score matrix in blocks into one preallocated buffer, nothing else."""
    import numpy as np
    import torch

    n, m = len(queries), len(database)
    if cuda:
        out = torch.empty((rows, cols), dtype=torch.float32, device=queries.device)
        for r in range(0, n, rows):
            for c in range(0, m, cols):
                qb, db = queries[r: r + rows], database[c: c + cols]
                torch.matmul(qb, db.T, out=out[: len(qb), : len(db)])
        return
    out = np.empty((rows, cols), dtype=np.float32)
    for r in range(0, n, rows):
        for c in range(0, m, cols):
            qb, db = queries[r: r + rows], database[c: c + cols]
            np.matmul(qb, db.T, out=out[: len(qb), : len(db)])


def candidate_paths(spec: str, cuda: bool) -> list[str]:
    from pseudopairs.similarity.lowp import cpu_flags

    if spec != "auto":
        return [p for p in spec.split(",") if p]
    if cuda:
        return ["float32", "bf16"]
    return ["float32"] + (["bf16"] if {"avx512_bf16", "amx_bf16"} & cpu_flags() else [])


def time_main(args, queries, database, timer, *, cuda: bool, flops: float) -> dict:
    """Bare GEMMs, ours on each path and faiss, interleaved ``--repeats`` times; minima."""
    import torch

    from pseudopairs.mining import nearest_neighbours
    from pseudopairs.mining.search import CUDA_BLOCK_ELEMENTS, CUDA_BLOCK_ROWS
    from pseudopairs.similarity import DEFAULT_BLOCK_ELEMENTS, bf16_mode, block_shape

    n, m = len(queries), len(database)
    contenders = {}
    if not args.no_bare:
        if cuda:
            q_dev, d_dev = torch.from_numpy(queries).to(args.device), torch.from_numpy(database).to(args.device)
            tilings = [block_shape(n, m, rows=min(n, CUDA_BLOCK_ROWS), budget=CUDA_BLOCK_ELEMENTS),
                       block_shape(n, m, rows=min(n, 16384), budget=CUDA_BLOCK_ELEMENTS * 2)]
        else:
            q_dev, d_dev = queries, database
            tilings = [block_shape(n, m, budget=DEFAULT_BLOCK_ELEMENTS),
                       block_shape(n, m, rows=min(n, 4096), budget=DEFAULT_BLOCK_ELEMENTS * 4)]
        bare_gemm(q_dev[:256], d_dev[:4096], 256, 4096, cuda=cuda, device=args.device)  # warm-up
        for rows, cols in tilings:
            contenders[f"bare GEMM {rows} × {cols}"] = (lambda r=rows, c=cols:
                                                        bare_gemm(q_dev, d_dev, r, c, cuda=cuda, device=args.device))
    for path in candidate_paths(args.paths, cuda):
        def ours(enabled=(path == "bf16")):
            with bf16_mode(enabled):
                return nearest_neighbours(queries, database, device=args.device)
        contenders[f"ours ({path} path)"] = ours
    index = None
    if not args.no_faiss and not cuda:
        try:
            import faiss
        except ImportError:
            print("faiss: not installed (pip install '.[bench]')")
        else:
            index = faiss.IndexFlatIP(args.dim)
            index.add(database)
            contenders["faiss IndexFlatIP"] = lambda: index.search(queries, 1)
    times = {name: [] for name in contenders}
    results = {}
    for _ in range(args.repeats):
        for name, fn in contenders.items():
            result, seconds = timer(fn)
            times[name].append(seconds)
            results[name] = result
    best = {name: min(ts) for name, ts in times.items()}
    for name, seconds in best.items():
        print(f"{name:<34} {seconds:8.2f} s  ({flops / seconds / 1e9:6.0f} GFLOP/s-equivalent; "
              f"runs: {', '.join(f'{t:.2f}' for t in times[name])})")
    return {"best": best, "results": results, "faiss": index is not None}


def report_main(timed: dict, *, n: int, dim: int) -> None:
    """Ratios and goals, plus the agreement checks (paths, faiss)."""
    import numpy as np

    best, results = timed["best"], timed["results"]
    bare = [v for k, v in best.items() if k.startswith("bare")]
    floor = min(bare) if bare else None
    ours = {k: v for k, v in best.items() if k.startswith("ours")}
    names = list(ours)
    if len(names) == 2:
        (i0, s0), (i1, s1) = results[names[0]], results[names[1]]
        same = np.array_equal(i0, i1) and np.array_equal(s0, s1)
        print(f"the two paths give the same indices and scores to the last bit: {same}")
    for name, seconds in ours.items():
        line = f"{name}: "
        if floor:
            line += f"{seconds / floor:.3f}× the fastest bare float32 GEMM"
            line += " (goal ≤ 1.15×)" if "float32" in name else ""
        if timed["faiss"]:
            t_faiss = best["faiss IndexFlatIP"]
            line += f"; {t_faiss / seconds:.2f}× faster than faiss" + (" (goal ≥ 1.5×)" if "bf16" in name else "")
        print(line)
    if timed["faiss"]:
        t_faiss = best["faiss IndexFlatIP"]
        if floor:
            print(f"faiss: {t_faiss / floor:.3f}× the fastest bare float32 GEMM")
        idx = results[names[-1]][0]
        f_idx = results["faiss IndexFlatIP"][1][:, 0].astype(np.int64)
        agreement(idx, f_idx, timed, n=n, dim=dim)


def agreement(idx, f_idx, timed, *, n: int, dim: int) -> None:
    import numpy as np

    from pseudopairs.similarity import cosine64_pairs, cosine_error_bound
    from pseudopairs.similarity import unit_rows as prepare

    bad = np.flatnonzero(f_idx != idx)
    print(f"argmax agreement with faiss: {n - bad.size}/{n} queries")
    if bad.size:
        queries, database = timed["data"]
        qr, dr = prepare(queries[bad], name="q"), prepare(database, name="d")
        ours_cos = cosine64_pairs(qr, dr, a_rows=np.arange(bad.size), b_rows=idx[bad])
        theirs = cosine64_pairs(qr, dr, a_rows=np.arange(bad.size), b_rows=f_idx[bad])
        gap = ours_cos - theirs
        bound = 2 * cosine_error_bound(dim)
        print(f"  exact cosine of ours − faiss's pick at the disagreements: min {gap.min():.3g}, "
              f"max {gap.max():.3g} (all ≥ 0 and ≤ the float32 window {bound:.3g}: "
              f"{bool((gap >= 0).all() and (gap <= bound).all())})")


def time_criteria(args, queries, database, timer, t_cosine: float) -> dict:
    from pseudopairs.mining import nearest_neighbours
    from pseudopairs.mining.criteria import CRITERIA

    names = CRITERIA.names() if args.criteria is None else args.criteria.split(",")
    t_crit = {}
    for criterion in [c for c in names if c and c != "cosine"]:
        if criterion == "sinkhorn":
            runs = {}
            for its in (1, args.sinkhorn_iterations):
                _, runs[its] = timer(lambda i=its: nearest_neighbours(
                    queries, database, criterion="sinkhorn", iterations=i, tol=0.0, device=args.device))
            per = (runs[args.sinkhorn_iterations] - runs[1]) / max(1, args.sinkhorn_iterations - 1)
            from pseudopairs.mining.criteria.sinkhorn import DEFAULT_ITERATIONS
            seconds = runs[1] + per * (DEFAULT_ITERATIONS - 1)
            print(f"sinkhorn: {runs[1]:.2f} s with 1 iteration, {per:.2f} s per further iteration (a float32 "
                  f"pass) → EXTRAPOLATED {seconds:.1f} s for the default {DEFAULT_ITERATIONS} "
                  f"= {seconds / t_cosine:.1f}× cosine mining (tol may stop it earlier)")
        else:
            _, seconds = timer(lambda c=criterion: nearest_neighbours(queries, database, criterion=c, device=args.device))
            print(f"{criterion}: {seconds:.2f} s = {seconds / t_cosine:.2f}× cosine mining")
        t_crit[criterion] = seconds
    return t_crit


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    import numpy as np
    import torch

    from pseudopairs.similarity import bf16_enabled

    cuda = args.device.startswith("cuda")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if cuda and args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    n = args.queries or (FULL_QUERIES if cuda else 16384)
    m, dim = args.database, args.dim
    rng = np.random.default_rng(args.seed)
    queries, database = unit_rows(rng, n, dim), unit_rows(rng, m, dim)
    flops = 2.0 * n * m * dim
    engine = torch.device(args.device) if cuda else "cpu"
    print(f"data: {n} queries × {m} database rows × d={dim} (random unit float32); device {args.device}; "
          f"threads {torch.get_num_threads()}; {flops / 1e12:.2f} TFLOP per score matrix; "
          f"automatic candidate path here: {'bf16' if bf16_enabled(engine) else 'float32'}; "
          f"repeats {args.repeats} (minimum reported; this machine may be shared)")
    timer = Timer(cuda)
    timed = time_main(args, queries, database, timer, cuda=cuda, flops=flops)
    timed["data"] = (queries, database)
    report_main(timed, n=n, dim=dim)
    ours = {k: v for k, v in timed["best"].items() if k.startswith("ours")}
    t_auto = ours.get(f"ours ({'bf16' if bf16_enabled(engine) else 'float32'} path)", min(ours.values()))
    t_crit = time_criteria(args, queries, database, timer, t_auto)
    if n != FULL_QUERIES or m != FULL_DATABASE:
        scale = (FULL_QUERIES / n) * (FULL_DATABASE / m)
        print(f"EXTRAPOLATED to the full job ({FULL_QUERIES} × {FULL_DATABASE}; ×{scale:.2f}, linear in the "
              f"score-matrix size, not measured): "
              + ", ".join(f"{k} {v * scale / 60:.1f} min" for k, v in timed["best"].items())
              + "".join(f", {c} {t * scale / 60:.1f} min" for c, t in t_crit.items()))
    else:
        bare = min([v for k, v in timed["best"].items() if k.startswith("bare")], default=None)
        print(f"full job measured: ours {t_auto:.2f} s" + (f" = {t_auto / bare:.2f}× its bare GEMMs "
                                                             f"(goal ≤ 1.5×)" if bare else "")
              + (" (goal ≤ 3 s on an H100)" if cuda else ""))
        if cuda and args.calibration:
            from pseudopairs.workflow.calibration import record

            record(args.calibration, gpu_model=torch.cuda.get_device_name(),
                   rates={"mine_s": round(t_auto, 2),
                          "mine_criterion_factor": {c: round(t / t_auto, 2) for c, t in t_crit.items()}},
                   note="benchmarks/mining.py, the full job")
    if args.profile:
        import cProfile
        import pstats

        from pseudopairs.mining import nearest_neighbours

        profile = cProfile.Profile()
        timer(lambda: profile.runcall(nearest_neighbours, queries, database, device=args.device))
        print("== profile of one search (cumulative time, top 25) ==")
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
