"""Test support users import: contract suites for their own backends, a fake
clock, and a fake provider server.

Each contract suite is the definition of its interface: subclass it and
provide fixtures (see each module's docstring). The suites import pytest, so
they load only when asked for.
"""

from __future__ import annotations

from typing import Any

from .clock import FakeClock

__all__ = [
    "ActivityRegistryContract",
    "FakeClock",
    "FakeServer",
    "LeaseContract",
    "NoticeInboxContract",
    "StoreContract",
]

_LAZY = {
    "StoreContract": ".store_contract",
    "LeaseContract": ".lease_contract",
    "ActivityRegistryContract": ".background_contract",
    "NoticeInboxContract": ".background_contract",
    "FakeServer": ".fake_server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taskloom.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
