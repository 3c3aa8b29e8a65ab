"""The parts of the docs that the code determines, generated and checked, so they cannot drift:

* every settings section of ``config/README.md`` — a table generated from its settings class
  (key, what it must be, default, what it does; :meth:`pseudopairs.core.settings.Settings.describe`),
  between ``<!--settings:module:Class-->`` and ``<!--/settings-->``; the schema's ``x-settings``
  nodes name the classes, and each has exactly one such table;
* every job, model, stack, GPU and disk figure the docs quote from the plan
  (:mod:`pseudopairs.report.plan`), between ``<!--plan:NAME-->`` and ``<!--/plan-->``.

``pseudopairs docs`` checks both and lists every difference; ``--write`` rewrites them (``--no-plan``
skips the dry runs). ``tests/test_docs.py`` checks them. Prose around the markers is kept by hand.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import MISSING
from pathlib import Path

import yaml

from pseudopairs.report import plan
from pseudopairs.core.settings import SCHEMA_KEY, Settings, _default, _json_text

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
CONFIG_README = "config/README.md"
SETTINGS_MARKER = re.compile(r"<!--settings:(?P<target>[\w.]+:\w+)-->\n(?P<body>.*?)<!--/settings-->", re.S)


def settings_targets(schema_path: Path = SCHEMA) -> list[str]:
    """Every settings class the schema generates a section from (``x-settings: module:Class``),
    once each, in the schema's order; registries that generate sections of their own (the mining
    criteria's parameters) are documented by their own tables."""
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if SCHEMA_KEY in node:
                found.append(node[SCHEMA_KEY])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(schema_path.read_text(encoding="utf-8")))
    return [target for target in dict.fromkeys(found) if _is_settings(_load(target))]


def _load(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _is_settings(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, Settings)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_table(target: str) -> str:
    """The Markdown table of one settings class: each setting's key, what it must be, its default
    (``required`` when it has none) and its doc."""
    cls = _load(target)
    rows = ["| key | value | default | what |", "|---|---|---|---|"]
    defaults = {f.name: _default(f) for f in cls.__dataclass_fields__.values()}
    for name, what, doc in cls.describe():
        default = defaults[name]
        shown = "required" if default is MISSING else f"`{_json_text(default)}`"
        rows.append(f"| `{name}` | {_cell(what)} | {shown} | {_cell(doc)} |")
    return "\n".join(rows) + "\n"


def settings_errors(text: str, *, source: str, targets: list[str]) -> list[str]:
    """Each settings table of ``text`` that is not its class's, each class of ``targets`` without
    exactly one table, each table of no settings class of the schema."""
    messages, seen = [], []
    for match in SETTINGS_MARKER.finditer(text):
        target, line = match.group("target"), text.count("\n", 0, match.start()) + 1
        seen.append(target)
        if target not in targets:
            messages.append(f"{source}:{line}: {target} is no settings section of the schema")
        elif match.group("body") != settings_table(target):
            messages.append(f"{source}:{line}: the table of {target} differs from its settings class")
    for target in targets:
        if seen.count(target) != 1:
            messages.append(f"{source}: {target} has {seen.count(target)} settings tables (one wanted)")
    return messages


def write_settings(text: str, *, targets: list[str]) -> str:
    """``text`` with every settings table regenerated from its class."""
    def replace(match: re.Match) -> str:
        target = match.group("target")
        body = settings_table(target) if target in targets else match.group("body")
        return f"<!--settings:{target}-->\n{body}<!--/settings-->"

    return SETTINGS_MARKER.sub(replace, text)


def _cli_docs(args) -> None:
    import tempfile

    from pseudopairs.core.io import write_text_atomic

    targets = settings_targets()
    facts: dict[str, int] = {}
    if args.plan:
        with tempfile.TemporaryDirectory() as workdir:
            facts = plan.all_facts(REPO, workdir)
    problems = []
    for relative in sorted(set(plan.DOCS) | {CONFIG_README}):
        path = REPO / relative
        text = original = path.read_text(encoding="utf-8")
        if args.write:
            if relative == CONFIG_README:
                text = write_settings(text, targets=targets)
            if facts:
                text = plan.write_markers(text, facts)
            if text != original:
                write_text_atomic(path, text)
                print(f"rewrote the generated parts of {relative}")
        else:
            if relative == CONFIG_README:
                problems += settings_errors(text, source=relative, targets=targets)
            if facts:
                problems += plan.marker_errors(text, facts, source=relative)
    if problems:
        raise SystemExit("\n".join(problems) + "\n(run `pseudopairs docs --write`)")


def register_cli(subparsers) -> None:
    from pseudopairs import commands

    p = commands.add_command(subparsers, "docs", _cli_docs)
    p.add_argument("--write", action="store_true",
                   help="rewrite the generated parts (else check them and list the differences)")
    p.add_argument("--no-plan", dest="plan", action="store_false",
                   help="only the settings tables (no dry runs)")
