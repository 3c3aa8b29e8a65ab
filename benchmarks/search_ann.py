"""Benchmark: the route for collections too large for exact search in memory — a faiss index
(IVF-Flat, HNSW) built from the same Parquet an index folder holds — and its recall@10 against
the exact search (pseudopairs.search.query.ExactSearch) on the same queries.

Data: ``--images`` random unit vectors × ``--dim`` written as an index folder (the format of
``pseudopairs index``), read back from its Parquet parts (:func:`pseudopairs.search.query.open_index`),
and ``--queries`` random unit queries. Random vectors have no cluster structure, the hardest case
for an approximate index (a trained model's embeddings cluster, and recall at the same settings is
higher); the figures are a floor. Printed per setting: build time, queries per second (batches of
``--batch``), recall@10 = |ANN top-10 ∩ exact top-10| / 10, averaged.

Run: ``.venv/bin/python benchmarks/search_ann.py [--images 100000] [--dim 1024] [--queries 1000]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np


def clustered(n: int, dim: int, *, centers: int, spread: float, rng) -> np.ndarray:
    """Unit vectors around ``centers`` random directions (Gaussian noise of norm ≈ ``spread``
    relative to the centre): the kind of structure embeddings of a collection have."""
    c = rng.standard_normal((centers, dim), dtype=np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    out = c[rng.integers(0, centers, n)] + rng.standard_normal((n, dim), dtype=np.float32) * (spread / np.sqrt(dim))
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / exact.shape[1] for f, e in zip(found, exact)]))


def timed_search(index, queries: np.ndarray, k: int, batch: int) -> tuple[np.ndarray, float]:
    rows = np.empty((len(queries), k), np.int64)
    t = time.perf_counter()
    for s in range(0, len(queries), batch):
        rows[s: s + batch] = index.search(queries[s: s + batch], k)[1]
    return rows, len(queries) / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--data", choices=["random", "clustered"], default="random",
                        help="random unit vectors (no structure: an ANN's worst case), or clustered ones "
                             "(--centers directions, noise of relative norm --spread)")
    parser.add_argument("--centers", type=int, default=2000)
    parser.add_argument("--spread", type=float, default=1.0)
    args = parser.parse_args()

    import faiss

    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from service_load import synthetic_index

    from pseudopairs.search.query import ExactSearch, open_index

    rows = []
    with tempfile.TemporaryDirectory(prefix="search-ann-") as tmp:
        model = SimpleNamespace(dim=args.dim, model_hash="synthetic", folder=tmp, languages=("en",))
        rng = np.random.default_rng(5)
        data = None
        if args.data == "clustered":
            data = clustered(args.images + args.queries, args.dim, centers=args.centers, spread=args.spread, rng=rng)
        synthetic_index(Path(tmp) / "index", model, args.images,
                        vectors=None if data is None else data[: args.images])
        vectors = open_index(Path(tmp) / "index").vectors  # from the Parquet parts
    if data is None:
        queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    else:
        queries = np.ascontiguousarray(data[args.images:])
        del data
    engine = ExactSearch(vectors)
    t = time.perf_counter()
    exact = np.concatenate([engine.search(queries[s: s + args.batch], 10)[0]
                            for s in range(0, len(queries), args.batch)])
    exact_qps = len(queries) / (time.perf_counter() - t)
    rows.append({"index": "exact (ours)", "build_s": 0.0, "qps": exact_qps, "recall@10": 1.0})
    print(json.dumps(rows[-1]), flush=True)
    del engine

    nlist = int(4 * np.sqrt(args.images))
    t = time.perf_counter()
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(args.dim), args.dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors[rng.choice(len(vectors), min(len(vectors), 40 * nlist), replace=False)])
    ivf.add(vectors)
    build = time.perf_counter() - t
    for nprobe in (8, 32, 128):
        ivf.nprobe = nprobe
        found, qps = timed_search(ivf, queries, 10, args.batch)
        rows.append({"index": f"IVF{nlist},Flat nprobe={nprobe}", "build_s": build, "qps": qps,
                     "recall@10": recall(found, exact)})
        print(json.dumps(rows[-1]), flush=True)
    del ivf
    t = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(args.dim, 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 80
    hnsw.add(vectors)
    build = time.perf_counter() - t
    for ef in (64, 256):
        hnsw.hnsw.efSearch = ef
        found, qps = timed_search(hnsw, queries, 10, args.batch)
        rows.append({"index": f"HNSW32 efSearch={ef}", "build_s": build, "qps": qps, "recall@10": recall(found, exact)})
        print(json.dumps(rows[-1]), flush=True)
    what = "random" if args.data == "random" else f"clustered ({args.centers} centres, spread {args.spread})"
    print(f"\n{args.images:,} {what} unit vectors × {args.dim}, {args.queries} queries in batches of {args.batch}\n")
    print("| index | build | queries/s | recall@10 vs exact |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['index']} | {r['build_s']:.0f} s | {r['qps']:,.0f} | {r['recall@10']:.3f} |")


if __name__ == "__main__":
    main()
