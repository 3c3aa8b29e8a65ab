"""Experiments and tables as data: the accessors several stages share (which experiment a name
is, which experiments and seeds a table shows, which models the tables need). What a stage's
jobs read is that stage's contract (``pseudopairs.<stage>.contract``); nothing here looks inside
names."""

from __future__ import annotations

from typing import Any

from pseudopairs.data.contract import config_entry, dataset_kind


def experiment(config: dict, name: str) -> dict[str, Any]:
    return config_entry(config, "experiments", name, "experiment")


def uses_pseudopairs(config: dict, name: str) -> bool:
    """Whether experiment ``name`` trains on a pseudopair data set (c2i or c2c)."""
    exp = experiment(config, name)
    sets = exp["c2i"] + [d for pair in exp.get("c2c", []) for d in pair]
    return any(dataset_kind(config, ds) == "pseudopairs" for ds in sets)


def row_experiments(row: dict) -> list[str]:
    """Every experiment a table row shows: its ``experiment``, or the values of its per-language
    ``experiments`` (paper 004's monolingual rows: one model per language), or none."""
    if "experiments" in row:
        return list(dict.fromkeys(row["experiments"].values()))
    return [row["experiment"]] if row.get("experiment") else []


def table_experiments(config: dict, table: str) -> list[str]:
    rows = config["tables"][table]["rows"]
    return list(dict.fromkeys(name for row in rows for name in row_experiments(row)))


def table_seeds(config: dict, table: str) -> list[int]:
    """The seeds a table averages over: its own ``seeds`` (a list, or the name of one of the
    config's ``seed_lists``), else the config's."""
    seeds = config["tables"][table].get("seeds") or config["seeds"]
    if isinstance(seeds, str):
        lists = config.get("seed_lists") or {}
        if seeds not in lists:
            raise ValueError(f"config key 'tables.{table}.seeds': no seed list {seeds!r} under "
                             f"seed_lists (known: {', '.join(sorted(lists)) or 'none'})")
        seeds = lists[seeds]
    return list(seeds)


def table_test_corpus(config: dict, table: str) -> str:
    """The corpus whose test split a retrieval table reports: its ``test_corpus``, else the
    evaluation corpus."""
    return config["tables"][table].get("test_corpus") or config["evaluation"]["corpus"]


def table_lang_test_corpus(config: dict, table: str, lang: str) -> str:
    """The corpus whose test split a retrieval table reports in language ``lang``: the table's
    ``lang_test_corpora[lang]`` (paper 002's Table 2: En and De on the comparable portion's five
    captions per image, Fr and Cs on the translation portion's one), else :func:`table_test_corpus`."""
    return (config["tables"][table].get("lang_test_corpora") or {}).get(lang) or table_test_corpus(config, table)


def table_retrieval_keys(config: dict, table: str) -> dict[str, str]:
    """Which test set of ``metrics.json`` a retrieval table reads per language: ``retrieval`` (the
    evaluation corpus) or ``portion_retrieval`` (the translation corpus)."""
    evaluation = config["evaluation"]["corpus"]
    return {lang: "retrieval" if table_lang_test_corpus(config, table, lang) == evaluation else "portion_retrieval"
            for lang in config["tables"][table].get("langs", [])}


def shown_models(config: dict) -> dict[str, list[int]]:
    """Every experiment any table shows, with the seeds those tables average over (a table's own
    ``seeds``, else the config's; the union where tables differ)."""
    return seeds_by_experiment(config, [(table, table_experiments(config, table))
                                        for table in config.get("tables", {})])


def seeds_by_experiment(config: dict, groups: list[tuple[str, list[str]]]) -> dict[str, list[int]]:
    """Each experiment named in ``groups`` (``(table, experiments)`` pairs) with the seeds of the
    tables it appears in (:func:`table_seeds`; the union, in first-seen order)."""
    models: dict[str, list[int]] = {}
    for table, names in groups:
        for name in names:
            seeds = models.setdefault(name, [])
            seeds += [seed for seed in table_seeds(config, table) if seed not in seeds]
    return models
