"""The SMALR steps' inputs as functions of the config (rules ``fasttext`` and ``pretrain_hem``,
workflow/rules/smalr.smk): which experiments need them (``model.text_encoder: hem``), the text
each trains on (the run's own training captions, as its vocabulary would be built), and their
settings (the config's ``fasttext`` / ``hem`` sections, an experiment's ``hem`` entries over
them). With ``fasttext.source: download`` the ``fasttext`` job filters the published vectors
(rule ``download_fasttext``, one file per language) to the words of the run's captions instead
of training; its output path, which ``pretrain_hem`` reads, is the same."""

from __future__ import annotations

from typing import Any

from pseudopairs.data.experiments import experiment
from pseudopairs.model import contract as model_contract
from pseudopairs.core import layout
from pseudopairs.smalr.settings import FASTTEXT_TRAINING, HEM_INIT_FORMAT, FastTextSettings


def uses_hem(config: dict, name: str) -> bool:
    return model_contract.uses_hem(config, name)


def hem_runs(config: dict) -> list[tuple[str, str]]:
    """(experiment, language) of every experiment with the hem text encoder."""
    return [(name, lang) for name in config["experiments"] if uses_hem(config, name)
            for lang in model_contract.training_langs(config, name)]


def sentence_refs(config: dict, name: str, seed: int) -> list[dict[str, str]]:
    """The experiment's c2i caption tables (one language each, with the features file that
    names their images), each once."""
    refs, seen = [], set()
    for ref in model_contract.training_spec(config, name, seed)["c2i"]:
        key = (ref["captions"], ref["lang"])
        if key not in seen:
            seen.add(key)
            refs.append({"captions": ref["captions"], "features": ref["features"], "lang": ref["lang"]})
    return refs


def fasttext_settings(config: dict) -> FastTextSettings:
    return FastTextSettings.from_dict(config.get("fasttext"))


def downloads_fasttext(config: dict) -> bool:
    """``fasttext.source: download``: the published vectors, not vectors trained per run."""
    return fasttext_settings(config).source == "download"


def published_vectors(config: dict, lang: str) -> str:
    """Where rule ``download_fasttext`` puts ``lang``'s published vectors (gzipped or not, as
    the URL's file is)."""
    url = fasttext_settings(config).download_url(lang)
    return layout.fasttext_download(lang, gzipped=url.endswith(".gz"))


def fasttext_download(config: dict, lang: str) -> dict[str, Any]:
    """Rule ``download_fasttext``'s URL and SHA-256 for ``lang`` (None: the recorded one)."""
    settings = fasttext_settings(config)
    return {"url": settings.download_url(lang), "sha256": settings.sha256.get(lang),
            "output": published_vectors(config, lang)}


def fasttext_downloads(config: dict) -> list[str]:
    """The published vectors of every language a hem experiment trains on (``fetch``); none when
    the vectors are trained."""
    if not downloads_fasttext(config):
        return []
    return [published_vectors(config, lang) for lang in sorted({lang for _, lang in hem_runs(config)})]


def fasttext_spec(config: dict, name: str, seed: int, lang: str) -> dict[str, Any]:
    """The ``fasttext`` job: the run's ``lang`` training captions, seed and training settings;
    with ``fasttext.source: download`` also the published vectors it filters to their words."""
    captions = [r["captions"] for r in sentence_refs(config, name, seed) if r["lang"] == lang]
    if not captions:
        raise ValueError(f"experiment {name}: no {lang!r} training captions for FastText")
    section = config.get("fasttext", {})
    spec = {"experiment": name, "seed": int(seed), "lang": lang, "captions": captions,
            "settings": {k: section[k] for k in FASTTEXT_TRAINING if k in section}}
    if downloads_fasttext(config):
        spec["published"] = published_vectors(config, lang)
    return spec


def fasttext_inputs(config: dict, name: str, seed: int, lang: str) -> list[str]:
    spec = fasttext_spec(config, name, seed, lang)
    return sorted(set(spec["captions"]) | ({spec["published"]} if "published" in spec else set()))


def hem_settings(config: dict, name: str) -> dict[str, Any]:
    return {**config.get("hem", {}), **experiment(config, name).get("hem", {})}


def hem_spec(config: dict, name: str, seed: int) -> dict[str, Any]:
    """The pretrain_hem job's spec; ``format`` (the output's, :data:`HEM_INIT_FORMAT`) is a tracked
    parameter, so a results folder written in an older format reruns the job instead of failing
    where training reads it."""
    return {"experiment": name, "seed": int(seed), "format": HEM_INIT_FORMAT,
            "sentences": sentence_refs(config, name, seed),
            "vectors": {lang: layout.fasttext_vectors(name, seed, lang)
                        for lang in model_contract.training_langs(config, name)},
            "settings": hem_settings(config, name)}


def hem_inputs(config: dict, name: str, seed: int) -> list[str]:
    spec = hem_spec(config, name, seed)
    return sorted({r["captions"] for r in spec["sentences"]} | set(spec["vectors"].values()))
