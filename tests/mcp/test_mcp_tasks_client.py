"""Tool calls that MCP servers run as tasks: the call returns at once, the
task is polled in the background, and its result reaches the model at the
next round boundary, once."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from npm_servers import everything_entry
from tasks_support import mcp_tasks

from taskloom import Agent, Runtime
from taskloom.events import ToolProgress, WorkFinished
from taskloom.mcp import MCPServer
from taskloom.models import FunctionModel, ModelRequest, reply

pytestmark = pytest.mark.slow


def _said(request: ModelRequest) -> str:
    return "\n".join(m.text for m in request.messages if m.role == "user")


def _news(request: ModelRequest) -> str:
    """What the user side said since the model last spoke."""
    tail: list[str] = []
    for message in reversed(request.messages):
        if message.role == "assistant":
            break
        tail.append(message.text)
    return "\n".join(tail)


async def test_the_reference_servers_task_tool_runs_in_the_background() -> None:
    entry = everything_entry()
    node = shutil.which("node")
    assert node is not None
    server = MCPServer.stdio(
        node, [str(entry), "stdio"], name="everything", approval="never", task_after=0.5
    )

    def assistant(request: ModelRequest):  # type: ignore[no-untyped-def]
        if len(request.messages) == 1 and "research" in request.messages[0].text:
            return reply(tool_calls=[("simulate-research-query", {"topic": "tides"})])
        if "Research Report: tides" in _news(request):
            return reply("The report is in.")
        return reply("Waiting for the report.")

    model = FunctionModel(assistant)
    events: list[object] = []
    async with Runtime() as runtime:
        finished = asyncio.Event()

        def seen(event: object) -> None:
            events.append(event)
            if isinstance(event, WorkFinished):
                finished.set()

        runtime.background.emit = seen
        session = await runtime.create_session(Agent("scholar", model, tools=[server]))
        first = await session.run("Please research tides.", emit=events.append)
        # The tool answered at once: the task went on in the background.
        started = [r for m in await session.transcript() for r in m.results]
        assert len(started) == 1
        assert started[0].content.startswith("started mcp_task-")
        assert first.text == "Waiting for the report."
        assert len(await mcp_tasks(runtime, session.id)) == 1

        await asyncio.wait_for(finished.wait(), 60)
        second = await session.run("Anything new?")
        third = await session.run("And now?")
        pending = await runtime.background.inbox.pending(session.id)
        ended = [t for t in await mcp_tasks(runtime, session.id) if t.status is not None]

    assert pending == []
    assert second.text == "The report is in."
    assert third.text == "Waiting for the report."
    # Delivered once: the last request holds the report once, in the history.
    assert _said(model.requests[-1]).count("Research Report: tides") == 1
    assert [e.status for e in ended] == ["done"]
    # The stages the server reported reached the run's events while it ran.
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert progress, "no progress reached the events"
