"""The ``evaluate`` step — ``metrics.json`` of a trained model: image–sentence retrieval on the
evaluation corpus' test split for each language (paper §3.3; R@K, median rank, rsum and mean
recall, ranked with the model's similarity; ``retrieval``), on the translation corpus' test split
for the spec's ``portion_langs`` (``portion_retrieval``: paper 004's Tables 6 and 7) and translation retrieval on the parallel test pairs
(paper §7.1, Table 7; ranked with the similarity between two captions: the cosine, also for an
``order`` model) — and two commands that score stored embeddings."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import torch

from pseudopairs import commands
from pseudopairs.similarity.metrics import retrieval_metrics, translation_retrieval
from pseudopairs.similarity.ranks import _validate_retrieval_inputs, _validate_translation_inputs
from pseudopairs.evaluation.job import EvaluationData, EvaluationJob
from pseudopairs.core.io import (check_feature_files, check_missing_images, load_features, read_captions,
                            write_json_atomic)
from pseudopairs.core.settings import resolve_device
from pseudopairs.similarity.functions import SIMILARITIES, caption_similarity

log = logging.getLogger(__name__)


def caption_subset(captions, image_ids: list[str], *, lang: str, source: str, features):
    """The captions of one language whose image is in ``image_ids`` (read from ``features``), in
    table order, and the row of each one's image. Captions of images the feature step skipped are
    dropped, as in training; any other image without features is an error."""
    row_of = {image_id: i for i, image_id in enumerate(image_ids)}
    subset = captions[captions["lang"] == lang]
    if subset.empty:
        raise ValueError(f"{source}: no captions in language {lang!r}")
    known = subset["image_id"].isin(row_of)
    if not known.all():
        check_missing_images(features, subset.loc[~known, "image_id"], captions=source)
        log.warning("%s: %d %s captions have no image features; dropped", source, int((~known).sum()), lang)
        subset = subset[known]
    return subset, np.array([row_of[i] for i in subset["image_id"]], dtype=np.int64)


def caption_rows(captions, image_ids: list[str], *, lang: str, source: str, features):
    """:func:`caption_subset`'s texts and image rows."""
    subset, rows = caption_subset(captions, image_ids, lang=lang, source=source, features=features)
    return subset["text"].tolist(), rows


def parallel_texts(captions, *, source_lang: str, target_lang: str, source: str):
    """Aligned (source, target) texts of a parallel corpus: pairs share an image id and caption_idx."""
    keys = ["image_id", "caption_idx"]
    a = captions[captions["lang"] == source_lang][keys + ["text"]]
    b = captions[captions["lang"] == target_lang][keys + ["text"]]
    pairs = a.merge(b, on=keys, suffixes=("_a", "_b"), validate="one_to_one")
    if len(pairs) != len(a) or len(pairs) != len(b):
        raise ValueError(f"{source}: {len(a)} {source_lang} and {len(b)} {target_lang} captions do not pair up")
    return pairs["text_a"].tolist(), pairs["text_b"].tolist()


