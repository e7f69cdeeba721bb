"""The queue announces a job's end on its channel, once, and nothing else of
its life: a waiter (`Session.wait`) looks only for ends, and every NOTIFY
costs its transaction's commit and wakes every listening backend."""

from __future__ import annotations

import json

import psycopg
import pytest
from procrastinate import jobs

from pg import PG_DSN, requires_postgres
from taskloom.distributed import WorkQueue

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres, requires_postgres]

MARK = "end of the test's jobs"


async def _announced(listener: psycopg.AsyncConnection[object]) -> list[dict[str, object]]:
    """What the channel carried up to the test's own closing mark (sent last,
    so delivered last: notifications arrive in commit order)."""
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as other:
        await other.execute("SELECT pg_notify('taskloom_jobs', %s)", (MARK,))
    seen: list[dict[str, object]] = []
    async for note in listener.notifies(timeout=30):
        if note.payload == MARK:
            return seen
        seen.append(json.loads(note.payload))
    raise AssertionError(f"the mark never arrived; seen {seen}")


async def test_a_jobs_fetch_is_not_announced_and_its_end_is_once(pg_schema: str) -> None:
    queue = WorkQueue(PG_DSN, schema=pg_schema)
    try:
        app = await queue.app()
        manager = app.job_manager
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as listener:
            await listener.execute("LISTEN taskloom_jobs")
            deferrer = app.configure_task("taskloom.tick", queue="runs", lock="L1")
            await deferrer.defer_async(schedule_id="x", due=0)
            worker = await manager.register_worker()
            job = await manager.fetch_job(["runs"], worker)
            assert job is not None
            assert await _announced(listener) == []  # queued, then taken: no end yet
            await manager.finish_job(job, jobs.Status.SUCCEEDED, False)
            assert await _announced(listener) == [
                {"schema": pg_schema, "lock": "L1", "status": "succeeded"}
            ]
    finally:
        await queue.close()
