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
    assert counts["corpus_images"] == 2
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
    if kind == "captions":
        return [f"results/own_data/captions/raw/{c}/{s}.parquet" for c in ("photos", "cartes") for s in SPLITS]
    return [f"results/own_data/features/{c}/{s}.npz" for c in ("photos", "cartes") for s in SPLITS]


def _run(work: Path, site: Path, *args: str):
    return run_snakemake(work, *args, "--cores", "1", *_targets("features"), *_targets("captions"),
                         "--configfile", str(OWN), str(site))


def _planned_rules(result) -> set[str]:
    return set(re.findall(r"^(?:local)?rule (\w+):$", result.stdout, re.M))


def _nothing_to_do(result) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-3000:]


def test_your_folders_read_keyed_by_content_moved_changed_and_missing(tmp_path, own):
    """Every step up to the features runs for real on an imagefolder and a webdataset outside
    the working directory (random-weight features of 12 + 12 small images). Then: the same files
    through a symlink and through a copy without their times rerun nothing -- no job's tracked
    parameter names the folder --; a changed image reruns its split's features only; a changed
    caption rereads its corpus; missing images stop the dry run, naming them."""
    data, work = own
    site = _site(tmp_path, data)
    result = _run(work, site)
    assert result.returncode == 0, result.stderr[-3000:]
    images = pd.read_parquet(work / "results/own_data/images/cartes/test.parquet")
    assert images.columns.tolist() == ["image_id", "path", "member", "offset", "size"]
    assert images["path"].unique().tolist() == ["00000.tar"]           # relative to the folder
    _nothing_to_do(_run(work, site, "-n"))
    manifests = {p: (work / p).stat().st_mtime_ns for p in _targets("manifests")}
    link = tmp_path / "scratch-link"
    link.symlink_to(data)
    copy = tmp_path / "scratch-copy"          # copied without the modification times
    shutil.copytree(data, copy, copy_function=shutil.copyfile)
    for moved in (link, copy):
        _nothing_to_do(_run(work, _site(tmp_path, moved), "-n"))
    assert {p: (work / p).stat().st_mtime_ns for p in _targets("manifests")} == manifests
    # a changed image (here, in the copy): the features of its split only
    copied = _site(tmp_path, copy)
    time.sleep(1)
    image = copy / "imagefolder" / "coco_val_000001.png"
    image.write_bytes((copy / "imagefolder" / "coco_val_000002.png").read_bytes())
    result = _run(work, copied, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _planned_rules(result) == {"features"}
    outputs = re.findall(r"^\s*output: (.*)$", result.stdout, re.M)
    assert outputs == ["results/own_data/features/photos/val.npz, results/own_data/features/photos/val.skipped.tsv"]
    # a changed caption: the captions are read again, the image lists keep their content and
    # their modification times, so no image list, manifest or features job is planned
    lists = {p: (work / p).stat().st_mtime_ns for p in
             [f"results/own_data/images/photos/{s}.parquet" for s in SPLITS]}
    meta = copy / "imagefolder" / "metadata.csv"
    meta.write_text(meta.read_text(encoding="utf-8").replace("A ", "The ", 1), encoding="utf-8")
    result = _run(work, copied, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _planned_rules(result) == {"read_corpus", "features"}, result.stdout[-3000:]
    # (the features of the changed image's split only, still to run from the step before)
    assert [o for o in re.findall(r"^\s*output: (.*)$", result.stdout, re.M) if "features/" in o] == [
        "results/own_data/features/photos/val.npz, results/own_data/features/photos/val.skipped.tsv"]
    assert {p: (work / p).stat().st_mtime_ns for p in lists} == lists
    # missing images: the dry run stops, naming the count and the first
    for name in ("coco_test_000000.png", "coco_test_000002.png"):
        (data / "imagefolder" / name).unlink()
    result = _run(work, site, "-n")
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert ("config key 'corpora.photos': split test of corpus 'photos': 2 of 3 files are missing from "
            f"{data}/imagefolder (first: coco_test_000000.png, coco_test_000002.png)") in text, text[-3000:]


def test_a_refused_dry_run_leaves_every_file_as_it_was(tmp_path, own):
    """Images missing from two splits: the dry run is refused naming both splits, and no manifest
    (nor its stamps) is rewritten, so with the images back the dry run plans nothing."""
    data, work = own
    site = _site(tmp_path, data)
    assert _run(work, site).returncode == 0
    kept = sorted(p for p in (work / "results/own_data").rglob("*") if p.is_file()
                  and "/logs/" not in str(p) and "/benchmarks/" not in str(p))
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept}
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in ("coco_val_000001.png", "coco_test_000000.png", "coco_test_000002.png"):
        (data / "imagefolder" / name).rename(aside / name)
    result = _run(work, site, "-n")
    assert result.returncode != 0
    text = " ".join((result.stdout + result.stderr).split())
    where = f"from {data}/imagefolder"
    assert (f"config key 'corpora.photos': split val of corpus 'photos': 1 of 3 files are missing {where} "
            f"(first: coco_val_000001.png); config key 'corpora.photos': split test of corpus 'photos': "
            f"2 of 3 files are missing {where} (first: coco_test_000000.png, coco_test_000002.png)") in text, text[-3000:]
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept} == before
    for name in ("coco_val_000001.png", "coco_test_000000.png", "coco_test_000002.png"):
        (aside / name).rename(data / "imagefolder" / name)
    _nothing_to_do(_run(work, site, "-n"))


