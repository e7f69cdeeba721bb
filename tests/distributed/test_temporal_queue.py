"""Queued runs and background children on Temporal: a real dev server, real
`taskloom worker --temporal` processes, on SQLite and PostgreSQL stores.

Submit and wait across two workers; submits coalesce into one workflow per
session; a failure for good is not retried and the session goes on; a drain
(SIGTERM) hands the run to another worker; a background child runs on a
worker and reports to its parent once; a worker SIGKILLed in a tool call,
of a run or of a child: the work goes on on another worker from the log,
the tool run at most once (answered "interrupted"), the child reported once;
a killed job's retry does not run again a run it started; the Temporal
server restarted mid-run loses nothing; a parked run's workflow stays open
waiting (also across a continue-as-new) until an approval decided in another
process resumes the run on a worker, and a cancel ends it without a run; a
background child a worker's run spawns is a child workflow of its parent's
workflow, one a host's own run spawns a workflow of its own; steering and a
stop request reach a run on a worker; a cancel stops the run in flight
(also one that had not begun) and keeps what was submitted behind it; an
outage is retried; a malformed signal is dropped. The slow test
repeats the SIGKILL trials ten times each and prints the counts.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from queue_support import (
    HERE,
    SRC,
    Workers,
    interrupted,
    log_problems,
    marks,
    messages_of,
    tool_results,
    until,
)
from temporal_app import LOOPS, build

from pg import pg_schema  # noqa: F401 (fixture)
from taskloom import RunStatus, Runtime
from taskloom.distributed import TemporalQueue
from taskloom.entries import Entry, RunFinishedEntry, RunStartedEntry
from temporal_server import (  # noqa: F401 (fixtures)
    TemporalServer,
    bare_temporal_server,
    own_temporal_server,
    temporal_server,
)

pytestmark = [pytest.mark.temporal]


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.txt"


@pytest.fixture
def task_queue() -> str:
    """A task queue of this test's own: tests on one server never take each other's work."""
    return f"tq-{uuid.uuid4().hex[:8]}"


def env_for(
    store_url: tuple[str, str], server: TemporalServer, task_queue: str, effects: Path
) -> dict[str, str]:
    """The environment of the workers (and the host) of one test."""
    import os

    path = [str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "PYTHONUNBUFFERED": "1",
        "TLT_STORE": store_url[0],
        "TLT_SCHEMA": store_url[1],
        "TLT_ADDRESS": server.address,
        "TLT_NAMESPACE": server.namespace,
        "TLT_TASK_QUEUE": task_queue,
        "TLQ_EFFECTS": str(effects),
    }


@pytest.fixture
def env(
    store_url: tuple[str, str],
    temporal_server: TemporalServer,  # noqa: F811
    task_queue: str,
    effects: Path,
) -> dict[str, str]:
    return env_for(store_url, temporal_server, task_queue, effects)


def workers_of(env: dict[str, str]) -> Workers:
    """Workers that run `taskloom worker --temporal` with `env`'s server and task queue."""
    args = (
        "--temporal",
        env["TLT_ADDRESS"],
        "--namespace",
        env["TLT_NAMESPACE"],
        "--task-queue",
        env["TLT_TASK_QUEUE"],
        "--app",
        "temporal_app:make_runtime",
    )
    return Workers(env, args)


@pytest.fixture
def workers(env: dict[str, str]) -> Iterator[Workers]:
    started = workers_of(env)
    yield started
    started.close()


def host_of(env: dict[str, str], **options: Any) -> Runtime:
    """The test process's own runtime on the workers' store and Temporal task
    queue (`options`: `temporal_app.build`'s, over these defaults)."""
    return build(
        env["TLT_STORE"],
        env["TLT_SCHEMA"],
        address=env["TLT_ADDRESS"],
        namespace=env["TLT_NAMESPACE"],
        task_queue=env["TLT_TASK_QUEUE"],
        **{"wake": True, "search_attributes": env.get("TLT_SEARCH") == "1", **options},
    )


@pytest.fixture
async def host(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Runtime]:
    monkeypatch.setenv("TLQ_EFFECTS", env["TLQ_EFFECTS"])
    runtime = host_of(env)
    yield runtime
    await runtime.close()


def started(entries: list[Entry]) -> int:
    return sum(isinstance(e.payload, RunStartedEntry) for e in entries)


def finished(entries: list[Entry]) -> list[RunFinishedEntry]:
    return [e.payload for e in entries if isinstance(e.payload, RunFinishedEntry)]


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
    second = workers.start()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {second.pid}: long job"
    entries = await session.entries()
    assert log_problems(entries) == []
    assert list(tool_results(entries).values()) == [["touched"]]  # ran once, to its end
    assert len(marks(effects)) == 1


