"""What a job asks a cluster for, from the config's ``resources`` section (the rules call these
through ``workflow/rules/common.smk``), and the checks of the site's values.

* :func:`walltime` — minutes per job: the rule's ``resources.runtime`` × the attempt number (a job
  killed at its time limit asks for more when retried), but never more than
  ``resources.runtime_cap`` (the longest walltime the site's partitions accept, or the longest it
  wants asked for): rules that run one after the other in one group job (train, then evaluate)
  share the cap in proportion to their own times, so the group's sum stays under it too.
* :func:`placeholder_errors` — a ``resources.slurm`` value that looks like an example left in
  place (``myaccount``, ``<account>``, ``CHANGEME``, ``xxx`` …, the docs' own examples such as
  ``proj123`` or an address at example.org) is refused when the config is checked, naming its
  key, instead of failing at every submission; null (or absent) means the cluster's default.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# the example values the docs' site files show (profiles/README.md, docs/cluster.md,
# config/paper.yaml's comments): copied as they are, they are not a site's values
DOCUMENTED_EXAMPLES = ("proj123",)
# an example value left in a config: my/your + a SLURM noun, your_*, <...>, CHANGEME, xxx, TODO,
# None/null written as a string, the documented examples, an address at a domain reserved for
# examples (RFC 2606: example.org, .com, .net)
_PLACEHOLDER = re.compile(
    r"^(?:(?:my|your)[-_ ]?(?:account|acct|project|allocation|group|partition|queue|qos|"
    r"constraint|cluster|lab|gpu|gres)s?|your[-_][\w-]*|x{3,}|\?+|\.{3}|…|todo|tbd|fixme|"
    r"placeholder|example|dummy|none|null|nil|" + "|".join(map(re.escape, DOCUMENTED_EXAMPLES)) + r")$"
    r"|<[^<>]*>|\bchange[-_ ]?me\b|\breplace[-_ ]?me\b|\bfill[-_ ]?me\b|@example\.(?:org|com|net)\b",
    re.IGNORECASE,
)


def looks_like_placeholder(value: Any) -> bool:
    """Whether a site value (a string) looks like an example or a note left in place."""
    return isinstance(value, str) and bool(_PLACEHOLDER.search(value.strip()))


def placeholder_errors(config: dict) -> list[str]:
    """One message per ``resources.slurm`` value (or per-kind/per-rule value) that looks like a
    placeholder, naming its config key."""
    slurm = (config.get("resources") or {}).get("slurm") or {}
    messages = []
    for key, value in slurm.items():
        values = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, item in values:
            if looks_like_placeholder(item):
                where = f"resources.slurm.{key}" + (f".{sub}" if sub is not None else "")
                messages.append(
                    f"config key '{where}': {item!r} looks like a placeholder, not your cluster's "
                    f"value; set the real one (in a site file layered over the config), or null "
                    f"to use the cluster's default")
    return messages


def walltime(runtimes: dict[str, int], rule: str, attempt: int, *, cap: int | None = None,
             grouped_with: Iterable[str] = (), models: int = 1) -> int:
    """Minutes one job of ``rule`` asks for at ``attempt`` (1 = first try): its runtime (per rule,
    else ``default``) × ``models`` × ``attempt``, capped at ``cap`` (None = no cap).
    ``grouped_with``: the rules that run in the same group job (their walltimes add up in the
    submission); once the group's sum × ``attempt`` would pass the cap, each job gets its share of
    the cap in proportion to its own time (rounded down, so the sum stays within the cap).

    ``models``: the models of this job and of its group job (a stack of S: its training, S models
    in about S models' time or less, docs/benchmarks.md, and their evaluations, one after the
    other), by which the group's walltimes are multiplied."""
    if isinstance(attempt, bool) or int(attempt) != attempt or attempt < 1:
        raise ValueError(f"attempt must be a whole number >= 1, got {attempt!r}")

    def own(name: str) -> int:
        return int(runtimes.get(name, runtimes["default"]))

    minutes = own(rule) * models * int(attempt)
    if cap is None:
        return minutes
    total = sum(own(name) for name in (rule, *grouped_with)) * models
    if total * int(attempt) <= cap:
        return minutes
    return max(1, int(cap) * own(rule) * models // total)
