"""The ``convert-mt`` step: convert an OpenNMT-py Transformer checkpoint (3.x layout, or a
1.x/2.x one, which is re-saved first) with CTranslate2's OpenNMT-py converter into a
self-contained model directory (``--spec``: a declared model of any format,
:mod:`pseudopairs.translation.converters`), and :class:`ModelDir`, such a directory as the
translation steps read it."""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pseudopairs.core.io import atomic_directory
from pseudopairs.translation.checkpoint import load_checkpoint
from pseudopairs.translation.settings import QUANTIZATIONS
from pseudopairs.translation.text import SentencePieceTokenizer, sha256_file

log = logging.getLogger(__name__)


MODEL_INFO = "pseudopairs_mt.json"


SHARED_TOKENIZER = "sentencepiece.model"


SOURCE_TOKENIZER = "source.sentencepiece.model"


TARGET_TOKENIZER = "target.sentencepiece.model"


def _tokenizer_coverage(tokenizer: SentencePieceTokenizer, vocab: list[str]) -> float:
    from pseudopairs.translation.transformer import SPECIALS

    pieces = set(tokenizer.pieces())
    tokens = [t for t in vocab if t not in SPECIALS]
    return sum(1 for t in tokens if t in pieces) / max(len(tokens), 1)


def _check_tokenizer(tokenizer: SentencePieceTokenizer, vocab: list[str], *, side: str, checkpoint: Path) -> float:
    coverage = _tokenizer_coverage(tokenizer, vocab)
    if coverage < 0.5:
        raise ValueError(f"{tokenizer.path}: does not match the {side} vocabulary of {checkpoint} "
                         f"(only {coverage:.0%} of its tokens are pieces of this SentencePiece model)")
    if coverage < 0.95:
        log.warning("%s: only %.1f%% of the %s vocabulary of %s are pieces of this SentencePiece model",
                    tokenizer.path, 100 * coverage, side, checkpoint)
    return coverage


def convert_checkpoint(checkpoint: str | os.PathLike, output_dir: str | os.PathLike, *,
                       quantization: str = "none", source_tokenizer: str | os.PathLike | None = None,
                       target_tokenizer: str | os.PathLike | None = None,
                       model_id: str | None = None) -> dict:
    """The ``convert-mt`` step: CTranslate2's ``OpenNMTPyConverter`` on ``checkpoint`` (or on its
    3.x re-save, see :func:`load_checkpoint`), into ``output_dir`` atomically (a staging sibling
    renamed into place, replacing an older one). Tokenisers default to ``sentencepiece.model``
    beside the checkpoint. Returns the ``pseudopairs_mt.json`` written into the directory."""
    output_dir = Path(output_dir)
    with atomic_directory(output_dir) as tmp:
        info = convert_opennmt_into(checkpoint, tmp, quantization=quantization, source_tokenizer=source_tokenizer,
                                    target_tokenizer=target_tokenizer, model_id=model_id)
        write_model_info(tmp, info)
    log.info("converted %s (%s) -> %s [%s, quantization %s]", checkpoint, info["source"]["layout"], output_dir,
             info["model_id"], quantization)
    return info


