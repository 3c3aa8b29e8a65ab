"""Training throughput: the real per-update code path vs a bare PyTorch step.

    .venv/bin/python benchmarks/training.py [--updates N] [--device auto] [--preset paper|demo]

*real*: ``Trainer.update()`` exactly as the training loop calls it (task draw, batch assembly from
the data set's stream, host→device copy, forward, VSE++ loss, backward, clipping, Adam step) plus
the loop's loss read-back every ``LOSS_READBACK_EVERY`` updates.
*bare*: the same model, loss and optimiser on the same batches, pre-built on the device, in a
plain loop. Both run in the same process, in alternating blocks after a warm-up; the ratio
real / bare is the share of the bare speed the pipeline keeps (goal ≥ 0.95).

Synthetic data with the paper's shapes: vocabulary 10K, 2048-d float16 image features, captions of
6–18 tokens (mean ≈ 12), 5 En + 5 De captions per image, c2i on both languages plus c2c (p = 0.5).

``--stack S`` (S ≥ 1) measures stacked training instead: S models (seeds 0 … S−1, each with its
own trainer, batch streams and task draws) updated together by
:func:`pseudopairs.model.stack.stacked_update` (*stacked*), against the same S trainers each taking
its own ``Trainer.update()`` one after the other in this process (*separate*: what S jobs of one
model each would do on the device, without their process overheads). It prints the
model-updates/s summed over the stack, per model, and the ratio stacked / separate.
``--tf32`` lets float32 matrix products use TF32 on a GPU (both variants); ``--precision bf16``,
``--compile`` and ``--pinned`` turn on the stack's levers (``training.stack_precision``,
``stack_compile``, ``pinned_memory``); ``--calibration FILE`` records the rate for the SLURM
requests (pseudopairs.workflow.calibration); ``--graphs`` runs the
stacked variant as the pipeline does on a GPU by default, each update a replayed CUDA graph
(``training.cuda_graphs``). ``--profile K`` (with
``--stack``) then times K more stacked updates by phase (the trainers drawing their batches on the
host; the ``stacked_update`` call returning, i.e. the host's dispatch; waiting for the device) and
traces them with ``torch.profiler``: the device time per update by kernel, and the share of the
wall time the device is busy.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from pseudopairs.model import RankingModel, contrastive_loss
from pseudopairs.model.batches import C2CData, C2IData, CaptionSet, TokenTable
from pseudopairs.model.stack import StackedAdam, StackedRankingModel, stacked_update
from pseudopairs.model.stack_graph import StaticStackUpdate
from pseudopairs.model.training import LOSS_READBACK_EVERY, Trainer
from pseudopairs.model.settings import TrainingSettings
from pseudopairs.core.settings import resolve_device

PRESETS = {
    "paper": {"embedding_dim": 300, "joint_dim": 1024, "batch_size": 128},
    "demo": {"embedding_dim": 64, "joint_dim": 256, "batch_size": 64},
}
VOCAB = 10_000
IMAGE_DIM = 2048


def synthetic_sets(*, n_images: int, seed: int) -> tuple[list[C2IData], list[C2CData]]:
    rng = np.random.default_rng(seed)
    ids = np.array([f"img{i:06d}" for i in range(n_images)])
    features = rng.normal(size=(n_images, IMAGE_DIM)).astype(np.float16)
    sets = {}
    for lang in ("en", "de"):
        image_of = np.repeat(np.arange(n_images), 5)
        lengths = rng.integers(6, 19, size=len(image_of))
        tokens = TokenTable.from_lists([rng.integers(2, VOCAB, size=n).tolist() for n in lengths])
        sets[lang] = CaptionSet(name=f"m30k.{lang}", lang=lang, image_ids=ids[image_of],
                                caption_idx=np.tile(np.arange(5), n_images), texts=[""] * len(image_of),
                                tokens=tokens, feature_rows=image_of, features=features,
                                feature_ids=ids.tolist())
    return ([C2IData(sets["en"]), C2IData(sets["de"])],
            [C2CData("m30k.en+m30k.de", sets["en"], sets["de"])])


def make_trainer(preset: dict, device: torch.device, data, seed: int = 0) -> Trainer:
    torch.manual_seed(seed)
    model = RankingModel(VOCAB, embedding_dim=preset["embedding_dim"], joint_dim=preset["joint_dim"],
                         image_dim=IMAGE_DIM).to(device)
    settings = TrainingSettings(batch_size=preset["batch_size"], learning_rate=2e-4, grad_clip=2.0,
                                margin=0.2, max_violation=True, c2c_probability=0.5, validate_every=500,
                                patience=10, max_updates=10**6)
    c2i, c2c = data
    return Trainer(model, c2i=c2i, c2c=c2c, settings=settings, seed=seed, device=device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_real(trainer: Trainer, n: int) -> None:
    pending = []
    for _ in range(n):
        pending.append(trainer.update()[2])
        if len(pending) >= LOSS_READBACK_EVERY:
            torch.stack(pending).cpu()
            pending.clear()
    if pending:
        torch.stack(pending).cpu()


def run_bare(model: RankingModel, optimizer: torch.optim.Optimizer, batches: list) -> None:
    losses = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        if hasattr(batch, "features"):
            a = model.encode_images(batch.features)
            b = model.encode_captions(batch.tokens, batch.lengths)
        else:
            a = model.encode_captions(batch.tokens_a, batch.lengths_a)
            b = model.encode_captions(batch.tokens_b, batch.lengths_b)
        loss = contrastive_loss(a, b, margin=0.2, max_violation=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        losses.append(loss.detach())
    torch.stack(losses).cpu()


def stacked_updater(stack: StackedRankingModel, optimizer: StackedAdam, graphs: bool, *, pinned: bool = False):
    """The stacked update as the pipeline runs it: ``stacked_update``, or with ``graphs`` the
    static-shape update replayed as CUDA graphs (``training.cuda_graphs``; ``pinned``: its inputs
    through pinned host buffers, ``training.pinned_memory``)."""
    options = {"margin": 0.2, "max_violation": True, "grad_clip": 2.0}
    if graphs:
        return StaticStackUpdate(stack, optimizer, pinned=pinned, **options)
    return lambda batches: stacked_update(stack, optimizer, batches, **options)


def run_stacked(trainers: list[Trainer], update, n: int) -> None:
    pending = []
    for _ in range(n):
        batches = [t.next_batch()[2] for t in trainers]
        pending.append(update(batches))
        if len(pending) >= LOSS_READBACK_EVERY:
            torch.stack(pending).cpu()
            pending.clear()
    if pending:
        torch.stack(pending).cpu()


def run_separate(trainers: list[Trainer], n: int) -> None:
    for trainer in trainers:
        run_real(trainer, n)


def stack_benchmark(args, preset: dict, device: torch.device, data) -> None:
    size = args.stack
    stacked_trainers = [make_trainer(preset, device, data, seed=s) for s in range(size)]
    stack = StackedRankingModel([t.model for t in stacked_trainers])
    stack.precision, stack.compile = args.precision, args.compile   # training.stack_precision / stack_compile
    optimizer = StackedAdam(stack.parameters_in_order(), lr=2e-4)
    update = stacked_updater(stack, optimizer, args.graphs, pinned=args.pinned)
    separate = [] if args.no_reference else [make_trainer(preset, device, data, seed=s) for s in range(size)]
    run_stacked(stacked_trainers, update, args.warmup)
    run_separate(separate, args.warmup)
    sync(device)
    warm_captures = getattr(update, "captures", 0)
    blocks = args.blocks or (2 if device.type == "cuda" else max(1, args.updates // 2))
    per_block = max(1, args.updates // blocks)
    wall = {"stacked": 0.0, "separate": 0.0}
    for _ in range(blocks):
        for variant, fn, fn_args in (("stacked", run_stacked, (stacked_trainers, update, per_block)),
                                     ("separate", run_separate, (separate, per_block))):
            start = time.perf_counter()
            fn(*fn_args)
            sync(device)
            wall[variant] += time.perf_counter() - start
    n = blocks * per_block
    stacked_rate = size * n / wall["stacked"]      # model-updates per second
    separate_rate = size * n / wall["separate"] if separate else float("nan")
    print(f"stack of {size}: {n} updates of each model per variant in {blocks} alternating blocks "
          f"after {args.warmup} warm-up")
    print(f"stacked  : {stacked_rate:9.1f} model-updates/s summed, {stacked_rate / size:8.1f} per model")
    print(f"separate : {separate_rate:9.1f} model-updates/s summed, {separate_rate / size:8.1f} per model "
          f"({size} trainers one after the other)" if separate else
          "separate : not run (--no-reference); divide by another run's separate rate")
    print(f"ratio stacked/separate: {stacked_rate / separate_rate:6.3f} (goal at S = 10 on an H100: "
          f">= 5 and >= 1,000 model-updates/s; levers: precision {args.precision}, compile {args.compile}, "
          f"pinned {args.pinned}, graphs {args.graphs}, tf32 {args.tf32})")
    if args.calibration and device.type == "cuda":
        from pseudopairs.workflow.calibration import record

        table = "bf16" if args.precision == "bf16" else "tf32" if args.tf32 else "float32"
        record(args.calibration, gpu_model=torch.cuda.get_device_name(device),
               rates={"train_updates_per_s": {table: {size: round(stacked_rate, 1)}}},
               note=f"benchmarks/training.py --stack {size}, graphs {args.graphs}, compile {args.compile}, "
                    f"pinned {args.pinned}")
    if device.type == "cuda":
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB")
    if args.graphs:
        print(f"CUDA graphs captured: {warm_captures} in the warm-up, {update.captures - warm_captures} "
              f"during the timed updates; {update.replays} replays" if update.graphs else
              "CUDA graphs: off (not on a GPU, or the capture failed)")
    if args.profile:
        profile_stacked(stacked_trainers, update, size, args.profile, device)


def profile_stacked(trainers: list[Trainer], update, size: int, n: int, device: torch.device) -> None:
    """Where a stacked update's time goes: host phases, then a profiler trace of device kernels."""
    phases = {"draw batches (host)": 0.0, "stacked_update call (host dispatch)": 0.0,
              "wait for the device": 0.0}
    sync(device)
    for _ in range(n):
        start = time.perf_counter()
        batches = [t.next_batch()[2] for t in trainers]
        drawn = time.perf_counter()
        update(batches)
        dispatched = time.perf_counter()
        sync(device)
        done = time.perf_counter()
        phases["draw batches (host)"] += drawn - start
        phases["stacked_update call (host dispatch)"] += dispatched - drawn
        phases["wait for the device"] += done - dispatched
    total = sum(phases.values())
    print(f"phases of one stacked update of {size} (mean of {n}, synchronised after each): "
          f"{1000 * total / n:.2f} ms")
    for name, value in phases.items():
        print(f"  {name:38s} {1000 * value / n:8.2f} ms  ({100 * value / total:5.1f} %)")
    if device.type != "cuda":
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        start = time.perf_counter()
        run_stacked(trainers, update, n)
        sync(device)
        wall = time.perf_counter() - start
    events = trace.key_averages()
    key = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    kernels = sorted((e for e in events if getattr(e, key) > 0), key=lambda e: -getattr(e, key))
    busy = sum(getattr(e, key) for e in kernels) / 1e6
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    print(f"profiled {n} stacked updates: wall {1000 * wall / n:.2f} ms/update (profiler on), device "
          f"busy {1000 * busy / n:.2f} ms/update = {100 * busy / wall:.1f} % of the wall time, "
          f"{launches / n:.0f} kernel launches/update")
    for e in kernels[:18]:
        print(f"  {getattr(e, key) / 1000 / n:8.3f} ms/update {100 * getattr(e, key) / 1e6 / busy:5.1f} % "
              f"x{e.count // n:<4d} {e.key[:90]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=None,
                        help="timed updates per variant (default: 12 on CPU at paper size, 40 "
                             "on CPU at demo size, 400 on GPU)")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--blocks", type=int, default=0,
                        help="alternating timed blocks per variant (default: 4 on GPU, one per 2 "
                             "updates on CPU)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1, as config training.threads; 0 = torch default)")
    parser.add_argument("--stack", type=int, default=0,
                        help="S >= 1: stacked training of S models against S separate trainers")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matrix products on a GPU")
    parser.add_argument("--graphs", action="store_true",
                        help="(with --stack) the stacked update replayed as CUDA graphs on a GPU "
                             "(training.cuda_graphs; model/stack_graph.py)")
    parser.add_argument("--precision", choices=["float32", "bf16"], default="float32",
                        help="(with --stack) training.stack_precision: the batched products in bf16")
    parser.add_argument("--compile", action="store_true",
                        help="(with --stack) training.stack_compile: the GRU's elementwise work compiled")
    parser.add_argument("--pinned", action="store_true",
                        help="(with --stack --graphs) training.pinned_memory: inputs via pinned buffers")
    parser.add_argument("--no-reference", action="store_true",
                        help="(with --stack) skip the S separate trainers (only the stacked rate)")
    parser.add_argument("--calibration", default=None,
                        help="on CUDA: record the measured rate in this calibration file "
                             "(pseudopairs.workflow.calibration: rates.train_updates_per_s)")
    parser.add_argument("--profile", type=int, default=0,
                        help="K >= 1 (with --stack): time K more stacked updates by phase and trace "
                             "them with torch.profiler")
    args = parser.parse_args()
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(resolve_device(args.device, key="--device"))
    preset = PRESETS[args.preset]
    if args.updates is None:
        args.updates = 400 if device.type == "cuda" else (12 if args.preset == "paper" else 40)
    if args.warmup is None:
        args.warmup = 20 if device.type == "cuda" else 2
    # Alternate short blocks so that load from other processes hits both variants alike.
    blocks = args.blocks or (4 if device.type == "cuda" else max(1, args.updates // 2))
    n = max(blocks, args.updates - args.updates % blocks)
    data = synthetic_sets(n_images=2000, seed=0)
    if args.stack >= 1:
        print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}), "
              f"preset {args.preset} {preset}, tf32 {args.tf32}")
        stack_benchmark(args, preset, device, data)
        return
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}), "
          f"preset {args.preset} {preset}, vocab {VOCAB}, captions 6-18 tokens, c2c p=0.5; "
          f"{n} timed updates per variant in {blocks} alternating blocks after {args.warmup} warm-up")

    real = make_trainer(preset, device, data)
    # The bare loop gets its own model/optimiser and the batches an identical trainer would draw.
    twin = make_trainer(preset, device, data)
    batches = [twin.next_batch()[2].to(device) for _ in range(args.warmup + n)]
    bare_model, bare_opt = twin.model, twin.optimizer
    bare_model.train()

    run_real(real, args.warmup)
    run_bare(bare_model, bare_opt, batches[:args.warmup])
    sync(device)
    wall = {"real": 0.0, "bare": 0.0}
    cpu = {"real": 0.0, "bare": 0.0}
    size = n // blocks

    def timed(variant, fn, *fn_args):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn(*fn_args)
        sync(device)
        wall[variant] += time.perf_counter() - start
        cpu[variant] += time.process_time() - start_cpu

    for block in range(blocks):
        timed("real", run_real, real, size)
        chunk = batches[args.warmup + block * size: args.warmup + (block + 1) * size]
        timed("bare", run_bare, bare_model, bare_opt, chunk)
    real_rate, bare_rate = n / wall["real"], n / wall["bare"]
    print(f"real pipeline step : {real_rate:8.2f} updates/s  ({1000 / real_rate:8.1f} ms/update wall, "
          f"{1000 * cpu['real'] / n:8.1f} ms/update process CPU time)")
    print(f"bare PyTorch step  : {bare_rate:8.2f} updates/s  ({1000 / bare_rate:8.1f} ms/update wall, "
          f"{1000 * cpu['bare'] / n:8.1f} ms/update process CPU time)")
    print(f"ratio real/bare    : {real_rate / bare_rate:8.3f}  (goal >= 0.95; wall clock)")
    if device.type == "cpu":
        print(f"ratio by CPU time  : {cpu['bare'] / cpu['real']:8.3f}  (less sensitive to other "
              "processes on a shared CPU)")
    elif args.calibration:
        from pseudopairs.workflow.calibration import record

        record(args.calibration, gpu_model=torch.cuda.get_device_name(device),
               rates={"train_updates_per_s": {"tf32" if args.tf32 else "float32": {1: round(real_rate, 1)}}},
               note="benchmarks/training.py, one model")


if __name__ == "__main__":
    main()