def test_a_failed_step_says_why_on_the_console(tmp_path):
    """A step stopped by bad input: its one line naming the file and line reaches the console
    (the workflow's onerror), not only its log."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "metadata.csv").write_bytes(b"file_name,text\na.png,caf\xe9 au lait\n")
    site = tmp_path / "site.yaml"
    site.write_text(f"data: {{source: own}}\nfeatures: {{weights: none}}\ncorpora:\n  photos: {{root: {folder}}}\n")
    result = run_snakemake(tmp_path / "work", "--cores", "1", "results/own_data/captions/raw/photos/train.parquet",
                           "--configfile", str(OWN), str(site))
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("rule read_corpus (corpus=photos): ")]
    assert lines == [f"rule read_corpus (corpus=photos): pseudopairs read-corpus: error: {folder}/metadata.csv:2: "
                     "not UTF-8 (byte 0xe9 at column 10); save the metadata as UTF-8 "
                     "[log: results/own_data/logs/read_corpus/photos.log]"], result.stderr[-3000:]


TRACKED = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings
repo, work, target, *files = sys.argv[1:]
with SnakemakeApi(OutputSettings()) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=Path(repo) / "Snakefile",
                      config_settings=ConfigSettings(configfiles=[Path(f) for f in files]), workdir=Path(work))
    wf.dag(DAGSettings(targets={target}))  # hands the DAG settings to the workflow
    workflow = wf._workflow
    # what printdag does before printing (its print fails on this Snakemake); any error stops here
    workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
    workflow._build_dag()
    jobs = workflow.dag.jobs
    print(json.dumps({f"{j.rule.name}:{j.output[0]}": [str(p) for p in j.non_derived_params] for j in jobs}))
"""


