"""The command line: every command is declared once (stage, module, summary) in
pseudopairs.commands.COMMANDS; a job imports only its own step's module; ``pseudopairs --help``
lists the steps by stage without importing any of them; failures are one line."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import REPO
from pseudopairs import __version__, cli

ENV = {"PYTHONPATH": str(REPO / "src"), "PATH": ""}


def test_commands_map_each_subcommand_to_the_module_that_registers_it():
    modules = {command.module for command in cli.COMMANDS.values()}
    from_modules = {name: module for module in modules for name in cli.registered_commands(module)}
    assert from_modules == {name: command.module for name, command in cli.COMMANDS.items()}
    assert {command.stage for command in cli.COMMANDS.values()} == set(cli.STAGES)


def test_a_light_step_does_not_import_torch():
    code = ("import sys; from pseudopairs import cli; cli.build_parser(['table']); "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env=ENV)
    assert result.stdout.strip() == "False", result.stderr


def test_help_lists_the_steps_by_stage_quickly_without_importing_them():
    code = ("import sys, time; t = time.perf_counter(); from pseudopairs import cli\n"
            "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('SECONDS', time.perf_counter() - t, 'torch' in sys.modules, 'pandas' in sys.modules)")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=ENV)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "register_cli" not in out and "Bootstrapping Disjoint Datasets" in out
    assert "features (images -> features):" in out and "  report (tables, statistics, figures):" in out
    for name, command in cli.COMMANDS.items():
        assert f"{name:<20} {command.summary}" in out
    seconds, torch_loaded, pandas_loaded = out.split("SECONDS")[1].split()
    assert (torch_loaded, pandas_loaded) == ("False", "False")
    print(f"pseudopairs --help: {float(seconds):.2f} s in-process, "
          f"{time.perf_counter() - started:.2f} s with interpreter start-up")


def test_version(capsys):
    try:
        cli.main(["--version"])
    except SystemExit as exit:
        assert exit.code == 0
    assert capsys.readouterr().out.strip() == f"pseudopairs {__version__}"


def test_unknown_command_lists_every_command(capsys):
    try:
        cli.main(["no-such-step"])
    except SystemExit as exit:
        assert exit.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-step'" in err and "pseudopair-captions" in err and "train-mt" in err


def test_bad_json_option_names_the_option(capsys):
    try:
        cli.main(["table", "--name", "t", "--spec", "{not json", "--output", "x.csv"])
    except SystemExit as exit:
        assert exit.code == 2
    assert "argument --spec: --spec: not valid JSON" in capsys.readouterr().err
