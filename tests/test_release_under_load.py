"""A session's lease release is never lost, however busy the store.

A run gives its lease up when it ends. On SQLite the release goes ahead of
every write still queued (as renewals do), so a writer queue kept deep by
other sessions does not hold it back. A release that does not land within
`RELEASE_WAIT` (failed, or still waiting on a silent store) is logged, left
to finish on its own, and the same process's next run of the session takes
the lease over under a new generation, so the old hold can write nothing
more. Any other holder, a live hold of this process included, still gets
`SessionBusy`.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pg import open_durable, pg_schema  # noqa: F401 (pg_schema is a fixture)
from taskloom import Agent, RunStatus, Runtime
from taskloom.backends import (
    Lease,
    SessionStore,
    SQLiteBackend,
    acquire_or_take_over,
    holder_name,
    session_lease_key,
)
from taskloom.backends.memory import MemoryLeases
from taskloom.entries import Entry
from taskloom.errors import SessionBusy, StaleLeaseError, StoreUnavailable
from taskloom.models import FunctionModel, reply


def _agent() -> Agent:
    return Agent("a", FunctionModel(lambda request: reply("done")))


# ------------------------------------------------------------ a deep writer queue


@pytest.mark.slow
async def test_runs_of_busy_sessions_find_them_free_while_the_writer_queue_is_deep(
    tmp_path: Path,
) -> None:
    # The queue below holds every ordinary write ~1.6 s: past `RELEASE_WAIT`.
    store = SQLiteBackend(tmp_path / "busy.db").store
    db = store.database
    async with Runtime(store=store) as runtime:
        await db.run(lambda conn: conn.execute("CREATE TABLE noise (v INTEGER)"))
        sessions = [await runtime.create_session(_agent()) for _ in range(2)]
        hammering = True

        def slow_write(conn: sqlite3.Connection) -> None:
            time.sleep(0.2)  # another session's write on a slow disk
            conn.execute("INSERT INTO noise VALUES (1)")

        async def hammer() -> None:
            while hammering:
                await db.run(slow_write, inline=False)

        refused = completed = 0

        async def run_on(session: object) -> None:
            nonlocal refused, completed
            for _ in range(2):
                try:
                    result = await session.run("go")  # type: ignore[attr-defined]
                except SessionBusy:
                    refused += 1
                else:
                    assert result.status is RunStatus.COMPLETED, result.error
                    completed += 1

        writers = [asyncio.create_task(hammer()) for _ in range(8)]
        try:
            await asyncio.gather(*(run_on(s) for s in sessions))
        finally:
            hammering = False
            await asyncio.gather(*writers)
        held = [s.id for s in sessions if await store.leases.current(session_lease_key(s.id))]
        print(f"\n{completed} runs completed, {refused} refused SessionBusy, {len(held)} held")
        assert refused == 0
        assert held == []  # every release landed in the end


async def test_a_release_goes_ahead_of_every_queued_write(tmp_path: Path) -> None:
    store = SQLiteBackend(tmp_path / "order.db").store
    db = store.database
    try:
        lease = await store.leases.acquire("k", holder_name(), 30)
        assert lease is not None
        gate = threading.Event()
        released_first: list[bool] = []

        def busy(conn: sqlite3.Connection) -> None:
            gate.wait(10)

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT holder FROM taskloom_leases WHERE key = 'k'").fetchone()
            released_first.append(row[0] is None)

        running = asyncio.ensure_future(db.run(busy, inline=False))
        queued = [asyncio.ensure_future(db.run(write, inline=False)) for _ in range(50)]
        release = asyncio.ensure_future(store.leases.release(lease))
        await asyncio.sleep(0)  # every call is on the worker's queue now
        gate.set()
        await asyncio.gather(running, release, *queued)
        assert released_first == [True] * 50
    finally:
        await store.close()


# ------------------------------------------------------------ the holder's next run


@pytest.fixture
async def store(store_url: tuple[str, str]) -> AsyncIterator[SessionStore]:
    s = open_durable(*store_url)
    yield s
    await s.close()  # type: ignore[attr-defined]


def _release_fails(store: SessionStore) -> None:
    async def fails(lease: Lease) -> None:
        raise StoreUnavailable("the store stopped answering")

    store.leases.release = fails  # type: ignore[method-assign]


async def test_a_failed_release_is_logged_and_the_same_process_runs_the_session_again(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    release = store.leases.release
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(_agent())
        key = session_lease_key(session.id)
        _release_fails(store)
        with caplog.at_level(logging.WARNING, logger="taskloom"):
            assert (await session.run("first")).status is RunStatus.COMPLETED
        assert f"releasing the lease of session {session.id} failed" in caplog.text
        old = await store.leases.current(key)
        assert old is not None  # still held: the release never landed
        store.leases.release = release  # type: ignore[method-assign]

        again = await runtime.open_session(session.id, _agent())
        assert (await again.run("second")).status is RunStatus.COMPLETED
        assert await store.leases.current(key) is None
        # The take-over advanced the fence: the old hold can neither renew nor append.
        assert await store.leases.renew(old, 30) is None
        with pytest.raises(StaleLeaseError):
            await store.append(session.id, Entry("x", {"by": "old"}), fence=old.fence)


async def test_a_late_release_of_the_old_hold_leaves_the_new_one_alone(
    store: SessionStore,
) -> None:
    release = store.leases.release
    stalled = asyncio.Event()

    async def stalls(lease: Lease) -> None:
        await stalled.wait()  # a store that does not answer for a while
        await release(lease)

    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(_agent())
        key = session_lease_key(session.id)
        store.leases.release = stalls  # type: ignore[method-assign]
        assert (await session.run("first")).status is RunStatus.COMPLETED
        store.leases.release = release  # type: ignore[method-assign]
        async with session.hold() as held:  # the old release is still on its way
            stalled.set()
            await asyncio.sleep(0.1)
            current = await store.leases.current(key)
            assert current is not None and current.generation == held.lease.generation
        assert await store.leases.current(key) is None


async def test_a_live_hold_of_this_process_is_never_taken_over(store: SessionStore) -> None:
    async with Runtime(store=store) as runtime:
        session = await runtime.create_session(_agent())
        lease = await store.leases.acquire(session_lease_key(session.id), holder_name(), 30)
        assert lease is not None
        with pytest.raises(SessionBusy):
            await session.run("x")
        await store.leases.release(lease)
        async with session.hold():
            other = await runtime.open_session(session.id, _agent())
            with pytest.raises(SessionBusy):
                await other.run("x")


async def test_only_an_ended_hold_of_this_process_is_taken_over() -> None:
    leases = MemoryLeases()
    mine = await leases.acquire("k", holder_name(), 30)
    assert mine is not None
    assert await acquire_or_take_over(leases, "k", 30) is None  # not said to be over
    taken = await acquire_or_take_over(leases, "k", 30, ended=mine.holder)
    assert taken is not None and taken.generation == mine.generation + 1
    await leases.release(taken)
    # A name of another process (a live one elsewhere, or one forged) is never taken over.
    other = await leases.acquire("k", "worker-elsewhere-1", 30)
    assert other is not None
    assert await acquire_or_take_over(leases, "k", 30, ended=other.holder) is None
