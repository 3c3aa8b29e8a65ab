"""Paper 002's augmented training set as config data (§4: "we augment … using machine
translations so every image has at least five sentences for ten languages … All models we compare
to are trained using this augmented training set"; supplementary §7.1, Table 4: which translations).

A data set with ``augment: {human: [...], translate: [...], min_per_image: N}`` is, for its
language, every caption of the ``human`` data sets (the same language, as they are) plus every
caption of the ``translate`` data sets (other languages) machine-translated into its language,
each image with at least ``min_per_image`` captions (default 5, 002's "at least five"). All of
them describe the same images (the data set's image corpus). A translation is made by the
translation model of its direction — ``translation.model`` for its own direction, otherwise the
one trained for Cross-Lingual Consistency (:mod:`pseudopairs.smalr.clc_contract`: its directions
include every augmentation's), so the augmentation adds no model of its own. Steps: rule
``translate_augment`` (``translate-captions`` on the source data set's training captions, one
file per augmented data set and source: :func:`pseudopairs.core.layout.augment_translation`) and rule
``augment_captions`` (``augment-captions``, :mod:`pseudopairs.smalr.augment`: the union, checked
per image, as :func:`pseudopairs.core.layout.augmented_captions`).
"""

from __future__ import annotations

from typing import Any

from pseudopairs.core import layout
from pseudopairs.data.contract import dataset_files, dataset_kind, image_corpus

#: 002: "every image has at least five sentences".
DEFAULT_MIN_PER_IMAGE = 5

#: Data set kinds whose captions an augmentation may take (not synthetic ones).
SOURCE_KINDS = ("corpus", "selection")


def augmented_datasets(config: dict) -> list[str]:
    return [name for name, ds in config.get("datasets", {}).items() if "augment" in ds]


def augment_entry(config: dict, name: str) -> dict[str, Any]:
    """The data set's ``augment`` entry with its defaults."""
    entry = config["datasets"][name]["augment"]
    return {"human": list(entry.get("human") or []), "translate": list(entry.get("translate") or []),
            "min_per_image": int(entry.get("min_per_image", DEFAULT_MIN_PER_IMAGE))}


def translations(config: dict) -> list[tuple[str, str]]:
    """(augmented data set, source data set) of every translation an augmentation needs."""
    return [(name, source) for name in augmented_datasets(config)
            for source in augment_entry(config, name)["translate"]]


def translation_langs(config: dict, name: str, source: str) -> tuple[str, str]:
    """(source language, target language) of translating ``source`` for ``name``."""
    datasets = config["datasets"]
    return datasets[source]["lang"], datasets[name]["lang"]


def augment_directions(config: dict) -> list[tuple[str, str]]:
    """The translation directions (source language, target language) the augmentations need,
    each once, in first-seen order."""
    return list(dict.fromkeys(translation_langs(config, name, source)
                              for name, source in translations(config)))


def augment_langs(config: dict) -> list[str]:
    """The languages of those directions, in first-seen order."""
    return list(dict.fromkeys(lang for pair in augment_directions(config) for lang in pair))


def translation_source(config: dict, name: str, source: str) -> dict[str, str]:
    """What ``translate_augment`` translates for (``name``, ``source``): the source data set's
    training captions, its language and the target language."""
    if source not in augment_entry(config, name)["translate"]:
        raise ValueError(f"data set {name!r} does not translate {source!r}")
    source_lang, target_lang = translation_langs(config, name, source)
    return {"captions": dataset_files(config, source)["captions"], "source_lang": source_lang,
            "target_lang": target_lang, "dataset": f"{name}.mt-{source}"}


def augment_spec(config: dict, name: str) -> dict[str, Any]:
    """The ``augment-captions`` job of augmented data set ``name``: its language, the human
    captions (caption table per source data set) and the translations, and ``min_per_image``."""
    entry = augment_entry(config, name)
    return {"dataset": name, "lang": config["datasets"][name]["lang"],
            "min_per_image": entry["min_per_image"],
            "human": [{"source": ds, "captions": dataset_files(config, ds)["captions"]}
                      for ds in entry["human"]],
            "translated": [{"source": ds, "captions": layout.augment_translation(name, ds)}
                           for ds in entry["translate"]]}


def augment_inputs(config: dict, name: str) -> list[str]:
    spec = augment_spec(config, name)
    return list(dict.fromkeys(part["captions"] for key in ("human", "translated") for part in spec[key]))


def check(config: dict) -> list[str]:
    """Each augmentation names known, non-synthetic data sets over its own images, its human
    ones in its language and its translated ones in others, and at least one of them; the
    translation models need the ``translation`` section."""
    datasets = config.get("datasets", {})
    messages = []
    for name in augmented_datasets(config):
        where = f"config key 'datasets.{name}.augment"
        entry = augment_entry(config, name)
        if not entry["human"] and not entry["translate"]:
            messages.append(f"{where}': names no data set (human or translate)")
        own = datasets[name]
        for key in ("human", "translate"):
            for i, source in enumerate(entry[key]):
                at = f"{where}.{key}.{i}'"
                if source not in datasets:
                    messages.append(f"{at}: unknown data set {source!r}")
                    continue
                if dataset_kind(config, source) not in SOURCE_KINDS:
                    messages.append(f"{at}: {source!r} is a {dataset_kind(config, source)} data set; "
                                    f"an augmentation takes {' or '.join(SOURCE_KINDS)} captions")
                if image_corpus(datasets[source]) != image_corpus(own):
                    messages.append(f"{at}: {source!r} describes the {image_corpus(datasets[source])!r} "
                                    f"images, {name!r} the {image_corpus(own)!r} images")
                same = datasets[source]["lang"] == own["lang"]
                if key == "human" and not same:
                    messages.append(f"{at}: {source!r} is in {datasets[source]['lang']!r}; human "
                                    f"captions are kept as they are, so they must be in {own['lang']!r}")
                if key == "translate" and same:
                    messages.append(f"{at}: {source!r} is already in {own['lang']!r}; list it under human")
    if augmented_datasets(config) and "translation" not in config:
        messages.append("config key 'translation': required by the augmented data set(s) "
                        f"{augmented_datasets(config)} (their translation models are trained with "
                        "translation.train)")
    return messages
