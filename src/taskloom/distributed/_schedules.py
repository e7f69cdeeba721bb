"""Scheduled wake-ups: when a schedule fires next, and what a firing does.

procrastinate's periodic tasks are declared in code, one registry per worker
process; a schedule made at run time for one session cannot be one. So each
schedule is a row (listable, cancellable) plus exactly one queued
`taskloom.tick` job, scheduled (`schedule_at`) for its next time under the
queueing lock `schedule:{id}`. The firing moves the row to the time after,
queues that tick in the same transaction, then queues the session's run.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..entries import Entry, Steer
from ..errors import UsageError

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ._queue import Schedule, WorkQueue

__all__ = ["fire", "first_time", "next_time", "schedule_of"]

logger = logging.getLogger("taskloom.distributed")


def _cron_next(cron: str, after: datetime) -> datetime:
    from croniter import croniter

    if not croniter.is_valid(cron):
        raise UsageError(f"not a cron expression: {cron!r}")
    nxt: datetime = croniter(cron, after).get_next(datetime)
    return nxt


def first_time(every: timedelta | None, cron: str | None, now: datetime) -> datetime:
    """When a new schedule fires first."""
    if cron is not None:
        return _cron_next(cron, now)
    assert every is not None
    return now + every


def next_time(every: timedelta | None, cron: str | None, due: datetime, now: datetime) -> datetime:
    """When a schedule that was due at `due` fires next: never in the past (missed
    firings are skipped, not made up in a burst)."""
    if cron is not None:
        return _cron_next(cron, max(due, now))
    assert every is not None
    nxt = due + every
    if nxt <= now:
        missed = (now - due) // every
        nxt = due + every * (missed + 1)
    return nxt


def schedule_of(row: tuple[Any, ...]) -> Schedule:
    """A `Schedule` from its table row."""
    from ._queue import Schedule

    sid, session_id, every_seconds, cron, text, next_at = row
    every = timedelta(seconds=every_seconds) if every_seconds is not None else None
    return Schedule(sid, session_id, every, cron, text, next_at)


async def fire(queue: WorkQueue, runtime: Runtime, schedule_id: str, due: float) -> str:
    """Fire the schedule if it is still due at `due` (epoch seconds); what happened."""
    pool = queue._pool
    assert pool is not None
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "SELECT id, session_id, every_seconds, cron, input, next_at "
            "FROM taskloom_queue_schedules WHERE id = %s FOR UPDATE",
            (schedule_id,),
        )
        row = await cur.fetchone()
        if row is None:
            return "cancelled"
        schedule = schedule_of(row)
        if abs(schedule.next_at.timestamp() - due) > 0.001:
            return "already fired"  # a redelivered tick of a firing that went through
        nxt = next_time(schedule.every, schedule.cron, schedule.next_at, datetime.now(UTC))
        await conn.execute(
            "UPDATE taskloom_queue_schedules SET next_at = %s WHERE id = %s", (nxt, schedule_id)
        )
        await queue._defer_tick(schedule_id, nxt, conn)
    # After the commit: a crash here skips one firing rather than doubling its input.
    if schedule.input is not None:
        await runtime.store.append(schedule.session_id, Entry.of(Steer(schedule.input)))
    await queue.submit_run(
        schedule.session_id, reason="schedule", explicit=schedule.input is None, options=None
    )
    return f"fired; next at {nxt.isoformat()}"
