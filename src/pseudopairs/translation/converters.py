"""``convert-mt --spec``: a declared translation model (:mod:`~.models`) into the model directory
every translation job loads, with CTranslate2's own converters — ``OpenNMTPyConverter``,
``MarianConverter``, ``TransformersConverter`` — or, for a directory CTranslate2 already
converted, its files as they are.

Each format (:data:`MODEL_FORMATS`, a registry) writes the CTranslate2 model and its SentencePiece
model(s) into a staging directory and says the model's family; then, for every format alike, the
declared languages are checked against the model's vocabulary (a code the model does not know is
an error naming ``translation.models.NAME.languages.LANG``), the family's special tokens are
recorded (``tokens``: what goes around the pieces, what a translation drops), and
``pseudopairs_mt.json`` is written. The directory replaces the output atomically.

A Hugging Face model's tokenization is read from its own tokenizer: for a few probe sentences
the tokens of ``AutoTokenizer`` (the tokenizer files that come with the model) must be the
model's SentencePiece pieces with the same tokens around them as the pipeline puts there, so
translating needs neither transformers nor torch. Conversion never reaches the network
(``HF_HUB_OFFLINE``): a model is read from local files only."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pseudopairs import commands
from pseudopairs.core.io import atomic_directory
from pseudopairs.core.registry import Registry
from pseudopairs.translation.convert import (SHARED_TOKENIZER, convert_checkpoint, convert_opennmt_into,
                                             copy_tokenizers, write_model_info)
from pseudopairs.translation import convert as _convert_module
from pseudopairs.translation.models import (FORMAT_FAMILIES, LANGUAGE_TOKEN_PATTERNS, MULTILINGUAL_FAMILIES,
                                            language_token)
from pseudopairs.translation.settings import QUANTIZATIONS
from pseudopairs.translation.text import SentencePieceTokenizer, sha256_file

log = logging.getLogger(__name__)

#: Sentences whose tokens a Hugging Face model's own tokenizer and the pipeline must agree on.
PROBES = ("A man in a blue shirt is standing on a ladder.",
          "Zwei Hunde spielen im Schnee, während ein Kind zuschaut!",
          "Une femme âgée vend des légumes au marché (près de l'église).")

#: Special tokens of the families' vocabularies that a translation never shows.
SPECIAL_TOKENS = ("<s>", "</s>", "<pad>", "<unk>")


@dataclass
class Staged:
    """What a format's conversion leaves in the staging directory: its family, the tokenisers'
    names there, the tokens around a sentence's pieces (before languages are filled in), the
    special tokens, and a description of the source."""

    family: str
    tokenizers: dict[str, str]
    source_prefix: list[str]
    source_suffix: list[str]
    special: list[str]
    source: dict[str, Any]
    converter: dict[str, Any]


@dataclass(frozen=True)
class ModelFormat:
    name: str
    convert: Callable[[dict, Path, Path], Staged]


MODEL_FORMATS: Registry[ModelFormat] = Registry("translation model format",
                                                modules=("pseudopairs.translation.converters",))


def _quantization(spec: dict) -> str | None:
    q = spec.get("quantization", "none")
    if q not in QUANTIZATIONS:
        raise ValueError(f"{spec['key']}.quantization: {q!r} is not one of {list(QUANTIZATIONS)}")
    return None if q == "none" else q


def _file(spec: dict, folder: Path, key: str, default: str | None) -> Path | None:
    """``files.KEY`` (or ``default``) inside the model's folder; a named file that is missing is
    an error naming the config key."""
    name = spec.get("files", {}).get(key, default)
    if name is None:
        return None
    path = folder / name
    if not path.is_file():
        where = f"{spec['key']}.files.{key}" if key in spec.get("files", {}) else spec["key"]
        raise FileNotFoundError(f"{where}: {path} not found")
    return path


def _tokenizer_pair(spec: dict, folder: Path, defaults: tuple[str, ...]) -> tuple[Path, Path]:
    """The source and target SentencePiece models: ``files.source_tokenizer`` /
    ``target_tokenizer``, or ``files.tokenizer`` for both, or the first of ``defaults`` present
    (a pair ``source.spm``/``target.spm`` counts as one default)."""
    files = spec.get("files", {})
    if "source_tokenizer" in files or "target_tokenizer" in files:
        return (_file(spec, folder, "source_tokenizer", files.get("target_tokenizer")),
                _file(spec, folder, "target_tokenizer", files.get("source_tokenizer")))
    if "tokenizer" in files:
        shared = _file(spec, folder, "tokenizer", None)
        return shared, shared
    for default in defaults:
        names = default.split("+")
        if all((folder / n).is_file() for n in names):
            return folder / names[0], folder / names[-1]
    from pseudopairs.translation.models import FILE_KEYS

    keys = FILE_KEYS.get(spec.get("format"), ("tokenizer",))
    where = (f"{spec['key']}.files.tokenizer" if "tokenizer" in keys else
             f"{spec['key']}.files.source_tokenizer (and target_tokenizer when the target's differs)")
    raise FileNotFoundError(f"{spec['key']}: no SentencePiece model in {folder} (looked for "
                            f"{', '.join(d.replace('+', ' + ') for d in defaults)}); name it in {where}")


def _stage_tokenizers(tmp: Path, source: Path, target: Path) -> dict[str, str]:
    shared = source.resolve() == target.resolve() or sha256_file(source) == sha256_file(target)
    return copy_tokenizers(tmp, source, target, shared=shared)


def _folder(spec: dict) -> Path:
    path = Path(spec["path"])
    if not path.exists():
        raise FileNotFoundError(f"{spec['key']}: model not found: {path}")
    return path


# ----------------------------------------------------------------------------------------------
# Formats


def _convert_opennmt(spec: dict, path: Path, tmp: Path) -> Staged:
    folder = path.parent if path.is_file() else path
    checkpoint = path if path.is_file() else _file(spec, folder, "checkpoint", None)
    if checkpoint is None:
        raise ValueError(f"{spec['key']}.files.checkpoint: name the OpenNMT-py checkpoint in {folder}")
    source, target = _tokenizer_pair(spec, folder, (SHARED_TOKENIZER, "source.spm+target.spm"))
    info = convert_opennmt_into(checkpoint, tmp, quantization=spec.get("quantization", "none"),
                                source_tokenizer=source, target_tokenizer=target, model_id="pending")
    return Staged(family="plain", tokenizers={k: info["tokenizer"][k] for k in ("source", "target")},
                  source_prefix=[], source_suffix=[], special=[],
                  source={**info["source"], "format": "opennmt_py"}, converter=info["converter"])


def _convert_marian(spec: dict, path: Path, tmp: Path) -> Staged:
    """A Marian model: ``files.model`` (.npz) and ``files.vocab`` (or ``source_vocab`` +
    ``target_vocab``), else those ``decoder.yml`` names (an OPUS-MT release)."""
    import ctranslate2
    import yaml
    from ctranslate2.converters import MarianConverter

    files = spec.get("files", {})
    if "model" in files:
        model = _file(spec, path, "model", None)
        vocabs = ([_file(spec, path, "vocab", None)] if "vocab" in files else
                  [_file(spec, path, "source_vocab", None), _file(spec, path, "target_vocab", None)])
        if None in vocabs:
            raise ValueError(f"{spec['key']}.files: a Marian model names its vocab (or source_vocab and "
                             "target_vocab) with its model")
    else:
        decoder = path / "decoder.yml"
        if not decoder.is_file():
            raise FileNotFoundError(f"{spec['key']}: {decoder} not found (an OPUS-MT release has it; "
                                    f"else name the .npz and vocabularies in {spec['key']}.files)")
        try:
            described = yaml.safe_load(decoder.read_text(encoding="utf-8"))
            model = path / described["models"][0]
            vocabs = [path / v for v in described["vocabs"]]
        except (yaml.YAMLError, KeyError, IndexError, TypeError) as err:
            raise ValueError(f"{decoder}: not a Marian decoder.yml naming models and vocabs ({err})") from err
        for file in (model, *vocabs):
            if not file.is_file():
                raise FileNotFoundError(f"{spec['key']}: {file} (named by {decoder}) not found")
    source, target = _tokenizer_pair(spec, path, ("source.spm+target.spm",))
    try:
        MarianConverter(str(model), [str(v) for v in vocabs]).convert(
            str(tmp), quantization=_quantization(spec), force=True)
    except (ValueError, KeyError, NotImplementedError) as err:
        raise ValueError(f"{model}: CTranslate2's Marian converter refused it: {type(err).__name__}: {err}") from err
    config = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
    # The converter makes CTranslate2 append </s> to the source (Marian's own convention).
    suffix = [] if config.get("add_source_eos") else ["</s>"]
    return Staged(family="marian", tokenizers=_stage_tokenizers(tmp, source, target),
                  source_prefix=[], source_suffix=suffix, special=list(SPECIAL_TOKENS),
                  source={"format": "marian", "model": str(model.resolve()), "sha256": sha256_file(model),
                          "vocabularies": [str(v.resolve()) for v in vocabs]},
                  converter={"class": "ctranslate2.converters.MarianConverter",
                             "ctranslate2": ctranslate2.__version__})


def _hf_family(path: Path, spec: dict) -> str:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{spec['key']}: {path} is not a Hugging Face model directory "
                                "(no config.json)")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    tokenizer_config = path / "tokenizer_config.json"
    tokenizer_class = str(config.get("tokenizer_class") or "")
    if tokenizer_config.is_file():
        tokenizer_class += " " + str(json.loads(tokenizer_config.read_text(encoding="utf-8")).get("tokenizer_class"))
    model_type = config.get("model_type")
    if model_type == "marian":
        return "marian"
    if model_type == "m2m_100":
        return "nllb" if "Nllb" in tokenizer_class else "m2m100"
    raise ValueError(f"{spec['key']}: {config_file} has model_type {model_type!r}; the translation families "
                     "this pipeline knows are MarianMT (marian), M2M100 and NLLB (m2m_100)")


def _hf_affixes(hf_tokens: list[str], pieces: list[str], *, text: str, what: str) -> tuple[list[str], list[str]]:
    """The tokens a Hugging Face tokenizer puts before and after a sentence's pieces."""
    n = len(pieces)
    for start in range(len(hf_tokens) - n + 1):
        if hf_tokens[start:start + n] == pieces:
            return hf_tokens[:start], hf_tokens[start + n:]
    raise ValueError(f"{what}: the model's own tokenizer reads {text!r} as {hf_tokens}, not as its "
                     f"SentencePiece pieces {pieces} with tokens around them: a tokenization this "
                     "pipeline does not reproduce")


