"""A hostile MCP server is not believed: a `tasks/get` answer about another
task is never delivered as this task's result, and a server that asks a new
question on every poll cannot grow the session's log without end; each
fails the task with a message saying why."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from input_app import greeter
from tasks_support import mcp_tasks
from test_mcp_tasks_input import Asking

from pg import open_durable, pg_schema  # noqa: F401 (fixture)
from taskloom import Runtime
from taskloom.background import MAX_QUESTIONS
from taskloom.events import WorkFinished

pytestmark = pytest.mark.slow

STRANGER = "a stranger's result"


@pytest.fixture
def liar(tmp_path: Path) -> Iterator[Asking]:
    server = Asking(tmp_path, "liar")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pester(tmp_path: Path) -> Iterator[Asking]:
    server = Asking(tmp_path, "pester")
    try:
        yield server
    finally:
        server.stop()


async def _followed(runtime: Runtime) -> tuple[list[WorkFinished], asyncio.Event]:
    finished: list[WorkFinished] = []
    ended = asyncio.Event()

    def seen(event: object) -> None:
        if isinstance(event, WorkFinished):
            finished.append(event)
            ended.set()

    runtime.background.emit = seen
    return finished, ended


async def test_an_answer_about_another_task_is_a_protocol_error(
    liar: Asking, store_url: tuple[str, str]
) -> None:
    async with Runtime(store=open_durable(*store_url)) as runtime:
        finished, ended = await _followed(runtime)
        session = await runtime.create_session(greeter(liar.url))
        await session.run("Greet someone.")
        await asyncio.wait_for(ended.wait(), 30)
        await session.run("Any news?")
        [task] = await mcp_tasks(runtime, session.id)
        transcript = "\n".join(m.text for m in await session.transcript())

    [notice] = finished
    assert "protocol error" in notice.text and "'someone-else'" in notice.text
    assert task.status == "failed"
    assert STRANGER not in transcript and STRANGER not in notice.text
    assert "protocol error" in transcript


async def test_a_server_asking_on_every_poll_cannot_grow_the_log(
    pester: Asking, store_url: tuple[str, str]
) -> None:
    async with Runtime(store=open_durable(*store_url)) as runtime:
        finished, ended = await _followed(runtime)
        session = await runtime.create_session(greeter(pester.url))
        await session.run("Greet someone.")
        await asyncio.wait_for(ended.wait(), 30)
        # The server goes on asking whoever polls; nobody does any more.
        await asyncio.sleep(8)
        entries = await session.entries()
        pending = await session.pending_input()
        [task] = await mcp_tasks(runtime, session.id)

    print(f"\nlog entries after 8 s of a server asking on every poll: {len(entries)}")
    assert len(entries) < 100
    [notice] = finished
    assert f"more than {MAX_QUESTIONS} questions" in notice.text
    assert task.status == "failed"
    # The questions of the failed task are closed: nobody waits for them.
    assert pending == []
