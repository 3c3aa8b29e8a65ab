"""The report stage's contract: what each report job reads — a table (:func:`table_spec`), the
method check (:func:`method_check_spec`), the training curves, the §7.2 statistics
(:func:`pseudopair_stats_spec`) and Figure 1 (:func:`pseudopair_figure_spec`), each with the
files its rule is given — and :func:`check` of the ``tables``, ``method_check`` and
``pseudopair_stats`` sections."""

from __future__ import annotations

from typing import Any

from pseudopairs.core import layout
from pseudopairs.data.contract import dataset
from pseudopairs.data.experiments import (seeds_by_experiment, shown_models, table_experiments, table_retrieval_keys,
                                     table_seeds, table_test_corpus, uses_pseudopairs)
from pseudopairs.mining.contract import criterion, pseudopair_set, pseudopair_sets


def pseudopair_stats_spec(config: dict) -> dict[str, Any]:
    """What the §7.2 statistics step reads: every pseudopair set (its source, criterion and the
    paper's figures), the seeds, the top-N of "the top 150 captions", the set comparisons and, in
    the demo world, its caption meanings and scenes (``meanings``; empty for real data)."""
    stats = config.get("pseudopair_stats", {})
    names = stats_sets(config)
    meanings = {}
    if config.get("data", {}).get("source") == "world":
        # the demo world knows what each caption says: the precision of every set
        # (pseudopairs.mining.precision); the real data do not
        meanings = {"captions": layout.world_caption_meanings(), "scenes": layout.world_manifest(),
                    "database_corpus": {name: dataset(config, pp["database"])["corpus"]
                                        for name, pp in config.get("pseudopairs", {}).items()}}
    return {
        "sets": {name: {"source": pp["source"], "criterion": criterion(config, name),
                        "queries": pp["queries"], "database": pp["database"],
                        "paper": pp.get("paper", {})}
                 for name, pp in config.get("pseudopairs", {}).items() if name in names},
        "seeds": list(config["seeds"]),
        "top": stats.get("top", 150),
        "compare": list(stats.get("compare", [])),
        # the files the step reads (the rule's inputs): set -> seed -> {pairs, stats}
        "files": {name: {str(seed): {"pairs": layout.pseudopair_pairs(name, seed),
                                     "stats": layout.pseudopair_mining_stats(name, seed)}
                         for seed in config["seeds"]}
                  for name in names},
        "meanings": meanings,
    }


def stats_sets(config: dict) -> list[str]:
    """The pseudopair sets the §7.2 statistics cover: ``pseudopair_stats.sets``, else every set."""
    chosen = config.get("pseudopair_stats", {}).get("sets")
    return pseudopair_sets(config) if chosen is None else [n for n in pseudopair_sets(config) if n in chosen]


def pseudopair_stats_inputs(config: dict) -> list[str]:
    spec = pseudopair_stats_spec(config)
    meanings = [spec["meanings"][k] for k in ("captions", "scenes")] if spec["meanings"] else []
    return [path for by_seed in spec["files"].values() for pair in by_seed.values()
            for path in pair.values()] + meanings


def pseudopair_figure_spec(config: dict) -> dict[str, Any]:
    """Figure 1: which sets, which seed (the first), how many images, and where the images of
    the queries' corpus are listed."""
    figure = config.get("pseudopair_stats", {}).get("figure")
    if not figure:
        raise ValueError("config key 'pseudopair_stats.figure': not set, so there is no Figure 1")
    names = list(figure["pseudopairs"])
    corpora = {dataset(config, pseudopair_set(config, n)["queries"])["corpus"] for n in names}
    if len(corpora) != 1:
        raise ValueError(f"config key 'pseudopair_stats.figure.pseudopairs': the sets annotate "
                         f"images of different corpora {sorted(corpora)}")
    seed = config["seeds"][0]
    return {
        "pairs": {name: layout.pseudopair_pairs(name, seed) for name in names},
        "sources": {name: pseudopair_set(config, name)["source"] for name in names},
        "seed": seed,
        "images": layout.images(corpora.pop(), "train"),
        "n_images": figure.get("images", 4),
        "sample_seed": figure.get("seed", 0),
    }


