"""The pseudopair stage's contract: pseudopair sets as data (``config['pseudopairs']``), the
``mine`` job of a set and seed (:func:`mining_job`, a :class:`~pseudopairs.mining.job.MiningJob`),
and :func:`check` of the ``mining`` section and of every set: its source, queries and database,
its criterion and parameters (by the criteria registry, against the data's sizes when they are
known before any job runs)."""

from __future__ import annotations

from typing import Any

from pseudopairs.core import layout
from pseudopairs.data.contract import dataset_files, known_caption_count
from pseudopairs.mining import criteria
from pseudopairs.mining.criteria import DEFAULT_CRITERION
from pseudopairs.mining.job import Captions, MiningJob
from pseudopairs.mining.settings import MiningSettings


def pseudopair_set(config: dict, name: str) -> dict[str, Any]:
    try:
        return config["pseudopairs"][name]
    except KeyError:
        raise ValueError(f"config key 'pseudopairs': unknown pseudopair set {name!r}") from None


def pseudopair_sets(config: dict) -> list[str]:
    return list(config.get("pseudopairs", {}))


def criterion(config: dict, name: str) -> str:
    """The mining criterion of pseudopair set ``name`` (its ``mining.criterion``, else the paper's)."""
    return pseudopair_set(config, name).get("mining", {}).get("criterion", DEFAULT_CRITERION)


def mining_job(config: dict, name: str, seed: int) -> MiningJob:
    """The ``mine`` job of pseudopair set ``name`` with seed ``seed`` of its source: the model's
    files, the query and database captions, the engine (the config's ``mining`` section) and the
    set's criterion with its parameters."""
    pp = pseudopair_set(config, name)
    params = {key: value for key, value in pp.get("mining", {}).items() if key != "criterion"}

    def captions(role: str) -> Captions:
        files = dataset_files(config, pp[role], seed=seed)
        return Captions(name=files["name"], lang=files["lang"], captions=files["captions"])

    return MiningJob(pseudopairs=name, source=pp["source"], seed=int(seed),
                     checkpoint=layout.checkpoint(pp["source"], seed),
                     vocab=layout.model_vocabulary(pp["source"], seed),
                     queries=captions("queries"), database=captions("database"),
                     engine=MiningSettings.from_dict(config["mining"]), criterion=criterion(config, name),
                     params=params)


# --------------------------------------------------------------------------------------------
# The config check


def check(config: dict) -> list[str]:
    """Each pseudopair set mines a corpus' captions in another language with a model of a known
    experiment, under a known criterion with valid parameters; the ``mining`` section by the
    settings class the ``mine`` step reads."""
    messages = []
    datasets = config.get("datasets", {})
    experiments = config.get("experiments", {})
    for name, pp in config.get("pseudopairs", {}).items():
        where = f"config key 'pseudopairs.{name}"
        if pp["source"] not in experiments:
            messages.append(f"{where}.source': unknown experiment {pp['source']!r}")
        for role in ("queries", "database"):
            ds = datasets.get(pp[role])
            if ds is None:
                messages.append(f"{where}.{role}': unknown data set {pp[role]!r}")
            elif "pseudopairs" in ds or "translation" in ds:
                messages.append(f"{where}.{role}': mine the captions of a corpus, not of the "
                                f"synthetic data set {pp[role]!r}")
        if pp["queries"] in datasets and pp["database"] in datasets:
            if datasets[pp["queries"]]["lang"] == datasets[pp["database"]]["lang"]:
                messages.append(f"{where}': queries and database are in the same language")
        messages += _criterion_errors(config, pp, where)
    return messages + MiningSettings.config_errors(config.get("mining"))


def _criterion_errors(config: dict, pp: dict, where: str) -> list[str]:
    """A pseudopair set's criterion and parameters, checked by the criteria registry — against
    the sizes of its queries and database when they are known before any job runs."""
    mining = dict(pp.get("mining", {}))
    name = mining.pop("criterion", DEFAULT_CRITERION)
    if name not in criteria.CRITERIA:
        return [f"{where}.mining.criterion': unknown criterion {name!r}; known: "
                f"{', '.join(criteria.CRITERIA.names())}"]
    datasets = config.get("datasets", {})
    counts = {role: known_caption_count(config, pp[role]) if pp[role] in datasets else None
              for role in ("queries", "database")}
    try:
        criteria.check_params(name, mining, n_queries=counts["queries"], n_database=counts["database"])
    except ValueError as err:
        key = str(err).split("=")[0].split(" ")[0]
        sizes = f" ({pp['queries']}: {counts['queries']}, {pp['database']}: {counts['database']} captions)" \
            if "exceeds" in str(err) else ""
        return [f"{where}.mining.{key}': {err}{sizes}"]
    return []
