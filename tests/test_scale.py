"""The paper configuration at the paper's size: inputs kept outside the clone enter the
DAG through a manifest or a check -- the Flickr30K folder through a manifest of the files each
split needs (an unrelated file reruns nothing; a changed image reruns its features), the
ImageNet weights checked before any job -- and the caption tables' metadata read once per
parse."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pandas as pd

from conftest import REPO, run_snakemake
from pseudopairs.core import layout
from pseudopairs.data.manifest import image_manifest, refresh_manifest, write_manifest

PAPER = REPO / "config" / "paper.yaml"


# --------------------------------------------------------------------------------------------
# The manifest itself


def _image_list(folder: Path, names: list[str], path: Path) -> None:
    """An image list of ``names``, relative to their folder (an external corpus' list)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"image_id": [n.split(".")[0] for n in names], "path": names}).to_parquet(path)


def test_a_manifest_lists_the_needed_files_by_content_and_is_rewritten_only_when_they_change(tmp_path):
    import hashlib

    folder = tmp_path / "flickr"
    folder.mkdir()
    for name in ("1.jpg", "2.jpg"):
        (folder / name).write_bytes(b"jpeg" * 10)
    _image_list(folder, ["1.jpg", "2.jpg", "3.jpg"], tmp_path / "list.parquet")
    manifest, stamps = image_manifest(tmp_path / "list.parquet", folder)
    digest = hashlib.sha256(b"jpeg" * 10).hexdigest()
    assert manifest["files"] == [["1.jpg", 40, digest], ["2.jpg", 40, digest], ["3.jpg", None, None]]
    assert (manifest["n_images"], manifest["n_files"], manifest["n_missing"]) == (3, 3, 1)
    out = tmp_path / "m.json"
    assert write_manifest(out, manifest, stamps) is True
    os.utime(out, ns=(1_000_000_000, 1_000_000_000))
    (folder / "unrelated.txt").write_text("notes")                 # not in the list
    os.utime(folder / "1.jpg", ns=(2_000_000_000, 2_000_000_000))  # touched, same content
    # still missing 3.jpg: the refresh writes nothing and hands back the manifest that would
    # name it (for the refusal), so the refused plan leaves the file and its time as they were
    refused = refresh_manifest(tmp_path / "list.parquet", out, folder)
    assert refused["files"][2] == ["3.jpg", None, None] and refused["n_missing"] == 1
    assert out.stat().st_mtime_ns == 1_000_000_000                 # untouched
    (folder / "3.jpg").write_bytes(b"now here")                    # a needed image appears
    assert refresh_manifest(tmp_path / "list.parquet", out, folder) is True
    assert out.stat().st_mtime_ns > 1_000_000_000
    os.utime(out, ns=(1_000_000_000, 1_000_000_000))
    assert refresh_manifest(tmp_path / "list.parquet", out, folder) is False  # complete, unchanged
    assert out.stat().st_mtime_ns == 1_000_000_000
    assert refresh_manifest(tmp_path / "nolist.parquet", out, folder) is None


def test_a_refresh_reads_only_files_whose_size_or_time_changed(tmp_path, monkeypatch):
    """The stamps beside a manifest let a refresh skip hashing files it has seen: through a
    symlinked folder nothing is read; a touched file is read again (and keeps the manifest)."""
    from pseudopairs.data import manifest as module

    folder = tmp_path / "flickr"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.jpg").write_bytes(bytes([i]) * 30)
    _image_list(folder, [f"{i}.jpg" for i in range(3)], tmp_path / "list.parquet")
    out = tmp_path / "m.json"
    write_manifest(out, *image_manifest(tmp_path / "list.parquet", folder))
    hashed = []
    real = module.file_digest
    monkeypatch.setattr(module, "file_digest", lambda path: hashed.append(Path(path).name) or real(path))
    link = tmp_path / "scratch"
    link.symlink_to(folder)
    assert refresh_manifest(tmp_path / "list.parquet", out, link) is False and hashed == []
    os.utime(folder / "1.jpg", ns=(3_000_000_000, 3_000_000_000))
    assert refresh_manifest(tmp_path / "list.parquet", out, link) is False and hashed == ["1.jpg"]


# --------------------------------------------------------------------------------------------
# Through Snakemake: a paper workflow whose steps up to the test split's features are done


def _done_up_to_features(tmp_path: Path) -> tuple[Path, Path]:
    """A working directory where config/paper.yaml's steps up to the Multi30K test features
    exist (downloads, image list, manifest, features; oldest first) and a Flickr30K folder with
    the split's three images. Returns (site file, folder)."""
    import yaml

    folder = tmp_path / "flickr30k"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.jpg").write_bytes(b"\xff\xd8jpeg" + bytes([i]) * 20)
    site = tmp_path / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {folder}}}\n")
    m30k = yaml.safe_load(PAPER.read_text())["paper_data"]["multi30k"]
    upstream = m30k["task2_splits"]["test"]
    work = tmp_path / "work"
    downloads = [work / f"results/downloads/multi30k/task2/raw/{upstream}.{n}.{lang}.gz"
                 for n in range(1, 6) for lang in ("en", "de")]
    downloads.append(work / f"results/downloads/multi30k/task2/image_splits/{upstream}_images.txt")
    for path in downloads:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    images = work / layout.images("m30k", "test")
    _image_list(folder, [f"{i}.jpg" for i in range(3)], images)
    captions = work / layout.raw_captions("m30k", "test")
    captions.parent.mkdir(parents=True, exist_ok=True)
    captions.write_bytes(b"")
    manifest = work / layout.image_manifest("m30k", "test")
    write_manifest(manifest, *image_manifest(images, folder))
    features = [work / layout.features("m30k", "test", "npz"), work / layout.skipped_images("m30k", "test")]
    for path in features:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    start = time.time() - 1000
    for age, paths in enumerate([downloads, [images, captions], [manifest], features]):
        for path in paths:
            os.utime(path, (start + 100 * age, start + 100 * age))
    return site, folder


