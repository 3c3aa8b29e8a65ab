"""Cross-Lingual Consistency's evaluation (paper 002 §3.4; its translation models' parallel text:
:mod:`pseudopairs.smalr.clc_text`): ``evaluate-clc`` (``metrics.clc.json``: every test query of
each language's query set -- the translation corpus, or the CLC tables' ``lang_test_corpora``
(:func:`pseudopairs.smalr.clc_contract.query_corpus`) -- scored in each CLC language: the query
itself in its own language, its machine translations in the others, each encoded by the model in
that language; the (language, query, image) scores aggregated by CLC-A, the mean, and CLC-C, the
MLP trained on the validation split's scores; image–sentence retrieval metrics per query
language)."""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import pandas as pd
import torch

from pseudopairs import commands
from pseudopairs.evaluation.step import add_model_arguments, caption_subset
from pseudopairs.core.io import load_features, read_captions, write_json_atomic
from pseudopairs.similarity.metrics import metrics_from_ranks

log = logging.getLogger(__name__)

KEYS = ["image_id", "caption_idx"]


# ---------------------------------------------------------------------------------------------
# scores and ranks


def query_versions(captions: pd.DataFrame, translations: dict[str, pd.DataFrame], image_ids: list[str],
                   *, lang: str, langs: list[str], source: str, features: str,
                   names: dict[str, str] | None = None) -> tuple[dict[str, list[str]], np.ndarray]:
    """The queries of language ``lang`` (its captions of images with features, in table order) in
    every language of ``langs``: the captions themselves, else their translation (matched by
    image_id and caption_idx); and each query's image row."""
    subset, index = caption_subset(captions, image_ids, lang=lang, source=source, features=features)
    versions = {}
    for target in langs:
        if target == lang:
            versions[target] = subset["text"].tolist()
            continue
        table = translations[target]
        where = (names or {}).get(target, f"translations {lang}->{target}")
        merged = subset[KEYS].merge(table[KEYS + ["text"]], on=KEYS, how="left", validate="one_to_one")
        if merged["text"].isna().any():
            raise ValueError(f"{where}: {int(merged['text'].isna().sum())} {lang} captions of {source} "
                             "have no translation (delete it and rerun its translate_clc job)")
        versions[target] = merged["text"].tolist()
    return versions, index


def score_tensor(images: torch.Tensor, versions: list[torch.Tensor], similarity: str) -> torch.Tensor:
    """(L, Q, I) float64: ``similarity`` between image i and version l of query q."""
    from pseudopairs.similarity.functions import SIMILARITIES
    scores = SIMILARITIES.get(similarity).scores
    images = torch.as_tensor(images, dtype=torch.float64)
    return torch.stack([scores(images, torch.as_tensor(v, dtype=torch.float64)).t() for v in versions])


#: How a correct candidate ranks among equal scores: ``first`` (the project's exact engines'
#: convention, for embeddings: their ties are duplicate captions or images) or ``last`` (the other
#: candidates with an equal score rank above it). CLC-C's metrics use ``last``: it is a ReLU MLP
#: whose output is exactly 0 for every pair whose hidden units are all off, and a collapsed
#: classifier (a constant score, Eq. (3)'s plateau) would otherwise rank every correct candidate
#: first. ``single`` and CLC-A rank as every other table row (``single`` = metrics.json).
TIES = ("first", "last")


