"""Published FastText vectors (paper 002 §3.1) in the real configuration: the config's
``fasttext.source: download``, rule ``download_fasttext`` (the project's checksummed download,
tried against a server on 127.0.0.1 serving a tiny ``.vec.gz``; nothing reaches the network), the
``fasttext`` step filtering the published file to the words of a run's captions, and the paper
configuration's dry run."""

from __future__ import annotations

import copy
import gzip
import hashlib
import re

import numpy as np
import pandas as pd
import pytest

from conftest import paper_dry_run
from pseudopairs import cli
from pseudopairs.workflow.config import ConfigError, check_config, load_schema
from pseudopairs.data import download
from pseudopairs.data.download import ChecksumError, fetch
from pseudopairs.core.io import CAPTION_COLUMNS
from pseudopairs.core.settings import SettingsError
from pseudopairs.model import smalr_contract as specs
from pseudopairs.smalr.fasttext import read_vec
from pseudopairs.smalr.settings import PUBLISHED_FASTTEXT_URL, FastTextSettings
from pseudopairs.smalr.step import train_fasttext_step
from test_download import serve
from test_experiments import demo

# test_download's HTTP server on 127.0.0.1 (no external network): (base URL, its state)
server = pytest.fixture(serve, name="server")

# a published file in miniature: 5 German words, 3-d, gzipped as fastText publishes them
VEC = ("5 3\n"
       "der 0.1 0.2 0.3\n"
       "hund 1 0 -1\n"
       "läuft 0.5 0.25 0.125\n"
       "katze 2 2 2\n"
       "baum -1 -2 -3\n")
VEC_GZ = gzip.compress(VEC.encode("utf-8"), mtime=0)
SHA = hashlib.sha256(VEC_GZ).hexdigest()


def _download_config(url: str, sha256: dict | None = None) -> dict:
    config = copy.deepcopy(demo())
    config["fasttext"] = {**config["fasttext"], "source": "download", "url": url,
                          "sha256": sha256 or {}}
    return config


def _captions(path, rows):
    """A prepared caption table of training captions (lang, text) for one image each."""
    frame = pd.DataFrame([{"dataset": "m30k", "split": "train", "image_id": str(i), "lang": lang,
                           "caption_idx": 0, "raw": text, "text": text}
                          for i, (lang, text) in enumerate(rows)], columns=CAPTION_COLUMNS)
    frame.to_parquet(path)
    return str(path)


# --- config ---------------------------------------------------------------------------------


def test_default_is_training_and_the_demo_keeps_it():
    settings = FastTextSettings()
    assert settings.source == "train" and settings.url == PUBLISHED_FASTTEXT_URL
    assert settings.download_url("cs") == "https://dl.fbaipublicfiles.com/fasttext/vectors-crawl/cc.cs.300.vec.gz"
    config = demo()
    assert not specs.downloads_fasttext(config) and specs.fasttext_downloads(config) == []
    spec = specs.fasttext_spec(config, "smalr", 1, "de")
    assert "published" not in spec
    # the job's spec carries only what changes trained vectors: a demo's jobs are unchanged
    assert spec["settings"] == {"dim": 64, "epochs": 10, "window": 5, "min_count": 1}


def test_unknown_source_and_bad_values_are_refused_naming_the_key():
    config = copy.deepcopy(demo())
    config["fasttext"]["source"] = "mirror"
    with pytest.raises(ConfigError, match=r"fasttext\.source"):
        check_config(config, load_schema())
    with pytest.raises(SettingsError, match=r"fasttext\.source: must be one of \['train', 'download'\]"):
        FastTextSettings.from_dict({"source": "mirror"})
    with pytest.raises(SettingsError, match=r"fasttext\.url: must contain '\{lang\}'"):
        FastTextSettings.from_dict({"url": "https://example.org/cc.de.300.vec.gz"})
    with pytest.raises(SettingsError, match=r"fasttext\.sha256\.de: must be a 64-digit hex"):
        FastTextSettings.from_dict({"sha256": {"de": "abc"}})
    config = copy.deepcopy(demo())
    config["fasttext"]["sha256"] = {"de": "xyz"}
    with pytest.raises(ConfigError, match=r"fasttext\.sha256\.de"):
        check_config(config, load_schema())


def test_download_specs_name_the_url_checksum_and_file():
    config = _download_config("http://127.0.0.1:9/cc.{lang}.300.vec.gz", {"de": SHA, "fr": None})
    assert specs.fasttext_download(config, "de") == {
        "url": "http://127.0.0.1:9/cc.de.300.vec.gz", "sha256": SHA,
        "output": "results/downloads/fasttext/de.vec.gz"}
    assert specs.fasttext_download(config, "fr")["sha256"] is None      # the recorded one
    assert specs.fasttext_download(config, "en")["sha256"] is None
    # an uncompressed file keeps its name
    plain = _download_config("http://127.0.0.1:9/{lang}.vec")
    assert specs.published_vectors(plain, "en") == "results/downloads/fasttext/en.vec"
    # the fasttext job reads the download, and writes where pretrain_hem reads
    spec = specs.fasttext_spec(config, "smalr", 2, "de")
    assert spec["published"] == "results/downloads/fasttext/de.vec.gz"
    assert "results/downloads/fasttext/de.vec.gz" in specs.fasttext_inputs(config, "smalr", 2, "de")
    assert specs.hem_spec(config, "smalr", 2)["vectors"]["de"] == "results/smalr/smalr/seed2/fasttext.de.vec"
    assert specs.fasttext_downloads(config) == [f"results/downloads/fasttext/{lang}.vec.gz"
                                                for lang in ("cs", "de", "en", "fr")]


