"""The ``pseudopairs`` command line: one sub-command per pipeline step.

Each step module owns its sub-commands through ``register_cli(subparsers)``; this file only
collects them, so modules stay independent. Rules in ``workflow/rules`` call these commands.
"""

from __future__ import annotations

import argparse
import importlib
import logging
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


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser([COMMANDS[argv[0]]] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        # Clear, one-line errors for bad input; the traceback adds nothing for a user.
        print(f"pseudopairs {args.command}: error: {err}", file=sys.stderr)
        return 1
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