def _convert_transformers(spec: dict, path: Path, tmp: Path) -> Staged:
    os.environ["HF_HUB_OFFLINE"] = "1"  # local files only: never a hub download
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import ctranslate2
    import transformers
    from ctranslate2.converters import TransformersConverter

    family = _hf_family(path, spec)
    if spec.get("family") not in (None, family):
        raise ValueError(f"{spec['key']}.family: declared {spec['family']!r}, but {path} is a {family} model")
    default = ("source.spm+target.spm",) if family == "marian" else ("sentencepiece.bpe.model",)
    source, target = _tokenizer_pair(spec, path, default)
    own_files = {"marian": "source.spm and target.spm", "m2m100": "sentencepiece.bpe.model and vocab.json"}.get(
        family, "sentencepiece.bpe.model")
    unloadable = (f"the transformers format loads the model's own tokenizer from the folder, under its "
                  f"Hugging Face file names ({own_files}): put them there (files.source_tokenizer only names "
                  "the SentencePiece model this pipeline encodes with)")
    try:
        TransformersConverter(str(path)).convert(str(tmp), quantization=_quantization(spec), force=True)
    except (AttributeError, TypeError) as err:   # a tokenizer file the library expects is absent
        raise ValueError(f"{path}: CTranslate2's Transformers converter cannot load its tokenizer "
                         f"({type(err).__name__}: {err}); {unloadable}") from err
    except (ValueError, KeyError, OSError, NotImplementedError) as err:
        fix = ""
        if family in MULTILINGUAL_FAMILIES and "expected a vocabulary of size" in str(err):
            fix = (f"; the tokenizer saved in {path} has fewer entries than the model's embeddings: a "
                   f"{family} tokenizer saved without its language tokens (such as "
                   f"{language_token(family, 'en' if family == 'm2m100' else 'eng_Latn')!r}); save the "
                   "model's own tokenizer files, language tokens included, in the folder and convert again")
        raise ValueError(f"{path}: CTranslate2's Transformers converter refused it: {type(err).__name__}: "
                         f"{err}{fix}") from err
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    except (AttributeError, TypeError, OSError, ValueError) as err:
        raise ValueError(f"{path}: the model's tokenizer cannot be loaded ({type(err).__name__}: {err}); "
                         f"{unloadable}") from err
    vocab, _ = read_vocabularies(tmp)
    spm = SentencePieceTokenizer(source)
    unk = tokenizer.unk_token
    known = set(vocab)
    langs = spec.get("languages") or {}
    codes = list(langs.values())[:1] if family in MULTILINGUAL_FAMILIES else [None]
    affixes = None
    for code in codes:
        if code is not None:
            token = language_token(family, code)
            if token not in known:
                break  # reported with the model's language tokens (_languages)
            tokenizer.src_lang = code if family == "nllb" else token.strip("_")
        for text in PROBES:
            hf = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
            pieces = [p if p in known else unk for p in spm.encode([text])[0]]
            found = _hf_affixes(hf, pieces, text=text, what=str(path))
            if code is not None:
                found = tuple([("{source}" if t == language_token(family, code) else t) for t in part]
                              for part in found)
            if affixes not in (None, found):
                raise ValueError(f"{path}: the model's own tokenizer puts different tokens around different "
                                 f"sentences ({affixes} vs {found})")
            affixes = found
    prefix, suffix = affixes or ([], ["</s>"])
    # the tokenizer's special tokens, and the vocabulary's fillers it does not know (M2M100's
    # madeupwordN), which its decoding drops as unknown
    own = tokenizer.get_vocab()
    special = sorted(set(tokenizer.all_special_tokens) | set(SPECIAL_TOKENS) | {t for t in vocab if t not in own})
    return Staged(family=family, tokenizers=_stage_tokenizers(tmp, source, target),
                  source_prefix=list(prefix), source_suffix=list(suffix), special=special,
                  source={"format": "transformers", "path": str(path.resolve()),
                          "weights_sha256": _weights_digest(path)},
                  converter={"class": "ctranslate2.converters.TransformersConverter",
                             "ctranslate2": ctranslate2.__version__, "transformers": transformers.__version__})