def evaluate_checkpoint(*, checkpoint: str, vocab_path: str, spec: EvaluationData | dict,
                        device: str = "cpu") -> dict:
    """metrics.json of one trained model (without its experiment and seed) on the test data
    ``spec`` (:class:`~pseudopairs.evaluation.job.EvaluationData`, or its JSON)."""
    from pseudopairs.model.checkpoints import load_model
    from pseudopairs.model.encode import encode_captions_texts, encode_image_features
    from pseudopairs.model.text_encoders import load_vocabulary, parameter_counts

    model, meta = load_model(checkpoint, device=device)
    if caption_similarity(model.similarity) != "cosine":
        raise ValueError(f"{checkpoint}: translation retrieval has an exact engine for cosine "
                         f"caption pairs only, not {caption_similarity(model.similarity)!r}")
    data = EvaluationData.from_dict(spec)
    vocab = load_vocabulary(vocab_path)
    image_ids, features = load_features(data.features)
    check_feature_files({data.features: features.shape[1]}, image_dim=model.image_dim, model=checkpoint)
    image_embeddings = encode_image_features(model, features)
    tables = {data.captions: read_captions(data.captions)}
    # languages also tested on the translation portion's test split (one caption per image, e.g.
    # paper 004's Tables 6 and 7 in En, De, Fr and Cs), over the same test images
    portion = data.portion_captions
    if data.portion_langs:
        tables[portion] = read_captions(portion)

    def retrieval_on(source: str, langs, images=(image_ids, image_embeddings, data.features)) -> dict:
        ids, embeddings, features_path = images
        out = {}
        for lang in langs:
            texts, index = caption_rows(tables[source], ids, lang=lang, source=source,
                                        features=features_path)
            caption_embeddings = encode_captions_texts(model, vocab, texts, lang=lang, batch_size=256)
            out[lang] = retrieval_metrics(image_embeddings=embeddings,
                                          caption_embeddings=caption_embeddings,
                                          caption_image_index=index, similarity=model.similarity)
            log.info("%s (%s): %s", lang, source, out[lang])
        return out

    # a language of your own data may be tested on its own corpus' test split and images
    retrieval = retrieval_on(data.captions, [lang for lang in data.langs if lang not in data.lang_tests])
    for lang, test in data.lang_tests.items():
        tables[test.captions] = read_captions(test.captions)
        ids, lang_features = load_features(test.features)
        check_feature_files({test.features: lang_features.shape[1]}, image_dim=model.image_dim, model=checkpoint)
        retrieval.update(retrieval_on(test.captions, [lang],
                                      (ids, encode_image_features(model, lang_features), test.features)))
    retrieval = {lang: retrieval[lang] for lang in data.langs}
    portion_retrieval = retrieval_on(portion, data.portion_langs)
    translation = {}
    if data.translation_langs:
        a, b = data.translation_langs
        texts_a, texts_b = parallel_texts(read_captions(data.translation_captions), source_lang=a,
                                          target_lang=b, source=data.translation_captions)
        emb_a = encode_captions_texts(model, vocab, texts_a, lang=a, batch_size=256)
        emb_b = encode_captions_texts(model, vocab, texts_b, lang=b, batch_size=256)
        translation = {
            f"{a}2{b}": translation_retrieval(source_embeddings=emb_a, target_embeddings=emb_b)["r1"],
            f"{b}2{a}": translation_retrieval(source_embeddings=emb_b, target_embeddings=emb_a)["r1"],
        }
    result = {
        "retrieval": retrieval,
        "translation": translation,
        "sum_sum": sum(retrieval[lang]["rsum"] for lang in data.langs),
        # how training ended (updates run, stop_reason: early stopping or the max_updates guard)
        "checkpoint": {k: meta[k] for k in ("update", "val_score", "updates", "stop_reason") if k in meta},
        # the model's size (trainable = kept at test time, total, text embedding, and training =
        # trainable + the objective's training-only modules): paper 002's Figure 3 axis
        "parameters": parameter_counts(model, objective_parameters=meta.get("objective_parameters", 0)),
    }
    if data.portion_langs:
        result["portion_retrieval"] = portion_retrieval
    return result


def evaluate_job(job: EvaluationJob, *, threads: int | None = None) -> None:
    """Write each model's metrics.json (``evaluate_checkpoint`` plus its experiment and seed), one
    model after the other in one process (a stack's models in its group job), on the job's device
    with ``threads`` CPU threads (the scheduler's grant; else the job's own)."""
    threads = job.threads if threads is None else threads
    if threads > 0:  # 0: torch's default
        torch.set_num_threads(threads)
    device = resolve_device(job.device, key=f"experiments.{job.experiment}.training.device")
    for seed, model in job.models.items():
        result = evaluate_checkpoint(checkpoint=model.checkpoint, vocab_path=model.vocab,
                                     spec=job.data, device=device)
        result = {"experiment": job.experiment, "seed": int(seed), **result}
        write_json_atomic(model.output, result)
        print(f"{job.experiment} seed {seed}: Sum(Sum) {result['sum_sum']:.2f} -> {model.output}")


