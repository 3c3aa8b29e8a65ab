"""The ``world`` and ``world-parallel`` steps: every image of the demo world (scene, PNG, captions
in each language) and the parallel text of its machine-translation model."""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
from PIL import Image
from tqdm import tqdm

from pseudopairs import commands
from pseudopairs.core.io import (IMAGE_COLUMNS, RAW_CAPTION_COLUMNS, atomic_path, write_parquet_atomic,
                            write_text_atomic)
from pseudopairs.world.content import BACKGROUNDS, KIND_WEIGHTS, kinds_of
from pseudopairs.world.grammar import CaptionSpec, CaptionStyle, realise, sample_caption_spec
from pseudopairs.world.meaning import MEANING_COLUMNS, caption_meaning
from pseudopairs.world.render import render_scene
from pseudopairs.world.scene import Scene, image_rng, sample_scene, with_unrendered_details
from pseudopairs.world.settings import CORPORA, SPLITS, WorldSettings



log = logging.getLogger(__name__)


TASK1 = "m30k_task1"


LANG_ORDER = ("de", "en")  # rows within an image: languages in sorted order
# m30k_task1: one spec realised in each of these (a caption and its exact translations); rows
# within an image in sorted order. Realising a spec draws nothing, so adding a language leaves
# every other caption and image as it was.
TASK1_LANGS = ("cs", "de", "en", "fr")


def comparable_captions(scene: Scene, *, rng: np.random.Generator, lang: str, n: int,
                        style: CaptionStyle = CaptionStyle()) -> list[tuple[CaptionSpec, str]]:
    """``n`` captions of a scene in one language, each from its own spec (distinct texts when
    the grammar allows: a duplicate is redrawn up to 20 times)."""
    out: list[tuple[CaptionSpec, str]] = []
    seen: set[str] = set()
    for _ in range(n):
        for attempt in range(21):
            spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background, style=style)
            text = realise(spec, lang=lang, groups=scene.groups, background=scene.background,
                           background_colour=scene.background_colour)
            if text not in seen:
                break
        seen.add(text)
        out.append((spec, text))
    return out


def parallel_captions(scene: Scene, *, rng: np.random.Generator, langs: tuple[str, ...] = TASK1_LANGS,
                      style: CaptionStyle = CaptionStyle()) -> tuple[CaptionSpec, dict[str, str]]:
    """One spec realised in each of ``langs``: a sentence and its exact translations. Only the
    spec draws from ``rng`` (one draw sequence whatever ``langs`` holds)."""
    spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background, style=style)
    kw = dict(groups=scene.groups, background=scene.background,
              background_colour=scene.background_colour)
    return spec, {lang: realise(spec, lang=lang, **kw) for lang in langs}


def parallel_caption(scene: Scene, *, rng: np.random.Generator,
                     style: CaptionStyle = CaptionStyle()) -> tuple[CaptionSpec, str, str]:
    """One spec realised in English and in German: a sentence and its exact translation."""
    spec, texts = parallel_captions(scene, rng=rng, langs=("en", "de"), style=style)
    return spec, texts["en"], texts["de"]


def image_id(corpus: str, split: str, index: int) -> str:
    return f"{corpus}_{split}_{index:06d}"


@dataclass(frozen=True)
class WorldImage:
    image_id: str
    scene: Scene
    captions: Mapping[str, list[str]]  # lang -> captions (comparable)
    task1: Mapping[str, str] | None  # lang -> the one parallel caption (TASK1_LANGS), for m30k
    specs: Mapping[str, list[CaptionSpec]] | None = None  # lang -> the spec of each caption
    task1_spec: CaptionSpec | None = None


def world_scene(settings: WorldSettings, rng: np.random.Generator,
                details_rng: np.random.Generator, corpus: str) -> Scene:
    """A scene of ``corpus`` and, when captions may name them (``unrendered`` > 0), its unrendered
    details from their own stream (the scene and its pixels are those of the aligned world)."""
    scene = sample_scene(rng, corpus=corpus, image_size=settings.image_size,
                         max_groups=settings.max_groups, max_count=settings.max_count,
                         max_objects=settings.max_objects)
    return with_unrendered_details(scene, details_rng) if settings.unrendered > 0 else scene


def generate_image(settings: WorldSettings, corpus: str, split: str, index: int) -> WorldImage:
    """Scene and captions of one image (with the spec of each caption), a pure function of
    (settings, corpus, split, index)."""
    scene = world_scene(settings, image_rng(settings.seed, corpus, split, index, "scene"),
                        image_rng(settings.seed, corpus, split, index, "details"), corpus)
    style = settings.caption_style
    langs = ("en", "de") if corpus == "m30k" else ("en",)
    drawn = {lang: comparable_captions(
        scene, rng=image_rng(settings.seed, corpus, split, index, f"captions.{lang}"),
        lang=lang, n=settings.captions_per_image, style=style) for lang in langs}
    captions = {lang: [text for _, text in pairs] for lang, pairs in drawn.items()}
    specs = {lang: [spec for spec, _ in pairs] for lang, pairs in drawn.items()}
    task1 = task1_spec = None
    if corpus == "m30k":
        task1_spec, task1 = parallel_captions(
            scene, rng=image_rng(settings.seed, corpus, split, index, "task1"), style=style)
    return WorldImage(image_id(corpus, split, index), scene, captions, task1, specs, task1_spec)


