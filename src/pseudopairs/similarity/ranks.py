"""Exact retrieval ranks (paper §3.3, §7.1); the metrics computed from
them are in :mod:`pseudopairs.similarity.metrics`.

Image–caption retrieval on a test split:

* **I→T** (image to text): each image that has at least one caption is a query; the candidates are
  *all* captions. Its rank is the rank of its best-ranked correct caption. Images with no caption
  are still candidates for T→I but are not I→T queries (there is nothing to retrieve for them).
* **T→I** (text to image): each caption is a query; the candidates are all images; its rank is the
  rank of its own image.

Scores (exact): the similarity of an image row x and a caption row y is the plain dot product of
the given rows (the model returns L2-normalised embeddings, so this is the cosine; nothing is
renormalised here), evaluated **in float64 by one deterministic routine**,
:func:`pseudopairs.similarity.dot64_pairs` (elementwise products summed by numpy's pairwise
summation along the row): the same pair of vectors always gives the same bits, for float32
inputs every product is exact, and the value is within ``γ_d·Σ|x_j y_j|`` (≈ 1e-13 at d = 1024)
of the real dot product.

Rank rule (shared by every function here): a query's rank is the number of candidates whose exact
score is **strictly higher** than the correct item's, so 0 is the top and ties (equal float64
values — e.g. duplicate candidates) favour the correct item. For I→T with several correct
captions, the correct score is the maximum over that image's captions, and the rank counts all
captions scoring strictly above it (another correct caption can never score above the best one).

:func:`retrieval_ranks` computes these ranks exactly without a float64 score matrix: one float32
image × caption GEMM, in blocks of whole image rows (≤ 2**25 scores per block by default, so
e.g. 5K images × 25K captions fits in bounded memory; numpy/OpenBLAS on the CPU, torch on CUDA),
serves **both directions in a single pass**. Each query's threshold is its correct score (taken
from the block itself when all images fit in one block, else from a float32 row-wise product);
every entry is compared with a window ``t ± W`` around it, ``W`` being a proven bound on the
float32 error of the entry and the threshold plus the float64 error
(:mod:`pseudopairs.similarity`): entries above the window are counted as higher, entries below
it are not, and the rare entries inside it (beyond the correct one) are settled in float64 with
the exact routine. Where :func:`pseudopairs.similarity.bf16_enabled` says so (a CPU with a
bfloat16 dot-product unit, a GPU with bf16 tensor cores) the GEMM runs on rows rounded to bfloat16
instead, with windows from its own proven bound (:func:`_candidate_gemm`): the same ranks, faster.
On a GPU the whole count runs there (:mod:`pseudopairs.similarity.device_ranks`: the float64
settling in numpy's summation order on the device, so the same bits and ranks; only the counts,
or with :func:`~pseudopairs.similarity.metrics.retrieval_metrics` the metrics, come back).
:func:`retrieval_ranks_reference` is a plain per-query loop over exact float64
scores (sort the candidates, find the correct one) kept to check it.

Other similarities: ``similarity=NAME`` (a registered function,
:mod:`pseudopairs.similarity.functions`; default ``cosine``, the engine above) ranks with that
function's own exact blocked engine under the same rule (``order``:
:mod:`pseudopairs.similarity.order`, float64 blocks), and the reference with its exact pair scores.

Metrics: ``R@K`` = percentage of queries with rank < K; median rank = ``floor(median(rank)) + 1``
(ranks are 0-based, so this is the 1-based median, floored); ``rsum`` = the six recalls summed
(the paper's per-language "Sum"); :func:`sum_of_sums` adds those over languages ("Sum(Sum)").
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from pseudopairs.similarity import (DenseRows, ThresholdCounter, U32, accumulation_unit,
                                    bf16_dot_error, bf16_enabled, bf16_from_blocks, bf16_slack,
                                    block_shape, combine_units, cpu_threads, dot64_pairs,
                                    dot64_relative_error, engine_device, gemm_relative_error,
                                    is_tensor, iter_blocks, matmul_input_unit, output_unit,
                                    underflow_slack, uses_torch)
from pseudopairs.similarity.functions import SIMILARITIES
from pseudopairs.similarity.reducers import _gather, _np


class RetrievalRanks(NamedTuple):
    """0-based ranks. ``i2t[j]`` belongs to image row ``i2t_image_rows[j]`` (the images that have
    at least one caption, ascending); ``t2i[k]`` belongs to caption row ``k``."""

    i2t: np.ndarray
    i2t_image_rows: np.ndarray
    t2i: np.ndarray


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return (x.float() if x.dtype == torch.bfloat16 else x).cpu().numpy()
    try:
        return np.asarray(x)
    except Exception as err:  # noqa: BLE001 - report any conversion failure as bad input
        raise ValueError(f"{name}: cannot be read as an array ({err})") from err


def _check_embeddings(x: Any, name: str, *, finite: bool = True) -> tuple[int, int]:
    """Validate a 2-D finite numeric matrix; return its shape (without copying torch tensors).
    ``finite=False`` leaves the finiteness of numpy input to :func:`_embeddings` (one pass less)."""
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
    if finite and arr.dtype.kind == "f" and arr.size and not (np.isfinite(arr.min()) and np.isfinite(arr.max())):
        raise ValueError(f"{name}: contains NaN or infinite values")  # min/max propagate NaN
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
    finite: bool = True,
) -> np.ndarray:
    """Check the three inputs; return the caption→image index as int64 numpy."""
    n_img, d_img = _check_embeddings(image_embeddings, names[0], finite=finite)
    n_cap, d_cap = _check_embeddings(caption_embeddings, names[1], finite=finite)
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
    source: Any, target: Any, *, names: tuple[str, str] = ("source_embeddings", "target_embeddings"),
    finite: bool = True,
) -> None:
    n_src, d_src = _check_embeddings(source, names[0], finite=finite)
    n_tgt, d_tgt = _check_embeddings(target, names[1], finite=finite)
    if n_src == 0:
        raise ValueError(f"{names[0]}: no sentences (0 rows)")
    if (n_src, d_src) != (n_tgt, d_tgt):
        raise ValueError(
            f"{names[0]} has shape {(n_src, d_src)} but {names[1]} has {(n_tgt, d_tgt)}; "
            "row i of each must be a translation pair"
        )


class _Embeddings(NamedTuple):
    """One side of the score matrix: the values as given (numpy; exact scores read these), their
    float32 copy for the GEMM (numpy, or torch on the engine device) and upper bounds on the row
    norms (``‖x_i‖ ≤ norm[i]``, also bounding every ``|x_ij|``)."""

    raw: np.ndarray
    gemm: Any
    norm: np.ndarray


def _embeddings(x: Any, device: Any, name: str = "embeddings") -> _Embeddings:
    raw = _to_numpy(x, name)
    if uses_torch(device):
        src = x.detach() if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(raw))
        gemm = src.to(device=device, dtype=torch.float32).contiguous()
        squares = (gemm * gemm).sum(dim=1).double().cpu().numpy()
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # detected just below
            gemm = np.ascontiguousarray(raw, dtype=np.float32)
            squares = np.einsum("ij,ij->i", gemm, gemm).astype(np.float64)
    # float32 sum of squares of float32-rounded rows: relative error ≤ γ_{d+3} (rows rounded,
    # squared, summed), plus what underflow can lose; rounded up generously.
    dim = raw.shape[1]
    inflate = 1.0 + 2.0 * gemm_relative_error(dim + 2)
    if not np.isfinite(squares).all():  # NaN/inf propagate into the sums of squares
        if raw.dtype.kind == "f" and not np.isfinite(raw).all():
            raise ValueError(f"{name}: contains NaN or infinite values")
        raise ValueError(f"{name}: values too large for float32 scoring; rescale the embeddings")
    norm = np.sqrt((squares + dim * 2.0**-126) * inflate) * (1.0 + 2.0**-20)
    return _Embeddings(raw, gemm, norm)


def _window32(center: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``(lo, hi)`` with ``lo ≤ center − half`` and ``hi ≥ center + half`` (rounded outward);
    NaN centres (no threshold) give an empty window at +inf."""
    center = np.asarray(center, dtype=np.float64)
    lo64, hi64 = center - half, center + half
    lo, hi = lo64.astype(np.float32), hi64.astype(np.float32)
    down = lo.astype(np.float64) > lo64
    lo[down] = np.nextafter(lo[down], np.float32(-np.inf))
    up = hi.astype(np.float64) < hi64
    hi[up] = np.nextafter(hi[up], np.float32(np.inf))
    none = np.isnan(center)
    lo[none] = np.inf
    hi[none] = np.inf
    return lo, hi