def pseudopair_figure_inputs(config: dict) -> list[str]:
    spec = pseudopair_figure_spec(config)
    return [*spec["pairs"].values(), spec["images"]]


def table_entry(config: dict, table: str) -> dict[str, Any]:
    """The table's config entry as its steps read it: its own ``seeds``, if any, as the list
    (a name of ``seed_lists`` resolved)."""
    entry = dict(config["tables"][table])
    if "seeds" in entry:
        entry["seeds"] = table_seeds(config, table)
    return entry


def table_spec(config: dict, table: str) -> dict[str, Any]:
    """The ``table`` step's input: the table's config entry, which test set of metrics.json it
    reads (``retrieval_key``) and the ``metrics.json`` of every experiment it shows, per seed of
    the table (experiment -> seed -> path; the rule's inputs)."""
    spec = {**table_entry(config, table),
            "metrics": {name: {str(seed): layout.metrics(name, seed) for seed in table_seeds(config, table)}
                        for name in table_experiments(config, table)}}
    if table_test_corpus(config, table) != config["evaluation"]["corpus"]:
        spec["retrieval_key"] = "portion_retrieval"
    if config["tables"][table].get("lang_test_corpora"):
        spec["retrieval_keys"] = table_retrieval_keys(config, table)
    clc = list(dict.fromkeys(row["experiment"] for row in config["tables"][table]["rows"] if row.get("clc")))
    if clc:   # rows with paper 002's Cross-Lingual Consistency read metrics.clc.json
        spec["clc_metrics"] = {name: {str(seed): layout.clc_metrics(name, seed)
                                      for seed in table_seeds(config, table)} for name in clc}
    return spec


def table_inputs(config: dict, table: str) -> list[str]:
    spec = table_spec(config, table)
    return [path for part in ("metrics", "clc_metrics") for by_seed in spec.get(part, {}).values()
            for path in by_seed.values()]


def parameters_figures(config: dict) -> dict[str, str]:
    """Figure name -> the table that declares it (``tables.T.parameters_figure.name``)."""
    return {spec["parameters_figure"]["name"]: table
            for table, spec in config.get("tables", {}).items() if spec.get("parameters_figure")}


def parameters_figure_spec(config: dict, name: str) -> dict[str, Any]:
    """What the ``parameters-figure`` step reads (paper 002's Figure 3): which parameter count
    it plots (``count``: training or test_time), the table's languages,
    columns, test set and rows (those with one experiment), each experiment's ``metrics.json``
    per seed of the table and, for a ``reference``, its HEM vocabularies and the widths of HEM's
    rows (``hem.pca_dim``) and of its projection (``embedding_dim``)."""
    from pseudopairs.model.contract import experiment_model
    from pseudopairs.model.smalr_contract import hem_settings

    table = parameters_figures(config)[name]
    spec = config["tables"][table]
    figure = spec["parameters_figure"]
    seeds = table_seeds(config, table)
    rows = [{k: row[k] for k in ("label", "experiment", "beyond_paper", "paper") if k in row}
            for row in spec["rows"] if "experiment" in row and not row.get("clc")]
    names = list(dict.fromkeys(row["experiment"] for row in rows))
    reference = figure.get("reference")
    if reference:
        names = list(dict.fromkeys(names + [reference["experiment"]]))
        reference = {"label": reference["label"], "experiment": reference["experiment"],
                     "row_dim": int(hem_settings(config, reference["experiment"])["pca_dim"]),
                     "output_dim": experiment_model(config, reference["experiment"]).embedding_dim,
                     "vocab": {str(seed): layout.hem_vocabulary(reference["experiment"], seed)
                               for seed in seeds}}
    out = {"name": name, "table": table, "title": figure.get("title", spec["title"]),
           "count": figure.get("count", "training"),
           "langs": list(spec["langs"]), "columns": spec.get("columns"), "rows": rows,
           "metrics": {n: {str(seed): layout.metrics(n, seed) for seed in seeds} for n in names}}
    if reference:
        out["reference"] = reference
    if table_test_corpus(config, table) != config["evaluation"]["corpus"]:
        out["retrieval_key"] = "portion_retrieval"
    if spec.get("lang_test_corpora"):
        out["retrieval_keys"] = table_retrieval_keys(config, table)
    return out