def meaning_rows(item: WorldImage, corpus: str, split: str) -> list[tuple]:
    """Rows (:data:`~pseudopairs.world.meaning.MEANING_COLUMNS`) of what each caption of one
    image says about its scene: its comparable captions, and the parallel ones of m30k_task1."""
    scene = item.scene
    kw = dict(groups=scene.groups, background=scene.background,
              background_colour=scene.background_colour)
    captions = [(corpus, lang, k, spec) for lang in LANG_ORDER
                for k, spec in enumerate(item.specs.get(lang, []))]
    if item.task1_spec is not None:
        captions += [(TASK1, lang, 0, item.task1_spec) for lang in TASK1_LANGS]
    return [(name, split, item.image_id, lang, k, mention, attribute, value)
            for name, lang, k, spec in captions
            for mention, attribute, value in caption_meaning(spec, **kw)]


def parallel_pairs(settings: WorldSettings, split: str) -> list[tuple[str, str]]:
    """``settings.parallel[split]`` raw (English, German) sentence pairs for training the demo's
    machine translation model: one parallel caption of a freshly drawn scene each, scenes drawn
    from the m30k and coco distributions in turn (a general-domain MT system knows the kinds of
    both corpora). Pure function of the seed, like every image; pair k of a split never
    depends on the split's size."""
    pairs = []
    for index in range(settings.parallel.get(split, 0)):
        corpus = CORPORA[index % len(CORPORA)]
        scene = world_scene(settings, image_rng(settings.seed, "parallel", split, index, f"scene.{corpus}"),
                            image_rng(settings.seed, "parallel", split, index, f"details.{corpus}"), corpus)
        _, en, de = parallel_caption(scene, rng=image_rng(settings.seed, "parallel", split, index, "caption"),
                                     style=settings.caption_style)
        pairs.append((en, de))
    return pairs


def parallel_sentences(settings: WorldSettings, split: str, n: int,
                       langs: tuple[str, ...]) -> list[dict[str, str]]:
    """``n`` parallel sentences in each of ``langs`` (lang -> sentence), drawn as
    :func:`parallel_pairs` draws them: sentence k is pair k's, realised in more languages (the
    spec alone draws from the caption generator, so its English and German are pair k's)."""
    out = []
    for index in range(int(n)):
        corpus = CORPORA[index % len(CORPORA)]
        scene = world_scene(settings, image_rng(settings.seed, "parallel", split, index, f"scene.{corpus}"),
                            image_rng(settings.seed, "parallel", split, index, f"details.{corpus}"), corpus)
        _, texts = parallel_captions(scene, rng=image_rng(settings.seed, "parallel", split, index, "caption"),
                                     langs=tuple(langs), style=settings.caption_style)
        out.append(texts)
    return out


def parallel_text_path(out_root: str | Path, split: str, lang: str) -> Path:
    return Path(out_root) / "world" / "parallel" / f"{split}.{lang}"


def _caption_frame(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=RAW_CAPTION_COLUMNS)
    frame["caption_idx"] = frame["caption_idx"].astype("int64")
    return frame


def meaning_frame(rows: list[tuple]) -> pd.DataFrame:
    """The caption-meaning table: text columns as categories (a few distinct values each), so the
    file stays small."""
    frame = pd.DataFrame(rows, columns=MEANING_COLUMNS)
    for column in ("corpus", "split", "lang", "attribute", "value"):
        frame[column] = frame[column].astype("category")
    return frame.astype({"caption_idx": "int16", "mention": "int8"})


def write_png_atomic(path: Path, img: Image.Image) -> None:
    with atomic_path(path) as tmp:
        img.save(tmp, format="PNG")


