"""Served MCP tasks keep their promises across processes, on SQLite and
PostgreSQL, with the real `taskloom mcp serve` and the official client: a
run cut off by SIGTERM or SIGKILL is run on by the restarted server;
`tasks/cancel` cancels within 2 s, for good; a call approved with `taskloom
approve` in another process resumes the task, with nobody reading it."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from test_mcp_tasks_serve import Anything, Cancel, Created, Get, TaskId, Tasks

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from served_processes import ServedProcess, approve_from_the_cli
from served_task_agent import IN_FLIGHT
from taskloom import Runtime
from taskloom.entries import Entry, RunFinishedEntry
from taskloom.log import SessionLog
from taskloom.results import RunStatus

pytestmark = pytest.mark.slow


async def _create(url: str, task: str) -> str:
    async with Client(url, extensions=[Tasks()]) as client:
        await client.list_tools()
        made = await client.session.call_tool("clerk", {"task": task}, allow_claimed=True)
    assert isinstance(made, Created)
    return made.task_id


async def _get(client: Client, task_id: str) -> dict[str, Any]:
    got = await client.session.send_request(Get(params=TaskId(task_id=task_id)), Anything)
    return got.model_dump(by_alias=True)


async def _until(url: str, task_id: str, status: str, timeout: float = 30) -> dict[str, Any]:
    async with Client(url, extensions=[Tasks()]) as client:
        deadline = time.monotonic() + timeout
        while True:
            data = await _get(client, task_id)
            if data["status"] == status or time.monotonic() > deadline:
                assert data["status"] == status, data
                return data
            await asyncio.sleep(0.05)


async def _entries(url: str, schema: str, task_id: str) -> list[Entry]:
    """The served session's log, read by this process (not the server)."""
    async with Runtime(store=open_durable(url, schema)) as runtime:
        return await runtime.store.load(task_id)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_run_cut_off_by_a_restart_completes_after_it(
    tmp_path: Path, store_url: tuple[str, str], sig: signal.Signals
) -> None:
    url, schema = store_url
    server = ServedProcess("mcp", url, schema, tmp_path)
    try:
        task_id = await _create(server.start(), "hello")
        await server.said(IN_FLIGHT)  # the model call is in progress
        server.signal(sig)
        server.gate.touch()
        again = server.start()
        # Run on at the server's start, before any client asks.
        await server.said(IN_FLIGHT)
        done = await _until(again, task_id, "completed")
    finally:
        server.stop()
    assert done["result"]["content"][0]["text"] == "answer: hello"


async def test_cancel_reads_cancelled_within_2s_and_stays_so(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    server = ServedProcess("mcp", url, schema, tmp_path)
    try:
        served = server.start()
        task_id = await _create(served, "hello")
        await server.said(IN_FLIGHT)
        async with Client(served, extensions=[Tasks()]) as client:
            began = time.monotonic()
            await client.session.send_request(Cancel(params=TaskId(task_id=task_id)), Anything)
            answered = time.monotonic() - began
            status = (await _get(client, task_id))["status"]
            took = time.monotonic() - began
            server.gate.touch()  # the model could answer now: nothing may complete the task
            await asyncio.sleep(1.0)
            later = (await _get(client, task_id))["status"]
    finally:
        server.stop()
    print(f"tasks/cancel answered in {answered:.2f}s, read cancelled at {took:.2f}s")
    assert status == "cancelled"
    assert took < 2
    assert later == "cancelled"
    ends = [e for e in await _entries(url, schema, task_id) if e.kind == RunFinishedEntry.KIND]
    assert all(e.payload.status is not RunStatus.COMPLETED for e in ends)


async def test_an_approval_from_the_cli_resumes_the_task_with_nobody_reading(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    server = ServedProcess("mcp", url, schema, tmp_path)
    try:
        served = server.start()
        task_id = await _create(served, "pay the rent")
        await _until(served, task_id, "input_required")
        [call] = SessionLog.folded(await _entries(url, schema, task_id)).undecided_calls()
        said = await asyncio.to_thread(approve_from_the_cli, url, schema, task_id, call.id)
        assert f"approved {call.id}" in said
        # No client reads the task: the server's look finds the decision.
        for _ in range(100):
            log = SessionLog.folded(await _entries(url, schema, task_id))
            if not log.run_open and log.finished_result(task_id) is not None:
                result = log.finished_result(task_id)
                if result is not None and result.status is RunStatus.COMPLETED:
                    break
            await asyncio.sleep(0.1)
        done = await _until(served, task_id, "completed", timeout=0)
    finally:
        server.stop()
    assert result is not None and result.status is RunStatus.COMPLETED
    assert done["result"]["content"][0]["text"] == "done: paid 600"


async def test_a_task_killed_right_after_its_creation_is_run_on_after_a_restart(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    """The task's input is durable once the task exists: a server SIGKILLed
    the moment it answered the creation (its run may not have begun) runs
    the task on after its restart."""
    url, schema = store_url
    trials, lost = 5, 0
    for trial in range(trials):
        server = ServedProcess("mcp", url, schema, tmp_path / str(trial))
        (tmp_path / str(trial)).mkdir()
        try:
            task_id = await _create(server.start(), f"hello {trial}")
            server.signal(signal.SIGKILL)
            again = server.start()
            server.gate.touch()
            async with Client(again, extensions=[Tasks()]) as client:
                deadline = time.monotonic() + 30
                while (data := await _get(client, task_id))["status"] not in (
                    "completed",
                    "failed",
                ):
                    assert time.monotonic() < deadline, data
                    await asyncio.sleep(0.05)
        finally:
            server.stop()
        if data["status"] != "completed":
            lost += 1
        else:
            assert data["result"]["content"][0]["text"] == f"answer: hello {trial}"
    print(f"{trials} servers killed right after creating a task: {lost} tasks lost")
    assert lost == 0
