"""What the exported model's API costs over the bare networks it runs (``pseudopairs.load``).

Images: ``model.encode_images`` over N synthetic JPEG photographs (500 x 375, quality 90;
benchmarks/features.py's generator), from the files and from already decoded PIL images, against
the bare forward of the same feature network (``channels_last``, ``torch.inference_mode``) over
the same images already decoded, resized, cropped and normalised, in the same batches (the
model's image branch, an affine map, is included on the API side only).

Texts: ``model.encode_prepared`` (the vocabulary lookup, the batching by length, the GRU, the
normalisation) over N sentences already prepared, against the bare forward of the text branch
(word embedding and packed GRU, ``RankingModel.encode_captions``) over the same token batches
already padded; the preparation (Moses or the language's tokenizer, lowercasing or truecasing)
is timed on its own, and ``encode_texts`` (preparation included) is printed too.

ratio = bare time ÷ API time (1.0: the API costs nothing over the bare network; goal ≥ 0.9).
On shared cores the two sides' times swing with the other jobs, so the API's own work beyond the
bare network (decoding the files; the feature cast and image branch; the vocabulary lookup and
batching) is also timed alone, and ``implied ratio`` = bare ÷ (bare + that work) printed.
Each side is timed ``--repeats`` times, alternating, and the fastest run of each is kept; the
CPU-time ratio (bare CPU seconds ÷ API CPU seconds, all the process' threads) is printed beside
it, for shared cores, where the wall time also counts the waits for a core.

The model: ``--model FOLDER`` (an export), or by default the tiny demo trained at the paper's
sizes in a temporary directory (ResNet50 with seeded random weights, 256 px resize and 224 px
crop; 300-d word embeddings, a 1,024-unit GRU; the real workflow, then ``pseudopairs export``;
a few minutes on 2 cores).

    .venv/bin/python benchmarks/encoding.py [--model FOLDER] [--images 64] [--texts 1024] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]


def paper_sized_export(workdir: Path) -> Path:
    """The tiny demo at the paper's network sizes, trained and exported in ``workdir``."""
    from test_end_to_end import tiny_config

    config = tiny_config()
    config["features"].update(arch="resnet50", weights="none", resize=256, crop=224, batch_size=32)
    config["model"].update(embedding_dim=300, joint_dim=1024)
    config["training"].update(max_updates=10, validate_every=10)
    (workdir / "bench.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    run = "results/models/en_de_c2c/seed1"
    subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"),
                    "-d", str(workdir), f"{run}/metrics.json", "--cores", "2", "--configfile",
                    str(workdir / "bench.yaml"), "-q"], check=True, env=env, cwd=workdir)
    subprocess.run([sys.executable, "-m", "pseudopairs", "export", run, "export", "--configfile",
                    "bench.yaml"], check=True, env=env, cwd=workdir)
    return workdir / "export"


def fastest(*runs, repeats: int) -> list[float]:
    """The fastest of ``repeats`` timings of each function, run alternately in an order that
    rotates from one repeat to the next (so none always follows the same one), after one untimed
    warm-up run of each."""
    CPU_SECONDS.clear()
    for run in runs:
        run()
    best = [float("inf")] * len(runs)
    for r in range(repeats):
        for k in [(r + j) % len(runs) for j in range(len(runs))]:
            start, cpu = time.perf_counter(), time.process_time()
            runs[k]()
            best[k] = min(best[k], time.perf_counter() - start)
            CPU_SECONDS[k] = min(CPU_SECONDS.get(k, float("inf")), time.process_time() - cpu)
    return best


#: the fastest run's CPU seconds (all the process' threads) of each function of the last
#: :func:`fastest` call: on shared cores, where the wall time also counts the waits for a core
CPU_SECONDS: dict[int, float] = {}


