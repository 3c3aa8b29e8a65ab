"""What the GPU jobs ask SLURM for, from measured rates: a **calibration file** per GPU model.

A calibration file (YAML; ``config/calibration/*.yaml`` ship the figures of docs/benchmarks.md,
``benchmarks/gpu_figures.sh`` writes one for the GPU it runs on) holds

- ``gpu_model``: the GPU the rates are of (``torch.cuda.get_device_name()``);
- ``rates``: what one GPU does — training (model-updates/s summed over a stack of S models, per
  measured S, float32 and TF32), a validation's seconds, a model's evaluation, feature images/s,
  the full mining job's seconds and each criterion's factor over cosine, translated sentences/s;
- ``memory_mb``: peak host memory (RSS) of each job kind, and ``cuda_host_mb``, what a process
  that uses CUDA holds on the host beyond that;
- ``work``: what one job of each kind does at the paper's size (updates per model, images of the
  largest features job, sentences of the translation job, the fixed start-up of a job);
- ``policy``: how an estimate becomes a request: ``margin`` (walltime = margin × estimate),
  ``min_minutes``, ``memory_margin``;
- ``provenance``: for each rate, where it comes from (measured on which GPU and when, scaled,
  interpolated or assumed).

:meth:`Calibration.estimate_seconds` is a job's expected GPU time; :meth:`requested_minutes`
the walltime its job asks for (``margin`` × the estimate, rounded up, at least ``min_minutes``);
:meth:`requested_memory_mb` its memory. The config key ``resources.calibration`` names the file
(null: every job asks ``resources.runtime`` / ``resources.mem_mb``, as the demo does).
:func:`plan_gpu_hours` sums a dry run's GPU jobs: what they ask for (walltime × GPUs) against
the estimate.

No torch, no Snakemake: the workflow reads this while it is parsed.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from pseudopairs.workflow.dryrun import listed_jobs
from pseudopairs.core.settings import deep_update

#: the job kinds a calibration covers: the resource names the GPU rules pass to job_resources
KINDS = ("train", "evaluate", "features", "mine", "translate")
REQUIRED_RATES = ("train_updates_per_s", "validation_s", "evaluate_model_s", "features_images_per_s",
                  "mine_s", "mine_criterion_factor", "translate_sentences_per_s")
REQUIRED_WORK = ("train_updates", "features_images", "translate_sentences", "startup_s", "mine_encode_s")
DEFAULT_POLICY = {"margin": 1.5, "min_minutes": 5, "memory_margin": 1.5}
SHIPPED = Path(__file__).resolve().parents[3] / "config" / "calibration"


class CalibrationError(ValueError):
    """A calibration file that is missing, unreadable or lacks an entry; the message names it."""


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CalibrationError(f"{where}: must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Calibration:
    """A parsed calibration file (module docstring)."""

    source: str
    gpu_model: str
    rates: dict
    memory_mb: dict
    work: dict
    policy: dict = field(default_factory=lambda: dict(DEFAULT_POLICY))
    provenance: dict = field(default_factory=dict)

    # ---- reading --------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, source: str) -> "Calibration":
        if not isinstance(data, dict):
            raise CalibrationError(f"{source}: not a calibration file (a mapping of gpu_model, rates, "
                                   f"memory_mb, work)")
        for key in ("gpu_model", "rates", "memory_mb", "work"):
            if key not in data:
                raise CalibrationError(f"{source}: no '{key}'")
        rates, work, memory = data["rates"], data["work"], data["memory_mb"]
        for name in REQUIRED_RATES:
            if name not in rates:
                raise CalibrationError(f"{source}: rates.{name} is missing")
        for name in REQUIRED_WORK:
            if name not in work:
                raise CalibrationError(f"{source}: work.{name} is missing")
        for kind in KINDS:
            if kind not in memory:
                raise CalibrationError(f"{source}: memory_mb.{kind} is missing")
        train = rates["train_updates_per_s"]
        if not isinstance(train, dict) or "float32" not in train:
            raise CalibrationError(f"{source}: rates.train_updates_per_s needs a float32 table "
                                   "({stack size: model-updates/s})")
        for precision, table in train.items():
            if not isinstance(table, dict) or not table:
                raise CalibrationError(f"{source}: rates.train_updates_per_s.{precision}: "
                                       "a mapping of stack size to model-updates/s")
            for size, rate in table.items():
                if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                    raise CalibrationError(f"{source}: rates.train_updates_per_s.{precision}: stack "
                                           f"size {size!r} is not a whole number >= 1")
                _number(rate, f"{source}: rates.train_updates_per_s.{precision}.{size}")
        for name in REQUIRED_RATES:
            if name not in ("train_updates_per_s", "mine_criterion_factor"):
                _number(rates[name], f"{source}: rates.{name}")
        for name, factor in rates["mine_criterion_factor"].items():
            _number(factor, f"{source}: rates.mine_criterion_factor.{name}")
        for name in REQUIRED_WORK:
            _number(work[name], f"{source}: work.{name}")
        for kind, megabytes in memory.items():
            _number(megabytes, f"{source}: memory_mb.{kind}")
        policy = {**DEFAULT_POLICY, **(data.get("policy") or {})}
        for name, value in policy.items():
            _number(value, f"{source}: policy.{name}")
        return cls(source=source, gpu_model=str(data["gpu_model"]), rates=rates, memory_mb=memory,
                   work=work, policy=policy, provenance=dict(data.get("provenance") or {}))

    @classmethod
    def read(cls, path: str | Path) -> "Calibration":
        path = Path(path)
        if not path.is_file():
            raise CalibrationError(f"{path}: calibration file not found")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as err:
            raise CalibrationError(f"{path}: not YAML ({err})") from None
        return cls.from_dict(data, source=str(path))

    # ---- estimates ------------------------------------------------------------------------------

    def covers(self, rule: str) -> bool:
        """Whether the resource name ``rule`` (what a rule passes to job_resources) is a
        calibrated job kind."""
        return rule in KINDS

    def train_rate(self, models: int, *, tf32: bool = False, bf16: bool = False) -> float:
        """Model-updates/s summed over a stack of ``models`` (the ``bf16`` table with ``bf16``
        products, else the TF32 one with ``tf32``, where the file has them; else float32's): the
        measured size, else linear between the measured sizes around it; below the smallest,
        proportional; beyond the largest measured stack, that stack's rate (no gain assumed)."""
        tables = self.rates["train_updates_per_s"]
        name = "bf16" if bf16 and "bf16" in tables else "tf32" if tf32 and "tf32" in tables else "float32"
        table = {int(k): float(v) for k, v in tables[name].items()}
        sizes = sorted(table)
        if models in table:
            return table[models]
        if models < sizes[0]:
            return table[sizes[0]] * models / sizes[0]
        if models > sizes[-1]:
            return table[sizes[-1]]
        lo = max(s for s in sizes if s < models)
        hi = min(s for s in sizes if s > models)
        return table[lo] + (table[hi] - table[lo]) * (models - lo) / (hi - lo)

    def criterion_factor(self, criterion: str | None) -> float:
        """A mining criterion's time over cosine mining (``rates.mine_criterion_factor``; cosine
        1); ``None`` (not known): the largest factor, an upper bound."""
        factors = {"cosine": 1.0, **{k: float(v) for k, v in self.rates["mine_criterion_factor"].items()}}
        if criterion is None:
            return max(factors.values())
        if criterion not in factors:
            raise CalibrationError(f"{self.source}: rates.mine_criterion_factor has no {criterion!r}")
        return factors[criterion]

    def estimate_seconds(self, kind: str, config: Mapping, *, models: int = 1,
                         criterion: str | None = None) -> float:
        """The expected seconds of one job of ``kind`` (a stack of ``models`` for train and
        evaluate; the mining ``criterion`` of a mine job, None: the slowest) at the paper's size
        (``work``), with ``config``'s training settings."""
        if kind not in KINDS:
            raise CalibrationError(f"{self.source}: no estimate for job kind {kind!r} (calibrated: "
                                   f"{', '.join(KINDS)})")
        rates, work = self.rates, self.work
        startup = float(work["startup_s"])
        if kind == "train":
            from pseudopairs.model.settings import TrainingSettings   # no torch: parse time

            training = TrainingSettings.from_dict(config["training"])
            updates = float(work["train_updates"])
            validations = updates / float(training.validate_every)
            rate = self.train_rate(models, tf32=training.tf32,
                                   bf16=training.stack_precision == "bf16" and models > 1)
            return startup + models * updates / rate + models * validations * float(rates["validation_s"])
        if kind == "evaluate":
            return startup + models * float(rates["evaluate_model_s"])
        if kind == "features":
            return startup + float(work["features_images"]) / float(rates["features_images_per_s"])
        if kind == "mine":
            return startup + float(work["mine_encode_s"]) + float(rates["mine_s"]) * self.criterion_factor(criterion)
        return startup + float(work["translate_sentences"]) / float(rates["translate_sentences_per_s"])

    def requested_minutes(self, kind: str, config: Mapping, *, models: int = 1,
                          criterion: str | None = None) -> int:
        """The walltime one job of ``kind`` asks for on its first attempt: ``policy.margin`` × the
        estimate, in whole minutes rounded up, at least ``policy.min_minutes`` -- but for an
        estimate over a minute never more than twice it (rounded down), so a short job (a stack
        of 3's evaluation, a mutual-criterion mining job) does not ask the minimum's 3×."""
        estimate = self.estimate_seconds(kind, config, models=models, criterion=criterion) / 60.0
        minutes = max(int(self.policy["min_minutes"]), math.ceil(estimate * float(self.policy["margin"])))
        if estimate > 1.0:
            minutes = min(minutes, math.floor(2.0 * estimate))
        return minutes

    def requested_memory_mb(self, kind: str, *, models: int = 1) -> int:
        """The memory one job of ``kind`` asks for: (its peak RSS + ``cuda_host_mb``) ×
        ``policy.memory_margin``, rounded up to 500 MB (a stack's models share the job's data:
        one job's memory, ``models`` does not change it)."""
        if kind not in KINDS:
            raise CalibrationError(f"{self.source}: no memory for job kind {kind!r}")
        peak = float(self.memory_mb[kind]) + float(self.memory_mb.get("cuda_host_mb", 0))
        return int(math.ceil(peak * float(self.policy["memory_margin"]) / 500.0) * 500)


def calibration_path(value: str | Path) -> Path:
    """A ``resources.calibration`` path: as given, or (relative, not found there) in the clone
    whose ``config/calibration/`` ships the defaults."""
    path = Path(value)
    if path.is_absolute() or path.exists():
        return path
    shipped = SHIPPED.parents[1] / path
    return shipped if shipped.exists() else path


def from_config(config: Mapping) -> Calibration | None:
    """The calibration ``resources.calibration`` names (None when it is null or absent; a
    relative path is looked up in the working directory, then in the clone:
    :func:`calibration_path`). Errors name the key."""
    path = (config.get("resources") or {}).get("calibration")
    if path is None:
        return None
    try:
        return Calibration.read(calibration_path(path))
    except CalibrationError as err:
        raise CalibrationError(f"config key 'resources.calibration': {err}") from None


def calibration_errors(config: Mapping) -> list[str]:
    """The config check: a message for a ``resources.calibration`` that cannot be read."""
    try:
        from_config(config)
    except CalibrationError as err:
        return [str(err)]
    return []


# --------------------------------------------------------------------------------------------
# Written by the benchmarks
# --------------------------------------------------------------------------------------------


def record(path: str | Path, *, gpu_model: str, rates: Mapping | None = None,
           memory_mb: Mapping | None = None, note: str = "", base: str | Path | None = None) -> dict:
    """Add measured ``rates`` / ``memory_mb`` (nested mappings, merged key by key) to the
    calibration file ``path`` for ``gpu_model``, writing it atomically; each recorded leaf's
    ``provenance`` says "measured on <gpu_model> <date>" (+ ``note``). A new file starts from
    ``base`` (default: the shipped ``config/calibration/h100.yaml``), so the entries no benchmark
    measured keep their shipped values and provenance. A file of another GPU model is refused."""
    from pseudopairs.core.io import write_text_atomic

    path = Path(path)
    if path.is_file():
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if data.get("measured_on") not in (None, gpu_model):
            raise CalibrationError(f"{path}: holds rates of {data['gpu_model']!r}, not {gpu_model!r}; "
                                   "write one file per GPU model")
    else:
        data = yaml.safe_load(Path(base or SHIPPED / "h100.yaml").read_text(encoding="utf-8"))
    data["gpu_model"] = data["measured_on"] = gpu_model
    stamp = f"measured on {gpu_model} {datetime.date.today().isoformat()}" + (f" ({note})" if note else "")
    provenance = data.setdefault("provenance", {})
    for section, values in (("rates", rates), ("memory_mb", memory_mb)):
        if not values:
            continue
        deep_update(data.setdefault(section, {}), values)
        for leaf in _leaves(values, section):
            provenance[leaf] = stamp
    Calibration.from_dict(data, source=str(path))  # what is written can be read
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return data


def _leaves(values: Mapping, prefix: str) -> Iterable[str]:
    for key, value in values.items():
        name = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            yield from _leaves(value, name)
        else:
            yield name


# --------------------------------------------------------------------------------------------
# A plan's GPU-hours
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedJob:
    """One job of a dry run: its rule, group job (None outside one), GPUs, first-attempt
    walltime in minutes and wildcards."""

    rule: str
    group: str | None
    gpus: int
    minutes: int
    wildcards: dict = field(default_factory=dict)


def dry_run_jobs(text: str) -> list[PlannedJob]:
    """The jobs a ``snakemake -n`` listing shows (each ``rule NAME:`` block with its
    ``resources:`` line; jobs of a group job are indented under ``Group job NAME``)."""
    jobs = listed_jobs(text)
    planned = []
    for job in jobs:
        gpus = int(job.get("gpu", 0) or 0)
        if not gpus and "gres" in job:
            gpus = int(str(job["gres"]).rsplit(":", 1)[-1])
        planned.append(PlannedJob(job["rule"], job["group"], gpus, int(job.get("runtime", 0) or 0),
                                  job.get("wildcards", {})))
    return planned


def job_kind(rule: str) -> tuple[str, int] | None:
    """(calibrated job kind, models) of a workflow rule name; None for a rule that is not one.
    Stack rules carry their stack in the name (``train_stack_seeds1_3``)."""
    stack = re.match(r"^(train|evaluate)_stack_(?:gpu_)?seeds(\d+)_(\d+)$", rule)
    if stack:
        return stack.group(1), int(stack.group(3)) - int(stack.group(2)) + 1
    kinds = {"train": "train", "evaluate": "evaluate", "evaluate_clc": "evaluate", "features": "features",
             "mine": "mine", "translate": "translate", "translate_clc": "translate",
             "translate_augment": "translate"}
    return (kinds[rule], 1) if rule in kinds else None


def mine_criterion(config: Mapping, wildcards: Any) -> str | None:
    """The mining criterion of a mine job's pseudopair set (its ``pseudopairs`` wildcard: a
    mapping or Snakemake's wildcards); None when the job names none."""
    if isinstance(wildcards, Mapping):
        name = wildcards.get("pseudopairs")
    else:
        name = getattr(wildcards, "pseudopairs", None)
    if not name:
        return None
    from pseudopairs.mining import contract as mining_contract

    return mining_contract.criterion(dict(config), name)


def plan_gpu_hours(jobs: Iterable[PlannedJob], calibration: Calibration, config: Mapping) -> dict:
    """The GPU jobs of a plan: ``requested`` GPU-hours (first-attempt walltime × GPUs, the sum of a
    group job's members), ``estimated`` GPU-hours (the calibration's estimate of each job × its
    GPUs), their ratio, and both per job kind."""
    requested: dict[str, float] = {}
    estimated: dict[str, float] = {}
    counted = 0
    for job in jobs:
        if job.gpus <= 0:
            continue
        kind = job_kind(job.rule)
        if kind is None:
            raise CalibrationError(f"plan: GPU job of rule {job.rule!r} is of no calibrated kind")
        name, models = kind
        criterion = mine_criterion(config, job.wildcards) if name == "mine" else None
        requested[name] = requested.get(name, 0.0) + job.minutes / 60.0 * job.gpus
        estimated[name] = estimated.get(name, 0.0) + job.gpus * calibration.estimate_seconds(
            name, config, models=models, criterion=criterion) / 3600.0
        counted += 1
    total_requested, total_estimated = sum(requested.values()), sum(estimated.values())
    return {"jobs": counted, "requested": total_requested, "estimated": total_estimated,
            "ratio": total_requested / total_estimated if total_estimated else float("nan"),
            "by_kind": {k: {"requested": requested[k], "estimated": estimated[k]} for k in sorted(requested)}}
