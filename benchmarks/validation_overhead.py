"""What validation and the resumable state cost against the updates between two validations.

    .venv/bin/python benchmarks/validation_overhead.py [--device auto] [--preset paper|demo]

At the paper's shapes on the learnable synthetic world of ``stacked_agreement.py``, after
``--train`` updates (validation of an untrained model is not typical: near-random embeddings at
1,024 dimensions leave the exact rank engine many close candidates to settle in float64): one
validation — the Multi30K validation split's size, 1,014 images × 5 captions in each of two
languages, encoded and ranked exactly — timed as the
pipeline does it now (embeddings kept on the training device, the exact rank engine's GEMMs
there, float32 candidates; :func:`pseudopairs.model.encode.validate`), with the engine's own
choice of candidate GEMM (``candidates="auto"``, before) and with the embeddings copied to the
host and ranked there (earlier); the save of a run's resumable state (``last.pt``: model,
Adam state, best weights; ``torch.save`` to a temporary directory); and ``validate_every`` updates
of one model (``Trainer.update``). It prints each, and the overhead of validation + state per
``validate_every`` updates with the state saved at every validation and every
``resume_every`` updates. ``--profile`` then runs one more validation on the training device under
``cProfile`` and prints the functions that take its time (host time; a function that waits for
the device holds the wait).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stacked_agreement import write_world  # noqa: E402
from training import PRESETS, run_real, sync  # noqa: E402

from pseudopairs.evaluation import retrieval_metrics  # noqa: E402
from pseudopairs.model.encode import encode_image_features, encode_token_table, validate  # noqa: E402
from pseudopairs.model.encoders import RankingModel  # noqa: E402
from pseudopairs.model.inputs import load_data, run_vocabulary  # noqa: E402
from pseudopairs.model.training import Trainer  # noqa: E402
from pseudopairs.model.settings import TrainingSettings  # noqa: E402
from pseudopairs.core.settings import resolve_device  # noqa: E402

def validate_on_host(model, sets) -> float:
    """The pre-change validation: embeddings copied to the host, ranked there."""
    score, images = 0.0, encode_image_features(model, sets[0].features)
    for caption_set in sets:
        result = retrieval_metrics(image_embeddings=images,
                                   caption_embeddings=encode_token_table(model, caption_set.tokens),
                                   caption_image_index=caption_set.feature_rows)
        score += result["rsum"]
    return score


def timed(device, fn, *args, repeat: int = 3) -> float:
    fn(*args)  # warm-up
    sync(device)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--images", type=int, default=1014, help="validation images (M30K val: 1,014)")
    parser.add_argument("--validate-every", type=int, default=500)
    parser.add_argument("--resume-every", type=int, default=5000)
    parser.add_argument("--updates", type=int, default=None,
                        help="updates timed (default: validate-every on a GPU, 20 on the CPU)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--train", type=int, default=300, help="updates before the timing")
    parser.add_argument("--calibration", default=None,
                        help="on CUDA: record one validation's seconds in this calibration file "
                             "(pseudopairs.workflow.calibration: rates.validation_s)")
    parser.add_argument("--profile", action="store_true",
                        help="profile one more validation on the training device with cProfile")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(resolve_device(args.device, key="--device"))
    preset = PRESETS[args.preset]
    tmp_world = tempfile.TemporaryDirectory()
    spec = write_world(Path(tmp_world.name), n_train=3000, n_val=args.images)
    vocab = run_vocabulary(spec)
    c2i, c2c, sets, image_dim = load_data(spec, vocab)
    torch.manual_seed(0)
    model = RankingModel(len(vocab), embedding_dim=preset["embedding_dim"], joint_dim=preset["joint_dim"],
                         image_dim=image_dim, image_normalization="l2").to(device)
    settings = TrainingSettings(batch_size=preset["batch_size"], learning_rate=2e-4, grad_clip=2.0,
                                margin=0.2, max_violation=True, c2c_probability=0.5, validate_every=500,
                                patience=10, max_updates=10**6)
    trainer = Trainer(model, c2i=c2i, c2c=c2c, settings=settings, seed=0, device=device)
    run_real(trainer, args.train)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"device {device} ({name}), preset {args.preset} {preset}, validation {args.images} images "
          f"x 5 captions x 2 languages, after {args.train} updates (score {validate(model, sets)[0]:.1f})")
    on_device = timed(device, lambda: validate(model, sets))
    engine_choice = timed(device, lambda: validate(model, sets, candidates="auto"))
    on_host = timed(device, lambda: validate_on_host(model, sets))
    with tempfile.TemporaryDirectory() as tmp:
        state = {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                 "optimizer": trainer.optimizer.state_dict(),
                 "best": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
        path = Path(tmp) / "last.pt"

        def save():
            torch.save({**state, "model": {k: v.detach().cpu() for k, v in model.state_dict().items()}}, path)
        saving = timed(device, save)
        size_mb = path.stat().st_size / 2**20
    updates = args.updates or (args.validate_every if device.type == "cuda" else 20)
    per_update = timed(device, run_real, trainer, updates, repeat=1) / updates
    interval = per_update * args.validate_every
    print(f"validation, on the training device : {on_device:7.3f} s  (float32 candidate GEMM, the default)")
    print(f"  the same, the engine's candidates  : {engine_choice:7.3f} s  (candidates='auto': bf16 "
          "where the device has a bf16 unit)")
    print(f"validation, ranked on the host      : {on_host:7.3f} s  (the engine's candidates)")
    print(f"last.pt save ({size_mb:4.0f} MB)           : {saving:7.3f} s")
    print(f"{args.validate_every} updates                         : {interval:7.3f} s "
          f"({per_update * 1000:.2f} ms/update)")
    saves = args.validate_every / args.resume_every if args.resume_every else 1.0
    before = (on_host + saving) / interval
    engine = (engine_choice + saving * saves) / interval
    after = (on_device + saving * saves) / interval
    print(f"overhead per {args.validate_every} updates, before (host ranking, state every validation): "
          f"{100 * before:6.1f} %")
    print(f"overhead per {args.validate_every} updates, device ranking with the engine's candidates, "
          f"state every {args.resume_every} updates: {100 * engine:6.1f} %")
    print(f"overhead per {args.validate_every} updates, now (device ranking, float32 candidates, state "
          f"every {args.resume_every} updates): {100 * after:6.1f} %  (goal <= 5 %)")
    if args.calibration and device.type == "cuda":
        from pseudopairs.workflow.calibration import record

        record(args.calibration, gpu_model=torch.cuda.get_device_name(device),
               rates={"validation_s": round(on_device, 3)}, note="benchmarks/validation_overhead.py")
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(lambda: (validate(model, sets), sync(device)))
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(r"pseudopairs|torch/(functional|_tensor)", 25)
        stats.sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