@pytest.mark.parametrize("configfiles, target", [
    (["own"], "results/own_data/table.csv"),
    (["paper"], "results/table5.csv"),
])
def test_no_tracked_parameter_of_any_job_names_a_corpus_folder(tmp_path, configfiles, target):
    """Snakemake reruns a job whose tracked parameters changed: none may hold the folder of a
    corpus kept outside the workflow (Flickr30K, an imagefolder, a webdataset), or pointing the
    config at the same files elsewhere would rerun it. The steps get the folder through
    parameters that take `input`, which Snakemake does not track."""
    import json
    import subprocess
    import sys

    folder = tmp_path / "elsewhere" / "corpus-folder"
    (folder / "imagefolder").mkdir(parents=True)
    site = tmp_path / "site.yaml"
    if configfiles == ["own"]:
        site.write_text(f"corpora:\n  photos: {{root: {folder}/imagefolder}}\n"
                        f"  cartes: {{shards: '{folder}/webdataset/{{00000..00004}}.tar'}}\n")
        files = [str(OWN), str(site)]
    else:
        site.write_text(f"paper_data: {{flickr30k_images: {folder}}}\n")
        files = [str(REPO / "config" / "paper.yaml"), str(site)]
    result = subprocess.run([sys.executable, "-c", TRACKED, str(REPO), str(tmp_path / "work"), target, *files],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert result.returncode == 0, result.stderr[-3000:]
    tracked = json.loads(result.stdout.strip().splitlines()[-1])
    readers = [job for job in tracked if job.split(":")[0] in ("features", "read_corpus", "corpus_source",
                                                             "image_manifest", "read_multi30k_task2")]
    assert readers, sorted(tracked)[:5]
    # the whole DAG down to the images: the target and a features job of each split read
    assert any(job.endswith(target) for job in tracked), sorted(tracked)[:5]
    assert len([job for job in readers if job.startswith("features:")]) >= 3, sorted(readers)
    assert not [(job, p) for job, params in tracked.items() for p in params if "corpus-folder" in p]


def test_the_real_data_layer_plans_the_papers_sizes_on_your_folders(tmp_path, own):
    """config/own-data-real.yaml over config/own-data.yaml with a site file naming the folders:
    the plan's features are the paper's (ResNet50 at 224 px, ImageNet weights from the torch hub
    cache), its models 300-d words and a 1,024-d joint space trained to early stopping, every GPU
    job asking one GPU, everything under results/own."""
    import json
    import subprocess
    import sys

    from conftest import snakemake_exe

    data, work = own
    site = _site(tmp_path, data)
    parallel = {}
    for part in ("train", "valid"):
        for lang, line in (("en", "a dog runs"), ("fr", "un chien court")):
            path = tmp_path / "parallel" / f"{part}.{lang}"
            path.parent.mkdir(exist_ok=True)
            path.write_text(f"{line}\n" * 5, encoding="utf-8")
            parallel.setdefault(part, {})[lang] = str(path)
    site.write_text(site.read_text().replace("features: {weights: none}\n", "")
                    + f"translation: {{model: {{parallel_text: {json.dumps(parallel)}}}}}\n")
    hub = tmp_path / "torch" / "hub" / "checkpoints"
    hub.mkdir(parents=True)
    (hub / "resnet50-0676ba61.pth").touch()     # the DAG checks the file is there; nothing runs
    env = {**os.environ, "TORCH_HOME": str(tmp_path / "torch"),
           "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run([snakemake_exe(), "-s", str(REPO / "Snakefile"), "-d", str(work), "-n", "-p",
                             "--cores", "1", "results/own/table.csv", "--configfile", str(OWN),
                             str(REPO / "config" / "own-data-real.yaml"), str(site)],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    features = re.findall(r"--settings '(\{[^']*\"arch\"[^']*\})'", result.stdout)
    assert features and {(s["arch"], s["crop"], s["weights"]) for s in map(json.loads, features)} == {
        ("resnet50", 224, "imagenet")}
    jobs = re.findall(r"--job '(\{[^']*\"joint_dim\"[^']*\})'", result.stdout)
    assert jobs
    for job in map(json.loads, jobs):
        model, training = job["settings"]["model"], job["settings"]["training"]
        assert (model["embedding_dim"], model["joint_dim"]) == (300, 1024), model
        assert (training["max_updates"], training["patience"]) == (1000000, 10), training
    outputs = re.findall(r"^\s*output: (.*)$", result.stdout, re.M)
    assert outputs and all(p.startswith("results/own/") for o in outputs for p in o.split(", "))
    assert "export_world_corpus" not in result.stdout
