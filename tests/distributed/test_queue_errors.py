"""Bad input and the queue's own failure modes: an unreachable URL, a schema not
migrated, malformed job payloads, a worker that lost its job, a retry that
collides with a queued sibling, and the CLI that shows and migrates it all."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from queue_support import SRC, Workers, host_runtime, worker_env

from pg import PG_DSN, requires_postgres
from taskloom import Agent, RunStatus, Runtime
from taskloom.distributed import QueueWorker, WorkQueue
from taskloom.entries import Steer
from taskloom.errors import SchemaNotMigrated, StoreUnavailable
from taskloom.models import ScriptedModel

pytestmark = requires_postgres


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.txt"


@pytest.fixture
def workers(pg_schema: str, effects: Path) -> Iterator[Workers]:
    started = Workers(worker_env(PG_DSN, pg_schema, effects))
    yield started
    started.close()


@pytest.fixture
async def host(
    pg_schema: str, effects: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    monkeypatch.setenv("TLQ_EFFECTS", str(effects))
    runtime = host_runtime(PG_DSN, pg_schema)
    yield runtime
    await runtime.close()


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
    )


def taskloom(*args: str) -> subprocess.CompletedProcess[str]:
    return python("-m", "taskloom", *args)


def test_without_the_extra_making_a_queue_says_how_to_install_it() -> None:
    made = python(
        "-c",
        "import sys; sys.modules['procrastinate'] = None\n"
        "from taskloom.distributed import WorkQueue\n"
        "from taskloom.errors import ConfigurationError\n"
        "try:\n"
        "    WorkQueue('postgresql://127.0.0.1/test')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n",
    )
    assert made.returncode == 0, made.stderr
    assert "WorkQueue needs the distributed extra" in made.stdout
    assert "pip install 'taskloom[distributed]'" in made.stdout


async def test_an_unreachable_queue_fails_the_submit_clearly_and_keeps_the_input() -> None:
    queue = WorkQueue("postgresql://postgres@127.0.0.1:1/test", connect_timeout=2)
    async with Runtime(queue=queue) as runtime:
        session = await runtime.create_session(Agent("bot", ScriptedModel([])))
        with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:1 cannot be reached"):
            await session.submit("do not lose me")
        pending = [e.payload for e in (await session.entries())]
        assert pending == [Steer("do not lose me")]  # the next run folds it in


async def test_a_schema_not_migrated_is_refused_until_db_migrate(pg_schema: str) -> None:
    queue = WorkQueue(PG_DSN, schema=pg_schema, migrate=False)
    async with Runtime(queue=queue) as runtime:
        session = await runtime.create_session(Agent("bot", ScriptedModel([])))
        with pytest.raises(SchemaNotMigrated, match="taskloom db migrate"):
            await session.submit()
    refused = taskloom("queue", "status", PG_DSN, "--schema", pg_schema)
    assert refused.returncode == 2
    assert f"hint: create the tables once: taskloom db migrate {PG_DSN} --schema {pg_schema}" in (
        refused.stderr
    )
    for _ in range(2):  # idempotent
        done = taskloom("db", "migrate", PG_DSN, "--schema", pg_schema)
        assert done.returncode == 0, done.stderr
        assert (
            "sessions, leases, background, snapshots, budgets, memory, queue up to date"
            in done.stdout
        )
    queue = WorkQueue(PG_DSN, schema=pg_schema, migrate=False)
    async with Runtime(queue=queue) as runtime:
        session = await runtime.create_session(Agent("bot", ScriptedModel([])))
        assert await session.submit()


@pytest.mark.slow
async def test_malformed_jobs_fail_clearly_and_lose_no_other_job(
    host: Runtime, workers: Workers, pg_schema: str
) -> None:
    queue = host.queue
    assert isinstance(queue, WorkQueue)
    app = await queue.app()
    bad = [
        await app.configure_task("taskloom.run", queue="runs").defer_async(bogus=1),
        await app.configure_task("taskloom.run", queue="runs").defer_async(
            session_id="no-such-session", reason="submit", explicit=True, options=None
        ),
        await app.configure_task("taskloom.run", queue="runs").defer_async(
            session_id="x", reason="submit", explicit=True, options={"max_rounds": "many"}
        ),
        await app.configure_task("taskloom.child", queue="children").defer_async(spec="nope"),
        await app.configure_task("taskloom.child", queue="children").defer_async(spec={"name": 3}),
    ]
    worker = workers.start()
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("still here?")
    result = await session.wait(timeout=30)
    assert result.status is RunStatus.COMPLETED  # the worker lived through them
    for job_id in bad:
        assert (await app.job_manager.get_job_status_async(job_id)).value == "failed"
    logged = worker.stderr()
    assert "malformed run job: 'session_id' must be a str" in logged
    assert "malformed child job" in logged
    assert "no session 'no-such-session'" in logged
    shown = taskloom("queue", "status", PG_DSN, "--schema", pg_schema)
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split()[1:] for line in shown.stdout.splitlines()[1:4]}
    assert rows["run"][2] == "3" and rows["child"][2] == "2"  # failed
    assert rows["run"][3] == "1"  # succeeded
    assert "workers alive: 1" in shown.stdout


async def _fetched(queue: WorkQueue, worker_id: int):  # type: ignore[no-untyped-def]
    app = await queue.app()
    return await app.job_manager.fetch_job(queues=None, worker_id=worker_id)


async def test_a_worker_that_lost_its_job_does_not_end_it(host: Runtime) -> None:
    """A paused worker's late finish must not end the job it was handed back to
    the queue (procrastinate's own finish_job ends a `todo` job: the retry is lost)."""
    queue = host.queue
    assert isinstance(queue, WorkQueue)
    app = await queue.app()
    session = await host.create_session(host.agent_named("bot"))
    job_id = int(await session.submit())
    paused = await app.job_manager.register_worker()
    job = await _fetched(queue, paused)
    assert job is not None and job.id == job_id
    reaper = type(app.job_manager)(app.connector)  # another worker's, on the same database
    for stalled in await reaper.get_stalled_jobs(seconds_since_heartbeat=-1):
        await reaper.retry_job(stalled)
        await reaper.retry_job(stalled)  # a second reaper: a no-op, not an error
    assert (await app.job_manager.get_job_status_async(job_id)).value == "todo"
    from procrastinate import jobs

    await app.job_manager.finish_job(job, jobs.Status.SUCCEEDED, False)  # the paused worker, late
    assert (await app.job_manager.get_job_status_async(job_id)).value == "todo"


async def test_a_retry_that_collides_with_a_queued_sibling_ends_the_job(host: Runtime) -> None:
    """procrastinate #1446: retrying a job whose queueing lock a queued sibling
    holds raised and left the row `doing` for ever, holding the session's lock."""
    queue = host.queue
    assert isinstance(queue, WorkQueue)
    app = await queue.app()
    session = await host.create_session(host.agent_named("bot"))
    first = int(await session.submit())
    worker = await app.job_manager.register_worker()
    job = await _fetched(queue, worker)
    assert job is not None and job.id == first
    sibling = int(await session.submit())  # the first is doing: a new job waits
    assert sibling != first
    await app.job_manager.retry_job(job)
    assert (await app.job_manager.get_job_status_async(first)).value == "aborted"
    assert (await app.job_manager.get_job_status_async(sibling)).value == "todo"


async def test_the_queue_tables_live_in_the_store_schema(host: Runtime, pg_schema: str) -> None:
    session = await host.create_session(host.agent_named("bot"))
    await session.submit()
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(
            "SELECT table_schema FROM information_schema.tables "
            "WHERE table_name IN ('procrastinate_jobs', 'taskloom_queue_runs')"
        ).fetchall()
    assert {r[0] for r in rows if r[0] == pg_schema} == {pg_schema}
    assert sum(1 for r in rows if r[0] == pg_schema) == 2


async def test_submits_coalesce_while_queued_and_an_explicit_run_is_never_absorbed(
    host: Runtime,
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    first, second = await session.submit("one"), await session.submit("two")
    assert first == second
    assert await host.queue.wake(session.id) == first  # type: ignore[union-attr]
    explicit, again = await session.submit(), await session.submit()
    assert explicit == again != first  # runs even without news: not folded into a wake-up


async def _serving(worker: QueueWorker) -> asyncio.Task[None]:
    """`worker` running in this process, once it takes jobs."""
    ready = asyncio.Event()
    running = asyncio.create_task(worker.run(lambda _: ready.set()))
    await asyncio.wait_for(ready.wait(), 30)
    return running


async def test_a_queue_serves_one_worker_at_a_time_and_the_next_once_it_stops(
    host: Runtime,
) -> None:
    queue = host.queue
    assert isinstance(queue, WorkQueue)
    first, second = queue.worker(host), queue.worker(host)
    running = await _serving(first)
    with pytest.raises(RuntimeError, match="one worker at a time"):
        await asyncio.wait_for(second.run(), 30)
    first.drain()
    await asyncio.wait_for(running, 30)
    running = await _serving(second)
    try:
        session = await host.create_session(host.agent_named("bot"))
        await session.submit("hello")
        result = await session.wait(timeout=30)
        assert result.status is RunStatus.COMPLETED  # its jobs reach the worker now serving
    finally:
        second.drain()
        await asyncio.wait_for(running, 30)
