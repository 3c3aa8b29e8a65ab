"""The evaluation stage's contract: the ``evaluate`` job of an experiment's models
(:func:`evaluation_job`: the test data of :func:`evaluation_data`, the experiment's device and
threads) and :func:`check` of the ``evaluation`` section's languages."""

from __future__ import annotations

from pseudopairs.core import layout
from pseudopairs.data.contract import corpus_images, corpus_langs, feature_format
from pseudopairs.evaluation.job import EvaluatedModel, EvaluationData, EvaluationJob, LangTest
from pseudopairs.data.experiments import table_experiments, table_test_corpus
from pseudopairs.model.contract import experiment_training


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


def evaluation_data(config: dict, name: str | None = None) -> EvaluationData:
    """Test data a trained model (experiment ``name``) is evaluated on: image–sentence retrieval
    on the evaluation corpus in ``evaluation.langs`` (every model), on the translation corpus in
    :func:`portion_langs` (``portion_retrieval`` in metrics.json), translation retrieval."""
    evaluation = config["evaluation"]
    translation_captions = (layout.captions(evaluation["translation_corpus"], "test")
                            if evaluation.get("translation_corpus") else None)
    others = {lang: corpus for lang, corpus in evaluation.get("lang_corpora", {}).items()
              if lang in evaluation["langs"] and lang not in corpus_langs(config, evaluation["corpus"])}
    # a language of your own data tested on its own corpus' test split and images
    lang_tests = {lang: LangTest(captions=layout.captions(corpus, "test"),
                                 features=layout.features(corpus_images(config, corpus), "test",
                                                          feature_format(config)))
                  for lang, corpus in others.items()}
    portion = portion_langs(config, name)
    return EvaluationData(
        captions=layout.captions(evaluation["corpus"], "test"),
        features=layout.features(evaluation["corpus"], "test", feature_format(config)),
        langs=list(evaluation["langs"]), translation_captions=translation_captions,
        translation_langs=list(evaluation.get("translation_langs") or []) if translation_captions else [],
        portion_captions=translation_captions if portion else None, portion_langs=portion,
        lang_tests=lang_tests)


def evaluation_job(config: dict, name: str, seeds: list[int] | int) -> EvaluationJob:
    """The ``evaluate`` job of experiment ``name``'s models of ``seeds`` (one seed, or a stack's):
    their checkpoints, vocabularies and metrics files, the test data, and the device and threads
    of the experiment's own ``training`` settings."""
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    training = experiment_training(config, name)
    models = {str(seed): EvaluatedModel(checkpoint=layout.checkpoint(name, seed),
                                        vocab=layout.model_vocabulary(name, seed),
                                        output=layout.metrics(name, seed)) for seed in seeds}
    return EvaluationJob(experiment=name, device=training.device, threads=training.threads,
                         data=evaluation_data(config, name), models=models)


def check(config: dict) -> list[str]:
    """Every language of ``evaluation.langs`` is one a data set of the evaluation corpus has, or
    of the corpus ``evaluation.lang_corpora`` names for it; translation retrieval has its corpus
    and two languages, or neither."""
    evaluation, datasets = config.get("evaluation", {}), config.get("datasets", {})
    messages = []
    for i, lang in enumerate(evaluation.get("langs", [])):
        corpus = evaluation.get("corpus")
        if not any(d["lang"] == lang and d["corpus"] == corpus for d in datasets.values()):
            corpus = evaluation.get("lang_corpora", {}).get(lang, corpus)
        if not any(d["lang"] == lang and d["corpus"] == corpus for d in datasets.values()):
            messages.append(f"config key 'evaluation.langs.{i}': no data set of corpus "
                            f"{corpus!r} has language {lang!r}")
    if bool(evaluation.get("translation_corpus")) != (len(evaluation.get("translation_langs") or []) == 2):
        messages.append("config key 'evaluation.translation_langs': translation retrieval needs "
                        "evaluation.translation_corpus and two languages, or neither")
    return messages
