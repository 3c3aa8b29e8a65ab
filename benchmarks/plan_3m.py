"""A corpus of CC3M's size plans without reading its images: the dry run of config/own-data.yaml
with its English set replaced by 3 million image-caption pairs, timed and its peak memory measured.

    .venv/bin/python benchmarks/plan_3m.py                  # 3,000,000 rows (about 2 GB of disk in /tmp)
    .venv/bin/python benchmarks/plan_3m.py --rows 300000    # a tenth, to try it

It writes, in a scratch folder:

1. an **imagefolder** ``metadata.parquet`` of N rows (``file_name, text, split``; the images are
   not there: planning never opens them) and times ``snakemake -n results/own_data/table.csv`` on a
   fresh working directory -- the plan of a corpus nothing has been read from yet;
2. a **webdataset** of ``N / 10,000`` shards as img2dataset writes them for CC3M (the shards tiny:
   planning reads none of their members) and, as if ``read_corpus`` and ``image_manifest`` had
   run, its caption tables and image lists (N rows: key, shard, member offset and size), the
   shards' content manifests and the per-split manifests; then it times the same dry run -- the
   plan of a read corpus: every manifest refreshed (the image lists' shard column read, each shard
   stat'ed), each caption table's languages counted for the pseudopair set's check.

3. the per-image cost of refreshing an imagefolder's split manifests at each parse (a ``stat``
   per image once the corpus is read; its digest comes from the stamps), measured on
   ``--stat-files`` real files and extrapolated to N.

Each dry run's wall time and peak resident memory (GNU ``/usr/bin/time``'s maximum resident set
of the snakemake process) are printed with the ratio to a plain ``--list-rules`` (the parse floor).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SPLITS = ("train", "val", "test")
SAMPLES_PER_SHARD = 10_000


def snakemake(work: Path, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """(seconds, peak resident MB of the snakemake process -- GNU time's %M --, result)."""
    exe = Path(sys.executable).with_name("snakemake")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        start = time.perf_counter()
        result = subprocess.run(["/usr/bin/time", "-o", stats.name, "-f", "%M", str(exe), "-s",
                                 str(REPO / "Snakefile"), "-d", str(work), *args],
                                capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - start
        peak_kb = float(Path(stats.name).read_text().split()[-1])
    return seconds, peak_kb / 1024, result


def splits_of(n: int) -> np.ndarray:
    """1 % val, 1 % test, the rest train (CC3M's own validation split is 0.5 %)."""
    split = np.full(n, "train", dtype=object)
    split[: n // 100] = "val"
    split[n // 100: n // 50] = "test"
    return split


def captions(n: int) -> np.ndarray:
    words = np.array(["a", "dog", "cat", "red", "blue", "runs", "sits", "on", "the", "grass", "mat", "near"])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(words), size=(n, 8))
    return np.array([" ".join(row) for row in words[picks]], dtype=object)


def imagefolder(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    names = np.array([f"{i // 10_000:05d}/{i:09d}.jpg" for i in range(n)], dtype=object)
    pd.DataFrame({"file_name": names, "text": captions(n), "split": splits_of(n)}).to_parquet(
        folder / "metadata.parquet", index=False)


def webdataset(folder: Path, work: Path, n: int, results: str) -> int:
    """Tiny shards, and the outputs of read_corpus and image_manifest for N samples in them."""
    from pseudopairs.data.manifest import file_manifest, write_manifest
    from pseudopairs.core.io import write_parquet_atomic

    folder.mkdir(parents=True)
    n_shards = -(-n // SAMPLES_PER_SHARD)
    for k in range(n_shards):
        with tarfile.open(folder / f"{k:05d}.tar", "w") as tar:
            info = tarfile.TarInfo(f"{k * SAMPLES_PER_SHARD:09d}.txt")
            tar.addfile(info)
    shards = [f"{k:05d}.tar" for k in range(n_shards)]
    out = work / results
    write_manifest(out / "corpora/photos/source.json", *file_manifest(shards, folder))
    keys = np.array([f"{i:09d}" for i in range(n)], dtype=object)
    shard = np.array(shards, dtype=object)[np.arange(n) // SAMPLES_PER_SHARD]
    split, text = splits_of(n), captions(n)
    for name in SPLITS:
        rows = split == name
        k = int(rows.sum())
        write_parquet_atomic(out / f"captions/raw/photos/{name}.parquet", pd.DataFrame({
            "dataset": "photos", "split": name, "image_id": keys[rows], "lang": "en",
            "caption_idx": np.zeros(k, dtype=np.int64), "raw": text[rows]}))
        prepared = pd.read_parquet(out / f"captions/raw/photos/{name}.parquet").assign(text=lambda f: f["raw"])
        write_parquet_atomic(out / f"captions/photos/{name}.parquet", prepared)
        images = pd.DataFrame({"image_id": keys[rows], "path": shard[rows],
                               "member": np.char.add(keys[rows].astype(str), ".jpg"),
                               "offset": np.arange(k, dtype=np.int64) * 4096 + 512,
                               "size": np.full(k, 3000, dtype=np.int64)})
        write_parquet_atomic(out / f"images/photos/{name}.parquet", images)
        write_manifest(out / f"images/photos/{name}.manifest.json",
                       *file_manifest(images["path"].unique().tolist(), folder))
    # the inputs of read_corpus/image_manifest are older than their outputs
    old = time.time() - 1000
    os.utime(out / "corpora/photos/source.json", (old, old))
    return n_shards


def refresh_per_file(folder: Path, n: int) -> float:
    """Seconds per image of an imagefolder manifest's refresh at parse time (stat each file, its
    digest kept from the stamps): measured on ``n`` real (tiny) files, to extrapolate."""
    from pseudopairs.data.manifest import image_manifest, refresh_manifest, write_manifest

    names = [f"{i // 10_000:05d}/{i:09d}.jpg" for i in range(n)]
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\xff\xd8" + name.encode())
    pd.DataFrame({"image_id": names, "path": names}).to_parquet(folder / "list.parquet", index=False)
    write_manifest(folder / "m.json", *image_manifest(folder / "list.parquet", folder))
    start = time.perf_counter()
    assert refresh_manifest(folder / "list.parquet", folder / "m.json", folder) is False
    return (time.perf_counter() - start) / n


def config(base: dict, photos: dict, path: Path) -> Path:
    cfg = {**base, "corpora": {**base["corpora"], "photos": photos}}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--scratch", type=Path, default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--stat-files", type=int, default=100_000,
                        help="real files for the per-image cost of an imagefolder manifest's refresh (0: skip)")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="plan_3m."))
    base = yaml.safe_load((REPO / "config" / "own-data.yaml").read_text(encoding="utf-8"))
    results = base["results"]
    target = f"{results}/table.csv"
    try:
        start = time.perf_counter()
        imagefolder(scratch / "imagefolder", args.rows)
        made = time.perf_counter() - start
        print(f"{args.rows:,} rows: imagefolder metadata.parquet {(scratch / 'imagefolder/metadata.parquet').stat().st_size / 1e6:.0f} MB "
              f"written in {made:.1f} s")
        cfg = config(base, {"kind": "imagefolder", "root": str(scratch / "imagefolder"), "lang": "en"},
                     scratch / "imagefolder.yaml")
        work = scratch / "work-imagefolder"
        floor = snakemake(work, "--list-rules", "--configfile", str(cfg))
        fresh = snakemake(work, "-n", "--cores", "2", target, "--configfile", str(cfg))
        if fresh[2].returncode != 0:
            print(fresh[2].stderr[-3000:], file=sys.stderr)
            return 1
        start = time.perf_counter()
        n_shards = webdataset(scratch / "webdataset", scratch / "work-webdataset", args.rows, results)
        made = time.perf_counter() - start
        print(f"webdataset: {n_shards} shards, read tables, image lists and manifests of {args.rows:,} samples "
              f"written in {made:.1f} s")
        cfg = config(base, {"kind": "webdataset", "shards": str(scratch / "webdataset" / f"{{00000..{n_shards - 1:05d}}}.tar"),
                            "lang": "en"}, scratch / "webdataset.yaml")
        read = snakemake(scratch / "work-webdataset", "-n", "--cores", "2", target, "--configfile", str(cfg))
        if read[2].returncode != 0:
            print(read[2].stderr[-3000:], file=sys.stderr)
            return 1
        planned = "logs/read_corpus/photos.log" in read[2].stdout
        print(f"\nparse floor (--list-rules): {floor[0]:.1f} s, peak {floor[1]:.0f} MB")
        print(f"dry run, imagefolder of {args.rows:,} rows, nothing read yet: {fresh[0]:.1f} s "
              f"({fresh[0] / floor[0]:.2f} x the floor), peak {fresh[1]:.0f} MB")
        print(f"dry run, webdataset of {args.rows:,} samples in {n_shards} shards, read: {read[0]:.1f} s "
              f"({read[0] / floor[0]:.2f} x the floor), peak {read[1]:.0f} MB; photos read again: {planned}")
        if args.stat_files:
            per_file = refresh_per_file(scratch / "stat", args.stat_files)
            print(f"an imagefolder's manifests refreshed at parse: {per_file * 1e6:.1f} µs per image "
                  f"(measured on {args.stat_files:,} files) -> {per_file * args.rows:.1f} s for {args.rows:,} "
                  "images (extrapolated); a webdataset's: per shard")
    finally:
        if not args.keep and args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
