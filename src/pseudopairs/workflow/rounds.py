"""Iterated bootstrapping as data (beyond the paper): a config ``rounds`` entry expands
into a chain of ordinary pseudopair sets, data sets, experiments and a table, so every round is
mined, trained, evaluated and described by the same rules as the paper's single round.

.. code-block:: yaml

    rounds:
      de_coco:                         # the chain's name
        source: de_coco                # round 0: an experiment of the config
        rounds: 3                      # rounds 1..3
        pseudopairs: {queries: coco.en, database: m30k.de}   # + optional mining: {criterion: …}
        dataset: {corpus: coco, lang: de}                     # what each round's pairs give
        experiment: {c2i: [m30k.de, coco.en]}                 # + c2c, training; the round's data
        finetune: true                 # round r starts from round r−1's model (false: retrain)
        c2c_pseudopairs: false         # true: also c2c over (the queries, the round's pairs)
        table: {langs: [de]}           # the per-round table (+ sum_sum: true)

expands, for round r (r = 1 … k; round r−1 is ``source`` when r = 1), into

- the pseudopair set ``{chain}.round{r}``: ``pseudopairs`` mined by round r−1's model;
- the data set ``{dataset.corpus}.{dataset.lang}-pseudo@{chain}.round{r}`` (its pairs);
- the experiment ``{chain}_round{r}``: ``experiment``'s data sets plus that data set (and, with
  ``c2c_pseudopairs``, the c2c pair (queries data set, it)), fine-tuned from round r−1 or from
  scratch;
- the table ``table_rounds_{chain}``: one row per round 0 … k (``table`` gives its languages), and
  §7.2 comparisons of round r with round r−1 (the overlap of their transferred captions).

Nothing is read out of names: every generated entry is written into the config before it is
checked, exactly as if it had been written by hand.

:func:`summary_spec` lists what the per-chain summary (``results/rounds_{chain}.csv`` and
``results/figures/rounds_{chain}.png``, :mod:`pseudopairs.report.rounds_summary`) reads: each round's
``metrics.json`` (validation and test scores) and, from round 1 on, its pairs — the pairs round r
trains on, mined by round r−1's model.
"""

from __future__ import annotations

import copy
from typing import Any

from pseudopairs.core import layout

KEYS = {"source", "rounds", "pseudopairs", "dataset", "experiment", "finetune", "c2c_pseudopairs", "table"}


def round_names(chain: str, r: int, dataset: dict) -> dict[str, str]:
    """The names of round ``r``'s pseudopair set, data set and experiment."""
    pseudopairs = f"{chain}.round{r}"
    return {"pseudopairs": pseudopairs,
            "dataset": f"{dataset['corpus']}.{dataset['lang']}-pseudo@{pseudopairs}",
            "experiment": f"{chain}_round{r}"}


