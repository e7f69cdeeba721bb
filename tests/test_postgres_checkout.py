"""A pooled PostgreSQL connection is checked only where it could be stale; no statement runs twice.

A connection used within `check_after_idle` seconds (half a second) is handed out as it
is; one idle longer is checked with a round trip first. A connection the
server dropped while it sat idle (pg_terminate_backend, a restart) is
found out before it carries the caller's statement, which then runs once,
on a fresh connection. A statement that fails after it was sent (its commit
may have reached the server) is never repeated: the caller gets
`StoreUnavailable`, as before.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import PoolOptions
from taskloom.backends.postgres import PostgresDatabase
from taskloom.errors import StoreUnavailable
from taskloom.testing.clock import FakeClock

pytestmark = [pytest.mark.postgres, requires_postgres]

IDLE_CHECK_AFTER = PoolOptions().check_after_idle


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the database's connections are asked to run (their setup left out)."""
    statements: list[str] = []
    cls = psycopg.AsyncConnection
    execute = cls.execute

    async def spy(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        # The database's own connections (of a class of its own), not the test's admin one.
        if type(self) is not cls and "set_config" not in str(query):
            statements.append(str(query))
        return await execute(self, query, params, **kwargs)

    monkeypatch.setattr(cls, "execute", spy)
    return statements


@pytest.fixture
async def db(pg_schema: str) -> AsyncIterator[tuple[PostgresDatabase, FakeClock]]:  # noqa: F811
    """One pooled connection, its idle time read from a fake clock; a table `t (id int)`."""
    clock = FakeClock()
    database = PostgresDatabase(PG_DSN, schema=pg_schema, min_size=1, max_size=1, idle_clock=clock)
    await database.execute(f'CREATE TABLE "{pg_schema}".t (id int)')
    yield database, clock
    await database.close()


@pytest.fixture
async def admin() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the test's own, to look at and end the database's backends."""
    conn = await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True)
    yield conn
    await conn.close()


async def backend_pid(db: PostgresDatabase) -> tuple[int, int]:
    """The server process of the database's pooled connection, and that connection's socket."""
    async with db.connection() as conn:
        row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        return int(row[0]), conn.pgconn.socket


async def terminate_while_idle(admin: psycopg.AsyncConnection[Any], pid: int, sock: int) -> None:
    """End backend `pid` and wait until its goodbye has reached the pooled connection's socket."""
    row = await (await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))).fetchone()
    assert row == (True,)
    readable, _, _ = await asyncio.to_thread(select.select, [sock], [], [], 10)
    assert readable, "the terminated backend's connection never heard of it"


async def rows(admin: psycopg.AsyncConnection[Any], schema: str) -> list[tuple[Any, ...]]:
    return await (await admin.execute(f'SELECT id FROM "{schema}".t ORDER BY id')).fetchall()


async def test_a_connection_used_within_the_window_is_handed_out_unchecked(
    db: tuple[PostgresDatabase, FakeClock], sent: list[str]
) -> None:
    database, clock = db
    await database.fetchone("SELECT 1")
    clock.advance(IDLE_CHECK_AFTER / 2)
    sent.clear()
    assert await database.fetchone("SELECT 2") == (2,)
    assert sent == ["SELECT 2"]


async def test_a_connection_idle_past_the_window_is_checked_before_it_is_handed_out(
    db: tuple[PostgresDatabase, FakeClock], sent: list[str]
) -> None:
    database, clock = db
    await database.fetchone("SELECT 1")
    clock.advance(IDLE_CHECK_AFTER * 2)
    sent.clear()
    assert await database.fetchone("SELECT 2") == (2,)
    assert sent == ["", "SELECT 2"]  # the check's round trip, then the statement
    # Used just now, so handed out unchecked again.
    sent.clear()
    await database.execute("SELECT 3")
    assert sent == ["SELECT 3"]


