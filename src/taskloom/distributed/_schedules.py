"""Scheduled wake-ups: `Schedules` (a part of `WorkQueue`) keeps and fires them.

procrastinate's periodic tasks are declared in code, so a schedule made at
run time is a row (listable, cancellable) plus exactly one `taskloom.tick`
job queued for its next time under the queueing lock `schedule:{id}`. The
firing moves the row on, queues the next tick in the same transaction,
then queues the session's run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..entries import Entry, Steer
from ..errors import UsageError
from ..runtime import RunDemand, RunQueue
from ._database import TICK_TASK, QueueDatabase

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from ..backends import SessionStore

_COLUMNS = "id, session_id, every_seconds, cron, input, next_at"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A scheduled wake-up of a session: every `every`, or on `cron` (with seconds
    as an optional sixth field); `input` is written as steering when it fires."""

    id: str
    session_id: str
    every: timedelta | None
    cron: str | None
    input: str | None
    next_at: datetime


def _schedule_of(row: tuple[Any, ...]) -> Schedule:
    sid, session_id, every_seconds, cron, text, next_at = row
    every = timedelta(seconds=every_seconds) if every_seconds is not None else None
    return Schedule(sid, session_id, every, cron, text, next_at)


class Schedules(RunQueue):
    """The scheduled wake-ups of a `WorkQueue` (rows in its `database`)."""

    database: QueueDatabase
    runs: str

    async def schedule(
        self,
        session_id: str,
        *,
        every: timedelta | None = None,
        cron: str | None = None,
        input: str | None = None,
    ) -> Schedule:
        """Wake the session every `every`, or on `cron`; `input` is written as
        steering each time (without it, the session runs on what it has)."""
        if (every is None) == (cron is None):
            raise UsageError("schedule() takes one of every= or cron=")
        if every is not None and every.total_seconds() <= 0:
            raise UsageError("schedule(every=...) must be positive")
        now = datetime.now(UTC)
        first = next_time(every, cron, now, now)
        schedule = Schedule(uuid.uuid4().hex, session_id, every, cron, input, first)
        async with self.database.connection() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO taskloom_queue_schedules ({_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    schedule.id,
                    session_id,
                    every.total_seconds() if every is not None else None,
                    cron,
                    input,
                    first,
                ),
            )
            await self._defer_tick(schedule.id, first, conn)
        return schedule

    async def schedules(self, session_id: str | None = None) -> list[Schedule]:
        """The scheduled wake-ups, of one session or all, by next firing time."""
        async with self.database.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM taskloom_queue_schedules "
                "WHERE %(sid)s::text IS NULL OR session_id = %(sid)s ORDER BY next_at, id",
                {"sid": session_id},
            )
            return [_schedule_of(row) for row in await cur.fetchall()]

    async def cancel_schedule(self, schedule_id: str) -> bool:
        """Stop a scheduled wake-up; False if there was none with that id."""
        async with self.database.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM taskloom_queue_schedules WHERE id = %s RETURNING id", (schedule_id,)
            )
            gone = await cur.fetchone() is not None
        # A firing already queued finds no schedule and does nothing; cancel it anyway.
        manager = (await self.database.app()).job_manager
        for job in await manager.list_jobs_async(
            queueing_lock=f"schedule:{schedule_id}", status="todo"
        ):
            assert job.id is not None
            await manager.cancel_job_by_id_async(job.id)
        return gone

    async def fire(self, store: SessionStore, schedule_id: str, due: float) -> str:
        """Fire the schedule if still due at `due` (epoch seconds); what happened."""
        async with self.database.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM taskloom_queue_schedules WHERE id = %s FOR UPDATE",
                (schedule_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return "cancelled"
            schedule = _schedule_of(row)
            if abs(schedule.next_at.timestamp() - due) > 0.001:
                return "already fired"  # a redelivered tick of a firing that went through
            nxt = next_time(schedule.every, schedule.cron, schedule.next_at, datetime.now(UTC))
            await conn.execute(
                "UPDATE taskloom_queue_schedules SET next_at = %s WHERE id = %s", (nxt, schedule_id)
            )
            await self._defer_tick(schedule_id, nxt, conn)
        # After the commit: a crash here skips one firing rather than doubling its input.
        if schedule.input is None:
            demand = RunDemand.ALWAYS
        else:
            await store.append(schedule.session_id, Entry.of(Steer(schedule.input)))
            demand = RunDemand.IF_NEEDED  # the steering is the news it runs on
        await self.submit_run(schedule.session_id, demand, reason="schedule", options=None)
        return f"fired; next at {nxt.isoformat()}"

    async def _defer_tick(self, schedule_id: str, at: datetime, conn: AsyncConnection[Any]) -> None:
        await self.database.defer(
            TICK_TASK,
            {"schedule_id": schedule_id, "due": at.timestamp()},
            queue=self.runs,
            lock=None,
            queueing_lock=f"schedule:{schedule_id}",
            at=at,
            connection=conn,
        )


def next_time(every: timedelta | None, cron: str | None, due: datetime, now: datetime) -> datetime:
    """When a schedule that was due at `due` fires next (first: `due` is now):
    never in the past (missed firings are skipped, not made up in a burst)."""
    if cron is not None:
        from croniter import croniter

        if not croniter.is_valid(cron):
            raise UsageError(f"not a cron expression: {cron!r}")
        nxt: datetime = croniter(cron, max(due, now)).get_next(datetime)
        return nxt
    assert every is not None
    nxt = due + every
    if nxt <= now:
        missed = (now - due) // every
        nxt = due + every * (missed + 1)
    return nxt
