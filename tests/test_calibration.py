"""SLURM asks what runs use: the calibration file of measured GPU rates (pseudopairs.workflow.calibration)
turns each GPU job kind's work into a walltime and a memory request, the resources of every rule
come from one module (pseudopairs.workflow.cluster), and a dry run's GPU-hours are summed against the
estimate. Numbers below are worked by hand from the shipped files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from pseudopairs.workflow import calibration as cal
from pseudopairs.workflow.cluster import ClusterResources, capped, walltime
from pseudopairs.workflow.config import ConfigError, check_config, load_config

H100 = REPO / "config" / "calibration" / "h100.yaml"
H200 = REPO / "config" / "calibration" / "h200.yaml"
# a training section (the paper's; what the estimate reads: validate_every, tf32, stack_precision)
PAPER_TRAINING = {"batch_size": 128, "learning_rate": 2e-4, "grad_clip": 2.0, "margin": 0.2,
                  "max_violation": True, "c2c_probability": 0.5, "patience": 10, "max_updates": 10**6}
TRAINING = {"training": {**PAPER_TRAINING, "validate_every": 500}}


def test_shipped_calibrations_read_and_interpolate_stacks_by_hand():
    h200 = cal.Calibration.read(H200)
    assert h200.gpu_model == "NVIDIA H200"
    assert h200.train_rate(3) == 231.4 and h200.train_rate(10) == 295.2 and h200.train_rate(1) == 122.6
    assert h200.train_rate(7) == pytest.approx(231.4 + (295.2 - 231.4) * 4 / 7)   # 267.86, between 3 and 10
    assert h200.train_rate(2) == pytest.approx((122.6 + 231.4) / 2)
    assert h200.train_rate(16) == 295.2                                          # no gain assumed past 10
    assert h200.train_rate(10, tf32=True) == 548.0
    # a stack of 3: 60 s start + 3 x 30,000 / 231.4 s + 3 x 60 validations x 0.14 s
    assert h200.estimate_seconds("train", TRAINING, models=3) == pytest.approx(60 + 90000 / 231.4 + 25.2)
    # x 1.5 = 711.2 s -> 12 minutes; TF32 halves the updates' time
    assert h200.requested_minutes("train", TRAINING, models=3) == 12
    tf32 = {"training": {**PAPER_TRAINING, "validate_every": 500, "tf32": True}}
    assert h200.estimate_seconds("train", tf32, models=3) == pytest.approx(60 + 90000 / 485.9 + 25.2)
    # validate_every from the config: every 100 updates = 300 validations per model
    often = {"training": {**PAPER_TRAINING, "validate_every": 100}}
    assert h200.estimate_seconds("train", often, models=1) == pytest.approx(60 + 30000 / 122.6 + 300 * 0.14)
    h100 = cal.Calibration.read(H100)
    assert h100.gpu_model == "NVIDIA H100 80GB HBM3" and h100.train_rate(1) == 100.8


def test_every_kind_has_an_estimate_a_floor_and_a_memory_request():
    h100 = cal.Calibration.read(H100)
    # features: 60 + 123,287 / 1,088 = 173.3 s, x 1.5 = 260 s -> 4.3 min, floored at 5
    assert h100.estimate_seconds("features", TRAINING) == pytest.approx(60 + 123287 / 1088)
    assert h100.requested_minutes("features", TRAINING) == 5
    # translate: 60 + 566,113 / 1,644 = 404.4 s x 1.5 = 606.6 s -> 11 min
    assert h100.requested_minutes("translate", TRAINING) == math.ceil((60 + 566113 / 1644) * 1.5 / 60) == 11
    # mine: start + encoding + the search x the criterion's factor (unknown: the slowest)
    assert h100.estimate_seconds("mine", TRAINING, criterion="cosine") == pytest.approx(120 + 7.97)
    assert h100.estimate_seconds("mine", TRAINING, criterion="sinkhorn") == pytest.approx(120 + 7.97 * 17.5)
    assert h100.estimate_seconds("mine", TRAINING) == h100.estimate_seconds("mine", TRAINING, criterion="sinkhorn")
    assert h100.requested_minutes("mine", TRAINING, criterion="sinkhorn") == 7   # 389.4 s -> 6.5 -> 7
    # memory: (peak RSS + CUDA's host share) x 1.5, up to 500 MB
    assert h100.requested_memory_mb("train") == 9500          # (3,254 + 3,000) x 1.5 = 9,381
    assert h100.requested_memory_mb("mine") == 15500          # (7,100 + 3,000) x 1.5 = 15,150
    with pytest.raises(cal.CalibrationError, match="no estimate for job kind 'table'"):
        h100.estimate_seconds("table", TRAINING)
    with pytest.raises(cal.CalibrationError, match="has no 'nearest'"):
        h100.estimate_seconds("mine", TRAINING, criterion="nearest")


def _shipped() -> dict:
    return yaml.safe_load(H200.read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["rates"].pop("validation_s"), r"rates\.validation_s is missing"),
    (lambda d: d["work"].pop("startup_s"), r"work\.startup_s is missing"),
    (lambda d: d["memory_mb"].pop("mine"), r"memory_mb\.mine is missing"),
    (lambda d: d["rates"].update(features_images_per_s=0), r"rates\.features_images_per_s: must be a positive number, got 0"),
    (lambda d: d["rates"]["train_updates_per_s"]["float32"].update({"three": 1.0}),
     r"train_updates_per_s\.float32: stack size 'three' is not a whole number"),
    (lambda d: d.pop("gpu_model"), "no 'gpu_model'"),
])
def test_a_broken_calibration_names_its_entry(tmp_path, edit, message):
    data = _shipped()
    edit(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(cal.CalibrationError, match=message):
        cal.Calibration.read(path)


def test_the_config_check_names_resources_calibration(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(f"resources: {{calibration: {tmp_path / 'missing.yaml'}}}\n")
    files = [REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml", site]
    with pytest.raises(ConfigError, match=r"config key 'resources.calibration': .*missing.yaml: calibration file not found"):
        check_config(load_config(*files))
    # relative paths fall back to the clone (a workflow run elsewhere still finds the shipped files)
    site.write_text("resources: {calibration: config/calibration/h100.yaml}\n")
    config = check_config(load_config(*files))
    assert cal.from_config(config).gpu_model == "NVIDIA H100 80GB HBM3"


def test_benchmarks_record_their_rates_into_a_calibration_file(tmp_path):
    path = tmp_path / "calibration.yaml"
    cal.record(path, gpu_model="NVIDIA L40S", rates={"validation_s": 0.3,
                                                     "train_updates_per_s": {"float32": {10: 400.0}}},
               note="benchmarks/training.py")
    written = cal.Calibration.read(path)
    assert written.gpu_model == "NVIDIA L40S" and written.rates["validation_s"] == 0.3
    # merged key by key: the measured S = 10 replaced, the shipped S = 1 and 3 kept
    assert written.train_rate(10) == 400.0 and written.train_rate(3) == 190.3
    assert written.provenance["rates.validation_s"].startswith("measured on NVIDIA L40S 20")
    assert "benchmarks/training.py" in written.provenance["rates.train_updates_per_s.float32.10"]
    cal.record(path, gpu_model="NVIDIA L40S", memory_mb={"cuda_host_mb": 2100})
    again = cal.Calibration.read(path)
    assert again.memory_mb["cuda_host_mb"] == 2100 and again.rates["validation_s"] == 0.3
    with pytest.raises(cal.CalibrationError, match="holds rates of 'NVIDIA L40S', not 'NVIDIA H100"):
        cal.record(path, gpu_model="NVIDIA H100 80GB HBM3", rates={"validation_s": 0.1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.yaml"]   # atomic: no temporaries
    with pytest.raises(cal.CalibrationError, match=r"rates\.mine_s: must be a positive number"):
        cal.record(tmp_path / "other.yaml", gpu_model="X", rates={"mine_s": -1})
    assert not (tmp_path / "other.yaml").exists()


DRY_RUN = """\
rule features:
    input: a
    wildcards: corpus=coco, split=train
    resources: tmpdir=/tmp, mem_mb=8500, runtime=5, gpu=1
