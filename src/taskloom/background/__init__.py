"""Background work: activities and notices, their registry and inbox, the
lifecycle that orders them safely, per-run notice delivery, and leases.

SQLite and PostgreSQL backends import lazily (`SQLiteActivityRegistry`,
`SQLiteNoticeInbox`, `PostgresActivityRegistry`, `PostgresNoticeInbox`).
"""

from __future__ import annotations

from .._lazy import lazy_exports
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


__getattr__ = lazy_exports(__name__, _LAZY)
