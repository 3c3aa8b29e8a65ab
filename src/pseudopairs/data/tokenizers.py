"""Text preparation for any language: which tokenizer each language's captions get (config
``text.tokenizers``), the tokenizers Moses lacks, and the ``text`` settings section.

Moses (:mod:`pseudopairs.data.text`, the Multi30K recipe, unchanged) tokenizes the languages it
has rules for: those with a Moses non-breaking-prefix file (:data:`MOSES_LANGS`), written with
spaces between words. For other languages -- Japanese, Chinese, Thai, Korean, … -- a tokenizer
is chosen per language in the config; a language with none is refused when the config is read,
naming ``text.tokenizers.<lang>`` (:func:`pseudopairs.data.text_contract.check`). The kinds are
registry entries (:data:`TOKENIZERS`):

- ``moses``: the Moses recipe (the default of :data:`MOSES_LANGS`; named explicitly for another
  space-separated language it runs with the English non-breaking prefixes, as tokenizer.perl does);
- ``icu``: ICU's word break iterator (Unicode UAX #29 plus ICU's dictionaries for Chinese,
  Japanese, Thai, Lao, Khmer and Burmese) through ``icu4py``, on the NFC-normalised caption;
  whitespace segments are dropped, every other segment (punctuation too) is a token;
- ``sentencepiece``: a SentencePiece model trained on the run's own training captions of that
  language (the training split only, like the truecaser: rule ``train_sentencepiece``); a
  caption's tokens are its pieces (``▁`` marks a word start), SentencePiece's own NFKC
  normalisation included.

Case: with ``text.case: lowercase`` a caption is lowercased first (perl ``lc``, as for Moses;
for SentencePiece the training text too); with ``truecase`` the tokens are truecased by a Moses
truecaser trained on that tokenizer's tokens of the training split.
"""

from __future__ import annotations

import argparse
import functools
import unicodedata
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterable

from pseudopairs.core.registry import Registry
from pseudopairs.core.settings import Settings, SettingsError, setting

CASES = ("lowercase", "truecase")

#: The languages with a Moses non-breaking-prefix file (sacremoses 0.2.0's, two-letter codes)
#: whose words are separated by spaces: Moses' rules tokenize them. Not zh (nor yue): Moses does
#: not segment Chinese. tests/test_tokenizers.py checks this against sacremoses.
MOSES_LANGS = frozenset((
    "as", "bn", "ca", "cs", "de", "el", "en", "es", "et", "fi", "fr", "ga", "gu", "hi", "hu", "is",
    "it", "kn", "lt", "lv", "ml", "mr", "nl", "or", "pa", "pl", "pt", "ro", "ru", "sk", "sl", "sv",
    "ta", "te",
))


# --------------------------------------------------------------------------------------------
# Settings of a language's tokenizer, and the registry of kinds


@dataclass(frozen=True)
class TokenizerSettings(Settings):
    """``text.tokenizers.<lang>`` as an object: ``kind`` (a registered tokenizer) and, for a
    trained one (``sentencepiece``), its training settings. A plain string is the kind alone."""

    SECTION = "text.tokenizers"

    kind: str = setting(kind=str, doc="a registered tokenizer: moses | icu | sentencepiece")
    vocab_size: int = setting(8000, kind=int, low=8,
                              doc="sentencepiece: pieces (an upper bound: fewer where the text has fewer)")
    model_type: str = setting("unigram", kind=str, choices=("unigram", "bpe", "char", "word"),
                              doc="sentencepiece: SentencePiece's model type")
    character_coverage: float = setting(0.9995, kind=float, low=0, high=1, low_open=True,
                                        doc="sentencepiece: share of characters the pieces cover (0.9995 for CJK)")

    def check(self) -> None:
        if self.kind not in TOKENIZERS:
            raise self.bad("kind", f"unknown tokenizer; known: {', '.join(TOKENIZERS.names())}")


