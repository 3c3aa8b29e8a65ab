"""The exact low-precision candidate pass: the score GEMM on rows rounded to bfloat16, inside a
proven error window (see :mod:`pseudopairs.similarity`, "Low-precision candidates").

Error model of one entry. ``x`` and ``y`` are the float32 rows the float32 pass would multiply;
``x̂ = bf16(x)`` and ``ŷ`` their round-to-nearest bfloat16 copies, ``δx = x̂ − x`` (exact in float32:
Sterbenz) and ``δy``. A product of two bfloat16 numbers (8-bit significands) is exact in float32,
and every kernel used here accumulates those products in float32, so in any summation order

    |Ŝ − x̂·ŷ| ≤ γ_d(u_acc)·Σ|x̂_j ŷ_j| + slack ≤ γ_d(u_acc)·‖x̂‖·‖ŷ‖ + slack,
    |x̂·ŷ − x·y| = |δx·y + x·δy + δx·δy| ≤ ‖δx‖‖y‖ + ‖x‖‖δy‖ + ‖δx‖‖δy‖,

with ``‖x̂‖ ≤ ‖x‖ + ‖δx‖`` (:func:`bf16_dot_error`); ``slack`` covers flush-to-zero and
denormals-are-zero (:func:`bf16_slack`). ``‖δx‖`` is measured per row (≈ 1.7e-3 for a unit row of
1024 dimensions, against the a-priori ``2**-8``). A kernel whose output is bfloat16 rounds ``Ŝ`` once
more: ``|v − Ŝ| ≤ u_out·|v|`` (round to nearest, ``u_out = 2**-8``; :func:`output_unit`), a
value-dependent term the callers turn into windows.

Kernels (:func:`gemm_bf16`):

* ``onednn`` — ``torch.matmul`` of bf16 CPU tensors (oneDNN; AMX/AVX512-BF16 with float32
  accumulation), bf16 output converted exactly to float32: the fastest on the CPU (≈ 1.6× MKL's
  here), ``u_out = 2**-8``. The probe checks the error model on its data before it is used.
* ``mkl`` — MKL's ``cblas_gemm_bf16bf16f32`` from torch's own MKL (its LP64 interface, as
  torch links it): float32 output, ``u_out = 0``; slower than oneDNN here.
* ``emulated`` — a torch float32 matmul of the bf16 values (exact products, float32 accumulation:
  the same model; for CPUs without either kernel and for tests).
* CUDA — ``torch.mm(…, out_dtype=float32)`` on bf16 tensor cores, ``u_out = 0``. Tensor cores
  truncate and align each block's products to its largest one (Fasi et al. 2021, "Numerical
  behavior of NVIDIA tensor cores"), so ``u_acc = 2**-22`` there instead of ``2**-24`` — an
  assumption from that paper, not tested here (no GPU).

Dispatch (:func:`bf16_enabled`): ``PSEUDOPAIRS_BF16=1/0`` (and ``PSEUDOPAIRS_BF16_KERNEL``) or
:func:`bf16_mode` force a path; otherwise a CPU uses it when its flags show a bfloat16
dot-product unit and the kernel passes an accuracy check of its error model (once per process):
with ``amx_bf16`` that suffices (AMX's peak is ≥ 8× the float32 FMA peak), with ``avx512_bf16``
alone a timed probe must find the kernel at least :data:`PROBE_SPEEDUP` × faster than numpy's
float32 GEMM. A CUDA device uses it from compute capability 8.0.
"""

from __future__ import annotations

import ctypes
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from pseudopairs.similarity.arrays import (
    _map_chunks,
    _torch,
    cpu_threads,
    is_tensor,
    uses_torch,
)
from pseudopairs.similarity.bounds import (
    BF16_UNIT,
    MIN_NORMAL32,
    U32,
    U64,
    gamma,
    normalisation_unit,
    underflow_slack,
)

