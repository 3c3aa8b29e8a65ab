"""Extension points: a registry per kind of pluggable piece (mining criteria, similarity
functions, training objectives). An entry is declared once, in its own module, and everything
else reads the registry: the config checks (names and parameters), the step that runs it, the
statistics and the docs table, the tests and the benchmarks. Adding one = one module that
registers it + its YAML in the config + its test."""

from __future__ import annotations

import importlib
from typing import Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind. ``modules`` are imported the first time the registry is read,
    so each entry's module registers itself without a central list of imports."""

    def __init__(self, kind: str, *, modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._modules = modules
        self._entries: dict[str, T] = {}
        self._loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self._modules:
                importlib.import_module(module)

    def register(self, name: str, entry: T, *, replace: bool = False) -> T:
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        self._load()
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        self._load()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
