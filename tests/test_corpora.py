"""Corpora as config data (pseudopairs.data.corpora): the registry of kinds and its config
checks, the generic readers (imagefolder, webdataset) against the built-in ones on the same demo
data, features read from shard members, and bad input in a user's files -- each one line naming
the file and row, or the shard and key, with nothing written."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from pandas.testing import assert_frame_equal

from conftest import REPO
from pseudopairs import cli
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.data import corpora
from pseudopairs.data.generic import CorpusError, read_corpus
from pseudopairs.world import generate

SPLITS = ("train", "val", "test")
WORLD = {"seed": 7, "image_size": 64, "captions_per_image": 5,
         "images": {"m30k": {"train": 6, "val": 3, "test": 3}, "coco": {"train": 6, "val": 3, "test": 3}}}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A small demo world and its two exports (the rules' commands)."""
    root = tmp_path_factory.mktemp("world")
    generate.build_world(WORLD, root / "results")
    for fmt, spec in corpora.WORLD_EXPORTS.items():
        raw = [str(root / f"results/captions/raw/{spec['captions']}/{s}.parquet") for s in SPLITS]
        images = [str(root / f"results/images/{spec['images']}/{s}.parquet") for s in SPLITS]
        assert cli.main(["export-world-corpus", "--format", fmt, "--captions", *raw, "--images", *images,
                         "--output", str(root / fmt)]) == 0
    return root


def _builtin(world: Path, corpus: str, split: str, lang: str | None = None) -> pd.DataFrame:
    table = pd.read_parquet(world / f"results/captions/raw/{corpus}/{split}.parquet")
    return table if lang is None else table[table["lang"] == lang].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# The registry and the config


def test_the_kinds_are_one_registry_the_schema_and_the_docs_read():
    from pseudopairs.workflow.config import load_schema

    kinds = corpora.CORPUS_KINDS.names()
    assert kinds == ["imagefolder", "webdataset", "world", "multi30k_task2", "multi30k_task1", "coco_karpathy"]
    entry = load_schema()["properties"]["corpora"]["additionalProperties"]
    assert entry["properties"]["kind"]["enum"] == kinds
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for line in corpora.docs_table().splitlines()[2:]:
        assert line in text, f"docs/architecture.md lacks the corpus kinds table row: {line}"


def _demo() -> dict:
    return load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")


@pytest.mark.parametrize("change, message", [
    (lambda c: c["corpora"].pop("coco"), "config key 'datasets.coco.en.corpus': corpus 'coco' is not declared"),
    (lambda c: c["corpora"].update(coco={"kind": "imagefolder", "root": "x", "lang": "en", "lang_column": "l"}),
     "config key 'corpora.coco.lang': give exactly one of lang"),
    (lambda c: c["corpora"].update(coco={"kind": "webdataset", "shards": "x/{0..3}/a.tar", "lang": "en"}),
     "config key 'corpora.coco.shards': only the file name may hold a brace pattern"),
    (lambda c: c["corpora"].update(coco={"kind": "imagefolder", "lang": "en"}),
     "config key 'corpora.coco': 'root' is a required property"),
    (lambda c: c["corpora"].update(coco={"kind": "coco_karpathy"}),
     "config key 'corpora.coco.kind': a coco_karpathy corpus needs data.source paper, not 'world'"),
    (lambda c: c["corpora"].update(photos={"kind": "world"}),
     "config key 'corpora.photos': the demo world makes the corpora m30k, m30k_task1, coco, not 'photos'"),
    (lambda c: c["datasets"]["m30k_task1.en"].update(images="m30k_task1"),
     "config key 'datasets.m30k_task1.en.images': corpus 'm30k_task1' has no images of its own"),
])
def test_a_wrong_corpus_declaration_is_refused_naming_the_key(change, message):
    config = _demo()
    change(config)
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert message in str(err.value)


def test_the_own_data_configuration_checks_and_declares_its_corpora():
    config = load_config(REPO / "config" / "config.yaml", REPO / "config" / "own-data.yaml")
    check_config(config)
    assert [corpora.corpus_kind(config, c).name for c in ("photos", "cartes")] == ["imagefolder", "webdataset"]
    assert corpora.external_corpora(config) == ["photos", "cartes"]
    assert corpora.image_root(config, "cartes") == "results/own_data/exported/webdataset"
    # what the tables depend on: not the folder
    assert corpora.reading_settings(config, "cartes") == {"kind": "webdataset", "shards": "{00000..00004}.tar",
                                                          "lang": "fr"}
    assert corpora.reading_settings(config, "photos") == {"kind": "imagefolder", "lang": "en"}


