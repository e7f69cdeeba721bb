"""Scheduled wake-ups on Temporal: `TemporalQueue.schedule` makes a Temporal schedule.

The schedule (id `taskloom-schedule-<hex>`) keeps the session, the input and
the period in its memo, so `schedules()` rebuilds each `Schedule` from
Temporal alone, and its action starts one `taskloom.schedule_firing`
workflow per firing on the queue's task queue. Its overlap policy is skip: a
firing that comes while the previous one still runs is skipped, and one
missed while the server was down is not made up (catch-up window 10 s), as
the procrastinate engine skips missed firings rather than firing them in a
burst.

The firing's activity does what `Schedules.fire` does after its commit:
append the input as steering, then wake the session's workflow
(signal-with-start, `RunDemand.IF_NEEDED`; `ALWAYS` without input). Its
steering carries the firing's workflow id as `firing` key in its data (the
schedule's id and the scheduled time: Temporal appends that time to the id
it starts each firing with), and an attempt after the first (its worker died
or the store failed after the append) looks for that key in the session's
log before appending: the input is written once however often the activity
is retried. A retried firing without input may wake the session once more.

This module imports temporalio only when it is used, like `_temporal`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .._extras import needs_extra
from ..entries import Entry, EntryKind
from ..errors import SessionNotFound, StoreUnavailable, UsageError
from ..runtime import RunDemand
from ._temporal_names import FIRE_ACTIVITY, FIRING_PREFIX, FIRING_WORKFLOW, SCHEDULE_PREFIX

if TYPE_CHECKING:
    from temporalio.client import Client, ScheduleSpec

    from ..backends import SessionStore
    from ._schedules import Schedule
    from ._temporal import TemporalQueue


class MalformedFiring(ValueError):
    """A firing's arguments are not the ones a taskloom schedule gives (not retried)."""


FIRING_KEY = "firing"
"""The key, in a scheduled steering's data, of the firing that wrote it."""

NEVER = datetime.max.replace(tzinfo=UTC)
"""A schedule's `next_at` when Temporal plans no further firing."""


def temporal_cron(cron: str) -> str:
    """`cron` as Temporal reads it: the same five fields, or, with croniter's
    seconds as a sixth field (and a year as a seventh), Temporal's seven
    fields, which put the seconds first. `UsageError` when croniter refuses it."""
    with needs_extra("a cron schedule on Temporal"):
        from croniter import croniter

    if not croniter.is_valid(cron):
        raise UsageError(f"not a cron expression: {cron!r}")
    fields = cron.split()
    if len(fields) < 6:
        return cron
    return " ".join([fields[5], *fields[:5], *(fields[6:] or ["*"])])


def _spec(every: timedelta | None, cron: str | None, now: datetime) -> ScheduleSpec:
    from temporalio.client import ScheduleIntervalSpec, ScheduleSpec

    if cron is not None:
        return ScheduleSpec(cron_expressions=[temporal_cron(cron)])
    assert every is not None
    seconds = every.total_seconds()
    if seconds < 1 or seconds != int(seconds):
        raise UsageError(
            f"schedule(every=...) on Temporal takes whole seconds, at least one (got {every})"
        )
    # Temporal counts intervals from the epoch; the offset makes the first
    # firing come one period from now, as on the procrastinate engine.
    offset = timedelta(seconds=int(now.timestamp()) % int(seconds))
    return ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every, offset=offset)])


def _schedule_of(
    schedule_id: str, memo: Mapping[str, Any], next_times: Sequence[datetime]
) -> Schedule:
    from ._schedules import Schedule

    every = memo.get("every")
    return Schedule(
        schedule_id,
        str(memo["session_id"]),
        timedelta(seconds=float(every)) if every is not None else None,
        memo.get("cron"),
        memo.get("input"),
        min(next_times, default=NEVER),
    )


