"""Throughput of the caption translation pipeline versus a bare CTranslate2 call.

In one process, on one device, with one converted model and the same English captions:

- pipeline: ``pseudopairs.translation.translate.translate_captions`` from the caption table to the written
  German caption table (reading and checking the table and the model directory, hashing
  ``model.bin`` for the chunk fingerprint, loading the translator, SentencePiece encoding,
  ``translate_iterable`` with token batches, decoding, the Moses preparation of every
  translation, chunk files, the final table and sidecar);
- bare: one ``ctranslate2.Translator.translate_batch`` call on the already SentencePiece-encoded
  captions (translator loaded beforehand), with the same beam, batch size, batch type and
  compute type.

ratio = pipeline sentences/s ÷ bare sentences/s (1.0 = everything around CTranslate2 costs
nothing). Target tokens/s count the subword tokens of the translations.

Without ``--model`` a small demo model is trained first (a few thousand demo-world pairs, a
minute or two on CPU) and converted; the captions are demo-world COCO-like English captions.
``--device cuda`` measures on the GPU (float16 unless ``--compute-type`` says otherwise).

    .venv/bin/python benchmarks/translation.py [--model CT2DIR] [--captions N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pseudopairs.translation import convert as CV
from pseudopairs.translation import settings as TS
from pseudopairs.translation import train as TR
from pseudopairs.translation import translate as TL
from pseudopairs.core.io import CAPTION_COLUMNS
from pseudopairs.data.text import prepare_line
from pseudopairs.world.generate import comparable_captions, parallel_caption
from pseudopairs.world.scene import sample_scene


def demo_pairs(count: int, *, seed: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    en, de = [], []
    for _ in range(count):
        _, e, d = parallel_caption(sample_scene(rng, corpus="m30k", image_size=64), rng=rng)
        en.append(e)
        de.append(d)
    return en, de


def demo_model(directory: Path, *, pairs: int, steps: int, threads: int) -> Path:
    """Train and convert a small demo model (float32 weights)."""
    en, de = demo_pairs(pairs, seed=1)
    ven, vde = demo_pairs(200, seed=2)
    for name, lines in (("train.en", en), ("train.de", de), ("valid.en", ven), ("valid.de", vde)):
        (directory / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    settings = TS.TranslationTrainSettings.from_dict({"max_steps": steps, "threads": threads, "batch_tokens": 1024,
                                          "warmup_steps": min(300, steps // 3)})
    bleu = TR.train_mt(source_train=directory / "train.en", target_train=directory / "train.de",
                      source_valid=directory / "valid.en", target_valid=directory / "valid.de",
                      settings=settings, output_dir=directory / "trained", progress=False)
    print(f"[setup] demo model: {pairs} pairs, {steps} steps, validation BLEU {bleu['bleu']:.1f}")
    CV.convert_checkpoint(directory / "trained" / "model.pt", directory / "ct2", quantization="none")
    return directory / "ct2"


def caption_table(path: Path, *, count: int, seed: int) -> pd.DataFrame:
    """``count`` English demo-world captions of COCO-like scenes, 5 per image."""
    rng = np.random.default_rng(seed)
    rows = []
    image = 0
    while len(rows) < count:
        scene = sample_scene(rng, corpus="coco", image_size=64)
        for idx, (_, text) in enumerate(comparable_captions(scene, rng=rng, lang="en", n=5)):
            rows.append(("coco", "train", f"coco_train_{image:06d}", "en", idx, text))
        image += 1
    frame = pd.DataFrame(rows[:count], columns=CAPTION_COLUMNS[:-1])
    frame["text"] = [prepare_line(r, lang="en") for r in frame["raw"]]
    frame.to_parquet(path, index=False)
    return frame


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="converted model directory (default: train a demo model)")
    parser.add_argument("--captions", type=int, default=3000, help="number of English captions")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--compute-type", default="auto", help="auto = int8 on CPU, float16 on CUDA")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--max-batch-size", type=int, default=1024, help="tokens per batch")
    parser.add_argument("--threads", type=int, default=None, help="intra_threads (default: all cores)")
    parser.add_argument("--chunk-size", type=int, default=5000)
    parser.add_argument("--prepare-workers", type=int, default=0)
    parser.add_argument("--train-pairs", type=int, default=4000, help="demo model: training pairs")
    parser.add_argument("--train-steps", type=int, default=400, help="demo model: updates")
    parser.add_argument("--repeats", type=int, default=2, help="timed repetitions; the best is kept")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import ctranslate2

    threads = args.threads or len(os.sched_getaffinity(0))
    settings = TS.TranslateSettings.from_dict({
        "beam_size": args.beam_size, "max_batch_size": args.max_batch_size, "device": args.device,
        "compute_type": args.compute_type, "intra_threads": threads, "inter_threads": 1,
        "chunk_size": args.chunk_size, "prepare_workers": args.prepare_workers})
    device, _, compute = TL.ctranslate2_device(settings)

    with tempfile.TemporaryDirectory(prefix="bench-translation-") as tmp:
        tmp = Path(tmp)
        model_dir = Path(args.model) if args.model else demo_model(
            tmp, pairs=args.train_pairs, steps=args.train_steps, threads=threads)
        captions = tmp / "captions.parquet"
        frame = caption_table(captions, count=args.captions, seed=7)
        model = CV.open_model_dir(model_dir)
        pieces = model.source_tokenizer.encode([t.strip() for t in frame["raw"]])
        options = TL.translation_options(settings)
        translator = ctranslate2.Translator(str(model_dir), device=device, compute_type=compute,
                                            intra_threads=threads, inter_threads=1)
        translator.translate_batch(pieces[:64], **options)  # warm-up

        bare_s, bare_tokens, pipe_s, pipe_tokens = [], 0, [], 0
        bare_out: list[str] = []
        for repeat in range(args.repeats):
            start = time.perf_counter()
            results = translator.translate_batch(pieces, **options)
            bare_s.append(time.perf_counter() - start)
            bare_tokens = sum(len(r.hypotheses[0]) for r in results)
            bare_out = model.target_tokenizer.decode([r.hypotheses[0] for r in results])

            output = tmp / f"out{repeat}" / "train.parquet"
            start = time.perf_counter()
            run = TL.translate_captions(captions, output, model_dir=model_dir, source_lang="en",
                                       target_lang="de", dataset="coco.de-mt", settings=settings,
                                       progress=False)
            pipe_s.append(time.perf_counter() - start)
            pipe_tokens = run.target_tokens
        pipe_out = pd.read_parquet(output)["raw"].tolist()
        del translator

    n = len(frame)
    bare, pipe = min(bare_s), min(pipe_s)
    same = sum(a == b for a, b in zip(bare_out, pipe_out)) / n
    result = {
        "device": device, "compute_type": compute, "threads": threads, "beam_size": args.beam_size,
        "max_batch_size": args.max_batch_size, "captions": n, "model": model.model_id,
        "bare": {"seconds": round(bare, 3), "sentences_per_s": round(n / bare, 1),
                 "target_tokens_per_s": round(bare_tokens / bare, 1)},
        "pipeline": {"seconds": round(pipe, 3), "sentences_per_s": round(n / pipe, 1),
                     "target_tokens_per_s": round(pipe_tokens / pipe, 1)},
        "ratio": round(bare / pipe, 3),
        "identical_translations": round(same, 4),
        "ctranslate2": ctranslate2.__version__,
    }
    print(f"[{device} {compute}, {threads} thread(s), beam {args.beam_size}, {n} captions, "
          f"max_batch_size {args.max_batch_size} tokens]")
    print(f"bare translate_batch : {n / bare:9.1f} sentences/s {bare_tokens / bare:10.1f} target tokens/s "
          f"({bare:.2f} s)")
    print(f"pipeline             : {n / pipe:9.1f} sentences/s {pipe_tokens / pipe:10.1f} target tokens/s "
          f"({pipe:.2f} s)")
    print(f"ratio pipeline/bare  : {bare / pipe:.3f} (goal >= 0.9); identical translations: {same:.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
