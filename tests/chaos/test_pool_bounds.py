"""A pool that cannot get a connection says why, and never opens more than its size.

A crowd of callers on a healthy server is told "all busy" and no connection
is added for them; a server gone after the pool opened is named as
unreachable (connecting directly, in a place the pool left free), not
reported as a busy pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from proxy import FaultProxy

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom.backends import PostgresBackend, SessionMeta
from taskloom.errors import StoreUnavailable

pytestmark = [requires_postgres, pytest.mark.slow]


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    async with FaultProxy() as proxy:
        yield proxy


async def test_a_server_gone_after_start_is_named_not_called_busy(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    store = PostgresBackend(
        proxy.dsn(PG_DSN), schema=pg_schema, max_size=2, connect_timeout=1, checkout_timeout=1
    ).store
    try:
        await store.create(SessionMeta("s", "a"))
        await proxy.close()  # stops listening and resets every connection
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            async with asyncio.timeout(30):  # only so a regression cannot hang the suite
                await store.get("s")
        elapsed = time.monotonic() - started
        print(f"gone server: {caught.value} after {elapsed:.2f}s")
        assert "cannot connect to PostgreSQL" in str(caught.value)
        assert "all busy" not in str(caught.value)
        assert f"127.0.0.1:{proxy.port}" in str(caught.value)
        assert elapsed < 5
    finally:
        await store.close()


async def test_a_crowd_on_a_healthy_server_is_told_all_busy(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    store = PostgresBackend(
        proxy.dsn(PG_DSN), schema=pg_schema, max_size=2, checkout_timeout=0.5
    ).store
    try:
        await store.create(SessionMeta("s", "a"))
        db = store.database
        async with db.connection() as held:  # the one ordinary caller's share
            await held.execute("SELECT 1")
            before = proxy.connections_accepted
            failures = await asyncio.gather(
                *(store.get("s") for _ in range(10)), return_exceptions=True
            )
            assert all(isinstance(f, StoreUnavailable) for f in failures), failures
            assert all("all busy" in str(f) for f in failures)
            # Nobody opened a connection to find out why.
            assert proxy.connections_accepted - before <= 1
            assert proxy.open_connections <= 2
    finally:
        await store.close()
