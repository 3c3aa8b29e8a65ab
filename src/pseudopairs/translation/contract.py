"""The translation stage's contract: which data sets are machine translations, of what
(:func:`translation_source`) and with which model (:func:`dataset_model`), where each model comes
from and goes (the default ``translation.model``: trained or downloaded, converted from
OpenNMT-py; any ``translation.models.NAME``: a local path or a checksummed download, converted by
``convert-mt --spec``), the ``translate-captions`` job's settings, and :func:`check` of the
``translation`` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pseudopairs.core import layout
from pseudopairs.data.contract import dataset, dataset_files, dataset_kind
from pseudopairs.data.text_contract import model_args, model_inputs
from pseudopairs.translation import models as M
from pseudopairs.translation.settings import QUANTIZATIONS, TranslationTrainSettings, TranslateSection

#: The key of a translated data set naming its model (``translation.models.NAME``); without it,
#: the data set is translated by ``translation.model``.
MODEL_KEY = "translation_model"


def translation_datasets(config: dict) -> list[str]:
    return [name for name in config["datasets"] if dataset_kind(config, name) == "translation"]


def translation_source(config: dict, name: str) -> dict[str, str]:
    """The caption table a translated data set is made from (its source data set, training split)."""
    if dataset_kind(config, name) != "translation":
        raise ValueError(f"data set {name!r} is not a translated data set")
    return dataset_files(config, dataset(config, name)["translation"])


def translate_section(config: dict) -> TranslateSection:
    """The ``translation.translate`` section, typed: the translate jobs' threads and device."""
    return TranslateSection.from_dict(config["translation"]["translate"])


def translation_train_settings(config: dict) -> TranslationTrainSettings:
    """The ``translation.train`` section, typed (the train_mt jobs' threads)."""
    return TranslationTrainSettings.from_dict(config["translation"]["train"])


def target_text_inputs(config: dict, name: str) -> list[str]:
    """The model files of the text preparation of translated data set ``name``'s language
    (its truecaser, a trained tokenizer): the translate job's inputs."""
    return model_inputs(config, dataset(config, name)["lang"])


def target_text_args(config: dict, name: str) -> list[str]:
    """translate-captions' options naming :func:`target_text_inputs`, as a list."""
    return model_args(config, dataset(config, name)["lang"])


def translate_settings(config: dict) -> dict[str, Any]:
    """``translation.translate`` without the job keys (its CPU threads are the rule's threads)."""
    settings = config["translation"]["translate"]
    return {k: v for k, v in settings.items() if k not in TranslateSection.JOB_KEYS}


# ----------------------------------------------------------------------------------------------
# The default model (translation.model)


def has_default_model(config: dict) -> bool:
    return "model" in config.get("translation", {})


def default_model_downloaded(config: dict) -> bool:
    return config.get("translation", {}).get("model", {}).get("source") == "download"


def parallel_text(config: dict) -> dict[str, str]:
    """train_mt's inputs: the parallel text of ``translation.model.parallel_text``, else the demo
    world's."""
    model = config["translation"]["model"]
    src, tgt = model["source_lang"], model["target_lang"]
    files = model.get("parallel_text") or {
        role: {lang: layout.world_parallel_text(split, lang) for lang in (src, tgt)}
        for role, split in (("train", "train"), ("valid", "val"))
    }
    return {
        "source_train": files["train"][src],
        "target_train": files["train"][tgt],
        "source_valid": files["valid"][src],
        "target_valid": files["valid"][tgt],
    }


def default_model_files(config: dict) -> dict[str, str]:
    """Checkpoint and SentencePiece model inside the model directory convert_mt reads."""
    model = config["translation"]["model"]
    if default_model_downloaded(config):
        return {"checkpoint": model["checkpoint"], "tokenizer": model["tokenizer"]}
    return {"checkpoint": "model.pt", "tokenizer": "sentencepiece.model"}


def default_checkpoint_dir(config: dict) -> str:
    """The model directory convert_mt reads: the extracted download, or train_mt's output."""
    if default_model_downloaded(config):
        return layout.translation_downloaded_model()
    return layout.translation_trained_model()


