"""No silent CPU fallback: a job that a scheduler gave a GPU (or that asks for cuda) and whose
torch sees none fails at once with one line naming the driver, the container's --nv and the CUDA
build, before any work — through the one device resolver every stage uses
(pseudopairs.core.settings.resolve_device). This CPU-only machine is such a node once SLURM_JOB_GPUS
is set."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conftest import REPO, run_settings
from pseudopairs import cli
from pseudopairs.core.settings import NoGPUError, gpu_job, resolve_device

CUDA13 = lambda: "torch 2.14.1+cu130 (CUDA 13.0 build)"  # noqa: E731
CPU_BUILD = lambda: "torch 2.14.1+cpu (a CPU-only build: no CUDA)"  # noqa: E731
NONE = lambda: 0  # noqa: E731


def test_the_scheduler_variables_that_make_a_gpu_job():
    assert gpu_job({}) is None
    assert gpu_job({"SLURM_JOB_GPUS": "0"}) == "SLURM_JOB_GPUS=0"          # GPU index 0
    assert gpu_job({"SLURM_STEP_GPUS": "2,3"}) == "SLURM_STEP_GPUS=2,3"
    assert gpu_job({"SLURM_GPUS_ON_NODE": "0", "SLURM_JOB_GPUS": "(null)"}) is None   # counts: 0 = none
    assert gpu_job({"SLURM_GPUS_ON_NODE": "4"}) == "SLURM_GPUS_ON_NODE=4"
    assert gpu_job({"PSEUDOPAIRS_REQUIRE_GPU": "1"}) == "PSEUDOPAIRS_REQUIRE_GPU=1"
    assert gpu_job({"PSEUDOPAIRS_REQUIRE_GPU": "0", "CUDA_VISIBLE_DEVICES": "0"}) is None


def test_a_gpu_job_without_a_visible_gpu_fails_in_one_line_naming_what_to_check():
    allocated = {"SLURM_JOB_GPUS": "0"}
    with pytest.raises(NoGPUError) as caught:
        resolve_device("auto", key="training.device", cuda_count=NONE, environ=allocated, build=CUDA13)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("training.device: the scheduler gave this job a GPU "
                                                      "(SLURM_JOB_GPUS=0), but no CUDA device is visible")
    for part in ("nvidia-smi; driver >= 580 for CUDA 13.0", "--nv", "CUDA build of torch", "nothing was run on the CPU"):
        assert part in message
    # a CPU-only torch: the build is named, no driver minimum is invented
    with pytest.raises(NoGPUError, match=r"a CPU-only build: no CUDA\): check the node's NVIDIA driver \(nvidia-smi\), "):
        resolve_device("auto", key="mining.device", cuda_count=NONE, environ=allocated, build=CPU_BUILD)
    # asking for cuda fails the same way, scheduler or not
    with pytest.raises(NoGPUError, match=r"^features.device: cuda:1 was asked for, but no CUDA device"):
        resolve_device("cuda:1", key="features.device", cuda_count=NONE, environ={}, build=CUDA13)


def test_cpu_jobs_and_asked_for_cpu_are_left_alone():
    assert resolve_device("auto", key="k", cuda_count=NONE, environ={}) == "cpu"       # no GPU job: auto = CPU
    assert resolve_device("cpu", key="k", cuda_count=NONE, environ={"SLURM_JOB_GPUS": "0"}) == "cpu"
    assert resolve_device("auto", key="k", cuda_count=lambda: 1, environ={"SLURM_JOB_GPUS": "0"}) == "cuda"
    # another library's count (CTranslate2): the message does not blame torch
    with pytest.raises(NoGPUError, match="visible to the step's library"):
        resolve_device("auto", key="translation.translate.device", cuda_count=NONE, environ={"SLURM_JOB_GPUS": "0"})


@pytest.fixture
def gpu_node_without_gpu(monkeypatch):
    """This process as a SLURM GPU job on a node whose torch sees no GPU (this machine has none)."""
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    monkeypatch.setattr("pseudopairs.core.settings._torch_cuda_count", NONE)


_JOB = ('{"experiment": "e", "device": "auto", "threads": 1, "data": {"captions": "c.parquet", '
        '"features": "f.npz", "langs": ["en"], "translation_captions": "t.parquet", '
        '"translation_langs": ["en", "de"]}, "models": {"1": {"checkpoint": "c.pt", "vocab": "v.json", '
        '"output": "OUT"}}}')


@pytest.mark.parametrize("command, key", [
    (["evaluate", "--job", _JOB], "experiments.e.training.device"),
    (["evaluate-clc", "--checkpoint", "c.pt", "--vocab", "v.json", "--spec", "{}", "--experiment", "e",
      "--seed", "1", "--output", "OUT", "--device", "auto"], "--device"),
])
def test_evaluation_stages_fail_before_reading_anything(gpu_node_without_gpu, tmp_path, capsys, command, key):
    """An evaluation job (its device the experiment's own, in the job) or a CLC evaluation."""
    out = tmp_path / "metrics.json"
    code = cli.main([arg.replace("OUT", str(out)) for arg in command])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and not out.exists()
    assert err[-1].startswith(f"pseudopairs {command[0]}: error: {key}: the scheduler gave this job a GPU")


def test_training_stops_before_any_update(gpu_node_without_gpu, tmp_path):
    from pseudopairs.model.stack_training import train_stack
    from pseudopairs.model.training import train
    from test_training import SETTINGS, _world

    spec, _ = _world(tmp_path / "world")
    settings = {**SETTINGS, "device": "auto"}
    with pytest.raises(NoGPUError, match="^training.device: the scheduler gave this job a GPU"):
        train(spec=spec, settings=run_settings(settings), out_dir=tmp_path / "one", seed=1)
    assert not any((tmp_path / "one").glob("*"))
    jobs = [{"seed": s, "spec": spec, "out_dir": str(tmp_path / f"s{s}")} for s in (1, 2)]
    with pytest.raises(NoGPUError, match="^training.device: the scheduler gave this job a GPU"):
        train_stack(jobs=jobs, settings=run_settings(settings))
    assert not (tmp_path / "s1").exists()


def test_features_and_mining_resolve_through_the_same_check(gpu_node_without_gpu, tmp_path):
    import numpy as np
    import pandas as pd
    from PIL import Image

    from pseudopairs.features.extract import extract_features
    from pseudopairs.features.settings import FeatureSettings
    from pseudopairs.mining.job import MiningJob
    from pseudopairs.mining.step import mine_pseudopairs

    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((20, 20, 3), dtype=np.uint8)).save(image)
    images = pd.DataFrame({"image_id": ["a"], "path": [str(image)]})
    with pytest.raises(NoGPUError, match="^features.device: the scheduler gave this job a GPU"):
        extract_features(images, settings=FeatureSettings.from_dict({"resize": 16, "crop": 16}), progress=False)
    job = MiningJob.from_dict({"pseudopairs": "p", "source": "s", "seed": 1, "checkpoint": "c.pt", "vocab": "v.json",
                               "queries": {"name": "q", "captions": "q.parquet", "lang": "en"},
                               "database": {"name": "d", "captions": "d.parquet", "lang": "de"},
                               "engine": {"device": "auto"}})
    with pytest.raises(NoGPUError, match="^mining.device: the scheduler gave this job a GPU"):
        mine_pseudopairs(job=job, pairs_path=tmp_path / "p", stats_path=tmp_path / "s", progress=False)
    assert not (tmp_path / "p").exists()


def test_no_stage_picks_its_device_by_itself():
    """Every stage resolves its device through pseudopairs.core.settings.resolve_device: nothing else
    in the package asks torch.cuda.is_available() to choose one (the RNG state of a checkpoint
    is not a device choice)."""
    offenders = []
    for path in sorted((REPO / "src" / "pseudopairs").rglob("*.py")):
        if path.name == "settings.py" and path.parent.name == "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("cuda.is_available"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == ["src/pseudopairs/model/checkpoints.py:77", "src/pseudopairs/model/checkpoints.py:88"]
