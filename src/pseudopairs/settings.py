"""One way to declare, check and default a step's settings, and one device resolver.

A step's settings are a frozen dataclass deriving from :class:`Settings`, each field declared
with :func:`setting` (its default, its kind, its range or choices). :meth:`Settings.from_dict`
builds it from a config section (a JSON object): unknown keys and missing required keys are
errors naming the config key (``features.crop``), a value of the wrong kind or out of range too.
The default of a setting is spelled there once; the config files set values, and a test checks
that the JSON schema (workflow/schemas) lists the same keys with the same defaults.

The same mechanism declares the parameters of every registered extension (a mining criterion's
``k``, ``beta``; see :mod:`pseudopairs.registry`).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, Sequence, TypeVar

S = TypeVar("S", bound="Settings")

_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
               dict: "an object", list: "a list"}


def setting(default: Any = MISSING, *, kind: type, low: float | None = None,
            high: float | None = None, low_open: bool = False, high_open: bool = False,
            choices: Sequence[Any] | None = None, optional: bool = False, doc: str = "") -> Any:
    """A settings field: ``kind`` (int, float, bool, str, dict, list), an optional range
    ``[low, high]`` (``low_open``/``high_open`` exclude the bound), or ``choices``; ``optional``
    admits ``None``; ``doc`` is shown in the docs. No default = required."""
    meta = {"kind": kind, "low": low, "high": high, "low_open": low_open, "high_open": high_open,
            "choices": tuple(choices) if choices is not None else None, "optional": optional,
            "doc": doc}
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


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------

DEVICES = ("auto", "cpu", "cuda")


def _torch_cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(name: str, *, key: str, cuda_count: Callable[[], int] | None = None) -> str:
    """The device a step runs on: ``auto`` is ``cuda`` when a CUDA device is visible, else
    ``cpu``; ``cpu``, ``cuda`` or ``cuda:N`` are taken as asked, and asking for CUDA where there
    is none is an error naming the config ``key``. ``cuda_count`` counts the CUDA devices the
    step's library sees (torch's by default; CTranslate2 passes its own)."""
    if not isinstance(name, str) or not (name in DEVICES or name.startswith("cuda:")):
        raise SettingsError(f"{key}: must be auto, cpu, cuda or cuda:N, got {name!r}")
    if name == "cpu":
        return "cpu"
    count = (cuda_count or _torch_cuda_count)()
    if name == "auto":
        return "cuda" if count > 0 else "cpu"
    if count == 0:
        raise SettingsError(f"{key}: {name} was asked for, but no CUDA device is visible")
    return name
