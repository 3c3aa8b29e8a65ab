"""Configuration checks: JSON-schema validation plus the cross-references a schema cannot express.

The Snakefile calls :func:`check_config` before any rule is defined, so a wrong type, a missing
required key, an unknown key or a dangling reference (an experiment naming an unknown data set, a
table naming an unknown experiment, a fine-tuning cycle) fails before any job runs, naming the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from pseudopairs.translation.settings import TranslateSection

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    """The config schema, each settings section (``x-settings: module:Class``) generated from its
    settings class (:func:`pseudopairs.settings.expand_schema`): a setting is declared once."""
    from pseudopairs.settings import expand_schema

    return expand_schema(yaml.safe_load(Path(path).read_text(encoding="utf-8")))


def _set_defaults(validator_class):
    """A validator that also fills in ``default:`` values from the schema (as Snakemake does)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(name, sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _schema_errors(config: dict, schema: dict) -> list[str]:
    validator_class = _set_defaults(jsonschema.validators.validator_for(schema))
    validator = validator_class(schema)
    messages = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path)):
        where = _key(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            messages.append(f"config key '{where}': unknown key(s) {', '.join(map(repr, extra))}")
        elif error.validator == "required":
            messages.append(f"config key '{where}': {error.message}")
        else:
            messages.append(f"config key '{where}': {error.message}")
    return messages


def _dataset_errors(datasets: dict, pseudopairs: dict) -> list[str]:
    messages = []
    for name, ds in datasets.items():
        where = f"config key 'datasets.{name}"
        if sum(key in ds for key in ("pseudopairs", "translation", "select")) > 1:
            messages.append(f"{where}': a data set is one of pseudopairs, a translation or a "
                            "selection, not several")
        if "select" in ds:
            from pseudopairs.data.select import check_select

            try:
                check_select(ds["select"], where=f"datasets.{name}.select")
            except ValueError as err:
                key, _, why = str(err).partition(": ")
                messages.append(f"config key '{key}': {why}")
        if "min_percentile" in ds and "pseudopairs" not in ds:
            messages.append(f"{where}.min_percentile': only pseudopair data sets are filtered")
        if "pseudopairs" in ds:
            pp = pseudopairs.get(ds["pseudopairs"])
            if pp is None:
                messages.append(f"{where}.pseudopairs': unknown pseudopair set {ds['pseudopairs']!r}")
            elif pp.get("queries") in datasets and pp.get("database") in datasets:
                queries, database = datasets[pp["queries"]], datasets[pp["database"]]
                if (ds["corpus"], ds["lang"]) != (queries["corpus"], database["lang"]):
                    messages.append(
                        f"{where}': pseudopair set {ds['pseudopairs']!r} gives {database['lang']!r} "
                        f"captions of {queries['corpus']!r} images, but the data set says "
                        f"corpus {ds['corpus']!r}, lang {ds['lang']!r}")
        if "translation" in ds:
            source = datasets.get(ds["translation"])
            if source is None:
                messages.append(f"{where}.translation': unknown data set {ds['translation']!r}")
            elif "pseudopairs" in source or "translation" in source:
                messages.append(f"{where}.translation': translate the captions of a corpus, not of "
                                f"the synthetic data set {ds['translation']!r}")
            elif source["corpus"] != ds["corpus"] or source["lang"] == ds["lang"]:
                messages.append(f"{where}': a translation of {ds['translation']!r} keeps its corpus "
                                f"{source['corpus']!r} and changes its language {source['lang']!r}")
    return messages


def _pseudopair_errors(config: dict) -> list[str]:
    messages = []
    datasets = config.get("datasets", {})
    experiments = config.get("experiments", {})
    pseudopairs = config.get("pseudopairs", {})
    for name, pp in pseudopairs.items():
        where = f"config key 'pseudopairs.{name}"
        if pp["source"] not in experiments:
            messages.append(f"{where}.source': unknown experiment {pp['source']!r}")
        for role in ("queries", "database"):
            ds = datasets.get(pp[role])
            if ds is None:
                messages.append(f"{where}.{role}': unknown data set {pp[role]!r}")
            elif "pseudopairs" in ds or "translation" in ds:
                messages.append(f"{where}.{role}': mine the captions of a corpus, not of the "
                                f"synthetic data set {pp[role]!r}")
        if pp["queries"] in datasets and pp["database"] in datasets:
            if datasets[pp["queries"]]["lang"] == datasets[pp["database"]]["lang"]:
                messages.append(f"{where}': queries and database are in the same language")
        messages += _criterion_errors(config, name, pp, where)
    stats = config.get("pseudopair_stats", {})
    for i, pair in enumerate(stats.get("compare", [])):
        for side in ("a", "b"):
            if pair[side] not in pseudopairs:
                messages.append(f"config key 'pseudopair_stats.compare.{i}.{side}': unknown pseudopair "
                                f"set {pair[side]!r}")
    for i, name in enumerate(stats.get("figure", {}).get("pseudopairs", [])):
        if name not in pseudopairs:
            messages.append(f"config key 'pseudopair_stats.figure.pseudopairs.{i}': unknown pseudopair "
                            f"set {name!r}")
    return messages


def _criterion_errors(config: dict, name: str, pp: dict, where: str) -> list[str]:
    """A pseudopair set's criterion and parameters, checked by the criteria registry — against
    the sizes of its queries and database when they are known before any job runs."""
    from pseudopairs.experiments import known_caption_count
    from pseudopairs.mining import criteria

    mining = dict(pp.get("mining", {}))
    criterion = mining.pop("criterion", criteria.DEFAULT_CRITERION)
    if criterion not in criteria.CRITERIA:
        return [f"{where}.mining.criterion': unknown criterion {criterion!r}; known: "
                f"{', '.join(criteria.CRITERIA.names())}"]
    datasets = config.get("datasets", {})
    counts = {role: known_caption_count(config, pp[role]) if pp[role] in datasets else None
              for role in ("queries", "database")}
    try:
        criteria.check_params(criterion, mining, n_queries=counts["queries"], n_database=counts["database"])
    except ValueError as err:
        key = str(err).split("=")[0].split(" ")[0]
        sizes = f" ({pp['queries']}: {counts['queries']}, {pp['database']}: {counts['database']} captions)" \
            if "exceeds" in str(err) else ""
        return [f"{where}.mining.{key}': {err}{sizes}"]
    return []


#: ``translation.translate`` keys that are not CTranslate2 settings (the job's CPU threads).
TRANSLATE_JOB_KEYS = TranslateSection.JOB_KEYS


def _translation_errors(config: dict) -> list[str]:
    """The ``translation`` section: present when a data set is a translation, its languages
    those of every translated data set, a download's files named, and its ``train`` and
    ``translate`` settings known to :mod:`pseudopairs.translation` (which names the bad key)."""
    datasets = config.get("datasets", {})
    translated = [name for name, ds in datasets.items() if "translation" in ds]
    if "translation" not in config:
        return [f"config key 'translation': required by the translated data set(s) {translated}"] if translated else []
    from pseudopairs.translation.settings import QUANTIZATIONS, TrainSettings

    section = config["translation"]
    model = section["model"]
    messages = []
    for name in translated:
        source = datasets.get(datasets[name]["translation"])
        if source is None:
            continue
        if (source["lang"], datasets[name]["lang"]) != (model["source_lang"], model["target_lang"]):
            messages.append(f"config key 'datasets.{name}': translates {source['lang']!r} -> "
                            f"{datasets[name]['lang']!r}, but the model in 'translation.model' goes "
                            f"{model['source_lang']!r} -> {model['target_lang']!r}")
    if model["quantization"] not in QUANTIZATIONS:
        messages.append(f"config key 'translation.model.quantization': {model['quantization']!r} is not "
                        f"one of {list(QUANTIZATIONS)}")
    if model["source"] == "download":
        for key in ("url", "checkpoint", "tokenizer"):
            if not model.get(key):
                messages.append(f"config key 'translation.model.{key}': required with source: download")
    else:
        for key in ("url", "checkpoint", "tokenizer"):
            # null unsets a key a layered file cannot remove (config/rehearsal.yaml)
            if model.get(key) is not None:
                messages.append(f"config key 'translation.model.{key}': only used with source: download "
                                "(source is train)")
        if model.get("parallel_text") is None and config.get("data", {}).get("source") != "world":
            messages.append("config key 'translation.model.parallel_text': required with source: train "
                            "outside the demo world (which provides its own parallel text)")
        for split, files in (model.get("parallel_text") or {}).items():
            for lang in (model["source_lang"], model["target_lang"]):
                if lang not in files:
                    messages.append(f"config key 'translation.model.parallel_text.{split}': no {lang!r} file")
    for settings, values in ((TrainSettings, section["train"]), (TranslateSection, section["translate"])):
        try:
            settings.from_dict(values)
        except (ValueError, TypeError) as err:
            key, _, why = str(err).partition(": ")
            messages.append(f"config key '{key}': {why}")
    return messages


def _pretrained_weights_errors(config: dict) -> list[str]:
    """features.weights naming the demo's pretrained extractor (rule pretrain_features) needs the
    demo world (its scenes) and a matching features.arch."""
    from pseudopairs import layout

    weights = (config.get("features") or {}).get("weights")
    arch = (config.get("features") or {}).get("arch", "resnet50")
    folder = layout.pretrained_features("ARCH").rsplit("/", 1)[0] + "/"
    if not isinstance(weights, str) or not weights.startswith(folder):
        return []
    if (config.get("data") or {}).get("source") != "world":
        return [f"config key 'features.weights': {weights} is written by rule pretrain_features, "
                f"which trains on the demo world's scenes; with data.source "
                f"{(config.get('data') or {}).get('source')!r} give 'imagenet' or a state dict of your own"]
    if weights != layout.pretrained_features(arch):
        return [f"config key 'features.weights': {weights} does not match features.arch {arch!r}; "
                f"rule pretrain_features writes {layout.pretrained_features(arch)}"]
    return []


def _settings_errors(config: dict) -> list[str]:
    """Each step's section checked by its settings class (the one the step itself reads), so a
    value the schema admits but the step would refuse fails here, naming the key."""
    from pseudopairs.features.settings import FeatureSettings
    from pseudopairs.mining.settings import MiningSettings
    from pseudopairs.model.settings import ModelSettings, TrainingSettings
    from pseudopairs.settings import SettingsError
    from pseudopairs.smalr.settings import FastTextSettings, HemSettings
    from pseudopairs.world.settings import WorldSettings

    from pseudopairs.features.pretraining import PretrainSettings

    checks = [(FeatureSettings, config.get("features"), ""), (ModelSettings, config.get("model"), ""),
              (TrainingSettings, config.get("training"), ""), (MiningSettings, config.get("mining"), ""),
              (PretrainSettings, config.get("feature_pretraining"), ""), (WorldSettings, config.get("world"), ""),
              (FastTextSettings, config.get("fasttext"), ""), (HemSettings, config.get("hem"), "")]
    for name, exp in config.get("experiments", {}).items():
        if "training" in exp:
            checks.append((TrainingSettings, {**config.get("training", {}), **exp["training"]},
                           f" (with the overrides of experiments.{name}.training)"))
        if "hem" in exp:
            checks.append((HemSettings, {**config.get("hem", {}), **exp["hem"]},
                           f" (with the overrides of experiments.{name}.hem)"))
        if "model" in exp:
            checks.append((ModelSettings, {**config.get("model", {}), **exp["model"]},
                           f" (with the overrides of experiments.{name}.model)"))
    messages = _pretrained_weights_errors(config)
    for cls, values, context in checks:
        if values is None:
            continue
        try:
            cls.from_dict(values)
        except SettingsError as err:
            key, _, why = str(err).partition(": ")
            messages.append(f"config key '{key}': {why}{context}")
    return messages


def experiment_dependencies(config: dict, name: str) -> list[str]:
    """Experiments whose models experiment ``name`` needs first: its fine-tuning source and the
    source of every pseudopair set behind its data sets."""
    exp = config["experiments"][name]
    deps = [exp["finetune"]] if "finetune" in exp else []
    datasets, pseudopairs = config.get("datasets", {}), config.get("pseudopairs", {})
    for ds in exp.get("c2i", []) + [d for pair in exp.get("c2c", []) for d in pair]:
        pp = pseudopairs.get(datasets.get(ds, {}).get("pseudopairs"))
        if pp and pp["source"] not in deps:
            deps.append(pp["source"])
    return [d for d in deps if d in config["experiments"]]


def _reference_errors(config: dict) -> list[str]:
    messages = []
    datasets = config.get("datasets", {})
    experiments = config.get("experiments", {})
    messages += _dataset_errors(datasets, config.get("pseudopairs", {}))
    messages += _pseudopair_errors(config)
    messages += _translation_errors(config)
    messages += _settings_errors(config)
    from pseudopairs.cluster import placeholder_errors

    messages += placeholder_errors(config)   # resources.slurm: an example value left in place
    for name, exp in experiments.items():
        for i, ds in enumerate(exp.get("c2i", [])):
            if ds not in datasets:
                messages.append(f"config key 'experiments.{name}.c2i.{i}': unknown data set {ds!r}")
        for i, pair in enumerate(exp.get("c2c", [])):
            for j, ds in enumerate(pair):
                if ds not in datasets:
                    messages.append(f"config key 'experiments.{name}.c2c.{i}.{j}': unknown data set {ds!r}")
            if all(ds in datasets for ds in pair):
                a, b = (datasets[ds] for ds in pair)
                # same images: the corpus of each side's images (a translation portion's
                # captions describe its comparable corpus' images: `images:`)
                if a.get("images", a["corpus"]) != b.get("images", b["corpus"]) or a["lang"] == b["lang"]:
                    messages.append(f"config key 'experiments.{name}.c2c.{i}': a c2c pair needs two "
                                    f"languages over the same images, got {pair}")
        if "finetune" in exp and exp["finetune"] not in experiments:
            messages.append(f"config key 'experiments.{name}.finetune': unknown experiment {exp['finetune']!r}")
    if not messages:  # dependency chains (fine-tuning, pseudopair sources) must end
        for name in experiments:
            path = _dependency_cycle(config, [name])
            if path:
                messages.append(f"config key 'experiments.{name}': dependency cycle {' -> '.join(path)} "
                                "(through finetune or the source of a pseudopair set)")
    messages += _method_check_errors(config)
    messages += _table_errors(config)
    if not messages:
        messages += _validation_language_errors(config)
    evaluation = config.get("evaluation", {})
    for i, lang in enumerate(evaluation.get("langs", [])):
        if not any(d["lang"] == lang and d["corpus"] == evaluation.get("corpus") for d in datasets.values()):
            messages.append(f"config key 'evaluation.langs.{i}': no data set of corpus "
                            f"{evaluation.get('corpus')!r} has language {lang!r}")
    return messages


def _table_errors(config: dict) -> list[str]:
    """Rows name known experiments (one, or one per language of the table); the published
    numbers of a language are as many as the table's columns; a table's test corpus is the
    evaluation corpus (its languages tested by every model: ``evaluation.langs``) or the
    translation corpus (languages some data set of it has)."""
    from pseudopairs.report.tables import RETRIEVAL_COLUMNS

    messages = []
    experiments = config.get("experiments", {})
    evaluation = config.get("evaluation", {})
    datasets = config.get("datasets", {})
    for table, spec in config.get("tables", {}).items():
        where = f"config key 'tables.{table}"
        langs = spec.get("langs", [])
        retrieval = spec.get("kind") == "retrieval"
        if retrieval and "langs" not in spec:
            messages.append(f"{where}.langs': required for a retrieval table")
        for key in ("columns", "test_corpus"):
            if key in spec and not retrieval:
                messages.append(f"{where}.{key}': only retrieval tables have it")
        columns = list(spec.get("columns") or RETRIEVAL_COLUMNS)
        test = spec.get("test_corpus") or evaluation.get("corpus")
        if retrieval and test == evaluation.get("corpus"):
            tested = evaluation.get("langs", [])
        elif retrieval and test == evaluation.get("translation_corpus"):
            tested = sorted({d["lang"] for d in datasets.values() if d["corpus"] == test})
        else:
            tested = langs
            if retrieval:
                messages.append(f"{where}.test_corpus': {test!r} is neither the evaluation corpus "
                                f"{evaluation.get('corpus')!r} nor the translation corpus "
                                f"{evaluation.get('translation_corpus')!r}")
        for i, lang in enumerate(langs):
            if lang not in tested:
                messages.append(f"{where}.langs.{i}': models are not tested in {lang!r} on corpus "
                                f"{test!r} (languages there: {', '.join(tested) or 'none'})")
        for i, row in enumerate(spec.get("rows", [])):
            at = f"{where}.rows.{i}"
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


def _validation_language_errors(config: dict) -> list[str]:
    """Every training language of every experiment has validation captions (the evaluation
    corpus, else the translation corpus)."""
    from pseudopairs.experiments import training_langs, validation_corpus

    messages = []
    for name in config.get("experiments", {}):
        for lang in training_langs(config, name):
            try:
                validation_corpus(config, lang)
            except ValueError as err:
                messages.append(f"config key 'experiments.{name}': {err}")
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


def _dependency_cycle(config: dict, path: list[str]) -> list[str] | None:
    for dep in experiment_dependencies(config, path[-1]):
        if dep == path[0]:
            return path + [dep]
        if dep not in path:
            found = _dependency_cycle(config, path + [dep])
            if found:
                return found
    return None


_JSON_TYPES = {"integer": int, "number": (int, float), "boolean": bool, "null": type(None),
               "string": str, "array": list, "object": dict}


def _fits_type(schema: dict, value: Any) -> bool:
    """Whether ``value`` is of a JSON type ``schema`` (or one of its oneOf/anyOf branches) admits;
    true when the schema names no type (nothing to coerce to)."""
    branches = [schema] + list(schema.get("oneOf", [])) + list(schema.get("anyOf", []))
    types = [t for b in branches for t in ([b["type"]] if isinstance(b.get("type"), str) else b.get("type", []))]
    if not types:
        return True
    for name in types:
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if isinstance(value, _JSON_TYPES[name]):
            return True
    return False


def coerce_config_strings(value: Any, schema: dict, root: dict | None = None) -> Any:
    """``value`` with every string that stands where ``schema`` wants a number, boolean, null or
    list parsed as YAML, where the result fits: ``snakemake --config seeds=[1]`` hands the config
    ``['1']`` (Snakemake reads a --config value that is not a plain number with YAML's BaseLoader,
    which keeps every scalar a string), and this makes it ``[1]`` before validation. Strings the
    schema admits, and strings that do not parse to a fitting value ('big'), stay as they are, so
    the schema check still names them. Walks properties, patternProperties, additionalProperties,
    items, ``$ref`` into ``#/$defs`` and allOf; mappings and lists are updated in place."""
    root = schema if root is None else root
    if "$ref" in schema and schema["$ref"].startswith("#/$defs/"):
        schema = {**root["$defs"][schema["$ref"].rsplit("/", 1)[1]],
                  **{k: v for k, v in schema.items() if k != "$ref"}}
    if isinstance(value, str):
        if _fits_type(schema, value):
            return value
        candidates = []
        try:
            candidates.append(yaml.safe_load(value))
        except yaml.YAMLError:
            pass
        try:  # YAML 1.1 reads 1e-3 as a string
            candidates.append(float(value))
        except ValueError:
            pass
        fitting = [c for c in candidates if not isinstance(c, str) and _fits_type(schema, c)]
        if not fitting:
            return value
        value = fitting[0]  # a list or mapping: its items are coerced below
    if isinstance(value, dict):
        for key in list(value):
            for sub in _property_schemas(schema, key):
                value[key] = coerce_config_strings(value[key], sub, root)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value[:] = [coerce_config_strings(item, schema["items"], root) for item in value]
    for sub in schema.get("allOf", []):
        if isinstance(sub, dict) and "if" not in sub:
            value = coerce_config_strings(value, sub, root)
    return value


def _property_schemas(schema: dict, key: str) -> list[dict]:
    """The schemas that apply to property ``key`` of an object of ``schema``."""
    import re

    if key in schema.get("properties", {}):
        return [schema["properties"][key]]
    matched = [sub for pattern, sub in schema.get("patternProperties", {}).items() if re.search(pattern, key)]
    if matched:
        return matched
    extra = schema.get("additionalProperties")
    return [extra] if isinstance(extra, dict) else []


def check_config(config: dict[str, Any], schema: dict | None = None) -> dict[str, Any]:
    """Validate ``config`` in place (filling schema defaults); raise :class:`ConfigError` listing
    every problem, each naming its key."""
    schema = load_schema() if schema is None else schema
    coerce_config_strings(config, schema)  # --config KEY=VALUE values arrive as strings
    from pseudopairs.rounds import expand_rounds

    try:  # iterated bootstrapping: the generated entries are checked like any other
        expand_rounds(config)
    except ValueError as err:
        raise ConfigError(f"invalid configuration:\n  {err}") from None
    messages = _schema_errors(config, schema)
    if not messages:
        messages = _reference_errors(config)
    if messages:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(messages))
    return config


def load_config(*paths: str | Path) -> dict[str, Any]:
    """Merge YAML files like Snakemake does (later files update earlier ones, recursively)."""
    merged: dict[str, Any] = {}
    for path in paths:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        _deep_update(merged, data)
    return merged


def _deep_update(target: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value
