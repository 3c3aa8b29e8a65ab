"""The data stage's contract: data sets as data (``config['datasets']``), the lookups every later
stage shares (a data set's kind, files, image corpus, caption count), the ``select-captions``
job's spec, which corpora get features and prepared text, and :func:`check` of the ``datasets``
section. Nothing here looks inside names: a data set's corpus, language and origin (a corpus, a
selection, a pseudopair set, a translation) come from its declaration."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pseudopairs.core import layout

SPLITS = ("train", "val", "test")


def feature_format(config: dict) -> str:
    return config["features"]["format"]


def config_entry(config: dict, section: str, name: str, what: str) -> dict[str, Any]:
    """Entry ``name`` of the config's ``section`` (data sets, experiments, …); an unknown name is
    an error naming the key."""
    try:
        return config[section][name]
    except KeyError:
        raise ValueError(f"config key '{section}': unknown {what} {name!r}") from None


def dataset(config: dict, name: str) -> dict[str, Any]:
    return config_entry(config, "datasets", name, "data set")


def dataset_kind(config: dict, name: str) -> str:
    """``corpus`` (captions of a corpus), ``selection`` (a corpus' captions restricted to a subset
    of images or captions per image, :mod:`pseudopairs.data.select`), ``pseudopairs`` (mined
    captions for the queries' images), ``translation`` (machine-translated captions of another
    data set) or ``augmented`` (paper 002's augmented training set: human captions plus machine
    translations of other data sets, :mod:`pseudopairs.smalr.augment_contract`)."""
    ds = dataset(config, name)
    if "pseudopairs" in ds:
        return "pseudopairs"
    if "translation" in ds:
        return "translation"
    if "augment" in ds:
        return "augmented"
    if "select" in ds:
        return "selection"
    return "corpus"


def image_corpus(ds: dict) -> str:
    """The corpus whose images a data set's captions describe (``images``, default its corpus:
    the Multi30K translation portion describes the Multi30K images)."""
    return ds.get("images", ds["corpus"])


def corpus_langs(config: dict, corpus: str) -> set[str]:
    """Languages the config's data sets give corpus ``corpus`` (its caption tables hold them; a
    pseudopair or translated data set of its images does not)."""
    return {ds["lang"] for name, ds in config["datasets"].items()
            if ds["corpus"] == corpus and dataset_kind(config, name) in ("corpus", "selection")}


def corpus_images(config: dict, corpus: str) -> str:
    """The corpus whose images corpus ``corpus``' captions describe (its data sets' ``images``,
    default itself: Multi30K's translation portion describes the comparable portion's images)."""
    for ds in config["datasets"].values():
        if ds["corpus"] == corpus and "images" in ds:
            return ds["images"]
    return corpus


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
    elif kind == "augmented":
        captions = layout.augmented_captions(name)
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


def corpora_with_images(config: dict) -> list[str]:
    """Corpora whose images need features: those of the data sets plus the evaluation corpus."""
    corpora = {image_corpus(ds) for ds in config["datasets"].values()}
    corpora.add(config["evaluation"]["corpus"])
    corpora |= {corpus_images(config, c) for c in config["evaluation"].get("lang_corpora", {}).values()}
    return sorted(corpora)


def text_corpora(config: dict) -> list[str]:
    """Corpora whose caption tables get prepared: those of the data sets, the image corpora and
    the translation corpus."""
    corpora = {ds["corpus"] for ds in config["datasets"].values()} | set(corpora_with_images(config))
    evaluation = config["evaluation"]
    corpora |= set(evaluation.get("lang_corpora", {}).values())
    return sorted(corpora | ({evaluation["translation_corpus"]} if evaluation.get("translation_corpus") else set()))


def text_langs(config: dict) -> list[str]:
    """Languages whose captions are prepared (truecasers and SentencePiece models are trained for
    these): every data set's, the evaluation's translation languages, and in the demo world the
    translation portion's French and Czech."""
    langs = {d["lang"] for d in config["datasets"].values()}
    langs.update(config["evaluation"].get("translation_langs") or [])
    if (config.get("data") or {}).get("source") == "world":
        langs.update(("fr", "cs"))
    return sorted(langs)


