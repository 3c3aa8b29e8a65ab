"""SMALR's pipeline steps (paper 002 §3.1): ``train-fasttext`` (FastText vectors of one language,
trained on a run's own training captions, or the published vectors of their words) and
``pretrain-hem`` (HEM's latent vocabulary, hard assignment and initial rows from those captions
and vectors). Their inputs are made by
:mod:`pseudopairs.model.smalr_contract`; their outputs are the ``hem`` text encoder's vocabulary and initial
state (:mod:`pseudopairs.model.text_encoders`), which ``train`` reads."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from pseudopairs import commands
from pseudopairs.core.io import read_captions, write_json_atomic
from pseudopairs.smalr.settings import HEM_INIT_FORMAT, FastTextSettings, HemSettings

log = logging.getLogger(__name__)


def training_sentences(captions: str, lang: str):
    """The ``lang`` rows of a prepared caption table, which must be training captions only."""
    frame = read_captions(captions, lang=lang)
    if "text" not in frame.columns:
        raise ValueError(f"{captions}: caption table has no prepared 'text' column")
    if (frame["split"] != "train").any():
        raise ValueError(f"{captions}: FastText and HEM train on training captions only")
    if frame.empty:
        raise ValueError(f"{captions}: no {lang!r} captions")
    return frame


def train_fasttext_step(spec: dict, output) -> dict:
    """FastText vectors of ``spec["lang"]`` from the run's caption tables, written to ``output``
    (``.vec``, atomically): trained on them (seeded with the run's seed), or, when the spec names
    ``published`` vectors (``fasttext.source: download``), those of the published file for the
    words of the captions (:func:`published_for_captions`)."""
    settings = FastTextSettings.from_dict(spec.get("settings"))
    sentences = []
    for captions in spec["captions"]:
        frame = training_sentences(captions, spec["lang"])
        sentences += [text.split() for text in frame["text"].astype(str)]
    if spec.get("published"):
        return published_for_captions(spec["published"], sentences, output, dim=settings.dim)
    from pseudopairs.smalr.fasttext import train_fasttext

    vectors = train_fasttext(sentences, output, dim=settings.dim, seed=int(spec["seed"]),
                             epochs=settings.epochs, min_count=settings.min_count,
                             window=settings.window)
    return {"sentences": len(sentences), "words": len(vectors.words), "dim": vectors.dim}


def published_for_captions(published, sentences, output, *, dim: int) -> dict:
    """The vectors of ``published`` (a ``.vec``/``.vec.gz`` file of ``dim``-d vectors) for the
    words of ``sentences``, in the file's order, written to ``output``. Words the file lacks get
    no vector (HEM counts them as missing); a file that has none of the words is an error naming
    it."""
    from pseudopairs.smalr.fasttext import read_vec, write_vec

    words = {w for sentence in sentences for w in sentence}
    if not words:
        raise ValueError("no words in the training captions to look up in the published vectors")
    vectors = read_vec(published, words=words, dim=dim)
    if not vectors.words:
        raise ValueError(f"{published}: none of the {len(words)} words of the training captions "
                         "has a vector there (wrong language, or differently tokenised?)")
    write_vec(output, vectors.words, vectors.vectors)
    missing = len(words) - len(vectors.words)
    log.info("%s: %d of %d words found (%d missing)", published, len(vectors.words), len(words),
             missing)
    return {"sentences": len(sentences), "words": len(vectors.words), "missing": missing,
            "dim": vectors.dim, "published": str(published)}


def pretrain_hem_step(spec: dict, *, vocab_out, init_out) -> dict:
    """HEM built end to end (:func:`pseudopairs.smalr.hem_build.build_hem`): the sentences of the
    run's c2i caption tables (one image = one features file's image id, across languages) and
    each language's vectors; writes the vocabulary JSON and the initial rows (atomically)."""
    import torch

    import torch

    from pseudopairs.core.io import atomic_path
    from pseudopairs.smalr.fasttext import read_vec
    from pseudopairs.smalr.hem_build import Sentence, build_hem

    settings = HemSettings.from_dict(spec.get("settings"))
    torch.set_num_threads(1)
    images: dict[tuple[str, str], int] = {}
    sentences = []
    for ref in spec["sentences"]:
        frame = training_sentences(ref["captions"], ref["lang"])
        for image_id, text in zip(frame["image_id"].astype(str), frame["text"].astype(str)):
            image = images.setdefault((ref["features"], image_id), len(images))
            sentences.append(Sentence(lang=ref["lang"], image=image, tokens=tuple(text.split())))
    langs = sorted({s.lang for s in sentences})
    missing = [lang for lang in langs if lang not in spec["vectors"]]
    if missing:
        raise ValueError(f"spec: no FastText vectors for {missing}")
    vectors = {lang: read_vec(spec["vectors"][lang]) for lang in langs}
    built = build_hem(sentences, vectors, settings=settings, seed=int(spec["seed"]))
    with atomic_path(Path(init_out)) as tmp:
        torch.save({"format": HEM_INIT_FORMAT, "weight": built.embedding.weight.detach().cpu().clone(),
                    "pretraining_parameters": int(built.pretraining_parameters)}, tmp)
    write_json_atomic(vocab_out, built.vocabulary.to_json())
    summary = {"sentences": len(sentences), "images": len(images),
               "specific": built.vocabulary.n_specific, "latent_used": built.vocabulary.latent_size,
               "ids": len(built.vocabulary), "pretraining_parameters": built.pretraining_parameters,
               "missing": {k: len(v) for k, v in built.missing.items()},
               "first_loss": built.losses[0], "last_loss": built.losses[-1]}
    log.info("HEM of %s seed %s: %s", spec["experiment"], spec["seed"], summary)
    return summary


def _cli_train_fasttext(args: argparse.Namespace) -> None:
    summary = train_fasttext_step(args.spec, args.output)
    print(f"FastText {args.spec['lang']}: {summary} -> {args.output}")


def _cli_pretrain_hem(args: argparse.Namespace) -> None:
    summary = pretrain_hem_step(args.spec, vocab_out=args.vocab, init_out=args.init)
    print(f"HEM {args.spec['experiment']} seed {args.spec['seed']}: {summary} -> {args.vocab}, {args.init}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "train-fasttext", _cli_train_fasttext)
    commands.add_json(p, "--spec", "the run's captions, language, seed and fasttext settings "
                                   "(model.smalr_contract.fasttext_spec)")
    p.add_argument("--output", required=True, help=".vec file (written atomically)")
    p = commands.add_command(subparsers, "pretrain-hem", _cli_pretrain_hem)
    commands.add_json(p, "--spec", "the run's caption tables, vectors, seed and hem settings "
                                   "(model.smalr_contract.hem_spec)")
    p.add_argument("--vocab", required=True, help="HEM vocabulary JSON (written atomically)")
    p.add_argument("--init", required=True, help="HEM initial rows (written atomically)")
