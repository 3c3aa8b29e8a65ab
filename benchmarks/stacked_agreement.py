"""Do stacked models follow their separate runs, and does TF32 stay within the seeds' noise?

    .venv/bin/python benchmarks/stacked_agreement.py [--device auto] [--preset paper|demo]
        [--seeds 3] [--updates 1000] [--tf32] [--bf16] [--compile]

A learnable synthetic world (each image a draw of five attributes; its features the sum of one
random 2048-d vector per attribute value plus noise; five English and five German captions per
image naming the attributes with templates) written to a temporary directory, then the
pipeline's own steps: ``train`` (each seed a job of its own) and ``train`` of a block (the seeds as one
batched stack), same settings, no early stopping (``max_updates`` updates, validation every
``--validate-every``). It prints the validation curves of both, at each validation the largest
difference between a model's stacked and separate run and the seeds' standard deviation there
(the noise a change must stay within), and the wall time of each. The stacked runs replay CUDA
graphs on a GPU (``training.cuda_graphs``, the default); ``--eager`` adds stacked runs without
them, ``--tf32`` stacked runs with TF32 matrix products, ``--bf16`` with bf16 products
(``training.stack_precision``), ``--compile`` with compiled GRU kernels
(``training.stack_compile``), each compared with the float32 separate runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from pseudopairs.data.vocab import build_vocabulary
from pseudopairs.core.io import CAPTION_COLUMNS, save_features, write_json_atomic
from pseudopairs.model.job import RunSettings
from pseudopairs.model.stack_training import train_stack
from pseudopairs.model.training import train
from pseudopairs.core.settings import resolve_device

ATTRIBUTES = {
    "colour": (["red", "blue", "green", "yellow", "white", "black", "brown", "grey"],
               ["rot", "blau", "gruen", "gelb", "weiss", "schwarz", "braun", "grau"]),
    "kind": (["dog", "cat", "horse", "bird", "car", "boat", "ball", "chair", "tree", "house"],
             ["hund", "katze", "pferd", "vogel", "auto", "boot", "ball", "stuhl", "baum", "haus"]),
    "place": (["park", "street", "beach", "field", "room", "lake"],
              ["park", "strasse", "strand", "feld", "zimmer", "see"]),
    "size": (["small", "big", "tiny", "large"], ["klein", "gross", "winzig", "riesig"]),
    "action": (["standing", "running", "lying", "waiting", "sitting"],
               ["steht", "rennt", "liegt", "wartet", "sitzt"]),
}
TEMPLATES = {
    "en": ["a {size} {colour} {kind} {action} in the {place}", "the {colour} {kind} is {action}",
           "a {kind} in a {place}", "{size} {kind} {action} near the {place}", "a {colour} {kind}"],
    "de": ["ein {size} {colour} {kind} {action} im {place}", "der {colour} {kind} {action}",
           "ein {kind} im {place}", "{size} {kind} {action} am {place}", "ein {colour} {kind}"],
}
PRESETS = {"paper": ({"batch_size": 128}, {"embedding_dim": 300, "joint_dim": 1024}),
           "demo": ({"batch_size": 64}, {"embedding_dim": 64, "joint_dim": 256})}


def write_world(root: Path, *, n_train: int, n_val: int, seed: int = 0) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vectors = {a: rng.normal(size=(len(words[0]), 2048)) for a, words in ATTRIBUTES.items()}
    paths = {}
    for split, n in (("train", n_train), ("val", n_val)):
        rows, ids, feats = [], [], []
        for k in range(n):
            values = {a: int(rng.integers(len(w[0]))) for a, w in ATTRIBUTES.items()}
            image_id = f"{split}{k:05d}"
            ids.append(image_id)
            feats.append(sum(vectors[a][v] for a, v in values.items()) + 2.0 * rng.normal(size=2048))
            for li, lang in enumerate(("en", "de")):
                words = {a: ATTRIBUTES[a][li][v] for a, v in values.items()}
                for j, template in enumerate(TEMPLATES[lang]):
                    text = template.format(**words)
                    rows.append(("world", split, image_id, lang, j, text, text))
        frame = pd.DataFrame(rows, columns=CAPTION_COLUMNS)
        captions = root / f"{split}.parquet"
        frame.to_parquet(captions, index=False)
        features = root / f"{split}.npz"
        save_features(features, image_ids=ids, features=np.asarray(feats, dtype=np.float16))
        paths[split] = (str(captions), str(features))
        if split == "train":
            write_json_atomic(root / "vocab.json", build_vocabulary(frame["text"], min_count=1).to_json())

    def ref(lang):
        return {"name": f"world.{lang}", "captions": paths["train"][0], "features": paths["train"][1],
                "lang": lang}

    return {"experiment": "en_de_c2c", "c2i": [ref("en"), ref("de")],
            "c2c": [{"name": "world.en+world.de", "a": ref("en"), "b": ref("de")}],
            "validation": {"captions": paths["val"][0], "features": paths["val"][1], "langs": ["en", "de"]},
            "vocab": {"path": str(root / "vocab.json")}, "init_from": None}


def curve(out_dir: Path) -> np.ndarray:
    frame = pd.read_csv(out_dir / "train_log.csv")
    return frame["val_score"].dropna().to_numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--validate-every", type=int, default=100)
    parser.add_argument("--images", type=int, default=3000, help="training images")
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--bf16", action="store_true",
                        help="also stacked runs with bf16 products (training.stack_precision: bf16)")
    parser.add_argument("--compile", action="store_true",
                        help="also stacked runs with compiled GRU kernels (training.stack_compile)")
    parser.add_argument("--eager", action="store_true",
                        help="also the stacked runs without CUDA graphs (training.cuda_graphs false)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    device = resolve_device(args.device, key="--device")
    training, model = PRESETS[args.preset]
    settings = RunSettings.from_dict({
        "training": {**training, "learning_rate": 2e-4, "grad_clip": 2.0, "margin": 0.2,
                     "max_violation": True, "c2c_probability": 0.5, "validate_every": args.validate_every,
                     "patience": 10**6, "max_updates": args.updates, "device": device,
                     "threads": args.threads},
        "model": {**model, "image_normalization": "l2"}})
    seeds = list(range(1, args.seeds + 1))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = write_world(root / "world", n_train=args.images, n_val=500)
        print(f"device {device}, preset {args.preset}, {len(seeds)} seeds, {args.updates} updates, "
              f"validation every {args.validate_every} on 500 images x 5 captions x 2 languages")
        start = time.perf_counter()
        for seed in seeds:
            train(spec=spec, settings=settings, out_dir=root / "separate" / f"seed{seed}", seed=seed)
        print(f"separate runs : {time.perf_counter() - start:7.1f} s")
        # (name, tf32, graphs, precision, compile)
        variants = ([("stacked", False, True, "float32", False)]
                    + ([("stacked-eager", False, False, "float32", False)] if args.eager else [])
                    + ([("stacked-tf32", True, True, "float32", False)] if args.tf32 else [])
                    + ([("stacked-bf16", False, True, "bf16", False)] if args.bf16 else [])
                    + ([("stacked-compiled", False, True, "float32", True)] if args.compile else []))
        for name, tf32, graphs, precision, compiled in variants:
            start = time.perf_counter()
            variant = replace(settings, training=replace(
                settings.training, stack_compute="batched", tf32=tf32, cuda_graphs=graphs,
                stack_precision=precision, stack_compile=compiled))
            train_stack(jobs=[{"seed": s, "spec": spec, "out_dir": str(root / name / f"seed{s}")}
                              for s in seeds], settings=variant)
            print(f"{name:16s} : {time.perf_counter() - start:7.1f} s")
        separate = np.array([curve(root / "separate" / f"seed{s}") for s in seeds])
        noise = separate.std(axis=0, ddof=1) if len(seeds) > 1 else np.full(separate.shape[1], np.nan)
        print(f"separate runs' validation curves: {separate.round(1).tolist()}")
        print(f"seeds' sd at each validation (the noise): {noise.round(1).tolist()}")
        for name, *_ in variants:
            ours = np.array([curve(root / name / f"seed{s}") for s in seeds])
            diff = np.abs(ours - separate).max(axis=0)
            print(f"{name}: curves {ours.round(1).tolist()}")
            print(f"{name}: largest |difference| from the separate runs at each validation "
                  f"{diff.round(1).tolist()}; largest ratio to the seeds' sd "
                  f"{np.nanmax(diff / np.where(noise > 0, noise, np.nan)):.2f}; final scores differ by "
                  f"at most {diff[-1]:.2f} (seeds' final sd {noise[-1]:.2f})")

if __name__ == "__main__":
    main()
