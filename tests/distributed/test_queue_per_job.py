"""What the queue spends on each job: its queueing, its fetch and its end
are one round trip each, and of its life only its end is announced on the queue's channel
(a waiter, `Session.wait`, looks only for ends, and every NOTIFY costs its
transaction's commit and wakes every listening backend)."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from procrastinate import jobs

from pg import PG_DSN, requires_postgres
from taskloom.distributed import WorkQueue

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres, requires_postgres]

MARK = "end of the test's jobs"


def _counter() -> ModuleType:
    """The benchmarks' statement counter (loaded once: it patches psycopg once)."""
    name = "taskloom_bench_statements"
    if name not in sys.modules:
        path = Path(__file__).parents[2] / "benchmarks" / "_statements.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


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


async def test_a_jobs_fetch_and_its_end_are_one_round_trip_each(pg_schema: str) -> None:
    queue = WorkQueue(PG_DSN, schema=pg_schema)
    try:
        app = await queue.app()
        manager = app.job_manager
        deferrer = app.configure_task("taskloom.tick", queue="runs", lock="L2")
        job_id = await deferrer.defer_async(schedule_id="x", due=1.5)
        worker = await manager.register_worker()
        with _counter().count_statements() as sent:
            assert await manager.fetch_job(["children"], worker) is None  # another queue's
            job = await manager.fetch_job(["runs"], worker)
            assert job is not None
            await manager.finish_job(job, jobs.Status.SUCCEEDED, False)
        assert sent.round_trips - sent.checks == 3, dict(sent.by_kind)
        assert (job.id, job.task_name, job.task_kwargs) == (
            job_id,
            "taskloom.tick",
            {"schedule_id": "x", "due": 1.5},
        )
        assert (job.lock, job.queue, job.status, job.attempts) == ("L2", "runs", "doing", 0)
        assert job.worker_id == worker
        assert (await manager.get_job_status_async(job_id)).value == "succeeded"
    finally:
        await queue.close()


async def test_queueing_a_job_is_one_round_trip_and_a_waiting_one_is_joined(
    pg_schema: str,
) -> None:
    queue = WorkQueue(PG_DSN, schema=pg_schema)
    try:
        app = await queue.app()
        args = {"schedule_id": "x", "due": 2.5}
        with _counter().count_statements() as sent:
            first = await queue.database.defer(
                "taskloom.tick", args, queue="runs", lock="L3", queueing_lock="Q3"
            )
        assert sent.round_trips - sent.checks == 1, dict(sent.by_kind)
        # The same queueing lock while the first waits: joined, not queued twice.
        again = await queue.database.defer(
            "taskloom.tick", args, queue="runs", lock="L3", queueing_lock="Q3"
        )
        assert again == first
        waiting = await app.job_manager.list_jobs_async(queueing_lock="Q3")
        assert [(str(j.id), j.status, j.task_kwargs, j.lock) for j in waiting] == [
            (first, "todo", args, "L3")
        ]
        at = datetime(2100, 1, 2, 3, 4, 5, tzinfo=UTC)
        later = await queue.database.defer(
            "taskloom.tick", args, queue="runs", lock="L4", queueing_lock="Q4", at=at
        )
        (job,) = await app.job_manager.list_jobs_async(queueing_lock="Q4")
        assert (str(job.id), job.scheduled_at, job.queue) == (later, at, "runs")
    finally:
        await queue.close()


async def test_jobs_queued_together_keep_their_fields_and_their_order(pg_schema: str) -> None:
    queue = WorkQueue(PG_DSN, schema=pg_schema)
    try:
        app = await queue.app()
        at = datetime(2100, 1, 2, 3, 4, 5, tzinfo=UTC)
        # Quotes, backslashes, escapes and text outside ASCII in the
        # arguments; one job with neither lock nor time, one with both.
        awkward = {"spec": json.dumps({"task": 'say "hi" \\ \n\t é ✓ \U0001f600'}), "n": [1, None]}
        wanted = [
            jobs.Job(
                queue="runs",
                task_name="taskloom.tick",
                priority=p,
                lock=lock,
                queueing_lock=f"QB{p}",
                task_kwargs={**awkward, "i": p},
                scheduled_at=when,
            )
            for p, lock, when in ((3, None, None), (-2, "LB", at), (0, None, at))
        ]
        queued = await app.job_manager.batch_defer_jobs_async(wanted)
        assert [j.queueing_lock for j in queued] == ["QB3", "QB-2", "QB0"]
        for job in queued:
            (read,) = await app.job_manager.list_jobs_async(id=job.id)
            assert (read.queueing_lock, read.status, read.priority, read.lock) == (
                job.queueing_lock,
                "todo",
                job.priority,
                job.lock,
            )
            assert read.task_kwargs == job.task_kwargs
            assert read.scheduled_at == job.scheduled_at
        # A queueing lock already waiting: procrastinate's own refusal.
        from procrastinate import exceptions

        with pytest.raises(exceptions.AlreadyEnqueued):
            await app.job_manager.batch_defer_jobs_async([wanted[0]])
    finally:
        await queue.close()
