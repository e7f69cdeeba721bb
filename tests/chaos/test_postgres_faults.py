"""The PostgreSQL store behind a bad network: stalls, resets, deadlines.

Every test talks to the real server through `FaultProxy`, which can freeze
the traffic (`stall`) or reset every connection (`reset`). What must hold:
a caller's timeout is honoured while the server is silent, the connection
it interrupted never goes back into the pool, and after a reset the pool
hands out fresh connections rather than dead ones.
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
from taskloom import Agent, RunOptions, RunStatus, Runtime, tool
from taskloom.backends import Fence, PostgresBackend, SessionMeta
from taskloom.backends.postgres import PostgresDatabase
from taskloom.entries import Entry
from taskloom.errors import StoreError, StoreUnavailable
from taskloom.models import ScriptedModel, reply

pytestmark = [pytest.mark.slow, pytest.mark.postgres, requires_postgres]


def entry(text: str) -> Entry:
    return Entry("note", {"text": text})


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    target = urlsplit(PG_DSN)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        yield proxy


async def wait_for_connections(proxy: FaultProxy, count: int) -> None:
    """Until `count` connections are open through the proxy (the pool fills in the background)."""
    async with asyncio.timeout(10):
        while proxy.open_connections < count:
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("fenced", [False, True], ids=["append", "fenced-append"])
async def test_a_timeout_around_a_call_returns_promptly_while_the_server_stalls(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
    fenced: bool,
) -> None:
    store = PostgresBackend(proxy.dsn(PG_DSN), schema=pg_schema, max_size=2).store
    try:
        await store.create(SessionMeta("s", "a"))
        fence: Fence | None = None
        if fenced:  # the append then runs in a transaction that locks the lease row
            lease = await store.leases.acquire("s", "me", ttl=60)
            assert lease is not None
            fence = Fence(lease.key, lease.generation)
        await store.append("s", entry("before"), fence=fence)
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await store.append("s", entry("stalled"), fence=fence)
        elapsed = time.monotonic() - started
        print(f"append under asyncio.timeout(2) gave up after {elapsed:.2f}s")
        assert elapsed < 3.5
        # The interrupted connection must not come back: once traffic flows,
        # every call works, and each on a connection in a clean state.
        proxy.resume()
        for i in range(3):
            await store.append("s", entry(f"after {i}"), fence=fence)
        texts = [e.data["text"] for e in await store.load("s")]
        # The stalled append may have reached the server once the proxy let
        # its bytes through: a timed-out write is "maybe", never half-written.
        assert texts in (
            ["before", "after 0", "after 1", "after 2"],
            ["before", "stalled", "after 0", "after 1", "after 2"],
        )
    finally:
        proxy.resume()
        await store.close()


async def test_a_stalled_server_fails_a_statement_with_no_timeout_of_its_own(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    # A silent network defeats the server-side statement_timeout (the server
    # never sees the statement); the client-side bound still ends the call.
    db = PostgresDatabase(proxy.dsn(PG_DSN), schema=pg_schema, statement_timeout=1.0)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            async with asyncio.timeout(30):  # only so a regression cannot hang the suite
                async with db.connection() as conn:
                    await conn.execute("SELECT 1")
                    proxy.stall()
                    started = time.monotonic()
                    await conn.execute("SELECT 2")
        elapsed = time.monotonic() - started
        print(f"stalled statement failed after {elapsed:.2f}s: {caught.value}")
        assert elapsed < 5
        assert f"127.0.0.1:{proxy.port}" in str(caught.value)
        assert "did not answer" in str(caught.value)
    finally:
        proxy.resume()
        await db.close()


async def test_a_stalled_server_fails_a_checkout_with_no_timeout_of_its_own(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    # The pool checks the connection it hands out; a check the server never
    # answers is bounded by checkout_timeout, then a direct connection
    # attempt (bounded by connect_timeout) finds out what is wrong.
    store = PostgresBackend(
        proxy.dsn(PG_DSN), schema=pg_schema, connect_timeout=1, checkout_timeout=2
    ).store
    try:
        await store.create(SessionMeta("s", "a"))
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            async with asyncio.timeout(30):  # only so a regression cannot hang the suite
                await store.get("s")
        elapsed = time.monotonic() - started
        print(f"stalled get failed after {elapsed:.2f}s: {caught.value}")
        assert elapsed < 8
        assert f"127.0.0.1:{proxy.port}" in str(caught.value)
        assert "no answer within 1 s" in str(caught.value)
        # Once the network is back, so is the store.
        proxy.resume()
        assert (await store.get("s")).id == "s"
    finally:
        proxy.resume()
        await store.close()


async def test_a_client_gone_silent_mid_transaction_does_not_keep_its_locks(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    # A writer that stalls inside a transaction (e.g. a fenced append holding
    # its lease row) must not block every other writer until TCP gives up:
    # the server ends the silent session after statement_timeout.
    db = PostgresDatabase(proxy.dsn(PG_DSN), schema=pg_schema, statement_timeout=1.0)
    table = f'"{pg_schema}".locked'
    other = await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True)
    try:
        await other.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v int)")
        await other.execute(f"INSERT INTO {table} VALUES (1, 0)")
        waited = float("inf")
        with pytest.raises(StoreUnavailable):
            async with db.connection() as conn, conn.transaction():
                await conn.execute(f"SELECT v FROM {table} WHERE id = 1 FOR UPDATE")
                proxy.stall()
                started = time.monotonic()
                async with asyncio.timeout(20):  # only so a regression cannot hang the suite
                    await other.execute(f"UPDATE {table} SET v = 1 WHERE id = 1")
                waited = time.monotonic() - started
                print(f"the other writer got the row after {waited:.2f}s")
                await conn.execute("SELECT 1")  # the stalled client finds out, bounded
        assert waited < 5
    finally:
        proxy.resume()
        await other.close()
        await db.close()


async def test_b_after_a_reset_the_pool_hands_out_fresh_connections(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    store = PostgresBackend(proxy.dsn(PG_DSN), schema=pg_schema, min_size=3, max_size=3).store
    try:
        await store.create(SessionMeta("s", "a"))
        await wait_for_connections(proxy, 3)
        proxy.reset()  # every pooled connection is now dead
        proxy.resume()
        results: list[int | str] = []
        for i in range(3):
            try:
                results.append(await store.append("s", entry(f"after reset {i}")))
            except Exception as exc:
                results.append(f"{type(exc).__name__}: {exc}")
        print(f"appends after a reset: {results}")
        assert results == [1, 2, 3]
    finally:
        await store.close()


async def test_c_a_run_with_a_deadline_ends_in_bounded_time_while_the_store_stalls(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    @tool
    async def freeze_network() -> str:
        """Make the database stop answering."""
        proxy.stall()
        return "frozen"

    model = ScriptedModel([reply(tool_calls=[("freeze_network", {})]), reply("done")])
    agent = Agent(name="a", model=model, tools=[freeze_network])
    runtime = Runtime(store=PostgresBackend(proxy.dsn(PG_DSN), schema=pg_schema).store)
    outcome: object
    try:
        session = await runtime.create_session(agent)
        started = time.monotonic()
        try:
            # Only so a failure costs seconds, not minutes; the bound is below.
            async with asyncio.timeout(12):
                outcome = (await session.run("go", options=RunOptions(deadline=3))).status
        except (StoreError, TimeoutError) as exc:
            outcome = exc
        elapsed = time.monotonic() - started
        print(f"run with deadline=3 ended after {elapsed:.2f}s: {outcome!r}")
        assert elapsed < 10
        assert outcome == RunStatus.DEADLINE or isinstance(outcome, StoreError)
    finally:
        proxy.resume()
        await runtime.close()
