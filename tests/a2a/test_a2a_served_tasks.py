"""Served A2A tasks keep their promises across processes, on SQLite and
PostgreSQL, with the real `taskloom a2a serve` and the a2a-sdk's client: a
run cut off by SIGTERM or SIGKILL is run on by the restarted server; cancel
cancels within 2 s, for good; a call approved with `taskloom approve` in
another process resumes the task; replies to a parked task decide only when
they are a clear yes/no or a structured decision."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a_support import client_for, user_message
from google.protobuf import struct_pb2

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from served_processes import ServedProcess, approve_from_the_cli
from served_task_agent import IN_FLIGHT
from taskloom import Runtime
from taskloom.entries import ApprovalDecision, Entry, RunFinishedEntry
from taskloom.log import SessionLog
from taskloom.results import RunStatus

pytest.importorskip("a2a")
pytestmark = pytest.mark.slow

WORKING = TaskState.TASK_STATE_WORKING
PARKED = TaskState.TASK_STATE_INPUT_REQUIRED
DONE = TaskState.TASK_STATE_COMPLETED


async def _working(stream: AsyncIterator[StreamResponse]) -> str:
    """The task id of a streamed send, once the task works."""
    async for response in stream:
        update = response.status_update
        if response.HasField("status_update") and update.status.state == WORKING:
            return update.task_id
    raise AssertionError("the task never worked")


async def _start_slow_task(url: str, text: str) -> str:
    """Send `text` (a slow model call), return the task id once it works."""
    async with client_for(url, streaming=True) as client:
        stream = client.send_message(user_message(text))
        task_id = await _working(stream)
        await stream.aclose()
        return task_id


async def _until(url: str, task_id: str, state: TaskState, timeout: float = 30) -> Task:
    async with client_for(url) as client:
        deadline = time.monotonic() + timeout
        while True:
            got = await client.get_task(GetTaskRequest(id=task_id))
            if got.status.state == state or time.monotonic() > deadline:
                assert got.status.state == state, got
                return got
            await asyncio.sleep(0.05)


async def _send(url: str, message: Message | SendMessageRequest) -> Task:
    request = (
        message if isinstance(message, SendMessageRequest) else SendMessageRequest(message=message)
    )
    async with client_for(url) as client:
        responses = [r async for r in client.send_message(request)]
    tasks = [r.task for r in responses if r.HasField("task")]
    assert tasks, responses
    return tasks[-1]


async def _entries(url: str, schema: str, task_id: str) -> list[Entry]:
    """The served session's log, read by this process (not the server)."""
    async with Runtime(store=open_durable(url, schema)) as runtime:
        return await runtime.store.load(task_id)


async def _waiting(url: str, schema: str, task_id: str) -> list[str]:
    """The ids of the served session's undecided calls."""
    log = SessionLog.folded(await _entries(url, schema, task_id))
    return [c.id for c in log.undecided_calls()]