def test_brace_patterns_expand_like_a_shell():
    assert corpora.expand_braces("{00000..00002}.tar") == ["00000.tar", "00001.tar", "00002.tar"]
    assert corpora.expand_braces("s-{a,b}-{8..10}.tar") == ["s-a-8.tar", "s-a-9.tar", "s-a-10.tar",
                                                            "s-b-8.tar", "s-b-9.tar", "s-b-10.tar"]
    with pytest.raises(ValueError, match="neither"):
        corpora.expand_braces("{x}.tar")


# --------------------------------------------------------------------------------------------
# Generic readers = built-in readers on the same data


def test_the_exported_world_read_back_gives_the_built_in_caption_tables(world):
    photos = read_corpus("coco", {"kind": "imagefolder", "root": "unused", "lang": "en"}, world / "imagefolder")
    cartes = read_corpus("m30k_task1", {"kind": "webdataset", "shards": "x/{00000..00000}.tar", "lang": "fr"},
                         world / "webdataset")
    for split in SPLITS:
        assert_frame_equal(photos[split][0], _builtin(world, "coco", split))
        assert_frame_equal(cartes[split][0], _builtin(world, "m30k_task1", split, "fr"))
        builtin_images = pd.read_parquet(world / f"results/images/coco/{split}.parquet")
        assert photos[split][1]["image_id"].tolist() == builtin_images["image_id"].tolist()
        assert photos[split][1]["path"].tolist() == [f"{i}.png" for i in builtin_images["image_id"]]
    # the language from a column, the shards from a folder: the same tables
    by_column = read_corpus("coco", {"kind": "imagefolder", "root": "x", "lang_column": "lang"}, world / "imagefolder")
    by_folder = read_corpus("m30k_task1", {"kind": "webdataset", "shards": "x", "lang": "fr"}, world / "webdataset")
    for split in SPLITS:
        assert_frame_equal(by_column[split][0], photos[split][0])
        assert_frame_equal(by_folder[split][0], cartes[split][0])


def test_without_a_split_column_the_split_is_seeded_and_sized(world, tmp_path):
    folder = tmp_path / "photos"
    shutil.copytree(world / "imagefolder", folder)
    meta = pd.read_csv(folder / "metadata.csv").drop(columns="split")
    meta.to_csv(folder / "metadata.csv", index=False)
    declaration = {"kind": "imagefolder", "root": "x", "lang": "en", "split_sizes": {"val": 2, "test": 3}, "seed": 4}
    tables = read_corpus("photos", declaration, folder)
    assert [len(tables[s][1]) for s in SPLITS] == [7, 2, 3]
    # the rows' order does not matter, the seed does
    meta.iloc[::-1].to_csv(folder / "metadata.csv", index=False)
    again = read_corpus("photos", declaration, folder)
    assert [sorted(again[s][1]["image_id"]) for s in SPLITS] == [sorted(tables[s][1]["image_id"]) for s in SPLITS]
    other = read_corpus("photos", {**declaration, "seed": 5}, folder)
    assert [sorted(other[s][1]["image_id"]) for s in SPLITS] != [sorted(tables[s][1]["image_id"]) for s in SPLITS]
    assert sum(len(tables[s][0]) for s in SPLITS) == len(meta)


def test_jsonl_and_parquet_metadata_give_the_csv_tables(world, tmp_path):
    csv_tables = read_corpus("c", {"kind": "imagefolder", "root": "x", "lang": "en"}, world / "imagefolder")
    meta = pd.read_csv(world / "imagefolder" / "metadata.csv")
    for suffix in ("jsonl", "parquet"):
        folder = tmp_path / suffix
        shutil.copytree(world / "imagefolder", folder)
        (folder / "metadata.csv").unlink()
        if suffix == "jsonl":
            meta.to_json(folder / "metadata.jsonl", orient="records", lines=True, force_ascii=False)
        else:
            meta.to_parquet(folder / "metadata.parquet", index=False)
        tables = read_corpus("c", {"kind": "imagefolder", "root": "x", "lang": "en"}, folder)
        for split in SPLITS:
            assert_frame_equal(tables[split][0], csv_tables[split][0])


