"""Cross-Lingual Consistency's contract (paper 002 §3.4): which models are evaluated with it, the
translation directions it needs and their models, parallel text, translations and evaluation
inputs, and :func:`check` of the ``clc`` section and the table rows that use it.

A retrieval table row with ``clc: clc_a`` or ``clc: clc_c`` (:data:`CLC_AGGREGATES`) shows its
experiment's ``metrics.clc.json`` under that key. The CLC languages are the ``langs`` of every
table with such a row; every ordered pair of them is a direction (``{source}2{target}``, as the
``translation`` entries of metrics.json). Paper 002's augmented data sets
(:mod:`pseudopairs.smalr.augment_contract`) add the directions their translations need (in both
shipped configurations they are among the CLC directions already). The direction of
``translation.model`` reuses that model; every other is trained by ``train-mt`` (settings
``translation.train``) on :func:`parallel_spec`'s text, in every language of :func:`mt_langs`,
and converted like it (``translation.model.quantization``)."""

from __future__ import annotations

from typing import Any

from pseudopairs.core import layout
from pseudopairs.data.contract import feature_format
from pseudopairs.data.text_contract import model_args, model_inputs
from pseudopairs.data.experiments import seeds_by_experiment, table_lang_test_corpus, table_test_corpus
from pseudopairs.smalr import augment_contract
from pseudopairs.smalr.settings import CLC_AGGREGATES, CLCSettings

#: The translation corpus' splits CLC translates: CLC-C is trained on ``val``, tested on ``test``.
CLC_SPLITS = ("val", "test")

#: Parallel text roles (``train-mt``'s train / valid files) and the split each is written as.
PARALLEL_SPLITS = {"train": "train", "valid": "val"}


def clc_rows(config: dict) -> list[tuple[str, dict]]:
    """(table, row) of every table row with a ``clc`` aggregate."""
    return [(table, row) for table, spec in config.get("tables", {}).items()
            for row in spec.get("rows", []) if row.get("clc")]


def clc_langs(config: dict) -> list[str]:
    """The languages of every table with a CLC row, in first-seen order."""
    tables = dict.fromkeys(table for table, _ in clc_rows(config))
    return list(dict.fromkeys(lang for t in tables for lang in config["tables"][t].get("langs", [])))


def mt_langs(config: dict) -> list[str]:
    """The languages of the translation models: :func:`clc_langs`, then those of the augmented
    data sets' directions not among them."""
    return list(dict.fromkeys(clc_langs(config) + augment_contract.augment_langs(config)))


def direction_name(source: str, target: str) -> str:
    return f"{source}2{target}"


def directions(config: dict) -> dict[str, tuple[str, str]]:
    """Direction name -> (source, target) for every ordered pair of :func:`clc_langs`, then every
    direction an augmented data set needs."""
    langs = clc_langs(config)
    out = {direction_name(a, b): (a, b) for a in langs for b in langs if a != b}
    for a, b in augment_contract.augment_directions(config):
        out.setdefault(direction_name(a, b), (a, b))
    return out


def direction(config: dict, name: str) -> tuple[str, str]:
    try:
        return directions(config)[name]
    except KeyError:
        raise ValueError(f"{name!r} is not a CLC translation direction "
                         f"(they are {sorted(directions(config))})") from None


def target_text_inputs(config: dict, name: str) -> list[str]:
    """The model files of the text preparation of CLC direction ``name``'s target language (its
    truecaser, a trained tokenizer): the translate_clc job's inputs."""
    return model_inputs(config, direction(config, name)[1])


def target_text_args(config: dict, name: str) -> list[str]:
    """translate-captions' options naming :func:`target_text_inputs`, as a list."""
    return model_args(config, direction(config, name)[1])


def reuses_translation_model(config: dict, name: str) -> bool:
    """Whether direction ``name`` is ``translation.model``'s (that model translates it)."""
    model = config.get("translation", {}).get("model", {})
    return direction(config, name) == (model.get("source_lang"), model.get("target_lang"))