def parameters_figure_inputs(config: dict, name: str) -> list[str]:
    spec = parameters_figure_spec(config, name)
    paths = [p for by_seed in spec["metrics"].values() for p in by_seed.values()]
    return paths + list(spec.get("reference", {}).get("vocab", {}).values())


def method_check_spec(config: dict) -> dict[str, Any]:
    """The ``method-check`` step's input: the ``method_check`` section, the tables it names, the
    rows of each pseudopair table that train on pseudopairs, and the ``metrics.json`` of every
    experiment involved, per seed (experiment -> seed -> path; the rule's inputs) for the seeds of
    the tables it is compared in (each table in the spec carries its resolved ``seeds``)."""
    section = config.get("method_check", {})
    pseudopairs = [{**entry, "rows": [name for name in table_experiments(config, entry["table"])
                                      if uses_pseudopairs(config, name)]}
                   for entry in section.get("pseudopairs", [])]
    # each comparison averages over the seeds of the table it is read from
    compared = seeds_by_experiment(
        config, [(e["table"], [e["worse"], e["better"]]) for e in section.get("effects", [])]
        + [(e["table"], [e["source"], e["control"], *e["rows"]]) for e in pseudopairs])
    tables = sorted({e["table"] for e in section.get("effects", [])} | {e["table"] for e in pseudopairs})
    return {"min_t": section.get("min_t", 2.0), "effects": list(section.get("effects", [])),
            "pseudopairs": pseudopairs,
            "tables": {t: {**table_entry(config, t), "seeds": table_seeds(config, t)} for t in tables},
            "metrics": {name: {str(seed): layout.metrics(name, seed) for seed in seeds}
                        for name, seeds in compared.items()},
            # every run of every table: how its training ended (training_runs.csv)
            "runs": {name: {str(seed): layout.metrics(name, seed) for seed in seeds}
                     for name, seeds in shown_models(config).items()}}


def method_check_inputs(config: dict) -> list[str]:
    spec = method_check_spec(config)
    return list(dict.fromkeys(path for part in ("metrics", "runs") for by_seed in spec[part].values()
                              for path in by_seed.values()))


def training_curves_spec(config: dict) -> dict[str, Any]:
    """The ``training-curves`` step's input: the tables and the training log of every experiment
    any table shows, per seed (experiment -> seed -> path; the rule's inputs)."""
    return {"tables": {t: table_entry(config, t) for t in config["tables"]},
            "logs": {name: {str(seed): layout.train_log(name, seed) for seed in seeds}
                     for name, seeds in shown_models(config).items()}}


def training_logs(config: dict) -> list[str]:
    """The training logs of every experiment any table shows, for every seed (training curves)."""
    return [path for by_seed in training_curves_spec(config)["logs"].values() for path in by_seed.values()]


# --------------------------------------------------------------------------------------------
# The config check


def check(config: dict) -> list[str]:
    from pseudopairs.smalr.clc_contract import check as clc_errors   # the tables' CLC rows (002 §3.4)

    return (_seed_list_errors(config) + _pseudopair_stats_errors(config) + _method_check_errors(config)
            + _table_errors(config) + _parameters_figure_errors(config) + clc_errors(config))