def write_model_info(directory: Path, info: dict) -> None:
    (directory / MODEL_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def convert_opennmt_into(checkpoint: str | os.PathLike, tmp: Path, *, quantization: str = "none",
                         source_tokenizer: str | os.PathLike | None = None,
                         target_tokenizer: str | os.PathLike | None = None,
                         model_id: str | None = None) -> dict:
    """:func:`convert_checkpoint`'s work, into the staging directory ``tmp``: the converted model
    and its tokeniser(s); returns the model description (not yet written)."""
    import ctranslate2
    import torch
    from ctranslate2.converters import OpenNMTPyConverter

    checkpoint = Path(checkpoint)
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"--quantization must be one of {list(QUANTIZATIONS)}, got {quantization!r}")
    default_tok = checkpoint.with_name(SHARED_TOKENIZER)
    source_tokenizer = Path(source_tokenizer) if source_tokenizer else default_tok
    target_tokenizer = Path(target_tokenizer) if target_tokenizer else source_tokenizer
    loaded = load_checkpoint(checkpoint)
    vocab = loaded.checkpoint["vocab"]
    src_tok = SentencePieceTokenizer(source_tokenizer)
    tgt_tok = SentencePieceTokenizer(target_tokenizer)
    coverage = {"source": _check_tokenizer(src_tok, vocab["src"], side="source", checkpoint=checkpoint),
                "target": _check_tokenizer(tgt_tok, vocab["tgt"], side="target", checkpoint=checkpoint)}
    digest = sha256_file(checkpoint)
    if model_id is None:
        model_id = f"{checkpoint.stem}-{digest[:12]}" + ("" if quantization == "none" else f"-{quantization}")
    shared = source_tokenizer.resolve() == target_tokenizer.resolve() or \
        sha256_file(source_tokenizer) == sha256_file(target_tokenizer)

    convert_from = checkpoint
    if loaded.needs_resave:
        # Outside the final directory: the re-saved copy is only the converter's input.
        resaved = Path(tempfile.mkdtemp(prefix=f".{tmp.name}.", suffix=".ckpt", dir=tmp.parent))
        convert_from = resaved / "checkpoint.pt"
        torch.save(loaded.checkpoint, convert_from)
        log.info("%s: %s layout re-saved in the OpenNMT-py 3.x layout for conversion "
                 "(pickled classes replaced by stand-ins: %s)", checkpoint, loaded.layout,
                 ", ".join(loaded.stand_ins) or "none")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            OpenNMTPyConverter(str(convert_from)).convert(
                str(tmp), quantization=None if quantization == "none" else quantization, force=True)
    except (ValueError, KeyError, NotImplementedError, pickle.UnpicklingError) as err:
        raise ValueError(f"{checkpoint}: CTranslate2's OpenNMT-py converter refused it: "
                         f"{type(err).__name__}: {err}") from err
    finally:
        if loaded.needs_resave:
            shutil.rmtree(convert_from.parent, ignore_errors=True)
    tokenizers = copy_tokenizers(tmp, source_tokenizer, target_tokenizer, shared=shared)
    opt = loaded.checkpoint["opt"]
    return {
        "format": 1,
        "model_id": model_id,
        "source": {"checkpoint": str(checkpoint.resolve()), "sha256": digest,
                   "size": checkpoint.stat().st_size, "layout": loaded.layout},
        "quantization": quantization,
        "converter": {"class": "ctranslate2.converters.OpenNMTPyConverter",
                      "ctranslate2": ctranslate2.__version__, "torch": torch.__version__},
        "tokenizer": {"type": "sentencepiece", **tokenizers,
                      "source_sha256": sha256_file(source_tokenizer),
                      "target_sha256": sha256_file(target_tokenizer),
                      "vocabulary_coverage": {k: round(v, 4) for k, v in coverage.items()}},
        "architecture": {key: getattr(opt, key, None) for key in
                         ("encoder_type", "enc_layers", "dec_layers", "heads", "hidden_size",
                          "rnn_size", "transformer_ff")},
        "vocabulary": {"source": len(vocab["src"]), "target": len(vocab["tgt"])},
    }


def copy_tokenizers(directory: Path, source: Path, target: Path, *, shared: bool) -> dict[str, str]:
    """Copy the SentencePiece model(s) into a model directory; their names there."""
    if shared:
        shutil.copyfile(source, directory / SHARED_TOKENIZER)
        return {"source": SHARED_TOKENIZER, "target": SHARED_TOKENIZER}
    shutil.copyfile(source, directory / SOURCE_TOKENIZER)
    shutil.copyfile(target, directory / TARGET_TOKENIZER)
    return {"source": SOURCE_TOKENIZER, "target": TARGET_TOKENIZER}


