"""Benchmark: ``pseudopairs serve`` under load — 32 concurrent clients for 60 s on loopback, each
sending ``GET /search?q=…&lang=…&k=10`` again as soon as it has its answer: p50 / p99 latency,
throughput, errors (any answer but 200), the dynamic batcher's mean batch, and the server's
memory (VmRSS after a warm-up vs at the end; flat = no leak).

The server is the real one (``python -m pseudopairs serve`` in a subprocess on 127.0.0.1) with a
real exported model (``--model``, default the tiny demo export the search tests build; its text
encoder encodes every query), over an index of ``--images`` synthetic unit vectors written in the
index format for that model (its dim and model hash): the search cost of a collection that size
without embedding that many images first. The queries are the captions of ``--captions`` (a
caption table) in the model's languages.

Run: ``.venv/bin/python benchmarks/service_load.py --model MODEL_DIR --captions CAPTIONS.parquet
[--images 100000] [--seconds 60] [--clients 32]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def synthetic_index(out: Path, model, n: int, *, chunk: int = 65536, vectors: np.ndarray | None = None) -> None:
    """An index of ``n`` random unit vectors (or the rows of ``vectors``) for ``model`` (ids
    ``img{i}``), in the index format."""
    from pseudopairs.core.io import write_json_atomic
    from pseudopairs.search.index import FORMAT, MANIFEST, part_name, write_part

    rng = np.random.default_rng(0)
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    for c, s in enumerate(range(0, n, chunk)):
        e = min(n, s + chunk)
        if vectors is not None:
            v = vectors[s:e]
        else:
            v = rng.standard_normal((e - s, model.dim), dtype=np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
        write_part(out / part_name(c), ids=[f"img{i}" for i in range(s, e)],
                   sources=[f"img{i}.png" for i in range(s, e)], offset=np.full(e - s, -1),
                   size=np.full(e - s, -1), vectors=v)
        parts.append({"file": part_name(c), "rows": e - s})
    write_json_atomic(out / MANIFEST, {
        "format": FORMAT, "listing": "synthetic", "images": n, "chunk": chunk, "model_hash": model.model_hash,
        "dim": int(model.dim), "kind": "folder", "root": str(out), "model": str(Path(model.folder).resolve()),
        "languages": list(model.languages), "parts": parts, "captions": None, "version": None})


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def load(url: str, queries: list[tuple[str, str]], *, clients: int, seconds: float):
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        async def one(c: int) -> None:
            i = c
            while time.perf_counter() < stop:
                q, lang = queries[i % len(queries)]
                t = time.perf_counter()
                try:
                    r = await client.get("/search", params={"q": q, "lang": lang, "k": 10})
                    if r.status_code != 200 or len(r.json()["results"]) != 10:
                        errors.append(f"{r.status_code} {r.text[:100]}")
                except httpx.HTTPError as err:
                    errors.append(repr(err))
                latencies.append(time.perf_counter() - t)
                i += clients

        started = time.perf_counter()
        await asyncio.gather(*(one(c) for c in range(clients)))
        elapsed = time.perf_counter() - started
    return latencies, errors, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="an exported model folder")
    parser.add_argument("--captions", required=True, help="a caption table (image_id, lang, raw): the queries")
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()

    import httpx

    from pseudopairs.search.model import load as load_model

    model = load_model(args.model)
    table = pd.read_parquet(args.captions)
    table = table[table["lang"].isin(model.languages)]
    queries = list(zip(table["raw"], table["lang"]))
    with tempfile.TemporaryDirectory(prefix="service-load-") as tmp:
        index = Path(tmp) / "index"
        synthetic_index(index, model, args.images)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        server = subprocess.Popen([sys.executable, "-m", "pseudopairs", "serve", "--index", str(index),
                                   "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    httpx.get(f"{url}/api/info", timeout=2)
                    break
                except httpx.HTTPError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        sys.exit(f"the server did not start: {server.stderr.read()[-2000:]}")
                    time.sleep(0.5)
            asyncio.run(load(url, queries, clients=args.clients, seconds=3))  # warm up
            rss_start = rss_mb(server.pid)
            samples: list[float] = []
            sampling = threading.Event()

            def sample() -> None:  # the server's RSS every 5 s: flat, or growing with the requests
                while not sampling.wait(5.0):
                    samples.append(rss_mb(server.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            latencies, errors, elapsed = asyncio.run(load(url, queries, clients=args.clients, seconds=args.seconds))
            sampling.set()
            sampler.join()
            rss_end = rss_mb(server.pid)
            stats = httpx.get(f"{url}/stats").json()
        finally:
            server.terminate()
            server.wait(timeout=30)
    lat = np.array(latencies) * 1000
    result = {"images": args.images, "dim": model.dim, "clients": args.clients, "seconds": round(elapsed, 1),
              "requests": len(latencies), "throughput_qps": len(latencies) / elapsed,
              "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
              "errors": len(errors), "first_errors": errors[:3], "rss_start_mb": rss_start, "rss_end_mb": rss_end,
              "rss_every_5s_mb": [round(x) for x in samples],
              "mean_batch": stats["queries"] / max(1, stats["batches"]), "largest_batch": stats["largest_batch"],
              "load_avg": os.getloadavg()[0]}
    print(json.dumps(result))
    print(f"| images | clients × s | requests | throughput | p50 | p99 | errors | mean batch | RSS start → end |\n"
          f"|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
          f"| {args.images:,} × {model.dim}-d | {args.clients} × {elapsed:.0f} s | {len(latencies):,} | "
          f"{result['throughput_qps']:,.0f} q/s | {result['p50_ms']:.0f} ms | {result['p99_ms']:.0f} ms | "
          f"{len(errors)} | {result['mean_batch']:.1f} | {rss_start:,.0f} → {rss_end:,.0f} MB |")


if __name__ == "__main__":
    main()
