"""Mining criteria: how a query caption chooses its database caption. One registry entry each,
in its own module; everything else reads :data:`CRITERIA`: the config checks (names, parameters
and their ranges, ``k`` against the data at DAG time), the ``mine`` step, the §7.2 statistics, the
benchmark and the docs table (``docs/architecture.md``, config/README.md).

An entry declares its name, a one-line summary and its definition (shown in the docs), its
parameters (:class:`Param`: a field of the settings mechanism, :func:`pseudopairs.core.settings.setting`
— default, kind, range — which also gives the config schema of a pseudopair set's ``mining``
section, :class:`CriterionSection`), its exact blocked search (on a
:class:`pseudopairs.mining.search.SearchContext`) and its brute-force reference on the full float64
cosine matrix — the definition the tests check the search against. A new criterion = a module
that calls :func:`register` + its YAML in config/experiments.yaml + its test.

Every criterion decides in float64 and breaks ties towards the lowest index; ``indices`` are
int64 database rows (−1 = no match, only ``mutual``), ``scores`` float32 (NaN for no match).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pseudopairs.core.registry import Registry
from pseudopairs.core.settings import SettingsError, check_value, setting, value_schema

# The modules that register the built-in criteria (imported when the registry is first read).
BUILTIN = ("cosine", "mutual", "csls", "margin", "inverted_softmax", "dynamic_inverted_softmax", "sinkhorn")

#: The criterion of a pseudopair set that names none: the paper's (§2.2).
DEFAULT_CRITERION = "cosine"


@dataclass(frozen=True)
class Param:
    """A criterion parameter ``name``: ``field`` is a settings field (:func:`param` makes it with
    :func:`pseudopairs.core.settings.setting`: default, kind, range; its ``doc`` says how the docs and
    errors describe a valid value); ``neighbourhood``: a count of neighbours, so at most the
    number of queries and of database rows."""

    name: str
    field: Any
    neighbourhood: bool = False

    @property
    def default(self) -> Any:
        return self.field.default

    @property
    def what(self) -> str:
        return self.field.metadata["doc"]

    def check(self, value: Any) -> Any:
        """``value`` of the parameter's kind (a numpy scalar taken as the number it holds), or a
        ValueError naming the parameter."""
        plain = value.item() if isinstance(value, np.generic) else value
        try:
            return check_value(plain, self.field.metadata)
        except SettingsError:
            raise ValueError(f"{self.name} must be {self.what}, got {value!r}") from None

    def schema(self) -> dict:
        """The JSON schema of the parameter's value (as of any other setting)."""
        return value_schema(self.field.metadata)


def param(name: str, default: Any, *, kind: type, what: str, low: float | None = None,
          low_open: bool = False, high: float | None = None, high_open: bool = False,
          neighbourhood: bool = False) -> Param:
    """A parameter declared like any setting (``what``: how a valid value is described)."""
    return Param(name, setting(default, kind=kind, low=low, low_open=low_open, high=high,
                               high_open=high_open, doc=what), neighbourhood)


def whole_number(name: str, default: int, *, neighbourhood: bool = False) -> Param:
    """A parameter that is a positive whole number (``neighbourhood``: a count of neighbours)."""
    return param(name, default, kind=int, low=1, what="a positive whole number", neighbourhood=neighbourhood)


def positive_number(name: str, default: float) -> Param:
    """A parameter that is a positive finite number (a temperature such as β)."""
    return param(name, default, kind=float, low=0.0, low_open=True, what="a positive finite number")


@dataclass(frozen=True)
class Criterion:
    name: str
    summary: str
    definition: str
    params: tuple[Param, ...]
    # exact blocked search: (SearchContext, params) -> (indices int64, scores float32)
    search: Callable[[Any, dict], tuple[np.ndarray, np.ndarray]]
    # brute force on the (n_queries × n_database) float64 cosine matrix, same return
    reference: Callable[[np.ndarray, dict], tuple[np.ndarray, np.ndarray]]


CRITERIA: Registry[Criterion] = Registry(
    "mining criterion", modules=tuple(f"pseudopairs.mining.criteria.{m}" for m in BUILTIN))


def register(criterion: Criterion) -> Criterion:
    return CRITERIA.register(criterion.name, criterion)


def get(name: Any) -> Criterion:
    if not isinstance(name, str) or name not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA.names()}, got {name!r}")
    return CRITERIA.get(name)


def check_params(name: str, values: dict, *, n_queries: int | None = None,
                 n_database: int | None = None) -> dict:
    """The parameters of criterion ``name`` with defaults filled in; ``values`` names only its
    parameters, each valid; a neighbourhood size fits the data when its sizes are known."""
    criterion = get(name)
    own = {p.name: p for p in criterion.params}
    for key in values:
        if key not in own:
            users = sorted(c for c in CRITERIA.names() if key in {p.name for p in CRITERIA.get(c).params})
            if users:
                raise ValueError(f"{key} is only used by the criteria {users}, not {name!r}")
            raise ValueError(f"{key} is not a parameter of any criterion (criterion {name!r})")
    out = {}
    for key, param in own.items():
        value = values.get(key)
        out[key] = param.default if value is None else param.check(value)
        if param.neighbourhood:
            for count, what, whose in ((n_database, "database rows", "each query's k nearest database rows"),
                                       (n_queries, "queries", "each database row's k nearest queries")):
                if count is not None and out[key] > count:
                    raise ValueError(f"{key}={out[key]} exceeds the {count} {what} (criterion {name!r} "
                                     f"averages {whose})")
    return out


def docs_table() -> str:
    """The criteria as a Markdown table (name, parameters with defaults, definition)."""
    lines = ["| criterion | parameters (default) | definition |", "|---|---|---|"]
    for name in CRITERIA.names():
        c = CRITERIA.get(name)
        params = ", ".join(f"`{p.name}` = {p.default} ({p.what})" for p in c.params) or "—"
        lines.append(f"| `{name}` | {params} | {c.definition} |")
    return "\n".join(lines)


class CriterionSection:
    """A pseudopair set's ``mining`` section for the config schema (``x-settings`` in
    workflow/schemas/config.schema.yaml): ``criterion``, one of the registered criteria, and the
    parameters of every criterion (their kind and range, from their :class:`Param`). Which
    criterion takes which parameter, and a neighbourhood against the data's sizes, are checked by
    :func:`check_params` (whose errors name both)."""

    @staticmethod
    def json_schema(*, partial: bool = False, fill: Any = False) -> dict:
        properties: dict[str, Any] = {"criterion": {
            "enum": CRITERIA.names(),
            "description": f"a registered mining criterion (pseudopairs.mining.criteria); default {DEFAULT_CRITERION}"}}
        users: dict[str, list[tuple[str, Param]]] = {}
        for name in CRITERIA.names():
            for p in CRITERIA.get(name).params:
                users.setdefault(p.name, []).append((name, p))
        for key, entries in users.items():
            schemas = []
            for _, p in entries:
                if p.schema() not in schemas:
                    schemas.append(p.schema())
            prop = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
            prop["description"] = "; ".join(f"{name}: {p.what}, default {p.default}" for name, p in entries)
            properties[key] = prop
        return {"type": "object", "additionalProperties": False, "properties": properties}
