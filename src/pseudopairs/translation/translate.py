"""The ``translate-captions`` step."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
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

from pseudopairs import cli
from pseudopairs.io import CAPTION_COLUMNS, read_captions, write_json_atomic, write_parquet_atomic
from pseudopairs.translation.chunks import (ChunkResult, _read_chunk, _source_digest, _write_chunk,
                                            remove_chunks, translation_fingerprint)
from pseudopairs.translation.convert import ModelDir, open_model_dir
from pseudopairs.translation.settings import TranslateSettings, _is_int
from pseudopairs.settings import resolve_device as settings_device
from pseudopairs.translation.text import _library_versions


log = logging.getLogger(__name__)


def resolve_device(settings: TranslateSettings) -> tuple[str, str]:
    """(device, compute type) for CTranslate2: ``auto`` picks CUDA when CTranslate2 sees a GPU;
    compute type ``auto`` is int8 on CPU and float16 on CUDA. Unsupported types are errors."""
    import ctranslate2

    device = settings_device(settings.device, key="translation.translate.device (CTranslate2 must "
                             "see the GPU: is its CUDA 12 cuBLAS on the library path?)",
                             cuda_count=ctranslate2.get_cuda_device_count)
    if device == "cuda":
        preload_cuda12_cublas()
    compute = settings.compute_type
    if compute == "auto":
        compute = "int8" if device == "cpu" else "float16"
    if compute != "default":
        supported = ctranslate2.get_supported_compute_types(device, settings.device_index)
        if compute not in supported:
            raise ValueError(f"translation.translate.compute_type: {compute!r} is not supported on "
                             f"{device} here (supported: {sorted(supported)})")
    return device, compute


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

    device, compute = resolve_device(settings)
    try:
        return ctranslate2.Translator(str(model.path), device=device, device_index=settings.device_index,
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
                    row_offset: int = 0) -> tuple[list[str], dict[str, Any]]:
    """Translate raw sentences in order with ``translate_iterable``: SentencePiece encoding,
    truncation at ``max_input_tokens``, token-based batches, SentencePiece decoding. Empty (or
    whitespace-only) sentences translate to ``""`` without reaching the model. Returns the
    translations and counts (``empty``, ``truncated``, ``first_truncated``, ``target_tokens``)."""
    stripped = [t.strip() for t in texts]
    pieces = model.source_tokenizer.encode(stripped)
    todo = [i for i, p in enumerate(pieces) if p]
    truncated = [i for i in todo if len(pieces[i]) > settings.max_input_tokens]
    for i in truncated:
        pieces[i] = pieces[i][:settings.max_input_tokens]
    outputs: list[list[str]] = [[] for _ in texts]
    if todo:
        results = translator.translate_iterable((pieces[i] for i in todo), **translation_options(settings))
        for i, result in zip(todo, results):
            outputs[i] = result.hypotheses[0]
    stats = {"empty": len(texts) - len(todo), "truncated": len(truncated),
             "first_truncated": (row_offset + truncated[0]) if truncated else None,
             "target_tokens": sum(len(o) for o in outputs)}
    return model.target_tokenizer.decode(outputs), stats


@contextlib.contextmanager
def _preparer(*, workers: int, lang: str, case: str, truecase_model: Path | None):
    """A function ``raw translations -> prepared text`` (Moses preparation via
    :func:`pseudopairs.data.text.prepare_captions`), in this process or in a pool of ``workers``."""
    if workers <= 0:
        truecasers = _load_truecasers(lang, case, truecase_model)

        def prepare(raws: list[str]) -> list[str]:
            return _prepare_texts(raws, lang=lang, case=case, truecasers=truecasers)

        yield prepare
        return
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        def prepare(raws: list[str]) -> list[str]:
            size = max(1, math.ceil(len(raws) / workers))
            parts = [raws[i:i + size] for i in range(0, len(raws), size)]
            jobs = [pool.submit(_prepare_in_worker, part, lang, case,
                                None if truecase_model is None else str(truecase_model)) for part in parts]
            return [text for job in jobs for text in job.result()]

        yield prepare


def _load_truecasers(lang: str, case: str, truecase_model: Path | None) -> dict:
    from pseudopairs.data.text import load_truecaser

    if case == "truecase":
        if truecase_model is None:
            raise ValueError(f"case=truecase needs a truecase model for {lang!r} (--truecase-model {lang}=PATH)")
        return {lang: load_truecaser(truecase_model)}
    return {}


def _prepare_texts(raws: list[str], *, lang: str, case: str, truecasers: dict) -> list[str]:
    from pseudopairs.data.text import prepare_captions

    frame = pd.DataFrame({"raw": raws, "lang": [lang] * len(raws)})
    return prepare_captions(frame, case=case, truecasers=truecasers, source="translations")["text"].tolist()


_WORKER_TRUECASERS: dict = {}


def _prepare_in_worker(raws: list[str], lang: str, case: str, truecase_model: str | None) -> list[str]:
    key = (lang, case, truecase_model)
    if key not in _WORKER_TRUECASERS:
        _WORKER_TRUECASERS[key] = _load_truecasers(lang, case, None if truecase_model is None else Path(truecase_model))
    return _prepare_texts(raws, lang=lang, case=case, truecasers=_WORKER_TRUECASERS[key])


@dataclass
class TranslationRun:
    rows: int
    empty: int
    truncated: int
    target_tokens: int
    computed_chunks: int
    reused_chunks: int
    seconds: float


_DONE = object()


def translate_captions(captions: str | os.PathLike, output: str | os.PathLike, *, model_dir: str | os.PathLike,
                       source_lang: str, target_lang: str, dataset: str, settings: TranslateSettings,
                       case: str = "lowercase", truecase_model: str | os.PathLike | None = None,
                       chunk_dir: str | os.PathLike | None = None, sidecar: str | os.PathLike | None = None,
                       command: str | None = None, progress: bool = True) -> TranslationRun:
    """The ``translate-captions`` step.

    Translates the ``raw`` text of every ``source_lang`` row of the caption table ``captions``
    (in table order) and writes a caption table to ``output`` with one row per such row: same
    ``split``, ``image_id`` and ``caption_idx``, ``dataset`` = ``dataset``, ``lang`` =
    ``target_lang``, ``raw`` = the detokenised translation, ``text`` = its Moses preparation
    (``case`` as in ``prepare-captions``). A JSON sidecar (default: ``output`` with suffix
    ``.json``) records the model, settings, command and counts; it is written before the table,
    and both atomically. Chunks of ``settings.chunk_size`` captions are kept in ``chunk_dir``
    (default ``output + ".chunks"``) until the table is written, then removed.

    CTranslate2 translates chunk *k+1* in a background thread while this thread prepares and
    stores chunk *k*.
    """
    from pseudopairs.data.text import _check_lang  # noqa: PLC2701 — the package's language-code rule

    started = time.time()
    captions = Path(captions)
    output = Path(output)
    if output.suffix != ".parquet":
        raise ValueError(f"--output must be a .parquet caption table, got {output}")
    sidecar = Path(sidecar) if sidecar is not None else output.with_suffix(".json")
    if sidecar == output:
        raise ValueError(f"the sidecar {sidecar} would overwrite the output table")
    chunk_dir = Path(chunk_dir) if chunk_dir is not None else output.with_name(output.name + ".chunks")
    _check_lang(source_lang)
    _check_lang(target_lang)
    if not isinstance(dataset, str) or not dataset.strip():
        raise ValueError("--dataset must name the data set of the translations (e.g. coco.de-mt)")
    truecase_model = Path(truecase_model) if truecase_model is not None else None
    if case == "truecase" and truecase_model is None:
        raise ValueError(f"--case truecase needs --truecase-model {target_lang}=PATH")
    if case != "truecase" and truecase_model is not None:
        raise ValueError("--truecase-model is only used with --case truecase")
    if truecase_model is not None and not truecase_model.is_file():
        raise FileNotFoundError(f"truecase model not found: {truecase_model}")

    if not captions.is_file():
        raise FileNotFoundError(f"caption table not found: {captions}")
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
    image_ids = rows["image_id"].tolist()
    caption_idx = rows["caption_idx"].tolist()

    model = open_model_dir(model_dir)
    device, compute = resolve_device(settings)
    fingerprint = translation_fingerprint(model, settings, device=device, compute=compute,
                                          source_lang=source_lang, target_lang=target_lang,
                                          case=case, truecase_model=truecase_model)
    n = len(texts)
    size = settings.chunk_size
    bounds = [(lo, min(n, lo + size)) for lo in range(0, n, size)]
    digests = [_source_digest(image_ids[lo:hi], caption_idx[lo:hi], texts[lo:hi]) for lo, hi in bounds]
    chunks: dict[int, ChunkResult] = {}
    for k, (lo, hi) in enumerate(bounds):
        stored = _read_chunk(chunk_dir, k, start=lo, stop=hi, fingerprint=fingerprint, source_sha256=digests[k])
        if stored is not None:
            chunks[k] = stored
    reused = len(chunks)
    pending = [k for k in range(len(bounds)) if k not in chunks]
    if reused:
        log.info("reusing %d of %d chunks from %s; %d captions to translate", reused, len(bounds),
                 chunk_dir, sum(bounds[k][1] - bounds[k][0] for k in pending))

    if pending:
        _run_pending(pending, bounds=bounds, digests=digests, texts=texts, chunks=chunks, model=model,
                     settings=settings, chunk_dir=chunk_dir, fingerprint=fingerprint,
                     target_lang=target_lang, case=case, truecase_model=truecase_model, progress=progress)

    ordered = [chunks[k] for k in range(len(bounds))]
    raw = [t for c in ordered for t in c.raw]
    text = [t for c in ordered for t in c.text]
    run = TranslationRun(rows=n, empty=sum(c.empty for c in ordered),
                         truncated=sum(c.truncated for c in ordered),
                         target_tokens=sum(c.target_tokens for c in ordered),
                         computed_chunks=len(pending), reused_chunks=reused,
                         seconds=round(time.time() - started, 3))
    if run.truncated:
        first = next(c.first_truncated for c in ordered if c.first_truncated is not None)
        log.warning("%d caption(s) longer than translation.translate.max_input_tokens=%d subword "
                    "tokens were truncated before translation (first: image %r caption %s)",
                    run.truncated, settings.max_input_tokens, image_ids[first], caption_idx[first])
    out = pd.DataFrame({
        "dataset": [dataset] * n,
        "split": rows["split"].tolist(),
        "image_id": image_ids,
        "lang": [target_lang] * n,
        "caption_idx": caption_idx,
        "raw": raw,
        "text": text,
    }, columns=CAPTION_COLUMNS)
    out["caption_idx"] = out["caption_idx"].astype(rows["caption_idx"].dtype)
    write_json_atomic(sidecar, {
        "model_id": model.model_id,
        "model_dir": str(model.path),
        "model": model.info,
        "captions": str(captions),
        "output": str(output),
        "dataset": dataset,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "settings": settings.to_dict(),
        "device": device,
        "compute_type": compute,
        "case": case,
        "truecase_model": None if truecase_model is None else str(truecase_model),
        "command": command,
        "fingerprint": fingerprint,
        "counts": asdict(run),
        "versions": _library_versions(),
    })
    write_parquet_atomic(output, out)
    remove_chunks(chunk_dir)
    log.info("wrote %s: %d %s translations of %s captions (%d empty, %d truncated; %d chunks "
             "computed, %d reused; %.1f s)", output, n, target_lang, source_lang, run.empty,
             run.truncated, run.computed_chunks, run.reused_chunks, run.seconds)
    return run


def _run_pending(pending: list[int], *, bounds, digests, texts, chunks, model: ModelDir,
                 settings: TranslateSettings, chunk_dir: Path, fingerprint: str, target_lang: str,
                 case: str, truecase_model: Path | None, progress: bool) -> None:
    """Translate the pending chunks in a background thread and prepare/store them here."""
    from tqdm import tqdm

    # Start the preparation pool before the translator's threads exist (spawned workers).
    with _preparer(workers=settings.prepare_workers, lang=target_lang, case=case,
                   truecase_model=truecase_model) as prepare:
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
                    raw, stats = translate_texts(translator, model, texts[lo:hi], settings=settings, row_offset=lo)
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


def _cmd_translate_captions(args: argparse.Namespace) -> int:
    from pseudopairs.data.text import CASES, parse_truecase_models

    values = dict(args.settings)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        inter = values.get("inter_threads", TranslateSettings.inter_threads)
        values["intra_threads"] = max(1, args.threads // inter if _is_int(inter) and inter > 0 else args.threads)
    settings = TranslateSettings.from_dict(values)
    if args.case not in CASES:
        raise ValueError(f"--case must be one of {list(CASES)}")
    models = parse_truecase_models(args.truecase_model)
    unknown = sorted(set(models) - {args.target_lang})
    if unknown:
        raise ValueError(f"--truecase-model for {unknown}: only the target language "
                         f"({args.target_lang}) is prepared here")
    run = translate_captions(args.captions, args.output, model_dir=args.model,
                             source_lang=args.source_lang, target_lang=args.target_lang,
                             dataset=args.dataset, settings=settings, case=args.case,
                             truecase_model=models.get(args.target_lang), chunk_dir=args.chunk_dir,
                             sidecar=args.sidecar, command=_command_line(),
                             progress=not args.no_progress)
    print(f"translate-captions: {run.rows} captions ({run.empty} empty, {run.truncated} truncated) "
          f"-> {args.output}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "translate-captions", help=cli.COMMANDS["translate-captions"].summary,
        description="Translate every source-language caption of a caption table with a converted "
                    "model; the output table is aligned row for row with those captions and gets the "
                    "same Moses preparation as other captions. Resumable in chunks.")
    p.add_argument("--model", required=True, help="converted model directory (convert-mt)")
    p.add_argument("--captions", required=True, help="caption table (.parquet)")
    p.add_argument("--source-lang", required=True)
    p.add_argument("--target-lang", required=True)
    p.add_argument("--dataset", required=True, help="data set name of the translations (e.g. coco.de-mt)")
    p.add_argument("--output", required=True, help="translated caption table (.parquet)")
    cli.add_json(p, "--settings", "the translation.translate config section", required=False)
    p.add_argument("--case", default="lowercase", help="lowercase (default) or truecase, as prepare-captions")
    p.add_argument("--truecase-model", action="append", default=[], metavar="LANG=PATH",
                   help="truecase model of the target language (with --case truecase)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads: sets intra_threads to threads // inter_threads")
    p.add_argument("--sidecar", default=None, help="JSON sidecar (default: the output with suffix .json)")
    p.add_argument("--chunk-dir", default=None, help="resumable chunks (default: {output}.chunks/)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_translate_captions)
