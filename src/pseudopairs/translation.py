"""Machine translation of captions (paper §2.3, §6): train a demo model, convert it (or the
published OpenNMT-py model) with CTranslate2, translate every source-language caption.

Three step commands:

``train-mt``
    Trains a small Transformer (:mod:`pseudopairs.mt_model`) on any parallel plain-text files,
    with a shared SentencePiece model trained on the training text, and writes the checkpoint in
    OpenNMT-py's layout (``model.pt``), ``sentencepiece.model``, ``bleu.json`` (sacreBLEU of
    greedy translations of the held-out pairs), ``valid.hyp.txt``, ``train_log.csv`` and
    ``settings.json``. Seeded and deterministic on CPU for a given thread count.

``convert-mt``
    Converts an OpenNMT-py checkpoint with CTranslate2's own ``OpenNMTPyConverter`` (weights-only
    unpickling, ``argparse.Namespace`` allow-listed). Checkpoints of OpenNMT-py 1.x/2.x, whose
    vocabularies are pickled torchtext/onmt objects, are first re-saved in the 3.x layout by a
    restricted unpickler that never imports or calls those classes (:func:`load_checkpoint`); the
    re-saved file then goes through the very same converter call. The output directory gets the
    SentencePiece model(s) and ``pseudopairs_mt.json`` (model id, source checkpoint and its
    SHA-256, quantization, converter version), so translation needs nothing else.

``translate-captions``
    Translates every source-language caption of a caption table with ``Translator.
    translate_iterable`` (token-based batches), detokenises with the model's SentencePiece model
    and applies the same Moses preparation as every other caption
    (:func:`pseudopairs.text.prepare_captions`). The output is a caption table aligned row for row
    with the source-language rows of the input, plus a JSON sidecar. Work is done in chunks kept
    under ``OUT.chunks/`` with a fingerprint of everything that changes the output, so a killed job
    resumes; CTranslate2 batches never cross chunk boundaries, so a resumed run writes the same
    table as an uninterrupted one.

The real model (:data:`PAPER_MODEL_URL`) is OpenNMT-py's pretrained English→German Transformer:
see :func:`paper_model_source`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import hashlib
import io
import json
import logging
import math
import os
import pickle
import queue
import shlex
import shutil
import sys
import tempfile
import threading
import time
import types
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from pseudopairs.io import (CAPTION_COLUMNS, atomic_directory, parse_json_object, read_captions, remove_owned_files, write_json_atomic,
                            write_parquet_atomic, write_text_atomic)

log = logging.getLogger(__name__)

#: Bump when a change makes stored translation chunks wrong.
_CODE_VERSION = 1
MODEL_INFO = "pseudopairs_mt.json"
SHARED_TOKENIZER = "sentencepiece.model"
SOURCE_TOKENIZER = "source.sentencepiece.model"
TARGET_TOKENIZER = "target.sentencepiece.model"
#: The published OpenNMT-py English→German Transformer (archive: averaged-10-epoch.pt and
#: sentencepiece.model at its root). Its checksum lives in checksums.json (null: none published).
PAPER_MODEL_URL = "https://s3.amazonaws.com/opennmt-models/transformer-ende-wmt-pyOnmt.tar.gz"
PAPER_MODEL_CHECKPOINT = "averaged-10-epoch.pt"
PAPER_MODEL_TOKENIZER = "sentencepiece.model"
#: Weight types ``convert-mt --quantization`` accepts ("none" keeps the checkpoint's float32).
QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16", "float32")
COMPUTE_TYPES = ("auto", "default", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                 "int16", "float16", "bfloat16", "float32")


def paper_model_source() -> dict[str, Any]:
    """Where the paper configuration's translation model comes from.

    OpenNMT-py's pretrained WMT English→German Transformer (base: 6+6 layers, d=512, 8 heads,
    ff 2048; shared SentencePiece vocabulary; newstest2014 BLEU 26.89, newstest2017 28.09 as
    published on opennmt.net/Models-py). The archive holds ``averaged-10-epoch.pt`` (an OpenNMT-py
    2.x checkpoint whose vocabulary is pickled torchtext fields, read by :func:`load_checkpoint`)
    and ``sentencepiece.model``. No checksum is published; ``sha256`` is the value recorded in
    ``checksums.json`` (null until someone records the one of a verified download).
    """
    from pseudopairs.download import known_checksum

    entry = known_checksum(PAPER_MODEL_URL) or {}
    return {
        "url": PAPER_MODEL_URL,
        "sha256": entry.get("sha256"),
        "size": entry.get("size"),
        "checkpoint": PAPER_MODEL_CHECKPOINT,
        "tokenizer": PAPER_MODEL_TOKENIZER,
        "source_lang": "en",
        "target_lang": "de",
    }


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _Settings:
    """Shared ``from_dict`` / ``to_dict`` for the settings dataclasses below."""

    SECTION = ""

    def _bad(self, key: str, why: str) -> ValueError:
        return ValueError(f"{self.SECTION}.{key}: {why} (got {getattr(self, key)!r})")

    def _int(self, key: str, minimum: int, *, optional: bool = False, maximum: int | None = None) -> None:
        value = getattr(self, key)
        if optional and value is None:
            return
        if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise self._bad(key, f"must be {'null or ' if optional else ''}an integer {bound}")

    def _float(self, key: str, low: float, high: float | None = None, *, low_open: bool = False,
               high_open: bool = False) -> None:
        value = getattr(self, key)
        ok = _is_number(value) and (value > low if low_open else value >= low)
        if ok and high is not None:
            ok = value < high if high_open else value <= high
        if not ok:
            lo = "(" if low_open else "["
            hi = ")" if high_open else "]"
            raise self._bad(key, f"must be a number in {lo}{low}, {'inf' if high is None else high}{hi}")

    def _choice(self, key: str, choices: Sequence[str]) -> None:
        if getattr(self, key) not in choices:
            raise self._bad(key, f"must be one of {list(choices)}")

    @classmethod
    def from_dict(cls, values: dict | None):
        """Build from the config section (a JSON object); unknown keys are errors."""
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ValueError(f"{cls.SECTION} settings must be a JSON object, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{cls.SECTION}: unknown setting(s) "
                             f"{', '.join(cls.SECTION + '.' + k for k in unknown)}; known: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrainSettings(_Settings):
    """``translation.train``: the demo model trained by ``train-mt`` (defaults: CPU, minutes)."""

    SECTION = "translation.train"

    seed: int = 0
    threads: int | None = 2            # torch threads (null: leave torch's default)
    spm_vocab_size: int = 1000         # upper bound; a small corpus may give fewer pieces
    spm_model_type: str = "bpe"
    spm_character_coverage: float = 1.0
    max_tokens: int = 100              # training pairs longer than this (subword tokens) are dropped
    enc_layers: int = 2
    dec_layers: int = 2
    d_model: int = 128
    heads: int = 4
    ff: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.0     # dropout on attention weights is costly on CPU
    label_smoothing: float = 0.1
    batch_tokens: int = 1024           # padded tokens (longest side × pairs) per update
    epochs: int = 3
    max_steps: int | None = None       # stop earlier after this many updates
    lr: float = 1e-3                   # peak learning rate (after warm-up)
    warmup_steps: int = 300
    clip_norm: float = 1.0             # 0 disables clipping
    max_decoding_length: int = 256     # for the BLEU translations of the validation pairs
    log_every: int = 50

    def __post_init__(self) -> None:
        self._int("seed", 0)
        self._int("threads", 1, optional=True)
        self._int("spm_vocab_size", 8)
        self._choice("spm_model_type", ("bpe", "unigram", "char", "word"))
        self._float("spm_character_coverage", 0.9, 1.0)
        self._int("max_tokens", 1)
        self._int("enc_layers", 1)
        self._int("dec_layers", 1)
        self._int("d_model", 2)
        self._int("heads", 1)
        if self.d_model % 2:
            raise self._bad("d_model", "must be even (sinusoidal position encodings)")
        if self.d_model % self.heads:
            raise self._bad("heads", f"must divide translation.train.d_model ({self.d_model})")
        self._int("ff", 1)
        self._float("dropout", 0.0, 1.0, high_open=True)
        self._float("attention_dropout", 0.0, 1.0, high_open=True)
        self._float("label_smoothing", 0.0, 1.0, high_open=True)
        self._int("batch_tokens", 1)
        self._int("epochs", 1)
        self._int("max_steps", 1, optional=True)
        self._float("lr", 0.0, low_open=True)
        self._int("warmup_steps", 0)
        self._float("clip_norm", 0.0)
        self._int("max_decoding_length", 1)
        self._int("log_every", 1)


@dataclass(frozen=True)
class TranslateSettings(_Settings):
    """``translation.translate``: how ``translate-captions`` runs CTranslate2."""

    SECTION = "translation.translate"

    beam_size: int = 5
    length_penalty: float = 1.0
    max_decoding_length: int = 256     # target subword tokens
    max_input_tokens: int = 256        # source subword tokens; longer captions are truncated (logged)
    max_batch_size: int = 1024         # tokens per CTranslate2 batch (batch_type="tokens")
    device: str = "auto"               # auto | cpu | cuda
    device_index: int = 0
    compute_type: str = "auto"         # auto = int8 on CPU, float16 on CUDA; or a CTranslate2 type
    intra_threads: int = 0             # OpenMP threads per translator (0: CTranslate2's default)
    inter_threads: int = 1             # parallel translators (batches in flight)
    chunk_size: int = 5000             # captions per resumable chunk
    prepare_workers: int = 0           # processes for the Moses preparation (0: in this process)

    def __post_init__(self) -> None:
        self._int("beam_size", 1)
        self._float("length_penalty", 0.0)
        self._int("max_decoding_length", 1)
        self._int("max_input_tokens", 1)
        self._int("max_batch_size", 1)
        self._choice("device", ("auto", "cpu", "cuda"))
        self._int("device_index", 0)
        self._choice("compute_type", COMPUTE_TYPES)
        self._int("intra_threads", 0)
        self._int("inter_threads", 1)
        self._int("chunk_size", 1)
        self._int("prepare_workers", 0)
        if self.max_batch_size < self.max_input_tokens:
            raise self._bad("max_batch_size", "must be at least translation.translate.max_input_tokens "
                            f"({self.max_input_tokens}) so that the longest input fits in a batch")


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _library_versions() -> dict[str, str]:
    import ctranslate2
    import sacrebleu
    import sentencepiece

    return {"ctranslate2": ctranslate2.__version__, "sentencepiece": sentencepiece.__version__,
            "sacrebleu": sacrebleu.__version__}


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file without their line ends (``\\n`` only; a final newline is
    optional). Invalid UTF-8 or a NUL byte raises a ``ValueError`` naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"text file not found: {path}")
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: line {number}: invalid UTF-8 at byte {err.start}") from None
        if "\x00" in text:
            raise ValueError(f"{path}: line {number}: contains a NUL byte")
        out.append(text.rstrip("\r"))
    return out


def read_parallel(source: str | os.PathLike, target: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Two aligned plain-text files (one sentence per line); the line counts must agree."""
    src, tgt = read_text_lines(source), read_text_lines(target)
    if len(src) != len(tgt):
        raise ValueError(f"parallel files differ in length: {source} has {len(src)} lines, "
                         f"{target} has {len(tgt)}")
    return src, tgt


