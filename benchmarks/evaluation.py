"""Benchmark: exact retrieval ranks vs the bare float32 GEMM of the score matrix, and vs the
per-query loop reference, in one run.

Sizes: 1,000 images × 5,000 captions (the Multi30K test split) and 5,000 × 25,000 (d = 1024,
caption i belongs to image i // 5; ``--images`` changes them). Rows are L2-normalised and rounded
to multiples of 2**-10, which makes every score a multiple of 2**-20: exact ties are frequent, so
the run exercises the tie rule and the float64 settling of entries float32 cannot order.

The floor for ANY float32 implementation is one float32 GEMM of the whole score matrix (every
image × caption score is needed: any caption may outrank the correct one). It is timed in the same
run, interleaved with ours, three ways — numpy (OpenBLAS) into a preallocated output, numpy
allocating its output, torch — and the fastest is the reference for the ratios. Ours runs on both
candidate paths: **float32** (``bf16_mode(False)``, goal ≤ 1.25× the bare GEMM) and, where the CPU
has a bfloat16 dot-product unit (``avx512_bf16``/``amx_bf16``; ``--paths`` overrides), **bf16**
(the GEMM on rows rounded to bfloat16 inside a proven window, the rest settled in float64; goal
≤ 0.5× the bare float32 GEMM); both must give identical ranks.
On a GPU (``--device cuda``; ``--device-engine`` runs the same code on the CPU) ours is the
**device engine** (:mod:`pseudopairs.similarity.device_ranks`: the GEMM, the window tests and the
float64 settling on the device, only counts or metrics coming back; goal ≤ 2× the bare GEMM), timed
beside the engine before it (float32 GEMM on the device, settling on the host), and its ranks and
metrics are checked against the CPU engine's.
Each figure is the minimum over ``--repeats`` runs (the machine may be shared; medians are
printed too). The per-query loop (exact float64 scores of each query against every candidate,
then a sort) runs once, on the first size only, and must give identical ranks.

Run: ``.venv/bin/python benchmarks/evaluation.py [--device cpu|cuda] [--threads N]``.
"""

from __future__ import annotations

