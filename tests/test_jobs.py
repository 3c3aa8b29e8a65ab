"""Typed jobs (pseudopairs.core.jobs): one nested object per job from the config to the step, its
threads and device the experiment's own, one device notion for every stage."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest

from conftest import REPO, run_snakemake
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.evaluation import contract as evaluation_contract
from pseudopairs.evaluation.job import EvaluationJob
from pseudopairs.core.jobs import Job, JobError
from pseudopairs.mining import contract as mining_contract
from pseudopairs.mining.job import MiningJob
from pseudopairs.mining.settings import MiningSettings
from pseudopairs.model.job import RunSettings
from pseudopairs.core.settings import SettingsError, resolve_device


def demo() -> dict:
    return load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")


@dataclass(frozen=True)
class _Part(Job):
    path: str
    langs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Whole(Job):
    WHERE = "toy job"

    engine: MiningSettings
    parts: list[_Part]
    by_seed: dict[str, _Part]
    init: str | None = None


def test_a_job_round_trips_through_json_and_its_errors_name_the_field():
    whole = _Whole(engine=MiningSettings(threads=2), parts=[_Part("a", ["en"])],
                   by_seed={"1": _Part("b")})
    text = whole.to_json()
    # a settings section travels as the values that differ from its defaults (a setting added
    # later changes no job's parameters); from_dict fills the defaults in again
    assert json.loads(text) == {"engine": {"threads": 2},
                                "init": None, "parts": [{"langs": ["en"], "path": "a"}],
                                "by_seed": {"1": {"langs": [], "path": "b"}}}
    assert _Whole.from_dict(json.loads(text)) == whole
    with pytest.raises(JobError, match=r"^toy job.parts.0.langs: must be a list, got 'en'$"):
        _Whole.from_dict({**json.loads(text), "parts": [{"path": "a", "langs": "en"}]})
    with pytest.raises(JobError, match=r"^toy job.by_seed.1.path: missing$"):
        _Whole.from_dict({**json.loads(text), "by_seed": {"1": {}}})
    with pytest.raises(JobError, match=r"^toy job: unknown field\(s\) extra"):
        _Whole.from_dict({**json.loads(text), "extra": 1})
    # a settings section is checked by its class, the message naming the section's key too
    with pytest.raises(JobError, match=r"^toy job.engine: mining.threads: must be an integer >= 1, got 0$"):
        _Whole.from_dict({**json.loads(text), "engine": {"threads": 0}})


def test_the_mining_job_keeps_engine_criterion_and_parameters_apart():
    config = check_config(demo())
    job = mining_contract.mining_job(config, "de_coco.csls", 2)
    assert (job.criterion, job.params, job.engine) == ("csls", {"k": 10}, MiningSettings())
    assert job.inputs() == sorted(["results/models/de_coco/seed2/checkpoint.pt",
                                   "results/models/de_coco/seed2/vocab.json",
                                   "results/captions/coco/train.parquet",
                                   "results/captions/m30k/train.parquet"])
    # stats.json records the settings as one mapping, as before the job was typed
    assert job.with_threads(4).settings_record() == {"criterion": "csls", "k": 10, "device": "auto",
                                                     "block_size": None, "encode_batch_size": 256,
                                                     "threads": 4}
    assert MiningJob.from_dict(json.loads(job.to_json())) == job


def test_one_device_notion_for_every_stage():
    """auto, cpu, cuda and cuda:N in every stage that takes a device (CTranslate2's translation
    too: cuda:N is its device index); anything else refused naming the key."""
    from pseudopairs.translation.settings import TranslateSettings
    from pseudopairs.translation.translate import ctranslate2_device

    for path in (("mining",), ("features",), ("training",), ("translation", "translate")):
        key = ".".join(path) + ".device"
        for value, ok in (("cuda:1", True), ("cpu", True), ("gpu", False), ("cuda1", False)):
            config = demo()
            section = config
            for part in path:
                section = section[part]
            section["device"] = value
            if ok:
                check_config(config)
            else:
                with pytest.raises(ConfigError, match=rf"config key '{key}': must be auto, cpu, cuda or cuda:N"):
                    check_config(config)
    assert "device_index" not in TranslateSettings.defaults()
    assert ctranslate2_device(TranslateSettings(device="cpu")) == ("cpu", 0, "int8")
    assert resolve_device("cpu", key="k", cuda_count=lambda: 0) == "cpu"
    assert resolve_device("auto", key="k", cuda_count=lambda: 0) == "cpu"
    assert resolve_device("auto", key="k", cuda_count=lambda: 2) == "cuda"
    assert resolve_device("cuda:1", key="k", cuda_count=lambda: 2) == "cuda:1"
    with pytest.raises(SettingsError, match=r"^k: cuda:2 was asked for, but only 2 CUDA device\(s\) are visible"):
        resolve_device("cuda:2", key="k", cuda_count=lambda: 2)
    with pytest.raises(SettingsError, match=r"^k: cuda was asked for, but no CUDA device is visible"):
        resolve_device("cuda", key="k", cuda_count=lambda: 0)
    with pytest.raises(SettingsError, match=r"^k: must be auto, cpu, cuda or cuda:N, got 'cuda:x'"):
        resolve_device("cuda:x", key="k", cuda_count=lambda: 2)


def test_the_evaluation_job_takes_the_experiments_own_device_and_threads():
    config = demo()
    config["experiments"]["en_de_coco_c2c"]["training"] = {"device": "cuda:1", "threads": 2}
    config = check_config(config)
    job = evaluation_contract.evaluation_job(config, "en_de_coco_c2c", [1, 2, 3])
    assert (job.device, job.threads, list(job.models)) == ("cuda:1", 2, ["1", "2", "3"])
    assert job.models["2"].output == "results/models/en_de_coco_c2c/seed2/metrics.json"
    other = evaluation_contract.evaluation_job(config, "en_de_coco", 1)
    assert (other.device, other.threads) == ("auto", 1)
    assert EvaluationJob.from_dict(json.loads(job.to_json())) == job
    with pytest.raises(JobError, match=r"evaluation job.device: must be auto, cpu, cuda or cuda:N, got 'gpu'"):
        EvaluationJob.from_dict({**json.loads(job.to_json()), "device": "gpu"})


def _shell(block: str) -> str:
    return re.search(r"^Shell command: (.*)$", block, re.M).group(1)


def _blocks(output: str) -> list[str]:
    return re.split(r"\n(?=[ ]*(?:local)?rule \w+:\n)", output)


@pytest.mark.parametrize("stack", [[3], [1]])
def test_an_experiments_device_and_threads_reach_its_train_and_evaluate_jobs(tmp_path, stack):
    """experiments.X.training.device reaches X's training *and* evaluation jobs (a stack's and a
    single model's), and its threads are the jobs' threads (the step is told --threads N), while
    another experiment keeps the config's."""
    site = tmp_path / "site.yaml"
    site.write_text("experiments:\n  en_de_coco_c2c:\n    c2i: [m30k.en, m30k.de, coco.en]\n"
                    "    c2c: [[m30k.en, m30k.de]]\n    training: {device: 'cuda:1', threads: 2}\n"
                    f"training: {{stack: {stack}}}\n")
    targets = [f"results/models/{name}/seed{seed}/metrics.json" for name in ("en_de_coco_c2c", "en_de")
               for seed in (1, 2, 3)]
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "4", *targets, "--configfile", str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    found = {}
    for block in _blocks(result.stdout):
        rule = re.match(r"\s*(?:local)?rule (\w+):", block)
        if not rule or not rule.group(1).startswith(("train", "evaluate")):
            continue
        command = _shell(block)
        name = "en_de_coco_c2c" if "models/en_de_coco_c2c/" in block else "en_de"
        kind = "train" if rule.group(1).startswith("train") else "evaluate"
        shown = re.search(r"^\s*threads: (\d+)$", block, re.M)   # Snakemake omits threads: 1
        threads = int(shown.group(1)) if shown else 1
        assert f"--threads {threads}" in command
        if kind == "train":
            job = json.loads(re.search(r"--job '([^']*)'", command).group(1))
            device = RunSettings.from_dict(job["settings"]).training.device   # absent: the default
        else:
            job = json.loads(re.search(r"--job '([^']*)'", command).group(1))
            device = job["device"]
            assert job["threads"] == threads
        found.setdefault((name, kind), set()).add((device, threads))
    assert found == {("en_de_coco_c2c", "train"): {("cuda:1", 2)},
                     ("en_de_coco_c2c", "evaluate"): {("cuda:1", 2)},
                     ("en_de", "train"): {("auto", 1)}, ("en_de", "evaluate"): {("auto", 1)}}