def _cli_evaluate(args: argparse.Namespace) -> None:
    evaluate_job(EvaluationJob.from_dict(args.job), threads=args.threads)


def _load_npy(path: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    try:
        data = np.load(p, allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file is bad input
        raise ValueError(f"{p}: not a readable .npy array ({err})") from err
    if not isinstance(data, np.ndarray):
        data.close()
        raise ValueError(f"{p}: expected a single .npy array, got an .npz archive")
    return data


def _cli_score_embeddings(args: argparse.Namespace) -> int:
    images = _load_npy(args.images)
    captions = _load_npy(args.captions)
    index = _load_npy(args.caption_image_index)
    # Validate with the file names in the messages, then compute.
    _validate_retrieval_inputs(
        images, captions, index, names=(args.images, args.captions, args.caption_image_index)
    )
    device = resolve_device(args.device, key="--device")
    metrics = retrieval_metrics(
        image_embeddings=images,
        caption_embeddings=captions,
        caption_image_index=index,
        device=device,
        block_size=args.block_size,
        progress=True,
        similarity=args.similarity,
    )
    write_json_atomic(args.output, metrics)
    return 0


def _cli_score_translation(args: argparse.Namespace) -> int:
    source = _load_npy(args.source)
    target = _load_npy(args.target)
    _validate_translation_inputs(source, target, names=(args.source, args.target))
    device = resolve_device(args.device, key="--device")
    result = translation_retrieval(
        source_embeddings=source, target_embeddings=target, device=device, block_size=args.block_size
    )
    write_json_atomic(args.output, result)
    return 0


def add_model_arguments(p, *, spec: str, output: str) -> None:
    """The options of a step that evaluates one trained model: its checkpoint and vocabulary, the
    inputs (``spec``), its experiment and seed, the device and threads, and the ``output`` file."""
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--vocab", required=True)
    commands.add_json(p, "--spec", spec)
    p.add_argument("--experiment", required=True)
    p.add_argument("--seed", type=int, required=True)
    commands.add_device(p)
    commands.add_threads(p, default=1)
    p.add_argument("--output", required=True, help=f"{output} (written atomically)")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "evaluate", _cli_evaluate)
    commands.add_json(p, "--job", "the evaluation job: an experiment's models by seed, its test data, "
                                  "device and threads (evaluation.contract.evaluation_job)")
    commands.add_threads(p)

    p = commands.add_command(subparsers, "score-embeddings", _cli_score_embeddings)
    p.add_argument("--images", required=True, help="image embeddings, (n_images, d) .npy")
    p.add_argument("--captions", required=True, help="caption embeddings, (n_captions, d) .npy")
    p.add_argument("--caption-image-index", required=True,
                   help="integer .npy of length n_captions: row of each caption's image in --images")
    p.add_argument("--output", required=True, help="metrics JSON (written atomically)")
    commands.add_device(p)
    p.add_argument("--block-size", type=int, default=None, help="queries per score block (default: auto)")
    p.add_argument("--similarity", default="cosine", choices=SIMILARITIES.names(),
                   help="the similarity to rank with (order: image = v; default: cosine)")

    p = commands.add_command(subparsers, "score-translation", _cli_score_translation)
    p.add_argument("--source", required=True, help="source-language embeddings, (n, d) .npy")
    p.add_argument("--target", required=True, help="target-language embeddings, (n, d) .npy; row i translates source row i")
    p.add_argument("--output", required=True, help='JSON {"r1": ...} (written atomically)')
    commands.add_device(p)
    p.add_argument("--block-size", type=int, default=None, help="queries per score block (default: auto)")