# ----------------------------------------------------------------------------------------------
# Named models (translation.models)


def named_models(config: dict) -> list[str]:
    return list(M.declarations(config))


def downloaded_models(config: dict) -> list[str]:
    """The named models that come from a ``url``."""
    return [name for name, decl in M.declarations(config).items() if decl.get("url")]


def archive_suffix(url: str) -> str:
    from pseudopairs.data.download import ARCHIVE_SUFFIXES

    path = url.lower().split("?")[0]
    return next(s for s in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True) if path.endswith(s))


def model_archive(config: dict, name: str) -> str:
    """Where the download of model ``name`` is stored."""
    return layout.translation_named_archive(name, archive_suffix(M.declarations(config)[name]["url"]))


def model_download(config: dict, name: str) -> dict[str, Any]:
    """The ``download`` job of model ``name``: its url, sha256 and the archive it writes."""
    decl = M.declarations(config)[name]
    return {"url": decl["url"], "sha256": decl.get("sha256"), "archive": model_archive(config, name)}


def model_location(config: dict, name: str) -> str:
    """Model ``name``'s folder (or file) as ``convert-mt --spec`` reads it: its local ``path``
    or its extracted download."""
    decl = M.declarations(config)[name]
    return layout.translation_named_extracted(name) if decl.get("url") else decl["path"]


def conversion_input(config: dict, name: str) -> str:
    """What the conversion of model ``name`` depends on: a local folder's manifest
    (:func:`refresh_model_manifests`; so a weight file rewritten in place reconverts and a moved
    folder reconverts nothing), or the extracted download (or the missing path, which Snakemake
    then names)."""
    decl = M.declarations(config)[name]
    if decl.get("url") or not Path(decl["path"]).exists():
        return model_location(config, name)
    return layout.translation_model_source(name)


def model_files(path: Path) -> tuple[Path, list[str]]:
    """(root, names): the files of a model folder (recursively, hidden ones left out), relative to
    it, sorted; a model given as one file is that file in its folder."""
    if path.is_file():
        return path.parent, [path.name]
    names = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
    return path, names


def refresh_model_manifests(config: dict) -> list[str]:
    """Write (or bring up to date) the manifest of every declared local model that is there,
    before the DAG is built: rewritten only when a file's content changed (hashing only files
    whose size or time changed since: the stamps). Returns the manifests rewritten."""
    from pseudopairs.data.manifest import file_manifest, write_manifest

    rewritten = []
    for name, decl in M.declarations(config).items():
        path = None if decl.get("url") else Path(decl["path"])
        if path is None or not path.exists():
            continue
        root, names = model_files(path)
        output = layout.translation_model_source(name)
        if write_manifest(output, *file_manifest(names, root, previous=output)):
            rewritten.append(output)
    return rewritten


def convert_spec(config: dict, name: str) -> dict[str, Any]:
    return M.convert_spec(config, name, model_path=model_location(config, name))


def conversion_settings(config: dict, name: str) -> dict[str, Any]:
    """What a conversion depends on besides the model's files: its spec without the folder (a
    moved folder reconverts nothing)."""
    return {k: v for k, v in convert_spec(config, name).items() if k != "path"}


def fetch_inputs(config: dict) -> list[str]:
    """Every downloaded translation model, for the `fetch` target (none when all are local or
    trained)."""
    out = [default_checkpoint_dir(config)] if default_model_downloaded(config) else []
    return out + [layout.translation_named_extracted(name) for name in downloaded_models(config)]


# ----------------------------------------------------------------------------------------------
# Translated data sets


def dataset_model(config: dict, name: str) -> str | None:
    """The named model translating data set ``name`` (``None``: ``translation.model``)."""
    return dataset(config, name).get(MODEL_KEY)


def dataset_model_dir(config: dict, name: str) -> str:
    """The CTranslate2 model directory the ``translate`` job of data set ``name`` loads."""
    model = dataset_model(config, name)
    return layout.translation_model() if model is None else layout.translation_named_model(model)


