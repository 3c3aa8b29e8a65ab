"""The pipeline's commands, declared once: each command's stage, the module that implements it and
a one-line summary (:data:`COMMANDS`), and the options several commands share (``--settings`` /
``--spec`` JSON, ``--threads``, ``--device``).

A stage module declares its commands in its ``register_cli(subparsers)`` with these helpers; the
command line (:mod:`pseudopairs.cli`) is the one adapter that imports the stages, builds the
parser and runs a command. This module imports no stage and nothing heavy.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple


class Command(NamedTuple):
    stage: str
    module: str
    summary: str


# The pipeline's commands, by stage, in DAG order (tests check that each module registers
# exactly the commands listed for it).
COMMANDS: dict[str, Command] = {
    "world": Command("data", "pseudopairs.world.generate", "generate the offline demo world (images, captions)"),
    "world-parallel": Command("data", "pseudopairs.world.generate", "parallel En-De text of the demo world"),
    "download": Command("data", "pseudopairs.data.download", "fetch a URL resumably, verify its SHA-256"),
    "extract": Command("data", "pseudopairs.data.download", "unpack a zip/tar archive safely"),
    "read-multi30k": Command("data", "pseudopairs.data.readers", "Multi30K raw files -> caption table"),
    "read-coco": Command("data", "pseudopairs.data.readers", "Karpathy COCO JSON -> caption table"),
    "read-corpus": Command("data", "pseudopairs.data.generic", "an imagefolder or webdataset corpus -> caption tables + image lists"),
    "corpus-source": Command("data", "pseudopairs.data.generic", "a corpus' metadata file or shards, keyed by content (JSON)"),
    "image-manifest": Command("data", "pseudopairs.data.manifest", "the image files a split needs, keyed by content (JSON)"),
    "export-world-corpus": Command("data", "pseudopairs.world.export", "the demo world as an imagefolder or webdataset corpus"),
    "export-world-parallel": Command("data", "pseudopairs.world.export", "the demo world's parallel text in some of its languages"),
    "select-captions": Command("data", "pseudopairs.data.select", "a data set's subset of images / captions per image"),
    "prepare-text": Command("data", "pseudopairs.data.text_step", "Moses-prepare a text file"),
    "prepare-captions": Command("data", "pseudopairs.data.text_step", "Moses-prepare a caption table"),
    "train-truecaser": Command("data", "pseudopairs.data.text_step", "train a Moses truecaser"),
    "train-sentencepiece": Command("data", "pseudopairs.data.text_step",
                                   "train a language's SentencePiece tokenizer on its training captions"),
    "features": Command("features", "pseudopairs.features.extract", "ResNet average-pool image features"),
    "pretrain-features": Command("features", "pseudopairs.features.pretraining", "the demo world's ImageNet stand-in: a ResNet trained on world scenes"),
    "train-fasttext": Command("model", "pseudopairs.smalr.step", "FastText vectors of one language: trained on a run's training captions, or the published ones of their words (paper 002)"),
    "pretrain-hem": Command("model", "pseudopairs.smalr.step", "HEM's latent vocabulary and initial rows (paper 002 §3.1)"),
    "train": Command("model", "pseudopairs.model.stack_training", "train an experiment's models of one stack (one seed, or a stack's)"),
    "evaluate": Command("evaluation", "pseudopairs.evaluation.step", "test metrics of an experiment's models (one seed, or a stack's) -> metrics.json"),
    "evaluate-clc": Command("evaluation", "pseudopairs.evaluation.clc", "retrieval with Cross-Lingual Consistency (CLC-A, CLC-C) -> metrics.clc.json (paper 002 §3.4)"),
    "score-embeddings": Command("evaluation", "pseudopairs.evaluation.step", "retrieval metrics of stored embeddings"),
    "score-translation": Command("evaluation", "pseudopairs.evaluation.step", "translation retrieval of stored embeddings"),
    "train-mt": Command("translation", "pseudopairs.translation.train", "train an En->De Transformer (OpenNMT-py checkpoint)"),
    "convert-mt": Command("translation", "pseudopairs.translation.converters", "convert a translation model for CTranslate2 (OpenNMT-py, or --spec: any declared format)"),
    "translate-captions": Command("translation", "pseudopairs.translation.translate", "translate captions (table or text)"),
    "clc-parallel-text": Command("translation", "pseudopairs.smalr.clc_text", "parallel text in every CLC language for its translation models (paper 002 §3.4)"),
    "augment-captions": Command("translation", "pseudopairs.smalr.augment", "a language's human captions plus machine translations, every image >= N (paper 002's augmented training set)"),
    "score-mt": Command("translation", "pseudopairs.translation.score", "BLEU of a converted model on a test set (translate settings)"),
    "mine": Command("mining", "pseudopairs.mining.step", "mine a pseudopair set with a trained model"),
    "pseudopair-captions": Command("mining", "pseudopairs.mining.step", "filter pairs at a percentile -> captions"),
    "pseudopair-stats": Command("report", "pseudopairs.report.pseudopair_stats", "§7.2 statistics and plots of the pseudopairs"),
    "pseudopair-figure": Command("report", "pseudopairs.report.figures", "Figure 1: transferred captions"),
    "training-curves": Command("report", "pseudopairs.report.figures", "validation curves of the tables' models"),
    "table-figure": Command("report", "pseudopairs.report.figures", "a table as grouped bars (004's Figure 3)"),
    "parameters-figure": Command("report", "pseudopairs.report.parameters", "mean recall against parameters trained or kept at test time (002's Figure 3)"),
    "table": Command("report", "pseudopairs.report.tables", "one of the paper's tables (mean, sd, n; paper)"),
    "tables-markdown": Command("report", "pseudopairs.report.tables", "all tables as Markdown"),
    "docs": Command("report", "pseudopairs.report.docs", "the docs' generated parts (config/README.md's settings tables, the plan's job and model counts) checked or rewritten"),
    "method-check": Command("report", "pseudopairs.report.method_check", "the paper's effects in this run (Welch t)"),
    "rounds-summary": Command("report", "pseudopairs.report.rounds_summary", "iterated bootstrapping: per-round scores, §7.2 shares, stop rule, figure"),
    "report-page": Command("report", "pseudopairs.report.html", "an HTML page of tables (ours vs the paper, charts) and figures"),
    "export": Command("search", "pseudopairs.search.export", "a trained model as a self-contained folder (safetensors, config.json, text preparation, image network, model card)"),
    "index": Command("search", "pseudopairs.search.index", "embed a collection's images (and captions) with an exported model -> a search index (Parquet)"),
    "search": Command("search", "pseudopairs.search.query", "query a search index with a sentence in any of the model's languages, or an image"),
    "serve": Command("search", "pseudopairs.search.service", "a search service and page over an index (HTTP, 127.0.0.1)"),
    "rehearsal-data": Command("rehearsal", "pseudopairs.rehearsal.data", "the rehearsal's inputs at the paper's counts (config/rehearsal.yaml)"),
    "rehearsal-summary": Command("rehearsal", "pseudopairs.rehearsal.summary", "results/rehearsal.csv from the rules' benchmark files"),
}

STAGES = {
    "data": "raw data -> caption tables",
    "features": "images -> features",
    "model": "training",
    "evaluation": "exact retrieval metrics",
    "translation": "machine translation of captions",
    "mining": "mining and filtering pseudopairs",
    "report": "tables, statistics, figures",
    "search": "a trained model as multilingual image search: export, index, search, serve",
    "rehearsal": "the paper configuration at its size, offline (config/rehearsal.yaml)",
}


# --------------------------------------------------------------------------------------------
# Options several commands share
# --------------------------------------------------------------------------------------------


def add_command(subparsers, name: str, func, **parser_args) -> argparse.ArgumentParser:
    """The subcommand ``name`` (declared in :data:`COMMANDS`, whose summary is its help) that runs
    ``func(args)``; ``parser_args`` go to ``add_parser`` (description, formatter_class)."""
    parser = subparsers.add_parser(name, help=COMMANDS[name].summary, **parser_args)
    parser.set_defaults(func=func)
    return parser


def json_object(option: str):
    """An argparse ``type`` for a JSON object given inline or as ``@file.json``."""
    def parse(value: str) -> dict:
        from pseudopairs.core.io import parse_json_object

        try:
            return parse_json_object(value, option=option)
        except (ValueError, FileNotFoundError) as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = "JSON object"
    return parse


def add_json(parser: argparse.ArgumentParser, option: str, help: str, *, required: bool = True) -> None:
    """``--settings`` / ``--spec``: a JSON object inline or ``@file.json``."""
    parser.add_argument(option, type=json_object(option), required=required, default=None if required else {},
                        help=f"{help} (a JSON object, or @file.json)")


def add_threads(parser: argparse.ArgumentParser, *, default: int | None = None) -> None:
    parser.add_argument("--threads", type=int, default=default,
                        help="CPU threads (the cores the scheduler granted; does not change results)")


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when available), cpu, cuda or cuda:N")