async def test_submits_before_any_worker_coalesce_into_one_run(
    host: Runtime, workers: Workers
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    first = await session.submit("hello")
    second = await session.submit("and more")
    assert first == second == f"taskloom-session-{session.id}"  # one workflow per session
    worker = workers.start()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {worker.pid}: hello\n\nand more"
    entries = await session.entries()
    assert started(entries) == 1
    assert log_problems(entries) == []


async def test_a_wait_with_no_worker_to_run_the_job_times_out_and_a_cancel_gets_through(
    host: Runtime, workers: Workers
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("hello")
    # No worker: the workflow's `settled` update is never answered, and each
    # of its long polls ends in the SDK's "timed out or cancelled" error,
    # which must not hide the caller's own timeout or cancel.
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await session.wait(timeout=1)
    assert time.monotonic() - began < 15
    waiting = asyncio.ensure_future(session.wait(timeout=None))
    await asyncio.sleep(1)  # into the update's long poll
    waiting.cancel()
    began = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert time.monotonic() - began < 15
    worker = workers.start()  # the job was kept: it runs once a worker comes
    result = await session.wait(timeout=60)
    assert result.text == f"done by {worker.pid}: hello"


async def test_submitted_runs_complete_across_two_workers(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    pids = {workers.start().pid, workers.start().pid}
    sessions = [await host.create_session(host.agent_named("bot")) for _ in range(6)]
    begun = time.monotonic()
    for s in sessions:
        await s.submit("hi")
    results = await asyncio.gather(*(s.wait(timeout=60) for s in sessions))
    took = time.monotonic() - begun
    ran_by = set()
    for s, result in zip(sessions, results, strict=True):
        assert result.status is RunStatus.COMPLETED
        pid = int(result.text.split()[2].rstrip(":"))
        assert pid in pids
        ran_by.add(pid)
        entries = await s.entries()
        assert log_problems(entries) == [] and started(entries) == 1
    assert len(marks(effects)) == len(sessions)  # one touch per run
    # A second turn of a session whose workflow ended starts a new one.
    again = await sessions[0].submit("once more")
    assert (await sessions[0].wait(timeout=60)).text.endswith("once more")
    assert again == f"taskloom-session-{sessions[0].id}"
    one_by_one = []
    for s in sessions[1:]:
        begun = time.monotonic()
        await s.submit("and again")
        await s.wait(timeout=60)
        one_by_one.append(time.monotonic() - begun)
    p50 = sorted(one_by_one)[len(one_by_one) // 2]
    print(
        f"temporal: {len(sessions)} runs on {len(ran_by)} worker(s), {took:.2f}s submit→all done; "
        f"one run submit→wait p50 {p50 * 1000:.0f} ms"
    )


async def test_a_worker_without_the_agent_fails_the_run_in_the_log_and_the_session_goes_on(
    host: Runtime, workers: Workers
) -> None:
    session = await host.create_session(host.agent_named("bot"))
    wrong = workers.start(TLQ_AGENTS="lead")
    await session.submit("are you there?")
    failed = await session.wait(timeout=60)  # a failure for good is not retried
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and "no agent named 'bot'" in failed.error
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    handle = (await queue.client()).get_workflow_handle(f"taskloom-session-{session.id}")
    ended = await handle.result()  # counts, and the failure cut short: never a growing list
    assert (ended["jobs"], ended["ended"]) == (1, {"failed": 1})
    [why] = ended["failures"]
    assert "no agent named 'bot'" in why and len(why) <= 300
    wrong.close()
    right = workers.start()
    await session.submit()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {right.pid}: are you there?"  # the input was kept


async def test_a_run_asked_for_anyway_is_not_run_again_by_the_retry_of_its_killed_job(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """The job's run names the job in the log; the retried attempt sees it ran."""
    session = await host.create_session(host.agent_named("bot"))
    await session.submit("first turn")
    first = workers.start()
    assert (await session.wait(timeout=60)).status is RunStatus.COMPLETED
    first.close()
    doomed = workers.start(TLT_HANG_AFTER_END="1")
    await session.submit()  # no input: a run asked for anyway (RunDemand.ALWAYS)
    doomed.expect(f"READY ended {session.id}", timeout=60)
    doomed.signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    workers.start()
    result = await session.wait(timeout=90)  # the retried attempt ended the workflow
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {doomed.pid}: first turn"
    entries = await session.entries()
    assert started(entries) == 2  # the first turn's run, and the one asked for: not a third
    assert log_problems(entries) == []


async def test_a_session_s_workflow_continues_as_new_with_the_demands_still_waiting(
    env: dict[str, str], workers: Workers
) -> None:
    from temporalio.client import WorkflowExecutionStatus

    host = host_of(env, wake=False, jobs_per_workflow=1)
    try:
        queue = host.queue
        assert isinstance(queue, TemporalQueue)
        session = await host.create_session(host.agent_named("bot"))
        gate = Path(env["TLQ_EFFECTS"]).parent / "gate"
        worker = workers.start(TLQ_TOOL_GATE=str(gate))
        workflow_id = await session.submit("one")
        worker.expect(f"TOOL {session.id}")
        handle = (await queue.client()).get_workflow_handle(workflow_id)
        first_run = (await handle.describe()).run_id
        await session.submit("two")
        await session.submit("three")
        gate.touch()  # the first activity ends only once both demands wait behind it
        result = await session.wait(timeout=60)
        assert result.status is RunStatus.COMPLETED
        client = await queue.client()
        first = await client.get_workflow_handle(workflow_id, run_id=first_run).describe()
        assert first.status is WorkflowExecutionStatus.CONTINUED_AS_NEW
        heard = " ".join(m.text for m in await session.transcript() if m.role == "user")
        assert all(turn in heard for turn in ("one", "two", "three"))
        assert log_problems(await session.entries()) == []
    finally:
        await host.close()


async def test_a_workflow_waiting_for_a_decision_continues_as_new_and_still_waits(
    env: dict[str, str], workers: Workers, effects: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Demands that come to a parked session (wake-ups) run activities that
    find it still parked; past `jobs_per_workflow` they continue as new, and
    the new run waits for the decision in turn."""
    from temporalio.client import WorkflowExecutionStatus

    monkeypatch.setenv("TLQ_EFFECTS", env["TLQ_EFFECTS"])
    host = host_of(env, wake=False, jobs_per_workflow=1)
    try:
        queue = host.queue
        assert isinstance(queue, TemporalQueue)
        workers.start()
        root = await host.create_session(host.agent_named("direct"))
        workflow_id = await root.submit("Pay it.")
        parked = await root.wait(timeout=60)
        assert parked.status is RunStatus.AWAITING_APPROVAL
        handle = (await queue.client()).get_workflow_handle(workflow_id)
        first_run = (await handle.describe()).run_id
        await queue.wake(root.id)  # news for a parked session: nothing to run
        await queue.wait_idle(root.id, timeout=60)  # waiting again, in a new run
        waiting = await handle.describe()
        assert waiting.status is WorkflowExecutionStatus.RUNNING
        assert waiting.run_id != first_run
        client = await queue.client()
        first = await client.get_workflow_handle(workflow_id, run_id=first_run).describe()
        assert first.status is WorkflowExecutionStatus.CONTINUED_AS_NEW
        await root.approve(parked.pending[0].id)
        await root.submit_resume()
        final = await root.wait(timeout=60)
        assert final.status is RunStatus.COMPLETED and final.text == "done: paid 70"
        assert len([m for m in marks(effects) if m.startswith(f"PAID {root.id} ")]) == 1
        assert log_problems(await root.entries()) == []
    finally:
        await host.close()


async def test_a_drained_run_past_jobs_per_workflow_goes_on_in_a_new_run_of_the_workflow(
    env: dict[str, str], workers: Workers, effects: Path
) -> None:
    """The activity a drain handed back counts against `jobs_per_workflow` too."""
    from temporalio.client import WorkflowExecutionStatus

    host = host_of(env, wake=False, jobs_per_workflow=1)
    try:
        queue = host.queue
        assert isinstance(queue, TemporalQueue)
        session = await host.create_session(host.agent_named("bot"))
        gate = effects.parent / "gate"
        first = workers.start(TLQ_TOOL_GATE=str(gate))
        workflow_id = await session.submit("long job")
        first.expect(f"TOOL {session.id}")
        handle = (await queue.client()).get_workflow_handle(workflow_id)
        first_run = (await handle.describe()).run_id
        first.signal(signal.SIGTERM)  # the run stops once its tool ends

        async def draining() -> bool:
            return "taskloom worker: draining" in first.stderr()

        await until(draining, timeout=30)
        gate.touch()
        assert first.wait(timeout=30) == 0, first.stderr()[-3000:]  # drained to its end
        assert "taskloom worker: stopped" in first.stderr(), first.stderr()[-3000:]
        second = workers.start()
        result = await session.wait(timeout=60)
        assert result.status is RunStatus.COMPLETED, result
        assert result.text == f"done by {second.pid}: long job"
        client = await queue.client()
        was = await client.get_workflow_handle(workflow_id, run_id=first_run).describe()
        assert was.status is WorkflowExecutionStatus.CONTINUED_AS_NEW
        entries = await session.entries()
        assert [f.status for f in finished(entries)] == [RunStatus.STOPPED, RunStatus.COMPLETED]
        assert list(tool_results(entries).values()) == [["touched"]]  # ran once, to its end
        assert log_problems(entries) == []
    finally:
        await host.close()


async def test_a_parked_workflow_asked_often_goes_on_waiting_in_a_new_run_and_still_resumes(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    from temporalio.client import WorkflowExecutionStatus

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    worker = workers.start()
    root = await host.create_session(host.agent_named("direct"))
    workflow_id = await root.submit("Pay it.")
    parked = await root.wait(timeout=60)
    assert parked.status is RunStatus.AWAITING_APPROVAL
    handle = (await queue.client()).get_workflow_handle(workflow_id)
    first = (await handle.describe()).run_id
    # Each wait() is an update in the parked run's history; past the bound
    # the workflow goes on waiting in a new run of itself, still parked.
    for _ in range(520):
        await root.wait(timeout=60)
    latest = await handle.describe()
    assert latest.status is WorkflowExecutionStatus.RUNNING
    assert latest.run_id != first
    assert (await root.wait(timeout=60)).status is RunStatus.AWAITING_APPROVAL
    await root.approve(parked.pending[0].id)
    await root.submit_resume()  # the demand reaches the waiting run
    final = await root.wait(timeout=60)
    assert final.status is RunStatus.COMPLETED, final
    assert len([m for m in marks(effects) if m.startswith(f"PAID {root.id} ")]) == 1
    entries = await root.entries()
    resumed = [e.payload for e in entries if isinstance(e.payload, RunStartedEntry)][-1]
    assert resumed.resume and f"{worker.pid}@" in resumed.by  # the worker resumed it
    assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED


async def test_an_approval_decided_from_another_process_resumes_the_run_on_a_worker(
    host: Runtime, workers: Workers, env: dict[str, str], effects: Path
) -> None:
    import subprocess
    import sys

    from temporalio.client import WorkflowExecutionStatus

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    worker = workers.start()
    root = await host.create_session(host.agent_named("direct"))
    workflow_id = await root.submit("Pay it.")
    parked = await root.wait(timeout=60)  # the run parked: its activity ended
    assert parked.status is RunStatus.AWAITING_APPROVAL
    [call] = parked.pending
    # The session's workflow stays open, waiting for the decision.
    handle = (await queue.client()).get_workflow_handle(workflow_id)
    waiting = await handle.describe()
    assert waiting.status is WorkflowExecutionStatus.RUNNING
    command = [sys.executable, "-m", "taskloom", "approve", root.id, call.id]
    done = await asyncio.to_thread(
        subprocess.run,
        [*command, "--app", "temporal_app:make_runtime"],
        env={**env, "TERM": "dumb"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    final = await root.wait(timeout=60)
    assert final.status is RunStatus.COMPLETED, final
    assert final.text == "done: paid 70"
    assert len([m for m in marks(effects) if m.startswith(f"PAID {root.id} ")]) == 1
    entries = await root.entries()
    assert log_problems(entries) == []
    resumed = [e.payload for e in entries if isinstance(e.payload, RunStartedEntry)][-1]
    assert resumed.resume and f"{worker.pid}@" in resumed.by  # the worker resumed it
    # The same workflow's run took the decision's signal and then completed.
    ended = await handle.describe()
    assert ended.status is WorkflowExecutionStatus.COMPLETED
    assert ended.run_id == waiting.run_id
    assert (await handle.result())["ended"] == {"awaiting_approval": 1, "completed": 1}


async def test_cancelling_a_workflow_waiting_for_a_decision_ends_it_without_a_run(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    from temporalio.client import WorkflowExecutionStatus

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    workers.start()
    root = await host.create_session(host.agent_named("direct"))
    workflow_id = await root.submit("Pay it.")
    parked = await root.wait(timeout=60)
    assert parked.status is RunStatus.AWAITING_APPROVAL
    handle = (await queue.client()).get_workflow_handle(workflow_id)
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    before = await root.entries()
    await handle.cancel()
    await asyncio.wait_for(queue.wait_idle(root.id, timeout=None), 30)
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert await root.entries() == before  # no run, nothing written
    assert not [m for m in marks(effects) if m.startswith(f"PAID {root.id} ")]
    # The decision still resumes the run, in a new workflow.
    await root.approve(parked.pending[0].id)
    await root.submit_resume()
    final = await root.wait(timeout=60)
    assert final.status is RunStatus.COMPLETED and final.text == "done: paid 70"


async def test_the_temporal_server_restarted_mid_run_loses_nothing(
    store_url: tuple[str, str],
    own_temporal_server: TemporalServer,  # noqa: F811
    task_queue: str,
    effects: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = env_for(store_url, own_temporal_server, task_queue, effects)
    monkeypatch.setenv("TLQ_EFFECTS", str(effects))
    workers, host = workers_of(env), host_of(env)
    try:
        session = await host.create_session(host.agent_named("bot"))
        gate = effects.parent / "gate"
        worker = workers.start(TLQ_TOOL_GATE=str(gate))
        await session.submit("through a restart")
        worker.expect(f"TOOL {session.id}")
        before = own_temporal_server.pid
        await asyncio.to_thread(own_temporal_server.restart)  # its SQLite file kept
        assert own_temporal_server.pid != before
        gate.touch()  # the run's tool ends only once the server came back
        result = await session.wait(timeout=90)
        assert result.status is RunStatus.COMPLETED, result
        assert result.text == f"done by {worker.pid}: through a restart"
        entries = await session.entries()
        assert log_problems(entries) == []
        assert list(tool_results(entries).values()) == [["touched"]]  # ran once, to its end
        assert len(marks(effects)) == 1
        await session.submit("and after")  # the worker and the host go on with the server
        assert (await session.wait(timeout=60)).text.endswith("and after")
    finally:
        await host.close()
        workers.close()


async def test_a_server_gone_after_connecting_fails_submit_and_wait_clearly(
    store_url: tuple[str, str],
    own_temporal_server: TemporalServer,  # noqa: F811
    task_queue: str,
    effects: Path,
) -> None:
    import re

    from taskloom.entries import Steer
    from taskloom.errors import StoreUnavailable

    host = host_of(env_for(store_url, own_temporal_server, task_queue, effects))
    try:
        queue = host.queue
        assert isinstance(queue, TemporalQueue)
        session = await host.create_session(host.agent_named("bot"))
        await queue.client()  # connected while the server answered
        await asyncio.to_thread(own_temporal_server.stop)
        said = rf"Temporal server at {re.escape(own_temporal_server.address)} did not answer"
        with pytest.raises(StoreUnavailable, match=said):
            await session.submit("do not lose me")
        with pytest.raises(StoreUnavailable, match=said):
            await queue.wait_idle(session.id, timeout=60)
        pending = [e.payload for e in await session.entries()]
        assert pending == [Steer("do not lose me")]  # the next run folds it in
    finally:
        await host.close()


async def test_a_thousand_round_run_is_one_activity_in_a_short_workflow_history(
    host: Runtime, workers: Workers
) -> None:
    """The workflow carries ids, never transcripts: its history does not grow with rounds."""
    from taskloom.loop import RunOptions

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    workers.start()
    session = await host.create_session(host.agent_named("looper"))
    begun = time.monotonic()
    workflow_id = await session.submit("loop", options=RunOptions(max_rounds=LOOPS + 10))
    result = await session.wait(timeout=300)
    took = time.monotonic() - begun
    assert result.status is RunStatus.COMPLETED, result
    assert (result.text, result.rounds) == (f"looped {LOOPS} rounds", LOOPS)
    history = await (await queue.client()).get_workflow_handle(workflow_id).fetch_history()
    sizes = [e.ByteSize() for e in history.events]
    print(f"temporal: {LOOPS} rounds in {took:.1f}s; {len(sizes)} events, {sum(sizes)} bytes")
    assert len(sizes) < 30 and sum(sizes) < 20_000


async def test_cancelling_the_workflow_cancels_the_run_within_bounded_time(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    from temporalio.client import WorkflowExecutionStatus

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    session = await host.create_session(host.agent_named("bot"))
    worker = workers.start(TLQ_TOOL_SLEEP="600")  # the tool would block for 10 minutes
    workflow_id = await session.submit("cancel me")
    worker.expect(f"TOOL {session.id}")
    handle = (await queue.client()).get_workflow_handle(workflow_id)
    begun = time.monotonic()
    await handle.cancel()  # as the Temporal UI or `temporal workflow cancel` would
    result = await session.wait(timeout=60)
    took = time.monotonic() - begun
    print(f"temporal: cancel -> the run STOPPED and its workflow closed in {took:.1f}s")
    assert result.status is RunStatus.STOPPED, result
    assert result.error is not None and "its Temporal workflow was cancelled" in result.error
    assert took < 20  # a heartbeat (every 2 s / 3) carries the cancel; the run ends at once
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    entries = await session.entries()
    assert log_problems(entries) == []
    assert len(marks(effects)) == 1  # the tool began once, and was not run again
    worker.close()  # its tool would block the new turn for 10 minutes, were it placed there
    again = workers.start()
    await session.submit("and now?")  # a later submit starts a new workflow
    final = await session.wait(timeout=60)
    assert final.status is RunStatus.COMPLETED and final.text.startswith(f"done by {again.pid}")
    calls = [m.split()[1] for m in marks(effects)]
    assert (
        len(calls) == 2 and len(set(calls)) == 2
    )  # the new turn's call; the cancelled one not again


async def test_cancelling_the_workflow_keeps_the_input_submitted_behind_the_run(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """A cancel stops the run in flight, not what was asked meanwhile."""
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    gate = effects.parent / "gate"
    session = await host.create_session(host.agent_named("bot"))
    worker = workers.start(TLQ_TOOL_GATE=str(gate))
    workflow_id = await session.submit("cancel me")
    worker.expect(f"TOOL {session.id}")
    await session.submit("but do this")  # waits in the workflow behind the run
    await (await queue.client()).get_workflow_handle(workflow_id).cancel()

    async def stopped() -> bool:
        return bool(finished(await session.entries()))

    await until(stopped, timeout=30)  # the cancelled run ended before its tool could
    gate.touch()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"done by {worker.pid}: but do this"
    entries = await session.entries()
    assert [f.status for f in finished(entries)] == [RunStatus.STOPPED, RunStatus.COMPLETED]
    assert log_problems(entries) == []


async def test_a_steer_reaches_a_run_in_flight_on_a_worker_at_its_next_boundary(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    gate = effects.parent / "gate"
    session = await host.create_session(host.agent_named("bot"))
    worker = workers.start(TLQ_TOOL_GATE=str(gate))
    await session.submit("first")
    worker.expect(f"TOOL {session.id}")
    await session.steer("second")  # through the store, from this process
    begun = time.monotonic()
    gate.touch()
    result = await session.wait(timeout=60)
    took = time.monotonic() - begun
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"done by {worker.pid}: second"  # folded into the same run
    assert took < 20
    entries = await session.entries()
    assert started(entries) == 1 and log_problems(entries) == []
    assert len(marks(effects)) == 2  # one call per user turn, each once


async def test_a_stop_request_reaches_a_run_in_flight_on_a_worker_at_its_next_boundary(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    gate = effects.parent / "gate"
    session = await host.create_session(host.agent_named("bot"))
    worker = workers.start(TLQ_TOOL_GATE=str(gate))
    workflow_id = await session.submit("go on")
    worker.expect(f"TOOL {session.id}")
    await session.request_stop("enough")
    begun = time.monotonic()
    gate.touch()
    result = await session.wait(timeout=60)
    took = time.monotonic() - begun
    assert result.status is RunStatus.STOPPED, result
    assert took < 20
    entries = await session.entries()
    assert started(entries) == 1 and log_problems(entries) == []
    assert len(marks(effects)) == 1
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    # A graceful stop ends the run, not the workflow's work: it completes.
    handle = (await queue.client()).get_workflow_handle(workflow_id)
    assert (await handle.result())["ended"] == {"stopped": 1}


async def test_a_steer_to_an_idle_session_waits_for_its_next_run(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """As on procrastinate: steering an idle session queues nothing; the
    session's next run folds it in."""
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    worker = workers.start()
    session = await host.create_session(host.agent_named("bot"))
    await session.steer("read this first")
    assert not await queue.carries(session.id)  # no workflow started for it
    assert marks(effects) == []
    await session.submit()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"done by {worker.pid}: read this first"
    entries = await session.entries()
    assert started(entries) == 1 and log_problems(entries) == []


async def test_demands_that_come_during_a_run_wait_merged_into_one(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """Woken many times during one run, a session's workflow keeps one demand
    waiting (what a cancel hands to the next run of the workflow shows it)."""
    import json

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    gate = effects.parent / "gate"
    session = await host.create_session(host.agent_named("bot"))
    worker = workers.start(TLQ_TOOL_GATE=str(gate))
    workflow_id = await session.submit("cancel me")
    worker.expect(f"TOOL {session.id}")
    for _ in range(20):
        await queue.wake(session.id)
    await session.submit("but do this")
    handle = (await queue.client()).get_workflow_handle(workflow_id)
    await handle.cancel()

    async def stopped() -> bool:
        return bool(finished(await session.entries()))

    await until(stopped, timeout=30)
    gate.touch()
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"done by {worker.pid}: but do this"
    history = await handle.fetch_history()  # the latest run's, started by the cancelled one
    started_with = history.events[0].workflow_execution_started_event_attributes.input
    [carried] = [json.loads(p.data) for p in started_with.payloads]
    assert len(carried) == 1  # 21 demands came during the run: one waited


async def test_a_cancel_that_comes_before_the_run_began_stops_it_before_any_tool(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """The cancel reaches the activity while it still reads the session: the run
    it then starts is cancelled as it begins, not left to run its tools."""
    from temporalio.client import WorkflowExecutionStatus

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    session = await host.create_session(host.agent_named("bot"))
    worker = workers.start(TLT_HOLD_GET="1", TLQ_TOOL_SLEEP="600")
    workflow_id = await session.submit("too late")
    worker.expect(f"READY get {session.id}")
    handle = (await queue.client()).get_workflow_handle(workflow_id)
    begun = time.monotonic()
    await handle.cancel()
    result = await session.wait(timeout=60)
    took = time.monotonic() - begun
    assert result.status is RunStatus.STOPPED, result
    assert result.error is not None and "its Temporal workflow was cancelled" in result.error
    assert marks(effects) == []  # the tool never began
    assert took < 10  # not torn down after the cancel's 10 s bound: stopped at once
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert log_problems(await session.entries()) == []


async def test_a_malformed_demand_signalled_from_elsewhere_is_dropped_and_the_session_runs(
    host: Runtime, workers: Workers
) -> None:
    """A `demand` signal taskloom did not write (bad limits) does not stall the
    session's workflow: it is dropped, and the next submit runs."""
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    session = await host.create_session(host.agent_named("bot"))
    client = await queue.client()
    workflow_id = f"taskloom-session-{session.id}"
    bad = {"explicit": True, "limits": {"run_timeout": "soon", "heartbeat_timeout": 2}}
    await client.start_workflow(
        "taskloom.session",
        id=workflow_id,
        task_queue=queue.task_queue,
        start_signal="demand",
        start_signal_args=[bad],
    )
    worker = workers.start()
    await session.submit("still here")  # joins the running workflow
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"done by {worker.pid}: still here"
    assert started(await session.entries()) == 1  # the dropped demand ran nothing


async def test_search_attributes_find_a_session_s_runs_by_session_agent_and_status(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**env, "TLT_SEARCH": "1"}
    monkeypatch.setenv("TLQ_EFFECTS", env["TLQ_EFFECTS"])
    workers, host = workers_of(env), host_of(env)
    try:
        queue = host.queue
        assert isinstance(queue, TemporalQueue) and queue.search_attributes
        workers.start()
        session = await host.create_session(host.agent_named("bot"))
        workflow_id = await session.submit("find me")
        assert (await session.wait(timeout=60)).status is RunStatus.COMPLETED
        client = await queue.client()
        query = (
            f'taskloomSession = "{session.id}" AND taskloomAgent = "bot" '
            'AND taskloomStatus = "completed"'
        )

        async def found() -> bool:  # Temporal's visibility is eventually consistent
            return [w.id async for w in client.list_workflows(query)] == [workflow_id]

        await until(found, timeout=30)
        # A parked run's workflow is found open, by the parked status.
        payer = await host.create_session(host.agent_named("direct"))
        parked_id = await payer.submit("Pay it.")
        assert (await payer.wait(timeout=60)).status is RunStatus.AWAITING_APPROVAL
        parked_query = (
            f'taskloomSession = "{payer.id}" AND taskloomStatus = "awaiting_approval" '
            'AND ExecutionStatus = "Running"'
        )

        async def found_parked() -> bool:
            return [w.id async for w in client.list_workflows(parked_query)] == [parked_id]

        await until(found_parked, timeout=30)
    finally:
        await host.close()
        workers.close()


def test_a_worker_refuses_search_attributes_its_namespace_lacks(
    store_url: tuple[str, str],
    bare_temporal_server: TemporalServer,  # noqa: F811
    task_queue: str,
    effects: Path,
) -> None:
    import subprocess
    import sys

    env = {**env_for(store_url, bare_temporal_server, task_queue, effects), "TLT_SEARCH": "1"}
    args = ["--temporal", env["TLT_ADDRESS"], "--namespace", env["TLT_NAMESPACE"]]
    args += ["--task-queue", task_queue, "--app", "temporal_app:make_runtime"]
    done = subprocess.run(
        [sys.executable, "-m", "taskloom", "worker", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "no keyword search attribute taskloomSession, taskloomAgent, taskloomStatus" in (
        done.stderr
    )
    assert "temporal operator search-attribute create" in done.stderr


async def _reported(runtime: Runtime, parent_id: str) -> bool:
    entries = await runtime.store.load(parent_id)
    return any(
        "report received" in (m.text or "") for m in messages_of(entries) if m.role == "assistant"
    )


async def test_a_background_child_runs_on_a_worker_and_reports_to_its_parent_once(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    workers.start(TLQ_WAKE="1")
    workers.start(TLQ_WAKE="1")
    parent = await host.create_session(host.agent_named("lead"))
    await parent.submit("get help")
    await until(lambda: _reported(host, parent.id), timeout=60)
    result = await parent.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text.startswith("report received by")
    children = await host.store.list(parent_id=parent.id)
    assert len(children) == 1
    child_entries = await host.store.load(children[0].id)
    assert [e.kind for e in child_entries].count("subagent_result") == 1
    assert [m.split()[0] for m in marks(effects)] == [children[0].id]
    parent_entries = await parent.entries()
    # A notice reaches the model delivered with a message of the round it came in.
    delivered = [str(e.data.get("delivered")) for e in parent_entries if e.kind == "message"]
    reports = [d for d in delivered if "finished. Its report" in d]
    assert (
        len(reports) == 1 and children[0].id in reports[0]
    )  # exactly one report reached the parent
    assert log_problems(parent_entries) == []
    # The child ran as a child workflow of its parent's session workflow.
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    client = await queue.client()
    described = await client.get_workflow_handle(f"taskloom-child-{children[0].id}").describe()
    assert described.parent_id == f"taskloom-session-{parent.id}"
    assert await client.get_workflow_handle(described.id).result() == {
        "status": "done",
        "agent": "helper",
    }


async def test_a_child_workflow_outlives_its_parent_s_workflow_and_wakes_it(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """Abandoned, not ended, when its parent's workflow closes: the parent's
    run ends once it spawned the child, its workflow closes, and the child
    goes on to report once, starting the parent's workflow again."""
    from temporalio.client import WorkflowExecutionStatus

    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    gate = effects.parent / "gate"
    worker = workers.start(TLQ_WAKE="1", TLQ_TOOL_GATE=str(gate))
    parent = await host.create_session(host.agent_named("lead"))
    workflow_id = await parent.submit("get help")
    line = worker.expect("TOOL ", timeout=60)  # the child's call, held at the gate
    child_id = line.split()[1]
    client = await queue.client()
    parent_handle = client.get_workflow_handle(workflow_id)
    first_run = (await parent_handle.describe()).run_id
    await client.get_workflow_handle(workflow_id, run_id=first_run).result()  # closed
    child_handle = client.get_workflow_handle(f"taskloom-child-{child_id}")
    running = await child_handle.describe()
    assert running.status is WorkflowExecutionStatus.RUNNING
    assert running.parent_id == workflow_id and running.parent_run_id == first_run
    gate.touch()
    assert await child_handle.result() == {"status": "done", "agent": "helper"}
    await until(lambda: _reported(host, parent.id), timeout=60)
    result = await parent.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert (await parent_handle.describe()).run_id != first_run  # woken: a new run
    parent_entries = await parent.entries()
    delivered = [str(e.data.get("delivered")) for e in parent_entries if e.kind == "message"]
    assert len([d for d in delivered if "finished. Its report" in d]) == 1
    assert [m.split()[0] for m in marks(effects)] == [child_id]


async def test_a_child_a_host_s_own_run_spawns_is_a_workflow_of_its_own(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """Spawned by a run outside any Temporal worker (the host's own), the
    child has no parent workflow to belong to: a top-level workflow."""
    workers.start(TLQ_WAKE="1")
    parent = await host.create_session(host.agent_named("lead"))
    first = await parent.run("get help")  # here, in the host: it spawns the child
    assert first.status is RunStatus.COMPLETED
    (child,) = await host.store.list(parent_id=parent.id)
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    handle = (await queue.client()).get_workflow_handle(f"taskloom-child-{child.id}")
    assert await handle.result() == {"status": "done", "agent": "helper"}
    assert (await handle.describe()).parent_id is None
    await until(lambda: _reported(host, parent.id), timeout=60)  # its report woke the parent
    child_entries = await host.store.load(child.id)
    assert [e.kind for e in child_entries].count("subagent_result") == 1
    assert [m.split()[0] for m in marks(effects)] == [child.id]


async def test_a_child_whose_parent_s_wake_up_failed_for_an_outage_is_retried_and_wakes_it(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    """An outage (here Temporal's, as the child's end wakes its parent) is
    retried: the retry does not run or report the child again, and wakes the parent."""
    worker = workers.start(TLQ_WAKE="1", TLT_WAKE_FAILS="1")
    parent = await host.create_session(host.agent_named("lead"))
    await parent.submit("get help")
    worker.expect("WAKE FAILED", timeout=60)
    await until(lambda: _reported(host, parent.id), timeout=60)
    result = await parent.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"report received by {worker.pid}"
    (child,) = await host.store.list(parent_id=parent.id)
    queue = host.queue
    assert isinstance(queue, TemporalQueue)
    handle = (await queue.client()).get_workflow_handle(f"taskloom-child-{child.id}")
    assert await handle.result() == {"status": "done", "agent": "helper"}  # not failed
    child_entries = await host.store.load(child.id)
    assert [e.kind for e in child_entries].count("subagent_result") == 1
    assert [m.split()[0] for m in marks(effects)] == [child.id]  # its tool ran once
    parent_entries = await parent.entries()
    delivered = [str(e.data.get("delivered")) for e in parent_entries if e.kind == "message"]
    assert len([d for d in delivered if "finished. Its report" in d]) == 1
    assert log_problems(parent_entries) == [] and log_problems(child_entries) == []


async def _killed_mid_child(host: Runtime, workers: Workers, effects: Path) -> tuple[int, int]:
    """One trial: the worker running a background child SIGKILLed inside its tool;
    the child goes on on another worker. (tools run twice, reports the parent got)."""
    parent = await host.create_session(host.agent_named("lead"))
    doomed = workers.start(TLQ_WAKE="1", TLQ_TOOL_SLEEP="600")
    await parent.submit("get help")

    async def touched() -> bool:
        children = await host.store.list(parent_id=parent.id)
        return bool(children) and any(m.startswith(children[0].id) for m in marks(effects))

    await until(touched, timeout=60)
    doomed.signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    other = workers.start(TLQ_WAKE="1")
    await until(lambda: _reported(host, parent.id), timeout=90)
    result = await parent.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"report received by {other.pid}"
    (child,) = await host.store.list(parent_id=parent.id)
    child_entries = await host.store.load(child.id)
    assert [e.kind for e in child_entries].count("subagent_result") == 1
    ran = [m for m in marks(effects) if m.startswith(child.id)]
    assert len(ran) == 1  # the child's tool ran once, on the killed worker
    assert interrupted(child_entries) == [ran[0].split()[1]]
    parent_entries = await parent.entries()
    delivered = [str(e.data.get("delivered")) for e in parent_entries if e.kind == "message"]
    reports = [d for d in delivered if "finished. Its report" in d]
    assert log_problems(parent_entries) == [] and log_problems(child_entries) == []
    other.close()
    return len(ran) - len(set(ran)), len(reports)


async def test_a_worker_killed_mid_child_the_child_reports_once_from_another(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    twice, reports = await _killed_mid_child(host, workers, effects)
    print(f"temporal SIGKILL mid-child: 1 trial, tools run twice {twice}, reports {reports}")
    assert (twice, reports) == (0, 1)


async def _killed_mid_tool(host: Runtime, workers: Workers, effects: Path) -> tuple[int, int]:
    """One trial: a worker SIGKILLed inside the `touch` tool; the run completes on
    another. (tools run twice, calls answered "interrupted")."""
    session = await host.create_session(host.agent_named("bot"))
    doomed = workers.start(TLQ_TOOL_SLEEP="600")
    await session.submit("survive this")
    doomed.expect(f"TOOL {session.id}", timeout=60)

    async def touched() -> bool:  # the tool prints before it leaves its mark
        return any(m.startswith(session.id) for m in marks(effects))

    await until(touched, timeout=30)
    doomed.signal(signal.SIGKILL)
    killed = time.monotonic()
    doomed.wait(timeout=10)
    other = workers.start()
    result = await session.wait(timeout=90)
    # With the other worker's start-up; the heartbeat timeout is 2 s here.
    print(f"SIGKILL -> completed on another worker: {time.monotonic() - killed:.1f}s")
    assert result.status is RunStatus.COMPLETED, result
    assert result.text == f"done by {other.pid}: survive this"
    entries = await session.entries()
    assert log_problems(entries) == []
    ran = [m for m in marks(effects) if m.startswith(session.id)]
    twice = len(ran) - len(set(ran))
    cut = interrupted(entries)
    assert len(ran) == 1 and twice == 0  # the tool ran once, on the killed worker
    assert cut == [ran[0].split()[1]]  # its call was answered "interrupted", not run again
    assert list(tool_results(entries)) == cut
    other.close()
    return twice, len(cut)


async def test_a_worker_killed_mid_tool_the_run_completes_on_another_tool_at_most_once(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    twice, cut = await _killed_mid_tool(host, workers, effects)
    print(f"temporal SIGKILL: 1 trial, tools run twice {twice}, interrupted {cut}")


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_ten_workers_killed_mid_run_and_mid_child_never_run_a_tool_twice(
    host: Runtime, workers: Workers, effects: Path
) -> None:
    totals = [0, 0]
    for trial in range(10):
        twice, cut = await _killed_mid_tool(host, workers, effects)
        totals[0] += twice
        totals[1] += cut
        print(f"trial {trial + 1}: tools run twice {twice}, interrupted {cut}")
    print(f"temporal SIGKILL: 10 trials, tools run twice {totals[0]}, interrupted {totals[1]}")
    assert totals == [0, 10]
    reports = []
    for trial in range(10):
        twice, got = await _killed_mid_child(host, workers, effects)
        totals[0] += twice
        reports.append(got)
        print(f"child trial {trial + 1}: tools run twice {twice}, reports {got}")
    print(f"temporal SIGKILL mid-child: 10 trials, tools run twice {totals[0]}, reports {reports}")
    assert totals[0] == 0 and reports == [1] * 10


def test_a_worker_refuses_a_server_other_than_its_app_s_queue(tmp_path: Path) -> None:
    """`--temporal` must name where the app's hosts submit; Temporal's options need it."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), str(SRC)]),
        "TLT_STORE": f"sqlite:///{tmp_path / 'taskloom.db'}",
        "TLT_SCHEMA": "-",
        "TLT_ADDRESS": "127.0.0.1:7233",
        "TLT_NAMESPACE": "default",
        "TLT_TASK_QUEUE": "agents",
        "TLQ_EFFECTS": str(tmp_path / "effects.txt"),
    }
    worker = [sys.executable, "-m", "taskloom", "worker", "--app", "temporal_app:make_runtime"]
    cases = {
        ("--temporal", "127.0.0.1:9"): "TemporalQueue's address is '127.0.0.1:7233'",
        ("--temporal", "127.0.0.1:7233", "--task-queue", "other"): "task queue is 'agents'",
        ("--namespace", "default"): "--namespace and --task-queue are Temporal's",
    }
    for extra, said in cases.items():
        done = subprocess.run(
            [*worker, *extra], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2, (extra, done.stderr)
        assert said in done.stderr, (extra, done.stderr)


async def test_a_queue_on_a_connected_client_reaches_the_same_workers(
    host: Runtime, workers: Workers, env: dict[str, str]
) -> None:
    from temporalio.client import Client

    from taskloom.runtime import RunDemand

    client = await Client.connect(env["TLT_ADDRESS"], namespace=env["TLT_NAMESPACE"])
    queue = TemporalQueue(client, task_queue=env["TLT_TASK_QUEUE"])
    assert (queue.address, queue.namespace) == (env["TLT_ADDRESS"], env["TLT_NAMESPACE"])
    assert await queue.client() is client
    session = await host.create_session(host.agent_named("bot"))
    worker = workers.start()
    await queue.submit_run(session.id, RunDemand.ALWAYS, reason="submit", options=None)
    await queue.wait_idle(session.id, timeout=60)
    result = await session.wait(timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.text == f"done by {worker.pid}: "  # run without input, on what it has
    assert await queue.carries(session.id)  # its runs' workflow ran here
    never = await host.create_session(host.agent_named("bot"))
    assert not await queue.carries(never.id)
    await asyncio.wait_for(queue.wait_idle(never.id, timeout=None), 10)  # no workflow: idle
    await queue.close()


def test_without_the_extra_making_a_temporal_queue_says_how_to_install_it() -> None:
    import subprocess
    import sys

    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['temporalio'] = None\n"
            "from taskloom.distributed import TemporalQueue\n"
            "from taskloom.errors import ConfigurationError\n"
            "try:\n"
            "    TemporalQueue('127.0.0.1:7233')\n"
            "except ConfigurationError as exc:\n"
            "    print(exc)\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
    )
    assert made.returncode == 0, made.stderr
    assert "TemporalQueue needs the temporal extra" in made.stdout
    assert "pip install 'taskloom[temporal]'" in made.stdout


async def test_an_unreachable_server_fails_the_submit_clearly_and_keeps_the_input() -> None:
    from taskloom import Agent
    from taskloom.entries import Steer
    from taskloom.errors import StoreUnavailable
    from taskloom.models import ScriptedModel

    queue = TemporalQueue("127.0.0.1:1")
    async with Runtime(queue=queue) as runtime:
        session = await runtime.create_session(Agent("bot", ScriptedModel([])))
        with pytest.raises(StoreUnavailable, match=r"Temporal server at 127\.0\.0\.1:1 cannot"):
            await session.submit("do not lose me")
        pending = [e.payload for e in (await session.entries())]
        assert pending == [Steer("do not lose me")]  # the next run folds it in