def check(config: dict) -> list[str]:
    """The ``translation`` section: present when a data set is a translation; every translated
    data set's model (``translation_model``, else ``translation.model``) declared and translating
    its languages; a named model's declaration sound (:class:`~.models.ModelDeclaration`); a
    download's files named; the ``train`` and ``translate`` settings known."""
    datasets = config.get("datasets", {})
    translated = [name for name, ds in datasets.items() if "translation" in ds]
    messages = [f"config key 'datasets.{name}.{MODEL_KEY}': only a translated data set (translation: ...) "
                "names a translation model" for name, ds in datasets.items()
                if MODEL_KEY in ds and "translation" not in ds]
    if "translation" not in config:
        return messages + ([f"config key 'translation': required by the translated data set(s) {translated}"]
                           if translated else [])
    section = config["translation"]
    declared = M.declarations(config)
    bad_declarations = M.declaration_errors(config)
    messages += bad_declarations
    for name in translated:
        source = datasets.get(datasets[name]["translation"])
        if source is None:
            continue
        messages += _dataset_model_errors(config, name, source["lang"], datasets[name]["lang"],
                                          declared, sound=not bad_declarations)
    model = section.get("model")
    clc_tables = sorted({t for t, spec in config.get("tables", {}).items()
                         for row in spec.get("rows", []) if row.get("clc")})
    if model is None and clc_tables:
        messages.append(f"config key 'translation.model': required by the CLC rows of {clc_tables} (their "
                        "translation models are trained and converted like it)")
    # the default model is checked where something uses it (a config layered over config.yaml
    # keeps its demo model even when every data set names another)
    default_used = clc_tables or any(MODEL_KEY not in datasets[name] for name in translated)
    if model is not None and default_used:
        if model["quantization"] not in QUANTIZATIONS:
            messages.append(f"config key 'translation.model.quantization': {model['quantization']!r} is not "
                            f"one of {list(QUANTIZATIONS)}")
        messages += _model_source_errors(config, model)
    for settings, values in ((TranslationTrainSettings, section["train"]), (TranslateSection, section["translate"])):
        try:
            checked = settings.from_dict(values)
        except (ValueError, TypeError) as err:
            key, _, why = str(err).partition(": ")
            messages.append(f"config key '{key}': {why}")
            continue
        problem = checked.warmup_problem() if isinstance(checked, TranslationTrainSettings) else None
        if problem:
            key, _, why = problem.partition(": ")
            messages.append(f"config key '{key}': {why}")
    return messages


def _dataset_model_errors(config: dict, name: str, source: str, target: str, declared: dict, *,
                          sound: bool) -> list[str]:
    chosen = config["datasets"][name].get(MODEL_KEY)
    if chosen is None:
        model = config["translation"].get("model")
        if model is None:
            return [f"config key 'datasets.{name}': no translation model: name one of translation.models "
                    f"in '{MODEL_KEY}' (declared: {sorted(declared)}) or declare translation.model"]
        if (source, target) != (model["source_lang"], model["target_lang"]):
            return [f"config key 'datasets.{name}': translates {source!r} -> {target!r}, but the model in "
                    f"'translation.model' goes {model['source_lang']!r} -> {model['target_lang']!r}"
                    + (f"; name another in '{MODEL_KEY}'" if declared else "")]
        return []
    if chosen not in declared:
        return [f"config key 'datasets.{name}.{MODEL_KEY}': unknown model {chosen!r} "
                f"(translation.models declares {sorted(declared)})"]
    if not sound:
        return []
    decl = M.declaration(config, chosen)
    if decl.translates(source, target):
        return []
    if decl.languages is not None:
        missing = [lang for lang in (source, target) if lang not in decl.languages]
        return [f"config key '{M.model_key(chosen)}.languages': no code for {missing[0]!r}, which data set "
                f"{name} translates {source} -> {target} into or from"]
    return [f"config key 'datasets.{name}.{MODEL_KEY}': {chosen} translates {decl.directions_text()}, "
            f"not {source} -> {target}"]


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