# --------------------------------------------------------------------------------------------
# Tokenisation (SentencePiece, the same code path for the demo and the published model)
# --------------------------------------------------------------------------------------------


class SentencePieceTokenizer:
    """A SentencePiece model used as the translation model's tokeniser: text → pieces → text."""

    def __init__(self, path: str | os.PathLike) -> None:
        import sentencepiece as spm

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"SentencePiece model not found: {self.path}")
        processor = spm.SentencePieceProcessor()
        try:
            processor.Load(str(self.path))
        except (OSError, RuntimeError) as err:
            raise ValueError(f"{self.path}: not a SentencePiece model ({err})") from err
        self.processor = processor

    def encode(self, texts: Sequence[str]) -> list[list[str]]:
        return self.processor.encode(list(texts), out_type=str)

    def decode(self, pieces: Sequence[Sequence[str]]) -> list[str]:
        return [self.processor.decode(list(p)) if p else "" for p in pieces]

    def pieces(self) -> list[str]:
        """Every piece except the unknown and control symbols, in id order."""
        sp = self.processor
        return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                if not (sp.is_unknown(i) or sp.is_control(i))]


def train_sentencepiece(lines: Iterable[str], *, vocab_size: int, model_type: str,
                        character_coverage: float) -> bytes:
    """Train a SentencePiece model on ``lines`` (one thread, input order kept: deterministic) and
    return the serialised model. ``hard_vocab_limit`` is off, so a small corpus gets fewer pieces
    instead of an error; ``<unk>`` is id 0 and there are no BOS/EOS/PAD pieces (the translation
    model has its own)."""
    import sentencepiece as spm

    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError("no non-empty training text for the SentencePiece model")
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=buffer, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage, hard_vocab_limit=False,
            unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, num_threads=1,
            shuffle_input_sentence=False, input_sentence_size=0, minloglevel=2)
    except RuntimeError as err:
        raise ValueError(f"SentencePiece training failed: {err}") from err
    return buffer.getvalue()


