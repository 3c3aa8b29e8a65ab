"""The command line: every sub-command is registered by the module COMMANDS names, so a job that
imports only its own step module (no torch for light steps) sees the same command."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from pseudopairs import cli


def registered(module: str) -> set[str]:
    parser = cli.build_parser([module])
    (action,) = [a for a in parser._actions if a.dest == "command"]
    return set(action.choices)


def test_commands_map_each_subcommand_to_the_module_that_registers_it():
    by_module = {module: registered(module) for module in cli.STEP_MODULES}
    from_modules = {command: module for module, commands in by_module.items() for command in commands}
    assert from_modules == cli.COMMANDS


def test_a_light_step_does_not_import_torch():
    code = ("import sys; from pseudopairs import cli; cli.build_parser([cli.COMMANDS['table']]); "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env={"PYTHONPATH": str(REPO / "src"), "PATH": ""})
    assert result.stdout.strip() == "False", result.stderr


def test_unknown_command_lists_every_command(capsys):
    try:
        cli.main(["no-such-step"])
    except SystemExit as exit:
        assert exit.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-step'" in err and "pseudopair-captions" in err and "train-mt" in err
