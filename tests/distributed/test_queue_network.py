"""A worker whose connections the network drops keeps working.

The worker reaches PostgreSQL (its store and procrastinate's queue) through
a fault proxy that aborts every connection on command, while the worker
waits for jobs: its fetches and its LISTEN connection meet the resets. It
must not exit or fail a job for it: a fetch that meets a dropped connection
finds no job that time, and the next submitted run completes on it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from queue_support import Workers, host_runtime, log_problems, worker_env

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus, Runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))
from proxy import FaultProxy

pytestmark = [requires_postgres, pytest.mark.slow]


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    async with FaultProxy() as started:
        yield started


@pytest.fixture
async def host(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    monkeypatch.setenv("TLQ_EFFECTS", str(tmp_path / "effects.txt"))
    runtime = host_runtime(PG_DSN, pg_schema)
    yield runtime
    await runtime.close()


async def _reconnected(proxy: FaultProxy, accepted: int, timeout: float = 20) -> None:
    """Until the worker has opened a connection since `accepted` were counted."""
    deadline = time.monotonic() + timeout
    while proxy.connections_accepted <= accepted or proxy.open_connections == 0:
        assert time.monotonic() < deadline, "the worker never connected again"
        await asyncio.sleep(0.05)


async def test_an_idle_worker_whose_connections_are_reset_keeps_running_jobs(
    proxy: FaultProxy, host: Runtime, pg_schema: str, tmp_path: Path
) -> None:
    workers = Workers(worker_env(proxy.dsn(PG_DSN), pg_schema, tmp_path / "effects.txt"))
    try:
        # The proxy serves on this loop: wait for the worker off it.
        worker = await asyncio.to_thread(workers.start)
        session = await host.create_session(host.agent_named("bot"))
        await session.submit("before")
        before = await session.wait(timeout=30)
        assert before.status is RunStatus.COMPLETED
        for _ in range(3):
            accepted = proxy.connections_accepted
            proxy.reset()
            await _reconnected(proxy, accepted)
        await session.submit("after the resets")
        after = await session.wait(timeout=30)
        assert worker.proc.poll() is None, worker.stderr()[-3000:]
        assert after.status is RunStatus.COMPLETED
        assert after.text == f"done by {worker.pid}: after the resets"
        assert log_problems(await session.entries()) == []
        assert "Traceback" not in worker.stderr(), worker.stderr()[-3000:]
    finally:
        await asyncio.to_thread(workers.close)