def _rowwise_dot32(images: Any, captions: Any, index: np.ndarray) -> np.ndarray:
    """float32 ``images[index[k]] · captions[k]`` (any summation order; bounded like a GEMM entry)."""
    out = np.empty(index.shape[0], dtype=np.float32)
    for s in range(0, index.shape[0], 4096):
        rows = index[s: s + 4096]
        if is_tensor(images):
            dev_rows = torch.as_tensor(rows, device=images.device)
            out[s: s + 4096] = (images[dev_rows] * captions[s: s + 4096]).sum(dim=1).cpu().numpy()
        else:
            out[s: s + 4096] = np.einsum("ij,ij->i", images[rows], captions[s: s + 4096])
    return out


def _scale_check(images: _Embeddings, captions: _Embeddings) -> None:
    if images.norm.max() * captions.norm.max() > 2.0**120:
        raise ValueError("embeddings: dot products this large overflow float32 scoring; "
                         "rescale the embeddings")


class _CandidateGemm(NamedTuple):
    """The GEMM of the rank pass and its windows: ``rows`` and ``database`` for
    :func:`iter_blocks`; ``rowwise``: thresholds from the float32 row-wise product (else from the
    blocks); ``half_img(r0, r1, t)`` / ``half_cap(t)``: half-widths of the windows around the
    thresholds ``t`` of image rows ``r0:r1`` / of every caption."""

    rows: Any
    database: Any
    rowwise: bool
    half_img: Any
    half_cap: Any


