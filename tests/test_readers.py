"""Readers on the real Multi30K files, on small malformed copies of them, and on a small
Karpathy-format COCO fixture."""

from __future__ import annotations

import gzip
import json
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from pseudopairs import cli
from pseudopairs.core.io import IMAGE_COLUMNS, RAW_CAPTION_COLUMNS
from pseudopairs.data.readers import (
    multi30k_image_table,
    read_coco_karpathy,
    read_multi30k,
    read_multi30k_task1,
    read_multi30k_task2,
)

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"real Multi30K mirror not found at {MIRROR}")
FIXTURES = Path(__file__).resolve().parent / "data" / "readers"
KARPATHY = FIXTURES / "dataset_coco_small.json"


def main(argv):
    """The real ``pseudopairs`` entry point (it imports only the module of the command)."""
    return cli.main(argv)


def gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as handle:
        return handle.read().split("\n")[:-1]


def write_gz(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as handle:
        handle.write(data)


# --- a tiny hand-written Multi30K root: exact expected rows -----------------------------------


def make_mini_root(root: Path) -> None:
    (root / "task2" / "image_splits").mkdir(parents=True)
    (root / "task2" / "image_splits" / "test_2016_images.txt").write_text("111.jpg\n222.jpg\n")
    for lang in ("en", "de"):
        for n in range(1, 6):
            write_gz(root / "task2" / "raw" / f"test_2016.{n}.{lang}.gz",
                     f"{lang} a{n}\n{lang} b{n}\n".encode())
    (root / "task1" / "image_splits").mkdir(parents=True)
    (root / "task1" / "image_splits" / "val.txt").write_text("111.jpg\n222.jpg\n333.jpg\n")
    write_gz(root / "task1" / "raw" / "val.en.gz", b"One.\nTwo.\nThree.\n")
    write_gz(root / "task1" / "raw" / "val.de.gz", "Eins.\nZwei.\nDrei.".encode())  # no final newline


def test_mini_task2_rows_in_order(tmp_path):
    make_mini_root(tmp_path)
    table, names = read_multi30k_task2(tmp_path, "test_2016")
    assert names == ["111.jpg", "222.jpg"]
    assert list(table.columns) == RAW_CAPTION_COLUMNS
    expected = [("111", lang, n - 1, f"{lang} a{n}") for lang in ("en", "de") for n in range(1, 6)]
    expected += [("222", lang, n - 1, f"{lang} b{n}") for lang in ("en", "de") for n in range(1, 6)]
    got = list(zip(table.image_id, table.lang, table.caption_idx, table.raw))
    assert got == expected
    assert set(table.dataset) == {"m30k"} and set(table.split) == {"test"}
    assert table.caption_idx.dtype == "int64"


def test_mini_task1_languages_present_only(tmp_path):
    make_mini_root(tmp_path)
    table, names = read_multi30k_task1(tmp_path, "val")
    assert list(zip(table.image_id, table.lang, table.caption_idx, table.raw)) == [
        ("111", "en", 0, "One."), ("111", "de", 0, "Eins."),
        ("222", "en", 0, "Two."), ("222", "de", 0, "Zwei."),
        ("333", "en", 0, "Three."), ("333", "de", 0, "Drei."),
    ]
    assert set(table.dataset) == {"m30k_task1"} and set(table.split) == {"val"}
    with pytest.raises(FileNotFoundError, match=r"val\.fr\.gz: missing caption file"):
        read_multi30k_task1(tmp_path, "val", langs=["en", "fr"])


def test_unknown_split_names_the_file_and_known_splits(tmp_path):
    make_mini_root(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"test_2017_images\.txt: missing image list .*test_2016"):
        read_multi30k_task2(tmp_path, "test_2017", canonical_split="test")
    with pytest.raises(ValueError, match="no canonical name"):
        read_multi30k_task2(tmp_path, "weird")


# --- the real files ---------------------------------------------------------------------------


@needs_mirror
def test_real_task2_test_2016():
    table, names = read_multi30k(MIRROR, task="task2", split="test_2016")
    assert len(table) == 10_000 and len(names) == 1_000
    assert list(table.columns) == RAW_CAPTION_COLUMNS
    assert set(table.dataset) == {"m30k"} and set(table.split) == {"test"}
    split_ids = [Path(line).stem for line in
                 (MIRROR / "task2/image_splits/test_2016_images.txt").read_text().splitlines()]
    assert table.image_id.iloc[::10].tolist() == split_ids
    assert split_ids[0] == "1007129816"
    assert (table.groupby("image_id", sort=False).size() == 10).all()
    # row 10*i + 5*lang + (n-1) is line i of test_2016.{n}.{lang}.gz
    for li, lang in enumerate(("en", "de")):
        for n in range(1, 6):
            lines = gz_lines(MIRROR / "task2" / "raw" / f"test_2016.{n}.{lang}.gz")
            rows = table.iloc[5 * li + (n - 1)::10]
            assert rows.raw.tolist() == lines
            assert set(rows.lang) == {lang} and set(rows.caption_idx) == {n - 1}
    assert table.raw.iloc[0] == "The man with pierced ears is wearing glasses and an orange hat."


@needs_mirror
def test_real_task1_train():
    table, names = read_multi30k_task1(MIRROR, "train")
    assert len(names) == 29_000
    assert table.lang.iloc[:4].tolist() == ["en", "de", "fr", "cs"]
    assert table.lang.value_counts().to_dict() == {"en": 29_000, "de": 29_000, "fr": 29_000, "cs": 29_000}
    assert set(table.caption_idx) == {0} and set(table.split) == {"train"}
    split_ids = [Path(x).stem for x in (MIRROR / "task1/image_splits/train.txt").read_text().splitlines()]
    assert table.image_id.iloc[::4].tolist() == split_ids
    en, de = gz_lines(MIRROR / "task1/raw/train.en.gz"), gz_lines(MIRROR / "task1/raw/train.de.gz")
    assert table.raw.iloc[0::4].tolist() == en and table.raw.iloc[1::4].tolist() == de
    assert table.raw.iloc[1] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."


@needs_mirror
def test_real_task1_test_is_same_images_as_task2_test():
    t1, names1 = read_multi30k_task1(MIRROR, "test_2016_flickr", langs=["en", "de"])
    t2, names2 = read_multi30k_task2(MIRROR, "test_2016")
    assert len(t1) == 2_000 and set(t1.split) == {"test"}
    assert t1.image_id.iloc[::2].tolist() == t2.image_id.iloc[::10].tolist()


@needs_mirror
def test_cli_read_multi30k(tmp_path):
    caps, imgs = tmp_path / "captions" / "test.parquet", tmp_path / "images" / "test.parquet"
    assert main(["read-multi30k", "--root", str(MIRROR), "--task", "task2", "--split", "test_2016",
                 "--canonical-split", "test", "--images-dir", "data/flickr30k",
                 "--captions-out", str(caps), "--images-out", str(imgs)]) == 0
    table = pd.read_parquet(caps)
    assert len(table) == 10_000 and list(table.columns) == RAW_CAPTION_COLUMNS
    images = pd.read_parquet(imgs)
    assert list(images.columns) == IMAGE_COLUMNS and len(images) == 1_000
    assert images.iloc[0].tolist() == ["1007129816", "data/flickr30k/1007129816.jpg"]
    assert images.image_id.tolist() == table.image_id.iloc[::10].tolist()
    out = tmp_path / "t1.parquet"
    assert main(["read-multi30k", "--root", str(MIRROR), "--task", "task1", "--split", "val",
                 "--langs", "en,de", "--captions-out", str(out)]) == 0
    t1 = pd.read_parquet(out)
    assert len(t1) == 2 * 1_014 and set(t1.dataset) == {"m30k_task1"} and set(t1.split) == {"val"}


# --- malformed copies of the real files -------------------------------------------------------


@pytest.fixture()
def small_copy(tmp_path):
    """task2 test_2016 (+ task1 test_2016_flickr en/de) copied from the mirror, cut to 20 images."""
    if not MIRROR.is_dir():
        pytest.skip(f"real Multi30K mirror not found at {MIRROR}")
    root = tmp_path / "m30k"
    split_file = root / "task2/image_splits/test_2016_images.txt"
    split_file.parent.mkdir(parents=True)
    lines = (MIRROR / "task2/image_splits/test_2016_images.txt").read_text().splitlines()[:20]
    split_file.write_text("\n".join(lines) + "\n")
    for lang in ("en", "de"):
        for n in range(1, 6):
            rel = f"task2/raw/test_2016.{n}.{lang}.gz"
            text = "\n".join(gz_lines(MIRROR / rel)[:20]) + "\n"
            write_gz(root / rel, text.encode("utf-8"))
    shutil.copytree(MIRROR / "task1", root / "task1",
                    ignore=lambda d, names: [x for x in names if x not in
                                             ("raw", "image_splits", "test_2016_flickr.txt",
                                              "test_2016_flickr.en.gz", "test_2016_flickr.de.gz")])
    return root


def _rewrite(path: Path, edit) -> None:
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    write_gz(path, edit(data))


def test_copy_reads_back(small_copy):
    table, names = read_multi30k_task2(small_copy, "test_2016")
    assert len(table) == 200 and len(names) == 20
    assert table.raw.iloc[0] == gz_lines(MIRROR / "task2/raw/test_2016.1.en.gz")[0]
    t1, _ = read_multi30k_task1(small_copy, "test_2016_flickr")
    assert t1.lang.unique().tolist() == ["en", "de"] and len(t1) == 2_000


def test_mismatched_line_count(small_copy):
    path = small_copy / "task2/raw/test_2016.3.de.gz"
    _rewrite(path, lambda d: b"\n".join(d.split(b"\n")[:17]) + b"\n")  # 17 of 20 lines
    with pytest.raises(ValueError) as err:
        read_multi30k_task2(small_copy, "test_2016")
    assert str(err.value) == (f"{path}: 17 caption lines, expected 20 (one per image in "
                              f"{small_copy / 'task2/image_splits/test_2016_images.txt'})")


def _replace_line(path, number: int, content: bytes) -> None:
    """Line ``number`` (1-based) of the gzipped file ``path`` becomes ``content``."""

    def replace(data: bytes) -> bytes:
        lines = data.split(b"\n")
        lines[number - 1] = content
        return b"\n".join(lines)

    _rewrite(path, replace)


def test_mismatched_line_count_task1(small_copy):
    path = small_copy / "task1/raw/test_2016_flickr.de.gz"
    _rewrite(path, lambda d: d + "Ein zusätzlicher Satz.\n".encode())
    with pytest.raises(ValueError, match=rf"{path}: 1001 caption lines, expected 1000"):
        read_multi30k_task1(small_copy, "test_2016_flickr")


def test_empty_caption_line(small_copy):
    path = small_copy / "task2/raw/test_2016.2.en.gz"

    _replace_line(path, 7, b"   ")
    with pytest.raises(ValueError, match=rf"^{path}:7: empty caption$"):
        read_multi30k_task2(small_copy, "test_2016")


def test_invalid_utf8(small_copy):
    path = small_copy / "task2/raw/test_2016.5.de.gz"

    _replace_line(path, 12, "Ein Mädchen läuft.".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"^{path}:12: invalid UTF-8"):
        read_multi30k_task2(small_copy, "test_2016")


def test_missing_caption_file(small_copy):
    path = small_copy / "task2/raw/test_2016.4.en.gz"
    path.unlink()
    with pytest.raises(FileNotFoundError, match=rf"^{path}: missing caption file"):
        read_multi30k_task2(small_copy, "test_2016")


def test_missing_split_in_cli(small_copy, tmp_path, capsys):
    out = tmp_path / "x.parquet"
    assert main(["read-multi30k", "--root", str(small_copy), "--task", "task2", "--split", "val",
                 "--captions-out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "val_images.txt: missing image list for Multi30K task2 split 'val'" in err
    assert not out.exists()


def test_corrupt_gzip_and_duplicate_image(small_copy):
    path = small_copy / "task2/raw/test_2016.1.en.gz"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match=rf"^{path}: cannot read caption file"):
        read_multi30k_task2(small_copy, "test_2016")
    split_file = small_copy / "task2/image_splits/test_2016_images.txt"
    lines = split_file.read_text().splitlines()
    split_file.write_text("\n".join(lines + [lines[3]]) + "\n")
    with pytest.raises(ValueError, match=rf"{split_file}:21: image id '{Path(lines[3]).stem}' already listed on line 4"):
        read_multi30k_task2(small_copy, "test_2016")


# --- COCO (Karpathy) --------------------------------------------------------------------------


def test_coco_train_is_train_plus_restval():
    captions, images, stats = read_coco_karpathy(KARPATHY, "train", images_dir="/data/coco")
    assert images.image_id.tolist() == ["9", "42", "25"]
    assert images.path.tolist() == ["/data/coco/train2014/COCO_train2014_000000000009.jpg",
                                    "/data/coco/val2014/COCO_val2014_000000000042.jpg",
                                    "/data/coco/train2014/COCO_train2014_000000000025.jpg"]
    assert list(captions.columns) == RAW_CAPTION_COLUMNS and len(captions) == 15
    assert captions.image_id.tolist() == ["9"] * 5 + ["42"] * 5 + ["25"] * 5
    assert captions.caption_idx.tolist() == [0, 1, 2, 3, 4] * 3
    cats = captions[captions.image_id == "42"].raw.tolist()  # 7 sentences: the first 5 kept
    assert cats == ["Two cats sit on a sofa  "] + [f"Two cats sit on a sofa number {k}." for k in (2, 3, 4, 5)]
    assert set(captions.dataset) == {"coco"} and set(captions.lang) == {"en"} and set(captions.split) == {"train"}
    assert stats == {"split": "train", "karpathy_splits": ["train", "restval"], "images": 3, "captions": 15,
                     "max_captions": 5, "images_with_more_captions": 1, "images_with_fewer_captions": 0,
                     "captions_dropped": 2}


def test_coco_val_test_and_no_cap():
    captions, images, stats = read_coco_karpathy(KARPATHY, "test", images_dir="coco")
    assert images.image_id.tolist() == ["522418", "184613"] and len(captions) == 10
    assert stats["images_with_more_captions"] == 1 and stats["captions_dropped"] == 1
    captions, _, stats = read_coco_karpathy(KARPATHY, "test", max_captions=None)
    assert len(captions) == 11 and stats["captions_dropped"] == 0
    assert captions[captions.image_id == "522418"].caption_idx.tolist() == [0, 1, 2, 3, 4, 5]
    captions, images, _ = read_coco_karpathy(KARPATHY, "val", images_dir="coco")
    assert images.iloc[0].tolist() == ["391895", "coco/val2014/COCO_val2014_000000391895.jpg"]
    assert captions.raw.iloc[0] == "A man rides a motorcycle number 1."


def test_coco_from_zip_and_cli(tmp_path):
    archive = tmp_path / "caption_datasets.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(KARPATHY, "dataset_coco.json")
    caps, imgs, stats = tmp_path / "c.parquet", tmp_path / "i.parquet", tmp_path / "s.json"
    assert main(["read-coco", "--karpathy-json", str(archive), "--split", "train", "--images-dir", "img",
                 "--captions-out", str(caps), "--images-out", str(imgs), "--stats-out", str(stats)]) == 0
    assert len(pd.read_parquet(caps)) == 15
    assert pd.read_parquet(imgs).path.iloc[1] == "img/val2014/COCO_val2014_000000000042.jpg"
    assert json.loads(stats.read_text())["captions_dropped"] == 2


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["images"][2].pop("cocoid"), r"images\[2\]: missing key 'cocoid'"),
    (lambda d: d["images"][0].pop("sentences"), r"images\[0\]: missing key 'sentences'"),
    (lambda d: d["images"][4]["sentences"][1].pop("raw"), r"images\[4\]\.sentences\[1\]: missing key 'raw'"),
    (lambda d: d["images"][4]["sentences"][3].update(raw=" "), r"images\[4\]\.sentences\[3\]: empty caption"),
    (lambda d: d["images"][1].update(split="bogus"), r"images\[1\]: unknown split 'bogus'"),
    (lambda d: d["images"][4].update(cocoid=9), r"images\[4\]: cocoid 9 already used by images\[0\]"),
    (lambda d: d.pop("images"), r"expected an object with an 'images' list"),
])
def test_coco_malformed(tmp_path, edit, message):
    data = json.loads(KARPATHY.read_text())
    edit(data)
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"^{path}: {message}"):
        read_coco_karpathy(path, "train")


def test_coco_invalid_json(tmp_path):
    path = tmp_path / "dataset_coco.json"
    path.write_text('{"images": [\n{"cocoid": 1,\n')
    with pytest.raises(ValueError, match=rf"^{path}:3: invalid JSON"):
        read_coco_karpathy(path, "train")


def test_image_table_keeps_given_root():
    table = multi30k_image_table(["1000092795.jpg", "COCO_train2014_000000117071.jpg#367178"],
                                 images_dir="imgs")
    assert table.values.tolist() == [["1000092795", "imgs/1000092795.jpg"],
                                     ["COCO_train2014_000000117071", "imgs/COCO_train2014_000000117071.jpg"]]
