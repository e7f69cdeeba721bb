"""A single statement through `PostgresDatabase` behaves as psycopg's cursor would.

`fetchone`, `fetchall` and `execute` send one statement on the pooled
connection's libpq layer rather than through a cursor; what they return,
what they raise and the state they leave the connection in are checked here
against psycopg's own `AsyncConnection.execute` on the same server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (fixture)
from taskloom.backends.postgres import PostgresDatabase

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres, requires_postgres]


@pytest.fixture
async def db(pg_schema: str) -> AsyncIterator[PostgresDatabase]:  # noqa: F811
    # One connection: every statement of a test meets the state the last one left.
    database = PostgresDatabase(PG_DSN, schema=pg_schema, max_size=1, statement_timeout=30)
    await database.execute(
        f'CREATE TABLE "{pg_schema}".t (id int PRIMARY KEY, body text, blob bytea, doc jsonb)'
    )
    try:
        yield database
    finally:
        await database.close()


async def _psycopg(query: str, params: Any, fetch: str) -> Any:
    """What psycopg's cursor gives for `query` (`fetch`: one, all or rowcount)."""
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        cursor = await conn.execute(query, params)
        if fetch == "one":
            return await cursor.fetchone()
        if fetch == "all":
            return await cursor.fetchall()
        return cursor.rowcount


VALUES: list[tuple[str, Any]] = [
    ("SELECT %s::int, %s::text, %s::bytea, %s", (7, "é ✓", b"\x00\xff" * 900, None)),
    ("SELECT %s, %s, %s", (2**40, 1.5, True)),
    ("SELECT %s::jsonb, now() > %s::timestamptz", (Jsonb({"a": [1, None]}), "2000-01-01")),
    ("SELECT %(a)s::int + %(b)s::int, %(a)s::int, '100%%'", {"a": 3, "b": 4}),
    ("SELECT x FROM generate_series(1, %s) AS x", (3,)),
    ("SELECT x FROM generate_series(1, %s) AS x WHERE x > 5", (3,)),
    ("SELECT 1, 'no parameters'::text", ()),
    ("SELECT 1; SELECT 2, 3", ()),  # the simple protocol: several statements
]


@pytest.mark.parametrize(("query", "params"), VALUES)
async def test_rows_are_psycopgs_also_once_prepared(
    db: PostgresDatabase, query: str, params: Any
) -> None:
    one, rows = await _psycopg(query, params, "one"), await _psycopg(query, params, "all")
    # Enough uses that the statement is prepared on the connection midway.
    for _ in range(8):
        assert await db.fetchone(query, params) == one
        assert await db.fetchall(query, params) == rows


async def test_rowcounts_are_psycopgs(db: PostgresDatabase, pg_schema: str) -> None:  # noqa: F811
    table = f'"{pg_schema}".t'
    for i in range(7):  # past the preparation threshold
        assert await db.execute(f"INSERT INTO {table} (id) VALUES (%s)", (i,)) == 1
    assert await db.execute(f"UPDATE {table} SET body = %s WHERE id < %s", ("x", 3)) == 3
    assert await db.execute(f"SELECT id FROM {table} WHERE id >= %s", (5,)) == 2
    assert await db.execute(f"DELETE FROM {table} WHERE id > %s", (100,)) == 0
    assert await db.execute(f"UPDATE {table} SET body = 'y' WHERE id > 4") == 2
    assert await db.fetchone(f"SELECT count(*) FROM {table} WHERE body = %s", ("x",)) == (3,)
    assert await db.fetchall(f"SELECT id FROM {table} WHERE body = 'y' ORDER BY id") == [(5,), (6,)]


async def test_a_statement_with_no_rows_to_fetch_raises_as_psycopg(
    db: PostgresDatabase,
    pg_schema: str,  # noqa: F811
) -> None:
    query = f'UPDATE "{pg_schema}".t SET body = %s WHERE id = %s'
    with pytest.raises(psycopg.ProgrammingError) as expected:
        await _psycopg(query, ("x", -1), "one")
    with pytest.raises(psycopg.ProgrammingError) as raised:
        await db.fetchone(query, ("x", -1))
    assert str(raised.value) == str(expected.value)


@pytest.mark.parametrize(
    ("query", "params", "error"),
    [
        ("INSERT INTO {t} (id) VALUES (%s)", (1,), errors.UniqueViolation),
        ("SELECT * FROM {t}_missing WHERE id = %s", (1,), errors.UndefinedTable),
        ("SELECT %s::int / 0", (1,), errors.DivisionByZero),
        ("SELEC %s", (1,), errors.SyntaxError),
        ("SELECT %s::int", ("not a number",), errors.InvalidTextRepresentation),
    ],
)
async def test_a_server_error_raises_psycopgs_class_and_the_next_statement_works(
    db: PostgresDatabase,
    pg_schema: str,  # noqa: F811
    query: str,
    params: Any,
    error: type[Exception],
) -> None:
    table = f'"{pg_schema}".t'
    query = query.format(t=table)
    await db.execute(f"INSERT INTO {table} (id) VALUES (%s)", (1,))
    with pytest.raises(error) as expected:
        await _psycopg(query, params, "rowcount")
    for _ in range(7):  # the same after the statement would have been prepared
        with pytest.raises(error) as raised:
            await db.execute(query, params)
        assert type(raised.value) is type(expected.value)
        assert raised.value.sqlstate == expected.value.sqlstate
        assert str(raised.value) == str(expected.value)
        assert await db.fetchone("SELECT %s::int", (2,)) == (2,)


