"""Data-set operations (paper 004): seeded image subsets (Half, Bi-overlap, Bi-disjoint) and one
caption per image, on hand cases; declared in the config, checked there, and built by a rule."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from pseudopairs.workflow.config import check_config, load_config
from pseudopairs.data.contract import dataset_files
from pseudopairs.data.select import check_select, image_subset, sample_captions, select_captions
from pseudopairs.core.io import CAPTION_COLUMNS


def table(n_images=10, per_image=5, langs=("en", "de")):
    rows = [("m30k", "train", f"img{i:02d}", lang, k, f"{lang} {i} {k}", f"{lang} {i} {k}")
            for i in range(n_images) for lang in langs for k in range(per_image)]
    return pd.DataFrame(rows, columns=CAPTION_COLUMNS)


def test_halves_are_seeded_disjoint_and_cover_the_images():
    ids = [f"img{i:02d}" for i in range(10)]
    first = image_subset(ids, fraction=0.5, part=0, seed=3)
    second = image_subset(ids, fraction=0.5, part=1, seed=3)
    assert len(first) == len(second) == 5 and not first & second and first | second == set(ids)
    assert image_subset(list(reversed(ids)), fraction=0.5, part=0, seed=3) == first  # order-free
    assert image_subset(ids, fraction=0.5, part=0, seed=4) != first                   # seeded


def test_bi_overlap_and_bi_disjoint_selections():
    frame = table()
    half = {"images": {"fraction": 0.5, "part": 0, "seed": 3}}
    en = select_captions(frame, lang="en", select=half, dataset="m30k.en.half")
    de_same = select_captions(frame, lang="de", select=half, dataset="m30k.de.half")
    de_other = select_captions(frame, lang="de", select={"images": {"fraction": 0.5, "part": 1, "seed": 3}},
                               dataset="m30k.de.otherhalf")
    assert set(en["image_id"]) == set(de_same["image_id"])              # Bi-overlap: same images
    assert not set(en["image_id"]) & set(de_other["image_id"])          # Bi-disjoint: none shared
    assert len(en) == 25 and set(en["lang"]) == {"en"} and set(en["dataset"]) == {"m30k.en.half"}
    assert list(en.columns) == CAPTION_COLUMNS


def test_one_caption_per_image_is_seeded_per_image():
    frame = table(n_images=6)
    one = select_captions(frame, lang="en", select={"captions_per_image": 1, "seed": 11}, dataset="x")
    assert len(one) == 6 and one["image_id"].is_unique
    again = select_captions(frame, lang="en", select={"captions_per_image": 1, "seed": 11}, dataset="x")
    pd.testing.assert_frame_equal(one, again)
    other = select_captions(frame, lang="en", select={"captions_per_image": 1, "seed": 12}, dataset="x")
    assert (one["caption_idx"].to_numpy() != other["caption_idx"].to_numpy()).any()
    # an image's draw does not depend on the other images
    fewer = select_captions(frame[frame["image_id"] != "img00"], lang="en",
                            select={"captions_per_image": 1, "seed": 11}, dataset="x")
    assert fewer["caption_idx"].tolist() == one["caption_idx"].tolist()[1:]
    two = sample_captions(frame[frame["lang"] == "en"], k=2, seed=1)
    assert two.groupby("image_id").size().eq(2).all()


@pytest.mark.parametrize("select, message", [
    ({}, "must give images and/or captions_per_image"),
    ({"images": {"fraction": 0.5, "part": 2}}, "images.part: must be a whole number in [0, 1]"),
    ({"images": {"fraction": 1.5}}, "images.fraction: must be in (0, 1]"),
    ({"captions_per_image": 0}, "captions_per_image: must be a whole number >= 1"),
    ({"captions": 1}, "unknown key(s) ['captions']"),
])
def test_bad_selections_name_the_key(select, message):
    with pytest.raises(ValueError) as err:
        check_select(select)
    assert message in str(err.value)


def overlay() -> dict:
    return {"datasets": {
                "m30k.en.half": {"corpus": "m30k", "lang": "en", "select": {"images": {"fraction": 0.5, "part": 0, "seed": 3}}},
                "m30k.de.otherhalf": {"corpus": "m30k", "lang": "de", "select": {"images": {"fraction": 0.5, "part": 1, "seed": 3}}},
                "m30k_task1.en": {"corpus": "m30k_task1", "lang": "en", "images": "m30k"}},
            "experiments": {"bi_disjoint": {"c2i": ["m30k.en.half", "m30k.de.otherhalf"]},
                            "task1_en": {"c2i": ["m30k_task1.en"]}}}


def test_selection_data_sets_resolve_to_their_files_and_jobs(tmp_path):
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    for key, value in overlay().items():
        config[key].update(value)
    check_config(config)
    files = dataset_files(config, "m30k.en.half")
    assert files == {"name": "m30k.en.half", "lang": "en",
                     "captions": "results/captions/selected/m30k.en.half/train.parquet",
                     "features": "results/features/m30k/train.npz"}
    assert dataset_files(config, "m30k_task1.en")["features"] == "results/features/m30k/train.npz"
    bad = yaml.safe_load(yaml.safe_dump(config))
    bad["datasets"]["m30k.en.half"]["select"]["images"]["fraction"] = 0
    with pytest.raises(ValueError, match="'datasets.m30k.en.half.select.images.fraction': must be in"):
        check_config(bad)
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(overlay()))
    result = run_snakemake(tmp_path, "results/models/bi_disjoint/seed1/metrics.json",
                           "results/models/task1_en/seed1/metrics.json", "-n", "--cores", "1",
                           "--configfile", str(site))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "select_captions" in result.stdout and "results/captions/m30k_task1/train.parquet" in result.stdout
