"""The pipeline's pseudopair steps (paper §2.2): ``mine`` — encode the query and database captions
with a trained model, take each query's match by the pseudopair set's criterion and write
``pairs.parquet`` and ``stats.json`` — and ``pseudopair-captions`` — keep the pairs at or above a
score percentile, as a caption table that training reads like any other."""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd

from pseudopairs import commands
from pseudopairs.core.io import (check_caption_texts, read_captions, read_pairs,
                            write_json_atomic, write_parquet_atomic)
from pseudopairs.mining.search import nearest_neighbours, pair_cosines
from pseudopairs.mining.statistics import usage_summary
from pseudopairs.mining.job import MiningJob
from pseudopairs.core.settings import resolve_device

log = logging.getLogger(__name__)


def mine_pseudopairs(*, job: MiningJob, pairs_path, stats_path, progress: bool = True) -> dict:
    """Encode the query and database captions with the source model (``job``:
    :func:`pseudopairs.mining.contract.mining_job`), take each query's match by ``job.criterion``
    and write ``pairs.parquet`` (:data:`PAIR_COLUMNS`, one row per query that got a match, in
    query order) and ``stats.json``, both atomically."""
    import torch

    from pseudopairs.model.checkpoints import load_model
    from pseudopairs.model.encode import encode_captions_texts
    from pseudopairs.model.text_encoders import load_vocabulary

    engine = job.engine
    torch.set_num_threads(engine.threads)
    device = torch.device(resolve_device(engine.device, key="mining.device"))
    started = time.perf_counter()
    model, meta = load_model(job.checkpoint, device=device)
    vocab = load_vocabulary(job.vocab)
    refs = {"queries": job.queries, "database": job.database}
    tables = {}
    for role, ref in refs.items():
        frame = read_captions(ref.captions, lang=ref.lang)
        if frame.empty:
            raise ValueError(f"{ref.captions}: no {ref.lang!r} captions to mine ({role})")
        if "text" not in frame.columns:
            raise ValueError(f"{ref.captions}: caption table has no prepared 'text' column")
        check_caption_texts(frame["text"], source=ref.captions, what=f"{ref.lang} captions ({role})")
        tables[role] = frame
    batch = engine.encode_batch_size
    embeddings = {role: encode_captions_texts(model, vocab, tables[role]["text"].astype(str).tolist(),
                                              lang=ref.lang, batch_size=batch, progress=progress)
                  for role, ref in refs.items()}
    encoded = time.perf_counter()
    indices, scores = nearest_neighbours(
        embeddings["queries"].numpy(), embeddings["database"].numpy(),
        criterion=job.criterion, device=str(device), block_size=engine.block_size, progress=progress,
        **job.params)
    mined = time.perf_counter()
    matched = indices >= 0
    q = tables["queries"][matched].reset_index(drop=True)
    rows = indices[matched]
    d = tables["database"].iloc[rows].reset_index(drop=True)
    similarity = pair_cosines(embeddings["queries"].numpy()[matched], embeddings["database"].numpy(), rows=rows)
    pairs = pd.DataFrame({
        "query_image_id": q["image_id"].astype(str), "query_caption_idx": q["caption_idx"].astype("int64"),
        "query_lang": q["lang"], "query_text": q["text"].astype(str),
        "match_row": rows.astype("int64"), "match_image_id": d["image_id"].astype(str),
        "match_caption_idx": d["caption_idx"].astype("int64"), "match_lang": d["lang"],
        "match_text": d["text"].astype(str), "match_raw": d["raw"].astype(str),
        "similarity": similarity.astype("float32"), "score": scores[matched].astype("float32"),
    })
    database_texts = tables["database"]["text"].astype(str)
    stats = {
        "pseudopairs": job.pseudopairs, "source": job.source, "seed": job.seed,
        "settings": job.settings_record(), "checkpoint_update": meta.get("update"),
        "n_queries": int(len(tables["queries"])), "n_pairs": int(matched.sum()),
        "n_unmatched": int((~matched).sum()), "n_database": int(len(database_texts)),
        "n_database_unique_texts": int(database_texts.nunique()),
        "seconds": {"encode": round(encoded - started, 3), "mine": round(mined - encoded, 3)},
        **usage_summary(rows, n_database=len(database_texts)),
    }
    write_parquet_atomic(pairs_path, pairs)
    write_json_atomic(stats_path, stats)
    log.info("%s seed %s: %d pairs from %d queries; %.1f%% of %d database captions used",
             job.pseudopairs, job.seed, stats["n_pairs"], stats["n_queries"],
             100 * stats["used_share"], stats["n_database"])
    return stats


def percentile_filter(scores, *, min_percentile: float) -> np.ndarray:
    """Boolean mask of the pairs to keep: score ≥ the ``min_percentile``-th percentile of all
    ``scores`` (numpy's linear interpolation). 0 keeps every pair; the paper's "25%" removes the
    pairs below the 25th percentile, its "75%" keeps those at or above the 75th."""
    scores = np.asarray(scores, dtype=np.float64)
    if not 0 <= float(min_percentile) <= 100:
        raise ValueError(f"min_percentile must be in [0, 100], got {min_percentile}")
    if scores.size == 0:
        raise ValueError("percentile_filter: no pairs")
    if float(min_percentile) == 0:
        return np.ones(scores.shape, dtype=bool)
    return scores >= np.percentile(scores, float(min_percentile))


def pseudopair_caption_table(pairs, *, min_percentile: float, dataset: str):
    """The kept pairs as a caption table (columns of :data:`pseudopairs.core.io.CAPTION_COLUMNS` plus
    ``score``): each kept pair stays with its own query image and caption index, its caption is
    the matched one (language, raw and prepared text)."""
    keep = percentile_filter(pairs["score"].to_numpy(), min_percentile=min_percentile)
    kept = pairs[keep]
    return pd.DataFrame({
        "dataset": dataset, "split": "train", "image_id": kept["query_image_id"].astype(str),
        "lang": kept["match_lang"], "caption_idx": kept["query_caption_idx"].astype("int64"),
        "raw": kept["match_raw"], "text": kept["match_text"], "score": kept["score"],
    }).reset_index(drop=True)


def _cli_mine(args) -> None:
    import json

    job = MiningJob.from_dict(args.job)
    job = job.with_threads(args.threads) if args.threads else job
    stats = mine_pseudopairs(job=job, pairs_path=args.pairs, stats_path=args.stats)
    print(json.dumps({k: v for k, v in stats.items() if k != "settings"}, indent=2))


def _cli_pseudopair_captions(args) -> None:
    pairs = read_pairs(args.pairs)
    table = pseudopair_caption_table(pairs, min_percentile=args.min_percentile, dataset=args.dataset)
    write_parquet_atomic(args.output, table)
    print(f"{len(table)} of {len(pairs)} pairs kept at or above percentile {args.min_percentile:g} "
          f"-> {args.output}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "mine", _cli_mine)
    commands.add_json(p, "--job", "the mining job (mining.contract.mining_job)")
    commands.add_threads(p)
    p.add_argument("--pairs", required=True, help="pairs.parquet (written atomically)")
    p.add_argument("--stats", required=True, help="stats.json (written atomically)")
    p = commands.add_command(subparsers, "pseudopair-captions", _cli_pseudopair_captions)
    p.add_argument("--pairs", required=True)
    p.add_argument("--min-percentile", type=float, required=True)
    p.add_argument("--dataset", required=True, help="value of the table's dataset column")
    p.add_argument("--output", required=True)
