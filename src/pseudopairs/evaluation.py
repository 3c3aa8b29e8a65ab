"""Retrieval evaluation (paper §3.3, §7.1; DESIGN §1 "Evaluation").

Image–caption retrieval on a test split:

* **I→T** (image to text): each image that has at least one caption is a query; the candidates are
  *all* captions. Its rank is the rank of its best-ranked correct caption. Images with no caption
  are still candidates for T→I but are not I→T queries (there is nothing to retrieve for them).
* **T→I** (text to image): each caption is a query; the candidates are all images; its rank is the
  rank of its own image.

Rank rule (shared by every function here): a query's rank is the number of candidates that score
**strictly higher** than the correct item, so 0 is the top and ties favour the correct item. For
I→T with several correct captions, the best correct caption's score is the maximum over that
image's captions, and the rank counts all captions scoring strictly above it (another correct
caption can never score above the best one, so it is never counted).

Metrics: ``R@K`` = percentage of queries with rank < K; median rank = ``floor(median(rank)) + 1``
(ranks are 0-based, so this is the 1-based median, floored); ``rsum`` = the six recalls summed
(the paper's per-language "Sum"); :func:`sum_of_sums` adds those over languages ("Sum(Sum)").

Similarity is the plain dot product of the given rows (the model returns L2-normalised embeddings,
so this is the cosine); nothing is renormalised here. Scores are computed and compared in float32,
and each query's correct score is taken from the same score block its competitors come from, so a
rank never depends on two differently rounded copies of one number.

:func:`retrieval_metrics` is vectorised with torch (CPU or CUDA): one image × caption score
matrix serves both directions, built in blocks of image rows so that e.g. 5K images × 25K captions
fits in bounded memory (≤ 2**24 scores per block by default); :func:`retrieval_metrics_reference` is a plain
per-query numpy loop (sort the candidates, find the correct one) kept to check it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from pseudopairs.io import write_json_atomic

RECALL_KS = (1, 5, 10)
METRIC_KEYS = (
    "i2t_r1", "i2t_r5", "i2t_r10", "i2t_medr",
    "t2i_r1", "t2i_r5", "t2i_r10", "t2i_medr",
    "rsum",
)
RECALL_KEYS = tuple(f"{d}_r{k}" for d in ("i2t", "t2i") for k in RECALL_KS)

# Upper bound on the number of float32 scores held at once by the vectorised code (64 MiB).
DEFAULT_BLOCK_ELEMENTS = 1 << 24


class RetrievalRanks(NamedTuple):
    """0-based ranks. ``i2t[j]`` belongs to image row ``i2t_image_rows[j]`` (the images that have
    at least one caption, ascending); ``t2i[k]`` belongs to caption row ``k``."""

    i2t: np.ndarray
    i2t_image_rows: np.ndarray
    t2i: np.ndarray


# --------------------------------------------------------------------------------------------
# Input checking and conversion
# --------------------------------------------------------------------------------------------


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    try:
        return np.asarray(x)
    except Exception as err:  # noqa: BLE001 - report any conversion failure as bad input
        raise ValueError(f"{name}: cannot be read as an array ({err})") from err


def _check_embeddings(x: Any, name: str) -> tuple[int, int]:
    """Validate a 2-D finite numeric matrix; return its shape (without copying torch tensors)."""
    if isinstance(x, torch.Tensor):
        if x.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D matrix (rows × dims), got shape {tuple(x.shape)}")
        if x.is_complex() or x.dtype == torch.bool:
            raise ValueError(f"{name}: expected real numbers, got dtype {x.dtype}")
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name}: contains NaN or infinite values")
        return int(x.shape[0]), int(x.shape[1])
    arr = _to_numpy(x, name)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D matrix (rows × dims), got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return int(arr.shape[0]), int(arr.shape[1])


def _check_index(x: Any, name: str, *, n_captions: int, n_images: int) -> np.ndarray:
    arr = _to_numpy(x, name)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of image rows, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integer image rows, got dtype {arr.dtype}")
    if arr.shape[0] != n_captions:
        raise ValueError(f"{name}: has {arr.shape[0]} entries but there are {n_captions} captions")
    bad = np.flatnonzero((arr < 0) | (arr >= n_images))
    if bad.size:
        k = int(bad[0])
        raise ValueError(
            f"{name}: entry {k} is {int(arr[k])}, outside the {n_images} image rows [0, {n_images})"
        )
    return arr.astype(np.int64, copy=False)


def _validate_retrieval_inputs(
    image_embeddings: Any,
    caption_embeddings: Any,
    caption_image_index: Any,
    *,
    names: tuple[str, str, str] = ("image_embeddings", "caption_embeddings", "caption_image_index"),
) -> np.ndarray:
    """Check the three inputs; return the caption→image index as int64 numpy."""
    n_img, d_img = _check_embeddings(image_embeddings, names[0])
    n_cap, d_cap = _check_embeddings(caption_embeddings, names[1])
    if n_img == 0:
        raise ValueError(f"{names[0]}: no images (0 rows)")
    if n_cap == 0:
        raise ValueError(f"{names[1]}: no captions (0 rows)")
    if d_img != d_cap:
        raise ValueError(
            f"{names[0]} has {d_img} dimensions but {names[1]} has {d_cap}; they must match"
        )
    return _check_index(caption_image_index, names[2], n_captions=n_cap, n_images=n_img)


def _validate_translation_inputs(
    source: Any, target: Any, *, names: tuple[str, str] = ("source_embeddings", "target_embeddings")
) -> None:
    n_src, d_src = _check_embeddings(source, names[0])
    n_tgt, d_tgt = _check_embeddings(target, names[1])
    if n_src == 0:
        raise ValueError(f"{names[0]}: no sentences (0 rows)")
    if (n_src, d_src) != (n_tgt, d_tgt):
        raise ValueError(
            f"{names[0]} has shape {(n_src, d_src)} but {names[1]} has {(n_tgt, d_tgt)}; "
            "row i of each must be a translation pair"
        )


def _resolve_device(device: str | torch.device | None, *inputs: Any) -> torch.device:
    if device is not None:
        return torch.device(device)
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            return x.device
    return torch.device("cpu")


def _as_float32(x: Any, device: torch.device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(device=device, dtype=torch.float32).contiguous()
    arr = np.ascontiguousarray(np.asarray(x), dtype=np.float32)
    return torch.from_numpy(arr).to(device)


def _block_rows(n_queries: int, n_candidates: int, block_size: int | None) -> int:
    if block_size is not None:
        if int(block_size) < 1:
            raise ValueError(f"block_size must be a positive number of rows, got {block_size}")
        return int(block_size)
    return max(1, min(n_queries, DEFAULT_BLOCK_ELEMENTS // max(1, n_candidates)))


# --------------------------------------------------------------------------------------------
# Vectorised ranks
# --------------------------------------------------------------------------------------------


def _ranks_single_target(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    target: torch.Tensor,
    *,
    block: int,
    progress: bool,
    desc: str,
) -> torch.Tensor:
    """Rank of candidate ``target[q]`` for each query q: #candidates scoring strictly higher."""
    n = queries.shape[0]
    ranks = torch.empty(n, dtype=torch.int64, device=queries.device)
    starts = range(0, n, block)
    for s in tqdm(starts, desc=desc, unit="block", disable=not progress):
        e = min(n, s + block)
        scores = queries[s:e] @ candidates.T  # (b, n_candidates) float32
        correct = scores.gather(1, target[s:e, None])  # taken from the same block: same rounding
        ranks[s:e] = (scores > correct).sum(dim=1, dtype=torch.int32)
    return ranks