def _seed_list_errors(config: dict) -> list[str]:
    """A table's seeds that name a list name one of ``seed_lists``."""
    messages = []
    for table in config.get("tables", {}):
        try:
            table_seeds(config, table)
        except ValueError as err:
            messages.append(str(err))
    return messages


def _parameters_figure_errors(config: dict) -> list[str]:
    """A ``parameters_figure`` belongs to a retrieval table, its name is used once, and its
    ``reference`` names an experiment with the hem text encoder."""
    from pseudopairs.model.contract import uses_hem

    messages, seen = [], {}
    experiments = config.get("experiments", {})
    for table, spec in config.get("tables", {}).items():
        figure = spec.get("parameters_figure")
        if not figure:
            continue
        where = f"config key 'tables.{table}.parameters_figure"
        if spec.get("kind") != "retrieval":
            messages.append(f"{where}': only a retrieval table has one")
        if figure["name"] in seen:
            messages.append(f"{where}.name': {figure['name']!r} is also the figure of "
                            f"tables.{seen[figure['name']]}")
        seen.setdefault(figure["name"], table)
        reference = figure.get("reference")
        if reference:
            name = reference["experiment"]
            if name not in experiments:
                messages.append(f"{where}.reference.experiment': unknown experiment {name!r}")
            elif not uses_hem(config, name):
                messages.append(f"{where}.reference.experiment': {name!r} does not use the hem "
                                "text encoder (its HEM vocabulary gives the words counted)")
    return messages


def _pseudopair_stats_errors(config: dict) -> list[str]:
    """The §7.2 comparisons and Figure 1 name known pseudopair sets."""
    pseudopairs = config.get("pseudopairs", {})
    stats = config.get("pseudopair_stats", {})
    messages = [f"config key 'pseudopair_stats.sets.{i}': unknown pseudopair set {name!r}"
                for i, name in enumerate(stats.get("sets") or []) if name not in pseudopairs]
    covered = set(stats_sets(config))
    for i, pair in enumerate(stats.get("compare", [])):
        for side in ("a", "b"):
            if pair[side] not in pseudopairs:
                messages.append(f"config key 'pseudopair_stats.compare.{i}.{side}': unknown pseudopair "
                                f"set {pair[side]!r}")
            elif pair[side] not in covered:
                messages.append(f"config key 'pseudopair_stats.compare.{i}.{side}': set {pair[side]!r} "
                                f"is not among pseudopair_stats.sets")
    for i, name in enumerate(stats.get("figure", {}).get("pseudopairs", [])):
        if name not in pseudopairs:
            messages.append(f"config key 'pseudopair_stats.figure.pseudopairs.{i}': unknown pseudopair "
                            f"set {name!r}")
    return messages


def _method_check_errors(config: dict) -> list[str]:
    """Every effect names a table and two of its experiments; pseudopair entries name a table and
    experiments that exist."""
    section = config.get("method_check", {})
    tables, experiments = config.get("tables", {}), config.get("experiments", {})
    messages = []
    for i, effect in enumerate(section.get("effects", [])):
        where = f"config key 'method_check.effects.{i}"
        if effect["table"] not in tables:
            messages.append(f"{where}.table': unknown table {effect['table']!r}")
            continue
        shown = {row.get("experiment") for row in tables[effect["table"]]["rows"]}
        for side in ("better", "worse"):
            if effect[side] not in shown:
                messages.append(f"{where}.{side}': {effect[side]!r} is not a row of {effect['table']}")
    for i, entry in enumerate(section.get("pseudopairs", [])):
        where = f"config key 'method_check.pseudopairs.{i}"
        if entry["table"] not in tables:
            messages.append(f"{where}.table': unknown table {entry['table']!r}")
        for side in ("source", "control"):
            if entry[side] not in experiments:
                messages.append(f"{where}.{side}': unknown experiment {entry[side]!r}")
    return messages


