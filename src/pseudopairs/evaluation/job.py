"""The ``evaluate`` job (:mod:`pseudopairs.core.jobs`): the trained models of one experiment (a seed,
or a stack's seeds, one after the other) scored on the test data of
:class:`EvaluationData`, on the experiment's own device and threads (its ``training`` settings).
:func:`pseudopairs.evaluation.contract.evaluation_job` resolves it."""

from __future__ import annotations

from dataclasses import dataclass, field

from pseudopairs.core.jobs import Job, JobError
from pseudopairs.core.settings import DEVICE_PATTERN, check_value, setting


@dataclass(frozen=True)
class LangTest(Job):
    """A language tested on its own corpus' test split and images (your own data,
    ``evaluation.lang_corpora``)."""

    captions: str
    features: str


@dataclass(frozen=True)
class EvaluationData(Job):
    """What a model is tested on: image–sentence retrieval on ``captions``/``features`` in
    ``langs`` (a language in ``lang_tests`` on its own corpus' test split and images instead); on
    the translation corpus' test split in ``portion_langs`` (paper 004's Tables 6 and 7;
    ``portion_retrieval`` in metrics.json); translation retrieval between ``translation_langs`` on
    ``translation_captions`` (none when the configuration has no translation corpus)."""

    WHERE = "evaluation data"

    captions: str
    features: str
    langs: list[str]
    translation_captions: str | None = None
    translation_langs: list[str] = field(default_factory=list)
    portion_captions: str | None = None
    portion_langs: list[str] = field(default_factory=list)
    lang_tests: dict[str, LangTest] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.translation_langs and len(self.translation_langs) != 2:
            raise JobError(f"{self.WHERE}.translation_langs: two languages, got {self.translation_langs}")
        if bool(self.translation_langs) != bool(self.translation_captions):
            raise JobError(f"{self.WHERE}.translation_captions: translation retrieval needs its test "
                           "captions and two languages, or neither")
        if self.portion_langs and not self.portion_captions:
            raise JobError(f"{self.WHERE}.portion_captions: portion_langs {self.portion_langs} need "
                           "the translation corpus' test captions")
        stray = sorted(set(self.lang_tests) - set(self.langs))
        if stray:
            raise JobError(f"{self.WHERE}.lang_tests: {', '.join(stray)} not in langs {self.langs}")

    def inputs(self) -> list[str]:
        files = [self.captions, self.features] + ([self.translation_captions] if self.translation_captions else [])
        return files + [path for test in self.lang_tests.values() for path in (test.captions, test.features)]


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
