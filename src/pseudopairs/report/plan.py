"""The figures of the docs that the plan determines (job counts, models, stacks, GPU submissions,
the models' disk), computed from Snakemake's dry runs, and kept in the docs between markers so a
test can check every one of them against the plan and ``pseudopairs docs --write`` can
rewrite them::

    the paper configuration plans <!--plan:paper.jobs-->600<!--/plan--> jobs

A dry run with the SLURM profile lists each group job's members under a ``Group job NAME`` line;
:func:`pseudopairs.workflow.dryrun.listed_jobs` reads every job's rule, group, outputs and resources from it, and
:func:`plan_facts` counts. :data:`PLANS` names the dry runs the docs quote.
"""

from __future__ import annotations

import re
from typing import Iterable

from pseudopairs.workflow.dryrun import listed_jobs

#: The models' disk: the best-weights checkpoint at the paper's sizes, measured by the rehearsal
#: (docs/scale.md: 58 MB per model).
CHECKPOINT_MB = 58

#: The dry runs whose figures the docs quote: name -> (targets, whether the paper configuration
#: is layered on, extra --configfile YAML or None).
PLANS = {
    "paper": ((), True, None),                         # rule all of config/paper.yaml
    # the same without the calibration: what every job asked before (resources.runtime / mem_mb)
    "paper.uncalibrated": ((), True, "resources: {calibration: null}\n"),
    "demo.table5": (("results/table5.csv",), False, None),
    "demo": ((), False, None),                          # rule all of the demo
}

MARKER = re.compile(r"<!--plan:(?P<name>[\w.]+)-->(?P<value>[^<]*)<!--/plan-->")


def total_jobs(output: str) -> int:
    """The ``total`` line of the dry run's job statistics."""
    found = re.findall(r"^total\s+(\d+)$", output, re.M)
    if not found:
        raise ValueError("dry run output has no job statistics (its 'total' line)")
    return int(found[-1])


def plan_facts(output: str, *, prefix: str) -> dict[str, int]:
    """The figures of one dry run, each named ``{prefix}.{what}``: ``jobs``; ``models`` (the
    checkpoints it trains); ``stacks`` (the train jobs of a stack of seeds) and ``stacks_of_N`` per stack size;
    ``gpu_jobs`` (jobs asking for a GPU) and ``gpu_submissions`` (what reaches a GPU queue: a
    group job once, with its members); the jobs of ``mine``, ``features``, ``translate`` (the
    translations, CLC's and the augmented sets' included) and ``evaluate_clc``; ``model_disk_gb`` (models ×
    :data:`CHECKPOINT_MB`, rounded); ``gpu_hours`` (first-attempt walltime × GPUs of every GPU job,
    rounded); ``stack_of_N_minutes`` / ``stack_of_N_mem_mb`` (what a stack group job of N models asks
    SLURM on its first attempt: its members' walltimes added up, their largest memory)."""
    jobs = listed_jobs(output)
    checkpoints = {path for job in jobs for path in job["outputs"] if path.endswith("/checkpoint.pt")}
    gpu = [job for job in jobs if int(job.get("gpu", 0) or 0) > 0]
    groups = {job["group"] for job in gpu if job["group"]}
    stacks = [job for job in jobs if job["rule"].startswith("train_stack_")]
    facts = {
        "jobs": total_jobs(output),
        "models": len(checkpoints),
        "stacks": len(stacks),
        "gpu_jobs": len(gpu),
        "gpu_submissions": len(groups) + sum(1 for job in gpu if not job["group"]),
        "mine": sum(job["rule"] == "mine" for job in jobs),
        "features": sum(job["rule"] == "features" for job in jobs),
        "translate": sum(job["rule"] in ("translate", "translate_clc", "translate_augment") for job in jobs),
        "evaluate_clc": sum(job["rule"] == "evaluate_clc" for job in jobs),
        "model_disk_gb": round(len(checkpoints) * CHECKPOINT_MB / 1000),
    }
    minutes = sum(int(job["runtime"]) * int(job.get("gpu", 0) or 0) for job in gpu)
    facts["gpu_hours"] = round(minutes / 60)
    for job in stacks:
        size = sum(path.endswith("/checkpoint.pt") for path in job["outputs"])
        facts[f"stacks_of_{size}"] = facts.get(f"stacks_of_{size}", 0) + 1
        members = [other for other in jobs if job["group"] and other["group"] == job["group"]] or [job]
        # what the stack's group job asks SLURM on its first attempt: its members' walltimes added
        # up, the largest memory of them (the most any stack of that size asks)
        group_minutes = sum(int(member["runtime"]) for member in members)
        group_mem = max(int(member["mem_mb"]) for member in members)
        facts[f"stack_of_{size}_minutes"] = max(facts.get(f"stack_of_{size}_minutes", 0), group_minutes)
        facts[f"stack_of_{size}_mem_mb"] = max(facts.get(f"stack_of_{size}_mem_mb", 0), group_mem)
    return {f"{prefix}.{name}": value for name, value in facts.items()}


