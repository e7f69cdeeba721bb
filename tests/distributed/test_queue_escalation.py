"""An escalated approval across processes: a background child on a queue
worker parks on a gated call, which shows among its root's pending
approvals; the CLI, in another process, approves it; a worker resumes the
child, which runs the call once and reports to the root once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from queue_support import Workers, host_runtime, marks, worker_env

from pg import PG_DSN, requires_postgres
from taskloom import RunStatus, Runtime
from taskloom.delegation import ChildStatus, child_status
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


async def test_the_cli_approves_a_workers_escalated_call_and_the_child_finishes(
    host: Runtime, workers: Workers, pg_schema: str, effects: Path
) -> None:
    workers.start()
    workers.start()
    root = await host.create_session(host.agent_named("treasurer"))
    first = await root.run("Pay the invoice.")
    assert first.text == "a worker is paying"
    deadline = time.monotonic() + 30
    while not (pending := await root.pending()):
        assert time.monotonic() < deadline, "the child never escalated"
        await asyncio.sleep(0.05)
    [call] = pending
    assert (call.name, call.arguments) == ("pay", {"amount": 70}) and call.session_id
    assert await child_status(host, call.session_id) is ChildStatus.AWAITING_APPROVAL
    assert not any(m.startswith("PAID") for m in marks(effects))
    # Another process decides, naming the root and the call (as `sessions show` prints).
    env = worker_env(PG_DSN, pg_schema, effects)
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "taskloom",
            "approve",
            root.id,
            call.id,
            "--app",
            "queue_app:make_runtime",
        ],
        env={**env, "TERM": "dumb"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "approved" in done.stdout
    deadline = time.monotonic() + 30
    while (await child_status(host, call.session_id)) is not ChildStatus.DONE:
        assert time.monotonic() < deadline, "the child did not finish after the approval"
        await asyncio.sleep(0.05)
    while not await host.background.inbox.pending(root.id):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    final = await root.run("Done?")
    assert final.text == "report: done: paid 70"
    paid = [m for m in marks(effects) if m.startswith("PAID")]
    delivered = [
        i
        for e in await root.entries()
        if isinstance(e.payload, MessageEntry)
        for i in e.payload.delivered_ids
    ]
    print(f"payments: {paid}; delivered: {delivered}")
    assert len(paid) == 1 and delivered == [f"subagent:{call.session_id}"]
    assert await root.pending() == []
    assert os.environ.get("TLQ_EFFECTS") == str(effects)


async def test_a_store_only_decision_hands_a_workers_child_back_to_the_queue(
    host: Runtime, workers: Workers, pg_schema: str, effects: Path
) -> None:
    """`taskloom approve ROOT CALL --store URL`, no --app: the command cannot
    run the child's tools, but the store's database holds the work queue the
    child ran on, so the child goes back to it and a worker runs it on."""
    workers.start()
    root = await host.create_session(host.agent_named("treasurer"))
    assert (await root.run("Pay the invoice.")).text == "a worker is paying"
    deadline = time.monotonic() + 30
    while not (pending := await root.pending()):
        assert time.monotonic() < deadline, "the child never escalated"
        await asyncio.sleep(0.05)
    [call] = pending
    env = worker_env(PG_DSN, pg_schema, effects)
    # The schema reaches the command as it would any libpq client's.
    env = {**env, "TERM": "dumb", "PGOPTIONS": f"-c search_path={pg_schema}"}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "taskloom", "approve", root.id, call.id, "--store", PG_DSN],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert "handed to the work queue" in done.stdout
    assert "has no tool" not in done.stderr
    deadline = time.monotonic() + 30
    while (await child_status(host, call.session_id)) is not ChildStatus.DONE:
        assert time.monotonic() < deadline, "no worker took the child up after the approval"
        await asyncio.sleep(0.05)
    while not await host.background.inbox.pending(root.id):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    final = await root.run("Done?")
    assert final.text == "report: done: paid 70"
    paid = [m for m in marks(effects) if m.startswith("PAID")]
    delivered = [
        i
        for e in await root.entries()
        if isinstance(e.payload, MessageEntry)
        for i in e.payload.delivered_ids
    ]
    print(f"payments: {paid}; delivered: {delivered}")
    assert len(paid) == 1 and delivered == [f"subagent:{call.session_id}"]


async def test_a_store_only_decision_queues_a_parked_root_that_runs_on_workers(
    host: Runtime, workers: Workers, pg_schema: str, effects: Path
) -> None:
    """A root run by a worker parks on its inline child's escalated call;
    `taskloom approve ROOT CALL --store URL` (no --app: it cannot run the
    tools) queues the root's resume, and a worker runs the child on (its
    payment made once), then the root, which completes on the child's answer."""
    workers.start()
    root = await host.create_session(host.agent_named("cashier"))
    await root.submit("Pay it.")
    parked = await root.wait(timeout=30)
    assert parked.status is RunStatus.AWAITING_APPROVAL
    [call] = parked.pending
    assert call.name == "pay" and call.origin.startswith("payer#")
    env = worker_env(PG_DSN, pg_schema, effects)
    env = {**env, "TERM": "dumb", "PGOPTIONS": f"-c search_path={pg_schema}"}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "taskloom", "approve", root.id, call.id, "--store", PG_DSN],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert "queued for a worker" in done.stdout
    final = await root.wait(timeout=30)
    assert final.status is RunStatus.COMPLETED, final
    assert json.loads(final.text.removeprefix("cashier: "))["answer"] == "done: paid 70"
    paid = [m for m in marks(effects) if m.startswith(f"PAID {call.session_id} ")]
    assert len(paid) == 1, paid
    assert await child_status(host, call.session_id) is ChildStatus.DONE


async def test_a_store_only_decision_on_a_roots_own_call_queues_its_resume(
    host: Runtime, workers: Workers, pg_schema: str, effects: Path
) -> None:
    """A root run by a worker parks on its own gated call; `taskloom approve
    ROOT CALL --store URL` queues its resume (rather than naming a resume to
    run), and a worker pays once and completes it."""
    workers.start()
    root = await host.create_session(host.agent_named("direct"))
    await root.submit("Pay it.")
    parked = await root.wait(timeout=30)
    assert parked.status is RunStatus.AWAITING_APPROVAL
    [call] = parked.pending
    env = worker_env(PG_DSN, pg_schema, effects)
    env = {**env, "TERM": "dumb", "PGOPTIONS": f"-c search_path={pg_schema}"}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "taskloom", "approve", root.id, call.id, "--store", PG_DSN],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert f"session {root.id} goes on: queued for a worker" in done.stdout
    assert "taskloom resume" not in done.stdout
    final = await root.wait(timeout=30)
    assert final.status is RunStatus.COMPLETED, final
    assert final.text == "done: paid 70"
    assert len([m for m in marks(effects) if m.startswith(f"PAID {root.id} ")]) == 1
