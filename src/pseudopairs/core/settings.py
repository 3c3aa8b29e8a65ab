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
``k``, ``beta``; see :mod:`pseudopairs.core.registry`).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar

S = TypeVar("S", bound="Settings")

#: Every stage takes a device the same way: ``auto`` (the first CUDA device when torch sees one,
#: else the CPU), ``cpu``, ``cuda`` or ``cuda:N`` (:func:`device_setting`, :func:`resolve_device`).
DEVICE_PATTERN = r"auto|cpu|cuda(?::[0-9]+)?"
#: How a ``pattern`` of :func:`setting` is said in an error message (else the pattern itself).
#: a caption language: an ISO 639-1 code (the pipeline's, the tables' and the files' names)
LANG_PATTERN = "^[a-z]{2}$"
PATTERN_TEXT = {DEVICE_PATTERN: "auto, cpu, cuda or cuda:N",
                LANG_PATTERN: "a two-letter ISO 639-1 code such as fr"}

#: language names (English and their own) and three-letter ISO 639-2/3 codes -> ISO 639-1, for
#: the hint of :func:`language_hint`
_LANGUAGE_CODES = {
    "en": ("english", "eng"), "fr": ("french", "français", "francais", "fra", "fre"),
    "de": ("german", "deutsch", "deu", "ger"), "cs": ("czech", "čeština", "cestina", "ces", "cze"),
    "es": ("spanish", "español", "espanol", "spa"), "it": ("italian", "italiano", "ita"),
    "nl": ("dutch", "nederlands", "nld", "dut"), "pt": ("portuguese", "português", "portugues", "por"),
    "ru": ("russian", "rus"), "zh": ("chinese", "zho", "chi"), "ja": ("japanese", "jpn"),
    "ko": ("korean", "kor"), "ar": ("arabic", "ara"), "tr": ("turkish", "türkçe", "tur"),
    "pl": ("polish", "polski", "pol"), "sv": ("swedish", "svenska", "swe"), "fi": ("finnish", "suomi", "fin"),
    "da": ("danish", "dansk", "dan"), "no": ("norwegian", "norsk", "nor"), "el": ("greek", "ell", "gre"),
    "hi": ("hindi", "hin"), "ro": ("romanian", "română", "romana", "ron", "rum"),
    "hu": ("hungarian", "magyar", "hun"), "uk": ("ukrainian", "ukr"), "vi": ("vietnamese", "vie"),
    "id": ("indonesian", "ind"), "he": ("hebrew", "heb"), "ca": ("catalan", "català", "cat"),
    "et": ("estonian", "est"), "lv": ("latvian", "lav"), "lt": ("lithuanian", "lit"),
}
_BY_NAME = {name: code for code, names in _LANGUAGE_CODES.items() for name in names}


def language_hint(value) -> str:
    """`` (did you mean 'fr'?)`` for a language given by its name (``french``, ``Deutsch``), a
    three-letter code (``fra``), another case (``FR``) or with a region (``fr-FR``, ``en_US``);
    empty otherwise."""
    if not isinstance(value, str):
        return ""
    text = value.strip().lower()
    code = _BY_NAME.get(text)
    if code is None and re.match(r"^[a-z]{2}(?:[-_][a-z0-9]+)?$", text):
        code = text[:2]
    return f" (did you mean {code!r}?)" if code and code != value else ""

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


def deep_update(target: dict, update: Mapping) -> None:
    """Merge ``update`` into ``target`` key by key (nested mappings recursively, anything else
    replaced): the config files' layering, and the calibration file's measured entries."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            deep_update(target[key], value)
        else:
            target[key] = value


class SettingsError(ValueError):
    """A setting of the wrong kind, out of range, unknown or missing; the message names it."""


def is_kind(value: Any, kind: type) -> bool:
    """Whether ``value`` (parsed YAML or JSON) is a ``kind``: an int is no bool, a float any finite
    number."""
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
    # of the field's kind first: True is not the choice 1 (True == 1 in Python)
    ok = is_kind(value, meta["kind"]) and (meta["choices"] is None or value in meta["choices"])
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

    def explicit(self) -> dict:
        """The settings that differ from their defaults (and the required ones): what a job
        passes on, so a setting added later with a default changes no existing job's
        parameters (:mod:`pseudopairs.core.jobs`); :meth:`from_dict` fills the rest in again."""
        values = asdict(self)
        return {f.name: values[f.name] for f in fields(self)
                if _default(f) is MISSING or values[f.name] != _default(f)}

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


#: environment variables a scheduler sets in a job it gave GPUs (SLURM's, with --gpus or
#: --gres=gpu), and ours for other schedulers: a job that has them must see a GPU
GPU_JOB_VARIABLES = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE", "PSEUDOPAIRS_REQUIRE_GPU")
#: the oldest NVIDIA driver branch for each CUDA major version a torch wheel may be built with
#: (NVIDIA's CUDA Compatibility guide, "Minor Version Compatibility": CUDA 13.x >= 580, CUDA 12.x
#: >= 525); the pinned torch 2.14.1 is a CUDA 13.0 build (docs/cluster.md)
MIN_DRIVER = {"12": "525", "13": "580"}


class NoGPUError(SettingsError):
    """A job meant for a GPU (a scheduler gave it one, or ``cuda`` was asked for) whose library
    sees none: a broken node, container or install, never a reason to train on the CPU."""


def _torch_cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _torch_build() -> str:
    """torch's version and the CUDA it was built with (``+cpu``: none)."""
    import torch

    cuda = torch.version.cuda
    return f"torch {torch.__version__} (CUDA {cuda} build)" if cuda else \
        f"torch {torch.__version__} (a CPU-only build: no CUDA)"


