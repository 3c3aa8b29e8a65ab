"""Experiments as data: turn the config's declaration of an experiment into the concrete inputs
of its training job (the ``spec`` that :func:`pseudopairs.model.training.train` reads) and the list of
files Snakemake must build first. Nothing here looks inside names: a data set's corpus, language
and origin (a corpus, a pseudopair set, a translation) come from ``config['datasets']``."""

from __future__ import annotations

from typing import Any

from pseudopairs import layout
from pseudopairs.mining.criteria import DEFAULT_CRITERION

SPLITS = ("train", "val", "test")


def feature_format(config: dict) -> str:
    return config["features"]["format"]


# --------------------------------------------------------------------------------------------
# Data sets


def dataset(config: dict, name: str) -> dict[str, Any]:
    try:
        return config["datasets"][name]
    except KeyError:
        raise ValueError(f"config key 'datasets': unknown data set {name!r}") from None


def dataset_kind(config: dict, name: str) -> str:
    """``corpus`` (captions of a corpus), ``selection`` (a corpus' captions restricted to a subset
    of images or captions per image, :mod:`pseudopairs.data.select`), ``pseudopairs`` (mined
    captions for the queries' images) or ``translation`` (machine-translated captions of another
    data set)."""
    ds = dataset(config, name)
    if "pseudopairs" in ds:
        return "pseudopairs"
    if "translation" in ds:
        return "translation"
    if "select" in ds:
        return "selection"
    return "corpus"


def image_corpus(ds: dict) -> str:
    """The corpus whose images a data set's captions describe (``images``, default its corpus:
    the Multi30K translation portion describes the Multi30K images)."""
    return ds.get("images", ds["corpus"])


def known_caption_count(config: dict, name: str, split: str = "train") -> int | None:
    """How many captions data set ``name`` has in ``split``, when that is known before any job
    runs: from the world's sizes in the demo, else from its prepared caption table if it exists
    already (``None`` otherwise). Used to check settings such as a criterion's ``k`` against the
    data at DAG time."""
    ds = dataset(config, name)
    if dataset_kind(config, name) != "corpus":
        return None
    if config.get("data", {}).get("source") == "world":
        world = config.get("world", {})
        sizes = world.get("images", {}).get(ds["corpus"], {})
        if split in sizes:
            return int(sizes[split]) * int(world.get("captions_per_image", 5))
        return None
    from pathlib import Path

    path = Path(layout.captions(ds["corpus"], split))
    if not path.is_file():
        return None
    return caption_lang_counts(path).get(ds["lang"], 0)


# (absolute path, size, mtime_ns) -> captions per language: a parse checks every pseudopair
# set's queries and database (~42 lookups of the same few tables at the paper's size, 566K rows
# each); each table version is read once per process
_LANG_COUNTS: dict[tuple[str, int, int], dict[Any, int]] = {}


def _read_langs(path) -> dict[Any, int]:
    import pyarrow.parquet as pq

    counts = pq.read_table(path, columns=["lang"]).column("lang").value_counts()
    return {item["values"]: item["counts"] for item in counts.to_pylist()}


def caption_lang_counts(path) -> dict[Any, int]:
    """Captions per language of a caption table, read once per version of the file (its path,
    size and modification time) in this process."""
    import os

    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _LANG_COUNTS:
        _LANG_COUNTS[key] = _read_langs(path)
    return _LANG_COUNTS[key]


def dataset_files(config: dict, name: str, split: str = "train", *,
                  seed: int | None = None) -> dict[str, str]:
    """Caption table, feature file and language of data set ``name`` for ``split``. Synthetic
    data sets (pseudopairs, translations) exist for the training split only; a pseudopair data
    set also depends on the ``seed`` (seed s uses the pairs mined by seed s of its source)."""
    ds = dataset(config, name)
    kind = dataset_kind(config, name)
    if kind != "corpus" and split != "train":
        raise ValueError(f"data set {name!r} ({kind}) exists for the training split only, not {split!r}")
    if kind == "pseudopairs":
        if seed is None:
            raise ValueError(f"data set {name!r}: pseudopairs depend on the seed; none given")
        captions = layout.pseudopair_captions(ds["pseudopairs"], seed, ds.get("min_percentile", 0))
    elif kind == "translation":
        captions = layout.translated_captions(name)
    elif kind == "selection":
        captions = layout.selected_captions(name)
    else:
        captions = layout.captions(ds["corpus"], split)
    return {
        "name": name,
        "lang": ds["lang"],
        "captions": captions,
        "features": layout.features(image_corpus(ds), split, feature_format(config)),
    }


