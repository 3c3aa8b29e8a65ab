"""The software the jobs run with: every job runs ``python -m pseudopairs``, so unless each rule
gets its own conda environment (``--sdm conda``) or runs in the workflow's container (``--sdm
apptainer``), the ``python`` on PATH must have the workflow's packages. :func:`python_problem` says
so once, at the start of a run (the workflow's ``onstart``), instead of every job failing."""

from __future__ import annotations

import shutil
import subprocess
from typing import Iterable

#: The third-party modules a job imports (the steps' packages; the optional extras are checked by
#: the steps that need them, with a message naming the extra).
JOB_MODULES = ("torch", "torchvision", "pandas", "pyarrow", "sacremoses", "ctranslate2", "matplotlib")

ADVICE = ("Activate the workflow's environment before running snakemake (`. .venv/bin/activate` "
          "after the install in README.md, or `conda activate pseudopairs`), or let Snakemake build "
          "one per rule with --sdm conda, or run every job in the workflow's container with --sdm "
          "apptainer (profiles/README.md).")


def python_problem(deployment_methods: Iterable, *, python: str | None = None) -> str | None:
    """One line when the jobs' ``python`` (the one on PATH, or ``python``) lacks a module of
    :data:`JOB_MODULES`, None when it has them all or the jobs run in conda environments or the
    container (``deployment_methods``: Snakemake's ``--sdm`` choices)."""
    if any(getattr(m, "name", str(m)).lower() in ("conda", "apptainer") for m in deployment_methods):
        return None
    python = python or shutil.which("python")
    if python is None:
        return f"the jobs' python (not on PATH) lacks python itself. {ADVICE}"
    probe = ("import importlib.util, sys; "
             f"missing = [m for m in {JOB_MODULES!r} if importlib.util.find_spec(m) is None]; "
             "print(' '.join(missing)); sys.exit(1 if missing else 0)")
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if result.returncode == 0:
        return None
    return f"the jobs' python ({python}) lacks {result.stdout.strip() or 'its packages'}. {ADVICE}"
