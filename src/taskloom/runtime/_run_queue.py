"""The port a work queue implements for a runtime, and what a queued run asks."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from ..loop import RunOptions


class RunDemand(Enum):
    """What a queued run asks of the worker that takes it (`RunQueue.submit_run`).

    The value is what the job records (its `explicit` field).
    """

    IF_NEEDED = False
    """Bring the session up to date: run only for what its log holds (steering,
    news, a parked turn decided, a run cut off). Joins a waiting wake-up."""

    ALWAYS = True
    """Run the session even when nothing new was written."""


class RunQueue(Protocol):
    """Where a runtime queues runs for worker processes (the port a work queue
    implements: `taskloom.distributed.WorkQueue`).

    Every job of a session means "bring the session up to date": whatever is
    in its log when a worker takes it (steering, deferred items, notices, a
    parked turn with its decisions, a run cut off) decides what runs, so jobs
    of one session coalesce safely.
    """

    async def submit_run(
        self,
        session_id: str,
        demand: RunDemand,
        *,
        reason: str,
        options: RunOptions | None,
        traceparent: str | None = None,
    ) -> str:
        """Queue a run of the session (`reason`: submit, resume); returns the job id.
        `demand` says whether it runs when the log holds nothing new;
        `traceparent` is the submitter's trace context, which the run continues."""
        ...

    async def wake(self, session_id: str) -> str:
        """Queue a wake-up of an idle session (something was written for it)."""
        ...

    async def wait_idle(self, session_id: str, timeout: float | None) -> None:
        """Return once no job of the session is queued or running (TimeoutError after `timeout`)."""
        ...

    async def close(self) -> None:
        """Release the queue's connections."""
        ...