def test_features_read_from_shard_members_equal_those_of_the_image_files(world, tmp_path):
    """The webdataset's image list points into the shards (byte offset and size): its features
    are those of the same PNG files read one by one."""
    from pseudopairs.features.extract import extract_features
    from pseudopairs.features.settings import FeatureSettings

    cartes = read_corpus("m30k", {"kind": "webdataset", "shards": "x", "lang": "fr"}, world / "webdataset")
    members = cartes["test"][1]
    files = pd.read_parquet(world / "results/images/m30k/test.parquet")
    assert members["image_id"].tolist() == files["image_id"].tolist()
    settings = FeatureSettings(arch="resnet18", resize=32, crop=32, dtype="float32", workers=0, device="cpu",
                               batch_size=2)
    from_shards = extract_features(members, settings=settings, progress=False, root=world / "webdataset")
    from_files = extract_features(files, settings=settings, progress=False)
    assert from_shards.image_ids == from_files.image_ids
    np.testing.assert_array_equal(from_shards.features, from_files.features)
    # features.decode: device reads the same members (its CPU-side dataset; nvJPEG needs a GPU)
    from pseudopairs.features.decode import FileDataset
    from pseudopairs.features.extract import image_sources

    sources = image_sources(members, world / "webdataset")
    on_device = FileDataset(sources.files, resize=32, crop=32, ranges=sources.ranges)
    one_by_one = FileDataset(files["path"].tolist(), resize=32, crop=32)
    for row in range(len(files)):
        (_, (kind, a), failure, _), (_, (_, b), _, _) = on_device[row], one_by_one[row]
        assert kind == "ready" and failure is None and torch.equal(a, b)   # PNGs: decoded on the CPU
    offset, size = sources.ranges[0]
    cut = FileDataset([sources.files[0]], resize=32, crop=32, ranges=[(offset, os.path.getsize(sources.files[0]))])
    assert cut[0][2] == "unreadable" and "bytes before the image does" in cut[0][3]


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the file and row, or the shard and key; nothing written


def _read_cli(tmp_path: Path, corpus_dir: Path, declaration: dict, capsys) -> tuple[int, list[str]]:
    outs = [str(tmp_path / "out" / f"{kind}.{s}.parquet") for kind in ("captions", "images") for s in SPLITS]
    code = cli.main(["read-corpus", "--corpus", "c", "--declaration", json.dumps(declaration),
                     "--root", str(corpus_dir), "--captions-out", *outs[:3], "--images-out", *outs[3:]])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())   # nothing written
    return code, lines


def _folder(world: Path, tmp_path: Path, edit=None, text: str | None = None) -> Path:
    folder = tmp_path / "photos"
    shutil.copytree(world / "imagefolder", folder)
    if edit is not None:
        edit(pd.read_csv(folder / "metadata.csv")).to_csv(folder / "metadata.csv", index=False)
    if text is not None:
        (folder / "metadata.csv").write_bytes(text.encode("latin-1"))
    return folder


IMAGEFOLDER = {"kind": "imagefolder", "root": "x", "lang": "en"}