def _reply(task: Task, text: str = "", data: dict[str, object] | None = None) -> Message:
    part = Part(text=text)
    if data is not None:
        value = struct_pb2.Value()
        value.struct_value.update(data)
        part = Part(data=value)
    return Message(
        message_id=f"m-{time.monotonic_ns()}",
        role=Role.ROLE_USER,
        parts=[part],
        task_id=task.id,
        context_id=task.context_id,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_run_cut_off_by_a_restart_completes_after_it(
    tmp_path: Path, store_url: tuple[str, str], sig: signal.Signals
) -> None:
    url, schema = store_url
    server = ServedProcess("a2a", url, schema, tmp_path)
    try:
        first = server.start()
        async with client_for(first, streaming=True) as client:
            # The client's stream stays open: the server must end anyway.
            stream = client.send_message(user_message("hello"))
            task_id = await _working(stream)
            await server.said(IN_FLIGHT)  # the model call is in progress
            server.signal(sig)
            with contextlib.suppress(Exception):
                await stream.aclose()
        server.gate.touch()
        again = server.start()
        # Run on at the server's start, before any client asks.
        await server.said(IN_FLIGHT)
        got = await _until(again, task_id, DONE)
    finally:
        server.stop()
    assert [p.text for a in got.artifacts for p in a.parts] == ["answer: hello"]


async def test_cancel_reads_cancelled_within_2s_and_stays_so(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    server = ServedProcess("a2a", url, schema, tmp_path)
    try:
        served = server.start()
        task_id = await _start_slow_task(served, "hello")
        await server.said(IN_FLIGHT)
        began = time.monotonic()
        async with client_for(served) as client:
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        await _until(served, task_id, TaskState.TASK_STATE_CANCELED, timeout=2)
        took = time.monotonic() - began
        server.gate.touch()  # the model could answer now: nothing may complete the task
        await asyncio.sleep(1.0)
        got = await _until(served, task_id, TaskState.TASK_STATE_CANCELED, timeout=0)
    finally:
        server.stop()
    print(f"cancelled in {took:.2f}s")
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert took < 2
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    ends = [e for e in await _entries(url, schema, task_id) if e.kind == RunFinishedEntry.KIND]
    assert all(e.payload.status is not RunStatus.COMPLETED for e in ends)


async def test_replies_and_decisions_made_elsewhere_resume_a_parked_task(
    tmp_path: Path, store_url: tuple[str, str]
) -> None:
    url, schema = store_url
    server = ServedProcess("a2a", url, schema, tmp_path)
    try:
        served = server.start()
        # Approved with `taskloom approve` in another process: tasks/get
        # then reads the resumed run, never the stale question.
        parked = await _send(served, user_message("pay the rent"))
        assert parked.status.state == PARKED
        [call_id] = await _waiting(url, schema, parked.id)
        said = await asyncio.to_thread(approve_from_the_cli, url, schema, parked.id, call_id)
        assert f"approved {call_id}" in said
        async with client_for(served) as client:
            after = await client.get_task(GetTaskRequest(id=parked.id))
        assert after.status.state in (WORKING, DONE)
        done = await _until(served, parked.id, DONE)
        assert done.artifacts[0].parts[0].text == "done: paid 600"

        # "go ahead" is no clear yes: the question again, nothing decided.
        second = await _send(served, user_message("pay the gas"))
        asked = await _send(served, _reply(second, "go ahead"))
        assert asked.status.state == PARKED
        assert 'pay({"amount": 600})' in asked.status.message.parts[0].text
        still = await _until(served, second.id, PARKED, timeout=0)
        assert 'pay({"amount": 600})' in still.status.message.parts[0].text
        # "yes" approves.
        finished = await _send(served, _reply(second, "Yes!"))
        assert finished.status.state == DONE
        assert finished.artifacts[0].parts[0].text == "done: paid 600"

        # A structured decision, per call.
        third = await _send(served, user_message("pay the phone"))
        [call] = await _waiting(url, schema, third.id)
        decision = {"decisions": {call: {"approve": False, "note": "too dear"}}}
        denied = await _send(served, _reply(third, data=decision))
        assert denied.status.state == DONE
        answer = denied.artifacts[0].parts[0].text
        assert "too dear" in answer and "paid" not in answer

        # A decision sent to a task that is not parked is refused, saying
        # why: never answered completed, and the task goes on.
        task_id = await _start_slow_task(served, "hello")
        await server.said(IN_FLIGHT)
        with pytest.raises(Exception, match="nothing waits for a decision"):
            await _send(served, _reply(Task(id=task_id, context_id=""), "yes"))
        await _until(served, task_id, WORKING, timeout=0)
        server.gate.touch()
        await _until(served, task_id, DONE)
    finally:
        server.stop()
    decisions = [
        e.payload for e in await _entries(url, schema, second.id) if e.kind == ApprovalDecision.KIND
    ]
    assert [(d.approved, d.note) for d in decisions] == [(True, "Yes!")]
