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
