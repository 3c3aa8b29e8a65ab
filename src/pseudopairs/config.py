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

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


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


def _reference_errors(config: dict) -> list[str]:
    messages = []
    datasets = config.get("datasets", {})
    experiments = config.get("experiments", {})
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
                if a["corpus"] != b["corpus"] or a["lang"] == b["lang"]:
                    messages.append(f"config key 'experiments.{name}.c2c.{i}': a c2c pair needs two "
                                    f"languages over the same images, got {pair}")
        if "finetune" in exp and exp["finetune"] not in experiments:
            messages.append(f"config key 'experiments.{name}.finetune': unknown experiment {exp['finetune']!r}")
    for name in experiments:  # fine-tuning chains must end
        seen, current = [name], experiments[name].get("finetune")
        while current in experiments:
            if current in seen:
                messages.append(f"config key 'experiments.{name}.finetune': cycle {' -> '.join(seen + [current])}")
                break
            seen.append(current)
            current = experiments[current].get("finetune")
    for table, spec in config.get("tables", {}).items():
        if spec.get("kind") == "retrieval" and "langs" not in spec:
            messages.append(f"config key 'tables.{table}.langs': required for a retrieval table")
        for i, row in enumerate(spec.get("rows", [])):
            if "experiment" in row and row["experiment"] not in experiments:
                messages.append(f"config key 'tables.{table}.rows.{i}.experiment': unknown experiment {row['experiment']!r}")
    evaluation = config.get("evaluation", {})
    for i, lang in enumerate(evaluation.get("langs", [])):
        if not any(d["lang"] == lang and d["corpus"] == evaluation.get("corpus") for d in datasets.values()):
            messages.append(f"config key 'evaluation.langs.{i}': no data set of corpus "
                            f"{evaluation.get('corpus')!r} has language {lang!r}")
    return messages


def check_config(config: dict[str, Any], schema: dict | None = None) -> dict[str, Any]:
    """Validate ``config`` in place (filling schema defaults); raise :class:`ConfigError` listing
    every problem, each naming its key."""
    schema = load_schema() if schema is None else schema
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
