"""Resumable chunks of ``translate-captions``."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Sequence

from pseudopairs.core.io import remove_owned_files, write_text_atomic
from pseudopairs.translation.convert import ModelDir
from pseudopairs.translation.settings import TranslateSettings
from pseudopairs.translation.text import sha256_file

log = logging.getLogger(__name__)


#: Bump when a change makes stored translation chunks wrong.
_CODE_VERSION = 1


@dataclass
class ChunkResult:
    index: int
    start: int
    stop: int
    raw: list[str]
    text: list[str]
    empty: int
    truncated: int
    target_tokens: int
    first_truncated: int | None = None  # row (within the source-language rows) of the first one


def _chunk_path(chunk_dir: Path, index: int) -> Path:
    return chunk_dir / f"chunk-{index:06d}.json"


def _source_digest(image_ids: Sequence, caption_idx: Sequence, texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for image_id, idx, text in zip(image_ids, caption_idx, texts):
        digest.update(f"{image_id}\x1f{idx}\x1f{text}\x1e".encode("utf-8"))
    return digest.hexdigest()


def _write_chunk(chunk_dir: Path, chunk: ChunkResult, *, fingerprint: str, source_sha256: str) -> None:
    payload = {"version": _CODE_VERSION, "fingerprint": fingerprint, "source_sha256": source_sha256,
               **asdict(chunk)}
    write_text_atomic(_chunk_path(chunk_dir, chunk.index), json.dumps(payload, ensure_ascii=False))


def _read_chunk(chunk_dir: Path, index: int, *, start: int, stop: int, fingerprint: str,
                source_sha256: str) -> ChunkResult | None:
    path = _chunk_path(chunk_dir, index)
    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        chunk = ChunkResult(**{f.name: payload[f.name] for f in fields(ChunkResult)})
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("ignoring unreadable chunk %s (%s)", path, err)
        return None
    if (payload.get("version") != _CODE_VERSION or payload.get("fingerprint") != fingerprint
            or payload.get("source_sha256") != source_sha256 or chunk.start != start or chunk.stop != stop
            or len(chunk.raw) != stop - start or len(chunk.text) != stop - start):
        return None
    return chunk


def remove_chunks(chunk_dir: Path) -> None:
    """Delete our chunk files (and their temporaries), then the directory if it is empty."""
    remove_owned_files(chunk_dir, owned=lambda name: name.startswith(("chunk-", ".chunk-")) and ".json" in name)


def translation_fingerprint(model: ModelDir, settings: TranslateSettings, *, device: str, compute: str,
                            source_lang: str, target_lang: str, case: str,
                            truecase_model: Path | None, tokenizer: tuple[str, Path | None] | None = None) -> str:
    """Hash of everything that changes the stored chunks: the model (its description and the
    SHA-256 of ``model.bin``), decoding settings, batch size (it changes batch composition),
    chunk size (it changes the chunk bounds), device kind and compute type, the CTranslate2
    version and the text preparation. Not the thread counts."""
    import ctranslate2

    payload = {
        "code": _CODE_VERSION,
        "model": model.info,
        "model_bin": sha256_file(model.path / "model.bin"),
        "source_lang": source_lang,
        "target_lang": target_lang,
        "beam_size": settings.beam_size,
        "length_penalty": settings.length_penalty,
        "max_decoding_length": settings.max_decoding_length,
        "max_input_tokens": settings.max_input_tokens,
        "max_batch_size": settings.max_batch_size,
        "chunk_size": settings.chunk_size,
        "device": device,
        "compute_type": compute,
        "ctranslate2": ctranslate2.__version__,
        "case": case,
        "truecase_model": None if truecase_model is None else sha256_file(truecase_model),
    }
    if tokenizer is not None:  # a language Moses has no rules for (pseudopairs.data.tokenizers)
        kind, model = tokenizer
        payload["tokenizer"] = [kind, None if model is None else sha256_file(model)]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