def _ranks_both_directions(
    images: torch.Tensor,
    captions: torch.Tensor,
    index: torch.Tensor,
    *,
    block: int,
    progress: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(I→T rank per image row, T→I rank per caption) from one image×caption score matrix.

    The score matrix is built in blocks of ``block`` image rows. A block holds every caption, so
    I→T is finished block by block: an image's best correct score is the max over its captions'
    entries (scatter-amax) and its rank counts the entries strictly above it (images with no
    caption get a meaningless value; the caller drops them). T→I needs each caption's correct
    score, which lives in the block of its image, before counting down the caption's column; when
    the whole matrix fits in one block that is one pass, otherwise a second pass recomputes the
    blocks (same inputs and shapes, hence the same float32 values) and counts.
    """
    n_img, n_cap = images.shape[0], captions.shape[0]
    dev = images.device
    order = torch.argsort(index, stable=True)  # captions grouped by image, any input order
    sorted_img = index[order]
    bounds = torch.searchsorted(
        sorted_img, torch.arange(0, n_img + 1, device=dev, dtype=sorted_img.dtype)
    ).tolist()  # bounds[i]:bounds[i+1] = image i's captions in ``order``
    i2t = torch.empty(n_img, dtype=torch.int64, device=dev)
    t2i_correct = torch.empty(n_cap, dtype=torch.float32, device=dev)
    t2i = torch.zeros(n_cap, dtype=torch.int64, device=dev)
    starts = list(range(0, n_img, block))
    single = len(starts) == 1
    for s in tqdm(starts, desc="I→T", unit="block", disable=not progress):
        e = min(n_img, s + block)
        scores = images[s:e] @ captions.T  # (b, n_captions) float32
        lo, hi = bounds[s], bounds[e]
        caps = order[lo:hi]
        rows = sorted_img[lo:hi] - s
        correct = scores[rows, caps]  # taken from the block itself: same rounding as competitors
        best = torch.full((e - s,), -math.inf, dtype=scores.dtype, device=dev)
        best = best.scatter_reduce(0, rows, correct, reduce="amax", include_self=True)
        i2t[s:e] = (scores > best[:, None]).sum(dim=1, dtype=torch.int32)
        t2i_correct[caps] = correct
        if single:
            t2i += (scores > t2i_correct[None, :]).sum(dim=0, dtype=torch.int32)
    if not single:
        for s in tqdm(starts, desc="T→I", unit="block", disable=not progress):
            e = min(n_img, s + block)
            scores = images[s:e] @ captions.T
            t2i += (scores > t2i_correct[None, :]).sum(dim=0, dtype=torch.int32)
    return i2t, t2i


def retrieval_ranks(
    *,
    image_embeddings: Any,
    caption_embeddings: Any,
    caption_image_index: Any,
    device: str | torch.device | None = None,
    block_size: int | None = None,
    progress: bool = False,
) -> RetrievalRanks:
    """0-based I→T and T→I ranks (vectorised). See the module docstring for the definitions.

    ``device``: where to compute (default: the device of a CUDA tensor input, else CPU).
    ``block_size``: image rows per score block (default: as many as keep a block ≤ 2**24 scores,
    e.g. all 1,000 × 5,000 at once; 5,000 × 25,000 goes in 8 blocks of 671 rows, twice).
    """
    index_np = _validate_retrieval_inputs(image_embeddings, caption_embeddings, caption_image_index)
    dev = _resolve_device(device, image_embeddings, caption_embeddings)
    images = _as_float32(image_embeddings, dev)
    captions = _as_float32(caption_embeddings, dev)
    index = torch.from_numpy(index_np).to(dev)
    n_img, n_cap = images.shape[0], captions.shape[0]
    with torch.no_grad():
        i2t_all, t2i = _ranks_both_directions(
            images, captions, index, block=_block_rows(n_img, n_cap, block_size), progress=progress
        )
    has_caption = np.bincount(index_np, minlength=n_img) > 0
    query_rows = np.flatnonzero(has_caption)
    return RetrievalRanks(
        i2t=i2t_all.cpu().numpy()[query_rows], i2t_image_rows=query_rows, t2i=t2i.cpu().numpy()
    )


# --------------------------------------------------------------------------------------------
# Reference (per-query loop)
# --------------------------------------------------------------------------------------------


def _reference_rank(scores: np.ndarray, correct: np.ndarray) -> int:
    """Sort candidates by score (descending), correct ones first among equals; return the
    position of the first correct candidate."""
    order = np.lexsort((~correct, -scores))  # last key is the primary key
    return int(np.flatnonzero(correct[order])[0])


def retrieval_ranks_reference(
    *,
    image_embeddings: Any,
    caption_embeddings: Any,
    caption_image_index: Any,
    progress: bool = False,
) -> RetrievalRanks:
    """Same result as :func:`retrieval_ranks`, one query at a time with numpy (slow; for checks)."""
    index = _validate_retrieval_inputs(image_embeddings, caption_embeddings, caption_image_index)
    images = _to_numpy(image_embeddings, "image_embeddings").astype(np.float32)
    captions = _to_numpy(caption_embeddings, "caption_embeddings").astype(np.float32)
    i2t, rows = [], []
    for i in tqdm(range(images.shape[0]), desc="I→T (reference)", disable=not progress):
        correct = index == i
        if not correct.any():
            continue  # not a query: nothing to retrieve
        rows.append(i)
        i2t.append(_reference_rank(captions @ images[i], correct))
    t2i = []
    image_rows = np.arange(images.shape[0])
    for k in tqdm(range(captions.shape[0]), desc="T→I (reference)", disable=not progress):
        t2i.append(_reference_rank(images @ captions[k], image_rows == index[k]))
    return RetrievalRanks(
        i2t=np.asarray(i2t, dtype=np.int64),
        i2t_image_rows=np.asarray(rows, dtype=np.int64),
        t2i=np.asarray(t2i, dtype=np.int64),
    )


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


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
    return {key: out[key] for key in METRIC_KEYS}


def retrieval_metrics(
    *,
    image_embeddings: Any,
    caption_embeddings: Any,
    caption_image_index: Any,
    device: str | torch.device | None = None,
    block_size: int | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """I→T and T→I R@1/5/10, median ranks and rsum (plain floats) — vectorised.

    ``image_embeddings`` (n_images × d) and ``caption_embeddings`` (n_captions × d): numpy arrays
    or torch tensors, rows L2-normalised (similarity = dot product). ``caption_image_index[k]`` =
    row of caption k's image. Captions may be in any order; an image may have any number ≥ 0 of
    captions — images with none are T→I candidates only, not I→T queries.
    """
    ranks = retrieval_ranks(
        image_embeddings=image_embeddings,
        caption_embeddings=caption_embeddings,
        caption_image_index=caption_image_index,
        device=device,
        block_size=block_size,
        progress=progress,
    )
    return metrics_from_ranks(i2t_ranks=ranks.i2t, t2i_ranks=ranks.t2i)


def retrieval_metrics_reference(
    *, image_embeddings: Any, caption_embeddings: Any, caption_image_index: Any, progress: bool = False
) -> dict[str, float]:
    """:func:`retrieval_metrics` computed with the per-query loop of :func:`retrieval_ranks_reference`."""
    ranks = retrieval_ranks_reference(
        image_embeddings=image_embeddings,
        caption_embeddings=caption_embeddings,
        caption_image_index=caption_image_index,
        progress=progress,
    )
    return metrics_from_ranks(i2t_ranks=ranks.i2t, t2i_ranks=ranks.t2i)


# --------------------------------------------------------------------------------------------
# Translation retrieval (Table 7)
# --------------------------------------------------------------------------------------------


def translation_ranks(
    *,
    source_embeddings: Any,
    target_embeddings: Any,
    device: str | torch.device | None = None,
    block_size: int | None = None,
) -> np.ndarray:
    """0-based rank of target row i among all targets for source row i (strictly-higher rule)."""
    _validate_translation_inputs(source_embeddings, target_embeddings)
    dev = _resolve_device(device, source_embeddings, target_embeddings)
    source = _as_float32(source_embeddings, dev)
    target = _as_float32(target_embeddings, dev)
    n = source.shape[0]
    with torch.no_grad():
        ranks = _ranks_single_target(
            source, target, torch.arange(n, device=dev),
            block=_block_rows(n, n, block_size), progress=False, desc="translation",
        )
    return ranks.cpu().numpy()


def translation_ranks_reference(*, source_embeddings: Any, target_embeddings: Any) -> np.ndarray:
    """:func:`translation_ranks` as a per-query numpy loop (for checks)."""
    _validate_translation_inputs(source_embeddings, target_embeddings)
    source = _to_numpy(source_embeddings, "source_embeddings").astype(np.float32)
    target = _to_numpy(target_embeddings, "target_embeddings").astype(np.float32)
    rows = np.arange(target.shape[0])
    return np.asarray(
        [_reference_rank(target @ source[i], rows == i) for i in range(source.shape[0])],
        dtype=np.int64,
    )


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


# --------------------------------------------------------------------------------------------
# Sums
# --------------------------------------------------------------------------------------------


def language_sum(metrics: Mapping[str, float]) -> float:
    """The paper's per-language "Sum": R@1+R@5+R@10 of I→T plus those of T→I (= ``rsum``)."""
    missing = [key for key in RECALL_KEYS if key not in metrics]
    if missing:
        raise ValueError(f"language_sum: metrics lack {missing}")
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


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


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
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    metrics = retrieval_metrics(
        image_embeddings=images,
        caption_embeddings=captions,
        caption_image_index=index,
        device=device,
        block_size=args.block_size,
        progress=True,
    )
    write_json_atomic(args.output, metrics)
    return 0


def _cli_score_translation(args: argparse.Namespace) -> int:
    source = _load_npy(args.source)
    target = _load_npy(args.target)
    _validate_translation_inputs(source, target, names=(args.source, args.target))
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    result = translation_retrieval(
        source_embeddings=source, target_embeddings=target, device=device, block_size=args.block_size
    )
    write_json_atomic(args.output, result)
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "score-embeddings",
        help="image–caption retrieval metrics (R@1/5/10, median rank, rsum) from saved embeddings",
    )
    p.add_argument("--images", required=True, help="image embeddings, (n_images, d) .npy")
    p.add_argument("--captions", required=True, help="caption embeddings, (n_captions, d) .npy")
    p.add_argument(
        "--caption-image-index", required=True,
        help="integer .npy of length n_captions: row of each caption's image in --images",
    )
    p.add_argument("--output", required=True, help="metrics JSON (written atomically)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--block-size", type=int, default=None, help="queries per score block (default: auto)")
    p.set_defaults(func=_cli_score_embeddings)

    p = subparsers.add_parser(
        "score-translation",
        help="translation retrieval R@1 (target row i for source row i) from saved sentence embeddings",
    )
    p.add_argument("--source", required=True, help="source-language embeddings, (n, d) .npy")
    p.add_argument("--target", required=True, help="target-language embeddings, (n, d) .npy; row i translates source row i")
    p.add_argument("--output", required=True, help='JSON {"r1": ...} (written atomically)')
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--block-size", type=int, default=None, help="queries per score block (default: auto)")
    p.set_defaults(func=_cli_score_translation)
