"""The documentation keeps its promises: every repository path it names exists, README.md fits on
a few screens and shows the test command CI runs, and its "Use as a module" recipe plans the
pipeline's jobs from another directory with nothing but the user's config file."""

from __future__ import annotations

import importlib
import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, snakemake_exe

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "config" / "README.md",
        REPO / "profiles" / "README.md"]
# Top-level folders of the repository whose paths the docs name; results/ holds outputs, not files
# of the repository, and is not checked.
PREFIXES = ("src/", "workflow/", "config/", "docs/", "benchmarks/", "tests/", "profiles/", "envs/")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]*(\.[a-z]+)?$")   # NAME.py, DIR: a template, not a path


def _expand_braces(token: str) -> list[str]:
    """``profiles/{local,slurm}/`` → both paths (a ``{name}`` without a comma stays a wildcard)."""
    parts = re.split(r"(\{[^{}]*,[^{}]*\})", token)
    choices = [p[1:-1].split(",") if p.startswith("{") and "," in p else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def named_paths(doc: Path) -> set[str]:
    """Repository paths a document names: tokens of code spans and code blocks that start with a
    repository folder, and relative link targets (resolved against the document's folder)."""
    text = doc.read_text(encoding="utf-8")
    tokens = []
    for block in FENCE.findall(text):
        tokens += block.split()
    for span in CODE_SPAN.findall(FENCE.sub("", text)):
        tokens += span.split()
    paths = set()
    for token in tokens:
        token = token.strip("\"'(),;:.").split("#")[0].split("=")[-1]
        if token.startswith(PREFIXES):
            paths.update(t for t in _expand_braces(token) if not PLACEHOLDER.search(t.rstrip("/")))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        paths.add(os.path.relpath(path, REPO))
    return {p for p in paths if p and not p.startswith("results/")}


def _exists(path: str) -> bool:
    if "{" in path:                        # a wildcard: {experiment}, {seed}
        path = re.sub(r"\{[^}]*\}", "*", path)
    if any(c in path for c in "*?["):
        return any(REPO.glob(path.rstrip("/")))
    return (REPO / path).exists()


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_repository_path_the_docs_name_exists(doc):
    paths = named_paths(doc)
    missing = sorted(p for p in paths - CREATED if not _exists(p))
    assert not missing, f"{doc.relative_to(REPO)} names paths that do not exist: {missing}"


# Paths that documented commands create: named as what a command writes, not as shipped files.
CREATED = {"envs/steps.conda-lock.yml"}   # profiles/README.md: written by its `conda-lock lock`


def named_modules(doc: Path) -> set[str]:
    """Dotted names of the package a document's code spans name (``pseudopairs.core.io.read_captions``);
    file names that start with the package's name (``pseudopairs.sif``) are not module names."""
    spans = CODE_SPAN.findall(FENCE.sub("", doc.read_text(encoding="utf-8")))
    names = {m for span in spans for m in re.findall(r"(?<![\w/.-])pseudopairs(?:\.\w+)+", span)}
    return {n for n in names if n.rsplit(".", 1)[1] not in {"sif", "yaml", "smk", "json", "md", "py"}}


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_module_and_object_the_docs_name_exists(doc):
    missing = sorted(n for n in named_modules(doc) if not _resolves(n))
    assert not missing, f"{doc.relative_to(REPO)} names modules or objects that do not exist: {missing}"


def test_the_path_finder_sees_spans_blocks_links_and_braces(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("`src/pseudopairs/core/io.py`, `--configfile config/paper.yaml site.yaml`, "
                   "`profiles/{local,slurm}/`, `results/table5.csv`, `src/a/NAME.py`, "
                   "[a](../README.md#x), [b](https://example.org/src/x)\n"
                   "```bash\n.venv/bin/python benchmarks/features.py  # x\n```\n")
    paths = named_paths(doc)
    assert {"src/pseudopairs/core/io.py", "config/paper.yaml", "profiles/local/", "profiles/slurm/",
            "benchmarks/features.py"} <= paths
    assert not any(p.startswith("results/") or "NAME" in p or "example" in p for p in paths)


def test_readme_fits_in_200_lines():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)


def test_readme_shows_the_test_command_ci_runs():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line.strip() for line in ci if "pytest" in line and not line.lstrip().startswith("#")]
    assert len(commands) == 1, commands
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = [line.strip() for block in FENCE.findall(readme) for line in block.splitlines()]
    assert commands[0] in blocks
    assert "pip install -e '.[test]'" in readme and "pip install --quiet -e '.[test]'" in "\n".join(ci)


