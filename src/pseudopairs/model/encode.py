"""Encoding with a trained model, and the validation score that early stopping follows."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm

from pseudopairs.data.vocab import Vocabulary
from pseudopairs.model.batches import CaptionSet, TokenTable
from pseudopairs.model.encoders import RankingModel
from pseudopairs.model.text_encoders import language_view

ENCODE_BATCH = 256
# validation's caption batches on a GPU: fewer, larger launches (a validation set is ~10K captions)
VALIDATION_BATCH_CUDA = 1024


@torch.no_grad()
def encode_token_table(model: RankingModel, table: TokenTable, *, batch_size: int = ENCODE_BATCH,
                       progress: bool = False, on_device: bool = False) -> torch.Tensor:
    """L2-normalised embeddings (float32, CPU; on the model's device with ``on_device``) of every
    sequence of ``table``, in table order. Sequences are encoded longest first (less padding)
    and put back in order."""
    was_training = model.training
    model.eval()
    where = model.device if on_device else torch.device("cpu")
    out = torch.empty(len(table), model.joint_dim, dtype=torch.float32, device=where)
    order = np.argsort(-table.lengths, kind="stable")
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc="encode captions", disable=not progress, mininterval=5):
        idx = order[start:start + batch_size]
        tokens, lengths = table.batch(idx)
        out[torch.from_numpy(idx).to(where)] = model.encode_captions(tokens, lengths).float().to(where)
    model.train(was_training)
    return out


def encode_captions_texts(model: RankingModel, vocab: Vocabulary, texts: Sequence[str], *,
                          lang: str | None = None, batch_size: int = ENCODE_BATCH,
                          progress: bool = False) -> torch.Tensor:
    """Prepared (space-joined) caption texts of language ``lang`` → L2-normalised embeddings
    (float32, CPU). A HEM model's vocabulary needs ``lang``; a shared one ignores it."""
    return encode_token_table(model, TokenTable.encode(language_view(vocab, lang), list(texts)),
                              batch_size=batch_size, progress=progress)


@torch.no_grad()
def encode_image_features(model: RankingModel, features, *, batch_size: int = 1024,
                          on_device: bool = False) -> torch.Tensor:
    """Stored image features (numpy or torch, any float dtype) → L2-normalised embeddings
    (float32, CPU; on the model's device with ``on_device``)."""
    was_training = model.training
    model.eval()
    features = torch.as_tensor(np.asarray(features) if not torch.is_tensor(features) else features)
    where = model.device if on_device else torch.device("cpu")
    chunks = [model.encode_images(features[s:s + batch_size]).float().to(where)
              for s in range(0, features.shape[0], batch_size)]
    model.train(was_training)
    if not chunks:
        return torch.empty(0, model.joint_dim)
    return torch.cat(chunks)


# The candidate GEMM of validation's exact ranks (see validate): float32, or "auto" (the engine's
# own choice: bf16 where the device has a bf16 unit).
VALIDATION_CANDIDATES = ("float32", "auto")


def validate(model: RankingModel, val_sets: Sequence[CaptionSet], *,
             candidates: str = "float32") -> tuple[float, dict]:
    """Score = Σ over the validation languages of rsum (R@1,5,10 in both directions, percent).
    Each language: all its validation captions against all validation images (every image is a
    candidate, as in the test evaluation), scored with the model's similarity, on the model's
    device (the embeddings stay there and the exact rank engine runs its GEMMs there). Returns
    ``(score, {lang: metrics})``.

    ``candidates``: the exact rank engine's candidate GEMM. The ranks (so the score) are the same
    either way; what differs is how many close candidates the engine settles in float64 on the
    host. A validation set is small (the GEMM costs little anywhere), while a model early in
    training has many close scores, and bf16's wide windows hold many of them: float32 (the
    default) settles far fewer (measured: docs/benchmarks.md, "Training", validation); ``auto`` leaves the
    choice to the engine (bf16 on a GPU or a CPU with a bf16 unit)."""
    from pseudopairs.similarity import bf16_mode
    from pseudopairs.similarity.metrics import retrieval_metrics

    if candidates not in VALIDATION_CANDIDATES:
        raise ValueError(f"validate: candidates must be one of {VALIDATION_CANDIDATES}, got {candidates!r}")
    image_cache: dict[int, torch.Tensor] = {}
    batch_size = VALIDATION_BATCH_CUDA if model.device.type == "cuda" else ENCODE_BATCH
    score = 0.0
    metrics: dict[str, dict] = {}
    for caption_set in val_sets:
        key = id(caption_set.features)
        if key not in image_cache:
            image_cache[key] = encode_image_features(model, caption_set.features, on_device=True)
        captions = encode_token_table(model, caption_set.tokens, on_device=True, batch_size=batch_size)
        with bf16_mode(False if candidates == "float32" else None):
            result = retrieval_metrics(image_embeddings=image_cache[key], caption_embeddings=captions,
                                       caption_image_index=caption_set.feature_rows,
                                       similarity=model.similarity)
        result = {k: float(v) for k, v in result.items()}
        metrics[caption_set.lang] = result
        score += result["rsum"]
    return score, metrics
