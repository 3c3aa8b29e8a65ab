"""Retrieval metrics (paper §3.3): R@K = percentage of queries with rank < K; median rank =
``floor(median(rank)) + 1`` (ranks are 0-based); ``rsum`` = the six recalls summed (the paper's
per-language "Sum"); ``mean_recall`` = their mean, ``rsum / 6`` (paper 002's mean recall "mR":
R@1, R@5, R@10 of both directions averaged per language); :func:`sum_of_sums` adds the rsums over
languages ("Sum(Sum)"). Ranks come from the exact engines of :mod:`pseudopairs.similarity.ranks`,
under the model's similarity (``similarity``: a registered function, default ``cosine``)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Mapping

import numpy as np
import torch

from pseudopairs.similarity.ranks import retrieval_ranks, retrieval_ranks_reference, translation_ranks


RECALL_KS = (1, 5, 10)


METRIC_KEYS = (
    "i2t_r1", "i2t_r5", "i2t_r10", "i2t_medr",
    "t2i_r1", "t2i_r5", "t2i_r10", "t2i_medr",
    "rsum", "mean_recall",
)


RECALL_KEYS = tuple(f"{d}_r{k}" for d in ("i2t", "t2i") for k in RECALL_KS)


def recall_at(ranks: np.ndarray, k: int) -> float:
    """Percentage of queries whose 0-based rank is < k."""
    ranks = np.asarray(ranks)
    if ranks.size == 0:
        raise ValueError("recall_at: no queries")
    return float(100.0 * np.count_nonzero(ranks < k) / ranks.size)


def median_rank(ranks: np.ndarray) -> float:
    """1-based median rank, floored: ``floor(median(0-based ranks)) + 1``."""
    ranks = np.asarray(ranks)
    if ranks.size == 0:
        raise ValueError("median_rank: no queries")
    return float(np.floor(np.median(ranks)) + 1)


def metrics_from_ranks(*, i2t_ranks: np.ndarray, t2i_ranks: np.ndarray) -> dict[str, float]:
    """The :data:`METRIC_KEYS` dict from 0-based ranks."""
    out: dict[str, float] = {}
    for direction, ranks in (("i2t", i2t_ranks), ("t2i", t2i_ranks)):
        for k in RECALL_KS:
            out[f"{direction}_r{k}"] = recall_at(ranks, k)
        out[f"{direction}_medr"] = median_rank(ranks)
    out["rsum"] = float(sum(out[key] for key in RECALL_KEYS))
    out["mean_recall"] = mean_recall(out)
    return {key: out[key] for key in METRIC_KEYS}


def mean_recall(metrics: Mapping[str, float]) -> float:
    """Paper 002's mean recall (mR): the mean of R@1, R@5, R@10 of I→T and of T→I, in percent."""
    return language_sum(metrics, caller="mean_recall") / len(RECALL_KEYS)


def _metrics_of(ranks_function, doc: str):
    """A function that takes ``ranks_function``'s keyword arguments and returns the
    :data:`METRIC_KEYS` dict of its ranks (its signature is ``ranks_function``'s)."""

    @functools.wraps(ranks_function)
    def metrics(**kwargs: Any) -> dict[str, float]:
        ranks = ranks_function(**kwargs)
        return metrics_from_ranks(i2t_ranks=ranks.i2t, t2i_ranks=ranks.t2i)

    signature = inspect.signature(ranks_function)
    metrics.__signature__ = signature.replace(return_annotation=dict[str, float])
    metrics.__doc__ = doc
    metrics.__name__ = metrics.__qualname__ = ranks_function.__name__.replace("ranks", "metrics")
    return metrics


