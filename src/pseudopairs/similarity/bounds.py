"""Rounding-error bounds of the float32 candidate pass (see :mod:`pseudopairs.similarity`): a
float32 GEMM score is within :func:`cosine_error_bound` of the exact cosine, so a window of twice
the bound provably keeps every exact maximiser among the candidates."""

from __future__ import annotations

from typing import Any

from pseudopairs.similarity.arrays import uses_torch

U32 = 2.0**-24  # float32 unit roundoff
U64 = 2.0**-53  # float64 unit roundoff
TF32_UNIT = 2.0**-11  # TF32 keeps 10 fraction bits
BF16_UNIT = 2.0**-8  # bfloat16 keeps 7 fraction bits
MIN_NORMAL32 = 2.0**-126
EXP32_ULPS = 4.0  # assumed accuracy of float32 exp (numpy's SIMD exp measures ≤ 2.4 ulp; CUDA expf ≤ 2)

# --------------------------------------------------------------------------------------------
# Error bounds
# --------------------------------------------------------------------------------------------


def gamma(n: int, unit: float) -> float:
    """Higham's ``γ_n = n·u / (1 − n·u)``: the relative error bound of n roundings."""
    nu = n * unit
    if nu >= 0.5:
        raise ValueError(f"gamma: n·u = {nu} is too large for a meaningful bound")
    return nu / (1.0 - nu)


def gemm_relative_error(dim: int, *, input_unit: float = U32) -> float:
    """``e`` with ``|S32 − x·y| ≤ e·Σ_j|x_j y_j|`` (+ :func:`underflow_slack`) for one float32 GEMM
    entry of rows each of whose elements carries a relative rounding error ≤ ``input_unit``
    (against x and y), accumulated in float32 in any order (FMA or not)."""
    return (1.0 + input_unit) ** 2 * (1.0 + gamma(dim, U32)) - 1.0


def combine_units(*units: float) -> float:
    """Relative error bound of successive roundings: ``Π(1 + u) − 1``."""
    total = 1.0
    for unit in units:
        total *= 1.0 + unit
    return total - 1.0


def dot64_relative_error(dim: int) -> float:
    """``e`` with ``|dot64(x, y) − x·y| ≤ e·Σ_j|x_j y_j|`` (d products, d − 1 additions in float64)."""
    return gamma(dim + 1, U64)


def underflow_slack(dim: int, *, x_absmax: float = 1.0, y_absmax: float = 1.0) -> float:
    """Absolute error float32 under/flush-to-zero can add to one dot product of length ``dim``."""
    return 2.0 * (dim + 2) * MIN_NORMAL32 * max(1.0, x_absmax) * max(1.0, y_absmax)


def normalisation_unit(dim: int) -> float:
    """Relative error of each element of :func:`unit_block32` against the exact unit row: the
    float64 norm (≤ (d/2 + 2)·2**-53), the float64 scale factor, and two float32 roundings (the
    factor, and the product — or the float64 product rounded to float32)."""
    return 2.0 * U32 + (dim + 8) * U64


def cosine_error_bound(dim: int, *, matmul_unit: float = 0.0) -> float:
    """``E`` with ``|S32 − cos64| ≤ E`` for a float32 GEMM entry of two :func:`unit_block32` rows
    and the float64 cosine :func:`cosine64_pairs` of the same rows. ``matmul_unit``: the
    rounding the matmul itself applies to its float32 inputs (:func:`matmul_input_unit`).

    Terms: the GEMM bound with every input element's relative error (normalisation, then the
    matmul's own rounding), the float64 cosine's own error (``≤ (2d + 10)·2**-53``) and float32
    underflow (``Σ|x_j y_j| ≤ ‖x‖·‖y‖ = 1`` for unit rows).
    """
    unit = combine_units(normalisation_unit(dim), matmul_unit)
    return gemm_relative_error(dim, input_unit=unit) + (2 * dim + 10) * U64 + underflow_slack(dim)


def matmul_input_unit(device: Any) -> float:
    """Relative rounding a float32 matmul applies to its float32 inputs on ``device``: 0 for
    numpy/OpenBLAS (true float32); on torch devices read from torch's float32 matmul
    precision: ``2**-11`` when TF32 may be used, ``2**-8`` when bfloat16 may be (and when the
    setting cannot be read)."""
    if not uses_torch(device):
        return 0.0
    try:
        import torch

        precision = torch.get_float32_matmul_precision()
        if precision == "highest" and not torch.backends.cuda.matmul.allow_tf32:
            return 0.0
        return TF32_UNIT if precision in ("highest", "high") else BF16_UNIT
    except Exception:  # noqa: BLE001 - unknown torch API: assume the least precise option
        return BF16_UNIT

