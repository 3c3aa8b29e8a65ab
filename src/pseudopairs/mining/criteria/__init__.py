"""Mining criteria: how a query caption chooses its database caption. One registry entry each,
in its own module; everything else reads :data:`CRITERIA`: the config checks (names, parameters
and their ranges, ``k`` against the data at DAG time), the ``mine`` step, the §7.2 statistics, the
benchmark and the docs table (``docs/architecture.md``, config/README.md).

An entry declares its name, a one-line summary and its definition (shown in the docs), its
parameters (:class:`Param`: default, kind, range), its exact blocked search (on a
:class:`pseudopairs.mining.search.SearchContext`) and its brute-force reference on the full float64
cosine matrix — the definition the tests check the search against. A new criterion = a module
that calls :func:`register` + its YAML in config/experiments.yaml + its test.

Every criterion decides in float64 and breaks ties towards the lowest index; ``indices`` are
int64 database rows (−1 = no match, only ``mutual``), ``scores`` float32 (NaN for no match).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pseudopairs.registry import Registry

# The modules that register the built-in criteria (imported when the registry is first read).
BUILTIN = ("cosine", "mutual", "csls", "margin", "inverted_softmax", "dynamic_inverted_softmax", "sinkhorn")


@dataclass(frozen=True)
class Param:
    """A criterion parameter: ``kind`` int or float, ``low`` the smallest value (excluded when
    ``low_open``), ``what`` how the docs and errors describe a valid value; ``neighbourhood``:
    a count of neighbours, so at most the number of queries and of database rows."""

    name: str
    default: Any
    kind: type
    low: float
    what: str
    low_open: bool = False
    neighbourhood: bool = False

    def check(self, value: Any) -> Any:
        ok = (not isinstance(value, bool)) and isinstance(value, (int, np.integer) if self.kind is int
                                                         else (int, float, np.integer, np.floating))
        if ok:
            ok = math.isfinite(float(value)) and (value > self.low if self.low_open else value >= self.low)
        if not ok:
            raise ValueError(f"{self.name} must be {self.what}, got {value!r}")
        return self.kind(value)


def whole_number(name: str, default: int, *, neighbourhood: bool = False) -> Param:
    """A parameter that is a positive whole number (``neighbourhood``: a count of neighbours)."""
    return Param(name, default, int, 1, "a positive whole number", neighbourhood=neighbourhood)


def positive_number(name: str, default: float) -> Param:
    """A parameter that is a positive finite number (a temperature such as β)."""
    return Param(name, default, float, 0.0, "a positive finite number", low_open=True)


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