def _table_errors(config: dict) -> list[str]:
    """Rows name known experiments (one, or one per language of the table); the published
    numbers of a language are as many as the table's columns; a table's test corpus is the
    evaluation corpus (its languages tested by every model: ``evaluation.langs``) or the
    translation corpus (languages some data set of it has)."""
    messages = []
    evaluation = config.get("evaluation", {})
    datasets = config.get("datasets", {})
    for table, spec in config.get("tables", {}).items():
        where = f"config key 'tables.{table}"
        langs = spec.get("langs", [])
        retrieval = spec.get("kind") == "retrieval"
        if retrieval and "langs" not in spec:
            messages.append(f"{where}.langs': required for a retrieval table")
        for key in ("columns", "test_corpus", "lang_test_corpora"):
            if key in spec and not retrieval:
                messages.append(f"{where}.{key}': only retrieval tables have it")
        default = spec.get("test_corpus") or evaluation.get("corpus")
        by_lang = spec.get("lang_test_corpora") or {}
        for lang in by_lang:
            if lang not in langs:
                messages.append(f"{where}.lang_test_corpora.{lang}': not one of the table's langs {langs}")
        for test, key in [(default, "test_corpus")] + [(c, f"lang_test_corpora.{lang}") for lang, c in by_lang.items()]:
            if retrieval and test not in (evaluation.get("corpus"), evaluation.get("translation_corpus")):
                messages.append(f"{where}.{key}': {test!r} is neither the evaluation corpus "
                                f"{evaluation.get('corpus')!r} nor the translation corpus "
                                f"{evaluation.get('translation_corpus')!r}")
        for i, lang in enumerate(langs):
            test = by_lang.get(lang) or default
            if retrieval and test == evaluation.get("corpus"):
                tested = evaluation.get("langs", [])
            elif retrieval and test == evaluation.get("translation_corpus"):
                tested = sorted({d["lang"] for d in datasets.values() if d["corpus"] == test})
            else:
                tested = langs
            if lang not in tested:
                messages.append(f"{where}.langs.{i}': models are not tested in {lang!r} on corpus "
                                f"{test!r} (languages there: {', '.join(tested) or 'none'})")
        messages += _row_errors(config, table, spec)
    return messages


def _row_errors(config: dict, table: str, spec: dict) -> list[str]:
    """A table's rows: one experiment or one per language of the table, all known; as many
    published numbers per language as the table has columns."""
    from pseudopairs.report.tables import RETRIEVAL_COLUMNS   # pandas: only when checking

    experiments = config.get("experiments", {})
    langs = spec.get("langs", [])
    retrieval = spec.get("kind") == "retrieval"
    columns = list(spec.get("columns") or RETRIEVAL_COLUMNS)
    messages = []
    for i, row in enumerate(spec.get("rows", [])):
        at = f"config key 'tables.{table}.rows.{i}"
        if "experiment" in row and "experiments" in row:
            messages.append(f"{at}': give experiment or per-language experiments, not both")
        if "experiment" in row and row["experiment"] not in experiments:
            messages.append(f"{at}.experiment': unknown experiment {row['experiment']!r}")
        for lang, name in row.get("experiments", {}).items():
            if lang not in langs:
                messages.append(f"{at}.experiments.{lang}': the table has no language {lang!r}")
            if name not in experiments:
                messages.append(f"{at}.experiments.{lang}': unknown experiment {name!r}")
        if "experiments" in row and not retrieval:
            messages.append(f"{at}.experiments': per-language rows are for retrieval tables")
        for lang, values in row.get("paper", {}).items():
            if not retrieval or not isinstance(values, list) or lang not in langs:
                continue   # numbers of a language the table does not show are not shown
            if len(values) != len(columns):
                messages.append(f"{at}.paper.{lang}': {len(values)} numbers for the table's "
                                f"{len(columns)} columns {columns}")
    return messages