def _module_snakefile() -> str:
    """The Snakefile of README.md's "Use as a module", pointed at this clone."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use as a module", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "path/to/pseudopairs" in code and "use rule * from pseudopairs" in code
    return code.replace("path/to/pseudopairs", str(REPO))


def test_the_readme_module_recipe_plans_the_jobs_with_the_users_config_alone(tmp_path):
    host = tmp_path / "host"
    (host / "config").mkdir(parents=True)
    shutil.copy(REPO / "config" / "config.yaml", host / "config" / "config.yaml")
    (host / "Snakefile").write_text(_module_snakefile())
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    dry = subprocess.run([snakemake_exe(), "-n", "--cores", "2", "results/table5.csv"], cwd=host,
                         capture_output=True, text=True, timeout=300, env=env)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", dry.stdout, re.M))
    assert any(rule.startswith("train_stack_") for rule in counts)      # seeds 1-3 in one job
    assert int(counts["mine"]) > 0 and counts["table"] == "1"
    assert not (host / "results").exists()          # a plan, nothing run


def test_a_module_config_with_only_the_changed_keys_is_layered_over_the_shipped_files(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    # one nested key: Table 5's rows and title still come from the shipped experiments.yaml
    (host / "mine.yaml").write_text("tables: {table5: {seeds: [1]}}\n")
    (host / "Snakefile").write_text(_module_snakefile().replace("config/config.yaml", "mine.yaml"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    dry = subprocess.run([snakemake_exe(), "-n", "--cores", "2", "results/table5.csv"], cwd=host,
                         capture_output=True, text=True, timeout=300, env=env)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    # + Translation is a row of Table 5 alone: the host's seeds won
    assert "results/models/en_de_coco_c2c_mt/seed1/metrics.json" in dry.stdout
    assert "results/models/en_de_coco_c2c_mt/seed2/" not in dry.stdout
    assert "results/models/en_de_coco_c2c_mt/seed4/" not in dry.stdout


def test_code_cites_the_paper_or_the_docs_not_issue_numbers_or_documents_outside_the_repository():
    """Comments and docstrings point at what a reader of the repository can open: the paper's
    sections, docs/, config/README.md — not the tracker's issue numbers or a design document that
    lives outside the repository."""
    stale = re.compile(r"\b[I]ssues? #?\d+|\bDESIGN(\.md|\s*§)", re.I)
    files = [p for folder in ("src", "workflow", "tests", "benchmarks", "config")
             for p in (REPO / folder).rglob("*")
             if p.suffix in {".py", ".smk", ".yaml", ".yml", ".rst"} or p.name == "Snakefile"]
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in files if p.name != "test_docs.py"
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if stale.search(line)]
    assert not hits, "\n".join(hits)


PLAN_OUTPUT = """\
Building DAG of jobs...
Group job stack_de.seeds1-3 (jobs in lexicogr. order):

    [Fri Nov 27 12:00:00 2026]
    rule evaluate_stack_seeds1_3:
        input: results/models/de/seed1/checkpoint.pt
        output: results/models/de/seed1/metrics.json, results/models/de/seed2/metrics.json, results/models/de/seed3/metrics.json
        resources: tmpdir=<TBD>, runtime=24, gpu=1, mem_mb=16000

    [Fri Nov 27 12:00:00 2026]
    rule train_stack_seeds1_3:
        output: results/models/de/seed1/checkpoint.pt, results/models/de/seed1/vocab.json, results/models/de/seed2/checkpoint.pt, results/models/de/seed2/vocab.json, results/models/de/seed3/checkpoint.pt, results/models/de/seed3/vocab.json
        threads: 4
        resources: tmpdir=<TBD>, runtime=75, gpu=1, mem_mb=32000

[Fri Nov 27 12:00:00 2026]
rule mine:
    output: results/pseudopairs/de_coco/seed1/pairs.parquet
    resources: tmpdir=<TBD>, runtime=60, gpu=1, mem_mb=32000

[Fri Nov 27 12:00:00 2026]
rule train:
    output: results/models/en/seed9/checkpoint.pt, results/models/en/seed9/vocab.json
    resources: tmpdir=<TBD>, runtime=25, gpu=1, mem_mb=32000

[Fri Nov 27 12:00:00 2026]
localrule table:
    output: results/table5.csv
    resources: tmpdir=<TBD>, runtime=60, mem_mb=4000

