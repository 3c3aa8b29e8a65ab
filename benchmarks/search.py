"""Benchmark: exact top-10 search over an index (pseudopairs.search.query.ExactSearch, the mining
engine's blocked GEMM + float64 rescoring) at 10K, 100K and 1M images × 1,024 dimensions, vs the
bare GEMM of the same batch over the index and vs faiss ``IndexFlatIP`` on the same batches.

Data: random float32 unit vectors (the index) and random unit queries (seeded). Per size, in a
subprocess of its own (so its peak memory is its own):

* **one query's latency**: the median of single-query searches (k = 10);
* **32 concurrent clients through the dynamic batcher** (:class:`pseudopairs.search.service.Batcher`,
  the service's own, fed by 32 threads that each submit a query and wait for its answer, again
  and again): queries per second and the mean batch it formed;
* **the GEMM floor**: one bare GEMM of a batch of that many queries over the whole index, into a
  preallocated buffer, nothing else — float32 (numpy/OpenBLAS: what any exact float32 search
  pays), and the engine's own bf16 kernel over its bf16 rows where the CPU has a bfloat16 unit;
  queries per second = batch / time;
* **faiss** ``IndexFlatIP.search(k=10)`` on the same batches (faiss-cpu, the ``bench`` extra),
  with its top-10 compared with ours;
* **the engine alone** on the same batch (``ExactSearch.search`` called again and again, no
  clients, no batcher): what the batcher's threads and hand-offs cost on top;
* **peak memory** (VmHWM) of the process with the engine (the index rows, the candidate GEMM's
  copy, the blocks; the data alone beside it), and what faiss's index adds (VmRSS before/after ``add``).

Throughputs are sustained rates (a contender called again and again for a few seconds), measured
in ``--rounds`` interleaved rounds, the best round of each reported: the cores may be shared.

Run: ``.venv/bin/python benchmarks/search.py [--sizes 10000 100000 1000000] [--seconds 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

DIM = 1024
K = 10
CLIENTS = 32
REPEATS = 5


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, 65536):
        block = rng.standard_normal((min(n, s + 65536) - s, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[s: s + block.shape[0]] = block
    return out


def peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


class VectorQueries:
    """The model interface the batcher calls, over precomputed query vectors: the text ``"17"``
    is query row 17 (a lookup: the benchmark times the search, not an encoder)."""

    languages = ("en",)

    def __init__(self, queries: np.ndarray):
        self.queries = queries
        self.dim = queries.shape[1]

    def encode_texts(self, texts, *, lang, batch_size=256):
        return self.queries[[int(t) for t in texts]]


def through_batcher(engine, queries: np.ndarray, seconds: float) -> tuple[float, float, list[float]]:
    """(queries/s, mean batch, latencies) of 32 client threads for ``seconds``."""
    from types import SimpleNamespace

    from pseudopairs.search.service import Batcher, Job

    index = SimpleNamespace(images=lambda: engine, ids=[str(i) for i in range(engine.size)],
                            sources=[""] * engine.size)
    batcher = Batcher(index, VectorQueries(queries))
    stop = time.perf_counter() + seconds
    latencies: list[float] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        i = c
        while time.perf_counter() < stop:
            t = time.perf_counter()
            batcher.submit(Job("text", K, text=str(i % len(queries)), lang="en")).result()
            with lock:
                latencies.append(time.perf_counter() - t)
            i += CLIENTS

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    batches, done = batcher.batches, batcher.queries
    batcher.close()
    return done / elapsed, done / max(1, batches), latencies


def in_thread(fn):
    """``fn()`` run on a thread of its own, as the service's batcher runs every search (torch's
    CPU kernels then use that thread; on shared cores this is also their fastest setting)."""
    box = {}

    def run() -> None:
        box["value"] = fn()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return box["value"]


def sustained(fn, batch: int, seconds: float) -> float:
    """Queries per second of ``fn`` (one batch of ``batch`` queries) called again and again, on a
    thread of its own (:func:`in_thread`)."""
    def loop() -> float:
        fn()
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            fn()
            done += batch
        return done / (time.perf_counter() - started)

    return in_thread(loop)


def one_size(n: int, seconds: float, rounds: int) -> dict:
    import faiss
    import torch

    from pseudopairs.search.query import ExactSearch
    from pseudopairs.similarity import bf16_enabled, gemm_bf16, to_bf16
    from pseudopairs.similarity.lowp import Scratch

    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    db = unit_rows(n, DIM, seed=1)
    queries = unit_rows(4096, DIM, seed=2)
    base = peak_mb()
    reset_peak()
    t = time.perf_counter()
    engine = ExactSearch(db)
    prepare = time.perf_counter() - t
    def latencies_of_one() -> list[float]:
        for i in range(2):  # warm up
            engine.search(queries[i: i + 1], K)
        lat = []
        for i in range(5 if n >= 1_000_000 else 20):
            t = time.perf_counter()
            engine.search(queries[i: i + 1], K)
            lat.append(time.perf_counter() - t)
        return lat

    lat = in_thread(latencies_of_one)
    qps, batch, latencies = through_batcher(engine, queries, seconds)
    ours_peak = peak_mb()
    b = max(1, round(batch))
    qb = queries[:b]
    out = np.empty((b, n), np.float32)
    q16, scratch = to_bf16(qb), Scratch()
    before = rss_mb()
    index = faiss.IndexFlatIP(DIM)
    index.add(db)
    faiss_mb = rss_mb() - before
    ours_rows, _ = engine.search(qb, K)
    _, faiss_rows = index.search(qb, K)
    agree = float(np.mean([len(set(a) & set(f)) / K for a, f in zip(ours_rows, faiss_rows)]))
    best = {"batcher": qps, "engine": 0.0, "gemm32": 0.0, "gemm16": 0.0, "faiss": 0.0}
    for r in range(rounds):  # interleaved, best of the rounds each (the cores are shared)
        if r:
            best["batcher"] = max(best["batcher"], through_batcher(engine, queries, seconds)[0])
        best["engine"] = max(best["engine"], sustained(lambda: engine.search(qb, K), b, seconds / 2))
        best["gemm32"] = max(best["gemm32"], sustained(lambda: np.matmul(qb, db.T, out=out), b, seconds / 2))
        if engine.bf16:
            best["gemm16"] = max(best["gemm16"], sustained(
                lambda: gemm_bf16(q16, engine.fast.data, out, scratch=scratch), b, seconds / 2))
        for omp in sorted({threads, 1}):  # faiss' OpenMP threads: all cores, or one (shared cores)
            faiss.omp_set_num_threads(omp)
            for threshold in (20, 1):  # faiss' default (BLAS from 20 queries), and BLAS for any batch
                faiss.cvar.distance_compute_blas_threshold = threshold
                best["faiss"] = max(best["faiss"], sustained(lambda: index.search(qb, K), b, seconds / 4))
    return {"n": n, "dim": DIM, "path": "bf16" if engine.bf16 else "float32",
            "bf16_enabled": bool(bf16_enabled("cpu")), "prepare_s": prepare,
            "one_query_ms": 1000 * statistics.median(lat), "batcher_qps": best["batcher"], "mean_batch": batch,
            "batcher_p50_ms": 1000 * float(np.percentile(latencies, 50)),
            "batcher_p99_ms": 1000 * float(np.percentile(latencies, 99)),
            "gemm32_qps": best["gemm32"], "gemm_bf16_qps": best["gemm16"] or None, "faiss_qps": best["faiss"],
            "top10_agreement_with_faiss": agree, "data_mb": db.nbytes / 2**20, "base_peak_mb": base,
            "ours_peak_mb": ours_peak, "faiss_index_mb": faiss_mb, "engine_qps": best["engine"], "threads": threads,
            "load_avg": os.getloadavg()[0]}


def table(rows: list[dict]) -> str:
    lines = ["| images | one query | 32 clients (batcher) | mean batch | engine alone | bare GEMM f32 | bare GEMM bf16 | "
             "faiss FlatIP | batcher / GEMM f32 | batcher / GEMM bf16 | engine / GEMM bf16 | batcher / faiss | "
             "peak RSS (data) | faiss index adds |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        bf = r["gemm_bf16_qps"]
        bf_qps = f"{bf:,.0f} q/s" if bf else "–"
        bf_ratio = f"{r['batcher_qps'] / bf:.2f}×" if bf else "–"
        engine_ratio = f"{r['engine_qps'] / bf:.2f}×" if bf else "–"
        lines.append(
            f"| {r['n']:,} | {r['one_query_ms']:.1f} ms | {r['batcher_qps']:,.0f} q/s | {r['mean_batch']:.1f} | "
            f"{r['engine_qps']:,.0f} q/s | {r['gemm32_qps']:,.0f} q/s | {bf_qps} | {r['faiss_qps']:,.0f} q/s | "
            f"{r['batcher_qps'] / r['gemm32_qps']:.2f}× | {bf_ratio} | {engine_ratio} | "
            f"{r['batcher_qps'] / r['faiss_qps']:.2f}× | {r['ours_peak_mb'] / 1024:.2f} GiB ({r['data_mb'] / 1024:.2f}) | "
            f"+{r['faiss_index_mb'] / 1024:.2f} GiB |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the 32 clients run per size")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best of each contender")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one_size(args.one, args.seconds, args.rounds)))
        return
    rows = []
    for n in args.sizes:
        done = subprocess.run([sys.executable, __file__, "--one", str(n), "--seconds", str(args.seconds),
                               "--rounds", str(args.rounds)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"size {n}: {done.stderr[-2000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
