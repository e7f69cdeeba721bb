"""A store that cannot be used says where and why, quickly; statements are bounded.

PostgreSQL: an unreachable server is reported within `connect_timeout` as
`StoreUnavailable` naming host, port and cause; a statement that the server
keeps waiting is cut by `statement_timeout`; a caller's timeout cancels the
statement on the server and leaves the pool healthy. SQLite: failing to open
the file or waiting out a writer's lock names the file.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import PostgresBackend, SessionMeta, SQLiteBackend
from taskloom.backends.postgres import PostgresDatabase
from taskloom.entries import Entry
from taskloom.errors import StoreError, StoreUnavailable


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def entry(text: str) -> Entry:
    return Entry("note", {"text": text})


# -- PostgreSQL: connecting ----------------------------------------------------------


async def test_an_unreachable_server_is_reported_fast_with_host_port_and_cause() -> None:
    port = free_port()
    store = PostgresBackend(f"postgresql://postgres@127.0.0.1:{port}/test", connect_timeout=3).store
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            await store.get("s")
        elapsed = time.monotonic() - started
        message = str(caught.value)
        print(f"{elapsed:.2f}s: {message}")
        assert elapsed < 10
        assert "127.0.0.1" in message and str(port) in message
        assert "refused" in message.lower()
        # Still reported the same way on the next call (nothing is left half-open).
        with pytest.raises(StoreUnavailable, match="refused"):
            await store.append("s", entry("x"))
    finally:
        await store.close()


def test_timeouts_must_be_positive() -> None:
    for option in ("connect_timeout", "checkout_timeout", "statement_timeout"):
        with pytest.raises(ValueError, match=option):
            _ = PostgresBackend(PG_DSN, **{option: 0}).store


# -- PostgreSQL: statements the server keeps waiting -----------------------------------


@pytest.fixture
async def locker(pg_schema: str) -> AsyncIterator[psycopg.AsyncConnection[object]]:  # noqa: F811
    """A separate connection that can hold locks on the test schema's tables."""
    conn = await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()


async def waiting_on_entries(conn: psycopg.AsyncConnection[object], schema: str) -> int:
    """How many other sessions are running a statement on the schema's entries table."""
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
        " AND pid <> pg_backend_pid() AND query LIKE %s",
        (f'%"{schema}".taskloom_entries%',),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])  # type: ignore[call-overload]


@requires_postgres
async def test_statement_timeout_ends_a_statement_the_server_keeps_waiting(
    pg_schema: str,  # noqa: F811
    locker: psycopg.AsyncConnection[object],
) -> None:
    store = PostgresBackend(PG_DSN, schema=pg_schema, statement_timeout=1.0).store
    try:
        await store.create(SessionMeta("s", "a"))
        async with locker.transaction():
            await locker.execute(f'LOCK TABLE "{pg_schema}".taskloom_entries')
            started = time.monotonic()
            with pytest.raises(StoreError, match="statement timeout"):
                async with asyncio.timeout(30):  # only so a regression cannot hang the suite
                    await store.append("s", entry("blocked"))
            elapsed = time.monotonic() - started
        print(f"blocked append ended after {elapsed:.2f}s")
        assert elapsed < 5
        assert await store.append("s", entry("after")) == 1
    finally:
        await store.close()


@requires_postgres
async def test_a_callers_timeout_cancels_the_statement_on_the_server(
    pg_schema: str,  # noqa: F811
    locker: psycopg.AsyncConnection[object],
) -> None:
    store = PostgresBackend(PG_DSN, schema=pg_schema, max_size=1).store
    try:
        await store.create(SessionMeta("s", "a"))
        async with locker.transaction():
            await locker.execute(f'LOCK TABLE "{pg_schema}".taskloom_entries')
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1):
                    await store.append("s", entry("blocked"))
            elapsed = time.monotonic() - started
            # Still inside the lock: the statement is gone from the server
            # (cancelled there, not left running behind the caller's back).
            assert await waiting_on_entries(locker, pg_schema) == 0
        print(f"cancelled append returned after {elapsed:.2f}s")
        assert elapsed < 3
        # The one pooled connection came back usable.
        assert await store.append("s", entry("after")) == 1
        assert [e.data["text"] for e in await store.load("s")] == ["after"]
    finally:
        await store.close()


# -- the client-side bound --------------------------------------------------------


@pytest.fixture
async def bounded(pg_schema: str) -> AsyncIterator[PostgresDatabase]:  # noqa: F811
    """A database whose connections may be used for 0.05 + 2 seconds, its pool open."""
    db = PostgresDatabase(PG_DSN, schema=pg_schema, statement_timeout=0.05)
    async with db.connection():
        pass
    yield db
    await db.close()


@requires_postgres
async def test_the_bound_cancels_again_when_its_first_cancel_is_spent(
    bounded: PostgresDatabase,
) -> None:
    # psycopg answers a cancel with cleanup that may itself wait on a silent
    # server: one cancel is not enough to bound the block.
    started = time.monotonic()
    cleanups_interrupted = 0
    with pytest.raises(StoreUnavailable, match=r"did not answer within 2\.05 s"):
        async with asyncio.timeout(30):  # only so a regression cannot hang the suite
            async with bounded.connection():
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    try:
                        await asyncio.sleep(30)  # a cleanup that would wait forever
                    except asyncio.CancelledError:
                        cleanups_interrupted += 1
                        raise
                    raise
    elapsed = time.monotonic() - started
    print(f"the bounded use ended after {elapsed:.2f}s")
    assert cleanups_interrupted == 1
    assert elapsed < 2.05 + 1 + 1  # the bound, then a second cancel about a second later
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # its own cancels withdrawn


@requires_postgres
async def test_the_bound_leaves_an_outer_timeout_its_own_timeout_error(
    bounded: PostgresDatabase,
) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(2.3):
            async with bounded.connection():
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    await asyncio.sleep(30)  # interrupted by the outer timeout
                    raise


# -- SQLite ------------------------------------------------------------------------


async def test_sqlite_that_cannot_open_its_file_names_it(tmp_path: Path) -> None:
    store = SQLiteBackend(tmp_path).store  # a directory, not a database file
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.get("s")
        assert str(tmp_path) in str(caught.value)
        assert "unable to open" in str(caught.value)
    finally:
        await store.close()


async def test_sqlite_locked_past_busy_timeout_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteBackend(path, busy_timeout=0.2).store
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await store.create(SessionMeta("s", "a"))
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable) as caught:
            await store.append("s", entry("x"))
        assert str(path) in str(caught.value)
        assert "locked" in str(caught.value)
        other.execute("ROLLBACK")
        assert await store.append("s", entry("x")) == 1
    finally:
        other.close()
        await store.close()