def _planned(work: Path, site: Path, *extra: str, env: dict | None = None):
    target = layout.features("m30k", "test", "npz")
    args = [target, "--cores", "1", *extra, "--configfile", str(PAPER), str(site)]
    if env is None:
        return run_snakemake(work, "-n", *args)
    import subprocess
    import sys

    from conftest import snakemake_exe

    full = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    return subprocess.run([snakemake_exe(), "-s", str(REPO / "Snakefile"), "-d", str(work), *args],
                          capture_output=True, text=True, timeout=600, env=full)


def _rules(result) -> set[str]:
    return set(re.findall(r"^(?:local)?rule (\w+):$", result.stdout, re.M))


def test_an_unrelated_file_in_the_flickr_folder_reruns_nothing_and_a_changed_image_its_features(tmp_path):
    site, folder = _done_up_to_features(tmp_path)
    work = tmp_path / "work"
    manifest = work / layout.image_manifest("m30k", "test")
    before = manifest.stat().st_mtime_ns
    result = _planned(work, site)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-3000:]
    # a file no split needs: nothing planned, the manifest untouched
    (folder / "README.txt").write_text("Flickr30K, distributed on request")
    (folder / "999.jpg").write_bytes(b"\xff\xd8other")
    result = _planned(work, site)
    assert result.returncode == 0 and "Nothing to be done" in result.stdout + result.stderr, result.stdout[-3000:]
    assert manifest.stat().st_mtime_ns == before
    # one of the split's images changed: its features (only) are planned
    (folder / "1.jpg").write_bytes(b"\xff\xd8changed image, other size")
    result = _planned(work, site)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _rules(result) == {"features"}, result.stdout[-3000:]
    assert manifest.stat().st_mtime_ns > before


def test_the_flickr_folder_through_another_path_reruns_nothing(tmp_path):
    """paper_data.flickr30k_images pointed at the same files through a symlink, or at a copy
    made without the files' times: the manifest (names relative to the folder, content digests)
    keeps its text, read_multi30k_task2 has no folder parameter, nothing is planned."""
    site, folder = _done_up_to_features(tmp_path)
    work = tmp_path / "work"
    manifest = work / layout.image_manifest("m30k", "test")
    before = manifest.stat().st_mtime_ns
    link = tmp_path / "scratch-link"
    link.symlink_to(folder)
    copy = tmp_path / "scratch-copy"
    shutil.copytree(folder, copy, copy_function=shutil.copyfile)
    for moved in (link, copy):
        other = tmp_path / f"site-{moved.name}.yaml"
        other.write_text(f"paper_data: {{flickr30k_images: {moved}}}\n")
        result = _planned(work, other)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-3000:]
    assert manifest.stat().st_mtime_ns == before


def test_a_split_with_missing_images_stops_the_dry_run_naming_the_count_and_the_first(tmp_path):
    """999 of 1,000 missing in the cluster's second week: here 2 of 3. The dry run already
    stops, naming the config key, the split, the count and the first files; no job ran."""
    site, folder = _done_up_to_features(tmp_path)
    work = tmp_path / "work"
    for name in ("0.jpg", "2.jpg"):
        (folder / name).unlink()
    result = _planned(work, site)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert (f"config key 'paper_data.flickr30k_images': split test of corpus 'm30k': 2 of 3 files are "
            f"missing from {folder} (first: 0.jpg, 2.jpg)") in text, text[-3000:]
    assert not (work / layout.log("features", "m30k.test")).exists()


