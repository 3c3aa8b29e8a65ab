"""The text steps' command line: ``prepare-text``, ``prepare-captions``, ``train-truecaser``
(:mod:`pseudopairs.data.text`, the Moses recipe) and ``train-sentencepiece``
(:mod:`pseudopairs.data.tokenizers`); ``--tokenizer LANG=KIND[:MODEL]`` names the tokenizer of a
language Moses has no rules for."""

from __future__ import annotations

import argparse

from pseudopairs import commands
from pseudopairs.data.text import (CASES, Tokenize, _check_lang, load_truecaser, parse_truecase_models,
                                   perl_lowercase, prepare_captions, prepare_file, save_truecaser,
                                   train_truecaser, training_texts)
from pseudopairs.data.tokenizers import (add_tokenizer_option, load_tokenizers, parse_tokenizers,
                                         tokenizer_settings, train_sentencepiece)
from pseudopairs.core.io import check_caption_texts, read_captions, write_parquet_atomic


def _case_from(args: argparse.Namespace) -> str:
    case = args.case
    if case is None and getattr(args, "settings", None):
        case = args.settings.get("case", "lowercase")
    case = case or "lowercase"
    if case not in CASES:
        raise ValueError(f"text.case must be one of {list(CASES)}, got {case!r}")
    return case


def _tokenizers_from(args: argparse.Namespace) -> dict[str, Tokenize | None]:
    return load_tokenizers(parse_tokenizers(getattr(args, "tokenizer", None)))


def _cli_prepare_text(args: argparse.Namespace) -> None:
    case = _case_from(args)
    truecaser = None
    if case == "truecase":
        if not args.truecase_model:
            raise ValueError("--case truecase needs --truecase-model PATH")
        truecaser = load_truecaser(args.truecase_model)
    elif args.truecase_model:
        raise ValueError("--truecase-model is only used with --case truecase")
    tokenizers = _tokenizers_from(args)
    n = prepare_file(args.input, args.output, lang=_check_lang(args.lang), case=case,
                     truecaser=truecaser, tokenizer=tokenizers.get(args.lang))
    print(f"prepared {n} lines ({args.lang}, {case}) -> {args.output}")


def _cli_prepare_captions(args: argparse.Namespace) -> None:
    case = _case_from(args)
    models = parse_truecase_models(args.truecase_model)
    if case != "truecase" and models:
        raise ValueError("--truecase-model is only used with --case truecase")
    frame = read_captions(args.input)
    truecasers = {lang: load_truecaser(path) for lang, path in models.items()
                  if lang in set(frame["lang"])}
    out = prepare_captions(frame, case=case, truecasers=truecasers, source=str(args.input),
                           tokenizers=_tokenizers_from(args))
    for lang in sorted(set(out["lang"])):  # a table of (nearly) empty captions is refused, with the count
        check_caption_texts(out.loc[out["lang"] == lang, "text"], source=str(args.input),
                            what=f"{lang} captions (after preparation)")
    write_parquet_atomic(args.output, out)
    print(f"prepared {len(out)} captions ({case}) -> {args.output}")


def _cli_train_truecaser(args: argparse.Namespace) -> None:
    lang = _check_lang(args.lang)
    texts = training_texts(args.input, lang=lang)
    if not texts:
        raise ValueError(f"no training-split captions in language {lang!r} in "
                         f"{[str(p) for p in args.input]}")
    truecaser = train_truecaser(texts, lang=lang, tokenizer=_tokenizers_from(args).get(lang))
    save_truecaser(truecaser, args.output)
    print(f"truecaser for {lang}: {len(truecaser.model['best'])} word types from "
          f"{len(texts)} captions -> {args.output}")


def _cli_train_sentencepiece(args: argparse.Namespace) -> None:
    lang = _check_lang(args.lang)
    settings = tokenizer_settings(lang, args.settings)
    if settings["kind"] != "sentencepiece":
        raise ValueError(f"text.tokenizers.{lang}: {settings['kind']} is not trained")
    texts = training_texts(args.input, lang=lang)
    if not texts:
        raise ValueError(f"no training-split captions in language {lang!r} in {[str(p) for p in args.input]}")
    if args.case == "lowercase":
        texts = [perl_lowercase(text) for text in texts]
    pieces = train_sentencepiece(texts, lang=lang, settings=settings, output=args.output)
    print(f"SentencePiece model for {lang}: {pieces} pieces from {len(texts)} captions -> {args.output}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "prepare-text", _cli_prepare_text)
    p.add_argument("--lang", required=True, help="language code (en, de, fr, cs, …)")
    p.add_argument("input", help="UTF-8 text file, one caption per line (.gz accepted)")
    p.add_argument("output", help="output text file (.gz if it ends in .gz)")
    p.add_argument("--case", choices=CASES, default=None, help="default: lowercase")
    p.add_argument("--truecase-model", default=None, help="truecase model (with --case truecase)")
    add_tokenizer_option(p)
    commands.add_json(p, "--settings", "the config's text section", required=False)

    p = commands.add_command(subparsers, "prepare-captions", _cli_prepare_captions)
    p.add_argument("--input", required=True, help="raw caption table (.parquet)")
    p.add_argument("--output", required=True, help="prepared caption table (.parquet)")
    p.add_argument("--case", choices=CASES, default=None, help="default: lowercase")
    p.add_argument("--truecase-model", action="append", default=[], metavar="LANG=PATH",
                   help="truecase model per language (repeat; with --case truecase)")
    add_tokenizer_option(p)
    commands.add_json(p, "--settings", "the config's text section", required=False)

    p = commands.add_command(subparsers, "train-truecaser", _cli_train_truecaser)
    p.add_argument("--input", required=True, nargs="+", help="raw caption tables (.parquet)")
    p.add_argument("--lang", required=True)
    p.add_argument("--output", required=True, help="truecase model file")
    add_tokenizer_option(p)

    p = commands.add_command(subparsers, "train-sentencepiece", _cli_train_sentencepiece)
    p.add_argument("--input", required=True, nargs="+", help="raw caption tables (.parquet)")
    p.add_argument("--lang", required=True)
    p.add_argument("--case", choices=CASES, required=True, help="the captions' case (text.case)")
    commands.add_json(p, "--settings", "the language's text.tokenizers entry")
    p.add_argument("--output", required=True, help="SentencePiece model file")

