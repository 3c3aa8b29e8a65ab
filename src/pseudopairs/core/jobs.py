"""Typed jobs: what a rule hands its step, one nested, frozen object per job.

A stage's contract resolves a job from the config and the job's wildcards (a training job: its
training and model settings and its data; a mining job: the engine, the criterion and its
parameters, the files), the rule passes it as nested JSON (:meth:`Job.to_json`) and takes its
threads, device and resources from it, and the step rebuilds it (:meth:`Job.from_dict`) and reads
attributes. Each part is either a :class:`~pseudopairs.core.settings.Settings` section (checked by its
class, every default written there once) or another :class:`Job` part, so nothing is merged into
one flat mapping and split again, and no step looks a declared setting up with a fallback. A
settings section travels as its explicit values (:meth:`~pseudopairs.core.settings.Settings.explicit`):
a setting added later with a default changes no existing job's parameters, so nothing reruns.

A field's type says how it is rebuilt: a ``Settings`` or ``Job`` subclass from a mapping, ``list[T]``
/ ``dict[str, T]`` of them item by item, ``T | None`` admits null; a plain type (``str``, ``int``,
``list``, ``dict``) is checked. Errors name the job's field (``job.data.c2i.0.captions``).
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, TypeVar

from pseudopairs.core.settings import Settings, SettingsError, is_kind

J = TypeVar("J", bound="Job")

_PLAIN = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
          list: "a list", dict: "an object"}


class JobError(SettingsError):
    """A job's JSON that does not fit its class; the message names the field (a settings error:
    a job carries settings)."""


def _rebuild(value: Any, kind: Any, where: str) -> Any:
    """``value`` (parsed JSON) as the field type ``kind``; errors name ``where``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"{where}: a job field may be one type or null, not {kind}")
        return _rebuild(value, options[0], where)
    if origin is list:
        if not isinstance(value, list):
            raise JobError(f"{where}: must be a list, got {value!r}")
        return [_rebuild(item, args[0], f"{where}.{i}") for i, item in enumerate(value)] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise JobError(f"{where}: must be an object, got {value!r}")
        return {str(k): _rebuild(v, args[1], f"{where}.{k}") for k, v in value.items()} if args else dict(value)
    if isinstance(kind, type) and issubclass(kind, Job):
        return kind.from_dict(value, where=where)
    if isinstance(kind, type) and issubclass(kind, Settings):
        try:
            return kind.from_dict(value)
        except SettingsError as err:
            raise JobError(f"{where}: {err}") from None
    if kind is Any:
        return value
    if kind in _PLAIN:
        if not is_kind(value, kind):
            raise JobError(f"{where}: must be {_PLAIN[kind]}, got {value!r}")
        return float(value) if kind is float else value
    raise TypeError(f"{where}: unsupported job field type {kind!r}")


def _plain(value: Any) -> Any:
    if isinstance(value, Job):
        return value.to_dict()
    if isinstance(value, Settings):   # its explicit values: a new setting reruns no job
        return value.explicit()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Job:
    """Base of a typed job or job part (a frozen dataclass); see the module's docstring."""

    WHERE: ClassVar[str] = "job"

    @classmethod
    def from_dict(cls: type[J], values: Any, *, where: str | None = None) -> J:
        where = where or cls.WHERE
        if isinstance(values, cls):
            return values
        if not isinstance(values, dict):
            raise JobError(f"{where}: must be an object, got {type(values).__name__}")
        hints = typing.get_type_hints(cls)
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise JobError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(known)}")
        out = {}
        for f in fields(cls):
            if f.name in values:
                out[f.name] = _rebuild(values[f.name], hints[f.name], f"{where}.{f.name}")
            elif f.default is MISSING and f.default_factory is MISSING:
                raise JobError(f"{where}.{f.name}: missing")
        return cls(**out)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain data (JSON types), the inverse of :meth:`from_dict`."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def to_json(self, *, sort_keys: bool = True) -> str:
        """Compact JSON (a rule param: a change reruns the job)."""
        return json.dumps(self.to_dict(), sort_keys=sort_keys, separators=(",", ":"))