def gpu_job(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this process is a GPU job (e.g. ``SLURM_JOB_GPUS=0``: the variable a scheduler set, see
    :data:`GPU_JOB_VARIABLES`), or None when nothing says so. SLURM's ``SLURM_JOB_GPUS`` and
    ``SLURM_STEP_GPUS`` list the GPU indices it gave the job; ``SLURM_GPUS_ON_NODE`` and
    ``PSEUDOPAIRS_REQUIRE_GPU`` are counts (0: none)."""
    environ = os.environ if environ is None else environ
    for name in GPU_JOB_VARIABLES:
        value = str(environ.get(name, "")).strip()
        if name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
            given = bool(value) and value not in ("(null)", "NoDevFiles")
        else:
            given = value.isdigit() and int(value) > 0
        if given:
            return f"{name}={value}"
    return None


def require_gpu(name: str, *, key: str, count: int, environ: Mapping[str, str] | None = None,
                build: Callable[[], str] | None = None) -> None:
    """No silent CPU fallback: when this job is meant for a GPU — ``name`` asks for ``cuda`` or a
    scheduler gave the job GPUs (:func:`gpu_job`) — and ``name`` is not ``cpu`` but ``count``
    (the CUDA devices the step's library sees) is 0, raise :class:`NoGPUError` at once, before any
    work, with one line naming what to check: the node's NVIDIA driver (the minimum for the
    build), the container's ``--nv``, a CUDA build of torch."""
    if name == "cpu" or count > 0:
        return
    why = f"{name} was asked for" if name.startswith("cuda") else None
    allocation = gpu_job(environ)
    if why is None and allocation is None:
        return
    why = why or f"the scheduler gave this job a GPU ({allocation})"
    built = (build or _torch_build)()
    cuda = re.search(r"CUDA (\d+)\.(\d+)", built)
    driver = (f"; driver >= {MIN_DRIVER.get(cuda.group(1), '?')} for CUDA {cuda.group(1)}.{cuda.group(2)}"
              if cuda else "")
    raise NoGPUError(
        f"{key}: {why}, but no CUDA device is visible to {built}: check the node's NVIDIA driver "
        f"(nvidia-smi{driver}), run the container with --nv (apptainer) or --gpus all (docker), "
        f"and install a CUDA build of torch (pyproject.toml's pins); nothing was run on the CPU "
        f"instead")


def resolve_device(name: str, *, key: str, cuda_count: Callable[[], int] | None = None,
                   environ: Mapping[str, str] | None = None, build: Callable[[], str] | None = None) -> str:
    """The device a step runs on: ``auto`` is ``cuda`` when a CUDA device is visible, else
    ``cpu``; ``cpu``, ``cuda`` or ``cuda:N`` are taken as asked. Asking for CUDA where there is
    none, or ``auto`` in a job a scheduler gave a GPU that the library cannot see, is a
    :class:`NoGPUError` naming the config ``key`` (:func:`require_gpu`: no silent CPU fallback).
    ``cuda_count`` counts the CUDA devices the step's library sees (torch's by default;
    CTranslate2 passes its own); ``environ`` (default ``os.environ``) and ``build`` (a description
    of the library's build) are for tests."""
    if not isinstance(name, str) or re.fullmatch(DEVICE_PATTERN, name) is None:
        raise SettingsError(f"{key}: must be auto, cpu, cuda or cuda:N, got {name!r}")
    if name == "cpu":
        return "cpu"
    count = (cuda_count or _torch_cuda_count)()
    if build is None and cuda_count is not None:  # another library's count (CTranslate2)
        build = lambda: "the step's library"  # noqa: E731
    require_gpu(name, key=key, count=count, environ=environ, build=build)
    if name == "auto":
        return "cuda" if count > 0 else "cpu"
    index = int(name.partition(":")[2] or 0)
    if index >= count:
        raise SettingsError(f"{key}: {name} was asked for, but only {count} CUDA device(s) are "
                            f"visible (cuda:0 … cuda:{count - 1})")
    return name