def model_vocabulary(tokenizer: SentencePieceTokenizer) -> list[str]:
    """OpenNMT-py vocabulary for a SentencePiece model: the four specials, then every piece."""
    from pseudopairs.mt_model import SPECIALS

    seen = set(SPECIALS)
    vocab = list(SPECIALS)
    for piece in tokenizer.pieces():
        if piece not in seen:
            seen.add(piece)
            vocab.append(piece)
    return vocab


# --------------------------------------------------------------------------------------------
# BLEU
# --------------------------------------------------------------------------------------------


def compute_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU (sacreBLEU defaults: 13a tokenisation, exp smoothing) of detokenised
    hypotheses against one reference each."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": round(float(score.score), 4),
        "precisions": [round(float(p), 4) for p in score.precisions],
        "brevity_penalty": round(float(score.bp), 4),
        "sys_len": int(score.sys_len),
        "ref_len": int(score.ref_len),
        "sentences": len(hypotheses),
        "signature": str(metric.get_signature()),
    }


# --------------------------------------------------------------------------------------------
# train-mt
# --------------------------------------------------------------------------------------------


def _encode_pairs(tokenizer: SentencePieceTokenizer, vocab: list[str], src: list[str], tgt: list[str]):
    from pseudopairs.mt_model import UNK_ID

    index = {token: i for i, token in enumerate(vocab)}
    src_ids = [[index.get(p, UNK_ID) for p in pieces] for pieces in tokenizer.encode([s.strip() for s in src])]
    tgt_ids = [[index.get(p, UNK_ID) for p in pieces] for pieces in tokenizer.encode([t.strip() for t in tgt])]
    return src_ids, tgt_ids


