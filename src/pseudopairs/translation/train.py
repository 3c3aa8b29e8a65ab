"""The ``train-mt`` step."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import time
from pathlib import Path

from pseudopairs import cli
from pseudopairs.io import atomic_directory
from pseudopairs.translation.convert import SHARED_TOKENIZER
from pseudopairs.translation.settings import TrainSettings
from pseudopairs.translation.text import (SentencePieceTokenizer, _library_versions, compute_bleu,
                                          model_vocabulary, read_parallel, sha256_file,
                                          train_sentencepiece)

log = logging.getLogger(__name__)


def _encode_pairs(tokenizer: SentencePieceTokenizer, vocab: list[str], src: list[str], tgt: list[str]):
    from pseudopairs.translation.transformer import UNK_ID

    index = {token: i for i, token in enumerate(vocab)}
    src_ids = [[index.get(p, UNK_ID) for p in pieces] for pieces in tokenizer.encode([s.strip() for s in src])]
    tgt_ids = [[index.get(p, UNK_ID) for p in pieces] for pieces in tokenizer.encode([t.strip() for t in tgt])]
    return src_ids, tgt_ids


def train_mt(*, source_train: str | os.PathLike, target_train: str | os.PathLike,
             source_valid: str | os.PathLike, target_valid: str | os.PathLike,
             settings: TrainSettings, output_dir: str | os.PathLike, progress: bool = True) -> dict:
    """The ``train-mt`` step. Writes into ``output_dir`` (atomically, replacing it):

    - ``model.pt``: the OpenNMT-py-layout checkpoint (:func:`pseudopairs.translation.transformer.opennmt_checkpoint`);
    - ``sentencepiece.model``: the shared SentencePiece model, trained on both training sides;
    - ``bleu.json``: sacreBLEU of greedy translations of the validation pairs vs their references;
    - ``valid.hyp.txt``: those translations; ``train_log.csv``: training and validation losses;
    - ``settings.json``: settings, data files (SHA-256, line counts), sizes, versions, timing.

    Returns the content of ``bleu.json``.
    """
    import torch

    from pseudopairs.translation import transformer as mt_model

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


def _cmd_train_mt(args: argparse.Namespace) -> int:
    values = dict(args.settings)
    if args.threads is not None:
        values["threads"] = args.threads
    settings = TrainSettings.from_dict(values)
    bleu = train_mt(source_train=args.source_train, target_train=args.target_train,
                    source_valid=args.source_valid, target_valid=args.target_valid,
                    settings=settings, output_dir=args.output_dir, progress=not args.no_progress)
    print(f"train-mt: validation BLEU {bleu['bleu']:.2f} ({bleu['sentences']} pairs) -> {args.output_dir}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "train-mt", help=cli.COMMANDS["train-mt"].summary,
        description="Train a small Transformer encoder-decoder with a shared SentencePiece model on "
                    "parallel plain-text files and save it as an OpenNMT-py checkpoint, with the "
                    "validation BLEU in bleu.json.")
    p.add_argument("--source-train", required=True, help="source sentences, one per line (raw text)")
    p.add_argument("--target-train", required=True, help="target sentences, aligned by line")
    p.add_argument("--source-valid", required=True, help="held-out source sentences")
    p.add_argument("--target-valid", required=True, help="held-out target sentences (BLEU references)")
    cli.add_json(p, "--settings", "the translation.train config section", required=False)
    p.add_argument("--output-dir", required=True, help="model directory (replaced atomically)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads, overriding the settings' threads (results depend on it)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train_mt)