async def _running(query: str) -> int:
    """How many server backends run `query` right now."""
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = %s",
            (query,),
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def test_a_caller_cancelled_mid_statement_cancels_it_on_the_server(
    db: PostgresDatabase,
) -> None:
    marker = "SELECT pg_sleep($1) AS cancel_me"
    task = asyncio.create_task(db.fetchone("SELECT pg_sleep(%s) AS cancel_me", (30,)))
    async with asyncio.timeout(10):
        while not await _running(marker):
            await asyncio.sleep(0.01)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 2.0
    # The server stopped the statement (it would otherwise sleep 30 s) ...
    async with asyncio.timeout(5):
        while await _running(marker):
            await asyncio.sleep(0.01)
    # ... and the one connection serves the next statement, in a clean state.
    # Outside any transaction: each statement is one of its own, with its own now().
    first = await db.fetchone("SELECT %s::int, now()", (5,))
    second = await db.fetchone("SELECT %s::int, now()", (6,))
    assert first is not None and second is not None
    assert (first[0], second[0]) == (5, 6) and first[1] < second[1]


async def test_prepared_statements_are_made_again_on_a_replacement_connection(
    db: PostgresDatabase,
) -> None:
    query = "SELECT pg_backend_pid() + %s, %s::text"
    for _ in range(8):  # prepared on the pooled connection midway
        row = await db.fetchone(query, (0, "before"))
    assert row is not None
    pid = row[0]
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        async with asyncio.timeout(10):
            while await (
                await admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
            ).fetchone():
                await asyncio.sleep(0.01)
    # The dead connection is found out before it carries a statement; its
    # replacement has none of its prepared statements, and makes them again.
    for _ in range(8):
        row = await db.fetchone(query, (0, "after"))
        assert row is not None and row[0] != pid and row[1] == "after"


async def test_statements_outlive_psycopgs_deallocate_all_after_a_rollback(
    db: PostgresDatabase,
) -> None:
    # psycopg prepares what its cursor runs often, and after rolling back a
    # transaction on such a connection sends DEALLOCATE ALL, which drops the
    # statements prepared here too.
    query = "SELECT %s::int * 2, %s::text"
    for _ in range(8):  # prepared on the pooled connection midway
        assert await db.fetchone(query, (1, "before")) == (2, "before")
    for rollback in range(3):
        async with db.connection() as conn:
            for _ in range(8):
                await (await conn.execute("SELECT %s::int + 0", (rollback,))).fetchone()
            with pytest.raises(ZeroDivisionError):
                async with conn.transaction():
                    await conn.execute("SELECT %s::int + 1", (rollback,))
                    raise ZeroDivisionError
            names = await (
                await conn.execute("SELECT count(*) FROM pg_prepared_statements")
            ).fetchone()
            assert names == (0,)  # what the rollback left: nothing prepared
        for n in range(8):  # sent again unprepared, then prepared again
            assert await db.fetchone(query, (n, "after")) == (2 * n, "after")
    # A name the server still holds is never made twice.
    async with db.connection() as conn:
        rows = await (await conn.execute("SELECT name FROM pg_prepared_statements")).fetchall()
    names = [row[0] for row in rows if row[0].startswith("_taskloom_")]
    assert names and len(names) == len(set(names))


async def _prepared(db: PostgresDatabase, marker: str) -> list[int]:
    """How often each statement prepared on `db`'s one connection whose text
    holds `marker` ran prepared (PostgreSQL's count of its plans)."""
    rows = await db.fetchall(
        "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
    )
    return [int(runs) for text, runs in rows if marker in text]


async def test_a_statement_is_prepared_at_its_second_use_on_a_connection(
    db: PostgresDatabase,
    pg_schema: str,  # noqa: F811
) -> None:
    table = f'"{pg_schema}".t'
    query = f"SELECT id, body FROM {table} WHERE id = %s AND body IS DISTINCT FROM %s"
    await db.fetchone(query, (1, "first"))
    assert await _prepared(db, "IS DISTINCT FROM") == []
    await db.fetchone(query, (1, "second"))
    # Prepared at its second use, which ran it prepared.
    assert await _prepared(db, "IS DISTINCT FROM") == [1]
    for n in range(3):
        await db.execute(f"INSERT INTO {table} (id, body) VALUES (%s, %s)", (n, f"b{n}"))
        assert await db.fetchone(query, (n, "other")) == (n, f"b{n}")
    assert await _prepared(db, "IS DISTINCT FROM") == [4]


async def test_past_fifty_prepared_statements_a_statement_waits_for_its_fifth_use(
    db: PostgresDatabase,
) -> None:
    # Nothing prepared is ever dropped: statements run twice early on must
    # not take every place from those a connection meets later.
    for k in range(50):
        for _ in range(2):
            assert await db.fetchone(f"SELECT %s::int + {k} AS early", (1,)) == (1 + k,)
    assert len(await _prepared(db, "AS early")) == 50
    late = "SELECT %s::int * 7 AS late"
    for _ in range(4):
        assert await db.fetchone(late, (3,)) == (21,)
    assert await _prepared(db, "AS late") == []
    assert await db.fetchone(late, (3,)) == (21,)
    assert await _prepared(db, "AS late") == [1]
