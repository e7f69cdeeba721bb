"""A run with a deadline returns by deadline + STORE_GRACE, whatever the store does.

The store stalls mid-run (PostgreSQL behind a frozen network; SQLite behind
another process's write lock). What must hold: `session.run` returns
DEADLINE no later than `STORE_GRACE` seconds past the deadline (plus a
scheduling margin), although cancelling a PostgreSQL statement, renewing
and releasing the lease would each wait on the silent store.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from proxy import FaultProxy

from pg import PG_DSN, pg_schema, requires_postgres  # noqa: F401 (pg_schema is a fixture)
from taskloom import Agent, RunOptions, RunStatus, Runtime, tool
from taskloom.backends import PostgresBackend
from taskloom.loop.ports import STORE_GRACE
from taskloom.models import ScriptedModel, reply

pytestmark = [pytest.mark.slow]

DEADLINE = 2.0
MARGIN = 0.5  # scheduling, the cost of returning


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    target = urlsplit(PG_DSN)
    async with FaultProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        yield proxy


async def _run_until_the_store_stalls(runtime: Runtime, stall: object) -> tuple[float, object]:
    @tool
    async def freeze_store() -> str:
        """Make the store stop answering."""
        stall()  # type: ignore[operator]
        return "frozen"

    model = ScriptedModel([reply(tool_calls=[("freeze_store", {})]), reply("done")])
    session = await runtime.create_session(Agent("a", model, tools=[freeze_store]))
    started = time.monotonic()
    async with asyncio.timeout(DEADLINE + 15):  # only so a regression cannot hang the suite
        result = await session.run("go", options=RunOptions(deadline=DEADLINE))
    return time.monotonic() - started, result.status


@pytest.mark.postgres
@requires_postgres
async def test_postgresql_stalled_mid_run(
    proxy: FaultProxy,
    pg_schema: str,  # noqa: F811
) -> None:
    runtime = Runtime(store=PostgresBackend(proxy.dsn(PG_DSN), schema=pg_schema).store)
    try:
        elapsed, status = await _run_until_the_store_stalls(runtime, proxy.stall)
        print(f"deadline {DEADLINE}s, store stalled: returned {status} after {elapsed:.2f}s")
        assert status == RunStatus.DEADLINE
        assert elapsed < DEADLINE + STORE_GRACE + MARGIN
    finally:
        proxy.resume()
        await runtime.close()


async def test_sqlite_locked_by_another_process_mid_run(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    runtime = Runtime(store=f"sqlite:///{path}")
    try:
        elapsed, status = await _run_until_the_store_stalls(
            runtime, lambda: other.execute("BEGIN IMMEDIATE")
        )
        print(f"deadline {DEADLINE}s, store locked: returned {status} after {elapsed:.2f}s")
        assert status == RunStatus.DEADLINE
        assert elapsed < DEADLINE + STORE_GRACE + MARGIN
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()
        await runtime.close()