@dataclass(frozen=True)
class Tokenizer:
    """A registered tokenizer kind: the :class:`TokenizerSettings` it takes beyond ``kind``,
    whether it is trained on the run's text (then rule train_sentencepiece-like jobs plan it), and
    ``load(lang, model_path) -> tokenize(text) -> str`` (None for Moses, which
    :mod:`pseudopairs.data.text` runs itself)."""

    name: str
    params: tuple[str, ...]
    trained: bool
    load: Callable[[str, Path | None], Callable[[str], str] | None]


TOKENIZERS: Registry[Tokenizer] = Registry("tokenizer", modules=("pseudopairs.data.tokenizers",))


def tokenizer_settings(lang: str, value: Any) -> dict:
    """``text.tokenizers.<lang>``'s value (a kind name, or an object with ``kind`` and that kind's
    settings) as a dict: the kind, then its settings with their defaults. A
    :class:`SettingsError` naming the key otherwise."""
    key = f"text.tokenizers.{lang}"
    values = {"kind": value} if isinstance(value, str) else value
    if not isinstance(values, dict) or not isinstance(values.get("kind"), str):
        raise SettingsError(f"{key}: must be a tokenizer name or an object with a kind, got {value!r}")
    if values["kind"] not in TOKENIZERS:
        raise SettingsError(f"{key}: unknown tokenizer {values['kind']!r}; known: {', '.join(TOKENIZERS.names())}")
    entry = TOKENIZERS.get(values["kind"])
    extra = sorted(set(values) - {"kind"} - set(entry.params))
    if extra and not set(extra) - {f.name for f in fields(TokenizerSettings)}:
        raise SettingsError(f"{key}: {entry.name} takes no {', '.join(extra)}")
    try:
        settings = TokenizerSettings.from_dict(values)
    except SettingsError as err:
        raise SettingsError(str(err).replace("text.tokenizers.", f"{key}.").replace(
            "text.tokenizers:", f"{key}:")) from None
    return {"kind": entry.name, **{name: getattr(settings, name) for name in entry.params}}


def tokenizer_of(text: dict, lang: str) -> dict | None:
    """The tokenizer ``lang`` gets from the ``text`` section (:func:`tokenizer_settings`), Moses'
    for :data:`MOSES_LANGS` without an entry, None where there is none."""
    value = (text.get("tokenizers") or {}).get(lang)
    if value is None:
        return {"kind": "moses"} if lang in MOSES_LANGS else None
    return tokenizer_settings(lang, value)


# --------------------------------------------------------------------------------------------
# The tokenizers


def _moses(lang: str, model: Path | None):
    return None


@functools.lru_cache(maxsize=None)
def _icu_word_breaker():
    try:
        from icu4py.breakers import WordBreaker
    except ImportError as err:  # pragma: no cover - icu4py is a dependency
        raise ImportError("text.tokenizers: icu needs the icu4py package (pip install icu4py)") from err
    return WordBreaker


def icu_tokens(text: str, lang: str) -> list[str]:
    """The ICU word segments of NFC-normalised ``text`` in ``lang``'s locale, whitespace dropped
    (NFC, not NFKC: NFKC splits Thai and Lao SARA AM, which breaks their dictionaries)."""
    breaker = _icu_word_breaker()
    normalized = unicodedata.normalize("NFC", text)
    if not normalized.strip():
        return []
    return [segment for segment in breaker(normalized, lang) if segment.strip()]


def _icu(lang: str, model: Path | None):
    return lambda text: " ".join(icu_tokens(text, lang))


def load_sentencepiece(path: Path):
    """A SentencePiece processor of the model file ``path`` (an error naming it if absent)."""
    import sentencepiece as spm

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SentencePiece model not found: {path} (rule train_sentencepiece writes it)")
    processor = spm.SentencePieceProcessor()
    try:
        processor.Load(str(path))
    except (OSError, RuntimeError) as err:
        raise ValueError(f"{path}: not a SentencePiece model ({err})") from None
    return processor


def _sentencepiece(lang: str, model: Path | None):
    if model is None:
        raise ValueError(f"text.tokenizers.{lang}: sentencepiece needs its trained model "
                         f"(--tokenizer {lang}=sentencepiece:PATH)")
    processor = load_sentencepiece(model)
    return lambda text: " ".join(processor.Encode(text, out_type=str))