@dataclass
class ModelDir:
    """A ``convert-mt`` output: CTranslate2 model files, tokenisers and ``pseudopairs_mt.json``.

    The description may also say (models converted from a declaration, ``convert-mt --spec``)
    which languages the model translates (``pair``, or ``languages``: language -> the model's
    token) and the special tokens around the SentencePiece pieces (``tokens``: ``source_prefix``,
    ``source_suffix``, ``target_prefix``, with ``{source}`` / ``{target}`` standing for a
    language's token, and the ``special`` tokens a translation drops). Without them (the
    OpenNMT-py conversions of ``convert-mt --checkpoint``) the pieces go in bare and any
    languages are taken."""

    path: Path
    info: dict
    source_tokenizer: SentencePieceTokenizer
    target_tokenizer: SentencePieceTokenizer

    @property
    def model_id(self) -> str:
        return self.info["model_id"]

    @property
    def tokens(self) -> dict:
        return self.info.get("tokens") or {}

    def _key(self) -> str:
        return self.info.get("config_key") or f"the model {self.model_id} ({self.path})"

    def check_languages(self, source_lang: str, target_lang: str) -> None:
        """That the model translates ``source_lang`` -> ``target_lang``; else an error naming the
        config key that declares it."""
        languages, pair = self.info.get("languages"), self.info.get("pair")
        key = self._key()
        if languages is not None:
            for lang in (source_lang, target_lang):
                if lang not in languages:
                    raise ValueError(f"{key}: the model has no code for language {lang!r} (it is declared "
                                     f"for {sorted(languages)}; add it to {key}.languages)")
            if source_lang == target_lang:
                raise ValueError(f"{key}: source and target language are both {source_lang!r}")
        elif pair is not None and tuple(pair) != (source_lang, target_lang):
            raise ValueError(f"{key}: the model translates {pair[0]} -> {pair[1]}, not "
                             f"{source_lang} -> {target_lang}")

    def _fill(self, template: list[str], source_lang: str | None, target_lang: str | None) -> list[str]:
        languages = self.info.get("languages") or {}
        out = []
        for token in template:
            if token in ("{source}", "{target}"):
                lang = source_lang if token == "{source}" else target_lang
                if lang not in languages:
                    raise ValueError(f"{self._key()}: the model has no code for language {lang!r}")
                out.append(languages[lang])
            else:
                out.append(token)
        return out

    def source_affixes(self, source_lang: str | None = None,
                       target_lang: str | None = None) -> tuple[list[str], list[str]]:
        """The tokens before and after a sentence's pieces."""
        tokens = self.tokens
        return (self._fill(tokens.get("source_prefix", []), source_lang, target_lang),
                self._fill(tokens.get("source_suffix", []), source_lang, target_lang))

    def target_prefix(self, source_lang: str | None = None, target_lang: str | None = None) -> list[str]:
        """The tokens the translation is forced to begin with (NLLB's and M2M100's target language)."""
        return self._fill(self.tokens.get("target_prefix", []), source_lang, target_lang)

    def decode(self, outputs: list[list[str]], *, prefix: list[str]) -> list[str]:
        """Translations' tokens to text: the forced prefix and the special tokens dropped, the
        rest decoded by the target SentencePiece model."""
        if not self.tokens:
            return self.target_tokenizer.decode(outputs)
        special = set(self.tokens.get("special", []))
        n = len(prefix)
        outputs = [[t for t in (out[n:] if out[:n] == prefix else out) if t not in special] for out in outputs]
        # A piece the target SentencePiece model lacks (a joint vocabulary's source-side piece)
        # is decoded as it is written: its word-boundary mark becomes a space, as the models' own
        # tokenizers do.
        return [text.replace("\u2581", " ").strip() for text in self.target_tokenizer.decode(outputs)]


def open_model_dir(path: str | os.PathLike) -> ModelDir:
    """Check a converted model directory and load its tokenisers (not yet the CTranslate2 model).
    A missing or incomplete directory is an error naming the path and what is wrong."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"translation model directory not found: {path}")
    info_path = path / MODEL_INFO
    if not info_path.is_file():
        raise ValueError(f"{path}: not a converted translation model directory (no {MODEL_INFO}; "
                         "create it with pseudopairs convert-mt)")
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{info_path}: corrupt model description ({err})") from err
    if not isinstance(info, dict) or not isinstance(info.get("model_id"), str) \
            or not isinstance(info.get("tokenizer"), dict):
        raise ValueError(f"{info_path}: corrupt model description (model_id/tokenizer missing)")
    tokens = info.get("tokens")
    if tokens is not None and (not isinstance(tokens, dict) or not all(
            isinstance(v, list) and all(isinstance(t, str) for t in v) for v in tokens.values())):
        raise ValueError(f"{info_path}: corrupt model description (tokens = {tokens!r})")
    for name in ("model.bin", "config.json"):
        if not (path / name).is_file():
            raise ValueError(f"{path}: incomplete CTranslate2 model ({name} is missing)")
    tokenizers = {}
    for side in ("source", "target"):
        name = info["tokenizer"].get(side)
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise ValueError(f"{info_path}: corrupt model description (tokenizer.{side} = {name!r})")
        tokenizers[side] = SentencePieceTokenizer(path / name)
    return ModelDir(path=path, info=info, source_tokenizer=tokenizers["source"],
                    target_tokenizer=tokenizers["target"])
