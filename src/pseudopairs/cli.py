"""pseudopairs — the steps of the pipeline that reproduces *Bootstrapping Disjoint Datasets for
Multilingual Multimodal Representation Learning* (Kádár et al.). Snakemake runs them (see
README.md); each can also be run by hand: ``pseudopairs COMMAND --help``.

Every command is declared once in :data:`pseudopairs.commands.COMMANDS` (its stage, the module
that implements it and a one-line summary), so ``pseudopairs --help`` lists them without importing
any step, and a job imports only its own step's module (a table job never imports torch). This
module is the one adapter between the command line and the stages: it imports each command's
module and calls its ``register_cli``; no stage imports it (the options several steps share are
declared in :mod:`pseudopairs.commands`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from typing import Any, Iterable

from pseudopairs.commands import COMMANDS, STAGES


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
        text = (f"{type(err).__name__}: {err} (for the traceback: rerun the command with --verbose, or "
                "the workflow with PSEUDOPAIRS_VERBOSE=1 in its environment)")
    return " ".join(text.split())


ERROR_LINE = re.compile(r"^pseudopairs [\w-]+: error: ")


def error_line(log: str | os.PathLike) -> str | None:
    """The last one-line error a step wrote to its log (:func:`run_command`), or None (no log,
    or it failed otherwise: a traceback, a killed job)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as handle:
            lines = [line.rstrip("\n") for line in handle if ERROR_LINE.match(line)]
    except OSError:
        return None
    return lines[-1] if lines else None


def failed_job_lines(jobs: Iterable[tuple[str, str, Iterable[str]]]) -> list[str]:
    """For the jobs of a failed run, ``(rule, wildcards, logs)`` each: one line per job whose log
    holds a step's error line -- ``rule NAME (WILDCARDS): pseudopairs …: error: …`` -- so the line
    naming the file is on the console, not only in the log."""
    out = []
    for rule, wildcards, logs in jobs:
        for log in logs:
            line = error_line(log)
            if line:
                out.append(f"rule {rule}" + (f" ({wildcards})" if wildcards else "") + f": {line} [log: {log}]")
    return out


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
    # --verbose anywhere on the line (the error line's hint: appended to a command as it was run)
    verbose = "--verbose" in argv
    argv = [a for a in argv if a != "--verbose"]
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([command] if command in COMMANDS else [])
    args: Any = parser.parse_args(argv)
    return run_command(args, verbose=verbose)


if __name__ == "__main__":
    sys.exit(main())