def trained_directions(config: dict) -> list[str]:
    """The directions a model is trained for (every one but ``translation.model``'s)."""
    return [name for name in directions(config) if not reuses_translation_model(config, name)]


def model_dir(config: dict, name: str) -> str:
    """The CTranslate2 model translating direction ``name``."""
    return layout.translation_model() if reuses_translation_model(config, name) else layout.clc_model(name)


def clc_settings(config: dict) -> CLCSettings:
    return CLCSettings.from_dict(config.get("clc", {}))


def parallel_spec(config: dict) -> dict[str, Any]:
    """What the ``clc-parallel-text`` step writes :func:`parallel_outputs` from: the demo world's
    parallel sentences (``clc.parallel: world``) or the translation corpus' train and val captions
    (``corpus``)."""
    settings = clc_settings(config)
    spec: dict[str, Any] = {"source": settings.parallel, "langs": mt_langs(config)}
    if settings.parallel == "world":
        spec.update(world=config["world"], sizes={"train": settings.parallel_train,
                                                  "val": settings.parallel_val})
    else:
        corpus = config["evaluation"]["translation_corpus"]
        spec["captions"] = {split: layout.captions(corpus, split) for split in PARALLEL_SPLITS.values()}
    return spec


def parallel_inputs(config: dict) -> list[str]:
    return list(parallel_spec(config).get("captions", {}).values())


def parallel_outputs(config: dict) -> dict[str, str]:
    """``{split}_{lang}`` -> the file (every CLC language, train and val)."""
    return {f"{split}_{lang}": layout.clc_parallel_text(split, lang)
            for split in PARALLEL_SPLITS.values() for lang in mt_langs(config)}


def train_inputs(config: dict, name: str) -> dict[str, str]:
    """``train-mt``'s four files of direction ``name``."""
    source, target = direction(config, name)
    return {f"{side}_{role}": layout.clc_parallel_text(split, lang)
            for role, split in PARALLEL_SPLITS.items()
            for side, lang in (("source", source), ("target", target))}


def query_corpus(config: dict, lang: str) -> str:
    """The corpus whose ``val`` and ``test`` captions are language ``lang``'s CLC queries: the CLC
    tables' ``lang_test_corpora[lang]`` (paper 002's Table 2: En and De on the comparable
    portion's five captions per image, so a CLC row and the row above it share the test set),
    else the translation corpus (:func:`check` refuses CLC tables that disagree)."""
    tables = dict.fromkeys(table for table, _ in clc_rows(config))
    named = [table_lang_test_corpus(config, t, lang) for t in tables
             if lang in config["tables"][t].get("langs", [])]
    return named[0] if named else config["evaluation"]["translation_corpus"]


def translate_spec(config: dict, name: str, split: str) -> dict[str, str]:
    """The ``translate-captions`` job of direction ``name`` on ``split`` of the source language's
    query corpus (:func:`query_corpus`)."""
    source, target = direction(config, name)
    corpus = query_corpus(config, source)
    return {"model": model_dir(config, name), "captions": layout.captions(corpus, split),
            "source_lang": source, "target_lang": target, "dataset": f"{corpus}.{target}-mt"}


def augment_translate_spec(config: dict, name: str, source: str) -> dict[str, str]:
    """The ``translate-captions`` job translating data set ``source``'s training captions for the
    augmented data set ``name``: the direction's model (:func:`model_dir`) and
    :func:`pseudopairs.smalr.augment_contract.translation_source`."""
    spec = augment_contract.translation_source(config, name, source)
    return {"model": model_dir(config, direction_name(spec["source_lang"], spec["target_lang"])), **spec}


def clc_models(config: dict) -> dict[str, list[int]]:
    """Experiment -> the seeds its metrics.clc.json is needed for (the seeds of its CLC tables)."""
    groups: dict[str, list[str]] = {}
    for table, row in clc_rows(config):
        groups.setdefault(table, []).append(row["experiment"])
    return seeds_by_experiment(config, list(groups.items()))


