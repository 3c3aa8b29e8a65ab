"""Seed blocks: which seeds of an experiment are trained together in one job (config
``training.stack``; the ``train`` step, :mod:`pseudopairs.model.stack_training`). The workflow's
rules (``workflow/rules/train.smk``) are generated from :func:`stack_experiments`, one pair per
distinct block, the experiment a wildcard; each job is a block's
:func:`~pseudopairs.model.contract.training_job` and
:func:`~pseudopairs.evaluation.contract.evaluation_job`.

Blocks are fixed by seed numbers — the sizes of consecutive blocks from seed 1, the last size
repeating — and hold the seeds the config's outputs need (:func:`model_seeds`), so adding a seed
in a new block changes no other block's job.
"""

from __future__ import annotations

from pseudopairs.data.contract import dataset, dataset_kind
from pseudopairs.experiments import experiment, shown_models
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


def seed_block(seed: int, sizes: list[int]) -> int:
    """The index of the seed block holding ``seed`` (``training.stack``: the sizes of consecutive
    blocks from seed 1, the last size repeating); a seed below 1 is a block of its own (< 0)."""
    if seed < 1:
        return seed - 1
    start = 1
    for index, size in enumerate(sizes):
        if seed < start + size:
            return index
        start += size
    return len(sizes) + (seed - start) // sizes[-1]


def seed_blocks(config: dict, name: str, seeds: list[int]) -> list[list[int]]:
    """Experiment ``name``'s ``seeds`` (those the outputs need: :func:`model_seeds`) grouped into
    the blocks its models are trained in, one job each, by ``training.stack`` (the experiment's
    own, else the config's). Block boundaries are fixed by seed numbers, so a seed added in a new
    block changes no other block's job."""
    sizes = experiment_training(config, name).stack
    blocks: dict[int, list[int]] = {}
    for seed in sorted(seeds):
        blocks.setdefault(seed_block(seed, sizes), []).append(seed)
    return list(blocks.values())


def stacks(config: dict, models: dict[str, list[int]]) -> list[tuple[str, list[int]]]:
    """Every (experiment, seeds) block of two or more seeds of ``models`` (:func:`model_seeds`):
    one stacked ``train`` job each (a block of one seed is trained by rule train)."""
    return [(name, block) for name, seeds in models.items() if name in config["experiments"]
            for block in seed_blocks(config, name, seeds) if len(block) > 1]


def stack_experiments(config: dict, models: dict[str, list[int]]) -> dict[tuple[int, ...], list[str]]:
    """Each distinct seed block of two or more seeds of ``models`` (:func:`model_seeds`) -> the
    experiments trained in that block: one pair of rules per block (``train_stack_seeds1_3``,
    ``evaluate_stack_seeds1_3``), the experiment a wildcard of them."""
    out: dict[tuple[int, ...], list[str]] = {}
    for name, seeds in stacks(config, models):
        out.setdefault(tuple(seeds), []).append(name)
    return out


def block_label(seeds: list[int] | tuple[int, ...]) -> str:
    """A block's name in rule names, logs and group jobs: ``seeds1-3``."""
    return f"seeds{seeds[0]}-{seeds[-1]}"
