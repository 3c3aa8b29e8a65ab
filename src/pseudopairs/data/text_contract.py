"""The text preparation's part of the data stage's contract: the tokenizer each prepared language
gets (``text.tokenizers``; :mod:`pseudopairs.data.tokenizers`), the model files a preparation job
reads (truecasers, SentencePiece models) and the options naming them, and the training jobs of
those models. Which languages are prepared, and the check that each has a tokenizer, are
:func:`pseudopairs.data.contract.text_langs` and ``tokenizer_errors``."""

from __future__ import annotations

import json

from pseudopairs.core import layout
from pseudopairs.data.contract import text_corpora, text_langs
from pseudopairs.data.tokenizers import TOKENIZERS, tokenizer_arg, tokenizer_of


def truecased(config: dict) -> bool:
    return config["text"]["case"] == "truecase"


def tokenizer(config: dict, lang: str) -> dict | None:
    """``lang``'s tokenizer settings (``{"kind": "moses"}`` for a Moses language), None: none."""
    return tokenizer_of(config["text"], lang)


def sentencepiece_langs(config: dict) -> list[str]:
    """The languages whose tokenizer is trained on the run's text (rule train_sentencepiece)."""
    return [lang for lang in text_langs(config)
            if (tokenizer(config, lang) or {}).get("kind") in _trained_kinds()]


def _trained_kinds() -> set[str]:
    return {name for name in TOKENIZERS.names() if TOKENIZERS.get(name).trained}


def tokenizer_model(config: dict, lang: str) -> list[str]:
    """The trained tokenizer model ``lang``'s preparation reads (none for Moses and ICU)."""
    return [layout.sentencepiece_model(lang)] if lang in sentencepiece_langs(config) else []


def tokenizer_args(config: dict, lang: str) -> list[str]:
    """``--tokenizer LANG=KIND[:MODEL]`` for a language whose tokenizer is not Moses."""
    spec = tokenizer(config, lang)
    if spec is None or spec["kind"] == "moses":
        return []
    model = tokenizer_model(config, lang)
    return ["--tokenizer", tokenizer_arg(lang, spec, model[0] if model else None)]


def model_inputs(config: dict, lang: str) -> list[str]:
    """Every model file the preparation of ``lang`` reads: its truecaser when captions are
    truecased, its trained tokenizer (a translation or CLC job's inputs)."""
    truecaser = [layout.truecase_model(lang)] if truecased(config) else []
    return truecaser + tokenizer_model(config, lang)


def model_args(config: dict, lang: str) -> list[str]:
    """The options naming :func:`model_inputs` and a tokenizer other than Moses."""
    truecaser = ["--truecase-model", f"{lang}={layout.truecase_model(lang)}"] if truecased(config) else []
    return truecaser + tokenizer_args(config, lang)


def prepare_inputs(config: dict) -> list[str]:
    """The model files of every prepared language (rule prepare_captions' inputs)."""
    return [path for lang in text_langs(config) for path in model_inputs(config, lang)]


def prepare_args(config: dict) -> list[str]:
    """prepare-captions' options for every prepared language, as a list."""
    return [arg for lang in text_langs(config) for arg in model_args(config, lang)]


def preparation_key(config: dict) -> str:
    """What the prepared text depends on beyond its input files: the case, then each language's
    tokenizer other than Moses with its settings (``lowercase ja=icu zh={…}``). With Moses for
    every language it is the case alone: a rule's ``case`` param, so the shipped configurations'
    jobs keep their recorded parameters."""
    parts = [config["text"]["case"]]
    for lang in text_langs(config):
        spec = tokenizer(config, lang)
        if spec is not None and spec["kind"] != "moses":
            parts.append(f"{lang}={json.dumps(spec, sort_keys=True, separators=(',', ':'))}")
    return " ".join(parts)


def raw_training_tables(config: dict) -> list[str]:
    """The raw caption tables whose training split the truecasers and SentencePiece models learn
    from (the training split only is read)."""
    return [layout.raw_captions(corpus, "train") for corpus in text_corpora(config)]


def truecaser_training_inputs(config: dict, lang: str) -> dict[str, list[str]]:
    """train_truecaser's inputs: the raw tables and ``lang``'s trained tokenizer."""
    return {"tables": raw_training_tables(config), "tokenizer": tokenizer_model(config, lang)}


def sentencepiece_settings(config: dict, lang: str) -> dict:
    """train_sentencepiece's settings for ``lang`` (its text.tokenizers entry, defaults filled)."""
    spec = tokenizer(config, lang)
    if spec is None or spec["kind"] not in _trained_kinds():
        raise ValueError(f"config key 'text.tokenizers.{lang}': no trained tokenizer for {lang!r}")
    return spec