def selection_datasets(config: dict) -> list[str]:
    return [name for name in config["datasets"] if dataset_kind(config, name) == "selection"]


def selection_spec(config: dict, name: str) -> dict[str, Any]:
    """What the ``select-captions`` job of selection data set ``name`` reads and does."""
    ds = dataset(config, name)
    return {"captions": layout.captions(ds["corpus"], "train"), "lang": ds["lang"], "select": ds["select"]}


# --------------------------------------------------------------------------------------------
# Training and evaluation


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


def vocabulary_spec(config: dict, name: str, seed: int) -> dict[str, Any]:
    """How the experiment's vocabulary is made: from its own training captions with
    ``vocab.min_count`` (as the authors' code does for every run) or, when fine-tuning, the
    source model's vocabulary (same seed)."""
    finetune = experiment(config, name).get("finetune")
    if finetune:
        return {"path": layout.model_vocabulary(finetune, seed)}
    return {"min_count": config["vocab"]["min_count"]}


def training_settings(config: dict, name: str) -> dict[str, Any]:
    """The settings of the experiment's training jobs: the config's ``training`` and ``model``
    sections, with the experiment's own ``training`` entries over them (so changing one
    experiment's setting reruns that experiment and what depends on it, nothing else)."""
    return {**config["training"], **experiment(config, name).get("training", {}), **config["model"]}


def job_settings(config: dict, name: str) -> dict[str, Any]:
    """:func:`training_settings` as a training job receives them: without ``stack``, which only
    groups seeds into jobs (so regrouping them reruns no job whose block is unchanged)."""
    return {k: v for k, v in training_settings(config, name).items() if k != "stack"}


def corpus_langs(config: dict, corpus: str) -> set[str]:
    """Languages the config's data sets give corpus ``corpus`` (its caption tables hold them)."""
    return {ds["lang"] for ds in config["datasets"].values() if ds["corpus"] == corpus}


def validation_corpus(config: dict, lang: str) -> str:
    """Where captions of ``lang`` are validated (and tested): the evaluation corpus when it has the
    language, else the translation corpus (paper 004's French and Czech exist in Multi30K's
    translation portion only; its images are the evaluation corpus' images)."""
    evaluation = config["evaluation"]
    if lang in corpus_langs(config, evaluation["corpus"]):
        return evaluation["corpus"]
    if lang in corpus_langs(config, evaluation["translation_corpus"]):
        return evaluation["translation_corpus"]
    raise ValueError(f"no validation captions in language {lang!r}: no data set of corpus "
                     f"{evaluation['corpus']!r} or {evaluation['translation_corpus']!r} has it")


def validation_spec(config: dict, name: str) -> dict[str, Any]:
    """The validation split every training language is scored on (early stopping): the
    evaluation corpus' ``val`` split; ``lang_captions`` names the caption table of each language
    the evaluation corpus lacks (the translation corpus' ``val`` split, same images)."""
    evaluation = config["evaluation"]
    langs = training_langs(config, name)
    spec = {"captions": layout.captions(evaluation["corpus"], "val"),
            "features": layout.features(evaluation["corpus"], "val", feature_format(config)),
            "langs": langs}
    other = {lang: layout.captions(corpus, "val") for lang in langs
             if (corpus := validation_corpus(config, lang)) != evaluation["corpus"]}
    if other:   # only then: the spec (a job parameter) of every other experiment stays as it was
        spec["lang_captions"] = other
    return spec