def _weights_digest(path: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(path.iterdir())
            if p.is_file() and p.suffix in (".safetensors", ".bin")}


#: The files of a CTranslate2 model directory (the rest of a folder is left behind).
_CT2_FILES = re.compile(r"^(model\.bin|config\.json|(shared|source|target)_vocabulary\.(json|txt)|"
                        r"vocabulary\.(json|txt)|vmap\.txt|generation_config\.json)$")


def _convert_ctranslate2(spec: dict, path: Path, tmp: Path) -> Staged:
    """A model CTranslate2 already converted: its files hard-linked (or copied) as they are."""
    import ctranslate2

    for name in ("model.bin", "config.json"):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{spec['key']}: {path} is not a CTranslate2 model directory "
                                    f"({name} is missing)")
    for file in sorted(path.iterdir()):
        if file.is_file() and _CT2_FILES.match(file.name):
            try:
                os.link(file, tmp / file.name)
            except OSError:
                shutil.copyfile(file, tmp / file.name)
    family = spec.get("family") or FORMAT_FAMILIES["ctranslate2"][0]
    source, target = _tokenizer_pair(spec, path, (SHARED_TOKENIZER, "source.spm+target.spm",
                                                  "sentencepiece.bpe.model"))
    config = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
    suffix = [] if family == "plain" or config.get("add_source_eos") else ["</s>"]
    prefix = ["{source}"] if family in MULTILINGUAL_FAMILIES else []
    return Staged(family=family, tokenizers=_stage_tokenizers(tmp, source, target),
                  source_prefix=prefix, source_suffix=suffix,
                  special=[] if family == "plain" else list(SPECIAL_TOKENS),
                  source={"format": "ctranslate2", "path": str(path.resolve()),
                          "sha256": sha256_file(path / "model.bin")},
                  converter={"class": None, "ctranslate2": ctranslate2.__version__})