async def test_a_connection_killed_while_idle_past_the_window_is_replaced_before_the_statement(
    db: tuple[PostgresDatabase, FakeClock],
    sent: list[str],
    admin: psycopg.AsyncConnection[Any],
    pg_schema: str,  # noqa: F811
) -> None:
    database, clock = db
    pid, sock = await backend_pid(database)
    await terminate_while_idle(admin, pid, sock)
    clock.advance(IDLE_CHECK_AFTER * 2)
    sent.clear()
    row = await database.fetchone(
        f'INSERT INTO "{pg_schema}".t VALUES (1) RETURNING pg_backend_pid()'
    )
    assert row is not None and row[0] != pid
    assert sent.count("") == 1  # checked, found dead, and the fresh one not checked again
    assert await rows(admin, pg_schema) == [(1,)]


@pytest.mark.parametrize("call", ["execute", "fetchone", "connection"])
async def test_a_connection_reset_while_idle_inside_the_window_is_replaced_transparently(
    db: tuple[PostgresDatabase, FakeClock],
    sent: list[str],
    admin: psycopg.AsyncConnection[Any],
    pg_schema: str,  # noqa: F811
    call: str,
) -> None:
    database, clock = db
    pid, sock = await backend_pid(database)
    clock.advance(IDLE_CHECK_AFTER / 2)  # recently used: no round trip would check it
    await terminate_while_idle(admin, pid, sock)
    sent.clear()
    insert = f'INSERT INTO "{pg_schema}".t VALUES (1)'
    if call == "execute":
        assert await database.execute(insert) == 1
    elif call == "fetchone":
        insert += " RETURNING id"
        assert await database.fetchone(insert) == (1,)
    else:
        async with database.connection() as conn, conn.transaction():
            await conn.execute(insert)
    # The dead connection never carried the statement: it ran once, on a fresh one.
    assert [s for s in sent if s.startswith("INSERT")] == [insert]
    assert await rows(admin, pg_schema) == [(1,)]
    assert (await backend_pid(database))[0] != pid


async def test_a_statement_that_fails_after_it_was_sent_surfaces_and_is_not_repeated(
    db: tuple[PostgresDatabase, FakeClock],
    sent: list[str],
    admin: psycopg.AsyncConnection[Any],
    pg_schema: str,  # noqa: F811
) -> None:
    database, _ = db
    pid, _ = await backend_pid(database)
    insert = f'INSERT INTO "{pg_schema}".t SELECT 1 FROM pg_sleep(30)'
    sent.clear()
    writing = asyncio.create_task(database.execute(insert))
    async with asyncio.timeout(10):  # until the server is running it
        while not await (
            await admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = 'active'"
                " AND query LIKE 'INSERT%%pg_sleep%%'",
                (pid,),
            )
        ).fetchone():
            await asyncio.sleep(0.01)
    await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StoreUnavailable, match="lost the connection"):
        async with asyncio.timeout(10):  # only so a regression cannot hang the suite
            await writing
    assert sent == [insert]  # sent once, never again
    running = await (
        await admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'INSERT%%pg_sleep%%'"
            " AND pid <> pg_backend_pid()"
        )
    ).fetchone()
    assert running == (0,)
    assert await rows(admin, pg_schema) == []
    # The database itself is fine: the next statement gets a fresh connection.
    assert await database.execute(f'INSERT INTO "{pg_schema}".t VALUES (2)') == 1
    assert await rows(admin, pg_schema) == [(2,)]


async def test_a_connection_returned_while_a_caller_waits_on_the_pool_goes_to_that_caller(
    db: tuple[PostgresDatabase, FakeClock],
) -> None:
    # A returned connection is kept at hand for the next caller, but never
    # while another caller waits on the pool for one (it would wait in vain).
    database, _ = db  # one connection
    held, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with database.connection() as conn:
            await conn.execute("SELECT 1")
            held.set()
            await release.wait()

    holding = asyncio.create_task(holder())
    await held.wait()
    waiting = asyncio.create_task(database.fetchone("SELECT 2"))
    await asyncio.sleep(0.2)  # the second caller is waiting on the pool by now
    release.set()
    async with asyncio.timeout(5):  # well within checkout_timeout (10 s)
        await holding
        assert await waiting == (2,)
