"""Lazy re-exports: a package names what it offers without importing it yet."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ._extras import needs_extra


def lazy_exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` importing `table[name]` (relative to `package`) on first use.

    A name whose module needs an extra that is not installed raises
    `ModuleNotFoundError` saying which extra and how to install it.
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        with needs_extra(f"{package}.{name}"):
            imported = importlib.import_module(module, package)
        return getattr(imported, name)

    return __getattr__


class LazyModule:
    """A module imported at the first read of one of its attributes; each
    attribute read is kept on this object, so later reads cost what a module
    global's does. For a module only some runs use (the events, made only
    for a subscriber): `events = LazyModule("taskloom.events")`, then
    `events.RunStarted`, with the real import under `TYPE_CHECKING` for
    type checkers."""

    def __init__(self, name: str) -> None:
        self.__name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_LazyModule__"):
            raise AttributeError(attribute)
        value = getattr(importlib.import_module(self.__name), attribute)
        setattr(self, attribute, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__name!r}>"
