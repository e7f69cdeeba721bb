"""Background work: activities and notices, their registry and inbox, the
lifecycle that orders them safely, per-run notice delivery, and the
opt-in background command tools (`background_tools()`).

The registry and inbox interfaces, their values and their implementations
live with the backends (`taskloom.backends`, one per database) and are
re-exported here; the SQLite and PostgreSQL ones import lazily
(`SQLiteActivityRegistry`, `SQLiteNoticeInbox`, `PostgresActivityRegistry`,
`PostgresNoticeInbox`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ..backends import (
    ActivityRegistry,
    BackgroundActivity,
    BackgroundNotice,
    Clock,
    Lease,
    Leases,
    NoticeInbox,
    NoticeStatus,
    system_clock,
)
from ..backends.memory import MemoryActivityRegistry, MemoryLeases, MemoryNoticeInbox
from ..errors import BackgroundCapReached, DeleteRefused, FollowRefused
from ..loop import Delivery
from ._follow import (
    CHILDREN_LOOKED_AT,
    FOLLOW_LEASE,
    MAX_ENTRIES_PER_POLL,
    MAX_QUESTIONS,
    MAX_TEXT_BYTES,
    Followed,
    FollowJob,
    Follows,
    MakeFollowed,
    bounded_text,
)
from ._lifecycle import DeleteHook, Lifecycle, Listeners, Reopen, StopHook
from ._notices import RunNotices, RunStart, RunStartHook
from ._service import BackgroundService, DecisionHook, Detached, ResumesWork, Work, WorkResult

if TYPE_CHECKING:
    from ..backends.postgres import PostgresActivityRegistry, PostgresNoticeInbox
    from ..backends.sqlite import SQLiteActivityRegistry, SQLiteNoticeInbox
    from ..tools import Tool
    from ._process import stdio_keeper_argv

__all__ = [
    "CHILDREN_LOOKED_AT",
    "FOLLOW_LEASE",
    "MAX_ENTRIES_PER_POLL",
    "MAX_QUESTIONS",
    "MAX_TEXT_BYTES",
    "ActivityRegistry",
    "BackgroundActivity",
    "BackgroundCapReached",
    "BackgroundNotice",
    "BackgroundService",
    "Clock",
    "DecisionHook",
    "DeleteHook",
    "DeleteRefused",
    "Delivery",
    "Detached",
    "FollowJob",
    "FollowRefused",
    "Followed",
    "Follows",
    "Lease",
    "Leases",
    "Lifecycle",
    "Listeners",
    "MemoryActivityRegistry",
    "MemoryLeases",
    "MakeFollowed",
    "MemoryNoticeInbox",
    "NoticeInbox",
    "NoticeStatus",
    "PostgresActivityRegistry",
    "PostgresNoticeInbox",
    "Reopen",
    "ResumesWork",
    "RunNotices",
    "RunStart",
    "RunStartHook",
    "SQLiteActivityRegistry",
    "SQLiteNoticeInbox",
    "StopHook",
    "Work",
    "WorkResult",
    "background_tools",
    "bounded_text",
    "stdio_keeper_argv",
    "system_clock",
]

_LAZY = {
    "SQLiteActivityRegistry": "..backends.sqlite",
    "SQLiteNoticeInbox": "..backends.sqlite",
    "PostgresActivityRegistry": "..backends.postgres",
    "PostgresNoticeInbox": "..backends.postgres",
    "stdio_keeper_argv": "._process",
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
