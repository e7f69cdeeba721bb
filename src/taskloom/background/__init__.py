"""Background work: activities and notices, their registry and inbox, the
lifecycle that orders them safely, per-run notice delivery, and leases.

SQLite and PostgreSQL backends import lazily (`SQLiteActivityRegistry`,
`SQLiteNoticeInbox`, `PostgresActivityRegistry`, `PostgresNoticeInbox`).
"""

from __future__ import annotations

from typing import Any

from .activities import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    NoticeInbox,
    NoticeStatus,
)
from .leases import Clock, Lease, Leases, MemoryLeases, system_clock
from .lifecycle import DeleteHook, DeleteRefused, Lifecycle, Listeners, Reopen, StopHook
from .memory import MemoryActivityRegistry, MemoryNoticeInbox
from .notices import Delivery, RunNotices
from .service import BackgroundCapReached, BackgroundService

__all__ = [
    "ActivityRegistry",
    "BackgroundActivity",
    "BackgroundCapReached",
    "BackgroundNotice",
    "BackgroundService",
    "Clock",
    "DeleteHook",
    "DeleteRefused",
    "Delivery",
    "Lease",
    "Leases",
    "Lifecycle",
    "Listeners",
    "MemoryActivityRegistry",
    "MemoryLeases",
    "MemoryNoticeInbox",
    "NoticeInbox",
    "NoticeStatus",
    "PostgresActivityRegistry",
    "PostgresNoticeInbox",
    "Reopen",
    "RunNotices",
    "SQLiteActivityRegistry",
    "SQLiteNoticeInbox",
    "StopHook",
    "system_clock",
]

_LAZY = {
    "SQLiteActivityRegistry": ".sqlite",
    "SQLiteNoticeInbox": ".sqlite",
    "PostgresActivityRegistry": ".postgres",
    "PostgresNoticeInbox": ".postgres",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taskloom.background' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
