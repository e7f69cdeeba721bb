"""Test support users import: contract suites for their own backends, a fake
clock, a fake provider server, a recording HTTP transport for adapters, and
`recorded_model` to record a real run once and replay it offline.

Each contract suite defines its interface: subclass it and provide fixtures
(see each module's docstring); tests of capabilities a backend does not
declare are skipped with the reason. The suites import pytest (the `testing`
extra), so they load only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .clock import FakeClock

if TYPE_CHECKING:
    from .background_contract import ActivityRegistryContract, NoticeInboxContract
    from .fake_server import FakeServer
    from .lease_contract import LeaseContract
    from .recordings import recorded_model
    from .store_contract import StoreContract
    from .transport import RecordingTransport

__all__ = [
    "ActivityRegistryContract",
    "FakeClock",
    "FakeServer",
    "LeaseContract",
    "NoticeInboxContract",
    "RecordingTransport",
    "StoreContract",
    "recorded_model",
]

_LAZY = {
    "StoreContract": ".store_contract",
    "LeaseContract": ".lease_contract",
    "ActivityRegistryContract": ".background_contract",
    "NoticeInboxContract": ".background_contract",
    "FakeServer": ".fake_server",
    "RecordingTransport": ".transport",
    "recorded_model": ".recordings",
}


__getattr__ = lazy_exports(__name__, _LAZY)