def build_world(settings: Mapping[str, Any] | WorldSettings, out_root: str | Path) -> dict:
    """Generate the whole world under ``out_root`` (see the module docstring):
    PNGs, image lists, raw caption tables (m30k, m30k_task1, coco), what each caption says
    (``world/caption_meanings.parquet``, :mod:`pseudopairs.world.meaning`) and
    ``world/manifest.json`` (written last). Returns a summary (counts, seconds, bytes)."""
    cfg = settings if isinstance(settings, WorldSettings) else WorldSettings.from_dict(settings)
    out_root = Path(out_root)
    start = time.perf_counter()
    png_bytes = 0
    scenes: dict[str, dict[str, list[dict]]] = {}
    summary: dict[str, Any] = {"images": {}, "captions": {}}
    meanings: list[tuple] = []
    for corpus in CORPORA:
        if corpus not in cfg.images:
            continue
        image_dir = out_root / "world" / "images" / corpus
        image_dir.mkdir(parents=True, exist_ok=True)
        written: set[str] = set()
        scenes[corpus] = {}
        for split in SPLITS:
            n = cfg.images[corpus][split]
            image_rows, caption_rows, task1_rows, records = [], [], [], []
            for index in tqdm(range(n), desc=f"world {corpus}/{split}", unit="img", mininterval=2.0):
                item = generate_image(cfg, corpus, split, index)
                path = image_dir / f"{item.image_id}.png"
                write_png_atomic(path, render_scene(item.scene, image_size=cfg.image_size))
                png_bytes += path.stat().st_size
                written.add(path.name)
                image_rows.append((item.image_id, str(path)))
                for lang in LANG_ORDER:
                    for k, text in enumerate(item.captions.get(lang, [])):
                        caption_rows.append((corpus, split, item.image_id, lang, k, text))
                if item.task1 is not None:
                    for lang in TASK1_LANGS:
                        task1_rows.append((TASK1, split, item.image_id, lang, 0, item.task1[lang]))
                records.append({"image_id": item.image_id, "path": str(path), **item.scene.to_json()})
                meanings += meaning_rows(item, corpus, split)
            write_parquet_atomic(out_root / "images" / corpus / f"{split}.parquet",
                                 pd.DataFrame(image_rows, columns=IMAGE_COLUMNS))
            write_parquet_atomic(out_root / "captions" / "raw" / corpus / f"{split}.parquet",
                                 _caption_frame(caption_rows))
            summary["captions"][f"{corpus}/{split}"] = len(caption_rows)
            if task1_rows:
                write_parquet_atomic(out_root / "captions" / "raw" / TASK1 / f"{split}.parquet",
                                     _caption_frame(task1_rows))
                summary["captions"][f"{TASK1}/{split}"] = len(task1_rows)
            summary["images"][f"{corpus}/{split}"] = n
            scenes[corpus][split] = records
        # PNGs from an earlier, larger world would be mistaken for part of this one
        for stale in image_dir.glob("*.png"):
            if stale.name not in written:
                stale.unlink()
    manifest = {
        "seed": cfg.seed,
        "image_size": cfg.image_size,
        "captions_per_image": cfg.captions_per_image,
        "max_groups": cfg.max_groups,
        "max_count": cfg.max_count,
        "max_objects": cfg.max_objects,
        "languages": cfg.languages,
        "unrendered": cfg.unrendered,
        "visible_detail": cfg.visible_detail,
        "images": {c: dict(s) for c, s in cfg.images.items()},
        "corpus_kinds": {c: kinds_of(c) for c in cfg.images},
        "kind_weights": {c: dict(KIND_WEIGHTS[c]) for c in cfg.images},
        "background_weights": {c: {b: v.weights[c] for b, v in BACKGROUNDS.items()} for c in cfg.images},
        "scenes": scenes,
    }
    write_parquet_atomic(out_root / "world" / "caption_meanings.parquet", meaning_frame(meanings))
    # compact JSON: the manifest holds every scene (a few MB when indented)
    write_text_atomic(out_root / "world" / "manifest.json",
                      json.dumps(manifest, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
    summary.update(seconds=round(time.perf_counter() - start, 2), png_bytes=png_bytes,
                   manifest_bytes=(out_root / "world" / "manifest.json").stat().st_size)
    log.info("world written under %s: %s", out_root, summary)
    return summary


def write_parallel_text(settings: Mapping[str, Any] | WorldSettings, out_root: str | Path) -> dict:
    """Write the world's parallel text (:func:`parallel_pairs`) as plain files, one sentence per
    line: ``world/parallel/{split}.{en,de}`` under ``out_root``. Returns the pair counts."""
    cfg = settings if isinstance(settings, WorldSettings) else WorldSettings.from_dict(settings)
    if not cfg.parallel:
        raise ValueError("world.parallel: no parallel text asked for (e.g. {train: 20000, val: 500})")
    counts = {}
    for split, n in cfg.parallel.items():
        pairs = parallel_pairs(cfg, split)
        for k, lang in enumerate(("en", "de")):
            write_text_atomic(parallel_text_path(out_root, split, lang),
                              "".join(pair[k] + "\n" for pair in pairs))
        counts[split] = len(pairs)
    return counts


def _cli_world(args: argparse.Namespace) -> int:
    summary = build_world(args.settings, Path(args.out_root))
    print(json.dumps(summary, sort_keys=True))
    return 0


def _cli_world_parallel(args: argparse.Namespace) -> None:
    print(json.dumps(write_parallel_text(args.settings, Path(args.out_root))))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "world", _cli_world, description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands.add_json(p, "--settings", "the config's world section")
    p.add_argument("--out-root", required=True, help="results root (e.g. results)")
    p = commands.add_command(subparsers, "world-parallel", _cli_world_parallel)
    commands.add_json(p, "--settings", "the config's world section (with parallel)")
    p.add_argument("--out-root", required=True, help="results root (e.g. results)")
