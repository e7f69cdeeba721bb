"""Test support users import: contract suites for their own backends, a fake
clock, and a fake provider server.

Each contract suite is the definition of its interface: subclass it and
provide fixtures (see each module's docstring). The suites import pytest, so
they load only when asked for.
"""

from __future__ import annotations

from .._lazy import lazy_exports
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


__getattr__ = lazy_exports(__name__, _LAZY)
