"""``pseudopairs export``: a tiny demo run (the real workflow, once per session) exported to a
model folder -- its files, hashes, tensors and model card, the refusal of a configuration that
is not the run's, and bad folders refused by ``pseudopairs.load`` naming the file or tensor; an
export that fails or is killed midway leaves no output folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake

RUN = "results/models/en_de_c2c/seed1"


def _export(workdir: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, "-m", "pseudopairs", "export", RUN, out, *extra],
                          cwd=workdir, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The tiny demo (tests/test_end_to_end.tiny_config) trained and evaluated through the real
    workflow: one model, en_de_c2c seed 1 (about 20 s)."""
    from test_end_to_end import tiny_config

    workdir = tmp_path_factory.mktemp("tiny_search_run")
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(tiny_config()))
    result = run_snakemake(workdir, f"{RUN}/metrics.json", "--cores", "2",
                           "--configfile", str(workdir / "tiny.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


@pytest.fixture(scope="session")
def tiny_export(tiny_run) -> Path:
    """The tiny run exported by the command line, from the workflow directory."""
    result = _export(tiny_run, "export", "--configfile", "tiny.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    return tiny_run / "export"


def _copy(folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / "model"
    shutil.copytree(folder, out)
    return out


def _rewrite_config(folder: Path, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


# --------------------------------------------------------------------------------------------
# The folder


def test_folder_holds_weights_text_preparation_image_network_and_hashes(tiny_run, tiny_export):
    from pseudopairs.model.checkpoints import load_model
    from pseudopairs.search.folder import file_sha256

    config = json.loads((tiny_export / "config.json").read_text())
    names = sorted(p.relative_to(tiny_export).as_posix() for p in tiny_export.rglob("*") if p.is_file())
    assert names == ["README.md", "config.json", "image_network.safetensors", "metrics.json",
                     "model.safetensors", "vocab.json"]
    # every other file with its SHA-256; nothing pickled (safetensors, JSON, text)
    assert config["files"] == {name: file_sha256(tiny_export / name) for name in names if name != "config.json"}
    assert config["languages"] == ["en", "de"] and config["dim"] == 32
    assert config["similarity"] == "cosine" and config["experiment"] == "en_de_c2c" and config["seed"] == 1
    model, meta = load_model(tiny_run / RUN / "checkpoint.pt")
    assert config["model"] == model.config()
    assert config["tensors"]["model.safetensors"]["gru.weight_hh_l0"] == {"shape": [96, 32], "dtype": "F32"}
    assert config["text"]["case"] == "lowercase"
    assert config["text"]["languages"]["de"]["tokenizer"] == {"kind": "moses"}
    assert (tiny_export / "vocab.json").read_bytes() == (tiny_run / RUN / "vocab.json").read_bytes()
    image = config["image"]
    assert (image["arch"], image["resize"], image["crop"], image["feature_dtype"]) == ("resnet18", 64, 56, "float16")
    # the demo's own extractor file, converted: named with the source file's SHA-256
    assert image["weights"]["kind"] == "file"
    assert image["weights"]["sha256"] == file_sha256(tiny_run / "results/features/pretrained/resnet18.pt")
    assert len(config["git_commit"]) == 40


def test_image_network_tensors_are_the_extractor_file(tiny_run, tiny_export):
    import torch
    from safetensors.torch import load_file

    exported = load_file(str(tiny_export / "image_network.safetensors"))
    source = torch.load(tiny_run / "results/features/pretrained/resnet18.pt", weights_only=True)
    source = {k: v for k, v in source.items() if not k.startswith("fc.")}  # the classifier is dropped
    assert sorted(exported) == sorted(source)
    assert all(torch.equal(exported[k], source[k]) for k in source)


def test_model_card_has_front_matter_data_and_metrics(tiny_run, tiny_export):
    card = (tiny_export / "README.md").read_text()
    assert card.startswith("---\n")
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["language"] == ["en", "de"] and front["library_name"] == "pseudopairs"
    assert "license" in front and "multilingual" in front["tags"]
    metrics = json.loads((tiny_run / RUN / "metrics.json").read_text())
    de = metrics["retrieval"]["de"]
    row = f"| de | {de['i2t_r1']:.2f} | {de['i2t_r5']:.2f} | {de['i2t_r10']:.2f} | {de['t2i_r1']:.2f}"
    assert row in card
    # the training data: 40 world images with 5 captions each per language
    assert "| m30k.en | en | m30k | 200 | 40 | human captions |" in card
    assert "seed 1" in card and "## Intended use" in card and "## Limits" in card


def test_card_names_the_pseudopair_set_its_filter_and_the_translation_model():
    from pseudopairs.search.card import _dataset_line

    pseudo = {"name": "coco.de-pseudo25@de_coco", "lang": "de", "captions": 5000, "images": 1000,
              "entry": {"corpus": "coco", "lang": "de", "pseudopairs": "de_coco", "min_percentile": 25},
              "pseudopairs": {"source": "de_coco", "queries": "coco.en", "database": "m30k.de",
                              "paper": {"used_share_text": 0.37}},
              "translation": None}
    assert _dataset_line(pseudo) == (
        "| coco.de-pseudo25@de_coco | de | coco | 5,000 | 1,000 | pseudopairs mined by de_coco, kept "
        "above the 25th percentile of similarity; mining {\"database\": \"m30k.de\", \"queries\": "
        "\"coco.en\", \"source\": \"de_coco\"} |")
    mt = {"name": "coco.de-mt", "lang": "de", "captions": 10, "images": 2, "pseudopairs": None,
          "entry": {"corpus": "coco", "lang": "de", "translation": "coco.en"},
          "translation": {"source": "train", "source_lang": "en", "target_lang": "de"}}
    assert _dataset_line(mt).endswith("| machine translation of coco.en (model: {\"source\": \"train\", "
                                      "\"source_lang\": \"en\", \"target_lang\": \"de\"}) |")


# --------------------------------------------------------------------------------------------
# The configuration must be the run's


def test_export_without_the_runs_config_is_refused_naming_the_keys(tiny_run):
    result = _export(tiny_run, "refused")
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"pseudopairs export: error: {RUN}/checkpoint.pt: trained with another configuration")
    assert "settings.model.embedding_dim (16 in the run, 64 in the configuration)" in line
    assert line.endswith("give the run's config files with --configfile")
    assert not (tiny_run / "refused").exists()


def test_export_checks_its_text_preparation_against_the_runs_captions(tiny_run, tmp_path):
    """A run whose training captions were prepared otherwise than the configuration says (here:
    one German caption's tokens as a truecasing run would have them) is refused, naming the row."""
    import pandas as pd

    workdir = tmp_path / "run"
    shutil.copytree(tiny_run, workdir, ignore=shutil.ignore_patterns(".snakemake", "export"))
    table = workdir / "results/captions/m30k/train.parquet"
    captions = pd.read_parquet(table)
    row = int(captions.index[captions["lang"] == "de"][0])
    theirs = captions.loc[row, "text"]
    captions.loc[row, "text"] = theirs.capitalize()
    captions.to_parquet(table)
    result = _export(workdir, "refused_text", "--configfile", "tiny.yaml")
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert (f"results/captions/m30k/train.parquet: row {row} (de): the configuration's text preparation "
            f"gives {theirs!r}, the run trained on {theirs.capitalize()!r}") in line
    assert not (workdir / "refused_text").exists()


# --------------------------------------------------------------------------------------------
# Bad folders


def test_missing_file_is_named(tiny_export, tmp_path):
    import pseudopairs
    from pseudopairs.search.folder import ModelFolderError

    folder = _copy(tiny_export, tmp_path)
    (folder / "vocab.json").unlink()
    with pytest.raises(ModelFolderError, match=r"model/vocab\.json: missing from the model folder"):
        pseudopairs.load(folder)


def test_altered_file_is_named(tiny_export, tmp_path):
    import pseudopairs
    from pseudopairs.search.folder import ModelFolderError

    folder = _copy(tiny_export, tmp_path)
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ModelFolderError, match=r"model/model\.safetensors: altered \(SHA-256 [0-9a-f]{16}…, "
                                               r"config\.json records [0-9a-f]{16}…\)"):
        pseudopairs.load(folder)


def test_safetensors_not_matching_the_config_is_named(tiny_export, tmp_path):
    """A consistent folder (hashes recorded) whose weights do not have the shapes config.json
    says: the tensor is named."""
    import torch
    from safetensors.torch import save_file

    import pseudopairs
    from pseudopairs.search.folder import ModelFolderError, file_sha256

    folder = _copy(tiny_export, tmp_path)
    from safetensors.torch import load_file
    state = load_file(str(folder / "model.safetensors"))
    state["image_projection.bias"] = torch.zeros(31)
    save_file(state, str(folder / "model.safetensors"))
    _rewrite_config(folder, lambda c: c["files"].update({"model.safetensors": file_sha256(folder / "model.safetensors")}))
    with pytest.raises(ModelFolderError, match=r"model\.safetensors: tensor 'image_projection\.bias' is F32 "
                                               r"\[31\], config\.json says F32 \[32\]"):
        pseudopairs.load(folder)
    del state["image_projection.bias"]
    save_file(state, str(folder / "model.safetensors"))
    _rewrite_config(folder, lambda c: c["files"].update({"model.safetensors": file_sha256(folder / "model.safetensors")}))
    with pytest.raises(ModelFolderError, match=r"tensor 'image_projection\.bias' missing"):
        pseudopairs.load(folder)


def test_not_a_model_folder(tmp_path):
    import pseudopairs
    from pseudopairs.search.folder import ModelFolderError

    with pytest.raises(ModelFolderError, match=r"nowhere: no such model folder"):
        pseudopairs.load(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text('{"format": "something/1"}')
    with pytest.raises(ModelFolderError, match=r"config\.json: format 'something/1', expected "
                                               r"'pseudopairs\.search-model/1'"):
        pseudopairs.load(tmp_path)


# --------------------------------------------------------------------------------------------
# Nothing half-written


def test_failed_export_leaves_no_folder_and_keeps_an_old_one(tiny_run, tiny_export, monkeypatch):
    from pseudopairs.search import export

    def fail(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.chdir(tiny_run)
    monkeypatch.setattr(export, "model_card", fail)  # after the weights are written
    with pytest.raises(RuntimeError, match="disk on fire"):
        export.export_run(RUN, tiny_run / "failed", configfiles=["tiny.yaml"])
    assert not (tiny_run / "failed").exists()
    assert not [p for p in tiny_run.iterdir() if p.name.startswith(".failed.")]
    before = {p.name: p.read_bytes() for p in tiny_export.iterdir()}
    with pytest.raises(RuntimeError, match="disk on fire"):
        export.export_run(RUN, tiny_export, configfiles=["tiny.yaml"])
    assert {p.name: p.read_bytes() for p in tiny_export.iterdir()} == before


def test_killed_export_leaves_no_folder(tiny_run):
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    process = subprocess.Popen([sys.executable, "-m", "pseudopairs", "export", RUN, "killed",
                                "--configfile", "tiny.yaml"], cwd=tiny_run, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        # kill it once it writes into its temporary folder
        while time.monotonic() < deadline and not any(
                p.name.startswith(".killed.") and any(p.iterdir()) for p in tiny_run.iterdir() if p.is_dir()):
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (tiny_run / "killed").exists()