def test_missing_imagenet_weights_stop_the_run_before_any_job_naming_torch_home(tmp_path):
    """With features jobs to run and the torch hub cache lacking the ResNet50 weights, the run
    stops at its start with one line naming TORCH_HOME; no job ran."""
    site, folder = _done_up_to_features(tmp_path)
    work = tmp_path / "work"
    (folder / "2.jpg").write_bytes(b"\xff\xd8changed")             # the features must rerun
    features = work / layout.features("m30k", "test", "npz")
    cache = tmp_path / "empty-torch-home"
    cache.mkdir()
    result = _planned(work, site, env={"TORCH_HOME": str(cache)})
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "TORCH_HOME=" in line]
    assert len(lines) == 1 and f"TORCH_HOME={cache}" in lines[0] and "1 features job(s)" in lines[0], lines
    assert features.exists() and features.stat().st_size == 0        # the job did not run
    assert not (work / layout.log("features", "m30k.test")).exists()


# --------------------------------------------------------------------------------------------
# Caption-table metadata, once per parse


def test_each_caption_table_is_read_once_per_parse_and_again_when_it_changes(tmp_path, monkeypatch):
    """Checking config/paper.yaml looks up the caption count of every pseudopair set's queries
    and database (dozens of lookups, 566K-row tables at the paper's size); each table is read
    once, and again only when it changes."""
    from pseudopairs.data import contract as data
    from pseudopairs.workflow.config import check_config, load_config

    monkeypatch.chdir(tmp_path)
    tables = {}
    for corpus, langs in (("coco", ["en"] * 50), ("m30k", ["en"] * 20 + ["de"] * 30)):
        path = Path(layout.captions(corpus, "train"))
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"image_id": [str(i // 5) for i in range(len(langs))], "lang": langs}).to_parquet(path)
        tables[corpus] = path
    import pyarrow.parquet as pq

    reads: list[str] = []
    real = pq.read_table

    def counting(source, *args, **kwargs):
        reads.append(str(source))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", counting)
    monkeypatch.setattr(data, "_LANG_COUNTS", {})
    config = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml", PAPER))
    lookups = 2 * len(config["pseudopairs"])
    assert lookups >= 42 and sorted(reads) == sorted(str(p) for p in tables.values())
    assert data.known_caption_count(config, "m30k.de") == 30 and data.known_caption_count(config, "coco.en") == 50
    assert len(reads) == 2
    pd.DataFrame({"image_id": ["0"] * 7, "lang": ["de"] * 7}).to_parquet(tables["m30k"])   # a new version
    assert data.known_caption_count(config, "m30k.de") == 7 and len(reads) == 3


# --------------------------------------------------------------------------------------------
# Bad input at scale: each a one-line error naming the file, or a counted, logged skip.
# (A duplicated image id is refused with its file and line by the readers: tests/test_readers.py.)

FEATURES = {"arch": "resnet18", "weights": "none", "resize": 36, "crop": 32, "dtype": "float32",
            "format": "npz", "batch_size": 4, "workers": 0, "device": "cpu", "shard_size": 4}


def _jpegs(folder: Path, n: int) -> pd.DataFrame:
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        path = folder / f"{1000 + i}.jpg"
        Image.fromarray((rng.random((48, 56, 3)) * 255).astype("uint8")).save(path, quality=90)
        rows.append((str(1000 + i), str(path)))
    return pd.DataFrame(rows, columns=["image_id", "path"])


def _features_cli(tmp_path: Path, images: pd.DataFrame, capsys, **settings):
    import json

    from pseudopairs import cli

    images.to_parquet(tmp_path / "list.parquet", index=False)
    out, skipped = tmp_path / "f.npz", tmp_path / "f.skipped.tsv"
    code = cli.main(["features", "--images", str(tmp_path / "list.parquet"), "--output", str(out),
                     "--skipped", str(skipped), "--settings", json.dumps({**FEATURES, **settings})])
    return code, capsys.readouterr(), out, skipped


def _error_lines(captured) -> list[str]:
    """stderr without the progress bars."""
    return [line for line in captured.err.splitlines() if line.strip() and "img/s]" not in line]


def test_a_truncated_jpeg_is_one_line_naming_it_or_a_listed_skip(tmp_path, capsys, caplog):
    images = _jpegs(tmp_path / "flickr", 5)
    bad = Path(images.loc[3, "path"])
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])       # cut in the scan data
    code, captured, out, skipped = _features_cli(tmp_path, images, capsys)
    err = _error_lines(captured)
    assert code == 1 and len(err) == 1 and "Traceback" not in captured.err, captured.err
    assert str(bad) in err[0] and "1003" in err[0] and "skip_unreadable" in err[0]
    assert not out.exists()
    # features.skip_unreadable: the image is left out, listed and counted
    with caplog.at_level("INFO"):
        code, captured, out, skipped = _features_cli(tmp_path, images, capsys, skip_unreadable=True)
    assert code == 0
    table = pd.read_csv(skipped, sep="\t", dtype=str)
    assert table["image_id"].tolist() == ["1003"] and table["path"].tolist() == [str(bad)]
    from pseudopairs.core.io import load_features

    assert load_features(out)[0] == ["1000", "1001", "1002", "1004"]
    assert "1 skipped" in caplog.text + captured.out + captured.err


