"""The ``translate-captions`` step: a caption table or plain text in, its translations out (see
:func:`translate_captions`); also the CTranslate2 pieces ``score-mt`` uses."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import queue
import shlex
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import (CAPTION_COLUMNS, MAX_EMPTY_CAPTION_SHARE, read_captions, write_json_atomic,
                            write_parquet_atomic)
from pseudopairs.translation.chunks import (ChunkResult, _read_chunk, _source_digest, _write_chunk,
                                            remove_chunks, translation_fingerprint)
from pseudopairs.translation.convert import ModelDir, open_model_dir
from pseudopairs.translation.moses import preparer
from pseudopairs.translation.settings import TranslateSettings, _is_int
from pseudopairs.core.settings import resolve_device as settings_device
from pseudopairs.translation.text import _library_versions, read_text_lines, write_text_lines


log = logging.getLogger(__name__)


def ctranslate2_device(settings: TranslateSettings) -> tuple[str, int, str]:
    """(device, device index, compute type) for CTranslate2 from ``translation.translate.device``
    (the one device notion, :func:`pseudopairs.core.settings.resolve_device`, with the GPUs
    CTranslate2 sees: ``cuda:N`` is device ``cuda``, index N); compute type ``auto`` is int8 on
    CPU and float16 on CUDA. Unsupported types are errors."""
    import ctranslate2

    resolved = settings_device(settings.device, key="translation.translate.device (CTranslate2 must "
                               "see the GPU: is its CUDA 12 cuBLAS on the library path?)",
                               cuda_count=ctranslate2.get_cuda_device_count)
    device, _, index = resolved.partition(":")
    if device == "cuda":
        preload_cuda12_cublas()
    compute = settings.compute_type
    if compute == "auto":
        compute = "int8" if device == "cpu" else "float16"
    if compute != "default":
        supported = ctranslate2.get_supported_compute_types(device, int(index or 0))
        if compute not in supported:
            raise ValueError(f"translation.translate.compute_type: {compute!r} is not supported on "
                             f"{device} here (supported: {sorted(supported)})")
    return device, int(index or 0), compute


@functools.lru_cache(maxsize=1)
def preload_cuda12_cublas() -> str | None:
    """Make the pip-installed CUDA 12 cuBLAS visible to CTranslate2.

    CTranslate2's Linux wheels link the CUDA runtime statically and ``dlopen`` ``libcublas.so.12``
    (and through it ``libcublasLt.so.12``) on first GPU use. The ``nvidia-cublas-cu12`` wheel puts
    them in ``site-packages/nvidia/cublas/lib``, which is not on the loader path; loading them here
    (``RTLD_GLOBAL``) lets the later ``dlopen`` find them by soname, without ``LD_LIBRARY_PATH``.
    They coexist with the CUDA 13 libraries of torch (``libcublas.so.13``: another soname).
    Returns the directory loaded from, or ``None`` when the package is not installed (then the
    system's loader path must provide them)."""
    import ctypes
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia.cublas")
    except (ModuleNotFoundError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        lib = Path(location) / "lib"
        libraries = [lib / "libcublasLt.so.12", lib / "libcublas.so.12"]
        if all(p.is_file() for p in libraries):
            for library in libraries:
                ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
            log.info("loaded CUDA 12 cuBLAS for CTranslate2 from %s", lib)
            return str(lib)
    return None


def load_translator(model: ModelDir, settings: TranslateSettings):
    """``ctranslate2.Translator`` for a model directory with the device/threads of ``settings``."""
    import ctranslate2

    device, index, compute = ctranslate2_device(settings)
    try:
        return ctranslate2.Translator(str(model.path), device=device, device_index=index,
                                      compute_type=compute, inter_threads=settings.inter_threads,
                                      intra_threads=settings.intra_threads)
    except (RuntimeError, ValueError, OSError) as err:
        raise ValueError(f"{model.path}: cannot load the CTranslate2 model "
                         f"({' '.join(str(err).split())[:300]})") from err


def translation_options(settings: TranslateSettings) -> dict[str, Any]:
    """Keyword arguments of ``translate_iterable``/``translate_batch`` for ``settings``. Inputs are
    truncated by us (and logged), so CTranslate2's own truncation is switched off."""
    return {"max_batch_size": settings.max_batch_size, "batch_type": "tokens",
            "beam_size": settings.beam_size, "length_penalty": settings.length_penalty,
            "max_decoding_length": settings.max_decoding_length, "max_input_length": 0}


def translate_texts(translator, model: ModelDir, texts: Sequence[str], *, settings: TranslateSettings,
                    row_offset: int = 0, source_lang: str | None = None,
                    target_lang: str | None = None) -> tuple[list[str], dict[str, Any]]:
    """Translate raw sentences in order with ``translate_iterable``: SentencePiece encoding,
    truncation at ``max_input_tokens`` pieces, the model's tokens around them (a language token,
    ``</s>``: :meth:`ModelDir.source_affixes`) and the target prefix it must begin with (NLLB's,
    M2M100's target language), token-based batches, decoding without the prefix and special
    tokens. Empty (or whitespace-only) sentences translate to ``""`` without reaching the model.
    Returns the translations and counts (``empty``, ``truncated``, ``first_truncated``,
    ``target_tokens``)."""
    stripped = [t.strip() for t in texts]
    pieces = model.source_tokenizer.encode(stripped)
    todo = [i for i, p in enumerate(pieces) if p]
    truncated = [i for i in todo if len(pieces[i]) > settings.max_input_tokens]
    for i in truncated:
        pieces[i] = pieces[i][:settings.max_input_tokens]
    before, after = model.source_affixes(source_lang, target_lang)
    prefix = model.target_prefix(source_lang, target_lang)
    options = translation_options(settings)
    if prefix:
        options["target_prefix"] = (prefix for _ in todo)
    outputs: list[list[str]] = [[] for _ in texts]
    if todo:
        sources = (before + pieces[i] + after for i in todo) if before or after else (pieces[i] for i in todo)
        results = translator.translate_iterable(sources, **options)
        for i, result in zip(todo, results):
            outputs[i] = result.hypotheses[0]
    translations = model.decode(outputs, prefix=prefix)
    stats = {"empty": len(texts) - len(todo), "truncated": len(truncated),
             "first_truncated": (row_offset + truncated[0]) if truncated else None,
             "target_tokens": sum(len(o) for o in outputs)}
    return translations, stats


def empty_translations(texts: Sequence[str], translations: Sequence[str]) -> list[int]:
    """The rows whose input has text but whose translation has none (whitespace only)."""
    return [i for i, (text, out) in enumerate(zip(texts, translations)) if text.strip() and not out.strip()]


@dataclass
class TranslationRun:
    rows: int
    empty: int            # empty inputs (translated to "" without reaching the model)
    empty_output: int     # non-empty inputs whose translation is empty once the special and
                          # language tokens are dropped
    truncated: int
    target_tokens: int
    computed_chunks: int
    reused_chunks: int
    seconds: float


_DONE = object()


@dataclass
class _Source:
    """What ``translate-captions`` translates: the source-language rows of a caption table
    (``rows``), or the lines of a text file (``rows`` None; ``image_ids`` are line numbers)."""

    path: Path
    texts: list[str]
    image_ids: list
    caption_idx: list
    rows: pd.DataFrame | None = None

    @property
    def is_table(self) -> bool:
        return self.rows is not None

    def describe(self, i: int) -> str:
        if self.is_table:
            return f"image {self.image_ids[i]!r} caption {self.caption_idx[i]}"
        return f"line {self.image_ids[i]}"


def is_caption_table(path: Path) -> bool:
    """A Parquet caption table (by its ``.parquet`` suffix or its magic bytes) rather than text."""
    if path.suffix == ".parquet":
        return True
    with open(path, "rb") as handle:
        return handle.read(4) == b"PAR1"


def _read_table(captions: Path, source_lang: str) -> _Source:
    frame = read_captions(captions)
    rows = frame[frame["lang"] == source_lang].reset_index(drop=True)
    if rows.empty:
        raise ValueError(f"{captions}: no captions in language {source_lang!r} "
                         f"(languages present: {sorted(set(frame['lang']))})")
    texts = rows["raw"].tolist()
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{captions}: {source_lang} caption {i} (image {rows['image_id'][i]!r}): "
                             f"'raw' is not a string ({text!r})")
    return _Source(path=captions, texts=texts, image_ids=rows["image_id"].tolist(),
                   caption_idx=rows["caption_idx"].tolist(), rows=rows)


def _read_text(path: Path) -> _Source:
    texts = read_text_lines(path)
    if not texts:
        raise ValueError(f"{path}: no lines to translate (an empty text file)")
    return _Source(path=path, texts=texts, image_ids=list(range(1, len(texts) + 1)), caption_idx=[0] * len(texts))


def _check_arguments(captions: Path, output: Path, *, table: bool, source_lang: str, target_lang: str,
                     dataset: str | None, case: str | None, truecase_model: Path | None) -> None:
    from pseudopairs.data.text import CASES, _check_lang  # noqa: PLC2701 — the package's language-code rule

    if table and output.suffix != ".parquet":
        raise ValueError(f"--output must be a .parquet caption table (the input {captions} is one), got {output}")
    if not table and output.suffix == ".parquet":
        raise ValueError(f"--output {output}: the input {captions} is plain text, so the output is "
                         "plain text too (one translation per line); give e.g. a .txt or .de path")
    _check_lang(source_lang)
    _check_lang(target_lang)
    if table and (not isinstance(dataset, str) or not dataset.strip()):
        raise ValueError("--dataset must name the data set of the translations (e.g. coco.de-mt)")
    if case is not None and case not in CASES:
        raise ValueError(f"--case must be one of {list(CASES)}")
    if case == "truecase" and truecase_model is None:
        raise ValueError(f"--case truecase needs --truecase-model {target_lang}=PATH")
    if case != "truecase" and truecase_model is not None:
        raise ValueError("--truecase-model is only used with --case truecase")
    if truecase_model is not None and not truecase_model.is_file():
        raise FileNotFoundError(f"truecase model not found: {truecase_model}")


def _stored_chunks(source: _Source, *, settings: TranslateSettings, chunk_dir: Path, fingerprint: str):
    """Chunk bounds, source digests and the chunks already stored for this very run."""
    n, size = len(source.texts), settings.chunk_size
    bounds = [(lo, min(n, lo + size)) for lo in range(0, n, size)]
    digests = [_source_digest(source.image_ids[lo:hi], source.caption_idx[lo:hi], source.texts[lo:hi])
               for lo, hi in bounds]
    chunks: dict[int, ChunkResult] = {}
    for k, (lo, hi) in enumerate(bounds):
        stored = _read_chunk(chunk_dir, k, start=lo, stop=hi, fingerprint=fingerprint, source_sha256=digests[k])
        if stored is not None:
            chunks[k] = stored
    return bounds, digests, chunks


def _output_table(source: _Source, *, raw: list[str], text: list[str], dataset: str,
                  target_lang: str) -> pd.DataFrame:
    rows, n = source.rows, len(source.texts)
    out = pd.DataFrame({
        "dataset": [dataset] * n,
        "split": rows["split"].tolist(),
        "image_id": source.image_ids,
        "lang": [target_lang] * n,
        "caption_idx": source.caption_idx,
        "raw": raw,
        "text": text,
    }, columns=CAPTION_COLUMNS)
    out["caption_idx"] = out["caption_idx"].astype(rows["caption_idx"].dtype)
    return out


def translate_captions(captions: str | os.PathLike, output: str | os.PathLike, *, model_dir: str | os.PathLike,
                       source_lang: str, target_lang: str, dataset: str | None = None,
                       settings: TranslateSettings, case: str | None = None,
                       truecase_model: str | os.PathLike | None = None,
                       tokenizer: tuple[str, Path | None] | None = None,
                       chunk_dir: str | os.PathLike | None = None, sidecar: str | os.PathLike | None = None,
                       command: str | None = None, progress: bool = True) -> TranslationRun:
    """The ``translate-captions`` step, for either of two inputs.

    A **caption table** (Parquet, recognised by its ``.parquet`` suffix or magic bytes): the
    ``raw`` text of every ``source_lang`` row is translated (in table order) and ``output`` (a
    ``.parquet`` path) gets a caption table with one row per such row: same ``split``,
    ``image_id`` and ``caption_idx``, ``dataset`` = ``dataset`` (required), ``lang`` =
    ``target_lang``, ``raw`` = the detokenised translation, ``text`` = its Moses preparation
    (``case`` as in ``prepare-captions``; default lowercase).

    **Plain text** (anything else: UTF-8, one sentence per line, gzip-compressed or not): every
    line is translated and ``output`` gets one translation per line, aligned line for line (an
    empty line gives an empty line; gzip-compressed when ``output`` ends in ``.gz``). The lines
    are the detokenised translations, or their Moses preparation when ``case`` is given;
    ``dataset`` is not used.

    A JSON sidecar (default: ``output`` with suffix ``.json``) records the model, settings,
    command and counts; it is written before the output, and both atomically. Chunks of
    ``settings.chunk_size`` sentences are kept in ``chunk_dir`` (default ``output + ".chunks"``)
    until the output is written, then removed; a killed run resumes from them. CTranslate2
    translates chunk *k+1* in a background thread while this thread prepares and stores chunk *k*.
    """
    started = time.time()
    captions, output = Path(captions), Path(output)
    if not captions.is_file():
        raise FileNotFoundError(f"captions not found: {captions} (a caption table .parquet or a text "
                                "file, one sentence per line)")
    table = is_caption_table(captions)
    sidecar = Path(sidecar) if sidecar is not None else output.with_suffix(".json")
    if sidecar == output:
        raise ValueError(f"the sidecar {sidecar} would overwrite the output")
    chunk_dir = Path(chunk_dir) if chunk_dir is not None else output.with_name(output.name + ".chunks")
    truecase_model = Path(truecase_model) if truecase_model is not None else None
    _check_arguments(captions, output, table=table, source_lang=source_lang, target_lang=target_lang,
                     dataset=dataset, case=case, truecase_model=truecase_model)
    if table and case is None:
        case = "lowercase"
    model = open_model_dir(model_dir)
    model.check_languages(source_lang, target_lang)
    source = _read_table(captions, source_lang) if table else _read_text(captions)

    device, _, compute = ctranslate2_device(settings)
    fingerprint = translation_fingerprint(model, settings, device=device, compute=compute,
                                          source_lang=source_lang, target_lang=target_lang,
                                          case=case or "raw", truecase_model=truecase_model,
                                          tokenizer=tokenizer)
    bounds, digests, chunks = _stored_chunks(source, settings=settings, chunk_dir=chunk_dir,
                                             fingerprint=fingerprint)
    reused = len(chunks)
    pending = [k for k in range(len(bounds)) if k not in chunks]
    if reused:
        log.info("reusing %d of %d chunks from %s; %d sentences to translate", reused, len(bounds),
                 chunk_dir, sum(bounds[k][1] - bounds[k][0] for k in pending))
    if pending:
        _run_pending(pending, bounds=bounds, digests=digests, texts=source.texts, chunks=chunks, model=model,
                     source_lang=source_lang,
                     settings=settings, chunk_dir=chunk_dir, fingerprint=fingerprint,
                     target_lang=target_lang, case=case, truecase_model=truecase_model, progress=progress,
                     tokenizer=tokenizer)

    ordered = [chunks[k] for k in range(len(bounds))]
    raw = [t for c in ordered for t in c.raw]
    text = [t for c in ordered for t in c.text]
    lost = empty_translations(source.texts, raw)
    run = TranslationRun(rows=len(source.texts), empty=sum(c.empty for c in ordered), empty_output=len(lost),
                         truncated=sum(c.truncated for c in ordered),
                         target_tokens=sum(c.target_tokens for c in ordered),
                         computed_chunks=len(pending), reused_chunks=reused,
                         seconds=round(time.time() - started, 3))
    if run.truncated:
        first = next(c.first_truncated for c in ordered if c.first_truncated is not None)
        log.warning("%d sentence(s) longer than translation.translate.max_input_tokens=%d subword "
                    "tokens were truncated before translation (first: %s)",
                    run.truncated, settings.max_input_tokens, source.describe(first))
    if lost:
        log.warning("%d of %d translations are empty once the model's special and language tokens "
                    "are dropped (first: %s); they are kept as empty captions (a model trains on one "
                    "as a single padding step), and a table with more than %s of its captions empty "
                    "is refused where it is read: check the model and its language codes",
                    len(lost), run.rows, source.describe(lost[0]), f"{MAX_EMPTY_CAPTION_SHARE:.0%}")
    write_json_atomic(sidecar, {
        "model_id": model.model_id, "model_dir": str(model.path), "model": model.info,
        "captions": str(captions), "input": "table" if table else "text", "output": str(output),
        "dataset": dataset if table else None, "source_lang": source_lang, "target_lang": target_lang,
        "settings": settings.to_dict(), "device": device, "compute_type": compute, "case": case,
        "truecase_model": None if truecase_model is None else str(truecase_model),
        "command": command, "fingerprint": fingerprint, "counts": asdict(run),
        "versions": _library_versions(),
    })
    if table:
        write_parquet_atomic(output, _output_table(source, raw=raw, text=text, dataset=dataset,
                                                   target_lang=target_lang))
    else:
        write_text_lines(output, text)
    remove_chunks(chunk_dir)
    log.info("wrote %s: %d %s translations of %s %s (%d empty, %d truncated; %d chunks computed, "
             "%d reused; %.1f s)", output, run.rows, target_lang, source_lang,
             "captions" if table else "lines", run.empty, run.truncated, run.computed_chunks,
             run.reused_chunks, run.seconds)
    return run


def _run_pending(pending: list[int], *, bounds, digests, texts, chunks, model: ModelDir, source_lang: str,
                 settings: TranslateSettings, chunk_dir: Path, fingerprint: str, target_lang: str,
                 case: str | None, truecase_model: Path | None, progress: bool,
                 tokenizer: tuple[str, Path | None] | None = None) -> None:
    """Translate the pending chunks in a background thread and prepare (``case`` None: keep the
    raw translations) and store them here."""
    from tqdm import tqdm

    # Start the preparation pool before the translator's threads exist (spawned workers).
    with preparer(workers=settings.prepare_workers, lang=target_lang, case=case,
                   truecase_model=truecase_model, tokenizer=tokenizer) as prepare:
        translator = load_translator(model, settings)
        handoff: queue.Queue = queue.Queue(maxsize=1)
        stop = threading.Event()

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    handoff.put(item, timeout=0.2)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for k in pending:
                    if stop.is_set():
                        return
                    lo, hi = bounds[k]
                    raw, stats = translate_texts(translator, model, texts[lo:hi], settings=settings, row_offset=lo,
                                                 source_lang=source_lang, target_lang=target_lang)
                    if not put((k, raw, stats)):
                        return
                put(_DONE)
            except BaseException as err:  # noqa: BLE001 — handed to the main thread
                put(err)

        worker = threading.Thread(target=produce, name="ctranslate2-producer", daemon=True)
        total = sum(bounds[k][1] - bounds[k][0] for k in pending)
        bar = tqdm(total=total, desc="translate", unit="caption", disable=not progress, dynamic_ncols=True)
        worker.start()
        try:
            while True:
                item = handoff.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                k, raw, stats = item
                lo, hi = bounds[k]
                chunk = ChunkResult(index=k, start=lo, stop=hi, raw=raw, text=prepare(raw), **stats)
                _write_chunk(chunk_dir, chunk, fingerprint=fingerprint, source_sha256=digests[k])
                chunks[k] = chunk
                bar.update(hi - lo)
                log.debug("chunk %d (%d captions) stored", k, hi - lo)
        finally:
            stop.set()
            bar.close()
            worker.join()
            del translator


def _command_line() -> str:
    return " ".join(shlex.quote(a) for a in ["pseudopairs", *sys.argv[1:]])


def settings_from_args(args: argparse.Namespace) -> TranslateSettings:
    """``--settings`` with ``--threads`` (the cores the scheduler granted) turned into
    ``intra_threads`` = threads // inter_threads."""
    values = dict(args.settings)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        inter = values.get("inter_threads", TranslateSettings.inter_threads)
        values["intra_threads"] = max(1, args.threads // inter if _is_int(inter) and inter > 0 else args.threads)
    return TranslateSettings.from_dict(values)


def add_translate_options(p: argparse.ArgumentParser) -> None:
    """``--settings`` (translation.translate) and ``--threads``, shared with ``score-mt``."""
    commands.add_json(p, "--settings", "the translation.translate config section", required=False)
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads: sets intra_threads to threads // inter_threads")


def _cmd_translate_captions(args: argparse.Namespace) -> int:
    from pseudopairs.data.text import parse_truecase_models
    from pseudopairs.data.tokenizers import parse_tokenizers

    settings = settings_from_args(args)
    tokenizers = parse_tokenizers(args.tokenizer)
    if set(tokenizers) - {args.target_lang}:
        raise ValueError(f"--tokenizer for {sorted(set(tokenizers) - {args.target_lang})}: only the "
                         f"target language ({args.target_lang}) is prepared here")
    models = parse_truecase_models(args.truecase_model)
    unknown = sorted(set(models) - {args.target_lang})
    if unknown:
        raise ValueError(f"--truecase-model for {unknown}: only the target language "
                         f"({args.target_lang}) is prepared here")
    run = translate_captions(args.captions, args.output, model_dir=args.model,
                             source_lang=args.source_lang, target_lang=args.target_lang,
                             dataset=args.dataset, settings=settings, case=args.case,
                             truecase_model=models.get(args.target_lang),
                             tokenizer=tokenizers.get(args.target_lang), chunk_dir=args.chunk_dir,
                             sidecar=args.sidecar, command=_command_line(),
                             progress=not args.no_progress)
    print(f"translate-captions: {run.rows} sentences ({run.empty} empty, {run.empty_output} translated to "
          f"nothing, {run.truncated} truncated) "
          f"-> {args.output}")
    return 0


_DESCRIPTION = """\
Translate captions with a converted model (convert-mt). Resumable in chunks; a JSON sidecar
records the model, settings and counts.

Two kinds of input (--captions):
  caption table  a .parquet caption table (columns dataset, split, image_id, lang, caption_idx,
                 raw, text): every --source-lang row is translated; --output is a .parquet
                 caption table aligned row for row with those rows (same split, image_id,
                 caption_idx; dataset = --dataset, lang = --target-lang), raw = the translation,
                 text = its Moses preparation (--case, default lowercase), as for other captions.
  plain text     any other file: UTF-8, one sentence per line, optionally gzip-compressed
                 (recognised by content): --output is a plain text file with one translation per
                 line, aligned line for line (gzip-compressed if it ends in .gz); the detokenised
                 translations, or their Moses preparation when --case is given. --dataset unused.
"""


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "translate-captions", _cmd_translate_captions,
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="converted model directory (convert-mt)")
    p.add_argument("--captions", required=True,
                   help="caption table (.parquet) or plain text, one sentence per line (optionally .gz)")
    p.add_argument("--source-lang", required=True)
    p.add_argument("--target-lang", required=True)
    p.add_argument("--dataset", default=None,
                   help="data set name of the translations (e.g. coco.de-mt); required for a caption table")
    p.add_argument("--output", required=True,
                   help="a caption table (.parquet) for a table input; a text file for text input "
                        "(gzip-compressed when it ends in .gz)")
    add_translate_options(p)
    p.add_argument("--case", default=None,
                   help="lowercase or truecase, as prepare-captions (tables: default lowercase; "
                        "text: default none, i.e. the detokenised translations)")
    p.add_argument("--truecase-model", action="append", default=[], metavar="LANG=PATH",
                   help="truecase model of the target language (with --case truecase)")
    from pseudopairs.data.tokenizers import add_tokenizer_option

    add_tokenizer_option(p)
    p.add_argument("--sidecar", default=None, help="JSON sidecar (default: the output with suffix .json)")
    p.add_argument("--chunk-dir", default=None, help="resumable chunks (default: {output}.chunks/)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