def shown(value: int) -> str:
    """A figure as the docs write it (thousands separated by commas)."""
    return f"{value:,}"


def marker_errors(text: str, facts: dict[str, int], *, source: str) -> list[str]:
    """Each marker of ``text`` whose figure is not the plan's (or names no known figure)."""
    messages = []
    for match in MARKER.finditer(text):
        name, value = match.group("name"), match.group("value")
        line = text.count("\n", 0, match.start()) + 1
        if name not in facts:
            messages.append(f"{source}:{line}: {name} is no figure of the plan; known: "
                            f"{', '.join(sorted(facts))}")
        elif value != shown(facts[name]):
            messages.append(f"{source}:{line}: {name} says {value}, the plan has {shown(facts[name])}")
    return messages


def write_markers(text: str, facts: dict[str, int]) -> str:
    """``text`` with every marker's figure set to the plan's (unknown names left as they are)."""
    def replace(match: re.Match) -> str:
        name = match.group("name")
        value = shown(facts[name]) if name in facts else match.group("value")
        return f"<!--plan:{name}-->{value}<!--/plan-->"

    return MARKER.sub(replace, text)


def marked_names(texts: Iterable[str]) -> set[str]:
    return {match.group("name") for text in texts for match in MARKER.finditer(text)}


# ----------------------------------------------------------------------------------------------
# The dry runs, and the command that checks or rewrites the docs


#: The files whose figures come from the plan (relative to the repository).
DOCS = ("README.md", "docs/cluster.md", "docs/scale.md", "docs/smalr.md", "docs/results.md",
        "profiles/README.md", "config/README.md", "config/paper.yaml")


def dry_run(repo, workdir, *, targets=(), paper: bool = False, extra: str | None = None) -> str:
    """``snakemake -n`` of ``targets`` (rule all when none) with the SLURM profile in
    ``workdir``: the demo configuration, or config/paper.yaml with a site file naming an (empty)
    Flickr30K folder; ``extra``: a YAML file's text layered on top."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo, workdir = Path(repo), Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    files = []
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if paper:
        # the features jobs' ImageNet weights are checked while the DAG is built: the count needs
        # a cache with a file of that name, not the weights (no job runs)
        checkpoints = workdir / "torch" / "hub" / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        (checkpoints / "resnet50-0676ba61.pth").touch()
        env["TORCH_HOME"] = str(workdir / "torch")
        (workdir / "flickr30k").mkdir(exist_ok=True)
        (workdir / "site.yaml").write_text(f"paper_data: {{flickr30k_images: {workdir / 'flickr30k'}}}\n")
        files = [str(repo / "config" / "paper.yaml"), str(workdir / "site.yaml")]
    if extra:
        (workdir / "extra.yaml").write_text(extra)
        files.append(str(workdir / "extra.yaml"))
    exe = Path(sys.executable).with_name("snakemake")
    command = [str(exe) if exe.exists() else (shutil.which("snakemake") or "snakemake"),
               "-s", str(repo / "Snakefile"), "-d", str(workdir), "-n", "--cores", "64",
               "--profile", str(repo / "profiles" / "slurm"), *targets]
    if files:
        command += ["--configfile", *files]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    if result.returncode != 0:
        raise RuntimeError(f"dry run {' '.join(targets) or 'all'} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def all_facts(repo, workdir) -> dict[str, int]:
    """The figures of every dry run of :data:`PLANS`, and the demo's jobs after Table 5's."""
    from pathlib import Path

    facts: dict[str, int] = {}
    for name, (targets, paper, extra) in PLANS.items():
        output = dry_run(repo, Path(workdir) / name, targets=targets, paper=paper, extra=extra)
        facts.update(plan_facts(output, prefix=name))
    facts["demo.jobs_after_table5"] = facts["demo.jobs"] - facts["demo.table5.jobs"]
    return facts
