"""Configuration: layering (:func:`load_config`), JSON-schema validation, and the checks a schema
cannot express, which each stage's contract owns (:data:`CONTRACTS`: its sections' settings
classes, references, cycles); this module runs them and imports no stage.

The Snakefile calls :func:`check_config` before any rule is defined, so a wrong type, a missing
required key, an unknown key or a dangling reference (an experiment naming an unknown data set, a
table naming an unknown experiment, a fine-tuning cycle) fails before any job runs, naming the key.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from pseudopairs.workflow.calibration import calibration_errors
from pseudopairs.workflow.cluster import device_errors, placeholder_errors
from pseudopairs.workflow.rounds import expand_rounds
from pseudopairs.core.settings import LANG_PATTERN, PATTERN_TEXT, deep_update, expand_schema, language_hint

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    """The config schema, each settings section (``x-settings: module:Class``) generated from its
    settings class (:func:`pseudopairs.core.settings.expand_schema`): a setting is declared once."""
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


def _pattern_text(pattern: str) -> str | None:
    """A settings pattern (``^(?:…)$`` in the schema) in words, where one is declared."""
    inner = pattern[len("^(?:"):-len(")$")] if pattern.startswith("^(?:") and pattern.endswith(")$") else pattern
    return PATTERN_TEXT.get(inner)
def _telling(error):
    """For a value no branch of a ``oneOf``/``anyOf`` takes, the error of the branch that took its
    type (the deepest one that is not a wrong type), instead of "not valid under any of the given
    schemas"."""
    if error.validator not in ("oneOf", "anyOf") or not error.context:
        return error
    errors = [e for e in error.context if e.validator != "type"] or list(error.context)
    return _telling(max(errors, key=lambda e: len(e.absolute_path)))


def _schema_errors(config: dict, schema: dict) -> list[str]:
    validator_class = _set_defaults(jsonschema.validators.validator_for(schema))
    validator = validator_class(schema)
    messages = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path)):
        error = _telling(error)
        where = _key(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            messages.append(f"config key '{where}': unknown key(s) {', '.join(map(repr, extra))}")
        elif error.validator == "required":
            messages.append(f"config key '{where}': {error.message}")
        elif error.validator == "pattern" and _pattern_text(error.validator_value):
            hint = language_hint(error.instance) if error.validator_value == LANG_PATTERN else ""
            messages.append(f"config key '{where}': must be {_pattern_text(error.validator_value)}, "
                            f"got {error.instance!r}{hint}")
        else:
            messages.append(f"config key '{where}': {error.message}")
    return messages


#: The stages' contract modules, in the DAG's order: each has ``check(config) -> list[str]``, the
#: problems of the sections its steps read, each message naming its config key. Loaded by name,
#: so this module imports no stage (tests/test_architecture.py).
CONTRACTS = (
    "pseudopairs.world.contract",
    "pseudopairs.data.contract",
    "pseudopairs.features.contract",
    "pseudopairs.translation.contract",
    "pseudopairs.model.contract",
    "pseudopairs.evaluation.contract",
    "pseudopairs.mining.contract",
    "pseudopairs.search.contract",
    "pseudopairs.report.contract",
)


def contract_errors(config: dict) -> list[str]:
    """Every stage's check (:data:`CONTRACTS`), then the cluster's values (``resources.slurm``:
    an example value left in place; ``resources.calibration``: a readable calibration file); run
    once the config fits the schema."""
    messages = []
    for name in CONTRACTS:
        messages += importlib.import_module(name).check(config)
    return messages + placeholder_errors(config) + device_errors(config) + calibration_errors(config)


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
    items, ``$ref`` into ``#/$defs``, allOf, and the oneOf/anyOf branch of a list's or mapping's
    own type; mappings and lists are updated in place."""
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
    for sub in list(schema.get("oneOf", [])) + list(schema.get("anyOf", [])):
        # a list or mapping under oneOf/anyOf: its items are coerced by the branch of its type
        if isinstance(sub, dict) and "type" in sub and isinstance(value, (list, dict)) \
                and _fits_type({"type": sub["type"]}, value):
            value = coerce_config_strings(value, sub, root)
            break
    return value


def _property_schemas(schema: dict, key: str) -> list[dict]:
    """The schemas that apply to property ``key`` of an object of ``schema``."""
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
    try:  # iterated bootstrapping: the generated entries are checked like any other
        expand_rounds(config)
    except ValueError as err:
        raise ConfigError(f"invalid configuration:\n  {err}") from None
    messages = _schema_errors(config, schema)
    if not messages:
        messages = contract_errors(config)
    if messages:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(messages))
    return config


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader that records every mapping key given twice (YAML keeps the last one
    silently; a site file with ``paper_data:`` twice would lose the first block)."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    self.duplicates.append(f"line {key_node.start_mark.line + 1}: key {key!r} "
                                           f"(first on line {seen[key] + 1})")
                else:
                    seen[key] = key_node.start_mark.line
            except TypeError:   # an unhashable key: yaml's own error follows
                pass
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """One YAML config file; a key given twice in one mapping is a :class:`ConfigError` naming
    the file, the line and the key."""
    path = Path(path)
    loader = _UniqueKeyLoader(path.read_text(encoding="utf-8"))
    try:
        data = loader.get_single_data() or {}
    finally:
        loader.dispose()
    if loader.duplicates:
        raise ConfigError(f"{path}: a key given twice in one mapping (YAML would keep the last "
                          f"silently): " + "; ".join(loader.duplicates))
    return data


def check_config_files(paths) -> None:
    """Every config file Snakemake layered (``workflow.configfiles``) read again for keys given
    twice (:func:`read_config_file`), which Snakemake's own loader merges silently."""
    for path in paths:
        if str(path).endswith((".yaml", ".yml")) and Path(path).is_file():
            read_config_file(path)


def load_config(*paths: str | Path) -> dict[str, Any]:
    """Merge YAML files like Snakemake does (later files update earlier ones, recursively); a
    key given twice in one file is an error (:func:`read_config_file`)."""
    merged: dict[str, Any] = {}
    for path in paths:
        deep_update(merged, read_config_file(path))
    return merged
