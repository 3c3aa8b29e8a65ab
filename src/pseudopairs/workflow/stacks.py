"""Stacks: which seeds of an experiment are trained together in one job (config
``training.stack``; the ``train`` step, :mod:`pseudopairs.model.stack_training`, trains a stack's
models one after the other on a CPU and as one batched, *stacked* model on a GPU). The workflow's
rules (``workflow/rules/train.smk``) are generated from :func:`stack_experiments`, one pair per
distinct stack of seeds, the experiment a wildcard; each job is a stack's
:func:`~pseudopairs.model.contract.training_job` and
:func:`~pseudopairs.evaluation.contract.evaluation_job`.

Stacks are fixed by seed numbers — the sizes of consecutive stacks from seed 1, the last size
repeating — and hold the seeds the config's outputs need (:func:`model_seeds`), so adding a seed
in a new stack changes no other stack's job.
"""

from __future__ import annotations

from pseudopairs.data.contract import dataset, dataset_kind
from pseudopairs.data.experiments import experiment, shown_models
from pseudopairs.mining.contract import pseudopair_set, pseudopair_sets
from pseudopairs.model.contract import experiment_training


def model_seeds(config: dict) -> dict[str, list[int]]:
    """Every model the config's outputs need, experiment -> seeds (ascending): the tables' models
    at their tables' seeds (:func:`shown_models`), the sources of the pseudopair sets at the
    config's seeds (the §7.2 statistics), and, closed under what training reads, every
    fine-tuning source and pseudopair source at the seed of the model that reads it."""
    needed: dict[str, set[int]] = {name: set(seeds) for name, seeds in shown_models(config).items()}
    for name in pseudopair_sets(config):
        needed.setdefault(pseudopair_set(config, name)["source"], set()).update(config["seeds"])
    work = [(name, seed) for name, seeds in needed.items() for seed in seeds]
    while work:
        name, seed = work.pop()
        if name not in config["experiments"]:
            continue
        exp = experiment(config, name)
        sources = [exp["finetune"]] if exp.get("finetune") else []
        for ds in exp["c2i"] + [d for pair in exp.get("c2c", []) for d in pair]:
            if dataset_kind(config, ds) == "pseudopairs":
                sources.append(pseudopair_set(config, dataset(config, ds)["pseudopairs"])["source"])
        for source in sources:
            if seed not in needed.setdefault(source, set()):
                needed[source].add(seed)
                work.append((source, seed))
    return {name: sorted(seeds) for name, seeds in needed.items()}


def stack_index(seed: int, sizes: list[int]) -> int:
    """The index of the stack holding ``seed`` (``training.stack``: the sizes of consecutive
    stacks from seed 1, the last size repeating); a seed below 1 is a stack of its own (< 0)."""
    if seed < 1:
        return seed - 1
    start = 1
    for index, size in enumerate(sizes):
        if seed < start + size:
            return index
        start += size
    return len(sizes) + (seed - start) // sizes[-1]


def experiment_stacks(config: dict, name: str, seeds: list[int]) -> list[list[int]]:
    """Experiment ``name``'s ``seeds`` (those the outputs need: :func:`model_seeds`) grouped into
    the stacks its models are trained in, one job each, by ``training.stack`` (the experiment's
    own, else the config's). Stack boundaries are fixed by seed numbers, so a seed added in a new
    stack changes no other stack's job."""
    sizes = experiment_training(config, name).stack
    grouped: dict[int, list[int]] = {}
    for seed in sorted(seeds):
        grouped.setdefault(stack_index(seed, sizes), []).append(seed)
    return list(grouped.values())


def multi_seed_stacks(config: dict, models: dict[str, list[int]]) -> list[tuple[str, list[int]]]:
    """Every (experiment, seeds) stack of two or more seeds of ``models`` (:func:`model_seeds`):
    one stack job each (a stack of one seed is trained by rule ``train``)."""
    return [(name, seeds) for name, needed in models.items() if name in config["experiments"]
            for seeds in experiment_stacks(config, name, needed) if len(seeds) > 1]


def stack_experiments(config: dict, models: dict[str, list[int]]) -> dict[tuple[int, ...], list[str]]:
    """Each distinct stack of two or more seeds of ``models`` (:func:`model_seeds`) -> the
    experiments trained in such a stack: one pair of rules per stack of seeds
    (``train_stack_seeds1_3``, ``evaluate_stack_seeds1_3``), the experiment their wildcard."""
    out: dict[tuple[int, ...], list[str]] = {}
    for name, seeds in multi_seed_stacks(config, models):
        out.setdefault(tuple(seeds), []).append(name)
    return out


def device_groups(config: dict, names: list[str]) -> list[tuple[str, list[str], str | None]]:
    """The experiments of one stack size split by where they train: ``(prefix, names, device)``;
    those on the config's ``training.device`` (CPU or not) keep the stack's rule names (prefix "",
    device None: the config's resources), the others get rules of their own (prefix ``cpu_`` or
    ``gpu_``: ``train_stack_cpu_seeds1_3``), which ask for their device's resources."""
    on_cpu = str(config["training"].get("device", "auto")) == "cpu"
    same = [n for n in names if (experiment_training(config, n).device == "cpu") == on_cpu]
    other = [n for n in names if n not in same]
    groups = [("", same, None)] if same else []
    if other:
        groups.append(("gpu_", other, "auto") if on_cpu else ("cpu_", other, "cpu"))
    return groups


def stack_label(seeds: list[int] | tuple[int, ...]) -> str:
    """A stack's name in rule names, logs and group jobs: ``seeds1-3``."""
    return f"seeds{seeds[0]}-{seeds[-1]}"