def evaluation_spec(config: dict, name: str) -> dict[str, Any]:
    """``evaluate-clc``'s inputs for experiment ``name``: per split, each query language's
    captions (its :func:`query_corpus`; query language -> file), the evaluation corpus' features
    (the same images) and every direction's translations (query language -> target language ->
    file), and CLC-C's settings."""
    evaluation, fmt = config["evaluation"], feature_format(config)
    langs = clc_langs(config)
    settings = clc_settings(config).to_dict()
    return {
        "experiment": name,
        "langs": langs,
        "captions": {s: {lang: layout.captions(query_corpus(config, lang), s) for lang in langs}
                     for s in CLC_SPLITS},
        "features": {s: layout.features(evaluation["corpus"], s, fmt) for s in CLC_SPLITS},
        "translations": {s: {a: {b: layout.clc_translations(direction_name(a, b), s)
                                 for b in langs if b != a} for a in langs} for s in CLC_SPLITS},
        "classifier": {k: settings[k] for k in ("hidden", "iterations", "learning_rate", "margin",
                                                 "top_k", "init", "seed")},
    }


def evaluation_inputs(config: dict, name: str, seed: int) -> list[str]:
    spec = evaluation_spec(config, name)
    paths = [layout.checkpoint(name, seed), layout.model_vocabulary(name, seed)]
    paths += [p for by_lang in spec["captions"].values() for p in by_lang.values()]
    paths += list(spec["features"].values())
    paths += [p for by_query in spec["translations"].values() for by_target in by_query.values()
              for p in by_target.values()]
    return list(dict.fromkeys(paths))


def check(config: dict) -> list[str]:
    """CLC rows: a known aggregate, one ``experiment``, in a retrieval table of the translation
    corpus' test split with two languages or more; a ``translation`` section to train with; the
    world's parallel text only in the demo world; the ``clc`` settings known."""
    messages = []
    for table, spec in config.get("tables", {}).items():
        for i, row in enumerate(spec.get("rows", [])):
            if not row.get("clc"):
                continue
            key = f"tables.{table}.rows.{i}.clc"
            if row["clc"] not in CLC_AGGREGATES:
                messages.append(f"config key '{key}': {row['clc']!r} is not one of {list(CLC_AGGREGATES)}")
            if not row.get("experiment") or "experiments" in row:
                messages.append(f"config key '{key}': a CLC row names one 'experiment'")
            if spec.get("kind") != "retrieval" or \
                    table_test_corpus(config, table) != config.get("evaluation", {}).get("translation_corpus"):
                messages.append(f"config key '{key}': CLC is tested on the translation corpus' test "
                                "split: a retrieval table with test_corpus = evaluation.translation_corpus")
            if len(spec.get("langs", [])) < 2:
                messages.append(f"config key '{key}': CLC needs two languages or more in "
                                f"'tables.{table}.langs'")
    first: dict[str, tuple[str, str]] = {}   # lang -> (table, corpus): one query set per language
    for table in dict.fromkeys(t for t, _ in clc_rows(config)):
        for lang in config["tables"][table].get("langs", []):
            corpus = table_lang_test_corpus(config, table, lang)
            seen = first.setdefault(lang, (table, corpus))
            if seen[1] != corpus:
                messages.append(f"config key 'tables.{table}.lang_test_corpora.{lang}': {corpus!r}, but "
                                f"the CLC rows of table {seen[0]} test {lang} on {seen[1]!r} (CLC "
                                "translates one query set per language)")
    messages += augment_contract.check(config)
    if not clc_rows(config):
        if not augment_contract.augmented_datasets(config) or "translation" not in config:
            return messages
    elif "translation" not in config:
        messages.append("config key 'translation': required by the CLC rows (their translation models)")
    try:
        settings = clc_settings(config)
    except (ValueError, TypeError) as err:
        key, _, why = str(err).partition(": ")
        return messages + [f"config key '{key}': {why}"]
    if settings.parallel == "world" and config.get("data", {}).get("source") != "world":
        messages.append("config key 'clc.parallel': world is the demo world's parallel text; "
                        "outside it use corpus (the translation corpus' captions)")
    return messages