def test_an_image_of_the_splits_missing_from_the_folder_is_one_line_naming_it(tmp_path, capsys):
    from pseudopairs import cli

    images = _jpegs(tmp_path / "flickr", 4)
    gone = Path(images.loc[2, "path"])
    gone.unlink()
    images.to_parquet(tmp_path / "list.parquet", index=False)
    # the manifest step stops here: the features job is never submitted
    assert cli.main(["image-manifest", "--images", str(tmp_path / "list.parquet"),
                     "--output", str(tmp_path / "m.json")]) == 1
    err = _error_lines(capsys.readouterr())
    assert len(err) == 1 and "1 of 4 files are missing" in err[0] and str(gone) in err[0], err
    assert not (tmp_path / "m.json").exists()
    for skip in (False, True):                                         # never a silent skip
        code, captured, out, _ = _features_cli(tmp_path, images, capsys, skip_unreadable=skip)
        err = _error_lines(captured)
        assert code == 1 and len(err) == 1 and str(gone) in err[0] and "1002" in err[0], captured.err
        assert "Traceback" not in captured.err
        assert not out.exists()


def test_a_300_token_caption_and_an_empty_caption_are_prepared_and_encoded(tmp_path, capsys, caplog):
    """Neither is cut nor crashes a step: the 300-token caption keeps its 300 tokens through the
    Moses preparation and is encoded in full; the empty caption is counted and logged, and
    encoded as a padding token (a finite unit vector)."""
    import torch

    from pseudopairs import cli
    from pseudopairs.data.vocab import build_vocabulary
    from pseudopairs.model.batches import TokenTable
    from pseudopairs.model.encode import encode_captions_texts
    from pseudopairs.model.encoders import RankingModel

    long = " ".join(["a", "dog", "runs", "on", "the", "grass"] * 50) + "."
    raws = ["A dog runs.", long, "   "] + [f"A cat number {i} sits." for i in range(200)]
    pd.DataFrame({"dataset": "coco", "split": "train", "image_id": [str(i // 5) for i in range(len(raws))],
                  "lang": "en", "caption_idx": [i % 5 for i in range(len(raws))], "raw": raws}
                 ).to_parquet(tmp_path / "raw.parquet", index=False)
    with caplog.at_level("WARNING"):
        code = cli.main(["prepare-captions", "--input", str(tmp_path / "raw.parquet"),
                         "--output", str(tmp_path / "out.parquet")])
    assert code == 0
    assert "1 of 203 en captions (after preparation) are empty" in caplog.text + capsys.readouterr().err
    texts = pd.read_parquet(tmp_path / "out.parquet")["text"].tolist()
    assert len(texts[1].split()) == 301 and texts[2] == ""
    vocab = build_vocabulary(texts, min_count=1)
    table = TokenTable.encode(vocab, texts)
    assert table.lengths[1] == 301 and table.lengths[2] == 0
    torch.manual_seed(0)
    model = RankingModel(len(vocab), embedding_dim=8, joint_dim=16, image_dim=4)
    embeddings = encode_captions_texts(model, vocab, texts, batch_size=64)
    assert embeddings.shape == (203, 16) and torch.isfinite(embeddings).all()
    assert torch.allclose(embeddings.norm(dim=1), torch.ones(203), atol=1e-5)
    # the long caption is encoded in full: a change of its last word changes its embedding
    changed = encode_captions_texts(model, vocab, [texts[1].rsplit(" ", 2)[0] + " dog ."])
    assert not torch.allclose(changed[0], embeddings[1])
