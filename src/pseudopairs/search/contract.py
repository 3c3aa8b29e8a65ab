"""The search stage's contract: every file the ``export`` job of a run reads
(:func:`export_inputs`), the indexes rule ``all`` builds (:func:`index_targets`: the config's
``search.indexes``, each an experiment's seed and a corpus split) and :func:`check` of them."""

from __future__ import annotations

from pseudopairs.core import layout
from pseudopairs.data.text_contract import model_inputs
from pseudopairs.features.contract import weights_inputs
from pseudopairs.model.contract import training_inputs, training_langs


def export_inputs(config: dict, name: str, seed: int) -> list[str]:
    """What ``pseudopairs export`` reads of run (``name``, ``seed``): the trained run (checkpoint,
    vocabulary, test metrics), its training caption tables and features (the check of the
    exported text preparation, the model card's data sets, the feature network's record), each
    language's truecaser or tokenizer model, and the feature network's weights file."""
    files = {layout.checkpoint(name, seed), layout.model_vocabulary(name, seed), layout.metrics(name, seed)}
    files.update(training_inputs(config, name, seed))
    for lang in training_langs(config, name):
        files.update(model_inputs(config, lang))
    files.update(weights_inputs(config))
    return sorted(files)


def indexes(config: dict) -> list[dict]:
    return list((config.get("search") or {}).get("indexes") or [])


def index_targets(config: dict) -> list[str]:
    """The index folder of each ``search.indexes`` entry (rule ``all``)."""
    return [layout.search_index(entry["experiment"], entry["seed"], entry["corpus"], entry["split"])
            for entry in indexes(config)]


def check(config: dict) -> list[str]:
    """Each ``search.indexes`` entry names an experiment and a corpus of this configuration (the
    split, train, val or test, is the schema's)."""
    errors = []
    experiments = config.get("experiments", {})
    for i, entry in enumerate(indexes(config)):
        key = f"search.indexes[{i}]"
        if entry["experiment"] not in experiments:
            errors.append(f"config key '{key}.experiment': {entry['experiment']!r} is not an experiment "
                          f"of this configuration; name one of experiments (or set search.indexes: [])")
        if entry["corpus"] not in config.get("corpora", {}):
            errors.append(f"config key '{key}.corpus': {entry['corpus']!r} is not a declared corpus "
                          f"({', '.join(sorted(config.get('corpora', {}))) or 'none'})")
    return errors
