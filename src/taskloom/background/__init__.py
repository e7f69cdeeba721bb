"""Background work: activities and notices, their registry and inbox, the
lifecycle that orders them safely, per-run notice delivery, and the
opt-in background command tools (`background_tools()`).

SQLite and PostgreSQL backends import lazily (`SQLiteActivityRegistry`,
`SQLiteNoticeInbox`, `PostgresActivityRegistry`, `PostgresNoticeInbox`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ..errors import BackgroundCapReached
from ..loop import Delivery
from ..stores._leases import Clock, Lease, Leases, MemoryLeases, system_clock
from ._activities import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    NoticeInbox,
    NoticeStatus,
)
from ._lifecycle import DeleteHook, DeleteRefused, Lifecycle, Listeners, Reopen, StopHook
from ._memory import MemoryActivityRegistry, MemoryNoticeInbox
from ._notices import RunNotices
from ._service import BackgroundService

if TYPE_CHECKING:
    from ..tools import Tool
    from ._postgres import PostgresActivityRegistry, PostgresNoticeInbox
    from ._sqlite import SQLiteActivityRegistry, SQLiteNoticeInbox

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
    "background_tools",
    "system_clock",
]

_LAZY = {
    "SQLiteActivityRegistry": "._sqlite",
    "SQLiteNoticeInbox": "._sqlite",
    "PostgresActivityRegistry": "._postgres",
    "PostgresNoticeInbox": "._postgres",
}


__getattr__ = lazy_exports(__name__, _LAZY)


def background_tools(*, shell: bool = False, **options: Any) -> list[Tool]:
    """The opt-in background command tools (`background_run`, `background_status`,
    `background_wait`, `background_stop`).

    Commands run without a shell unless `shell=True`: that stops shell syntax
    in the model's string, not a model that runs `sh -c '...'` itself. They
    get a minimal environment (PATH, HOME, locale and a few other basics) plus
    `env={...}`, or the host's whole environment with `inherit_env=True`;
    everything they start ends with them, and with the host. Options are
    those of `build_background_tools`."""
    from ._tools import build_background_tools

    return build_background_tools(shell=shell, **options)
