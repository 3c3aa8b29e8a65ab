"""Cross-Lingual Consistency's parallel text (paper 002 §3.4): ``clc-parallel-text`` writes the
sentences every CLC translation model trains on, line k of every language the same sentence —
the demo world's parallel sentences realised in each language, or the translation portion's
aligned captions (Multi30K task 1)."""

from __future__ import annotations

import argparse
import json

from pseudopairs import commands
from pseudopairs.core.io import read_captions, write_text_atomic

KEYS = ["image_id", "caption_idx"]


def parallel_lines(spec: dict) -> dict[str, dict[str, list[str]]]:
    """split -> lang -> sentences, line k of every language the same sentence."""
    langs = tuple(spec["langs"])
    if spec["source"] == "world":
        from pseudopairs.world.generate import parallel_sentences
        from pseudopairs.world.settings import WorldSettings
        world = WorldSettings.from_dict(spec["world"])
        return {split: {lang: [s[lang] for s in sentences] for lang in langs}
                for split, n in spec["sizes"].items()
                for sentences in [parallel_sentences(world, split, n, langs)]}
    out = {}
    for split, path in spec["captions"].items():
        frame = read_captions(path)
        wide = None
        for lang in langs:
            rows = frame[frame["lang"] == lang][KEYS + ["raw"]].rename(columns={"raw": lang})
            if rows.empty:
                raise ValueError(f"{path}: no {lang!r} captions for the CLC parallel text")
            wide = rows if wide is None else wide.merge(rows, on=KEYS, how="inner")
        wide = wide.sort_values(KEYS, kind="stable")
        out[split] = {lang: wide[lang].tolist() for lang in langs}
    return out


def write_parallel_text(spec: dict, outputs: dict[str, str]) -> dict[str, int]:
    """Write each ``{split}_{lang}`` file of ``outputs`` (one sentence a line, atomically)."""
    lines = parallel_lines(spec)
    for key, path in outputs.items():
        split, lang = key.rsplit("_", 1)
        write_text_atomic(path, "".join(line.replace("\n", " ") + "\n" for line in lines[split][lang]))
    return {split: len(next(iter(by_lang.values()))) for split, by_lang in lines.items()}




def _cli_parallel_text(args: argparse.Namespace) -> None:
    print(json.dumps(write_parallel_text(args.spec, args.outputs)))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "clc-parallel-text", _cli_parallel_text)
    commands.add_json(p, "--spec", "smalr.clc_contract.parallel_spec")
    commands.add_json(p, "--outputs", "{split}_{lang} -> file (smalr.clc_contract.parallel_outputs)")
