"""The evaluation stage's contract: the test data a trained model is scored on
(:func:`evaluation_spec`, the files of :func:`evaluation_inputs`) and :func:`check` of the
``evaluation`` section's languages."""

from __future__ import annotations

from typing import Any

from pseudopairs import layout
from pseudopairs.data.contract import corpus_images, corpus_langs, feature_format
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
    }
    if evaluation.get("translation_corpus"):   # translation retrieval on its parallel test pairs
        spec.update(translation_captions=layout.captions(evaluation["translation_corpus"], "test"),
                    translation_langs=list(evaluation["translation_langs"]))
    others = {lang: corpus for lang, corpus in evaluation.get("lang_corpora", {}).items()
              if lang in evaluation["langs"] and lang not in corpus_langs(config, evaluation["corpus"])}
    if others:   # a language tested on its own corpus' test split and images (your own data)
        spec["lang_tests"] = {lang: {"captions": layout.captions(corpus, "test"),
                                     "features": layout.features(corpus_images(config, corpus), "test",
                                                                 feature_format(config))}
                              for lang, corpus in others.items()}
    portion = portion_langs(config, name)
    if portion:   # only then: the spec (a job parameter) of every other model stays as it was
        spec.update(portion_captions=spec["translation_captions"], portion_langs=portion)
    return spec


def evaluation_inputs(config: dict, name: str, seed: int) -> list[str]:
    spec = evaluation_spec(config, name)
    files = [layout.checkpoint(name, seed), layout.model_vocabulary(name, seed), spec["captions"],
             spec["features"]]
    files += [spec["translation_captions"]] if "translation_captions" in spec else []
    return files + [path for test in spec.get("lang_tests", {}).values() for path in test.values()]


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
