"""The training stage's contract: the ``train`` job of an experiment's stack
(:func:`training_job`: its settings, each seed's :func:`training_spec`; the files of
:func:`training_job_inputs`), how its vocabulary
is made and where each training language is validated, and :func:`check` of the ``model`` and
``training`` sections and of the ``experiments``' references (data sets, fine-tuning sources,
dependency cycles, validation captions for every training language)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pseudopairs.core import layout
from pseudopairs.data.contract import corpus_images, corpus_langs, dataset_files, feature_format
from pseudopairs.data.experiments import experiment
from pseudopairs.model.job import RunSettings, TrainedModel, TrainingJob
from pseudopairs.model.settings import ModelSettings, TrainingSettings
from pseudopairs.smalr.settings import FastTextSettings, HemSettings


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
    if uses_hem(config, name):   # paper 002: the pretrain_hem step's vocabulary
        return {"path": layout.hem_vocabulary(name, seed)}
    return {"min_count": config["vocab"]["min_count"]}


def uses_hem(config: dict, name: str) -> bool:
    """Whether the experiment's text encoder is paper 002's hybrid embedding (``hem``)."""
    return experiment_model(config, name).text_encoder == "hem"


def experiment_training(config: dict, name: str) -> TrainingSettings:
    """The experiment's ``training`` settings: its own entries over the config's section (so
    changing one experiment's setting reruns that experiment and what depends on it)."""
    return TrainingSettings.from_dict({**config["training"], **experiment(config, name).get("training", {})})


def experiment_model(config: dict, name: str) -> ModelSettings:
    """The experiment's ``model`` settings: its own entries over the config's section."""
    return ModelSettings.from_dict({**config["model"], **experiment(config, name).get("model", {})})


def run_settings(config: dict, name: str) -> RunSettings:
    """The settings each of the experiment's runs trains with. Without ``training.stack``, which
    only groups seeds into jobs (regrouping them reruns no job whose stack is unchanged)."""
    training = experiment_training(config, name)
    return RunSettings(training=replace(training, stack=TrainingSettings.defaults()["stack"]),
                       model=experiment_model(config, name))


def training_job(config: dict, name: str, seeds: list[int] | int) -> TrainingJob:
    """The ``train`` job of experiment ``name``'s models of ``seeds`` (one seed, or a stack's):
    each seed's training spec and model directory, and the experiment's settings."""
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    models = {str(seed): TrainedModel(spec=training_spec(config, name, seed),
                                      out_dir=layout.model_dir(name, seed)) for seed in seeds}
    return TrainingJob(experiment=name, settings=run_settings(config, name), models=models)


def training_job_inputs(config: dict, name: str, seeds: list[int] | int) -> list[str]:
    """Every file the ``train`` job of (``name``, ``seeds``) reads, for the Snakemake rule."""
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    return sorted({path for seed in seeds for path in training_inputs(config, name, seed)})


def validation_corpus(config: dict, lang: str) -> str:
    """Where captions of ``lang`` are validated (and tested): the evaluation corpus when it has the
    language, else the translation corpus (paper 004's French and Czech exist in Multi30K's
    translation portion only; its images are the evaluation corpus' images)."""
    evaluation = config["evaluation"]
    if lang in corpus_langs(config, evaluation["corpus"]):
        return evaluation["corpus"]
    if evaluation.get("translation_corpus") and lang in corpus_langs(config, evaluation["translation_corpus"]):
        return evaluation["translation_corpus"]
    if lang in evaluation.get("lang_corpora", {}):   # another corpus, other images (your own data)
        return evaluation["lang_corpora"][lang]
    raise ValueError(f"no validation captions in language {lang!r}: no data set of corpus "
                     f"{evaluation['corpus']!r} or {evaluation.get('translation_corpus')!r} has it "
                     "(evaluation.lang_corpora names a corpus per language)")


def validation_spec(config: dict, name: str) -> dict[str, Any]:
    """The validation split every training language is scored on (early stopping): the
    evaluation corpus' ``val`` split; ``lang_captions`` names the caption table of each language
    the evaluation corpus lacks (the translation corpus' ``val`` split, same images)."""
    evaluation = config["evaluation"]
    langs = training_langs(config, name)
    spec = {"captions": layout.captions(evaluation["corpus"], "val"),
            "features": layout.features(evaluation["corpus"], "val", feature_format(config)),
            "langs": langs}
    other = {lang: corpus for lang in langs
             if (corpus := validation_corpus(config, lang)) != evaluation["corpus"]}
    if other:   # only then: the spec (a job parameter) of every other experiment stays as it was
        spec["lang_captions"] = {lang: layout.captions(corpus, "val") for lang, corpus in other.items()}
    features = {lang: layout.features(images, "val", feature_format(config)) for lang, corpus in other.items()
                if (images := corpus_images(config, corpus)) != evaluation["corpus"]}
    if features:   # a corpus of other images (evaluation.lang_corpora)
        spec["lang_features"] = features
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
        # paper 002's hem text encoder starts from the pretrain_hem step's rows (only then a key,
        # so no other experiment's job parameters change)
        **({"text_init": layout.hem_init(name, seed)} if uses_hem(config, name) and not finetune else {}),
    }


