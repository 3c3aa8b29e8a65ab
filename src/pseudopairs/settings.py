"""One way to declare, check and default a step's settings, and one device resolver.

A step's settings are a frozen dataclass deriving from :class:`Settings`, each field declared
with :func:`setting` (its default, its kind, its range or choices). :meth:`Settings.from_dict`
builds it from a config section (a JSON object): unknown keys and missing required keys are
errors naming the config key (``features.crop``), a value of the wrong kind or out of range too.
The default of a setting is spelled there once; the config files set values. The JSON schema
(workflow/schemas/config.schema.yaml) does not repeat a setting: a section there is a node
``{x-settings: "module:Class"}``, which :func:`expand_schema` replaces by the class's
:meth:`Settings.json_schema` (type, range with its open or closed ends, choices, default,
description) when the schema is loaded.

The same mechanism declares the parameters of every registered extension (a mining criterion's
``k``, ``beta``; see :mod:`pseudopairs.registry`).
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, Sequence, TypeVar

S = TypeVar("S", bound="Settings")

#: Every stage takes a device the same way: ``auto`` (the first CUDA device when torch sees one,
#: else the CPU), ``cpu``, ``cuda`` or ``cuda:N`` (:func:`device_setting`, :func:`resolve_device`).
DEVICE_PATTERN = r"auto|cpu|cuda(?::[0-9]+)?"
#: How a ``pattern`` of :func:`setting` is said in an error message (else the pattern itself).
PATTERN_TEXT = {DEVICE_PATTERN: "auto, cpu, cuda or cuda:N"}

_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
               dict: "an object", list: "a list"}


def setting(default: Any = MISSING, *, kind: type, low: float | None = None,
            high: float | None = None, low_open: bool = False, high_open: bool = False,
            choices: Sequence[Any] | None = None, optional: bool = False, doc: str = "",
            shape: dict | None = None, pattern: str | None = None) -> Any:
    """A settings field: ``kind`` (int, float, bool, str, dict, list), an optional range
    ``[low, high]`` (``low_open``/``high_open`` exclude the bound), or ``choices``; ``optional``
    admits ``None``; ``doc`` is shown in the docs and the schema. No default = required.
    ``shape``: for a dict or list setting, the JSON schema of its inside (the config schema
    checks it; the class's :meth:`Settings.check` may check it too). ``pattern``: for a string
    setting, a regular expression the whole value must match (:data:`PATTERN_TEXT` says it in words)."""
    meta = {"kind": kind, "low": low, "high": high, "low_open": low_open, "high_open": high_open,
            "choices": tuple(choices) if choices is not None else None, "optional": optional,
            "doc": doc, "shape": shape, "pattern": pattern}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


class SettingsError(ValueError):
    """A setting of the wrong kind, out of range, unknown or missing; the message names it."""


def _is_kind(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    return isinstance(value, kind)


def _describe(meta: dict) -> str:
    if meta["choices"] is not None:
        return f"one of {list(meta['choices'])}"
    if meta.get("pattern") is not None:
        return ("null or " if meta["optional"] else "") + PATTERN_TEXT.get(
            meta["pattern"], f"a string matching {meta['pattern']}")
    text = _KIND_NAMES.get(meta["kind"], meta["kind"].__name__)
    low, high = meta["low"], meta["high"]
    if low is not None and high is not None:
        text += f" in {'(' if meta['low_open'] else '['}{low}, {high}{')' if meta['high_open'] else ']'}"
    elif low is not None:
        text += f" {'>' if meta['low_open'] else '>='} {low}"
    elif high is not None:
        text += f" {'<' if meta['high_open'] else '<='} {high}"
    return ("null or " if meta["optional"] else "") + text


def check_value(value: Any, meta: dict) -> Any:
    """``value`` converted to the field's kind (an integer given for a float becomes a float),
    or a :class:`SettingsError` saying what it must be (without the key; callers add it)."""
    if value is None and meta["optional"]:
        return None
    ok = _is_kind(value, meta["kind"]) if meta["choices"] is None else value in meta["choices"]
    if ok and meta.get("pattern") is not None:
        ok = re.fullmatch(meta["pattern"], value) is not None
    if ok and meta["choices"] is None and meta["kind"] in (int, float):
        low, high = meta["low"], meta["high"]
        if low is not None:
            ok = value > low if meta["low_open"] else value >= low
        if ok and high is not None:
            ok = value < high if meta["high_open"] else value <= high
    if not ok:
        raise SettingsError(f"must be {_describe(meta)}, got {value!r}")
    return float(value) if meta["kind"] is float else value


@dataclass(frozen=True)
class Settings:
    """Base of every settings dataclass. ``SECTION`` is the config key the errors name. Each field
    is checked (and an integer given for a float converted) when the object is made; a subclass
    adds cross-field checks in :meth:`check`."""

    SECTION: ClassVar[str] = "settings"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            try:
                converted = check_value(value, f.metadata)
            except SettingsError as err:
                raise SettingsError(f"{self.SECTION}.{f.name}: {err}") from None
            if converted is not value:
                object.__setattr__(self, f.name, converted)
        self.check()

    def check(self) -> None:
        """Cross-field checks of a subclass (raise :meth:`bad`)."""

    @classmethod
    def from_dict(cls: type[S], values: dict | None) -> S:
        """Build from a config section; every problem is a :class:`SettingsError` naming the key."""
        where = cls.SECTION
        values = {} if values is None else values
        if not isinstance(values, dict):
            raise SettingsError(f"{where}: must be an object of settings, got {type(values).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise SettingsError(f"{where}: unknown setting(s) {', '.join(f'{where}.{k}' for k in unknown)}; "
                                f"known: {', '.join(known)}")
        for f in fields(cls):
            if f.name not in values and f.default is MISSING and f.default_factory is MISSING:
                raise SettingsError(f"{where}.{f.name}: required setting missing")
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def config_errors(cls, values: dict | None, context: str = "") -> list[str]:
        """A config check of the section ``values`` (None: absent, nothing to check): no message,
        or the one :meth:`from_dict` raises, as ``config key 'KEY': why`` plus ``context``."""
        if values is None:
            return []
        try:
            cls.from_dict(values)
        except SettingsError as err:
            key, _, why = str(err).partition(": ")
            return [f"config key '{key}': {why}{context}"]
        return []

    def bad(self, key: str, why: str) -> SettingsError:
        """For :meth:`check`: an error naming ``SECTION.key``, what is wrong and the value."""
        return SettingsError(f"{self.SECTION}.{key}: {why} (got {getattr(self, key)!r})")

    @classmethod
    def defaults(cls) -> dict:
        """Every setting that has a default, with it (for docs and the schema test)."""
        out = {}
        for f in fields(cls):
            if f.default is not MISSING:
                out[f.name] = f.default
            elif f.default_factory is not MISSING:
                out[f.name] = f.default_factory()
        return out

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """(name, what it must be, doc) per setting, for documentation tables."""
        return [(f.name, _describe(f.metadata), f.metadata.get("doc", "")) for f in fields(cls)]

    @classmethod
    def json_schema(cls, *, partial: bool = False, fill: Sequence[str] | bool = False) -> dict:
        """The config section as a JSON schema (draft 2020-12): a closed object, one property
        per setting (:func:`field_schema`), the settings without a default required.

        ``partial``: overrides of the section (an experiment's ``training``): nothing required,
        nothing filled in. ``fill``: the settings whose default the config check writes into the
        config (JSON schema ``default``; the workflow reads them from the config), True for all;
        the others' defaults are applied by the step that builds this class and shown in the
        description only, so a config that omits them hands the steps what it always did."""
        names = [f.name for f in fields(cls)]
        filled = set() if partial else set(names) if fill is True else set(fill or ())
        unknown = filled - set(names)
        if unknown:
            raise ValueError(f"{cls.__name__}: no setting(s) {sorted(unknown)} to fill in")
        out: dict[str, Any] = {"type": "object", "additionalProperties": False}
        if cls.__doc__:
            out["description"] = " ".join(cls.__doc__.split())
        out["properties"] = {f.name: field_schema(f, fill=f.name in filled) for f in fields(cls)}
        required = [f.name for f in fields(cls) if _default(f) is MISSING]
        if required and not partial:
            out["required"] = required
        return out


def _default(f) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string", dict: "object",
               list: "array"}


def value_schema(meta: dict) -> dict:
    """The JSON schema of one setting's value (its metadata from :func:`setting`): the kind, the
    range (``minimum``/``exclusiveMinimum``, ``maximum``/``exclusiveMaximum``), the choices
    (``enum``), ``null`` where optional, and the ``shape`` of a dict or list."""
    if meta["choices"] is not None:
        out: dict[str, Any] = {"enum": list(meta["choices"]) + ([None] if meta["optional"] else [])}
    else:
        kind = _JSON_TYPES[meta["kind"]]
        out = {"type": [kind, "null"] if meta["optional"] else kind}
        if meta.get("pattern") is not None:
            out["pattern"] = f"^(?:{meta['pattern']})$"
        if meta["kind"] in (int, float):
            if meta["low"] is not None:
                out["exclusiveMinimum" if meta["low_open"] else "minimum"] = meta["low"]
            if meta["high"] is not None:
                out["exclusiveMaximum" if meta["high_open"] else "maximum"] = meta["high"]
    if meta.get("shape"):
        out.update(meta["shape"])
    return out


def field_schema(f, *, fill: bool = False) -> dict:
    """A settings field as a JSON-schema property: :func:`value_schema`, the description (its
    ``doc``) and its default — as ``default`` when ``fill`` (the config check writes it into the
    config), else named in the description."""
    out = value_schema(f.metadata)
    default = _default(f)
    doc = f.metadata.get("doc", "")
    if default is not MISSING and fill:
        out["default"] = default
    elif default is not MISSING:
        doc = f"{doc}; default {_json_text(default)}" if doc else f"default {_json_text(default)}"
    if doc:
        out["description"] = doc
    return out


def _json_text(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


#: The key of a schema node generated from a settings class: ``{x-settings: "module:Class"}``;
#: ``x-partial: true`` (overrides of a section) and ``x-fill: [names] | true`` are passed to
#: :meth:`Settings.json_schema`. Any other key of the node (``default``, ``description``) is
#: kept over the generated ones.
SCHEMA_KEY = "x-settings"
_SCHEMA_OPTIONS = {"x-partial": "partial", "x-fill": "fill"}


def _import(target: str) -> Any:
    import importlib

    module, _, name = target.partition(":")
    if not name:
        raise ValueError(f"{SCHEMA_KEY}: {target!r} must be 'module:name'")
    return getattr(importlib.import_module(module), name)


def expand_schema(schema: Any) -> Any:
    """``schema`` with every ``x-settings`` node replaced by the JSON schema its class (or any
    object with a ``json_schema(**options)``) generates; a node may not also list
    ``properties`` (each setting is declared once, in its class)."""
    if isinstance(schema, list):
        return [expand_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if SCHEMA_KEY in schema:
        if "properties" in schema:
            raise ValueError(f"schema node {schema[SCHEMA_KEY]!r}: its settings come from the class; "
                             "it lists properties too")
        options = {_SCHEMA_OPTIONS[k]: v for k, v in schema.items() if k in _SCHEMA_OPTIONS}
        generated = _import(schema[SCHEMA_KEY]).json_schema(**options)
        rest = {k: v for k, v in schema.items() if k != SCHEMA_KEY and k not in _SCHEMA_OPTIONS}
        return {**generated, **rest}
    return {key: expand_schema(value) for key, value in schema.items()}


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------


def device_setting(doc: str = "") -> Any:
    """The ``device`` setting of a step (one notion for every stage: :data:`DEVICE_PATTERN`)."""
    text = "auto (CUDA when torch sees a GPU, else the CPU) | cpu | cuda | cuda:N"
    return setting("auto", kind=str, pattern=DEVICE_PATTERN, doc=f"{doc}: {text}" if doc else text)


def _torch_cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(name: str, *, key: str, cuda_count: Callable[[], int] | None = None) -> str:
    """The device a step runs on: ``auto`` is ``cuda`` when a CUDA device is visible, else
    ``cpu``; ``cpu``, ``cuda`` or ``cuda:N`` are taken as asked, and asking for CUDA where there
    is none is an error naming the config ``key``. ``cuda_count`` counts the CUDA devices the
    step's library sees (torch's by default; CTranslate2 passes its own)."""
    if not isinstance(name, str) or re.fullmatch(DEVICE_PATTERN, name) is None:
        raise SettingsError(f"{key}: must be auto, cpu, cuda or cuda:N, got {name!r}")
    if name == "cpu":
        return "cpu"
    count = (cuda_count or _torch_cuda_count)()
    if name == "auto":
        return "cuda" if count > 0 else "cpu"
    if count == 0:
        raise SettingsError(f"{key}: {name} was asked for, but no CUDA device is visible")
    index = int(name.partition(":")[2] or 0)
    if index >= count:
        raise SettingsError(f"{key}: {name} was asked for, but only {count} CUDA device(s) are "
                            f"visible (cuda:0 … cuda:{count - 1})")
    return name
