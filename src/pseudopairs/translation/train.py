"""The ``train-mt`` step: a small Transformer encoder-decoder with a shared SentencePiece model,
trained on parallel plain-text files and saved as an OpenNMT-py checkpoint, with the validation
BLEU in ``bleu.json``. Every ``checkpoint_every`` updates the training state is saved to
``OUTPUT_DIR.state.pt``; rerunning the same command after a kill resumes from it (the same
result as an uninterrupted run)."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pseudopairs import commands
from pseudopairs.core.io import atomic_directory, atomic_path
from pseudopairs.translation.convert import SHARED_TOKENIZER
from pseudopairs.translation.settings import TranslationTrainSettings
from pseudopairs.translation.text import (SentencePieceTokenizer, _library_versions, compute_bleu,
                                          model_vocabulary, read_parallel, sha256_file,
                                          train_sentencepiece)

log = logging.getLogger(__name__)

#: Bump when a change makes saved training states wrong.
STATE_FORMAT = "pseudopairs.mt-train-state/1"

STATE_SUFFIX = ".state.pt"


def state_path(output_dir: str | os.PathLike) -> Path:
    """The resumable training state of ``output_dir``: ``OUTPUT_DIR.state.pt`` beside it."""
    output_dir = Path(output_dir)
    return output_dir.with_name(output_dir.name + STATE_SUFFIX)


def _file_stamp(path: str | os.PathLike) -> list:
    stat = os.stat(path)
    return [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]


def run_key(settings: TranslationTrainSettings, inputs: dict[str, str | os.PathLike]) -> dict:
    """What a saved state must have been written for to be resumed: the settings (except
    ``checkpoint_every``, which changes nothing), the size and modification time of every input
    file and the torch version."""
    import torch

    return {"format": STATE_FORMAT, "torch": str(torch.__version__),
            "settings": {k: v for k, v in settings.to_dict().items() if k not in settings.RUN_NEUTRAL},
            "inputs": {name: _file_stamp(path) for name, path in inputs.items()}}


def _load_state(path: Path, key: dict) -> dict | None:
    """The saved state at ``path`` when it was written for ``key``; a stale or unreadable one is
    removed (with a warning) and the run starts afresh."""
    import torch

    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 — a damaged state is recomputed, not fatal
        log.warning("%s is unreadable (%s: %s); starting afresh", path, type(err).__name__,
                    " ".join(str(err).split())[:200])
        state = None
    if isinstance(state, dict) and state.get("format") == STATE_FORMAT and state.get("key") == key:
        return state
    if state is not None:
        log.warning("%s was saved for other inputs or settings; starting afresh", path)
    path.unlink()
    return None


def _save_state(path: Path, key: dict, sp_bytes: bytes, snapshot: dict) -> None:
    import torch

    with atomic_path(path) as tmp:
        torch.save({"format": STATE_FORMAT, "key": key, "sentencepiece": sp_bytes, "training": snapshot}, tmp)
    loop = snapshot["loop"]
    log.info("saved the training state at update %d%s to %s", loop["step"],
             " (training finished)" if loop["finished"] else "", path)


def _remove_leftovers(output_dir: Path) -> None:
    """Temporaries a killed earlier run of this step left beside ``output_dir`` (the staging
    directory of the outputs, a moved-aside old output, a half-written state file)."""
    name = re.escape(output_dir.name)
    staging = re.compile(rf"\.{name}\.[a-z0-9_]{{8}}\.(tmp|old)")
    state = re.compile(rf"\.{name}{re.escape(STATE_SUFFIX)}\.[a-z0-9_]{{8}}\.tmp\.pt")
    if not output_dir.parent.is_dir():
        return
    for entry in output_dir.parent.iterdir():
        if entry.is_dir() and not entry.is_symlink() and staging.fullmatch(entry.name):
            log.info("removing %s, left by an earlier run that was killed", entry)
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_file() and state.fullmatch(entry.name):
            entry.unlink(missing_ok=True)


@dataclass
class _Corpus:
    """The SentencePiece model, the vocabulary and the encoded training/validation pairs."""

    sp_bytes: bytes
    tokenizer: SentencePieceTokenizer
    vocab: list[str]
    src_ids: list
    tgt_ids: list
    valid_src_ids: list
    valid_keep: list[int]
    valid_tgt_ids: list


def _encode_pairs(tokenizer: SentencePieceTokenizer, vocab: list[str], src: list[str], tgt: list[str]):
    from pseudopairs.translation.transformer import UNK_ID

    index = {token: i for i, token in enumerate(vocab)}
    src_ids = [[index.get(p, UNK_ID) for p in pieces] for pieces in tokenizer.encode([s.strip() for s in src])]
    tgt_ids = [[index.get(p, UNK_ID) for p in pieces] for pieces in tokenizer.encode([t.strip() for t in tgt])]
    return src_ids, tgt_ids


def _corpus(train_src: list[str], train_tgt: list[str], valid_src: list[str], valid_tgt: list[str], *,
            settings: TranslationTrainSettings, sp_bytes: bytes | None) -> _Corpus:
    """Train the shared SentencePiece model (or take the saved one), encode, drop empty and
    over-long training pairs."""
    if sp_bytes is None:
        sp_bytes = train_sentencepiece(train_src + train_tgt, vocab_size=settings.spm_vocab_size,
                                       model_type=settings.spm_model_type,
                                       character_coverage=settings.spm_character_coverage)
    tokenizer = SentencePieceTokenizer(SHARED_TOKENIZER, model_proto=sp_bytes)
    vocab = model_vocabulary(tokenizer)
    log.info("SentencePiece (%s): %d pieces; model vocabulary %d tokens",
             settings.spm_model_type, tokenizer.processor.get_piece_size(), len(vocab))
    src_ids, tgt_ids = _encode_pairs(tokenizer, vocab, train_src, train_tgt)
    keep = [i for i in range(len(src_ids))
            if 0 < len(src_ids[i]) <= settings.max_tokens and 0 < len(tgt_ids[i]) <= settings.max_tokens]
    empty = sum(1 for i in range(len(src_ids)) if not src_ids[i] or not tgt_ids[i])
    too_long = len(src_ids) - len(keep) - empty
    if empty or too_long:
        log.warning("dropped %d training pairs with an empty side and %d longer than "
                    "translation.train.max_tokens=%d subword tokens", empty, too_long, settings.max_tokens)
    v_src_ids, v_tgt_ids = _encode_pairs(tokenizer, vocab, valid_src, valid_tgt)
    return _Corpus(sp_bytes=sp_bytes, tokenizer=tokenizer, vocab=vocab,
                   src_ids=[src_ids[i] for i in keep], tgt_ids=[tgt_ids[i] for i in keep],
                   valid_src_ids=v_src_ids, valid_tgt_ids=v_tgt_ids,
                   valid_keep=[i for i in range(len(v_src_ids)) if v_src_ids[i] and v_tgt_ids[i]])


def _write_outputs(output_dir: Path, *, corpus: _Corpus, model, history: list, hypotheses: list[str],
                   bleu: dict, info: dict) -> None:
    """Everything the step writes into ``output_dir`` (a staging directory renamed into place)."""
    import torch

    from pseudopairs.translation import transformer as mt_model

    with atomic_directory(output_dir) as tmp:
        (tmp / SHARED_TOKENIZER).write_bytes(corpus.sp_bytes)
        checkpoint = mt_model.opennmt_checkpoint(model, src_vocab=corpus.vocab, tgt_vocab=corpus.vocab,
                                                 extra={"settings": json.dumps(info["settings"])})
        torch.save(checkpoint, tmp / "model.pt")
        (tmp / "valid.hyp.txt").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
        with open(tmp / "train_log.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["step", "epoch", "kind", "loss", "lr"])
            writer.writeheader()
            for row in history:
                writer.writerow({**row, "loss": f"{row['loss']:.6f}", "lr": f"{row['lr']:.6g}"})
        (tmp / "bleu.json").write_text(json.dumps(bleu, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / "settings.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def train_mt(*, source_train: str | os.PathLike, target_train: str | os.PathLike,
             source_valid: str | os.PathLike, target_valid: str | os.PathLike,
             settings: TranslationTrainSettings, output_dir: str | os.PathLike, progress: bool = True) -> dict:
    """The ``train-mt`` step. Writes into ``output_dir`` (atomically, replacing it):

    - ``model.pt``: the OpenNMT-py-layout checkpoint (:func:`pseudopairs.translation.transformer.opennmt_checkpoint`);
    - ``sentencepiece.model``: the shared SentencePiece model, trained on both training sides;
    - ``bleu.json``: sacreBLEU of greedy translations of the validation pairs vs their references;
    - ``valid.hyp.txt``: those translations; ``train_log.csv``: training and validation losses;
    - ``settings.json``: settings, data files (SHA-256, line counts), sizes, versions, timing.

    Input files may be gzip-compressed. Every ``settings.checkpoint_every`` updates, and when
    training has ended, the whole training state is saved to :func:`state_path` (``OUTPUT_DIR.state.pt``,
    keyed by :func:`run_key`); a rerun with the same inputs and settings resumes from it and
    writes the same model as an uninterrupted run (on the CPU). A finished run removes it; a
    failed or killed one keeps it (and leaves no staging directory). Returns ``bleu.json``.
    """
    import torch

    from pseudopairs.translation import fit
    from pseudopairs.translation import transformer as mt_model

    started = time.time()
    output_dir = Path(output_dir)
    train_src_text, train_tgt_text = read_parallel(source_train, target_train)
    valid_src_text, valid_tgt_text = read_parallel(source_valid, target_valid)
    if not valid_src_text:
        raise ValueError(f"the validation files {source_valid} and {target_valid} are empty")
    inputs = {"source_train": source_train, "target_train": target_train,
              "source_valid": source_valid, "target_valid": target_valid}
    key = run_key(settings, inputs)
    state_file = state_path(output_dir)
    _remove_leftovers(output_dir)
    saved = _load_state(state_file, key)
    resumed_from = None if saved is None else int(saved["training"]["loop"]["step"])
    if resumed_from is not None:
        log.info("resuming from %s at update %d", state_file, resumed_from)

    threads_before = torch.get_num_threads()
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    try:
        corpus = _corpus(train_src_text, train_tgt_text, valid_src_text, valid_tgt_text,
                         settings=settings, sp_bytes=None if saved is None else saved["sentencepiece"])
        vocab, v_keep = corpus.vocab, corpus.valid_keep
        shape = mt_model.TransformerShape(
            src_vocab=len(vocab), tgt_vocab=len(vocab), enc_layers=settings.enc_layers,
            dec_layers=settings.dec_layers, d_model=settings.d_model, heads=settings.heads,
            ff=settings.ff, dropout=settings.dropout, attention_dropout=settings.attention_dropout)
        log.info("training on %d pairs (%d source / %d target tokens), validating on %d",
                 len(corpus.src_ids), sum(map(len, corpus.src_ids)), sum(map(len, corpus.tgt_ids)), len(v_keep))
        model, history = fit.train_transformer(
            corpus.src_ids, corpus.tgt_ids, valid_src=[corpus.valid_src_ids[i] for i in v_keep],
            valid_tgt=[corpus.valid_tgt_ids[i] for i in v_keep], shape=shape, settings=settings,
            resume=None if saved is None else saved["training"],
            save=lambda snapshot: _save_state(state_file, key, corpus.sp_bytes, snapshot),
            progress=progress, log=log)
        del saved

        decoded = mt_model.greedy_translate_ids(model, corpus.valid_src_ids,
                                                max_length=settings.max_decoding_length)
        hypotheses = corpus.tokenizer.decode([[vocab[i] for i in ids] for ids in decoded])
        bleu = compute_bleu(hypotheses, [t.strip() for t in valid_tgt_text])
        bleu.update({"decoding": "greedy (PyTorch model, beam 1)", "source": str(source_valid),
                     "reference": str(target_valid)})
        log.info("validation BLEU %.2f on %d pairs (%s)", bleu["bleu"], len(hypotheses), bleu["signature"])
        lines = {"source_train": len(train_src_text), "target_train": len(train_tgt_text),
                 "source_valid": len(valid_src_text), "target_valid": len(valid_tgt_text)}
        info = {
            "settings": settings.to_dict(),
            "data": {name: {"path": str(path), "sha256": sha256_file(path), "lines": lines[name]}
                     for name, path in inputs.items()},
            "pairs_used": len(corpus.src_ids),
            "vocabulary": len(vocab),
            "parameters": sum(p.numel() for p in model.parameters()),
            "torch_threads": torch.get_num_threads(),
            "versions": {"torch": torch.__version__, **_library_versions()},
            "resumed_from_step": resumed_from,
            "seconds": round(time.time() - started, 1),
        }
        _write_outputs(output_dir, corpus=corpus, model=model, history=history, hypotheses=hypotheses,
                       bleu=bleu, info=info)
    finally:
        torch.set_num_threads(threads_before)
    state_file.unlink(missing_ok=True)
    log.info("wrote %s (%d parameters, %.0f s)", output_dir, info["parameters"], time.time() - started)
    return bleu


def _cmd_train_mt(args: argparse.Namespace) -> int:
    values = dict(args.settings)
    if args.threads is not None:
        values["threads"] = args.threads
    settings = TranslationTrainSettings.from_dict(values)
    bleu = train_mt(source_train=args.source_train, target_train=args.target_train,
                    source_valid=args.source_valid, target_valid=args.target_valid,
                    settings=settings, output_dir=args.output_dir, progress=not args.no_progress)
    print(f"train-mt: validation BLEU {bleu['bleu']:.2f} ({bleu['sentences']} pairs) -> {args.output_dir}")
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "train-mt", _cmd_train_mt, description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source-train", required=True,
                   help="source sentences, one per line (raw UTF-8 text, optionally gzipped)")
    p.add_argument("--target-train", required=True, help="target sentences, aligned by line")
    p.add_argument("--source-valid", required=True, help="held-out source sentences")
    p.add_argument("--target-valid", required=True, help="held-out target sentences (BLEU references)")
    commands.add_json(p, "--settings", "the translation.train config section", required=False)
    p.add_argument("--output-dir", required=True,
                   help="model directory (replaced atomically; the resumable state is OUTPUT_DIR.state.pt)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads, overriding the settings' threads (results depend on it)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