SENTENCEPIECE_PARAMS = ("vocab_size", "model_type", "character_coverage")
TOKENIZERS.register("moses", Tokenizer("moses", (), trained=False, load=_moses))
TOKENIZERS.register("icu", Tokenizer("icu", (), trained=False, load=_icu))
TOKENIZERS.register("sentencepiece", Tokenizer("sentencepiece", SENTENCEPIECE_PARAMS, trained=True,
                                               load=_sentencepiece))


def train_sentencepiece(texts: Iterable[str], *, lang: str, settings: dict, output: str | Path) -> int:
    """Train a SentencePiece model on ``texts`` (the language's training captions, already
    lowercased where the captions are) and write it to ``output`` atomically; returns its
    number of pieces. Deterministic: every sentence, in order, one thread."""
    import io

    import sentencepiece as spm

    from pseudopairs.core.io import atomic_path

    sentences = [t for t in texts if t.strip()]
    if not sentences:
        raise ValueError(f"no non-empty training text to train a SentencePiece model for {lang!r}")
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=settings["vocab_size"],
            model_type=settings["model_type"], character_coverage=settings["character_coverage"],
            hard_vocab_limit=False, num_threads=1, input_sentence_size=0,
            shuffle_input_sentence=False, bos_id=-1, eos_id=-1, minloglevel=2)
    except RuntimeError as err:
        raise ValueError(f"text.tokenizers.{lang}: SentencePiece training failed on {len(sentences)} "
                         f"captions: {err}") from None
    with atomic_path(output) as tmp:
        Path(tmp).write_bytes(model.getvalue())
    return load_sentencepiece(output).GetPieceSize()


# --------------------------------------------------------------------------------------------
# The command line's form: --tokenizer LANG=moses|icu|sentencepiece:PATH


def tokenizer_arg(lang: str, spec: dict, model: str | None = None) -> str:
    """``LANG=KIND`` or ``LANG=sentencepiece:MODEL`` for the steps' ``--tokenizer``."""
    return f"{lang}={spec['kind']}" + (f":{model}" if model else "")


def parse_tokenizers(specs: Iterable[str] | None) -> dict[str, tuple[str, Path | None]]:
    """``["ja=icu", "zh=sentencepiece:m.model"]`` -> ``{"ja": ("icu", None), "zh":
    ("sentencepiece", Path("m.model"))}``; a malformed or repeated one is an error."""
    out: dict[str, tuple[str, Path | None]] = {}
    for spec in specs or []:
        lang, sep, rest = spec.partition("=")
        kind, _, model = rest.partition(":")
        if not sep or not lang or not kind:
            raise ValueError(f"--tokenizer expects LANG=KIND or LANG=sentencepiece:MODEL, got {spec!r}")
        if lang in out:
            raise ValueError(f"--tokenizer given twice for language {lang!r}")
        entry = TOKENIZERS.get(kind)
        if entry.trained and not model:
            raise ValueError(f"--tokenizer {spec}: {kind} needs its model (LANG={kind}:PATH)")
        if model and not entry.trained:
            raise ValueError(f"--tokenizer {spec}: {kind} takes no model")
        out[lang] = (kind, Path(model) if model else None)
    return out


def load_tokenizers(specs: dict[str, tuple[str, Path | None]]) -> dict[str, Callable[[str], str] | None]:
    """Each language's tokenize function (None: Moses) from :func:`parse_tokenizers`' result."""
    return {lang: TOKENIZERS.get(kind).load(lang, model) for lang, (kind, model) in specs.items()}


def add_tokenizer_option(p: argparse.ArgumentParser) -> None:
    """``--tokenizer LANG=KIND[:MODEL]`` (repeatable): a language's tokenizer other than Moses."""
    p.add_argument("--tokenizer", action="append", default=[], metavar="LANG=KIND[:MODEL]",
                   help="tokenizer of a language Moses has no rules for: icu, or sentencepiece:MODEL "
                        "(repeat; pseudopairs.data.tokenizers)")
