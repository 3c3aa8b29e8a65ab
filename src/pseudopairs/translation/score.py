"""The ``score-mt`` step: sacreBLEU of a converted model on a test set, decoded exactly as the
pipeline's ``translate-captions`` decodes (``translation.translate``: beam size, length penalty,
input truncation, compute type …), with the same code (:func:`~.translate.translate_texts`).
Writes the BLEU, its signature, the settings, the model id and counts as JSON beside the model
directory (or to ``--output``)."""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from pseudopairs import commands
from pseudopairs.core.io import write_json_atomic
from pseudopairs.translation.convert import open_model_dir
from pseudopairs.translation.settings import TranslateSettings
from pseudopairs.translation.text import (_library_versions, compute_bleu, read_parallel,
                                          write_text_lines)
from pseudopairs.translation.translate import (_command_line, add_translate_options, load_translator,
                                               ctranslate2_device, settings_from_args, translate_texts)

log = logging.getLogger(__name__)


def default_output(model_dir: str | os.PathLike, source: str | os.PathLike) -> Path:
    """``MODEL_DIR.TEST.bleu.json`` beside the model directory (TEST: the source file's name
    without ``.gz`` and its language suffix, e.g. ``newstest2014`` for ``newstest2014.en.gz``)."""
    model_dir, name = Path(model_dir), Path(source).name
    if name.endswith(".gz"):
        name = name[:-3]
    stem = Path(name).stem or name
    return model_dir.with_name(f"{model_dir.name}.{stem}.bleu.json")


def _translate(model, sources: list[str], settings: TranslateSettings, *, source_lang: str | None = None,
               target_lang: str | None = None) -> tuple[list[str], dict]:
    """Translate as ``translate-captions`` does: chunk by chunk (``settings.chunk_size``; batches
    never cross a chunk boundary), so the translations are the ones the pipeline gets."""
    translator = load_translator(model, settings)
    translations: list[str] = []
    stats = {"empty": 0, "truncated": 0, "first_truncated": None, "target_tokens": 0}
    try:
        for lo in range(0, len(sources), settings.chunk_size):
            raw, chunk = translate_texts(translator, model, sources[lo:lo + settings.chunk_size],
                                         settings=settings, row_offset=lo, source_lang=source_lang,
                                         target_lang=target_lang)
            translations += raw
            for name in ("empty", "truncated", "target_tokens"):
                stats[name] += chunk[name]
            if stats["first_truncated"] is None:
                stats["first_truncated"] = chunk["first_truncated"]
    finally:
        del translator
    return translations, stats


def score_mt(*, model_dir: str | os.PathLike, source: str | os.PathLike, reference: str | os.PathLike,
             settings: TranslateSettings, output: str | os.PathLike | None = None,
             hypotheses: str | os.PathLike | None = None, command: str | None = None,
             source_lang: str | None = None, target_lang: str | None = None) -> dict:
    """Translate ``source`` (plain text, one sentence per line, optionally gzipped) with the
    converted model in ``model_dir`` and the decoding ``settings`` of ``translate-captions``,
    score the detokenised translations with sacreBLEU (13a tokenisation, exp smoothing, one
    reference each) against ``reference`` (aligned by line) and write the result as JSON to
    ``output`` (default :func:`default_output`); optionally the translations to ``hypotheses``.
    Returns that JSON: the BLEU fields of :func:`~.text.compute_bleu` (``bleu``, ``signature``,
    ``precisions`` …), ``model_id``, ``settings``, device and compute type, ``counts``."""
    started = time.time()
    sources, references = read_parallel(source, reference)
    if not sources:
        raise ValueError(f"the test files {source} and {reference} are empty")
    model = open_model_dir(model_dir)
    pair = model.info.get("pair")
    if source_lang is None and target_lang is None and pair is not None:
        source_lang, target_lang = pair
    if model.info.get("languages") is not None and None in (source_lang, target_lang):
        raise ValueError(f"{model.path}: a multilingual model; give --source-lang and --target-lang")
    if source_lang is not None or target_lang is not None:
        model.check_languages(source_lang, target_lang)
    output = Path(output) if output is not None else default_output(model.path, source)
    device, _, compute = ctranslate2_device(settings)
    translations, stats = _translate(model, sources, settings, source_lang=source_lang, target_lang=target_lang)
    seconds = time.time() - started
    if stats["truncated"]:
        log.warning("%d source sentence(s) longer than translation.translate.max_input_tokens=%d "
                    "subword tokens were truncated (first: line %d)", stats["truncated"],
                    settings.max_input_tokens, stats["first_truncated"] + 1)
    result = compute_bleu(translations, [r.strip() for r in references])
    result.update({
        "model_id": model.model_id, "model_dir": str(model.path),
        "source": str(source), "reference": str(reference),
        "decoding": f"CTranslate2, beam {settings.beam_size} (translation.translate settings)",
        "settings": settings.to_dict(), "device": device, "compute_type": compute,
        "counts": {"sentences": len(sources), "empty": stats["empty"], "truncated": stats["truncated"],
                   "target_tokens": stats["target_tokens"], "seconds": round(seconds, 3),
                   "sentences_per_s": round(len(sources) / max(seconds, 1e-9), 1)},
        "hypotheses": None if hypotheses is None else str(hypotheses),
        "command": command, "versions": _library_versions(),
    })
    if hypotheses is not None:
        write_text_lines(hypotheses, translations)
    write_json_atomic(output, result)
    log.info("%s on %s: BLEU %.2f (%d sentences, %s) -> %s", model.model_id, source, result["bleu"],
             len(sources), result["signature"], output)
    return result


def _cmd_score_mt(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    output = args.output if args.output is not None else default_output(args.model, args.source)
    result = score_mt(model_dir=args.model, source=args.source, reference=args.reference,
                      settings=settings, output=output, hypotheses=args.hypotheses,
                      command=_command_line(), source_lang=args.source_lang, target_lang=args.target_lang)
    print(f"score-mt: BLEU {result['bleu']:.2f} on {result['sentences']} sentences "
          f"({result['signature']}) -> {output}")
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "score-mt", _cmd_score_mt, description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="converted model directory (convert-mt)")
    p.add_argument("--source", required=True,
                   help="test source sentences, one per line (raw UTF-8 text, optionally gzipped)")
    p.add_argument("--reference", required=True, help="reference translations, aligned by line")
    p.add_argument("--source-lang", default=None,
                   help="source language (needed for a multilingual model; default: a one-direction model's)")
    p.add_argument("--target-lang", default=None, help="target language (with --source-lang)")
    add_translate_options(p)
    p.add_argument("--output", default=None,
                   help="BLEU JSON (default: MODEL.TEST.bleu.json beside the model directory, TEST "
                        "the source file name without its language suffix)")
    p.add_argument("--hypotheses", default=None,
                   help="also write the translations here, one per line (.gz: gzip-compressed)")
