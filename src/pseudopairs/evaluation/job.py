"""The ``evaluate`` job (:mod:`pseudopairs.jobs`): the trained models of one experiment (a seed,
or a stack's seeds, one after the other) scored on the test data of
:class:`EvaluationData`, on the experiment's own device and threads (its ``training`` settings).
:func:`pseudopairs.evaluation.contract.evaluation_job` resolves it."""

from __future__ import annotations

from dataclasses import dataclass, field

from pseudopairs.jobs import Job, JobError
from pseudopairs.settings import DEVICE_PATTERN, check_value, setting


@dataclass(frozen=True)
class EvaluationData(Job):
    """What a model is tested on: image–sentence retrieval on ``captions``/``features`` in
    ``langs``; on the translation corpus' test split in ``portion_langs`` (paper 004's Tables 6
    and 7; ``portion_retrieval`` in metrics.json); translation retrieval between
    ``translation_langs`` on ``translation_captions``."""

    WHERE = "evaluation data"

    captions: str
    features: str
    langs: list[str]
    translation_captions: str
    translation_langs: list[str]
    portion_captions: str | None = None
    portion_langs: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.translation_langs) != 2:
            raise JobError(f"{self.WHERE}.translation_langs: two languages, got {self.translation_langs}")
        if self.portion_langs and not self.portion_captions:
            raise JobError(f"{self.WHERE}.portion_captions: portion_langs {self.portion_langs} need "
                           "the translation corpus' test captions")

    def inputs(self) -> list[str]:
        return [self.captions, self.features, self.translation_captions]


@dataclass(frozen=True)
class EvaluatedModel(Job):
    """One trained model and where its metrics go."""

    checkpoint: str
    vocab: str
    output: str


_DEVICE = setting(kind=str, pattern=DEVICE_PATTERN).metadata


@dataclass(frozen=True)
class EvaluationJob(Job):
    """Evaluate each of ``models`` (by seed) of ``experiment`` on ``data``."""

    WHERE = "evaluation job"

    experiment: str
    device: str
    threads: int
    data: EvaluationData
    models: dict[str, EvaluatedModel]

    def __post_init__(self) -> None:
        try:
            check_value(self.device, _DEVICE)
        except ValueError as err:
            raise JobError(f"{self.WHERE}.device: {err}") from None
        if not self.models:
            raise JobError(f"{self.WHERE}.models: no models")

    def inputs(self) -> list[str]:
        """The files the job reads (the rule's inputs)."""
        files = [path for model in self.models.values() for path in (model.checkpoint, model.vocab)]
        return files + self.data.inputs()

    def outputs(self) -> list[str]:
        return [model.output for model in self.models.values()]