def train_mt(*, source_train: str | os.PathLike, target_train: str | os.PathLike,
             source_valid: str | os.PathLike, target_valid: str | os.PathLike,
             settings: TrainSettings, output_dir: str | os.PathLike, progress: bool = True) -> dict:
    """The ``train-mt`` step. Writes into ``output_dir`` (atomically, replacing it):

    - ``model.pt``: the OpenNMT-py-layout checkpoint (:func:`pseudopairs.mt_model.opennmt_checkpoint`);
    - ``sentencepiece.model``: the shared SentencePiece model, trained on both training sides;
    - ``bleu.json``: sacreBLEU of greedy translations of the validation pairs vs their references;
    - ``valid.hyp.txt``: those translations; ``train_log.csv``: training and validation losses;
    - ``settings.json``: settings, data files (SHA-256, line counts), sizes, versions, timing.

    Returns the content of ``bleu.json``.
    """
    import torch

    from pseudopairs import mt_model

    started = time.time()
    output_dir = Path(output_dir)
    train_src_text, train_tgt_text = read_parallel(source_train, target_train)
    valid_src_text, valid_tgt_text = read_parallel(source_valid, target_valid)
    if not valid_src_text:
        raise ValueError(f"the validation files {source_valid} and {target_valid} are empty")

    threads_before = torch.get_num_threads()
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    try:
        with atomic_directory(output_dir) as tmp:
            sp_bytes = train_sentencepiece(train_src_text + train_tgt_text,
                                           vocab_size=settings.spm_vocab_size,
                                           model_type=settings.spm_model_type,
                                           character_coverage=settings.spm_character_coverage)
            (tmp / SHARED_TOKENIZER).write_bytes(sp_bytes)
            tokenizer = SentencePieceTokenizer(tmp / SHARED_TOKENIZER)
            vocab = model_vocabulary(tokenizer)
            log.info("SentencePiece (%s): %d pieces; model vocabulary %d tokens",
                     settings.spm_model_type, tokenizer.processor.get_piece_size(), len(vocab))

            src_ids, tgt_ids = _encode_pairs(tokenizer, vocab, train_src_text, train_tgt_text)
            keep = [i for i in range(len(src_ids))
                    if 0 < len(src_ids[i]) <= settings.max_tokens and 0 < len(tgt_ids[i]) <= settings.max_tokens]
            empty = sum(1 for i in range(len(src_ids)) if not src_ids[i] or not tgt_ids[i])
            too_long = len(src_ids) - len(keep) - empty
            if empty or too_long:
                log.warning("dropped %d training pairs with an empty side and %d longer than "
                            "translation.train.max_tokens=%d subword tokens", empty, too_long,
                            settings.max_tokens)
            src_ids = [src_ids[i] for i in keep]
            tgt_ids = [tgt_ids[i] for i in keep]
            v_src_ids, v_tgt_ids = _encode_pairs(tokenizer, vocab, valid_src_text, valid_tgt_text)
            v_keep = [i for i in range(len(v_src_ids)) if v_src_ids[i] and v_tgt_ids[i]]

            shape = mt_model.TransformerShape(
                src_vocab=len(vocab), tgt_vocab=len(vocab), enc_layers=settings.enc_layers,
                dec_layers=settings.dec_layers, d_model=settings.d_model, heads=settings.heads,
                ff=settings.ff, dropout=settings.dropout, attention_dropout=settings.attention_dropout)
            log.info("training on %d pairs (%d source / %d target tokens), validating on %d",
                     len(src_ids), sum(map(len, src_ids)), sum(map(len, tgt_ids)), len(v_keep))
            model, history = mt_model.train_transformer(
                src_ids, tgt_ids, valid_src=[v_src_ids[i] for i in v_keep],
                valid_tgt=[v_tgt_ids[i] for i in v_keep], shape=shape, seed=settings.seed,
                epochs=settings.epochs, max_steps=settings.max_steps,
                batch_tokens=settings.batch_tokens, lr=settings.lr,
                warmup_steps=settings.warmup_steps, label_smoothing=settings.label_smoothing,
                clip_norm=settings.clip_norm, log_every=settings.log_every, progress=progress, log=log)

            decoded = mt_model.greedy_translate_ids(model, v_src_ids,
                                                    max_length=settings.max_decoding_length)
            hypotheses = tokenizer.decode([[vocab[i] for i in ids] for ids in decoded])
            bleu = compute_bleu(hypotheses, [t.strip() for t in valid_tgt_text])
            bleu.update({"decoding": "greedy (PyTorch model, beam 1)", "source": str(source_valid),
                         "reference": str(target_valid)})
            log.info("validation BLEU %.2f on %d pairs (%s)", bleu["bleu"], len(hypotheses),
                     bleu["signature"])

            n_params = sum(p.numel() for p in model.parameters())
            info = {
                "settings": settings.to_dict(),
                "data": {name: {"path": str(path), "sha256": sha256_file(path), "lines": lines}
                         for name, path, lines in (
                             ("source_train", source_train, len(train_src_text)),
                             ("target_train", target_train, len(train_tgt_text)),
                             ("source_valid", source_valid, len(valid_src_text)),
                             ("target_valid", target_valid, len(valid_tgt_text)))},
                "pairs_used": len(src_ids),
                "vocabulary": len(vocab),
                "parameters": n_params,
                "torch_threads": torch.get_num_threads(),
                "versions": {"torch": torch.__version__, **_library_versions()},
                "seconds": round(time.time() - started, 1),
            }
            checkpoint = mt_model.opennmt_checkpoint(model, src_vocab=vocab, tgt_vocab=vocab,
                                                     extra={"settings": json.dumps(info["settings"])})
            torch.save(checkpoint, tmp / "model.pt")
            (tmp / "valid.hyp.txt").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
            with open(tmp / "train_log.csv", "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=["step", "epoch", "kind", "loss", "lr"])
                writer.writeheader()
                for row in history:
                    writer.writerow({**row, "loss": f"{row['loss']:.6f}", "lr": f"{row['lr']:.6g}"})
            (tmp / "bleu.json").write_text(json.dumps(bleu, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            (tmp / "settings.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n",
                                               encoding="utf-8")
    finally:
        torch.set_num_threads(threads_before)
    log.info("wrote %s (%d parameters, %.0f s)", output_dir, info["parameters"], time.time() - started)
    return bleu


# --------------------------------------------------------------------------------------------
# Reading OpenNMT-py checkpoints (current and legacy layouts)
# --------------------------------------------------------------------------------------------


class _Inert:
    """Stand-in for a class or function a legacy checkpoint pickles by reference (torchtext
    fields and vocabularies, onmt fields, functools.partial tokenisers …). Constructing one, or
    restoring its state, only records data; nothing of the original class is imported or run."""

    _pickled_name = "?"

    def __init__(self, *args, **kwargs) -> None:
        self.__dict__["_args"] = args
        self.__dict__["_kwargs"] = kwargs

    def __setstate__(self, state) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif (isinstance(state, tuple) and len(state) == 2
              and all(part is None or isinstance(part, dict) for part in state)):
            for part in state:
                self.__dict__.update(part or {})
        else:
            self.__dict__["_state"] = state

    def __setitem__(self, key, value) -> None:
        self.__dict__.setdefault("_items", {})[key] = value

    def append(self, value) -> None:
        self.__dict__.setdefault("_list", []).append(value)

    def extend(self, values) -> None:
        self.__dict__.setdefault("_list", []).extend(values)

    def __repr__(self) -> str:
        return f"<stand-in for {self._pickled_name}>"


_INERT_CLASSES: dict[str, type] = {}


def _inert_class(module: str, name: str) -> type:
    key = f"{module}.{name}"
    if key not in _INERT_CLASSES:
        _INERT_CLASSES[key] = type(name, (_Inert,), {"_pickled_name": key, "__module__": __name__})
    return _INERT_CLASSES[key]


def _safe_reconstructor(cls, base, state):
    """``copyreg._reconstructor`` restricted to stand-ins (protocol 0/1 pickles of plain objects)."""
    if isinstance(cls, type) and issubclass(cls, _Inert):
        obj = cls.__new__(cls)
        if state is not None:
            obj.__dict__["_base_state"] = state
        return obj
    raise pickle.UnpicklingError(f"refusing to reconstruct {cls!r} from a legacy checkpoint")


@functools.lru_cache(maxsize=1)
def _allowed_globals() -> dict[tuple[str, str], Any]:
    import argparse as _argparse
    import builtins
    import codecs
    import collections

    import torch

    allowed: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("collections", "Counter"): collections.Counter,
        ("collections", "defaultdict"): collections.defaultdict,
        ("argparse", "Namespace"): _argparse.Namespace,
        ("_codecs", "encode"): codecs.encode,
        ("copyreg", "_reconstructor"): _safe_reconstructor,
        ("torch", "Size"): torch.Size,
        ("torch", "device"): torch.device,
        ("torch._tensor", "_rebuild_from_type_v2"): torch._tensor._rebuild_from_type_v2,
        ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
    }
    for name in ("set", "frozenset", "slice", "complex", "bytearray", "bytes", "object", "list",
                 "dict", "tuple", "int", "float", "str", "bool"):
        allowed[("builtins", name)] = getattr(builtins, name)
        allowed[("__builtin__", name)] = getattr(builtins, name)
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler for legacy OpenNMT-py checkpoints: tensors, containers, ``argparse.Namespace``
    and torch's tensor-rebuilding functions are real; every other global becomes an inert
    stand-in (:class:`_Inert`), so no code of the pickle's choosing can run."""

    stand_ins: set[str] = set()

    def find_class(self, module: str, name: str):
        import torch

        allowed = _allowed_globals()
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module == "torch._utils" and name.startswith("_rebuild_") and hasattr(torch._utils, name):
            return getattr(torch._utils, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        _RestrictedUnpickler.stand_ins.add(f"{module}.{name}")
        return _inert_class(module, name)


def _restricted_load(file, **kwargs):
    return _RestrictedUnpickler(file, **kwargs).load()


#: A "pickle module" for ``torch.load(pickle_module=...)``.
_RESTRICTED_PICKLE = types.ModuleType("pseudopairs_restricted_pickle")
_RESTRICTED_PICKLE.Unpickler = _RestrictedUnpickler
_RESTRICTED_PICKLE.load = _restricted_load
_RESTRICTED_PICKLE.UnpicklingError = pickle.UnpicklingError


@dataclass
class LoadedCheckpoint:
    """An OpenNMT-py checkpoint normalised to the 3.x layout (vocabulary lists)."""

    path: Path
    checkpoint: dict          # model, generator, vocab {"src", "tgt"}, opt
    layout: str               # opennmt-py-3 | opennmt-py-2 | opennmt-py-1
    restricted: bool = False  # read by the restricted unpickler (weights-only loading failed)
    stand_ins: list[str] = field(default_factory=list)

    @property
    def needs_resave(self) -> bool:
        """Whether the converter's own (weights-only) loading would fail on the original file."""
        return self.layout != "opennmt-py-3" or self.restricted


def _plain(value) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _itos(obj, *, path: Path, what: str) -> list[str]:
    itos = getattr(obj, "itos", None)
    if not isinstance(itos, list) or not all(isinstance(t, str) for t in itos):
        raise ValueError(f"{path}: {what} has no list of token strings (itos)")
    return itos


def _field_vocab(field_obj, *, path: Path, side: str) -> list[str]:
    """Vocabulary of an OpenNMT-py 2.x ``TextMultiField`` (or a bare torchtext ``Field``)."""
    subfields = getattr(field_obj, "fields", None)
    if isinstance(subfields, list) and subfields:
        if len(subfields) > 1:
            raise ValueError(f"{path}: the {side} side has {len(subfields) - 1} word feature(s); "
                             "models with source/target features are not supported")
        pair = subfields[0]
        base = pair[1] if isinstance(pair, (tuple, list)) and len(pair) == 2 else pair
        return _itos(getattr(base, "vocab", None), path=path, what=f"the {side} field's vocabulary")
    return _itos(getattr(field_obj, "vocab", None), path=path, what=f"the {side} field")


def _vocab_lists(vocab, *, path: Path) -> tuple[list[str], list[str], str]:
    if isinstance(vocab, dict) and "src" in vocab and "tgt" in vocab:
        src, tgt = vocab["src"], vocab["tgt"]
        if isinstance(src, list) and isinstance(tgt, list):
            if not all(isinstance(t, str) for t in src + tgt):
                raise ValueError(f"{path}: vocabulary lists hold non-string tokens")
            return src, tgt, "opennmt-py-3"
        return (_field_vocab(src, path=path, side="source"), _field_vocab(tgt, path=path, side="target"),
                "opennmt-py-2")
    if isinstance(vocab, list) and all(isinstance(x, (tuple, list)) and len(x) == 2 for x in vocab):
        named = dict(vocab)
        if "src" in named and "tgt" in named:
            return (_itos(named["src"], path=path, what="the source vocabulary"),
                    _itos(named["tgt"], path=path, what="the target vocabulary"), "opennmt-py-1")
    raise ValueError(f"{path}: unrecognised OpenNMT-py vocabulary layout ({type(vocab).__name__})")


def load_checkpoint(path: str | os.PathLike) -> LoadedCheckpoint:
    """Read an OpenNMT-py checkpoint in any of its layouts and return it normalised to the 3.x
    one: ``{"model": state dict, "generator": state dict, "vocab": {"src": [...], "tgt": [...]},
    "opt": Namespace}``.

    First PyTorch's weights-only unpickler (only ``argparse.Namespace`` added) is tried — it reads
    3.x checkpoints and those written by ``train-mt``. If the file pickles other objects (1.x/2.x
    checkpoints pickle torchtext ``Field``/``Vocab`` and onmt ``TextMultiField`` objects), it is
    read by :class:`_RestrictedUnpickler`, which turns those classes into inert stand-ins; the
    token lists are taken from them and the ``opt`` keeps its plain values only.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"OpenNMT-py checkpoint not found: {path}")
    stand_ins: list[str] = []
    restricted = False
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as first:
        log.info("%s: weights-only loading failed (%s); reading it as a legacy OpenNMT-py "
                 "checkpoint with stand-ins for its pickled classes", path, str(first).splitlines()[0])
        _RestrictedUnpickler.stand_ins = set()
        try:
            raw = torch.load(path, map_location="cpu", weights_only=False,
                             pickle_module=_RESTRICTED_PICKLE)
        except Exception as err:  # noqa: BLE001 — anything here means "not a checkpoint we can read"
            raise ValueError(f"{path}: not a readable PyTorch checkpoint ({type(err).__name__}: {err})") from err
        stand_ins = sorted(_RestrictedUnpickler.stand_ins)
        restricted = True
    except Exception as err:  # noqa: BLE001 — truncated/garbage files raise many types
        raise ValueError(f"{path}: not a readable PyTorch checkpoint ({type(err).__name__}: {err})") from err

    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not an OpenNMT-py checkpoint (a {type(raw).__name__}, not a dict)")
    missing = [key for key in ("model", "generator", "vocab", "opt") if key not in raw]
    if missing:
        raise ValueError(f"{path}: not an OpenNMT-py checkpoint (missing key(s) {missing})")
    opt = raw["opt"]
    if not isinstance(opt, argparse.Namespace):
        raise ValueError(f"{path}: 'opt' is a {type(opt).__name__}, not an argparse.Namespace")
    for key in ("model", "generator"):
        part = raw[key]
        if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
            raise ValueError(f"{path}: '{key}' is not a state dict (a mapping of names to tensors)")
    src, tgt, layout = _vocab_lists(raw["vocab"], path=path)
    plain_opt = argparse.Namespace(**{k: v for k, v in vars(opt).items() if _plain(v)})
    dropped = sorted(set(vars(opt)) - set(vars(plain_opt)))
    if dropped:
        log.info("%s: opt fields without plain values left out of the re-saved checkpoint: %s",
                 path, ", ".join(dropped))
    checkpoint = {"model": dict(raw["model"]), "generator": dict(raw["generator"]),
                  "vocab": {"src": list(src), "tgt": list(tgt)}, "opt": plain_opt}
    return LoadedCheckpoint(path=path, checkpoint=checkpoint, layout=layout, restricted=restricted,
                            stand_ins=stand_ins)


# --------------------------------------------------------------------------------------------
# convert-mt
# --------------------------------------------------------------------------------------------


def _tokenizer_coverage(tokenizer: SentencePieceTokenizer, vocab: list[str]) -> float:
    from pseudopairs.mt_model import SPECIALS

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
    import ctranslate2
    import torch
    from ctranslate2.converters import OpenNMTPyConverter

    checkpoint = Path(checkpoint)
    output_dir = Path(output_dir)
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

    with atomic_directory(output_dir) as tmp:
        convert_from = checkpoint
        if loaded.needs_resave:
            # Outside the final directory: the re-saved copy is only the converter's input.
            resaved = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", suffix=".ckpt", dir=output_dir.parent))
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
        if shared:
            shutil.copyfile(source_tokenizer, tmp / SHARED_TOKENIZER)
            tokenizers = {"source": SHARED_TOKENIZER, "target": SHARED_TOKENIZER}
        else:
            shutil.copyfile(source_tokenizer, tmp / SOURCE_TOKENIZER)
            shutil.copyfile(target_tokenizer, tmp / TARGET_TOKENIZER)
            tokenizers = {"source": SOURCE_TOKENIZER, "target": TARGET_TOKENIZER}
        opt = loaded.checkpoint["opt"]
        info = {
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
        (tmp / MODEL_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log.info("converted %s (%s) -> %s [%s, quantization %s]", checkpoint, loaded.layout, output_dir,
             model_id, quantization)
    return info


# --------------------------------------------------------------------------------------------
# A converted model directory
# --------------------------------------------------------------------------------------------


@dataclass
class ModelDir:
    """A ``convert-mt`` output: CTranslate2 model files, tokenisers and ``pseudopairs_mt.json``."""

    path: Path
    info: dict
    source_tokenizer: SentencePieceTokenizer
    target_tokenizer: SentencePieceTokenizer

    @property
    def model_id(self) -> str:
        return self.info["model_id"]


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


def resolve_device(settings: TranslateSettings) -> tuple[str, str]:
    """(device, compute type) for CTranslate2: ``auto`` picks CUDA when CTranslate2 sees a GPU;
    compute type ``auto`` is int8 on CPU and float16 on CUDA. Unsupported types are errors."""
    import ctranslate2

    device = settings.device
    cuda_devices = ctranslate2.get_cuda_device_count()
    if device == "auto":
        device = "cuda" if cuda_devices > 0 else "cpu"
    elif device == "cuda" and cuda_devices == 0:
        raise RuntimeError("translation.translate.device: cuda was asked for but CTranslate2 sees no "
                           "CUDA device (is its CUDA 12 cuBLAS on the library path?)")
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


# --------------------------------------------------------------------------------------------
# translate-captions
# --------------------------------------------------------------------------------------------


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
                            truecase_model: Path | None) -> str:
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
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


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
    :func:`pseudopairs.text.prepare_captions`), in this process or in a pool of ``workers``."""
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
    from pseudopairs.text import load_truecaser

    if case == "truecase":
        if truecase_model is None:
            raise ValueError(f"case=truecase needs a truecase model for {lang!r} (--truecase-model {lang}=PATH)")
        return {lang: load_truecaser(truecase_model)}
    return {}


def _prepare_texts(raws: list[str], *, lang: str, case: str, truecasers: dict) -> list[str]:
    from pseudopairs.text import prepare_captions

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
    from pseudopairs.text import _check_lang  # noqa: PLC2701 — the package's language-code rule

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


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _command_line() -> str:
    return " ".join(shlex.quote(a) for a in ["pseudopairs", *sys.argv[1:]])


def _cmd_train_mt(args: argparse.Namespace) -> int:
    values = parse_json_object(args.settings, option="--settings")
    if args.threads is not None:
        values["threads"] = args.threads
    settings = TrainSettings.from_dict(values)
    bleu = train_mt(source_train=args.source_train, target_train=args.target_train,
                    source_valid=args.source_valid, target_valid=args.target_valid,
                    settings=settings, output_dir=args.output_dir, progress=not args.no_progress)
    print(f"train-mt: validation BLEU {bleu['bleu']:.2f} ({bleu['sentences']} pairs) -> {args.output_dir}")
    return 0


def _cmd_convert_mt(args: argparse.Namespace) -> int:
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


def _cmd_translate_captions(args: argparse.Namespace) -> int:
    from pseudopairs.text import CASES, parse_truecase_models

    values = parse_json_object(args.settings, option="--settings")
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
        "train-mt", help="train the demo Transformer MT model on parallel text (OpenNMT-py layout)",
        description="Train a small Transformer encoder-decoder with a shared SentencePiece model on "
                    "parallel plain-text files and save it as an OpenNMT-py checkpoint, with the "
                    "validation BLEU in bleu.json.")
    p.add_argument("--source-train", required=True, help="source sentences, one per line (raw text)")
    p.add_argument("--target-train", required=True, help="target sentences, aligned by line")
    p.add_argument("--source-valid", required=True, help="held-out source sentences")
    p.add_argument("--target-valid", required=True, help="held-out target sentences (BLEU references)")
    p.add_argument("--settings", default=None, help="the translation.train config section as JSON")
    p.add_argument("--output-dir", required=True, help="model directory (replaced atomically)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads, overriding the settings' threads (results depend on it)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train_mt)

    p = subparsers.add_parser(
        "convert-mt", help="convert an OpenNMT-py checkpoint with CTranslate2 (+ its tokenisers)",
        description="Convert an OpenNMT-py Transformer checkpoint (3.x layout, or a 1.x/2.x one, "
                    "which is re-saved first) with CTranslate2's OpenNMT-py converter into a "
                    "self-contained model directory.")
    p.add_argument("--checkpoint", required=True, help="OpenNMT-py .pt checkpoint")
    p.add_argument("--output-dir", required=True, help="CTranslate2 model directory (replaced atomically)")
    p.add_argument("--quantization", default="none", choices=QUANTIZATIONS,
                   help="weight type of the converted model (default: none = as saved)")
    p.add_argument("--tokenizer", default=None,
                   help=f"shared SentencePiece model (default: {SHARED_TOKENIZER} beside the checkpoint)")
    p.add_argument("--source-tokenizer", default=None, help="source SentencePiece model (with --target-tokenizer)")
    p.add_argument("--target-tokenizer", default=None, help="target SentencePiece model")
    p.add_argument("--model-id", default=None,
                   help="identifier recorded with every translation (default: checkpoint name + SHA-256 prefix)")
    p.set_defaults(func=_cmd_convert_mt)

    p = subparsers.add_parser(
        "translate-captions", help="machine-translate every source-language caption of a caption table",
        description="Translate every source-language caption of a caption table with a converted "
                    "model; the output table is aligned row for row with those captions and gets the "
                    "same Moses preparation as other captions. Resumable in chunks.")
    p.add_argument("--model", required=True, help="converted model directory (convert-mt)")
    p.add_argument("--captions", required=True, help="caption table (.parquet)")
    p.add_argument("--source-lang", required=True)
    p.add_argument("--target-lang", required=True)
    p.add_argument("--dataset", required=True, help="data set name of the translations (e.g. coco.de-mt)")
    p.add_argument("--output", required=True, help="translated caption table (.parquet)")
    p.add_argument("--settings", default=None, help="the translation.translate config section as JSON")
    p.add_argument("--case", default="lowercase", help="lowercase (default) or truecase, as prepare-captions")
    p.add_argument("--truecase-model", action="append", default=[], metavar="LANG=PATH",
                   help="truecase model of the target language (with --case truecase)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads: sets intra_threads to threads // inter_threads")
    p.add_argument("--sidecar", default=None, help="JSON sidecar (default: the output with suffix .json)")
    p.add_argument("--chunk-dir", default=None, help="resumable chunks (default: {output}.chunks/)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_translate_captions)


def main(argv: list[str] | None = None) -> int:
    """``python -m pseudopairs.translation COMMAND …``: the three translation commands without the
    rest of the ``pseudopairs`` CLI, whose other steps import torch. A GPU translation environment
    with only CTranslate2, SentencePiece, sacremoses, pandas and pyarrow runs
    ``translate-captions`` this way (``train-mt`` and ``convert-mt`` still need torch)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m pseudopairs.translation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    register_cli(parser.add_subparsers(dest="command", required=True))
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv[:1]
    args = parser.parse_args(argv[1:] if verbose else argv)
    from pseudopairs.cli import run_command

    return run_command(args, verbose=verbose)


if __name__ == "__main__":
    sys.exit(main())
