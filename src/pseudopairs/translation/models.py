"""Named translation models (config ``translation.models``): any model CTranslate2 runs, one
declaration each, chosen per translated data set (``datasets.NAME.translation_model``).

A declaration says where the model is (``path``: a local directory or file; or ``url`` +
``sha256``: an archive fetched by the project's checksummed download and extracted), in which
:data:`FORMATS` it is (an already converted CTranslate2 directory, an OpenNMT-py checkpoint, a
Marian / OPUS-MT model, a Hugging Face Transformers directory), and which languages it
translates: one direction (``source_lang``, ``target_lang``) or several (``languages``: each
language of the pipeline with the model's own code for it: NLLB's ``eng_Latn``, M2M100's ``en``,
a multi-target OPUS-MT model's ``fra``). The model's *family* (:data:`FAMILIES`) fixes how text
becomes its tokens: the SentencePiece model(s) that come with it, plus the special tokens it
expects around them (:func:`language_token`): M2M100 and NLLB begin the source with the source
language's token and are forced to begin the translation with the target's; a multi-target
Marian model reads the target's ``>>fra<<`` before the source; OpenNMT-py models take the bare
pieces. ``convert-mt --spec`` (:mod:`pseudopairs.translation.converters`) turns a declaration
into the model directory every translation job loads.

This module reads declarations only (no CTranslate2, no torch): the config check uses it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pseudopairs.core.settings import Settings, SettingsError, language_hint, setting
from pseudopairs.translation.settings import QUANTIZATIONS

#: Where a model comes from, in the form it is stored in.
FORMATS = {
    "ctranslate2": "a directory CTranslate2 already converted (model.bin, config.json, vocabularies) "
                   "plus its SentencePiece model(s)",
    "opennmt_py": "an OpenNMT-py Transformer checkpoint (.pt) and its SentencePiece model(s); "
                  "converted by CTranslate2's OpenNMTPyConverter",
    "marian": "a Marian / OPUS-MT model directory (.npz, YAML vocabularies, source.spm / target.spm; "
              "decoder.yml names them); converted by CTranslate2's MarianConverter",
    "transformers": "a Hugging Face Transformers directory (MarianMT, M2M100, NLLB: config.json, weights "
                    "and the tokenizer files that come with it); converted by CTranslate2's "
                    "TransformersConverter",
}

#: How text becomes a model's tokens (SentencePiece pieces plus the family's special tokens).
FAMILIES = {
    "plain": "SentencePiece pieces only (OpenNMT-py models, the demo's)",
    "marian": "pieces and </s>; a multi-target model reads the target language's >>code<< first",
    "m2m100": "source: __src__ + pieces + </s>; translation forced to begin with __tgt__",
    "nllb": "source: src_Code + pieces + </s>; translation forced to begin with tgt_Code",
}

#: The families each format can hold (the first is the default when none is declared;
#: ``transformers`` reads its family from the model's config.json).
FORMAT_FAMILIES = {
    "ctranslate2": ("plain", "marian", "m2m100", "nllb"),
    "opennmt_py": ("plain",),
    "marian": ("marian",),
    "transformers": ("marian", "m2m100", "nllb"),
}

#: Families whose source and target languages are tokens of the model (``languages`` required).
MULTILINGUAL_FAMILIES = ("m2m100", "nllb")

#: File names a declaration may set under ``files``, per format (the converter's defaults apply
#: to those left out).
FILE_KEYS = {
    "ctranslate2": ("tokenizer", "source_tokenizer", "target_tokenizer"),
    "opennmt_py": ("checkpoint", "tokenizer", "source_tokenizer", "target_tokenizer"),
    "marian": ("model", "vocab", "source_vocab", "target_vocab", "source_tokenizer", "target_tokenizer"),
    "transformers": ("source_tokenizer", "target_tokenizer"),
}

_LANG = re.compile(r"^[a-z]{2}$")
_CODE = re.compile(r"^[A-Za-z0-9_<>>-]{1,40}$")


def language_token(family: str, code: str) -> str:
    """The model's token for a language ``code`` (as its model card spells it): M2M100
    ``de`` -> ``__de__``, Marian ``fra`` -> ``>>fra<<``, NLLB ``deu_Latn`` as is. A code already
    in token form is kept."""
    if family == "m2m100":
        return code if code.startswith("__") and code.endswith("__") else f"__{code}__"
    if family == "marian":
        return code if code.startswith(">>") and code.endswith("<<") else f">>{code}<<"
    return code


#: A language token of each family, to list what a model knows.
LANGUAGE_TOKEN_PATTERNS = {
    "m2m100": re.compile(r"^__[a-z]{2,3}(_[A-Za-z]+)?__$"),
    "nllb": re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$"),
    "marian": re.compile(r"^>>[A-Za-z_]+<<$"),
}


@dataclass(frozen=True)
class ModelDeclaration(Settings):
    """``translation.models.NAME``: a translation model CTranslate2 runs (``format``), from a
    local ``path`` or a checksummed ``url``, for one direction (``source_lang`` ->
    ``target_lang``) or several (``languages``)."""

    SECTION = "translation.models.NAME"

    format: str = setting(kind=str, choices=tuple(FORMATS), doc="how the model is stored: " + "; ".join(
        f"{k}: {v}" for k, v in FORMATS.items()))
    path: str | None = setting(None, kind=str, optional=True,
                               doc="a local model directory (opennmt_py: the checkpoint file or its directory)")
    url: str | None = setting(None, kind=str, optional=True,
                              doc="an archive (.tar.gz, .tgz, .tar, .zip) fetched by `pseudopairs download` "
                                  "and extracted; instead of path")
    sha256: str | None = setting(None, kind=str, optional=True, doc="the archive's SHA-256 (with url)")
    subdir: str | None = setting(None, kind=str, optional=True,
                                 doc="the model's directory inside path or the extracted archive")
    family: str | None = setting(None, kind=str, optional=True, choices=tuple(FAMILIES),
                                 doc="tokenization conventions (" + "; ".join(f"{k}: {v}" for k, v in FAMILIES.items())
                                     + "); default: read from the model (transformers), marian (marian), "
                                       "plain (opennmt_py, ctranslate2)")
    source_lang: str | None = setting(None, kind=str, optional=True,
                                      doc="a one-direction model's source language (with target_lang)")
    target_lang: str | None = setting(None, kind=str, optional=True,
                                      doc="a one-direction model's target language")
    languages: dict | None = setting(None, kind=dict, optional=True,
                                     shape={"propertyNames": {"pattern": "^[a-z]{2}$"},
                                            "additionalProperties": {"type": "string", "minLength": 1}},
                                     doc="a multilingual model: each language of the pipeline -> the model's "
                                         "code for it (NLLB eng_Latn, M2M100 en, multi-target OPUS-MT fra)")
    files: dict = setting({}, kind=dict, shape={"additionalProperties": {"type": "string", "minLength": 1}},
                          doc="file names inside the model directory, per format: " + "; ".join(
                              f"{k}: {', '.join(v)}" for k, v in FILE_KEYS.items()))
    quantization: str = setting("none", kind=str, choices=QUANTIZATIONS,
                                doc="weight type of the converted model (none: as stored)")

    def check(self) -> None:
        if (self.path is None) == (self.url is None):
            raise self.bad("path", "give the model's path or its url (exactly one)")
        if self.sha256 is not None and self.url is None:
            raise self.bad("sha256", "only with url")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise self.bad("sha256", "must be 64 lowercase hexadecimal digits")
        if self.url is not None:
            from pseudopairs.data.download import ARCHIVE_SUFFIXES

            if not self.url.lower().split("?")[0].endswith(ARCHIVE_SUFFIXES):
                raise self.bad("url", f"must name an archive ({', '.join(ARCHIVE_SUFFIXES)})")
        if self.subdir is not None and (self.subdir.startswith("/") or ".." in self.subdir.split("/")):
            raise self.bad("subdir", "must be a relative path inside the model's folder")
        if self.family is not None and self.family not in FORMAT_FAMILIES[self.format]:
            raise self.bad("family", f"a {self.format} model is one of {list(FORMAT_FAMILIES[self.format])}")
        unknown = sorted(set(self.files) - set(FILE_KEYS[self.format]))
        if unknown:
            raise self.bad("files", f"unknown file key(s) {unknown} for format {self.format} "
                                    f"(known: {list(FILE_KEYS[self.format])})")
        for key, name in self.files.items():
            if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
                raise SettingsError(f"{self.SECTION}.files.{key}: must be a file name inside the model's "
                                    f"directory (got {name!r})")
        if self.format == "opennmt_py" and "checkpoint" not in self.files and not (self.path or "").endswith(".pt"):
            raise self.bad("files", "an opennmt_py model names its checkpoint (files.checkpoint) unless "
                                    "path is the .pt file")
        self._check_languages()

    def _check_languages(self) -> None:
        pair = (self.source_lang, self.target_lang)
        if self.languages is None:
            if None in pair:
                raise self.bad("source_lang", "give source_lang and target_lang (a one-direction model) "
                                              "or languages (a multilingual model)")
            if self.family in MULTILINGUAL_FAMILIES:
                raise self.bad("languages", f"a {self.family} model needs the code of each language, "
                                            "e.g. {en: " + ("eng_Latn, de: deu_Latn}" if self.family == "nllb"
                                                            else "en, de: de}"))
        else:
            if pair != (None, None):
                raise self.bad("languages", "either languages (multilingual) or source_lang/target_lang")
            if len(self.languages) < 2:
                raise self.bad("languages", "a multilingual model lists two languages or more")
            if self.family == "plain" or self.format == "opennmt_py":
                raise self.bad("languages", "an OpenNMT-py (plain) model translates one direction: give "
                                            "source_lang and target_lang")
            for lang, code in self.languages.items():
                if not isinstance(code, str) or not _CODE.match(code):
                    raise SettingsError(f"{self.SECTION}.languages.{lang}: {code!r} is not a language code")
        for lang in [*pair, *(self.languages or {})]:
            if lang is not None and not _LANG.match(lang):
                raise SettingsError(f"{self.SECTION}: {lang!r} is not a language of the pipeline "
                                    f"(a two-letter ISO 639-1 code such as fr){language_hint(lang)}")
        if self.languages is None and self.source_lang == self.target_lang:
            raise self.bad("target_lang", "must differ from source_lang")

    def translates(self, source: str, target: str) -> bool:
        if self.languages is not None:
            return source in self.languages and target in self.languages and source != target
        return (self.source_lang, self.target_lang) == (source, target)

    def directions_text(self) -> str:
        if self.languages is not None:
            return f"between {sorted(self.languages)}"
        return f"{self.source_lang} -> {self.target_lang}"


def model_key(name: str) -> str:
    return f"translation.models.{name}"


def declaration_class(name: str) -> type[ModelDeclaration]:
    """:class:`ModelDeclaration` whose errors name ``translation.models.<name>``."""
    return type("ModelDeclaration", (ModelDeclaration,), {"SECTION": model_key(name)})


def declarations(config: dict) -> dict[str, dict]:
    return dict(config.get("translation", {}).get("models") or {})


def declaration(config: dict, name: str) -> ModelDeclaration:
    models = declarations(config)
    if name not in models:
        raise ValueError(f"{name!r} is not a model of translation.models (they are {sorted(models)})")
    return declaration_class(name).from_dict(models[name])


def declaration_errors(config: dict) -> list[str]:
    return [msg for name, values in declarations(config).items()
            for msg in declaration_class(name).config_errors(values)]


def convert_spec(config: dict, name: str, *, model_path: str) -> dict[str, Any]:
    """What ``convert-mt --spec`` reads: the declaration of model ``name`` with ``model_path``,
    the folder (or file) it is in here (the local path, or the extracted archive), and the config
    key its errors name."""
    decl = declaration(config, name)
    path = model_path if decl.subdir is None else f"{model_path.rstrip('/')}/{decl.subdir}"
    return {"name": name, "key": model_key(name), "format": decl.format, "path": path,
            "family": decl.family, "files": dict(decl.files), "quantization": decl.quantization,
            "source_lang": decl.source_lang, "target_lang": decl.target_lang,
            "languages": None if decl.languages is None else dict(decl.languages)}
