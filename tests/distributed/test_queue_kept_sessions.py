"""A worker keeps the sessions it ran folded between their jobs: its next job of
one reads what any other process wrote since, and its run goes on from there."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import queue_app
from queue_support import Workers, host_runtime, log_problems, marks, worker_env

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus, Runtime
from taskloom.entries import MessageEntry

pytestmark = [requires_postgres, pytest.mark.slow]


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


async def test_a_worker_s_next_job_of_a_session_goes_on_from_what_others_wrote(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    worker = workers.start(concurrency=1)
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("one")
    first = await session.wait(timeout=30)
    assert first.text == f"done by {worker.pid}: one"
    # A turn run here, by this process, while the worker keeps the session.
    here = await session.run("two")
    assert here.status is RunStatus.COMPLETED
    assert here.text == f"done by {queue_app.PID}: two"
    await session.submit("three")
    third = await session.wait(timeout=30)
    assert third.text == f"done by {worker.pid}: three"
    entries = await session.entries()
    assert log_problems(entries) == []
    users = [
        e.payload.message.text
        for e in entries
        if isinstance(e.payload, MessageEntry) and e.payload.message.role == "user"
    ]
    assert users == ["one", "two", "three"]
    # One touch per user turn: none of the worker's rounds ran on a stale log.
    assert len(marks(effects)) == 3