for _name, _convert in (("opennmt_py", _convert_opennmt), ("marian", _convert_marian),
                        ("transformers", _convert_transformers), ("ctranslate2", _convert_ctranslate2)):
    MODEL_FORMATS.register(_name, ModelFormat(_name, _convert))


# ----------------------------------------------------------------------------------------------
# Common to every format


def read_vocabularies(directory: Path) -> tuple[list[str], list[str]]:
    """The source and target vocabularies of a CTranslate2 model directory."""
    def read(stem: str) -> list[str] | None:
        for suffix in (".json", ".txt"):
            file = directory / f"{stem}{suffix}"
            if file.is_file():
                text = file.read_text(encoding="utf-8")
                return json.loads(text) if suffix == ".json" else text.splitlines()
        return None

    shared = read("shared_vocabulary") or read("vocabulary")
    source, target = read("source_vocabulary"), read("target_vocabulary")
    if shared is not None:
        return shared, shared
    if source is None or target is None:
        raise ValueError(f"{directory}: CTranslate2 model without vocabulary files")
    return source, target


def _languages(spec: dict, family: str, source_vocab: list[str], target_vocab: list[str],
               where: str) -> dict[str, str] | None:
    """Language -> the model's token, each checked against the vocabulary of the side it is
    read on; an unknown code is an error naming its config key."""
    declared = spec.get("languages")
    if declared is None:
        if family in MULTILINGUAL_FAMILIES:
            raise ValueError(f"{spec['key']}.languages: a {family} model needs the code of each language "
                             "it translates, e.g. {en: " + ("eng_Latn, de: deu_Latn}" if family == "nllb"
                                                           else "en, de: de}"))
        return None
    if family == "plain":
        raise ValueError(f"{spec['key']}.languages: a plain (OpenNMT-py) model translates one direction; "
                         "give source_lang and target_lang")
    # Marian reads the target's >>code<< in the source; M2M100 and NLLB read the source's code in
    # the source and begin the translation with the target's
    vocab = set(source_vocab) if family == "marian" else set(source_vocab) & set(target_vocab)
    pattern = LANGUAGE_TOKEN_PATTERNS[family]
    known = sorted(t for t in vocab if pattern.match(t))
    out = {}
    for lang, code in declared.items():
        token = language_token(family, code)
        if token not in vocab:
            shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
            fix = "" if known else (
                f"; its vocabulary has no language token at all, so its tokenizer was saved without "
                f"them: save the model's own tokenizer files (with its language tokens such as "
                f"{language_token(family, 'en' if family == 'm2m100' else 'eng_Latn')!r}) in {where} "
                "and convert again")
            raise ValueError(f"{spec['key']}.languages.{lang}: {code!r} is not a language of this {family} "
                             f"model ({where}: no token {token!r} in its vocabulary; it knows "
                             f"{len(known)} language token(s){': ' + shown if known else ''}){fix}")
        out[lang] = token
    return out


