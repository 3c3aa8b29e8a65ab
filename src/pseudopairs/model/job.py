"""The ``train`` job (:mod:`pseudopairs.core.jobs`): an experiment's models of one stack (one
seed, or a stack's seeds) trained in one job, each with its own data (its training spec) and
model directory, all with the experiment's ``training`` and ``model`` settings
(:class:`RunSettings`). :func:`pseudopairs.model.contract.training_job` resolves it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pseudopairs.core.jobs import Job, JobError
from pseudopairs.model.settings import ModelSettings, TrainingSettings

# Settings that do not change the result of a (CPU) run, so a resumed run may differ in them
# (how a job groups its seeds does not; how it computes them is in the run key as "compute").
RUN_NEUTRAL = ("device", "threads", "stack", "stack_compute", "cuda_graphs", "resume_every",
               "pinned_memory")


@dataclass(frozen=True)
class RunSettings(Job):
    """How a run trains: the experiment's ``training`` and ``model`` sections, each checked by its
    settings class (errors name ``training.KEY`` or ``model.KEY``)."""

    WHERE = "training settings"

    training: TrainingSettings
    model: ModelSettings

    def with_threads(self, threads: int | None) -> "RunSettings":
        """The settings with the CPU threads the scheduler granted (``--threads``; None: as set)."""
        return self if threads is None else replace(self, training=replace(self.training, threads=threads))

    def run_key(self) -> dict[str, Any]:
        """What a resumable state is keyed on: every setting that changes a run's result."""
        training = {k: v for k, v in self.training.to_dict().items() if k not in RUN_NEUTRAL}
        return {"training": training, "model": self.model.to_dict()}


@dataclass(frozen=True)
class TrainedModel(Job):
    """One model of the job: its training spec (data sets, validation, vocabulary, fine-tuning
    source; :func:`pseudopairs.model.contract.training_spec`, checked by
    :func:`pseudopairs.model.inputs.check_spec` when it trains) and its directory."""

    spec: dict[str, Any]
    out_dir: str


@dataclass(frozen=True)
class TrainingJob(Job):
    """Train ``models`` (by seed) of ``experiment`` with ``settings``."""

    WHERE = "training job"

    experiment: str
    settings: RunSettings
    models: dict[str, TrainedModel]

    def __post_init__(self) -> None:
        if not self.models:
            raise JobError(f"{self.WHERE}.models: no models")
        for seed in self.models:
            if not seed.lstrip("-").isdigit():
                raise JobError(f"{self.WHERE}.models: {seed!r} is not a seed")

    def seeds(self) -> list[int]:
        return [int(seed) for seed in self.models]
