"""Blocked similarity engine shared by retrieval evaluation and pseudopair mining.

Both callers need statistics of a score matrix ``S = Q · Dᵀ`` (queries × database) that is too big
to hold: mining at paper scale is 566K COCO captions × 145K Multi30K captions × 1024 dimensions.
This module computes ``S`` in **blocks** (a block of query rows × a chunk of database rows, at most
:data:`DEFAULT_BLOCK_ELEMENTS` scores by default) with a float32 GEMM — numpy/OpenBLAS on the CPU,
torch on CUDA — and hands every block to *reducers* that keep what the caller needs, so one pass
over the blocks can feed several statistics:

* :class:`WindowTopK` — per row (or per column): every entry within ``window`` of the line's
  ``k``-th largest value (``k = 1``: the argmax candidates; ``k > 1``: a superset of the top-k);
* :class:`ColumnLogSumExp` — per column: ``log Σ_rows exp(β·S)``;
* :class:`ThresholdCounter` — per row and per column: how many entries are strictly above a
  threshold, and which entries are too close to it to decide in float32.

Exact scores
------------
Float32 block scores choose candidates; decisions are made in float64 by one deterministic routine,
:func:`dot64_pairs`: ``dot64(x, y) = Σ_j x_j·y_j`` with both rows converted to float64, multiplied
elementwise and summed by ``numpy.add.reduce`` along the contiguous row (numpy's pairwise
summation, whose order depends only on the dimension). The same pair of vectors therefore gives the
same bits wherever it occurs, and for float32 inputs the products are exact, so the only rounding
is in the summation (``≤ γ_d·Σ|x_j y_j|`` in float64, about 1e-13 for d = 1024).
The **cosine** is ``cos64(x, y) = dot64(x', y') / (‖x'‖·‖y'‖)`` with ``‖x'‖ = sqrt(dot64(x', x'))``
and ``x' = 2**-e·x`` (a per-row power of two that puts ``max|x'|`` in [1, 2); it is exact and leaves
the result unchanged except where the unscaled computation would overflow or underflow).

Error bounds
------------
A float32 GEMM entry of rows whose elements carry relative errors ≤ ``u_in`` (against the exact
rows) satisfies ``|S32 − x·y| ≤ ((1+u_in)²(1+γ_d) − 1)·Σ|x_j y_j| + underflow`` for *any*
summation order, FMA or not (:func:`gemm_relative_error`), where ``γ_d = d·u/(1 − d·u)`` and
``u = 2**-24``. ``u_in`` combines the rounding of the inputs to float32 (a float32 conversion, or
the normalisation of :func:`unit_block32`) with what the matmul itself rounds
(:func:`matmul_input_unit`: nothing for numpy/OpenBLAS; ``2**-11`` when torch may use TF32 and
``2**-8`` when it may use bfloat16, read from torch's float32 matmul precision).
``Σ|x_j y_j| ≤ ‖x‖·‖y‖`` (Cauchy–Schwarz), so for unit rows the bound is one number,
:func:`cosine_error_bound` (≈ 6.1e-5 at d = 1024 on the CPU: a worst case, far above typical
errors). Candidate windows are twice the bound (the candidate's and the competitor's errors),
so a candidate set provably contains every entry a float64 decision could pick.

Low-precision candidates
------------------------
Where a CPU has a bfloat16 dot-product unit (AVX512-BF16/AMX) or a GPU has bf16 tensor cores,
candidate passes run the GEMM on rows rounded to bfloat16 with float32 accumulation instead
(:mod:`~pseudopairs.similarity.lowp`; ≈ 3–5× the float32 rate on such a CPU). The window logic is
unchanged, only the bound is wider: ``|Ŝ − x·y| ≤ ‖δx‖‖y‖ + ‖x‖‖δy‖ + ‖δx‖‖δy‖ + γ_d‖x̂‖‖ŷ‖``
with the measured rounding errors ``δ`` of each row (:func:`bf16_cosine_error_bound`: ≈ 3.9e-3
for unit rows of 1024 dimensions, ≈ 63× the float32 bound; ≈ 7.8e-3 with oneDNN's bf16 output,
which rounds each score once more), and every candidate is rescored in float64 as before, so
results are the same to the last bit on either path. Passes that *accumulate* scores (the
log-sum-exp normalisers) always use the float32 GEMM, whose bound is tighter.
:func:`bf16_enabled` dispatches (once per process; ``PSEUDOPAIRS_BF16=0/1`` or :func:`bf16_mode`
force a path).

The engine lives in these modules (its public names are re-exported here):
:mod:`~pseudopairs.similarity.bounds` (error bounds), :mod:`~pseudopairs.similarity.arrays`
(devices, threads), :mod:`~pseudopairs.similarity.rows` (unit rows, exact float64 scores),
:mod:`~pseudopairs.similarity.blocks` (blocked passes), :mod:`~pseudopairs.similarity.lowp`
(the bf16 candidate GEMM) and
:mod:`~pseudopairs.similarity.reducers` (what a pass keeps). The similarity *functions* a model
may be trained with are registered in :mod:`~pseudopairs.similarity.functions`.
"""

from pseudopairs.similarity.arrays import cpu_threads, engine_device, is_tensor, to_numpy, uses_torch
from pseudopairs.similarity.blocks import (CHUNK, DEFAULT_BLOCK_ELEMENTS, DEFAULT_BLOCK_ROWS, Block, DenseRows,
                                           RowSource, UnitRowSource, block_shape, database32,
                                           database_bf16, iter_blocks, run_pass)
from pseudopairs.similarity.bounds import (BF16_UNIT, EXP32_ULPS, MIN_NORMAL32, TF32_UNIT, U32, U64,
                                           combine_units, cosine_error_bound, dot64_relative_error,
                                           gamma, gemm_relative_error, matmul_input_unit,
                                           normalisation_unit, underflow_slack)
from pseudopairs.similarity.lowp import (KERNELS, BF16Rows, accumulation_unit,
                                         bf16_cosine_error_bound, bf16_dot_error, bf16_enabled,
                                         bf16_from_blocks, bf16_mode, bf16_slack, cpu_kernel,
                                         gemm_bf16, max_rounding_error, output_unit,
                                         rounded_with_errors, to_bf16)
from pseudopairs.similarity.reducers import (ColumnLogSumExp, ThresholdCounter, Undecided,
                                             WindowEntries, WindowTopK, chunk_max_cols,
                                             chunk_max_rows, count_true_cols, count_true_rows,
                                             kth_largest)
from pseudopairs.similarity.rows import (UnitRows, check_matrix, cosine64_pairs, dot64_pairs,
                                         duplicate_groups, unit_block32, unit_rows)
