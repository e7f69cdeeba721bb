"""The public task helpers of `taskloom.mcp` (`TasksClient`, `start_task`,
`get_task`, `cancel_task`, `update_task`) drive a served agent's tasks from
the official SDK's own `Client`, in both revisions, against the real
`taskloom mcp serve` on SQLite and PostgreSQL: what a user's client does
(docs/howto/mcp-task-client.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import mcp_types as types
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from pg import pg_schema  # noqa: F401 (fixture)
from served_processes import ServedProcess
from served_task_agent import IN_FLIGHT
from taskloom.mcp import TasksClient, TaskState, cancel_task, get_task, start_task, update_task

pytestmark = pytest.mark.slow


async def _until(client: Client, task: TaskState, *statuses: str) -> TaskState:
    for _ in range(300):
        if task.status in statuses:
            return task
        await asyncio.sleep(0.05)
        task = await get_task(client, task.task_id)
    raise AssertionError(f"task {task.task_id} never became {statuses}: {task}")


def _text(task: TaskState) -> str:
    assert task.result is not None, task
    block = task.result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_the_helpers_start_read_cancel_and_approve_served_tasks(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    server = ServedProcess("mcp", url, schema, tmp_path)
    try:
        served = server.start()
        async with Client(served, extensions=[TasksClient()]) as client:
            assert client.protocol_version == "2026-07-28"
            await client.list_tools()
            # Its model call waits for the gate: cancelled in flight.
            slow = await start_task(client, "clerk", {"task": "hello"})
            assert isinstance(slow, TaskState) and slow.status == "working", slow
            assert slow.poll == 0.5
            await server.said(IN_FLIGHT)
            await cancel_task(client, slow.task_id)
            cancelled = await _until(client, slow, "cancelled")
            assert cancelled.result is None

            server.gate.touch()
            done = await _until(
                client, await start_task(client, "clerk", {"task": "hi"}), "completed"
            )
            assert _text(done) == "answer: hi"

            # Approved in the protocol: the task's input request, answered.
            parked = await _until(
                client,
                await start_task(client, "clerk", {"task": "pay the rent"}),
                "input_required",
            )
            assert parked.input_requests is not None
            [(call_id, asked)] = parked.input_requests.items()
            assert asked["method"] == "elicitation/create"
            yes = types.ElicitResult(action="accept", content={"approve": True})
            await update_task(client, parked.task_id, {call_id: yes})
            paid = await _until(client, parked, "completed", "failed", "cancelled")
            assert _text(paid) == "done: paid 600"

            # Declined: the call is denied, never run.
            parked = await _until(
                client, await start_task(client, "clerk", {"task": "pay the gas"}), "input_required"
            )
            assert parked.input_requests is not None
            no = types.ElicitResult(action="decline")
            await update_task(client, parked.task_id, dict.fromkeys(parked.input_requests, no))
            denied = await _until(client, parked, "completed", "failed", "cancelled")
            assert "denied" in _text(denied) and "paid 600" not in _text(denied)

            # The extension makes a plain call_tool wait for the task's end.
            plain = await client.call_tool("clerk", {"task": "plainly"})
            assert plain.content[0].text == "answer: plainly"  # type: ignore[union-attr]

            with pytest.raises(MCPError) as unknown:
                await get_task(client, "no-such-task")
            assert unknown.value.code == types.INVALID_PARAMS

        # 2025-11-25: the same helpers, the result fetched with tasks/result.
        async with Client(served, mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            await client.list_tools()
            task = await start_task(client, "clerk", {"task": "of old"})
            assert isinstance(task, TaskState)
            done = await _until(client, task, "completed")
            assert _text(done) == "answer: of old"
    finally:
        server.stop()