def training_spec(config: dict, name: str, seed: int) -> dict[str, Any]:
    """The resolved training inputs of experiment ``name`` for one seed."""
    exp = experiment(config, name)
    finetune = exp.get("finetune")
    return {
        "experiment": name,
        "c2i": [dataset_files(config, ds, seed=seed) for ds in exp["c2i"]],
        "c2c": [
            {"name": "+".join(pair), "a": dataset_files(config, pair[0], seed=seed),
             "b": dataset_files(config, pair[1], seed=seed)}
            for pair in exp.get("c2c", [])
        ],
        "validation": validation_spec(config, name),
        "vocab": vocabulary_spec(config, name, seed),
        "init_from": layout.checkpoint(finetune, seed) if finetune else None,
    }


def training_inputs(config: dict, name: str, seed: int) -> list[str]:
    """Every file the training job of (``name``, ``seed``) reads, for the Snakemake rule."""
    spec = training_spec(config, name, seed)
    files = set()
    for ds in spec["c2i"] + [side for pair in spec["c2c"] for side in (pair["a"], pair["b"])]:
        files.update((ds["captions"], ds["features"]))
    files.update((spec["validation"]["captions"], spec["validation"]["features"]))
    files.update(spec["validation"].get("lang_captions", {}).values())
    if spec["init_from"]:
        files.add(spec["init_from"])
    if "path" in spec["vocab"]:
        files.add(spec["vocab"]["path"])
    return sorted(files)


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


# --------------------------------------------------------------------------------------------
# Pseudopairs (paper §2.2) and translations (§2.3)


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


def mining_settings(config: dict, name: str) -> dict[str, Any]:
    """The config's ``mining`` section (engine settings) with the set's criterion and its
    parameters."""
    return {**config["mining"], **pseudopair_set(config, name).get("mining", {}),
            "criterion": criterion(config, name)}


def mining_spec(config: dict, name: str, seed: int) -> dict[str, Any]:
    """The resolved inputs of mining pseudopair set ``name`` with seed ``seed`` of its source."""
    pp = pseudopair_set(config, name)
    return {
        "pseudopairs": name,
        "source": pp["source"],
        "seed": int(seed),
        "checkpoint": layout.checkpoint(pp["source"], seed),
        "vocab": layout.model_vocabulary(pp["source"], seed),
        "queries": dataset_files(config, pp["queries"], seed=seed),
        "database": dataset_files(config, pp["database"], seed=seed),
        "settings": mining_settings(config, name),
    }


def mining_inputs(config: dict, name: str, seed: int) -> list[str]:
    spec = mining_spec(config, name, seed)
    return sorted({spec["checkpoint"], spec["vocab"], spec["queries"]["captions"],
                   spec["database"]["captions"]})


def translation_datasets(config: dict) -> list[str]:
    return [name for name in config["datasets"] if dataset_kind(config, name) == "translation"]


def translation_source(config: dict, name: str) -> dict[str, str]:
    """The caption table a translated data set is made from (its source data set, training split)."""
    if dataset_kind(config, name) != "translation":
        raise ValueError(f"data set {name!r} is not a translated data set")
    return dataset_files(config, dataset(config, name)["translation"])


def pseudopair_stats_spec(config: dict) -> dict[str, Any]:
    """What the §7.2 statistics step reads: every pseudopair set (its source, criterion and the
    paper's figures), the seeds, the top-N of "the top 150 captions", the set comparisons and, in
    the demo world, its caption meanings and scenes (``meanings``; empty for real data)."""
    stats = config.get("pseudopair_stats", {})
    meanings = {}
    if config.get("data", {}).get("source") == "world":
        # the demo world knows what each caption says: the precision of every set
        # (pseudopairs.mining.precision); the real data do not
        meanings = {"captions": layout.world_caption_meanings(), "scenes": layout.world_manifest(),
                    "database_corpus": {name: dataset(config, pp["database"])["corpus"]
                                        for name, pp in config.get("pseudopairs", {}).items()}}
    return {
        "sets": {name: {"source": pp["source"], "criterion": criterion(config, name),
                        "queries": pp["queries"], "database": pp["database"],
                        "paper": pp.get("paper", {})}
                 for name, pp in config.get("pseudopairs", {}).items()},
        "seeds": list(config["seeds"]),
        "top": stats.get("top", 150),
        "compare": list(stats.get("compare", [])),
        # the files the step reads (the rule's inputs): set -> seed -> {pairs, stats}
        "files": {name: {str(seed): {"pairs": layout.pseudopair_pairs(name, seed),
                                     "stats": layout.pseudopair_mining_stats(name, seed)}
                         for seed in config["seeds"]}
                  for name in pseudopair_sets(config)},
        "meanings": meanings,
    }


