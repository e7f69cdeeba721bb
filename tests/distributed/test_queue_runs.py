"""Queued runs on `taskloom worker` processes: submit, wait, coalescing, one writer,
a worker without the agent, SIGTERM drains, wake-ups across processes, schedules."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from queue_app import result_line
from queue_support import (
    Workers,
    host_runtime,
    log_problems,
    marks,
    tool_results,
    until,
    worker_env,
)

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus, Runtime, Usage
from taskloom.backends import BackgroundNotice
from taskloom.background import BackgroundService
from taskloom.distributed import WorkQueue
from taskloom.entries import (
    DeferredEntry,
    DeferredItem,
    Entry,
    RunFinishedEntry,
    RunStartedEntry,
    Steer,
)
from taskloom.errors import UsageError

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
    runtime = host_runtime(PG_DSN, pg_schema, wake=True)
    yield runtime
    await runtime.close()


def finished(entries: list[Entry]) -> list[RunFinishedEntry]:
    return [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]


def started(entries: list[Entry]) -> int:
    return sum(isinstance(e.payload, RunStartedEntry) for e in entries)


async def test_submit_twice_while_queued_is_one_run_on_a_worker(
    host: Runtime, workers: Workers
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    first = await session.submit("hello")
    second = await session.submit("and more")
    assert first == second  # coalesced into the waiting job
    worker = workers.start()
    result = await session.wait(timeout=30)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {worker.pid}: hello\n\nand more"
    entries = await session.entries()
    assert started(entries) == 1
    assert log_problems(entries) == []
    assert result.run_id and all(e.run_id in (None, result.run_id) for e in entries)


async def test_wait_returns_the_result_the_worker_s_run_returned(
    host: Runtime, workers: Workers, pg_schema: str
) -> None:
    worker = workers.start(TLQ_RESULTS="1")
    session = await host.create_session(host.agent_named("tally"))
    await session.submit("count")
    result = await session.wait(timeout=30)
    # What the run itself returned in the worker, printed as it ended.
    ran = worker.expect(f"RESULT {session.id} ").split(" ", 2)[2]
    assert result_line(result) == ran
    assert result.status is RunStatus.COMPLETED and result.text == "tallied"
    assert (result.tool_calls, result.transport_retries, result.model_requests) == (2, 1, 3)
    assert result.usage == result.own_usage == Usage(150, 15, requests=2)
    assert session.journal.log.finished_result(session.id, session.agent) == result
    # Another process reading the log alone sees the same result.
    other = host_runtime(PG_DSN, pg_schema)
    try:
        reader = await other.open_session(session.id, other.agent_named("tally"))
        assert reader.journal.log.finished_result(reader.id, reader.agent) == result
    finally:
        await other.close()


async def test_two_workers_never_run_one_session_at_once(host: Runtime, workers: Workers) -> None:
    workers.start()
    workers.start()
    sessions = [await host.create_session(host.agent_named("bot")) for _ in range(8)]
    # Turns submitted while the session's previous run is running: each
    # becomes a new job of the session, which procrastinate's lock and the
    # session lease keep from overlapping the running one.
    for turn in range(3):
        for s in sessions:
            await s.submit(f"turn {turn}")
        await asyncio.sleep(0.05)
    results = await asyncio.gather(*(s.wait(timeout=60) for s in sessions))
    problems, runs = [], 0
    for s, result in zip(sessions, results, strict=True):
        assert result.status is RunStatus.COMPLETED
        entries = await s.entries()
        problems += log_problems(entries)
        runs += started(entries)
        assert "turn 2" in result.text
    print(f"one writer: 8 sessions x 3 turns, runs {runs}, problems {len(problems)}")
    assert problems == []


async def test_a_worker_without_the_agent_fails_the_job_in_the_log_and_the_session_goes_on(
    host: Runtime, workers: Workers
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    wrong = workers.start(TLQ_AGENTS="lead")
    await session.submit("are you there?")
    failed = await session.wait(timeout=30)
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and "ConfigurationError" in failed.error
    assert "no agent named 'bot'" in failed.error
    status = await host.queue.status()  # type: ignore[union-attr]
    assert status.jobs.get(("run", "failed")) == 1
    wrong.close()
    right = workers.start()
    await session.submit()
    result = await session.wait(timeout=30)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {right.pid}: are you there?"  # the input was kept


async def test_sigterm_drains_the_run_in_flight_which_completes_on_another_worker(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    first = workers.start(TLQ_TOOL_SLEEP="1.5")
    await session.submit("long job")
    first.expect(f"TOOL {session.id}")
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    entries = await session.entries()
    assert [f.status for f in finished(entries)] == [RunStatus.STOPPED]
    status = await host.queue.status()  # type: ignore[union-attr]
    assert status.jobs.get(("run", "todo")) == 1  # back in the queue
    second = workers.start()
    result = await session.wait(timeout=30)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {second.pid}: long job"
    entries = await session.entries()
    assert log_problems(entries) == []
    results = tool_results(entries)
    assert list(results.values()) == [["touched"]]  # the tool ran once, to its end
    assert len(marks(effects)) == 1


async def test_a_second_signal_ends_a_draining_worker_at_once_like_a_crash(
    host: Runtime, workers: Workers, tmp_path: Path
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    # The tool waits for a file that never comes: the drain cannot finish.
    first = workers.start(TLQ_TOOL_GATE=str(tmp_path / "never"))
    await session.submit("stuck job")
    first.expect(f"TOOL {session.id}")
    first.signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while "draining" not in first.stderr():
        assert first.proc.poll() is None, first.stderr()[-2000:]
        assert time.monotonic() < deadline, "the worker never said it drains"
        await asyncio.sleep(0.05)
    assert first.proc.poll() is None  # still draining: the tool is in flight
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=10) == 1
    assert "second signal, exiting now" in first.stderr()
    assert "taskloom worker: stopped" not in first.stderr()


async def test_a_notice_written_by_this_process_wakes_the_session_on_a_worker(
    host: Runtime, workers: Workers
) -> None:
    worker = workers.start(TLQ_WAKE="1")
    session = await host.create_session(host.agent_named("bot"))
    notice = BackgroundNotice("n1", "job-7", "command", "the nightly build passed")
    await BackgroundService.of(host).lifecycle.finish(session.id, notice)
    await until(lambda: _has_runs(host, session.id), timeout=20)
    result = await session.wait(timeout=30)
    assert result.status is RunStatus.COMPLETED
    assert result.text.startswith(f"done by {worker.pid}:")
    assert "the nightly build passed" in result.text
    # A deferred item written here wakes it again.
    item = DeferredEntry("d1", DeferredItem.context("the deploy is done"))
    await host.push_deferred(session.id, Entry.of(item))
    await until(lambda: _has_runs(host, session.id, 2), timeout=20)
    result = await session.wait(timeout=30)
    assert "the deploy is done" in result.text
    assert log_problems(await session.entries()) == []


async def test_wake_ups_in_a_row_stop_at_the_limit_on_the_worker_that_holds_the_session_and_on_a_fresh_one(
    host: Runtime, workers: Workers
) -> None:
    first = workers.start(TLQ_WAKE="1", TLQ_MAX_WAKEUPS="2")
    session = await host.create_session(host.agent_named("answerer"))
    await session.submit("hello")
    await session.wait(timeout=30)

    async def notice(n: int) -> int:
        item = DeferredEntry(f"d{n}", DeferredItem.context(f"news {n}"))
        await host.push_deferred(session.id, Entry.of(item))
        await session.wait(timeout=30)  # the wake-up job has run (or done nothing)
        return started(await session.entries())

    # The first worker keeps the session folded and counts from what it holds.
    assert [await notice(n) for n in (1, 2, 3)] == [2, 3, 3]
    first.close()
    # A fresh worker opens the session from the log and counts the same.
    workers.start(TLQ_WAKE="1", TLQ_MAX_WAKEUPS="2")
    assert await notice(4) == 3
    # A user turn starts a new row: the waiting news runs with it, and wakes count again.
    await session.submit("again")
    await session.wait(timeout=30)
    assert started(await session.entries()) == 4
    assert await notice(5) == 5
    assert log_problems(await session.entries()) == []


async def _has_runs(runtime: Runtime, session_id: str, count: int = 1) -> bool:
    return len(finished(await runtime.store.load(session_id))) >= count


async def test_a_background_child_runs_on_a_worker_and_its_report_wakes_the_parent(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    workers.start(TLQ_WAKE="1")
    workers.start(TLQ_WAKE="1")
    parent = await host.create_session(host.agent_named("lead"))
    await parent.submit("get help")
    await until(lambda: _reported(host, parent.id), timeout=20)
    result = await parent.wait(timeout=30)
    assert result.status is RunStatus.COMPLETED
    assert result.text.startswith("report received by")
    children = await host.store.list(parent_id=parent.id)
    assert len(children) == 1
    child_entries = await host.store.load(children[0].id)
    assert [e.kind for e in child_entries].count("subagent_result") == 1
    assert marks(effects)[0].split()[0] == children[0].id


async def _reported(runtime: Runtime, parent_id: str) -> bool:
    entries = await runtime.store.load(parent_id)
    return any(f.status is RunStatus.COMPLETED for f in finished(entries)) and any(
        "report received" in (m.get("text") or "")
        for e in entries
        if e.kind == "message"
        for m in e.data["message"].get("blocks", [])
    )


async def test_scheduled_wake_ups_fire_list_and_cancel(host: Runtime, workers: Workers) -> None:
    queue = host.queue
    assert queue is not None
    session = await host.create_session(host.agent_named("bot"))
    with pytest.raises(UsageError):
        await queue.schedule(session.id)  # type: ignore[attr-defined]
    with pytest.raises(UsageError):
        await queue.schedule(session.id, cron="not a cron")  # type: ignore[attr-defined]
    with pytest.raises(UsageError):
        await queue.schedule(session.id, every=timedelta(0))  # type: ignore[attr-defined]
    workers.start()
    every = await queue.schedule(session.id, every=timedelta(seconds=1), input="heartbeat")  # type: ignore[attr-defined]
    cron = await queue.schedule(session.id, cron="* * * * * */2", input="cron beat")  # type: ignore[attr-defined]
    listed = await queue.schedules(session.id)  # type: ignore[attr-defined]
    assert {s.id for s in listed} == {every.id, cron.id}
    assert every.every == timedelta(seconds=1) and cron.cron == "* * * * * */2"
    await until(lambda: _has_runs(host, session.id, 3), timeout=30)
    texts = [m.text for m in await session.transcript() if m.role == "user"]
    assert any("heartbeat" in t for t in texts) and any("cron beat" in t for t in texts)
    assert await queue.cancel_schedule(every.id)  # type: ignore[attr-defined]
    assert await queue.cancel_schedule(cron.id)  # type: ignore[attr-defined]
    assert not await queue.cancel_schedule(cron.id)  # type: ignore[attr-defined]
    assert await queue.schedules() == []  # type: ignore[attr-defined]
    await session.wait(timeout=30)
    runs = len(finished(await session.entries()))
    await asyncio.sleep(2.5)  # two periods of the faster schedule: nothing more fires
    await session.wait(timeout=30)
    assert len(finished(await session.entries())) == runs
    assert log_problems(await session.entries()) == []


async def test_a_schedule_without_input_runs_the_session_on_what_it_has(
    host: Runtime, workers: Workers
) -> None:
    """Its firing writes nothing, so its run must not be one that runs only on news."""
    queue = host.queue
    assert isinstance(queue, WorkQueue)
    session = await host.create_session(host.agent_named("bot"))
    workers.start()
    beat = await queue.schedule(session.id, every=timedelta(seconds=1))
    await until(lambda: _has_runs(host, session.id), timeout=30)
    assert await queue.cancel_schedule(beat.id)
    await session.wait(timeout=30)
    entries = await session.entries()
    assert finished(entries)[0].status is RunStatus.COMPLETED
    assert not any(isinstance(e.payload, Steer) for e in entries)