def _check(chain: str, spec: Any) -> None:
    where = f"config key 'rounds.{chain}"
    if not isinstance(spec, dict):
        raise ValueError(f"{where}': must be an object")
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise ValueError(f"{where}': unknown key(s) {unknown}; known: {sorted(KEYS)}")
    for key in ("source", "rounds", "pseudopairs", "dataset", "experiment"):
        if key not in spec:
            raise ValueError(f"{where}.{key}': required")
    k = spec["rounds"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 10:
        raise ValueError(f"{where}.rounds': must be a whole number in [1, 10], got {k!r}")
    for key in ("pseudopairs", "dataset", "experiment"):
        if not isinstance(spec[key], dict):
            raise ValueError(f"{where}.{key}': must be an object")
    if {"corpus", "lang"} - set(spec["dataset"]):
        raise ValueError(f"{where}.dataset': needs corpus and lang")
    if {"queries", "database"} - set(spec["pseudopairs"]):
        raise ValueError(f"{where}.pseudopairs': needs queries and database")
    if "c2i" not in spec["experiment"]:
        raise ValueError(f"{where}.experiment.c2i': required")


def _within(generated: Any, stored: Any) -> bool:
    """``stored`` is ``generated`` with, at most, schema defaults added (dict keys, list items)."""
    if isinstance(generated, dict):
        return isinstance(stored, dict) and all(k in stored and _within(v, stored[k])
                                                for k, v in generated.items())
    if isinstance(generated, list):
        return (isinstance(stored, list) and len(stored) == len(generated)
                and all(_within(g, s) for g, s in zip(generated, stored)))
    return generated == stored


def _put(target: dict, name: str, entry: dict, *, where: str, what: str) -> None:
    """Add a generated entry; the same entry again is a no-op (expanding twice is harmless), a
    different one under that name is an error."""
    if name in target and not _within(entry, target[name]):
        raise ValueError(f"config key '{where}': would overwrite {what}.{name}, which the config "
                         "already has")
    target[name] = entry


def expand_rounds(config: dict) -> dict:
    """Write every chain of ``config['rounds']`` into the config's pseudopair sets, data sets,
    experiments, tables and §7.2 comparisons (in place; returns ``config``). An entry that
    already exists under a generated name is an error (a chain never overwrites), unless it is
    exactly what the chain generates (expanding twice changes nothing)."""
    chains = config.get("rounds") or {}
    for chain, spec in chains.items():
        _check(chain, spec)
        previous = spec["source"]
        rows = [{"label": f"round 0 ({previous})", "experiment": previous, "beyond_paper": True}]
        for r in range(1, spec["rounds"] + 1):
            names = round_names(chain, r, spec["dataset"])
            pseudopairs = {"source": previous, **copy.deepcopy(spec["pseudopairs"])}
            dataset = {**copy.deepcopy(spec["dataset"]), "pseudopairs": names["pseudopairs"]}
            exp = copy.deepcopy(spec["experiment"])
            exp["c2i"] = [*exp["c2i"], names["dataset"]]
            if spec.get("c2c_pseudopairs"):
                exp["c2c"] = [*exp.get("c2c", []), [spec["pseudopairs"]["queries"], names["dataset"]]]
            if spec.get("finetune", True):
                exp["finetune"] = previous
            for section, name, entry in (("pseudopairs", names["pseudopairs"], pseudopairs),
                                         ("datasets", names["dataset"], dataset),
                                         ("experiments", names["experiment"], exp)):
                _put(config.setdefault(section, {}), name, entry, where=f"rounds.{chain}", what=section)
            comparisons = config.setdefault("pseudopair_stats", {}).setdefault("compare", [])
            covered = config["pseudopair_stats"].get("sets")  # None: every set
            if r > 1:
                pair = {"a": names["pseudopairs"], "b": round_names(chain, r - 1, spec["dataset"])["pseudopairs"]}
                in_stats = covered is None or {pair["a"], pair["b"]} <= set(covered)
                if in_stats and pair not in comparisons:
                    comparisons.append(pair)
            rows.append({"label": f"round {r}", "experiment": names["experiment"], "beyond_paper": True})
            previous = names["experiment"]
        table = {"title": f"Iterated bootstrapping ({chain}): rounds 0–{spec['rounds']} (beyond the paper)",
                 "kind": "retrieval", **copy.deepcopy(spec.get("table", {"langs": ["de"]})), "rows": rows}
        _put(config.setdefault("tables", {}), f"table_rounds_{chain}", table, where=f"rounds.{chain}",
             what="tables")
    return config


# --------------------------------------------------------------------------------------------
# The per-chain summary (results/rounds_{chain}.csv and its figure)


def chains(config: dict) -> list[str]:
    """The names of the config's iterated-bootstrapping chains."""
    return list(config.get("rounds") or {})


def chain_rounds(config: dict, chain: str) -> list[dict[str, Any]]:
    """Round 0 … k of ``chain``: ``{"round", "experiment", "pseudopairs"}`` (round 0: the source
    experiment, no pairs; round r: the experiment trained on ``{chain}.round{r}``)."""
    try:
        spec = config["rounds"][chain]
    except (KeyError, TypeError):
        raise ValueError(f"config key 'rounds': unknown chain {chain!r}") from None
    out = [{"round": 0, "experiment": spec["source"], "pseudopairs": None}]
    for r in range(1, spec["rounds"] + 1):
        names = round_names(chain, r, spec["dataset"])
        out.append({"round": r, "experiment": names["experiment"], "pseudopairs": names["pseudopairs"]})
    return out


def summary_spec(config: dict, chain: str) -> dict[str, Any]:
    """What the ``rounds-summary`` step of ``chain`` reads: the metric (the Sum of each language of
    the chain's table, summed: Sum(Sum) for two), the seeds, the top-N of the §7.2 top share, and
    per round its experiment's ``metrics.json`` and (round ≥ 1) its pairs and mining stats per
    seed (the rule's inputs)."""
    table = config["tables"][f"table_rounds_{chain}"]
    seeds = [str(seed) for seed in config["seeds"]]
    rounds = []
    for entry in chain_rounds(config, chain):
        pp = entry["pseudopairs"]
        rounds.append({**entry,
                       "metrics": {s: layout.metrics(entry["experiment"], s) for s in seeds},
                       "pairs": {s: layout.pseudopair_pairs(pp, s) for s in seeds} if pp else {},
                       "stats": {s: layout.pseudopair_mining_stats(pp, s) for s in seeds} if pp else {}})
    return {"chain": chain, "langs": list(table["langs"]), "seeds": seeds,
            "top": config.get("pseudopair_stats", {}).get("top", 150), "rounds": rounds}


def summary_inputs(config: dict, chain: str) -> list[str]:
    spec = summary_spec(config, chain)
    return [path for entry in spec["rounds"] for part in ("metrics", "pairs", "stats")
            for path in entry[part].values()]
