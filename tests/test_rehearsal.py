"""The rehearsal (config/rehearsal.yaml, pseudopairs.rehearsal): its inputs at the real counts on
a small Multi30K mirror, results/rehearsal.csv from benchmark files (fractions, extrapolation,
the login-node memory limit), and the rehearsal configuration's plan."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from conftest import REPO, run_snakemake
from pseudopairs.data.readers import read_coco_karpathy
from pseudopairs.rehearsal import data, summary
from pseudopairs.rehearsal.settings import RehearsalSettings
from pseudopairs.core.settings import SettingsError


def _gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


def _plain(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture()
def mirror(tmp_path):
    """A Multi30K mirror of 3 train, 1 val, 1 test image (task 1 and 2)."""
    root = tmp_path / "multi30k"
    train, val, test = ["1.jpg", "2.jpg", "3.jpg"], ["4.jpg"], ["5.jpg"]
    for name, images in (("train_images.txt", train), ("val_images.txt", val),
                         ("test_2016_images.txt", test)):
        _plain(root / "task2" / "image_splits" / name, images)
    for name, images in (("train.txt", train), ("val.txt", val), ("test_2016_flickr.txt", test)):
        _plain(root / "task1" / "image_splits" / name, images)
    for n in range(1, 6):
        _gz(root / "task2" / "raw" / f"train.{n}.en.gz", [f"a dog {n}", f"a cat {n}", f"a man {n}"])
        _gz(root / "task2" / "raw" / f"train.{n}.de.gz", [f"ein hund {n}", f"eine katze {n}", f"ein mann {n}"])
    for split, count in (("train", 3), ("val", 1)):
        _gz(root / "task1" / "raw" / f"{split}.en.gz", [f"{split} en {i}" for i in range(count)])
        _gz(root / "task1" / "raw" / f"{split}.de.gz", [f"{split} de {i}" for i in range(count)])
    return root


def _settings(root: Path, **over) -> RehearsalSettings:
    values = {"multi30k": str(root), "image_size": 16, "sixth_caption": 0.5,
              "coco": {"train": 4, "restval": 2, "val": 1, "test": 1}, **over}
    return RehearsalSettings.from_dict(values)


def _build(settings: RehearsalSettings, out: Path) -> dict:
    return data.build(settings, flickr_dir=out / "flickr", karpathy_zip=out / "coco" / "caption_datasets.zip",
                      coco_zip_dir=out / "coco", parallel_dir=out / "parallel")


def test_inputs_at_the_given_counts_readable_by_the_real_readers(mirror, tmp_path):
    out = tmp_path / "out"
    result = _build(_settings(mirror), out)
    assert result["flickr_images"] == 5 and result["coco_images"] == 8
    # one JPEG per image name of the lists, decodable at the set size
    assert sorted(p.name for p in (out / "flickr").iterdir()) == [f"{i}.jpg" for i in range(1, 6)]
    with Image.open(out / "flickr" / "3.jpg") as image:
        assert image.format == "JPEG" and image.size == (16, 16)
    # train-mt's text is task 1's, line for line
    assert (out / "parallel" / "train.de").read_text() == "train de 0\ntrain de 1\ntrain de 2\n"
    assert (out / "parallel" / "val.en").read_text() == "val en 0\n"
    # the Karpathy JSON through the real reader: train = train + restval, five captions each
    # (a sixth is dropped, as on the real file), every caption a Multi30K English sentence
    with zipfile.ZipFile(out / "coco" / "caption_datasets.zip") as zf:
        assert zf.namelist() == ["dataset_coco.json"]
        zf.extractall(out / "json")
    captions, images, stats = read_coco_karpathy(out / "json" / "dataset_coco.json", "train",
                                                 images_dir=out / "images")
    assert len(images) == 6 and len(captions) == 30
    pool = set(data.english_caption_pool(mirror))
    assert set(captions["raw"]) <= pool
    # every image named in the JSON is in its part's archive, under the part's folder
    payload = json.loads((out / "json" / "dataset_coco.json").read_text())
    for part in ("train2014", "val2014"):
        with zipfile.ZipFile(out / "coco" / f"{part}.zip") as zf:
            names = set(zf.namelist())
            with Image.open(io.BytesIO(zf.read(sorted(names)[0]))) as image:
                assert image.size == (16, 16)
        assert names == {f"{part}/{im['filename']}" for im in payload["images"] if im["filepath"] == part}
    assert {im["filepath"] for im in payload["images"] if im["split"] == "restval"} == {"val2014"}


def test_sixth_captions_are_dropped_by_read_coco(mirror, tmp_path):
    out = tmp_path / "out"
    _build(_settings(mirror, sixth_caption=1.0), out)
    with zipfile.ZipFile(out / "coco" / "caption_datasets.zip") as zf:
        zf.extractall(out / "json")
    payload = json.loads((out / "json" / "dataset_coco.json").read_text())
    assert all(len(im["sentences"]) == 6 for im in payload["images"])
    captions, _, stats = read_coco_karpathy(out / "json" / "dataset_coco.json", "test")
    assert len(captions) == 5 and stats["images_with_more_captions"] == 1 and stats["captions_dropped"] == 1


def test_inputs_are_a_function_of_the_settings(mirror, tmp_path):
    _build(_settings(mirror), tmp_path / "a")
    _build(_settings(mirror), tmp_path / "b")
    _build(_settings(mirror, seed=1), tmp_path / "c")
    read = lambda d: (d / "coco" / "caption_datasets.zip").read_bytes()  # noqa: E731
    assert read(tmp_path / "a") == read(tmp_path / "b") != read(tmp_path / "c")
    assert (tmp_path / "a" / "flickr" / "1.jpg").read_bytes() == (tmp_path / "b" / "flickr" / "1.jpg").read_bytes()
    assert data.pattern_jpeg(0, "1.jpg", 16) != data.pattern_jpeg(0, "2.jpg", 16)


def test_a_missing_mirror_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"image_splits/train_images.txt"):
        data.flickr_image_names(tmp_path / "nowhere")


def test_settings_refuse_a_reduced_entry_without_fraction_or_note(tmp_path):
    with pytest.raises(SettingsError, match=r"rehearsal.reduced"):
        RehearsalSettings.from_dict({"multi30k": "m", "reduced": {"mine": {"fraction": 0, "note": "x"}}})
    with pytest.raises(SettingsError, match=r"rehearsal.reduced"):
        RehearsalSettings.from_dict({"multi30k": "m", "reduced": {"mine": {"fraction": 0.5, "note": " "}}})


BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(path: Path, s: float, rss: float, out_mb: float, cpu: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BENCH_HEADER + f"{s}\t0:00:01\t{rss}\t1\t1\t1\t0.1\t{out_mb}\t50\t{cpu}\n")


def _tree(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    bench = results / "benchmarks"
    _bench(bench / "download_multi30k" / "task1" / "raw" / "train.en.gz.tsv", 1.0, 50, 2, 0.5)
    _bench(bench / "train" / "a.seed1.tsv", 30.0, 3000, 100, 55)
    _bench(bench / "train" / "b.seed1.tsv", 50.0, 2500, 120, 90)
    _bench(bench / "mine" / "a.seed1.tsv", 20.0, 6000, 10, 38)
    (results / "models").mkdir()
    (results / "models" / "w.pt").write_bytes(b"x" * 2_000_000)
    return results


def test_summary_rows_by_hand(tmp_path):
    results = _tree(tmp_path)
    rows = summary.summarise(benchmarks=results / "benchmarks", results=results,
                             reduced={"train": {"fraction": 0.01, "note": "100 updates"}},
                             login_rules=["download_multi30k"], login_limit_mb=2048)
    by_step = {r["step"]: r for r in rows}
    train = by_step["train"]
    assert (train["jobs"], train["wall_s"], train["longest_job_s"], train["cpu_s"]) == (2, 80.0, 50.0, 145.0)
    assert (train["peak_rss_mb"], train["written_mb"]) == (3000.0, 220.0)
    assert train["full_size_s"] == pytest.approx(8000.0) and train["how"].startswith("extrapolated")
    assert by_step["mine"]["full_size_s"] == 20.0 and by_step["mine"]["how"] == "measured"
    assert by_step["download_multi30k"]["login_node"] is True and by_step["train"]["login_node"] is False
    assert by_step["total (steps)"]["full_size_s"] == pytest.approx(1 + 8000 + 20)
    assert by_step["disk: " + (results / "models").as_posix()]["disk_mb"] == pytest.approx(2.0)
    text = summary.to_csv(rows)
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert tuple(parsed[0]) == summary.COLUMNS
    assert {r["step"]: r["full_size_s"] for r in parsed}["train"] == "8000.0"


def test_summary_refuses_a_login_node_rule_over_the_limit(tmp_path):
    results = _tree(tmp_path)
    with pytest.raises(ValueError, match=r"login-node rule 'mine' peaked at 6000 MB \(limit 2048 MB\)"):
        summary.summarise(benchmarks=results / "benchmarks", results=results, reduced={},
                          login_rules=["mine"], login_limit_mb=2048)


def test_summary_refuses_a_reduced_rule_that_did_not_run(tmp_path):
    results = _tree(tmp_path)
    with pytest.raises(ValueError, match=r"rehearsal.reduced names rule\(s\) .*\['translate'\]"):
        summary.summarise(benchmarks=results / "benchmarks", results=results,
                          reduced={"translate": {"fraction": 1.0, "note": "beam 1"}},
                          login_rules=[], login_limit_mb=2048)


def test_the_rehearsal_plans_table5_at_the_papers_size(tmp_path):
    """config/rehearsal.yaml over config/paper.yaml plans every step of Table 5 and the summary
    (one seed, the paper's rows) and the §7.2 statistics, mining on 5 % of COCO, with the
    train-mt translation."""
    flickr = tmp_path / "flickr"
    flickr.mkdir()
    site = tmp_path / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {flickr}, multi30k: {{base: {REPO.parent / 'shared' / 'data' / 'multi30k'}}}}}\n"
                    f"rehearsal: {{multi30k: {REPO.parent / 'shared' / 'data' / 'multi30k'}}}\n")
    proc = run_snakemake(tmp_path, "-n", "--cores", "2", "results/rehearsal.csv", "--configfile",
                         str(REPO / "config" / "paper.yaml"), str(REPO / "config" / "rehearsal.yaml"),
                         str(site))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    counts = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    for rule in ("rehearsal_data", "read_coco", "features", "train_mt", "translate", "train",
                 "evaluate", "mine", "pseudopair_captions", "pseudopair_stats", "table",
                 "rehearsal_summary"):
        assert counts.get(rule), (rule, counts)
    assert counts["train"] == counts["evaluate"] == 9
    # the §7.2 statistics of Table 5's one set (pseudopair_stats.sets), not the paper's 21
    assert counts["mine"] == 1 and counts["select_captions"] == 1 and counts["pseudopair_stats"] == 1
    assert "download_karpathy" not in counts and "download_coco_images" not in counts


# ---- bad input at scale, planted by the rehearsal and met by the real steps -------------------

FEATURES = {"arch": "resnet18", "weights": "none", "resize": 16, "crop": 16, "dtype": "float32",
            "format": "npz", "batch_size": 2, "workers": 0, "device": "cpu", "shard_size": 2}


def _step(capsys, *argv) -> tuple[int, list[str]]:
    """Run one step command; its exit code and its stderr lines without progress bars."""
    from pseudopairs import cli

    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, [line for line in err.splitlines() if line.strip() and "img/s]" not in line]


def _flickr_features(mirror, out, capsys):
    lists = out / "lists"
    assert _step(capsys, "read-multi30k", "--root", mirror, "--task", "task2", "--split", "train",
                 "--images-dir", out / "flickr", "--captions-out", lists / "c.parquet",
                 "--images-out", lists / "i.parquet")[0] == 0
    return _step(capsys, "features", "--images", lists / "i.parquet", "--output", out / "f.npz",
                 "--skipped", out / "f.skipped.tsv", "--settings", json.dumps(FEATURES))


@pytest.mark.parametrize("defect, index", [("truncated_jpeg", 0), ("missing_image", 1)])
def test_a_planted_bad_image_stops_features_with_one_line_naming_it(mirror, tmp_path, capsys, defect, index):
    out = tmp_path / "out"
    result = _build(_settings(mirror, defects=[defect]), out)
    bad = out / "flickr" / f"{index + 1}.jpg"
    assert result["defects"] == [f"{defect}: {bad}"]
    code, err = _flickr_features(mirror, out, capsys)
    assert code == 1 and len(err) == 1 and str(bad) in err[0], err
    assert not (out / "f.npz").exists()                 # nothing that looks complete


def test_planted_caption_defects_are_one_line_errors_or_kept_whole(mirror, tmp_path, capsys):
    import pandas as pd

    def read_coco(defects):
        out = tmp_path / "-".join(defects)
        _build(_settings(mirror, defects=defects), out)
        with zipfile.ZipFile(out / "coco" / "caption_datasets.zip") as zf:
            zf.extractall(out / "json")
        code, err = _step(capsys, "read-coco", "--karpathy-json", out / "json" / "dataset_coco.json",
                          "--split", "train", "--images-dir", out / "images",
                          "--captions-out", out / "c.parquet", "--images-out", out / "i.parquet")
        return out, code, err

    for defect, message in (("duplicate_image", r"images\[1\]: cocoid \d+ already used by images\[0\]"),
                            ("empty_caption", r"images\[0\]\.sentences\[1\]: empty caption")):
        out, code, err = read_coco([defect])
        assert code == 1 and len(err) == 1, err
        assert str(out / "json" / "dataset_coco.json") in err[0]
        assert re.search(message, err[0]), err[0]
        assert not (out / "c.parquet").exists()
    # the 300-token caption is read and prepared whole (301 tokens with the full stop)
    out, code, err = read_coco(["long_caption"])
    assert code == 0
    assert _step(capsys, "prepare-captions", "--input", out / "c.parquet", "--output", out / "p.parquet")[0] == 0
    texts = pd.read_parquet(out / "p.parquet")["text"].tolist()
    assert len(texts[0].split()) == 300 and texts[0].startswith("a dog runs on the grass")


def test_an_unknown_defect_is_refused_naming_the_key(mirror):
    with pytest.raises(SettingsError, match=r"rehearsal.defects"):
        _settings(mirror, defects=["gremlins"])