def ranks_from_scores(scores: torch.Tensor, index, *, ties: str = "first") -> dict[str, np.ndarray]:
    """0-based ranks of a (Q, I) score matrix where query q describes image ``index[q]``: T→I,
    the images scoring above the query's own; I→T (images with a query), the other images'
    queries scoring above its best one; equal scores rank above it with ``ties="last"``
    (:data:`TIES`; ``first`` ranks as the project's reference engine)."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {list(TIES)}, got {ties!r}")
    above = torch.ge if ties == "last" else torch.gt
    scores = torch.as_tensor(scores, dtype=torch.float64)
    index = torch.as_tensor(np.asarray(index), dtype=torch.int64)
    q = torch.arange(scores.shape[0])
    own = scores[q, index]
    correct = torch.zeros_like(scores, dtype=torch.bool)
    correct[q, index] = True
    t2i = (above(scores, own.unsqueeze(1)) & ~correct).sum(dim=1)
    best = scores.masked_fill(~correct, float("-inf")).max(dim=0).values           # (I,)
    rows = torch.unique(index)
    i2t = (above(scores, best.unsqueeze(0)) & ~correct).sum(dim=0)
    return {"i2t": i2t[rows].numpy(), "t2i": t2i.numpy()}


def retrieval_from_scores(scores, index, *, ties: str = "first") -> dict[str, float]:
    ranks = ranks_from_scores(scores, index, ties=ties)
    return metrics_from_ranks(i2t_ranks=ranks["i2t"], t2i_ranks=ranks["t2i"])


# ---------------------------------------------------------------------------------------------
# evaluate-clc


def split_scores(spec: dict, split: str, *, encode_images, encode_texts, similarity: str):
    """query language -> ((L, Q, I) scores in ``spec['langs']`` order, (Q,) image rows): language
    ``lang``'s queries are its captions in ``spec['captions'][split][lang]`` (its query corpus),
    each version encoded by ``encode_texts(texts, lang=...)``, the images by
    ``encode_images(features)``."""
    langs = spec["langs"]
    image_ids, features = load_features(spec["features"][split])
    images = torch.as_tensor(encode_images(features)).cpu()
    paths = spec["translations"][split]
    tables: dict[str, pd.DataFrame] = {}
    out = {}
    for lang in langs:
        source = spec["captions"][split][lang]
        if source not in tables:
            tables[source] = read_captions(source)
        translations = {t: read_captions(p) for t, p in paths[lang].items()}
        versions, index = query_versions(tables[source], translations, image_ids, lang=lang, langs=langs,
                                         source=source, features=spec["features"][split],
                                         names=paths[lang])
        encoded = [torch.as_tensor(encode_texts(versions[t], lang=t)).cpu() for t in langs]
        out[lang] = (score_tensor(images, encoded, similarity), index)
    return out


def clc_metrics(val: dict, test: dict, *, langs: list[str], classifier: dict, seed: int) -> dict:
    """CLC-C trained on every validation query (all query languages together), then per query
    language of the test split: retrieval with the query alone (``single``), CLC-A and CLC-C
    (CLC-C's equal scores ranked against the correct candidate: :data:`TIES`)."""
    from pseudopairs.smalr.clc import clc_a, clc_c, train_clc_c

    scores = torch.cat([val[lang][0] for lang in langs], dim=1).float()
    query_images = np.concatenate([val[lang][1] for lang in langs])
    trained = train_clc_c(scores, query_images, margin=classifier["margin"], top_k=classifier["top_k"],
                          learning_rate=classifier["learning_rate"], iterations=classifier["iterations"],
                          hidden=classifier["hidden"], init=classifier["init"],
                          seed=int(classifier["seed"]) + int(seed))
    result = {"langs": list(langs), "single": {}, "clc_a": {}, "clc_c": {},
              "ties": {"single": "first", "clc_a": "first", "clc_c": "last"}}
    for k, lang in enumerate(langs):
        s, index = test[lang]
        result["single"][lang] = retrieval_from_scores(s[k], index)
        result["clc_a"][lang] = retrieval_from_scores(clc_a(s.float()).double(), index)
        result["clc_c"][lang] = retrieval_from_scores(clc_c(trained.model, s.float()).double(), index,
                                                      ties="last")
    result["clc_c_training"] = {"queries": int(scores.shape[1]), "images": int(scores.shape[2]),
                                "losses": trained.losses}
    return result


def evaluate_clc(*, checkpoint: str, vocab_path: str, spec: dict, seed: int, device: str = "cpu") -> dict:
    from pseudopairs.model.checkpoints import load_model
    from pseudopairs.model.text_encoders import load_vocabulary

    from pseudopairs.model.encode import encode_captions_texts, encode_image_features

    model, _ = load_model(checkpoint, device=device)
    vocab = load_vocabulary(vocab_path)
    encoders = {"encode_images": lambda features: encode_image_features(model, features),
                "encode_texts": lambda texts, lang: encode_captions_texts(model, vocab, texts, lang=lang,
                                                                          batch_size=256)}
    with torch.no_grad():
        val, test = (split_scores(spec, s, **encoders, similarity=model.similarity) for s in ("val", "test"))
    return clc_metrics(val, test, langs=spec["langs"], classifier=spec["classifier"], seed=seed)


def _cli_evaluate_clc(args: argparse.Namespace) -> None:
    from pseudopairs.core.settings import resolve_device
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = resolve_device(args.device, key="--device")
    result = evaluate_clc(checkpoint=args.checkpoint, vocab_path=args.vocab, spec=args.spec,
                          seed=args.seed, device=device)
    result = {"experiment": args.experiment, "seed": args.seed, **result}
    write_json_atomic(args.output, result)
    print(json.dumps({k: result[k] for k in ("clc_a", "clc_c")}, indent=2))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "evaluate-clc", _cli_evaluate_clc)
    add_model_arguments(p, spec="smalr.clc_contract.evaluation_spec", output="metrics.clc.json")
