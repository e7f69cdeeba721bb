"""Background work: activities and notices, their registry and inbox, the
lifecycle that orders them safely, per-run notice delivery, and the
opt-in background command tools (`background_tools()`).

The registry and inbox interfaces, their values and their implementations
live with the backends (`taskloom.backends`, one per database); background
work reaches the runtime it serves through `BackgroundHost`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._follow import (
    CHILDREN_LOOKED_AT,
    FOLLOW_LEASE,
    MAX_ENTRIES_PER_POLL,
    MAX_QUESTIONS,
    MAX_TEXT_BYTES,
    Followed,
    FollowJob,
    Follows,
    bounded_text,
)
from ._lifecycle import Lifecycle, Listeners, Reopen
from ._notices import ResumesWork, RunNotices, RunStart
from ._service import BackgroundHost, BackgroundService, Detached, WorkResult

if TYPE_CHECKING:
    from ._process import stdio_keeper_argv
    from ._tools import background_tools

__all__ = [
    "CHILDREN_LOOKED_AT",
    "FOLLOW_LEASE",
    "MAX_ENTRIES_PER_POLL",
    "MAX_QUESTIONS",
    "MAX_TEXT_BYTES",
    "BackgroundHost",
    "BackgroundService",
    "Detached",
    "FollowJob",
    "Followed",
    "Follows",
    "Lifecycle",
    "Listeners",
    "Reopen",
    "ResumesWork",
    "RunNotices",
    "RunStart",
    "WorkResult",
    "background_tools",
    "bounded_text",
    "stdio_keeper_argv",
]

__getattr__ = lazy_exports(
    __name__, {"stdio_keeper_argv": "._process", "background_tools": "._tools"}
)