def training_inputs(config: dict, name: str, seed: int) -> list[str]:
    """Every file the training job of (``name``, ``seed``) reads, for the Snakemake rule."""
    spec = training_spec(config, name, seed)
    files = set()
    for ds in spec["c2i"] + [side for pair in spec["c2c"] for side in (pair["a"], pair["b"])]:
        files.update((ds["captions"], ds["features"]))
    files.update((spec["validation"]["captions"], spec["validation"]["features"]))
    files.update(spec["validation"].get("lang_captions", {}).values())
    files.update(spec["validation"].get("lang_features", {}).values())
    if spec["init_from"]:
        files.add(spec["init_from"])
    if "path" in spec["vocab"]:
        files.add(spec["vocab"]["path"])
    if spec.get("text_init"):
        files.add(spec["text_init"])
    return sorted(files)


# --------------------------------------------------------------------------------------------
# The config check


def experiment_dependencies(config: dict, name: str) -> list[str]:
    """Experiments whose models experiment ``name`` needs first: its fine-tuning source and the
    source of every pseudopair set behind its data sets."""
    exp = config["experiments"][name]
    deps = [exp["finetune"]] if "finetune" in exp else []
    datasets, pseudopairs = config.get("datasets", {}), config.get("pseudopairs", {})
    for ds in exp.get("c2i", []) + [d for pair in exp.get("c2c", []) for d in pair]:
        pp = pseudopairs.get(datasets.get(ds, {}).get("pseudopairs"))
        if pp and pp["source"] not in deps:
            deps.append(pp["source"])
    return [d for d in deps if d in config["experiments"]]


def _dependency_cycle(config: dict, path: list[str]) -> list[str] | None:
    for dep in experiment_dependencies(config, path[-1]):
        if dep == path[0]:
            return path + [dep]
        if dep not in path:
            found = _dependency_cycle(config, path + [dep])
            if found:
                return found
    return None


def _reference_errors(config: dict) -> list[str]:
    """Each experiment's data sets exist (a c2c pair: two languages over the same images) and so
    does its fine-tuning source."""
    datasets, experiments = config.get("datasets", {}), config.get("experiments", {})
    messages = []
    for name, exp in experiments.items():
        for i, ds in enumerate(exp.get("c2i", [])):
            if ds not in datasets:
                messages.append(f"config key 'experiments.{name}.c2i.{i}': unknown data set {ds!r}")
        for i, pair in enumerate(exp.get("c2c", [])):
            for j, ds in enumerate(pair):
                if ds not in datasets:
                    messages.append(f"config key 'experiments.{name}.c2c.{i}.{j}': unknown data set {ds!r}")
            if all(ds in datasets for ds in pair):
                a, b = (datasets[ds] for ds in pair)
                # same images: the corpus of each side's images (a translation portion's
                # captions describe its comparable corpus' images: `images:`)
                if a.get("images", a["corpus"]) != b.get("images", b["corpus"]) or a["lang"] == b["lang"]:
                    messages.append(f"config key 'experiments.{name}.c2c.{i}': a c2c pair needs two "
                                    f"languages over the same images, got {pair}")
        if "finetune" in exp and exp["finetune"] not in experiments:
            messages.append(f"config key 'experiments.{name}.finetune': unknown experiment {exp['finetune']!r}")
    return messages


def _resolved_errors(config: dict) -> list[str]:
    """Once every reference resolves: dependency chains (fine-tuning, pseudopair sources) end;
    then every training language of every experiment has validation captions (the evaluation
    corpus, else the translation corpus)."""
    messages = []
    for name in config.get("experiments", {}):
        path = _dependency_cycle(config, [name])
        if path:
            messages.append(f"config key 'experiments.{name}': dependency cycle {' -> '.join(path)} "
                            "(through finetune or the source of a pseudopair set)")
    if messages:
        return messages
    for name in config.get("experiments", {}):
        for lang in training_langs(config, name):
            try:
                validation_corpus(config, lang)
            except ValueError as err:
                messages.append(f"config key 'experiments.{name}': {err}")
    return messages


def check(config: dict) -> list[str]:
    """The ``model`` and ``training`` sections (each experiment's ``training`` over the config's)
    by the settings classes the ``train`` step reads, then the experiments' references; the
    cycles and validation languages once those resolve."""
    messages = ModelSettings.config_errors(config.get("model"))
    messages += TrainingSettings.config_errors(config.get("training"))
    messages += FastTextSettings.config_errors(config.get("fasttext"))
    messages += HemSettings.config_errors(config.get("hem"))
    overrides = (("training", TrainingSettings), ("model", ModelSettings), ("hem", HemSettings))
    for name, exp in config.get("experiments", {}).items():
        for section, cls in overrides:
            if section in exp:
                messages += cls.config_errors({**config.get(section, {}), **exp[section]},
                                              f" (with the overrides of experiments.{name}.{section})")
    references = _reference_errors(config)
    return messages + (references or _resolved_errors(config))
