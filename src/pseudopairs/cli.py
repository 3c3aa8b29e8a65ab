"""pseudopairs — the steps of the pipeline that reproduces *Bootstrapping Disjoint Datasets for
Multilingual Multimodal Representation Learning* (Kádár et al.). Snakemake runs them (see
README.md); each can also be run by hand: ``pseudopairs COMMAND --help``.

Every command is declared once in :data:`COMMANDS` (its stage, the module that implements it and
a one-line summary), so ``pseudopairs --help`` lists them without importing any step, and a job
imports only its own step's module (a table job never imports torch). The options several steps
share (``--settings``/``--spec`` JSON, ``--threads``, ``--device``) are declared once here.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Any, NamedTuple


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
    "image-manifest": Command("data", "pseudopairs.data.manifest", "sizes and times of the image files a split needs (JSON)"),
    "select-captions": Command("data", "pseudopairs.data.select", "a data set's subset of images / captions per image"),
    "prepare-text": Command("data", "pseudopairs.data.text", "Moses-prepare a text file"),
    "prepare-captions": Command("data", "pseudopairs.data.text", "Moses-prepare a caption table"),
    "train-truecaser": Command("data", "pseudopairs.data.text", "train a Moses truecaser"),
    "features": Command("features", "pseudopairs.features.extract", "ResNet average-pool image features"),
    "pretrain-features": Command("features", "pseudopairs.features.pretraining", "the demo world's ImageNet stand-in: a ResNet trained on world scenes"),
    "train": Command("model", "pseudopairs.model.training", "train a ranking model (one experiment, one seed)"),
    "train-stack": Command("model", "pseudopairs.model.stack_training", "train the seeds of one seed block together (one experiment)"),
    "evaluate": Command("evaluation", "pseudopairs.evaluation.step", "test metrics of a model -> metrics.json"),
    "evaluate-stack": Command("evaluation", "pseudopairs.evaluation.step", "test metrics of each model of a stack job"),
    "score-embeddings": Command("evaluation", "pseudopairs.evaluation.step", "retrieval metrics of stored embeddings"),
    "score-translation": Command("evaluation", "pseudopairs.evaluation.step", "translation retrieval of stored embeddings"),
    "train-mt": Command("translation", "pseudopairs.translation.train", "train an En->De Transformer (OpenNMT-py checkpoint)"),
    "convert-mt": Command("translation", "pseudopairs.translation.convert", "convert an OpenNMT-py model for CTranslate2"),
    "translate-captions": Command("translation", "pseudopairs.translation.translate", "translate captions (table or text)"),
    "score-mt": Command("translation", "pseudopairs.translation.score", "BLEU of a converted model on a test set (translate settings)"),
    "mine": Command("pseudopairs", "pseudopairs.mining.step", "mine a pseudopair set with a trained model"),
    "pseudopair-captions": Command("pseudopairs", "pseudopairs.mining.step", "filter pairs at a percentile -> captions"),
    "pseudopair-stats": Command("report", "pseudopairs.report.statistics", "§7.2 statistics and plots of the pseudopairs"),
    "pseudopair-figure": Command("report", "pseudopairs.report.figures", "Figure 1: transferred captions"),
    "training-curves": Command("report", "pseudopairs.report.figures", "validation curves of the tables' models"),
    "table-figure": Command("report", "pseudopairs.report.figures", "a table as grouped bars (004's Figure 3)"),
    "table": Command("report", "pseudopairs.report.tables", "one of the paper's tables (mean, sd, n; paper)"),
    "tables-markdown": Command("report", "pseudopairs.report.tables", "all tables as Markdown"),
    "method-check": Command("report", "pseudopairs.report.method_check", "the paper's effects in this run (Welch t)"),
    "rounds-summary": Command("report", "pseudopairs.report.rounds", "iterated bootstrapping: per-round scores, §7.2 shares, stop rule, figure"),
    "report-page": Command("report", "pseudopairs.report.html", "an HTML page of tables (ours vs the paper, charts) and figures"),
}

STAGES = {
    "data": "raw data -> caption tables",
    "features": "images -> features",
    "model": "training",
    "evaluation": "exact retrieval metrics",
    "translation": "machine translation of captions",
    "pseudopairs": "mining and filtering",
    "report": "tables, statistics, figures",
}


def _version() -> str:
    from pseudopairs import __version__

    return __version__


def _overview() -> str:
    lines = ["commands, by stage:"]
    for stage, what in STAGES.items():
        lines.append(f"  {stage} ({what}):")
        for name, command in COMMANDS.items():
            if command.stage == stage:
                lines.append(f"    {name:<20} {command.summary}")
    return "\n".join(lines)


def build_parser(commands: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser: every command name is known (for the listing and error messages), and the
    full options of ``commands`` (default: all) come from their modules' ``register_cli``."""
    parser = argparse.ArgumentParser(
        prog="pseudopairs", description=__doc__.split("\n\n")[0], epilog=_overview(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pseudopairs {_version()}")
    parser.add_argument("--verbose", action="store_true",
                        help="show the traceback of a failure (also PSEUDOPAIRS_VERBOSE=1)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = list(COMMANDS) if commands is None else commands
    modules = list(dict.fromkeys(COMMANDS[c].module for c in wanted))
    registered: set[str] = set()
    for module in modules:
        before = set(subparsers.choices)
        importlib.import_module(module).register_cli(subparsers)
        registered |= set(subparsers.choices) - before
    for name in COMMANDS:  # listed (and valid for error messages) without importing their module
        if name not in subparsers.choices:
            subparsers.add_parser(name, help=COMMANDS[name].summary)
    return parser


def registered_commands(module: str) -> set[str]:
    """The commands ``module``'s ``register_cli`` declares (for the tests)."""
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    importlib.import_module(module).register_cli(subparsers)
    return set(subparsers.choices)


# --------------------------------------------------------------------------------------------
# Options several steps share
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
        from pseudopairs.io import parse_json_object

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


# --------------------------------------------------------------------------------------------
# Running a command
# --------------------------------------------------------------------------------------------


def describe_error(err: BaseException) -> str:
    """One line for a failed step: the message (which names the file) for the errors the steps
    raise on purpose, the library's error type otherwise."""
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}: " if err.filename else ""
        text = f"{where}{err.strerror}"
    elif isinstance(err, (ValueError, RuntimeError, KeyError)) and str(err):
        text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    else:
        text = f"{type(err).__name__}: {err} (rerun with --verbose for the traceback)"
    return " ".join(text.split())


def run_command(args: argparse.Namespace, *, verbose: bool) -> int:
    """Run a parsed command: its exit code, or 1 and one line on stderr when it fails (with
    ``verbose``, or PSEUDOPAIRS_VERBOSE=1 in the environment, the traceback instead)."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        raise
    except Exception as err:  # noqa: BLE001 — every failure becomes one line naming its cause
        if verbose or os.environ.get("PSEUDOPAIRS_VERBOSE") == "1":
            raise
        print(f"pseudopairs {args.command}: error: {describe_error(err)}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([command] if command in COMMANDS else [])
    args: Any = parser.parse_args(argv)
    return run_command(args, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
