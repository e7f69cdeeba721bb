"""`RunJobs`: a session's `taskloom.run` jobs, queued and waited for.

Every job of one session carries procrastinate's `lock` for that session, so
two never run at once, and the same `queueing_lock`, so a second one
coalesces into a job still waiting. A run wanted even without news is the
exception: it waits under a queueing lock of its own (`RunDemand.ALWAYS`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from ..backends import session_lease_key
from ..errors import UsageError
from ..loop import RunOptions
from ..models import RetryPolicy
from ..runtime import RunDemand
from ._database import QueueDatabase
from ._listen import JobListener
from ._tasks import RUN_TASK

__all__ = ["RunJobs", "options_from_json", "options_to_json"]


class RunJobs:
    """Queues sessions' runs on the procrastinate queue `queue` of `database`,
    and waits until a session has no job left."""

    def __init__(self, database: QueueDatabase, *, queue: str) -> None:
        self._database = database
        self._queue = queue
        self._listener: JobListener | None = None

    async def submit(
        self,
        session_id: str,
        demand: RunDemand,
        *,
        reason: str,
        options: RunOptions | None,
        traceparent: str | None = None,
    ) -> str:
        """Queue a run of the session, or join the one waiting; the job id.

        `reason` (submit, resume, wake, schedule) is for the logs; only limits
        cross in `options`; `traceparent` is the trace the run continues.
        """
        args: dict[str, Any] = {
            "session_id": session_id,
            "reason": reason,
            "explicit": demand.value,
            "options": options_to_json(options),
        }
        if traceparent is not None:
            # The submitter's trace: the worker's run continues it.
            args["traceparent"] = traceparent
        lock = session_lease_key(session_id)
        # A run wanted anyway must not be absorbed by a waiting wake-up, which
        # runs only on news: it waits under a queueing lock of its own.
        queueing_lock = f"explicit:{session_id}" if demand is RunDemand.ALWAYS else lock
        return await self._database.defer(
            RUN_TASK, args, queue=self._queue, lock=lock, queueing_lock=queueing_lock
        )

    async def wake(self, session_id: str) -> str:
        """Queue a wake-up of the session (it runs only if something waits for it)."""
        return await self.submit(session_id, RunDemand.IF_NEEDED, reason="wake", options=None)

    async def wait_idle(self, session_id: str, timeout: float | None) -> None:
        """Return once no job of the session is queued or running; `TimeoutError` after
        `timeout` seconds. Woken by the status trigger's NOTIFY, never by polling."""
        await self._database.app()
        if self._listener is None:
            db = self._database
            self._listener = JobListener(db.url, db.schema, db.connect_kwargs)
        await self._listener.start()
        lock = session_lease_key(session_id)
        try:
            async with asyncio.timeout(timeout):
                with self._listener.waiting(lock) as changed:
                    while await self._has_job(lock):
                        await changed.wait()
                        changed.clear()
        except TimeoutError:
            raise TimeoutError(f"session {session_id} still has a job after {timeout}s") from None

    async def close(self) -> None:
        """Stop listening for job changes (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()

    async def _has_job(self, lock: str) -> bool:
        async with self._database.connection() as conn:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs "
                "WHERE lock = %s AND status IN ('todo', 'doing'))",
                (lock,),
            )
            row = await cur.fetchone()
        return bool(row and row[0])


_LIMITS = ("max_rounds", "max_model_requests", "max_tool_calls", "token_budget")


def options_to_json(options: RunOptions | None) -> dict[str, Any] | None:
    """The limits of `options` as JSON; what cannot cross a queue is refused."""
    if options is None:
        return None
    if options.strategy is not None or options.is_child:
        raise UsageError(
            "a queued run takes limits only (rounds, requests, tool calls, tokens, deadline): "
            "a strategy or a parent run cannot cross to a worker"
        )
    if options.retry != RetryPolicy():
        raise UsageError("a queued run uses its worker's retry policy; leave RunOptions.retry")
    out: dict[str, Any] = {k: getattr(options, k) for k in _LIMITS}
    deadline = options.deadline
    out["deadline"] = deadline.isoformat() if isinstance(deadline, datetime) else deadline
    return out


def options_from_json(data: object) -> RunOptions:
    """The `RunOptions` `options_to_json` described (ValueError for anything else)."""
    if data is None:
        return RunOptions()
    if not isinstance(data, dict):
        raise ValueError(f"options must be an object, not {type(data).__name__}")
    limits: dict[str, Any] = {}
    for key in _LIMITS:
        value = data.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"options.{key} must be an integer")
        limits[key] = value
    raw = data.get("deadline")
    deadline: float | datetime | None
    if raw is None or (isinstance(raw, int | float) and not isinstance(raw, bool)):
        deadline = raw
    elif isinstance(raw, str):
        deadline = datetime.fromisoformat(raw)
    else:
        raise ValueError("options.deadline must be seconds or an ISO date")
    return RunOptions(deadline=deadline, **limits)