def image_figures(model, paths: list[str], *, batch_size: int, repeats: int) -> dict:
    from pseudopairs.features.network import forward

    pils = []
    for path in paths:
        with Image.open(path) as img:
            pils.append(img.convert("RGB"))
    resize, crop = model.image_settings["resize"], model.image_settings["crop"]
    network, device = model.network, model.device
    batches = [torch.stack([model.load_image(p, name=p) for p in paths[s:s + batch_size]])
               for s in range(0, len(paths), batch_size)]

    def bare():
        with torch.inference_mode():
            for batch in batches:
                forward(network, batch, device=device)

    api_files, api_pil, bare_s = fastest(lambda: model.encode_images(paths, batch_size=batch_size),
                                         lambda: model.encode_images(pils, batch_size=batch_size),
                                         bare, repeats=repeats)
    n, cpu = len(paths), dict(CPU_SECONDS)
    # the API's own work beyond the bare forward, each piece timed alone (robust on shared cores):
    # decoding, resizing and cropping the files; the feature cast and the image branch
    features = np.concatenate([model.features(batch) for batch in batches])
    decode_s, branch_s = fastest(lambda: [model.load_image(p, name=p) for p in paths],
                                 lambda: model.encode_features(features), repeats=repeats)
    return {"extra ms/img (decode)": 1e3 * decode_s / n, "extra ms/img (image branch)": 1e3 * branch_s / n,
            "bare ms/img": 1e3 * bare_s / n,
            "implied ratio (sequential decode)": bare_s / (bare_s + decode_s + branch_s),
            "implied ratio (decoded images)": bare_s / (bare_s + branch_s),
            "images": n, "batch": batch_size, "resize/crop": f"{resize}/{crop}",
            "bare img/s": n / bare_s, "api (files) img/s": n / api_files, "api (PIL) img/s": n / api_pil,
            "ratio files": bare_s / api_files, "ratio PIL": bare_s / api_pil,
            "CPU-time ratio files": cpu[2] / cpu[0], "CPU-time ratio PIL": cpu[2] / cpu[1]}


def sentences(model, count: int, seed: int = 0) -> list[str]:
    """Raw sentences of 6-16 of the vocabulary's words, capitalised, with a full stop."""
    rng = np.random.default_rng(seed)
    words = [w for w in model.vocab.words[2:] if w.isalpha()]
    out = []
    for _ in range(count):
        text = " ".join(rng.choice(words, size=int(rng.integers(6, 17))))
        out.append(text[:1].upper() + text[1:] + ".")
    return out


def text_figures(model, raw: list[str], *, lang: str, batch_size: int, repeats: int) -> dict:
    from pseudopairs.model.batches import TokenTable
    from pseudopairs.model.text_encoders import language_view

    prepared = model.prepare_texts(raw, lang=lang)
    table = TokenTable.encode(language_view(model.vocab, lang), prepared)
    order = np.argsort(-table.lengths, kind="stable")
    batches = [table.batch(order[s:s + batch_size]) for s in range(0, len(order), batch_size)]
    ranking = model.ranking

    def bare():
        with torch.no_grad():
            for tokens, lengths in batches:
                ranking.encode_captions(tokens, lengths)

    prep_s, api_s, full_s, bare_s = fastest(
        lambda: model.prepare_texts(raw, lang=lang),
        lambda: model.encode_prepared(prepared, lang=lang, batch_size=batch_size),
        lambda: model.encode_texts(raw, lang=lang, batch_size=batch_size), bare, repeats=repeats)
    n, cpu = len(raw), dict(CPU_SECONDS)
    # the API's own work beyond the bare GRU, timed alone: vocabulary lookup, batching by length
    view = language_view(model.vocab, lang)

    def lookup_and_batch():
        tokens = TokenTable.encode(view, prepared)
        by_length = np.argsort(-tokens.lengths, kind="stable")
        return [tokens.batch(by_length[s:s + batch_size]) for s in range(0, len(by_length), batch_size)]

    [extra_s] = fastest(lookup_and_batch, repeats=repeats)
    return {"extra ms (lookup, batching)": 1e3 * extra_s, "bare GRU ms": 1e3 * bare_s,
            "implied ratio": bare_s / (bare_s + extra_s),
            "sentences": n, "batch": batch_size, "mean tokens": float(table.lengths.mean()),
            "preparation sent/s": n / prep_s, "bare GRU sent/s": n / bare_s,
            "api (prepared) sent/s": n / api_s, "encode_texts (raw) sent/s": n / full_s,
            "ratio": bare_s / api_s, "CPU-time ratio": cpu[3] / cpu[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="an exported model folder (default: build one)")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--image-batch", type=int, default=32)
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--text-batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    import pseudopairs
    from features import write_pngs

    with tempfile.TemporaryDirectory(prefix="pseudopairs-encoding-") as tmp:
        tmp = Path(tmp)
        folder = Path(args.model) if args.model else paper_sized_export(tmp)
        model = pseudopairs.load(folder)
        print(f"model {folder}: {model.languages}, {model.dim}-d, image network "
              f"{model.image_settings['arch']}; torch threads {torch.get_num_threads()}")
        if args.images > 0:  # --images 0: the texts alone
            (tmp / "images").mkdir()
            frame = write_pngs(tmp / "images", count=args.images, size=375, seed=0, fmt="jpeg")
            figures = image_figures(model, frame["path"].tolist(), batch_size=args.image_batch,
                                    repeats=args.repeats)
            print("images: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in figures.items()))
        lang = model.languages[0]
        figures = text_figures(model, sentences(model, args.texts), lang=lang,
                               batch_size=args.text_batch, repeats=args.repeats)
        print(f"texts ({lang}): " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in figures.items()))


if __name__ == "__main__":
    main()