class TemporalSchedules:
    """The scheduled wake-ups of a `TemporalQueue` (Temporal schedules; see the
    module docstring), with the verbs and the `Schedule` of `WorkQueue`'s."""

    task_queue: str
    heartbeat_timeout: float

    async def client(self) -> Client:
        raise NotImplementedError

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        raise NotImplementedError

    async def schedule(
        self,
        session_id: str,
        *,
        every: timedelta | None = None,
        cron: str | None = None,
        input: str | None = None,
    ) -> Schedule:
        """Wake the session every `every` (whole seconds), or on `cron` (croniter's
        syntax: five fields, or seconds as a sixth, in UTC); `input` is written as
        steering each time (without it, the session runs on what it has)."""
        from temporalio.client import (
            Schedule as TemporalSchedule,
        )
        from temporalio.client import (
            ScheduleActionStartWorkflow,
            ScheduleOverlapPolicy,
            SchedulePolicy,
        )
        from temporalio.service import RPCError, RPCStatusCode

        if (every is None) == (cron is None):
            raise UsageError("schedule() takes one of every= or cron=")
        if every is not None and every.total_seconds() <= 0:
            raise UsageError("schedule(every=...) must be positive")
        spec = _spec(every, cron, datetime.now(UTC))
        key = uuid.uuid4().hex
        memo = {
            "session_id": session_id,
            "every": every.total_seconds() if every is not None else None,
            "cron": cron,
            "input": input,
            "task_queue": self.task_queue,
        }
        action = ScheduleActionStartWorkflow(
            FIRING_WORKFLOW,
            {"session_id": session_id, "input": input, "heartbeat_timeout": self.heartbeat_timeout},
            id=FIRING_PREFIX + key,
            task_queue=self.task_queue,
        )
        policy = SchedulePolicy(
            overlap=ScheduleOverlapPolicy.SKIP, catchup_window=timedelta(seconds=10)
        )
        client = await self.client()
        try:
            handle = await client.create_schedule(
                SCHEDULE_PREFIX + key,
                TemporalSchedule(action=action, spec=spec, policy=policy),
                memo=memo,
            )
            described = await handle.describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.INVALID_ARGUMENT:
                raise UsageError(f"Temporal refused the schedule: {exc}") from None
            raise self._unavailable(exc) from None
        return _schedule_of(handle.id, memo, described.info.next_action_times)

    async def schedules(self, session_id: str | None = None) -> list[Schedule]:
        """The scheduled wake-ups on this queue's task queue, of one session or all,
        by next firing time. Found through Temporal's list of schedules (its
        visibility: a server with a search backend may list a schedule made a
        moment ago only a moment later), each described afresh."""
        from temporalio.service import RPCError, RPCStatusCode

        client = await self.client()
        out: list[Schedule] = []
        try:
            listed = [s.id async for s in await client.list_schedules()]
            for schedule_id in listed:
                if not schedule_id.startswith(SCHEDULE_PREFIX):
                    continue
                # Described, not taken from the list: Temporal's list lags a
                # deletion, a description does not.
                try:
                    described = await client.get_schedule_handle(schedule_id).describe()
                except RPCError as exc:
                    if exc.status is RPCStatusCode.NOT_FOUND:
                        continue
                    raise
                memo = await described.memo()
                if memo.get("task_queue") != self.task_queue or "session_id" not in memo:
                    continue
                if session_id is not None and memo["session_id"] != session_id:
                    continue
                out.append(_schedule_of(schedule_id, memo, described.info.next_action_times))
        except RPCError as exc:
            raise self._unavailable(exc) from None
        return sorted(out, key=lambda s: (s.next_at, s.id))

    async def cancel_schedule(self, schedule_id: str) -> bool:
        """Stop a scheduled wake-up; False if there was none with that id (a firing
        already started still wakes the session)."""
        from temporalio.service import RPCError, RPCStatusCode

        if not schedule_id.startswith(SCHEDULE_PREFIX):
            return False
        try:
            await (await self.client()).get_schedule_handle(schedule_id).delete()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return False
            raise self._unavailable(exc) from None
        return True


async def _steered(store: SessionStore, session_id: str, firing: str) -> bool:
    """Whether the firing's steering is in the session's log already (read on a
    retried attempt only: the whole log, newest first)."""
    for entry in reversed(await store.load(session_id)):
        if entry.kind == EntryKind.STEER and entry.data.get(FIRING_KEY) == firing:
            return True
    return False


async def fire(
    store: SessionStore, queue: TemporalQueue, args: dict[str, Any], retried: bool
) -> str:
    """Fire a schedule (see the module docstring); what was done. `retried`:
    this is not the firing's first attempt."""
    session_id, text, firing = args.get("session_id"), args.get("input"), args.get("firing")
    if not isinstance(session_id, str) or not isinstance(firing, str):
        raise MalformedFiring(f"malformed firing: {args!r}"[:300])
    if text is None:
        demand = RunDemand.ALWAYS
    elif not isinstance(text, str):
        raise MalformedFiring("malformed firing: 'input' must be a string")
    else:
        if not (retried and await _steered(store, session_id, firing)):
            await store.append(
                session_id, Entry(EntryKind.STEER, {"text": text, FIRING_KEY: firing})
            )
        demand = RunDemand.IF_NEEDED  # the steering is the news it runs on
    await queue.submit_run(session_id, demand, reason="schedule", options=None)
    return f"woke {session_id}"


def fire_activity(
    queue: TemporalQueue, store: SessionStore, beat_every: float
) -> Callable[[dict[str, Any]], Awaitable[str]]:
    """The `taskloom.fire_schedule` activity of a worker: `fire`, heartbeating
    every `beat_every` seconds; a session gone or a malformed firing is not
    retried, anything else is."""
    from temporalio import activity
    from temporalio.exceptions import ApplicationError

    @activity.defn(name=FIRE_ACTIVITY)
    async def fire_schedule(args: dict[str, Any]) -> str:
        async def beat() -> None:
            while True:
                activity.heartbeat()
                await asyncio.sleep(beat_every)

        beating = asyncio.ensure_future(beat())
        try:
            return await fire(store, queue, args, activity.info().attempt > 1)
        except SessionNotFound as exc:
            raise ApplicationError(str(exc), type="SessionNotFound", non_retryable=True) from None
        except MalformedFiring as exc:
            raise ApplicationError(str(exc), type="Malformed", non_retryable=True) from None
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    return fire_schedule
