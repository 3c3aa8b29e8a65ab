"""What a job asks a cluster for, from the config's ``resources`` section: the rules call
:func:`rule_resources`'s two functions (``job_resources``, ``stack_resources``; bound in
``workflow/rules/common.smk``), and the config check calls :func:`placeholder_errors`.

* :func:`job_resources` — everything one job of a rule asks a scheduler for: memory and walltime
  (× the attempt number, the walltime capped), GPUs, the SLURM placement.
* :func:`walltime` — minutes per job: the rule's ``resources.runtime`` × the attempt number (a job
  killed at its time limit asks for more when retried), but never more than
  ``resources.runtime_cap`` (the longest walltime the site's partitions accept, or the longest it
  wants asked for): rules that run one after the other in one group job (train, then evaluate)
  share the cap in proportion to their own times, so the group's sum stays under it too.
* With ``resources.calibration`` (a file of measured GPU rates, :mod:`pseudopairs.workflow.calibration`),
  the GPU job kinds (train, evaluate, features, mine, translate) ask for the walltime and memory
  their measured rates give instead of ``resources.runtime`` / ``resources.mem_mb``.
* ``resources.override`` (``mem_mb`` / ``runtime`` per job kind) wins over both: the one way to
  give a job kind (a stack's training included) more memory or time.
* :func:`placeholder_errors` — a ``resources.slurm`` value that looks like an example left in
  place (``myaccount``, ``<account>``, ``CHANGEME``, ``xxx`` …, the docs' own examples such as
  ``proj123`` or an address at example.org) is refused when the config is checked, naming its
  key, instead of failing at every submission; null (or absent) means the cluster's default.

Nothing here imports torch or Snakemake: the workflow calls it while it is parsed.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

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

#: config ``resources.slurm`` key -> the resource snakemake-executor-plugin-slurm turns into sbatch
#: options (profiles/README.md)
SLURM_RESOURCES = {
    "partition": "slurm_partition",  # -p
    "account": "slurm_account",  # -A
    "qos": "qos",  # --qos
    "constraint": "constraint",  # -C
    "gpu_model": "gpu_model",  # GPU jobs: --gpus=<model>:N
    "gres": "gres",  # GPU jobs: --gres=<value>:N instead of --gpus=N
    "extra": "slurm_extra",  # further sbatch options, verbatim
}
GPU_ONLY = ("gpu_model", "gres")


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


def option_placeholder_errors(default: dict[str, Any], overwrite: dict[str, dict[str, Any]]) -> list[str]:
    """:func:`placeholder_errors` for the SLURM resources given on the command line or in a
    profile: ``default`` (``--default-resources NAME=VALUE``: name -> value as written) and
    ``overwrite`` (``--set-resources RULE:NAME=VALUE``: rule -> name -> value), one message each."""
    names = set(SLURM_RESOURCES.values())

    def text(value: Any) -> Any:
        return value.strip().strip("'\"") if isinstance(value, str) else value

    given = [("--default-resources", name, value) for name, value in default.items()]
    given += [("--set-resources", f"{rule}:{name}", value)
              for rule, values in overwrite.items() for name, value in values.items()]
    return [f"{option} {name}={text(value)!r}: looks like a placeholder, not your cluster's value; give "
            "the real one (or leave it out: the cluster's default)"
            for option, name, value in given
            if name.rpartition(":")[2] in names and looks_like_placeholder(text(value))]


#: the GPU-capable job kinds (what their rules pass to job_resources) -> their device's config key
DEVICE_KEYS = {"features": ("features", "device"), "mine": ("mining", "device"),
               "train": ("training", "device"), "evaluate": ("training", "device"),
               "translate": ("translation", "translate", "device")}
_CUDA_INDEX = re.compile(r"^cuda:(\d+)$")


def device_setting_of(config: dict, rule: str) -> tuple[str | None, str]:
    """(config key, value) of the device a job kind runs on; (None, "auto") for a rule without."""
    keys = DEVICE_KEYS.get(rule)
    if keys is None:
        return None, "auto"
    value: Any = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return ".".join(keys), str(value or "auto")


def device_errors(config: dict) -> list[str]:
    """A GPU job that asks the scheduler for GPUs (``resources.gpu`` > 0) sees its own GPUs from
    cuda:0, so ``cuda:N`` with N >= 1 names a device the job does not have (it would fail on the
    node, after waiting in the queue): refused while the config is checked, naming the key."""
    gpus = (config.get("resources") or {}).get("gpu") or 0
    messages = []
    settings = dict(device_setting_of(config, rule) for rule in DEVICE_KEYS)
    for key, value in settings.items():
        found = _CUDA_INDEX.match(value)
        if found and int(found.group(1)) >= 1 and gpus > 0:
            messages.append(
                f"config key '{key}': {value!r} names GPU {found.group(1)}, but each job asks the "
                f"scheduler for resources.gpu = {gpus} GPU(s) and sees them as cuda:0 … "
                f"cuda:{gpus - 1}; use 'cuda' (or 'cuda:0'), or set resources.gpu: 0 to pick a "
                "device yourself on a machine of your own")
    return messages


def _check_attempt(attempt: Any) -> int:
    if isinstance(attempt, bool) or int(attempt) != attempt or attempt < 1:
        raise ValueError(f"attempt must be a whole number >= 1, got {attempt!r}")
    return int(attempt)


def capped(own: dict[str, int], rule: str, attempt: int, *, cap: int | None = None) -> int:
    """Minutes of ``rule`` at ``attempt`` given the first-attempt minutes ``own`` of it and of
    the other rules of its group job (one entry each): ``own[rule] × attempt``, and once the
    group's sum × ``attempt`` passes ``cap``, the rule's share of the cap in proportion to its own
    minutes (rounded down, so the group's sum stays within the cap)."""
    attempt = _check_attempt(attempt)
    minutes = int(own[rule]) * attempt
    if cap is None:
        return minutes
    total = sum(int(v) for v in own.values())
    if total * attempt <= cap:
        return minutes
    return max(1, int(cap) * int(own[rule]) // total)


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
    _check_attempt(attempt)
    own = {name: int(runtimes.get(name, runtimes["default"])) * models for name in (rule, *grouped_with)}
    return capped(own, rule, attempt, cap=cap)


class ClusterResources:
    """The resources of the rules of one config (its ``resources`` section and, for the
    calibrated job kinds, its ``resources.calibration`` file; :mod:`pseudopairs.workflow.calibration`)."""

    def __init__(self, config: dict, *, calibration: Any = None) -> None:
        from pseudopairs.workflow import calibration as calibrated

        self.config = config
        self.resources = config["resources"]
        self.calibration = calibration if calibration is not None else calibrated.from_config(config)

    # ---- memory and time -----------------------------------------------------------------------

    def device_of(self, rule: str) -> str:
        """The device setting of a GPU-capable job kind (``features.device``, ``mining.device``,
        ``training.device`` for train and evaluate, ``translation.translate.device``); "auto" for
        any other."""
        if rule in ("train", "evaluate") and getattr(self, "_training_device", None) is not None:
            return self._training_device
        return device_setting_of(self.config, rule)[1]

    def with_training_device(self, device: str) -> "ClusterResources":
        """These resources for the training and evaluation of experiments whose own
        ``training.device`` is ``device`` (an experiment's setting over the config's)."""
        import copy

        other = copy.copy(self)
        other._training_device = device
        return other

    def on_cpu(self, rule: str) -> bool:
        """Whether jobs of ``rule`` are set to run on the CPU (``device: cpu``): they ask no GPU, the
        CPU placement and the uncalibrated ``runtime`` / ``mem_mb`` (the calibration's rates are
        a GPU's)."""
        return self.device_of(rule) == "cpu"

    def calibrated(self, rule: str) -> bool:
        return self.calibration is not None and self.calibration.covers(rule) and not self.on_cpu(rule)

    def override(self, key: str, rule: str) -> int | None:
        """``resources.override.<key>.<rule>`` (``mem_mb`` or ``runtime``; ``rule``: the job kind a
        rule passes to job_resources -- ``train`` and ``evaluate`` for every stack's rules): what
        one job of that kind asks on its first attempt, over the calibration and ``mem_mb`` /
        ``runtime`` (not multiplied by a stack's models); None when not set."""
        value = ((self.resources.get("override") or {}).get(key) or {}).get(rule)
        return None if value is None else int(value)

    def first_minutes(self, rule: str, *, models: int = 1, wildcards: Any = None) -> int:
        """The walltime of ``rule``'s job on its first attempt, uncapped: the calibrated minutes of
        its job kind (:meth:`pseudopairs.workflow.calibration.Calibration.requested_minutes`; a mine job's
        for the criterion of its ``pseudopairs`` wildcard) when there is a calibration and the
        rule is of a calibrated kind, else ``resources.runtime`` × ``models``."""
        forced = self.override("runtime", rule)
        if forced is not None:
            return forced
        if self.calibrated(rule):
            from pseudopairs.workflow.calibration import mine_criterion

            criterion = mine_criterion(self.config, wildcards) if rule == "mine" else None
            return self.calibration.requested_minutes(rule, self.config, models=models, criterion=criterion)
        runtimes = self.resources["runtime"]
        return int(runtimes.get(rule, runtimes["default"])) * models

    def mem_mb(self, rule: str, *, models: int = 1) -> Callable:
        """Memory of one job of ``rule`` in MB (the calibration's for a calibrated kind, else config
        ``resources.mem_mb``, else its ``default``), × the attempt number, so a job killed for
        memory and retried (``--retries``, set in the SLURM profile) asks for more."""
        forced = self.override("mem_mb", rule)
        if forced is not None:
            megabytes = forced
        elif self.calibrated(rule):
            megabytes = self.calibration.requested_memory_mb(rule, models=models)
        else:
            megabytes = self.resources["mem_mb"].get(rule, self.resources["mem_mb"]["default"])
        return lambda wildcards, attempt: megabytes * _check_attempt(attempt)

    def runtime(self, rule: str, *, grouped_with: Iterable[str] = (), models: int = 1) -> Callable:
        """Walltime of one job of ``rule`` in minutes (:meth:`first_minutes`) × the attempt number,
        so a job killed at its time limit and retried asks for more -- but never more than
        ``resources.runtime_cap``, shared with the rules ``grouped_with`` it in one group job
        (:func:`capped`)."""
        cap = self.resources.get("runtime_cap")
        names = (rule, *grouped_with)
        if rule == "mine" and self.calibrated(rule):  # per job: its set's criterion
            return lambda wildcards, attempt: capped(
                {name: self.first_minutes(name, models=models, wildcards=wildcards) for name in names},
                rule, attempt, cap=cap)
        own = {name: self.first_minutes(name, models=models) for name in names}
        return lambda wildcards, attempt: capped(own, rule, attempt, cap=cap)

    # ---- placement -----------------------------------------------------------------------------

    def placement(self, rule: str, *, gpu: bool) -> dict:
        """Where a job of ``rule`` goes on a SLURM cluster, from config ``resources.slurm``: each key
        is one value for every job, or a mapping of ``cpu`` (CPU jobs), ``gpu`` (jobs that ask for a
        GPU) and rule names (that rule's jobs, before either); null or absent = not set (the site's
        default). A local run ignores these resources."""
        placed = {}
        for key, resource in SLURM_RESOURCES.items():
            value = (self.resources.get("slurm") or {}).get(key)
            if isinstance(value, dict):
                value = value.get(rule, value.get("gpu" if gpu else "cpu"))
            if value is not None and (gpu or key not in GPU_ONLY):
                placed[resource] = value
        return placed

    # ---- what a rule declares --------------------------------------------------------------------

    def job_resources(self, rule: str, *, gpu: bool = False, placed_with: str | None = None,
                      grouped_with: Iterable[str] = (), models: int = 1) -> dict:
        """Everything one job of ``rule`` asks a scheduler for, from the config's ``resources``
        section: ``resources: **job_resources("my_rule")`` in every rule (``gpu=True`` for a rule
        whose step can use a GPU).

        - ``mem_mb`` and ``runtime`` (minutes), per rule or the ``default`` (or from the
          calibration, for its job kinds), × the attempt number; the runtime at most
          ``resources.runtime_cap``, which the rules ``grouped_with`` this one (the other rules of
          its group job, whose walltimes Snakemake adds up) share; for the jobs of a stack of
          ``models`` models, that many models' worth;
        - ``gpu``: ``resources.gpu`` GPUs when ``gpu`` and that is above 0 (else none); where
          ``resources.slurm.gres`` is set, ``gres=<gres>:<resources.gpu>`` instead (sites that want
          ``--gres`` rather than ``--gpus``);
        - the SLURM placement of :meth:`placement` (partition, account, qos, constraint, GPU model,
          extra sbatch options) of a CPU or GPU job -- looked up under the rule ``placed_with`` where
          given: a rule whose jobs share a group job with that rule's (evaluate with train) must ask
          for the same partition.

        The rules declare these, so a profile or the command line only adds to them. To give a
        job kind more memory or time, ``resources.override`` in the config (:meth:`override`):
        the stacks' rules are generated (``train_stack_seeds1_3`` …), so a command-line
        ``--set-resources train:…`` names no rule."""
        gpus = self.resources["gpu"] if gpu and not self.on_cpu(placed_with or rule) else 0
        resources = {"mem_mb": self.mem_mb(rule, models=models),
                     "runtime": self.runtime(rule, grouped_with=grouped_with, models=models)}
        placed = self.placement(placed_with or rule, gpu=gpus > 0)
        if gpus and "gres" in placed:
            placed["gres"] = f"{placed['gres']}:{gpus}"
            placed.pop("gpu_model", None)  # the GRES names the GPU type
        elif gpus:
            resources["gpu"] = gpus
        return {**resources, **placed}

    def stack_resources(self, step: str, n_models: int, *, device: str | None = None) -> dict:
        """The resources of a stack's ``step`` (train or evaluate) for ``n_models`` models, one
        group job: its walltime for the models (``resources.runtime`` × the models, for training
        an upper bound: on a GPU a stack of S runs faster than S jobs, docs/benchmarks.md; or the
        calibrated minutes of a stack of that size), its memory as one job's (the models share
        the loaded data; the evaluations run one after the other), placed with train."""
        other = {"train": "evaluate", "evaluate": "train"}[step]
        source = self if device is None else self.with_training_device(device)
        return source.job_resources(step, gpu=True, placed_with="train", grouped_with=(other,),
                                    models=n_models)


def rule_resources(config: dict) -> tuple[Callable[..., dict], Callable[..., dict]]:
    """``(job_resources, stack_resources)`` of ``config``: the one function each rule calls
    (:meth:`ClusterResources.job_resources`) and the one each stack rule calls
    (:meth:`ClusterResources.stack_resources`)."""
    resources = ClusterResources(config)
    return resources.job_resources, resources.stack_resources