#: Vocabulary fillers (fairseq's madeupwordN) and masks, which no translation shows.
_FILLER = re.compile(r"^(madeupword\d+|<mask>)$")


def prepare_model(spec: dict, output_dir: str | os.PathLike) -> dict:
    """The ``convert-mt --spec`` step: the declared model (:func:`~.models.convert_spec`) into
    ``output_dir`` (replaced atomically). Returns the ``pseudopairs_mt.json`` written there."""
    for key in ("name", "key", "format", "path"):
        if not spec.get(key):
            raise ValueError(f"--spec: {key!r} missing")
    fmt = MODEL_FORMATS.get(spec["format"])
    path = _folder(spec)
    output_dir = Path(output_dir)
    with atomic_directory(output_dir) as tmp:
        staged = fmt.convert(spec, path, tmp)
        source_vocab, target_vocab = read_vocabularies(tmp)
        languages = _languages(spec, staged.family, source_vocab, target_vocab, str(path))
        multilingual = languages is not None
        target_prefix = ["{target}"] if staged.family in MULTILINGUAL_FAMILIES else []
        source_prefix = staged.source_prefix
        if staged.family == "marian" and multilingual:
            source_prefix = ["{target}", *source_prefix]
        special = set(staged.special) | set(languages.values() if languages else ())
        if staged.family in LANGUAGE_TOKEN_PATTERNS:  # every language token, declared or not
            pattern = LANGUAGE_TOKEN_PATTERNS[staged.family]
            special |= {t for t in target_vocab if pattern.match(t) or _FILLER.match(t)}
        special = sorted(special & set(target_vocab))
        digest = sha256_file(tmp / "model.bin")
        info = {
            "format": 2,
            "model_id": f"{spec['name']}-{digest[:12]}",
            "name": spec["name"],
            "config_key": spec["key"],
            "family": staged.family,
            "source": staged.source,
            "quantization": spec.get("quantization", "none"),
            "converter": staged.converter,
            "tokenizer": {"type": "sentencepiece", **staged.tokenizers,
                          "source_sha256": sha256_file(tmp / staged.tokenizers["source"]),
                          "target_sha256": sha256_file(tmp / staged.tokenizers["target"])},
            "tokens": {"source_prefix": source_prefix, "source_suffix": staged.source_suffix,
                       "target_prefix": target_prefix, "special": special},
            "vocabulary": {"source": len(source_vocab), "target": len(target_vocab)},
        }
        if multilingual:
            info["languages"] = languages
        else:
            info["pair"] = [spec["source_lang"], spec["target_lang"]]
        if not multilingual and ("{source}" in source_prefix or "{target}" in source_prefix):
            raise ValueError(f"{spec['key']}: this model reads language tokens; declare its languages")
        write_model_info(tmp, info)
    log.info("prepared %s (%s, %s family) -> %s [%s]", spec["name"], spec["format"], staged.family,
             output_dir, info["model_id"])
    return info


