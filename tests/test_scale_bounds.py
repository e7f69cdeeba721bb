"""Durable work at scale: bounded connections, children that wait their turn,
lease renewals that never queue behind a holder's own work.

What must hold: a process never holds more PostgreSQL connections than its
pool, and a crowded pool answers "all busy" without opening another; a
runtime runs at most `child_concurrency` children at once and queues the rest
instead of failing them; a lease renewal goes ahead of work already queued on
SQLite's one connection, and on PostgreSQL has a connection no ordinary caller
can take; a lost lease is logged as lapsed or as taken over, whichever it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom import Agent, RunOptions, Runtime, SubAgent, Usage
from taskloom.backends import PostgresBackend, SQLiteBackend
from taskloom.backends.memory import MemoryStore
from taskloom.backends.postgres import PostgresDatabase
from taskloom.backends.sqlite import SQLiteDatabase
from taskloom.entries import SubagentReport, SubagentResult
from taskloom.errors import StoreUnavailable, UsageError
from taskloom.models import FunctionModel, ModelRequest, ScriptedModel, reply
from taskloom.testing.clock import FakeClock


def _app_dsn(app: str) -> str:
    return f"{PG_DSN}{'&' if '?' in PG_DSN else '?'}application_name={app}"


def _connections(app: str) -> int:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchone()
    return int(row[0]) if row else 0


class _Sampler(threading.Thread):
    """The most connections named `app` seen at once, sampled every 5 ms."""

    def __init__(self, app: str) -> None:
        super().__init__(daemon=True)
        self.app, self.peak, self.samples = app, 0, 0
        self._done = threading.Event()

    def run(self) -> None:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            while not self._done.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    (self.app,),
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)
                self.samples += 1
                time.sleep(0.005)

    def finish(self) -> int:
        self._done.set()
        self.join()
        return self.peak


def _fan_out_agent(n: int) -> tuple[Agent, ScriptedModel]:
    def child(request: ModelRequest) -> object:
        return reply("done", usage=Usage(5, 1))

    sub = SubAgent("worker", "Works.", FunctionModel(child))
    lead = ScriptedModel(
        [reply(tool_calls=[("worker", {"task": f"t{i}"}) for i in range(n)]), reply("all done")]
    )
    return Agent("lead", lead, tools=[sub]), lead


async def _each_child_ended_once(runtime: Runtime, session_id: str, n: int) -> None:
    reports: dict[str, int] = {}
    for e in await runtime.store.load(session_id):
        if isinstance(e.payload, SubagentReport):
            reports[e.payload.child_session_id] = reports.get(e.payload.child_session_id, 0) + 1
    assert len(reports) == n and set(reports.values()) == {1}
    for child_id in reports:
        ends = [e for e in await runtime.store.load(child_id) if e.kind == SubagentResult.KIND]
        assert len(ends) == 1, child_id


# ---------------------------------------------------------------- PostgreSQL


@requires_postgres
@pytest.mark.slow
async def test_a_wide_fan_out_on_postgres_stays_within_the_pool(pg_schema: str) -> None:  # noqa: F811
    # 400 children against a pool of 4 and a 2-second checkout bound: without
    # the runtime's queue most children fail on checkout, and each failure
    # used to open a direct connection, taking the server's connections.
    n, pool = 400, 4
    app = f"tl-{uuid.uuid4().hex[:12]}"
    store = PostgresBackend(
        _app_dsn(app), schema=pg_schema, max_size=pool, checkout_timeout=2
    ).store
    sampler = _Sampler(app)
    sampler.start()
    try:
        async with Runtime(store=store) as runtime:
            agent, lead = _fan_out_agent(n)
            session = await runtime.create_session(agent)
            result = await session.run("go", options=RunOptions(max_rounds=3))
            failed = sum(1 for r in lead.requests[1].messages[-1].results if r.is_error)
            peak = sampler.finish()
            print(f"{n} children: {failed} failed, peak {peak} connections, pool {pool}")
            assert result.text == "all done"
            assert failed == 0
            assert 0 < peak <= pool, (peak, sampler.samples)
            await _each_child_ended_once(runtime, session.id, n)
    finally:
        if sampler.is_alive():
            sampler.finish()


@requires_postgres
async def test_a_crowded_pool_says_all_busy_and_opens_nothing_more(pg_schema: str) -> None:  # noqa: F811
    app = f"tl-{uuid.uuid4().hex[:12]}"
    db = PostgresDatabase(_app_dsn(app), schema=pg_schema, max_size=2, checkout_timeout=0.3)
    try:
        async with db.connection() as held:  # the one ordinary caller's share
            await held.execute("SELECT 1")
            for _ in range(3):
                with pytest.raises(StoreUnavailable, match="all busy"):
                    async with db.connection():
                        pass
            # The reserved connection still serves urgent work meanwhile.
            async with db.connection(urgent=True) as urgent:
                await urgent.execute("SELECT 1")
            assert _connections(app) <= 2
    finally:
        await db.close()


@requires_postgres
async def test_an_urgent_caller_passes_a_queue_of_ordinary_ones(pg_schema: str) -> None:  # noqa: F811
    db = PostgresDatabase(PG_DSN, schema=pg_schema, max_size=2, checkout_timeout=5)
    try:
        gate = asyncio.Event()

        async def ordinary() -> None:
            async with db.connection() as conn:
                await gate.wait()
                await conn.execute("SELECT 1")

        crowd = [asyncio.create_task(ordinary()) for _ in range(20)]
        await asyncio.sleep(0.05)  # let the crowd queue for the one shared connection
        started = time.perf_counter()
        async with asyncio.timeout(2), db.connection(urgent=True) as conn:
            await conn.execute("SELECT 1")
        waited = time.perf_counter() - started
        assert not gate.is_set() and not any(t.done() for t in crowd)
        gate.set()
        await asyncio.gather(*crowd)
        print(f"urgent checkout past 20 waiting callers took {waited * 1000:.1f} ms")
    finally:
        await db.close()


# ---------------------------------------------------------------- SQLite


async def test_sqlite_runs_urgent_calls_before_queued_ordinary_ones(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "order.db")
    order: list[str] = []
    release = threading.Event()
    try:
        first = asyncio.ensure_future(db.run(lambda conn: release.wait(5)))
        await asyncio.sleep(0.05)  # the worker is now inside the first call
        queued = [
            asyncio.ensure_future(db.run(lambda conn, i=i: order.append(f"ordinary {i}")))
            for i in range(5)
        ]
        urgent = asyncio.ensure_future(db.run(lambda conn: order.append("urgent"), urgent=True))
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(first, urgent, *queued)
        assert order == ["urgent"] + [f"ordinary {i}" for i in range(5)]
    finally:
        await db.close()


async def test_sqlite_withdraws_a_queued_call_whose_caller_gave_up(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "withdraw.db")
    ran: list[str] = []
    started, release = threading.Event(), threading.Event()

    def hold(conn: object) -> bool:
        started.set()
        return release.wait(5)

    try:
        first = asyncio.ensure_future(db.run(hold))
        # The worker holds the first call before the second is queued (a
        # worker that had not yet taken the first could take both at once).
        assert await asyncio.to_thread(started.wait, 5)
        gone = asyncio.ensure_future(db.run(lambda conn: ran.append("withdrawn")))
        await asyncio.sleep(0)  # the second call queued behind the first
        gone.cancel()
        # The cancel reaches the worker's queue through a loop callback:
        # let it arrive before the worker is freed to take the next call.
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        release.set()
        await first
        await db.run(lambda conn: ran.append("after"))
        assert ran == ["after"]
    finally:
        await db.close()


async def test_a_wide_fan_out_on_sqlite_completes_and_keeps_the_parents_lease(
    tmp_path: Path,
) -> None:
    n = 300
    async with Runtime(store=f"sqlite:///{tmp_path / 'fan.db'}") as runtime:
        assert runtime.child_concurrency == 32
        agent, lead = _fan_out_agent(n)
        session = await runtime.create_session(agent)
        result = await session.run("go", options=RunOptions(max_rounds=3))
        assert result.text == "all done", result
        assert not any(r.is_error for r in lead.requests[1].messages[-1].results)
        await _each_child_ended_once(runtime, session.id, n)


# ---------------------------------------------------------------- the runtime's queue


async def test_children_beyond_child_concurrency_wait_their_turn() -> None:
    running = peak = 0

    async def child(request: ModelRequest) -> object:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.005)
        running -= 1
        return reply("done")

    sub = SubAgent("worker", "Works.", FunctionModel(child))
    lead = ScriptedModel(
        [reply(tool_calls=[("worker", {"task": f"t{i}"}) for i in range(24)]), reply("ok")]
    )
    async with Runtime(child_concurrency=3) as runtime:
        session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
        result = await session.run("go")
    assert result.text == "ok"
    assert not any(r.is_error for r in lead.requests[1].messages[-1].results)
    assert peak == 3


def test_a_runtime_queues_children_in_one_event_loop_after_another() -> None:
    # The places belong to the loop they were taken in: a runtime reused by a
    # second asyncio.run must not find a semaphore bound to the first.
    runtime = Runtime(child_concurrency=2)

    async def fan_out() -> str:
        lead = ScriptedModel(
            [reply(tool_calls=[("worker", {"task": f"t{i}"}) for i in range(6)]), reply("ok")]
        )

        async def child(request: ModelRequest) -> object:
            await asyncio.sleep(0.001)
            return reply("done")

        sub = SubAgent("worker", "Works.", FunctionModel(child))
        session = await runtime.create_session(Agent("lead", lead, tools=[sub]))
        result = await session.run("go")
        assert not any(r.is_error for r in lead.requests[1].messages[-1].results)
        return result.text

    assert asyncio.run(fan_out()) == "ok"
    assert asyncio.run(fan_out()) == "ok"


def test_child_concurrency_defaults_to_what_the_store_carries(tmp_path: Path) -> None:
    assert Runtime().child_concurrency is None
    assert Runtime(store=SQLiteBackend(tmp_path / "a.db").store).child_concurrency == 32
    assert Runtime(store=PostgresBackend(PG_DSN, max_size=5).store).child_concurrency == 16
    assert Runtime(child_concurrency=0).child_concurrency is None
    assert (
        Runtime(store=SQLiteBackend(tmp_path / "b.db").store, child_concurrency=7).child_concurrency
        == 7
    )
    with pytest.raises(UsageError, match="child_concurrency"):
        Runtime(child_concurrency=-1)


# ---------------------------------------------------------------- lost leases


async def _lose_lease(caplog: pytest.LogCaptureFixture, *, taken: bool) -> str:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    lost = asyncio.Event()
    async with Runtime(store=store, lease_ttl=0.06) as runtime:
        session = await runtime.create_session(Agent("a", ScriptedModel([])))
        with caplog.at_level(logging.WARNING, logger="taskloom"):
            async with session.hold() as held:
                held.on_lost(lost.set)
                clock.advance(1.0)  # past the lease's end before its first renewal
                if taken:
                    assert await store.leases.acquire(f"session:{session.id}", "other", 60)
                async with asyncio.timeout(5):
                    await lost.wait()
    return "\n".join(r.getMessage() for r in caplog.records)


async def test_a_lease_that_lapsed_is_logged_as_lapsed(caplog: pytest.LogCaptureFixture) -> None:
    text = await _lose_lease(caplog, taken=False)
    assert "lapsed before it could be renewed" in text
    assert "taken over" not in text


async def test_a_lease_another_writer_took_is_logged_as_taken_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = await _lose_lease(caplog, taken=True)
    assert "taken over by another writer" in text
    assert "lapsed" not in text
