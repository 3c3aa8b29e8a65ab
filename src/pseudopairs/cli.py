"""The ``pseudopairs`` command line: one sub-command per pipeline step.

Each step module owns its sub-commands through ``register_cli(subparsers)``; this file only
collects them, so modules stay independent. Rules in ``workflow/rules`` call these commands.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

# Modules that contribute sub-commands, in the order they appear in ``--help``.
STEP_MODULES = [
    "world",
    "download",
    "readers",
    "text",
    "vocab",
    "features",
    "training",
    "evaluation",
    "metrics",
    "translation",
    "mining",
    "hubness",
    "figures",
    "tables",
]


# Which module provides each sub-command, so that a job imports only its own step (a table job
# need not import torch: ~3 s less per light job). Kept equal to what the modules register by a
# test (tests/test_cli.py).
COMMANDS = {
    "world": "world", "world-parallel": "world",
    "download": "download", "extract": "download",
    "read-multi30k": "readers", "read-coco": "readers",
    "prepare-text": "text", "prepare-captions": "text", "train-truecaser": "text",
    "vocab": "vocab",
    "features": "features",
    "train": "training",
    "score-embeddings": "evaluation", "score-translation": "evaluation", "evaluate": "metrics",
    "train-mt": "translation", "convert-mt": "translation", "translate-captions": "translation",
    "mine": "mining", "pseudopair-captions": "mining",
    "pseudopair-stats": "hubness",
    "pseudopair-figure": "figures", "training-curves": "figures",
    "table": "tables", "tables-markdown": "tables",
}


def build_parser(modules: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with the sub-commands of ``modules`` (default: every step module)."""
    parser = argparse.ArgumentParser(prog="pseudopairs", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in STEP_MODULES if modules is None else modules:
        module = importlib.import_module(f"pseudopairs.{name}")
        module.register_cli(subparsers)
    return parser


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
    verbose = "--verbose" in argv[:1]
    if verbose:
        argv = argv[1:]
    parser = build_parser([COMMANDS[argv[0]]] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    return run_command(args, verbose=verbose)


if __name__ == "__main__":
    sys.exit(main())