import argparse
import os
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--images", default="1000,5000", help="comma-separated image counts")
    parser.add_argument("--per-image", type=int, default=5)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each contender (minimum reported)")
    parser.add_argument("--threads", type=int, default=0,
                        help="BLAS/torch threads for the GEMMs (0 = library defaults: all cores)")
    parser.add_argument("--no-reference", action="store_true", help="skip the per-query loop")
    parser.add_argument("--device-engine", action="store_true",
                        help="on the CPU: time the device engine (ranks counted, float64 settled and "
                             "metrics computed by torch; what a GPU runs) instead of the numpy engine")
    parser.add_argument("--paths", default="auto",
                        help="candidate paths: 'auto' (float32, and bf16 where the CPU has a bfloat16 "
                             "unit or on CUDA), or a comma-separated subset of float32,bf16")
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

    from pseudopairs.evaluation import retrieval_metrics, retrieval_ranks, retrieval_ranks_reference
    from pseudopairs.similarity import ranks as R
    from pseudopairs.similarity.metrics import metrics_of_counts
    from pseudopairs.similarity import bf16_mode
    from pseudopairs.similarity.lowp import cpu_flags

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    engine_on_device = cuda or args.device_engine
    if args.paths == "auto":
        paths = ["float32"] + (["bf16"] if cuda or {"avx512_bf16", "amx_bf16"} & cpu_flags() else [])
    else:
        paths = [p for p in args.paths.split(",") if p]
    print(f"device: {device}; threads: {args.threads if args.threads > 0 else 'library defaults'} "
          f"(torch reports {torch.get_num_threads()}); repeats: {args.repeats} (minimum reported)")

    def timed(fn):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = fn()
        if cuda:
            torch.cuda.synchronize()
        return result, time.perf_counter() - t0

    failed = False
    for i, n_images in enumerate(int(v) for v in args.images.split(",")):
        images, captions, index = make_data(n_images=n_images, per_image=args.per_image, dim=args.dim, seed=args.seed)
        n_cap = len(captions)
        print(f"\n== {n_images} images × {n_cap} captions, d = {args.dim} ==")
        kwargs = dict(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
        im_t, cap_t = torch.from_numpy(images).to(device), torch.from_numpy(captions).to(device)
        out = np.empty((n_images, n_cap), dtype=np.float32)
        inputs = kwargs if not cuda else dict(kwargs, image_embeddings=im_t, caption_embeddings=cap_t)
        contenders = {}
        if engine_on_device:  # ranks counted on the device (the default on a GPU), and the engine before
            contenders["ours (device ranks)"] = lambda: R._retrieval_ranks_on(im_t, cap_t, index, device=device)
            contenders["ours (device metrics)"] = lambda: metrics_of_counts(
                *R.device_retrieval_counts(im_t, cap_t, index, device=device))
            for path in paths:
                def host(enabled=(path == "bf16")):
                    with bf16_mode(enabled):
                        return R._retrieval_ranks_on(im_t, cap_t, index, device=device, settle="host")
                contenders[f"host settling ({path}; before)"] = host
        for path in ([] if engine_on_device else paths):
            def ours(enabled=(path == "bf16")):
                with bf16_mode(enabled):
                    return retrieval_ranks(**inputs, device=device)
            contenders[f"ours ({path} path)"] = ours
        contenders["torch GEMM"] = lambda: im_t @ cap_t.T
        if not cuda:
            contenders["numpy GEMM (out=)"] = lambda: np.matmul(images, captions.T, out=out)
            contenders["numpy GEMM (alloc)"] = lambda: images @ captions.T
        for fn in contenders.values():  # warm-up (BLAS threads, CUDA context, allocator)
            fn()
        times: dict[str, list[float]] = {name: [] for name in contenders}
        results = {}
        for _ in range(args.repeats):  # interleaved, so load changes hit every contender alike
            for name, fn in contenders.items():
                value, seconds = timed(fn)
                times[name].append(seconds)
                results[name] = value
        failed |= report(times, results, n_images=n_images, n_cap=n_cap, dim=args.dim)
        ours_name = "ours (device ranks)" if engine_on_device else f"ours ({paths[-1]} path)"
        result = results[ours_name]
        if engine_on_device:
            cpu = retrieval_ranks(**kwargs)
            same_cpu = np.array_equal(result.i2t, cpu.i2t) and np.array_equal(result.t2i, cpu.t2i)
            from pseudopairs.evaluation import metrics_from_ranks
            same_metrics = results["ours (device metrics)"] == metrics_from_ranks(i2t_ranks=cpu.i2t, t2i_ranks=cpu.t2i)
            print(f"device ranks identical to the CPU engine's: {same_cpu}; device metrics identical: {same_metrics}")
            failed |= not (same_cpu and same_metrics)
        if i == 0 and not args.no_reference:
            ref, t_ref = timed(lambda: retrieval_ranks_reference(**kwargs, progress=False))
            same = (np.array_equal(result.i2t, ref.i2t) and np.array_equal(result.i2t_image_rows, ref.i2t_image_rows)
                    and np.array_equal(result.t2i, ref.t2i))
            n_queries = len(ref.i2t) + len(ref.t2i)
            print(f"per-query loop reference: {t_ref:.2f} s for {n_queries} queries "
                  f"({t_ref / n_queries * 1e3:.2f} ms/query); ours is {t_ref / min(times[ours_name]):.0f}× "
                  f"faster; identical ranks: {same}")
            failed |= not same
    if failed:
        raise SystemExit("FAILED: engine ranks differ between paths or from the per-query reference")


def report(times: dict, results: dict, *, n_images: int, n_cap: int, dim: int) -> bool:
    """Print minima, medians and the ratios to the fastest bare float32 GEMM; whether the paths
    disagree."""
    import numpy as np

    from pseudopairs.evaluation import metrics_from_ranks

    best = {name: min(ts) for name, ts in times.items()}
    median = {name: float(np.median(ts)) for name, ts in times.items()}
    gemms = [name for name in times if not name.startswith(("ours", "host"))]
    floor = min(gemms, key=lambda name: best[name])
    flops = 2.0 * n_images * n_cap * dim
    for name in gemms:
        print(f"bare {name:<20} {best[name] * 1e3:9.1f} ms (median {median[name] * 1e3:.1f}; "
              f"{flops / best[name] / 1e9:.0f} GFLOP/s)")
    ours = [name for name in times if name.startswith(("ours", "host"))]
    for name in ours:
        goal = ("goal ≤ 2× on a GPU" if "device" in name else "" if name.startswith("host")
                else "goal ≤ 0.5×" if "bf16" in name else "goal ≤ 1.25×")
        print(f"{name:<25} {best[name] * 1e3:9.1f} ms (median {median[name] * 1e3:.1f}) → "
              f"{best[name] / best[floor]:.3f}× the fastest bare float32 GEMM ({floor}; medians: "
              f"{median[name] / median[floor]:.3f}×); {goal}")
    ranked = [name for name in ours if "metrics" not in name]
    first = results[ranked[0]]
    same = all(np.array_equal(results[n].i2t, first.i2t) and np.array_equal(results[n].t2i, first.t2i) for n in ranked)
    if len(ranked) > 1:
        print(f"the paths give identical ranks: {same}")
    metrics = metrics_from_ranks(i2t_ranks=first.i2t, t2i_ranks=first.t2i)
    print("metrics: " + ", ".join(f"{k}={v:.2f}" for k, v in metrics.items()))
    return not same


if __name__ == "__main__":
    main()
