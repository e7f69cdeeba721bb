"""Background work as data: activities that are running, notices of work that ended.

An `ActivityRegistry` knows what runs in each session, every entry held by a
lease its owner renews (an owner that dies stops renewing, and its entry
drops out: no process cleans up after another); a `NoticeInbox` holds what
finished until the model has seen it, idempotent by notice id. Memory, SQLite
and PostgreSQL implement both and pass `taskloom.testing.background_contract`.
"""

from __future__ import annotations

from builtins import list as _list
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._codec import Stored, stored


class NoticeStatus:
    """How background work ended (a notice accepts any string)."""

    DONE = "done"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    STOPPED = "stopped"
    ASKED = "asked"
    """Not an end: the work asks the session a question (a child's `ask_parent`)."""


@stored(absent={"description": "", "started_at": 0.0})
@dataclass(frozen=True, slots=True)
class BackgroundActivity(Stored):
    """Something running in the background of a session.

    `id` is unique within the session; `kind` groups activities for per-kind
    caps ("shell", "subagent", ...); `description` is what the model is shown
    ("pytest -q"); `started_at` is in seconds since the epoch. `run_id` names
    the run that started it, `metadata` is free JSON for the owner.
    """

    id: str
    kind: str
    description: str
    started_at: float
    run_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)


@stored(absent={"text": ""})
@dataclass(frozen=True, slots=True)
class BackgroundNotice(Stored):
    """Word that an activity ended, waiting in a session's inbox for the model.

    `id` identifies the report itself (pushing the same id twice stores it
    once), `activity_id` and `kind` name the activity it is about, `text` is
    what the model reads. `status` says how it ended (see `NoticeStatus`),
    `created_at` when (seconds since the epoch), `data` is free JSON.
    """

    id: str
    activity_id: str
    kind: str
    text: str
    status: str = NoticeStatus.DONE
    created_at: float = 0.0
    data: Mapping[str, Any] = field(default_factory=dict, hash=False)


@runtime_checkable
class ActivityRegistry(Protocol):
    """What is running in each session, every entry held by a lease.

    Leases are measured by the implementation's clock (injectable, seconds).
    An entry whose lease lapsed is gone for every method: it is not listed,
    not counted against a cap and cannot be renewed — its slot may already
    belong to someone else.
    """

    async def add(
        self, session: str, activity: BackgroundActivity, lease: float, kind_cap: int | None = None
    ) -> bool:
        """Register `activity` for `lease` seconds; False if its kind is at `kind_cap`.

        The cap counts the session's live activities of the same kind and is
        checked atomically with the insert, so concurrent adds (from any
        number of tasks or processes) never exceed it. None means no cap.
        Adding an id that is already live replaces its record and lease; it
        already holds its slot, so only a change of kind can be refused.
        """
        ...

    async def list(self, session: str) -> _list[BackgroundActivity]:
        """The session's live activities, in the order they were first added."""
        ...

    async def renew(self, session: str, activity_id: str, lease: float) -> bool:
        """Extend a live activity's lease to `lease` seconds from now; False if it is gone."""
        ...

    async def remove(self, session: str, activity_id: str) -> None:
        """Forget the activity (no error if it is not registered)."""
        ...

    async def clear(self, session: str) -> None:
        """Forget every activity of the session (used when the session is deleted)."""
        ...


@runtime_checkable
class NoticeInbox(Protocol):
    """Notices per session, kept until acknowledged; idempotent by notice id."""

    async def push(self, session: str, notice: BackgroundNotice) -> bool:
        """Store the notice; True only for the first writer of its id in the session.

        Later pushes of the same id — concurrent, from other processes, or
        after it was acknowledged — change nothing and return False.
        """
        ...

    async def pending(self, session: str) -> _list[BackgroundNotice]:
        """The session's unacknowledged notices, in push order."""
        ...

    async def ack(self, session: str, ids: Iterable[str]) -> None:
        """Acknowledge exactly these notice ids (unknown ids are ignored)."""
        ...

    async def clear(self, session: str) -> None:
        """Forget every notice of the session, acknowledged or not."""
        ...
