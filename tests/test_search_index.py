"""``pseudopairs index`` and ``search``: the collections an index reads, its chunked resumable
Parquet, the exact batched search over it (the project's blocked engine), and the commands with a
real exported model of the tiny demo run."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from search_fixture import (COLOURS, ColourModel, colour_captions, colour_folder, colour_vector,
                            expected_ranking, png_bytes, pseudopairs_cli, text_vector)
from test_search_export import tiny_export, tiny_run  # noqa: F401  (session fixtures: the tiny demo's model)
from pseudopairs.search.index import SearchError, build_index, collection
from pseudopairs.search.query import (ExactSearch, check_model, open_index, search_image, search_texts)


def _index(tmp_path, *, chunk=3, captions=False, model=None):
    model = model or ColourModel(tmp_path / "model")
    images = colour_folder(tmp_path / "images")
    cap = colour_captions(tmp_path / "captions.csv") if captions else None
    manifest = build_index(model=model, images=images, out=tmp_path / "index", chunk=chunk, captions=cap,
                           progress=False)
    return model, manifest


# --------------------------------------------------------------------------------------------
# Collections


def test_a_folder_is_every_image_under_it_sorted_with_ids_from_paths(tmp_path):
    items = collection(colour_folder(tmp_path / "images"))
    assert items.ids == sorted(COLOURS)  # recursive, sorted by relative path; notes.txt ignored
    assert items.sources == [f"{i}.png" for i in sorted(COLOURS)]
    (tmp_path / "images" / "a" / "red.jpg").write_bytes(png_bytes((1, 2, 3)))
    with pytest.raises(SearchError, match=r"image id 'a/red' appears twice \(a/red.jpg, a/red.png\)"):
        collection(tmp_path / "images")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SearchError, match="no images"):
        collection(empty)


def _shard(path: Path, samples: dict) -> Path:
    with tarfile.open(path, "w") as tar:
        for key, rgb in samples.items():
            for name, data in ((f"{key}.png", png_bytes(rgb)), (f"{key}.txt", b"a caption")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_a_webdataset_shard_is_indexed_member_by_member(tmp_path):
    shard = _shard(tmp_path / "shard-000.tar", {"s1": (250, 0, 0), "s2": (0, 0, 250)})
    model = ColourModel(tmp_path / "model")
    build_index(model=model, images=shard, out=tmp_path / "index", progress=False)
    index = open_index(tmp_path / "index")
    assert index.ids == ["s1", "s2"]
    assert index.sources == ["shard-000.tar[s1.png]", "shard-000.tar[s2.png]"]
    np.testing.assert_array_equal(index.vectors[1], colour_vector((0, 0, 250)))
    assert index.manifest["kind"] == "webdataset"


def test_an_image_list_reads_paths_relative_to_the_image_root(tmp_path):
    colour_folder(tmp_path / "images")
    pd.DataFrame({"image_id": ["x", "y"], "path": ["images/blue.png", "images/a/red.png"]}).to_parquet(
        tmp_path / "list.parquet")
    model = ColourModel(tmp_path / "model")
    build_index(model=model, images=tmp_path / "list.parquet", image_root=tmp_path, out=tmp_path / "index",
                progress=False)
    index = open_index(tmp_path / "index")
    assert index.ids == ["x", "y"] and index.sources == ["images/blue.png", "images/a/red.png"]
    np.testing.assert_array_equal(index.vectors[1], colour_vector(COLOURS["a/red"]))
    with pytest.raises(SearchError, match=r"list.parquet row 1: .*images/blue.png not found \(paths are relative "
                                          r"to --image-root"):
        build_index(model=model, images=tmp_path / "list.parquet", image_root=tmp_path / "elsewhere",
                    out=tmp_path / "index2", progress=False)


# --------------------------------------------------------------------------------------------
# The index folder


def test_the_index_is_chunked_parquet_with_a_manifest_written_last(tmp_path):
    model, manifest = _index(tmp_path, chunk=3)
    out = tmp_path / "index"
    parts = sorted(p.name for p in out.glob("images-*.parquet"))
    assert parts == ["images-00000.parquet", "images-00001.parquet", "images-00002.parquet"]  # 7 images, 3 a chunk
    first = pq.read_table(out / parts[0])
    assert first.column_names == ["id", "source", "offset", "size", "vector"]
    assert first.column("id").to_pylist() == sorted(COLOURS)[:3]
    assert manifest["dim"] == 4 and manifest["model_hash"] == model.model_hash
    assert manifest["model"] == str(model.folder.resolve()) and manifest["images"] == 7
    assert json.loads((out / "manifest.json").read_text()) == manifest
    index = open_index(out)
    expected = np.stack([colour_vector(COLOURS[i]) for i in sorted(COLOURS)])
    np.testing.assert_array_equal(index.vectors, expected)


def test_a_killed_run_leaves_no_manifest_and_a_rerun_embeds_only_the_missing_chunks(tmp_path):
    class Killed(ColourModel):
        def encode_images(self, images, **kw):
            if self.image_calls == 2:  # the third batch: chunk 2 of 3 never finishes
                raise KeyboardInterrupt
            return super().encode_images(images, **kw)

    colour_folder(tmp_path / "images")
    with pytest.raises(KeyboardInterrupt):
        build_index(model=Killed(tmp_path / "model"), images=tmp_path / "images", out=tmp_path / "index",
                    chunk=3, batch_size=3, progress=False)
    out = tmp_path / "index"
    assert not (out / "manifest.json").exists()
    assert sorted(p.name for p in out.glob("images-*")) == ["images-00000.parquet", "images-00001.parquet"]
    with pytest.raises(SearchError, match="no manifest.json, not a finished index"):
        open_index(out)
    again = ColourModel(tmp_path / "model")
    build_index(model=again, images=tmp_path / "images", out=out, chunk=3, batch_size=3, progress=False)
    assert again.images_encoded == 1  # only the last chunk's one image
    fresh = tmp_path / "fresh"
    build_index(model=ColourModel(tmp_path / "model"), images=tmp_path / "images", out=fresh, chunk=3,
                progress=False)
    np.testing.assert_array_equal(open_index(out).vectors, open_index(fresh).vectors)
    # another model: nothing is kept
    other = ColourModel(tmp_path / "model", model_hash="f" * 60)
    build_index(model=other, images=tmp_path / "images", out=out, chunk=3, progress=False)
    assert other.images_encoded == 7 and open_index(out).manifest["model_hash"] == "f" * 60


def test_captions_are_indexed_in_the_models_languages(tmp_path):
    _, manifest = _index(tmp_path, captions=True)
    assert manifest["captions"] == {"file": "captions.parquet", "rows": 4, "languages": ["en", "fr"]}
    index = open_index(tmp_path / "index")
    assert index.captions["caption"].tolist() == ["a red square", "un carré rouge", "green grass", "le ciel bleu"]
    np.testing.assert_array_equal(index.caption_vectors[1], text_vector("un carré rouge", "fr"))
    bad = tmp_path / "bad.csv"
    bad.write_text("image_id,lang,caption\nblue,en,fine\nnowhere,en,a caption\n")
    with pytest.raises(SearchError, match=r"bad.csv row 2: image_id 'nowhere' is not in the indexed collection"):
        build_index(model=ColourModel(tmp_path / "model"), images=tmp_path / "images", out=tmp_path / "i2",
                    captions=bad, progress=False)


# --------------------------------------------------------------------------------------------
# Exact search


@pytest.mark.parametrize("path", ["float32", "bf16"])
def test_exact_search_is_the_float64_ranking_whatever_the_batch(path):
    rng = np.random.default_rng(7)
    db = rng.standard_normal((5000, 48)).astype(np.float32)
    db[17] = db[3]  # a tie: the lower row first
    q = rng.standard_normal((9, 48)).astype(np.float32)
    q[4] = db[3] * 2.0
    engine = ExactSearch(db, path=path)
    rows, scores = engine.search(q, 10)
    d64, q64 = db.astype(np.float64), q.astype(np.float64)
    cos = (q64 / np.linalg.norm(q64, axis=1, keepdims=True)) @ (d64 / np.linalg.norm(d64, axis=1, keepdims=True)).T
    np.testing.assert_array_equal(rows, np.argsort(-cos, axis=1, kind="stable")[:, :10])
    np.testing.assert_allclose(scores, np.take_along_axis(cos, rows, 1), atol=1e-7)
    assert rows[4, :2].tolist() == [3, 17]
    for i in (0, 4, 8):  # one query alone gives the same rows and bits
        alone_rows, alone_scores = engine.search(q[i: i + 1], 10)
        np.testing.assert_array_equal(alone_rows[0], rows[i])
        np.testing.assert_array_equal(alone_scores[0], scores[i])
    assert engine.search(q[:1], 50_000)[0].shape == (1, 5000)  # k capped at the index


def test_search_by_text_and_by_image_on_hand_computed_embeddings(tmp_path):
    model, _ = _index(tmp_path, captions=True)
    index = open_index(tmp_path / "index")
    found = search_texts(index, model, ["red", "bleu vert"], lang="fr", k=3)  # fr: 'red' is no word
    assert [r["id"] for r in found[1]] == expected_ranking(text_vector("bleu vert", "fr"), 3)
    found = search_texts(index, model, ["red"], lang="en", k=3)
    assert [r["id"] for r in found[0]] == ["a/red", "a/pink", "grey"] == expected_ranking(text_vector("red", "en"), 3)
    assert found[0][0] == {"id": "a/red", "path": "a/red.png",
                           "score": round(float(text_vector("red", "en") @ colour_vector(COLOURS["a/red"])), 6)}
    captions = search_image(index, model, tmp_path / "images" / "blue.png", k=2)
    # 'a red square' and 'green grass' tie for the blue image (one colour word each): the lower row
    assert [c["caption"] for c in captions] == ["le ciel bleu", "a red square"]
    with pytest.raises(SearchError, match=r"^lang: 'de' is not one of the model's languages \(en, fr\)$"):
        search_texts(index, model, ["rot"], lang="de", k=3)
    with pytest.raises(SearchError, match=r"^k: 0 is out of range \(1 to 100\)$"):
        search_texts(index, model, ["red"], lang="en", k=0)
    with pytest.raises(SearchError, match=r"^q: the query is empty$"):
        search_texts(index, model, ["  "], lang="en", k=3)
    with pytest.raises(SearchError, match=r"notes.txt: not an image"):
        search_image(index, model, tmp_path / "images" / "notes.txt", k=2)


def test_an_index_built_by_another_model_is_refused_in_one_line(tmp_path):
    model, _ = _index(tmp_path)
    index = open_index(tmp_path / "index")
    check_model(index, model)
    with pytest.raises(SearchError, match=r"model hash 000000000000 differs from the index's c0ffeec0ffee"):
        check_model(index, ColourModel(tmp_path / "model", model_hash="0" * 64))
    wider = ColourModel(tmp_path / "model")
    wider.dim = 8
    with pytest.raises(SearchError, match=r"embeds in 8 dimensions, but the index .* was built with 4"):
        check_model(index, wider)


# --------------------------------------------------------------------------------------------
# The commands, with the tiny demo run's exported model


@pytest.mark.slow
def test_index_and_search_commands_with_an_exported_model(tiny_run, tiny_export, tmp_path):  # noqa: F811
    work, model_dir = tiny_run, tiny_export
    index_dir = tmp_path / "index"
    result = pseudopairs_cli("index", "--model", str(model_dir), "--images", "results/images/m30k/test.parquet",
                             "--captions", "results/captions/raw/m30k/test.parquet", "--chunk", "5",
                             str(index_dir), cwd=work)
    assert result.returncode == 0, result.stderr
    assert "16/16" in result.stderr  # the progress bar
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["images"] == 16 and len(manifest["parts"]) == 4
    import pseudopairs

    model = pseudopairs.load(model_dir)
    assert manifest["model_hash"] == model.model_hash and manifest["dim"] == model.dim
    index = open_index(index_dir)
    captions = pd.read_parquet(work / "results/captions/raw/m30k/test.parquet")
    ids = pd.read_parquet(work / "results/images/m30k/test.parquet")["image_id"].tolist()
    np.testing.assert_allclose(index.vectors, model.encode_images([str(work / p) for p in
                               pd.read_parquet(work / "results/images/m30k/test.parquet")["path"]]), atol=1e-5)  # batches of 5 vs 16
    query = captions[captions["lang"] == "en"]["raw"].iloc[0]
    result = pseudopairs_cli("search", "--index", str(index_dir), "--lang", "en", query, "-k", "5", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)["results"]
    vector = model.encode_texts([query], lang="en")[0].astype(np.float64)
    cos = index.vectors.astype(np.float64) @ vector / np.linalg.norm(index.vectors.astype(np.float64), axis=1)
    assert [r["id"] for r in got] == [ids[j] for j in np.argsort(-cos, kind="stable")[:5]]
    table = pseudopairs_cli("search", "--index", str(index_dir), "--lang", "en", query, "-k", "3")
    assert table.stdout.splitlines()[0].split() == ["rank", "score", "id", "path"]
    assert len(table.stdout.splitlines()) == 4
    image = pseudopairs_cli("search", "--index", str(index_dir), "--image",
                            str(work / "results/world/images/m30k/m30k_test_000000.png"), "-k", "2", "--json")
    assert image.returncode == 0, image.stderr
    assert len(json.loads(image.stdout)["results"]) == 2
    bad = pseudopairs_cli("search", "--index", str(index_dir), "--lang", "xx", "ein hund", "-k", "3")
    assert bad.returncode == 1
    assert bad.stderr.strip() == f"pseudopairs search: error: lang: 'xx' is not one of the model's languages " \
                                 f"({', '.join(model.languages)})"
    manifest["model_hash"] = "1" * 64
    (index_dir / "manifest.json").write_text(json.dumps(manifest))
    bad = pseudopairs_cli("search", "--index", str(index_dir), "--lang", "en", query)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert "differs from the index's 111111111111" in bad.stderr


@pytest.mark.parametrize("target, configfile, corpus", [
    ("results/search/de_coco_pseudo_ft/seed1/m30k_test", None, "m30k"),
    ("results/own_data/search/fr_photos_pseudo_ft/seed1/cartes_test", "own-data.yaml", "cartes"),
])
def test_the_workflow_plans_the_main_models_index(tmp_path, target, configfile, corpus):
    from conftest import REPO, run_snakemake

    extra = ["--configfile", str(REPO / "config" / configfile)] if configfile else []
    result = run_snakemake(tmp_path, "-n", "-p", target, "--cores", "2", *extra)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    root = target.split("/search/")[0]
    experiment = target.split("/")[-3]
    assert (f"python -m pseudopairs export {root}/models/{experiment}/seed1 {root}/exported/{experiment}/seed1"
            in out)
    assert (f"python -m pseudopairs index --model {root}/exported/{experiment}/seed1 --images "
            f"{root}/images/{corpus}/test.parquet --captions {root}/captions/raw/{corpus}/test.parquet" in out)