Group job stack_de.seeds1-3 (jobs in lexicogr. order):
    rule evaluate_stack_seeds1_3:
        resources: tmpdir=/tmp, mem_mb=7000, runtime=5, gpu=1
    rule train_stack_seeds1_3:
        resources: tmpdir=/tmp, mem_mb=9500, runtime=15, gpu=1
rule mine:
    wildcards: pseudopairs=de_coco.sinkhorn, seed=1
    resources: tmpdir=/tmp, mem_mb=15500, runtime=7, gres=gpu:a100:2
localrule table:
    resources: tmpdir=/tmp, mem_mb=4000, runtime=60
"""


def test_a_dry_runs_gpu_hours_against_the_estimate_by_hand():
    jobs = cal.dry_run_jobs(DRY_RUN)
    assert [(j.rule, j.group, j.gpus, j.minutes) for j in jobs] == [
        ("features", None, 1, 5), ("evaluate_stack_seeds1_3", "stack_de.seeds1-3", 1, 5),
        ("train_stack_seeds1_3", "stack_de.seeds1-3", 1, 15), ("mine", None, 2, 7), ("table", None, 0, 60)]
    assert jobs[3].wildcards == {"pseudopairs": "de_coco.sinkhorn", "seed": "1"}
    assert cal.job_kind("train_stack_seeds4_10") == ("train", 7)
    assert cal.job_kind("translate_augment") == ("translate", 1) and cal.job_kind("table") is None
    assert cal.job_kind("translate_clc") == ("translate", 1) and cal.job_kind("table") is None
    config = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                                      REPO / "config" / "paper.yaml"))
    h100 = cal.Calibration.read(H100)
    plan = cal.plan_gpu_hours(jobs, h100, config)
    # requested: (5 + 5 + 15) min x 1 GPU + 7 min x 2 GPUs = 39 min
    assert plan["jobs"] == 4 and plan["requested"] == pytest.approx(39 / 60)
    estimated = (h100.estimate_seconds("features", config) + h100.estimate_seconds("evaluate", config, models=3)
                 + h100.estimate_seconds("train", config, models=3)
                 + 2 * h100.estimate_seconds("mine", config, criterion="sinkhorn")) / 3600
    assert plan["estimated"] == pytest.approx(estimated)
    assert plan["by_kind"]["mine"]["requested"] == pytest.approx(14 / 60)
    with pytest.raises(cal.CalibrationError, match="GPU job of rule 'pretrain_mystery'"):
        cal.plan_gpu_hours([cal.PlannedJob("pretrain_mystery", None, 1, 10)], h100, config)


# ---- pseudopairs.workflow.cluster: the resources of a rule, without Snakemake ------------------------------

RESOURCES = {"gpu": 1, "mem_mb": {"default": 2000, "train": 3000}, "runtime": {"default": 30, "train": 25, "evaluate": 8},
             "runtime_cap": 100,
             "slurm": {"partition": {"cpu": "short", "gpu": "gpu", "features": "gpu-io"}, "account": "proj",
                       "gpu_model": "a100"}}


def _expand(resources: dict, attempt: int = 1) -> dict:
    return {k: (v(None, attempt) if callable(v) else v) for k, v in resources.items()}


def test_one_module_gives_every_rule_its_resources():
    cluster = ClusterResources({"resources": RESOURCES})
    assert _expand(cluster.job_resources("table")) == {"mem_mb": 2000, "runtime": 30, "slurm_partition": "short",
                                                       "slurm_account": "proj"}
    assert _expand(cluster.job_resources("features", gpu=True), 2) == {
        "mem_mb": 4000, "runtime": 60, "gpu": 1, "slurm_partition": "gpu-io", "slurm_account": "proj",
        "gpu_model": "a100"}
    # a stack of 3: 3 x (25 + 8) = 99 > the cap 100? no: 99 first; the retry shares the cap 25:8
    train, evaluate = (cluster.stack_resources(step, 3) for step in ("train", "evaluate"))
    assert (_expand(train)["runtime"], _expand(evaluate)["runtime"]) == (75, 24)
    assert (_expand(train, 2)["runtime"], _expand(evaluate, 2)["runtime"]) == (100 * 75 // 99, 100 * 24 // 99)
    assert _expand(evaluate)["slurm_partition"] == "gpu" and _expand(evaluate)["mem_mb"] == 2000
    gres = ClusterResources({"resources": {**RESOURCES, "gpu": 2, "slurm": {"gres": "gpu:a100", "gpu_model": "v100"}}})
    placed = _expand(gres.job_resources("mine", gpu=True))
    assert placed["gres"] == "gpu:a100:2" and "gpu" not in placed and "gpu_model" not in placed
    assert "gres" not in _expand(gres.job_resources("table"))


def test_a_calibration_replaces_runtime_and_memory_of_the_gpu_kinds_only():
    calibration = cal.Calibration.read(H200)
    config = {"resources": RESOURCES, "training": {**PAPER_TRAINING, "validate_every": 500}}
    cluster = ClusterResources(config, calibration=calibration)
    train = _expand(cluster.stack_resources("train", 3))
    assert (train["runtime"], train["mem_mb"]) == (12, 9500)             # 711.2 s -> 12 min (above)
    assert _expand(cluster.job_resources("table"))["runtime"] == 30      # not a GPU kind: resources.runtime
    assert _expand(cluster.job_resources("table"))["mem_mb"] == 2000


def test_walltime_and_capped_agree():
    runtimes = {"default": 60, "train": 120, "evaluate": 20}
    for attempt in (1, 2, 3):
        assert walltime(runtimes, "train", attempt, cap=300, grouped_with=["evaluate"], models=2) == \
            capped({"train": 240, "evaluate": 40}, "train", attempt, cap=300)
    with pytest.raises(ValueError, match="attempt must be a whole number >= 1, got 1.5"):
        capped({"train": 1}, "train", 1.5)


def test_common_smk_holds_no_resource_logic():
    """The rules' resources come from pseudopairs.workflow.cluster: common.smk binds its two functions and
    defines none of mem_mb / runtime / placement / job_resources / stack_resources itself."""
    text = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert "job_resources, stack_resources = cluster.rule_resources(config)" in text
    for name in ("mem_mb", "runtime", "placement", "job_resources", "stack_resources"):
        assert f"def {name}(" not in text, name
    assert 'config["resources"]' not in text


def test_the_demo_asks_what_it_asked_before(tmp_path):
    """The demo (config/config.yaml: no calibration, no GPU) keeps its requests: resources.runtime
    × the models of a stack, resources.mem_mb, no GPU (the same as before the resources moved into
    pseudopairs.workflow.cluster; the whole dry run compared equal when they moved)."""
    from snakemake.iocontainers import InputFiles, Wildcards

    from test_cluster import parsed_workflow

    with parsed_workflow(tmp_path, []) as workflow:
        rules = {rule.name: rule for rule in workflow.rules}
        block, none = Wildcards(fromdict={"experiment": "en"}), Wildcards(fromdict={})
        want = {"train_stack_seeds1_3": (3000, 90), "evaluate_stack_seeds1_3": (2000, 90),
                "train_stack_seeds4_5": (3000, 60), "features": (4000, 30), "table": (2000, 30)}
        for name, (memory, minutes) in want.items():
            got = rules[name].expand_resources(none if name == "table" else block, InputFiles(), 1)
            assert (got["mem_mb"], got["runtime"]) == (memory, minutes), name
            assert "gpu" not in got and "gres" not in got, name
        retry = rules["train_stack_seeds1_3"].expand_resources(block, InputFiles(), 2)
        assert (retry["mem_mb"], retry["runtime"]) == (6000, 180)


def test_a_job_whose_estimate_is_over_a_minute_asks_at_most_twice_it():
    """The 5-minute minimum made a stack of 1's evaluation (1.4 min estimated) ask 5 (3.6x) and a
    mutual-criterion mining job (2.2 min) 5: an estimate over a minute now asks at most twice it,
    rounded down, and never less than it; one under a minute keeps the minimum."""
    h100 = cal.Calibration.read(H100)
    # evaluate, one model: 60 + 24 s (the H100 file's evaluate_model_s) = 1.4 min -> 2.1 -> 3, at most floor(2.8) = 2
    estimate = h100.estimate_seconds("evaluate", TRAINING) / 60
    assert estimate == pytest.approx(1.4, abs=0.01) and h100.requested_minutes("evaluate", TRAINING) == 2
    asked = {}
    for kind in cal.KINDS:
        for models in ((1, 2, 3, 5, 7, 10) if kind in ("train", "evaluate") else (1,)):
            criteria = [None, *h100.rates["mine_criterion_factor"]] if kind == "mine" else [None]
            for criterion in criteria:
                minutes = h100.estimate_seconds(kind, TRAINING, models=models, criterion=criterion) / 60
                requested = h100.requested_minutes(kind, TRAINING, models=models, criterion=criterion)
                asked[(kind, models, criterion)] = requested / minutes
                assert minutes > 1 and minutes <= requested <= 2 * minutes, (kind, models, criterion, minutes, requested)
    assert max(asked.values()) <= 2.0 and asked[("evaluate", 3, None)] < 2.0