# ----------------------------------------------------------------------------------------------
# The convert-mt command

_DESCRIPTION = (_convert_module.__doc__ or "") + "\n\n" + (__doc__ or "")


def _cmd_convert_mt(args: argparse.Namespace) -> int:
    if args.spec:
        if args.checkpoint or args.tokenizer or args.source_tokenizer or args.target_tokenizer or args.model_id:
            raise ValueError("--spec declares the whole model: give it alone (with --output-dir)")
        info = prepare_model(args.spec, args.output_dir)
        print(f"convert-mt: {info['model_id']} ({info['source']['format']}, {info['family']} family, "
              f"quantization {info['quantization']}) -> {args.output_dir}")
        return 0
    if not args.checkpoint:
        raise ValueError("give --checkpoint (an OpenNMT-py checkpoint) or --spec (a declared model)")
    if args.tokenizer and (args.source_tokenizer or args.target_tokenizer):
        raise ValueError("give either --tokenizer or --source-tokenizer/--target-tokenizer")
    source = args.source_tokenizer or args.tokenizer
    target = args.target_tokenizer or args.tokenizer
    if (args.source_tokenizer is None) != (args.target_tokenizer is None):
        raise ValueError("--source-tokenizer and --target-tokenizer go together")
    info = convert_checkpoint(args.checkpoint, args.output_dir, quantization=args.quantization,
                              source_tokenizer=source, target_tokenizer=target, model_id=args.model_id)
    print(f"convert-mt: {info['model_id']} ({info['source']['layout']}, quantization "
          f"{info['quantization']}) -> {args.output_dir}")
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "convert-mt", _cmd_convert_mt, description=_DESCRIPTION,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=None, help="OpenNMT-py .pt checkpoint")
    commands.add_json(p, "--spec", "a declared model of any format (pseudopairs.translation.models."
                      "convert_spec: format, path, files, languages, quantization ...) instead of --checkpoint",
                      required=False)
    p.add_argument("--output-dir", required=True, help="CTranslate2 model directory (replaced atomically)")
    p.add_argument("--quantization", default="none", choices=QUANTIZATIONS,
                   help="weight type of the converted model (default: none = as saved)")
    p.add_argument("--tokenizer", default=None,
                   help=f"shared SentencePiece model (default: {SHARED_TOKENIZER} beside the checkpoint)")
    p.add_argument("--source-tokenizer", default=None, help="source SentencePiece model (with --target-tokenizer)")
    p.add_argument("--target-tokenizer", default=None, help="target SentencePiece model")
    p.add_argument("--model-id", default=None,
                   help="identifier recorded with every translation (default: checkpoint name + SHA-256 prefix)")
