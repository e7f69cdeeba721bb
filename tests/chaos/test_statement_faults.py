"""A single statement through `PostgresDatabase` when the network fails under it.

The statement is in flight on the server when its connection is reset, or
the network goes silent: the caller gets the store's error promptly, and the
next statement works on a fresh connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import psycopg
import pytest
from proxy import FaultProxy

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends.postgres import PostgresDatabase
from taskloom.errors import StoreUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.postgres, requires_postgres]


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    target = urlsplit(PG_DSN)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        yield proxy


async def _running(query: str) -> bool:
    """Whether a server backend runs `query` right now."""
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = %s",
            (query,),
        )
        row = await cursor.fetchone()
        return row is not None and row[0] > 0


async def test_a_connection_reset_mid_statement_raises_store_unavailable(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    db = PostgresDatabase(proxy.dsn(PG_DSN), schema=pg_schema, max_size=2)
    try:
        assert await db.fetchone("SELECT %s::int", (1,)) == (1,)
        task = asyncio.create_task(db.fetchone("SELECT pg_sleep(%s) AS reset_me", (5,)))
        async with asyncio.timeout(10):
            while not await _running("SELECT pg_sleep($1) AS reset_me"):
                await asyncio.sleep(0.01)
        started = time.monotonic()
        proxy.reset()
        with pytest.raises(StoreUnavailable, match="lost the connection") as raised:
            await task
        assert time.monotonic() - started < 1.0
        assert isinstance(raised.value.__cause__, psycopg.OperationalError)
        # The dead connection was not handed out again.
        for i in range(3):
            assert await db.fetchone("SELECT %s::int", (i,)) == (i,)
    finally:
        await db.close()


async def test_a_statement_the_network_leaves_unanswered_is_given_up_on(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    # statement_timeout 1 s: the client gives up 2 s later (the server never saw it).
    db = PostgresDatabase(proxy.dsn(PG_DSN), schema=pg_schema, max_size=2, statement_timeout=1)
    try:
        assert await db.fetchone("SELECT %s::int", (1,)) == (1,)
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await db.fetchone("SELECT %s::int", (2,))
        elapsed = time.monotonic() - started
        assert 2.5 < elapsed < 6.0, elapsed
        proxy.resume()
        assert await db.fetchone("SELECT %s::int", (3,)) == (3,)
    finally:
        await db.close()
