"""Reading a ``snakemake -n`` listing: every job it plans, with its rule, group job, threads,
outputs, wildcards and resources. The one parser the plan's figures (:mod:`pseudopairs.report.plan`),
the GPU-hours calibration (:mod:`pseudopairs.workflow.calibration`) and the cluster tests read dry runs with.

A dry run with the SLURM profile lists each group job's members indented under a
``Group job NAME`` line; every job is a ``rule NAME:`` (or ``localrule NAME:``) block."""

from __future__ import annotations

import re


def listed_jobs(text: str) -> list[dict]:
    """Each job of the listing as a dict: ``rule``, ``group`` (None outside a group job),
    ``threads`` (1 unless listed), ``outputs`` (list), ``wildcards`` (dict), and each resource
    as a key of its own (values as listed, strings)."""
    jobs: list[dict] = []
    group = job = None
    for line in text.splitlines():
        header = re.search(r"Group job (\S+) \(jobs", line)
        if header:
            group = header.group(1)
            continue
        head = re.match(r"^( *)(?:local)?rule (\w+):$", line)
        if head:
            if not head.group(1):
                group = None
            job = {"rule": head.group(2), "group": group, "threads": 1, "outputs": [], "wildcards": {}}
            jobs.append(job)
            continue
        if job is None:
            continue
        found = re.match(r"^\s+(resources|wildcards|threads|output): (.*)$", line)
        if not found:
            continue
        key, value = found.groups()
        if key == "threads":
            job["threads"] = int(value)
        elif key == "output":
            job["outputs"] = value.split(", ")
        else:
            items = dict(item.split("=", 1) for item in value.split(", ") if "=" in item)
            if key == "wildcards":
                job["wildcards"] = items
            else:
                job.update(items)
    return jobs
