"""Scheduled wake-ups on Temporal: Temporal schedules fired on real `taskloom
worker --temporal` processes, on SQLite and PostgreSQL stores.

The verbs and errors of `WorkQueue`'s schedules: a schedule `every=` and a
cron one wake the session on a worker and its run sees their input; they
are listed with their next time and cancelled (an unknown id: False), and
nothing fires after; a bad cron, both or neither of every= and cron=, a
non-positive or sub-second period are refused. A schedule without input
runs the session on what it has. A firing whose worker is SIGKILLed after
its steering was stored is retried on another worker and writes its input
once.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from queue_support import Workers, log_problems
from test_temporal_queue import (  # noqa: F401 (fixtures)
    effects,
    env,
    finished,
    host,
    task_queue,
    until,
    workers,
)

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import RunStatus, Runtime
from taskloom.distributed import Schedule, TemporalQueue
from taskloom.entries import Entry, Steer
from taskloom.errors import UsageError
from temporal_server import temporal_server  # noqa: F401 (fixture)

pytestmark = [pytest.mark.temporal]


def queue_of(runtime: Runtime) -> TemporalQueue:
    queue = runtime.queue
    assert isinstance(queue, TemporalQueue)
    return queue


async def runs_of(runtime: Runtime, session_id: str) -> int:
    return len(finished(await runtime.store.load(session_id)))


def steers(entries: list[Entry], text: str) -> int:
    return sum(isinstance(e.payload, Steer) and e.payload.text == text for e in entries)


async def test_schedules_fire_on_a_worker_are_listed_and_cancelled(
    host: Runtime,  # noqa: F811
    workers: Workers,  # noqa: F811
) -> None:
    queue = queue_of(host)
    session = await host.create_session(host.agent_named("bot"))
    with pytest.raises(UsageError):
        await queue.schedule(session.id)
    with pytest.raises(UsageError):
        await queue.schedule(session.id, every=timedelta(seconds=1), cron="* * * * *")
    with pytest.raises(UsageError):
        await queue.schedule(session.id, cron="not a cron")
    with pytest.raises(UsageError):
        await queue.schedule(session.id, every=timedelta(0))
    with pytest.raises(UsageError):
        await queue.schedule(session.id, every=timedelta(seconds=0.5))  # Temporal's floor
    assert await queue.schedules() == []
    workers.start()
    now = datetime.now(UTC)
    every = await queue.schedule(session.id, every=timedelta(seconds=1), input="heartbeat")
    cron = await queue.schedule(session.id, cron="* * * * * */2", input="cron beat")
    assert every.id.startswith("taskloom-schedule-") and every.id != cron.id
    listed = await queue.schedules(session.id)
    assert {s.id for s in listed} == {every.id, cron.id}
    by_id = {s.id: s for s in listed}
    assert by_id[every.id].every == timedelta(seconds=1) and by_id[every.id].cron is None
    assert by_id[cron.id].cron == "* * * * * */2" and by_id[cron.id].every is None
    assert by_id[cron.id].input == "cron beat" and by_id[every.id].session_id == session.id
    for s in listed:
        assert isinstance(s, Schedule)
        assert now - timedelta(seconds=1) <= s.next_at <= now + timedelta(seconds=4), s
    assert await queue.schedules("another-session") == []
    await until(lambda: runs_of_at_least(host, session.id, 3), timeout=60)
    texts = [m.text for m in await session.transcript() if m.role == "user"]
    assert any("heartbeat" in t for t in texts) and any("cron beat" in t for t in texts)
    assert await queue.cancel_schedule(every.id)
    assert await queue.cancel_schedule(cron.id)
    assert not await queue.cancel_schedule(cron.id)
    assert not await queue.cancel_schedule("taskloom-schedule-unknown")
    assert await queue.schedules() == []
    await asyncio.sleep(1.5)  # a firing started just before the cancel ends
    await session.wait(timeout=60)
    runs = await runs_of(host, session.id)
    await asyncio.sleep(2.5)  # two periods of the faster schedule: nothing more fires
    await session.wait(timeout=60)
    assert await runs_of(host, session.id) == runs
    entries = await session.entries()
    assert all(f.status is RunStatus.COMPLETED for f in finished(entries))
    assert log_problems(entries) == []


async def runs_of_at_least(runtime: Runtime, session_id: str, n: int) -> bool:
    return await runs_of(runtime, session_id) >= n


async def test_a_schedule_without_input_runs_the_session_on_what_it_has(
    host: Runtime,  # noqa: F811
    workers: Workers,  # noqa: F811
) -> None:
    """Its firing writes nothing, so its run must not be one that runs only on news."""
    queue = queue_of(host)
    session = await host.create_session(host.agent_named("bot"))
    workers.start()
    beat = await queue.schedule(session.id, every=timedelta(seconds=1))
    await until(lambda: runs_of_at_least(host, session.id, 1), timeout=60)
    assert await queue.cancel_schedule(beat.id)
    await session.wait(timeout=60)
    entries = await session.entries()
    assert finished(entries)[0].status is RunStatus.COMPLETED
    assert not any(isinstance(e.payload, Steer) for e in entries)


async def test_a_firing_retried_after_its_worker_died_writes_its_input_once(
    host: Runtime,  # noqa: F811
    workers: Workers,  # noqa: F811
) -> None:
    queue = queue_of(host)
    session = await host.create_session(host.agent_named("bot"))
    first = workers.start(TLT_HANG_AFTER_STEER="1")
    beat = await queue.schedule(session.id, every=timedelta(seconds=1), input="wake up once")
    first.expect(f"READY steered {session.id}")  # stored; the firing's activity not ended
    first.kill()
    # Later firings are skipped while this one waits for its retry; none after.
    assert await queue.cancel_schedule(beat.id)
    second = workers.start()
    begun = time.monotonic()
    await until(lambda: runs_of_at_least(host, session.id, 1), timeout=60)
    result = await session.wait(timeout=60)
    assert time.monotonic() - begun < 30
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {second.pid}: wake up once"
    entries = await session.entries()
    assert steers(entries, "wake up once") == 1
    assert [m.text for m in await session.transcript() if m.role == "user"] == ["wake up once"]
    assert log_problems(entries) == []
