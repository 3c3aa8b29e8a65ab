"""Hostile probes, each a test: shell interpolation, unreadable inputs, a full disk,
degenerate caption tables, and settings that only the data can refute (checked at DAG time)."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, run_snakemake
from pseudopairs import cli
from pseudopairs.core.io import UnreadableFileError, check_caption_texts, load_features, save_features

PLACEHOLDER = re.compile(r"(?<!\{)\{([^{}]+)\}(?!\})")


def _workflow_rules(tmp_path: Path, configfiles: list[Path]):
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                                config_settings=ConfigSettings(configfiles=configfiles),
                                snakefile=REPO / "Snakefile", workdir=tmp_path)
        return list(workflow._workflow.rules)


@pytest.mark.parametrize("paper", [False, True])
def test_every_shell_interpolation_is_quoted(tmp_path, paper):
    """A config string (a path with a space, or ``a$(touch PWNED)b``) reaches the shell only as
    one quoted word: every ``{...}`` of every rule's shell command ends in ``:q`` (``{threads}``,
    an integer Snakemake fills in, is the exception)."""
    configfiles = []
    if paper:
        (tmp_path / "flickr").mkdir()
        site = tmp_path / "site.yaml"
        site.write_text(f"paper_data: {{flickr30k_images: {tmp_path / 'flickr'}}}\n")
        configfiles = [REPO / "config" / "paper.yaml", site]
    unquoted = []
    checked = 0
    for rule in _workflow_rules(tmp_path, configfiles):
        command = getattr(rule, "shellcmd", None)
        if not command:
            continue
        checked += 1
        for name in PLACEHOLDER.findall(command):
            if name != "threads" and not name.endswith(":q"):
                unquoted.append(f"{rule.name}: {{{name}}}")
    assert checked >= (15 if paper else 12)
    assert not unquoted, unquoted


def test_a_hostile_parallel_text_path_stays_one_literal_argument(tmp_path):
    """The dry run's train-mt command, executed by bash with a stand-in ``python`` that records
    its arguments: the path arrives as written, nothing in it runs."""
    hostile = tmp_path / "a$(touch PWNED)b with space.en"
    hostile.write_text("a red ball .\n")
    site = tmp_path / "site.yaml"
    site.write_text(json.dumps({"translation": {"model": {"parallel_text": {
        split: {"en": str(hostile), "de": str(hostile)} for split in ("train", "valid")}}}}))
    work = tmp_path / "work"
    result = run_snakemake(work, "results/translation_model/trained", "-n", "-p", "--cores", "1",
                           "--configfile", str(site))
    assert result.returncode == 0, result.stderr[-2000:]
    (command,) = [line.split("Shell command:", 1)[1].strip()
                  for line in (result.stdout + result.stderr).splitlines()
                  if "Shell command:" in line and "train-mt" in line]
    stub = tmp_path / "bin" / "python"
    stub.parent.mkdir()
    stub.write_text("#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > \"$ARGS_OUT\"\n")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    (work / "results" / "logs" / "train_mt").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}", "ARGS_OUT": str(tmp_path / "args")}
    subprocess.run(["bash", "-c", command], cwd=work, env=env, check=True)
    args = (tmp_path / "args").read_text().splitlines()
    assert args.count(str(hostile)) == 4  # source/target x train/valid, each one argument
    assert not list(tmp_path.rglob("PWNED")) and not (work / "PWNED").exists()


def test_truncated_feature_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "test.npz"
    save_features(path, image_ids=["a", "b"], features=np.ones((2, 4), dtype=np.float32))
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(UnreadableFileError, match=rf"{re.escape(str(path))}: cannot read a feature "
                                                  r"file .*delete it and rerun the features step"):
        load_features(path)


def _pairs(path: Path) -> Path:
    from pseudopairs.core.io import PAIR_COLUMNS

    row = {c: "x" for c in PAIR_COLUMNS}
    row.update(query_caption_idx=0, match_row=0, match_caption_idx=0, similarity=0.5, score=0.5)
    pd.DataFrame([row]).to_parquet(path, index=False)
    return path


def test_cli_failure_is_one_line_without_traceback(tmp_path, capsys):
    pairs = _pairs(tmp_path / "pairs.parquet")
    pairs.write_bytes(pairs.read_bytes()[:40])  # truncated Parquet
    code = cli.main(["pseudopair-captions", "--pairs", str(pairs), "--min-percentile", "0",
                     "--dataset", "d", "--output", str(tmp_path / "out.parquet")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith(f"pseudopairs pseudopair-captions: error: {pairs}: cannot read a pseudopair file")
    with pytest.raises(UnreadableFileError):  # --verbose shows the real exception instead
        cli.main(["--verbose", "pseudopair-captions", "--pairs", str(pairs), "--min-percentile", "0",
                  "--dataset", "d", "--output", str(tmp_path / "out.parquet")])


def test_full_disk_is_one_line_naming_the_output(tmp_path, capsys, monkeypatch):
    pairs = _pairs(tmp_path / "pairs.parquet")

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    out = tmp_path / "out.parquet"
    code = cli.main(["pseudopair-captions", "--pairs", str(pairs), "--min-percentile", "0",
                     "--dataset", "d", "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert f"{out}: no space left on the device while writing it; free some space and rerun" in err[0]
    assert not out.exists() and not list(tmp_path.glob(".out.parquet.*"))  # no partial output


def test_truncated_checkpoint_names_the_file(tmp_path):
    import torch

    from pseudopairs.model.checkpoints import load_model

    path = tmp_path / "checkpoint.pt"
    torch.save({"format": "pseudopairs.ranking-model/1", "weights": torch.zeros(1000)}, path)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(UnreadableFileError, match=rf"{re.escape(str(path))}: cannot read a model "
                                                  r"checkpoint .*delete it and rerun its training job"):
        load_model(path)


def test_published_translation_model_on_the_demo_world_plans_its_download(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(json.dumps({"translation": {"model": {
        "source": "download", "url": "http://127.0.0.1:9/model.tar.gz",
        "checkpoint": "averaged-10-epoch.pt", "tokenizer": "sentencepiece.model"}}}))
    result = run_snakemake(tmp_path, "results/translation_model/ctranslate2", "-n", "--cores", "1",
                           "--configfile", str(site))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "download_translation_model" in result.stdout and "KeyError" not in result.stderr


def test_empty_caption_tables_are_refused_with_the_count(tmp_path, capsys):
    raw = pd.DataFrame({"dataset": "m30k", "split": "train", "image_id": [f"i{i}" for i in range(50)],
                        "lang": "de", "caption_idx": 0, "raw": ["   "] * 49 + ["ein ball ."]})
    raw.to_parquet(tmp_path / "raw.parquet", index=False)
    code = cli.main(["prepare-captions", "--input", str(tmp_path / "raw.parquet"),
                     "--output", str(tmp_path / "out.parquet")])
    err = capsys.readouterr().err
    assert code == 1 and "49 of 50 de captions (after preparation) are empty" in err
    assert not (tmp_path / "out.parquet").exists()
    with pytest.raises(ValueError, match="t.parquet: no de captions"):
        check_caption_texts([], source="t.parquet", what="de captions")
    check_caption_texts(["a"] * 200 + [""], source="t", what="x")  # one empty in 201: a warning only


def test_a_criterion_k_beyond_the_data_fails_at_dag_time(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("pseudopairs:\n  de_coco.csls: {source: de_coco, queries: coco.en, "
                    "database: m30k.de, mining: {criterion: csls, k: 100000}}\n")
    result = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", str(site))
    assert result.returncode != 0
    assert ("config key 'pseudopairs.de_coco.csls.mining.k': k=100000 exceeds the 5000 database rows "
            "(criterion 'csls' averages each query's k nearest database rows) (coco.en: 15000, m30k.de: "
            "5000 captions)") in result.stdout + result.stderr


def test_an_unchanged_table_keeps_its_file_and_time(tmp_path):
    """write_parquet_if_changed: the same content leaves the file (and its modification time)
    as it was and no temporary beside it; other content replaces it."""
    from pseudopairs.core.io import write_parquet_if_changed

    path = tmp_path / "images.parquet"
    frame = pd.DataFrame({"image_id": ["a", "b"], "path": ["a.png", "b.png"]})
    assert write_parquet_if_changed(path, frame) is True
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert write_parquet_if_changed(path, frame.copy()) is False
    assert path.stat().st_mtime_ns == 1_000_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images.parquet"]
    assert write_parquet_if_changed(path, frame.iloc[::-1]) is True
    assert path.stat().st_mtime_ns != 1_000_000_000
    assert pd.read_parquet(path)["image_id"].tolist() == ["b", "a"]
