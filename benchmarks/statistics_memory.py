"""Memory of the §7.2 statistics step (`pseudopair_stats`, a localrule: it runs on the login node).

    .venv/bin/python benchmarks/statistics_memory.py                  # 18 tables × 566K pairs
    .venv/bin/python benchmarks/statistics_memory.py --sets 2 --seeds 2 --rows 50000   # quick

Writes synthetic pseudopair sets at the paper's size into a temporary folder — `--sets` × `--seeds`
`pairs.parquet` files (default 6 × 3 = 18) of `--rows` pairs (566K: every English COCO caption)
over a database of `--database` German captions (145K) and `--images` COCO images (113K), with
the columns, dtypes and text lengths of the `mine` step's output and a hub-heavy (Zipf) caption
use — then runs, each in its own process, on the same files:

* **streaming**: `pseudopair_statistics(spec)` as the pipeline calls it (its default `load` reads
  each file), which holds one set's frame at a time plus small per-set reductions;
* **caching**: the computation before streaming (every frame loaded and kept until the end, the
  cross-set figures from the public frame functions), as a plain reference.

For each it prints the peak resident memory above the process's memory after its imports (Linux
`VmHWM` − `VmRSS`; pandas' Arrow-backed strings are outside tracemalloc, so RSS is the measure),
the wall time, and whether both give exactly the same values. The goal: at most 1.0 GB
more for 18 tables of 566K pairs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORDS_EN = ("a man woman dog cat sitting standing on the in of with next to red blue large small "
            "table street plate pizza train bus riding holding two people white black field "
            "grass water near front").split()
WORDS_DE = ("ein eine mann frau hund katze sitzt steht auf dem der die in mit neben rot blau "
            "großer kleiner tisch straße teller zug bus fährt hält zwei leute weiß schwarz "
            "wiese wasser vor").split()


def _sentences(rng, n: int, words: list[str]) -> list[str]:
    lengths = rng.integers(8, 16, n)
    picks = rng.integers(0, len(words), int(lengths.sum()))
    out, at = [], 0
    for length in lengths:
        out.append(" ".join(words[i] for i in picks[at:at + length]))
        at += length
    return out


def write_sets(folder: Path, *, sets: int, seeds: int, rows: int, database: int, images: int) -> dict:
    """The synthetic pair files and the statistics spec over them (as
    ``report.contract.pseudopair_stats_spec`` gives the step)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    german = np.asarray(_sentences(rng, database, WORDS_DE), dtype=object)
    english = _sentences(rng, rows, WORDS_EN)
    image_ids = [str(100000 + (i // 5) % images) for i in range(rows)]   # 5 captions per image
    names = [f"coco.de-pseudo{i}@src{i % 2}" for i in range(sets)]
    files: dict = {}
    for s, name in enumerate(names):
        files[name] = {}
        for seed in range(1, seeds + 1):
            r = np.random.default_rng(100 * s + seed)
            match = np.minimum(r.zipf(1.3, rows) - 1, database - 1)   # hubs: a few rows very often
            match = r.permutation(database)[match].astype(np.int64)
            frame = pd.DataFrame({
                "query_image_id": image_ids, "query_caption_idx": np.arange(rows) % 5,
                "query_lang": "en", "query_text": english, "match_row": match,
                "match_image_id": [str(200000 + m // 5) for m in match],
                "match_caption_idx": match % 5, "match_lang": "de",
                "match_text": german[match], "match_raw": german[match],
                "similarity": r.random(rows).astype(np.float32),
                "score": r.random(rows).astype(np.float32)})
            pairs = folder / name / f"seed{seed}" / "pairs.parquet"
            pairs.parent.mkdir(parents=True, exist_ok=True)
            frame.to_parquet(pairs, index=False)
            stats = pairs.with_name("stats.json")
            stats.write_text(json.dumps({"n_database": database,
                                         "n_database_unique_texts": int(len(set(german)))}))
            files[name][str(seed)] = {"pairs": str(pairs), "stats": str(stats)}
    return {"sets": {n: {"source": f"src{i % 2}", "criterion": "cosine", "paper": {}}
                     for i, n in enumerate(names)},
            "seeds": list(range(1, seeds + 1)), "top": 150,
            "compare": [{"a": names[i], "b": names[i + 1], "paper": {}}
                        for i in range(0, len(names) - 1, 2)],
            "files": files}


def _caching(spec: dict):
    """The statistics as computed before streaming: every frame cached until the end."""
    from pseudopairs.mining.statistics import pseudopair_statistics_reference

    return pseudopair_statistics_reference(spec)


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def child(mode: str, spec_path: str, out_path: str) -> None:
    """One measurement, in a fresh process: peak RSS above the RSS after the imports."""
    import pandas  # noqa: F401  (imports count in the baseline, not in the increase)
    import pyarrow.parquet  # noqa: F401

    from pseudopairs.mining.statistics import pseudopair_statistics

    spec = json.loads(Path(spec_path).read_text())
    Path("/proc/self/clear_refs").write_text("5")      # reset VmHWM to the current RSS
    base = _status_kb("VmRSS")
    start = time.perf_counter()
    frame = pseudopair_statistics(spec) if mode == "streaming" else _caching(spec)
    seconds = time.perf_counter() - start
    peak = _status_kb("VmHWM")
    frame.to_csv(out_path, index=False)
    print(json.dumps({"mode": mode, "baseline_mb": base / 1024, "peak_increase_mb": (peak - base) / 1024,
                      "seconds": seconds}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=566_000, help="pairs per table (COCO captions)")
    parser.add_argument("--database", type=int, default=145_000, help="German captions")
    parser.add_argument("--images", type=int, default=113_300, help="COCO images")
    parser.add_argument("--no-reference", action="store_true", help="measure the streaming step only")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="statistics_memory_") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        spec = write_sets(folder, sets=args.sets, seeds=args.seeds, rows=args.rows,
                          database=args.database, images=args.images)
        size = sum(p.stat().st_size for p in folder.rglob("pairs.parquet"))
        print(f"{args.sets * args.seeds} tables × {args.rows} pairs (database {args.database}) written "
              f"in {time.perf_counter() - start:.0f} s, {size / 2**20:.0f} MiB of Parquet")
        (folder / "spec.json").write_text(json.dumps(spec))
        results = {}
        for mode in ("streaming",) + (() if args.no_reference else ("caching",)):
            out = folder / f"{mode}.csv"
            run = subprocess.run([sys.executable, __file__, "--child", mode, str(folder / "spec.json"), str(out)],
                                 capture_output=True, text=True)
            if run.returncode:
                print(run.stdout + run.stderr, file=sys.stderr)
                return 1
            results[mode] = json.loads(run.stdout.strip().splitlines()[-1])
            results[mode]["frame"] = pd.read_csv(out)
            print(f"{mode:>9}: peak RSS +{results[mode]['peak_increase_mb']:,.0f} MB over "
                  f"{results[mode]['baseline_mb']:,.0f} MB after imports, {results[mode]['seconds']:.1f} s")
        if "caching" in results:
            a, b = results["streaming"]["frame"], results["caching"]["frame"]
            same = a.equals(b)
            ratio = results["caching"]["peak_increase_mb"] / max(results["streaming"]["peak_increase_mb"], 1e-9)
            print(f"caching / streaming peak increase: {ratio:.1f}×; values identical: {same} "
                  f"({len(a)} rows)")
            if not same:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