def test_the_published_urls_have_checksum_entries_with_none_recorded_yet():
    for lang in ("en", "de", "fr", "cs"):
        entry = download.known_checksum(PUBLISHED_FASTTEXT_URL.replace("{lang}", lang))
        assert entry is not None and entry["sha256"] is None and "fastText" in entry["source"]


# --- the download (rule download_fasttext's command) -----------------------------------------


def _serve(server, lang="de"):
    base, state = server
    state.files[f"/cc.{lang}.300.vec.gz"] = VEC_GZ
    return _download_config(base + "/cc.{lang}.300.vec.gz", {lang: SHA})


def test_download_with_the_configured_checksum_writes_the_file(server, tmp_path):
    config = _serve(server)
    job = specs.fasttext_download(config, "de")
    dest = tmp_path / job["output"]
    # what the rule runs: python -m pseudopairs download --url URL --output OUT --sha256 SHA
    assert cli.main(["download", "--url", job["url"], "--output", str(dest), "--sha256",
                     job["sha256"], "--retries", "0", "--backoff", "0"]) == 0
    assert dest.read_bytes() == VEC_GZ
    assert sorted(p.name for p in dest.parent.iterdir()) == ["de.vec.gz"]
    vectors = read_vec(dest, words=["hund", "katze", "nicht"], dim=3)
    assert vectors.words == ["hund", "katze"]
    np.testing.assert_array_equal(vectors.vectors, [[1, 0, -1], [2, 2, 2]])


def test_a_wrong_checksum_is_a_clear_error_and_leaves_nothing(server, tmp_path, capsys):
    base, state = server
    config = _serve(server)
    state.files["/cc.de.300.vec.gz"] = VEC_GZ[:-1] + bytes([VEC_GZ[-1] ^ 0xFF])  # another file
    job = specs.fasttext_download(config, "de")
    dest = tmp_path / "de.vec.gz"
    with pytest.raises(ChecksumError) as err:
        fetch(job["url"], dest, sha256=job["sha256"], retries=0, backoff=0, progress=False)
    message = str(err.value)
    assert message.startswith(f"{base}/cc.de.300.vec.gz -> {dest}: SHA-256 mismatch")
    assert SHA in message
    assert list(tmp_path.iterdir()) == []
    assert cli.main(["download", "--url", job["url"], "--output", str(dest), "--sha256", SHA,
                     "--retries", "0", "--backoff", "0"]) == 1
    assert re.search(rf"{re.escape(base)}/cc\.de\.300\.vec\.gz .*SHA-256 mismatch", capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


# --- the fasttext step on published vectors ---------------------------------------------------


def test_fasttext_step_keeps_the_published_vectors_of_the_captions_words(tmp_path):
    published = tmp_path / "de.vec.gz"
    published.write_bytes(VEC_GZ)
    captions = _captions(tmp_path / "train.parquet", [("de", "der hund läuft"), ("de", "der vogel"),
                                                      ("en", "the katze")])
    out = tmp_path / "fasttext.de.vec"
    spec = {"experiment": "x", "seed": 1, "lang": "de", "captions": [captions],
            "settings": {"dim": 3}, "published": str(published)}
    summary = train_fasttext_step(spec, out)
    # words of the German captions: der, hund, läuft, vogel; the file has the first three (in its
    # order); "katze" is English here and "baum" unused, so neither is kept
    assert summary == {"sentences": 2, "words": 3, "missing": 1, "dim": 3, "published": str(published)}
    assert out.read_text(encoding="utf-8") == "3 3\nder 0.1 0.2 0.3\nhund 1 0 -1\nläuft 0.5 0.25 0.125\n"


def test_fasttext_step_refuses_published_vectors_that_do_not_fit(tmp_path):
    published = tmp_path / "de.vec.gz"
    published.write_bytes(VEC_GZ)
    captions = _captions(tmp_path / "train.parquet", [("de", "ein vogel")])
    spec = {"experiment": "x", "seed": 1, "lang": "de", "captions": [captions],
            "settings": {"dim": 3}, "published": str(published)}
    with pytest.raises(ValueError, match=rf"{re.escape(str(published))}: none of the 2 words"):
        train_fasttext_step(spec, tmp_path / "out.vec")
    with pytest.raises(ValueError, match=rf"{re.escape(str(published))}:1: the vectors are 3-dimensional, expected 300"):
        train_fasttext_step({**spec, "settings": {"dim": 300}}, tmp_path / "out.vec")
    assert not (tmp_path / "out.vec").exists()


# --- the real configuration ------------------------------------------------------------------


def test_real_configuration_downloads_the_vectors_of_each_language(tmp_path):
    result = paper_dry_run(tmp_path, "results/table_smalr2.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    jobs = re.findall(r"^rule download_fasttext:\n(?:.*\n)*?\s+output: (\S+)", out, flags=re.M)
    assert sorted(jobs) == [f"results/downloads/fasttext/{lang}.vec.gz" for lang in ("cs", "de", "en", "fr")]
    for lang in ("en", "de", "fr", "cs"):
        assert (f"--url https://dl.fbaipublicfiles.com/fasttext/vectors-crawl/cc.{lang}.300.vec.gz "
                f"--output results/downloads/fasttext/{lang}.vec.gz") in out
    # each fasttext job filters its language's download (its spec names it)
    # (5 hem experiments: LA, HEM, SMALR and the two translation-portion rows; 3 seeds)
    assert out.count('"published":"results/downloads/fasttext/de.vec.gz"') == 5 * 3