def _candidate_gemm(images: _Embeddings, captions: _Embeddings, device: Any) -> _CandidateGemm:
    """float32: ``W = 2·(e_gemm + e_64)·‖x‖·max‖y‖ + 2·underflow`` per line (module docstring).

    bf16 (:mod:`pseudopairs.similarity.lowp`): an entry ``v`` of rows x, y is within
    ``E + u·|v|`` of the exact score, ``E`` = :func:`bf16_dot_error` (with the measured rounding
    errors, maximised over the other side) + float32 input rounding + the float64 error + slack,
    ``u`` = the kernel's output rounding. The thresholds then come from the float32 row-wise
    product (error ≤ ``E32``, the float32 line bound), and ``v > t + W`` proves a higher exact
    score, ``v < t − W`` a lower-or-equal one, for ``W = (E + E32 + u·|t|)/(1 − u)``
    (``v − u|v|`` is increasing and ``|v| ≤ |t| + |v − t|``); the entry of the threshold's own
    pair lies inside its window by the same bound.
    """
    dim = images.raw.shape[1]
    x, y = images.norm, captions.norm
    slack = underflow_slack(dim, x_absmax=float(x.max()), y_absmax=float(y.max()))
    unit = combine_units(U32, matmul_input_unit(device))  # input rounding, then the matmul's own
    rel = gemm_relative_error(dim, input_unit=unit) + dot64_relative_error(dim)
    e32_img, e32_cap = rel * x * y.max() + slack, rel * x.max() * y + slack
    if not bf16_enabled(device):
        w_img, w_cap = 2.0 * e32_img * (1.0 + 2.0**-20), 2.0 * e32_cap * (1.0 + 2.0**-20)
        return _CandidateGemm(DenseRows(images.gemm), captions.gemm, False,
                              lambda r0, r1, t: w_img[r0:r1], lambda t: w_cap)
    buffers = uses_torch(device)
    img16 = bf16_from_blocks(x.size, lambda s, e: images.gemm[s:e], torch_buffers=buffers)
    cap16 = bf16_from_blocks(y.size, lambda s, e: captions.gemm[s:e], torch_buffers=buffers)
    acc, u = accumulation_unit(device), output_unit(device)
    rel16 = 2 * U32 + U32 * U32 + dot64_relative_error(dim)
    slack16 = bf16_slack(dim, x_absmax=float(x.max()), y_absmax=float(y.max()))
    e_img = bf16_dot_error(x, img16.err, y.max(), cap16.err_max, dim, unit=acc) + rel16 * x * y.max() + slack16
    e_cap = bf16_dot_error(x.max(), img16.err_max, y, cap16.err, dim, unit=acc) + rel16 * x.max() * y + slack16
    grow = (1.0 + 2.0**-20) / (1.0 - u)
    return _CandidateGemm(DenseRows(img16.data), cap16, True,
                          lambda r0, r1, t: (e_img[r0:r1] + e32_img[r0:r1] + u * np.abs(t)) * grow,
                          lambda t: (e_cap + e32_cap + u * np.abs(t)) * grow)