ENV, ENV_KERNEL = "PSEUDOPAIRS_BF16", "PSEUDOPAIRS_BF16_KERNEL"
KERNELS = ("onednn", "mkl", "emulated")
PROBE_SPEEDUP = 1.5  # the bf16 GEMM must beat float32 by this factor in the probe
CUDA_ACCUMULATION_UNIT = 4 * U32  # 2**-22, see the module docstring
_ROUND_UP = 1.0 + 2.0**-40  # covers the float64 evaluation of norms and bounds
_STEP = 2048  # rows per conversion step
_state: dict[str, Any] = {"forced": None, "kernel": None, "probe": None, "mkl": "unset"}

# --------------------------------------------------------------------------------------------
# Capability and dispatch
# --------------------------------------------------------------------------------------------


def cpu_flags() -> set[str]:
    """The CPU feature flags of /proc/cpuinfo (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _mkl_kernel() -> Callable | None:
    """``cblas_gemm_bf16bf16f32`` of the MKL linked into torch, or None."""
    if _state["mkl"] == "unset":
        _state["mkl"] = None
        try:
            import torch

            lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
            fn = lib.cblas_gemm_bf16bf16f32
            i, p, f = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
            fn.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
            fn.restype = None
            _state["mkl"] = fn
        except (OSError, AttributeError, ImportError):
            pass
    return _state["mkl"]


def _best_time(fn: Callable[[], Any], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _probe_cpu() -> bool:
    """A bf16 unit in the flags and the oneDNN kernel obeying the error model on random data; with
    AMX (≥ 8× the float32 FMA peak) that suffices, with AVX512-BF16 alone (2× the peak) a timed
    probe (256 × 4096 × 1024, best of 3 each) must find it ≥ PROBE_SPEEDUP × faster than numpy."""
    flags = cpu_flags()
    if not ({"avx512_bf16", "amx_bf16"} & flags):
        return False
    import torch

    rng = np.random.default_rng(0)
    a16 = to_bf16(rng.standard_normal((64, 1024), dtype=np.float32))
    b16 = to_bf16(rng.standard_normal((512, 1024), dtype=np.float32))
    out = np.empty((64, 512), dtype=np.float32)
    gemm_bf16(a16, b16, out, kernel="onednn")
    got = torch.from_numpy(out).double()
    exact = a16.double() @ b16.double().T
    allowed = (gamma(1024, U32) * (a16.double().abs() @ b16.double().abs().T) + BF16_UNIT * got.abs())
    if not bool(((got - exact).abs() <= allowed * _ROUND_UP).all()):
        return False
    if "amx_bf16" in flags:
        return True
    a = rng.standard_normal((256, 1024), dtype=np.float32)
    b = rng.standard_normal((4096, 1024), dtype=np.float32)
    a16, b16 = to_bf16(a), to_bf16(b)
    out = np.empty((256, 4096), dtype=np.float32)
    t16 = _best_time(lambda: gemm_bf16(a16, b16, out, kernel="onednn"))
    t32 = _best_time(lambda: np.matmul(a, b.T, out=out))
    return t32 >= PROBE_SPEEDUP * t16


def _probe_cuda(device: Any) -> bool:
    """bf16 tensor cores (compute capability ≥ 8.0) and a float32-output bf16 matmul in torch."""
    torch = _torch()
    try:
        if torch.cuda.get_device_capability(device)[0] < 8:
            return False
        a = torch.ones((2, 2), dtype=torch.bfloat16, device=device)
        return torch.mm(a, a, out_dtype=torch.float32).dtype == torch.float32
    except Exception:  # noqa: BLE001 - an older torch without out_dtype: the float32 path
        return False


def _is_cuda(device: Any) -> bool:
    return uses_torch(device) and getattr(device, "type", "cpu") == "cuda"


def bf16_enabled(device: Any) -> bool:
    """Whether candidate passes on the engine ``device`` use the bf16 GEMM (module docstring)."""
    forced = _state["forced"]
    if forced is None:
        env = os.environ.get(ENV, "auto").strip().lower()
        forced = {"1": True, "on": True, "true": True, "0": False, "off": False, "false": False}.get(env)
    if forced is not None:
        return forced
    key = f"cuda:{device}" if _is_cuda(device) else "probe"
    if _state.get(key) is None:
        _state[key] = _probe_cuda(device) if _is_cuda(device) else _probe_cpu()
    return _state[key]


def cpu_kernel() -> str:
    """The CPU kernel of the bf16 path: forced (:func:`bf16_mode`, ``PSEUDOPAIRS_BF16_KERNEL``),
    else ``onednn``."""
    kernel = _state["kernel"] or os.environ.get(ENV_KERNEL, "").strip().lower() or "onednn"
    if kernel not in KERNELS:
        raise ValueError(f"{ENV_KERNEL} must be one of {KERNELS}, got {kernel!r}")
    if kernel == "mkl" and _mkl_kernel() is None:
        return "emulated"
    return kernel


def output_unit(device: Any) -> float:
    """Relative rounding of the bf16 GEMM's output on ``device``: ``2**-8`` for the oneDNN kernel
    (bf16 output), else 0 (float32 output)."""
    return BF16_UNIT if not _is_cuda(device) and cpu_kernel() == "onednn" else 0.0


@contextmanager
def bf16_mode(enabled: bool | None, *, kernel: str | None = None) -> Iterator[None]:
    """Force the bf16 candidate path on (True), off (False) or back to automatic (None) inside the
    block, and optionally the CPU kernel (one of :data:`KERNELS`)."""
    if kernel is not None and kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    saved = _state["forced"], _state["kernel"]
    _state["forced"], _state["kernel"] = enabled, kernel
    try:
        yield
    finally:
        _state["forced"], _state["kernel"] = saved


# --------------------------------------------------------------------------------------------
# bf16 rows and the GEMM
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BF16Rows:
    """Rows rounded to bfloat16 for the candidate GEMM: ``data`` (torch, n × d, C order, on the
    engine device), ``err[i] ≥ ‖bf16(x_i) − x_i‖`` (float64) and whether score blocks are torch
    tensors (``torch_buffers``; else numpy, as on the numpy CPU engine)."""

    data: Any
    err: np.ndarray
    torch_buffers: bool

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.data.shape[0]), int(self.data.shape[1])

    @property
    def err_max(self) -> float:
        return float(self.err.max(initial=0.0))


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 → bfloat16 bit patterns (uint16) of finite ``x``, in numpy
    (single-threaded and predictable, unlike small multi-threaded torch ops on a busy CPU)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    tmp = np.right_shift(bits, np.uint32(16))
    np.bitwise_and(tmp, np.uint32(1), out=tmp)
    np.add(tmp, np.uint32(0x7FFF), out=tmp)
    np.add(tmp, bits, out=tmp)  # no overflow: finite values stay below 0xFF800000
    np.right_shift(tmp, np.uint32(16), out=tmp)
    return tmp.astype(np.uint16)


def to_bf16(x: Any) -> Any:
    """``x`` rounded to nearest bfloat16 (a C-order torch tensor; numpy input goes to the CPU)."""
    import torch

    if is_tensor(x):
        return x if x.dtype == torch.bfloat16 and x.is_contiguous() else x.to(torch.bfloat16).contiguous()
    return torch.from_numpy(_bf16_bits(x).view(np.int16)).view(torch.bfloat16)


def _rounded(x: Any) -> tuple[Any, np.ndarray]:
    """(bf16 copy of the float32 rows ``x`` — uint16 bit patterns in numpy for CPU rows, a torch
    tensor for CUDA rows — and the squared norms of the rounding errors, summed in float32)."""
    if is_tensor(x) and x.device.type != "cpu":
        import torch

        xb = x.to(torch.bfloat16).contiguous()
        diff = xb.float() - x.float()
        return xb, (diff * diff).sum(dim=1).double().cpu().numpy()
    x32 = np.ascontiguousarray(x.numpy() if is_tensor(x) else x, dtype=np.float32)
    bits = _bf16_bits(x32)
    diff = np.left_shift(bits.astype(np.uint32), np.uint32(16)).view(np.float32)
    np.subtract(diff, x32, out=diff)
    return bits, np.einsum("ij,ij->i", diff, diff).astype(np.float64)


def _error_norms(squares: np.ndarray, dim: int) -> np.ndarray:
    """Upper bounds on the norms from float32 sums of squares: the difference of a float32
    number and its bfloat16 rounding is exact in float32; the sum of its squares has relative
    error ≤ γ_{d+1} and loses ≤ 2**-126 per square to underflow."""
    return np.sqrt((squares + dim * MIN_NORMAL32) * (1.0 + 2.0 * gamma(dim + 1, U32))) * _ROUND_UP


def _as_tensor(bits: Any) -> Any:
    import torch

    return bits if is_tensor(bits) else torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def rounded_with_errors(x: Any) -> tuple[Any, np.ndarray]:
    """(bf16 copy of the float32 rows ``x`` as a torch tensor, upper bounds on
    ``‖bf16(x_i) − x_i‖``)."""
    xb, squares = _rounded(x)
    return _as_tensor(xb), _error_norms(squares, int(x.shape[1]))


def bf16_from_blocks(n: int, block: Callable[[int, int], Any], *, torch_buffers: bool) -> BF16Rows:
    """:class:`BF16Rows` of ``n`` float32 rows handed out by ``block(start, stop)`` (numpy or
    torch; the copy lives where the blocks do), converted :data:`_STEP` rows at a time (small
    steps reuse their temporaries; CPU steps run on the process's CPUs in parallel)."""
    import torch

    first, squares = _rounded(block(0, min(n, _STEP)))
    shape, err = (n, int(first.shape[1])), np.empty(n, dtype=np.float64)
    if is_tensor(first):
        data = torch.empty(shape, dtype=torch.bfloat16, device=first.device)
    else:
        data = np.empty(shape, dtype=np.uint16)
    data[: first.shape[0]], err[: first.shape[0]] = first, _error_norms(squares, shape[1])

    def work(s: int, e: int) -> None:
        xb, sq = _rounded(block(s, e))
        data[s:e], err[s:e] = xb, _error_norms(sq, shape[1])

    if n > _STEP:
        _map_chunks(lambda s, e: work(s + _STEP, e + _STEP), n - _STEP, _STEP,
                    1 if is_tensor(first) else cpu_threads())
    return BF16Rows(data=_as_tensor(data), err=err, torch_buffers=torch_buffers)


def max_rounding_error(n: int, block: Callable[[int, int], Any]) -> float:
    """``max_i ‖bf16(x_i) − x_i‖`` over ``n`` rows handed out by ``block`` (nothing is kept;
    steps in parallel as in :func:`bf16_from_blocks`)."""
    worst = np.zeros(-(-n // _STEP))

    def work(s: int, e: int) -> None:
        xb, squares = _rounded(block(s, e))
        worst[s // _STEP] = _error_norms(squares, int(xb.shape[1])).max()

    _map_chunks(work, n, _STEP, cpu_threads())
    return float(worst.max())


class Scratch:
    """A reusable flat bf16 buffer for the oneDNN kernel's output (no allocation per block)."""

    def __init__(self) -> None:
        self.flat = None

    def view(self, rows: int, cols: int) -> Any:
        import torch

        if self.flat is None or self.flat.numel() < rows * cols:
            self.flat = torch.empty(rows * cols, dtype=torch.bfloat16)
        return self.flat[: rows * cols].view(rows, cols)


def gemm_bf16(a: Any, b: Any, out: Any, *, kernel: str | None = None, scratch: Scratch | None = None) -> None:
    """``out[:] = a @ b.T`` for C-order bfloat16 torch tensors ``a`` (M × K) and ``b`` (N × K) into a
    float32 M × N view (numpy or torch) with unit column stride: exact products, float32
    accumulation; ``kernel`` (CPU): one of :data:`KERNELS` (default :func:`cpu_kernel`)."""
    import torch

    m, n = int(a.shape[0]), int(b.shape[0])
    if m == 0 or n == 0:
        return
    target = out if is_tensor(out) else torch.from_numpy(out)
    if a.device.type != "cpu":
        target.copy_(torch.mm(a, b.T, out_dtype=torch.float32))
        return
    kernel = kernel or cpu_kernel()
    if kernel == "onednn":
        tmp = (scratch or Scratch()).view(m, n)
        torch.matmul(a, b.T, out=tmp)
        target.copy_(tmp)  # bf16 → float32 is exact
        return
    mkl = _mkl_kernel() if kernel == "mkl" else None
    if mkl is None or target.stride(1) != 1 or not (a.is_contiguous() and b.is_contiguous()):
        target.copy_(torch.matmul(a.float(), b.float().T))  # bf16 values: exact products in float32
        return
    k = int(a.shape[1])
    mkl(101, 111, 112, m, n, k, 1.0, a.data_ptr(), k, b.data_ptr(), k, 0.0, target.data_ptr(), target.stride(0))


# --------------------------------------------------------------------------------------------
# Error bounds
# --------------------------------------------------------------------------------------------


def accumulation_unit(device: Any) -> float:
    """Relative error of one float32 accumulation step of the bf16 GEMM on ``device``."""
    return CUDA_ACCUMULATION_UNIT if _is_cuda(device) else U32


def bf16_dot_error(x_norm, x_err, y_norm, y_err, dim: int, *, unit: float = U32):
    """Bound on ``|Ŝ − x·y|`` for the float32-accumulated bf16 GEMM entry of float32 rows with
    ``‖x‖ ≤ x_norm``, ``‖bf16(x) − x‖ ≤ x_err`` (and y alike; numpy broadcasting), before any
    output rounding and without :func:`bf16_slack`."""
    acc = gamma(dim, unit)
    return (acc * (x_norm + x_err) * (y_norm + y_err) + x_err * y_norm + x_norm * y_err
            + x_err * y_err) * _ROUND_UP


def bf16_slack(dim: int, *, x_absmax: float = 1.0, y_absmax: float = 1.0) -> float:
    """What flush-to-zero (products, partial sums, a bf16 output) and denormal inputs read as zero
    can add to one bf16 GEMM entry: ≤ 3d + 1 events of ≤ 2**-126 each, scaled — twice the float32
    slack covers it."""
    return 2.0 * underflow_slack(dim, x_absmax=x_absmax, y_absmax=y_absmax) + MIN_NORMAL32


def bf16_cosine_error_bound(dim: int, q_err: float, d_err: float, *, unit: float = U32,
                            out_unit: float = 0.0) -> float:
    """``E`` with ``|v − cos64| ≤ E`` for the bf16 GEMM entry ``v`` of two :func:`unit_block32` rows
    whose bf16 rounding errors are ≤ ``q_err`` and ``d_err``: the float32 rows have ``‖x‖ ≤ 1 + u``
    and ``|x·y − x*·y*| ≤ 2u + u²`` against the exact unit rows (u = :func:`normalisation_unit`),
    the float64 cosine's own error, the slack, and an output rounding of relative size
    ``out_unit`` on values ``|v| ≤ (1 + E_in)/(1 − out_unit)``."""
    u = normalisation_unit(dim)
    e_in = float(bf16_dot_error(1.0 + u, q_err, 1.0 + u, d_err, dim, unit=unit) + (2 * u + u * u)
                 + (2 * dim + 10) * U64 + bf16_slack(dim))
    return (e_in + out_unit * (1.0 + e_in) / (1.0 - out_unit)) * _ROUND_UP
