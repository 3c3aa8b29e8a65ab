"""Corpora of your own through Snakemake: config/own-data.yaml plans the worked example; an
imagefolder and a webdataset kept outside the workflow are read, keyed by content, and reached
through another path (a symlink, a copy) they rerun nothing, while a changed image reruns its
split's features; a split with missing images stops the dry run, naming them."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, run_snakemake
from pseudopairs import cli
from pseudopairs.data import corpora
from pseudopairs.world import generate

OWN = REPO / "config" / "own-data.yaml"
SPLITS = ("train", "val", "test")
WORLD = {"seed": 7, "image_size": 64, "captions_per_image": 5,
         "images": {"m30k": {"train": 6, "val": 3, "test": 3}, "coco": {"train": 6, "val": 3, "test": 3}}}


def _counts(output: str) -> dict[str, int]:
    table = output.split("Job stats:")[-1]
    return {m.group(1): int(m.group(2)) for line in table.splitlines()
            if (m := re.match(r"^(\w+)\s+(\d+)$", line.strip()))}


def test_the_worked_example_plans_table5s_rows_on_the_exported_world(tmp_path):
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "2", "results/own_data/table.csv",
                           "--configfile", str(OWN))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = _counts(result.stdout)
    assert counts["export_world_corpus"] == 2 and counts["export_world_parallel"] == 1
    assert counts["corpus_source"] == 2 and counts["read_corpus"] == 2 and counts["image_manifest"] == 6
    assert counts["features"] == 6 and counts["mine"] == 3 and counts["pseudopair_captions"] == 9
    assert counts["train_mt"] == 1 and counts["translate"] == 1
    # 9 experiments x seeds 1-3 in one stack job each, and their evaluations
    assert sum(n for rule, n in counts.items() if rule.startswith("train_stack_")) == 9
    assert sum(n for rule, n in counts.items() if rule.startswith("evaluate_stack_")) == 9
    # nothing of the papers' configuration, everything under results/own_data
    assert "read_multi30k" not in result.stdout and "m30k.de" not in result.stdout
    outputs = re.findall(r"^\s*output: (.*)$", result.stdout, re.M)
    assert outputs and all(p.startswith("results/own_data/") for o in outputs for p in o.split(", "))
    # the French webdataset is read from its shards, its images' folder a parameter of the job
    assert "--root results/own_data/exported/webdataset" in result.stdout
    assert "--image-root results/own_data/exported/imagefolder" in result.stdout


# --------------------------------------------------------------------------------------------
# Your own folders: read, keyed by content, moved


@pytest.fixture
def own(tmp_path) -> tuple[Path, Path]:
    """An imagefolder and a webdataset exported from a small world, outside the working
    directory; returns (site file writer, working directory)."""
    generate.build_world(WORLD, tmp_path / "w" / "results")
    for fmt, spec in corpora.WORLD_EXPORTS.items():
        raw = [str(tmp_path / f"w/results/captions/raw/{spec['captions']}/{s}.parquet") for s in SPLITS]
        images = [str(tmp_path / f"w/results/images/{spec['images']}/{s}.parquet") for s in SPLITS]
        assert cli.main(["export-world-corpus", "--format", fmt, "--captions", *raw, "--images", *images,
                         "--output", str(tmp_path / "data" / fmt)]) == 0
    return tmp_path / "data", tmp_path / "work"


def _site(tmp_path: Path, data: Path) -> Path:
    site = tmp_path / f"site-{data.name}.yaml"
    site.write_text(f"""data: {{source: own}}
features: {{weights: none}}
corpora:
  photos: {{root: {data}/imagefolder}}
  cartes: {{shards: "{data}/webdataset/{{00000..00000}}.tar"}}
""")
    return site


def _targets(kind: str) -> list[str]:
    if kind == "manifests":
        return [f"results/own_data/images/{c}/{s}.manifest.json" for c in ("photos", "cartes") for s in SPLITS]
    return [f"results/own_data/features/{c}/{s}.npz" for c in ("photos", "cartes") for s in SPLITS]


def _run(work: Path, site: Path, *args: str):
    return run_snakemake(work, *args, "--cores", "1", *_targets("features"), "--configfile", str(OWN), str(site))


def _built(tmp_path, own) -> tuple[Path, Path]:
    """Run the reading steps for real, then stand-in features newer than everything."""
    data, work = own
    site = _site(tmp_path, data)
    result = run_snakemake(work, "--cores", "1", *_targets("manifests"), "--configfile", str(OWN), str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    images = pd.read_parquet(work / "results/own_data/images/cartes/test.parquet")
    assert images.columns.tolist() == ["image_id", "path", "member", "offset", "size"]
    assert images["path"].unique().tolist() == ["00000.tar"]           # relative to the folder
    later = max(p.stat().st_mtime for p in (work / "results").rglob("*") if p.is_file()) + 1
    time.sleep(max(0.0, later - time.time()) + 0.1)   # a manifest rewritten from now on is newer
    for path in _targets("features"):
        for out in (work / path, work / path.replace(".npz", ".skipped.tsv")):
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(b"")
            os.utime(out, (later, later))
    result = _run(work, site, "-n")
    assert result.returncode == 0 and "Nothing to be done" in result.stdout + result.stderr, result.stdout[-2000:]
    return data, work


def _planned_rules(result) -> set[str]:
    return set(re.findall(r"^(?:local)?rule (\w+):$", result.stdout, re.M))


def test_the_same_files_through_a_symlink_or_a_copy_rerun_nothing(tmp_path, own):
    data, work = _built(tmp_path, own)
    manifests = {p: (work / p).stat().st_mtime_ns for p in _targets("manifests")}
    link = tmp_path / "scratch-link"
    link.symlink_to(data)
    copy = tmp_path / "scratch-copy"          # copied without the modification times
    shutil.copytree(data, copy, copy_function=shutil.copyfile)
    for moved in (link, copy):
        result = _run(work, _site(tmp_path, moved), "-n")
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-3000:]
    assert {p: (work / p).stat().st_mtime_ns for p in _targets("manifests")} == manifests
    # a changed image (here, in the copy): the features of its split only
    image = copy / "imagefolder" / "coco_val_000001.png"
    image.write_bytes((copy / "imagefolder" / "coco_val_000002.png").read_bytes())
    result = _run(work, _site(tmp_path, copy), "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _planned_rules(result) == {"features"}
    outputs = re.findall(r"^\s*output: (.*)$", result.stdout, re.M)
    assert outputs == ["results/own_data/features/photos/val.npz, results/own_data/features/photos/val.skipped.tsv"]


def test_a_changed_caption_rereads_the_corpus(tmp_path, own):
    data, work = _built(tmp_path, own)
    meta = data / "imagefolder" / "metadata.csv"
    meta.write_text(meta.read_text(encoding="utf-8").replace("A ", "The ", 1), encoding="utf-8")
    result = _run(work, _site(tmp_path, data), "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"read_corpus", "features"} <= _planned_rules(result)


def test_a_split_with_missing_images_stops_the_dry_run_naming_them(tmp_path, own):
    data, work = _built(tmp_path, own)
    for name in ("coco_test_000000.png", "coco_test_000002.png"):
        (data / "imagefolder" / name).unlink()
    result = _run(work, _site(tmp_path, data), "-n")
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert ("config key 'corpora.photos': split test of corpus 'photos': 2 of 3 files are missing from "
            f"{data}/imagefolder (first: coco_test_000000.png, coco_test_000002.png)") in text, text[-3000:]