def pseudopair_stats_inputs(config: dict) -> list[str]:
    spec = pseudopair_stats_spec(config)
    meanings = [spec["meanings"][k] for k in ("captions", "scenes")] if spec["meanings"] else []
    return [path for by_seed in spec["files"].values() for pair in by_seed.values()
            for path in pair.values()] + meanings


def pseudopair_figure_spec(config: dict) -> dict[str, Any]:
    """Figure 1: which sets, which seed (the first), how many images, and where the images of
    the queries' corpus are listed."""
    figure = config.get("pseudopair_stats", {}).get("figure")
    if not figure:
        raise ValueError("config key 'pseudopair_stats.figure': not set, so there is no Figure 1")
    names = list(figure["pseudopairs"])
    corpora = {dataset(config, pseudopair_set(config, n)["queries"])["corpus"] for n in names}
    if len(corpora) != 1:
        raise ValueError(f"config key 'pseudopair_stats.figure.pseudopairs': the sets annotate "
                         f"images of different corpora {sorted(corpora)}")
    seed = config["seeds"][0]
    return {
        "pairs": {name: layout.pseudopair_pairs(name, seed) for name in names},
        "sources": {name: pseudopair_set(config, name)["source"] for name in names},
        "seed": seed,
        "images": layout.images(corpora.pop(), "train"),
        "n_images": figure.get("images", 4),
        "sample_seed": figure.get("seed", 0),
    }


def pseudopair_figure_inputs(config: dict) -> list[str]:
    spec = pseudopair_figure_spec(config)
    return [*spec["pairs"].values(), spec["images"]]


# --------------------------------------------------------------------------------------------
# Tables and corpora


def row_experiments(row: dict) -> list[str]:
    """Every experiment a table row shows: its ``experiment``, or the values of its per-language
    ``experiments`` (paper 004's monolingual rows: one model per language), or none."""
    if "experiments" in row:
        return list(dict.fromkeys(row["experiments"].values()))
    return [row["experiment"]] if row.get("experiment") else []


def table_experiments(config: dict, table: str) -> list[str]:
    rows = config["tables"][table]["rows"]
    return list(dict.fromkeys(name for row in rows for name in row_experiments(row)))


def table_seeds(config: dict, table: str) -> list[int]:
    """The seeds a table averages over: its own ``seeds``, else the config's."""
    return list(config["tables"][table].get("seeds") or config["seeds"])


def table_test_corpus(config: dict, table: str) -> str:
    """The corpus whose test split a retrieval table reports: its ``test_corpus``, else the
    evaluation corpus."""
    return config["tables"][table].get("test_corpus") or config["evaluation"]["corpus"]


def table_spec(config: dict, table: str) -> dict[str, Any]:
    """The ``table`` step's input: the table's config entry, which test set of metrics.json it
    reads (``retrieval_key``) and the ``metrics.json`` of every experiment it shows, per seed of
    the table (experiment -> seed -> path; the rule's inputs)."""
    spec = {**config["tables"][table],
            "metrics": {name: {str(seed): layout.metrics(name, seed) for seed in table_seeds(config, table)}
                        for name in table_experiments(config, table)}}
    if table_test_corpus(config, table) != config["evaluation"]["corpus"]:
        spec["retrieval_key"] = "portion_retrieval"
    return spec


def table_inputs(config: dict, table: str) -> list[str]:
    return [path for by_seed in table_spec(config, table)["metrics"].values() for path in by_seed.values()]


def shown_models(config: dict) -> dict[str, list[int]]:
    """Every experiment any table shows, with the seeds those tables average over (a table's own
    ``seeds``, else the config's; the union where tables differ)."""
    return seeds_by_experiment(config, [(table, table_experiments(config, table))
                                        for table in config.get("tables", {})])


