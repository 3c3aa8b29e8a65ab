"""The shape of the code: stage subpackages, small modules and functions, no import
cycle, one registry per extension point that everything reads, one settings mechanism that the
schema agrees with, and a workflow usable as a Snakemake module from another directory."""

from __future__ import annotations

import ast
import copy
import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO, snakemake_exe
from pseudopairs.workflow.config import check_config, load_config

SRC = REPO / "src" / "pseudopairs"
# the packages beside the stages: the ground they stand on, and the workflow that plans them
SHARED_PACKAGES = ("core", "workflow")
STAGES = ("data", "features", "model", "evaluation", "mining", "translation", "search", "report")


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def test_the_package_has_a_subpackage_per_stage():
    for stage in STAGES:
        assert (SRC / stage / "__init__.py").is_file(), stage


def test_no_module_over_600_lines_and_no_function_over_120():
    long_modules = {name: n for name, path in _modules().items()
                    if (n := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long_modules
    long_functions = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > 120:
                    long_functions.append(f"{name}.{node.name}")
    assert not long_functions


def import_graph() -> dict[str, set[str]]:
    """Edges module -> module of every import of the package (module level or inside functions)."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges[name] |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    edges[name].add(target if target in modules else base)
        edges[name] = {t for t in edges[name] if t in modules and t != name}
    return edges


def test_no_import_cycle():
    edges = import_graph()
    state: dict[str, int] = {}
    path: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
    assert not cycles, [" -> ".join(c) for c in cycles]
    # a former cycle: mining and its statistics no longer import each other
    assert "pseudopairs.mining.step" not in edges["pseudopairs.mining.statistics"]


def package_graph() -> dict[str, set[str]]:
    """Edges package -> package of the import graph (a subpackage of pseudopairs, or a shared
    top-level module as a node of its own)."""
    def package(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    out: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        for target in targets:
            if package(module) != package(target):
                out.setdefault(package(module), set()).add(package(target))
    return out


def test_packages_import_each_other_in_one_direction():
    """No two packages import each other, however indirectly: e.g. pseudopairs.smalr is paper
    002's library, which the model and evaluation stages import, and it imports neither (its
    steps that need a trained model live in those stages)."""
    graph = package_graph()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    both_ways = sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets
                        if reaches(b, a)})
    assert not both_ways
    assert "smalr" in graph["model"] and not {"model", "evaluation"} & graph.get("smalr", set())


def test_no_stage_imports_a_later_stage():
    """Stages import earlier stages only (data, features, model, evaluation, mining, search, report): e.g.
    training's validation ranks with pseudopairs.similarity's exact engine, not the evaluation
    stage's module."""
    order = ["data", "features", "model", "evaluation", "mining", "search", "report"]
    backwards = []
    for module, targets in import_graph().items():
        stage = module.split(".")[1] if module.count(".") else None
        for target in targets:
            later = target.split(".")[1] if target.count(".") else None
            if stage in order and later in order and order.index(later) > order.index(stage):
                backwards.append(f"{module} -> {target}")
    assert not backwards


def _stage(module: str) -> str | None:
    """The stage package of a module (``pseudopairs.model.contract`` -> ``model``), None for the
    shared top-level modules (``pseudopairs.data.experiments``, ``pseudopairs.core.layout`` …)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in SHARED_PACKAGES:
        return None
    return parts[1] if len(parts) > 2 or (SRC / parts[-1]).is_dir() else None


def _reached(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through other modules."""
    seen, todo = set(), [start]
    while todo:
        for target in edges[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_each_stage_owns_its_contract_and_none_imports_a_later_stage():
    """Each stage's contract (its specs, inputs and ``check``) is one module of its package,
    listed once in DAG order in ``pseudopairs.workflow.config.CONTRACTS``; what a contract imports, also
    through shared modules such as ``pseudopairs.data.experiments``, belongs to its own or an earlier
    stage (the evaluation contract never loads the report stage, the data contract no other
    stage)."""
    from pseudopairs.workflow.config import CONTRACTS

    edges = import_graph()
    on_disk = sorted(m for m in edges if m.endswith(".contract"))
    assert sorted(CONTRACTS) == on_disk, "a stage's contract module is missing from config.CONTRACTS"
    order = [_stage(name) for name in CONTRACTS]
    assert len(set(order)) == len(order)
    backwards = []
    for i, name in enumerate(CONTRACTS):
        assert callable(importlib.import_module(name).check), name
        later = set(order[i + 1:])
        backwards += [f"{name} -> {m}" for m in sorted(_reached(edges, name)) if _stage(m) in later]
    assert not backwards


def test_config_runs_the_contracts_and_imports_no_stage():
    """``pseudopairs.workflow.config`` keeps layering, schema validation and the orchestration of the
    stages' checks: it imports no stage module, at module level or inside a function (the
    contracts are loaded by name from ``CONTRACTS``), and a stage's check runs through it."""
    edges = import_graph()
    assert not [m for m in edges["pseudopairs.workflow.config"] if _stage(m)], edges["pseudopairs.workflow.config"]
    tree = ast.parse((SRC / "workflow" / "config.py").read_text(encoding="utf-8"))
    in_functions = [f"{fn.name}:{node.lineno}" for fn in ast.walk(tree)
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not in_functions
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["evaluation"]["langs"] = ["en", "ja"]    # the evaluation contract's own check
    with pytest.raises(ValueError, match="config key 'evaluation.langs.1': no data set of corpus 'm30k' "
                                         "has language 'ja'"):
        check_config(config)


def test_only_the_command_line_imports_the_command_line():
    """The command line is one adapter that imports the stages: no other module imports
    pseudopairs.cli (module level or inside functions), except ``__main__``, its entry point for
    ``python -m pseudopairs``. A stage declares its commands with pseudopairs.commands, which
    imports no stage."""
    edges = import_graph()
    offenders = sorted(m for m, targets in edges.items() if "pseudopairs.cli" in targets)
    assert offenders == ["pseudopairs.__main__"], f"modules that import pseudopairs.cli: {offenders}"
    assert edges["pseudopairs.commands"] <= {"pseudopairs.core.io"}, edges["pseudopairs.commands"]


def test_the_public_names_other_checks_call_are_importable():
    from pseudopairs.evaluation import retrieval_metrics
    from pseudopairs.mining import nearest_neighbours
    from pseudopairs.model import contrastive_loss

    assert callable(retrieval_metrics) and callable(nearest_neighbours) and callable(contrastive_loss)


# --------------------------------------------------------------------------------------------
# Registries
# --------------------------------------------------------------------------------------------


def test_a_throwaway_criterion_through_the_registry_alone(tmp_path):
    """A new criterion = one registration (here in the test): the search, its reference, the
    config checks (name and parameters), the statistics spec and the docs table all take it."""
    from pseudopairs.mining.contract import mining_job
    from pseudopairs.report.contract import pseudopair_stats_spec
    from pseudopairs.mining import criteria, nearest_neighbours, nearest_neighbours_reference
    from pseudopairs.mining.search import argmax_reference, best_per_line

    def search(ctx, params):  # the database row farthest from each query, by brute force in blocks
        lines = np.repeat(np.arange(ctx.n), ctx.m)
        others = np.tile(np.arange(ctx.m), ctx.n)
        best, exact = best_per_line(lines, others, -params["weight"] * ctx.cos_of(lines, others), ctx.n)
        return best.astype(np.int64), exact.astype(np.float32)

    criteria.register(criteria.Criterion(
        name="farthest", summary="the least similar caption (a test criterion)",
        definition="argmax_d −w·cos(q, d)", search=search,
        reference=lambda cos, params: argmax_reference(-params["weight"] * cos),
        params=(criteria.param("weight", 1.0, kind=float, low=0.0, low_open=True, what="a positive number"),)))
    try:
        rng = np.random.default_rng(0)
        queries, database = rng.standard_normal((9, 5)), rng.standard_normal((7, 5))
        got = nearest_neighbours(queries, database, criterion="farthest", weight=2.0)
        want = nearest_neighbours_reference(queries, database, criterion="farthest", weight=2.0)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert (got[0] == (queries / np.linalg.norm(queries, axis=1, keepdims=True)
                           @ (database / np.linalg.norm(database, axis=1, keepdims=True)).T).argmin(axis=1)).all()
        with pytest.raises(ValueError, match="weight must be a positive number, got 0"):
            nearest_neighbours(queries, database, criterion="farthest", weight=0)

        config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
        config["pseudopairs"]["de_coco.farthest"] = {"source": "de_coco", "queries": "coco.en",
                                                      "database": "m30k.de",
                                                      "mining": {"criterion": "farthest", "weight": 3.0}}
        check_config(copy.deepcopy(config))
        assert pseudopair_stats_spec(config)["sets"]["de_coco.farthest"]["criterion"] == "farthest"
        assert mining_job(config, "de_coco.farthest", 1).params == {"weight": 3.0}
        bad = copy.deepcopy(config)
        bad["pseudopairs"]["de_coco.farthest"]["mining"]["k"] = 3
        with pytest.raises(ValueError, match="mining.k': k is only used by the criteria"):
            check_config(bad)
        assert "| `farthest` | `weight` = 1.0 (a positive number) | argmax_d −w·cos(q, d) |" in criteria.docs_table()
    finally:
        criteria.CRITERIA.unregister("farthest")
    assert "farthest" not in criteria.CRITERIA


def test_the_docs_list_every_registered_criterion():
    from pseudopairs.mining import criteria

    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for line in criteria.docs_table().splitlines()[2:]:
        assert line in text, f"docs/architecture.md lacks the criteria table row: {line}"


def test_similarity_functions_and_objectives_are_registries_the_settings_read():
    from pseudopairs.model.objectives import OBJECTIVES
    from pseudopairs.model.settings import TrainingSettings
    from pseudopairs.similarity.functions import SIMILARITIES

    assert "cosine" in SIMILARITIES and "sampled" in OBJECTIVES
    defaults = TrainingSettings.defaults()
    assert defaults["similarity"] in SIMILARITIES and defaults["objective"] in OBJECTIVES


# One settings mechanism, from which the schema's settings sections are generated: see
# tests/test_settings_schema.py (every section, field by field).


# --------------------------------------------------------------------------------------------
# The workflow as a Snakemake module
# --------------------------------------------------------------------------------------------


def test_the_workflow_runs_as_a_module_of_another_workflow(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "small.yaml").write_text(yaml.safe_dump({"world": {"parallel": {"train": 20, "val": 5}}}))
    (host / "Snakefile").write_text(f'''configfile: "{REPO / 'config' / 'experiments.yaml'}"
configfile: "{REPO / 'config' / 'config.yaml'}"
configfile: "small.yaml"


module pseudopairs:
    snakefile:
        "{REPO / 'workflow' / 'Snakefile'}"
    config:
        config


use rule * from pseudopairs as pp_*
''')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    dry = subprocess.run([snakemake_exe(), "-n", "--cores", "1", "results/table5.csv"], cwd=host,
                         capture_output=True, text=True, timeout=300, env=env)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "pp_train" in dry.stdout and "pp_mine" in dry.stdout
    run = subprocess.run([snakemake_exe(), "--cores", "1", "results/world/parallel/val.de"], cwd=host,
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert len((host / "results" / "world" / "parallel" / "val.de").read_text().splitlines()) == 5


def test_the_top_level_is_the_api_the_stages_and_two_shared_packages():
    """The package's face: the public API and the command line at the top, the stages,
    ``core`` (what every stage stands on: it imports no stage and no workflow module) and
    ``workflow`` (what the Snakefile plans with: of the stages only the report (plans, rounds) and
    the search stage (the export reads the run's configuration) import it)."""
    top = sorted(p.stem for p in SRC.glob("*.py"))
    assert top == ["__init__", "__main__", "cli", "commands"], top
    edges = import_graph()
    core_out = sorted({t for m, ts in edges.items() if m.startswith("pseudopairs.core.")
                       for t in ts if not t.startswith("pseudopairs.core")})
    assert core_out == [], core_out
    into_workflow = sorted({m.split(".")[1] for m, ts in edges.items()
                            if not m.startswith("pseudopairs.workflow") and m.count(".") >= 1
                            and any(t.startswith("pseudopairs.workflow.") for t in ts)})
    assert into_workflow == ["report", "search"], into_workflow
