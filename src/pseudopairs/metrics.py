"""``metrics.json`` of a trained model: image–sentence retrieval on the evaluation corpus' test
split for each language (paper §3.3) and translation retrieval on the parallel test pairs
(paper §7.1, Table 7)."""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np

from pseudopairs.io import check_missing_images, load_features, read_captions, write_json_atomic

log = logging.getLogger(__name__)


def caption_rows(captions, image_ids: list[str], *, lang: str, source: str, features):
    """Texts of one language and, for each, the row of its image in ``image_ids`` (read from
    ``features``). Captions of images the feature step skipped are dropped, as in training; any
    other image without features is an error."""
    row_of = {image_id: i for i, image_id in enumerate(image_ids)}
    subset = captions[captions["lang"] == lang]
    if subset.empty:
        raise ValueError(f"{source}: no captions in language {lang!r}")
    known = subset["image_id"].isin(row_of)
    if not known.all():
        check_missing_images(features, subset.loc[~known, "image_id"], captions=source)
        log.warning("%s: %d %s captions have no image features; dropped", source, int((~known).sum()), lang)
        subset = subset[known]
    return subset["text"].tolist(), np.array([row_of[i] for i in subset["image_id"]], dtype=np.int64)


def parallel_texts(captions, *, source_lang: str, target_lang: str, source: str):
    """Aligned (source, target) texts of a parallel corpus: pairs share an image id and caption_idx."""
    keys = ["image_id", "caption_idx"]
    a = captions[captions["lang"] == source_lang][keys + ["text"]]
    b = captions[captions["lang"] == target_lang][keys + ["text"]]
    pairs = a.merge(b, on=keys, suffixes=("_a", "_b"), validate="one_to_one")
    if len(pairs) != len(a) or len(pairs) != len(b):
        raise ValueError(f"{source}: {len(a)} {source_lang} and {len(b)} {target_lang} captions do not pair up")
    return pairs["text_a"].tolist(), pairs["text_b"].tolist()


def evaluate_checkpoint(*, checkpoint: str, vocab_path: str, spec: dict, device: str = "cpu") -> dict:
    from pseudopairs.evaluation import retrieval_metrics, translation_retrieval
    from pseudopairs.training import encode_captions_texts, encode_image_features, load_model
    from pseudopairs.vocab import Vocabulary

    model, meta = load_model(checkpoint, device=device)
    vocab = Vocabulary.load(vocab_path)
    image_ids, features = load_features(spec["features"])
    image_embeddings = encode_image_features(model, features)
    captions = read_captions(spec["captions"])
    retrieval = {}
    for lang in spec["langs"]:
        texts, index = caption_rows(captions, image_ids, lang=lang, source=spec["captions"],
                                    features=spec["features"])
        caption_embeddings = encode_captions_texts(model, vocab, texts, batch_size=256)
        retrieval[lang] = retrieval_metrics(image_embeddings=image_embeddings,
                                            caption_embeddings=caption_embeddings,
                                            caption_image_index=index)
        log.info("%s: %s", lang, retrieval[lang])
    a, b = spec["translation_langs"]
    texts_a, texts_b = parallel_texts(read_captions(spec["translation_captions"]), source_lang=a,
                                      target_lang=b, source=spec["translation_captions"])
    emb_a = encode_captions_texts(model, vocab, texts_a, batch_size=256)
    emb_b = encode_captions_texts(model, vocab, texts_b, batch_size=256)
    translation = {
        f"{a}2{b}": translation_retrieval(source_embeddings=emb_a, target_embeddings=emb_b)["r1"],
        f"{b}2{a}": translation_retrieval(source_embeddings=emb_b, target_embeddings=emb_a)["r1"],
    }
    return {
        "retrieval": retrieval,
        "translation": translation,
        "sum_sum": sum(m["rsum"] for m in retrieval.values()),
        "checkpoint": {k: meta[k] for k in ("update", "val_score") if k in meta},
    }


def _cli_evaluate(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    spec = json.loads(args.spec)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else (
        "cpu" if args.device == "auto" else args.device)
    result = evaluate_checkpoint(checkpoint=args.checkpoint, vocab_path=args.vocab, spec=spec, device=device)
    result = {"experiment": args.experiment, "seed": args.seed, **result}
    write_json_atomic(args.output, result)
    print(json.dumps(result, indent=2))


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="test metrics of a trained model -> metrics.json")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--vocab", required=True)
    p.add_argument("--spec", required=True, help="evaluation inputs as JSON (see experiments.evaluation_spec)")
    p.add_argument("--experiment", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--output", required=True)
    p.set_defaults(func=_cli_evaluate)