def seeds_by_experiment(config: dict, groups: list[tuple[str, list[str]]]) -> dict[str, list[int]]:
    """Each experiment named in ``groups`` (``(table, experiments)`` pairs) with the seeds of the
    tables it appears in (:func:`table_seeds`; the union, in first-seen order)."""
    models: dict[str, list[int]] = {}
    for table, names in groups:
        for name in names:
            seeds = models.setdefault(name, [])
            seeds += [seed for seed in table_seeds(config, table) if seed not in seeds]
    return models


def uses_pseudopairs(config: dict, name: str) -> bool:
    """Whether experiment ``name`` trains on a pseudopair data set (c2i or c2c)."""
    exp = experiment(config, name)
    sets = exp["c2i"] + [d for pair in exp.get("c2c", []) for d in pair]
    return any(dataset_kind(config, ds) == "pseudopairs" for ds in sets)


def method_check_spec(config: dict) -> dict[str, Any]:
    """The ``method-check`` step's input: the ``method_check`` section, the tables it names, the
    rows of each pseudopair table that train on pseudopairs, and the ``metrics.json`` of every
    experiment involved, per seed (experiment -> seed -> path; the rule's inputs) for the seeds of
    the tables it is compared in (each table in the spec carries its resolved ``seeds``)."""
    section = config.get("method_check", {})
    pseudopairs = [{**entry, "rows": [name for name in table_experiments(config, entry["table"])
                                      if uses_pseudopairs(config, name)]}
                   for entry in section.get("pseudopairs", [])]
    # each comparison averages over the seeds of the table it is read from
    compared = seeds_by_experiment(
        config, [(e["table"], [e["worse"], e["better"]]) for e in section.get("effects", [])]
        + [(e["table"], [e["source"], e["control"], *e["rows"]]) for e in pseudopairs])
    tables = sorted({e["table"] for e in section.get("effects", [])} | {e["table"] for e in pseudopairs})
    return {"min_t": section.get("min_t", 2.0), "effects": list(section.get("effects", [])),
            "pseudopairs": pseudopairs,
            "tables": {t: {**config["tables"][t], "seeds": table_seeds(config, t)} for t in tables},
            "metrics": {name: {str(seed): layout.metrics(name, seed) for seed in seeds}
                        for name, seeds in compared.items()},
            # every run of every table: how its training ended (training_runs.csv)
            "runs": {name: {str(seed): layout.metrics(name, seed) for seed in seeds}
                     for name, seeds in shown_models(config).items()}}


def method_check_inputs(config: dict) -> list[str]:
    spec = method_check_spec(config)
    return list(dict.fromkeys(path for part in ("metrics", "runs") for by_seed in spec[part].values()
                              for path in by_seed.values()))


def training_curves_spec(config: dict) -> dict[str, Any]:
    """The ``training-curves`` step's input: the tables and the training log of every experiment
    any table shows, per seed (experiment -> seed -> path; the rule's inputs)."""
    return {"tables": config["tables"],
            "logs": {name: {str(seed): layout.train_log(name, seed) for seed in seeds}
                     for name, seeds in shown_models(config).items()}}


def training_logs(config: dict) -> list[str]:
    """The training logs of every experiment any table shows, for every seed (training curves)."""
    return [path for by_seed in training_curves_spec(config)["logs"].values() for path in by_seed.values()]


def corpora_with_images(config: dict) -> list[str]:
    """Corpora whose images need features: those of the data sets plus the evaluation corpus."""
    corpora = {image_corpus(ds) for ds in config["datasets"].values()}
    corpora.add(config["evaluation"]["corpus"])
    return sorted(corpora)


def text_corpora(config: dict) -> list[str]:
    """Corpora whose caption tables get prepared: those of the data sets, the image corpora and
    the translation corpus."""
    corpora = {ds["corpus"] for ds in config["datasets"].values()} | set(corpora_with_images(config))
    return sorted(corpora | {config["evaluation"]["translation_corpus"]})
