"""The ``mine`` job (:mod:`pseudopairs.core.jobs`): one pseudopair set mined with one seed of its
source model — the model's files, the query and database captions, how the engine runs (the
config's ``mining`` section) and the set's criterion with its parameters (every parameter present,
checked by the criteria registry). :func:`pseudopairs.mining.contract.mining_job` resolves it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pseudopairs.core.jobs import Job, JobError
from pseudopairs.mining.criteria import DEFAULT_CRITERION, check_params
from pseudopairs.mining.settings import MiningSettings


@dataclass(frozen=True)
class Captions(Job):
    """The prepared captions of one data set (a caption table and its language)."""

    name: str
    lang: str
    captions: str


@dataclass(frozen=True)
class MiningJob(Job):
    """What the ``mine`` step does: every query of ``queries`` gets a caption of ``database`` by
    ``criterion`` on the embeddings of the source model ``source`` (seed ``seed``)."""

    WHERE = "mining job"

    pseudopairs: str
    source: str
    seed: int
    checkpoint: str
    vocab: str
    queries: Captions
    database: Captions
    engine: MiningSettings
    criterion: str = DEFAULT_CRITERION
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "params", check_params(self.criterion, dict(self.params)))
        except ValueError as err:
            raise JobError(f"{self.WHERE}.params: {err}") from None

    def inputs(self) -> list[str]:
        """The files the job reads (the rule's inputs)."""
        return sorted({self.checkpoint, self.vocab, self.queries.captions, self.database.captions})

    def with_threads(self, threads: int) -> "MiningJob":
        """The job with the CPU threads the scheduler granted (``--threads``)."""
        return replace(self, engine=replace(self.engine, threads=threads))

    def settings_record(self) -> dict[str, Any]:
        """How the pairs were mined, as ``stats.json`` records it: the criterion, its parameters
        and the engine's settings in one mapping."""
        return {"criterion": self.criterion, **self.params, **self.engine.to_dict()}