def _exact_rank_counts(
    images: _Embeddings,
    captions: _Embeddings,
    index: np.ndarray,
    *,
    device: Any,
    block_rows: int | None,
    columns: bool,
    progress: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(I→T rank per image row, T→I rank per caption or None) under the exact rule, in one pass.

    I→T thresholds come from each block (it holds whole rows, hence all of an image's captions);
    T→I thresholds from the block too when one block holds every image, else from a float32
    row-wise product computed first. Windows: :func:`_candidate_gemm` (float32 or bf16 GEMM),
    rounded outward to float32.
    """
    _scale_check(images, captions)
    n_img, n_cap = images.raw.shape[0], captions.raw.shape[0]
    rows, _ = block_shape(n_img, n_cap, rows=block_rows, cols=n_cap)
    gemm = _candidate_gemm(images, captions, device)
    order = np.argsort(index, kind="stable")  # captions grouped by image, any input order
    bounds = np.searchsorted(index[order], np.arange(n_img + 1))
    has_caption = bounds[1:] > bounds[:-1]
    single = rows >= n_img and not gemm.rowwise
    col_lo = col_hi = t_rowwise = None
    if gemm.rowwise or (columns and not single):
        t_rowwise = _rowwise_dot32(images.gemm, captions.gemm, index)
        if columns:
            col_lo, col_hi = _window32(t_rowwise, gemm.half_cap(t_rowwise))
    counter = None
    for block in iter_blocks(gemm.rows, gemm.database, rows=rows, cols=n_cap, progress=progress, desc="ranks"):
        r0, r1 = block.row0, block.row1
        lo, hi = int(bounds[r0]), int(bounds[r1])
        caps = order[lo:hi]
        if gemm.rowwise:
            correct = t_rowwise[caps]
        else:
            correct = _np(_gather(block.scores, index[caps] - r0, caps)).astype(np.float32)
        best = np.full(r1 - r0, np.nan)
        have = has_caption[r0:r1]
        if have.any():
            best[have] = np.maximum.reduceat(correct, (bounds[r0:r1] - lo)[have])
        row_lo, row_hi = _window32(best, gemm.half_img(r0, r1, best))
        if counter is None:
            if columns and single:
                t_cap = np.empty(n_cap, dtype=np.float32)
                t_cap[caps] = correct
                col_lo, col_hi = _window32(t_cap, gemm.half_cap(t_cap))
            counter = ThresholdCounter(
                n_rows=n_img, n_cols=n_cap, rows=True, col_lo=col_lo, col_hi=col_hi,
                row_expected=has_caption.astype(np.int64),
                col_expected_row=index if columns else None,
            )
        counter.update(block, row_lo=row_lo, row_hi=row_hi)
    undecided_rows, undecided_cols = counter.undecided()
    i2t = counter.row_above.copy()
    _settle_rows(i2t, undecided_rows, images, captions, order=order, bounds=bounds)
    if not columns:
        return i2t, None
    t2i = counter.col_above.copy()
    _settle_cols(t2i, undecided_cols, images, captions, index=index)
    return i2t, t2i


def _settle_rows(counts, undecided, images: _Embeddings, captions: _Embeddings, *, order, bounds) -> None:
    """Add to ``counts[image]`` the undecided captions whose exact score beats the image's best
    correct caption's exact score."""
    if undecided.row.size == 0:
        return
    involved, where = np.unique(undecided.row, return_inverse=True)
    sizes = bounds[involved + 1] - bounds[involved]
    owner = np.repeat(involved, sizes)
    caps = np.concatenate([order[bounds[i]: bounds[i + 1]] for i in involved])
    correct = dot64_pairs(images.raw, captions.raw, x_rows=owner, y_rows=caps, threads=cpu_threads())
    best = np.maximum.reduceat(correct, np.r_[0, np.cumsum(sizes)[:-1]])
    scores = dot64_pairs(images.raw, captions.raw, x_rows=undecided.row, y_rows=undecided.col,
                         threads=cpu_threads())
    np.add.at(counts, undecided.row[scores > best[where]], 1)


def _settle_cols(counts, undecided, images: _Embeddings, captions: _Embeddings, *, index) -> None:
    """Add to ``counts[caption]`` the undecided images whose exact score beats the caption's own
    image's exact score."""
    if undecided.col.size == 0:
        return
    order = np.argsort(undecided.col, kind="stable")  # caption rows in order: cache-friendly
    rows, cols = undecided.row[order], undecided.col[order]
    involved, where = np.unique(cols, return_inverse=True)
    own = dot64_pairs(images.raw, captions.raw, x_rows=index[involved], y_rows=involved, threads=cpu_threads())
    scores = dot64_pairs(images.raw, captions.raw, x_rows=rows, y_rows=cols, threads=cpu_threads())
    np.add.at(counts, cols[scores > own[where]], 1)


def retrieval_ranks(
    *,
    image_embeddings: Any,
    caption_embeddings: Any,
    caption_image_index: Any,
    device: str | torch.device | None = None,
    block_size: int | None = None,
    progress: bool = False,
    similarity: str = "cosine",
) -> RetrievalRanks:
    """0-based I→T and T→I ranks (exact rule, one blocked pass). See the module docstring.

    ``device``: where to compute (default: the device of a CUDA tensor input, else the CPU, where
    numpy/OpenBLAS does the GEMM). ``block_size``: image rows per score block (default: as many as
    keep a block ≤ 2**25 scores, e.g. all 1,000 × 5,000 at once; 5,000 × 25,000 goes in 4 blocks).
    """
    index = _validate_retrieval_inputs(image_embeddings, caption_embeddings, caption_image_index, finite=False)
    dev = engine_device(device, image_embeddings, caption_embeddings)
    engine = SIMILARITIES.get(similarity).rank_engine()
    if engine is not None:  # a similarity with its own exact engine (e.g. order)
        if block_size is not None and int(block_size) < 1:
            raise ValueError(f"block_size must be a positive number of rows, got {block_size}")
        i2t_all, t2i = engine(image_embeddings, caption_embeddings, index, device=dev,
                              block_size=block_size, progress=progress)
        query_rows = np.flatnonzero(np.bincount(index, minlength=i2t_all.shape[0]) > 0)
        return RetrievalRanks(i2t=i2t_all[query_rows], i2t_image_rows=query_rows, t2i=t2i)
    return _retrieval_ranks_on(image_embeddings, caption_embeddings, index, device=dev,
                               block_size=block_size, progress=progress)


def device_retrieval_counts(image_embeddings, caption_embeddings, index, *, device, block_size=None):
    """The device engine (:mod:`pseudopairs.similarity.device_ranks`) on validated inputs:
    ``(I→T count per image row, the query image rows, T→I count per caption)`` as tensors on
    ``device``."""
    from pseudopairs.similarity.device_ranks import device_rank_counts

    if block_size is not None and int(block_size) < 1:
        raise ValueError(f"block_size must be a positive number of rows, got {block_size}")
    i2t_all, t2i = device_rank_counts(image_embeddings, caption_embeddings, index, device=device,
                                      block_rows=block_size)
    query_rows = torch.nonzero(torch.bincount(torch.as_tensor(index, device=i2t_all.device),
                                              minlength=i2t_all.shape[0]) > 0).flatten()
    return i2t_all, query_rows, t2i


def _retrieval_ranks_on(image_embeddings, caption_embeddings, index, *, device, block_size=None,
                        progress=False, settle="device") -> RetrievalRanks:
    """:func:`retrieval_ranks` on an engine device (``"cpu"`` = numpy, or a ``torch.device`` —
    which may be the CPU, to test the torch code without a GPU); inputs already validated. On a
    torch device everything runs there (``settle="device"``:
    :mod:`pseudopairs.similarity.device_ranks`); ``settle="host"`` keeps the GEMM there and
    settles on the CPU (the engine before; for the benchmark's comparison)."""
    if block_size is not None and int(block_size) < 1:
        raise ValueError(f"block_size must be a positive number of rows, got {block_size}")
    if uses_torch(device) and settle == "device":
        i2t_all, query_rows, t2i = device_retrieval_counts(image_embeddings, caption_embeddings, index,
                                                           device=device, block_size=block_size)
        rows = query_rows.cpu().numpy()
        return RetrievalRanks(i2t=i2t_all.cpu().numpy()[rows], i2t_image_rows=rows, t2i=t2i.cpu().numpy())
    images = _embeddings(image_embeddings, device, "image_embeddings")
    captions = _embeddings(caption_embeddings, device, "caption_embeddings")
    with torch.no_grad():
        i2t_all, t2i = _exact_rank_counts(images, captions, index, device=device, block_rows=block_size,
                                          columns=True, progress=progress)
    query_rows = np.flatnonzero(np.bincount(index, minlength=images.raw.shape[0]) > 0)
    return RetrievalRanks(i2t=i2t_all[query_rows], i2t_image_rows=query_rows, t2i=t2i)


def _reference_rank(scores: np.ndarray, correct: np.ndarray) -> int:
    """Sort candidates by score (descending), correct ones first among equals; return the
    position of the first correct candidate."""
    order = np.lexsort((~correct, -scores))  # last key is the primary key
    return int(np.flatnonzero(correct[order])[0])


def _exact_scores(queries: np.ndarray, candidates: np.ndarray, row: int) -> np.ndarray:
    """Exact float64 scores of query ``row`` against every candidate (the shared routine)."""
    n = candidates.shape[0]
    return dot64_pairs(queries, candidates, x_rows=np.full(n, row), y_rows=np.arange(n))


def retrieval_ranks_reference(
    *,
    image_embeddings: Any,
    caption_embeddings: Any,
    caption_image_index: Any,
    progress: bool = False,
    similarity: str = "cosine",
) -> RetrievalRanks:
    """Same result as :func:`retrieval_ranks`, one query at a time (exact float64 scores of the
    query against every candidate, then a sort; slow, for checks)."""
    index = _validate_retrieval_inputs(image_embeddings, caption_embeddings, caption_image_index)
    images = _to_numpy(image_embeddings, "image_embeddings")
    captions = _to_numpy(caption_embeddings, "caption_embeddings")
    pairs = SIMILARITIES.get(similarity).pair_scores()
    if pairs is not None:  # that similarity's exact scores: image rows × caption rows
        return _pair_reference(pairs, images, captions, index, progress=progress)
    i2t, rows = [], []
    for i in tqdm(range(images.shape[0]), desc="I→T (reference)", disable=not progress):
        correct = index == i
        if not correct.any():
            continue  # not a query: nothing to retrieve
        rows.append(i)
        i2t.append(_reference_rank(_exact_scores(images, captions, i), correct))
    t2i = []
    image_rows = np.arange(images.shape[0])
    for k in tqdm(range(captions.shape[0]), desc="T→I (reference)", disable=not progress):
        t2i.append(_reference_rank(_exact_scores(captions, images, k), image_rows == index[k]))
    return RetrievalRanks(
        i2t=np.asarray(i2t, dtype=np.int64),
        i2t_image_rows=np.asarray(rows, dtype=np.int64),
        t2i=np.asarray(t2i, dtype=np.int64),
    )


def _pair_reference(pairs, images, captions, index, *, progress=False) -> RetrievalRanks:
    """:func:`retrieval_ranks_reference` with an exact pair-score routine ``pairs``."""
    n, m = images.shape[0], captions.shape[0]
    rows = np.flatnonzero(np.bincount(index, minlength=n) > 0)
    i2t = [_reference_rank(pairs(images, captions, image_rows=np.full(m, i), caption_rows=np.arange(m)),
                           index == i) for i in tqdm(rows, desc="I→T (reference)", disable=not progress)]
    t2i = [_reference_rank(pairs(images, captions, image_rows=np.arange(n), caption_rows=np.full(n, k)),
                           np.arange(n) == index[k]) for k in tqdm(range(m), desc="T→I (reference)", disable=not progress)]
    return RetrievalRanks(i2t=np.asarray(i2t, dtype=np.int64), i2t_image_rows=rows.astype(np.int64),
                          t2i=np.asarray(t2i, dtype=np.int64))


def translation_ranks(
    *,
    source_embeddings: Any,
    target_embeddings: Any,
    device: str | torch.device | None = None,
    block_size: int | None = None,
) -> np.ndarray:
    """0-based rank of target row i among all targets for source row i (exact strictly-higher
    rule of the module docstring; one blocked pass over source rows)."""
    _validate_translation_inputs(source_embeddings, target_embeddings, finite=False)
    dev = engine_device(device, source_embeddings, target_embeddings)
    return _translation_ranks_on(source_embeddings, target_embeddings, device=dev, block_size=block_size)


def _translation_ranks_on(source_embeddings, target_embeddings, *, device, block_size=None,
                          settle="device") -> np.ndarray:
    if block_size is not None and int(block_size) < 1:
        raise ValueError(f"block_size must be a positive number of rows, got {block_size}")
    if uses_torch(device) and settle == "device":
        from pseudopairs.similarity.device_ranks import device_rank_counts

        n = int(source_embeddings.shape[0])
        ranks, _ = device_rank_counts(source_embeddings, target_embeddings, np.arange(n), device=device,
                                      columns=False, block_rows=block_size)
        return ranks.cpu().numpy()
    source = _embeddings(source_embeddings, device, "source_embeddings")
    target = _embeddings(target_embeddings, device, "target_embeddings")
    n = source.raw.shape[0]
    with torch.no_grad():
        ranks, _ = _exact_rank_counts(source, target, np.arange(n), device=device, block_rows=block_size,
                                      columns=False, progress=False)
    return ranks


def translation_ranks_reference(*, source_embeddings: Any, target_embeddings: Any) -> np.ndarray:
    """:func:`translation_ranks` as a per-query loop over exact float64 scores (for checks)."""
    _validate_translation_inputs(source_embeddings, target_embeddings)
    source = _to_numpy(source_embeddings, "source_embeddings")
    target = _to_numpy(target_embeddings, "target_embeddings")
    rows = np.arange(target.shape[0])
    return np.asarray(
        [_reference_rank(_exact_scores(source, target, i), rows == i) for i in range(source.shape[0])],
        dtype=np.int64,
    )