def _duplicate_row(meta: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([meta, meta.iloc[[3]]], ignore_index=True)


def _two_splits(meta: pd.DataFrame) -> pd.DataFrame:
    return meta.assign(split=[("test" if i == 1 else s) for i, s in enumerate(meta["split"])])


@pytest.mark.parametrize("edit, declaration, expected", [
    (lambda m: m.drop(columns="text"), IMAGEFOLDER,
     "metadata.csv: no column 'text' (columns: file_name, lang, split); set caption_column"),
    (lambda m: m.assign(text=m["text"].where(m.index != 7, "  ")), IMAGEFOLDER,
     "metadata.csv:9: empty caption (column 'text') for coco_train_000001.png"),
    (_duplicate_row, IMAGEFOLDER, "metadata.csv:62: duplicate row: coco_train_000000.png has this en caption "
                                  "already at"),
    (_two_splits, IMAGEFOLDER, "metadata.csv:3: coco_train_000000.png is in split 'test' here and in 'train' at"),
    (lambda m: m[m["split"] != "test"], IMAGEFOLDER, "metadata.csv: split 'test' has no images ('split' holds train, val)"),
    (lambda m: m.drop(columns="split"), {**IMAGEFOLDER, "split_sizes": {"val": 6, "test": 6}},
     "config key 'corpora.c.split_sizes': val 6 + test 6 leave split 'train' no images (the corpus has 12)"),
    (lambda m: m.drop(columns="split"), IMAGEFOLDER,  # the folder's path sits between the two parts
     ("pseudopairs read-corpus: error: config key 'corpora.c.split_sizes': ",
      "/metadata.csv gives no 'split'; set split_sizes (val, test) for a seeded split")),
])
def test_bad_imagefolder_metadata_is_one_line_naming_file_and_line(world, tmp_path, capsys, edit, declaration, expected):
    folder = _folder(world, tmp_path, edit)
    code, lines = _read_cli(tmp_path, folder, declaration, capsys)
    assert code == 1 and len(lines) == 1, lines
    if isinstance(expected, tuple):  # the line begins with the first part and ends with the second
        assert lines[0].startswith(expected[0]) and lines[0].endswith(expected[1]), lines[0]
    else:
        assert expected in lines[0], lines[0]


def test_metadata_not_in_utf8_is_named_with_its_line(world, tmp_path, capsys):
    text = (world / "imagefolder" / "metadata.csv").read_text(encoding="utf-8").split("\n")
    text[4] = text[4].replace("A ", "Ä ", 1) if "A " in text[4] else text[4] + "Ä"
    folder = _folder(world, tmp_path, text="\n".join(text))
    code, lines = _read_cli(tmp_path, folder, IMAGEFOLDER, capsys)
    assert code == 1 and len(lines) == 1 and "metadata.csv:5: not UTF-8 (byte 0xc4 at column 80)" in lines[0], lines


def test_a_missing_image_is_named_with_its_row_and_the_count(world, tmp_path, capsys):
    folder = _folder(world, tmp_path)
    for name in ("coco_val_000001.png", "coco_test_000002.png"):
        (folder / name).unlink()
    code, lines = _read_cli(tmp_path, folder, IMAGEFOLDER, capsys)
    assert code == 1 and len(lines) == 1, lines
    assert "metadata.csv:37: image coco_val_000001.png not found in" in lines[0]
    assert "(2 of 12 images missing; first: coco_val_000001.png, coco_test_000002.png)" in lines[0]


def _shards(world: Path, tmp_path: Path, change=None) -> Path:
    """The exported shard with ``change(key, ext, data) -> data | None`` applied to each member
    (None drops it); extra members are appended with ``change(None, ...)`` returning a list."""
    folder = tmp_path / "cartes"
    folder.mkdir()
    with tarfile.open(world / "webdataset" / "00000.tar") as src, \
            tarfile.open(folder / "00000.tar", "w", format=tarfile.USTAR_FORMAT) as dst:
        for member in src:
            data = src.extractfile(member).read()
            key, _, ext = member.name.partition(".")
            data = change(key, ext, data) if change else data
            if data is None:
                continue
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    return folder


WEBDATASET = {"kind": "webdataset", "shards": "x", "lang": "fr"}


@pytest.mark.parametrize("change, expected", [
    (lambda k, e, d: None if (k, e) == ("m30k_train_000002", "png") else d,
     "00000.tar: sample 'm30k_train_000002' has no image (m30k_train_000002.jpg, .png or .webp)"),
    (lambda k, e, d: None if (k, e) == ("m30k_val_000000", "txt") else d,
     "00000.tar: sample 'm30k_val_000000' has no caption (m30k_val_000000.txt)"),
    (lambda k, e, d: b" \n" if (k, e) == ("m30k_test_000001", "txt") else d,
     "00000.tar: sample 'm30k_test_000001': m30k_test_000001.txt is empty"),
    (lambda k, e, d: "un chat gâté".encode("latin-1") if (k, e) == ("m30k_train_000001", "txt") else d,
     "00000.tar: m30k_train_000001.txt is not UTF-8 (byte 0xe2 at offset 9)"),
    (lambda k, e, d: d.replace(b'"test"', b'"train"') if e == "json" else d,
     "00000.tar ({key}.json): split 'test' has no images ('split' holds train, val)"),
])
def test_bad_shard_members_are_one_line_naming_shard_and_key(world, tmp_path, capsys, change, expected):
    folder = _shards(world, tmp_path, change)
    code, lines = _read_cli(tmp_path, folder, WEBDATASET, capsys)
    assert code == 1 and len(lines) == 1, lines
    assert expected in lines[0], lines[0]


def test_a_key_in_two_shards_is_named_with_both(world, tmp_path, capsys):
    folder = _shards(world, tmp_path)
    shutil.copy(folder / "00000.tar", folder / "00001.tar")
    code, lines = _read_cli(tmp_path, folder, WEBDATASET, capsys)
    assert code == 1 and len(lines) == 1, lines
    assert "00001.tar: sample 'm30k_train_000000': key 'm30k_train_000000' appears twice (also in 00000.tar)" in lines[0]


def test_a_corrupt_image_fails_its_features_naming_the_file_or_the_shard_and_key(world, tmp_path, capsys):
    """A truncated PNG in an imagefolder and in a shard: the features step names the file, or
    the shard and the member (the key), in one line; no feature file is written."""
    folder = _folder(world, tmp_path)
    png = folder / "coco_test_000001.png"
    png.write_bytes(png.read_bytes()[:60])
    shards = _shards(world, tmp_path, lambda k, e, d: d[:60] if (k, e) == ("m30k_test_000002", "png") else d)
    cases = [(folder, IMAGEFOLDER, f"image 'coco_test_000001': cannot decode {png}"),
             (shards, WEBDATASET, f"image 'm30k_test_000002': cannot decode {shards / '00000.tar'}[m30k_test_000002.png]")]
    for root, declaration, expected in cases:
        tables = read_corpus("c", declaration, root)
        tables["test"][1].to_parquet(tmp_path / "list.parquet", index=False)
        out = tmp_path / f"{root.name}.npz"
        settings = {"arch": "resnet18", "resize": 32, "crop": 32, "workers": 0, "device": "cpu"}
        code = cli.main(["features", "--images", str(tmp_path / "list.parquet"), "--output", str(out),
                         "--skipped", str(tmp_path / "skipped.tsv"), "--settings", json.dumps(settings),
                         "--image-root", str(root)])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "img/s]" not in line]
        assert code == 1 and len(lines) == 1 and expected in lines[0], lines
        assert not out.exists()


