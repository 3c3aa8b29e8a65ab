"""``pseudopairs.load``: the exported tiny demo model (tests/test_search_export.py's session
fixtures) encodes the raw test captions and the test image files exactly as the evaluation step
embeds the prepared captions and the stored features, so R@K from the API equals metrics.json;
the folder works with nothing else of results/ present; bad input is named."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from test_search_export import RUN, tiny_export, tiny_run  # noqa: F401  (session fixtures)


@pytest.fixture(scope="module")
def model(tiny_export):  # noqa: F811
    import pseudopairs

    return pseudopairs.load(tiny_export)


@pytest.fixture(scope="module")
def evaluation(tiny_run):  # noqa: F811
    """The evaluation step's embeddings of the test split, computed as it computes them (the
    checkpoint, the prepared captions, the stored features), and the raw captions and image files."""
    from pseudopairs.evaluation.step import caption_subset
    from pseudopairs.core.io import load_features, read_captions
    from pseudopairs.model.checkpoints import load_model
    from pseudopairs.model.encode import encode_captions_texts, encode_image_features
    from pseudopairs.model.text_encoders import load_vocabulary

    ranking, _ = load_model(tiny_run / RUN / "checkpoint.pt")
    vocab = load_vocabulary(tiny_run / RUN / "vocab.json")
    features_path = str(tiny_run / "results/features/m30k/test.npz")
    ids, features = load_features(features_path)
    images = pd.read_parquet(tiny_run / "results/images/m30k/test.parquet")
    assert images["image_id"].tolist() == ids
    captions = read_captions(tiny_run / "results/captions/m30k/test.parquet")
    out = {"image_ids": ids, "image_files": [str(tiny_run / p) for p in images["path"]],
           "images": encode_image_features(ranking, features).numpy(), "langs": {}}
    for lang in ("en", "de"):
        subset, rows = caption_subset(captions, ids, lang=lang, source="test", features=features_path)
        out["langs"][lang] = {
            "raw": subset["raw"].tolist(), "rows": rows,
            "embeddings": encode_captions_texts(ranking, vocab, subset["text"].tolist(), lang=lang).numpy()}
    out["metrics"] = json.loads((tiny_run / RUN / "metrics.json").read_text())
    return out


def test_api_embeddings_equal_the_evaluation_steps_and_reproduce_metrics(model, evaluation):
    from pseudopairs.similarity.metrics import retrieval_metrics

    assert model.languages == ("en", "de") and model.dim == 32
    # the features step's batches (features.batch_size 16 in the tiny config)
    images = model.encode_images(evaluation["image_files"], batch_size=16)
    assert images.dtype == np.float32 and images.shape == (16, 32)
    assert np.abs(images - evaluation["images"]).max() <= 1e-5
    assert np.allclose(np.linalg.norm(images, axis=1), 1.0, atol=1e-6)
    for lang, data in evaluation["langs"].items():
        texts = model.encode_texts(data["raw"], lang=lang)  # RAW captions: prepared by the model
        assert texts.dtype == np.float32 and texts.shape == (80, 32)
        assert np.abs(texts - data["embeddings"]).max() <= 1e-5
        metrics = retrieval_metrics(image_embeddings=images, caption_embeddings=texts,
                                    caption_image_index=data["rows"], similarity=model.similarity)
        assert {k: float(v) for k, v in metrics.items()} == evaluation["metrics"]["retrieval"][lang]


def test_folder_loads_and_encodes_with_nothing_of_results(tiny_run, tiny_export, evaluation, tmp_path):  # noqa: F811
    """The folder and the test images copied to a directory without results/: a fresh process
    loads it there and gets the same embeddings."""
    shutil.copytree(tiny_export, tmp_path / "model")
    (tmp_path / "images").mkdir()
    names = []
    for path in evaluation["image_files"]:
        shutil.copy(path, tmp_path / "images" / Path(path).name)
        names.append(f"images/{Path(path).name}")
    (tmp_path / "query.json").write_text(json.dumps({"images": names, "de": evaluation["langs"]["de"]["raw"]}))
    script = ("import json, numpy as np, pseudopairs\n"
              "q = json.load(open('query.json'))\n"
              "m = pseudopairs.load('model')\n"
              "np.save('images.npy', m.encode_images(q['images'], batch_size=16))\n"
              "np.save('de.npy', m.encode_texts(q['de'], lang='de'))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (tmp_path / "results").exists()
    assert str(tiny_run) not in (tmp_path / "model" / "config.json").read_text()  # no absolute paths
    assert np.abs(np.load(tmp_path / "images.npy") - evaluation["images"]).max() <= 1e-5
    assert np.abs(np.load(tmp_path / "de.npy") - evaluation["langs"]["de"]["embeddings"]).max() <= 1e-5


def test_model_hash_is_the_config_files_sha256(model, tiny_export):  # noqa: F811
    assert model.model_hash == hashlib.sha256((tiny_export / "config.json").read_bytes()).hexdigest()
    assert model.folder == tiny_export
    assert (model.image_settings["arch"], model.image_settings["crop"]) == ("resnet18", 56)


# --------------------------------------------------------------------------------------------
# Text


def test_text_preparation_is_trainings(model):
    """Moses lowercasing and tokenisation; a word the vocabulary lacks is UNK, as in training."""
    assert model.prepare_texts(["Ein Hund, der rennt."], lang="de") == ["ein hund , der rennt ."]
    [word] = [w for w in model.vocab.words[2:] if w.isalpha()][:1]
    raw = np.vstack([model.encode_texts([f"{word.upper()} qqzzyx"], lang="en"),
                     model.encode_prepared([f"{word} <unk>"], lang="en")])
    assert np.array_equal(raw[0], raw[1])
    assert model.vocab.encode(model.prepare_texts(["qqzzyx"], lang="en")[0]) == [1]  # UNK_ID


def test_unknown_language_names_the_models_languages(model):
    with pytest.raises(ValueError, match=r"lang 'fr': the model knows en, de"):
        model.encode_texts(["un chien court"], lang="fr")


def test_empty_input_gives_empty_arrays(model):
    assert model.encode_texts([], lang="en").shape == (0, 32)
    assert model.encode_images([]).shape == (0, 32)


def test_a_line_break_or_a_non_string_is_named(model):
    with pytest.raises(ValueError, match=r"texts\[1\]: one line of text expected"):
        model.encode_texts(["a dog", "a\ncat"], lang="en")
    with pytest.raises(ValueError, match=r"texts\[0\]: not a string \(int\)"):
        model.encode_texts([3], lang="en")


# --------------------------------------------------------------------------------------------
# Images


def test_paths_bytes_and_pil_images_encode_alike(model, evaluation):
    from PIL import Image

    path = evaluation["image_files"][3]
    with Image.open(path) as img:
        pil = img.copy()
    out = model.encode_images([path, Path(path).read_bytes(), pil])
    assert np.array_equal(out[0], out[1]) and np.array_equal(out[0], out[2])
    assert np.abs(out[0] - evaluation["images"][3]).max() <= 1e-5


def test_not_an_image_is_named(model, evaluation, tmp_path):
    from pseudopairs.core.io import UnreadableFileError

    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    with pytest.raises(UnreadableFileError, match=rf"{bad}: not an image \(UnidentifiedImageError"):
        model.encode_images([evaluation["image_files"][0], bad])
    with pytest.raises(UnreadableFileError, match=r"images\[1\] \(bytes\): not an image"):
        model.encode_images([evaluation["image_files"][0], b"\x89PNG broken"])
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path / 'gone.jpg'}: no such image file"):
        model.encode_images([tmp_path / "gone.jpg"])
    with pytest.raises(ValueError, match=r"encode_images takes a list of images, got one"):
        model.encode_images(str(bad))
    with io.BytesIO() as _:
        pass