def tokenizer_errors(config: dict) -> list[str]:
    """Every prepared language has a tokenizer (``text.tokenizers``, pseudopairs.data.tokenizers):
    Moses for the languages it has rules for, else the config's entry, each entry valid."""
    from pseudopairs.data.tokenizers import tokenizer_of   # the text section's part
    from pseudopairs.core.settings import SettingsError

    text = config.get("text")
    if not isinstance(text, dict) or "datasets" not in config or "evaluation" not in config:
        return []
    errors = []
    for lang in text_langs(config):
        try:
            if tokenizer_of(text, lang) is not None:
                continue
        except SettingsError as err:
            key, _, why = str(err).partition(": ")
            errors.append(f"config key '{key}': {why}")
            continue
        users = sorted(name for name, ds in config["datasets"].items() if ds.get("lang") == lang)
        where = f"data set(s) {', '.join(users)}" if users else "evaluation.translation_langs"
        errors.append(f"config key 'text.tokenizers.{lang}': language {lang!r} ({where}) has no "
                      f"tokenizer: Moses has no rules for it. Set text.tokenizers.{lang} to icu (ICU word "
                      "boundaries) or sentencepiece (a model trained on its training captions), or moses "
                      "to use Moses with English rules")
    return errors


def check(config: dict) -> list[str]:
    """The ``corpora`` section (:func:`pseudopairs.data.corpora.check`) and the ``datasets``
    section: each data set is one kind; a selection's ``select``, a pseudopair
    data set's set, corpus and language, a translation's source agree with what they name."""
    from pseudopairs.data.corpora import check as corpora_errors

    datasets, pseudopairs = config.get("datasets", {}), config.get("pseudopairs", {})
    messages = corpora_errors(config) + tokenizer_errors(config)
    for name, ds in datasets.items():
        where = f"config key 'datasets.{name}"
        if sum(key in ds for key in ("pseudopairs", "translation", "select", "augment")) > 1:
            messages.append(f"{where}': a data set is one of pseudopairs, a translation, a "
                            "selection or an augmentation, not several")
        if "select" in ds:
            from pseudopairs.data.select import check_select   # pandas: only when a set selects

            try:
                check_select(ds["select"], where=f"datasets.{name}.select")
            except ValueError as err:
                key, _, why = str(err).partition(": ")
                messages.append(f"config key '{key}': {why}")
        if "min_percentile" in ds and "pseudopairs" not in ds:
            messages.append(f"{where}.min_percentile': only pseudopair data sets are filtered")
        if "pseudopairs" in ds:
            messages += _pseudopair_dataset_errors(datasets, pseudopairs, ds, where)
        if "translation" in ds:
            messages += _translation_dataset_errors(datasets, ds, where)
    return messages


def _pseudopair_dataset_errors(datasets: dict, pseudopairs: dict, ds: dict, where: str) -> list[str]:
    pp = pseudopairs.get(ds["pseudopairs"])
    if pp is None:
        return [f"{where}.pseudopairs': unknown pseudopair set {ds['pseudopairs']!r}"]
    if pp.get("queries") in datasets and pp.get("database") in datasets:
        queries, database = datasets[pp["queries"]], datasets[pp["database"]]
        if (ds["corpus"], ds["lang"]) != (queries["corpus"], database["lang"]):
            return [f"{where}': pseudopair set {ds['pseudopairs']!r} gives {database['lang']!r} "
                    f"captions of {queries['corpus']!r} images, but the data set says "
                    f"corpus {ds['corpus']!r}, lang {ds['lang']!r}"]
    return []


def _translation_dataset_errors(datasets: dict, ds: dict, where: str) -> list[str]:
    source = datasets.get(ds["translation"])
    if source is None:
        return [f"{where}.translation': unknown data set {ds['translation']!r}"]
    if "pseudopairs" in source or "translation" in source:
        return [f"{where}.translation': translate the captions of a corpus, not of "
                f"the synthetic data set {ds['translation']!r}"]
    if source["corpus"] != ds["corpus"] or source["lang"] == ds["lang"]:
        return [f"{where}': a translation of {ds['translation']!r} keeps its corpus "
                f"{source['corpus']!r} and changes its language {source['lang']!r}"]
    return []
