"""The evaluation stage's contract: the test data a trained model is scored on
(:func:`evaluation_spec`, the files of :func:`evaluation_inputs`) and :func:`check` of the
``evaluation`` section's languages."""

from __future__ import annotations

from typing import Any

from pseudopairs import layout
from pseudopairs.data.contract import feature_format
from pseudopairs.experiments import table_experiments, table_test_corpus


def portion_langs(config: dict, name: str | None = None) -> list[str]:
    """Languages image–sentence retrieval is also tested in on the translation corpus' test split
    (one caption per image): ``evaluation.portion_langs`` for every model, plus, for experiment
    ``name``, the languages of every table that shows it with ``test_corpus`` = the translation
    corpus (paper 004's Tables 6 and 7)."""
    evaluation = config["evaluation"]
    langs = list(evaluation.get("portion_langs", []))
    if name is not None:
        for table in config.get("tables", {}):
            if table_test_corpus(config, table) == evaluation["translation_corpus"] and \
                    name in table_experiments(config, table):
                langs += config["tables"][table].get("langs", [])
    return list(dict.fromkeys(langs))


def evaluation_spec(config: dict, name: str | None = None) -> dict[str, Any]:
    """Test data a trained model (experiment ``name``) is evaluated on: image–sentence retrieval
    on the evaluation corpus in ``evaluation.langs`` (every model), on the translation corpus in
    :func:`portion_langs` (``portion_retrieval`` in metrics.json), translation retrieval."""
    evaluation = config["evaluation"]
    spec = {
        "captions": layout.captions(evaluation["corpus"], "test"),
        "features": layout.features(evaluation["corpus"], "test", feature_format(config)),
        "langs": list(evaluation["langs"]),
        "translation_captions": layout.captions(evaluation["translation_corpus"], "test"),
        "translation_langs": list(evaluation["translation_langs"]),
    }
    portion = portion_langs(config, name)
    if portion:   # only then: the spec (a job parameter) of every other model stays as it was
        spec.update(portion_captions=spec["translation_captions"], portion_langs=portion)
    return spec


def evaluation_inputs(config: dict, name: str, seed: int) -> list[str]:
    spec = evaluation_spec(config, name)
    return [layout.checkpoint(name, seed), layout.model_vocabulary(name, seed), spec["captions"],
            spec["features"], spec["translation_captions"]]


def check(config: dict) -> list[str]:
    """Every language of ``evaluation.langs`` is one a data set of the evaluation corpus has."""
    evaluation, datasets = config.get("evaluation", {}), config.get("datasets", {})
    messages = []
    for i, lang in enumerate(evaluation.get("langs", [])):
        if not any(d["lang"] == lang and d["corpus"] == evaluation.get("corpus") for d in datasets.values()):
            messages.append(f"config key 'evaluation.langs.{i}': no data set of corpus "
                            f"{evaluation.get('corpus')!r} has language {lang!r}")
    return messages
