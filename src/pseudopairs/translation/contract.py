"""The translation stage's contract: which data sets are machine translations and of what
(:func:`translation_source`), the ``translate-captions`` job's settings, and :func:`check` of the
``translation`` section."""

from __future__ import annotations

from typing import Any

from pseudopairs.data.contract import dataset, dataset_files, dataset_kind
from pseudopairs.translation.settings import QUANTIZATIONS, TrainSettings, TranslateSection


def translation_datasets(config: dict) -> list[str]:
    return [name for name in config["datasets"] if dataset_kind(config, name) == "translation"]


def translation_source(config: dict, name: str) -> dict[str, str]:
    """The caption table a translated data set is made from (its source data set, training split)."""
    if dataset_kind(config, name) != "translation":
        raise ValueError(f"data set {name!r} is not a translated data set")
    return dataset_files(config, dataset(config, name)["translation"])


def translate_settings(config: dict) -> dict[str, Any]:
    """``translation.translate`` without the job keys (its CPU threads are the rule's threads)."""
    settings = config["translation"]["translate"]
    return {k: v for k, v in settings.items() if k not in TranslateSection.JOB_KEYS}


def check(config: dict) -> list[str]:
    """The ``translation`` section: present when a data set is a translation, its languages
    those of every translated data set, a download's files named, and its ``train`` and
    ``translate`` settings known to :mod:`pseudopairs.translation` (which names the bad key)."""
    datasets = config.get("datasets", {})
    translated = [name for name, ds in datasets.items() if "translation" in ds]
    if "translation" not in config:
        return [f"config key 'translation': required by the translated data set(s) {translated}"] if translated else []
    section = config["translation"]
    model = section["model"]
    messages = []
    for name in translated:
        source = datasets.get(datasets[name]["translation"])
        if source is None:
            continue
        if (source["lang"], datasets[name]["lang"]) != (model["source_lang"], model["target_lang"]):
            messages.append(f"config key 'datasets.{name}': translates {source['lang']!r} -> "
                            f"{datasets[name]['lang']!r}, but the model in 'translation.model' goes "
                            f"{model['source_lang']!r} -> {model['target_lang']!r}")
    if model["quantization"] not in QUANTIZATIONS:
        messages.append(f"config key 'translation.model.quantization': {model['quantization']!r} is not "
                        f"one of {list(QUANTIZATIONS)}")
    messages += _model_source_errors(config, model)
    for settings, values in ((TrainSettings, section["train"]), (TranslateSection, section["translate"])):
        try:
            settings.from_dict(values)
        except (ValueError, TypeError) as err:
            key, _, why = str(err).partition(": ")
            messages.append(f"config key '{key}': {why}")
    return messages


def _model_source_errors(config: dict, model: dict) -> list[str]:
    """A downloaded model names its files; a trained one names none and has parallel text (the
    demo world provides its own) with a file per language."""
    messages = []
    if model["source"] == "download":
        for key in ("url", "checkpoint", "tokenizer"):
            if not model.get(key):
                messages.append(f"config key 'translation.model.{key}': required with source: download")
        return messages
    for key in ("url", "checkpoint", "tokenizer"):
        # null unsets a key a layered file cannot remove (config/rehearsal.yaml)
        if model.get(key) is not None:
            messages.append(f"config key 'translation.model.{key}': only used with source: download "
                            "(source is train)")
    if model.get("parallel_text") is None and config.get("data", {}).get("source") != "world":
        messages.append("config key 'translation.model.parallel_text': required with source: train "
                        "outside the demo world (which provides its own parallel text)")
    for split, files in (model.get("parallel_text") or {}).items():
        for lang in (model["source_lang"], model["target_lang"]):
            if lang not in files:
                messages.append(f"config key 'translation.model.parallel_text.{split}': no {lang!r} file")
    return messages
