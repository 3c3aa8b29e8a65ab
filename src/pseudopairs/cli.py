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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pseudopairs", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in STEP_MODULES:
        module = importlib.import_module(f"pseudopairs.{name}")
        module.register_cli(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = build_parser()
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
