"""Experiments as data: turn the config's declaration of an experiment into the concrete inputs
of its training job (the ``spec`` that :func:`pseudopairs.training.train` reads) and the list of
files Snakemake must build first. Nothing here looks inside names: a data set's corpus and
language come from ``config['datasets']``."""

from __future__ import annotations

from typing import Any

from pseudopairs import layout

SPLITS = ("train", "val", "test")


def feature_format(config: dict) -> str:
    return config["features"]["format"]


def dataset_files(config: dict, name: str, split: str = "train") -> dict[str, str]:
    """Caption table, feature file and language of data set ``name`` for ``split``."""
    try:
        ds = config["datasets"][name]
    except KeyError:
        raise ValueError(f"config key 'datasets': unknown data set {name!r}") from None
    corpus = ds["corpus"]
    return {
        "name": name,
        "lang": ds["lang"],
        "captions": layout.captions(corpus, split),
        "features": layout.features(corpus, split, feature_format(config)),
    }


def experiment(config: dict, name: str) -> dict[str, Any]:
    try:
        return config["experiments"][name]
    except KeyError:
        raise ValueError(f"config key 'experiments': unknown experiment {name!r}") from None


def training_langs(config: dict, name: str) -> list[str]:
    """Languages of the experiment's training data, in first-seen order (validation covers each)."""
    langs: list[str] = []
    exp = experiment(config, name)
    for ds in exp["c2i"] + [d for pair in exp.get("c2c", []) for d in pair]:
        lang = config["datasets"][ds]["lang"]
        if lang not in langs:
            langs.append(lang)
    return langs


def training_spec(config: dict, name: str, seed: int) -> dict[str, Any]:
    """The resolved training inputs of experiment ``name`` for one seed."""
    exp = experiment(config, name)
    evaluation = config["evaluation"]
    fmt = feature_format(config)
    finetune = exp.get("finetune")
    return {
        "experiment": name,
        "c2i": [dataset_files(config, ds) for ds in exp["c2i"]],
        "c2c": [
            {"name": "+".join(pair), "a": dataset_files(config, pair[0]), "b": dataset_files(config, pair[1])}
            for pair in exp.get("c2c", [])
        ],
        "validation": {
            "captions": layout.captions(evaluation["corpus"], "val"),
            "features": layout.features(evaluation["corpus"], "val", fmt),
            "langs": training_langs(config, name),
        },
        "init_from": layout.checkpoint(finetune, seed) if finetune else None,
    }


def training_inputs(config: dict, name: str, seed: int) -> list[str]:
    """Every file the training job of (``name``, ``seed``) reads, for the Snakemake rule."""
    spec = training_spec(config, name, seed)
    files = {layout.vocabulary()}
    for ds in spec["c2i"] + [side for pair in spec["c2c"] for side in (pair["a"], pair["b"])]:
        files.update((ds["captions"], ds["features"]))
    files.update((spec["validation"]["captions"], spec["validation"]["features"]))
    if spec["init_from"]:
        files.add(spec["init_from"])
    return sorted(files)


def evaluation_spec(config: dict) -> dict[str, Any]:
    """Test data every trained model is evaluated on (image–sentence and translation retrieval)."""
    evaluation = config["evaluation"]
    return {
        "captions": layout.captions(evaluation["corpus"], "test"),
        "features": layout.features(evaluation["corpus"], "test", feature_format(config)),
        "langs": list(evaluation["langs"]),
        "translation_captions": layout.captions(evaluation["translation_corpus"], "test"),
        "translation_langs": list(evaluation["translation_langs"]),
    }


def evaluation_inputs(config: dict, name: str, seed: int) -> list[str]:
    spec = evaluation_spec(config)
    return [layout.checkpoint(name, seed), layout.vocabulary(), spec["captions"], spec["features"],
            spec["translation_captions"]]


def table_experiments(config: dict, table: str) -> list[str]:
    rows = config["tables"][table]["rows"]
    names: list[str] = []
    for row in rows:
        if "experiment" in row and row["experiment"] not in names:
            names.append(row["experiment"])
    return names


def table_inputs(config: dict, table: str) -> list[str]:
    return [layout.metrics(name, seed) for name in table_experiments(config, table) for seed in config["seeds"]]


def corpora_with_images(config: dict) -> list[str]:
    """Corpora whose images need features: those of the data sets plus the evaluation corpus."""
    corpora = {ds["corpus"] for ds in config["datasets"].values()}
    corpora.add(config["evaluation"]["corpus"])
    return sorted(corpora)


def text_corpora(config: dict) -> list[str]:
    """Corpora whose caption tables get prepared: image corpora plus the translation corpus."""
    return sorted(set(corpora_with_images(config)) | {config["evaluation"]["translation_corpus"]})
