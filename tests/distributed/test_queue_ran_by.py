"""A queued run says which worker ran it: in its log, and on the console's timeline."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from queue_app import build

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus
from taskloom.entries import RunStartedEntry

pytestmark = [requires_postgres, pytest.mark.slow]


async def test_a_queued_run_names_the_worker_that_ran_it(
    pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("starlette")
    import httpx2

    from taskloom.console import Console

    monkeypatch.setenv("TLQ_EFFECTS", str(tmp_path / "effects.txt"))
    host = build(PG_DSN, pg_schema)
    worker_runtime = build(PG_DSN, pg_schema)
    queue = worker_runtime.queue
    assert queue is not None
    worker = queue.worker(worker_runtime)  # type: ignore[attr-defined]
    running = asyncio.create_task(worker.run())
    try:
        session = await host.create_session(host.agent_named("bot"))
        job = await session.submit("hello")
        assert (await session.wait(timeout=60)).status is RunStatus.COMPLETED
        [started] = [
            e.payload for e in await session.entries() if isinstance(e.payload, RunStartedEntry)
        ]
        assert worker.worker_id is not None
        by = f"worker {worker.worker_id}, job {job} ({socket.gethostname()}, pid {os.getpid()})"
        assert started.by == by
        console = Console.acting(host, token="t")
        transport = httpx2.ASGITransport(app=console)
        async with httpx2.AsyncClient(transport=transport, base_url="http://c") as client:
            await client.get("/?token=t", follow_redirects=True)
            page = (await client.get(f"/sessions/{session.id}")).text
        await console.close()
        assert re.search(rf'<p class="ran-by">Run by {re.escape(by)}</p>', page)
        assert f"run started (bot) · run by {by}" in page
    finally:
        worker.drain()
        await asyncio.wait_for(running, 30)
        await worker_runtime.close()
        await host.close()
