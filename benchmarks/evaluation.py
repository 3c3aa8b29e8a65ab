"""Benchmark: vectorised retrieval metrics vs the per-query loop reference, in one run.

Data: random 1,000 images × 5,000 captions at d=1024 (caption i belongs to image i // 5), rows
L2-normalised and then rounded to multiples of 2**-10. The rounding keeps the norms within ~1e-3
of 1 but makes every float32 dot product exact whatever the summation order (products are
multiples of 2**-20 and every partial sum stays far below 2**4), so the two implementations must
produce *identical* ranks — including the occasional exact tie — rather than ranks that differ
where two scores are within a rounding error of each other.

Both implementations run every query (no extrapolation). ``--threads`` (default 1) sets torch's
CPU threads *and* numpy's BLAS threads for both sides, so the comparison is like for like; on a
shared machine the reference's multi-threaded BLAS matrix-vector products are slower than
single-threaded ones, which would inflate the ratio. Wall-clock and process CPU times are both
printed; the vectorised side is timed before and after the (long) loop to expose load changes.
A bare matrix product of the same shape is timed too: every score is needed, so it bounds the
ratio any implementation can reach against this reference on this device (on a 2-core AVX2 CPU
the reference's matrix-vector products are within ~20× of it, so 50× needs a GPU).

Run: ``.venv/bin/python benchmarks/evaluation.py [--device cpu|cuda] [--threads N]``.
"""

from __future__ import annotations

import argparse
import os
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="vectorised side: cpu or cuda (default: cuda if available)")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--per-image", type=int, default=5)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="vectorised runs before and after the loop (each)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch and numpy's BLAS (0 = library defaults)")
    return parser.parse_args()


def make_data(*, n_images: int, per_image: int, dim: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    images = rng.standard_normal((n_images, dim)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    index = np.repeat(np.arange(n_images), per_image)
    # Captions near their image, so recalls are neither 0 nor 100.
    captions = images[index] * 0.1 + rng.standard_normal((len(index), dim)).astype(np.float32) / np.sqrt(dim)
    captions /= np.linalg.norm(captions, axis=1, keepdims=True)
    quantum = 2.0**-10
    images = (np.round(images / quantum) * quantum).astype(np.float32)
    captions = (np.round(captions / quantum) * quantum).astype(np.float32)
    return images, captions, index


def main() -> None:
    args = parse_args()
    if args.threads > 0:  # BLAS reads these when it is loaded, so set them before importing numpy
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    import numpy as np
    import torch

    from pseudopairs.evaluation import metrics_from_ranks, retrieval_ranks, retrieval_ranks_reference

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    images, captions, index = make_data(n_images=args.images, per_image=args.per_image, dim=args.dim, seed=args.seed)
    norms = np.linalg.norm(np.vstack([images, captions]), axis=1)
    print(f"data: {len(images)} images × {len(captions)} captions, d={args.dim}; "
          f"row norms in [{norms.min():.5f}, {norms.max():.5f}] after rounding to 2**-10")
    print(f"vectorised device: {device}; threads: "
          f"{args.threads if args.threads > 0 else 'library defaults'} (torch reports {torch.get_num_threads()})")
    kwargs = dict(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)

    def timed(fn):
        if device.type == "cuda":
            torch.cuda.synchronize()
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return result, time.perf_counter() - w0, time.process_time() - c0

    def time_vectorised():
        runs = [timed(lambda: retrieval_ranks(**kwargs, device=device)) for _ in range(args.repeats)]
        return runs[-1][0], [r[1] for r in runs], [r[2] for r in runs]

    retrieval_ranks(**kwargs, device=device)  # warm-up (CUDA context, kernels, allocator)
    fast, wall_before, cpu_before = time_vectorised()
    ref, t_ref, c_ref = timed(lambda: retrieval_ranks_reference(**kwargs, progress=True))
    _, wall_after, cpu_after = time_vectorised()
    walls, cpus = wall_before + wall_after, cpu_before + cpu_after
    t_fast, c_fast = float(np.median(walls)), float(np.median(cpus))

    # The floor for ANY implementation: every image x caption score is needed (any caption may
    # outrank the correct one), i.e. one float32 matrix product of this shape on this device.
    im_t = torch.from_numpy(images).to(device)
    cap_t = torch.from_numpy(captions).to(device)
    floor = [timed(lambda: im_t @ cap_t.T)[1] for _ in range(max(3, args.repeats))]
    t_floor = float(np.median(floor))

    same = (
        np.array_equal(fast.i2t, ref.i2t)
        and np.array_equal(fast.i2t_image_rows, ref.i2t_image_rows)
        and np.array_equal(fast.t2i, ref.t2i)
    )
    n_queries = len(ref.i2t) + len(ref.t2i)
    print(f"identical ranks: {same} ({len(ref.i2t)} I→T + {len(ref.t2i)} T→I queries; "
          f"{int((fast.t2i == 0).sum())} T→I queries at rank 0)")
    metrics = metrics_from_ranks(i2t_ranks=fast.i2t, t2i_ranks=fast.t2i)
    print("metrics: " + ", ".join(f"{k}={v:.2f}" for k, v in metrics.items()))
    print(f"vectorised: median {t_fast * 1000:.1f} ms wall, {c_fast * 1000:.1f} ms CPU over {len(walls)} runs "
          f"(wall before the loop: {', '.join(f'{t * 1000:.0f}' for t in wall_before)}; "
          f"after: {', '.join(f'{t * 1000:.0f}' for t in wall_after)} ms)")
    print(f"reference loop: {t_ref:.2f} s wall, {c_ref:.2f} s CPU for all {n_queries} queries "
          f"({t_ref / n_queries * 1000:.2f} ms/query)")
    print(f"speed ratio: {t_ref / t_fast:.0f}× wall (range {t_ref / max(walls):.0f}×–{t_ref / min(walls):.0f}×), "
          f"{c_ref / c_fast:.0f}× CPU time; goal ≥ 50×")
    flops = 2.0 * len(images) * len(captions) * args.dim
    print(f"score-matrix floor: one bare {len(images)}×{args.dim} @ {args.dim}×{len(captions)} matmul "
          f"takes {t_floor * 1000:.1f} ms ({flops / t_floor / 1e9:.0f} GFLOP/s); the vectorised path "
          f"spends {t_fast / t_floor:.2f}× that, so no implementation that computes every score can "
          f"beat {t_ref / t_floor:.0f}× against this reference here")
    if not same:
        raise SystemExit("FAILED: vectorised ranks differ from the reference")


if __name__ == "__main__":
    main()