def test_a_language_of_its_own_corpus_is_validated_and_tested_on_that_corpus_images():
    """config/own-data.yaml: French on the webdataset (the evaluation corpus), English on the
    imagefolder (evaluation.lang_corpora): each language's captions with its own corpus' images
    in the training job's validation and the evaluation job's test; no translation retrieval. The
    shipped configurations' specs keep their keys (tests/test_workflow.py plans them)."""
    from pseudopairs.evaluation.contract import evaluation_data, evaluation_job
    from pseudopairs.evaluation.job import LangTest
    from pseudopairs.model.contract import training_inputs, training_spec

    config = check_config(load_config(REPO / "config" / "config.yaml", REPO / "config" / "own-data.yaml"))
    validation = training_spec(config, "fr_photos_pseudo", 1)["validation"]
    assert validation == {"captions": "results/captions/cartes/val.parquet",
                          "features": "results/features/cartes/val.npz", "langs": ["fr", "en"],
                          "lang_captions": {"en": "results/captions/photos/val.parquet"},
                          "lang_features": {"en": "results/features/photos/val.npz"}}
    assert "results/features/photos/val.npz" in training_inputs(config, "fr_photos_pseudo", 1)
    data = evaluation_data(config, "fr_photos")
    assert (data.captions, data.features, data.langs) == ("results/captions/cartes/test.parquet",
                                                          "results/features/cartes/test.npz", ["fr", "en"])
    assert data.lang_tests == {"en": LangTest(captions="results/captions/photos/test.parquet",
                                              features="results/features/photos/test.npz")}
    assert (data.translation_captions, data.translation_langs) == (None, [])
    assert {"results/captions/photos/test.parquet", "results/features/photos/test.npz"} <= set(
        evaluation_job(config, "fr_photos", 1).inputs())
    paper = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                                     REPO / "config" / "paper.yaml"))
    assert "lang_features" not in training_spec(paper, "t_multi", 1)["validation"]
    paper_data = evaluation_data(paper, "en_de")
    assert paper_data.lang_tests == {} and paper_data.translation_langs == ["en", "de"]
    bad = load_config(REPO / "config" / "config.yaml", REPO / "config" / "own-data.yaml")
    del bad["evaluation"]["lang_corpora"]
    with pytest.raises(ConfigError, match="config key 'evaluation.langs.1': no data set of corpus 'cartes' "
                                          "has language 'en'"):
        check_config(bad)
