"""The SMALR steps' inputs as functions of the config (rules ``fasttext`` and ``pretrain_hem``,
workflow/rules/smalr.smk): which experiments need them (``model.text_encoder: hem``), the text
each trains on (the run's own training captions, as its vocabulary would be built), and their
settings (the config's ``fasttext`` / ``hem`` sections, an experiment's ``hem`` entries over
them)."""

from __future__ import annotations

from typing import Any

from pseudopairs.experiments import experiment
from pseudopairs.model import contract as model_contract
from pseudopairs import layout


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


def fasttext_spec(config: dict, name: str, seed: int, lang: str) -> dict[str, Any]:
    captions = [r["captions"] for r in sentence_refs(config, name, seed) if r["lang"] == lang]
    if not captions:
        raise ValueError(f"experiment {name}: no {lang!r} training captions for FastText")
    return {"experiment": name, "seed": int(seed), "lang": lang, "captions": captions,
            "settings": dict(config.get("fasttext", {}))}


def fasttext_inputs(config: dict, name: str, seed: int, lang: str) -> list[str]:
    return sorted(set(fasttext_spec(config, name, seed, lang)["captions"]))


def hem_settings(config: dict, name: str) -> dict[str, Any]:
    return {**config.get("hem", {}), **experiment(config, name).get("hem", {})}


def hem_spec(config: dict, name: str, seed: int) -> dict[str, Any]:
    return {"experiment": name, "seed": int(seed), "sentences": sentence_refs(config, name, seed),
            "vectors": {lang: layout.fasttext_vectors(name, seed, lang)
                        for lang in model_contract.training_langs(config, name)},
            "settings": hem_settings(config, name)}


def hem_inputs(config: dict, name: str, seed: int) -> list[str]:
    spec = hem_spec(config, name, seed)
    return sorted({r["captions"] for r in spec["sentences"]} | set(spec["vectors"].values()))