Job stats:
job                      count
---------------------  -------
evaluate_stack_seeds1_3        1
mine                           1
table                          1
train                          1
train_stack_seeds1_3           1
total                          5
"""


def test_plan_facts_count_what_a_dry_run_plans():
    """By hand on a small dry run: 5 jobs; 4 models (3 of a stack + 1); one stack of 3; 4 jobs
    ask a GPU but 3 submissions reach a GPU queue (the stack's two jobs are one group job)."""
    from pseudopairs.report import plan

    facts = plan.plan_facts(PLAN_OUTPUT, prefix="toy")
    # GPU minutes 24 + 75 + 60 + 25 = 184 -> 3 GPU-hours; the stack's group job: 75 + 24 minutes,
    # the larger memory of its two jobs
    assert facts == {"toy.jobs": 5, "toy.models": 4, "toy.stacks": 1, "toy.stacks_of_3": 1, "toy.gpu_jobs": 4,
                     "toy.gpu_submissions": 3, "toy.mine": 1, "toy.features": 0, "toy.translate": 0,
                     "toy.evaluate_clc": 0, "toy.model_disk_gb": 0, "toy.gpu_hours": 3,
                     "toy.stack_of_3_minutes": 99, "toy.stack_of_3_mem_mb": 32000}
    text = "plans <!--plan:toy.jobs-->4<!--/plan--> jobs, <!--plan:toy.models-->4<!--/plan--> models\n" \
           "and <!--plan:toy.nothing-->1<!--/plan-->"
    assert plan.marker_errors(text, facts, source="X.md") == [
        "X.md:1: toy.jobs says 4, the plan has 5",
        f"X.md:2: toy.nothing is no figure of the plan; known: {', '.join(sorted(facts))}"]
    assert plan.write_markers(text, {**facts, "toy.jobs": 1234}).startswith(
        "plans <!--plan:toy.jobs-->1,234<!--/plan--> jobs")


def test_every_figure_the_docs_quote_from_the_plan_is_the_plans(tmp_path):
    """Each job, model, stack, GPU and disk figure the docs derive from the plan sits between
    plan markers; the dry runs of config/paper.yaml, the demo's Table 5 and its rule all give
    each of them (``pseudopairs docs --write`` rewrites them after a change)."""
    try:  # the SLURM extra is part of the test extra: its absence is a broken test environment
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.fail("snakemake_executor_plugin_slurm is not installed: it is in the test extra "
                    "(pip install -e '.[test]'), and the paper's plan needs it")
    from pseudopairs.report import plan

    facts = plan.all_facts(REPO, tmp_path)
    texts = {name: (REPO / name).read_text(encoding="utf-8") for name in plan.DOCS}
    problems = [m for name, text in texts.items() for m in plan.marker_errors(text, facts, source=name)]
    assert not problems, "\n".join(problems) + "\n(run `pseudopairs docs --write`)"
    assert {"paper.jobs", "paper.models", "paper.stacks", "paper.gpu_submissions", "paper.model_disk_gb",
            "demo.table5.jobs", "demo.jobs_after_table5", "paper.stack_of_3_minutes", "paper.stack_of_7_minutes",
            "paper.stack_of_3_mem_mb", "paper.uncalibrated.gpu_hours", "paper.uncalibrated.stack_of_3_minutes",
            "paper.uncalibrated.stack_of_7_minutes"} <= plan.marked_names(texts.values())


def test_config_readme_documents_every_settings_section_by_its_class():
    """config/README.md holds one generated table per settings class the schema generates a
    section from, equal to the class's: a setting added, removed or changed in its class shows
    here (``pseudopairs docs --write --no-plan`` regenerates the tables)."""
    from pseudopairs.report import docs

    targets = docs.settings_targets()
    assert "pseudopairs.model.settings:TrainingSettings" in targets and len(targets) >= 12
    text = (REPO / "config" / "README.md").read_text(encoding="utf-8")
    problems = docs.settings_errors(text, source="config/README.md", targets=targets)
    assert not problems, "\n".join(problems) + "\n(run `pseudopairs docs --write --no-plan`)"
    table = docs.settings_table("pseudopairs.mining.settings:MiningSettings")
    assert "| `encode_batch_size` | an integer >= 1 | `256` | captions per encoder batch |" in table
    assert "| `device` | auto, cpu, cuda or cuda:N | `\"auto\"` |" in table