def metrics_of_counts(i2t: torch.Tensor, i2t_rows: torch.Tensor, t2i: torch.Tensor) -> dict[str, float]:
    """:func:`metrics_from_ranks` of rank tensors on a device (the I→T ranks of the query images
    ``i2t_rows``): the recalls and medians computed there, the same numbers (integer counts, then
    the same float arithmetic); only the floats come back."""
    out: dict[str, float] = {}
    for direction, ranks in (("i2t", i2t[i2t_rows]), ("t2i", t2i)):
        n = int(ranks.numel())
        if n == 0:
            raise ValueError(f"{direction}: no queries")
        counts = torch.stack([(ranks < k).sum() for k in RECALL_KS]).tolist()
        for k, count in zip(RECALL_KS, counts):
            out[f"{direction}_r{k}"] = float(100.0 * count / n)
        middle = torch.sort(ranks).values[[(n - 1) // 2, n // 2]].tolist()
        out[f"{direction}_medr"] = float(np.floor(np.median(np.asarray(middle, dtype=np.int64))) + 1)
    out["rsum"] = float(sum(out[key] for key in RECALL_KEYS))
    out["mean_recall"] = mean_recall(out)
    return {key: out[key] for key in METRIC_KEYS}


def _on_the_device(ranks_metrics):
    """``ranks_metrics`` (the metrics of :func:`retrieval_ranks`), except on a GPU with the cosine:
    the ranks are counted and the metrics computed on the device
    (:mod:`pseudopairs.similarity.device_ranks`), only the metrics come back (the same numbers)."""

    @functools.wraps(ranks_metrics)
    def metrics(**kwargs: Any) -> dict[str, float]:
        from pseudopairs.similarity.arrays import engine_device, uses_torch
        from pseudopairs.similarity.ranks import _validate_retrieval_inputs, device_retrieval_counts

        images, captions = kwargs.get("image_embeddings"), kwargs.get("caption_embeddings")
        device = engine_device(kwargs.get("device"), images, captions)
        if not uses_torch(device) or kwargs.get("similarity", "cosine") != "cosine":
            return ranks_metrics(**kwargs)
        index = _validate_retrieval_inputs(images, captions, kwargs.get("caption_image_index"), finite=False)
        i2t, rows, t2i = device_retrieval_counts(images, captions, index, device=device,
                                                 block_size=kwargs.get("block_size"))
        return metrics_of_counts(i2t, rows, t2i)

    return metrics


retrieval_metrics = _on_the_device(_metrics_of(retrieval_ranks, """I→T and T→I R@1/5/10, median ranks, rsum and mean recall (plain floats) — vectorised.

    ``image_embeddings`` (n_images × d) and ``caption_embeddings`` (n_captions × d): numpy arrays
    or torch tensors, rows L2-normalised (similarity = dot product). ``caption_image_index[k]`` =
    row of caption k's image. Captions may be in any order; an image may have any number ≥ 0 of
    captions — images with none are T→I candidates only, not I→T queries. ``similarity``: the
    registered function to rank with (``order``: the model's non-negative rows, image = ``v``).
    Keyword arguments only (those of :func:`pseudopairs.similarity.ranks.retrieval_ranks`:
    ``device``, ``block_size``, ``progress``, ``similarity``). On a GPU (cosine) the ranks are
    counted and the metrics computed on the device; only the metrics come back.
    """))

retrieval_metrics_reference = _metrics_of(
    retrieval_ranks_reference,
    """:func:`retrieval_metrics` computed with the per-query loop of :func:`retrieval_ranks_reference`.""")


def translation_retrieval(
    *,
    source_embeddings: Any,
    target_embeddings: Any,
    device: str | torch.device | None = None,
    block_size: int | None = None,
) -> dict[str, float]:
    """``{"r1": R@1}`` (percent) of retrieving target row i for source row i among all targets.

    Used for Table 7: EN→DE with (source=English, target=German) and DE→EN swapped.
    """
    ranks = translation_ranks(
        source_embeddings=source_embeddings,
        target_embeddings=target_embeddings,
        device=device,
        block_size=block_size,
    )
    return {"r1": recall_at(ranks, 1)}


def language_sum(metrics: Mapping[str, float], *, caller: str = "language_sum") -> float:
    """The paper's per-language "Sum": R@1+R@5+R@10 of I→T plus those of T→I (= ``rsum``).
    ``caller`` names the function in the error for missing keys."""
    missing = [key for key in RECALL_KEYS if key not in metrics]
    if missing:
        raise ValueError(f"{caller}: metrics lack {missing}")
    return float(sum(float(metrics[key]) for key in RECALL_KEYS))


def sum_of_sums(metrics_by_lang: Mapping[str, Mapping[str, float]]) -> float:
    """The paper's "Sum(Sum)": :func:`language_sum` added over languages (``{"en": metrics, …}``)."""
    if not metrics_by_lang:
        raise ValueError("sum_of_sums: no languages given")
    total = 0.0
    for lang, metrics in metrics_by_lang.items():
        try:
            total += language_sum(metrics)
        except ValueError as err:
            raise ValueError(f"sum_of_sums: language {lang!r}: {err}") from err
    return total
